"""The engine and its contract: what every later module relies on.

unbroadcast, topological order, accumulation, `.grad` on leaves only (and retain_grad),
`.grad` as its own array, the dtype cast, the errors that name the op (missing rule, a
rule's wrong shape, `.data` changed since the forward pass), intermediate gradients
released, no_grad, detach and gradcheck. Messages name the cause of a failure.
"""
import weakref

import numpy as np
import pytest

from tinytorch.core.tensor import GradMode, Tensor, record_op


def leaf(values, dtype=np.float64):
    return Tensor(np.array(values, dtype=dtype), requires_grad=True)


@pytest.fixture
def temporary_rules():
    """Register rules for made-up ops inside a test; they are removed afterwards."""
    from tinytorch.core.autograd import BACKWARD_RULES, register_backward

    added = []

    def add(op, fn):
        register_backward(op)(fn)
        added.append(op)

    yield add
    for op in added:
        BACKWARD_RULES.pop(op, None)


# ---- unbroadcast and the order of the walk ------------------------------------------------
def test_unbroadcast_sums_leading_and_size_one_axes():
    from tinytorch.core.autograd import unbroadcast

    g = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_allclose(unbroadcast(g, (2, 3, 4)), g)
    np.testing.assert_allclose(unbroadcast(g, (4,)), g.sum(axis=(0, 1)),
                               err_msg="unbroadcast: sum away the leading dimensions the input lacks")
    np.testing.assert_allclose(unbroadcast(g, (3, 1)), g.sum(axis=(0, 2))[:, None],
                               err_msg="unbroadcast: also sum (keepdims) every axis where the input has size 1")
    np.testing.assert_allclose(unbroadcast(g, (1, 1, 1)), g.sum(keepdims=True),
                               err_msg="unbroadcast: also sum (keepdims) every axis where the input has size 1")
    np.testing.assert_allclose(unbroadcast(g, ()), g.sum())
    assert unbroadcast(g.astype(np.float32), (4,)).dtype == np.float32, "unbroadcast keeps the gradient's dtype"


def test_topological_order_lists_each_tensor_once():
    from tinytorch.core.autograd import topological_order

    x = leaf([1.0, 2.0])
    h = x * x  # x is both inputs of one node
    y = h * h + h  # h reached along three edges
    order = topological_order(y)
    ids = [id(t) for t in order]
    assert len(ids) == len(set(ids)), (
        f"topological_order lists {len(ids)} entries for {len(set(ids))} tensors: a tensor reached "
        "along two paths must appear once (mark each tensor visited when you first expand it)"
    )
    assert len(order) == 4 and order[-1] is y


def test_topological_order_puts_inputs_before_outputs():
    from tinytorch.core.autograd import topological_order

    x, w = leaf([1.0]), leaf([2.0])
    c = Tensor(np.array([3.0]))  # no requires_grad: no gradient flows to it
    a = x * w
    b = a + x
    y = (b * a) * c
    order = topological_order(y)
    where = {id(t): i for i, t in enumerate(order)}
    for t in order:
        if t._node is not None:
            for inp in t._node.inputs:
                if inp.requires_grad:
                    assert where[id(inp)] < where[id(t)], "every tensor must come after all of its inputs"
    assert id(c) not in where, "tensors without requires_grad are not part of the backward walk"


def test_deep_chain_of_10000_ops_needs_no_recursion():
    x = leaf([0.5])
    y = x
    for _ in range(10_000):
        y = y * 1.0 + 0.0
    try:
        y.sum().backward()
    except RecursionError:
        pytest.fail("backward of a 10,000-op chain hit RecursionError: topological_order must use an "
                    "explicit stack, not recursion")
    np.testing.assert_allclose(x.grad.numpy(), [1.0])


# ---- accumulation ----------------------------------------------------------------------------------
def test_x_times_x_plus_x_gives_2x_plus_1():
    x = leaf([1.0, -2.0, 0.5, 3.0])
    (x * x + x).sum().backward()
    np.testing.assert_allclose(
        x.grad.numpy(), 2 * x.numpy() + 1,
        err_msg="x is used three times in x*x + x: a tensor used twice gets the SUM of its contributions "
                "(add into the pending gradient, don't overwrite it)")


def test_a_node_used_twice_gets_both_contributions():
    x = leaf([2.0, 3.0])
    y = x.exp()  # y feeds two branches
    z = (y * 2.0 + y.log()).sum()  # d/dx = 2 e^x + 1
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([2.0, 3.0]) + 1,
                               err_msg="a tensor used twice gets the SUM of its contributions")


def test_diamond_graph_runs_each_rule_once_with_complete_gradient():
    x = leaf([1.5])
    a, b = x * 3.0, x * x
    (a * b).sum().backward()  # 3x * x² = 3x³ -> 9x²
    np.testing.assert_allclose(x.grad.numpy(), 9 * 1.5**2)


def test_two_backward_calls_accumulate_and_zero_grad_resets():
    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0],
                               err_msg="a second backward() adds to .grad (until zero_grad)")
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


# ---- .grad: its own array, on leaves only ------------------------------------------------------
def test_grad_is_a_separate_array_per_tensor():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()  # add hands the same array to a and b
    assert isinstance(a.grad, Tensor) and isinstance(b.grad, Tensor)
    assert not np.shares_memory(a.grad.data, b.grad.data), (
        ".grad must hold its own array: a and b got the same array from add's rule (store a copy)"
    )
    a.grad.data *= 10  # an optimizer scaling one gradient must not touch the other
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])


def test_grad_does_not_alias_the_callers_gradient():
    x = leaf([1.0, 2.0, 3.0])
    upstream = np.array([1.0, 1.0, 1.0])
    x.backward(upstream)  # x is a leaf: its gradient is the seed itself
    upstream[0] = 100.0
    assert x.grad.numpy().tolist() == [1.0, 1.0, 1.0], \
        ".grad must hold its own array, not the caller's gradient buffer (store a copy)"


def test_only_leaves_get_grad():
    x = leaf([1.0, 2.0])
    h = x * 3.0
    y = h.exp()
    y.sum().backward()
    assert x.grad is not None
    assert h.grad is None and y.grad is None, (
        "only leaves get .grad (as in PyTorch): an intermediate keeps its gradient only after "
        "retain_grad()"
    )


def test_retain_grad_keeps_an_intermediate_gradient():
    x = leaf([1.0, 2.0])
    h = x * 3.0
    h.retain_grad()
    (h * h).sum().backward()
    assert h.grad is not None, "a tensor that called retain_grad() must get .grad"
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 18 * x.numpy())
    y = h.exp()  # used twice, retained: its .grad is the sum of both uses
    y.retain_grad()
    (y * 2.0 + y.log()).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 2 + 1 / y.numpy())
    assert h.is_leaf is False and x.is_leaf is True


def test_intermediate_gradients_are_released_during_backward(temporary_rules):
    """x -> h -> y -> z: y's gradient must be gone by the time h's rule runs."""
    seen = {}

    def rule_of_y(grad, node):  # grad is y's gradient, a fresh array made by z's rule
        seen["y's gradient"] = weakref.ref(grad)
        return (grad * 1.0,)

    def rule_of_h(grad, node):
        seen["alive while h's rule runs"] = seen["y's gradient"]() is not None
        return (grad * 1.0,)

    temporary_rules("release_z_for_test", lambda grad, node: (grad * 1.0,))
    temporary_rules("release_y_for_test", rule_of_y)
    temporary_rules("release_h_for_test", rule_of_h)
    x = leaf([1.0, 2.0])
    h = record_op("release_h_for_test", x.data * 1, (x,))
    y = record_op("release_y_for_test", h.data * 1, (h,))
    z = record_op("release_z_for_test", y.data * 1, (y,))
    z.backward(np.array([1.0, 1.0]))
    assert seen["alive while h's rule runs"] is False, (
        "y's gradient was still held while the rules further back ran: release each "
        "intermediate gradient once its rule has run (grads.pop)"
    )
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])


# ---- dtypes and shapes --------------------------------------------------------------------------------
def test_gradients_are_cast_to_each_inputs_dtype_float16():
    half = Tensor(np.array([0.5, -1.0, 2.0], dtype=np.float16), requires_grad=True)
    single = Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), requires_grad=True)
    product = half * single  # float16 · float32 -> float32
    assert product.dtype == np.float32
    product.sum().backward()
    assert half.grad.dtype == np.float16, (
        f"a float16 tensor got a {half.grad.dtype} gradient: cast each input gradient to its input's "
        "dtype (ig.astype(inp.dtype, copy=False))"
    )
    assert single.grad.dtype == np.float32
    np.testing.assert_allclose(half.grad.numpy().astype(np.float32), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(single.grad.numpy(), half.numpy().astype(np.float32))


def test_float16_gradients_stay_float16_through_a_layer():
    from tinytorch.core import losses

    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((4, 3)).astype(np.float16), requires_grad=True)
    x = Tensor(rng.standard_normal((5, 4)).astype(np.float32))
    logits = x @ w  # float32 result
    losses.cross_entropy(logits, np.array([0, 1, 2, 1, 0])).backward()
    assert w.grad.dtype == np.float16 and w.grad.shape == (4, 3), \
        "cast each input gradient to its input's dtype: w is float16"
    assert np.isfinite(w.grad.numpy()).all()


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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_binary_cross_entropy_backward_is_finite_at_the_extremes(dtype):
    from tinytorch.core import losses

    p = Tensor(np.array([0.0, 1.0, 1.0, 0.5], dtype=dtype), requires_grad=True)
    losses.binary_cross_entropy(p, np.array([0.0, 1.0, 0.0, 1.0])).backward()
    assert p.grad.dtype == dtype
    got = p.grad.numpy().astype(np.float64)
    assert np.isfinite(got).all(), f"binary_cross_entropy backward gave {got.tolist()} in {np.dtype(dtype).name}"
    np.testing.assert_allclose(got, [0.0, 0.0, 0.0, -0.5], atol=2e-3)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_bce_with_logits_backward_at_extreme_logits(dtype):
    from tinytorch.core import losses

    z = Tensor(np.array([-1e4, -30.0, 0.0, 30.0, 1e4], dtype=dtype), requires_grad=True)
    t = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    losses.BCEWithLogitsLoss()(z, t).backward()
    assert z.grad.dtype == dtype
    got = z.grad.numpy().astype(np.float64)
    assert np.isfinite(got).all(), f"bce_with_logits backward gave {got.tolist()} in {np.dtype(dtype).name}"
    np.testing.assert_allclose(got, np.array([-1.0, 0.0, 0.0, 0.0, 1.0]) / 5, atol=1e-3)


# ---- errors that name the op ---------------------------------------------------------------------------
class RuleWatcher:
    """A listener (module 01's OP_LISTENERS) that notes every event the engine reports."""

    def __init__(self):
        self.events = []

    def op_recorded(self, op, out, inputs, saved):
        self.events.append(("forward", op))

    def rule_started(self, node, grad):
        self.events.append(("started", node.op))

    def rule_finished(self, node, grad, grads):
        self.events.append(("finished", node.op, len(grads)))


def test_every_rule_runs_through_apply_rule():
    from tinytorch.core.tensor import OP_LISTENERS

    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    loss = (x * w + x).sum()
    watcher = RuleWatcher()
    OP_LISTENERS.append(watcher)
    try:
        loss.backward()
    finally:
        OP_LISTENERS.remove(watcher)
    expected = [("started", "sum"), ("finished", "sum", 1), ("started", "add"), ("finished", "add", 2),
                ("started", "mul"), ("finished", "mul", 2)]  # the walk's order; (op, number of gradients)
    assert watcher.events == expected, (
        f"the listeners heard {watcher.events}, expected {expected}: run every rule through "
        "apply_rule(t, g) (given): it looks the rule up, checks versions, runs it and tells the profiler")
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 5.0])


def test_missing_rule_raises_runtime_error_naming_the_op():
    x = leaf([1.0])
    y = record_op("no_such_op_for_test", x.data * 2, (x,))
    try:
        y.sum().backward()
    except Exception as err:  # the type is part of the contract: check it with a clear message
        assert isinstance(err, RuntimeError), (
            f"a missing rule must raise RuntimeError naming the op, got {type(err).__name__}: {err}"
        )
        assert "no_such_op_for_test" in str(err), f"a missing rule's error must name the op: {err}"
    else:
        pytest.fail("backward through an op without a rule must raise RuntimeError naming the op")


def test_a_rule_returning_the_wrong_shape_is_named(temporary_rules):
    temporary_rules("wrong_shape_for_test", lambda grad, node: (grad[:1],))
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="wrong_shape_for_test") as info:
        record_op("wrong_shape_for_test", x.data * 2, (x,)).sum().backward()
    assert "(3,)" in str(info.value) and "(1,)" in str(info.value)


def test_a_rule_returning_gradients_in_the_wrong_order_is_named(temporary_rules):
    temporary_rules("swapped_for_test", lambda grad, node: (grad.sum(axis=0), grad))  # (b's, a's)
    a, b = leaf(np.ones((2, 3))), leaf(np.ones(3))
    with pytest.raises(RuntimeError, match="swapped_for_test"):
        record_op("swapped_for_test", a.data + b.data, (a, b)).sum().backward()


def test_changing_data_between_forward_and_backward_raises():
    w = leaf([1.0, 2.0])
    x = Tensor(np.array([3.0, 4.0]))
    loss = (w * x).sum()
    x.data += 1  # the mul rule would read the new x for w's gradient
    try:
        loss.backward()
    except RuntimeError as err:
        message = str(err)
    else:
        pytest.fail("x.data changed between the forward pass and backward() must raise RuntimeError "
                    "(run every rule through apply_rule(t, g): it calls _check_versions(node, t) first)")
    assert "mul" in message and "input 1" in message, message
    assert "version 1" in message and "version 0" in message, message
    assert w.grad is None


def test_changing_an_output_before_backward_raises():
    x = leaf([0.5, 1.0])
    y = x.exp()  # exp's rule reuses the saved output
    y.data = y.data * 2
    with pytest.raises(RuntimeError) as info:
        y.backward(np.ones(2))  # y is exp's output (as a loss would be its op's output)
    message = str(info.value)
    assert "'exp'" in message and "version 1" in message and "version 0" in message, message


def test_assigning_data_after_backward_is_fine():
    w = leaf([1.0, 2.0])
    x = Tensor(np.array([3.0, 4.0]))
    for step in range(3):  # what an optimizer loop does
        (w * x).sum().backward()
        w.data = w.data - 0.1 * w.grad.data
        w.grad = None
    np.testing.assert_allclose(w.numpy(), [1.0 - 0.9, 2.0 - 1.2])
    assert w._version == 3


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


def test_integer_index_tensor_and_plain_data_get_no_grad():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    idx = Tensor(np.array([1, 1, 0]))
    x[idx].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, 1.0], [2.0, 2.0]])
    assert idx.grad is None


# ---- the registry -------------------------------------------------------------------------------------
def test_registry_and_decorator(temporary_rules):
    from tinytorch.core.autograd import BACKWARD_RULES

    for op in ["add", "sub", "mul", "div", "pow", "neg", "matmul", "sum", "mean", "max", "exp", "log",
               "sqrt", "reshape", "permute", "getitem", "masked_fill", "to", "relu", "sigmoid", "tanh",
               "gelu", "softmax", "log_softmax", "cross_entropy", "bce_with_logits", "binary_cross_entropy"]:
        assert op in BACKWARD_RULES, f"no rule registered for {op!r}"

    def triple_backward(grad, node):
        return (grad * 3,)

    temporary_rules("triple_for_test", triple_backward)
    assert BACKWARD_RULES["triple_for_test"] is triple_backward
    x = leaf([1.0, 2.0])
    record_op("triple_for_test", x.data * 3, (x,)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_rules_that_return_none_skip_that_input(temporary_rules):
    temporary_rules("first_only_for_test", lambda grad, node: (grad, None))
    a, b = leaf([1.0]), leaf([2.0])
    record_op("first_only_for_test", a.data + b.data, (a, b)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.0])
    assert b.grad is None


# ---- no_grad and detach --------------------------------------------------------------------------------
def test_no_grad_records_nothing_and_restores_the_mode():
    from tinytorch.core.autograd import is_grad_enabled, no_grad

    w = leaf([1.0, 2.0])
    with no_grad():
        assert not is_grad_enabled() and GradMode.enabled is False
        y = w * 2 + 1
        with no_grad():
            pass
        assert GradMode.enabled is False, \
            "an inner no_grad must restore the previous mode (off), not switch recording on"
    assert y._node is None and not y.requires_grad
    assert GradMode.enabled is True and is_grad_enabled()
    with pytest.raises(RuntimeError):
        y.sum().backward()  # nothing to differentiate


def test_no_grad_restores_the_mode_after_an_exception():
    from tinytorch.core.autograd import no_grad

    with pytest.raises(ZeroDivisionError):
        with no_grad():
            1 / 0
    assert GradMode.enabled is True, "no_grad must restore the mode when its block raises"
    GradMode.enabled = False
    with no_grad():
        pass
    assert GradMode.enabled is False, "no_grad restores the previous value, whatever it was"


def test_no_grad_as_a_decorator():
    from tinytorch.core.autograd import no_grad

    @no_grad()
    def step(t):
        assert GradMode.enabled is False
        return t * 2

    @no_grad()
    def failing_step(t):
        raise ValueError("inside a decorated function")

    w = leaf([1.0])
    assert step(w)._node is None and GradMode.enabled is True
    with pytest.raises(ValueError):
        failing_step(w)
    assert GradMode.enabled is True, (
        "@no_grad() must restore the mode when the function raises: run it inside `with self:`"
    )


def test_detach_cuts_the_graph():
    x = leaf([1.0, 2.0])
    y = x * 3.0
    d = y.detach()
    assert d._node is None and not d.requires_grad and np.shares_memory(d.data, y.data)
    (d * x).sum().backward()  # d is a constant here
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0])
    assert y.grad is None


# ---- gradcheck --------------------------------------------------------------------------------------------
def test_gradcheck_passes_a_correct_rule_and_returns_true():
    from tinytorch.core.autograd import gradcheck

    x = leaf(np.random.default_rng(0).standard_normal((2, 3)))
    w = leaf(np.random.default_rng(1).standard_normal((3, 2)))
    assert gradcheck(lambda a, b: (a @ b).exp(), [x, w]) is True


def test_gradcheck_works_on_float64_copies(temporary_rules):
    from tinytorch.core.autograd import gradcheck

    dtypes = []

    def probe_rule(grad, node):
        dtypes.append(grad.dtype)
        return (2 * grad * node.inputs[0].data,)

    temporary_rules("square_probe_for_test", probe_rule)
    x = Tensor(np.array([0.5, 1.5, -2.0], dtype=np.float32), requires_grad=True)
    assert gradcheck(lambda t: record_op("square_probe_for_test", t.data**2, (t,)), [x]) is True
    assert dtypes and all(d == np.float64 for d in dtypes), (
        f"gradcheck ran backward in {dtypes}: it must compute on float64 copies of the inputs (_float64_copy)"
    )
    assert x.grad is None and x.dtype == np.float32, "gradcheck must leave the caller's tensors and .grad alone"


def test_gradcheck_names_the_op_input_and_index_of_a_wrong_rule(temporary_rules):
    from tinytorch.core.autograd import gradcheck

    def scaled(a, b):
        return record_op("broken_for_test", a.data * b.data, (a, b))

    # right for `a` (d(ab)/da = b), wrong for `b` only at element (1, 2)
    def broken(grad, node):
        a, b = node.inputs
        wrong = grad * a.data
        wrong[1, 2] += 0.5
        return grad * b.data, wrong

    temporary_rules("broken_for_test", broken)
    a = leaf(np.random.default_rng(2).standard_normal((2, 3)))
    b = leaf(np.random.default_rng(3).standard_normal((2, 3)))
    with pytest.raises(AssertionError) as info:
        gradcheck(scaled, [a, b])
    message = str(info.value)
    assert "input 1" in message and "(1, 2)" in message and "broken_for_test" in message, message


def test_gradcheck_uses_a_random_cotangent(temporary_rules):
    """A softmax rule returning zeros passes with a cotangent of ones; gradcheck must catch it."""
    from tinytorch.core.autograd import gradcheck

    def my_softmax(x):
        e = np.exp(x.data - x.data.max(axis=-1, keepdims=True))
        return record_op("zero_softmax_for_test", e / e.sum(axis=-1, keepdims=True), (x,))

    temporary_rules("zero_softmax_for_test", lambda grad, node: (np.zeros_like(grad),))
    with pytest.raises(AssertionError):
        gradcheck(my_softmax, [leaf(np.random.default_rng(4).standard_normal((2, 4)))])


def test_gradcheck_skips_inputs_without_requires_grad():
    from tinytorch.core.autograd import gradcheck

    x = leaf([0.3, -0.7])
    c = Tensor(np.array([2.0, 5.0]))
    assert gradcheck(lambda a, b: a * b, [x, c]) is True
    assert c.grad is None and x.grad is None


# ---- rules through the engine -----------------------------------------------------------------------------
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


def test_no_grad_object_entered_again_while_active():
    """One decorated function calling itself enters the same no_grad object twice."""
    from tinytorch.core.autograd import is_grad_enabled, no_grad

    @no_grad()
    def countdown(t, n):
        return t * 2 if n == 0 else countdown(t, n - 1)

    w = leaf([1.0])
    assert countdown(w, 3)._node is None
    assert is_grad_enabled(), (
        "after a recursive @no_grad() function returned, recording is still off: the same no_grad object "
        "was entered again while active, so remember every previous mode (a stack), not one")
    shared = no_grad()
    with shared:
        with shared:
            pass
        assert GradMode.enabled is False, "leaving the inner `with` of one no_grad object turned recording on"
    assert GradMode.enabled is True


@pytest.mark.parametrize("returned, expected", [
    (lambda g: (g,), "returned 1 value(s)"),
    (lambda g: g, "returned ndarray"),
    (lambda g: (Tensor(g), g), "returned Tensor for input 0"),
], ids=["too-few", "not-a-tuple", "a-Tensor"])
def test_a_rule_returning_the_wrong_things_is_named(returned, expected):
    from tinytorch.core.autograd import BACKWARD_RULES, backward, register_backward
    from tinytorch.core.tensor import record_op

    register_backward("bad_rule_demo")(lambda grad, node: returned(grad))
    try:
        a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
        out = record_op("bad_rule_demo", a.data + b.data, (a, b))
        with pytest.raises(RuntimeError, match="bad_rule_demo") as info:
            backward(out, np.ones(2))
        assert expected in str(info.value), (
            f"a rule that {expected.replace('returned', 'returns')} must be reported by _check_rule_output "
            f"before unbroadcast runs; got: {info.value}")
    finally:
        BACKWARD_RULES.pop("bad_rule_demo", None)


def test_gradcheck_of_nothing_is_refused():
    from tinytorch.core.autograd import gradcheck

    with pytest.raises(ValueError, match="requires_grad"):
        gradcheck(lambda t: t * 2, [Tensor([1.0, 2.0])])
