"""The GPT benchmark runs (a smoke run: few repeats, short generations). Named to run after the
module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import pytest

from benchmark_runs import check_benchmark


@pytest.mark.slow
def test_gpt_benchmark_quick():
    check_benchmark("gpt.py", ["GPT training step", "Generation, tokens per second", "peak memory"])
