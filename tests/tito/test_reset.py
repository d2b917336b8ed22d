"""tito module reset: back to the stub with a backup first; --restore brings the work back.

Issue 9, rows 3-6: the stub is exported before the notebook is replaced; backups say what
they hold; a deleted notebook comes back from its backup; another module's backup is refused.
"""
from __future__ import annotations

import pytest

from tito.export import export_modules, module_in_sync
from tito.notebook import BEGIN_MARKER, NotebookError
from tito.reset import find_backup, list_backups, reset_module, restore_backup


def _backup_files(course, key: str) -> list:
    """The backup files on disk, newest first (read without tito's own listing)."""
    folder = course.root / ".tito" / "backups" / key
    return sorted(folder.glob("*"), reverse=True) if folder.is_dir() else []


def _delete_first_stub(notebook):
    """What a student does first: delete the `raise NotImplementedError(...)` line (and write nothing yet)."""
    lines = notebook.read_text(encoding="utf-8").splitlines(keepends=True)
    stub = next(i for i, line in enumerate(lines) if "raise NotImplementedError(" in line)
    notebook.write_text("".join(lines[:stub] + lines[stub + 1:]), encoding="utf-8")


def test_reset_backs_up_stubs_and_reexports(course):
    module = course.module("01")
    original = module.notebook.read_bytes()
    package_before = course.package_bytes()

    result = course.tito("module", "reset", "tensor")
    assert result.returncode == 0, result.stdout + result.stderr

    [backup] = list_backups(course.settings, module)
    assert backup.path.read_bytes() == original and backup.solution_lines > 20
    assert str(backup.path.relative_to(course.root)).startswith(".tito/backups/01_tensor/")
    out = course.flat(result.stdout)
    assert f"Saved your notebook to ../../.tito/backups/01_tensor/{backup.path.name} ({backup.holds})" in out
    assert "tito module reset 01_tensor --restore 1" in out
    stubbed = module.notebook.read_text(encoding="utf-8")
    assert ("raise NotImplementedError('Tensor.matmul is not implemented yet: write its body between the "
            "solution markers in modules/01_tensor/tensor_dev.py, then run `tito export 01_tensor`.')") in stubbed
    assert "(line " not in stubbed  # a line number would be wrong as soon as the student writes code above
    assert stubbed.count(BEGIN_MARKER) == original.decode().count(BEGIN_MARKER)  # markers stay
    package = (course.settings.lib_path / "core" / "tensor.py").read_text(encoding="utf-8")
    assert "NotImplementedError" in package and course.package_bytes() != package_before
    assert module_in_sync(course.settings, module) == (True, "in sync")


def test_restore_lists_newest_first_and_brings_the_work_back(course):
    module = course.module("01")
    original = module.notebook.read_bytes()
    package_before = course.package_bytes()
    reset_module(course.settings, module)
    _delete_first_stub(module.notebook)
    reset_module(course.settings, module)  # a stub deleted, nothing written: a second, newer backup
    backups = list_backups(course.settings, module)
    assert len(backups) == 2 and backups[0].path.name > backups[1].path.name
    assert backups[1].path.read_bytes() == original

    listing = course.tito("module", "reset", "01", "--restore")
    assert listing.returncode == 0 and backups[1].path.name in listing.stdout

    restore_backup(course.settings, module, find_backup(course.settings, module, "2"))
    assert module.notebook.read_bytes() == original
    assert course.package_bytes() == package_before
    assert len(list_backups(course.settings, module)) == 2  # it replaced the bare stub: nothing to save


def test_reset_refuses_bad_markers_and_writes_nothing(course):
    path = course.add_module("02_toy", course.TOY.replace("    ### END SOLUTION\n", ""))
    before = path.read_bytes()
    with pytest.raises(NotebookError, match="never closed"):
        reset_module(course.settings, course.module("02"))
    assert path.read_bytes() == before
    assert list_backups(course.settings, course.module("02")) == []


def test_restore_of_a_missing_backup_number_says_how_many_exist(course):
    result = course.tito("module", "reset", "01", "--restore", "3")
    assert result.returncode == 1
    assert "there are 0" in result.stdout


def test_reset_exports_the_stub_first_and_keeps_the_notebook_when_that_fails(course, unprivileged):
    """Row 3: the package cannot be written; the notebook keeps the student's work, and says where it was saved."""
    module = course.module("01")
    original = module.notebook.read_bytes()
    before = course.package_bytes()
    core = course.settings.lib_path / "core"
    core.chmod(0o555)
    try:
        result = course.tito_process("module", "reset", "01", prefix=unprivileged)
    finally:
        core.chmod(0o755)
    out = course.flat(result.stdout)
    assert result.returncode == 1, out
    [backup] = _backup_files(course, "01_tensor")
    assert f".tito/backups/01_tensor/{backup.name}" in out and "Saved your notebook to" in out
    assert "Permission denied" in out and f"Your notebook {module.notebook} was not changed" in out
    assert "Traceback" not in result.stdout + result.stderr
    assert module.notebook.read_bytes() == original and backup.read_bytes() == original
    assert course.package_bytes() == before


def test_backups_say_what_they_hold_and_the_advice_points_at_the_work(course):
    """Row 4: a second reset does not save the stub over the work; the advice finds the work."""
    path = course.add_module("02_toy", course.TOY)
    original = path.read_bytes()
    export_modules(course.settings, [course.module("02")])

    first = course.tito("module", "reset", "02")
    assert first.returncode == 0, first.stdout
    assert "(1 solution line written)" in first.stdout and "--restore 1" in first.stdout
    again = course.tito("module", "reset", "02")
    assert again.returncode == 0 and "nothing needed saving" in course.flat(again.stdout)
    assert len(_backup_files(course, "02_toy")) == 1
    assert "--restore 1`" in again.stdout  # still the work, not the stub

    _delete_first_stub(path)
    third = course.tito("module", "reset", "02")  # the stub deleted, nothing written: saved, no solution code
    assert "(the stub (no solution code))" in third.stdout and "--restore 2`" in third.stdout, third.stdout
    listing = course.tito("module", "reset", "02", "--restore")
    assert "the stub (no solution code)" in listing.stdout and "1 solution line written" in listing.stdout

    assert course.tito("module", "reset", "02", "--restore", "2").returncode == 0
    assert path.read_bytes() == original


@pytest.mark.parametrize("deleted", ["the notebook", "the module folder"])
def test_a_deleted_notebook_is_restored_from_its_backup(course, deleted):
    """Row 5."""
    path = course.add_module("02_toy", course.TOY)
    original = path.read_bytes()
    export_modules(course.settings, [course.module("02")])
    reset_module(course.settings, course.module("02"))
    if deleted == "the notebook":
        path.unlink()
    else:
        path.unlink()
        path.parent.rmdir()

    status = course.tito("status")
    assert "02_toy has no notebook any more, but it has backups" in course.flat(status.stdout)
    listing = course.tito("module", "reset", "02", "--restore")
    assert listing.returncode == 0 and "1 solution line written" in listing.stdout, listing.stdout
    restored = course.tito("module", "reset", "toy", "--restore", "1")
    assert restored.returncode == 0, restored.stdout
    assert path.read_bytes() == original
    assert "return 2 * x" in (course.settings.lib_path / "core" / "toy.py").read_text(encoding="utf-8")


def test_a_backup_of_another_module_is_refused(course, tmp_path):
    """Row 6: it would make module 02 export module 01's package file."""
    path = course.add_module("02_toy", course.TOY)
    export_modules(course.settings, [course.module("02")])
    reset_module(course.settings, course.module("01"))
    [tensor_backup] = _backup_files(course, "01_tensor")
    notebook_before, package_before = path.read_bytes(), course.package_bytes()

    refused = course.tito("module", "reset", "02", "--restore", str(tensor_backup))
    assert refused.returncode == 1
    assert "is a backup of 01_tensor, not of 02_toy" in course.flat(refused.stdout)

    elsewhere = tmp_path / "my_copy.py"  # the same file, kept by the student somewhere else
    elsewhere.write_bytes(tensor_backup.read_bytes())
    refused = course.tito("module", "reset", "02", "--restore", str(elsewhere))
    assert refused.returncode == 1
    assert "exports `core.tensor`, but 02_toy exports `core.toy`" in course.flat(refused.stdout)
    assert path.read_bytes() == notebook_before and course.package_bytes() == package_before


def test_reset_checks_it_can_write_the_notebook_before_it_exports(course, unprivileged):
    """Issue 20: a notebook folder that takes no new file stops the reset before the backup and the
    export, so the package keeps the student's code and the notebook its work."""
    module = course.module("01")
    original = module.notebook.read_bytes()
    before = course.package_bytes()
    module.folder.chmod(0o555)
    try:
        result = course.tito_process("module", "reset", "01", prefix=unprivileged)
    finally:
        module.folder.chmod(0o755)
    out = course.flat(result.stdout)
    assert result.returncode == 1 and "does not accept new files" in out and "nothing was changed" in out, out
    assert "Traceback" not in result.stdout + result.stderr
    assert module.notebook.read_bytes() == original and course.package_bytes() == before
    assert _backup_files(course, "01_tensor") == []


def test_reset_refuses_a_read_only_notebook(course, unprivileged):
    module = course.module("01")
    before = course.package_bytes()
    module.notebook.chmod(0o444)
    try:
        result = course.tito_process("module", "reset", "01", prefix=unprivileged)
    finally:
        module.notebook.chmod(0o644)
    assert result.returncode == 1 and "is read-only" in course.flat(result.stdout), result.stdout
    assert course.package_bytes() == before and _backup_files(course, "01_tensor") == []


@pytest.mark.parametrize("command", [("module", "reset", "01"), ("export", "01"), ("test", "01")])
def test_a_read_only_state_folder_is_named_before_anything_changes(course, unprivileged, command):
    """`.tito/` read-only: a reset cannot back the notebook up, an export or a test cannot take their lock.
    Each says which folder and what to do (it was a raw OSError from the backup's write), changing nothing."""
    module = course.module("01")
    notebook, package = module.notebook.read_bytes(), course.package_bytes()
    state = course.settings.state_path
    state.mkdir(exist_ok=True)
    state.chmod(0o555)
    try:
        result = course.tito_process(*command, prefix=unprivileged)
    finally:
        state.chmod(0o755)
    said = course.flat(result.stdout + result.stderr)
    assert result.returncode == 1 and "Traceback" not in said, said
    assert (f"tito keeps its state (locks, test results, backups) in {state}, and cannot write there "
            f"(Permission denied: {state}") in said and f"`chmod -R u+w {state}`" in said
    if command[0] == "module":
        assert "your notebook cannot be backed up before it is replaced, so nothing was changed" in said
    assert module.notebook.read_bytes() == notebook and course.package_bytes() == package
    assert list(state.iterdir()) == []


def test_a_lock_another_tito_holds_is_named_as_such_not_as_a_read_only_folder(course):
    """filelock's Timeout is an OSError: the read-only-folder message must not swallow it."""
    import subprocess
    import sys

    from tito.course import CourseError
    from tito.locks import course_lock

    course.settings.state_path.mkdir(exist_ok=True)
    lock = course.settings.state_path / "export.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from filelock import FileLock; "
                               "held = FileLock(sys.argv[1]); held.acquire(); print('locked', flush=True); "
                               "time.sleep(60)", str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(CourseError, match=r"Another tito has held .*export.lock for 0 s; wait for it"):
            with course_lock(course.settings, "export", wait_s=0.05):
                pass
    finally:
        holder.kill()
        holder.wait()
