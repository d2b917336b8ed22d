"""Module 19, section 4: compare — ratio, the interval of the difference, the verdict."""
import numpy as np
import pytest

from tinytorch.perf.benchmarking import Measurement, compare, ranking


def spread(name, centre, unit="s", n=15):
    return Measurement(name, centre * np.linspace(0.98, 1.02, n), unit)


def test_ratio_is_a_over_b():
    result = compare(spread("a", 3.0), spread("b", 1.0))
    assert result.ratio == pytest.approx(3.0), f"ratio = median(a) / median(b) = 3.0, got {result.ratio}"
    assert result.difference == pytest.approx(2.0), (
        f"difference of a (median 3.0) and b (median 1.0): expected +2.0, got {result.difference}: the difference is "
        "median(a) - median(b), a minus b, the same way round as the ratio and difference_ci(a, b)")


def test_overlapping_intervals_are_no_measurable_difference():
    a, b = spread("a", 1.0), spread("b", 1.005)
    assert a.low <= b.high and b.low <= a.high
    assert compare(a, b).verdict == "no measurable difference", (
        f"the intervals overlap ([{a.low:.4f}, {a.high:.4f}] and [{b.low:.4f}, {b.high:.4f}]): expected exactly "
        f"'no measurable difference', got {compare(a, b).verdict!r}; compare intervals, not medians")
    assert compare(a, b).winner is None



def test_identical_exact_measurements_are_no_measurable_difference():
    # Every reading 1.0 s on both sides: each interval is the single point [1.0, 1.0]. Intervals that share
    # even one point overlap; strict comparisons (a.low < b.high) call two identical measurements different.
    a, b = Measurement("a", np.full(9, 1.0)), Measurement("b", np.full(9, 1.0))
    assert (a.low, a.high, b.low, b.high) == (1.0, 1.0, 1.0, 1.0)
    verdict = compare(a, b).verdict
    assert verdict == "no measurable difference", (
        f"two identical measurements (every reading 1.0 s, both intervals [1.0, 1.0]) got {verdict!r}: intervals that "
        "touch overlap; use <= in the overlap test (a.low <= b.high and b.low <= a.high), not <")

def test_smaller_time_is_faster_whichever_side():
    slow, fast = spread("slow", 2.0), spread("fast", 1.0)
    assert compare(slow, fast).verdict == "fast is faster", f"got {compare(slow, fast).verdict!r}"
    assert compare(fast, slow).verdict == "fast is faster", f"got {compare(fast, slow).verdict!r}"
    assert compare(fast, slow).winner == "fast"


def test_higher_rate_is_faster():
    low, high = spread("low", 100.0, "tokens/s"), spread("high", 300.0, "tokens/s")
    assert compare(low, high).verdict == "high is faster", (
        f"for a rate (unit ending in /s) more is better: expected 'high is faster', got {compare(low, high).verdict!r}")


def other_unit_slip(verdict):
    """Why compare gave `verdict` for two byte counts (small 1.0, big 5.0) instead of 'small is better'."""
    if verdict == "small is faster":
        return ("the word: only the units 's' and rates ending in '/s' say 'faster'; every other unit (here "
                "bytes) says 'better'")
    if verdict.startswith("big is"):
        return ("the winner: for every unit that does not end in '/s' (seconds, bytes, ...) the SMALLER median "
                "wins; only rates (higher_is_better) want the larger")
    return "for a unit other than 's' and '/s' the smaller median wins and the verdict says 'better'"


def test_other_units_say_better():
    small, big = spread("small", 1.0, "bytes"), spread("big", 5.0, "bytes")
    for a, b in ((big, small), (small, big)):
        verdict = compare(a, b).verdict
        assert verdict == "small is better", (
            f"compare({a.name}, {b.name}) in bytes (medians {a.median} and {b.median}): expected exactly "
            f"'small is better', got {verdict!r}: {other_unit_slip(verdict)}")


def test_difference_interval():
    result = compare(spread("slow", 2.0), spread("fast", 1.0))
    assert 0 < result.difference_low <= result.difference <= result.difference_high, \
        f"[{result.difference_low}, {result.difference_high}] must hold the difference {result.difference}"
    assert "no measurable difference" in str(compare(spread("a", 1.0), spread("b", 1.0)))


def test_units_must_match():
    with pytest.raises(ValueError, match="unit"):
        compare(spread("a", 1.0), spread("b", 1.0, "tokens/s"))


def test_ranking_best_first():
    times = {n: spread(n, c) for n, c in (("b", 2.0), ("a", 1.0), ("c", 3.0))}
    assert ranking(times) == ["a", "b", "c"]
    rates = [spread(n, c, "tokens/s") for n, c in (("b", 2.0), ("a", 1.0), ("c", 3.0))]
    assert ranking(rates) == ["c", "b", "a"]
