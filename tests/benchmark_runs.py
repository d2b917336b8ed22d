"""The one helper of the benchmark smoke tests (tests/NN_*/test_zz_benchmark_smoke.py): run a script of
benchmarks/ as a user would, from the repository's root with the package on PYTHONPATH, and check
that it ended well and printed each of its parts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python benchmarks/<script> <args>` from the repository's root; returns what it printed, unchecked."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def check_benchmark(script: str, parts: list[str], *args: str, timeout: float = 900) -> str:
    """Run the script's smoke run (`--quick` and `args`); assert it exits 0 and prints every text in
    `parts` (a table's title, a row's name). Returns its standard output."""
    result = run_benchmark(script, "--quick", *args, timeout=timeout)
    assert result.returncode == 0, f"benchmarks/{script} --quick failed:\n{result.stdout}{result.stderr}"
    for text in parts:
        assert text in result.stdout, f"{text!r} missing from the output of benchmarks/{script} --quick:\n{result.stdout}"
    return result.stdout
