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
# # Module 13: Transformers
#
# > Attention, a normalisation, a small MLP and a residual stream, stacked a few times: a GPT
# > that you train and that writes text, one token at a time.
#
# Module 12 built attention: every token looks at the tokens before it and takes a weighted
# average of what they offer. On its own that is not a language model. This module adds the
# pieces around it and puts them together the way GPT-2 (and nanoGPT, which this course's
# recipe follows) does.
#
# **What you will be able to do when you finish:**
#
# * write LayerNorm as one fused operation with a hand-derived backward rule, and explain
#   why GPT normalises *before* each sub-layer (pre-norm) instead of after it;
# * build the MLP, the transformer block and the GPT, initialise it the way GPT-2 does, and
#   check a fresh model's loss against `ln(vocab_size)` before training anything;
# * turn logits into text with temperature and top-k sampling;
# * build a KV cache, derive why it turns the cost of each new token from O(T²) into O(T),
#   compute its memory, and measure on your own code that it gives the same tokens, faster.
#
# **Time:** about 4 hours — sections 1–6 in a first sitting (the model), 7–10 in a second
# (sampling, the cache, generation).
#
# | piece | what it does |
# |---|---|
# | `layer_norm`, `LayerNorm` | normalise every token's features; one recorded op with a fused backward |
# | `MLP` | the per-token feed-forward network: `E → 4E → GELU → E` |
# | `cached_causal_mask`, `CausalSelfAttention` | module 12's multi-head attention, causal, with a hook for the cache |
# | `TransformerBlock` | pre-norm attention and MLP, each added to the residual stream |
# | `GPT` | embeddings, blocks, final LayerNorm, a head tied to the token embedding; GPT-2's initialisation |
# | `next_token_probs`, `sample_next_token` | temperature and top-k sampling |
# | `LayerKVCache`, `KVCache` | the keys and values of earlier tokens, kept between steps |
# | `GPT.generate` | prompt in, prompt plus new tokens out, with or without the cache |
#
# The milestone after this module (`tito milestone run shakespeare`) trains this GPT on the
# works of Shakespeare, character by character.

# %%
#| default_exp models.transformer

# %%
#| export
from __future__ import annotations

import math
from typing import Any

import numpy as np
from fastcore.basics import patch

from tinytorch.core.activations import gelu
from tinytorch.core.attention import MultiHeadAttention, scaled_dot_product_attention
from tinytorch.core.autograd import no_grad, register_backward
from tinytorch.core.layers import Dropout, Linear, Module, ModuleList, make_rng
from tinytorch.core.losses import cross_entropy
from tinytorch.core.tensor import (GradMode, Tensor, array_module, as_int, as_tensor, autocast_float32, record_op,
                                   to_array, to_host)
from tinytorch.text.embeddings import Embedding, token_ids

# %% [markdown]
# ## 1. LayerNorm: every token rescaled on its own
#
# A deep network is a long chain of matrix products. If each layer makes its outputs a
# little larger (or smaller) than its inputs, the scale drifts layer after layer and the
# gradients with it. **Layer normalisation** resets the scale inside the network: for
# each token separately, it takes the `D` features of that token, subtracts their mean and
# divides by their standard deviation, then applies a learned gain `γ` and shift `β`
# (one number per feature):
#
# $$\mathrm{LN}(x) = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}}\,\gamma + \beta,
# \qquad \mu = \frac1D\sum_i x_i,\quad \sigma^2 = \frac1D\sum_i (x_i-\mu)^2 .$$
#
# Three details that are easy to get wrong:
#
# * **The axis.** The statistics are taken over the *features of one token* (the last
#   axis), never across tokens or across the batch. A token's normalisation depends on
#   nothing but itself, so it is the same in a batch of 12 and in a batch of 1 (at
#   generation time), and no information leaks from future tokens.
# * **The variance is the biased one**: divide by `D`, not `D − 1` (`np.var`'s default,
#   and PyTorch's choice for LayerNorm).
# * **ε goes inside the square root.** It keeps the division finite for a token whose
#   features are (nearly) all equal. `(x − μ) / (σ + ε)` is a different function: for a
#   token with σ = 10⁻³ it divides by 1.01·10⁻³ instead of `√(10⁻⁶ + 10⁻⁵) = 3.3·10⁻³`.
#   And ε must be positive: with ε = 0 a token whose features are all equal divides 0 by 0
#   (the given checks refuse `eps <= 0`).
# * **Floats only.** A mean and a variance of integers are fractions: cast back to an
#   integer input's dtype, `rstd` would be 0 and every output 0. As PyTorch's `layer_norm`,
#   the given checks refuse an integer (or boolean) input with a `TypeError` that says to
#   convert it first, as module 02's softmax does.
# * **Square in float64.** The largest float32 is about 3.4·10³⁸, so squaring a float32
#   above about 1.8·10¹⁹ overflows to infinity: the variance becomes `inf`, `1/√inf = 0`,
#   and a row of values near ±10²⁰ comes out as zeros instead of ±1. Squaring in float64
#   (`xp.square(centred, dtype=np.float64)`, largest value 1.8·10³⁰⁸) and casting `rstd`
#   back to `x`'s dtype keeps the result right and the output in float32.
#
# Worked example, `x = [1, 2, 3, 4]`, `γ = 1`, `β = 0`:

# %%
x_example = np.array([1.0, 2.0, 3.0, 4.0])
mu = x_example.mean()
var = ((x_example - mu) ** 2).mean()
print(f"mean {mu}, biased variance {var}, unbiased {x_example.var(ddof=1):.4f}")
print("normalised:", ((x_example - mu) / np.sqrt(var + 1e-5)).round(5))

# %% [markdown]
# The result `[-1.34164, -0.44721, 0.44721, 1.34164]` has mean 0 and variance 1 (up to ε).
#
# ### One operation, one backward rule
#
# Written with Tensor operations, LayerNorm is nine recorded ops (a mean, a subtraction, a
# product, another mean, an addition, a square root, a division, the gain and the shift),
# and each keeps arrays of the input's size alive for the backward pass. Instead we record
# **one** op, `layer_norm`, and derive its backward rule by hand.
#
# Name the pieces: `r = 1/√(σ² + ε)` (one number per token), `x̂ = (x − μ)·r` (the
# normalised input), `y = γ·x̂ + β`, and let `g` be the gradient arriving at `y`.
#
# * `dβ = g` and `dγ = g·x̂`, summed over every token (the batch and sequence axes): the
#   engine's `unbroadcast` does that sum when the rule returns them in `x`'s shape.
# * For `x`, write `ĝ = g·γ` (the gradient reaching `x̂`). Each `x̂_i` depends on every
#   `x_j` of its token through `μ` and `σ²`; differentiating
#   `x̂_i = (x_i − μ)·r` gives `∂x̂_i/∂x_j = r·(δ_ij − 1/D − x̂_i·x̂_j/D)`, so
#
# $$dx = r\,\big(\hat g - \operatorname{mean}(\hat g) - \hat x \cdot \operatorname{mean}(\hat g\,\hat x)\big),$$
#
#   with both means over the normalised axis. The first correction removes the part of the
#   gradient that would shift the mean, the second the part that would change the variance:
#   LayerNorm's output cannot move in those two directions, so neither can its gradient.
#
# The forward saves exactly what this needs: `xhat` and `rstd` (`r`, with the normalised
# axes kept as size 1 so that it broadcasts), plus `axes`, the normalised axes.
#
# `layer_norm` normalises over the trailing axes given by the weight's shape: a weight of
# shape `(D,)` normalises the last axis, `(T, D)` the last two (as PyTorch's
# `normalized_shape`). `normalized_axes` (given) checks the shapes and returns the axes as
# negative numbers, e.g. `(-1,)`; `check_eps` (given) refuses an `eps` that is not a number
# above 0. Both are public: module 18's fused LayerNorm checks its inputs with them.

# %%
#| export
def check_eps(owner: str, eps: Any) -> None:
    """ValueError unless eps is a number > 0 (with eps = 0 a constant row is 0/0; NaN poisons every row)."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not eps > 0:
        raise ValueError(f"{owner}: eps must be a number > 0, got {eps!r} (with eps = 0 a token whose features "
                         "are all equal divides 0 by 0).")


def check_floating_input(owner: str, x: Tensor) -> None:
    """TypeError unless x holds floats: normalising integers cast rstd (a fraction) to 0, as torch refuses too."""
    if x.dtype.kind != "f":
        raise TypeError(f"{owner} needs a floating-point input, got dtype {x.dtype} (its results are fractions, "
                        f"which {x.dtype} would round away): convert it first, e.g. Tensor(values, dtype=np.float32).")


def normalized_axes(normalized_shape: tuple, x_shape: tuple) -> tuple:
    """(-len(S), ..., -1) for S = normalized_shape, after checking that x ends with S."""
    n = len(normalized_shape)
    if n == 0 or tuple(x_shape[len(x_shape) - n:]) != tuple(normalized_shape) or len(x_shape) < n:
        raise ValueError(
            f"layer_norm: the input's trailing dims must equal normalized_shape {tuple(normalized_shape)}; "
            f"the input has shape {tuple(x_shape)}."
        )
    return tuple(range(-n, 0))


def layer_norm(x: Any, weight: Any, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the trailing dims given by `weight`'s shape S: (x − mean)/sqrt(var + eps)·weight + bias.

    x (..., *S); weight S; bias S or None. `var` is the biased variance (divide by the number
    of normalised elements), eps sits inside the square root. Same shape and dtype as x
    (inside module 17's autocast a float16 x is cast up to float32 first, by the given line).
    Records one op, "layer_norm", with inputs (x, weight, bias), or (x, weight) when bias is
    None, and saved:
        xhat -- the normalised input (x − mean)·rstd, x's shape
        rstd -- 1/sqrt(var + eps) in x's dtype, x's shape with the normalised axes kept as size 1
        axes -- the normalised axes, negative ints: (-1,) for a weight of shape (D,)
    The centred values are squared in float64 (a float32 square overflows above about
    1.8e19), then rstd is cast back to x's dtype. eps must be > 0 (ValueError, given); an integer
    x is refused (TypeError, given).
    """
    x, weight = autocast_float32(as_tensor(x)), as_tensor(weight)  # given: x in float32 under module 17's autocast
    bias = None if bias is None else as_tensor(bias)
    check_floating_input("layer_norm", x)
    axes = normalized_axes(weight.shape, x.shape)
    check_eps("layer_norm", eps)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    centred = x.data - x.data.mean(axis=axes, keepdims=True)
    var = xp.square(centred, dtype=np.float64).mean(axis=axes, keepdims=True)  # float32 squares overflow
    rstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype)
    xhat = centred
    xhat *= rstd  # in place: `centred` is not needed any more
    out = xhat * weight.data
    if bias is not None:
        out += bias.data
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return record_op("layer_norm", out, inputs, xhat=xhat, rstd=rstd, axes=axes)
    ### END SOLUTION


@register_backward("layer_norm")
def layer_norm_backward(grad: Any, node) -> tuple:
    """dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = grad·weight, means over `axes`;
    dweight = grad·x̂ and dbias = grad, both in x's shape (the engine sums them to weight's shape).
    Returns (dx, dweight) or (dx, dweight, dbias), one per input."""
    xhat, rstd, axes = node.saved["xhat"], node.saved["rstd"], node.saved["axes"]
    weight = node.inputs[1]
    ### BEGIN SOLUTION
    g_hat = grad * weight.data
    d_x = g_hat - g_hat.mean(axis=axes, keepdims=True)
    g_hat *= xhat  # reuse the array: ĝ·x̂
    d_x -= xhat * g_hat.mean(axis=axes, keepdims=True)
    d_x *= rstd
    d_weight = grad * xhat
    return (d_x, d_weight) if len(node.inputs) == 2 else (d_x, d_weight, grad)
    ### END SOLUTION


class LayerNorm(Module):
    """Layer normalisation over the last len(normalized_shape) dims, as torch.nn.LayerNorm.

    normalized_shape -- an int D (the last axis) or a tuple S (the trailing axes)
    eps              -- added to the variance inside the square root (1e-5, as PyTorch)
    bias             -- learn a shift β (default True); weight γ is always learned
    weight starts at 1 and bias at 0, so a fresh LayerNorm only normalises.
    """

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, bias: bool = True, *,
                 dtype: Any = np.float32, device: str | None = None):
        super().__init__()
        shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else \
            tuple(int(n) for n in normalized_shape)
        if not shape or min(shape) < 1:
            raise ValueError(f"LayerNorm: normalized_shape must be positive sizes, got {normalized_shape!r}.")
        self.normalized_shape = shape
        check_eps("LayerNorm", eps)
        self.eps = float(eps)
        self.weight = Tensor(np.ones(shape), requires_grad=True, dtype=dtype, device=device)
        self.bias = Tensor(np.zeros(shape), requires_grad=True, dtype=dtype, device=device) if bias else None

    def forward(self, x: Any) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, bias={self.bias is not None}"


# %%
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck, topological_order
from tinytorch.testing import numeric_vjp


def layer_norm_mistake(got: np.ndarray, x: Any, weight: Any = None, bias: Any = None) -> str:
    """Why `got` is not LayerNorm of x: the classic mistake that gives exactly these numbers, if one does."""
    x = np.asarray(x, dtype=np.float64)
    w = 1.0 if weight is None else np.asarray(weight, dtype=np.float64)
    b = 0.0 if bias is None else np.asarray(bias, dtype=np.float64)

    def made_with(axis=-1, ddof=0, eps_outside=False, gain=True, shift=True):
        centred = x - x.mean(axis, keepdims=True)
        var = x.var(axis, keepdims=True, ddof=ddof)
        xhat = centred / (np.sqrt(var) + 1e-5 if eps_outside else np.sqrt(var + 1e-5))
        return xhat * (w if gain else 1.0) + (b if shift else 0.0)

    for cause, switch in (("normalise each token over its LAST axis (its features), not over tokens or the batch",
                           {"axis": 0}),
                          ("normalise each token over its LAST axis (its features), not over tokens or the batch",
                           {"axis": -2}),
                          ("use the biased variance (divide by D, not D - 1), as PyTorch does", {"ddof": 1}),
                          ("put eps inside the square root: sqrt(var + eps), not sqrt(var) + eps",
                           {"eps_outside": True}),
                          ("add the bias: xhat * weight + bias", {"shift": False}),
                          ("multiply by the weight: xhat * weight + bias", {"gain": False})):
        if x.ndim < 2 and "axis" in switch:
            continue
        wrong = made_with(**switch)
        if wrong.shape == np.shape(got) and np.allclose(got, wrong, atol=1e-6):
            return f"it matches a known mistake: {cause}"
    return ("no classic mistake gives these numbers: compare each step with (x - mean) / sqrt(var + eps) * weight "
            "+ bias, the statistics over the last axis")


def layer_norm_backward_mistake(grads: list, x: np.ndarray, w: np.ndarray, g: np.ndarray) -> str:
    """The classic mistake of layer_norm's backward rule that gives exactly `grads` (dx, dweight), if one does."""
    mean, rstd = x.mean(-1, keepdims=True), 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    xhat = (x - mean) * rstd
    g_hat = g * w
    reduce = lambda a: a.reshape(-1, a.shape[-1]).sum(0)  # noqa: E731 (what the engine's unbroadcast does)
    for cause, dx in (("g_hat = grad * weight is the gradient reaching xhat: the weight is missing", rstd * (
                           g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))),
                      ("the term through the variance, - xhat * mean(g_hat * xhat), is missing",
                       rstd * (g_hat - g_hat.mean(-1, keepdims=True))),
                      ("the term through the mean, - mean(g_hat), is missing",
                       rstd * (g_hat - xhat * (g_hat * xhat).mean(-1, keepdims=True))),
                      ("the factor rstd is missing",
                       g_hat - g_hat.mean(-1, keepdims=True) - xhat * (g_hat * xhat).mean(-1, keepdims=True))):
        if np.allclose(grads[0], dx, atol=1e-6):
            return f"layer_norm's gradient for x is wrong: {cause}"
    if not np.allclose(grads[1], reduce(g * xhat), atol=1e-6):
        return "layer_norm's gradient for the weight is wrong: dweight = grad * xhat (the engine sums it over tokens)"
    return ("layer_norm's gradient for x is wrong: dx = rstd * (g_hat - mean(g_hat) - xhat * mean(g_hat * xhat)) "
            "with g_hat = grad * weight, both means over the last axis")


def test_unit_layer_norm():
    x_hand, expected = [[1.0, 2.0, 3.0, 4.0]], [[-1.34164, -0.44721, 0.44721, 1.34164]]
    def normed(*args: Any) -> Tensor:
        """layer_norm(*args); a ValueError on these valid inputs is reported with its likely cause."""
        try:
            return layer_norm(*args)
        except ValueError as err:
            raise AssertionError(f"layer_norm of an input of shape {np.shape(as_tensor(args[0]).data)} raised ValueError "
                                 f"({err}): keep the normalised axes as size 1 (keepdims=True) in the mean, the "
                                 "variance and rstd, so that they broadcast against x") from None

    out = normed(Tensor(x_hand), Tensor(np.ones(4, np.float32)))
    assert np.allclose(out.numpy(), expected, atol=1e-5), (
        f"layer_norm([1, 2, 3, 4]): expected {expected}, got {np.round(out.numpy().astype(float), 5).tolist()}: "
        + layer_norm_mistake(out.numpy(), x_hand))
    assert out.dtype == np.float32, f"layer_norm changed the dtype: float32 in, {out.dtype} out; keep x's dtype"
    assert out._node is None, "nothing required a gradient, so layer_norm must record no op (record_op decides)"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6)) * 5 + 3
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    got = normed(x, w, b).numpy()
    assert np.allclose(got, ref), (f"layer_norm of a (2, 3, 6) input with weight and bias differs from the reference "
                                   f"by up to {np.abs(got - ref).max():.3g}: " + layer_norm_mistake(got, x, w, b))
    tiny = rng.standard_normal((2, 5)) * 1e-3  # σ ≈ 1e-3: where eps matters
    ref_tiny = (tiny - tiny.mean(-1, keepdims=True)) / np.sqrt(tiny.var(-1, keepdims=True) + 1e-5)
    got = normed(tiny, np.ones(5)).numpy()
    assert np.allclose(got, ref_tiny), (f"layer_norm of tokens with σ ≈ 1e-3 differs from the reference by up to "
                                        f"{np.abs(got - ref_tiny).max():.3g}: " + layer_norm_mistake(got, tiny))
    huge = layer_norm(Tensor(np.array([[1e20, -1e20, 1e20, -1e20]], np.float32)), Tensor(np.ones(4, np.float32)))
    assert huge.dtype == np.float32 and np.allclose(huge.numpy(), [[1, -1, 1, -1]], atol=1e-5), (
        f"float32 values near ±1e20 gave {huge.numpy()}, expected ±1 in float32: square the centred values in "
        "float64 (a float32 square overflows above about 1.8e19) and cast rstd back to x's dtype")
    xt = Tensor(x, requires_grad=True)
    y = layer_norm(xt, Tensor(w, requires_grad=True), Tensor(b, requires_grad=True))
    node = y._node
    assert node is not None and node.op == "layer_norm", \
        f"layer_norm must record ONE op named 'layer_norm', got {node and node.op!r}"
    assert len(node.inputs) == 3 and node.saved.get("axes") == (-1,), \
        f"expected inputs (x, weight, bias) and saved axes (-1,), got {len(node.inputs)} inputs, axes {node.saved.get('axes')}"
    rstd = node.saved.get("rstd")
    assert rstd is not None and rstd.shape == (2, 3, 1), \
        f"saved rstd must have x's shape with the normalised axis kept as size 1, (2, 3, 1); got {getattr(rstd, 'shape', rstd)}"
    grad = rng.standard_normal(x.shape)
    untouched = grad.copy()
    d_x, d_w, d_b = BACKWARD_RULES["layer_norm"](grad, node)
    assert np.array_equal(grad, untouched), ("layer_norm's backward changed the gradient it was given in place: "
                                             "make new arrays (g_hat = grad * weight), never grad *= ...")
    numeric = numeric_vjp(lambda *t: layer_norm(*t), [x, w, b], grad)
    mine = [d_x, np.asarray(d_w).reshape(-1, 6).sum(0), np.asarray(d_b).reshape(-1, 6).sum(0)]
    assert all(np.allclose(m, n, atol=1e-6) for m, n in zip(mine, numeric)), \
        layer_norm_backward_mistake([d_x, mine[1]], x, w, grad)
    xs = [Tensor(a, requires_grad=True) for a in (x[:, :2, :4], w[:4], b[:4])]
    gradcheck(lambda x, w, b: layer_norm(x, w, b), xs)  # raises, naming the input and the element, when wrong
    gradcheck(lambda x, w: layer_norm(x, w), xs[:2])  # without a bias: inputs (x, weight)
    ln = LayerNorm(4)
    assert np.allclose(ln(Tensor(x_hand)).numpy(), out.numpy()), \
        f"LayerNorm(4) must give layer_norm's result, got {np.round(ln(Tensor(x_hand)).numpy().astype(float), 5).tolist()}"
    print("✓ layer_norm: hand example, random values, tiny variance, values near 1e20, one op, gradcheck")


test_unit_layer_norm()

# %% [markdown]
# ### Predict, then run: what does fusing save?
#
# The composed version below is the same function written with Tensor operations (module 05
# differentiates it for free). Before running the next cell, write down your guesses: how
# many operations does the composed version record? Is your fused op faster for forward +
# backward on a `(12, 64, 128)` input (the milestone's activations), and by how much?

# %%
import time


def layer_norm_composed(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    centred = x - x.mean(axis=-1, keepdims=True)
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / (var + eps).sqrt() * weight + bias


def count_ops(t: Tensor) -> int:
    """Number of recorded operations behind t (module 05's walk; inputs made by no op do not count)."""
    return sum(node._node is not None for node in topological_order(t))


def time_fwd_bwd(fn, repeats: int = 20) -> float:
    """Median seconds of forward + backward of fn on a fixed (12, 64, 128) float32 input."""
    rng = np.random.default_rng(1)
    x = Tensor(rng.standard_normal((12, 64, 128), dtype=np.float32), requires_grad=True)
    w, b = Tensor(np.ones(128, np.float32), requires_grad=True), Tensor(np.zeros(128, np.float32), requires_grad=True)
    g = rng.standard_normal((12, 64, 128), dtype=np.float32)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x, w, b).backward(g)
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


sample = [Tensor(np.random.default_rng(2).standard_normal((2, 4, 8)), requires_grad=True) for _ in range(1)]
sample += [Tensor(np.ones(8), requires_grad=True), Tensor(np.zeros(8), requires_grad=True)]
print("ops recorded: composed", count_ops(layer_norm_composed(*sample)), "| fused", count_ops(layer_norm(*sample)) ,
      "(inputs are not counted: they record no op)")
from threadpoolctl import threadpool_limits  # one BLAS thread: timings that repeat (module 01)

with threadpool_limits(limits=1):
    fused_t, composed_t = time_fwd_bwd(layer_norm), time_fwd_bwd(layer_norm_composed)
print(f"forward + backward on (12, 64, 128): fused {fused_t * 1e3:.2f} ms, composed {composed_t * 1e3:.2f} ms "
      f"({composed_t / fused_t:.1f}x)")

# %% [markdown]
# ## 2. The MLP: thinking about each token on its own
#
# Attention moves information *between* tokens; it is a weighted average, so on its own it
# can only mix what the tokens already hold. After attention, each token passes through a
# small two-layer network of its own (the same weights for every position):
#
# ```
# x (B, T, E) --fc--> (B, T, 4E) --GELU--> (B, T, 4E) --proj--> (B, T, E) --dropout-->
# ```
#
# The hidden layer is four times wider than the model (GPT-2's choice). With `E = 128` the
# MLP holds `2·4·E² = 131,072` weights, attention's four projections `4·E² = 65,536`: two
# thirds of a block's parameters are in the MLP. The activation is GELU (module 02, the tanh
# approximation GPT-2 uses), a smooth ReLU.
#
# `MLP(embed_dim, hidden_dim, dropout=0.0, bias=True)` has Linear layers `fc`
# (`embed_dim → hidden_dim`) and `proj` (`hidden_dim → embed_dim`) and a `Dropout`.

# %%
#| export
class MLP(Module):
    """Position-wise feed-forward network: fc (E → hidden), GELU, proj (hidden → E), dropout.

    forward(x (..., E)) -> (..., E): dropout(proj(gelu(fc(x)))), computed on the rows of x
    flattened to (N, E) (given code), where NumPy's matrix product is fastest.
    bias -- biases in both Linear layers (nanoGPT's small recipe uses none).
    """

    def __init__(self, embed_dim: int, hidden_dim: int, dropout: float = 0.0, bias: bool = True, *,
                 dtype: Any = np.float32, device: str | None = None, rng: Any = None, seed: int | None = None):
        super().__init__()
        generator = make_rng(rng, seed)
        self.fc = Linear(embed_dim, hidden_dim, bias=bias, dtype=dtype, device=device, rng=generator)
        self.proj = Linear(hidden_dim, embed_dim, bias=bias, dtype=dtype, device=device, rng=generator)
        self.dropout = Dropout(dropout, rng=generator)

    def forward(self, x: Any) -> Tensor:
        x = as_tensor(x)
        rows = x.reshape(-1, x.shape[-1])  # (..., E) -> (N, E): one 2-D matrix product per layer
        # your part: `out` (N, E), computed from `rows`
        ### BEGIN SOLUTION
        out = self.dropout(self.proj(gelu(self.fc(rows))))
        ### END SOLUTION
        return out.reshape(x.shape)


# %%
from tinytorch.core.layers import count_parameters


def test_unit_mlp():
    mlp = MLP(8, 32, seed=0)
    count = count_parameters(mlp)
    assert count == 8 * 32 + 32 + 32 * 8 + 8, \
        f"MLP(8, 32) must hold fc (8x32 + 32) and proj (32x8 + 8) = {8 * 32 + 32 + 32 * 8 + 8} parameters, got {count}"
    x = np.random.default_rng(3).standard_normal((2, 5, 8)).astype(np.float32)
    fc = x @ mlp.fc.weight.numpy() + mlp.fc.bias.numpy()
    gelu_tanh = lambda h: 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))  # noqa: E731
    proj = lambda h: h @ mlp.proj.weight.numpy() + mlp.proj.bias.numpy()  # noqa: E731
    got = mlp(Tensor(x)).numpy()
    if not np.allclose(got, proj(gelu_tanh(fc)), atol=1e-5):
        causes = {"there is no activation: two Linear layers in a row are one linear map": proj(fc),
                  "ReLU instead of GELU": proj(np.maximum(fc, 0)), "the GELU comes after proj": gelu_tanh(proj(fc))}
        cause = next((c for c, wrong in causes.items() if np.allclose(got, wrong, atol=1e-5)), "")
        raise AssertionError(f"MLP output differs from proj(GELU(fc(x))) by up to "
                             f"{np.abs(got - proj(gelu_tanh(fc))).max():.3g}: fc first, then the GELU activation, then "
                             "proj, then dropout" + (f"; it matches a known mistake: {cause}" if cause else ""))
    count = count_parameters(MLP(8, 32, bias=False))
    assert count == 2 * 8 * 32, f"MLP(8, 32, bias=False) must hold two weights, 2·8·32 = 512 parameters, got {count}"
    noisy = MLP(8, 32, dropout=0.5, seed=1)
    ones = Tensor(np.ones((40, 8), np.float32))
    train_rows = noisy(ones).numpy()
    assert not np.allclose(train_rows, train_rows[0]), \
        "MLP(dropout=0.5) in training mode gave every row the same output: apply self.dropout to proj's output"
    noisy.eval()
    eval_rows = noisy(ones).numpy()
    assert np.allclose(eval_rows, eval_rows[0]), "after .eval() the MLP's dropout must do nothing, but rows differ"
    print("✓ MLP: fc, GELU, proj, dropout; parameter count; bias=False")


test_unit_mlp()

# %% [markdown]
# ## 3. Causal self-attention, ready for a cache
#
# GPT's attention is module 12's `MultiHeadAttention` with `query = key = value = x` and the
# causal mask: token `t` sees tokens `0 … t`. `CausalSelfAttention` is a subclass: while
# training, its forward is module 12's forward with `is_causal=True`.
#
# When the model *generates*, it will later feed one new token at a time, and the keys and
# values of the earlier tokens come from a **cache** (section 8 builds it; here you only use
# it). The protocol the attention relies on is small: a cache has
#
# * `cache.length` — how many tokens it already holds (`past`);
# * `cache.update(k, v)` — stores the new keys and values `(B, H, T, D)` after the old ones
#   and returns all keys and values so far, `(B, H, past + T, D)`.
#
# The new queries sit at positions `past … past + T − 1`, the keys at `0 … past + T − 1`.
# Module 12's `is_causal` is **top-left aligned** (as PyTorch's): query row `i` sees key
# columns `0 … i`. For a square score matrix that is right. For one new query against
# `past + 1` keys it is wrong: row 0 would see only key 0, the very first token, instead of
# all of them. So the cached path passes an explicit keep mask, whose rows are aligned at
# the *bottom right*: query `i` (absolute position `past + i`) sees keys `0 … past + i`.

# %%
#| export
def cached_causal_mask(num_new: int, num_past: int) -> np.ndarray:
    """(num_new, num_past + num_new) bool keep mask (True = attend) for num_new queries that
    follow num_past cached tokens: query i sits at position num_past + i and sees keys
    0 … num_past + i. With num_past = 0 it is the usual lower triangle."""
    ### BEGIN SOLUTION
    queries = np.arange(num_past, num_past + num_new)
    keys = np.arange(num_past + num_new)
    return keys[None, :] <= queries[:, None]
    ### END SOLUTION


class CausalSelfAttention(MultiHeadAttention):
    """Causal multi-head self-attention (module 12's MultiHeadAttention with q = k = v = x).

    forward(x (B, T, E), cache=None) -> (output (B, T, E), weights (B, H, T, Tk)).
    * cache None: module 12's forward with is_causal=True (Tk = T).
    * with a cache (`.length` tokens stored, `.update(k, v)` -> all keys and values):
      project x to heads q, k, v (B, H, T, D) with `_split_heads`, let the cache extend k
      and v (Tk = past + T), attend with the keep mask cached_causal_mask(T, past) (never
      is_causal: it is top-left aligned), merge the heads with `_merge_heads` (B·T, E), apply
      out_proj and reshape to (B, T, E). Pass dropout as module 12's forward does
      (dropout_p=self.dropout, training=self.training, rng=self.rng).
    """

    def _split_heads(self, proj: Linear, x: Tensor) -> Tensor:
        """(B, T, E) --proj--> (B, T, E) -> (B, H, T, D)."""
        B, T, E = x.shape
        return proj(x.reshape(B * T, E)).reshape(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def _merge_heads(self, heads: Tensor) -> Tensor:
        """(B, H, T, D) -> (B·T, E): the heads side by side, one row per token."""
        B, H, T, D = heads.shape
        return heads.permute(0, 2, 1, 3).reshape(B * T, H * D)

    def forward(self, x: Any, cache: Any = None) -> tuple[Tensor, Tensor]:
        x = as_tensor(x)
        ### BEGIN SOLUTION
        if cache is None:
            return super().forward(x, is_causal=True)
        past = cache.length
        q, k, v = (self._split_heads(proj, x) for proj in (self.q_proj, self.k_proj, self.v_proj))
        k, v = cache.update(k, v)
        out, weights = scaled_dot_product_attention(q, k, v, mask=cached_causal_mask(x.shape[1], past),
                                                    dropout_p=self.dropout, training=self.training, rng=self.rng)
        return self.out_proj(self._merge_heads(out)).reshape(x.shape), weights
        ### END SOLUTION


# %%
print("is_causal for 1 query, 4 keys (top-left):", np.tril(np.ones((1, 4)), 0).astype(int).tolist())
print("cached_causal_mask(1, 3):                 ", cached_causal_mask(1, 3).astype(int).tolist())
print("cached_causal_mask(2, 3):\n", cached_causal_mask(2, 3).astype(int))


# %%
class ListCache:
    """The smallest object that follows the cache protocol (section 8 builds the real one)."""

    def __init__(self):
        self.k = self.v = None

    @property
    def length(self):
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k, v):
        self.k = k.data if self.k is None else np.concatenate([self.k, k.data], axis=-2)
        self.v = v.data if self.v is None else np.concatenate([self.v, v.data], axis=-2)
        return Tensor(self.k), Tensor(self.v)


def through_cache(attn: CausalSelfAttention, x: Tensor, chunks: list[int]) -> tuple[np.ndarray, ListCache]:
    """attn's output for x fed `chunks` tokens at a time through one ListCache, and the cache."""
    cache, outputs, start = ListCache(), [], 0
    for n in chunks:
        outputs.append(attn(x[:, start:start + n], cache=cache)[0].numpy())
        start += n
    return np.concatenate(outputs, axis=1), cache


def cached_attention_mistake(attn: CausalSelfAttention, x: Tensor, chunks: list[int], got: np.ndarray) -> str:
    """Why the cached path's output `got` differs from attention over the whole sequence, when a classic mistake says."""
    def cached(mask_for, project=True):
        cache, outputs, start = ListCache(), [], 0
        for n in chunks:
            part = x[:, start:start + n]
            past = cache.length
            q, k, v = (attn._split_heads(proj, part) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
            k, v = cache.update(k, v)
            out = scaled_dot_product_attention(q, k, v, **mask_for(n, past))[0]
            merged = attn._merge_heads(out)
            outputs.append((attn.out_proj(merged) if project else merged).reshape(part.shape).numpy())
            start += n
        return np.concatenate(outputs, axis=1)

    right_mask = lambda n, past: {"mask": cached_causal_mask(n, past)}  # noqa: E731
    for cause, wrong in (
            ("module 12's is_causal is top-left aligned (query row i sees key columns 0 ... i), which is wrong "
             "when Tq < Tk: a new query must see every cached key and itself; pass mask=cached_causal_mask(T, past)",
             cached(lambda n, past: {"is_causal": True})),
            ("out_proj is missing: apply self.out_proj to the merged heads", cached(right_mask, project=False))):
        if np.allclose(got, wrong, atol=1e-10):
            return f"it matches a known mistake: {cause}"
    return ("project x to q, k, v heads with _split_heads, let cache.update(k, v) extend k and v, attend with "
            "mask=cached_causal_mask(T, past), merge the heads with _merge_heads and apply out_proj")


def test_unit_causal_self_attention():
    for new, past in ((3, 0), (1, 3), (2, 2)):
        got = np.asarray(cached_causal_mask(new, past))
        expected = np.arange(past + new)[None, :] <= np.arange(past, past + new)[:, None]
        assert got.shape == expected.shape and np.array_equal(got, expected), (
            f"cached_causal_mask({new}, {past}): query i sits at position {past} + i and sees keys 0 ... {past} + i, "
            f"itself included, and nothing after it; expected\n{expected.astype(int)}\ngot\n{got.astype(int)}")
    attn = CausalSelfAttention(8, 2, seed=0, dtype=np.float64)
    x = Tensor(np.random.default_rng(4).standard_normal((2, 5, 8)))
    full, w = attn(x)
    above = np.abs(np.triu(w.numpy(), 1)).max()
    assert above == 0, (f"without a cache the attention must be causal (is_causal=True): token t attends only to "
                        f"tokens 0 ... t, but weights above the diagonal reach {above:.3g}")
    got, cache = through_cache(attn, x, [3, 1, 1])  # three tokens at once, then one at a time
    assert cache.length == 5, (f"after 5 tokens the cache holds {cache.length}: the cached path must hand every new "
                               "token's keys and values to cache.update(k, v) and attend to what it returns")
    assert np.allclose(got, full.numpy(), atol=1e-12), (
        f"attention through the cache (3 tokens, then 1, then 1) differs from attention over the whole sequence by up "
        f"to {np.abs(got - full.numpy()).max():.3g}: " + cached_attention_mistake(attn, x, [3, 1, 1], got))
    noisy = CausalSelfAttention(8, 2, dropout=0.5, seed=1, dtype=np.float64)
    visible = np.tril(np.ones((5, 5), dtype=bool))
    _, w_train = noisy(x, cache=ListCache())
    assert np.any(w_train.numpy()[..., visible] == 0), (
        "CausalSelfAttention(dropout=0.5) in training mode dropped no attention weight on the cached path: pass "
        "dropout_p=self.dropout, training=self.training, rng=self.rng as module 12's forward does")
    noisy.eval()
    full_eval = noisy(x)[0].numpy()
    cached_eval, w_eval = noisy(x, cache=ListCache())
    assert np.all(w_eval.numpy()[..., visible] > 0) and np.allclose(cached_eval.numpy(), full_eval, atol=1e-12), (
        "after .eval() the cached path still drops attention weights (dropout=0.5): pass training=self.training to "
        "scaled_dot_product_attention, so that model.eval() (and generate) switch dropout off")
    print("✓ causal self-attention: causal; through a cache, token by token, equals all at once; dropout only in training")


test_unit_causal_self_attention()

# %% [markdown]
# ## 4. The block: a residual stream, normalised before each sub-layer
#
# A transformer block does two things to each token: attention (look at the others), then
# the MLP (think on your own). Each one *adds* its result to the token's vector instead of
# replacing it:
#
# ```
# x = x + attn(ln1(x))
# x = x + mlp(ln2(x))
# ```
#
# **The residual stream.** Follow one token's vector `x` from the embedding to the output:
# every sub-layer of every block reads it (through a LayerNorm) and writes a correction
# into it (the `+`). Nothing ever overwrites it. Because `d(x + f(x))/dx = I + df/dx`, the
# gradient of the loss reaches the embeddings along the identity path, untouched by any
# layer, however deep the stack: the residual connections are why a 96-layer GPT-3 trains
# at all.
#
# **Pre-norm.** The original Transformer (2017) normalised *after* the addition,
# `x = LN(x + f(x))` ("post-norm"). Then the stream itself passes through a LayerNorm in
# every sub-layer, the identity path is gone, and training needs a careful learning-rate
# warm-up to survive its first steps. GPT-2 moved the normalisation to the input of each
# sub-layer ("pre-norm"): the stream stays clean, and since it is never normalised on the
# way, the model applies one last LayerNorm (`ln_f`) before the output layer.
#
# `TransformerBlock(embed_dim, num_heads, dropout=0.0, bias=True)` has `ln1`, `attn` (a
# `CausalSelfAttention`), `ln2`, `mlp` (an `MLP` of width `4·embed_dim`) and `dropout`
# (applied to the attention's output before it is added, as nanoGPT does). Its forward takes
# the optional `cache` and hands it to the attention.

# %%
#| export
class TransformerBlock(Module):
    """Pre-norm transformer block (GPT-2, nanoGPT):

        x = x + dropout(attn(ln1(x)))      attn: CausalSelfAttention, its output only
        x = x + mlp(ln2(x))                mlp: MLP(E, 4E), with its own dropout

    forward(x (B, T, E), cache=None) -> (B, T, E); `cache` (one layer's) goes to the attention.
    bias -- biases in the LayerNorms and every Linear layer.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, *,
                 dtype: Any = np.float32, device: str | None = None, rng: Any = None, seed: int | None = None):
        super().__init__()
        generator = make_rng(rng, seed)
        settings = dict(dtype=dtype, device=device, rng=generator)
        self.ln1 = LayerNorm(embed_dim, bias=bias, dtype=dtype, device=device)
        self.attn = CausalSelfAttention(embed_dim, num_heads, dropout=dropout, bias=bias, **settings)
        self.ln2 = LayerNorm(embed_dim, bias=bias, dtype=dtype, device=device)
        self.mlp = MLP(embed_dim, 4 * embed_dim, dropout=dropout, bias=bias, **settings)
        self.dropout = Dropout(dropout, rng=generator)

    def forward(self, x: Any, cache: Any = None) -> Tensor:
        ### BEGIN SOLUTION
        attended, _ = self.attn(self.ln1(x), cache=cache)
        x = x + self.dropout(attended)
        return x + self.mlp(self.ln2(x))
        ### END SOLUTION


# %%
class DropEverything(Module):
    """A stand-in for a Dropout that drops every value: shows where a block applies its dropout."""

    def forward(self, x: Any) -> Tensor:
        return as_tensor(x) * 0.0


def block_mistake(block: TransformerBlock, x: Tensor, got: np.ndarray) -> str:
    """The classic arrangement mistake that gives exactly `got` for block(x), if one does."""
    attn = lambda h: block.attn(h)[0]  # noqa: E731
    a = x + attn(block.ln1(x))
    post = block.ln1(x + attn(x))
    for cause, wrong in (("that is post-norm, x = ln(x + f(x)); GPT is pre-norm: x = x + attn(ln1(x)), then "
                          "x = x + mlp(ln2(x)), no LayerNorm on the residual stream itself", block.ln2(post + block.mlp(post))),
                         ("the residual connections are missing: each sub-layer must ADD its output to the stream",
                          block.mlp(block.ln2(attn(block.ln1(x))))),
                         ("the MLP's output replaces the stream instead of being added to it: x + mlp(ln2(x))",
                          block.mlp(block.ln2(a))),
                         ("the attention's output replaces the stream instead of being added to it: x + attn(ln1(x))",
                          attn(block.ln1(x)) + block.mlp(block.ln2(attn(block.ln1(x))))),
                         ("the MLP reads the stream without ln2: x + mlp(ln2(x))", a + block.mlp(a)),
                         ("the MLP reads the stream through ln1: use ln2 for the MLP", a + block.mlp(block.ln1(a))),
                         ("the attention reads the stream through ln2: use ln1 for the attention",
                          (x + attn(block.ln2(x))) + block.mlp(block.ln2(x + attn(block.ln2(x))))),
                         ("the attention reads the stream without ln1: x + attn(ln1(x))",
                          (x + attn(x)) + block.mlp(block.ln2(x + attn(x))))):
        if np.allclose(got, wrong.numpy(), atol=1e-10):
            return f"it matches a known mistake: {cause}"
    return "pre-norm block: x = x + dropout(attn(ln1(x))[0]), then x = x + mlp(ln2(x)), in this order"


def test_unit_transformer_block():
    block = TransformerBlock(8, 2, seed=0, dtype=np.float64)
    x = Tensor(np.random.default_rng(5).standard_normal((2, 4, 8)) * 3)
    for ln, gain in ((block.ln1, 0.5), (block.ln2, 2.0)):  # two different LayerNorms: a mix-up shows
        ln.weight.data = np.full(8, gain)
    a = x + block.attn(block.ln1(x))[0]
    expected = (a + block.mlp(block.ln2(a))).numpy()
    got = block(x).numpy()
    assert np.allclose(got, expected), (f"the block's output differs from x + attn(ln1(x)), then + mlp(ln2(x)), by up "
                                        f"to {np.abs(got - expected).max():.3g}: " + block_mistake(block, x, got))
    cache = ListCache()
    step_by_step = np.concatenate([block(x[:, :3], cache=cache).numpy(), block(x[:, 3:], cache=cache).numpy()], 1)
    assert cache.length == 4 and np.allclose(step_by_step, expected), (
        f"the block fed 3 tokens and then 1 through a cache differs from the block over all 4 (the cache holds "
        f"{cache.length} tokens, expected 4): hand the cache to the attention, self.attn(self.ln1(x), cache=cache)")
    block.dropout = DropEverything()  # dropout=0 in the MLP, every attention output dropped here
    got, wanted = block(x).numpy(), (x + block.mlp(block.ln2(x))).numpy()
    if not np.allclose(got, wanted):
        missing = np.allclose(got, expected)
        raise AssertionError("with a dropout that drops everything, the block must give x + mlp(ln2(x)): " + (
            "the block never applies self.dropout to the attention's output; x = x + self.dropout(attended)"
            if missing else "self.dropout belongs on the attention's output only, before it is added: "
            "x = x + self.dropout(attended)"))
    for lin in (block.attn.out_proj, block.mlp.proj):  # sub-layers that write nothing: the block is the identity
        lin.weight.data = np.zeros_like(lin.weight.data)
        lin.bias.data = np.zeros_like(lin.bias.data)
    block.dropout = Dropout(0.0)
    assert np.allclose(block(x).numpy(), x.numpy()), (
        "with attn.out_proj and mlp.proj zeroed (sub-layers that write nothing) the block must return its input "
        "unchanged: the residual stream passes through, nothing normalises it")
    print("✓ transformer block: pre-norm, residuals, the cache handed on, dropout on the attention's output")


test_unit_transformer_block()


# %% [markdown]
# ### Predict, then run: what the residual stream does for the gradient
#
# Stack 12 blocks of width 32 (initialised as GPT-2 does, section 5), put a random input
# through them and back-propagate a random gradient from the top. Three arrangements: ours
# (pre-norm), the 2017 post-norm, and pre-norm *without* the residual additions
# (`x = attn(ln1(x)); x = mlp(ln2(x))`). Predict the size of the gradient that reaches the
# first block's MLP in each case, compared with the last block's. Then run.

# %%
class PostNormBlock(TransformerBlock):
    """The 2017 arrangement, for comparison only: x = ln1(x + attn(x)); x = ln2(x + mlp(x))."""

    def forward(self, x, cache=None):
        x = self.ln1(x + self.attn(x)[0])
        return self.ln2(x + self.mlp(x))


class NoResidualBlock(TransformerBlock):
    """For comparison only: the sub-layers replace the stream instead of adding to it."""

    def forward(self, x, cache=None):
        x = self.attn(self.ln1(x))[0]
        return self.mlp(self.ln2(x))


def gradient_norms(block_class, depth: int = 12, width: int = 32, seed: int = 0) -> list[float]:
    """Norm of each block's MLP weight gradient, first block first."""
    rng = np.random.default_rng(seed)
    blocks = [block_class(width, 4, rng=rng) for _ in range(depth)]
    for block in blocks:  # GPT-2's initialisation (section 5): small weights, scaled residual writers
        for lin in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj, block.mlp.fc):
            lin.weight.data = rng.normal(0, 0.02, lin.weight.shape).astype(np.float32)
        for lin in (block.attn.out_proj, block.mlp.proj):
            lin.weight.data = rng.normal(0, 0.02 / math.sqrt(2 * depth), lin.weight.shape).astype(np.float32)
    x = Tensor(rng.standard_normal((4, 16, width)).astype(np.float32))
    for block in blocks:
        x = block(x)
    x.backward(rng.standard_normal(x.shape).astype(np.float32))
    return [float(np.linalg.norm(b.mlp.fc.weight.grad.numpy())) for b in blocks]


print(f"{'block':>12} " + " ".join(f"{i:>8}" for i in range(12)))
for label, block_class in (("pre-norm", TransformerBlock), ("post-norm", PostNormBlock), ("no residual", NoResidualBlock)):
    norms = gradient_norms(block_class)
    print(f"{label:>12} " + " ".join(f"{g:8.1e}" for g in norms))

# %% [markdown]
# Without the additions the gradient loses about three orders of magnitude per block: each
# sub-layer's Jacobian is small (weights of size 0.02), and a chain of them multiplies those
# small factors together. The first blocks of such a network receive nothing and learn
# nothing. With the residual stream every block gets a gradient of the same size, because
# the identity term `I` in `I + df/dx` carries it down unchanged.
#
# At initialisation post-norm looks just as healthy here. Its trouble shows during training
# (Xiong et al., 2020, analyse it): the LayerNorms on the main path make the gradients of
# the last layers large once the sub-layers' outputs grow, so post-norm needs a long
# learning-rate warm-up to avoid diverging, and it is touchier about the learning rate.
# Pre-norm trains with a short warm-up; every GPT since GPT-2 uses it.
#
# ## 5. The GPT
#
# ```
# idx (B, T) token ids
#   token_embedding(idx) + position_embedding(0 … T−1)     (B, T, E)   (module 11's Embedding, twice)
#   dropout
#   blocks[0] … blocks[L−1]                                 (B, T, E)
#   ln_f                                                    (B, T, E)
#   @ token_embedding.weightᵀ                               (B, T, V)   logits
#   cross_entropy(logits, targets)                          ()          loss, when targets are given
# ```
#
# Positions are a second embedding table with one learned row per position `0 …
# max_seq_len − 1` (GPT-2's choice; module 11 compares it with sinusoids). A model with a
# cache that already holds `past` tokens places its new tokens at positions `past … past +
# T − 1`.
#
# **Tied weights.** The output layer turns a vector of width `E` into `V` scores, one per
# token of the vocabulary: a matrix `E × V`. The token embedding is a `V × E` table.
# GPT-2 uses the *same* matrix for both (`logits = h · Wₑᵀ`): a token's embedding is also
# the direction that makes the model predict it. That saves `V·E` parameters (38 million of
# GPT-2 small's 124 million) and the shared matrix receives gradient from both ends. It must
# be the embedding's weight *itself* in the forward pass — a copy (`Tensor(weight.data.T)`)
# would give the same logits and silently stop the sharing. With `tie_weights=False` the
# model has its own `lm_head = Linear(E, V, bias=False)`.
#
# **Initialisation (GPT-2, nanoGPT).** Every Linear weight and both embedding tables are
# drawn from a normal distribution with standard deviation 0.02, biases are 0, LayerNorms
# start at weight 1 and bias 0. Each block *adds* two outputs to the residual stream (the
# attention's `out_proj`, the MLP's `proj`): after `L` blocks the stream has received `2L`
# random contributions, and its variance grows with their number. So those two projections
# are drawn with standard deviation `0.02 / √(2L)`, and the stream's size stays the same
# whatever the depth.
#
# `GPT.__init__` (given) builds the layers and calls `_init_weights`, which you write: draw
# from `self.rng` and assign with `self._assign(param, array)`, which converts to the model's
# dtype and device. Then write `forward`.

# %%
#| export
class GPT(Module):
    """A GPT language model (GPT-2's architecture, nanoGPT's layout and initialisation).

    vocab_size, embed_dim (E), num_layers (L), num_heads (H), max_seq_len (the context)
    dropout     -- after the embeddings, on attention weights and on both residual writes
    tie_weights -- the output layer is token_embedding.weight transposed (default True);
                   False: a separate lm_head = Linear(E, vocab_size, bias=False)
    bias        -- biases in the LayerNorms and Linear layers (default True)
    dtype, device, rng / seed -- parameters' dtype and device, and the generator every
                   initialisation and dropout mask is drawn from

    Attributes: token_embedding, position_embedding (Embedding), dropout, blocks (a
    ModuleList of TransformerBlock), ln_f (LayerNorm), lm_head (None when tied).
    """

    def __init__(self, vocab_size: int, embed_dim: int, num_layers: int, num_heads: int, max_seq_len: int,
                 dropout: float = 0.0, tie_weights: bool = True, bias: bool = True, *,
                 dtype: Any = np.float32, device: str | None = None, rng: Any = None, seed: int | None = None):
        super().__init__()
        for label, value in (("vocab_size", vocab_size), ("embed_dim", embed_dim), ("num_layers", num_layers),
                             ("num_heads", num_heads), ("max_seq_len", max_seq_len)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"GPT: {label} must be a positive int, got {value!r}.")
        if embed_dim % num_heads:
            raise ValueError(f"GPT: embed_dim ({embed_dim}) must be a multiple of num_heads ({num_heads}).")
        self.vocab_size, self.embed_dim, self.num_layers = int(vocab_size), int(embed_dim), int(num_layers)
        self.num_heads, self.max_seq_len = int(num_heads), int(max_seq_len)
        self.rng = make_rng(rng, seed)
        settings = dict(dtype=dtype, device=device, rng=self.rng)
        self.token_embedding = Embedding(vocab_size, embed_dim, **settings)
        self.position_embedding = Embedding(max_seq_len, embed_dim, **settings)
        self.dropout = Dropout(dropout, rng=self.rng)
        self.blocks = ModuleList([TransformerBlock(embed_dim, num_heads, dropout, bias, **settings)
                                  for _ in range(num_layers)])
        self.ln_f = LayerNorm(embed_dim, bias=bias, dtype=dtype, device=device)
        self.lm_head = None if tie_weights else Linear(embed_dim, vocab_size, bias=False, **settings)
        self._init_weights()

    @property
    def dtype(self):
        """The parameters' dtype (that of the token table)."""
        return self.token_embedding.weight.dtype

    @property
    def device(self) -> str:
        """Where the parameters live, "cpu" or "cuda" (it follows `model.to(device)`)."""
        return self.token_embedding.weight.device

    def _assign(self, param: Tensor, array: Any) -> None:
        """param.data = array, in the model's dtype and on its device."""
        param.data = to_array(np.asarray(array), dtype=self.dtype, device=self.device)

    def _init_weights(self) -> None:
        """GPT-2's initialisation, drawn from self.rng:
        * every Linear weight and both embedding tables (and lm_head, if any) ~ normal(0, 0.02);
        * every Linear bias = 0;
        * each block's two residual projections, attn.out_proj.weight and mlp.proj.weight,
          ~ normal(0, 0.02 / sqrt(2 · num_layers));
        * LayerNorms keep weight 1 and bias 0.
        Walk every sub-module with self.modules() and pick the Linear and Embedding layers
        with isinstance; set each tensor with self._assign(param, array). Draw in that walk's
        order, one self.rng.normal(0, std, shape) per weight (biases take no draw), so that
        the same seed gives every student the same model.
        """
        ### BEGIN SOLUTION
        std = 0.02
        residual = {id(b.attn.out_proj.weight) for b in self.blocks} | {id(b.mlp.proj.weight) for b in self.blocks}
        for module in self.modules():
            if isinstance(module, Linear):
                scale = std / math.sqrt(2 * self.num_layers) if id(module.weight) in residual else std
                self._assign(module.weight, self.rng.normal(0.0, scale, module.weight.shape))
                if module.bias is not None:
                    self._assign(module.bias, np.zeros(module.bias.shape))
            elif isinstance(module, Embedding):
                self._assign(module.weight, self.rng.normal(0.0, std, module.weight.shape))
        ### END SOLUTION

    def _token_ids(self, idx: Any) -> Any:
        """idx as an int64 (B, T) array on the model's device (ValueError for any other shape)."""
        ids = to_array(idx.data if isinstance(idx, Tensor) else np.asarray(idx), device=self.device)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"GPT: idx must be integer token ids of shape (batch, seq), got {ids.dtype} {tuple(ids.shape)}.")
        return ids.astype(np.int64, copy=False)

    def forward(self, idx: Any, targets: Any = None, cache: Any = None) -> tuple[Tensor, Tensor | None]:
        """idx (B, T) token ids -> (logits (B, T, vocab_size), loss).

        loss  -- the mean cross-entropy of the logits against targets (B, T), or None
        cache -- a KVCache (section 8) holding `cache.length` earlier tokens, or None: the
                 tokens of idx then sit at positions cache.length … cache.length + T − 1 and
                 block i uses cache.layers[i]
        Steps (ids is given: idx as an int64 (B, T) array; past = cache.length or 0):
        x = token_embedding(ids) + position_embedding(positions past … past + T − 1), dropout;
        each block in order; ln_f; logits = x @ the head, where the head is
        token_embedding.weight.transpose() itself when tied (else lm_head.weight), computed on
        x flattened to (B·T, E) and reshaped to (B, T, vocab_size); the loss is
        cross_entropy(logits, targets) when targets are given.
        """
        ids = self._token_ids(idx)
        past = 0 if cache is None else cache.length
        if past + ids.shape[1] > self.max_seq_len:
            raise ValueError(
                f"GPT: {past} cached + {ids.shape[1]} new tokens exceed max_seq_len={self.max_seq_len}; "
                "crop the input to the last max_seq_len tokens."
            )
        ### BEGIN SOLUTION
        xp = array_module(ids)
        positions = xp.arange(past, past + ids.shape[1])
        x = self.dropout(self.token_embedding(ids) + self.position_embedding(positions))
        for i, block in enumerate(self.blocks):
            x = block(x, cache=None if cache is None else cache.layers[i])
        x = self.ln_f(x)
        head = self.token_embedding.weight.transpose() if self.lm_head is None else self.lm_head.weight
        logits = (x.reshape(-1, self.embed_dim) @ head).reshape(*ids.shape, self.vocab_size)
        loss = None if targets is None else cross_entropy(logits, targets)
        return logits, loss
        ### END SOLUTION

    def attention_maps(self, idx: Any, layer: int = -1) -> np.ndarray:
        """Attention weights (B, H, T, T) of block `layer` for the tokens idx (B, T), as a NumPy array
        (eval mode, no gradients): what module 12's plot_attention_heads draws."""
        was_training = self.training
        self.eval()
        try:
            with no_grad():
                ids = self._token_ids(idx)
                positions = array_module(ids).arange(ids.shape[1])
                x = self.token_embedding(ids) + self.position_embedding(positions)
                chosen = range(self.num_layers)[layer]
                for block in self.blocks[:chosen]:
                    x = block(x)
                return to_host(self.blocks[chosen].attn(self.blocks[chosen].ln1(x))[1])
        finally:
            self.train(was_training)

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, embed_dim={self.embed_dim}, num_layers={self.num_layers}, "
                f"num_heads={self.num_heads}, max_seq_len={self.max_seq_len}")


# %%
class ListKVCache:
    """A whole model's cache in the simplest form: one ListCache per block (section 8 builds the real one)."""

    def __init__(self, num_layers: int):
        self.layers = [ListCache() for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length


def check_initialisation(model: GPT) -> None:
    """GPT-2's initialisation, parameter by parameter (std measured on the model's own draws)."""
    L = model.num_layers
    for name, p in model.named_parameters():
        values = p.numpy()
        if name.endswith(("attn.out_proj.weight", "mlp.proj.weight")):
            wanted = 0.02 / math.sqrt(2 * L)
            assert abs(values.std() / wanted - 1) < 0.1, (
                f"{name} has std {values.std():.4f}, expected {wanted:.4f}: the residual projections (attn.out_proj, "
                f"mlp.proj) are drawn with std 0.02/sqrt(2·num_layers)")
        elif p.ndim == 2:
            assert abs(values.std() / 0.02 - 1) < 0.1 and abs(values.mean()) < 0.005, (
                f"{name} has mean {values.mean():.4f} and std {values.std():.4f}, expected 0 and 0.02: every Linear "
                "weight and both embedding tables start as normal(0, 0.02)")
        elif name.endswith("bias"):
            assert np.all(values == 0), \
                f"{name} must start at 0 (every Linear bias is set to 0), got values up to {np.abs(values).max():.3g}"
        else:
            assert np.all(values == 1), f"{name} (a LayerNorm weight) must start at 1, got {values[:4]} ..."


def gpt_by_hand(model: GPT, idx: np.ndarray, with_ln_f: bool = True, with_positions: bool = True) -> np.ndarray:
    """GPT's logits from its own parts: embeddings, the blocks, ln_f, the tied head (switches: classic mistakes)."""
    h = model.token_embedding.weight.numpy()[idx]
    if with_positions:
        h = h + model.position_embedding.weight.numpy()[np.arange(idx.shape[1])]
    h = Tensor(h)
    for block in model.blocks:
        h = block(h)
    h = model.ln_f(h) if with_ln_f else h
    return h.numpy() @ model.token_embedding.weight.numpy().T


def test_unit_gpt_forward():
    check_initialisation(GPT(50, 64, 3, 4, 32, seed=0))
    model = GPT(vocab_size=11, embed_dim=16, num_layers=2, num_heads=2, max_seq_len=8, seed=0)
    idx = np.random.default_rng(6).integers(0, 11, (3, 8))
    logits, loss = model(idx)
    assert logits.shape == (3, 8, 11) and logits.dtype == np.float32, \
        f"logits must be (B, T, vocab_size) = (3, 8, 11) float32, got {logits.shape} {logits.dtype}"
    assert loss is None, f"without targets the loss must be None, got {loss!r}"
    expected = gpt_by_hand(model, idx)
    if not np.allclose(logits.numpy(), expected, atol=1e-5):
        causes = {"ln_f is missing: apply the final LayerNorm before the head": gpt_by_hand(model, idx, with_ln_f=False),
                  "the position embedding is missing: add position_embedding(positions 0 ... T-1)":
                      gpt_by_hand(model, idx, with_positions=False)}
        cause = next((c for c, wrong in causes.items() if np.allclose(logits.numpy(), wrong, atol=1e-5)), "")
        raise AssertionError(
            f"GPT's logits differ by up to {np.abs(logits.numpy() - expected).max():.3g} from the model computed by "
            "hand: token_embedding(ids) + position_embedding(0 ... T-1), the blocks in order, ln_f, then @ "
            "token_embedding.weight transposed" + (f"; it matches a known mistake: {cause}" if cause else ""))
    _, loss = model(idx, targets=np.random.default_rng(7).integers(0, 11, (3, 8)))
    assert loss.shape == () and abs(loss.item() - math.log(11)) < 0.1, (
        f"a fresh model's loss must be a scalar close to ln(11) = {math.log(11):.3f}, got {loss.shape} "
        f"{loss.numpy()}: cross_entropy(logits, targets), the mean over every position")
    assert model.lm_head is None, "with tie_weights=True (the default) there is no lm_head: the head is the token table"
    count = count_parameters(model)
    wanted = (11 + 8) * 16 + 2 * (12 * 16 * 16 + 13 * 16) + 2 * 16
    assert count == wanted, f"GPT(11, 16, 2, 2, 8) must have {wanted} parameters, got {count}"
    model(np.zeros((1, 8), dtype=np.int64), targets=np.ones((1, 8), dtype=np.int64))[1].backward()
    grad = model.token_embedding.weight.grad
    assert grad is not None and np.abs(grad.numpy()[2:]).sum() > 0, (
        "token rows never looked up got no gradient: the output layer must use token_embedding.weight itself "
        "(transposed), not a copy, so the tied table also learns from the head")
    zeros = Tensor(np.zeros((3, 8, 16), np.float32))
    for block in model.blocks:
        zeros = block(zeros)
    dropped = model.ln_f(zeros).numpy() @ model.token_embedding.weight.numpy().T
    model.dropout = DropEverything()  # every embedding dropped: the blocks see zeros
    assert np.allclose(model(idx)[0].numpy(), dropped, atol=1e-5), \
        "apply self.dropout to token_embedding(ids) + position_embedding(positions), before the first block"
    model.dropout = Dropout(0.0)
    positions = GPT(9, 8, 1, 2, 8, seed=1, dtype=np.float64)
    for block in positions.blocks:  # sub-layers that write nothing: a token's logits depend on its id and position
        for lin in (block.attn.out_proj, block.mlp.proj):
            lin.weight.data = np.zeros_like(lin.weight.data)
    ids = np.random.default_rng(5).integers(0, 9, (1, 6))
    full, cache = positions(ids)[0].numpy(), ListKVCache(1)
    with no_grad():
        positions(ids[:, :4], cache=cache)
        step = positions(ids[:, 4:5], cache=cache)[0].numpy()
    assert np.allclose(step[:, 0], full[:, 4], atol=1e-12), (
        "with a cache holding `past` tokens, the new tokens sit at positions past ... past + T - 1: look the position "
        "embedding up at xp.arange(cache.length, cache.length + T), and hand block i cache.layers[i]")
    print("✓ GPT forward: initialisation, the model's parts in order, loss near ln(11), tied head, parameter count, "
          "dropout, positions after a cache")


test_unit_gpt_forward()

# %% [markdown]
# The parameter count in the test: `(V + max_seq_len)·E` for the two tables, per block
# `12·E²` weights (attention `4E²`, MLP `8E²`) plus `13·E` biases and LayerNorm parameters
# (`3E` in attention, `4E + E` in the MLP, `4E` in the two LayerNorms), and `2E` for `ln_f`.
# The output layer adds nothing: it is the token table.
#
# ## 6. Checks to make before training anything
#
# **The loss of a fresh model.** Predict first: a freshly initialised GPT with a vocabulary
# of 65 characters, what loss should it have? With weights of size 0.02 every logit is close
# to 0, the softmax is close to uniform, each target gets probability `≈ 1/V`, and the
# cross-entropy is `−ln(1/V) = ln V`. For `V = 65` that is `4.17`. A fresh model far above
# `ln V` is confidently wrong before it has learned anything — a sign of a bad
# initialisation (here: weights of standard deviation 1), and it will waste its first
# hundreds of steps unlearning it. Make this check on every new model.

# %%
V = 65
fresh = GPT(V, 64, 2, 4, 32, seed=0)
idx, targets = np.random.default_rng(7).integers(0, V, (2, 8, 32))
print(f"ln({V}) = {math.log(V):.3f}; fresh GPT: {fresh(idx, targets=targets)[1].item():.3f}")
for p in fresh.parameters():
    if p.ndim >= 2:
        p.data = np.random.default_rng(8).standard_normal(p.shape).astype(np.float32)
print(f"the same GPT with weights of std 1 instead of 0.02: {fresh(idx, targets=targets)[1].item():.2f}")

# %% [markdown]
# **Causality.** A language model predicts token `t + 1` from tokens `0 … t`. If the logits
# at position `t` could see token `t + 1`, training would be trivial (copy the next token)
# and generation would be garbage. The check: change one token, and no logit *before* it may
# change.

# %%
def test_unit_causality():
    model = GPT(13, 16, 2, 2, 10, seed=1, dtype=np.float64)
    idx = np.random.default_rng(9).integers(0, 13, (2, 10))
    base = model(idx)[0].numpy()
    for t in (0, 4, 9):
        changed = idx.copy()
        changed[:, t] = (changed[:, t] + 1) % 13
        out = model(changed)[0].numpy()
        gap = np.abs(out[:, :t] - base[:, :t]).max() if t else 0.0
        assert gap <= 1e-12, (f"changing token {t} changed a logit before position {t} (by up to {gap:.3g}): a "
                              "position may only see itself and earlier tokens; the attention must be causal")
        assert not np.allclose(out[:, t], base[:, t]), \
            f"changing token {t} did not change the logits at position {t}: each position must see its own token"
    print("✓ causality: changing token t changes no logit before t")


test_unit_causality()

# %% [markdown]
# ### A first training run
#
# A tiny GPT on a few lines of text, with AdamW (module 06): the loss starts at `ln V` and
# falls as the model learns which characters follow which. (The milestone trains the real
# thing; this is a few seconds.)

# %%
from tinytorch.core.optimizers import AdamW

text = ("First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. "
        "First Citizen: You are all resolved rather to die than to famish? All: Resolved. resolved. ") * 4
chars = sorted(set(text))
encode = lambda s: [chars.index(c) for c in s]
decode = lambda ids: "".join(chars[int(i)] for i in ids)
data = np.array(encode(text))
tiny = GPT(len(chars), 32, 2, 4, 32, seed=0)
optimizer = AdamW(tiny.parameters(), lr=3e-3, weight_decay=0.0)
batch_rng = np.random.default_rng(10)
for step in range(151):
    starts = batch_rng.integers(0, len(data) - 33, 8)
    x = np.stack([data[s:s + 32] for s in starts])
    y = np.stack([data[s + 1:s + 33] for s in starts])
    _, loss = tiny(x, targets=y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step:3d}: loss {loss.item():.3f}  (ln V = {math.log(len(chars)):.3f})")

# %% [markdown]
# ## 7. From logits to text: temperature and top-k
#
# The last position's logits `z` (one per token of the vocabulary) become a distribution,
# and the next token is *drawn* from it:
#
# * **temperature** `τ`: `p = softmax(z / τ)`. Dividing the logits by `τ < 1` widens the
#   gaps between them and sharpens the distribution (safer, more repetitive text); `τ > 1`
#   flattens it (more surprising, more mistakes). `τ → 0` is greedy decoding (always the
#   most likely token): we treat `temperature=0` as exactly that. The division must happen
#   *before* the softmax: dividing the probabilities by `τ` and renormalising changes
#   nothing at all.
# * **top-k**: keep only the `k` largest logits (set the others to `−∞` before the softmax),
#   so a long tail of unlikely tokens can never be drawn. Ties with the `k`-th largest are
#   kept (as nanoGPT does), so with distinct logits exactly `k` tokens remain.
#
# Drawing: given `p` and a uniform number `u` in `[0, 1)`, the token is the first index
# whose cumulative probability exceeds `u` (the inverse of the CDF). All of this runs on the
# host in float64: it is `B × V` numbers, and float64 makes the draw the same whether the
# logits came from a cached or an uncached forward pass (section 9).

# %%
#| export
def _check_sampling(owner: str, logits: np.ndarray, temperature: Any, top_k: Any,
                    greedy_ok: bool) -> tuple[float, int | None]:
    """(temperature, top_k) checked; ValueError when the logits hold no distribution to draw from.

    Without these checks a NaN anywhere (a diverged model's weights, a NaN temperature) makes
    every cumulative probability NaN, no comparison is true, and "the first token whose cdf
    exceeds u" is token 0, every time, without a word.
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise TypeError(f"{owner}: temperature must be a number, got {type(temperature).__name__}.")
    if not temperature >= 0 or (temperature == 0 and not greedy_ok):  # `not >=` is also true for NaN
        raise ValueError(f"{owner}: temperature must be {'>= 0' if greedy_ok else '> 0'}, got {temperature}.")
    top_k = None if top_k is None else as_int(top_k, f"{owner}: top_k", minimum=1)
    if logits.ndim != 2:
        raise ValueError(f"{owner}: logits must be (B, V), got shape {logits.shape}.")
    if np.isnan(logits).any():
        row = int(np.flatnonzero(np.isnan(logits).any(axis=-1))[0])
        raise ValueError(f"{owner}: the logits of row {row} contain NaN (did training diverge? check the loss and "
                         "the weights): there is no distribution to sample from.")
    if np.isposinf(logits).any():
        raise ValueError(f"{owner}: the logits contain +inf: there is no distribution to sample from.")
    dead = np.isneginf(logits).all(axis=-1)
    if dead.any():
        raise ValueError(f"{owner}: every logit of row {int(np.flatnonzero(dead)[0])} is -inf: no token can be drawn.")
    if temperature > 0:
        with np.errstate(over="ignore"):
            scaled = logits.astype(np.float64) / temperature
        if np.isposinf(scaled).any():
            raise ValueError(f"{owner}: temperature {temperature} is so small that logits / temperature overflows; "
                             "use temperature=0 for greedy decoding.")
    return float(temperature), top_k


def next_token_probs(logits: Any, temperature: float = 1.0, top_k: int | None = None) -> np.ndarray:
    """(B, V) logits (Tensor or array) -> (B, V) float64 NumPy probabilities of the next token.

    softmax(logits / temperature) after keeping only the top_k largest logits of each row
    (the others get probability 0; ties with the k-th largest are kept). temperature must be
    > 0 here (sample_next_token handles 0 as greedy, and its given checks refuse < 0 before
    calling this); top_k None or >= vocabulary: keep all. The given checks refuse what has
    no distribution (`_check_logits`: NaN, +inf, a row of only -inf, an overflowing
    temperature) and a top_k that is not a whole number >= 1.
    """
    z = to_host(logits).astype(np.float64)
    temperature, top_k = _check_sampling("next_token_probs", z, temperature, top_k, greedy_ok=False)
    ### BEGIN SOLUTION
    z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth_largest = np.partition(z, -top_k, axis=-1)[..., [-top_k]]
        z = np.where(z < kth_largest, -np.inf, z)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)
    ### END SOLUTION


def sample_next_token(logits: Any, temperature: float = 1.0, top_k: int | None = None,
                      rng: Any = None) -> np.ndarray:
    """(B, V) logits -> (B,) int64 NumPy array: one token per row.

    temperature 0: the argmax of each row (greedy; rng unused). Otherwise one uniform draw
    per row from `rng` (a NumPy Generator: rng.random((B, 1))), scaled by the row's total
    probability (1 up to rounding), and the first token whose cumulative probability
    (next_token_probs, cumsum) exceeds it. Like torch.multinomial, the given checks raise
    ValueError for logits with no distribution to draw from (NaN anywhere, as from a
    diverged model, +inf, or a row whose every logit is -inf), for a temperature that is
    NaN or < 0, and for a top_k that is not a whole number >= 1.
    """
    temperature, top_k = _check_sampling("sample_next_token", to_host(logits), temperature, top_k, greedy_ok=True)
    rng = make_rng(rng)
    ### BEGIN SOLUTION
    if temperature == 0:
        return to_host(logits).argmax(axis=-1).astype(np.int64)
    cdf = next_token_probs(logits, temperature, top_k).cumsum(axis=-1)
    u = rng.random((cdf.shape[0], 1)) * cdf[:, -1:]  # below the total, so some token's cdf exceeds it
    return (cdf <= u).sum(axis=-1).astype(np.int64)  # tokens of probability 0 never cross u
    ### END SOLUTION


# %%
logits = np.array([[2.0, 1.0, 0.5, 0.0, -1.0]])
for temperature in (0.5, 1.0, 2.0):
    print(f"temperature {temperature}: {next_token_probs(logits, temperature).round(3)[0]}")
print("top_k=2:        ", next_token_probs(logits, 1.0, top_k=2).round(3)[0])
draws = sample_next_token(np.repeat(logits, 10000, axis=0), 1.0, rng=np.random.default_rng(0))
print("10,000 draws:   ", (np.bincount(draws, minlength=5) / 10000).round(3), "(close to the temperature-1 row)")
print("greedy:         ", sample_next_token(logits, temperature=0))


# %%
def test_unit_sampling():
    z = np.array([[2.0, 1.0, 0.5, 0.0, -1.0], [0.0, 3.0, 0.0, 1.0, 0.0]])
    softmax_rows = lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)  # noqa: E731
    got = next_token_probs(z, 0.5)
    if not np.allclose(got, softmax_rows(z / 0.5)):
        hint = {"the temperature divides the logits before the softmax (dividing the probabilities afterwards and "
                "renormalising changes nothing)": softmax_rows(z),
                "divide the logits by the temperature, do not multiply them": softmax_rows(z * 0.5)}
        cause = next((c for c, wrong in hint.items() if np.allclose(got, wrong)), "softmax(logits / temperature)")
        raise AssertionError(f"next_token_probs(z, temperature=0.5): expected {softmax_rows(z / 0.5)[0].round(4)} "
                             f"for the first row, got {np.asarray(got)[0].round(4)}: {cause}")
    p = next_token_probs(z, 1.0, top_k=2)
    kept = (p > 0).sum(-1)
    assert np.array_equal(kept, [2, 2]), (f"top_k=2 must leave exactly 2 tokens per row with non-zero probability "
                                          f"(the 2 largest logits), got {kept.tolist()}")
    assert np.allclose(p.sum(-1), 1), f"after top-k each row must still sum to 1, got {p.sum(-1)}"
    assert p[0, 0] > p[0, 1] > 0 and p[1, 1] > p[1, 3] > 0, \
        f"top_k=2 must keep the two LARGEST logits of each row (tokens 0, 1 and 1, 3), got probabilities\n{p.round(3)}"
    ties = next_token_probs([[1.0, 1.0, 0.0]], 1.0, top_k=1)
    assert np.array_equal(ties > 0, [[True, True, False]]), \
        f"tokens tied with the k-th largest logit are kept: top_k=1 of [1, 1, 0] keeps two, got {ties.round(3)}"
    greedy = sample_next_token(z, 0)
    assert np.array_equal(greedy, [0, 1]), f"temperature 0 is greedy, the argmax of each row [0, 1]; got {greedy}"
    draws = sample_next_token(np.repeat(z[:1], 20000, axis=0), 1.0, top_k=3, rng=np.random.default_rng(1))
    freq, probs = np.bincount(draws, minlength=5) / 20000, next_token_probs(z[:1], 1.0, 3)[0]
    assert np.allclose(freq, probs, atol=0.015), (
        f"20,000 draws came out with frequencies {freq.round(3)}, but the probabilities are {probs.round(3)}: the "
        "draw is the first token whose cumulative probability exceeds u = rng.random((B, 1)) · total")
    first, again = (sample_next_token(z, 1.0, rng=np.random.default_rng(2)) for _ in range(2))
    assert np.array_equal(first, again), f"the same generator must give the same draw, got {first} then {again}"
    print("✓ sampling: temperature before softmax, top-k keeps k, greedy at 0, draws follow the probabilities")


test_unit_sampling()

# %% [markdown]
# ## 8. The KV cache
#
# Generation is a loop: run the model on the tokens so far, sample one token, append it,
# repeat. Without a cache every step re-runs the *whole* prefix. Count the work of step `T`
# (the prefix has `T` tokens) in one layer of width `E`:
#
# | | without a cache | with a cache |
# |---|---|---|
# | projections and MLP | `T` tokens × `O(E²)` | 1 token × `O(E²)` |
# | attention scores and weighted sum | `T × T` pairs × `O(E)`: **O(T²·E)** | 1 query × `T` keys: **O(T·E)** |
#
# The keys and values of tokens `0 … T − 1` are the same at every step — a token's key
# depends only on the tokens up to it, which never change — so recomputing them is wasted
# work. A **KV cache** keeps them: each step computes the query, key and value of the *new*
# token only, appends the key and value, and lets that one query attend to all cached keys.
# Per token the attention cost drops from O(T²) to O(T) (and the rest from O(T) to O(1));
# over a whole generation of `n` tokens, from O(n³) to O(n²).
#
# **Memory.** Per sequence, each layer keeps a key and a value (2) per head per position,
# each `head_dim` numbers:
#
# $$\text{bytes} = 2 \cdot \text{layers} \cdot \text{heads} \cdot T \cdot \text{head\_dim} \cdot \text{bytes per number}$$
#
# GPT-2 small (12 layers, 12 heads of 64) at `T = 1024` in float32: `2·12·12·1024·64·4 =`
# 72 MiB per sequence. Llama-2-7B (32 layers, 32 heads of 128) at 4096 tokens in float16:
# 2 GiB per sequence — the cache, not the weights, is what limits how many users a server
# can answer at once.
#
# Our cache is **preallocated**: one `(B, H, max_len, D)` array for keys and one for values
# per layer, filled from the left, with `length` counting the filled positions. Appending
# writes into the next free slots, an O(new tokens) copy, where `np.concatenate` would copy
# the whole cache at every step.
#
# `LayerKVCache.update(k, v)` (you write it) stores the new keys and values `(B, H, n, D)` at
# positions `length … length + n − 1`, advances `length` by `n`, and returns *all* keys and
# values so far as Tensors of shape `(B, H, length, D)` — views of the buffers, no copies
# (`Tensor(self.keys[:, :, :length])` wraps the view as it is: module 01's `to_array` copies
# only to change the dtype or the device).
# The cache is for generation: gradients do not flow through it (it refuses tensors that
# require gradients unless they come in under `no_grad()`). `KVCache` (given) holds one
# `LayerKVCache` per block.

# %%
#| export
class LayerKVCache:
    """Keys and values computed so far by one attention layer, for B sequences.

    keys, values -- preallocated arrays (B, H, max_len, D) in the model's dtype and device
    length       -- number of positions filled, 0 … max_len (the same for every sequence)
    update(k, v) -- append (B, H, n, D) keys and values; returns all of them so far
    """

    def __init__(self, batch_size: int, num_heads: int, max_len: int, head_dim: int,
                 dtype: Any = np.float32, device: str | None = None):
        shape = (int(batch_size), int(num_heads), int(max_len), int(head_dim))
        self.keys = to_array(np.zeros(shape, dtype=dtype), device=device)
        self.values = to_array(np.zeros(shape, dtype=dtype), device=device)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.keys.shape[2]

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store k and v (B, H, n, D) at positions length … length + n − 1 and advance length by n.

        Returns (keys, values): Tensors of shape (B, H, length, D) (the new length), views of
        the buffers holding every position stored so far, in order.
        """
        if GradMode.enabled and (k.requires_grad or v.requires_grad):
            raise RuntimeError("LayerKVCache: the cache is for generation; run the model under no_grad() "
                               "(gradients do not flow through cached keys and values).")
        expected = self.keys.shape[:2] + self.keys.shape[3:]
        for name, t in (("keys", k), ("values", v)):
            if t.ndim != 4 or t.shape[:2] + t.shape[3:] != expected:
                raise ValueError(f"LayerKVCache: new {name} must have shape (B, H, n, D) = "
                                 f"({expected[0]}, {expected[1]}, n, {expected[2]}), got {t.shape}.")
        if self.length + k.shape[2] > self.max_len:
            raise ValueError(f"LayerKVCache: {self.length} stored + {k.shape[2]} new positions exceed "
                             f"max_len={self.max_len}.")
        ### BEGIN SOLUTION
        start, stop = self.length, self.length + k.shape[2]
        self.keys[:, :, start:stop] = k.data
        self.values[:, :, start:stop] = v.data
        self.length = stop
        return Tensor(self.keys[:, :, :stop]), Tensor(self.values[:, :, :stop])
        ### END SOLUTION


class KVCache:
    """One LayerKVCache per transformer block: what GPT.forward(idx, cache=...) reads and extends."""

    def __init__(self, num_layers: int, batch_size: int, num_heads: int, max_len: int, head_dim: int,
                 dtype: Any = np.float32, device: str | None = None):
        self.layers = [LayerKVCache(batch_size, num_heads, max_len, head_dim, dtype, device)
                       for _ in range(num_layers)]

    @property
    def length(self) -> int:
        """Tokens stored (every layer holds the same number once a forward pass is complete)."""
        return self.layers[0].length

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)


@patch
def make_cache(self: GPT, batch_size: int) -> KVCache:
    """An empty KVCache for `batch_size` sequences of up to max_seq_len tokens, in the model's dtype and device."""
    return KVCache(self.num_layers, batch_size, self.num_heads, self.max_seq_len,
                   self.embed_dim // self.num_heads, self.dtype, self.device)


# %%
def test_unit_kv_cache():
    cache = LayerKVCache(batch_size=2, num_heads=3, max_len=6, head_dim=4, dtype=np.float64)
    rng = np.random.default_rng(11)
    k1, v1, k2, v2 = (rng.standard_normal((2, 3, n, 4)) for n in (2, 2, 1, 1))
    keys, values = cache.update(Tensor(k1), Tensor(v1))
    assert cache.length == 2, f"after storing 2 positions, length must be 2, got {cache.length}: advance it by n"
    assert keys.shape == (2, 3, 2, 4) and np.array_equal(keys.numpy(), k1), (
        f"after the first update the keys must be the 2 stored, (2, 3, 2, 4), got shape {keys.shape}: store them at "
        "positions length ... length + n - 1 (0 and 1 here) and return the buffers up to the new length")
    assert np.array_equal(values.numpy(), v1), "LayerKVCache.update: the new VALUES must be stored too, next to their keys"
    keys, values = cache.update(Tensor(k2), Tensor(v2))
    assert cache.length == 3, f"after storing 3 positions, length must be 3, got {cache.length}"
    assert keys.shape == (2, 3, 3, 4) and values.shape == (2, 3, 3, 4), (
        f"update returns all keys and values so far, (B, H, length, D) = (2, 3, 3, 4); got {keys.shape} and "
        f"{values.shape}")
    assert np.array_equal(keys.numpy(), np.concatenate([k1, k2], 2)), \
        "keys must be stored at positions length ... length + n - 1, old ones first, new ones after them"
    assert np.array_equal(values.numpy(), np.concatenate([v1, v2], 2)), \
        "LayerKVCache.update: the new VALUES must be stored too, at the same positions as their keys"
    assert np.shares_memory(keys.numpy(), cache.keys) and np.shares_memory(values.numpy(), cache.values), \
        "update returns views of the preallocated buffers (Tensor(self.keys[:, :, :length])), not copies"
    model = GPT(10, 16, 3, 2, 12)
    nbytes, wanted = model.make_cache(5).nbytes, 2 * 3 * 2 * 12 * 8 * 4 * 5
    assert nbytes == wanted, f"the cache of 5 sequences must take 2·layers·heads·T·head_dim·bytes·5 = {wanted}, got {nbytes}"
    print("✓ KV cache: appends in order, returns views, memory = 2·layers·heads·T·head_dim·bytes")


test_unit_kv_cache()

# %% [markdown]
# ## 9. Generation
#
# `generate(idx, max_new_tokens, temperature=1.0, top_k=None, seed=None, use_cache=True)`
# returns the prompt followed by `max_new_tokens` new tokens. The given part converts the
# prompt to a `(B, T)` int64 NumPy array `tokens` (a 1-D prompt is a batch of one, and comes
# back 1-D), makes the generator `rng = np.random.default_rng(seed)`, switches the model to
# eval mode (no dropout) and gradients off, and restores the mode at the end. You write the
# loop; each step:
#
# * **without a cache:** run the model on the last `max_seq_len` tokens (a longer sequence
#   is cropped, as nanoGPT does: the model has no position beyond its context);
# * **with a cache:** the first step (and whenever the cache is full, see below) makes a new
#   cache (`self.make_cache(B)`) and runs the model on the last `max_seq_len` tokens with it
#   (the "prefill"); every other step runs the model on the newest token alone,
#   `tokens[:, -1:]`, with the cache;
# * take the logits of the last position, `sample_next_token(..., temperature, top_k, rng)`,
#   and append the new tokens to `tokens`.
#
# **When the cache is full.** Past `max_seq_len` tokens the uncached model sees the last
# `max_seq_len` tokens at positions `0 … max_seq_len − 1`: every token has moved one
# position to the left, so every cached key (computed with the old positions) is stale. We
# rebuild the cache from the last `max_seq_len` tokens: before a step, when
# `cache.length == max_seq_len`, start a new cache and prefill it. Both paths then see the same context
# and give the same tokens; the price is that beyond `max_seq_len` every step is a full
# forward pass again, exactly what the uncached model pays. (Models whose positions are
# relative, such as rotary embeddings, can instead keep a rolling window of the cache.)

# %%
#| export
@patch
def generate(self: GPT, idx: Any, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             seed: int | None = None, use_cache: bool = True) -> Tensor:
    """The prompt idx ((B, T) or (T,) token ids) followed by max_new_tokens sampled tokens.

    temperature -- 0 is greedy; top_k -- sample among the k most likely tokens only;
    seed -- the draws come from np.random.default_rng(seed);
    use_cache -- keep the keys and values between steps (same tokens, less work).
    Prompts longer than max_seq_len are cropped to their last max_seq_len tokens for the
    model (the result still starts with the whole prompt). Returns an int64 Tensor, (B, T + n)
    or (T + n,) like the prompt.
    """
    tokens = token_ids(to_host(idx) if hasattr(idx, "shape") else idx, self.vocab_size)  # int64, on the host: 2.5, True, an id >= vocab_size refused
    squeeze = tokens.ndim == 1
    tokens = tokens[None, :] if squeeze else tokens
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"generate: idx must be a non-empty (T,) or (B, T) array of token ids, got {tokens.shape}.")
    max_new_tokens = as_int(max_new_tokens, "generate: max_new_tokens", minimum=0)
    rng = np.random.default_rng(seed)
    was_training = self.training
    self.eval()
    try:
        with no_grad():
            ### BEGIN SOLUTION
            cache = None
            for _ in range(int(max_new_tokens)):
                if not use_cache:
                    logits, _ = self(tokens[:, -self.max_seq_len:])
                elif cache is None or cache.length == self.max_seq_len:
                    cache = self.make_cache(tokens.shape[0])
                    logits, _ = self(tokens[:, -self.max_seq_len:], cache=cache)
                else:
                    logits, _ = self(tokens[:, -1:], cache=cache)
                new = sample_next_token(logits.data[:, -1], temperature, top_k, rng)
                tokens = np.concatenate([tokens, new[:, None]], axis=1)
            ### END SOLUTION
    finally:
        self.train(was_training)
    return Tensor(tokens[0] if squeeze else tokens)


# %% [markdown]
# ### Test: the cache changes the cost, never the result
#
# Two checks. The logits: feeding a sequence one token at a time through a cache must give,
# at every position, the logits of one full forward pass. And the tokens: `generate` with
# and without the cache, same seed, must give the same tokens — including past
# `max_seq_len`, where the cache is rebuilt.
#
# How close is "the same"? The cached step computes one row of scores (`1 × T`), the full
# pass all of them at once (`T × T`); BLAS sums in a different order for the two shapes, so
# the results differ in the last bits: about `1e-15` relative in float64, a few units in the
# last place (`~1e-6`) in float32. The tokens are identical because a different draw would
# need the uniform number to fall within that distance of a boundary of the cumulative
# distribution, and the draw is made in float64 from the same generator.

# %%
def cached_logits(model: GPT, idx: np.ndarray, chunks: list[int]) -> np.ndarray:
    """Logits of idx computed through a cache, feeding `chunks` tokens at a time."""
    cache, out, start = model.make_cache(len(idx)), [], 0
    with no_grad():
        for n in chunks:
            out.append(model(idx[:, start:start + n], cache=cache)[0].numpy())
            start += n
    return np.concatenate(out, axis=1)


def generated(model: GPT, prompt: Any, n: int, **kwargs: Any) -> np.ndarray:
    """model.generate(...) as an array; a ValueError (a sequence past max_seq_len) becomes a failure that says why."""
    try:
        return model.generate(prompt, n, **kwargs).numpy()
    except ValueError as err:
        cached = kwargs.get("use_cache", True)
        raise AssertionError(
            f"generate({'with' if cached else 'without'} the cache) failed past max_seq_len ({err}): " + (
                "when the cache is full (cache.length == max_seq_len), make a new cache and prefill it with the "
                "last max_seq_len tokens" if cached else
                "crop a prompt longer than max_seq_len: feed the model only the last max_seq_len tokens")) from None


def test_unit_generate():
    for dtype, tol in ((np.float64, 1e-10), (np.float32, 1e-4)):
        model = GPT(17, 16, 2, 2, 12, seed=3, dtype=dtype)
        idx = np.random.default_rng(12).integers(0, 17, (2, 10))
        with no_grad():
            full = model(idx)[0].numpy()
        for chunks in ([1] * 10, [4, 1, 1, 3, 1]):
            gap = np.abs(cached_logits(model, idx, chunks) - full).max()
            assert gap <= tol, (f"{np.dtype(dtype).name} logits fed {chunks} tokens at a time through the KV cache "
                                f"differ from the full forward pass by {gap:.1e} (allowed {tol:.0e})")
    prompt = np.random.default_rng(13).integers(0, 17, (2, 5))
    with_cache = generated(model, prompt, 20, seed=0)   # 25 tokens: past max_seq_len=12
    without = generated(model, prompt, 20, seed=0, use_cache=False)
    assert with_cache.shape == (2, 25) and np.array_equal(with_cache[:, :5], prompt), \
        f"generate returns the prompt (2, 5) followed by 20 new tokens: (2, 25), got {with_cache.shape}"
    with no_grad():
        last = model(without[:, :5])[0].numpy()[:, -1]
    greedy = generated(model, prompt, 1, temperature=0, use_cache=False)[:, -1]
    assert np.array_equal(greedy, last.argmax(-1)), (f"greedy generation must pick the argmax of the logits of the "
                                                      f"last position ({last.argmax(-1)}), got {greedy}")
    assert np.array_equal(with_cache[:, :12], without[:, :12]), \
        "cached and uncached generation must give the same tokens (within max_seq_len)"
    assert np.array_equal(with_cache, without), (
        "past max_seq_len cached and uncached generation must still agree: rebuild the cache from the last "
        "max_seq_len tokens when it is full")
    one = model.generate(list(prompt[0]), 3, temperature=0)
    assert one.shape == (8,) and one.dtype == np.int64, \
        f"a 1-D prompt of 5 gives a 1-D int64 result of 8 tokens, got {one.shape} {one.dtype}"
    assert model.training, "generate must switch the model back to the training mode it found"
    long_prompt = np.random.default_rng(14).integers(0, 17, 30)
    out, cropped = generated(model, long_prompt, 4, seed=1), generated(model, long_prompt[-12:], 4, seed=1)
    assert np.array_equal(out[:30], long_prompt) and np.array_equal(out[30:], cropped[12:]), (
        "a prompt longer than max_seq_len: the result starts with the whole prompt, and the model sees only its "
        "last max_seq_len tokens")
    noisy = GPT(17, 16, 2, 2, 12, dropout=0.5, seed=4)
    noisy_cached, noisy_plain = generated(noisy, prompt, 10, seed=2), generated(noisy, prompt, 10, seed=2, use_cache=False)
    assert np.array_equal(noisy_cached, noisy_plain), (
        "GPT(dropout=0.5): cached and uncached generation differ. generate runs in eval mode, where dropout does "
        "nothing; the cached path must pass training=self.training to scaled_dot_product_attention")
    assert noisy.training, "generate must switch the model back to training mode afterwards"
    print("✓ generate: cached logits = full logits, cached tokens = uncached tokens (dropout too), prompt cropped")


test_unit_generate()

# %% [markdown]
# ### Predict, then run: how much does the cache save?
#
# A GPT of width 64 with 2 layers and a context of 320 generates 24 tokens after a prompt
# of 32 and of 256 tokens. Predict: how many tokens per second with and without the cache,
# and how does the ratio change from the short prompt to the long one? (Per token, the
# uncached model processes the whole prefix: about `T` times the work of the cached one,
# and more for attention.)

# %%
def tokens_per_second(model: GPT, prompt_length: int, new_tokens: int, use_cache: bool) -> float:
    prompt = np.random.default_rng(15).integers(0, model.vocab_size, (1, prompt_length))
    start = time.perf_counter()
    model.generate(prompt, new_tokens, seed=0, use_cache=use_cache)
    return new_tokens / (time.perf_counter() - start)


speed_model = GPT(65, 64, 2, 4, 320, seed=0)
print(f"{'prompt':>6} | {'no cache':>12} | {'cache':>12} | speed-up")
with threadpool_limits(limits=1):
    for prompt_length in (32, 256):
        slow = tokens_per_second(speed_model, prompt_length, 24, use_cache=False)
        fast = tokens_per_second(speed_model, prompt_length, 24, use_cache=True)
        print(f"{prompt_length:>6} | {slow:8.0f} t/s | {fast:8.0f} t/s | {fast / slow:5.1f}x")

cache = speed_model.make_cache(1)
formula = 2 * speed_model.num_layers * speed_model.num_heads * speed_model.max_seq_len * (64 // 4) * 4
print(f"cache memory: {cache.nbytes:,} bytes; 2·layers·heads·T·head_dim·bytes = {formula:,}")
for name, layers, heads, head_dim, T, nbytes in (("GPT-2 small, fp32", 12, 12, 64, 1024, 4),
                                                ("Llama-2-7B, fp16", 32, 32, 128, 4096, 2)):
    print(f"{name:18s} at T={T}: {2 * layers * heads * T * head_dim * nbytes / 2**20:8,.0f} MiB per sequence")

# %% [markdown]
# The cached speed barely depends on the prompt (one token's work plus a dot product with
# each cached key), the uncached speed falls as the prompt grows, so the speed-up grows with
# the length. With a tiny model much of each step is Python overhead (a few hundred recorded
# operations, whatever the length), which is why the short prompt gains less than the
# FLOP count suggests. `benchmarks/gpt.py` measures the milestone's model the same way,
# next to PyTorch.
#
# Let the tiny model from section 6 write (it has seen only two sentences):

# %%
prompt = encode("First Citizen:")
for temperature, top_k in ((0, None), (0.8, 5), (1.5, None)):
    out = tiny.generate(prompt, 60, temperature=temperature, top_k=top_k, seed=0)
    print(f"temperature {temperature}, top_k {top_k}: {decode(out.numpy())!r}")

# %% [markdown]
# ## 10. Checking against PyTorch
#
# Where PyTorch is installed, `torch.nn.LayerNorm` gives the same numbers as ours (its
# weights need no transposition). The test suite compares more: a whole block and the GPT's
# loss, values and gradients, in float64 (`tests/13_transformers/test_transformer_torch.py`,
# with GELU's tanh approximation on the PyTorch side and our `(in, out)` Linear weights
# transposed into PyTorch's `(out, in)`).

# %%
try:
    import torch
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    rng = np.random.default_rng(16)
    x = rng.standard_normal((2, 5, 8))
    w, b = rng.standard_normal(8), rng.standard_normal(8)
    theirs = torch.nn.functional.layer_norm(torch.tensor(x), (8,), torch.tensor(w), torch.tensor(b))
    print(f"layer_norm vs torch: max |difference| = {np.abs(layer_norm(x, w, b).numpy() - theirs.numpy()).max():.1e}")

# %% [markdown]
# ## Summary
#
# * LayerNorm normalises each token over its features (biased variance, ε inside the root);
#   as one op its backward is `r·(ĝ − mean ĝ − x̂·mean(ĝx̂))`.
# * A block is `x + attn(ln1(x))` then `x + mlp(ln2(x))`: the residual stream carries the
#   token from bottom to top, pre-norm keeps it clean, `ln_f` normalises it at the end.
# * A GPT is embeddings + blocks + `ln_f` + a head tied to the token table; GPT-2's
#   initialisation (std 0.02, residual writers `/√(2L)`) makes a fresh model's loss `ln V`.
# * Sampling: divide the logits by the temperature, keep the top k, softmax, draw.
# * The KV cache keeps every layer's keys and values: a new token costs O(T) attention
#   instead of O(T²), memory `2·layers·heads·T·head_dim·bytes`, and the tokens do not change.
#
# ## Exercises
#
# 1. **Where the parameters are.** For the milestone's model (`GPT(65, 128, 4, 4, 64,
#    bias=False)`), count the parameters of each kind (embeddings, attention, MLP,
#    LayerNorm) with `named_parameters()`. What fraction is in the MLPs? What would untying
#    the head add?
# 2. **Break the initialisation.** Build a 12-layer GPT and compare the standard deviation
#    of the residual stream after the last block (run the blocks by hand, as
#    `attention_maps` does) with and without the `1/√(2L)` scaling. How does it grow with
#    the depth in each case?
# 3. **Temperature on a trained model.** After the milestone, generate 300 characters at
#    temperatures 0.5, 0.8, 1.0 and 1.3 from the same seed. Measure, for each, the fraction
#    of generated words that appear in the training text. Where does it start to fall?
# 4. **The cache's memory against its time.** For `speed_model`, time the cached generation
#    of 200 tokens with batch sizes 1, 8 and 32 (`generate` takes a `(B, T)` prompt). How do
#    tokens per second and `cache.nbytes` grow with the batch?
# 5. **A rolling cache.** Change a copy of `generate` so that, when the cache is full, it
#    keeps only the last `max_seq_len // 2` tokens (re-prefilling them) instead of the last
#    `max_seq_len`. How many full forward passes does that save over 500 tokens, and why do
#    the tokens now differ from `use_cache=False`?
#
# ## Questions (answer them by running your code)
#
# 1. What is the loss of a fresh `GPT(1000, 64, 2, 4, 32)`? Of the same model after you set
#    every weight matrix to standard deviation 1? Why is the first number `≈ 6.9`?
# 2. Change `cached_causal_mask` to use module 12's `is_causal` for the cached step. Which
#    test fails, and which key does a single new query see then?
# 3. Your fused `layer_norm` and `layer_norm_composed`: by how much do their gradients
#    differ in float32? In float64? Why are they not bit-identical?
# 4. How many bytes does the KV cache of the milestone's model take for one sequence of 64
#    tokens? How many floats does the model have? At what sequence length would the cache of
#    a batch of 12 sequences be as large as the model?
# 5. At prompt length 256, what fraction of an uncached generation step is attention? (Time
#    `scaled_dot_product_attention` on the shapes of one layer and compare with the step.)
