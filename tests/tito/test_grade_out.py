"""`tito grade --out`: checked before any work, locked, and replaced only when the new grades are complete.

The earlier grades in `--out` are the instructor's only copy: a mistyped folder, a duplicate
student, a full disk, Ctrl-C, a kill or a second run at once must leave them exactly as they were.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from tito.course import CourseError
from tito.grading.out import INCOMING, LOCK_NAME, check_destination, locked_destination, write_complete

EARLIER = {"grades.csv": "student,total\nann,7\n", "grades_long.csv": "student,module\n",
           "feedback/ann.md": "# Grade: ann\n", "results/ann.json": '{"score": 7}\n'}


def _earlier_grades(out: Path, files: dict[str, str] = EARLIER) -> dict[str, bytes]:
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text, encoding="utf-8")
    return _snapshot(out)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` but tito grade's own lock (what the user sees and keeps)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_NAME}


def _new_grades(folder: Path) -> list[Path]:
    """What write_outputs writes for one student, bob (the writer write_complete is given)."""
    written = []
    for name, text in {"grades.csv": "student,total\nbob,9\n", "grades_long.csv": "student,module\nbob,01\n",
                       "feedback/bob.md": "# Grade: bob\n", "results/bob.json": '{"score": 9}\n'}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    return written


def test_a_mistyped_submissions_folder_or_a_duplicate_student_leaves_the_earlier_grades(course, tmp_path):
    out = tmp_path / "grades"
    before = _earlier_grades(out)
    result = course.tito("grade", str(tmp_path / "submisions"), "--out", str(out))
    assert result.returncode == 1 and "does not exist" in course.flat(result.stdout)
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    with zipfile.ZipFile(subs / "alice.zip", "w") as archive:
        archive.writestr("x.py", "")
    result = course.tito("grade", str(subs), "--out", str(out))
    assert result.returncode == 1 and "Two submissions for 'alice'" in course.flat(result.stdout)
    assert _snapshot(out) == before


def test_the_new_grades_replace_the_earlier_ones_only_when_complete(tmp_path):
    out = tmp_path / "grades"
    _earlier_grades(out)
    with locked_destination(out):
        written, kept = write_complete(out, _new_grades)
    assert kept is None
    assert sorted(p.relative_to(out).as_posix() for p in written) == sorted(_snapshot(out))
    assert _snapshot(out)["grades.csv"] == b"student,total\nbob,9\n"
    assert "feedback/ann.md" not in _snapshot(out)  # an earlier student's feedback does not linger beside the new class
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [LOCK_NAME]  # no scratch left


@pytest.mark.parametrize("failure", ["full disk", "Ctrl-C"])
def test_a_failure_while_writing_leaves_the_earlier_grades(tmp_path, failure):
    out = tmp_path / "grades"
    before = _earlier_grades(out)

    def half_then_fail(folder: Path) -> list[Path]:
        (folder / "feedback").mkdir()
        (folder / "feedback" / "bob.md").write_text("# half", encoding="utf-8")
        if failure == "full disk":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise KeyboardInterrupt

    with locked_destination(out):
        if failure == "full disk":
            with pytest.raises(CourseError, match="No space left on device.*the earlier grades there are as they were"):
                write_complete(out, half_then_fail)
        else:
            with pytest.raises(KeyboardInterrupt):
                write_complete(out, half_then_fail)
    assert _snapshot(out) == before
    assert not list(out.glob(".tito-grade-*-*"))


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tito.grading.out import locked_destination, write_complete

    def slow(folder):
        (folder / "feedback").mkdir()
        (folder / "feedback" / "bob.md").write_text("# half", encoding="utf-8")
        print("writing", flush=True)
        time.sleep(60)
        return []

    out = Path(sys.argv[1])
    with locked_destination(out):
        write_complete(out, slow)
""")


def _start(tmp_path: Path, out: Path, code: str) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(code, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert process.stdout.readline().strip() in ("writing", "locked")
    return process


def test_a_kill_while_writing_leaves_the_earlier_grades_and_the_next_run_tidies_up(tmp_path):
    out = tmp_path / "grades"
    before = _earlier_grades(out)
    writer = _start(tmp_path, out, _KILLED_WRITER)
    writer.kill()
    writer.wait()
    assert _snapshot(out).items() >= before.items() and list(out.glob(INCOMING + "*"))  # its scratch is left
    with locked_destination(out):
        assert not list(out.glob(INCOMING + "*"))
        write_complete(out, _new_grades)
    assert _snapshot(out)["feedback/bob.md"] == b"# Grade: bob\n" and len(_snapshot(out)) == 4


def test_a_second_tito_grade_into_the_same_folder_is_refused_before_any_work(course, tmp_path):
    out = tmp_path / "grades"
    before = _earlier_grades(out)
    holder = _start(tmp_path, out, textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from tito.grading.out import locked_destination
        with locked_destination(Path(sys.argv[1])):
            print("locked", flush=True)
            time.sleep(60)
    """))
    try:
        subs = tmp_path / "subs"
        (subs / "alice").mkdir(parents=True)
        started = time.monotonic()
        result = course.tito("grade", str(subs), "--out", str(out))
        assert result.returncode == 1 and time.monotonic() - started < 30
        assert f"Another `tito grade` is writing to {out} right now" in course.flat(result.stdout)
        assert _snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()


def test_earlier_grades_holding_a_file_of_the_users_are_kept_whole(tmp_path):
    out = tmp_path / "grades"
    _earlier_grades(out, {**EARLIER, "feedback/notes.txt": "my notes\n"})
    with locked_destination(out):
        _, kept = write_complete(out, _new_grades)
    assert kept is not None and kept.parent == out and kept.name.startswith("previous-")
    assert (kept / "feedback" / "notes.txt").read_text(encoding="utf-8") == "my notes\n"
    assert (kept / "grades.csv").read_text(encoding="utf-8") == EARLIER["grades.csv"]


def test_a_folder_that_cannot_take_the_grades_is_refused_before_anything_changes(tmp_path):
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("x", encoding="utf-8")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    for out, message in ((tmp_path / "file", "exists and is not a folder"),
                         (tmp_path / "file" / "grades", "is not a folder, so"),
                         (tmp_path / "other", "holds no grades.csv"),
                         (tmp_path / "link", "is a link to nothing")):
        with pytest.raises(CourseError, match=message):
            check_destination(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "link", "other"]
    with locked_destination(tmp_path / "new" / "grades"):
        assert (tmp_path / "new" / "grades").is_dir()
    assert not (tmp_path / "new").exists()  # created for a run that wrote nothing: removed again


def test_an_unwritable_out_is_refused_before_any_work(course, tmp_path, unprivileged):
    locked = tmp_path / "locked"
    locked.mkdir()
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    for out in (locked / "grades", locked):
        if out == locked:
            _earlier_grades(out)
        locked.chmod(0o555)
        try:
            result = course.tito_process("grade", str(subs), "--out", str(out), prefix=unprivileged)
        finally:
            locked.chmod(0o755)
        assert result.returncode == 1, result.stdout
        assert f"{locked} does not accept new files" in course.flat(result.stdout)
        assert "Preparing" not in result.stdout and "Grading" not in result.stdout


# ---------------------------------------------------------------------------- --gradescope FILE.zip


def test_the_gradescope_bundle_is_checked_before_work_and_written_atomically(course, tmp_path, monkeypatch):
    from tito.grading import gradescope

    module = course.module("01")
    (tmp_path / "folder.zip").mkdir()
    with pytest.raises(CourseError, match="--gradescope .*folder.zip exists and is not a file"):
        gradescope.build_bundle(course.settings, tmp_path / "folder.zip", [module])
    bundle = tmp_path / "autograder.zip"
    bundle.write_bytes(b"the earlier bundle")

    def full_disk(handle, staging, files):
        handle.write(b"PK half a zip")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(gradescope, "_write_zip", full_disk)
    with pytest.raises(CourseError, match="Could not write .*autograder.zip \\(No space left on device\\); an earlier "
                                          "bundle there is as it was"):
        gradescope.build_bundle(course.settings, bundle, [module])
    assert bundle.read_bytes() == b"the earlier bundle"
    assert not list(tmp_path.glob(".autograder.zip.*"))  # the half-written scratch file is gone too


def test_a_bundle_in_a_read_only_folder_is_refused_before_any_work(course, tmp_path, unprivileged):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = course.tito_process("grade", "--modules", "01", "--gradescope", str(locked / "autograder.zip"),
                                     prefix=unprivileged)
    finally:
        locked.chmod(0o755)
    assert result.returncode == 1
    assert f"{locked} does not accept new files (Permission denied)" in course.flat(result.stdout), result.stdout
    assert list(locked.iterdir()) == []


def test_ctrl_c_during_the_switch_waits_until_the_new_grades_are_all_in_place(tmp_path, monkeypatch):
    from tito.grading import out as grade_out

    out = tmp_path / "grades"
    _earlier_grades(out)
    real_replace = os.replace

    def interrupted_replace(source, target):  # Ctrl-C arrives between two renames of the switch
        real_replace(source, target)
        if Path(target).name == "feedback" and Path(target).parent == out:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(grade_out.os, "replace", interrupted_replace)
    with locked_destination(out):
        with pytest.raises(KeyboardInterrupt):
            write_complete(out, _new_grades)
    after = _snapshot(out)
    assert after["grades.csv"] == b"student,total\nbob,9\n" and "results/bob.json" in after and len(after) == 4


@pytest.mark.slow
def test_tito_grade_replaces_the_earlier_grades_with_the_new_class(grading_course, tmp_path):
    """End to end through the command line: the earlier class's files go, the new class's come, the lock stays."""
    course = grading_course  # module 01's graded cases: a module is graded by its cases
    out = tmp_path / "grades"
    _earlier_grades(out)
    student = tmp_path / "subs" / "bob" / "modules" / "01_tensor"
    student.mkdir(parents=True)
    student.joinpath("tensor_dev.py").write_bytes(course.module("01").notebook.read_bytes())
    result = course.tito("grade", str(tmp_path / "subs"), "--modules", "01", "--jobs", "1", "--out", str(out))
    assert result.returncode == 0, result.stdout
    assert sorted(_snapshot(out)) == ["feedback/bob.md", "grades.csv", "grades_long.csv", "results/bob.json"]
    lines = (out / "grades.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "student,01_tensor,total" and lines[2].startswith("bob,") and lines[1].split(",")[1:] == \
        lines[2].split(",")[1:]  # the reference notebook scores full marks
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [LOCK_NAME]
