"""Running a program of 21_distributed/programs/ on N ranks for module 21's tests (through tito's launcher).

Each program asserts nothing itself: every rank prints one `RESULT {json}` line with what it
found (its `problems`, in the student's terms, and the values the tests check), and the tests
read those lines. A launch per (program, ranks) is made once and shared by the tests that read
it. Without mpi4py or an mpiexec the tests that need ranks are skipped, saying why.
"""
from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = Path(__file__).resolve().parent / "21_distributed" / "programs"
TIME_LIMIT_S = 120  # a launch that takes longer has hung: every rank is killed, the test fails


def mpi_missing() -> str | None:
    """Why ranks cannot be started here, or None."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'mpi4py>=4.1' mpich)"
    if not (Path(sys.executable).parent / "mpiexec").is_file() and shutil.which("mpiexec") is None:
        return "no mpiexec (pip install mpich, or load the cluster's MPI)"
    return None


requires_mpi = pytest.mark.skipif(mpi_missing() is not None, reason=f"needs MPI: {mpi_missing()}")


def read_results(output: str) -> list[dict]:
    """Every `RESULT {json}` printed by the ranks (their lines may interleave), in rank order."""
    decoder, results = json.JSONDecoder(), []
    at = output.find("RESULT ")
    while at >= 0:
        value, end = decoder.raw_decode(output, at + len("RESULT "))
        results.append(value)
        at = output.find("RESULT ", end)
    return sorted(results, key=lambda r: r["rank"])


@functools.lru_cache(maxsize=None)
def launch(program: str, ranks: int):
    """The ProcessResult of programs/<program>.py on `ranks` ranks (once per pair)."""
    from tito.launch import run_ranks

    return run_ranks(ROOT, ranks, str(PROGRAMS / f"{program}.py"), timeout=TIME_LIMIT_S)


def results_of(program: str, ranks: int) -> list[dict]:
    """What each rank of programs/<program>.py reported; fails with the ranks' output when a rank
    failed (a stub's NotImplementedError is named there) or the run passed its time limit."""
    result = launch(program, ranks)
    assert result.returncode == 0, (
        f"{program} on {ranks} ranks failed (exit {result.returncode}{', time limit' if result.timed_out else ''}):\n"
        + result.tail(30))
    rows = read_results(result.output)
    assert [r["rank"] for r in rows] == list(range(ranks)), (
        f"{program} on {ranks} ranks: expected one RESULT line per rank, got ranks {[r['rank'] for r in rows]}:\n"
        + result.tail(30))
    return rows


def problems(rows: list[dict], key: str = "problems") -> list[str]:
    return [f"rank {r['rank']}: {p}" for r in rows for p in r[key]]
