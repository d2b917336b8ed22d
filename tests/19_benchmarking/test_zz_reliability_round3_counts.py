"""Issue 31 (reliability round 3), neighbours in module 19: counts are whole numbers, and paired
scores are finite (accuracy(batch_size=-1) scored 0.0 without calling the model; paired_difference
returned (nan, nan, nan) for a diverged model's NaN loss; bootstrap_ci(resamples=inf) crashed)."""
import numpy as np
import pytest

from tinytorch.perf.benchmarking import accuracy, bootstrap_ci, lm_window_losses, measure, paired_difference


@pytest.mark.parametrize("batch_size", [-1, 0, 2.5, float("nan")])
def test_accuracy_batch_size_is_a_whole_number_at_least_one(batch_size):
    calls = []

    def model(x):
        calls.append(1)
        return x
    with pytest.raises(ValueError, match="accuracy: batch_size must be"):
        accuracy(model, np.eye(3, dtype=np.float32), np.arange(3), batch_size=batch_size)
    assert calls == []


@pytest.mark.parametrize("kwargs", [dict(batch_size=0), dict(batch_size=-2), dict(batch_size=1.5), dict(max_batches=0),
                                    dict(max_batches=float("inf"))])
def test_lm_window_losses_counts(kwargs):
    with pytest.raises(ValueError, match="lm_window_losses: (batch_size|max_batches) must be"):
        lm_window_losses(lambda x: np.zeros(np.shape(x) + (5,)), np.arange(40) % 5, 4, **kwargs)


@pytest.mark.parametrize("resamples", [float("inf"), 2.5, 0])
def test_bootstrap_resamples(resamples):
    with pytest.raises(ValueError, match="bootstrap_ci: resamples must be"):
        bootstrap_ci([1.0, 2.0, 3.0], resamples=resamples)


@pytest.mark.parametrize("kwargs", [dict(repeats=float("inf")), dict(repeats=2.5), dict(warmup=1.5)])
def test_measure_counts(kwargs):
    with pytest.raises(ValueError, match="measure: (repeats|warmup) must be a whole number"):
        measure({"a": lambda: None}, **kwargs)


@pytest.mark.parametrize("a, b, says", [([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "1 not finite"),
                                        ([1.0, 2.0], [1.0, 2.0, 3.0], "got 2 and 3 values"),
                                        ([], [], "got 0 and 0 values")])
def test_paired_difference_needs_finite_pairs(a, b, says):
    with pytest.raises(ValueError, match=f"paired_difference: a and b must be paired scores.*{says}"):
        paired_difference(a, b)


def test_paired_difference_of_finite_scores_is_unchanged():
    mean, low, high = paired_difference([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    assert (mean, low, high) == (1.0, 1.0, 1.0)
