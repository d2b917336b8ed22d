"""The `tito` command line: argument parsing and printing only.

Each command is a thin wrapper over a function in a small module of this package
(`export.py`, `testing.py`, `status.py`, `reset.py`, `release.py`, `doctor.py`,
`programs.py`); tests call those functions directly. Every command finds the
course from the current folder upwards, so it works anywhere inside the repository.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .course import (CourseError, CourseModule, Settings, list_modules, load_settings, resolve_module,
                     resolve_modules)

if TYPE_CHECKING:
    from .release import Check, StubCheck
    from .testing import RunRecord

console = Console()


def _mark(ok: bool, yes: str = "yes", no: str = "no") -> str:
    return f"[green]{yes}[/]" if ok else f"[red]{no}[/]"


def _rel(path: Path) -> str:
    """A path as the user should read it: relative to where they are when that is shorter."""
    relative = os.path.relpath(path, Path.cwd())
    return relative if len(relative) < len(str(path)) else str(path)


# ---------------------------------------------------------------------------- export


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export_modules

    settings = load_settings()
    if not args.all and not args.modules:
        raise CourseError("Name a module (e.g. `tito export 01_tensor`) or use `tito export --all`.")
    modules = resolve_modules(settings, None if args.all else args.modules)
    with console.status(f"Exporting {len(modules)} notebook(s) with nbdev..."):
        results = export_modules(settings, modules)
    for result in results:
        state = "[green]updated[/]" if result.changed else "[dim]unchanged[/]"
        where = result.path.relative_to(settings.root)
        console.print(f"  {result.module.key} → {settings.lib_name}.{result.target} ({where}) {state}")
    console.print(f"[bold green]Exported {len(results)} module(s).[/]")
    return 0


# ---------------------------------------------------------------------------- test


_PART_STYLE = {"passed": "[green]passed[/]", "failed": "[bold red]FAILED[/]", "no tests": "[yellow]no tests[/]"}


def _test_table(runs: list[RunRecord]) -> Table:
    from .testing import PARTS

    table = Table(title="tito test")
    for column in ("module", *PARTS, "seconds"):
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for run in runs:
        cells = [_PART_STYLE.get(run.parts[p].status, run.parts[p].status) if p in run.parts else "[dim]—[/]"
                 for p in PARTS]
        table.add_row(run.name, *cells, f"{run.seconds:.1f}")
    return table


def _run_tests_with_progress(settings: Settings, modules: list[CourseModule], notebook: bool,
                             include_extra: bool) -> list[RunRecord]:
    from .testing import run_tests

    with console.status("Testing...") as spinner:
        def progress(name: str, what: str) -> None:
            spinner.update(f"[bold]{name}[/]: {escape(what)}...")

        def finished(run: RunRecord) -> None:
            console.print(f"  {run.name}: {_mark(run.passed, 'passed', 'FAILED')} ({run.seconds:.1f} s)")

        return run_tests(settings, modules, notebook=notebook, include_extra=include_extra,
                         progress=progress, finished=finished)


def _warn_unexported(settings: Settings, modules: list[CourseModule]) -> None:
    """pytest tests the package, so a notebook edited since its export tests old code: say so."""
    from .export import module_in_sync

    with console.status("Checking that the package matches the notebooks..."):
        stale = [(m, module_in_sync(settings, m)) for m in modules]
    for module, (in_sync, detail) in stale:
        if not in_sync:
            console.print(f"[yellow]Warning:[/] {module.key}: {escape(detail)}; pytest tests the package, "
                          f"so run `tito export {module.number}` first.")


def cmd_test(args: argparse.Namespace) -> int:
    from .testing import results_path

    settings = load_settings()
    everything = args.all or not args.modules
    modules = list_modules(settings) if everything else resolve_modules(settings, args.modules)
    _warn_unexported(settings, modules)
    runs = _run_tests_with_progress(settings, modules, args.notebook, include_extra=everything)
    for run in runs:
        for name, part in run.parts.items():
            if part.failed:
                console.rule(f"[red]{run.name}: {name} failed")
                console.print(escape(part.detail), highlight=False)
    console.print(_test_table(runs))
    failed = [run.name for run in runs if not run.passed]
    console.print(f"[dim]Recorded in {_rel(results_path(settings))}[/]")
    if failed:
        console.print(f"[bold red]Failed:[/] {', '.join(failed)}")
    # The closing line in the plain "N passed, N failed" form that CI systems read.
    colour = "red" if failed else "green"
    console.print(f"[bold {colour}]Summary: {len(runs) - len(failed)} passed, {len(failed)} failed[/]")
    return 1 if failed else 0


# ---------------------------------------------------------------------------- status


def cmd_status(args: argparse.Namespace) -> int:
    from .status import course_status

    settings = load_settings()
    if args.run:
        runs = _run_tests_with_progress(settings, list_modules(settings), False, include_extra=False)
        console.print(_test_table(runs))
    with console.status("Checking each module against its notebook..."):
        rows = course_status(settings)
    table = Table(title=f"{settings.lib_name} {settings.version}: status")
    for column in ("module", "exported", "in sync", "tests (last recorded run)"):
        table.add_column(column)
    for row in rows:
        tests = escape(row.tests)
        if row.last_run is not None:
            colour = "green" if row.last_run.passed and not row.notebook_changed else (
                "yellow" if row.last_run.passed else "red")
            tests = f"[{colour}]{tests}[/]"
        table.add_row(row.module.key, _mark(row.exported), _mark(row.in_sync, no=escape(row.sync_detail)), tests)
    console.print(table)
    return 0


# ---------------------------------------------------------------------------- module reset


def cmd_module_reset(args: argparse.Namespace) -> int:
    from .reset import find_backup, list_backups, reset_module, restore_backup

    settings = load_settings()
    module = resolve_module(settings, args.module)
    if args.restore is None:
        with console.status(f"Resetting {module.key} to its student stub..."):
            result = reset_module(settings, module)
        console.print(f"Saved your notebook to [bold]{_rel(result.backup)}[/]", soft_wrap=True)
        console.print(f"Reset {_rel(module.notebook)} to the student stub and re-exported "
                      f"{settings.lib_name}.{result.export.target}.")
        console.print(f"Bring your version back with `tito module reset {module.key} --restore 1`.")
        return 0
    if args.restore == "":
        backups = list_backups(settings, module)
        if not backups:
            console.print(f"No backups of {module.key} yet.")
            return 0
        table = Table(title=f"Backups of {module.key} (newest first)")
        table.add_column("#", justify="right")
        table.add_column("file")
        for number, path in enumerate(backups, start=1):
            table.add_row(str(number), _rel(path))
        console.print(table)
        console.print(f"Restore one with `tito module reset {module.key} --restore N`.")
        return 0
    backup = find_backup(settings, module, args.restore)
    with console.status(f"Restoring {backup.name}..."):
        result = restore_backup(settings, module, backup)
    console.print(f"Saved the notebook you had to [bold]{_rel(result.backup)}[/]", soft_wrap=True)
    console.print(f"Restored {_rel(module.notebook)} from {_rel(backup)} and re-exported "
                  f"{settings.lib_name}.{result.export.target}.")
    return 0


# ---------------------------------------------------------------------------- release


def cmd_release_student(args: argparse.Namespace) -> int:
    from .release import write_student_edition

    settings = load_settings()
    with console.status("Writing the student edition (stubs, package from the stubs, checks)..."):
        result = write_student_edition(settings, Path(args.dir), force=args.force)
    console.print(f"[bold green]Student edition written to {result.dest}[/]: {len(result.modules)} module(s), "
                  f"{result.stubs} solution block(s) stubbed, {result.package_files} package module(s) "
                  "regenerated from the stubs.")
    return 0


def cmd_release_check(args: argparse.Namespace) -> int:
    from .release import MistakeCheck, check_release, modules_with_solutions

    settings = load_settings()
    modules = resolve_modules(settings, args.modules) if args.modules else modules_with_solutions(
        list_modules(settings))
    if not modules:
        raise CourseError("No module has solution blocks: nothing to check.")
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


# ---------------------------------------------------------------------------- doctor


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import required_problems, run_checks

    settings = load_settings()
    with console.status("Checking Python, packages, nbdev/jupytext export, CuPy and GPU..."):
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


# ---------------------------------------------------------------------------- milestones, benchmarks


def _program_table(title: str, programs) -> Table:
    table = Table(title=title)
    table.add_column("name")
    table.add_column("what it does")
    for program in programs:
        table.add_row(program.name, escape(program.summary))
    return table


def _list_or_run(folder_name: str, kind: str, name: str | None, extra: list[str]) -> int:
    from .programs import find_program, list_programs, run_program

    settings = load_settings()
    folder = settings.root / folder_name
    if name is None:
        programs = list_programs(folder)
        if not programs:
            console.print(f"No {kind}s yet in {_rel(folder)}.")
        else:
            console.print(_program_table(f"{kind}s ({folder_name}/)", programs))
        return 0
    program = find_program(folder, name, kind)
    console.rule(f"{kind} {program.name}: {escape(program.summary)}")
    code = run_program(settings, program, extra)
    console.rule(_mark(code == 0, f"{program.name} passed", f"{program.name} failed (exit {code})"))
    return code


def cmd_milestone_list(args: argparse.Namespace) -> int:
    return _list_or_run("milestones", "milestone", None, [])


def cmd_milestone_run(args: argparse.Namespace) -> int:
    extra = (["--fast"] if args.fast else []) + args.args
    if args.all and args.name is not None:
        raise CourseError("Name one milestone or use --all, not both.")
    if not args.all and args.name is None:
        raise CourseError("Name a milestone (`tito milestone list` shows them) or use --all.")
    if args.name is not None:
        return _list_or_run("milestones", "milestone", args.name, extra)
    from .programs import list_programs

    settings = load_settings()
    results = {p.name: _list_or_run("milestones", "milestone", p.name, extra)
               for p in list_programs(settings.root / "milestones")}
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
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed on to the program")
    run.set_defaults(func=cmd_milestone_run)

    bench = sub.add_parser("bench", help="benchmarks (no name: list them)")
    bench.add_argument("name", nargs="?", metavar="NAME", help="a file in benchmarks/, without .py")
    bench.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed on to the benchmark")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CourseError as err:
        console.print(f"[bold red]Error:[/] {escape(str(err))}", highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
