"""Each backward rule on its own, by hand: the rule is called directly on a recorded node.

No engine here (no `.backward()`): a failure points at one rule, and its message names
what the rule got wrong (input order, a missing transpose, lost axes, ties, ...).
The values are small enough to check by hand; the op table in test_gradients.py then
checks every rule against central differences.
"""
import numpy as np
import pytest

from tinytorch.core.tensor import Node, Tensor


def rule(op):
    from tinytorch.core.autograd import BACKWARD_RULES

    assert op in BACKWARD_RULES, f"no backward rule registered for op {op!r}: @register_backward({op!r})"
    return BACKWARD_RULES[op]


def leaf(values, dtype=np.float64):
    return Tensor(np.array(values, dtype=dtype), requires_grad=True)


def as_list(grads):
    return [None if g is None else np.asarray(g).tolist() for g in grads]


# ---- arithmetic -------------------------------------------------------------------------
def test_add_and_sub_return_one_gradient_per_input():
    a, b = leaf([3.0]), leaf([2.0])
    g = np.array([1.5])
    assert as_list(rule("add")(g, (a + b)._node)) == [[1.5], [1.5]], "add: returns (g, g)"
    assert as_list(rule("sub")(g, (a - b)._node)) == [[1.5], [-1.5]], \
        "sub: returns (g, -g) in node.inputs order (a, b): the second input is subtracted"


def test_reflected_sub_records_the_constant_first():
    w = leaf([2.0])
    node = (1.0 - w)._node  # w.__rsub__(1.0): inputs (1, w)
    assert node.inputs[1] is w
    grads = rule("sub")(np.array([1.0]), node)
    assert np.asarray(grads[1]).tolist() == [-1.0], "1 - w: w is input 1 and gets -g"


def test_mul_rule():
    a, b = leaf([3.0, -1.0]), leaf([2.0, 5.0])
    assert as_list(rule("mul")(np.array([1.0, 2.0]), (a * b)._node)) == [[2.0, 10.0], [3.0, -2.0]], \
        "mul: returns (g·b, g·a): each input gets the *other* input times g"


def test_div_rule_returns_gradients_in_input_order():
    a, b = leaf([3.0]), leaf([2.0])
    got = as_list(rule("div")(np.ones(1), (a / b)._node))
    assert np.allclose(got, [[0.5], [-0.75]]), (
        f"div rule returned {got}, expected [[0.5], [-0.75]]: for q = a / b it must return "
        "(g / b, -g·a / b²) in node.inputs order (a, b)"
    )


def test_pow_rule_by_hand():
    a, b = leaf([3.0]), leaf([2.0])
    ga, gb = rule("pow")(np.ones(1), (a**b)._node)
    assert np.allclose(ga, [6.0]), "pow: d(a^b)/da = b·a^(b-1)"
    assert np.allclose(gb, [9.0 * np.log(3.0)]), "pow: d(a^b)/db = a^b·ln a"
    base = leaf([0.0, -2.0])
    ga, _ = rule("pow")(np.ones(2), (base ** Tensor(np.array([0.0, 2.0])))._node)
    assert np.allclose(ga, [0.0, -4.0]), "pow: slope 0 where the exponent is 0 (a^0 = 1 is constant)"


def test_neg_rule():
    assert as_list(rule("neg")(np.array([1.0, -2.0]), (-leaf([1.0, 1.0]))._node)) == [[-1.0, 2.0]]


# ---- matmul -------------------------------------------------------------------------------
def test_matmul_rule_transposes_the_other_operand():
    # square matrices: a rule without the transposes runs, and gives these wrong numbers
    A = leaf([[1.0, 2.0], [3.0, 4.0]])
    B = leaf([[0.0, 1.0], [5.0, 7.0]])
    G = np.array([[1.0, 0.0], [0.0, 0.0]])
    dA, dB = rule("matmul")(G, (A @ B)._node)
    assert np.allclose(dA, G @ B.numpy().T), "matmul backward: dA = G @ Bᵀ (transpose B)"
    assert np.allclose(dB, A.numpy().T @ G), "matmul backward: dB = Aᵀ @ G (transpose A)"


def test_matmul_rule_rectangular_and_batched():
    A, B = leaf([[1.0, 2.0]]), leaf([[3.0], [4.0]])
    dA, dB = rule("matmul")(np.ones((1, 1)), (A @ B)._node)
    assert np.allclose(dA, [[3.0, 4.0]]) and np.allclose(dB, [[1.0], [2.0]])
    rng = np.random.default_rng(0)
    X, W = leaf(rng.standard_normal((2, 3, 4))), leaf(rng.standard_normal((4, 5)))
    G = rng.standard_normal((2, 3, 5))
    dX, dW = rule("matmul")(G, (X @ W)._node)
    assert np.allclose(dX, G @ W.numpy().T)
    # one weight shared by the batch: its gradient sums over the batch (here or in unbroadcast)
    assert np.allclose(np.asarray(dW).reshape(-1, 4, 5).sum(axis=0), np.einsum("bmk,bmn->kn", X.numpy(), G))


def test_matmul_rule_with_vectors():
    v, M = leaf([1.0, 2.0]), leaf([[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]])
    dv, dM = rule("matmul")(np.array([1.0, 1.0, 1.0]), (v @ M)._node)
    assert np.asarray(dv).shape == (2,) and np.allclose(dv, [3.0, 4.0]), "a 1-D operand gets a 1-D gradient"
    assert np.allclose(dM, [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    u, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    du, dw = rule("matmul")(np.asarray(2.0), (u @ w)._node)  # vector @ vector: a 0-d output
    assert np.allclose(du, [6.0, 8.0]) and np.allclose(dw, [2.0, 4.0]), \
        "vector @ vector: the 0-d gradient needs both axes back (right operand first); 1-D gradients"


# ---- reductions ---------------------------------------------------------------------------------
def test_sum_rule_puts_the_reduced_axes_back():
    x = leaf(np.zeros((3, 3)))  # square: broadcasting (3,) against (3, 3) would not even fail
    (g,) = rule("sum")(np.array([1.0, 2.0, 3.0]), x.sum(axis=1)._node)
    assert np.allclose(g, [[1.0] * 3, [2.0] * 3, [3.0] * 3]), (
        "sum backward: put the reduced axes back (size 1, as keepdims would) before broadcasting "
        "to the input's shape; row i of x summed into output i"
    )


def test_sum_rule_all_axes_and_keepdims():
    x = leaf(np.zeros((2, 3)))
    (g,) = rule("sum")(np.asarray(2.0), x.sum()._node)
    assert np.asarray(g).shape == (2, 3) and np.allclose(g, 2.0)
    (g,) = rule("sum")(np.array([[1.0, 2.0, 3.0]]), x.sum(axis=0, keepdims=True)._node)
    assert np.allclose(g, [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])


def test_mean_rule_divides_by_the_count_of_each_average():
    x = leaf(np.zeros((2, 3)))
    (g,) = rule("mean")(np.array([3.0, 6.0]), x.mean(axis=1)._node)
    assert np.allclose(g, [[1.0] * 3, [2.0] * 3]), (
        "mean backward: divide by the number of elements in each average (3 here), "
        "not by the input's total size"
    )
    (g,) = rule("mean")(np.asarray(6.0), x.mean()._node)
    assert np.allclose(g, 1.0)


def test_max_rule_splits_ties_equally():
    x = leaf([[1.0, 3.0, 3.0], [4.0, 0.0, 2.0]])
    (g,) = rule("max")(np.array([1.0, 2.0]), x.max(axis=1)._node)
    assert np.allclose(g, [[0.0, 0.5, 0.5], [2.0, 0.0, 0.0]]), (
        f"max backward gave {np.asarray(g).tolist()}: tied maxima share the gradient equally "
        "(two winners get half each); only maxima get any"
    )


# ---- elementwise, shapes, indexing ------------------------------------------------------------------
def test_exp_log_sqrt_rules():
    x = leaf([0.5, 2.0])
    assert np.allclose(rule("exp")(np.ones(2), x.exp()._node)[0], np.exp([0.5, 2.0])), "exp: g · out"
    assert np.allclose(rule("log")(np.ones(2), x.log()._node)[0], [2.0, 0.5]), "log: g / x"
    assert np.allclose(rule("sqrt")(np.ones(2), x.sqrt()._node)[0], 0.5 / np.sqrt([0.5, 2.0])), "sqrt: g / (2·out)"


def test_reshape_rule():
    x = leaf(np.zeros((2, 3)))
    (g,) = rule("reshape")(np.arange(6.0).reshape(3, 2), x.reshape(3, 2)._node)
    assert np.array_equal(g, np.arange(6.0).reshape(2, 3))


def test_permute_rule_applies_the_inverse_permutation():
    x = leaf(np.zeros((2, 3, 4)))
    out = x.permute(2, 0, 1)  # shape (4, 2, 3): a 3-cycle is not its own inverse
    upstream = np.arange(24.0).reshape(4, 2, 3)
    (g,) = rule("permute")(upstream, out._node)
    assert np.asarray(g).shape == (2, 3, 4) and np.array_equal(g, upstream.transpose(1, 2, 0)), (
        "permute backward: apply the inverse permutation (np.argsort(dims)), not dims again"
    )


def test_getitem_rule_scatter_adds_repeated_indices():
    x = leaf([10.0, 20.0, 30.0])
    (g,) = rule("getitem")(np.ones(4), x[np.array([2, 2, 2, 0])]._node)
    assert np.allclose(g, [1.0, 0.0, 3.0]), (
        f"getitem backward gave {np.asarray(g).tolist()}: repeated indices must add up "
        "(scatter-add with _scatter_add, not assignment)"
    )
    y = leaf(np.zeros((3, 2)))
    (g,) = rule("getitem")(np.ones(2), y[1:, 0]._node)
    assert np.allclose(g, [[0, 0], [1, 0], [1, 0]])


def test_masked_fill_rule():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    (g,) = rule("masked_fill")(np.ones((2, 2)), x.masked_fill(np.array([True, False]), 0.0)._node)
    assert np.allclose(g, [[0.0, 1.0], [0.0, 1.0]]), "masked_fill: filled positions (mask True) get 0"


def test_to_rule_moves_grad_to_the_saved_device():
    x = leaf([1.0, 2.0])
    (g,) = rule("to")(np.array([3.0, 4.0]), Node("to", (x,), {"device": "cpu"}))
    assert isinstance(g, np.ndarray) and np.allclose(g, [3.0, 4.0])


# ---- activations -----------------------------------------------------------------------------------
def test_activation_rules_by_formula():
    from tinytorch.core import activations as act

    xs = np.array([-1.5, -0.2, 0.3, 2.0])
    x = leaf(xs)
    g = np.array([1.0, 2.0, -1.0, 0.5])
    s = 1 / (1 + np.exp(-xs))
    assert np.allclose(rule("relu")(g, act.relu(x)._node)[0], g * (xs > 0)), "relu: g where x > 0, else 0"
    assert np.allclose(rule("sigmoid")(g, act.sigmoid(x)._node)[0], g * s * (1 - s)), "sigmoid: g·σ(1-σ)"
    assert np.allclose(rule("tanh")(g, act.tanh(x)._node)[0], g * (1 - np.tanh(xs) ** 2)), "tanh: g·(1-tanh²)"
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (xs + 0.044715 * xs**3))
    slope = 0.5 * (1 + t) + 0.5 * xs * (1 - t * t) * c * (1 + 3 * 0.044715 * xs**2)
    assert np.allclose(rule("gelu")(g, act.gelu(x)._node)[0], g * slope), "gelu: the tanh approximation's slope"


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_rules_equal_the_jacobian(op):
    from tinytorch.core import activations as act

    xs = np.array([[0.5, -1.0, 2.0], [0.0, 0.1, -0.3]])
    g = np.array([[1.0, -2.0, 0.5], [0.3, 0.0, 1.0]])
    out = getattr(act, op)(leaf(xs), dim=-1)
    (got,) = rule(op)(g, out._node)
    for row in range(2):
        s = np.exp(xs[row]) / np.exp(xs[row]).sum()
        jacobian = np.diag(s) - np.outer(s, s) if op == "softmax" else np.eye(3) - s[None, :]
        assert np.allclose(got[row], g[row] @ jacobian), f"{op} backward row {row}: g @ Jacobian"


# ---- losses --------------------------------------------------------------------------------------------
def test_cross_entropy_rule_from_the_saved_fields():
    """The saved fields as module 04 records them: ignored targets already replaced by 0."""
    logits = leaf(np.zeros((3, 2)))
    probs = np.array([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]])
    saved = dict(probs=probs, targets=np.array([1, 0, 0]), valid=np.array([True, False, True]), count=2)
    (g,) = rule("cross_entropy")(np.asarray(2.0), Node("cross_entropy", (logits,), saved))
    assert np.allclose(g, [[0.25, -0.25], [0.0, 0.0], [-0.1, 0.1]]), (
        f"cross_entropy backward gave {np.asarray(g).tolist()}: (probs - onehot(targets)) · valid / count "
        "times g; ignored positions (valid False) must get zero gradient"
    )


def test_cross_entropy_rule_through_the_forward_with_ignored_targets():
    from tinytorch.core import losses

    z = leaf([[2.0, 0.0], [0.0, 0.0]])
    loss = losses.cross_entropy(z, np.array([0, -100]), ignore_index=-100)
    (g,) = rule("cross_entropy")(np.asarray(1.0), loss._node)
    p = np.exp(2.0) / (np.exp(2.0) + 1)
    assert np.allclose(g, [[p - 1, 1 - p], [0.0, 0.0]]), \
        "cross_entropy backward: ignored positions (valid False) must get zero gradient"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_bce_with_logits_rule_at_extreme_logits(dtype):
    from tinytorch.core import losses

    zs = np.array([-100.0, -20.0, 0.0, 20.0, 100.0])
    ts = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    loss = losses.binary_cross_entropy_with_logits(Tensor(zs.astype(dtype), requires_grad=True), ts)
    (g,) = rule("bce_with_logits")(np.asarray(1.0, dtype=dtype), loss._node)
    expected = (1 / (1 + np.exp(-zs)) - ts) / zs.size
    assert np.isfinite(np.asarray(g, dtype=np.float64)).all(), f"bce_with_logits backward is not finite in {dtype}"
    assert np.allclose(np.asarray(g, dtype=np.float64), expected, atol=1e-3), (
        f"bce_with_logits backward gave {np.asarray(g).tolist()}, expected (σ(z) - t) / N = {expected.tolist()}: "
        "the mean over N elements"
    )


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_binary_cross_entropy_rule_at_p_0_and_1(dtype):
    from tinytorch.core import losses

    ps = np.array([0.0, 1.0, 1.0, 0.5, 0.25])
    ts = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    loss = losses.binary_cross_entropy(Tensor(ps.astype(dtype), requires_grad=True), ts)
    (g,) = rule("binary_cross_entropy")(np.asarray(1.0, dtype=dtype), loss._node)
    g = np.asarray(g, dtype=np.float64)
    assert np.isfinite(g).all(), (
        f"binary_cross_entropy backward is {g.tolist()} in {np.dtype(dtype).name}: at p = 0 or 1 the clip is active "
        "and the gradient is 0, but in float16 1 - eps rounds to 1 and p(1 - p) is 0: compute in float32"
    )
    expected = np.array([0.0, 0.0, 0.0, (0.5 - 1) / 0.25 / 5, 0.25 / (0.25 * 0.75) / 5])
    assert np.allclose(g, expected, atol=2e-3), f"binary_cross_entropy backward gave {g.tolist()}"


@pytest.mark.parametrize("shape_a, shape_b", [((2, 3, 4), (4, 5)), ((2, 2, 3, 4), (4, 5)),
                                              ((0, 3, 4), (4, 5)), ((2, 3, 0), (0, 5)), ((2, 3, 4), (4, 0))])
def test_batch_times_one_matrix_matches_one_product_per_item(shape_a, shape_b):
    """(…, m, k) @ (k, n) is computed folded into one (…·m, k) product, forward and backward:
    it must give what one product per batch item gives, empty batches and sizes included."""
    rng = np.random.default_rng(3)
    a_data, b_data = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    g = rng.standard_normal(shape_a[:-1] + shape_b[-1:])
    a, b = Tensor(a_data, requires_grad=True), Tensor(b_data, requires_grad=True)
    out = a @ b
    out.backward(g)
    np.testing.assert_allclose(out.numpy(), np.matmul(a_data, b_data), atol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), np.matmul(g, b_data.T), atol=1e-12)
    batch = int(np.prod(shape_a[:-2]))
    expected_b = np.matmul(np.swapaxes(a_data, -1, -2), g).reshape((batch,) + shape_b).sum(axis=0)
    np.testing.assert_allclose(b.grad.numpy(), expected_b, atol=1e-12)
