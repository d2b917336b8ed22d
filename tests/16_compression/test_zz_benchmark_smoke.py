"""The compression benchmark runs (a smoke run: few repeats, targets printed but not judged). Named to
run after the module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import pytest

from benchmark_runs import check_benchmark


@pytest.mark.slow
def test_compression_benchmark_quick():
    check_benchmark("compression.py", ["MLP forward + backward", "GPT training step", "bytes of one 128 x 512 MLP weight",
                                      "training step", "not judged (--quick)"], timeout=600)
