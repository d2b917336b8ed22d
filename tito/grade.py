"""`tito grade`: each (student, module) graded on its own, in a sandbox, against visible and hidden tests.

One run:

1. **A base course** is built once in a scratch folder: the reference course (package, tests,
   tito) with the hidden tests (`grading/NN_name/`) and without the mistakes catalogues. Its
   tests are collected once, there, as the grader: that fixes which tests each module has
   (a test a student's code stops from being collected still counts, as 0) and which skip on
   this machine (GPU tests; they count for nobody).
2. **Each (student, module)** is first read: a notebook that is missing, does not parse, or
   still has stubs scores 0 with that reason, without running anything. Otherwise a copy of
   the base gets the student's notebook in place of the reference one; the reference's
   package files for that module (and their compiled `.pyc`) are deleted, and the student's
   notebook is exported into the package. So a mistake in module 01 costs points in 01 only.
   `--cumulative` exports every module from the student's notebooks instead (a stub where
   one is missing or does not export): the "whole framework" grade. Neither puts the
   reference solution of the graded module anywhere the student's code can read it.
3. The module's visible and hidden tests run in **one pytest, in the sandbox**
   (`tito.sandbox`), whose outcomes are read from the report `tito.grade_plugin` writes.
   A run that breaks a limit (time, CPU, memory, output, files, processes), crashes, ends
   before writing its report, or changes files outside its work folder scores 0 with the reason.
4. Each test scores its points (`grading.toml`) when it passed.

Grading is deterministic: results depend only on the submissions and the course, never on
timing or on the order in which jobs finish.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import stat
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable

from .course import CourseError, CourseModule, Settings, list_modules, load_settings
from .export import export_modules, scan_targets
from .grade_config import GRADING_DIR, GradingConfig, load_config, points_per_test
from .grade_plugin import COURSE_ENV, MESSAGE_CHARS, REPORT_ENV
from .notebook import NotebookError, check_syntax, read_text, solution_progress, stub_text
from .pytest_plugin import CURRENT_TEST_ENV
from .release import EDITION_ITEMS, copy_course
from .sandbox import (STOP, Limits, SandboxResult, SandboxUser, SandboxUsers, describe_isolation, prepare_workdir,
                      run_sandboxed)
from .submissions import Submission, SubmittedNotebook

NOT_RUN = "not run"
_REPORT = "report.json"
_CURRENT = "current-test"
_INLINE_REPORT = "inline.json"
# The lesson's inline tests as `tito test` runs them (tito.cells), from the notebook's folder, to its first failure.
_INLINE = ("import os, sys; os.chdir(sys.argv[1]); from tito.cells import main; "
           "sys.exit(main([sys.argv[2], '--first-failure', '--report', sys.argv[3]]))")
# What the sandbox writes and the grader reads is capped like its output: a report file past this size is
# not read (the run scores 0), and each message in it is cut at the plugin's length (the code could have
# forged the file), so a feedback file stays small whatever the student's code wrote.
_MAX_REPORT_BYTES = 16 * 1024 * 1024
_EXPORT_LOCK = threading.Lock()  # nbdev was not written for threads: exports take turns (a fraction of a second each)
# Run as the sandbox's user before grading: the same Python, its packages, and Python started again.
_PROBE = ("import subprocess, sys, numpy, pytest, jupytext; "
          "subprocess.run([sys.executable, '-c', 'import numpy'], check=True); print(sys.version)")
_PYTEST_ARGS = ["-q", "-s", "--tb=short", "--color=no", "-o", "console_output_style=classic",
                "-p", "tito.grade_plugin", "-p", "tito.pytest_plugin"]

Progress = Callable[[str, str, "ModuleResult | None"], None]  # (student, module key, result when done)


@dataclass
class GradedTest:
    nodeid: str
    hidden: bool  # from grading/, not from tests/
    outcome: str  # passed, failed, error, skipped, or "not run"
    message: str  # the first failure message ("" when it passed)
    points: Fraction
    max_points: Fraction


@dataclass
class ModuleResult:
    module: str  # "01_tensor"
    max_score: Fraction
    score: Fraction = Fraction(0)
    reason: str = ""  # why it scored 0 as a whole ("3 stubs left", a broken limit); "" when its tests decided
    tests: list[GradedTest] = field(default_factory=list)
    notebook: str = ""  # where the graded notebook was in the submission
    note: str = ""  # e.g. "read from an .ipynb with jupytext"
    seconds: float = 0.0  # not part of any grade: only Gradescope's execution_time
    peak_bytes: int | None = None  # the largest address space pytest had (benchmarks/grading.py reports it)
    first_failure: str = ""  # when a test failed: the first failure `tito test` shows (the lesson's inline tests)


@dataclass
class StudentResult:
    name: str
    source: str  # the entry's file name
    modules: dict[str, ModuleResult]
    ignored: list[str]
    error: str = ""

    @property
    def total(self) -> Fraction:
        return sum((m.score for m in self.modules.values()), Fraction(0))

    @property
    def max_total(self) -> Fraction:
        return sum((m.max_score for m in self.modules.values()), Fraction(0))


@dataclass(frozen=True)
class GradeOptions:
    modules: tuple[CourseModule, ...] = ()  # () means every module of the course
    jobs: int = 2
    cumulative: bool = False
    limits: Limits | None = None  # None: grading.toml's (or the defaults)


# ---------------------------------------------------------------------------- files


def _make_readable(root: Path) -> None:
    """Folders 755 and files 644 (755 when executable): a sandbox user of its own must read the course."""
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


def remove_tree(path: Path) -> None:
    """Delete a scratch folder even where the code that ran in it took its own permissions away."""
    def retry(function, target, _):
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
        except OSError:
            pass
        function(target)

    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=retry)


def _read_private_file(path: Path, limit: int) -> bytes | None:
    """A file the sandboxed code could have replaced: read only if it is a plain file (no link, no fifo) of sane size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    finally:
        os.close(fd)


def _manifest(root: Path) -> dict[str, tuple[int, int]]:
    """(size, modification time) of every file under `root` except compiled caches: to see what a run changed."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = (info.st_size, info.st_mtime_ns)
    return found


def _changed(before: dict, after: dict) -> list[str]:
    return sorted(set(before) ^ set(after) | {k for k in before.keys() & after.keys() if before[k] != after[k]})


# ---------------------------------------------------------------------------- the run


class GradingRun:
    """One `tito grade` run: the scratch folder, the base course, the tests it holds, the sandbox users.

    Use as a context manager; the scratch folder is removed at the end, whatever happened.
    """

    def __init__(self, settings: Settings, options: GradeOptions, config: GradingConfig | None = None):
        self.settings = settings
        self.config = config or load_config(settings)
        self.modules = list(options.modules) or list_modules(settings)
        self.all_modules = list_modules(settings)
        self.cumulative = options.cumulative
        self.jobs = max(1, options.jobs)
        self.limits = options.limits or self.config.limits
        self.claimed = SandboxUsers(self.jobs)  # a user of its own per job at once (where tito is root)
        self.users: queue.Queue[SandboxUser | None] = queue.Queue()
        for user in self.claimed.users:
            self.users.put(user)
        self.isolation = describe_isolation(self.claimed.users[0] is not None)
        self.scratch = Path(tempfile.mkdtemp(prefix="tito-grade-"))
        self.expected: dict[str, dict[str, str]] = {}  # module -> {nodeid: skip reason, "" when it runs}
        self.points: dict[str, dict[str, Fraction]] = {}
        self.targets = {m.key: sorted(set(scan_targets(m))) for m in self.all_modules}

    def __enter__(self) -> GradingRun:
        try:
            self.scratch.chmod(0o711)  # a sandbox user may pass through, not list the jobs of others
            self._build_base()
            self._collect_tests()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        remove_tree(self.scratch)
        self.claimed.close()

    # -- the base course

    @property
    def base(self) -> Path:
        return self.scratch / "base"

    def _instructor_files(self) -> dict[str, tuple[int, int]]:
        """A manifest of the course's own files (what the base copies): to see whether a run changed them."""
        found = {}
        for name in [*EDITION_ITEMS, self.settings.lib_path.name, self.settings.nbs_path.name, GRADING_DIR]:
            path = self.settings.root / name
            if path.is_dir():
                found.update({f"{name}/{k}": v for k, v in _manifest(path).items()})
            elif path.is_file():
                info = path.stat()
                found[name] = (info.st_size, info.st_mtime_ns)
        return found

    def changed_outside(self) -> list[str]:
        """The course's own files that changed since the run began (relative paths).

        Where student code runs as the grader's own user (no root), it can write them; each job
        used a copy made before any ran, so the grades stand, but the course must be restored.
        """
        return _changed(self._before, self._instructor_files())

    def _build_base(self) -> None:
        self._before = self._instructor_files()
        copy_course(self.settings, self.base, {}, with_package=True)  # catalogues stay behind (copy_course)
        base = load_settings(self.base)
        with _EXPORT_LOCK:  # the reference package from the notebooks, whatever state the instructor's is in
            export_modules(base, list_modules(base))
        hidden = self.settings.root / GRADING_DIR
        if hidden.is_dir():
            shutil.copytree(hidden, self.base / GRADING_DIR,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "grading.toml", "*.md"))
        self.base.chmod(0o700)  # the grader's alone: a run gets only its hand-out (`hand_out`)

    def hand_out(self, source: Path, dest: Path, module: CourseModule, move: bool) -> None:
        """Put in `dest` what a run of `module` needs from the course in `source`, and nothing else.

        It gets: the package, tito (pytest's plugins), the visible tests and the data sets they read
        (all in the student edition), the course's settings, the graded module's own folder (its
        notebook: the lesson's inline tests run it) and that module's hidden tests with their shared
        helpers. Never another module's notebook or hidden tests, a mistakes catalogue (the base has
        none), grading.toml, or the tool that records expected values. `move`: `source` is a private
        copy made for this run (moved, not copied).
        """
        root = self.settings.root
        items = [self.settings.lib_path.name, "tito", self.settings.tests_path.name, "datasets",
                 "pyproject.toml", "settings.ini", module.folder.relative_to(root).as_posix()]
        hidden = source / GRADING_DIR
        if hidden.is_dir():
            items += [f"{GRADING_DIR}/{p.name}" for p in sorted(hidden.glob("*.py")) if p.name != "record_expected.py"]
            items.append(f"{GRADING_DIR}/{module.key}")
        dest.mkdir()
        for item in items:
            origin, target = source / item, dest / item
            if not origin.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if move:
                os.replace(origin, target)
            elif origin.is_dir():
                shutil.copytree(origin, target, symlinks=True)
            else:
                shutil.copy2(origin, target)

    def test_folders(self, course: Path, module: CourseModule) -> list[Path]:
        folders = [course / self.settings.tests_path.name / module.key, course / GRADING_DIR / module.key]
        return [f for f in folders if f.is_dir()]

    def _collect_tests(self) -> None:
        """Collect every graded module's tests in the base course, as the grader (this also compiles them)."""
        folders = [f for m in self.modules for f in self.test_folders(self.base, m)]
        if not folders:
            raise CourseError("None of the modules to grade has tests (tests/NN_name or grading/NN_name).")
        work = prepare_workdir(self.scratch / "collect", None)
        result, report, _ = self._pytest(self.base, folders, work, None, ["--collect-only"],
                                         {"PYTHONDONTWRITEBYTECODE": ""})
        if report is None or report["collection_errors"] or not result.ok:
            errors = "\n".join(f"{k}: {v}" for k, v in (report or {}).get("collection_errors", {}).items())
            raise CourseError("The reference course's tests do not collect, so nothing can be graded:\n"
                              + (errors or result.reason or result.output[-3000:]))
        for module in self.modules:
            prefixes = tuple(f.relative_to(self.base).as_posix() + "/" for f in self.test_folders(self.base, module))
            found = {n: s for n, s in report["collected"].items() if prefixes and n.startswith(prefixes)}
            self.expected[module.key] = found
            graded = [n for n, skip in found.items() if not skip]
            self.points[module.key] = points_per_test(self.config, module.key, graded, list(found))
        remove_tree(work)
        self._check_sandbox_user()

    def _check_sandbox_user(self) -> None:
        """The sandbox's own user must run this very Python, with its packages, and start it again (tests
        run programs with sys.executable): say how to fix it when it cannot."""
        user = self.claimed.users[0]
        if user is None:
            return
        work = prepare_workdir(self.scratch / "probe", user)
        probe = run_sandboxed([sys.executable, "-c", _PROBE], work, self.limits, user=user, visible=[],
                              hidden=[self.settings.root, self.scratch])
        remove_tree(work)
        if probe.ok and probe.returncode == 0 and probe.output.strip() == sys.version:
            return
        found = probe.output.strip() or probe.reason
        raise CourseError(
            f"Student code runs as its own unprivileged user (uid {user.uid}), and that user cannot run "
            f"{sys.executable} ({sys.version.split()[0]}) with its packages as you do. It got:\n{found[-1500:]}\n"
            "Make the Python installation and its virtual environment readable by other users (chmod o+rX "
            "on each folder on the way), or run tito grade as an ordinary user (student code then runs as "
            "you, without a user of its own).")

    # -- one job

    def module_max(self, module: str) -> Fraction:
        return sum(self.points[module].values(), Fraction(0))

    def _pytest(self, course: Path, folders: list[Path], work: Path, user: SandboxUser | None,
                extra: list[str], env: dict[str, str] | None = None):
        """pytest on `folders` of `course` in the sandbox; (sandbox result, report or None, running test)."""
        command = [sys.executable, "-m", "pytest", *map(str, folders), "-c", str(course / "pyproject.toml"),
                   "--rootdir", str(course), *_PYTEST_ARGS, *extra]
        environment = {"PYTHONPATH": str(course), REPORT_ENV: str(work / _REPORT), COURSE_ENV: str(course),
                       CURRENT_TEST_ENV: str(work / _CURRENT), "HYPOTHESIS_PROFILE": "ci", **(env or {})}
        result = run_sandboxed(command, work, self.limits, environment, user, **self._seen(course))
        raw = _read_private_file(work / _REPORT, _MAX_REPORT_BYTES)
        running = _read_private_file(work / _CURRENT, 4096)
        return result, _parse_report(raw), running.decode("utf-8", "replace") if running else None

    def _seen(self, course: Path) -> dict:
        """What a run sees of the machine's folders: its course (and work folder), not the instructor's course
        nor the rest of the scratch folder (where the machine allows namespaces; `tito.sandbox`)."""
        return {"visible": [course], "hidden": [self.settings.root, self.scratch]}

    def job(self, submission: Submission, module: CourseModule, student_course: Path | None,
            problems: dict[str, str]) -> ModuleResult:
        """Grade one (student, module); never raises for what the student wrote."""
        key = module.key
        result = ModuleResult(key, self.module_max(key))
        notebook = submission.notebooks.get(key)
        if notebook is not None:
            result.notebook, result.note = notebook.path, notebook.note
        reason = problems.get(key) or self.notebook_problem(submission, module)
        if reason:
            result.reason = reason
            return result
        if not self.expected[key]:
            return result  # a module without tests: nothing to run, nothing to score
        user = self.users.get()
        job_dir = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self.scratch))
        start = time.monotonic()
        try:
            if user is not None:
                os.chown(job_dir, 0, user.gid)
                job_dir.chmod(0o750)  # its own user (by its group) and the grader, nobody else
            course = job_dir / "course"
            if student_course is not None:
                self.hand_out(student_course, course, module, move=False)
            else:
                build = job_dir / "build"  # the whole course, the grader's alone (job_dir is open to the user)
                shutil.copytree(self.base, build, symlinks=True)
                build.chmod(0o700)
                result.reason = self._put_notebook(build, module, notebook)
                if not result.reason:
                    self.hand_out(build, course, module, move=True)
                remove_tree(build)
            if not result.reason:
                self._run(course, module, job_dir, user, result)
        finally:
            self.users.put(user)
            remove_tree(job_dir)
        result.seconds = time.monotonic() - start
        return result

    def notebook_problem(self, submission: Submission, module: CourseModule) -> str:
        """Why the student's notebook for `module` scores 0 without running; "" when it can be tested."""
        if submission.error:
            return submission.error
        if module.key in submission.problems:
            return submission.problems[module.key]
        notebook = submission.notebooks.get(module.key)
        if notebook is None:
            return (f"no notebook: expected {module.notebook.relative_to(self.settings.root).as_posix()} "
                    "(or its .ipynb) somewhere in the submission")
        try:
            progress = solution_progress(notebook.text, Path(notebook.path))
            check_syntax(notebook.text, Path(notebook.path))
        except NotebookError as err:
            return f"does not export: {err}"
        if progress.stubs_left:
            return f"{progress.stubs_left} stub{'s' if progress.stubs_left != 1 else ''} left"
        return ""

    def _put_notebook(self, course: Path, module: CourseModule, notebook: SubmittedNotebook) -> str:
        """Replace the reference notebook and package files of `module` in `course` by the student's; a problem or ""."""
        copied = load_settings(course)
        [target_module] = [m for m in list_modules(copied) if m.key == module.key]
        _remove_package_files(copied, self.targets[module.key])
        target_module.notebook.write_text(notebook.text, encoding="utf-8")
        return self._export(copied, [target_module], notebook)

    def _export(self, copied: Settings, modules: list[CourseModule], notebook: SubmittedNotebook | None) -> str:
        for module in modules:
            targets = sorted(set(scan_targets(module)))
            if targets != self.targets[module.key]:
                return (f"does not export: it writes {', '.join(targets) or 'no module'}, the course expects "
                        f"{', '.join(self.targets[module.key])} (keep the notebook's `#| default_exp` line)")
        try:
            with _EXPORT_LOCK:
                export_modules(copied, modules)
        except NotebookError as err:
            message = str(err).replace(str(copied.root) + os.sep, "")
            if notebook is not None:
                message = message.replace(modules[0].notebook.relative_to(copied.root).as_posix(), notebook.path)
            return f"does not export: {message}"
        return ""

    def _run(self, course: Path, module: CourseModule, job_dir: Path, user: SandboxUser | None,
             result: ModuleResult) -> None:
        work = prepare_workdir(job_dir / "work", user)
        if user is not None:
            _make_readable(course)
        before = _manifest(course)
        sandbox, report, running = self._pytest(course, self.test_folders(course, module), work, user, [])
        changed = _changed(before, _manifest(course))
        result.reason = _run_problem(sandbox, report, running, changed, course, self.limits)
        if report is not None and isinstance(report.get("peak_kib"), int):
            result.peak_bytes = report["peak_kib"] * 1024
        if not result.reason:
            result.tests = self._score(module.key, report)
            result.score = sum((t.points for t in result.tests), Fraction(0))
            if any(t.outcome != "passed" for t in result.tests):
                result.first_failure = self._inline_first_failure(course, module, work, user)

    def _inline_first_failure(self, course: Path, module: CourseModule, work: Path,
                              user: SandboxUser | None) -> str:
        """The first failure of the lesson's inline tests, as `tito test` shows it first ("" when they pass).

        The course's catalogued messages name each mistake there (`tito release check` proves it), so
        the feedback carries it beside the failed tests. Run in the sandbox like the tests; not scored."""
        notebook = course / module.notebook.relative_to(self.settings.root)
        command = [sys.executable, "-c", _INLINE, str(notebook.parent), notebook.name, str(work / _INLINE_REPORT)]
        sandbox = run_sandboxed(command, work, self.limits, {"PYTHONPATH": str(course)}, user, **self._seen(course))
        raw = _read_private_file(work / _INLINE_REPORT, _MAX_REPORT_BYTES)
        try:
            failures = json.loads(raw or b"{}").get("failures") or []
            text = _capped(str(failures[0]["traceback"]).rstrip()) if failures else ""
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            text = ""
        if not text and sandbox.reason:
            text = f"(the inline tests did not finish: {sandbox.reason})"
        return text.replace(str(course) + os.sep, "")

    def _score(self, module: str, report: dict) -> list[GradedTest]:
        tests = []
        errors = report["collection_errors"]
        for nodeid, points in self.points[module].items():
            found = report["tests"].get(nodeid)
            if found is None:
                path = nodeid.split("::", 1)[0]
                cause = errors.get(path) or next((m for p, m in errors.items() if path.startswith(p)), "")
                message = (f"could not be collected: {cause}" if cause else
                           "did not run (the test session ended before it, or it was not collected)")
                outcome = NOT_RUN
            else:
                outcome, message = found["outcome"], found["message"]
                if outcome == "skipped":
                    message = f"skipped: {message}"
            earned = points if outcome == "passed" else Fraction(0)
            tests.append(GradedTest(nodeid, nodeid.startswith(GRADING_DIR + "/"), outcome, message, earned, points))
        return tests

    # -- cumulative: the student's whole framework

    def student_course(self, submission: Submission) -> tuple[Path, dict[str, str]]:
        """The base with every module from the student's notebooks (a stub where one cannot be used), exported.

        Returns the course and {module: why it scores 0} for the modules whose notebook was replaced by a stub.
        """
        course = Path(tempfile.mkdtemp(prefix="student-", dir=self.scratch)) / "course"
        shutil.copytree(self.base, course, symlinks=True)
        copied = load_settings(course)
        problems: dict[str, str] = {}
        for module in list_modules(copied):
            reference = next(m for m in self.all_modules if m.key == module.key)
            problem = self.notebook_problem(submission, reference)
            if not problem:
                _remove_package_files(copied, self.targets[module.key])
                module.notebook.write_text(submission.notebooks[module.key].text, encoding="utf-8")
                problem = self._export(copied, [module], submission.notebooks[module.key])
            if problem:
                problems[module.key] = problem
                relpath = module.notebook.relative_to(course).as_posix()
                module.notebook.write_text(stub_text(read_text(reference.notebook), reference.notebook, relpath,
                                                     module.key), encoding="utf-8")
        with _EXPORT_LOCK:
            export_modules(copied, list_modules(copied))  # every module: student code or stub, no reference
        for cache in (course / self.settings.lib_path.name).rglob("__pycache__"):
            remove_tree(cache)
        return course, problems


def _remove_package_files(copied: Settings, targets: list[str]) -> None:
    """The package files a module's notebook writes, and their compiled caches."""
    for target in targets:
        path = copied.lib_path / Path(*target.split(".")).with_suffix(".py")
        path.unlink(missing_ok=True)
        for cached in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
            cached.unlink()


def _parse_report(raw: bytes | None) -> dict | None:
    """The plugin's report, or None when it is missing or not what the plugin writes."""
    if raw is None:
        return None
    try:
        report = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(report, dict) or not all(isinstance(report.get(k), dict)
                                               for k in ("tests", "collection_errors", "collected")):
        return None
    for entry in report["tests"].values():
        if not isinstance(entry, dict) or not isinstance(entry.get("outcome"), str):
            return None
        entry["message"] = _capped(str(entry.get("message", "")))
        entry["exception"] = str(entry.get("exception", ""))[:200]
    for name, message in list(report["collection_errors"].items()):
        report["collection_errors"][name] = _capped(str(message))
    return report


def _capped(text: str) -> str:
    """`text` cut at the length the plugin keeps (`MESSAGE_CHARS`), saying how much was left out."""
    if len(text) <= MESSAGE_CHARS:
        return text
    return text[:MESSAGE_CHARS] + f"\n... ({len(text) - MESSAGE_CHARS} more characters)"


def _run_problem(sandbox: SandboxResult, report: dict | None, running: str | None, changed: list[str],
                 course: Path, limits: Limits) -> str:
    """Why a run scores 0 as a whole, or "" when its tests decide."""
    where = f" while running {running}" if running else " while collecting the tests (importing the package)"
    if sandbox.reason:
        hung = "ran past" in sandbox.reason or "CPU time" in sandbox.reason
        return f"{sandbox.reason}{where if hung or 'printed' in sandbox.reason else ''}"
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"changed files of the course outside its work folder: {', '.join(changed[:3])}{more}"
    if report is None:
        return (f"pytest ended without writing its report (exit status {sandbox.returncode}){where}: "
                "a call to os._exit(), a crash, or a test that ended the process (or the report was larger "
                f"than {_MAX_REPORT_BYTES // 1024 ** 2} MiB); nothing is scored")
    memory = [n for n, t in report["tests"].items() if "MemoryError" in t.get("exception", "")]
    if memory:
        return (f"ran out of memory: {memory[0]} raised MemoryError (each process may use "
                f"{limits.memory_bytes / 1024 ** 3:g} GiB of address space)")
    imported = report.get("tinytorch")
    if imported and not Path(str(imported)).resolve().is_relative_to(course.resolve()):
        return f"the tests imported tinytorch from {imported}, outside the scratch course"
    return ""


def grade_submissions(settings: Settings, submissions: list[Submission], options: GradeOptions,
                      progress: Progress | None = None, run: GradingRun | None = None) -> list[StudentResult]:
    """Grade every submission on `options.modules`; results in the order of `submissions`.

    `progress(student, module, result)` hears of each job as it starts (result None) and ends.
    """
    owned = run is None
    run = run or GradingRun(settings, options)
    if owned:
        run.__enter__()
    try:
        results = {s.name: StudentResult(s.name, s.source.name, {}, list(s.ignored), s.error) for s in submissions}
        lock = threading.Lock()

        def one(submission: Submission, module: CourseModule, course: Path | None, problems: dict[str, str]):
            if progress:
                progress(submission.name, module.key, None)
            graded = run.job(submission, module, course, problems)
            with lock:
                results[submission.name].modules[module.key] = graded
            if progress:
                progress(submission.name, module.key, graded)

        with ThreadPoolExecutor(max_workers=run.jobs) as pool:
            futures = []
            try:
                for submission in submissions:
                    course, problems = (run.student_course(submission) if run.cumulative and not submission.error
                                        else (None, {}))
                    futures += [pool.submit(one, submission, m, course, problems) for m in run.modules]
                for future in futures:
                    future.result()
            except BaseException:  # Ctrl-C, or a bug: stop the runs in progress now, start no other
                for future in futures:
                    future.cancel()
                STOP.set()
                raise
            finally:
                pool.shutdown(wait=True)
                STOP.clear()
        order = [m.key for m in run.modules]
        for student in results.values():
            student.modules = {k: student.modules[k] for k in order}
        return [results[s.name] for s in submissions]
    finally:
        if owned:
            run.__exit__(None, None, None)
