"""`tito module reset`: a notebook back to its student stub, and backups back again.

Nothing here loses work: before a notebook is overwritten (by a reset or by a
restore) its current text is saved to `.tito/backups/<module>/`. The package is
re-exported afterwards, so it always matches the notebook. No git needed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .course import CourseError, CourseModule, Settings
from .export import ExportResult, export_modules
from .notebook import NotebookError, check_syntax, read_text, stub_text

BACKUPS_DIR = "backups"
_STAMP = "%Y%m%dT%H%M%S%fZ"  # sorts by time as text; microseconds keep quick resets apart


@dataclass(frozen=True)
class ResetResult:
    backup: Path  # where the notebook's previous text was saved
    export: ExportResult


def backups_folder(settings: Settings, module: CourseModule) -> Path:
    return settings.state_path / BACKUPS_DIR / module.key


def backup_notebook(settings: Settings, module: CourseModule) -> Path:
    """Copy the notebook to `.tito/backups/<module>/<timestamp>_<name>_dev.py`; return the copy."""
    folder = backups_folder(settings, module)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime(_STAMP)
    target = folder / f"{stamp}_{module.notebook.name}"
    target.write_bytes(module.notebook.read_bytes())
    return target


def list_backups(settings: Settings, module: CourseModule) -> list[Path]:
    """The module's backups, newest first (number 1 is the newest)."""
    folder = backups_folder(settings, module)
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f"*_{module.notebook.name}"), key=lambda p: p.name, reverse=True)


def _write_notebook(module: CourseModule, text: str) -> None:
    scratch = module.notebook.with_name(module.notebook.name + ".tito-new")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, module.notebook)  # never a half-written notebook


def _replace_and_export(settings: Settings, module: CourseModule, text: str) -> ResetResult:
    """Back up the notebook, write `text` in its place and export it.

    If the new text does not export, the previous text is put back (the package
    was not touched: export is all-or-nothing) and the error is raised.
    """
    backup = backup_notebook(settings, module)
    previous = read_text(module.notebook)
    _write_notebook(module, text)
    try:
        result = export_modules(settings, [module])[0]  # the default_exp module comes first
    except NotebookError:
        _write_notebook(module, previous)
        raise
    return ResetResult(backup, result)


def reset_module(settings: Settings, module: CourseModule) -> ResetResult:
    """Replace every solution body in the notebook by its stub, keeping a backup first."""
    text = read_text(module.notebook)
    relpath = module.notebook.relative_to(settings.root).as_posix()
    stubbed = stub_text(text, module.notebook, relpath, module.key)  # raises before anything is written
    check_syntax(stubbed, module.notebook)
    return _replace_and_export(settings, module, stubbed)


def find_backup(settings: Settings, module: CourseModule, choice: str) -> Path:
    """A backup by its number in `list_backups` ("1" = newest) or by its path."""
    backups = list_backups(settings, module)
    if choice.isdigit():
        index = int(choice)
        if 1 <= index <= len(backups):
            return backups[index - 1]
        raise CourseError(
            f"No backup number {choice} for {module.key}: there are {len(backups)}. "
            f"See them with `tito module reset {module.key} --restore`."
        )
    path = Path(choice).expanduser().resolve()
    if not path.is_file():
        raise CourseError(f"{choice}: no such backup file.")
    return path


def restore_backup(settings: Settings, module: CourseModule, backup: Path) -> ResetResult:
    """Put a backup back as the notebook (the current notebook is backed up first), then export.

    A backup that does not export is still a student's work: it is not restored,
    and the error says what to fix; both the notebook and the backup stay as they are.
    """
    text = read_text(backup)
    try:
        return _replace_and_export(settings, module, text)
    except NotebookError as err:
        raise NotebookError(
            f"{err}\nThe backup was not restored because it does not export. Copy it by hand "
            f"({backup}) to {module.notebook} if you want it anyway, fix it, then `tito export {module.key}`."
        ) from err
