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
# # Module 01: Tensor
#
# > The array that everything else in TinyTorch is built on.
#
# A neural network is arithmetic on arrays of numbers. NumPy already does that
# arithmetic fast, so why wrap it? Because a framework needs to know three things an
# array does not:
#
# 1. **how each result was made** (which operation, from which inputs), so that module
#    05 can run the chain rule backwards through it;
# 2. **whether a value needs a gradient** (`requires_grad`), so that weights learn and
#    data does not;
# 3. **where the numbers live**: NumPy on the CPU or CuPy on an NVIDIA GPU, with one code
#    path for both.
#
# In this module you build `Tensor`: arithmetic with broadcasting, batched matrix
# multiplication, reductions, reshaping and indexing. Every operation returns its result
# through **one** function, `record_op`, which notes the operation, its inputs and what a
# backward pass will need. Module 05 reads those notes; nothing here has to change when
# gradients arrive.

# %%
#| default_exp core.tensor

# %%
#| export
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

# %% [markdown]
# ## 1. NumPy or CuPy: one place decides
#
# CuPy copies NumPy's interface for GPU arrays. If every operation asks its *inputs*
# which library owns them (`xp = array_module(a)`) and then calls `xp.exp`, `xp.matmul`,
# ... the same line of code runs on either device. This is the only function in
# TinyTorch that makes that choice.

# %%
#| export
def array_module(array: Any):
    """`numpy` for a NumPy array (or anything else), `cupy` for a CuPy array."""
    if type(array).__module__.split(".")[0] == "cupy":
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


def device_of(array: Any) -> str:
    return "cuda" if array_module(array) is not np else "cpu"


# %% [markdown]
# ## 2. The graph record
#
# `record_op(op, data, inputs, **saved)` wraps a freshly computed array in a `Tensor`.
# If gradients are switched on and any input requires a gradient, it also attaches a
# `Node`: the operation's name, the input tensors, and anything the backward rule will
# need (`saved`). That is the whole graph: each tensor points at the tensors it came
# from. Module 05 adds one backward rule per operation name and walks these nodes.
#
# `GradMode.enabled` is the switch that module 05's `no_grad()` turns off.

# %%
#| export
class GradMode:
    """Global switch: when `enabled` is False, `record_op` builds no graph (see no_grad)."""

    enabled: bool = True


class Node:
    """How a tensor was made: `op` applied to `inputs`, plus what backward needs."""

    __slots__ = ("op", "inputs", "saved")

    def __init__(self, op: str, inputs: tuple, saved: dict):
        self.op = op
        self.inputs = inputs
        self.saved = saved

    def __repr__(self) -> str:
        return f"Node({self.op!r}, inputs={len(self.inputs)})"


def record_op(op: str, data: Any, inputs: tuple, **saved: Any) -> "Tensor":
    """The one place a result is made: wrap `data` and remember how it was computed.

    op     -- the operation's name; module 05 looks its backward rule up by it
    data   -- the result array (NumPy or CuPy), already computed
    inputs -- the input Tensors, in the order the backward rule returns gradients
    saved  -- whatever the backward rule needs (axis, mask, the output, ...)
    """
    out = Tensor.__new__(Tensor)
    out.data = data
    out.grad = None
    out._node = None
    out.requires_grad = False
    if GradMode.enabled and any(t.requires_grad for t in inputs):
        out.requires_grad = True
        out._node = Node(op, inputs, saved)
    return out


# %% [markdown]
# ## 3. Making a tensor: data types and memory
#
# The rules (the same as the rest of TinyTorch):
#
# * Python numbers and lists become **float32**: 4 bytes a number, what deep learning uses.
# * A NumPy or CuPy **floating** array keeps its dtype (float16, float32, float64): gradient
#   checks need float64, memory-hungry models use float16.
# * An **integer** or boolean array keeps its dtype: class labels, token ids and masks are
#   not differentiable, so they may not `requires_grad`.
# * `dtype=` overrides all of this.
#
# A float32 tensor of shape `(1024, 1024)` takes `1024 * 1024 * 4` bytes = 4 MiB.

# %%
#| export
def to_array(data: Any, dtype: Any = None, device: str | None = None):
    """Convert `data` (Tensor, array, list, number) to a NumPy/CuPy array by the rules above."""
    ### BEGIN SOLUTION
    if isinstance(data, Tensor):
        data = data.data
    xp = array_module(data)
    if xp is np and not isinstance(data, (np.ndarray, np.generic)):
        data = np.asarray(data, dtype=np.float32 if dtype is None else dtype)
    elif dtype is not None:
        data = data.astype(dtype, copy=False)
    if device is None or device_of(data) == device:
        return data
    if device == "cuda":
        return cuda_module().asarray(data)
    if device == "cpu":
        return data.get()
    raise ValueError(f"Unknown device {device!r}: use 'cpu' or 'cuda'.")
    ### END SOLUTION


def is_floating(array: Any) -> bool:
    return array_module(array).issubdtype(array.dtype, np.floating)


# %% [markdown]
# ## 4. The Tensor class
#
# A `Tensor` holds `.data` (the array), `.requires_grad`, `.grad` (a Tensor after a
# backward pass, else `None`) and, when it was computed from others, the `Node` that
# records how. Shape, dtype and device come straight from the array.
#
# Arithmetic with another operand first turns that operand into a Tensor with
# `_operand`: a Python number takes the tensor's own dtype (so `half_tensor * 2` stays
# float16), and tensors on different devices are refused instead of copied silently.

# %%
#| export
def _operand(value: Any, like: "Tensor") -> "Tensor":
    """`value` as a Tensor on `like`'s device; Python numbers take `like`'s float dtype."""
    if isinstance(value, Tensor):
        if value.device != like.device:
            raise RuntimeError(
                f"Tensors on different devices ({like.device} and {value.device}): "
                "move one with .to(device) first."
            )
        return value
    xp = array_module(like.data)
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        dtype = like.data.dtype if is_floating(like.data) else None
        return Tensor(xp.asarray(value, dtype=dtype))
    return Tensor(to_array(value, device=like.device))


def _broadcast_error(op: str, a_shape: tuple, b_shape: tuple) -> ValueError:
    return ValueError(
        f"{op}: shapes {a_shape} and {b_shape} do not broadcast. Compare them from the "
        "right: each pair of sizes must be equal, or one of them 1 (a missing size counts as 1)."
    )


def _normalize_axis(axis: Any, ndim: int) -> tuple[int, ...] | None:
    """None, an int or a tuple of ints (negatives allowed) -> a sorted tuple of positive axes."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor with {ndim} dimension(s).")
        out.append(int(a) % max(ndim, 1))
    return tuple(sorted(out))


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
        self.data = to_array(data, dtype=dtype, device=device)
        if requires_grad and not is_floating(self.data):
            raise ValueError(
                f"Only floating-point tensors can require gradients; this one is {self.data.dtype}. "
                "Pass dtype=np.float32 (or float64) to make it differentiable."
            )
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._node: Node | None = None

    # ---- what the tensor is -------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def device(self) -> str:
        return device_of(self.data)

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
        return self.data.get() if self.device == "cuda" else self.data

    def item(self) -> float | int:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}.")
        return self.data.item()

    def to(self, device: str) -> "Tensor":
        """The same values on `device` ("cpu" or "cuda"); gradients flow back across."""
        if device == self.device:
            return self
        return record_op("to", to_array(self.data, device=device), (self,), device=self.device)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self) -> "Tensor":
        return self.to("cuda")

    def detach(self) -> "Tensor":
        """The same data (shared, not copied), cut off from the graph."""
        return Tensor(self.data)

    def zero_grad(self) -> None:
        self.grad = None

    def backward(self, grad: Any = None) -> None:
        """Compute gradients of this tensor with respect to every tensor it depends on.

        The engine is module 05's (`tinytorch.core.autograd.backward`); a tensor only
        hands over to it.
        """
        from tinytorch.core.autograd import backward as run_backward

        run_backward(self, grad)

    # ---- elementwise arithmetic with broadcasting -----------------------------
    def _elementwise(self, op: str, other: Any, fn, reverse: bool = False) -> "Tensor":
        """`fn(a, b)` on the arrays, with a broadcasting error that names both shapes."""
        other = _operand(other, self)
        a, b = (other, self) if reverse else (self, other)
        ### BEGIN SOLUTION
        try:
            data = fn(a.data, b.data)
        except ValueError:
            raise _broadcast_error(op, a.shape, b.shape) from None
        return record_op(op, data, (a, b))
        ### END SOLUTION

    def __add__(self, other):
        return self._elementwise("add", other, lambda a, b: a + b)

    def __radd__(self, other):
        return self._elementwise("add", other, lambda a, b: a + b, reverse=True)

    def __sub__(self, other):
        return self._elementwise("sub", other, lambda a, b: a - b)

    def __rsub__(self, other):
        return self._elementwise("sub", other, lambda a, b: a - b, reverse=True)

    def __mul__(self, other):
        return self._elementwise("mul", other, lambda a, b: a * b)

    def __rmul__(self, other):
        return self._elementwise("mul", other, lambda a, b: a * b, reverse=True)

    def __truediv__(self, other):
        return self._elementwise("div", other, lambda a, b: a / b)

    def __rtruediv__(self, other):
        return self._elementwise("div", other, lambda a, b: a / b, reverse=True)

    def __pow__(self, exponent):
        return self._elementwise("pow", exponent, lambda a, b: a ** b)

    def __rpow__(self, base):
        return self._elementwise("pow", base, lambda a, b: a ** b, reverse=True)

    def __neg__(self) -> "Tensor":
        ### BEGIN SOLUTION
        return record_op("neg", -self.data, (self,))
        ### END SOLUTION

    # ---- matrix multiplication ---------------------------------------------------
    def matmul(self, other: Any) -> "Tensor":
        """Matrix product, batched over leading dimensions.

        (m, k) @ (k, n) -> (m, n); (..., m, k) @ (..., k, n) -> (..., m, n) with the
        leading (batch) dimensions broadcast; a 1-D operand is a vector: (k,) @ (k, n) -> (n,)
        and (m, k) @ (k,) -> (m,).
        """
        other = _operand(other, self)
        ### BEGIN SOLUTION
        a, b = self.shape, other.shape
        if not a or not b:
            raise ValueError(f"matmul: both operands need at least 1 dimension, got shapes {a} and {b}.")
        k_left = a[-1]
        k_right = b[-2] if len(b) >= 2 else b[0]
        if k_left != k_right:
            raise ValueError(
                f"matmul: shapes {a} and {b} do not match: the last size of the left ({k_left}) "
                f"must equal the {'second-to-last' if len(b) >= 2 else 'only'} size of the right ({k_right})."
            )
        xp = array_module(self.data)
        try:
            data = xp.matmul(self.data, other.data)
        except ValueError:
            raise ValueError(
                f"matmul: the batch dimensions of shapes {a} and {b} do not broadcast "
                f"({a[:-2]} against {b[:-2]})."
            ) from None
        return record_op("matmul", data, (self, other))
        ### END SOLUTION

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        return _operand(other, self).matmul(self)

    # ---- reductions -------------------------------------------------------------
    def sum(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Sum over `axis` (None: all; an int or tuple; negatives count from the end)."""
        ### BEGIN SOLUTION
        axes = _normalize_axis(axis, self.ndim)
        data = array_module(self.data).sum(self.data, axis=axes, keepdims=keepdims)
        return record_op("sum", data, (self,), axis=axes, keepdims=keepdims)
        ### END SOLUTION

    def mean(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Average over `axis`; same axis rules as `sum`."""
        ### BEGIN SOLUTION
        axes = _normalize_axis(axis, self.ndim)
        data = array_module(self.data).mean(self.data, axis=axes, keepdims=keepdims)
        return record_op("mean", data, (self,), axis=axes, keepdims=keepdims)
        ### END SOLUTION

    def max(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Largest value over `axis`; same axis rules as `sum`."""
        ### BEGIN SOLUTION
        axes = _normalize_axis(axis, self.ndim)
        data = array_module(self.data).max(self.data, axis=axes, keepdims=keepdims)
        return record_op("max", data, (self,), axis=axes, keepdims=keepdims, out=data)
        ### END SOLUTION

    # ---- elementwise functions ---------------------------------------------------
    def exp(self) -> "Tensor":
        ### BEGIN SOLUTION
        data = array_module(self.data).exp(self.data)
        return record_op("exp", data, (self,), out=data)
        ### END SOLUTION

    def log(self) -> "Tensor":
        ### BEGIN SOLUTION
        return record_op("log", array_module(self.data).log(self.data), (self,))
        ### END SOLUTION

    def sqrt(self) -> "Tensor":
        ### BEGIN SOLUTION
        data = array_module(self.data).sqrt(self.data)
        return record_op("sqrt", data, (self,), out=data)
        ### END SOLUTION

    # ---- shape and views -----------------------------------------------------------
    def reshape(self, *shape: Any) -> "Tensor":
        """Same values, new shape (`reshape(2, 3)` or `reshape((2, 3))`; one size may be -1)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        ### BEGIN SOLUTION
        try:
            data = self.data.reshape(shape)
        except ValueError:
            raise ValueError(
                f"reshape: cannot view shape {self.shape} ({self.size} elements) as {tuple(shape)}."
            ) from None
        return record_op("reshape", data, (self,))
        ### END SOLUTION

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Tensor":
        """Swap two dimensions (by default the last two: a batch of matrices transposed)."""
        ### BEGIN SOLUTION
        if self.ndim < 2:
            raise ValueError(f"transpose needs at least 2 dimensions, got shape {self.shape}.")
        dims = list(range(self.ndim))
        d0, d1 = _normalize_axis(dim0, self.ndim)[0], _normalize_axis(dim1, self.ndim)[0]
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return self.permute(*dims)
        ### END SOLUTION

    def permute(self, *dims: Any) -> "Tensor":
        """Reorder dimensions: `x.permute(0, 2, 1, 3)` on (B, T, H, D) gives (B, H, T, D)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        ### BEGIN SOLUTION
        order = tuple(int(d) % max(self.ndim, 1) for d in dims)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute: {tuple(dims)} is not an ordering of the {self.ndim} dims of shape {self.shape}.")
        data = array_module(self.data).transpose(self.data, order)
        return record_op("permute", data, (self,), dims=order)
        ### END SOLUTION

    def __getitem__(self, index: Any) -> "Tensor":
        """Indexing as in NumPy: ints, slices, None, and integer arrays (or Tensors of ints)."""
        ### BEGIN SOLUTION
        if isinstance(index, tuple):
            index = tuple(i.data if isinstance(i, Tensor) else i for i in index)
        elif isinstance(index, Tensor):
            index = index.data
        elif isinstance(index, list):
            index = array_module(self.data).asarray(index)
        return record_op("getitem", self.data[index], (self,), index=index)
        ### END SOLUTION

    def masked_fill(self, mask: Any, value: float) -> "Tensor":
        """A copy with `value` wherever `mask` is True (as in PyTorch); mask broadcasts to self."""
        ### BEGIN SOLUTION
        xp = array_module(self.data)
        keep = to_array(mask, device=self.device).astype(bool)
        try:
            full = xp.broadcast_shapes(keep.shape, self.shape)
        except ValueError:
            full = None
        if full != self.shape:
            raise ValueError(
                f"masked_fill: mask of shape {tuple(keep.shape)} does not broadcast to the tensor's shape {self.shape}."
            )
        data = xp.where(keep, xp.asarray(value, dtype=self.dtype), self.data)
        return record_op("masked_fill", data, (self,), mask=keep)
        ### END SOLUTION


# %% [markdown]
# Two small helpers every later module uses, so that each exists once: `as_tensor` lets a
# function accept a Tensor, an array, a list or a number alike, and `to_host` gives the
# values as a NumPy array wherever they live (plots, checkpoints and tests need that).

# %%
#| export
def as_tensor(value: Any) -> Tensor:
    """`value` itself when it is a Tensor, else `Tensor(value)` (by the dtype rules of section 3)."""
    return value if isinstance(value, Tensor) else Tensor(value)


def to_host(value: Any) -> np.ndarray:
    """The values of a Tensor or an array as a NumPy array (copied from the GPU for CuPy)."""
    array = value.data if isinstance(value, Tensor) else value
    return array.get() if array_module(array) is not np else np.asarray(array)


# %% [markdown]
# ## 5. Worked example: broadcasting
#
# Two shapes broadcast when, compared from the right, each pair of sizes is equal or one
# of them is 1. `(2, 3) + (3,)` adds the row to every row; `(2, 1) * (1, 3)` makes a
# 2×3 table. `(2, 3) + (2,)` fails: 3 and 2 differ and neither is 1.

# %%
a = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
row = Tensor([10.0, 20.0, 30.0])
print("(2,3) + (3,) =\n", (a + row).numpy())
print("(2,1) * (1,3) =\n", (Tensor([[1.0], [2.0]]) * Tensor([[1.0, 2.0, 3.0]])).numpy())
try:
    a + Tensor([1.0, 2.0])
except ValueError as err:
    print("(2,3) + (2,) ->", err)

# %% [markdown]
# ### Test: arithmetic and broadcasting

# %%
def test_unit_arithmetic():
    a = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = Tensor([10.0, 20.0, 30.0])
    assert np.array_equal((a + b).numpy(), [[11, 22, 33], [14, 25, 36]])
    assert np.array_equal((a - b).numpy(), [[-9, -18, -27], [-6, -15, -24]])
    assert np.array_equal((a * 2).numpy(), [[2, 4, 6], [8, 10, 12]])
    assert np.allclose((1 / a).numpy(), [[1, 0.5, 1 / 3], [0.25, 0.2, 1 / 6]])
    assert np.array_equal((a ** 2).numpy(), [[1, 4, 9], [16, 25, 36]])
    assert np.array_equal((2 ** Tensor([1.0, 3.0])).numpy(), [2, 8])
    assert np.array_equal((-a).numpy(), -a.numpy())
    assert (a + b).dtype == np.float32
    try:
        a + Tensor([1.0, 2.0])
    except ValueError as err:
        assert "(2, 3)" in str(err) and "(2,)" in str(err)
    else:
        raise AssertionError("(2,3) + (2,) must raise ValueError")
    print("✓ arithmetic and broadcasting")


test_unit_arithmetic()

# %% [markdown]
# ## 6. Matrix multiplication and its cost
#
# `(m, k) @ (k, n) -> (m, n)`: every one of the `m·n` outputs is a dot product of length
# `k`, so a matmul costs `2·m·n·k` floating-point operations (a multiply and an add each).
# Leading dimensions are a batch: `(B, m, k) @ (k, n)` applies the same matrix to each of
# the B items, and batch sizes broadcast like elementwise shapes. A 1-D operand is a vector.

# %%
x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
w = Tensor(np.ones((3, 2), dtype=np.float32))
print("(2,3) @ (3,2) =\n", (x @ w).numpy())
print("batched (4,2,3) @ (3,2) ->", (Tensor(np.ones((4, 2, 3))) @ w).shape)
print("(2,3) @ (3,) ->", (x @ Tensor([1.0, 1.0, 1.0])).numpy())

# %%
def test_unit_matmul():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    w = Tensor([[5.0, 6.0], [7.0, 8.0]])
    assert np.array_equal((x @ w).numpy(), [[19, 22], [43, 50]])
    batch = Tensor(np.arange(12, dtype=np.float32).reshape(3, 2, 2))
    assert np.array_equal((batch @ w).numpy(), batch.numpy() @ w.numpy())
    left = Tensor(np.ones((2, 1, 3, 4)))
    right = Tensor(np.ones((5, 4, 2)))
    assert (left @ right).shape == (2, 5, 3, 2)
    assert np.array_equal((x @ Tensor([1.0, 1.0])).numpy(), [3, 7])
    assert np.array_equal((Tensor([1.0, 1.0]) @ w).numpy(), [12, 14])
    try:
        Tensor(np.ones((2, 3))) @ Tensor(np.ones((4, 5)))
    except ValueError as err:
        assert "(2, 3)" in str(err) and "(4, 5)" in str(err)
    else:
        raise AssertionError("(2,3) @ (4,5) must raise ValueError")
    print("✓ matmul, batched and 1-D")


test_unit_matmul()

# %% [markdown]
# ### Measuring: how fast is a matmul?
#
# Time one `(n, n) @ (n, n)` for a few sizes and divide `2·n³` by the time. Doubling `n`
# multiplies the work by 8.

# %%
import time


def matmul_gflops(n: int, repeats: int = 3) -> float:
    a = Tensor(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


for n in (128, 256, 512):
    print(f"n={n:4d}: {2 * n**3 / 1e6:8.1f} MFLOP, {matmul_gflops(n):6.1f} GFLOP/s")

# %% [markdown]
# ## 7. Reductions, views and indexing
#
# `sum`, `mean` and `max` reduce over `axis` (an int, a tuple, negative counts from the
# end); `keepdims=True` keeps the reduced axes as size 1 so the result still broadcasts
# against the input: `x - x.max(axis=-1, keepdims=True)` is the first line of a stable
# softmax. `reshape`, `transpose`, `permute` and basic slicing return **views**: new
# tensors over the same memory, no copy. Integer-array indexing (`x[[0, 0, 2]]`)
# gathers rows and always copies.

# %%
x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
print("sum(axis=0) =", x.sum(axis=0).numpy(), " mean(axis=-1, keepdims=True) =", x.mean(axis=-1, keepdims=True).numpy().tolist())
view = x.reshape(3, 2)
print("reshape shares memory:", np.shares_memory(view.data, x.data), " x[[0, 0, 1]] copies:", not np.shares_memory(x[[0, 0, 1]].data, x.data))
print(f"memory: float32 {x.data.nbytes} bytes, float64 {x.data.astype(np.float64).nbytes} bytes, float16 {x.data.astype(np.float16).nbytes} bytes")

# %%
def test_unit_reductions_views_indexing():
    x = Tensor(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    assert x.sum().item() == 276
    assert np.array_equal(x.sum(axis=-1).numpy(), np.arange(24).reshape(2, 3, 4).sum(-1))
    assert x.sum(axis=(0, 2), keepdims=True).shape == (1, 3, 1)
    assert np.allclose(x.mean(axis=1).numpy(), np.arange(24).reshape(2, 3, 4).mean(1))
    assert np.array_equal(x.max(axis=-2).numpy(), [[8, 9, 10, 11], [20, 21, 22, 23]])
    assert x.reshape(4, 6).shape == (4, 6) and x.reshape(-1).shape == (24,)
    assert x.transpose().shape == (2, 4, 3) and x.transpose(0, 1).shape == (3, 2, 4)
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    assert x.permute(2, 0, 1).numpy()[1, 0, 2] == x.numpy()[0, 2, 1]
    assert np.array_equal(x[1, 2].numpy(), [20, 21, 22, 23])
    assert np.array_equal(x[0, :, 1:3].numpy(), [[1, 2], [5, 6], [9, 10]])
    assert np.array_equal(x[0][[2, 0, 2]].numpy()[:, 0], [8, 0, 8])
    filled = x.masked_fill(x.numpy() > 20, -1.0)
    assert filled.numpy().reshape(-1)[-3:].tolist() == [-1, -1, -1] and filled.numpy()[0, 0, 0] == 0
    assert np.allclose(Tensor([1.0, 4.0]).sqrt().numpy(), [1, 2])
    assert np.allclose(Tensor([0.0, 1.0]).exp().numpy(), [1, np.e])
    assert np.allclose(Tensor([1.0, np.e]).log().numpy(), [0, 1])
    print("✓ reductions, views, indexing")


test_unit_reductions_views_indexing()

# %% [markdown]
# ## 8. Data types and devices
#
# Python numbers and lists become float32; a float array keeps its dtype; integers stay
# integers and cannot require a gradient. `device="cuda"` needs CuPy *and* a GPU, and
# the error says which one is missing.

# %%
import importlib.util


def test_unit_dtypes_and_devices():
    assert Tensor([1, 2, 3]).dtype == np.float32
    assert Tensor(np.zeros(3, dtype=np.float16)).dtype == np.float16
    assert Tensor(np.arange(3)).dtype == np.arange(3).dtype
    assert Tensor([1, 2], dtype=np.float64).dtype == np.float64
    half = Tensor(np.ones(2, dtype=np.float16))
    assert (half * 2).dtype == np.float16
    assert (Tensor(np.ones(2)) + Tensor(np.ones(2, dtype=np.float32))).dtype == np.float64
    try:
        Tensor(np.arange(3), requires_grad=True)
    except ValueError as err:
        assert "int" in str(err)
    else:
        raise AssertionError("integer tensors cannot require gradients")
    t = Tensor([1.0, 2.0])
    assert t.device == "cpu" and t.cpu() is t and t.to("cpu") is t
    assert isinstance(t.numpy(), np.ndarray) and Tensor([3.0]).item() == 3.0
    if importlib.util.find_spec("cupy") is None:
        try:
            Tensor([1.0], device="cuda")
        except RuntimeError as err:
            assert "CuPy" in str(err)
        else:
            raise AssertionError("device='cuda' without CuPy must raise RuntimeError")
    print("✓ dtypes and devices")


test_unit_dtypes_and_devices()

# %% [markdown]
# ## 9. What the graph looks like
#
# Every result remembers its operation when an input requires a gradient. Module 05 will
# walk these records backwards. Nothing is recorded for plain data.

# %%
def test_unit_graph_record():
    w = Tensor([[1.0, 2.0]], requires_grad=True)
    x = Tensor([[3.0], [4.0]])
    y = (w @ x).sum()
    assert y.requires_grad and y._node.op == "sum"
    matmul_node = y._node.inputs[0]._node
    assert matmul_node.op == "matmul" and matmul_node.inputs[0] is w and matmul_node.inputs[1] is x
    assert (x * 2)._node is None and not (x * 2).requires_grad
    GradMode.enabled = False
    try:
        assert (w * 2)._node is None
    finally:
        GradMode.enabled = True
    print("✓ graph record")


test_unit_graph_record()

# %% [markdown]
# ## Summary
#
# * `Tensor` wraps a NumPy or CuPy array; `array_module` is the one place that picks.
# * Broadcasting compares shapes from the right; a mismatch names both shapes.
# * A matmul costs `2·m·n·k` FLOPs; leading dimensions batch and broadcast.
# * Reshape, transpose, permute and slicing are views; integer-array indexing copies.
# * Every result goes through `record_op`: the graph that module 05 differentiates.
