"""`tito test`: a module's inline tests, its pytest tests and (optionally) its notebook in Jupyter.

A module passes when every part that ran passed:

* inline: the notebook run as a script (`python modules/NN_x/x_dev.py`), which
  calls its `test_unit_*` functions;
* pytest: `python -m pytest tests/NN_x -q`, when that folder exists;
* notebook (`--notebook`): the notebook executed cell by cell in a real Jupyter
  kernel, as a student runs it; any cell error fails it.

Results are recorded in `.tito/results.json` so `tito status` can report the
last run honestly (with its time), and never a run that did not happen.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .course import CourseModule, Settings, list_modules
from .notebook import read_notebook, read_text
from .runner import ProcessResult, course_env, describe_pytest, run_python

RESULTS_FILE = "results.json"
PARTS = ("inline", "pytest", "notebook")
PROGRAM_TIMEOUT_S = 1800  # a whole notebook or test folder; generous, but a hang must not hang CI
CELL_TIMEOUT_S = 600

Progress = Callable[[str, str], None]  # (row name, what is running now)


@dataclass
class PartResult:
    status: str  # "passed", "failed" or "no tests"
    seconds: float
    detail: str = ""  # a summary when it passed, the end of the output when it failed

    @property
    def failed(self) -> bool:
        return self.status == "failed"


@dataclass
class RunRecord:
    """One row of `tito test`: a module, or a test folder that belongs to no module."""

    name: str  # "01_tensor" or "tests/tito"
    parts: dict[str, PartResult] = field(default_factory=dict)
    seconds: float = 0.0
    finished_at: str = ""  # ISO 8601, UTC
    notebook_sha256: str | None = None  # what was tested, so status can tell when it changed

    @property
    def passed(self) -> bool:
        return not any(part.failed for part in self.parts.values())


def _from_process(result: ProcessResult, summary: str) -> PartResult:
    if result.ok:
        return PartResult("passed", result.seconds, summary)
    return PartResult("failed", result.seconds, result.tail())


def notebook_digest(module: CourseModule) -> str:
    return hashlib.sha256(module.notebook.read_bytes()).hexdigest()


def run_inline(settings: Settings, module: CourseModule) -> PartResult:
    """The notebook as a plain script, from its own folder (where Jupyter would run it)."""
    result = run_python([module.notebook.name], module.folder, settings.root, PROGRAM_TIMEOUT_S)
    checks = sum(1 for line in result.output.splitlines() if line.lstrip().startswith("✓"))
    return _from_process(result, f"{checks} ✓ line(s)" if checks else "ran to the end")


def run_pytest(settings: Settings, targets: list[Path]) -> PartResult:
    """pytest on `targets` from the repository root, so its settings and conftest apply."""
    relative = [str(t.relative_to(settings.root)) for t in targets]
    result = run_python(["-m", "pytest", *relative, "-q"], settings.root, settings.root,
                        PROGRAM_TIMEOUT_S)
    if result.returncode == 5:  # the folder exists but holds no tests: nothing passed or failed
        return PartResult("no tests", result.seconds, "no tests collected")
    return _from_process(result, describe_pytest(result))


def run_in_kernel(settings: Settings, module: CourseModule) -> PartResult:
    """Execute the notebook in a Jupyter kernel; the first failing cell fails it."""
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    start = time.perf_counter()
    nb = read_notebook(read_text(module.notebook), module.notebook)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S)
    # The kernel's own log (startup warnings) goes to a file, not over tito's output;
    # it is shown only when the kernel dies, where it is the only clue.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as kernel_log:
        try:
            client.execute(cwd=str(module.folder), env=course_env(settings.root), stderr=kernel_log)
        except (CellExecutionError, CellTimeoutError) as err:
            return PartResult("failed", time.perf_counter() - start, str(err)[-3000:])
        except DeadKernelError as err:
            kernel_log.seek(0)
            return PartResult("failed", time.perf_counter() - start, f"{err}\n{kernel_log.read()[-3000:]}")
        except NoSuchKernel:
            return PartResult("failed", time.perf_counter() - start,
                              'no "python3" Jupyter kernel: pip install -e ".[dev]" (it brings ipykernel)')
    cells = sum(1 for c in nb.cells if c.cell_type == "code")
    return PartResult("passed", time.perf_counter() - start, f"{cells} code cells ran")


def module_tests_folder(settings: Settings, module: CourseModule) -> Path:
    return settings.tests_path / module.key


def extra_test_targets(settings: Settings, modules: list[CourseModule]) -> dict[str, list[Path]]:
    """Tests that belong to no module: tests/tito, tests/integration, ..., and loose test files."""
    if not settings.tests_path.is_dir():
        return {}
    module_keys = {m.key for m in modules}
    targets: dict[str, list[Path]] = {}
    for entry in sorted(settings.tests_path.iterdir()):
        if entry.is_dir() and entry.name not in module_keys and not entry.name.startswith(("_", ".")):
            if any(entry.rglob("*.py")):
                targets[entry.relative_to(settings.root).as_posix()] = [entry]
    loose = sorted(settings.tests_path.glob("test_*.py"))
    if loose:
        targets[f"{settings.tests_path.name}/test_*.py"] = loose
    return targets


def run_module_tests(settings: Settings, module: CourseModule, notebook: bool,
                     progress: Progress | None = None) -> RunRecord:
    """Every part of one module's tests; the parts run even after one fails, to show all."""
    report = progress or (lambda name, what: None)
    run = RunRecord(module.key, notebook_sha256=notebook_digest(module))
    report(module.key, "inline tests (notebook as a script)")
    run.parts["inline"] = run_inline(settings, module)
    folder = module_tests_folder(settings, module)
    if folder.is_dir():
        report(module.key, f"pytest {folder.relative_to(settings.root).as_posix()}")
        run.parts["pytest"] = run_pytest(settings, [folder])
    if notebook:
        report(module.key, "notebook in a Jupyter kernel")
        run.parts["notebook"] = run_in_kernel(settings, module)
    return _finish(run)


def run_folder_tests(settings: Settings, name: str, targets: list[Path],
                     progress: Progress | None = None) -> RunRecord:
    if progress:
        progress(name, f"pytest {name}")
    return _finish(RunRecord(name, {"pytest": run_pytest(settings, targets)}))


def _finish(run: RunRecord) -> RunRecord:
    run.seconds = sum(part.seconds for part in run.parts.values())
    run.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return run


def run_tests(settings: Settings, modules: list[CourseModule], *, notebook: bool = False,
              include_extra: bool = False, progress: Progress | None = None,
              finished: Callable[[RunRecord], None] | None = None) -> list[RunRecord]:
    """Test `modules` (and, with `include_extra`, the folders that belong to no module); record it all.

    `progress` hears what starts, `finished` gets each row as soon as it is done.
    """
    runs = []
    for module in modules:
        runs.append(run_module_tests(settings, module, notebook, progress))
        if finished:
            finished(runs[-1])
    if include_extra:
        for name, targets in extra_test_targets(settings, list_modules(settings)).items():
            runs.append(run_folder_tests(settings, name, targets, progress))
            if finished:
                finished(runs[-1])
    record_results(settings, runs)
    return runs


def results_path(settings: Settings) -> Path:
    return settings.state_path / RESULTS_FILE


def load_results(settings: Settings) -> dict[str, RunRecord]:
    """The last recorded run of every row; an unreadable file counts as no record at all."""
    path = results_path(settings)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    runs = {}
    for name, data in raw.get("runs", {}).items():
        parts = {k: PartResult(**v) for k, v in data.get("parts", {}).items()}
        runs[name] = RunRecord(name, parts, data.get("seconds", 0.0), data.get("finished_at", ""),
                             data.get("notebook_sha256"))
    return runs


def record_results(settings: Settings, runs: list[RunRecord]) -> Path:
    """Merge `runs` into the results file (other rows keep their last result); atomic write."""
    merged = load_results(settings)
    merged.update({run.name: run for run in runs})
    payload = {"runs": {name: {**asdict(run), "passed": run.passed} for name, run in merged.items()}}
    for entry in payload["runs"].values():
        entry.pop("name")
    path = results_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tito-new")
    scratch.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(scratch, path)
    return path
