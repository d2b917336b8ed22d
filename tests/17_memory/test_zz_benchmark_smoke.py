"""The memory benchmark runs (a smoke run: short sequences, one repeat). Named to run after the
module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import pytest

from benchmark_runs import check_benchmark


@pytest.mark.slow
def test_memory_benchmark_quick():
    check_benchmark("memory.py", ["checkpointed blocks against keeping everything", "KV cache", "float16 / float32",
                                 "Peak memory of a training step"])
