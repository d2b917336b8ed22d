"""The `tito` command line: argument parsing and printing only.

Each command is a thin wrapper over a function in a small module of this package
(`export.py`, `testing.py`, ...); tests call those functions directly.
"""
from __future__ import annotations

import argparse
import sys

from rich.console import Console

from .course import CourseError, load_settings, resolve_modules

console = Console()


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tito", description="The TinyTorch course command line.")
    sub = parser.add_subparsers(dest="command", required=True)

    export = sub.add_parser("export", help="notebook(s) → the tinytorch package (via nbdev)")
    export.add_argument("modules", nargs="*", help="e.g. 01_tensor, 01 or tensor")
    export.add_argument("--all", action="store_true", help="export every module")
    export.set_defaults(func=cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CourseError as err:
        console.print(f"[bold red]Error:[/] {err}", highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
