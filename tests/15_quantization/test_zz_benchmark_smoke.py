"""The quantization benchmark runs (a smoke run: an untrained GPT of the recipe, few batches and epochs). Named
to run after the module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quantization_benchmark_quick(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/quantization.py", "--quick",
                             "--checkpoint", str(tmp_path / "absent.npz")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "UNTRAINED" in result.stdout, "--quick without a saved model says its GPT numbers mean nothing"
    for heading in ("1. the GPT", "2. the digits", "3. integer against float"):
        assert heading in result.stdout
    assert re.search(r"GPT int4 weight-only, per channel +loss [0-9.]+ .*[0-9,]+ bytes", result.stdout)
    refused = subprocess.run([sys.executable, "benchmarks/quantization.py", "--quick", "--write-results"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "smoke run" in refused.stderr
