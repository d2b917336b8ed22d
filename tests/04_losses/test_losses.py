"""Module 04: loss values, stability, ignore_index, input checks, and the recorded ops.

Every assertion that a plausible mistake can break says what the mistake is: the first
failing test is what a student sees (and what `tito release check` matches against the
mistakes catalogue, modules/04_losses/mistakes.toml).
"""
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
DTYPE_IDS = ["float16", "float32", "float64"]
SOFTMAX_1000 = [0.09003057317038046, 0.24472847105479764, 0.6652409557748219]
LN_70000 = math.log(70_000)  # 11.156: the loss of 70,000 equal logits
CE_FIELDS = {"probs": "softmax of the logits, same shape",
             "targets": "int array, ignored positions replaced by 0",
             "valid": "bool array, False where ignored",
             "count": "number of valid positions, at least 1"}


def ce_reference(logits, targets, ignore_index=None):
    """Cross-entropy in float64 by the definition, with a max shift (for the comparison only)."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1, np.shape(logits)[-1])
    t = np.asarray(targets).reshape(-1)
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
    losses = lse[keep] - z[keep, t[keep]]
    return losses.mean() if keep.any() else 0.0


# ---- helpers: run a loss and say why it failed --------------------------------------------------


def without_overflow(fn, *args, hint, **kwargs):
    """fn(*args) with NumPy's overflow/invalid warnings turned into a failure that explains them."""
    with np.errstate(over="raise", invalid="raise"):
        try:
            return fn(*args, **kwargs)
        except FloatingPointError as err:
            pytest.fail(f"{fn.__name__} raised '{err}': {hint}", pytrace=False)


def call_ce(logits, targets, **kwargs):
    """cross_entropy(logits, ...) for a Tensor `logits`, failing with the cause when NumPy raises an
    indexing or broadcasting error, or when the logits were changed in place."""
    before = logits.numpy().copy()
    try:
        loss = cross_entropy(logits, targets, **kwargs)
    except (IndexError, ValueError) as err:
        if "CrossEntropyLoss" in str(err):  # the given checks' own errors
            raise
        pytest.fail(f"cross_entropy(logits of shape {logits.shape}) raised {type(err).__name__} '{err}': pick each "
                    "row's target score along the class axis (the last), e.g. "
                    "take_along_axis(..., targets[..., None], axis=-1)", pytrace=False)
    assert np.array_equal(logits.numpy(), before), \
        "cross_entropy changed its logits in place: work on a new array (z - m is a new array)"
    return loss


def ce_diagnosis(got, z, t, ignore_index=None):
    """Why cross_entropy(z, t) = got is wrong, in words (the first likely cause that fits)."""
    z = np.asarray(z, dtype=np.float64)
    t = np.asarray(t)
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    safe = np.where(keep, t, 0)
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[..., 0]
    per_position = lse - np.take_along_axis(z, safe[..., None], -1)[..., 0]
    candidates = {
        "it divides by every position: the mean is over the non-ignored positions only (count = valid ones)":
            np.where(keep, per_position, 0).sum() / t.size,
        "ignored positions must not add to the sum: mask them out (valid) before summing":
            per_position.sum() / max(int(keep.sum()), 1),
        "it is the sum over positions: cross-entropy is the mean over the (valid) positions":
            np.where(keep, per_position, 0).sum(),
    }
    if z.ndim >= 2:
        m0 = z.max(0, keepdims=True)
        lse0 = m0 + np.log(np.exp(z - m0).sum(0, keepdims=True))
        picked = np.take_along_axis(z - lse0, safe[..., None], -1)[..., 0]
        candidates["the log-sum-exp ran over axis 0 (the batch): take the max and the sum over the class "
                   "axis (the last)"] = -np.where(keep, picked, 0).sum() / max(int(keep.sum()), 1)
    for text, value in candidates.items():
        if np.isclose(got, value, rtol=1e-5) and not np.isclose(got, ce_reference(z, t, ignore_index), rtol=1e-5):
            return text
    if not np.isfinite(got):
        return "it is not finite: compute LSE(z) - z_y with the max shift, never -log(softmax(z))"
    return ("expected the mean over valid positions of LSE(z) - z_y, with LSE(z) = m + log Σ exp(z - m): "
            "take the max and the sum over the class axis (the last)")


def check_ce(z, t, ignore_index=None, rel=1e-12):
    got = call_ce(Tensor(np.array(z)), t, ignore_index=ignore_index).item()
    expected = ce_reference(z, t, ignore_index)
    assert got == pytest.approx(expected, rel=rel, abs=1e-12), \
        f"cross_entropy = {got}, expected {expected}: {ce_diagnosis(got, z, t, ignore_index)}"
    return got


def check_dtype(name, pred, loss):
    assert loss.dtype == pred.dtype, \
        f"{name} changed the dtype {pred.dtype} → {loss.dtype}: keep the input's dtype (the loss is in the logits' dtype)"


def check_record(loss, op, x, saved):
    node = loss._node
    assert node is not None, f"{op} recorded no node for an input with requires_grad: return it through record_op"
    assert node.op == op, f"recorded op {node.op!r}, expected {op!r}: module 05 finds the backward rule by this name"
    assert len(node.inputs) == 1 and node.inputs[0] is x, f"{op} must record inputs (x,): the input Tensor itself"
    wanted = ", ".join(f"{k} ({v})" for k, v in saved.items())
    assert set(node.saved) == set(saved), f"{op} must save exactly {wanted}; it saved {sorted(node.saved)}"
    return node.saved


def mse_diagnosis(got, a, b):
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    known = {"it is the sum of the squares: MSE averages them (.mean(), not .sum())": (d**2).sum(),
             "it squares the mean error: MSE is the mean of the squared errors": d.mean() ** 2,
             "it is the mean absolute error: square the errors": np.abs(d).mean()}
    for text, value in known.items():
        if np.isclose(got, value, rtol=1e-6) and not np.isclose(got, (d**2).mean(), rtol=1e-6):
            return text
    return "expected mean((pred - target)²)"


# ---- MSE -------------------------------------------------------------------------------------


def test_mse_hand_value():
    loss = MSELoss()(Tensor([2.5, 0.0, 2.0]), Tensor([3.0, -0.5, 2.0]))
    assert loss.shape == () and loss.item() == pytest.approx(0.5 / 3, rel=1e-6), \
        f"MSE([2.5, 0, 2], [3, -0.5, 2]) = {loss.item()}, expected 0.1667: {mse_diagnosis(loss.item(), [2.5, 0, 2], [3, -0.5, 2])}"
    a, b = [[1.0, 2.0], [3.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]
    got = mse_loss(Tensor(a), b).item()
    assert got == pytest.approx(7.5), f"MSE = {got}, expected 7.5: {mse_diagnosis(got, a, b)}"


def test_mse_zero_for_equal_and_symmetric(rng):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    assert mse_loss(Tensor(a), a).item() == 0.0
    assert mse_loss(Tensor(a), b).item() == pytest.approx(mse_loss(Tensor(b), a).item(), rel=1e-14)
    got = mse_loss(Tensor(a), b).item()
    assert got == pytest.approx(np.mean((a - b) ** 2), rel=1e-14), mse_diagnosis(got, a, b)


@pytest.mark.parametrize("dtype", FLOATS, ids=DTYPE_IDS)
def test_mse_keeps_dtype(dtype):
    pred = Tensor(np.array([1.0, 3.0], dtype=dtype))
    loss = mse_loss(pred, [0.0, 1.0])
    check_dtype("MSELoss", pred, loss)
    assert loss.item() == pytest.approx(2.5)


def test_mse_is_a_composition_of_tensor_ops():
    pred = Tensor([1.0, 2.0], requires_grad=True)
    loss = mse_loss(pred, [0.0, 0.0])
    assert loss._node.op == "mean", f"MSE's last op must be mean (a composition of Tensor ops), got {loss._node.op!r}"
    # pred must be reachable through recorded Tensor ops (pow or mul for the square, either is fine)
    seen, stack = [], [loss]
    while stack:
        t = stack.pop()
        if t._node is not None:
            seen.append(t._node.op)
            stack.extend(t._node.inputs)
        elif t is pred:
            break
    else:
        raise AssertionError(f"MSE's graph {seen} does not reach pred: compute it with Tensor ops (-, **, .mean()), "
                             "not on raw arrays")
    assert "sub" in seen, f"MSE's graph {seen} has no sub: pred - target"


def test_mse_shape_mismatch_names_both_shapes():
    assert mse_loss(Tensor(np.ones((4, 1))), np.ones((4, 1))).item() == 0.0
    for target in (np.zeros(4), Tensor(np.zeros(4))):
        with pytest.raises(ValueError) as err:
            mse_loss(Tensor(np.zeros((4, 1))), target)
        assert "(4, 1)" in str(err.value) and "(4,)" in str(err.value)


def test_integer_predictions_raise_type_error():
    with pytest.raises(TypeError, match="int64"):
        mse_loss(Tensor(np.array([1, 2])), [1.0, 2.0])
    with pytest.raises(TypeError, match="int64"):
        cross_entropy(Tensor(np.array([[1, 2]])), [0])


# ---- cross-entropy: values ----------------------------------------------------------------------------


def test_cross_entropy_hand_values():
    z = np.array([[0.0, 0.0, math.log(2.0)], [0.0, 0.0, math.log(2.0)]])
    # probabilities [1/4, 1/4, 1/2]
    got = check_ce(z, [0, 2])
    assert got == pytest.approx((math.log(4) + math.log(2)) / 2, rel=1e-14)
    check_ce(z, [2, 2])
    uniform = np.zeros((5, 10))
    assert check_ce(uniform, np.arange(5)) == pytest.approx(math.log(10)), "all-zero logits over 10 classes: ln 10"


def test_cross_entropy_square_logits():
    # as many rows as classes: picking along the wrong axis gives numbers, not an error
    z = np.array([[2.0, 0.0, -1.0], [0.5, 3.0, 0.0], [1.0, 1.0, 4.0]])
    check_ce(z, [1, 2, 0])
    check_ce(z, [0, 0, 2])


@pytest.mark.parametrize("dtype", FLOATS, ids=DTYPE_IDS)
def test_cross_entropy_stable_for_large_logits(dtype):
    z = Tensor(np.array([[1000.0, 1001.0, 1002.0]], dtype=dtype))
    losses = [without_overflow(cross_entropy, z, [k], hint="subtract the max before exponentiating (e^1000 is "
                               "inf): LSE(z) = m + log Σ exp(z - m)") for k in range(3)]
    check_dtype("cross_entropy", z, losses[0])
    values = [float(loss.item()) for loss in losses]
    expected = -np.log(SOFTMAX_1000)
    assert np.allclose(values, expected, rtol=1e-2 if dtype == np.float16 else 1e-5), \
        f"CE([1000, 1001, 1002], k) = {values}, expected {expected}"


def test_cross_entropy_confident_mistake_is_finite_in_float32():
    z = Tensor(np.array([[0.0, 200.0], [-300.0, 300.0]], dtype=np.float32))
    got = cross_entropy(z, [0, 0]).item()
    assert got == pytest.approx((200.0 + 600.0) / 2), (
        f"cross_entropy([[0, 200], [-300, 300]], targets 0) = {got}, expected 400: -log(softmax(z)) is inf once "
        "a probability underflows to 0; use LSE(z) - z_y on the logits")
    assert cross_entropy(z, [1, 1]).item() == pytest.approx(0.0, abs=1e-30)


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=3, max_side=5),
                  elements=st.floats(-80, 80, allow_nan=False)), st.data())
def test_cross_entropy_matches_definition(z, data):
    c = z.shape[-1]
    t = data.draw(hnp.arrays(np.int64, z.shape[:-1], elements=st.integers(0, c - 1)))
    assert check_ce(z, t) >= 0


def test_cross_entropy_any_leading_dims(rng):
    z = rng.standard_normal((2, 3, 4, 5))
    t = rng.integers(0, 5, (2, 3, 4))
    check_ce(z, t)
    assert cross_entropy(Tensor(z[0, 0, 0]), int(t[0, 0, 0])).item() == pytest.approx(
        ce_reference(z[0, 0, 0][None], t[0, 0, 0][None]), rel=1e-12)  # 1-D logits, scalar target


def test_cross_entropy_targets_as_tensor_array_or_list(rng):
    z = Tensor(rng.standard_normal((3, 4)))
    expected = cross_entropy(z, np.array([0, 3, 1])).item()
    assert cross_entropy(z, [0, 3, 1]).item() == expected
    assert cross_entropy(z, Tensor([0, 3, 1])).item() == expected  # float32 tensor of whole numbers
    assert cross_entropy(z, Tensor(np.array([0, 3, 1], dtype=np.int32))).item() == expected
    assert cross_entropy(z, np.array([0, 3, 1], dtype=np.uint8)).item() == expected


def test_cross_entropy_does_not_change_its_input(rng):
    for dtype in FLOATS:
        call_ce(Tensor(rng.standard_normal((3, 4)).astype(dtype)), [0, 1, 2])


def test_cross_entropy_module_and_repr():
    loss_fn = CrossEntropyLoss(ignore_index=0)
    assert isinstance(loss_fn, Module) and loss_fn.parameters() == []
    assert "ignore_index=0" in repr(loss_fn)
    z = [[1.0, 2.0], [3.0, 1.0]]
    # row 0 ignored; row 1: logits [3, 1], target 1 -> log(1 + e^2)
    got = loss_fn(Tensor(z), [0, 1]).item()
    assert got == pytest.approx(math.log(1 + math.exp(2.0)), rel=1e-6), \
        f"CrossEntropyLoss(ignore_index=0) = {got}: {ce_diagnosis(got, z, [0, 1], ignore_index=0)}"


# ---- cross-entropy: ignore_index -------------------------------------------------------------------------


def test_ignore_index_mean_over_valid_positions(rng):
    z = rng.standard_normal((2, 5, 7))
    t = rng.integers(0, 7, (2, 5))
    t[0, 3:] = -100
    t[1, 4] = -100
    got = check_ce(z, t, ignore_index=-100)
    keep = t != -100
    assert got == pytest.approx(ce_reference(z[keep], t[keep]), rel=1e-12)


def test_ignore_index_can_be_a_real_class(rng):
    z = rng.standard_normal((6, 3))
    t = np.array([0, 1, 2, 0, 0, 2])
    got = check_ce(z, t, ignore_index=0)
    assert got == pytest.approx(ce_reference(z[t != 0], t[t != 0]), rel=1e-12)


def test_all_ignored_gives_zero():
    z = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    loss = CrossEntropyLoss(ignore_index=-1)(z, [-1, -1])
    assert loss.item() == 0.0 and np.isfinite(loss.item()), f"every position ignored: the loss is 0, got {loss.item()}"
    saved = loss._node.saved
    assert saved["count"] == 1, (f"saved count = {saved['count']!r} with every position ignored: count must be at "
                                 "least 1 (max(count, 1)), so that the backward rule can divide by it")
    assert not saved["valid"].any()


# ---- cross-entropy: checks (given code) ------------------------------------------------------------------


@pytest.mark.parametrize("bad", [[0, 3], [-1, 0], [0, 99]], ids=["3 of 3", "-1", "99 of 3"])
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


# ---- cross-entropy: the recorded op (contract: probs, targets, valid, count) ------------------------------


def test_cross_entropy_records_one_op_with_saved_fields(rng):
    x = rng.standard_normal((2, 3, 4))
    t = np.array([[0, 3, -100], [2, -100, 1]])
    z = Tensor(x, requires_grad=True)
    loss = cross_entropy(z, t, ignore_index=-100)
    saved = check_record(loss, "cross_entropy", z, CE_FIELDS)
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert saved["probs"].shape == x.shape and np.allclose(saved["probs"], probs, rtol=1e-12), \
        "saved probs must be softmax(logits) along the last axis (normalised: each row sums to 1)"
    assert saved["probs"].dtype == x.dtype, f"saved probs are {saved['probs'].dtype}: keep the logits' dtype"
    assert saved["valid"].dtype == bool and saved["valid"].tolist() == [[True, True, False], [True, False, True]], \
        "saved valid must be a bool array, False exactly where the target equals ignore_index"
    assert np.issubdtype(saved["targets"].dtype, np.integer) and saved["targets"].shape == (2, 3)
    assert saved["targets"].tolist() == [[0, 3, 0], [2, 0, 1]], (
        f"saved targets = {saved['targets'].tolist()}: the class indices with ignored positions replaced by 0 "
        "(so each is a valid index)")
    assert saved["count"] == 4 and isinstance(saved["count"], int), \
        f"saved count = {saved['count']!r}: the number of valid positions (4 here), a Python int"
    assert cross_entropy(Tensor(x), t, ignore_index=-100)._node is None


# ---- cross-entropy in float16 (the largest float16 is 65,504) -----------------------------------------------


def test_float16_cross_entropy_over_70000_classes_is_ln_70000():
    z = Tensor(np.zeros((2, 70_000), dtype=np.float16))
    loss = cross_entropy(z, [3, 69_999])
    check_dtype("cross_entropy", z, loss)
    assert np.isfinite(float(loss.item())) and float(loss.item()) == pytest.approx(LN_70000, abs=1e-2), (
        f"float16 cross-entropy of 70,000 equal logits = {loss.item()}, expected ln 70000 = 11.16: the float16 sum "
        "of 70,000 exponentials is inf; accumulate in float32 and return float16")


def test_float16_saved_probs_over_70000_classes_sum_to_1():
    z = Tensor(np.zeros((1, 70_000), dtype=np.float16), requires_grad=True)
    probs = cross_entropy(z, [0])._node.saved["probs"]
    assert probs.dtype == np.float16, f"saved probs are {probs.dtype}: keep the logits' dtype"
    assert probs.astype(np.float64).sum() == pytest.approx(1.0, abs=1e-2), \
        "saved probs over 70,000 float16 classes do not sum to 1: accumulate in float32 and return float16"


def test_float16_mean_over_many_positions_does_not_overflow():
    # 10,000 positions with a loss of about 10 each: their float16 sum (100,000) would be inf
    z = Tensor(np.tile(np.array([[0.0, 10.0]], dtype=np.float16), (10_000, 1)))
    loss = cross_entropy(z, np.zeros(10_000, dtype=np.int64))
    expected = 10.0 + math.log1p(math.exp(-10.0))
    assert float(loss.item()) == pytest.approx(expected, rel=1e-3), (
        f"float16 cross-entropy over 10,000 positions = {loss.item()}, expected {expected:.4f}: the sum of the "
        "per-position losses passes 65,504; accumulate in float32 and return float16")


def test_float16_random_logits_over_many_classes(rng):
    x = (rng.standard_normal((4, 80_000)) * 3).astype(np.float16)
    t = rng.integers(0, 80_000, 4)
    got = float(cross_entropy(Tensor(x), t).item())
    assert got == pytest.approx(ce_reference(x.astype(np.float64), t), rel=1e-2), \
        "accumulate in float32 and return float16"


# ---- binary cross-entropy -------------------------------------------------------------------------------------


def test_bce_hand_values():
    p, t = Tensor([0.9, 0.2, 0.5], dtype=np.float64), [1.0, 0.0, 1.0]
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.5)) / 3
    got = BinaryCrossEntropyLoss()(p, t).item()
    assert got == pytest.approx(expected, rel=1e-12), \
        f"BCE([0.9, 0.2, 0.5], [1, 0, 1]) = {got}, expected {expected}: the mean of -(t·log p + (1-t)·log(1-p))"
    assert BCELoss is BinaryCrossEntropyLoss
    soft = binary_cross_entropy(Tensor([0.25], dtype=np.float64), [0.5]).item()
    assert soft == pytest.approx(-(0.5 * math.log(0.25) + 0.5 * math.log(0.75)), rel=1e-12)


def test_bce_clips_exact_zeros_and_ones():
    loss = binary_cross_entropy(Tensor([0.0, 1.0], dtype=np.float64), [1.0, 0.0]).item()
    assert loss == pytest.approx(-math.log(1e-7), rel=1e-6), (
        f"BCE of p = 0 with target 1 = {loss}, expected -log(1e-7) = 16.12: clip p to [eps, 1 - eps] "
        "before the logs (log 0 = -inf)")
    assert binary_cross_entropy(Tensor([1.0, 0.0], dtype=np.float64), [1.0, 0.0]).item() == pytest.approx(
        -math.log(1 - 1e-7), rel=1e-6)
    assert binary_cross_entropy(Tensor([0.0]), [1.0], eps=1e-3).item() == pytest.approx(-math.log(1e-3), rel=1e-5), \
        "clip with the eps argument"


@pytest.mark.parametrize("dtype", FLOATS, ids=DTYPE_IDS)
def test_bce_dtype_and_finite(dtype):
    probs = Tensor(np.array([0.0, 1.0, 0.3], dtype=dtype))
    loss = binary_cross_entropy(probs, [1.0, 0.0, 0.0])
    check_dtype("binary_cross_entropy", probs, loss)
    assert np.isfinite(float(loss.item())), (
        f"BCE in {np.dtype(dtype).name} of p = 0 and 1 is {loss.item()}: clip p to [eps, 1 - eps]; in float16 "
        "1 - 1e-7 rounds to 1, so clip in float32")


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
    saved = check_record(BinaryCrossEntropyLoss(eps=1e-6)(p, [0.0, 1.0]), "binary_cross_entropy", p,
                         {"targets": "float array, probs' dtype", "eps": "the clip"})
    assert np.array_equal(saved["targets"], [0.0, 1.0]) and saved["targets"].dtype == np.float32, \
        "saved targets: the float targets array, in the probabilities' dtype"
    assert saved["eps"] == 1e-6, f"saved eps = {saved['eps']!r}: the clip eps that was used (1e-6 here)"


def test_bce_with_logits_hand_values():
    x = np.array([-3.0, 0.0, 2.0])
    t = np.array([1.0, 0.0, 1.0])
    s = 1 / (1 + np.exp(-x))
    expected = -np.mean(t * np.log(s) + (1 - t) * np.log(1 - s))
    got = BCEWithLogitsLoss()(Tensor(x), t).item()
    assert got == pytest.approx(expected, rel=1e-13), \
        f"BCE with logits = {got}, expected {expected}: the mean of max(x, 0) - x·t + log(1 + e^-|x|)"
    assert binary_cross_entropy_with_logits(Tensor([0.0]), [1.0]).item() == pytest.approx(math.log(2), rel=1e-6)


@pytest.mark.parametrize("dtype", FLOATS, ids=DTYPE_IDS)
def test_bce_with_logits_stable(dtype):
    x = Tensor(np.array([1000.0, -1000.0, 1000.0, -1000.0], dtype=dtype))
    loss = without_overflow(binary_cross_entropy_with_logits, x, [0.0, 1.0, 1.0, 0.0],
                            hint="exponentiate only -|x|: max(x, 0) - x·t + log1p(exp(-|x|))")
    check_dtype("bce_with_logits", x, loss)
    assert float(loss.item()) == pytest.approx(500.0, rel=1e-3)


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
    saved = check_record(binary_cross_entropy_with_logits(x, [[1.0, 0.0]]), "bce_with_logits", x,
                         {"targets": "float array, logits' dtype"})
    assert saved["targets"].dtype == np.float32 and saved["targets"].shape == (1, 2)
    with pytest.raises(ValueError) as err:
        binary_cross_entropy_with_logits(x, [1.0, 0.0])
    assert "(1, 2)" in str(err.value) and "(2,)" in str(err.value)
