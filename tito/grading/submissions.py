"""What students handed in: one entry per student, and from each only its lesson notebooks.

A submissions folder holds one entry per student: a folder, a `.zip`, or a `.tar.gz`
(`.tgz`, `.tar`), as a learning platform downloads them; the student's name is the entry's
name. From an entry only the lesson notebooks are taken, `NN_name/name_dev.py` (or a
`name_dev.ipynb` saved from Jupyter, read with jupytext), wherever they sit inside it.
Everything else (tests, conftest files, a `tinytorch/` folder, tito itself) is listed as
ignored and never reaches the grader's disk: archives are read member by member, in memory,
and links are not followed.

An archive is checked before any member is read: at most `MAX_MEMBERS` entries and
`MAX_UNCOMPRESSED_BYTES` in all (as its index declares them; a member is never read past its
declared size), else the whole submission is refused with the numbers. A link, or a name
with `..` or starting with `/`, is never read: it is listed as refused, with the reason. Of
several copies of one lesson only the chosen one is read, so the grader holds at most one
notebook (`MAX_NOTEBOOK_BYTES`) per module in memory.
"""
from __future__ import annotations

import os
import re
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..course import CourseError, CourseModule

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_NOTEBOOK_BYTES = 8 * 1024 * 1024  # a lesson notebook is well under 1 MB; more is not a notebook
MAX_MEMBERS = 20_000  # entries in one submission (a whole course with its data is about 500)
MAX_UNCOMPRESSED_BYTES = 1024 ** 3  # all members of an archive together, as declared (a zip bomb is refused)
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


@dataclass(frozen=True)
class _Member:
    name: str  # as the folder or archive names it (posix)
    size: int  # declared size in bytes
    refused: str = ""  # why it is never read ("a link", ...); "" for a regular file


def _refusal(name: str) -> str:
    """Why a member's name alone makes it unsafe to use, or ""."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "`..` in its name"
    return ""


def _members(entry: Path):
    """(every member as `_Member`, reader(member) -> bytes) of a folder or archive, links not followed.

    Raises ValueError before anything is read when an archive holds too many members or too many bytes.
    The reader works until the generator is closed (the archive is closed then).
    """
    if entry.is_dir():
        found = []
        for folder, dirs, files in os.walk(entry):  # links to folders are not followed
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                relative = path.relative_to(entry).as_posix()
                if path.is_symlink():
                    found.append(_Member(relative, 0, "a link"))
                elif path.is_file():
                    found.append(_Member(relative, path.stat().st_size))
                if len(found) > MAX_MEMBERS:
                    raise ValueError(_too_many(len(found)))
        yield found, lambda member: _read_capped(open(entry / member.name, "rb"))
    elif entry.name.lower().endswith(".zip"):
        declared = _zip_declared_count(entry)  # before zipfile reads the whole central directory into memory
        if declared is not None and declared > MAX_MEMBERS:
            raise ValueError(_too_many(declared))
        with zipfile.ZipFile(entry) as archive:
            infos = {info.filename: info for info in archive.infolist() if not info.is_dir()}
            _check_totals(len(infos), sum(i.file_size for i in infos.values()))
            found = [_Member(name, info.file_size, "a link" if stat.S_ISLNK(info.external_attr >> 16)
                             else _refusal(name)) for name, info in sorted(infos.items())]
            yield found, lambda member: _read_capped(archive.open(infos[member.name]))
    else:
        with tarfile.open(entry) as archive:
            members, total = {}, 0
            for count, member in enumerate(archive, 1):  # a tar has no index: checked while it is read
                total += member.size if member.isfile() else 0
                _check_totals(count, total)
                if not member.isdir():
                    members[member.name] = member
            found = [_Member(name, m.size if m.isfile() else 0,
                             _refusal(name) if m.isfile() else ("a link" if m.issym() or m.islnk() else "not a file"))
                     for name, m in sorted(members.items())]
            yield found, lambda member: _read_capped(archive.extractfile(members[member.name]))


def _zip_declared_count(path: Path) -> int | None:
    """The member count a zip's end record declares (65,535 stands for "more": zip64), or None without one."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - 65_557))  # the end record (22 bytes) and a comment of at most 65,535
        tail = handle.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return None  # zipfile will say it is not a zip
    return int.from_bytes(tail[at + 10: at + 12], "little")


def _too_many(count: int) -> str:
    return f"it holds more than {MAX_MEMBERS:,} files ({count:,} counted): submit the lesson notebooks only"


def _check_totals(count: int, total: int) -> None:
    if count > MAX_MEMBERS:
        raise ValueError(_too_many(count))
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ValueError(f"it unpacks to {total:,} bytes, more than the {MAX_UNCOMPRESSED_BYTES:,} a submission "
                         "may hold: submit the lesson notebooks only")


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
    from ..notebook import decode_text

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
    try:
        reading = _members(entry)
        try:
            found, read = next(reading)
            _choose_notebooks(submission, found, read, modules)
        finally:
            reading.close()
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError) as err:
        submission.error = f"{entry.name} could not be read: {err}"
        submission.notebooks.clear()
    submission.ignored.sort()
    return submission


def _choose_notebooks(submission: Submission, found: list[_Member], read, modules: list[CourseModule]) -> None:
    """Per module, the preferred copy of its lesson (chosen by name, then read: only that one); the rest ignored."""
    candidates: dict[str, list[tuple[str, _Member]]] = {}
    refused: dict[str, list[str]] = {}
    for member in found:
        path = _clean(member.name)
        module = _lesson_for(path, modules)
        if member.refused:
            submission.ignored.append(f"{member.name} (refused: {member.refused})")
            if module is not None:
                refused.setdefault(module.key, []).append(f"{member.name} is {member.refused}"
                                                          if member.refused.startswith("a") else
                                                          f"{member.name} has {member.refused}")
        elif module is None:
            submission.ignored.append(path)
        else:
            candidates.setdefault(module.key, []).append((path, member))
    for module in modules:
        copies = sorted(candidates.get(module.key, []), key=lambda c: _preference(c[0], module))
        if not copies:
            if module.key in refused:
                submission.problems[module.key] = f"its notebook was refused: {'; '.join(refused[module.key])}"
            continue
        path, member = copies[0]
        others = [c[0] for c in copies[1:]]
        submission.ignored.extend(others)
        try:
            if member.size > MAX_NOTEBOOK_BYTES:
                raise ValueError(f"{member.size:,} bytes, larger than {MAX_NOTEBOOK_BYTES // (1024 * 1024)} MB")
            text, note = _as_percent(read(member), path)
        except (ValueError, OSError, CourseError) as err:
            submission.problems[module.key] = f"{path}: could not be read: {err}"
            continue
        if others:
            note = "; ".join(filter(None, [note, f"other copies ignored: {', '.join(others)}"]))
        submission.notebooks[module.key] = SubmittedNotebook(module.key, text, path, note)


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
