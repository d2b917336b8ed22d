"""Module 15, section 7: integer_matmul and QuantizedLinear (weight-only and dynamic, int8 and packed int4)."""
import numpy as np
import pytest

from tinytorch.core.layers import Linear
from tinytorch.core.tensor import Tensor
from tinytorch.perf.quantization import (MinMaxObserver, QuantizedLinear, integer_matmul, quantize_per_channel,
                                         quantize_per_tensor)


def column_scaled_linear(in_features=4, out_features=4, seed=0):
    """A Linear whose output channels (columns) differ in size by up to 1000x: per-channel scales then differ too."""
    linear = Linear(in_features, out_features, seed=seed)
    sizes = np.logspace(-2, 1, out_features).astype(np.float32)
    linear.weight.data = (np.random.default_rng(seed).uniform(-1, 1, (in_features, out_features)) * sizes).astype(np.float32)
    return linear


def test_per_channel_means_per_output_column():
    linear = column_scaled_linear()  # square, so the wrong axis gives scales of the right shape
    layer = QuantizedLinear.from_float(linear)
    expected = np.abs(linear.weight.numpy()).max(axis=0) / np.float32(127.5)
    assert layer.scale.shape == (4,) and np.allclose(layer.scale.numpy(), expected, rtol=1e-6), (
        f"per output channel = per COLUMN (axis 1) of our (in, out) weight: expected scales {expected}, got "
        f"{layer.scale.numpy()} (PyTorch's weight is (out, in), so its axis 0 is our axis 1)")
    assert layer.qweight.dtype == np.int8 and layer.zero_point.dtype == np.int8 and layer.scale.dtype == np.float32
    assert np.all(np.abs(layer.qweight.numpy().astype(np.int16)).max(axis=0) >= 127), "each column uses the full range"


def test_integer_matmul_accumulates_in_int32():
    qa = np.full((2, 300), 127, np.int8)
    qb = np.full((300, 3), -128, np.int8)
    acc = integer_matmul(qa, 0, qb)
    assert acc.dtype == np.int32 and np.all(acc == 300 * 127 * -128), (
        f"expected int32 sums of {300 * 127 * -128}, got {acc.dtype} {acc.ravel()[:3]} "
        "(int8 accumulation overflows: convert both operands to int32 before the product)")


def test_integer_matmul_folds_the_zero_point_out():
    rng = np.random.default_rng(1)
    qa = rng.integers(-128, 128, (6, 200)).astype(np.int8)
    qb = rng.integers(-128, 128, (200, 5)).astype(np.int8)
    for zero_point in (0, 37, -128):
        exact = (qa.astype(np.float64) - zero_point) @ qb.astype(np.float64)  # float64 holds these integers exactly
        got = integer_matmul(qa, zero_point, qb)
        assert np.array_equal(got, exact), (
            f"zero point {zero_point}: integer_matmul must equal the sum of (qa - zero_point)·qb exactly; largest "
            f"difference {np.abs(got - exact).max()} (work in int32 from the start: qa - zero_point on the int8 "
            "array wraps around; then fold the zero point out: subtract zero_point times the column sums of qb)")
    u = rng.integers(0, 256, (3, 50)).astype(np.uint8)
    assert np.array_equal(integer_matmul(u, 128, qb[:50]), (u.astype(np.float64) - 128) @ qb[:50].astype(np.float64))


def test_weight_only_error_is_bounded_by_half_a_step():
    linear = column_scaled_linear(64, 16, seed=2)
    x = np.random.default_rng(3).standard_normal((10, 64)).astype(np.float32)
    exact = x.astype(np.float64) @ linear.weight.numpy().astype(np.float64) + linear.bias.numpy()
    for bits, per_channel in ((8, True), (8, False), (4, True), (3, True)):
        layer = QuantizedLinear.from_float(linear, bits=bits, per_channel=per_channel)
        w_hat = layer.dequantized_weight().numpy()
        step = layer.scale.numpy()
        w = linear.weight.numpy()
        assert np.all(np.abs(w_hat - w) <= step / 2 + 3e-7 * np.abs(w)), (  # + float32 rounding of ŵ
            f"int{bits}: every weight within half a step of its value")
        bound = step / 2 * np.abs(x).sum(axis=1, keepdims=True) * (1 + 1e-5) + 1e-5  # |y - ŷ| <= s/2 · Σ|x|
        err = np.abs(layer(Tensor(x)).numpy() - exact)
        assert np.all(err <= bound), f"int{bits} per_channel={per_channel}: error {err.max()} above the bound"


def test_dynamic_matches_the_integer_arithmetic_exactly():
    linear = column_scaled_linear(48, 8, seed=4)
    layer = QuantizedLinear.from_float(linear, mode="dynamic")
    x = np.random.default_rng(5).standard_normal((3, 5, 48)).astype(np.float32) * 2 + 0.3
    out = layer(Tensor(x)).numpy()
    observer = MinMaxObserver("int8")
    observer.observe(x)
    x_scale, x_zero = observer.qparams()
    qx = quantize_per_tensor(x.reshape(-1, 48), x_scale, x_zero).numpy()
    acc = (qx.astype(np.float64) - x_zero) @ layer.qweight.numpy().astype(np.float64)   # exact integers
    ref = acc.astype(np.float32) * (np.float32(x_scale) * layer.scale.numpy()) + linear.bias.numpy()
    assert out.shape == (3, 5, 8), f"dynamic forward of x (3, 5, 48): expected (3, 5, 8), got {out.shape}: reshape " \
                                   "the (N, out) rows back to x's leading axes"
    assert out.dtype == np.float32, f"dynamic forward returned {out.dtype}: convert the int32 accumulator to float32 " \
                                    "before multiplying by the scales (int32 times float32 is float64 in NumPy)"
    unfolded = (qx.astype(np.float64) @ layer.qweight.numpy().astype(np.float64)).astype(np.float32) * (
        np.float32(x_scale) * layer.scale.numpy()) + linear.bias.numpy()
    got = out.reshape(-1, 8)
    assert np.array_equal(got, ref), "dynamic: " + (
        "it equals the right output without the bias: add self.bias" if np.allclose(got, ref - linear.bias.numpy())
        else "x's zero point was never folded out: pass x_zero_point to integer_matmul (x is quantized affine)"
        if np.allclose(got, unfolded) else
        "quantize x per tensor (affine int8, its own min and max), integer product with x's zero point folded out, "
        f"then multiply by x_scale·scale and add the bias; largest difference {np.abs(got - ref).max()} (a float "
        "product of the dequantized x and weight differs in the last bits: multiply the integers with integer_matmul)")
    w_hat = layer.dequantized_weight().numpy()
    exact = x.reshape(-1, 48).astype(np.float64) @ linear.weight.numpy() + linear.bias.numpy()
    bound = (x_scale / 2 * np.abs(w_hat).sum(axis=0) + layer.scale.numpy() / 2 * np.abs(x.reshape(-1, 48)).sum(1, keepdims=True))
    assert np.all(np.abs(out.reshape(-1, 8) - exact) <= bound * (1 + 1e-5) + 1e-5), "dynamic error above its bound"


def test_int4_weights_are_packed_two_per_byte():
    linear = column_scaled_linear(6, 5, seed=6)
    layer = QuantizedLinear.from_float(linear, bits=4)
    assert layer.qweight.dtype == np.uint8 and layer.qweight.shape == (6, 3), (
        f"int4: two values per byte, (6, 5) -> (6, 3) uint8; got {layer.qweight.dtype} {layer.qweight.shape}")
    scales = np.abs(linear.weight.numpy()).max(axis=0) / np.float32(7.5)
    q = quantize_per_channel(linear.weight, scales, np.zeros(5, np.int64), axis=1, dtype="int4").numpy()
    assert np.array_equal(layer._weight_integers(), q), "the stored int4 values are the weight's integers"
    assert np.allclose(layer.dequantized_weight().numpy(), (q * scales).astype(np.float32), rtol=1e-6)


def test_groups_and_affine_and_per_tensor():
    linear = column_scaled_linear(8, 3, seed=7)
    grouped = QuantizedLinear.from_float(linear, bits=4, group_size=4)
    assert grouped.scale.shape == (2, 3)
    w = linear.weight.numpy()
    assert np.allclose(grouped.scale.numpy(), np.abs(w.reshape(2, 4, 3)).max(axis=1) / np.float32(7.5), rtol=1e-6)
    rounding = 3e-7 * np.abs(w)  # float32 rounding of ŵ
    assert np.all(np.abs(grouped.dequantized_weight().numpy() - w) <= np.repeat(grouped.scale.numpy(), 4, 0) / 2 + rounding)
    affine = QuantizedLinear.from_float(linear, bits=8, symmetric=False)
    assert np.all(np.abs(affine.dequantized_weight().numpy() - w) <= affine.scale.numpy() / 2 + rounding)
    tensor = QuantizedLinear.from_float(linear, per_channel=False)
    assert tensor.scale.shape == (1,) and np.isclose(tensor.scale.item(), np.abs(w).max() / 127.5)
    with pytest.raises(ValueError, match="dynamic"):
        QuantizedLinear.from_float(linear, mode="dynamic", bits=4)
    with pytest.raises(ValueError, match="group_size"):
        QuantizedLinear.from_float(linear, group_size=3)
    with pytest.raises(ValueError, match="mode"):
        QuantizedLinear.from_float(linear, mode="static")
    with pytest.raises(ValueError, match=r"\(\.\.\., 8\)"):
        tensor(Tensor(np.ones((2, 3), np.float32)))


def test_no_bias_and_gradient_through_weight_only():
    linear = Linear(5, 2, bias=False, seed=8)
    layer = QuantizedLinear.from_float(linear)
    assert layer.bias is None and "bias" not in layer.state_dict()
    x = Tensor(np.ones((1, 5), np.float32), requires_grad=True)
    y = layer(x)
    assert y.requires_grad, ("the weight-only output does not require a gradient though x does: build it with Tensor "
                             "operations (x @ self.dequantized_weight()), not from arrays wrapped in a new Tensor")
    y.sum().backward()
    assert np.allclose(x.grad.numpy(), layer.dequantized_weight().numpy().sum(axis=1)), "dx = Ŵ summed over outputs"
    assert layer.parameters() == [], "a quantized layer has no trainable parameters: its state is buffers"
