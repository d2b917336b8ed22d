"""The engine itself: accumulation, order, deep graphs, shapes, no_grad, detach, gradcheck."""
import numpy as np
import pytest

from tinytorch.core.tensor import GradMode, Tensor, record_op


def leaf(values, dtype=np.float64):
    return Tensor(np.array(values, dtype=dtype), requires_grad=True)


def test_x_times_x_plus_x_gives_2x_plus_1():
    x = leaf([1.0, -2.0, 0.5, 3.0])
    (x * x + x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 1)


def test_a_node_used_twice_gets_both_contributions():
    x = leaf([2.0, 3.0])
    y = x.exp()  # y feeds two branches
    z = (y * 2.0 + y.log()).sum()  # d/dx = 2 e^x + 1
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([2.0, 3.0]) + 1)
    np.testing.assert_allclose(y.grad.numpy(), 2 + 1 / np.exp([2.0, 3.0]))


def test_diamond_graph_runs_each_rule_once_with_complete_gradient():
    x = leaf([1.5])
    a, b = x * 3.0, x * x
    (a * b).sum().backward()  # 3x * x² = 3x³ -> 9x²
    np.testing.assert_allclose(x.grad.numpy(), 9 * 1.5**2)


def test_two_backward_calls_accumulate_and_zero_grad_resets():
    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])
    x.zero_grad()
    assert x.grad is None
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_backward_twice_on_the_same_graph_accumulates():
    x = leaf([1.0, 2.0])
    loss = (x * x).sum()
    loss.backward()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_grad_is_a_separate_tensor_not_an_alias():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()
    assert isinstance(a.grad, Tensor) and a.grad.data is not b.grad.data
    a.grad.data *= 10  # an optimizer scaling one gradient must not touch the other
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])


def test_deep_chain_of_10000_ops_needs_no_recursion():
    x = leaf([0.5])
    y = x
    for _ in range(10_000):
        y = y * 1.0 + 0.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])


def test_gradient_shapes_and_values_under_broadcasting():
    a = leaf(np.zeros((2, 3)))
    b = leaf(np.zeros((1, 3)))
    c = leaf(np.zeros(3))
    d = leaf(np.zeros((2, 1)))
    s = leaf(0.0)
    g = np.arange(6.0).reshape(2, 3)
    (a + b + c + d + s).backward(g)
    assert a.grad.shape == (2, 3) and b.grad.shape == (1, 3) and c.grad.shape == (3,)
    assert d.grad.shape == (2, 1) and s.grad.shape == ()
    np.testing.assert_allclose(b.grad.numpy(), [[3.0, 5.0, 7.0]])
    np.testing.assert_allclose(c.grad.numpy(), [3.0, 5.0, 7.0])
    np.testing.assert_allclose(d.grad.numpy(), [[3.0], [12.0]])
    np.testing.assert_allclose(s.grad.numpy(), 15.0)


def test_unbroadcast_directly():
    from tinytorch.core.autograd import unbroadcast

    g = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_allclose(unbroadcast(g, (4,)), g.sum(axis=(0, 1)))
    np.testing.assert_allclose(unbroadcast(g, (3, 1)), g.sum(axis=(0, 2))[:, None])
    np.testing.assert_allclose(unbroadcast(g, (1, 1, 1)), g.sum(keepdims=True))
    np.testing.assert_allclose(unbroadcast(g, ()), g.sum())
    np.testing.assert_allclose(unbroadcast(g, (2, 3, 4)), g)


def test_grad_keeps_dtype_and_shape_float32():
    w = Tensor(np.ones((3, 2), dtype=np.float32), requires_grad=True)
    b = Tensor(np.zeros(2, dtype=np.float32), requires_grad=True)
    x = Tensor(np.ones((4, 3), dtype=np.float32))
    ((x @ w + b) * 2).mean().backward()
    assert w.grad.dtype == np.float32 and w.grad.shape == (3, 2)
    assert b.grad.dtype == np.float32 and b.grad.shape == (2,)
    np.testing.assert_allclose(w.grad.numpy(), np.full((3, 2), 1.0), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0], rtol=1e-6)
    assert x.grad is None  # data does not require a gradient


def test_intermediate_tensors_get_grad_too():
    x = leaf([1.0, 2.0])
    h = x * 3.0
    h.sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [1.0, 1.0])


def test_backward_without_grad_needs_a_single_element():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"\(2,\)"):
        (x * 2).backward()
    (x * 2).sum().reshape(1, 1).backward()  # one element in any shape is fine
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_backward_with_explicit_gradient():
    x = leaf([1.0, 2.0, 3.0])
    (x * x).backward(np.array([1.0, 0.0, -1.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, -6.0])
    with pytest.raises(ValueError):
        (x * x).backward(np.ones(2))


def test_missing_rule_names_the_op():
    x = leaf([1.0])
    y = record_op("no_such_op_for_test", x.data * 2, (x,))
    with pytest.raises(RuntimeError, match="no_such_op_for_test"):
        y.sum().backward()


def test_integer_index_tensor_and_plain_data_get_no_grad():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    idx = Tensor(np.array([1, 1, 0]))
    x[idx].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, 1.0], [2.0, 2.0]])
    assert idx.grad is None


def test_no_grad_records_nothing_and_restores_the_mode():
    from tinytorch.core.autograd import is_grad_enabled, no_grad

    w = leaf([1.0, 2.0])
    with no_grad():
        assert not is_grad_enabled() and GradMode.enabled is False
        y = w * 2 + 1
        with no_grad():
            pass
        assert GradMode.enabled is False  # nested exit restores "off", not "on"
    assert y._node is None and not y.requires_grad
    assert GradMode.enabled is True and is_grad_enabled()
    with pytest.raises(RuntimeError):
        y.sum().backward()  # nothing to differentiate


def test_no_grad_restores_the_mode_after_an_exception():
    from tinytorch.core.autograd import no_grad

    with pytest.raises(ZeroDivisionError):
        with no_grad():
            1 / 0
    assert GradMode.enabled is True
    GradMode.enabled = False
    try:
        with no_grad():
            pass
        assert GradMode.enabled is False  # restores the previous value, whatever it was
    finally:
        GradMode.enabled = True


def test_no_grad_as_a_decorator():
    from tinytorch.core.autograd import no_grad

    @no_grad()
    def step(t):
        assert GradMode.enabled is False
        return t * 2

    w = leaf([1.0])
    assert step(w)._node is None and GradMode.enabled is True


def test_detach_cuts_the_graph():
    x = leaf([1.0, 2.0])
    y = x * 3.0
    d = y.detach()
    assert d._node is None and not d.requires_grad and np.shares_memory(d.data, y.data)
    (d * x).sum().backward()  # d is a constant here
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0])
    assert y.grad is None


def test_registry_and_decorator():
    from tinytorch.core.autograd import BACKWARD_RULES, register_backward

    for op in ["add", "sub", "mul", "div", "pow", "neg", "matmul", "sum", "mean", "max", "exp", "log",
               "sqrt", "reshape", "permute", "getitem", "masked_fill", "to", "relu", "sigmoid", "tanh",
               "gelu", "softmax", "log_softmax", "cross_entropy", "bce_with_logits", "binary_cross_entropy"]:
        assert op in BACKWARD_RULES, op

    @register_backward("triple_for_test")
    def triple_backward(grad, node):
        return (grad * 3,)

    try:
        assert BACKWARD_RULES["triple_for_test"] is triple_backward
        x = leaf([1.0, 2.0])
        record_op("triple_for_test", x.data * 3, (x,)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
    finally:
        del BACKWARD_RULES["triple_for_test"]


def test_rules_that_return_none_skip_that_input():
    from tinytorch.core.autograd import BACKWARD_RULES, register_backward

    register_backward("first_only_for_test")(lambda grad, node: (grad, None))
    try:
        a, b = leaf([1.0]), leaf([2.0])
        record_op("first_only_for_test", a.data + b.data, (a, b)).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), [1.0])
        assert b.grad is None
    finally:
        del BACKWARD_RULES["first_only_for_test"]


def test_gradcheck_passes_a_correct_rule_and_returns_true():
    from tinytorch.core.autograd import gradcheck

    x = leaf(np.random.default_rng(0).standard_normal((2, 3)))
    w = leaf(np.random.default_rng(1).standard_normal((3, 2)))
    assert gradcheck(lambda a, b: (a @ b).exp(), [x, w]) is True


def test_gradcheck_names_the_input_and_index_of_a_wrong_rule():
    from tinytorch.core.autograd import BACKWARD_RULES, gradcheck, register_backward

    def scaled(a, b):
        return record_op("broken_for_test", a.data * b.data, (a, b))

    # right for `a` (d(ab)/da = b), wrong for `b` only at element (1, 2)
    def broken(grad, node):
        a, b = node.inputs
        wrong = grad * a.data
        wrong[1, 2] += 0.5
        return grad * b.data, wrong

    register_backward("broken_for_test")(broken)
    try:
        a = leaf(np.random.default_rng(2).standard_normal((2, 3)))
        b = leaf(np.random.default_rng(3).standard_normal((2, 3)))
        with pytest.raises(AssertionError) as info:
            gradcheck(scaled, [a, b])
    finally:
        del BACKWARD_RULES["broken_for_test"]
    message = str(info.value)
    assert "input 1" in message and "(1, 2)" in message


def test_gradcheck_uses_a_random_cotangent():
    """A softmax rule returning zeros passes with a cotangent of ones; gradcheck must catch it."""
    from tinytorch.core.autograd import BACKWARD_RULES, gradcheck, register_backward

    def my_softmax(x):
        e = np.exp(x.data - x.data.max(axis=-1, keepdims=True))
        return record_op("zero_softmax_for_test", e / e.sum(axis=-1, keepdims=True), (x,))

    register_backward("zero_softmax_for_test")(lambda grad, node: (np.zeros_like(grad),))
    try:
        with pytest.raises(AssertionError):
            gradcheck(my_softmax, [leaf(np.random.default_rng(4).standard_normal((2, 4)))])
    finally:
        del BACKWARD_RULES["zero_softmax_for_test"]


def test_gradcheck_skips_inputs_without_requires_grad():
    from tinytorch.core.autograd import gradcheck

    x = leaf([0.3, -0.7])
    c = Tensor(np.array([2.0, 5.0]))
    assert gradcheck(lambda a, b: a * b, [x, c]) is True
    assert c.grad is None


def test_pow_corner_cases():
    # exponent gradient uses log(base) only where base > 0
    base = leaf([-2.0, 0.0, 2.0])
    exponent = leaf([2.0, 2.0, 2.0])
    (base**exponent).sum().backward()
    np.testing.assert_allclose(base.grad.numpy(), [-4.0, 0.0, 4.0])
    np.testing.assert_allclose(exponent.grad.numpy(), [0.0, 0.0, 4.0 * np.log(2.0)])
    z = leaf([0.0])
    (z**0.0).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0.0])


def test_max_ties_share_the_gradient():
    x = leaf([[1.0, 5.0, 5.0], [2.0, 2.0, 2.0]])
    x.max(axis=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    y = leaf([3.0, 1.0, 3.0])
    y.max().backward()
    np.testing.assert_allclose(y.grad.numpy(), [0.5, 0.0, 0.5])


def test_getitem_repeated_indices_scatter_add():
    x = leaf([10.0, 20.0, 30.0])
    x[np.array([2, 2, 2, 0])].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 3.0])


def test_masked_fill_gives_no_gradient_at_filled_positions():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    x.masked_fill(np.array([[True, False], [False, True]]), -1e9).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 1.0], [1.0, 0.0]])


def test_to_same_device_keeps_gradients_flowing():
    x = leaf([1.0, 2.0])
    (x.to("cpu") * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_to_backward_rule_moves_grad_to_the_saved_device():
    from tinytorch.core.autograd import BACKWARD_RULES
    from tinytorch.core.tensor import Node

    x = leaf([1.0, 2.0])
    (g,) = BACKWARD_RULES["to"](np.array([3.0, 4.0]), Node("to", (x,), {"device": "cpu"}))
    assert isinstance(g, np.ndarray)
    np.testing.assert_allclose(g, [3.0, 4.0])


def test_cross_entropy_rule_from_the_saved_fields():
    """The fused rule on a hand-made node: (probs - onehot) * valid / count."""
    from tinytorch.core.autograd import BACKWARD_RULES
    from tinytorch.core.tensor import Node

    logits = leaf(np.zeros((3, 2)))
    probs = np.array([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]])
    saved = dict(probs=probs, targets=np.array([1, -100, 0]), valid=np.array([True, False, True]), count=2)
    (g,) = BACKWARD_RULES["cross_entropy"](np.asarray(2.0), Node("cross_entropy", (logits,), saved))
    np.testing.assert_allclose(g, [[0.25, -0.25], [0.0, 0.0], [-0.1, 0.1]])


def test_bce_rules_from_the_saved_fields():
    from tinytorch.core.autograd import BACKWARD_RULES
    from tinytorch.core.tensor import Node

    z = leaf([0.0, 2.0])
    t = np.array([1.0, 0.0])
    (g,) = BACKWARD_RULES["bce_with_logits"](np.asarray(1.0), Node("bce_with_logits", (z,), {"targets": t}))
    np.testing.assert_allclose(g, (1 / (1 + np.exp(-z.numpy())) - t) / 2)
    p = leaf([0.2, 0.6, 1.0])
    t = np.array([1.0, 0.0, 1.0])
    node = Node("binary_cross_entropy", (p,), {"targets": t, "eps": 1e-7})
    (g,) = BACKWARD_RULES["binary_cross_entropy"](np.asarray(1.0), node)
    np.testing.assert_allclose(g, [(0.2 - 1) / (0.2 * 0.8) / 3, 0.6 / (0.6 * 0.4) / 3, 0.0])
