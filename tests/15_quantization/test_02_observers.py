"""Module 15, sections 3-5: calculate_qparams, MinMaxObserver, PerChannelMinMaxObserver, PercentileObserver."""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.perf.quantization import (MinMaxObserver, PercentileObserver, PerChannelMinMaxObserver,
                                         calculate_qparams)

F32_EPS = np.finfo(np.float32).eps


def test_affine_scale_comes_from_the_width_of_the_range():
    scale, _ = calculate_qparams(-1.0, 3.0)
    assert scale.dtype == np.float32 and np.isclose(scale, 4 / 255, rtol=1e-6), (
        f"affine int8 scale for [-1, 3]: expected (max - min)/255 = {4 / 255:.6f}, got {scale} "
        "(the scale comes from the width of the range, max - min, not from max alone)")


def test_affine_zero_point_rounds_the_quotient():
    _, zero_point = calculate_qparams(-1.0, 3.0)
    assert zero_point.dtype == np.int64 and zero_point == -64, (
        f"affine int8 zero point for [-1, 3]: expected -128 - round(-1 / scale) = -128 - round(-63.75) = -64, "
        f"got {zero_point} (round the quotient min/scale, then subtract it from qmin)")
    _, z = calculate_qparams(-2.0, 0.55, "uint8")
    assert z == 200, f"uint8 [-2, 0.55]: expected 0 - round(-2 / 0.01) = 200, got {z}"


def test_range_is_widened_to_include_zero():
    s, z = calculate_qparams(0.5, 2.0)
    assert np.isclose(s, 2 / 255, rtol=1e-6) and z == -128, (
        f"[0.5, 2] must be widened to include 0: expected scale 2/255 and zero point -128, got {s}, {z}")
    s, z = calculate_qparams(-3.0, -1.0, "uint8")
    assert np.isclose(s, 3 / 255, rtol=1e-6) and z == 255, f"[-3, -1] widens to [-3, 0]: expected zero point 255, got {z}"


def test_symmetric_scale_and_zero_points():
    s, z = calculate_qparams(-1.0, 3.0, symmetric=True)
    assert np.isclose(s, 3 / 127.5, rtol=1e-6) and z == 0, (
        f"int8 symmetric [-1, 3]: expected scale max|x| / 127.5 = {3 / 127.5:.6f} ((qmax - qmin) / 2, PyTorch's "
        f"choice) and zero point 0, got {s}, {z}")
    s, z = calculate_qparams(-1.0, 3.0, "uint8", symmetric=True)
    assert np.isclose(s, 3 / 127.5, rtol=1e-6) and z == 128, f"uint8 symmetric: expected zero point 128, got {z}"
    s, z = calculate_qparams(-4.0, 1.0, "int4", symmetric=True)
    assert np.isclose(s, 4 / 7.5, rtol=1e-6) and z == 0, f"int4 symmetric [-4, 1]: expected scale 4/7.5, got {s}"


def test_eps_and_arrays():
    s, z = calculate_qparams(0.0, 0.0)
    assert s == F32_EPS and z == -128, f"a range [0, 0] gives scale eps (never 0) and zero point -128, got {s}, {z}"
    s, z = calculate_qparams(np.zeros(3), np.zeros(3), symmetric=True)
    assert np.all(s == F32_EPS) and np.all(z == 0)
    s, z = calculate_qparams([-1.0, 0.0, -0.5], [3.0, 1.0, 0.25], "int4")
    assert s.shape == (3,) and np.allclose(s, [4 / 15, 1 / 15, 0.75 / 15]) and z.tolist() == [-4, -8, 2], (s, z)
    with pytest.raises(ValueError, match="min <= max"):
        calculate_qparams(1.0, -1.0)


def test_minmax_observer_keeps_the_running_range():
    observer = MinMaxObserver("uint8")
    for batch in ([0.5, 2.0], [-1.0, 0.0], [1.0, 3.0], []):
        assert observer.observe(Tensor(batch)) is not None
    assert (observer.min_val, observer.max_val) == (-1.0, 3.0), (
        f"expected the running (min, max) = (-1, 3) over every batch, got ({observer.min_val}, {observer.max_val})")
    scale, zero_point = observer.qparams()
    assert isinstance(scale, float) and isinstance(zero_point, int)
    assert zero_point == 64 and scale == float(np.float32(4) / np.float32(255))
    with pytest.raises(RuntimeError, match="observe"):
        MinMaxObserver().qparams()


def test_per_channel_observer_reduces_every_other_axis():
    w = np.array([[0.1, -2.0, 0.0], [-0.05, 4.0, 1.0]], np.float32)
    observer = PerChannelMinMaxObserver(axis=1, symmetric=True)
    observer.observe(w)
    assert observer.max_val.shape == (3,) and np.array_equal(observer.max_val, w.max(axis=0)), (
        f"per-channel ranges along axis 1: expected max {w.max(axis=0)}, got {observer.max_val} "
        "(reduce over every axis EXCEPT the channel axis)")
    observer.observe(np.array([[0.0, 0.0, -3.0]], np.float32))
    assert np.array_equal(observer.min_val, np.float32([-0.05, -2.0, -3.0])), (
        f"the running min per channel: expected [-0.05, -2, -3], got {observer.min_val}")
    scales, zero_points = observer.qparams()
    assert np.allclose(scales, np.float32([0.1, 4.0, 3.0]) / np.float32(127.5)) and zero_points.tolist() == [0, 0, 0]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    middle = PerChannelMinMaxObserver(axis=-2)
    middle.observe(x)
    assert middle.min_val.tolist() == [0, 4, 8] and middle.max_val.tolist() == [15, 19, 23], (middle.min_val, middle.max_val)
    with pytest.raises(ValueError, match="channels"):
        middle.observe(np.zeros((2, 4, 4), np.float32))


@pytest.mark.parametrize("percentile", [99.0, 99.9])
def test_percentile_observer_clips_outliers(percentile):
    values = np.concatenate([[-80.0], np.arange(1000) / 500 - 1, [100.0]]).astype(np.float32)  # outliers at both ends
    observer = PercentileObserver(percentile, symmetric=True)
    observer.observe(values)
    low, high = np.percentile(values, [100 - percentile, percentile])
    assert np.isclose(observer.min_val, low) and np.isclose(observer.max_val, high), (
        f"expected the range of the percentiles {100 - percentile} and {percentile}, ({low:.4f}, {high:.4f}); got "
        f"({observer.min_val}, {observer.max_val}): the outlier 100 must not set the range")
    scale, zero_point = observer.qparams()
    assert zero_point == 0 and np.isclose(scale, max(-low, high) / 127.5, rtol=1e-6)
    observer.observe(np.array([-5.0, 0.0], np.float32))
    assert observer.min_val < -4, "the running range widens with every batch"
    full = PercentileObserver(100.0)
    full.observe(values)
    assert (full.min_val, full.max_val) == (-80.0, 100.0), "percentile 100 is min-max"
    with pytest.raises(ValueError, match="percentile"):
        PercentileObserver(40.0)


def test_percentile_wins_at_few_bits_on_heavy_tails():
    """The lesson's measurement, as a test: clipping beats min-max at 3 bits on Laplace values, not at 8 on a Gaussian
    with huge outliers kept exact."""
    from tinytorch.perf.quantization import dequantize, quantize_per_tensor

    rng = np.random.default_rng(0)

    def mse(x, observer, dtype):
        observer.observe(x)
        s, z = observer.qparams()
        return np.mean((dequantize(quantize_per_tensor(x, s, z, dtype), s, z).numpy() - x) ** 2)

    laplace = rng.laplace(size=20_000).astype(np.float32)
    assert mse(laplace, PercentileObserver(99.9, "int3"), "int3") < 0.6 * mse(laplace, MinMaxObserver("int3"), "int3")
    spikes = rng.standard_normal(20_000).astype(np.float32)
    spikes[:10] *= 30
    assert mse(spikes, MinMaxObserver("int8"), "int8") < mse(spikes, PercentileObserver(99.9, "int8"), "int8")
