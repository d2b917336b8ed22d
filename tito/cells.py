"""A notebook's inline tests: the notebook run as a script, one cell at a time.

    python -m tito.cells NOTEBOOK [--report FILE] [--first-failure]

Runs the cells of a jupytext percent notebook in order, in one namespace, as `python
NOTEBOOK` would run them (from the notebook's folder, `__name__ == "__main__"`, the
notebook's folder first on `sys.path`). Unlike a plain script it goes on after a cell
fails, so that one run reports every section of the lesson:

* a cell stopped by a stub (the `NotImplementedError` of a solution block nobody has
  written yet, `tito.stubs`) is *waiting* for that function: nothing to report yet;
* a cell stopped by a `NameError` for a name that an earlier failed or waiting cell would
  have made is *not run*: it shares that cell's fate;
* any other exception is a *failure*: its traceback is printed as Python prints it.

Which failure is shown first: the first section (`## ` heading) that has a failure, and in
it a failing test (a cell that calls `test_unit_*`) before any other failing cell. A worked
example that calls a student's function often runs just before its test; its crash says
less than the test's message, so the report lists the test's failure first.
`--first-failure` stops at the end of the section of the first failure (what `tito release
check` needs: the failure a student is shown first, found fast).

The report (`--report FILE`, JSON) lists the sections (the notebook's `## ` headings) with
their tests (`test_unit_*` called in a cell) and state, every failure with its traceback,
and every stub a cell waited for; `tito test` reads it. The exit status is 0 when every
cell ran, 1 otherwise.

Standard library only, and nothing imported before the notebook's first cell runs beyond
that: module 12 sets its BLAS thread count before NumPy is imported.
"""
from __future__ import annotations

import ast
import json
import re
import sys
import time
import traceback
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .stubs import waiting_label

_CELL_MARKER = re.compile(r"^# %%")
_SECTION = re.compile(r"^# ## (.+?)\s*$")
_TEST_CALL = re.compile(r"^test_unit_\w+$")


@dataclass
class Cell:
    line: int  # 1-based line of the cell's first line of code (after its `# %%` marker)
    source: str
    markdown: bool
    section: int  # index into the sections list


@dataclass
class Section:
    title: str  # "5. Masks: who may look at whom"; "" before the first heading
    line: int
    tests: list[str] = field(default_factory=list)  # test_unit_* called in its cells
    passed: list[str] = field(default_factory=list)  # ...whose cell ran to the end
    failed: list[str] = field(default_factory=list)  # tests (or "line N") whose cell failed
    waiting_for: list[str] = field(default_factory=list)  # stubs its cells stopped on
    not_run: int = 0  # cells that needed a failed cell's results

    @property
    def state(self) -> str:
        if self.failed:
            return "failed"
        if self.waiting_for:
            return "waiting"
        if self.not_run:
            return "not run"
        return "passed"


@dataclass
class Failure:
    line: int  # the cell's first line
    section: str
    section_index: int
    test: str | None  # the test_unit_* whose call failed, when the failing line called one
    error: str  # "AssertionError: ..." (the exception's last line)
    traceback: str


def read_cells(text: str) -> tuple[list[Cell], list[Section]]:
    """The notebook's cells (code and markdown) and its sections, from the percent format."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _CELL_MARKER.match(line)]
    bounds = [(0, starts[0] if starts else len(lines), False)] if (not starts or starts[0] > 0) else []
    bounds += [(s, e, "[markdown]" in lines[s]) for s, e in zip(starts, starts[1:] + [len(lines)])]
    sections = [Section("", 1)]
    cells = []
    for start, end, markdown in bounds:
        first = start + 1 if start in starts else start  # skip the marker line
        source = "".join(lines[first:end])
        if markdown:
            for offset, line in enumerate(lines[first:end]):
                heading = _SECTION.match(line)
                if heading:
                    sections.append(Section(heading.group(1), first + offset + 1))
        cells.append(Cell(first + 1, source, markdown, len(sections) - 1))
    return cells, sections


def _names_bound(tree: ast.Module) -> set[str]:
    """Names a cell binds at its top level (what later cells may need from it)."""
    names: set[str] = set()
    for node in tree.body:
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return names


def _tests_called(tree: ast.Module) -> list[str]:
    """The test_unit_* functions a cell calls at its top level, in order."""
    return [node.value.func.id for node in tree.body
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and _TEST_CALL.match(node.value.func.id)]


def _failing_test(tb: types.TracebackType | None, own_files: set[str], tests: list[str]) -> str | None:
    """The test the failing top-level line of the cell called (its frame is the cell's own)."""
    frames = [frame for frame in traceback.extract_tb(tb) if frame.filename in own_files]
    names = [frame.name for frame in frames if _TEST_CALL.match(frame.name)]
    if names:
        return names[0]
    return tests[0] if len(tests) == 1 else None


class CellRunner:
    """Runs cells in one namespace and keeps the report (see the module docstring).

    One run of one notebook; `tito.cell_variants` forks it part-way to run variants of the
    notebook from the first cell where they differ.
    """

    def __init__(self, notebook: Path, first_failure: bool, report: dict) -> None:
        self.first_failure = first_failure
        self.report = report
        self.cells, self.sections = read_cells(notebook.read_text(encoding="utf-8-sig"))
        self.namespace = types.ModuleType("__main__")  # what `python NOTEBOOK` runs in
        self.namespace.__builtins__ = __builtins__
        self.failures: list[Failure] = []
        self.waiting: list[dict] = []
        self.lost: dict[str, str] = {}  # name -> the stub its cell waited for, or "" when its cell failed
        self.own_files: set[str] = set()  # the notebook files whose frames are the cells' own
        self.enter(notebook)
        report.update({"notebook": notebook.name, "cells": sum(not c.markdown for c in self.cells), "ran": 0,
                       "stopped_early": False, "seconds": {}})

    def enter(self, notebook: Path) -> None:
        """Run as `python NOTEBOOK` from the notebook's folder (a variant switches to its own)."""
        self.notebook = notebook
        self.path = str(notebook.resolve())
        self.own_files.add(self.path)
        self.namespace.__file__ = self.path
        sys.modules["__main__"] = self.namespace
        sys.argv = [self.path]
        sys.path[0] = str(notebook.resolve().parent)

    def fill(self) -> None:
        report = self.report
        report["sections"] = [{**asdict(s), "state": s.state} for s in self.sections
                              if s.title or s.tests or s.failed or s.waiting_for]
        shown_first = sorted(self.failures, key=lambda f: (f.section_index, f.test is None, f.line))
        report["failures"] = [asdict(f) for f in shown_first]
        report["waiting"] = self.waiting
        report["tests_passed"] = sum(len(s.passed) for s in self.sections)

    def should_stop(self, cell: Cell) -> bool:
        """--first-failure: past the section of the first failure, the failure shown first is known."""
        return bool(self.first_failure and self.failures and cell.section != self.failures[0].section_index)

    def run_cells(self, start: int = 0, before: Callable[[int], None] | None = None) -> None:
        """Run the cells from index `start`; `before(index)` is called before each code cell runs."""
        try:
            for index in range(start, len(self.cells)):
                cell = self.cells[index]
                if self.should_stop(cell):
                    self.report["stopped_early"] = True
                    break
                if cell.markdown or not cell.source.strip():
                    continue
                if before:
                    before(index)
                self.run_cell(cell)
        finally:
            self.fill()
            sys.stdout.flush()

    def run_cell(self, cell: Cell) -> None:
        section = self.sections[cell.section]
        padded = "\n" * (cell.line - 1) + cell.source  # tracebacks and inspect see the file's own lines
        names: set[str] = set()
        tests: list[str] = []
        started = time.perf_counter()
        try:
            tree = ast.parse(padded, self.path)
            names, tests = _names_bound(tree), _tests_called(tree)
            section.tests.extend(tests)
            exec(compile(tree, self.path, "exec"), self.namespace.__dict__)
        except Exception as err:  # KeyboardInterrupt (a timeout) and SystemExit end the run
            self.failed(cell, err, names, tests)
            return
        finally:
            self.report["seconds"][cell.line] = round(time.perf_counter() - started, 3)
            self.report["ran"] += 1
            self.fill()
        section.passed.extend(tests)

    def failed(self, cell: Cell, err: Exception, names: set[str], tests: list[str]) -> None:
        section = self.sections[cell.section]
        stub = waiting_label(err, self.notebook.resolve().parent.name)
        missing = err.name if isinstance(err, NameError) else None
        if stub is None and missing in self.lost:
            stub = self.lost[missing] or None
            if stub is None:  # it needed what a failed cell would have made
                section.not_run += 1
                self.lost.update(dict.fromkeys(names, ""))
                return
        if stub is not None:
            if stub not in section.waiting_for:
                section.waiting_for.append(stub)
            self.waiting.append({"stub": stub, "line": cell.line, "section": section.title})
            print(f"[tito] the cell at line {cell.line} waits for {stub} (not written yet)", flush=True)
            self.lost.update(dict.fromkeys(names, stub))
            return
        tb = err.__traceback__.tb_next if err.__traceback__ is not None else None  # not the exec line
        text = "".join(traceback.format_exception(type(err), err, tb))
        print(text, end="", file=sys.stderr, flush=True)
        test = _failing_test(tb, self.own_files, tests)
        section.failed.append(test or f"line {cell.line}")
        last = [line for line in text.splitlines() if line.strip() and not line.startswith(" ")]
        self.failures.append(Failure(cell.line, section.title, cell.section, test,
                                     last[-1] if last else type(err).__name__, text))
        self.lost.update(dict.fromkeys(names, ""))


def run(notebook: Path, first_failure: bool = False, report: dict | None = None) -> dict:
    """Run the notebook's code cells; fill and return `report` (see the module docstring).

    `report` is filled as the cells run, so a run stopped by Ctrl-C (a timeout) still has one.
    """
    report = {} if report is None else report
    CellRunner(notebook, first_failure, report).run_cells()
    return report


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    first_failure = "--first-failure" in args
    report_path = None
    if "--report" in args:
        at = args.index("--report")
        report_path = args[at + 1]
        del args[at:at + 2]
    args = [a for a in args if a != "--first-failure"]
    if len(args) != 1:
        print("usage: python -m tito.cells NOTEBOOK [--report FILE] [--first-failure]", file=sys.stderr)
        return 2
    report: dict = {}
    try:
        run(Path(args[0]), first_failure, report)
    finally:
        if report_path and report:
            Path(report_path).write_text(json.dumps(report, ensure_ascii=False), encoding="utf-8")
    return 1 if report.get("failures") or report.get("waiting") else 0


if __name__ == "__main__":
    sys.exit(main())
