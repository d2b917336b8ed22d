"""Module 04: loss values, stability, ignore_index, input checks, and the recorded ops."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tinytorch.core.layers import Module
from tinytorch.core.losses import (BCELoss, BCEWithLogitsLoss, BinaryCrossEntropyLoss, CrossEntropyLoss, MSELoss,
                                   binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, mse_loss)
from tinytorch.core.tensor import Tensor

FLOATS = [np.float16, np.float32, np.float64]


def ce_reference(logits, targets, ignore_index=None):
    """Cross-entropy in float64 by the definition, with a max shift (for the comparison only)."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1, np.shape(logits)[-1])
    t = np.asarray(targets).reshape(-1)
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
    losses = lse[keep] - z[keep, t[keep]]
    return losses.mean() if keep.any() else 0.0


# ---- MSE -------------------------------------------------------------------------------------


def test_mse_hand_value():
    loss = MSELoss()(Tensor([2.5, 0.0, 2.0]), Tensor([3.0, -0.5, 2.0]))
    assert loss.shape == () and loss.item() == pytest.approx(0.5 / 3, rel=1e-6)
    assert mse_loss(Tensor([[1.0, 2.0], [3.0, 4.0]]), [[0.0, 0.0], [0.0, 0.0]]).item() == pytest.approx(7.5)


def test_mse_zero_for_equal_and_symmetric(rng):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    assert mse_loss(Tensor(a), a).item() == 0.0
    assert mse_loss(Tensor(a), b).item() == pytest.approx(mse_loss(Tensor(b), a).item(), rel=1e-14)
    assert mse_loss(Tensor(a), b).item() == pytest.approx(np.mean((a - b) ** 2), rel=1e-14)


@pytest.mark.parametrize("dtype", FLOATS)
def test_mse_keeps_dtype(dtype):
    pred = Tensor(np.array([1.0, 3.0], dtype=dtype))
    loss = mse_loss(pred, [0.0, 1.0])
    assert loss.dtype == dtype and loss.item() == pytest.approx(2.5)


def test_mse_is_a_composition_of_tensor_ops():
    pred = Tensor([1.0, 2.0], requires_grad=True)
    loss = mse_loss(pred, [0.0, 0.0])
    assert loss._node.op == "mean"
    power = loss._node.inputs[0]._node
    assert power.op == "pow" and power.inputs[1].item() == 2
    assert power.inputs[0]._node.op == "sub" and power.inputs[0]._node.inputs[0] is pred


def test_mse_shape_mismatch_names_both_shapes():
    assert mse_loss(Tensor(np.ones((4, 1))), np.ones((4, 1))).item() == 0.0
    for target in (np.zeros(4), Tensor(np.zeros(4))):
        with pytest.raises(ValueError) as err:
            mse_loss(Tensor(np.zeros((4, 1))), target)
        assert "(4, 1)" in str(err.value) and "(4,)" in str(err.value)


# ---- cross-entropy: values ----------------------------------------------------------------------------


def test_cross_entropy_hand_values():
    z = Tensor([[0.0, 0.0, math.log(2.0)], [0.0, 0.0, math.log(2.0)]], dtype=np.float64)
    # probabilities [1/4, 1/4, 1/2]
    assert cross_entropy(z, [0, 2]).item() == pytest.approx((math.log(4) + math.log(2)) / 2, rel=1e-14)
    assert cross_entropy(z, [2, 2]).item() == pytest.approx(math.log(2), rel=1e-14)
    uniform = Tensor(np.zeros((5, 10)))
    assert cross_entropy(uniform, np.arange(5)).item() == pytest.approx(math.log(10))


@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_stable_for_large_logits(dtype):
    z = Tensor(np.array([[1000.0, 1001.0, 1002.0]], dtype=dtype))
    with np.errstate(over="raise", invalid="raise"):
        losses = [cross_entropy(z, [k]).item() for k in range(3)]
    expected = -np.log([0.09003057317038046, 0.24472847105479764, 0.6652409557748219])
    assert np.allclose(losses, expected, rtol=1e-2 if dtype == np.float16 else 1e-5)
    assert cross_entropy(z, [0]).dtype == dtype


def test_cross_entropy_confident_mistake_is_finite_in_float32():
    z = Tensor(np.array([[0.0, 200.0], [-300.0, 300.0]], dtype=np.float32))
    assert cross_entropy(z, [0, 0]).item() == pytest.approx((200.0 + 600.0) / 2)
    assert cross_entropy(z, [1, 1]).item() == pytest.approx(0.0, abs=1e-30)


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=3, max_side=5),
                  elements=st.floats(-80, 80, allow_nan=False)), st.data())
def test_cross_entropy_matches_definition(z, data):
    c = z.shape[-1]
    t = data.draw(hnp.arrays(np.int64, z.shape[:-1], elements=st.integers(0, c - 1)))
    got = cross_entropy(Tensor(z), t).item()
    assert got == pytest.approx(ce_reference(z, t), rel=1e-12, abs=1e-12)
    assert got >= 0


def test_cross_entropy_any_leading_dims(rng):
    z = rng.standard_normal((2, 3, 4, 5))
    t = rng.integers(0, 5, (2, 3, 4))
    assert cross_entropy(Tensor(z), t).item() == pytest.approx(ce_reference(z, t), rel=1e-12)
    assert cross_entropy(Tensor(z[0, 0, 0]), int(t[0, 0, 0])).item() == pytest.approx(
        ce_reference(z[0, 0, 0][None], t[0, 0, 0][None]), rel=1e-12)  # 1-D logits, scalar target


def test_cross_entropy_targets_as_tensor_array_or_list(rng):
    z = Tensor(rng.standard_normal((3, 4)))
    expected = cross_entropy(z, np.array([0, 3, 1])).item()
    assert cross_entropy(z, [0, 3, 1]).item() == expected
    assert cross_entropy(z, Tensor([0, 3, 1])).item() == expected  # float32 tensor of whole numbers
    assert cross_entropy(z, Tensor(np.array([0, 3, 1], dtype=np.int32))).item() == expected
    assert cross_entropy(z, np.array([0, 3, 1], dtype=np.uint8)).item() == expected


def test_cross_entropy_module_and_repr():
    loss_fn = CrossEntropyLoss(ignore_index=0)
    assert isinstance(loss_fn, Module) and loss_fn.parameters() == []
    assert "ignore_index=0" in repr(loss_fn)
    z = Tensor([[1.0, 2.0], [3.0, 1.0]])
    # row 0 ignored; row 1: logits [3, 1], target 1 -> log(1 + e^2)
    assert loss_fn(z, [0, 1]).item() == pytest.approx(math.log(1 + math.exp(2.0)), rel=1e-6)


# ---- cross-entropy: ignore_index -------------------------------------------------------------------------


def test_ignore_index_mean_over_valid_positions(rng):
    z = rng.standard_normal((2, 5, 7))
    t = rng.integers(0, 7, (2, 5))
    t[0, 3:] = -100
    t[1, 4] = -100
    got = cross_entropy(Tensor(z), t, ignore_index=-100).item()
    assert got == pytest.approx(ce_reference(z, t, ignore_index=-100), rel=1e-12)
    keep = t != -100
    assert got == pytest.approx(ce_reference(z[keep], t[keep]), rel=1e-12)


def test_ignore_index_can_be_a_real_class(rng):
    z = rng.standard_normal((6, 3))
    t = np.array([0, 1, 2, 0, 0, 2])
    assert cross_entropy(Tensor(z), t, ignore_index=0).item() == pytest.approx(
        ce_reference(z[t != 0], t[t != 0]), rel=1e-12)


def test_all_ignored_gives_zero():
    z = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    loss = CrossEntropyLoss(ignore_index=-1)(z, [-1, -1])
    assert loss.item() == 0.0 and np.isfinite(loss.item())
    assert loss._node.saved["count"] == 1 and not loss._node.saved["valid"].any()


# ---- cross-entropy: checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [[0, 3], [-1, 0], [0, 99]])
def test_targets_out_of_range(bad):
    z = Tensor(np.zeros((2, 3)))
    assert cross_entropy(z, [0, 2]).item() == pytest.approx(math.log(3))
    with pytest.raises(ValueError) as err:
        cross_entropy(z, bad)
    assert str([b for b in bad if not 0 <= b < 3][0]) in str(err.value) and "3" in str(err.value)


def test_ignored_targets_may_be_out_of_range_but_others_not():
    z = Tensor(np.zeros((2, 3)))
    assert cross_entropy(z, [-100, 1], ignore_index=-100).item() == pytest.approx(math.log(3))
    with pytest.raises(ValueError):
        cross_entropy(z, [-100, 5], ignore_index=-100)


def test_targets_shape_mismatch_names_both_shapes():
    z = Tensor(np.zeros((4, 3)))
    assert cross_entropy(z, [0, 1, 2, 0]).item() == pytest.approx(math.log(3))
    for bad in ([0, 1, 2], np.zeros((4, 3), dtype=int), np.zeros((4, 1), dtype=int)):
        with pytest.raises(ValueError) as err:
            cross_entropy(z, bad)
        assert "(4, 3)" in str(err.value) and str(tuple(np.shape(bad))) in str(err.value)


def test_fractional_targets_rejected():
    z = Tensor(np.zeros((2, 3)))
    assert cross_entropy(z, np.array([1.0, 2.0])).item() == pytest.approx(math.log(3))
    with pytest.raises(ValueError):
        cross_entropy(z, np.array([0.5, 1.0]))


# ---- cross-entropy: the recorded op ------------------------------------------------------------------------


def test_cross_entropy_records_one_op_with_saved_fields(rng):
    x = rng.standard_normal((2, 3, 4))
    t = np.array([[0, 3, -100], [2, -100, 1]])
    z = Tensor(x, requires_grad=True)
    loss = cross_entropy(z, t, ignore_index=-100)
    node = loss._node
    assert node.op == "cross_entropy" and len(node.inputs) == 1 and node.inputs[0] is z
    saved = node.saved
    assert set(saved) == {"probs", "targets", "valid", "count"}
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert saved["probs"].shape == x.shape and np.allclose(saved["probs"], probs, rtol=1e-12)
    assert saved["valid"].dtype == bool and saved["valid"].tolist() == [[True, True, False], [True, False, True]]
    assert np.issubdtype(saved["targets"].dtype, np.integer) and saved["targets"].shape == (2, 3)
    assert np.array_equal(saved["targets"][saved["valid"]], t[t != -100])
    assert ((saved["targets"] >= 0) & (saved["targets"] < 4)).all()  # ignored ones replaced by a valid index
    assert saved["count"] == 4 and isinstance(saved["count"], int)
    assert cross_entropy(Tensor(x), t, ignore_index=-100)._node is None


# ---- binary cross-entropy -------------------------------------------------------------------------------------


def test_bce_hand_values():
    p, t = Tensor([0.9, 0.2, 0.5], dtype=np.float64), [1.0, 0.0, 1.0]
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.5)) / 3
    assert BinaryCrossEntropyLoss()(p, t).item() == pytest.approx(expected, rel=1e-12)
    assert BCELoss is BinaryCrossEntropyLoss
    soft = binary_cross_entropy(Tensor([0.25], dtype=np.float64), [0.5]).item()
    assert soft == pytest.approx(-(0.5 * math.log(0.25) + 0.5 * math.log(0.75)), rel=1e-12)


def test_bce_clips_exact_zeros_and_ones():
    loss = binary_cross_entropy(Tensor([0.0, 1.0], dtype=np.float64), [1.0, 0.0]).item()
    assert loss == pytest.approx(-math.log(1e-7), rel=1e-6)
    assert binary_cross_entropy(Tensor([1.0, 0.0], dtype=np.float64), [1.0, 0.0]).item() == pytest.approx(
        -math.log(1 - 1e-7), rel=1e-6)
    assert binary_cross_entropy(Tensor([0.0]), [1.0], eps=1e-3).item() == pytest.approx(-math.log(1e-3), rel=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bce_dtype_and_finite(dtype):
    loss = binary_cross_entropy(Tensor(np.array([0.0, 1.0, 0.3], dtype=dtype)), [1.0, 0.0, 0.0])
    assert loss.dtype == dtype and np.isfinite(float(loss.item()))


def test_bce_rejects_values_outside_unit_interval_and_bad_shapes():
    assert binary_cross_entropy(Tensor([0.5]), [1.0]).item() == pytest.approx(math.log(2), rel=1e-6)
    for bad in ([1.2], [-0.1]):
        with pytest.raises(ValueError, match="BCEWithLogitsLoss"):
            binary_cross_entropy(Tensor(bad), [1.0])
    with pytest.raises(ValueError) as err:
        binary_cross_entropy(Tensor([0.5, 0.5]), [[1.0, 0.0]])
    assert "(2,)" in str(err.value) and "(1, 2)" in str(err.value)


def test_bce_records_op():
    p = Tensor([0.3, 0.6], requires_grad=True)
    node = BinaryCrossEntropyLoss(eps=1e-6)(p, [0.0, 1.0])._node
    assert node.op == "binary_cross_entropy" and node.inputs[0] is p
    assert np.array_equal(node.saved["targets"], [0.0, 1.0]) and node.saved["eps"] == 1e-6


def test_bce_with_logits_hand_values():
    x = np.array([-3.0, 0.0, 2.0])
    t = np.array([1.0, 0.0, 1.0])
    s = 1 / (1 + np.exp(-x))
    expected = -np.mean(t * np.log(s) + (1 - t) * np.log(1 - s))
    assert BCEWithLogitsLoss()(Tensor(x), t).item() == pytest.approx(expected, rel=1e-13)
    assert binary_cross_entropy_with_logits(Tensor([0.0]), [1.0]).item() == pytest.approx(math.log(2), rel=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bce_with_logits_stable(dtype):
    x = Tensor(np.array([1000.0, -1000.0, 1000.0, -1000.0], dtype=dtype))
    with np.errstate(over="raise", invalid="raise"):
        loss = binary_cross_entropy_with_logits(x, [0.0, 1.0, 1.0, 0.0])
    assert loss.dtype == dtype and float(loss.item()) == pytest.approx(500.0, rel=1e-3)


@given(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=6), elements=st.floats(-30, 30)),
       st.data())
def test_bce_with_logits_equals_bce_of_sigmoid(x, data):
    t = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(0, 1)))
    # -log σ(x) = log(1 + e^-x) and -log(1 - σ(x)) = x + log(1 + e^-x): no 1 - σ rounding
    softplus_neg = np.log1p(np.exp(-x))
    expected = np.mean(t * softplus_neg + (1 - t) * (x + softplus_neg))
    assert binary_cross_entropy_with_logits(Tensor(x), t).item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_bce_with_logits_records_op_and_checks_shapes():
    x = Tensor([[0.5, -1.0]], requires_grad=True)
    node = binary_cross_entropy_with_logits(x, [[1.0, 0.0]])._node
    assert node.op == "bce_with_logits" and node.inputs[0] is x and set(node.saved) == {"targets"}
    assert node.saved["targets"].dtype == np.float32 and node.saved["targets"].shape == (1, 2)
    with pytest.raises(ValueError) as err:
        binary_cross_entropy_with_logits(x, [1.0, 0.0])
    assert "(1, 2)" in str(err.value) and "(2,)" in str(err.value)
