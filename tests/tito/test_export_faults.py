"""Issue 9, row 2: an export that fails or is killed while writing leaves a package that imports.

Real failures only: a folder tito may not write (permissions, with root's override taken
away), a file-size limit that makes writes fail as a full disk does, and a tito process
killed with SIGKILL at a chosen point (`TITO_TEST_FAULT`, see tito/faults.py).
"""
from __future__ import annotations

import resource
import signal
import subprocess
import sys

import pytest

from tito.export import export_modules
from tito.transaction import JOURNAL_FILE, SCRATCH_SUFFIX

# Module 02 imports a name that module 01 gains in the same export. Its package file
# (core/needs_new.py) sorts before core/tensor.py, so it is switched in first: a package
# left half new, half old cannot import it.
IMPORTER = "from tinytorch.core.tensor import NEW_NAME\n\n\ndef double(x):"


def _old_then_new(course):
    """Export the old versions, then change both notebooks; returns the old package's bytes."""
    course.add_module("02_toy", course.TOY.replace("core.toy", "core.needs_new"))
    export_modules(course.settings, [course.module("01"), course.module("02")])
    old = course.package_bytes()
    tensor = course.module("01").notebook
    tensor.write_text(tensor.read_text(encoding="utf-8") + "\n# %%\n#| export\nNEW_NAME = 42\n", encoding="utf-8")
    course.add_module("02_toy", course.TOY.replace("core.toy", "core.needs_new").replace("def double(x):", IMPORTER))
    return old


def _imports(course) -> subprocess.CompletedProcess:
    code = "import tinytorch.core.needs_new as m, tinytorch.core.tensor as t; print(m.double(2), getattr(t, 'NEW_NAME', None))"
    return subprocess.run([sys.executable, "-c", code], cwd=course.root, env=course.env(), capture_output=True,
                          text=True, timeout=120)


def _leftovers(course) -> list[str]:
    scratch = [p.name for p in course.settings.lib_path.rglob("*" + SCRATCH_SUFFIX)]
    journal = course.settings.state_path / JOURNAL_FILE
    return scratch + ([journal.name] if journal.exists() else [])


@pytest.mark.parametrize("fault, outcome", [
    ("export-write:1", "old"),  # killed while writing the new files beside the old ones
    ("export-write:2", "old"),
    ("export-commit:1", "new"),  # killed right after the journal was written
    ("export-rename:1", "new"),  # killed between two renames: the package is half new, half old
])
def test_a_kill_during_export_leaves_a_package_that_imports(course, fault, outcome):
    old = _old_then_new(course)
    killed = course.tito_process("export", "--all", env=course.env(TITO_TEST_FAULT=fault))
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _leftovers(course), "the kill left nothing to clean up: the fault point was not reached"

    after = course.tito_process("milestone", "list")  # any tito command finishes or rolls back first
    assert after.returncode == 0, after.stdout
    assert ("Finished an export" if outcome == "new" else "Rolled back an export") in after.stdout
    assert _leftovers(course) == []
    imported = _imports(course)
    assert imported.returncode == 0, imported.stderr
    if outcome == "old":
        assert course.package_bytes() == old
        assert imported.stdout.split() == ["4", "None"]
    else:
        assert imported.stdout.split() == ["4", "42"]
        assert not any(r.changed for r in export_modules(course.settings, [course.module("01"), course.module("02")]))


def test_a_read_only_subfolder_changes_nothing(course, unprivileged):
    """The first new file is written, the second cannot be: the first is removed again."""
    course.add_module("02_toy", course.TOY.replace("core.toy", "extra.toy"))
    export_modules(course.settings, [course.module("01"), course.module("02")])
    tensor = course.module("01").notebook
    tensor.write_text(tensor.read_text(encoding="utf-8") + "\n# %%\n#| export\nNEW_NAME = 42\n", encoding="utf-8")
    course.add_module("02_toy", course.TOY.replace("core.toy", "extra.toy").replace("return 2 * x", "return x + x"))
    before = course.package_bytes()
    locked = course.settings.lib_path / "extra"
    locked.chmod(0o555)
    try:
        result = course.tito_process("export", "--all", prefix=unprivileged)
    finally:
        locked.chmod(0o755)
    out = course.flat(result.stdout)
    assert result.returncode == 1, out
    assert "Could not write the package" in out and "Permission denied" in out and "Nothing was changed" in out
    assert "Traceback" not in result.stdout + result.stderr
    assert course.package_bytes() == before and _leftovers(course) == []
    assert course.tito_process("export", "--all").returncode == 0  # writable again: the export goes through


def _file_size_limit(limit: int):
    def apply() -> None:  # in the child: every write past `limit` bytes fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_changes_nothing(course):
    settings_file = course.root / "settings.ini"
    settings_file.write_text(settings_file.read_text(encoding="utf-8").replace("version = 0.1.0", "version = 0.2.0"),
                             encoding="utf-8")  # __init__.py changes too: small, written first
    tensor = course.module("01").notebook
    tensor.write_text(tensor.read_text(encoding="utf-8") + "\n# %%\n#| export\nNEW_NAME = 42\n", encoding="utf-8")
    before = course.package_bytes()
    result = course.tito_process("export", "--all", preexec_fn=_file_size_limit(4096))
    out = course.flat(result.stdout)
    assert result.returncode == 1, out + result.stderr
    assert "Could not write the package" in out and "File too large" in out and "Nothing was changed" in out
    assert "Traceback" not in result.stdout + result.stderr
    assert course.package_bytes() == before and _leftovers(course) == []
