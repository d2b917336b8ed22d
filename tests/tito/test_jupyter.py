"""Issue 8, item 7: in JupyterLab a module's `.py` opens as a notebook and saves back to the `.py`.

A real JupyterLab server on localhost (the one `pip install -e ".[lab]"` installs, with
jupytext's server extension), driven through its REST contents API exactly as the
JupyterLab front end drives it: open the notebook, change a cell, save. No mocks.

Issue 21: the same route as a student takes it, in a real headless Chromium (Debian's
`chromium` package, driven by Playwright): the README's setting, the lesson opened as a
notebook, a solution typed into the first stub, Ctrl+S, `tito export 01`.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import jupytext
import pytest

from tito.export import export_modules
from tito.notebook import STUB_LINE, find_solution_blocks
from tito.release import write_student_edition

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


@contextlib.contextmanager
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


def _readme_setting(config: Path) -> None:
    """`jupytext-config set-default-viewer python`, as the README says; and no news pop-up over the page."""
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config))
    done = subprocess.run([sys.executable, "-m", "jupytext_config", "set-default-viewer", "python"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    overrides = config / "labconfig" / "default_setting_overrides.json"
    settings = json.loads(overrides.read_text(encoding="utf-8"))
    # JupyterLab asks once whether to fetch Jupyter's news; the question would cover the screenshot.
    settings["@jupyterlab/apputils-extension:notification"] = {"fetchNews": "false", "checkForUpdates": False}
    overrides.write_text(json.dumps(settings), encoding="utf-8")


@dataclass
class Lab:
    """One JupyterLab for this file's tests, set up as the README says, serving `root`:
    `course/` (a copy of the course) and `student/` (its student edition)."""

    server: Server
    home: Path  # JupyterLab's config, data and runtime folders, and server.log
    course: object  # conftest's CourseCopy, at root/course
    edition: Path  # root/student
    reference: str  # module 01's reference notebook, read before any test changed the copy


@pytest.fixture(scope="module")
def lab(new_course):
    course = new_course("lab")
    root = course.root.parent
    reference = course.module("01").notebook.read_text(encoding="utf-8")
    write_student_edition(course.settings, root / "student")
    home = root / "jupyter"
    home.mkdir()
    _readme_setting(home / "config")
    with jupyterlab(root, home) as server:  # started once: each start takes seconds
        yield Lab(server, home, course, root / "student", reference)


def test_a_module_opens_as_a_notebook_and_saves_back_to_its_py(lab):
    course, path = lab.course, f"course/{NOTEBOOK}"
    notebook = course.root / NOTEBOOK
    original = notebook.read_text(encoding="utf-8")
    status, page = lab.server.request("GET", "/lab")
    assert status == 200 and "JupyterLab" in page  # the front end itself is installed and served

    status, model = lab.server.request("GET", f"/api/contents/{path}?type=notebook&content=1")
    assert status == 200 and model["type"] == "notebook"
    cells = model["content"]["cells"]
    assert len(cells) > 10 and cells[0]["cell_type"] == "markdown"
    index = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and "#| export" in c["source"])
    cells[index]["source"] += "\nEDITED_IN_JUPYTER = 1"
    # What the front end sends back after running a cell: outputs, counts, its own metadata.
    cells[index].update(execution_count=3, outputs=[{"output_type": "stream", "name": "stdout", "text": "hi\n"}])
    cells[index]["metadata"] = {"trusted": True, "execution": {"iopub.status.idle": "2026-01-01T00:00:00Z"}}

    status, saved = lab.server.request("PUT", f"/api/contents/{path}", {
        "type": "notebook", "format": "json", "content": model["content"]})
    assert status == 200 and saved["path"] == path

    text = notebook.read_text(encoding="utf-8")
    added = [line for line in text.splitlines() if line not in original.splitlines()]
    # jupytext records its format version in the header on the first save; nothing else changes.
    assert [line for line in added if "_version:" not in line] == ["EDITED_IN_JUPYTER = 1"], added
    assert "hi" not in added and "trusted" not in text and "execution" not in text.split("# %%")[0]
    assert list(notebook.parent.glob("*.ipynb")) == []  # no .ipynb beside it
    [result] = [r for r in export_modules(course.settings, [course.module("01")]) if r.target == "core.tensor"]
    assert "EDITED_IN_JUPYTER = 1" in result.path.read_text(encoding="utf-8")  # the lesson's own module


def test_the_readme_setting_makes_py_files_open_as_notebooks(lab):
    """`jupytext-config set-default-viewer python` (README): a double click opens a .py as a notebook."""
    status, settings = lab.server.request("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert status == 200  # the setting becomes JupyterLab's default for the document manager
    assert settings["schema"]["properties"]["defaultViewers"]["default"]["python"] == "Jupytext Notebook"


# ---------------------------------------------------------------------------- issue 21: in a real browser

CHROMIUM = Path(os.environ.get("TINYTORCH_CHROMIUM", "/usr/bin/chromium"))  # Debian's `chromium` package
# Headless, as root (CI), and quiet on a closed network: no sandbox (root), no GPU, and none of
# the browser's own connections (updates, sync, QUIC), which a closed network refuses.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000  # for one step on a loaded 2-core machine; each normally takes a second or two


def _keep(path: Path) -> None:
    """Copy a file to $TINYTORCH_ARTIFACTS (CI keeps that folder), when it is set."""
    folder = os.environ.get("TINYTORCH_ARTIFACTS")
    if folder and path.exists():
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, Path(folder) / path.name)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.is_file(), reason=f"no Chromium at {CHROMIUM}: `apt-get install chromium` "
                                                   "(CI's .ci/run installs it)")
def test_a_student_types_a_solution_in_jupyterlab_and_tito_exports_it(lab, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason='Playwright is missing: pip install -e ".[dev]"')

    edition = lab.edition
    notebook = edition / NOTEBOOK
    before = notebook.read_text(encoding="utf-8")
    # What the student will type: the reference solution of the first stub (to_array), line by line.
    solution_block = find_solution_blocks(lab.reference, Path(NOTEBOOK))[0]
    solution = lab.reference.splitlines()[solution_block.begin_line:solution_block.end_line - 1]
    stub_block = find_solution_blocks(before, notebook)[0]
    lines = before.splitlines(keepends=True)
    assert lines[stub_block.begin_line].lstrip().startswith(STUB_LINE)
    expected = "".join(lines[:stub_block.begin_line] + [line + "\n" for line in solution]
                       + lines[stub_block.end_line - 1:])
    # The cell that holds it, and the stub's line in that cell, as JupyterLab numbers them.
    cells = jupytext.reads(before, fmt="py:percent").cells
    cell = next(i for i, c in enumerate(cells) if c.cell_type == "code" and STUB_LINE in c.source)
    source = cells[cell].source.splitlines()
    stub_line = next(n for n, line in enumerate(source) if STUB_LINE in line)

    screenshot = tmp_path / "jupyterlab.png"
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 720})
        page.set_default_timeout(WAIT_MS)
        try:
            # A double click on the file in JupyterLab's browser opens this same address.
            page.goto(f"{lab.server.url}/lab/tree/student/{NOTEBOOK}?token={lab.server.token}")
            panel = page.locator(".jp-NotebookPanel")
            panel.wait_for()  # opened as a notebook (the README's setting), not in the text editor
            assert page.locator(".jp-FileEditor").count() == 0
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for()  # the kernel started and is ready
            code_cells = sum(c.cell_type == "code" for c in cells)
            page.wait_for_function(  # every cell and every code cell's editor is on the page
                "([cells, code]) => document.querySelectorAll('.jp-Notebook .jp-Cell').length === cells"
                " && document.querySelectorAll('.jp-Notebook .jp-CodeCell .cm-editor').length === code",
                arg=[len(cells), code_cells])

            # Into the cell's editor, to its last line, up to the stub (the status bar shows the line).
            target = page.locator(".jp-Notebook .jp-Cell").nth(cell)
            target.scroll_into_view_if_needed()
            target.locator(".cm-content").click()
            page.keyboard.press("Control+End")
            for _ in range(len(source) - 1 - stub_line):
                page.keyboard.press("ArrowUp")
            page.get_by_text(f"Ln {stub_line + 1}, Col").wait_for()
            # Select the stub (Shift+Home stops at the indentation) and type the solution over it;
            # on each new line, Shift+Home selects the editor's automatic indentation, typed over too.
            page.keyboard.press("End")
            page.keyboard.press("Shift+Home")
            page.keyboard.type(solution[0].lstrip())
            for line in solution[1:]:
                page.keyboard.press("Enter")
                page.keyboard.press("Shift+Home")
                page.keyboard.type(line)
            page.keyboard.press("Control+s")
            page.locator(".lm-TabBar-tab.jp-mod-current:not(.jp-mod-dirty)").wait_for()  # saved
            page.screenshot(path=str(screenshot))
        except BaseException:
            failure = tmp_path / "jupyterlab-failure.png"  # what the page showed when a step failed
            with contextlib.suppress(Exception):  # a browser that died takes none: the error above says why
                page.screenshot(path=str(failure))
            _keep(failure)
            _keep(lab.home / "server.log")
            raise
        finally:
            browser.close()
    _keep(screenshot)

    after = notebook.read_text(encoding="utf-8")
    # jupytext records its format and version in the header on the first save (the README says
    # so); apart from those lines, the file is the student's one with the stub typed over.
    header_end = after.index("# ---\n", 4)
    recorded = [line for line in after[:header_end].splitlines() if line not in before.splitlines()]
    assert [line.split(":")[0].lstrip("# ") for line in recorded] == ["format_version", "jupytext_version"], recorded
    saved = "".join(line for line in after.splitlines(keepends=True) if line.rstrip("\n") not in recorded)
    assert saved == expected, "the saved .py differs from the stub typed over:\n" + "".join(
        difflib.unified_diff(expected.splitlines(keepends=True), saved.splitlines(keepends=True), "expected", "saved"))
    assert [str(p.relative_to(edition)) for p in edition.rglob("*.ipynb") if p.is_file()] == []

    export = subprocess.run([sys.executable, "-m", "tito", "export", "01"], cwd=edition / "modules" / "01_tensor",
                            env=dict(os.environ, PYTHONPATH=str(edition)), capture_output=True, text=True,
                            timeout=300)
    assert export.returncode == 0 and "updated" in export.stdout, export.stdout + export.stderr
    package = (edition / "tinytorch" / "core" / "tensor.py").read_text(encoding="utf-8")
    assert "\n".join(solution) in package and "to_array is not implemented yet" not in package
    check = "from tinytorch.core.tensor import to_array; print(to_array([1, 2]).dtype)"
    used = subprocess.run([sys.executable, "-c", check], cwd=edition, env=dict(os.environ, PYTHONPATH=str(edition)),
                          capture_output=True, text=True, timeout=120)
    assert used.returncode == 0 and used.stdout.strip() == "float32", used.stdout + used.stderr
