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
# # Module 09: Spatial layers — convolution and pooling
#
# > One small set of weights, slid over the whole image: the layer that made computer vision work.
#
# **What you will be able to do** after this module:
#
# * compute a 2-D convolution by hand on a 5×5 image, and say how deep learning's
#   "convolution" (a cross-correlation) differs from the textbook one (a flipped kernel);
# * predict the output size of any convolution or pooling layer from
#   `(H + 2p - k) // s + 1`, and read the error a kernel larger than its input produces;
# * turn a convolution into **one matrix product** with im2col, and measure what that costs
#   in memory;
# * derive and write the backward pass: the weight gradient as a matrix product, the input
#   gradient as col2im, a scatter-**add** over overlapping windows;
# * write max-pooling (whose gradient goes to the argmax of each window) and average-pooling;
# * build `Conv2d`, `MaxPool2d`, `AvgPool2d` and `Flatten` layers, count their parameters
#   against a `Linear` layer on the same image, and time them as the image grows.
#
# **Time:** about 3 hours: 2 hours for the ten functions and their tests, 1 hour for the
# measurements, the exercises and the questions.
#
# **How to work through it.** Each section explains why, shows a worked example with
# printed numbers, then gives you a function to write between the `BEGIN SOLUTION` and
# `END SOLUTION` marker lines. The function's docstring (and the prose just above it) is
# its contract: the op name it records, the order of its inputs, what it saves for the
# backward pass and which errors it raises. A `test_unit_*` check runs right after each
# function and prints one `✓` line when it passes. Where the lesson says **Predict, then
# run**, write your prediction down before running the cell.
#
# | you write | what it does |
# |---|---|
# | `conv_output_size` | the output-size arithmetic `(H + 2p - k) // s + 1` |
# | `im2col` | every window of the image as one column of a matrix (a strided view, then one copy) |
# | `col2im` | the way back: each column entry *added* to the pixel it came from |
# | `conv2d` + `conv2d_backward` | the convolution as one matrix product, and its gradients |
# | `max_pool2d` + `max_pool2d_backward` | the largest value per window; the gradient goes to it |
# | `avg_pool2d` + `avg_pool2d_backward` | the mean per window; the gradient is shared equally |
# | `Conv2d.__init__`, `Flatten.forward` | the layers a CNN is built from |
#
# ## Why not a `Linear` layer on the pixels?
#
# Module 03's `Linear` connects every input to every output. On a 32×32 colour image that
# is 3,072 inputs; keeping even a 16-channel 32×32 picture as output takes 50 million
# weights (section 8 counts them). Worse, a pattern learned in the top-left corner teaches
# nothing about the same pattern in the bottom-right: every position has its own weights.
#
# A **convolution** makes two assumptions that suit images: what matters first is
# *local* (a 3×3 neighbourhood), and the same detector is useful *everywhere*. So it
# learns one small kernel per output channel and slides it over all positions. Images
# are stored as **NCHW** arrays: `(batch N, channels C, height H, width W)`, the layout
# PyTorch uses.

# %%
#| default_exp core.spatial

# %%
#| export
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinytorch.core.autograd import register_backward, register_flops
from tinytorch.core.layers import Module, make_rng
from tinytorch.core.tensor import Tensor, array_module, as_tensor, record_op

# %% [markdown]
# ## 1. The sliding dot product, by hand
#
# Put a 3×3 **kernel** `K` on the top-left corner of the image, multiply the nine pairs of
# numbers that lie on top of each other, add them up: that is the first output pixel.
# Slide the kernel one column right for the next output, and so on, row by row:
#
# $$\mathrm{out}[r, c] = \sum_{i=0}^{k_h-1} \sum_{j=0}^{k_w-1} x[r + i,\; c + j] \cdot K[i, j]$$
#
# The 5×5 image and the kernel below are small enough to check with pencil and paper.
# The kernel `[[1, 0, -1]] × 3` subtracts the column on the right from the column on the
# left: it responds to **vertical edges** (bright on the left, dark on the right gives a
# positive number).
#
# The cell draws each window on the image (in brackets) and prints its nine products.
# `conv2d_by_loops` is the definition written with plain Python loops, for checking only
# (lesson code, not part of the package): it is what everything below must agree with.

# %%
IMAGE_5x5 = np.array([[1, 2, 0, 1, 3],
                      [0, 1, 3, 2, 1],
                      [2, 0, 1, 0, 2],
                      [1, 3, 2, 1, 0],
                      [0, 1, 0, 2, 1]], dtype=np.float64)
EDGE_KERNEL = np.array([[1, 0, -1],
                        [1, 0, -1],
                        [1, 0, -1]], dtype=np.float64)


def draw_window(image: np.ndarray, top: int, left: int, size: int) -> str:
    """The image as text, with the size×size window at (top, left) in brackets."""
    lines = []
    for r, row in enumerate(image):
        cells = ""
        for c, value in enumerate(row):
            inside = top <= r < top + size and left <= c < left + size
            opening = "[" if inside and c == left else " "
            closing = "]" if inside and c == left + size - 1 else " "
            cells += f"{opening}{value:2.0f}{closing}"
        lines.append(cells)
    return "\n".join(lines)


def conv2d_by_loops(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
                    stride: int = 1, padding: int = 0) -> np.ndarray:
    """The definition, one output number at a time: x (N, C, H, W), weight (O, C, kh, kw)."""
    n_images, channels, height, width = x.shape
    out_channels, _, kh, kw = weight.shape
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out_h = (height + 2 * padding - kh) // stride + 1
    out_w = (width + 2 * padding - kw) // stride + 1
    out = np.zeros((n_images, out_channels, out_h, out_w))
    for n in range(n_images):
        for o in range(out_channels):
            for r in range(out_h):
                for c in range(out_w):
                    window = x[n, :, r * stride:r * stride + kh, c * stride:c * stride + kw]
                    out[n, o, r, c] = (window * weight[o]).sum() + (0.0 if bias is None else bias[o])
    return out


for top, left in ((0, 0), (0, 1), (2, 2)):
    window = IMAGE_5x5[top:top + 3, left:left + 3]
    products = " + ".join(f"{a:.0f}·{b:.0f}" for a, b in zip(window.ravel(), EDGE_KERNEL.ravel()))
    print(f"window at output ({top}, {left}):\n{draw_window(IMAGE_5x5, top, left, 3)}")
    print(f"  {products} = {(window * EDGE_KERNEL).sum():.0f}\n")
hand_output = conv2d_by_loops(IMAGE_5x5[None, None], EDGE_KERNEL[None, None])[0, 0]
print("all 3×3 outputs:\n", hand_output)

# %% [markdown]
# Check one by hand before moving on: the window at output `(0, 1)` holds
# `[[2, 0, 1], [1, 3, 2], [0, 1, 0]]`; left column `2 + 1 + 0 = 3`, right column
# `1 + 2 + 0 = 3`, so the output is `3 - 3 = 0`.
#
# ### Convolution or cross-correlation?
#
# In signal processing, *convolution* flips the kernel first (`K[kh-1-i, kw-1-j]`) and
# the formula above, without the flip, is called *cross-correlation*. Deep learning
# frameworks (PyTorch, TensorFlow, and TinyTorch) compute the cross-correlation and call
# it convolution anyway: the kernel is learned, so a network that needed the flipped
# kernel simply learns it flipped. But **you must not flip**: your results have to match
# PyTorch's weights exactly. On the edge kernel a flip swaps left and right, so every
# output changes sign:

# %%
flipped_output = conv2d_by_loops(IMAGE_5x5[None, None], EDGE_KERNEL[::-1, ::-1][None, None])[0, 0]
print("with the flipped kernel (textbook convolution):\n", flipped_output)
print("flipping negates every output here:", np.array_equal(flipped_output, -hand_output))

# %% [markdown]
# ## 2. How big is the output?
#
# On an input of height `H`, a kernel of height `k` fits at `H - k + 1` positions. Two
# settings change that:
#
# * **padding `p`**: `p` rows of zeros added at the top *and* `p` at the bottom (and as
#   many columns left and right), so the input is `H + 2p` high. With `p = (k - 1) / 2`
#   for an odd `k` (1 for 3×3, 2 for 5×5), the output keeps the input's size ("same"
#   padding), and the border pixels are seen by as many kernel positions as their
#   neighbours.
# * **stride `s`**: the kernel moves `s` pixels at a time, so only every `s`-th position
#   is kept. The last window must still fit entirely, hence the floor division.
#
# $$H_{out} = \left\lfloor \frac{H + 2p - k}{s} \right\rfloor + 1$$
#
# The same formula gives the width (with `W` and the kernel's width), and pooling uses it
# with `p = 0`. Worked examples:
#
# | H | k | s | p | (H + 2p - k) // s + 1 |
# |---|---|---|---|---|
# | 5 | 3 | 1 | 0 | (5 - 3) // 1 + 1 = **3** (section 1) |
# | 5 | 3 | 1 | 1 | (5 + 2 - 3) // 1 + 1 = **5** (same padding) |
# | 5 | 3 | 2 | 0 | (5 - 3) // 2 + 1 = **2** |
# | 32 | 3 | 2 | 1 | (32 + 2 - 3) // 2 + 1 = 31 // 2 + 1 = **16** |
# | 8 | 2 | 2 | 0 | (8 - 2) // 2 + 1 = **4** (a 2×2 pool halves the image) |
#
# Write the formula. It works on plain Python ints (one dimension at a time) and returns
# an int; it does not check anything (the given code below does).

# %%
#| export
def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length of a convolution or pooling along one dimension: (size + 2·padding - kernel) // stride + 1.

    size: the input's height (or width); kernel: the kernel's height (or width); stride ≥ 1;
    padding ≥ 0 zeros added on *each* side. Returns a Python int (may be ≤ 0 when the kernel
    does not fit; the callers check).
    """
    ### BEGIN SOLUTION
    return (size + 2 * padding - kernel) // stride + 1
    ### END SOLUTION


# %%
def test_unit_conv_output_size():
    for args, expected in (((5, 3), 3), ((5, 3, 1, 1), 5), ((5, 3, 2), 2), ((32, 3, 2, 1), 16), ((8, 2, 2), 4),
                           ((7, 7), 1)):
        got = conv_output_size(*args)
        assert got == expected, (f"conv_output_size{args}: (size + 2·padding - kernel) // stride + 1 = {expected}, "
                                 f"got {got}")
    assert isinstance(conv_output_size(5, 3), int), f"the size must be an int, got {type(conv_output_size(5, 3)).__name__}"
    print("✓ conv_output_size")


test_unit_conv_output_size()

# %% [markdown]
# ### Arguments, and the error for a kernel that does not fit
#
# The functions of this module accept `kernel_size`, `stride` and `padding` as one int
# (the same for height and width) or as a pair `(for height, for width)`, like PyTorch.
# The given helpers below turn them into pairs and check the shapes before any work is
# done, so that a wrong call fails with a message that says what is wrong:
#
# * `_pair(value, name, minimum)`: `3 → (3, 3)`, `(3, 1) → (3, 1)`; ValueError for
#   anything else, or a value below `minimum` (1 for kernels and strides, 0 for padding).
# * `_output_hw(name, x_shape, kernel, stride, padding)`: the output's `(OH, OW)`,
#   computed with **your** `conv_output_size`; a kernel larger than the padded input is a
#   ValueError that spells out the arithmetic.
# * `_check_conv2d(x, weight, bias, stride, padding)`: x must be `(N, C, H, W)`, weight
#   `(O, C, kh, kw)` with the same `C` (otherwise a ValueError naming both channel counts),
#   bias `(O,)`; returns `(OH, OW)`.
#
# **Predict, then run.** A 3×3 input, a 5×5 kernel, no padding: what does the formula
# give, and what should a library do with it?

# %%
#| export
def _pair(value: Any, name: str, minimum: int = 1) -> tuple[int, int]:
    """(height, width) from an int or a pair of ints, each at least `minimum`; ValueError otherwise."""
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints (height, width), got {value!r}.")
    if min(pair) < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}.")
    return int(pair[0]), int(pair[1])


def _output_hw(name: str, x_shape: tuple, kernel: tuple, stride: tuple, padding: tuple) -> tuple[int, int]:
    """(OH, OW) of a window op on an (N, C, H, W) input; ValueError stating the arithmetic if the kernel does not fit."""
    sizes = []
    for axis, size, k, s, p in zip(("height", "width"), x_shape[2:], kernel, stride, padding):
        if size + 2 * p < k:
            raise ValueError(
                f"{name}: the kernel {axis} {k} is larger than the padded input {axis} "
                f"{size} + 2·{p} = {size + 2 * p} (input shape {tuple(x_shape)}), so the output {axis} "
                f"(H + 2p - k) // s + 1 = ({size} + 2·{p} - {k}) // {s} + 1 = {(size + 2 * p - k) // s + 1} "
                f"is not positive. Use a smaller kernel, more padding or a larger input."
            )
        sizes.append(conv_output_size(size, k, s, p))
    return sizes[0], sizes[1]


def _check_conv2d(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple, padding: tuple) -> tuple[int, int]:
    """ValueError naming the shapes unless x (N, C, H, W), weight (O, C, kh, kw), bias (O,) fit; returns (OH, OW)."""
    if x.ndim != 4:
        raise ValueError(f"conv2d expects an input of shape (N, C, H, W), got {x.shape}; "
                         f"a single image (C, H, W) becomes a batch of one with x.reshape(1, C, H, W).")
    if weight.ndim != 4:
        raise ValueError(f"conv2d expects a weight of shape (out_channels, in_channels, kh, kw), got {weight.shape}.")
    if x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"conv2d: the input has {x.shape[1]} channels but the weight expects {weight.shape[1]} "
            f"(input shape {x.shape}; weight shape {weight.shape} is (out_channels, in_channels, kh, kw))."
        )
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"conv2d: the bias must have one value per output channel, shape ({weight.shape[0]},); "
                         f"got {bias.shape}.")
    return _output_hw("conv2d", x.shape, weight.shape[2:], stride, padding)


# %%
print("conv_output_size(3, 5) =", conv_output_size(3, 5))
try:
    _output_hw("conv2d", (1, 1, 3, 3), (5, 5), (1, 1), (0, 0))
except ValueError as err:
    print("ValueError:", err)
print("with padding 1 it fits:", _output_hw("conv2d", (1, 1, 3, 3), (5, 5), (1, 1), (1, 1)))

# %% [markdown]
# The formula returns `-1` (a negative size), and NumPy would happily make strange arrays
# from it, so the library refuses before doing any work. With padding 1 the padded input
# is 5×5 and the 5×5 kernel fits exactly once.
#
# ## 3. Padding
#
# Zero padding surrounds each image with `p` rows and columns of zeros, on **both** sides
# of the height and of the width, and on no other axis (not the batch, not the channels).
# `xp.pad` does it in one call, with one `(before, after)` pair per axis:
#
# ```python
# xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))   # N, C untouched; H and W padded on both sides
# ```
#
# (Careful: `xp.pad(x, p)` with a single number pads **every** axis, batch and channels
# included.)

# %%
padded = np.pad(IMAGE_5x5[None, None], ((0, 0), (0, 0), (1, 1), (1, 1)))
print("the 5×5 image padded by 1 on every side:", padded.shape, "\n", padded[0, 0])
same = conv2d_by_loops(IMAGE_5x5[None, None], EDGE_KERNEL[None, None], padding=1)[0, 0]
print("same padding keeps 5×5; the old 3×3 output is its centre:\n", same)

# %% [markdown]
# ## 4. im2col: the whole convolution as one matrix product
#
# The loops above do `N · O · OH · OW` small dot products in Python: far too slow (section
# 9 measures it). But look at what each dot product is: a window of `C · kh · kw` numbers
# times the same weights. Lay every window out as **one column** of a matrix, and all the
# dot products together become one matrix product:
#
# ```
# cols[n]  : (C·kh·kw, OH·OW)    column l = the window at output position l, flattened
# W_matrix : (O, C·kh·kw)        weight.reshape(O, -1): row o = kernel o, flattened
# out[n]   = W_matrix @ cols[n] : (O, OH·OW)  →  reshape to (O, OH, OW)
# ```
#
# Matrix products are what NumPy (through BLAS) and GPUs do fastest. This rearrangement
# is called **im2col** ("image to columns"); Caffe made it the standard way to run
# convolutions, and PyTorch still falls back to it on the CPU.
#
# **The order of a column's entries matters.** `weight.reshape(O, -1)` flattens each
# kernel in the order (channel, kernel row, kernel column), channel slowest. The window
# must be flattened in the **same** order, so row `r` of `cols` is
# `r = c·kh·kw + i·kw + j`:
#
# $$\mathrm{cols}[n,\; c\,k_h k_w + i\,k_w + j,\; r\,OW + q] = x_{pad}[n,\; c,\; r\,s_h + i,\; q\,s_w + j]$$
#
# (`r, q` = the output row and column, `l = r·OW + q`.) Flatten in another order and
# every output is still a sum of products, just of the wrong pairs: no error, wrong numbers.
#
# ### Windows without copying: strides
#
# A NumPy array is a block of memory plus **strides**: how many bytes to step for +1
# along each axis. For a C-contiguous float64 `(N, C, H, W)` array the strides are
# `(C·H·W·8, H·W·8, W·8, 8)`. A 6-D array of shape `(N, C, kh, kw, OH, OW)` whose element
# `[n, c, i, j, r, q]` is `x[n, c, r·sh + i, q·sw + j]` needs no new memory at all, only
# the strides
#
# ```
# (stride_N, stride_C, stride_H, stride_W, stride_H · sh, stride_W · sw)
# ```
#
# where `stride_N, …, stride_W = x.strides`: read them from the array, never compute them
# from its shape, since a transposed or sliced array has other strides.
#
# Moving one step in `i` or in `r·sh` both move down rows: the windows *overlap in
# memory*. `strided_view(array, shape, strides)` (given below; `as_strided` from NumPy's
# or CuPy's `lib.stride_tricks`) builds such a view. Then `view.reshape(N, C·kh·kw, OH·OW)`
# makes the one copy that im2col needs: that copy *is* the column matrix.
#
# (An equally good way that needs no strides: start from an empty
# `(N, C, kh, kw, OH, OW)` array and, for each of the `kh·kw` kernel offsets `(i, j)`,
# copy the slice `x[:, :, i:i + sh·OH:sh, j:j + sw·OW:sw]` into `[:, :, i, j]`. A loop
# over the kernel offsets is fine; a loop over images, channels or positions is not.)

# %%
#| export
def strided_view(array: Any, shape: tuple, strides: tuple) -> Any:
    """A view of `array` with the given shape and strides (in bytes), sharing its memory (NumPy or CuPy).

    Elements may overlap in memory: never write into the view; read it or copy it.
    """
    return array_module(array).lib.stride_tricks.as_strided(array, shape=shape, strides=strides)


# %%
tiny = np.arange(16.0).reshape(1, 1, 4, 4)
sN, sC, sH, sW = tiny.strides
windows = strided_view(tiny, (1, 1, 2, 2, 3, 3), (sN, sC, sH, sW, sH, sW))
print("a (1, 1, 4, 4) float64 array has strides", tiny.strides)
print("window view (N, C, kh, kw, OH, OW) =", windows.shape, "shares memory:", np.shares_memory(windows, tiny))
print("the 2×2 window at output (1, 2):\n", windows[0, 0, :, :, 1, 2], "\n= tiny[1:3, 2:4]:\n", tiny[0, 0, 1:3, 2:4])

# %% [markdown]
# Now write `im2col`. It works on **raw arrays** (NumPy or CuPy), not Tensors: `conv2d`
# and the pooling functions call it on `x.data`, already padded. The output size follows
# from section 2 with no padding (`conv_output_size(Hp, kh, sh)`), since the input is
# already padded. The result must be a real array of its own (a copy), not a view that
# overlaps `x_padded`: `reshape` of the 6-D window view makes that copy, except when the
# windows happen to be laid out like the input itself (a 1×1 kernel with stride 1): then
# the reshape is a view, so check with `xp.may_share_memory(cols, x_padded)` and copy.

# %%
#| export
def im2col(x_padded: Any, kernel_size: tuple[int, int], stride: tuple[int, int]) -> Any:
    """Every kernel window of an (already padded) image batch as one column: the column matrix.

    x_padded    -- array (N, C, Hp, Wp), NumPy or CuPy, any memory layout
    kernel_size -- (kh, kw); stride -- (sh, sw)
    Returns a new array (N, C·kh·kw, OH·OW) of x_padded's dtype, OH = (Hp - kh) // sh + 1 (and OW alike), with
        cols[n, c·kh·kw + i·kw + j, r·OW + q] = x_padded[n, c, r·sh + i, q·sw + j]
    (rows in (channel, kernel row, kernel column) order, channel slowest, as weight.reshape(O, -1)).
    """
    ### BEGIN SOLUTION
    n, c, height, width = x_padded.shape
    (kh, kw), (sh, sw) = kernel_size, stride
    out_h, out_w = conv_output_size(height, kh, sh), conv_output_size(width, kw, sw)
    stride_n, stride_c, stride_h, stride_w = x_padded.strides
    windows = strided_view(x_padded, (n, c, kh, kw, out_h, out_w),
                           (stride_n, stride_c, stride_h, stride_w, stride_h * sh, stride_w * sw))
    cols = windows.reshape(n, c * kh * kw, out_h * out_w)  # the one copy...
    xp = array_module(x_padded)
    return cols.copy() if xp.may_share_memory(cols, x_padded) else cols  # ...a view for a 1×1 kernel, stride 1
    ### END SOLUTION


# %% [markdown]
# The 5×5 example as a column matrix: 9 windows (one per output position) of 9 numbers.
# Column 0 is the top-left window read row by row, `[1, 2, 0, 0, 1, 3, 2, 0, 1]`. One
# matrix product with the flattened kernel gives all nine outputs of section 1.

# %%
cols_5x5 = im2col(IMAGE_5x5[None, None], (3, 3), (1, 1))
print("cols:", cols_5x5.shape, "\n", cols_5x5[0])
as_matmul = (EDGE_KERNEL.reshape(1, 9) @ cols_5x5[0]).reshape(3, 3)
print("kernel (1, 9) @ cols (9, 9), reshaped to 3×3:\n", as_matmul)
print("same as the loops:", np.array_equal(as_matmul, hand_output))


# %%
def test_unit_im2col():
    cols = im2col(IMAGE_5x5[None, None], (3, 3), (1, 1))
    assert cols.shape == (1, 9, 9), f"a 5x5 image, 3x3 kernel: (N, C·kh·kw, OH·OW) = (1, 9, 9), got {cols.shape}"
    assert np.array_equal(cols[0, :, 0], IMAGE_5x5[:3, :3].ravel()), \
        f"column 0 is the top-left window read row by row, {IMAGE_5x5[:3, :3].ravel().tolist()}; got {cols[0, :, 0].tolist()}"
    assert np.array_equal(cols[0, :, 5], IMAGE_5x5[1:4, 2:5].ravel()), (  # output (1, 2) is column 1·3 + 2
        f"output (1, 2) is column 1·3 + 2 = 5, the window at rows 1..3, columns 2..4: expected "
        f"{IMAGE_5x5[1:4, 2:5].ravel().tolist()}, got {cols[0, :, 5].tolist()}")
    # two channels, stride 2, a 2×3 kernel: rows in (channel, kernel row, kernel column) order
    x = np.arange(2 * 2 * 5 * 6, dtype=np.float32).reshape(2, 2, 5, 6)
    cols = im2col(x, (2, 3), (2, 2))
    assert cols.shape == (2, 12, 2 * 2) and cols.dtype == np.float32, \
        f"2 images, 2 channels, a 2x3 kernel, stride 2 on 5x6: (2, 2·2·3, 2·2) float32, got {cols.shape} {cols.dtype}"
    assert np.array_equal(cols[1, 6:, 3], x[1, 1, 2:4, 2:5].ravel()), (
        f"column 3 is output (1, 1): its window starts at row 1·2, column 1·2 (window (r, q) starts at row r·sh, "
        f"column q·sw), and rows 6 ... 11 hold channel 1 (rows in (channel, kernel row, kernel column) order); expected "
        f"{x[1, 1, 2:4, 2:5].ravel().tolist()}, got {cols[1, 6:, 3].tolist()}")
    cols[:] = -1  # the result is its own memory, not a view of x
    assert x.min() == 0, "writing into im2col's result changed x: the result must be a copy, not a view of x"
    print("✓ im2col")


test_unit_im2col()

# %% [markdown]
# **Predict, then run.** For a batch of 32 colour images 32×32 (float32), a 3×3 kernel
# and padding 1, how many times bigger than the input is the column matrix? And with
# stride 2? (Each input pixel appears in up to `kh·kw` windows.)

# %%
batch = np.random.default_rng(0).standard_normal((32, 3, 32, 32)).astype(np.float32)
padded_batch = np.pad(batch, ((0, 0), (0, 0), (1, 1), (1, 1)))
for s in (1, 2):
    cols = im2col(padded_batch, (3, 3), (s, s))
    print(f"stride {s}: input {batch.nbytes / 2**20:.2f} MiB, column matrix {cols.shape} "
          f"{cols.nbytes / 2**20:.2f} MiB = {cols.nbytes / batch.nbytes:.2f}× the input")

# %% [markdown]
# With stride 1 every pixel is copied into `kh·kw = 9` columns (a little less at the
# border, a little more counting the padding): the price of turning the convolution into
# one matrix product. For a 7×7 kernel it is 49×. This is why libraries also have
# convolution algorithms that never build the matrix (direct, Winograd, FFT).
#
# ## 5. conv2d, forward
#
# Now the whole forward pass, as one recorded operation:
#
# 1. pad `x.data` with `xp.pad` (only H and W, both sides; skip it when the padding is 0);
# 2. `cols = im2col(x_padded, (kh, kw), stride)`: shape `(N, C·kh·kw, OH·OW)`;
# 3. `out = xp.matmul(weight.data.reshape(O, -1), cols)`: `(O, C·kh·kw) @ (N, C·kh·kw,
#    OH·OW)` broadcasts the weight over the batch and gives `(N, O, OH·OW)`;
# 4. add the bias, **one value per output channel**: as a column `(O, 1)`, it broadcasts
#    over the positions of every image;
# 5. reshape to `(N, O, OH, OW)` and return it through `record_op`.
#
# The contract, used by `conv2d_backward` in section 6 and by the tests:
#
# | op name | inputs | saved fields | result |
# |---|---|---|---|
# | `"conv2d"` | `(x, weight)`, or `(x, weight, bias)` when there is a bias | `cols`: the column matrix `(N, C·kh·kw, OH·OW)`; `stride`: `(sh, sw)`; `padding`: `(ph, pw)` (the pairs, as given to you) | `(N, O, OH, OW)`, the input's dtype |
#
# The given first lines turn the arguments into Tensors and pairs and check the shapes
# (`_check_conv2d` returns `OH, OW`). Everything after them is yours. Keep the dtype: a
# float32 input gives a float32 output (`xp.pad` and `im2col` keep it).

# %%
#| export
def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0) -> Tensor:
    """2-D convolution (cross-correlation, as in PyTorch) of an NCHW batch, as one recorded op.

    x      -- (N, C, H, W)
    weight -- (O, C, kh, kw): out_channels, in_channels, kernel height, kernel width (PyTorch's layout)
    bias   -- (O,) or None
    stride, padding -- an int or a pair (height, width); zeros are padded on both sides of H and W
    Returns (N, O, OH, OW), OH = (H + 2·ph - kh) // sh + 1, OW alike, in the dtype NumPy's
    matmul gives x's and weight's (x's dtype when they match, as in a Conv2d layer):
        out[n, o, r, q] = Σ_c,i,j x_pad[n, c, r·sh + i, q·sw + j] · weight[o, c, i, j] + bias[o]
    Raises (given code) ValueError naming both sizes for a channel mismatch, and stating
    the output-size arithmetic for a kernel larger than the padded input.
    Records op "conv2d" with inputs (x, weight) or (x, weight, bias), and saves `cols` (the
    im2col matrix, (N, C·kh·kw, OH·OW)), `stride` and `padding` (the pairs).
    """
    x, weight = as_tensor(x), as_tensor(weight)
    bias = None if bias is None else as_tensor(bias)
    stride, padding = _pair(stride, "stride"), _pair(padding, "padding", minimum=0)
    out_h, out_w = _check_conv2d(x, weight, bias, stride, padding)
    ### BEGIN SOLUTION
    xp = array_module(x.data)
    ph, pw = padding
    out_channels = weight.shape[0]
    x_padded = xp.pad(x.data, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x.data
    cols = im2col(x_padded, weight.shape[2:], stride)                      # (N, C·kh·kw, OH·OW)
    out = xp.matmul(weight.data.reshape(out_channels, -1), cols)            # (N, O, OH·OW), a new array
    if bias is not None:
        out += bias.data.reshape(out_channels, 1)                           # one value per output channel
    out = out.reshape(x.shape[0], out_channels, out_h, out_w)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return record_op("conv2d", out, inputs, cols=cols, stride=stride, padding=padding)
    ### END SOLUTION


# %%
print("conv2d on the 5×5 example:\n", conv2d(IMAGE_5x5[None, None], EDGE_KERNEL[None, None]).numpy()[0, 0])


def convolved(what: str, cause: str, *args, **kwargs) -> np.ndarray:
    """conv2d(*args, **kwargs) as an array; a ValueError on these valid inputs is reported with its likely cause."""
    try:
        return conv2d(*args, **kwargs).numpy()
    except ValueError as err:
        raise AssertionError(f"conv2d {what} is valid, but it raised ValueError ({err}): {cause}") from None


def test_unit_conv2d():
    y = convolved("of the 5×5 example", "the hand example of section 1", IMAGE_5x5[None, None], EDGE_KERNEL[None, None])
    flipped = conv2d_by_loops(IMAGE_5x5[None, None], EDGE_KERNEL[None, None, ::-1, ::-1])[0, 0]
    assert np.array_equal(y[0, 0], hand_output), (
        f"the 5×5 example of section 1: expected {hand_output.tolist()}, got {y[0, 0].tolist()}" + (
            ": conv2d flipped the kernel; a deep-learning convolution is a cross-correlation, the kernel as it is"
            if np.allclose(y[0, 0], flipped) else ""))
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(4)
    plain = convolved("without bias or padding", "the im2col matrix is (N, C·kh·kw, OH·OW) and the weight "
                      "reshaped to (out, C·kh·kw)", x, w)
    assert np.allclose(plain, conv2d_by_loops(x, w)), "conv2d without bias or padding differs from the loops of section 1"
    biased = convolved("with a bias of (4,)", "the bias has one value per output channel: add it as (1, out, 1, 1)",
                       x, w, b)
    assert np.allclose(biased, conv2d_by_loops(x, w, b)), (
        "conv2d with a bias differs from the loops: " + ("the bias was not added" if np.allclose(biased, plain) else
                                                         "the bias has one value per output channel, added to every position"))
    for stride, padding in ((1, 0), (2, 1), ((2, 1), (0, 2))):
        got = convolved(f"with stride {stride} and padding {padding}",
                        "pad only H and W, by p on both sides: np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))",
                        x, w, b, stride=stride, padding=padding)
        sh, sw = _pair(stride, "stride")
        ph, pw = _pair(padding, "padding", 0)
        xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        want = conv2d_by_loops(xp_, w, b)[:, :, ::sh, ::sw]  # stride = every s-th stride-1 output
        assert got.shape == want.shape and np.allclose(got, want), (
            f"stride {stride}, padding {padding}: expected shape {want.shape}, got {got.shape}" +
            (f", values off by up to {np.abs(got - want).max():.3g}" if got.shape == want.shape else "") +
            ": pad H and W on both sides, then window (r, q) starts at (r·sh, q·sw)")
    w32 = Tensor(w.astype(np.float32), requires_grad=True)
    y = conv2d(Tensor(x.astype(np.float32)), w32, stride=2, padding=1)
    assert y.dtype == np.float32, f"float32 in must give float32 out, got {y.dtype}"
    assert y._node is not None and y._node.op == "conv2d" and y._node.inputs[1] is w32, \
        f"conv2d must record one op 'conv2d' with inputs (x, weight), got {y._node and y._node.op!r}"
    saved = {k: getattr(v, "shape", v) for k, v in y._node.saved.items()}
    assert set(saved) == {"cols", "stride", "padding"} and saved["cols"] == (2, 3 * 3 * 2, 4 * 4), \
        f"conv2d saves cols (N, C·kh·kw, OH·OW) = (2, 18, 16), stride and padding; saved {saved}"
    for bad in (lambda: conv2d(x, rng.standard_normal((4, 2, 3, 3))),   # 3 channels in, weight expects 2
                lambda: conv2d(x, rng.standard_normal((4, 3, 9, 3)))):  # kernel taller than the input
        try:
            bad()
        except ValueError as err:
            print("  ValueError:", err)
        else:
            raise AssertionError("a channel mismatch and a kernel that does not fit must raise ValueError")
    print("✓ conv2d forward (hand example, strides, padding, bias, dtype, record)")


test_unit_conv2d()

# %% [markdown]
# ## 6. conv2d, backward
#
# Write `g` for the gradient of the loss with respect to the output, reshaped to
# `(N, O, OH·OW)` like the product it came from. The forward pass was
#
# $$\mathrm{out}[n] = W\, \mathrm{cols}[n] + b \qquad (W = \texttt{weight.reshape(O, -1)})$$
#
# a matrix product per image, so the rules are module 05's matmul rules, applied per
# image and then summed over the images, because every image used the same weights:
#
# | gradient | formula | shape |
# |---|---|---|
# | weight | `Σ_n g[n] @ cols[n]ᵀ`, reshaped to the weight's shape | `(O, C, kh, kw)` |
# | bias | `g` summed over the batch and all positions (axes 0, 2, 3 of the output gradient) | `(O,)` |
# | columns | `dcols[n] = Wᵀ @ g[n]` | `(N, C·kh·kw, OH·OW)` |
# | input | `col2im(dcols)`, then the padding cut away | `(N, C, H, W)` |
#
# The last line needs a new function. Each entry of `cols` was a **copy** of one pixel of
# the padded input; a pixel that lies in several windows was copied several times. In
# the backward pass each copy's gradient must flow back to its pixel, and the gradients
# of all copies **add up** (module 05: a tensor used several times receives the sum).
# `col2im` does exactly that: for each kernel offset `(i, j)`,
#
# ```python
# dx_padded[:, :, i:i + sh*OH:sh, j:j + sw*OW:sw] += dcols6[:, :, i, j]   # dcols6: (N, C, kh, kw, OH, OW)
# ```
#
# a scatter-add with a loop over the `kh·kw` offsets only (every image, channel and
# position at once). Two details decide whether it is right: `+=`, not `=` (with stride 1
# a 3×3 kernel's windows overlap, and each interior pixel receives 9 contributions), and
# the slice steps by the stride (window `r` starts at row `r·sh`).
#
# `col2im` is the *adjoint* of `im2col`: for any arrays `x` and `c` of the right shapes,
# `Σ im2col(x) · c = Σ x · col2im(c)`. The tests check that identity.

# %%
#| export
def col2im(cols: Any, padded_shape: tuple, kernel_size: tuple[int, int], stride: tuple[int, int]) -> Any:
    """The adjoint of im2col: add every column entry back onto the pixel it was copied from.

    cols         -- array (N, C·kh·kw, OH·OW), rows in im2col's (channel, kernel row, kernel column) order
    padded_shape -- (N, C, Hp, Wp), the shape of the padded input that im2col read
    kernel_size  -- (kh, kw); stride -- (sh, sw)
    Returns a new array of shape padded_shape and cols' dtype (NumPy or CuPy, as cols), where
        out[n, c, r·sh + i, q·sw + j] += cols[n, c·kh·kw + i·kw + j, r·OW + q]   for every entry:
    pixels covered by several windows receive the sum of their entries.
    """
    ### BEGIN SOLUTION
    xp = array_module(cols)
    n, c, height, width = padded_shape
    (kh, kw), (sh, sw) = kernel_size, stride
    out_h, out_w = conv_output_size(height, kh, sh), conv_output_size(width, kw, sw)
    blocks = cols.reshape(n, c, kh, kw, out_h, out_w)
    out = xp.zeros(padded_shape, dtype=cols.dtype)
    for i in range(kh):  # one scatter-add per kernel offset: all images, channels and positions at once
        for j in range(kw):
            out[:, :, i:i + sh * out_h:sh, j:j + sw * out_w:sw] += blocks[:, :, i, j]
    return out
    ### END SOLUTION


# %% [markdown]
# **Predict, then run.** `col2im` of a column matrix full of ones counts how many
# windows cover each pixel. On the 5×5 image with a 3×3 kernel and stride 1, what are the
# counts in the corner, on an edge's middle and in the centre? With stride 2?

# %%
for s in (1, 2):
    out_size = conv_output_size(5, 3, s)
    coverage = col2im(np.ones((1, 9, out_size * out_size)), (1, 1, 5, 5), (3, 3), (s, s))
    print(f"windows covering each pixel, 3×3 kernel, stride {s}:\n{coverage[0, 0].astype(int)}")


# %%
def test_unit_col2im():
    coverage = col2im(np.ones((1, 9, 9)), (1, 1, 5, 5), (3, 3), (1, 1))[0, 0]
    assert coverage[0, 0] == 1 and coverage[0, 2] == 3 and coverage[2, 2] == 9, (
        f"col2im of ones counts how many windows cover each pixel: 1, 3 and 9 at (0, 0), (0, 2), (2, 2); got "
        f"{coverage[0, 0]}, {coverage[0, 2]}, {coverage[2, 2]}: overlapping windows add up (+=), never assign")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    for kernel, stride in (((3, 3), (1, 1)), ((3, 2), (2, 3)), ((2, 2), (2, 2))):
        cols = im2col(x, kernel, stride)
        c = rng.standard_normal(cols.shape).astype(np.float32)
        back = col2im(c, x.shape, kernel, stride)
        assert back.shape == x.shape and back.dtype == np.float32, \
            f"col2im must give back x's shape {x.shape} in float32, got {back.shape} {back.dtype}"
        assert np.isclose((cols * c).sum(), (x * back).sum(), rtol=1e-4), (
            f"col2im must be the adjoint of im2col (kernel {kernel}, stride {stride}): each column adds into the window "
            "im2col read it from, the same slices, stepped by the stride")
    print("✓ col2im (overlaps add up; the adjoint of im2col)")


test_unit_col2im()

# %% [markdown]
# Now the backward rule. The engine calls it with `grad` (an array of the output's shape)
# and the node `conv2d` recorded; it returns one gradient per recorded input, in the same
# order: `(dx, dweight)`, or `(dx, dweight, dbias)` when a bias was recorded. Everything
# it needs is in the node: the inputs `node.inputs` (their `.data` and `.shape`), and
# `node.saved["cols"]`, `["stride"]`, `["padding"]`. The padded input's shape is
# `(N, C, H + 2·ph, W + 2·pw)`; the gradient of the unpadded input is the middle
# `[:, :, ph:ph + H, pw:pw + W]` of col2im's result. When `x.requires_grad` is False (the
# images fed to a network's first layer), return `None` for `dx` and skip col2im: the
# engine never asks for it.
#
# **Memory: col2im without the column-shaped gradient.** `dcols = Wᵀ @ g` is as big as
# `cols` (9× the input for a 3×3 kernel), and it exists only to be scattered. Building it
# and calling `col2im` is correct, and the simplest way to write the rule. But the rows
# of `dcols` that belong to kernel offset `(i, j)` are just `weight[:, :, i, j]ᵀ @ g`, a
# `(N, C, OH·OW)` block, so col2im's loop can compute each block where it needs it:
#
# ```python
# for i in range(kh):
#     for j in range(kw):
#         block = xp.matmul(weight.data[:, :, i, j].T, g)                 # (N, C, OH·OW)
#         d_padded[:, :, i:i + sh*OH:sh, j:j + sw*OW:sw] += block.reshape(N, C, OH, OW)
# ```
#
# Same arithmetic, but never more than one block in memory. The reference solution does
# this: in `tito bench conv` it lowers the peak memory of a forward + backward pass by
# about a quarter, and the time too, because every large new array costs fresh pages
# from the operating system (Question 1 at the end asks you to measure it). Either way
# passes the tests.

# %%
#| export
@register_backward("conv2d")
def conv2d_backward(grad: Any, node) -> tuple:
    """Gradients of conv2d: (dx, dweight) or (dx, dweight, dbias), one per recorded input.

    grad: (N, O, OH, OW). dweight = Σ_n g[n] @ cols[n]ᵀ reshaped to (O, C, kh, kw); dbias = grad
    summed over axes (0, 2, 3); dx = col2im(Wᵀ @ g) with the padding cut away (Wᵀ @ g built whole, or one
    kernel offset's block at a time). dx and dweight are None when x or the weight does not require
    a gradient (their products are skipped). An empty batch (N = 0) gets zero gradients from the
    given lines (reshape cannot infer the -1 of `grad.reshape(n, O, -1)` from an empty array).
    """
    if grad.size == 0:  # given: nothing flowed back, so every gradient is zero
        xp = array_module(grad)
        return tuple(xp.zeros(t.shape, dtype=grad.dtype) if t.requires_grad else None for t in node.inputs)
    ### BEGIN SOLUTION
    x, weight = node.inputs[0], node.inputs[1]
    cols, stride, (ph, pw) = node.saved["cols"], node.saved["stride"], node.saved["padding"]
    xp = array_module(grad)
    n, out_channels = grad.shape[:2]
    g = grad.reshape(n, out_channels, -1)                                       # (N, O, OH·OW)
    d_weight = None
    if weight.requires_grad:  # a frozen kernel costs no product
        d_weight = xp.matmul(g, cols.transpose(0, 2, 1)).sum(axis=0).reshape(weight.shape)
    d_bias = grad.sum(axis=(0, 2, 3)) if len(node.inputs) == 3 else None
    d_x = None
    if x.requires_grad:  # col2im(Wᵀ @ g), one kernel offset's block of Wᵀ @ g at a time
        channels, height, width = x.shape[1:]
        (kh, kw), (sh, sw), (out_h, out_w) = weight.shape[2:], stride, grad.shape[2:]
        d_padded = xp.zeros((n, channels, height + 2 * ph, width + 2 * pw), dtype=grad.dtype)
        for i in range(kh):
            for j in range(kw):
                block = xp.matmul(weight.data[:, :, i, j].T, g)                # (N, C, OH·OW)
                d_padded[:, :, i:i + sh * out_h:sh, j:j + sw * out_w:sw] += block.reshape(n, channels, out_h, out_w)
        d_x = d_padded[:, :, ph:ph + height, pw:pw + width]
    return (d_x, d_weight, d_bias)[:len(node.inputs)]
    ### END SOLUTION


@register_flops("conv2d")
def conv2d_flops(node, out_shape: tuple, grads: Any = None) -> int:
    """A convolution is the product (O, C·kh·kw) @ (C·kh·kw, OH·OW) per image: 2·C·kh·kw FLOPs per
    output element (PyTorch's count: the bias is free). Backward: dx and dweight are products of
    the same size each, counted when the rule computed them; dbias is a sum (0)."""
    weight = node.inputs[1]
    forward = 2 * math.prod(out_shape) * math.prod(weight.shape[1:])
    if grads is None:
        return forward
    return forward * sum(g is not None for g in grads[:2])


# %% [markdown]
# A hand check first. On the 5×5 example with an output gradient of ones, `dweight[i, j]`
# is the sum of all the pixels the kernel entry `(i, j)` ever touched: the 3×3 block of
# the image starting at `(i, j)`. And `dx[r, c]` adds up the kernel entries that touched
# pixel `(r, c)`, one per window covering it: the two left columns of the image only ever
# met the kernel's `+1` entries, the two right columns only its `-1` entries, and the
# middle column met `+1`, `0` and `-1` equally often.

# %%
x5 = Tensor(IMAGE_5x5[None, None], requires_grad=True)
k5 = Tensor(EDGE_KERNEL[None, None], requires_grad=True)
conv2d(x5, k5).sum().backward()
print("dweight:\n", k5.grad.numpy()[0, 0])
print("block sums:\n", np.array([[IMAGE_5x5[i:i + 3, j:j + 3].sum() for j in range(3)] for i in range(3)]))
print("dx:\n", x5.grad.numpy()[0, 0])

# %% [markdown]
# Module 05's `gradcheck` compares every gradient with central differences in float64;
# the test below runs it with and without a bias, with strides and paddings that differ
# between height and width, on sizes where the last window does not reach the edge.

# %%
from tinytorch.core.autograd import gradcheck
from tinytorch.testing import numeric_vjp


def conv_rule_check(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride, padding) -> None:
    """conv2d's rule against central differences; a mismatch is reported with the classic mistake it shows."""
    tensors = [Tensor(a, requires_grad=True) for a in (x, w, b)]
    out = conv2d(*tensors, stride=stride, padding=padding)
    g = np.random.default_rng(7).standard_normal(out.shape)
    where = f"conv2d's backward (stride {stride}, padding {padding})"
    try:
        out.backward(g)
    except RuntimeError as err:
        said = str(err)
        cause = ("cut the padding away from dx: col2im gives the PADDED input's gradient" if "input 0" in said else
                 "db sums the gradient over axes (0, 2, 3): one number per output channel" if "input 2" in said else
                 "return one gradient per input, each of its input's shape")
        raise AssertionError(f"{where}: {cause} ({err})") from None
    numeric = numeric_vjp(lambda *t: conv2d(*t, stride=stride, padding=padding), [x, w, b], g)
    for name, t, expected in zip(("dx", "dW", "db"), tensors, numeric):
        got = t.grad.numpy()
        if np.allclose(got, expected, atol=1e-6):
            continue
        cause = ("dW must be summed over the batch, not averaged" if name == "dW" and np.allclose(got * len(x), expected)
                 else "use the forward's stride (the saved one) to put the columns back" if name == "dx"
                 and _pair(stride, "stride") != (1, 1) else
                 "dW = Σ over the batch of dcols-weighted cols, dx = col2im(Wᵀ · dout) without the padding, "
                 "db = dout summed over (0, 2, 3)")
        raise AssertionError(f"{where}: {name} differs from central differences by up to "
                             f"{np.abs(got - expected).max():.3g}: {cause}")


def test_unit_conv2d_backward():
    assert np.array_equal(k5.grad.numpy()[0, 0], [[10, 10, 13], [13, 13, 12], [10, 10, 9]]), (
        f"the hand example's weight gradient (each tap sums the pixels it touched): expected [[10, 10, 13], "
        f"[13, 13, 12], [10, 10, 9]], got {k5.grad.numpy()[0, 0].tolist()}")
    rng = np.random.default_rng(2)
    x = Tensor(rng.standard_normal((2, 2, 5, 6)), requires_grad=True)
    w = Tensor(rng.standard_normal((3, 2, 3, 2)), requires_grad=True)
    b = Tensor(rng.standard_normal(3), requires_grad=True)
    for stride, padding in ((1, 0), (2, 1), ((2, 3), (1, 0))):
        conv_rule_check(x.numpy(), w.numpy(), b.numpy(), stride, padding)
        gradcheck(lambda x, w, b: conv2d(x, w, b, stride, padding), [x, w, b])  # raises naming input and element
    gradcheck(lambda x, w: conv2d(x, w, stride=2), [x, w])
    images = Tensor(rng.standard_normal((1, 2, 4, 4)))  # no gradient wanted: dx is skipped
    conv2d(images, w).sum().backward()
    assert images.grad is None and w.grad is not None, \
        "input without requires_grad: no dx (return None for it), but the weight still gets its gradient"
    print("✓ conv2d backward (gradcheck: bias, strides, padding)")


test_unit_conv2d_backward()

# %% [markdown]
# ## 7. Pooling
#
# A **pooling** layer summarises each window of each channel by one number, with no
# weights at all: **max-pooling** keeps the largest value ("is the feature present
# somewhere here?"), **average-pooling** the mean. With a 2×2 window and stride 2 (the
# default stride is the kernel size, as in PyTorch) it halves the height and the width,
# so the next layers are cheaper and each of their kernels sees a larger part of the
# image. Channels stay separate: a pool never mixes them.
#
# im2col does the windowing again, with no padding. Because its rows run (channel,
# kernel row, kernel column) with the channel slowest, `cols.reshape(N, C, kh·kw, OH·OW)`
# puts each window's `kh·kw` values along axis 2, for every channel separately; a max or
# a mean over that axis is the pool.
#
# ### Max-pooling's gradient goes to the argmax
#
# `out = max(a, b, c, d)` depends on one input only, the largest: nudging any other by a
# small amount changes nothing. So the whole gradient of each window goes to the position
# of its maximum, and the other positions get 0. The forward pass must therefore **save
# where the maximum was**: `argmax`, the index `i·kw + j` of the maximum inside each
# window, shape `(N, C, OH, OW)`. The backward pass puts `grad` at that index of an
# otherwise zero `(N, C, kh·kw, OH·OW)` array (compare `xp.arange(kh·kw)` with the saved
# argmax to get a one-hot mask) and sends it through `col2im`, which also adds up the
# contributions of overlapping windows (a stride smaller than the kernel).
#
# **Ties.** If two positions hold the same maximum, which one gets the gradient? Any
# choice is a valid subgradient; TinyTorch follows PyTorch: **the first one** in the
# window, reading row by row. That is what `argmax` returns (it picks the first
# occurrence), so the rule costs nothing. Giving the gradient to *every* maximum would
# count it twice.
#
# Worked example (2×2 windows, stride 2) with an output gradient `[[1, 2], [3, 4]]`:

# %%
POOL_4x4 = np.array([[1, 3, 2, 1],
                     [4, 2, 0, 1],
                     [5, 6, 1, 2],
                     [0, 2, 3, 3]], dtype=np.float64)
POOL_GRAD = np.array([[1.0, 2.0], [3.0, 4.0]])
for r in range(2):
    for q in range(2):
        window = POOL_4x4[2 * r:2 * r + 2, 2 * q:2 * q + 2]
        first = int(np.argmax(window))
        print(f"window ({r}, {q}) = {window.tolist()}: max {window.max():.0f} at index {first} "
              f"(row {first // 2}, column {first % 2}) gets gradient {POOL_GRAD[r, q]:.0f}")
print("window (1, 1) holds 3 twice: the first 3 (index 2) gets all of the gradient")

# %% [markdown]
# The contract of the two pools:
#
# | function | op name | inputs | saved fields | result |
# |---|---|---|---|---|
# | `max_pool2d(x, kernel_size, stride=None)` | `"max_pool2d"` | `(x,)` | `argmax`: `(N, C, OH, OW)` integer index `i·kw + j` of each window's first maximum; `kernel_size`: `(kh, kw)`; `stride`: `(sh, sw)` | `(N, C, OH, OW)`, x's dtype |
# | `avg_pool2d(x, kernel_size, stride=None)` | `"avg_pool2d"` | `(x,)` | `kernel_size`, `stride` (pairs) | `(N, C, OH, OW)`, x's dtype |
#
# The given first lines (`_pool_args`) turn the arguments into pairs (`stride=None` means
# the kernel size), check that x is `(N, C, H, W)` and that the window fits, and return
# `OH, OW`.

# %%
#| export
def _pool_args(name: str, x: Tensor, kernel_size: Any, stride: Any) -> tuple:
    """(kernel pair, stride pair, OH, OW) of a pooling op; stride None means the kernel size."""
    kernel = _pair(kernel_size, "kernel_size")
    stride = kernel if stride is None else _pair(stride, "stride")
    if x.ndim != 4:
        raise ValueError(f"{name} expects an input of shape (N, C, H, W), got {x.shape}.")
    out_h, out_w = _output_hw(name, x.shape, kernel, stride, (0, 0))
    return kernel, stride, out_h, out_w


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None) -> Tensor:
    """The maximum of each kh×kw window of each channel: (N, C, H, W) -> (N, C, OH, OW), x's dtype.

    kernel_size, stride -- an int or a pair; stride None means kernel_size (PyTorch's default); no padding.
    Raises (given code) ValueError for a non-4-D input or a window larger than the input.
    Records op "max_pool2d" with inputs (x,), and saves `argmax` ((N, C, OH, OW) integer index
    i·kw + j of the first maximum in each window, reading row by row), `kernel_size` and `stride` (pairs).
    """
    x = as_tensor(x)
    kernel, stride, out_h, out_w = _pool_args("max_pool2d", x, kernel_size, stride)
    ### BEGIN SOLUTION
    n, c = x.shape[:2]
    kh, kw = kernel
    windows = im2col(x.data, kernel, stride).reshape(n, c, kh * kw, out_h * out_w)
    argmax = windows.argmax(axis=2)  # the first maximum of each window
    out = windows.max(axis=2)
    return record_op("max_pool2d", out.reshape(n, c, out_h, out_w), (x,),
                     argmax=argmax.reshape(n, c, out_h, out_w), kernel_size=kernel, stride=stride)
    ### END SOLUTION


@register_backward("max_pool2d")
def max_pool2d_backward(grad: Any, node) -> tuple:
    """(dx,): each window's gradient routed to its saved argmax (others 0), added up by col2im."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    argmax, (kh, kw), stride = node.saved["argmax"], node.saved["kernel_size"], node.saved["stride"]
    xp = array_module(grad)
    n, c, out_h, out_w = grad.shape
    positions = out_h * out_w
    chosen = xp.arange(kh * kw).reshape(1, 1, kh * kw, 1) == argmax.reshape(n, c, 1, positions)
    d_windows = chosen * grad.reshape(n, c, 1, positions)                  # (N, C, kh·kw, OH·OW)
    return (col2im(d_windows.reshape(n, c * kh * kw, positions), x.shape, (kh, kw), stride),)
    ### END SOLUTION


# %%
x4 = Tensor(POOL_4x4[None, None], requires_grad=True)
pooled = max_pool2d(x4, 2)
pooled.backward(POOL_GRAD[None, None])
print("max_pool2d:\n", pooled.numpy()[0, 0], "\nsaved argmax:\n", pooled._node.saved["argmax"][0, 0])
print("dx (each gradient at its window's first maximum):\n", x4.grad.numpy()[0, 0])


# %%
def test_unit_max_pool2d():
    x = Tensor(POOL_4x4[None, None], requires_grad=True)
    y = max_pool2d(x, 2)
    assert np.array_equal(y.numpy()[0, 0], [[4, 2], [6, 3]]) and y.dtype == np.float64, \
        f"2x2 max pooling of the hand example: [[4, 2], [6, 3]] float64, got {y.numpy()[0, 0].tolist()} {y.dtype}"
    assert y._node is not None and y._node.op == "max_pool2d" and set(y._node.saved) == {"argmax", "kernel_size", "stride"}, \
        f"max_pool2d records op 'max_pool2d' saving argmax, kernel_size and stride; got {y._node and sorted(y._node.saved)}"
    argmax = y._node.saved["argmax"][0, 0]
    assert np.array_equal(argmax, [[2, 0], [1, 2]]) and y._node.saved["stride"] == (2, 2), (
        f"argmax is each window's i·kw + j of its first maximum, [[2, 0], [1, 2]], and stride the pair (2, 2); got "
        f"{argmax.tolist()} and {y._node.saved['stride']!r}")
    y.backward(POOL_GRAD[None, None])
    routed = x.grad.numpy()[0, 0]
    assert np.array_equal(routed, [[0, 0, 2, 0], [1, 0, 0, 0], [0, 3, 0, 0], [0, 0, 4, 0]]), \
        f"each window's gradient goes to its maximum only: expected [[0, 0, 2, 0], [1, 0, 0, 0], ...], got {routed.tolist()}"
    rng = np.random.default_rng(3)
    z = Tensor(rng.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) / 10.0, requires_grad=True)  # no ties
    gradcheck(lambda t: max_pool2d(t, 3, stride=2), [z])  # overlapping windows; raises naming the element
    gradcheck(lambda t: max_pool2d(t, (2, 3), stride=(2, 1)), [z])
    shape = max_pool2d(Tensor(np.ones((1, 1, 5, 5), np.float32)), 2).shape
    assert shape == (1, 1, 2, 2), f"2x2 pooling of 5x5 drops the last row and column: (1, 1, 2, 2), got {shape}"
    print("✓ max_pool2d (values, argmax, gradient routing, ties, gradcheck)")


test_unit_max_pool2d()

# %% [markdown]
# ### Average-pooling
#
# `out = (a + b + c + d) / 4`: every input of the window gets `1/(kh·kw)` of the window's
# gradient. Same im2col windows, a mean over axis 2; in the backward pass, a
# `(N, C, kh·kw, OH·OW)` array holding `grad / (kh·kw)` for every window entry
# (`xp.broadcast_to` makes it without a loop) goes through `col2im`.

# %%
#| export
def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None) -> Tensor:
    """The mean of each kh×kw window of each channel: (N, C, H, W) -> (N, C, OH, OW), x's dtype.

    kernel_size, stride -- an int or a pair; stride None means kernel_size; no padding.
    Raises (given code) ValueError for a non-4-D input or a window larger than the input.
    Records op "avg_pool2d" with inputs (x,), and saves `kernel_size` and `stride` (pairs).
    """
    x = as_tensor(x)
    kernel, stride, out_h, out_w = _pool_args("avg_pool2d", x, kernel_size, stride)
    ### BEGIN SOLUTION
    n, c = x.shape[:2]
    kh, kw = kernel
    windows = im2col(x.data, kernel, stride).reshape(n, c, kh * kw, out_h * out_w)
    out = windows.mean(axis=2)
    return record_op("avg_pool2d", out.reshape(n, c, out_h, out_w), (x,), kernel_size=kernel, stride=stride)
    ### END SOLUTION


@register_backward("avg_pool2d")
def avg_pool2d_backward(grad: Any, node) -> tuple:
    """(dx,): each window's gradient divided by kh·kw and given to every entry of the window (col2im adds)."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    (kh, kw), stride = node.saved["kernel_size"], node.saved["stride"]
    xp = array_module(grad)
    n, c, out_h, out_w = grad.shape
    share = grad.reshape(n, c, 1, out_h * out_w) / (kh * kw)
    d_windows = xp.broadcast_to(share, (n, c, kh * kw, out_h * out_w))
    return (col2im(d_windows.reshape(n, c * kh * kw, out_h * out_w), x.shape, (kh, kw), stride),)
    ### END SOLUTION


# %%
def test_unit_avg_pool2d():
    x = Tensor(POOL_4x4[None, None], requires_grad=True)
    y = avg_pool2d(x, 2)
    assert np.array_equal(y.numpy()[0, 0], [[2.5, 1.0], [3.25, 2.25]]), \
        f"2x2 average pooling of the hand example: [[2.5, 1], [3.25, 2.25]], got {y.numpy()[0, 0].tolist()}"
    assert y._node is not None and y._node.op == "avg_pool2d" and set(y._node.saved) == {"kernel_size", "stride"}, \
        f"avg_pool2d records op 'avg_pool2d' saving kernel_size and stride; got {y._node and sorted(y._node.saved)}"
    y.backward(POOL_GRAD[None, None])
    shared = x.grad.numpy()[0, 0]
    assert np.array_equal(shared, np.kron(POOL_GRAD, np.ones((2, 2))) / 4), \
        f"each window's gradient is shared equally by its 4 pixels (g / 4); got {shared.tolist()}"
    z = Tensor(np.random.default_rng(4).standard_normal((2, 2, 6, 7)), requires_grad=True)
    gradcheck(lambda t: avg_pool2d(t, 3, stride=2), [z])  # raises naming the input and the element
    gradcheck(lambda t: avg_pool2d(t, (2, 3)), [z])
    dtype = avg_pool2d(Tensor(np.ones((1, 1, 4, 4), np.float32)), 2).dtype
    assert dtype == np.float32, f"float32 in must give float32 out, got {dtype}"
    print("✓ avg_pool2d (values, gradient shared equally, gradcheck)")


test_unit_avg_pool2d()

# %% [markdown]
# ## 8. The layers
#
# Networks are built from modules (module 03). The layers wrap the functions:
#
# * `Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True)` owns
#   `weight` `(out_channels, in_channels, kh, kw)` (PyTorch's layout: **out first**,
#   unlike our `Linear`'s `(in, out)`) and `bias` `(out_channels,)` or `None`. Both are
#   drawn uniformly from `(-1/√fan_in, 1/√fan_in)`, as PyTorch does, where the
#   **fan-in** of a convolution is what each output sums over: `in_channels · kh · kw`
#   (module 03's argument for scaling by fan-in, with a kernel's worth of inputs).
#   `dtype`, `device`, `rng` and `seed` work as for `Linear`: draw the numbers with the
#   given `generator` (`generator.uniform(-bound, bound, shape)`, the weight first, then
#   the bias) and wrap each in `Tensor(values, requires_grad=True, dtype=dtype,
#   device=device)`. With `bias=False`, `self.bias = None`.
# * `MaxPool2d(kernel_size, stride=None)` and `AvgPool2d(kernel_size, stride=None)`:
#   no parameters (given).
# * `Flatten(start_dim=1, end_dim=-1)`: joins the dimensions `start_dim … end_dim` into
#   one, so that a `(N, C, H, W)` feature map becomes the `(N, C·H·W)` rows a `Linear`
#   layer takes. The batch dimension stays. It is a `reshape` (module 01), so autograd
#   needs no new rule. The given line normalises the dims to non-negative ints.
#
# You write `Conv2d.__init__`'s parameter creation and `Flatten.forward`.

# %%
#| export
class Conv2d(Module):
    """2-D convolution layer on NCHW batches (cross-correlation, as PyTorch's nn.Conv2d).

    in_channels, out_channels -- C and O; kernel_size, stride, padding -- an int or a pair
    bias   -- learn an (O,) bias (default True)
    dtype  -- parameter dtype (float32 default); device -- "cpu" or "cuda"; rng / seed -- reproducible init
    weight: (out_channels, in_channels, kh, kw), bias: (out_channels,) or None, both uniform in
    (-1/√fan_in, 1/√fan_in) with fan_in = in_channels·kh·kw.
    x: (N, C, H, W) -> (N, O, OH, OW).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, bias: bool = True, *, dtype: Any = np.float32,
                 device: str | None = None, rng: Any = None, seed: int | None = None):
        super().__init__()
        for label, size in (("in_channels", in_channels), ("out_channels", out_channels)):
            if not isinstance(size, (int, np.integer)) or size <= 0:
                raise ValueError(f"Conv2d: {label} must be a positive int, got {size!r}.")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding", minimum=0)
        generator = make_rng(rng, seed)
        ### BEGIN SOLUTION
        kh, kw = self.kernel_size
        bound = 1.0 / math.sqrt(self.in_channels * kh * kw)
        shape = (self.out_channels, self.in_channels, kh, kw)
        self.weight = Tensor(generator.uniform(-bound, bound, shape), requires_grad=True, dtype=dtype, device=device)
        self.bias = (Tensor(generator.uniform(-bound, bound, self.out_channels), requires_grad=True,
                            dtype=dtype, device=device) if bias else None)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        """x: (N, in_channels, H, W) -> (N, out_channels, OH, OW)."""
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


class MaxPool2d(Module):
    """Max-pooling layer: see `max_pool2d` (stride None means kernel_size)."""

    def __init__(self, kernel_size: Any, stride: Any = None):
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else _pair(stride, "stride")

    def forward(self, x: Tensor) -> Tensor:
        return max_pool2d(x, self.kernel_size, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class AvgPool2d(MaxPool2d):
    """Average-pooling layer: see `avg_pool2d` (stride None means kernel_size)."""

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, self.kernel_size, self.stride)


def _flatten_dims(start_dim: int, end_dim: int, ndim: int) -> tuple[int, int]:
    """start_dim and end_dim as non-negative ints for an ndim-dimensional input; ValueError if out of range or reversed."""
    start, end = (d + ndim if d < 0 else d for d in (start_dim, end_dim))
    if not (0 <= start <= end < ndim):
        raise ValueError(f"Flatten(start_dim={start_dim}, end_dim={end_dim}) does not fit an input "
                         f"with {ndim} dimensions.")
    return start, end


class Flatten(Module):
    """Join the dimensions start_dim … end_dim into one: (N, C, H, W) -> (N, C·H·W) by default (a reshape)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        """x.reshape with the dims start … end (inclusive) joined; the others (the batch) unchanged."""
        x = as_tensor(x)
        start, end = _flatten_dims(self.start_dim, self.end_dim, x.ndim)
        ### BEGIN SOLUTION
        return x.reshape(*x.shape[:start], -1, *x.shape[end + 1:])
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


# %%
def test_unit_layers():
    conv = Conv2d(3, 8, 3, padding=1, seed=0)
    assert conv.weight.shape == (8, 3, 3, 3) and conv.bias.shape == (8,) and conv.weight.dtype == np.float32, \
        f"Conv2d(3, 8, 3): weight (out, in, kh, kw) = (8, 3, 3, 3) float32 and bias (8,); got {conv.weight.shape}, {conv.bias.shape}"
    largest = np.abs(conv.weight.numpy()).max()
    assert 0.15 < largest <= 1 / math.sqrt(27), \
        f"weights start uniform in ±1/√(in·kh·kw) = ±{1 / math.sqrt(27):.4f}; the largest is {largest:.4f}"
    names = [name for name, _ in conv.named_parameters()]
    assert names == ["weight", "bias"], f"parameters weight and bias, in that order; got {names}"
    assert np.array_equal(Conv2d(3, 8, 3, seed=1).weight.numpy(), Conv2d(3, 8, 3, rng=1).weight.numpy()), \
        "seed=1 and rng=1 must draw the same weights"
    x = Tensor(np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32))
    y = conv(x)
    assert y.shape == (2, 8, 8, 8) and np.allclose(y.numpy(), conv2d(x, conv.weight, conv.bias, 1, 1).numpy()), \
        f"Conv2d(3, 8, 3, padding=1) is conv2d with its weight, bias, stride 1, padding 1: (2, 8, 8, 8); got {y.shape}"
    assert Conv2d(3, 8, (3, 1), stride=(2, 1), bias=False).bias is None, "bias=False: no bias"
    shapes = (MaxPool2d(2)(y).shape, AvgPool2d(3, stride=1)(y).shape)
    assert shapes == ((2, 8, 4, 4), (2, 8, 6, 6)), f"MaxPool2d(2) -> (2, 8, 4, 4), AvgPool2d(3, 1) -> (2, 8, 6, 6); got {shapes}"
    flat = (Flatten()(y).shape, Flatten(0, 1)(y).shape)
    assert flat == ((2, 512), (16, 8, 8)), f"Flatten() keeps the batch: (2, 512); Flatten(0, 1): (16, 8, 8); got {flat}"
    print(conv, MaxPool2d(2), Flatten(), sep="\n")
    print("✓ Conv2d, MaxPool2d, AvgPool2d, Flatten")


test_unit_layers()

# %% [markdown]
# ### Parameters: a convolution against a Linear layer on the same image
#
# **Predict, then run.** A 32×32 RGB image (3,072 numbers) goes to 16 feature maps of
# 32×32 (16,384 numbers). How many parameters does `Conv2d(3, 16, 3, padding=1)` need?
# And a `Linear` layer that maps the same 3,072 inputs to the same 16,384 outputs?

# %%
from tinytorch.core.layers import Linear, count_parameters

conv_layer = Conv2d(3, 16, 3, padding=1)
conv_params = count_parameters(conv_layer)
linear_params = 3 * 32 * 32 * 16 * 32 * 32 + 16 * 32 * 32  # weight + bias: not allocated (200 MB in float32)
print(f"Conv2d(3, 16, 3, padding=1): {conv_params:,} parameters (16 kernels of 3·3·3, plus 16 biases)")
print(f"Linear(3072, 16384):         {linear_params:,} parameters = {linear_params / conv_params:,.0f}× more")
small = Linear(3 * 8 * 8, 16 * 8 * 8)  # the same comparison on an 8×8 image, small enough to build
print(f"on an 8×8 image: Conv2d {count_parameters(Conv2d(3, 16, 3, padding=1)):,} "
      f"vs Linear {count_parameters(small):,}")

# %% [markdown]
# The convolution's count does not depend on the image size at all: the same 448 numbers
# work on 8×8 and on 1024×1024 images. The Linear layer's count grows with the square of
# the number of pixels. The price of the convolution is the assumption it makes (local,
# and the same everywhere); for images it is a very good assumption.
#
# ## 9. How the cost grows with the image
#
# Per image, the forward matrix product does `2 · O · C·kh·kw · OH·OW` floating-point
# operations: proportional to the number of output pixels. The backward pass does about
# twice that (one product for the weight, one for the columns).
#
# **Predict, then run.** When the image side doubles (16 → 32 → 64 → 128), by what factor
# does the time of a forward + backward pass grow? And how much faster is the im2col
# version than the loops of section 1 on one small image?

# %%
import time


def fwd_bwd_seconds(side: int, batch: int = 4, repeats: int = 3) -> float:
    """Best time of forward + backward of Conv2d(3 -> 16, 3×3, padding 1) on (batch, 3, side, side) float32."""
    rng = np.random.default_rng(0)
    layer = Conv2d(3, 16, 3, padding=1, seed=0)
    x = Tensor(rng.standard_normal((batch, 3, side, side)).astype(np.float32), requires_grad=True)
    best = float("inf")
    for _ in range(repeats):  # the best of a few runs: the one least disturbed by other programs
        start = time.perf_counter()
        layer(x).sum().backward()
        best = min(best, time.perf_counter() - start)
    return best


previous = None
print(" side | fwd+bwd (ms) | × previous | output pixels")
for side in (16, 32, 64, 128):
    seconds = fwd_bwd_seconds(side)
    ratio = f"{seconds / previous:10.1f}" if previous else " " * 10
    print(f"{side:5d} | {seconds * 1e3:12.2f} | {ratio} | {side * side:,}")
    previous = seconds

one = np.random.default_rng(1).standard_normal((1, 3, 16, 16))
w16 = np.random.default_rng(2).standard_normal((16, 3, 3, 3))
start = time.perf_counter()
conv2d_by_loops(one, w16, padding=1)
loops = time.perf_counter() - start
start = time.perf_counter()
conv2d(one, w16, padding=1)
vectorised = time.perf_counter() - start
print(f"one 16×16 image, 3 -> 16 channels: loops {loops * 1e3:.1f} ms, im2col {vectorised * 1e3:.2f} ms "
      f"({loops / vectorised:.0f}× faster)")

# %% [markdown]
# Each doubling of the side quadruples the pixels and, once the arrays are large enough
# that fixed costs stop mattering, the time (about 4×; the smallest sizes grow less). The
# loops spend nearly all their time in the Python interpreter, not in arithmetic. (On a
# machine shared with other programs single timings jump around: run the cell twice, and
# trust the trend more than any one number.)
#
# ## 10. On the GPU, and against PyTorch
#
# Nothing above calls `np.` on the data: `array_module` picks NumPy or CuPy, and CuPy has
# `pad`, `matmul`, `argmax`, `broadcast_to` and `lib.stride_tricks.as_strided` too, so
# `Conv2d(..., device="cuda")` on `Tensor(x, device="cuda")` runs the same code on the
# GPU (`pip install -e ".[gpu]"`). When PyTorch is installed, the cell below compares
# values and gradients with `torch.nn.functional.conv2d` and `max_pool2d`; the test suite
# does the same for many more shapes (`tests/09_spatial/test_spatial_torch.py`).

# %%
try:
    import torch
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    rng = np.random.default_rng(6)
    x_np, w_np, b_np = rng.standard_normal((2, 3, 9, 7)), rng.standard_normal((5, 3, 3, 2)), rng.standard_normal(5)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    x, w, b = (Tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    ours = max_pool2d(conv2d(x, w, b, stride=(2, 1), padding=1), 2, stride=1)
    theirs = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(tx, tw, tb, stride=(2, 1), padding=1), 2, 1)
    g = rng.standard_normal(ours.shape)
    ours.backward(g)
    theirs.backward(torch.tensor(g))
    print(f"values: max |difference| {np.abs(ours.numpy() - theirs.detach().numpy()).max():.1e}")
    for name, mine, ref in (("dx", x, tx), ("dweight", w, tw), ("dbias", b, tb)):
        print(f"{name:8s}: max |difference| {np.abs(mine.grad.numpy() - ref.grad.numpy()).max():.1e}")

# %% [markdown]
# ## Summary
#
# * A convolution slides one small kernel over every position: `out[r, q] = Σ x[r·s + i,
#   q·s + j] · K[i, j]`, summed over the input channels too, plus one bias per output
#   channel. Deep learning does not flip the kernel (cross-correlation).
# * Output size: `(H + 2p - k) // s + 1`; padding goes on both sides of H and W only; a
#   kernel larger than the padded input is an error, not an empty output.
# * im2col lays every window out as a column, so the convolution is one matrix product
#   `weight.reshape(O, -1) @ cols`; it costs about `kh·kw / (sh·sw)` times the input's
#   memory. Rows go (channel, kernel row, kernel column), channel slowest.
# * Backward: `dW = Σ_n g[n] @ cols[n]ᵀ`, `db = Σ g` over batch and positions, `dx =
#   col2im(Wᵀ @ g)`, where col2im **adds** every column entry back to its pixel
#   (overlapping windows), stepping by the stride, and the padding is cut away.
# * Max-pooling sends each window's gradient to its (first) maximum; average-pooling
#   shares it equally. Both reuse im2col and col2im.
# * A convolution's parameter count does not depend on the image size; its time grows
#   with the number of output pixels.
#
# ## Exercises
#
# Answer each by running your own functions (add cells below).
#
# 1. **LeNet's shapes.** A 28×28 grey image goes through `Conv2d(1, 6, 5)`, `MaxPool2d(2)`,
#    `Conv2d(6, 16, 5)`, `MaxPool2d(2)`, `Flatten()`. Predict every shape with
#    `conv_output_size`, then check by running a `Tensor` of zeros through your layers.
#    How many inputs does the `Linear` layer after `Flatten` need?
# 2. **Flip or not.** Run your `conv2d` on `IMAGE_5x5` with `EDGE_KERNEL` and with its flip
#    `EDGE_KERNEL[::-1, ::-1]`. Then do the same with a symmetric kernel (a 3×3 blur of
#    ones). When does the flip matter? Train nothing: explain why a network does not care
#    which convention it was trained with, but a model loaded from PyTorch does.
# 3. **Receptive field.** Stack two `Conv2d(1, 1, 3)` layers (no padding) on a 1×1×9×9
#    input with `requires_grad=True`, call `backward` on the output's value at `[0, 0, 0, 0]`
#    only (hint: index it, then `.sum()`), and find which input pixels got a non-zero
#    gradient. Compare with one `Conv2d(1, 1, 5)`. Count the weights of both for `C`
#    channels in and out: `2·9·C²` against `25·C²`.
# 4. **The memory bill.** Without allocating it, compute the size of the column matrix for
#    a VGG layer: one image `(1, 64, 224, 224)` in float32, a 3×3 kernel, padding 1. Then
#    measure it with your `im2col` on `(1, 64, 56, 56)` and check your formula. How much
#    does stride 2 save?
# 5. **Where the gradient goes.** Put a random `(1, 1, 6, 6)` input through
#    `max_pool2d(x, 2)` and backward ones. How many input pixels get a non-zero gradient?
#    Now use `max_pool2d(x, 3, stride=1)`: can one pixel receive more than one window's
#    gradient? What is the largest gradient any pixel gets, and which pixel is it?
# 6. **All ties.** A ReLU often outputs whole windows of zeros. Put `np.zeros((1, 1, 4, 4))`
#    through `max_pool2d(x, 2)` and backward ones: where does the gradient go? Compare with
#    `avg_pool2d`. Which behaviour would you want, and why does PyTorch's choice not harm
#    training?
# 7. **Stride or pool?** Compare `Conv2d(3, 16, 3, stride=2, padding=1)` with
#    `Conv2d(3, 16, 3, padding=1)` followed by `AvgPool2d(2)` on a `(8, 3, 64, 64)` batch:
#    output shapes, time of forward + backward (use `fwd_bwd_seconds` as a model), and the
#    size of the saved `cols`.
#
# ## Questions
#
# 1. `conv2d` saves the column matrix for the backward pass instead of recomputing it from
#    `x`. Measure, on a `(32, 3, 32, 32)` batch with a 3×3 kernel, how many bytes that keeps
#    alive and how long one `im2col` call takes. When would you rather recompute? Then
#    measure the peak memory (`tracemalloc`) of a forward + backward pass with your
#    `conv2d_backward` written both ways (the whole `Wᵀ @ g` and `col2im`, or one block per
#    kernel offset): how much does the second save?
# 2. Why is the weight gradient a **sum** over the images of the batch, while the loss is
#    usually a **mean** over them? Where does the `1/N` come from in your code?
# 3. Shift an image one pixel to the right (`np.roll` along the width) and run it through
#    your `conv2d` with no padding: how are the two outputs related? What does a
#    `MaxPool2d(2)` after it do to that relation?
# 4. What goes wrong, exactly, if `im2col` orders its rows (kernel row, kernel column,
#    channel) while the weight is flattened (channel, kernel row, kernel column)? With one
#    input channel, would you notice?
# 5. How does the time of your `conv2d` grow with the kernel size `k = 3, 5, 7` at a fixed
#    image size? Predict from the FLOP count, then measure.
