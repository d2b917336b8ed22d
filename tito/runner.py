"""Running Python in a child process against one course's own package.

Every program tito starts (a notebook as a script, pytest, a milestone) goes
through here, so they all see the same environment: the `tinytorch` of the
course they belong to comes first on the path (the virtual environment may
have a different checkout installed), and matplotlib never opens a window.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .faults import FAULT_ENV

# pytest's exit codes (pytest.ExitCode), spelled out so reports can name them.
PYTEST_EXIT = {
    0: "all tests passed",
    1: "some tests failed",
    2: "interrupted (usually a collection error)",
    3: "internal error",
    4: "usage error",
    5: "no tests collected",
}
_SUMMARY_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


INTERRUPT_GRACE_S = 5.0  # after Ctrl-C (SIGINT) a program gets this long to print where it was


@dataclass(frozen=True)
class ProcessResult:
    command: list[str]
    returncode: int  # 124 when it was stopped for running past its time limit
    output: str  # stdout and stderr, interleaved as the program wrote them
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def course_env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process that must use `root`'s tinytorch."""
    env = dict(os.environ)
    paths = [str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["MPLBACKEND"] = "Agg"  # notebooks that plot must not need a display
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONIOENCODING", "utf-8")
    env.pop(FAULT_ENV, None)  # a fault meant for tito itself, not for the programs it runs
    if extra:
        env.update(extra)
    return env


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has already exited


# The programs run_python is waiting for, by process group, so that an interrupted tito that
# runs jobs in threads (`side_by_side`) can stop them all: Ctrl-C reaches only the main thread.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set while side_by_side stops its jobs: run_python starts nothing new


def stopping() -> bool:
    """True while side_by_side stops its jobs: what a job finishes now was cut short, not a result."""
    return _STOPPING.is_set()


class Stopped(Exception):
    """run_python was asked to start a program while tito stops its jobs (an interrupt in the main thread)."""


@contextmanager
def side_by_side(jobs: int) -> Iterator[ThreadPoolExecutor]:
    """A pool of `jobs` threads for work that runs programs through run_python.

    Ctrl-C (or SIGTERM, which tito turns into Ctrl-C) reaches the main thread only; the
    programs the threads wait for would keep running, and the pool would wait for them.
    So on any exception here every such program's group is killed, the threads start
    nothing new (run_python raises `Stopped` in them), and the exception goes on.
    """
    _children_can_be_interrupted()  # from the main thread: the threads cannot set signal handlers
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        yield pool
    except BaseException:
        _STOPPING.set()
        try:
            with _RUNNING_LOCK:
                groups = list(_RUNNING)
            for group in groups:
                _signal_group(group, signal.SIGKILL)
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            _STOPPING.clear()
        raise
    pool.shutdown(wait=True)


def _children_can_be_interrupted() -> None:
    """Make sure the programs we start get a KeyboardInterrupt from our Ctrl-C.

    A process started in the background (`cmd &`, nohup, some CI runners) has SIGINT ignored,
    and an ignored signal stays ignored across exec: Python then installs no KeyboardInterrupt
    handler, our Ctrl-C at a timeout does nothing, and the message cannot say where the
    program was. A handler set here (Python's own) is reset to the default at exec instead.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread: signal handlers can only be set there
            pass


def run_python(args: list[str], cwd: Path, root: Path, timeout: float | None = None,
               env: dict[str, str] | None = None) -> ProcessResult:
    """`python ARGS` in `cwd` with `root`'s package first; output captured, never raises on failure.

    The program runs in its own process group. When it exits, whatever it left running
    (a child it started and forgot) is killed with the group, so it cannot keep tito
    waiting. Past `timeout` seconds it gets Ctrl-C (so Python and pytest print where they
    were), then, after a few seconds, the whole group is killed; `timed_out` says so.
    Output goes to a file, not a pipe: a grandchild holding the pipe open cannot stall us.
    `env` adds to (or overrides) the course environment, e.g. {"COLUMNS": "400"}.
    """
    command = [sys.executable, *args]
    _children_can_be_interrupted()
    start = time.perf_counter()
    timed_out = False
    with tempfile.TemporaryFile() as sink:
        with _RUNNING_LOCK:
            if _STOPPING.is_set():
                raise Stopped("tito is stopping: nothing new is started")
            process = subprocess.Popen(command, cwd=cwd, env=course_env(root, env), stdin=subprocess.DEVNULL,
                                       stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
            _RUNNING.add(process.pid)
        try:
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _signal_group(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=INTERRUPT_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
                code = 124
        finally:
            _signal_group(process.pid, signal.SIGKILL)  # leftovers; and the child itself if tito was interrupted
            process.wait()
            with _RUNNING_LOCK:
                _RUNNING.discard(process.pid)
        sink.seek(0)
        output = sink.read().decode("utf-8", "replace")
    if timed_out:
        output += f"\n[tito] stopped after {timeout:.0f} s"
    return ProcessResult(command, code, output, time.perf_counter() - start, timed_out)


def pytest_counts(output: str) -> dict[str, int]:
    """Counts from pytest's closing summary line, e.g. {"failed": 3, "passed": 2}."""
    lines = [l for l in output.strip().splitlines() if l.strip()]
    summary = lines[-1] if lines else ""
    counts: dict[str, int] = {}
    for number, word in _SUMMARY_COUNT.findall(summary):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def describe_pytest(result: ProcessResult) -> str:
    """A short human reading of a pytest run: its summary counts, or what its exit code means."""
    counts = pytest_counts(result.output)
    if counts:
        return ", ".join(f"{n} {k}" for k, n in counts.items())
    return PYTEST_EXIT.get(result.returncode, f"exit code {result.returncode}")
