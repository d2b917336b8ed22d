"""Module 15, sections 1-2: quantize_per_tensor, dequantize and quantize_per_channel on hand-computed values.

The tests that name a classic mistake come first (pytest -x stops at the first failure).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinytorch.core.tensor import Tensor
from tinytorch.perf.quantization import (dequantize, qrange, quantize_per_channel, quantize_per_tensor,
                                         storage_dtype)


def test_worked_example():
    q = quantize_per_tensor(np.array([-1.0, -0.1, 0.0, 0.26, 1.5], np.float32), 0.02, 10)
    assert isinstance(q, Tensor) and q.dtype == np.int8, f"expected an int8 Tensor (one byte per value), got {q.dtype}"
    assert q.numpy().tolist() == [-40, 5, 10, 23, 85], f"expected [-40, 5, 10, 23, 85], got {q.numpy().tolist()}"


def test_ties_round_half_to_even():
    got = quantize_per_tensor([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5], 1.0, 0).numpy().tolist()
    assert got == [0, 2, 2, 4, 0, -2, -2], (
        f"round half to EVEN (np.rint), as PyTorch: expected [0, 2, 2, 4, 0, -2, -2], got {got}")


def test_zero_point_is_added_before_rounding():
    got = quantize_per_tensor([0.5, 2.5, -1.5], 1.0, 1).numpy().tolist()
    assert got == [2, 4, 0], (
        f"add the zero point BEFORE rounding: round(2.5 + 1) = 4; expected [2, 4, 0], got {got} "
        "(round(2.5) + 1 = 3 is not what PyTorch computes)")


@pytest.mark.parametrize("dtype,expected", [("int8", [-128, -127, 127, 127]), ("uint8", [0, 0, 255, 255]),
                                            ("int4", [-8, -7, 7, 7]), ("uint4", [0, 0, 15, 15])],
                         ids=["int8", "uint8", "int4", "uint4"])
def test_clamp_to_the_dtype_range(dtype, expected):
    qmin, qmax = qrange(dtype)
    x = [qmin - 1000.0, qmin + 1.0 if qmin < 0 else -5.0, float(qmax), 1e6]
    got = quantize_per_tensor(x, 1.0, 0, dtype)
    assert got.dtype == storage_dtype(dtype), f"{dtype} is stored as {storage_dtype(dtype)}, got {got.dtype}"
    assert got.numpy().tolist() == expected, (
        f"clamp to the {dtype} range [{qmin}, {qmax}]: expected {expected}, got {got.numpy().tolist()}")


def test_inverse_scale_and_fused_multiply_add():
    # PyTorch's per-tensor kernel: x * float32(1/scale) + zero_point rounded ONCE to float32, here
    # 117.5 (x / scale alone would give 117.49999 and round down).
    got = quantize_per_tensor(np.float32([0.273939937]), 0.00214854861, -10).numpy().tolist()
    assert got == [118], f"expected [118] (PyTorch's integer); got {got}: multiply by np.float32(1) / np.float32(scale) " \
                         "and round x·inv_scale + zero_point once to float32 (compute it in float64)"


def test_multiply_add_is_rounded_once():
    # float64: x·inv_scale + zero_point = 53.4999975..., 53.499996 as float32: PyTorch's 53. Rounded to float32
    # after the multiply, x·inv_scale is exactly 80.5, and 80.5 - 27 = 53.5 rounds (to even) to 54.
    x, scale, zero_point = np.float32([3.8310704231262207]), 0.047590937465429306, -27
    got = quantize_per_tensor(x, scale, zero_point).numpy().tolist()
    two_roundings = np.rint(x * (np.float32(1) / np.float32(scale)) + np.float32(zero_point)).astype(int).tolist()
    assert got == [53], (
        f"expected [53] (PyTorch's integer), got {got}: "
        + ("x·inv_scale was rounded to float32 (80.5) before the zero point was added (a second rounding); "
           if got == two_roundings else "")
        + "round x·inv_scale + zero_point ONCE (compute it in float64, then one conversion to float32 before rint)")


def test_float64_input_is_taken_as_float32_first():
    # Each value is halfway between two float32 numbers: rounded to float32 first (as PyTorch, which
    # only quantizes float32) it gives PyTorch's integer; multiplied in float64 as it is, one less or more.
    x = np.array([-21.45000171661377, -34.35000038146973, 12.749999523162842, -29.850001335144043])
    got = quantize_per_tensor(x, 0.3, 3).numpy().tolist()
    assert got == [-68, -111, 46, -97], (
        f"a float64 x is taken as float32 FIRST: expected [-68, -111, 46, -97] (PyTorch's integers for the "
        f"float32 x), got {got} (x.data.astype(np.float32) before converting to float64 for the multiply-add)")


def test_dequantize_subtracts_in_int32():
    got = dequantize(np.array([0, 3, 128, 255], np.uint8), 0.5, 128).numpy()
    assert got.dtype == np.float32, (
        f"dequantize must return float32, got {got.dtype} (convert the int32 difference to float32 BEFORE "
        "multiplying by the scale: NumPy's int32 times float32 is float64)")
    assert got.tolist() == [-64.0, -62.5, 0.0, 63.5], (
        f"expected [-64, -62.5, 0, 63.5], got {got.tolist()} "
        "(subtract the zero point in int32: uint8 wraps around below 0)")
    assert dequantize(np.array([-128, 127], np.int8), 2.0, -1).numpy().tolist() == [-254.0, 256.0]


def test_per_channel_scales_broadcast_along_the_axis():
    square = quantize_per_channel(np.ones((3, 3), np.float32), [1.0, 0.5, 0.25], [0, 0, 1], axis=1).numpy()
    assert square.tolist() == [[1, 2, 5]] * 3, (
        f"scales[c] must broadcast along the channel axis (reshape to (1, C) for axis=1): expected each row "
        f"[1, 2, 5], got {square.tolist()}")
    x = np.ones((2, 3), np.float32)
    q = quantize_per_channel(x, [1.0, 0.5, 0.25], [0, 0, 1], axis=1).numpy()
    assert q.tolist() == [[1, 2, 5], [1, 2, 5]], (
        f"scales[c] must broadcast along the channel axis (reshape to (1, C) for axis=1): expected "
        f"[[1, 2, 5], [1, 2, 5]], got {q.tolist()}")
    q0 = quantize_per_channel(x, [1.0, 0.5], [0, -1], axis=0).numpy()
    assert q0.tolist() == [[1, 1, 1], [1, 1, 1]], q0.tolist()
    back = dequantize(q, [1.0, 0.5, 0.25], [0, 0, 1], axis=1).numpy()
    assert back.tolist() == [[1.0, 1.0, 1.0]] * 2, f"dequantize along axis 1: got {back.tolist()}"
    rows = dequantize(np.ones((2, 2), np.int8), [1.0, 2.0], [0, -1], axis=0).numpy()
    assert rows.tolist() == [[1, 1], [4, 4]], (
        f"dequantize along axis 0: expected [[1, 1], [4, 4]], got {rows.tolist()} (reshape scale and zero_point "
        "to (C, 1) for axis=0 so they broadcast along it: a (C,) array broadcasts along the LAST axis)")
    q3 = quantize_per_channel(np.ones((2, 3, 4), np.float32), [0.5, 0.25, 1.0], [0, 1, -1], axis=-2).numpy()
    assert (q3[:, 0] == 2).all() and (q3[:, 1] == 5).all() and (q3[:, 2] == 0).all(), "axis=-2 is the middle axis"


def test_per_channel_rounds_the_product_first():
    # PyTorch's per-channel kernel rounds x·inv to float32 and then adds the zero point in float32:
    # here that gives 30, a fused multiply-add (the per-tensor kernel's form) gives 29.
    got = quantize_per_channel(np.float32([[27.894709]]), np.float32([0.68875825]), [-11], axis=1).numpy().tolist()
    assert got == [[30]], (f"expected [[30]] (PyTorch's integer), got {got}: the per-channel kernel computes "
                           "x·inv in float32, then + zero point in float32 (two roundings), then rint")
    # x / s rounds to [[10, 29]] here; PyTorch multiplies by the float32 inverse and gets [[11, 30]].
    inverse = quantize_per_channel(np.float32([[19.964939, 48.88528]]), np.float32([1.9014227, 1.6571282]), [0, 0],
                                   axis=1).numpy().tolist()
    assert inverse == [[11, 30]], (
        f"expected [[11, 30]] (PyTorch's integers), got {inverse}: multiply x by inv = np.float32(1) / scales, "
        "never divide by the scales (x / s and x·(1/s) differ in the last bit)")


def test_ties_per_channel_and_clamp():
    q = quantize_per_channel(np.array([[0.5, 2.5], [1000.0, -1000.0]], np.float32), [1.0, 1.0], [1, 0], axis=1)
    assert q.numpy().tolist() == [[2, 2], [127, -128]], q.numpy().tolist()
    u = quantize_per_channel(np.array([[-1.0, 300.0]], np.float32), [1.0, 1.0], [0, 0], axis=1, dtype="uint8")
    assert u.dtype == np.uint8 and u.numpy().tolist() == [[0, 255]], u.numpy().tolist()


def test_input_checks():
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="scale"):
            quantize_per_tensor([1.0], bad, 0)
    with pytest.raises(ValueError, match="zero_point"):
        quantize_per_tensor([1.0], 1.0, 200)
    with pytest.raises(ValueError, match="zero_point"):
        quantize_per_tensor([1.0], 1.0, -1, "uint8")
    with pytest.raises(ValueError, match="floats"):
        quantize_per_tensor(np.array([1, 2], np.int8), 1.0, 0)
    with pytest.raises(ValueError, match="quantized dtype"):
        quantize_per_tensor([1.0], 1.0, 0, "int16")
    with pytest.raises(ValueError, match="channels"):
        quantize_per_channel(np.ones((2, 3), np.float32), [1.0, 1.0], [0, 0], axis=1)
    with pytest.raises(ValueError, match="axis"):
        quantize_per_channel(np.ones((2, 3), np.float32), [1.0, 1.0], [0, 0], axis=2)
    with pytest.raises(ValueError, match="axis="):
        dequantize(np.zeros(3, np.int8), [1.0, 2.0, 3.0], [0, 0, 0])
    assert qrange("int2") == (-2, 1) and qrange("uint8") == (0, 255) and qrange("int6") == (-32, 31)


@given(values=st.lists(st.floats(-50, 50, width=32), min_size=1, max_size=40),
       scale=st.floats(1e-3, 4.0), zero_point=st.integers(-20, 20))
def test_error_inside_the_range_is_at_most_half_a_step(values, scale, zero_point):
    x = np.array(values, np.float32)
    s = float(np.float32(scale))
    inside = (x / s + zero_point > -127.5) & (x / s + zero_point < 126.5)
    q = quantize_per_tensor(x, s, zero_point)
    back = dequantize(q, s, zero_point).numpy()
    assert q.shape == x.shape and back.dtype == np.float32
    assert np.all(np.abs(back - x)[inside] <= s / 2 * (1 + 1e-5) + 1e-6), "inside the range |x - x̂| <= scale/2"
    above, below = x / s + zero_point > 127.5, x / s + zero_point < -128.5
    assert np.all(q.numpy()[above] == 127) and np.all(q.numpy()[below] == -128), "outside the range: clamped to its ends"
    assert np.all((q.numpy() >= -128) & (q.numpy() <= 127))
