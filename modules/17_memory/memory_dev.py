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
# # Module 17: Memory — what to keep and what to recompute
#
# > Training a model costs memory four times over: the weights, their gradients, the
# > optimizer's state, and everything the forward pass keeps for the backward pass. The
# > last one grows with the batch and the sequence, and it is the one you can trade for time.
#
# Module 13's GPT trains on Shakespeare with a context of 64 characters. Give it a context of
# 512 and the memory of one training step grows many times over, almost all of it *activations*:
# the arrays each operation saved so that `backward()` can run. This module measures where
# the bytes go and builds the three tools every large training run uses to fit in memory:
#
# * **activation checkpointing** — keep only each block's input and compute the block again
#   during the backward pass: less memory, a little more time;
# * **mixed precision** — matrix products in float16, with a **gradient scaler** so that small
#   gradients survive float16's narrow range;
# * **accounting** — predict the bytes of a training step and of a KV cache from the model's
#   shapes, and check the prediction against a measured peak.
#
# **What you will be able to do when you finish:**
#
# * predict the memory of a training step (parameters, gradients, optimizer state,
#   activations) and of a KV cache, and check both against what your code really allocates;
# * write `checkpoint(fn, *inputs)` as **one** recorded operation whose backward rule runs
#   `fn` again, with gradients identical to the plain call — dropout included — and wrap
#   every block of a GPT with it without touching module 13's code;
# * measure the trade on your own machine: how much memory checkpointing saves and how much
#   time it costs as the sequence grows;
# * explain float16's range and precision, run a model under `autocast()` (products in
#   float16; softmax, LayerNorm and losses in float32; float32 weights), show gradients
#   underflowing to zero and coming back with loss scaling;
# * write a `GradScaler` that scales, unscales, skips and adapts exactly as PyTorch's does.
#
# **Time:** about four hours — sections 1–4 (accounting and checkpointing) in a first sitting,
# 5–8 (float16, autocast, the scaler) in a second.
#
# | section | you write | what it does |
# |---|---|---|
# | 1 | `training_memory` | the predicted bytes of one training step, part by part |
# | 2 | `kv_cache_bytes` | the bytes of a KV cache, `2·layers·B·T·d·itemsize` |
# | 3 | `checkpoint`, `checkpoint_backward` | one recorded op that keeps only its inputs and recomputes in backward |
# | 4 | `CheckpointedBlock.forward`, `checkpoint_blocks` | every block of a GPT under `checkpoint` |
# | 6 | `autocast.__enter__`, `autocast.__exit__` | the mixed-precision context |
# | 8 | `GradScaler.scale`, `unscale_`, `step`, `update` | dynamic loss scaling, step for step as PyTorch |
#
# Module 14's measuring tools do the measuring here: `peak_memory(fn, *args)` (the most
# memory NumPy held while `fn` ran, from Python's `tracemalloc`), `graph_saved_bytes(tensor)`
# (the bytes the graph behind a tensor keeps for its backward pass) and `measure_latency`.

# %% [markdown]
# This lesson times your code. NumPy's matrix products may split over several threads, and
# on a busy machine the same product can take ten times longer from one run to the next, so
# the lesson asks for one BLAS thread before NumPy starts (in Jupyter: restart the kernel
# before running the notebook from the top).

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| default_exp perf.memory

# %%
#| export
import contextlib
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from tinytorch.core.autograd import backward, no_grad, register_backward, topological_order
from tinytorch.core.layers import Module, ModuleList
from tinytorch.core.optimizers import SGD, Adam
from tinytorch.core.tensor import OP_LISTENERS, Autocast, GradMode, Tensor, array_module, as_int, cast, record_op
from tinytorch.models.transformer import TransformerBlock
from tinytorch.perf.profiling import graph_saved_bytes

# %% [markdown]
# ## 1. Where the memory of training goes
#
# One training step of a model with `P` parameters holds, at its peak:
#
# | part | bytes (float32) | when |
# |---|---|---|
# | parameters | `4P` | always |
# | gradients | `4P` | from `backward()` until `zero_grad()` |
# | optimizer state | AdamW: `8P` (two moments per weight); SGD with momentum: `4P`; plain SGD: 0 | from the first `step()` on, for good |
# | activations | what the graph keeps for the backward pass | from the forward pass until the graph is dropped |
# | backward working memory | the gradients on their way down while `backward()` runs | during `backward()` only |
#
# The first three depend only on the model: AdamW training costs **16 bytes per parameter**
# before a single activation. The fourth depends on the batch `B` and the sequence length
# `T`, and it is usually the largest. The fifth is the engine's own bookkeeping while the
# gradients flow back (the "predict, then run" below shows why it cannot be left out).
#
# In our engine every recorded op keeps its inputs (the `Node` holds them) and whatever it
# saved (`node.saved`): a LayerNorm keeps its input, `xhat` and `rstd`; an attention op keeps
# its `B·H·T·T` weights; the cross-entropy keeps its `B·T·V` probabilities. None of it is
# freed until the loss — and with it the graph — is dropped, so at the end of `backward()`
# the first four parts are alive at once, and during it the fifth as well: the step's peak
# is close to their **sum**.
#
# Module 14's `graph_saved_bytes(loss)` walks the graph behind a loss and adds up the arrays
# it holds. Look at one block of a small GPT before writing anything:

# %%
from tinytorch.core.optimizers import AdamW
from tinytorch.models.transformer import GPT
from tinytorch.perf.profiling import measure_latency, peak_memory


def batch_of(model: GPT, batch: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random token ids and targets, (batch, length) each."""
    ids = np.random.default_rng(seed).integers(0, model.vocab_size, (2, batch, length))
    return ids[0], ids[1]


small = GPT(65, 64, 2, 4, 256, seed=0)
for length in (32, 64, 128, 256):
    idx, targets = batch_of(small, 4, length)
    _, loss = small(idx, targets=targets)
    print(f"B=4, T={length:3d}: the graph holds {graph_saved_bytes(loss) / 2**20:6.2f} MiB")
parameter_bytes = sum(p.data.nbytes for p in small.parameters())
print(f"parameters: {parameter_bytes / 2**20:.2f} MiB")

# %% [markdown]
# Doubling `T` more than doubles the activations: most arrays are `B·T·E` (they double) but
# attention's weights are `B·H·T·T` (they quadruple). At `T = 256` the graph holds several
# times the model's own size.
#
# ### Your turn: `training_memory`
#
# `training_memory(model, optimizer, batch_shape)` predicts the five parts in bytes. The
# given code runs one forward pass on random data of `batch_shape` (token ids for a language
# model) and hands you its `loss`, without drawing from the model's random generators. You
# compute:
#
# * `parameters`: the bytes of every parameter's array (`p.data.nbytes`);
# * `gradients`: the same — each gradient has its parameter's shape and dtype;
# * `optimizer_state`: for each parameter of `optimizer.params`, the number of
#   parameter-sized arrays its optimizer keeps (`optimizer_state_arrays(optimizer)`, given:
#   2 for Adam and AdamW, 1 for SGD with momentum, 0 without) times its bytes;
# * `activations`: `graph_saved_bytes(loss)`;
# * `backward_working`: `backward_working_bytes(loss)` (given, below: the most bytes of
#   gradients that module 05's `backward` holds at once);
# * `total`: the sum of the five.
#
# **The backward pass's working memory.** Module 05's `backward` walks
# `reversed(topological_order(loss))` with a dictionary `grads`: a tensor's gradient waits
# there from the first rule that reaches it until the tensor's own turn, then the tensor's
# rule runs and returns one gradient per input. So at each rule, the gradients waiting plus
# the ones the rule returns are alive at once, on top of the graph. `backward_working_bytes`
# replays that walk on the graph *without computing anything* (only shapes and dtypes) and
# returns the largest such sum. It leaves out what a rule makes inside itself (GELU's rule
# builds a few arrays of its input), so it is a close estimate, not a bound.

# %%
#| export
def optimizer_state_arrays(optimizer: Any) -> list[int]:
    """How many parameter-sized arrays `optimizer` keeps for each of `optimizer.params`, in order:
    Adam and AdamW 2 (exp_avg, exp_avg_sq), SGD 1 in a group with momentum (momentum_buffer), else 0.
    Raises TypeError for another optimizer (its state is not known here)."""
    if not isinstance(optimizer, (Adam, SGD)):
        raise TypeError(f"training_memory: the state of {type(optimizer).__name__} is not known; "
                        "use Adam, AdamW or SGD (or count its state with optimizer.state_nbytes() after a step).")
    counts = []
    for group in optimizer.param_groups:
        per_parameter = 2 if isinstance(optimizer, Adam) else int(group["momentum"] != 0)
        counts.extend(per_parameter for _ in group["params"])
    return counts


def random_generators(model: Any) -> list:
    """Every distinct NumPy Generator held as `.rng` by `model` or its sub-modules (Dropout's,
    attention's), each once, in `modules()` order; [] for anything that is not a Module."""
    found, seen = [], set()
    for module in model.modules() if isinstance(model, Module) else []:
        generator = getattr(module, "rng", None)
        if isinstance(generator, np.random.Generator) and id(generator) not in seen:
            seen.add(id(generator))
            found.append(generator)
    return found


@contextlib.contextmanager
def generators_kept(generators: list) -> Iterator[None]:
    """Inside: draw from `generators` freely; on exit each is put back to the state it had on entry."""
    states = [g.bit_generator.state for g in generators]
    try:
        yield
    finally:
        for generator, state in zip(generators, states):
            generator.bit_generator.state = state


def _one_forward_loss(model: Any, batch_shape: tuple) -> Tensor:
    """The loss of one forward pass on random data of `batch_shape` (the graph is kept).

    A language model (it has `vocab_size`): random token ids (B, T) and targets, its own loss.
    Any other model: a standard-normal input of `batch_shape` in the parameters' dtype, loss =
    mean(model(x)²). The model's random generators are put back afterwards (no draw is used up).
    """
    rng = np.random.default_rng(0)
    with generators_kept(random_generators(model)):
        if hasattr(model, "vocab_size"):
            ids = rng.integers(0, model.vocab_size, (2, *batch_shape))
            return model(ids[0], targets=ids[1])[1]
        x = Tensor(rng.standard_normal(batch_shape), dtype=model.parameters()[0].dtype)
        out = model(x)
        return (out * out).mean()


def backward_working_bytes(loss: Tensor) -> int:
    """The most bytes of gradients alive at once while module 05's `backward(loss)` runs, from the graph alone.

    Replays the engine's walk over reversed(topological_order(loss)) without computing anything: a
    tensor's gradient (its shape, in its dtype) waits in the engine's `grads` dictionary from the
    first rule that reaches it until its own turn. At each recorded op the gradients waiting (its
    own included) plus those its rule returns (one per input that requires a gradient) are alive
    at once; the largest such sum is returned, an int. A rule's internal temporaries are not
    counted. A leaf `loss` (no graph) returns 0.
    """
    if loss._node is None:
        return 0
    waiting = {id(loss): int(loss.data.nbytes)}  # tensor id -> bytes of its gradient in `grads`
    most = 0
    for t in reversed(topological_order(loss)):
        if id(t) not in waiting:  # no rule reached t (every path to it returned None)
            continue
        inputs = [inp for inp in (t._node.inputs if t._node is not None else ()) if inp.requires_grad]
        returned = [int(np.prod(inp.shape, dtype=np.int64)) * np.dtype(inp.dtype).itemsize for inp in inputs]
        most = max(most, sum(waiting.values()) + sum(returned))
        del waiting[id(t)]  # popped: released once its rule has run
        for inp, nbytes in zip(inputs, returned):
            waiting.setdefault(id(inp), nbytes)  # a second use is added into the same array
    return most


def training_memory(model: Any, optimizer: Any, batch_shape: tuple) -> dict[str, int]:
    """Predicted bytes of one training step of `model` with `optimizer` on a batch of `batch_shape`.

    Returns {"parameters", "gradients", "optimizer_state", "activations", "backward_working", "total"} (ints):
        parameters       -- sum of p.data.nbytes over model.parameters()
        gradients        -- the same (a gradient has its parameter's shape and dtype)
        optimizer_state  -- sum over optimizer.params of optimizer_state_arrays(optimizer)[i] · nbytes
        activations      -- graph_saved_bytes(loss) for the loss of one forward pass (given)
        backward_working -- backward_working_bytes(loss) for the same loss (given)
        total            -- the sum of the five
    """
    loss = _one_forward_loss(model, tuple(batch_shape))
    ### BEGIN SOLUTION
    parameters = sum(int(p.data.nbytes) for p in model.parameters())
    state = sum(count * int(p.data.nbytes)
                for count, p in zip(optimizer_state_arrays(optimizer), optimizer.params))
    parts = {"parameters": parameters, "gradients": parameters, "optimizer_state": state,
             "activations": int(graph_saved_bytes(loss)), "backward_working": backward_working_bytes(loss)}
    parts["total"] = sum(parts.values())
    return parts
    ### END SOLUTION


# %%
from tinytorch.core.optimizers import SGD
from tinytorch.testing import returned  # given: names a missing `return` (modules/05_autograd/testing.py)


def test_unit_training_memory():
    model = GPT(17, 16, 2, 2, 8, seed=0)
    nbytes = sum(p.data.nbytes for p in model.parameters())
    adamw = returned(training_memory(model, AdamW(model.parameters()), (2, 8)), "training_memory(...)", dict)
    keys = {"parameters", "gradients", "optimizer_state", "activations", "backward_working", "total"}
    assert set(adamw) == keys, (f"the keys are {sorted(keys)}; got {sorted(adamw)}"
                                + (": add backward_working = backward_working_bytes(loss), the gradients the backward "
                                   "pass holds at once" if "backward_working" not in adamw else ""))
    entries = sum(p.data.size for p in model.parameters())
    assert adamw["parameters"] == nbytes, (
        f"parameters: the sum of p.data.nbytes is {nbytes} bytes; got {adamw['parameters']}"
        + (": that is the number of entries (p.size), not of bytes: count p.data.nbytes (entries × itemsize)"
           if adamw["parameters"] == entries else ""))
    assert adamw["gradients"] == nbytes, (
        f"gradients: expected {nbytes} bytes (as many as the parameters), got {adamw['gradients']}"
        + (": they are missing. Count gradients: one array of each parameter's shape and dtype, alive from "
           "backward() to zero_grad() (nothing has called backward() yet, so predict them, don't read p.grad)"
           if adamw["gradients"] == 0 else ""))
    unstepped = AdamW(model.parameters()).state_nbytes()  # what an optimizer holds before its first step()
    assert adamw["optimizer_state"] == 2 * nbytes, (
        f"AdamW keeps TWO arrays per parameter (exp_avg, exp_avg_sq): {2 * nbytes} bytes, got {adamw['optimizer_state']}"
        + (f", what optimizer.state_nbytes() says now: before the first step() the optimizer holds nothing yet. "
           "Predict the state: optimizer_state_arrays(optimizer)[i] · the i-th parameter's nbytes"
           if adamw["optimizer_state"] == unstepped else ""))
    sgd = training_memory(model, SGD(model.parameters(), lr=0.1), (2, 8))
    assert sgd["optimizer_state"] == 0, (
        f"plain SGD keeps no state; got {sgd['optimizer_state']} bytes"
        + (": two arrays per parameter, as for AdamW. The count depends on the optimizer: "
           "optimizer_state_arrays(optimizer)[i] arrays for the i-th parameter" if sgd["optimizer_state"] == 2 * nbytes
           else ""))
    momentum = training_memory(model, SGD(model.parameters(), lr=0.1, momentum=0.9), (2, 8))
    assert momentum["optimizer_state"] == nbytes, (
        f"SGD with momentum keeps one buffer per parameter: {nbytes} bytes, got {momentum['optimizer_state']}")
    idx, targets = batch_of(model, 2, 8)
    graph_bytes = graph_saved_bytes(model(idx, targets=targets)[1])
    assert adamw["activations"] == graph_bytes, (
        f"activations are graph_saved_bytes of the loss of one forward pass: {graph_bytes} bytes, got "
        f"{adamw['activations']}" + (": the loss's own bytes. The activations are what the graph behind the loss keeps "
                                     "for the backward pass, graph_saved_bytes(loss)" if adamw["activations"] <= 8 else ""))
    assert adamw["backward_working"] == backward_working_bytes(model(idx, targets=targets)[1]), \
        "backward_working is backward_working_bytes of the loss of one forward pass"
    five = sum(v for k, v in adamw.items() if k != "total")
    left_out = [k for k in adamw if k != "total" and adamw["total"] == five - adamw[k] != five]
    assert adamw["total"] == five, (
        f"total is the sum of the five parts ({five}), got {adamw['total']}"
        + (f": {left_out[0]} is left out of the total" if left_out else ""))
    print("✓ training_memory: parameters, gradients, AdamW 2× / SGD 0× / momentum 1×, activations, backward, total")


test_unit_training_memory()

# %% [markdown]
# `backward_working_bytes` on a graph small enough to follow by hand: `x` (1,000 float32
# numbers, a leaf that needs a gradient), `y = x * 2`, `loss = y.sum()`. The walk meets the
# `sum` first: waiting are the loss's own gradient (4 bytes) and its rule returns `y`'s
# (4,000 bytes): 4,004. Then the `mul`: `y`'s gradient waits (4,000) and its rule returns `x`'s
# (4,000): 8,000, the largest. Then the leaf `x`: 4,000.

# %%
x = Tensor(np.ones(1000, dtype=np.float32), requires_grad=True)
print("backward working memory of (x * 2).sum():", backward_working_bytes((x * 2).sum()), "bytes")

# %% [markdown]
# ### Predict, then run: the prediction against the measured peak
#
# `peak_memory` runs a function under `tracemalloc` and reports the most memory NumPy (and
# Python) held at any moment. The function below builds the model and the optimizer and
# runs two training steps — the second one is a steady step: the optimizer's state exists,
# the previous step's gradients were released by `zero_grad()`. Everything it holds is
# counted: nothing was allocated before it started. Each step is a function call of its
# own, so its loss — and the graph behind it — is dropped when the step returns. (A loop
# that writes `_, loss = model(...)` keeps the previous step's loss, and its whole graph,
# alive until the new forward pass has finished: two graphs at once.)
#
# Two GPTs of width 64 at `T = 128`, one with 2 blocks and one with 8. Predict: will the
# measured peak be above or below the sum of the first four parts? And with the backward
# working memory added? Will the depth change that? Then run.

# %%
def measured_training_peak(make_model: Callable, batch: int, length: int) -> int:
    """peak_memory of: build the model and AdamW, then two training steps on one random batch."""
    def run():
        model = make_model()
        optimizer = AdamW(model.parameters(), lr=1e-3)
        idx, targets = batch_of(model, batch, length)

        def step():  # the loss and its graph die when the step returns
            optimizer.zero_grad()
            _, loss = model(idx, targets=targets)
            loss.backward()
            optimizer.step()
        step()
        step()
    return peak_memory(run)


print(f"{'blocks':>6} | {'params':>7} | {'grads':>7} | {'AdamW':>7} | {'activ.':>7} | {'4 parts':>7} | "
      f"{'backward':>8} | {'predicted':>9} | {'measured':>8} | measured / 4 parts | measured / predicted")
for depth in (2, 8):
    make_gpt = lambda: GPT(65, 64, depth, 4, 128, seed=0)
    model = make_gpt()
    parts = training_memory(model, AdamW(model.parameters()), (4, 128))
    measured = measured_training_peak(make_gpt, 4, 128)
    four = parts["total"] - parts["backward_working"]
    mib = [parts[k] / 2**20 for k in ("parameters", "gradients", "optimizer_state", "activations")]
    print(f"{depth:6d} | " + " | ".join(f"{v:7.2f}" for v in mib) + f" | {four / 2**20:7.2f} | "
          f"{parts['backward_working'] / 2**20:8.2f} | {parts['total'] / 2**20:9.2f} | {measured / 2**20:8.2f} | "
          f"{measured / four:18.3f} | {measured / parts['total']:.3f}   (MiB)")

# %% [markdown]
# The measured peak is clearly **above** the first four parts: they are all alive at the end
# of `backward()`, and the backward pass needs working memory on top. While a rule runs, the
# engine holds the gradients still on their way down (the residual stream's, the rule's own,
# the weights' gradients waiting for their turn) — about one block's worth, so it matters
# most for a shallow model. Adding `backward_working_bytes` brings the prediction within a
# few percent of the measurement at both depths; what is left is what the rules make inside
# themselves (GELU's rule, for instance, builds a few arrays of its `B·T·4E` input). (PyTorch
# frees each op's saved arrays as soon as its backward has run, so its peak usually comes at
# the *start* of the backward pass; our engine keeps the whole graph until the loss is
# dropped.) `benchmarks/memory.py` makes the same comparison at the milestone's size.
#
# ## 2. The KV cache's bytes
#
# Module 13's cache keeps, for every layer and every sequence of the batch, a key and a value
# (the 2) of `d = heads · head_dim` numbers per position, for `T` positions:
#
# $$\text{bytes} = 2 \cdot \text{layers} \cdot B \cdot T \cdot d \cdot \text{itemsize}$$
#
# Write `kv_cache_bytes`; the test compares it with what `GPT.make_cache` really allocates,
# read from its arrays and measured with `peak_memory`.

# %%
#| export
def kv_cache_bytes(num_layers: int, batch: int, seq_len: int, embed_dim: int, dtype: Any = np.float32) -> int:
    """Bytes of a KV cache: 2 · num_layers · batch · seq_len · embed_dim · itemsize.

    A key and a value (2) of embed_dim = heads · head_dim numbers per position, for seq_len
    positions, batch sequences and num_layers layers. dtype: a NumPy dtype or its name (its
    itemsize: float32 4, float16 2). Returns a Python int. ValueError for a size below 1.
    """
    for name, value in (("num_layers", num_layers), ("batch", batch), ("seq_len", seq_len), ("embed_dim", embed_dim)):
        if as_int(value, f"kv_cache_bytes: {name}") < 1:  # a count: 2.5 and inf are refused too
            raise ValueError(f"kv_cache_bytes: {name} must be >= 1, got {value}.")
    itemsize = np.dtype(dtype).itemsize
    ### BEGIN SOLUTION
    return 2 * int(num_layers) * int(batch) * int(seq_len) * int(embed_dim) * itemsize
    ### END SOLUTION


# %%
def kv_cache_mistake(got: int, num_layers: int, batch: int, seq_len: int, embed_dim: int, itemsize: int) -> str:
    """Why `got` is not the KV cache's bytes: the classic mistake that gives exactly this number, if one does."""
    for cause, wrong in (
            ("count a key AND a value (the factor 2) for every position", num_layers * batch * seq_len * embed_dim * itemsize),
            ("multiply by num_layers: every layer keeps its own keys and values", 2 * batch * seq_len * embed_dim * itemsize),
            ("multiply by batch: every sequence of the batch keeps its own keys and values",
             2 * num_layers * seq_len * embed_dim * itemsize),
            ("multiply by the dtype's itemsize (np.dtype(dtype).itemsize: float32 4, float16 2): bytes, not numbers",
             2 * num_layers * batch * seq_len * embed_dim)):
        if got == wrong:
            return f"it matches a known mistake: {cause}"
    return "it matches no classic mistake: compare your formula with 2 · num_layers · batch · seq_len · embed_dim · itemsize"


def test_unit_kv_cache_bytes():
    for args, expected, what in (((1, 1, 1, 1, "float32"), 8, "one layer, one token, one number in float32"),
                                 ((12, 1, 1024, 768, "float32"), 75_497_472,
                                  "GPT-2 small at T=1024 in float32 (2·12·1024·768·4 bytes, 72 MiB)"),
                                 ((3, 5, 2, 4, "float16"), 480, "3 layers, 5 sequences of 2 tokens, 4 numbers, float16")):
        got = returned(kv_cache_bytes(*args), f"kv_cache_bytes{args}", (int, np.integer))
        assert got == expected, (f"kv_cache_bytes{args}, {what}: expected {expected} bytes, got {got}: "
                                 + kv_cache_mistake(got, *args[:4], np.dtype(args[4]).itemsize))
    for dtype in (np.float32, np.float16, np.float64):
        model = GPT(11, 16, 3, 2, 10, seed=0, dtype=dtype)
        cache = model.make_cache(4)
        expected = kv_cache_bytes(3, 4, 10, 16, dtype)
        allocated = sum(a.nbytes for layer in cache.layers for a in (layer.keys, layer.values))
        assert expected == allocated, \
            f"{np.dtype(dtype).name}: the cache allocates {allocated} bytes, kv_cache_bytes says {expected} (the factor 2? the layers?)"
    measured = peak_memory(lambda: model.make_cache(4))
    assert expected <= measured <= expected * 1.05 + 4096, f"measured {measured} bytes against {expected}"
    print("✓ kv_cache_bytes: equals the arrays module 13's cache allocates, and the measured peak")


test_unit_kv_cache_bytes()

# %%
for name, layers, d, T, dtype in (("the milestone's GPT", 4, 128, 64, np.float32),
                                  ("GPT-2 small", 12, 768, 1024, np.float32),
                                  ("Llama-2-7B", 32, 4096, 4096, np.float16)):
    print(f"{name:20s} T={T:5d} {np.dtype(dtype).name}: {kv_cache_bytes(layers, 1, T, d, dtype) / 2**20:9,.2f} MiB per sequence")

# %% [markdown]
# ## 3. Keep or recompute: activation checkpointing
#
# Everything the forward pass saves, it saves for one reason: the backward pass needs it.
# But a saved array is only a shortcut — the backward pass could compute it again from the
# layer's input. **Activation checkpointing** (Chen et al., 2016, "Training Deep Nets with
# Sublinear Memory Cost"; `torch.utils.checkpoint`) keeps, for a chosen piece of the
# network, only the piece's *inputs*, and runs the piece a second time during the backward
# pass to rebuild what its backward needs:
#
# * **forward:** run `fn(x)` with the graph switched off: its intermediate arrays are freed
#   as soon as they are used, only `x` (and the output) stay;
# * **backward:** when the gradient reaches the piece's output, run `fn(x)` again, this
#   time recording a small graph of `fn` alone, back-propagate the gradient through it, and
#   hand the gradient of `x` on to the rest of the network.
#
# With a GPT of `L` blocks each checkpointed, the graph holds `L` block inputs (`B·T·E`
# each) plus, during the backward pass, **one** block's graph at a time — instead of all
# `L` graphs. The price is one more forward pass of every block: a forward is about a third
# of a training step's work, so expect up to about a third more time.
#
# ### One recorded op
#
# Our engine has one backward rule per op. So `checkpoint(fn, *inputs)` records **one** op,
# `"checkpoint"`, whose rule does the recomputation. What are its inputs? The obvious answer,
# the tensors among `inputs`, is not enough: a block reads its own weights too, and they need
# gradients. PyTorch's `checkpoint` lets autograd find them through the recomputed graph. In
# our engine a rule returns one gradient per recorded input, so **the parameters `fn` reads
# are inputs of the op as well**: `node.inputs = (tensor arguments…, parameters…)`, and the
# rule returns their gradients like any other rule's. When `fn` is a `Module` (or a bound
# method of one) they are its `parameters()`; a plain function names them with
# `params=[...]` (or `params=module`). A rule that wrote into the weights' `.grad` itself
# would also "work" — but then two mechanisms would deliver gradients, and the engine's
# promises (one rule per op, each returning its inputs' gradients) would no longer describe
# what happens. To keep the small backward from writing into the real weights' `.grad`, the
# rule sets their `.grad` aside while it runs and reads the result off them.
#
# Three more details make the gradients **identical** to the plain call, bit for bit:
#
# * **Detached inputs.** The rule runs `fn` on *detached copies* of the tensor arguments
#   (same array, `requires_grad` as the original, no history): the small backward must stop
#   at them. On the original tensors it would run on into the rest of the network, which
#   the engine is already walking.
# * **Gradients on.** The recomputation must record its graph even when `backward()` was
#   called with recording off: `enable_grad()` (given) switches it on for a block.
# * **The same random numbers.** Dropout draws a new mask every call. The forward saves the
#   state of every random generator `fn` uses (`generator.bit_generator.state`; for a Module,
#   `random_generators(module)`), the rule puts those states back before recomputing — the
#   same masks — and afterwards restores the states the generators had *before the rule
#   ran*, so the rest of training draws exactly what it would have drawn without
#   checkpointing (PyTorch's `preserve_rng_state=True`).
#
# Two more things a PyTorch user expects, both given:
#
# * **Closures.** `checkpoint(lambda z: mlp(z), x)` names no parameters: `mlp`'s weights are
#   read from the closure. PyTorch's autograd finds them in the recomputed graph; our rule
#   must list them as inputs *before* the backward. So the forward runs `fn` inside
#   `tensors_read(known)`, which listens to the engine (`OP_LISTENERS`, module 01) and
#   collects every leaf tensor requiring a gradient that an op reads and that is not already
#   known: those are parameters too.
# * **NumPy's global generator.** A function may draw from `np.random` itself
#   (`np.random.rand`, `np.random.normal`): `GLOBAL_NUMPY_RANDOM` stands for that generator
#   with the same `.bit_generator.state` as a Generator, and every checkpoint saves and
#   restores it, as `preserve_rng_state` does. Generators a closure holds (a `Dropout` in
#   `mlp`) are found by `checkpoint_parts` too. So is mixed precision's switch (section 5's
#   `autocast`): `AUTOCAST_SETTING` is replayed like a generator, so a forward under `autocast`
#   is recomputed in float16 even when `backward()` runs outside the `with` block.
#
# `checkpoint_parts(fn, params)` (given) finds the parameters and generators;
# `check_recomputed_leaves(out, known, summary)` (given) refuses a recomputed graph that
# reaches a tensor requiring a gradient that is neither a copy nor a parameter (its gradient
# would be lost), and a recomputed output whose `output_summary` (sum and sum of squares, saved
# by the forward) differs from the forward's: `fn` drew random numbers from a generator
# nobody restored, and its gradients would belong to other numbers.

# %%
#| export
@contextlib.contextmanager
def enable_grad() -> Iterator[None]:
    """Record the graph inside, whatever the mode outside; the previous mode comes back on exit."""
    previous = GradMode.enabled
    GradMode.enabled = True
    try:
        yield
    finally:
        GradMode.enabled = previous


class _GlobalNumpyRandom:
    """NumPy's global generator (np.random.rand, np.random.normal, ...) with a Generator's interface
    for its state: `.bit_generator.state` reads np.random.get_state() and assigning it calls
    np.random.set_state() (the whole legacy state, its cached Gaussian included)."""

    @property
    def bit_generator(self) -> "_GlobalNumpyRandom":
        return self

    @property
    def state(self) -> tuple:
        """np.random.get_state() with its key array as a tuple, so that two states compare with ==."""
        name, key, pos, has_gauss, gauss = np.random.get_state()
        return name, tuple(key.tolist()), pos, has_gauss, gauss

    @state.setter
    def state(self, value: tuple) -> None:
        name, key, pos, has_gauss, gauss = value
        np.random.set_state((name, np.array(key, dtype=np.uint32), pos, has_gauss, gauss))

    def __repr__(self) -> str:
        return "GLOBAL_NUMPY_RANDOM"


GLOBAL_NUMPY_RANDOM = _GlobalNumpyRandom()


class _AutocastSetting:
    """Mixed precision's switch (Autocast.dtype, set by `autocast()` below) with the same interface for
    its state: checkpoint replays it like a generator, so the recomputation runs in the forward's
    precision even when backward() runs outside `with autocast():` (torch.utils.checkpoint re-enters
    the forward's autocast too); float32 recomputed products would differ from the float16 ones."""

    @property
    def bit_generator(self) -> "_AutocastSetting":
        return self

    @property
    def state(self) -> Any:
        return Autocast.dtype

    @state.setter
    def state(self, value: Any) -> None:
        Autocast.dtype = value

    def __repr__(self) -> str:
        return "AUTOCAST_SETTING"


AUTOCAST_SETTING = _AutocastSetting()


def _closure_values(fn: Callable) -> list:
    """What fn reads from outside by name: its closure's cells and the globals its code names
    (`lambda z: mlp(z)` finds mlp either way)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    values = []
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a closure variable not assigned yet
            pass
    names = getattr(fn, "__globals__", {})
    return values + [names[n] for n in code.co_names if n in names]


def checkpoint_parts(fn: Callable, params: Any = None) -> tuple[list, list]:
    """(parameters, generators) that checkpoint(fn, ..., params=params) must know about.

    params None   -- fn's own when fn is a Module or a bound method of one (`block.forward`),
                     else none (a closure's weights are found while fn runs: tensors_read)
    params Module -- its parameters() and random_generators(params)
    params list   -- those Tensors
    Each parameter once (by identity), in order. Generators: the Module's, then those of Modules
    (and bare Generators) that a function reads from outside, then GLOBAL_NUMPY_RANDOM, then
    AUTOCAST_SETTING (mixed precision on or off: replayed the same way).
    """
    owner = params if params is not None else (fn if isinstance(fn, Module) else getattr(fn, "__self__", None))
    outside = [v for v in _closure_values(fn) if isinstance(v, (Module, np.random.Generator))]
    generators = []
    for holder in ([owner] if isinstance(owner, Module) else []) + outside:
        for g in [holder] if isinstance(holder, np.random.Generator) else random_generators(holder):
            if all(g is not known for known in generators):
                generators.append(g)
    generators += [GLOBAL_NUMPY_RANDOM, AUTOCAST_SETTING]
    if isinstance(owner, Module):
        return owner.parameters(), generators
    if params is None:
        return [], generators
    if isinstance(params, Tensor) or not all(isinstance(p, Tensor) for p in params):
        raise TypeError("checkpoint: params must be a Module or a list of Tensors (the tensors fn reads "
                        "besides its inputs).")
    unique = {id(p): p for p in params}
    return list(unique.values()), generators


class _LeafReader:
    """An engine listener (OP_LISTENERS) collecting the leaf tensors requiring a gradient that ops read."""

    def __init__(self, known: Iterable[Tensor]):
        self.seen = {id(t) for t in known}
        self.found: list = []

    def op_recorded(self, op: str, out: Tensor, inputs: tuple, saved: dict) -> None:
        for t in inputs:
            if t.requires_grad and t._node is None and id(t) not in self.seen:
                self.seen.add(id(t))
                self.found.append(t)

    def rule_started(self, node: Any, grad: Any) -> None:
        pass

    def rule_finished(self, node: Any, grad: Any, grads: Any) -> None:
        pass


@contextlib.contextmanager
def tensors_read(known: Iterable[Tensor]) -> Iterator[list]:
    """`with tensors_read(known) as read:` -- afterwards `read` lists, in the order first read, every
    leaf tensor requiring a gradient that an op inside read and that is not in `known`: the weights a
    closure reads (also with recording off)."""
    reader = _LeafReader(known)
    OP_LISTENERS.append(reader)
    try:
        yield reader.found
    finally:
        OP_LISTENERS.remove(reader)


def output_summary(array: Any) -> tuple[float, float]:
    """(sum, sum of squares) of an output array, in float64: what the forward keeps to recognise its output."""
    xp = array_module(array)
    wide = array.astype(np.float64)
    return float(xp.sum(wide)), float(xp.sum(wide * wide))


def check_recomputed_leaves(out: Tensor, known: list, summary: tuple | None = None) -> None:
    """RuntimeError when `out` records no graph (fn was recomputed with recording off), when
    the graph behind it reaches a tensor that requires a gradient, was made by no op, and is not
    in `known` (the detached copies and the parameters), or when `summary` (the forward's
    output_summary) differs from the recomputed output's: fn drew other random numbers."""
    if not out.requires_grad:
        raise RuntimeError("checkpoint: the recomputed output records no graph, so nothing can be back-propagated "
                           "through it: run fn inside enable_grad() in the backward rule (recording may be off, "
                           "or switched off, while backward() runs).")
    known_ids = {id(t) for t in known}
    strays = [t for t in topological_order(out) if t._node is None and t.requires_grad and id(t) not in known_ids]
    if strays:
        shapes = ", ".join(str(t.shape) for t in strays[:4])
        raise RuntimeError(
            f"checkpoint: fn reads {len(strays)} tensor(s) that require gradients but are neither its "
            f"inputs nor its params (shapes {shapes}); their gradients would be lost. Pass them: "
            "checkpoint(fn, *inputs, params=[...]) or params=<the Module that holds them>."
        )
    if summary is not None:
        again = output_summary(out.data)
        if not np.allclose(again, summary, rtol=1e-6, atol=1e-12, equal_nan=True):
            raise RuntimeError(
                "checkpoint: recomputing fn gave other values than the forward (sum and sum of squares "
                f"{summary} then, {again} now), so its gradients would belong to other numbers. Either the rule "
                "does not restore the saved generator states before recomputing (dropout draws another mask), "
                "or fn draws from a random generator checkpoint does not know (it restores NumPy's global one, "
                "the Module's own, and those of Modules or Generators fn names itself): pass params=<the Module "
                "that holds it>, or name the generator in fn."
            )


def _one_tensor(result: Any) -> Tensor:
    """`result` when it is a Tensor; TypeError otherwise (checkpoint records one output)."""
    if not isinstance(result, Tensor):
        raise TypeError(f"checkpoint: fn must return one Tensor, got {type(result).__name__}; "
                        "wrap it, e.g. checkpoint(lambda x: fn(x)[0], x).")
    return result


def checkpoint(fn: Callable, *inputs: Any, params: Any = None) -> Tensor:
    """fn(*inputs), keeping only the inputs: fn runs again during backward.

    fn     -- a function or Module of `inputs` that returns one Tensor
    inputs -- its arguments: Tensors (gradients flow to them) and anything else (passed as is)
    params -- what fn reads besides its inputs (see checkpoint_parts): None for a Module fn
    Returns a Tensor with the values of fn(*inputs). When recording is on and an input or a
    parameter requires a gradient (else: fn(*inputs) itself, given):
      * save [(generator, generator.bit_generator.state)] for every generator, BEFORE fn runs;
      * run fn(*inputs) under no_grad(), so it records nothing, and inside
        `tensors_read(tensors + tuple(parameters)) as read` (given): the weights fn reads from a
        closure are parameters too, `parameters = [*parameters, *read]`; check its result with
        _one_tensor (TypeError unless it is one Tensor);
      * record op "checkpoint" with data = the result's array, inputs = the Tensor arguments
        in order followed by the parameters, and saved:
            fn         -- fn itself
            args       -- the inputs tuple as given (non-Tensors included)
            num_args   -- how many Tensor arguments come first in node.inputs
            rng_states -- the list of (generator, state) pairs
            summary    -- output_summary(the result's array) (given), which the rule checks
    """
    parameters, generators = checkpoint_parts(fn, params)
    tensors = tuple(x for x in inputs if isinstance(x, Tensor))
    if not GradMode.enabled or not any(t.requires_grad for t in (*tensors, *parameters)):
        return fn(*inputs)
    ### BEGIN SOLUTION
    rng_states = [(generator, generator.bit_generator.state) for generator in generators]
    with no_grad(), tensors_read(tensors + tuple(parameters)) as read:
        out = _one_tensor(fn(*inputs))
    parameters = [*parameters, *read]
    return record_op("checkpoint", out.data, tensors + tuple(parameters), fn=fn, args=inputs,
                     num_args=len(tensors), rng_states=rng_states, summary=output_summary(out.data))
    ### END SOLUTION


@register_backward("checkpoint")
def checkpoint_backward(grad: Any, node) -> tuple:
    """Gradients of "checkpoint": run fn again with the graph on, and back-propagate `grad` through it.

    1. Remember each saved generator's current state, then set it to its saved state (the
       same dropout masks as the forward).
    2. A detached copy of each Tensor argument, Tensor(x.data, requires_grad=x.requires_grad),
       in the argument list (non-Tensors as they were); out = fn(*arguments) inside enable_grad().
    3. check_recomputed_leaves(out, copies + parameters, node.saved["summary"]).
    4. Set each parameter's .grad aside (.grad = None), backward(out, grad), read the copies'
       and the parameters' .grad (.data, or None when none arrived).
    5. Always (try/finally): put the parameters' .grad back and each generator back to the
       state remembered in step 1.
    Returns one array (or None) per node.inputs: the copies' gradients, then the parameters'.
    """
    fn, args, num_args, rng_states = (node.saved[k] for k in ("fn", "args", "num_args", "rng_states"))
    parameters = node.inputs[num_args:]
    ### BEGIN SOLUTION
    now = [generator.bit_generator.state for generator, _ in rng_states]
    set_aside = [p.grad for p in parameters]
    copies, arguments = [], []
    for a in args:
        if isinstance(a, Tensor):
            a = Tensor(a.data, requires_grad=a.requires_grad)
            copies.append(a)
        arguments.append(a)
    try:
        for generator, state in rng_states:
            generator.bit_generator.state = state
        with enable_grad():
            out = _one_tensor(fn(*arguments))
        check_recomputed_leaves(out, copies + list(parameters), node.saved["summary"])
        for p in parameters:
            p.grad = None
        backward(out, grad)
        grads = [None if t.grad is None else t.grad.data for t in (*copies, *parameters)]
    finally:
        for p, kept in zip(parameters, set_aside):
            p.grad = kept
        for (generator, _), state in zip(rng_states, now):
            generator.bit_generator.state = state
    return tuple(grads)
    ### END SOLUTION


# %% [markdown]
# A first check on a small function with a weight, a GELU and dropout: the value, the graph
# it leaves behind, and the gradients against the plain call, with `np.array_equal` — not
# "close", **equal**. Recomputing runs the very same operations on the very same numbers, so
# anything but equality is a bug.

# %%
from tinytorch.core.activations import gelu
from tinytorch.core.layers import Dropout, Linear
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck


class TinyPiece(Module):
    """x -> dropout(gelu(x @ W1)) @ W2 + x: a stand-in for a block, with a weight, GELU and dropout."""

    def __init__(self, width: int = 8, p: float = 0.25, seed: int = 0, dtype=np.float32):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc = Linear(width, 4 * width, rng=rng, dtype=dtype)
        self.proj = Linear(4 * width, width, rng=rng, dtype=dtype)
        self.drop = Dropout(p, rng=rng)

    def forward(self, x):
        return self.proj(self.drop(gelu(self.fc(x)))) + x


def gradients(piece: TinyPiece, x: np.ndarray, use_checkpoint: bool) -> list:
    """[dx, then every parameter's gradient] of sum(piece(x)²), with or without checkpoint."""
    piece.zero_grad()
    xt = Tensor(x, requires_grad=True)
    out = checkpoint(piece, xt) if use_checkpoint else piece(xt)
    (out * out).sum().backward()
    return [xt.grad.numpy()] + [p.grad.numpy() for p in piece.parameters()]


def test_unit_checkpoint():
    piece = TinyPiece()
    generators = random_generators(piece) + [GLOBAL_NUMPY_RANDOM, AUTOCAST_SETTING]  # np.random, mixed precision
    x = np.random.default_rng(1).standard_normal((3, 5, 8)).astype(np.float32)
    with generators_kept(generators):
        plain = piece(Tensor(x))
    started = [g.bit_generator.state for g in generators]
    out = returned(checkpoint(piece, Tensor(x, requires_grad=True)), "checkpoint(piece, x)", Tensor)
    assert np.array_equal(out.numpy(), plain.numpy()), "checkpoint must return the value of fn(*inputs)"
    assert out._node is not None and out._node.op == "checkpoint", "record ONE op named 'checkpoint'"
    kept = [t for t in topological_order(out) if t is not out]
    assert all(t._node is None for t in kept), \
        "the forward kept intermediate results: run fn under no_grad() so only the inputs are kept"
    assert len(out._node.inputs) == 1 + len(piece.parameters()), (
        f"node.inputs: the tensor argument, then fn's {len(piece.parameters())} parameters; got {len(out._node.inputs)}"
        + (": only the tensor argument, but the weights of a checkpointed Module are inputs of the op too "
           "(inputs = tensors + tuple(parameters)), so that the rule can return their gradients"
           if len(out._node.inputs) == 1 else ""))
    saved = [state for _, state in out._node.saved.get("rng_states", [])]
    assert saved == started, (
        "saved rng_states: expected the states the generators had when checkpoint was called, got "
        + ("the states they have after fn ran (fn's dropout had drawn its mask already): save each generator's "
           "state BEFORE running fn, so the recomputation draws the same mask"
           if saved == [g.bit_generator.state for g in generators] else f"{len(saved)} other state(s)"))
    x_leaf = Tensor(x, requires_grad=True)
    with generators_kept(generators):
        node = checkpoint(piece, x_leaf)._node
        try:
            BACKWARD_RULES["checkpoint"](np.ones(x.shape, np.float32), node)
        except RuntimeError as err:
            if "without a gradient" not in str(err):
                raise
            raise AssertionError(
                f"the checkpoint rule called backward on the recomputed output (shape {x.shape}) without a gradient "
                f"({err}): back-propagate the gradient the rule received, backward(out, grad)") from None
    assert x_leaf.grad is None, (
        "calling the checkpoint rule wrote a gradient into the original input's .grad (the engine hands the "
        "rule's result on itself): the small backward ran on into the graph the engine is walking. "
        "Recompute fn on DETACHED copies: Tensor(x.data, requires_grad=x.requires_grad)")
    for step in range(2):  # twice: the second call shows whether the generators were put back
        with generators_kept(random_generators(piece)):
            reference = gradients(piece, x, use_checkpoint=False)
        ours = gradients(piece, x, use_checkpoint=True)
        names = ["x"] + [name for name, _ in piece.named_parameters()]
        for name, a, b in zip(names, reference, ours):
            assert np.array_equal(a, b), (
                f"call {step + 1}: the gradient of {name} differs from the plain call (max |diff| "
                f"{np.abs(a - b).max():.2e}): "
                + ("it is twice the plain call's: the weights' gradients were counted twice. The rule sets each "
                   "parameter's .grad aside for its small backward: put it back in `finally` (the engine adds the "
                   "gradients the rule returns itself)" if name != "x" and np.allclose(b, 2 * a) else
                   "the first call was right: after recomputing, put each generator back to the state it had before "
                   "the rule ran (this call's dropout must draw what the plain call draws)" if step else
                   "restore the saved generator states before recomputing (dropout must draw the same mask)"))
    small_piece = TinyPiece(4, p=0.0, seed=2, dtype=np.float64)
    gradcheck(lambda x: checkpoint(small_piece, x),  # raises, naming the input and the element, when wrong
              [Tensor(np.random.default_rng(3).standard_normal((2, 4)), requires_grad=True)])
    print("✓ checkpoint: the value, one op keeping only its inputs, gradients equal to the plain call "
          "(dropout included), gradcheck")


test_unit_checkpoint()

# %% [markdown]
# What does `checkpoint` keep? Compare the graph of the plain call with the checkpointed one
# on a bigger input:

# %%
wide = TinyPiece(64, p=0.0)
x_big = Tensor(np.random.default_rng(4).standard_normal((16, 128, 64)).astype(np.float32), requires_grad=True)
plain_out, kept_out = wide(x_big), checkpoint(wide, x_big)
print(f"plain call:   {graph_saved_bytes(plain_out) / 2**20:5.2f} MiB held by the graph")
print(f"checkpointed: {graph_saved_bytes(kept_out) / 2**20:5.2f} MiB held by the graph "
      f"(the input is {x_big.data.nbytes / 2**20:.2f} MiB)")

# %% [markdown]
# ## 4. Checkpointing every block of a GPT
#
# A later module never edits an earlier module's classes. To make a GPT checkpoint its
# blocks we **replace** each entry of `gpt.blocks` (a `ModuleList`) by a small wrapper,
# `CheckpointedBlock`, whose forward calls `checkpoint(self.block, x)`. Two decisions:
#
# * **Same model, same weights.** `checkpoint_blocks(model)` changes the model *in place*
#   and returns it: the wrapper holds the very same block, so the parameter tensors are the
#   same objects and an optimizer made before still updates them.
# * **The same names.** The wrapper registers the block's own sub-modules under the block's
#   own names (`ln1`, `attn`, `ln2`, `mlp`, `dropout`), and keeps the block itself in an
#   attribute that is not registered (`.block`). So `named_parameters()` and `state_dict()`
#   keep their keys (`blocks.0.ln1.weight`, …): a checkpoint saved by a plain GPT loads into
#   a checkpointed one and back.
#
# With a KV cache (generation) there is nothing to back-propagate: the wrapper calls the
# block directly.

# %%
#| export
class CheckpointedBlock(Module):
    """A TransformerBlock that runs under `checkpoint` while training.

    Registers the block's parameters, sub-modules and buffers under the block's own names, so
    the parameter names and state_dict keys are the block's (blocks.0.ln1.weight, ...);
    `.block` is the block itself (not registered a second time). train()/eval() reach it too.
    forward(x (B, T, E), cache=None) -> (B, T, E).
    """

    def __init__(self, block: Module):
        super().__init__()
        for name in block._registry("_param_names"):
            setattr(self, name, block.__dict__[name])
        for name in block._registry("_child_names"):
            setattr(self, name, block.__dict__[name])
        for name in block._registry("_buffer_names"):
            self.register_buffer(name, block.__dict__[name])
        object.__setattr__(self, "block", block)  # not a child: its modules are registered above

    def train(self, mode: bool = True) -> "CheckpointedBlock":
        super().train(mode)
        self.block.training = bool(mode)
        return self

    def forward(self, x: Any, cache: Any = None) -> Tensor:
        """With a cache: self.block(x, cache=cache) (generation: nothing to keep). Otherwise:
        checkpoint(self.block, x)."""
        ### BEGIN SOLUTION
        if cache is not None:
            return self.block(x, cache=cache)
        return checkpoint(self.block, x)
        ### END SOLUTION


def checkpoint_blocks(model: Any) -> Any:
    """`model` with every TransformerBlock of `model.blocks` replaced by CheckpointedBlock(block).

    In place: the same model object and the same parameter tensors (an optimizer made before
    still holds them); blocks that are already wrapped stay as they are. Returns `model`.
    Raises TypeError when `model.blocks` is not a ModuleList.
    """
    if not isinstance(getattr(model, "blocks", None), ModuleList):
        raise TypeError(f"checkpoint_blocks: {type(model).__name__} has no ModuleList `blocks` "
                        "(module 13's GPT keeps its TransformerBlocks there).")
    ### BEGIN SOLUTION
    for i, block in enumerate(model.blocks):
        if isinstance(block, TransformerBlock):
            model.blocks[i] = CheckpointedBlock(block)
    return model
    ### END SOLUTION


# %%
def gpt_gradients(model: GPT, idx, targets) -> list:
    model.zero_grad()
    _, loss = model(idx, targets=targets)
    loss.backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_unit_checkpoint_blocks():
    plain = GPT(17, 16, 3, 2, 12, dropout=0.1, seed=0)
    kept = GPT(17, 16, 3, 2, 12, dropout=0.1, seed=0)
    weights = kept.parameters()
    assert checkpoint_blocks(kept) is kept, "checkpoint_blocks changes the model in place and returns it"
    try:
        with generators_kept(random_generators(kept)):  # the dropout masks drawn here are drawn again below
            returned(kept.blocks[0](Tensor(np.zeros((1, 2, 16), np.float32))), "CheckpointedBlock.forward(x)", Tensor)
    except RecursionError:
        raise AssertionError(
            "a CheckpointedBlock's forward never returned (RecursionError): it runs itself again, checkpoint(self, x) "
            "calls self.forward, which calls checkpoint(self, x), ... Checkpoint the wrapped block: "
            "checkpoint(self.block, x)") from None
    assert all(isinstance(b, CheckpointedBlock) for b in kept.blocks), "every block must be wrapped"
    assert all(a is b for a, b in zip(weights, kept.parameters())), "the same parameter tensors, not copies"
    assert list(kept.state_dict()) == list(plain.state_dict()), "state_dict keys must stay the block's own"
    idx, targets = batch_of(plain, 2, 12)
    for step in range(2):
        a, b = gpt_gradients(plain, idx, targets), gpt_gradients(kept, idx, targets)
        for (name, _), ga, gb in zip(plain.named_parameters(), a, b):
            assert np.array_equal(ga, gb), (
                f"step {step + 1}: {name}'s gradient differs from the plain GPT's"
                + (": after recomputing, put each generator back to the state it had before the rule ran "
                   "(the next step's dropout masks must be the plain run's)" if step else ""))
    with no_grad():
        got, expected = kept.generate(idx[:, :4], 5, seed=0).numpy(), plain.generate(idx[:, :4], 5, seed=0).numpy()
        assert np.array_equal(got, expected), (
            f"generation after checkpoint_blocks gave {got.tolist()}, the plain GPT {expected.tolist()}: the wrapped "
            "blocks must compute exactly what the blocks did (with gradients off, checkpoint just calls fn)")
    print("✓ checkpoint_blocks: in place, same weights and keys, gradients equal with dropout, generation works")


test_unit_checkpoint_blocks()

# %% [markdown]
# ### Predict, then run: memory and time
#
# A GPT of width 64 with 4 blocks, a batch of 4 sequences. Before running: at `T = 64` and
# `T = 256`, what fraction of the peak memory of a training step will checkpointing save?
# How much longer will a step take? (The benchmark, `tito bench memory`, does the same for the
# milestone's GPT at `T = 64, 256, 512`.)

# %%
def training_step(model: GPT, idx, targets) -> Callable[[], None]:
    optimizer = AdamW(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        _, loss = model(idx, targets=targets)
        loss.backward()
        optimizer.step()
    step()  # the optimizer's state exists from here on: every measured step is the same
    return step


print(f"{'T':>4} | {'plain peak':>10} | {'checkpointed':>12} | saved | {'plain step':>10} | {'checkpointed':>12} | time")
for length in (64, 256):
    plain, kept = GPT(65, 64, 4, 4, length, seed=0), checkpoint_blocks(GPT(65, 64, 4, 4, length, seed=0))
    idx, targets = batch_of(plain, 4, length)
    steps = {"plain": training_step(plain, idx, targets), "kept": training_step(kept, idx, targets)}
    peaks = {name: peak_memory(step) for name, step in steps.items()}
    times = {name: measure_latency(step, warmup=1, repeats=3).median_s for name, step in steps.items()}
    print(f"{length:4d} | {peaks['plain'] / 2**20:7.2f} MiB | {peaks['kept'] / 2**20:9.2f} MiB | "
          f"{1 - peaks['kept'] / peaks['plain']:5.0%} | {times['plain'] * 1e3:7.1f} ms | {times['kept'] * 1e3:9.1f} ms | "
          f"{times['kept'] / times['plain'] - 1:+.0%}")

# %% [markdown]
# (The peaks are measured from the start of a step: the weights and AdamW's state were
# allocated before and are not in them.) The saving grows with `T`: the longer the sequence,
# the more of the step's memory is activations, and checkpointing keeps `1/L` of them plus
# one block's worth. The extra time is one more forward pass of every block: at most about a
# third of a step, usually less — the head and the loss are not recomputed, and a step that
# allocates less memory spends less time allocating it. (Three runs on a busy machine are
# noisy; `tito bench memory` interleaves many.)
#
# ## 5. float16: half the bytes, a fraction of the range
#
# A float32 number has 8 exponent bits and 23 fraction bits; float16 has 5 and 10. Half the
# memory and, on a GPU with tensor cores, many times the speed of matrix products — but:

# %%
half = np.finfo(np.float16)
print(f"largest float16: {half.max}; smallest normal: {half.smallest_normal:.3e} (2^-14); "
      f"smallest subnormal: {half.smallest_subnormal:.3e} (2^-24)")
print(f"float16 keeps {half.nmant} fraction bits: 1 + 2^-11 = {np.float16(1) + np.float16(2**-11)}, "
      f"2048 + 1 = {np.float16(2048) + np.float16(1)}")
print("a gradient of 1e-8 in float16:", np.float16(1e-8), "| 3e-5:", np.float16(3e-5), "(subnormal: few digits left)")
with np.errstate(over="ignore"):
    print("the sum of 70,000 ones in float16:", np.ones(70_000, np.float16).sum(dtype=np.float16))

# %% [markdown]
# Three ways float16 goes wrong in training:
#
# * **overflow**: anything above 65,504 is `inf` — a sum over a vocabulary or a batch, an
#   exponential in a softmax, a variance in LayerNorm;
# * **precision**: with 10 fraction bits, adding a small update to a large weight changes
#   nothing (`2048 + 1 = 2048`) — which is why the weights themselves stay float32
#   ("master weights") and only the computation is float16;
# * **underflow**: gradients below `2^-24 ≈ 6·10⁻⁸` become exactly 0, and below `2^-14`
#   they keep fewer and fewer digits. Gradients are often that small.
#
# ## 6. `autocast`: float16 where it is safe, float32 where it is not
#
# Mixed precision (Micikevicius et al., 2018) computes the matrix products — almost all of
# the arithmetic — in float16, and everything that needs range or precision in float32.
# PyTorch's `torch.autocast` decides per operation; ours has one switch, `Autocast` in module
# 01, which every matrix product (`Tensor.matmul`: Linear layers, the GPT's head) and every
# range-hungry operation (softmax, log_softmax, the losses, LayerNorm) already consults, in a
# given line at its top:
#
# | under `autocast()` | computes in | returns |
# |---|---|---|
# | `a @ b` (both floating) | float16: both operands cast down | float16 |
# | softmax, log_softmax, the losses, LayerNorm | float32: a float16 input is cast up | float32 |
# | everything else (`+`, GELU, …) | its inputs' dtype, NumPy's promotion (float16 + float32 is float32) | |
# | attention (`sdpa`) | module 12 computes float16 attention in float32 (both of its products) | its inputs' dtype |
# | `conv2d` (module 09) | its inputs' dtype: its product runs on arrays inside the op, not through `Tensor.matmul` | its inputs' dtype |
#
# Every cast is the recorded op `"cast"`, whose backward rule returns the gradient in the
# input's dtype. So the parameters stay float32, the products see float16 copies of them,
# and the gradients come back through the casts as float32. The context only switches the
# flag; write it.

# %%
#| export
class autocast:
    """`with autocast():` mixed precision — matrix products in float16; softmax, log_softmax,
    the losses and LayerNorm in float32; parameters stay float32 (module 01's Autocast switch).

    dtype   -- "float16" (np.float16 works too): the dtype products compute in
    enabled -- False makes a block without mixed precision, also inside another autocast
    Sets Autocast.dtype on entry (to the dtype, or None when not enabled) and restores the
    previous value on exit, also when the block raises (blocks nest); never swallows an error.
    """

    def __init__(self, dtype: Any = "float16", enabled: bool = True):
        self.dtype = np.dtype(dtype)
        if self.dtype != np.float16:
            raise ValueError(f"autocast: dtype must be float16 (NumPy has no bfloat16), got {self.dtype}.")
        self.enabled = bool(enabled)
        self._previous: list = []

    def __enter__(self) -> "autocast":
        """Push the current Autocast.dtype on self._previous, set the new one, return self."""
        ### BEGIN SOLUTION
        self._previous.append(Autocast.dtype)
        Autocast.dtype = self.dtype if self.enabled else None
        return self
        ### END SOLUTION

    def __exit__(self, *exc_info: Any) -> bool:
        """Pop the previous Autocast.dtype back; return False (an exception propagates)."""
        ### BEGIN SOLUTION
        Autocast.dtype = self._previous.pop()
        return False
        ### END SOLUTION


# %%
from tinytorch.core.activations import softmax
from tinytorch.core.losses import cross_entropy
from tinytorch.core.tensor import Autocast


def test_unit_autocast():
    rng = np.random.default_rng(5)
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((8, 3)).astype(np.float32), requires_grad=True)
    with autocast():
        assert Autocast.dtype == np.float16, "inside autocast() the switch Autocast.dtype is float16"
        logits = x @ w
        probs = softmax(logits)
        loss = cross_entropy(logits, [0, 1, 2, 0])
        with autocast(enabled=False):
            assert Autocast.dtype is None and (x @ w).dtype == np.float32, (
                f"autocast(enabled=False) switches it off inside: Autocast.dtype must be None there, got "
                f"{Autocast.dtype} (set the dtype only when enabled, else None)")
        assert Autocast.dtype == np.float16, (
            f"after leaving an inner autocast(enabled=False), Autocast.dtype should be float16 again, got "
            f"{Autocast.dtype}: leaving an inner autocast must restore the OUTER setting (the one __enter__ "
            "pushed on self._previous), not switch it off")
    assert Autocast.dtype is None, "on exit autocast must restore the previous setting (None: off)"
    assert logits.dtype == np.float16, f"a matrix product under autocast is float16, got {logits.dtype}"
    assert probs.dtype == np.float32 and loss.dtype == np.float32, "softmax and the loss are float32 under autocast"
    expected = (x.numpy().astype(np.float16) @ w.numpy().astype(np.float16))
    assert np.array_equal(logits.numpy(), expected), "the product of the float16 copies"
    loss.backward()
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32, "float32 parameters get float32 gradients"
    assert w.dtype == np.float32, "the parameters themselves stay float32"
    try:
        with autocast():
            raise KeyError("inside")
    except KeyError:
        pass
    else:
        raise AssertionError("autocast swallowed an exception: __exit__ must return False")
    assert Autocast.dtype is None, "after an exception inside autocast, the switch must be off again"
    print("✓ autocast: float16 products, float32 softmax and loss, float32 gradients, nests, restores on errors")


test_unit_autocast()

# %% [markdown]
# ### Predict, then run: is float16 faster here?
#
# On a GPU, float16 products run on tensor cores, several times faster than float32. NumPy
# on a CPU has **no fast float16 product**: BLAS libraries multiply float32 and float64; for
# float16 NumPy falls back to its own loop. Predict the ratio for a 256 × 256 product, then
# run. (`benchmarks/memory.py` measures more sizes, and a GPT step, on the GPU too when there
# is one.)

# %%
for n in (64, 256):
    a32 = np.random.default_rng(6).standard_normal((n, n)).astype(np.float32)
    a16 = a32.astype(np.float16)
    t32 = measure_latency(lambda: a32 @ a32, warmup=1, repeats=5).median_s
    t16 = measure_latency(lambda: a16 @ a16, warmup=1, repeats=3).median_s
    print(f"{n} x {n}: float32 {t32 * 1e3:7.3f} ms, float16 {t16 * 1e3:8.3f} ms — float16 is {t16 / t32:,.0f}x slower on this CPU")

# %% [markdown]
# So on a CPU, mixed precision is a lesson in numerics, not a speed-up: everything below uses
# small models. What it teaches — float16's range, and how to keep gradients inside it — is
# exactly what a GPU run needs.
#
# ## 7. Gradients that vanish in float16
#
# Under `autocast`, the gradient that reaches a matrix product's output is float16 (the
# product's output is float16, and the engine hands every gradient back in its tensor's
# dtype). Gradients of a loss averaged over many tokens are small, and the ones deep in a
# network smaller still. Count them: the same GPT, the same batch, the gradients of every
# weight in float32 and under `autocast`, and the entries that are **exactly zero** under
# autocast but not in float32.

# %%
def gpt_grads(model: GPT, idx, targets, half: bool, scale: float = 1.0) -> dict:
    """{name: gradient} of the loss (times `scale`, divided back out), under autocast when `half`."""
    model.zero_grad()
    with autocast(enabled=half):
        _, loss = model(idx, targets=targets)
        (loss * scale).backward()
    return {name: p.grad.numpy() / np.float32(scale) for name, p in model.named_parameters()}


def underflow_report(reference: dict, grads: dict) -> tuple[int, float]:
    """(entries nonzero in `reference` but exactly 0 in `grads`, relative error of the attention's q/k weights)."""
    lost = sum(int(((reference[n] != 0) & (grads[n] == 0)).sum()) for n in reference)
    qk = [n for n in reference if "q_proj" in n or "k_proj" in n]
    error = np.median([np.abs(grads[n] - reference[n]).sum() / np.abs(reference[n]).sum() for n in qk])
    return lost, float(error)


underflow_model = GPT(65, 32, 2, 4, 64, seed=0, bias=False)
idx, targets = batch_of(underflow_model, 16, 64)
reference = gpt_grads(underflow_model, idx, targets, half=False)
nonzero = sum(int((g != 0).sum()) for g in reference.values())
lost, error = underflow_report(reference, gpt_grads(underflow_model, idx, targets, half=True))
print(f"float32: {nonzero:,} nonzero gradient entries")
print(f"autocast, no scaling: {lost} of them are exactly 0; the q/k weights' gradients are off by {error:.1%}")

# %% [markdown]
# The attention's query and key weights get the smallest gradients (they act through a
# softmax of small scores), and in float16 a good share of what reaches them is subnormal or
# zero: their gradients are visibly wrong. The remedy is as simple as it is effective:
# **multiply the loss by a large number `S`** before `backward()`. Every gradient is then `S`
# times larger and climbs out of the underflow range; divide the weights' gradients by `S`
# (in float32) before the optimizer uses them. With `S = 2^16`:

# %%
lost, error = underflow_report(reference, gpt_grads(underflow_model, idx, targets, half=True, scale=2.0**16))
print(f"autocast, loss x 2^16: {lost} entries lost; the q/k weights' gradients are off by {error:.2%}")

# %% [markdown]
# ## 8. `GradScaler`: a scale that finds itself
#
# Too small a scale and gradients underflow; too large and some overflow to `inf` (and
# `inf − inf` gives NaN). Nobody knows the right scale in advance, and it changes during
# training. **Dynamic loss scaling** starts high and adapts — PyTorch's `torch.amp.GradScaler`,
# whose behaviour we follow exactly:
#
# * `scale(loss)` returns `loss · scale` (in float32: a float16 loss would overflow);
# * `unscale_(optimizer)` multiplies every gradient of the optimizer's parameters by
#   `1/scale` (in place) and records whether any gradient was `inf` or NaN;
# * `step(optimizer)` unscales (unless `unscale_` was called already since the last
#   `update()` — unscaling twice would divide by the scale twice) and then **skips** the
#   optimizer's step when a gradient was not finite: the weights do not change;
# * `update()` adapts the scale: after a skipped step, `scale ← scale · backoff_factor` and
#   the count of good steps goes back to 0; after a good step the count goes up, and when it
#   reaches `growth_interval` the scale grows, `scale ← scale · growth_factor` (unless that
#   would overflow float32), and the count starts again from 0.
#
# The scale is a float32 number (`np.float32`), as PyTorch keeps it, and `1/scale` is
# computed in float64 and rounded to float32. The per-optimizer bookkeeping is given:
# `self._optimizer_state(optimizer)` returns a dict `{"unscaled": bool, "stepped": bool,
# "found_inf": bool}` that lives until the next `update()`.
#
# A typical loop:
#
# ```python
# scaler = GradScaler()
# for idx, targets in batches:
#     optimizer.zero_grad()
#     with autocast():
#         _, loss = model(idx, targets=targets)
#     scaler.scale(loss).backward()
#     scaler.unscale_(optimizer)            # only needed to look at (or clip) true gradients
#     clip_grad_norm(model.parameters(), 1.0)
#     scaler.step(optimizer)                # skipped when a gradient overflowed
#     scaler.update()
# ```

# %%
#| export
class GradScaler:
    """Dynamic loss scaling, step for step as torch.amp.GradScaler.

    init_scale      -- the first scale (2^16)
    growth_factor   -- multiply the scale by it after growth_interval good steps in a row (2.0)
    backoff_factor  -- multiply the scale by it after a step with an inf/NaN gradient (0.5)
    growth_interval -- good steps in a row before the scale grows (2000)
    enabled         -- False: scale() returns the loss, step() just steps, update() does nothing
    Attributes: _scale (np.float32), _growth_tracker (good steps since the last change).
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"GradScaler: enabled must be True or False, got {enabled!r}.")
        self._scale, self.growth_factor, self.backoff_factor, self.growth_interval = self._checked(
            init_scale, growth_factor, backoff_factor, growth_interval, "init_scale")
        self.enabled = bool(enabled)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict] = {}

    @staticmethod
    def _checked(scale: Any, growth_factor: Any, backoff_factor: Any, growth_interval: Any,
                 scale_name: str) -> tuple[np.float32, float, float, int]:
        """The settings as (np.float32 scale, float, float, int); ValueError naming the first one that is not
        a finite number in its range. The scale must be finite and > 0 IN FLOAT32, the dtype it is kept in:
        1e39 is inf there (loss·inf is inf, every step is skipped and inf·0.5 stays inf: training never
        steps), 1e-50 is 0."""
        for name, value in ((scale_name, scale), ("growth_factor", growth_factor), ("backoff_factor", backoff_factor)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(value):
                raise ValueError(f"GradScaler: {name} must be a finite number, got {value!r}.")
        with np.errstate(over="ignore"):
            scale32 = np.float32(scale)
        if not (np.isfinite(scale32) and scale32 > 0):
            raise ValueError(f"GradScaler: {scale_name} must be > 0 and finite in float32 (at most "
                             f"{float(np.finfo(np.float32).max):.4g}), got {scale!r}, which is {scale32} there.")
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}.")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}.")
        interval = as_int(growth_interval, "GradScaler: growth_interval", minimum=1)
        return scale32, float(growth_factor), float(backoff_factor), interval

    def get_scale(self) -> float:
        """The current scale, a Python float (1.0 when disabled)."""
        return float(self._scale) if self.enabled else 1.0

    def _optimizer_state(self, optimizer: Any) -> dict:
        """{"unscaled", "stepped", "found_inf"} for `optimizer` since the last update() (created False)."""
        return self._per_optimizer.setdefault(id(optimizer), {"unscaled": False, "stepped": False, "found_inf": False})

    def scale(self, loss: Tensor) -> Tensor:
        """loss · scale as a recorded op (a "mul" by the Python float of the scale), in float32: a
        float16 loss is cast up first with module 01's cast (the recorded op "cast"); a float32
        or float64 loss is multiplied as it is. The loss itself when disabled (given)."""
        if not self.enabled:
            return loss
        ### BEGIN SOLUTION
        if loss.dtype == np.float16:
            loss = cast(loss, np.float32)
        return loss * float(self._scale)
        ### END SOLUTION

    def unscale_(self, optimizer: Any) -> None:
        """Multiply every existing .grad of optimizer.params by 1/scale (float64 reciprocal
        rounded to float32), in place (keep each gradient's dtype), and set this optimizer's
        "found_inf" when any gradient holds an inf or a NaN; mark it "unscaled".
        RuntimeError when called twice for one optimizer before update(), or after step()."""
        if not self.enabled:
            return
        state = self._optimizer_state(optimizer)
        if state["stepped"]:
            raise RuntimeError("GradScaler.unscale_() is being called after step(); call it before step().")
        if state["unscaled"]:
            raise RuntimeError("GradScaler.unscale_() has already been called on this optimizer since the last "
                               "update(): unscaling twice would divide the gradients by the scale twice.")
        ### BEGIN SOLUTION
        inverse = np.float32(1.0 / float(self._scale))
        found_inf = False
        for p in optimizer.params:
            if p.grad is None:
                continue
            g = p.grad.data
            if not bool(array_module(g).isfinite(g).all()):
                found_inf = True
            g *= inverse.astype(g.dtype)
        state["found_inf"] = found_inf
        state["unscaled"] = True
        ### END SOLUTION

    def step(self, optimizer: Any) -> bool:
        """Unscale (unless unscale_ was already called since the last update()), then
        optimizer.step() unless a gradient was inf or NaN. Returns True when the step was taken.
        RuntimeError when called twice for one optimizer before update()."""
        if not self.enabled:
            optimizer.step()
            return True
        state = self._optimizer_state(optimizer)
        if state["stepped"]:
            raise RuntimeError("GradScaler.step() has already been called since the last update().")
        ### BEGIN SOLUTION
        if not state["unscaled"]:
            self.unscale_(optimizer)
        state["stepped"] = True
        if state["found_inf"]:
            return False
        optimizer.step()
        return True
        ### END SOLUTION

    def update(self) -> None:
        """Adapt the scale after this iteration's step(s), as torch.amp.GradScaler:
        any optimizer found inf/NaN -> scale · backoff_factor, growth tracker 0; otherwise the
        tracker + 1, and when that reaches growth_interval: scale · growth_factor (only if the
        result, in float32, is finite), tracker 0. Each product is computed in float64
        (float(self._scale) * factor) and rounded to np.float32, as PyTorch's kernel does
        (np.float32 * factor would round the factor to float32 first). Then (given) forget
        the per-optimizer states.
        RuntimeError when no step() was made since the last update()."""
        if not self.enabled:
            return
        if not any(state["stepped"] for state in self._per_optimizer.values()):
            raise RuntimeError("GradScaler.update(): no step() since the last update(); call "
                               "scaler.step(optimizer) first (it records whether the gradients were finite).")
        found_inf = any(state["found_inf"] for state in self._per_optimizer.values())
        ### BEGIN SOLUTION
        if found_inf:
            self._scale = np.float32(float(self._scale) * self.backoff_factor)
            self._growth_tracker = 0
        else:
            successful = self._growth_tracker + 1
            if successful == self.growth_interval:
                with np.errstate(over="ignore"):  # a float32 overflow is the case checked next
                    grown = np.float32(float(self._scale) * self.growth_factor)
                if np.isfinite(grown):
                    self._scale = grown
                self._growth_tracker = 0
            else:
                self._growth_tracker = successful
        ### END SOLUTION
        self._per_optimizer = {}

    def state_dict(self) -> dict:
        """The scale and the settings, as plain values (what module 07's checkpoints can store)."""
        return {"scale": float(self._scale), "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        """What state_dict() returned; ValueError naming a missing or bad value, before anything changes."""
        missing = [k for k in ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
                   if k not in state]
        if missing:
            raise ValueError(f"GradScaler.load_state_dict: the state lacks {missing}.")
        checked = self._checked(state["scale"], state["growth_factor"], state["backoff_factor"],
                                state["growth_interval"], "scale")
        tracker = as_int(state["_growth_tracker"], "GradScaler.load_state_dict: _growth_tracker", minimum=0)
        self._scale, self.growth_factor, self.backoff_factor, self.growth_interval = checked
        self._growth_tracker = tracker


# %% [markdown]
# The test scripts the gradients of ten steps — some of them with an `inf` or a NaN — and
# checks the scale after each `update()` and which steps were skipped, against the sequence
# the rules above give by hand (`growth_interval=3`):
#
# | step | gradient | taken? | scale after | good steps in a row |
# |---|---|---|---|---|
# | 1, 2 | finite | yes, yes | 8, 8 | 1, 2 |
# | 3 | finite | yes | 16 (grows) | 0 |
# | 4 | `inf` | **no** | 8 (backs off) | 0 |
# | 5 | NaN | **no** | 4 | 0 |
# | 6, 7, 8 | finite | yes | 4, 4, 8 (grows) | 1, 2, 0 |
# | 9 | finite, then `unscale_` by hand before `step` | yes | 8 | 1 |
# | 10 | `inf` | **no** | 4 | 0 |

# %%
def scripted_gradients(step: int, shape=(3,)) -> np.ndarray:
    """The gradient (before scaling) of step 1..10 of the table: inf at 4 and 10, NaN at 5."""
    g = np.full(shape, 0.5, dtype=np.float32) * step
    if step in (4, 10):
        g[1] = np.inf
    if step == 5:
        g[0] = np.nan
    return g


def scale_sequence(skipped: list, init_scale: float, growth_interval: int, *, count_skipped: bool = False,
                   reset_after_growth: bool = True, back_off: bool = True, divide_to_back_off: bool = False,
                   grow_after_more: bool = False, store_count: bool = True) -> list:
    """The scales after each update() for steps that were `skipped` (True) or good, by the rules
    (factors 2 and 0.5) or with one of the classic mistakes switched on."""
    scale, good_in_a_row, scales = float(init_scale), 0, []
    for skip in skipped:
        if skip and back_off:
            scale = scale / 0.5 if divide_to_back_off else scale * 0.5
        if skip and not count_skipped:
            good_in_a_row = 0
        else:
            count = good_in_a_row + 1
            if (count > growth_interval) if grow_after_more else (count == growth_interval):
                scale *= 2.0
                good_in_a_row = 0 if reset_after_growth else count - 1
            elif store_count:
                good_in_a_row = count
        scales.append(scale)
    return scales


def fresh_scaler_scales(skipped: list, init_scale: float, growth_interval: int) -> list:
    """The scales a new GradScaler (your code) shows after each update() when the steps `skipped` (True) have an
    inf gradient and the others a finite one: the whole sequence, to tell mistakes apart that begin alike."""
    w = Tensor(np.zeros(1, np.float32), requires_grad=True)
    optimizer, scaler, scales = SGD([w], lr=0.0), GradScaler(init_scale=init_scale, growth_interval=growth_interval), []
    for skip in skipped:
        w.grad = Tensor(np.array([np.inf if skip else 1.0], np.float32))
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def scaler_mistake(skipped: list, init_scale: float, growth_interval: int) -> str:
    """Why a GradScaler's scales are wrong for the steps `skipped` (the whole script): the classic update()
    mistake whose scales a new GradScaler of your code reproduces, if one does."""
    try:
        scales = fresh_scaler_scales(skipped, init_scale, growth_interval)
    except Exception as err:  # noqa: BLE001 - the diagnosis must not hide the failure it explains
        return f"(a second GradScaler on the same steps raised {err!r})"
    for cause, switch in (("a skipped step is not a good one: back off and reset the count (_growth_tracker = 0)",
                           {"count_skipped": True}),
                          ("reset the count to 0 after growing: grow only when growth_interval good steps came in a row",
                           {"reset_after_growth": False}),
                          ("a skipped step must back off: scale · backoff_factor", {"back_off": False}),
                          ("the scale went UP after a skipped step: back off by multiplying, scale · backoff_factor "
                           "(0.5), not dividing", {"divide_to_back_off": True}),
                          ("the scale grew one good step late: grow when the count REACHES growth_interval "
                           "(==), not when it exceeds it", {"grow_after_more": True}),
                          ("the scale never grows: store the count of good steps (_growth_tracker = successful) "
                           "when it has not reached growth_interval yet", {"store_count": False})):
        if scale_sequence(skipped, init_scale, growth_interval, **switch) == scales:
            return f"it matches a known mistake: {cause}"
    return ("back off after a skipped step and reset the count; grow after growth_interval good steps in a row, "
            "and only then")


def unscale_mistake(seen: np.ndarray, gradient: np.ndarray, scale: float) -> str:
    """Why the optimizer saw `seen` instead of `gradient` (scaled by `scale` before unscaling)."""
    for cause, wrong in (("unscale_ multiplies the gradients by 1/scale, not by the scale", gradient * scale * scale),
                         ("the gradients were divided by the scale twice (unscaling twice?)", gradient / scale),
                         ("the gradients were not unscaled: step() calls unscale_ first (unless it was called)",
                          gradient * scale)):
        if np.allclose(seen, wrong):
            return f"it matches a known mistake: {cause}"
    return "the optimizer must see the gradients divided by the scale exactly once (unscaling twice?)"


def test_unit_grad_scaler():
    loss = Tensor(np.float32(3.0), requires_grad=True)
    scaled = returned(GradScaler(init_scale=1024.0).scale(loss), "GradScaler(init_scale=1024.0).scale(loss)", Tensor)
    assert scaled.dtype == np.float32 and scaled.item() == 3072.0, f"scale(loss) = loss · scale, got {scaled.item()}"
    half_loss = Tensor(np.float16(4.0), requires_grad=True)
    half_scaled = GradScaler().scale(half_loss)
    assert half_scaled.dtype == np.float32 and half_scaled.item() == 4.0 * 2**16, (
        f"GradScaler().scale(a float16 loss of 4.0): expected {4.0 * 2**16} in float32, got {half_scaled.item()} in "
        f"{half_scaled.dtype}" + (": 4 · 2^16 overflows float16 (its largest is 65504): cast the loss to float32 "
                                  "before multiplying (cast)" if half_scaled.dtype == np.float16 else ""))
    wide_scaled = GradScaler(init_scale=8.0).scale(Tensor(np.float64(2.0), requires_grad=True))
    assert wide_scaled.dtype == np.float64 and wide_scaled.item() == 16.0, (
        f"GradScaler(init_scale=8).scale(a float64 loss of 2.0): expected 16.0 in float64, got {wide_scaled.item()} "
        f"in {wide_scaled.dtype}: only a float16 loss is cast up (to float32); a float32 or float64 loss is "
        "multiplied as it is")
    probe = Tensor(np.zeros(3, np.float32), requires_grad=True)
    probe.grad = Tensor(np.full(3, 8.0, np.float32))  # a gradient of ones, scaled by 8
    probe_array = probe.grad.data
    GradScaler(init_scale=8.0).unscale_(SGD([probe], lr=1.0))
    unscaled = probe.grad.numpy()
    assert np.array_equal(unscaled, np.ones(3, np.float32)) and unscaled.dtype == np.float32, (
        f"unscale_ with scale 8 on a float32 gradient [8, 8, 8]: expected [1, 1, 1] in float32, got {unscaled} in "
        f"{unscaled.dtype}: " + (
            "the gradient did not change: unscale_ must change each gradient IN PLACE (g *= ...); `g = g * inverse` "
            "only binds a new array to the local name g" if np.array_equal(unscaled, np.full(3, 8.0)) else
            "keep each gradient's dtype: multiply in place by the float32 reciprocal, g *= inverse.astype(g.dtype)"
            if np.allclose(unscaled, 1.0) else unscale_mistake(unscaled, np.ones(3), 8.0)))
    assert probe.grad.data is probe_array, (
        "unscale_ must change the gradient arrays in place (g *= inverse.astype(g.dtype)), as PyTorch: "
        "p.grad.data = g * ... puts a new array in their place")
    w = Tensor(np.zeros(3, np.float32), requires_grad=True)
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler(init_scale=8.0, growth_interval=3)
    expected = [(True, 8), (True, 8), (True, 16), (False, 8), (False, 4), (True, 4), (True, 4), (True, 8), (True, 8), (False, 4)]
    scales = []
    for step, (taken, scale) in enumerate(expected, start=1):
        before = w.numpy().copy()
        used_scale = scaler.get_scale()
        w.grad = Tensor(scripted_gradients(step) * np.float32(used_scale))
        if step == 9:
            scaler.unscale_(optimizer)
            assert np.allclose(w.grad.numpy(), scripted_gradients(9)), (
                f"unscale_ divides the gradients by the scale: expected {scripted_gradients(9)}, got {w.grad.numpy()}: "
                + unscale_mistake(w.grad.numpy(), scripted_gradients(9), used_scale))
            assert scaler._optimizer_state(optimizer)["unscaled"], (
                "after unscale_(optimizer) the optimizer must be marked unscaled (state[\"unscaled\"] = True): "
                "step() reads the mark, and without it unscales the gradients a second time")
        result = scaler.step(optimizer)
        changed = not np.array_equal(before, w.numpy())
        assert scaler._optimizer_state(optimizer)["stepped"], (
            f"step {step}: after scaler.step(optimizer) the optimizer must be marked stepped (state[\"stepped\"] = "
            "True), whether the step was taken or skipped: update() reads the mark")
        assert changed == taken, (
            f"step {step}: the step should be {'taken' if taken else 'SKIPPED (a gradient is inf or NaN)'}"
            + ("; check for NaN too (np.isfinite)" if step == 5 else ""))
        assert result == taken, (
            f"step {step}: the step was {'taken' if taken else 'skipped'}, but step() returned {result}: return True "
            "when the optimizer stepped and False when the step was skipped")
        if taken:
            seen = before - w.numpy()
            assert np.allclose(seen, scripted_gradients(step)), (
                f"step {step}: the optimizer saw the gradients {seen}, expected {scripted_gradients(step)} (scale "
                f"{used_scale}): " + unscale_mistake(seen, scripted_gradients(step), used_scale))
        scaler.update()
        scales.append(scaler.get_scale())
        assert scaler.get_scale() == scale, (
            f"after step {step} the scale should be {scale}, got {scaler.get_scale()} (scales so far {scales}): "
            + scaler_mistake([not taken for taken, _ in expected], 8.0, 3))
    print("✓ GradScaler: scale, unscale once, skip on inf and NaN, back off, grow after growth_interval")


test_unit_grad_scaler()

# %% [markdown]
# ### Training with autocast and the scaler
#
# The same tiny GPT trained twice from the same start on the same batches — in float32, and
# under `autocast` with a `GradScaler` (`init_scale=2^16`, `growth_interval=10` so that the
# scale moves within a short run). Predict before running: will the two loss curves differ in
# the first, second or third digit? Will the scaler skip any step?

# %%
def train_tiny(mixed: bool, steps: int = 20) -> tuple[list[float], list[float], int]:
    """(losses, scales, skipped steps) of a few AdamW steps on random token batches."""
    model = GPT(65, 32, 2, 4, 32, seed=0, bias=False)
    optimizer = AdamW(model.parameters(), lr=3e-3)
    scaler = GradScaler(init_scale=2.0**16, growth_interval=10, enabled=mixed)
    rng = np.random.default_rng(7)
    text = rng.integers(0, 65, 600)  # a short random "text" the model can memorise
    losses, scales, skipped = [], [], 0
    for _ in range(steps):
        starts = rng.integers(0, len(text) - 33, 8)
        x = np.stack([text[s:s + 32] for s in starts])
        y = np.stack([text[s + 1:s + 33] for s in starts])
        optimizer.zero_grad()
        with autocast(enabled=mixed):
            _, loss = model(x, targets=y)
        scaler.scale(loss).backward()
        skipped += not scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, skipped


full, _, _ = train_tiny(mixed=False)
mixed, scales, skipped = train_tiny(mixed=True)
for step in (0, 9, 19):
    print(f"step {step + 1:2d}: float32 loss {full[step]:.6f}, mixed {mixed[step]:.6f}, scale {scales[step]:,.0f}")
print(f"largest |difference| between the two losses over {len(full)} steps: "
      f"{max(abs(a - b) for a, b in zip(full, mixed)):.1e}; skipped steps: {skipped}")

# %% [markdown]
# The two curves stay close — far closer than float16's three significant digits would
# suggest for a single number: each product rounds its inputs to float16 but adds up in
# float32, the loss averages thousands of terms in float32, and the weights and AdamW's
# state stay float32, so the rounding errors do not pile up. The scale doubles every 10 good
# steps; at these sizes nothing overflows, so no step is skipped — a large model, or a
# learning rate that makes the loss spike, is where the back-off earns its place.
#
# ## 9. Checking against PyTorch
#
# Where PyTorch is installed, `torch.utils.checkpoint` on the same function gives the same
# gradients as ours, and `torch.amp.GradScaler` (on the CPU: `GradScaler("cpu")`) the same
# scales and skipped steps on the scripted gradients (`tests/17_memory/test_memory_torch.py`
# compares more: whole blocks, and the parameters after every step).

# %%
try:
    import torch
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    piece = TinyPiece(8, p=0.0, dtype=np.float64)
    x = np.random.default_rng(8).standard_normal((2, 3, 8))
    theirs = [torch.tensor(p.numpy(), requires_grad=True) for p in piece.parameters()]  # fc.w, fc.b, proj.w, proj.b

    def torch_piece(xt):
        h = torch.nn.functional.gelu(xt @ theirs[0] + theirs[1], approximate="tanh")
        return h @ theirs[2] + theirs[3] + xt

    xt = torch.tensor(x, requires_grad=True)
    (torch_checkpoint(torch_piece, xt, use_reentrant=False) ** 2).sum().backward()
    ours = gradients(piece, x, use_checkpoint=True)
    difference = max(np.abs(a - b.grad.numpy()).max() for a, b in zip(ours, [xt, *theirs]))
    print(f"checkpoint vs torch.utils.checkpoint: max |gradient difference| = {difference:.1e} (float64)")

    scaler_t = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
    wt = torch.zeros(3, requires_grad=True)
    sgd_t = torch.optim.SGD([wt], lr=1.0)
    torch_scales = []
    for step in range(1, 11):
        scaler_t.scale(torch.ones(()))  # PyTorch's scaler makes its scale in the first scale() call
        wt.grad = torch.tensor(scripted_gradients(step)) * scaler_t.get_scale()
        if step == 9:
            scaler_t.unscale_(sgd_t)
        scaler_t.step(sgd_t)
        scaler_t.update()
        torch_scales.append(scaler_t.get_scale())
    print("torch.amp.GradScaler scales:", torch_scales)

# %% [markdown]
# ## Summary
#
# * A training step holds parameters, gradients, optimizer state (AdamW: two more copies of
#   every weight) and activations; in our engine all four are alive at the end of
#   `backward()`. On top, the backward pass holds the gradients on their way down (about one
#   block's worth), which `backward_working_bytes` predicts from the graph alone; the five
#   together come within a few percent of the measured peak.
# * A KV cache holds `2·layers·B·T·d·itemsize` bytes.
# * `checkpoint(fn, *inputs)` is one op whose inputs are fn's tensor arguments **and the
#   parameters it reads**; its rule reruns fn on detached copies with recording on, with the
#   random generators put back, and returns every input's gradient: bit-identical to the
#   plain call, for one more forward pass.
# * float16 overflows above 65,504, keeps about three digits, and flushes gradients below
#   `6·10⁻⁸` to zero. `autocast` runs products in float16 and the rest in float32, with
#   float32 weights; loss scaling lifts small gradients out of the underflow range, and
#   `GradScaler` finds the scale by itself: back off on inf/NaN (and skip the step), grow
#   after `growth_interval` good steps.
# * On a CPU float16 is slower, not faster: NumPy has no float16 BLAS.
#
# ## Exercises
#
# 1. **Checkpoint every other block.** Wrap only blocks 0 and 2 of a 4-block GPT. Measure the
#    peak and the time at `T = 256`. Where does the memory go now? Chen et al. suggest
#    segments of `√L` blocks: what would that give for `L = 16`?
# 2. **Predict a checkpointed step.** `training_memory` of a checkpointed GPT counts only
#    the blocks' inputs as activations, yet the measured peak is higher. Add the graph of
#    one plain block (measure it with `graph_saved_bytes`) and compare with `peak_memory`.
# 3. **Where the float16 zeros are.** In section 7, call `retain_grad()` on the output of
#    each block's `q_proj` under autocast and count the gradient entries below `2^-24`.
#    How does the count change with the batch size (the loss is a mean over `B·T` tokens)?
# 4. **Too large a scale.** Start a `GradScaler` at `2^40` on the tiny GPT of section 8. How
#    many steps does it skip, and what scale does it settle at?
# 5. **The scaler and clipping.** Write the loop of section 8 with
#    `clip_grad_norm(model.parameters(), 1.0)` between `unscale_` and `step`. What goes
#    wrong if you clip before unscaling?
#
# ## Questions (answer them by running your code)
#
# 1. For the milestone's GPT (`GPT(65, 128, 4, 4, 64, bias=False)`, batch 12, AdamW), what
#    does `training_memory` predict, part by part? At what context length would the
#    activations be ten times the parameters?
# 2. How many bytes does the KV cache of that model take for 12 sequences of 64 tokens in
#    float32? In float16?
# 3. Remove the lines that put the generators back after the recomputation. Which test
#    fails, and at which call? Why not at the first?
# 4. Run `checkpoint` on a plain function that reads a weight from a closure, without
#    `params`. What happens, and what would happen in an engine whose rule wrote into the
#    weight's `.grad` itself?
# 5. Under `autocast`, what dtype is the output of a `Linear` layer with a bias? Without
#    one? Why do they differ?
