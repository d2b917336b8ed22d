"""`tito run --ranks N PROGRAM [ARGS]`: a Python program on N MPI processes (module 21).

The launcher is MPI's own `mpiexec` (MPICH's, from the `mpich` wheel the course installs, or a
cluster's), and every rank runs `python -m mpi4py PROGRAM ARGS`: mpi4py's runner calls
`MPI_Abort` when a rank's program raises, so one failing rank ends all of them instead of
leaving the others waiting for a message that never comes. On top of that, a time limit
(`timeout`) stops the whole process group, so a run can never hang a test or a terminal.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .course import CourseError
from .runner import ProcessResult, _signal_group, course_env

INSTALL_HINT = ("Install MPI for Python with `pip install \"mpi4py>=4.1\" mpich` (MPICH's wheel brings "
                "mpiexec; `pip install -e .` installs both), or on a cluster load its MPI and build mpi4py "
                "against it: `pip install --no-binary mpi4py mpi4py`.")


def find_mpiexec() -> str:
    """The `mpiexec` to use: the one beside this Python (a virtual environment's, from the mpich
    wheel) first, then the first on PATH. CourseError with what to install when there is none."""
    beside_python = Path(sys.executable).parent / "mpiexec"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    found = shutil.which("mpiexec")
    if found is None:
        raise CourseError(f"No MPI launcher: `mpiexec` is neither beside {sys.executable} nor on PATH. "
                          + INSTALL_HINT)
    return found


def check_mpi4py() -> None:
    """CourseError with what to install when this Python cannot import mpi4py."""
    if importlib.util.find_spec("mpi4py") is None:
        raise CourseError(f"mpi4py is not installed for {sys.executable}. " + INSTALL_HINT)


def _oversubscribe_flags(mpiexec: str) -> list[str]:
    """Flags that let N ranks share fewer cores. MPICH's launcher (Hydra) allows it by default;
    Open MPI refuses more ranks than cores unless told `--oversubscribe`."""
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return ["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []


def launch_command(ranks: int, program: str, args: list[str]) -> list[str]:
    """The command line that runs `python -m mpi4py PROGRAM ARGS` on `ranks` processes.

    Checks everything before anything starts: `ranks` a whole number >= 1, PROGRAM an existing
    file, mpi4py importable, an mpiexec found (each a CourseError saying what to do)."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise CourseError(f"--ranks must be a whole number >= 1, got {ranks!r}.")
    if not Path(program).is_file():
        raise CourseError(f"No program {program!r}: give the path of a Python file to run on every rank.")
    check_mpi4py()
    mpiexec = find_mpiexec()
    return [mpiexec, *_oversubscribe_flags(mpiexec), "-n", str(ranks),
            sys.executable, "-m", "mpi4py", program, *args]


def run_ranks(root: Path, ranks: int, program: str, args: list[str] | None = None, *,
              timeout: float | None = None, capture: bool = True, cwd: Path | None = None) -> ProcessResult:
    """Run PROGRAM ARGS on `ranks` MPI processes with `root`'s tinytorch first on the path.

    Returns a ProcessResult: returncode 0 only when every rank exited 0 (mpiexec's status),
    124 with `timed_out` when the run passed `timeout` seconds (the launcher and every rank
    are then killed as one process group). `capture=False` lets the ranks' output go straight
    to this terminal (`tito run`); otherwise it is collected, all ranks interleaved, in
    `output` (tests read it). Raises CourseError before starting anything when the input or
    the installation is wrong (see `launch_command`).
    """
    if timeout is not None and not timeout > 0:
        raise CourseError(f"--timeout must be a positive number of seconds, got {timeout!r}.")
    command = launch_command(ranks, program, list(args or []))
    env = course_env(Path(root), {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    start = time.perf_counter()
    timed_out = False
    with tempfile.TemporaryFile() as sink:
        out = sink if capture else None
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT if capture else None, start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out, code = True, 124
        finally:
            _signal_group(process.pid, signal.SIGKILL)  # a rank left behind, or all of them after the time limit
            process.wait()
        sink.seek(0)
        output = sink.read().decode("utf-8", "replace")
    if timed_out:
        output += f"\n[tito] stopped all {ranks} ranks after {timeout:g} s"
    return ProcessResult(command, code, output, time.perf_counter() - start, timed_out)
