"""The tokenizer benchmark runs (smoke run: 100,000 characters, vocabulary 300)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tokenization_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/tokenization.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in ("BPE training", "Tokens per character"):
        assert heading in result.stdout
    assert "different merges" not in result.stdout
