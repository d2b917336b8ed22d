"""Module 13, section 1: layer_norm as one op with a fused backward rule, and LayerNorm.

When a value is wrong, `diagnose` names the likely cause by comparing with the classic
wrong versions (wrong axis, unbiased variance, eps outside the square root).
"""
import numpy as np
import pytest

from tinytorch.core.autograd import gradcheck
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import LayerNorm, layer_norm
from tinytorch.testing import numeric_vjp


def reference(x, w=None, b=None, eps=1e-5, axis=-1, ddof=0, eps_outside=False):
    """NumPy LayerNorm; the keyword arguments switch on one classic mistake at a time."""
    mean = x.mean(axis, keepdims=True)
    var = x.var(axis, keepdims=True, ddof=ddof)
    out = (x - mean) / (np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps))
    return out * (1 if w is None else w) + (0 if b is None else b)


def diagnose(got, x, w=None, b=None):
    """Why `got` differs from LayerNorm: the first classic mistake it matches, or a general hint."""
    for label, kwargs in (("normalise each token over its LAST axis (its features), not over tokens or the batch",
                           {"axis": 0}),
                          ("normalise each token over its LAST axis (its features), not over tokens or the batch",
                           {"axis": -2}),
                          ("use the biased variance (divide by D, not D - 1), as PyTorch does", {"ddof": 1}),
                          ("put eps inside the square root: sqrt(var + eps), not sqrt(var) + eps",
                           {"eps_outside": True})):
        try:
            wrong = reference(x, w, b, **kwargs)
        except (ValueError, IndexError):
            continue
        if wrong.shape == got.shape and np.allclose(got, wrong, atol=1e-6):
            return f"layer_norm matches a known mistake: {label}"
    return "layer_norm values differ from (x - mean) / sqrt(var + eps) * weight + bias over the last axis"


def test_hand_example():
    out = layer_norm(Tensor([[1.0, 2.0, 3.0, 4.0]]), Tensor(np.ones(4, np.float32)))
    expected = [[-1.3416355, -0.4472118, 0.4472118, 1.3416355]]
    assert np.allclose(out.numpy(), expected, atol=1e-5), diagnose(out.numpy(), np.array([[1.0, 2, 3, 4]]))
    assert out.dtype == np.float32, f"layer_norm changed the dtype float32 -> {out.dtype}"


@pytest.mark.parametrize("shape", [(2, 3, 6), (5, 4), (1, 1, 8)], ids=lambda s: "x".join(map(str, s)))
def test_values_against_numpy(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape) * 4 + 2
    w, b = rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    out = layer_norm(x, w, b).numpy()
    assert np.allclose(out, reference(x, w, b), atol=1e-10), diagnose(out, x, w, b)
    assert np.allclose(layer_norm(x, w).numpy(), reference(x, w), atol=1e-10), "bias=None must add nothing"


def test_small_variance_tokens():
    """Tokens whose features are nearly equal: where eps (inside the square root) matters."""
    x = np.random.default_rng(1).standard_normal((3, 16)) * 1e-3
    out = layer_norm(x, np.ones(16)).numpy()
    assert np.allclose(out, reference(x), atol=1e-8), diagnose(out, x)
    constant = layer_norm(np.full((2, 4), 7.0), np.ones(4), np.arange(4.0)).numpy()
    assert np.isfinite(constant).all() and np.allclose(constant, np.arange(4.0)), "a constant token gives its bias"



@pytest.mark.parametrize("scale", [1e20, 1e-20, 3e37])
def test_float32_values_far_from_one(scale):
    """Issue 20: a float32 square overflows above about 1.8e19 (and underflows below 1e-19)."""
    x = np.array([[1.0, -1.0, 1.0, -1.0], [3.0, 1.0, -1.0, -3.0]], np.float32) * np.float32(scale)
    expected = reference(x.astype(np.float64) / scale, eps=1e-5 / scale ** 2)  # layer norm is scale-free but for eps
    out = layer_norm(Tensor(x), Tensor(np.ones(4, np.float32)))
    assert out.dtype == np.float32, f"layer_norm changed the dtype float32 -> {out.dtype}: cast rstd back to x's dtype"
    assert np.allclose(out.numpy(), expected, atol=1e-5), (
        f"float32 rows of size about {scale:g} gave {out.numpy().tolist()}, expected {expected.round(4).tolist()}: "
        "square the centred values in float64 (a float32 square overflows above about 1.8e19, so the "
        "variance becomes inf and the row normalises to zeros)")


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan"), "1e-5"])
def test_eps_must_be_positive(eps):
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        LayerNorm(4, eps=eps)
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        layer_norm(Tensor(np.ones((1, 4))), Tensor(np.ones(4)), eps=eps)


def test_statistics_of_the_output():
    x = np.random.default_rng(2).standard_normal((4, 7, 32)) * 10 - 3
    out = layer_norm(x, np.ones(32)).numpy()
    assert np.allclose(out.mean(-1), 0, atol=1e-10), diagnose(out, x)
    assert np.allclose(out.var(-1), 1, atol=1e-4), diagnose(out, x)


def test_trailing_axes_and_errors():
    x = np.random.default_rng(3).standard_normal((2, 3, 4))
    out = layer_norm(x, np.ones((3, 4))).numpy()
    flat = reference(x.reshape(2, 12)).reshape(2, 3, 4)
    assert np.allclose(out, flat, atol=1e-10), "a (T, D) weight normalises over the last two axes together"
    with pytest.raises(ValueError) as err:
        layer_norm(x, np.ones(5))
    assert "(5,)" in str(err.value) and "(2, 3, 4)" in str(err.value)


def test_records_one_op_with_saved_fields():
    x = Tensor(np.random.default_rng(4).standard_normal((2, 3, 5)), requires_grad=True)
    w, b = Tensor(np.ones(5), requires_grad=True), Tensor(np.zeros(5), requires_grad=True)
    y = layer_norm(x, w, b)
    node = y._node
    assert node is not None and node.op == "layer_norm", "layer_norm must record ONE op named 'layer_norm'"
    assert len(node.inputs) == 3 and node.inputs[0] is x and node.inputs[1] is w and node.inputs[2] is b, \
        "layer_norm's inputs are (x, weight, bias) in this order"
    assert set(node.saved) >= {"xhat", "rstd", "axes"}
    assert node.saved["axes"] == (-1,) and node.saved["rstd"].shape == (2, 3, 1)
    assert np.allclose(node.saved["xhat"], reference(x.numpy()), atol=1e-10), "saved xhat is (x - mean) * rstd"
    assert len(layer_norm(x, w)._node.inputs) == 2, "without a bias the inputs are (x, weight)"


@pytest.mark.parametrize("with_bias", [True, False], ids=["with-bias", "no-bias"])
def test_backward_against_central_differences(with_bias):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((2, 3, 6)) * 2, rng.standard_normal(6), rng.standard_normal(6)]
    arrays = arrays if with_bias else arrays[:2]
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    cotangent = rng.standard_normal((2, 3, 6))
    layer_norm(*tensors).backward(cotangent)
    numeric = numeric_vjp(lambda *t: layer_norm(*t), arrays, cotangent)
    for name, t, expected in zip(("x", "weight", "bias"), tensors, numeric):
        assert t.grad is not None, f"layer_norm's backward returned no gradient for {name}"
        assert np.allclose(t.grad.numpy(), expected, atol=1e-6), (
            f"layer_norm's gradient for {name} is wrong: dx = rstd * (g_hat - mean(g_hat) - xhat * mean(g_hat * xhat)) "
            "with g_hat = grad * weight; dweight = sum(grad * xhat); dbias = sum(grad)")


def test_gradcheck_float64():
    rng = np.random.default_rng(6)
    x = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w, b = Tensor(rng.standard_normal(4), requires_grad=True), Tensor(rng.standard_normal(4), requires_grad=True)
    assert gradcheck(lambda x, w, b: layer_norm(x, w, b), [x, w, b])
    assert gradcheck(lambda x, w: layer_norm(x, w), [Tensor(rng.standard_normal((2, 2, 3)), requires_grad=True),
                                                     Tensor(rng.standard_normal((2, 3)), requires_grad=True)])


def test_layer_norm_module():
    ln = LayerNorm(6)
    assert ln.weight.shape == (6,) and np.all(ln.weight.numpy() == 1) and np.all(ln.bias.numpy() == 0)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert LayerNorm(6, bias=False).bias is None and len(LayerNorm(6, bias=False).parameters()) == 1
    x = np.random.default_rng(7).standard_normal((2, 6)).astype(np.float32)
    assert np.allclose(ln(Tensor(x)).numpy(), reference(x), atol=1e-5)
    assert LayerNorm((3, 4), eps=1e-3).normalized_shape == (3, 4)
    assert LayerNorm(4, dtype=np.float64)(np.ones((2, 4))).dtype == np.float64
