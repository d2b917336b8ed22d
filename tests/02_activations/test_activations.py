"""Module 02: activation values, stability, dtypes, the graph record, the layer objects.

Every assertion that a plausible mistake can break says what the mistake is: the first
failing test is what a student sees (and what `tito release check` matches against the
mistakes catalogue, modules/02_activations/mistakes.toml).
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tinytorch.core.activations import (GELU, Activation, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh,
                                        gelu, log_softmax, relu, sigmoid, softmax, tanh)
from tinytorch.core.tensor import Tensor

FLOATS = [np.float16, np.float32, np.float64]
ELEMENTWISE = [relu, sigmoid, tanh, gelu]
SOFTMAX_1000 = [0.09003057317038046, 0.24472847105479764, 0.6652409557748219]
LN_70000 = math.log(70_000)  # 11.156: the loss and -log-probability of 70,000 equal logits

finite_arrays = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
    elements=st.floats(-50, 50, allow_nan=False, allow_infinity=False),
)


# ---- helpers: run a function and say why it failed ------------------------------------------


def without_overflow(fn, x, hint, **kwargs):
    """fn(x) with NumPy's overflow and invalid-value warnings turned into a failure that explains them."""
    with np.errstate(over="raise", invalid="raise"):
        try:
            return fn(x, **kwargs)
        except FloatingPointError as err:
            pytest.fail(f"{fn.__name__}({x.numpy().tolist()}) in {x.dtype} raised '{err}': {hint}", pytrace=False)


def check_dtype(name, x, y):
    assert y.dtype == x.dtype, f"{name} changed the dtype {x.dtype} → {y.dtype}: keep the input's dtype"


def check_record(y, op, x, saved):
    """The node of y: op name, inputs (x,), and exactly the saved field names in `saved` (name -> meaning)."""
    node = y._node
    assert node is not None, f"{op} recorded no node for an input with requires_grad: return it through record_op"
    assert node.op == op, f"recorded op {node.op!r}, expected {op!r}: module 05 finds the backward rule by this name"
    assert len(node.inputs) == 1 and node.inputs[0] is x, f"{op} must record inputs (x,): the input Tensor itself"
    if not saved:
        assert node.saved == {}, (f"{op} saves nothing (module 05's rule needs only the input), "
                                  f"but it saved {sorted(node.saved)}")
    else:
        wanted = ", ".join(f"{k} ({v})" for k, v in saved.items())
        assert set(node.saved) == set(saved), f"{op} must save exactly {wanted}; it saved {sorted(node.saved)}"
    return node


def call_softmax(fn, x, dim=-1):
    """fn(x, dim=dim) as an array, where a broadcasting ValueError from NumPy becomes a failure that names the cause.

    x: an array, or a Tensor (used as it is, so that a test can look at it afterwards)."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    try:
        return fn(x, dim=dim).numpy()
    except ValueError as err:
        pytest.fail(f"{fn.__name__}(shape {x.shape}, dim={dim}) raised ValueError '{err}': take the max and the "
                    "sum along dim with keepdims=True, so that they broadcast back against x", pytrace=False)


def softmax_diagnosis(y, x, dim):
    """Why softmax(x, dim) = y is wrong, in words (the first likely cause that fits)."""
    dim = dim % x.ndim
    if not np.allclose(y.sum(axis=dim), 1.0, atol=1e-6):
        for other in range(x.ndim):
            if other != dim and np.allclose(y.sum(axis=other), 1.0, atol=1e-6):
                return (f"it sums to 1 along axis {other}, not along dim={dim}: "
                        "take the max and the sum along dim (axis=d), not a fixed axis")
        return f"it does not sum to 1 along dim={dim}: divide by the sum of the exponentials along dim"
    return ("it sums to 1 along dim but the values are wrong: shift each slice by its own max "
            "(xp.max(..., axis=d, keepdims=True)), then exp, then divide by the sum along d")


def check_softmax(x, dim, expected, rtol=1e-12, atol=0.0):
    y = call_softmax(softmax, x, dim)
    assert np.allclose(y, expected, rtol=rtol, atol=atol), \
        f"softmax(shape {x.shape}, dim={dim}) is wrong: {softmax_diagnosis(y, x, dim)}"


def reference_softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def gelu_reference(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_diagnosis(got, x):
    """Which known wrong GELU `got` is, or which constants to check."""
    x = np.asarray(x, dtype=np.float64)
    exact = x * 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x.ravel()]).reshape(x.shape))
    known = {
        "this is the exact (erf) GELU x·Φ(x); TinyTorch uses the tanh approximation": exact,
        "this is the sigmoid approximation x·σ(1.702x); TinyTorch uses the tanh approximation":
            x / (1 + np.exp(-1.702 * x)),
        "this uses √(2π) where the formula has √(2/π): check the constants":
            0.5 * x * (1 + np.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x**3))),
    }
    for text, values in known.items():
        if np.allclose(got, values, rtol=1e-6, atol=1e-9):
            return text
    return "check the constants √(2/π) ≈ 0.79788 and 0.044715 in 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))"


# ---- ReLU ---------------------------------------------------------------------------


def test_relu_values():
    y = relu(Tensor([[-3.0, -0.5, 0.0], [0.25, 2.0, 1e6]]))
    assert np.array_equal(y.numpy(), [[0.0, 0.0, 0.0], [0.25, 2.0, 1e6]]), f"relu must be max(0, x); got {y.numpy()}"


def test_relu_accepts_lists_and_arrays():
    assert np.array_equal(relu([-1.0, 4.0]).numpy(), [0.0, 4.0])
    assert np.array_equal(relu(np.array([-1.0, 4.0])).numpy(), [0.0, 4.0])


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_relu_keeps_dtype(dtype):
    x = Tensor(np.array([-1.0, 2.0], dtype=dtype))
    check_dtype("relu", x, relu(x))


def test_relu_graph_record():
    x = Tensor([[-1.0, 0.5, 2.0]], requires_grad=True)
    check_record(relu(x), "relu", x, {})


# ---- Sigmoid --------------------------------------------------------------------------


def test_sigmoid_hand_values():
    y = sigmoid(Tensor([0.0, 1.0, -1.0, 2.0], dtype=np.float64)).numpy()
    expected = [0.5, 1 / (1 + math.exp(-1)), 1 / (1 + math.e), 1 / (1 + math.exp(-2))]
    assert np.allclose(y, expected, rtol=1e-14), f"sigmoid(0, 1, -1, 2) = {y}, expected {expected}"


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_sigmoid_no_overflow_at_1000(dtype):
    x = Tensor(np.array([-1000.0, -100.0, 100.0, 1000.0], dtype=dtype))
    y = without_overflow(sigmoid, x, "never exponentiate a positive number: compute from e = exp(-|x|)")
    check_dtype("sigmoid", x, y)
    y = y.numpy()
    assert y[0] == 0.0 and y[-1] == 1.0 and np.isfinite(y).all(), f"sigmoid(±1000) must be 0 and 1, got {y}"
    assert y[1] < 1e-40 or dtype == np.float16 or y[1] == pytest.approx(math.exp(-100), rel=1e-5)


def test_sigmoid_tiny_values_are_not_rounded_to_zero():
    # exp(-100) ≈ 3.7e-44 is representable in float64; the stable branch keeps it
    y = sigmoid(Tensor(np.array([-100.0, -30.0]))).numpy()
    assert y[0] == pytest.approx(math.exp(-100), rel=1e-12), "for x < 0 use e / (1 + e) with e = exp(-|x|)"
    assert y[1] == pytest.approx(1 / (1 + math.exp(30)), rel=1e-12)


@given(finite_arrays)
def test_sigmoid_symmetry_and_range(x):
    y = sigmoid(Tensor(x)).numpy()
    assert ((y >= 0) & (y <= 1)).all()
    assert np.allclose(y + sigmoid(Tensor(-x)).numpy(), 1.0, atol=1e-12), "σ(-x) must equal 1 - σ(x)"


def test_sigmoid_graph_record():
    x = Tensor([[-1.0, 0.5, 2.0]], requires_grad=True)
    y = sigmoid(x)
    node = check_record(y, "sigmoid", x, {"out": "the result array"})
    assert np.array_equal(node.saved["out"], y.data), \
        "sigmoid must save its output: saved['out'] is the result array it returns, not the input"


# ---- Tanh -------------------------------------------------------------------------------


def test_tanh_values_and_saturation():
    x = Tensor(np.array([-1000.0, -2.0, 0.0, 0.5, 1000.0]))
    y = without_overflow(tanh, x, "use xp.tanh, which saturates without computing e^1000").numpy()
    assert np.allclose(y, [-1.0, math.tanh(-2.0), 0.0, math.tanh(0.5), 1.0], rtol=1e-14), f"tanh values: {y}"


@given(finite_arrays)
def test_tanh_is_rescaled_sigmoid(x):
    assert np.allclose(tanh(Tensor(x)).numpy(), 2 * sigmoid(Tensor(2 * x)).numpy() - 1, atol=1e-12)


def test_tanh_graph_record():
    x = Tensor([[-1.0, 0.5, 2.0]], requires_grad=True)
    y = tanh(x)
    node = check_record(y, "tanh", x, {"out": "the result array"})
    assert np.array_equal(node.saved["out"], y.data), "tanh must save its output: saved['out'] is the result array"


# ---- GELU ---------------------------------------------------------------------------------


def test_gelu_hand_values():
    x = [-1.0, 0.0, 1.0, 2.0]
    y = gelu(Tensor(x, dtype=np.float64)).numpy()
    # 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) evaluated by hand (to 10 digits)
    assert np.allclose(y, [-0.1588080094, 0.0, 0.8411919906, 1.9545976940], atol=1e-9), \
        f"gelu({x}) = {y}: {gelu_diagnosis(y, x)}"


@given(finite_arrays)
def test_gelu_matches_tanh_formula(x):
    y = gelu(Tensor(x)).numpy()
    assert np.allclose(y, gelu_reference(x), rtol=1e-12, atol=1e-300), gelu_diagnosis(y, x)


def test_gelu_close_to_exact_erf_gelu():
    x = np.linspace(-5, 5, 101)
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    diff = np.abs(gelu(Tensor(x)).numpy() - exact)
    assert diff.max() < 5e-4 and diff.max() > 1e-5, "an approximation of the exact GELU, and a good one"


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_gelu_extremes(dtype):
    x = Tensor(np.array([-1000.0, -10.0, 10.0, 1000.0], dtype=dtype))
    y = gelu(x)
    check_dtype("gelu", x, y)
    y = y.numpy()
    assert np.isfinite(y).all() and np.allclose(y, [0.0, 0.0, 10.0, 1000.0], atol=1e-3), \
        f"gelu(±10, ±1000) in {np.dtype(dtype).name} = {y}: x³ may overflow to inf, tanh(±inf) = ±1 is still right"


def test_gelu_graph_record():
    x = Tensor([[-1.0, 0.5, 2.0]], requires_grad=True)
    check_record(gelu(x), "gelu", x, {})


# ---- dtypes and shapes (all elementwise functions) ------------------------------------------


@pytest.mark.parametrize("fn", ELEMENTWISE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_elementwise_keep_dtype_and_shape(fn, dtype):
    x = Tensor(np.linspace(-3, 3, 24).reshape(2, 3, 4).astype(dtype))
    y = fn(x)
    check_dtype(fn.__name__, x, y)
    assert y.shape == (2, 3, 4), f"{fn.__name__} changed the shape (2, 3, 4) → {y.shape}"


def test_python_lists_become_float32():
    for fn in ELEMENTWISE:
        assert fn([1.0, -2.0]).dtype == np.float32, f"{fn.__name__} of a list must be float32 (as Tensor([...]))"


@pytest.mark.parametrize("fn", ELEMENTWISE, ids=lambda f: f.__name__)
def test_nothing_recorded_for_plain_data(fn):
    assert fn(Tensor([1.0]))._node is None


# ---- Softmax -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_softmax_stable_for_large_inputs(dtype):
    x = Tensor(np.array([1000.0, 1001.0, 1002.0], dtype=dtype))
    y = without_overflow(softmax, x, "subtract the max along dim before exponentiating (e^1000 is inf)")
    check_dtype("softmax", x, y)
    y = y.numpy()
    assert np.allclose(y, SOFTMAX_1000, atol=1e-3 if dtype == np.float16 else 1e-6), f"softmax([1000, 1001, 1002]) = {y}"
    if dtype != np.float16:  # float16 carries ~3 decimal digits
        assert np.allclose(np.round(y.astype(np.float64), 4), [0.0900, 0.2447, 0.6652])


def test_softmax_hand_values():
    x = np.array([[0.0, 0.0], [0.0, math.log(3.0)]])
    check_softmax(x, -1, [[0.5, 0.5], [0.25, 0.75]])


def test_softmax_each_row_shifted_by_its_own_max():
    # a square matrix: a max without keepdims still broadcasts, column by column, silently wrong
    x = np.array([[0.0, 1.0, 2.0], [10.0, 10.0, 10.0], [5.0, 0.0, 0.0]])
    check_softmax(x, -1, [SOFTMAX_1000, [1 / 3] * 3, reference_softmax(x[2], 0)])
    check_softmax(x, 0, reference_softmax(x, 0))


@pytest.mark.parametrize("fn", [softmax, log_softmax], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_softmax_does_not_change_its_input(fn, dtype):
    values = np.array([[1.0, 3.0, 2.0], [0.5, -1.0, 4.0]], dtype=dtype)
    x = Tensor(values.copy())
    call_softmax(fn, x)
    assert np.array_equal(x.numpy(), values), \
        f"{fn.__name__} changed its input in place ({values.tolist()} became {x.numpy().tolist()}): work on a new array"


def test_softmax_extreme_spread_gives_exact_zeros_and_ones():
    y = without_overflow(softmax, Tensor([-1000.0, 0.0, 1000.0]), "subtract the max before exponentiating")
    assert y.numpy().tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
def test_softmax_along_any_dim(dim, rng):
    x = rng.standard_normal((2, 3, 4)) * 5
    check_softmax(x, dim, np.exp(x) / np.exp(x).sum(axis=dim, keepdims=True))


@given(finite_arrays, st.floats(-500, 500))
def test_softmax_invariant_to_a_shift(x, c):
    a = softmax(Tensor(x)).numpy()
    assert np.allclose(a, softmax(Tensor(x + c)).numpy(), atol=1e-9), "softmax(x + c) must equal softmax(x)"
    assert np.allclose(a.sum(axis=-1), 1.0)


def test_softmax_default_dim_is_last(rng):
    x = rng.standard_normal((3, 4))
    assert np.array_equal(softmax(Tensor(x)).numpy(), softmax(Tensor(x), dim=-1).numpy())
    assert not np.allclose(softmax(Tensor(x)).numpy(), softmax(Tensor(x), dim=0).numpy())


@pytest.mark.parametrize("fn", [softmax, log_softmax], ids=lambda f: f.__name__)
def test_softmax_bad_dim_raises(fn):
    x = Tensor(np.zeros((2, 3)))
    assert np.allclose(np.exp(fn(x, dim=0).numpy()) if fn is log_softmax else fn(x, dim=0).numpy(), 0.5)
    for dim in (2, -3):
        with pytest.raises(ValueError, match=f"dim={dim}"):
            fn(x, dim=dim)
    with pytest.raises(ValueError):
        fn(Tensor(np.float32(1.0)))


@pytest.mark.parametrize("fn", [softmax, log_softmax], ids=lambda f: f.__name__)
def test_softmax_of_integers_raises_type_error(fn):
    assert fn(Tensor(np.array([1.0, 2.0]))).dtype == np.float64
    with pytest.raises(TypeError, match="int64"):
        fn(Tensor(np.array([1, 2, 3])))


@pytest.mark.parametrize("fn,op", [(softmax, "softmax"), (log_softmax, "log_softmax")], ids=["softmax", "log_softmax"])
def test_softmax_graph_record(fn, op, rng):
    x = Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    y = fn(x, dim=-2)
    node = check_record(y, op, x, {"dim": "non-negative int", "out": "the result array"})
    assert node.saved["dim"] == 1 and isinstance(node.saved["dim"], int), \
        (f"{op} must save dim as the non-negative int d = _normalize_dim(dim, ...): dim=-2 on a 3-d tensor "
         f"is 1, got {node.saved['dim']!r}")
    assert node.saved["out"] is y.data or np.array_equal(node.saved["out"], y.data), \
        f"{op} must save out = the result array it returns (in the input's dtype)"
    assert node.saved["out"].dtype == x.dtype, f"{op} saved out in {node.saved['out'].dtype}: keep the input's dtype"


# ---- float16 over more than 65,504 classes (the largest float16 is 65,504) -------------------------


@pytest.mark.parametrize("fn", [softmax, log_softmax], ids=lambda f: f.__name__)
def test_float16_input_comes_back_float16(fn):
    x = Tensor(np.array([[0.5, -1.0, 2.0]], dtype=np.float16))
    check_dtype(fn.__name__, x, fn(x))


def test_float16_softmax_over_70000_classes_sums_to_1():
    y = softmax(Tensor(np.zeros((2, 70_000), dtype=np.float16)))
    assert y.dtype == np.float16, f"softmax changed the dtype float16 → {y.dtype}: keep the input's dtype"
    total = y.numpy().astype(np.float64).sum(axis=-1)
    assert np.allclose(total, 1.0, atol=1e-2), (
        f"float16 softmax over 70,000 equal logits sums to {total}: the float16 sum of 70,000 ones is inf "
        "(float16 stops at 65,504); accumulate in float32 and return float16")
    assert np.allclose(y.numpy().astype(np.float64), 1 / 70_000, rtol=1e-2)


def test_float16_log_softmax_over_70000_classes_is_minus_ln_70000():
    y = log_softmax(Tensor(np.zeros(70_000, dtype=np.float16)))
    assert y.dtype == np.float16, f"log_softmax changed the dtype float16 → {y.dtype}: keep the input's dtype"
    assert np.allclose(y.numpy().astype(np.float64), -LN_70000, atol=1e-2), (
        f"float16 log_softmax over 70,000 equal logits gives {y.numpy()[:3]}..., expected -ln 70000 = -11.16: "
        "accumulate in float32 and return float16")


def test_float16_softmax_random_logits_over_many_classes(rng):
    x = (rng.standard_normal((3, 80_000)) * 3).astype(np.float16)
    expected = reference_softmax(x.astype(np.float64), -1)
    y = softmax(Tensor(x)).numpy().astype(np.float64)
    assert np.allclose(y, expected, rtol=2e-2, atol=1e-7), "accumulate in float32 and return float16"
    ls = log_softmax(Tensor(x)).numpy().astype(np.float64)
    assert np.allclose(ls, np.log(expected), atol=2e-2), "accumulate in float32 and return float16"


# ---- LogSoftmax ---------------------------------------------------------------------------


def test_log_softmax_where_log_of_softmax_fails():
    y = log_softmax(Tensor([0.0, 200.0])).numpy()
    assert y.tolist() == [-200.0, 0.0], (
        f"log_softmax([0, 200]) = {y.tolist()}, expected [-200, 0]: log(softmax(x)) underflows to -inf; "
        "compute (x - m) - log(sum(exp(x - m)))")
    y = log_softmax(Tensor([[-1000.0, 1000.0]], dtype=np.float64)).numpy()
    assert y.tolist() == [[-2000.0, 0.0]], f"log_softmax([-1000, 1000]) = {y.tolist()}, expected [-2000, 0]"


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_log_softmax_stable(dtype):
    x = Tensor(np.array([1000.0, 1001.0, 1002.0], dtype=dtype))
    y = without_overflow(log_softmax, x, "subtract the max along dim before exponentiating (e^1000 is inf)")
    check_dtype("log_softmax", x, y)
    assert np.allclose(y.numpy(), np.log(SOFTMAX_1000), atol=1e-2 if dtype == np.float16 else 1e-5)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax_matches_log_of_softmax(dim, rng):
    x = rng.standard_normal((4, 6)) * 3
    y = call_softmax(log_softmax, x, dim)
    assert np.allclose(y, np.log(reference_softmax(x, dim)), rtol=1e-12), \
        f"log_softmax(shape {x.shape}, dim={dim}) is wrong: {softmax_diagnosis(np.exp(y), x, dim)}"
    assert (y <= 0).all()


# ---- layer objects ----------------------------------------------------------------------


@pytest.mark.parametrize("cls,fn", [(ReLU, relu), (Sigmoid, sigmoid), (Tanh, tanh), (GELU, gelu)],
                         ids=["ReLU", "Sigmoid", "Tanh", "GELU"])
def test_layer_objects_call_their_function(cls, fn):
    x = Tensor(np.linspace(-4, 4, 9))
    layer = cls()
    assert isinstance(layer, Activation)
    assert np.array_equal(layer(x).numpy(), fn(x).numpy())
    assert np.array_equal(layer.forward(x).numpy(), fn(x).numpy())


def test_softmax_layers_take_dim(rng):
    x = rng.standard_normal((3, 5))
    assert np.allclose(Softmax()(Tensor(x)).numpy().sum(axis=1), 1.0)
    assert np.allclose(Softmax(dim=0)(Tensor(x)).numpy().sum(axis=0), 1.0)
    assert np.allclose(LogSoftmax(dim=0)(Tensor(x)).numpy(), log_softmax(Tensor(x), dim=0).numpy())
    assert np.allclose(np.exp(LogSoftmax()(Tensor(x)).numpy()).sum(axis=-1), 1.0)


def test_layer_objects_have_no_parameters_and_a_mode():
    for layer in (ReLU(), Sigmoid(), Tanh(), GELU(), Softmax(), LogSoftmax(dim=0)):
        assert layer(Tensor([[0.0, 0.0]])).shape == (1, 2)
        assert layer.parameters() == [] and list(layer.named_parameters()) == []
        assert layer.training
        assert layer.eval() is layer and not layer.training
        assert layer.train() is layer and layer.training
    assert repr(Softmax(dim=1)) == "Softmax(dim=1)" and repr(ReLU()) == "ReLU()"
