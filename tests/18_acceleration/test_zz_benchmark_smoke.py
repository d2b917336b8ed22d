"""The acceleration benchmark runs (a smoke run: few repeats). Named to run after the module's own
tests, so a mistake is reported by the test that names it, not by the benchmark."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_acceleration_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/acceleration.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    for line in ("Profile of one forward + backward, fused", "training step, fused, allocator default",
                 "bias + GELU (768 × 512)", "AdamW step", "convolution", "blocked 512³, tile 64"):
        assert line in result.stdout, f"{line!r} missing from the benchmark's output"
