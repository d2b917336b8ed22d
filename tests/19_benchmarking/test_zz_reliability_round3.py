"""Issue 31 (reliability round 3): NaN in module 19's quality numbers.

accuracy() gave 1.0 to a model whose logits are all NaN (NumPy's arg-max calls the first NaN the
largest: every row predicted class 0, and the labels were 0); pareto_front put a NaN-loss variant
on the front (NaN compares False with everything, so nothing dominated it). Both now refuse NaN
with a ValueError naming the examples or the row.
"""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.perf.benchmarking import accuracy, pareto_front, pareto_table


def nan_model(x):
    return Tensor(np.full((len(x), 3), np.nan, np.float32))


def test_accuracy_refuses_all_nan_logits_instead_of_scoring_one():
    with pytest.raises(ValueError, match=r"logits hold NaN for 4 of examples 0…3 \(the first: example 0\)"):
        accuracy(nan_model, np.zeros((4, 2), np.float32), np.zeros(4, dtype=int))


def test_accuracy_names_the_first_example_with_a_nan_row():
    def one_nan_row(x):
        logits = np.eye(3, dtype=np.float32)[np.zeros(len(x), dtype=int)]
        if len(x) and x.data[0, 0] >= 5:  # examples 5..9 arrive together with batch_size=5
            logits[2, 1] = np.nan
        return Tensor(logits)

    x = np.arange(10, dtype=np.float32)[:, None]
    with pytest.raises(ValueError, match=r"for 1 of examples 5…9 \(the first: example 7\)"):
        accuracy(one_nan_row, x, np.zeros(10, dtype=int), batch_size=5)


def test_infinite_logits_still_predict():
    """+inf is a (very confident) prediction, not a missing one: only NaN is refused."""
    logits = np.array([[np.inf, 0.0], [0.0, np.inf]], np.float32)
    assert accuracy(lambda x: Tensor(logits[: len(x)]), np.zeros((2, 1)), np.array([0, 1])) == 1.0


ROWS = [{"name": "fast", "loss": 2.0, "ms": 1.0}, {"name": "good", "loss": 1.0, "ms": 5.0}]


@pytest.mark.parametrize("key", ["loss", "ms"])
def test_pareto_front_refuses_a_nan_variant_instead_of_putting_it_on_the_front(key):
    diverged = {"name": "diverged", "loss": 1.5, "ms": 3.0, key: float("nan")}
    with pytest.raises(ValueError, match=rf"row 'diverged' has {key} = nan"):
        pareto_front(ROWS + [diverged], "loss", ["ms"])
    with pytest.raises(ValueError, match="not NaN"):
        pareto_table(ROWS + [diverged], "loss", ["ms"])


@pytest.mark.parametrize("value", ["1.5", None, True])
def test_pareto_front_refuses_a_value_that_is_not_a_number(value):
    with pytest.raises(ValueError, match=rf"row 'odd' has loss = {value!r}"):
        pareto_front(ROWS + [{"name": "odd", "loss": value, "ms": 3.0}], "loss", ["ms"])


def test_a_finite_front_is_unchanged():
    slow_and_bad = {"name": "slow", "loss": 3.0, "ms": 9.0}
    assert [r["name"] for r in pareto_front(ROWS + [slow_and_bad], "loss", ["ms"])] == ["fast", "good"]
