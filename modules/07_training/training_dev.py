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
# # Module 07: Training
#
# > The loop that turns the pieces into a model that learns, and the tools that keep it stable.
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
#         scheduler.step()               # (optional) next learning rate
#     evaluate on held-out data, without building a graph
# ```
#
# Each line is one call, but getting it *right* has details: evaluating in `eval()` mode
# and under `no_grad()`, averaging the loss over examples rather than batches, clipping
# *before* the step, resuming a run exactly where it stopped. This module builds:
#
# 1. `clip_grad_norm`: gradient clipping by the global norm, as PyTorch does it;
# 2. learning-rate **schedules**: step decay, and cosine decay with a linear warm-up;
# 3. a `Trainer` with `train_epoch`, `evaluate` and `fit`, keeping a `history`;
# 4. **checkpoints**: everything needed to resume training, bit for bit, in one `.npz` file.
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
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from tinytorch.core.autograd import no_grad
from tinytorch.core.optimizers import Optimizer
from tinytorch.core.tensor import Tensor, array_module

# %% [markdown]
# ## 1. Gradient clipping
#
# Sometimes one batch produces a huge gradient (a rare example, a sharp cliff in the loss
# surface, a recurrent or deep network multiplying many factors). One step with it can
# throw the weights far away and undo hours of training. **Clipping by the global norm**
# caps the size of the whole update while keeping its direction:
#
# ```
# total = sqrt(Σ over all parameters of Σ g²)      the norm of all gradients as one vector
# if total > max_norm:   g ← g · max_norm / (total + 1e-6)   for every parameter
# ```
#
# All gradients are scaled by the *same* factor, so the direction of the step is
# unchanged; only its length is capped. The function returns `total` *before* clipping:
# logging it is the easiest way to see instabilities coming. (PyTorch's
# `torch.nn.utils.clip_grad_norm_` computes the same numbers; the `1e-6` keeps the
# division safe.)
#
# By hand: gradients `[3, 4]` and `[12]` have total norm `sqrt(9 + 16 + 144) = 13`.
# With `max_norm = 6.5` every gradient is halved (up to the 1e-6): `[1.5, 2]` and `[6]`.

# %%
#| export
def _grad_array(p: Tensor) -> Any:
    return p.grad.data if isinstance(p.grad, Tensor) else p.grad


def clip_grad_norm(params: Iterable[Tensor], max_norm: float, norm_type: float = 2.0) -> float:
    """Scale all gradients together so their global norm is at most `max_norm`.

    Returns the total norm before clipping (a Python float). Parameters whose `.grad`
    is None are ignored. norm_type may be 2.0 (default) or float("inf") (largest |g|).
    """
    ### BEGIN SOLUTION
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    grads = [_grad_array(p) for p in params]
    xp = array_module(grads[0])
    if norm_type == math.inf:
        total = max(float(xp.max(xp.abs(g))) if g.size else 0.0 for g in grads)
    elif norm_type == 2.0:
        norms = [float(xp.sqrt(xp.sum(g * g))) for g in grads]
        total = math.sqrt(sum(n * n for n in norms))
    else:
        raise ValueError(f"clip_grad_norm: norm_type must be 2.0 or inf, got {norm_type}.")
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for p, g in zip(params, grads):
            p.grad.data = g * coef  # a new array, same dtype
    return total
    ### END SOLUTION


# %%
def test_unit_clip_grad_norm():
    a = Tensor(np.zeros(2), requires_grad=True)
    b = Tensor(np.zeros(1), requires_grad=True)
    c = Tensor(np.zeros(1), requires_grad=True)  # no gradient: ignored
    a.grad, b.grad = Tensor(np.array([3.0, 4.0])), Tensor(np.array([12.0]))
    total = clip_grad_norm([a, b, c], max_norm=6.5)
    assert total == 13.0
    assert np.allclose(a.grad.numpy(), [1.5, 2.0]) and np.allclose(b.grad.numpy(), [6.0])
    assert c.grad is None
    total = clip_grad_norm([a, b], max_norm=100.0)  # below the cap: untouched
    assert np.isclose(total, 6.5) and np.allclose(b.grad.numpy(), [6.0])
    print("✓ clip_grad_norm: global norm, common scale, returns the norm before clipping")


test_unit_clip_grad_norm()

# %% [markdown]
# ## 2. Learning-rate schedules
#
# One learning rate for the whole run is rarely best. Early on, large steps make fast
# progress; late in training, small steps settle into a minimum instead of bouncing
# around it. A **schedule** is a function `lr_at(step)` of the number of optimizer steps
# taken so far. It is attached to an optimizer: creating it sets `optimizer.lr =
# lr_at(0)`, and each `scheduler.step()` (called after `optimizer.step()`) moves to
# the next step's rate.
#
# * **Step decay** (`StepLR`): multiply by `gamma` every `step_size` steps:
#   `lr_at(t) = base_lr · gamma^⌊t / step_size⌋`.
# * **Cosine with linear warm-up** (`CosineWarmupLR`), the schedule most transformers use:
#   * warm-up, `t < warmup_steps`: `lr_at(t) = base_lr · (t + 1) / warmup_steps`, rising
#     linearly and reaching `base_lr` at `t = warmup_steps − 1`;
#   * decay, `warmup_steps ≤ t ≤ total_steps`: with `progress = (t − warmup_steps) /
#     (total_steps − warmup_steps)`,
#     `lr_at(t) = min_lr + (base_lr − min_lr) · ½ (1 + cos(π · progress))`, from `base_lr` down to `min_lr`;
#   * after `total_steps`: `min_lr`.
#
# **Why warm up?** At the start, the weights are random and Adam's second-moment
# estimate `v` is built from a handful of gradients; full-size steps then are large and
# badly aimed, and can push the model into a region it never recovers from. Ramping the
# learning rate over the first few hundred steps avoids that. **Why cosine?** It decays
# slowly at first, fast in the middle and gently at the end: no hyper-parameters beyond
# the length of the run.

# %%
#| export
class LRScheduler:
    """A learning-rate schedule attached to an optimizer.

    `lr_at(step)` is the rate for optimizer step number `step` (0-based). Creating the
    scheduler sets `optimizer.lr = lr_at(0)`; `step()` advances `last_step` and sets the next.
    """

    def __init__(self, optimizer: Optimizer, base_lr: float | None = None):
        self.optimizer = optimizer
        self.base_lr = float(optimizer.lr if base_lr is None else base_lr)
        self.last_step = 0
        self.optimizer.lr = self.lr_at(0)

    def lr_at(self, step: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement lr_at(step).")

    def step(self) -> float:
        """Advance one optimizer step; returns the new learning rate."""
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
    """lr_at(t) = base_lr * gamma ** (t // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size}.")
        self.step_size = int(step_size)
        self.gamma = float(gamma)
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        ### BEGIN SOLUTION
        return self.base_lr * self.gamma ** (step // self.step_size)
        ### END SOLUTION


class CosineWarmupLR(LRScheduler):
    """Linear warm-up over `warmup_steps`, then cosine decay to `min_lr` at `total_steps`."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0):
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
    from tinytorch.core.optimizers import SGD

    opt = SGD([Tensor(np.zeros(1), requires_grad=True)], lr=1.0)
    sched = StepLR(opt, step_size=3, gamma=0.5)
    seen = [opt.lr] + [sched.step() for _ in range(7)]
    assert seen == [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25]

    opt = SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1)
    cos = CosineWarmupLR(opt, warmup_steps=4, total_steps=12, min_lr=0.01)
    assert np.isclose(opt.lr, 0.025)
    assert np.allclose([cos.lr_at(t) for t in (0, 1, 3)], [0.025, 0.05, 0.1])
    assert np.isclose(cos.lr_at(8), 0.01 + 0.09 * 0.5)  # half-way through the decay
    assert cos.lr_at(12) == 0.01 and cos.lr_at(100) == 0.01
    print("✓ schedules: step decay, cosine with warm-up")


test_unit_schedules()

# %% [markdown]
# The two schedules over a 100-step run (`lr_at` is a plain function of the step, so a
# schedule can be printed or plotted before any training happens):

# %%
from tinytorch.core.optimizers import SGD, Adam

_demo_opt = SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1)
_step = StepLR(_demo_opt, step_size=30, gamma=0.3)
_cos = CosineWarmupLR(SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1), warmup_steps=10, total_steps=100)
for t in (0, 5, 9, 10, 30, 55, 80, 99, 100):
    print(f"step {t:3d}: StepLR {_step.lr_at(t):.4f}   CosineWarmupLR {_cos.lr_at(t):.4f}")

# %% [markdown]
# ## 3. Measuring a model: accuracy
#
# The loss is what the optimizer minimises; people care about a **metric**. For
# classification with logits `(N, C)` and integer targets `(N,)` it is the fraction
# whose largest logit is the right class. A metric here is any function
# `metric(outputs, targets) -> float` averaged over a batch; the Trainer weights each batch
# by its size so the result is the average over *examples*.

# %%
#| export
def accuracy(outputs: Any, targets: Any) -> float:
    """Fraction of rows whose arg-max equals the target (logits (N, C), targets (N,)).

    For one output per example ((N,) or (N, 1)) the prediction is `output > 0`.
    """
    ### BEGIN SOLUTION
    out = outputs.numpy() if isinstance(outputs, Tensor) else np.asarray(outputs)
    tgt = targets.numpy() if isinstance(targets, Tensor) else np.asarray(targets)
    if out.ndim == 1 or out.shape[-1] == 1:
        predicted = (out.reshape(tgt.shape) > 0).astype(tgt.dtype)
    else:
        predicted = out.argmax(axis=-1)
    return float(np.mean(predicted == tgt))
    ### END SOLUTION


# %% [markdown]
# ## 4. The Trainer
#
# `Trainer(model, optimizer, loss_fn, scheduler=None, clip=None, metric=None)` runs the loop.
#
# * `train_step(x, y)`: one optimisation step; returns the loss as a float.
# * `train_epoch(loader)`: `model.train()`, one step per batch; returns the mean loss per
#   **example** (a short last batch counts for less).
# * `evaluate(loader, metric=None)`: `model.eval()` (dropout off) and `no_grad()` (no graph,
#   less memory and time); returns `{"loss": ..., "<metric name>": ...}`.
# * `fit(train, val=None, epochs=1)`: train and evaluate `epochs` times, printing one line
#   per epoch (with `rich`), appending to `history`: `epoch`, `train_loss`, `lr` and, with
#   validation data, `val_loss` and `val_<metric>`.
#
# `trainer.step` counts optimizer steps and `trainer.epoch` counts epochs over the
# trainer's whole life, so calling `fit` twice continues where the first call stopped.

# %%
#| export
def _batch_size(y: Any) -> int:
    shape = getattr(y, "shape", None)
    return int(shape[0]) if shape else 1


def _as_tensor(value: Any) -> Any:
    return value if isinstance(value, Tensor) or not hasattr(value, "shape") else Tensor(value)


class Trainer:
    """Training and evaluation loops with optional clipping, schedule, metric and history.

    model     -- callable on a batch of inputs (a Module: train()/eval() are used if present)
    optimizer -- an Optimizer over the model's parameters
    loss_fn   -- loss_fn(outputs, targets) -> scalar Tensor
    scheduler -- an LRScheduler, stepped after every optimizer step
    clip      -- max global gradient norm (None: no clipping)
    metric    -- metric(outputs, targets) -> float, reported by evaluate (e.g. accuracy)
    verbose   -- print one line per epoch (rich) and show a progress bar on a terminal
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
        method = getattr(self.model, "train" if training else "eval", None)
        if callable(method):
            method()

    def train_step(self, x: Any, y: Any) -> float:
        """zero_grad, forward, loss, backward, clip, step, schedule; returns the loss."""
        ### BEGIN SOLUTION
        x, y = _as_tensor(x), _as_tensor(y)
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
        """One pass over `loader` in training mode; the mean loss per example."""
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
        """Loss (and metric) averaged over examples, in eval mode without a graph."""
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
                    x, y = _as_tensor(x), _as_tensor(y)
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
        """`epochs` more epochs of training (and evaluation on `val`); returns `history`."""
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

    # ---- printing ----------------------------------------------------------------------
    def _progress(self, loader: Iterable, label: str) -> Iterable:
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

    # ---- checkpoints -------------------------------------------------------------------
    def save(self, path: str | os.PathLike, loader: Any = None) -> Path:
        """Checkpoint the model, optimizer, scheduler, counters, history and loader position."""
        extra = {"epoch": self.epoch, "history": self.history}
        if loader is not None and hasattr(loader, "state_dict"):
            extra["loader"] = loader.state_dict()
        return save_checkpoint(path, self.model, self.optimizer, self.scheduler, step=self.step, extra=extra)

    def load(self, path: str | os.PathLike, loader: Any = None) -> dict:
        """Restore what `save` wrote into this trainer's (fresh) objects and `loader`."""
        info = load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        self.step = info["step"]
        extra = info["extra"] or {}
        self.epoch = int(extra.get("epoch", 0))
        self.history = {k: list(v) for k, v in extra.get("history", self.history).items()}
        if loader is not None and "loader" in extra:
            loader.load_state_dict(extra["loader"])
        return info


# %% [markdown]
# ## 5. Checkpoints: resuming exactly
#
# A long run gets interrupted. To resume it so that the result is **identical** to an
# uninterrupted run you need more than the weights:
#
# | what | why |
# |---|---|
# | model parameters | obviously |
# | optimizer state (momentum, Adam's `m`, `v`, step counts) and hyper-parameters | without it Adam restarts its bias correction and momentum is lost: the loss jumps |
# | scheduler position | otherwise warm-up starts again |
# | step and epoch counters, history | for the schedule, the logs and the data order |
# | data order (the loader's seed and epoch) | the resumed run must see the same batches |
# | random generators (e.g. dropout's) | the same dropout masks |
#
# `save_checkpoint` writes all of it into one `.npz` file: each array under a readable
# name (`model/0.weight`, `optimizer/state/0/exp_avg`, ...) and everything else (numbers,
# names, nested structure) as JSON under `meta`. Loading needs no pickle (`allow_pickle=False`:
# a checkpoint from someone else cannot run code on your machine) and puts each array
# back onto its parameter's device.
#
# Size: model weights + optimizer state. With Adam that is 3× the model: a reason large
# models save optimizer state separately, or not at all for inference.

# %%
#| export
CHECKPOINT_FORMAT = "tinytorch-checkpoint-v1"


def _pack(value: Any, key: str, arrays: dict) -> Any:
    """A JSON-able skeleton of `value`; arrays go into `arrays` under `key`."""
    if isinstance(value, Tensor):
        value = value.data
    if hasattr(value, "shape") and hasattr(value, "dtype") and getattr(value, "ndim", 0) > 0:
        arrays[key] = value.get() if array_module(value) is not np else np.asarray(value)
        return {"__array__": key}
    if isinstance(value, np.generic) or (hasattr(value, "shape") and hasattr(value, "item")):
        return value.item()
    if isinstance(value, dict):
        return {"__dict__": [[str(k), _pack(v, f"{key}/{k}", arrays)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"__tuple__": [_pack(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_pack(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"save_checkpoint: cannot store a {type(value).__name__} (at {key!r}).")


def _unpack(value: Any, arrays: Any) -> Any:
    if isinstance(value, list):
        return [_unpack(v, arrays) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            return np.array(arrays[value["__array__"]])
        if "__tuple__" in value:
            return tuple(_unpack(v, arrays) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: _unpack(v, arrays) for k, v in value["__dict__"]}
    return value


def _generator_states(model: Any) -> dict:
    """Bit-generator states of the model's random generators (e.g. Dropout's), by module name."""
    named = model.named_modules() if hasattr(model, "named_modules") else []
    return {name: m.rng.bit_generator.state for name, m in named
            if isinstance(getattr(m, "rng", None), np.random.Generator)}


def _checkpoint_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def save_checkpoint(path: str | os.PathLike, model: Any, optimizer: Optimizer | None = None,
                    scheduler: LRScheduler | None = None, step: int = 0, extra: dict | None = None) -> Path:
    """Write model and optimizer (and scheduler, step, extra) state to one `.npz` file.

    `extra` may hold numbers, strings, lists, dicts and arrays. Returns the path written
    (".npz" is appended when missing). The file is replaced atomically.
    """
    ### BEGIN SOLUTION
    path = _checkpoint_path(path)
    arrays: dict[str, np.ndarray] = {}
    meta = {
        "format": CHECKPOINT_FORMAT,
        "step": int(step),
        "model": _pack(model.state_dict(), "model", arrays),
        "rng": _pack(_generator_states(model), "rng", arrays),
        "optimizer": None if optimizer is None else _pack(optimizer.state_dict(), "optimizer", arrays),
        "scheduler": None if scheduler is None else _pack(scheduler.state_dict(), "scheduler", arrays),
        "extra": None if extra is None else _pack(extra, "extra", arrays),
    }
    if "meta" in arrays:
        raise ValueError("save_checkpoint: 'meta' is reserved.")
    arrays["meta"] = np.array(json.dumps(meta))
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    with open(scratch, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(scratch, path)
    return path
    ### END SOLUTION


def load_checkpoint(path: str | os.PathLike, model: Any, optimizer: Optimizer | None = None,
                    scheduler: LRScheduler | None = None) -> dict:
    """Restore a checkpoint into `model` (and `optimizer`, `scheduler`); returns {"step", "extra"}."""
    ### BEGIN SOLUTION
    path = _checkpoint_path(path)
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    meta = json.loads(str(arrays["meta"]))
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a TinyTorch checkpoint (format {meta.get('format')!r}).")
    model.load_state_dict(_unpack(meta["model"], arrays))
    states = _unpack(meta["rng"], arrays)
    if states:
        modules = dict(model.named_modules())
        for name, state in states.items():
            modules[name].rng.bit_generator.state = state
    if optimizer is not None:
        if meta["optimizer"] is None:
            raise ValueError(f"{path} holds no optimizer state.")
        optimizer.load_state_dict(_unpack(meta["optimizer"], arrays))
    if scheduler is not None:
        if meta["scheduler"] is None:
            raise ValueError(f"{path} holds no scheduler state.")
        scheduler.load_state_dict(_unpack(meta["scheduler"], arrays))
    return {"step": int(meta["step"]), "extra": _unpack(meta["extra"], arrays)}
    ### END SOLUTION


# %% [markdown]
# ## 6. Putting it together: a small classifier
#
# Three Gaussian blobs in 2-D, an MLP, Adam with a cosine schedule and clipping. The
# batches are a plain Python list: the Trainer needs nothing more.

# %%
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss


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
print(f"final validation accuracy {history['val_accuracy'][-1]:.3f}, last gradient norm {trainer.last_grad_norm:.3f}")

# %% [markdown]
# ### Test: the Trainer learns and records its history

# %%
def test_unit_trainer():
    assert history["epoch"] == list(range(1, 11)) and len(history["train_loss"]) == 10
    assert history["train_loss"][-1] < 0.5 * history["train_loss"][0]
    assert history["val_accuracy"][-1] >= 0.9
    assert trainer.step == 10 * len(train_batches) and np.isclose(optimizer.lr, 0.0)
    print("✓ Trainer: loss falls, accuracy recorded, steps counted, schedule applied")


test_unit_trainer()

# %% [markdown]
# ### Test: resume from a checkpoint, bit for bit
#
# Train 4 epochs in one go; separately train 2, save, build *fresh* objects, load, train 2
# more. The weights must be identical, not just close.

# %%
import tempfile


def make_run(seed_offset=0):
    m = Sequential(Linear(2, 8, seed=10 + seed_offset), ReLU(), Linear(8, 3, seed=20 + seed_offset))
    opt = Adam(m.parameters(), lr=0.03)
    sch = CosineWarmupLR(opt, warmup_steps=5, total_steps=4 * len(train_batches))
    return Trainer(m, opt, CrossEntropyLoss(), scheduler=sch, clip=1.0, verbose=False)


def test_unit_checkpoint_resume():
    straight = make_run()
    straight.fit(train_batches, epochs=4)
    first = make_run()
    first.fit(train_batches, epochs=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = first.save(Path(tmp) / "run")
        resumed = make_run(seed_offset=100)  # different initial weights: all must come from the file
        resumed.load(path)
        resumed.fit(train_batches, epochs=2)
        size = path.stat().st_size
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert np.array_equal(a.numpy(), b.numpy()), name
    assert resumed.history["train_loss"] == straight.history["train_loss"] and resumed.step == straight.step
    print(f"✓ checkpoint ({size:,} bytes): 2 + save/load + 2 epochs == 4 epochs, bit for bit")


test_unit_checkpoint_resume()

# %% [markdown]
# ## 7. Systems view: where the time goes, what a checkpoint weighs
#
# Per step, the forward and backward passes dominate; the optimizer's update and the
# clipping are a few passes over the parameters. A checkpoint with Adam holds three
# copies of the parameters (weights, `m`, `v`).

# %%
def time_it(fn, repeats=20):
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


big = Sequential(Linear(256, 512, seed=0), ReLU(), Linear(512, 256, seed=1))
xb, yb = Tensor(np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)), Tensor(np.zeros(128, dtype=np.int64))
big_opt = Adam(big.parameters())
loss_fn = CrossEntropyLoss()


def forward_backward():
    big_opt.zero_grad()
    loss_fn(big(xb), yb).backward()


forward_backward()
print(f"forward + backward: {time_it(forward_backward):6.2f} ms")
print(f"clip_grad_norm:     {time_it(lambda: clip_grad_norm(big.parameters(), 1e9)):6.2f} ms")
print(f"Adam step:          {time_it(big_opt.step):6.2f} ms")
with tempfile.TemporaryDirectory() as tmp:
    weights = sum(p.data.nbytes for p in big.parameters())
    ckpt = save_checkpoint(Path(tmp) / "big", big, big_opt)
    print(f"weights {weights / 2**20:.2f} MiB, checkpoint with Adam state {ckpt.stat().st_size / 2**20:.2f} MiB")

# %% [markdown]
# ## Summary
#
# * The loop: zero_grad → forward → loss → backward → clip → step → schedule.
# * `clip_grad_norm` scales all gradients by one factor when their global norm exceeds
#   the cap and returns the norm before clipping.
# * A schedule is `lr_at(step)`; warm-up protects the first steps, cosine decay settles the end.
# * Evaluate in `eval()` mode under `no_grad()`; average over examples, not batches.
# * A checkpoint that resumes exactly holds weights, optimizer and scheduler state,
#   counters, the data order and random generator states.
