"""Module 09: output sizes, im2col/col2im, conv2d forward and backward, pooling, the layers.

The tests run from the smallest piece to the largest (output size, im2col, col2im, conv2d,
its backward, the pools, the layers), so that the first failure points at the function
that is wrong. Every assertion that a plausible mistake can break says what the mistake
is: that first failure is what a student sees (and what `tito release check 09` matches
against the mistakes catalogue, modules/09_spatial/mistakes.toml). The references here are
plain loops over output positions: slow, obviously right, small sizes only.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinytorch.core.autograd import gradcheck
from tinytorch.core.layers import Linear, Sequential, count_parameters
from tinytorch.core.spatial import (AvgPool2d, Conv2d, Flatten, MaxPool2d, avg_pool2d, col2im, conv2d,
                                    conv_output_size, im2col, max_pool2d)
from tinytorch.core.tensor import Tensor

IMAGE_5x5 = np.array([[1, 2, 0, 1, 3],
                      [0, 1, 3, 2, 1],
                      [2, 0, 1, 0, 2],
                      [1, 3, 2, 1, 0],
                      [0, 1, 0, 2, 1]], dtype=np.float64)
EDGE_KERNEL = np.array([[1, 0, -1]] * 3, dtype=np.float64)
EDGE_OUTPUT = np.array([[-1, 0, -2], [-3, 1, 3], [0, 1, 0]], dtype=np.float64)  # worked by hand in the lesson
POOL_4x4 = np.array([[1, 3, 2, 1],
                     [4, 2, 0, 1],
                     [5, 6, 1, 2],
                     [0, 2, 3, 3]], dtype=np.float64)
POOL_GRAD = np.array([[1.0, 2.0], [3.0, 4.0]])
# max-pool 2×2 of POOL_4x4 with POOL_GRAD: window (1, 1) = [[1, 2], [3, 3]] ties; the first 3 gets it
MAX_POOL_DX = np.array([[0, 0, 2, 0], [1, 0, 0, 0], [0, 3, 0, 0], [0, 0, 4, 0]], dtype=np.float64)


# ---- references and helpers -------------------------------------------------------------------


def pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def out_size(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def reference_im2col(x, kernel, stride, order="ckk"):
    """Loop version of im2col (rows (c, i, j), or (i, j, c) for order='kkc' to recognise that mistake)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, stride
    oh, ow = out_size(h, kh, sh, 0), out_size(w, kw, sw, 0)
    cols = np.zeros((n, c * kh * kw, oh * ow), x.dtype)
    for r in range(oh):
        for q in range(ow):
            window = x[:, :, r * sh:r * sh + kh, q * sw:q * sw + kw]  # (n, c, kh, kw)
            if order == "kkc":
                window = window.transpose(0, 2, 3, 1)
            cols[:, :, r * ow + q] = window.reshape(n, -1)
    return cols


def reference_col2im(cols, shape, kernel, stride):
    n, c, h, w = shape
    (kh, kw), (sh, sw) = kernel, stride
    oh, ow = out_size(h, kh, sh, 0), out_size(w, kw, sw, 0)
    out = np.zeros(shape, cols.dtype)
    for r in range(oh):
        for q in range(ow):
            out[:, :, r * sh:r * sh + kh, q * sw:q * sw + kw] += cols[:, :, r * ow + q].reshape(n, c, kh, kw)
    return out


def reference_conv(x, w, b=None, stride=1, padding=0):
    """out[n, o, r, q] = Σ_c,i,j x_pad[n, c, r·sh + i, q·sw + j] · w[o, c, i, j] + b[o], one position at a time."""
    (sh, sw), (ph, pw) = pair(stride), pair(padding)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kh, kw = w.shape[2:]
    oh, ow = out_size(x.shape[2], kh, sh, ph), out_size(x.shape[3], kw, sw, pw)
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for r in range(oh):
        for q in range(ow):
            out[:, :, r, q] = np.einsum("ncij,ocij->no", xp[:, :, r * sh:r * sh + kh, q * sw:q * sw + kw], w)
    return out if b is None else out + b[None, :, None, None]


def reference_conv_grads(x, w, g, stride=1, padding=0):
    """(dx, dw, db) of Σ g ⊙ conv(x, w, b), one output position at a time."""
    (sh, sw), (ph, pw) = pair(stride), pair(padding)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kh, kw = w.shape[2:]
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for r in range(g.shape[2]):
        for q in range(g.shape[3]):
            rows, cols = slice(r * sh, r * sh + kh), slice(q * sw, q * sw + kw)
            dw += np.einsum("no,ncij->ocij", g[:, :, r, q], xp[:, :, rows, cols])
            dxp[:, :, rows, cols] += np.einsum("no,ocij->ncij", g[:, :, r, q], w)
    return dxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]], dw, g.sum(axis=(0, 2, 3))


def run_conv(x, w, b=None, stride=1, padding=0):
    """conv2d on valid arguments; an exception from inside it becomes a failure that names the likely cause."""
    try:
        return conv2d(x, w, b, stride=stride, padding=padding)
    except (ValueError, IndexError) as err:
        shapes = f"x {Tensor(x).shape if not isinstance(x, Tensor) else x.shape}, stride {stride}, padding {padding}"
        if "broadcast" in str(err):
            pytest.fail(f"conv2d raised {type(err).__name__} '{err}' on valid input ({shapes}): the bias has one "
                        "value per output channel; add it as a column, bias.reshape(O, 1), to the (N, O, OH·OW) "
                        "product (or as (1, O, 1, 1) to the output)", pytrace=False)
        pytest.fail(f"conv2d raised {type(err).__name__} '{err}' on valid input ({shapes}): pad only H and W, "
                    "on both sides (xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))), so that im2col gives "
                    "OH·OW columns with OH = (H + 2p - k) // s + 1", pytrace=False)


def conv_diagnosis(got, x, w, b, stride, padding):
    """Why conv2d's output `got` is wrong, in words (the first known mistake that fits)."""
    want = reference_conv(x, w, b, stride, padding)
    if got.shape != want.shape:
        return f"the output has shape {got.shape}, expected {want.shape} = (N, O, OH, OW) with OH = (H + 2p - k) // s + 1"
    if np.allclose(got, reference_conv(x, w[:, :, ::-1, ::-1], b, stride, padding)):
        return ("conv2d flipped the kernel (that is the textbook convolution): deep learning's conv2d is a "
                "cross-correlation and uses the weight as it is, as PyTorch does")
    if b is not None and np.allclose(got, reference_conv(x, w, None, stride, padding)):
        return "the bias was not added: one value per output channel, bias.reshape(O, 1)"
    return ("compare with the definition out[n, o, r, q] = Σ_c,i,j x_pad[n, c, r·sh + i, q·sw + j] · "
            "weight[o, c, i, j] + bias[o]")


def check_conv(x, w, b=None, stride=1, padding=0):
    got = run_conv(x, w, b, stride, padding).numpy()
    want = reference_conv(x, w, b, stride, padding)
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-10, atol=1e-12), \
        f"conv2d(x {x.shape}, weight {w.shape}, stride={stride}, padding={padding}) is wrong: " \
        + conv_diagnosis(got, x, w, b, stride, padding)


def conv_grads(x, w, b, g, stride, padding):
    """(dx, dw, db) from our backward; an engine shape error becomes a failure that names the gradient."""
    tensors = [Tensor(a, requires_grad=True) for a in ((x, w) if b is None else (x, w, b))]
    out = run_conv(*tensors, stride=stride, padding=padding)
    try:
        out.backward(g)
    except RuntimeError as err:
        hint = {x.shape: "dx must have the input's shape (N, C, H, W): cut the padding away from col2im's result, "
                         "d_padded[:, :, ph:ph + H, pw:pw + W]",
                w.shape: "dweight must have the weight's shape: Σ_n g[n] @ cols[n]ᵀ, reshaped to (O, C, kh, kw)",
                (w.shape[0],): "dbias has one number per output channel: sum the gradient over axes (0, 2, 3)"}
        wrong = [text for shape, text in hint.items() if str(shape) in str(err)]
        pytest.fail(f"conv2d backward: {err} — {wrong[0] if wrong else 'return (dx, dweight, dbias) in that order'}",
                    pytrace=False)
    except ValueError as err:
        pytest.fail(f"conv2d backward raised ValueError '{err}': call col2im with the padded input's shape "
                    "(N, C, H + 2·ph, W + 2·pw), the kernel size and the forward's stride (node.saved['stride'])",
                    pytrace=False)
    grads = [t.grad.numpy() for t in tensors]
    return grads + [None] * (3 - len(grads))


# ---- 1. output sizes ---------------------------------------------------------------------------

SIZES = [  # (size, kernel, stride, padding) -> (size + 2p - k) // s + 1
    (5, 3, 1, 0, 3), (5, 3, 1, 1, 5), (5, 3, 2, 0, 2), (32, 3, 2, 1, 16), (8, 2, 2, 0, 4), (7, 7, 1, 0, 1),
    (10, 4, 3, 2, 4), (6, 5, 2, 2, 3),
]


WRONG_SIZE_FORMULAS = {  # what a wrong conv_output_size computes -> why it is wrong
    "you forgot the + 1: the first window sits at position 0, then one more every `stride` pixels":
        lambda h, k, s, p: (h + 2 * p - k) // s,
    "padding is added on both sides: the padded size is size + 2·padding":
        lambda h, k, s, p: (h + p - k) // s + 1,
    "use floor division //: the last window must fit entirely":
        lambda h, k, s, p: (h + 2 * p - k) / s + 1,
}


def output_size_diagnosis():
    """The wrong formula that the student's conv_output_size follows on every case of SIZES, in words."""
    for why, formula in WRONG_SIZE_FORMULAS.items():
        if all(conv_output_size(h, k, s, p) == formula(h, k, s, p) for h, k, s, p, _ in SIZES):
            return why
    return "the formula is (size + 2·padding - kernel) // stride + 1"


@pytest.mark.parametrize("size,kernel,stride,padding,expected", SIZES,
                         ids=[f"H{h}-k{k}-s{s}-p{p}" for h, k, s, p, _ in SIZES])
def test_conv_output_size(size, kernel, stride, padding, expected):
    got = conv_output_size(size, kernel, stride, padding)
    if got != expected:
        pytest.fail(f"conv_output_size({size}, kernel={kernel}, stride={stride}, padding={padding}) = {got}, "
                    f"expected {expected}: {output_size_diagnosis()}", pytrace=False)
    assert isinstance(got, int), \
        f"conv_output_size must return an int, got {type(got).__name__}: use floor division //"


# ---- 2. im2col -------------------------------------------------------------------------------


def test_im2col_on_the_5x5_example():
    cols = im2col(IMAGE_5x5[None, None], (3, 3), (1, 1))
    assert cols.shape == (1, 9, 9), f"im2col of a 5×5 image with a 3×3 kernel has shape (1, 9, 9), got {cols.shape}"
    assert np.array_equal(cols[0, :, 0], IMAGE_5x5[:3, :3].ravel()), \
        "column 0 is the top-left window read row by row: cols[n, i·kw + j, 0] = x[n, 0, i, j]"
    assert np.array_equal(cols, reference_im2col(IMAGE_5x5[None, None], (3, 3), (1, 1))), \
        "column r·OW + q is the window at output (r, q): x[r + i, q + j] in row i·kw + j"


def test_im2col_rows_run_channel_then_kernel_row_then_kernel_column(rng):
    x = rng.standard_normal((2, 3, 5, 4))
    cols = im2col(x, (2, 3), (1, 1))
    want = reference_im2col(x, (2, 3), (1, 1))
    assert cols.shape == want.shape, f"im2col shape {cols.shape}, expected (N, C·kh·kw, OH·OW) = {want.shape}"
    if np.allclose(cols, reference_im2col(x, (2, 3), (1, 1), order="kkc")):
        pytest.fail("im2col's rows must run (channel, kernel row, kernel column), channel slowest, to match "
                    "weight.reshape(O, -1); yours run (kernel row, kernel column, channel)", pytrace=False)
    assert np.array_equal(cols, want), \
        "im2col: cols[n, c·kh·kw + i·kw + j, r·OW + q] = x[n, c, r·sh + i, q·sw + j]"


@pytest.mark.parametrize("kernel,stride", [((3, 3), (2, 2)), ((2, 3), (3, 1)), ((1, 1), (2, 3))],
                         ids=["k3x3-s2", "k2x3-s3x1", "k1x1-s2x3"])
def test_im2col_with_strides(kernel, stride, rng):
    x = rng.standard_normal((2, 2, 8, 7))
    cols, want = im2col(x, kernel, stride), reference_im2col(x, kernel, stride)
    assert cols.shape == want.shape, \
        f"im2col{kernel, stride} has shape {cols.shape}, expected {want.shape}: OH = (Hp - kh) // sh + 1"
    assert np.array_equal(cols, want), \
        f"im2col with stride {stride}: window (r, q) starts at row r·sh and column q·sw (strides of the position " \
        "axes are the row/column strides times the stride)"


def test_im2col_keeps_dtype_and_returns_its_own_memory(rng):
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    cols = im2col(x, (3, 3), (1, 1))
    assert cols.dtype == np.float32, f"im2col changed the dtype float32 → {cols.dtype}: keep the input's dtype"
    assert not np.shares_memory(cols, x), "im2col must return a copy (the column matrix), not a view of x"


def test_im2col_of_a_1x1_kernel_with_stride_1_is_still_a_copy(rng):
    """There the windows are laid out like x itself, and the reshape alone would be a view."""
    x = rng.standard_normal((2, 3, 4, 5))
    cols = im2col(x, (1, 1), (1, 1))
    np.testing.assert_array_equal(cols, x.reshape(2, 3, 20))
    assert not np.shares_memory(cols, x), (
        "im2col with a 1×1 kernel and stride 1 returned a view of x: there the reshape makes no copy, "
        "so copy when xp.may_share_memory(cols, x_padded)")


def test_im2col_reads_any_memory_layout(rng):
    base = rng.standard_normal((6, 7, 3, 2))
    x = base.transpose(3, 2, 0, 1)  # (2, 3, 6, 7), not contiguous
    assert np.array_equal(im2col(x, (3, 2), (2, 1)), reference_im2col(np.ascontiguousarray(x), (3, 2), (2, 1))), \
        "im2col must use x.strides (any memory layout), not strides computed from the shape"


# ---- 3. col2im -------------------------------------------------------------------------------


def test_col2im_adds_overlapping_windows():
    coverage = col2im(np.ones((1, 9, 9)), (1, 1, 5, 5), (3, 3), (1, 1))
    assert coverage.shape == (1, 1, 5, 5), f"col2im returns the padded shape (1, 1, 5, 5), got {coverage.shape}"
    want = np.outer([1, 2, 3, 2, 1], [1, 2, 3, 2, 1])
    if np.array_equal(coverage[0, 0], np.ones((5, 5))):
        pytest.fail("col2im must add (+=), not assign: overlapping windows each contribute to the same pixel "
                    "(the centre of a 5×5 image lies in 9 windows of a 3×3 kernel)", pytrace=False)
    assert np.array_equal(coverage[0, 0], want), \
        f"col2im of ones counts the windows covering each pixel: expected\n{want}\ngot\n{coverage[0, 0]}"


@pytest.mark.parametrize("kernel,stride", [((3, 3), (2, 2)), ((2, 3), (3, 1)), ((3, 2), (1, 2))],
                         ids=["k3x3-s2", "k2x3-s3x1", "k3x2-s1x2"])
def test_col2im_with_strides(kernel, stride, rng):
    shape = (2, 2, 8, 7)
    n_cols = out_size(8, kernel[0], stride[0], 0) * out_size(7, kernel[1], stride[1], 0)
    cols = rng.standard_normal((2, 2 * kernel[0] * kernel[1], n_cols))
    got = col2im(cols, shape, kernel, stride)
    assert got.shape == shape, f"col2im returns padded_shape {shape}, got {got.shape}"
    assert np.allclose(got, reference_col2im(cols, shape, kernel, stride)), \
        f"col2im with stride {stride} is wrong: window (r, q) starts at (r·sh, q·sw), so step the slices by the " \
        "stride (i:i + sh·OH:sh, j:j + sw·OW:sw)"


@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 4),
       st.integers(0, 4))
def test_col2im_is_the_adjoint_of_im2col(kh, kw, sh, sw, extra_h, extra_w):
    rng = np.random.default_rng(kh + 3 * kw + 9 * sh + 27 * sw)
    x = rng.standard_normal((2, 2, kh + extra_h, kw + extra_w))
    cols = im2col(x, (kh, kw), (sh, sw))
    c = rng.standard_normal(cols.shape)
    assert np.isclose((cols * c).sum(), (x * col2im(c, x.shape, (kh, kw), (sh, sw))).sum()), \
        "Σ im2col(x)·c must equal Σ x·col2im(c): col2im adds each entry back where im2col read it"


def test_col2im_keeps_dtype():
    out = col2im(np.ones((1, 4, 4), np.float32), (1, 1, 3, 3), (2, 2), (1, 1))
    assert out.dtype == np.float32, f"col2im changed the dtype float32 → {out.dtype}: keep cols' dtype"


# ---- 4. conv2d forward ---------------------------------------------------------------------------


def test_conv2d_on_the_5x5_example():
    got = run_conv(IMAGE_5x5[None, None], EDGE_KERNEL[None, None]).numpy()
    assert got.shape == (1, 1, 3, 3), f"conv2d of a 5×5 image with a 3×3 kernel is 3×3, got {got.shape}"
    assert np.array_equal(got[0, 0], EDGE_OUTPUT), \
        f"conv2d on the lesson's 5×5 example gave\n{got[0, 0]}\nexpected\n{EDGE_OUTPUT}\n" + \
        conv_diagnosis(got, IMAGE_5x5[None, None], EDGE_KERNEL[None, None], None, 1, 0)


def test_conv2d_with_padding_on_the_5x5_example():
    got = run_conv(IMAGE_5x5[None, None], EDGE_KERNEL[None, None], padding=1).numpy()
    assert got.shape == (1, 1, 5, 5), f"padding 1 keeps a 5×5 image 5×5 with a 3×3 kernel, got {got.shape}"
    assert np.array_equal(got[0, 0, 1:4, 1:4], EDGE_OUTPUT), "the unpadded output is the centre of the padded one"
    assert np.array_equal(got[0, 0, :, 0], [-3, -3, -4, -4, -4]), \
        "the left border sees zeros on its left: pad both sides of H and W with zeros"


CONV_CASES = [  # x shape, weight shape, stride, padding
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0),
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1),
    ((2, 3, 7, 6), (5, 3, 3, 2), 2, 1),
    ((1, 2, 9, 8), (3, 2, 2, 3), (3, 2), (1, 0)),
    ((3, 1, 5, 5), (2, 1, 5, 5), 1, 2),
    ((2, 4, 6, 7), (3, 4, 1, 1), 2, 0),
]
CONV_IDS = [f"x{x}-w{w}-s{s}-p{p}".replace(" ", "") for x, w, s, p in CONV_CASES]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CONV_CASES, ids=CONV_IDS)
def test_conv2d_matches_the_definition(x_shape, w_shape, stride, padding, rng):
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_conv(x, w, b, stride, padding)
    check_conv(x, w, None, stride, padding)


@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 2), st.integers(3, 8))
def test_conv2d_matches_the_definition_for_any_size(c, o, kh, kw, sh, sw, pad, size):
    rng = np.random.default_rng(c + 4 * o + 16 * kh + 64 * kw + 256 * size)
    if size + 2 * pad < max(kh, kw):
        return
    x, w, b = rng.standard_normal((2, c, size, size + 1)), rng.standard_normal((o, c, kh, kw)), rng.standard_normal(o)
    check_conv(x, w, b, (sh, sw), pad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_conv2d_keeps_dtype(dtype, rng):
    x = Tensor(rng.standard_normal((2, 3, 6, 6)).astype(dtype))
    w = Tensor(rng.standard_normal((4, 3, 3, 3)).astype(dtype))
    b = Tensor(rng.standard_normal(4).astype(dtype))
    y = run_conv(x, w, b, 1, 1)
    assert y.dtype == dtype, f"conv2d changed the dtype {np.dtype(dtype).name} → {y.dtype}: keep the input's " \
                             "dtype (pad with xp.pad, which keeps it)"


def test_conv2d_accepts_lists_and_arrays():
    y = conv2d(IMAGE_5x5[None, None].tolist(), EDGE_KERNEL[None, None].tolist())
    assert y.dtype == np.float32 and np.array_equal(y.numpy()[0, 0], EDGE_OUTPUT)


def test_conv2d_graph_record(rng):
    x = Tensor(rng.standard_normal((2, 3, 6, 5)), requires_grad=True)
    w = Tensor(rng.standard_normal((4, 3, 3, 2)), requires_grad=True)
    b = Tensor(rng.standard_normal(4), requires_grad=True)
    node = run_conv(x, w, b, 2, 1)._node
    assert node is not None and node.op == "conv2d", "conv2d must record one op named 'conv2d' through record_op"
    assert len(node.inputs) == 3 and node.inputs[0] is x and node.inputs[1] is w and node.inputs[2] is b, \
        "conv2d records inputs (x, weight, bias): the Tensors themselves, in that order"
    assert set(node.saved) == {"cols", "stride", "padding"}, \
        f"conv2d saves exactly cols, stride and padding; it saved {sorted(node.saved)}"
    assert node.saved["stride"] == (2, 2) and node.saved["padding"] == (1, 1), "stride and padding are saved as pairs"
    xp = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    assert np.array_equal(node.saved["cols"], reference_im2col(xp, (3, 2), (2, 2))), \
        "saved['cols'] is the column matrix of the padded input, (N, C·kh·kw, OH·OW)"
    node = run_conv(x, w)._node
    assert len(node.inputs) == 2, "without a bias conv2d records inputs (x, weight)"
    assert conv2d(Tensor(x.numpy()), Tensor(w.numpy()))._node is None, "nothing is recorded for plain data"


def test_conv2d_channel_mismatch_names_both_sizes(rng):
    with pytest.raises(ValueError) as info:
        conv2d(rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 5, 3, 3)))
    assert "3" in str(info.value) and "5" in str(info.value) and "channels" in str(info.value)


def test_conv2d_kernel_larger_than_padded_input_states_the_arithmetic(rng):
    with pytest.raises(ValueError) as info:
        conv2d(rng.standard_normal((1, 1, 3, 3)), rng.standard_normal((1, 1, 5, 5)))
    text = str(info.value)
    assert "(H + 2p - k) // s + 1" in text and "(3 + 2·0 - 5) // 1 + 1 = -1" in text
    assert conv2d(rng.standard_normal((1, 1, 3, 3)), rng.standard_normal((1, 1, 5, 5)), padding=1).shape == \
        (1, 1, 1, 1), "with padding 1 the 5×5 kernel fits a padded 3×3 input exactly once"


@pytest.mark.parametrize("bad", ["3-d input", "bias shape", "zero stride", "negative padding", "float kernel"])
def test_conv2d_rejects_bad_arguments(bad, rng):
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    call = {"3-d input": lambda: conv2d(x[0], w),
            "bias shape": lambda: conv2d(x, w, rng.standard_normal(2)),
            "zero stride": lambda: conv2d(x, w, stride=0),
            "negative padding": lambda: conv2d(x, w, padding=-1),
            "float kernel": lambda: Conv2d(2, 3, 2.5)}[bad]
    with pytest.raises(ValueError):
        call()


# ---- 5. conv2d backward -----------------------------------------------------------------------------


def test_conv2d_backward_on_the_5x5_example():
    dx, dw, _ = conv_grads(IMAGE_5x5[None, None], EDGE_KERNEL[None, None], None, np.ones((1, 1, 3, 3)), 1, 0)
    block_sums = [[IMAGE_5x5[i:i + 3, j:j + 3].sum() for j in range(3)] for i in range(3)]
    assert np.array_equal(dw[0, 0], block_sums), \
        "with an output gradient of ones, dweight[i, j] is the sum of the 3×3 block of the image starting at (i, j)"
    assert np.array_equal(dx[0, 0], np.outer([1, 2, 3, 2, 1], [1, 1, 0, -1, -1])), \
        "dx[r, c] adds the kernel entries that touched pixel (r, c), one per window covering it"


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CONV_CASES, ids=CONV_IDS)
def test_conv2d_gradients_match_the_definition(x_shape, w_shape, stride, padding, rng):
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    g = rng.standard_normal(reference_conv(x, w, b, stride, padding).shape)
    dx, dw, db = conv_grads(x, w, b, g, stride, padding)
    want_dx, want_dw, want_db = reference_conv_grads(x, w, g, stride, padding)
    if not np.allclose(dw, want_dw):
        why = ("the weight gradient must be summed over the batch, Σ_n g[n] @ cols[n]ᵀ, not averaged"
               if np.allclose(dw * x.shape[0], want_dw) else "dweight = Σ_n g[n] @ cols[n]ᵀ, reshaped to (O, C, kh, kw)")
        pytest.fail(f"conv2d's weight gradient is wrong: {why}", pytrace=False)
    assert np.allclose(db, want_db), "conv2d's bias gradient is the output gradient summed over axes (0, 2, 3)"
    assert np.allclose(dx, want_dx), \
        "conv2d's input gradient is wrong: dx = col2im(weight.reshape(O, -1).T @ g) with the forward's stride " \
        "(window (r, q) starts at (r·sh, q·sw)), then the padding cut away"


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CONV_CASES[1:4], ids=CONV_IDS[1:4])
def test_conv2d_gradcheck(x_shape, w_shape, stride, padding, rng):
    x, w, b = (Tensor(rng.standard_normal(s), requires_grad=True) for s in (x_shape, w_shape, (w_shape[0],)))
    assert gradcheck(lambda x, w, b: conv2d(x, w, b, stride, padding), [x, w, b])
    assert gradcheck(lambda x, w: conv2d(x, w, None, stride, padding), [x, w])


def test_conv2d_skips_the_input_gradient_when_not_needed(rng):
    images = Tensor(rng.standard_normal((2, 3, 5, 5)))
    w = Tensor(rng.standard_normal((2, 3, 3, 3)), requires_grad=True)
    run_conv(images, w, None, 1, 1).sum().backward()
    assert images.grad is None and w.grad.shape == (2, 3, 3, 3)


def test_conv2d_skips_the_weight_gradient_of_a_frozen_kernel(rng):
    from tinytorch.core.autograd import BACKWARD_RULES

    x = Tensor(rng.standard_normal((2, 3, 5, 5)), requires_grad=True)
    frozen, b = Tensor(rng.standard_normal((2, 3, 3, 3))), Tensor(np.zeros(2), requires_grad=True)
    out = run_conv(x, frozen, b, 1, 1)
    d_x, d_weight, d_bias = BACKWARD_RULES["conv2d"](np.ones(out.shape), out._node)
    assert d_weight is None, "a weight that requires no gradient gets None (its product is skipped)"
    out.sum().backward()
    assert frozen.grad is None and x.grad.shape == x.shape and b.grad.shape == (2,)
    assert gradcheck(lambda x: conv2d(x, frozen, b, 1, 1), [Tensor(x.data, requires_grad=True)])


def test_conv2d_float32_gradients_stay_float32(rng):
    x, w, b = (Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
               for s in ((2, 3, 6, 6), (4, 3, 3, 3), (4,)))
    run_conv(x, w, b, 1, 1).sum().backward()
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32 and b.grad.dtype == np.float32


# ---- 6. pooling ---------------------------------------------------------------------------------------


def test_max_pool2d_values_and_saved_argmax():
    x = Tensor(POOL_4x4[None, None], requires_grad=True)
    y = max_pool2d(x, 2)
    assert np.array_equal(y.numpy()[0, 0], [[4, 2], [6, 3]]), f"max_pool2d(2) of the lesson's 4×4 gave {y.numpy()[0, 0]}"
    node = y._node
    assert node is not None and node.op == "max_pool2d" and node.inputs[0] is x, \
        "max_pool2d records op 'max_pool2d' with inputs (x,)"
    assert set(node.saved) == {"argmax", "kernel_size", "stride"}, \
        f"max_pool2d saves exactly argmax, kernel_size and stride; it saved {sorted(node.saved)}"
    assert node.saved["kernel_size"] == (2, 2) and node.saved["stride"] == (2, 2), \
        "kernel_size and stride are saved as pairs; stride None means the kernel size"
    argmax = np.asarray(node.saved["argmax"])
    assert argmax.shape == (1, 1, 2, 2) and np.array_equal(argmax[0, 0], [[2, 0], [1, 2]]), \
        f"saved argmax must be (N, C, OH, OW) holding i·kw + j of each window's first maximum; got {argmax.tolist()}"


def test_max_pool2d_routes_the_gradient_to_the_argmax():
    x = Tensor(POOL_4x4[None, None], requires_grad=True)
    max_pool2d(x, 2).backward(POOL_GRAD[None, None])
    dx = x.grad.numpy()[0, 0]
    if np.allclose(dx, np.kron(POOL_GRAD, np.ones((2, 2))) / 4):
        pytest.fail("max-pool's gradient goes only to the argmax of each window, not spread over the window "
                    "(sharing it equally is avg-pool's rule)", pytrace=False)
    every = MAX_POOL_DX.copy()
    every[3, 3] = 4
    if np.array_equal(dx, every):
        pytest.fail("ties: the gradient goes to the first maximum only (as PyTorch), not to every maximum",
                    pytrace=False)
    last = MAX_POOL_DX.copy()
    last[3, 2], last[3, 3] = 0, 4
    if np.array_equal(dx, last):
        pytest.fail("ties: the gradient goes to the first maximum reading row by row (xp.argmax), not the last",
                    pytrace=False)
    assert np.array_equal(dx, MAX_POOL_DX), \
        f"each window's gradient goes to its maximum: expected\n{MAX_POOL_DX}\ngot\n{dx}"


def test_max_pool2d_overlapping_windows_add_up():
    x = Tensor(np.array([[[[0, 0, 0], [0, 5, 0], [0, 0, 0]]]], dtype=np.float64), requires_grad=True)
    y = max_pool2d(x, 2, stride=1)  # the 5 is the maximum of all four windows
    assert np.array_equal(y.numpy(), np.full((1, 1, 2, 2), 5.0))
    y.sum().backward()
    assert x.grad.numpy()[0, 0, 1, 1] == 4, "a pixel that is the maximum of 4 overlapping windows gets all 4 gradients"


@pytest.mark.parametrize("kernel,stride", [(2, None), (3, 2), ((2, 3), (1, 2)), (3, 1)],
                         ids=["k2", "k3-s2", "k2x3-s1x2", "k3-s1"])
def test_max_pool2d_gradcheck(kernel, stride, rng):
    x = Tensor(rng.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) / 7.0, requires_grad=True)  # no ties
    assert gradcheck(lambda t: max_pool2d(t, kernel, stride), [x])


def test_avg_pool2d_values_and_record():
    x = Tensor(POOL_4x4[None, None], requires_grad=True)
    y = avg_pool2d(x, 2)
    assert np.array_equal(y.numpy()[0, 0], [[2.5, 1.0], [3.25, 2.25]]), "avg_pool2d is the mean of each window"
    assert y._node.op == "avg_pool2d" and y._node.inputs[0] is x, "avg_pool2d records op 'avg_pool2d', inputs (x,)"
    assert set(y._node.saved) == {"kernel_size", "stride"}, \
        f"avg_pool2d saves exactly kernel_size and stride; it saved {sorted(y._node.saved)}"


def test_avg_pool2d_shares_the_gradient_equally():
    x = Tensor(POOL_4x4[None, None], requires_grad=True)
    avg_pool2d(x, 2).backward(POOL_GRAD[None, None])
    dx = x.grad.numpy()[0, 0]
    if np.allclose(dx, np.kron(POOL_GRAD, np.ones((2, 2)))):
        pytest.fail("avg-pool's gradient is grad / (kh·kw) for each entry of the window: divide by the window size",
                    pytrace=False)
    assert np.allclose(dx, np.kron(POOL_GRAD, np.ones((2, 2))) / 4), f"avg-pool's gradient: got\n{dx}"


@pytest.mark.parametrize("kernel,stride", [(2, None), (3, 2), ((2, 3), (1, 2))], ids=["k2", "k3-s2", "k2x3-s1x2"])
def test_avg_pool2d_gradcheck(kernel, stride, rng):
    x = Tensor(rng.standard_normal((2, 2, 7, 6)), requires_grad=True)
    assert gradcheck(lambda t: avg_pool2d(t, kernel, stride), [x])


@pytest.mark.parametrize("pool", [max_pool2d, avg_pool2d], ids=["max", "avg"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_pools_keep_dtype_and_odd_sizes(pool, dtype, rng):
    x = Tensor(rng.standard_normal((2, 3, 7, 5)).astype(dtype), requires_grad=True)
    y = pool(x, 2)
    assert y.shape == (2, 3, 3, 2), f"{pool.__name__}(2) on 7×5 floors to 3×2, got {y.shape}"
    assert y.dtype == dtype, f"{pool.__name__} changed the dtype {np.dtype(dtype).name} → {y.dtype}"
    y.sum().backward()
    assert x.grad.dtype == dtype and np.all(x.grad.numpy()[:, :, 6, :] == 0), "the unused last row gets no gradient"


def test_pool_rejects_a_window_larger_than_the_input(rng):
    with pytest.raises(ValueError, match=r"\(H \+ 2p - k\) // s \+ 1"):
        max_pool2d(rng.standard_normal((1, 1, 3, 3)), 4)
    with pytest.raises(ValueError):
        avg_pool2d(rng.standard_normal((3, 3)), 2)


# ---- 7. layers ----------------------------------------------------------------------------------------


def test_conv2d_layer_weight_layout():
    conv = Conv2d(3, 8, (5, 3), seed=0)
    assert conv.weight.shape == (8, 3, 5, 3), \
        f"Conv2d.weight has PyTorch's layout (out_channels, in_channels, kh, kw) = (8, 3, 5, 3); got {conv.weight.shape}"
    assert conv.bias is not None and conv.bias.shape == (8,), "Conv2d.bias has one value per output channel: (8,)"
    assert conv.weight.requires_grad and conv.bias.requires_grad and conv.weight.dtype == np.float32
    assert [name for name, _ in conv.named_parameters()] == ["weight", "bias"]
    assert Conv2d(3, 8, 3, bias=False).bias is None


def test_conv2d_layer_initialisation_scales_by_fan_in():
    conv = Conv2d(16, 32, 3, seed=0)
    bound = 1 / math.sqrt(16 * 3 * 3)
    for name, t in (("weight", conv.weight), ("bias", conv.bias)):
        largest = np.abs(t.numpy()).max()
        assert 0.8 * bound < largest <= bound, \
            f"Conv2d initialises {name} uniformly in ±1/√fan_in with fan_in = in_channels·kh·kw = 144 " \
            f"(bound {bound:.4f}); the largest |{name}| is {largest:.4f}"
    assert abs(conv.weight.numpy().mean()) < 0.01, "uniform and centred on 0"


def test_conv2d_layer_seeds_dtype_and_forward(rng):
    assert np.array_equal(Conv2d(2, 3, 3, seed=4).weight.numpy(), Conv2d(2, 3, 3, rng=4).weight.numpy())
    assert not np.array_equal(Conv2d(2, 3, 3, seed=4).weight.numpy(), Conv2d(2, 3, 3, seed=5).weight.numpy())
    conv = Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 0), dtype=np.float64, seed=1)
    assert conv.weight.dtype == np.float64
    x = rng.standard_normal((2, 2, 7, 6))
    assert np.allclose(conv(Tensor(x)).numpy(),
                       reference_conv(x, conv.weight.numpy(), conv.bias.numpy(), (2, 1), (1, 0)))
    assert repr(conv) == "Conv2d(2, 3, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), bias=True)"


def test_pool_layers():
    x = Tensor(POOL_4x4[None, None])
    assert np.array_equal(MaxPool2d(2)(x).numpy()[0, 0], [[4, 2], [6, 3]])
    assert np.array_equal(AvgPool2d(2)(x).numpy()[0, 0], [[2.5, 1.0], [3.25, 2.25]])
    assert MaxPool2d(3, stride=1)(x).shape == (1, 1, 2, 2) and MaxPool2d(2).parameters() == []
    assert repr(MaxPool2d(2)) == "MaxPool2d(kernel_size=(2, 2), stride=(2, 2))"


def test_flatten_keeps_the_batch_dimension(rng):
    x = Tensor(rng.standard_normal((4, 3, 2, 5)), requires_grad=True)
    y = Flatten()(x)
    assert y.shape == (4, 30), f"Flatten keeps the batch dimension: (N, C, H, W) = (4, 3, 2, 5) → (4, 30); got {y.shape}"
    assert np.array_equal(y.numpy(), x.numpy().reshape(4, 30))
    assert Flatten(start_dim=2)(x).shape == (4, 3, 10), "Flatten joins only the dims start_dim … end_dim"
    assert Flatten(0, 1)(x).shape == (12, 2, 5) and Flatten(1, -2)(x).shape == (4, 6, 5)
    y.sum().backward()
    assert np.array_equal(x.grad.numpy(), np.ones((4, 3, 2, 5)))
    with pytest.raises(ValueError):
        Flatten(2, 1)(x)


def test_parameter_count_against_a_linear_layer():
    conv = Conv2d(3, 16, 3, padding=1)
    assert count_parameters(conv) == 16 * 3 * 3 * 3 + 16 == 448
    assert count_parameters(Linear(3 * 8 * 8, 16 * 8 * 8)) == 192 * 1024 + 1024


def test_a_small_cnn_learns_bars(rng):
    """Vertical against horizontal bars at random places: a conv-pool-linear network learns it in a few steps."""
    from tinytorch.core.activations import ReLU
    from tinytorch.core.losses import CrossEntropyLoss
    from tinytorch.core.optimizers import Adam

    images = np.zeros((64, 1, 8, 8), np.float32)
    labels = np.arange(64) % 2
    where = rng.integers(0, 8, size=(64, 2))
    for k, (label, (a, b)) in enumerate(zip(labels, where)):  # building data, not a kernel
        if label:
            images[k, 0, :, a] = 1.0
        else:
            images[k, 0, b, :] = 1.0
    model = Sequential(Conv2d(1, 4, 3, padding=1, seed=0), ReLU(), MaxPool2d(2), Flatten(), Linear(64, 2, seed=1))
    optimizer, loss_fn = Adam(model.parameters(), lr=0.03), CrossEntropyLoss()
    x, y = Tensor(images), Tensor(labels)
    first = None
    for _ in range(30):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    accuracy = (model(x).numpy().argmax(axis=1) == labels).mean()
    assert loss.item() < 0.3 * first and accuracy == 1.0, f"loss {first:.3f} → {loss.item():.3f}, accuracy {accuracy}"


# ---- issue 20: an empty batch ------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_backward_on_an_empty_batch_gives_zero_gradients(bias):
    conv = Conv2d(3, 4, 3, padding=1, bias=bias, seed=0, dtype=np.float64)
    x = Tensor(np.zeros((0, 3, 5, 5)), requires_grad=True)
    out = conv(x)
    assert out.shape == (0, 4, 5, 5)
    out.sum().backward()
    assert x.grad.shape == (0, 3, 5, 5) and np.array_equal(conv.weight.grad.numpy(), np.zeros((4, 3, 3, 3)))
    if bias:
        assert np.array_equal(conv.bias.grad.numpy(), np.zeros(4))
    for pool in (MaxPool2d(2), AvgPool2d(2)):
        z = Tensor(np.zeros((0, 3, 4, 4)), requires_grad=True)
        pool(z).sum().backward()
        assert z.grad.shape == (0, 3, 4, 4)
