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
# # Module 07: Training
#
# > The loop that turns the pieces into a model that learns, and the tools that keep it stable.
#
# **When you finish this module you will be able to**
#
# * write the training loop in the right order (zero the gradients, forward, loss,
#   backward, clip, step, schedule) and say what goes wrong when a line is missing or moved;
# * clip gradients by their **global** norm exactly as `torch.nn.utils.clip_grad_norm_`
#   does, and show with a measurement how one bad batch wrecks an unclipped run;
# * write learning-rate schedules, step decay and **cosine decay with a linear warm-up**,
#   as plain functions of the step number, and check them against PyTorch's;
# * evaluate a model correctly: in `eval()` mode, under `no_grad()`, averaged over
#   *examples* rather than batches;
# * save a checkpoint that resumes training **bit for bit** (weights, optimizer moments
#   and step counts, parameter groups, schedule, counters, random generators), and load it
#   so that a file that does not fit changes nothing and says why.
#
# **Time:** about 3 hours: 30 minutes for clipping, 40 for the schedules, 50 for the
# `Trainer`, 40 for checkpoints, the rest for the measurements and the exercises.
#
# You now have tensors, layers, losses, gradients and optimizers. Training is the loop
#
# ```
# for each epoch:
#     for each batch (x, y):
#         optimizer.zero_grad()          # forget the last batch's gradients
#         loss = loss_fn(model(x), y)    # forward
#         loss.backward()                # gradients into every parameter's .grad
#         clip_grad_norm(params, c)      # (optional) cap the gradient's size
#         optimizer.step()               # update the weights
#         scheduler.step()               # (optional) the next step's learning rate
#     evaluate on held-out data, without building a graph
# ```
#
# Each line is one call, but each has a way to be subtly wrong: gradients that
# accumulate because `zero_grad` was forgotten, a validation loss measured with dropout
# still on, a loss averaged over batches of different sizes, a clip applied after the
# step it should have limited, a resumed run whose Adam forgot its moments. This module
# builds the loop with each of those details right:
#
# 1. `clip_grad_norm`: gradient clipping by the global norm;
# 2. learning-rate **schedules**: step decay, and cosine decay with a linear warm-up;
# 3. `accuracy`, the metric of a classifier;
# 4. a `Trainer` with `train_step`, `train_epoch`, `evaluate` and `fit`, keeping a `history`;
# 5. **checkpoints**: everything needed to resume training, in one `.npz` file.
#
# The `Trainer` accepts *any* iterable of `(x, y)` batches: a list of tuples is enough.
# Module 08's `DataLoader` is one such iterable.

# %%
#| default_exp core.training

# %%
#| export
from __future__ import annotations

import json
import math
import os
import struct
import time
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from tinytorch.core.autograd import no_grad
from tinytorch.core.optimizers import Optimizer
from tinytorch.core.tensor import Tensor, array_module, as_int, as_tensor, to_host
from tinytorch.files import atomic_write

# %% [markdown]
# ## 1. Gradient clipping
#
# Sometimes one batch produces a huge gradient: a mislabelled or extreme example, a sharp
# cliff in the loss surface, a deep network multiplying many factors. One step with it
# can throw the weights far away and undo hours of training. **Clipping by the global
# norm** caps the length of the whole gradient while keeping its direction:
#
# ```
# total = sqrt(Σ over all parameters of Σ g²)     the norm of all gradients as ONE vector
# coef  = max_norm / (total + 1e-6)
# if coef < 1:   g ← g · coef                     for every parameter, the same coef
# ```
#
# Three details matter, and each is a classic mistake:
#
# * **global, not per parameter.** The norm is taken over *all* gradients together and
#   every gradient is scaled by the *same* factor, so the update keeps its direction.
#   Clipping each parameter to `max_norm` on its own changes the direction (a small
#   gradient keeps its size while a large one shrinks) and lets the total grow with the
#   number of parameters.
# * **only shrink.** When the norm is already below the cap (`coef ≥ 1`) nothing changes;
#   clipping never scales a gradient *up*.
# * **return the norm before clipping.** After clipping, the norm is `max_norm` (or less)
#   and tells you nothing; the norm *before* is the number worth logging, since a jump in it
#   is the first sign of an instability. PyTorch's `clip_grad_norm_` returns the same.
#
# The `1e-6` keeps the division safe when every gradient is zero (PyTorch uses the same).
# `norm_type=float("inf")` takes the largest `|g|` over all entries instead of the 2-norm.
# A float16 gradient's squares overflow above `√65504 ≈ 256`, so sum the squares in at
# least float32 (`xp.promote_types(g.dtype, xp.float32)`), while the scaled gradient
# keeps its own dtype.
#
# On a GPU every `float(...)` of a device array waits for the GPU and copies the number
# back: add the per-parameter sums up as arrays and call `float` once, not once per parameter.
#
# By hand: gradients `[3, 4]` and `[12]` have the total norm `sqrt(9 + 16 + 144) = 13`.
# With `max_norm = 6.5`, `coef = 6.5 / 13.000001 ≈ 0.5`, and the gradients become
# `[1.5, 2]` and `[6]` (up to the 1e-6). Per-parameter clipping would leave `[3, 4]`
# (its norm 5 is under 6.5) and turn `[12]` into `[6.5]`: a different direction.

# %%
#| export
def clip_grad_norm(params: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0) -> float:
    """Scale all gradients by one common factor so that their global norm is at most `max_norm`.

    params    -- Tensors (e.g. `model.parameters()`, or one Tensor); a parameter whose
                 `.grad` is None took no part and is skipped
    max_norm  -- the cap
    norm_type -- 2.0: the square root of the sum of the squares of every gradient entry
                 of every parameter, all together; float("inf"): the largest |entry|

    Returns the total norm *before* clipping, as a Python float (0.0 when no parameter
    has a gradient). Changes: with `coef = max_norm / (total + 1e-6)`, when `coef < 1`
    every `p.grad.data` is replaced by `p.grad.data * coef` (same dtype, same device);
    when `coef >= 1` nothing changes. Sum squares in at least float32.
    Raises ValueError for any other norm_type (the check is given).
    """
    if norm_type not in (2.0, math.inf):
        raise ValueError(f"clip_grad_norm: norm_type must be 2.0 or float('inf'), got {norm_type!r}.")
    if isinstance(max_norm, (bool, np.bool_)) or not isinstance(max_norm, (int, float, np.integer, np.floating)) \
            or not max_norm >= 0:  # nan or -1 zeroed every gradient in silence; inf (only measure the norm) is fine
        raise ValueError(f"clip_grad_norm: max_norm must be a number >= 0 (inf: no clipping), got {max_norm!r}.")
    params = [params] if isinstance(params, Tensor) else list(params)
    ### BEGIN SOLUTION
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if norm_type == math.inf:
        total = max(float(array_module(g.data).abs(g.data).max()) if g.size else 0.0 for g in grads)
    else:
        squares = 0.0  # stays an array on the gradients' device until the one float() below
        for g in grads:
            xp = array_module(g.data)
            wide = g.data.astype(xp.promote_types(g.dtype, xp.float32), copy=False)
            squares = squares + xp.sum(wide * wide).astype(xp.float64)
        total = math.sqrt(float(squares))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.data = g.data * coef  # a Python float keeps the gradient's dtype
    return total
    ### END SOLUTION


# %%
def test_unit_clip_grad_norm():
    a = Tensor(np.zeros(2), requires_grad=True)
    b = Tensor(np.zeros(1), requires_grad=True)
    c = Tensor(np.zeros(1), requires_grad=True)  # no gradient: skipped
    a.grad, b.grad = Tensor(np.array([3.0, 4.0])), Tensor(np.array([12.0]))
    total = clip_grad_norm([a, b, c], max_norm=6.5)
    assert total == 13.0, f"returned {total}: return the global norm before clipping (13)"
    assert np.allclose(a.grad.numpy(), [1.5, 2.0]) and np.allclose(b.grad.numpy(), [6.0]), (
        f"the global norm of [3, 4] and [12] is 13, so every gradient is scaled by one common factor 6.5 / 13 = 0.5: "
        f"expected [1.5, 2] and [6], got {a.grad.numpy().tolist()} and {b.grad.numpy().tolist()}")
    assert c.grad is None, "a parameter without a gradient is skipped: its .grad stays None"
    total = clip_grad_norm([a, b], max_norm=100.0)  # below the cap: untouched
    assert np.isclose(total, 6.5) and np.allclose(b.grad.numpy(), [6.0]), "below the cap nothing changes"
    print("✓ clip_grad_norm: global norm, common scale, returns the norm before clipping")


test_unit_clip_grad_norm()

# %% [markdown]
# ### Predict, then run: one bad batch
#
# A small regression model (8 → 16 → 1, tanh) learns `y = x·w` with SGD (`lr = 0.05`),
# batches of 32. At step 100 one batch arrives whose targets are 100 times too large (a
# unit error in the data pipeline). We train twice, once without clipping and once with
# `clip_grad_norm(params, 5.0)`, and print the loss on the whole clean data set.
#
# **Predict**, before running: (1) roughly how large is the gradient norm of the bad
# batch compared with a normal one (2×? 10×? 1000×?); (2) how high does the unclipped
# loss jump at step 100, and has it recovered 100 steps later; (3) does the clipped run
# notice the bad batch at all? Write your three answers down, then run (about a second).

# %%
from tinytorch.core.activations import ReLU, Tanh
from tinytorch.core.layers import Dropout, Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss, MSELoss
from tinytorch.core.optimizers import SGD, Adam, AdamW

_rng = np.random.default_rng(0)
_x_reg = _rng.standard_normal((512, 8))
_y_reg = _x_reg @ _rng.standard_normal((8, 1)) + 0.1 * _rng.standard_normal((512, 1))


def bad_batch_run(clip, steps=200, bad_step=100):
    """Losses on the clean data at a few steps, and the gradient norm at every step."""
    model = Sequential(Linear(8, 16, seed=0, dtype=np.float64), Tanh(), Linear(16, 1, seed=1, dtype=np.float64))
    opt = SGD(model.parameters(), lr=0.05)
    losses, norms = {}, []
    for step in range(steps):
        rows = np.arange(step * 32, step * 32 + 32) % 512
        targets = _y_reg[rows] * (100.0 if step == bad_step else 1.0)
        opt.zero_grad()
        diff = model(Tensor(_x_reg[rows])) - Tensor(targets)
        (diff * diff).mean().backward()
        norms.append(clip_grad_norm(model.parameters(), 5.0 if clip else math.inf))
        opt.step()
        if step in (99, 100, 101, 120, 199):
            full = model(Tensor(_x_reg)).numpy() - _y_reg
            losses[step] = float((full * full).mean())
    return losses, norms


for _clip in (False, True):
    _losses, _norms = bad_batch_run(_clip)
    print(f"clip={'5.0 ' if _clip else 'none'}: gradient norm median {np.median(_norms[:100]):.2f}, "
          f"bad batch {_norms[100]:.0f};  clean loss " + "  ".join(f"step {s}: {v:.3g}" for s, v in _losses.items()))

# %% [markdown]
# The bad batch's gradient is about a thousand times the usual one. Unclipped, a single
# step multiplies the loss by more than ten thousand, and a hundred steps later the run
# has still not recovered. Clipped, that step is an ordinary step of length 5 in a
# slightly wrong direction: the loss barely moves. (Clipping with `max_norm = inf`, as
# the unclipped run does, measures the norm and changes nothing: a cheap way to log it.)
#
# ## 2. Learning-rate schedules
#
# One learning rate for the whole run is rarely best. Early on, large steps make fast
# progress; late in training, small steps settle into a minimum instead of bouncing
# around it. A **schedule** is a function `lr_at(step)` of the number of optimizer steps
# taken so far (0 for the first step). It is attached to an optimizer:
#
# * creating the scheduler sets `optimizer.lr = lr_at(0)` (given, in `__init__`), so the
#   first step already uses the schedule;
# * `scheduler.step()`, called **after** `optimizer.step()`, moves to the next step:
#   `last_step` goes up by one and `optimizer.lr` becomes `lr_at(last_step)`.
#   (`optimizer.lr = x` sets every parameter group's rate, module 06.)
#
# So during optimizer step `t` (counting from 0) the learning rate is `lr_at(t)`. Calling
# `scheduler.step()` *before* `optimizer.step()` shifts the whole schedule by one: the
# first step never uses `lr_at(0)`.
#
# * **Step decay** (`StepLR`): multiply by `gamma` every `step_size` steps:
#   `lr_at(t) = base_lr · gamma^⌊t / step_size⌋` (an integer division: `t // step_size`).
# * **Cosine with linear warm-up** (`CosineWarmupLR`), the schedule most transformers use.
#   With `W = warmup_steps`, `T = total_steps`:
#   * warm-up, `t < W`: `lr_at(t) = base_lr · (t + 1) / W`. It starts *near 0*
#     (`base_lr / W`), not at `base_lr` and not at exactly 0 (a step with lr 0 is a
#     wasted step), and reaches `base_lr` at `t = W − 1`;
#   * decay, `W ≤ t ≤ T`: with `progress = (t − W) / (T − W)`, from 0 to 1,
#     `lr_at(t) = min_lr + (base_lr − min_lr) · ½ (1 + cos(π · progress))`:
#     exactly `base_lr` at `t = W` and exactly the floor `min_lr` at `t = T`;
#   * after the run, `t > T`: `min_lr` (the cosine must not climb back up).
#
# **Why warm up?** At the start the weights are random and Adam's second-moment estimate
# `v` is built from a handful of gradients; full-size steps then are large and badly
# aimed and can push the model into a region it never recovers from. Ramping the rate
# over the first steps avoids that. **Why cosine?** It decays slowly at first, fast in
# the middle and gently at the end, with no setting beyond the length of the run.
#
# By hand, `base_lr = 1`, `W = 4`, `T = 14`, `min_lr = 0.1`: warm-up `0.25, 0.5, 0.75, 1.0`
# (steps 0 to 3); step 4: `1.0`; step 9 (half-way, `cos(π/2) = 0`): `0.1 + 0.9 · ½ = 0.55`;
# step 14: `0.1`; step 15 and later: `0.1`.

# %%
#| export
def _rate(value: Any, name: str) -> float:
    """`value` as a float when it is a finite number >= 0 (a rate or a factor); ValueError naming it otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
    return float(value)


class LRScheduler:
    """A learning-rate schedule attached to an optimizer.

    `lr_at(step)` is the rate for optimizer step number `step` (0-based). Creating the
    scheduler sets `optimizer.lr = lr_at(0)` (given); `step()` is called after each
    `optimizer.step()`. `base_lr` defaults to the optimizer's lr at creation.
    """

    def __init__(self, optimizer: Optimizer, base_lr: float | None = None):
        self.optimizer = optimizer
        self.base_lr = _rate(optimizer.lr if base_lr is None else base_lr, f"{type(self).__name__}: base_lr")
        self.last_step = 0
        self.optimizer.lr = self.lr_at(0)

    def lr_at(self, step: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement lr_at(step).")

    def step(self) -> float:
        """Advance to the next optimizer step: `last_step` goes up by 1, then
        `optimizer.lr = lr_at(last_step)`. Returns the new learning rate (a float)."""
        ### BEGIN SOLUTION
        self.last_step += 1
        self.optimizer.lr = self.lr_at(self.last_step)
        return self.optimizer.lr
        ### END SOLUTION

    @property
    def lr(self) -> float:
        return self.optimizer.lr

    def state_dict(self) -> dict:
        return {"type": type(self).__name__, "base_lr": self.base_lr, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        if state.get("type", type(self).__name__) != type(self).__name__:
            raise ValueError(f"load_state_dict: this is a {type(self).__name__}, the state is a {state['type']}'s.")
        self.base_lr = float(state["base_lr"])
        self.last_step = int(state["last_step"])
        self.optimizer.lr = self.lr_at(self.last_step)


class StepLR(LRScheduler):
    """Step decay: the rate is multiplied by `gamma` every `step_size` steps."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        self.step_size = as_int(step_size, "StepLR: step_size", minimum=1)  # 2.5 was taken as 2
        self.gamma = _rate(gamma, "StepLR: gamma")  # nan made every rate nan
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        """base_lr * gamma ** (step // step_size), a float."""
        ### BEGIN SOLUTION
        return self.base_lr * self.gamma ** (step // self.step_size)
        ### END SOLUTION


class CosineWarmupLR(LRScheduler):
    """Linear warm-up over `warmup_steps`, then cosine decay to `min_lr` at `total_steps`."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0):
        warmup_steps = as_int(warmup_steps, "CosineWarmupLR: warmup_steps", minimum=0)
        total_steps = as_int(total_steps, "CosineWarmupLR: total_steps", minimum=1)
        min_lr = _rate(min_lr, "CosineWarmupLR: min_lr")
        if warmup_steps < 0 or total_steps <= warmup_steps:
            raise ValueError(
                f"CosineWarmupLR: need 0 <= warmup_steps < total_steps, got warmup_steps={warmup_steps}, "
                f"total_steps={total_steps}."
            )
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_lr = float(min_lr)
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        """With W = warmup_steps, T = total_steps (a float in each case):
        step < W: base_lr * (step + 1) / W;   step > T: min_lr;
        otherwise, with progress = (step - W) / (T - W):
        min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(pi * progress))."""
        ### BEGIN SOLUTION
        if step < self.warmup_steps:
            return self.base_lr * (step + 1) / self.warmup_steps
        if step >= self.total_steps:
            return self.min_lr
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.min_lr + (self.base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
        ### END SOLUTION


# %%
def test_unit_schedules():
    opt = SGD([Tensor(np.zeros(1), requires_grad=True)], lr=1.0)
    sched = StepLR(opt, step_size=3, gamma=0.5)
    seen = [opt.lr] + [sched.step() for _ in range(7)]
    assert seen == [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25], (
        f"StepLR(step_size=3, gamma=0.5) from lr 1, steps 0 ... 7: expected [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25], got "
        f"{[round(v, 4) for v in seen]}: lr_at(t) = base·gamma^(t // step_size), an integer division; step() advances "
        "last_step, then sets lr_at(last_step)")

    opt = SGD([Tensor(np.zeros(1), requires_grad=True)], lr=1.0)
    cos = CosineWarmupLR(opt, warmup_steps=4, total_steps=14, min_lr=0.1)
    assert opt.lr == 0.25, "creating the scheduler sets lr_at(0): warm-up starts near 0"
    warmup = [cos.lr_at(t) for t in (0, 1, 2, 3, 4)]
    assert np.allclose(warmup, [0.25, 0.5, 0.75, 1.0, 1.0]), (
        f"warm-up over 4 steps is base·(t+1)/4, then the decay starts at base_lr at step warmup_steps: expected "
        f"[0.25, 0.5, 0.75, 1, 1], got {warmup}")
    half_way = cos.lr_at(9)
    assert np.isclose(half_way, 0.55), (f"half-way through the decay (step 9 of 4..14) the cosine gives "
                                        f"min + (base - min)/2 = 0.55, got {half_way}: lr = min_lr + (base_lr - min_lr)·"
                                        "(1 + cos(π·progress))/2 with progress = (t - W) / (T - W)")
    after = [cos.lr_at(t) for t in (14, 15, 100)]
    assert np.allclose(after, 0.1) and after[1:] == [0.1, 0.1], f"from total_steps on the rate stays at min_lr 0.1, got {after}"
    stepped = cos.step()
    assert stepped == 0.5 and cos.last_step == 1, \
        f"step() moves to step 1 and returns its rate, 0.5; got {stepped} at last_step {cos.last_step}"
    print("✓ schedules: step decay, cosine with warm-up")


test_unit_schedules()

# %% [markdown]
# ### Predict, then run: a 100-step schedule
#
# `lr_at` is a plain function of the step, so a schedule can be printed (or plotted)
# before any training happens. For `base_lr = 0.1`: `StepLR(step_size=30, gamma=0.3)`
# and `CosineWarmupLR(warmup_steps=10, total_steps=100)`.
#
# **Predict** both rates at steps 0, 9, 10, 30, 55, 99 and 100 (the cosine at step 55 is
# half-way through its decay), then run.

# %%
_step = StepLR(SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1), step_size=30, gamma=0.3)
_cos = CosineWarmupLR(SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1), warmup_steps=10, total_steps=100)
for t in (0, 5, 9, 10, 30, 55, 80, 99, 100):
    print(f"step {t:3d}: StepLR {_step.lr_at(t):.4f}   CosineWarmupLR {_cos.lr_at(t):.4f}")

# %% [markdown]
# ## 3. Measuring a model: accuracy
#
# The loss is what the optimizer minimises; people care about a **metric**. For
# classification it is the fraction of examples whose predicted class is right:
#
# * logits `(N, C)` with `C ≥ 2` classes: the prediction is the arg-max over the **last**
#   axis (the classes), one per example; the arg-max over axis 0 would pick an example
#   per class instead;
# * one score per example, `(N,)` or `(N, 1)` (binary classification with
#   `BinaryCrossEntropyLoss` on logits): the prediction is `1` where the score is `> 0`
#   (a logit of 0 is a probability of ½; the threshold is 0, not 0.5).
#
# By hand: logits `[[2, 1, 0], [0, 3, 1], [1, 0, 5], [9, 0, 0]]` predict classes
# `0, 1, 2, 0`; against targets `0, 1, 1, 2` two of four are right: 0.5.
#
# A metric here is any function `metric(outputs, targets) -> float` over one batch; the
# Trainer weights each batch by its number of examples. `to_host` (module 01) turns a
# Tensor or an array (on either device) into a NumPy array.

# %%
#| export
def accuracy(outputs: Any, targets: Any) -> float:
    """Fraction of examples whose prediction equals the target, as a Python float.

    outputs -- logits (N, C) with C >= 2: prediction = arg-max over the last axis;
               or one score per example, (N,) or (N, 1): prediction = 1 where the score > 0
    targets -- (N,) integer class labels (Tensor, array or list)
    NaN outputs (a diverged model) raise ValueError (given): NaN has no arg-max and is not > 0.
    """
    if np.isnan(to_host(outputs)).any():  # given
        raise ValueError("accuracy: the outputs hold NaN (a diverged model?): there is no prediction to count; "
                         "check the model's weights and inputs for NaN.")
    ### BEGIN SOLUTION
    out, tgt = to_host(outputs), np.asarray(to_host(targets))
    if out.ndim == 1 or out.shape[-1] == 1:
        predicted = (out.reshape(tgt.shape) > 0).astype(tgt.dtype)
    else:
        predicted = out.argmax(axis=-1)
    return float(np.mean(predicted == tgt))
    ### END SOLUTION


# %%
def test_unit_accuracy():
    logits = Tensor(np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [9.0, 0.0, 0.0]]))
    try:
        half = accuracy(logits, Tensor(np.array([0, 1, 1, 2])))
    except ValueError as err:
        raise AssertionError(f"accuracy of (4, 3) logits raised ValueError ({err}): take the arg-max over the last axis "
                             "(the classes), one prediction per example") from None
    assert half == 0.5, f"arg-maxes [0, 1, 2, 0] against targets [0, 1, 1, 2]: 2 of 4 right, 0.5; got {half}"
    every = accuracy(logits, np.array([0, 1, 2, 0]))
    assert every == 1.0, f"every arg-max matches its target: 1.0, got {every}"
    one_score = accuracy(Tensor(np.array([[0.3], [-2.0], [1.0]])), [1, 0, 0])
    assert one_score == 2 / 3, f"one score per example predicts class 1 when the logit > 0: 2 of 3 right, got {one_score}"
    print("✓ accuracy: arg-max over the classes, logit > 0 for one score")


test_unit_accuracy()

# %% [markdown]
# ## 4. The Trainer
#
# `Trainer(model, optimizer, loss_fn, scheduler=None, clip=None, metric=None)` runs the
# loop. The constructor, the mode switch `_set_mode(training)` (calls `model.train()` or
# `model.eval()` when the model has them), the progress bar `_progress(loader, label)`
# (the same batches, with a bar on a terminal), the printing `_log(record, seconds)` and
# `_batch_size(y)` (the number of examples in a batch: `y.shape[0]`, 1 for a scalar) are
# given. You write four methods.
#
# **`train_step(x, y)`**, one optimisation step, in this order:
# `x, y = as_tensor(x), as_tensor(y)` (batches may be plain arrays); `zero_grad()` on
# the optimizer; forward and loss; `backward()`; with `self.clip` set, `self.last_grad_norm
# = clip_grad_norm(self.optimizer.params, self.clip)`; `self.optimizer.step()`; the
# scheduler's `step()` when there is one; `self.step += 1`. Returns the loss as a float.
#
# * Without `zero_grad`, `.grad` *accumulates* (module 05): the second step moves by the
#   sum of two batches' gradients, the hundredth by a hundred.
# * Clipping belongs between `backward()` and `step()`: after the step, the weights
#   have already moved by the unclipped gradient.
#
# **`train_epoch(loader)`**: training mode, one `train_step` per batch, and the mean loss
# per **example**: `Σ loss_b · n_b / Σ n_b`, with `n_b = _batch_size(y)`. Averaging the
# batch losses instead (`Σ loss_b / number of batches`) over-weights a short last batch:
# with batches of 3 and 1 examples, the lone example counts as much as the other three.
# A loader that yields no batch is an error (`ValueError`).
#
# **`evaluate(loader, metric=None)`**: the loss (and the metric, default `self.metric`)
# averaged over examples the same way, with the model in **eval mode** (`_set_mode(False)`:
# dropout off) and under **`no_grad()`** (no graph: less memory, less time). Returns
# `{"loss": ..., name: ...}` where `name` is the metric function's `__name__` (for
# `accuracy`, `"accuracy"`). Afterwards the model is back in training mode, even when an
# error interrupts (a `try/finally`). No batch: `ValueError`.
#
# **`fit(train, val=None, epochs=1, log_every=1)`**: `epochs` more epochs. Each:
# `train_epoch(train)`; `self.epoch += 1`; a `record` `{"epoch": self.epoch,
# "train_loss": ..., "lr": self.optimizer.lr}` plus, with validation data, `"val_<key>"`
# for every key of `evaluate(val)`; append each value to `self.history[key]` (a key seen
# for the first time gets a new list); when `verbose`, print with `self._log(record,
# seconds)` if `self.epoch % log_every == 0` or it is this call's last epoch. Returns
# `self.history`.
#
# `trainer.step` counts optimizer steps and `trainer.epoch` epochs over the trainer's whole
# life, so calling `fit` twice continues where the first call stopped.

# %%
#| export
def _batch_size(y: Any) -> int:
    """The number of examples in a batch: the first dimension of the targets (1 for a scalar)."""
    shape = getattr(y, "shape", None)
    if shape is None and isinstance(y, (list, tuple)):
        return len(y)
    return int(shape[0]) if shape else 1


class Trainer:
    """Training and evaluation loops with optional clipping, schedule, metric and history.

    model     -- callable on a batch of inputs (a Module: train()/eval() are used if present)
    optimizer -- an Optimizer over the model's parameters
    loss_fn   -- loss_fn(outputs, targets) -> scalar Tensor
    scheduler -- an LRScheduler, stepped after every optimizer step
    clip      -- max global gradient norm (None: no clipping)
    metric    -- metric(outputs, targets) -> float, reported by evaluate (e.g. accuracy)
    verbose   -- print one line per epoch (rich) and show a progress bar on a terminal

    Counters: `step` (optimizer steps), `epoch` (epochs), `last_grad_norm` (the norm before
    the last clip, None without clipping), `history` (lists by key, one entry per epoch).
    """

    def __init__(self, model: Any, optimizer: Optimizer, loss_fn: Callable, scheduler: LRScheduler | None = None,
                 clip: float | None = None, metric: Callable | None = None, verbose: bool = True):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.scheduler = scheduler
        self.clip = clip
        self.metric = metric
        self.verbose = verbose
        self.step = 0
        self.epoch = 0
        self.last_grad_norm: float | None = None
        self.history: dict[str, list] = {"epoch": [], "train_loss": [], "lr": []}

    def _set_mode(self, training: bool) -> None:
        """model.train() (training=True) or model.eval(), when the model has them."""
        method = getattr(self.model, "train" if training else "eval", None)
        if callable(method):
            method()

    def train_step(self, x: Any, y: Any) -> float:
        """One optimisation step on the batch (x, y); returns its loss as a Python float.

        Order: as_tensor both; optimizer.zero_grad(); loss = loss_fn(model(x), y);
        loss.backward(); with self.clip set, self.last_grad_norm = clip_grad_norm(
        self.optimizer.params, self.clip); optimizer.step(); scheduler.step() if any.
        Changes: the parameters, their .grad, self.step (+1), the learning rate (scheduler).
        """
        ### BEGIN SOLUTION
        x, y = as_tensor(x), as_tensor(y)
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        if self.clip is not None:
            self.last_grad_norm = clip_grad_norm(self.optimizer.params, self.clip)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.step += 1
        return float(loss.item())
        ### END SOLUTION

    def train_epoch(self, loader: Iterable) -> float:
        """One pass over `loader` (batches (x, y)) in training mode, one train_step per batch.

        Returns the mean loss per example: sum(loss_b * n_b) / sum(n_b), n_b = _batch_size(y).
        Iterate over `self._progress(loader, "train")`. Raises ValueError when there is no batch.
        """
        ### BEGIN SOLUTION
        self._set_mode(True)
        total, count = 0.0, 0
        for x, y in self._progress(loader, "train"):
            n = _batch_size(y)
            total += self.train_step(x, y) * n
            count += n
        if count == 0:
            raise ValueError("train_epoch: the loader produced no batches.")
        return total / count
        ### END SOLUTION

    def evaluate(self, loader: Iterable, metric: Callable | None = None) -> dict:
        """Loss (and metric) averaged over examples, in eval mode and under no_grad().

        Returns {"loss": float} plus {metric.__name__: float} when there is a metric
        (`metric`, else self.metric). The model is in training mode again afterwards, even
        after an error. Raises ValueError when there is no batch. Changes no parameter.
        """
        metric = metric if metric is not None else self.metric
        ### BEGIN SOLUTION
        self._set_mode(False)
        totals = {"loss": 0.0}
        name = getattr(metric, "__name__", "metric") if metric is not None else None
        if name is not None:
            totals[name] = 0.0
        count = 0
        try:
            with no_grad():
                for x, y in loader:
                    x, y = as_tensor(x), as_tensor(y)
                    n = _batch_size(y)
                    outputs = self.model(x)
                    totals["loss"] += float(self.loss_fn(outputs, y).item()) * n
                    if name is not None:
                        totals[name] += float(metric(outputs, y)) * n
                    count += n
        finally:
            self._set_mode(True)
        if count == 0:
            raise ValueError("evaluate: the loader produced no batches.")
        return {key: value / count for key, value in totals.items()}
        ### END SOLUTION

    def fit(self, train: Iterable, val: Iterable | None = None, epochs: int = 1, log_every: int = 1) -> dict:
        """`epochs` more epochs of train_epoch (and evaluate on `val`); returns self.history.

        Per epoch: self.epoch += 1; record = {"epoch", "train_loss", "lr"} (+ "val_<key>"
        for each key of evaluate(val)); each value appended to self.history[key]; printed
        with self._log(record, seconds) when verbose and (epoch % log_every == 0 or last).
        """
        ### BEGIN SOLUTION
        for i in range(epochs):
            start = time.perf_counter()
            train_loss = self.train_epoch(train)
            self.epoch += 1
            record = {"epoch": self.epoch, "train_loss": train_loss, "lr": self.optimizer.lr}
            if val is not None:
                record.update({f"val_{k}": v for k, v in self.evaluate(val).items()})
            for key, value in record.items():
                self.history.setdefault(key, []).append(value)
            if self.verbose and (self.epoch % log_every == 0 or i == epochs - 1):
                self._log(record, time.perf_counter() - start)
        return self.history
        ### END SOLUTION

    # ---- printing (given) ------------------------------------------------------------
    def _progress(self, loader: Iterable, label: str) -> Iterable:
        """`loader` itself, wrapped in a transient progress bar when verbose on a terminal."""
        if not self.verbose:
            return loader
        from rich.console import Console

        console = Console()
        if not console.is_terminal:
            return loader
        from rich.progress import track

        total = len(loader) if hasattr(loader, "__len__") else None
        return track(loader, description=f"epoch {self.epoch + 1} {label}", total=total,
                     transient=True, console=console)

    def _log(self, record: dict, seconds: float) -> None:
        from rich.console import Console

        parts = [f"epoch {record['epoch']:3d}", f"train loss {record['train_loss']:.4f}"]
        for key, value in record.items():
            if key.startswith("val_"):
                parts.append(f"{key.replace('_', ' ')} {value:.4f}")
        parts.append(f"lr {record['lr']:.2e}")
        parts.append(f"{seconds:.2f}s")
        Console(highlight=False, soft_wrap=True).print("  ".join(parts))

    # ---- checkpoints (given; section 5 writes save_checkpoint and load_checkpoint) -----
    def save(self, path: str | os.PathLike, loader: Any = None) -> Path:
        """Checkpoint the model, optimizer, scheduler, counters, history and the loader's position."""
        extra = {"epoch": self.epoch, "history": self.history}
        if loader is not None and hasattr(loader, "state_dict"):
            extra["loader"] = loader.state_dict()
        return save_checkpoint(path, self.model, self.optimizer, self.scheduler, step=self.step, extra=extra)

    def load(self, path: str | os.PathLike, loader: Any = None) -> dict:
        """Restore what `save` wrote into this trainer's objects and `loader`; all or nothing."""
        before = loader.state_dict() if loader is not None and hasattr(loader, "state_dict") else None
        if before is not None:
            extra = read_checkpoint(path)["extra"] or {}
            if "loader" in extra:
                loader.load_state_dict(extra["loader"])  # checks its own state before changing anything
        try:
            info = load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        except Exception:
            if before is not None:
                loader.load_state_dict(before)
            raise
        self.step = info["step"]
        extra = info["extra"] or {}
        self.epoch = int(extra.get("epoch", 0))
        self.history = {k: list(v) for k, v in extra.get("history", self.history).items()}
        return info


# %% [markdown]
# ### A worked example: three blobs
#
# Three Gaussian blobs in 2-D, an MLP, Adam with a cosine schedule and clipping. The
# batches are a plain Python list: the Trainer needs nothing more.

# %%
def blobs(n_per_class=60, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 2.0], [-2.0, -1.0], [2.0, -1.0]])
    x = np.concatenate([c + 0.7 * rng.standard_normal((n_per_class, 2)) for c in centers])
    y = np.repeat(np.arange(3), n_per_class)
    order = rng.permutation(len(y))
    return x[order].astype(np.float32), y[order]


def batches(x, y, size):
    return [(Tensor(x[i:i + size]), Tensor(y[i:i + size])) for i in range(0, len(y), size)]


x_all, y_all = blobs()
train_batches, val_batches = batches(x_all[:150], y_all[:150], 16), batches(x_all[150:], y_all[150:], 64)
model = Sequential(Linear(2, 16, seed=1), ReLU(), Linear(16, 3, seed=2))
optimizer = Adam(model.parameters(), lr=0.05)
scheduler = CosineWarmupLR(optimizer, warmup_steps=10, total_steps=10 * len(train_batches))
trainer = Trainer(model, optimizer, CrossEntropyLoss(), scheduler=scheduler, clip=5.0, metric=accuracy)
history = trainer.fit(train_batches, val_batches, epochs=10, log_every=2)
print(f"{len(train_batches)} batches per epoch (the last one has {len(train_batches[-1][1].numpy())} examples), "
      f"{trainer.step} steps; final validation accuracy {history['val_accuracy'][-1]:.3f}, "
      f"last gradient norm {trainer.last_grad_norm:.3f}")

# %%
def test_unit_trainer():
    assert history["epoch"] == list(range(1, 11)) and len(history["train_loss"]) == 10, \
        f"10 epochs must record epochs 1 ... 10 and 10 training losses, got {history['epoch']}"
    first, last = history["train_loss"][0], history["train_loss"][-1]
    assert last < 0.5 * first, f"the training loss must at least halve in 10 epochs, went from {first:.3f} to {last:.3f}"
    assert history["val_accuracy"][-1] >= 0.9, f"validation accuracy must reach 0.9, got {history['val_accuracy'][-1]:.3f}"
    assert trainer.step == 10 * len(train_batches), \
        f"one optimizer step per batch: {10 * len(train_batches)} steps, got {trainer.step}"
    assert np.isclose(optimizer.lr, 0.0), (f"the scheduler steps after every optimizer step: at the end of its "
                                           f"total_steps the cosine reaches 0, got lr {optimizer.lr}")
    assert model.training, "evaluate puts the model back in training mode"
    probe = Linear(2, 1, seed=0)
    x_probe = Tensor(np.array([[1.0, 2.0], [3.0, -1.0]], dtype=np.float32))
    y_probe = Tensor(np.array([[1.0], [0.0]], dtype=np.float32))
    probe.weight.grad = Tensor(np.full(probe.weight.shape, 100.0, dtype=np.float32))  # left over from elsewhere
    Trainer(probe, SGD(probe.parameters(), lr=0.0), MSELoss(), verbose=False).train_step(x_probe, y_probe)
    fresh = Linear(2, 1, seed=0)
    MSELoss()(fresh(x_probe), y_probe).backward()
    assert np.allclose(probe.weight.grad.numpy(), fresh.weight.grad.numpy()), (
        f"with a stale .grad of 100 in place, train_step left {probe.weight.grad.numpy().ravel()} in .grad instead of this "
        f"batch's gradient {fresh.weight.grad.numpy().ravel()}: call optimizer.zero_grad() before backward()")
    print("✓ Trainer: loss falls, accuracy recorded, steps counted, schedule applied, stale gradients cleared")


test_unit_trainer()

# %% [markdown]
# ### Predict, then run: evaluation without a graph
#
# `evaluate` runs under `no_grad()`. Without it every operation records a node that
# keeps its input tensors alive for as long as the result lives: every intermediate
# activation of the forward pass stays in memory, for a backward pass that evaluation
# never runs, and building the nodes costs time.
#
# **Predict**: a 64 → 256 → 256 → 10 MLP on a batch of 512 float32 examples. How many
# KiB of tensors does the graph of one forward pass keep alive (the input, and the
# output of every operation: in each hidden layer the product `x @ W`, the sum with the
# bias and the ReLU)? And under `no_grad()`? Is the forward pass faster without the
# graph? Then run.

# %%
def graph_bytes(out):
    """Bytes of the tensors that `out`'s graph keeps alive, parameters (leaves with
    requires_grad) not counted: the input and every intermediate activation."""
    seen, stack, total = set(), [out], 0
    while stack:
        node = stack.pop()._node
        for tensor in node.inputs if node is not None else ():
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            stack.append(tensor)
            if not (tensor.requires_grad and tensor._node is None):
                total += tensor.data.nbytes
    return total


def time_forward(model, x, repeats, graph):
    start = time.perf_counter()
    if graph:
        for _ in range(repeats):
            model(x)
    else:
        with no_grad():
            for _ in range(repeats):
                model(x)
    return (time.perf_counter() - start) / repeats * 1e3


_mlp = Sequential(Linear(64, 256, seed=0), ReLU(), Linear(256, 256, seed=1), ReLU(), Linear(256, 10, seed=2))
_xb = Tensor(np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32))
_with_graph = _mlp(_xb)
with no_grad():
    _without_graph = _mlp(_xb)
print(f"kept alive by the graph: {graph_bytes(_with_graph) / 1024:.0f} KiB; "
      f"under no_grad: {graph_bytes(_without_graph) / 1024:.0f} KiB (the output alone is "
      f"{_with_graph.data.nbytes / 1024:.0f} KiB)")
_with = min(time_forward(_mlp, _xb, 20, graph=True) for _ in range(3))
_without = min(time_forward(_mlp, _xb, 20, graph=False) for _ in range(3))
print(f"forward with the graph {_with:.3f} ms, under no_grad {_without:.3f} ms (timings are noisy on a busy machine)")

# %% [markdown]
# The graph holds the input (128 KiB), six activations of 512 × 256 floats (512 KiB
# each) and the last layer's product: about 3 MiB for one small batch, none of it needed
# to evaluate. Under `no_grad()` the output has no node and holds on to nothing. For a large model
# the activations of a batch are many times its weights, so evaluating without
# `no_grad()` can run out of memory where training with the same batch size barely fit.
# The time saved is only the bookkeeping of the nodes, small next to the matrix products.
#
# ## 5. Checkpoints: resuming exactly
#
# A long run gets interrupted. To resume it so that the result is **identical** to an
# uninterrupted run you need more than the weights:
#
# | what | why |
# |---|---|
# | model parameters and buffers | obviously |
# | optimizer state: every group's settings, momentum, Adam's `exp_avg`, `exp_avg_sq` and per-parameter `step` | without it Adam restarts its bias correction (its first steps are about `lr` whatever the gradient) and momentum is lost: the loss jumps |
# | scheduler position (`last_step`) | otherwise warm-up starts again |
# | step and epoch counters, history | for the schedule, the logs and the data order |
# | data order (the loader's epoch) | the resumed run must see the same batches |
# | random generators (dropout's) | the same dropout masks |
# | how the model was built (`model.config()`, module 03) | a GPT with 2 heads and one with 4 have the same weight shapes; loading one's weights into the other would run without an error and compute nonsense |
#
# `model.state_dict()` (module 03), `optimizer.state_dict()` (module 06) and
# `scheduler.state_dict()` each return plain values and NumPy arrays. A checkpoint is
# one `.npz` file: every array under a readable name (`model/0.weight`,
# `optimizer/state/0/exp_avg`, ...) and everything else as JSON in an entry `meta`.
# Loading needs no pickle (`allow_pickle=False`: a checkpoint from someone else cannot
# run code on your machine), and each array goes back onto its parameter's device.
#
# Given helpers do the packing:
#
# * `_pack(value, key, arrays)` returns a JSON-able copy of `value` (a dict, list,
#   tuple, number, string, None, array or Tensor, nested as deep as you like) in which
#   every array is replaced by `{"__array__": name}` and stored in the dict `arrays`
#   under a name that starts with `key`. It refuses what would not load back as saved
#   (an array of Python objects, a dict key that is not a string, two entries stored under
#   one name), so a checkpoint that saves always loads;
# * `_model_config(model)`: `model.config()`, every module's class and constructor arguments;
# * `_generator_states(model)`: `{module name: bit-generator state}` for every module of
#   the model with a NumPy random generator `rng` (dropout);
# * `_write_npz(path, arrays)` writes the file with `atomic_write` (see below), so a crash,
#   a full disk or a second process saving at the same time never leaves half a checkpoint;
# * `read_checkpoint(path)` opens a checkpoint and returns
#   `{"format", "step", "model", "rng", "optimizer", "scheduler", "extra", "config"}`, with
#   the arrays back in place of their names (a damaged file: `ValueError` naming it);
# * `check_checkpoint(path, checkpoint, model, optimizer, scheduler)` checks that every
#   part fits the objects it is about to be loaded into.
#
# **Validate everything, then assign.** Loading writes into three objects. If the model's
# weights were replaced first and the optimizer's part then turned out not to fit (a
# checkpoint of another optimizer, different parameter groups), the exception would
# arrive with the model already overwritten: neither the old run nor the saved one, and
# nothing in the error says so. So `read_checkpoint` and `check_checkpoint` run first and
# raise `ValueError` naming the file and everything that is wrong (a truncated file, a
# file that is not a checkpoint, a model built with other arguments, a missing or
# unexpected weight, a shape, the optimizer's type, groups or settings, the scheduler's
# type); only when both pass does your code assign, and then nothing can fail half-way.
# (A checkpoint saved before checkpoints recorded `config` still loads, with a warning that
# only the weights' names and shapes were checked.)
#
# **`save_checkpoint(path, model, optimizer=None, scheduler=None, step=0, extra=None)`**
# (you write): `path = _checkpoint_path(path)` (adds `.npz` when missing); an empty dict
# `arrays`; `meta = {"format": CHECKPOINT_FORMAT, "step": int(step), "config":
# _model_config(model), "model": _pack(model.state_dict(), "model", arrays), "rng": _pack(_generator_states(model),
# "rng", arrays), "optimizer": ..., "scheduler": ..., "extra": ...}`, where the last three
# are `_pack(<the optimizer's / scheduler's state_dict(), or extra>, "<its key>", arrays)`,
# or `None` when not given; then `arrays["meta"] = np.array(json.dumps(meta))`,
# `_write_npz(path, arrays)` (given: it stores `meta` as UTF-8 bytes), and return `path`.
#
# **`load_checkpoint(path, model, optimizer=None, scheduler=None)`** (you write the part
# after the given checks): `model.load_state_dict(checkpoint["model"])`; each saved
# generator state back into its module (`modules[name].rng.bit_generator.state = state`
# with `modules = dict(model.named_modules())`); `optimizer.load_state_dict(...)` and
# `scheduler.load_state_dict(...)` for those given; return `{"step": checkpoint["step"],
# "extra": checkpoint["extra"]}`.

# %% [markdown]
# ### Saving a file without ever losing the old one
#
# A checkpoint is written over the previous one, every few hundred steps. If the disk fills
# up half-way, or the program dies half-way, or two processes save to the same path at
# once, the file must still hold one whole checkpoint: the old one or the new one, never a
# mixture, never a truncated file. The recipe, used by every program that cares (editors,
# databases, git):
#
# 1. write the new content to a **new** file in the same folder, under a name no other
#    process uses;
# 2. flush Python's buffer and `os.fsync` the file, so the bytes are on the disk and not only
#    in the operating system's cache;
# 3. `os.replace` it over the old name. A rename within one folder is atomic: anyone who
#    opens the path sees the old file or the new one, whole;
# 4. on any error before that, delete the new file: the old one was never touched.
#
# `atomic_write(path)` (given) does exactly this, as a context manager that hands you the
# open file. Everything in TinyTorch that writes a file goes through it (checkpoints here,
# tokenizers in module 10, plots in module 12), and so does `tito` (test results, backups,
# the student edition's manifest). It lives in a small module of its own,
# `tinytorch.files`, that imports nothing but the standard library.

# %%
#| export files
# Writing a file so that it is always whole: the one place TinyTorch and tito replace a file.
# Given code, not a student exercise.
import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None,
                 durable: bool = True) -> Iterator[IO]:
    """Write `path` all or nothing: `with atomic_write(p, "w", encoding="utf-8") as f: f.write(text)`.

    The content goes to a new file in the same folder, named `.<name>.<random>.tmp` (unique,
    so two processes saving the same path never share one), which is flushed, fsynced
    (`durable=False` skips the fsync, for files that need not survive a power cut) and
    renamed over `path` when the `with` block ends. An exception inside the block (a full
    disk, an error half-way through serialising) removes the new file and leaves `path` as
    it was. The file keeps the permissions of the one it replaces (a new one gets the usual
    ones, after the umask). A symbolic link is written through, as open() would: the file it
    points to is replaced (in its own folder) and the link stays a link.
    mode: "wb" (bytes) or "w" (text, with `encoding`).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: mode must be 'wb' or 'w', got {mode!r}.")
    path = Path(os.path.realpath(path))  # a link's target: renaming over the link would replace the link itself
    scratch = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    handle = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(handle, mode, encoding=encoding) as stream:
            yield stream
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        try:
            os.chmod(scratch, os.stat(path).st_mode & 0o7777)  # keep the old file's permissions
        except FileNotFoundError:
            pass
        os.replace(scratch, path)
    except BaseException:
        try:
            os.unlink(scratch)
        except FileNotFoundError:
            pass
        raise
    if durable:
        _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """fsync a folder so that a rename inside it survives a power cut (where the system allows it)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


# %%
#| export
CHECKPOINT_FORMAT = "tinytorch-checkpoint-v1"


def _pack(value: Any, key: str, arrays: dict) -> Any:
    """A JSON-able skeleton of `value`; every array goes into `arrays` under a name starting with `key`.

    Refuses, before anything is written, what would not load back as it was saved: an array
    of Python objects (it would need pickle), a dict key that is not a string (JSON would
    turn 1 into "1"), and two entries that flatten to the same name ({"a/b": x, "a": {"b": y}}).
    """
    if isinstance(value, Tensor):
        value = value.data
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if getattr(value.dtype, "hasobject", False):
            raise TypeError(f"save_checkpoint: {key!r} is an array of Python objects (dtype object); a checkpoint "
                            "stores numbers, booleans and strings only (loading it would need pickle).")
        if not isinstance(value, np.generic):  # 0-d arrays too: as JSON numbers they came back as float32, not arrays
            if key in arrays:
                raise ValueError(f"save_checkpoint: two entries are both stored as {key!r} (a key containing '/' "
                                 "collides with a nested one); rename one of them.")
            arrays[key] = to_host(value)
            return {"__array__": key}
    if isinstance(value, np.generic) or (hasattr(value, "shape") and hasattr(value, "item")):
        return value.item()
    if isinstance(value, dict):
        strange = [k for k in value if not isinstance(k, str)]
        if strange:
            raise TypeError(f"save_checkpoint: the dict at {key!r} has the key {strange[0]!r} "
                            f"({type(strange[0]).__name__}); checkpoints keep string keys only.")
        return {"__dict__": [[k, _pack(v, f"{key}/{k}", arrays)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"__tuple__": [_pack(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_pack(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"save_checkpoint: cannot store a {type(value).__name__} (at {key!r}).")


def _unpack(value: Any, arrays: dict) -> Any:
    """The inverse of `_pack`; KeyError names an array the file lacks, TypeError/ValueError a broken skeleton."""
    if isinstance(value, list):
        return [_unpack(v, arrays) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]
        if "__tuple__" in value:
            return tuple(_unpack(v, arrays) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: _unpack(v, arrays) for k, v in value["__dict__"]}
    return value


def _generator_modules(model: Any) -> dict:
    """{module name: module} for every module of `model` with a NumPy random generator `rng`."""
    named = model.named_modules() if hasattr(model, "named_modules") else []
    return {name: m for name, m in named if isinstance(getattr(m, "rng", None), np.random.Generator)}


def _generator_states(model: Any) -> dict:
    """Bit-generator states of the model's random generators (e.g. Dropout's), by module name."""
    return {name: m.rng.bit_generator.state for name, m in _generator_modules(model).items()}


def _model_config(model: Any) -> dict | None:
    """How the model was built (module 03's `Module.config()`), or None for a model without one."""
    return model.config() if callable(getattr(model, "config", None)) else None


def _checkpoint_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def _write_npz(path: Path, arrays: dict) -> None:
    """Write `arrays` to `path` with `atomic_write`: the old file survives any failure half-way.

    The JSON entry `meta` (a 0-d str array) is stored as its UTF-8 bytes (uint8): NumPy keeps a
    str array at 4 bytes per character, which made `meta` 8% of an int8 GPT checkpoint.
    """
    meta = arrays.get("meta")
    if isinstance(meta, np.ndarray) and meta.dtype.kind == "U":
        arrays = {**arrays, "meta": np.frombuffer(str(meta).encode("utf-8"), dtype=np.uint8)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as handle:
        np.savez(handle, **arrays)


_PARTS = ("model", "rng", "optimizer", "scheduler", "extra")
_NUMBERS = "biuf"  # the array kinds a model or an optimizer can hold: bool, int, unsigned, float


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _shape_problems(checkpoint: dict) -> list[str]:
    """What in the parts read from a file is not shaped as save_checkpoint writes it (a damaged or hand-made file)."""
    problems = []
    model, rng, config = checkpoint["model"], checkpoint["rng"], checkpoint["config"]
    if not isinstance(model, dict) or not all(isinstance(k, str) for k in model):
        problems.append("'model' is not a table of named weights")
    else:
        bad = [name for name, v in model.items()
               if not (isinstance(v, np.ndarray) and v.dtype.kind in _NUMBERS or isinstance(v, (bool, int, float)))]
        if bad:
            problems.append(f"the weights {bad[:5]} are not arrays of numbers")
    if not isinstance(rng, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in rng.items()):
        problems.append("'rng' is not a table of generator states")
    optimizer = checkpoint["optimizer"]
    if optimizer is not None:
        groups = optimizer.get("param_groups") if isinstance(optimizer, dict) else None
        state = optimizer.get("state") if isinstance(optimizer, dict) else None
        if (not isinstance(optimizer, dict) or not isinstance(optimizer.get("type"), str)
                or not isinstance(groups, list) or not isinstance(state, list)
                or not all(isinstance(g, dict) and all(isinstance(k, str) for k in g)
                           and isinstance(g.get("params"), list) for g in groups)
                or not all(isinstance(e, dict) and all(isinstance(k, str) for k in e) for e in state)):
            problems.append("'optimizer' is not an optimizer's state (type, param_groups, state)")
    scheduler = checkpoint["scheduler"]
    if scheduler is not None and (not isinstance(scheduler, dict) or not all(isinstance(k, str) for k in scheduler)
                                  or not isinstance(scheduler.get("type"), str)):
        problems.append("'scheduler' is not a scheduler's state")
    if config is not None and (not isinstance(config, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("type"), str)
            and isinstance(v.get("args"), dict) and all(isinstance(a, str) for a in v["args"])
            for k, v in config.items())):
        problems.append("'config' is not a model's configuration")
    return problems


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The saved parts of a checkpoint: {"format", "step", "model", "rng", "optimizer",
    "scheduler", "extra", "config"}, arrays in place ("config" is None in a file saved before
    checkpoints recorded it). ValueError names the path and what is wrong."""
    path = _checkpoint_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint at {path}.")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single array, not an .npz archive")
        with loaded:
            arrays = {key: loaded[key] for key in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError,
            struct.error, OverflowError, KeyError, UnicodeDecodeError) as err:  # whatever zipfile makes of damage
        raise ValueError(f"{path} cannot be read as a checkpoint: the file is truncated, damaged or "
                         f"not an .npz archive ({err}).") from None
    if "meta" not in arrays:
        raise ValueError(f"{path} is not a TinyTorch checkpoint: it has no 'meta' entry "
                         f"(its arrays: {sorted(arrays)[:5]}).")
    try:
        raw = arrays.pop("meta")  # UTF-8 bytes (uint8); a str array in files saved before that
        meta = json.loads(raw.tobytes().decode("utf-8") if raw.dtype == np.uint8 else str(raw))
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a TinyTorch checkpoint: its 'meta' entry is not JSON ({err}).") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{path} is not a TinyTorch checkpoint (format {found!r}, expected {CHECKPOINT_FORMAT!r}).")
    missing = [part for part in ("step", *_PARTS) if part not in meta]
    if missing:
        raise ValueError(f"{path} is incomplete: its 'meta' lacks {missing}.")
    if type(meta["step"]) is not int or meta["step"] < 0:
        raise ValueError(f"{path} is damaged: its step {meta['step']!r} is not a whole number >= 0.")
    try:
        parts = {part: _unpack(meta[part], arrays) for part in _PARTS}
        parts["config"] = _unpack(meta.get("config"), arrays)
    except KeyError as err:
        raise ValueError(f"{path} is incomplete: the array {err.args[0]!r} that its 'meta' names is missing.") from None
    except (TypeError, ValueError, RecursionError) as err:
        raise ValueError(f"{path} is damaged: its 'meta' is not shaped as save_checkpoint writes it ({err}).") from None
    problems = _shape_problems(parts)
    if problems:
        raise ValueError(f"{path} is damaged: " + "; ".join(problems) + ".")
    return {"format": meta["format"], "step": meta["step"], **parts}


def _config_problems(saved: dict, own: dict) -> list[str]:
    """How the model described by `saved` (a `Module.config()` from a file) differs from `own`."""
    problems = []
    missing = [name or "(the model)" for name in own if name not in saved]
    extra = [name or "(the model)" for name in saved if name not in own]
    if missing or extra:
        problems.append(f"modules in this model only {missing[:5]}, in the file only {extra[:5]}")
    for name, mine in own.items():
        theirs = saved.get(name)
        if theirs is None:
            continue
        label = name or "the model"
        if theirs["type"] != mine["type"]:
            problems.append(f"{label} is a {theirs['type']} in the file, a {mine['type']} here")
            continue
        plain = json.loads(json.dumps(mine["args"]))  # compared as the file holds them (tuples as lists)
        differs = [f"{arg}={theirs['args'].get(arg)!r} in the file, {plain.get(arg)!r} here"
                   for arg in sorted(set(plain) | set(theirs["args"])) if theirs["args"].get(arg) != plain.get(arg)]
        if differs:
            problems.append(f"{label} ({mine['type']}) was built with " + ", ".join(differs))
    return problems


def _optimizer_problems(state: dict, optimizer: Optimizer) -> list[str]:
    """How a saved optimizer state does not fit `optimizer` (type, groups, settings, per-parameter state)."""
    kind = type(optimizer).__name__
    if state["type"] != kind:
        return [f"its optimizer state is a {state['type']}'s, the optimizer is a {kind}"]
    saved_sizes = [len(g["params"]) for g in state["param_groups"]]
    own_sizes = [len(g["params"]) for g in optimizer.param_groups]
    if saved_sizes != own_sizes or len(state["state"]) != len(optimizer.params):
        return [f"the optimizer's parameter groups differ: groups of {saved_sizes} parameters "
                f"in the file, {own_sizes} in this {kind}"]
    problems = []
    for number, (saved, own) in enumerate(zip(state["param_groups"], optimizer.param_groups)):
        settings = {k: v for k, v in saved.items() if k != "params"}
        wanted = {k for k in own if k != "params"}
        if set(settings) != wanted:
            problems.append(f"parameter group {number} has the settings {sorted(settings)}, this {kind} uses "
                            f"{sorted(wanted)}")
            continue
        try:
            optimizer._check_settings(dict(settings), f" in parameter group {number}")
        except (TypeError, ValueError) as err:
            problems.append(f"parameter group {number}: {err}")
    own_keys = {frozenset(entry) for entry in optimizer.state if entry}
    saved_keys = {frozenset(entry) for entry in state["state"] if entry}
    if len(saved_keys) > 1 or (own_keys and saved_keys and saved_keys != own_keys):
        problems.append(f"the per-parameter optimizer states hold different entries "
                        f"({sorted(sorted(k) for k in saved_keys)})")
    for i, (param, entry) in enumerate(zip(optimizer.params, state["state"])):
        bad = [f"{key} {tuple(np.shape(v))}" for key, v in entry.items()
               if hasattr(v, "shape") and tuple(np.shape(v)) != param.shape]
        if bad:
            problems.append(f"optimizer state of parameter {i} has shapes {bad}, the parameter {param.shape}")
        if any(hasattr(v, "dtype") and v.dtype.kind not in _NUMBERS for v in entry.values()):
            problems.append(f"optimizer state of parameter {i} holds arrays that are not numbers")
        if "step" in entry and (type(entry["step"]) is not int or entry["step"] < 0):
            problems.append(f"optimizer state of parameter {i} has step {entry['step']!r}, not a whole number >= 0")
        others = [key for key, v in entry.items() if key != "step" and not hasattr(v, "shape")]
        if others:
            problems.append(f"optimizer state of parameter {i} has {others} that should be arrays")
    return problems


def _scheduler_problems(state: dict, scheduler: LRScheduler) -> list[str]:
    kind = type(scheduler).__name__
    if state["type"] != kind:
        return [f"its scheduler state is a {state['type']}'s, the scheduler is a {kind}"]
    own = scheduler.state_dict()
    if set(state) != set(own):
        return [f"its scheduler state has {sorted(state)}, a {kind}'s has {sorted(own)}"]
    wrong = [key for key, value in own.items() if key != "type" and not (
        type(state[key]) is int and state[key] >= 0 if isinstance(value, int) else _is_number(state[key]))]
    return [f"its scheduler state has values of the wrong kind for {wrong}"] if wrong else []


def check_checkpoint(path: str | os.PathLike, checkpoint: dict, model: Any, optimizer: Optimizer | None = None,
                     scheduler: LRScheduler | None = None) -> None:
    """Raise ValueError naming `path` and every part of `checkpoint` that does not fit `model`,
    `optimizer` or `scheduler` (how the model was built, names, shapes, random generators,
    types, parameter groups, settings, per-parameter state); changes nothing."""
    problems = []
    own_config = _model_config(model)
    if checkpoint.get("config") is not None and own_config is not None:
        problems += _config_problems(checkpoint["config"], own_config)
    saved, own = checkpoint["model"], model.state_dict()
    missing = [name for name in own if name not in saved]
    unexpected = [name for name in saved if name not in own]
    if missing or unexpected:
        problems.append(f"the model's weights differ: missing from the file {missing}, "
                        f"not in this model {unexpected}")
    shapes = [f"{name} {tuple(np.shape(saved[name]))} in the file, {tuple(np.shape(own[name]))} in the model"
              for name in own if name in saved and tuple(np.shape(saved[name])) != tuple(np.shape(own[name]))]
    if shapes:
        problems.append("shapes differ: " + ", ".join(shapes))
    generators = _generator_modules(model)
    strays = [name for name in checkpoint["rng"] if name not in generators]
    if strays:
        problems.append(f"random generator states for modules this model lacks: {strays}")
    for name, state in checkpoint["rng"].items():
        if name in generators:
            try:  # on a scratch generator of the same kind: the model's own stays untouched
                type(generators[name].rng.bit_generator)().state = state
            except (TypeError, ValueError, KeyError, OverflowError) as err:
                problems.append(f"the random generator state of {name!r} is damaged ({err})")
    if optimizer is not None:
        if checkpoint["optimizer"] is None:
            problems.append("it holds no optimizer state (it was saved without an optimizer)")
        else:
            problems += _optimizer_problems(checkpoint["optimizer"], optimizer)
    if scheduler is not None:
        if checkpoint["scheduler"] is None:
            problems.append("it holds no scheduler state (it was saved without a scheduler)")
        else:
            problems += _scheduler_problems(checkpoint["scheduler"], scheduler)
    if problems:
        raise ValueError(f"{path} does not fit; nothing was loaded: " + "; ".join(problems) + ".")


def save_checkpoint(path: str | os.PathLike, model: Any, optimizer: Optimizer | None = None,
                    scheduler: LRScheduler | None = None, step: int = 0, extra: dict | None = None) -> Path:
    """Write model, random generators, optimizer, scheduler, step and extra to one `.npz` file.

    The file holds the arrays packed by `_pack` under the keys "model", "rng", "optimizer",
    "scheduler", "extra", and `meta`: the JSON of {"format": CHECKPOINT_FORMAT, "step":
    int(step), "config": _model_config(model), "model", "rng", "optimizer", "scheduler",
    "extra"} (None for a part not given). Written with `_write_npz`, after everything is
    packed (so a value `_pack` refuses stops the save before a byte is written). Returns
    the path written (".npz" appended when missing).
    """
    step = as_int(step, "save_checkpoint: step", minimum=0)  # given: 2.5 steps is not a position to resume from
    ### BEGIN SOLUTION
    path = _checkpoint_path(path)
    arrays: dict[str, np.ndarray] = {}
    meta = {
        "format": CHECKPOINT_FORMAT,
        "step": int(step),
        "config": _model_config(model),
        "model": _pack(model.state_dict(), "model", arrays),
        "rng": _pack(_generator_states(model), "rng", arrays),
        "optimizer": None if optimizer is None else _pack(optimizer.state_dict(), "optimizer", arrays),
        "scheduler": None if scheduler is None else _pack(scheduler.state_dict(), "scheduler", arrays),
        "extra": None if extra is None else _pack(extra, "extra", arrays),
    }
    arrays["meta"] = np.array(json.dumps(meta))
    _write_npz(path, arrays)
    return path
    ### END SOLUTION


def load_checkpoint(path: str | os.PathLike, model: Any, optimizer: Optimizer | None = None,
                    scheduler: LRScheduler | None = None) -> dict:
    """Restore a checkpoint into `model` (and `optimizer`, `scheduler`); returns {"step", "extra"}.

    The given lines read the file and check that every part fits (ValueError naming the
    path otherwise, before anything changes). Then: the model's weights, its random
    generators' states, the optimizer's and the scheduler's state (those given).
    """
    path = _checkpoint_path(path)
    checkpoint = read_checkpoint(path)
    check_checkpoint(path, checkpoint, model, optimizer, scheduler)
    if checkpoint["config"] is None and _model_config(model) is not None:
        warnings.warn(f"{path} does not record how its model was built (it was saved before checkpoints "
                      "did): only the names and shapes of its weights were checked against this model.",
                      stacklevel=2)
    ### BEGIN SOLUTION
    model.load_state_dict(checkpoint["model"])
    modules = dict(model.named_modules()) if checkpoint["rng"] else {}
    for name, state in checkpoint["rng"].items():
        modules[name].rng.bit_generator.state = state
    if optimizer is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(checkpoint["scheduler"])
    return {"step": checkpoint["step"], "extra": checkpoint["extra"]}
    ### END SOLUTION


# %% [markdown]
# ### A worked example: what a checkpoint holds
#
# The blob classifier of section 4, saved and opened as a plain `.npz` archive:

# %%
import tempfile

with tempfile.TemporaryDirectory() as _tmp:
    _path = trainer.save(Path(_tmp) / "blobs")
    with np.load(_path, allow_pickle=False) as _data:
        for _name in _data.files:
            print(f"  {_name:32s} {str(_data[_name].shape):10s} {_data[_name].dtype}")
    print("meta['step'] =", read_checkpoint(_path)["step"], " file:", _path.name)

# %% [markdown]
# ### Test: resume from a checkpoint, bit for bit
#
# Train 4 epochs in one go; separately train 2, save, build *fresh* objects with
# different initial weights, load, train 2 more. The weights must be identical, not just
# close. Then a checkpoint that does not fit (different parameter groups) must leave the
# model as it was.

# %%
def make_run(seed_offset=0, groups=False):
    m = Sequential(Linear(2, 8, seed=10 + seed_offset), ReLU(), Dropout(0.1, seed=5 + seed_offset),
                   Linear(8, 3, seed=20 + seed_offset))
    params = [{"params": m.parameters()[:2]}, {"params": m.parameters()[2:], "lr": 0.01}] if groups else m.parameters()
    opt = Adam(params, lr=0.03)
    sch = CosineWarmupLR(opt, warmup_steps=5, total_steps=4 * len(train_batches))
    return Trainer(m, opt, CrossEntropyLoss(), scheduler=sch, clip=1.0, verbose=False)


def test_unit_checkpoint_resume():
    straight = make_run()
    straight.fit(train_batches, epochs=4)
    first = make_run()
    first.fit(train_batches, epochs=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = first.save(Path(tmp) / "run")
        resumed = make_run(seed_offset=100)  # different weights and dropout seed: all must come from the file
        resumed.load(path)
        assert resumed.step == first.step, \
            f"after load the step count must be {first.step}, got {resumed.step}: the step count must be saved in meta and returned"
        assert resumed.scheduler.last_step == first.scheduler.last_step, (
            f"after load the scheduler's last_step must be {first.scheduler.last_step}, got {resumed.scheduler.last_step}: "
            "the scheduler's position (last_step) was not restored")
        saved_state, loaded_state = first.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
        assert all(a.get("step") == b.get("step") and np.array_equal(a.get("exp_avg"), b.get("exp_avg"))
                   for a, b in zip(saved_state, loaded_state)), \
            "after load Adam's exp_avg and step differ from the saved run: the optimizer's state (Adam's moments and step counts) was not restored"
        assert _generator_states(resumed.model) == _generator_states(first.model), \
            "after load the dropout generators differ from the saved run's: restore each module's random generator state"
        resumed.fit(train_batches, epochs=2)
        size = path.stat().st_size
        other = make_run(seed_offset=7, groups=True)
        before = [p.numpy().copy() for p in other.model.parameters()]
        try:
            other.load(path)
        except ValueError as err:
            assert str(path) in str(err) and "groups" in str(err), err
        else:
            raise AssertionError("a checkpoint with other parameter groups must not load")
        assert all(np.array_equal(b, p.numpy()) for b, p in zip(before, other.model.parameters())), \
            "a failed load must leave the model as it was"
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert np.array_equal(a.numpy(), b.numpy()), (
            f"{name} after 2 epochs + save/load + 2 epochs differs from 4 epochs straight (by up to "
            f"{np.abs(a.numpy() - b.numpy()).max():.3g}): everything training depends on must be saved and restored")
    assert resumed.history["train_loss"] == straight.history["train_loss"] and resumed.step == straight.step, (
        f"2 epochs + save/load + 2 epochs must equal 4 epochs straight: losses {resumed.history['train_loss']} against "
        f"{straight.history['train_loss']}, step {resumed.step} against {straight.step}")
    print(f"✓ checkpoint ({size:,} bytes): 2 + save/load + 2 epochs == 4 epochs, bit for bit; "
          "a misfit changes nothing")


test_unit_checkpoint_resume()

# %% [markdown]
# ### Predict, then run: what a checkpoint weighs
#
# A 256 → 512 → 256 MLP in float32 has `256·512 + 512 + 512·256 + 256` = 262,912
# parameters, about 1 MiB. **Predict** the size of a checkpoint after one step with SGD,
# with SGD and momentum, and with Adam, as multiples of the weights (module 06 told you
# what state each keeps). Then run.

# %%
_big = Sequential(Linear(256, 512, seed=0), ReLU(), Linear(512, 256, seed=1))
_weights = sum(p.data.nbytes for p in _big.parameters())
_xbig = Tensor(np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32))
_ybig = Tensor(np.zeros(32, dtype=np.int64))
with tempfile.TemporaryDirectory() as _tmp:
    for _name, _make in [("SGD", lambda ps: SGD(ps, lr=0.1)), ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                         ("Adam", lambda ps: Adam(ps))]:
        _opt = _make(_big.parameters())
        _opt.zero_grad()
        CrossEntropyLoss()(_big(_xbig), _ybig).backward()
        _opt.step()
        _file = save_checkpoint(Path(_tmp) / "big", _big, _opt)
        print(f"{_name:13s} checkpoint {_file.stat().st_size / 2**20:5.2f} MiB = "
              f"{_file.stat().st_size / _weights:.2f}x the weights ({_weights / 2**20:.2f} MiB)")

# %% [markdown]
# Weights, plus one copy per state array: none for SGD, the velocity for momentum,
# `exp_avg` and `exp_avg_sq` for Adam (its per-parameter `step` counts are a few bytes of
# JSON). A 7-billion-parameter model trained with Adam in float32 has a 28 GB model and an
# 84 GB checkpoint; that is why checkpoints for inference drop the optimizer.
#
# ## 6. Systems view: where the time of a step goes
#
# **Predict** which part of one training step of the 256 → 512 → 256 MLP on a batch of
# 128 takes the most time: forward and backward, `clip_grad_norm`, or Adam's step; and
# roughly what fraction of the step it takes. Then run (a second or two).

# %%
def time_it(fn, repeats=10):
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


_xb = Tensor(np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32))
_yb = Tensor(np.zeros(128, dtype=np.int64))
_big_opt = Adam(_big.parameters())
_loss_fn = CrossEntropyLoss()


def forward_backward():
    _big_opt.zero_grad()
    _loss_fn(_big(_xb), _yb).backward()


_parts = {"forward + backward": time_it(forward_backward),
          "clip_grad_norm": time_it(lambda: clip_grad_norm(_big.parameters(), 1e9)),
          "Adam step": time_it(_big_opt.step)}
for _name, _ms in _parts.items():
    print(f"{_name:20s} {_ms:7.2f} ms  ({_ms / sum(_parts.values()):.0%} of the step)")

# %% [markdown]
# Forward and backward are matrix products over the whole batch (about `6 · batch ·
# parameters` FLOPs); clipping and the update are a few passes over the parameters only,
# independent of the batch size. So clipping is nearly free, and a bigger batch makes the
# update's share even smaller.
#
# ## Summary
#
# * The loop: zero_grad → forward → loss → backward → clip → step → schedule.
# * `clip_grad_norm` scales all gradients by one factor when their global norm exceeds
#   the cap, never scales up, and returns the norm before clipping.
# * A schedule is `lr_at(step)`; warm-up starts near 0 and protects the first steps,
#   cosine decay reaches the floor exactly at the end of the run.
# * Evaluate in `eval()` mode under `no_grad()`; average over examples, not batches.
# * A checkpoint that resumes exactly holds weights, optimizer state with its groups and
#   step counts, scheduler position, counters, the data order and random generator
#   states; loading checks everything before it changes anything.
#
# ## Exercises and questions
#
# Answer each by running your own code (a new cell below is the place).
#
# 1. **The two norms.** For gradients `[3, 4]` and `[12]`, compute the 2-norm and the
#    inf-norm with your `clip_grad_norm` (on copies: it changes `.grad`). For which
#    gradients are the two equal? Clip both ways to `max_norm = 6` and compare the
#    directions of the results.
# 2. **How big is a normal gradient?** In `bad_batch_run`, print the gradient norm every
#    ten steps of the clean run. Pick a `max_norm` that never clips a normal batch but
#    still stops the bad one. What happens to the clean run's final loss with
#    `max_norm = 0.5`, which clips every step?
# 3. **Warm-up or not.** Train the blob classifier with Adam at `lr = 0.3`, once with
#    `warmup_steps = 0` and once with 20 (same `total_steps`). Print the training loss
#    of the first 10 steps (`train_step` returns it). Which run has the worse start?
# 4. **Per batch against per example.** Make a loader of two batches, 15 examples and 1
#    example, where the single example has a large loss. Compute the mean loss per
#    batch and per example by hand and compare with your `train_epoch` (with `lr = 0`).
# 5. **Resume without the optimizer.** Train the `make_run()` model for 2 epochs, save,
#    and load only the model into a fresh run (`load_checkpoint(path, run.model)`).
#    Train 2 more epochs and compare the final loss and weights with the uninterrupted
#    run of `test_unit_checkpoint_resume`. How large is the first resumed step compared
#    with the step before the save, and why (think of Adam's `step` and bias correction)?
# 6. **A broken file.** Save a checkpoint, write its first half into a new file, and load
#    that into a model. What does the error say? Check that the model's weights did not
#    change.
#
# Questions to answer in a sentence, each checked with a few lines of code:
#
# * Why does `clip_grad_norm` return the norm *before* clipping? Log it over the blob run
#   and find the step where it is largest.
# * `evaluate` on the model of `make_run()` (it has dropout): what loss do you get in
#   eval mode, and with the mode switch removed (call `model.train()` inside your metric,
#   or evaluate by hand)? Which one is the model's real quality?
# * `scheduler.step()` called before `optimizer.step()`: which learning rate does the
#   first step use, and which `lr_at` value is never used at all?
# * A checkpoint of a model with dropout, loaded without its generator states: is the
#   resumed run still bit for bit? Find the first step where it differs.
