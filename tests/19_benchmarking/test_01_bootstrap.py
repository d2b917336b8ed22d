"""Module 19, section 2: bootstrap_ci (the interval of the median) and Measurement."""
import numpy as np
import pytest

from tinytorch.perf.benchmarking import Measurement, bootstrap_ci


def recipe(samples, confidence=0.95, resamples=2000, seed=0):
    x = np.asarray(samples, dtype=np.float64).ravel()
    idx = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    tail = (1 - confidence) / 2
    return tuple(np.quantile(np.median(x[idx], axis=1), [tail, 1 - tail]))


def test_bootstrap_resamples_with_replacement():
    samples = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0])
    low, high = bootstrap_ci(samples)
    assert high - low > 0, ("the interval has width 0: every resample had the same median. Draw the resamples "
                            "WITH replacement (rng.integers(0, n, size=(resamples, n))), not as permutations")


def test_bootstrap_is_the_interval_of_the_median_not_the_mean():
    samples = np.array([10.0] * 6 + [10.5] * 6 + [500.0])  # one huge outlier, as a descheduled reading is
    low, high = bootstrap_ci(samples)
    assert 10.0 <= low <= high <= 10.5, (f"[{low}, {high}]: the interval of the MEDIAN of these readings stays "
                                         "within 10..10.5; one outlier moved it (was it the mean?)")


def test_bootstrap_follows_the_recipe():
    samples = np.random.default_rng(3).exponential(1.0, size=17)
    for confidence, resamples, seed in ((0.95, 2000, 0), (0.9, 500, 7), (0.5, 100, 1)):
        got = bootstrap_ci(samples, confidence=confidence, resamples=resamples, seed=seed)
        expected = recipe(samples, confidence, resamples, seed)
        assert np.allclose(got, expected), (
            f"confidence={confidence}: expected {expected}, got {got}. Check the tails: (1 - confidence) / 2 on "
            "EACH side (np.quantile(medians, [tail, 1 - tail])), the seed (np.random.default_rng(seed)) and the "
            "index shape (resamples, n)")


def test_bootstrap_is_reproducible_and_returns_floats():
    samples = np.arange(1.0, 12.0)
    first, second = bootstrap_ci(samples, seed=4), bootstrap_ci(samples, seed=4)
    assert first == second, f"the same seed must give the same interval: {first} then {second}"
    assert all(type(v) is float for v in first), f"return Python floats, got {[type(v) for v in first]}"
    assert bootstrap_ci([2.5]) == (2.5, 2.5), "one sample: the interval is that sample twice"


def test_bootstrap_wider_at_higher_confidence():
    samples = np.random.default_rng(0).normal(size=40)
    l90, h90 = bootstrap_ci(samples, confidence=0.9)
    l99, h99 = bootstrap_ci(samples, confidence=0.99)
    assert l99 <= l90 and h90 <= h99, "a 99% interval contains the 90% interval of the same resamples"


def test_bootstrap_refuses_bad_input():
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=1.5)


def test_measurement_fields_and_percentiles():
    readings = np.array([5, 1, 4, 2, 3, 9, 6, 8, 7, 10], dtype=float) / 1000
    m = Measurement("x", readings)
    assert m.unit == "s" and m.samples.dtype == np.float64, f"unit 's' and float64 samples, got {m.unit!r}, {m.samples.dtype}"
    assert m.median == pytest.approx(0.0055), f"the median of 1..10 ms is 5.5 ms, got {m.median * 1e3} ms"
    assert (m.low, m.high) == bootstrap_ci(readings), \
        f"the interval {(m.low, m.high)} must be bootstrap_ci(samples): {bootstrap_ci(readings)}"
    assert m.p50 == pytest.approx(np.percentile(readings, 50)) and m.p90 == pytest.approx(np.percentile(readings, 90)), \
        f"p50 and p90 are np.percentile(samples, 50 and 90), got {m.p50} and {m.p90}"
    assert "ms" in str(m) and "x:" in str(m)
    assert Measurement("r", [100.0, 120.0], unit="tokens/s").higher_is_better
    assert not m.higher_is_better
