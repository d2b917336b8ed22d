"""The benchmarking benchmark runs (a smoke run: few epochs and readings). Named to run after the module's
own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_benchmarking_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/benchmarking.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    for text in ("1. the digits MLP", "three runs, batch-1 latency", "2. the GPT", "| pruned-30% |", "Pareto"):
        assert text in result.stdout, text
