"""Issue 8, item 7: in JupyterLab a module's `.py` opens as a notebook and saves back to the `.py`.

A real JupyterLab server on localhost (the one `pip install -e ".[lab]"` installs, with
jupytext's server extension), driven through its REST contents API exactly as the
JupyterLab front end drives it: open the notebook, change a cell, save. No mocks.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from tito.export import export_modules

NOTEBOOK = "modules/01_tensor/tensor_dev.py"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict | str]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode("utf-8")
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text


@contextmanager
def jupyterlab(root: Path, home: Path):
    """JupyterLab serving `root`, with its own config, data and runtime folders under `home`."""
    token, port = secrets.token_hex(16), _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "config" / "lab"))
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = open(home / "server.log", "w+", encoding="utf-8")
    process = subprocess.Popen(command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", token)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                server.request("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError) as err:
                log.seek(0)
                assert process.poll() is None, f"JupyterLab exited: {log.read()[-3000:]}"
                assert time.monotonic() < deadline, f"JupyterLab did not answer in 120 s ({err})"
                time.sleep(0.3)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_a_module_opens_as_a_notebook_and_saves_back_to_its_py(course, tmp_path):
    notebook = course.root / NOTEBOOK
    original = notebook.read_text(encoding="utf-8")
    with jupyterlab(course.root, tmp_path) as server:
        status, page = server.request("GET", "/lab")
        assert status == 200 and "JupyterLab" in page  # the front end itself is installed and served

        status, model = server.request("GET", f"/api/contents/{NOTEBOOK}?type=notebook&content=1")
        assert status == 200 and model["type"] == "notebook"
        cells = model["content"]["cells"]
        assert len(cells) > 10 and cells[0]["cell_type"] == "markdown"
        index = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and "#| export" in c["source"])
        cells[index]["source"] += "\nEDITED_IN_JUPYTER = 1"
        # What the front end sends back after running a cell: outputs, counts, its own metadata.
        cells[index].update(execution_count=3, outputs=[{"output_type": "stream", "name": "stdout", "text": "hi\n"}])
        cells[index]["metadata"] = {"trusted": True, "execution": {"iopub.status.idle": "2026-01-01T00:00:00Z"}}

        status, saved = server.request("PUT", f"/api/contents/{NOTEBOOK}", {
            "type": "notebook", "format": "json", "content": model["content"]})
        assert status == 200 and saved["path"] == NOTEBOOK

    text = notebook.read_text(encoding="utf-8")
    added = [line for line in text.splitlines() if line not in original.splitlines()]
    # jupytext records its format version in the header on the first save; nothing else changes.
    assert [line for line in added if "_version:" not in line] == ["EDITED_IN_JUPYTER = 1"], added
    assert "hi" not in added and "trusted" not in text and "execution" not in text.split("# %%")[0]
    assert list(notebook.parent.glob("*.ipynb")) == []  # no .ipynb beside it
    [result] = export_modules(course.settings, [course.module("01")])
    assert "EDITED_IN_JUPYTER = 1" in result.path.read_text(encoding="utf-8")


def test_the_readme_setting_makes_py_files_open_as_notebooks(course, tmp_path):
    """`jupytext-config set-default-viewer python` (README): a double click opens a .py as a notebook."""
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    done = subprocess.run([sys.executable, "-m", "jupytext_config", "set-default-viewer", "python"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with jupyterlab(course.root, tmp_path) as server:
        status, settings = server.request("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert status == 200  # the setting becomes JupyterLab's default for the document manager
    assert settings["schema"]["properties"]["defaultViewers"]["default"]["python"] == "Jupytext Notebook"
