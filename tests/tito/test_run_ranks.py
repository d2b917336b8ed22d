"""`tito run --ranks N PROGRAM`: N MPI ranks through mpiexec + mpi4py's runner; a failing rank
fails the run, a time limit stops all ranks, and a missing MPI is named with what to install."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from distributed_ranks import read_results, requires_mpi
from tito import launch
from tito.course import CourseError

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = '''
import json, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
if "fail" in sys.argv and comm.rank == 1:
    raise ValueError("rank 1 fails on purpose")
if "hang" in sys.argv:
    comm.recv(source=(comm.rank + 1) % comm.size)  # nobody sends: every rank waits forever
print("RESULT " + json.dumps({"rank": comm.rank, "size": comm.size, "args": sys.argv[1:]}))
'''


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "ranks.py"
    path.write_text(PROGRAM, encoding="utf-8")
    return path


@requires_mpi
def test_four_ranks_on_any_machine_get_their_arguments(program):
    result = launch.run_ranks(ROOT, 4, str(program), ["a", "--b"], timeout=120)  # more ranks than cores is allowed
    assert result.returncode == 0, result.tail()
    rows = read_results(result.output)
    assert [(r["rank"], r["size"], r["args"]) for r in rows] == [(r, 4, ["a", "--b"]) for r in range(4)]


@requires_mpi
def test_a_failing_rank_fails_the_command(course, program):
    done = course.tito_process("run", "--ranks", "2", "--timeout", "120", str(program), "fail")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "rank 1 fails on purpose" in done.stdout + done.stderr
    assert "Failed" in done.stdout and "exited with status" in done.stdout


@requires_mpi
def test_a_rank_of_module_21_that_raises_fails_the_run_quickly():
    """Rank 1 raises while rank 0 waits for its message in module 21's World: not a hang."""
    program = ROOT / "tests" / "21_distributed" / "programs" / "failing.py"
    result = launch.run_ranks(ROOT, 2, str(program), timeout=120)
    assert result.returncode != 0 and not result.timed_out, (
        f"rank 1 raised while rank 0 waited for it: the run must fail (exit {result.returncode}, "
        f"timed out: {result.timed_out})")
    assert "rank 1 fails on purpose" in result.output
    assert result.seconds < 60, f"the failure took {result.seconds:.0f} s to end the run"


@requires_mpi
def test_the_time_limit_stops_every_rank(program):
    result = launch.run_ranks(ROOT, 2, str(program), ["hang"], timeout=3)
    assert result.timed_out and result.returncode == 124
    assert result.seconds < 60, f"the ranks were stopped only after {result.seconds:.0f} s"
    assert "stopped all 2 ranks after 3 s" in result.output


def test_wrong_input_is_refused_before_anything_starts(course, program, tmp_path):
    done = course.tito("run", "--ranks", "0", str(program))
    assert done.returncode == 1 and "--ranks must be a whole number >= 1, got 0" in done.stdout
    missing = tmp_path / "nowhere.py"
    done = course.tito("run", "--ranks", "2", str(missing))
    assert done.returncode == 1 and f"No program {str(missing)!r}" in done.stdout
    done = course.tito("run", "--ranks", "2", "--timeout", "0", str(program))
    assert done.returncode == 1 and "--timeout must be a positive number" in done.stdout


def test_missing_mpiexec_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CourseError, match="No MPI launcher") as err:
        launch.find_mpiexec()
    assert "pip install" in str(err.value) and "mpich" in str(err.value)


def test_missing_mpi4py_says_what_to_install(monkeypatch, program):
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CourseError, match="mpi4py is not installed") as err:
        launch.launch_command(2, str(program), [])
    assert "--no-binary mpi4py" in str(err.value), "the message also says how to use a cluster's own MPI"


def test_open_mpi_is_told_to_oversubscribe(monkeypatch, tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.3'\n", encoding="utf-8")
    fake.chmod(0o755)
    assert launch._oversubscribe_flags(str(fake)) == ["--oversubscribe"]
    fake.write_text("#!/bin/sh\necho 'HYDRA build details:'\n", encoding="utf-8")
    assert launch._oversubscribe_flags(str(fake)) == []
