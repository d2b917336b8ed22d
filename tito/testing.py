"""`tito test`: a module's inline tests, its pytest tests and (optionally) its notebook in Jupyter.

A module passes when every part that ran passed and no stub is left:

* inline: the notebook run as a script, cell by cell (`tito.cells`), which calls its
  `test_unit_*` functions; it goes on after a failing cell, so it reports every section;
* pytest: `python -m pytest tests/NN_x -q`, when that folder exists;
* notebook (`--notebook`): the notebook executed cell by cell in a real Jupyter
  kernel, as a student runs it; any cell error fails it.

A module with stubs left is *in progress*: a cell or a test that stops on a stub waits
for it (it is not a failure, and a test that waits costs no traceback), the whole-program
tests (`slow`) wait for the whole module, and the run reports each section of the lesson
and the next stub to write (`tito.pytest_plugin`, `tito.cells`).

The failure shown first (`shown_failure`) is the first failure of the first part that
failed, in this order: inline (in notebook order), pytest (in the order pytest runs the
tests: files by name, tests in file order), notebook. `tito release check` proves each
catalogued mistake's message is in exactly that failure (`first_failure_only`).

Before any of that: a notebook whose every solution block is still its stub is "not
started" (nothing is run), and a notebook that does not export fails without running
(pytest would otherwise test the stale package and could pass). All parts of a module
share one time limit (`test_timeout_minutes` in settings.ini, or `--timeout`); a run
past it is stopped, and the result names the test or cell that was running.

Each module's result is written to `.tito/results.json` as soon as it finishes (under a
lock, so two `tito test` runs at once both keep theirs), so `tito status` can report the
last run honestly, with its time, and never a run that did not happen.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tinytorch.files import atomic_write

from .course import CourseModule, Settings, list_modules
from .export import DOES_NOT_EXPORT, module_in_sync
from .locks import course_lock
from .notebook import NotebookError, read_notebook, read_text, solution_progress
from .plugin_env import CURRENT_TEST_ENV, REPORT_ENV, STUBS_LEFT_ENV
from .reports import error_line, first_pytest_failure, last_traceback, strip_ansi, where_in_notebook
from .runner import ProcessResult, course_env, describe_pytest, pytest_counts, run_python, side_by_side, stopping

RESULTS_FILE = "results.json"
PARTS = ("inline", "pytest", "notebook")
PROGRAM_TIMEOUT_S = 1800  # for programs outside `tito test` (release check's stub runs)
PYTEST_COLUMNS = "1000"  # pytest cuts each failure's one-line reason to the terminal width: make that wide

Progress = Callable[[str, str], None]  # (row name, what is running now)


@dataclass
class TestOptions:
    notebook: bool = False  # also run the notebook in a Jupyter kernel
    timeout_s: float | None = None  # per module; None: the course's test_timeout_minutes
    pytest_args: tuple[str, ...] = ()  # passed on to pytest, e.g. ("-x",) or ("-v",)


@dataclass
class PartResult:
    status: str  # "passed", "failed", "waiting" (only stubs stopped it) or "no tests"
    seconds: float
    summary: str = ""  # one line: "12 tests passed", "3 failed, 40 passed", "timed out after 2 min in ..."
    detail: str = ""  # when it failed: the first failure in full (whole lines, no colour codes)
    failures: int = 0  # how many tests (inline: cells) failed; a notebook in Jupyter stops at its first
    waiting: int = 0  # tests or cells that stopped on a stub nobody has written yet
    output: str = field(default="", repr=False, compare=False)  # all it printed; not recorded
    sections: list = field(default_factory=list, repr=False, compare=False)  # inline: per section; not recorded

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
    state: str = ""  # "" (judged by its parts), "not started", "does not export" or "not run"
    note: str = ""  # why, for those states; or a warning (an out-of-date package)
    stubs_left: int | None = None
    blocks: int | None = None
    sections: list[dict] = field(default_factory=list)  # the lesson's sections as the inline run saw them
    next_stub: str = ""  # "modules/12_attention/attention_dev.py:652 composed_attention", while stubs are left

    @property
    def failed(self) -> bool:
        return self.state == "does not export" or any(part.failed for part in self.parts.values())

    @property
    def in_progress(self) -> bool:
        """Nothing failed, but stubs are left (or a test waited for one): not passed yet."""
        return not self.state and not self.failed and bool(
            self.stubs_left or any(part.status == "waiting" for part in self.parts.values()))

    @property
    def passed(self) -> bool:
        return not self.state and not self.failed and not self.in_progress

    @property
    def verdict(self) -> str:
        return self.state or ("failed" if self.failed else "in progress" if self.in_progress else "passed")

    @property
    def failures(self) -> int:
        return sum(part.failures for part in self.parts.values() if part.failed)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def notebook_digest(module: CourseModule) -> str | None:
    """The lesson's SHA-256, its companions' bytes (`CourseModule.companions`) included when it has any."""
    try:
        digest = hashlib.sha256(module.notebook.read_bytes())
        for companion in module.companions:
            digest.update(companion.name.encode() + b"\0" + companion.read_bytes())
        return digest.hexdigest()
    except OSError:
        return None


def run_inline(settings: Settings, module: CourseModule, timeout_s: float | None = None,
               first_failure: bool = False) -> PartResult:
    """The notebook as a script, cell by cell (`tito.cells`), from its own folder (where Jupyter would run it).

    `first_failure`: stop at the first failing cell, as a plain script does (release check).
    The report's sections are returned on the part as `sections` (not recorded in the part).
    """
    with tempfile.TemporaryDirectory(prefix="tito-cells-") as tmp:
        report_file = Path(tmp) / "report.json"
        args = ["-m", "tito.cells", module.notebook.name, "--report", str(report_file)]
        result = run_python(args + (["--first-failure"] if first_failure else []), module.folder,
                            settings.root, timeout_s)
        try:
            report = json.loads(report_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            report = {}
    return inline_part(module, report, result, timeout_s)


def inline_part(module: CourseModule, report: dict, result: ProcessResult, timeout_s: float | None) -> PartResult:
    """The inline part from `tito.cells`'s report and the run that wrote it."""
    output = strip_ansi(result.output)
    passed = int(report.get("tests_passed", 0))
    failures, waiting = report.get("failures", []), report.get("waiting", [])
    tests = f"{passed} test{'s' if passed != 1 else ''} passed" if passed else ""
    if result.timed_out:
        where = where_in_notebook(output, module.notebook) or "somewhere that ignored Ctrl-C, so it was killed"
        summary = f"timed out after {_minutes(timeout_s or 0)}: it was running {where}"
        part = PartResult("failed", result.seconds, summary, last_traceback(output) or result.tail(), 1,
                          len(waiting), output)
    elif failures:
        summary = ", ".join(x for x in (f"{len(failures)} failed", tests,
                                        f"{len(waiting)} waiting for stubs" if waiting else "") if x)
        part = PartResult("failed", result.seconds, summary, failures[0]["traceback"].rstrip(), len(failures),
                          len(waiting), output)
    elif not result.ok and not waiting:  # the runner itself could not run the notebook
        traceback = last_traceback(output)
        summary = error_line(traceback) if traceback else f"exit code {result.returncode}"
        part = PartResult("failed", result.seconds, summary, traceback or result.tail(), 1, 0, output)
    elif waiting:
        summary = ", ".join(x for x in (tests, f"{len(waiting)} cell{'s' if len(waiting) != 1 else ''} waiting") if x)
        part = PartResult("waiting", result.seconds, summary, waiting=len(waiting), output=output)
    else:
        part = PartResult("passed", result.seconds, tests or "ran to the end", output=output)
    part.sections = report.get("sections", [])
    return part


def run_pytest(settings: Settings, targets: list[Path], timeout_s: float | None = None,
               args: tuple[str, ...] = (), limit_s: float | None = None, stubs_left: int = 0) -> PartResult:
    """pytest on `targets` from the repository root, so its settings and conftest apply.

    `timeout_s` is the time left; `limit_s` the module's whole limit, which a timeout names.
    `stubs_left`: the module's stubs still to write (whole-program tests wait for them).
    """
    relative = [t.relative_to(settings.root).as_posix() for t in targets]
    with tempfile.TemporaryDirectory(prefix="tito-pytest-") as tmp:
        current, counted = Path(tmp) / "current-test", Path(tmp) / "counts.json"
        quiet = [] if "-v" in args else ["-q"]  # -q and -v cancel out
        result = run_python(["-m", "pytest", *relative, *quiet, "--tb=short", "--color=no",
                             "-o", "console_output_style=classic", "-p", "tito.pytest_plugin", *args],
                            settings.root, settings.root, timeout_s,
                            env={"COLUMNS": PYTEST_COLUMNS, CURRENT_TEST_ENV: str(current),
                                 REPORT_ENV: str(counted), STUBS_LEFT_ENV: str(stubs_left)})
        running = current.read_text(encoding="utf-8") if current.is_file() else None
        try:
            counts = json.loads(counted.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            counts = {}
    output = strip_ansi(result.output)
    if result.timed_out:
        summary = (f"timed out after {_minutes(limit_s or timeout_s or 0)}: it was running "
                   f"{running or 'the collection of the tests'}")
        return PartResult("failed", result.seconds, summary, _interrupted_at(output), 1, output=output)
    if result.returncode == 5:  # the folder exists but holds no tests: nothing passed or failed
        return PartResult("no tests", result.seconds, "no tests collected", output=output)
    waiting = sum(counts.get("waiting", {}).values())
    summary = describe_pytest(result)
    if waiting and counts:
        summary = ", ".join(f"{counts[k]} {k}" for k in ("failed", "errors", "passed", "skipped") if counts.get(k))
        summary += (", " if summary else "") + f"{waiting} waiting"
    if result.ok:
        return PartResult("waiting" if waiting else "passed", result.seconds, summary, waiting=waiting, output=output)
    pytest_said = pytest_counts(output)
    first = first_pytest_failure(output)
    detail = f"{first[0]}\n{first[1]}" if first else result.tail()
    failures = max(1, pytest_said.get("failed", 0) + pytest_said.get("errors", 0))
    return PartResult("failed", result.seconds, summary, detail, failures, waiting, output)


def _interrupted_at(output: str) -> str:
    """What pytest printed when it was stopped: from its KeyboardInterrupt banner to the end."""
    lines = output.rstrip().splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if "KeyboardInterrupt" in lines[i] and "!" in lines[i]), None)
    return "\n".join(lines[start:] if start is not None else lines[-15:])


def run_in_kernel(settings: Settings, module: CourseModule, timeout_s: float | None = None,
                  limit_s: float | None = None) -> PartResult:
    """Execute the notebook in a Jupyter kernel, cell by cell; the first failing cell fails it.

    `timeout_s` is the time left; `limit_s` the module's whole limit, which a timeout names.
    """
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    start = time.perf_counter()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    nb = read_notebook(read_text(module.notebook), module.notebook)
    client = NotebookClient(nb, kernel_name="python3", shutdown_kernel="immediate")
    code_cells = 0

    def failed(summary: str, detail: str) -> PartResult:
        return PartResult("failed", time.perf_counter() - start, summary, detail, 1)

    # The kernel's own log (startup warnings) goes to a file, not over tito's output;
    # it is shown only when the kernel dies, where it is the only clue.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as kernel_log:
        try:
            with client.setup_kernel(cwd=str(module.folder), env=course_env(settings.root), stderr=kernel_log):
                for index, cell in enumerate(nb.cells):  # cells counted as Jupyter shows them, from 1
                    if cell.cell_type != "code":
                        continue
                    code_cells += 1
                    client.timeout = None if deadline is None else max(1, int(deadline - time.monotonic()))
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        return failed(f"timed out after {_minutes(limit_s or timeout_s or 0)}: it was running "
                                      f"cell {index + 1}", _cell_head(cell.source))
                    except CellExecutionError as err:
                        traceback = strip_ansi(err.traceback)
                        return failed(f"cell {index + 1} raised {err.ename}: {err.evalue}".strip(),
                                      f"{_cell_head(cell.source)}\n{traceback}")
        except DeadKernelError as err:
            kernel_log.seek(0)
            return failed(f"the kernel died: {err}", strip_ansi(kernel_log.read())[-3000:])
        except NoSuchKernel:
            return failed('no "python3" Jupyter kernel', 'pip install -e ".[dev]" (it brings ipykernel)')
    return PartResult("passed", time.perf_counter() - start, f"{code_cells} code cells ran")


def _cell_head(source: str, lines: int = 4) -> str:
    head = source.splitlines()[:lines]
    more = "\n    ..." if len(source.splitlines()) > lines else ""
    return "The cell:\n" + "\n".join(f"    {line}" for line in head) + more


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


def _time_left(deadline: float) -> float:
    return deadline - time.monotonic()


def run_module_tests(settings: Settings, module: CourseModule, options: TestOptions | None = None,
                     progress: Progress | None = None) -> RunRecord:
    """Every part of one module's tests; the parts run even after one fails, to show all."""
    options = options or TestOptions()
    report = progress or (lambda name, what: None)
    run = RunRecord(module.key, notebook_sha256=notebook_digest(module))
    try:
        done = solution_progress(read_text(module.notebook), module.notebook)
    except NotebookError as err:
        return _finish(run, state="does not export", note=str(err))
    run.stubs_left, run.blocks = done.stubs_left, done.blocks
    if done.next_stub is not None:
        where = module.notebook.relative_to(settings.root).as_posix()
        run.next_stub = f"{where}:{done.next_stub.begin_line + 1} {done.next_stub.owner}"
    if done.not_started:
        return _finish(run, state="not started",
                       note=f"{done.stubs_left} stub{'s' if done.stubs_left != 1 else ''} left")
    report(module.key, "checking that the notebook exports")
    in_sync, detail = module_in_sync(settings, module)
    if not in_sync and detail.startswith(DOES_NOT_EXPORT):
        return _finish(run, state="does not export", note=detail.removeprefix(DOES_NOT_EXPORT).lstrip(": "))
    if not in_sync:
        run.note = (f"{detail}: pytest tested the package as last exported; run `tito export {module.number}` "
                    "and test again")
    timeout_s = options.timeout_s or settings.test_timeout_minutes * 60
    deadline = time.monotonic() + timeout_s
    report(module.key, "inline tests (the notebook as a script)")
    run.parts["inline"] = run_inline(settings, module, timeout_s)
    run.sections = run.parts["inline"].sections
    folder = module_tests_folder(settings, module)
    for part, wanted in (("pytest", folder.is_dir()), ("notebook", options.notebook)):
        if not wanted:
            continue
        left = _time_left(deadline)
        if left <= 0:
            run.parts[part] = PartResult("failed", 0.0, f"not run: the module's {_minutes(timeout_s)} were used up",
                                         failures=1)
        elif part == "pytest":
            report(module.key, f"pytest {folder.relative_to(settings.root).as_posix()}")
            run.parts[part] = run_pytest(settings, [folder], left, options.pytest_args, timeout_s,
                                         stubs_left=done.stubs_left)
        else:
            report(module.key, "notebook in a Jupyter kernel")
            run.parts[part] = run_in_kernel(settings, module, left, timeout_s)
    return _finish(run)


def shown_failure(run: RunRecord) -> tuple[str, PartResult] | None:
    """(part name, part) whose first failure `tito test` shows first: parts in order (inline,
    pytest, notebook), and within a part its first failure (`PartResult.detail`)."""
    return next(((name, part) for name, part in run.parts.items() if part.failed), None)


def first_failure_only(settings: Settings, module: CourseModule, timeout_s: float | None = None,
                       inline: PartResult | None = None) -> RunRecord:
    """The failure `tito test` would show first (`shown_failure`), found as fast as possible.

    The inline tests stop at their first failing cell; pytest runs with -x, and only when the
    inline tests passed (their failure comes first). What `tito release check` checks for
    every catalogued mistake. `inline`: the inline part, already run (`tito.cell_variants`).
    """
    run = RunRecord(module.key, notebook_sha256=notebook_digest(module))
    run.parts["inline"] = inline or run_inline(settings, module, timeout_s, first_failure=True)
    folder = module_tests_folder(settings, module)
    if not run.parts["inline"].failed and folder.is_dir():
        run.parts["pytest"] = run_pytest(settings, [folder], timeout_s, ("-x",))
    return _finish(run)


def run_folder_tests(settings: Settings, name: str, targets: list[Path], options: TestOptions | None = None,
                     progress: Progress | None = None) -> RunRecord:
    options = options or TestOptions()
    if progress:
        progress(name, f"pytest {name}")
    timeout_s = options.timeout_s or settings.test_timeout_minutes * 60
    return _finish(RunRecord(name, {"pytest": run_pytest(settings, targets, timeout_s, options.pytest_args)}))


def _finish(run: RunRecord, state: str = "", note: str = "") -> RunRecord:
    run.state = state or run.state
    run.note = note or run.note
    run.seconds = sum(part.seconds for part in run.parts.values())
    run.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return run


def modules_with_stubs(settings: Settings) -> list[str]:
    """The modules whose notebooks still hold stubs (or cannot be read): a student's course in progress."""
    keys = []
    for module in list_modules(settings):
        try:
            if solution_progress(read_text(module.notebook), module.notebook).stubs_left:
                keys.append(module.key)
        except NotebookError:
            keys.append(module.key)
    return keys


def run_tests(settings: Settings, modules: list[CourseModule], *, options: TestOptions | None = None,
              include_extra: bool = False, progress: Progress | None = None,
              finished: Callable[[RunRecord], None] | None = None, jobs: int = 1) -> list[RunRecord]:
    """Test `modules` (and, with `include_extra`, the folders that belong to no module), `jobs` at a time.

    Each row is recorded the moment it is done (a kill keeps what finished); `finished` hears
    the rows in course order (modules, then the other folders), whatever order they end in;
    `progress` hears what starts. The folders of no module (integration tests) need every
    module, so while some module still has stubs they are not run. With several jobs the
    other folders start first: tests/tito is the longest single run, and starting it last
    would leave one core idle at the end.
    """
    def record(run: RunRecord) -> RunRecord:
        if run.state != "not run" and not stopping():  # a run cut short by Ctrl-C is not a result
            record_results(settings, [run])
        return run

    work: list[Callable[[], RunRecord]] = [
        lambda m=module: record(run_module_tests(settings, m, options, progress)) for module in modules]
    extra: list[Callable[[], RunRecord]] = []
    if include_extra:
        unfinished = modules_with_stubs(settings)
        for name, targets in extra_test_targets(settings, list_modules(settings)).items():
            if unfinished:
                note = f"it tests the modules together, and {len(unfinished)} module(s) still have stubs"
                extra.append(lambda name=name, note=note: _finish(RunRecord(name), state="not run", note=note))
            else:
                extra.append(lambda name=name, targets=targets: record(
                    run_folder_tests(settings, name, targets, options, progress)))
    runs = []
    if jobs <= 1:  # one at a time, in this thread
        for job in work + extra:
            runs.append(job())
            if finished:
                finished(runs[-1])
        return runs
    with side_by_side(jobs) as pool:
        started = {id(job): pool.submit(job) for job in extra + work}
        for job in work + extra:
            run = started[id(job)].result()
            runs.append(run)
            if finished:
                finished(run)
    return runs


def results_path(settings: Settings) -> Path:
    return settings.state_path / RESULTS_FILE


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _run_from_json(name: str, data) -> RunRecord | None:
    """One recorded row, or None when it is not the shape tito writes (a hand edit, an older tito)."""
    try:
        parts = {str(k): PartResult(**_known(PartResult, v)) for k, v in data.get("parts", {}).items()}
        values = _known(RunRecord, data)
        values.pop("name", None)
        values["parts"] = parts
        run = RunRecord(name, **values)
        if not isinstance(run.finished_at, str) or not all(isinstance(p.status, str) for p in parts.values()):
            return None
        return run
    except (TypeError, ValueError, AttributeError):
        return None


class _Damaged(Exception):
    """The results file exists but is not what tito writes; the message says what is wrong."""


def _read_results(settings: Settings) -> dict[str, RunRecord]:
    """Every recorded row; {} when there is no file; _Damaged when the file cannot be read whole."""
    path = results_path(settings)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise _Damaged(f"it cannot be read ({err.strerror or err})") from None
    except ValueError as err:  # not UTF-8, or not JSON (a truncated write by an old tito, a hand edit)
        raise _Damaged(f"it is not JSON ({err})") from None
    rows = raw.get("runs") if isinstance(raw, dict) else None
    if not isinstance(rows, dict):
        raise _Damaged('it has no "runs" table')
    runs = {}
    for name, data in rows.items():
        run = _run_from_json(str(name), data) if isinstance(data, dict) else None
        if run is None:
            raise _Damaged(f"its row {name!r} is not one tito writes")
        runs[str(name)] = run
    return runs


def results_problem(settings: Settings) -> str | None:
    """What is wrong with the results file ("…/results.json is damaged: it is not JSON (…)"), or None."""
    try:
        _read_results(settings)
    except _Damaged as err:
        return f"{results_path(settings)} is damaged: {err}"
    return None


def load_results(settings: Settings) -> dict[str, RunRecord]:
    """The last recorded run of every row; a damaged file counts as no record (`results_problem` says why)."""
    try:
        return _read_results(settings)
    except _Damaged:
        return {}


def _set_aside(path: Path) -> Path:
    """Rename a damaged results file to `results.json.damaged-<UTC time>` beside it; returns the new path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    os.replace(path, kept)
    return kept


def keep_damaged_results(settings: Settings) -> tuple[Path, str] | None:
    """If the results file is damaged, rename it aside (never delete it): (where it is now, what was wrong)."""
    with course_lock(settings, "results"):
        problem = results_problem(settings)
        if problem is None:
            return None
        return _set_aside(results_path(settings)), problem


def record_results(settings: Settings, runs: list[RunRecord]) -> Path:
    """Merge `runs` into the results file (other rows keep their last result).

    Under the course's results lock, so concurrent `tito test` runs never lose each
    other's rows; written with `atomic_write`, so the file is always whole. A damaged file
    is renamed aside first (`keep_damaged_results`; the CLI says so), never silently replaced.
    """
    path = results_path(settings)
    with course_lock(settings, "results"):
        try:
            merged = _read_results(settings)
        except _Damaged:
            _set_aside(path)
            merged = {}
        merged.update({run.name: run for run in runs})
        payload = {"runs": {}}
        for name, run in merged.items():
            entry = {**asdict(run), "passed": run.passed}
            entry.pop("name")
            for part in entry["parts"].values():
                part.pop("output", None)
                part.pop("sections", None)
            payload["runs"][name] = entry
        with atomic_write(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return path
