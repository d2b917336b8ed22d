"""Locks between tito processes of one course (two `tito test` runs at once, an export and a status).

A lock is a file in the course's state folder (`.tito/NAME.lock`) held with the operating
system's file locking (the `filelock` package): a process that dies releases it, so a
kill never leaves a stale lock behind.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from filelock import FileLock, Timeout

from .course import CourseError, Settings

WAIT_S = 300.0  # an export takes seconds; waiting longer means something is stuck


def state_folder_problem(settings: Settings, err: OSError, consequence: str = "nothing was changed") -> str:
    """What to say when tito cannot write its state folder (`.tito/`: locks, results, backups)."""
    folder = settings.state_path
    return (f"tito keeps its state (locks, test results, backups) in {folder}, and cannot write there "
            f"({err.strerror or err}: {err.filename or folder}); {consequence}. Make it writable "
            f"(`chmod -R u+w {folder}`) and run this command again.")


@contextmanager
def course_lock(settings: Settings, name: str, wait_s: float = WAIT_S) -> Iterator[None]:
    path = settings.state_path / f"{name}.lock"
    lock = FileLock(str(path))
    try:
        settings.state_path.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=wait_s)
    except Timeout:  # first: filelock's Timeout is an OSError too
        raise CourseError(
            f"Another tito has held {path} for {wait_s:.0f} s; wait for it to finish "
            "(or stop it) and run this command again."
        ) from None
    except OSError as err:  # a read-only .tito/ (or course): say which folder, before anything is done
        raise CourseError(state_folder_problem(settings, err)) from None
    try:
        yield
    finally:
        lock.release()
