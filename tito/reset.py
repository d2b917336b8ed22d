"""`tito module reset`: a notebook back to its student stub, and backups back again.

Nothing here loses work:

* before a notebook is overwritten (by a reset or by a restore) its text is saved to
  `.tito/backups/<module>/` (unless it is exactly the stub, or exactly the newest backup);
* the new text is exported first, and the notebook is replaced only once that succeeded,
  so a failed export (a notebook that does not export, a read-only package) leaves the
  notebook as it was;
* each backup says what it holds (the stub, or how many solution lines), so the advice
  can point at the newest backup with work in it;
* a deleted notebook can be restored from its backups, and a backup of another module
  is refused (it would export another module's package file).
"""
from __future__ import annotations

import errno
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tinytorch.files import atomic_write

from .course import MODULE_DIR_PATTERN, CourseError, CourseModule, Settings, resolve_module
from .export import ExportResult, export_modules, scan_targets
from .locks import state_folder_problem
from .notebook import NotebookError, check_syntax, read_text, solution_progress, stub_text

BACKUPS_DIR = "backups"
_STAMP = "%Y%m%dT%H%M%S%fZ"  # sorts by time as text; microseconds keep quick resets apart
_STAMP_PREFIX = re.compile(r"^(\d{8}T\d{12}Z)_")

Saved = Callable[[Path], None]  # hears of a backup as soon as it is written


@dataclass(frozen=True)
class Backup:
    path: Path
    saved_at: datetime | None  # from the file name (UTC); None for a file not named by tito
    solution_lines: int | None  # lines written in solution blocks; None when its markers are broken

    @property
    def holds(self) -> str:
        if self.solution_lines is None:
            return "work (its solution markers are broken)"
        if self.solution_lines == 0:
            return "the stub (no solution code)"
        return f"{self.solution_lines} solution line{'s' if self.solution_lines != 1 else ''} written"

    @property
    def has_work(self) -> bool:
        return self.solution_lines != 0


@dataclass(frozen=True)
class ResetResult:
    backup: Path | None  # where the notebook's previous text was saved; None when nothing needed saving
    export: ExportResult


def backups_folder(settings: Settings, module: CourseModule) -> Path:
    return settings.state_path / BACKUPS_DIR / module.key


def describe_backup(path: Path) -> Backup:
    match = _STAMP_PREFIX.match(path.name)
    saved_at = datetime.strptime(match.group(1), _STAMP).replace(tzinfo=timezone.utc) if match else None
    try:
        lines = solution_progress(read_text(path), path).solution_lines
    except NotebookError:
        lines = None
    return Backup(path, saved_at, lines)


def list_backups(settings: Settings, module: CourseModule) -> list[Backup]:
    """The module's backups, newest first (number 1 is the newest)."""
    folder = backups_folder(settings, module)
    if not folder.is_dir():
        return []
    paths = sorted(folder.glob(f"*_{module.notebook.name}"), key=lambda p: p.name, reverse=True)
    return [describe_backup(p) for p in paths]


def newest_with_work(backups: list[Backup]) -> int | None:
    """The number (1 = newest) of the newest backup that holds solution code, or None."""
    return next((number for number, b in enumerate(backups, start=1) if b.has_work), None)


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as handle:  # never a half-written file
        handle.write(data)


def check_writable(path: Path) -> None:
    """CourseError unless `path` can be replaced: its folder takes a new file, and the file itself
    (if it exists) is not read-only. Checked before anything is exported or backed up."""
    folder = path.parent
    if path.exists() and not os.access(path, os.W_OK):
        raise CourseError(f"{path} is read-only, so it cannot be replaced; nothing was changed. "
                          f"Make it writable (`chmod u+w {path}`) and run this command again.")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise CourseError(f"{folder} does not accept new files ({err.strerror or err}), so {path.name} cannot "
                          "be replaced; nothing was changed. Make the folder writable and run this command "
                          "again.") from None


def check_can_back_up(settings: Settings, module: CourseModule) -> None:
    """CourseError unless a backup of `module` can be written (its folder in `.tito/backups/` exists
    or can be made, and takes a new file). Checked before anything is exported or written."""
    folder = backups_folder(settings, module)
    existing = next(p for p in [folder, *folder.parents] if p.exists() or p.is_symlink())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:  # named by the folder, not by the scratch file's random name
        raise CourseError(state_folder_problem(
            settings, OSError(err.errno, err.strerror, str(existing)), "your notebook cannot be backed up before it is replaced, so nothing was changed")) from None


def save_backup(settings: Settings, module: CourseModule, data: bytes) -> Path | None:
    """Save `data` (the notebook's bytes) as the newest backup, unless the newest already holds it."""
    existing = list_backups(settings, module)
    if existing and existing[0].path.read_bytes() == data:
        return None
    stamp = datetime.now(timezone.utc).strftime(_STAMP)
    target = backups_folder(settings, module) / f"{stamp}_{module.notebook.name}"
    _write_atomically(target, data)
    return target


def _save_current(settings: Settings, module: CourseModule, saved: Saved | None) -> Path | None:
    """Back up the notebook as it is now, unless it is exactly its own stub (nothing to lose)."""
    data = module.notebook.read_bytes()
    try:
        text = read_text(module.notebook)
        relpath = module.notebook.relative_to(settings.root).as_posix()
        if stub_text(text, module.notebook, relpath, module.key) == text:
            return None
    except NotebookError:
        pass  # broken markers or encoding: certainly not the stub, so keep it
    backup = save_backup(settings, module, data)
    if backup and saved:
        saved(backup)
    return backup


def _export_then_write(settings: Settings, module: CourseModule, text: str) -> ExportResult:
    """Export `text` as the module's notebook; only when that succeeded, write it to the notebook."""
    try:
        result = export_modules(settings, [module], texts={module.key: text})[0]  # default_exp comes first
    except CourseError as err:
        state = "was not changed" if module.notebook.exists() else "was not written"
        raise type(err)(f"{err}\nYour notebook {module.notebook} {state}.") from err
    _write_atomically(module.notebook, text.encode("utf-8"))
    return result


def reset_module(settings: Settings, module: CourseModule, saved: Saved | None = None) -> ResetResult:
    """Replace every solution body in the notebook by its stub, keeping a backup first."""
    if not module.notebook.is_file():
        raise CourseError(f"{module.notebook} does not exist. Bring back a backup with "
                          f"`tito module reset {module.key} --restore`.")
    text = read_text(module.notebook)
    relpath = module.notebook.relative_to(settings.root).as_posix()
    stubbed = stub_text(text, module.notebook, relpath, module.key)  # raises before anything is written
    check_syntax(stubbed, module.notebook)
    check_writable(module.notebook)  # before the backup and the export: a reset that cannot finish changes nothing
    check_can_back_up(settings, module)
    backup = _save_current(settings, module, saved)
    return ResetResult(backup, _export_then_write(settings, module, stubbed))


def module_for_restore(settings: Settings, name: str) -> CourseModule:
    """The module named, also when its notebook was deleted but its backups remain."""
    try:
        return resolve_module(settings, name)
    except CourseError as unknown:
        folder = settings.state_path / BACKUPS_DIR
        wanted = Path(name).name.strip().lower()
        keys = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        for key in keys:
            match = MODULE_DIR_PATTERN.match(key)
            if match and wanted in (key, match.group(1), match.group(2), str(int(match.group(1)))):
                module_folder = settings.nbs_path / key
                return CourseModule(match.group(1), match.group(2), module_folder,
                                    module_folder / f"{match.group(2)}_dev.py")
        raise unknown


def find_backup(settings: Settings, module: CourseModule, choice: str) -> Path:
    """A backup by its number in `list_backups` ("1" = newest) or by its path."""
    backups = list_backups(settings, module)
    if choice.isdigit():
        index = int(choice)
        if 1 <= index <= len(backups):
            return backups[index - 1].path
        raise CourseError(
            f"No backup number {choice} for {module.key}: there are {len(backups)}. "
            f"See them with `tito module reset {module.key} --restore`."
        )
    path = Path(choice).expanduser().resolve()
    if not path.is_file():
        raise CourseError(f"{choice}: no such backup file.")
    return path


def check_backup_belongs(settings: Settings, module: CourseModule, backup: Path) -> None:
    """Refuse a backup of another module: restoring it would export another module's package file."""
    backups_root = (settings.state_path / BACKUPS_DIR).resolve()
    resolved = backup.resolve()
    if resolved.is_relative_to(backups_root) and resolved.parent.name != module.key:
        owner = resolved.parent.name
        raise CourseError(
            f"{backup} is a backup of {owner}, not of {module.key}. Restore it into its own module "
            f"with `tito module reset {owner} --restore {backup}`."
        )
    theirs = scan_targets(CourseModule(module.number, module.name, module.folder, backup), default_only=True)
    ours = scan_targets(module, default_only=True) if module.notebook.is_file() else []
    if theirs and ours and theirs != ours:
        raise CourseError(
            f"{backup} exports `{theirs[0]}`, but {module.key} exports `{ours[0]}`: it is not a version of "
            f"this module's notebook, and restoring it would overwrite another package file. Nothing was changed."
        )


def restore_backup(settings: Settings, module: CourseModule, backup: Path, saved: Saved | None = None) -> ResetResult:
    """Put a backup back as the notebook (the current notebook is saved first), then export.

    A backup that does not export is still a student's work: it is not restored,
    and the error says what to fix; both the notebook and the backup stay as they are.
    """
    check_backup_belongs(settings, module, backup)
    text = read_text(backup)
    module.notebook.parent.mkdir(parents=True, exist_ok=True)
    check_writable(module.notebook)
    if module.notebook.is_file():
        check_can_back_up(settings, module)
    current = _save_current(settings, module, saved) if module.notebook.is_file() else None
    try:
        return ResetResult(current, _export_then_write(settings, module, text))
    except NotebookError as err:
        raise NotebookError(
            f"{err}\nThe backup was not restored because it does not export. Copy it by hand "
            f"({backup}) to {module.notebook} if you want it anyway, fix it, then `tito export {module.key}`."
        ) from err
