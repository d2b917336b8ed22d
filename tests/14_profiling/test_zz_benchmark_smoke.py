"""The profiler-overhead benchmark runs (a smoke run: few repeats). Named to run after the module's own
tests, so a mistake is reported by the test that names it, not by the benchmark."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_profiler_overhead_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/profiler_overhead.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in ("Nobody listening", "A running profiler on the GPT training step", "profiler overhead"):
        assert heading in result.stdout, result.stdout
