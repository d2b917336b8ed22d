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
# # Module 02: Activations
#
# > The bends that let stacked layers learn more than a straight line.
#
# **What you will be able to do** after this module:
#
# * explain, with numbers, why two linear layers without an activation are one layer;
# * write ReLU, Sigmoid, Tanh, GELU, Softmax and LogSoftmax as TinyTorch operations that
#   record themselves for autograd (module 05), saving exactly what their derivatives need;
# * state each activation's formula, range and derivative, and check a derivative
#   numerically;
# * make exponentials safe: `sigmoid(-1000)`, `softmax([1000, 1001, 1002])` and a float16
#   softmax over 70,000 classes all give the right finite numbers, not `nan`, `inf` or 0;
# * pick the dimension a softmax normalises over, and say what goes wrong with the other one.
#
# **Time:** about 2 hours: 75 minutes for the six functions and their tests, 45 for the
# measurements and the exercises at the end.
#
# **How to work through it.** Each section explains why, shows a worked example with
# printed numbers, then gives you a function to write between the `BEGIN SOLUTION` and
# `END SOLUTION` marker lines. The docstring of that function is its contract: everything the
# tests check is stated there or in the prose just above it. A `test_unit_*` check runs
# right after each function and prints one `✓` line when it passes. Where the lesson
# says **Predict, then run**, write your prediction down before running the cell.
#
# ## Why activations
#
# A layer computes `x @ W + b`. Stack two of them and you get
# `(x @ W1 + b1) @ W2 + b2 = x @ (W1 @ W2) + (b1 @ W2 + b2)`: one layer again. However
# deep a stack of linear maps is, it can only draw straight boundaries. An **activation
# function** applied elementwise between the layers breaks that collapse, and with it a
# network can approximate curved functions.
#
# | name | formula | range | used in |
# |---|---|---|---|
# | ReLU | `max(0, x)` | `[0, ∞)` | most hidden layers, CNNs |
# | Sigmoid | `1 / (1 + e^(-x))` | `(0, 1)` | probabilities of yes/no, gates |
# | Tanh | `(e^x - e^(-x)) / (e^x + e^(-x))` | `(-1, 1)` | RNNs, centred outputs |
# | GELU | `x · Φ(x)` (tanh approximation) | `≈ [-0.17, ∞)` | Transformers (GPT, BERT) |
# | Softmax | `e^(x_i) / Σ_j e^(x_j)` | `(0, 1)`, sums to 1 | class probabilities, attention |
# | LogSoftmax | `x_i - log Σ_j e^(x_j)` | `(-∞, 0]` | cross-entropy (module 04) |

# %%
#| default_exp core.activations

# %%
#| export
from __future__ import annotations

import math

import numpy as np

from tinytorch.core.tensor import Tensor, array_module, as_tensor, autocast_float32, record_op, to_host

# %% [markdown]
# The lesson draws curves with matplotlib. Under a non-interactive backend (scripts run
# with `MPLBACKEND=Agg`) the figures are saved as PNG files in your temporary folder (the
# path is printed) instead of being shown; in Jupyter they appear inline. The derivative checks use
# `central_difference` from `tinytorch.testing`, the course's one copy of numerical
# derivatives (module 05 builds its gradient checks on it).

# %% [markdown]
# Where a figure goes is decided in one place for the whole course: `pyplot()` (given code,
# exported to `tinytorch.plotting`) returns matplotlib's `pyplot` after choosing the
# file-only backend `Agg` where no window can open (a script on a Linux machine without a
# screen). In Jupyter, on a desktop, or when you set `MPLBACKEND` yourself, matplotlib's own
# choice stands. Every later lesson, plot function, milestone and benchmark gets `pyplot`
# from it.

# %%
#| export plotting
# Choosing matplotlib's backend: the one place TinyTorch does it. Given code, not a student exercise.
import os
import sys
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot, with the Agg backend (figures drawn into files) chosen first where no figure
    can be shown: on Linux without a screen (neither DISPLAY nor WAYLAND_DISPLAY), outside Jupyter (no
    ipykernel), when the user chose no backend (MPLBACKEND unset) and pyplot is not imported yet (a
    backend already in use is never switched). Everywhere else matplotlib's own choice stands."""
    import matplotlib

    headless = sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    chosen = "ipykernel" in sys.modules or os.environ.get("MPLBACKEND") or "matplotlib.pyplot" in sys.modules
    if headless and not chosen:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# %%
import tempfile
from pathlib import Path

import matplotlib

from tinytorch.testing import central_difference

plt = pyplot()


def show(fig, name: str) -> None:
    """Show `fig` in Jupyter or a GUI; under a non-interactive backend save it as a PNG in the temp folder."""
    backend = matplotlib.get_backend().lower()
    if "agg" in backend and "inline" not in backend:
        path = Path(tempfile.gettempdir()) / f"tinytorch_{name}.png"
        fig.savefig(path, dpi=80)
        print(f"(figure saved to {path})")
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
# ## 1. The contract every function here follows
#
# Every function accepts a `Tensor` (the usual case) or anything `Tensor()` accepts (a
# list, a NumPy array): `as_tensor` from module 01 turns the argument into a Tensor, and
# each function below starts with it (given code). Then it computes the result **as a
# raw array** with `xp = array_module(x.data)` (NumPy, or CuPy on a GPU: never call `np.`
# on the data) and returns it through module 01's `record_op`:
#
# ```python
# return record_op("op_name", result_array, (x,), name_of_saved_field=value, ...)
# ```
#
# `record_op` wraps the array in a Tensor and, when `x.requires_grad` is True, attaches a
# `Node` holding the op name, the inputs `(x,)` and the saved fields; module 05 looks the
# backward rule up by the op name and reads the saved fields by name. So the names below
# are part of the contract (you can inspect them as `y._node.op`, `y._node.inputs`,
# `y._node.saved`):
#
# | function | op name | inputs | saved fields | result |
# |---|---|---|---|---|
# | `relu(x)` | `"relu"` | `(x,)` | none | shape and dtype of `x` |
# | `sigmoid(x)` | `"sigmoid"` | `(x,)` | `out`: the result array | shape and dtype of `x` |
# | `tanh(x)` | `"tanh"` | `(x,)` | `out`: the result array | shape and dtype of `x` |
# | `gelu(x)` | `"gelu"` | `(x,)` | none | shape and dtype of `x` |
# | `softmax(x, dim)` | `"softmax"` | `(x,)` | `dim`: non-negative int; `out`: the result array | shape and dtype of `x` |
# | `log_softmax(x, dim)` | `"log_softmax"` | `(x,)` | `dim`: non-negative int; `out`: the result array | shape and dtype of `x` |
#
# Two rules hold for every one of them: **the result has the input's dtype** (float16
# in, float16 out; a float32 model must not silently become float64), and **the result
# is finite for every finite input**.
#
# Softmax works along one dimension `dim`; like NumPy and PyTorch, `dim=-1` means the
# last one. Checking the arguments of the softmax functions is given code, called on
# their first lines:
#
# * `_normalize_dim` turns a negative `dim` into the non-negative one (`-1` on a 3-d
#   tensor is `2`), and raises `ValueError` for a 0-d tensor or an out-of-range `dim`,
#   saying what the valid range is. Its result is the `dim` the softmax functions save.
# * `_check_floating` raises `TypeError` for an integer tensor: probabilities are
#   fractions, and cast back to an integer dtype they would all be 0.

# %%
#| export
def _check_floating(x: Tensor, name: str) -> None:
    """TypeError unless x holds floating-point numbers (float16, float32 or float64)."""
    if x.dtype.kind != "f":
        raise TypeError(f"{name} needs a floating-point tensor, got dtype {x.dtype}: "
                        f"convert it first, e.g. Tensor(values, dtype=np.float32).")


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


# %%
print("dim=-1 on a 3-d tensor is", _normalize_dim(-1, 3, "softmax"), "; dim=-3 is", _normalize_dim(-3, 3, "softmax"))
try:
    _normalize_dim(3, 3, "softmax")
except ValueError as err:
    print("ValueError:", err)

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
# Worked example: `relu([-2, -0.5, 0, 0.5, 3]) = [0, 0, 0, 0.5, 3]`.
#
# The forward **saves nothing**: module 05's rule only needs the input's sign, and the
# input is already in `node.inputs`. Keep the input's dtype: compare with the Python
# number `0` (an array of zeros in float64 would upcast a float32 input).

# %%
#| export
def relu(x: Tensor) -> Tensor:
    """max(0, x) elementwise.

    x: a Tensor (or list/array) of any shape. Returns the same shape and dtype.
    Records op "relu" with inputs (x,) and saves nothing.
    """
    x = as_tensor(x)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    return record_op("relu", xp.maximum(x.data, 0), (x,))
    ### END SOLUTION


# %%
def test_unit_relu():
    y = relu(Tensor([-2.0, -0.5, 0.0, 0.5, 3.0]))
    assert np.array_equal(y.numpy(), [0.0, 0.0, 0.0, 0.5, 3.0]), \
        f"relu([-2, -0.5, 0, 0.5, 3]): expected [0, 0, 0, 0.5, 3] (negatives become 0), got {y.numpy().tolist()}"
    assert y.dtype == np.float32, f"relu of float32 must stay float32, got {y.dtype}: compare with 0, not 0.0 in float64"
    half = relu(Tensor(np.array([-1.0, 2.0], dtype=np.float16))).dtype
    assert half == np.float16, f"relu of float16 must stay float16, got {half}"
    w = Tensor([[-1.0, 1.0]], requires_grad=True)
    node = relu(w)._node
    assert node is not None and node.op == "relu" and node.inputs[0] is w and node.saved == {}, \
        f"relu must record op 'relu' with inputs (x,) and save nothing (record_op), got {node and (node.op, node.saved)}"
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
# `x = -1000`: float32 tops out near `3.4e38 ≈ e^88.7`, so that is an overflow.
#
# **Predict, then run.** What does the literal formula return for `x = -1000, 0, 1000`
# in float32, and does NumPy complain? Write it down, then run the cell.

# %%
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with np.errstate(over="warn"):
        naive = 1 / (1 + np.exp(-np.array([-1000.0, 0.0, 1000.0], dtype=np.float32)))
print("naive sigmoid:", naive, "| warnings:", [str(w.message) for w in caught])

# %% [markdown]
# The answer `0` is right only by luck (`1 / (1 + inf) = 0`), and the warning is a bug
# report: in a loss, in float16, or in the derivative, the same `inf` becomes `nan`. The
# fix: never exponentiate a positive number. With `e = exp(-|x|)`, which lies in `(0, 1]`,
#
# * for `x ≥ 0`: `σ(x) = 1 / (1 + e)`,
# * for `x < 0`: `σ(x) = e^x / (1 + e^x) = e / (1 + e)`.
#
# Both branches are exact algebra, and neither can overflow. `xp.where(cond, a, b)` picks
# per element. Worked example: `σ(-1) = e^-1 / (1 + e^-1) = 0.2689`, `σ(1) = 0.7311`.
#
# The forward **saves its output as `out`**: the derivative `σ(1 - σ)` is cheaper from
# the output than from the input.

# %%
#| export
def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + e^-x) elementwise, computed from e^-|x| so that nothing overflows.

    x: a Tensor (or list/array) of any shape. Returns the same shape and dtype, values in
    [0, 1]; no overflow warning for any finite input (e.g. ±1000).
    Records op "sigmoid" with inputs (x,) and saves `out`: the result array.
    """
    x = as_tensor(x)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    e = xp.exp(-xp.abs(x.data))
    out = xp.where(x.data >= 0, 1 / (1 + e), e / (1 + e))
    return record_op("sigmoid", out, (x,), out=out)
    ### END SOLUTION


# %%
def test_unit_sigmoid():
    try:
        with np.errstate(over="raise", invalid="raise"):  # an overflow or nan would raise here
            y = sigmoid(Tensor([-1000.0, -1.0, 0.0, 1.0, 1000.0]))
    except FloatingPointError as err:
        raise AssertionError(f"sigmoid([-1000, ..., 1000]) overflowed ({err}): e^1000 is inf; never exponentiate a "
                             "positive number: use e^-|x| and pick the formula by the sign of x") from None
    expected = [0.0, 1 / (1 + math.e), 0.5, 1 / (1 + math.exp(-1)), 1.0]
    assert np.allclose(y.numpy(), expected, atol=1e-7), \
        f"sigmoid([-1000, -1, 0, 1, 1000]): expected {np.round(expected, 5).tolist()}, got {y.numpy().round(5).tolist()}"
    assert y.dtype == np.float32, f"sigmoid of float32 must stay float32, got {y.dtype}"
    half = sigmoid(Tensor(np.array([-1000.0, 1000.0], dtype=np.float16))).numpy().tolist()
    assert half == [0.0, 1.0], f"float16 sigmoid([-1000, 1000]) must be [0, 1], got {half}: use the stable form"
    w = Tensor([0.0], requires_grad=True)
    node = sigmoid(w)._node
    assert node is not None and node.op == "sigmoid", f"sigmoid must record op 'sigmoid', got {node and node.op!r}"
    assert np.array_equal(node.saved.get("out"), [0.5]), \
        f"sigmoid must save out, its result (0.5 at 0): the backward rule uses σ(1 - σ); saved {sorted(node.saved)}"
    print("✓ sigmoid (stable at ±1000)")


test_unit_sigmoid()

# %% [markdown]
# ## 4. Tanh
#
# $$\tanh(x) = \frac{e^{x} - e^{-x}}{e^{x} + e^{-x}} = 2\sigma(2x) - 1, \qquad \tanh'(x) = 1 - \tanh^2(x)$$
#
# Range `(-1, 1)`, centred at zero (a sigmoid stretched and shifted), with slope 1 at
# the origin. NumPy's `tanh` is already stable (it saturates to ±1 without computing
# `e^1000`), so the work here is recording the op and **saving the output as `out`**
# for the derivative `1 - out²`. Worked example: `tanh(0.5) = 0.4621`.

# %%
#| export
def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent elementwise.

    x: a Tensor (or list/array) of any shape. Returns the same shape and dtype, values in [-1, 1].
    Records op "tanh" with inputs (x,) and saves `out`: the result array.
    """
    x = as_tensor(x)
    ### BEGIN SOLUTION
    out = array_module(x.data).tanh(x.data)
    return record_op("tanh", out, (x,), out=out)
    ### END SOLUTION


# %%
def test_unit_tanh():
    xs = np.array([-1000.0, -0.5, 0.0, 0.5, 1000.0], dtype=np.float32)
    y = tanh(Tensor(xs))
    assert np.allclose(y.numpy(), [-1.0, -0.46211716, 0.0, 0.46211716, 1.0]), \
        f"tanh([-1000, -0.5, 0, 0.5, 1000]): expected [-1, -0.46212, 0, 0.46212, 1], got {y.numpy().round(5).tolist()}"
    assert y.dtype == np.float32, f"tanh of float32 must stay float32, got {y.dtype}"
    via_sigmoid = 2 * sigmoid(Tensor(2 * xs)).numpy() - 1
    assert np.allclose(y.numpy(), via_sigmoid, atol=1e-6), \
        f"tanh(x) must equal 2·sigmoid(2x) - 1, got {y.numpy().round(5).tolist()} against {via_sigmoid.round(5).tolist()}"
    w = Tensor([1.0], requires_grad=True)
    node = tanh(w)._node
    assert node is not None and node.op == "tanh", f"tanh must record op 'tanh', got {node and node.op!r}"
    assert np.allclose(node.saved.get("out", np.nan), [math.tanh(1.0)]), \
        f"tanh must save out, its result (tanh(1) = {math.tanh(1.0):.5f}); saved {sorted(node.saved)}"
    print("✓ tanh")


test_unit_tanh()

# %% [markdown]
# ## 5. GELU (tanh approximation)
#
# GELU weights each input by how likely a standard normal variable is to be below it:
# `GELU(x) = x · Φ(x)`, with `Φ` the normal CDF. Unlike ReLU it is smooth, and it dips
# slightly below zero before flattening to 0. GPT-2 and BERT use it.
#
# `Φ` needs the error function, which NumPy does not provide, so TinyTorch uses the
# **tanh approximation** (the one GPT-2 was trained with):
#
# $$\mathrm{GELU}(x) \approx \tfrac12\, x \left(1 + \tanh\!\left(\sqrt{2/\pi}\,(x + 0.044715\,x^3)\right)\right)$$
#
# The two constants are given below as `SQRT_2_OVER_PI` (`√(2/π) ≈ 0.79788`, not
# `√(2π)`) and `GELU_COEFF` (`0.044715`). This is exactly
# `torch.nn.functional.gelu(x, approximate="tanh")`. Two other formulas go by the same
# name and are **not** this one: the exact `x·Φ(x)` (PyTorch's default) and the cruder
# `x·σ(1.702x)`.
#
# Derivative, with `k = √(2/π)` and `t = tanh(k(x + 0.044715x³))`:
#
# $$\mathrm{GELU}'(x) = \tfrac12(1 + t) + \tfrac12\, x\,(1 - t^2)\, k\,(1 + 3 \cdot 0.044715\, x^2)$$
#
# The forward **saves nothing**; module 05's rule recomputes `t` from the input.
#
# Worked example: `GELU(1) = 0.5 · (1 + tanh(0.79788 · 1.044715)) = 0.5 · (1 + 0.68239) = 0.84119`.
#
# For `|x|` large, `x³` can overflow in float16 (to ±inf); `tanh(±inf) = ±1`, so the
# result is still `x` or `0`, never `nan` (wrap the cube in `np.errstate(over="ignore")`
# to keep NumPy quiet about it).

# %%
#| export
GELU_COEFF = 0.044715
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).

    Equal to torch.nn.functional.gelu(x, approximate="tanh") (not the exact erf form).
    x: a Tensor (or list/array) of any shape. Returns the same shape and dtype.
    Records op "gelu" with inputs (x,) and saves nothing.
    """
    x = as_tensor(x)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    a = x.data
    with np.errstate(over="ignore"):  # float16 x**3 may overflow to inf; tanh(inf) = 1 is right
        inner = SQRT_2_OVER_PI * (a + GELU_COEFF * a * a * a)
    out = 0.5 * a * (1 + xp.tanh(inner))
    return record_op("gelu", out, (x,))
    ### END SOLUTION


# %%
def test_unit_gelu():
    xs = np.array([-3.0, -1.0, 0.0, 1.0, 3.0])
    t = np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs**3))
    y = gelu(Tensor(xs))
    assert y.dtype == np.float64, f"gelu of float64 must stay float64, got {y.dtype}"
    if not np.allclose(y.numpy(), 0.5 * xs * (1 + t), rtol=1e-12):
        erf = np.vectorize(math.erf)
        other_formulas = {
            "this is the exact (erf) GELU, x·Φ(x); the lesson asks for the tanh approximation":
                0.5 * xs * (1 + erf(xs / math.sqrt(2))),
            "this is the sigmoid approximation x·σ(1.702x), not the tanh approximation": xs / (1 + np.exp(-1.702 * xs)),
            "√(2π) where the formula has √(2/π): check the constants (SQRT_2_OVER_PI, GELU_COEFF)":
                0.5 * xs * (1 + np.tanh(math.sqrt(2 * math.pi) * (xs + 0.044715 * xs**3)))}
        cause = next((c for c, wrong in other_formulas.items() if np.allclose(y.numpy(), wrong, rtol=1e-6)),
                     "close, but not equal: check the constants √(2/π) ≈ 0.79788 and 0.044715 (SQRT_2_OVER_PI, "
                     "GELU_COEFF)" if np.allclose(y.numpy(), 0.5 * xs * (1 + t), atol=1e-3) else
                     "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the tanh approximation GPT-2 uses")
        raise AssertionError(f"gelu([-3, -1, 0, 1, 3]): expected {(0.5 * xs * (1 + t)).round(6).tolist()}, got "
                             f"{y.numpy().round(6).tolist()}: {cause}")
    one = gelu(Tensor([1.0])).item()
    assert abs(one - 0.8411920071) < 1e-6, f"gelu(1) must be 0.8411920 (the tanh approximation), got {one:.7f}"
    half = gelu(Tensor(np.array([-1000.0, 1000.0], dtype=np.float16)))
    assert half.dtype == np.float16 and half.numpy().tolist() == [0.0, 1000.0], (
        f"float16 gelu([-1000, 1000]) must be [0, 1000] in float16, got {half.numpy().tolist()} {half.dtype}: x³ "
        "overflows float16, so compute in float32 and cast back")
    node = gelu(Tensor([2.0], requires_grad=True))._node
    assert node is not None and node.op == "gelu" and node.saved == {}, \
        f"gelu must record op 'gelu' and save nothing, got {node and (node.op, sorted(node.saved))}"
    print("✓ gelu (tanh approximation)")


test_unit_gelu()

# %% [markdown]
# **Predict, then run.** How far apart are the tanh approximation and the exact
# `x·Φ(x)` at worst on `[-6, 6]`: `1e-2`, `1e-4` or `1e-8`? And where is GELU's minimum?

# %%
grid = np.linspace(-6, 6, 2001)
exact = grid * 0.5 * (1 + np.vectorize(math.erf)(grid / math.sqrt(2)))  # lesson only: erf per point
approx = to_host(gelu(Tensor(grid)))
print(f"max |tanh-approximate GELU - exact GELU| on [-6, 6]: {np.abs(approx - exact).max():.2e}")
print(f"minimum of GELU: {approx.min():.4f} at x = {grid[approx.argmin()]:.3f}")

# %% [markdown]
# ## 6. Softmax: scores into probabilities, stably
#
# $$\mathrm{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$
#
# Every output is in `(0, 1)` and they sum to 1 along `dim`: a probability
# distribution over classes (or, in module 12, over the words to attend to). The
# derivative is a matrix, `∂s_i/∂x_j = s_i(δ_ij - s_j)`; applied to an upstream gradient
# `g` it is `s · (g - Σ_j g_j s_j)`, which is why the forward saves its output `out`
# (and `dim`, the axis of that sum).
#
# **The trap.** `e^1000` is `inf` in every float type, so the textbook formula turns
# `[1000, 1001, 1002]` into `inf / inf = nan`. The fix is one line of algebra:
# multiplying top and bottom by `e^(-m)` changes nothing,
#
# $$\frac{e^{x_i}}{\sum_j e^{x_j}} = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},$$
#
# and with `m = max_j x_j` every exponent is `≤ 0`: no term exceeds 1, and the largest
# is exactly 1, so the sum is at least 1 and never 0.
#
# **Predict, then run.** What does the textbook formula give for `[1000, 1001, 1002]`?
# And the shifted one? (Hint: the shifted input is `[-2, -1, 0]`.)

# %%
big = np.array([1000.0, 1001.0, 1002.0], dtype=np.float32)
with np.errstate(all="ignore"):
    naive = np.exp(big) / np.exp(big).sum()
shifted = np.exp(big - big.max()) / np.exp(big - big.max()).sum()
print("naive   softmax([1000, 1001, 1002]) =", naive)
print("shifted softmax([1000, 1001, 1002]) =", np.round(shifted, 4), "= softmax([0, 1, 2])")

# %% [markdown]
# ### Which axis: `dim`, and keeping it
#
# `dim` picks the axis the probabilities run along: for logits of shape `(batch,
# classes)` it is the last one (`dim=-1`, the default). Softmax over `dim=0` would
# normalise each class across the batch instead, a classic bug.
#
# The max and the sum are taken **along `dim` with `keepdims=True`**, so that they keep
# a size-1 axis there and broadcast back against `x`. Without it a `(3, 3)` matrix minus
# its row maxima of shape `(3,)` subtracts `m_j` from **column** `j`: no error, just a
# wrong answer (and on a `(2, 3)` matrix, a broadcasting error).
#
# **Predict, then run.** In the matrix below, which rows come out right without
# `keepdims`, and which come out wrong?

# %%
square = np.array([[0.0, 1.0, 2.0], [10.0, 10.0, 10.0], [5.0, 0.0, 0.0]])
kept = square - square.max(axis=-1, keepdims=True)
lost = square - square.max(axis=-1)
print("max along the rows, keepdims=True (each row shifted by its own max):\n", kept)
print("max along the rows, keepdims lost (column j shifted by row j's max):\n", lost)

# %% [markdown]
# ### float16: when the sum itself overflows
#
# Subtracting the max keeps every term `≤ 1`, but the **sum** can still be too big for
# the type: float16's largest finite number is 65,504. A softmax over 70,000 classes with
# equal logits adds 70,000 ones: `inf` in float16, and every probability becomes
# `1 / inf = 0`. (Language models have vocabularies this big: 50,257 for GPT-2, 128,000
# for Llama 3.)
#
# **Predict, then run.** What is `sum(exp(0))` over 70,000 float16 zeros, computed in
# float16? And in float32?

# %%
ones16 = np.exp(np.zeros(70_000, dtype=np.float16))
with np.errstate(over="ignore"):
    print("float16 sum of 70,000 ones:", ones16.sum(), "| float32 sum:", ones16.sum(dtype=np.float32))

# %% [markdown]
# Each probability, `1/70000 ≈ 1.4e-5`, fits in float16; only the running sum does not.
# So the rule is: **compute in at least float32, return the input's dtype**. The working
# dtype is `np.promote_types(x.dtype, np.float32)`: float32 for a float16 input, and the
# input's own dtype for float32 and float64 (so they are not copied or upcast). Convert
# with `array.astype(work_dtype, copy=False)` going in, and `.astype(x.dtype, copy=False)`
# coming out. (`np.promote_types` only looks at dtypes, so it is safe on GPU data too.)
#
# Now write softmax. It records op `"softmax"` with inputs `(x,)`, and saves `dim` (the
# normalised, non-negative int `d` that the given first lines compute, not the caller's
# `-1`) and `out` (the very array it returns, in the input's dtype).

# %%
#| export
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, computed as exp(x - max) / sum(exp(x - max)).

    x: a Tensor (or list/array) with at least 1 dimension; dim: the axis to normalise
    (negative counts from the end). Returns the same shape and dtype as x; the slices
    along dim sum to 1; finite for any finite input. float16 is computed in float32 (the
    sum of 70,000 ones overflows float16) and returned as float16 (as float32 inside module
    17's autocast: the given first line casts x up).
    Raises (given code) TypeError for an integer x, ValueError for a 0-d x or an
    out-of-range dim.
    Records op "softmax" with inputs (x,) and saves `dim` (the non-negative int d) and
    `out` (the result array).
    """
    x = autocast_float32(as_tensor(x))  # given: float32 under module 17's autocast, else x itself
    _check_floating(x, "softmax")
    d = _normalize_dim(dim, x.ndim, "softmax")
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    work = x.data.astype(np.promote_types(x.dtype, np.float32), copy=False)
    shifted = work - xp.max(work, axis=d, keepdims=True)  # a new array: safe to reuse below
    e = xp.exp(shifted, out=shifted)
    e /= xp.sum(e, axis=d, keepdims=True)
    out = e.astype(x.dtype, copy=False)
    return record_op("softmax", out, (x,), dim=d, out=out)
    ### END SOLUTION


# %%
def test_unit_softmax():
    caller = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0], [0.0, 0.0, 1.0]])
    kept = caller.copy()
    softmax(Tensor(caller))
    assert np.array_equal(caller, kept), ("softmax changed its input in place: it subtracted the max from x.data; work "
                                          f"on a new array (got {caller.tolist()})")
    try:
        with np.errstate(over="raise", invalid="raise"):
            y = softmax(Tensor([1000.0, 1001.0, 1002.0]))
    except FloatingPointError as err:
        raise AssertionError(f"softmax([1000, 1001, 1002]) overflowed ({err}): subtract the max along dim before "
                             "exponentiating, so that every exponent is <= 0") from None
    assert np.allclose(y.numpy(), [0.09003057, 0.24472847, 0.66524096], atol=1e-6), (
        f"softmax([1000, 1001, 1002]): expected [0.09003, 0.24473, 0.66524], got {y.numpy().round(5).tolist()}: "
        "subtract the maximum before exp (exp(1000) overflows)")
    assert y.dtype == np.float32, f"softmax of float32 must stay float32, got {y.dtype}"
    square = np.array([[0.0, 1.0, 2.0], [10.0, 10.0, 10.0], [5.0, 0.0, 0.0]])
    rows = softmax(Tensor(square)).numpy()
    if not (np.allclose(rows[1], 1 / 3) and np.allclose(rows[0], [0.09003057, 0.24472847, 0.66524096])):
        shifted = np.exp(square - square.max(axis=-1))  # the max without keepdims: column j shifted by row j's max
        candidates = (shifted / shifted.sum(axis=-1, keepdims=True), shifted / shifted.sum(axis=-1))
        cause = ("the max (or the sum) along dim lost keepdims=True: a (3,) row of maxima lines up with the columns of "
                 "a (3, 3) matrix, so column j is shifted by row j's max"
                 if any(np.allclose(rows, wrong) for wrong in candidates) else
                 "normalise each row along dim (the last axis) by its own max and sum")
        raise AssertionError(f"softmax of a (3, 3) matrix, row by row: expected [0.09003, 0.24473, 0.66524] and "
                             f"[1/3, 1/3, 1/3] for the first two rows, got {rows[:2].round(5).tolist()}: {cause}")
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    for dim in (0, 1, 2, -1, -2):
        s = softmax(Tensor(x), dim=dim).numpy()
        assert s.dtype == np.float64, f"softmax of float64 must stay float64, got {s.dtype}"
        assert np.allclose(s.sum(axis=dim), 1.0), \
            f"softmax(dim={dim}) must sum to 1 along dim {dim}, got sums {s.sum(axis=dim).ravel()[:3].round(4)} ...: normalise along dim"
        assert np.allclose(s, np.exp(x) / np.exp(x).sum(axis=dim, keepdims=True)), f"softmax(dim={dim}) gives wrong values"
    half = softmax(Tensor(np.zeros((2, 70_000), dtype=np.float16)))
    total = half.numpy().astype(np.float64).sum(axis=-1)
    assert half.dtype == np.float16 and np.allclose(total, 1.0, atol=1e-2), (
        f"float16 softmax over 70,000 classes must sum to 1 and stay float16, got sums {total} ({half.dtype}): the sum "
        "of 70,000 float16 numbers overflows: compute in float32, return float16")
    node = softmax(Tensor(x, requires_grad=True), dim=-2)._node
    assert node is not None and node.op == "softmax", f"softmax must record op 'softmax', got {node and node.op!r}"
    assert node.saved.get("dim") == 1 and getattr(node.saved.get("out"), "shape", None) == x.shape, (
        f"softmax(dim=-2) on 3-D must save dim=1 (non-negative) and out (x's shape); saved dim={node.saved.get('dim')!r}, "
        f"out of shape {getattr(node.saved.get('out'), 'shape', None)}")
    try:
        softmax(Tensor(x), dim=3)
    except ValueError as err:
        assert "dim=3" in str(err), f"the ValueError for dim=3 must name it ('dim=3'), it says: {err}"
    else:
        raise AssertionError("dim=3 on a 3-d tensor must raise ValueError")
    print("✓ softmax (stable, any dim, float16 over 70,000 classes)")


test_unit_softmax()

# %% [markdown]
# ## 7. LogSoftmax: never take the log of a rounded-off zero
#
# $$\log\mathrm{softmax}(x)_i = x_i - \log\sum_j e^{x_j} = (x_i - m) - \log\sum_j e^{x_j - m}$$
#
# The second term is the **log-sum-exp**, computed with the same max shift as softmax
# (and, for float16, in float32 like softmax). Range `(-∞, 0]`. Why not just
# `log(softmax(x))`? Because a probability that rounds to 0 (anything below about
# `1e-45` in float32) turns into `log(0) = -inf`, although its true log is a perfectly
# ordinary number. Cross-entropy (module 04) takes exactly this log, so this matters for
# training.
#
# **Predict, then run.** `softmax([0, 200])` in float32 is `[e^-200, 1]` up to rounding.
# What does `log` of it give, and what should the answer be?

# %%
logits = np.array([0.0, 200.0], dtype=np.float32)
with np.errstate(divide="ignore"):
    via_softmax = np.log(to_host(softmax(Tensor(logits))))
print("log(softmax([0, 200])) =", via_softmax, "  (true answer: [-200, 0])")

# %% [markdown]
# Write log-softmax. It records op `"log_softmax"` with inputs `(x,)` and saves `dim`
# (non-negative int) and `out` (the result array, the log-probabilities; module 05 gets
# the probabilities back as `exp(out)`).

# %%
#| export
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """log(softmax(x)) along `dim`, computed as (x - m) - log(sum(exp(x - m))), m = max.

    x: a Tensor (or list/array) with at least 1 dimension; dim: the axis (negative counts
    from the end). Returns the same shape and dtype as x, values ≤ 0; finite for any
    finite input (never log of a rounded-off 0). float16 is computed in float32 and
    returned as float16 (as float32 inside module 17's autocast: the given first line
    casts x up).
    Raises (given code) TypeError for an integer x, ValueError for a 0-d x or an
    out-of-range dim.
    Records op "log_softmax" with inputs (x,) and saves `dim` (the non-negative int d)
    and `out` (the result array).
    """
    x = autocast_float32(as_tensor(x))  # given: float32 under module 17's autocast, else x itself
    _check_floating(x, "log_softmax")
    d = _normalize_dim(dim, x.ndim, "log_softmax")
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    work = x.data.astype(np.promote_types(x.dtype, np.float32), copy=False)
    shifted = work - xp.max(work, axis=d, keepdims=True)
    shifted -= xp.log(xp.sum(xp.exp(shifted), axis=d, keepdims=True))
    out = shifted.astype(x.dtype, copy=False)
    return record_op("log_softmax", out, (x,), dim=d, out=out)
    ### END SOLUTION


# %%
print("log_softmax([0, 200])  =", to_host(log_softmax(Tensor(logits))))

# %%
def test_unit_log_softmax():
    y = log_softmax(Tensor([0.0, 200.0]))
    assert np.allclose(y.numpy(), [-200.0, 0.0]) and np.isfinite(y.numpy()).all(), (
        f"log_softmax([0, 200]): expected [-200, 0], got {y.numpy().tolist()}: x - max - log(Σ exp(x - max)); "
        "log(softmax(x)) gives log(0) = -inf")
    assert y.dtype == np.float32, f"log_softmax of float32 must stay float32, got {y.dtype}"
    big = log_softmax(Tensor([1000.0, 1001.0, 1002.0])).numpy()
    assert np.allclose(big, np.log([0.09003057, 0.24472847, 0.66524096]), atol=1e-5), \
        f"log_softmax([1000, 1001, 1002]): expected [-2.40761, -1.40761, -0.40761], got {big.round(5).tolist()}"
    x = np.random.default_rng(1).standard_normal((3, 5))
    along_0 = log_softmax(Tensor(x), dim=0).numpy()
    assert np.allclose(along_0, np.log(softmax(Tensor(x), dim=0).numpy())), \
        "log_softmax(dim=0) must equal log(softmax(dim=0)): normalise along the dim it is given"
    half = log_softmax(Tensor(np.zeros(70_000, dtype=np.float16)))
    assert half.dtype == np.float16 and np.allclose(half.numpy()[:3], -math.log(70_000), atol=1e-2), (
        f"float16 log_softmax over 70,000 equal logits: expected -ln(70000) = {-math.log(70_000):.3f} in float16, got "
        f"{half.numpy()[:3].tolist()} ({half.dtype}): compute in float32, return float16")
    y = log_softmax(Tensor(x, requires_grad=True), dim=-1)
    assert y._node is not None and y._node.op == "log_softmax" and y._node.saved.get("dim") == 1, \
        f"log_softmax(dim=-1) on 2-D must record op 'log_softmax' with saved dim=1, got {y._node and (y._node.op, y._node.saved.get('dim'))}"
    assert np.array_equal(y._node.saved.get("out"), y.numpy()), "log_softmax must save out, its result"
    print("✓ log_softmax")


test_unit_log_softmax()

# %% [markdown]
# ## 8. Seeing the curves and their slopes
#
# The derivatives below are the formulas from each section, checked against central
# differences `(f(x + h) - f(x - h)) / 2h` computed on **your** functions with
# `tinytorch.testing.central_difference`. Module 05 turns these formulas into backward
# rules; here you confirm them first.
#
# **Predict, then run.** Which activation's formula will disagree most with the
# numerical slope, and at which `x`? (Think about where a function has a kink.)

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
for name, (fn, slope) in curves.items():
    # Elementwise f: the derivative of sum(f(x)) with respect to x_i is f'(x_i).
    numeric = central_difference(lambda v, fn=fn: float(fn(Tensor(v)).numpy().sum()), xs)
    error = np.abs(numeric - slope(xs))
    print(f"{name:8s} formula vs central difference: max error {error.max():.1e} at x = {xs[error.argmax()]:+.3f}")

fig, (ax_f, ax_d) = plt.subplots(1, 2, figsize=(10, 4))
for name, (fn, slope) in curves.items():
    ax_f.plot(xs, to_host(fn(Tensor(xs))), label=name)
    ax_d.plot(xs, slope(xs), label=name)
ax_f.set_title("activation f(x)")
ax_d.set_title("derivative f'(x)")
for ax in (ax_f, ax_d):
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.legend()
show(fig, "activation_curves")

# %% [markdown]
# (At `x = 0` ReLU has a kink: the central difference straddles it and returns `0.5`,
# while the rule uses 0. Everywhere else the formulas agree to better than `1e-7`, the
# rounding error of a central difference of a 401-term sum with `h = 1e-6`.)
#
# Softmax is not elementwise, so it gets its own picture: the probabilities of three
# classes as the score of class 0 moves while the others stay at 0. Raising one score
# takes probability from all the others; they always sum to 1.

# %%
scores = np.zeros((201, 3))
scores[:, 0] = np.linspace(-6, 6, 201)
probs = to_host(softmax(Tensor(scores)))
fig, ax = plt.subplots(figsize=(5, 3.5))
for k in range(3):
    ax.plot(scores[:, 0], probs[:, k], label=f"p(class {k})")
ax.set_xlabel("score of class 0 (others fixed at 0)")
ax.legend()
show(fig, "softmax_curves")
print("rows sum to 1:", np.allclose(probs.sum(-1), 1.0))

# %% [markdown]
# ## 9. What they cost
#
# Everything here is elementwise or one pass along an axis, so time grows linearly with
# the number of elements. The constants differ: ReLU is one comparison per element,
# softmax a max, a subtraction, an exponential, a sum and a division. Memory matters
# as much: what a forward saves stays alive until backward. ReLU saves nothing; softmax
# saves an array as big as its input.
#
# **Predict, then run.** On a `(1024, 1024)` float32 input, how many times slower is
# your softmax than your relu: 2×, 5× or 20×? How many MB does softmax keep in
# `node.saved` for backward?

# %%
import time

big_input = Tensor(np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32), requires_grad=True)


def seconds(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):  # the best of a few runs: the least disturbed by other programs
        start = time.perf_counter()
        fn(big_input)
        best = min(best, time.perf_counter() - start)
    return best


t_relu, t_softmax = seconds(relu), seconds(softmax)
saved_bytes = sum(v.nbytes for v in softmax(big_input)._node.saved.values() if hasattr(v, "nbytes"))
print(f"relu {t_relu * 1e3:.2f} ms, softmax {t_softmax * 1e3:.2f} ms: softmax/relu = {t_softmax / t_relu:.1f}×")
print(f"softmax keeps {saved_bytes / 2**20:.1f} MB for backward (the input itself is {big_input.data.nbytes / 2**20:.1f} MB)")

# %% [markdown]
# ## 10. Activations as layer objects
#
# Models are built from objects you call: `act = ReLU(); y = act(x)`. Module 03
# introduces `Module`, the base class of everything with parameters; an activation has
# none, so here a tiny base class `Activation` is enough: `__call__` runs `forward`. It
# also carries a `training` flag with `train()`/`eval()` and an empty `parameters()`,
# so that module 03's `Module`, `Sequential` and `ModuleList` accept activations as
# children like any layer. (Given code: nothing new to write.)

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
    for layer, function in ((ReLU(), relu), (Sigmoid(), sigmoid), (Tanh(), tanh), (GELU(), gelu),
                            (LogSoftmax(), log_softmax)):
        assert np.allclose(layer(x).numpy(), function(x).numpy()), \
            f"{type(layer).__name__}()(x) must give {function.__name__}(x), got {layer(x).numpy().tolist()}"
    along_0 = Softmax(dim=0)(x).numpy()
    assert np.allclose(along_0, 1.0), f"Softmax(dim=0) of one row must be all 1, got {along_0.tolist()}: pass dim on"
    layer = Softmax(dim=-2)
    assert repr(layer) == "Softmax(dim=-2)" and layer.parameters() == [], \
        f"Softmax(dim=-2) must print as 'Softmax(dim=-2)' and hold no parameters, got {layer!r}, {layer.parameters()}"
    assert layer.eval() is layer and not layer.training and layer.train().training, \
        "eval() returns the layer with training False; train() sets it back"
    print("✓ activation layers")


test_unit_activation_layers()

# %% [markdown]
# ## Summary
#
# * Without a nonlinearity, stacked linear layers collapse into one.
# * ReLU `max(0, x)`: slope 1 or 0; Sigmoid `(0, 1)` with slope `σ(1-σ) ≤ 0.25`; Tanh
#   `(-1, 1)` with slope `1 - tanh²`; GELU: smooth, here in its tanh approximation.
# * Exponentials overflow: compute sigmoid from `e^-|x|`, and shift softmax and
#   log-softmax by the maximum along `dim` (with `keepdims=True`); `log(softmax(x))` is
#   worse than `log_softmax(x)`; float16 sums overflow at 65,504, so compute in float32
#   and return float16.
# * Each function records one op (`relu`, `sigmoid`, `tanh`, `gelu`, `softmax`,
#   `log_softmax`) with inputs `(x,)`; sigmoid, tanh, softmax and log-softmax save their
#   output `out`, softmax and log-softmax also the non-negative `dim`, for module 05's
#   backward rules.
#
# ## Exercises
#
# Answer each by running your own functions (add cells below).
#
# 1. **Saturation.** Find the smallest `x` (to 0.1) for which your float32 `sigmoid(x)`
#    returns exactly `1.0`. What is `σ'(x) = out·(1 - out)` there, computed from the saved
#    `out`? What does that mean for a network whose sigmoid units sit at that input?
# 2. **Dead units.** Draw a `(1000, 64)` array of pre-activations from a normal
#    distribution with mean `-1` and standard deviation 1. What fraction of the ReLU outputs
#    are 0? For what fraction of the 64 units is *every* one of the 1000 outputs 0? Repeat
#    with `gelu`: how many outputs are exactly 0 now?
# 3. **Temperature.** Compute `softmax(z / T)` for `z = [1, 2, 3]` and `T = 0.1, 1, 10`.
#    Predict first: which `T` gives almost one-hot, which almost uniform? Module 12 calls
#    this the temperature of attention.
# 4. **Underflow.** Find (to 0.5) the gap `d` at which your float32 `softmax([0, d])[0]`
#    becomes exactly 0. Compare with `log_softmax([0, d])[0]` at the same `d`.
# 5. **The float16 limit.** With equal float16 logits, for how many classes does a float16
#    sum of the exponentials first become `inf`? Check that your `softmax` and
#    `log_softmax` still give `1/C` and `-ln C` for `C = 100_000`.
# 6. **The wrong axis.** Make a `(4, 3)` batch of logits. Compute `softmax(x, dim=0)` and
#    `softmax(x, dim=-1)`: which one sums to 1 per example? Change one example's logits
#    and see which outputs of each change.
#
# ## Questions
#
# 1. Sigmoid and tanh save their output; GELU saves nothing. Using the derivative
#    formulas, explain why each choice is the cheaper one. What would saving the output
#    of `relu` cost on the `(1024, 1024)` input of section 9?
# 2. Softmax is unchanged when you add the same constant to every input along `dim`.
#    Check it on your code with a constant of 500. Why does that make the max shift free?
# 3. Your softmax computes float16 inputs in float32. How much memory does it allocate
#    while it runs, compared with the input? Measure the peak with `tracemalloc` (NumPy
#    reports its arrays to it) on a `(4, 64, 50257)` float16 input, then scale the answer
#    to a GPT-2 sized batch of logits, `(64, 256, 50257)`.
# 4. `tanh(x) = 2σ(2x) - 1`. Verify it numerically with your two functions on
#    `[-1000, 1000]`. Why does the identity survive at ±1000 only because your sigmoid is
#    stable?
