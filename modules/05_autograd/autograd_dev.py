# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 05: Autograd
#
# > The chain rule, run backwards over the graph that every operation already records.
#
# **What you will be able to do after this module**
#
# * derive the backward rule of an operation from its forward formula, write it in a few
#   lines of array code and prove it right with central differences;
# * explain why a gradient that was broadcast must be *summed* back to its input's shape,
#   and why a tensor used twice must *add* its contributions;
# * write the engine that walks a graph of any depth in topological order, and state what
#   it promises to every later module (which tensors get `.grad`, in which dtype, which
#   errors it raises);
# * switch recording off with `no_grad`, and check any rule with `gradcheck`, knowing why
#   it must compute in float64.
#
# **Time:** about 4 hours (2 for the rules, 1 for the engine, 1 for checking and the
# exercises).
#
# Since module 01, every operation has returned its result through `record_op`, which
# attaches a `Node` to the result: the operation's name, its input tensors and whatever
# it saved. Those nodes form a **graph**: each tensor points at the tensors it was made
# from. Nothing has used that graph yet. This module does.
#
# Training needs `∂loss/∂w` for every weight `w`. Writing those derivatives by hand for
# every model is hopeless; but every model is built from a small set of operations, and
# each operation only needs to know **its own** local derivative. The chain rule glues
# the local pieces together:
#
# $$\frac{\partial L}{\partial x} = \sum_{\text{uses } y \text{ of } x} \frac{\partial L}{\partial y}\,\frac{\partial y}{\partial x}$$
#
# You will build three things:
#
# 1. **backward rules**: for each op name, a small function that turns the gradient of
#    the op's output into gradients of its inputs (one per op, registered by name);
# 2. **the engine**: `backward(tensor)` walks the graph from the loss to the leaves in a
#    topological order, calls each node's rule once, and *adds up* the contributions a
#    tensor receives from each of its uses;
# 3. **the tools around it**: `unbroadcast` (broadcasting's backward), `no_grad`
#    (switch recording off) and `gradcheck` (compare every rule with finite differences).
#
# The order in this notebook: the rule format and `unbroadcast` (sections 2–3), the
# engine (4), the rules of every op of modules 01–04 (5–9), `no_grad` (10), checking
# (11), then everything together (12) and the exercises (13).

# %%
#| default_exp core.autograd

# %%
#| export
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import numpy as np

from tinytorch.core.tensor import OP_LISTENERS, GradMode, Node, Tensor, array_module, to_array, to_host
from tinytorch.testing import numeric_vjp

# %% [markdown]
# ## 1. The chain rule on a graph
#
# Take `L = (a * b + a).sum()` with `a = [2, 3]`, `b = [4, 5]`. The graph is
#
# ```
# a ──┬──► mul ──► p ──► add ──► q ──► sum ──► L
# b ──┘           a ───────┘
# ```
#
# Start at the end with `∂L/∂L = 1` and go backwards, one node at a time:
#
# * `sum`: every element of `q` contributes once, so `∂L/∂q = [1, 1]`;
# * `add` (`q = p + a`): passes its gradient unchanged to both inputs: `∂L/∂p = [1, 1]`
#   and a **first** contribution `[1, 1]` to `a`;
# * `mul` (`p = a * b`): `∂p/∂a = b`, `∂p/∂b = a`, so `a` gets a **second** contribution
#   `[1, 1] * b = [4, 5]` and `b` gets `[1, 1] * a = [2, 3]`.
#
# `a` was used twice, so its gradient is the **sum** of both: `[5, 6]` (= `b + 1`).
# Two facts drive the whole design:
#
# * a node's rule may only run once its output gradient is **complete** (all uses of it
#   have reported), which is what a *topological order* guarantees;
# * contributions to the same tensor are **added**, never overwritten.
#
# The graph is already there. Here it is for this example, read from the nodes that
# `record_op` attached (`t._node.op`, `t._node.inputs`):

# %%
_a = Tensor([2.0, 3.0], requires_grad=True)
_b = Tensor([4.0, 5.0], requires_grad=True)
_L = (_a * _b + _a).sum()
_q = _L._node.inputs[0]
_p = _q._node.inputs[0]
print("L is made by", repr(_L._node.op), "from q;  q by", repr(_q._node.op), "from (p, a);  p by",
      repr(_p._node.op), "from (a, b)")
print("the second input of add is a itself:", _q._node.inputs[1] is _a, "; a and b are leaves:",
      _a._node is None and _b._node is None)

# %% [markdown]
# ## 2. Backward rules: one per op, registered by name
#
# **What a rule receives.** `rule(grad, node)`:
#
# * `grad` — the gradient of the loss with respect to the op's **output**: a raw NumPy
#   (or CuPy) array with exactly the output's shape. Its dtype is a floating dtype,
#   usually the output's;
# * `node` — the `Node` the forward recorded: `node.op` (the name), `node.inputs` (the
#   input Tensors, **in the order the forward recorded them**) and `node.saved` (a dict of
#   whatever the forward saved, e.g. `axis` or `out`).
#
# **What a rule returns.** A tuple with **one entry per `node.inputs`, in the same
# order**: for input `i`, the gradient of the loss with respect to that input, as an
# array, or `None` when that input takes no gradient (it saves work for constants; the
# engine also skips inputs with `requires_grad=False`). Each array may have the
# *broadcast* shape (the output's), because the engine reduces it to the input's shape
# with `unbroadcast` (section 3) and casts it to the input's dtype: a rule thinks about
# neither.
#
# **What a rule must not do.** Build Tensors or record ops (it computes on `.data`, so
# backward records no graph of its own), or change `grad` in place (the same array may be
# handed to several rules: `add` returns it twice).
#
# The registry is a plain dictionary from op name to rule; later modules (attention,
# embeddings) add their ops with the same decorator, never by patching earlier code.
#
# **FLOP formulas live beside the rules.** A second, smaller registry, `FLOP_RULES`, holds
# for some ops a formula for the floating-point operations they cost (module 14's profiler
# adds them up). Only matrix products count, in PyTorch's convention
# (`torch.utils.flop_counter`): `2·m·k·n` for an `(m, k) @ (k, n)` product, one multiply and
# one add per term; an op without a formula (every elementwise op, every reduction) counts
# 0. A formula `flops(node, out_shape, grads=None)` returns the forward's FLOPs when `grads`
# is None, else the backward's, given what the rule returned: an input whose gradient is
# None cost no product. It is given code: you will meet `matmul`'s next to its rule.
#
# What each forward of modules 01–04 records (the rules of sections 5–9 read exactly
# these; inputs are listed in `node.inputs` order):
#
# | op | inputs | saved |
# |---|---|---|
# | `add`, `sub`, `mul`, `div`, `pow` | `(a, b)` for `a ∘ b`; a Python number becomes a 0-d Tensor, and `1 - w` records `(1, w)` | — |
# | `neg`, `log`, `reshape` | `(x,)` | — |
# | `exp`, `sqrt` | `(x,)` | `out` (the result array) |
# | `matmul` | `(a, b)` for `a @ b` | — |
# | `sum`, `mean` | `(x,)` | `axis` (sorted tuple of non-negative ints, or `None` for all), `keepdims` |
# | `max` | `(x,)` | `axis`, `keepdims`, `out` |
# | `permute` | `(x,)` | `dims` (output dim `i` is input dim `dims[i]`) |
# | `getitem` | `(x,)` | `index` (what was used to index `x.data`) |
# | `masked_fill` | `(x,)` | `mask` (bool array broadcastable to `x`; True = filled) |
# | `to` | `(x,)` | `device` (the input's device) |
# | `relu`, `gelu` | `(x,)` | — |
# | `sigmoid`, `tanh` | `(x,)` | `out` |
# | `softmax`, `log_softmax` | `(x,)` | `dim` (non-negative int), `out` |
# | `cross_entropy` | `(logits,)` | `probs`, `targets` (ignored positions replaced by 0), `valid`, `count` |
# | `bce_with_logits` | `(logits,)` | `targets` |
# | `binary_cross_entropy` | `(probs,)` | `targets`, `eps` |

# %%
#| export
BackwardRule = Callable[[Any, Node], Sequence[Any]]

BACKWARD_RULES: dict[str, BackwardRule] = {}


def register_backward(op: str) -> Callable[[BackwardRule], BackwardRule]:
    """Decorator: `@register_backward("relu")` makes the function the rule for op "relu".

    A rule is `rule(grad, node) -> tuple`, one array (or None) per `node.inputs`, in that
    order. It may return a gradient in the broadcast shape; the engine reduces it with
    `unbroadcast` and casts it to the input's dtype. Registering a name again replaces
    the old rule.
    """

    def decorator(rule: BackwardRule) -> BackwardRule:
        BACKWARD_RULES[op] = rule
        return rule

    return decorator


FlopRule = Callable[[Node, tuple, Any], int]

FLOP_RULES: dict[str, FlopRule] = {}


def register_flops(op: str) -> Callable[[FlopRule], FlopRule]:
    """Decorator: `@register_flops("matmul")` makes the function op "matmul"'s FLOP formula.

    A formula is `flops(node, out_shape, grads=None) -> int`: the forward's floating-point
    operations when `grads` is None, else the backward rule's, where `grads` is what the rule
    returned (one array or None per input; None cost nothing). PyTorch's convention
    (torch.utils.flop_counter): 2·m·k·n per (m, k) @ (k, n) product, elementwise work 0.
    """

    def decorator(formula: FlopRule) -> FlopRule:
        FLOP_RULES[op] = formula
        return formula

    return decorator


def op_flops(node: Node, out_shape: Sequence[int], grads: Any = None) -> int:
    """FLOPs of `node`'s op (forward when grads is None, else backward); 0 for an op without a formula."""
    formula = FLOP_RULES.get(node.op)
    return 0 if formula is None else int(formula(node, tuple(out_shape), grads))


# %% [markdown]
# ## 3. Broadcasting's backward: `unbroadcast`
#
# In the forward pass `b` of shape `(3,)` added to `a` of shape `(2, 3)` is silently
# *copied* to both rows. Each copy influences the loss, so `b`'s gradient is the **sum**
# of the gradients of its copies. In general: a gradient arriving in the broadcast shape
# is summed over
#
# * the **leading** dimensions the input did not have (summed away: they disappear), and
# * every dimension where the input had size **1** but the gradient has more (summed with
#   `keepdims=True`: the size-1 dimension stays).
#
# Worked example: `a (2, 3) + b (1, 3)` with upstream gradient
# `[[1, 2, 3], [4, 5, 6]]`: `a` gets it unchanged, `b` gets the column sums
# `[[5, 7, 9]]`, shape `(1, 3)`; a `c` of shape `(3,)` would get `[5, 7, 9]`. The engine
# applies `unbroadcast` to every input gradient, so no rule has to think about
# broadcasting.
#
# **Your turn.** `unbroadcast(grad, shape)` returns `grad` summed down to `shape`, in
# `grad`'s dtype (a sum, never a copy when nothing is summed). Two lines of given code
# handle what is not a broadcast at all: the engine reports those.

# %%
#| export
def unbroadcast(grad: Any, shape: Sequence[int]) -> Any:
    """Sum `grad` (an array in a broadcast shape) down to `shape`.

    Sums away the leading dimensions `shape` lacks and, with keepdims, every dimension
    where `shape` has size 1 and `grad` does not. Returns `grad` itself when its shape is
    already `shape`. `unbroadcast(ones((4, 2, 3)), (2, 1))` is `full((2, 1), 12)`.
    """
    shape = tuple(shape)
    if grad.ndim < len(shape):  # not a broadcast of `shape`: the engine's shape check reports it
        return grad
    ### BEGIN SOLUTION
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:  # leading dims the input never had: each was a copy
        grad = grad.sum(axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if stretched:  # size-1 dims that broadcasting stretched
        grad = grad.sum(axis=stretched, keepdims=True)
    return grad
    ### END SOLUTION


# %%
def test_unit_unbroadcast():
    g = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    for grad, shape, expected, why in (
            (g, (2, 3), g, "the same shape: returned as it is"),
            (g, (1, 3), [[5.0, 7.0, 9.0]], "a size-1 dim that was stretched is summed with keepdims=True: it stays"),
            (g, (3,), [5.0, 7.0, 9.0], "a leading dim the input never had is summed away: it disappears"),
            (g, (2, 1), [[6.0], [15.0]], "a size-1 dim that was stretched is summed with keepdims=True"),
            (g, (), 21.0, "a scalar got every element: sum everything"),
            (np.ones((4, 2, 3)), (2, 1), np.full((2, 1), 12.0), "both: the leading dim away, then dim 1 with keepdims")):
        got = np.asarray(unbroadcast(grad, shape))
        assert got.shape == np.shape(expected) and np.array_equal(got, expected), (
            f"unbroadcast(grad of shape {grad.shape}, {shape}): expected {np.asarray(expected).tolist()}, got "
            f"{got.tolist()} (shape {got.shape}): {why}")
    dtype = unbroadcast(g.astype(np.float32), (3,)).dtype
    assert dtype == np.float32, f"unbroadcast must keep grad's dtype (float32), got {dtype}"
    print("✓ unbroadcast sums over broadcast axes:", unbroadcast(g, (1, 3)).tolist())


test_unit_unbroadcast()

# %% [markdown]
# ## 4. The engine
#
# **Topological order.** We need an order in which every tensor comes *after* all the
# tensors computed from it (seen from the loss). A depth-first search that appends a
# tensor once all its inputs are done yields the reverse of that; walking the list
# backwards gives the order we want. The search uses an explicit stack instead of
# recursion: a recurrent network or a 10,000-step loop builds a chain deeper than
# Python's recursion limit (about 1,000 frames). A tensor reached along two paths (the
# `h` in `h * 3 + h`) is listed **once**: mark each tensor visited (by `id(t)`: Tensors
# are not hashable by value) the first time you see it.
#
# **Your turn: `topological_order(root)`** returns a list of tensors: `root` and every
# tensor with `requires_grad` that it was computed from (follow `t._node.inputs`, and skip
# inputs without `requires_grad`: no gradient flows to them), each exactly once, every
# tensor after all of its inputs (so `root` is last).
#
# Hint: push `(tensor, False)` on a stack; when you pop `(t, False)` for an unvisited
# `t`, mark it, push `(t, True)` and then its inputs; popping `(t, True)` means all of
# `t`'s inputs are already in the list, so append `t`.

# %%
#| export
def topological_order(root: Tensor) -> list[Tensor]:
    """`root` and the tensors with requires_grad it depends on, each once, inputs before outputs.

    Iterative depth-first search (no recursion: graphs can be deeper than Python's
    recursion limit); a tensor is appended after everything it was made from.
    """
    ### BEGIN SOLUTION
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        tensor, inputs_done = stack.pop()
        if inputs_done:  # second visit: everything below it is already in `order`
            order.append(tensor)
            continue
        if id(tensor) in visited:
            continue
        visited.add(id(tensor))
        stack.append((tensor, True))
        if tensor._node is not None:
            stack.extend((t, False) for t in tensor._node.inputs if t.requires_grad and id(t) not in visited)
    return order
    ### END SOLUTION


# %%
def test_unit_topological_order():
    x = Tensor([1.0, 2.0], requires_grad=True)
    c = Tensor([5.0, 5.0])  # no requires_grad: not part of the backward graph
    h = x * c
    y = h * 3.0 + h  # h reached along two paths
    order = topological_order(y)
    assert len(order) == len({id(t) for t in order}), (
        f"each tensor must appear once, but {len(order)} entries hold {len({id(t) for t in order})} tensors: h is "
        "reached along two paths; mark each tensor visited (by id) the first time you see it")
    assert id(c) not in {id(t) for t in order}, ("c does not require a gradient, yet it is in the order: skip inputs "
                                                  "without requires_grad (no gradient flows to them)")
    position = {id(t): i for i, t in enumerate(order)}
    assert {id(x), id(h), id(y)} <= set(position), "x, h and y must all be in the order"
    assert order[-1] is y and position[id(x)] < position[id(h)] < position[id(y)], (
        "every tensor must come after the tensors it was made from, the root last: expected x before h before y, got "
        + " -> ".join(t._node.op if t._node else "leaf" for t in order))
    print("✓ topological order:", [t._node.op if t._node else "leaf" for t in order])


test_unit_topological_order()

# %% [markdown]
# **The walk.** Keep a dictionary `id(tensor) -> gradient so far`, seeded with the
# output's gradient (1 for a scalar loss). In topological order from the output back to
# the leaves, each tensor's gradient is *complete* when we reach it (everything computed
# from it came later in the forward pass, so it has been walked already). Pop it from
# the dictionary, hand it to the node's rule, and add what the rule returns into the
# entries of the node's inputs.
#
# **The engine's contract.** Every later module relies on these promises, so each one
# is tested:
#
# 1. **`.grad` on leaves only**, as in PyTorch: a tensor you made (`t.is_leaf`, i.e.
#    `t._node is None`) with `requires_grad=True` gets `.grad`; a tensor computed by an
#    op does not, unless you called `t.retain_grad()` on it (which sets
#    `t._retains_grad = True`). A model's weights are leaves; its activations are not, and
#    keeping a gradient for every activation would cost as much memory again as the
#    activations themselves.
# 2. **Gradients accumulate across `backward` calls**: the first time,
#    `t.grad = Tensor(g.copy())`; after that `t.grad = Tensor(t.grad.data + g)`, until
#    something sets `t.grad = None` (`zero_grad`).
# 3. **`.grad` holds its own array**, never an array that anything else holds: `add`'s
#    rule hands the *same* array to both of its inputs and `sum`'s returns a read-only
#    broadcast view, so `Tensor(g)` would make two weights share one gradient, and an
#    optimizer or a clipping step that scales one in place would scale both. Hence the
#    `.copy()` above.
# 4. **Each input gradient is reduced with `unbroadcast(ig, inp.shape)` and cast to the
#    input's dtype** with `ig.astype(inp.dtype, copy=False)`. A rule may compute in a wider
#    type (the binary cross-entropy rule works in float32 for float16 probabilities), and
#    float16 data times a float32 weight gives a float32 product, yet a float16 tensor's
#    gradient must be float16 (module 12 trains in float16; an optimizer must not change
#    a weight's dtype).
# 5. **A missing rule is an error**: if `node.op` has no entry in `BACKWARD_RULES`, the
#    engine raises `RuntimeError` with a message that contains the op name.
# 6. **Every rule runs through `apply_rule(t, g)`** (given, below): it looks the rule up
#    (promise 5), calls `_check_versions(node, t)` (the next paragraph), runs the rule,
#    passes what it returned to `_check_rule_output(node, grads)` (one array or None per
#    input, never a Tensor or a number: `unbroadcast` and `.astype` only work on arrays),
#    tells the listeners of module 01's `OP_LISTENERS` (module 14's profiler times each rule
#    there, so your engine is profiled too) and returns the rule's gradients. After the
#    unbroadcast and the cast of input `i`'s gradient you call the given
#    `_check_input_gradient(node, i, ig)` (its shape must now be the input's). Each check
#    raises RuntimeError naming the op.
# 7. **Intermediate gradients are released once used**: `grads.pop(id(t))`, so only the
#    gradients still waiting for their rule are alive at any moment.
# 8. Inputs whose rule returned `None`, and inputs without `requires_grad`, are skipped.
#
# **Changing `.data` between forward and backward.** A rule reads the arrays of its
# inputs (`mul` needs both) or its saved output (`exp` reuses `out`). If you assign to
# `x.data` after the forward pass and then call `backward()`, the rule would silently
# use the new values and return a wrong gradient. Every Tensor counts the assignments to
# its `.data` in `t._version` (0 when made; `t.data = ...` and `t.data += 1` both add 1);
# a `Node` remembers each input's version when it is made (`node.versions`). The given
# `_check_versions` compares them and raises `RuntimeError` naming the op, the input and
# both versions. Assigning *after* `backward()` (what an optimizer does) is fine: the
# next forward pass records new versions. Writing through the array itself
# (`x.data[0] = 5`) does not go through the `.data` assignment, so the counter cannot see
# it: don't.

# %%
#| export
def _seed_gradient(tensor: Tensor, grad: Any) -> Any:
    """The starting gradient: 1 for a one-element tensor, else the caller's `grad` (same shape)."""
    xp = array_module(tensor.data)
    if grad is None:
        if tensor.size != 1:
            raise RuntimeError(
                f"backward() without a gradient only works on a one-element tensor (a loss); this one has "
                f"shape {tensor.shape}. Reduce it first (e.g. .sum()) or pass t.backward(grad) with that shape."
            )
        return xp.ones_like(tensor.data)
    grad = to_array(grad, dtype=tensor.dtype, device=tensor.device)
    if grad.shape != tensor.shape:
        raise ValueError(f"backward: gradient of shape {tuple(grad.shape)} for a tensor of shape {tensor.shape}.")
    return grad


def _check_versions(node: Node, output: Tensor) -> None:
    """RuntimeError when an input's or the output's `.data` was reassigned since the forward pass."""
    if output._version != 0:
        raise RuntimeError(
            f"backward: the output of op {node.op!r} (shape {output.shape}) was modified after it was "
            f"computed: it is at version {output._version}, expected version 0. Its backward rule may "
            "need the original values. Do not change .data between the forward pass and backward()."
        )
    for i, (inp, recorded) in enumerate(zip(node.inputs, node.versions)):
        if inp._version != recorded:
            raise RuntimeError(
                f"backward: one of the tensors needed for a gradient was modified in place: input {i} "
                f"of op {node.op!r} (shape {inp.shape}) is at version {inp._version}, expected version "
                f"{recorded}. Do not change .data between the forward pass and backward() (change a copy, "
                "or call backward() first)."
            )


def _check_rule_output(node: Node, grads: Any) -> None:
    """RuntimeError naming the op unless its rule returned one array (or None) per input.

    Call it on what `rule(g, node)` returned, before anything else touches those values.
    """
    count = len(node.inputs)
    if not isinstance(grads, (tuple, list)) or len(grads) != count:
        got = f"{len(grads)} value(s)" if isinstance(grads, (tuple, list)) else type(grads).__name__
        raise RuntimeError(
            f"backward rule for {node.op!r} returned {got}; it must return a tuple with one gradient "
            f"(an array, or None) per input, in node.inputs order: {count} for this node."
        )
    for index, grad in enumerate(grads):
        if grad is not None and (not hasattr(grad, "shape") or isinstance(grad, Tensor)):
            raise RuntimeError(
                f"backward rule for {node.op!r} returned {type(grad).__name__} for input {index}: "
                "rules return arrays (NumPy/CuPy) or None, computed from .data."
            )


def _check_input_gradient(node: Node, index: int, grad: Any) -> None:
    """RuntimeError naming the op when input `index`'s gradient, after unbroadcast, is not the input's shape."""
    inp = node.inputs[index]
    if tuple(grad.shape) != inp.shape:
        raise RuntimeError(
            f"backward rule for {node.op!r} gave input {index} (shape {inp.shape}) a gradient of shape "
            f"{tuple(grad.shape)}, even after unbroadcast. Check the rule's return values (one per input, "
            "in node.inputs order, each the input's shape or a broadcast of it) and that the engine "
            "calls unbroadcast."
        )


def apply_rule(tensor: Tensor, grad: Any) -> Sequence[Any]:
    """Run the backward rule of the node that made `tensor`, given `grad` (tensor's complete gradient).

    Looks the rule up (RuntimeError naming the op when there is none), checks that no input and
    not the output changed since the forward pass (`_check_versions`), runs `rule(grad, node)`,
    checks what it returned (`_check_rule_output`) and returns it: one array or None per
    `node.inputs`, in the broadcast shape the rule chose. Listeners in OP_LISTENERS (a profiler)
    hear `rule_started(node, grad)` before the rule and `rule_finished(node, grad, grads)` after.
    """
    node = tensor._node
    rule = BACKWARD_RULES.get(node.op)
    if rule is None:
        raise RuntimeError(
            f"No backward rule for op {node.op!r}. Register one with "
            f"@register_backward({node.op!r}) (tinytorch.core.autograd)."
        )
    _check_versions(node, tensor)
    if OP_LISTENERS:
        for listener in OP_LISTENERS:
            listener.rule_started(node, grad)
    grads = rule(grad, node)
    _check_rule_output(node, grads)
    if OP_LISTENERS:
        for listener in OP_LISTENERS:
            listener.rule_finished(node, grad, grads)
    return grads


# %% [markdown]
# **Your turn: `backward(tensor, grad)`.** The given lines before the solution block
# refuse a tensor that needs no gradient and compute the seed. Then write the walk with
# the contract above, in this order for each tensor `t` of
# `reversed(topological_order(tensor))`:
#
# 1. `g = grads.pop(id(t), None)`; skip `t` when it is `None` (every path to it was cut);
# 2. store `g` into `t.grad` when `t` is a leaf or retains its gradient (promises 1–3);
# 3. stop here for a leaf; otherwise `apply_rule(t, g)` runs the node's rule, with every
#    check of promises 5 and 6, and returns one gradient (or None) per `node.inputs`;
# 4. for each input `i` with a gradient: `unbroadcast`, cast, `_check_input_gradient`,
#    then add it into `grads[id(inp)]` (or put it there if it is the first).

# %%
#| export
def backward(tensor: Tensor, grad: Any = None) -> None:
    """Accumulate d(tensor)/d(t), contracted with `grad`, into `t.grad` for every leaf t it depends on.

    grad -- the gradient of some scalar with respect to `tensor` (same shape); may be
            omitted for a one-element tensor, where it is 1.
    Writes `.grad` (a new Tensor with its own array, in t's dtype and shape) only on leaves
    with requires_grad and on tensors that called `retain_grad()`; runs every rule through
    `apply_rule(t, g)` (which raises RuntimeError for an op without a rule and for `.data`
    reassigned since the forward pass), and raises RuntimeError for a rule whose gradient
    does not fit its input (`_check_input_gradient`; each message names the op). Then (given)
    tells each listener that has one `backward_finished(tensor)`: every `.grad` is written.
    """
    if not tensor.requires_grad:
        raise RuntimeError(
            "backward() on a tensor that does not require gradients: no input had "
            "requires_grad=True, or it was computed under no_grad()."
        )
    seed = _seed_gradient(tensor, grad)
    ### BEGIN SOLUTION
    grads: dict[int, Any] = {id(tensor): seed}
    for t in reversed(topological_order(tensor)):
        g = grads.pop(id(t), None)  # complete now (every use of t has reported), and released after this step
        if g is None:  # every rule that reached t returned None for it (e.g. a masked-out path)
            continue
        node = t._node
        if node is None or t._retains_grad:
            t.grad = Tensor(g.copy()) if t.grad is None else Tensor(t.grad.data + g)
        if node is None:  # a leaf: nothing further back
            continue
        input_grads = apply_rule(t, g)  # finds, checks and runs the rule; the profiler listens here
        for i, (inp, ig) in enumerate(zip(node.inputs, input_grads)):
            if ig is None or not inp.requires_grad:
                continue
            ig = unbroadcast(ig, inp.shape).astype(inp.dtype, copy=False)
            _check_input_gradient(node, i, ig)
            key = id(inp)
            grads[key] = grads[key] + ig if key in grads else ig
    ### END SOLUTION
    if OP_LISTENERS:  # given: every .grad is written; module 21's data parallelism waits for its all-reduces here
        for listener in OP_LISTENERS:
            finished = getattr(listener, "backward_finished", None)  # an optional event: a profiler has none
            if finished is not None:
                finished(tensor)


# %% [markdown]
# The test below checks the engine on its own, before any real op has a rule: it
# registers two made-up ops with obviously right rules (`double_demo`: `y = 2x`, rule
# `2g`; `plus_demo`: `y = a + b`, rule `(g, g)`), and removes them again at the end.

# %%
from tinytorch.core.tensor import record_op  # the tests make their own ops


def test_unit_backward():
    register_backward("double_demo")(lambda grad, node: (2 * grad,))
    register_backward("plus_demo")(lambda grad, node: (grad, grad))

    def double(t):
        return record_op("double_demo", 2 * t.data, (t,))

    def plus(a, b):
        return record_op("plus_demo", a.data + b.data, (a, b))

    try:
        x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = double(x)
        y = plus(h, h)  # h is used twice: y = 4x
        backward(y, np.ones(3))
        assert x.grad is not None and x.grad.numpy().tolist() == [4.0, 4.0, 4.0], (
            f"x.grad must be [4, 4, 4] (y = 4x through h used twice), got {x.grad and x.grad.numpy().tolist()}: h's two "
            "contributions must add up (grads[key] + ig), not replace each other")
        assert h.grad is None and y.grad is None, ("only leaves get .grad: h and y were made by ops, so store a "
                                                   "gradient only when t._node is None or t._retains_grad")
        backward(plus(x, x), np.ones(3))  # a second backward adds to .grad
        assert x.grad.numpy().tolist() == [6.0, 6.0, 6.0], (
            f"after a second backward (which gives 2) x.grad must be 4 + 2 = [6, 6, 6], got {x.grad.numpy().tolist()}: "
            "gradients accumulate across backward calls, t.grad = Tensor(t.grad.data + g) (promise 2)")

        a, b = Tensor(np.zeros((2, 3)), requires_grad=True), Tensor(np.zeros(3), requires_grad=True)
        seed = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        backward(plus(a, b), seed)
        assert b.grad.shape == (3,) and b.grad.numpy().tolist() == [5.0, 7.0, 9.0], "b's gradient: unbroadcast"
        assert not np.shares_memory(a.grad.data, seed), (
            "a.grad is the very array that was passed to backward: store a copy (promise 3)")
        assert not np.shares_memory(a.grad.data, b.grad.data), ".grad must hold its own array"

        half = Tensor(np.ones(2, dtype=np.float16), requires_grad=True)
        single = Tensor(np.ones(2, dtype=np.float32), requires_grad=True)
        backward(plus(half, single), np.ones(2, dtype=np.float32))  # a float32 result
        assert half.grad.dtype == np.float16 and single.grad.dtype == np.float32, (
            f"gradient dtypes {half.grad.dtype} and {single.grad.dtype}: cast each gradient to its input's dtype (promise 4)")

        r = double(x)
        r.retain_grad()
        backward(plus(r, r), np.ones(3))
        assert r.grad is not None and r.grad.numpy().tolist() == [2.0, 2.0, 2.0], (
            f"r called retain_grad(), so it must get .grad = [2, 2, 2], got {r.grad and r.grad.numpy().tolist()}: store "
            "a gradient when t is a leaf OR t._retains_grad")

        class RuleCounter:  # a listener, as module 14's profiler is one
            finished = 0

            def op_recorded(self, op, out, inputs, saved):
                pass

            def rule_started(self, node, grad):
                pass

            def rule_finished(self, node, grad, grads):
                RuleCounter.finished += 1

        counter = RuleCounter()
        OP_LISTENERS.append(counter)
        try:
            backward(plus(double(x), x), np.ones(3))
        finally:
            OP_LISTENERS.remove(counter)
        assert RuleCounter.finished == 2, (
            f"the listeners heard {RuleCounter.finished} rules, expected 2: run every rule through apply_rule(t, g)")

        try:
            backward(record_op("unknown_demo", x.data, (x,)), np.ones(3))
        except RuntimeError as err:
            assert "unknown_demo" in str(err), f"the RuntimeError for a missing rule must name the op, it says: {err}"
        except Exception as err:
            raise AssertionError(f"an op without a rule must raise RuntimeError naming it, got {type(err).__name__}: "
                                 f"{err}: look the rule up with BACKWARD_RULES.get(node.op) and raise") from None
        else:
            raise AssertionError("an op without a rule must raise RuntimeError")
    finally:
        del BACKWARD_RULES["double_demo"], BACKWARD_RULES["plus_demo"]
    print("✓ engine: accumulation, leaves only, own arrays, unbroadcast, dtype cast, retain_grad, missing rule")


test_unit_backward()

# %% [markdown]
# ## 5. Rules for the elementwise arithmetic
#
# Derivations (`g` is the output's gradient; broadcasting is the engine's business):
#
# | op | forward | returns, in `node.inputs` order |
# |---|---|---|
# | `add` | `a + b` | `(g, g)` |
# | `sub` | `a - b` | `(g, -g)` |
# | `mul` | `a * b` | `(g·b, g·a)` |
# | `div` | `a / b` | `(g / b, -g·a / b²)` |
# | `pow` | `a ** b` | `(g·b·a^(b-1), g·a^b·ln a)` |
# | `neg` | `-a` | `(-g,)` |
#
# The order is the order of `node.inputs`, which is the order of the **formula**, not of
# the Python expression: `1 - w` calls `w.__rsub__(1)`, and the forward records
# `inputs = (1, w)` (the constant first), so `sub`'s rule returns `(g, -g)` for it and
# `w` gets `-g`, as it must. Return a tuple even for one input: `(-grad,)`.
#
# `pow` has two honest corner cases: `ln a` only exists for `a > 0` (we use 0 elsewhere,
# as PyTorch does), and `b·a^(b-1)` at `a = 0, b = 0` is `0·∞`: the true slope of
# `a⁰ = 1` is 0, so we return 0 where `b == 0`. When only one of the inputs requires a
# gradient, compute only that one (return `None` for the other): `x ** 2` never needs
# `ln x`, which would warn for negative `x`.

# %%
#| export
@register_backward("add")
def add_backward(grad, node: Node) -> tuple:
    """d(a + b) = da + db. node.inputs = (a, b); returns (dL/da, dL/db) = (g, g)."""
    ### BEGIN SOLUTION
    return grad, grad
    ### END SOLUTION


@register_backward("sub")
def sub_backward(grad, node: Node) -> tuple:
    """d(a - b) = da - db. node.inputs = (a, b); returns (g, -g)."""
    ### BEGIN SOLUTION
    return grad, -grad
    ### END SOLUTION


@register_backward("mul")
def mul_backward(grad, node: Node) -> tuple:
    """d(a·b) = b·da + a·db. node.inputs = (a, b); returns (g·b, g·a) from the inputs' .data."""
    ### BEGIN SOLUTION
    a, b = node.inputs
    return grad * b.data, grad * a.data
    ### END SOLUTION


@register_backward("div")
def div_backward(grad, node: Node) -> tuple:
    """d(a / b) = da / b - a·db / b². node.inputs = (a, b); returns (g / b, -g·a / b²)."""
    ### BEGIN SOLUTION
    a, b = node.inputs
    return grad / b.data, -grad * a.data / (b.data * b.data)
    ### END SOLUTION


@register_backward("pow")
def pow_backward(grad, node: Node) -> tuple:
    """d(a^b) = b·a^(b-1)·da + a^b·ln(a)·db. node.inputs = (a, b).

    Returns (g·b·a^(b-1), with 0 where b == 0; g·a^b·ln a, with 0 where a <= 0), and None
    for an input that does not require a gradient.
    """
    ### BEGIN SOLUTION
    xp = array_module(grad)
    a, b = (t.data for t in node.inputs)
    grad_a = grad_b = None
    if node.inputs[0].requires_grad:
        with np.errstate(divide="ignore", invalid="ignore"):  # 0**(-1) is masked just below
            grad_a = xp.where(b == 0, 0, grad * b * a ** (b - 1))  # a^0 is constant: slope 0
    if node.inputs[1].requires_grad:
        positive = a > 0
        log_a = xp.where(positive, xp.log(xp.where(positive, a, 1)), 0)
        grad_b = grad * a**b * log_a
    return grad_a, grad_b
    ### END SOLUTION


@register_backward("neg")
def neg_backward(grad, node: Node) -> tuple:
    """d(-a) = -da. node.inputs = (a,); returns (-g,)."""
    ### BEGIN SOLUTION
    return (-grad,)
    ### END SOLUTION


# %% [markdown]
# ### Derive, then check: `div` by hand
#
# For `q = a / b` at `a = 3`, `b = 2`: `∂q/∂a = 1/b = 0.5` and `∂q/∂b = -a/b² = -0.75`.
# The rule must return exactly that for an upstream gradient of 1, and nudging `b` by
# ±ε must change `q` at that rate. `central_difference(f, x, eps)` (from
# `tinytorch.testing`, section 11) computes `(f(x + ε) - f(x - ε)) / 2ε` for each element.

# %%
from tinytorch.testing import central_difference

_a, _b = Tensor(np.array([3.0]), requires_grad=True), Tensor(np.array([2.0]), requires_grad=True)
_q = _a / _b
_ga, _gb = div_backward(np.ones(1), _q._node)
_numeric_b = central_difference(lambda b: float(3.0 / b[0]), np.array([2.0]))
print(f"div rule: dq/da = {_ga[0]:.6f} (1/b = 0.5), dq/db = {_gb[0]:.6f} (-a/b² = -0.75), "
      f"central difference dq/db = {_numeric_b[0]:.6f}")


# %%
def rule_gives(rule, out: Tensor, expected: list, at: str, formula: str, grad: Any = 1.0) -> None:
    """Inline-test helper: `rule(grad, out's node)` returns `expected`, one value (or None) per input."""
    try:
        got = rule(np.broadcast_to(np.asarray(grad, dtype=np.float64), out.shape).copy(), out._node)
    except ValueError as err:
        raise AssertionError(f"{rule.__name__} at {at} raised ValueError ({err}): it returns {formula}") from None
    shown = [None if v is None else np.round(np.asarray(v, dtype=np.float64), 6).tolist() for v in got] \
        if isinstance(got, (tuple, list)) else got
    ok = isinstance(got, (tuple, list)) and len(got) == len(expected) and all(
        (v is None) == (e is None) and (e is None or (np.shape(v) == np.shape(e) and np.allclose(
            np.asarray(v, dtype=np.float64), e))) for v, e in zip(got, expected))
    swapped = ok is False and isinstance(got, (tuple, list)) and len(got) == len(expected) == 2 and all(
        v is not None and e is not None and np.shape(v) == np.shape(e) and np.allclose(np.asarray(v, dtype=np.float64), e)
        for v, e in zip(got, expected[::-1]))
    assert ok, (f"{rule.__name__} at {at}: expected {[None if e is None else np.asarray(e).tolist() for e in expected]}, "
                f"got {shown}: " + ("the right gradients in the wrong order: return one per input in node.inputs "
                                    "order, (d/da, d/db)" if swapped else
                                    f"it returns {formula}, one gradient per input in node.inputs order"))


def test_unit_arithmetic_rules():
    a, b = Tensor(np.array([3.0]), requires_grad=True), Tensor(np.array([2.0]), requires_grad=True)
    at = "a = 3, b = 2, upstream gradient 1"
    rule_gives(add_backward, a + b, [[1.0], [1.0]], at, "(g, g)")
    rule_gives(sub_backward, a - b, [[1.0], [-1.0]], at, "(g, -g)")
    rule_gives(sub_backward, 1.0 - b, [[1.0], [-1.0]], "1 - b, inputs (1, b)", "(g, -g): b, the right operand, gets -g")
    rule_gives(mul_backward, a * b, [[2.0], [3.0]], at, "(g·b, g·a)")
    rule_gives(div_backward, a / b, [[0.5], [-0.75]], at, "(g / b, -g·a / b²): the derivative by b has b SQUARED")
    rule_gives(pow_backward, a**b, [[2 * 3.0], [9.0 * np.log(3.0)]], at, "(g·b·a^(b-1), g·a^b·ln a)")
    zero, power = Tensor(np.array([0.0, 2.0]), requires_grad=True), Tensor(np.array([0.0, 3.0]), requires_grad=True)
    rule_gives(pow_backward, zero**power, [[0.0, 12.0], [0.0, 8.0 * np.log(2.0)]], "a = [0, 2], b = [0, 3]",
               "0 where b == 0 for a (a⁰ = 1 is constant; b·a^(b-1) would be 0·∞ = NaN), and 0 where a <= 0 for b "
               "(ln a does not exist there)")
    rule_gives(neg_backward, -a, [[-1.0]], "a = 3", "(-g,), a tuple even for one input")
    print("✓ arithmetic rules match their derivatives, in node.inputs order")


test_unit_arithmetic_rules()

# %% [markdown]
# ## 6. Matrix multiplication
#
# For `C = A @ B` with `A (m, k)` and `B (k, n)`: `C[i, j] = Σ_p A[i, p]·B[p, j]`, so
# `∂L/∂A[i, p] = Σ_j G[i, j]·B[p, j]`, i.e. **`dA = G @ Bᵀ`**, and likewise
# **`dB = Aᵀ @ G`**. Check the shapes: `(m, n) @ (n, k) = (m, k)` ✓. A rule without the
# transposes fails loudly for most shapes, but for square matrices it runs and returns
# nonsense: the shape check is no proof.
#
# Worked example: `A = [[1, 2]]` (1×2), `B = [[3], [4]]` (2×1), `C = [[11]]`, `G = [[1]]`:
# `dA = G @ Bᵀ = [[3, 4]]` (each `A[0, p]` is multiplied by `B[p, 0]`), `dB = Aᵀ @ G =
# [[1], [2]]`.
#
# Batches need nothing new: the same formulas apply to every matrix of the batch
# (transpose the last two dims with `xp.swapaxes(M, -1, -2)`), and when the batch
# dimensions were broadcast (`(B, m, k) @ (k, n)`: one weight for every item) `dB` comes
# out as `(B, k, n)` and `unbroadcast` sums it over the batch.
#
# A 1-D operand is a vector, and the output lost its dimension: `(m, k) @ (k,)` is `(m,)`.
# Treat a 1-D right operand as `(k, 1)` and give `grad` the lost last axis back
# (`grad[..., None]`); treat a 1-D left operand as `(1, k)` and give `grad` the lost row
# axis (`grad[..., None, :]`). Do the right operand first: for `(k,) @ (k,)` the output,
# and so `grad`, is 0-d, and it needs both axes back, `(1, 1)`. At the end drop the added
# axis from the vector's gradient again, so that it is 1-D like the vector. (The reference
# solution also folds a batch that shares one weight into a single product: the same
# numbers, about 10% faster for a `Linear` layer.)

# %%
#| export
@register_backward("matmul")
def matmul_backward(grad, node: Node) -> tuple:
    """dA = G @ Bᵀ, dB = Aᵀ @ G over the last two dims. node.inputs = (A, B); returns (dA, dB).

    Batch dims may come back in the broadcast shape (the engine unbroadcasts); 1-D operands
    are vectors and get 1-D gradients; an input without requires_grad gets None.
    """
    ### BEGIN SOLUTION
    xp = array_module(grad)
    a, b = node.inputs
    A, B = a.data, b.data
    if B.ndim == 1:  # (k,) acts as (k, 1); the output lost that last (column) dimension
        B, grad = B[:, None], grad[..., None]
    if A.ndim == 1:  # (k,) acts as (1, k); the output lost the row dimension before it
        A, grad = A[None, :], grad[..., None, :]
    grad_a = grad_b = None
    if a.requires_grad:
        if B.ndim == 2 and grad.ndim > 2:  # the forward's fold: one (B·T, n) @ (n, k) product
            rows = int(np.prod(grad.shape[:-1]))
            grad_a = xp.matmul(grad.reshape(rows, grad.shape[-1]), B.T).reshape(grad.shape[:-1] + (B.shape[0],))
        else:
            grad_a = xp.matmul(grad, xp.swapaxes(B, -1, -2))
        if a.ndim == 1:
            grad_a = grad_a[..., 0, :]
    if b.requires_grad:
        if B.ndim == 2 and A.ndim > 2:  # one weight shared by a batch: fold the batch into one product
            rows = int(np.prod(A.shape[:-1]))  # not -1: a reshape cannot infer it when the array is empty
            grad_b = xp.matmul(A.reshape(rows, A.shape[-1]).T, grad.reshape(rows, grad.shape[-1]))
        else:  # batched: one product per batch item, summed by unbroadcast if B was broadcast
            grad_b = xp.matmul(xp.swapaxes(A, -1, -2), grad)
        if b.ndim == 1:
            grad_b = grad_b[..., 0]
    return grad_a, grad_b
    ### END SOLUTION


@register_flops("matmul")
def matmul_flops(node: Node, out_shape: tuple, grads: Any = None) -> int:
    """2·k FLOPs per output element, k = A's last dim: 2·m·k·n for (m, k) @ (k, n), times the batch.

    Backward: dA = G @ Bᵀ and dB = Aᵀ @ G are products of the same size as the forward's, and
    only those the rule computed count (an input that needs no gradient gets None, no product).
    """
    forward = 2 * math.prod(out_shape) * node.inputs[0].shape[-1]
    if grads is None:
        return forward
    return forward * sum(g is not None for g in grads)


# %% [markdown]
# **What a product costs.** Each of the `m·n` outputs of `(m, k) @ (k, n)` is a sum of `k`
# products: `k` multiplications and `k` additions (counting `k − 1` would be exact; the
# convention of PyTorch's `torch.utils.flop_counter`, which we follow, counts `2·k`), so
# the forward costs `2·m·k·n` FLOPs and the backward two products of the same size, `dA`
# and `dB`: training costs three times the forward, less when an input needs no gradient
# (the rule then skips its product). `matmul_flops` above, given code registered with
# `register_flops`, says exactly that; module 14's profiler adds such numbers up.

# %%
def matmul_rule(grad: np.ndarray, a: Tensor, b: Tensor) -> tuple:
    """matmul_backward for a @ b; a NumPy shape error there means a transpose is missing or misplaced."""
    try:
        return matmul_backward(grad, (a @ b)._node)
    except ValueError as err:
        raise AssertionError(f"matmul_backward for {a.shape} @ {b.shape} raised ValueError ({err}): dA = G @ Bᵀ and "
                             "dB = Aᵀ @ G, transposing the last two dims (xp.swapaxes(M, -1, -2))") from None


def test_unit_matmul_rule():
    A = Tensor(np.array([[1.0, 2.0]]), requires_grad=True)
    B = Tensor(np.array([[3.0], [4.0]]), requires_grad=True)
    dA, dB = matmul_rule(np.ones((1, 1)), A, B)
    assert dA.tolist() == [[3.0, 4.0]] and dB.tolist() == [[1.0], [2.0]], (
        f"A = [[1, 2]], B = [[3], [4]], G = [[1]]: expected dA = G @ Bᵀ = [[3, 4]] and dB = Aᵀ @ G = [[1], [2]], got "
        f"{np.asarray(dA).tolist()} and {np.asarray(dB).tolist()}")
    S = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    T = Tensor(np.array([[0.0, 1.0], [5.0, 7.0]]), requires_grad=True)
    G = np.array([[1.0, 0.0], [0.0, 0.0]])
    dS, dT = matmul_rule(G, S, T)
    assert dS.tolist() == [[0.0, 5.0], [0.0, 0.0]] and dT.tolist() == [[1.0, 0.0], [2.0, 0.0]], (
        f"square matrices, where a missing transpose does not crash: expected dS = G @ Tᵀ = [[0, 5], [0, 0]] and "
        f"dT = Sᵀ @ G = [[1, 0], [2, 0]], got {dS.tolist()} and {dT.tolist()}: transpose the other operand")
    u, v = Tensor(np.array([1.0, 2.0]), requires_grad=True), Tensor(np.array([3.0, 4.0]), requires_grad=True)
    du, dv = matmul_rule(np.asarray(2.0), u, v)  # a 0-d output
    assert np.asarray(du).tolist() == [6.0, 8.0] and np.asarray(dv).tolist() == [2.0, 4.0], (
        f"[1, 2] @ [3, 4] with upstream 2: expected du = 2·v = [6, 8] and dv = 2·u = [2, 4], 1-D like the vectors; got "
        f"{np.asarray(du).tolist()} and {np.asarray(dv).tolist()}: give grad its lost axes back (right operand first), "
        "then drop the added axis from each vector's gradient")
    print("✓ matmul rule: dA =", dA.tolist(), " dB =", dB.tolist())


test_unit_matmul_rule()

# %% [markdown]
# ## 7. Reductions
#
# * `sum`: each input element is counted once, so its gradient is the output gradient
#   of the slot it was summed into, *copied back* over the reduced axes.
# * `mean`: the same, divided by the number of elements in each average (the input's size
#   divided by the output's).
# * `max`: only the maximal element(s) moved the output. When several tie, PyTorch and
#   TinyTorch split the gradient equally among them (the average of the one-sided slopes):
#   `max([1, 3, 3])` gives `[0, 0.5, 0.5]`, not `[0, 1, 1]` (that would count the slope
#   twice) and not `[0, 1, 0]` (arbitrary).
#
# Without `keepdims` the reduced axes are gone from `grad`: `x` of shape `(2, 3)` summed
# over `axis=1` gives `(2,)`. Broadcasting `(2,)` against `(2, 3)` would line it up with
# the **last** axis, the wrong one (and for a square `x` it would not even fail). The
# given `_expand_reduced` puts the reduced axes back as size-1 axes (`(2, 1)`), which
# broadcast correctly; `node.saved["axis"]` is already a sorted tuple of non-negative
# axes (or `None` for all), and `node.saved["keepdims"]` says whether they are still
# there.

# %%
#| export
def _expand_reduced(array: Any, axis: tuple | None, keepdims: bool, ndim: int) -> Any:
    """Re-insert the axes a reduction removed, as size 1, so `array` broadcasts to its input."""
    if keepdims:
        return array
    xp = array_module(array)
    axes = tuple(range(ndim)) if axis is None else axis
    return xp.expand_dims(array, axes) if axes else array


@register_backward("sum")
def sum_backward(grad, node: Node) -> tuple:
    """Each input element gets the gradient of the sum it went into.

    node.inputs = (x,); saved axis, keepdims. Returns (g with the reduced axes restored,
    broadcast to x's shape,).
    """
    ### BEGIN SOLUTION
    (x,) = node.inputs
    xp = array_module(grad)
    grad = _expand_reduced(grad, node.saved["axis"], node.saved["keepdims"], x.ndim)
    return (xp.broadcast_to(grad, x.shape),)
    ### END SOLUTION


@register_backward("mean")
def mean_backward(grad, node: Node) -> tuple:
    """Like sum, divided by the number of elements in each average (x.size // grad.size).

    node.inputs = (x,); saved axis, keepdims. Returns one array of x's shape.
    """
    ### BEGIN SOLUTION
    (x,) = node.inputs
    xp = array_module(grad)
    count = x.size // max(grad.size, 1)
    grad = _expand_reduced(grad, node.saved["axis"], node.saved["keepdims"], x.ndim)
    return (xp.broadcast_to(grad / count, x.shape),)
    ### END SOLUTION


@register_backward("max")
def max_backward(grad, node: Node) -> tuple:
    """Gradient to the maximal elements only, shared equally among ties.

    node.inputs = (x,); saved axis, keepdims, out (the maxima). Returns (g · share,) where
    share is 1/(number of maxima) at each maximum of its slot and 0 elsewhere.
    """
    ### BEGIN SOLUTION
    (x,) = node.inputs
    axis, keepdims = node.saved["axis"], node.saved["keepdims"]
    out = _expand_reduced(node.saved["out"], axis, keepdims, x.ndim)
    grad = _expand_reduced(grad, axis, keepdims, x.ndim)
    winners = (x.data == out).astype(grad.dtype)
    share = winners / winners.sum(axis=axis, keepdims=True)
    return (grad * share,)
    ### END SOLUTION


# %%
def test_unit_reduction_rules():
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    square = Tensor(np.arange(9.0).reshape(3, 3), requires_grad=True)  # square: a reduced axis broadcast back wrongly does not crash
    restore = "put the summed axis back (_expand_reduced), then broadcast to x's shape"
    rule_gives(sum_backward, x.sum(axis=1), [[[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]], "x (2, 3).sum(axis=1), upstream [1, 2]",
               f"(g copied over the summed axis,): {restore}", grad=[1.0, 2.0])
    rule_gives(sum_backward, square.sum(axis=1), [[[1.0] * 3, [2.0] * 3, [3.0] * 3]],
               "x (3, 3).sum(axis=1), upstream [1, 2, 3]", f"each ROW gets its own sum's gradient: {restore}",
               grad=[1.0, 2.0, 3.0])
    rule_gives(mean_backward, x.mean(axis=1), [[[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]], "x (2, 3).mean(axis=1), upstream [3, 6]",
               "g / 3 over each row: divide by the count of each average (3 here, x.size // grad.size), not by x.size",
               grad=[3.0, 6.0])
    rule_gives(mean_backward, x.mean(axis=0, keepdims=True), [[[0.5] * 3, [0.5] * 3]],
               "x (2, 3).mean(axis=0, keepdims=True), upstream ones", "g / 2: with keepdims the axis is still there")
    t = Tensor(np.array([[1.0, 3.0, 3.0], [4.0, 0.0, 2.0]]), requires_grad=True)
    rule_gives(max_backward, t.max(axis=1), [[[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]]], "max over rows [1, 3, 3] and [4, 0, 2]",
               "the gradient to the maxima only; tied maxima share it equally (1/2 each for [1, 3, 3])")
    print("✓ sum, mean, max rules (max([1, 3, 3]) shares its gradient: [0, 0.5, 0.5])")


test_unit_reduction_rules()

# %% [markdown]
# ## 8. Elementwise functions, shapes, indexing, devices
#
# | op | rule | why |
# |---|---|---|
# | `exp` | `g·out` | `(eˣ)' = eˣ`, already computed in the forward (saved `out`) |
# | `log` | `g / x` | `(ln x)' = 1/x` |
# | `sqrt` | `g / (2·out)` | `(√x)' = 1/(2√x)` |
# | `reshape` | `g` reshaped to the input's shape | the same numbers, in a different arrangement |
# | `permute` | `g` permuted by the inverse order | moving dims back where they came from: `np.argsort(dims)` |
# | `getitem` | zeros of the input's shape with `g` **added** at the indexed places | `x[[0, 0]]` reads row 0 twice, so row 0 gets both gradients: a *scatter-add* (`_scatter_add`, given), not an assignment |
# | `masked_fill` | `g` with zeros where the mask is True | filled positions are constants |
# | `to` | `g` moved back to the input's device (`to_array(g, device=...)`) | gradients live where their tensor lives |
#
# Each takes `node.inputs = (x,)` and returns a one-element tuple.

# %%
#| export
@register_backward("exp")
def exp_backward(grad, node: Node) -> tuple:
    """(e^x)' = e^x: returns (g · saved out,)."""
    ### BEGIN SOLUTION
    return (grad * node.saved["out"],)
    ### END SOLUTION


@register_backward("log")
def log_backward(grad, node: Node) -> tuple:
    """(ln x)' = 1/x: returns (g / x.data,)."""
    ### BEGIN SOLUTION
    return (grad / node.inputs[0].data,)
    ### END SOLUTION


@register_backward("sqrt")
def sqrt_backward(grad, node: Node) -> tuple:
    """(√x)' = 1/(2√x): returns (g / (2 · saved out),)."""
    ### BEGIN SOLUTION
    return (grad / (2 * node.saved["out"]),)
    ### END SOLUTION


@register_backward("reshape")
def reshape_backward(grad, node: Node) -> tuple:
    """The same elements in the input's shape: returns (g reshaped to x's shape,)."""
    ### BEGIN SOLUTION
    return (grad.reshape(node.inputs[0].shape),)
    ### END SOLUTION


@register_backward("permute")
def permute_backward(grad, node: Node) -> tuple:
    """Output dim i came from input dim dims[i] (saved dims): returns (g transposed by argsort(dims),)."""
    ### BEGIN SOLUTION
    inverse = tuple(int(i) for i in np.argsort(node.saved["dims"]))
    return (array_module(grad).transpose(grad, inverse),)
    ### END SOLUTION


def _scatter_add(target: Any, index: Any, values: Any) -> None:
    """target[index] += values, where repeated indices add up (NumPy or CuPy).

    `add.at` is the unbuffered form of `+=`; CuPy implements it with atomic additions.
    """
    array_module(target).add.at(target, index, values)


@register_backward("getitem")
def getitem_backward(grad, node: Node) -> tuple:
    """Scatter-add g into zeros shaped like x at saved index (repeats accumulate): returns (that,)."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    full = array_module(grad).zeros(x.shape, dtype=grad.dtype)
    _scatter_add(full, node.saved["index"], grad)
    return (full,)
    ### END SOLUTION


@register_backward("masked_fill")
def masked_fill_backward(grad, node: Node) -> tuple:
    """Filled positions (saved mask True) were replaced by a constant: returns (g with 0 there,)."""
    ### BEGIN SOLUTION
    return (array_module(grad).where(node.saved["mask"], 0, grad),)
    ### END SOLUTION


@register_backward("to")
def to_backward(grad, node: Node) -> tuple:
    """The gradient goes back to the input's device (saved device): returns (g on that device,)."""
    ### BEGIN SOLUTION
    return (to_array(grad, device=node.saved["device"]),)
    ### END SOLUTION


# %%
def test_unit_shape_and_index_rules():
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    rule_gives(permute_backward, x.permute(1, 0), [[[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]], "x (2, 3).permute(1, 0)",
               "(g transposed back by the inverse order, np.argsort(dims),)", grad=np.arange(6.0).reshape(3, 2))
    cube = Tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
    rule_gives(permute_backward, cube.permute(2, 0, 1), [np.arange(24.0).reshape(2, 3, 4)], "x (2, 3, 4).permute(2, 0, 1)",
               "(g permuted by the INVERSE order, np.argsort(dims), not by dims again,)",
               grad=np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1))
    rule_gives(getitem_backward, x[np.array([1, 1, 0])], [[[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]], "x[[1, 1, 0]]",
               "(zeros with g added at the index,): repeated indices must add up (_scatter_add), not overwrite")
    rule_gives(masked_fill_backward, x.masked_fill(np.array([True, False, False]), 0.0), [[[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]],
               "x.masked_fill(column 0, 0.0)", "(g with 0 where the mask is True: the filled positions are constants,)")
    positive = Tensor(np.array([1.0, 4.0]), requires_grad=True)
    rule_gives(exp_backward, positive.exp(), [np.exp([1.0, 4.0])], "exp at [1, 4]", "(g · the saved out,)")
    rule_gives(log_backward, positive.log(), [[1.0, 0.25]], "log at [1, 4]", "(g / x,)")
    rule_gives(sqrt_backward, positive.sqrt(), [[0.5, 0.25]], "sqrt at [1, 4]", "(g / (2 · the saved out),): (√x)' = 1/(2√x)")
    rule_gives(reshape_backward, x.reshape(3, 2), [np.ones((2, 3))], "x (2, 3).reshape(3, 2)", "(g reshaped to x's shape,)")
    print("✓ permute, getitem (scatter-add), masked_fill, exp rules")


test_unit_shape_and_index_rules()

# %% [markdown]
# ## 9. Activations and losses (modules 02 and 04)
#
# These forwards live in `tinytorch.core.activations` and `tinytorch.core.losses`; they
# save exactly what these rules read (the table in section 2).
#
# * `relu`: slope 1 where `x > 0`, else 0.
# * `sigmoid`: `σ' = σ(1 - σ)`; `tanh`: `tanh' = 1 - tanh²` (both from the saved output).
# * `gelu` (tanh approximation) `0.5·x·(1 + tanh u)`, `u = c·(x + 0.044715x³)`,
#   `c = √(2/π)`: product rule gives `0.5(1 + tanh u) + 0.5x(1 - tanh² u)·c·(1 + 3·0.044715x²)`.
# * `softmax` `s = softmax(x)`: the Jacobian is `diag(s) - s sᵀ`, so
#   `dx = s ⊙ (g - Σ g⊙s)` (sum along `dim`, keepdims), no matrix needed.
# * `log_softmax` `ℓ = x - logsumexp(x)`: `dx = g - softmax(x)·Σ g`, with `softmax = e^ℓ`.
# * `cross_entropy` (fused): the mean over valid positions of `-log softmax(z)[target]`
#   has gradient `(probs - onehot(targets)) · valid / count`: the cleanest formula in deep
#   learning, and the reason the loss takes logits. The forward saved `probs` (same shape
#   as the logits), `targets` (int class indices in which every **ignored** position was
#   replaced by 0, so each is a valid index), `valid` (bool, False where ignored) and
#   `count` (valid positions, at least 1). Because ignored positions point at class 0,
#   the `valid` factor is what gives them zero gradient. `grad` is a 0-d array (the loss
#   is a scalar): multiply by it.
# * `bce_with_logits`: `mean(softplus(z) - t·z)` has gradient `(σ(z) - t) / N`, `N` the
#   number of elements; compute `σ(z)` as `0.5·(1 + tanh(z/2))`, which never overflows.
# * `binary_cross_entropy` on probabilities clipped to `[eps, 1-eps]`:
#   `(p - t) / (p(1 - p)) / N` inside the clip range, 0 where the clip is active (there
#   the loss is flat). **Float16 trap:** `1 - 1e-7` rounds to exactly `1.0` in float16,
#   so a clip at `1 - eps` does nothing, `p(1 - p)` is 0 at `p = 1`, and `0/0` gives NaN
#   even though the gradient there is masked to 0. Compute in at least float32
#   (`xp.promote_types(p.dtype, np.float32)`), as the forward does; the engine casts the
#   result back to float16.

# %%
#| export
@register_backward("relu")
def relu_backward(grad, node: Node) -> tuple:
    """Slope 1 where x > 0, else 0: returns (g · (x > 0),)."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    return (grad * (x.data > 0),)
    ### END SOLUTION


@register_backward("sigmoid")
def sigmoid_backward(grad, node: Node) -> tuple:
    """σ'(x) = σ(1 - σ), σ the saved out: returns (g·σ(1 - σ),)."""
    ### BEGIN SOLUTION
    s = node.saved["out"]
    return (grad * s * (1 - s),)
    ### END SOLUTION


@register_backward("tanh")
def tanh_backward(grad, node: Node) -> tuple:
    """tanh'(x) = 1 - tanh², tanh the saved out: returns (g·(1 - out²),)."""
    ### BEGIN SOLUTION
    t = node.saved["out"]
    return (grad * (1 - t * t),)
    ### END SOLUTION


_GELU_C = float(np.sqrt(2.0 / np.pi))


@register_backward("gelu")
def gelu_backward(grad, node: Node) -> tuple:
    """Derivative of 0.5·x·(1 + tanh(c·(x + 0.044715·x³))), c = _GELU_C: returns (g · slope,)."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    x = node.inputs[0].data
    x2 = x * x  # x * x, never x**3: NumPy's general power is ~100x slower on float32
    t = x2 * 0.044715
    t += 1
    t *= x
    t *= _GELU_C
    xp.tanh(t, out=t)  # t = tanh(c·(x + 0.044715·x³))
    slope = x2  # in place from here on: one new array for the whole rule
    slope *= 3 * 0.044715
    slope += 1
    slope *= x
    slope *= _GELU_C  # c·x·(1 + 3·0.044715·x²)
    slope *= 1 - t * t
    slope += t
    slope += 1
    slope *= 0.5  # 0.5·(1 + t) + 0.5·x·(1 − t²)·c·(1 + 3·0.044715·x²)
    slope *= grad
    return (slope,)
    ### END SOLUTION


@register_backward("softmax")
def softmax_backward(grad, node: Node) -> tuple:
    """dx = s ⊙ (g - Σ_dim g⊙s), s the saved out, dim saved: the Jacobian applied without building it."""
    ### BEGIN SOLUTION
    s, dim = node.saved["out"], node.saved["dim"]
    return (s * (grad - (grad * s).sum(axis=dim, keepdims=True)),)
    ### END SOLUTION


@register_backward("log_softmax")
def log_softmax_backward(grad, node: Node) -> tuple:
    """dx = g - softmax(x)·Σ_dim g, with softmax = exp(saved out), dim saved."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    out, dim = node.saved["out"], node.saved["dim"]
    return (grad - xp.exp(out) * grad.sum(axis=dim, keepdims=True),)
    ### END SOLUTION


@register_backward("cross_entropy")
def cross_entropy_backward(grad, node: Node) -> tuple:
    """(probs - onehot(targets)) · valid / count, times the upstream (0-d) gradient.

    Saved: probs (..., C), targets (...) ints with ignored positions set to 0, valid (...)
    bools, count >= 1. Ignored positions get exactly 0. Returns (dlogits,), shape (..., C).
    """
    ### BEGIN SOLUTION
    xp = array_module(grad)
    probs, targets = node.saved["probs"], node.saved["targets"]
    valid, count = node.saved["valid"], node.saved["count"]
    onehot = xp.arange(probs.shape[-1]) == targets[..., None]  # compare with every class index
    return (grad * (probs - onehot) * valid[..., None] / count,)
    ### END SOLUTION


@register_backward("bce_with_logits")
def bce_with_logits_backward(grad, node: Node) -> tuple:
    """(σ(z) - t) / N for the mean loss, z the input's data, t the saved targets, N = z.size."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    z = node.inputs[0].data
    sigma = 0.5 * (1 + xp.tanh(0.5 * z))  # σ(z) without overflow in exp
    return (grad * (sigma - node.saved["targets"]) / z.size,)
    ### END SOLUTION


@register_backward("binary_cross_entropy")
def binary_cross_entropy_backward(grad, node: Node) -> tuple:
    """(p - t) / (p(1 - p)) / N on p clipped to [eps, 1 - eps]; 0 where the clip is active.

    p the input's data (computed in at least float32), t and eps saved, N = p.size. Finite
    for every p in [0, 1], also in float16.
    """
    ### BEGIN SOLUTION
    xp = array_module(grad)
    p, t, eps = node.inputs[0].data, node.saved["targets"], node.saved["eps"]
    p = p.astype(xp.promote_types(p.dtype, np.float32))  # in float16, 1 - 1e-7 rounds to 1
    clipped = xp.clip(p, eps, 1 - eps)
    inside = (p >= eps) & (p <= 1 - eps)
    return (grad * inside * (clipped - t) / (clipped * (1 - clipped)) / p.size,)
    ### END SOLUTION


# %%
def test_unit_activation_and_loss_rules():
    from tinytorch.core import activations as act
    from tinytorch.core import losses

    x = Tensor(np.array([-1.0, 0.5, 2.0]), requires_grad=True)
    rule_gives(relu_backward, act.relu(x), [[0.0, 1.0, 1.0]], "relu at [-1, 0.5, 2]", "(g · (x > 0),)")
    at_zero = Tensor(np.array([0.0, 1.0]), requires_grad=True)
    rule_gives(relu_backward, act.relu(at_zero), [[0.0, 1.0]], "relu at [0, 1]",
               "(g · (x > 0),): at exactly 0 the slope is 0 (x > 0, not x >= 0), as in PyTorch")
    s = act.softmax(x).numpy()
    rule_gives(softmax_backward, act.softmax(x), [[0.0, 0.0, 0.0]], "softmax at [-1, 0.5, 2], upstream ones",
               "(s ⊙ (g - Σ g⊙s),): softmax's outputs sum to 1, so a uniform upstream gradient changes nothing")
    upstream = np.array([1.0, -2.0, 0.5])
    rule_gives(softmax_backward, act.softmax(x), [s * (upstream - (upstream * s).sum())], "softmax, upstream [1, -2, 0.5]",
               "(s ⊙ (g - Σ g⊙s),), the sum of g times s along dim", grad=upstream)
    z = Tensor(np.array([[2.0, 0.0], [0.0, 0.0]]), requires_grad=True)
    loss = losses.cross_entropy(z, np.array([0, -100]), ignore_index=-100)
    p = np.exp(2.0) / (np.exp(2.0) + 1)
    rule_gives(cross_entropy_backward, loss, [[[p - 1, 1 - p], [0.0, 0.0]]], "logits [[2, 0], [0, 0]], targets [0, ignored]",
               "((probs - onehot) · valid / count,): the ignored row must get no gradient, and count is 1 here")
    logits = Tensor(np.array([0.0, 2.0, -1.0]), requires_grad=True)
    sigma = 1 / (1 + np.exp(-logits.numpy()))
    targets = np.array([1.0, 0.0, 1.0])
    rule_gives(bce_with_logits_backward, losses.binary_cross_entropy_with_logits(logits, targets),
               [(sigma - targets) / 3], "logits [0, 2, -1], targets [1, 0, 1]",
               "((σ(z) - t) / N,): the loss is the MEAN over the N = 3 elements")
    p16 = Tensor(np.array([1.0, 0.0, 0.5], dtype=np.float16), requires_grad=True)
    (g,) = binary_cross_entropy_backward(np.asarray(1.0, dtype=np.float16),
                                         losses.binary_cross_entropy(p16, np.array([1.0, 0.0, 1.0]))._node)
    assert np.isfinite(g).all(), (f"binary_cross_entropy's rule gave {g} for float16 p = [1, 0, 0.5]: compute in at least "
                                  "float32 (in float16 1 - 1e-7 rounds to 1, and 0/0 is NaN even where the gradient is masked)")
    assert np.allclose(g, [0.0, 0.0, -2 / 3], atol=1e-3), (
        f"binary_cross_entropy's rule at p = [1, 0, 0.5], t = [1, 0, 1]: expected [0, 0, -2/3] (0 where the clip is "
        f"active), got {np.asarray(g, dtype=float).round(4).tolist()}")
    print("✓ relu, softmax, cross-entropy (ignored rows get 0), binary cross-entropy (float16 at p = 0, 1)")


test_unit_activation_and_loss_rules()

# %% [markdown]
# ## 10. Switching recording off: `no_grad`
#
# Evaluation, optimizer updates and weight initialisation must not grow the graph: it
# costs memory (every node keeps its inputs alive) and an optimizer step recorded into the
# graph would be differentiated next time. `no_grad()` turns `GradMode.enabled` off
# (`record_op` then attaches no node) and restores the **previous** value on the way out,
# even when the block raises, so blocks nest: an inner `no_grad` inside an outer one must
# leave recording *off* when it exits.
#
# **Your turn.** `__enter__` remembers the current `GradMode.enabled` (on a stack,
# `self._previous`: the same object may be entered again while it is active, e.g. a
# decorated function that calls itself) and switches it off; `__exit__` restores the value
# it remembered and returns `False` (an exception inside the block keeps propagating).
# `__call__` makes `@no_grad()` work on a function: the wrapper runs the function inside
# the block, so that an exception in the function still restores the mode (`with self:`
# does that for you; calling `__enter__` and `__exit__` by hand does not).

# %%
#| export
def is_grad_enabled() -> bool:
    """Whether operations currently record the graph."""
    return GradMode.enabled


class no_grad:
    """`with no_grad(): ...` (or `@no_grad()` on a function): build no graph inside.

    On exit the previous mode comes back, also when the block raises, so blocks nest.
    """

    def __init__(self) -> None:
        self._previous: list[bool] = []

    def __enter__(self) -> "no_grad":
        """Remember GradMode.enabled on self._previous, switch recording off, return self."""
        ### BEGIN SOLUTION
        self._previous.append(GradMode.enabled)
        GradMode.enabled = False
        return self
        ### END SOLUTION

    def __exit__(self, *exc_info: Any) -> bool:
        """Restore the remembered mode; return False so an exception propagates."""
        ### BEGIN SOLUTION
        GradMode.enabled = self._previous.pop()
        return False  # never swallow the exception
        ### END SOLUTION

    def __call__(self, fn: Callable) -> Callable:
        """`@no_grad()`: a wrapper that runs `fn` with recording off, restoring the mode afterwards."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ### BEGIN SOLUTION
            with self:
                return fn(*args, **kwargs)
            ### END SOLUTION

        return wrapper


# %%
def test_unit_no_grad():
    w = Tensor([1.0, 2.0], requires_grad=True)
    try:
        with no_grad():
            y = w * 2
            with no_grad():
                pass
            assert not is_grad_enabled(), ("an inner no_grad block must restore the mode it found, 'off', not switch "
                                           "recording on: remember GradMode.enabled in __enter__, restore it in __exit__")
    except IndexError as err:
        raise AssertionError(f"leaving a no_grad block raised IndexError ({err}): __exit__ found nothing to restore; "
                             "__enter__ must remember the mode first (self._previous.append(GradMode.enabled))") from None
    assert y._node is None and not y.requires_grad, "w * 2 inside no_grad() must record nothing and require no gradient"
    assert is_grad_enabled(), "after the outer no_grad block recording must be on again"
    try:
        with no_grad():
            raise KeyError("boom")
    except KeyError:
        pass
    except Exception as err:
        raise AssertionError(f"an exception inside no_grad() must come out as it is, got {type(err).__name__}") from None
    else:
        raise AssertionError("no_grad() swallowed the exception raised inside it: __exit__ must return False")
    assert is_grad_enabled(), "an exception inside no_grad() must still restore recording (__exit__ runs)"
    assert (w * 2).requires_grad, "outside no_grad() w * 2 is recorded again"
    assert w.detach()._node is None and not w.detach().requires_grad, "w.detach() is a leaf that needs no gradient"

    @no_grad()
    def evaluate(t):
        return t * 3

    @no_grad()
    def fails(t):
        raise ValueError("inside a decorated function")

    assert evaluate(w)._node is None, "a function decorated with @no_grad() must record nothing"
    assert is_grad_enabled(), "after a @no_grad() function returns, recording must be on again"
    try:
        fails(w)
    except ValueError:
        pass
    assert is_grad_enabled(), ("@no_grad() must restore the mode when the function raises: run it inside `with self:` "
                               "(calling __enter__ and __exit__ by hand skips __exit__ on an exception)")
    print("✓ no_grad records nothing, nests, and restores the mode even after an exception")


test_unit_no_grad()
# %% [markdown]
# ## 11. Checking rules: central differences and `gradcheck`
#
# A wrong rule does not crash; it trains badly. The defence is to compare every rule
# with **central differences**: `∂f/∂x_i ≈ (f(x + ε e_i) - f(x - ε e_i)) / 2ε`, whose
# error is `O(ε²)` (truncation) plus `O(δ/ε)` where `δ` is the rounding error of `f`.
#
# For a non-scalar output we contract it with a **random** cotangent `v`
# (`f = Σ v ⊙ out`): a cotangent of ones would hide errors that cancel in a plain sum
# (a softmax's gradient with respect to an all-ones cotangent is zero whatever the rule).
#
# The numerical side is given code in a small module of its own, `tinytorch.testing`
# (its source is `testing.py` beside this lesson; the next line imports it): this
# notebook, the test suite and the benchmarks all compute central differences with these
# two functions, so there is one copy to trust.
#
# * `central_difference(f, x, eps)`: the gradient of a scalar function `f` of one array;
# * `numeric_vjp(fn, arrays, cotangent, eps)`: for a TinyTorch function `fn` of several
#   Tensors, the central-difference gradient of `Σ cotangent ⊙ fn(...)` with respect to
#   each input array, in float64. It only runs `fn` forward.

# %%
from tinytorch.testing import central_difference, numeric_vjp  # given: modules/05_autograd/testing.py

# %% [markdown]
# ### Predict, then run: float32 or float64?
#
# Precision matters. float32 resolves about 1 part in 10⁷ (`δ ≈ 6e-8` relative). Each
# value of `f` is rounded by about `δ·|f|`, and the difference quotient divides that by
# `ε`: the rounding term is about `δ·|f|/ε`. With `ε = 1e-6` and `|f|` near 1 that is
# `0.06`; it grows with `|f|`. float64 (`δ ≈ 1e-16`) leaves about `1e-10·|f|`.
#
# **Predict** before you run the next cell: for `f(x) = Σ x²` over five values between
# 0.5 and 2 (so `|f|` is about 7; true gradient `2x`), how large will the largest error
# of the central difference be in float32, and in float64? Will each pass a check with `atol=1e-5, rtol=1e-3`? Write your
# two numbers down.

# %%
_x = np.random.default_rng(3).uniform(0.5, 2.0, 5)
for _dtype in (np.float32, np.float64):
    _xd = _x.astype(_dtype)
    _numeric = central_difference(lambda v: (v * v).sum(), _xd, 1e-6)
    _err = np.abs(_numeric - 2 * _xd).max()
    _ok = np.allclose(_numeric, 2 * _xd, atol=1e-5, rtol=1e-3)
    print(f"{np.dtype(_dtype).name}: max error {_err:.2e} -> {'passes' if _ok else 'FAILS'} atol=1e-5, rtol=1e-3")


# %% [markdown]
# So `gradcheck` always computes in float64, whatever the dtype of the tensors it is
# given: it makes float64 copies (leaves, so they get `.grad`), runs `backward` once with
# a seeded random cotangent, and compares each input's `.grad` with `numeric_vjp`.
#
# **Your turn: `gradcheck(fn, inputs, ...)`.** Use the given helpers: `_float64_copy(t)`
# (a float64 leaf copy of a floating Tensor on the host, anything else unchanged) and
# `_compare_gradients(op, i, analytic, numeric, atol, rtol)` (raises the AssertionError
# that names the output's op, input `i`, the first index where they disagree and both
# values). `op` is the name of the op that made the output (`out._node.op`), the first
# place to look when the check fails. Only inputs that are Tensors with
# `requires_grad=True` are checked; the others are held fixed, so give `numeric_vjp` a
# function of the checked inputs only. An input that got no gradient (`.grad is None`)
# counts as a gradient of zeros. Run `numeric_vjp` under `no_grad()`: it only needs the
# forward pass.

# %%
#| export
def _float64_copy(t: Any) -> Any:
    """A float64 leaf copy (on the host) of a floating Tensor, keeping requires_grad; anything else as is."""
    if isinstance(t, Tensor) and np.issubdtype(t.dtype, np.floating):
        return Tensor(to_host(t.data).astype(np.float64), requires_grad=t.requires_grad)
    return t


def _compare_gradients(op: str | None, index: int, analytic: Any, numeric: np.ndarray,
                       atol: float, rtol: float) -> None:
    """AssertionError naming op, input and element when |analytic - numeric| > atol + rtol·|numeric|."""
    analytic = np.asarray(to_host(analytic), dtype=np.float64)
    bad = ~(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric))
    if bad.any():
        where = tuple(int(k) for k in np.argwhere(bad)[0])
        raise AssertionError(
            f"gradcheck (output made by op {op!r}): input {index}, index {where}: backward gives "
            f"{analytic[where]:.8g}, central differences give {numeric[where]:.8g} "
            f"(atol={atol}, rtol={rtol}); {int(bad.sum())} of {bad.size} elements disagree."
        )


def gradcheck(fn: Callable[..., Tensor], inputs: Sequence[Any], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0) -> bool:
    """Compare backward's gradients of `fn(*inputs)` with float64 central differences.

    Every input that is a Tensor with requires_grad is checked element by element against
    `numeric_vjp` of f = Σ v ⊙ fn(*inputs), v a random cotangent from
    `np.random.default_rng(seed)`. Returns True, or raises AssertionError naming the
    output's op, the input, the element index and both values. Works on float64 copies:
    the caller's tensors (and their .grad) are left untouched. Raises ValueError (given)
    when no input requires a gradient: a check of nothing must not pass.
    """
    if not any(isinstance(t, Tensor) and t.requires_grad for t in inputs):
        raise ValueError("gradcheck: no input has requires_grad=True, so there is nothing to check; "
                         "pass the tensors whose gradients you want checked with requires_grad=True.")
    ### BEGIN SOLUTION
    xs = [_float64_copy(t) for t in inputs]
    checked = [i for i, x in enumerate(xs) if isinstance(x, Tensor) and x.requires_grad]
    out = fn(*xs)
    v = np.random.default_rng(seed).standard_normal(out.shape)
    backward(out, v)

    def of_checked(*values: Tensor) -> Tensor:
        args = list(xs)
        for i, value in zip(checked, values):
            args[i] = value
        return fn(*args)

    with no_grad():
        numeric = numeric_vjp(of_checked, [xs[i].data for i in checked], v, eps)
    op = out._node.op if out._node is not None else None
    for i, expected in zip(checked, numeric):
        grad = xs[i].grad
        _compare_gradients(op, i, grad.data if grad is not None else np.zeros(xs[i].shape), expected, atol, rtol)
    return True
    ### END SOLUTION


# %%
def test_unit_gradcheck():
    x32 = np.random.default_rng(3).uniform(0.5, 2.0, 5).astype(np.float32)
    x = Tensor(x32, requires_grad=True)
    try:
        gradcheck(lambda t: t * t, [x])
    except AssertionError as err:
        raise AssertionError(f"gradcheck rejected x * x for a float32 x ({err}): float32 central differences are too "
                             "coarse; work on float64 copies (_float64_copy), whatever the inputs' dtype") from None
    assert x.grad is None, "gradcheck works on copies (_float64_copy): the caller's .grad must be untouched, it is not"
    # gradcheck raises (naming op, input and element) when a right rule is rejected; it must hold b fixed
    gradcheck(lambda a, b: a * b, [Tensor(np.array([0.3, -0.7]), requires_grad=True), Tensor([2.0, 5.0])])

    def zero_softmax(t: Tensor) -> Tensor:  # a softmax whose rule returns zeros: right only for a cotangent of ones
        e = np.exp(t.data - t.data.max(axis=-1, keepdims=True))
        return record_op("zero_softmax_demo", e / e.sum(axis=-1, keepdims=True), (t,))

    register_backward("zero_softmax_demo")(lambda grad, node: (np.zeros_like(grad),))
    try:
        gradcheck(zero_softmax, [Tensor(np.random.default_rng(4).standard_normal((2, 4)), requires_grad=True)])
    except AssertionError:
        pass
    else:
        raise AssertionError("gradcheck accepted a softmax rule that returns zeros: a cotangent of ones hides it (the "
                             "outputs sum to 1); contract with a random cotangent, np.random.default_rng(seed)")
    finally:
        del BACKWARD_RULES["zero_softmax_demo"]

    def cube(t: Tensor) -> Tensor:
        return record_op("cube_demo", t.data**3, (t,))

    def scaled(a: Tensor, b: Tensor) -> Tensor:  # a * b whose rule is right for a and wrong for b
        return record_op("scaled_demo", a.data * b.data, (a, b))

    register_backward("scaled_demo")(lambda grad, node: (grad * node.inputs[1].data, grad * 2 * node.inputs[0].data))
    try:
        gradcheck(scaled, [Tensor(np.array([0.5, 1.0]), requires_grad=True), Tensor(np.array([2.0, 3.0]), requires_grad=True)])
    except AssertionError as err:
        assert "input 1" in str(err), f"gradcheck must name the input whose gradient is wrong (input 1), it says: {err}"
    else:
        raise AssertionError("gradcheck accepted a rule that is wrong for its second input only: compare EVERY input "
                             "that requires a gradient, not only the first")
    finally:
        del BACKWARD_RULES["scaled_demo"]
    register_backward("cube_demo")(lambda grad, node: (grad * 2 * node.inputs[0].data ** 2,))  # should be 3x²
    try:
        gradcheck(cube, [Tensor(np.array([0.5, 1.0, 2.0]), requires_grad=True)])
    except AssertionError as err:
        message = str(err)
    else:
        raise AssertionError("gradcheck accepted a wrong rule")
    finally:
        del BACKWARD_RULES["cube_demo"]
    assert "cube_demo" in message and "input 0" in message and "(0,)" in message, (
        f"gradcheck's message must name the op ('cube_demo'), the input ('input 0') and the first element that "
        f"disagrees ('(0,)'): call _compare_gradients(op, i, ...); it says: {message}")
    print("✓ gradcheck passes a right rule, in float64, and reports a wrong one:\n ", message)


test_unit_gradcheck()

# %% [markdown]
# ## 12. Trying it out
#
# Below we call the engine directly, `backward(loss)`, so the notebook always runs *your*
# current code. After `tito export 05`, `loss.backward()` does the same: `Tensor.backward`
# (module 01) hands over to `tinytorch.core.autograd.backward`.
#
# The example from section 1, then `x*x + x`: `x` is used three times (twice by `mul`,
# once by `add`), so its gradient must be `2x + 1`. An engine that *assigned* instead of
# adding, or that ran the `mul` rule before `add` had reported, would get `x`, `x + 1` or `2x`.

# %%
a = Tensor([2.0, 3.0], requires_grad=True)
b = Tensor([4.0, 5.0], requires_grad=True)
backward((a * b + a).sum())
print("L = (a*b + a).sum():  dL/da =", a.grad.numpy(), " dL/db =", b.grad.numpy())

x = Tensor([1.0, -2.0, 0.5], requires_grad=True)
backward((x * x + x).sum())
print("x*x + x:  grad =", x.grad.numpy(), " 2x + 1 =", 2 * x.numpy() + 1)

# The three contributions x receives, one rule at a time, for x = 3:
x = Tensor(np.array([3.0]), requires_grad=True)
y = x * x + x
print("walk order (output first):", [t._node.op if t._node else "leaf x" for t in reversed(topological_order(y))])
g_square, g_from_add = add_backward(np.ones(1), y._node)
g_left, g_right = mul_backward(g_square, y._node.inputs[0]._node)
print(f"x gets {g_from_add[0]} from add, {g_left[0]} and {g_right[0]} from mul (left, right): "
      f"sum {g_from_add[0] + g_left[0] + g_right[0]} = 2·3 + 1; keeping only the last would give {g_right[0]}")


# %%
def test_unit_chain_rule_and_accumulation():
    a = Tensor([2.0, 3.0], requires_grad=True)
    b = Tensor([4.0, 5.0], requires_grad=True)
    backward((a * b + a).sum())
    assert np.allclose(a.grad.numpy(), [5.0, 6.0]) and np.allclose(b.grad.numpy(), [2.0, 3.0]), (
        f"L = (a*b + a).sum() at a = [2, 3], b = [4, 5]: expected dL/da = b + 1 = [5, 6], dL/db = a = [2, 3]; got "
        f"{a.grad.numpy().tolist()} and {b.grad.numpy().tolist()}")
    x = Tensor([1.0, -2.0, 0.5], requires_grad=True)
    y = x * x + x
    backward(y.sum())
    assert np.allclose(x.grad.numpy(), [3.0, -3.0, 2.0]), (
        f"(x*x + x).sum() at x = [1, -2, 0.5]: expected 2x + 1 = [3, -3, 2], got {x.grad.numpy().tolist()}: x gets three "
        "contributions (two from mul, one from add) and they must add up")
    assert y.grad is None, "y is an intermediate: it gets no .grad unless it asked with retain_grad()"
    backward((x * 3).sum())  # a second backward adds to .grad
    assert np.allclose(x.grad.numpy(), [6.0, 0.0, 5.0]), (
        f"a second backward must ADD 3 to x.grad: expected [6, 0, 5], got {x.grad.numpy().tolist()}")
    x.zero_grad()
    assert x.grad is None, "zero_grad() sets .grad to None"
    print("✓ chain rule, a tensor used twice, accumulation across backward calls")


test_unit_chain_rule_and_accumulation()


# %%
def test_unit_broadcast_backward():
    a = Tensor(np.zeros((2, 3)), requires_grad=True)
    b = Tensor(np.zeros((1, 3)), requires_grad=True)
    c = Tensor(np.zeros(3), requires_grad=True)
    upstream = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    backward(a + b + c, upstream)
    for t, expected in ((a, upstream), (b, [[5.0, 7.0, 9.0]]), (c, [5.0, 7.0, 9.0])):
        assert t.grad.shape == t.shape and np.array_equal(t.grad.numpy(), expected), (
            f"the input of shape {t.shape} must get the upstream gradient summed to its own shape, "
            f"{np.asarray(expected).tolist()}; got {t.grad.numpy().tolist()} of shape {t.grad.shape}: unbroadcast")
    print("✓ broadcast gradients summed back to each input's shape:", b.grad.numpy().tolist())


test_unit_broadcast_backward()

# %% [markdown]
# ### A deep graph
#
# 10,000 additions in a row: a recursive walk would die with `RecursionError`; the
# explicit stack does not care.

# %%
def test_unit_deep_chain():
    x = Tensor(np.array([1.0]), requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y + 1.0
    try:
        backward(y.sum())
    except RecursionError:
        raise AssertionError("a chain of 10,000 ops exceeded Python's recursion limit: topological_order must walk "
                             "the graph with an explicit stack, not recursion") from None
    assert x.grad.numpy().tolist() == [1.0], f"x + 1 + 1 + ... has slope 1 in x, got {x.grad.numpy().tolist()}"
    print("✓ 10,000-op chain, no recursion")


test_unit_deep_chain()

# %% [markdown]
# ### Every rule, checked numerically
#
# One line per op: the largest gap between `backward` and float64 central differences
# (`numeric_vjp`, against a random cotangent). `gradcheck` must pass for each; the printed
# numbers show how close they are.

# %%
def _numeric_gap(fn, inputs) -> float:
    """max |backward - central difference| over all inputs (float64, random cotangent)."""
    xs = [Tensor(t.data.astype(np.float64), requires_grad=True) for t in inputs]
    out = fn(*xs)
    v = np.random.default_rng(1).standard_normal(out.shape)
    backward(out, v)
    numeric = numeric_vjp(fn, [x.data for x in xs], v)
    return max(float(np.abs(x.grad.data - n).max()) for x, n in zip(xs, numeric))


from tinytorch.core import activations as act  # module 02's forwards
from tinytorch.core import losses  # module 04's forwards

_rng = np.random.default_rng(0)
_pos = lambda *s: Tensor(_rng.uniform(0.5, 2.0, s))  # noqa: E731
_any = lambda *s: Tensor(_rng.standard_normal(s))  # noqa: E731
EXAMPLES = {
    "add (broadcast)": (lambda a, b: a + b, [_any(2, 3), _any(3)]),
    "sub (broadcast)": (lambda a, b: a - b, [_any(2, 1), _any(1, 3)]),
    "mul": (lambda a, b: a * b, [_any(2, 3), _any(2, 3)]),
    "div": (lambda a, b: a / b, [_any(2, 3), _pos(2, 3)]),
    "pow": (lambda a, b: a**b, [_pos(2, 3), _any(2, 3)]),
    "neg": (lambda a: -a, [_any(4)]),
    "matmul (batched)": (lambda a, b: a @ b, [_any(2, 3, 4), _any(4, 5)]),
    "matmul (vector)": (lambda a, b: a @ b, [_any(4), _any(3, 4, 2)]),
    "sum(axis=1)": (lambda a: a.sum(axis=1), [_any(2, 3, 4)]),
    "mean(keepdims)": (lambda a: a.mean(axis=(0, 2), keepdims=True), [_any(2, 3, 4)]),
    "max(axis=-1)": (lambda a: a.max(axis=-1), [_any(3, 5)]),
    "exp": (lambda a: a.exp(), [_any(2, 3)]),
    "log": (lambda a: a.log(), [_pos(2, 3)]),
    "sqrt": (lambda a: a.sqrt(), [_pos(2, 3)]),
    "reshape": (lambda a: a.reshape(3, 2), [_any(2, 3)]),
    "permute": (lambda a: a.permute(2, 0, 1), [_any(2, 3, 4)]),
    "getitem (repeats)": (lambda a: a[[0, 2, 0, 0]], [_any(3, 2)]),
    "masked_fill": (lambda a: a.masked_fill(np.array([True, False, True]), 0.0), [_any(2, 3)]),
    "relu": (lambda a: act.relu(a), [_any(2, 3)]),
    "sigmoid": (lambda a: act.sigmoid(a), [_any(2, 3)]),
    "tanh": (lambda a: act.tanh(a), [_any(2, 3)]),
    "gelu": (lambda a: act.gelu(a), [_any(2, 3)]),
    "softmax": (lambda a: act.softmax(a, dim=-1), [_any(2, 4)]),
    "log_softmax": (lambda a: act.log_softmax(a, dim=0), [_any(3, 2)]),
    "cross_entropy": (lambda z: losses.cross_entropy(z, np.array([0, 2, 1])), [_any(3, 4)]),
    "bce_with_logits": (lambda z: losses.binary_cross_entropy_with_logits(z, np.array([0.0, 1.0, 1.0])), [_any(3)]),
    "binary_cross_entropy": (lambda p: losses.binary_cross_entropy(p, np.array([0.0, 1.0, 0.5])),
                             [Tensor(_rng.uniform(0.1, 0.9, 3))]),
}
for _name, (_fn, _inputs) in EXAMPLES.items():
    print(f"{_name:20s} max |backward - numeric| = {_numeric_gap(_fn, _inputs):.2e}")


# %%
def test_unit_rules_match_central_differences():
    for name, (fn, inputs) in EXAMPLES.items():
        xs = [Tensor(t.data.astype(np.float64), requires_grad=True) for t in inputs]
        try:
            gradcheck(fn, xs)
        except AssertionError as err:
            raise AssertionError(f"{name}: the rule disagrees with central differences: {err}") from None
    print(f"✓ gradcheck passes for {len(EXAMPLES)} ops")


test_unit_rules_match_central_differences()

# %% [markdown]
# ### Ties in `max`, repeated indices in `getitem`
#
# `max([1, 3, 3])` has two winners: each gets half. `x[[0, 0, 1]].sum()` reads `x[0]`
# twice, so its gradient is 2.

# %%
def test_unit_max_ties_and_repeated_indices():
    x = Tensor([1.0, 3.0, 3.0], requires_grad=True)
    backward(x.max())
    assert np.allclose(x.grad.numpy(), [0.0, 0.5, 0.5]), \
        f"max([1, 3, 3]): the two maxima share the gradient, [0, 0.5, 0.5]; got {x.grad.numpy().tolist()}"
    y = Tensor([10.0, 20.0, 30.0], requires_grad=True)
    backward(y[[0, 0, 1]].sum())
    assert np.allclose(y.grad.numpy(), [2.0, 1.0, 0.0]), \
        f"y[[0, 0, 1]].sum() reads y[0] twice: expected [2, 1, 0], got {y.grad.numpy().tolist()}: scatter-ADD"
    print("✓ max ties share the gradient; repeated indices accumulate")


test_unit_max_ties_and_repeated_indices()

# %% [markdown]
# ### `.data` changed between forward and backward
#
# `y = w * x` saves nothing, but `mul`'s rule reads `x.data` to compute `w`'s gradient.
# Change `x.data` after the forward pass and that gradient would be computed from the
# new values: wrong, silently. The version counters turn it into an error that says
# what happened; changing `.data` *after* `backward()`, as an optimizer does, is fine.

# %%
def test_unit_version_check():
    w = Tensor([1.0, 2.0], requires_grad=True)
    x = Tensor([3.0, 4.0])
    loss = (w * x).sum()
    x.data = x.data + 1  # version 0 -> 1 after the forward pass
    try:
        backward(loss)
    except RuntimeError as err:
        message = str(err)
    else:
        raise AssertionError("backward must refuse: x changed after the forward pass; call _check_versions(node, t) "
                             "before running each rule")
    assert "mul" in message and "input 1" in message, f"the error must name the op ('mul') and 'input 1', it says: {message}"
    assert w.grad is None, "a refused backward must write no .grad (the check runs before the rule)"
    loss = (w * x).sum()
    backward(loss)
    w.data = w.data - 0.1 * w.grad.data  # an optimizer step after backward: fine
    assert np.allclose(w.grad.numpy(), [4.0, 5.0]) and w._version == 1, (
        f"after backward, w.grad = x = [4, 5] and an update of w.data makes version 1; got {w.grad.numpy().tolist()}, "
        f"version {w._version}")
    print("✓ backward refuses a tensor changed since the forward pass:\n ", message)


test_unit_version_check()

# %% [markdown]
# ### Predict, then run: what does a gradient for every tensor cost?
#
# Before this module's contract, an engine could store `.grad` on every tensor it walked,
# intermediates included. `retain_grad()` does exactly that for one tensor; calling it on
# every activation of a small MLP shows what the leaves-only rule saves. We measure the
# peak memory that NumPy allocates during `backward` with `tracemalloc` (Python's
# allocation tracer, which NumPy reports to).
#
# **Predict** first: a 4-layer MLP, batch 256, width 512, float32. Its three hidden
# activations (the ReLU outputs, each `256 × 512` float32 = 0.5 MB) are the tensors that
# call `retain_grad()`. How many MB will keeping their gradients add to the peak of
# `backward`, and what fraction of the leaves-only peak is that? Write down both numbers.

# %%
import tracemalloc


def _mlp_backward_peak(retain_everything: bool) -> float:
    """Peak MB allocated during backward of a 4-layer MLP (batch 256, width 512, float32)."""
    rng = np.random.default_rng(0)
    weights = [Tensor(rng.standard_normal((512, 512)).astype(np.float32) * 0.05, requires_grad=True)
               for _ in range(3)] + [Tensor(rng.standard_normal((512, 10)).astype(np.float32) * 0.05,
                                            requires_grad=True)]
    h = Tensor(rng.standard_normal((256, 512)).astype(np.float32))
    for w in weights[:-1]:
        h = act.relu(h @ w)
        if retain_everything:
            h.retain_grad()
    loss = losses.cross_entropy(h @ weights[-1], rng.integers(0, 10, 256))
    tracemalloc.start()
    try:  # stop tracing even when backward raises: tracing left on slows every later cell
        backward(loss)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / 2**20


_leaves, _everything = _mlp_backward_peak(False), _mlp_backward_peak(True)
print(f"peak during backward: leaves only {_leaves:.1f} MB, every activation's .grad kept {_everything:.1f} MB "
      f"(+{_everything - _leaves:.1f} MB, {(_everything / _leaves - 1) * 100:.0f}% more)")

# %% [markdown]
# ## 13. Exercises and questions
#
# Each answer comes from running your own code; add cells below and try.
#
# 1. **A rule you write.** Add an op `square` (forward `record_op("square", x.data**2,
#    (x,))`) and register its rule. Check it with `gradcheck`. Then break it on purpose
#    (return `g·x` instead of `2·g·x`): what does gradcheck's message say, and which
#    number tells you that the factor is 2?
# 2. **Ones hide mistakes.** Suppose a broken softmax rule returned zeros. Compare it with
#    central differences contracted with a cotangent of ones
#    (`numeric_vjp(softmax, [x], np.ones(x.shape))` from `tinytorch.testing`): does the
#    comparison notice? And with a random cotangent? Compute `softmax(x).sum()` for a few
#    `x` and explain why gradcheck uses a random cotangent.
# 3. **Where does ε belong?** Run `central_difference` on `Σ x³` at `x = 1` in float64
#    with `eps` = 1e-2, 1e-4, 1e-6, 1e-8, 1e-10 and print the error against `3x²`. Where
#    is it smallest? Which of the two error terms (`ε²` and `δ/ε`) wins on each side?
# 4. **Broadcast, then reduce.** `w` of shape `(1, 4)` is added to `x` of shape
#    `(32, 4)`. Predict `w.grad` for `(x + w).sum()` and check. Which line of
#    `unbroadcast` produced it?
# 5. **Used twice.** For `y = x * x`, how many entries of `grads` does `x` receive in
#    your engine, and in which order? Print them by adding a temporary `print` in your
#    `mul` rule.
# 6. **Leaves only.** In the MLP of section 12, call `retain_grad()` on only the last
#    hidden layer and measure again. Does the peak grow by the size of that layer's
#    gradient (256 × 512 × 4 bytes)? Why is an intermediate gradient worth releasing
#    *during* backward, not just after it?
# 7. **Version counter.** `x.data[0] = 100.0` between forward and backward: does your
#    engine notice? Why not, and what does `x.data = x.data.copy(); x.data[0] = 100.0`
#    change?
# 8. **float16.** Make a float16 `w` and float32 data `x`; what dtype is `w * x`, and
#    what dtype is `w.grad` after backward? What would an optimizer step
#    `w.data = w.data - lr * w.grad.data` do to `w`'s dtype if the engine skipped the cast?
#
# **Questions**
#
# * Why must a rule never change `grad` in place? Find a rule of section 5 whose output
#   would then corrupt another input's gradient.
# * The engine releases a gradient as soon as its rule ran. Which gradients are alive at
#   the peak of backward through a plain chain of layers? Through a residual block
#   (`h + f(h)`)?
# * `max` splits a tie's gradient equally; what does a central difference at a tie give,
#   and why does gradcheck avoid ties (look at the inputs of `EXAMPLES`)?
# * Why does the cross-entropy forward replace ignored targets by 0 instead of leaving
#   `-100` in `targets`, and why does the rule still need `valid`?

# %% [markdown]
# ## Summary
#
# * `record_op` builds the graph; `BACKWARD_RULES` maps each op name to its local
#   derivative: `rule(grad, node)` returns one array (or `None`) per `node.inputs`, in
#   that order, in the broadcast shape if it likes.
# * `backward` walks a topological order (iteratively), pops each gradient once it is
#   complete, runs the rule, unbroadcasts and casts each input's gradient to the input's
#   dtype and **adds** it, so a tensor used twice gets both.
# * `.grad` lands only on leaves (and on tensors that asked with `retain_grad()`), as a new
#   array of its own; a missing rule, a rule returning a wrong shape, and `.data` changed
#   between forward and backward are errors that name the op.
# * Every rule runs through the given `apply_rule`, which checks it and tells the listeners
#   of `OP_LISTENERS` (module 14's profiler); each op that multiplies matrices registers its
#   FLOP formula beside its rule (`register_flops`).
# * `unbroadcast` is broadcasting's backward: sum over the leading and the stretched
#   size-1 dimensions.
# * `no_grad` stops recording and restores the previous mode on exit, always.
# * `gradcheck` compares every rule with float64 central differences (`tinytorch.testing`)
#   against a random cotangent; float32 is too coarse for `eps = 1e-6`.
# * A new op anywhere in TinyTorch = a forward through `record_op` + one
#   `@register_backward` rule, checked with `gradcheck`.
