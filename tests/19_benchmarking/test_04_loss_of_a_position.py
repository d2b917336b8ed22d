"""Module 19, section 5: token_losses, the course's one cross-entropy from raw logits (module 20's judge uses it)."""
import math

import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.perf.benchmarking import token_losses


def by_definition(logits, targets):
    """−log softmax(row)[target], one row at a time, in float64 with the max shift (a loop is fine in a test)."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1, np.shape(logits)[-1])
    out = [math.log(sum(math.exp(v - row.max()) for v in row)) + row.max() - row[t]
           for row, t in zip(z, np.ravel(targets))]
    return np.array(out).reshape(np.shape(targets))


@pytest.mark.parametrize("shape", [(6,), (4, 6), (2, 3, 6), (0, 6)], ids=lambda s: str(s))
def test_one_loss_per_position_for_any_leading_shape(shape):
    rng = np.random.default_rng(len(shape))
    logits = rng.standard_normal(shape) * 4
    targets = rng.integers(0, 6, shape[:-1])
    got = token_losses(logits, targets)
    assert got.shape == shape[:-1] and got.dtype == np.float64, \
        f"logits {shape}: one float64 loss per position, shape {shape[:-1]}; got {got.shape} {got.dtype}"
    np.testing.assert_allclose(got, by_definition(logits, targets), rtol=1e-12, atol=1e-12)


def test_float32_logits_are_computed_in_float64():
    rng = np.random.default_rng(1)
    logits = (3000.0 + rng.standard_normal((3, 9))).astype(np.float32)
    targets = rng.integers(0, 9, 3)
    got = token_losses(logits, targets)
    np.testing.assert_allclose(got, by_definition(logits, targets), rtol=1e-12,
                               err_msg="float32 logits near 3000: the loss must be computed in float64")


def test_huge_logits_give_their_true_loss():
    got = token_losses(np.array([[1e4, 0.0, -1e4]]), np.array([1]))
    assert got[0] == pytest.approx(1e4, rel=1e-12), f"logits 1e4, 0, -1e4, target 1: the loss is 1e4, got {got[0]}"


def test_tensors_are_accepted_and_shapes_checked():
    logits, targets = Tensor(np.array([[0.0, 0.0]])), Tensor(np.array([1]))
    assert token_losses(logits, targets)[0] == pytest.approx(math.log(2), rel=1e-12)
    with pytest.raises(ValueError, match=r"token_losses: .*\(2, 3\)"):
        token_losses(np.zeros((2, 3)), np.zeros(3, int))
