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
# # Module 11: Embeddings
#
# > A token id is just a row number. The model learns what the row says.
#
# **After this module you will be able to**
#
# * explain why a lookup in a table is the same as multiplying a one-hot vector by a
#   matrix, and why its gradient has to *add* into repeated rows;
# * write `Embedding`: its forward lookup as one recorded operation, and its backward
#   rule, with `padding_idx` and checks that name a bad token id;
# * show, with numbers from your own code, that attention cannot see word order;
# * add learned positions (`PositionalEmbedding`) and fixed sinusoidal ones
#   (`SinusoidalPositionalEncoding`), draw the sinusoidal table as a heat map, and prove
#   that `PE[pos + k]` is a fixed rotation of `PE[pos]`;
# * say what each kind of position does at a position it never saw in training.
#
# **Time:** about 2 to 3 hours. Everything runs in a few seconds on a laptop.
#
# | piece | what it does |
# |---|---|
# | `scatter_add_rows` | `table[ids[i]] += rows[i]`, where repeated ids add up |
# | `embedding` | the lookup `weight[ids]` as one recorded op, `"embedding"` |
# | `embedding_backward` | its rule: the gradient of each output row goes back to its table row |
# | `Embedding` | a learned table with `padding_idx` |
# | `PositionalEmbedding` | a learned table of positions, added to `(B, T, D)` |
# | `sinusoidal_table`, `SinusoidalPositionalEncoding` | fixed positions from sines and cosines, a buffer |
# | `position_shift_matrix` | the rotation that moves every sinusoidal position `k` steps on |
#
# Module 10 turned text into integers. A network cannot do arithmetic with the *value* of
# an id (token 40 is not "twice" token 20), so the first layer of every language model
# replaces each id by a learned vector. This module builds that layer and the two ways of
# telling the model *where* in the sequence a token sits.

# %%
#| default_exp text.embeddings

# %%
#| export
from __future__ import annotations

from typing import Any

import numpy as np

from tinytorch.core.autograd import register_backward
from tinytorch.core.layers import Module, make_rng
from tinytorch.core.tensor import Tensor, array_module, as_int, as_tensor, device_of, is_floating, record_op, to_array

# %% [markdown]
# ## 1. A lookup is a matrix product with a one-hot vector
#
# Give each of the `V` tokens of the vocabulary a row of a table `W` of shape `(V, D)`.
# The embedding of token `i` is row `i`. Written as linear algebra, that is the one-hot
# vector `e_i` (a 1 at position `i`, 0 elsewhere) times `W`:
#
# ```
# e_i @ W = W[i]        (1, V) @ (V, D) -> (1, D)
# ```
#
# So an embedding layer *is* a `Linear` layer without bias whose input is one-hot. Nobody
# builds the one-hot matrix, though: for a vocabulary of 50,000 tokens it would be 50,000
# numbers per token, all but one of them zero. Indexing picks the row directly.
#
# A worked example with a table of 5 tokens and 3 features:

# %%
W = np.array([[0.0, 0.1, 0.2],
              [1.0, 1.1, 1.2],
              [2.0, 2.1, 2.2],
              [3.0, 3.1, 3.2],
              [4.0, 4.1, 4.2]])
ids = np.array([3, 0, 3])
one_hot = np.eye(5)[ids]
print("one-hot (3, 5):\n", one_hot)
print("one_hot @ W:\n", one_hot @ W)
print("W[ids]:\n", W[ids])
print("the same:", np.array_equal(one_hot @ W, W[ids]))

# %% [markdown]
# The product view tells us the gradient. For `Y = E @ W` (E the one-hot rows), module 05
# gives `dW = Eᵀ @ dY`. Row `v` of `Eᵀ @ dY` is the **sum** of the rows of `dY` whose token
# is `v`. With `ids = [3, 0, 3]`, token 3 appears twice, so row 3 of `dW` is `dY[0] + dY[2]`,
# row 0 is `dY[1]`, and every other row is zero:

# %%
dY = np.array([[1.0, 0.0, 0.0],
               [0.0, 1.0, 0.0],
               [0.0, 0.0, 5.0]])
print("dW = one_hotᵀ @ dY:\n", one_hot.T @ dY)

# %% [markdown]
# ## 2. Scatter-add: the gradient of a lookup
#
# We want `one_hotᵀ @ dY` without building `one_hot`: for every position `i`,
# `dW[ids[i]] += dY[i]`. This operation is called **scatter-add**. Its one trap is the
# most natural way to write it in NumPy:
#
# ```python
# dW[ids] += dY        # WRONG when ids repeat
# ```
#
# NumPy evaluates this as `dW[ids] = dW[ids] + dY`: it reads the old rows, adds, and writes
# them back one by one. When an id appears twice, both writes go to the same row and the
# second one *overwrites* the first. Each repeated token contributes once, not once per
# occurrence. Watch it happen:

# %%
buffered = np.zeros((5, 3))
buffered[ids] += dY
print("dW[ids] += dY gives row 3 =", buffered[3], " (expected", dY[0] + dY[2], ")")
unbuffered = np.zeros((5, 3))
np.add.at(unbuffered, ids, dY)
print("np.add.at gives row 3      =", unbuffered[3])

# %% [markdown]
# `np.add.at(dW, ids, dY)` is NumPy's unbuffered version and is correct, but it handles
# one element at a time and is slow. A faster way with the same result:
#
# 1. sort the positions by id (`order = np.argsort(ids)`), so equal ids sit next to each
#    other;
# 2. find where each run of equal ids starts (where a sorted id differs from the one
#    before it, plus position 0);
# 3. add up each run with `np.add.reduceat(dY[order], starts, axis=0)`, one sum per
#    distinct id;
# 4. add those sums into their rows: the ids are now distinct, so a plain
#    `table[distinct] += sums` is safe.
#
# On a GPU, CuPy's `cupy.add.at(table, ids, rows)` does the same with atomic additions:
# when `xp` is not `np`, call `xp.add.at(table, ids, rows)` and skip the sorting (the
# sort and `reduceat` are the CPU's way to avoid `add.at`'s one-element-at-a-time loop).
#
# **Write `scatter_add_rows`.** Contract: `table` is a `(num, dim)` array (NumPy or CuPy),
# `ids` a 1-D integer array of length `n` with values in `[0, num)`, `rows` an `(n, dim)`
# array. Add `rows[i]` into `table[ids[i]]` for every `i`, in place, with repeated ids adding
# up; return `table`. An empty `ids` changes nothing. Take `xp = array_module(table)` and
# never call `np.` on CuPy arrays. (`np.add.at` is an acceptable first version; the sorted
# version is what the measurement below compares it with.)

# %%
#| export
def scatter_add_rows(table: Any, ids: Any, rows: Any) -> Any:
    """table[ids[i]] += rows[i] for every i, in place; repeated ids add up. Returns table.

    table -- (num, dim) array, NumPy or CuPy
    ids   -- (n,) integer array, values in [0, num)
    rows  -- (n, dim) array
    """
    ### BEGIN SOLUTION
    xp = array_module(table)
    if ids.size == 0:
        return table
    if xp is not np:  # CuPy: atomic adds on the GPU
        xp.add.at(table, ids, rows)
        return table
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    run_starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    table[sorted_ids[run_starts]] += np.add.reduceat(rows[order], run_starts, axis=0)
    return table
    ### END SOLUTION


# %%
def test_unit_scatter_add_rows():
    table = scatter_add_rows(np.zeros((5, 3)), ids, dY)
    assert np.array_equal(table, one_hot.T @ dY), (
        f"scatter_add_rows gave\n{table}\nexpected\n{one_hot.T @ dY}\nrepeated ids must add up: table[ids] += rows "
        "writes a repeated id once (NumPy buffers it); use the unbuffered np.add.at (or a matmul with a one-hot)")
    rng = np.random.default_rng(0)
    many = rng.integers(0, 7, 200)
    rows = rng.standard_normal((200, 4))
    expected = np.ones((7, 4))
    np.add.at(expected, many, rows)
    assert np.allclose(scatter_add_rows(np.ones((7, 4)), many, rows), expected), \
        "repeated ids must add up, into what the table already holds (a table of ones here): add, never overwrite"
    empty = scatter_add_rows(np.ones((2, 2)), np.zeros(0, np.int64), np.zeros((0, 2)))
    assert np.array_equal(empty, np.ones((2, 2))), f"no ids add nothing: the table stays all ones, got {empty.tolist()}"
    print("✓ scatter_add_rows: repeated ids add up, the hand example, empty ids")


test_unit_scatter_add_rows()

# %% [markdown]
# **Predict, then run.** The next cell scatters 20,000 rows of width 64 into a table of
# 1,000 rows, once with `np.add.at` and once with your `scatter_add_rows`. Write down
# which you expect to be faster, and by roughly how much, before you run it.

# %%
import time


def best_time(fn, repeats: int = 5) -> float:
    """The fastest of a few runs, in seconds (the least disturbed by other programs)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


rng = np.random.default_rng(1)
big_ids = rng.integers(0, 1000, 20_000)
big_rows = rng.standard_normal((20_000, 64)).astype(np.float32)
t_add_at = best_time(lambda: np.add.at(np.zeros((1000, 64), np.float32), big_ids, big_rows))
t_sorted = best_time(lambda: scatter_add_rows(np.zeros((1000, 64), np.float32), big_ids, big_rows))
print(f"np.add.at: {t_add_at * 1e3:.1f} ms   scatter_add_rows: {t_sorted * 1e3:.1f} ms   "
      f"ratio {t_add_at / t_sorted:.1f}x")

# %% [markdown]
# ## 3. The lookup as one recorded operation
#
# The forward pass is one line: `weight.data[ids]`, which for ids of shape `S` gives an
# array of shape `(*S, D)` — ids of any shape work, `(B, T)` being the usual one. It must
# be recorded (module 01's `record_op`) so that module 05's engine can call our rule:
#
# * op name **`"embedding"`**;
# * inputs **`(weight,)`** — the ids are integers and take no gradient, so they are not an
#   input;
# * saved: **`ids`** (the checked int64 array, on the weight's device) and
#   **`padding_idx`** (None, or the non-negative row whose gradient stays zero).
#
# The ids are checked first by given code, `token_ids`: they may be an int, a list, a
# NumPy/CuPy array or a Tensor (a Tensor made from a list is float32, so whole-number
# floats are accepted and converted; `1.5` is a `ValueError`). An id outside `[0, num)`
# raises `IndexError` naming the id and the table size. Negative ids are refused too:
# NumPy would silently read row `num - 1` for id `-1`, a bug that trains without a sound.

# %%
#| export
def token_ids(ids: Any, num_embeddings: int, like: Any = None) -> Any:
    """`ids` as a checked int64 array on the device of the array `like` (NumPy when None).

    Accepts an int, a list, a NumPy/CuPy array or a Tensor. Whole-number floats are
    converted (Tensor([1, 2]) is float32); fractional values raise ValueError, booleans
    and other dtypes TypeError. An id outside [0, num_embeddings) raises IndexError
    naming the first such id and the table size.
    """
    array = ids.data if isinstance(ids, Tensor) else ids
    if isinstance(array, (list, tuple, int, np.integer, float)):
        array = np.asarray(array)
    xp = np if like is None else array_module(like)
    if array_module(array) is not xp:
        array = to_array(array, device=device_of(like))
    array = xp.asarray(array)
    if array.dtype.kind == "f":
        if not bool(xp.all(array == xp.round(array))):
            raise ValueError("Embedding: token ids must be whole numbers, got fractional values.")
    elif array.dtype.kind not in "iu":
        raise TypeError(f"Embedding: token ids must be integers, got dtype {array.dtype}.")
    array = array.astype(np.int64, copy=False)
    bad = (array < 0) | (array >= num_embeddings)
    if bool(bad.any()):
        first = int(array[bad].ravel()[0])
        raise IndexError(
            f"Embedding: token id {first} is out of range for a table of {num_embeddings} rows "
            f"(valid ids are 0 to {num_embeddings - 1})."
        )
    return array


def _padding_row(padding_idx: Any, num_embeddings: int) -> int | None:
    """padding_idx as a row number in [0, num) (negative counts from the end, as in PyTorch), or None."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= int(padding_idx) < num_embeddings:
        raise ValueError(f"Embedding: padding_idx {padding_idx} is outside a table of {num_embeddings} rows.")
    return int(padding_idx) % num_embeddings


def embedding(weight: Any, ids: Any, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` (num, dim) picked by integer `ids` of any shape S: returns (*S, dim).

    Records op "embedding" with inputs (weight,) and saved `ids` (the checked int64 array)
    and `padding_idx` (None or a row in [0, num) whose gradient stays zero).
    """
    weight = as_tensor(weight)
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be a (num_embeddings, dim) table, got shape {weight.shape}.")
    ids = token_ids(ids, weight.shape[0], weight.data)
    padding_idx = _padding_row(padding_idx, weight.shape[0])
    ### BEGIN SOLUTION
    return record_op("embedding", weight.data[ids], (weight,), ids=ids, padding_idx=padding_idx)
    ### END SOLUTION


# %% [markdown]
# ## 4. The backward rule
#
# The output row at position `i` is a copy of table row `ids[i]`, so the gradient of
# table row `v` is the sum of the output gradients at every position holding `v`:
#
# ```
# dW = zeros like W;   dW[ids[i]] += dY[i]  for every position i   (scatter_add_rows)
# ```
#
# `dY` has shape `(*S, D)`: flatten the ids to `(n,)` and the gradient to `(n, D)` first.
# Rows that no id picked get zero. Then **padding**: sequences in a batch are padded to
# one length with a padding token whose row should mean "nothing here" and never be
# learned. PyTorch's `padding_idx` starts that row at zero and gives it a zero gradient,
# so it stays zero under plain SGD or Adam; so do we: after the scatter, set
# `dW[padding_idx] = 0`.
#
# **Write `embedding_backward`.** It receives the output's gradient `grad` (an array of
# shape `(*S, D)`) and the node; it returns a one-element tuple, the gradient of `weight`
# (an array of the weight's shape, in `grad`'s dtype, on `grad`'s device).

# %%
#| export
@register_backward("embedding")
def embedding_backward(grad: Any, node) -> tuple:
    """dW: zeros, then dW[ids[i]] += grad[i] for every position i; the padding row stays 0."""
    (weight,) = node.inputs
    ids, padding_idx = node.saved["ids"], node.saved["padding_idx"]
    ### BEGIN SOLUTION
    xp = array_module(grad)
    grad_weight = xp.zeros(weight.shape, dtype=grad.dtype)
    scatter_add_rows(grad_weight, ids.reshape(-1), grad.reshape(ids.size, weight.shape[1]))
    if padding_idx is not None:
        grad_weight[padding_idx] = 0
    return (grad_weight,)
    ### END SOLUTION


# %% [markdown]
# The hand example again, through the engine: row 3 must get `dY[0] + dY[2]`.

# %%
table = Tensor(W, requires_grad=True)
out = embedding(table, ids)
out.backward(dY)
print("recorded op:", out._node.op, "  output shape:", out.shape)
print("weight.grad:\n", table.grad.numpy())

# %%
from tinytorch.core.autograd import gradcheck


def test_unit_embedding_op():
    table = Tensor(W, requires_grad=True)
    out = embedding(table, [[3, 0], [3, 4]])
    assert out.shape == (2, 2, 3) and np.array_equal(out.numpy()[1, 1], W[4]), "embedding must return weight[ids]"
    assert out._node is not None and out._node.op == "embedding" and out._node.inputs == (table,), \
        f"embedding records op 'embedding' with inputs (weight,) (the ids take no gradient), got {out._node and out._node.op!r}"
    out.backward(np.ones((2, 2, 3)))
    assert np.array_equal(table.grad.numpy()[:, 0], [1, 0, 0, 2, 1]), "repeated ids must add their gradients"
    table.grad = None
    embedding(table, ids, padding_idx=3).backward(dY)
    assert np.all(table.grad.numpy()[3] == 0), \
        f"padding_idx=3: the padding row's gradient stays 0, got {table.grad.numpy()[3].tolist()}"
    assert np.array_equal(table.grad.numpy()[0], dY[1]), "the other rows get their gradients as without padding_idx"
    rng = np.random.default_rng(2)
    weight = Tensor(rng.standard_normal((6, 4)), requires_grad=True)
    gradcheck(lambda w: embedding(w, [[1, 5, 1], [0, 1, 2]]), [weight])  # raises naming the element when wrong
    # with padding_idx the rule is *defined* as the plain gradient with the padding row zeroed
    g = rng.standard_normal((2, 3, 4))
    plain, padded = (Tensor(weight.numpy(), requires_grad=True) for _ in range(2))
    embedding(plain, [[1, 5, 1], [0, 1, 2]]).backward(g)
    embedding(padded, [[1, 5, 1], [0, 1, 2]], padding_idx=1).backward(g)
    expected = plain.grad.numpy().copy()
    expected[1] = 0
    assert np.allclose(padded.grad.numpy(), expected), \
        "with padding_idx=1 the gradient must be the plain one with row 1 zeroed"
    for bad in ([0, 6], [-1]):
        try:
            embedding(weight, bad)
        except IndexError as err:
            assert str(bad[-1]) in str(err) and "6" in str(err), \
                f"the IndexError for ids {bad} must name the bad id and the table's 6 rows, it says: {err}"
        else:
            raise AssertionError(f"ids {bad} must raise IndexError")
    print("✓ embedding: lookup of any shape, scatter-add backward, padding row, gradcheck, bad ids")


test_unit_embedding_op()

# %% [markdown]
# ## 5. The `Embedding` layer
#
# The layer owns the table as a parameter, `weight` of shape `(num_embeddings,
# embedding_dim)`, and its forward pass is `embedding(self.weight, ids, self.padding_idx)`.
# Initialisation follows PyTorch's `nn.Embedding`: every entry from a standard normal
# distribution N(0, 1), and the padding row (if any) set to zero. (GPT-style models
# re-initialise with a smaller spread; module 13 does.)
#
# **Write the table's initialisation** in `__init__`: draw `(num_embeddings,
# embedding_dim)` values from `generator.standard_normal`, zero row `self.padding_idx` when
# it is not None, and store the result as `self.weight`, a Tensor with
# `requires_grad=True`, the given `dtype` and `device`.

# %%
#| export
class Embedding(Module):
    """A learned table of token vectors: forward(ids of shape S) -> (*S, embedding_dim).

    weight      -- (num_embeddings, embedding_dim), N(0, 1) at the start, as in PyTorch
    padding_idx -- a row that starts at zero and gets no gradient (negative counts from the end)
    dtype, device, rng / seed -- as for Linear
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *,
                 dtype: Any = np.float32, device: str | None = None, rng: Any = None, seed: int | None = None):
        super().__init__()
        for label, size in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if not isinstance(size, (int, np.integer)) or size <= 0:
                raise ValueError(f"Embedding: {label} must be a positive int, got {size!r}.")
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.padding_idx = _padding_row(padding_idx, self.num_embeddings)
        generator = make_rng(rng, seed)
        ### BEGIN SOLUTION
        table = generator.standard_normal((self.num_embeddings, self.embedding_dim))
        if self.padding_idx is not None:
            table[self.padding_idx] = 0.0
        self.weight = Tensor(table, requires_grad=True, dtype=dtype, device=device)
        ### END SOLUTION

    def forward(self, ids: Any) -> Tensor:
        """ids: int, list, array or Tensor of integer ids, any shape S -> (*S, embedding_dim)."""
        return embedding(self.weight, ids, self.padding_idx)

    def extra_repr(self) -> str:
        padding = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"


# %%
def test_unit_embedding_layer():
    emb = Embedding(10, 4, padding_idx=0, seed=0)
    assert emb.weight.shape == (10, 4) and emb.weight.dtype == np.float32 and emb.weight.requires_grad, \
        f"Embedding(10, 4): a (10, 4) float32 table that requires gradients, got {emb.weight.shape} {emb.weight.dtype}"
    assert np.all(emb.weight.numpy()[0] == 0), "the padding row starts at zero"
    names = [name for name, _ in emb.named_parameters()]
    assert names == ["weight"], f"one parameter, 'weight', got {names}"
    spread = Embedding(1000, 64, seed=1).weight.numpy()
    assert abs(spread.std() - 1.0) < 0.02 and abs(spread.mean()) < 0.02, "N(0, 1) initialisation"
    out = emb(np.array([[1, 2, 0], [0, 0, 3]]))
    assert out.shape == (2, 3, 4) and np.array_equal(out.numpy()[0, 1], emb.weight.numpy()[2]), \
        f"ids (2, 3) give (2, 3, 4), each entry the table's row of its id; got {out.shape}"
    out.sum().backward()
    counts = emb.weight.grad.numpy()[:, 0]
    assert np.array_equal(counts, [0, 1, 1, 1, 0, 0, 0, 0, 0, 0]), (
        f"summing the output: each row's gradient counts its ids, except the padding row 0, which stays 0; expected "
        f"[0, 1, 1, 1, 0, ...], got {counts.tolist()}")
    last = Embedding(3, 2, padding_idx=-1, seed=0).padding_idx
    assert last == 2, f"padding_idx=-1 counts from the end: row 2 of 3, got {last}"
    print("✓ Embedding: N(0, 1) table, padding row zero and frozen, ids of any shape")


test_unit_embedding_layer()

# %% [markdown]
# ## 6. Attention cannot see word order
#
# "dog bites man" and "man bites dog" contain the same three tokens. Embeddings alone
# give each token the same vector in both sentences. Does attention tell them apart?
#
# Self-attention computes, for token `t`, `softmax(q_t · k_s / √d)` over every token `s`
# and averages the `v_s`. Nothing in that formula mentions *where* `s` is: the keys and
# values form a **set**. If we permute the input tokens, every query sees the same set of
# keys, so each token's output is unchanged and simply moves with its token: the outputs
# are permuted in the same way. A function with `f(x[perm]) = f(x)[perm]` is called
# **permutation-equivariant**.
#
# Module 12 builds attention properly. This lesson needs only the idea, so here is one
# head written from the Tensor operations you already have, on three embedded tokens.
# **Predict, then run:** will the output for "bites" be the same in both sentences? Will
# the output for "dog"?

# %%
from tinytorch.core.activations import softmax


def one_head_attention(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor) -> Tensor:
    """Single-head self-attention without positions: softmax(q kᵀ / √d) v, x of shape (T, D)."""
    q, k, v = x @ wq, x @ wk, x @ wv
    weights = softmax((q @ k.transpose(-1, -2)) * (1.0 / np.sqrt(q.shape[-1])), dim=-1)
    return weights @ v


vocab = {"dog": 0, "bites": 1, "man": 2}
words = Embedding(3, 8, seed=3)
rng = np.random.default_rng(4)
wq, wk, wv = (Tensor(rng.standard_normal((8, 8)) / np.sqrt(8)) for _ in range(3))
sentence_a, sentence_b = ["dog", "bites", "man"], ["man", "bites", "dog"]
out_a = one_head_attention(words([vocab[w] for w in sentence_a]), wq, wk, wv).numpy()
out_b = one_head_attention(words([vocab[w] for w in sentence_b]), wq, wk, wv).numpy()
print("output for 'dog' in A and in B equal:", np.allclose(out_a[0], out_b[2]))
print("output for 'bites' in A and in B equal:", np.allclose(out_a[1], out_b[1]))
print("output of B == output of A, rows reversed:", np.allclose(out_b, out_a[::-1]))

# %% [markdown]
# The same holds for module 12's `MultiHeadAttention` on a whole batch: permute the
# positions of the input and the output comes out permuted the same way. (This cell uses
# your module 12; if you have not built it yet it says so and moves on.)

# %%
def permutation_test(attention, x: np.ndarray, perm: np.ndarray) -> float:
    """max |attention(x[:, perm]) - attention(x)[:, perm]| for a (B, T, D) input."""
    plain = attention(Tensor(x))[0].numpy()
    permuted = attention(Tensor(x[:, perm]))[0].numpy()
    return float(np.abs(permuted - plain[:, perm]).max())


try:
    from tinytorch.core.attention import MultiHeadAttention

    mha = MultiHeadAttention(16, 4, seed=5)
    x = np.random.default_rng(6).standard_normal((2, 7, 16)).astype(np.float32)
    perm = np.random.default_rng(7).permutation(7)
    print("MultiHeadAttention, no positions: max |f(x[perm]) - f(x)[perm]| =", f"{permutation_test(mha, x, perm):.1e}")
except NotImplementedError:
    print("module 12 is not built yet: come back to this cell after it")

# %% [markdown]
# Up to float32 rounding the difference is zero. To the model, "dog bites man" and "man
# bites dog" are the same bag of words. The fix is to make each token's vector depend on
# its position as well: add a **position vector** `P[t]` to the token vector at position
# `t`. Then the same token at different positions has different vectors, and attention
# scores can depend on positions.
#
# ## 7. Learned positions
#
# The simplest choice, used by GPT-2 and nanoGPT: a second table with one learned row per
# position, `(max_len, D)`, looked up at positions `0, 1, ..., T-1` — an embedding whose
# ids are positions. For an input `x` of shape `(B, T, D)` (token vectors), the layer
# returns `x + P[start : start + T]`. The `(T, D)` slice broadcasts over the batch: every
# sequence gets the same position vectors, and in the backward pass module 05's
# `unbroadcast` sums the batch's gradients into each row.
#
# `start` (default 0) shifts the positions: a model that generates one token at a time
# with a cache (module 13) feeds a single token at position `start`. A table has only
# `max_len` rows, numbered `0 ... max_len - 1`, so a sequence fits when all of its
# positions `start ... start + T - 1` do. Off-by-one errors love this check: a sequence of
# exactly `max_len` tokens starting at 0 fits, one more token does not.
#
# **Write `check_positions_fit`**: raise `ValueError` when `start < 0` or when the
# positions `start ... start + length - 1` do not all lie below `max_len`; the message
# names the layer, the length, `start` and `max_len` (tests look for the numbers, not
# the wording). Otherwise return nothing. Both position layers call it.
#
# **Write `PositionalEmbedding.forward`**: after the given shape check and your
# `check_positions_fit`, look up the rows of `self.weight` for the positions `start, ...,
# start + T - 1` (an `xp.arange` on the weight's device, through your `embedding` function
# so that the gradient flows through your rule), and add them to `x`. The positions run
# along axis `-2` of `x` (the `T` of `(B, T, D)`), never along the batch. Returns a Tensor
# of `x`'s shape.

# %%
#| export
def _sequence_length(layer: str, x: Tensor, embed_dim: int) -> int:
    """T of x (..., T, embed_dim); ValueError naming the shape otherwise."""
    if x.ndim < 2 or x.shape[-1] != embed_dim:
        raise ValueError(f"{layer}: expects x of shape (..., T, {embed_dim}), got {x.shape}.")
    return x.shape[-2]


def _in_table_dtype(x: Tensor, table: Tensor) -> Tensor:
    """x itself, or an integer (or boolean) x as a Tensor in the table's dtype: positions added to
    integers are fractions, and casting them to x's dtype would round the table to integers."""
    return x if is_floating(x.data) else Tensor(x.data.astype(table.dtype))


def check_positions_fit(layer: str, length: int, start: int, max_len: int) -> None:
    """ValueError unless start >= 0 and positions start ... start + length - 1 all lie in [0, max_len)."""
    ### BEGIN SOLUTION
    if start < 0 or start + length > max_len:
        raise ValueError(
            f"{layer}: a sequence of {length} tokens starting at position {start} needs positions up to "
            f"{start + length - 1}, but max_len is {max_len} (positions 0 to {max_len - 1})."
        )
    ### END SOLUTION


class PositionalEmbedding(Module):
    """Learned positions: forward(x (..., T, D), start=0) = x + weight[start : start + T].

    weight -- (max_len, embed_dim), N(0, 1) at the start (like Embedding)
    A sequence that does not fit (start + T > max_len) raises ValueError.
    """

    def __init__(self, max_len: int, embed_dim: int, *, dtype: Any = np.float32, device: str | None = None,
                 rng: Any = None, seed: int | None = None):
        super().__init__()
        for label, size in (("max_len", max_len), ("embed_dim", embed_dim)):
            if not isinstance(size, (int, np.integer)) or size <= 0:
                raise ValueError(f"PositionalEmbedding: {label} must be a positive int, got {size!r}.")
        self.max_len, self.embed_dim = int(max_len), int(embed_dim)
        self.weight = Tensor(make_rng(rng, seed).standard_normal((self.max_len, self.embed_dim)),
                             requires_grad=True, dtype=dtype, device=device)

    def forward(self, x: Any, start: int = 0) -> Tensor:
        x = as_tensor(x)
        x = _in_table_dtype(x, self.weight)
        start = as_int(start, "PositionalEmbedding: start")
        length = _sequence_length("PositionalEmbedding", x, self.embed_dim)
        check_positions_fit("PositionalEmbedding", length, start, self.max_len)
        ### BEGIN SOLUTION
        positions = array_module(self.weight.data).arange(int(start), int(start) + length)
        return x + embedding(self.weight, positions)
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, embed_dim={self.embed_dim}"


# %%
def test_unit_positional_embedding():
    pos = PositionalEmbedding(6, 4, dtype=np.float64, seed=0)
    x = Tensor(np.random.default_rng(8).standard_normal((3, 5, 4)), requires_grad=True)
    try:
        out = pos(x)
    except ValueError as err:
        raise AssertionError(f"pos(x) for x (3, 5, 4) raised ValueError ({err}): positions run along axis -2 (the T "
                             "tokens): add weight[start:start + T], the same rows for every batch item") from None
    assert np.allclose(out.numpy(), x.numpy() + pos.weight.numpy()[:5]), "x + weight[:T], the same rows for every batch item"
    out.backward(np.ones((3, 5, 4)))
    grad = pos.weight.grad.numpy()
    assert np.allclose(grad[:5], 3) and np.all(grad[5] == 0), (
        f"rows 0 ... 4 are used by 3 batch items each (gradient 3), row 5 by none (0); got {grad[:, 0].tolist()}")
    fits = "start + T <= max_len fits: the max_len check is off by one"
    try:
        shifted = pos(x, start=1).numpy()
        shape = pos(Tensor(np.zeros((1, 6, 4)))).shape
    except ValueError as err:
        raise AssertionError(f"5 tokens from start 1, and 6 from 0, fit max_len 6, but it raised ValueError ({err}): "
                             f"{fits}") from None
    assert np.allclose(shifted, x.numpy() + pos.weight.numpy()[1:6]), \
        "start=1 uses rows 1 ... 5 (positions start ... start + T - 1): the forward ignores `start`"
    assert shape == (1, 6, 4), f"exactly max_len (6) positions fit, got {shape}"
    for label, bad in (("7 tokens", lambda: pos(Tensor(np.zeros((1, 7, 4))))), ("5 tokens from start 2", lambda: pos(x, start=2))):
        try:
            bad()
        except ValueError:
            continue
        except IndexError as err:
            raise AssertionError(f"{label} with max_len 6 reached the table lookup ({err}): refuse start + T > max_len "
                                 "with a ValueError first: the max_len check is off by one") from None
        raise AssertionError(f"{label} with max_len 6 must raise ValueError: the max_len check is off by one")
    print("✓ PositionalEmbedding: x + weight[start:start+T], batch gradients summed, max_len checked")


test_unit_positional_embedding()

# %% [markdown]
# ## 8. Sinusoidal positions
#
# The original Transformer (Vaswani et al., 2017) does not learn its positions. It fixes
# them with sines and cosines of geometrically spaced frequencies. For position `pos` and
# feature pair `i` (features `2i` and `2i + 1`) of a `d`-dimensional encoding:
#
# ```
# PE[pos, 2i]     = sin(pos / 10000^(2i/d))
# PE[pos, 2i + 1] = cos(pos / 10000^(2i/d))
# ```
#
# Pair 0 turns fastest (angle `pos` radians: a period of 2π ≈ 6.3 positions), the last
# pair slowest (a period of nearly `2π · 10000` positions). Together the pairs work like
# the hands of a clock with many hands: the fast ones tell nearby positions apart, the slow
# ones far-away positions. Every entry lies in `[-1, 1]`, whatever the position.
#
# **Write `sinusoidal_table`**: a float64 NumPy array of shape `(max_len, embed_dim)` by the
# formula above, without a Python loop over positions or features. Column `j` uses the
# exponent `2i/d` with `2i = j` for even `j` and `2i = j - 1` for odd `j`. An odd
# `embed_dim` is allowed: its last column is a sine.

# %%
#| export
def sinusoidal_table(max_len: int, embed_dim: int) -> np.ndarray:
    """(max_len, embed_dim) float64: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same angle)."""
    ### BEGIN SOLUTION
    positions = np.arange(max_len, dtype=np.float64)[:, None]
    pair_exponents = np.arange(0, embed_dim, 2, dtype=np.float64) / embed_dim  # 2i/d, one per pair
    angles = positions / 10000.0 ** pair_exponents  # (max_len, ceil(d/2))
    table = np.empty((max_len, embed_dim))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : embed_dim // 2])
    return table
    ### END SOLUTION


# %%
def test_unit_sinusoidal_table():
    pe = sinusoidal_table(50, 6)
    assert pe.shape == (50, 6) and pe.dtype == np.float64, f"sinusoidal_table(50, 6) is (50, 6) float64, got {pe.shape} {pe.dtype}"
    for pos in (0, 1, 7, 49):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            formula = "PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i + 1] = cos(the same angle)"
            if np.isclose(pe[pos, 2 * i], np.cos(angle)) and not np.isclose(pe[pos, 2 * i], np.sin(angle)):
                formula = "sin and cos swapped: even columns are sines, odd columns cosines"
            assert np.isclose(pe[pos, 2 * i], np.sin(angle)), \
                f"PE[{pos}, {2 * i}] should be sin({angle:.4f}) = {np.sin(angle):.5f}, got {pe[pos, 2 * i]:.5f}: {formula}"
            assert np.isclose(pe[pos, 2 * i + 1], np.cos(angle)), \
                f"PE[{pos}, {2 * i + 1}] should be cos({angle:.4f}) = {np.cos(angle):.5f}, got {pe[pos, 2 * i + 1]:.5f}: {formula}"
    odd = sinusoidal_table(3, 5)
    assert odd.shape == (3, 5) and np.isclose(odd[2, 4], np.sin(2 / 10000 ** 0.8)), \
        f"an odd width 5: shape (3, 5), the last column a sine, PE[2, 4] = sin(2 / 10000^0.8); got {odd.shape}, {odd[2, -1]:.5f}"
    print("✓ sinusoidal_table: the formula, entry by entry; odd widths")


test_unit_sinusoidal_table()

# %% [markdown]
# The first rows, and the table as a heat map (positions down, features across). The left
# columns flicker from row to row; further right the waves get longer; the rightmost
# columns hardly change over 100 positions (sine near 0, cosine near 1).

# %%
import os
import tempfile

from tinytorch.plotting import pyplot  # module 02's: files only where no window can open

print(np.round(sinusoidal_table(4, 8), 4))

plt = pyplot()

fig, ax = plt.subplots(figsize=(8, 4))
image = ax.imshow(sinusoidal_table(100, 64), cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
ax.set_xlabel("feature (2i: sine, 2i+1: cosine)")
ax.set_ylabel("position")
ax.set_title("Sinusoidal positional encoding, d = 64")
fig.colorbar(image, ax=ax)
heatmap_path = os.path.join(tempfile.mkdtemp(), "sinusoidal_heatmap.png")
fig.savefig(heatmap_path, dpi=100)
print("saved", heatmap_path)

# %% [markdown]
# As a layer, the table is computed once and stored as a **buffer** (module 03's
# `register_buffer`): it belongs to the model (saved in `state_dict`, moved by `.to(device)`)
# but it is not a parameter, so no optimizer ever changes it.
#
# **Finish `__init__`**: store `sinusoidal_table(max_len, embed_dim)` as the buffer named
# `"pe"`: a Tensor without `requires_grad`, in the requested `dtype` on `device`.
#
# **Write `SinusoidalPositionalEncoding.forward`**: after the given checks, add rows
# `start ... start + T - 1` of `self.pe` to `x`. Cast those rows to `x`'s dtype first (a
# float16 model must stay float16). The given lines have already turned an integer `x`
# into the table's dtype (cast to integers, the table would be rounded to -1, 0 and 1) and
# checked that `start` is a whole number. The buffer takes no gradient; `x` does, through the
# addition. `self.pe` is a buffer, so `module.to(device)` moved it with the model: `x` and
# the rows are on the same device.

# %%
#| export
class SinusoidalPositionalEncoding(Module):
    """Fixed positions: forward(x (..., T, D), start=0) = x + pe[start : start + T].

    pe -- (max_len, embed_dim) buffer from sinusoidal_table: saved by state_dict, moved by
          .to(device), never a parameter. A sequence that does not fit raises ValueError.
    """

    def __init__(self, embed_dim: int, max_len: int = 5000, *, dtype: Any = np.float32, device: str | None = None):
        super().__init__()
        for label, size in (("embed_dim", embed_dim), ("max_len", max_len)):
            if not isinstance(size, (int, np.integer)) or size <= 0:
                raise ValueError(f"SinusoidalPositionalEncoding: {label} must be a positive int, got {size!r}.")
        self.embed_dim, self.max_len = int(embed_dim), int(max_len)
        ### BEGIN SOLUTION
        self.register_buffer("pe", Tensor(sinusoidal_table(self.max_len, self.embed_dim), dtype=dtype, device=device))
        ### END SOLUTION

    def forward(self, x: Any, start: int = 0) -> Tensor:
        x = as_tensor(x)
        x = _in_table_dtype(x, self.pe)
        start = as_int(start, "SinusoidalPositionalEncoding: start")
        length = _sequence_length("SinusoidalPositionalEncoding", x, self.embed_dim)
        check_positions_fit("SinusoidalPositionalEncoding", length, start, self.max_len)
        ### BEGIN SOLUTION
        rows = self.pe.data[int(start): int(start) + length]
        return x + Tensor(rows.astype(x.dtype, copy=False))
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, max_len={self.max_len}"


# %%
def test_unit_sinusoidal_encoding():
    enc = SinusoidalPositionalEncoding(8, max_len=20)
    assert enc.parameters() == [] and [n for n, _ in enc.named_buffers()] == ["pe"], \
        "the sinusoidal table is a buffer named 'pe', not a parameter: nothing to learn"
    assert "pe" in enc.state_dict() and enc.pe.shape == (20, 8), f"the buffer is saved and (max_len, d) = (20, 8), got {enc.pe.shape}"
    x = Tensor(np.random.default_rng(9).standard_normal((2, 5, 8)), requires_grad=True)
    out = enc(x, start=3)
    assert np.allclose(out.numpy(), x.numpy() + sinusoidal_table(20, 8)[3:8]), "start=3 adds rows 3 ... 7 of the table"
    out.backward(np.ones((2, 5, 8)))
    assert np.allclose(x.grad.numpy(), 1), "x + a constant: the gradient passes through unchanged"
    dtype = enc(Tensor(np.zeros((1, 3, 8), np.float16))).dtype
    assert dtype == np.float16, f"float16 in must give float16 out (cast the table to x's dtype), got {dtype}"
    try:
        enc(Tensor(np.zeros((1, 21, 8))))
    except ValueError:
        pass
    else:
        raise AssertionError("21 positions in a table of 20 must raise ValueError")
    print("✓ SinusoidalPositionalEncoding: a buffer, x + pe[start:start+T], dtype kept, max_len checked")


test_unit_sinusoidal_encoding()

# %% [markdown]
# ## 9. Moving k steps is a rotation
#
# Why sines *and* cosines? Take one pair with frequency `ω = 1 / 10000^(2i/d)`. At position
# `pos` it holds `(sin(pos·ω), cos(pos·ω))`: a point on the unit circle at angle `pos·ω`.
# Moving `k` positions on adds `k·ω` to the angle. By the angle-addition formulas:
#
# ```
# sin((pos+k)ω) =  cos(kω)·sin(pos·ω) + sin(kω)·cos(pos·ω)
# cos((pos+k)ω) = -sin(kω)·sin(pos·ω) + cos(kω)·cos(pos·ω)
# ```
#
# So the new pair is the old pair times a 2×2 rotation matrix that depends on `k` and `i`,
# **but not on `pos`**. Stack one such block per pair on the diagonal of a `d × d` matrix
# `M_k` and, for every position at once:
#
# ```
# PE[pos + k] = M_k @ PE[pos]        (column vectors; for rows: PE[pos + k] = PE[pos] @ M_kᵀ)
# ```
#
# "k tokens later" is one fixed linear map, the same everywhere in the sequence: a linear
# layer inside attention can learn it once and use it at every position. It also makes the
# dot product `PE[pos] · PE[pos + k] = Σᵢ cos(k·ωᵢ)` depend on the offset `k` alone.
#
# **Write `position_shift_matrix`**: the `(d, d)` float64 matrix `M_k` above, block
# diagonal with the 2×2 block `[[cos(kω), sin(kω)], [-sin(kω), cos(kω)]]` for each pair.
# It exists only for an even `d` (an odd last column is a sine without its cosine): the
# given check raises `ValueError` otherwise.

# %%
#| export
def position_shift_matrix(offset: int, embed_dim: int) -> np.ndarray:
    """(embed_dim, embed_dim) float64 M with sinusoidal_table(...)[pos + offset] == M @ table[pos] for every pos."""
    if embed_dim % 2:
        raise ValueError(f"position_shift_matrix: embed_dim must be even (sine, cosine pairs), got {embed_dim}.")
    ### BEGIN SOLUTION
    angles = offset / 10000.0 ** (np.arange(0, embed_dim, 2, dtype=np.float64) / embed_dim)
    cos, sin = np.cos(angles), np.sin(angles)
    pairs = np.arange(0, embed_dim, 2)
    matrix = np.zeros((embed_dim, embed_dim))
    matrix[pairs, pairs] = cos
    matrix[pairs, pairs + 1] = sin
    matrix[pairs + 1, pairs] = -sin
    matrix[pairs + 1, pairs + 1] = cos
    return matrix
    ### END SOLUTION


# %% [markdown]
# **Predict, then run.** For `k = 5` and `d = 16`: is `M_5` orthogonal (`M Mᵀ = I`)? Is
# `M_5 @ M_5` equal to `M_10`? Is `M_5 @ PE[pos]` equal to `PE[pos + 5]` for positions 0,
# 100 and 1000 alike?

# %%
pe = sinusoidal_table(1100, 16)
M5 = position_shift_matrix(5, 16)
print("M5 orthogonal:", np.allclose(M5 @ M5.T, np.eye(16)))
print("M5 @ M5 == M10:", np.allclose(M5 @ M5, position_shift_matrix(10, 16)))
for pos in (0, 100, 1000):
    print(f"pos {pos:4d}: max |M5 @ PE[pos] - PE[pos + 5]| = {np.abs(M5 @ pe[pos] - pe[pos + 5]).max():.1e}")
print("PE[pos]·PE[pos+3] for pos = 0, 50, 500:", [round(float(pe[p] @ pe[p + 3]), 6) for p in (0, 50, 500)])


# %%
def test_unit_position_shift_matrix():
    pe = sinusoidal_table(64, 10)
    for k in (0, 1, 7):
        M = position_shift_matrix(k, 10)
        backwards = np.allclose(pe[: 64 - k], pe[k:] @ M.T)
        assert np.allclose(pe[k:] , pe[: 64 - k] @ M.T), (f"PE[pos + {k}] must equal M_{k} @ PE[pos] for every pos" + (
            f": your M moves {k} steps back (it rotates by -k·ω); rotate by +k·ω" if backwards and k else ""))
        assert np.allclose(M @ M.T, np.eye(10)), "a rotation is orthogonal"
    assert np.allclose(position_shift_matrix(0, 4), np.eye(4)), "a shift by 0 positions is the identity"
    try:
        position_shift_matrix(1, 5)
    except ValueError:
        pass
    else:
        raise AssertionError("odd embed_dim must raise ValueError")
    print("✓ position_shift_matrix: PE[pos + k] = M_k PE[pos] at every position; orthogonal")


test_unit_position_shift_matrix()

# %% [markdown]
# ## 10. Learned or sinusoidal?
#
# | | learned (`PositionalEmbedding`) | sinusoidal (`SinusoidalPositionalEncoding`) |
# |---|---|---|
# | parameters | `max_len × D` (GPT-2: 1024 × 768 = 786,432) | none: a buffer |
# | what a position means | whatever training made of it | fixed in advance; `PE[pos + k] = M_k PE[pos]` |
# | position `≥ max_len` | no row exists: `ValueError` | compute more rows: `sinusoidal_table(any_length, D)` |
# | rows never seen in training | stay at their random start | same formula as every other row |
# | used by | GPT-2, nanoGPT, BERT | the original Transformer |
#
# On sequences as long as the ones they were trained on, both work about equally well
# (Vaswani et al. report nearly identical results). The difference shows **past the
# trained length**. An experiment: the task is "output the previous token" (target at
# position `t` is the token at `t - 1`, a job only positions can do). The model is one
# causal attention head whose queries and keys are computed from the position vectors
# alone (`q = P W_Q`, `k = P W_K`) and whose values are the token embeddings; a linear
# layer reads the answer out. We train on sequences of **8** tokens and test on sequences
# of **32**. The learned table has 32 rows, so it *can* run at length 32; rows 8 to 31
# simply never take part in training.
#
# A third variant gives the sinusoidal model scores that can only depend on the offset
# `t - s`: `k = P` and `W_Q` restricted to a scaled rotation inside each sine/cosine pair
# (two numbers per pair, `a` and `b`: `q = a ⊙ P + b ⊙ (P J)` where `J` turns each pair
# `(sin, cos)` into `(cos, -sin)`). A scaled rotation commutes with the shift `M_k` of
# section 9, so `q_t · k_s` becomes a sum of `cos((t - s)ω + φ)` terms: a function of the
# offset alone. (Rotary position embeddings, RoPE, used by Llama, build exactly this into
# every attention head.)
#
# **Predict, then run.** All three reach 100% on positions 1 to 7. Write down, for each,
# the accuracy you expect at positions 8 to 31 (chance is 10%, one of 10 tokens).

# %%
from tinytorch.core.losses import cross_entropy
from tinytorch.core.optimizers import Adam


def pair_swap_matrix(dim: int) -> np.ndarray:
    """J with (sin, cos) @ J = (cos, -sin) in every feature pair: a quarter turn of each pair."""
    J = np.zeros((dim, dim), dtype=np.float32)
    pairs = np.arange(0, dim, 2)
    J[pairs + 1, pairs] = 1.0
    J[pairs, pairs + 1] = -1.0
    return J


def previous_token_experiment(kind: str, train_len: int = 8, test_len: int = 32, steps: int = 300,
                              vocab: int = 10, dim: int = 32, seed: int = 0) -> dict:
    """Train one causal head to copy the previous token on length train_len, test on test_len.

    kind: "learned", "sinusoidal", or "relative" (sinusoidal, scores depending on t - s only).
    Returns per-position test accuracy, where each query looks most, and the position table
    rows before and after training (learned only).
    """
    rng = np.random.default_rng(seed)
    tokens = Embedding(vocab, dim, seed=seed)
    readout = Tensor(rng.standard_normal((dim, vocab)) / np.sqrt(dim), requires_grad=True)
    if kind == "learned":
        positions = PositionalEmbedding(test_len, dim, seed=seed + 1)
    else:
        positions = SinusoidalPositionalEncoding(dim, test_len)
    if kind == "relative":
        a, b = (Tensor(rng.standard_normal(dim), requires_grad=True) for _ in range(2))
        swap = Tensor(pair_swap_matrix(dim))
        shape_params = [a, b]
    else:
        w_q, w_k = (Tensor(rng.standard_normal((dim, dim)) / np.sqrt(dim), requires_grad=True) for _ in range(2))
        shape_params = [w_q, w_k]
    params = tokens.parameters() + positions.parameters() + shape_params + [readout]
    start_rows = positions.weight.numpy().copy() if kind == "learned" else None

    def forward(ids):
        T = ids.shape[1]
        p = positions(Tensor(np.zeros((1, T, dim), np.float32)))  # the position vectors alone, (1, T, dim)
        if kind == "relative":
            q, k = p * a + (p @ swap) * b, p
        else:
            q, k = p @ w_q, p @ w_k
        scores = (q @ k.transpose(-1, -2)) * (1.0 / np.sqrt(dim))
        scores = scores.masked_fill(np.triu(np.ones((T, T), bool), 1), -1e9)  # causal: look back only
        weights = softmax(scores, dim=-1)  # (1, T, T): where each position looks
        return (weights @ tokens(ids)) @ readout, weights

    optimizer = Adam(params, lr=0.03 if kind == "relative" else 0.01)
    data = np.random.default_rng(seed + 2)
    for _ in range(steps):
        ids = data.integers(0, vocab, (32, train_len))
        loss = cross_entropy(forward(ids)[0][:, 1:], np.roll(ids, 1, axis=1)[:, 1:])
        for p in params:
            p.grad = None
        loss.backward()
        optimizer.step()
    ids = np.random.default_rng(seed + 3).integers(0, vocab, (256, test_len))
    logits, weights = forward(ids)
    correct = logits.numpy().argmax(-1) == np.roll(ids, 1, axis=1)
    return {"accuracy": correct.mean(0), "looks_at": weights.numpy()[0].argmax(-1),
            "rows_before": start_rows, "rows_after": None if start_rows is None else positions.weight.numpy()}


results = {kind: previous_token_experiment(kind) for kind in ("learned", "sinusoidal", "relative")}
print(f"{'':>11} | {'pos 1-7':>7} | {'pos 8-15':>8} | {'pos 16-31':>9}   (trained on 8 tokens)")
for kind, r in results.items():
    acc = r["accuracy"]
    print(f"{kind:>11} | {acc[1:8].mean():7.0%} | {acc[8:16].mean():8.0%} | {acc[16:].mean():9.0%}")
print("\nwhere query t looks most (t = 0 ... 15):")
for kind, r in results.items():
    print(f"{kind:>11}:", r["looks_at"][:16].tolist())
learned = results["learned"]
moved = np.abs(learned["rows_after"] - learned["rows_before"]).max(axis=1)
print("\nlearned table, largest change of each row in training: rows 0-7:", " ".join(f"{m:.2f}" for m in moved[:8]),
      f"  rows 8-31: at most {moved[8:].max():.2f}")

# %% [markdown]
# What the numbers say (your exact percentages depend on the seeds, the picture does not):
#
# * **Learned** positions fall to chance past position 7. Rows 8 to 31 did not change at
#   all: their positions never occurred, so the scatter-add gave them zero gradient every
#   step. At test time they are the random vectors they started as, and the queries at
#   those positions look anywhere.
# * **Sinusoidal** positions with free `W_Q`, `W_K` do little better. The rows past 7 are
#   well defined, but the model was free to learn a rule that only works where it was
#   trained: queries 8 to 15 keep looking at position 6, the last key they learned to
#   use, instead of one step back. Further out some positions come out right by the
#   coincidences of the periodic pattern (25% to 45% on positions 16 to 31, depending on
#   the seed), with no rule behind it.
# * **Relative** scores, whose form can only depend on `t - s`, learn "look one step back"
#   once and apply it at every position: 100% everywhere.
#
# So a fixed formula alone is not enough to generalise to longer sequences; what helps is
# a score whose *form* depends only on the offset. This is why later models moved from
# added positions to relative schemes built into attention (RoPE, ALiBi). GPT-2, nanoGPT
# and module 13's GPT use learned positions and simply never run past `max_len`.

# %% [markdown]
# ## Summary
#
# * An embedding is a table lookup, `W[ids]` = `one_hot(ids) @ W`; its gradient is
#   `one_hot(ids)ᵀ @ dY`, a **scatter-add** in which repeated ids add up (`dW[ids] += dY`
#   silently does not). `padding_idx` starts a row at zero and keeps its gradient zero.
# * Attention is permutation-equivariant: without positions it sees a bag of tokens.
# * Learned positions are a second table indexed by position; sinusoidal positions are a
#   fixed buffer in which moving `k` steps is the rotation `M_k`, the same at every position.
# * Past the trained length, learned rows are untrained noise and a free model on
#   sinusoidal positions does not generalise either; scores that depend only on the offset do.
#
# ## Exercises and questions
#
# Answer each by running your own code (add cells below).
#
# 1. **Memory of a table.** How many MiB does `Embedding(50257, 768).weight` take in
#    float32 (GPT-2's vocabulary and width)? In float16? How does that compare with one
#    `Linear(768, 768)`? Check with `.data.nbytes`.
# 2. **Sparse gradients.** Make `Embedding(1000, 16)`, look up a batch of `4 × 64` ids
#    drawn uniformly at random, and backpropagate `out.sum()`. How many rows of
#    `weight.grad` are non-zero? Predict it first: the expected number of distinct ids among
#    256 draws from 1,000 is `1000 · (1 - (1 - 1/1000)^256)`.
# 3. **The padding row under Adam.** Train `Embedding(6, 4, padding_idx=0)` for a few steps
#    with module 06's `Adam` and with `AdamW(weight_decay=0.1)` on a loss that uses id 0.
#    Does row 0 stay exactly zero? Explain from the update rules why it does (or does not).
# 4. **Scatter-add cost.** Time `np.add.at` against your `scatter_add_rows` for tables of
#    100, 10,000 and 100,000 rows with 20,000 ids. Which one does the table size affect,
#    and why? (Hint: what does `np.zeros` of the gradient cost, and which one sorts?)
# 5. **Similarity with distance.** For `d = 64`, print `PE[100] · PE[100 + k]` for
#    `k = 0, 1, 2, 5, 10, 50, 200`. Is it largest at `k = 0`? Does it fall steadily? Use
#    section 9 to explain why the result is the same at position 1000.
# 6. **Order matters now.** Repeat section 6's "dog bites man" experiment with
#    `SinusoidalPositionalEncoding(8, 16)` added to the embeddings before attention. Is
#    the output for "bites" still the same in both sentences? For "dog"?
# 7. **Where the frequencies run out.** With `d = 16`, the slowest pair has a period of
#    `2π · 10000^(14/16)` positions. Compute it. Two positions whose every pair differs by
#    less than 0.01 are nearly indistinguishable: find the first pair of positions
#    `(0, p)` that are at least 0.5 apart in Euclidean distance for `d = 16` and `d = 64`.
# 8. **Extrapolation.** In `previous_token_experiment`, train the learned model with
#    `train_len=16` and test on 32. Which positions does it now get right, and what do the
#    table rows 16 to 31 look like after training?
