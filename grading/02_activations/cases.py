"""Module 02, graded cases: activation values, stability, dtypes and the graph record on seeded inputs.

Format: grading/reference_values.py. Each function takes the case's seeded generator and
returns {label: value}; the grader compares them with the reference's (expected.npz).
"""
import numpy as np
from reference_values import node_record as record
from reference_values import raised

from tinytorch.core.activations import (GELU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh, gelu, log_softmax, relu,
                                        sigmoid, softmax, tanh)
from tinytorch.core.tensor import Tensor


def _relu(rng):
    x = Tensor(rng.standard_normal((3, 4)) * 5, requires_grad=True)
    y = relu(x)
    return {"y": y, **record(y, x), "layer": ReLU()(Tensor(rng.standard_normal(6).astype(np.float32))),
            "float16": relu(Tensor(rng.standard_normal(5).astype(np.float16)))}


def _sigmoid(rng):
    x = Tensor(np.concatenate([rng.standard_normal(6) * 4, [-1000.0, 1000.0, -40.0]]), requires_grad=True)
    with np.errstate(over="raise", invalid="raise"):
        try:
            y = sigmoid(x)
            overflow = "nothing"
        except FloatingPointError as err:
            y, overflow = None, type(err).__name__
    values = {"overflow": overflow}
    if y is not None:
        values.update({"y": y, **record(y, x)})
    return values


def _sigmoid_dtypes(rng):
    x32 = Tensor(rng.standard_normal(7).astype(np.float32))
    x16 = Tensor(rng.standard_normal(7).astype(np.float16))
    return {"float32": sigmoid(x32), "float16": sigmoid(x16), "layer": Sigmoid()(x32)}


def _tanh(rng):
    x = Tensor(rng.standard_normal((2, 5)) * 2, requires_grad=True)
    y = tanh(x)
    return {"y": y, **record(y, x), "layer": Tanh()(Tensor(rng.standard_normal(4).astype(np.float32)))}


def _gelu(rng):
    x = Tensor(np.concatenate([rng.standard_normal(9) * 3, [-6.0, 0.0, 0.7, 6.0]]), requires_grad=True)
    y = gelu(x)
    return {"y": y, **record(y, x), "layer": GELU()(Tensor(rng.standard_normal(5).astype(np.float32))),
            "repr": repr(GELU())}


def _softmax_dims(rng):
    x = Tensor(rng.standard_normal((3, 4, 5)) * 3, requires_grad=True)
    values = {f"dim{d}": softmax(x, dim=d) for d in (0, 1, -1)}
    y = softmax(x, dim=-2)
    values.update({"dim-2": y, **record(y, x)})
    values["layer_dim0"] = Softmax(dim=0)(x)
    return values


def _softmax_square(rng):
    x = Tensor(rng.standard_normal((4, 4)) * 2)
    return {"dim0": softmax(x, dim=0), "dim1": softmax(x, dim=1)}


def _softmax_large(rng):
    x = Tensor(rng.standard_normal((2, 6)) * 3 + 1000.0)
    before = x.numpy().copy()
    y = softmax(x)
    return {"y": y, "input_unchanged": bool(np.array_equal(x.numpy(), before)),
            "log": log_softmax(x, dim=0)}


def _softmax_float16(rng):
    wide = Tensor(np.zeros((2, 70_001), dtype=np.float16))
    small = Tensor((rng.standard_normal((3, 5)) * 2).astype(np.float16))
    big = softmax(wide)
    return {"wide_first": big.numpy()[:, :3], "wide_dtype": str(big.dtype), "wide_sum": big.numpy().astype(np.float64).sum(axis=1),
            "small": softmax(small), "log_small": log_softmax(small, dim=0)}


def _log_softmax(rng):
    x = Tensor(np.concatenate([rng.standard_normal((2, 4)) * 2, [[0.0, -200.0, -150.0, 3.0]]]).astype(np.float32),
               requires_grad=True)
    y = log_softmax(x)
    return {"y": y, **record(y, x), "dim0": log_softmax(x, dim=0), "layer": LogSoftmax(dim=0)(x),
            "repr": repr(LogSoftmax(dim=1))}


def _errors(rng):
    ints = Tensor(rng.integers(0, 5, (2, 3)))
    floats = Tensor(rng.standard_normal((2, 3)))
    # the checks are given code: the case also needs the student's values, so a stub cannot pass it
    return {"softmax_dim0": softmax(floats, dim=0), "log_softmax_dim0": log_softmax(floats, dim=0),
            "softmax_int": raised(softmax, ints), "log_softmax_int": raised(log_softmax, ints),
            "softmax_dim": raised(softmax, floats, dim=2), "log_softmax_dim": raised(log_softmax, floats, dim=-3),
            "softmax_0d": raised(softmax, Tensor(1.5))}


CASES = {
    "relu": (_relu, "relu values, dtype and graph record (op, input x, saves nothing)"),
    "sigmoid": (_sigmoid, "sigmoid values with ±1000 (no overflow) and its record (saves out)"),
    "sigmoid-dtypes": (_sigmoid_dtypes, "sigmoid keeps float32 and float16", {"rtol": 1e-3, "atol": 1e-3}),
    "tanh": (_tanh, "tanh values and its record (saves out)"),
    "gelu": (_gelu, "gelu (tanh approximation) values and record"),
    "softmax-dims": (_softmax_dims, "softmax along dims 0, 1, -1, -2 of a (3, 4, 5) tensor; saved dim non-negative"),
    "softmax-square": (_softmax_square, "softmax of a square matrix along each dim"),
    "softmax-large": (_softmax_large, "softmax of logits near 1000 is finite and leaves its input unchanged"),
    "softmax-float16": (_softmax_float16, "float16 softmax over 70,001 classes sums to 1 and stays float16",
                        {"rtol": 2e-3, "atol": 1e-6}),
    "log-softmax": (_log_softmax, "log_softmax finite where a probability underflows; record saves its own out"),
    "errors": (_errors, "softmax along dim 0; integer input raises TypeError, a bad dim or a 0-d input ValueError"),
}
