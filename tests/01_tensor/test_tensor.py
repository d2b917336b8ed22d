"""Module 01: Tensor values, broadcasting, matmul, reductions, views, indexing, dtypes, devices,
and the record each operation leaves for module 05 (op name, input order, saved fields, versions).

The tests of each section come in this order: first the contract a later module relies on
(dtype kept, op name, input order, saved fields), each failing with a message that names
the cause, then the values. A student's mistake is then reported by the test that explains it.
"""
import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from devices import gpu_count, requires_gpu

from tinytorch.core.tensor import (GradMode, Node, Tensor, array_module, as_tensor, broadcast_shape,
                                   record_op, to_array, to_host)

FLOATS = pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=["float16", "float32", "float64"])


def shape_id(value):
    """Readable parametrize ids: (2, 3) -> '(2,3)'."""
    return str(value).replace(" ", "") if isinstance(value, tuple) else None


# ---- construction and dtype rules ---------------------------------------------

def test_python_data_becomes_float32():
    for data in (3, 2.5, [1, 2, 3], [[1.5, 2.5]], [True, False]):
        dtype = Tensor(data).dtype
        assert dtype == np.float32, f"Tensor({data!r}) has dtype {dtype}: Python numbers and lists must become float32"
    assert Tensor([[1.5, 2.5]]).numpy().tolist() == [[1.5, 2.5]]


@pytest.mark.parametrize("data", [[1.0, None], None, [[1.0], [None]], ["1.0", "2.0"], np.array([1.0, None], dtype=object)],
                         ids=["[1.0,None]", "None", "[[1.0],[None]]", "strings", "object-array"])
def test_non_numbers_raise_type_error(data):
    try:
        out = Tensor(data)
    except TypeError:
        return
    except ValueError as err:
        pytest.fail(f"Tensor({data!r}) raised ValueError ({err}); values that are not numbers must raise TypeError")
    pytest.fail(f"Tensor({data!r}) gave {out.numpy()!r}: values that are not numbers must raise TypeError "
                "(check the dtype kind after np.asarray, before casting to float32)")


def test_operand_none_raises_type_error():
    t = Tensor([1.0, 2.0])
    for name, call in [("t + None", lambda: t + None), ("None + t", lambda: None + t), ("t * None", lambda: t * None)]:
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"{name} must raise TypeError, not give NaN")


@FLOATS
def test_float_arrays_keep_their_dtype(dtype):
    t = Tensor(np.array([1.0, 2.0], dtype=dtype))
    assert t.dtype == dtype, f"a {np.dtype(dtype)} array became {t.dtype}: float arrays keep their dtype"
    for name, out in [("t * 2", t * 2), ("t + 1", t + 1), ("2 - t", 2 - t), ("-t", -t), ("t / t", t / t)]:
        assert out.dtype == dtype, f"{name} changed the dtype {np.dtype(dtype)} → {out.dtype}: keep the input's dtype"


def test_arrays_that_fit_are_not_copied():
    ids = np.array([3, 1, 2])
    assert to_array(ids) is ids
    floats = np.ones(3, dtype=np.float32)
    assert to_array(floats, dtype=np.float32) is floats, "to_array copied an array that already had the dtype"
    assert np.shares_memory(Tensor(floats).data, floats)


def test_integer_arrays_stay_integer_and_cannot_require_grad():
    ids = Tensor(np.array([3, 1, 2], dtype=np.int64))
    assert ids.dtype == np.int64
    with pytest.raises(ValueError, match="int64"):
        Tensor(np.array([1, 2]), requires_grad=True)


def test_dtype_argument_overrides():
    assert Tensor([1, 2], dtype=np.float64).dtype == np.float64
    assert Tensor(np.array([1.5, 2.5]), dtype=np.int32).numpy().tolist() == [1, 2]
    assert to_array(Tensor([4.0, 5.0])).tolist() == [4.0, 5.0]


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


def test_as_tensor_and_to_host():
    t = Tensor([1.0, 2.0])
    assert as_tensor(t) is t
    assert as_tensor([[1, 2]]).dtype == np.float32 and as_tensor(np.arange(3)).dtype == np.arange(3).dtype
    host = to_host(t)
    assert isinstance(host, np.ndarray) and host.tolist() == [1.0, 2.0]
    assert to_host(np.float32(3.0)).shape == () and to_host([1, 2]).tolist() == [1, 2]


# ---- broadcasting ---------------------------------------------------------------------

@pytest.mark.parametrize("left, right, expected", [
    ((2, 3), (3,), (2, 3)),
    ((2, 1), (1, 3), (2, 3)),
    ((4, 1, 5), (3, 1), (4, 3, 5)),
    ((), (2, 2), (2, 2)),
    ((5,), (), (5,)),
    ((0,), (1,), (0,)),
    ((1, 0), (3, 1), (3, 0)),
], ids=shape_id)
def test_broadcast_shape_values(left, right, expected):
    for a, b in [(left, right), (right, left)]:
        got = broadcast_shape(a, b)
        assert got == expected, (f"broadcast_shape({a}, {b}) gave {got}, expected {expected}: each position takes "
                                 "the size that is not 1 (a 1 stretches, so 0 against 1 is 0)")


@pytest.mark.parametrize("left, right", [((2, 3), (2,)), ((3, 4), (4, 3)), ((2, 3, 4), (3, 3)), ((0,), (2,))], ids=shape_id)
def test_broadcast_shape_error_names_both_shapes(left, right):
    with pytest.raises(ValueError) as err:
        broadcast_shape(left, right)
    assert str(left) in str(err.value) and str(right) in str(err.value), (
        f"the broadcasting error must name both shapes {left} and {right}; it says: {err.value}")


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4))
def test_broadcast_shape_matches_numpy(shapes):
    assert broadcast_shape(*shapes.input_shapes) == shapes.result_shape


# ---- elementwise arithmetic ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["1-w", "2/w", "2**w", "3+w", "3*w", "array+w"])
def test_reflected_ops_record_the_left_operand_first(name):
    w = Tensor([1.0, 2.0], requires_grad=True)
    out = {"1-w": lambda: 1 - w, "2/w": lambda: 2 / w, "2**w": lambda: 2 ** w, "3+w": lambda: 3 + w,
           "3*w": lambda: 3 * w, "array+w": lambda: np.ones(2, dtype=np.float32) + w}[name]()
    left, right = out._node.inputs
    assert right is w and left is not w, (
        f"{name} recorded its inputs as (w, other): a reflected op records (other, self), the left operand first")


def test_ops_record_their_name_and_inputs():
    w = Tensor([1.0, 2.0], requires_grad=True)
    x = Tensor([3.0, 4.0])
    for name, out, op in [("w + x", w + x, "add"), ("w - x", w - x, "sub"), ("w * x", w * x, "mul"),
                          ("w / x", w / x, "div"), ("w ** x", w ** x, "pow")]:
        assert out._node.op == op and out._node.inputs == (w, x), f"{name} must record op {op!r} with inputs (w, x)"
        assert out._node.saved == {}, f"{name} saves nothing"
    node = (-w)._node
    assert node.op == "neg" and node.inputs == (w,), (
        f"-w recorded op {node.op!r} with {len(node.inputs)} input(s): it must record op 'neg' with inputs (w,)")


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
    assert (1 - a).numpy().tolist() == [[0, -1], [-2, -3]], "1 - a must compute fn(other, self): the left operand first"
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
], ids=shape_id)
def test_broadcasting_that_works(left, right, expected):
    a = np.arange(np.prod(left), dtype=np.float64).reshape(left) + 1
    b = np.arange(np.prod(right), dtype=np.float64).reshape(right) + 1
    out = Tensor(a) * Tensor(b)
    assert out.shape == expected
    np.testing.assert_array_equal(out.numpy(), a * b)


@pytest.mark.parametrize("left, right", [((2, 3), (2,)), ((3, 4), (4, 3)), ((2, 3, 4), (3, 3))], ids=shape_id)
def test_broadcasting_that_fails_names_both_shapes(left, right):
    with pytest.raises(ValueError) as err:
        Tensor(np.ones(left)) + Tensor(np.ones(right))
    assert str(left) in str(err.value) and str(right) in str(err.value), (
        f"the broadcasting error must name both shapes {left} and {right}; it says: {err.value}")


def test_other_value_errors_are_not_called_broadcast_errors():
    ints = Tensor(np.array([1, 2]))
    with pytest.raises(ValueError) as err:
        ints ** -1  # NumPy: "Integers to negative integer powers are not allowed."
    assert "broadcast" not in str(err.value), (
        f"int_tensor ** -1 was reported as a broadcast error ({err.value}): the shapes (2,) and () broadcast, "
        "so re-raise NumPy's own error")
    assert "negative integer powers" in str(err.value)


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

@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_matmul_keeps_the_dtype(dtype):
    a = Tensor(np.ones((2, 3), dtype=dtype))
    for name, out in [("(2,3) @ (3,4)", a @ Tensor(np.ones((3, 4), dtype=dtype))),
                      ("(2,3) @ (3,)", a @ Tensor(np.ones(3, dtype=dtype)))]:
        assert out.dtype == dtype, f"matmul {name} changed the dtype {np.dtype(dtype)} → {out.dtype}: keep the input's dtype"


def test_matmul_records_its_inputs_in_order():
    a = Tensor(np.ones((2, 3)), requires_grad=True)
    b = Tensor(np.ones((3, 4)))
    for name, out in [("a @ b", a @ b), ("a.matmul(b)", a.matmul(b))]:
        assert out._node.op == "matmul" and out._node.inputs == (a, b), f"{name} must record op 'matmul' with inputs (a, b)"
    node = (np.ones((4, 2)) @ a)._node
    assert node.inputs[1] is a, "array @ a must record (array, a): the left operand first"


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
], ids=shape_id)
def test_matmul_batched_broadcast_and_vectors(left, right, expected):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(left), rng.standard_normal(right)
    out = Tensor(a) @ Tensor(b)
    assert out.shape == expected
    np.testing.assert_allclose(out.numpy(), np.matmul(a, b), rtol=1e-12)


@pytest.mark.parametrize("left, right", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3), (4,)), ((2, 2, 3), (3, 3, 4)),
                                         ((), (1,)), ((2,), ())], ids=shape_id)
def test_matmul_mismatch_names_both_shapes(left, right):
    with pytest.raises(ValueError) as err:
        Tensor(np.ones(left)) @ Tensor(np.ones(right))
    assert str(left) in str(err.value) and str(right) in str(err.value), (
        f"the matmul error must name both shapes {left} and {right}; it says: {err.value}")


# ---- reductions -----------------------------------------------------------------------

X = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
REDUCTIONS = pytest.mark.parametrize("name", ["sum", "mean", "max"])


@REDUCTIONS
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_reductions_keep_the_dtype(name, dtype):
    x = Tensor(np.arange(6, dtype=dtype).reshape(2, 3))
    for axis in (None, 0, (0, 1)):
        out = getattr(x, name)(axis=axis)
        assert out.dtype == dtype, f"{name} changed the dtype {np.dtype(dtype)} → {out.dtype}: keep the input's dtype"


@REDUCTIONS
def test_reductions_record_their_own_op(name):
    w = Tensor(np.ones((2, 3)), requires_grad=True)
    node = getattr(w, name)(axis=1)._node
    assert node.op == name and node.inputs == (w,), (
        f"{name} recorded op {node.op!r}: it must record its own op {name!r} with inputs (x,)")


@REDUCTIONS
@pytest.mark.parametrize("axis, normalised", [(None, None), (-1, (2,)), (1, (1,)), ((2, 0), (0, 2)), ((-1, -3), (0, 2)),
                                              ([1], (1,))], ids=["None", "-1", "1", "(2,0)", "(-1,-3)", "[1]"])
def test_reductions_save_the_normalised_axis(name, axis, normalised):
    w = Tensor(np.ones((2, 3, 4)), requires_grad=True)
    saved = getattr(w, name)(axis=axis)._node.saved
    assert saved.get("axis", "missing") == normalised and type(saved.get("axis")) is type(normalised), (
        f"{name}(axis={axis!r}) saved axis={saved.get('axis', 'nothing')!r}: save the normalised axis {normalised!r} "
        "(a sorted tuple of non-negative ints, or None)")
    for keepdims in (False, True):
        saved = getattr(w, name)(axis=axis, keepdims=keepdims)._node.saved
        assert saved.get("keepdims") == keepdims, f"{name} must save keepdims={keepdims}"


def test_max_exp_sqrt_save_their_output():
    w = Tensor(np.random.default_rng(0).uniform(0.5, 2.0, (2, 3)), requires_grad=True)
    for name, out in [("max()", w.max()), ("max(axis=1)", w.max(axis=1)), ("max(axis=-1, keepdims=True)", w.max(-1, keepdims=True)),
                      ("exp()", w.exp()), ("sqrt()", w.sqrt())]:
        assert "out" in out._node.saved, f"{name} must save out (its result's array) for the backward rule"
        np.testing.assert_array_equal(out._node.saved["out"], out.data,
                                      err_msg=f"{name} must save out: its result's array, not its input")
    assert set(w.max(axis=0)._node.saved) == {"axis", "keepdims", "out"}
    assert w.log()._node.saved == {} and w.sum()._node.saved == {"axis": None, "keepdims": False}


@REDUCTIONS
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)], ids=["None", "0", "-1", "(0,2)"])
def test_keepdims_keeps_the_reduced_axes_as_size_one(name, axis):
    out = getattr(Tensor(X), name)(axis=axis, keepdims=True)
    expected = getattr(np, name)(X, axis=axis, keepdims=True).shape
    assert out.shape == expected, (
        f"{name}(axis={axis}, keepdims=True) gave shape {out.shape}, expected {expected}: "
        "with keepdims=True the reduced axes stay as size 1")


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2, (0, 2), (-1, 0)], ids=lambda a: str(a).replace(" ", ""))
@pytest.mark.parametrize("keepdims", [False, True], ids=["", "keepdims"])
@REDUCTIONS
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

@pytest.mark.parametrize("name", ["exp", "log", "sqrt"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_exp_log_sqrt_keep_the_dtype_and_record_their_op(name, dtype):
    w = Tensor(np.array([1.0, 2.0], dtype=dtype), requires_grad=True)
    out = getattr(w, name)()
    assert out.dtype == dtype, f"{name} changed the dtype {np.dtype(dtype)} → {out.dtype}: keep the input's dtype"
    assert out._node.op == name and out._node.inputs == (w,), f"{name} must record op {name!r} with inputs (x,)"


def test_exp_log_sqrt_values():
    np.testing.assert_allclose(Tensor([0.0, 1.0, 2.0]).exp().numpy(), np.exp([0, 1, 2]), rtol=1e-6)
    np.testing.assert_allclose(Tensor([1.0, 10.0]).log().numpy(), [0.0, np.log(10)], rtol=1e-6)
    np.testing.assert_allclose(Tensor([4.0, 9.0, 2.0]).sqrt().numpy(), [2, 3, np.sqrt(2)], rtol=1e-6)


# ---- shapes and views ------------------------------------------------------------------

def test_reshape_is_a_view_with_the_same_values():
    t = Tensor(np.arange(6, dtype=np.float32))
    r = t.reshape(2, 3)
    assert np.shares_memory(r.data, t.data), "reshape copied the data: return a view (self.data.reshape(shape))"
    assert r.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert t.reshape((3, -1)).shape == (3, 2) and t.reshape([6]).shape == (6,)
    w = Tensor(np.ones(6), requires_grad=True)
    assert w.reshape(2, 3)._node.op == "reshape" and w.reshape(2, 3)._node.saved == {}


def test_reshape_error_names_both_shapes():
    with pytest.raises(ValueError) as err:
        Tensor(np.arange(6.0)).reshape(4, 2)
    assert "(6,)" in str(err.value) and "(4, 2)" in str(err.value), (
        f"the reshape error must name the tensor's shape (6,) and the requested (4, 2); it says: {err.value}")


def test_transpose_is_recorded_as_permute():
    w = Tensor(X, requires_grad=True)
    for name, out, dims in [("transpose()", w.transpose(), (0, 2, 1)), ("transpose(0, -1)", w.transpose(0, -1), (2, 1, 0))]:
        node = out._node
        assert node.op == "permute", f"{name} recorded op {node.op!r}: a transpose is recorded as 'permute' (call self.permute)"
        assert node.saved == {"dims": dims}, f"{name} must save dims={dims}, got {node.saved}"


def test_permute_saves_non_negative_dims():
    w = Tensor(X, requires_grad=True)
    for dims, expected in [((1, 2, 0), (1, 2, 0)), ((-1, 0, -2), (2, 0, 1))]:
        saved = w.permute(*dims)._node.saved
        assert saved == {"dims": expected}, f"permute{dims} must save dims={expected} (non-negative ints), got {saved}"
        assert all(type(d) is int for d in saved["dims"]), "permute must save dims as Python ints"


def test_transpose_and_permute_values():
    t = Tensor(X)
    np.testing.assert_array_equal(t.transpose().numpy(), X.transpose(0, 2, 1))
    np.testing.assert_array_equal(t.transpose(0, -1).numpy(), X.transpose(2, 1, 0))
    np.testing.assert_array_equal(t.permute(1, 2, 0).numpy(), X.transpose(1, 2, 0))
    np.testing.assert_array_equal(t.permute((2, 0, 1)).numpy(), X.transpose(2, 0, 1))
    assert np.shares_memory(t.permute(1, 2, 0).data, t.data), "permute must return a view"


@pytest.mark.parametrize("shape, dims", [((3, 4), (2, 1)), ((3, 4), (0, 2)), ((3, 4), (-3, 0)), ((2, 3, 4), (0, 1, 7)),
                                         ((2, 3, 4), (0, 0, 1)), ((2, 3, 4), (0, 1)), ((2, 3, 4), (0, 1, 2, 3))], ids=shape_id)
def test_permute_rejects_dims_that_are_not_an_ordering(shape, dims):
    try:
        out = Tensor(np.ones(shape)).permute(*dims)
    except ValueError as err:
        assert str(dims) in str(err) and str(len(shape)) in str(err), (
            f"the permute error must name the dims {dims} and the ndim {len(shape)}; it says: {err}")
        return
    pytest.fail(f"permute{dims} on a {len(shape)}-D tensor gave shape {out.shape}: dims must be each of "
                f"0..{len(shape) - 1} exactly once (do not wrap them modulo ndim); raise ValueError")


def test_transpose_of_fewer_than_two_dims():
    with pytest.raises(ValueError) as err:
        Tensor([1.0, 2.0]).transpose()
    assert "(2,)" in str(err.value), f"the transpose error must name the shape (2,); it says: {err.value}"
    with pytest.raises(ValueError):
        Tensor(X).transpose(0, 3)


# ---- indexing and masks ---------------------------------------------------------------------

def test_getitem_converts_tensor_and_list_indices():
    t = Tensor(X)
    rows = np.array([2, 0, 2])
    for name, index, expected in [("a Tensor", Tensor(rows), X[0][rows]), ("a list", [2, 0, 2], X[0][rows]),
                                  ("a tuple with a Tensor", (slice(None), Tensor(rows)), X[0][:, rows])]:
        try:
            out = t[0][index]
        except IndexError as err:
            pytest.fail(f"indexing with {name} raised IndexError ({err}): turn Tensors into their .data before indexing")
        np.testing.assert_array_equal(out.numpy(), expected, err_msg=f"indexing with {name}")
    w = Tensor(X, requires_grad=True)
    saved = w[[1, 1]]._node.saved["index"]
    assert isinstance(saved, np.ndarray) and saved.tolist() == [1, 1], (
        f"getitem saved the index {saved!r}: turn a list into an array (xp.asarray) and save that")
    saved = w[Tensor(np.array([1, 0]))]._node.saved["index"]
    assert isinstance(saved, np.ndarray), "getitem must save a Tensor index as its array"
    saved = w[0, Tensor(rows)]._node.saved["index"]
    assert isinstance(saved, tuple) and isinstance(saved[1], np.ndarray), "getitem must save a tuple index with arrays in it"
    saved = w[0, [2, 0]]._node.saved["index"]
    assert isinstance(saved[1], np.ndarray), (
        f"getitem saved {saved!r}: turn a list inside a tuple index into an array (xp.asarray) too")


def test_indexing_values():
    t = Tensor(X)
    np.testing.assert_array_equal(t[1].numpy(), X[1])
    np.testing.assert_array_equal(t[:, 1:, ::2].numpy(), X[:, 1:, ::2])
    np.testing.assert_array_equal(t[..., -1].numpy(), X[..., -1])
    np.testing.assert_array_equal(t[None, 0].numpy(), X[None, 0])
    rows = np.array([2, 0, 2])
    np.testing.assert_array_equal(t[0][rows].numpy(), X[0][rows])
    np.testing.assert_array_equal(t[0, Tensor(rows), 1].numpy(), X[0, rows, 1])
    assert np.shares_memory(t[:, 1].data, t.data), "basic slicing must return a view"
    w = Tensor(X, requires_grad=True)
    assert w[1:]._node.op == "getitem" and w[1:]._node.inputs == (w,)


def test_masked_fill_fills_where_true_and_broadcasts():
    t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = t.masked_fill(np.array([True, False, True]), -9.0)
    assert out.numpy().tolist() == [[-9, 2, -9], [-9, 5, -9]], (
        f"masked_fill gave {out.numpy().tolist()}: fill where the mask is True, keep where it is False (as PyTorch)")
    out = t.masked_fill(Tensor(np.array([[0], [1]])), 0.0)
    assert out.numpy().tolist() == [[1, 2, 3], [0, 0, 0]]
    out = t.masked_fill([[True, False, False], [False, False, True]], 7.0)
    assert out.numpy().tolist() == [[7, 2, 3], [4, 5, 7]]
    assert t.numpy().tolist() == [[1, 2, 3], [4, 5, 6]], "masked_fill must return a copy, not fill in place"
    assert t.masked_fill([True, False, False], 0.5).dtype == np.float32


def test_masked_fill_saves_a_bool_mask():
    w = Tensor(np.ones((2, 3)), requires_grad=True)
    for mask in ([1, 0, 1], Tensor(np.array([[1], [0]])), np.array([True, False, True])):
        node = w.masked_fill(mask, 0.0)._node
        saved = node.saved.get("mask")
        assert node.op == "masked_fill" and node.inputs == (w,)
        assert isinstance(saved, np.ndarray) and saved.dtype == bool, (
            f"masked_fill saved the mask as {type(saved).__name__} {getattr(saved, 'dtype', '')}: "
            "save the converted bool array (True = filled)")


@pytest.mark.parametrize("mask_shape", [(3, 2), (5, 2, 3), (2, 1, 3)], ids=shape_id)
def test_masked_fill_shape_error_names_both_shapes(mask_shape):
    with pytest.raises(ValueError) as err:
        Tensor(np.ones((2, 3))).masked_fill(np.ones(mask_shape, dtype=bool), 0.0)
    assert str(mask_shape) in str(err.value) and "(2, 3)" in str(err.value), (
        f"the masked_fill error must name the mask's shape {mask_shape} and the tensor's (2, 3); it says: {err.value}")


# ---- versions, leaves, retain_grad (what module 05's engine relies on) ---------------------

def test_version_starts_at_zero_and_counts_assignments_to_data():
    t = Tensor([1.0, 2.0])
    assert t._version == 0
    t.data = np.array([3.0, 4.0])
    assert t._version == 1
    t.data += 1
    assert t._version == 2 and t.numpy().tolist() == [4.0, 5.0]
    t.data[0] = 9.0  # a change through the array: invisible to the counter (the lesson says so)
    assert t._version == 2


def test_results_start_at_version_zero():
    w = Tensor([1.0, 2.0], requires_grad=True)
    w.data = w.data * 2
    for out in (w * 2, w.sum(), w.reshape(2, 1), record_op("custom", np.zeros(2), (w,))):
        assert out._version == 0 and not out._retains_grad


def test_node_records_the_versions_of_its_inputs():
    w = Tensor([1.0, 2.0], requires_grad=True)
    x = Tensor([3.0, 4.0])
    assert (w * x)._node.versions == (0, 0)
    x.data = x.data + 1
    w.data += 1
    w.data += 1
    assert (w * x)._node.versions == (2, 1)
    assert Node("neg", (w,), {}).versions == (2,)
    assert "versions" in Node.__slots__


def test_is_leaf():
    w = Tensor([1.0], requires_grad=True)
    assert w.is_leaf and not (w * 2).is_leaf
    assert Tensor([1.0]).is_leaf and (Tensor([1.0]) * 2).is_leaf  # nothing recorded without requires_grad
    assert w.detach().is_leaf


def test_retain_grad():
    w = Tensor([1.0], requires_grad=True)
    hidden = w * 2
    assert hidden._retains_grad is False and w._retains_grad is False
    assert hidden.retain_grad() is None and hidden._retains_grad is True
    with pytest.raises(RuntimeError):
        Tensor([1.0]).retain_grad()


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


def test_device_problem_is_one_sentence_of_what_to_do_or_none():
    from tinytorch.core.tensor import device_problem

    assert device_problem("cpu") is None
    problem = device_problem("cuda")
    if importlib.util.find_spec("cupy") is None:
        assert 'pip install -e ".[gpu]"' in problem
    elif gpu_count() == 0:
        assert "no NVIDIA GPU" in problem
    else:
        assert problem is None


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
    GradMode.enabled = False
    try:
        assert (w * 3)._node is None and not (w * 3).requires_grad
    finally:
        GradMode.enabled = True


def test_record_op_is_the_single_constructor_of_results():
    a = Tensor([1.0], requires_grad=True)
    out = record_op("custom", np.array([5.0]), (a,), note="kept")
    assert out._node.saved == {"note": "kept"} and out.numpy().tolist() == [5.0]
    assert out._node.inputs == (a,) and out._node.versions == (0,)


def test_record_op_tells_every_listener_also_with_gradients_off():
    from tinytorch.core.tensor import OP_LISTENERS

    heard = []

    class Listener:
        def op_recorded(self, op, out, inputs, saved):
            heard.append((op, out, inputs, saved))

    a = Tensor([1.0], requires_grad=True)
    OP_LISTENERS.append(Listener())
    try:
        out = record_op("custom", np.array([5.0]), (a,), note="kept")
        GradMode.enabled = False
        quiet = record_op("custom_off", np.array([6.0]), (a,))
    finally:
        GradMode.enabled = True
        OP_LISTENERS.clear()
    assert [h[0] for h in heard] == ["custom", "custom_off"]
    assert heard[0][1] is out and heard[0][2] == (a,) and heard[0][3] == {"note": "kept"}
    assert heard[1][1] is quiet and quiet._node is None
    assert record_op("custom", np.array([7.0]), (a,)).requires_grad  # no listener left: nothing else changes


def test_detach_shares_data_without_graph():
    w = Tensor([1.0, 2.0], requires_grad=True)
    doubled = w * 2
    d = doubled.detach()
    assert not d.requires_grad and d._node is None and d.numpy().tolist() == [2, 4]
    assert np.shares_memory(d.data, doubled.data)


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
    out = (a * 2 + 1).sum(axis=0)  # rows [1, 3, 5] and [7, 9, 11]
    assert out.device == "cuda" and out.numpy().tolist() == [8, 12, 16]
    assert (a.cpu().numpy() == np.arange(6).reshape(2, 3)).all()


@pytest.mark.gpu
@requires_gpu
def test_every_op_runs_on_cupy():
    import cupy

    w = Tensor(cupy.arange(1, 7, dtype=cupy.float32).reshape(2, 3), requires_grad=True)
    assert (w @ w.transpose()).numpy().tolist() == [[14, 32], [32, 77]]
    assert w.max(axis=1, keepdims=True).numpy().tolist() == [[3], [6]]
    assert w.exp().log().sqrt().device == "cuda" and w.mean().item() == 3.5
    assert w[[1, 0]].numpy()[0].tolist() == [4, 5, 6]
    assert isinstance(w[[1, 0]]._node.saved["index"], cupy.ndarray)
    assert w.masked_fill(np.array([True, False, False]), 0.0).numpy().tolist() == [[0, 2, 3], [0, 5, 6]]
    assert isinstance(w.masked_fill(np.array([True, False, False]), 0.0)._node.saved["mask"], cupy.ndarray)
    assert isinstance(to_host(w), np.ndarray)
    with pytest.raises(ValueError):
        Tensor(cupy.ones((2, 3))) + Tensor(cupy.ones((2,)))


def test_as_int_takes_whole_numbers_only():
    """Issue 20: a count, an id or an index is an int or a whole float; int(2.5) would quietly give 2."""
    from tinytorch.core.tensor import as_int

    assert [as_int(v, "n") for v in (3, 3.0, np.int64(4), np.float32(5.0))] == [3, 3, 4, 5]
    for value, error in ((2.5, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
                         (True, TypeError), ("3", TypeError), (None, TypeError)):
        with pytest.raises(error, match="top_k must be a whole number"):
            as_int(value, "top_k")
    with pytest.raises(ValueError, match="n must be at least 0, got -1"):
        as_int(-1, "n", minimum=0)
