"""Switching the package to newly generated files: all or nothing, even when tito is killed.

1. Every new file is written *beside* its final name (`core/tensor.py.tito-new`) and
   flushed to disk. Any error while doing so (a read-only folder, a full disk, Ctrl-C)
   removes them again: the package is untouched.
2. The journal `.tito/export-journal.json` is written (under a scratch name, then renamed,
   so it exists whole or not at all). This is the commit point: from here on the new
   package is the one that counts.
3. Each new file is renamed over its final name (one atomic rename per file), then the
   journal is deleted.

A process killed during step 3 leaves the journal behind, and the next tito command (any
command; the CLI calls `recover` first) finishes the renames. Killed before step 2, it
leaves only `.tito-new` files, and the next tito command removes them. Either way the
package ends up wholly old or wholly new, and no scratch file stays behind.
The caller holds the course's export lock (`locks.course_lock(settings, "export")`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .course import Settings
from .faults import checkpoint

SCRATCH_SUFFIX = ".tito-new"
JOURNAL_FILE = "export-journal.json"


def journal_path(settings: Settings) -> Path:
    return settings.state_path / JOURNAL_FILE


def _scratch(final: Path) -> Path:
    return final.with_name(final.name + SCRATCH_SUFFIX)


def _write_durably(path: Path, data: bytes) -> None:
    try:
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as err:
        err.filename = err.filename or str(path)  # a failed write (a full disk) names no file by itself
        raise


def _sync_folder(folder: Path) -> None:
    """Make renames inside `folder` durable (not possible, nor needed, on every system).

    The same few lines as in `tinytorch.files`, on purpose: the export regenerates the
    package, so it must not import from it (a broken or missing package file is what an
    export repairs)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _make_folders(folder: Path, created: list[Path]) -> None:
    missing = [f for f in [folder, *folder.parents] if not f.exists()]
    for parent in reversed(missing):
        parent.mkdir()
        created.append(parent)


def switch_files(settings: Settings, new_files: dict[Path, bytes]) -> None:
    """Replace the package files `new_files` ({path relative to the package: bytes}), all or none."""
    lib = settings.lib_path
    written: list[Path] = []
    created: list[Path] = []
    try:
        for count, (relative, data) in enumerate(new_files.items(), start=1):
            final = lib / relative
            _make_folders(final.parent, created)
            written.append(_scratch(final))  # listed first: a half-written file is removed as well
            _write_durably(written[-1], data)
            checkpoint("export-write", count)
        settings.state_path.mkdir(parents=True, exist_ok=True)
        journal = journal_path(settings)
        payload = json.dumps({"package": str(lib), "files": [p.as_posix() for p in new_files]}, indent=1)
        _write_durably(_scratch(journal), payload.encode("utf-8"))
        os.replace(_scratch(journal), journal)
        _sync_folder(journal.parent)
    except BaseException:
        for scratch in written:
            scratch.unlink(missing_ok=True)
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
    checkpoint("export-commit")
    _finish(settings)


def _stray_files(settings: Settings) -> list[Path]:
    if not settings.lib_path.is_dir():
        return []
    return sorted(settings.lib_path.rglob("*" + SCRATCH_SUFFIX))


def _finish(settings: Settings) -> int:
    """Rename every scratch file over its final name, then drop the journal; returns how many."""
    strays = _stray_files(settings)
    for count, scratch in enumerate(strays, start=1):
        os.replace(scratch, scratch.with_name(scratch.name[: -len(SCRATCH_SUFFIX)]))
        checkpoint("export-rename", count)
    for folder in {s.parent for s in strays}:
        _sync_folder(folder)
    journal_path(settings).unlink(missing_ok=True)
    return len(strays)


def needs_recovery(settings: Settings) -> bool:
    """Is there a journal or a scratch file (an export in progress, or one that was interrupted)?"""
    return journal_path(settings).is_file() or bool(_stray_files(settings))


def recover(settings: Settings) -> str | None:
    """Finish (journal present) or roll back (no journal) an export that was interrupted.

    Returns what was done, or None when there was nothing to do. Every scratch file that
    exists while the journal does belongs to that export: they were all written, and
    flushed, before the journal was.
    """
    if journal_path(settings).is_file():
        count = _finish(settings)
        return (f"Finished an export that was interrupted after it had committed: {count} file(s) "
                "switched in; the package is the new one.")
    strays = _stray_files(settings)
    for scratch in strays:
        scratch.unlink()
    if strays:
        return (f"Rolled back an export that was interrupted before it committed: {len(strays)} "
                "unfinished file(s) removed; the package is as it was before it.")
    return None
