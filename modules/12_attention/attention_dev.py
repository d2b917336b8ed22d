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
# # Module 12: Attention
#
# > Every token decides, for itself, which other tokens matter — and the decision is differentiable.
#
# A recurrent network reads a sentence one word at a time and squeezes everything it
# has seen into one fixed-size state. Attention drops that bottleneck: each position
# looks directly at every other position, computes how relevant each one is, and takes
# a weighted average of what they offer. One matrix multiplication scores all pairs at
# once, so the whole sequence is processed in parallel. This module is the heart of the
# course: module 13's GPT is little more than this module, stacked.
#
# ### What you will be able to do
#
# When you finish you will be able to
#
# 1. explain queries, keys and values as a soft, differentiable dictionary lookup, and
#    compute `softmax(Q Kᵀ / √d_k) V` by hand, with the shape of every step;
# 2. say why the scores are divided by `√d_k`, and use the scale as a temperature;
# 3. build causal and padding masks, combine them, and explain where NaN comes from in
#    naive masked attention (and why float16 needs special care);
# 4. write attention as one operation with a backward rule you derive yourself, dropout
#    included, and check it against numerical gradients;
# 5. split a model's width into heads and merge them back, with no Python loop;
# 6. measure the `O(n²)` cost on your own code, and remove the `n²` memory with tiled
#    attention and an online softmax (FlashAttention's idea);
# 7. read an attention heat map, and recognise the classic attention bugs from their symptoms.
#
# **Time:** about five hours, best in two or three sittings: sections 1–6 (the formula,
# masks, composed attention), then 7–9 (the fused operation, gradients, heads), then
# 10–13 (cost, tiling, pictures, debugging) and the exercises.
#
# ### What you will write
#
# | section | you write | what it does |
# |---|---|---|
# | 5 | `create_causal_mask`, `create_padding_mask`, `_blocked_positions` | the masks every language model uses, and one boolean "blocked" array from them |
# | 6 | `composed_attention` | attention from the Tensor operations you already have |
# | 7 | `_masked_softmax_`, `scaled_dot_product_attention`, its two backward rules | the same maths as **one** recorded operation with a hand-derived backward |
# | 9 | `MultiHeadAttention.forward`, `SelfAttention.forward` | several heads in parallel, with learned projections |
# | 11 | `flash_attention` and its backward rule | exact attention tiled over key blocks: memory linear in length |
#
# Everything else is given: input checks whose wording the tests rely on, the plotting
# code, a plain-NumPy reference, and a set of **checks** that run *your* functions and,
# when a result is wrong in the way a classic mistake makes it wrong, name the mistake.
# Each piece you write is followed by its test (`test_unit_…`), which prints one `✓` line.
# Write the pieces in order: the notebook runs top to bottom, and every cell uses only what
# is written above it. `tito export 12` copies your code into the package and
# `tito test 12` runs the module's tests.

# %%
#| default_exp core.attention

# %% [markdown]
# This lesson times your code. NumPy hands large matrix products to a BLAS library that
# splits them over several threads; on a busy machine those threads wait for each other
# and the same product can take ten times longer from one run to the next. So the lesson
# asks for one BLAS thread. The setting only works before NumPy is first imported, which
# is why it is the first thing that runs (in Jupyter: restart the kernel before running
# the notebook from the top).

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| export
import math
from pathlib import Path
from typing import Any

import numpy as np

from tinytorch.core.activations import softmax
from tinytorch.core.autograd import register_backward, register_flops
from tinytorch.core.layers import Linear, Module, make_rng
from tinytorch.core.tensor import Tensor, array_module, as_tensor, cast, device_of, record_op, to_array, to_host
from tinytorch.files import atomic_write

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
# may differ (a decoder reading an encoder), and so may `d_k` and `d_v`. `Kᵀ` means the
# last two axes of `K` swapped (`K.transpose(-2, -1)`), whatever the leading axes are.
#
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
# `(e¹, e⁰, e^0.5) / (e¹ + e⁰ + e^0.5)`. Here are the steps with the Tensor operations of
# modules 01–02, each with its shape. Compute rather than copy: a widely copied version of
# this example rounds the weights to 0.5066/0.3071/0.4518, which is off by more than 1e-4.

# %%
X = Tensor([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=np.float64)
np.set_printoptions(precision=5, suppress=True)
step_scores = X @ X.transpose(-2, -1)
step_scaled = step_scores * (1 / math.sqrt(X.shape[-1]))
step_weights = softmax(step_scaled, dim=-1)
step_output = step_weights @ X
for label, t in (("Q @ Kᵀ", step_scores), ("· 1/√d_k", step_scaled), ("softmax", step_weights),
                 ("@ V", step_output)):
    print(f"{label:9s} shape {t.shape}:\n{t.numpy()}")
print("row sums of the weights:", step_weights.numpy().sum(-1))

# %% [markdown]
# ### Given: the hand example's numbers and a reference
#
# The next cell imports given code from `tinytorch.core.attention_checks` (its source,
# `attention_checks.py`, sits beside this lesson; the tests use it too). `HAND_X` is the
# example above. From section 6 on, the given *checks* (`check_attention`, `check_dropout`,
# ...) run your functions and name the mistake your numbers show; they compare with
# `reference_attention(q, k, v, keep=None, scale=None)`, the formula in plain NumPy (float64),
# with the fully blocked queries of section 5 giving 0, whose keyword-only switches reproduce
# classic mistakes.
#
# An attention function in this lesson is called as `attn(Q, K, V, mask=None,
# is_causal=False, scale=None)` and returns `(output, weights)` (or only the output, for
# `flash_attention`).

# %%
from tinytorch.core.attention_checks import (  # given: modules/12_attention/attention_checks.py
    GRADIENT_CHECKS, GRAD_SCALE, HAND_X, check_attention, check_dropout, check_dropout_backward,
    check_flash_attention, check_key_padding_mask, check_multi_head, check_multi_head_dropout,
    demonstrate_bugs, expect_error, grads_of, weights_rule_mistake)

# %% [markdown]
# ## 3. Why divide by √d_k? And temperature
#
# If the entries of `q` and `k` are independent with mean 0 and variance 1, their dot
# product `q·k = Σᵢ qᵢkᵢ` is a sum of `d_k` terms of variance 1: its **variance is d_k**.
# At `d_k = 64` the unscaled scores have a standard deviation of about 8, so within one
# row a few scores are tens of units above the rest and the softmax is almost one-hot.
# A near one-hot softmax has a near-zero derivative (`w(1-w) ≈ 0`): the gradients vanish
# and the attention cannot learn where to look. Dividing by `√d_k` brings the variance
# back to 1 whatever the width.
#
# **Predict, then run.** Write down, for `d_k = 8, 64, 512`, the standard deviation of
# the raw scores and roughly how large the biggest of 16 softmax weights will be, with
# and without the scaling. Then run the cell (random vectors, 16 keys per query).

# %%
def score_statistics(d_k: int, n_queries: int = 2000, n_keys: int = 16, seed: int = 0):
    """[(std, mean top weight, mean largest w(1-w))] for raw and for scaled scores."""
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
# `scale=` argument of the functions you will write lets you choose another one (module 13
# uses the same idea to sample text more or less adventurously). The entropy
# `−Σ w log w` measures how spread out the weights are: 0 for one-hot, `ln n` for uniform.

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
#
# **Predict, then run:** what does the naive formula print for `[1000, 1001, 1002]`, and
# what does the stable one print?

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
# other code: `torch.nn.MultiheadAttention`'s boolean `attn_mask` and `key_padding_mask`
# use the **opposite** (True = blocked), and many code bases pass an **additive** mask
# (0 where allowed, `-inf` or `-1e9` where blocked) that is added to the scores.
#
# * **Causal** (GPT, decoders): token `i` may look at tokens `0 … i`, never the future.
#   The mask is the lower triangle of ones: row `i` (a query) has ones in columns `0 … i`.
#   Without it (BERT, encoders) attention is **bidirectional**: everyone sees everyone.
# * **Padding**: sentences of different lengths are padded to one length to form a batch;
#   the padding must never be attended to. `create_padding_mask(lengths, T)` has shape
#   `(B, 1, 1, T)`: it broadcasts over the heads (axis 1) and over the queries (axis 2)
#   and blocks *keys*.
#
# Masks broadcast against the scores `(B, H, Tq, Tk)` by the usual rules: a `(Tq, Tk)`
# causal mask applies to every batch item and head, a `(B, 1, 1, Tk)` padding mask to
# every head and query of its batch item. Two masks combine by blocking what *either*
# blocks: on keep masks that is `keep₁ & keep₂`, on blocked masks `blocked₁ | blocked₂`.
#
# **A mask holds only booleans or 0/1.** Because of the two conventions above, anything
# else is refused: an additive `0/-inf` mask passed as a keep mask would be read upside
# down (its 0s, the positions it allows, would be blocked). The given `_keep_mask` raises
# a `ValueError` that says how to convert: `keep = additive == 0` for an additive mask,
# `keep = ~blocked` for a True-means-blocked one.
#
# The attention functions accept a mask as bool, 0/1 ints or 0/1 floats, as a Tensor, an
# array or a list, plus `is_causal=True` (no mask array needed). `_blocked_positions`,
# which you write, turns all of that into **one** boolean array, True where a query may
# *not* look.
#
# **Alignment of `is_causal` when `Tq ≠ Tk`.** Query `i` may see key `j` when `j <= i`,
# both counted from 0: the triangle starts in the top-left corner (PyTorch's rule). With a
# KV cache (module 13) the `Tq` new queries are the *last* `Tq` of `Tk` positions, so the
# triangle must start bottom-right instead: pass an explicit mask,
# `create_causal_mask(Tk)[-Tq:]`; for a single new query that row is all ones.

# %%
#| export
def _keep_mask(mask: Any, scores_shape: tuple, like: Any) -> Any:
    """The caller's mask as a bool array (True = attend) on `like`'s device, checked.

    mask         -- bool, or numbers that are all 0 or 1; a Tensor, a NumPy/CuPy array or a list
    scores_shape -- the shape the mask must broadcast to, (…, Tq, Tk)
    Raises ValueError naming both shapes when it does not broadcast, and ValueError stating the
    convention and how to convert when it holds anything but booleans or 0/1 (an additive
    0/-inf or 0/-1e9 mask, NaN, 0.5, 2). A bool mask comes back as it is (not copied).
    """
    keep = to_array(mask, device=device_of(like))
    scores_shape = tuple(scores_shape)
    try:
        full = np.broadcast_shapes(tuple(keep.shape), scores_shape)
    except ValueError:
        full = None
    if full != scores_shape:
        raise ValueError(
            f"attention mask of shape {tuple(keep.shape)} does not broadcast to the scores' shape "
            f"{scores_shape} (..., Tq, Tk)."
        )
    if keep.dtype == bool:
        return keep
    xp = array_module(keep)
    zero = keep == 0
    valid = zero | (keep == 1)
    if not bool(valid.all()):
        odd = sorted({float(value) for value in to_host(keep[~valid]).ravel()[:1000]}, key=str)[:3]
        raise ValueError(
            "attention masks hold booleans or 0/1 only: 1/True = attend, 0/False = blocked; this mask also "
            f"holds {', '.join(map(str, odd))}. An additive mask (0 = attend, -inf or -1e9 = blocked) converts "
            "with keep = additive == 0; a mask where True means blocked (torch.nn.MultiheadAttention's) "
            "with keep = ~blocked."
        )
    return xp.logical_not(zero)


def create_causal_mask(seq_len: int, device: str | None = None) -> Tensor:
    """(seq_len, seq_len) float32 Tensor of 1s and 0s: row i (a query) has 1 in columns 0..i.

    Query i may attend to keys 0..i — itself included — and to nothing after it.
    `device` ("cpu" or "cuda", default the CPU) is where the Tensor lives.
    """
    if int(seq_len) < 1:
        raise ValueError(f"create_causal_mask: seq_len must be at least 1, got {seq_len}.")
    ### BEGIN SOLUTION
    return Tensor(np.tril(np.ones((int(seq_len), int(seq_len)), dtype=np.float32)), device=device)
    ### END SOLUTION


# %%
def test_unit_causal_mask():
    causal = create_causal_mask(3)
    assert causal.dtype == np.float32 and causal.shape == (3, 3), (
        f"create_causal_mask(3) must be a (3, 3) float32 Tensor of 1s and 0s, got {causal.dtype} {causal.shape}: "
        "make the ones with dtype=np.float32")
    assert np.array_equal(causal.numpy(), [[1, 0, 0], [1, 1, 0], [1, 1, 1]]), \
        f"create_causal_mask(3) must be the lower triangle with its diagonal, got\n{causal.numpy()}"
    expect_error(ValueError, lambda: create_causal_mask(0))
    print("✓ causal mask: the lower triangle of ones, diagonal included")


test_unit_causal_mask()


# %%
#| export
def create_padding_mask(lengths: Any, max_length: int | None = None) -> Tensor:
    """(B, 1, 1, max_length) float32 Tensor: 1 on the first lengths[b] positions of row b, 0 on padding.

    `lengths` is a list, a NumPy/CuPy array or a Tensor of B non-negative ints; max_length
    defaults to the largest length. The given lines at the top check them: your code starts
    with `lengths` a 1-D int64 array (NumPy or CuPy) and `max_length` an int. The two size-1
    axes let the mask broadcast over the heads and the queries of scores (B, H, Tq, Tk): it
    blocks keys. Build it on the lengths' device (`xp = array_module(lengths)`), no Python loop.
    """
    lengths = to_array(lengths, dtype=np.int64).reshape(-1)
    longest = int(lengths.max()) if lengths.size else 0
    max_length = longest if max_length is None else int(max_length)
    if lengths.size and (int(lengths.min()) < 0 or longest > max_length):
        raise ValueError(
            f"create_padding_mask: lengths must lie in [0, max_length={max_length}], got {to_host(lengths).tolist()}."
        )
    ### BEGIN SOLUTION
    xp = array_module(lengths)
    real = xp.arange(max_length)[None, :] < lengths[:, None]  # (B, max_length): position < length
    return Tensor(real.astype(np.float32)[:, None, None, :])
    ### END SOLUTION


# %%
def test_unit_padding_mask():
    pad = create_padding_mask([2, 3, 0], 4)
    assert pad.shape == (3, 1, 1, 4), (f"create_padding_mask([2, 3, 0], 4) must have shape (3, 1, 1, 4), got "
                                       f"{pad.shape}: the padding mask blocks KEYS, the last axis; the two size-1 axes "
                                       "broadcast over the heads and the queries")
    expected = [[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    assert np.array_equal(pad.numpy()[:, 0, 0], expected), (
        f"create_padding_mask([2, 3, 0], 4): expected rows {expected} (1 where position < length, 0 on the padding), "
        f"got {pad.numpy()[:, 0, 0].astype(int).tolist()}")
    assert pad.dtype == np.float32, f"the padding mask must be float32 (1.0 and 0.0), got {pad.dtype}"
    default = create_padding_mask(np.array([1, 2])).shape
    assert default == (2, 1, 1, 2), f"without max_length the mask is as long as the longest: (2, 1, 1, 2), got {default}"
    expect_error(ValueError, lambda: create_padding_mask([5], 4))
    print("✓ padding mask: (B, 1, 1, T), ones on the real tokens")


test_unit_padding_mask()


# %%
#| export
def _blocked_positions(mask: Any, is_causal: bool, scores_shape: tuple, like: Any) -> Any:
    """Bool array broadcastable to `scores_shape` (…, Tq, Tk), True where a query may NOT look; or None.

    mask      -- the caller's keep mask (1/True = attend) or None. Turn it into a checked bool
                 array with the given `_keep_mask(mask, scores_shape, like)`, then invert it.
    is_causal -- also block every key j > query i, both counted from 0 (top-left aligned):
                 a (Tq, Tk) boolean triangle that broadcasts over the leading dims. Blocked by
                 the mask OR by causality means blocked.
    like      -- an array on the right device: build the triangle with `array_module(like)`.
    Returns None when nothing is blocked (mask None and is_causal False), otherwise a NEW
    array: never the caller's mask itself, so later changes to it change nothing here.
    """
    ### BEGIN SOLUTION
    xp = array_module(like)
    blocked = None if mask is None else ~_keep_mask(mask, scores_shape, like)
    if is_causal:
        tq, tk = scores_shape[-2], scores_shape[-1]
        future = xp.arange(tk)[None, :] > xp.arange(tq)[:, None]  # (Tq, Tk): key j > query i
        blocked = future if blocked is None else blocked | future
    return blocked
    ### END SOLUTION


# %% [markdown]
# The masks for a batch of two sentences of lengths 3 and 1, padded to 4, and their
# combination with the causal mask (a product of keep masks is their `&`):

# %%
print("causal mask (4):\n", create_causal_mask(4).numpy())
print("padding mask for lengths [3, 1], T=4:", create_padding_mask([3, 1], 4).numpy().reshape(2, 4).tolist(),
      "shape", create_padding_mask([3, 1], 4).shape)
combined = create_causal_mask(4).numpy() * create_padding_mask([3, 1], 4).numpy()
print("causal x padding broadcasts to", combined.shape, "; item 1, head 0:\n", combined[1, 0])
print("blocked positions of item 1 (padding and causal):\n",
      _blocked_positions(create_padding_mask([3, 1], 4), True, (2, 1, 4, 4), np.zeros(1))[1, 0])


# %%
def test_unit_blocked_positions():
    causal = _blocked_positions(None, True, (3, 5), np.zeros(1))
    key, query = np.arange(5)[None, :], np.arange(3)[:, None]
    assert causal is not None and causal.dtype == bool, f"is_causal=True must give a bool array, got {causal!r}"
    assert not np.array_equal(causal, key >= query), \
        f"off by one: the diagonal is blocked, but query i must see key i (itself):\n{causal}"
    assert not np.array_equal(causal, key > query + 1), f"off by one: query i sees key i+1 (the future):\n{causal}"
    assert np.array_equal(causal, key > query), \
        f"is_causal with Tq=3, Tk=5 must block exactly the keys j > i (top-left aligned), got\n{causal}"
    keep = np.array([[1, 0, 1], [1, 1, 1]])
    blocked = _blocked_positions(keep, False, (2, 3), np.zeros(1))
    assert blocked is not None and blocked.dtype == bool, f"a mask must give a bool array, got {blocked!r}"
    assert not np.array_equal(blocked, keep == 1), "the mask convention is inverted: 1 means attend, so 0 is blocked"
    assert np.array_equal(blocked, keep == 0), f"a keep mask {keep.tolist()} blocks where it is 0, got\n{blocked}"
    both = _blocked_positions(create_padding_mask([1, 2], 2), True, (2, 1, 2, 2), np.zeros(1))
    assert np.array_equal(both[:, 0], [[[False, True], [False, True]], [[False, True], [False, False]]]), \
        f"a key blocked by the padding mask OR by causality is blocked, got\n{both}"
    nothing = _blocked_positions(None, False, (2, 2), np.zeros(1))
    assert nothing is None, f"no mask and is_causal=False block nothing: return None, got {nothing!r}"
    keep = np.ones((2, 2), dtype=bool)
    assert _blocked_positions(keep, False, (2, 2), np.zeros(1)) is not keep, "return a new array, not the caller's mask"
    expect_error(ValueError, lambda: _blocked_positions(np.ones((3, 3)), False, (2, 4, 4), np.zeros(1)))
    expect_error(ValueError, *(lambda m=m: _blocked_positions(m, False, (2, 2), np.zeros(1))
                               for m in ([[0, -np.inf], [0, 0]], [[0, -1e9], [0, 0]], [[np.nan, 1], [1, 1]],
                                         [[0.5, 1], [1, 1]], [[2, 1], [1, 1]])),
                 says=("1/True = attend", "keep = additive == 0"))
    print("✓ blocked positions: mask and causal triangle in one boolean array; only 0/1 masks accepted")


test_unit_blocked_positions()

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
#    so then set the weights of blocked positions to exactly 0.
#
# Float16 has a second trap: the scores themselves. Sixty-four features of 40 give a dot
# product of 102,400, beyond float16's 65,504: it becomes `inf` before any mask is applied,
# and `inf - inf` is NaN again. So attention on float16 inputs computes in float32 and
# returns float16.
#
# **Predict, then run:** what does each line print?

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

# %% [markdown]
# ## 6. Attention from the operations you have
#
# Now write the formula as a function, from Tensor operations of modules 01–02 (module
# 05 then differentiates it for free). Three given helpers come first: `_check_qkv`
# raises the shape errors (the tests check their wording); `_work_dtype` says which dtype
# to compute in (float16 is computed in float32); module 01's `cast(x, dtype)` converts a
# Tensor to another dtype as a recorded operation (op `"cast"`), whose backward rule,
# casting the gradient back to the input's dtype, is registered here.
#
# `composed_attention`'s contract (its docstring says the same):
#
# * compute in `_work_dtype(Q, K, V)[0]`: cast Q, K and V with `cast`, and cast the two
#   results back to `_work_dtype(Q, K, V)[1]` (float16 in, float16 out);
# * `scale` defaults to `1/√d_k`; scores `(Q @ Kᵀ) · scale`;
# * `blocked = _blocked_positions(mask, is_causal, scores.shape, scores.data)`; where it is
#   not None, `masked_fill` the blocked scores with the work dtype's most negative finite
#   number, take `softmax(…, dim=-1)`, then `masked_fill` the blocked *weights* with 0.0;
# * return `(weights @ V, weights)`.

# %%
#| export
def _check_qkv(Q: Tensor, K: Tensor, V: Tensor, name: str) -> None:
    """ValueError naming the shapes when Q (…, Tq, dk), K (…, Tk, dk), V (…, Tk, dv) do not fit.

    An empty key sequence (Tk = 0) is refused too: every query needs at least one key. (A
    query whose keys are all *masked* is different: it gets weights 0 and output 0.)
    """
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
    if K.shape[-2] == 0:
        raise ValueError(
            f"{name}: there are no keys to attend to (Tk = 0; K has shape {K.shape}, V has shape {V.shape}). "
            "Every query needs at least one key; pass a mask to hide keys instead."
        )
    try:
        np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{name}: the leading (batch, head) dims of Q {Q.shape}, K {K.shape} and V {V.shape} do not broadcast."
        ) from None


def _work_dtype(*tensors: Tensor):
    """(dtype to compute in, dtype to return): float16 is computed in float32, others in their own dtype."""
    out = np.result_type(*(t.dtype for t in tensors))
    if not np.issubdtype(out, np.floating):
        out = np.dtype(np.float32)
    return np.result_type(out, np.float32), out


@register_backward("cast")
def cast_backward(grad: Any, node) -> tuple:
    """The gradient of module 01's `cast` goes back in the input's dtype."""
    return (grad.astype(node.inputs[0].dtype),)


def composed_attention(Q: Any, K: Any, V: Any, mask: Any = None, is_causal: bool = False,
                       scale: float | None = None) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale) V built from Tensor ops (matmul, transpose, masked_fill, softmax, cast).

    Q (…, Tq, dk), K (…, Tk, dk), V (…, Tk, dv) -> (output (…, Tq, dv), weights (…, Tq, Tk)).
    mask / is_causal -- as `_blocked_positions` reads them (1/True = attend; top-left causal).
    scale            -- multiplies the scores; default 1/√dk.
    Computes in `_work_dtype(Q, K, V)[0]` (cast with module 01's `cast`) and returns both results in
    `_work_dtype(Q, K, V)[1]`. Blocked scores are filled with the work dtype's most negative
    finite number before the softmax, and blocked weights are set to exactly 0 after it, so a
    query with every key blocked gets weights 0 and output 0. Shape errors are raised for you.
    """
    Q, K, V = as_tensor(Q), as_tensor(K), as_tensor(V)
    _check_qkv(Q, K, V, "composed_attention")
    ### BEGIN SOLUTION
    work, out_dtype = _work_dtype(Q, K, V)
    Q, K, V = (cast(t, work) for t in (Q, K, V))
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else float(scale)
    scores = (Q @ K.transpose(-2, -1)) * scale
    blocked = _blocked_positions(mask, is_causal, scores.shape, scores.data)
    if blocked is not None:
        scores = scores.masked_fill(blocked, float(np.finfo(work).min))
    weights = softmax(scores, dim=-1)
    if blocked is not None:
        weights = weights.masked_fill(blocked, 0.0)
    return cast(weights @ V, out_dtype), cast(weights, out_dtype)
    ### END SOLUTION


# %% [markdown]
# ### Given: the checks
#
# Each check runs an attention function of yours on small inputs, compares with
# `reference_attention`, and raises `AttentionBug` when the result is wrong. When your
# numbers are *exactly* what a classic mistake produces, the message names that mistake.
# `check_attention(attn)` runs the forward checks in this order: keys matched one by one,
# rows that sum to 1, the scale (the hand example), a padding mask, causal masks, both
# together, fully blocked queries, float16, and any leading shape. `check_gradients` and
# `check_fully_blocked_gradients` compare your gradients with central differences.
# Section 13 explains the symptoms; read the code (`attention_checks.py`) when a check fails.

# %% [markdown]
# Your function on the hand example (compare with section 2), and the checks. Each check
# prints nothing when your function passes; the test prints one line at the end.

# %%
out, weights = composed_attention(X, X, X)
print("weights:\n", weights.numpy())
print("output:\n", out.numpy())


# %%
def test_unit_composed_attention():
    check_attention(composed_attention)  # hand example, shapes, masks, fully blocked rows, float16
    for check in GRADIENT_CHECKS:
        check(composed_attention)
    expect_error(ValueError, lambda: composed_attention(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((2, 3))),
                 lambda: composed_attention(np.zeros((2, 3)), np.zeros((0, 3)), np.zeros((0, 3))),
                 lambda: composed_attention(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), mask=[[0, -np.inf]] * 2))
    print("✓ composed attention: hand example, masks, fully blocked rows, float16, gradients")


test_unit_composed_attention()

# %% [markdown]
# ## 7. One operation with a fused backward
#
# `composed_attention` records six or seven operations: a matmul, a transpose, a scale,
# two masked fills, a softmax and a matmul. Each keeps its own `(…, Tq, Tk)` array
# alive for the backward pass, and each backward rule allocates another. At `Tq = Tk =
# 2048` one such array is 16 MiB per head. A real framework writes attention as **one
# operation** with a hand-derived backward rule; you will too.
#
# **Forward**, in as few passes over the `(…, Tq, Tk)` array as possible, all in place on
# the freshly made scores: `S = Q Kᵀ` (a new array), `S *= scale`, blocked entries `= -inf`,
# `m = max(S)` per row, `S -= m`, `exp(S)` in place, `l = sum(S)` per row, `S *= 1/l`.
# The result is the softmax `P`. Two guards make fully blocked rows safe without a special
# case: a row maximum of `-inf` is replaced by a finite number (`max(m, finfo.min)`), and a
# row sum of 0 by 1 — so such a row comes out all zeros. That is `_masked_softmax_`.
#
# **Dropout** on the weights (`dropout_p = p > 0`, only while `training`): draw a keep/drop
# mask `M` (1 with probability `1-p`) and use `W = P ⊙ M / (1-p)`, so each weight keeps its
# expected value. Then `O = W V`. Without dropout, `W = P`.
#
# **Backward.** With `dO` the gradient of the output, write `D = M/(1-p)` (all ones without
# dropout), so `W = P ⊙ D`:
#
# 1. `O = W V`, so `dV = Wᵀ dO` and `dW = dO Vᵀ` — the weights *as applied*, dropout included.
# 2. `W = P ⊙ D` is an elementwise product with a constant, so `dP = dW ⊙ D`: the gradient
#    flows only through the weights that were kept, rescaled by the same `1/(1-p)`. A
#    dropped weight passed nothing forward, so it gets nothing back.
# 3. Softmax, row by row: `dS = P ⊙ (dP − rowsum(dP ⊙ P))`.
# 4. The row sum is cheap: `rowsum(dP ⊙ P) = Σₖ dW_qk D_qk P_qk = Σₖ dW_qk W_qk
#    = Σₖ W_qk (dO_q · V_k) = dO_q · O_q` — one dot product per query on `(…, Tq, d_v)`
#    arrays instead of another pass over `(…, Tq, Tk)` (FlashAttention's trick). It holds
#    with dropout too, because `O` is computed from the dropped weights.
# 5. `S = scale · Q Kᵀ`, so `dQ = dS K · scale` and `dK = dSᵀ Q · scale`.
#
# Blocked positions have `P = 0`, so their `dS` is 0: no gradient reaches a key through a
# position that was blocked, and a fully blocked row has finite (zero) gradients.
#
# The weights are also returned, as a Tensor with its own small op (`sdpa_weights`,
# inputs `(Q, K)`), so a loss that uses them (say, a penalty on attention entropy) still
# differentiates: its rule is steps 2, 3 and 5 starting from the weights' gradient `dW`.

# %%
#| export
def _masked_softmax_(scores: Any, blocked: Any) -> Any:
    """Softmax over the last axis (the keys), computed in place in `scores`, which is returned.

    scores  -- a float array (…, Tq, Tk) that may be overwritten (NumPy or CuPy: use array_module)
    blocked -- None, or a bool array broadcastable to scores, True where the weight must be 0
    Blocked entries come out exactly 0, and a row whose entries are all blocked comes out all
    zeros (never NaN): fill blocked scores with -inf, replace a -inf row maximum by the dtype's
    most negative finite number, and a row sum of 0 by 1. No new (…, Tq, Tk) array.
    `blocked` is often smaller than scores (a (Tq, Tk) causal mask for (B, H, Tq, Tk)
    scores), so `scores[blocked] = -inf` does not work; fill through the broadcast with
    `xp.copyto(scores, -xp.inf, where=blocked)`.
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


# %%
def test_unit_masked_softmax():
    small = _masked_softmax_(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 4.0]]), None)
    assert np.allclose(small.sum(-1), 1), (f"each row (one query's scores over the keys) must sum to 1, the rows sum "
                                           f"to {small.sum(-1).round(4).tolist()}: normalise over the last axis, -1")
    s = np.array([[1000.0, 1001.0, 1002.0], [1.0, 2.0, 3.0], [0.0, 5.0, 1.0]])
    blocked = np.array([[False, False, False], [False, True, False], [True, True, True]])
    out = _masked_softmax_(s, blocked)
    assert out is s, "_masked_softmax_ must work in place and return `scores` itself"
    assert np.allclose(out[0], [0.09003, 0.24473, 0.66524], atol=1e-5), (
        f"row 0, scores [1000, 1001, 1002]: expected the softmax [0.09003, 0.24473, 0.66524], got {out[0]}: subtract "
        "the row maximum before exp (exp(1000) overflows), then divide by the row sum")
    assert out[1, 1] == 0 and np.isclose(out[1].sum(), 1), f"a blocked entry must be exactly 0: {out[1]}"
    assert not np.isnan(out[2]).any(), \
        f"a fully blocked row gave {out[2]}: its maximum is -inf and -inf - (-inf) = NaN; replace it by a finite number"
    assert np.all(out[2] == 0), f"a fully blocked row must be all zeros, got {out[2]}"
    heads = np.zeros((2, 3, 2, 2))  # (B, H, Tq, Tk) scores against a (Tq, Tk) causal mask
    try:
        _masked_softmax_(heads, np.array([[False, True], [False, False]]))
    except IndexError as err:
        raise AssertionError(f"a (Tq, Tk) mask against (B, H, Tq, Tk) scores raised IndexError ({err}): "
                             "the mask broadcasts, so fill with xp.copyto(scores, -xp.inf, where=blocked)") from None
    assert np.all(heads[..., 0, 1] == 0) and np.allclose(heads[..., 1, :], 0.5), \
        "a broadcast mask must block the same key in every batch item and head"
    plain = _masked_softmax_(np.array([[1.0, 2.0], [3.0, 3.0]]), None)
    assert np.allclose(plain.sum(-1), 1) and np.allclose(plain[1], 0.5), \
        f"blocked=None: each row must sum to 1 and [3, 3] give [0.5, 0.5]; got {plain.tolist()}"
    print("✓ masked softmax: in place, stable, blocked entries 0, fully blocked rows 0")


test_unit_masked_softmax()


# %%
#| export
def scaled_dot_product_attention(Q: Any, K: Any, V: Any, mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 training: bool = True, rng: Any = None) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale) V as one recorded op ("sdpa") with a fused backward rule.

    Q (…, Tq, dk), K (…, Tk, dk), V (…, Tk, dv); leading dims broadcast.
    Returns (output (…, Tq, dv), weights (…, Tq, Tk)), the weights as applied to V.
    mask      -- keep mask (1/True = attend, 0/False = blocked), broadcastable to (…, Tq, Tk);
                 bool or 0/1 numbers, as a Tensor, array or list; anything else is a ValueError
    is_causal -- query i attends to key j only when j <= i, both counted from 0: the triangle
                 is aligned top-left, as PyTorch's. For Tq new queries that come *after* Tk - Tq
                 cached keys (a KV cache) pass mask=create_causal_mask(Tk)[-Tq:] instead
                 (bottom-right); one new query may see every cached key, so it needs no mask.
    scale     -- multiplies the scores; default 1/√dk
    dropout_p -- dropout on the weights, only when `training` is True (the default, as in
                 torch.nn.functional.scaled_dot_product_attention); `rng` (a NumPy Generator or
                 an int seed) makes the dropout mask reproducible
    Blocked weights are exactly 0; a query with every key blocked gets weights 0 and output 0.
    float16 is computed in float32 and returned as float16.

    What it records (the backward rules below read exactly this):
    * op "sdpa", inputs (Q, K, V), the output; saved: `weights` (as applied to V, work dtype),
      `probs` (the softmax before dropout), `drop` (None, or the dropout factor M/(1-p): 0 or
      1/(1-p) per weight, work dtype), `out` (the output in the work dtype), `scale` (a float);
    * op "sdpa_weights", inputs (Q, K), the returned weights; saved: `probs`, `drop`, `scale`.
    Dropout's mask: keep = make_rng(rng).random(probs.shape) >= dropout_p, drawn with NumPy
    (on the host, as module 03's Dropout) and moved to probs' device.
    """
    Q, K, V = as_tensor(Q), as_tensor(K), as_tensor(V)
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
    blocked = _blocked_positions(mask, is_causal, scores.shape, scores)
    probs = _masked_softmax_(scores, blocked)
    drop = None
    weights = probs
    if dropout_p > 0.0 and training:
        keep = make_rng(rng).random(probs.shape) >= dropout_p
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


# %% [markdown]
# The checks for dropout (given): `check_dropout` draws with `dropout_p=0.25` on uniform
# weights, where every weight must come out 0 or `1/40` rescaled by `1/(1-p)`, reproducibly
# for one `rng`, and untouched when `training=False`; `check_dropout_backward` compares the
# gradients with dropout on against central differences (same `rng`, so the same mask each
# call) and names the mistake of a backward that forgets the mask.

# %%
def test_unit_sdpa_forward():
    check_attention(scaled_dot_product_attention)
    check_dropout(scaled_dot_product_attention)
    Q = Tensor(HAND_X, requires_grad=True)
    out, w = scaled_dot_product_attention(Q, Q, Q)
    assert out._node.op == "sdpa" and out._node.inputs == (Q, Q, Q), "record one op 'sdpa' with inputs (Q, K, V)"
    assert w._node.op == "sdpa_weights" and w._node.inputs == (Q, Q), "the weights: op 'sdpa_weights', inputs (Q, K)"
    saved = out._node.saved
    missing = {"weights", "probs", "drop", "out", "scale"} - set(saved)
    assert not missing, f"'sdpa' must save weights, probs, drop, out and scale; {sorted(missing)} missing"
    assert saved["drop"] is None and saved["scale"] == 0.5, (
        f"without dropout 'sdpa' saves drop=None, and the hand example's scale 1/√4 = 0.5; got drop={saved['drop']!r}, "
        f"scale={saved['scale']!r}")
    print("✓ scaled_dot_product_attention forward: the checks pass, dropout, one recorded op")


test_unit_sdpa_forward()


# %%
#| export
@register_backward("sdpa")
def sdpa_backward(grad: Any, node) -> tuple:
    """Gradients (dQ, dK, dV) of "sdpa" from `grad` = dO (…, Tq, dv), in the work dtype of `probs`.

    dV = Wᵀ dO; dW = dO Vᵀ; dP = dW ⊙ drop (when there was dropout);
    dS = P ⊙ (dP − rowsum(dO ⊙ O)); dQ = dS K · scale; dK = dSᵀ Q · scale.
    Read node.inputs (Q, K, V) and node.saved (weights, probs, drop, out, scale); compute only
    the gradients of inputs that require one (None for the others). The engine sums gradients
    over broadcast leading dims and casts them to each input's dtype.
    """
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
        d_s = xp.matmul(g, xp.swapaxes(V.data.astype(work, copy=False), -1, -2))  # dW, a fresh array
        if drop is not None:
            d_s *= drop
        # rowsum(dP ⊙ P) = dO·O per query: a batched dot product written as a matmul, one BLAS
        # call on either device (CuPy's einsum spends ~0.4 ms in Python on every call)
        d_s -= xp.matmul(g[..., None, :], out[..., :, None])[..., 0]  # (…, Tq, 1)
        d_s *= probs
        if Q.requires_grad:
            d_q = xp.matmul(d_s, K.data.astype(work, copy=False))
            d_q *= scale
        if K.requires_grad:
            d_k = xp.matmul(xp.swapaxes(d_s, -1, -2), Q.data.astype(work, copy=False))
            d_k *= scale
    return d_q, d_k, d_v
    ### END SOLUTION


def _attention_sizes(node) -> tuple[int, int, int, int, int]:
    """(batch, Tq, Tk, dk, dv) of an attention node (Q, K[, V]): batch is the product of the
    broadcast leading dims (batch × heads), dv is 0 without a V."""
    q, k = node.inputs[0].shape, node.inputs[1].shape
    dv = node.inputs[2].shape[-1] if len(node.inputs) == 3 else 0
    batch = math.prod(np.broadcast_shapes(*(t.shape[:-2] for t in node.inputs)))
    return batch, q[-2], k[-2], q[-1], dv


@register_flops("sdpa")
def sdpa_flops(node, out_shape: tuple, grads: Any = None) -> int:
    """Attention's two products, as PyTorch counts them: Q Kᵀ (2·Tq·Tk·dk) and W V (2·Tq·Tk·dv)
    per batch item and head, the whole Tq × Tk square even when a mask blocks part of it.
    Backward (the rule above keeps the weights, so nothing is recomputed): dV = Wᵀ dO and
    dW = dO Vᵀ (2·Tq·Tk·dv each), dQ = dS K and dK = dSᵀ Q (2·Tq·Tk·dk each), each counted
    when the rule computed it (dW when Q or K needs a gradient). The scale, the softmax and
    rowsum(dO ⊙ O) are elementwise work and reductions: 0."""
    batch, tq, tk, dk, dv = _attention_sizes(node)
    qk, wv = 2 * batch * tq * tk * dk, 2 * batch * tq * tk * dv
    if grads is None:
        return qk + wv
    d_q, d_k, d_v = grads
    return ((d_v is not None) + (d_q is not None or d_k is not None)) * wv + \
        ((d_q is not None) + (d_k is not None)) * qk


# %% [markdown]
# ### Test: the fused rule against central differences, and against the composed version
#
# `check_gradients` compares your rule with central differences (`tinytorch.testing`), with
# and without masks; `check_dropout_backward` does the same with dropout on (a fixed `rng`,
# so every call draws the same mask). Then the composed version, your executable
# specification, must agree with the fused one to rounding, forward and backward.
# (`sdpa_weights`' rule comes next; these tests differentiate the output only.)

# %%
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck
from tinytorch.testing import numeric_vjp


def rules_leave_the_gradient_alone(ops: tuple, **kwargs: Any) -> None:
    """Each rule of `ops` gets a gradient array it must not change (module 05: the engine may share it)."""
    rng = np.random.default_rng(0)
    Q, K, V = (Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True) for _ in range(3))
    for op, made in zip(("sdpa", "sdpa_weights"), scaled_dot_product_attention(Q, K, V, rng=1, **kwargs)):
        if op not in ops:
            continue
        grad = rng.standard_normal(made.shape)
        before = grad.copy()
        BACKWARD_RULES[op](grad, made._node)
        assert np.array_equal(grad, before), (
            f"the {op} rule changed the gradient it was given in place ({kwargs or 'no dropout'}): make a new array "
            "(e.g. grad * drop, not grad *= drop); the engine may pass the same array to other rules")


def test_unit_sdpa_backward():
    for dropout in (0.0, 0.5):
        rules_leave_the_gradient_alone(("sdpa",), dropout_p=dropout)
    for check in GRADIENT_CHECKS:
        check(scaled_dot_product_attention)
    check_dropout_backward(scaled_dot_product_attention)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 6, 7))]
    g = rng.standard_normal((2, 3, 5, 7))
    padding = create_padding_mask([6, 4], 6)
    for mask, causal in ((None, False), (None, True), (padding, False), (padding, True),
                         ([[1, 0, 1, 0, 0, 0]] + [[0] * 6] + [[1] * 6] * 3, False)):
        a = grads_of(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask, is_causal=causal), arrays, g)
        b = grads_of(lambda q, k, v: composed_attention(q, k, v, mask=mask, is_causal=causal), arrays, g)
        assert np.allclose(a[0], b[0], atol=1e-12) and np.allclose(a[1], b[1], atol=1e-12), (
            f"fused and composed attention give different values (mask={mask is not None}, causal={causal}): output "
            f"by up to {np.abs(a[0] - b[0]).max():.3g}, weights by up to {np.abs(a[1] - b[1]).max():.3g}")
        for name, ga, gb in zip("QKV", a[2], b[2]):
            assert np.allclose(ga, gb, atol=1e-12), (
                f"fused and composed d{name} differ by up to {np.abs(ga - gb).max():.3g} (mask={mask is not None}, "
                f"causal={causal}): composed attention's gradients come from module 05's rules, so look for the "
                "difference in your sdpa rule, step by step against the derivation above")
    print("✓ fused backward: central differences with masks and dropout, the same gradients as composed")


test_unit_sdpa_backward()

# %% [markdown]
# The returned weights have their own small rule, steps 2, 3 and 5 of the derivation
# starting from the weights' gradient `dW` (a loss may use the weights directly).

# %%
#| export
@register_backward("sdpa_weights")
def sdpa_weights_backward(grad: Any, node) -> tuple:
    """Gradients (dQ, dK) of "sdpa_weights" from `grad` = dW (…, Tq, Tk): steps 2, 3 and 5 above.

    Never change `grad` in place (module 05's rule contract: the engine may hand the same
    array to other rules): `grad *= drop` is the tempting line; make a new array instead.

    dP = dW ⊙ drop (when there was dropout); dS = P ⊙ (dP − rowsum(dP ⊙ P));
    dQ = dS K · scale; dK = dSᵀ Q · scale. Reads node.inputs (Q, K) and node.saved
    (probs, drop, scale); None for an input that requires no gradient.
    """
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


@register_flops("sdpa_weights")
def sdpa_weights_flops(node, out_shape: tuple, grads: Any = None) -> int:
    """0 forward (the "sdpa" op that made these weights counted Q Kᵀ); backward dQ = dS K and
    dK = dSᵀ Q, 2·Tq·Tk·dk each when computed."""
    if grads is None:
        return 0
    batch, tq, tk, dk, _ = _attention_sizes(node)
    return sum(g is not None for g in grads) * 2 * batch * tq * tk * dk


# %%
def test_unit_sdpa_weights_backward():
    for dropout in (0.0, 0.5):
        rules_leave_the_gradient_alone(("sdpa_weights",), dropout_p=dropout)
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 2))
    g = rng.standard_normal((2, 4, 4))
    for kwargs in ({"is_causal": True}, {"mask": [[1, 1, 0, 0]] * 3 + [[0] * 4]}, {"dropout_p": 0.3, "rng": 5}):
        weights = scaled_dot_product_attention(Tensor(q, requires_grad=True), Tensor(k, requires_grad=True), v, **kwargs)[1]
        dq, dk = BACKWARD_RULES["sdpa_weights"](g.copy(), weights._node)
        numeric = numeric_vjp(lambda a, b: scaled_dot_product_attention(a, b, v, **kwargs)[1], [q, k], g)
        for name, mine, expected in (("dQ", dq, numeric[0]), ("dK", dk, numeric[1])):
            assert np.allclose(mine, expected, atol=1e-6), (
                f"the sdpa_weights rule's {name} differs from central differences by up to "
                f"{np.abs(mine - expected).max():.3g} ({kwargs}): " + weights_rule_mistake(dq, dk, q, k, g, weights._node))
    print("✓ the weights' rule: gradcheck with a causal mask, a fully blocked query and dropout")


test_unit_sdpa_weights_backward()

# %% [markdown]
# ### What fusing buys
#
# **Predict, then run.** For a causal forward + backward pass with four `(512, 64)` heads
# in float32, one `(4, 512, 512)` array is 4 MiB. How many such arrays do you expect the
# composed version to hold at its peak, and the fused one? How many operations does each
# record? The cell measures the peak memory (tracemalloc sees NumPy's allocations) and
# counts the recorded operations.

# %%
import tracemalloc

from tinytorch.core.autograd import topological_order


def graph_size(t: Tensor) -> int:
    """Number of recorded operations behind t: the tensors of module 05's walk that an op made."""
    return sum(node._node is not None for node in topological_order(t))


def fwd_bwd_peak(attn, T: int = 512) -> tuple[float, int]:
    """(peak MiB, recorded ops) of one causal forward + backward of attn on four (T, 64) heads."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, T, 64), dtype=np.float32) for _ in range(4)]
    tracemalloc.start()
    try:  # stop tracing even when attn raises: tracing left on slows every later cell
        q, k, v = (Tensor(a, requires_grad=True) for a in arrays[:3])
        out = attn(q, k, v, is_causal=True)[0]
        ops = graph_size(out)
        out.backward(arrays[3])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / 2**20, ops


for name, attn in (("composed", composed_attention), ("fused sdpa", scaled_dot_product_attention)):
    peak, ops = fwd_bwd_peak(attn)
    print(f"{name:11s}: {ops} recorded op{'s' if ops != 1 else ''}, peak {peak:5.1f} MiB for forward + backward "
          f"(one (4, 512, 512) float32 array is {4 * 512 * 512 * 4 / 2**20:.0f} MiB)")

# %% [markdown]
# ## 8. Gradient flow
#
# Gradients reach `Q` and `K` through the weights (*where to look*: `dS`) and `V` through
# the weighted sum (*what to take*: `dV = Wᵀ dO`). A key that every query has blocked
# receives no gradient at all: no attention, no learning signal. Module 05's `gradcheck`
# compares your fused rule with central differences in float64.

# %%
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
    # gradcheck raises naming the op, the input and the element when a gradient is wrong
    gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask)[0], [Q, K, V])
    gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7)[0], [Q, K, V])
    gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask)[1], [Q, K, V])
    for t in (Q, K, V):
        t.grad = None
    scaled_dot_product_attention(Q, K, V, mask=mask)[0].sum().backward()
    leaked = max(np.abs(K.grad.numpy()[:, 3:]).max(), np.abs(V.grad.numpy()[:, 3:]).max())
    assert leaked == 0, (f"keys 3 and 4 are blocked for every query, yet dK or dV reaches {leaked:.3g} there: blocked "
                         "positions have weight 0, so no gradient may reach them")
    blocked_query = np.abs(Q.grad.numpy()[:, 2]).max()
    assert blocked_query == 0, (f"query 2 sees no key at all, yet its dQ reaches {blocked_query:.3g}: a fully blocked "
                                "row has weights 0, output 0 and gradient 0")
    print("✓ gradients: gradcheck with masks, Tq != Tk, dv != dk; blocked keys get none")


test_unit_gradient_flow()

# %% [markdown]
# ## 9. Multi-head attention
#
# One attention head computes one set of weights: one notion of "relevant". Language
# needs several at once (the subject of this verb, the previous word, the matching
# bracket). **Multi-head attention** splits the `embed_dim` features into `num_heads`
# groups of `head_dim = embed_dim / num_heads`, runs attention in each group in parallel,
# concatenates the results and mixes them with an output projection:
#
# ```
# x (B, T, E) --q_proj/k_proj/v_proj--> (B, T, E) --reshape--> (B, T, H, D) --permute--> (B, H, T, D)
#   --attention per head--> (B, H, Tq, D) --permute--> (B, Tq, H, D) --reshape--> (B, Tq, E) --out_proj--> (B, Tq, E)
# ```
#
# Head `h` owns features `h·D … h·D + D − 1` of each projection (that is what reshaping
# `(B, T, E)` to `(B, T, H, D)` means), and merging puts them back in the same place.
# Reshaping `(B, T, E)` straight to `(B, H, T, D)` has the right shape but the wrong
# contents — it mixes positions into heads — and nothing crashes: section 13 shows the
# symptom. The reshape and permute are views, and the batched matmul treats `(B, H)` as
# batch dimensions: all heads in one call, no loop. The projections see the tokens
# flattened to `(B·T, E)`: one matrix product each, and in the backward pass the weight
# gradient `xᵀ · dy` is one `(E, B·T) @ (B·T, E)` product too. The parameters are the same
# as for one full-width head: four `E × E` projections (plus biases), whatever `H` is.
# Real models: GPT-2 small has 12 heads of 64 (E = 768), Llama-2-7B 32 heads of 128 (E = 4096).
#
# **Self-attention** takes queries, keys and values from the same sequence (a square
# `Tq × Tq` score matrix); **cross-attention** takes queries from one sequence and keys
# and values from another (a decoder reading an encoder; a rectangular `Tq × Tk`
# matrix). The same class does both: `key` defaults to `query`, `value` to `key`.
#
# **Masks.** `mask` may be `(Tq, Tk)` (for everything), `(B, Tq, Tk)` (a head axis is
# inserted: `(B, 1, Tq, Tk)`) or 4-D `(B|1, H|1, Tq, Tk)`. A padding mask is different: it
# is naturally `(B, Tk)` — one row of real/padding flags per batch item. Passed as `mask`,
# a `(B, Tk)` array is read as `(Tq, Tk)` whenever `B == Tq` (a batch of 4 sentences of 4
# tokens): item 0's flags would then mask query 0 of every item. That is a silent wrong
# answer, so `forward` takes padding separately, as PyTorch does: `key_padding_mask`
# `(B, Tk)`, 1 = real token. The given `_keep` reshapes it to `(B, 1, 1, Tk)` (every head,
# every query of its own item) and combines it with `mask`, so you never reshape a padding
# mask by hand. (PyTorch's `key_padding_mask` uses True = *padding*; ours keeps the one
# convention of this module, 1 = attend.)
#
# `forward`'s contract: project `query`, `key`, `value` with `q_proj`, `k_proj`, `v_proj`;
# split each into heads `(B, H, T, D)`; call your `scaled_dot_product_attention` with
# `mask=keep` (the checked mask that `self._keep` builds above your code), `is_causal`, `dropout_p=self.dropout`,
# `training=self.training` (so `model.eval()` switches dropout off) and `rng=self.rng`;
# merge the heads back to `(B, Tq, E)`; apply `out_proj`. Return `(output (B, Tq, E),
# weights (B, H, Tq, Tk))`. The input checks are given.

# %%
#| export
class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention with learned q/k/v/out projections.

    Linear layers `q_proj`, `k_proj`, `v_proj`, `out_proj` (each embed_dim -> embed_dim,
    weights (in, out), y = x @ W + b); head h uses features h·D .. h·D+D-1 (D = head_dim).
    forward(query (B, Tq, E), key (B, Tk, E) = query, value (B, Tk, E) = key, mask=None,
    is_causal=False, key_padding_mask=None) -> (output (B, Tq, E), weights (B, H, Tq, Tk)).
    mask: (Tq, Tk), (B, Tq, Tk) or (B|1, H|1, Tq, Tk), 1 = attend; key_padding_mask: (B, Tk),
    1 = real token, 0 = padding. Dropout on the weights follows `.training`.
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

    def _keep(self, mask: Any, key_padding_mask: Any, batch: int, tq: int, tk: int, like: Any) -> Any:
        """One checked bool keep mask for the scores (B, H, Tq, Tk), or None when nothing is masked.

        mask (Tq, Tk) and 4-D masks are used as they are; (B, Tq, Tk) gets a head axis,
        (B, 1, Tq, Tk). key_padding_mask must be (B, Tk): it becomes (B, 1, 1, Tk), so that it
        blocks keys of its own batch item for every head and query. Both together: a position
        is kept when both keep it.
        """
        scores_shape = (batch, self.num_heads, tq, tk)
        keep = None
        if mask is not None:
            m = to_array(mask, device=device_of(like))
            if m.ndim == 3:
                m = m[:, None]
            elif m.ndim not in (2, 4):
                raise ValueError(
                    "MultiHeadAttention: mask must have shape (Tq, Tk), (B, Tq, Tk) or (B|1, H|1, Tq, Tk); "
                    f"got {tuple(m.shape)}. A (B, Tk) padding mask goes to key_padding_mask=."
                )
            keep = _keep_mask(m, scores_shape, like)
        if key_padding_mask is not None:
            pad = to_array(key_padding_mask, device=device_of(like))
            if tuple(pad.shape) != (batch, tk):
                raise ValueError(
                    f"MultiHeadAttention: key_padding_mask must have shape (batch, Tk) = {(batch, tk)} "
                    f"(1 = real token, 0 = padding), got {tuple(pad.shape)}."
                )
            pad = _keep_mask(pad, (batch, tk), like)[:, None, None, :]
            keep = pad if keep is None else keep & pad
        return keep

    def forward(self, query: Any, key: Any = None, value: Any = None, mask: Any = None,
                is_causal: bool = False, key_padding_mask: Any = None) -> tuple[Tensor, Tensor]:
        query = as_tensor(query)
        key = query if key is None else as_tensor(key)
        value = key if value is None else as_tensor(value)
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.ndim != 3 or t.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"MultiHeadAttention: {name} must have shape (batch, seq, {self.embed_dim}), got {t.shape}."
                )
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0] or key.shape[1] == 0:
            raise ValueError(
                f"MultiHeadAttention: query {query.shape}, key {key.shape} and value {value.shape} need the same "
                "batch size, and key and value the same length, at least 1 (Tk = 0 leaves nothing to attend to)."
            )
        keep = self._keep(mask, key_padding_mask, query.shape[0], query.shape[1], key.shape[1], query.data)
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
            q, k, v, mask=keep, dropout_p=self.dropout, is_causal=is_causal,
            training=self.training, rng=self.rng)
        out = out.permute(0, 2, 1, 3).reshape(B * Tq, E)  # concatenate the heads
        return self.out_proj(out).reshape(B, Tq, E), weights
        ### END SOLUTION


# %% [markdown]
# Parameter counts, self- and cross-attention, and a padding mask given both ways:

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
lengths = [9, 5]
real_tokens = create_padding_mask(lengths, 9).numpy()[:, 0, 0]  # (B, Tk)
by_key_padding = mha(x, memory, key_padding_mask=real_tokens)[0].numpy()
by_4d_mask = mha(x, memory, mask=create_padding_mask(lengths, 9))[0].numpy()
print("key_padding_mask (2, 9) and the (2, 1, 1, 9) padding mask agree:", np.allclose(by_key_padding, by_4d_mask))


# %% [markdown]
# The checks for multi-head attention (given) compute the same thing in NumPy with your
# module's own weights (`reference_multi_head`), and recognise the head layout mistakes.

# %%
def test_unit_multi_head_attention():
    check_multi_head(MultiHeadAttention)  # cross, causal, padded: against NumPy with the module's weights
    check_key_padding_mask(MultiHeadAttention)
    check_multi_head_dropout(MultiHeadAttention)
    mha = MultiHeadAttention(16, 4)
    count = count_parameters(mha)
    assert count == 4 * (16 * 16 + 16), f"four 16x16 projections with biases hold {4 * (16 * 16 + 16)} parameters, got {count}"
    x = Tensor(np.random.default_rng(7).standard_normal((2, 5, 16)).astype(np.float32))
    out, w = mha(x, is_causal=True)
    assert out.shape == (2, 5, 16) and w.shape == (2, 4, 5, 5), \
        f"expected output (B, Tq, E) = (2, 5, 16) and weights (B, H, Tq, Tk) = (2, 4, 5, 5), got {out.shape} and {w.shape}"
    assert out.dtype == np.float32, f"float32 in must give float32 out, got {out.dtype}"
    mem = Tensor(np.random.default_rng(8).standard_normal((2, 7, 16)).astype(np.float32))
    out3, w3 = mha(x, mem, mask=np.broadcast_to(np.array([1, 1, 1, 0, 0, 0, 0]), (2, 5, 7)))
    leaked = np.abs(w3.numpy()[:, :, :, 3:]).max()
    assert leaked == 0, (f"a (B, Tq, Tk) mask blocking keys 3 ... 6 left weights up to {leaked:.3g} on them: it must "
                         "reach scaled_dot_product_attention as mask=keep (the checked mask _keep built)")
    expect_error(ValueError, lambda: MultiHeadAttention(10, 3), lambda: mha(Tensor(np.zeros((2, 5, 8)))),
                 lambda: mha(x, Tensor(np.zeros((2, 7, 12)))), lambda: mha(x, mask=np.ones((3, 3))),
                 lambda: mha(x, key_padding_mask=np.ones((5, 2))), lambda: mha(x, Tensor(np.zeros((2, 0, 16)))))
    print("✓ multi-head attention: per-head maths, cross-attention, masks, key_padding_mask, eval, errors")


test_unit_multi_head_attention()

# %% [markdown]
# Self-attention is the special case `key = value = query`; the wrapper keeps a causal flag,
# as a GPT block (module 13) does.

# %%
#| export
class SelfAttention(Module):
    """Q = K = V = x: forward(x (B, T, E), mask=None, key_padding_mask=None) -> (output, weights).

    A MultiHeadAttention in `self.attention`; causal=True passes is_causal=True on every call.
    """

    def __init__(self, embed_dim: int, num_heads: int, causal: bool = False, dropout: float = 0.0,
                 bias: bool = True, **settings: Any):
        super().__init__()
        self.causal = causal
        self.attention = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, **settings)

    def forward(self, x: Any, mask: Any = None, key_padding_mask: Any = None) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        return self.attention(x, mask=mask, is_causal=self.causal, key_padding_mask=key_padding_mask)
        ### END SOLUTION


# %%
def test_unit_self_attention():
    x = Tensor(np.random.default_rng(7).standard_normal((2, 5, 16)).astype(np.float32))
    sa = SelfAttention(16, 4, causal=True, seed=0)
    out, w = sa(x)
    above = np.abs(np.triu(w.numpy(), 1)).max()
    assert above == 0, (f"SelfAttention(causal=True) left weights up to {above:.3g} above the diagonal: pass "
                        "is_causal=self.causal to the attention")
    assert np.allclose(out.numpy(), sa.attention(x, x, x, is_causal=True)[0].numpy()), \
        "SelfAttention(x) must be self.attention(x, x, x, is_causal=self.causal): queries, keys and values all x"
    padded = sa(x, key_padding_mask=[[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])[1].numpy()[1, :, :, 2:]
    assert np.all(padded == 0), (f"key_padding_mask blocks keys 2 ... 4 of item 1, yet they get weights up to "
                                 f"{np.abs(padded).max():.3g}: pass key_padding_mask on to the attention")
    print("✓ self-attention: Q = K = V, causal flag, key_padding_mask passed on")


test_unit_self_attention()

# %% [markdown]
# ## 10. What attention costs
#
# Scores and weights are `Tq × Tk` per head: for a sequence of length `n`, **O(n²·d)
# time and O(n²) memory**. Doubling the sequence quadruples both — in the limit. At small
# `n` the work that grows only like `n·d` (the output, reading Q, K and V) and fixed
# overheads (Python, allocating arrays) still count.
#
# **Predict, then run.** The cell times a causal forward pass of *your*
# `scaled_dot_product_attention` on four heads of width 64, doubling `T` from 64 to 1024.
# Write down the ratio you expect from one row to the next, for small `T` and for large
# `T`. The clock is `time.process_time` (CPU time of this process: the work itself, not the
# time other programs took), and each row is the fastest of five runs (the one least
# disturbed).

# %%
import time


def time_per_doubling(attn, lengths=(64, 128, 256, 512, 1024), repeats: int = 5) -> list:
    """[(T, seconds)]: the fastest of `repeats` causal forward passes of attn on (4, T, 64) float32."""
    rows = []
    for T in lengths:
        q, k, v = (Tensor(np.random.default_rng(i).standard_normal((4, T, 64), dtype=np.float32)) for i in range(3))
        attn(q, k, v, is_causal=True)  # warm-up: the first call pays for allocations
        times = []
        for _ in range(repeats):
            start = time.process_time()
            attn(q, k, v, is_causal=True)
            times.append(time.process_time() - start)
        rows.append((T, min(times)))
    return rows


previous = None
print(f"{'T':>5} {'time (ms)':>10} {'x previous':>10}")
for T, seconds in time_per_doubling(scaled_dot_product_attention):
    print(f"{T:>5} {seconds * 1e3:10.2f} {'' if previous is None else f'{seconds / previous:10.2f}'}")
    previous = seconds

# %% [markdown]
# The ratio climbs towards 4 as `T` grows (`benchmarks/attention.py` measures forward +
# backward the same way, next to PyTorch). Memory is the harder limit. **Predict:** how
# many bytes do the weights of one head take at 4,096 tokens in float32? At 32,768 tokens?
# The weights alone (4 bytes each in float32, 2 in float16), for one sequence:

# %%
print(f"{'batch':>5} {'seq':>6} {'heads':>5} {'per head fp32':>14} {'all heads fp32':>15} {'all heads fp16':>15}")
for batch, seq, heads in ((1, 512, 12), (8, 1024, 12), (32, 2048, 1), (1, 4096, 32), (1, 32768, 32)):
    per_head = batch * seq * seq * 4
    print(f"{batch:>5} {seq:>6} {heads:>5} {per_head / 2**20:10,.0f} MiB {per_head * heads / 2**30:11,.1f} GiB "
          f"{per_head * heads / 2 / 2**30:11,.1f} GiB")

# %% [markdown]
# Batch 32 at sequence length 2048 in float32 needs **512 MiB per head** just for the
# weights, and autograd keeps them until the backward pass. At 4,096 tokens one head of
# one layer needs 64 MiB; at 32,768 tokens 4 GiB, and a model with 32 heads 128 GiB per
# layer (64 GiB in float16) — more than any GPU holds. The next section removes the `n²`
# memory.
#
# ## 11. Beyond the matrix: chunked and tiled attention
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
# with `m` starting at the dtype's most negative finite number (`finfo.min`, as in section
# 7's guard), `l` at 0 and `acc` at 0. Not at `-inf`: for a query whose keys in a block
# are all blocked, `exp(m - m_new)` would be `exp(-inf - (-inf))` = NaN.
# At the end `output = acc / l` (with `l` of 0, a fully blocked query, giving 0). This is exact — the same numbers as the full softmax
# — because every term is rescaled to the final maximum. It is the idea behind
# **FlashAttention** (Dao et al., 2022), which runs these tiles in a GPU's fast on-chip
# memory. The backward pass needs the weights again; instead of storing them it keeps only
# the output and one number per query, the log-sum-exp `lse = m + log l`, and recomputes
# each tile: `P = exp(s_b − lse)`, then applies section 7's rule tile by tile (with
# `rowsum(dO ⊙ O)` computed once). Memory is linear in the sequence length, forward and
# backward. With `is_causal`, key tiles that lie entirely in the future are skipped.
#
# Our version loops in Python over blocks of queries (256 at a time) and, inside, over
# blocks of keys (`block_size`); everything else — batch, heads, the queries of a block —
# is one vectorised matmul. A tile is `256 × block_size` numbers, whatever the sequence
# length. The given helpers: `_flash_setup` converts and broadcasts the inputs and turns
# the mask into a blocked array (a copy: the caller may change their mask before the
# backward pass, and the gradient must not change with it); `_tile_blocked` cuts the
# blocked entries of one tile out of it, adding the causal ones.
#
# A third trick, the **KV cache**, is for generation: when a model produces one token at a
# time, the keys and values of earlier tokens never change, so it keeps them and computes
# only the new token's query row — one `1 × T` row of scores per step instead of the whole
# `T × T` matrix. You will build it in module 13; the exercises measure what it saves.
#
# `flash_attention`'s contract: same arguments and result as `scaled_dot_product_attention`
# (without dropout; the output only); records op `"flash_attention"` with inputs
# `(Q, K, V)` and saved `out` (work dtype, `(…, Tq, dv)`), `lse` (`(…, Tq, 1)`, `+inf` for a
# query that saw nothing, so its recomputed tiles are 0), `blocked` (from `_flash_setup`,
# or None), `is_causal`, `block_size` and `scale`.

# %%
#| export
def _tile_blocked(blocked: Any, is_causal: bool, q0: int, q1: int, k0: int, k1: int, xp) -> Any:
    """Blocked entries of the tile (queries q0:q1, keys k0:k1), or None when nothing is blocked."""
    tile = None if blocked is None else blocked[..., q0:q1, k0:k1]
    if is_causal and k1 - 1 > q0:  # some key of the tile comes after some query of the tile
        future = xp.arange(k0, k1)[None, :] > xp.arange(q0, q1)[:, None]
        tile = future if tile is None else (tile | future)
    return tile


def _flash_arrays(Q: Tensor, K: Tensor, V: Tensor):
    """(xp, work dtype, output dtype, q, k, v, lead): arrays in the work dtype, broadcast to common leading dims."""
    xp = array_module(Q.data)
    work, out_dtype = _work_dtype(Q, K, V)
    q, k, v = (t.data.astype(work, copy=False) for t in (Q, K, V))
    lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    q, k, v = (xp.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k, v))  # views, no copies
    return xp, work, out_dtype, q, k, v, lead


def _flash_setup(Q: Tensor, K: Tensor, V: Tensor, mask: Any, scale: float | None):
    """_flash_arrays plus the scale (default 1/√dk) and the mask as a blocked bool array (…, Tq, Tk) or None.

    The blocked array is a new array made from the mask (`_blocked_positions`), so it can be
    saved for the backward pass: changing the caller's mask afterwards changes nothing.
    """
    xp, work, out_dtype, q, k, v, lead = _flash_arrays(Q, K, V)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    blocked = _blocked_positions(mask, False, lead + (q.shape[-2], k.shape[-2]), q)
    if blocked is not None:  # a view with the full (…, Tq, Tk) shape, so that tiles can be sliced
        blocked = xp.broadcast_to(blocked, lead + (q.shape[-2], k.shape[-2]))
    return xp, work, out_dtype, q, k, v, lead, scale, blocked


def _query_block(block_size: int) -> int:
    """Queries are processed in blocks of at least 256 rows: few Python iterations, small tiles."""
    return max(256, int(block_size))


def flash_attention(Q: Any, K: Any, V: Any, mask: Any = None, is_causal: bool = False,
                    block_size: int = 64, scale: float | None = None) -> Tensor:
    """Exact attention tiled over key blocks with an online softmax; returns the output only.

    Same arguments and result as scaled_dot_product_attention (keep mask, top-left causal,
    fully blocked rows -> 0, float16 computed in float32), but never holds a Tq × Tk array:
    keys are visited in blocks of `block_size`, queries in blocks of _query_block(block_size),
    so the extra memory grows linearly with the sequence length. Records one op,
    "flash_attention", inputs (Q, K, V), saved: out (work dtype), lse (…, Tq, 1; +inf where a
    query saw nothing), blocked (from _flash_setup, or None), is_causal, block_size, scale.
    Its backward recomputes the tiles from these.
    """
    Q, K, V = as_tensor(Q), as_tensor(K), as_tensor(V)
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
                     blocked=user_blocked, is_causal=bool(is_causal), block_size=kb, scale=scale)
    ### END SOLUTION


# %% [markdown]
# The check for tiled attention (given) runs every forward check with one key block (where
# the online softmax has nothing to rescale), then with blocks whose largest score comes
# first or last, then with blocks of 2.

# %%
def test_unit_flash_attention():
    check_flash_attention(flash_attention)  # every forward check, one key block and many
    out = flash_attention(Tensor(HAND_X, requires_grad=True), Tensor(HAND_X), Tensor(HAND_X), block_size=2)
    assert out._node is not None and out._node.op == "flash_attention", \
        f"flash_attention must record one op named 'flash_attention', got {out._node and out._node.op!r}"
    missing = {"out", "lse", "blocked", "is_causal", "block_size", "scale"} - set(out._node.saved)
    assert not missing, f"'flash_attention' must save out, lse, blocked, is_causal, block_size and scale; {sorted(missing)} missing"
    print("✓ flash attention forward: the checks pass with one key block and with many")


test_unit_flash_attention()

# %% [markdown]
# The backward pass visits the same tiles, recomputing each from `lse`.

# %%
#| export
@register_backward("flash_attention")
def flash_attention_backward(grad: Any, node) -> tuple:
    """(dQ, dK, dV) of "flash_attention": recompute each tile P = exp(scale·Q K_bᵀ − lse), then
    apply the fused rule tile by tile, with delta = rowsum(dO ⊙ O) computed once.

    Reads node.inputs (Q, K, V; `_flash_arrays` gives their arrays) and node.saved (out, lse,
    blocked, is_causal, block_size, scale). Visits the same tiles as the forward pass.
    """
    ### BEGIN SOLUTION
    Q, K, V = node.inputs
    saved = node.saved
    xp, work, _, q, k, v, lead = _flash_arrays(Q, K, V)
    out, lse, user_blocked = saved["out"], saved["lse"], saved["blocked"]
    is_causal, scale = saved["is_causal"], saved["scale"]
    tq, tk = q.shape[-2], k.shape[-2]
    kb, qb = saved["block_size"], _query_block(saved["block_size"])
    g = grad.astype(work, copy=False)
    delta = xp.matmul(g[..., None, :], out[..., :, None])[..., 0]  # (…, Tq, 1): rowsum(dO ⊙ O) = rowsum(dP ⊙ P)
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


@register_flops("flash_attention")
def flash_attention_flops(node, out_shape: tuple, grads: Any = None) -> int:
    """PyTorch's formula for its fused attention kernels: forward Q Kᵀ and P V (as "sdpa");
    backward five products, the scores recomputed (Q Kᵀ), dP = dO Vᵀ, dV = Pᵀ dO, dQ = dS K,
    dK = dSᵀ Q. Like PyTorch it counts the whole Tq × Tk square: with is_causal the tiles
    wholly in the future are skipped, so the work done is less than the count."""
    batch, tq, tk, dk, dv = _attention_sizes(node)
    qk, wv = 2 * batch * tq * tk * dk, 2 * batch * tq * tk * dv
    return qk + wv if grads is None else 3 * qk + 2 * wv


# %%
def test_unit_flash_attention_backward():
    for block in (2, 64):
        for check in GRADIENT_CHECKS:
            check(lambda *a, **kw: flash_attention(*a, block_size=block, **kw), f"flash_attention (block_size={block})")
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((2, 2, 13, 4)), rng.standard_normal((2, 2, 11, 4)), rng.standard_normal((2, 2, 11, 3))]
    g = rng.standard_normal((2, 2, 13, 3))
    mask = np.ones((2, 1, 13, 11))
    mask[0, :, :, 5:] = 0
    mask[1, :, 4] = 0  # a fully blocked query
    for block in (1, 4, 11):
        for m, causal in ((None, True), (mask, False), (mask, True)):
            tensors = [Tensor(a, requires_grad=True) for a in arrays]
            flash_attention(*tensors, mask=m, is_causal=causal, block_size=block).backward(g)
            ref_t = [Tensor(a, requires_grad=True) for a in arrays]
            scaled_dot_product_attention(*ref_t, mask=m, is_causal=causal)[0].backward(g)
            for name, a, b in zip("QKV", tensors, ref_t):
                assert np.allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-10), \
                    f"d{name} of flash differs from sdpa's (block_size={block}, causal={causal})"
    print("✓ flash attention backward: central differences, and the same gradients as sdpa for every block size")


test_unit_flash_attention_backward()

# %% [markdown]
# Chunked attention needs no new operation: it calls your attention on slices of the
# queries (forward only here). Its causal mask is the bottom-right slice of the full one,
# rows `q0 … q0+chunk−1`: the same kind of explicit mask a KV cache needs.

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


# %% [markdown]
# **Predict, then run.** When `T` doubles, by what factor does the peak memory of the
# standard path grow? Of the chunked one? Of the tiled one?

# %%
def peak_memory(fn) -> float:
    """Peak bytes allocated (as seen by tracemalloc, which NumPy reports to) while fn runs."""
    tracemalloc.start()
    try:  # stop tracing even when fn raises: tracing left on slows every later cell
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


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

# %% [markdown]
# ## 12. Seeing attention
#
# A heat map of the weights shows, for every query (a row), where it looks (the columns).
# The plotting code is given: `plot_attention` draws one `(Tq, Tk)` matrix,
# `plot_attention_heads` a grid with one panel per head (both in `attention_plots.py`
# beside this lesson, imported below), and `plot_sentence_attention` the figure of the
# README (bidirectional next to causal attention on a sentence).
# matplotlib is imported inside the functions (module 02's `pyplot()`), so the package does
# not need it to import; on a machine without a display the non-interactive Agg backend is
# chosen so figures can still be saved; in Jupyter the inline backend is left alone.
#
# We have no trained model yet, so `sentence_attention` builds toy embeddings that behave a
# little like trained ones: every *word* gets a fixed random vector (the same word, the same
# vector), words with a similar role share a component ("cat", "it" and "tired" refer to the
# same thing), and a small position signal is added; `Q = K = V` are those vectors, and
# the weights come from your `scaled_dot_product_attention`.

# %%
#| export
from tinytorch.plotting import pyplot  # module 02's: the one place the backend is chosen
from tinytorch.core.attention_plots import (  # given: modules/12_attention/attention_plots.py
    plot_attention, plot_attention_heads, save_figure)
_all_ = ["plot_attention", "plot_attention_heads"]  # nbdev: also in this module's __all__


DEMO_SENTENCE = "the cat sat on the mat because it was tired"
WORD_ROLES = {"the": 0, "mat": 1, "cat": 2, "it": 2, "tired": 2, "sat": 3, "was": 3, "on": 4, "because": 4}


def sentence_embeddings(sentence: str = DEMO_SENTENCE, dim: int = 32, seed: int = 0) -> tuple[list, Tensor]:
    """Toy embeddings of the words of `sentence`: (tokens, float32 Tensor (T, dim)).

    Each word gets a fixed random vector (the same word, the same vector) plus a vector shared
    by words with a similar role (WORD_ROLES: the cat / it / tired, the verbs, the connectives),
    as trained embeddings would, plus a small position signal. Seeded: always the same vectors.
    """
    tokens = sentence.split()
    vocab = {word: i for i, word in enumerate(sorted(set(tokens)))}
    rng = np.random.default_rng(seed)
    words = rng.standard_normal((len(vocab), dim))
    roles = rng.standard_normal((max(WORD_ROLES.values()) + 1, dim))
    positions = np.arange(len(tokens))[:, None] / 10000 ** (np.arange(dim)[None, :] / dim)
    x = 0.5 * words[[vocab[w] for w in tokens]] + 0.7 * roles[[WORD_ROLES.get(w, 0) for w in tokens]] \
        + 0.3 * np.sin(positions)
    return tokens, Tensor(x, dtype=np.float32)


def sentence_attention(sentence: str = DEMO_SENTENCE, dim: int = 32, seed: int = 0):
    """Q = K = V = sentence_embeddings(...): returns (tokens, bidirectional weights, causal weights), each (T, T)."""
    tokens, x = sentence_embeddings(sentence, dim, seed)
    return tokens, scaled_dot_product_attention(x, x, x)[1], scaled_dot_product_attention(x, x, x, is_causal=True)[1]


def plot_sentence_attention(sentence: str = DEMO_SENTENCE, path: Any = None, dpi: int = 100):
    """Bidirectional (BERT-style) next to causal (GPT-style) heat maps of sentence_attention; returns the Figure."""
    tokens, bidirectional, causal = sentence_attention(sentence)
    fig, axes = pyplot().subplots(1, 2, figsize=(12, 5))
    plot_attention(bidirectional, tokens, tokens, title="bidirectional (BERT-style)", ax=axes[0])
    plot_attention(causal, tokens, tokens, title="causal (GPT-style)", ax=axes[1])
    save_figure(fig, path, dpi)
    return fig


# %% [markdown]
# Bidirectional attention lets "the" look ahead to the other "the" and "cat" ahead to "it";
# causal attention only looks back — its upper triangle is empty, and "it" still finds
# "cat". (`benchmarks/make_heatmap.py` saves this figure for the README.)

# %%
import tempfile

tokens, bidirectional, causal = sentence_attention()
heatmap_path = os.path.join(tempfile.mkdtemp(), "attention_heatmap.png")
plot_sentence_attention(path=heatmap_path)
print("saved", heatmap_path, os.path.getsize(heatmap_path), "bytes;",
      "causal upper triangle all zero:", bool(np.all(np.triu(causal.numpy(), 1) == 0)))
print("where 'it' looks (causal):", {t: round(float(w), 2) for t, w in zip(tokens, causal.numpy()[7]) if w > 0.05})

# %% [markdown]
# ### Reading a heat map
#
# Four shapes come back again and again. **Predict** which settings of *your* attention
# give each, then run the cell:
#
# * a bright **diagonal**: every token looks at itself — keys that match their own query
#   far better than any other (distinct tokens, a sharp temperature);
# * a flat, **uniform** colour: every score equal (a scale of 0, or identical keys) —
#   attention that averages and learns nothing from position or content;
# * a **sparse** picture, one bright cell per row: a large scale on random vectors makes
#   every softmax nearly one-hot (the saturation of section 3);
# * a **triangle**: causal masking — nothing above the diagonal, and with equal scores each
#   row spreads evenly over its past (row `i` holds `1/(i+1)`).
#
# Trained heads show mixtures: a shifted diagonal (look at the previous token), vertical
# stripes (everyone looks at one token, often the first or a punctuation mark), blocks
# (words of one phrase). The entropy per row (section 3) puts a number on "sharp" versus
# "spread".

# %%
def row_entropy(weights: np.ndarray) -> np.ndarray:
    """−Σ w log w per row (0 for one-hot, ln(Tk) for uniform); 0·log 0 counts as 0."""
    w = np.asarray(weights, dtype=np.float64)
    return -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1)


patterns_rng = np.random.default_rng(12)
distinct = Tensor(np.eye(8) * 3)  # eight tokens that only match themselves
random_tokens = Tensor(patterns_rng.standard_normal((8, 16)))
patterns = {
    "diagonal": scaled_dot_product_attention(distinct, distinct, distinct)[1],
    "uniform": scaled_dot_product_attention(random_tokens, random_tokens, random_tokens, scale=0.0)[1],
    "sparse": scaled_dot_product_attention(random_tokens, random_tokens, random_tokens, scale=3.0)[1],
    "triangle": scaled_dot_product_attention(random_tokens, random_tokens, random_tokens, scale=0.0, is_causal=True)[1],
}
for label, w in patterns.items():
    print(f"{label:9s}: mean row entropy {row_entropy(w.numpy()).mean():.2f} nats (uniform over 8 keys: {math.log(8):.2f})")
patterns_figure = plot_attention_heads(np.stack([w.numpy() for w in patterns.values()]),
                                       title="four patterns", titles=list(patterns), cols=4)


# %%
def test_unit_plots():
    w = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    path = os.path.join(tempfile.mkdtemp(), "w.png")
    fig = plot_attention(Tensor(w), list("abcd"), list("abcd"), path=path)
    assert hasattr(fig, "savefig") and os.path.getsize(path) > 1000, "plot_attention must return the figure and write a PNG"
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG file"
    fig2 = plot_attention_heads(np.stack([w, w.T, w, w.T, w]), path=path, cols=2)
    drawn = len([ax for ax in fig2.axes if ax.images])
    assert drawn == 5, f"plot_attention_heads of 5 heads must draw 5 heat maps, drew {drawn}"
    expect_error(ValueError, lambda: plot_attention(np.ones((2, 3, 3))), lambda: plot_attention(w, list("abc")),
                 lambda: plot_attention_heads(w))
    assert np.allclose(patterns["uniform"].numpy(), 1 / 8), \
        f"scale=0 makes every score 0: each weight must be 1/8, got {patterns['uniform'].numpy()[0, :3].round(4)} ..."
    assert np.all(np.triu(patterns["triangle"].numpy(), 1) == 0), "is_causal=True must leave nothing above the diagonal"
    entropy = row_entropy(patterns["uniform"].numpy())
    assert np.allclose(entropy, math.log(8)), f"uniform rows over 8 keys have entropy ln 8 = {math.log(8):.3f}, got {entropy[:3]}"
    pyplot().close("all")
    print("✓ heat maps: figures returned, PNG written, shapes checked; the four patterns look as they should")


test_unit_plots()

# %% [markdown]
# ## 13. Debugging attention: classic bugs and their symptoms
#
# Attention code rarely crashes when it is wrong: the shapes often still fit. Each classic
# bug has a *symptom*, and one of the checks you have been running sees it:
#
# | bug | symptom | the check that sees it |
# |---|---|---|
# | `Q @ K` instead of `Q @ Kᵀ` | a shape error when `Tk ≠ d_k`; silently wrong when square | `check_key_order`: permuting the (key, value) pairs must not change the output |
# | forgotten `1/√d_k`, or `1/d_k` | weights too sharp or too flat; at large `d_k` nearly one-hot, gradients vanish | `check_scale`: the hand example |
# | softmax over the wrong axis | the *columns* sum to 1, the rows do not | `check_rows_sum_to_one` |
# | padding mask laid along the queries | padded keys still receive weight; padded queries are zeroed | `check_padding` |
# | flipped convention (1 = blocked) | a causal model looks only at the future | `check_causal`, `check_padding` |
# | causal mask off by one | the diagonal is blocked (query 0 sees nothing), or the next token leaks | `check_causal` |
# | masks combined with the wrong operator | a key blocked by one mask but not the other is seen | `check_padding_and_causal` |
# | `-inf` fill without a guard | NaN in every query whose keys are all blocked, and in the gradients | `check_fully_blocked` |
# | float16 scores | `q·k` past 65,504 is `inf`, then NaN | `check_float16` |
# | head split or merge without the transpose | right shapes, wrong numbers: positions leak between heads | `check_multi_head` |
# | dropout in eval, or ignored in the backward | a model that behaves differently after `.eval()`; wrong gradients | `check_dropout`, `check_dropout_backward`, `check_multi_head_dropout` |
#
# To see the checks at work, `CLASSIC_BUGS` (given, in `attention_checks.py`) makes each of the first seven
# bugs *with your own function*, by calling it the wrong way on purpose: handing it `K`
# transposed (so its `Q @ Kᵀ` becomes `Q @ K`), `scale=1.0`, the roles of `Q` and `K`
# swapped (whose transposed weights are a softmax over the queries), a padding mask moved
# to the query axis, an inverted mask, a causal triangle shifted by one. Each check passes
# on your function and fails, naming the bug, on the misused one.

# %%
for bug, message in demonstrate_bugs(scaled_dot_product_attention):
    print(f"{bug}\n    -> {message}\n")


# %%
def test_unit_common_bugs():
    demonstrate_bugs(scaled_dot_product_attention)
    demonstrate_bugs(composed_attention)
    print("✓ each classic bug, made with your own functions, is caught and named; your functions pass")


test_unit_common_bugs()

# %% [markdown]
# ## 14. Checking against a reference: PyTorch
#
# When PyTorch is installed, the same inputs must give the same numbers as
# `torch.nn.functional.scaled_dot_product_attention`. Remember the conventions: its
# boolean mask is True = attend (like ours); `torch.nn.MultiheadAttention`'s boolean
# masks, `key_padding_mask` included, are True = *blocked*, and its `in_proj_weight` is
# `(3E, E)` applied as `x @ Wᵀ` while our Linear weights are `(in, out)`. The test suite
# compares both, including gradients (`tests/12_attention/test_attention_torch.py`).

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
    real = create_padding_mask([6, 4], 6).numpy()[:, 0, 0]  # (B, Tk), 1 = real token
    ours_out, ours_w = ours(Tensor(x), key_padding_mask=real, is_causal=True)
    blocked_future = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)  # torch: True = BLOCKED
    t_out, t_w = theirs(*(torch.tensor(x),) * 3, attn_mask=blocked_future, key_padding_mask=torch.tensor(real == 0),
                        average_attn_weights=False)
    print(f"nn.MultiheadAttention (causal + padding): max |difference| output "
          f"{np.abs(ours_out.numpy() - t_out.detach().numpy()).max():.2e}, "
          f"weights {np.abs(ours_w.numpy() - t_w.detach().numpy()).max():.2e}")

# %% [markdown]
# ## Summary
#
# * Attention is a soft dictionary lookup: `softmax(Q Kᵀ / √d_k) V`, batched over any
#   leading dimensions; the `√d_k` keeps the scores at unit variance (a temperature).
# * Softmax subtracts the row maximum; masks use 1 = attend here and hold only 0/1; block
#   with `-inf` plus a finite fallback (or the dtype's minimum) and zero fully blocked
#   rows — never NaN; compute float16 in float32.
# * One fused op with a hand-derived backward (dropout included) beats a chain of small
#   ops in memory and time; the composed version is its executable specification.
# * Multi-head attention splits the width into heads at no extra parameter cost; padding
#   goes in as a `(B, Tk)` `key_padding_mask`, never reshaped by hand.
# * Time and memory grow as `n²`; tiling over keys with an online softmax makes memory
#   linear while staying exact — FlashAttention's idea. A KV cache (module 13) makes each
#   generated token cost one row instead of the whole matrix.
#
# ## Exercises and questions
#
# Answer each by running your own code (add cells as you like); the cells below get you
# started and print the numbers the questions ask about.
#
# **1. Temperature.** For the sentence of section 12 (`sentence_embeddings()`), compute the
# weights of your `scaled_dot_product_attention` with `scale` = 0, 0.05, `1/√32` (the
# default) and 1. (a) At which scale is every row uniform, and what is its entropy? (b) As
# the scale grows, where does "it" end up looking, and why is that the word it matches best
# when `Q = K`? (c) A trained model has no `scale=` knob to turn: what can it learn instead to
# make its attention sharper or flatter?

# %%
demo_tokens, demo_x = sentence_embeddings()
for s in (0.0, 0.05, 1 / math.sqrt(32), 1.0):
    w = scaled_dot_product_attention(demo_x, demo_x, demo_x, scale=s)[1].numpy()
    top = np.argsort(w[7])[::-1][:2]
    looks = ("every word alike (all weights equal)" if np.allclose(w[7], w[7, 0])
             else {demo_tokens[i]: round(float(w[7, i]), 2) for i in top})
    print(f"scale {s:5.3f}: mean row entropy {row_entropy(w).mean():.3f} (uniform: {math.log(len(demo_tokens)):.3f}); "
          f"'it' looks most at {looks}")

# %% [markdown]
# **2. One head versus many.** (a) Check with `count_parameters` that `MultiHeadAttention(64, 1)`
# and `MultiHeadAttention(64, 8)` have the same number of parameters, and explain why. (b)
# Count the multiply-adds of the scores for one head of width 64 and for eight heads of
# width 8, at `T = 128`: are they different? (c) Plot the eight heads of a random
# `MultiHeadAttention(64, 8)` on a random input with `plot_attention_heads`: why do the
# heads differ even though nothing was trained? What would one head of width 64 be unable
# to express that eight heads can?

# %%
one, eight = MultiHeadAttention(64, 1, seed=0), MultiHeadAttention(64, 8, seed=0)
print("parameters:", count_parameters(one), count_parameters(eight))
T = 128
print("score multiply-adds, 1 head x 64:", T * T * 64, "  8 heads x 8:", 8 * T * T * 8)
heads_x = Tensor(np.random.default_rng(1).standard_normal((1, 6, 64)), dtype=np.float32)
heads_figure = plot_attention_heads(eight(heads_x, is_causal=True)[1], title="8 random heads, causal")

# %% [markdown]
# **3. The causes of NaN.** Produce each of these with NumPy, then show that your
# `scaled_dot_product_attention` gives finite numbers (or a clear error) in the same
# situation: (a) a query whose keys are all blocked, filled with `-inf`; (b) float16 inputs
# whose dot products pass 65,504; (c) an additive mask (`0`/`-inf`) passed where a keep mask
# is expected. Which of the three gives a wrong *answer* rather than NaN in code that does
# not check its masks?

# %%
fully_blocked = np.array([[True, True, True], [False, True, True]])  # query 0 sees nothing
q3 = np.random.default_rng(2).standard_normal((2, 4))
k3 = np.random.default_rng(3).standard_normal((3, 4))
print("(a) ours, fully blocked query 0:", scaled_dot_product_attention(q3, k3, k3, mask=~fully_blocked)[1].numpy().round(3))
h3 = np.full((3, 64), 40, np.float16)
print("(b) ours, float16 with q.k = 102,400:", scaled_dot_product_attention(h3, h3, h3)[0].numpy()[0, :4])
additive = np.where(fully_blocked, -np.inf, 0.0)
try:
    scaled_dot_product_attention(q3, k3, k3, mask=additive)
except ValueError as err:
    print("(c) ours, an additive mask:", err)

# %% [markdown]
# **4. Memory at 4k and 32k tokens.** (a) From section 10's table: how much memory do the
# weights of one layer of a 32-head model take at 4,096 and at 32,768 tokens, in float32
# and in float16? (b) Measure the peak memory of your `flash_attention` (forward only) at
# `T` = 512, 1024 and 2048 with `peak_memory`, and extrapolate to 32,768 tokens for one
# head of width 128. (c) Why does flash attention still need `O(T)` memory, and for what?

# %%
for T in (512, 1024, 2048):
    qkv = [Tensor(np.random.default_rng(i).standard_normal((1, T, 128), dtype=np.float32)) for i in range(3)]
    print(f"T={T:5d}: flash forward peak {peak_memory(lambda: flash_attention(*qkv, is_causal=True)) / 2**20:6.2f} MiB; "
          f"the T x T weights would be {T * T * 4 / 2**20:7.1f} MiB")

# %% [markdown]
# **5. What a KV cache saves.** A model generating token `t` needs the new token's query
# against the keys and values of all `t` tokens so far. (a) With your
# `scaled_dot_product_attention`, check that one new query with the cached keys and values
# gives exactly the last row of full causal attention — and explain why `is_causal=True`
# would be wrong for that single query (top-left alignment). (b) Time both at `T = 1024`.
# (c) The cache holds `2 · layers · heads · T · head_dim · bytes`: how large is it for
# GPT-2 small (12 layers, 12 heads of 64) at 1,024 tokens in float32, and for Llama-2-7B
# (32 layers, 32 heads of 128) at 4,096 tokens in float16?

# %%
T, d = 1024, 64
cache_rng = np.random.default_rng(4)
seq = Tensor(cache_rng.standard_normal((1, T, d), dtype=np.float32))
full = scaled_dot_product_attention(seq, seq, seq, is_causal=True)[0].numpy()
new_query = seq[:, -1:, :]
one_row = scaled_dot_product_attention(new_query, seq, seq, mask=create_causal_mask(T)[-1:])[0].numpy()
top_left = scaled_dot_product_attention(new_query, seq, seq, is_causal=True)[0].numpy()
print("one query with the cache = the last row:", np.allclose(one_row, full[:, -1:], atol=1e-6),
      "  with is_causal=True instead:", np.allclose(top_left, full[:, -1:], atol=1e-6))
timings = {}
for label, call in (("whole prefix", lambda: scaled_dot_product_attention(seq, seq, seq, is_causal=True)),
                    ("one new row", lambda: scaled_dot_product_attention(new_query, seq, seq))):
    start = time.process_time()
    for _ in range(5):
        call()
    timings[label] = (time.process_time() - start) / 5
print({label: f"{seconds * 1e3:.2f} ms" for label, seconds in timings.items()})
for model, layers, heads, head_dim, tokens_, nbytes in (("GPT-2 small", 12, 12, 64, 1024, 4),
                                                          ("Llama-2-7B", 32, 32, 128, 4096, 2)):
    print(f"{model}: KV cache {2 * layers * heads * tokens_ * head_dim * nbytes / 2**20:,.0f} MiB")

# %% [markdown]
# **6. Reading heat maps.** In section 12's four patterns: (a) which pattern has the
# lowest row entropy, and why is it not exactly 0 (print it with more digits than the
# table: `:.2e`)? (b) In the triangle, what is the weight
# in row 3, and what would it be with `scale=1` instead of 0? (c) Make a fifth pattern,
# the *shifted diagonal* of a head that always looks at the previous token, with your
# attention and a hand-made mask, and plot it. (Query 0 has no previous token: its row is
# fully blocked, so your attention gives it all zeros. Say why that is the right answer.)
#
# **7. Questions to answer in words** (run code to support each answer):
# (a) Why can `Q @ K` without the transpose pass a test that uses square matrices?
# (b) Why is `dS` zero wherever a key is blocked, and what does that mean for learning?
# (c) The fused op saves `probs` *and* `weights` when dropout is on. Which one does each
# backward step need, and why can't one be rebuilt from the other without `drop`?
# (d) `flash_attention` saves one number per query (`lse`). Show with your code that
# `exp(scores − lse)` gives back the weights.
