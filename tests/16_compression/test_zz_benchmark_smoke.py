"""The compression benchmark runs (a smoke run: few repeats, targets printed but not judged). Named to
run after the module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_compression_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/compression.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in ("MLP forward + backward", "GPT training step", "bytes of one 128 x 512 MLP weight",
                    "training step", "not judged (--quick)"):
        assert heading in result.stdout, heading
