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
from tito.grade import ModuleResult, StudentResult, GradedTest, _parse_report, _run_problem
from tito.grade_config import GradingConfig, load_config, points_per_test
from tito.grade_report import fmt, feedback_markdown, gradescope_results, grades_csv, grades_long_csv
from tito.release import EDITION_ITEMS, write_student_edition
from tito.sandbox import Limits, SandboxResult
from tito.submissions import collect_submissions, read_submission, student_name

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


def test_without_grading_toml_every_test_is_one_point():
    points = points_per_test(GradingConfig(None), "01_tensor", ["tests/a.py::t1", "tests/a.py::t2"])
    assert points == {"tests/a.py::t1": 1, "tests/a.py::t2": 1}


def test_keys_give_points_to_the_tests_they_name_shared_equally_the_weight_scales():
    tests = ["tests/01/test_a.py::t[1]", "tests/01/test_a.py::t[2]", "tests/01/test_a.py::u",
             "tests/01/test_b.py::v", "grading/01/test_h.py::w[x]", "grading/01/test_h.py::w[y]"]
    config = GradingConfig(None, {}, {"01": {"tests/01": F(6), "tests/01/test_a.py::t": F(4),
                                             "grading/01/test_h.py::w[y]": F(3)}})
    points = points_per_test(config, "01", tests)
    assert points == {tests[0]: 2, tests[1]: 2, tests[2]: 3, tests[3]: 3, tests[4]: 1, tests[5]: 3}
    weighted = points_per_test(GradingConfig(None, {"01": F(7)}, config.points), "01", tests)
    assert sum(weighted.values()) == 7 and weighted[tests[5]] == F(3 * 7, 14)


def test_a_key_that_names_no_test_is_an_error_unless_its_tests_skip_here():
    config = GradingConfig(Path("grading.toml"), {}, {"01": {"tests/01/test_gpu.py": F(5)}})
    with pytest.raises(CourseError, match="'tests/01/test_gpu.py' names no test of 01"):
        points_per_test(config, "01", ["tests/01/test_a.py::t"])
    points = points_per_test(config, "01", ["tests/01/test_a.py::t"], ["tests/01/test_a.py::t", "tests/01/test_gpu.py::g"])
    assert points == {"tests/01/test_a.py::t": 1}


def test_grading_toml_is_checked(course):
    path = course.root / "grading" / "grading.toml"
    path.parent.mkdir()
    path.write_text('[modules.01]\nweight = 5\npoints = { "tests/01_tensor" = 2 }\n[limits]\ntime_s = 30\n'
                    'memory_mb = 512\n', encoding="utf-8")
    config = load_config(course.settings)
    assert config.weights == {"01_tensor": 5} and config.points == {"01_tensor": {"tests/01_tensor": 2}}
    assert config.limits.wall_s == 30 == config.limits.cpu_s and config.limits.memory_bytes == 512 * 2**20
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


def _report(**tests) -> dict:
    return {"exitstatus": 1, "tinytorch": None, "collection_errors": {}, "collected": {},
            "tests": {k: {"outcome": v[0], "message": v[1], "exception": v[2]} for k, v in tests.items()}}


def test_a_report_the_code_could_have_forged_is_read_defensively():
    assert _parse_report(None) is None and _parse_report(b"\xff") is None and _parse_report(b"[1]") is None
    assert _parse_report(b'{"tests": {"a": 1}, "collection_errors": {}, "collected": {}}') is None
    good = json.dumps(_report(a=("passed", "", ""))).encode()
    assert _parse_report(good)["tests"]["a"]["outcome"] == "passed"


def test_what_zeroes_a_whole_module(tmp_path):
    limits = Limits()
    ok = _report(a=("passed", "", ""))
    assert _run_problem(_sandbox(), ok, None, [], tmp_path, limits) == ""
    hung = _run_problem(_sandbox(reason="ran past its 5 s wall-clock limit"), None, "tests/x.py::t", [], tmp_path, limits)
    assert hung == "ran past its 5 s wall-clock limit while running tests/x.py::t"
    assert "while collecting the tests" in _run_problem(_sandbox(reason="used more than its 5 s of CPU time"),
                                                        None, None, [], tmp_path, limits)
    assert _run_problem(_sandbox(), None, None, [], tmp_path, limits).startswith(
        "pytest ended without writing its report (exit status 0)")
    assert _run_problem(_sandbox(), ok, None, ["tests/a.py"], tmp_path, limits).startswith(
        "changed files of the course outside its work folder: tests/a.py")
    memory = _report(a=("failed", "MemoryError: x", "_ArrayMemoryError"))
    assert _run_problem(_sandbox(), memory, None, [], tmp_path, limits).startswith("ran out of memory: a raised")
    elsewhere = {**ok, "tinytorch": "/somewhere/tinytorch/__init__.py"}
    assert "outside the scratch course" in _run_problem(_sandbox(), elsewhere, None, [], tmp_path, limits)


# ---------------------------------------------------------------------------- outputs


def _students() -> list[StudentResult]:
    tests = [GradedTest("tests/01_tensor/test_a.py::t", False, "passed", "", F(7, 3), F(7, 3)),
             GradedTest("tests/01_tensor/test_a.py::u", False, "failed", "AssertionError: keep the input's dtype",
                        F(0), F(14, 3)),
             GradedTest("grading/01_tensor/test_h.py::w", True, "failed", "AssertionError: hidden", F(0), F(3))]
    alice = StudentResult("alice", "alice.zip", {
        "01_tensor": ModuleResult("01_tensor", F(10), F(7, 3), tests=tests, notebook="m/tensor_dev.py"),
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
    long = grades_long_csv(_students()[:1], {"02_activations": {"tests/02/test_b.py::x": F(10)}}).splitlines()
    assert long[1] == "alice,01_tensor,tests/01_tensor/test_a.py::t,visible,passed,2.33,2.33,"
    assert long[3] == "alice,01_tensor,grading/01_tensor/test_h.py::w,hidden,failed,0,3,"
    assert long[4] == "alice,02_activations,tests/02/test_b.py::x,visible,not run,0,10,6 stubs left"


def test_feedback_names_each_failure_its_message_and_the_reasons():
    text = feedback_markdown(_students()[0])
    assert "**Total: 2.33 / 20**" in text and "| 02_activations | 0 / 10 | 6 stubs left |" in text
    assert "`tests/01_tensor/test_a.py::u` (failed, 4.67 point(s))" in text
    assert "AssertionError: keep the input's dtype" in text and "- hidden test `grading/01_tensor" in text
    assert "**Scored 0:** 6 stubs left" in text and "`conftest.py`" in text


def test_gradescope_results_have_the_fields_gradescope_reads():
    results = gradescope_results(_students()[0], "after_due_date")
    assert results["score"] == pytest.approx(7 / 3)
    assert sum(t["score"] for t in results["tests"]) == pytest.approx(results["score"])
    for test in results["tests"]:
        assert set(test) == {"name", "score", "max_score", "output", "visibility"}
        assert isinstance(test["score"], float) and isinstance(test["max_score"], float)
        assert test["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    hidden = [t for t in results["tests"] if "hidden" in t["name"]]
    assert [t["visibility"] for t in hidden] == ["after_due_date"] and "AssertionError: hidden" in hidden[0]["output"]
    json.dumps(results)


# ---------------------------------------------------------------------------- the student edition


def test_the_student_edition_never_carries_grading(course, tmp_path):
    assert "grading" not in EDITION_ITEMS and "grading.toml" not in EDITION_ITEMS
    hidden = course.root / "grading" / "01_tensor"
    hidden.mkdir(parents=True)
    (hidden / "test_hidden.py").write_text("def test_x():\n    pass\n", encoding="utf-8")
    (course.root / "grading" / "grading.toml").write_text("", encoding="utf-8")
    (course.root / "grading.toml").write_text("", encoding="utf-8")
    edition = write_student_edition(course.settings, tmp_path / "student").dest
    found = [p.relative_to(edition).as_posix() for p in edition.rglob("*") if "grading" in p.name]
    assert found == [] and not any("test_hidden" in p.name for p in edition.rglob("*"))
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
from tito.submissions import read_submission
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


def test_too_many_members_are_refused_before_reading(course, modules, subs, monkeypatch):
    import tito.submissions as submissions

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
def test_the_summary_of_20_modules_is_readable_in_100_columns(where, monkeypatch):
    """20 modules, COLUMNS=100: every module's full name and every score whole, no line wider than 100
    (the modules that do not fit go to a second table), in a terminal and in a file."""
    import io

    from rich.console import Console

    from tito.cli import grades_tables
    from tito.course import list_modules, load_settings

    keys = [m.key for m in list_modules(load_settings(Path(__file__).resolve().parents[2]))]
    assert len(keys) == 20
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
