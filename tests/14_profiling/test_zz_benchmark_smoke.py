"""The profiler-overhead benchmark runs (a smoke run: few repeats). Named to run after the module's own
tests, so a mistake is reported by the test that names it, not by the benchmark."""
import pytest

from benchmark_runs import check_benchmark


@pytest.mark.slow
def test_profiler_overhead_benchmark_quick():
    check_benchmark("profiler_overhead.py", ["Nobody listening", "A running profiler on the GPT training step", "profiler overhead"], timeout=600)
