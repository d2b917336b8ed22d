# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 04: Losses
#
# > One number that says how wrong the model is, and that training pushes down.
#
# Training needs a single scalar to minimise: the **loss**. It compares the model's
# outputs with the right answers and averages over the batch. Which loss you pick
# decides what "wrong" means, and how strongly the gradient pushes when the model is
# wrong:
#
# | task | model outputs | loss |
# |---|---|---|
# | regression (a number) | the number | `MSELoss`: mean of `(pred - target)²` |
# | classification (one of C classes) | C **logits** (raw scores) | `CrossEntropyLoss`: `-log softmax(logits)[target]` |
# | yes/no (binary, multi-label) | one logit per label | `BCEWithLogitsLoss` (or `BinaryCrossEntropyLoss` on probabilities) |
#
# The theme of this module is the same as module 02's: **exponentials and logarithms
# in floating point**. Cross-entropy taken naively, as the log of a softmax, returns
# `inf` for a wrong answer the model is sure of; written with the log-sum-exp trick it
# returns the right finite number.
#
# How the losses reach module 05's autograd:
#
# * `MSELoss` is a composition of Tensor operations, `((pred - target) ** 2).mean()`:
#   autograd differentiates it with the rules of `sub`, `pow` and `mean`.
# * The cross-entropies are recorded as **one op each** (`cross_entropy`,
#   `binary_cross_entropy`, `bce_with_logits`), saving what a fused backward needs. The
#   gradient of cross-entropy with respect to the logits is the famously simple
#   `(softmax(logits) - onehot(target)) / count`, which is both faster and more stable
#   than chaining the backward rules of `log_softmax` and indexing.

# %%
#| default_exp core.losses

# %%
#| export
from __future__ import annotations

from typing import Any

import numpy as np

from tinytorch.core.layers import Module
from tinytorch.core.tensor import Tensor, array_module, record_op

# %% [markdown]
# ## 1. Checking what comes in
#
# Every loss takes `(prediction, target)`. Targets are data, not parameters: a `Tensor`,
# a NumPy (or CuPy) array or a plain list are all accepted, and moved to the
# prediction's device. Shapes must match exactly (no silent broadcasting: `(N, 1)`
# against `(N,)` would broadcast to `(N, N)` and average the wrong thing), and a
# mismatch is a `ValueError` that names both shapes.

# %%
#| export
def _as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _target_array(target: Any, like: Tensor):
    """`target` as a raw array on `like`'s device (a list keeps NumPy's own dtype)."""
    xp = array_module(like.data)
    array = target.data if isinstance(target, Tensor) else target
    if array_module(array) is not xp:
        array = array.get() if xp is np else xp.asarray(array)
    return xp.asarray(array)


def _float_targets(target: Any, pred: Tensor, name: str):
    """Float targets with `pred`'s shape, in `pred`'s dtype."""
    array = _target_array(target, pred)
    if tuple(array.shape) != pred.shape:
        raise ValueError(
            f"{name}: predictions of shape {pred.shape} and targets of shape {tuple(array.shape)} "
            "must have the same shape."
        )
    return array.astype(pred.dtype)


def _class_targets(targets: Any, logits: Tensor):
    """Integer class indices of shape logits.shape[:-1] (int64), or a ValueError that says why not."""
    if logits.ndim == 0:
        raise ValueError("CrossEntropyLoss: logits need a class dimension, got a 0-d tensor.")
    xp = array_module(logits.data)
    array = _target_array(targets, logits)
    if tuple(array.shape) != logits.shape[:-1]:
        raise ValueError(
            f"CrossEntropyLoss: logits of shape {logits.shape} need targets of shape "
            f"{logits.shape[:-1]} (one class index per row of logits), got targets of shape {tuple(array.shape)}."
        )
    if array.dtype.kind == "f":
        if not bool(xp.all(array == xp.round(array))):
            raise ValueError("CrossEntropyLoss: targets must be integer class indices, got fractional values.")
    elif array.dtype.kind not in "iu":
        raise ValueError(f"CrossEntropyLoss: targets must be integer class indices, got dtype {array.dtype}.")
    return array.astype(np.int64)


# %% [markdown]
# ## 2. Mean squared error
#
# $$\mathrm{MSE}(\hat y, y) = \frac1N \sum_i (\hat y_i - y_i)^2$$
#
# over all `N` elements. Squaring makes every error count positively, and big errors
# count much more than small ones (an error of 3 costs 9 times an error of 1). Its
# gradient, `2(ŷ - y)/N`, is proportional to the error: large when far off, gentle when
# close. It is the loss for predicting numbers; it is a poor loss for probabilities, as
# section 4 shows.
#
# Example: predictions `[2.5, 0.0, 2.0]`, targets `[3.0, -0.5, 2.0]`: errors `[-0.5,
# 0.5, 0]`, squares `[0.25, 0.25, 0]`, mean `0.5 / 3 = 0.1667`.

# %%
#| export
def mse_loss(pred: Tensor, target: Any) -> Tensor:
    """Mean of (pred - target)² over all elements. pred: any shape; target: the same shape.

    Returns a 0-d Tensor. Built from Tensor ops (sub, pow, mean), so autograd needs no new rule.
    """
    pred = _as_tensor(pred)
    if not isinstance(target, Tensor):
        target = Tensor(_float_targets(target, pred, "MSELoss"))
    elif target.shape != pred.shape:
        raise ValueError(
            f"MSELoss: predictions of shape {pred.shape} and targets of shape {target.shape} "
            "must have the same shape."
        )
    ### BEGIN SOLUTION
    return ((pred - target) ** 2).mean()
    ### END SOLUTION


class MSELoss(Module):
    """Mean squared error: MSELoss()(pred, target) = mean((pred - target)²), a 0-d Tensor."""

    def forward(self, pred: Tensor, target: Any) -> Tensor:
        return mse_loss(pred, target)


# %%
def test_unit_mse():
    loss = MSELoss()(Tensor([2.5, 0.0, 2.0]), [3.0, -0.5, 2.0])
    assert loss.shape == () and abs(loss.item() - 0.5 / 3) < 1e-7
    assert MSELoss()(Tensor([[1.0, 2.0]]), Tensor([[1.0, 2.0]])).item() == 0.0
    pred = Tensor([1.0, 2.0], requires_grad=True)
    assert mse_loss(pred, [0.0, 0.0])._node.op == "mean"
    try:
        mse_loss(Tensor(np.zeros((4, 1))), np.zeros(4))
    except ValueError as err:
        assert "(4, 1)" in str(err) and "(4,)" in str(err)
    else:
        raise AssertionError("shape mismatch must raise ValueError")
    print("✓ MSELoss")


test_unit_mse()

# %% [markdown]
# ## 3. Cross-entropy and log-sum-exp
#
# A classifier outputs **logits** `z` (one raw score per class); softmax turns them into
# probabilities. Cross-entropy is the negative log-probability of the correct class `y`:
#
# $$\mathrm{CE}(z, y) = -\log \frac{e^{z_y}}{\sum_j e^{z_j}} = \underbrace{\log \sum_j e^{z_j}}_{\text{log-sum-exp}} - z_y$$
#
# averaged over the batch. A model that puts probability 1 on the right class pays 0; one
# that puts 0.5 pays `log 2 = 0.693`; uniform guessing over C classes pays `log C`
# (2.303 for 10 classes — the loss an untrained classifier should start near).
#
# The **log-sum-exp** is computed with the max shift from module 02:
# `LSE(z) = m + log Σ_j e^(z_j - m)` with `m = max_j z_j`. Every exponent is `≤ 0` and
# one of them is exactly 0, so nothing overflows and the log's argument is at least 1.
# The correct class's log-probability is then `z_y - LSE(z)`: no probability is ever
# formed and then logged.
#
# Shapes: logits `(..., C)` with the classes **last** (batch `(N, C)`, sequences `(B, T,
# C)`), integer targets `(...)`. (PyTorch puts the classes in dimension 1 for
# inputs with more than two dimensions; here they are always last, which is what
# language models produce.)
#
# **Ignoring positions.** Batches of sentences are padded to a common length, and the
# padding should not count. With `ignore_index=k`, positions whose target is `k` are
# left out, and the mean is over the remaining positions only. If *every* position is
# ignored there is nothing to average; TinyTorch defines the loss as **0** in that case
# (and its gradient as 0) rather than PyTorch's `0/0 = nan`.
#
# **Recorded as one op.** The forward saves, for module 05:
#
# * `probs`: `softmax(z)`, same shape as the logits;
# * `targets`: the class indices as an int array, with ignored positions replaced by 0
#   (so they are always valid indices);
# * `valid`: a bool array, False where ignored;
# * `count`: the number of valid positions (1 when there are none, so that dividing by it
#   is always safe: the gradient is then 0 because every position is invalid).
#
# With those, the gradient with respect to the logits is
# `(probs - onehot(targets)) · valid[..., None] / count`.

# %%
#| export
def cross_entropy(logits: Tensor, targets: Any, ignore_index: int | None = None) -> Tensor:
    """Mean cross-entropy of `logits` (..., C) against integer `targets` (...).

    targets: Tensor, array or list of class indices in [0, C); positions equal to
    `ignore_index` are left out of the mean (all ignored -> loss 0). Computed with
    log-sum-exp, so any finite logits give a finite loss. Returns a 0-d Tensor in the
    logits' dtype. Records op "cross_entropy" with saved probs, targets, valid, count.
    """
    logits = _as_tensor(logits)
    targets = _class_targets(targets, logits)
    ### BEGIN SOLUTION
    xp = array_module(logits.data)
    num_classes = logits.shape[-1]
    valid = xp.ones(targets.shape, dtype=bool) if ignore_index is None else targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= num_classes))
    if bool(bad.any()):
        raise ValueError(
            f"CrossEntropyLoss: target {int(targets[bad].ravel()[0])} is out of range for "
            f"{num_classes} classes (valid: 0 … {num_classes - 1}"
            + (f", or ignore_index={ignore_index})." if ignore_index is not None else ").")
        )
    safe = xp.where(valid, targets, 0)
    shifted = logits.data - xp.max(logits.data, axis=-1, keepdims=True)
    log_probs = shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))
    picked = xp.take_along_axis(log_probs, safe[..., None], axis=-1)[..., 0]
    count = int(valid.sum())
    loss = -xp.where(valid, picked, 0).sum() / max(count, 1)
    return record_op("cross_entropy", xp.asarray(loss, dtype=logits.dtype), (logits,),
                     probs=xp.exp(log_probs), targets=safe, valid=valid, count=max(count, 1))
    ### END SOLUTION


class CrossEntropyLoss(Module):
    """Cross-entropy on logits (..., C) with integer targets (...), mean over non-ignored positions.

    ignore_index -- a target value to leave out (e.g. padding); all ignored -> loss 0.
    """

    def __init__(self, ignore_index: int | None = None):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, logits: Tensor, targets: Any) -> Tensor:
        return cross_entropy(logits, targets, ignore_index=self.ignore_index)

    def extra_repr(self) -> str:
        return "" if self.ignore_index is None else f"ignore_index={self.ignore_index}"


# %% [markdown]
# A hand-checkable case: logits `[0, 0, ln 2]` give probabilities `[1/4, 1/4, 1/2]`, so the
# loss is `ln 4 = 1.386` for target 0 and `ln 2 = 0.693` for target 2; their mean is
# `1.0397`. And the log-sum-exp keeps huge logits finite:

# %%
z = Tensor([[0.0, 0.0, np.log(2.0)], [0.0, 0.0, np.log(2.0)]])
print("CE([0, 0, ln 2], targets [0, 2]) =", round(cross_entropy(z, [0, 2]).item(), 4), "  by hand:",
      round((np.log(4) + np.log(2)) / 2, 4))
print("CE([1000, 1001, 1002], target 0) =", round(cross_entropy(Tensor([[1000.0, 1001.0, 1002.0]]), [0]).item(), 4),
      "  by hand: -ln 0.0900 =", round(-np.log(0.09003057), 4))

# %%
def test_unit_cross_entropy():
    z = Tensor([[0.0, 0.0, np.log(2.0)], [0.0, 0.0, np.log(2.0)]])
    assert abs(cross_entropy(z, [0, 2]).item() - (np.log(4) + np.log(2)) / 2) < 1e-6
    assert abs(CrossEntropyLoss()(Tensor([[1000.0, 1001.0, 1002.0]]), [0]).item() - 2.4076059) < 1e-5
    assert abs(CrossEntropyLoss(ignore_index=-100)(z, [0, -100]).item() - np.log(4)) < 1e-6
    assert CrossEntropyLoss(ignore_index=-100)(z, [-100, -100]).item() == 0.0
    node = cross_entropy(Tensor(z.numpy(), requires_grad=True), np.array([1, 2]))._node
    assert node.op == "cross_entropy" and node.saved["count"] == 2
    assert np.allclose(node.saved["probs"], [[0.25, 0.25, 0.5]] * 2) and node.saved["valid"].all()
    for bad_targets in ([0, 3], [[0, 1]]):
        try:
            cross_entropy(z, bad_targets)
        except ValueError:
            pass
        else:
            raise AssertionError(f"targets {bad_targets} must raise ValueError")
    print("✓ CrossEntropyLoss (log-sum-exp, ignore_index)")


test_unit_cross_entropy()

# %% [markdown]
# ## 4. Why cross-entropy on logits, not on probabilities
#
# **Numerically.** Suppose the model is confidently wrong: the logits are `[0, 120]`
# and the right class is 0. The true loss is `LSE - z_0 = 120 + log(1 + e^-120) - 0 ≈
# 120`. But `softmax` in float32 rounds `e^-120 ≈ 7.7e-53` to exactly 0 (the smallest
# float32 is about `1.4e-45`), and `-log(0) = inf`. One such example makes the batch
# loss `inf` and every gradient `nan`. Taking softmax first and the log afterwards
# throws the information away; log-sum-exp never forms the tiny probability. (At 100 the
# probability `e^-100 ≈ 3.7e-44` survives only as a float32 *subnormal* with a few
# bits of precision, and the loss is already off in the second decimal.)

# %%
from tinytorch.core.activations import softmax

for big in (50.0, 100.0, 120.0, 200.0):
    logits = Tensor(np.array([[0.0, big]], dtype=np.float32))
    with np.errstate(divide="ignore"):
        via_probs = -np.log(softmax(logits).numpy()[0, 0])
    print(f"logits [0, {big:5.0f}], target 0: -log(softmax) = {via_probs:10.4f}   "
          f"log-sum-exp CE = {cross_entropy(logits, [0]).item():10.4f}")

# %% [markdown]
# **For learning.** Compare what the loss does to the correct class's logit `z_y` when
# the model gives it a small probability `p`. Cross-entropy's gradient with respect to
# `z_y` is `p - 1`: close to `-1`, a full-strength push, however wrong the model is.
# MSE on the probability, `(p - 1)²`, has gradient `2(p - 1) · p(1 - p)` through the
# softmax, which goes to **zero** as `p → 0`: the more confidently wrong the model, the
# less it learns. (Numbers for two classes, where `dp/dz_y = p(1-p)`.)

# %%
print(f"{'p(correct)':>10s} {'CE loss':>9s} {'dCE/dz':>9s} {'MSE loss':>9s} {'dMSE/dz':>9s}")
for p in (0.5, 0.1, 0.01, 0.001):
    print(f"{p:10.3f} {-np.log(p):9.3f} {p - 1:9.3f} {(p - 1) ** 2:9.3f} {2 * (p - 1) * p * (1 - p):9.5f}")

# %% [markdown]
# ## 5. Binary cross-entropy
#
# For yes/no labels `t ∈ {0, 1}` (or soft labels in `[0, 1]`), with predicted probability
# `p = σ(x)`:
#
# $$\mathrm{BCE}(p, t) = -\big(t \log p + (1 - t) \log(1 - p)\big)$$
#
# averaged over all elements; each element is an independent yes/no question, which also
# makes it the loss for multi-label classification.
#
# **On probabilities** (`BinaryCrossEntropyLoss`, op `binary_cross_entropy`): `p` must be
# in `[0, 1]`; it is clipped to `[eps, 1 - eps]` (eps = 1e-7) before the logs, so a
# probability of exactly 0 or 1 costs at most about 16 (`-log(1e-7) = 16.1`; 15.94 in
# float32, where `1 - 1e-7` rounds to `1 - 1.19e-7`) instead of `inf`. The
# forward saves `targets` and `eps`.
#
# **On logits** (`BCEWithLogitsLoss`, op `bce_with_logits`): substitute `p = σ(x)` and
# simplify. `log σ(x) = -log(1 + e^-x)` and `log(1 - σ(x)) = -x - log(1 + e^-x)`, so the
# loss is `x - x·t + log(1 + e^-x)`. That still overflows for `x ≪ 0`; rewriting with
# `|x|` gives the form used here, exact for every `x` and overflow-free:
#
# $$\mathrm{BCE}(x, t) = \max(x, 0) - x\,t + \log\!\left(1 + e^{-|x|}\right)$$
#
# (`log1p` keeps the last term accurate when `e^{-|x|}` is tiny.) As with softmax,
# prefer the logits version: the clipped one is wrong for confident mistakes (it
# caps the loss near 16 and has no gradient there, while the true loss keeps growing):

# %%
#| export
def binary_cross_entropy(probs: Tensor, targets: Any, eps: float = 1e-7) -> Tensor:
    """Mean of -(t·log p + (1-t)·log(1-p)) with p clipped to [eps, 1-eps].

    probs: any shape, values in [0, 1] (ValueError otherwise); targets: the same shape,
    values in [0, 1]. Returns a 0-d Tensor. Records op "binary_cross_entropy" with saved
    targets (float array, probs' dtype) and eps.
    """
    probs = _as_tensor(probs)
    targets = _float_targets(targets, probs, "BinaryCrossEntropyLoss")
    ### BEGIN SOLUTION
    xp = array_module(probs.data)
    if bool(((probs.data < 0) | (probs.data > 1)).any()):
        raise ValueError(
            "BinaryCrossEntropyLoss expects probabilities in [0, 1]; for raw scores (logits) "
            "use BCEWithLogitsLoss."
        )
    work = probs.data.astype(np.promote_types(probs.dtype, np.float32))  # 1 - 1e-7 is 1.0 in float16
    p = xp.clip(work, eps, 1 - eps)
    t = targets.astype(work.dtype)
    loss = -xp.mean(t * xp.log(p) + (1 - t) * xp.log(1 - p))
    return record_op("binary_cross_entropy", xp.asarray(loss, dtype=probs.dtype), (probs,),
                     targets=targets, eps=eps)
    ### END SOLUTION


def binary_cross_entropy_with_logits(logits: Tensor, targets: Any) -> Tensor:
    """Mean of max(x, 0) - x·t + log(1 + e^-|x|): BCE of sigmoid(x), stable for any x.

    logits: any shape; targets: the same shape, values in [0, 1]. Returns a 0-d Tensor.
    Records op "bce_with_logits" with saved targets (float array, logits' dtype).
    """
    logits = _as_tensor(logits)
    targets = _float_targets(targets, logits, "BCEWithLogitsLoss")
    ### BEGIN SOLUTION
    xp = array_module(logits.data)
    x = logits.data
    loss = xp.mean(xp.maximum(x, 0) - x * targets + xp.log1p(xp.exp(-xp.abs(x))))
    return record_op("bce_with_logits", xp.asarray(loss, dtype=logits.dtype), (logits,), targets=targets)
    ### END SOLUTION


class BinaryCrossEntropyLoss(Module):
    """BCE on probabilities in [0, 1], clipped to [eps, 1-eps]; mean over all elements."""

    def __init__(self, eps: float = 1e-7):
        super().__init__()
        self.eps = eps

    def forward(self, probs: Tensor, targets: Any) -> Tensor:
        return binary_cross_entropy(probs, targets, eps=self.eps)


class BCEWithLogitsLoss(Module):
    """BCE on logits: sigmoid folded into the loss, stable for any logit; mean over all elements."""

    def forward(self, logits: Tensor, targets: Any) -> Tensor:
        return binary_cross_entropy_with_logits(logits, targets)


BCELoss = BinaryCrossEntropyLoss  # PyTorch's name

# %%
from tinytorch.core.activations import sigmoid

for x in (-5.0, 20.0, 40.0, 100.0):
    logit = Tensor(np.array([x], dtype=np.float32))
    p = sigmoid(logit)
    print(f"logit {x:6.1f}, target 0: BCE on sigmoid (clipped) = {binary_cross_entropy(p, [0.0]).item():8.4f}"
          f"   BCE with logits = {binary_cross_entropy_with_logits(logit, [0.0]).item():8.4f}")

# %%
def test_unit_binary_cross_entropy():
    p, t = Tensor([0.9, 0.2, 0.5]), [1.0, 0.0, 1.0]
    expected = -(np.log(0.9) + np.log(0.8) + np.log(0.5)) / 3
    assert abs(BinaryCrossEntropyLoss()(p, t).item() - expected) < 1e-6
    assert np.isfinite(binary_cross_entropy(Tensor([0.0, 1.0]), [1.0, 0.0]).item())
    x = np.array([-3.0, 0.0, 2.0])
    expected = -np.mean(t * np.log(1 / (1 + np.exp(-x))) + (1 - np.array(t)) * np.log(1 - 1 / (1 + np.exp(-x))))
    assert abs(BCEWithLogitsLoss()(Tensor(x), t).item() - expected) < 1e-12
    assert abs(binary_cross_entropy_with_logits(Tensor([1000.0, -1000.0]), [0.0, 1.0]).item() - 1000.0) < 1e-3
    node = binary_cross_entropy_with_logits(Tensor(x, requires_grad=True), t)._node
    assert node.op == "bce_with_logits" and np.array_equal(node.saved["targets"], t)
    node = binary_cross_entropy(Tensor([0.5], requires_grad=True), [1.0])._node
    assert node.op == "binary_cross_entropy" and node.saved["eps"] == 1e-7
    try:
        binary_cross_entropy(Tensor([1.5]), [1.0])
    except ValueError:
        pass
    else:
        raise AssertionError("probabilities outside [0, 1] must raise ValueError")
    print("✓ BinaryCrossEntropyLoss and BCEWithLogitsLoss")


test_unit_binary_cross_entropy()

# %% [markdown]
# ## Summary
#
# * MSE `mean((ŷ - y)²)` for numbers; built from Tensor ops.
# * Cross-entropy `LSE(z) - z_y` on **logits** with integer targets, classes last,
#   mean over non-ignored positions (all ignored: 0). Never `-log(softmax(z))`: in
#   float32 it is `inf` once a wrong logit leads by ~104.
# * Its gradient `softmax(z) - onehot(y)` pushes at full strength when the model is
#   confidently wrong, where MSE on probabilities barely moves.
# * Binary cross-entropy: on logits as `max(x,0) - x·t + log1p(e^-|x|)`; on
#   probabilities only with clipping.
# * Ops recorded for module 05: `cross_entropy` (probs, targets, valid, count),
#   `binary_cross_entropy` (targets, eps), `bce_with_logits` (targets).
