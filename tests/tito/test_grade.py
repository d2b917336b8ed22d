"""tito grade, the fast parts: reading submissions, points from grading.toml, scoring a report, the outputs.

The slow end-to-end runs (a whole grading run in the sandbox, hostile submissions, the
Gradescope bundle) are in test_grade_runs.py and test_grade_course.py.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from fractions import Fraction
from pathlib import Path

import jupytext
import pytest

from tito.course import CourseError
from tito.grading.compare import CaseResult
from tito.grading.config import GradingConfig, load_config, points_per_case
from tito.grading.grade import GradeOptions, GradingRun, ModuleResult, StudentResult, _run_problem
from tito.grading.report import fmt, feedback_markdown, gradescope_results, grades_csv, grades_long_csv
from tito.grading.sandbox import Limits, SandboxResult
from tito.grading.submissions import collect_submissions, read_submission, student_name
from tito.release import EDITION_ITEMS, write_student_edition

F = Fraction


# ---------------------------------------------------------------------------- submissions


@pytest.fixture
def modules(course):
    return [course.module("01")]


@pytest.fixture
def subs(tmp_path):
    folder = tmp_path / "submissions"
    folder.mkdir()
    return folder


def _notebook(course) -> str:
    return course.module("01").notebook.read_text(encoding="utf-8")


def test_names_come_from_the_entries(tmp_path):
    assert student_name(Path("alice.zip")) == "alice"
    assert student_name(Path("bob.tar.gz")) == "bob"
    assert student_name(Path("Carol Smith (2)")) == "Carol_Smith_2"
    assert student_name(Path("../..")) == "unnamed"


def test_a_folder_gives_its_lesson_notebooks_wherever_they_sit_and_lists_the_rest(course, modules, subs):
    entry = subs / "alice"
    lesson = entry / "work" / "tinytorch" / "modules" / "01_tensor" / "tensor_dev.py"
    lesson.parent.mkdir(parents=True)
    lesson.write_text(_notebook(course), encoding="utf-8")
    for other in ("conftest.py", "tests/01_tensor/test_tensor.py", "tinytorch/core/tensor.py",
                  ".tito/backups/01_tensor/tensor_dev.py"):
        (entry / other).parent.mkdir(parents=True, exist_ok=True)
        (entry / other).write_text("x = 1\n", encoding="utf-8")
    submission = read_submission(entry, modules)
    assert list(submission.notebooks) == ["01_tensor"]
    assert submission.notebooks["01_tensor"].path == "work/tinytorch/modules/01_tensor/tensor_dev.py"
    assert submission.notebooks["01_tensor"].text == _notebook(course)
    assert submission.ignored == [".tito/backups/01_tensor/tensor_dev.py", "conftest.py",
                                  "tests/01_tensor/test_tensor.py", "tinytorch/core/tensor.py"]


def test_zip_and_tar_gz_are_read_in_memory_and_links_are_not_followed(course, modules, subs):
    text = _notebook(course).encode()
    with zipfile.ZipFile(subs / "alice.zip", "w") as archive:
        archive.writestr("alice/modules/01_tensor/tensor_dev.py", text)
        archive.writestr("../../escape.py", "x = 1\n")
    with tarfile.open(subs / "bob.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("modules/01_tensor/tensor_dev.py")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        archive.addfile(info)
        info = tarfile.TarInfo("copy/01_tensor/tensor_dev.py")
        info.size = len(text)
        archive.addfile(info, io.BytesIO(text))
    alice, bob = collect_submissions(subs, modules)
    assert alice.name == "alice" and alice.notebooks["01_tensor"].text == text.decode()
    assert alice.ignored == ["../../escape.py (refused: `..` in its name)"]  # named, never read nor written
    assert bob.notebooks["01_tensor"].path == "copy/01_tensor/tensor_dev.py"  # the link was refused
    assert bob.ignored == ["modules/01_tensor/tensor_dev.py (refused: a link)"]
    assert not (subs.parent / "escape.py").exists() and not (subs / "escape.py").exists()


def test_an_ipynb_is_read_with_jupytext(course, modules, subs):
    entry = subs / "dana"
    entry.mkdir()
    notebook = jupytext.reads(_notebook(course), fmt="py:percent")
    (entry / "tensor_dev.ipynb").write_text(jupytext.writes(notebook, fmt="ipynb"), encoding="utf-8")
    [dana] = collect_submissions(subs, modules)
    got = dana.notebooks["01_tensor"]
    assert got.note == "read from an .ipynb with jupytext" and "### BEGIN SOLUTION" in got.text
    assert "def matmul(self: Tensor, other: Any) -> Tensor:" in got.text


def test_a_py_in_its_module_folder_wins_over_other_copies(course, modules, subs):
    entry = subs / "erin"
    for where in ("old/tensor_dev.py", "modules/01_tensor/tensor_dev.py", "modules/01_tensor/tensor_dev.ipynb"):
        (entry / where).parent.mkdir(parents=True, exist_ok=True)
        (entry / where).write_text(_notebook(course) if where.endswith(".py") else "{}", encoding="utf-8")
    [erin] = collect_submissions(subs, modules)
    assert erin.notebooks["01_tensor"].path == "modules/01_tensor/tensor_dev.py"
    assert "other copies ignored" in erin.notebooks["01_tensor"].note
    assert "old/tensor_dev.py" in erin.ignored


def test_bad_entries_are_reported_not_fatal(course, modules, subs):
    (subs / "broken.zip").write_bytes(b"not a zip")
    (subs / "notes.txt").write_text("not a submission")
    latin = subs / "frank" / "tensor_dev.py"
    latin.parent.mkdir()
    latin.write_bytes("# caf\xe9\n".encode("latin-1"))
    broken, frank = collect_submissions(subs, modules)
    assert broken.error.startswith("broken.zip could not be read")
    assert "is not UTF-8" in frank.problems["01_tensor"]


def test_two_entries_for_one_student_are_refused(modules, subs):
    (subs / "alice").mkdir()
    with zipfile.ZipFile(subs / "alice.zip", "w") as archive:
        archive.writestr("x.py", "")
    with pytest.raises(CourseError, match="Two submissions for 'alice'"):
        collect_submissions(subs, modules)
    with pytest.raises(CourseError, match="holds no submission"):
        collect_submissions(subs / "alice", modules)


# ---------------------------------------------------------------------------- points


def test_without_grading_toml_every_case_is_one_point():
    assert points_per_case(GradingConfig(None), "01_tensor", ["views", "float16"]) == {"views": 1, "float16": 1}


def test_points_name_cases_and_the_weight_scales_them():
    config = GradingConfig(None, {}, {"01": {"float16": F(3)}})
    assert points_per_case(config, "01", ["views", "float16", "masks"]) == {"views": 1, "float16": 3, "masks": 1}
    weighted = points_per_case(GradingConfig(None, {"01": F(10)}, config.points), "01", ["views", "float16", "masks"])
    assert weighted == {"views": 2, "float16": 6, "masks": 2}


def test_a_key_that_names_no_case_is_an_error_that_lists_the_cases():
    config = GradingConfig(Path("grading.toml"), {}, {"01": {"tests/01_tensor": F(5)}})
    with pytest.raises(CourseError, match="'tests/01_tensor' is not a graded case of 01 \\(its cases: views, masks\\)"):
        points_per_case(config, "01", ["views", "masks"])


def test_grading_toml_is_checked(course):
    path = course.root / "grading" / "grading.toml"
    path.parent.mkdir()
    path.write_text('[modules.01]\nweight = 5\npoints = { "views" = 2 }\n[limits]\ntime_s = 30\n'
                    'memory_mb = 512\ntmp_mb = 8\n', encoding="utf-8")
    config = load_config(course.settings)
    assert config.weights == {"01_tensor": 5} and config.points == {"01_tensor": {"views": 2}}
    assert config.limits.wall_s == 30 == config.limits.cpu_s and config.limits.memory_bytes == 512 * 2**20
    assert config.limits.tmp_bytes == 8 * 2**20  # each private temporary folder of a run
    for bad, message in (("[modules.99]\n", "Unknown module '99'"), ("[limits]\ntime_s = -1\n", "positive number"),
                         ('hidden_visibility = "later"\n', "use one of visible"), ("[modules.01]\nweight = 'x'\n",
                                                                                     "must be a number")):
        path.write_text(bad, encoding="utf-8")
        with pytest.raises(CourseError, match=message):
            load_config(course.settings)
    (course.root / "grading.toml").write_text("", encoding="utf-8")
    with pytest.raises(CourseError, match="keep one"):
        load_config(course.settings)


# ---------------------------------------------------------------------------- scoring one run


def _sandbox(**changes) -> SandboxResult:
    values = dict(returncode=0, reason="", output="", seconds=1.0, cpu_seconds=1.0)
    return SandboxResult(**{**values, **changes})


def test_what_zeroes_a_whole_module():
    assert _run_problem(_sandbox(), []) == ""
    assert _run_problem(_sandbox(reason="ran past its 5 s wall-clock limit"), []) == "ran past its 5 s wall-clock limit"
    assert _run_problem(_sandbox(), ["tests/a.py"]) == "changed files of the course outside its work folder: tests/a.py"
    many = _run_problem(_sandbox(), ["a", "b", "c", "d", "e"])
    assert many == "changed files of the course outside its work folder: a, b, c and 2 more"


def test_with_other_modules_reference_in_reach_no_name_the_run_chose_reaches_the_student():
    left = _sandbox(reason="left 2 process(es) running when it ended (def attention(q, k, v); they were killed)")
    assert _run_problem(left, [], detail=False) == "left 2 process(es) running when it ended"
    wrote = _sandbox(reason="wrote outside its work folder: /tmp/return q @ k.T (removed)")
    assert _run_problem(wrote, [], detail=False) == "wrote outside its work folder"
    assert _run_problem(_sandbox(), ["tinytorch/secret name.py"], detail=False) == (
        "changed 1 file(s) of the course outside its work folder")
    assert _run_problem(left, [], detail=True) == left.reason


def test_a_module_without_graded_cases_is_refused_naming_it_and_the_others(grading_course):
    grading_course.add_module("02_toy", grading_course.TOY)
    options = GradeOptions((grading_course.module("01"), grading_course.module("02")), jobs=1)
    with pytest.raises(CourseError, match=r"No graded cases for 02_toy: .* Grade the others with --modules 01\."):
        with GradingRun(grading_course.settings, options):
            pass


def test_recorded_values_that_do_not_match_the_cases_are_refused(grading_course):
    cases = grading_course.root / "grading" / "01_tensor" / "cases.py"
    cases.write_text(cases.read_text(encoding="utf-8").replace('"views":', '"renamed-views":'), encoding="utf-8")
    options = GradeOptions((grading_course.module("01"),), jobs=1)
    with pytest.raises(CourseError, match="record them again with `python grading/record_expected.py 01`"):
        with GradingRun(grading_course.settings, options):
            pass


# ---------------------------------------------------------------------------- outputs


POINTS = {"01_tensor": {"views": F(7, 3), "float16": F(14, 3), "masks": F(3)},
          "02_activations": {"relu": F(10)}}


def _students() -> list[StudentResult]:
    cases = [CaseResult("views", "reshape values", True, "", F(7, 3), F(7, 3)),
             CaseResult("float16", "float16 stays float16", False, "out has the wrong dtype: keep the input's dtype",
                        F(0), F(14, 3)),
             CaseResult("masks", "masks", False, "raised ValueError", F(0), F(3))]
    alice = StudentResult("alice", "alice.zip", {
        "01_tensor": ModuleResult("01_tensor", F(10), F(7, 3), cases=cases, notebook="m/tensor_dev.py"),
        "02_activations": ModuleResult("02_activations", F(10), reason="6 stubs left"),
    }, ignored=["conftest.py"])
    bob = StudentResult("bob", "bob", {"01_tensor": ModuleResult("01_tensor", F(10), F(10)),
                                       "02_activations": ModuleResult("02_activations", F(10), F(10))}, [])
    return [alice, bob]


def test_points_are_printed_the_same_way_every_time():
    assert [fmt(F(10)), fmt(F(15, 2)), fmt(F(10, 3)), fmt(F(2, 3)), fmt(F(0))] == ["10", "7.5", "3.33", "0.67", "0"]


def test_the_grade_book_has_one_row_per_student_and_the_maxima_first():
    assert grades_csv(_students()) == ("student,01_tensor,02_activations,total\n(max points),10,10,20\n"
                                       "alice,2.33,0,2.33\nbob,10,10,20\n")
    long = grades_long_csv(_students()[:1], POINTS).splitlines()
    assert long[0] == "student,module,case,outcome,points,max_points,reason"
    assert long[1:] == ["alice,01_tensor,views,passed,2.33,2.33,", "alice,01_tensor,float16,failed,0,4.67,",
                        "alice,01_tensor,masks,failed,0,3,", "alice,02_activations,relu,not run,0,10,6 stubs left"]


def test_feedback_names_each_failed_case_what_differs_and_the_reasons():
    text = feedback_markdown(_students()[0])
    assert "**Total: 2.33 / 20**" in text and "| 02_activations | 0 / 10 | 6 stubs left |" in text
    assert "| 01_tensor | 2.33 / 10 | 2 of 3 cases failed |" in text
    assert ("- case `float16` (float16 stays float16; 4.67 point(s)): out has the wrong dtype: keep the input's "
            "dtype") in text and "- case `masks` (masks; 3 point(s)): raised ValueError" in text
    assert "`views`" not in text  # passed
    assert "**Scored 0:** 6 stubs left" in text and "`conftest.py`" in text


def test_gradescope_results_have_the_fields_gradescope_reads():
    results = gradescope_results(_students()[0], POINTS, "after_due_date")
    assert results["score"] == pytest.approx(7 / 3)
    assert sum(t["score"] for t in results["tests"]) == pytest.approx(results["score"])
    for test in results["tests"]:
        assert set(test) == {"name", "score", "max_score", "output", "visibility"}
        assert isinstance(test["score"], float) and isinstance(test["max_score"], float)
        assert test["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    cases = {t["name"]: t for t in results["tests"] if ": case " in t["name"]}
    assert list(cases) == ["01_tensor: case views", "01_tensor: case float16", "01_tensor: case masks",
                           "02_activations: case relu"]
    assert all(t["visibility"] == "after_due_date" for t in cases.values())
    assert cases["01_tensor: case masks"]["output"] == "masks: raised ValueError"
    assert cases["02_activations: case relu"]["output"] == "not run: 6 stubs left"
    json.dumps(results)


def _visible(results: dict) -> list:
    """What a student sees of a Gradescope result before the due date."""
    return [results["output"]] + [t for t in results["tests"] if t["visibility"] == "visible"]


def test_nothing_visible_before_the_due_date_depends_on_how_a_case_went():
    """Two submissions whose cases went differently (3 of 10 points, and full marks) look the same before the due
    date: the visible entries carry no points, the top-level output no number, the whole result is hidden."""
    alice = _students()[0]
    perfect = StudentResult("alice", "alice.zip", {
        "01_tensor": ModuleResult("01_tensor", F(10), F(10), notebook="m/tensor_dev.py",
                                  cases=[CaseResult(n, "x", True, "", p, p) for n, p in POINTS["01_tensor"].items()]),
        "02_activations": alice.modules["02_activations"]}, ignored=["conftest.py"])
    seen = [gradescope_results(s, POINTS, "after_due_date") for s in (alice, perfect)]
    assert seen[0]["score"] != seen[1]["score"]
    assert _visible(seen[0]) == _visible(seen[1])
    assert all(r["visibility"] == "after_due_date" for r in seen)
    assert all(t["max_score"] == 0 for r in seen for t in r["tests"] if t["visibility"] == "visible")
    assert "2.33" not in seen[0]["output"] and "/ 20" not in seen[0]["output"]
    shown = gradescope_results(alice, POINTS, "visible")  # an instructor who shows everything sees the total
    assert "visibility" not in shown and "Total: 2.33 / 20" in shown["output"]


# ---------------------------------------------------------------------------- the student edition


def test_the_student_edition_never_carries_grading(course, tmp_path):
    """Nothing of the instructor's grading/ (cases, recorded values, points) reaches the edition. tito's own
    package tito/grading/ does: it holds no case and no value, and module 20's lesson imports its judge."""
    assert "grading" not in EDITION_ITEMS and "grading.toml" not in EDITION_ITEMS
    hidden = course.root / "grading" / "01_tensor"
    hidden.mkdir(parents=True)
    secret = "# the instructor's graded cases\n"
    (hidden / "cases.py").write_text(secret + "CASES = {}\n", encoding="utf-8")
    (hidden / "expected.npz").write_bytes(b"")
    (course.root / "grading" / "grading.toml").write_text(secret, encoding="utf-8")
    (course.root / "grading.toml").write_text(secret, encoding="utf-8")
    edition = write_student_edition(course.settings, tmp_path / "student").dest
    files = [p for p in edition.rglob("*") if p.is_file()]
    found = [p.relative_to(edition).as_posix() for p in files
             if "grading" in p.name or p.suffix == ".npz" or "grading" in p.relative_to(edition).parts[:1]]
    assert found == [], f"the instructor's grading reached the student edition: {found}"
    assert not any(secret.encode() in p.read_bytes() for p in files), "a graded case's text reached the edition"
    assert (edition / "tito" / "grading" / "judge.py").is_file(), "the judge module 20 imports is tito's own"
    assert os.path.isdir(edition / "tests" / "01_tensor")


# ---------------------------------------------------------------------------- archives (issue 29)


def test_links_dotdot_and_absolute_names_are_refused_with_the_reason(course, modules, subs):
    """A lesson notebook that is a link, or whose name climbs out (`..`) or is absolute, is never read."""
    text = _notebook(course).encode()
    link = zipfile.ZipInfo("modules/01_tensor/tensor_dev.py")
    link.external_attr = (0o120777 << 16)  # a symbolic link, as `zip -y` stores one
    for student, name, content in (("carl", "../modules/01_tensor/tensor_dev.py", text),
                                   ("dora", "/abs/01_tensor/tensor_dev.py", text), ("ed", link, b"/etc/passwd")):
        with zipfile.ZipFile(subs / f"{student}.zip", "w") as archive:
            archive.writestr(name, content)
    carl, dora, ed = collect_submissions(subs, modules)
    assert carl.ignored == ["../modules/01_tensor/tensor_dev.py (refused: `..` in its name)"]
    assert [s.notebooks for s in (carl, dora, ed)] == [{}, {}, {}]
    assert [s.problems["01_tensor"] for s in (carl, dora, ed)] == [
        "its notebook was refused: ../modules/01_tensor/tensor_dev.py has `..` in its name",
        "its notebook was refused: /abs/01_tensor/tensor_dev.py is an absolute path",
        "its notebook was refused: modules/01_tensor/tensor_dev.py is a link"]


def _zip_of_copies(path: Path, names: list[str], data: bytes) -> None:
    """A zip whose members all hold `data`, compressed once (zipfile would compress each copy again:
    a minute for 2 GB); the layout is the zip format's own (local headers, central directory, end record)."""
    import struct
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = packer.compress(data) + packer.flush()
    crc = zlib.crc32(data)
    local, central = bytearray(), bytearray()
    for name in names:
        encoded = name.encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(packed), len(data),
                               len(encoded), 0, 0, 0, 0, 0, len(local)) + encoded
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(packed), len(data),
                             len(encoded), 0) + encoded + packed
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(names), len(names), len(central), len(local), 0)
    path.write_bytes(bytes(local + central + end))


MEASURE_PEAK = """
import resource, sys, time
from pathlib import Path
from tito.course import list_modules, load_settings
from tito.grading.submissions import read_submission
modules = list_modules(load_settings(Path(sys.argv[1])))
start = time.monotonic()
submission = read_submission(Path(sys.argv[2]), modules)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
print(time.monotonic() - start)
print(submission.error or sorted(submission.notebooks))
"""


def _peak(course, archive: Path) -> tuple[int, float, str]:
    """(peak resident bytes, seconds, error or notebooks) of a fresh grader process reading `archive`."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MEASURE_PEAK, str(course.root), str(archive)], capture_output=True,
                          text=True, timeout=120, env={**course.env(), "PYTHONPATH": str(course.root)})
    assert done.returncode == 0, done.stderr[-2000:]
    peak, seconds, what = done.stdout.splitlines()
    return int(peak), float(seconds), what


def test_a_zip_bomb_of_250_notebooks_is_refused_before_reading_with_bounded_memory(course, subs):
    """250 copies of an 8 MB notebook in a 2 MB zip (2 GB unpacked): refused from the index, quickly,
    the grader's peak memory that of Python itself (it held every copy before: 2.1 GB)."""
    notebook = b"# %%\n" + b"x" * (8 * 1024 * 1024 - 5)
    _zip_of_copies(subs / "bomb.zip", [f"copy{i}/modules/01_tensor/tensor_dev.py" for i in range(250)], notebook)
    with zipfile.ZipFile(subs / "bomb.zip") as archive:  # a well-formed zip: the first copy reads back whole
        assert archive.read("copy0/modules/01_tensor/tensor_dev.py") == notebook
    assert (subs / "bomb.zip").stat().st_size < 3 * 1024 * 1024
    peak, seconds, what = _peak(course, subs / "bomb.zip")
    assert what == ("bomb.zip could not be read: it unpacks to 2,097,152,000 bytes, more than the 1,073,741,824 a "
                    "submission may hold: submit the lesson notebooks only")
    assert peak < 200 * 1024 * 1024 and seconds < 10, (peak, seconds)


def test_of_many_copies_of_a_lesson_only_the_chosen_one_is_read(course, subs):
    """100 copies of a 4 MB notebook (400 MB unpacked, under the limit): one is read; peak memory stays low."""
    notebook = _notebook(course).encode() + b"# " + b"x" * (4 * 1024 * 1024) + b"\n"
    _zip_of_copies(subs / "copies.zip", [f"copy{i:03d}/modules/01_tensor/tensor_dev.py" for i in range(100)],
                   notebook)
    peak, seconds, what = _peak(course, subs / "copies.zip")
    assert what == "['01_tensor']"
    assert peak < 200 * 1024 * 1024, peak


def test_a_zip_declaring_too_many_members_is_refused_before_its_index_is_read(course, modules, subs, monkeypatch):
    """The count in the zip's end record is checked before zipfile reads the central directory (whose
    entries would all be held in memory)."""
    import tito.grading.submissions as submissions

    monkeypatch.setattr(submissions, "MAX_MEMBERS", 50)
    read = []
    monkeypatch.setattr(submissions.zipfile, "ZipFile", lambda *a, **k: read.append(a) or pytest.fail("index read"))
    _zip_of_copies(subs / "many.zip", [f"f{i}.txt" for i in range(60)], b"x")
    [many] = collect_submissions(subs, modules)
    assert many.error == ("many.zip could not be read: it holds more than 50 files (60 counted): "
                          "submit the lesson notebooks only") and read == []


def test_too_many_members_are_refused_before_reading(course, modules, subs, monkeypatch):
    import tito.grading.submissions as submissions

    monkeypatch.setattr(submissions, "MAX_MEMBERS", 50)
    with tarfile.open(subs / "many.tar.gz", "w:gz") as archive:
        for index in range(60):
            info = tarfile.TarInfo(f"f{index}.txt")
            archive.addfile(info, io.BytesIO(b""))
    [many] = collect_submissions(subs, modules)
    assert many.error == ("many.tar.gz could not be read: it holds more than 50 files (51 counted): "
                          "submit the lesson notebooks only")


# ---------------------------------------------------------------------------- the summary table (issue 29)


@pytest.mark.parametrize("where", ["terminal", "file"])
def test_the_summary_of_every_module_is_readable_in_100_columns(where, monkeypatch):
    """Every module of the course (20 or more), COLUMNS=100: every module's full name and every score
    whole, no line wider than 100 (the modules that do not fit go to a next table), in a terminal and
    in a file."""
    import io

    from rich.console import Console

    from tito.cli import grades_tables
    from tito.course import list_modules, load_settings

    keys = [m.key for m in list_modules(load_settings(Path(__file__).resolve().parents[2]))]
    assert len(keys) >= 20
    students = []
    for index, name in enumerate(["alice", "bob_with_a_long_name", "carol"]):
        modules = {k: ModuleResult(k, F(10), score=F(10 * ((n + index) % 3), 3)) for n, k in enumerate(keys)}
        students.append(StudentResult(name, f"{name}.zip", modules, []))
    monkeypatch.setenv("COLUMNS", "100")
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=where == "terminal", color_system=None)
    assert console.width == 100
    for table in grades_tables(students, keys, console.width):
        console.print(table)
    text = buffer.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100 and "…" not in text
    for key in keys:
        assert f" {key} " in text, key
    for student in students:
        row = " ".join(line for line in lines if line.startswith("│ " + student.name[:10]))
        cells = [c.strip() for c in row.replace("│", "|").split("|") if c.strip() and c.strip() != student.name]
        assert cells == [fmt(student.modules[k].score) for k in keys] + [fmt(student.total)], row
