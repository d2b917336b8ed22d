"""Module 19, section 3: measure — warm-up, interleaved rounds in a rotating order (with a fake clock)."""
import numpy as np
import pytest

from tinytorch.perf.benchmarking import measure
from tinytorch.perf.profiling import FakeClock


def fake_variants(costs, first_cost=100.0):
    """Variants that advance a fake clock: `first_cost` on their first call, then their own cost."""
    fake, calls = FakeClock(), []

    def make(name, seconds):
        def run():
            calls.append(name)
            fake.advance(first_cost if calls.count(name) == 1 else seconds)
        return run
    return fake, calls, {name: make(name, seconds) for name, seconds in costs.items()}


def test_warmup_calls_are_not_readings():
    fake, calls, variants = fake_variants({"A": 1.0, "B": 2.0})
    result = measure(variants, repeats=5, warmup=2, clock=fake)
    assert len(result["A"].samples) == 5, \
        f"5 readings per variant (warm-up calls are not readings), got {len(result['A'].samples)}"
    assert np.all(result["A"].samples == 1.0) and np.all(result["B"].samples == 2.0), (
        f"readings {result['A'].samples} and {result['B'].samples}: the slow first call (100 s) was timed; "
        "call every variant `warmup` times before the first reading")
    assert len(calls) == 2 * 2 + 5 * 2, \
        f"2 warm-up rounds + 5 timed rounds of 2 variants = 14 calls, got {len(calls)}: {''.join(calls)}"


def test_rounds_are_interleaved():
    fake, calls, variants = fake_variants({"A": 1.0, "B": 2.0, "C": 3.0})
    measure(variants, repeats=6, warmup=0, clock=fake)
    rounds = ["".join(calls[i:i + 3]) for i in range(0, 18, 3)]
    assert all(sorted(r) == ["A", "B", "C"] for r in rounds), (
        f"rounds {rounds}: every round must call each variant once (interleaved), not all the repeats of "
        "one variant and then the next")


def test_order_rotates_each_round():
    fake, calls, variants = fake_variants({"A": 1.0, "B": 2.0, "C": 3.0})
    measure(variants, repeats=4, warmup=1, clock=fake)
    timed = "".join(calls[3:])
    assert timed == "ABC" "BCA" "CAB" "ABC", (
        f"timed calls {timed}: rotate the order each round (round r starts at variant r % k) so no variant "
        "always runs right after the same other one")


def test_readings_and_keys():
    fake, _, variants = fake_variants({"slow": 3.0, "fast": 1.0})
    result = measure(variants, repeats=3, warmup=1, clock=fake)
    assert list(result) == ["slow", "fast"], f"keys in the order of the variants, got {list(result)}"
    assert result["slow"].name == "slow" and result["slow"].median == 3.0 and result["fast"].median == 1.0, (
        f"each Measurement carries its variant's name and readings: got {result['slow'].name!r} with median "
        f"{result['slow'].median} (want 'slow', 3.0) and median {result['fast'].median} for 'fast' (want 1.0)")


def test_sync_runs_before_each_reading():
    fake, events = FakeClock(), []
    wait = lambda: (events.append("sync"), fake.advance(0.5))  # noqa: E731  the GPU finishing queued work
    result = measure({"A": lambda: events.append("A")}, repeats=3, warmup=1, clock=fake, sync=wait)
    assert np.all(result["A"].samples == 0.5), \
        f"readings {result['A'].samples}: wait for the device (sync) before reading the clock"


def test_measure_refuses_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        measure({}, repeats=3)
    with pytest.raises(ValueError, match="repeats"):
        measure({"a": lambda: None}, repeats=0)
