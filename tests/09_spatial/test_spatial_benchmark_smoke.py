"""The convolution benchmark runs (a smoke run, small sizes), so that the script cannot rot.

Named test_spatial_benchmark_smoke.py so that it sorts after test_spatial.py: with `-x`
(`tito release check`), a mistake in the module is reported by the test that names its
cause before this program-level test runs.
"""
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
def test_conv_benchmark_quick():
    result = run("benchmarks/conv.py", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in ("Forward + backward", "Memory of Conv2d", "Time as the image grows"):
        assert heading in result.stdout, f"the benchmark printed no '{heading}' table:\n{result.stdout}"
    assert "Conv2d(3, 16, 3, padding=1) fwd+bwd" in result.stdout


@pytest.mark.slow
def test_conv_benchmark_writes_its_own_section_only(tmp_path, monkeypatch):
    """--write-results replaces the convolution section of RESULTS.md and leaves the others alone."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # where the script finds _common, as when run

    spec = importlib.util.spec_from_file_location("conv_bench", ROOT / "benchmarks" / "conv.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Attention (module 12)\n\nkept\n\n"
                       "## Convolution (module 09)\n\nold numbers\n\n## Later\n\nkept too\n", encoding="utf-8")
    bench.RESULTS = results
    args = type("Args", (), {"repeats": 1, "memory_batch": 1, "scaling_batch": 1, "scaling_repeats": 1})()
    row = {"name": "Conv2d", "ours": 0.002, "torch": 0.001}
    bench.write_results(bench._common.machine(), [row], [{"side": 8, "input": 1, "cols": 9, "peak": 30}],
                        [{"side": 8, "ours": 0.001, "torch": 0.001}], args)
    text = results.read_text(encoding="utf-8")
    assert "old numbers" not in text and "| Conv2d | 2.00 ms | 1.00 ms | 2.00× |" in text
    assert text.count("## Convolution (module 09)") == 1 and "kept\n" in text and "kept too" in text
