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
# # Module 12: Attention
#
# > Every token decides, for itself, which other tokens matter — and the decision is differentiable.
#
# A recurrent network reads a sentence one word at a time and squeezes everything it
# has seen into one fixed-size state. Attention drops that bottleneck: each position
# looks directly at every other position, computes how relevant each one is, and takes
# a weighted average of what they offer. One matrix multiplication scores all pairs at
# once, so the whole sequence is processed in parallel.
#
# This module is the heart of the course. You will build:
#
# | piece | what it does |
# |---|---|
# | `composed_attention` | attention from the Tensor operations you already have (matmul, masked_fill, softmax) |
# | `scaled_dot_product_attention` | the same maths as **one** recorded operation with a hand-derived, fused backward rule |
# | `create_causal_mask`, `create_padding_mask` | the two masks every language model uses |
# | `MultiHeadAttention`, `SelfAttention` | several attention heads in parallel, with learned projections |
# | `flash_attention` | exact attention tiled over key blocks with an online softmax: memory linear in length |
# | `plot_attention`, `plot_attention_heads` | heatmaps to *see* what the model attends to |
#
# Along the way you will measure, on your own code, why the scores are divided by
# `√d_k`, why softmax must subtract the row maximum, what masks do to gradients, how the
# cost grows with the sequence length, and how tiling removes the quadratic memory.

# %%
#| default_exp core.attention

# %%
#| export
from __future__ import annotations

import math
import os
import sys
from typing import Any

import numpy as np

from tinytorch.core.activations import softmax
from tinytorch.core.autograd import register_backward
from tinytorch.core.layers import Linear, Module, make_rng
from tinytorch.core.tensor import Tensor, array_module, device_of, record_op, to_array

# %% [markdown]
# ## 1. Queries, keys and values: a soft dictionary
#
# A Python dictionary maps a key to a value: you ask with a query, exactly one key
# matches, you get its value. Attention is the differentiable version of that lookup.
# Every token produces three vectors from its embedding `x`, each with its own learned
# matrix:
#
# * the **query** `q = x W_Q` — *what I am looking for*;
# * the **key** `k = x W_K` — *what I offer to be found by*;
# * the **value** `v = x W_V` — *what I hand over if I am chosen*.
#
# The match between a query and a key is their dot product; a softmax turns the matches
# of one query against all keys into weights that are positive and sum to 1; the answer
# is the weighted average of the values. No key matches "exactly", every key contributes
# a little, and because every step is smooth, gradients tell `W_Q`, `W_K` and `W_V` how to
# make better matches.
#
# A tiny dictionary with three keys shows the idea: a query close to the second key
# gets most of its value.

# %%
keys = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
values = np.array([[10.0], [20.0], [30.0]])
query = np.array([0.2, 3.0])
match = keys @ query
w = np.exp(match - match.max()) / np.exp(match - match.max()).sum()
print("matches:", match, " weights:", w.round(4), " answer:", (w @ values).round(3))

# %% [markdown]
# ## 2. The formula, one step at a time
#
# $$\text{Attention}(Q, K, V) = \text{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# With `Tq` queries, `Tk` keys/values, key width `d_k` and value width `d_v`:
#
# | step | operation | shape |
# |---|---|---|
# | inputs | `Q`, `K`, `V` | `(…, Tq, d_k)`, `(…, Tk, d_k)`, `(…, Tk, d_v)` |
# | scores | `S = Q @ Kᵀ · scale` | `(…, Tq, Tk)` — one number per (query, key) pair |
# | mask | blocked scores → a very negative number | `(…, Tq, Tk)` |
# | weights | `W = softmax(S)` over the **last** axis (the keys) | `(…, Tq, Tk)`, each row sums to 1 |
# | output | `O = W @ V` | `(…, Tq, d_v)` |
#
# `…` is any number of leading (batch, head) dimensions: matmul batches over them, so no
# Python loop over the batch, the heads or the positions is ever needed. `Tq` and `Tk`
# may differ (a decoder reading an encoder), and so may `d_k` and `d_v`.
#
# First write it from the Tensor operations of modules 01–02 (module 05 then
# differentiates it for free). Leave the masks aside for now: with `mask=None` and
# `is_causal=False` nothing is blocked; section 5 explains them and you write
# `_blocked_positions` there.

# %%
#| export
def _as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _check_qkv(Q: Tensor, K: Tensor, V: Tensor, name: str) -> None:
    """ValueError naming the shapes when Q (…, Tq, dk), K (…, Tk, dk), V (…, Tk, dv) do not fit."""
    for label, t in (("Q", Q), ("K", K), ("V", V)):
        if t.ndim < 2:
            raise ValueError(f"{name}: {label} needs shape (..., seq, dim), got {t.shape}.")
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"{name}: queries and keys need the same last size (d_k); Q has shape {Q.shape}, K has shape {K.shape}."
        )
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(
            f"{name}: keys and values need the same length (Tk); K has shape {K.shape}, V has shape {V.shape}."
        )
    try:
        np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{name}: the leading (batch, head) dims of Q {Q.shape}, K {K.shape} and V {V.shape} do not broadcast."
        ) from None


def composed_attention(Q: Any, K: Any, V: Any, mask: Any = None, is_causal: bool = False,
                       scale: float | None = None) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale) V built from Tensor ops (matmul, masked_fill, softmax).

    Q (…, Tq, dk), K (…, Tk, dk), V (…, Tk, dv) -> (output (…, Tq, dv), weights (…, Tq, Tk)).
    `scale` defaults to 1/√dk. Blocked scores are filled with the dtype's most negative
    finite number before the softmax, and the weights are set to exactly 0 there after it,
    so a query with every key blocked gets weights 0 and output 0.
    Gradients come from module 05's rules for each op.
    """
    Q, K, V = _as_tensor(Q), _as_tensor(K), _as_tensor(V)
    _check_qkv(Q, K, V, "composed_attention")
    ### BEGIN SOLUTION
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else float(scale)
    scores = (Q @ K.transpose(-2, -1)) * scale
    blocked = _blocked_positions(mask, is_causal, scores.shape, scores.data) if mask is not None or is_causal else None
    if blocked is not None:
        scores = scores.masked_fill(blocked, float(np.finfo(scores.dtype).min))
    weights = softmax(scores, dim=-1)
    if blocked is not None:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ V, weights
    ### END SOLUTION


# %% [markdown]
# ### The hand example
#
# Three tokens with four features, `Q = K = V = X`:
#
# ```
# X = [[1, 0, 1, 0],
#      [0, 1, 0, 1],
#      [1, 1, 0, 0]]
# ```
#
# `X Xᵀ = [[2, 0, 1], [0, 2, 1], [1, 1, 2]]` (each token matches itself best), divided by
# `√4 = 2` gives `[[1, 0, 0.5], …]`, and the first row's softmax is
# `(e¹, e⁰, e^0.5) / (e¹ + e⁰ + e^0.5)`. Compute it rather than copy it — a widely copied
# version of this example rounds the numbers wrongly.

# %%
X = Tensor([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=np.float64)
out, weights = composed_attention(X, X, X)
np.set_printoptions(precision=5, suppress=True)
print("scores / sqrt(4):\n", (X.numpy() @ X.numpy().T) / 2)
print("weights:\n", weights.numpy())
print("output:\n", out.numpy())
print("row sums:", weights.numpy().sum(-1))

# %%
HAND_X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
HAND_WEIGHTS = [[0.50648, 0.18632, 0.30720], [0.18632, 0.50648, 0.30720], [0.27407, 0.27407, 0.45186]]
HAND_OUTPUT = [[0.81368, 0.49352, 0.50648, 0.18632], [0.49352, 0.81368, 0.18632, 0.50648],
               [0.72593, 0.72593, 0.27407, 0.27407]]


def expect_error(error: type, *calls) -> None:
    """Inline-test helper: each call must raise `error` (the tests below use it for bad input)."""
    for call in calls:
        try:
            call()
        except error:
            continue
        raise AssertionError(f"expected {error.__name__} from {call}")


def test_unit_composed_attention():
    X = Tensor(HAND_X)
    out, w = composed_attention(X, X, X)
    assert np.allclose(w.numpy(), HAND_WEIGHTS, atol=1e-5) and np.allclose(out.numpy(), HAND_OUTPUT, atol=1e-5)
    assert out.dtype == np.float32 and w.shape == (3, 3)
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 7, 8)), rng.standard_normal((2, 7, 3))
    out, w = composed_attention(Q, K, V)
    assert out.shape == (2, 5, 3) and w.shape == (2, 5, 7)
    assert np.allclose(w.numpy().sum(-1), 1.0)
    s = Q @ K.transpose(0, 2, 1) / np.sqrt(8)
    e = np.exp(s - s.max(-1, keepdims=True))
    assert np.allclose(out.numpy(), (e / e.sum(-1, keepdims=True)) @ V)
    print("✓ composed attention: hand example, shapes, Tq != Tk, dv != dk")


test_unit_composed_attention()

# %% [markdown]
# ## 3. Why divide by √d_k? And temperature
#
# If the entries of `q` and `k` are independent with mean 0 and variance 1, their dot
# product `q·k = Σᵢ qᵢkᵢ` is a sum of `d_k` terms of variance 1: its **variance is d_k**.
# At `d_k = 64` the unscaled scores have a standard deviation of about 8, so within one
# row a few scores are tens of units above the rest and the softmax is almost one-hot.
# A near one-hot softmax has a near-zero derivative (`w(1-w) ≈ 0`): the gradients vanish
# and the attention cannot learn where to look. Dividing by `√d_k` brings the variance
# back to 1 whatever the width. Measured on random vectors (16 keys per query):

# %%
def score_statistics(d_k: int, n_queries: int = 2000, n_keys: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_queries, 1, d_k))
    k = rng.standard_normal((n_queries, n_keys, d_k))
    raw = (q @ k.transpose(0, 2, 1))[:, 0, :]
    rows = []
    for scores in (raw, raw / math.sqrt(d_k)):
        w = softmax(Tensor(scores), dim=-1).numpy()
        slope = (w * (1 - w)).max(-1).mean()  # largest diagonal entry of the softmax Jacobian
        rows.append((scores.std(), w.max(-1).mean(), slope))
    return rows


print(f"{'d_k':>5} | {'std raw':>8} {'max w':>6} {'w(1-w)':>7} | {'std scaled':>10} {'max w':>6} {'w(1-w)':>7}")
for d_k in (8, 64, 512):
    (s0, m0, g0), (s1, m1, g1) = score_statistics(d_k)
    print(f"{d_k:>5} | {s0:8.2f} {m0:6.3f} {g0:7.4f} | {s1:10.2f} {m1:6.3f} {g1:7.4f}")

# %% [markdown]
# The unscaled standard deviation grows like `√d_k` (≈ 2.8, 8, 22.6) and the top weight
# approaches 1 with a vanishing slope; scaled, every width behaves like `d_k = 1`.
#
# Dividing by a number before a softmax is a **temperature**: `softmax(s / τ)`. A small
# `τ` sharpens the distribution towards the largest score, a large `τ` flattens it
# towards uniform. `1/√d_k` is the temperature that keeps the scores at unit scale; the
# `scale=` argument of the functions below lets you set another one (module 13 reuses
# the same idea to sample text more or less adventurously).

# %%
scores = Tensor([[2.0, 1.0, 0.5, -1.0]])
for tau in (0.25, 0.5, 1.0, 2.0, 4.0):
    w = softmax(scores * (1 / tau), dim=-1).numpy()[0]
    entropy = -(w * np.log(w)).sum()
    print(f"tau={tau:4}: weights {np.round(w, 3)}  entropy {entropy:.3f} nats (uniform: {math.log(4):.3f})")

# %% [markdown]
# ## 4. A softmax that never overflows
#
# `exp(1000)` is larger than any float64 (`≈ 1.8e308`), so a textbook softmax of
# `[1000, 1001, 1002]` is `inf / inf = nan`. Softmax does not change when the same
# number is subtracted from every entry (`e^(x-m) / Σ e^(x-m) = e^x / Σ e^x`), so subtract
# the row maximum first: the largest exponent becomes `e⁰ = 1`, nothing overflows, and
# the sum is at least 1 (no division by zero). Module 02's `softmax` does exactly this.

# %%
x = np.array([1000.0, 1001.0, 1002.0])
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.exp(x) / np.exp(x).sum()
print("naive:", naive, "  stable:", softmax(Tensor(x), dim=-1).numpy().round(4))

# %% [markdown]
# ## 5. Masks: who may look at whom
#
# A mask says, for each (query, key) pair, whether the query may attend to the key.
# **In TinyTorch 1/True means attend and 0/False means blocked** — the convention of a
# boolean mask in PyTorch's `scaled_dot_product_attention`. Be careful when you read
# other code: `torch.nn.MultiheadAttention`'s boolean `attn_mask` and
# `key_padding_mask` use the **opposite** (True = blocked), and many code bases pass an
# **additive** mask (0 where allowed, `-inf` or `-1e9` where blocked) that is added to
# the scores. A flipped convention is one of the classic bugs of section 12.
#
# * **Causal** (GPT, decoders): token `i` may look at tokens `0 … i`, never the future.
#   The mask is the lower triangle of ones. Without it (BERT, encoders) attention is
#   **bidirectional**: everyone sees everyone.
# * **Padding**: sentences of different lengths are padded to one length to form a batch;
#   the padding must never be attended to. `create_padding_mask(lengths, T)` has shape
#   `(B, 1, 1, T)`: it broadcasts over the heads (axis 1) and over the queries (axis 2)
#   and blocks *keys*.
#
# Masks broadcast against the scores `(B, H, Tq, Tk)` by the usual rules: a `(Tq, Tk)`
# causal mask applies to every batch item and head, a `(B, 1, 1, Tk)` padding mask to
# every head and query of its batch item, and both combine with `&` (or `*`).
#
# Every attention function here accepts a mask as bool, 0/1 ints or 0/1 floats, as a
# Tensor, an array or a list, plus `is_causal=True` (which needs no mask array: a cached
# `(Tq, Tk)` triangle is used). `_blocked_positions` turns all of that into **one** boolean
# array, True where a query may *not* look, checked against the scores' shape: a mask that
# does not broadcast is an error that names both shapes, never a silent wrong answer.

# %%
#| export
def create_causal_mask(seq_len: int, device: str | None = None) -> Tensor:
    """(seq_len, seq_len) float32 Tensor: ones on and below the diagonal (query i sees keys 0..i)."""
    if int(seq_len) < 1:
        raise ValueError(f"create_causal_mask: seq_len must be at least 1, got {seq_len}.")
    ### BEGIN SOLUTION
    return Tensor(np.tril(np.ones((int(seq_len), int(seq_len)), dtype=np.float32)), device=device)
    ### END SOLUTION


def create_padding_mask(lengths: Any, max_length: int | None = None) -> Tensor:
    """(B, 1, 1, max_length) float32 Tensor: 1 on the first lengths[b] positions of row b, 0 on padding.

    `lengths` is a list, a NumPy/CuPy array or a Tensor of B non-negative ints; max_length
    defaults to the largest length.
    """
    ### BEGIN SOLUTION
    lengths = to_array(lengths, dtype=np.int64) if not isinstance(lengths, Tensor) else lengths.data.astype(np.int64)
    xp = array_module(lengths)
    lengths = lengths.reshape(-1)
    longest = int(lengths.max()) if lengths.size else 0
    max_length = longest if max_length is None else int(max_length)
    if lengths.size and (int(lengths.min()) < 0 or longest > max_length):
        raise ValueError(
            f"create_padding_mask: lengths must lie in [0, max_length={max_length}], got {lengths.tolist()}."
        )
    positions = xp.arange(max_length)
    mask = (positions[None, :] < lengths[:, None]).astype(np.float32)
    return Tensor(mask[:, None, None, :])
    ### END SOLUTION


_CAUSAL_CACHE: dict = {}


def _causal_blocked(tq: int, tk: int, xp) -> Any:
    """(tq, tk) bool array, True above the diagonal (key j > query i): cached per size."""
    key = (tq, tk, xp.__name__)
    blocked = _CAUSAL_CACHE.get(key)
    if blocked is None:
        if len(_CAUSAL_CACHE) > 32:
            _CAUSAL_CACHE.clear()
        blocked = xp.triu(xp.ones((tq, tk), dtype=bool), k=1)
        _CAUSAL_CACHE[key] = blocked
    return blocked


def _blocked_positions(mask: Any, is_causal: bool, scores_shape: tuple, like: Any) -> Any:
    """Bool array broadcastable to `scores_shape`, True where a query may NOT look; or None.

    `mask` follows the keep convention (1/True = attend, 0/False = blocked): bool, 0/1 ints
    or floats; a Tensor, a NumPy/CuPy array or a list. `is_causal` adds the causal mask
    (query i sees keys j <= i, aligned at the top-left as in PyTorch).
    """
    ### BEGIN SOLUTION
    xp = array_module(like)
    scores_shape = tuple(scores_shape)
    blocked = None
    if mask is not None:
        keep = to_array(mask, device=device_of(like))
        try:
            full = np.broadcast_shapes(tuple(keep.shape), scores_shape)
        except ValueError:
            full = None
        if full != scores_shape:
            raise ValueError(
                f"attention mask of shape {tuple(keep.shape)} does not broadcast to the scores' shape "
                f"{scores_shape} (..., Tq, Tk)."
            )
        blocked = keep == 0
    if is_causal:
        causal = _causal_blocked(scores_shape[-2], scores_shape[-1], xp)
        blocked = causal if blocked is None else (blocked | causal)
    return blocked
    ### END SOLUTION


# %%
print("causal mask (4):\n", create_causal_mask(4).numpy())
print("padding mask for lengths [3, 1], T=4:", create_padding_mask([3, 1], 4).numpy().reshape(2, 4).tolist(),
      "shape", create_padding_mask([3, 1], 4).shape)
combined = create_causal_mask(4).numpy() * create_padding_mask([3, 1], 4).numpy()
print("causal x padding broadcasts to", combined.shape, "; item 0, head 0:\n", combined[0, 0])

# %% [markdown]
# ### Why blocked rows give NaN in naive code, and what float16 changes
#
# Three ways to block a score before the softmax:
#
# 1. **`-inf`**: `e^(-inf) = 0`, exact. But when *every* key of a query is blocked (a
#    padded query, or a padding mask meeting a causal mask), the row maximum is `-inf` and
#    `x - max = -inf - (-inf) = nan`: the whole row, and everything computed from it, is NaN.
# 2. **`-1e9`** (a big negative constant): fine in float32, but float16 ends at ±65504, so
#    `-1e9` rounds to `-inf` and problem 1 returns.
# 3. **the dtype's most negative finite number** `np.finfo(dtype).min` (`-65504` for
#    float16, `≈ -3.4e38` for float32): finite in every dtype, so the row maximum is finite
#    and no `inf - inf` ever appears; next to any real score it underflows to exactly 0.
#    A fully blocked row becomes *uniform* (all entries equal) — finite, but meaningless,
#    so we then set the weights of blocked positions to exactly 0.
#
# The fused implementation below goes one step further: it fills with `-inf`, but
# replaces a row maximum of `-inf` by a finite number and a row sum of 0 by 1, so a fully
# blocked row gives weights 0 and output 0 without any special case. It also computes
# float16 inputs in float32 (scores of float16 vectors overflow 65504 easily) and
# returns float16.

# %%
row = np.array([[2.0, 1.0, 0.5]])
blocked_all = np.ones((1, 3), dtype=bool)
with np.errstate(invalid="ignore"):
    s = np.where(blocked_all, -np.inf, row)
    print("-inf fill, fully blocked row:", np.exp(s - s.max(-1, keepdims=True)) / np.exp(s - s.max(-1, keepdims=True)).sum(-1))
with np.errstate(over="ignore"):
    print("float16(-1e9) =", np.float16(-1e9), "  finfo(float16).min =", np.finfo(np.float16).min,
          "  finfo(float32).min =", np.finfo(np.float32).min)
    print("float16 scores overflow: 64 features of 40.0 give q.k =", np.full(64, 40, np.float16) @ np.full(64, 40, np.float16))

# %%
def test_unit_masks():
    assert np.array_equal(create_causal_mask(3).numpy(), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    assert create_causal_mask(3).dtype == np.float32
    pad = create_padding_mask([2, 3, 0], 4)
    assert pad.shape == (3, 1, 1, 4)
    assert np.array_equal(pad.numpy()[:, 0, 0], [[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    assert create_padding_mask(np.array([1, 2])).shape == (2, 1, 1, 2)
    blocked = _blocked_positions([[1, 0], [1, 1]], True, (2, 2, 2), np.zeros(1))
    assert blocked.dtype == bool and np.array_equal(blocked, [[False, True], [False, False]])
    expect_error(ValueError, lambda: create_padding_mask([5], 4), lambda: create_causal_mask(0),
                 lambda: _blocked_positions(np.ones((3, 3)), False, (2, 4, 4), np.zeros(1)))
    X = Tensor(np.random.default_rng(0).standard_normal((2, 4, 8)), dtype=np.float64)
    out, w = composed_attention(X, X, X, mask=[[1, 1, 0, 0]] * 3 + [[0, 0, 0, 0]])
    assert np.all(w.numpy()[..., :, 2:] == 0) and np.all(w.numpy()[:, 3] == 0) and np.all(out.numpy()[:, 3] == 0)
    assert np.allclose(w.numpy()[:, :3].sum(-1), 1) and np.isfinite(out.numpy()).all()
    print("✓ causal and padding masks, broadcasting, fully blocked rows")


test_unit_masks()

# %% [markdown]
# ## 6. One operation with a fused backward
#
# `composed_attention` records six or seven operations: a matmul, a transpose, a scale,
# two masked fills, a softmax and a matmul. Each keeps its own `(…, Tq, Tk)` array
# alive for the backward pass, and each backward rule allocates another. At `Tq = Tk =
# 2048` one such array is 16 MiB per head. A real framework writes attention as **one
# operation** with a hand-derived backward rule; you will too.
#
# **Forward**, in as few passes over the `(…, Tq, Tk)` array as possible, all in place on
# the freshly made scores: `S = Q Kᵀ` (new array), `S *= scale`, blocked entries `= -inf`,
# `m = max(S)`, `S -= m`, `exp(S)` in place, `l = sum(S)`, `S *= 1/l`. The result is the
# weights `W`; `O = W V`.
#
# **Backward.** With `dO` the gradient of the output:
#
# * `O = W V`, so `dV = Wᵀ dO` and `dW = dO Vᵀ`;
# * softmax's derivative, row by row: `dS = W ⊙ (dW − rowsum(dW ⊙ W))`; and
#   `rowsum(dW ⊙ W) = Σₖ W_qk (dO_q · V_k) = dO_q · O_q`, a cheap `(…, Tq)` dot product
#   instead of another `(…, Tq, Tk)` pass (FlashAttention's trick);
# * `S = scale · Q Kᵀ`, so `dQ = dS K · scale` and `dK = dSᵀ Q · scale`.
#
# Blocked positions have `W = 0`, so their `dS` is 0: no gradient reaches a key through a
# position that was blocked, and a fully blocked row has finite (zero) gradients.
#
# **Dropout** on the weights (`dropout_p > 0`) zeroes random weights after the softmax and
# rescales the rest by `1/(1-p)`. Whether it is applied is signalled by the `training`
# argument (default `True`, as in `torch.nn.functional.scaled_dot_product_attention`);
# `MultiHeadAttention` passes its own `.training`, so `model.eval()` switches it off. The
# returned weights are the ones actually applied to `V` (after dropout), as PyTorch's.
#
# The weights are also returned as a Tensor with its own small op (`sdpa_weights`), so
# a loss that uses them (say, a penalty on attention entropy) still differentiates.

# %%
#| export
def _work_dtype(*tensors: Tensor):
    """(dtype to compute in, dtype to return): float16 is computed in float32."""
    out = np.result_type(*(t.dtype for t in tensors))
    if not np.issubdtype(out, np.floating):
        out = np.dtype(np.float32)
    return np.result_type(out, np.float32), out


def _masked_softmax_(scores: Any, blocked: Any) -> Any:
    """Softmax over the last axis, in place on `scores`; blocked entries -> exactly 0.

    A row whose entries are all blocked becomes all zeros (no NaN).
    """
    ### BEGIN SOLUTION
    xp = array_module(scores)
    if blocked is not None:
        xp.copyto(scores, -np.inf, where=blocked)
    row_max = scores.max(axis=-1, keepdims=True)
    if blocked is not None:  # a fully blocked row has max -inf: any finite number will do
        xp.maximum(row_max, np.finfo(scores.dtype).min, out=row_max)
    scores -= row_max
    xp.exp(scores, out=scores)
    row_sum = scores.sum(axis=-1, keepdims=True)
    if blocked is not None:  # sums are >= 1 except in fully blocked rows, which are 0
        xp.maximum(row_sum, 1.0, out=row_sum)
    xp.reciprocal(row_sum, out=row_sum)
    scores *= row_sum
    return scores
    ### END SOLUTION


def scaled_dot_product_attention(Q: Any, K: Any, V: Any, mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 training: bool = True, rng: Any = None) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale) V as one recorded op ("sdpa") with a fused backward rule.

    Q (…, Tq, dk), K (…, Tk, dk), V (…, Tk, dv); leading dims broadcast.
    Returns (output (…, Tq, dv), weights (…, Tq, Tk)).
    mask      -- keep mask (1/True = attend, 0/False = blocked), broadcastable to (…, Tq, Tk);
                 bool, 0/1 ints or floats, as a Tensor, array or list
    is_causal -- query i attends only to keys j <= i (top-left aligned, as in PyTorch);
                 with a KV cache pass an explicit mask such as create_causal_mask(Tk)[-Tq:]
    scale     -- multiplies the scores; default 1/√dk
    dropout_p -- dropout on the weights, applied only when `training` is True; `rng` (a NumPy
                 Generator or an int seed) makes the dropout mask reproducible
    Blocked weights are exactly 0; a query with every key blocked gets weights 0 and output 0.
    float16 is computed in float32 and returned as float16.
    """
    Q, K, V = _as_tensor(Q), _as_tensor(K), _as_tensor(V)
    _check_qkv(Q, K, V, "scaled_dot_product_attention")
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}.")
    ### BEGIN SOLUTION
    xp = array_module(Q.data)
    work, out_dtype = _work_dtype(Q, K, V)
    q, k, v = (t.data.astype(work, copy=False) for t in (Q, K, V))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2))  # a fresh array: everything below is in place
    if scale != 1.0:
        scores *= scale
    blocked = _blocked_positions(mask, is_causal, scores.shape, scores) if mask is not None or is_causal else None
    probs = _masked_softmax_(scores, blocked)
    drop = None
    weights = probs
    if dropout_p > 0.0 and training:
        keep = make_rng(rng).random(probs.shape) >= dropout_p  # drawn on the host, like Dropout
        drop = xp.asarray(keep, dtype=work)
        drop *= 1.0 / (1.0 - dropout_p)
        weights = probs * drop
    out = xp.matmul(weights, v)
    output = record_op("sdpa", out.astype(out_dtype, copy=False), (Q, K, V),
                       weights=weights, probs=probs, drop=drop, out=out, scale=scale)
    returned = record_op("sdpa_weights", weights.astype(out_dtype, copy=False), (Q, K),
                         probs=probs, drop=drop, scale=scale)
    return output, returned
    ### END SOLUTION


@register_backward("sdpa")
def sdpa_backward(grad: Any, node) -> tuple:
    """dV = Wᵀ dO; dW = dO Vᵀ; dS = P ⊙ (dW − rowsum(dO ⊙ O)); dQ = dS K·scale; dK = dSᵀ Q·scale."""
    ### BEGIN SOLUTION
    Q, K, V = node.inputs
    saved = node.saved
    weights, probs, drop, out, scale = (saved[n] for n in ("weights", "probs", "drop", "out", "scale"))
    xp = array_module(grad)
    work = probs.dtype
    g = grad.astype(work, copy=False)
    d_q = d_k = d_v = None
    if V.requires_grad:
        d_v = xp.matmul(xp.swapaxes(weights, -1, -2), g)
    if Q.requires_grad or K.requires_grad:
        d_s = xp.matmul(g, xp.swapaxes(V.data.astype(work, copy=False), -1, -2))  # dW, fresh
        if drop is not None:
            d_s *= drop
        d_s -= xp.einsum("...qd,...qd->...q", g, out)[..., None]  # rowsum(dW ⊙ W) = dO·O
        d_s *= probs
        if Q.requires_grad:
            d_q = xp.matmul(d_s, K.data.astype(work, copy=False))
            d_q *= scale
        if K.requires_grad:
            d_k = xp.matmul(xp.swapaxes(d_s, -1, -2), Q.data.astype(work, copy=False))
            d_k *= scale
    return d_q, d_k, d_v
    ### END SOLUTION


@register_backward("sdpa_weights")
def sdpa_weights_backward(grad: Any, node) -> tuple:
    """Gradient reaching Q and K through the returned weights: the softmax rule, then the matmul."""
    ### BEGIN SOLUTION
    Q, K = node.inputs
    probs, drop, scale = node.saved["probs"], node.saved["drop"], node.saved["scale"]
    xp = array_module(grad)
    work = probs.dtype
    g = grad.astype(work) if drop is None else grad.astype(work) * drop  # a fresh array
    g -= (g * probs).sum(axis=-1, keepdims=True)
    g *= probs
    d_q = xp.matmul(g, K.data.astype(work, copy=False)) * scale if Q.requires_grad else None
    d_k = xp.matmul(xp.swapaxes(g, -1, -2), Q.data.astype(work, copy=False)) * scale if K.requires_grad else None
    return d_q, d_k
    ### END SOLUTION


# %% [markdown]
# ### Test: fused equals composed, in values and gradients
#
# The composed version is the specification; the fused one must agree with it to
# rounding, forward and backward, with and without masks.

# %%
def _grads_of(fn, arrays, cotangent):
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    out, w = fn(*tensors)
    out.backward(cotangent)
    return out.numpy(), w.numpy(), [t.grad.numpy() for t in tensors]


def test_unit_sdpa_matches_composed():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 6, 7))]
    g = rng.standard_normal((2, 3, 5, 7))
    padding = create_padding_mask([6, 4], 6)
    for mask, causal in ((None, False), (None, True), (padding, False), (padding, True),
                         ([[1, 0, 1, 0, 0, 0]] + [[0] * 6] + [[1] * 6] * 3, False)):
        a = _grads_of(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask, is_causal=causal), arrays, g)
        b = _grads_of(lambda q, k, v: composed_attention(q, k, v, mask=mask, is_causal=causal), arrays, g)
        assert np.allclose(a[0], b[0], atol=1e-12) and np.allclose(a[1], b[1], atol=1e-12)
        for ga, gb in zip(a[2], b[2]):
            assert np.allclose(ga, gb, atol=1e-12)
    X = Tensor(HAND_X)
    out, w = scaled_dot_product_attention(X, X, X)
    assert np.allclose(w.numpy(), HAND_WEIGHTS, atol=1e-5) and np.allclose(out.numpy(), HAND_OUTPUT, atol=1e-5)
    assert out.dtype == np.float32 and w.dtype == np.float32
    assert out.requires_grad is False and scaled_dot_product_attention(Tensor(HAND_X, requires_grad=True), X, X)[0]._node.op == "sdpa"
    print("✓ scaled_dot_product_attention: one op, same values and gradients as the composed version")


test_unit_sdpa_matches_composed()

# %% [markdown]
# What fusing buys, measured: the peak memory of a forward + backward pass (tracemalloc
# sees NumPy's allocations) and the number of operations recorded in the graph.

# %%
import tracemalloc


def graph_size(t: Tensor) -> int:
    seen, stack = set(), [t]
    while stack:
        node = stack.pop()
        if id(node) in seen or node._node is None:
            continue
        seen.add(id(node))
        stack.extend(node._node.inputs)
    return len(seen)


def fwd_bwd_peak(attn, T: int = 512) -> tuple[float, int]:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, T, 64), dtype=np.float32) for _ in range(4)]
    tracemalloc.start()
    q, k, v = (Tensor(a, requires_grad=True) for a in arrays[:3])
    out = attn(q, k, v, is_causal=True)[0]
    ops = graph_size(out)
    out.backward(arrays[3])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20, ops


for name, attn in (("composed", composed_attention), ("fused sdpa", scaled_dot_product_attention)):
    peak, ops = fwd_bwd_peak(attn)
    print(f"{name:11s}: {ops} recorded ops, peak {peak:5.1f} MiB for forward + backward "
          f"(one (4, 512, 512) float32 array is {4 * 512 * 512 * 4 / 2**20:.0f} MiB)")

# %%
def test_unit_sdpa_edge_cases():
    # fully blocked rows: weights 0, output 0, finite gradients
    Q = Tensor(np.random.default_rng(2).standard_normal((1, 3, 4)), requires_grad=True)
    out, w = scaled_dot_product_attention(Q, Q, Q, mask=[[1, 1, 0], [0, 0, 0], [1, 0, 1]])
    out.backward(np.ones(out.shape))
    assert np.all(w.numpy()[0, 1] == 0) and np.all(out.numpy()[0, 1] == 0) and np.isfinite(Q.grad.numpy()).all()
    assert w.numpy()[0, 0, 2] == 0 and w.numpy()[0, 2, 1] == 0
    # huge scores stay finite and pick the largest
    big = Tensor([[1e4, 0.0], [0.0, 1e4]])
    out, w = scaled_dot_product_attention(big, big, Tensor([[1.0], [2.0]]))
    assert np.isfinite(w.numpy()).all() and np.allclose(w.numpy(), np.eye(2))
    # float16 in, float16 out, no overflow, no NaN
    h = np.full((1, 4, 64), 40.0, np.float16)
    out, w = scaled_dot_product_attention(h, h, h, is_causal=True)
    assert out.dtype == np.float16 and np.isfinite(out.numpy()).all() and np.allclose(out.numpy(), 40.0)
    # dropout: only in training, rescaled by 1/(1-p), zero elsewhere
    X = Tensor(np.ones((64, 8)))
    _, w = scaled_dot_product_attention(X, X, X, dropout_p=0.5, rng=0)
    assert np.array_equal(w.numpy(), scaled_dot_product_attention(X, X, X, dropout_p=0.5, rng=0)[1].numpy())
    kept = w.numpy()[w.numpy() > 0]
    assert np.allclose(kept, 2 / 64) and 0.4 < kept.size / w.size < 0.6
    _, w = scaled_dot_product_attention(X, X, X, dropout_p=0.5, training=False)
    assert np.allclose(w.numpy(), 1 / 64)
    print("✓ fully blocked rows, huge scores, float16, dropout")


test_unit_sdpa_edge_cases()

# %% [markdown]
# ## 7. Gradient flow
#
# Gradients reach `Q` and `K` through the weights (*where to look*: `dS`) and `V` through
# the weighted sum (*what to take*: `dV = Wᵀ dO`). A key that every query has blocked
# receives no gradient at all: no attention, no learning signal. Module 05's `gradcheck`
# compares our fused rule with central differences in float64.

# %%
from tinytorch.core.autograd import gradcheck

rng = np.random.default_rng(3)
Q = Tensor(rng.standard_normal((1, 4, 3)), requires_grad=True)
K = Tensor(rng.standard_normal((1, 4, 3)), requires_grad=True)
V = Tensor(rng.standard_normal((1, 4, 2)), requires_grad=True)
out, w = scaled_dot_product_attention(Q, K, V, is_causal=True)
out.sum().backward()
print("dV rows (key 3 is seen only by query 3, key 0 by all four):\n", V.grad.numpy()[0])
padded = create_padding_mask([2], 4).numpy()[0]  # (1, 1, 4): Q, K, V here are 3-D
for t in (Q, K, V):
    t.grad = None
scaled_dot_product_attention(Q, K, V, mask=padded)[0].sum().backward()
print("padding keys 2, 3 get no gradient: dK =", K.grad.numpy()[0, 2:].tolist(), " dV =", V.grad.numpy()[0, 2:].tolist())
print("gradcheck (float64, causal):",
      gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0], [Q, K, V]))


# %%
def test_unit_gradient_flow():
    rng = np.random.default_rng(4)
    Q, K, V = (Tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 2)))
    mask = np.array([[1, 1, 1, 0, 0]] * 2 + [[0] * 5])
    assert gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask)[0], [Q, K, V])
    assert gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7)[0], [Q, K, V])
    assert gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask)[1], [Q, K, V])
    for t in (Q, K, V):
        t.grad = None
    scaled_dot_product_attention(Q, K, V, mask=mask)[0].sum().backward()
    assert np.all(K.grad.numpy()[:, 3:] == 0) and np.all(V.grad.numpy()[:, 3:] == 0)
    assert np.all(Q.grad.numpy()[:, 2] == 0)
    print("✓ gradients: gradcheck with masks, Tq != Tk, dv != dk; blocked keys get none")


test_unit_gradient_flow()

# %% [markdown]
# ## 8. Multi-head attention
#
# One attention head computes one set of weights: one notion of "relevant". Language
# needs several at once (the subject of this verb, the previous word, the matching
# bracket). **Multi-head attention** splits the `embed_dim` features into `num_heads`
# groups of `head_dim = embed_dim / num_heads`, runs attention in each group in parallel,
# concatenates the results and mixes them with an output projection:
#
# ```
# x (B, T, E) --q_proj/k_proj/v_proj--> (B, T, E) --reshape--> (B, T, H, D) --permute--> (B, H, T, D)
#   --attention per head--> (B, H, Tq, D) --permute/reshape--> (B, Tq, E) --out_proj--> (B, Tq, E)
# ```
#
# The reshape and permute are views, and the batched matmul treats `(B, H)` as batch
# dimensions: all heads in one call, no loop. The projections see the tokens flattened to
# `(B·T, E)`: one matrix product each, and in the backward pass the weight gradient
# `xᵀ · dy` is one `(E, B·T) @ (B·T, E)` product too, instead of `B` products summed afterwards. The parameters are the same as for one
# full-width head: four `E × E` projections (plus biases), whatever `H` is. Real models:
# GPT-2 small has 12 heads of 64 (E = 768), Llama-2-7B 32 heads of 128 (E = 4096).
#
# **Self-attention** takes queries, keys and values from the same sequence (a square
# `Tq × Tq` score matrix); **cross-attention** takes queries from one sequence and keys
# and values from another (a decoder reading an encoder; a rectangular `Tq × Tk`
# matrix). The same class does both: `key` defaults to `query`, `value` to `key`.
#
# Masks for `forward`: `(Tq, Tk)` applies to everything; `(B, Tq, Tk)` gets a head axis
# inserted (`(B, 1, Tq, Tk)`); 4-D masks `(B|1, H|1, Tq, Tk)` such as a padding mask pass
# through unchanged.

# %%
#| export
class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention with learned q/k/v/out projections.

    Linear layers `q_proj`, `k_proj`, `v_proj`, `out_proj` (each embed_dim -> embed_dim,
    weights (in, out), y = x @ W + b). forward(query (B, Tq, E), key (B, Tk, E) = query,
    value (B, Tk, E) = key, mask=None, is_causal=False) -> (output (B, Tq, E),
    weights (B, H, Tq, Tk)). Dropout on the weights follows `.training`.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, *,
                 dtype: Any = np.float32, device: str | None = None, rng: Any = None, seed: int | None = None):
        super().__init__()
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads != 0:
            raise ValueError(
                f"MultiHeadAttention: embed_dim ({embed_dim}) must be a positive multiple of num_heads ({num_heads})."
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {dropout}.")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.rng = make_rng(rng, seed)  # one generator: initialisation and dropout masks
        settings = dict(bias=bias, dtype=dtype, device=device, rng=self.rng)
        self.q_proj = Linear(embed_dim, embed_dim, **settings)
        self.k_proj = Linear(embed_dim, embed_dim, **settings)
        self.v_proj = Linear(embed_dim, embed_dim, **settings)
        self.out_proj = Linear(embed_dim, embed_dim, **settings)

    def _head_mask(self, mask: Any) -> Any:
        """(Tq, Tk) and 4-D masks as they are; (B, Tq, Tk) -> (B, 1, Tq, Tk)."""
        if mask is None:
            return None
        m = mask.data if isinstance(mask, Tensor) else to_array(mask)
        if m.ndim == 3:
            return m[:, None]
        if m.ndim not in (2, 4):
            raise ValueError(
                f"MultiHeadAttention: mask must have shape (Tq, Tk), (B, Tq, Tk) or (B|1, H|1, Tq, Tk); got {tuple(m.shape)}."
            )
        return m

    def forward(self, query: Any, key: Any = None, value: Any = None, mask: Any = None,
                is_causal: bool = False) -> tuple[Tensor, Tensor]:
        query = _as_tensor(query)
        key = query if key is None else _as_tensor(key)
        value = key if value is None else _as_tensor(value)
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.ndim != 3 or t.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"MultiHeadAttention: {name} must have shape (batch, seq, {self.embed_dim}), got {t.shape}."
                )
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(
                f"MultiHeadAttention: query {query.shape}, key {key.shape} and value {value.shape} need the same "
                "batch size, and key and value the same length."
            )
        ### BEGIN SOLUTION
        B, Tq, E = query.shape
        Tk = key.shape[1]
        H, D = self.num_heads, self.head_dim

        def heads(proj, x, T):  # (B, T, E) -> (B·T, E) @ W -> (B, T, H, D) -> (B, H, T, D)
            return proj(x.reshape(B * T, E)).reshape(B, T, H, D).permute(0, 2, 1, 3)

        q = heads(self.q_proj, query, Tq)
        k = heads(self.k_proj, key, Tk)
        v = heads(self.v_proj, value, Tk)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask=self._head_mask(mask), dropout_p=self.dropout, is_causal=is_causal,
            training=self.training, rng=self.rng)
        out = out.permute(0, 2, 1, 3).reshape(B * Tq, E)  # concatenate the heads
        return self.out_proj(out).reshape(B, Tq, E), weights
        ### END SOLUTION


class SelfAttention(Module):
    """Q = K = V = x: forward(x (B, T, E), mask=None) -> (output, weights); causal=True masks the future."""

    def __init__(self, embed_dim: int, num_heads: int, causal: bool = False, dropout: float = 0.0,
                 bias: bool = True, **settings: Any):
        super().__init__()
        self.causal = causal
        self.attention = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, **settings)

    def forward(self, x: Any, mask: Any = None) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        return self.attention(x, mask=mask, is_causal=self.causal)
        ### END SOLUTION


# %%
from tinytorch.core.layers import count_parameters

mha = MultiHeadAttention(64, 8, seed=0)
print("embed 64, 8 heads, biased q/k/v/out:", f"{count_parameters(mha):,}", "parameters",
      "=", "4 x (64*64 + 64)")
print("one full-width head has the same:", f"{count_parameters(MultiHeadAttention(64, 1)):,}")
E = 128
print(f"embed {E} with a fused qkv projection ({E}x{3 * E} + {3 * E}) and out_proj ({E}x{E} + {E}):",
      f"{E * 3 * E + 3 * E + E * E + E:,}", "parameters; separate projections:",
      f"{count_parameters(MultiHeadAttention(E, 8)):,}")
x = Tensor(np.random.default_rng(5).standard_normal((2, 6, 64)), dtype=np.float32)
memory = Tensor(np.random.default_rng(6).standard_normal((2, 9, 64)), dtype=np.float32)
y, w = mha(x)
print("self-attention: output", y.shape, "weights", w.shape, "(square per head)")
y, w = mha(x, memory)
print("cross-attention: output", y.shape, "weights", w.shape, "(6 queries x 9 keys)")


# %%
def test_unit_multi_head_attention():
    rng = np.random.default_rng(7)
    mha = MultiHeadAttention(16, 4)
    assert count_parameters(mha) == 4 * (16 * 16 + 16) and mha.q_proj.weight.shape == (16, 16)
    assert count_parameters(MultiHeadAttention(64, 8)) == 16640
    x = Tensor(rng.standard_normal((2, 5, 16)).astype(np.float32))
    out, w = mha(x, is_causal=True)
    assert out.shape == (2, 5, 16) and w.shape == (2, 4, 5, 5)
    assert np.allclose(np.triu(w.numpy(), 1), 0) and np.allclose(w.numpy().sum(-1), 1, atol=1e-6)
    # the same result by hand, one head at a time
    xs = x.numpy()
    proj = lambda lin, a: a @ lin.weight.numpy() + lin.bias.numpy()
    q, k, v = (proj(l, xs).reshape(2, 5, 4, 4).transpose(0, 2, 1, 3) for l in (mha.q_proj, mha.k_proj, mha.v_proj))
    s = q @ k.transpose(0, 1, 3, 2) / 2 + np.triu(np.full((5, 5), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = proj(mha.out_proj, (p @ v).transpose(0, 2, 1, 3).reshape(2, 5, 16))
    assert np.allclose(out.numpy(), ref, atol=1e-5)
    # cross-attention and masks of every documented shape
    mem = Tensor(rng.standard_normal((2, 7, 16)).astype(np.float32))
    out, w = mha(x, mem, mask=create_padding_mask([7, 3], 7))
    assert w.shape == (2, 4, 5, 7) and np.all(w.numpy()[1, :, :, 3:] == 0)
    out3, w3 = mha(x, mem, mask=np.broadcast_to(np.array([1, 1, 1, 0, 0, 0, 0]), (2, 5, 7)))
    assert np.all(w3.numpy()[:, :, :, 3:] == 0)
    out2, _ = mha(x, mem, mask=np.ones((5, 7)))
    assert np.allclose(out2.numpy(), mha(x, mem)[0].numpy())
    sa = SelfAttention(16, 4, causal=True)
    assert np.allclose(np.triu(sa(x)[1].numpy(), 1), 0)
    expect_error(ValueError, lambda: MultiHeadAttention(10, 3), lambda: mha(Tensor(np.zeros((2, 5, 8)))),
                 lambda: mha(x, Tensor(np.zeros((2, 7, 12)))), lambda: mha(x, mask=np.ones((3, 3))))
    print("✓ multi-head attention: shapes, per-head maths, cross-attention, masks, errors")


test_unit_multi_head_attention()

# %% [markdown]
# ## 9. What attention costs
#
# Scores and weights are `Tq × Tk` per head: for a sequence of length `n`, **O(n²·d)
# time and O(n²) memory**. Doubling the sequence quadruples both. Measured on your
# `scaled_dot_product_attention` (forward, 4 batch-heads, `d = 64`, causal, float32):

# %% [markdown]
# One detail about measuring: NumPy's BLAS splits a matrix product over several threads.
# On a busy machine those threads wait for each other and a 1-millisecond product can take
# 100. So the timing runs in a fresh Python process with one BLAS thread (the variables
# must be set before NumPy is imported), still on your `scaled_dot_product_attention`.

# %%
import json
import subprocess
import time

TIMING_CODE = """
import json, time, numpy as np
from tinytorch.core.tensor import Tensor
from tinytorch.core.attention import scaled_dot_product_attention
rows = []
for T in (64, 128, 256, 512, 1024):
    q, k, v = (Tensor(np.random.default_rng(i).standard_normal((4, T, 64), dtype=np.float32)) for i in range(3))
    times = []
    for _ in range(7):
        start = time.process_time()
        scaled_dot_product_attention(q, k, v, is_causal=True)
        times.append(time.process_time() - start)
    rows.append((T, sorted(times)[3]))
print(json.dumps(rows))
"""


def time_per_doubling() -> list:
    """[(T, median seconds)] of a causal forward pass, (4, T, 64), measured on one thread."""
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", TIMING_CODE], env=one_thread, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout)


previous = None
print(f"{'T':>5} {'time (ms)':>10} {'x previous':>10}")
for T, t in time_per_doubling():
    print(f"{T:>5} {t * 1e3:10.2f} {'' if previous is None else f'{t / previous:10.2f}'}")
    previous = t

# %% [markdown]
# Short sequences are dominated by fixed overheads, so the ratio climbs towards 4 as `T`
# grows (`benchmarks/attention.py` measures forward + backward the same way, next to
# PyTorch). The memory of the weights alone (float32, 4 bytes each):

# %%
print(f"{'batch':>5} {'seq':>6} {'heads':>5} {'weights per head':>17} {'all heads':>12}")
for batch, seq, heads in ((1, 512, 12), (8, 1024, 12), (32, 2048, 1), (32, 2048, 12), (1, 32768, 32)):
    per_head = batch * seq * seq * 4
    print(f"{batch:>5} {seq:>6} {heads:>5} {per_head / 2**20:14,.0f} MiB {per_head * heads / 2**30:9,.1f} GiB")

# %% [markdown]
# Batch 32 at sequence length 2048 in float32 needs **512 MiB per head** just for the
# weights, and autograd keeps them until the backward pass; twelve heads and twelve layers
# do not fit any GPU. The next section removes the `n²` memory.
#
# ## 10. Beyond the matrix: chunked and tiled attention
#
# **Chunked attention** processes the queries in blocks: each block needs only its own
# `chunk × Tk` rows of scores. The result is exact (rows of a softmax are independent),
# memory drops by `Tq / chunk`, but it is still proportional to `Tk`.
#
# **Tiled attention with an online softmax** also cuts the *keys* into blocks and never
# holds a whole row. For each query it keeps a running maximum `m`, a running sum `l` of
# `e^(s - m)` and a running, unnormalised output `acc`. A new block of scores `s_b`:
#
# ```
# m_new = max(m, max(s_b))
# p     = exp(s_b - m_new)
# l     = l · exp(m - m_new) + sum(p)          # rescale the old sum to the new maximum
# acc   = acc · exp(m - m_new) + p @ V_b        # and the old output
# m     = m_new
# ```
#
# and at the end `output = acc / l`. This is exact — the same numbers as the full softmax
# — because every term is rescaled to the final maximum. It is the idea behind
# **FlashAttention** (Dao et al., 2022), which runs these tiles in a GPU's fast on-chip
# memory. The backward pass needs the weights again; instead of storing them it keeps only
# the output and one number per query, the log-sum-exp `lse = m + log l`, and recomputes
# each tile: `P = exp(s_b − lse)`. Memory is linear in the sequence length, forward and
# backward. With `is_causal`, tiles that lie entirely in the future are skipped.
#
# Our version loops in Python over blocks of queries (256 at a time) and, inside, over
# blocks of keys (`block_size`); everything else — batch, heads, the queries of a block —
# is one vectorised matmul. A tile is `256 × block_size` numbers, whatever the sequence
# length.
#
# (A third trick, the **KV cache**, is for generation: when a model produces one token at
# a time, the keys and values of earlier tokens never change, so it keeps them and computes
# only the new token's row. You will build it in module 13.)

# %%
#| export
def _tile_blocked(user_blocked: Any, is_causal: bool, q0: int, q1: int, k0: int, k1: int, xp) -> Any:
    """Blocked entries of the tile (queries q0:q1, keys k0:k1), or None."""
    blocked = None if user_blocked is None else user_blocked[..., q0:q1, k0:k1]
    if is_causal and k1 - 1 > q0:  # some key of the tile comes after some query of the tile
        causal = xp.arange(k0, k1)[None, :] > xp.arange(q0, q1)[:, None]
        blocked = causal if blocked is None else (blocked | causal)
    return blocked


def _flash_setup(Q: Tensor, K: Tensor, V: Tensor, mask: Any, scale: float | None):
    """Arrays in the working dtype broadcast to common leading dims, the scale and the user's blocked mask."""
    xp = array_module(Q.data)
    work, out_dtype = _work_dtype(Q, K, V)
    q, k, v = (t.data.astype(work, copy=False) for t in (Q, K, V))
    lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    q, k, v = (xp.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k, v))  # views, no copies
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    tq, tk = q.shape[-2], k.shape[-2]
    blocked = _blocked_positions(mask, False, lead + (tq, tk), q)
    if blocked is not None:  # a view with the full (…, Tq, Tk) shape, so that tiles can be sliced
        blocked = xp.broadcast_to(blocked, lead + (tq, tk))
    return xp, work, out_dtype, q, k, v, lead, scale, blocked


def _query_block(block_size: int) -> int:
    """Queries are processed in blocks of at least 256 rows: few Python iterations, small tiles."""
    return max(256, int(block_size))


def flash_attention(Q: Any, K: Any, V: Any, mask: Any = None, is_causal: bool = False,
                    block_size: int = 64, scale: float | None = None) -> Tensor:
    """Exact attention tiled over key blocks with an online softmax; returns the output only.

    Same arguments and result as scaled_dot_product_attention (keep mask, top-left causal,
    fully blocked rows -> 0), but never holds a Tq × Tk array: keys are visited in blocks of
    `block_size`, queries in blocks of max(256, block_size), so the extra memory grows
    linearly with the sequence length. Records one op, "flash_attention", whose backward
    recomputes the tiles from Q, K, V, the output and the per-row log-sum-exp.
    """
    Q, K, V = _as_tensor(Q), _as_tensor(K), _as_tensor(V)
    _check_qkv(Q, K, V, "flash_attention")
    if int(block_size) < 1:
        raise ValueError(f"flash_attention: block_size must be a positive int, got {block_size}.")
    ### BEGIN SOLUTION
    xp, work, out_dtype, q, k, v, lead, scale, user_blocked = _flash_setup(Q, K, V, mask, scale)
    tq, tk = q.shape[-2], k.shape[-2]
    kb, qb = int(block_size), _query_block(block_size)
    lowest = np.finfo(work).min
    out = xp.empty(lead + (tq, v.shape[-1]), dtype=work)
    lse = xp.empty(lead + (tq, 1), dtype=work)
    for q0 in range(0, tq, qb):
        q1 = min(q0 + qb, tq)
        q_blk = q[..., q0:q1, :] * scale
        row_max = xp.full(lead + (q1 - q0, 1), -np.inf, dtype=work)
        row_sum = xp.zeros(lead + (q1 - q0, 1), dtype=work)
        acc = xp.zeros(lead + (q1 - q0, v.shape[-1]), dtype=work)
        k_end = min(tk, q1) if is_causal else tk  # causal: keys after the block's last query are never seen
        for k0 in range(0, k_end, kb):
            k1 = min(k0 + kb, k_end)
            s = xp.matmul(q_blk, xp.swapaxes(k[..., k0:k1, :], -1, -2))
            blocked = _tile_blocked(user_blocked, is_causal, q0, q1, k0, k1, xp)
            if blocked is not None:
                xp.copyto(s, -np.inf, where=blocked)
            m_new = xp.maximum(row_max, s.max(axis=-1, keepdims=True))
            m_safe = xp.maximum(m_new, lowest)  # rows with nothing visible yet stay finite; their p is 0
            s -= m_safe
            xp.exp(s, out=s)
            alpha = xp.exp(row_max - m_safe)  # rescales what was accumulated under the old maximum
            row_sum *= alpha
            row_sum += s.sum(axis=-1, keepdims=True)
            acc *= alpha
            acc += xp.matmul(s, v[..., k0:k1, :])
            row_max = m_new
        empty = row_sum == 0  # every key blocked: output 0, lse +inf (recomputed tiles are 0)
        safe_sum = xp.where(empty, 1.0, row_sum)
        out[..., q0:q1, :] = acc / safe_sum
        lse[..., q0:q1, :] = xp.where(empty, np.inf, xp.maximum(row_max, lowest) + xp.log(safe_sum))
    return record_op("flash_attention", out.astype(out_dtype, copy=False), (Q, K, V), out=out, lse=lse,
                     mask=mask, is_causal=bool(is_causal), block_size=kb, scale=scale)
    ### END SOLUTION


@register_backward("flash_attention")
def flash_attention_backward(grad: Any, node) -> tuple:
    """Recompute each tile P = exp(Q K_bᵀ·scale − lse), then apply the fused SDPA rule tile by tile."""
    ### BEGIN SOLUTION
    Q, K, V = node.inputs
    saved = node.saved
    xp, work, _, q, k, v, lead, scale, user_blocked = _flash_setup(Q, K, V, saved["mask"], saved["scale"])
    out, lse, is_causal = saved["out"], saved["lse"], saved["is_causal"]
    tq, tk = q.shape[-2], k.shape[-2]
    kb, qb = saved["block_size"], _query_block(saved["block_size"])
    g = grad.astype(work, copy=False)
    delta = xp.einsum("...qd,...qd->...q", g, out)[..., None]  # rowsum(dO ⊙ O) = rowsum(dW ⊙ W)
    d_q = xp.empty(lead + q.shape[-2:], dtype=work)
    d_k = xp.zeros(lead + k.shape[-2:], dtype=work)
    d_v = xp.zeros(lead + v.shape[-2:], dtype=work)
    for q0 in range(0, tq, qb):
        q1 = min(q0 + qb, tq)
        q_blk, g_blk = q[..., q0:q1, :] * scale, g[..., q0:q1, :]
        lse_blk, delta_blk = lse[..., q0:q1, :], delta[..., q0:q1, :]
        dq_blk = xp.zeros(lead + (q1 - q0, q.shape[-1]), dtype=work)
        k_end = min(tk, q1) if is_causal else tk
        for k0 in range(0, k_end, kb):
            k1 = min(k0 + kb, k_end)
            k_b, v_b = k[..., k0:k1, :], v[..., k0:k1, :]
            p = xp.matmul(q_blk, xp.swapaxes(k_b, -1, -2))
            blocked = _tile_blocked(user_blocked, is_causal, q0, q1, k0, k1, xp)
            if blocked is not None:
                xp.copyto(p, -np.inf, where=blocked)
            p -= lse_blk
            xp.exp(p, out=p)  # the tile of weights, recomputed
            d_v[..., k0:k1, :] += xp.matmul(xp.swapaxes(p, -1, -2), g_blk)
            d_s = xp.matmul(g_blk, xp.swapaxes(v_b, -1, -2))
            d_s -= delta_blk
            d_s *= p
            dq_blk += xp.matmul(d_s, k_b)
            d_k[..., k0:k1, :] += xp.matmul(xp.swapaxes(d_s, -1, -2), q_blk)  # q_blk carries the scale
        dq_blk *= scale
        d_q[..., q0:q1, :] = dq_blk
    return d_q, d_k, d_v
    ### END SOLUTION


# %% [markdown]
# Chunked attention needs no new operation: it calls your attention on slices of the
# queries (forward only here; concatenating Tensors is module 13's business).

# %%
def chunked_attention(q: Tensor, k: Tensor, v: Tensor, chunk: int = 128, is_causal: bool = False) -> np.ndarray:
    """Attention, query block by query block (forward only): memory chunk × Tk per block."""
    T, Tk = q.shape[-2], k.shape[-2]
    blocks = []
    for q0 in range(0, T, chunk):
        rows = np.arange(q0, min(q0 + chunk, T))
        mask = np.arange(Tk)[None, :] <= rows[:, None] if is_causal else None  # this block's causal rows
        blocks.append(scaled_dot_product_attention(q[..., q0:q0 + chunk, :], k, v, mask=mask)[0].numpy())
    return np.concatenate(blocks, axis=-2)


# %%
def peak_memory(fn) -> float:
    """Peak bytes allocated (as seen by tracemalloc, which NumPy reports to) while fn runs."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


rng = np.random.default_rng(8)
print(f"{'T':>5} | {'standard':>10} | {'chunked (128)':>13} | {'tiled (flash)':>13} | same output")
for T in (512, 1024, 2048):
    q, k, v = (Tensor(rng.standard_normal((1, T, 64), dtype=np.float32)) for _ in range(3))
    ref = scaled_dot_product_attention(q, k, v, is_causal=True)[0].numpy()
    peaks = [peak_memory(lambda: scaled_dot_product_attention(q, k, v, is_causal=True)),
             peak_memory(lambda: chunked_attention(q, k, v, 128, is_causal=True)),
             peak_memory(lambda: flash_attention(q, k, v, is_causal=True, block_size=64))]
    same = np.allclose(chunked_attention(q, k, v, 128, True), ref, atol=1e-5) and \
        np.allclose(flash_attention(q, k, v, is_causal=True).numpy(), ref, atol=1e-5)
    print(f"{T:>5} | {peaks[0] / 2**20:6.2f} MiB | {peaks[1] / 2**20:9.2f} MiB | {peaks[2] / 2**20:9.2f} MiB | {same}")

# %% [markdown]
# The standard path's peak grows 4× per doubling (the `T × T` weights), the chunked one
# 2× (`chunk × T` scores), the tiled one only through its `T × d` output (the tiles are a
# fixed `256 × 64`). The tiled loop is not much faster or slower on a CPU — NumPy cannot
# keep a tile in registers the way a GPU kernel keeps it in on-chip memory, but causal
# tiles in the future are skipped — and it is exact, and its memory no longer limits the
# sequence length. `benchmarks/attention.py` measures time and memory of forward +
# backward up to T = 8192.

# %%
def test_unit_flash_attention():
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((2, 2, 13, 4)), rng.standard_normal((2, 2, 11, 4)), rng.standard_normal((2, 2, 11, 3))]
    g = rng.standard_normal((2, 2, 13, 3))
    mask = np.ones((2, 1, 13, 11))
    mask[0, :, :, 5:] = 0
    mask[1, :, 4] = 0  # a fully blocked query
    for block in (1, 4, 5, 11, 64):
        for m, causal in ((None, False), (None, True), (mask, False), (mask, True)):
            tensors = [Tensor(a, requires_grad=True) for a in arrays]
            out = flash_attention(*tensors, mask=m, is_causal=causal, block_size=block)
            out.backward(g)
            ref_t = [Tensor(a, requires_grad=True) for a in arrays]
            ref = scaled_dot_product_attention(*ref_t, mask=m, is_causal=causal)[0]
            ref.backward(g)
            assert np.allclose(out.numpy(), ref.numpy(), atol=1e-10)
            for a, b in zip(tensors, ref_t):
                assert np.allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-10)
    assert out._node.op == "flash_attention" and np.all(out.numpy()[1, :, 4] == 0)
    print("✓ flash attention equals the standard path: values and gradients, every block size")


test_unit_flash_attention()

# %% [markdown]
# ## 11. Seeing attention
#
# A heatmap of the weights shows, for every query (row), where it looks (columns).
# `plot_attention` draws one matrix, `plot_attention_heads` a grid with one panel per
# head. matplotlib is imported inside the functions (the package does not need it to
# import) and, on a machine without a display, the non-interactive Agg backend is chosen
# so the figure can still be saved; in Jupyter the inline backend is left alone.

# %%
#| export
def _pyplot():
    import matplotlib

    headless = not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")
    in_notebook = "ipykernel" in sys.modules or os.environ.get("MPLBACKEND")
    if headless and not in_notebook and sys.platform.startswith("linux") and "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _to_numpy(weights: Any) -> np.ndarray:
    return weights.numpy() if isinstance(weights, Tensor) else Tensor(weights).numpy()


def _draw(ax, w: np.ndarray, query_tokens, key_tokens, title: str):
    image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-12), aspect="auto")
    ax.set_title(title)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if key_tokens is not None:
        ax.set_xticks(range(len(key_tokens)), [str(t) for t in key_tokens], rotation=90)
    if query_tokens is not None:
        ax.set_yticks(range(len(query_tokens)), [str(t) for t in query_tokens])
    return image


def plot_attention(weights: Any, query_tokens: Any = None, key_tokens: Any = None,
                   title: str = "Attention weights", path: Any = None, ax: Any = None):
    """Heatmap of one (Tq, Tk) weight matrix (leading size-1 dims are dropped); returns the Figure.

    Saves a PNG to `path` when given. Pass `ax` to draw into an existing Axes.
    """
    ### BEGIN SOLUTION
    w = _to_numpy(weights)
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 2:
        raise ValueError(f"plot_attention: needs a (Tq, Tk) matrix, got shape {w.shape}; use plot_attention_heads for heads.")
    for tokens, size, name in ((query_tokens, w.shape[0], "query_tokens"), (key_tokens, w.shape[1], "key_tokens")):
        if tokens is not None and len(tokens) != size:
            raise ValueError(f"plot_attention: {len(tokens)} {name} for {size} rows/columns of weights {w.shape}.")
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.0 + 0.45 * w.shape[1], 1.0 + 0.4 * w.shape[0]))
    else:
        fig = ax.figure
    image = _draw(ax, w, query_tokens, key_tokens, title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
    ### END SOLUTION


def plot_attention_heads(weights: Any, query_tokens: Any = None, key_tokens: Any = None,
                         title: str = "Attention weights per head", path: Any = None, cols: int = 4):
    """Grid of heatmaps, one per head, from (H, Tq, Tk) weights (or (1, H, Tq, Tk)); returns the Figure."""
    ### BEGIN SOLUTION
    w = _to_numpy(weights)
    if w.ndim == 4 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 3:
        raise ValueError(f"plot_attention_heads: needs (H, Tq, Tk) weights, got shape {w.shape}.")
    heads = w.shape[0]
    cols = max(1, min(int(cols), heads))
    rows = -(-heads // cols)
    plt = _pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(cols * (1.0 + 0.3 * w.shape[2]), rows * (1.0 + 0.3 * w.shape[1])),
                             squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h < heads:
            _draw(ax, w[h], query_tokens if h % cols == 0 else None, key_tokens, f"head {h}")
            if h % cols:
                ax.set_yticks([])
                ax.set_ylabel("")
        else:
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
    ### END SOLUTION


# %% [markdown]
# A real sentence. We have no trained model yet, so we build toy embeddings that behave a
# little like trained ones: every *word* gets a fixed random vector (the same word, the same
# vector), words with a similar role share a component ("cat", "it" and "tired" refer to the
# same thing), and a small position signal is added; `Q = K = V` are those vectors.
# Bidirectional attention lets "the" look ahead to the other "the" and "cat" ahead to "it";
# causal attention only looks back — its upper triangle is empty, and "it" still finds
# "cat". (`benchmarks/make_heatmap.py` draws the same figure for the README.)

# %%
import tempfile


GROUPS = {"the": 0, "mat": 1, "cat": 2, "it": 2, "tired": 2, "sat": 3, "was": 3, "on": 4, "because": 4}


def sentence_attention(sentence: str, dim: int = 32, seed: int = 0):
    """Toy embeddings, Q = K = V: returns (tokens, bidirectional weights, causal weights).

    Each word gets a fixed random vector (the same word, the same vector) plus a vector shared
    by words with a similar role (GROUPS: the cat / it / tired, the verbs, the connectives), as
    trained embeddings would, plus a small position signal. Seeded: always the same picture.
    """
    tokens = sentence.split()
    vocab = {word: i for i, word in enumerate(sorted(set(tokens)))}
    rng = np.random.default_rng(seed)
    words = rng.standard_normal((len(vocab), dim))
    roles = rng.standard_normal((max(GROUPS.values()) + 1, dim))
    positions = np.arange(len(tokens))[:, None] / 10000 ** (np.arange(dim)[None, :] / dim)
    x = 0.5 * words[[vocab[w] for w in tokens]] + 0.7 * roles[[GROUPS.get(w, 0) for w in tokens]] + 0.3 * np.sin(positions)
    x = Tensor(x, dtype=np.float32)
    return tokens, scaled_dot_product_attention(x, x, x)[1], scaled_dot_product_attention(x, x, x, is_causal=True)[1]


tokens, bidirectional, causal = sentence_attention("the cat sat on the mat because it was tired")
plt = _pyplot()
fig, axes = plt.subplots(1, 2, figsize=(12, 5))
plot_attention(bidirectional, tokens, tokens, title="bidirectional (BERT-style)", ax=axes[0])
plot_attention(causal, tokens, tokens, title="causal (GPT-style)", ax=axes[1])
heatmap_path = os.path.join(tempfile.mkdtemp(), "attention_heatmap.png")
fig.savefig(heatmap_path, dpi=100)
print("saved", heatmap_path, os.path.getsize(heatmap_path), "bytes;",
      "causal upper triangle all zero:", bool(np.all(np.triu(causal.numpy(), 1) == 0)))
heads_fig = plot_attention_heads(MultiHeadAttention(32, 4)(Tensor(np.random.default_rng(1).standard_normal((1, 6, 32)),
                                                                  dtype=np.float32), is_causal=True)[1],
                                 tokens[:6], tokens[:6], title="4 random heads, causal")


# %%
def test_unit_plots():
    w = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    path = os.path.join(tempfile.mkdtemp(), "w.png")
    fig = plot_attention(Tensor(w), list("abcd"), list("abcd"), path=path)
    assert hasattr(fig, "savefig") and os.path.getsize(path) > 1000
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    fig2 = plot_attention_heads(np.stack([w, w.T, w, w.T, w]), path=path, cols=2)
    assert len([ax for ax in fig2.axes if ax.images]) == 5
    expect_error(ValueError, lambda: plot_attention(np.ones((2, 3, 3))), lambda: plot_attention(w, list("abc")),
                 lambda: plot_attention_heads(w))
    _pyplot().close("all")
    print("✓ heatmaps: figure returned, PNG written, shapes checked")


test_unit_plots()

# %% [markdown]
# ## 12. Debugging attention: five classic bugs and their symptoms
#
# Attention code rarely crashes when it is wrong: the shapes often still fit. Each bug
# below produces a *symptom* that one of the invariants catches:
#
# | bug | symptom | caught by |
# |---|---|---|
# | `Q @ K` instead of `Q @ Kᵀ` | shape error when `Tk ≠ d_k`; silently wrong when square | swapping key/value pairs must not change the output |
# | forgotten `/ √d_k` | weights nearly one-hot at large `d_k`, gradients vanish | comparison with a reference; peak weight ≈ 1 |
# | softmax over the wrong axis (`dim=-2`) | *columns* sum to 1, rows do not | rows sum to 1 |
# | padding mask shaped `(B, T, 1)` instead of `(B, 1, T)` | it blocks queries, padded keys still receive weight | weights on padded keys are 0 |
# | flipped convention (1 = blocked) | causal model looks only at the future | the output of token i must not change when later tokens change |

# %%
def check_rows_sum_to_one(attn) -> bool:
    x = Tensor(np.random.default_rng(10).standard_normal((2, 5, 8)))
    return bool(np.allclose(attn(x, x, x)[1].numpy().sum(-1), 1.0))


def check_key_permutation(attn) -> bool:
    rng = np.random.default_rng(11)
    q, k, v = (Tensor(rng.standard_normal((4, 4))) for _ in range(3))  # square: the wrong transpose still "works"
    order = [2, 0, 3, 1]
    return bool(np.allclose(attn(q, k, v)[0].numpy(), attn(q, k[order], v[order])[0].numpy()))


def check_matches_reference(attn) -> bool:
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((3, 64)) for _ in range(3))
    s = q @ k.T / 8
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return bool(np.allclose(attn(Tensor(q), Tensor(k), Tensor(v))[0].numpy(), w @ v, atol=1e-6))


def check_padding_ignored(attn) -> bool:
    x = Tensor(np.random.default_rng(13).standard_normal((2, 5, 8)))
    w = attn(x, x, x, mask=np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))[1].numpy()
    return bool(np.all(w[0, :, 3:] == 0))


def check_causal(attn) -> bool:
    rng = np.random.default_rng(14)
    x = rng.standard_normal((6, 8))
    y = x.copy()
    y[4:] = rng.standard_normal((2, 8))  # change the future
    run = lambda a: attn(Tensor(a), Tensor(a), Tensor(a), mask=create_causal_mask(6))[0].numpy()
    return bool(np.allclose(run(x)[:4], run(y)[:4]))


def padding_attention(attn):
    """Turns a (B, T) padding mask into the (B, 1, T) keep mask that broadcasts over queries."""
    return lambda q, k, v, mask=None: attn(q, k, v, mask=None if mask is None else mask[:, None, :])


def _numpy_attention(q, k, v, mask=None, transpose_k=True, scale=True, axis=-1, keep_value=1):
    q, k, v = (t.numpy() for t in (q, k, v))
    s = q @ (np.swapaxes(k, -1, -2) if transpose_k else k)
    if scale:
        s = s / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask) == keep_value, s, -1e30)
    w = np.exp(s - s.max(axis, keepdims=True))
    w = w / w.sum(axis, keepdims=True)
    return Tensor(w @ v), Tensor(w)


BUGS = {
    "wrong transpose": (lambda q, k, v, mask=None: _numpy_attention(q, k, v, mask, transpose_k=False), check_key_permutation),
    "forgotten scale": (lambda q, k, v, mask=None: _numpy_attention(q, k, v, mask, scale=False), check_matches_reference),
    "softmax on the wrong axis": (lambda q, k, v, mask=None: _numpy_attention(q, k, v, mask, axis=-2), check_rows_sum_to_one),
    "mask broadcast over queries": (lambda q, k, v, mask=None: _numpy_attention(
        q, k, v, None if mask is None else np.asarray(mask)[:, :, None]), check_padding_ignored),
    "flipped convention": (lambda q, k, v, mask=None: _numpy_attention(q, k, v, mask, keep_value=0), check_causal),
}

ours = scaled_dot_product_attention
for name, (buggy, check) in BUGS.items():
    wrapped = padding_attention(ours) if check is check_padding_ignored else ours
    print(f"{name:30s} caught by {check.__name__:25s}: buggy passes? {check(buggy)}   ours passes? {check(wrapped)}")


# %%
def test_unit_common_bugs():
    for name, (buggy, check) in BUGS.items():
        wrapped = padding_attention(scaled_dot_product_attention) if check is check_padding_ignored \
            else scaled_dot_product_attention
        assert check(wrapped), f"the real implementation fails {check.__name__}"
        assert not check(buggy), f"{check.__name__} does not catch '{name}'"
    print("✓ each classic bug is caught by its invariant; the real implementation passes all five")


test_unit_common_bugs()

# %% [markdown]
# ## 13. Checking against a reference: PyTorch
#
# When PyTorch is installed, the same inputs must give the same numbers as
# `torch.nn.functional.scaled_dot_product_attention`. Remember the conventions: its
# boolean mask is True = attend (like ours); `torch.nn.MultiheadAttention`'s boolean
# masks are True = *blocked*, and its `in_proj_weight` is `(3E, E)` applied as `x @ Wᵀ`
# while our Linear weights are `(in, out)`. The test suite compares both, including
# gradients (`tests/12_attention/test_attention_torch.py`).

# %%
try:
    import torch
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    rng = np.random.default_rng(15)
    q, k, v = (rng.standard_normal((2, 4, 6, 8)) for _ in range(3))
    keep = rng.random((6, 6)) > 0.3
    keep[:, 0] = True
    F = torch.nn.functional
    for label, kwargs, tkw in (("no mask", {}, {}), ("causal", {"is_causal": True}, {"is_causal": True}),
                               ("bool mask", {"mask": keep}, {"attn_mask": torch.tensor(keep)})):
        ours_out = scaled_dot_product_attention(q, k, v, **kwargs)[0].numpy()
        theirs = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), **tkw).numpy()
        print(f"F.scaled_dot_product_attention, {label:9s}: max |difference| = {np.abs(ours_out - theirs).max():.2e}")

    # nn.MultiheadAttention: copy its weights into ours ((3E, E) applied as x @ Wᵀ -> our (in, out) = Wᵀ)
    torch.manual_seed(0)
    E, H = 32, 4
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
    ours = MultiHeadAttention(E, H, dtype=np.float64)
    W, b = theirs.in_proj_weight.detach().numpy(), theirs.in_proj_bias.detach().numpy()
    for i, lin in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
        lin.weight.data, lin.bias.data = W[i * E:(i + 1) * E].T.copy(), b[i * E:(i + 1) * E].copy()
    ours.out_proj.weight.data = theirs.out_proj.weight.detach().numpy().T.copy()
    ours.out_proj.bias.data = theirs.out_proj.bias.detach().numpy().copy()
    x = rng.standard_normal((2, 6, E))
    lengths = [6, 4]
    ours_out, ours_w = ours(Tensor(x), mask=create_padding_mask(lengths, 6), is_causal=True)
    blocked_future = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)          # torch: True = BLOCKED
    blocked_padding = torch.tensor(create_padding_mask(lengths, 6).numpy()[:, 0, 0] == 0)
    t_out, t_w = theirs(*(torch.tensor(x),) * 3, attn_mask=blocked_future, key_padding_mask=blocked_padding,
                        average_attn_weights=False)
    print(f"nn.MultiheadAttention (causal + padding): max |difference| output "
          f"{np.abs(ours_out.numpy() - t_out.detach().numpy()).max():.2e}, "
          f"weights {np.abs(ours_w.numpy() - t_w.detach().numpy()).max():.2e}")

# %% [markdown]
# ## Summary
#
# * Attention is a soft dictionary lookup: `softmax(Q Kᵀ / √d_k) V`, batched over any
#   leading dimensions; the `√d_k` keeps the scores at unit variance (a temperature).
# * Softmax subtracts the row maximum; masks use 1 = attend here, block with `-inf` plus a
#   finite fallback (or the dtype's minimum) and zero fully blocked rows — never NaN.
# * One fused op with a hand-derived backward beats a chain of small ops in memory and
#   time; the composed version is its executable specification.
# * Multi-head attention splits the width into heads at no extra parameter cost.
# * Time and memory grow as `n²`; tiling over keys with an online softmax makes memory
#   linear while staying exact — FlashAttention's idea, which module 13's GPT can use.
