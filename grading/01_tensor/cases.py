"""Module 01, graded cases: Tensor values on seeded inputs the visible tests never use.

Each case runs on the student's package in the sandbox (`tito.grading.cases`); the grader compares
what it produced with the reference's values, recorded by `python grading/record_expected.py`.
"""
import numpy as np
from reference_values import FLOAT16_TOLERANCE

from tinytorch.core.tensor import Tensor, broadcast_shape


def _arithmetic(rng):
    a, b = Tensor(rng.standard_normal((3, 1, 5)).astype(np.float32)), Tensor(rng.standard_normal((4, 5)).astype(np.float32))
    return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / (b * b + 1.0), "neg": -a, "pow": (a * a) ** 1.5}


def _reflected(rng):
    w = Tensor(rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32))
    return {"rsub": 1.5 - w, "rdiv": 3.0 / w, "rpow": 2.0 ** w, "radd": 0.25 + w, "rmul": -2.0 * w,
            "array_left": rng.standard_normal((2, 3)).astype(np.float32) - w}


def _matmul(rng):
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 6))
    v, m = rng.standard_normal(4), rng.standard_normal((4, 3))
    return {"batched": Tensor(a) @ Tensor(b), "vector_matrix": Tensor(v) @ Tensor(m),
            "matrix_vector": Tensor(m.T.copy()) @ Tensor(v), "dot": Tensor(v) @ Tensor(v),
            "method": Tensor(m.T.copy()).matmul(Tensor(m))}


def _reductions(rng):
    x = Tensor(rng.standard_normal((3, 4, 5)).astype(np.float32))
    return {"sum_0_2": x.sum(axis=(0, 2)), "mean_last_keep": x.mean(axis=-1, keepdims=True),
            "max_1": x.max(axis=1), "max_all": x.max(), "sum_negative_keep": x.sum(axis=(-1, -3), keepdims=True),
            "mean_all": x.mean(), "sum_all": x.sum()}


def _functions(rng):
    x = Tensor(rng.uniform(0.1, 3.0, (4, 3)))
    return {"exp": x.exp(), "log": x.log(), "sqrt": x.sqrt()}


def _views(rng):
    x = Tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    return {"reshape": x.reshape(4, 6), "reshape_tuple": x.reshape((3, 8)), "transpose_0_2": x.transpose(0, 2),
            "transpose_default": x.transpose(), "permute": x.permute(2, 0, 1), "permute_negative": x.permute(-1, -3, -2)}


def _indexing(rng):
    x = Tensor(rng.standard_normal((5, 4)).astype(np.float32))
    return {"rows": x[np.array([4, 0, 2, 2])], "slice": x[1:4, ::2], "int": x[3], "negative": x[-1, -2],
            "pairs": x[np.array([0, 3]), np.array([1, 2])], "list": x[[1, 1, 0]],
            "tensor_index": x[Tensor(np.array([2, 0]))]}


def _masked_fill(rng):
    x = Tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    mask = rng.random((3, 1)) > 0.5
    return {"array_mask": x.masked_fill(mask, -7.5), "list_mask": x.masked_fill(mask.tolist(), 2.0),
            "full_mask": x.masked_fill(rng.random((2, 3, 4)) > 0.3, 0.0)}


def _float16(rng):
    a = Tensor(rng.standard_normal((3, 4)).astype(np.float16))
    b = Tensor(rng.standard_normal((4, 2)).astype(np.float16))
    return {"matmul": a @ b, "sum": a.sum(axis=0), "affine": a * 0.5 + 1.0, "mean": a.mean(axis=1)}


def _integers(rng):
    ids = Tensor(rng.integers(0, 10, (3, 4)))
    return {"dtype_kept": ids, "sum": ids.sum(axis=1), "max": ids.max(axis=0)}


def _recorded_ops(rng):
    w = Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    y = (1.0 - w) * w.sum()
    node = y._node
    return {"ops": [node.op] + [i._node.op if i._node is not None else "leaf" for i in node.inputs],
            "sub_inputs": [float(t.numpy().sum()) for t in node.inputs[0]._node.inputs]}


def _error(function) -> tuple[str, str]:
    """(the exception's type name, its message), or ("no error", "") when `function` raised nothing."""
    try:
        function()
    except Exception as error:  # the error is the value this case checks
        return type(error).__name__, str(error)
    return "no error", ""


def _errors(rng):
    a, b = Tensor(rng.standard_normal((3, 4))), Tensor(rng.standard_normal((5, 4)))
    broadcast = _error(lambda: a + b)
    power = _error(lambda: Tensor(rng.integers(1, 5, 3)) ** -1)
    matmul = _error(lambda: Tensor(rng.standard_normal((2, 3))) @ Tensor(rng.standard_normal((4, 2))))
    batch = _error(lambda: Tensor(rng.standard_normal((2, 3, 4))) @ Tensor(rng.standard_normal((5, 4, 2))))
    return {"broadcast_error": broadcast[0], "broadcast_names_shapes": "(3, 4)" in broadcast[1] and "(5, 4)" in broadcast[1],
            "int_power_error": power[0], "int_power_says_broadcast": "broadcast" in power[1],
            "matmul_error": matmul[0], "matmul_names_shapes": "(2, 3)" in matmul[1] and "(4, 2)" in matmul[1],
            "none_in_data": _error(lambda: Tensor([1.0, None]))[0],
            "permute_out_of_range": _error(lambda: Tensor(rng.standard_normal((2, 3))).permute(2, 1))[0],
            "mask_larger_than_tensor": _error(lambda: Tensor(rng.standard_normal((2, 3))).masked_fill(
                np.ones((2, 2, 3), dtype=bool), 0.0))[0],
            "empty_broadcast_shape": (Tensor(np.zeros((0, 3))) + Tensor(rng.standard_normal((1, 3)))).shape,
            "broadcast_shape_empty": broadcast_shape((0, 3), (2, 1, 3)),
            "matmul_batch_names_shapes": "(2, 3, 4)" in batch[1] and "(5, 4, 2)" in batch[1],
            "unknown_device": _error(lambda: Tensor([1.0, 2.0], device="tpu"))[0]}


def _python_data(rng):
    values = rng.standard_normal(3).round(2).tolist()
    inner = Tensor(rng.standard_normal(4).astype(np.float32))
    x = Tensor(rng.standard_normal((2, 6)).astype(np.float32))
    return {"float_list": Tensor(values), "int_list": Tensor([1, 2, 3]), "nested_list": Tensor([values, values]),
            "tensor_of_tensor": Tensor(inner), "exp_float32": x.exp(),
            "reshape_is_a_view": np.shares_memory(x.reshape(3, 4).data, x.data)}


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, Tensor)):
        return f"{type(value).__name__} {value.dtype} {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"


def _recorded_graph(rng):
    """What each op records for module 05: its name, which inputs in which order, what it saved."""
    x = Tensor(rng.standard_normal((2, 3)).astype(np.float32), requires_grad=True)
    other = Tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    results = {"neg": -x, "mean": x.mean(axis=-1), "sum": x.sum(axis=(1, 0)), "max": x.max(axis=0),
               "exp": x.exp(), "sqrt": (x * x + 1.0).sqrt(), "transpose": x.transpose(), "getitem": x[[1, 0, 1]],
               "masked_fill": x.masked_fill([[True, False, True]], 0.0), "matmul": x @ other}
    found = {}
    for name, result in results.items():
        node = result._node
        if node is None:
            found[name] = ["not recorded"]
            continue
        inputs = [0 if t is x else 1 if t is other else 2 for t in node.inputs]
        found[name] = [node.op, f"inputs {inputs}", *(f"{k}: {_describe(v)}" for k, v in sorted(node.saved.items()))]
        if "out" in node.saved:
            found[f"{name}_saved_out"] = np.asarray(node.saved["out"])
    return found


CASES = {
    "arithmetic-broadcast": (_arithmetic, "+, -, *, /, unary - and ** on (3,1,5) and (4,5) float32 tensors"),
    "reflected-operators": (_reflected, "a Python number or NumPy array on the left (1.5 - w, 3 / w, 2 ** w)"),
    "matmul-shapes": (_matmul, "matmul: batch dims broadcast (2,1,3,4)@(5,4,6), and 1-D operands"),
    "reductions": (_reductions, "sum/mean/max over an axis, an axis tuple, negative axes, keepdims"),
    "exp-log-sqrt": (_functions, "exp, log, sqrt of a float64 tensor"),
    "views": (_views, "reshape, transpose and permute values"),
    "indexing": (_indexing, "indexing with slices, ints, integer arrays, lists and Tensors"),
    "masked-fill": (_masked_fill, "masked_fill with a broadcast mask (array and list)"),
    "float16": (_float16, "float16 tensors stay float16 through matmul, sum, mean and scalars", FLOAT16_TOLERANCE),
    "integer-tensors": (_integers, "integer tensors keep their integer dtype through sum and max"),
    "recorded-ops": (_recorded_ops, "the graph (1 - w) * w.sum() records mul(sub(1, w), sum(w))"),
    "errors": (_errors, "errors: broadcasting and matmul name both shapes, each error says its own cause, "
                        "None in the data, permute's dims, a mask larger than the tensor, an empty dimension, "
                        "an unknown device"),
    "python-data": (_python_data, "Python lists become float32, a Tensor of a Tensor, exp keeps float32, "
                                  "reshape returns a view"),
    "recorded-graph": (_recorded_graph, "what neg, mean, sum, max, exp, sqrt, transpose, indexing, masked_fill "
                                        "and matmul record: op, inputs in order, what they save"),
}

