"""Issue 31 (reliability round 3), neighbours: measure_latency's counts are whole numbers
(repeats=2.5 ran 2 calls, inf crashed with a raw OverflowError)."""
import pytest

from tinytorch.perf.profiling import measure_latency


@pytest.mark.parametrize("kwargs, message", [
    (dict(repeats=2.5), "repeats must be a whole number"), (dict(repeats=float("inf")), "repeats must be a whole number"),
    (dict(repeats=float("nan")), "repeats must be a whole number"), (dict(repeats=0), "repeats must be at least 1"),
    (dict(warmup=2.5), "warmup must be a whole number"), (dict(warmup=float("inf")), "warmup must be a whole number"),
    (dict(warmup=-1), "warmup must be at least 0"),
])
def test_counts_must_be_whole_numbers(kwargs, message):
    calls = []
    with pytest.raises(ValueError, match=f"measure_latency: {message}"):
        measure_latency(lambda: calls.append(1), **kwargs)
    assert calls == [], "refused before any call"


def test_whole_floats_still_count():
    calls = []
    timing = measure_latency(lambda: calls.append(1), warmup=1.0, repeats=3.0)
    assert len(calls) == 4 and len(timing.samples) == 3
