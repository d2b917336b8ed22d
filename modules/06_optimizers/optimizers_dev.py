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
# # Module 06: Optimizers
#
# > Turning gradients into better weights.
#
# After module 05, `loss.backward()` leaves in every parameter's `.grad` the direction in
# which the loss grows fastest. Learning is the step in the *opposite* direction. How big
# that step is, and whether it remembers earlier steps, is what an **optimizer** decides.
#
# You will build the three optimizers that train most networks today:
#
# | optimizer | update (per parameter `p` with gradient `g`) | extra state per parameter |
# |---|---|---|
# | SGD | `p ← p − lr·g` | none |
# | SGD + momentum | `buf ← μ·buf + g`, `p ← p − lr·buf` | 1 array (velocity) |
# | Adam | running means of `g` and `g²`, bias-corrected | 2 arrays (1st and 2nd moments) |
# | AdamW | Adam, with weight decay applied to `p` directly | 2 arrays |
#
# Every rule here is **exactly** PyTorch's rule for the optimizer of the same name, so a
# model trained with TinyTorch and one trained with `torch.optim` take the same steps.
#
# Three promises every optimizer here keeps:
#
# 1. `.step()` reads `.grad` and never changes it (clipping, logging and debugging rely on that);
# 2. a parameter whose `.grad` is `None` (it took no part in this loss) is skipped, its state untouched;
# 3. the new values *replace* `param.data`, computed with whole-array operations from
#    `array_module`, so the same code runs on NumPy and CuPy.

# %%
#| default_exp core.optimizers

# %%
#| export
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from tinytorch.core.tensor import Tensor, array_module

# %% [markdown]
# ## 1. What every optimizer shares
#
# An optimizer holds three things:
#
# * **the parameters**: a list of `Tensor`s (usually `model.parameters()`);
# * **hyper-parameters**: `lr`, momentum, betas, ... in one dictionary, `optimizer.hyperparams`
#   (`optimizer.lr` reads and writes the learning rate, which is what a schedule changes);
# * **state**: one dictionary per parameter, `optimizer.state[i]` for `params[i]`, holding
#   the arrays the rule needs between steps (empty until the first step that uses it).
#
# `zero_grad()` clears the gradients before the next backward pass. It sets them to
# `None` rather than filling zeros: that costs no memory and lets `step()` tell "no
# gradient" from "a gradient of zero" (which matters: weight decay still shrinks a
# parameter whose gradient is zero, but not one that took no part).
#
# `state_dict()` is everything needed to continue training later: hyper-parameters and
# copies of the state arrays, as plain NumPy arrays you can print. `load_state_dict()`
# puts them back (onto each parameter's device). Module 07 writes them into checkpoints.

# %%
#| export
def _copy_to_numpy(array: Any) -> np.ndarray:
    """An independent NumPy copy of a NumPy or CuPy array."""
    if array_module(array) is not np:
        return array.get()
    return np.array(array, copy=True)


class Optimizer:
    """Base class: parameters, hyper-parameters and per-parameter state.

    params      -- an iterable of Tensors (e.g. `model.parameters()`)
    hyperparams -- the settings of the update rule (lr, momentum, ...)
    state       -- a list of dicts, `state[i]` belongs to `params[i]`
    Subclasses implement `_update(index, param, grad)`.
    """

    def __init__(self, params: Iterable[Tensor], **hyperparams: Any):
        if hasattr(params, "parameters") and callable(params.parameters):
            params = params.parameters()
        self.params: list[Tensor] = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__} got an empty parameter list: nothing to optimize.")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: parameter {i} is a {type(p).__name__}, not a Tensor.")
        if hyperparams.get("lr", 0.0) < 0:
            raise ValueError(f"Invalid learning rate: {hyperparams['lr']} (must be >= 0).")
        if hyperparams.get("weight_decay", 0.0) < 0:
            raise ValueError(f"Invalid weight_decay: {hyperparams['weight_decay']} (must be >= 0).")
        self.hyperparams: dict[str, Any] = dict(hyperparams)
        self.state: list[dict[str, Any]] = [{} for _ in self.params]

    @property
    def lr(self) -> float:
        return self.hyperparams["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        self.hyperparams["lr"] = float(value)

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (set `.grad` to None)."""
        ### BEGIN SOLUTION
        for p in self.params:
            p.grad = None
        ### END SOLUTION

    def step(self) -> None:
        """One update of every parameter that has a gradient; `.grad` is left as it is."""
        ### BEGIN SOLUTION
        for index, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad.data if isinstance(p.grad, Tensor) else p.grad
            self._update(index, p, grad)
        ### END SOLUTION

    def _update(self, index: int, param: Tensor, grad: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _update(index, param, grad).")

    def state_nbytes(self) -> int:
        """Bytes held by the optimizer's state arrays (what it costs on top of the model)."""
        return int(sum(v.nbytes for s in self.state for v in s.values() if hasattr(v, "nbytes")))

    def state_dict(self) -> dict:
        """{"type", "hyperparams", "state"}: hyper-parameters and NumPy copies of the state."""
        ### BEGIN SOLUTION
        state = []
        for s in self.state:
            state.append({k: _copy_to_numpy(v) if hasattr(v, "shape") else v for k, v in s.items()})
        return {"type": type(self).__name__, "hyperparams": dict(self.hyperparams), "state": state}
        ### END SOLUTION

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what `state_dict()` returned (arrays go to each parameter's device)."""
        ### BEGIN SOLUTION
        kind = state_dict.get("type", type(self).__name__)
        if kind != type(self).__name__:
            raise ValueError(f"load_state_dict: this is a {type(self).__name__}, the state is a {kind}'s.")
        states = list(state_dict["state"])
        if len(states) != len(self.params):
            raise ValueError(
                f"load_state_dict: the state holds {len(states)} parameters, this optimizer has {len(self.params)}."
            )
        new_state = []
        for i, (p, saved) in enumerate(zip(self.params, states)):
            xp = array_module(p.data)
            entry = {}
            for key, value in saved.items():
                if key == "step":
                    entry[key] = int(value)
                else:
                    if tuple(np.shape(value)) != p.shape:
                        raise ValueError(
                            f"load_state_dict: state {key!r} of parameter {i} has shape "
                            f"{tuple(np.shape(value))}, the parameter has shape {p.shape}."
                        )
                    entry[key] = xp.array(value, dtype=p.data.dtype, copy=True)
            new_state.append(entry)
        hyper = dict(state_dict["hyperparams"])
        if "betas" in hyper:
            hyper["betas"] = tuple(float(b) for b in hyper["betas"])
        self.hyperparams.update(hyper)
        self.state = new_state
        ### END SOLUTION

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.hyperparams.items())
        return f"{type(self).__name__}({len(self.params)} parameters, {settings})"


# %% [markdown]
# ## 2. SGD, momentum and weight decay
#
# Plain **stochastic gradient descent** steps downhill: `p ← p − lr·g`. Its weakness shows
# on a long, narrow valley: the gradient points mostly across the valley, so SGD
# zig-zags from wall to wall and crawls along the floor.
#
# **Momentum** keeps a running *velocity* `buf` (one array the size of the parameter):
#
# ```
# d   = g + wd·p            (weight decay, if any, is added to the gradient: "L2")
# buf = d                   on the first step
# buf = μ·buf + d           afterwards
# d   = d + μ·buf  (nesterov)   or   d = buf  (classic)
# p   = p − lr·d
# ```
#
# Components that keep the same sign add up (speed along the valley floor); components
# that flip sign cancel (less zig-zag). With μ = 0.9 a constant gradient ends up moving
# the parameter 1/(1−0.9) = 10× as far per step. **Nesterov** momentum looks one step
# ahead along the velocity; **weight decay** pulls every weight towards zero a little each step.
#
# Hand-computed first steps, `p = 1.0`, `g = 0.5`, `lr = 0.1`:
#
# * plain: `p = 1 − 0.1·0.5 = 0.95`
# * momentum 0.9: step 1 `buf = 0.5`, `p = 0.95`; step 2 (same g) `buf = 0.9·0.5 + 0.5 = 0.95`, `p = 0.95 − 0.095 = 0.855`
# * weight decay 0.1: `d = 0.5 + 0.1·1 = 0.6`, `p = 0.94`
# * nesterov 0.9: step 1 `buf = 0.5`, `d = 0.5 + 0.45 = 0.95`, `p = 0.905`

# %%
#| export
class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, weight decay and Nesterov momentum.

    The same rule as `torch.optim.SGD` (dampening 0):
        d = g + weight_decay * p
        buf = d (first step), else momentum * buf + d
        d = d + momentum * buf if nesterov else buf
        p = p - lr * d
    State per parameter: "momentum_buffer" (only when momentum != 0).
    """

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        if momentum < 0:
            raise ValueError(f"Invalid momentum: {momentum} (must be >= 0).")
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum needs momentum > 0.")
        super().__init__(params, lr=float(lr), momentum=float(momentum),
                         weight_decay=float(weight_decay), nesterov=bool(nesterov))

    def _update(self, index: int, param: Tensor, grad: Any) -> None:
        lr = self.hyperparams["lr"]
        momentum = self.hyperparams["momentum"]
        weight_decay = self.hyperparams["weight_decay"]
        nesterov = self.hyperparams["nesterov"]
        ### BEGIN SOLUTION
        xp = array_module(param.data)
        d = grad
        if weight_decay != 0:
            d = d + weight_decay * param.data  # a new array: grad stays untouched
        if momentum != 0:
            state = self.state[index]
            if "momentum_buffer" not in state:
                buf = xp.array(d, copy=True)  # a copy, so the in-place updates never touch grad
            else:
                buf = state["momentum_buffer"]
                buf *= momentum
                buf += d
            state["momentum_buffer"] = buf
            d = d + momentum * buf if nesterov else buf
        param.data = (param.data - lr * d).astype(param.data.dtype, copy=False)
        ### END SOLUTION


# %% [markdown]
# ### Test: SGD's first steps, by hand

# %%
def _param(value, grad):
    p = Tensor(np.array(value, dtype=np.float64), requires_grad=True)
    p.grad = Tensor(np.array(grad, dtype=np.float64))
    return p


def test_unit_sgd():
    p = _param([1.0, -2.0], [0.5, 0.25])
    SGD([p], lr=0.1).step()
    assert np.allclose(p.numpy(), [0.95, -2.025])

    p = _param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    assert np.allclose(p.numpy(), [0.95]) and np.allclose(opt.state[0]["momentum_buffer"], [0.5])
    opt.step()
    assert np.allclose(opt.state[0]["momentum_buffer"], [0.95]) and np.allclose(p.numpy(), [0.855])

    p = _param([1.0], [0.5])
    SGD([p], lr=0.1, weight_decay=0.1).step()
    assert np.allclose(p.numpy(), [0.94])

    p = _param([1.0], [0.5])
    SGD([p], lr=0.1, momentum=0.9, nesterov=True).step()
    assert np.allclose(p.numpy(), [0.905])
    assert np.array_equal(p.grad.numpy(), [0.5]), "step() must not change .grad"
    print("✓ SGD: plain, momentum, weight decay, nesterov")


test_unit_sgd()

# %% [markdown]
# ### Seeing momentum work: a narrow valley
#
# `f(x, y) = ½(x² + 50·y²)` is a valley 50× steeper across (`y`) than along (`x`). Its
# gradient is `(x, 50y)`, written by hand here so this experiment needs no autograd.
# The largest safe learning rate is set by the steep direction (`lr < 2/50`), and with it
# plain SGD creeps along `x`. Momentum keeps that small step and still arrives.

# %%
def valley_run(make_optimizer, steps=100):
    p = Tensor(np.array([10.0, 1.0]), requires_grad=True)
    opt = make_optimizer([p])
    for _ in range(steps):
        x, y = p.data
        p.grad = Tensor(np.array([x, 50.0 * y]))
        opt.step()
    x, y = p.data
    return 0.5 * (x * x + 50 * y * y)


for name, make in [("SGD lr=0.02", lambda ps: SGD(ps, lr=0.02)),
                   ("SGD lr=0.02 momentum=0.9", lambda ps: SGD(ps, lr=0.02, momentum=0.9)),
                   ("SGD lr=0.02 nesterov 0.9", lambda ps: SGD(ps, lr=0.02, momentum=0.9, nesterov=True))]:
    print(f"{name:28s} f after 100 steps = {valley_run(make):.3e}   (start: 75.0)")

# %% [markdown]
# ## 3. Adam: a step size per coordinate
#
# Momentum gives every coordinate the same learning rate. **Adam** (Kingma & Ba, 2015)
# divides each coordinate's step by a running estimate of that coordinate's gradient
# size, so steep and flat directions move at similar speeds. It keeps two arrays per
# parameter:
#
# ```
# g = g + wd·p                         (Adam's weight decay is L2: added to the gradient)
# m = β1·m + (1−β1)·g                  first moment: a running mean of g
# v = β2·v + (1−β2)·g²                 second moment: a running mean of g²
# m̂ = m / (1−β1ᵗ),  v̂ = v / (1−β2ᵗ)    bias correction (t = steps taken, from 1)
# p = p − lr · m̂ / (√v̂ + ε)
# ```
#
# **Why bias correction?** `m` and `v` start at zero, so early on they underestimate:
# after one step `m = (1−β1)·g = 0.1·g`. Dividing by `1−β1ᵗ` (0.1 at t = 1) undoes exactly
# that. The consequence is Adam's signature: **the first step moves every coordinate by
# about `lr`**, whatever the gradient's size: `m̂ = g`, `√v̂ = |g|`, so the step is
# `lr·g/(|g|+ε) ≈ lr·sign(g)`.
#
# Hand-computed, `p = 1`, `g = 0.5`, `lr = 0.1`: step 1 `m = 0.05`, `v = 0.00025`,
# `m̂ = 0.5`, `v̂ = 0.25`, `p = 1 − 0.1·0.5/(0.5 + 1e−8) = 0.9000000002`.
#
# The arithmetic follows PyTorch's order (`denom = √v/√(1−β2ᵗ) + ε`, `step = lr/(1−β1ᵗ)`),
# which is why the results agree with `torch.optim.Adam` to the last few bits.

# %%
#| export
class Adam(Optimizer):
    """Adam with L2 weight decay (added to the gradient), as `torch.optim.Adam`.

    State per parameter: "step" (int), "exp_avg" (m) and "exp_avg_sq" (v), arrays shaped
    like the parameter: 2 extra copies of every parameter.
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"Invalid betas: {betas} (each must be in [0, 1)).")
        if eps < 0:
            raise ValueError(f"Invalid eps: {eps} (must be >= 0).")
        super().__init__(params, lr=float(lr), betas=(float(beta1), float(beta2)),
                         eps=float(eps), weight_decay=float(weight_decay))

    def _weight_decay(self, param: Tensor, grad: Any) -> Any:
        """Adam's weight decay: L2, i.e. `wd·p` added to the gradient (a new array)."""
        weight_decay = self.hyperparams["weight_decay"]
        ### BEGIN SOLUTION
        if weight_decay != 0:
            return grad + weight_decay * param.data
        return grad
        ### END SOLUTION

    def _update(self, index: int, param: Tensor, grad: Any) -> None:
        lr = self.hyperparams["lr"]
        beta1, beta2 = self.hyperparams["betas"]
        eps = self.hyperparams["eps"]
        ### BEGIN SOLUTION
        xp = array_module(param.data)
        grad = self._weight_decay(param, grad)
        state = self.state[index]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(param.data)
            state["exp_avg_sq"] = xp.zeros_like(param.data)
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1 - beta1) * grad
        v *= beta2
        v += (1 - beta2) * (grad * grad)
        step_size = lr / (1 - beta1 ** t)
        denom = xp.sqrt(v) / math.sqrt(1 - beta2 ** t) + eps
        param.data = (param.data - step_size * (m / denom)).astype(param.data.dtype, copy=False)
        ### END SOLUTION


# %% [markdown]
# ## 4. AdamW: weight decay that is really decay
#
# With Adam, L2 weight decay goes into `g`, and then gets *divided by √v̂* like the rest
# of the gradient: weights with large gradients are barely decayed, weights with small
# ones a lot. Loshchilov & Hutter (2019) **decouple** the two: shrink the weight directly,
# then take a plain Adam step,
#
# ```
# p = p − lr·wd·p        (i.e. p·(1 − lr·wd))
# p = p − lr · m̂/(√v̂ + ε)   with m, v built from the raw gradient
# ```
#
# Every weight shrinks by the same fraction per step. This is what transformers are
# trained with; PyTorch's default `weight_decay` for AdamW is 0.01 (and 0 for Adam).

# %%
#| export
class AdamW(Adam):
    """Adam with decoupled weight decay, as `torch.optim.AdamW` (default weight_decay=0.01)."""

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    def _weight_decay(self, param: Tensor, grad: Any) -> Any:
        """Decoupled decay: shrink `param.data` by (1 − lr·wd); the gradient goes on unchanged."""
        lr = self.hyperparams["lr"]
        weight_decay = self.hyperparams["weight_decay"]
        ### BEGIN SOLUTION
        if weight_decay != 0:
            param.data = param.data * (1 - lr * weight_decay)
        return grad
        ### END SOLUTION


# %% [markdown]
# ### Test: Adam and AdamW, first steps by hand

# %%
def test_unit_adam_adamw():
    p = _param([1.0, -3.0], [0.5, -2.0])
    opt = Adam([p], lr=0.1)
    opt.step()
    # first step: about lr in the direction of -sign(g), whatever |g| is
    assert np.allclose(p.numpy(), [1 - 0.1 * 0.5 / (0.5 + 1e-8), -3 + 0.1 * 2.0 / (2.0 + 1e-8)], atol=1e-12)
    assert opt.state[0]["step"] == 1
    assert np.allclose(opt.state[0]["exp_avg"], [0.05, -0.2])
    assert np.allclose(opt.state[0]["exp_avg_sq"], [0.00025, 0.004])
    opt.step()  # same gradient again: m̂ = g, v̂ = g², so again a step of ~lr
    assert np.allclose(p.numpy(), [0.8, -2.8], atol=1e-7)

    p = _param([1.0], [0.5])
    Adam([p], lr=0.1, weight_decay=0.1).step()  # g = 0.6, still a step of ~lr
    assert np.allclose(p.numpy(), [0.9], atol=1e-7)

    p = _param([1.0], [0.5])
    AdamW([p], lr=0.1, weight_decay=0.1).step()  # p = 1·(1 − 0.01) = 0.99, then − ~0.1
    assert np.allclose(p.numpy(), [0.99 - 0.1 * 0.5 / (0.5 + 1e-8)], atol=1e-12)
    assert AdamW([p]).hyperparams["weight_decay"] == 0.01
    assert np.array_equal(p.grad.numpy(), [0.5])
    print("✓ Adam and AdamW: first steps, bias correction, decoupled decay")


test_unit_adam_adamw()

# %% [markdown]
# ## 5. The promises: `.grad` untouched, `None` skipped, state that round-trips

# %%
def test_unit_optimizer_contract():
    a = _param([1.0, 2.0], [0.1, 0.2])
    b = Tensor(np.array([5.0]), requires_grad=True)  # took no part: grad is None
    for make in (lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
                 lambda ps: Adam(ps, lr=0.1, weight_decay=0.1), lambda ps: AdamW(ps, lr=0.1)):
        opt = make([a, b])
        grad_before = a.grad.numpy().copy()
        opt.step()
        assert np.array_equal(a.grad.numpy(), grad_before)
        assert b.numpy().tolist() == [5.0] and opt.state[1] == {}
    opt = Adam([a, b], lr=0.05)
    opt.step()
    saved = opt.state_dict()
    twin = Adam([Tensor(a.numpy().copy(), requires_grad=True), b], lr=0.9)
    twin.load_state_dict(saved)
    assert twin.lr == 0.05 and twin.state[0]["step"] == 1
    assert np.array_equal(twin.state[0]["exp_avg"], opt.state[0]["exp_avg"])
    saved["state"][0]["exp_avg"][:] = 123.0  # a copy: changing it changes nothing inside
    assert not np.any(opt.state[0]["exp_avg"] == 123.0)
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    print("✓ .grad untouched, None skipped, state_dict round trip, zero_grad")


test_unit_optimizer_contract()

# %% [markdown]
# ## 6. With autograd: the three lines of every training step
#
# So far the gradients were written by hand. With module 05 they come from
# `loss.backward()`, and a training step is always the same three lines:
# `zero_grad()` (forget the last batch's gradients, which would otherwise *accumulate*),
# `loss.backward()`, `step()`. Fitting `y = 3x − 1` from noisy points:

# %%
_rng = np.random.default_rng(0)
_x = Tensor(_rng.uniform(-1, 1, (64, 1)).astype(np.float32))
_y = Tensor((3 * _x.numpy() - 1 + 0.05 * _rng.standard_normal((64, 1))).astype(np.float32))
for name, make in [("SGD lr=0.1", lambda ps: SGD(ps, lr=0.1)),
                   ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                   ("Adam lr=0.1", lambda ps: Adam(ps, lr=0.1))]:
    w = Tensor(np.zeros((1, 1), dtype=np.float32), requires_grad=True)
    b = Tensor(np.zeros(1, dtype=np.float32), requires_grad=True)
    opt = make([w, b])
    for _ in range(100):
        opt.zero_grad()
        loss = ((_x @ w + b - _y) ** 2).mean()
        loss.backward()
        opt.step()
    print(f"{name:13s} w = {w.item():.3f}, b = {b.item():.3f}, loss = {loss.item():.5f}")

# %% [markdown]
# ## 7. Systems view: what the optimizer costs in memory
#
# A model's parameters are not the only thing in memory during training. For every
# parameter there is also its gradient (same size) and the optimizer's state:
#
# | optimizer | state per parameter | training memory ≈ |
# |---|---|---|
# | SGD | 0 | weights + grads = 2× |
# | SGD + momentum | 1× | 3× |
# | Adam / AdamW | 2× (m and v) | 4× |
#
# (plus activations, which depend on the batch). A 7-billion-parameter model in float32
# is 28 GB of weights; Adam's state adds another 56 GB. That is why large models are
# trained with sharded optimizer states or 8-bit optimizers.
#
# Measured on an MLP for the 8×8 digits (64 → 128 → 64 → 10), after one step (state is
# created lazily, on the first step):

# %%
def mlp_parameters(sizes=(64, 128, 64, 10), dtype=np.float32):
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(Tensor(rng.standard_normal((fan_in, fan_out)).astype(dtype) / np.sqrt(fan_in), requires_grad=True))
        params.append(Tensor(np.zeros(fan_out, dtype=dtype), requires_grad=True))
    return params


model_params = mlp_parameters()
n_params = sum(p.size for p in model_params)
weight_bytes = sum(p.data.nbytes for p in model_params)
print(f"MLP 64-128-64-10: {n_params:,} parameters, {weight_bytes / 1024:.1f} KiB of float32 weights")
for name, make in [("SGD", lambda ps: SGD(ps, lr=0.1)),
                   ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                   ("Adam", lambda ps: Adam(ps)), ("AdamW", lambda ps: AdamW(ps))]:
    params = mlp_parameters()
    for p in params:
        p.grad = Tensor(np.ones_like(p.data))
    opt = make(params)
    opt.step()
    extra = opt.state_nbytes()
    print(f"  {name:13s} state {extra / 1024:7.1f} KiB = {extra / weight_bytes:.0f}x the weights")

# %% [markdown]
# ## 8. Time: one vectorised update per parameter
#
# Each step is a handful of whole-array operations per parameter tensor, never a Python
# loop over numbers. Adam does roughly 10 array passes against SGD's 1-2, so it costs a
# few times more per step, which is still small next to the forward and backward passes.

# %%
import time


def time_step(make, size=1_000_000, repeats=5):
    p = Tensor(np.zeros(size, dtype=np.float32), requires_grad=True)
    p.grad = Tensor(np.ones(size, dtype=np.float32))
    opt = make([p])
    opt.step()
    start = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    return (time.perf_counter() - start) / repeats * 1e3


for name, make in [("SGD", lambda ps: SGD(ps, lr=0.1)), ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                   ("Adam", lambda ps: Adam(ps))]:
    print(f"{name:13s} {time_step(make):6.2f} ms per step for 1M parameters")

# %% [markdown]
# ## Summary
#
# * An optimizer turns `.grad` into a new `param.data`; it never changes `.grad` and
#   skips parameters without one.
# * SGD has no state; momentum keeps a velocity (1× the parameters); Adam keeps the
#   running mean and mean square of the gradient (2×), bias-corrected so that its first
#   step is about `lr` per coordinate.
# * Adam's weight decay is L2 (inside the gradient); AdamW decays the weights directly.
# * `state_dict()` / `load_state_dict()` capture everything needed to resume: module 07
#   writes them to checkpoints.
