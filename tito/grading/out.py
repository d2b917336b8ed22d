"""Where `tito grade` writes (`--out`): checked before any work, locked, replaced only when complete.

A grading run takes minutes to hours, and the folder it writes holds the only copy of the
previous grades. So:

1. `check_destination` runs before anything is graded: `--out` must be a folder tito can
   write (or one it can create), empty or holding an earlier run's `grades.csv`.
2. `locked_destination` holds `--out/.tito-grade.lock` (the `filelock` package, released by
   the operating system when the process dies) for the whole run: a second `tito grade`
   into the same folder is refused at once instead of mixing its files with the first's.
3. `write_complete` writes every new file into a scratch folder inside `--out`; only when
   all of them are written are the four outputs (`grades.csv`, `grades_long.csv`,
   `feedback/`, `results/`) switched in, by renames, with Ctrl-C held off. A full disk,
   an error, Ctrl-C or a kill before that leaves the previous grades exactly as they were.
4. The previous outputs are deleted only when they hold nothing but what `tito grade`
   writes; a file of the user's among them keeps the whole previous set, moved aside to
   `--out/previous-<time>/`.

A scratch folder a killed run left behind (`.tito-grade-incoming-*`, `.tito-grade-previous-*`)
is tidied by the next run, under the lock, by the same rule.
"""
from __future__ import annotations

import os
import signal
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

from ..course import CourseError
from ..destination import check_accepts_new_files, nearest_existing
from .scratch import remove_tree

OUTPUTS = ("feedback", "results", "grades_long.csv", "grades.csv")  # grades.csv last: present means complete
LOCK_NAME = ".tito-grade.lock"
INCOMING = ".tito-grade-incoming-"
PREVIOUS = ".tito-grade-previous-"
_OWN = ".tito-grade"  # every name tito grade keeps for itself starts so
_OUTPUT_SUFFIX = {"feedback": ".md", "results": ".json"}


def check_destination(out: Path) -> None:
    """CourseError, before any work, unless `out` can take this run's grades.

    `out` must be a folder (or not exist yet, under a folder that does), writable, and either
    empty or an earlier run's output (it holds `grades.csv`); the earlier `feedback/` and
    `results/` must be folders tito can move aside. Nothing is changed."""
    if out.is_symlink() and not out.exists():
        raise CourseError(f"--out {out} is a link to nothing ({os.readlink(out)}): remove it or choose another --out.")
    if out.exists() and not out.is_dir():
        raise CourseError(f"--out {out} exists and is not a folder: choose another --out.")
    if not out.exists():
        check_accepts_new_files(nearest_existing(out), f"--out {out}")
        return
    theirs = [entry.name for entry in out.iterdir() if not entry.name.startswith(_OWN)]
    if theirs and not (out / "grades.csv").is_file():
        raise CourseError(f"--out {out} is not empty and holds no grades.csv from an earlier `tito grade`: "
                          "choose a new or empty folder for --out.")
    check_accepts_new_files(out, f"--out {out}")
    for name in ("feedback", "results"):
        earlier = out / name
        if earlier.is_symlink() or (earlier.exists() and not earlier.is_dir()):
            raise CourseError(f"--out {out}: {earlier} is not the folder an earlier `tito grade` wrote; move it "
                              "away or choose another --out.")
        if earlier.is_dir() and not os.access(earlier, os.W_OK | os.X_OK):
            raise CourseError(f"--out {out}: {earlier} is read-only, so the earlier grades cannot be replaced. "
                              f"Make it writable (`chmod -R u+w {earlier}`) or choose another --out.")


def _make_folders(out: Path) -> list[Path]:
    """Create `out` and the missing folders above it; the ones created, deepest first."""
    created = []
    for folder in [out, *out.parents]:
        if folder.exists():
            break
        created.append(folder)
    for folder in reversed(created):
        folder.mkdir()
    return created


@contextmanager
def locked_destination(out: Path) -> Iterator[Path]:
    """`out` checked, created if needed and locked for one `tito grade`; a second one is refused at once.

    Folders this created are removed again when the run ends without writing anything in them."""
    check_destination(out)
    created = _make_folders(out)
    lock = FileLock(str(out / LOCK_NAME))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise CourseError(f"Another `tito grade` is writing to {out} right now. Wait for it to finish "
                              "(or stop it), or give this one another --out; nothing was graded.") from None
        try:
            check_destination(out)  # again, now that no other tito grade can change it
            for leftover in sorted(out.glob(INCOMING + "*")) + sorted(out.glob(PREVIOUS + "*")):
                _dispose_previous(out, leftover)  # from a run that was killed
            yield out
        finally:
            lock.release()
    finally:
        _remove_if_unused(created, out / LOCK_NAME)


def _remove_if_unused(created: list[Path], lock_file: Path) -> None:
    """The folders this run created (deepest first), when they hold nothing but its lock file."""
    if not created:
        return
    if [p.name for p in created[0].iterdir()] in ([], [LOCK_NAME]):
        lock_file.unlink(missing_ok=True)
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break


def _only_grade_outputs(folder: Path) -> bool:
    """True when `folder` holds nothing but what `tito grade` writes (so deleting it loses nothing of the user's)."""
    for entry in folder.iterdir():
        if entry.name in ("grades.csv", "grades_long.csv") and entry.is_file() and not entry.is_symlink():
            continue
        suffix = _OUTPUT_SUFFIX.get(entry.name)
        if suffix is None or entry.is_symlink() or not entry.is_dir():
            return False
        if any(f.is_symlink() or not f.is_file() or f.suffix != suffix for f in entry.iterdir()):
            return False
    return True


def _dispose_previous(out: Path, previous: Path) -> Path | None:
    """Delete a set of earlier outputs that holds only tito grade's files; else keep it as
    `out/previous-<time>/` and return where it went."""
    if _only_grade_outputs(previous):
        remove_tree(previous)
        return None
    kept = out / f"previous-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}"
    os.replace(previous, kept)
    return kept


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block ends (a switch half done would mix two runs):
    each is noted meanwhile and raised again at the end. (A handler, not a signal mask: Python runs
    handlers in the main thread whichever thread the operating system picks.)"""
    noted: list[int] = []
    wanted = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]
    try:
        previous = {signum: signal.signal(signum, lambda signum, frame: noted.append(signum)) for signum in wanted}
    except ValueError:  # not the main thread: only the main thread hears signals anyway
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted:
            signal.raise_signal(noted[0])


def _switch(out: Path, incoming: Path) -> Path | None:
    """Put the complete new outputs of `incoming` in place of the earlier ones; where a kept earlier set went."""
    with _signals_held():  # the renames and the tidying up, whole: Ctrl-C is raised after them
        previous = Path(tempfile.mkdtemp(prefix=PREVIOUS, dir=out))
        for name in OUTPUTS:
            if (out / name).exists() or (out / name).is_symlink():
                os.replace(out / name, previous / name)
            if (incoming / name).exists():
                os.replace(incoming / name, out / name)
        incoming.rmdir()
        return _dispose_previous(out, previous)


def write_complete(out: Path, write: Callable[[Path], list[Path]]) -> tuple[list[Path], Path | None]:
    """Run `write(folder)` into a scratch folder inside `out` (locked), then switch its outputs in.

    Returns the paths written (as they are in `out`) and where an earlier set of outputs
    holding files of the user's was kept (None when there was none). Any error before the
    switch (a full disk: a CourseError saying so) leaves `out` as it was."""
    incoming = Path(tempfile.mkdtemp(prefix=INCOMING, dir=out))
    try:
        written = write(incoming)
        unexpected = sorted(p.name for p in incoming.iterdir() if p.name not in OUTPUTS)
        if unexpected:  # a bug here, not the user's: never switch in what the rules above do not cover
            raise RuntimeError(f"write_complete: unexpected output(s) {unexpected}")
    except OSError as err:
        remove_tree(incoming)
        raise CourseError(f"Could not write the grades into {out} ({err.strerror or err}); the earlier grades "
                          "there are as they were. Free some space (or fix the folder) and grade again.") from None
    except BaseException:
        remove_tree(incoming)
        raise
    kept = _switch(out, incoming)
    return [out / path.relative_to(incoming) for path in written], kept
