"""Module 04, graded cases: MSE, cross-entropy (ignore_index, float16, extreme logits), BCE and BCE with logits.

Format: grading/reference_values.py. Each function takes the case's seeded generator and
returns {label: value}; the grader compares them with the reference's (expected.npz).
"""
import numpy as np
from reference_values import node_record as record
from reference_values import raised

from tinytorch.core.losses import (BCEWithLogitsLoss, BinaryCrossEntropyLoss, CrossEntropyLoss, MSELoss,
                                   binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, mse_loss)
from tinytorch.core.tensor import Tensor


def guarded(function, *args):
    """function(*args) with overflow and invalid values raising: (result or None, what was raised)."""
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        try:
            return function(*args), "nothing"
        except FloatingPointError as err:
            return None, type(err).__name__


def _mse(rng):
    pred = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    target = rng.standard_normal((3, 4))
    loss = mse_loss(pred, target)
    pred32 = Tensor(rng.standard_normal(6).astype(np.float32))
    return {"loss": loss, "op": loss._node.op, "layer": MSELoss()(pred32, Tensor(rng.standard_normal(6).astype(np.float32))),
            "list_target": mse_loss(Tensor([1.0, -2.0, 0.5]), [0.0, 1.0, 3.0]),
            "shape_error": raised(mse_loss, pred, rng.standard_normal((4, 3)))}


def _cross_entropy(rng):
    logits = Tensor(rng.standard_normal((5, 7)) * 2, requires_grad=True)
    targets = rng.integers(0, 7, 5)
    before = logits.numpy().copy()
    loss = cross_entropy(logits, targets)
    return {"loss": loss, **record(loss, logits), "logits_unchanged": bool(np.array_equal(logits.numpy(), before)),
            "layer": CrossEntropyLoss()(logits, Tensor(targets))}


def _ignore_index(rng):
    logits = Tensor(rng.standard_normal((2, 4, 6)), requires_grad=True)
    targets = rng.integers(0, 6, (2, 4))
    targets[0, 1] = targets[1, 3] = targets[1, 0] = -100
    loss = CrossEntropyLoss(ignore_index=-100)(logits, targets)
    everything = cross_entropy(logits, np.full((2, 4), 3), ignore_index=3)
    return {"loss": loss, **record(loss, logits), "all_ignored": everything,
            "all_ignored_count": everything._node.saved["count"]}


def _extreme_logits(rng):
    logits = Tensor(np.array([[1000.0, 0.0, -1000.0], [0.0, 800.0, 5.0], [-3.0, 2.0, 1.0]]), requires_grad=True)
    loss, overflow = guarded(cross_entropy, logits, np.array([2, 0, 1]))
    values = {"overflow": overflow}
    if loss is not None:
        values.update({"loss": loss, "probs": loss._node.saved["probs"]})
    return values


def _float16(rng):
    wide = Tensor(np.zeros((1, 70_000), dtype=np.float16))
    many = Tensor((rng.standard_normal((10_000, 3)) * 2).astype(np.float16))
    wide_loss = cross_entropy(wide, [5])
    many_loss = cross_entropy(many, rng.integers(0, 3, 10_000))
    return {"wide": wide_loss, "wide_dtype": str(wide_loss.dtype), "many": many_loss}


def _bce(rng):
    probs = Tensor(np.concatenate([rng.random(6), [0.0, 1.0]]), requires_grad=True)
    targets = np.concatenate([rng.integers(0, 2, 6).astype(float), [1.0, 0.0]])
    loss = binary_cross_entropy(probs, targets)
    half = Tensor(np.array([0.0, 1.0, 0.3, 0.9], dtype=np.float16))
    return {"loss": loss, **record(loss, probs), "float16": binary_cross_entropy(half, [1.0, 0.0, 1.0, 0.0]),
            "eps": BinaryCrossEntropyLoss(eps=1e-3)(probs, targets),
            "outside": raised(binary_cross_entropy, Tensor([0.5, 1.5]), [1.0, 0.0])}


def _bce_logits(rng):
    logits = Tensor(np.concatenate([rng.standard_normal(6) * 3, [-1000.0, 1000.0, 40.0, -40.0]]), requires_grad=True)
    targets = np.concatenate([rng.random(6), [1.0, 0.0, 0.0, 1.0]])
    loss, overflow = guarded(binary_cross_entropy_with_logits, logits, targets)
    values = {"overflow": overflow}
    if loss is not None:
        values.update({"loss": loss, **record(loss, logits)})
    small = Tensor(rng.standard_normal((3, 2)).astype(np.float32))
    values["layer"] = BCEWithLogitsLoss()(small, rng.integers(0, 2, (3, 2)).astype(np.float32))
    return values


def _errors(rng):
    logits = Tensor(rng.standard_normal((3, 4)))
    # the checks are given code: the case also needs the student's values, so a stub cannot pass it
    return {"float_targets": cross_entropy(logits, [2.0, 0.0, 3.0]), "list_targets": cross_entropy(logits, [1, 3, 0]),
            "target_shape": raised(cross_entropy, logits, [0, 1]),
            "target_range": raised(cross_entropy, logits, [0, 4, 1]),
            "fractional": raised(cross_entropy, logits, [0.5, 1.0, 2.0]),
            "int_logits": raised(cross_entropy, Tensor(rng.integers(0, 3, (3, 4))), [0, 1, 2]),
            "bce_shape": raised(binary_cross_entropy, Tensor([0.5, 0.5]), [1.0])}


CASES = {
    "mse": (_mse, "mse_loss: the mean of squared errors, op 'mean'; shapes must match"),
    "cross-entropy": (_cross_entropy, "cross_entropy on (5, 7) logits: loss, saved probs/targets/valid/count"),
    "ignore-index": (_ignore_index, "ignore_index leaves positions out of the sum and the count; all ignored: 0"),
    "extreme-logits": (_extreme_logits, "logits of ±1000 give a finite loss without overflow"),
    "float16": (_float16, "float16 logits over 70,000 classes and 10,000 positions: finite, float16",
                {"rtol": 2e-3, "atol": 2e-3}),
    "bce": (_bce, "binary_cross_entropy with p = 0 and 1 (clipped), float16, a custom eps"),
    "bce-logits": (_bce_logits, "BCE with logits of ±1000 without overflow; saved targets"),
    "errors": (_errors, "whole-number float and list targets; bad targets and logits raise before any work"),
}
