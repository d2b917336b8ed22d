"""The attention benchmark and the README's heatmap script run (smoke runs, small sizes)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_attention_benchmark_quick():
    result = run("benchmarks/attention.py", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in ("Forward + backward", "Peak memory", "Time per doubling"):
        assert heading in result.stdout


@pytest.mark.slow
def test_make_heatmap_writes_a_png(tmp_path):
    target = tmp_path / "heatmap.png"
    result = run("benchmarks/make_heatmap.py", "--output", str(target))
    assert result.returncode == 0, result.stdout + result.stderr
    assert target.read_bytes()[:4] == b"\x89PNG" and target.stat().st_size > 10_000
    again = run("benchmarks/make_heatmap.py", "--output", str(target))
    assert "up to date" in again.stdout  # seeded: the same bytes every time
