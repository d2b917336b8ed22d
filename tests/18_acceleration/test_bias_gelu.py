"""Module 18, section 2: bias_gelu, one recorded op that saves u and tanh, and its backward rule.

Values against the composed gelu(x + bias) of modules 02/05; gradients against float64 central
differences (module 05's gradcheck). Everything is built inside the tests.
"""
import numpy as np
import pytest

from tinytorch.core.activations import gelu
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck
from tinytorch.core.tensor import Tensor
from tinytorch.perf.acceleration import GELU_C, GELU_COEFF, bias_gelu


def reference_slope(u):
    t = np.tanh(GELU_C * (u + GELU_COEFF * u ** 3))
    return 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * (1 + 3 * GELU_COEFF * u * u)


def test_saves_pre_activation_and_tanh():
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((4, 6)), rng.standard_normal(6)
    x_given = x.copy()
    node = bias_gelu(Tensor(x, requires_grad=True), Tensor(b, requires_grad=True))._node
    assert np.array_equal(x, x_given), ("bias_gelu changed its input x in place (u = x.data; u += bias, or t "
                                        "computed in u's array): make u = x + bias and t new arrays")
    assert node.op == "bias_gelu", f"record one op named 'bias_gelu', got {node.op!r}"
    u = x + b
    assert np.allclose(node.saved["u"], u), "saved u must be x + bias (the pre-activation), not x"
    t = np.tanh(GELU_C * (u + GELU_COEFF * u ** 3))
    assert np.allclose(node.saved["tanh"], t), \
        "saved tanh must be tanh(c·(u + 0.044715·u³)) of u = x + bias (the t of the forward, before 1 + t)"


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)], ids=["(5,)", "(3,5)", "(2,3,5)"])
def test_value_equals_composed_gelu(shape):
    rng = np.random.default_rng(len(shape))
    x, b = rng.standard_normal(shape) * 3, rng.standard_normal(shape[-1])
    got = bias_gelu(Tensor(x), Tensor(b)).numpy()
    assert np.allclose(got, gelu(Tensor(x + b)).numpy(), rtol=1e-12, atol=1e-12), \
        "bias_gelu(x, b) must equal gelu(x + b): 0.5·u·(1 + t), u = x + bias"
    assert np.allclose(bias_gelu(Tensor(x)).numpy(), gelu(Tensor(x)).numpy(), rtol=1e-12, atol=1e-12), \
        "without a bias, bias_gelu(x) must equal gelu(x)"


def test_without_bias_records_one_input():
    x = Tensor(np.linspace(-3, 3, 8), requires_grad=True)
    node = bias_gelu(x)._node
    assert len(node.inputs) == 1 and node.inputs[0] is x, "without a bias the op's inputs are (x,)"


def test_rule_slope_and_input_count():
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((3, 4)) * 2, rng.standard_normal(4)
    node = bias_gelu(Tensor(x, requires_grad=True), Tensor(b, requires_grad=True))._node
    grad = rng.standard_normal(x.shape)
    grad_given = grad.copy()
    grads = BACKWARD_RULES["bias_gelu"](grad, node)
    assert np.array_equal(grad, grad_given), \
        "the rule changed `grad` in place (slope *= grad into grad's array?): compute grad·slope in a new array"
    assert len(grads) == 2, "one gradient per input: (grad·slope, grad·slope) for (x, bias)"
    assert np.allclose(grads[0], grad * reference_slope(x + b), rtol=1e-10), \
        "dx must be grad·(0.5·(1 + t) + 0.5·u·(1 − t²)·c·(1 + 3·0.044715·u²))"


def test_gradcheck_float64():
    rng = np.random.default_rng(2)
    x, b = rng.standard_normal((2, 3, 5)) * 2, rng.standard_normal(5)
    assert gradcheck(bias_gelu, [Tensor(x, requires_grad=True), Tensor(b, requires_grad=True)])
    assert gradcheck(bias_gelu, [Tensor(x, requires_grad=True)])


def test_backward_computes_no_tanh(monkeypatch):
    x = Tensor(np.random.default_rng(3).standard_normal((4, 4)), requires_grad=True)
    out = bias_gelu(x)
    calls = []
    real = np.tanh
    monkeypatch.setattr(np, "tanh", lambda *a, **k: calls.append(1) or real(*a, **k))
    out.sum().backward()
    assert not calls, "the backward rule computed tanh again: use the saved `tanh` (that is the point of fusing)"


def test_dtype_kept_and_float16_large_inputs_finite():
    x32 = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    assert bias_gelu(Tensor(x32), Tensor(np.zeros(4, np.float32))).dtype == np.float32, "keep x's dtype"
    big = Tensor(np.array([-100.0, -5.0, 0.0, 5.0, 100.0], np.float16))
    out = bias_gelu(big).numpy()
    assert out.dtype == np.float16 and np.all(np.isfinite(out)), f"float16 with large |x| must stay finite, got {out}"
    assert np.allclose(out, [0, 0, 0, 5, 100], atol=1e-3), f"gelu(±100) is (0, 100) to float16 precision, got {out}"


def test_bias_of_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="bias must have shape"):
        bias_gelu(Tensor(np.zeros((2, 3))), Tensor(np.zeros(2)))


def test_backward_twice_on_kept_graph_is_the_same():
    x = Tensor(np.random.default_rng(5).standard_normal((3, 3)), requires_grad=True)
    b = Tensor(np.random.default_rng(6).standard_normal(3), requires_grad=True)
    out = bias_gelu(x, b)
    out.backward(np.ones((3, 3)))
    first = x.grad.numpy().copy(), b.grad.numpy().copy()
    out.backward(np.ones((3, 3)))
    assert np.allclose(x.grad.numpy(), 2 * first[0]) and np.allclose(b.grad.numpy(), 2 * first[1]), \
        "a second backward through the same graph must add the same gradients: never change saved arrays in place"
