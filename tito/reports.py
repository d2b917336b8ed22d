"""Reading what a test run printed: the first failure in full, and where a run that hung was.

Everything here works on text (the captured output of a notebook script, of pytest, of a
Jupyter kernel) and returns whole lines, free of colour codes, so the CLI can show a
student one failure at a time.
"""
from __future__ import annotations

import re
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_RULE = re.compile(r"^([=_-])\1{2,} (.*?) \1{2,}$")
_BLOCK_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")
_SECTION = re.compile(r"^={3,} (.+?) ={3,}$")
_SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) (\S+)")
_FRAME = re.compile(r'^\s*File "(.+?)", line (\d+), in (.+)$')
_CELL = re.compile(r"^# %%")


def strip_ansi(text: str) -> str:
    """Text without terminal colour and cursor codes (IPython colours every traceback)."""
    return _ANSI.sub("", text)


def tidy_rules(text: str, width: int = 80) -> str:
    """pytest's section rules (`==== FAILURES ====`), drawn for a wide terminal, redrawn `width` wide."""
    lines = []
    for line in text.splitlines():
        match = _RULE.match(line)
        if match and len(line) > width:
            title = f" {match.group(2)} "
            fill = max(width - len(title), 6)
            line = match.group(1) * (fill // 2) + title + match.group(1) * (fill - fill // 2)
        lines.append(line)
    return "\n".join(lines)


def first_pytest_failure(output: str) -> tuple[str, str] | None:
    """(test id, its report) of the first failure or error in pytest's `--tb=short` output.

    The report is the whole block pytest printed for that test (its short traceback and
    the assertion), without the section rules.
    """
    lines = strip_ansi(output).splitlines()
    nodeid = next((m.group(2) for m in map(_SUMMARY_LINE.match, lines) if m), None)
    start = next((i for i, line in enumerate(lines)
                  if _SECTION.match(line) and _SECTION.match(line).group(1) in ("FAILURES", "ERRORS")), None)
    if start is None:
        return None
    header = next((i for i in range(start + 1, len(lines)) if _BLOCK_HEADER.match(lines[i])), None)
    if header is None:
        return None
    end = next((i for i in range(header + 1, len(lines))
                if _BLOCK_HEADER.match(lines[i]) or _SECTION.match(lines[i])), len(lines))
    title = _BLOCK_HEADER.match(lines[header]).group(1)
    body = "\n".join(lines[header + 1 : end]).strip("\n")
    return nodeid or title, body


def last_traceback(output: str) -> str | None:
    """The last Python traceback a script printed (from "Traceback" to the end), whole lines."""
    lines = strip_ansi(output).rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    return "\n".join(lines[starts[-1]:])


def error_line(traceback: str) -> str:
    """The exception line that ends a traceback, e.g. "AssertionError: sum must keep the dtype"."""
    lines = [line for line in traceback.splitlines() if line.strip() and not line.startswith(" ")]
    return lines[-1].strip() if lines else ""


def cell_number(text: str, line: int) -> int:
    """The 1-based number of the `# %%` cell that holds 1-based `line` of a percent notebook."""
    return sum(1 for l in text.splitlines()[:line] if _CELL.match(l)) or 1


def where_in_notebook(output: str, notebook: Path) -> str | None:
    """Where a traceback (printed when the script was stopped) was inside `notebook`.

    Names the test that was running when there is one, then the innermost function, e.g.
    "test_unit_sum at sum_dev.py line 41 (cell 7), inside Tensor.sum at line 12" or
    "sum_dev.py line 30 (cell 5)".
    """
    frames = [(int(m.group(2)), m.group(3).strip()) for m in map(_FRAME.match, output.splitlines())
              if m and Path(m.group(1)).name == notebook.name]
    if not frames:
        return None
    try:
        text = notebook.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""

    def at(line: int) -> str:
        return f"{notebook.name} line {line}" + (f" (cell {cell_number(text, line)})" if text else "")

    tests = [(line, name) for line, name in frames if name.startswith("test")]
    inner_line, inner_name = frames[-1]
    if tests:
        line, name = tests[-1]
        inside = f", inside {inner_name} at line {inner_line}" if (line, name) != frames[-1] else ""
        return f"{name} at {at(line)}{inside}"
    return at(inner_line) + (f" in {inner_name}" if inner_name != "<module>" else "")
