"""Module 15, graded cases: quantize/dequantize (ties, clamps, dtypes), qparams and observers,
int4 packing, the integer product, QuantizedLinear/Embedding and quantize_model.

Integers are compared exactly; inputs include exact ties (x/scale = k + 0.5), odd zero
points, values past the clamp and many random float64 values (the float32 rounding
rules change a few integers there). Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.layers import Linear, Module, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.perf.quantization import (MinMaxObserver, PercentileObserver, PerChannelMinMaxObserver, QuantizedEmbedding,
                                         QuantizedLinear, calculate_qparams, dequantize, integer_matmul, pack_int4,
                                         quantize_model, quantize_per_channel, quantize_per_tensor, unpack_int4)
from tinytorch.text.embeddings import Embedding


def _ties_and_clamps(rng):
    scale = 0.25  # a power of two: x / scale is exact, so the ties are exact
    halves = (rng.integers(-6, 6, 12) + 0.5) * scale
    beyond = np.array([-40.0, -32.1, -31.9, 31.9, 40.0])  # past -128·0.25 and 127·0.25
    x = Tensor(np.concatenate([halves, beyond]).astype(np.float32))
    return {"zero_point_0": quantize_per_tensor(x, scale, 0), "zero_point_3": quantize_per_tensor(x, scale, 3),
            "uint8_zero_point_131": quantize_per_tensor(x, scale, 131, "uint8"),
            "int4": quantize_per_tensor(x, scale, 0, "int4"),
            "bad_scale": raised(quantize_per_tensor, x, 0.0, 0),
            "bad_zero_point": raised(quantize_per_tensor, x, 0.1, 200),
            "one_rounding": _near_half_after_zero_point(rng)}


def _near_half_after_zero_point(rng):
    """x·inv_scale a hair from k + 0.5 (about 40..120), brought near 0 by the zero point: rounded to float32
    before the zero point is added, the hair is lost and the tie goes to even; rounded once, it is kept."""
    scale = float(rng.uniform(0.01, 0.1))
    zero_point = -int(rng.integers(60, 100))
    inv_scale = np.float32(1) / np.float32(scale)
    near = ((rng.integers(-zero_point - 20, -zero_point + 20, 200) + 0.5) / np.float64(inv_scale)).astype(np.float32)
    return quantize_per_tensor(near, scale, zero_point)


def _float64_input(rng):
    x = Tensor(rng.standard_normal(20_000) * 3)  # float64: rounded to float32 first, then one fused rounding
    scale = float(rng.uniform(0.01, 0.05))
    # 0.3125 ± 1e-8 is 0.3125 in float32, a tie (0.5) once scaled by 8 and shifted by -2; in float64 it is not
    near_ties = Tensor(np.array([0.3125 + 1e-8, 0.3125 - 1e-8, 0.1875 + 1e-8, -0.0625 - 1e-8]))
    return {"q": quantize_per_tensor(x, scale, 7), "dtype": str(quantize_per_tensor(x, scale, 7).dtype),
            "near_ties": quantize_per_tensor(near_ties, 0.125, -2)}


def _dequantize(rng):
    q8 = Tensor(rng.integers(0, 256, (3, 4)).astype(np.uint8))
    per_tensor = dequantize(q8, 0.05, 128)
    q = Tensor(rng.integers(-128, 128, (3, 5)).astype(np.int8))
    along_rows = dequantize(q, np.array([0.1, 0.02, 0.3], np.float32), np.array([1, -2, 0]), axis=0)
    along_columns = dequantize(q, rng.uniform(0.01, 0.1, 5), rng.integers(-5, 5, 5), axis=-1)
    return {"uint8": per_tensor, "dtype": str(per_tensor.dtype), "rows": along_rows, "columns": along_columns,
            "wrong_count": raised(dequantize, q, np.ones(5), np.zeros(5), axis=0)}


def _qparams(rng):
    mins = np.array([0.5, -2.3, -1.0, -0.01, -7.5], np.float32)
    maxs = np.array([3.0, 1.7, -0.2, 0.02, 7.5], np.float32)
    affine = calculate_qparams(mins, maxs)
    unsigned = calculate_qparams(mins, maxs, "uint8")
    symmetric = calculate_qparams(mins, maxs, symmetric=True)
    symmetric_u = calculate_qparams(mins, maxs, "uint8", symmetric=True)
    int4 = calculate_qparams(mins, maxs, "int4")
    return {"affine_scale": affine[0], "affine_zero": affine[1], "uint8_scale": unsigned[0], "uint8_zero": unsigned[1],
            "sym_scale": symmetric[0], "sym_zero": symmetric[1], "sym_uint8_zero": symmetric_u[1],
            "int4_scale": int4[0], "int4_zero": int4[1], "reversed": raised(calculate_qparams, 1.0, 0.0)}


def _observers(rng):
    observer = MinMaxObserver("uint8")
    for shift in (0.3, -0.1, 0.8):
        observer.observe(Tensor((rng.random(10) + shift).astype(np.float32)))
    channels = PerChannelMinMaxObserver(axis=1, symmetric=True)
    batch = rng.standard_normal((4, 3, 5)).astype(np.float32)
    channels.observe(Tensor(batch))
    channels.observe(Tensor(batch * 1.5))
    percentile = PercentileObserver(95.0)
    percentile.observe(Tensor(rng.standard_normal(200).astype(np.float32)))
    scales, zeros = channels.qparams()
    return {"minmax": list(observer.qparams()), "channel_scales": scales, "channel_zeros": zeros,
            "percentile": list(percentile.qparams()), "empty": raised(MinMaxObserver().qparams)}


def _per_channel(rng):
    x = Tensor((rng.standard_normal((6, 4)) * 2).astype(np.float32))
    scales = rng.uniform(0.005, 0.05, 4).astype(np.float32)
    zeros = rng.integers(-3, 4, 4)
    rows = rng.uniform(0.01, 0.03, 6).astype(np.float32)
    many = Tensor((rng.standard_normal((3, 4000)) * 0.7).astype(np.float32))
    many_scales = rng.uniform(0.003, 0.009, 3).astype(np.float32)
    return {"columns": quantize_per_channel(x, scales, zeros, axis=1),
            "rows": quantize_per_channel(x, rows, np.zeros(6, np.int64), axis=0, dtype="uint8"),
            "many": quantize_per_channel(many, many_scales, np.zeros(3, np.int64), axis=0),
            "wrong_count": raised(quantize_per_channel, x, scales, zeros, axis=0)}


def _int4(rng):
    values = rng.integers(-8, 8, (3, 7)).astype(np.int8)
    packed = pack_int4(values)
    unsigned = rng.integers(0, 16, 6).astype(np.uint8)
    return {"packed": packed, "unpacked": unpack_int4(packed, 7), "unsigned": unpack_int4(pack_int4(unsigned), 6, signed=False),
            "out_of_range": raised(pack_int4, np.array([9, -9]))}


def _integer_matmul(rng):
    qa = rng.integers(-128, 128, (4, 40)).astype(np.int8)
    qa[0, :] = -100  # with zero point 90, qa - zp is -190: outside int8
    qb = rng.integers(-128, 128, (40, 3)).astype(np.int8)
    big = np.full((2, 30), 120, np.int8)
    return {"acc": integer_matmul(qa, 90, qb), "dtype": str(integer_matmul(qa, 90, qb).dtype),
            "big": integer_matmul(big, 0, np.full((30, 2), 100, np.int8))}


def _quantized_linear(rng):
    linear = Linear(6, 4, rng=rng)
    x = Tensor(rng.standard_normal((2, 3, 6)).astype(np.float32))
    values = {}
    for label, options in {"w8": {}, "w8_tensor": {"per_channel": False}, "w4": {"bits": 4},
                           "w4_groups": {"bits": 4, "group_size": 3}, "w8_affine": {"symmetric": False},
                           "dynamic": {"mode": "dynamic"}}.items():
        layer = QuantizedLinear.from_float(linear, **options)
        values[f"{label}_out"] = layer(x)
        values[f"{label}_weight"] = layer.dequantized_weight()
        values[f"{label}_scale"] = layer.scale
    return values


def _quantized_linear_more(rng):
    """int4 per tensor, the weight-only graph (a gradient reaches x), the dynamic output's dtype."""
    linear = Linear(6, 4, rng=rng)
    x = Tensor(rng.standard_normal((3, 6)).astype(np.float32), requires_grad=True)
    weight_only = QuantizedLinear.from_float(linear)
    weight_only(x).sum().backward()
    four = QuantizedLinear.from_float(linear, bits=4, per_channel=False)
    dynamic = QuantizedLinear.from_float(linear, mode="dynamic")(Tensor(x.numpy()))
    return {"x_grad": x.grad, "w4_tensor_out": four(Tensor(x.numpy())), "w4_tensor_scale": four.scale,
            "dynamic_dtype": str(dynamic.dtype)}


def _quantized_embedding(rng):
    table = Embedding(7, 5, rng=rng)
    ids = rng.integers(0, 7, (2, 3))
    eight, four = QuantizedEmbedding.from_float(table), QuantizedEmbedding.from_float(table, bits=4)
    return {"int8": eight(ids), "int4": four(ids), "int4_q": four.qweight, "scales": eight.scale}


class Model(Module):
    def __init__(self, rng):
        super().__init__()
        self.embed = Embedding(5, 4, rng=rng)
        self.blocks = [Sequential(Linear(4, 4, rng=rng)), Linear(4, 3, rng=rng)]


def _quantize_model(rng):
    model = Model(rng)
    quantized = quantize_model(model, embedding_bits=4)
    root_embedding = quantize_model(Embedding(4, 3, rng=rng))
    root_linear = quantize_model(Linear(3, 2, rng=rng), mode="dynamic")
    grouped = quantize_model(Sequential(Linear(4, 6, rng=rng)), bits=4, group_size=2)[0]
    return {"types": [type(m).__name__ for _, m in quantized.named_modules()],
            "original_types": [type(m).__name__ for _, m in model.named_modules()],
            "root_embedding": type(root_embedding).__name__, "root_linear": type(root_linear).__name__,
            "out": quantized.blocks[1](quantized.blocks[0](quantized.embed(np.array([[1, 4, 0]])))),
            "not_a_module": raised(quantize_model, [Linear(2, 2)]),
            "grouped_scale_shape": list(grouped.scale.shape)}


CASES = {
    "ties-and-clamps": (_ties_and_clamps, "quantize_per_tensor: ties round half to even, zero point inside the one rounding, clamps"),
    "float64-input": (_float64_input, "quantize_per_tensor of 20,000 float64 values: rounded to float32 first"),
    "dequantize": (_dequantize, "dequantize: uint8 below the zero point, per-channel rows and columns, float32"),
    "qparams": (_qparams, "calculate_qparams for ranges without 0, affine/symmetric, int8/uint8/int4"),
    "observers": (_observers, "running MinMax, per-channel (axis 1 of a 3-D x) and percentile observers"),
    "per-channel": (_per_channel, "quantize_per_channel along axes 1 and 0, multiplying by the float32 inverse"),
    "int4": (_int4, "pack_int4 low nibble first with masks; unpack with sign extension"),
    "integer-matmul": (_integer_matmul, "integer_matmul accumulates in int32 and folds the zero point out"),
    "quantized-linear": (_quantized_linear, "QuantizedLinear from a (6, 4) Linear: int8/int4, per channel/tensor/group, dynamic",
                         {"rtol": 1e-5, "atol": 1e-6}),
    "quantized-linear-more": (_quantized_linear_more, "QuantizedLinear: int4 per tensor, a gradient through the "
                              "weight-only forward, the dynamic output's dtype", {"rtol": 1e-5, "atol": 1e-6}),
    "quantized-embedding": (_quantized_embedding, "QuantizedEmbedding int8 and int4: lookups and packed rows"),
    "quantize-model": (_quantize_model, "quantize_model: a deep copy with every Linear and Embedding replaced; roots too"),
}
