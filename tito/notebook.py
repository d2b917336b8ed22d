"""Reading a module notebook and rewriting its solution blocks.

A notebook is a jupytext percent-format `.py` file.  Students write their code
between `### BEGIN SOLUTION` and `### END SOLUTION`; this file finds those blocks,
checks them, and turns them into stubs for the student edition.
"""
from __future__ import annotations

import codecs
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import jupytext

from . import stubs
from .course import CourseError

BEGIN_MARKER = "### BEGIN SOLUTION"
END_MARKER = "### END SOLUTION"
STUB_LINE = "raise NotImplementedError("  # how every stub body starts
_MARKER_LINE = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")
_DEF_LINE = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")
# `@patch def sum(self: Tensor, ...)` (fastcore) adds a method to a class from outside it.
_PATCHED_METHOD = re.compile(r"^(?:async\s+)?def\s+[A-Za-z_][A-Za-z0-9_]*\s*\(\s*self\s*:\s*([A-Za-z_][A-Za-z0-9_]*)")


class NotebookError(CourseError):
    """A notebook that cannot be exported as it is; the message names file and line."""


@dataclass(frozen=True)
class SolutionBlock:
    begin_line: int  # 1-based line of `### BEGIN SOLUTION`
    end_line: int  # 1-based line of `### END SOLUTION`
    indent: str
    owner: str  # the qualified name of the function the block sits in, e.g. "Tensor.__add__"


def decode_text(data: bytes, path: Path) -> str:
    """UTF-8 text of a file's bytes (a leading byte-order mark is dropped, as Python itself does).

    A byte that is not UTF-8 is a NotebookError naming the file, the line and the byte offset,
    so one badly saved file is reported as itself and breaks nothing else.
    """
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise NotebookError(
            f"{path}:{line}: byte 0x{data[err.start]:02X} at offset {err.start} (line {line}, column "
            f"{column}) is not UTF-8. The file was saved in another encoding (often Latin-1 or "
            "Windows-1252): open it in your editor, retype that character and save the file as UTF-8."
        ) from None


def read_text(path: Path) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise NotebookError(f"{path}: cannot read the file ({err.strerror}).") from err
    return decode_text(data, path)


def find_solution_blocks(text: str, path: Path) -> list[SolutionBlock]:
    """Every solution block, checked: balanced, not nested, inside a function body."""
    blocks: list[SolutionBlock] = []
    lines = text.splitlines()
    open_at: int | None = None
    for number, line in enumerate(lines, start=1):
        match = _MARKER_LINE.match(line)
        if not match:
            if BEGIN_MARKER in line or END_MARKER in line:
                raise NotebookError(
                    f"{path}:{number}: a solution marker must stand alone on its line: {line.strip()!r}"
                )
            continue
        if match.group(1) == "BEGIN":
            if open_at is not None:
                raise NotebookError(
                    f"{path}:{number}: `{BEGIN_MARKER}` inside the block opened at line {open_at}; "
                    "solution blocks cannot be nested: close the first one with "
                    f"`{END_MARKER}`."
                )
            open_at = number
            continue
        if open_at is None:
            raise NotebookError(
                f"{path}:{number}: `{END_MARKER}` without a matching `{BEGIN_MARKER}` above it."
            )
        begin_text = lines[open_at - 1]
        indent = begin_text[: len(begin_text) - len(begin_text.lstrip())]
        if line[: len(line) - len(line.lstrip())] != indent:
            raise NotebookError(
                f"{path}:{number}: `{END_MARKER}` is indented differently from its "
                f"`{BEGIN_MARKER}` at line {open_at}."
            )
        owner = _enclosing_function(lines, open_at - 1, indent)
        if owner is None:
            raise NotebookError(
                f"{path}:{open_at}: solution block outside a function body; the student edition "
                "keeps the signature and replaces only a function's body, so move the block into "
                "a function or method."
            )
        blocks.append(SolutionBlock(open_at, number, indent, owner))
        open_at = None
    if open_at is not None:
        raise NotebookError(f"{path}:{open_at}: `{BEGIN_MARKER}` is never closed by `{END_MARKER}`.")
    return blocks


def function_head(text: str, block: SolutionBlock) -> tuple[int, int]:
    """(first line, last line), 1-based, of the decorators and `def` line of the function whose body
    holds `block`: how the student's function is compiled (`@kernel(fastmath=...)`) is theirs to
    change as well as its body."""
    lines = text.splitlines()
    level = len(block.indent)
    for index in range(block.begin_line - 2, -1, -1):
        line = lines[index]
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#") or len(line) - len(stripped) >= level:
            continue
        if not _DEF_LINE.match(line) or _DEF_LINE.match(line).group(2) != "def":
            level = len(line) - len(stripped)  # a line of a multi-line signature: keep looking up
            continue
        first = index
        while first > 0 and lines[first - 1].strip().startswith("@"):
            first -= 1
        return first + 1, index + 1
    return block.begin_line, block.begin_line  # not reached: find_solution_blocks checked the def


def _enclosing_function(lines: list[str], index: int, indent: str) -> str | None:
    """Qualified name of the innermost `def` around line `index` (e.g. "Tensor.sum"), or None.

    Walks upwards: each statement indented less than the current level opens the
    enclosing scope; `def` and `class` lines among them give the qualified name.
    """
    scopes: list[tuple[str, str]] = []  # (kind, name), innermost first
    level = len(indent)
    for line in reversed(lines[:index]):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        line_level = len(line) - len(stripped)
        if line_level >= level:
            continue
        match = _DEF_LINE.match(line)
        if match:
            scopes.append((match.group(2), match.group(3)))
            patched = _PATCHED_METHOD.match(line)
            if line_level == 0 and patched:  # a patched method is named after its class: Tensor.sum
                scopes.append(("class", patched.group(1)))
        level = line_level
        if level == 0:
            break
    if not scopes or scopes[0][0] != "def":
        return None
    return ".".join(name for _, name in reversed(scopes))


def stub_message(block: SolutionBlock, notebook_relpath: str, module_key: str) -> str:
    """What a stub raises (`tito.stubs` keeps the wording, which `tito test` recognises)."""
    return stubs.stub_message(block.owner, notebook_relpath, module_key)


def is_stub_body(body: list[str]) -> bool:
    """True when a solution block's lines hold nothing but the stub's `raise NotImplementedError(...)`."""
    code = [line.strip() for line in body if line.strip()]
    return len(code) == 1 and code[0].startswith(STUB_LINE)


@dataclass(frozen=True)
class Progress:
    """How far a student got in one notebook, read from its solution blocks."""

    blocks: int
    stubs_left: int  # blocks that still hold only their stub
    solution_lines: int  # non-blank lines written in the blocks that are no longer stubs
    stubs: tuple[SolutionBlock, ...] = ()  # the blocks still to write, in notebook order

    @property
    def next_stub(self) -> SolutionBlock | None:
        return self.stubs[0] if self.stubs else None

    @property
    def not_started(self) -> bool:
        return self.blocks > 0 and self.stubs_left == self.blocks


def solution_progress(text: str, path: Path) -> Progress:
    """Stubs left and solution lines written; raises NotebookError when the markers are broken."""
    lines = text.splitlines()
    blocks = find_solution_blocks(text, path)
    left, written = [], 0
    for block in blocks:
        body = lines[block.begin_line : block.end_line - 1]
        if is_stub_body(body):
            left.append(block)
        else:
            written += sum(1 for line in body if line.strip())
    return Progress(len(blocks), len(left), written, tuple(left))


def stub_text(text: str, path: Path, notebook_relpath: str, module_key: str) -> str:
    """The notebook with every solution block's body replaced by a NotImplementedError stub.

    The markers stay, so a student sees where to write and `tito module reset` can
    find the blocks again in the student's own copy.
    """
    blocks = find_solution_blocks(text, path)
    lines = text.splitlines()
    out: list[str] = []
    cursor = 0
    for block in blocks:
        out.extend(lines[cursor : block.begin_line])  # up to and including BEGIN
        message = stub_message(block, notebook_relpath, module_key)
        out.append(f"{block.indent}raise NotImplementedError({message!r})")
        cursor = block.end_line - 1  # END marker onwards
    out.extend(lines[cursor:])
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def strip_markers(source: str) -> str:
    """Cell source without the solution-marker lines (what the package receives)."""
    return "\n".join(l for l in source.split("\n") if not _MARKER_LINE.match(l))


def check_syntax(text: str, path: Path) -> None:
    """A percent notebook is a Python script: compile it whole to get exact line numbers."""
    try:
        compile(text, str(path), "exec")
    except SyntaxError as err:
        raise NotebookError(f"{path}:{err.lineno}: syntax error: {err.msg}") from err


def read_notebook(text: str, path: Path):
    """The notebook as nbformat, cell ids derived from content so exports are reproducible."""
    try:
        nb = jupytext.reads(text, fmt="py:percent")
    except Exception as err:  # jupytext raises several types; all mean "not a notebook"
        raise NotebookError(f"{path}: jupytext cannot read it as a percent notebook: {err}") from err
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        count = seen.get(digest, 0)
        seen[digest] = count + 1
        cell["id"] = digest if count == 0 else f"{digest}-{count}"
    return nb
