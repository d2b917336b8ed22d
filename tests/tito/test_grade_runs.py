"""tito grade end to end on module 01: hostile submissions, each its own test, graded in one run.

One grading run (two at a time) holds a correct submission, one with a catalogued mistake,
a gutted one (every solution block `pass`), and one of each kind of hostile code. Each must
end within its limits and score 0 (or what it really earned) with the reason; each attack on
the score itself (forging what pytest or the cases' runner reports, reading the reference)
scores no more than the gutted submission it is added to; and the two ordinary submissions
must grade exactly as they do alone. Hostile code sits inside the lesson's own solution
blocks, at the top of an exported cell, or in an exported cell of its own at the end, where a
student would put it.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import uuid
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tito.grading.grade import GradeOptions, GradingRun, grade_submissions
from tito.grading.report import write_outputs
from tito.grading.sandbox import GiB, Limits, can_switch_user
from tito.grading.submissions import collect_submissions
from tito.mistakes import load_catalogue
from tito.notebook import find_solution_blocks, stub_text

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=60, cpu_s=6, memory_bytes=int(1.5 * GiB), output_bytes=2 ** 20, processes=64)
REPO = Path(__file__).resolve().parents[2]
with np.load(REPO / "grading" / "01_tensor" / "expected.npz") as _recorded:
    CASES_01 = len({key.split("/", 1)[0] for key in _recorded.files})  # module 01's graded cases
MISTAKE = "mean-upcasts"  # a catalogued mistake of module 01 that a graded case tells apart (its values are recorded)
MARK = f"0.000{uuid.uuid4().int % 10 ** 9}"  # `sleep 120 0.000NNN`: the hostile children, findable after the run
def with_code(text: str, owner: str, code: str) -> str:
    """The notebook with `code` as the first lines of the solution block of `owner` (e.g. "Tensor.matmul")."""
    lines = text.splitlines(keepends=True)
    [block] = [b for b in find_solution_blocks(text, Path("x")) if b.owner == owner]
    body = "".join(block.indent + line + "\n" for line in code.strip("\n").splitlines())
    return "".join(lines[: block.begin_line]) + body + "".join(lines[block.begin_line:])


def at_import(text: str, code: str) -> str:
    """The notebook with `code` at the top of its second exported cell (it runs when the package is imported;
    the first cell holds the `from __future__` import, which must stay first)."""
    first, second, rest = text.split("#| export\n", 2)
    return first + "#| export\n" + second + "#| export\n" + code.strip("\n") + "\n" + rest


def gutted(text: str) -> str:
    """Every solution block's body replaced by `pass`: no stubs left, so it runs, and its code does nothing."""
    lines = text.splitlines(keepends=True)
    for block in reversed(find_solution_blocks(text, Path("x"))):
        lines[block.begin_line: block.end_line - 1] = [block.indent + "pass\n"]
    return "".join(lines)


def at_end(text: str, code: str) -> str:
    """The notebook with an exported cell of `code` at its end (it runs after every definition, at import)."""
    return text.rstrip("\n") + "\n\n\n# %%\n#| export\n" + code.strip("\n") + "\n"


FORGE_VALUES = """
import atexit as _atexit, os as _os, sys as _sys
def _forge():
    import numpy
    from tito.grading.cases import load_cases, produce, save_values
    rng = numpy.random.default_rng(0)
    made = produce(load_cases(_sys.argv[1]))
    save_values(_sys.argv[2], {k: (rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
                               for k, v in made.items() if not k.endswith("(raised)")})
    _os._exit(0)
_atexit.register(_forge)
"""


def attacks(reference: str, instructor_grading: Path) -> dict[str, str]:
    """Gutted code that attacks the score: each must score what gutted code scores."""
    empty = gutted(reference)
    return {
        "gutted": empty,
        "rewrites_pytest_report": at_end(empty, """
import atexit as _atexit, json as _json, os as _os
def _forge_report():  # what rewrote pytest's report at exit when the grader read it
    report = {"exitstatus": 0, "tests": {}, "collection_errors": {}, "collected": {}}
    for name in (_os.environ.get("TITO_GRADE_REPORT"), "report.json"):
        if name:
            with open(name, "w") as handle:
                _json.dump(report, handle)
_atexit.register(_forge_report)
"""),
        "patches_testreport": at_end(empty, """
try:
    import _pytest.reports as _reports
    _reports.TestReport.passed = property(lambda self: True)
    _reports.TestReport.outcome = "passed"
except Exception:
    pass
"""),
        "registers_a_plugin": at_end(empty, """
import os as _os
_os.environ["PYTEST_PLUGINS"] = "pass_everything"
with open("pass_everything.py", "w") as _handle:
    _handle.write("def pytest_runtest_logreport(report):\\n    report.outcome = 'passed'\\n")
"""),
        "forges_values_and_exits": at_end(empty, FORGE_VALUES),
        "forges_values_at_import": at_end(empty, FORGE_VALUES.replace("_atexit.register(_forge)", "_forge()")),
        "reads_the_reference": at_end(empty, f"""
from pathlib import Path as _Path
_course = _Path(__file__).resolve().parents[2]
_found = []
for _path in [_course.parent.parent / "base" / "tinytorch" / "core" / "tensor.py",
              *_course.parent.parent.glob("*/course/tinytorch/core/tensor.py"),
              _Path({str(instructor_grading.parent / "tinytorch" / "core" / "tensor.py")!r})]:
    try:
        _found.append(_path.read_text())
    except OSError:
        pass
for _source in _found:
    if "def matmul" in _source and sum(_line.strip() == "pass" for _line in _source.splitlines()) < 3:
        exec(compile(_source, "reference", "exec"), globals())  # the reference's definitions replace the gutted ones
        break
"""),
        "reads_the_recorded_values": at_end(empty, FORGE_VALUES.replace(
            "    made = produce(load_cases(_sys.argv[1]))", f"""    made = {{}}
    for path in [{str(instructor_grading / "01_tensor" / "expected.npz")!r},
                 {str(instructor_grading / "01_tensor" / "mistakes.npz")!r}, "../grading/01_tensor/expected.npz"]:
        try:
            made = dict(numpy.load(path))
            break
        except OSError:
            pass
    if made:
        save_values(_sys.argv[2], made)
        _os._exit(0)""")),
    }


def hostile_notebooks(reference: str, mistake: str, instructor_grading: Path) -> dict[str, str]:
    return {
        "good": reference,
        "mistake": mistake,
        **attacks(reference, instructor_grading),
        "hang_at_import": at_import(reference, "while True:\n    pass"),
        "hang_in_solution": with_code(reference, "Tensor.matmul", "while True:\n    pass"),
        "allocates_50gb": with_code(reference, "Tensor.matmul", "np.ones(50 * 2**30, dtype=np.uint8)"),
        "starts_200_children": with_code(reference, "Tensor.matmul", f"""
import subprocess
if not hasattr(np, "_children"):  # once: 200 sleeping children, each gone by itself after 120 s
    np._children = [subprocess.Popen(["sleep", "120", "{MARK}"]) for _ in range(200)]
"""),
        "prints_100mb": with_code(reference, "Tensor.matmul", """
import sys
for _ in range(100):
    sys.stdout.write("x" * 2**20)
"""),
        "os_exit": with_code(reference, "Tensor.matmul", "import os\nos._exit(0)"),
        "vandal": with_code(reference, "Tensor.matmul", f"""
import shutil
try:
    shutil.rmtree("..")
except OSError:
    pass
try:
    with open({str(instructor_grading / "01_tensor" / "cases.py")!r}, "w") as handle:
        handle.write("CASES = {{}}\\n")
    open({str(instructor_grading / "planted.py")!r}, "w").write("x = 1\\n")
except OSError:
    pass
"""),
    }


def write_submissions(folder: Path, notebooks: dict[str, str], mistake: str) -> None:
    folder.mkdir(parents=True)
    for name, text in notebooks.items():
        lesson = folder / name / "modules" / "01_tensor" / "tensor_dev.py"
        lesson.parent.mkdir(parents=True)
        lesson.write_text(text, encoding="utf-8")
    # Ships tests that pass, a conftest that would pass everything, and its own package: all ignored.
    with zipfile.ZipFile(folder / "ships_its_own_tests.zip", "w") as archive:
        archive.writestr("work/modules/01_tensor/tensor_dev.py", mistake)
        archive.writestr("work/conftest.py", "import pytest\n\n@pytest.hookimpl(tryfirst=True)\n"
                                             "def pytest_collection_modifyitems(items):\n    items.clear()\n")
        archive.writestr("work/tests/01_tensor/test_tensor.py", "def test_everything():\n    assert True\n")
        archive.writestr("work/tinytorch/core/tensor.py", "raise SystemExit(0)\n")


def _grade(course, submissions: Path, *outs: Path):
    """Grade module 01 of every submission, once per `outs` in one run; (results, course files changed meanwhile)."""
    options = GradeOptions((course.module("01"),), jobs=2, limits=LIMITS)
    with GradingRun(course.settings, options) as run:
        found = collect_submissions(submissions, [course.module("01")])
        for out in outs:
            students = grade_submissions(course.settings, found, options, run=run)
            write_outputs(out, students, run.points)
        changed = run.changed_outside()
    return {s.name: s for s in students}, changed


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, shared_grading_course):
    tmp = tmp_path_factory.mktemp("hostile")
    course = shared_grading_course
    module = course.module("01")
    reference = module.notebook.read_text(encoding="utf-8")
    [mistake] = [m for m in load_catalogue(module) if m.name == MISTAKE]
    notebooks = hostile_notebooks(reference, mistake.apply(reference), course.root / "grading")
    hidden_before = _snapshot(course.root / "grading")
    write_submissions(tmp / "all", notebooks, mistake.apply(reference))
    results, changed = _grade(course, tmp / "all", tmp / "out-all")
    hidden_after = _snapshot(course.root / "grading")
    _restore(course.root / "grading", hidden_before)  # as the instructor must, where the vandal could write
    alone = {name: notebooks[name] for name in ("good", "mistake")}
    write_submissions(tmp / "alone", alone, mistake.apply(reference))
    (tmp / "alone" / "ships_its_own_tests.zip").unlink()
    _grade(course, tmp / "alone", tmp / "out-alone", tmp / "out-again")
    return dict(tmp=tmp, course=course, results=results, mistake=mistake, hidden_before=hidden_before,
                hidden_after=hidden_after, changed=changed)


def _restore(folder: Path, snapshot: dict[str, bytes]) -> None:
    shutil.rmtree(folder)
    for name, data in snapshot.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _feedback(hostile, name: str) -> str:
    return (hostile["tmp"] / "out-all" / "feedback" / f"{name}.md").read_text(encoding="utf-8")


def _module(hostile, name: str):
    return hostile["results"][name].modules["01_tensor"]


def test_a_correct_submission_scores_full_marks(hostile):
    good = _module(hostile, "good")
    assert good.score == good.max_score == 10 and not good.reason
    assert len(good.cases) == CASES_01 > 10 and all(c.passed for c in good.cases)


def test_a_catalogued_mistake_loses_points_and_the_feedback_names_the_cause(hostile):
    mistake = _module(hostile, "mistake")
    assert 0 < mistake.score < mistake.max_score and not mistake.reason
    assert hostile["mistake"].message in _feedback(hostile, "mistake")


@pytest.mark.parametrize("name", ["hang_at_import", "hang_in_solution"])
def test_an_infinite_loop_is_stopped_and_scores_0(hostile, name):
    module = _module(hostile, name)
    assert module.score == 0
    assert module.reason.startswith(("used more than its 6 s of CPU time", "ran past its 60 s wall-clock limit"))
    assert module.seconds < LIMITS.wall_s + 30


def test_a_50gb_allocation_fails_and_scores_0(hostile):
    module = _module(hostile, "allocates_50gb")
    assert module.score == 0 and module.reason.startswith("ran out of memory: case "), module.reason


def test_200_children_are_all_gone_after_grading_and_score_0(hostile):
    module = _module(hostile, "starts_200_children")
    assert module.score == 0 and module.reason.startswith("left "), module.reason
    survivors = []
    for entry in Path("/proc").iterdir():
        try:
            if MARK.encode() in (entry / "cmdline").read_bytes():
                survivors.append(entry.name)
        except OSError:
            continue
    assert survivors == []


def test_100mb_of_printing_is_stopped_and_scores_0(hostile):
    module = _module(hostile, "prints_100mb")
    assert module.score == 0 and module.reason.startswith("printed more than its 1 MiB output limit"), module.reason


def test_os_exit_in_a_solution_scores_nothing(hostile):
    module = _module(hostile, "os_exit")
    assert module.score == 0 and module.reason == (
        "it wrote no values (the run ended before the cases finished): nothing is scored"), module.reason


@pytest.mark.parametrize("name", ["rewrites_pytest_report", "patches_testreport", "registers_a_plugin",
                                  "forges_values_and_exits", "forges_values_at_import", "reads_the_reference",
                                  "reads_the_recorded_values"])
def test_an_attack_on_the_score_scores_no_more_than_the_gutted_code_it_is_added_to(hostile, name):
    """The score is computed outside the sandbox from the values the code produced, against values it cannot
    read: forging what pytest reports (it no longer runs), forging the values file, or reading the reference
    (the graded module's solution in the scratch base, the recorded values) earns nothing."""
    module, gutted_module = _module(hostile, name), _module(hostile, "gutted")
    assert module.score <= gutted_module.score < module.max_score, (module.score, module.reason)
    why = module.reason or " ".join(c.message for c in module.cases if not c.passed)
    assert why, "no reason in the feedback"
    assert (module.reason or "wrong values" in why or "raised" in why or "missing" in why), why
    section = _feedback(hostile, name).split("## 01_tensor:", 1)[1]
    assert (module.reason or "cases failed") in section


def test_deleting_and_writing_outside_the_work_folder(hostile):
    module = _module(hostile, "vandal")
    if not can_switch_user():  # the grader's own user: it could, and it is caught afterwards
        assert module.score == 0, module.reason
        assert re.fullmatch(r"changed \d+ file\(s\) of the course outside its work folder", module.reason)
        assert "grading/01_tensor/cases.py" in hostile["changed"]  # reported to the instructor
        return  # not root: student code ran as the grader's user and wrote grading/; reported and scored 0 (above)
    assert hostile["hidden_after"] == hostile["hidden_before"] and hostile["changed"] == []
    good = _module(hostile, "good")
    assert module.score == good.score and not module.reason  # it could do neither, and earned what it earned


def test_shipped_tests_conftest_and_package_are_ignored(hostile):
    module = _module(hostile, "ships_its_own_tests")
    assert module.score == _module(hostile, "mistake").score and not module.reason
    feedback = _feedback(hostile, "ships_its_own_tests")
    for ignored in ("work/conftest.py", "work/tests/01_tensor/test_tensor.py", "work/tinytorch/core/tensor.py"):
        assert f"`{ignored}`" in feedback


def test_the_others_grade_exactly_as_alone_and_every_run_gives_the_same_files(hostile):
    tmp = hostile["tmp"]

    def rows(out: str, names=("good", "mistake")) -> list[list[str]]:
        with open(tmp / out / "grades_long.csv", newline="", encoding="utf-8") as handle:
            return [row for row in csv.reader(handle) if row[0] in names]

    assert rows("out-all") == rows("out-alone") and len(rows("out-alone")) == 2 * CASES_01
    for name in ("grades.csv", "grades_long.csv", "feedback/good.md", "feedback/mistake.md"):
        assert (tmp / "out-alone" / name).read_bytes() == (tmp / "out-again" / name).read_bytes()
    for name in ("good", "mistake"):  # the results too, but for the one field that says how long it took
        results = [json.loads((tmp / out / "results" / f"{name}.json").read_text(encoding="utf-8"))
                   for out in ("out-alone", "out-again")]
        assert [{k: v for k, v in r.items() if k != "execution_time"} for r in results] == [
            {k: v for k, v in results[1].items() if k != "execution_time"}] * 2
    lines = (tmp / "out-all" / "grades.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "student,01_tensor,total" and lines[1] == "(max points),10,10"


@pytest.mark.skipif(not can_switch_user(), reason="without a user of its own, student code runs as the grader and "
                                                  "can read what the grader can (README: what is not guaranteed)")
def test_the_reference_attack_is_real_it_scores_full_marks_where_the_base_is_readable(grading_course, tmp_path):
    """The proof that `reads_the_reference` can fail: with the scratch base made readable again (as it was)
    and the run's mount namespace no longer hiding it, the same gutted code with the attack earns full
    marks; the run in `hostile` keeps it at the gutted score."""
    module = grading_course.module("01")
    notebooks = attacks(module.notebook.read_text(encoding="utf-8"), grading_course.root / "grading")
    options = GradeOptions((module,), jobs=1, limits=LIMITS)
    with GradingRun(grading_course.settings, options) as run:
        run.base.chmod(0o755)
        run._seen = lambda course: {}  # the sandbox as it was: no folder hidden in the run's namespace
        [student] = grade_submissions(grading_course.settings,
                                      collect_submissions(_one(tmp_path, notebooks["reads_the_reference"]), [module]),
                                      options, run=run)
    result = student.modules["01_tensor"]
    assert result.score == result.max_score == 10, result.reason


def test_the_graded_module_never_meets_its_reference(grading_course, tmp_path):
    """A job's scratch course holds the student's notebook and package file for the graded module, no
    reference solution (notebook, package file, compiled cache, mistakes catalogue) of it anywhere."""
    course = grading_course
    module = course.module("01")
    reference = module.notebook.read_text(encoding="utf-8")
    lines = reference.splitlines()
    bodies = ["\n".join(l.strip() for l in lines[b.begin_line: b.end_line - 1])
              for b in find_solution_blocks(reference, module.notebook)]
    stubbed = stub_text(reference, module.notebook, "modules/01_tensor/tensor_dev.py", module.key)
    student = with_code(stubbed, "Tensor.matmul", "import os\nprint(os.getcwd())")  # its own code, stubs elsewhere
    options = GradeOptions((module,), jobs=1, limits=LIMITS)
    with GradingRun(course.settings, options) as run:
        [submission] = collect_submissions(_one(tmp_path, student), [module])
        copy = tmp_path / "job"
        shutil.copytree(run.base, copy)
        assert run._put_notebook(copy, module, submission.notebooks["01_tensor"]) == ""
    found = []
    for path in copy.rglob("*"):
        if not path.is_file():
            continue
        if path.name == "mistakes.toml" or ("tensor" in path.name and path.suffix == ".pyc"
                                            and "tinytorch" in path.parts):
            found.append(path)
            continue
        flat = "\n".join(l.strip() for l in path.read_text(encoding="utf-8", errors="replace").splitlines())
        if any(body and body in flat for body in bodies if len(body) > 40 and body.count("\n") >= 2):
            found.append(path)
    assert found == []
    assert "print(os.getcwd())" in (copy / "tinytorch" / "core" / "tensor.py").read_text(encoding="utf-8")


def _one(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "one" / "student" / "modules" / "01_tensor"
    folder.mkdir(parents=True)
    (folder / "tensor_dev.py").write_text(text, encoding="utf-8")
    return tmp_path / "one"
