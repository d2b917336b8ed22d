"""tito release: the student edition has stubs, imports, fails the tests; bad markers write nothing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tito.course import CourseError
from tito.notebook import BEGIN_MARKER, END_MARKER, NotebookError
from tito.release import MANIFEST_FILE, MANIFEST_FORMAT, check_stubs, edition_files, write_student_edition


def _python(root, *args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, *args], cwd=cwd or root, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)


@pytest.fixture(scope="module")
def edition_course(shared_course):
    """One course copy and its student edition, shared by the tests that only read them."""
    course = shared_course
    dest = course.root.parent / "student"
    result = course.tito("release", "student", str(dest), cwd=course.root / "tito")
    assert result.returncode == 0, result.stdout + result.stderr
    return course, dest


@pytest.fixture
def edition(edition_course):
    return edition_course[1]


def test_the_edition_has_stubs_and_no_solution(edition_course):
    course, edition = edition_course
    reference = course.module("01").notebook.read_text(encoding="utf-8")
    student = (edition / "modules" / "01_tensor" / "tensor_dev.py").read_text(encoding="utf-8")
    assert "raise NotImplementedError('Tensor.matmul is not implemented yet" in student
    solution_line = "    return record_op(\"matmul\""  # a line of the reference matmul body
    assert solution_line in reference and solution_line not in student
    assert student.count(BEGIN_MARKER) == reference.count(BEGIN_MARKER)
    for path in (edition / "tinytorch").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert BEGIN_MARKER not in text and END_MARKER not in text, path
    assert "tito export 01" in (edition / "README.md").read_text(encoding="utf-8")
    assert (edition / "tests" / "01_tensor").is_dir() and (edition / "tito" / "cli.py").is_file()


def test_stub_messages_name_the_function_and_the_file_but_no_line(edition):
    """A line number from the reference edition is wrong in the student's file (and moves as they write)."""
    student = (edition / "modules" / "01_tensor" / "tensor_dev.py").read_text(encoding="utf-8")
    stubs = [line.strip() for line in student.splitlines() if "raise NotImplementedError(" in line]
    assert len(stubs) > 5
    for stub in stubs:
        assert "between the solution markers in modules/01_tensor/tensor_dev.py" in stub, stub
        assert "(line " not in stub and "tito export 01_tensor" in stub


def test_a_fresh_edition_tests_as_one_line_per_module(edition):
    done = _python(edition, "-m", "tito", "test", "--all")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 1
    assert lines[0].startswith("  01_tensor: not started: ") and lines[0].endswith(" stubs left"), done.stdout
    assert lines[-1] == "Summary: 0 passed, 0 failed, 1 not started"
    assert len(lines) <= 5 and "Traceback" not in done.stdout + done.stderr


def test_the_stubbed_package_imports(edition):
    done = _python(edition, "-c", "import tinytorch, tinytorch.core.tensor as t; print(t.__file__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(edition))
    call = _python(edition, "-c", "from tinytorch.core.tensor import Tensor; Tensor([1.0])")
    assert call.returncode == 1
    assert "NotImplementedError: to_array is not implemented yet" in call.stderr


@pytest.mark.slow
def test_the_edition_fails_module_01_tests_and_the_reference_passes(edition_course):
    course, edition = edition_course
    student = _python(edition, "-m", "pytest", "tests/01_tensor", "-q", "-x")
    assert student.returncode == 1 and " failed" in student.stdout, student.stdout[-2000:]
    reference = _python(course.root, "-m", "pytest", "tests/01_tensor", "-q")
    assert reference.returncode == 0, reference.stdout[-2000:]


def test_release_refuses_unbalanced_markers_and_writes_nothing(course, tmp_path):
    course.add_module("02_toy", course.TOY.replace("    ### END SOLUTION\n", ""))
    dest = tmp_path / "student"
    with pytest.raises(NotebookError, match=r"toy_dev.py:\d+: `### BEGIN SOLUTION` is never closed"):
        write_student_edition(course.settings, dest)
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["course"]  # no staging folder left behind


def test_release_refuses_a_solution_block_outside_a_function(course, tmp_path):
    course.add_module("02_toy", course.TOY + f"\n# %%\n{BEGIN_MARKER}\nx = 1\n{END_MARKER}\n")
    with pytest.raises(NotebookError, match="outside a function body"):
        write_student_edition(course.settings, tmp_path / "student")
    assert not (tmp_path / "student").exists()


def test_release_refuses_a_non_empty_folder_and_the_source_tree(course, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(CourseError, match="not empty"):
        write_student_edition(course.settings, busy)
    with pytest.raises(CourseError, match="does not look like a student edition"):
        write_student_edition(course.settings, busy, force=True)
    assert (busy / "notes.txt").read_text(encoding="utf-8") == "mine"
    (busy / "settings.ini").write_text("[DEFAULT]\n", encoding="utf-8")  # what round 1 took for an edition
    (busy / "modules").mkdir()
    with pytest.raises(CourseError, match="does not look like a student edition"):
        write_student_edition(course.settings, busy, force=True)
    assert (busy / "notes.txt").read_text(encoding="utf-8") == "mine"
    with pytest.raises(CourseError, match="inside the course's own files"):
        write_student_edition(course.settings, course.settings.lib_path / "student")


@pytest.mark.slow
def test_release_check_passes_for_module_01(course):
    [check] = check_stubs(course.settings, [course.module("01")])
    assert check.ok, check.problem
    assert check.notebook == "fails" and "failed" in check.pytest


def test_release_check_reports_tests_that_pass_on_the_stub(course):
    """A module whose inline test does not call the student's function is caught."""
    course.add_module("02_toy", course.TOY.replace("assert double(3) == 6", "assert 3 == 3"))
    [check] = check_stubs(course.settings, [course.module("02")])
    assert not check.ok and "notebook script passes with the stub" in check.problem


def test_release_check_reports_a_collection_error_as_a_defect(course):
    """Tests that crash at import on the stub are errors, not failures: the check must say so."""
    course.add_module("02_toy", course.TOY)
    tests = course.root / "tests" / "02_toy"
    tests.mkdir()
    (tests / "test_toy.py").write_text(
        "from tinytorch.core.toy import double\n\nVALUE = double(3)  # at import time: wrong on purpose\n\n\n"
        "def test_double():\n    assert VALUE == 6\n", encoding="utf-8")
    [check] = check_stubs(course.settings, [course.module("02")])
    assert not check.ok and "collection or setup error" in check.problem


def _tree(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_force_replaces_only_what_the_release_wrote(course, tmp_path):
    """Issue 20: --force replaces an edition exactly as the release wrote it (its manifest lists every
    file with its SHA-256), and nothing else: not a student's file, not a changed notebook, not a
    git repository; the refusal names what it found and changes nothing."""
    dest = tmp_path / "student"
    write_student_edition(course.settings, dest)
    manifest = json.loads((dest / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert manifest["format"] == MANIFEST_FORMAT and "modules/01_tensor/tensor_dev.py" in manifest["files"]
    assert set(manifest["files"]) == set(edition_files(dest))
    (dest / "tinytorch" / "__pycache__").mkdir(exist_ok=True)
    (dest / "tinytorch" / "__pycache__" / "x.pyc").write_bytes(b"cache")  # Python's cache: replaceable
    write_student_edition(course.settings, dest, force=True)
    assert not (dest / "tinytorch" / "__pycache__" / "x.pyc").exists()

    notebook = dest / "modules" / "01_tensor" / "tensor_dev.py"
    cases = {
        "a student's file": (lambda: (dest / "notes.txt").write_text("mine", encoding="utf-8"),
                             "notes.txt (not written by the release)"),
        "a folder of theirs": (lambda: (dest / ".venv" / "bin").mkdir(parents=True) or
                               (dest / ".venv" / "bin" / "python").write_text("x", encoding="utf-8"),
                               ".venv/ (not written by the release)"),
        "their results": (lambda: (dest / ".tito" / "results.json").write_text("{}", encoding="utf-8"),
                          ".tito/results.json (not written by the release)"),
        "work in a notebook": (lambda: notebook.write_text(notebook.read_text(encoding="utf-8") + "# mine\n",
                                                           encoding="utf-8"),
                               "modules/01_tensor/tensor_dev.py (changed since the release wrote it)"),
        "a git repository": (lambda: (dest / ".git").mkdir(), "is a git repository"),
    }
    for name, (make, said) in cases.items():
        snapshot = _tree(dest)
        make()
        changed = _tree(dest)
        with pytest.raises(CourseError) as refused:
            write_student_edition(course.settings, dest, force=True)
        assert said in str(refused.value), (name, str(refused.value))
        assert _tree(dest) == changed, f"{name}: the refused release changed the folder"
        assert not list(tmp_path.glob(".student.*")), "no staging or set-aside folder is left behind"
        shutil.rmtree(dest)  # back to the edition as written, for the next case
        dest.mkdir()
        for relative, data in snapshot.items():
            (dest / relative).parent.mkdir(parents=True, exist_ok=True)
            (dest / relative).write_bytes(data)
    write_student_edition(course.settings, dest, force=True)  # the untouched edition is still replaceable


def test_a_damaged_manifest_replaces_nothing(course, tmp_path):
    dest = tmp_path / "student"
    write_student_edition(course.settings, dest)
    (dest / MANIFEST_FILE).write_text("{not json", encoding="utf-8")
    before = _tree(dest)
    with pytest.raises(CourseError, match="cannot tell its files from yours"):
        write_student_edition(course.settings, dest, force=True)
    assert _tree(dest) == before


def test_a_student_edition_in_a_read_only_folder_is_refused_before_any_work(course, tmp_path, unprivileged):
    """It used to stub and copy the course first, then fail with a raw PermissionError making its staging folder."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = course.tito_process("release", "student", str(locked / "student"), prefix=unprivileged)
    finally:
        locked.chmod(0o755)
    said = course.flat(result.stdout + result.stderr)
    assert result.returncode == 1 and "Traceback" not in said, said
    assert f"{locked / 'student'}: {locked} does not accept new files (Permission denied)" in said
    assert list(locked.iterdir()) == []
