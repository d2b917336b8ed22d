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
# # Module 15: Quantization
#
# > A trained weight is a float32: four bytes, about seven significant digits. The model
# > needs far fewer. Store it as one byte (or half of one), and measure what that costs.
#
# Your Shakespeare GPT holds about 800,000 weights in float32: 3.2 MB. Phones, browsers and
# GPUs serving thousands of users all want models smaller, and memory traffic is what a
# model's speed is mostly made of. **Quantization** stores each weight as a small integer
# plus a shared scale: `w ≈ scale · (q − zero_point)`. With 8-bit integers the model is four
# times smaller; with 4-bit, eight times. This module builds the real thing — integer
# arrays, one byte per value, two values per byte for 4 bits — checks every integer
# against PyTorch's own quantizer, and measures, on your own trained models, what each bit
# costs in accuracy and in loss.
#
# **What you will be able to do when you finish:**
#
# * quantize a tensor to int8/uint8 per tensor and per channel and get **exactly** the
#   integers `torch.quantize_per_tensor(...).int_repr()` gives (rounding half to even, clamped),
#   and dequantize it back;
# * compute scales and zero points from observed ranges (min–max, affine and symmetric)
#   exactly as PyTorch's `MinMaxObserver` and `PerChannelMinMaxObserver` do, and clip outliers
#   with a percentile observer — and say, from a measurement, when clipping wins;
# * pack two 4-bit integers into one byte and unpack them;
# * build a `QuantizedLinear` in its two classic forms: **weight-only** (integers on disk,
#   float arithmetic) and **dynamic** (the activations quantized at every call, integer
#   products accumulated in int32, as PyTorch's dynamic quantization does);
# * turn any model into a quantized copy with `quantize_model`, save it with module 07's
#   checkpoints and measure the file on disk;
# * measure accuracy and loss against the number of bits, per tensor against per channel,
#   and explain why NumPy's integer matrix product is *slower* than float32.
#
# **Time:** about four hours — sections 1–5 in a first sitting (numbers on a grid,
# observers, per-channel, outliers), 6–10 in a second (4-bit packing, the layer, the
# model, the measurements, speed).
#
# **Before you start:** this module runs on your modules 01–14 (the Tensor and its autograd,
# `Linear` and `Module`, module 07's checkpoints, the embeddings and the GPT of 11–13, module
# 14's `measure_latency`). If `tito test 15` stops at a `NotImplementedError` that names an
# earlier module's notebook, that module still has a stub to write: `tito status` lists them.
#
# | section | you write | what it does |
# |---|---|---|
# | 2 | `quantize_per_tensor`, `dequantize` | float ↔ integers for one scale and zero point |
# | 3 | `calculate_qparams`, `MinMaxObserver.observe` | scale and zero point from a range, as PyTorch's observers |
# | 4 | `quantize_per_channel`, `PerChannelMinMaxObserver.observe` | one scale per output channel |
# | 5 | `PercentileObserver.observe` | a range that ignores the outliers |
# | 6 | `pack_int4`, `unpack_int4` | two 4-bit integers per byte |
# | 7 | `integer_matmul`, `QuantizedLinear` (`from_float`, `dequantized_weight`, both forwards) | the quantized layer |
# | 8 | `quantize_model` | a quantized copy of any model, the original untouched |
#
# Everything else is given: the input checks whose wording the tests rely on, the size
# measurement and the experiments. Each piece you write is followed by its test
# (`test_unit_…`, one ✓ line). `tito export 15` copies your code into
# `tinytorch/perf/quantization.py`, `tito test 15` runs the module's tests. After the
# module, `tito milestone run quantize` quantizes the Shakespeare GPT that `tito milestone
# run shakespeare` trained.

# %%
#| default_exp perf.quantization

# %% [markdown]
# The lesson times integer against float matrix products (section 10). NumPy hands large
# products to a BLAS library that can split them over several threads; for timings that
# repeat we ask for one thread, before NumPy is first imported (in Jupyter: restart the
# kernel before running from the top).

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| export
import copy
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tinytorch.core.layers import Linear, Module
from tinytorch.core.tensor import Tensor, array_module, as_int, as_tensor, is_floating, to_host
from tinytorch.core.training import save_checkpoint

# %% [markdown]
# ## 1. Numbers on a grid
#
# An 8-bit integer takes 256 values. To store real numbers in it, pick a **scale** `s` (the
# distance between two neighbouring representable values) and a **zero point** `z` (the
# integer that stands for the real number 0), and map
#
# $$q = \operatorname{clamp}\big(\operatorname{round}(x / s) + z,\ q_{\min},\ q_{\max}\big),
# \qquad \hat x = s\,(q - z).$$
#
# `x̂` is the **dequantized** value: the point of the grid `{s·(q − z)}` nearest to `x`.
# Three choices decide everything:
#
# * **The integer type.** `int8` holds `−128 … 127`, `uint8` holds `0 … 255`. We also use
#   narrower signed and unsigned types, `intN`/`uintN` for `N = 2 … 8` bits: `int4` holds
#   `−8 … 7`, `int2` holds `−2 … 1`. They are stored in one byte each (section 6 packs two
#   4-bit values into a byte). `qrange(dtype)` (given) returns `(qmin, qmax)`.
# * **The scale.** A small scale gives a fine grid that covers a narrow range; a large
#   one covers a wide range coarsely. The grid covers `[s·(qmin − z), s·(qmax − z)]`;
#   everything outside is **clamped** to the nearest end.
# * **The zero point.** It shifts the grid so that the range it covers need not be centred
#   on 0. **Affine** quantization picks it to fit `[min, max]` exactly; **symmetric**
#   quantization fixes it in the middle (0 for signed types) and covers `[−a, a]`.
#   The real number 0 is always exactly representable (it is `q = z`): a zero-padded
#   input or a ReLU's zeros come back as exact zeros.
#
# Worked example: `x = [-1.0, -0.1, 0.0, 0.26, 1.5]`, `s = 0.02`, `z = 10`, `int8`:

# %%
x_example = np.array([-1.0, -0.1, 0.0, 0.26, 1.5], dtype=np.float32)
print("x / s       :", x_example / np.float32(0.02))
print("round + z   :", np.rint(x_example / np.float32(0.02)) + 10)
q_example = np.clip(np.rint(x_example / np.float32(0.02)) + 10, -128, 127)
print("clamped q   :", q_example)
print("dequantized :", np.float32(0.02) * (q_example - 10))

# %% [markdown]
# `1.5 / 0.02 + 10 = 85` fits; nothing is clamped here. `0.26` lands at `13 + 10 = 23` and
# comes back as `0.26` (up to float32 rounding); a value between two grid points comes back
# as the nearer one, at most `s/2` away: the **quantization error** of a value inside the
# range is at most half a step. Outside the range the error is unbounded: that is the
# trade-off between clamping and resolution that every observer below makes.
#
# ### Rounding: half to even
#
# `round` here is **round half to even** (banker's rounding, `np.rint`, IEEE's default):
# `0.5 → 0`, `1.5 → 2`, `2.5 → 2`, `−0.5 → −0`. It has no bias (halves go up as often as
# down), and it is what PyTorch uses. Python's `round` does the same; the school rule
# "halves away from zero" (`np.floor(x + 0.5)` for positives) does not.
#
# ### Matching PyTorch to the last bit
#
# We want the *same integers* as `torch.quantize_per_tensor(x, s, z, torch.qint8).int_repr()`.
# Then the order of the floating-point operations matters, for values that fall on or very
# near a half:
#
# * PyTorch multiplies by the float32 **inverse scale**, `inv_scale = float32(1 / s)`, instead
#   of dividing by `s`: `x·(1/s)` and `x/s` can differ in the last bit.
# * It adds the zero point **before** rounding: `round(x·inv_scale + z)`. For a tie this
#   differs from `round(x·inv_scale) + z` whenever `z` is odd: `round(2.5 + 1) = 4` but
#   `round(2.5) + 1 = 3`.
# * Its per-tensor CPU kernel computes `x·inv_scale + z` with one **fused multiply-add**
#   (FMA: the exact product plus `z`, rounded once to float32), its per-channel kernel
#   rounds the product to float32 first and then adds `z` in float32 (two roundings).
#   In NumPy, an FMA is "compute in float64, round once to float32": the product of two
#   float32 numbers is exact in float64.
#
# Each docstring below says which form to use. The tests compare with PyTorch on thousands
# of values, ties included: none of this is visible in a model's accuracy, but "the same
# integers" means the same integers.

# %%
#| export
_QDTYPE = re.compile(r"^(u?)int([2-8])$")


def qrange(dtype: str) -> tuple[int, int]:
    """(qmin, qmax), the integers a quantized dtype holds: "int8" (-128, 127), "uint8" (0, 255),
    and any "intN" / "uintN" with N = 2..8 bits ("int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1)).
    ValueError for any other name."""
    match = _QDTYPE.match(str(dtype))
    if match is None:
        raise ValueError(f"quantized dtype must be 'int8', 'uint8', or 'intN' / 'uintN' with N = 2..8 bits; "
                         f"got {dtype!r}.")
    bits = int(match.group(2))
    return (0, 2 ** bits - 1) if match.group(1) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def storage_dtype(dtype: str) -> np.dtype:
    """The one-byte NumPy dtype that stores `dtype`'s integers: int8 for signed types, uint8 for unsigned."""
    qrange(dtype)
    return np.dtype(np.uint8 if str(dtype).startswith("u") else np.int8)


def _float_input(x: Any, where: str) -> Tensor:
    """x as a Tensor of floats (ValueError otherwise: integers are already quantized)."""
    x = as_tensor(x)
    if not is_floating(x.data):
        raise ValueError(f"{where}: x must hold floats, got {x.dtype} (is it already quantized?).")
    return x


def _count_nan(data: Any) -> int:
    """How many NaN values the array `data` (NumPy or CuPy) holds."""
    return int(to_host(array_module(data).isnan(data).sum()))


def _check_no_nan(data: Any, where: str) -> None:
    """ValueError when `data` holds NaN: it has no integer (rint(NaN) cast to int8 is an arbitrary value).
    ±inf is fine here: it saturates at qmin or qmax, as PyTorch's kernels clamp."""
    nans = _count_nan(data)
    if nans:
        raise ValueError(f"{where}: x holds {nans} NaN value(s), which no integer can stand for (a diverged "
                         "model or a bad input?); remove them before quantizing.")


def _check_observable(data: Any, where: str, batch: int) -> None:
    """ValueError naming the batch (the `batch`-th call of observe) when it holds NaN or ±inf: min and max
    skip a NaN in silence (so the batch's other values would be dropped) and ±inf has no finite range.
    Called before anything is observed, so the running range stays as it was."""
    xp = array_module(data)
    bad = int(to_host((~xp.isfinite(data)).sum()))
    if bad:
        raise ValueError(f"{where}: batch {batch} (observe call number {batch}) holds {_count_nan(data)} NaN and "
                         f"{bad - _count_nan(data)} infinite value(s); nothing of it was observed (the range so far "
                         "is unchanged). A range must be finite: find where they come from (a diverged layer?) "
                         "or leave that batch out.")


def _check_finite_weight(weight: Any, where: str, what: str = "the weight") -> None:
    """ValueError when a layer's weight holds NaN or ±inf: there is no range to quantize it to."""
    xp = array_module(weight)
    bad = int(to_host((~xp.isfinite(weight)).sum()))
    if bad:
        raise ValueError(f"{where}: {what} holds {bad} NaN or infinite value(s) (a diverged model?); "
                         "only a model with finite weights can be quantized.")


def _check_scale(scale: Any, where: str) -> np.ndarray:
    """scale as a float32 array (shape kept); ValueError unless every value is finite and > 0."""
    s = np.asarray(to_host(scale), dtype=np.float64)  # a Tensor, a NumPy or CuPy array, or numbers
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"{where}: scale must be finite and > 0, got {s.tolist()}.")
    return s.astype(np.float32)


def _check_zero_point(zero_point: Any, qmin: int, qmax: int, where: str) -> np.ndarray:
    """zero_point as an int64 array (shape kept); ValueError unless every value is an integer in [qmin, qmax]."""
    z = to_host(zero_point)
    if z.size == 0 or (z.dtype.kind not in "iu" and not np.all(np.mod(z, 1) == 0)):
        raise ValueError(f"{where}: zero_point must be integers, got {z.tolist()}.")
    z = z.astype(np.int64)
    if np.any(z < qmin) or np.any(z > qmax):
        raise ValueError(f"{where}: zero_point must lie in the dtype's range [{qmin}, {qmax}], got {z.tolist()}.")
    return z


# %% [markdown]
# ## 2. Quantize and dequantize one tensor
#
# `quantize_per_tensor(x, scale, zero_point, dtype="int8")` returns a Tensor of **integers**
# (`np.int8` for signed types, `np.uint8` for unsigned: one byte per value), and
# `dequantize(q, scale, zero_point)` returns float32. The given lines check the inputs;
# you write the arithmetic, in the form the docstrings give (section 1 says why). Work with
# `xp = array_module(x.data)` so that the same code runs on a GPU.
#
# Careful in `dequantize`: `q − z` with `q` a `uint8` array wraps around below 0
# (`np.uint8(3) − 5` is 254). Convert the integers to a wider type before subtracting.

# %%
#| export
def quantize_per_tensor(x: Any, scale: float, zero_point: int, dtype: str = "int8") -> Tensor:
    """Integers q = clamp(round_half_even(x·inv_scale + zero_point), qmin, qmax), one scale for all of x.

    x          -- floats, any shape (Tensor or array); taken as float32, as PyTorch does (it refuses
                  float64): a float64 x is rounded to float32 FIRST, x.data.astype(np.float32)
    scale      -- a number > 0 (a Python float here); inv_scale = np.float32(1) / np.float32(scale)
    zero_point -- an integer in qrange(dtype)
    dtype      -- "int8" (default), "uint8", or "intN" / "uintN" (section 1)
    Returns a Tensor of x's shape and dtype storage_dtype(dtype) (np.int8 or np.uint8).

    As PyTorch's per-tensor kernel: x·inv_scale + zero_point in ONE rounding to float32 (a
    fused multiply-add): compute it in float64 (the float32 x and inv_scale converted to float64:
    their product is exact there; skipping the float32 step for a float64 x changes a few
    integers), convert the sum to float32, then round half to even (xp.rint) and clamp to
    [qmin, qmax] (xp.clip). Work with xp = array_module(x.data) (NumPy or CuPy).
    """
    x = _float_input(x, "quantize_per_tensor")
    _check_no_nan(x.data, "quantize_per_tensor")
    qmin, qmax = qrange(dtype)
    scale = float(_check_scale(scale, "quantize_per_tensor").reshape(-1)[0])
    zero_point = int(_check_zero_point(zero_point, qmin, qmax, "quantize_per_tensor").reshape(-1)[0])
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    inv_scale = np.float32(1.0) / np.float32(scale)
    exact = x.data.astype(np.float32).astype(np.float64) * np.float64(inv_scale) + zero_point
    q = xp.clip(xp.rint(exact.astype(np.float32)), qmin, qmax)
    return Tensor(q.astype(storage_dtype(dtype)))
    ### END SOLUTION


def dequantize(q: Any, scale: Any, zero_point: Any, axis: int | None = None) -> Tensor:
    """float32 values scale·(q − zero_point), of q's shape.

    q          -- integers (Tensor or array), e.g. from quantize_per_tensor / quantize_per_channel
    axis None  -- per tensor: scale and zero_point are one number each (or arrays of one element)
    axis given -- per channel: scale and zero_point are 1-D, one per index of q's axis `axis`
                  (negative allowed), broadcast along that axis
    Returns a float32 Tensor. The given checks leave scale (float32) and zero_point (int64) as NumPy
    arrays: for axis given, reshape both to (1, …, C, …, 1) (C at `axis`) so they broadcast along
    it (a plain (C,) array would broadcast along the LAST axis); move them to q's device with
    xp.asarray (xp = array_module(q.data)). Compute q − zero_point in int32 (never in q's own
    dtype: uint8 wraps around below 0), convert it to float32 and multiply by the float32 scale
    (int32 times float32 would give float64 in NumPy: convert first).
    """
    q = as_tensor(q)
    if q.data.dtype.kind not in "iu":
        raise ValueError(f"dequantize: q must hold integers, got {q.dtype}.")
    scale = _check_scale(scale, "dequantize")
    zero_point = _check_zero_point(zero_point, -(2 ** 31), 2 ** 31 - 1, "dequantize")
    if axis is None:
        if scale.size != 1 or zero_point.size != 1:
            raise ValueError(f"dequantize: per tensor (axis=None) takes one scale and one zero point, got "
                             f"{scale.size} and {zero_point.size}; pass axis= for per-channel values.")
        scale, zero_point = scale.reshape(()), zero_point.reshape(())
    else:
        axis = _channel_axis(axis, q.ndim, "dequantize")
        _check_channel_count(scale, zero_point, q.shape[axis], axis, "dequantize")
    ### BEGIN SOLUTION
    xp = array_module(q.data)
    if axis is not None:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    centred = q.data.astype(np.int32) - xp.asarray(zero_point.astype(np.int32))
    return Tensor(centred.astype(np.float32) * xp.asarray(scale))
    ### END SOLUTION


def _channel_axis(axis: int, ndim: int, where: str) -> int:
    """axis as a non-negative int < ndim (negative counts from the end); ValueError otherwise."""
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{where}: axis must be an int in [{-ndim}, {ndim - 1}] for a {ndim}-D tensor, got {axis!r}.")
    return int(axis) % ndim


def _check_channel_count(scales: np.ndarray, zero_points: np.ndarray, channels: int, axis: int, where: str) -> None:
    if scales.shape != (channels,) or zero_points.shape != (channels,):
        raise ValueError(f"{where}: axis {axis} has {channels} channels, so scales and zero_points must have shape "
                         f"({channels},); got {scales.shape} and {zero_points.shape}.")


# %%
def test_unit_quantize_per_tensor():
    q = quantize_per_tensor(x_example, 0.02, 10)
    assert q.dtype == np.int8, f"quantize_per_tensor must return int8 integers (one byte each), got {q.dtype}"
    assert np.array_equal(q.numpy(), [-40, 5, 10, 23, 85]), f"expected [-40, 5, 10, 23, 85], got {q.numpy()}"
    ties = quantize_per_tensor([0.5, 1.5, 2.5, -0.5, -2.5], 1.0, 0).numpy()
    assert np.array_equal(ties, [0, 2, 2, 0, -2]), f"round half to EVEN: expected [0, 2, 2, 0, -2], got {ties}"
    odd = quantize_per_tensor([0.5, 2.5], 1.0, 1).numpy()
    assert np.array_equal(odd, [2, 4]), (
        f"add the zero point BEFORE rounding: round(2.5 + 1) = 4, got {odd} (round(2.5) + 1 = 3 is PyTorch's other order)")
    ends = quantize_per_tensor([-1000.0, 1000.0], 1.0, 0).numpy()
    assert np.array_equal(ends, [-128, 127]), f"clamp to the int8 range [-128, 127]: expected [-128, 127], got {ends}"
    u = quantize_per_tensor([-1000.0, 0.0, 1000.0], 1.0, 128, "uint8")
    assert u.dtype == np.uint8 and np.array_equal(u.numpy(), [0, 128, 255]), (
        f"uint8: expected [0, 128, 255], got {u.numpy()} stored as {u.dtype}" + (
            ": stored as int8, the values above 127 wrap around; store them as storage_dtype(dtype) (np.uint8 for "
            "an unsigned type)" if u.dtype == np.int8 else ""))
    four = quantize_per_tensor([-100.0, 3.0, 100.0], 1.0, 0, "int4").numpy()
    assert np.array_equal(four, [-8, 3, 7]), f"int4 holds -8..7: expected [-8, 3, 7], got {four}"
    back = dequantize(u, 1.0, 128).numpy()
    assert back.dtype == np.float32, (
        f"dequantize must return float32, got {back.dtype} (convert the int32 difference to float32 BEFORE "
        "multiplying by the scale: NumPy's int32 times float32 is float64)")
    assert np.array_equal(back, [-128.0, 0.0, 127.0]), (
        f"dequantize uint8 with zero point 128: expected [-128, 0, 127], got {back} "
        "(subtract the zero point in int32: uint8 wraps around below 0)")
    once = quantize_per_tensor(np.float32([0.273939937]), 0.00214854861, -10).item()
    assert once == 118, (
        f"expected 118 (PyTorch's integer), got {once}: x·inv_scale + zero_point is 117.49999… in float64 and exactly "
        "117.5 once rounded to float32, PyTorch's single rounding (a fused multiply-add); convert the float64 sum to "
        "float32 (exact.astype(np.float32)) BEFORE rint")
    x_once = np.float32([3.8310704231262207])  # x·inv_scale - 27 is 53.4999975 in float64: PyTorch's 53
    twice = np.rint(x_once * (np.float32(1) / np.float32(0.047590937465429306)) - np.float32(27))  # 80.5 - 27: 54
    once = quantize_per_tensor(x_once, 0.047590937465429306, -27).item()
    assert once == 53, (
        f"expected 53 (PyTorch's integer), got {once}: "
        + ("x·inv_scale was rounded to float32 (80.5) before the zero point was added (a second rounding); "
           if once == twice[0] else "")
        + "round x·inv_scale + zero_point ONCE (compute it in float64, then one conversion to float32 before rint)")
    wide = quantize_per_tensor(np.array([-21.45000171661377, -34.35000038146973, 12.749999523162842]), 0.3, 3).numpy()
    assert np.array_equal(wide, [-68, -111, 46]), (
        f"a float64 x is taken as float32 FIRST: expected [-68, -111, 46] (PyTorch's integers for the float32 x), "
        f"got {wide} (x.data.astype(np.float32) before the float64 multiply-add)")
    x = np.random.default_rng(0).uniform(-1, 1, 1000).astype(np.float32)
    err = np.abs(dequantize(quantize_per_tensor(x, 0.01, 3), 0.01, 3).numpy() - x).max()
    assert err <= 0.005 + 1e-6, f"inside the range the error is at most scale/2 = 0.005, got {err}"
    print("✓ quantize_per_tensor / dequantize: worked example, ties to even, zero point before rounding, clamp, "
          "uint8, int4, float64 taken as float32, float32 result, error <= scale/2")


test_unit_quantize_per_tensor()

# %% [markdown]
# ## 3. Observers: where the scale and zero point come from
#
# A scale and zero point are chosen from the range the tensor takes. An **observer** sees
# the data (one tensor, or many batches of activations: `observe(x)` any number of times),
# keeps the running minimum and maximum, and turns them into `(scale, zero_point)`. We
# compute them exactly as PyTorch's `MinMaxObserver.calculate_qparams()` does, so the
# numbers can be compared one for one:
#
# 1. Widen the range to include 0: `min₋ = min(min_val, 0)`, `max₊ = max(max_val, 0)`. (0 must
#    be on the grid, section 1.)
# 2. **Affine**: the range `[min₋, max₊]` is spread over all `qmax − qmin` steps:
#    `scale = (max₊ − min₋) / (qmax − qmin)`, and the zero point is the integer that `min₋`
#    must map to `qmin`: `zero_point = qmin − round(min₋ / scale)`, clamped to `[qmin, qmax]`.
#    Note what is divided and what is rounded: the *quotient* `min₋ / scale` is rounded, then
#    subtracted from `qmin`.
# 3. **Symmetric**: `a = max(−min₋, max₊)`, `scale = a / ((qmax − qmin) / 2)` (`a / 127.5` for
#    int8: PyTorch's choice), `zero_point = 0` for signed types and the middle of the range,
#    `(qmin + qmax + 1) // 2`, for unsigned ones (128 for uint8).
# 4. Never a zero scale: `scale = max(scale, ε)` with `ε = np.finfo(np.float32).eps`
#    (a tensor of zeros still gets a valid grid).
#
# All in float32, as PyTorch computes them (`np.float32` values and arrays). The scale
# comes from the **width** of the range, `max − min`: dividing only `max` by the number of
# steps would give a grid too fine to reach the minimum.
#
# Worked example: `min = −1.0`, `max = 3.0`, `int8` affine: `scale = 4 / 255 = 0.015686…`,
# `zero_point = −128 − round(−1.0 / 0.015686) = −128 − round(−63.75) = −128 + 64 = −64`.
# Check: `−1.0` maps to `round(−63.75) − 64 = −128` (the bottom of the range) and `3.0` to
# `round(191.25) − 64 = 127` (the top).
#
# `calculate_qparams(min_val, max_val, dtype, symmetric)` works on arrays (one range per
# element: the per-channel observer in section 4 reuses it) and returns
# `(scale float32 array, zero_point int64 array)`. `MinMaxObserver.qparams()` (given)
# calls it on the running range and returns a Python float and int.

# %%
#| export
def calculate_qparams(min_val: Any, max_val: Any, dtype: str = "int8",
                      symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero_point) for observed ranges [min_val, max_val], as PyTorch's observers compute them.

    min_val, max_val -- numbers or arrays of one shape (one range per element), taken as float32
    Returns scale (float32 array of that shape) and zero_point (int64 array of that shape):
      min_neg = min(min_val, 0), max_pos = max(max_val, 0)                      (float32)
      affine:    scale = (max_pos − min_neg) / float32(qmax − qmin)
                 scale = max(scale, eps)                 eps = np.finfo(np.float32).eps
                 zero_point = clip(qmin − rint(min_neg / scale), qmin, qmax)
      symmetric: scale = max(max(−min_neg, max_pos) / float32((qmax − qmin) / 2), eps)
                 zero_point = 0 for signed dtypes, (qmin + qmax + 1) // 2 for unsigned ones
    """
    min_val = np.asarray(min_val, dtype=np.float32)
    max_val = np.asarray(max_val, dtype=np.float32)
    if min_val.shape != max_val.shape:
        raise ValueError(f"calculate_qparams: min_val {min_val.shape} and max_val {max_val.shape} differ in shape.")
    if np.any(~np.isfinite(min_val)) or np.any(~np.isfinite(max_val)) or np.any(min_val > max_val):
        raise ValueError(f"calculate_qparams: every range needs finite min <= max, got min {min_val.tolist()}, "
                         f"max {max_val.tolist()} (was anything observed?).")
    qmin, qmax = qrange(dtype)
    ### BEGIN SOLUTION
    eps = np.finfo(np.float32).eps
    min_neg = np.minimum(min_val, np.float32(0))
    max_pos = np.maximum(max_val, np.float32(0))
    if symmetric:
        bound = np.maximum(-min_neg, max_pos)
        scale = np.maximum(bound / np.float32((qmax - qmin) / 2), eps)
        zero_point = np.full(scale.shape, 0 if qmin < 0 else (qmin + qmax + 1) // 2, dtype=np.int64)
    else:
        scale = np.maximum((max_pos - min_neg) / np.float32(qmax - qmin), eps)
        zero_point = np.clip(qmin - np.rint(min_neg / scale).astype(np.int64), qmin, qmax)
    return scale.astype(np.float32), zero_point.astype(np.int64)
    ### END SOLUTION


class MinMaxObserver:
    """Running min and max of everything observed; qparams() as PyTorch's MinMaxObserver (per tensor).

    dtype     -- "int8" (PyTorch's qint8), "uint8" (quint8), or "intN" / "uintN"
    symmetric -- False: per_tensor_affine; True: per_tensor_symmetric
    observe(x) widens [min_val, max_val] (float32 NumPy scalars, +inf / -inf before anything is
    observed) to include x's smallest and largest value and returns x unchanged; an empty x changes
    nothing. The range is a RUNNING one: min(old min, this x's min), never just the last x's. On a
    GPU, data.min() is a CuPy value: bring it to the host with to_host before np.float32.
    qparams() -> (scale: float, zero_point: int).
    """

    def __init__(self, dtype: str = "int8", symmetric: bool = False):
        qrange(dtype)
        self.dtype, self.symmetric = dtype, bool(symmetric)
        self.min_val, self.max_val = np.float32(np.inf), np.float32(-np.inf)
        self.batches = 0  # observe calls so far: an error names the batch by its number

    def observe(self, x: Any) -> Any:
        data = _float_input(x, "MinMaxObserver.observe").data
        self.batches += 1
        _check_observable(data, "MinMaxObserver.observe", self.batches)
        if data.size == 0:
            return x
        ### BEGIN SOLUTION
        self.min_val = min(self.min_val, np.float32(to_host(data.min())))
        self.max_val = max(self.max_val, np.float32(to_host(data.max())))
        ### END SOLUTION
        return x

    def qparams(self) -> tuple[float, int]:
        if self.min_val > self.max_val:
            raise RuntimeError("MinMaxObserver.qparams: nothing observed yet; call observe(x) first.")
        scale, zero_point = calculate_qparams(self.min_val, self.max_val, self.dtype, self.symmetric)
        return float(scale), int(zero_point)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(dtype={self.dtype!r}, symmetric={self.symmetric}, "
                f"min_val={self.min_val}, max_val={self.max_val})")


# %%
def test_unit_observer():
    scale, zero_point = calculate_qparams(-1.0, 3.0)
    assert scale.dtype == np.float32 and zero_point.dtype == np.int64, (scale.dtype, zero_point.dtype)
    assert np.isclose(scale, 4 / 255, rtol=1e-6), (
        f"affine int8 scale for [-1, 3]: expected (max - min)/255 = {4 / 255:.6f}, got {scale} " + (
            "= (max - min)/256: 256 integers have 255 steps between them, divide by qmax - qmin"
            if np.isclose(scale, 4 / 256, rtol=1e-6) else
            "(the scale comes from the width of the range, max - min, not from max alone)"))
    assert zero_point == -64, (
        f"affine int8 zero point for [-1, 3]: expected -128 - round(-1 / scale) = -64, got {zero_point} "
        "(round the quotient min/scale, then subtract it from qmin" + (
            "; -128 + round(-63.75) = -192, clamped to -128: the rounded quotient was ADDED)" if zero_point == -128
            else ")"))
    s, z = calculate_qparams(0.5, 2.0)
    assert np.isclose(s, 2 / 255, rtol=1e-6) and z == -128, (
        f"[0.5, 2] must be widened to include 0: expected scale 2/255 and zero point -128, got {s}, {z}")
    s, z = calculate_qparams(-1.0, 3.0, "uint8")
    assert np.isclose(s, 4 / 255, rtol=1e-6) and z == 64, f"uint8 affine [-1, 3]: expected scale 4/255, zero point 64, got {s}, {z}"
    s, z = calculate_qparams(-1.0, 3.0, symmetric=True)
    assert np.isclose(s, 3 / 127.5, rtol=1e-6) and z == 0, (
        f"int8 symmetric [-1, 3]: expected scale max|x| / 127.5 = {3 / 127.5:.6f} and zero point 0, got {s}, {z}")
    s, z = calculate_qparams(-1.0, 3.0, "uint8", symmetric=True)
    assert np.isclose(s, 3 / 127.5, rtol=1e-6) and z == 128, f"uint8 symmetric: expected zero point 128, got {z}" + {
        0: ": 0 is the middle of a SIGNED type only; an unsigned one centres its grid on (qmin + qmax + 1) // 2",
        127: ": (qmin + qmax) // 2 rounds down; PyTorch's middle is (qmin + qmax + 1) // 2 = 128"}.get(int(z), "")
    s, z = calculate_qparams(0.0, 0.0)
    assert s == np.finfo(np.float32).eps and z == -128, f"a range [0, 0] needs scale eps, zero point -128; got {s}, {z}"
    s, z = calculate_qparams([-1.0, 0.0], [3.0, 1.0], "int4")
    assert s.shape == (2,) and np.allclose(s, [4 / 15, 1 / 15]) and np.array_equal(z, [-4, -8]), (
        f"per element, int4: expected scales [4/15, 1/15] and zero points [-4, -8], got {s}, {z}")
    observer = MinMaxObserver()
    for batch in ([0.5, 2.0], [-1.0, 0.0], [1.0, 3.0]):
        returned = observer.observe(Tensor(batch))
        assert returned is not None, "observe(x) returns x (so it can sit in a forward pass); it returned None"
    assert (observer.min_val, observer.max_val) == (-1.0, 3.0), (
        f"the observer keeps the running min and max of every batch: expected (-1, 3), got "
        f"({observer.min_val}, {observer.max_val})")
    assert observer.qparams() == (float(np.float32(4) / np.float32(255)), -64), observer.qparams()
    print("✓ calculate_qparams and MinMaxObserver: affine, symmetric, int8/uint8/int4, 0 in the range, eps, running range")


test_unit_observer()

# %% [markdown]
# Now the observer and the quantizer together, on a tensor whose range is lopsided
# (mostly positive, like the output of a GELU):

# %%
rng = np.random.default_rng(0)
activations = np.maximum(rng.standard_normal(10_000).astype(np.float32) * 1.5 + 0.5, -0.17)
for label, symmetric in (("affine", False), ("symmetric", True)):
    obs = MinMaxObserver("int8", symmetric)
    obs.observe(activations)
    scale, zero_point = obs.qparams()
    restored = dequantize(quantize_per_tensor(activations, scale, zero_point), scale, zero_point).numpy()
    used = np.unique(quantize_per_tensor(activations, scale, zero_point).numpy()).size
    print(f"{label:9s}: scale {scale:.5f}, zero point {zero_point:4d}, integers used {used:3d} of 256, "
          f"mean |error| {np.abs(restored - activations).mean():.5f}")

# %% [markdown]
# The symmetric grid spends half of its integers on negative values down to `−max`, which
# this tensor never takes: it uses about half of the 256 integers, its step is about twice
# as large, and its error is larger with it. That is why PyTorch quantizes
# **activations** affine (`quint8` with a zero point) and **weights** symmetric (weights are
# spread around 0, and a zero point of 0 makes the integer arithmetic of section 7 simpler).
#
# ## 4. One scale per output channel
#
# A weight matrix is rarely uniform: one output unit may have weights ten times larger than
# another. With **one** scale for the whole matrix, the largest weight sets the step, and
# the units with small weights get only a few integers each. **Per-channel** quantization
# gives each output channel its own scale and zero point. It costs one float and one
# integer per channel, nothing per weight.
#
# **Which axis is the output channel?** In PyTorch, `nn.Linear.weight` has shape
# `(out_features, in_features)` and per-channel quantization uses `axis=0`. **Ours is the
# transpose**: module 03's `Linear.weight` is `(in_features, out_features)` (we compute
# `x @ W + b`), so an output channel is a **column**, `axis=1`. Quantizing along axis 0
# would give each *input* feature its own scale, and mix the scales within every output
# unit. (For a convolution, `weight (out, in, kh, kw)`, the output channel is axis 0, as in
# PyTorch.)
#
# `quantize_per_channel(x, scales, zero_points, axis, dtype)` uses `scales[c]` and
# `zero_points[c]` for the slice `c` along `axis`: reshape them so they broadcast along that
# axis (shape `(1, …, C, …, 1)`). `PerChannelMinMaxObserver(axis)` keeps one running range
# per channel: the min and max over **every other** axis.

# %%
#| export
def quantize_per_channel(x: Any, scales: Any, zero_points: Any, axis: int, dtype: str = "int8") -> Tensor:
    """Integers with one (scale, zero point) per slice of x along `axis`, as torch.quantize_per_channel.

    x           -- floats, any shape with at least one dimension; taken as float32 (x.data.astype(np.float32))
    scales      -- 1-D, x.shape[axis] values > 0; zero_points -- 1-D, x.shape[axis] integers in qrange(dtype)
    axis        -- the channel axis (negative allowed); 1 for our Linear's output channels
    Returns a Tensor of x's shape and dtype storage_dtype(dtype).

    The given checks leave scales (float32) and zero_points (int64) as NumPy arrays of shape (C,).
    As PyTorch's per-channel kernel: inv = np.float32(1) / scales (float32: multiply by the
    inverse, never divide by the scale), inv and zero_points reshaped to (1, …, C, …, 1) to
    broadcast along axis and moved to x's device (xp.asarray); v = x·inv in float32, then
    + zero_points as float32 (two float32 roundings: NOT the per-tensor kernel's float64
    multiply-add); then round half to even (xp.rint) and clamp to [qmin, qmax].
    """
    x = _float_input(x, "quantize_per_channel")
    _check_no_nan(x.data, "quantize_per_channel")
    if x.ndim == 0:
        raise ValueError("quantize_per_channel: x needs at least one dimension (the channel axis).")
    axis = _channel_axis(axis, x.ndim, "quantize_per_channel")
    qmin, qmax = qrange(dtype)
    scales = _check_scale(scales, "quantize_per_channel")
    zero_points = _check_zero_point(zero_points, qmin, qmax, "quantize_per_channel")
    _check_channel_count(scales, zero_points, x.shape[axis], axis, "quantize_per_channel")
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    shape = [1] * x.ndim
    shape[axis] = -1
    inv = xp.asarray((np.float32(1.0) / scales).reshape(shape))
    shifted = x.data.astype(np.float32) * inv + xp.asarray(zero_points.astype(np.float32).reshape(shape))
    q = xp.clip(xp.rint(shifted), qmin, qmax)
    return Tensor(q.astype(storage_dtype(dtype)))
    ### END SOLUTION


class PerChannelMinMaxObserver:
    """One running min and max per slice along `axis`; qparams() as PyTorch's PerChannelMinMaxObserver.

    axis      -- the channel axis (1 for our Linear's output channels; negative allowed)
    dtype, symmetric -- as MinMaxObserver (per_channel_affine / per_channel_symmetric)
    observe(x): min_val and max_val become float32 NumPy arrays (on the host: to_host) of shape
    (x.shape[axis],) holding, per channel, the smallest and largest value over every OTHER axis of x
    (data.min(axis=<tuple of the other axes>)) and of every earlier x: the running elementwise
    min / max (np.minimum / np.maximum). Returns x. qparams() -> (scales float32 (C,), zero_points int64 (C,)).
    """

    def __init__(self, axis: int = 0, dtype: str = "int8", symmetric: bool = False):
        qrange(dtype)
        self.axis, self.dtype, self.symmetric = axis, dtype, bool(symmetric)
        self.min_val = self.max_val = None
        self.batches = 0  # observe calls so far: an error names the batch by its number

    def observe(self, x: Any) -> Any:
        data = _float_input(x, "PerChannelMinMaxObserver.observe").data
        self.batches += 1
        axis = _channel_axis(self.axis, data.ndim, "PerChannelMinMaxObserver.observe")
        if self.min_val is not None and data.shape[axis] != self.min_val.shape[0]:
            raise ValueError(f"PerChannelMinMaxObserver: this x has {data.shape[axis]} channels along axis "
                             f"{self.axis}, the earlier ones had {self.min_val.shape[0]}.")
        _check_observable(data, "PerChannelMinMaxObserver.observe", self.batches)
        if data.size == 0:
            return x
        ### BEGIN SOLUTION
        others = tuple(i for i in range(data.ndim) if i != axis)
        low = to_host(data.min(axis=others)).astype(np.float32)
        high = to_host(data.max(axis=others)).astype(np.float32)
        self.min_val = low if self.min_val is None else np.minimum(self.min_val, low)
        self.max_val = high if self.max_val is None else np.maximum(self.max_val, high)
        ### END SOLUTION
        return x

    def qparams(self) -> tuple[np.ndarray, np.ndarray]:
        if self.min_val is None:
            raise RuntimeError("PerChannelMinMaxObserver.qparams: nothing observed yet; call observe(x) first.")
        return calculate_qparams(self.min_val, self.max_val, self.dtype, self.symmetric)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(axis={self.axis}, dtype={self.dtype!r}, symmetric={self.symmetric})"


# %%
def test_unit_per_channel():
    w = np.array([[0.1, -2.0, 0.0], [-0.05, 4.0, 1.0]], dtype=np.float32)  # (in=2, out=3), like our Linear
    observer = PerChannelMinMaxObserver(axis=1, symmetric=True)
    observer.observe(w)
    assert observer.min_val.shape == (3,) and np.array_equal(observer.max_val, w.max(axis=0)), (
        f"per-channel ranges along axis 1: expected 3 channels with max [0.1, 4.0, 1.0], got {observer.max_val} " + (
            f"of shape {observer.max_val.shape}: the right values, with the reduced axes kept; reduce without "
            "keepdims, so min_val and max_val have shape (C,)" if observer.max_val.shape == (1, 3) else
            "(reduce over every axis EXCEPT the channel axis)"))
    scales, zero_points = observer.qparams()
    assert np.allclose(scales, np.array([0.1, 4.0, 1.0]) / 127.5) and np.array_equal(zero_points, [0, 0, 0]), (scales, zero_points)
    q = quantize_per_channel(w, scales, zero_points, axis=1)
    assert q.dtype == np.int8 and np.array_equal(q.numpy(), [[127, -64, 0], [-64, 127, 127]]), (
        f"each column with its own scale: expected [[127, -64, 0], [-64, 127, 127]], got {q.numpy().tolist()} "
        "(scales[c] must broadcast along the channel axis: reshape to (1, C) for axis=1)")
    back = dequantize(q, scales, zero_points, axis=1).numpy()
    assert np.all(np.abs(back - w) <= scales / 2 + 1e-7), f"error per column at most scale/2, got {np.abs(back - w)}"
    rows = dequantize(np.ones((2, 2), np.int8), [1.0, 2.0], [0, -1], axis=0).numpy()
    assert np.array_equal(rows, [[1, 1], [4, 4]]), (
        f"dequantize along axis 0: expected [[1, 1], [4, 4]], got {rows.tolist()} (reshape scale and zero_point "
        "to (C, 1) for axis=0 so they broadcast along it: a (C,) array broadcasts along the LAST axis)")
    product_first = quantize_per_channel(np.float32([[27.894709]]), np.float32([0.68875825]), [-11], axis=1).item()
    assert product_first == 30, (
        f"expected 30 (PyTorch's integer), got {product_first}: the per-channel kernel computes x·inv in float32, "
        "then + zero point in float32 (two roundings), then rint; not the per-tensor kernel's float64 multiply-add")
    inverse = quantize_per_channel(np.float32([[19.964939, 48.88528]]), np.float32([1.9014227, 1.6571282]), [0, 0],
                                   axis=1).numpy()
    assert inverse.tolist() == [[11, 30]], (
        f"expected [[11, 30]] (PyTorch's integers), got {inverse.tolist()}: multiply x by inv = np.float32(1) / scales, "
        "never divide by the scales (x / s and x·(1/s) differ in the last bit)")
    observer.observe(np.array([[0.0, 0.0, -3.0]], dtype=np.float32))
    assert np.array_equal(observer.min_val, np.float32([-0.05, -2.0, -3.0])), f"running min per channel: got {observer.min_val}"
    try:
        ones = quantize_per_channel(np.ones((2, 3, 4), np.float32), [0.5, 0.25, 1.0], [0, 1, -1], axis=-2).numpy()
    except ValueError as err:  # NumPy's own message names shapes, not the slip: name it
        if "broadcast" not in str(err):
            raise
        raise AssertionError(
            f"x of shape (2, 3, 4) with 3 scales along axis=-2 raised {err!r}: scales of shape (3,) broadcast along "
            "the LAST axis (4 here); reshape them (and the zero points) to (1, 3, 1), -1 at the channel axis") from None
    assert np.array_equal(ones[0, :, 0], [2, 5, 0]), f"axis=-2 is the middle axis here: expected [2, 5, 0], got {ones[0, :, 0]}"
    print("✓ per channel: ranges over the other axes, scales broadcast along the axis (0 and 1), inverse scale and two "
          "roundings as PyTorch, running min/max, negative axis")


test_unit_per_channel()

# %% [markdown]
# ### Predict, then run: per tensor against per channel
#
# Take a weight matrix `(in=64, out=32)` whose output units have very different sizes: the
# `j`-th column is drawn with standard deviation `10^(−1.5 + 2j/31)`, from `0.03` to `3`.
# Quantize it to int8 symmetric, per tensor and per channel (axis 1), and measure the
# relative error of each column, `|Ŵ − W| / |W|`. Before running: which columns suffer
# with one scale? By how much, roughly, for the smallest columns?

# %%
rng = np.random.default_rng(1)
column_std = 10 ** np.linspace(-1.5, 0.5, 32)
uneven = (rng.standard_normal((64, 32)) * column_std).astype(np.float32)


def relative_error_per_column(w: np.ndarray, w_hat: np.ndarray) -> np.ndarray:
    return np.linalg.norm(w_hat - w, axis=0) / np.linalg.norm(w, axis=0)


tensor_obs = MinMaxObserver(symmetric=True)
tensor_obs.observe(uneven)
s, z = tensor_obs.qparams()
per_tensor_err = relative_error_per_column(uneven, dequantize(quantize_per_tensor(uneven, s, z), s, z).numpy())
channel_obs = PerChannelMinMaxObserver(axis=1, symmetric=True)
channel_obs.observe(uneven)
s, z = channel_obs.qparams()
per_channel_err = relative_error_per_column(uneven, dequantize(quantize_per_channel(uneven, s, z, 1), s, z, 1).numpy())
wrong_obs = PerChannelMinMaxObserver(axis=0, symmetric=True)
wrong_obs.observe(uneven)
s, z = wrong_obs.qparams()
wrong_axis_err = relative_error_per_column(uneven, dequantize(quantize_per_channel(uneven, s, z, 0), s, z, 0).numpy())
print(f"{'column':>8} {'std':>7} {'per tensor':>11} {'per channel':>12} {'axis 0 (wrong)':>15}")
for j in (0, 8, 16, 24, 31):
    print(f"{j:>8} {column_std[j]:7.3f} {per_tensor_err[j]:11.2%} {per_channel_err[j]:12.2%} {wrong_axis_err[j]:15.2%}")

# %% [markdown]
# With one scale, the step is set by the largest column, and a small column is quantized
# with a step that is large *relative to its own weights*: its relative error grows as its
# size falls. Per channel, every column gets a step proportional to its own size, and the
# relative error is about the same for all of them. Quantizing along the wrong axis
# (`axis=0`, the input features) is no better than per tensor here: each row's scale is
# still set by the largest columns. On real trained layers the spread between channels is
# smaller than here, but the effect is the same, and it grows as the bits shrink
# (section 9 measures it on whole models).
#
# ## 5. Outliers: clip the range
#
# Min–max is at the mercy of a single value: one weight (or activation) ten times larger
# than the rest stretches the grid, and every other value is quantized coarsely. A
# **percentile observer** ignores the tails: it takes the range from the `p`-th and
# `(100 − p)`-th percentiles instead of the min and max, so the few values outside are
# clamped (a large error on a few values) and the grid is finer for all the others (a
# smaller error on most values). Which wins depends on the data and on the number of bits.
#
# `PercentileObserver(percentile=99.9, dtype, symmetric)`: each `observe(x)` computes
# `np.percentile` of the flattened x at `100 − percentile` and `percentile` (on the host:
# `to_host`), and keeps the running min of the low ends and max of the high ends. `qparams`
# is `calculate_qparams` on that range. (PyTorch's `HistogramObserver` searches the clipping
# range that minimises the quantization error instead; a percentile is the simplest member
# of that family.)

# %%
#| export
class PercentileObserver(MinMaxObserver):
    """A MinMaxObserver whose range comes from percentiles, clipping outliers.

    percentile -- p in (50, 100]: the range is [percentile 100 − p, percentile p] of the values
                  (np.percentile of the flattened x, default 'linear' method); 100 is min–max
    observe(x): min_val = min(min_val, low), max_val = max(max_val, high) for x's (low, high),
    as float32 NumPy scalars. qparams() as MinMaxObserver's.
    """

    def __init__(self, percentile: float = 99.9, dtype: str = "int8", symmetric: bool = False):
        if not 50 < float(percentile) <= 100:
            raise ValueError(f"PercentileObserver: percentile must be in (50, 100], got {percentile}.")
        super().__init__(dtype, symmetric)
        self.percentile = float(percentile)

    def observe(self, x: Any) -> Any:
        data = _float_input(x, "PercentileObserver.observe").data
        self.batches += 1
        _check_observable(data, "PercentileObserver.observe", self.batches)
        if data.size == 0:
            return x
        ### BEGIN SOLUTION
        low, high = np.percentile(to_host(data).reshape(-1), [100.0 - self.percentile, self.percentile])
        self.min_val = min(self.min_val, np.float32(low))
        self.max_val = max(self.max_val, np.float32(high))
        ### END SOLUTION
        return x


# %%
def test_unit_percentile_observer():
    values = np.concatenate([np.linspace(-1, 1, 999), [100.0]]).astype(np.float32)
    observer = PercentileObserver(99.0)
    try:
        observer.observe(values)
    except ValueError as err:
        if "Quantiles" not in str(err):
            raise
        raise AssertionError(f"PercentileObserver(99.0).observe raised {err!r}: np.quantile takes fractions in "
                             "[0, 1]; np.percentile takes percents (1.0 and 99.0)") from None
    low, high = np.percentile(values, [1.0, 99.0])
    assert np.isclose(observer.min_val, low) and np.isclose(observer.max_val, high), (
        f"range from the 1st and 99th percentiles: expected ({low:.4f}, {high:.4f}), got "
        f"({observer.min_val}, {observer.max_val}); " + (
            "the two ends are swapped: the low end is the (100 - p)-th percentile, the high end the p-th"
            if observer.min_val > observer.max_val else "the outlier 100 must not set the range"))
    observer.observe(np.array([-5.0, 0.0], np.float32))
    assert observer.min_val < -4, f"the running range widens with each batch, got min {observer.min_val}"
    full = PercentileObserver(100.0)
    full.observe(values)
    assert full.max_val == 100.0 and full.min_val == -1.0, "percentile 100 is min-max"
    print("✓ PercentileObserver: percentile range, outliers clipped, running range, 100 = min-max")


test_unit_percentile_observer()

# %% [markdown]
# ### Predict, then run: when does clipping win?
#
# Three tensors of 100,000 values: Gaussian, Gaussian with 20 values made 30 times larger
# (the outliers that appear in the activations of large transformers), and Laplace (heavier
# tails than a Gaussian, the shape of many trained weight matrices). For 8, 6, 4, 3 and 2 bits,
# measure the mean squared error of min–max and of percentile 99.99 and 99.9. Predict
# first: at 8 bits, which wins on the clean Gaussian? At 2 bits?

# %%
def quantization_mse(x: np.ndarray, observer, bits: int) -> float:
    observer.observe(x)
    scale, zero_point = observer.qparams()
    dtype = f"int{bits}"
    return float(np.mean((dequantize(quantize_per_tensor(x, scale, zero_point, dtype), scale, zero_point).numpy() - x) ** 2))


rng = np.random.default_rng(2)
gaussian = rng.standard_normal(100_000).astype(np.float32)
with_outliers = gaussian.copy()
with_outliers[:20] *= 30
laplace = rng.laplace(size=100_000).astype(np.float32)
clip_wins = {}
print(f"{'tensor':>16} {'bits':>4} {'min-max':>9} {'p 99.99':>9} {'p 99.9':>9}   best")
for name, x in (("gaussian", gaussian), ("gaussian+outliers", with_outliers), ("laplace", laplace)):
    for bits in (8, 6, 4, 3, 2):
        errors = {label: quantization_mse(x, make(f"int{bits}"), bits) for label, make in (
            ("min-max", lambda d: MinMaxObserver(d)), ("p 99.99", lambda d: PercentileObserver(99.99, d)),
            ("p 99.9", lambda d: PercentileObserver(99.9, d)))}
        best = min(errors, key=errors.get)
        clip_wins[name, bits] = best != "min-max"
        print(f"{name:>16} {bits:>4} " + " ".join(f"{e:9.2e}" for e in errors.values()) + f"   {best}")

# %% [markdown]
# Read the table by rows. With many bits the grid is already fine, and clipping adds the
# large errors of the clamped tails: at 8 bits the observers are close on the Gaussian, and
# the harder percentile (99.9) is worse there; on the heavier-tailed Laplace min–max is as
# good as any.
# With few bits the step is what hurts, so clipping the tails — a large error on 0.1 % of the
# values — buys a finer grid for the other 99.9 %, and the percentile wins, by more as the
# bits fall and as the tails get heavier. With a handful of huge outliers the picture at 8
# bits flips: min–max keeps them exact at the price of a coarse grid; whether the model
# cares more about the outliers or about the rest is the question the "outlier features"
# of large language models raised (LLM.int8(), Dettmers et al., 2022, keeps them in
# float16). MSE is a proxy: section 9 measures what a model's accuracy says.
#
# ## 6. Four bits: two values per byte
#
# NumPy's smallest integer is one byte. A 4-bit integer (`int4`: `−8 … 7`) needs half of
# one, so we **pack** two values into each `uint8`: element `2i` in the low four bits
# (the low *nibble*) and element `2i + 1` in the high nibble, `byte = low | (high << 4)`.
#
# Negative values are stored in **two's complement**, as every integer is: the 4-bit
# pattern of `−1` is `1111`, of `−8` is `1000`. Taking the low four bits of the int8 value
# (`value & 0x0F`, after viewing it as `uint8`) gives exactly that pattern. Unpacking must
# undo it: a nibble `n` in `0 … 15` means `n` if `n < 8`, else `n − 16`; a neat way to write
# this **sign extension** is `(n ^ 8) − 8`. Forgetting it turns `−1` into `15`.
#
# Worked example: `[3, −2]` → nibbles `0011` and `1110` → byte `1110 0011` = `0xE3` = 227.

# %%
print(f"-2 as a nibble: {np.int8(-2).astype(np.uint8) & 0x0F:04b}; packed byte for [3, -2]: "
      f"{(3 | ((np.int8(-2).astype(np.uint8) & 0x0F) << 4)):#04x}")
print("sign extension (n ^ 8) - 8 for n = 0..15:", [(n ^ 8) - 8 for n in range(16)])

# %%
#| export
def pack_int4(values: Any) -> Any:
    """Two 4-bit integers per byte, along the last axis: (..., n) -> uint8 (..., ceil(n / 2)).

    values -- integers in [-8, 7] (int4) or [0, 15] (uint4): a NumPy / CuPy array or a Tensor
    Element 2i goes to the LOW nibble of byte i and element 2i + 1 to the HIGH nibble:
    byte = (v[2i] & 0x0F) | ((v[2i+1] & 0x0F) << 4), the values in two's complement (take them as
    uint8 first). An odd n is padded with one 0 at the end. Returns an array (NumPy or CuPy, like
    the input), not a Tensor.
    """
    data = values.data if isinstance(values, Tensor) else values
    if data.dtype.kind not in "iu" or data.ndim == 0:
        raise ValueError(f"pack_int4: values must be an integer array with at least one axis, got {data.dtype} "
                         f"of shape {tuple(data.shape)}.")
    if data.size and (int(data.min()) < -8 or int(data.max()) > 15):
        raise ValueError(f"pack_int4: values must lie in [-8, 7] (int4) or [0, 15] (uint4), got "
                         f"[{int(data.min())}, {int(data.max())}].")
    ### BEGIN SOLUTION
    xp = array_module(data)
    nibbles = data.astype(np.int16).astype(np.uint8) & 0x0F
    if nibbles.shape[-1] % 2:
        nibbles = xp.concatenate([nibbles, xp.zeros(nibbles.shape[:-1] + (1,), dtype=np.uint8)], axis=-1)
    return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)
    ### END SOLUTION


def unpack_int4(packed: Any, n: int, signed: bool = True) -> Any:
    """The inverse of pack_int4: uint8 (..., ceil(n / 2)) -> (..., n) integers.

    The low nibble of byte i is element 2i, the high nibble element 2i + 1; the padding after the
    n-th value is dropped. signed=True: int8 values in [-8, 7] (sign extension: (nibble ^ 8) - 8);
    signed=False: uint8 values in [0, 15]. Returns an array (NumPy or CuPy, like the input).
    """
    data = packed.data if isinstance(packed, Tensor) else packed
    if data.dtype != np.uint8 or data.ndim == 0:
        raise ValueError(f"unpack_int4: packed must be a uint8 array with at least one axis, got {data.dtype}.")
    if not 0 <= int(n) <= 2 * data.shape[-1] or int(n) < 2 * data.shape[-1] - 1:
        raise ValueError(f"unpack_int4: {data.shape[-1]} bytes hold {2 * data.shape[-1] - 1} or "
                         f"{2 * data.shape[-1]} values, not n={n}.")
    ### BEGIN SOLUTION
    xp = array_module(data)
    nibbles = xp.stack([data & 0x0F, data >> 4], axis=-1).reshape(data.shape[:-1] + (-1,))[..., :int(n)]
    if not signed:
        return nibbles.astype(np.uint8)
    return ((nibbles.astype(np.int8) ^ 8) - 8).astype(np.int8)
    ### END SOLUTION


# %%
def test_unit_int4_packing():
    packed = pack_int4(np.array([3, -2], dtype=np.int8))
    assert packed.dtype == np.uint8 and packed.tolist() == [0xE3], (
        f"[3, -2] packs to one byte 0xE3 (3 in the LOW nibble, -2 = 1110 in the high one), got {packed.tolist()}")
    low_negative = pack_int4(np.array([-2, 3], dtype=np.int8))
    assert low_negative.tolist() == [0x3E], (
        f"[-2, 3] packs to 0x3E, got {[hex(b) for b in low_negative.tolist()]}: keep only the low four bits of EACH "
        "value (v & 0x0F); -2 as uint8 is 1111 1110, and without the mask its high bits spill into the other nibble")
    unpacked = unpack_int4(np.array([0xE3], dtype=np.uint8), 2, signed=False)
    assert unpacked.tolist() == [3, 14], (
        f"0xE3 unpacks to [3, 14] as uint4, got {unpacked.tolist()}: the LOW nibble (byte & 0x0F) is element 2i, the high one "
        "(byte >> 4) element 2i + 1")
    every = np.arange(-8, 8, dtype=np.int8)
    both_orders = np.stack([every, every[::-1]])
    back = unpack_int4(pack_int4(both_orders), 16)
    minus_8 = (both_orders.astype(np.uint8) & 0x0F).astype(np.int8) - 8
    assert back.dtype == np.int8 and np.array_equal(back, both_orders), (
        f"every value -8..7 must survive pack/unpack, got {back.tolist()} "
        "(sign-extend each nibble: (n ^ 8) - 8; without it -1 comes back as 15)" + (
            ": every nibble came back as n - 8, which is right only for n >= 8 (the negatives); (n ^ 8) - 8 leaves "
            "0..7 as they are" if np.array_equal(back, minus_8) else ""))
    odd = np.array([[1, -1, 7, -8, 3]], dtype=np.int8)
    try:
        packed_odd = pack_int4(odd)
    except ValueError as err:  # NumPy's broadcast error names shapes, not the slip
        raise AssertionError(f"pack_int4 of 5 values raised {err!r}: an odd length has one value without a partner; "
                             "pad one 0 at the end before pairing elements 2i and 2i + 1") from None
    assert packed_odd.shape == (1, 3), f"odd length: pad one 0; 5 values packed to shape {packed_odd.shape}, expected (1, 3)"
    odd_back = unpack_int4(packed_odd, 5)
    assert odd_back.shape == (1, 5), (f"unpack_int4(packed, 5) returned shape {odd_back.shape}, expected (1, 5): drop "
                                      "the padding after the n-th value ([..., :n])")
    assert np.array_equal(odd_back, odd), f"odd length: {odd.tolist()} came back as {odd_back.tolist()}"
    unsigned = np.arange(16, dtype=np.uint8)
    assert np.array_equal(unpack_int4(pack_int4(unsigned), 16, signed=False), unsigned), "uint4 0..15 round trip"
    print("✓ pack_int4 / unpack_int4: layout (low nibble first, each value masked to 4 bits), every value -8..7 and "
          "0..15, odd lengths")


test_unit_int4_packing()

# %% [markdown]
# ## 7. The quantized Linear layer
#
# A quantized layer stores the integers, the scales and the zero points as **buffers**
# (module 03's `register_buffer`): they are saved by `state_dict()` and by module 07's
# checkpoints, moved by `to(device)`, and never trained. There are two classic ways to use
# them.
#
# **Weight-only.** At each call, dequantize the weight, `Ŵ = scale·(q − z)`, and compute
# `x @ Ŵ + b` in float32 with BLAS. The model is smaller on disk and in memory (the integers
# are what is kept; `Ŵ` lives only during the call), the arithmetic is float. This is how
# large language models are usually served at 8 and 4 bits: generating one token reads every
# weight once, so reading a quarter or an eighth of the bytes is what makes it faster on
# real hardware.
#
# **Dynamic.** Quantize the **input** too, at every call, from its own min and max (affine
# int8: `MinMaxObserver` on this `x` alone), and multiply integers. For one output:
#
# $$y_n = \sum_k \hat x_k \hat W_{kn} = s_x\, s_{w,n} \sum_k (q_{x,k} - z_x)\, q_{w,kn}$$
#
# (weights symmetric: their zero point is 0). The sum is an **integer** matrix product. An
# int8 kernel multiplies the 8-bit values as they are and **accumulates in int32**, then
# folds the zero point out with the column sums of the weight:
# `Σ_k (q_x − z_x)·q_w = Σ_k q_x q_w − z_x Σ_k q_w`. Then one float multiply per output,
# `s_x · s_w[n]`, rescales the int32 accumulator to float32, and the bias is added.
#
# **Why int32, and not int8?** A product of two int8 values can reach `(−128)·(−128) =
# 16384`, far beyond int8; a sum of `K` of them reaches `K·16384`. NumPy multiplies int8
# arrays **in int8** and wraps around silently (run the next cell). int32 holds any sum of
# up to `2³¹ / 2¹⁴ = 131072` such products.

# %%
a = np.full((1, 50), 100, dtype=np.int8)
b = np.full((50, 1), 100, dtype=np.int8)
print("int8 @ int8 in NumPy:", (a @ b).item(), f"({(a @ b).dtype}; the true sum is {50 * 100 * 100})")
print("int32 accumulation:  ", (a.astype(np.int32) @ b.astype(np.int32)).item())

# %% [markdown]
# PyTorch's dynamic quantization (`torch.ao.quantization.quantize_dynamic`) does the same
# with int8 weights (per tensor or per channel, symmetric) and `quint8` activations. One
# difference: on x86 its fbgemm kernels use 7-bit activations (`reduce_range=True`),
# because the AVX2 instruction they rely on (`vpmaddubsw`) adds pairs of 8-bit products in
# a saturating int16, which full 8-bit values could overflow. NumPy has no such limit, so
# we keep all 8 bits.
#
# `integer_matmul(qa, a_zero_point, qb)` is that integer product.
#
# Then the layer. `QuantizedLinear(in_features, out_features, bias, mode=..., bits=...,
# per_channel=..., group_size=..., symmetric=...)` makes the layer with empty (zero)
# buffers of the right shapes — what a checkpoint is loaded into — and the classmethod
# `from_float(linear, ...)` builds one from a trained `Linear`. The storage is given:
# `_set_weight(q, scale, zero_point)` packs the integers when `bits <= 4` and stores them,
# `_weight_integers()` unpacks them. You write:
#
# * `from_float`: observe the weight and quantize it. Per channel means per **output**
#   channel: `axis=1` of our `(in, out)` weight. The weight's integers are `int{bits}`
#   (`f"int{bits}"`), symmetric unless `symmetric=False`.
# * `dequantized_weight()`: the float32 `(in, out)` weight the integers stand for.
# * `_forward_weight_only(x)` and `_forward_dynamic(x)`, as above.
#
# **Groups.** With 4 bits and fewer, one scale per column may be too coarse. Grouped
# quantization gives each output channel one scale per **group** of `group_size`
# consecutive input features (GPTQ and llama.cpp use groups of 32 to 128). The given
# `_columns(w, group_size)` reshapes the `(in, out)` weight to `(group_size, (in /
# group_size)·out)`, so that each group of each output channel is one column, and
# `_uncolumns` puts it back: grouped quantization is per-channel quantization of that
# matrix along axis 1. With `group_size=None` both return the weight as it is.

# %%
#| export
def integer_matmul(qa: Any, a_zero_point: int, qb: Any) -> Any:
    """Σ_k (qa[m, k] − a_zero_point) · qb[k, n]: an int32 (M, N) array (NumPy or CuPy, like qa).

    qa -- (M, K) integers (int8 / uint8, the quantized input); a_zero_point -- its zero point
    qb -- (K, N) integers (int8, the weight; its zero point is 0)
    As an int8 kernel computes it: both operands converted to int32 as they are (never multiply
    int8 arrays: NumPy would accumulate in int8 and wrap around), the product qa @ qb accumulated
    in int32, then the zero point folded out: − a_zero_point · (the column sums of qb, in int32).
    """
    if qa.dtype.kind not in "iu" or qb.dtype.kind not in "iu" or qa.ndim != 2 or qb.ndim != 2:
        raise ValueError(f"integer_matmul: two 2-D integer arrays, got {qa.dtype} {tuple(qa.shape)} and "
                         f"{qb.dtype} {tuple(qb.shape)}.")
    if qa.shape[1] != qb.shape[0]:
        raise ValueError(f"integer_matmul: shapes {tuple(qa.shape)} and {tuple(qb.shape)} do not match.")
    ### BEGIN SOLUTION
    b = qb.astype(np.int32)
    acc = qa.astype(np.int32) @ b
    acc -= np.int32(a_zero_point) * b.sum(axis=0, dtype=np.int32)
    return acc
    ### END SOLUTION


def _columns(w: Any, group_size: int | None) -> Any:
    """(in, out) -> (group_size, (in // group_size)·out): column g·out + o is group g of output channel o.
    group_size None: w itself."""
    if group_size is None:
        return w
    groups = w.shape[0] // group_size
    return w.reshape(groups, group_size, w.shape[1]).transpose(1, 0, 2).reshape(group_size, groups * w.shape[1])


def _uncolumns(columns: Any, in_features: int, group_size: int | None) -> Any:
    """The inverse of _columns: (group_size, (in // group_size)·out) -> (in, out)."""
    if group_size is None:
        return columns
    groups = in_features // group_size
    return columns.reshape(group_size, groups, -1).transpose(1, 0, 2).reshape(in_features, -1)


_MODES = ("weight_only", "dynamic")


class QuantizedLinear(Module):
    """A Linear layer (module 03: y = x @ W + b, W of shape (in, out)) with its weight stored as integers.

    mode        -- "weight_only": the forward dequantizes W and multiplies in float32;
                   "dynamic": it also quantizes x (per tensor, int8 affine, from this x's own min and
                   max) and multiplies integers with integer_matmul (needs bits=8, symmetric, no groups)
    bits        -- 2..8: the weight's integers are f"int{bits}"
    per_channel -- one scale per output channel (axis 1 of W), or one for the whole weight
    group_size  -- per channel and per group of group_size consecutive input features (None: whole columns)
    symmetric   -- symmetric weights (zero point 0, the default) or affine
    Buffers: qweight (bits > 4: int8 (in, out); bits <= 4: uint8 (in, ceil(out/2)), pack_int4),
    scale (float32: (1,) per tensor, (out,) per channel, (in // group_size, out) grouped),
    zero_point (int8, scale's shape), bias (float32 (out,), or None). Not trainable (inference only).
    forward(x (..., in)) -> (..., out) float32.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, mode: str = "weight_only",
                 bits: int = 8, per_channel: bool = True, group_size: int | None = None, symmetric: bool = True):
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"QuantizedLinear: mode must be one of {_MODES}, got {mode!r}.")
        if not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 8:
            raise ValueError(f"QuantizedLinear: bits must be an int in 2..8, got {bits!r}.")
        in_features = as_int(in_features, "QuantizedLinear: in_features", minimum=1)
        out_features = as_int(out_features, "QuantizedLinear: out_features", minimum=1)
        if group_size is not None:  # 2.5 was taken as 2
            group_size = as_int(group_size, "QuantizedLinear: group_size", minimum=1)
        if group_size is not None and (not per_channel or int(group_size) < 1 or in_features % int(group_size)):
            raise ValueError(f"QuantizedLinear: group_size={group_size} needs per_channel=True and must divide "
                             f"in_features={in_features}.")
        if mode == "dynamic" and (bits != 8 or group_size is not None or not symmetric):
            raise ValueError("QuantizedLinear: mode='dynamic' multiplies int8 by int8: it needs bits=8, "
                             "symmetric=True and no group_size.")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.mode, self.bits, self.per_channel, self.symmetric = mode, int(bits), bool(per_channel), bool(symmetric)
        self.group_size = None if group_size is None else int(group_size)
        packed_width = (self.out_features + 1) // 2 if self.bits <= 4 else self.out_features
        scale_shape = ((1,) if not per_channel else (self.out_features,) if group_size is None
                       else (self.in_features // self.group_size, self.out_features))
        self.register_buffer("qweight", Tensor(np.zeros((self.in_features, packed_width),
                                                        np.uint8 if self.bits <= 4 else np.int8)))
        self.register_buffer("scale", Tensor(np.ones(scale_shape, np.float32)))
        self.register_buffer("zero_point", Tensor(np.zeros(scale_shape, np.int8)))
        if bias:
            self.register_buffer("bias", Tensor(np.zeros(self.out_features, np.float32)))
        else:
            self.bias = None

    @property
    def weight_dtype(self) -> str:
        """The quantized dtype of the weight's integers, e.g. "int8", "int4"."""
        return f"int{self.bits}"

    def _set_weight(self, q: Any, scale: Any, zero_point: Any) -> None:
        """Store the (in, out) integers q (packed when bits <= 4) and the scales and zero points
        (reshaped to the buffers' shapes), on the layer's device."""
        xp = array_module(self.qweight.data)
        q = xp.asarray(q)
        if tuple(q.shape) != (self.in_features, self.out_features):  # given: named before packing hides the shape
            raise ValueError(
                f"QuantizedLinear: got integers of shape {tuple(q.shape)}, the layer's weight is (in, out) = "
                f"{(self.in_features, self.out_features)}" + (
                    f": grouped columns (group_size={self.group_size}) go back to (in, out) with _uncolumns"
                    if self.group_size is not None else ""))
        scale = np.asarray(to_host(scale), np.float32)
        if scale.size != int(np.prod(self.scale.shape)):  # given: the classic wrong axis, named before any reshape
            raise ValueError(
                f"QuantizedLinear: got {scale.size} scales, the layer needs {int(np.prod(self.scale.shape))} "
                f"(shape {tuple(self.scale.shape)}): per output channel = per COLUMN (axis 1) of our (in, out) "
                "weight, one scale per output feature (PyTorch's weight is (out, in): its axis 0 is our axis 1)")
        qmin, qmax = qrange(self.weight_dtype)
        low, high = (int(to_host(q.min())), int(to_host(q.max()))) if q.size else (qmin, qmax)
        if low < qmin or high > qmax:  # given: integers of another width, named before packing scrambles them
            raise ValueError(
                f"QuantizedLinear: the weight's integers lie in [{low}, {high}], outside {self.weight_dtype}'s "
                f"[{qmin}, {qmax}]: observe and quantize with dtype {self.weight_dtype!r} (f\"int{{bits}}\"), "
                "in the per-tensor branch too, not int8")
        self.qweight.data = pack_int4(q) if self.bits <= 4 else q.astype(np.int8)
        self.scale.data = xp.asarray(scale.reshape(self.scale.shape))
        self.zero_point.data = xp.asarray(np.asarray(to_host(zero_point)).astype(np.int8).reshape(self.scale.shape))

    def _weight_integers(self) -> Any:
        """The (in, out) int8 integers of the weight (unpacked when bits <= 4)."""
        q = self.qweight.data
        return unpack_int4(q, self.out_features) if self.bits <= 4 else q

    @classmethod
    def from_float(cls, linear: Linear, mode: str = "weight_only", bits: int = 8, per_channel: bool = True,
                   group_size: int | None = None, symmetric: bool = True) -> "QuantizedLinear":
        """A QuantizedLinear holding `linear`'s weight quantized (and its bias as a float32 buffer).

        Observe the weight W (in, out) and quantize it to dtype f"int{bits}" (symmetric as asked):
        * per_channel: W_c = _columns(W, group_size); a PerChannelMinMaxObserver on AXIS 1 of W_c
          (the output channels: our weight is (in, out), the transpose of PyTorch's);
          quantize_per_channel(W_c, scales, zero_points, axis=1); q = _uncolumns(q_c, in, group_size);
        * per tensor: a MinMaxObserver and quantize_per_tensor.
        Store with layer._set_weight(q, scales, zero_points).
        """
        if not isinstance(linear, Linear):
            raise TypeError(f"QuantizedLinear.from_float needs a Linear, got {type(linear).__name__}.")
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, mode=mode, bits=bits,
                    per_channel=per_channel, group_size=group_size, symmetric=symmetric)
        layer.to(linear.weight.device)
        if linear.bias is not None:
            layer.bias.data = linear.bias.data.astype(np.float32)
        w = linear.weight.data
        _check_finite_weight(w, "QuantizedLinear.from_float")
        ### BEGIN SOLUTION
        dtype = layer.weight_dtype
        if per_channel:
            columns = _columns(w, group_size)
            observer = PerChannelMinMaxObserver(axis=1, dtype=dtype, symmetric=symmetric)
            observer.observe(columns)
            scales, zero_points = observer.qparams()
            q = _uncolumns(quantize_per_channel(columns, scales, zero_points, 1, dtype).data,
                           linear.in_features, group_size)
        else:
            observer = MinMaxObserver(dtype, symmetric)
            observer.observe(w)
            scales, zero_points = observer.qparams()
            q = quantize_per_tensor(w, scales, zero_points, dtype).data
        layer._set_weight(q, scales, zero_points)
        ### END SOLUTION
        return layer

    def dequantized_weight(self) -> Tensor:
        """The float32 (in, out) weight the integers stand for: scale·(q − zero_point), with
        q = self._weight_integers(); per tensor: dequantize(q, scale, zero_point); per channel:
        dequantize along axis 1 of _columns(q, group_size) (scales and zero points flattened to 1-D,
        as from_float made them), then _uncolumns."""
        q = self._weight_integers()
        ### BEGIN SOLUTION
        if not self.per_channel:
            return dequantize(q, self.scale.data, self.zero_point.data)
        columns = dequantize(_columns(q, self.group_size), self.scale.data.reshape(-1),
                             self.zero_point.data.reshape(-1), axis=1).data
        return Tensor(_uncolumns(columns, self.in_features, self.group_size))
        ### END SOLUTION

    def forward(self, x: Any) -> Tensor:
        x = as_tensor(x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"QuantizedLinear({self.in_features} -> {self.out_features}) expects inputs of shape "
                             f"(..., {self.in_features}), got {x.shape}.")
        if self.mode == "weight_only":
            return self._forward_weight_only(x)
        where = f"QuantizedLinear({self.in_features} -> {self.out_features}, dynamic int8)"
        x = _float_input(x, where)
        if x.data.size == 0:  # an empty batch has no range to measure: its output is empty too, as PyTorch's
            return Tensor(array_module(x.data).zeros((*x.shape[:-1], self.out_features), np.float32))
        bad = int(to_host((~array_module(x.data).isfinite(x.data)).sum()))
        if bad:
            raise ValueError(f"{where}: the input x holds {bad} NaN or infinite value(s); dynamic quantization "
                             "measures x's range per call and int8 has no NaN or inf (a diverged layer before "
                             "this one?).")
        return self._forward_dynamic(x)

    def _forward_weight_only(self, x: Tensor) -> Tensor:
        """x @ dequantized_weight() (+ self.bias): float arithmetic with Tensor operations, as module 03's
        Linear.forward, so that the graph records them and a gradient reaches x."""
        ### BEGIN SOLUTION
        out = x @ self.dequantized_weight()
        return out if self.bias is None else out + self.bias
        ### END SOLUTION

    def _forward_dynamic(self, x: Tensor) -> Tensor:
        """Integer arithmetic, as PyTorch's dynamic quantization:
        rows = x's array as (N, in); a fresh MinMaxObserver("int8") (affine) observes rows and gives
        (x_scale, x_zero_point); qx = quantize_per_tensor(rows, x_scale, x_zero_point).data;
        acc = integer_matmul(qx, x_zero_point, self._weight_integers())                  (int32);
        out = acc as float32 · (float32(x_scale) · self.scale) (+ bias), reshaped to (..., out).
        Returns a new Tensor (no graph: rounding has no useful gradient)."""
        ### BEGIN SOLUTION
        rows = x.data.reshape(-1, self.in_features)
        observer = MinMaxObserver("int8")
        observer.observe(rows)
        x_scale, x_zero_point = observer.qparams()
        qx = quantize_per_tensor(rows, x_scale, x_zero_point).data
        acc = integer_matmul(qx, x_zero_point, self._weight_integers())
        out = acc.astype(np.float32) * (np.float32(x_scale) * self.scale.data)
        if self.bias is not None:
            out += self.bias.data
        return Tensor(out.reshape(*x.shape[:-1], self.out_features))
        ### END SOLUTION

    def extra_repr(self) -> str:
        grouping = "per tensor" if not self.per_channel else (
            "per channel" if self.group_size is None else f"per channel, groups of {self.group_size}")
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"mode={self.mode}, weight={self.weight_dtype} {'symmetric' if self.symmetric else 'affine'} {grouping}")


# %%
def test_unit_integer_matmul():
    rng = np.random.default_rng(3)
    qa = rng.integers(-128, 128, (5, 300)).astype(np.int8)
    qb = rng.integers(-128, 128, (300, 4)).astype(np.int8)
    try:
        acc = integer_matmul(qa, 7, qb)
    except (ValueError, TypeError) as err:  # NumPy's own words name shapes or dtypes, not the slip
        raise AssertionError(f"integer_matmul((5, 300), 7, (300, 4)) raised {type(err).__name__}: {err}. " + (
            "The zero-point term must have one value per output column, shape (4,): the column sums of qb, "
            "qb summed over axis 0 (over k), not over axis 1" if "broadcast" in str(err) else
            "The int32 accumulator cannot take an int64 term in place: sum qb's columns in int32 "
            "(sum(axis=0, dtype=np.int32)); NumPy sums int8 in int64" if "cast" in str(err) else "")) from None
    exact = (qa.astype(np.float64) - 7) @ qb.astype(np.float64)   # float64 holds these integers exactly
    assert acc.dtype == np.int32, f"integer_matmul accumulates in int32, got {acc.dtype}"
    column_sums = qb.astype(np.int64).sum(axis=0)
    slips = {  # what the classic slips compute (int8 arithmetic wraps around as NumPy's does)
        "the sum of (qa + zero_point)·qb: SUBTRACT zero_point times the column sums of qb":
            (qa.astype(np.float64) + 7) @ qb.astype(np.float64),
        "qa @ qb computed on the int8 arrays: int8 accumulation overflows (wraps around); convert both operands "
        "to int32 first": (qa @ qb).astype(np.int64) - 7 * column_sums,
        "qa - zero_point on the int8 array wraps around (qa - 7 leaves int8's range): convert to int32 first, or "
        "fold the zero point out with the column sums of qb": (qa - np.int8(7)).astype(np.int64) @ qb.astype(np.int64),
    }
    named = [what for what, value in slips.items() if np.array_equal(acc, value)]
    assert np.array_equal(acc, exact), (
        "integer_matmul must equal the exact sum of (qa - zero_point)·qb; the largest difference is "
        f"{np.abs(acc - exact).max()}: " + (named[0] if named else
            "int8 arithmetic wraps around (int8 accumulation overflows, and so does qa - zero_point on the int8 "
            "array): convert both operands to int32 first; fold the zero point out with the column sums of qb"))
    print("✓ integer_matmul: exact int32 accumulation with the zero point folded out")


test_unit_integer_matmul()


# %% [markdown]
# The dynamic forward's test names the classic slip its numbers match, with a given helper,
# `dynamic_slip`, in `quantization_checks.py` beside this lesson (`tinytorch.perf.quantization_checks`).

# %%
from tinytorch.perf.quantization_checks import (  # given: modules/15_quantization/quantization_checks.py
    dynamic_slip)


# %%
def test_unit_quantized_linear():
    linear = Linear(3, 2, seed=0)
    linear.weight.data = np.array([[0.5, -0.02], [-0.75, 0.01], [1.0, 0.04]], dtype=np.float32)
    layer = QuantizedLinear.from_float(linear)
    assert layer.qweight.dtype == np.int8 and layer.qweight.shape == (3, 2), (layer.qweight.dtype, layer.qweight.shape)
    assert np.allclose(layer.scale.numpy(), [1.0 / 127.5, 0.04 / 127.5]), (
        f"per output channel = per COLUMN of our (in, out) weight: expected scales [1/127.5, 0.04/127.5], got "
        f"{layer.scale.numpy()} (PyTorch's weight is (out, in): its axis 0 is our axis 1)")
    assert np.array_equal(layer.qweight.numpy(), [[64, -64], [-96, 32], [127, 127]]), (
        f"expected integers [[64, -64], [-96, 32], [127, 127]], got {layer.qweight.numpy().tolist()}")
    x = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    w_hat = layer.dequantized_weight().numpy()
    got, expected = layer(Tensor(x)).numpy(), x @ w_hat + linear.bias.numpy()
    assert np.allclose(got, expected, atol=1e-6), (
        f"weight-only forward: expected x @ dequantized_weight() + bias = {expected.tolist()}, got {got.tolist()}" + (
            ": that is x @ dequantized_weight() without the bias" if np.allclose(got, x @ w_hat, atol=1e-6) else ""))
    x_grad = Tensor(x, requires_grad=True)
    y = layer(x_grad)
    assert y.requires_grad, (
        "weight-only forward: x requires a gradient but the output does not, so no gradient can reach x: build the "
        "output with Tensor operations (x @ self.dequantized_weight() + self.bias), not from arrays (.data) wrapped "
        "in a new Tensor")
    assert np.all(np.abs(w_hat - linear.weight.numpy()) <= layer.scale.numpy() / 2 + 1e-7), "|W - Ŵ| <= scale/2"
    four = QuantizedLinear.from_float(linear, bits=4)
    assert four.qweight.dtype == np.uint8 and four.qweight.shape == (3, 1), "int4: two values per byte"
    tensor_four = QuantizedLinear.from_float(linear, bits=4, per_channel=False)
    assert np.isclose(tensor_four.scale.item(), 1.0 / 7.5), (
        f"int4 per tensor: expected the scale max|w| / 7.5 = {1 / 7.5:.6f}, got {tensor_four.scale.item():.6f}: "
        "observe the weight with the layer's dtype, f\"int{bits}\"")
    lopsided = Linear(3, 2, seed=0)
    lopsided.weight.data = np.array([[0.5, 0.2], [1.0, 0.1], [0.0, -0.1]], dtype=np.float32)
    affine = QuantizedLinear.from_float(lopsided, symmetric=False)
    observer = PerChannelMinMaxObserver(axis=1, symmetric=False)
    observer.observe(lopsided.weight)
    assert np.array_equal(affine.zero_point.numpy(), observer.qparams()[1]), (
        f"from_float(symmetric=False): expected the affine zero points {observer.qparams()[1].tolist()}, got "
        f"{affine.zero_point.numpy().tolist()}" + (": the weight was observed symmetric; pass symmetric=symmetric to "
                                                  "the observer" if not affine.zero_point.numpy().any() else ""))
    assert np.array_equal(four._weight_integers(), [[4, -4], [-6, 2], [7, 7]]), (
        f"int4 symmetric (scale max|w|/7.5): expected [[4, -4], [-6, 2], [7, 7]], got {four._weight_integers().tolist()}")
    dyn = QuantizedLinear.from_float(linear, mode="dynamic")
    xs = np.random.default_rng(4).standard_normal((2, 4, 3)).astype(np.float32)
    out = dyn(Tensor(xs)).numpy()
    assert out.shape == (2, 4, 2), (f"dynamic forward of x (2, 4, 3): expected shape (2, 4, 2), got {out.shape}: "
                                    "reshape the (N, out) rows back to x's leading axes, (..., out)")
    assert out.dtype == np.float32, (f"dynamic forward returned {out.dtype}: convert the int32 accumulator to float32 "
                                     "before multiplying by the scales (NumPy's int32 times float32 is float64)")
    slip = dynamic_slip(out.reshape(-1, 2), xs.reshape(-1, 3), layer.qweight.numpy(), layer.scale.numpy(),
                        linear.bias.numpy(), MinMaxObserver, quantize_per_tensor)
    assert slip is None, f"dynamic forward: {slip}"
    print("✓ QuantizedLinear: per output channel, int8 and packed int4 weights, weight-only and dynamic forwards")


test_unit_quantized_linear()

# %% [markdown]
# ### How close is the quantized layer? A bound, derived
#
# Weight-only: every weight inside its range is off by at most half a step,
# `|W_kn − Ŵ_kn| ≤ s_n / 2` (symmetric min–max: the largest weight maps to `±127.5` steps,
# which rounds or clamps to `±127` or `−128`, half a step away at most). Then for one output
#
# $$|y_n - \hat y_n| = \Big|\sum_k x_k (W_{kn} - \hat W_{kn})\Big| \le \frac{s_n}{2} \sum_k |x_k| .$$
#
# Dynamic: the input is off by at most `s_x / 2` too (its min and max are its own, so
# nothing is clamped), `x̂ = x + e_x`, and `x̂ Ŵ − x W = e_x Ŵ + x (Ŵ − W)`, so
#
# $$|y_n - \hat y_n| \le \frac{s_x}{2}\sum_k |\hat W_{kn}| + \frac{s_n}{2}\sum_k |x_k| .$$
#
# The bound is the worst case, every error pushing the same way. The errors of different
# weights have random signs and mostly cancel (a sum of `K` such errors grows like `√K`, not
# `K`), so the typical error is many times smaller than the bound: the cell below measures
# both.

# %%
rng = np.random.default_rng(5)
layer_f = Linear(256, 64, seed=1)
x_check = rng.standard_normal((32, 256)).astype(np.float32)
exact = layer_f(Tensor(x_check)).numpy()
for mode in ("weight_only", "dynamic"):
    lq = QuantizedLinear.from_float(layer_f, mode=mode)
    err = np.abs(lq(Tensor(x_check)).numpy() - exact)
    bound = lq.scale.numpy() / 2 * np.abs(x_check).sum(axis=1, keepdims=True)
    if mode == "dynamic":
        x_obs = MinMaxObserver()
        x_obs.observe(x_check)
        bound = bound + x_obs.qparams()[0] / 2 * np.abs(lq.dequantized_weight().numpy()).sum(axis=0)
    print(f"{mode:11s}: largest error {err.max():.2e}, bound {bound.min():.2e} .. {bound.max():.2e}, "
          f"error / bound at most {np.max(err / bound):.3f}, typical {np.median(err / bound):.4f}")

# %% [markdown]
# ## 8. Quantizing a whole model
#
# `quantize_model(model, mode, bits, per_channel, **options)` returns a **new** model in
# which every `Linear` — however deep, inside `Sequential`s, `ModuleList`s and the GPT's
# blocks — is replaced by `QuantizedLinear.from_float(linear, ...)`. The original is left
# untouched: deep-copy it first (`copy.deepcopy`), then replace the submodules *of the copy*.
# A later module never changes an earlier module's classes; it replaces submodules, so the
# quantized GPT runs module 13's own `forward`, calling our layers where the Linears were.
#
# To find the Linears, walk `named_modules()` (module 03): each entry is a dotted name such
# as `blocks.0.attn.q_proj` and the module. Module 03's `root.set_submodule(name, new)` puts
# `new` at that name, inside lists too. A model that *is* a Linear becomes a
# `QuantizedLinear`.
#
# **What about the GPT's output layer?** Module 13's GPT ties its head to the token
# embedding: the logits are `x @ token_embedding.weightᵀ`, a matrix product with the
# embedding's table, not a `Linear`. Left alone, the two embedding tables stay float32. They
# are a small share of the GPT's weights, but once the Linears shrink to a quarter they are a
# much larger share of the checkpoint (section 9 measures it), so we quantize them too:
# `QuantizedEmbedding` (given) stores module 11's table as integers with
# **one symmetric scale per row**, and its `weight` is the dequantized float32 table. Each
# row of the token table is one token: its embedding vector, and — through the tied head —
# the output channel that scores that token. So per-row quantization is per-channel
# quantization for *both* uses, and the tied head keeps working unchanged: module 13's
# `forward` reads `token_embedding.weight` and gets the dequantized table. The head's
# product stays a float one (weight-only) in both modes.
#
# The tables get their own number of bits, `embedding_bits` (default 8), whatever `bits` the
# Linears get: the token table is the model's first layer *and* its last, the one that
# turns the final vector into scores, and the last layer is the one quantization hurts most
# (section 9 measures what 4 bits in the table cost). `quantize_model(...,
# embeddings=False)` leaves the tables in float32.

# %%
#| export
from tinytorch.text.embeddings import Embedding, embedding


class QuantizedEmbedding(Module):
    """Module 11's Embedding with its table stored as integers: one symmetric scale per row (per token).

    bits -- 2..8: the rows' integers are f"int{bits}" (packed two per byte when bits <= 4)
    weight -- the dequantized float32 table (num_embeddings, embedding_dim), a Tensor made at each
              access (module 13's tied head multiplies by it); forward(ids) = module 11's
              embedding(weight, ids, padding_idx). Buffers: qweight, scale (num,), zero_point (num,).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *, bits: int = 8):
        super().__init__()
        if not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 8:
            raise ValueError(f"QuantizedEmbedding: bits must be an int in 2..8, got {bits!r}.")
        self.num_embeddings = as_int(num_embeddings, "QuantizedEmbedding: num_embeddings", minimum=1)
        self.embedding_dim = as_int(embedding_dim, "QuantizedEmbedding: embedding_dim", minimum=1)
        self.padding_idx, self.bits = padding_idx, int(bits)
        width = (self.embedding_dim + 1) // 2 if self.bits <= 4 else self.embedding_dim
        self.register_buffer("qweight", Tensor(np.zeros((self.num_embeddings, width),
                                                        np.uint8 if self.bits <= 4 else np.int8)))
        self.register_buffer("scale", Tensor(np.ones(self.num_embeddings, np.float32)))
        self.register_buffer("zero_point", Tensor(np.zeros(self.num_embeddings, np.int8)))

    @classmethod
    def from_float(cls, table: Embedding, bits: int = 8) -> "QuantizedEmbedding":
        _check_finite_weight(table.weight.data, "QuantizedEmbedding.from_float")
        layer = cls(table.num_embeddings, table.embedding_dim, table.padding_idx, bits=bits)
        layer.to(table.weight.device)
        observer = PerChannelMinMaxObserver(axis=0, dtype=f"int{bits}", symmetric=True)
        observer.observe(table.weight)
        scales, zero_points = observer.qparams()
        q = quantize_per_channel(table.weight, scales, zero_points, 0, f"int{bits}").data
        xp = array_module(layer.qweight.data)
        layer.qweight.data = pack_int4(q) if layer.bits <= 4 else q
        layer.scale.data = xp.asarray(scales)
        layer.zero_point.data = xp.asarray(zero_points.astype(np.int8))
        return layer

    @property
    def weight(self) -> Tensor:
        q = self.qweight.data
        q = unpack_int4(q, self.embedding_dim) if self.bits <= 4 else q
        return dequantize(q, self.scale.data, self.zero_point.data, axis=0)

    def forward(self, ids: Any) -> Tensor:
        return embedding(self.weight, ids, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, weight=int{self.bits} symmetric per row"


# %%
#| export
def quantize_model(model: Module, mode: str = "weight_only", bits: int = 8, per_channel: bool = True,
                   embeddings: bool = True, embedding_bits: int = 8, **options: Any) -> Module:
    """A new model: a deep copy of `model` with every Linear replaced by
    QuantizedLinear.from_float(linear, mode, bits, per_channel, **options) (options: group_size,
    symmetric) and, when `embeddings` is True, every Embedding by
    QuantizedEmbedding.from_float(table, embedding_bits).
    `model` itself is not changed. A model that is itself a Linear (an Embedding) is returned as a
    QuantizedLinear (a QuantizedEmbedding): named_modules() lists the root first, under the name "",
    which set_submodule refuses. Use copy.deepcopy, named_modules() (every depth, not only
    named_children()) and module 03's root.set_submodule(name, new)."""
    if not isinstance(model, Module):
        raise TypeError(f"quantize_model needs a Module, got {type(model).__name__}.")
    for name, param in [*model.named_parameters(), *model.named_buffers()]:  # before any copy: name the tensor
        if param.dtype.kind == "f":
            _check_finite_weight(param.data, "quantize_model", what=f"the model's {name!r}")
    ### BEGIN SOLUTION
    quantized = copy.deepcopy(model)
    if isinstance(quantized, Linear):
        return QuantizedLinear.from_float(quantized, mode, bits, per_channel, **options)
    if embeddings and isinstance(quantized, Embedding):
        return QuantizedEmbedding.from_float(quantized, embedding_bits)
    for name, module in quantized.named_modules()[1:]:  # [0] is ("", the root), handled above
        if isinstance(module, Linear):
            quantized.set_submodule(name, QuantizedLinear.from_float(module, mode, bits, per_channel, **options))
        elif embeddings and isinstance(module, Embedding):
            quantized.set_submodule(name, QuantizedEmbedding.from_float(module, embedding_bits))
    return quantized
    ### END SOLUTION


def checkpoint_bytes(model_or_path: Any, path: str | os.PathLike | None = None) -> int:
    """Bytes on disk of module 07's checkpoint (os.stat: what the file really takes, headers included);
    the course's one way of weighing a model on disk.

    checkpoint_bytes(model, path): saves `model` at `path` (".npz" added when missing), keeps the file;
    checkpoint_bytes(model): saves it in a temporary folder, measures it and deletes it;
    checkpoint_bytes(path): the size of a checkpoint file already on disk."""
    if isinstance(model_or_path, (str, os.PathLike)):
        if path is not None:
            raise TypeError("checkpoint_bytes(path) measures a file; to save a model give checkpoint_bytes(model, path).")
        return Path(model_or_path).stat().st_size
    if path is None:
        with tempfile.TemporaryDirectory() as folder:
            return save_checkpoint(Path(folder) / "model.npz", model_or_path).stat().st_size
    return save_checkpoint(path, model_or_path).stat().st_size


# %%
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Sequential


def test_unit_quantize_model():
    model = Sequential(Linear(4, 8, seed=0), ReLU(), Sequential(Linear(8, 8, seed=1), ReLU()), Linear(8, 3, seed=2))
    before = {name: value.copy() for name, value in model.state_dict().items()}
    quantized = quantize_model(model)
    kinds = [type(m).__name__ for m in quantized.modules() if isinstance(m, (Linear, QuantizedLinear))]
    assert kinds == ["QuantizedLinear"] * 3, f"every Linear, nested ones too, becomes a QuantizedLinear: got {kinds}"
    assert all(isinstance(m, Linear) for m in (model[0], model[2][0], model[3])), (
        "quantize_model must not change the original model: deep-copy it and replace the copy's submodules")
    assert all(np.array_equal(before[k], v) for k, v in model.state_dict().items()), "the original's weights changed"
    state = quantized.state_dict()
    assert state["0.qweight"].dtype == np.int8 and state["2.0.qweight"].dtype == np.int8, {k: v.dtype for k, v in state.items()}
    x = np.random.default_rng(6).standard_normal((5, 4)).astype(np.float32)
    assert np.allclose(quantized(Tensor(x)).numpy(), model(Tensor(x)).numpy(), atol=0.05), "close to the float model"
    assert isinstance(quantize_model(Linear(3, 2, seed=0), bits=4), QuantizedLinear), "a Linear becomes a QuantizedLinear"
    grouped = quantize_model(model, bits=4, group_size=2)[0]
    assert grouped.group_size == 2 and grouped.scale.shape == (2, 8), (
        f"quantize_model(model, bits=4, group_size=2): the first layer has group_size {grouped.group_size} and scales "
        f"of shape {grouped.scale.shape}, expected 2 and (2, 8): pass **options (group_size, symmetric) on to "
        "QuantizedLinear.from_float")
    print("✓ quantize_model: every Linear replaced, original untouched, integers in the state_dict")


test_unit_quantize_model()

# %% [markdown]
# ### Saving the integers
#
# The quantized model is an ordinary `Module`: module 07's `save_checkpoint` stores its
# `state_dict`, and the integer buffers go into the `.npz` file as `int8` / `uint8` arrays,
# one byte per value (half a byte for 4 bits). Loading needs a model of the same shape to
# load into: quantize a freshly built model the same way (the integers are then overwritten)
# and call `load_checkpoint`. `checkpoint_bytes(model, path)` (given) saves a model and
# returns the size of the file on disk; `checkpoint_bytes(model)` does the same in a temporary
# folder, and `checkpoint_bytes(path)` weighs a file already saved. Modules 19 and 20, the
# milestones and the benchmarks weigh every model with it.

# %%
import tempfile

from tinytorch.core.training import load_checkpoint


def test_unit_checkpoint_round_trip():
    model = Sequential(Linear(16, 32, seed=0), ReLU(), Linear(32, 4, seed=1))
    folder = Path(tempfile.mkdtemp())
    for bits in (8, 4):
        quantized = quantize_model(model, bits=bits)
        size = checkpoint_bytes(quantized, folder / f"int{bits}.npz")
        skeleton = quantize_model(Sequential(Linear(16, 32, seed=5), ReLU(), Linear(32, 4, seed=6)), bits=bits)
        load_checkpoint(folder / f"int{bits}.npz", skeleton)
        for name, value in quantized.state_dict().items():
            loaded = skeleton.state_dict()[name]
            assert loaded.dtype == value.dtype and np.array_equal(loaded, value), f"{name} did not round-trip"
        x = Tensor(np.ones((2, 16), np.float32))
        assert np.array_equal(skeleton(x).numpy(), quantized(x).numpy()), (
            f"int{bits}: the model loaded from the checkpoint computes differently from the one saved")
        on_disk = os.path.getsize(folder / f"int{bits}.npz")
        assert size == on_disk, f"checkpoint_bytes returned {size:,}, the file on disk has {on_disk:,} bytes"
    fp32 = checkpoint_bytes(model, folder / "fp32.npz")
    assert checkpoint_bytes(folder / "fp32.npz") == fp32 == checkpoint_bytes(model), \
        "checkpoint_bytes(path) weighs the saved file, checkpoint_bytes(model) a temporary one: the same bytes"
    print(f"✓ checkpoints: integer buffers round-trip bit for bit (fp32 file {fp32:,} bytes, "
          f"int8 {os.path.getsize(folder / 'int8.npz'):,}, int4 {os.path.getsize(folder / 'int4.npz'):,})")


test_unit_checkpoint_round_trip()

# %% [markdown]
# For a model this small the files are mostly headers (each array in an `.npz` carries its
# own), so the ratio is far from 4×; section 9 measures real models.
#
# ## 9. What the bits cost, measured on your models
#
# Everything so far checked that the integers are right. Now the question that matters: how
# much accuracy does each bit buy? We train three models for a few seconds each, quantize
# every one at 8, 6, 4, 3 and 2 bits, per tensor and per channel, and measure:
#
# * an MLP (`64 → 128 → 64 → 10`) and a small CNN (two 3×3 convolutions of 8 and 16 channels,
#   a max-pool and two Linear layers) on the 8×8 handwritten digits of the milestones
#   (`datasets/digits.npz`, the same 80/20 split), test accuracy;
# * the Shakespeare GPT, validation loss on fixed batches: the milestone's trained model
#   when `tito milestone run shakespeare` has saved it (`shakespeare_gpt.npz` in
#   `<temp>/tinytorch-shakespeare/`), otherwise a small GPT trained here for a few seconds
#   (the cell says which).
#
# Weight-only quantization everywhere (dynamic quantization changes the activations as well;
# it is measured once at the end). `quantize_model` replaces Linear and Embedding layers:
# the CNN's convolutions stay float32 (the cell prints what fraction of the weights they are).
#
# **Predict first:** at how many bits does each model start to lose accuracy? Is the gap
# between per tensor and per channel larger at 8 bits or at 3?

# %%
from tinytorch.core.spatial import Conv2d, Flatten, MaxPool2d
from tinytorch.perf.quantization_models import (  # given: modules/15_quantization/quantization_models.py
    digits_split, shakespeare_gpt, test_accuracy, train_classifier, validation_batches,
    validation_loss)

DATASETS = Path("../../datasets")
if not DATASETS.exists():  # run from the repository root
    DATASETS = Path("datasets")
images, labels, test_idx, train_idx = digits_split(DATASETS)        # the milestones' split
flat = images.reshape(len(images), -1)
mlp = train_classifier(Sequential(Linear(64, 128, seed=1), ReLU(), Linear(128, 64, seed=2), ReLU(),
                                  Linear(64, 10, seed=3)), flat[train_idx], labels[train_idx], epochs=12)
cnn = train_classifier(Sequential(Conv2d(1, 8, 3, padding=1, seed=1), ReLU(), Conv2d(8, 16, 3, padding=1, seed=2),
                                  ReLU(), MaxPool2d(2), Flatten(), Linear(16 * 4 * 4, 32, seed=3), ReLU(),
                                  Linear(32, 10, seed=4)), images[train_idx, None], labels[train_idx], epochs=6)
digit_models = {"MLP": (mlp, flat[test_idx]), "CNN": (cnn, images[test_idx, None])}
conv_share = sum(m.weight.size for m in cnn.modules() if isinstance(m, Conv2d)) / sum(p.size for p in cnn.parameters())
print(f"CNN: the convolutions hold {conv_share:.0%} of its parameters and stay float32")

BITS = (8, 6, 4, 3, 2)
measured = {}  # named digit_results only once complete: a cell that stops half-way leaves no half table
print(f"{'model':>5} {'fp32':>7} | " + " ".join(f"{'int' + str(b):>13}" for b in BITS) + " | int8 dynamic")
print(f"{'':>5} {'':>7} | " + " ".join(f"{'tensor chan':>13}" for _ in BITS) + " |")
for name, (model, x_test) in digit_models.items():
    y_test = labels[test_idx]
    base = test_accuracy(model, x_test, y_test)
    measured[name] = {"fp32": base}
    for bits in BITS:
        for per_channel in (False, True):
            measured[name][bits, per_channel] = test_accuracy(
                quantize_model(model, bits=bits, per_channel=per_channel), x_test, y_test)
    measured[name]["dynamic"] = test_accuracy(quantize_model(model, mode="dynamic"), x_test, y_test)
    cells = " ".join(f"{100 * measured[name][b, False]:6.1f} {100 * measured[name][b, True]:6.1f}" for b in BITS)
    print(f"{name:>5} {100 * base:6.1f}% | {cells} | {100 * measured[name]['dynamic']:6.1f}")
print(f"(test set: {len(test_idx)} images; one image is {100 / len(test_idx):.2f} accuracy points)")
digit_results = measured

# %% [markdown]
# Now the GPT. The given `shakespeare_gpt` (in `quantization_models.py` beside this lesson,
# with the digits' split and training loop of the cell above) looks for the milestone's
# checkpoint, builds the GPT its saved recipe describes (module 07's `load_checkpoint` refuses
# a file whose weights do not fit it), and says how long that model was trained.

# %%
from tinytorch.core.autograd import no_grad

gpt, tokenizer, text, context = shakespeare_gpt(DATASETS)
val_batches = validation_batches(tokenizer, text, context)
gpt_losses = {"fp32": validation_loss(gpt, val_batches)}  # named gpt_results once complete, as above
for bits in BITS:
    for per_channel in (False, True):
        gpt_losses[bits, per_channel] = validation_loss(quantize_model(gpt, bits=bits, per_channel=per_channel),
                                                        val_batches)
gpt_results = gpt_losses
print(f"validation loss on {len(val_batches)} batches of 12 x {context}: fp32 {gpt_results['fp32']:.4f}")
for bits in BITS:
    print(f"  int{bits}: per tensor {gpt_results[bits, False]:.4f} ({gpt_results[bits, False] - gpt_results['fp32']:+.4f}), "
          f"per channel {gpt_results[bits, True]:.4f} ({gpt_results[bits, True] - gpt_results['fp32']:+.4f})")
one_batch = val_batches[:1]
print(f"int8 dynamic on one batch: {validation_loss(quantize_model(gpt, mode='dynamic'), one_batch):.4f} "
      f"against fp32 {validation_loss(gpt, one_batch):.4f} on the same batch")

# %%
from tinytorch.plotting import pyplot  # module 02's: files only where no window can open

plt = pyplot()

fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
for ax, (name, results, metric) in zip(axes, (("digits MLP", digit_results["MLP"], "test accuracy (%)"),
                                             ("digits CNN", digit_results["CNN"], "test accuracy (%)"),
                                             ("Shakespeare GPT", gpt_results, "validation loss"))):
    scale_by = 100 if "accuracy" in metric else 1
    for per_channel, style in ((False, "o--"), (True, "s-")):
        ax.plot(BITS, [scale_by * results[b, per_channel] for b in BITS], style,
                label="per channel" if per_channel else "per tensor")
    ax.axhline(scale_by * results["fp32"], color="grey", lw=1, label="float32")
    ax.set_title(name)
    ax.set_xlabel("bits per weight")
    ax.set_ylabel(metric)
    ax.invert_xaxis()
    ax.legend()
fig.tight_layout()
bits_plot = Path(tempfile.mkdtemp()) / "quantization_bits.png"
fig.savefig(bits_plot, dpi=90)
print("saved", bits_plot)

# %% [markdown]
# Read the plot from left to right (fewer bits). At 8 bits every model is where it was in
# float32, or within a test image of it: the grid is far finer than anything the models care
# about. The losses start at a few bits, and at the fewest bits **per tensor** is usually the
# first to collapse: one scale for a whole matrix is set by its largest weight, and the
# channels with small weights get only a handful of integers. In between, per tensor and per
# channel can swap places by an image or two (359 test images, and a few thousand validation
# characters for the GPT, make a small, noisy yardstick). At 2 bits — four values per weight —
# every model is badly hurt. Where exactly each curve bends is for your run to say; the
# milestone measures the trained GPT on 200 batches.
#
# Now the bytes. The checkpoint of each model in float32, int8 and int4, and where the bytes
# of the int8 GPT are:

# %%
size_folder = Path(tempfile.mkdtemp())
print(f"{'model':>16} {'fp32':>10} {'int8':>10} {'int4':>10}   fp32/int8  fp32/int4")
for name, model in (("digits MLP", mlp), ("digits CNN", cnn), ("GPT", gpt)):
    sizes = {label: checkpoint_bytes(m, size_folder / f"{name}-{label}.npz") for label, m in (
        ("fp32", model), ("int8", quantize_model(model, bits=8)), ("int4", quantize_model(model, bits=4)))}
    print(f"{name:>16} {sizes['fp32']:10,} {sizes['int8']:10,} {sizes['int4']:10,}   "
          f"{sizes['fp32'] / sizes['int8']:8.2f}x {sizes['fp32'] / sizes['int4']:9.2f}x")
gpt_int8 = quantize_model(gpt, bits=8)
by_kind = {}
for name, value in gpt_int8.state_dict().items():
    kind = f"{value.dtype}" + (" (LayerNorm)" if name.startswith("ln") or ".ln" in name else "")
    by_kind[kind] = by_kind.get(kind, 0) + value.nbytes
print("int8 GPT, bytes of the arrays by dtype:", {k: f"{v:,}" for k, v in by_kind.items()})
untied = checkpoint_bytes(quantize_model(gpt, bits=8, embeddings=False), size_folder / "gpt-int8-tables-fp32.npz")
print(f"int8 GPT with its embedding tables left in float32: {untied:,} bytes "
      f"(fp32/int8 {checkpoint_bytes(gpt, size_folder / 'gpt.npz') / untied:.2f}x)")
for table_bits in (8, 4):
    int4_gpt = quantize_model(gpt, bits=4, embedding_bits=table_bits)
    print(f"int4 GPT, embedding tables int{table_bits}: "
          f"{checkpoint_bytes(int4_gpt, size_folder / f'gpt-int4-{table_bits}.npz'):,} bytes, validation loss "
          f"{validation_loss(int4_gpt, val_batches):.4f} (fp32 {gpt_results['fp32']:.4f})")

# %% [markdown]
# The arrays of the int8 GPT are almost all `int8`; what is left in float32 is the
# LayerNorms and one scale per channel. The file is a little larger than its arrays: every
# array in an `.npz` carries a header, and the checkpoint's `meta` describes the model.
# That overhead, and the float32 parts, are why the ratio stays below 4× for int8 and below
# 8× for int4 — and why leaving the embedding tables in float32 costs a visible share of
# the saving. For the tiny digits models the headers are a large part of the file. The last
# two lines are the default's reason: put them side by side, the loss that 4 bits in the
# tied table add against the bytes they save.
#
# ## 10. Is int8 faster? NumPy says no
#
# Integer arithmetic is cheaper in silicon than floating point, and int8 moves a quarter of
# the bytes. Yet our dynamic layer is *slower* than the float one. Measure why with module
# 14's `measure_latency`: the same `(768, 128) @ (128, 512)` product (the GPT's MLP on one
# batch of 12 × 64 tokens) in float32 (BLAS), in int32 (NumPy's integer matmul), and the
# whole layers.
#
# **Predict:** how many times slower is NumPy's integer product than float32?

# %%
from threadpoolctl import threadpool_limits

from tinytorch.perf.profiling import measure_latency

rng = np.random.default_rng(7)
a_int8 = rng.integers(-128, 128, (768, 128)).astype(np.int8)
b_int8 = rng.integers(-128, 128, (128, 512)).astype(np.int8)
a_f32, b_f32 = a_int8.astype(np.float32), b_int8.astype(np.float32)
a_i32, b_i32 = a_int8.astype(np.int32), b_int8.astype(np.int32)
fc = Linear(128, 512, seed=0)
fc_rows = Tensor(rng.standard_normal((768, 128)).astype(np.float32))
fc_weight_only, fc_dynamic = quantize_model(fc), quantize_model(fc, mode="dynamic")
with threadpool_limits(limits=1), no_grad():
    timings = {
        "float32 @ float32 (BLAS sgemm)": measure_latency(np.matmul, a_f32, b_f32, repeats=10),
        "int32 @ int32 (NumPy's loop)": measure_latency(np.matmul, a_i32, b_i32, warmup=1, repeats=3),
        "integer_matmul (int8 -> int32)": measure_latency(integer_matmul, a_int8, 3, b_int8, warmup=1, repeats=3),
        "Linear, float32": measure_latency(fc, fc_rows, repeats=10),
        "QuantizedLinear, weight-only int8": measure_latency(fc_weight_only, fc_rows, repeats=10),
        "QuantizedLinear, dynamic int8": measure_latency(fc_dynamic, fc_rows, warmup=1, repeats=3),
    }
reference = timings["float32 @ float32 (BLAS sgemm)"].median_s
for label, timing in timings.items():
    print(f"{label:36s} {timing.median_s * 1e3:8.2f} ms (IQR {timing.iqr_s * 1e3:6.2f})  "
          f"{timing.median_s / reference:6.1f}x the float32 product")
exact = a_int8.astype(np.int64) @ b_int8.astype(np.int64)
print("the float32 product of these integers is exact:", np.array_equal(a_f32 @ b_f32, exact),
      f"(every partial sum is below 2^24 = {2 ** 24:,}: 128 · 128 · 128 = {128 ** 3:,})")

# %% [markdown]
# NumPy has no integer BLAS. A float32 product goes to OpenBLAS's `sgemm`, hand-written for
# this CPU: SIMD fused multiply-adds on 8 or 16 floats per instruction, blocked for the
# caches. An integer product goes to NumPy's own generic loop, one element at a time: many
# times slower (the last column says how many), however few bits the integers have. The
# weight-only layer costs more than the float one (it dequantizes the whole weight at every
# call) and the dynamic layer pays the integer loop on top of quantizing its input.
#
# Real int8 speed needs **integer kernels**, and hardware that multiplies small integers
# fast: on x86, AVX-512 VNNI's `vpdpbusd` multiplies 64 pairs of 8-bit values and adds them
# into 16 int32 accumulators in one instruction, and AMX tiles do a whole 16 × 64 by 64 × 16
# int8 block at once; ARM has `sdot` and `smmla`; NVIDIA GPUs have int8 tensor cores (through
# cuBLASLt or CUTLASS). Libraries such as fbgemm (what PyTorch's dynamic quantization calls on
# x86), oneDNN and XNNPACK hold those kernels. Even then, a product this small is mostly
# bound by memory and overheads; the large wins come where the weights are read once per
# token from memory — generating text with a large model — and reading a quarter of the
# bytes is a quarter of the time.
#
# The last line shows a trick: products of int8 values summed in float32 are **exact** as
# long as no partial sum exceeds `2²⁴` (float32's 24-bit significand), which holds here for
# `K ≤ 1024`. Some libraries use float units this way when no integer kernel is at hand.
#
# ## 11. Checking against PyTorch
#
# Where PyTorch is installed, the integers and the observers' parameters can be compared
# one for one (the test suite does it on thousands of values, ties included:
# `tests/15_quantization/test_quantization_torch.py`).

# %%
try:
    import torch
    from torch.ao.quantization.observer import MinMaxObserver as TorchMinMaxObserver
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    import warnings

    warnings.filterwarnings("ignore", message=".*quantize.*deprecated")  # PyTorch 2.10+: the eager API's future
    values = np.random.default_rng(8).standard_normal(10_000).astype(np.float32) * 3
    ours_obs = MinMaxObserver("uint8")
    ours_obs.observe(values)
    theirs_obs = TorchMinMaxObserver(dtype=torch.quint8)
    theirs_obs(torch.tensor(values))
    their_scale, their_zero = theirs_obs.calculate_qparams()
    print(f"qparams: ours {ours_obs.qparams()}, PyTorch ({their_scale.item()}, {their_zero.item()})")
    ours_q = quantize_per_tensor(values, *ours_obs.qparams(), "uint8").numpy()
    theirs_q = torch.quantize_per_tensor(torch.tensor(values), their_scale.item(), int(their_zero.item()),
                                         torch.quint8).int_repr().numpy()
    print(f"integers: {np.sum(ours_q != theirs_q)} of {values.size} differ")

# %% [markdown]
# ## Summary
#
# * Quantization maps `x` to `q = clamp(round(x/s) + z)` and back to `s·(q − z)`: inside the
#   range the error is at most `s/2`, outside it is clamped. Round half to even; add the zero
#   point before rounding; match PyTorch's order of float operations to match its integers.
# * Observers choose `s` and `z` from a range: affine spreads `[min, max]` (with 0) over all
#   steps; symmetric centres the grid on 0 (`max|x| / 127.5` for int8). Percentile ranges clip
#   outliers, which pays at few bits.
# * Per channel gives every output channel its own scale: our Linear's output channels are
#   **axis 1** (PyTorch's weight is the transpose).
# * 4-bit values are packed two per byte, low nibble first, with sign extension on the way
#   back.
# * Weight-only layers keep integers and compute in float; dynamic layers quantize the input
#   too and multiply integers, accumulating in int32 (never in int8), then rescale.
# * Models keep their accuracy down to a few bits (per channel usually longer than per
#   tensor), the checkpoint shrinks towards 4× at int8 (less where headers and float parts
#   weigh), and NumPy's integer product is far slower than float32 BLAS: speed needs integer
#   kernels.
#
# ## Exercises
#
# 1. **Quantize the convolutions.** Write a `QuantizedConv2d` (weight-only, per output
#    channel: axis 0 of `(out, in, kh, kw)`) that dequantizes its weight and calls module
#    09's `conv2d`, and extend a copy of `quantize_model` to use it. How much smaller is the
#    CNN's checkpoint now, and what happens to its accuracy at 4 and 3 bits?
# 2. **Groups.** `QuantizedLinear.from_float(..., bits=3, group_size=32)` quantizes each
#    output channel in groups of 32 input features. Measure the GPT's validation loss at 3
#    and 2 bits with groups of 16, 32 and 64, and the checkpoint size of each. Which group
#    size is the best trade?
# 3. **Percentile weights.** Change a copy of `from_float` to observe the weight with a
#    per-channel percentile (the 99.9th percentile of `|w|` per column) instead of its
#    maximum. At which bit widths does the digits MLP's accuracy improve?
# 4. **Static activations.** Dynamic quantization measures every input's range. Observe the
#    inputs of each `QuantizedLinear` of the digits MLP on 200 training images (calibration),
#    freeze `(s_x, z_x)`, and use them for every test batch. How does the accuracy compare
#    with dynamic quantization, and what happens to an input outside the calibrated range?
# 5. **The float trick.** Replace `integer_matmul`'s int32 product by a float32 product of
#    the same integers. For which `K` is it still exact (test with the worst case, every value
#    −128)? How much faster is it, measured with `measure_latency`?
#
# ## Questions (answer them by running your code)
#
# 1. A tensor's values lie in `[−0.3, 2.7]`. What are its int8 affine scale and zero point,
#    and its uint8 ones? Which values of the range come back exactly?
# 2. Quantize the GPT per channel along **axis 0** instead of 1 (change a copy of
#    `from_float`). What is the validation loss at 8 and at 4 bits? Why does the mistake hide
#    at 8 bits?
# 3. Multiply two `(1, K)` and `(K, 1)` int8 arrays of 127s with NumPy's `@` for `K = 1, 2,
#    …, 10`. When does the result first go wrong, and what is it then?
# 4. How many bytes does the int4 GPT's checkpoint take, and how many of them are the packed
#    integers? What would packing the 3-bit weights eight to three bytes save?
# 5. Time the weight-only GPT's forward pass against the float32 one on a batch of 12 × 64.
#    How much of the difference is `dequantized_weight`? (Time it alone.)
