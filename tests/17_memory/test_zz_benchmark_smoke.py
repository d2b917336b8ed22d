"""The memory benchmark runs (a smoke run: short sequences, one repeat). Named to run after the
module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_memory_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/memory.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in ("checkpointed blocks against keeping everything", "KV cache", "float16 / float32",
                    "Peak memory of a training step"):
        assert heading in result.stdout, heading
