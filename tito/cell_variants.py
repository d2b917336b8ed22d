"""Variants of one notebook run from where they differ: one run of the shared beginning.

    python -m tito.cell_variants NOTEBOOK PLAN.json

`tito release check` makes every catalogued mistake in its own copy of the course and needs
the failure `tito test` shows first (`tito.cells --first-failure`). Each mistake changes a
cell or two; the cells before the first changed one are the reference's, and running them
again for every mistake (a module's training runs and measurements, 70 times) was most of
the check's time. Here the reference notebook runs once, cell by cell (`tito.cells`); just
before the first cell where a variant differs, the process forks, and the child runs the
variant's own cells from there, from the variant's folder (with any file the shared cells
wrote in the reference's folder copied there), exactly as `tito.cells --first-failure` would
have continued. The parent waits for it, then goes on.

A variant is run this way only when that is the same as running it from the top; otherwise
its report says `"forked": false` and why, and the caller runs it the usual way:

* the notebooks must have the same sections (a child goes on counting the tests the
  shared cells passed), and the shared cells must have run without a failure or a stub;
* a cell that imports the notebook's own package module (`own_modules` in the plan) would
  get the reference's export, not the variant's: a child that ends with one imported says so;
* a child that hangs past `timeout_s` is killed; the usual run will name where it hung.
* a cell that calls `sys.exit` (or an error of the runner itself) ends the child without a
  report a run from the top would give: the usual run reports it.

PLAN.json: {"own_modules": [...], "timeout_s": 300, "variants": [{"notebook": PATH,
"report": PATH, "output": PATH}, ...]}. Each report is `tito.cells`'s report plus `forked`,
`reason` (when not forked) and `seconds_wall`; `output` gets what the child printed.

Standard library only, like `tito.cells`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from .cells import Cell, CellRunner, Section, read_cells

WAIT_STEP_S = 0.02


def first_difference(ref_cells: list[Cell], ref_sections: list[Section], cells: list[Cell],
                     sections: list[Section]) -> tuple[int | None, str]:
    """(index of the first cell that differs, "") or (None, why the variant cannot share the beginning)."""
    if [s.title for s in sections] != [s.title for s in ref_sections]:
        return None, "its sections differ from the reference's"
    for index, (ref, cell) in enumerate(zip(ref_cells, cells)):
        if (ref.source, ref.markdown, ref.line, ref.section) != (cell.source, cell.markdown, cell.line, cell.section):
            return index, ""
    if len(cells) == len(ref_cells):
        return None, "it is the reference notebook"
    return min(len(cells), len(ref_cells)), ""


def _write_json(path: str, data: dict) -> None:
    Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime in ns)} of the files under `folder`."""
    state = {}
    for path in folder.rglob("*"):
        if path.is_file():
            info = path.stat()
            state[path.relative_to(folder).as_posix()] = (info.st_size, info.st_mtime_ns)
    return state


def carry_files(source: Path, before: dict[str, tuple[int, int]], dest: Path, skip: set[str]) -> None:
    """Copy the files the shared cells wrote or changed in `source` (the reference's folder) into
    `dest` (the variant's): from the top, the variant's own run would have written them there."""
    for relative, state in folder_state(source).items():
        if relative not in skip and before.get(relative) != state:
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relative, target)


def _run_child(runner: CellRunner, variant: dict, cells: list[Cell], sections: list[Section], start: int,
               own_modules: list[str], folder_before: dict[str, tuple[int, int]]) -> None:
    """In the forked child: the variant's cells from `start`, its report written; never returns."""
    code = 3
    try:
        output = os.open(variant["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(output, 1)
        os.dup2(output, 2)
        notebook = Path(variant["notebook"])
        carry_files(runner.notebook.resolve().parent, folder_before, notebook.resolve().parent, {notebook.name})
        os.chdir(notebook.resolve().parent)
        # The shared cells' tests and results carry over to the variant's own sections.
        runner.sections = [replace(section, tests=list(old.tests), passed=list(old.passed), failed=list(old.failed),
                                   waiting_for=list(old.waiting_for), not_run=old.not_run)
                           for section, old in zip(sections, runner.sections)]
        runner.cells = cells
        runner.first_failure = True
        runner.report["notebook"] = notebook.name
        runner.report["cells"] = sum(not c.markdown for c in cells)
        runner.enter(notebook)
        runner.run_cells(start)
        code = 1 if runner.failures or runner.waiting else 0
    except BaseException:  # noqa: BLE001 - a cell's sys.exit, or the runner itself: run it from the top instead
        traceback.print_exc()
    finally:
        try:
            imported = sorted(name for name in own_modules if name in sys.modules)
            report = {**runner.report, "forked": True, "exit_code": code}
            if code == 3:
                report.update(forked=False, reason="the run ended in a way only a run from the top reports "
                                                   "(a cell's sys.exit, or an error of the runner)")
            elif imported:
                report.update(forked=False, reason=f"a cell imported {', '.join(imported)}, the notebook's own "
                                                   "package module (the reference's export, not the variant's)")
            sys.stdout.flush()
            sys.stderr.flush()
            _write_json(variant["report"], report)
        finally:
            os._exit(code)


def _wait(pid: int, timeout_s: float) -> bool:
    """Wait for the child; False (and the child killed) past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(WAIT_STEP_S)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def serve(reference: Path, plan: dict) -> int:
    """Run the reference once, forking each variant where it first differs (see the module docstring)."""
    folder_before = folder_state(reference.resolve().parent)
    runner = CellRunner(reference, first_failure=False, report={})
    own_modules = list(plan.get("own_modules", []))
    timeout_s = float(plan.get("timeout_s", 300))
    pending: list[tuple[int, dict, list[Cell], list[Section]]] = []
    for variant in plan["variants"]:
        cells, sections = read_cells(Path(variant["notebook"]).read_text(encoding="utf-8-sig"))
        start, reason = first_difference(runner.cells, runner.sections, cells, sections)
        if start is None:
            _write_json(variant["report"], {"forked": False, "reason": reason})
        else:
            pending.append((start, variant, cells, sections))
    pending.sort(key=lambda item: item[0])

    def fork_due(index: int) -> None:
        """Before code cell `index` runs: fork every variant that differs at or before it."""
        while pending and pending[0][0] <= index:
            start, variant, cells, sections = pending.pop(0)
            if runner.failures or runner.waiting:
                _write_json(variant["report"], {"forked": False, "reason": "a shared cell failed in the reference"})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            started = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                _run_child(runner, variant, cells, sections, start, own_modules, folder_before)
            finished = _wait(pid, timeout_s)
            seconds = round(time.perf_counter() - started, 3)
            try:
                report = json.loads(Path(variant["report"]).read_text(encoding="utf-8")) if finished else None
            except (OSError, ValueError):
                report = None
            if report is None:
                why = f"it ran past {timeout_s:.0f} s" if not finished else "the child wrote no report"
                report = {"forked": False, "reason": why}
            _write_json(variant["report"], {**report, "seconds_wall": seconds})

    runner.run_cells(0, before=fork_due)
    fork_due(len(runner.cells))  # variants that differ only after the last code cell
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m tito.cell_variants NOTEBOOK PLAN.json", file=sys.stderr)
        return 2
    plan = json.loads(Path(args[1]).read_text(encoding="utf-8"))
    return serve(Path(args[0]), plan)


if __name__ == "__main__":
    sys.exit(main())
