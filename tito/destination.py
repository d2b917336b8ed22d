"""A path the user gave tito to write to (`--out`, `--gradescope FILE.zip`, `release student DIR`):
checked before any work, so that a folder tito cannot write is named at once, not after minutes of
grading or building, with a raw OSError."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .course import CourseError


def nearest_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (where a new folder would be created)."""
    for candidate in [path, *path.parents]:
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(path.anchor)


def check_accepts_new_files(folder: Path, given: str) -> None:
    """CourseError unless `folder` (a folder) takes a new file and a new folder; `given` starts the
    message with what the user gave, e.g. "--out grades"."""
    if not folder.is_dir():
        raise CourseError(f"{given}: {folder} is not a folder, so nothing can be written there.")
    try:
        Path(tempfile.mkdtemp(prefix=".tito-check-", dir=folder)).rmdir()
    except OSError as err:
        raise CourseError(f"{given}: {folder} does not accept new files ({err.strerror or err}). Make it writable "
                          "or choose another path; nothing was done.") from None


def check_file_destination(path: Path, option: str) -> None:
    """CourseError, before any work, unless a file can be written at `path` (replacing a plain file
    there): `option` names where the path came from, e.g. "--gradescope"."""
    if path.is_symlink() and not path.exists():
        raise CourseError(f"{option} {path} is a link to nothing ({os.readlink(path)}): remove it or choose another "
                          "path.")
    if path.exists() and not path.is_file():
        raise CourseError(f"{option} {path} exists and is not a file: choose another path.")
    check_accepts_new_files(nearest_existing(path.parent), f"{option} {path}")
