"""Module 01: Tensor values, broadcasting, matmul, reductions, views, indexing, dtypes, devices."""
import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from devices import gpu_count, requires_gpu

from tinytorch.core.tensor import GradMode, Tensor, array_module, record_op


# ---- construction and dtype rules ---------------------------------------------

def test_python_data_becomes_float32():
    assert Tensor(3).dtype == np.float32
    assert Tensor([1, 2, 3]).dtype == np.float32
    assert Tensor([[1.5, 2.5]]).numpy().tolist() == [[1.5, 2.5]]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_arrays_keep_their_dtype(dtype):
    t = Tensor(np.array([1.0, 2.0], dtype=dtype))
    assert t.dtype == dtype
    assert (t * 2).dtype == dtype and (t + 1).dtype == dtype and (2 - t).dtype == dtype


def test_integer_arrays_stay_integer_and_cannot_require_grad():
    ids = Tensor(np.array([3, 1, 2], dtype=np.int64))
    assert ids.dtype == np.int64
    with pytest.raises(ValueError, match="int64"):
        Tensor(np.array([1, 2]), requires_grad=True)


def test_dtype_argument_overrides():
    assert Tensor([1, 2], dtype=np.float64).dtype == np.float64
    assert Tensor(np.array([1.5, 2.5]), dtype=np.int32).numpy().tolist() == [1, 2]


def test_mixed_float_dtypes_promote_like_numpy():
    a = Tensor(np.ones(2, dtype=np.float32))
    assert (a + Tensor(np.ones(2, dtype=np.float64))).dtype == np.float64
    assert (a + Tensor(np.ones(2, dtype=np.float16))).dtype == np.float32


def test_properties_and_data_assignment():
    t = Tensor(np.zeros((2, 3, 4)))
    assert (t.shape, t.ndim, t.size, len(t), t.device) == ((2, 3, 4), 3, 24, 2, "cpu")
    t.data = np.ones((5,))
    assert t.shape == (5,) and t.numpy().sum() == 5
    assert Tensor([2.5]).item() == 2.5
    with pytest.raises(ValueError, match="one element"):
        Tensor([1.0, 2.0]).item()


def test_repr_names_values_and_dtype():
    text = repr(Tensor([1.0, 2.0], requires_grad=True))
    assert "1." in text and "float32" in text and "requires_grad=True" in text


# ---- elementwise arithmetic and broadcasting ---------------------------------------

def test_arithmetic_values():
    a = Tensor([[1.0, 2.0], [3.0, 4.0]])
    b = Tensor([[10.0, 20.0], [30.0, 40.0]])
    assert (a + b).numpy().tolist() == [[11, 22], [33, 44]]
    assert (b - a).numpy().tolist() == [[9, 18], [27, 36]]
    assert (a * b).numpy().tolist() == [[10, 40], [90, 160]]
    assert (b / a).numpy().tolist() == [[10, 10], [10, 10]]
    assert (a ** 2).numpy().tolist() == [[1, 4], [9, 16]]
    assert (a ** b * 0 + 1).numpy().tolist() == [[1, 1], [1, 1]]
    assert (-a).numpy().tolist() == [[-1, -2], [-3, -4]]
    assert (1 - a).numpy().tolist() == [[0, -1], [-2, -3]]
    assert (12 / a).numpy().tolist() == [[12, 6], [4, 3]]
    assert (2 ** a).numpy().tolist() == [[2, 4], [8, 16]]


def test_numpy_array_on_the_left_gives_a_tensor():
    out = np.array([1.0, 2.0], dtype=np.float32) + Tensor([10.0, 20.0])
    assert isinstance(out, Tensor) and out.numpy().tolist() == [11, 22]


@pytest.mark.parametrize("left, right, expected", [
    ((2, 3), (3,), (2, 3)),
    ((2, 1), (1, 3), (2, 3)),
    ((4, 1, 5), (3, 1), (4, 3, 5)),
    ((), (2, 2), (2, 2)),
])
def test_broadcasting_that_works(left, right, expected):
    a = np.arange(np.prod(left), dtype=np.float64).reshape(left) + 1
    b = np.arange(np.prod(right), dtype=np.float64).reshape(right) + 1
    out = Tensor(a) * Tensor(b)
    assert out.shape == expected
    np.testing.assert_array_equal(out.numpy(), a * b)


@pytest.mark.parametrize("left, right", [((2, 3), (2,)), ((3, 4), (4, 3)), ((2, 3, 4), (3, 3))])
def test_broadcasting_that_fails_names_both_shapes(left, right):
    with pytest.raises(ValueError) as err:
        Tensor(np.ones(left)) + Tensor(np.ones(right))
    assert str(left) in str(err.value) and str(right) in str(err.value)


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       st.sampled_from(["add", "sub", "mul", "div"]))
def test_broadcasting_matches_numpy(shapes, op):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 2.0, shapes.input_shapes[0])
    b = rng.uniform(0.5, 2.0, shapes.input_shapes[1])
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op]
    ours = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
            "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op](Tensor(a), Tensor(b))
    assert ours.shape == shapes.result_shape
    np.testing.assert_allclose(ours.numpy(), fn(a, b), rtol=1e-12)


# ---- matmul -------------------------------------------------------------------------

def test_matmul_hand_values():
    a = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = Tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert (a @ b).numpy().tolist() == [[4, 5], [10, 11]]
    assert a.matmul(b).numpy().tolist() == [[4, 5], [10, 11]]


@pytest.mark.parametrize("left, right, expected", [
    ((3,), (3,), ()),
    ((3,), (3, 2), (2,)),
    ((2, 3), (3,), (2,)),
    ((5, 2, 3), (3, 4), (5, 2, 4)),
    ((2, 3), (5, 3, 4), (5, 2, 4)),
    ((2, 1, 2, 3), (4, 3, 5), (2, 4, 2, 5)),
    ((4,), (2, 4, 3), (2, 3)),
    ((2, 3, 4), (4,), (2, 3)),
])
def test_matmul_batched_broadcast_and_vectors(left, right, expected):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(left), rng.standard_normal(right)
    out = Tensor(a) @ Tensor(b)
    assert out.shape == expected
    np.testing.assert_allclose(out.numpy(), np.matmul(a, b), rtol=1e-12)


@pytest.mark.parametrize("left, right", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 2, 3), (3, 3, 4))])
def test_matmul_mismatch_names_both_shapes(left, right):
    with pytest.raises(ValueError) as err:
        Tensor(np.ones(left)) @ Tensor(np.ones(right))
    assert str(left) in str(err.value) and str(right) in str(err.value)


def test_matmul_rejects_scalars():
    with pytest.raises(ValueError, match="at least 1 dimension"):
        Tensor(2.0) @ Tensor([1.0])


# ---- reductions -----------------------------------------------------------------------

X = np.arange(24, dtype=np.float64).reshape(2, 3, 4)


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2, (0, 2), (-1, 0)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reductions_match_numpy(name, axis, keepdims):
    out = getattr(Tensor(X), name)(axis=axis, keepdims=keepdims)
    expected = getattr(np, name)(X, axis=axis, keepdims=keepdims)
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out.numpy(), expected)


def test_reduction_hand_values():
    t = Tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    assert t.sum().item() == 21
    assert t.sum(axis=0).numpy().tolist() == [5, 7, 9]
    assert t.mean(axis=1).numpy().tolist() == [3, 4]
    assert t.max(axis=-1, keepdims=True).numpy().tolist() == [[5], [6]]


def test_reduction_bad_axis():
    with pytest.raises(ValueError, match="axis 3"):
        Tensor(X).sum(axis=3)


# ---- elementwise functions ------------------------------------------------------------

def test_exp_log_sqrt_values():
    np.testing.assert_allclose(Tensor([0.0, 1.0, 2.0]).exp().numpy(), np.exp([0, 1, 2]), rtol=1e-6)
    np.testing.assert_allclose(Tensor([1.0, 10.0]).log().numpy(), [0.0, np.log(10)], rtol=1e-6)
    np.testing.assert_allclose(Tensor([4.0, 9.0, 2.0]).sqrt().numpy(), [2, 3, np.sqrt(2)], rtol=1e-6)


# ---- shapes and views ------------------------------------------------------------------

def test_reshape_is_a_view_with_the_same_values():
    t = Tensor(np.arange(6, dtype=np.float32))
    r = t.reshape(2, 3)
    assert r.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert t.reshape((3, -1)).shape == (3, 2)
    assert np.shares_memory(r.data, t.data)
    with pytest.raises(ValueError, match=r"\(6,\)"):
        t.reshape(4, 2)


def test_transpose_and_permute_values():
    t = Tensor(X)
    np.testing.assert_array_equal(t.transpose().numpy(), X.transpose(0, 2, 1))
    np.testing.assert_array_equal(t.transpose(0, -1).numpy(), X.transpose(2, 1, 0))
    np.testing.assert_array_equal(t.permute(1, 2, 0).numpy(), X.transpose(1, 2, 0))
    np.testing.assert_array_equal(t.permute((2, 0, 1)).numpy(), X.transpose(2, 0, 1))
    assert np.shares_memory(t.permute(1, 2, 0).data, t.data)
    with pytest.raises(ValueError, match="permute"):
        t.permute(0, 0, 1)
    with pytest.raises(ValueError, match="at least 2"):
        Tensor([1.0, 2.0]).transpose()


def test_indexing_values():
    t = Tensor(X)
    np.testing.assert_array_equal(t[1].numpy(), X[1])
    np.testing.assert_array_equal(t[:, 1:, ::2].numpy(), X[:, 1:, ::2])
    np.testing.assert_array_equal(t[..., -1].numpy(), X[..., -1])
    np.testing.assert_array_equal(t[None, 0].numpy(), X[None, 0])
    rows = np.array([2, 0, 2])
    np.testing.assert_array_equal(t[0][rows].numpy(), X[0][rows])
    np.testing.assert_array_equal(t[0][Tensor(rows)].numpy(), X[0][rows])
    np.testing.assert_array_equal(t[0][[1, 1]].numpy(), X[0][[1, 1]])
    np.testing.assert_array_equal(t[0, Tensor(rows), 1].numpy(), X[0, rows, 1])
    assert np.shares_memory(t[:, 1].data, t.data)


def test_masked_fill_fills_where_true_and_broadcasts():
    t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = t.masked_fill(np.array([True, False, True]), -9.0)
    assert out.numpy().tolist() == [[-9, 2, -9], [-9, 5, -9]]
    out = t.masked_fill(Tensor(np.array([[0], [1]])), 0.0)
    assert out.numpy().tolist() == [[1, 2, 3], [0, 0, 0]]
    out = t.masked_fill([[True, False, False], [False, False, True]], 7.0)
    assert out.numpy().tolist() == [[7, 2, 3], [4, 5, 7]]
    assert t.numpy().tolist() == [[1, 2, 3], [4, 5, 6]]  # a copy, not in place


def test_masked_fill_shape_error_names_both_shapes():
    with pytest.raises(ValueError) as err:
        Tensor(np.ones((2, 3))).masked_fill(np.ones((3, 2), dtype=bool), 0.0)
    assert "(3, 2)" in str(err.value) and "(2, 3)" in str(err.value)


# ---- devices and the graph record --------------------------------------------------------

def test_cpu_device_and_array_module():
    t = Tensor([1.0])
    assert t.device == "cpu" and array_module(t.data) is np
    assert t.to("cpu") is t and t.cpu() is t


def test_cuda_without_cupy_or_gpu_says_which_is_missing():
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(RuntimeError, match="CuPy, which is not installed"):
            Tensor([1.0], device="cuda")
    elif gpu_count() == 0:
        with pytest.raises(RuntimeError, match="no NVIDIA GPU"):
            Tensor([1.0], device="cuda")
    else:
        assert Tensor([1.0], device="cuda").device == "cuda"


def test_unknown_device():
    with pytest.raises(ValueError, match="Unknown device"):
        Tensor(np.ones(2), device="tpu")


def test_every_op_records_its_node_only_when_needed():
    w = Tensor(np.ones((2, 2)), requires_grad=True)
    x = Tensor(np.ones((2, 2)))
    cases = {
        "add": w + x, "sub": w - 1, "mul": 2 * w, "div": w / x, "pow": w ** 2, "neg": -w,
        "matmul": w @ x, "sum": w.sum(), "mean": w.mean(0), "max": w.max(), "exp": w.exp(),
        "log": w.log(), "sqrt": w.sqrt(), "reshape": w.reshape(4), "permute": w.transpose(),
        "getitem": w[0], "masked_fill": w.masked_fill(np.eye(2, dtype=bool), 0.0),
    }
    for op, out in cases.items():
        assert out.requires_grad and out._node.op == op, op
        assert out._node.inputs[0] is w or out._node.inputs[1] is w, op
    assert (x + x)._node is None and not (x * x).requires_grad
    assert w.sum()._node.saved == {"axis": None, "keepdims": False}
    GradMode.enabled = False
    try:
        assert (w * 3)._node is None and not (w * 3).requires_grad
    finally:
        GradMode.enabled = True


def test_record_op_is_the_single_constructor_of_results():
    a = Tensor([1.0], requires_grad=True)
    out = record_op("custom", np.array([5.0]), (a,), note="kept")
    assert out._node.saved == {"note": "kept"} and out.numpy().tolist() == [5.0]


def test_detach_shares_data_without_graph():
    w = Tensor([1.0, 2.0], requires_grad=True)
    d = (w * 2).detach()
    assert not d.requires_grad and d._node is None and d.numpy().tolist() == [2, 4]


@pytest.mark.gpu
@requires_gpu
def test_mixing_devices_is_refused():
    with pytest.raises(RuntimeError, match="devices"):
        Tensor([1.0]) + Tensor([1.0], device="cuda")


@pytest.mark.gpu
@requires_gpu
def test_same_code_path_on_cupy():
    import cupy

    a = Tensor(cupy.arange(6, dtype=cupy.float32).reshape(2, 3))
    out = (a * 2 + 1).sum(axis=0)
    assert out.device == "cuda" and out.numpy().tolist() == [7, 11, 15]
    assert (a.cpu().numpy() == np.arange(6).reshape(2, 3)).all()
