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
# # Module 01: Tensor
#
# > The array that everything else in TinyTorch is built on.
#
# **Time:** about 3 hours (2 for the code, 1 for the measurements, exercises and questions).
#
# **When you have finished you will be able to:**
#
# * explain what a `Tensor` adds to a NumPy array, and build one with the right dtype;
# * say how many bytes a tensor takes, and why float32 is the default;
# * decide by hand whether two shapes broadcast, and what shape comes out;
# * multiply batches of matrices, predict the result's shape, and count a matmul's cost
#   (`2·m·n·k` floating-point operations), then measure it;
# * tell a **view** (same memory, free) from a **copy** (new memory, costs time);
# * write each operation so that it records exactly what module 05's backward pass needs.
#
# **How to work.** Every piece you write sits between a pair of solution markers
# (`BEGIN SOLUTION` and `END SOLUTION` comment lines), inside a function whose docstring
# is the full contract: what it returns, the op it records, the order of its inputs, what
# it saves, what it raises. The prose above each piece says why; after it, a worked
# example runs your code and prints numbers, and a `test_unit_*` cell checks it and
# prints one `✓` line. Run the notebook top to bottom (in Jupyter, or
# `python tensor_dev.py` in this folder): it stops at the first piece you have not
# written yet. When everything runs, `tito export 01` puts your code into the package
# (`tinytorch/core/tensor.py`) and `tito test 01` runs the module's full test suite on it.

# %%
#| default_exp core.tensor

# %%
#| export
from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np
from fastcore.basics import patch

# %% [markdown]
# ## 1. Why wrap an array?
#
# A neural network is arithmetic on arrays of numbers, and NumPy already does that
# arithmetic quickly. But a NumPy result forgets where it came from:

# %%
w_plain = np.array([2.0, 3.0])
loss_plain = (w_plain * w_plain).sum()
print("a NumPy result is just a number:", loss_plain, type(loss_plain).__name__)

# %% [markdown]
# To train `w` we need `d loss / d w`, and for that module 05 has to walk back from `loss`
# to `w` through every operation in between. So a framework's array has to carry three
# things NumPy's does not:
#
# 1. **how it was made**: which operation, from which inputs, and whatever the backward
#    pass will need (the *graph*);
# 2. **whether it needs a gradient** (`requires_grad`): weights do, data does not;
# 3. **where its numbers live**: NumPy on the CPU or CuPy on an NVIDIA GPU, with one code
#    path for both.
#
# A `Tensor` is a thin wrapper that adds exactly that. The numbers stay in a NumPy (or
# CuPy) array in `.data`, so every operation is one NumPy call plus a little bookkeeping.

# %% [markdown]
# ## 2. NumPy or CuPy: one place decides
#
# CuPy copies NumPy's interface for GPU arrays. If every operation asks its *inputs*
# which library owns them (`xp = array_module(x.data)`) and then calls `xp.exp`,
# `xp.matmul`, ... the same line of code runs on either device. `array_module` is the only
# function in TinyTorch that makes that choice; `cuda_module` checks that a GPU can be
# used and says what is missing when it cannot. All three functions here are given.

# %%
#| export
def array_module(array: Any):
    """`numpy` for a NumPy array (or anything else), `cupy` for a CuPy array."""
    if type(array).__module__.startswith("cupy"):
        import cupy  # only reached when a CuPy array exists, so CuPy is installed

        return cupy
    return np


def cuda_module():
    """CuPy, checked: raises RuntimeError saying whether CuPy or the GPU is missing."""
    try:
        import cupy
    except ImportError as err:
        raise RuntimeError(
            "device='cuda' needs CuPy, which is not installed. Install it with "
            "`pip install -e \".[gpu]\"` (CuPy for CUDA 12), or use device='cpu'."
        ) from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        count = 0
    if count == 0:
        raise RuntimeError(
            "device='cuda': CuPy is installed but no NVIDIA GPU is visible "
            "(no CUDA device or driver). Use device='cpu' on this machine."
        )
    return cupy


def device_problem(device: str) -> str | None:
    """None when `device` ("cpu" or "cuda") can be used here, else one sentence saying why not
    and what to do. Programs (milestones, benchmarks) ask before any work; on "cuda" it runs a
    first CuPy kernel, so a broken CUDA set-up shows here and not in the middle of a run."""
    if device == "cpu":
        return None
    try:
        cupy = cuda_module()
        int((cupy.arange(4) + 1).sum())
    except RuntimeError as err:  # cuda_module's: CuPy or the GPU missing
        return str(err)
    except Exception as err:  # CuPy imported but cannot run (driver, CUDA libraries)
        return (f"device='cuda': CuPy is installed but could not run on the GPU "
                f"({type(err).__name__}: {err}). Use device='cpu' on this machine.")
    return None


def device_of(array: Any) -> str:
    """"cuda" for a CuPy array, "cpu" for anything else."""
    return "cuda" if array_module(array) is not np else "cpu"


# %% [markdown]
# ## 3. The graph record: `record_op`
#
# Every operation you write in this module ends the same way:
#
# ```python
# return record_op("sum", data, (self,), axis=axes, keepdims=keepdims)
# ```
#
# `record_op(op, data, inputs, **saved)` wraps the freshly computed array `data` in a new
# `Tensor`. When gradients are switched on and any input requires a gradient, it also
# attaches a `Node`: the operation's name, the input tensors, and the keyword arguments
# (`saved`) the backward rule will need. That is the whole graph: each result points at
# the tensors it came from. Module 05 looks up one backward rule per operation *name* and
# reads the inputs *in the order given* and the saved fields *by name*, so these three
# things are part of each operation's contract:
#
# | you write | op name | inputs, in this order | saved |
# |---|---|---|---|
# | `a + b`, `a - b`, `a * b`, `a / b`, `a ** b` | `add`, `sub`, `mul`, `div`, `pow` | `(left, right)`: `1 - w` records `(Tensor(1), w)` | — |
# | `-a` | `neg` | `(a,)` | — |
# | `a @ b` | `matmul` | `(a, b)` | — |
# | `x.sum()`, `x.mean()` | `sum`, `mean` | `(x,)` | `axis` (sorted tuple of non-negative ints, or None), `keepdims` |
# | `x.max()` | `max` | `(x,)` | `axis`, `keepdims`, `out` (the result's array) |
# | `x.exp()`, `x.sqrt()` | `exp`, `sqrt` | `(x,)` | `out` (the result's array) |
# | `x.log()`, `x.reshape(...)` | `log`, `reshape` | `(x,)` | — |
# | `x.permute(...)`, `x.transpose(...)` | `permute` (a transpose *is* a permute) | `(x,)` | `dims` (tuple of non-negative ints) |
# | `x[index]` | `getitem` | `(x,)` | `index` (Tensors and lists turned into arrays) |
# | `x.masked_fill(mask, v)` | `masked_fill` | `(x,)` | `mask` (bool array, True = filled) |
# | `x.to(device)` | `to` | `(x,)` | `device` (the input's device) |
#
# Each piece's docstring repeats its row. One rule holds for all of them: a result keeps
# its input's dtype (float32 in, float32 out; NumPy does this by itself unless asked not
# to). `GradMode.enabled` is the switch that module 05's `no_grad()` turns off.
# `record_op`, `Node` and `GradMode` are given.
#
# A `Node` also notes each input's **version** (`versions`), a counter that goes up
# whenever someone assigns a tensor's `.data`. Section 15 explains why module 05 checks it.
#
# Because every result passes through `record_op`, it is also the one place where a tool
# can *watch* the engine. `OP_LISTENERS` is a list of such watchers (module 14's profiler
# puts itself there while it runs): after `record_op` has made the result it tells each
# listener `op_recorded(op, out, inputs, saved)`, also when gradients are off, so that
# inference can be profiled too. Module 05's backward pass tells the same listeners about
# every backward rule it runs. Nobody listens unless a profiler is running, and then the
# only cost is one check of an empty list per operation (module 14 measures it).

# %%
#| export
class GradMode:
    """Global switch: when `enabled` is False, `record_op` builds no graph (see no_grad)."""

    enabled: bool = True


# Who watches the engine (module 14's Profiler adds itself while it runs). Each listener has
#   op_recorded(op, out, inputs, saved)  -- record_op made `out` (also with gradients off)
#   rule_started(node, grad)             -- module 05's apply_rule is about to run node's rule
#   rule_finished(node, grad, grads)     -- the rule returned `grads` (one array or None per input)
# Empty, the engine pays one truthiness check per op and nothing else.
OP_LISTENERS: list = []


class Node:
    """How a tensor was made: `op` applied to `inputs`, plus what backward needs.

    op       -- the operation's name ("add", "sum", ...)
    inputs   -- the input Tensors, in the order the backward rule returns gradients
    saved    -- dict of what the forward kept for the backward rule (axis, out, mask, ...)
    versions -- each input's `_version` when the node was made (module 05 checks them)
    """

    __slots__ = ("op", "inputs", "saved", "versions")

    def __init__(self, op: str, inputs: tuple, saved: dict):
        self.op = op
        self.inputs = inputs
        self.saved = saved
        self.versions = tuple(t._version for t in inputs)

    def __repr__(self) -> str:
        return f"Node({self.op!r}, inputs={len(self.inputs)})"


def record_op(op: str, data: Any, inputs: tuple, **saved: Any) -> "Tensor":
    """The one place a result is made: wrap `data` and remember how it was computed.

    op     -- the operation's name; module 05 looks its backward rule up by it
    data   -- the result array (NumPy or CuPy), already computed
    inputs -- the input Tensors, in the order the backward rule returns gradients
    saved  -- whatever the backward rule needs (axis, mask, the output, ...)
    Then tells every listener in OP_LISTENERS (a profiler), if there is one.
    """
    out = Tensor.__new__(Tensor)
    out._data = data  # not `out.data = ...`: a new result starts at version 0
    out._version = 0
    out.grad = None
    out._node = None
    out.requires_grad = False
    out._retains_grad = False
    if GradMode.enabled:
        for t in inputs:
            if t.requires_grad:
                out.requires_grad = True
                out._node = Node(op, inputs, saved)
                break
    if OP_LISTENERS:  # a profiler is running (module 14); otherwise this check is the whole cost
        for listener in OP_LISTENERS:
            listener.op_recorded(op, out, inputs, saved)
    return out


# %% [markdown]
# ## 4. The `Tensor` class
#
# The class itself is given: it holds the array and answers questions about it. Its
# operations are added one section at a time below, each with fastcore's `@patch`, which
# attaches a function to a class that already exists:
#
# ```python
# @patch
# def sum(self: Tensor, axis=None, keepdims=False) -> Tensor:   # becomes Tensor.sum
# ```
#
# So you can write, run and test one method at a time. (`@patch` is only ever used on a
# class of *this* module; later modules add operations through `record_op` and module
# 05's backward rules, never by changing `Tensor`.)
#
# What a tensor holds:
#
# * `.data`: the NumPy or CuPy array. It is assignable (optimizers replace it with the
#   updated weights). Every assignment, `t.data = new` or `t.data += 1`, adds one to
#   `t._version`, the counter the previous section mentioned.
# * `.requires_grad`, `.grad` (a Tensor after a backward pass, else None), and `_node`
#   (the record of how it was made, None for a tensor you built yourself).
# * `.shape`, `.ndim`, `.size`, `.dtype`, `.device`: read from the array.
#
# `__array_ufunc__ = None` tells NumPy to keep its hands off: without it,
# `numpy_array + tensor` would run NumPy's own loop over the tensor instead of calling
# `Tensor.__radd__`.

# %%
#| export
class Tensor:
    """An n-dimensional array that remembers how it was computed.

    data          -- NumPy or CuPy array (assignable: optimizers replace it)
    requires_grad -- whether backward() should compute a gradient for it
    grad          -- a Tensor of the same shape after backward(), else None
    """

    # Makes `numpy_array + tensor` call Tensor.__radd__ instead of NumPy's own loop.
    __array_ufunc__ = None

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None,
                 device: str | None = None):
        self._data = to_array(data, dtype=dtype, device=device)
        self._version = 0
        if requires_grad and not is_floating(self._data):
            raise ValueError(
                f"Only floating-point tensors can require gradients; this one is {self._data.dtype}. "
                "Pass dtype=np.float32 (or float64) to make it differentiable."
            )
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._node: Node | None = None
        self._retains_grad = False

    # ---- the array, and the version counter that watches assignments to it ----
    @property
    def data(self):
        """The NumPy or CuPy array holding the values."""
        return self._data

    @data.setter
    def data(self, array) -> None:
        # Changes *through* the array (t.data[0] = 5) never reach this line, so the
        # counter cannot see them; replacing the array (t.data = ..., t.data += 1) does.
        self._data = array
        self._version += 1

    # ---- what the tensor is -------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return int(self._data.size)

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def device(self) -> str:
        return device_of(self._data)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        where = ", device='cuda'" if self.device == "cuda" else ""
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype}{where}{grad})"

    # ---- leaving TinyTorch ----------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (copied from the GPU when needed)."""
        return self._data.get() if self.device == "cuda" else self._data

    def item(self) -> float | int:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}.")
        return self._data.item()

    def to(self, device: str) -> "Tensor":
        """The same values on `device` ("cpu" or "cuda"); gradients flow back across.

        Records op "to" with inputs (self,) and saves `device` (the device it came from).
        """
        if device == self.device:
            return self
        return record_op("to", to_array(self._data, device=device), (self,), device=self.device)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self) -> "Tensor":
        return self.to("cuda")

    def detach(self) -> "Tensor":
        """The same data (shared, not copied), cut off from the graph."""
        return Tensor(self._data)

    def zero_grad(self) -> None:
        self.grad = None

    def backward(self, grad: Any = None) -> None:
        """Compute gradients of this tensor with respect to every tensor it depends on.

        The engine is module 05's (`tinytorch.core.autograd.backward`); a tensor only
        hands over to it.
        """
        from tinytorch.core.autograd import backward as run_backward

        run_backward(self, grad)


# %% [markdown]
# ## 5. Making a tensor: dtype and memory
#
# `Tensor(data)` hands `data` to `to_array`, the first function you write. Its rules are
# the rules of all of TinyTorch:
#
# * Python numbers and lists become **float32**: 4 bytes a number, what deep learning
#   trains in. (NumPy on its own would pick float64, twice the memory, and an integer
#   type for `[1, 2, 3]`.)
# * A NumPy or CuPy **floating** array keeps its dtype (float16, float32, float64):
#   gradient checks need float64, memory-hungry models use float16.
# * An **integer** or boolean array keeps its dtype: class labels, token ids and masks
#   are not differentiable, so they may not `requires_grad`.
# * `dtype=` overrides all of this.
# * Anything that is not numbers (`None`, text, arbitrary objects) is refused with
#   `TypeError`. Left alone, NumPy turns `[1.0, None]` into `[1.0, nan]` in float32, and
#   a NaN that appears silently is found hours later.
#
# How does NumPy tell numbers from the rest? `np.asarray(values)` first finds a type for
# the values by itself: numbers give a dtype whose `.kind` is one of `"b"` (bool), `"i"`
# (int), `"u"` (unsigned int) or `"f"` (float); `None` or mixed objects give kind `"O"`,
# text gives `"U"`. So convert first, check `.kind`, and only then cast to the dtype you
# want.
#
# Moving an array to another device is given (`_to_device`): call it last.

# %%
#| export
def _to_device(array: Any, device: str | None) -> Any:
    """`array` on `device` (None: leave it where it is). Given code.

    Raises ValueError for an unknown device name, RuntimeError (from `cuda_module`) when
    "cuda" is asked for and CuPy or the GPU is missing.
    """
    if device is None or device_of(array) == device:
        return array
    if device == "cuda":
        return cuda_module().asarray(array)
    if device == "cpu":
        return array.get()
    raise ValueError(f"Unknown device {device!r}: use 'cpu' or 'cuda'.")


def is_floating(array: Any) -> bool:
    """Whether `array` holds floating-point numbers (float16/32/64)."""
    return array_module(array).issubdtype(array.dtype, np.floating)


def to_array(data: Any, dtype: Any = None, device: str | None = None):
    """Convert `data` (Tensor, NumPy/CuPy array, list, number) to an array by TinyTorch's rules.

    * a Tensor: its `.data`;
    * a NumPy or CuPy array (or NumPy scalar such as `np.float32(2.0)`): kept as it is,
      dtype included (`isinstance(data, (np.ndarray, np.generic))` spots NumPy's;
      `array_module(data) is not np` means a CuPy array). A NumPy scalar is a fine
      `.data`: it is what NumPy's own reductions over every axis return;
    * anything else (Python numbers, nested lists): `np.asarray(data)`, and float32 when
      no `dtype` is given;
    * `dtype` given: one cast straight to it (`astype(dtype, copy=False)`: no copy when it
      already fits). Never pass through float32 first: `[16777217]` with `dtype=np.int64`
      must stay 16777217, which float32 cannot hold;
    * values that are not numbers, from a list or in an array alike (dtype kind other than
      "b", "i", "u", "f": `None`, text, an `object` array): raise TypeError, before any cast
      (a cast would hide `None` as NaN);
    * last, `_to_device(array, device)` (given) moves it when `device` is set.
    """
    ### BEGIN SOLUTION
    if isinstance(data, Tensor):
        data = data.data
    if array_module(data) is np and not isinstance(data, (np.ndarray, np.generic)):
        data = np.asarray(data)  # NumPy finds the values' own type first...
        if dtype is None:
            dtype = np.float32  # ...and Python numbers then become float32
    if data.dtype.kind not in "biuf":
        raise TypeError(
            f"Tensor data must be numbers, got values of type {data.dtype} "
            "(None, text or objects): replace them with numbers first."
        )
    if dtype is not None:
        data = data.astype(dtype, copy=False)
    return _to_device(data, device)
    ### END SOLUTION


# %% [markdown]
# ### Worked example: dtypes and what they cost
#
# Each float32 number takes 4 bytes, float16 2, float64 8, so an array's memory is
# `size × bytes per element` (NumPy calls the latter `itemsize`, the total `nbytes`).

# %%
examples = {
    "a Python list [1, 2, 3]": [1, 2, 3],
    "np.array([1, 2, 3])": np.array([1, 2, 3]),
    "a float16 array": np.array([1.0, 2.0], dtype=np.float16),
    "[1, 2] with dtype=np.float64": None,
}
for label, values in examples.items():
    t = Tensor([1, 2], dtype=np.float64) if values is None else Tensor(values)
    print(f"{label:30} -> dtype {str(t.dtype):8} {t.data.itemsize} bytes per number")

# %% [markdown]
# ### Predict, then run: how much memory?
#
# Write down, before you run the next cell, how many **MiB** (1 MiB = 1024 × 1024 bytes)
# a tensor of shape `(1024, 1024)` takes in float16, float32 and float64, and the same
# for a batch of activations of shape `(32, 1024, 768)` (32 sequences of 1024 tokens with
# 768 features, the size of GPT-2 small). Put your guesses in the dictionary, then run.

# %%
my_guess_mib = {"float16": None, "float32": None, "float64": None}  # your guesses for (1024, 1024)

for name in ("float16", "float32", "float64"):
    square = Tensor(np.zeros((1024, 1024), dtype=name))
    print(f"(1024, 1024) {name}: {square.data.nbytes / 2**20:5.1f} MiB   (you guessed {my_guess_mib[name]})")
activation_bytes = 32 * 1024 * 768 * Tensor([0.0]).data.itemsize  # a float32 element, without allocating 96 MiB
print(f"(32, 1024, 768) float32: {activation_bytes / 2**20:.1f} MiB, for one activation of one layer")


# %% [markdown]
# ### Test: making tensors

# %% [markdown]
# The tests use four given helpers that say what was expected, what came out and the likely
# cause: `expect_error`, `expect_equal`, and later `broadcast_mistake` and `product`. They
# live in `tensor_checks.py` beside this lesson (`tinytorch.core.tensor_checks`).

# %%
from tinytorch.core.tensor_checks import (  # given: modules/01_tensor/tensor_checks.py
    broadcast_mistake, expect_equal, expect_error, product)


# %%
def test_unit_to_array():
    for label, data in (("[1, 2, 3]", [1, 2, 3]), ("3", 3), ("3.5", 3.5)):
        dtype = to_array(data).dtype
        assert dtype == np.float32, (f"to_array({label}): Python numbers and lists must become float32, got {dtype}: "
                                     "when no dtype is asked for, use np.float32")
    expect_equal(to_array(3.5), 3.5, "to_array(3.5)")
    half = to_array(np.zeros(2, dtype=np.float16)).dtype
    assert half == np.float16, f"a float16 array must keep its dtype (float arrays are kept as they are), got {half}"
    ids = np.array([3, 1, 2])
    kept = to_array(ids)
    assert kept is ids, (f"an int64 array that already fits must be returned as it is (no copy, dtype kept), got a "
                         f"new {kept.dtype} array: only Python numbers and lists become float32")
    wide = to_array([1, 2], dtype=np.float64).dtype
    assert wide == np.float64, f"to_array([1, 2], dtype=np.float64) must be float64, got {wide}: dtype= overrides the default"
    expect_equal(to_array(np.array([1.5, 2.5]), dtype=np.int32), [1, 2], "to_array([1.5, 2.5], dtype=np.int32)")
    try:
        unwrapped = to_array(Tensor([4.0, 5.0]))
    except TypeError as err:
        raise AssertionError(f"to_array(Tensor([4.0, 5.0])) raised TypeError ({err}): a Tensor is not numbers to "
                             "NumPy; take its .data first") from None
    expect_equal(unwrapped, [4.0, 5.0], "to_array(Tensor([4.0, 5.0]))", "a Tensor gives its .data")
    for label, data in (("[1.0, None]", [1.0, None]), ("None", None), ('["a", "b"]', ["a", "b"])):
        expect_error(TypeError, lambda: to_array(data), what=f"to_array({label})",
                     cause="check the dtype's kind (it must be one of b, i, u, f) BEFORE any cast: a cast to float32 "
                           "turns None into nan")
    expect_error(ValueError, lambda: to_array([1.0], device="tpu"), "tpu", what='to_array([1.0], device="tpu")',
                 cause="hand the array to _to_device(array, device) last: it refuses unknown devices")
    t = Tensor([[1, 2, 3], [4, 5, 6]])
    facts = (t.shape, t.ndim, t.size, t.dtype, t.device)
    assert facts == ((2, 3), 2, 6, np.float32, "cpu"), \
        f"Tensor([[1, 2, 3], [4, 5, 6]]): expected shape (2, 3), ndim 2, size 6, float32 on cpu; got {facts}"
    expect_error(ValueError, lambda: Tensor(np.arange(3), requires_grad=True), "int",
                 what="Tensor(int array, requires_grad=True)", cause="integers cannot require gradients")
    print("✓ to_array: dtype rules, TypeError for non-numbers")


test_unit_to_array()

# %% [markdown]
# ### Three helpers every later module uses
#
# Functions in later modules accept "anything tensor-like": a Tensor, an array, a list.
# `as_tensor(value)` gives a Tensor without copying one that already is. And wherever
# numbers must leave TinyTorch (a plot, a file, a comparison in a test) they must be a
# NumPy array in main memory; `to_host(value)` gives that for a Tensor or an array on
# either device. Where a count, an id or an index is wanted (how many tokens to generate,
# the k of top-k, a start position), `as_int(value, name)` accepts an int or a float that is
# a whole number and refuses anything else by name: `int(2.5)` would quietly give 2. All
# three are given; use them instead of writing your own.

# %%
#| export
def as_tensor(value: Any) -> Tensor:
    """`value` itself when it is a Tensor, else `Tensor(value)` (by the dtype rules of section 5)."""
    return value if isinstance(value, Tensor) else Tensor(value)


def to_host(value: Any) -> np.ndarray:
    """The values of a Tensor or an array as a NumPy array (copied from the GPU for CuPy)."""
    array = value.data if isinstance(value, Tensor) else value
    return array.get() if array_module(array) is not np else np.asarray(array)


def as_int(value: Any, name: str, minimum: int | None = None) -> int:
    """`value` as a Python int, for a count, an id or an index: an int (NumPy's too) or a float
    that is a whole number (3.0, not 2.5). A fraction, infinity or NaN raises ValueError, a bool
    or anything else TypeError, and so does a value below `minimum` (ValueError); each message
    starts with `name`, e.g. "generate: max_new_tokens"."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, numbers.Real)):
        raise TypeError(f"{name} must be a whole number, got {type(value).__name__} {value!r}.")
    if not isinstance(value, numbers.Integral) and not (np.isfinite(value) and float(value).is_integer()):
        raise ValueError(f"{name} must be a whole number, got {value!r}.")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {number}.")
    return number


# %%
existing = Tensor([1.0, 2.0])
print("as_tensor(existing) is existing:", as_tensor(existing) is existing,
      "| as_tensor([[1, 2]]) ->", as_tensor([[1, 2]]).dtype,
      "| to_host(existing) ->", repr(to_host(existing)))

# %% [markdown]
# ## 6. Broadcasting: which shapes go together
#
# `x + b` with `x` of shape `(2, 3)` and `b` of shape `(3,)` adds `b` to every row of
# `x`, without copying `b` twice. NumPy's rule, which PyTorch shares:
#
# 1. line the two shapes up **from the right**; a missing size on the left counts as 1;
# 2. in each position the two sizes must be **equal, or one of them 1**;
# 3. the result has the larger size in each position (a 1 is stretched).
#
# | left | right | result | why |
# |---|---|---|---|
# | `(2, 3)` | `(3,)` | `(2, 3)` | `(3,)` counts as `(1, 3)` |
# | `(2, 1)` | `(1, 3)` | `(2, 3)` | both stretch: a 2×3 table |
# | `(4, 1, 5)` | `(3, 1)` | `(4, 3, 5)` | `(3, 1)` counts as `(1, 3, 1)` |
# | `()` | `(2, 2)` | `(2, 2)` | a scalar goes with anything |
# | `(2, 3)` | `(2,)` | — | 3 against 2, neither is 1 |
# | `(3, 4)` | `(4, 3)` | — | 4 against 3 |
#
# The last two lines are the most common shape bug in deep learning, so the error must say
# which shapes clashed. You write the rule as a function: `broadcast_shape` returns the
# result's shape or raises a `ValueError` that names **both** shapes. NumPy applies the
# same rule inside every operation; your `_elementwise` in the next section calls
# `broadcast_shape` only when NumPy complained, to find out whether the shapes were the
# reason.

# %%
#| export
def broadcast_shape(a_shape: tuple, b_shape: tuple) -> tuple:
    """The shape that `a_shape` and `b_shape` broadcast to.

    Compare from the right; missing sizes count as 1; each pair must be equal or contain
    a 1, and the result takes the larger. `broadcast_shape((2, 1), (3,)) == (2, 3)`.
    A pair that fails raises ValueError whose message contains both shapes as tuples,
    e.g. "(2, 3)" and "(2,)" (use `tuple(a_shape)` in an f-string to print them).
    """
    ### BEGIN SOLUTION
    ndim = max(len(a_shape), len(b_shape))
    padded_a = (1,) * (ndim - len(a_shape)) + tuple(a_shape)
    padded_b = (1,) * (ndim - len(b_shape)) + tuple(b_shape)
    result = []
    for size_a, size_b in zip(padded_a, padded_b):
        if size_a != size_b and size_a != 1 and size_b != 1:
            raise ValueError(
                f"shapes {tuple(a_shape)} and {tuple(b_shape)} do not broadcast: compare them from "
                "the right; each pair of sizes must be equal, or one of them 1 (a missing size counts as 1)."
            )
        result.append(size_a if size_b == 1 else size_b)
    return tuple(result)
    ### END SOLUTION


# %%
for left, right in [((2, 3), (3,)), ((2, 1), (1, 3)), ((4, 1, 5), (3, 1)), ((), (2, 2)), ((2, 3), (2,))]:
    try:
        print(f"{str(left):10} with {str(right):7} -> {broadcast_shape(left, right)}")
    except ValueError as err:
        print(f"{str(left):10} with {str(right):7} -> ValueError: {err}")


# %%
def test_unit_broadcast_shape():
    rng = np.random.default_rng(0)
    cases = [((2, 3), (3,)), ((2, 1), (1, 3)), ((4, 1, 5), (3, 1)), ((), (2, 2)), ((5,), ()), ((0,), (1,))]
    for _ in range(50):  # random shapes that do broadcast: the same answer as NumPy
        shape = tuple(int(n) for n in rng.integers(1, 4, rng.integers(0, 4)))
        cases.append((shape, tuple(s if rng.random() < 0.5 else 1 for s in shape[rng.integers(0, len(shape) + 1):])))
    for left, right in cases:
        expected = np.broadcast_shapes(left, right)
        try:
            got = broadcast_shape(left, right)
        except ValueError as err:
            raise AssertionError(f"broadcast_shape({left}, {right}) must be {expected}, but it raised ValueError "
                                 f"({err}): {broadcast_mistake(left, right, None)}") from None
        assert tuple(got) == expected, (f"broadcast_shape({left}, {right}): expected {expected}, got {got}: "
                                        + broadcast_mistake(left, right, tuple(got)))
    for left, right in [((2, 3), (2,)), ((3, 4), (4, 3)), ((2, 3, 4), (3, 3))]:
        expect_error(ValueError, lambda: broadcast_shape(left, right), str(left), str(right),
                     what=f"broadcast_shape({left}, {right})",
                     cause="a pair of sizes that differ, neither of them 1, does not broadcast")
    print("✓ broadcast_shape")


test_unit_broadcast_shape()

# %% [markdown]
# ## 7. Elementwise arithmetic
#
# `+ - * / **` all work the same way, so one method, `_elementwise`, does the work and
# each operator is a one-line call to it (given below). Three details matter:
#
# **The other operand.** `w * 2` and `w * Tensor(...)` must both work. The given helper
# `_operand(other, self)` turns a Python number into a 0-d Tensor *of `self`'s dtype*
# (so `half * 2` stays float16 instead of becoming float32), refuses a tensor on another
# device, and converts anything else with `to_array` (so `w + None` is a TypeError).
#
# **Reflected operators and the order of inputs.** Python evaluates `1 - w` by asking the
# `int` first; it does not know tensors, so Python calls `w.__rsub__(1)`. Here `self` is
# `w`, but `w` is the **right** operand. `_elementwise(..., reverse=True)` must compute
# `fn(other, self)` *and* record the inputs as `(other, self)`: module 05's rule for `sub`
# returns `(grad, -grad)` for `(left, right)`, so with the order swapped `w` would get
# `+grad` instead of `-grad` and the values would still look right. The same holds for
# `2 / w` and `2 ** w`.
#
# **Errors that say what is wrong.** NumPy raises `ValueError` for shapes that do not
# broadcast, but also for other things (`int_array ** -1`: "Integers to negative integer
# powers are not allowed"). Catch the `ValueError`, then ask `broadcast_shape(a.shape,
# b.shape)`: if the shapes do not broadcast it raises the error naming both; if they do,
# the shapes were not the problem, so re-raise NumPy's own error unchanged (a bare
# `raise`). Only the failure path pays for the check.

# %%
#| export
def _operand(value: Any, like: Tensor) -> Tensor:
    """`value` as a Tensor on `like`'s device; Python numbers take `like`'s float dtype. Given code."""
    if isinstance(value, Tensor):
        if array_module(value._data) is not array_module(like._data):
            raise RuntimeError(
                f"Tensors on different devices ({like.device} and {value.device}): "
                "move one with .to(device) first."
            )
        return value
    xp = array_module(like._data)
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        dtype = like._data.dtype if is_floating(like._data) else None
        return Tensor(xp.asarray(value, dtype=dtype))
    return Tensor(to_array(value, device=like.device))


@patch
def _elementwise(self: Tensor, op: str, other: Any, fn, reverse: bool = False) -> Tensor:
    """`fn` applied to two operands with broadcasting; `self` is the left operand unless `reverse`.

    op      -- the name to record: "add", "sub", "mul", "div" or "pow"
    other   -- already a Tensor (via `_operand`, given)
    fn      -- the operation on two arrays, e.g. `operator.sub` (fn(a, b) is a - b)
    reverse -- True for the reflected operators (`1 - w` calls `w.__rsub__(1)`)

    Let `(left, right)` be `(self, other)`, or `(other, self)` when `reverse`. Returns
    `record_op(op, fn(left.data, right.data), (left, right))`: the inputs are recorded
    left operand first, nothing is saved. NumPy keeps the dtype (float32 stays float32).
    When `fn` raises ValueError: call `broadcast_shape(left.shape, right.shape)`, which
    raises the error naming both shapes when they do not broadcast; when they do, the
    cause was something else, so re-raise NumPy's error as it is.
    """
    other = _operand(other, self)
    ### BEGIN SOLUTION
    left, right = (other, self) if reverse else (self, other)
    try:
        data = fn(left.data, right.data)
    except ValueError:
        broadcast_shape(left.shape, right.shape)  # raises, naming both shapes, if they clash
        raise  # they do broadcast: NumPy's own error says what went wrong
    return record_op(op, data, (left, right))
    ### END SOLUTION


# The operators, given: each is one call to _elementwise (`operator.sub(a, b)` is `a - b`).
@patch
def __add__(self: Tensor, other) -> Tensor:
    return self._elementwise("add", other, operator.add)


@patch
def __radd__(self: Tensor, other) -> Tensor:
    return self._elementwise("add", other, operator.add, reverse=True)


@patch
def __sub__(self: Tensor, other) -> Tensor:
    return self._elementwise("sub", other, operator.sub)


@patch
def __rsub__(self: Tensor, other) -> Tensor:
    return self._elementwise("sub", other, operator.sub, reverse=True)


@patch
def __mul__(self: Tensor, other) -> Tensor:
    return self._elementwise("mul", other, operator.mul)


@patch
def __rmul__(self: Tensor, other) -> Tensor:
    return self._elementwise("mul", other, operator.mul, reverse=True)


@patch
def __truediv__(self: Tensor, other) -> Tensor:
    return self._elementwise("div", other, operator.truediv)


@patch
def __rtruediv__(self: Tensor, other) -> Tensor:
    return self._elementwise("div", other, operator.truediv, reverse=True)


@patch
def __pow__(self: Tensor, exponent) -> Tensor:
    return self._elementwise("pow", exponent, operator.pow)


@patch
def __rpow__(self: Tensor, base) -> Tensor:
    return self._elementwise("pow", base, operator.pow, reverse=True)


# %% [markdown]
# Negation has one input: `-x` records op `"neg"` with inputs `(x,)`.

# %%
#| export
@patch
def __neg__(self: Tensor) -> Tensor:
    """`-self`: records op "neg" with inputs (self,), nothing saved; keeps the dtype."""
    ### BEGIN SOLUTION
    return record_op("neg", -self.data, (self,))
    ### END SOLUTION


# %% [markdown]
# ### Worked example: values, and what `1 - w` records

# %%
a = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
row = Tensor([10.0, 20.0, 30.0])
print("(2,3) + (3,) =\n", (a + row).numpy())
print("(2,1) * (1,3) =\n", (Tensor([[1.0], [2.0]]) * Tensor([[1.0, 2.0, 3.0]])).numpy())
try:
    a + Tensor([1.0, 2.0])
except ValueError as err:
    print("(2,3) + (2,) -> ValueError:", err)
w = Tensor([0.25, 0.5], requires_grad=True)
node = (1 - w)._node
print(f"1 - w = {(1 - w).numpy()} records op {node.op!r} with inputs "
      f"({node.inputs[0].numpy()}, {node.inputs[1].numpy()}): the left operand first")
print("half precision stays half:", (Tensor(np.ones(2, dtype=np.float16)) * 2).dtype)


# %%
def test_unit_elementwise():
    a = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = Tensor([10.0, 20.0, 30.0])
    expect_equal(a + b, [[11, 22, 33], [14, 25, 36]], "(2, 3) + (3,)", "b is added to every row")
    expect_equal(a - b, [[-9, -18, -27], [-6, -15, -24]], "(2, 3) - (3,)")
    expect_equal(a * 2, [[2, 4, 6], [8, 10, 12]], "a * 2")
    expect_equal(a ** 2, [[1, 4, 9], [16, 25, 36]], "a ** 2")
    ignored = "a reflected operator computes fn(other, self): with reverse=True the left operand is `other`"
    expect_equal(1 / a, [[1, 0.5, 1 / 3], [0.25, 0.2, 1 / 6]], "1 / a", ignored)
    expect_equal(2 ** Tensor([1.0, 3.0]), [2, 8], "2 ** Tensor([1, 3])", ignored)
    expect_equal(-a, -a.numpy(), "-a")
    for label, out in (("(2, 3) + (3,)", a + b), ("-a", -a)):
        assert out.dtype == np.float32, f"{label} of float32 tensors must stay float32, got {out.dtype}"
    half = (Tensor(np.ones(2, dtype=np.float16)) * 2).dtype
    assert half == np.float16, f"float16 * 2 must stay float16, got {half}: _operand gives 2 the tensor's dtype"
    w = Tensor([1.0, 2.0], requires_grad=True)
    for name, out in [("1 - w", 1 - w), ("2 / w", 2 / w), ("2 ** w", 2 ** w), ("3 + w", 3 + w), ("w - 1", w - 1)]:
        assert out._node is not None, f"{name} with w.requires_grad must record an op (record_op), got no record"
        at = 0 if name.startswith("w") else 1
        assert out._node.inputs[at] is w, (f"{name} must record its inputs as {'(w, other)' if at == 0 else '(other, w)'}: "
                                           "the left operand first, also for the reflected operators")
    negated = (-w)._node
    assert negated is not None and negated.op == "neg" and negated.inputs == (w,), \
        f"-w must record op 'neg' with inputs (w,) through record_op, got {negated and (negated.op, negated.inputs)}"
    expect_error(ValueError, lambda: a + Tensor([1.0, 2.0]), "(2, 3)", "(2,)", what="(2, 3) + (2,)",
                 cause="catch NumPy's ValueError and call broadcast_shape(left.shape, right.shape), which names both")
    message = expect_error(ValueError, lambda: Tensor(np.array([1, 2])) ** -1, what="int tensor ** -1")
    assert "broadcast" not in message, (f"int ** -1 is not a shape problem, but the error says: {message}: when the "
                                        "shapes do broadcast, re-raise NumPy's own error (a bare `raise`)")
    expect_error(TypeError, lambda: a + None, what="a + None", cause="_operand converts anything else with to_array")
    print("✓ elementwise arithmetic, reflected operators, errors")


test_unit_elementwise()

# %% [markdown]
# ## 8. Matrix multiplication
#
# `(m, k) @ (k, n) -> (m, n)`: output `[i, j]` is the dot product of row `i` of the left
# and column `j` of the right, so the **inner sizes must agree** (`k` on both sides) and
# the outer ones (`m`, `n`) make the result.
#
# * **Batches.** Dimensions before the last two are a batch: `(B, m, k) @ (B, k, n)`
#   multiplies B pairs of matrices at once, and `(B, m, k) @ (k, n)` applies one matrix
#   to every item (a layer's weight applied to a batch). The batch dimensions broadcast
#   by the rule of section 6: `(2, 1, m, k) @ (5, k, n) -> (2, 5, m, n)`.
# * **Vectors.** A 1-D operand is a vector: `(k,) @ (k, n) -> (n,)`,
#   `(m, k) @ (k,) -> (m,)`, `(k,) @ (k,) -> ()`.
# * **No scalars.** A 0-d operand has no rows or columns: `Tensor(2.0) @ x` is an error
#   (use `*`).
#
# `xp.matmul` implements all of this; your job is the bookkeeping and errors a student
# (or a colleague) can act on. NumPy's own message for `(2, 3) @ (4, 5)` speaks of
# "core dimension 0" and "gufunc signature"; yours names both shapes.
#
# One line before your part is given: `autocast_matmul_operands`. It does nothing unless
# mixed precision is switched on, which only module 17's `autocast()` does (matrix products
# in float16, the rest in float32); the switch, `Autocast`, lives here because every matrix
# product passes through this method. Until module 17 you can ignore it.

# %%
#| export
class Autocast:
    """Mixed precision's switch (given). Off by default; module 17's `autocast()` turns it on.

    dtype -- None (off), or the low-precision dtype that matrix products compute in
             (np.float16).
    While it is on, `matmul` casts its floating-point operands to `dtype` and computes in it
    (the result is in `dtype`), and the operations that need float32's range and precision
    (softmax, log_softmax, the losses, layer_norm) compute a `dtype` input in float32 (their
    result is float32). Each conversion is the recorded op "cast" (inputs (x,), nothing
    saved; module 12 registers its backward rule, which returns the gradient in x's dtype), so
    float32 parameters keep float32 values and get float32 gradients.
    """

    dtype: Any = None


def cast(x: "Tensor", dtype: Any) -> "Tensor":
    """x converted to the float `dtype` as the recorded op "cast" (inputs (x,), nothing saved; module
    12 registers its backward rule: the gradient goes back in x's dtype); x itself when it has that
    dtype already. The one way a later module changes a Tensor's dtype inside a graph (module 12's
    attention, module 17's GradScaler)."""
    return x if x.dtype == dtype else record_op("cast", x.data.astype(dtype), (x,))


def autocast_matmul_operands(a: "Tensor", b: "Tensor") -> tuple:
    """(a, b), each cast to `Autocast.dtype` when mixed precision is on and both are floating
    point; (a, b) unchanged otherwise (integer operands are never cast)."""
    if Autocast.dtype is None or not (is_floating(a.data) and is_floating(b.data)):
        return a, b
    return cast(a, Autocast.dtype), cast(b, Autocast.dtype)


def autocast_float32(x: "Tensor") -> "Tensor":
    """x cast up to float32 when mixed precision is on and x is in its low dtype; else x itself.
    The first line of every operation that must run in float32 under autocast."""
    if Autocast.dtype is None or x.dtype != Autocast.dtype:
        return x
    return cast(x, np.float32)


# %%
#| export
@patch
def matmul(self: Tensor, other: Any) -> Tensor:
    """Matrix product `self @ other`, batched over leading dimensions.

    (m, k) @ (k, n) -> (m, n); (..., m, k) @ (..., k, n) -> (..., m, n) with the batch
    dimensions broadcast; a 1-D operand is a vector: (k,) @ (k, n) -> (n,),
    (m, k) @ (k,) -> (m,). Computed with `xp.matmul` (`xp = array_module(self.data)`), in
    the inputs' dtype: float32 @ float32 is float32.

    Records op "matmul" with inputs (self, other), nothing saved.
    Raises ValueError, with both shapes in the message, when
      * either operand is 0-d;
      * the inner sizes differ: `self.shape[-1]` against `other.shape[-2]`
        (`other.shape[0]` when `other` is 1-D);
      * the batch dimensions do not broadcast (`xp.matmul` raises ValueError then).
    Under module 17's autocast the operands arrive cast (given line, below).
    """
    other = _operand(other, self)
    self, other = autocast_matmul_operands(self, other)  # given: a no-op unless autocast is on
    ### BEGIN SOLUTION
    a, b = self.shape, other.shape
    if not a or not b:
        raise ValueError(f"matmul: shapes {a} and {b}: both operands need at least 1 dimension (use * for a scalar).")
    k_left = a[-1]
    k_right = b[-2] if len(b) >= 2 else b[0]
    if k_left != k_right:
        raise ValueError(
            f"matmul: shapes {a} and {b} do not match: the last size of the left ({k_left}) "
            f"must equal the {'second-to-last' if len(b) >= 2 else 'only'} size of the right ({k_right})."
        )
    xp = array_module(self.data)
    if len(a) > 2 and len(b) == 2:
        # One matrix for a whole batch (a Linear layer on (B, T, k)): fold the batch into the
        # rows, one (B·T, k) @ (k, n) product instead of B small ones. The same numbers, a
        # little faster with NumPy and about 3x less overhead with CuPy on a GPU.
        rows = int(np.prod(a[:-1]))
        data = xp.matmul(self.data.reshape(rows, k_left), other.data).reshape(a[:-1] + (b[-1],))
        return record_op("matmul", data, (self, other))
    try:
        data = xp.matmul(self.data, other.data)
    except ValueError:
        raise ValueError(
            f"matmul: the batch dimensions of shapes {a} and {b} do not broadcast "
            f"({a[:-2]} against {b[:-2]})."
        ) from None
    return record_op("matmul", data, (self, other))
    ### END SOLUTION


@patch
def __matmul__(self: Tensor, other) -> Tensor:
    return self.matmul(other)


@patch
def __rmatmul__(self: Tensor, other) -> Tensor:
    return _operand(other, self).matmul(self)  # other @ self: other is the left operand


# %%
x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
ones = Tensor(np.ones((3, 2), dtype=np.float32))
print("(2,3) @ (3,2) =\n", (x @ ones).numpy())
print("batched (4,2,3) @ (3,2) ->", (Tensor(np.ones((4, 2, 3), dtype=np.float32)) @ ones).shape)
print("broadcast batch (2,1,2,3) @ (5,3,4) ->", (Tensor(np.ones((2, 1, 2, 3))) @ Tensor(np.ones((5, 3, 4)))).shape)
print("(2,3) @ (3,) ->", (x @ Tensor([1.0, 1.0, 1.0])).numpy())
try:
    x @ Tensor(np.ones((2, 2)))
except ValueError as err:
    print("(2,3) @ (2,2) -> ValueError:", err)


# %%
def test_unit_matmul():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    w = Tensor([[5.0, 6.0], [7.0, 8.0]])
    expect_equal(product(x, w), [[19, 22], [43, 50]], "[[1, 2], [3, 4]] @ [[5, 6], [7, 8]]",
                 "row i of the left times column j of the right")
    assert product(x, w).dtype == np.float32, f"matmul changed the dtype float32 -> {product(x, w).dtype}: keep the inputs'"
    batch = Tensor(np.arange(12, dtype=np.float32).reshape(3, 2, 2))
    expect_equal(product(batch, w), batch.numpy() @ w.numpy(), "(3, 2, 2) @ (2, 2)", "one matrix for every batch item")
    shape = product(Tensor(np.ones((2, 1, 3, 4))), Tensor(np.ones((5, 4, 2)))).shape
    assert shape == (2, 5, 3, 2), f"(2, 1, 3, 4) @ (5, 4, 2): the batch dims (2, 1) and (5,) broadcast to (2, 5), so (2, 5, 3, 2); got {shape}"
    expect_equal(product(x, Tensor([1.0, 1.0])), [3, 7], "(2, 2) @ (2,)", "a 1-D right operand is a column vector")
    expect_equal(product(Tensor([1.0, 1.0]), w), [12, 14], "(2,) @ (2, 2)", "a 1-D left operand is a row vector")
    expect_equal(product(Tensor([1.0, 2.0]), Tensor([3.0, 4.0])), 11.0, "(2,) @ (2,)", "a dot product, 0-d")
    node = product(Tensor(np.ones((2, 2)), requires_grad=True), w)._node
    assert node is not None and node.op == "matmul", f"matmul must record op 'matmul', got {node and node.op!r}"
    assert len(node.inputs) == 2 and node.inputs[1] is w, "matmul must record its inputs as (self, other), the left first"
    assert node.saved == {}, f"matmul saves nothing, got {sorted(node.saved)}"
    expect_error(ValueError, lambda: Tensor(np.ones((2, 3))) @ Tensor(np.ones((4, 5))), "(2, 3)", "(4, 5)",
                 what="(2, 3) @ (4, 5)", cause="the inner sizes 3 and 4 differ")
    expect_error(ValueError, lambda: Tensor(np.ones((2, 2, 3))) @ Tensor(np.ones((3, 3, 4))), "(2, 2, 3)", "(3, 3, 4)",
                 what="(2, 2, 3) @ (3, 3, 4)", cause="the batch dimensions 2 and 3 do not broadcast")
    expect_error(ValueError, lambda: Tensor(2.0) @ Tensor([1.0]), "()", "(1,)", what="Tensor(2.0) @ (1,)",
                 cause="a 0-d operand has no rows or columns: refuse it, naming both shapes")
    print("✓ matmul, batched and 1-D")


test_unit_matmul()

# %% [markdown]
# ### The cost of a matmul
#
# Each of the `m·n` outputs is a dot product of length `k`: `k` multiplications and `k`
# additions. So `(m, k) @ (k, n)` costs **`2·m·n·k` floating-point operations** (FLOPs),
# and a square `(n, n) @ (n, n)` costs `2n³`: doubling `n` multiplies the work by 8.
# A computer's speed is quoted in FLOP/s; dividing the work by the time measures how much
# of it we get.
#
# **Predict, then run.** Write down: (1) how many MFLOP (10⁶ FLOP) one `(512, 512) @ (512,
# 512)` costs; (2) how many times longer you expect `n = 512` to take than `n = 256`;
# (3) whether the GFLOP/s rate will be the same for every `n`. Then run the cell: it times
# *your* `matmul`.
#
# How we time: the best of a few runs (the one least disturbed by other programs), on
# **one** core. NumPy's matrix library (BLAS) starts several threads for a matmul; on a
# busy or small machine, waking them can cost more than a small product itself, and the
# numbers jump around from run to run. `threadpoolctl` (a small library made for exactly
# this) holds BLAS to one thread while we measure, so your numbers are repeatable and
# comparable with a classmate's.

# %%
import time

from threadpoolctl import threadpool_limits


def best_time(fn, repeats: int = 5) -> float:
    """The fastest of `repeats` runs of fn(), in seconds, with BLAS on one thread."""
    with threadpool_limits(limits=1):
        fn()  # a first call pays for warming up caches and libraries: not counted
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
    return best


previous = None
for n in (64, 128, 256, 512):
    square = Tensor(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32))
    seconds = best_time(lambda: square @ square)
    growth = f"{seconds / previous:5.1f}× the previous n" if previous else ""
    print(f"n={n:4d}: {2 * n**3 / 1e6:7.1f} MFLOP in {seconds * 1e3:7.3f} ms = "
          f"{2 * n**3 / seconds / 1e9:6.1f} GFLOP/s  {growth}")
    previous = seconds

# %% [markdown]
# Small matmuls reach a fraction of the big ones' rate: a fixed cost per call (Python,
# `record_op`, starting the BLAS library) is paid however little work there is. That is
# why frameworks batch work into few large operations, and why the batched matmul above
# beats a Python loop over the batch (exercise 3).
#
# ## 9. Reductions: `sum`, `mean`, `max`
#
# A reduction combines the values along some axes. `axis` may be None (everything), an
# int, or a tuple of ints; a negative axis counts from the end (`-1` is the last).
# `keepdims=True` keeps each reduced axis as size 1 instead of dropping it, so the result
# still broadcasts against the input: `x - x.max(axis=-1, keepdims=True)` subtracts each
# row's maximum from that row (the first line of a stable softmax, module 02).
#
# Module 05 differentiates a reduction by putting the reduced axes back, so the record
# must say *which* axes, in one agreed form: the given `_normalize_axis` turns `-1`,
# `(2, 0)` or `2` on a 3-D tensor into `(2,)`, `(0, 2)`, `(2,)` (a **sorted tuple of
# non-negative ints**, or None for "all axes") and raises ValueError for an axis that
# does not exist. Reduce with the normalised axes and save them.
#
# Keep the input's dtype: `xp.sum` of a float32 array *is* float32. A reduction computed
# in float64 "for accuracy" silently doubles the memory of every later step.

# %%
#| export
def _normalize_dim(dim: int, ndim: int) -> int:
    """A dimension index (negatives count from the end) as a non-negative int. Given code.

    Raises ValueError naming the dim and ndim when the tensor has no such dimension.
    """
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim {dim} is out of range for a tensor with {ndim} dimension(s): "
                         f"use 0 to {ndim - 1}, or -{ndim} to -1 from the end.")
    return int(dim) % ndim


def _normalize_axis(axis: Any, ndim: int) -> tuple[int, ...] | None:
    """None, an int or a tuple of ints (negatives allowed) -> None or a sorted tuple of non-negative ints.

    Given code. `_normalize_axis(-1, 3) == (2,)`, `_normalize_axis((2, 0), 3) == (0, 2)`.
    Raises ValueError ("axis 3 is out of range ...") for an axis the tensor does not have.
    """
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor with {ndim} dimension(s).")
        out.append(int(a) % max(ndim, 1))
    return tuple(sorted(out))


@patch
def sum(self: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (None: all; an int or a tuple; negatives count from the end).

    `axes = _normalize_axis(axis, self.ndim)` (given), then `xp.sum(self.data, axis=axes,
    keepdims=keepdims)`: the result keeps the input's dtype, and with `keepdims=True` the
    reduced axes stay as size 1.
    Records op "sum" with inputs (self,), saved `axis=axes` (the normalised tuple, or
    None) and `keepdims=keepdims`.
    """
    ### BEGIN SOLUTION
    axes = _normalize_axis(axis, self.ndim)
    data = array_module(self.data).sum(self.data, axis=axes, keepdims=keepdims)
    return record_op("sum", data, (self,), axis=axes, keepdims=keepdims)
    ### END SOLUTION


@patch
def mean(self: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Average over `axis`; the same axis rules, dtype and keepdims as `sum`.

    A floating tensor keeps its dtype. An integer tensor's mean is float64, as NumPy
    gives it: the average of integers is not an integer (and integers take no gradient).

    Computed with `xp.mean` and recorded as its own op "mean" (not as a sum and a
    division), inputs (self,), saved `axis` (normalised) and `keepdims`.
    """
    ### BEGIN SOLUTION
    axes = _normalize_axis(axis, self.ndim)
    data = array_module(self.data).mean(self.data, axis=axes, keepdims=keepdims)
    return record_op("mean", data, (self,), axis=axes, keepdims=keepdims)
    ### END SOLUTION


@patch
def max(self: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Largest value over `axis`; the same axis rules, dtype and keepdims as `sum`.

    Computed with `xp.max`. Records op "max" with inputs (self,), saved `axis`
    (normalised), `keepdims`, and `out`: the result's array itself (the backward rule
    compares the input with it to find which elements were the maximum).
    """
    ### BEGIN SOLUTION
    axes = _normalize_axis(axis, self.ndim)
    data = array_module(self.data).max(self.data, axis=axes, keepdims=keepdims)
    return record_op("max", data, (self,), axis=axes, keepdims=keepdims, out=data)
    ### END SOLUTION


# %%
x = Tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
print("x.sum() =", x.sum().item(), "| x.sum(axis=0) =", x.sum(axis=0).numpy(),
      "| x.mean(axis=-1) =", x.mean(axis=-1).numpy())
row_max = x.max(axis=-1, keepdims=True)
print("x.max(axis=-1, keepdims=True) has shape", row_max.shape, "->", row_max.numpy().tolist())
print("x - row_max =\n", (x - row_max).numpy())
w = Tensor(np.ones((2, 3, 4), dtype=np.float32), requires_grad=True)
print("w.sum(axis=(-1, 0)) saves", w.sum(axis=(-1, 0))._node.saved)


# %%
def test_unit_reductions():
    x = Tensor(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    ref = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    expect_equal(x.sum(), 276, "arange(24).sum()", "axis=None sums every element")
    expect_equal(x.sum(axis=-1), ref.sum(-1), "x.sum(axis=-1) on (2, 3, 4)", "-1 is the last axis")
    kept = x.sum(axis=(0, 2), keepdims=True).shape
    assert kept == (1, 3, 1), f"x.sum(axis=(0, 2), keepdims=True) must keep the reduced axes as size 1, (1, 3, 1); got {kept}"
    expect_equal(x.mean(axis=1), ref.mean(1), "x.mean(axis=1)")
    expect_equal(x.max(axis=-2), [[8, 9, 10, 11], [20, 21, 22, 23]], "x.max(axis=-2)")
    w = Tensor(np.ones((2, 3, 4), dtype=np.float32), requires_grad=True)
    for name in ("sum", "mean", "max"):
        out = getattr(w, name)(axis=(-1, 0))
        assert out.dtype == np.float32, f"{name} changed the dtype float32 → {out.dtype}: keep the input's dtype"
        node = out._node
        assert node is not None and node.op == name, (f"{name} must record its own op {name!r}, got "
                                                      f"{node and node.op!r}: one record_op call, not a composition")
        axis, keepdims = node.saved.get("axis", "nothing"), node.saved.get("keepdims", "nothing")
        assert axis == (0, 2), f"{name}(axis=(-1, 0)) must save the normalised axis (0, 2) (sorted, non-negative), got {axis}"
        assert keepdims is False, f"{name} must save keepdims=False as given, got {keepdims!r}"
    top = w.max(axis=1, keepdims=True)
    assert "out" in top._node.saved and np.array_equal(top._node.saved["out"], top.data), \
        f"max must save out, its result's array; it saved {sorted(top._node.saved)}"
    saved = w.sum()._node.saved
    assert saved == {"axis": None, "keepdims": False}, f"w.sum() must save axis=None, keepdims=False; got {saved}"
    expect_error(ValueError, lambda: x.sum(axis=3), "axis 3", what="x.sum(axis=3) on a 3-D tensor",
                 cause="_normalize_axis (given) refuses an axis that does not exist")
    print("✓ sum, mean, max")


test_unit_reductions()

# %% [markdown]
# ## 10. Elementwise functions: `exp`, `log`, `sqrt`
#
# One NumPy call each (`xp.exp`, `xp.log`, `xp.sqrt`), keeping the dtype. What they save
# follows from their derivatives, which module 05 uses: `(eˣ)' = eˣ` and
# `(√x)' = 1 / (2√x)` are both made of the *output*, already computed here, so `exp` and
# `sqrt` save it as `out`; `(ln x)' = 1/x` needs only the input, so `log` saves nothing.

# %%
#| export
@patch
def exp(self: Tensor) -> Tensor:
    """e to the power of each element, same dtype. Records op "exp", inputs (self,), saved `out` (the result's array)."""
    ### BEGIN SOLUTION
    data = array_module(self.data).exp(self.data)
    return record_op("exp", data, (self,), out=data)
    ### END SOLUTION


@patch
def log(self: Tensor) -> Tensor:
    """Natural logarithm of each element, same dtype. Records op "log", inputs (self,), nothing saved."""
    ### BEGIN SOLUTION
    return record_op("log", array_module(self.data).log(self.data), (self,))
    ### END SOLUTION


@patch
def sqrt(self: Tensor) -> Tensor:
    """Square root of each element, same dtype. Records op "sqrt", inputs (self,), saved `out` (the result's array)."""
    ### BEGIN SOLUTION
    data = array_module(self.data).sqrt(self.data)
    return record_op("sqrt", data, (self,), out=data)
    ### END SOLUTION


# %%
values = Tensor([0.0, 1.0, 4.0])
print("exp:", values.exp().numpy(), "| sqrt:", values.sqrt().numpy(), "| log(1 + x):", (1 + values).log().numpy())


# %%
def test_unit_exp_log_sqrt():
    expect_equal(Tensor([0.0, 1.0]).exp(), [1, np.e], "exp([0, 1])")
    expect_equal(Tensor([1.0, np.e]).log(), [0, 1], "log([1, e])", "the natural logarithm")
    expect_equal(Tensor([1.0, 4.0]).sqrt(), [1, 2], "sqrt([1, 4])")
    w = Tensor([1.0, 4.0], requires_grad=True)
    for name in ("exp", "log", "sqrt"):
        out = getattr(w, name)()
        assert out.dtype == np.float32, f"{name} changed the dtype float32 → {out.dtype}: keep the input's dtype"
        node = out._node
        assert node is not None and node.op == name and node.inputs == (w,), \
            f"{name} must record op {name!r} with inputs (self,), got {node and (node.op, len(node.inputs))}"
    for name in ("exp", "sqrt"):
        out = getattr(w, name)()
        assert np.array_equal(out._node.saved.get("out"), out.data), \
            f"{name} must save out, its result's array (not the input): {name}'s derivative is made of its output"
    saved = w.log()._node.saved
    assert saved == {}, f"log saves nothing (its derivative 1/x needs only the input), got {sorted(saved)}"
    print("✓ exp, log, sqrt")


test_unit_exp_log_sqrt()

# %% [markdown]
# ## 11. Shapes and views: `reshape`, `transpose`, `permute`
#
# A NumPy array is a block of memory plus a recipe for reading it: the shape, and the
# *strides* (how many bytes to step for the next index along each axis). Many shape
# changes only need a new recipe over the **same memory**: such a result is a **view**.
# Making one takes microseconds whatever the size, and writing into it writes into the
# original. A **copy** allocates new memory and moves every number.
#
# * `reshape` of an array whose elements lie in order in memory is a view. (Of a
#   transposed array it must copy: the order it would have to read is no longer a
#   simple stride. NumPy decides; `self.data.reshape(shape)` does the right thing.)
# * `transpose` and `permute` are always views: only the strides are reordered.
# * Basic slicing (`x[1:, ::2]`) is a view; integer-array indexing (`x[[0, 0, 2]]`) is
#   always a copy (section 12).
#
# A transpose is a special permute (two dimensions swapped), so `transpose` builds the
# full order of dimensions and calls `permute`: one op, `"permute"`, with one backward rule.
# `permute(*dims)` must be given every dimension once: on a 2-D tensor `permute(2, 1)`
# is an error, not something to wrap around.

# %%
#| export
@patch
def reshape(self: Tensor, *shape: Any) -> Tensor:
    """Same values in a new shape: `x.reshape(2, 3)` or `x.reshape((2, 3))`; one size may be -1.

    A view, not a copy: use `self.data.reshape(shape)`, which shares memory whenever it can.
    Records op "reshape" with inputs (self,), nothing saved.
    Raises ValueError naming this tensor's shape and the requested shape when the number
    of elements differs (NumPy raises ValueError then: catch it and raise your own).
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])  # reshape((2, 3)) means reshape(2, 3)
    ### BEGIN SOLUTION
    try:
        data = self.data.reshape(shape)
    except ValueError:
        raise ValueError(
            f"reshape: cannot view shape {self.shape} ({self.size} elements) as {tuple(shape)}."
        ) from None
    return record_op("reshape", data, (self,))
    ### END SOLUTION


@patch
def permute(self: Tensor, *dims: Any) -> Tensor:
    """Reorder dimensions: output dim i is input dim dims[i]. `(B, T, H, D).permute(0, 2, 1, 3)` is `(B, H, T, D)`.

    `x.permute(2, 0, 1)` or `x.permute((2, 0, 1))`: ints; negative dims count from the end.
    A view: `xp.transpose(self.data, order)` (NumPy's name for a general permute).
    Records op "permute" with inputs (self,), saved `dims`: the order as a tuple of
    non-negative ints (e.g. (2, 0, 1); -1 becomes ndim - 1).
    Raises ValueError naming the dims as given and the tensor's ndim unless the dims,
    after turning negatives non-negative, are each of 0 .. ndim-1 exactly once
    (`permute(2, 1)` on a 2-D tensor: dim 2 does not exist).
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])  # permute((2, 0, 1)) means permute(2, 0, 1)
    ### BEGIN SOLUTION
    ndim = self.ndim
    order = tuple(int(d) + ndim if d < 0 else int(d) for d in dims)
    if sorted(order) != list(range(ndim)):
        raise ValueError(
            f"permute{tuple(dims)}: a tensor with {ndim} dimensions (shape {self.shape}) needs each "
            f"of the dims 0..{ndim - 1} exactly once (negatives count from the end)."
        )
    data = array_module(self.data).transpose(self.data, order)
    return record_op("permute", data, (self,), dims=order)
    ### END SOLUTION


@patch
def transpose(self: Tensor, dim0: int = -2, dim1: int = -1) -> Tensor:
    """Swap two dimensions (by default the last two: a batch of matrices transposed).

    Raises ValueError naming the shape when the tensor has fewer than 2 dimensions;
    `_normalize_dim(dim, self.ndim)` (given) turns each dim non-negative and raises for
    one that does not exist. Build the order 0..ndim-1 with dim0 and dim1 swapped and
    `return self.permute(order)`: a transpose is recorded as op "permute" (saved `dims`).
    """
    ### BEGIN SOLUTION
    if self.ndim < 2:
        raise ValueError(f"transpose needs at least 2 dimensions, got shape {self.shape}.")
    order = list(range(self.ndim))
    d0, d1 = _normalize_dim(dim0, self.ndim), _normalize_dim(dim1, self.ndim)
    order[d0], order[d1] = order[d1], order[d0]
    return self.permute(order)
    ### END SOLUTION


# %%
x = Tensor(np.arange(6, dtype=np.float32))
grid = x.reshape(2, 3)
print("x.reshape(2, 3) =\n", grid.numpy(), "\nshares x's memory:", np.shares_memory(grid.data, x.data))
flipped = Tensor(grid.data, requires_grad=True).transpose()
print("grid.transpose() =\n", flipped.numpy(), "\nrecorded as", repr(flipped._node.op), "with", flipped._node.saved)
print("a (2, 3, 4, 5) tensor .permute(0, 2, 1, 3) has shape", Tensor(np.zeros((2, 3, 4, 5))).permute(0, 2, 1, 3).shape)
try:
    grid.permute(2, 1)
except ValueError as err:
    print("grid.permute(2, 1) -> ValueError:", err)


# %%
def test_unit_shapes_and_views():
    x = Tensor(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    ref = x.numpy()
    for args, shape in (((4, 6), (4, 6)), (((-1,),), (24,))):
        got = x.reshape(*args).shape
        assert got == shape, f"x.reshape{args if len(args) > 1 else '(' + str(args[0]) + ')'} on (2, 3, 4): expected {shape}, got {got}"
    assert np.shares_memory(x.reshape(4, 6).data, x.data), "reshape copied the data: return a view (self.data.reshape)"
    expect_error(ValueError, lambda: x.reshape(5, 5), "(2, 3, 4)", "(5, 5)", what="(2, 3, 4).reshape(5, 5)",
                 cause="24 elements cannot be viewed as 25: catch NumPy's ValueError and raise one naming both shapes")
    negative = "a negative dim counts from the end: turn it into ndim + dim before checking"
    swap = "transpose swaps dims dim0 and dim1 (by default the last two): build 0 .. ndim-1 with those two exchanged"
    for label, got, expected, cause in (
            ("x.permute(2, 0, 1)", lambda: x.permute(2, 0, 1), ref.transpose(2, 0, 1), "output dim i is input dim dims[i]"),
            ("x.transpose()", lambda: x.transpose(), ref.transpose(0, 2, 1), swap),
            ("x.transpose(0, -1)", lambda: x.transpose(0, -1), ref.transpose(2, 1, 0), swap),
            ("x.permute(-1, 0, 1)", lambda: x.permute(-1, 0, 1), ref.transpose(2, 0, 1), "output dim i is input dim dims[i]")):
        try:
            result = got()
        except ValueError as err:
            raise AssertionError(f"{label} on (2, 3, 4) is valid but raised ValueError ({err}): {negative}") from None
        expect_equal(result, expected, label, cause)
    assert np.shares_memory(x.permute(1, 2, 0).data, x.data), "permute copied the data: return a view (xp.transpose)"
    w = Tensor(ref, requires_grad=True)
    saved = w.permute(-1, 0, 1)._node.saved
    assert saved == {"dims": (2, 0, 1)}, f"permute(-1, 0, 1) must save dims=(2, 0, 1), non-negative ints; got {saved}"
    node = w.transpose()._node
    assert node is not None and node.op == "permute", \
        f"transpose recorded op {node and node.op!r}: a transpose is recorded as 'permute' (it calls self.permute)"
    assert node.saved == {"dims": (0, 2, 1)}, f"w.transpose() on 3-D must save dims=(0, 2, 1), got {node.saved}"
    recorded = w.reshape(6, 4)._node
    assert recorded is not None and recorded.op == "reshape", f"reshape must record op 'reshape', got {recorded and recorded.op!r}"
    expect_error(ValueError, lambda: Tensor(np.ones((3, 4))).permute(2, 1), "(2, 1)", what="a 2-D tensor's permute(2, 1)",
                 cause="dim 2 does not exist: every dim 0 .. ndim-1 exactly once, nothing wraps around")
    expect_error(ValueError, lambda: x.permute(0, 1, 7), "(0, 1, 7)", "3", what="permute(0, 1, 7) on 3 dims")
    expect_error(ValueError, lambda: x.permute(0, 0, 1), "(0, 0, 1)", what="permute(0, 0, 1)",
                 cause="dim 0 twice, dim 2 missing")
    expect_error(ValueError, lambda: Tensor([1.0, 2.0]).transpose(), "(2,)", what="a 1-D tensor's transpose()",
                 cause="a transpose needs at least 2 dimensions")
    print("✓ reshape, permute, transpose: views, recorded as reshape and permute")


test_unit_shapes_and_views()

# %% [markdown]
# ### Predict, then run: a view against a copy
#
# `big` below holds 4 million float32 numbers (16 MiB). Write down how long you expect
# `big.reshape(2000, 2000)` to take, and how long a copy of it (`big.data.copy()`), and
# what their ratio will be. Then run the cell.

# %%
big = Tensor(np.ones(4_000_000, dtype=np.float32))
view_seconds = best_time(lambda: big.reshape(2000, 2000))
copy_seconds = best_time(lambda: big.data.copy())
print(f"reshape (a view): {view_seconds * 1e6:8.1f} µs | copy: {copy_seconds * 1e6:8.1f} µs | "
      f"copy / view = {copy_seconds / view_seconds:,.0f}×")

# %% [markdown]
# ## 12. Indexing and masks: `x[index]`, `masked_fill`
#
# `x[index]` takes NumPy's indices: ints, slices, `None` (a new axis of size 1), `...`,
# and integer arrays, which *gather*: `x[[2, 0, 2]]` is rows 2, 0 and 2 (row 2 twice, a
# copy). Two kinds of index need converting before NumPy sees them: a **Tensor** of
# indices (NumPy does not know Tensors: use its `.data`) and a **list** (turn it into an
# array on the tensor's device with `xp.asarray`, so that module 05 and CuPy get an
# array). Inside a tuple index (`x[[0, 1], [1, 2]]`), convert each element the same way.
# The backward rule needs the index, so save it, converted.
#
# `masked_fill(mask, value)` returns a copy of `x` with `value` wherever `mask` is
# **True** (PyTorch's convention: True means "replace this"). Attention uses it to hide
# future tokens (module 12). The mask may be a Tensor, an array or a list, and broadcasts
# against `x`, but must not make the result larger than `x`.

# %%
#| export
@patch
def __getitem__(self: Tensor, index: Any) -> Tensor:
    """`self[index]` as in NumPy: ints, slices, None, ..., integer arrays (or Tensors or lists of ints).

    Convert the index first: a Tensor becomes its `.data`; a list becomes
    `xp.asarray(index)` (`xp = array_module(self.data)`); in a tuple, each element is
    converted the same way (a Tensor to its `.data`, a list to an array; ints, slices,
    None and ... stay). Then `self.data[index]`.
    Records op "getitem" with inputs (self,), saved `index`: the converted index.
    """
    ### BEGIN SOLUTION
    xp = array_module(self.data)

    def convert(part: Any) -> Any:
        if isinstance(part, Tensor):
            return part.data
        return xp.asarray(part) if isinstance(part, list) else part

    index = tuple(convert(i) for i in index) if isinstance(index, tuple) else convert(index)
    return record_op("getitem", self.data[index], (self,), index=index)
    ### END SOLUTION


@patch
def masked_fill(self: Tensor, mask: Any, value: float) -> Tensor:
    """A copy of `self` with `value` wherever `mask` is True (as in PyTorch), in self's dtype.

    mask -- Tensor, array or list; converted with `to_array(mask, device=self.device)`
            then `.astype(bool)`; must broadcast to self's shape *without enlarging it*
            (`broadcast_shape(mask.shape, self.shape) == self.shape`).
    Computed with `xp.where(mask, value, self.data)`, the value cast to self's dtype
    (`xp.asarray(value, dtype=self.dtype)`).
    Records op "masked_fill" with inputs (self,), saved `mask`: the bool array.
    Raises ValueError naming the mask's shape and self's shape when the mask does not fit,
    also when the two shapes do not broadcast at all (catch `broadcast_shape`'s own
    ValueError and raise this one, so the message says which call went wrong).
    `value` must fit self's dtype: filling an integer tensor with `-inf` is an error
    (NumPy raises OverflowError); attention fills float scores.
    """
    ### BEGIN SOLUTION
    xp = array_module(self.data)
    fill_here = to_array(mask, device=self.device).astype(bool)
    try:
        fits = broadcast_shape(fill_here.shape, self.shape) == self.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"masked_fill: mask of shape {tuple(fill_here.shape)} does not broadcast to the tensor's shape {self.shape}."
        )
    data = xp.where(fill_here, xp.asarray(value, dtype=self.dtype), self.data)
    return record_op("masked_fill", data, (self,), mask=fill_here)
    ### END SOLUTION


# %%
x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
print("x[1] =", x[1].numpy(), "| x[:, 1:3] =", x[:, 1:3].numpy().tolist())
print("x[[2, 0, 2]][:, 0] =", x[[2, 0, 2]][:, 0].numpy(), "| x[Tensor([2, 0]), 1] =", x[Tensor(np.array([2, 0])), 1].numpy())
print("slice shares memory:", np.shares_memory(x[:, 1:3].data, x.data),
      "| gather shares memory:", np.shares_memory(x[[2, 0, 2]].data, x.data))
causal = np.triu(np.ones((3, 3), dtype=bool), k=1)  # True above the diagonal: the future
print("future positions filled with -inf:\n", Tensor(np.zeros((3, 3))).masked_fill(causal, -np.inf).numpy())


# %%
def test_unit_indexing_and_masks():
    x = Tensor(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    ref = x.numpy()
    expect_equal(x[1, 2], [20, 21, 22, 23], "x[1, 2]")
    expect_equal(x[0, :, 1:3], [[1, 2], [5, 6], [9, 10]], "x[0, :, 1:3]")
    expect_equal(x[None, 0], ref[None, 0], "x[None, 0]")
    expect_equal(x[..., -1], ref[..., -1], "x[..., -1]")
    rows = np.array([2, 0, 2])
    expect_equal(x[0][[2, 0, 2]], ref[0][rows], "x[0][[2, 0, 2]]", "a list of ints gathers rows: convert it with xp.asarray")
    for label, index, expected in (("x[0][Tensor([2, 0, 2])]", lambda: x[0][Tensor(rows)], ref[0][rows]),
                                   ("x[0, Tensor([2, 0, 2]), 1]", lambda: x[0, Tensor(rows), 1], ref[0, rows, 1])):
        try:
            got = index()
        except IndexError as err:
            raise AssertionError(f"{label} raised IndexError ({err}): NumPy does not know Tensors; turn a Tensor "
                                 "index into its .data, also inside a tuple index") from None
        expect_equal(got, expected, label, "a Tensor index gives its .data, also inside a tuple index")
    w = Tensor(ref, requires_grad=True)
    node = w[[1, 1]]._node
    assert node is not None and node.op == "getitem", f"indexing must record op 'getitem', got {node and node.op!r}"
    index = node.saved.get("index")
    assert isinstance(index, np.ndarray), (f"getitem must save a list index as an array (xp.asarray(index)), got "
                                           f"{type(index).__name__} {index!r}")
    filled = x.masked_fill(ref > 20, -1.0).numpy()
    assert filled.reshape(-1)[-3:].tolist() == [-1, -1, -1] and filled[0, 0, 0] == 0, (
        f"masked_fill(x > 20, -1) must put -1 where the mask is True (the last 3 elements) and keep x elsewhere; got "
        f"{filled.reshape(-1)[-4:].tolist()} at the end and {filled[0, 0, 0]} at [0, 0, 0]")
    assert x.numpy()[1, 2, 3] == 23, "masked_fill changed x itself: return a copy (xp.where) and leave x alone"
    row_mask = Tensor(np.array([True, False, False, True]))
    try:
        by_row = x.masked_fill(row_mask, 0.0)
    except ValueError as err:
        raise AssertionError(f"a (4,) mask broadcasts to x's (2, 3, 4) without enlarging it, yet masked_fill refused it "
                             f"({err}): the mask fits when broadcast_shape(mask.shape, x.shape) == x.shape") from None
    expect_equal(by_row[1, 2], [0, 21, 22, 0], "masked_fill with a (4,) mask, row [1, 2]", "the mask broadcasts against x")
    kept = x.masked_fill([[[1, 0, 0, 0]]], 5.0).dtype
    assert kept == np.float64, f"masked_fill of a float64 tensor must stay float64, got {kept}: cast the value to self's dtype"
    saved = w.masked_fill(ref > 20, 0.0)._node.saved.get("mask")
    assert saved is not None and saved.dtype == bool and saved.sum() == 3, \
        f"masked_fill must save the mask as a bool array, True = filled (3 of them here); got {saved!r}"
    expect_error(ValueError, lambda: x.masked_fill(np.ones((3, 2), dtype=bool), 0.0), "(3, 2)", "(2, 3, 4)",
                 what="a (3, 2) mask on a (2, 3, 4) tensor", cause="the shapes do not broadcast")
    expect_error(ValueError, lambda: x.masked_fill(np.ones((5, 2, 3, 4), dtype=bool), 0.0), "(5, 2, 3, 4)", "(2, 3, 4)",
                 what="a (5, 2, 3, 4) mask on a (2, 3, 4) tensor",
                 cause="the mask would make the result larger than x: require broadcast_shape(mask, x) == x.shape")
    print("✓ indexing and masked_fill")


test_unit_indexing_and_masks()

# %% [markdown]
# ## 13. Devices
#
# `x.to("cuda")` (given, in the class) returns the same values as a CuPy array on the
# GPU, recorded as op `"to"` with the device it came from saved, so module 05 can send
# the gradient back. `x.cpu()` and `x.cuda()` are shorthands. Every operation above takes
# `xp` from its input, so it runs on whichever device the data is on, and `_operand`
# refuses to combine tensors from two devices instead of copying one silently.
# `device="cuda"` without CuPy or without a GPU raises a RuntimeError that says which is
# missing.

# %%
import importlib.util


def test_unit_devices():
    t = Tensor([1.0, 2.0])
    assert t.device == "cpu", f"a tensor made from a list lives on the CPU, got device {t.device!r}"
    assert t.cpu() is t and t.to("cpu") is t, "moving a tensor to the device it is on returns the tensor itself"
    assert isinstance(t.numpy(), np.ndarray) and isinstance(to_host(t), np.ndarray), \
        f"numpy() and to_host() give NumPy arrays, got {type(t.numpy()).__name__} and {type(to_host(t)).__name__}"
    assert Tensor([3.0]).item() == 3.0 and as_tensor(t) is t, "item() gives the one number; as_tensor(t) is t itself"
    if importlib.util.find_spec("cupy") is None:
        expect_error(RuntimeError, lambda: Tensor([1.0], device="cuda"), "CuPy", what='Tensor([1.0], device="cuda")',
                     cause="without CuPy, to_array's _to_device raises (given: cuda_module)")
    print("✓ devices")


test_unit_devices()

# %% [markdown]
# ## 14. Leaves, and keeping an intermediate gradient
#
# A **leaf** is a tensor nobody computed for you: a weight, an input, anything built with
# `Tensor(...)`. It has no record (`_node is None`); every result of an operation on a
# tensor that requires a gradient has one. After `loss.backward()`, module 05 writes
# `.grad` only to leaves that require a gradient: those are what an optimizer updates.
# The gradients of intermediate results are used once, on the way back, and then freed.
# To look at one anyway (to debug, or to plot what attention passes back), call
# `t.retain_grad()` on it before the backward pass, as in PyTorch. Both are given.

# %%
#| export
@patch(as_prop=True)
def is_leaf(self: Tensor) -> bool:
    """True for a tensor not made by a recorded operation (`_node is None`): weights, inputs, constants."""
    return self._node is None


@patch
def retain_grad(self: Tensor) -> None:
    """Ask module 05's backward pass to keep this (intermediate) tensor's `.grad`.

    Sets `_retains_grad`. A tensor that does not require a gradient has none to keep:
    RuntimeError, as in PyTorch.
    """
    if not self.requires_grad:
        raise RuntimeError("retain_grad() on a tensor that does not require a gradient: "
                           "it will never have one. Build it from tensors with requires_grad=True.")
    self._retains_grad = True


# %% [markdown]
# ## 15. Versions: when the data changes under the graph
#
# The graph keeps *references* to its input tensors, not copies: `y = w * x` remembers
# `w` and `x` and, in module 05, multiplies the gradient by `x.data`. If `x.data` is
# replaced between the forward pass and `backward()`, the gradient would silently use the
# new values. So every tensor carries a counter, `_version`:
#
# * it is 0 when the tensor is made (by `Tensor(...)` or by `record_op`);
# * every assignment to `t.data` adds 1 (`t.data = new_array`, and `t.data += 1`, which
#   Python runs as `t.data = t.data.__iadd__(1)`);
# * each `Node` notes its inputs' versions when it is made (`node.versions`), and module
#   05 refuses to run a backward rule whose inputs have changed since.
#
# One hole remains, and you should know it: a change made *through* the array,
# `t.data[0] = 5`, modifies the array in place without assigning `t.data`, and the
# counter cannot see it. Do not change tensors between the forward pass and `backward()`.

# %%
t = Tensor([1.0, 2.0], requires_grad=True)
y = t * 3
print("made:", t._version, "| node.versions:", y._node.versions)
t.data = np.array([5.0, 6.0], dtype=np.float32)
print("after t.data = ...:", t._version)
t.data += 1
print("after t.data += 1:", t._version)
t.data[0] = 100.0
print("after t.data[0] = 100:", t._version, "(invisible to the counter)")
print("t.is_leaf:", t.is_leaf, "| y.is_leaf:", y.is_leaf)


# %%
def test_unit_versions_and_leaves():
    t = Tensor([1.0, 2.0], requires_grad=True)
    assert (t._version, t.is_leaf, t._retains_grad) == (0, True, False), \
        f"a new tensor: version 0, a leaf, not retaining its gradient; got {(t._version, t.is_leaf, t._retains_grad)}"
    y = t * 2
    assert y._node is not None and not y.is_leaf, "t * 2 with t.requires_grad is recorded: not a leaf"
    assert y._version == 0 and y._node.versions == (0, 0) and not y._retains_grad, \
        f"a result starts at version 0 and its node notes its inputs' versions (0, 0); got {y._version}, {y._node.versions}"
    t.data = np.array([3.0, 4.0])
    t.data += 1
    assert t._version == 2 and t.numpy().tolist() == [4.0, 5.0], \
        f"two assignments to .data make version 2 (values [4, 5]); got version {t._version}, values {t.numpy().tolist()}"
    versions = (t * 2)._node.versions
    assert versions == (2, 0), f"a node made now notes t at version 2 (and the constant 2 at 0), got {versions}"
    y.retain_grad()
    assert y._retains_grad, "retain_grad() sets _retains_grad"
    expect_error(RuntimeError, lambda: Tensor([1.0]).retain_grad(), what="retain_grad() without requires_grad")
    assert Tensor([1.0]).is_leaf and (Tensor([1.0]) * 2).is_leaf, "a result that needs no gradient is not recorded: a leaf"
    print("✓ versions, leaves, retain_grad")


test_unit_versions_and_leaves()


# %% [markdown]
# ## 16. The whole record, checked at once
#
# The table of section 3, as a test: every operation, its op name, its inputs and what it
# saves. If this passes, module 05 can differentiate everything you wrote.

# %%
def test_unit_graph_record():
    w = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    x = Tensor(np.ones((2, 2)))
    mask = np.eye(2, dtype=bool)
    cases = [  # (result, op, inputs, saved)
        (w + x, "add", (w, x), {}), (1 - w, "sub", (None, w), {}), (2 * w, "mul", (None, w), {}),
        (w / x, "div", (w, x), {}), (2 ** w, "pow", (None, w), {}), (-w, "neg", (w,), {}),
        (w @ x, "matmul", (w, x), {}), (w.sum(-1), "sum", (w,), {"axis": (1,), "keepdims": False}),
        (w.mean(), "mean", (w,), {"axis": None, "keepdims": False}),
        (w.max(0, keepdims=True), "max", (w,), {"axis": (0,), "keepdims": True, "out": None}),
        (w.exp(), "exp", (w,), {"out": None}), (w.log(), "log", (w,), {}), (w.sqrt(), "sqrt", (w,), {"out": None}),
        (w.reshape(4), "reshape", (w,), {}), (w.transpose(), "permute", (w,), {"dims": (1, 0)}),
        (w[0], "getitem", (w,), {"index": 0}), (w.masked_fill(mask, 0.0), "masked_fill", (w,), {"mask": None}),
    ]
    for out, op, inputs, saved in cases:
        node = out._node
        assert node is not None and node.op == op, f"expected op {op!r}, got {node and node.op!r}"
        assert len(node.inputs) == len(inputs) and all(want is None or got is want for got, want in zip(node.inputs, inputs)), \
            f"{op}: expected {len(inputs)} input(s), the left operand first, got {len(node.inputs)} in another order"
        assert set(node.saved) == set(saved), f"{op} saves {sorted(node.saved)}, expected {sorted(saved)}"
        for key, value in saved.items():
            assert value is None or node.saved[key] == value, f"{op}: saved {key}={node.saved[key]!r}, expected {value!r}"
    plain = x * 2
    assert plain._node is None and not plain.requires_grad, \
        "x * 2 where nothing requires a gradient must record nothing (record_op decides: keep calling it)"
    GradMode.enabled = False
    try:
        assert (w * 2)._node is None, "with GradMode.enabled = False (module 05's no_grad) nothing is recorded"
    finally:
        GradMode.enabled = True
    print("✓ graph record: every op's name, inputs and saved fields")


test_unit_graph_record()

# %% [markdown]
# ## Exercises and questions
#
# Answer each by running your own code (add cells below). None needs new library code.
#
# 1. **Memory of a model.** GPT-2 small has about 124 million parameters. Using
#    `Tensor(np.zeros(n, dtype=...)).data.nbytes` on a smaller `n` and scaling up: how many
#    MiB do its weights take in float32, and in float16? Adam (module 06) keeps two more
#    numbers per weight: how much then?
# 2. **Broadcasting by hand.** Predict the result shape, or that it fails, for
#    `(8, 1, 6, 1)` with `(7, 1, 5)`, for `(5, 4)` with `(1,)`, for `(5, 4)` with `(5,)`,
#    and for `(15, 3, 5)` with `(15, 1, 5)`. Check each with `broadcast_shape`, then with
#    `Tensor(np.ones(a)) + Tensor(np.ones(b))`. Which one would you have written by mistake
#    when you meant to add one value per row of a `(5, 4)` matrix, and what is the fix?
# 3. **Batched matmul against a loop.** Time `A @ B` for `A` of shape `(64, 32, 32)` and
#    `B` of shape `(32, 32)` with `best_time`, then the same with a Python loop
#    `[A[i] @ B for i in range(64)]`. How many times faster is the batched call? Predict
#    first. Repeat with `(64, 256, 256)`: does the ratio grow or shrink, and why?
# 4. **Where the FLOP/s go.** Extend the matmul measurement to `n = 8, 16, 32` and
#    `n = 1024`. At what `n` does the rate stop growing? For `n = 8`, how many
#    microseconds does one call take, and how many of those are arithmetic?
# 5. **Views in practice.** Let `x = Tensor(np.arange(6.0))` and `v = x.reshape(2, 3)`.
#    Set `v.data[0, 0] = 100.0`: what is `x` now? Is `x.reshape(2, 3).transpose()` a view
#    of `x`? Is `x.reshape(2, 3).transpose().reshape(6)`? Use `np.shares_memory`, and
#    explain the last answer with the strides (`v.data.strides`).
# 6. **Keep the dtype, know its range.** Make
#    `x = Tensor(np.full(100_000, 1.0, dtype=np.float16))`. Predict, then check, `x.sum()`
#    and `x.mean()` (float16's largest finite value is 65504). What does
#    `x.data.sum(dtype=np.float32)` give? NumPy's `mean` of float16 adds up in float32
#    internally and rounds only the result back to float16: why is that better than both
#    "add up in float16" and "return float64"?
# 7. **Reflected operators.** Make `w = Tensor([2.0, 3.0], requires_grad=True)` and
#    print `(1 - w)._node.inputs` and `(w - 1)._node.inputs`. If `1 - w` were recorded
#    as `(w, 1)`, what gradient would `w` get from `sub`'s rule `(grad, -grad)`, and what
#    is the right one?
# 8. **The version counter.** For each of `t.data = t.data * 2`, `t.data *= 2`,
#    `t.data[:] = 0` and `t.data.fill(0)`, predict whether `t._version` changes, then
#    check. Which of them could corrupt a gradient without module 05 noticing?
#
# **Questions** (a sentence or two each, checked against your code):
#
# * Why does `Tensor([1, 2, 3])` give float32 while `np.array([1, 2, 3])` gives int64?
# * Why must `_elementwise` call `broadcast_shape` only *after* NumPy has failed, rather
#   than before every operation? (Time `broadcast_shape((64, 64), (64, 64))` against
#   `Tensor(np.ones((64, 64))) + Tensor(np.ones((64, 64)))`.)
# * `max` saves its output but `sum` does not. What would `max`'s backward rule have to
#   recompute without it?
# * Why is a transpose recorded as a `permute`, and what does module 05 gain from that?

# %% [markdown]
# ## Summary
#
# * `Tensor` wraps a NumPy or CuPy array; `array_module` is the one place that picks.
# * Python numbers become float32; arrays keep their dtype; non-numbers are a TypeError.
# * Broadcasting compares shapes from the right; a mismatch names both shapes.
# * A matmul costs `2·m·n·k` FLOPs; leading dimensions batch and broadcast.
# * Reshape, transpose, permute and slicing are views; integer-array indexing copies.
# * Every result goes through `record_op`, with the op name, the inputs in order and the
#   saved fields of section 3's table: the graph that module 05 differentiates.
# * Assigning `.data` bumps `_version`; changes through the array do not.
