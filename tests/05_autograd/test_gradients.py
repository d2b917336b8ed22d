"""Every op's backward rule against float64 central differences (random cotangents).

Driven by the one op table in autograd_op_table.py; broadcasting shapes come from
hypothesis; non-contiguous inputs must give the same gradients as contiguous ones.
Central differences come from `tinytorch.testing.numeric_vjp`; every failure names the
case and the ops of its graph.
"""
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from autograd_op_table import BINARY_OPS, CASE_IDS, CASES, draw, ops_in
from tinytorch.core.tensor import Tensor
from tinytorch.testing import numeric_vjp


def seeded(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def run_backward(fn, arrays, cotangent_rng):
    """Gradients of Σ v ⊙ fn(*inputs) from TinyTorch's backward, plus the cotangent v."""
    xs = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    out = fn(*xs)
    v = np.asarray(cotangent_rng.standard_normal(out.shape))
    out.backward(v)
    return xs, out, v


def assert_grads_close(xs, expected, what, out, atol=1e-6, rtol=1e-5):
    """Each input's .grad equals `expected`; messages name `what` and the ops of `out`'s graph."""
    what = f"{what} (ops: {ops_in(out)})"
    for i, (x, e) in enumerate(zip(xs, expected)):
        assert x.grad is not None, f"{what}: input {i} got no gradient"
        assert x.grad.shape == x.shape, f"{what}: input {i} grad shape {x.grad.shape} != {x.shape}"
        assert x.grad.dtype == np.float64, f"{what}: input {i} grad dtype {x.grad.dtype}"
        np.testing.assert_allclose(x.grad.numpy(), e, atol=atol, rtol=rtol,
                                   err_msg=f"{what}: input {i}: backward disagrees with central differences")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_backward_matches_central_differences(case):
    rng = seeded(case.name)
    arrays = case.arrays(rng)
    xs, out, v = run_backward(case.fn, arrays, rng)
    assert_grads_close(xs, numeric_vjp(case.fn, arrays, v), case.name, out)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradcheck_accepts_every_op(case):
    from tinytorch.core.autograd import gradcheck

    arrays = case.arrays(seeded(case.name + "/gradcheck"))
    assert gradcheck(case.fn, [Tensor(a, requires_grad=True) for a in arrays]) is True


def noncontiguous(a: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous layout (a transposed copy, or every second element)."""
    out = a
    if a.ndim >= 2:
        out = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if out.flags["C_CONTIGUOUS"]:  # 1-D, or a size-1 dim made the transpose trivial
        out = np.repeat(a.reshape(-1), 2)[::2].reshape(a.shape)
    if a.size > 1:
        assert not out.flags["C_CONTIGUOUS"]
    return out


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_noncontiguous_inputs_give_the_same_gradients(case):
    rng = seeded(case.name + "/layout")
    arrays = case.arrays(rng)
    state = rng.bit_generator.state
    xs, out, _ = run_backward(case.fn, arrays, rng)
    rng.bit_generator.state = state  # the same cotangent for the second run
    xs_nc, out_nc, _ = run_backward(case.fn, [noncontiguous(a) for a in arrays], rng)
    np.testing.assert_allclose(out_nc.numpy(), out.numpy(), rtol=1e-12, atol=1e-12)
    what = f"{case.name} (ops: {ops_in(out)}), non-contiguous input"
    for i, (x, y) in enumerate(zip(xs, xs_nc)):
        assert y.grad is not None and y.grad.shape == x.shape, f"{what}: input {i}"
        np.testing.assert_allclose(y.grad.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12, err_msg=f"{what}: input {i}")


@given(
    op=st.sampled_from(sorted(BINARY_OPS)),
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
    seed=st.integers(0, 2**16),
)
def test_binary_ops_under_broadcasting(op, shapes, seed):
    fn, domain_a, domain_b = BINARY_OPS[op]
    rng = np.random.default_rng(seed)
    shape_a, shape_b = shapes.input_shapes
    arrays = [draw(domain_a, rng, shape_a), draw(domain_b, rng, shape_b)]
    xs, out, v = run_backward(fn, arrays, rng)
    assert out.shape == shapes.result_shape
    assert_grads_close(xs, numeric_vjp(fn, arrays, v), f"{op} {shape_a} {shape_b}", out)


@given(
    shapes=mutually_broadcastable_shapes(signature="(m?,n),(n,p?)->(m?,p?)", max_dims=2, max_side=3),
    seed=st.integers(0, 2**16),
)
def test_matmul_under_batch_broadcasting(shapes, seed):
    rng = np.random.default_rng(seed)
    arrays = [draw("any", rng, s) for s in shapes.input_shapes]
    matmul = lambda a, b: a @ b  # noqa: E731
    xs, out, v = run_backward(matmul, arrays, rng)
    assert out.shape == shapes.result_shape
    assert_grads_close(xs, numeric_vjp(matmul, arrays, v), f"matmul {shapes.input_shapes}", out)


@given(
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    data=st.data(),
)
def test_reductions_over_any_axes(shape, data):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape),
                              max_size=len(shape)).map(tuple), label="axes")
    keepdims = data.draw(st.booleans(), label="keepdims")
    op = data.draw(st.sampled_from(["sum", "mean", "max"]), label="op")
    axis = axes if axes else None
    fn = lambda a: getattr(a, op)(axis=axis, keepdims=keepdims)  # noqa: E731
    rng = np.random.default_rng(len(shape))
    arrays = [draw("any", rng, shape)]
    xs, out, v = run_backward(fn, arrays, rng)
    assert_grads_close(xs, numeric_vjp(fn, arrays, v), f"{op} axis={axis} keepdims={keepdims}", out)
