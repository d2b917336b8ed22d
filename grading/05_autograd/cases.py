"""Module 05, graded cases: gradients of seeded graphs the visible tests never build.

Each case runs forward and backward on the student's engine (the earlier modules are the
reference's when modules are graded on their own); the grader compares its values and
gradients with the reference's, recorded by `python grading/record_expected.py`.
"""
import weakref

import numpy as np

from tinytorch.core.activations import gelu, log_softmax, relu, sigmoid, softmax, tanh
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck, no_grad, topological_order
from tinytorch.core.losses import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, mse_loss
from tinytorch.core.tensor import OP_LISTENERS, GradMode, Tensor, record_op


def leaf(rng, *shape, dtype=np.float64):
    return Tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)


def _broadcast_chain(rng):
    a, b, c = leaf(rng, 3, 1, 4), leaf(rng, 2, 4), leaf(rng, 4, 5)
    y = ((a * b + a / (b * b + 1.0) - b ** 2) @ c).sum()
    y.backward()
    return {"y": y, "da": a.grad, "db": b.grad, "dc": c.grad}


def _reused_node(rng):
    x = leaf(rng, 4)
    h = x * x
    y = (h + h * x + x.exp() - 2.0 / (h + 1.0)).mean()
    y.backward()
    return {"y": y, "dx": x.grad}


def _accumulation(rng):
    x = leaf(rng, 2, 3)
    (x * 3.0).sum().backward()
    (x * x).sum().backward()
    first = x.grad.numpy().copy()
    x.zero_grad()
    (x ** 3).mean().backward()
    return {"accumulated": first, "after_zero_grad": x.grad}


def _reductions(rng):
    x = leaf(rng, 3, 4, 5)
    y = x.sum(axis=(0, 2), keepdims=True) * x.mean(axis=-1, keepdims=True)  # (3, 4, 1)
    z = (y * x.max(axis=1, keepdims=True)).sum()  # (3, 4, 5)
    z.backward()
    return {"z": z, "dx": x.grad}


def _max_ties(rng):
    x = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.5, -1.0, 0.25]]) * rng.uniform(1, 2), requires_grad=True)
    (x.max(axis=1) * Tensor(np.array([1.0, 2.0, 3.0]))).sum().backward()
    return {"dx": x.grad}


def _shape_ops(rng):
    x = leaf(rng, 2, 3, 4)
    mask = rng.random((3, 6)) > 0.6
    y = x.permute(2, 0, 1).reshape(4, 6)[np.array([3, 1, 1])].masked_fill(mask, 0.0).transpose()
    (y * Tensor(rng.standard_normal((6, 3)))).sum().backward()
    return {"y": y, "dx": x.grad}


def _activations(rng):
    x = leaf(rng, 3, 5)
    weights = Tensor(rng.standard_normal((3, 5)))
    y = (relu(x) + sigmoid(x) * tanh(x) + gelu(x) + softmax(x, dim=0) + log_softmax(x, dim=-1)) * weights
    y.sum().backward()
    return {"y": y, "dx": x.grad}


def _losses(rng):
    logits, pred = leaf(rng, 2, 3, 5), leaf(rng, 4, 2)
    targets = rng.integers(0, 5, (2, 3))
    targets[0, 1] = -100
    loss = (cross_entropy(logits, targets, ignore_index=-100) + mse_loss(pred, rng.standard_normal((4, 2)))
            + binary_cross_entropy_with_logits(pred, (rng.random((4, 2)) > 0.5).astype(np.float64)))
    loss.backward()
    return {"loss": loss, "dlogits": logits.grad, "dpred": pred.grad}


def _matmul_vectors(rng):
    v, m, batch = leaf(rng, 4), leaf(rng, 4, 3), leaf(rng, 2, 5, 3, 4)
    y = ((v @ m).sum() + (batch @ v).sum() + (m.transpose() @ v).sum() + (batch @ m).mean())
    y.backward()
    return {"dv": v.grad, "dm": m.grad, "dbatch": batch.grad}


def _deep_chain(rng):
    x = leaf(rng, 3)
    y = x
    for step in range(3000):  # deeper than Python's recursion limit
        y = y * 1.0001 + 0.001 * (step % 3)
    y.sum().backward()
    return {"y": y, "dx": x.grad}


def _float32(rng):
    a, b = leaf(rng, 3, 4, dtype=np.float32), leaf(rng, 4, dtype=np.float32)
    ((a * b).exp().sum(axis=0) * b).sum().backward()
    return {"da": a.grad, "db": b.grad}


def _no_grad_and_detach(rng):
    x = leaf(rng, 3)
    with no_grad():
        frozen = x * 2.0
    y = (x * frozen + x.detach() * x).sum()
    y.backward()
    return {"frozen_requires_grad": [frozen.requires_grad], "dx": x.grad}


def _gradcheck_agrees(rng):
    a, b = leaf(rng, 2, 3), leaf(rng, 3, 2)
    return {"agrees": [bool(gradcheck(lambda p, q: (p @ q).exp().mean(), [a, b]))]}


def _error_name(function) -> str:
    """The name of the exception `function` raised, or "no error"."""
    try:
        function()
    except Exception as error:  # the error is the value this case checks
        return type(error).__name__
    return "no error"


def _engine(rng):
    """What the engine writes where: leaves only (and retain_grad), in each input's dtype, never shared."""
    a32 = Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    b64 = Tensor(rng.standard_normal(3), requires_grad=True)
    (a32 * b64).sum().backward()
    x, y = (Tensor(rng.standard_normal(3), requires_grad=True) for _ in range(2))
    (x + y).sum().backward()
    w = Tensor(rng.standard_normal(4), requires_grad=True)
    hidden, kept = w * 2.0, w * 3.0
    kept.retain_grad()
    (hidden * kept).sum().backward()
    square = w * w
    const = Tensor(rng.standard_normal(4))
    chain = Tensor(rng.standard_normal(4), requires_grad=True)
    link = chain
    for _ in range(6):
        link = (link * 0.5).exp()
    alive = _Alive()
    OP_LISTENERS.append(alive)
    try:
        link.sum().backward()
    finally:
        OP_LISTENERS.remove(alive)
    return {"gradients_released": max(alive.counts) <= 2, "float32_leaf_grad": a32.grad, "float64_leaf_grad": b64.grad,
            "shared_gradient_arrays": np.shares_memory(x.grad.data, y.grad.data),
            "intermediate_has_grad": hidden.grad is not None, "retained_grad": kept.grad,
            "order_of_w_times_w": len(topological_order(square)), "order_with_a_constant": len(topological_order(w * const))}


def _rule_corners(rng):
    """Rules at their edges: pow at a zero exponent, relu at 0, float16 binary cross-entropy at p = 1, sum over
    one axis of a square matrix (which axis comes back matters)."""
    base, exponent = Tensor(np.array([0.0, 2.0, 1.5]), requires_grad=True), Tensor(np.array([0.0, 2.0, 0.0]), requires_grad=True)
    (base ** exponent).sum().backward()
    r = Tensor(np.array([0.0, 1.0, -1.0, 0.0]), requires_grad=True)
    relu(r).sum().backward()
    p = Tensor(np.array([1.0, 0.25, 0.0], dtype=np.float16), requires_grad=True)
    binary_cross_entropy(p, Tensor(np.array([1.0, 0.0, 0.0], dtype=np.float16))).backward()
    square = Tensor(rng.standard_normal((4, 4)), requires_grad=True)
    (square.sum(axis=1) * Tensor(rng.standard_normal(4))).sum().backward()
    return {"pow_base": base.grad, "pow_exponent": exponent.grad, "relu_at_zero": r.grad, "bce_float16": p.grad,
            "sum_axis_1_square": square.grad}


def _no_grad_modes(rng):
    """no_grad restores the mode it found: nested, entered twice, and as a decorator that raises."""
    found = {}
    with no_grad():
        with no_grad():
            pass
        found["after_nested_inner"] = GradMode.enabled
    found["after_nested"] = GradMode.enabled
    same = no_grad()
    with same:
        with same:
            pass
        found["after_twice_inner"] = GradMode.enabled
    found["after_twice"] = GradMode.enabled

    @no_grad()
    def fails():
        raise KeyError("on purpose")

    found["decorated_error"] = _error_name(fails)
    found["after_decorated_error"] = GradMode.enabled
    x = Tensor(rng.standard_normal(2), requires_grad=True)
    found["records_after"] = (x * 2.0)._node is not None
    return found


def _with_rule(op: str, rule):
    """Make `op` (with `rule` as its backward) for this case only."""
    BACKWARD_RULES[op] = rule
    return lambda *inputs: record_op(op, _softmax(inputs[0].data), inputs)


def _softmax(data):
    e = np.exp(data - data.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _gradcheck_catches(rng):
    """gradcheck on wrong rules (a zero rule that a cotangent of ones hides, a rule wrong for the second input
    only, a rule of the wrong shape) and on float32 inputs (it must check in float64 copies)."""
    found = {}
    try:
        zero = _with_rule("graded_case_zero_softmax", lambda grad, node: (np.zeros_like(grad),))
        found["zero_rule"] = _error_name(lambda: gradcheck(zero, [Tensor(rng.standard_normal((2, 4)),
                                                                          requires_grad=True)]))
        BACKWARD_RULES["graded_case_second_wrong"] = lambda grad, node: (grad * node.inputs[1].data,
                                                                           np.zeros(node.inputs[1].shape))

        def product(a, b):  # a * b, whose rule gives b no gradient
            return record_op("graded_case_second_wrong", a.data * b.data, (a, b))

        found["second_input_wrong"] = _error_name(lambda: gradcheck(
            product, [Tensor(rng.standard_normal((2, 3)), requires_grad=True),
                      Tensor(rng.standard_normal((2, 3)), requires_grad=True)]))
        bad_shape = _with_rule("graded_case_bad_shape", lambda grad, node: (grad.sum(axis=0),))
        y = bad_shape(Tensor(rng.standard_normal((3, 2)), requires_grad=True))
        found["rule_of_wrong_shape"] = _error_name(lambda: y.sum().backward())
    finally:
        for op in ("graded_case_zero_softmax", "graded_case_second_wrong", "graded_case_bad_shape"):
            BACKWARD_RULES.pop(op, None)
    heard = _Heard()
    OP_LISTENERS.append(heard)
    try:
        a, b = (Tensor(rng.standard_normal(3), requires_grad=True) for _ in range(2))
        (a * b).sum().backward()
    finally:
        OP_LISTENERS.remove(heard)
    found["rules_heard"] = heard.rules
    x32 = Tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)
    found["float32_inputs"] = gradcheck(lambda t: (t * t * t).exp().sum(), [x32])
    found["float32_grad_untouched"] = x32.grad is None
    return found


class _Alive:
    """A listener that counts, as each rule starts, how many gradients handed to earlier rules are still alive:
    the engine keeps a gradient only until its rule has run (a chain of 13 ops must not keep 12)."""

    def __init__(self):
        self.refs, self.counts = [], []

    def op_recorded(self, op, out, inputs, saved):
        pass

    def rule_started(self, node, grad):
        self.counts.append(sum(ref() is not None for ref in self.refs))
        self.refs.append(weakref.ref(grad))

    def rule_finished(self, node, grad, grads):
        pass


class _Heard:
    """A listener (tinytorch.core.tensor.OP_LISTENERS, as the profiler is): the rules the engine ran, in order."""

    def __init__(self):
        self.rules = []

    def op_recorded(self, op, out, inputs, saved):
        pass

    def rule_started(self, node, grad):
        self.rules.append(node.op)

    def rule_finished(self, node, grad, grads):
        pass


CASES = {
    "broadcast-chain": (_broadcast_chain, "gradients of ((a*b + a/(b*b+1) - b**2) @ c).sum() with broadcasting"),
    "reused-node": (_reused_node, "a tensor used several times gets every contribution"),
    "accumulation": (_accumulation, "gradients accumulate across backward() calls; zero_grad clears them"),
    "reductions": (_reductions, "gradients through sum/mean/max with axis tuples and keepdims"),
    "max-ties": (_max_ties, "max over an axis with ties shares the gradient equally"),
    "shape-ops": (_shape_ops, "gradients through permute, reshape, indexing, masked_fill and transpose"),
    "activations": (_activations, "gradients through relu, sigmoid, tanh, gelu, softmax, log_softmax"),
    "losses": (_losses, "gradients of cross_entropy (with ignore_index), mse and bce_with_logits"),
    "matmul-vectors": (_matmul_vectors, "matmul gradients with 1-D operands and broadcast batches"),
    "deep-chain": (_deep_chain, "backward through a 3,000-op chain (no recursion)"),
    "float32-gradients": (_float32, "float32 leaves get float32 gradients"),
    "no-grad-detach": (_no_grad_and_detach, "no_grad records nothing; detach stops the gradient"),
    "gradcheck": (_gradcheck_agrees, "gradcheck returns True for a correct op"),
    "engine-writes": (_engine, "the engine writes .grad on leaves (and retain_grad) only, in each input's dtype, "
                               "never one array for two tensors, each released once its rule ran; topological order "
                               "lists each tensor once"),
    "rule-corners": (_rule_corners, "pow at a zero exponent, relu at 0, float16 binary cross-entropy at p = 1, "
                                    "sum over one axis of a square matrix"),
    "no-grad-modes": (_no_grad_modes, "no_grad restores the mode it found: nested, entered twice, decorator that raises"),
    "gradcheck-catches": (_gradcheck_catches, "gradcheck catches a zero rule, a rule wrong for the second input, "
                                              "a rule of the wrong shape, and checks float32 inputs in float64; "
                                              "the engine runs each rule through apply_rule (listeners hear it)"),
}

