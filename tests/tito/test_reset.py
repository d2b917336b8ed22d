"""tito module reset: back to the stub with a backup first; --restore brings the work back."""
from __future__ import annotations

import pytest

from tito.export import module_in_sync
from tito.notebook import BEGIN_MARKER, NotebookError
from tito.reset import find_backup, list_backups, reset_module, restore_backup


def test_reset_backs_up_stubs_and_reexports(course):
    module = course.module("01")
    original = module.notebook.read_bytes()
    package_before = course.package_bytes()

    result = course.tito("module", "reset", "tensor")
    assert result.returncode == 0, result.stdout + result.stderr

    [backup] = list_backups(course.settings, module)
    assert backup.read_bytes() == original
    assert str(backup.relative_to(course.root)).startswith(".tito/backups/01_tensor/")
    assert backup.name in result.stdout  # the user is told where their work went
    stubbed = module.notebook.read_text(encoding="utf-8")
    assert "raise NotImplementedError('Tensor.matmul is not implemented yet" in stubbed
    assert stubbed.count(BEGIN_MARKER) == original.decode().count(BEGIN_MARKER)  # markers stay
    package = (course.settings.lib_path / "core" / "tensor.py").read_text(encoding="utf-8")
    assert "NotImplementedError" in package and course.package_bytes() != package_before
    assert module_in_sync(course.settings, module) == (True, "in sync")


def test_restore_lists_newest_first_and_brings_the_work_back(course):
    module = course.module("01")
    original = module.notebook.read_bytes()
    package_before = course.package_bytes()
    reset_module(course.settings, module)
    reset_module(course.settings, module)  # a stub of a stub: a second, newer backup
    backups = list_backups(course.settings, module)
    assert len(backups) == 2 and backups[0].name > backups[1].name
    assert backups[1].read_bytes() == original

    listing = course.tito("module", "reset", "01", "--restore")
    assert listing.returncode == 0 and backups[1].name in listing.stdout

    restore_backup(course.settings, module, find_backup(course.settings, module, "2"))
    assert module.notebook.read_bytes() == original
    assert course.package_bytes() == package_before
    assert len(list_backups(course.settings, module)) == 3  # the stub was saved before restoring


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
