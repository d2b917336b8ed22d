"""The benchmarking benchmark runs (a smoke run: few epochs and readings). Named to run after the module's
own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import pytest

from benchmark_runs import check_benchmark


@pytest.mark.slow
def test_benchmarking_benchmark_quick():
    check_benchmark("benchmarking.py", ["1. the digits MLP", "three runs, batch-1 latency", "2. the GPT", "| pruned-30% |", "Pareto"])
