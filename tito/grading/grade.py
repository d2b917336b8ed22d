"""`tito grade`: each (student, module) graded on its own: the student's code runs the module's graded
cases in a sandbox, and the grader, which never runs student code, compares what it produced.

One run:

1. **A base course** is built once in a scratch folder only the grader may enter: the reference
   course (package, tests, tito), without `grading/` and without the mistakes catalogues. Each
   module's graded cases (`grading/NN_name/cases.py`) are described there, by the grader on the
   reference (their names, what each checks, tolerances); the reference's values
   (`expected.npz`), the catalogued mistakes' values (`mistakes.npz`) and the catalogue itself
   are read from the instructor's course and stay in the grader's memory.
2. **Each (student, module)** is first read: a notebook that is missing, does not parse, or
   still has stubs scores 0 with that reason, without running anything. Otherwise a copy of
   the base gets the student's notebook in place of the reference one; the reference's
   package files for that module (and their compiled `.pyc`) are deleted, and the student's
   notebook is exported into the package. So a mistake in module 01 costs points in 01 only.
   `--cumulative` exports every module from the student's notebooks instead (a stub where
   one is missing or does not export): the "whole framework" grade, with no reference code at all.
3. **In the sandbox** (`tito.grading.sandbox`), `python -m tito.grading.cases` imports that
   package and the module's cases file (the only file of `grading/` it is given), runs every case
   with its seeded generator and writes what it produced (`tito.grading.cases`). A run that
   breaks a limit (time, CPU, memory, output, files, processes), crashes, or changes files
   outside its work folder scores 0 with the reason.
4. **The grader** reads that file as untrusted data and compares each case with the reference's
   values (`tito.grading.compare`): a case scores its points (`grading.toml`) when every value it
   produced equals the reference's within the case's tolerance. The feedback is written from what
   the grader computed, never from text of the student's run (`tito.grading.compare` says what the
   feedback shows in each mode). The visible tests (`tests/NN_name/`) do not count: anything
   computed in the student's process can be forged, and students run them with `tito test`.

Grading is deterministic: results depend only on the submissions and the course, never on
timing or on the order in which jobs finish.
"""
from __future__ import annotations

import json
import os
import queue
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np

from ..course import CourseError, CourseModule, Settings, list_modules, load_settings
from ..export import export_modules, scan_targets  # nbdev is imported only when a notebook is exported
from ..mistakes import Mistake, load_catalogue
from ..notebook import NotebookError, check_syntax, read_text, solution_progress, stub_text
from ..release import EDITION_ITEMS, copy_course
from .cases import IMPORT_FAILED, RAISED
from .compare import (CaseResult, CaseSpec, ProducedError, compare_case, describe_raised, load_expected,
                      rank_mistakes, read_values, split_mistakes)
from .config import GRADING_DIR, GradingConfig, load_config, points_per_case
from .sandbox import (ONE_THREAD_ENV, STOP, Limits, SandboxResult, SandboxUser, SandboxUsers, describe_isolation,
                      prepare_workdir, run_sandboxed)
from .scratch import remove_tree
from .submissions import Submission, SubmittedNotebook

CASES_FILE = "cases.py"  # grading/NN_name/cases.py: the module's graded cases (given to the sandbox)
EXPECTED_FILE = "expected.npz"  # the reference's values (never given to the sandbox)
MISTAKES_FILE = "mistakes.npz"  # each catalogued mistake's values (never given to the sandbox)
CASE_HELPERS = "reference_values.py"  # grading/reference_values.py: what cases files import (nothing secret)
_PRODUCED = "produced.npz"
_EXPORT_LOCK = threading.Lock()  # nbdev was not written for threads: exports take turns (a fraction of a second each)
# Run as the sandbox's user before grading: the same Python, its packages, and Python started again.
_PROBE = ("import subprocess, sys, numpy, jupytext; "
          "subprocess.run([sys.executable, '-c', 'import numpy'], check=True); print(sys.version)")
_DESCRIBE_TIMEOUT_S = 600

Progress = Callable[[str, str, "ModuleResult | None"], None]  # (student, module key, result when done)


@dataclass(frozen=True)
class ModuleCases:
    """A module's graded cases as the grader holds them (nothing of it but `file` goes into a sandbox)."""

    file: Path  # the run's copy of grading/NN_name/cases.py (in the grader's scratch folder)
    specs: list[CaseSpec]  # in the cases file's order
    mistakes: dict[str, dict[str, np.ndarray]]  # mistake name -> {"case/label": its value}
    catalogue: list[Mistake]


@dataclass
class ModuleResult:
    module: str  # "01_tensor"
    max_score: Fraction
    score: Fraction = Fraction(0)
    reason: str = ""  # why it scored 0 as a whole ("3 stubs left", a broken limit); "" when its cases decided
    cases: list[CaseResult] = field(default_factory=list)
    notebook: str = ""  # where the graded notebook was in the submission
    note: str = ""  # e.g. "read from an .ipynb with jupytext"
    seconds: float = 0.0  # not part of any grade: only Gradescope's execution_time


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


def max_jobs() -> int:
    """The most (student, module) runs `tito grade --jobs` starts at once: one per core (the CPU count,
    also its default)."""
    return os.cpu_count() or 1


def check_jobs(jobs: int) -> None:
    """CourseError, before any work, unless 1 <= `jobs` <= `max_jobs()`.

    Runs beyond the cores only wait for one, and a run's wall-clock limit counts the wait: more jobs
    than cores would grade no faster and could push an honest submission past its limit."""
    most = max_jobs()
    if jobs < 1:
        raise CourseError(f"--jobs takes a positive number, e.g. --jobs {min(2, most)} (found {jobs}).")
    if jobs > most:
        raise CourseError(
            f"--jobs {jobs}: this machine has {most} core(s), so at most --jobs {most}. More runs than cores "
            "only wait for one, and a run's wall-clock limit counts the wait (an honest submission could run "
            f"past it). Give --jobs {most} or fewer (or leave it out: the default is {most}); nothing was done.")


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
    """One `tito grade` run: the scratch folder, the base course, the graded cases, the sandbox users.

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
        self.cases: dict[str, ModuleCases] = {}  # module -> its graded cases (the grader's, never the sandbox's)
        self.points: dict[str, dict[str, Fraction]] = {}  # module -> {case: points}
        self.targets = {m.key: sorted(set(scan_targets(m))) for m in self.all_modules}

    def __enter__(self) -> GradingRun:
        try:
            self.scratch.chmod(0o711)  # a sandbox user may pass through, not list the jobs of others
            self._build_base()
            self._load_cases()
            self._check_sandbox_user()
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
        self.base.chmod(0o700)  # the grader's alone: a run gets only its hand-out (`hand_out`)

    def hand_out(self, source: Path, dest: Path, move: bool) -> None:
        """Put in `dest` what a run needs from the course in `source`, and nothing else: the package (the
        student's module and, graded on its own, the others' reference) and tito (`tito.grading.cases`).

        Never a notebook (the reference's or the student's own), the tests, grading/ (the run gets its
        cases file in its work folder: `_give_cases`), a mistakes catalogue or the course's settings.
        `move`: `source` is a private copy made for this run (moved, not copied).
        """
        dest.mkdir()
        for item in (self.settings.lib_path.name, "tito"):
            origin, target = source / item, dest / item
            if move:
                os.replace(origin, target)
            else:
                shutil.copytree(origin, target, symlinks=True)

    def _seen(self, course: Path) -> dict:
        """What a run sees of the machine's folders: its course (and its work folder), neither the instructor's
        course nor the rest of the scratch folder (where the machine allows namespaces; `tito.grading.sandbox`)."""
        return {"visible": [course], "hidden": [self.settings.root, self.scratch]}

    def _load_cases(self) -> None:
        """Each graded module's cases: described on the reference (by the grader), values from the instructor's files."""
        grading = self.settings.root / GRADING_DIR
        files = {m.key: grading / m.key / CASES_FILE for m in self.modules}
        missing = [key for key, path in files.items() if not path.is_file()]
        if missing:
            have = [m.number for m in self.modules if m.key not in missing]
            raise CourseError(
                f"No graded cases for {', '.join(missing)}: a module is graded by its cases, "
                f"{GRADING_DIR}/NN_name/{CASES_FILE} with their recorded values (CONTRIBUTING.md: graded cases)."
                + (f" Grade the others with --modules {' '.join(have)}." if have else ""))
        for key, path in files.items():
            if not (path.parent / EXPECTED_FILE).is_file():
                raise CourseError(f"{path.parent / EXPECTED_FILE} is missing: record the reference's values with "
                                  f"`python {GRADING_DIR}/record_expected.py {key.split('_', 1)[0]}`.")
        snapshots = {key: self._snapshot(path) for key, path in files.items()}
        described = self._describe(list(snapshots.values()))
        for module in self.modules:
            self.cases[module.key] = self._module_cases(module, files[module.key], snapshots[module.key],
                                                        described[str(snapshots[module.key])])
            names = [spec.name for spec in self.cases[module.key].specs]
            self.points[module.key] = points_per_case(self.config, module.key, names)

    def _snapshot(self, path: Path) -> Path:
        """A copy of a cases file (and the helpers it imports) in the grader's scratch folder: what the run
        describes and gives each job, whatever happens to the instructor's files meanwhile."""
        folder = self.scratch / "cases" / GRADING_DIR / path.parent.name
        folder.mkdir(parents=True)
        (self.scratch / "cases").chmod(0o700)  # no sandbox user may read another module's cases
        shutil.copyfile(path, folder / CASES_FILE)
        helpers = path.parent.parent / CASE_HELPERS
        if helpers.is_file() and not (folder.parent / CASE_HELPERS).exists():
            shutil.copyfile(helpers, folder.parent / CASE_HELPERS)
        return folder / CASES_FILE

    def _describe(self, files: list[Path]) -> dict[str, dict]:
        """{cases file: {case: {"what", "tolerance"}}}, read by importing the cases with the reference package
        (the grader's own process runs no course code; this one runs only the reference's)."""
        out = self.scratch / "cases" / "described.json"
        command = [sys.executable, "-m", "tito.grading.cases", "--describe", str(out), *map(str, files)]
        env = {**os.environ, "PYTHONPATH": str(self.base), **ONE_THREAD_ENV}
        done = subprocess.run(command, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=_DESCRIBE_TIMEOUT_S)
        if done.returncode != 0:
            raise CourseError("The graded cases do not import with the reference package, so nothing can be "
                              f"graded:\n{(done.stderr or done.stdout)[-3000:]}")
        return json.loads(out.read_text(encoding="utf-8"))

    def _module_cases(self, module: CourseModule, path: Path, snapshot: Path, described: dict[str, dict]) -> ModuleCases:
        expected = load_expected(path.parent / EXPECTED_FILE)
        if set(expected) != set(described):
            raise CourseError(f"{path.parent / EXPECTED_FILE} holds the cases {', '.join(sorted(expected))}, "
                              f"{path.name} has {', '.join(described)}: record them again with "
                              f"`python {GRADING_DIR}/record_expected.py {module.number}`.")
        specs = [CaseSpec(name, info["what"], info["tolerance"], expected[name]) for name, info in described.items()]
        mistakes_file = path.parent / MISTAKES_FILE
        mistakes = split_mistakes(read_values(mistakes_file, limit=1024 ** 3)) if mistakes_file.is_file() else {}
        return ModuleCases(snapshot, specs, mistakes, load_catalogue(module))

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
        user = self.users.get()
        job_dir = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self.scratch))
        start = time.monotonic()
        try:
            if user is not None:
                os.chown(job_dir, 0, user.gid)
                job_dir.chmod(0o750)  # its own user (by its group) and the grader, nobody else
            course = job_dir / "course"
            if student_course is not None:
                self.hand_out(student_course, course, move=False)
            else:
                build = job_dir / "build"  # the whole course, the grader's alone (job_dir is open to the user)
                shutil.copytree(self.base, build, symlinks=True)
                build.chmod(0o700)
                result.reason = self._put_notebook(build, module, notebook)
                if not result.reason:
                    self.hand_out(build, course, move=True)
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
        """Run the module's cases on `course` in the sandbox, then compare what they produced (here, trusted)."""
        work = prepare_workdir(job_dir / "work", user)
        cases = self._give_cases(work, module)
        if user is not None:
            _make_readable(course)
        before = _manifest(course)
        sandbox = run_sandboxed([sys.executable, "-m", "tito.grading.cases", str(cases), str(work / _PRODUCED)],
                                work, self.limits, {"PYTHONPATH": str(course)}, user, **self._seen(course))
        changed = _changed(before, _manifest(course))
        detail = self.cumulative  # no reference code was in its reach: its own text may reach it back
        result.reason = _run_problem(sandbox, changed, detail)
        if result.reason:
            return
        graded = self.cases[module.key]
        allowed = {spec.name: set(spec.expected) for spec in graded.specs}
        try:
            produced = read_values(work / _PRODUCED, allowed)
        except ProducedError as err:
            result.reason = f"{err}: nothing is scored"
            return
        if IMPORT_FAILED in produced:
            result.reason = f"the package did not import: {describe_raised(produced[IMPORT_FAILED], detail)}"
            return
        memory = [s.name for s in graded.specs if _raised_memory_error(produced.get(f"{s.name}/{RAISED}"))]
        if memory:
            result.reason = (f"ran out of memory: case {memory[0]} raised MemoryError (each process may use "
                             f"{self.limits.memory_bytes / 1024 ** 3:g} GiB of address space)")
            return
        points = self.points[module.key]
        ranking = rank_mistakes(graded.specs, produced, graded.mistakes, graded.catalogue)
        result.cases = [compare_case(spec, produced, points[spec.name], detail, graded.mistakes, graded.catalogue,
                                     ranking) for spec in graded.specs]
        result.score = sum((c.points for c in result.cases), Fraction(0))

    def _give_cases(self, work: Path, module: CourseModule) -> Path:
        """Copy the module's cases file (and the helpers it imports) into `work`, as the course lays them out;
        nothing else of grading/ (no recorded values, no other module's cases) goes into the sandbox."""
        source = self.cases[module.key].file
        folder = work / GRADING_DIR / module.key
        folder.mkdir(parents=True)
        shutil.copyfile(source, folder / CASES_FILE)
        helpers = source.parent.parent / CASE_HELPERS
        if helpers.is_file():
            shutil.copyfile(helpers, folder.parent / CASE_HELPERS)
        _make_readable(work / GRADING_DIR)
        return folder / CASES_FILE

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


def _raised_memory_error(raised: np.ndarray | None) -> bool:
    return raised is not None and str(raised.item()).split(":", 1)[0] == "MemoryError"


def _run_problem(sandbox: SandboxResult, changed: list[str], detail: bool = True) -> str:
    """Why a run scores 0 as a whole (a broken limit, changed course files), or "" when its cases decide.

    Without `detail` (other modules' reference code was in the sandbox's reach), nothing the run chose
    reaches the student: the sandbox's reason up to its first details (the names of the processes it
    left, of the files it wrote), and how many course files it changed, not their names."""
    if sandbox.reason:
        return sandbox.reason if detail else re.split(r":| \(", sandbox.reason, maxsplit=1)[0]
    if changed:
        if not detail:
            return f"changed {len(changed)} file(s) of the course outside its work folder"
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"changed files of the course outside its work folder: {', '.join(changed[:3])}{more}"
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
