# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 04: Losses
#
# > One number that says how wrong the model is, and that training pushes down.
#
# **What you will be able to do** after this module:
#
# * write mean squared error, cross-entropy (with `ignore_index`) and binary
#   cross-entropy, on probabilities and on logits;
# * compute a log-sum-exp that never overflows, and explain why cross-entropy takes
#   **logits**, not probabilities, with numbers from your own code;
# * compare what MSE and cross-entropy do to a confidently wrong classifier, by measuring
#   their gradients numerically;
# * record the cross-entropies as single operations that save exactly what module 05's
#   fused backward rules read;
# * keep float16 losses finite: a vocabulary of 70,000 classes, or a batch whose summed
#   loss passes 65,504.
#
# **Time:** about 2 hours: 75 minutes for the four functions and their tests, 45 for the
# measurements and the exercises at the end.
#
# **How to work through it.** As in module 02: each section explains why and works an
# example, then gives you a function to write between the `BEGIN SOLUTION` and
# `END SOLUTION` marker lines. Its docstring (and the prose just above it) is its
# contract: the op it records, its inputs, what it saves, what it raises. A `test_unit_*`
# check follows each function. Where the lesson says **Predict, then run**, write your
# prediction down before running the cell.
#
# ## Why losses
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
from tinytorch.core.tensor import Tensor, array_module, as_tensor, autocast_float32, record_op, to_host

# %% [markdown]
# ## 1. Checking what comes in (given code)
#
# Every loss takes `(prediction, target)`. Targets are data, not parameters: a `Tensor`,
# a NumPy (or CuPy) array or a plain list are all accepted, and moved to the
# prediction's device. Shapes must match exactly (no silent broadcasting: `(N, 1)`
# against `(N,)` would broadcast to `(N, N)` and average the wrong thing), and a
# mismatch is a `ValueError` that names both shapes.
#
# The checks are given, so that you can spend your time on the losses themselves. Each
# loss calls them on its first lines:
#
# * `_float_targets(target, pred, name)`: float targets of `pred`'s shape, in `pred`'s
#   dtype (`TypeError` for an integer `pred`, `ValueError` naming both shapes).
# * `_class_targets(targets, logits, ignore_index)` returns `(targets, valid)`: the class
#   indices as an int64 array of shape `logits.shape[:-1]`, and a bool array of the same
#   shape, `False` where the target equals `ignore_index` (all `True` when it is `None`).
#   It raises `ValueError` for a shape mismatch (naming both shapes), fractional
#   targets, or a non-ignored target outside `[0, C)` (naming the target and `C`).
# * `_check_probabilities(probs, name)`: `ValueError` when a value lies outside `[0, 1]`,
#   pointing to the logits version.

# %%
#| export
def _target_array(target: Any, like: Tensor):
    """`target` as a raw array on `like`'s device (a list keeps NumPy's own dtype)."""
    xp = array_module(like.data)
    array = target.data if isinstance(target, Tensor) else target
    if array_module(array) is not xp:
        array = to_host(array) if xp is np else xp.asarray(array)
    return xp.asarray(array)


def _check_floating(pred: Tensor, name: str) -> None:
    if pred.dtype.kind != "f":
        raise TypeError(f"{name} needs floating-point predictions, got dtype {pred.dtype}: "
                        "convert them first, e.g. Tensor(values, dtype=np.float32).")


def _float_targets(target: Any, pred: Tensor, name: str):
    """Float targets with `pred`'s shape, in `pred`'s dtype."""
    _check_floating(pred, name)
    array = _target_array(target, pred)
    if tuple(array.shape) != pred.shape:
        raise ValueError(
            f"{name}: predictions of shape {pred.shape} and targets of shape {tuple(array.shape)} "
            "must have the same shape."
        )
    return array.astype(pred.dtype)


def _class_targets(targets: Any, logits: Tensor, ignore_index: int | None):
    """(targets, valid): int64 class indices of shape logits.shape[:-1], and where they count.

    valid is a bool array of the same shape, False where the target equals ignore_index.
    ValueError (saying why) for a wrong shape, fractional targets, or a non-ignored
    target outside [0, C).
    """
    if logits.ndim == 0:
        raise ValueError("CrossEntropyLoss: logits need a class dimension, got a 0-d tensor.")
    _check_floating(logits, "CrossEntropyLoss")
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
    array = array.astype(np.int64)
    valid = xp.ones(array.shape, dtype=bool) if ignore_index is None else array != ignore_index
    num_classes = logits.shape[-1]
    bad = valid & ((array < 0) | (array >= num_classes))
    if bool(bad.any()):
        raise ValueError(
            f"CrossEntropyLoss: target {int(array[bad].ravel()[0])} is out of range for "
            f"{num_classes} classes (valid: 0 … {num_classes - 1}"
            + (f", or ignore_index={ignore_index})." if ignore_index is not None else ").")
        )
    return array, valid


def _check_probabilities(probs: Tensor, name: str) -> None:
    if bool(((probs.data < 0) | (probs.data > 1)).any()):
        raise ValueError(
            f"{name} expects probabilities in [0, 1]; for raw scores (logits) use BCEWithLogitsLoss."
        )


# %%
targets_demo, valid_demo = _class_targets([2, -100, 0], Tensor(np.zeros((3, 4))), ignore_index=-100)
print("targets:", targets_demo, "valid:", valid_demo)
try:
    _class_targets([2, 7, 0], Tensor(np.zeros((3, 4))), ignore_index=None)
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# ## 2. Mean squared error
#
# $$\mathrm{MSE}(\hat y, y) = \frac1N \sum_i (\hat y_i - y_i)^2$$
#
# over all `N` elements. Squaring makes every error count positively, and big errors
# count much more than small ones (an error of 3 costs 9 times an error of 1). Its
# gradient, `2(ŷ - y)/N`, is proportional to the error: large when far off, gentle when
# close. It is the loss for predicting numbers; it is a poor loss for probabilities, as
# section 4 shows. Note it is the **mean** of the squares: a sum would make the loss (and
# the step size a learning rate gives) grow with the batch size.
#
# Example: predictions `[2.5, 0.0, 2.0]`, targets `[3.0, -0.5, 2.0]`: errors `[-0.5,
# 0.5, 0]`, squares `[0.25, 0.25, 0]`, mean `0.5 / 3 = 0.1667`.
#
# MSE records **no op of its own**: write it with Tensor operations (`-`, `**`, `.mean()`),
# so the last op recorded is `mean`, and module 05 differentiates it from the rules it
# already has. The given lines turn the target into a Tensor of `pred`'s shape and dtype.

# %%
#| export
def mse_loss(pred: Tensor, target: Any) -> Tensor:
    """Mean of (pred - target)² over all elements.

    pred: a Tensor of any shape (floating point); target: the same shape (Tensor, array or
    list). Returns a 0-d Tensor in pred's dtype (float32 for float16 inside module 17's
    autocast: the given first line casts pred up). Built from Tensor ops (sub, pow, mean), so
    autograd needs no new rule: the recorded op of the result is "mean".
    Raises (given code) ValueError naming both shapes when they differ.
    """
    pred = autocast_float32(as_tensor(pred))  # given: float32 under module 17's autocast, else pred itself
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
    assert loss.shape == (), f"the loss is one number (shape ()), got shape {loss.shape}: take the mean over everything"
    assert abs(loss.item() - 0.5 / 3) < 1e-7, (f"MSE of [2.5, 0, 2] against [3, -0.5, 2]: (0.25 + 0.25 + 0) / 3 = "
                                               f"{0.5 / 3:.6f}, got {loss.item():.6f}: the mean of the squared differences")
    same = MSELoss()(Tensor([[1.0, 2.0]]), Tensor([[1.0, 2.0]])).item()
    assert same == 0.0, f"a prediction equal to its target has loss 0, got {same}"
    pred = Tensor([1.0, 2.0], requires_grad=True)
    node = mse_loss(pred, [0.0, 0.0])._node
    assert node is not None and node.op == "mean", (f"mse_loss is built from Tensor ops ending in a mean, so module "
                                                    f"05 differentiates it; the last op is {node and node.op!r}")
    try:
        mse_loss(Tensor(np.zeros((4, 1))), np.zeros(4))
    except ValueError as err:
        assert "(4, 1)" in str(err) and "(4,)" in str(err), f"the ValueError must name both shapes, it says: {err}"
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
# that puts 0.5 pays `log 2 = 0.693`; uniform guessing over C classes pays `log C`.
#
# **Predict, then run.** An untrained classifier with 10 classes outputs logits close to
# 0 for every class. What loss should it start at?

# %%
untrained = np.zeros((4, 10))
m = untrained.max(axis=-1, keepdims=True)
lse = (m + np.log(np.exp(untrained - m).sum(axis=-1, keepdims=True)))[:, 0]
print("loss of all-zero logits over 10 classes:", (lse - untrained[np.arange(4), [3, 1, 4, 1]]).mean(),
      "= ln 10 =", np.log(10))

# %% [markdown]
# That `ln C` is the first number to check when a classifier starts training: a loss far
# above it means the initial logits are too large.
#
# The **log-sum-exp** is computed with the max shift from module 02:
# `LSE(z) = m + log Σ_j e^(z_j - m)` with `m = max_j z_j`. Every exponent is `≤ 0` and
# one of them is exactly 0, so nothing overflows and the log's argument is at least 1.
# The correct class's term is then
#
# $$\mathrm{CE} = \mathrm{LSE}(z) - z_y = \log \sum_j e^{z_j - m} - (z_y - m):$$
#
# no probability is ever formed and then logged. To pick `z_y - m` for every row at once,
# use `xp.take_along_axis(shifted, targets[..., None], axis=-1)[..., 0]` (the class axis
# is the last one; the `None` adds the size-1 axis it needs).
#
# Worked example: logits `[0, 0, ln 2]` give probabilities `[1/4, 1/4, 1/2]`, so the
# loss is `ln 4 = 1.386` for target 0 and `ln 2 = 0.693` for target 2; their mean is
# `1.0397`.
#
# **Shapes.** Logits `(..., C)` with the classes **last** (batch `(N, C)`, sequences
# `(B, T, C)`), integer targets `(...)`. (PyTorch puts the classes in dimension 1 for
# inputs with more than two dimensions; here they are always last, which is what
# language models produce.)
#
# **Ignoring positions.** Batches of sentences are padded to a common length, and the
# padding should not count. With `ignore_index=k`, positions whose target is `k` are
# left out: they add nothing to the sum, and the mean divides by the number of
# **remaining** positions. If *every* position is ignored there is nothing to average;
# TinyTorch defines the loss as **0** in that case (and its gradient as 0) rather than
# PyTorch's `0/0 = nan`. The given `_class_targets` returns the `valid` mask for you.
#
# **float16.** Two sums here can pass float16's largest number, 65,504: the sum of the
# exponentials over a vocabulary of more than 65,504 classes (module 02), and the sum of
# the per-position losses over a batch (10,000 positions at a loss of 10 is 100,000). So,
# as in module 02's softmax, compute in `np.promote_types(logits.dtype, np.float32)` and
# return the loss in the logits' dtype.
#
# **Recorded as one op.** Record op `"cross_entropy"` with inputs `(logits,)` and
# these saved fields (module 05's rule reads exactly these names):
#
# * `probs`: `softmax(logits)` along the last axis, same shape and dtype as the logits;
# * `targets`: the class indices as an int array, with every ignored position replaced by
#   0 (so each is a valid index);
# * `valid`: the bool array, False where ignored;
# * `count`: the number of valid positions as a Python int, **at least 1** (1 when every
#   position is ignored, so that dividing by it is always safe: the gradient is then 0
#   because every position is invalid).
#
# With those, the gradient with respect to the logits is
# `(probs - onehot(targets)) · valid[..., None] / count`.

# %%
#| export
def cross_entropy(logits: Tensor, targets: Any, ignore_index: int | None = None) -> Tensor:
    """Mean cross-entropy LSE(z) - z_y of `logits` (..., C) against integer `targets` (...).

    logits: a floating-point Tensor with the classes on the last axis.
    targets: Tensor, array or list of class indices in [0, C), shape logits.shape[:-1];
    positions equal to `ignore_index` are left out of the sum and of the count (all
    ignored -> loss 0). Computed with log-sum-exp, so any finite logits give a finite
    loss; float16 is computed in float32. Returns a 0-d Tensor in the logits' dtype
    (float32 for float16 inside module 17's autocast: the given first line casts up).
    Raises (given code, `_class_targets`) ValueError for wrong target shapes or values.
    Records op "cross_entropy" with inputs (logits,) and saves `probs` (softmax of the
    logits, same shape and dtype), `targets` (int array, ignored positions replaced by
    0), `valid` (bool array, False where ignored), `count` (number of valid positions,
    a Python int, at least 1).
    """
    logits = autocast_float32(as_tensor(logits))  # given: float32 under module 17's autocast, else logits itself
    targets, valid = _class_targets(targets, logits, ignore_index)
    ### BEGIN SOLUTION
    xp = array_module(logits.data)
    work = logits.data.astype(np.promote_types(logits.dtype, np.float32), copy=False)
    safe = xp.where(valid, targets, 0)
    shifted = work - xp.max(work, axis=-1, keepdims=True)  # z - m: a new array, reused below
    picked = xp.take_along_axis(shifted, safe[..., None], axis=-1)[..., 0]  # z_y - m
    exps = xp.exp(shifted, out=shifted)
    sums = xp.sum(exps, axis=-1, keepdims=True)
    losses = xp.log(sums[..., 0]) - picked  # LSE(z) - z_y at every position
    count = int(valid.sum())
    loss = xp.where(valid, losses, 0).sum() / max(count, 1)
    exps /= sums  # the probabilities, in place
    probs = exps.astype(logits.dtype, copy=False)
    return record_op("cross_entropy", xp.asarray(loss, dtype=logits.dtype), (logits,),
                     probs=probs, targets=safe, valid=valid, count=max(count, 1))
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


# %%
z = Tensor([[0.0, 0.0, np.log(2.0)], [0.0, 0.0, np.log(2.0)]])
print("CE([0, 0, ln 2], targets [0, 2]) =", round(cross_entropy(z, [0, 2]).item(), 4), "  by hand:",
      round((np.log(4) + np.log(2)) / 2, 4))
print("CE([1000, 1001, 1002], target 0) =", round(cross_entropy(Tensor([[1000.0, 1001.0, 1002.0]]), [0]).item(), 4),
      "  by hand: -ln 0.0900 =", round(-np.log(0.09003057), 4))
print("CE with the second row ignored =", round(cross_entropy(z, [0, -100], ignore_index=-100).item(), 4),
      "  = ln 4 =", round(np.log(4), 4))


# %%
def test_unit_cross_entropy():
    z = Tensor([[0.0, 0.0, np.log(2.0)], [0.0, 0.0, np.log(2.0)]])
    logits_before = z.numpy().copy()
    try:
        got, expected = cross_entropy(z, [0, 2]).item(), (np.log(4) + np.log(2)) / 2
    except IndexError as err:
        raise AssertionError(f"cross_entropy(logits (2, 3), targets [0, 2]) raised IndexError ({err}): pick each row's "
                             "target score along the class axis (the last), e.g. with take_along_axis(..., axis=-1)") from None
    assert np.array_equal(z.numpy(), logits_before), \
        "cross_entropy changed its logits in place (it subtracted the max from z.data): work on a new array"
    assert abs(got - expected) < 1e-6, (f"probabilities [1/4, 1/4, 1/2], targets [0, 2]: the mean of -log p[target] "
                                        f"= (ln 4 + ln 2) / 2 = {expected:.6f}, got {got:.6f}: the log-softmax of each row "
                                        "over its classes (max and sum along the last axis), -log of the target's entry")
    big = CrossEntropyLoss()(Tensor([[1000.0, 1001.0, 1002.0]]), [0]).item()
    assert abs(big - 2.4076059) < 1e-5, (f"logits [1000, 1001, 1002], target 0: expected 2.4076059, got {big}: compute "
                                         "log-softmax stably (subtract the maximum), never log(softmax)")
    ignored = CrossEntropyLoss(ignore_index=-100)(z, [0, -100]).item()
    assert abs(ignored - np.log(4)) < 1e-6, (f"with target -100 ignored the loss is the mean over the one valid "
                                             f"position, ln 4 = {np.log(4):.6f}; got {ignored:.6f}")
    nothing = CrossEntropyLoss(ignore_index=-100)(z, [-100, -100]).item()
    assert nothing == 0.0, f"every target ignored: the loss is 0 (count 1, never a division by 0), got {nothing}"
    half = cross_entropy(Tensor(np.zeros((2, 70_000), dtype=np.float16)), [5, 69_999])
    assert half.dtype == np.float16 and abs(float(half.item()) - np.log(70_000)) < 1e-2, (
        f"float16 logits over 70,000 classes: expected ln(70000) = {np.log(70_000):.3f} in float16, got "
        f"{float(half.item())} ({half.dtype}): compute in float32, return float16")
    node = cross_entropy(Tensor(z.numpy(), requires_grad=True), np.array([1, -1]), ignore_index=-1)._node
    assert node is not None and node.op == "cross_entropy", f"cross_entropy must record one op, got {node and node.op!r}"
    assert set(node.saved) == {"probs", "targets", "valid", "count"}, \
        f"cross_entropy saves probs, targets, valid and count; it saved {sorted(node.saved)}"
    assert np.allclose(node.saved["probs"], [[0.25, 0.25, 0.5]] * 2) and node.saved["count"] == 1, \
        f"saved probs must be the softmax, and count the valid positions (1); got count {node.saved['count']}"
    assert node.saved["targets"].tolist() == [1, 0] and node.saved["valid"].tolist() == [True, False], (
        f"saved targets put 0 where ignored ([1, 0]) and valid marks them ([True, False]); got "
        f"{node.saved['targets'].tolist()} and {node.saved['valid'].tolist()}")
    for bad_targets in ([0, 3], [[0, 1]]):
        try:
            cross_entropy(z, bad_targets)
        except ValueError:
            pass
        else:
            raise AssertionError(f"targets {bad_targets} must raise ValueError")
    print("✓ CrossEntropyLoss (log-sum-exp, ignore_index, float16 over 70,000 classes)")


test_unit_cross_entropy()

# %% [markdown]
# ## 4. Why cross-entropy on logits, not on probabilities
#
# **Numerically.** Suppose the model is confidently wrong: the logits are `[0, d]` with
# a large `d` and the right class is 0. The true loss is `LSE - z_0 = d + log(1 + e^-d)
# ≈ d`. Taking the softmax first and the log afterwards needs `e^-d` as a probability,
# and float32 cannot hold numbers below about `1.4e-45 ≈ e^-103`.
#
# **Predict, then run.** For `d = 50, 100, 120, 200`, what does `-log(softmax(z)[0])`
# give in float32, and what does your `cross_entropy` give?

# %%
from tinytorch.core.activations import softmax

for gap in (50.0, 100.0, 120.0, 200.0):
    logits = Tensor(np.array([[0.0, gap]], dtype=np.float32))
    with np.errstate(divide="ignore"):
        via_probs = -np.log(to_host(softmax(logits))[0, 0])
    print(f"logits [0, {gap:5.0f}], target 0: -log(softmax) = {via_probs:10.4f}   "
          f"log-sum-exp CE = {cross_entropy(logits, [0]).item():10.4f}")

# %% [markdown]
# One such example makes the batch loss `inf` and every gradient `nan`. (At 100 the
# probability `e^-100 ≈ 3.7e-44` survives only as a float32 *subnormal* with a few bits
# of precision, and the loss is already off in the second decimal.)
#
# **For learning.** Compare what MSE and cross-entropy do to the correct class's logit
# when the model gives that class a small probability `p`. Take two classes with logits
# `[z, 0]`, the right class 0, so `p = σ(z)`. Cross-entropy's slope `dCE/dz = p - 1`
# stays near `-1`, a full-strength push, however wrong the model is. MSE on the
# probability, `(p - 1)²`, has slope `2(p - 1) · p(1 - p)`, which goes to **zero** as
# `p → 0`: the more confidently wrong the model, the less it learns.
#
# **Predict, then run.** At `p = 0.001`, how many times smaller is MSE's slope than
# cross-entropy's: 10×, 100× or 1000×? The cell measures both slopes on **your** losses
# with central differences (`tinytorch.testing.central_difference`), in float64.

# %%
from tinytorch.testing import central_difference


def ce_of_logit(z_correct: np.ndarray) -> float:
    logits = np.concatenate([z_correct, [0.0]])[None, :]  # two classes: [z, 0]
    return cross_entropy(Tensor(logits), [0]).item()


def mse_of_logit(z_correct: np.ndarray) -> float:
    p = softmax(Tensor(np.concatenate([z_correct, [0.0]]))).numpy()[0]
    return mse_loss(Tensor(np.array([p])), [1.0]).item()


print(f"{'p(correct)':>10s} {'CE loss':>9s} {'dCE/dz':>9s} {'MSE loss':>9s} {'dMSE/dz':>10s}")
for p in (0.5, 0.1, 0.01, 0.001):
    z_correct = np.array([np.log(p / (1 - p))])  # the logit that gives probability p
    d_ce = central_difference(ce_of_logit, z_correct)[0]
    d_mse = central_difference(mse_of_logit, z_correct)[0]
    print(f"{p:10.3f} {ce_of_logit(z_correct):9.3f} {d_ce:9.3f} {mse_of_logit(z_correct):9.3f} {d_mse:10.6f}")

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
# in `[0, 1]` (given check); it is **clipped** to `[eps, 1 - eps]` (eps = 1e-7) before the
# logs, so a probability of exactly 0 or 1 costs at most about 16 (`-log(1e-7) = 16.1`)
# instead of `inf`. Clip in at least float32: in float16, `1 - 1e-7` rounds to exactly 1,
# and the clip does nothing (use `np.promote_types(probs.dtype, np.float32)` as before,
# and return the loss in the probabilities' dtype). Record op `"binary_cross_entropy"`
# with inputs `(probs,)`, saving `targets` (the float targets array, in the
# probabilities' dtype, as the given line makes it) and `eps` (the clip, a float).
#
# **On logits** (`BCEWithLogitsLoss`, op `bce_with_logits`): substitute `p = σ(x)` and
# simplify. `log σ(x) = -log(1 + e^-x)` and `log(1 - σ(x)) = -x - log(1 + e^-x)`, so the
# loss is `x - x·t + log(1 + e^-x)`. That still overflows for `x ≪ 0` (`e^1000`);
# rewriting with `|x|` gives the form to use, exact for every `x` and overflow-free:
#
# $$\mathrm{BCE}(x, t) = \max(x, 0) - x\,t + \log\!\left(1 + e^{-|x|}\right)$$
#
# (`xp.log1p(v)` computes `log(1 + v)` accurately when `v` is tiny.) Record op
# `"bce_with_logits"` with inputs `(logits,)`, saving `targets` (the float targets array,
# in the logits' dtype). Worked example: `x = 0, t = 1` gives `0 - 0 + log 2 = 0.693`.

# %%
#| export
def binary_cross_entropy(probs: Tensor, targets: Any, eps: float = 1e-7) -> Tensor:
    """Mean of -(t·log p + (1-t)·log(1-p)) with p clipped to [eps, 1-eps].

    probs: a floating-point Tensor of any shape, values in [0, 1]; targets: the same
    shape, values in [0, 1]. Computed in at least float32 (the clip is lost in float16).
    Returns a 0-d Tensor in probs' dtype (float32 inside module 17's autocast).
    Raises (given code) ValueError for values outside [0, 1] or a shape mismatch.
    Records op "binary_cross_entropy" with inputs (probs,) and saves `targets` (float
    array, probs' dtype) and `eps` (the clip).
    """
    probs = autocast_float32(as_tensor(probs))  # given: float32 under module 17's autocast, else probs itself
    targets = _float_targets(targets, probs, "BinaryCrossEntropyLoss")
    _check_probabilities(probs, "BinaryCrossEntropyLoss")
    ### BEGIN SOLUTION
    xp = array_module(probs.data)
    work = probs.data.astype(np.promote_types(probs.dtype, np.float32))  # 1 - 1e-7 is 1.0 in float16
    p = xp.clip(work, eps, 1 - eps)
    t = targets.astype(work.dtype)
    loss = -xp.mean(t * xp.log(p) + (1 - t) * xp.log(1 - p))
    return record_op("binary_cross_entropy", xp.asarray(loss, dtype=probs.dtype), (probs,),
                     targets=targets, eps=eps)
    ### END SOLUTION


def binary_cross_entropy_with_logits(logits: Tensor, targets: Any) -> Tensor:
    """Mean of max(x, 0) - x·t + log(1 + e^-|x|): BCE of sigmoid(x), stable for any x.

    logits: a floating-point Tensor of any shape; targets: the same shape, values in
    [0, 1]. Returns a 0-d Tensor in the logits' dtype (float32 inside module 17's
    autocast); no overflow for any finite logit.
    Raises (given code) ValueError for a shape mismatch.
    Records op "bce_with_logits" with inputs (logits,) and saves `targets` (float array,
    logits' dtype).
    """
    logits = autocast_float32(as_tensor(logits))  # given: float32 under module 17's autocast, else logits itself
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
def test_unit_binary_cross_entropy():
    p, t = Tensor([0.9, 0.2, 0.5]), [1.0, 0.0, 1.0]
    expected = -(np.log(0.9) + np.log(0.8) + np.log(0.5)) / 3
    got = BinaryCrossEntropyLoss()(p, t).item()
    assert abs(got - expected) < 1e-6, (f"BCE of p = [0.9, 0.2, 0.5], t = [1, 0, 1]: -mean(t·log p + (1-t)·log(1-p)) "
                                        f"= {expected:.6f}, got {got:.6f}")
    edge = binary_cross_entropy(Tensor([0.0, 1.0]), [1.0, 0.0]).item()
    assert np.isfinite(edge), f"BCE at p = 0 and p = 1 must be finite (clip p to [eps, 1 - eps]), got {edge}"
    half = binary_cross_entropy(Tensor(np.array([1.0, 0.0], dtype=np.float16)), [0.0, 1.0])
    assert half.dtype == np.float16 and np.isfinite(float(half.item())), (
        f"float16 BCE at p = 1 and 0 must be finite float16, got {float(half.item())} ({half.dtype}): in float16 "
        "1 - 1e-7 rounds to 1, so clip in float32")
    x = np.array([-3.0, 0.0, 2.0])
    expected = -np.mean(t * np.log(1 / (1 + np.exp(-x))) + (1 - np.array(t)) * np.log(1 - 1 / (1 + np.exp(-x))))
    got = BCEWithLogitsLoss()(Tensor(x), t).item()
    assert abs(got - expected) < 1e-12, (f"BCE with logits [-3, 0, 2]: expected {expected:.10f}, got {got:.10f}: the "
                                         "mean of max(z, 0) - z·t + log(1 + e^-|z|), the stable form of softplus(z) - t·z")
    far = binary_cross_entropy_with_logits(Tensor([1000.0, -1000.0]), [0.0, 1.0]).item()
    assert abs(far - 1000.0) < 1e-3, (f"logits ±1000 against the wrong targets: the loss is 1000, got {far}: use "
                                      "softplus(z) - t·z, which never overflows")
    node = binary_cross_entropy_with_logits(Tensor(x, requires_grad=True), t)._node
    assert node is not None and node.op == "bce_with_logits" and np.array_equal(node.saved.get("targets"), t), \
        f"BCE with logits must record op 'bce_with_logits' and save targets, got {node and (node.op, sorted(node.saved))}"
    node = binary_cross_entropy(Tensor([0.5], requires_grad=True), [1.0])._node
    assert node is not None and node.op == "binary_cross_entropy" and node.saved.get("eps") == 1e-7, \
        f"BCE must record op 'binary_cross_entropy' and save eps = 1e-7, got {node and (node.op, node.saved.get('eps'))}"
    print("✓ BinaryCrossEntropyLoss and BCEWithLogitsLoss")


test_unit_binary_cross_entropy()

# %% [markdown]
# As with softmax, prefer the logits version: the clipped one is wrong for confident
# mistakes. **Predict, then run.** For a logit of 40 and target 0, the true loss is
# about 40. What does BCE on the (float32) sigmoid give?

# %%
from tinytorch.core.activations import sigmoid

for x in (-5.0, 20.0, 40.0, 100.0):
    logit = Tensor(np.array([x], dtype=np.float32))
    p = sigmoid(logit)
    print(f"logit {x:6.1f}, target 0: BCE on sigmoid (clipped) = {binary_cross_entropy(p, [0.0]).item():8.4f}"
          f"   BCE with logits = {binary_cross_entropy_with_logits(logit, [0.0]).item():8.4f}")

# %% [markdown]
# The clipped loss stops near 15.94 (in float32 `1 - 1e-7` is `1 - 1.19e-7`), and past
# the clip it has no gradient at all: a model that is confidently wrong gets no signal.
#
# ## 6. What cross-entropy costs
#
# Cross-entropy over a vocabulary is one of the largest computations in a language
# model: the logits have `batch × sequence × vocabulary` entries, and the forward saves
# `probs`, an array as big as the logits, for backward.
#
# **Predict, then run.** For logits of shape `(256, 10000)` in float32, how many MB does
# your `cross_entropy` keep in `node.saved`? And how does its time compare with your
# `softmax` from module 02 on the same logits?

# %%
import time

vocab_logits = Tensor(np.random.default_rng(0).standard_normal((256, 10_000)).astype(np.float32),
                      requires_grad=True)
vocab_targets = np.random.default_rng(1).integers(0, 10_000, 256)


def best_seconds(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):  # the best of a few runs: the least disturbed by other programs
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


saved = cross_entropy(vocab_logits, vocab_targets)._node.saved
saved_mb = sum(v.nbytes for v in saved.values() if hasattr(v, "nbytes")) / 2**20
t_ce = best_seconds(lambda: cross_entropy(vocab_logits, vocab_targets))
t_softmax = best_seconds(lambda: softmax(vocab_logits))
print(f"logits {vocab_logits.data.nbytes / 2**20:.1f} MB; cross_entropy saves {saved_mb:.1f} MB for backward")
print(f"cross_entropy {t_ce * 1e3:.1f} ms, softmax {t_softmax * 1e3:.1f} ms: ratio {t_ce / t_softmax:.2f}")

# %% [markdown]
# ## Summary
#
# * MSE `mean((ŷ - y)²)` for numbers; built from Tensor ops.
# * Cross-entropy `LSE(z) - z_y` on **logits** with integer targets, classes last,
#   mean over non-ignored positions (all ignored: 0). Never `-log(softmax(z))`: in
#   float32 it is `inf` once a wrong logit leads by about 104.
# * Its gradient `softmax(z) - onehot(y)` pushes at full strength when the model is
#   confidently wrong, where MSE on probabilities barely moves.
# * Binary cross-entropy: on logits as `max(x,0) - x·t + log1p(e^-|x|)`; on
#   probabilities only with clipping, in at least float32.
# * Sums of many terms (a vocabulary, a batch) overflow float16: compute in float32, return
#   the input's dtype.
# * Ops recorded for module 05: `cross_entropy` (probs, targets, valid, count),
#   `binary_cross_entropy` (targets, eps), `bce_with_logits` (targets).
#
# ## Exercises
#
# Answer each by running your own functions (add cells below).
#
# 1. **The starting loss.** Compute your `cross_entropy` of all-zero logits for
#    `C = 2, 10, 65, 50257` classes (65 is the character vocabulary of module 13's
#    Shakespeare model). Which formula gives all four?
# 2. **The breaking point.** Find (to 0.5) the gap `d` at which `-log(softmax([0, d])[0])`
#    becomes `inf` in float32. What does your `cross_entropy` give there?
# 3. **Padding.** Build logits `(2, 5, 7)` and targets `(2, 5)` where the last two positions
#    of the first sequence are padding (`-100`). Check that
#    `cross_entropy(z, t, ignore_index=-100)` equals the cross-entropy of only the eight
#    real positions (select them with a boolean mask). What would a mean over all ten
#    positions have been?
# 4. **float16 batches.** Make float16 logits `[[0, 10]]` repeated 10,000 times with target
#    0. Compute the true loss by hand, then with your `cross_entropy`. What would a float16
#    sum of the 10,000 per-position losses have been?
# 5. **Soft labels.** Compute `binary_cross_entropy_with_logits(x, t)` for `t = 0.3` and `x`
#    from -5 to 5. At which `x` is it smallest, and what is `σ(x)` there?
# 6. **Clipping.** What is the largest value your `binary_cross_entropy` can return in
#    float32 and in float64? Explain the difference.
#
# ## Questions
#
# 1. Why does the mean over positions divide by the number of *valid* positions instead
#    of the number of positions? Run exercise 3 with sequences padded to 10 and to 100:
#    which average stays the same?
# 2. Section 4 measured MSE's slope at `p = 0.001`. Compute, with your code, how many
#    plain gradient steps of size 1 each loss needs to move `z` from `ln(0.001/0.999)` to 0.
# 3. `cross_entropy` saves `probs` rather than the log-probabilities. Using the gradient
#    formula `(probs - onehot) / count`, explain why, and measure what it costs in memory
#    for logits `(64 · 256, 65)` in float32.
# 4. Why does `CrossEntropyLoss` with every position ignored return 0 rather than `nan`?
#    Which is more useful in a training loop that skips empty batches, and why might
#    PyTorch choose `nan`?
