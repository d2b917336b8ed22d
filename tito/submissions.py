"""What students handed in: one entry per student, and from each only its lesson notebooks.

A submissions folder holds one entry per student: a folder, a `.zip`, or a `.tar.gz`
(`.tgz`, `.tar`), as a learning platform downloads them; the student's name is the entry's
name. From an entry only the lesson notebooks are taken, `NN_name/name_dev.py` (or a
`name_dev.ipynb` saved from Jupyter, read with jupytext), wherever they sit inside it.
Everything else (tests, conftest files, a `tinytorch/` folder, tito itself) is listed as
ignored and never reaches the grader's disk: archives are read member by member, in memory,
and links are not followed.
"""
from __future__ import annotations

import re
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .course import CourseError, CourseModule

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_NOTEBOOK_BYTES = 8 * 1024 * 1024  # a lesson notebook is well under 1 MB; more is not a notebook
MAX_MEMBERS = 100_000  # entries looked at in one submission
SKIPPED_PARTS = {"__MACOSX", ".ipynb_checkpoints", ".git", "__pycache__", ".tito"}  # never the lesson itself
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._@+-]+")


@dataclass(frozen=True)
class SubmittedNotebook:
    module: str  # module key, "01_tensor"
    text: str  # the notebook as jupytext percent text
    path: str  # where it was inside the submission, e.g. "tinytorch/modules/01_tensor/tensor_dev.py"
    note: str = ""  # e.g. "read from an .ipynb with jupytext"


@dataclass
class Submission:
    name: str  # the student, as the entry is named (suffix dropped), safe as a file name
    source: Path  # the folder or archive
    notebooks: dict[str, SubmittedNotebook] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)  # every other file in the entry
    problems: dict[str, str] = field(default_factory=dict)  # module key -> why its notebook could not be read
    error: str = ""  # the whole entry could not be read (a broken archive)


def student_name(entry: Path) -> str:
    """"alice" for `alice/`, `alice.zip`, `alice.tar.gz`; characters unsafe in a file name become `_`."""
    name = entry.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    return _SAFE_NAME.sub("_", name).strip("._") or "unnamed"


def is_entry(path: Path) -> bool:
    if path.name.startswith("."):
        return False
    if path.is_symlink():
        return False
    return path.is_dir() or (path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES))


def _members(entry: Path):
    """(relative posix path, size, reader) of every regular file in a folder or archive; links skipped.

    A reader works only until the next member is asked for (the archive is closed at the end).
    """
    if entry.is_dir():
        for path in sorted(entry.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            yield path.relative_to(entry).as_posix(), path.stat().st_size, path.read_bytes
    elif entry.name.lower().endswith(".zip"):
        with zipfile.ZipFile(entry) as archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                mode = info.external_attr >> 16
                if info.is_dir() or stat.S_ISLNK(mode):
                    continue
                yield info.filename, info.file_size, lambda info=info: _read_capped(archive.open(info))
    else:
        with tarfile.open(entry) as archive:
            for member in sorted(archive.getmembers(), key=lambda m: m.name):
                if not member.isfile():
                    continue
                yield member.name, member.size, lambda member=member: _read_capped(archive.extractfile(member))


def _read_capped(handle) -> bytes:
    with handle:
        data = handle.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"larger than {MAX_NOTEBOOK_BYTES // (1024 * 1024)} MB")
    return data


def _clean(name: str) -> str:
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p not in ("/", ".", "..")]
    return "/".join(parts)


def _lesson_for(path: str, modules: list[CourseModule]) -> CourseModule | None:
    parts = path.split("/")
    if SKIPPED_PARTS.intersection(parts[:-1]):
        return None
    for module in modules:
        if parts[-1] in (f"{module.name}_dev.py", f"{module.name}_dev.ipynb"):
            return module
    return None


def _preference(path: str, module: CourseModule) -> tuple:
    """Sort key among several copies of one lesson: a .py inside its NN_name folder, then the shortest path."""
    parts = path.split("/")
    in_folder = len(parts) > 1 and parts[-2] == module.key
    return (not path.endswith(".py"), not in_folder, len(parts), path)


def _as_percent(data: bytes, path: str) -> tuple[str, str]:
    """The notebook as percent-format text; (text, note)."""
    from .notebook import decode_text

    text = decode_text(data, Path(path))
    if not path.endswith(".ipynb"):
        return text, ""
    import jupytext

    try:
        notebook = jupytext.reads(text, fmt="ipynb")
    except Exception as err:  # jupytext raises several types; all mean "not a notebook"
        raise ValueError(f"not a Jupyter notebook jupytext can read: {err}") from None
    return jupytext.writes(notebook, fmt="py:percent"), "read from an .ipynb with jupytext"


def read_submission(entry: Path, modules: list[CourseModule]) -> Submission:
    """The lesson notebooks of one student's folder or archive; the rest listed as ignored."""
    submission = Submission(student_name(entry), entry)
    candidates: dict[str, list[tuple[str, bytes | Exception]]] = {}
    try:
        for count, (raw, size, read) in enumerate(_members(entry)):
            if count >= MAX_MEMBERS:
                submission.ignored.append(f"... (more than {MAX_MEMBERS:,} files: the rest were not looked at)")
                break
            path = _clean(raw)
            module = _lesson_for(path, modules)
            if module is None:
                submission.ignored.append(path)
            else:
                try:
                    if size > MAX_NOTEBOOK_BYTES:
                        raise ValueError(f"{size:,} bytes, larger than {MAX_NOTEBOOK_BYTES // (1024 * 1024)} MB")
                    data: bytes | Exception = read()
                except (ValueError, OSError) as err:
                    data = err
                candidates.setdefault(module.key, []).append((path, data))
        for module in modules:
            found = sorted(candidates.get(module.key, []), key=lambda c: _preference(c[0], module))
            if not found:
                continue
            path, data = found[0]
            submission.ignored.extend(c[0] for c in found[1:])
            try:
                if isinstance(data, Exception):
                    raise data
                text, note = _as_percent(data, path)
            except (ValueError, OSError, CourseError) as err:
                submission.problems[module.key] = f"{path}: could not be read: {err}"
                continue
            others = [c[0] for c in found[1:]]
            if others:
                note = "; ".join(filter(None, [note, f"other copies ignored: {', '.join(others)}"]))
            submission.notebooks[module.key] = SubmittedNotebook(module.key, text, path, note)
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError) as err:
        submission.error = f"{entry.name} could not be read: {err}"
    submission.ignored.sort()
    return submission


def collect_submissions(folder: Path, modules: list[CourseModule], single: bool = False) -> list[Submission]:
    """Every student's submission in `folder`, in name order (`single`: `folder` is one student's submission).

    Raises CourseError when the folder does not exist or holds no submission, or when two
    entries would give the same student name (alice/ and alice.zip): say which to keep.
    """
    folder = Path(folder)
    if not folder.exists():
        raise CourseError(f"{folder} does not exist: give the folder that holds one submission per student.")
    if single:
        return [read_submission(folder, modules)]
    if not folder.is_dir():
        raise CourseError(f"{folder} is not a folder: give the folder that holds one submission per student "
                          "(a folder, .zip or .tar.gz each), or use --single for one student's submission.")
    entries = sorted(p for p in folder.iterdir() if is_entry(p))
    if not entries:
        raise CourseError(f"{folder} holds no submission: expected one folder, .zip or .tar.gz per student.")
    by_name: dict[str, Path] = {}
    for entry in entries:
        name = student_name(entry)
        if name in by_name:
            raise CourseError(f"Two submissions for {name!r}: {by_name[name].name} and {entry.name}. "
                              "Keep one (move the other out of the folder) and grade again.")
        by_name[name] = entry
    return [read_submission(entry, modules) for entry in entries]
