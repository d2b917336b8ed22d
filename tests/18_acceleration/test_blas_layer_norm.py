"""Module 18, section 5: blas_layer_norm, module 13's LayerNorm with its row reductions as BLAS products.
It must equal module 13's op in value, gradient and dtype, in every case module 13 handles."""
import warnings

import numpy as np
import pytest

from tinytorch.core.autograd import BACKWARD_RULES, gradcheck
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT, LayerNorm, layer_norm
from tinytorch.perf.acceleration import FUSED_REPLACEMENTS, BlasLayerNorm, blas_layer_norm, fuse
from tinytorch.perf.memory import autocast


def inputs(shape, norm_shape, bias=True, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    made = [rng.standard_normal(shape) * 3 + 1, 1 + 0.3 * rng.standard_normal(norm_shape)]
    made += [rng.standard_normal(norm_shape)] if bias else []
    return [Tensor(a.astype(dtype), requires_grad=True) for a in made]


def values_and_grads(op, args, upstream):
    for t in args:
        t.grad = None
    out = op(*args)
    out.backward(upstream)
    return out.numpy(), [t.grad.numpy() for t in args]


@pytest.mark.parametrize("shape, norm_shape, bias", [((12, 8, 16), (16,), True), ((12, 8, 16), (16,), False),
                                                      ((3, 4, 5), (4, 5), True), ((7,), (7,), True)])
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-5)])
def test_equals_module_13_in_value_and_gradient(shape, norm_shape, bias, dtype, tol):
    args = inputs(shape, norm_shape, bias, dtype)
    upstream = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    ours, our_grads = values_and_grads(blas_layer_norm, args, upstream)
    theirs, their_grads = values_and_grads(layer_norm, args, upstream)
    assert ours.dtype == theirs.dtype == dtype
    assert np.allclose(ours, theirs, rtol=tol, atol=tol), f"values differ by {np.abs(ours - theirs).max():.2e}"
    for name, g, h in zip(("x", "weight", "bias"), our_grads, their_grads):
        assert g.shape == h.shape and g.dtype == h.dtype, f"d{name}: {g.shape} {g.dtype} against {h.shape} {h.dtype}"
        assert np.allclose(g, h, rtol=tol, atol=tol * np.abs(h).max()), \
            f"d{name} differs from module 13's by {np.abs(g - h).max():.2e}"


@pytest.mark.parametrize("norm_shape, bias", [((6,), True), ((2, 3), False)])
def test_gradients_against_central_differences(norm_shape, bias):
    assert gradcheck(blas_layer_norm, inputs((4,) + norm_shape, norm_shape, bias, seed=2))


def test_the_rule_returns_weight_and_bias_gradients_already_summed():
    x, w, b = inputs((5, 3, 4), (4,), True)
    out = blas_layer_norm(x, w, b)
    node = out._node
    assert node.op == "blas_layer_norm" and set(node.saved) == {"xhat", "rstd", "averager"}
    assert node.saved["xhat"].shape == (15, 4) and node.saved["rstd"].shape == (15, 1)
    d_x, d_w, d_b = BACKWARD_RULES["blas_layer_norm"](np.ones(out.shape), node)
    assert d_x.shape == (5, 3, 4) and d_w.shape == (4,) and d_b.shape == (4,)
    assert np.allclose(d_b, 15.0), "dbias is the sum of the upstream gradient over the 15 rows"
    assert np.allclose(d_w, node.saved["xhat"].sum(axis=0))


@pytest.mark.parametrize("dtype, big", [(np.float32, 1e20), (np.float16, 1e3)])
def test_rows_whose_squares_overflow_are_squared_again_in_float64(dtype, big):
    x = np.array([[big, -big, 3 * big, 0.0], [1.0, 2.0, 3.0, 4.0]], dtype)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.square(x)).all(), "the case must overflow in its own dtype"
    w = np.ones(4, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the overflow is expected and handled: no RuntimeWarning escapes
        ours = blas_layer_norm(x, w).numpy()
    theirs = layer_norm(x, w).numpy()
    assert ours.dtype == dtype and np.isfinite(ours).all()
    assert np.allclose(ours.astype(np.float64), theirs.astype(np.float64), atol=2e-3 if dtype == np.float16 else 1e-5)


def test_under_autocast_a_float16_input_is_computed_in_float32():
    x, w = Tensor(np.random.default_rng(3).standard_normal((4, 6)).astype(np.float16)), Tensor(np.ones(6, np.float32))
    with autocast():
        ours, theirs = blas_layer_norm(x, w), layer_norm(x, w)
    assert ours.dtype == theirs.dtype == np.float32
    assert np.allclose(ours.numpy(), theirs.numpy(), atol=1e-6)


def test_bad_shapes_and_eps_are_refused_with_a_message():
    with pytest.raises(ValueError, match="trailing dims must equal normalized_shape"):
        blas_layer_norm(np.zeros((2, 5)), np.ones(4))
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        blas_layer_norm(np.zeros((2, 4)), np.ones(4), eps=0.0)


def test_fuse_replaces_every_layer_norm_with_the_same_tensors():
    model = GPT(17, 16, 2, 2, 8, seed=3, bias=False)
    fused = fuse(model, FUSED_REPLACEMENTS)
    originals = {name: m for name, m in model.named_modules() if type(m) is LayerNorm}
    replaced = {name: m for name, m in fused.named_modules() if type(m) is BlasLayerNorm}
    assert set(replaced) == set(originals), "every LayerNorm, and nothing else, becomes a BlasLayerNorm"
    for name, norm in replaced.items():
        assert norm.weight is originals[name].weight and norm.bias is originals[name].bias is None, (
            f"{name}: the fused LayerNorm must share the original's weight tensors (deepcopy with "
            "memo = {id(p): p} for every parameter), not copies")
        assert norm.eps == originals[name].eps and norm.normalized_shape == originals[name].normalized_shape
    assert all(type(m) is LayerNorm for name, m in originals.items()), "the original model is unchanged"
