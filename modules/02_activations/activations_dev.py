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
# # Module 02: Activations
#
# > The bends that let stacked layers learn more than a straight line.
#
# A layer computes `x @ W + b`. Stack two of them and you get
# `(x @ W1 + b1) @ W2 + b2 = x @ (W1 @ W2) + (b1 @ W2 + b2)`: one layer again. However
# deep a stack of linear maps is, it can only draw straight boundaries. An **activation
# function** applied elementwise between the layers breaks that collapse, and with it a
# network can approximate curved functions.
#
# In this module you build the activations every later model uses:
#
# | name | formula | range | used in |
# |---|---|---|---|
# | ReLU | `max(0, x)` | `[0, ∞)` | most hidden layers, CNNs |
# | Sigmoid | `1 / (1 + e^(-x))` | `(0, 1)` | probabilities of yes/no, gates |
# | Tanh | `(e^x - e^(-x)) / (e^x + e^(-x))` | `(-1, 1)` | RNNs, centred outputs |
# | GELU | `x · Φ(x)` (tanh approximation) | `≈ [-0.17, ∞)` | Transformers (GPT, BERT) |
# | Softmax | `e^(x_i) / Σ_j e^(x_j)` | `(0, 1)`, sums to 1 | class probabilities, attention |
# | LogSoftmax | `x_i - log Σ_j e^(x_j)` | `(-∞, 0]` | cross-entropy (module 04) |
#
# For each one you will see its formula, its range, its derivative (module 05 turns the
# derivatives into backward rules) and a plot, and you will make the exponential ones
# **numerically stable**: `sigmoid(-1000)` and `softmax([1000, 1001, 1002])` must give
# numbers, not `nan`.
#
# Every activation returns its result through `record_op` with the operation names
# listed in `CONTRIBUTING.md` (`relu`, `sigmoid`, `tanh`, `gelu`, `softmax`,
# `log_softmax`), so module 05 can differentiate them without touching this notebook.

# %%
#| default_exp core.activations

# %%
#| export
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinytorch.core.tensor import Tensor, array_module, record_op

# %% [markdown]
# The lesson draws curves with matplotlib. Nothing is saved to disk; under a
# non-interactive backend (scripts run with `MPLBACKEND=Agg`) the figures are built and
# then closed.

# %%
import matplotlib

import matplotlib.pyplot as plt


def show(fig) -> None:
    """Display `fig` in Jupyter or a GUI; under a non-interactive backend just close it."""
    backend = matplotlib.get_backend().lower()
    if "agg" in backend and "inline" not in backend:
        plt.close(fig)
    else:
        plt.show()


# %% [markdown]
# First, the collapse in numbers: two random linear layers, and the single layer
# `W = W1 @ W2`, `b = b1 @ W2 + b2` that does exactly the same thing.

# %%
rng = np.random.default_rng(0)
x0 = Tensor(rng.standard_normal((4, 3)))
W1, b1 = Tensor(rng.standard_normal((3, 5))), Tensor(rng.standard_normal(5))
W2, b2 = Tensor(rng.standard_normal((5, 2))), Tensor(rng.standard_normal(2))
two_layers = (x0 @ W1 + b1) @ W2 + b2
one_layer = x0 @ (W1 @ W2) + (b1 @ W2 + b2)
print("two linear layers == one linear layer:", np.allclose(two_layers.numpy(), one_layer.numpy()))

# %% [markdown]
# ## 1. Two helpers: accepting arrays, and naming a dimension
#
# Every function here accepts a `Tensor` (the usual case) or anything `Tensor()`
# accepts (a list, a NumPy array). Softmax works along one dimension `dim`; like NumPy
# and PyTorch, `dim=-1` means the last one, and an out-of-range `dim` is an error that
# says what the valid range is.

# %%
#| export
def _as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _normalize_dim(dim: int, ndim: int, name: str) -> int:
    """`dim` (negative counts from the end) as a non-negative int, checked against `ndim`."""
    if ndim == 0:
        raise ValueError(f"{name} needs a tensor with at least 1 dimension, got a 0-d tensor.")
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"{name}: dim={dim} is out of range for a tensor with {ndim} dimension(s) "
            f"(valid: {-ndim} … {ndim - 1})."
        )
    return int(dim) % ndim


# %% [markdown]
# ## 2. ReLU: the default choice
#
# $$\mathrm{ReLU}(x) = \max(0, x), \qquad \mathrm{ReLU}'(x) = \begin{cases} 1 & x > 0 \\ 0 & x < 0 \end{cases}$$
#
# Range `[0, ∞)`. Cheap (one comparison), and its slope is exactly 1 for every positive
# input, so gradients pass through many layers without shrinking. The price: a unit
# whose input is negative for every example passes no gradient at all (a "dead" ReLU).
# At `x = 0` the derivative is undefined; frameworks (PyTorch and TinyTorch) use 0.
#
# The forward saves nothing: module 05's rule only needs the input's sign, and the
# input is already in `node.inputs`.

# %%
#| export
def relu(x: Tensor) -> Tensor:
    """max(0, x) elementwise; any shape, dtype kept. Records op "relu" (saves nothing)."""
    x = _as_tensor(x)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    return record_op("relu", xp.maximum(x.data, 0), (x,))
    ### END SOLUTION


# %%
def test_unit_relu():
    y = relu(Tensor([-2.0, -0.0, 0.0, 0.5, 3.0]))
    assert np.array_equal(y.numpy(), [0.0, 0.0, 0.0, 0.5, 3.0]) and y.dtype == np.float32
    assert relu(Tensor(np.array([-1.0, 2.0], dtype=np.float16))).dtype == np.float16
    w = Tensor([[-1.0, 1.0]], requires_grad=True)
    assert relu(w)._node.op == "relu" and relu(w)._node.inputs[0] is w
    print("✓ relu")


test_unit_relu()

# %% [markdown]
# ## 3. Sigmoid, without overflow
#
# $$\sigma(x) = \frac{1}{1 + e^{-x}}, \qquad \sigma'(x) = \sigma(x)\,(1 - \sigma(x))$$
#
# Range `(0, 1)`, so it reads as a probability; `σ(0) = 0.5` and `σ(-x) = 1 - σ(x)`. Its
# slope is at most `0.25` (at 0) and vanishes for large `|x|`, which is why deep stacks
# of sigmoids learn slowly.
#
# **The trap.** Written literally, `1 / (1 + exp(-x))` computes `exp(1000)` for
# `x = -1000`: that overflows to `inf` (float32 tops out near `3.4e38 ≈ e^88.7`), NumPy
# warns, and the result is only right by luck. The fix: never exponentiate a positive
# number. With `e = exp(-|x|)`, which lies in `(0, 1]`,
#
# * for `x ≥ 0`: `σ(x) = 1 / (1 + e)`,
# * for `x < 0`: `σ(x) = e^x / (1 + e^x) = e / (1 + e)`.
#
# Both branches are exact algebra, and neither can overflow.

# %%
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with np.errstate(over="warn"):
        naive = 1 / (1 + np.exp(-np.array([-1000.0, 0.0, 1000.0], dtype=np.float32)))
print("naive sigmoid:", naive, "| warnings:", [str(w.message) for w in caught])

# %% [markdown]
# The forward saves its output as `out`: the derivative `σ(1 - σ)` is cheaper from the
# output than from the input.

# %%
#| export
def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + e^-x) elementwise, computed from e^-|x| so it never overflows.

    Any shape, dtype kept. Records op "sigmoid" with saved `out` (the result array).
    """
    x = _as_tensor(x)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    e = xp.exp(-xp.abs(x.data))
    out = xp.where(x.data >= 0, 1 / (1 + e), e / (1 + e))
    return record_op("sigmoid", out, (x,), out=out)
    ### END SOLUTION


# %%
def test_unit_sigmoid():
    with np.errstate(over="raise", invalid="raise"):  # an overflow or nan would raise here
        y = sigmoid(Tensor([-1000.0, -1.0, 0.0, 1.0, 1000.0]))
    expected = [0.0, 1 / (1 + math.e), 0.5, 1 / (1 + math.exp(-1)), 1.0]
    assert np.allclose(y.numpy(), expected, atol=1e-7) and y.dtype == np.float32
    assert sigmoid(Tensor(np.array([-1000.0, 1000.0], dtype=np.float16))).numpy().tolist() == [0.0, 1.0]
    w = Tensor([0.0], requires_grad=True)
    node = sigmoid(w)._node
    assert node.op == "sigmoid" and np.array_equal(node.saved["out"], [0.5])
    print("✓ sigmoid (stable at ±1000)")


test_unit_sigmoid()

# %% [markdown]
# ## 4. Tanh
#
# $$\tanh(x) = \frac{e^{x} - e^{-x}}{e^{x} + e^{-x}} = 2\sigma(2x) - 1, \qquad \tanh'(x) = 1 - \tanh^2(x)$$
#
# Range `(-1, 1)`, centred at zero (a sigmoid stretched and shifted), with slope 1 at
# the origin. NumPy's `tanh` is already stable (it saturates to ±1 without computing
# `e^1000`), so the work here is recording the op and saving the output for the
# derivative `1 - out²`.

# %%
#| export
def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent elementwise; any shape, dtype kept. Records op "tanh", saved `out`."""
    x = _as_tensor(x)
    ### BEGIN SOLUTION
    out = array_module(x.data).tanh(x.data)
    return record_op("tanh", out, (x,), out=out)
    ### END SOLUTION


# %%
def test_unit_tanh():
    xs = np.array([-1000.0, -0.5, 0.0, 0.5, 1000.0], dtype=np.float32)
    y = tanh(Tensor(xs))
    assert np.allclose(y.numpy(), [-1.0, -0.46211716, 0.0, 0.46211716, 1.0])
    assert np.allclose(y.numpy(), 2 * sigmoid(Tensor(2 * xs)).numpy() - 1, atol=1e-6)
    w = Tensor([1.0], requires_grad=True)
    assert tanh(w)._node.op == "tanh" and np.allclose(tanh(w)._node.saved["out"], [math.tanh(1.0)])
    print("✓ tanh")


test_unit_tanh()

# %% [markdown]
# ## 5. GELU (tanh approximation)
#
# GELU weights each input by how likely a standard normal variable is to be below it:
# `GELU(x) = x · Φ(x)`, with `Φ` the normal CDF. Unlike ReLU it is smooth, and it dips
# slightly below zero (minimum ≈ -0.17 near `x ≈ -0.75`) before flattening to 0.
# GPT-2 and BERT use it.
#
# `Φ` needs the error function, which NumPy does not provide, so TinyTorch uses the
# **tanh approximation** (the one GPT-2 was trained with):
#
# $$\mathrm{GELU}(x) \approx \tfrac12\, x \left(1 + \tanh\!\left(\sqrt{2/\pi}\,(x + 0.044715\,x^3)\right)\right)$$
#
# This is exactly `torch.nn.functional.gelu(x, approximate="tanh")`; it differs from the
# exact erf form (PyTorch's default) by less than `5e-4` anywhere, measured below.
#
# Derivative, with `k = √(2/π)` and `t = tanh(k(x + 0.044715x³))`:
#
# $$\mathrm{GELU}'(x) = \tfrac12(1 + t) + \tfrac12\, x\,(1 - t^2)\, k\,(1 + 3 \cdot 0.044715\, x^2)$$
#
# The forward saves nothing; module 05's rule recomputes `t` from the input.
#
# For `|x|` large, `x³` can overflow in float16 (to ±inf); `tanh(±inf) = ±1`, so the
# result is still `x` or `0`, never `nan`.

# %%
#| export
GELU_COEFF = 0.044715
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).

    Equal to torch.nn.functional.gelu(x, approximate="tanh"). Any shape, dtype kept.
    Records op "gelu" (saves nothing).
    """
    x = _as_tensor(x)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    a = x.data
    with np.errstate(over="ignore"):  # float16 x**3 may overflow to inf; tanh(inf) = 1 is right
        inner = SQRT_2_OVER_PI * (a + GELU_COEFF * a * a * a)
    out = 0.5 * a * (1 + xp.tanh(inner))
    return record_op("gelu", out, (x,))
    ### END SOLUTION


# %%
grid = np.linspace(-6, 6, 2001)
exact = grid * 0.5 * (1 + np.vectorize(math.erf)(grid / math.sqrt(2)))  # lesson only: erf per point
approx = gelu(Tensor(grid)).numpy()
print(f"max |tanh-approximate GELU - exact GELU| on [-6, 6]: {np.abs(approx - exact).max():.2e}")
print(f"minimum of GELU: {approx.min():.4f} at x = {grid[approx.argmin()]:.3f}")

# %%
def test_unit_gelu():
    xs = np.array([-3.0, -1.0, 0.0, 1.0, 3.0])
    t = np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs**3))
    y = gelu(Tensor(xs))
    assert y.dtype == np.float64 and np.allclose(y.numpy(), 0.5 * xs * (1 + t), rtol=1e-12)
    assert abs(gelu(Tensor([1.0])).item() - 0.8411920071) < 1e-6
    half = gelu(Tensor(np.array([-1000.0, 1000.0], dtype=np.float16)))
    assert half.dtype == np.float16 and half.numpy().tolist() == [0.0, 1000.0]
    assert gelu(Tensor([2.0], requires_grad=True))._node.op == "gelu"
    print("✓ gelu (tanh approximation)")


test_unit_gelu()

# %% [markdown]
# ## 6. Softmax: scores into probabilities, stably
#
# $$\mathrm{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$
#
# Every output is in `(0, 1)` and they sum to 1 along `dim`: a probability
# distribution over classes (or, in module 12, over the words to attend to). The
# derivative is a matrix, `∂s_i/∂x_j = s_i(δ_ij - s_j)`; applied to an upstream gradient
# `g` it is `s · (g - Σ_j g_j s_j)`, which is why the forward saves its output `out`.
#
# **The trap.** `e^1000` is `inf` in every float type, so the textbook formula turns
# `[1000, 1001, 1002]` into `inf / inf = nan`. The fix is one line of algebra:
# multiplying top and bottom by `e^(-m)` changes nothing,
#
# $$\frac{e^{x_i}}{\sum_j e^{x_j}} = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},$$
#
# and with `m = max_j x_j` every exponent is `≤ 0`: no term exceeds 1, and the largest
# is exactly 1, so the sum is at least 1 and never 0.

# %%
big = np.array([1000.0, 1001.0, 1002.0], dtype=np.float32)
with np.errstate(all="ignore"):
    naive = np.exp(big) / np.exp(big).sum()
shifted = np.exp(big - big.max()) / np.exp(big - big.max()).sum()
print("naive   softmax([1000, 1001, 1002]) =", naive)
print("shifted softmax([1000, 1001, 1002]) =", np.round(shifted, 4), "= softmax([0, 1, 2])")

# %% [markdown]
# `dim` picks the axis the probabilities run along: for logits of shape `(batch,
# classes)` it is the last one (`dim=-1`, the default); softmax over `dim=0` would
# normalise each class across the batch instead, a classic bug.

# %%
#| export
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim` (negative allowed), shifted by the max: no overflow.

    Same shape and dtype as `x`; slices along `dim` sum to 1. Records op "softmax" with
    saved `dim` (non-negative int) and `out` (the result array).
    """
    x = _as_tensor(x)
    d = _normalize_dim(dim, x.ndim, "softmax")
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    shifted = x.data - xp.max(x.data, axis=d, keepdims=True)
    e = xp.exp(shifted)
    out = e / xp.sum(e, axis=d, keepdims=True)
    return record_op("softmax", out, (x,), dim=d, out=out)
    ### END SOLUTION


# %%
def test_unit_softmax():
    with np.errstate(over="raise", invalid="raise"):
        y = softmax(Tensor([1000.0, 1001.0, 1002.0]))
    assert np.allclose(y.numpy(), [0.09003057, 0.24472847, 0.66524096], atol=1e-6)
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    for dim in (0, 1, 2, -1, -2):
        s = softmax(Tensor(x), dim=dim).numpy()
        assert np.allclose(s.sum(axis=dim), 1.0) and s.dtype == np.float64
        assert np.allclose(s, np.exp(x) / np.exp(x).sum(axis=dim, keepdims=True))
    node = softmax(Tensor(x, requires_grad=True), dim=-2)._node
    assert node.op == "softmax" and node.saved["dim"] == 1 and node.saved["out"].shape == x.shape
    try:
        softmax(Tensor(x), dim=3)
    except ValueError as err:
        assert "dim=3" in str(err)
    else:
        raise AssertionError("dim=3 on a 3-d tensor must raise ValueError")
    print("✓ softmax (stable, any dim)")


test_unit_softmax()

# %% [markdown]
# ## 7. LogSoftmax: never take the log of a rounded-off zero
#
# $$\log\mathrm{softmax}(x)_i = x_i - \log\sum_j e^{x_j} = (x_i - m) - \log\sum_j e^{x_j - m}$$
#
# The second term is the **log-sum-exp**, computed with the same max shift as softmax.
# Why not just `log(softmax(x))`? Because a probability that rounds to 0 (anything
# below about `1e-45` in float32) turns into `log(0) = -inf`, although its true log is
# a perfectly ordinary number. Cross-entropy (module 04) takes exactly this log, so
# this matters for training:

# %%
logits = np.array([0.0, 200.0], dtype=np.float32)
with np.errstate(divide="ignore"):
    via_softmax = np.log(softmax(Tensor(logits)).numpy())
print("log(softmax([0, 200])) =", via_softmax)

# %%
#| export
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """log(softmax(x)) along `dim`, computed as (x - m) - log(sum(exp(x - m))), m = max.

    Same shape and dtype as `x`; finite for any finite input. Records op "log_softmax"
    with saved `dim` (non-negative int) and `out` (the result array).
    """
    x = _as_tensor(x)
    d = _normalize_dim(dim, x.ndim, "log_softmax")
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    shifted = x.data - xp.max(x.data, axis=d, keepdims=True)
    out = shifted - xp.log(xp.sum(xp.exp(shifted), axis=d, keepdims=True))
    return record_op("log_softmax", out, (x,), dim=d, out=out)
    ### END SOLUTION


# %%
print("log_softmax([0, 200])  =", log_softmax(Tensor(logits)).numpy())

# %%
def test_unit_log_softmax():
    y = log_softmax(Tensor([0.0, 200.0]))
    assert np.allclose(y.numpy(), [-200.0, 0.0]) and np.isfinite(y.numpy()).all()
    assert np.allclose(log_softmax(Tensor([1000.0, 1001.0, 1002.0])).numpy(),
                       np.log([0.09003057, 0.24472847, 0.66524096]), atol=1e-5)
    x = np.random.default_rng(1).standard_normal((3, 5))
    assert np.allclose(log_softmax(Tensor(x), dim=0).numpy(), np.log(softmax(Tensor(x), dim=0).numpy()))
    node = log_softmax(Tensor(x, requires_grad=True), dim=-1)._node
    assert node.op == "log_softmax" and node.saved["dim"] == 1
    print("✓ log_softmax")


test_unit_log_softmax()

# %% [markdown]
# ## 8. Seeing the curves and their slopes
#
# The derivatives below are the formulas from each section, checked against central
# differences `(f(x + h) - f(x - h)) / 2h` so that you can trust them when module 05
# turns them into backward rules.

# %%
xs = np.linspace(-5, 5, 401)


def sigmoid_slope(x):
    s = 1 / (1 + np.exp(-x))
    return s * (1 - s)


def gelu_slope(x):
    t = np.tanh(SQRT_2_OVER_PI * (x + GELU_COEFF * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * SQRT_2_OVER_PI * (1 + 3 * GELU_COEFF * x**2)


curves = {
    "ReLU": (relu, lambda x: (x > 0).astype(float)),
    "Sigmoid": (sigmoid, sigmoid_slope),
    "Tanh": (tanh, lambda x: 1 - np.tanh(x) ** 2),
    "GELU": (gelu, gelu_slope),
}
h = 1e-6
for name, (fn, slope) in curves.items():
    numeric = (fn(Tensor(xs + h)).numpy() - fn(Tensor(xs - h)).numpy()) / (2 * h)
    away_from_kink = np.abs(xs) > 1e-3
    error = np.abs(numeric - slope(xs))[away_from_kink].max()
    print(f"{name:8s} derivative formula vs central difference: max error {error:.1e}")

fig, (ax_f, ax_d) = plt.subplots(1, 2, figsize=(10, 4))
for name, (fn, slope) in curves.items():
    ax_f.plot(xs, fn(Tensor(xs)).numpy(), label=name)
    ax_d.plot(xs, slope(xs), label=name)
ax_f.set_title("activation f(x)")
ax_d.set_title("derivative f'(x)")
for ax in (ax_f, ax_d):
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.legend()
show(fig)

# %% [markdown]
# Softmax is not elementwise, so it gets its own picture: the probabilities of three
# classes as the score of class 0 moves while the others stay at 0. Raising one score
# takes probability from all the others; they always sum to 1.

# %%
scores = np.zeros((201, 3))
scores[:, 0] = np.linspace(-6, 6, 201)
probs = softmax(Tensor(scores)).numpy()
fig, ax = plt.subplots(figsize=(5, 3.5))
for k in range(3):
    ax.plot(scores[:, 0], probs[:, k], label=f"p(class {k})")
ax.set_xlabel("score of class 0 (others fixed at 0)")
ax.legend()
show(fig)
print("rows sum to 1:", np.allclose(probs.sum(-1), 1.0))

# %% [markdown]
# ## 9. Activations as layer objects
#
# Models are built from objects you call: `act = ReLU(); y = act(x)`. Module 03
# introduces `Module`, the base class of everything with parameters; an activation has
# none, so here a tiny base class `Activation` is enough: `__call__` runs `forward`. It
# also carries a `training` flag with `train()`/`eval()` and an empty `parameters()`,
# so that module 03's `Module`, `Sequential` and `ModuleList` accept activations as
# children like any layer.

# %%
#| export
class Activation:
    """Base of the activation layers: callable, no parameters, train/eval flag."""

    training: bool = True

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define forward(x).")

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def parameters(self) -> list:
        return []

    def named_parameters(self, prefix: str = "") -> list:
        return []

    def train(self, mode: bool = True) -> "Activation":
        self.training = bool(mode)
        return self

    def eval(self) -> "Activation":
        return self.train(False)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class ReLU(Activation):
    """max(0, x) elementwise (see `relu`)."""

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)


class Sigmoid(Activation):
    """1 / (1 + e^-x) elementwise, overflow-free (see `sigmoid`)."""

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)


class Tanh(Activation):
    """tanh(x) elementwise (see `tanh`)."""

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


class GELU(Activation):
    """GELU, tanh approximation (= torch.nn.GELU(approximate="tanh")); see `gelu`."""

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x)

    def extra_repr(self) -> str:
        return "approximate='tanh'"


class Softmax(Activation):
    """Softmax along `dim` (default -1, the last); see `softmax`."""

    def __init__(self, dim: int = -1):
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return softmax(x, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Activation):
    """Log-softmax along `dim` (default -1, the last); see `log_softmax`."""

    def __init__(self, dim: int = -1):
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return log_softmax(x, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


# %%
def test_unit_activation_layers():
    x = Tensor([[-1.0, 0.0, 2.0]])
    assert np.array_equal(ReLU()(x).numpy(), relu(x).numpy())
    assert np.array_equal(Sigmoid()(x).numpy(), sigmoid(x).numpy())
    assert np.array_equal(Tanh()(x).numpy(), tanh(x).numpy())
    assert np.array_equal(GELU()(x).numpy(), gelu(x).numpy())
    assert np.allclose(Softmax(dim=0)(x).numpy(), 1.0)
    assert np.allclose(LogSoftmax()(x).numpy(), log_softmax(x).numpy())
    layer = Softmax(dim=-2)
    assert repr(layer) == "Softmax(dim=-2)" and layer.parameters() == []
    assert layer.eval() is layer and not layer.training and layer.train().training
    print("✓ activation layers")


test_unit_activation_layers()

# %% [markdown]
# ## Summary
#
# * Without a nonlinearity, stacked linear layers collapse into one.
# * ReLU `max(0, x)`: slope 1 or 0; Sigmoid `(0, 1)` with slope `σ(1-σ) ≤ 0.25`; Tanh
#   `(-1, 1)` with slope `1 - tanh²`; GELU: smooth, here in its tanh approximation.
# * Exponentials overflow: compute sigmoid from `e^-|x|`, and shift softmax and
#   log-softmax by the maximum; `log(softmax(x))` is worse than `log_softmax(x)`.
# * Each function records one op (`relu`, `sigmoid`, `tanh`, `gelu`, `softmax`,
#   `log_softmax`); sigmoid, tanh, softmax and log-softmax save their output `out`,
#   softmax and log-softmax also `dim`, for module 05's backward rules.
