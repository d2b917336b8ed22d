"""tito grade against the attacks of issue 29 that the sandbox must hold (module 01, one grading run).

* A snooping submission looks for everything secret it could read: the base course (every
  reference solution and notebook), the recorded values of the graded cases, the
  instructor's course, other runs, /proc of other processes (their folders and environment),
  inherited file descriptors, its own environment, the shared temporary folders, and any
  notebook, recorded values, other module's cases or mistakes catalogue in its own hand-out. Whatever it finds,
  it breaks its own import with the list, so it scores what an honest submission scores only
  when it found nothing.
* A hog starts 30 spinning children, each in a session of its own (double fork), and waits: with
  `--jobs 2`, the honest neighbour graded at the same time (a correct solution that needs 2 s of
  CPU) must score exactly as alone. Without counting the spinners against the hog, the neighbour
  ran past its 30 s wall-clock limit and scored 0.

Hostile code is bounded: small limits (below), spinners killed with the run.
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tito.grading.grade import GradeOptions, GradingRun, grade_submissions
from tito.grading.report import write_outputs
from tito.grading.sandbox import GiB, MiB, Limits, _namespaces_work, can_switch_user
from tito.grading.submissions import collect_submissions

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (can_switch_user() and _namespaces_work()),
                                 reason="needs root, setpriv and namespaces: a sandbox user of its own")]

LIMITS = Limits(wall_s=30, cpu_s=8, memory_bytes=int(1.5 * GiB), output_bytes=MiB, processes=96, tmp_bytes=16 * MiB)

SNOOP = r'''
import os as _os, stat as _stat
from pathlib import Path as _Path
def _snoop():
    found = []
    instructor, own = _Path(INSTRUCTOR), _os.environ.get("PYTHONPATH", "").split(":")[0]
    work = _Path(_os.getcwd())
    scratch = work.parents[1]
    def readable(path):
        try:
            with open(path, "rb") as handle:
                handle.read(1)
            return True
        except OSError:
            return False
    def listable(path):
        try:
            _os.listdir(path)
            return True
        except OSError:
            return False
    for path in [instructor / "modules/12_attention/attention_dev.py", instructor / "grading/grading.toml",
                 instructor / "grading/12_attention/expected.npz", instructor / "grading/01_tensor/expected.npz",
                 instructor / "modules/01_tensor/mistakes.toml", instructor / "tinytorch/core/attention.py",
                 scratch / "base/tinytorch/core/attention.py", scratch / "base/modules/12_attention/attention_dev.py",
                 work.parent / "build/settings.ini"]:
        if readable(path):
            found.append(f"read {path}")
    for folder in (instructor, scratch, scratch / "base", _Path("/proc/1/cwd")):
        try:
            others = sorted(set(_os.listdir(folder)) - {work.parent.name})  # its own job is no secret
        except OSError:
            continue
        if others:
            found.append(f"listed {folder}: {others[:5]}")
    import sys as _sys
    python = tuple(_os.path.realpath(p) + "/" for p in {_sys.prefix, _sys.base_prefix})
    def secret(path):
        if _os.path.realpath(path).startswith(python):
            return False  # Python's own files (NumPy ships test data as .npz): no secret, wherever the venv lies
        name = path.name
        if name in ("mistakes.toml", "grading.toml", "record_expected.py") or name.endswith((".npz", "_dev.py")):
            return True  # recorded values, notebooks (the reference's), catalogues: none is needed by a run
        mine = str(path).startswith(str(work) + "/grading/")  # its own module's cases file and their helper
        parts = path.parts  # a grading/ folder, but not tito/grading/: tito's own code, handed out to run the cases
        hidden = any(part == "grading" and parts[i - 1] != "tito" for i, part in enumerate(parts))
        return hidden and not mine
    roots = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", str(instructor.parent)]
    if own:
        roots.append(own)
    for root in roots:
        for folder, dirs, files in _os.walk(root):
            for name in files:
                path = _Path(folder) / name
                if secret(path) and readable(path):
                    found.append(f"read {path}")
    me = _os.getuid()
    for entry in _os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if _os.stat(f"/proc/{entry}").st_uid == me:
                continue
        except OSError:
            continue
        if listable(f"/proc/{entry}/cwd"):
            found.append(f"listed /proc/{entry}/cwd")
        if readable(f"/proc/{entry}/environ"):
            found.append(f"read /proc/{entry}/environ")
        try:
            found.append(f"/proc/{entry}/root -> {_os.readlink(f'/proc/{entry}/root')}")
        except OSError:
            pass
    for fd in _os.listdir("/proc/self/fd"):
        try:
            target = _os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith((own or str(work), str(work), "/dev/", "/proc/")):
            found.append(f"inherited fd {fd} -> {target}")
    for key, value in _os.environ.items():
        if str(instructor) in value or "/base" in value:
            found.append(f"environment {key}={value}")
    return found
_found = _snoop()
if _found:
    raise ImportError("SNOOP FOUND " + "; ".join(_found[:20]))
'''

HOG = r'''
import os as _os, time as _time
if not _os.environ.get("HOG_STARTED"):
    _os.environ["HOG_STARTED"] = "1"
    for _ in range(30):
        _middle = _os.fork()
        if _middle == 0:
            _os.setsid()
            if _os.fork() == 0:
                while True:
                    pass
            _os._exit(0)
        _os.waitpid(_middle, 0)
    _time.sleep(120)
'''


# An honest submission whose code is slow: 2 s of CPU when the package is imported (then the reference's).
SLOW = r'''
import time as _time
_until = _time.process_time() + 2
while _time.process_time() < _until:
    pass
'''


def at_import(text: str, code: str) -> str:
    """`code` at the top of the notebook's second exported cell: it runs when the package is imported."""
    first, second, rest = text.split("#| export\n", 2)
    return first + "#| export\n" + second + "#| export\n" + code.strip("\n") + "\n" + rest


def _submit(folder: Path, notebooks: dict[str, str]) -> Path:
    for name, text in notebooks.items():
        lesson = folder / name / "modules" / "01_tensor" / "tensor_dev.py"
        lesson.parent.mkdir(parents=True)
        lesson.write_text(text, encoding="utf-8")
    return folder


def _grade(course, folder: Path, out: Path) -> dict:
    module = course.module("01")
    options = GradeOptions((module,), jobs=2, limits=LIMITS)
    with GradingRun(course.settings, options) as run:
        students = grade_submissions(course.settings, collect_submissions(folder, [module]), options, run=run)
        write_outputs(out, students, run.points)
    return {s.name: s.modules["01_tensor"] for s in students}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory, shared_grading_course):
    import shutil

    tmp = tmp_path_factory.mktemp("attacks")
    course = shared_grading_course
    # secrets of another module for the snoop to look for: module 12's hidden tests and recorded values
    shutil.copytree(REPO / "grading" / "12_attention", course.root / "grading" / "12_attention", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    reference = course.module("01").notebook.read_text(encoding="utf-8")
    snoop = at_import(reference, f"INSTRUCTOR = {str(course.root)!r}\n" + SNOOP)
    slow = at_import(reference, SLOW)
    together = _grade(course, _submit(tmp / "together", {"a_hog": at_import(reference, HOG), "b_good": slow,
                                                         "c_snoop": snoop}), tmp / "out-together")
    alone = _grade(course, _submit(tmp / "alone", {"b_good": slow}), tmp / "out-alone")
    return dict(tmp=tmp, together=together, alone=alone)


def _messages(result) -> str:
    return result.reason + "\n" + "\n".join(sorted({c.message for c in result.cases if c.message}))[:3000]


def test_a_snoop_finds_nothing_secret_and_scores_as_the_reference(attacked):
    snoop = attacked["together"]["c_snoop"]
    assert "SNOOP FOUND" not in _messages(snoop), _messages(snoop)
    assert snoop.score == snoop.max_score and not snoop.reason, _messages(snoop)


def test_30_spinners_in_their_own_sessions_are_stopped_at_the_cpu_limit(attacked):
    hog = attacked["together"]["a_hog"]
    assert hog.score == 0 and hog.reason.startswith("used more than its 8 s of CPU time"), hog.reason


def test_the_neighbour_of_a_hog_scores_exactly_as_alone(attacked):
    tmp = attacked["tmp"]

    def rows(out: str) -> list[list[str]]:
        with open(tmp / out / "grades_long.csv", newline="", encoding="utf-8") as handle:
            return [row for row in csv.reader(handle) if row[0] == "b_good"]

    assert attacked["together"]["b_good"].score == attacked["alone"]["b_good"].score == 10
    assert rows("out-together") == rows("out-alone") and rows("out-alone")


# In --cumulative mode: looks through its whole hand-out for any line of another module's reference solution.
REFERENCE_HUNT = r'''
import os as _os
def _hunt():
    own = _os.environ.get("PYTHONPATH", "").split(":")[0]
    found = []
    for folder, dirs, files in _os.walk(own):
        for name in files:
            try:
                with open(_os.path.join(folder, name), encoding="utf-8") as handle:
                    text = {line.strip() for line in handle}
            except (OSError, UnicodeDecodeError):
                continue
            hits = text & REFERENCE_LINES
            if hits:
                found.append(f"{_os.path.join(folder, name)}: {sorted(hits)[0]}")
    return found
_found = _hunt()
if _found:
    raise ImportError("REFERENCE FOUND " + "; ".join(_found[:5]))
'''


def _reference_lines(course) -> set[str]:
    """Lines (stripped, 40 characters or more) found only inside the solution blocks of modules 02-20 (not in
    given code: outside the blocks, or in a companion notebook)."""
    from tito.course import list_modules
    from tito.notebook import find_solution_blocks

    inside, outside = set(), set()
    for module in list_modules(course.settings):
        text = module.notebook.read_text(encoding="utf-8")
        lines = text.splitlines()
        blocks = find_solution_blocks(text, module.notebook)
        solution = {n for b in blocks for n in range(b.begin_line, b.end_line - 1)}  # 0-based body lines
        for number, line in enumerate(lines):
            target = inside if number in solution and module.key != "01_tensor" else outside
            target.add(line.strip())
        for companion in module.companions:  # given code, in the student edition as it is
            outside.update(line.strip() for line in companion.read_text(encoding="utf-8").splitlines())
    return {line for line in inside - outside if len(line) >= 40}


def test_cumulative_mode_hands_out_no_reference_code(tmp_path, new_course):
    """--cumulative: every module comes from the student's notebooks (a stub where one is missing), so no
    line of any other module's reference solution is anywhere the run can read. The course has all 20
    modules; the submission holds module 01 alone, so the 19 others are stubs."""
    import shutil

    course = new_course("cumulative")
    course.root.parent.chmod(0o755)  # a sandbox user of its own walks through to the scratch folders
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for folder in sorted((REPO / "modules").iterdir()):
        if folder.is_dir() and not (course.root / "modules" / folder.name).exists():
            shutil.copytree(folder, course.root / "modules" / folder.name, ignore=ignore)
    shutil.copytree(REPO / "grading" / "01_tensor", course.root / "grading" / "01_tensor", ignore=ignore)
    shutil.copy2(REPO / "grading" / "reference_values.py", course.root / "grading" / "reference_values.py")
    course = type(course)(course.root)  # settings read again: 20 modules
    module = course.module("01")
    lines = _reference_lines(course)
    assert len(lines) > 100  # the hunt has something to find: every module but 01 has solutions
    reference = module.notebook.read_text(encoding="utf-8")
    hunter = at_import(reference, f"REFERENCE_LINES = set({sorted(lines)!r})\n" + REFERENCE_HUNT)
    options = GradeOptions((module,), jobs=1, cumulative=True, limits=LIMITS)
    with GradingRun(course.settings, options) as run:
        found = collect_submissions(_submit(tmp_path / "subs", {"hunter": hunter}), [module])
        [student] = grade_submissions(course.settings, found, options, run=run)
    graded = student.modules["01_tensor"]
    assert graded.score == graded.max_score and not graded.reason, _messages(graded)
