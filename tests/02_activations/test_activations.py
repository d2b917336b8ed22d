"""Module 02: activation values, stability, dtypes, the graph record, the layer objects."""
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

finite_arrays = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
    elements=st.floats(-50, 50, allow_nan=False, allow_infinity=False),
)


def gelu_reference(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# ---- ReLU ---------------------------------------------------------------------------


def test_relu_values():
    y = relu(Tensor([[-3.0, -0.5, 0.0], [0.25, 2.0, 1e6]]))
    assert np.array_equal(y.numpy(), [[0.0, 0.0, 0.0], [0.25, 2.0, 1e6]])


def test_relu_accepts_lists_and_arrays():
    assert np.array_equal(relu([-1.0, 4.0]).numpy(), [0.0, 4.0])
    assert np.array_equal(relu(np.array([-1.0, 4.0])).numpy(), [0.0, 4.0])


# ---- Sigmoid --------------------------------------------------------------------------


def test_sigmoid_hand_values():
    y = sigmoid(Tensor([0.0, 1.0, -1.0, 2.0], dtype=np.float64)).numpy()
    assert np.allclose(y, [0.5, 1 / (1 + math.exp(-1)), 1 / (1 + math.e), 1 / (1 + math.exp(-2))], rtol=1e-14)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sigmoid_no_overflow_at_1000(dtype):
    x = Tensor(np.array([-1000.0, -100.0, 100.0, 1000.0], dtype=dtype))
    with np.errstate(over="raise", invalid="raise"):
        y = sigmoid(x).numpy()
    assert y.dtype == dtype
    assert y[0] == 0.0 and y[-1] == 1.0 and np.isfinite(y).all()
    assert y[1] < 1e-40 or dtype == np.float16 or y[1] == pytest.approx(math.exp(-100), rel=1e-5)


def test_sigmoid_tiny_values_are_not_rounded_to_zero():
    # exp(-100) ≈ 3.7e-44 is representable in float64; the stable branch keeps it
    y = sigmoid(Tensor(np.array([-100.0, -30.0]))).numpy()
    assert y[0] == pytest.approx(math.exp(-100), rel=1e-12)
    assert y[1] == pytest.approx(1 / (1 + math.exp(30)), rel=1e-12)


@given(finite_arrays)
def test_sigmoid_symmetry_and_range(x):
    y = sigmoid(Tensor(x)).numpy()
    assert ((y >= 0) & (y <= 1)).all()
    assert np.allclose(y + sigmoid(Tensor(-x)).numpy(), 1.0, atol=1e-12)


# ---- Tanh -------------------------------------------------------------------------------


def test_tanh_values_and_saturation():
    x = np.array([-1000.0, -2.0, 0.0, 0.5, 1000.0])
    with np.errstate(over="raise", invalid="raise"):
        y = tanh(Tensor(x)).numpy()
    assert np.allclose(y, [-1.0, math.tanh(-2.0), 0.0, math.tanh(0.5), 1.0], rtol=1e-14)


@given(finite_arrays)
def test_tanh_is_rescaled_sigmoid(x):
    assert np.allclose(tanh(Tensor(x)).numpy(), 2 * sigmoid(Tensor(2 * x)).numpy() - 1, atol=1e-12)


# ---- GELU ---------------------------------------------------------------------------------


def test_gelu_hand_values():
    y = gelu(Tensor([-1.0, 0.0, 1.0, 2.0], dtype=np.float64)).numpy()
    # 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) evaluated by hand (to 10 digits)
    assert np.allclose(y, [-0.1588080094, 0.0, 0.8411919906, 1.9545976940], atol=1e-9)


@given(finite_arrays)
def test_gelu_matches_tanh_formula(x):
    assert np.allclose(gelu(Tensor(x)).numpy(), gelu_reference(x), rtol=1e-12, atol=1e-300)


def test_gelu_close_to_exact_erf_gelu():
    x = np.linspace(-5, 5, 101)
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    diff = np.abs(gelu(Tensor(x)).numpy() - exact)
    assert diff.max() < 5e-4 and diff.max() > 1e-5  # an approximation, and a good one


@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_extremes(dtype):
    y = gelu(Tensor(np.array([-1000.0, -10.0, 10.0, 1000.0], dtype=dtype))).numpy()
    assert y.dtype == dtype and np.isfinite(y).all()
    assert np.allclose(y, [0.0, 0.0, 10.0, 1000.0], atol=1e-3)


# ---- dtypes, shapes, graph record (all elementwise functions) ------------------------------


@pytest.mark.parametrize("fn", ELEMENTWISE)
@pytest.mark.parametrize("dtype", FLOATS)
def test_elementwise_keep_dtype_and_shape(fn, dtype):
    x = np.linspace(-3, 3, 24).reshape(2, 3, 4).astype(dtype)
    y = fn(Tensor(x))
    assert y.dtype == dtype and y.shape == (2, 3, 4)


def test_python_lists_become_float32():
    for fn in ELEMENTWISE:
        assert fn([1.0, -2.0]).dtype == np.float32


@pytest.mark.parametrize("fn,op,saves_out", [(relu, "relu", False), (sigmoid, "sigmoid", True),
                                             (tanh, "tanh", True), (gelu, "gelu", False)])
def test_elementwise_graph_record(fn, op, saves_out):
    x = Tensor([[-1.0, 0.5, 2.0]], requires_grad=True)
    y = fn(x)
    assert y.requires_grad and y._node.op == op
    assert len(y._node.inputs) == 1 and y._node.inputs[0] is x
    if saves_out:
        assert np.array_equal(y._node.saved["out"], y.data)
    else:
        assert y._node.saved == {}
    assert fn(Tensor([1.0]))._node is None  # nothing recorded for plain data


# ---- Softmax -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_stable_for_large_inputs(dtype):
    x = Tensor(np.array([1000.0, 1001.0, 1002.0], dtype=dtype))
    with np.errstate(over="raise", invalid="raise"):
        y = softmax(x).numpy()
    assert y.dtype == dtype
    assert np.allclose(y, SOFTMAX_1000, atol=1e-3 if dtype == np.float16 else 1e-6)
    if dtype != np.float16:  # float16 carries ~3 decimal digits
        assert np.allclose(np.round(y.astype(np.float64), 4), [0.0900, 0.2447, 0.6652])


def test_softmax_hand_values():
    y = softmax(Tensor([[0.0, 0.0], [0.0, math.log(3.0)]], dtype=np.float64)).numpy()
    assert np.allclose(y, [[0.5, 0.5], [0.25, 0.75]], rtol=1e-14)


def test_softmax_extreme_spread_gives_exact_zeros_and_ones():
    y = softmax(Tensor([-1000.0, 0.0, 1000.0])).numpy()
    assert y.tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
def test_softmax_along_any_dim(dim, rng):
    x = rng.standard_normal((2, 3, 4)) * 5
    y = softmax(Tensor(x), dim=dim).numpy()
    expected = np.exp(x) / np.exp(x).sum(axis=dim, keepdims=True)
    assert np.allclose(y, expected, rtol=1e-12)
    assert np.allclose(y.sum(axis=dim), 1.0, rtol=1e-12)


@given(finite_arrays, st.floats(-500, 500))
def test_softmax_invariant_to_a_shift(x, c):
    a = softmax(Tensor(x)).numpy()
    assert np.allclose(a, softmax(Tensor(x + c)).numpy(), atol=1e-9)
    assert np.allclose(a.sum(axis=-1), 1.0)


def test_softmax_default_dim_is_last(rng):
    x = rng.standard_normal((3, 4))
    assert np.array_equal(softmax(Tensor(x)).numpy(), softmax(Tensor(x), dim=-1).numpy())
    assert not np.allclose(softmax(Tensor(x)).numpy(), softmax(Tensor(x), dim=0).numpy())


@pytest.mark.parametrize("fn", [softmax, log_softmax])
def test_softmax_bad_dim_raises(fn):
    x = Tensor(np.zeros((2, 3)))
    assert np.allclose(np.exp(fn(x, dim=0).numpy()) if fn is log_softmax else fn(x, dim=0).numpy(), 0.5)
    for dim in (2, -3):
        with pytest.raises(ValueError, match=f"dim={dim}"):
            fn(x, dim=dim)
    with pytest.raises(ValueError):
        fn(Tensor(np.float32(1.0)))


@pytest.mark.parametrize("fn,op", [(softmax, "softmax"), (log_softmax, "log_softmax")])
def test_softmax_graph_record(fn, op, rng):
    x = Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    y = fn(x, dim=-2)
    node = y._node
    assert node.op == op and node.inputs[0] is x
    assert node.saved["dim"] == 1 and isinstance(node.saved["dim"], int)
    assert np.array_equal(node.saved["out"], y.data)


# ---- LogSoftmax ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_log_softmax_stable(dtype):
    x = Tensor(np.array([1000.0, 1001.0, 1002.0], dtype=dtype))
    y = log_softmax(x).numpy()
    assert y.dtype == dtype
    assert np.allclose(y, np.log(SOFTMAX_1000), atol=1e-2 if dtype == np.float16 else 1e-5)


def test_log_softmax_where_log_of_softmax_fails():
    y = log_softmax(Tensor([0.0, 200.0])).numpy()
    assert y.tolist() == [-200.0, 0.0]
    y = log_softmax(Tensor([[-1000.0, 1000.0]], dtype=np.float64)).numpy()
    assert y.tolist() == [[-2000.0, 0.0]]


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax_matches_log_of_softmax(dim, rng):
    x = rng.standard_normal((4, 6)) * 3
    y = log_softmax(Tensor(x), dim=dim).numpy()
    assert np.allclose(y, np.log(softmax(Tensor(x), dim=dim).numpy()), rtol=1e-12)
    assert np.allclose(np.exp(y).sum(axis=dim), 1.0)
    assert (y <= 0).all()


# ---- layer objects ----------------------------------------------------------------------


@pytest.mark.parametrize("cls,fn", [(ReLU, relu), (Sigmoid, sigmoid), (Tanh, tanh), (GELU, gelu)])
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
