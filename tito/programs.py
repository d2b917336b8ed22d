"""`tito milestone` and `tito bench`: the course's stand-alone programs.

A program is `milestones/<name>.py` or `benchmarks/<name>.py`; the first line of
its module docstring says what it does (read with `ast`, never imported, so a
broken program cannot break the listing). It runs as a script and its exit
status is the verdict (a milestone exits non-zero below its threshold).

Ctrl-C reaches the program as Ctrl-C: it runs in its own process group, tito passes the
interrupt on once and gives it `INTERRUPT_GRACE_S` to clean up (its `finally` blocks: the
olympics judge removes its scratch folder and stops its runners), then kills the group.
A second Ctrl-C kills it at once.
"""
from __future__ import annotations

import ast
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .course import CourseError, Settings
from .runner import _children_can_be_interrupted, _signal_group, course_env

INTERRUPT_GRACE_S = 30.0  # after Ctrl-C a program has this long to clean up before its process group is killed


@dataclass(frozen=True)
class Program:
    name: str
    path: Path
    summary: str  # first line of its docstring, or a note that it has none


def _summary(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError) as err:
        return f"(cannot read: {err})"
    doc = ast.get_docstring(tree)
    return doc.strip().splitlines()[0] if doc and doc.strip() else "(no docstring)"


def list_programs(folder: Path) -> list[Program]:
    """The programs in `folder`, sorted by name; files starting with `_` are helpers, not programs."""
    if not folder.is_dir():
        return []
    return [Program(p.stem, p, _summary(p)) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def in_course_order(programs: list[Program]) -> list[Program]:
    """Programs in the order of the course: by the module their summary says they come after
    ("... (after module 13): ..."), then by name; programs that name no module come first. So
    `tito milestone run --all` trains the shakespeare GPT (after 13) before quantizing it (after 15)."""
    def module_number(program: Program) -> int:
        found = re.search(r"\(after module (\d+)\)", program.summary)
        return int(found.group(1)) if found else -1

    return sorted(programs, key=lambda program: (module_number(program), program.name))


def find_program(folder: Path, name: str, kind: str) -> Program:
    wanted = Path(name).name.removesuffix(".py")
    for program in list_programs(folder):
        if program.name == wanted:
            return program
    names = ", ".join(p.name for p in list_programs(folder)) or f"(none: {folder} holds no programs)"
    raise CourseError(f"Unknown {kind} {name!r}. Valid names: {names}")


def runs_on_ranks(program: Program) -> bool:
    """Whether the program can run on several MPI ranks: it says so with a top-level
    `RUNS_ON_RANKS = True` (read with `ast`, never imported). A program without it would run
    N independent copies, each printing and saving, so `--ranks` refuses it."""
    try:
        tree = ast.parse(program.path.read_text(encoding="utf-8"), filename=str(program.path))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RUNS_ON_RANKS" for t in node.targets)
               and isinstance(node.value, ast.Constant) and node.value.value is True for node in tree.body)


def run_program(settings: Settings, program: Program, args: list[str], ranks: int | None = None,
                notice: Callable[[str], None] | None = None) -> int:
    """Run a program from the repository root with the course's package; its output goes straight through.

    Ctrl-C (or SIGTERM/SIGHUP, which tito turns into Ctrl-C) is passed on to the program, which
    gets `INTERRUPT_GRACE_S` to clean up; `notice` hears what happens meanwhile. With `ranks`, on
    that many MPI processes through tito's launcher (module 21, `tito run`; the launcher kills its
    process group when it ends): refused (CourseError, nothing started) for a program that does not
    declare it runs on ranks."""
    if ranks is not None:
        if not runs_on_ranks(program):
            able = ", ".join(p.name for p in list_programs(program.path.parent) if runs_on_ranks(p)) or "none"
            raise CourseError(f"{program.name} does not run on several ranks (--ranks); the ones that do: {able}.")
        from .launch import run_ranks

        return run_ranks(settings.root, ranks, str(program.path), args, capture=False, cwd=settings.root).returncode
    command = [sys.executable, str(program.path), *args]
    _children_can_be_interrupted()
    process = subprocess.Popen(command, cwd=settings.root, env=course_env(settings.root), start_new_session=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        _interrupt(process, program.name, notice or (lambda text: None))
        raise


def _interrupt(process: subprocess.Popen, name: str, notice: Callable[[str], None]) -> None:
    """Ctrl-C to `process` (its own group), time to clean up, then the group killed (also at a second Ctrl-C)."""
    _signal_group(process.pid, signal.SIGINT)
    notice(f"Stopping {name}: it has {INTERRUPT_GRACE_S:g} s to clean up (Ctrl-C again to kill it now).")
    try:
        process.wait(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        notice(f"{name} did not stop within {INTERRUPT_GRACE_S:g} s: killed.")
    except KeyboardInterrupt:
        notice(f"{name} killed.")
    finally:
        _signal_group(process.pid, signal.SIGKILL)  # it, if it is still there, and whatever it left running
        process.wait()
