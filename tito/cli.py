"""The `tito` command line: argument parsing and printing only.

Each command is a thin wrapper over a function in a small module of this package
(`export.py`, `testing.py`, `status.py`, `reset.py`, `release.py`, `doctor.py`,
`programs.py`; the package `grading/` for `tito grade` and `tito olympics judge`); tests call
those functions directly. Every command finds the course from the current folder upwards, so it
works anywhere inside the repository.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .course import (CourseError, CourseModule, Settings, list_modules, load_settings, resolve_module,
                     resolve_modules)

if TYPE_CHECKING:
    from .release import Check
    from .testing import RunRecord, TestOptions

console = Console(soft_wrap=True)  # long lines stay whole (a terminal wraps them itself; a log keeps them)


def _mark(ok: bool, yes: str = "yes", no: str = "no") -> str:
    return f"[green]{yes}[/]" if ok else f"[red]{no}[/]"


def _rel(path: Path) -> str:
    """A path as the user should read it: relative to where they are when that is shorter."""
    relative = os.path.relpath(path, Path.cwd())
    return relative if len(relative) < len(str(path)) else str(path)


# ---------------------------------------------------------------------------- the course


def _course() -> Settings:
    """The course around the current folder; an export a kill interrupted is finished or rolled back first."""
    from .export import recover_export

    settings = load_settings()
    done = recover_export(settings)
    if done:
        console.print(f"[yellow]Note:[/] {escape(done)}")
    return settings


def _plain(text: str) -> None:
    """Program output as it is: no markup, no highlighting, no re-wrapping of long lines."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _warn_ipynb(settings: Settings, modules: list[CourseModule]) -> None:
    from .export import newer_ipynb

    for module in modules:
        for copy in newer_ipynb(module):
            console.print(f"[yellow]Warning:[/] {escape(_rel(copy))} was saved after {module.notebook.name}. "
                          f"tito exports {module.notebook.name}, so edits made in the .ipynb are not in the "
                          "package: copy them into the .py (and open the .py itself in Jupyter, as the README "
                          "shows).", highlight=False)


# ---------------------------------------------------------------------------- export


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export_modules

    settings = _course()
    if not args.all and not args.modules:
        raise CourseError("Name a module (e.g. `tito export 01_tensor`) or use `tito export --all`.")
    modules = resolve_modules(settings, None if args.all else args.modules)
    _warn_ipynb(settings, modules)
    with console.status(f"Exporting {len(modules)} notebook(s) with nbdev..."):
        results = export_modules(settings, modules)
    for result in results:
        state = "[green]updated[/]" if result.changed else "[dim]unchanged[/]"
        where = result.path.relative_to(settings.root)
        console.print(f"  {result.module.key} → {settings.lib_name}.{result.target} ({where}) {state}")
    console.print(f"[bold green]Exported {len(results)} module(s).[/]")
    return 0


# ---------------------------------------------------------------------------- test


_VERDICT_STYLE = {"passed": "[green]passed[/]", "failed": "[bold red]FAILED[/]",
                  "not started": "[yellow]not started[/]", "does not export": "[bold red]does not export[/]",
                  "not run": "[yellow]not run[/]", "in progress": "[yellow]in progress[/]"}
_PART_NAMES = {"inline": "inline tests", "pytest": "pytest", "notebook": "notebook (Jupyter kernel)"}
_SECTION_MARKS = {"passed": "[green]✓[/]", "failed": "[bold red]✗[/]", "waiting": "[yellow]…[/]",
                  "not run": "[yellow]-[/]"}


def _part_summary(name: str, part) -> str:
    """A part's one-line result; a notebook's error is left to the failure shown below it."""
    if part.failed and name == "notebook" and not part.summary.startswith(("timed out", "not run")):
        return "failed"
    return part.summary or part.status


def _run_line(run: RunRecord) -> str:
    """One line per module: its verdict and each part's one-line summary."""
    verdict = _VERDICT_STYLE.get(run.verdict, run.verdict)
    if run.state in ("not started", "not run"):
        return f"  {run.name}: {verdict}: {escape(run.note)}"
    if run.state == "does not export":
        return f"  {run.name}: {verdict}"
    stubs = f" ({run.stubs_left} stub{'s' if run.stubs_left != 1 else ''} left)" if run.stubs_left else ""
    parts = "; ".join(f"{_PART_NAMES.get(n, n)} {escape(_part_summary(n, p))}" for n, p in run.parts.items())
    return f"  {run.name}: {verdict}{stubs}: {parts} ({run.seconds:.1f} s)"


def _section_line(section: dict) -> str:
    """One line per section of the lesson: ✓ passed, ✗ failed, … waiting for a stub."""
    state = section["state"]
    mark = _SECTION_MARKS.get(state, state)
    tests = section["tests"]
    if state == "failed":
        what = "failed: " + ", ".join(section["failed"])
    elif state == "waiting":
        what = "waiting for " + ", ".join(section["waiting_for"])
    elif state == "not run":
        what = "not run: it needs what a failed cell would have made"
    else:
        what = f"{len(tests)} test{'s' if len(tests) != 1 else ''} passed"
    return f"    {mark} {escape(section['title'] or '(before the first section)')}: {escape(what)}"


def _show_progress(run: RunRecord) -> None:
    """While stubs are left: which sections pass, which wait, and the next stub to write."""
    for section in run.sections:
        if section["tests"] or section["failed"]:
            console.print(_section_line(section), highlight=False)
    if run.next_stub:
        console.print(f"    Next stub: [bold]{escape(run.next_stub)}[/]", highlight=False)
    from .stubs import label_module

    earlier = sorted({m for s in run.sections for label in s["waiting_for"] if (m := label_module(label))})
    if earlier:
        console.print(f"    [yellow]These tests need stubs of {escape(', '.join(earlier))} that are not written yet:[/] "
                      f"write them first (`tito test {escape(earlier[0])}` shows the next one).", highlight=False)


def _show_failure(run: RunRecord, verbose: bool, command: str) -> None:
    """The first failure in full (`shown_failure`); then how many more, and the command that shows them all."""
    from .testing import shown_failure

    if run.state == "does not export":
        _plain(run.note)
        return
    if verbose:
        from .reports import tidy_rules

        for name, part in run.parts.items():
            console.rule(f"{run.name}: {_PART_NAMES.get(name, name)}: everything it printed")
            _plain(tidy_rules(part.output or part.detail, console.width))
        return
    shown = shown_failure(run)
    if shown is None:
        return
    name, first = shown
    console.rule(f"{run.name}: first failure ({_PART_NAMES.get(name, name)})", style="red")
    _plain(first.detail or first.summary)
    counts = {n: p.failures for n, p in run.parts.items() if p.failed}
    counts[name] -= 1
    others = sum(counts.values())
    where = ", ".join(f"{n} {_PART_NAMES.get(p, p)}" for p, n in counts.items() if n)
    more = f"{others} more failure{'s' if others != 1 else ''} in {run.name} ({where}); " if others > 0 else ""
    console.rule(style="red")
    console.print(f"{more}`{command}` shows everything.", highlight=False, markup=False)


def _run_tests_with_progress(settings: Settings, modules: list[CourseModule], options: TestOptions,
                             include_extra: bool, show_failures: bool = True, jobs: int = 1) -> list[RunRecord]:
    from .testing import run_tests

    verbose = "-v" in options.pytest_args
    with console.status("Testing...") as spinner:
        def progress(name: str, what: str) -> None:
            spinner.update(f"[bold]{name}[/]: {escape(what)}...")

        def finished(run: RunRecord) -> None:
            console.print(_run_line(run), highlight=False)
            if run.note and run.state not in ("not started", "not run", "does not export"):
                console.print(f"    [yellow]Note:[/] {escape(run.note)}", highlight=False)
            if show_failures and (run.stubs_left or run.in_progress) and not run.state:
                _show_progress(run)  # also when this module is written but waits for an earlier one's stub
            if show_failures and (not run.passed and run.state in ("", "does not export") or verbose):
                is_module = run.name in {m.key for m in modules}
                command = (f"tito test {run.name}{' --notebook' if options.notebook else ''} -v" if is_module
                           else f"python -m pytest {run.name}  (from {_rel(settings.root) or '.'})")
                _show_failure(run, verbose, command)

        return run_tests(settings, modules, options=options, include_extra=include_extra,
                         progress=progress, finished=finished, jobs=jobs)


def _summary_line(runs: list[RunRecord]) -> tuple[str, bool]:
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.verdict] = counts.get(run.verdict, 0) + 1
    # The plain "N passed, N failed" form that CI systems read, then what else there was.
    failed = counts.get("failed", 0) + counts.get("does not export", 0)
    text = f"Summary: {counts.get('passed', 0)} passed, {failed} failed"
    for state in ("in progress", "not started", "not run"):
        if counts.get(state):
            text += f", {counts[state]} {state}"
    return text, all(run.passed for run in runs)


def _keep_damaged_results(settings: Settings) -> None:
    """A results file tito cannot read is renamed aside (and said so) before new results are written."""
    from .testing import keep_damaged_results

    kept = keep_damaged_results(settings)
    if kept:
        path, problem = kept
        console.print(f"[yellow]Warning:[/] {escape(problem)}. It is kept as {escape(_rel(path))}; "
                      "the results of this run start a new file.", highlight=False)


def cmd_test(args: argparse.Namespace) -> int:
    from .testing import TestOptions, results_path

    settings = _course()
    timeout_s = None if args.timeout is None else args.timeout * 60
    if timeout_s is not None and not 0 < timeout_s < float("inf"):  # NaN or inf would switch the limit off
        raise CourseError(f"--timeout takes a positive number of minutes, e.g. --timeout 5 (found {args.timeout}).")
    if args.jobs < 1:
        raise CourseError(f"--jobs takes a positive number, e.g. --jobs 2 (found {args.jobs}).")
    _keep_damaged_results(settings)
    everything = args.all or not args.modules
    modules = list_modules(settings) if everything else resolve_modules(settings, args.modules)
    _warn_ipynb(settings, modules)
    options = TestOptions(notebook=args.notebook, timeout_s=timeout_s,
                          pytest_args=tuple(flag for flag, on in (("-x", args.x), ("-v", args.verbose)) if on))
    runs = _run_tests_with_progress(settings, modules, options, include_extra=everything, jobs=args.jobs)
    not_started = [run for run in runs if run.state == "not started"]
    if not_started and len(not_started) == len([r for r in runs if r.name in {m.key for m in modules}]):
        first = not_started[0].name.split("_", 1)[0]
        console.print(f"Nothing written yet: start with {not_started[0].name} (open its notebook, write the "
                      f"first stub, then `tito export {first}` and `tito test {first}`).", highlight=False)
    console.print(f"[dim]Recorded in {_rel(results_path(settings))}[/]")
    summary, ok = _summary_line(runs)
    console.print(f"[bold {'green' if ok else 'red'}]{summary}[/]", highlight=False)
    return 0 if ok else 1


# ---------------------------------------------------------------------------- status


def cmd_status(args: argparse.Namespace) -> int:
    from .status import course_status, missing_notebooks
    from .testing import TestOptions

    settings = _course()
    if args.run:
        _keep_damaged_results(settings)
        runs = _run_tests_with_progress(settings, list_modules(settings), TestOptions(), include_extra=False,
                                        show_failures=False)
        console.print(_summary_line(runs)[0], highlight=False)
    with console.status("Checking each module against its notebook..."):
        rows = course_status(settings)
        missing = missing_notebooks(settings)
    table = Table(title=f"{settings.lib_name} {settings.version}: status")
    for column in ("module", "exported", "in sync", "stubs", "tests (last recorded run)"):
        table.add_column(column)
    for row in rows:
        tests = escape(row.tests)
        if row.last_run is not None:
            colour = "green" if row.last_run.passed and not row.notebook_changed else (
                "yellow" if row.last_run.passed or row.last_run.in_progress or row.last_run.state == "not started"
                else "red")
            tests = f"[{colour}]{tests}[/]"
        table.add_row(row.module.key, _mark(row.exported), _mark(row.in_sync, no=escape(row.sync_detail)),
                      escape(row.stubs), tests)
    for gone in missing:
        table.add_row(gone.key, "[red]notebook missing[/]", "-", "-", "-")
    console.print(table)
    for row in rows:
        for copy in row.newer_ipynb:
            console.print(f"[yellow]Warning:[/] {escape(_rel(copy))} is newer than {row.module.notebook.name}: "
                          "tito exports the .py, so edits made in the .ipynb are not in the package.",
                          highlight=False)
    from .testing import results_problem

    problem = results_problem(settings)
    if problem:
        console.print(f"[yellow]Warning:[/] {escape(problem)}. The test column shows no results; the next "
                      "`tito test` keeps the damaged file beside it (renamed) and starts a new one.", highlight=False)
    for gone in missing:
        console.print(f"[yellow]Warning:[/] {escape(gone.advice(settings))}", highlight=False)
    return 0


# ---------------------------------------------------------------------------- module reset


def _backup_advice(settings: Settings, module: CourseModule) -> None:
    from .reset import list_backups, newest_with_work

    backups = list_backups(settings, module)
    number = newest_with_work(backups)
    if number is None:
        if backups:
            console.print("None of the backups holds solution code.")
        return
    backup = backups[number - 1]
    when = backup.saved_at.astimezone().strftime("%Y-%m-%d %H:%M") if backup.saved_at else "?"
    console.print(f"Bring your work back with `tito module reset {module.key} --restore {number}` "
                  f"(saved {when}, {backup.holds}).", highlight=False, markup=False)


def _saved(path: Path) -> None:
    from .reset import describe_backup

    console.print(f"Saved your notebook to [bold]{escape(_rel(path))}[/] ({describe_backup(path).holds}).",
                  soft_wrap=True, highlight=False)


def _backup_table(settings: Settings, module: CourseModule) -> None:
    from .reset import list_backups

    backups = list_backups(settings, module)
    if not backups:
        console.print(f"No backups of {module.key} yet.")
        return
    table = Table(title=f"Backups of {module.key} (newest first)")
    for column in ("#", "saved", "holds", "file"):
        table.add_column(column, justify="right" if column == "#" else "left",
                         overflow="fold" if column == "file" else "ellipsis")
    for number, backup in enumerate(backups, start=1):
        when = backup.saved_at.astimezone().strftime("%Y-%m-%d %H:%M:%S") if backup.saved_at else "?"
        table.add_row(str(number), when, escape(backup.holds), escape(_rel(backup.path)))
    console.print(table)
    console.print(f"Restore one with `tito module reset {module.key} --restore N`.", markup=False, highlight=False)


def cmd_module_reset(args: argparse.Namespace) -> int:
    from .reset import find_backup, module_for_restore, reset_module, restore_backup

    settings = _course()
    if args.restore is None:
        module = resolve_module(settings, args.module)
        with console.status(f"Resetting {module.key} to its student stub..."):
            result = reset_module(settings, module, saved=_saved)
        if result.backup is None:
            console.print("Your notebook held no solution code (it was the stub already): nothing needed saving.")
        console.print(f"Reset {_rel(module.notebook)} to the student stub and re-exported "
                      f"{settings.lib_name}.{result.export.target}.", highlight=False)
        _backup_advice(settings, module)
        return 0
    module = module_for_restore(settings, args.module)
    if args.restore == "":
        _backup_table(settings, module)
        return 0
    backup = find_backup(settings, module, args.restore)
    with console.status(f"Restoring {backup.name}..."):
        restore_backup(settings, module, backup, saved=_saved)
    console.print(f"Restored {_rel(module.notebook)} from {_rel(backup)} and re-exported it.", highlight=False)
    return 0


# ---------------------------------------------------------------------------- release


def cmd_release_student(args: argparse.Namespace) -> int:
    from .release import write_student_edition

    settings = _course()
    with console.status("Writing the student edition (stubs, package from the stubs, checks)..."):
        result = write_student_edition(settings, Path(args.dir), force=args.force)
    console.print(f"[bold green]Student edition written to {result.dest}[/]: {len(result.modules)} module(s), "
                  f"{result.stubs} solution block(s) stubbed, {result.package_files} package module(s) "
                  "regenerated from the stubs.")
    return 0


def cmd_release_check(args: argparse.Namespace) -> int:
    from .release import MistakeCheck, check_release, modules_with_solutions

    settings = _course()
    modules = resolve_modules(settings, args.modules) if args.modules else modules_with_solutions(
        list_modules(settings))
    if not modules:
        raise CourseError("No module has solution blocks: nothing to check.")
    if args.jobs < 1:
        raise CourseError(f"--jobs takes a positive number, e.g. --jobs 2 (found {args.jobs}).")
    if args.mistake and len(modules) != 1:
        raise CourseError("--mistake NAME needs exactly one module, e.g. `tito release check 01 --mistake NAME`.")
    stubs = args.only in (None, "stubs") and not args.mistake
    mistakes = args.only in (None, "mistakes")
    what = " and ".join(w for w, on in (("stubs", stubs), ("mistakes", mistakes)) if on)
    with console.status(f"Checking the {what} of {len(modules)} module(s), each in its own copy..."):
        def done(check: Check) -> None:
            if isinstance(check, MistakeCheck):
                label = f"{check.module} mistake {check.name}"
                console.print(f"  {escape(label)}: {_mark(check.ok, 'caught', 'PROBLEM')}"
                              + (f" by {escape(check.caught_by)}" if check.ok else ""), highlight=False)
            else:
                console.print(f"  {check.module}: {_mark(check.ok, 'fails on its stub', 'PROBLEM')}")

        checks = check_release(settings, modules, stubs=stubs, mistakes=mistakes, only=args.mistake,
                               jobs=args.jobs, done=done)
    stub_checks = [c for c in checks if not isinstance(c, MistakeCheck)]
    mistake_checks = [c for c in checks if isinstance(c, MistakeCheck)]
    if stub_checks:
        table = Table(title="Each module's tests must fail on its student stub")
        for column in ("module", "notebook script", "pytest", "verdict", "seconds"):
            table.add_column(column, justify="right" if column == "seconds" else "left")
        for check in stub_checks:
            verdict = "[green]ok[/]" if check.ok else f"[red]{escape(check.problem)}[/]"
            table.add_row(check.module, check.notebook, escape(check.pytest), verdict, f"{check.seconds:.1f}")
        console.print(table)
    if mistake_checks:
        table = Table(title="Each catalogued mistake must fail a test that names its cause")
        for column in ("module", "mistake", "caught by", "verdict", "seconds"):
            table.add_column(column, justify="right" if column == "seconds" else "left")
        for check in mistake_checks:
            verdict = "[green]caught[/]" if check.ok else f"[red]{escape(check.problem)}[/]"
            table.add_row(check.module, check.name, escape(check.caught_by), verdict, f"{check.seconds:.1f}")
        console.print(table)
        per_module: dict[str, int] = {}
        for check in mistake_checks:
            if check.name != "(catalogue)":
                per_module[check.module] = per_module.get(check.module, 0) + 1
        console.print("Mistakes checked per module: " + ", ".join(f"{k} {n}" for k, n in per_module.items()),
                      highlight=False)
    bad = [c for c in checks if not c.ok]
    if bad:
        console.print(f"[bold red]{len(bad)} problem(s):[/] "
                      + ", ".join(escape(f"{c.module} {getattr(c, 'name', 'stub')}") for c in bad))
        return 1
    console.print(f"[bold green]All {len(checks)} check(s) passed: the tests need the student's code "
                  "and catch every catalogued mistake.[/]")
    return 0


# ---------------------------------------------------------------------------- grade


def grades_tables(students: list, keys: list[str], width: int) -> list[Table]:
    """The grade book as tables no wider than `width`: one row per student, one column per module (its full
    name); modules that do not fit beside each other go to the next table, the total to the last one."""
    from .grading.report import fmt

    def cell(module) -> str:
        colour = "green" if module.score == module.max_score else ("red" if module.reason else "yellow")
        return f"[{colour}]{fmt(module.score)}[/]"

    names = [escape(s.name) for s in students]
    first = min(max([len("student"), *(len(s.name) for s in students)]) + 4, width // 3)  # borders and padding
    columns = [*keys, "total"]
    widths = {k: max([len(k), *(len(fmt(s.modules[k].score)) for s in students),
                      *(len(fmt(s.modules[k].max_score)) for s in students[:1])]) + 3 for k in keys}
    widths["total"] = max([5, *(len(fmt(s.total)) for s in students), *(len(fmt(s.max_total)) for s in students[:1])]) + 3
    chunks, current, used = [], [], first
    for column in columns:
        if current and used + widths[column] > width:
            chunks.append(current)
            current, used = [], first
        current.append(column)
        used += widths[column]
    chunks.append(current)
    tables = []
    for number, chunk in enumerate(chunks, 1):
        title = "Grades" if len(chunks) == 1 else f"Grades ({number} of {len(chunks)})"
        table = Table(title=title)
        table.add_column("student", overflow="fold")
        for column in chunk:
            table.add_column(column, justify="right", no_wrap=True)
        if students:
            top = students[0]
            table.add_row("[dim](max)[/]", *(f"[dim]{fmt(top.max_total if c == 'total' else top.modules[c].max_score)}[/]"
                                             for c in chunk))
        for student, name in zip(students, names):
            table.add_row(name, *(f"[bold]{fmt(student.total)}[/]" if c == "total" else cell(student.modules[c])
                                  for c in chunk))
        tables.append(table)
    return tables


def cmd_grade(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .grading.grade import GradeOptions, GradingRun, check_jobs, grade_submissions
    from .grading.out import check_destination, locked_destination, write_complete
    from .grading.report import fmt, module_summary, write_outputs
    from .grading.submissions import collect_submissions

    settings = _course()
    modules = resolve_modules(settings, args.modules)
    if args.gradescope:
        from .grading.gradescope import build_bundle

        if args.submissions:
            raise CourseError("--gradescope FILE.zip builds the autograder bundle; give no SUBMISSIONS with it.")
        with console.status("Building the Gradescope autograder bundle..."):
            bundle = build_bundle(settings, Path(args.gradescope), modules)
        console.print(f"[bold green]Wrote {escape(_rel(bundle.path))}[/] ({bundle.files} files): grades "
                      f"{', '.join(bundle.modules)}. Upload it as the assignment's autograder (Configure "
                      "Autograder → Zip file upload).", highlight=False)
        return 0
    if not args.submissions:
        raise CourseError("Give the folder of submissions (one folder, .zip or .tar.gz per student), "
                          "e.g. `tito grade submissions/`, or --gradescope FILE.zip.")
    check_jobs(args.jobs)  # before any work: at least 1, at most the cores
    out = Path(args.out).resolve()
    check_destination(out)  # before any work; nothing in it changes until the new grades are complete
    submissions = collect_submissions(Path(args.submissions), list_modules(settings), single=args.single)
    options = GradeOptions(tuple(modules), jobs=args.jobs, cumulative=args.cumulative)
    mode = "cumulative: every module from the student's notebooks" if args.cumulative else \
        "each module on its own, the others from the reference"
    with locked_destination(out):  # a second tito grade into `out` is refused until this one is done
        with console.status("Preparing: the reference course and the graded cases..."):
            run = GradingRun(settings, options).__enter__()
        try:
            console.print(f"Grading {len(submissions)} submission(s) x {len(run.modules)} module(s), {args.jobs} "
                          f"at a time ({mode}).", highlight=False)
            console.print("Sandbox: " + "; ".join(run.isolation) + ".", highlight=False)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=True) as bar:
                task = bar.add_task("grading", total=len(submissions) * len(run.modules))

                def progress(student: str, module: str, result) -> None:
                    if result is None:
                        bar.update(task, description=f"grading {escape(student)} {module}")
                    else:
                        bar.advance(task)

                students = grade_submissions(settings, submissions, options, progress, run=run)
            written, kept = write_complete(out, lambda folder: write_outputs(folder, students, run.points,
                                                                             run.config.hidden_visibility))
            changed = run.changed_outside()
        finally:
            run.__exit__(None, None, None)
    if kept is not None:
        console.print(f"[yellow]Note:[/] the earlier grades held files tito grade does not write; all of them were "
                      f"kept in {escape(_rel(kept))}.", highlight=False)
    for table in grades_tables(students, [m.key for m in run.modules], console.width):
        console.print(table)
    zeroed = [(s.name, k, m.reason) for s in students for k, m in s.modules.items() if m.reason]
    for name, key, reason in zeroed[:20]:
        console.print(f"  {escape(name)} {key}: 0, {escape(reason)}", highlight=False)
    if len(zeroed) > 20:
        console.print(f"  ... and {len(zeroed) - 20} more modules that scored 0 (see the feedback files).")
    console.print(f"[bold green]Wrote {len(written)} file(s) to {escape(_rel(out))}[/]: grades.csv, "
                  "grades_long.csv, feedback/<student>.md, results/<student>.json (Gradescope's format).",
                  highlight=False)
    if changed:
        console.print(f"[bold red]Warning:[/] {len(changed)} file(s) of the course changed while grading: "
                      f"{escape(', '.join(changed[:5]))}{' ...' if len(changed) > 5 else ''}. Student code runs as "
                      "you when tito is not root, and can write your files. Every job graded a copy made before "
                      "any ran, so the grades stand; restore the course (git status, git checkout) before "
                      "grading again.", highlight=False)
        return 1
    return 0


# ---------------------------------------------------------------------------- doctor


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import required_problems, run_checks

    settings = _course()
    with console.status("Checking Python, packages, nbdev/jupytext export, CuPy and GPU, MPI..."):
        checks = run_checks(settings)
    table = Table(title="tito doctor")
    for column in ("check", "status", "found"):
        table.add_column(column)
    for check in checks:
        status = "[green]ok[/]" if check.ok else ("[red]PROBLEM[/]" if check.required else "[yellow]optional[/]")
        table.add_row(check.name, status, escape(check.detail))
    console.print(table)
    for check in checks:
        if check.fix:
            label = "[red]fix[/]" if check.required else "[yellow]optional, to add[/]"
            console.print(f"  {label} {check.name}: {escape(check.fix)}")
    problems = required_problems(checks)
    if problems:
        console.print(f"[bold red]{len(problems)} problem(s) to fix:[/] {', '.join(c.name for c in problems)}")
        return 1
    console.print("[bold green]Ready.[/]")
    return 0


# ---------------------------------------------------------------------------- olympics


def cmd_olympics_judge(args: argparse.Namespace) -> int:
    """Judge submission folders in the sandbox (module 20); every number measured here."""
    from .grading.judge import (MAX_BUDGET_S, check_output_folder, judge, read_submission, shakespeare_task,
                                write_leaderboard)

    settings = load_settings()
    from tinytorch.perf.olympics import EVENTS

    # Every argument checked before any work: a mistake costs a second, not the minutes of judging.
    events = args.event or ["smallest", "generation"]
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise CourseError(f"Unknown event {', '.join(unknown)}: choose from {', '.join(EVENTS)} (e.g. --event smallest).")
    if not (math.isfinite(args.budget) and 0 < args.budget <= MAX_BUDGET_S):
        raise CourseError(f"--budget takes the speedrun's seconds per entry, more than 0 and at most {MAX_BUDGET_S:g} "
                          f"(e.g. --budget 600), got {args.budget:g}.")
    if args.seed < 0:
        raise CourseError(f"--seed takes a whole number >= 0 (e.g. --seed 12345), got {args.seed}.")
    check_output_folder(Path(args.out))
    speedrun = "speedrun" in events
    entries = [read_submission(Path(p), need_train=speedrun) for p in args.submissions]
    baseline = read_submission(Path(args.baseline), need_train=speedrun) if args.baseline else entries[0]
    task = shakespeare_task(settings.root, heldout=args.heldout, seed=args.seed, speedrun_budget_s=args.budget)
    if not args.baseline:
        console.print(f"Baseline (the quality bar and the speedrun's reference): {escape(baseline.name)}, the first "
                      "submission; choose another with --baseline DIR.", highlight=False)
    same = [e for e in entries if e.folder.resolve() == baseline.folder.resolve()]
    if same:
        baseline = same[0]
    with console.status("Judging...") as status:
        board = judge(entries, task, events, baseline=baseline, course_root=settings.root,
                      progress=lambda text: status.update(f"Judging: {escape(text)}"))

    for event in events:
        spec = EVENTS[event]
        bar = (f"target loss {board.rules.speedrun_target} from scratch" if event == "speedrun"
               else f"quality bar {board.quality_bar:.4f}")
        table = Table(title=f"{event}: {spec.metric} ({spec.unit}, {'higher' if spec.higher_is_better else 'lower'} "
                            f"is better); {bar}")
        for column in ("rank", "entry", spec.metric, "validation loss", "verdict"):
            table.add_column(column, overflow="fold")
        for row in board.boards[event]:
            loss = row.extra.get("val_loss", float("nan"))
            score = "—" if row.score != row.score else (f"{row.score:,.0f}" if spec.unit == "B" else f"{row.score:,.2f}")
            table.add_row("—" if row.rank is None else str(row.rank), escape(row.name), score,
                          "—" if loss != loss else f"{loss:.4f}",
                          "ok" if row.qualified else f"[red]disqualified[/]: {escape(row.reason)}")
        console.print(table)
    written = write_leaderboard(board, Path(args.out))
    console.print(f"[bold green]Wrote[/] {', '.join(escape(_rel(p)) for p in written)}", highlight=False)
    return 0


# ---------------------------------------------------------------------------- milestones, benchmarks


def _program_table(title: str, programs) -> Table:
    table = Table(title=title)
    table.add_column("name")
    table.add_column("what it does")
    for program in programs:
        table.add_row(program.name, escape(program.summary))
    return table


def _list_or_run(folder_name: str, kind: str, name: str | None, extra: list[str], ranks: int | None = None) -> int:
    from .programs import find_program, in_course_order, list_programs, run_program

    settings = _course()
    folder = settings.root / folder_name
    if name is None:
        programs = in_course_order(list_programs(folder))
        if not programs:
            console.print(f"No {kind}s yet in {_rel(folder)}.")
        else:
            console.print(_program_table(f"{kind}s ({folder_name}/)", programs))
        return 0
    program = find_program(folder, name, kind)
    console.rule(f"{kind} {program.name}: {escape(program.summary)}")
    code = run_program(settings, program, extra, ranks,
                       notice=lambda text: console.print(f"[yellow]{escape(text)}[/]", highlight=False))
    console.rule(_mark(code == 0, f"{program.name} passed", f"{program.name} failed (exit {code})"))
    return code


def cmd_milestone_list(args: argparse.Namespace) -> int:
    return _list_or_run("milestones", "milestone", None, [])


def _ranks_option(args: argparse.Namespace) -> int | None:
    """`--ranks N` wherever it was typed: before the milestone's name argparse reads it; after the
    name (`tito milestone run shakespeare --ranks 2`) it lands among the arguments passed on to the
    program, and is taken out of them here (the program never sees it). A value that is not a whole
    number is a CourseError naming it."""
    ranks, rest, items = args.ranks, [], iter(args.args)
    for item in items:
        if item == "--ranks" or item.startswith("--ranks="):
            text = item.partition("=")[2] if "=" in item else next(items, "")
            try:
                ranks = int(text)
            except ValueError:
                raise CourseError(f"--ranks must be a whole number of processes, got {text!r}.") from None
        else:
            rest.append(item)
    args.args = rest
    return ranks


def cmd_milestone_run(args: argparse.Namespace) -> int:
    args.ranks = _ranks_option(args)
    extra = (["--fast"] if args.fast else []) + (["--device", args.device] if args.device else []) + args.args
    if args.all and args.name is not None:
        raise CourseError("Name one milestone or use --all, not both.")
    if not args.all and args.name is None:
        raise CourseError("Name a milestone (`tito milestone list` shows them) or use --all.")
    if args.ranks is not None and args.name is None:
        raise CourseError("--ranks runs one milestone on N MPI processes: name it (tito milestone run shakespeare --ranks 2).")
    if args.name is not None:
        return _list_or_run("milestones", "milestone", args.name, extra, args.ranks)
    from .programs import in_course_order, list_programs

    settings = _course()
    results = {p.name: _list_or_run("milestones", "milestone", p.name, extra)
               for p in in_course_order(list_programs(settings.root / "milestones"))}
    table = Table(title="milestones")
    table.add_column("milestone")
    table.add_column("verdict")
    for name, code in results.items():
        table.add_row(name, _mark(code == 0, "passed", f"failed (exit {code})"))
    console.print(table)
    failed = sum(code != 0 for code in results.values())
    console.print(f"Summary: {len(results) - failed} passed, {failed} failed", highlight=False)
    return 1 if failed or not results else 0


def cmd_bench(args: argparse.Namespace) -> int:
    return _list_or_run("benchmarks", "benchmark", args.name, args.args)


def cmd_run(args: argparse.Namespace) -> int:
    from .launch import run_ranks

    result = run_ranks(_course().root, args.ranks, args.program, args.args, timeout=args.timeout,
                       capture=False, cwd=Path.cwd())
    if result.timed_out:
        console.print(f"[bold red]Stopped:[/] {args.program} ran past --timeout {args.timeout:g} s; "
                      f"all {args.ranks} ranks were killed.", highlight=False)
    elif result.returncode != 0:
        console.print(f"[bold red]Failed:[/] a rank of {args.program} exited with status {result.returncode} "
                      "(its error is above).", highlight=False)
    return result.returncode


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tito", description="The TinyTorch course command line.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    export = sub.add_parser("export", help="notebook(s) → the tinytorch package (via nbdev)")
    export.add_argument("modules", nargs="*", metavar="MODULE", help="e.g. 01_tensor, 01 or tensor")
    export.add_argument("--all", action="store_true", help="export every module")
    export.set_defaults(func=cmd_export)

    test = sub.add_parser("test", help="a module's inline and pytest tests (no argument: everything)")
    test.add_argument("modules", nargs="*", metavar="MODULE", help="e.g. 01_tensor, 01 or tensor; none means --all")
    test.add_argument("--all", action="store_true",
                      help="every module plus the test folders that belong to no module")
    test.add_argument("--notebook", action="store_true", help="also run each notebook in a Jupyter kernel")
    test.add_argument("-x", "--exitfirst", dest="x", action="store_true",
                      help="pytest stops at the first failing test (passed on to pytest)")
    test.add_argument("-v", "--verbose", action="store_true",
                      help="show everything: every failure, every part's whole output (and pytest -v)")
    test.add_argument("--timeout", type=float, metavar="MINUTES",
                      help="time limit for one module's tests (default: test_timeout_minutes in settings.ini)")
    test.add_argument("--jobs", type=int, metavar="N", default=min(4, os.cpu_count() or 1),
                      help="modules (and test folders) tested at the same time; the lines still come in course "
                           "order (default: the CPU count, at most 4; here %(default)s)")
    test.set_defaults(func=cmd_test)

    status = sub.add_parser("status", help="per module: exported, in sync, last test result")
    status.add_argument("--run", action="store_true", help="run every module's tests first")
    status.set_defaults(func=cmd_status)

    module = sub.add_parser("module", help="module commands (reset)")
    module_sub = module.add_subparsers(dest="module_command", required=True, metavar="COMMAND")
    reset = module_sub.add_parser(
        "reset", help="back to the student stub (your notebook is saved to .tito/backups/ first)")
    reset.add_argument("module", metavar="MODULE", help="e.g. 01_tensor, 01 or tensor")
    reset.add_argument("--restore", nargs="?", const="", metavar="N|PATH",
                       help="without a value: list the backups; with N (1 = newest) or a path: restore it")
    reset.set_defaults(func=cmd_module_reset)

    release = sub.add_parser("release", help="the student edition (student DIR) and its check (check)")
    release_sub = release.add_subparsers(dest="release_command", required=True, metavar="COMMAND")
    student = release_sub.add_parser("student", help="write the student edition to DIR")
    student.add_argument("dir", metavar="DIR", help="a new or empty folder")
    student.add_argument("--force", action="store_true", help="replace a previous student edition in DIR")
    student.set_defaults(func=cmd_release_student)
    check = release_sub.add_parser("check", help="prove each module's tests fail on its student stub")
    check.add_argument("modules", nargs="*", metavar="MODULE", help="default: every module with solution blocks")
    check.add_argument("--jobs", type=int, metavar="N", default=min(4, os.cpu_count() or 1),
                       help="checks run at the same time (default: the CPU count, at most 4; here %(default)s)")
    check.add_argument("--only", choices=("stubs", "mistakes"),
                       help="only the stub check, or only the mistakes catalogue (default: both)")
    check.add_argument("--mistake", metavar="NAME", help="only this mistake of the one module named")
    check.set_defaults(func=cmd_release_check)

    grade = sub.add_parser("grade", help="instructors: grade students' notebooks in a sandbox (or build "
                                         "a Gradescope autograder)")
    grade.add_argument("submissions", nargs="?", metavar="SUBMISSIONS",
                       help="a folder with one folder, .zip or .tar.gz per student (named after the student)")
    grade.add_argument("--modules", nargs="+", metavar="MODULE", help="the modules to grade (default: all)")
    grade.add_argument("--jobs", type=int, metavar="N", default=os.cpu_count() or 1,
                       help="(student, module) runs at the same time (default and most: the CPU count, here "
                            "%(default)s)")
    grade.add_argument("--out", default="grades", metavar="DIR",
                       help="where grades.csv, feedback/ and results/ go (default: grades/)")
    grade.add_argument("--cumulative", action="store_true",
                       help="build every module from the student's own notebooks (the whole-framework grade)")
    grade.add_argument("--single", action="store_true",
                       help="SUBMISSIONS is one student's submission (as Gradescope gives it), not a folder of them")
    grade.add_argument("--gradescope", metavar="FILE.zip",
                       help="write Gradescope's autograder bundle for --modules instead of grading")
    grade.set_defaults(func=cmd_grade)

    doctor = sub.add_parser("doctor", help="check Python, packages, nbdev/jupytext, CuPy and GPU")
    doctor.set_defaults(func=cmd_doctor)

    milestone = sub.add_parser("milestone", help="end-to-end programs (list, run NAME, run --all)")
    milestone_sub = milestone.add_subparsers(dest="milestone_command", required=True, metavar="COMMAND")
    milestone_sub.add_parser("list", help="the milestones and what each does").set_defaults(
        func=cmd_milestone_list)
    run = milestone_sub.add_parser("run", help="run one milestone; its exit status is the verdict")
    run.add_argument("name", nargs="?", metavar="NAME", help="a file in milestones/, without .py")
    run.add_argument("--all", action="store_true", help="run every milestone, one after another")
    run.add_argument("--fast", action="store_true", help="a short run (as CI does)")
    run.add_argument("--device", choices=["cpu", "cuda"], default=None,
                     help="passed on to the milestone(s): cpu (NumPy) or cuda (CuPy on an NVIDIA GPU)")
    run.add_argument("--ranks", type=int, default=None, metavar="N",
                     help="data-parallel on N MPI processes through `tito run`'s launcher (module 21; shakespeare)")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed on to the program")
    run.set_defaults(func=cmd_milestone_run)

    olympics = sub.add_parser("olympics", help="the capstone's judge (module 20)")
    olympics_sub = olympics.add_subparsers(dest="olympics_command", required=True, metavar="COMMAND")
    judge = olympics_sub.add_parser("judge", help="judge submission folders in the sandbox and write the leaderboard")
    judge.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                       help="folders, each with submission.py (build_model(), CHECKPOINT) and its checkpoint")
    judge.add_argument("--event", nargs="+", metavar="EVENT",
                       help="smallest, generation and/or speedrun (default: smallest generation)")
    judge.add_argument("--baseline", metavar="DIR", help="the entry whose loss sets the quality bar "
                                                         "(default: the first SUBMISSION)")
    judge.add_argument("--out", default="olympics", metavar="DIR",
                       help="where leaderboard.md, leaderboard.csv and pareto.png go (default: olympics/)")
    judge.add_argument("--budget", type=float, default=600.0, metavar="S",
                       help="the speedrun's time budget per entry in seconds (default: 600)")
    judge.add_argument("--heldout", type=Path, metavar="FILE",
                       help="instructors: judge on this text (the course's characters) instead of the last 10%% of "
                            "datasets/tinyshakespeare.txt, which students can read")
    judge.add_argument("--seed", type=int, default=0, metavar="N",
                       help="instructors: draws the held-out windows and the generation prompt (default: 0, "
                            "reproducible and known to students)")
    judge.set_defaults(func=cmd_olympics_judge)

    bench = sub.add_parser("bench", help="benchmarks (no name: list them)")
    bench.add_argument("name", nargs="?", metavar="NAME", help="a file in benchmarks/, without .py")
    bench.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed on to the benchmark")
    bench.set_defaults(func=cmd_bench)

    run_ranks = sub.add_parser("run", help="run a Python program on N MPI processes (module 21)")
    run_ranks.add_argument("--ranks", type=int, required=True, metavar="N", help="how many processes (ranks)")
    run_ranks.add_argument("--timeout", type=float, default=None, metavar="S",
                           help="stop every rank after S seconds (exit status 124)")
    run_ranks.add_argument("program", metavar="PROGRAM", help="the Python file every rank runs")
    run_ranks.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed on to the program")
    run_ranks.set_defaults(func=cmd_run)
    return parser


def _stop(signum, frame) -> None:
    """SIGTERM and SIGHUP end tito as Ctrl-C does: `finally` blocks run, so the programs it
    started are stopped with it and an export in progress is rolled back or finished."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("SIGTERM", "SIGHUP"):
        try:
            signal.signal(getattr(signal, name), _stop)
        except (AttributeError, ValueError):  # no such signal here, or not the main thread
            pass
    try:
        return args.func(args)
    except CourseError as err:
        console.print(f"[bold red]Error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
