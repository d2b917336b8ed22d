# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 05: Autograd
#
# > The chain rule, run backwards over the graph that every operation already records.
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

# %%
#| default_exp core.autograd

# %%
#| export
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from tinytorch.core.tensor import GradMode, Node, Tensor, array_module, to_array

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
# ## 2. Backward rules: one per op, registered by name
#
# A rule receives `grad` (the gradient of the op's output, a raw NumPy/CuPy array) and
# the `node` (with `node.inputs` and `node.saved`), and returns one gradient per input:
# an array, or `None` for an input that takes no gradient. Rules compute on raw arrays
# so backward itself records nothing. The registry is a plain dictionary from op name to
# rule; later modules (attention, embeddings) add their own ops with the same decorator.

# %%
#| export
BackwardRule = Callable[[Any, Node], Sequence[Any]]

BACKWARD_RULES: dict[str, BackwardRule] = {}


def register_backward(op: str) -> Callable[[BackwardRule], BackwardRule]:
    """Decorator: `@register_backward("relu")` makes the function the rule for op "relu".

    A rule is `rule(grad, node) -> tuple`, one array (or None) per `node.inputs`. It may
    return a gradient in the broadcast shape; the engine reduces it with `unbroadcast`.
    Registering a name again replaces the old rule.
    """

    def decorator(rule: BackwardRule) -> BackwardRule:
        BACKWARD_RULES[op] = rule
        return rule

    return decorator


# %% [markdown]
# ## 3. Broadcasting's backward: `unbroadcast`
#
# In the forward pass `b` of shape `(3,)` added to `a` of shape `(2, 3)` is silently
# *copied* to both rows. Each copy influences the loss, so `b`'s gradient is the **sum**
# of the gradients of its copies. In general: a gradient arriving in the broadcast shape
# is summed over
#
# * the **leading** dimensions the input did not have, and
# * every dimension where the input had size **1** (keeping it, with `keepdims`).
#
# Worked example: `a (2, 3) + b (1, 3)` with upstream gradient
# `[[1, 2, 3], [4, 5, 6]]`: `a` gets it unchanged, `b` gets the column sums
# `[[5, 7, 9]]`, shape `(1, 3)`. The engine applies `unbroadcast` to every input
# gradient, so no rule has to think about broadcasting.

# %%
#| export
def unbroadcast(grad: Any, shape: Sequence[int]) -> Any:
    """Sum `grad` (a broadcast-shaped array) down to `shape`.

    Sums away the leading dimensions `shape` lacks and, with keepdims, every dimension
    where `shape` has size 1. `unbroadcast(ones((4, 2, 3)), (2, 1))` is `full((2, 1), 12)`.
    """
    shape = tuple(shape)
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
    assert np.array_equal(unbroadcast(g, (2, 3)), g)
    assert np.array_equal(unbroadcast(g, (1, 3)), [[5.0, 7.0, 9.0]])
    assert np.array_equal(unbroadcast(g, (3,)), [5.0, 7.0, 9.0])
    assert np.array_equal(unbroadcast(g, (2, 1)), [[6.0], [15.0]])
    assert np.array_equal(unbroadcast(g, ()), 21.0)
    assert np.array_equal(unbroadcast(np.ones((4, 2, 3)), (2, 1)), np.full((2, 1), 12.0))
    print("✓ unbroadcast sums over broadcast axes")


test_unit_unbroadcast()

# %% [markdown]
# ## 4. The engine
#
# **Topological order.** We need an order in which every tensor comes *after* all the
# tensors computed from it (seen from the loss). A depth-first search that appends a
# tensor once all its inputs are done yields the reverse of that; walking the list
# backwards gives the order we want. The search uses an explicit stack instead of
# recursion: a recurrent network or a 10,000-step loop builds a chain deeper than
# Python's recursion limit (about 1,000 frames).
#
# **The walk.** Keep a dictionary `tensor -> gradient so far`, seeded with the output's
# gradient (1 for a scalar loss). In topological order, each tensor's gradient is
# complete when we reach it: store it in `.grad` (added to what is there: gradients
# accumulate across `backward` calls until `zero_grad`), call its node's rule, unbroadcast
# each input's gradient to the input's shape and *add* it to that input's entry.
#
# Every tensor with `requires_grad=True` reached by the walk gets `.grad`: the leaves
# (weights) and the intermediate results, which helps when you debug a model.

# %%
#| export
def topological_order(root: Tensor) -> list[Tensor]:
    """Tensors that `root` depends on (requiring gradients), inputs before outputs.

    Iterative depth-first search: a tensor is appended after everything it was made from.
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


def _seed_gradient(tensor: Tensor, grad: Any) -> Any:
    """The starting gradient: 1 for a one-element tensor, else the caller's `grad`."""
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


def backward(tensor: Tensor, grad: Any = None) -> None:
    """Accumulate d(tensor)/d(t), contracted with `grad`, into `t.grad` for every t it depends on.

    grad -- the gradient of some scalar with respect to `tensor` (same shape); may be
            omitted for a one-element tensor, where it is 1.
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
        g = grads.pop(id(t), None)  # complete now: every use of t has reported
        if g is None:  # every rule that reached t returned None for it (e.g. a masked-out path)
            continue
        g = g.astype(t.dtype, copy=False)
        t.grad = Tensor(g.copy()) if t.grad is None else Tensor(t.grad.data + g)
        node = t._node
        if node is None:  # a leaf: nothing further back
            continue
        rule = BACKWARD_RULES.get(node.op)
        if rule is None:
            raise RuntimeError(
                f"No backward rule for op {node.op!r}. Register one with "
                f"@register_backward({node.op!r}) (tinytorch.core.autograd)."
            )
        input_grads = rule(g, node)
        for inp, ig in zip(node.inputs, input_grads):
            if ig is None or not inp.requires_grad:
                continue
            ig = unbroadcast(ig, inp.shape)
            if ig.shape != inp.shape:
                raise RuntimeError(
                    f"backward rule for {node.op!r} returned a gradient of shape {tuple(ig.shape)} "
                    f"for an input of shape {inp.shape}."
                )
            key = id(inp)
            grads[key] = grads[key] + ig if key in grads else ig
    ### END SOLUTION


# %% [markdown]
# ## 5. Rules for the elementwise arithmetic
#
# Derivations (`g` is the output's gradient; broadcasting is the engine's business):
#
# | op | forward | rule |
# |---|---|---|
# | `add` | `a + b` | `g`, `g` |
# | `sub` | `a - b` | `g`, `-g` |
# | `mul` | `a * b` | `g·b`, `g·a` |
# | `div` | `a / b` | `g / b`, `-g·a / b²` |
# | `pow` | `a ** b` | `g·b·a^(b-1)`, `g·a^b·ln a` |
# | `neg` | `-a` | `-g` |
#
# `pow` has two honest corner cases: `ln a` only exists for `a > 0` (we use 0 elsewhere,
# as PyTorch does), and `b·a^(b-1)` at `a = 0, b = 0` is `0·∞`: the true slope of
# `a⁰ = 1` is 0, so we return 0 where `b == 0`.

# %%
#| export
@register_backward("add")
def add_backward(grad, node: Node) -> tuple:
    """d(a + b) = da + db: the gradient flows to both inputs unchanged."""
    ### BEGIN SOLUTION
    return grad, grad
    ### END SOLUTION


@register_backward("sub")
def sub_backward(grad, node: Node) -> tuple:
    """d(a - b) = da - db."""
    ### BEGIN SOLUTION
    return grad, -grad
    ### END SOLUTION


@register_backward("mul")
def mul_backward(grad, node: Node) -> tuple:
    """d(a·b) = b·da + a·db."""
    ### BEGIN SOLUTION
    a, b = node.inputs
    return grad * b.data, grad * a.data
    ### END SOLUTION


@register_backward("div")
def div_backward(grad, node: Node) -> tuple:
    """d(a / b) = da / b - a·db / b²."""
    ### BEGIN SOLUTION
    a, b = node.inputs
    return grad / b.data, -grad * a.data / (b.data * b.data)
    ### END SOLUTION


@register_backward("pow")
def pow_backward(grad, node: Node) -> tuple:
    """d(a^b) = b·a^(b-1)·da + a^b·ln(a)·db (ln only where a > 0, else 0)."""
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
    """d(-a) = -da."""
    ### BEGIN SOLUTION
    return (-grad,)
    ### END SOLUTION


# %% [markdown]
# ### Derive, then check: `div` by hand
#
# For `q = a / b` at `a = 3`, `b = 2`: `∂q/∂a = 1/b = 0.5` and `∂q/∂b = -a/b² = -0.75`.
# The rule must return exactly that for an upstream gradient of 1, and nudging `b` by
# ±ε must change `q` at that rate.

# %%
_a, _b = Tensor(np.array([3.0]), requires_grad=True), Tensor(np.array([2.0]), requires_grad=True)
_q = _a / _b
_ga, _gb = div_backward(np.ones(1), _q._node)
_eps = 1e-6
_numeric_b = ((3.0 / (2.0 + _eps)) - (3.0 / (2.0 - _eps))) / (2 * _eps)
print(f"div rule: dq/da = {_ga[0]:.6f} (1/b = 0.5), dq/db = {_gb[0]:.6f} (-a/b² = -0.75), "
      f"central difference dq/db = {_numeric_b:.6f}")


# %%
def test_unit_arithmetic_rules():
    a, b = Tensor(np.array([3.0]), requires_grad=True), Tensor(np.array([2.0]), requires_grad=True)
    g = np.ones(1)
    assert [float(v[0]) for v in add_backward(g, (a + b)._node)] == [1.0, 1.0]
    assert [float(v[0]) for v in sub_backward(g, (a - b)._node)] == [1.0, -1.0]
    assert [float(v[0]) for v in mul_backward(g, (a * b)._node)] == [2.0, 3.0]
    assert np.allclose([v[0] for v in div_backward(g, (a / b)._node)], [0.5, -0.75])
    ga, gb = pow_backward(g, (a**b)._node)
    assert np.allclose([ga[0], gb[0]], [2 * 3.0, 9.0 * np.log(3.0)])
    assert float(neg_backward(g, (-a)._node)[0][0]) == -1.0
    print("✓ arithmetic rules match their derivatives")


test_unit_arithmetic_rules()

# %% [markdown]
# ## 6. Matrix multiplication
#
# For `C = A @ B` with `A (m, k)` and `B (k, n)`: `C[i, j] = Σ_p A[i, p]·B[p, j]`, so
# `∂L/∂A[i, p] = Σ_j G[i, j]·B[p, j]`, i.e. **`dA = G @ Bᵀ`**, and likewise
# **`dB = Aᵀ @ G`**. Check the shapes: `(m, n) @ (n, k) = (m, k)` ✓.
#
# Batches need nothing new: the same formulas apply to every matrix of the batch
# (transpose the last two dims), and when the batch dimensions were broadcast
# (`(B, m, k) @ (k, n)`: one weight for every item) `dB` comes out as `(B, k, n)` and
# `unbroadcast` sums it over the batch. A 1-D operand is a vector: treat `(k,)` on the
# left as `(1, k)` and on the right as `(k, 1)`, then drop that dimension again.

# %%
#| export
@register_backward("matmul")
def matmul_backward(grad, node: Node) -> tuple:
    """dA = G @ Bᵀ, dB = Aᵀ @ G over the last two dims (batch dims via unbroadcast)."""
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
        grad_a = xp.matmul(grad, xp.swapaxes(B, -1, -2))
        if a.ndim == 1:
            grad_a = grad_a[..., 0, :]
    if b.requires_grad:
        if B.ndim == 2 and A.ndim > 2:  # one weight shared by a batch: fold the batch into one product
            grad_b = xp.matmul(A.reshape(-1, A.shape[-1]).T, grad.reshape(-1, grad.shape[-1]))
        else:  # batched: one product per batch item, summed by unbroadcast if B was broadcast
            grad_b = xp.matmul(xp.swapaxes(A, -1, -2), grad)
        if b.ndim == 1:
            grad_b = grad_b[..., 0]
    return grad_a, grad_b
    ### END SOLUTION


# %% [markdown]
# ## 7. Reductions
#
# * `sum`: each input element is counted once, so its gradient is the output gradient
#   of the slot it was summed into, *copied back* over the reduced axes.
# * `mean`: the same, divided by the number of elements averaged.
# * `max`: only the maximal element(s) moved the output. When several tie, PyTorch and
#   TinyTorch split the gradient equally among them (the average of the one-sided slopes).
#
# Without `keepdims` the reduced axes are gone from `grad`; `_expand_reduced` puts them
# back as size-1 axes so the gradient broadcasts against the input.

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
    """Each input element gets the gradient of the sum it went into."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    xp = array_module(grad)
    grad = _expand_reduced(grad, node.saved["axis"], node.saved["keepdims"], x.ndim)
    return (xp.broadcast_to(grad, x.shape),)
    ### END SOLUTION


@register_backward("mean")
def mean_backward(grad, node: Node) -> tuple:
    """Like sum, divided by the number of elements in each average."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    xp = array_module(grad)
    count = x.size // max(grad.size, 1)
    grad = _expand_reduced(grad, node.saved["axis"], node.saved["keepdims"], x.ndim)
    return (xp.broadcast_to(grad / count, x.shape),)
    ### END SOLUTION


@register_backward("max")
def max_backward(grad, node: Node) -> tuple:
    """Gradient to the maximal elements only, shared equally among ties."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    axis, keepdims = node.saved["axis"], node.saved["keepdims"]
    out = _expand_reduced(node.saved["out"], axis, keepdims, x.ndim)
    grad = _expand_reduced(grad, axis, keepdims, x.ndim)
    winners = (x.data == out).astype(grad.dtype)
    share = winners / winners.sum(axis=axis, keepdims=True)
    return (grad * share,)
    ### END SOLUTION


# %% [markdown]
# ## 8. Elementwise functions, shapes, indexing, devices
#
# | op | rule | why |
# |---|---|---|
# | `exp` | `g·out` | `(eˣ)' = eˣ`, already computed in the forward (saved `out`) |
# | `log` | `g / x` | `(ln x)' = 1/x` |
# | `sqrt` | `g / (2·out)` | `(√x)' = 1/(2√x)` |
# | `reshape` | `g` reshaped back | the same numbers, in a different arrangement |
# | `permute` | `g` permuted by the inverse order | moving dims back where they came from |
# | `getitem` | zeros with `g` **added** at the indexed places | `x[[0, 0]]` reads row 0 twice, so row 0 gets both gradients: a *scatter-add* (`np.add.at`), not an assignment |
# | `masked_fill` | `g` with zeros where the mask is True | filled positions are constants |
# | `to` | `g` moved back to the input's device | gradients live where their tensor lives |

# %%
#| export
@register_backward("exp")
def exp_backward(grad, node: Node) -> tuple:
    """(e^x)' = e^x, the saved output."""
    ### BEGIN SOLUTION
    return (grad * node.saved["out"],)
    ### END SOLUTION


@register_backward("log")
def log_backward(grad, node: Node) -> tuple:
    """(ln x)' = 1/x."""
    ### BEGIN SOLUTION
    return (grad / node.inputs[0].data,)
    ### END SOLUTION


@register_backward("sqrt")
def sqrt_backward(grad, node: Node) -> tuple:
    """(√x)' = 1/(2√x), with √x the saved output."""
    ### BEGIN SOLUTION
    return (grad / (2 * node.saved["out"]),)
    ### END SOLUTION


@register_backward("reshape")
def reshape_backward(grad, node: Node) -> tuple:
    """The same elements in the input's shape."""
    ### BEGIN SOLUTION
    return (grad.reshape(node.inputs[0].shape),)
    ### END SOLUTION


@register_backward("permute")
def permute_backward(grad, node: Node) -> tuple:
    """Apply the inverse permutation: output dim i came from input dim dims[i]."""
    ### BEGIN SOLUTION
    inverse = tuple(int(i) for i in np.argsort(node.saved["dims"]))
    return (array_module(grad).transpose(grad, inverse),)
    ### END SOLUTION


def _scatter_add(target: Any, index: Any, values: Any) -> None:
    """target[index] += values, where repeated indices add up (NumPy or CuPy)."""
    xp = array_module(target)
    if xp is np:
        np.add.at(target, index, values)
    else:
        import cupyx  # CuPy's home for scatter operations

        cupyx.scatter_add(target, index, values)


@register_backward("getitem")
def getitem_backward(grad, node: Node) -> tuple:
    """Scatter-add the gradient into zeros shaped like the input (repeats accumulate)."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    full = array_module(grad).zeros(x.shape, dtype=grad.dtype)
    _scatter_add(full, node.saved["index"], grad)
    return (full,)
    ### END SOLUTION


@register_backward("masked_fill")
def masked_fill_backward(grad, node: Node) -> tuple:
    """Filled positions were replaced by a constant: no gradient there."""
    ### BEGIN SOLUTION
    return (array_module(grad).where(node.saved["mask"], 0, grad),)
    ### END SOLUTION


@register_backward("to")
def to_backward(grad, node: Node) -> tuple:
    """The gradient goes back to the device the input lives on."""
    ### BEGIN SOLUTION
    return (to_array(grad, device=node.saved["device"]),)
    ### END SOLUTION


# %% [markdown]
# ## 9. Activations and losses (modules 02 and 04)
#
# These forwards live in `tinytorch.core.activations` and `tinytorch.core.losses`; they
# save exactly what these rules read (CONTRIBUTING.md's table).
#
# * `relu`: slope 1 where `x > 0`, else 0.
# * `sigmoid`: `σ' = σ(1 - σ)`; `tanh`: `tanh' = 1 - tanh²` (both from the saved output).
# * `gelu` (tanh approximation) `0.5·x·(1 + tanh u)`, `u = c·(x + 0.044715x³)`,
#   `c = √(2/π)`: product rule gives `0.5(1 + tanh u) + 0.5x(1 - tanh² u)·c·(1 + 3·0.044715x²)`.
# * `softmax` `s = softmax(x)`: the Jacobian is `diag(s) - s sᵀ`, so
#   `dx = s ⊙ (g - Σ g⊙s)` (sum along `dim`), no matrix needed.
# * `log_softmax` `ℓ = x - logsumexp(x)`: `dx = g - softmax(x)·Σ g`, with `softmax = e^ℓ`.
# * `cross_entropy` (fused): the mean over valid positions of `-log softmax(z)[target]`
#   has gradient `(probs - onehot(target)) · valid / count`: the cleanest formula in deep
#   learning, and the reason the loss takes logits.
# * `bce_with_logits`: `mean(softplus(z) - t·z)` has gradient `(σ(z) - t) / N`.
# * `binary_cross_entropy` on probabilities clipped to `[eps, 1-eps]`:
#   `(p - t) / (p(1 - p)) / N` inside the clip range, 0 where the clip is active.

# %%
#| export
@register_backward("relu")
def relu_backward(grad, node: Node) -> tuple:
    """Slope 1 where x > 0, else 0."""
    ### BEGIN SOLUTION
    (x,) = node.inputs
    return (grad * (x.data > 0),)
    ### END SOLUTION


@register_backward("sigmoid")
def sigmoid_backward(grad, node: Node) -> tuple:
    """σ'(x) = σ(1 - σ), from the saved output."""
    ### BEGIN SOLUTION
    s = node.saved["out"]
    return (grad * s * (1 - s),)
    ### END SOLUTION


@register_backward("tanh")
def tanh_backward(grad, node: Node) -> tuple:
    """tanh'(x) = 1 - tanh², from the saved output."""
    ### BEGIN SOLUTION
    t = node.saved["out"]
    return (grad * (1 - t * t),)
    ### END SOLUTION


_GELU_C = float(np.sqrt(2.0 / np.pi))


@register_backward("gelu")
def gelu_backward(grad, node: Node) -> tuple:
    """Derivative of 0.5·x·(1 + tanh(c·(x + 0.044715·x³)))."""
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
    """dx = s ⊙ (g - Σ_dim g⊙s): the Jacobian diag(s) - s sᵀ applied without building it."""
    ### BEGIN SOLUTION
    s, dim = node.saved["out"], node.saved["dim"]
    return (s * (grad - (grad * s).sum(axis=dim, keepdims=True)),)
    ### END SOLUTION


@register_backward("log_softmax")
def log_softmax_backward(grad, node: Node) -> tuple:
    """dx = g - softmax(x)·Σ_dim g, with softmax = exp(saved output)."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    out, dim = node.saved["out"], node.saved["dim"]
    return (grad - xp.exp(out) * grad.sum(axis=dim, keepdims=True),)
    ### END SOLUTION


@register_backward("cross_entropy")
def cross_entropy_backward(grad, node: Node) -> tuple:
    """(probs - onehot(targets)) · valid / count, times the upstream (scalar) gradient."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    probs, targets = node.saved["probs"], node.saved["targets"]
    valid, count = node.saved["valid"], node.saved["count"]
    # onehot without indexing: ignored targets (e.g. -100) simply match no class
    onehot = xp.arange(probs.shape[-1]) == targets[..., None]
    return (grad * (probs - onehot) * valid[..., None] / count,)
    ### END SOLUTION


@register_backward("bce_with_logits")
def bce_with_logits_backward(grad, node: Node) -> tuple:
    """(σ(z) - t) / N for the mean loss."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    z = node.inputs[0].data
    sigma = 0.5 * (1 + xp.tanh(0.5 * z))  # σ(z) without overflow in exp
    return (grad * (sigma - node.saved["targets"]) / z.size,)
    ### END SOLUTION


@register_backward("binary_cross_entropy")
def binary_cross_entropy_backward(grad, node: Node) -> tuple:
    """(p - t) / (p(1 - p)) / N on the clipped p; 0 where the clip is active."""
    ### BEGIN SOLUTION
    xp = array_module(grad)
    p, t, eps = node.inputs[0].data, node.saved["targets"], node.saved["eps"]
    p = p.astype(xp.promote_types(p.dtype, np.float32))  # in float16, 1 - 1e-7 rounds to 1
    clipped = xp.clip(p, eps, 1 - eps)
    inside = (p >= eps) & (p <= 1 - eps)
    return (grad * inside * (clipped - t) / (clipped * (1 - clipped)) / p.size,)
    ### END SOLUTION


# %% [markdown]
# ## 10. Switching recording off: `no_grad`
#
# Evaluation, optimizer updates and weight initialisation must not grow the graph: it
# costs memory (every node keeps its inputs alive) and an optimizer step recorded into the
# graph would be differentiated next time. `no_grad()` turns `GradMode.enabled` off and
# restores the *previous* value on the way out, even when the block raises, so blocks nest.

# %%
#| export
def is_grad_enabled() -> bool:
    """Whether operations currently record the graph."""
    return GradMode.enabled


class no_grad:
    """`with no_grad(): ...` (or `@no_grad()` on a function): build no graph inside."""

    def __init__(self) -> None:
        self._previous: list[bool] = []

    def __enter__(self) -> "no_grad":
        ### BEGIN SOLUTION
        self._previous.append(GradMode.enabled)
        GradMode.enabled = False
        return self
        ### END SOLUTION

    def __exit__(self, *exc_info: Any) -> bool:
        ### BEGIN SOLUTION
        GradMode.enabled = self._previous.pop()
        return False  # never swallow the exception
        ### END SOLUTION

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper


# %% [markdown]
# ## 11. Checking rules: `gradcheck`
#
# A wrong rule does not crash; it trains badly. The defence is to compare every rule
# with **central differences**: `∂f/∂x_i ≈ (f(x + ε e_i) - f(x - ε e_i)) / 2ε`, whose
# error is `O(ε²)` (truncation) plus `O(δ/ε)` where `δ` is the rounding error of `f`.
#
# For a non-scalar output we contract it with a **random** cotangent `v`
# (`f = Σ v ⊙ out`): a cotangent of ones would hide errors that cancel in a plain sum
# (a softmax's gradient with respect to an all-ones cotangent is zero whatever the rule).
#
# Precision matters: float32 has `δ ≈ 6e-8` relative, so with `ε = 1e-6` the rounding
# term is about `6e-8 / 1e-6 ≈ 0.06`, far above any sensible tolerance; float64
# (`δ ≈ 1e-16`) leaves `1e-10`. So `gradcheck` always computes in float64.

# %% [markdown]
# The numerical side lives in one small, given helper module, `tinytorch.testing`
# (this cell exports there): the notebooks, the test suite and the benchmarks all
# compute central differences with these two functions, so there is one copy to trust.

# %%
#| export testing
# Central differences: the numerical gradients every backward rule is checked against.
# Given code, not a student exercise; the notebooks, the tests and the benchmarks all
# import these, so there is one copy to trust.
from typing import Any, Callable, Sequence

import numpy as np


def central_difference(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """df/dx at `x`: `(f(x + eps·e_i) - f(x - eps·e_i)) / (2·eps)` for every element i.

    f   -- a function of one array shaped like x, returning a number
    x   -- the point (left unchanged); the arithmetic happens in x's dtype, so a
           float32 x shows how coarse single precision is: check in float64
    Returns an array of x's shape and dtype.
    """
    grad = np.zeros_like(x)
    flat = grad.reshape(-1)
    two_eps = x.dtype.type(2 * eps)
    for j in range(x.size):  # one element at a time: a test, not a kernel
        step = np.zeros_like(x)
        step.reshape(-1)[j] = eps
        flat[j] = (f(x + step) - f(x - step)) / two_eps
    return grad


def numeric_vjp(fn: Callable[..., Any], arrays: Sequence[np.ndarray], cotangent: np.ndarray,
                eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of `Σ cotangent ⊙ fn(*tensors)`, one gradient per input array.

    fn        -- takes one Tensor per array and returns a Tensor (only its forward runs,
                 so this needs no autograd at all)
    arrays    -- the inputs, as arrays; computed in float64
    cotangent -- an array of fn's output shape (a random one hides nothing that cancels)
    Returns [d/d arrays[0], d/d arrays[1], ...], each of its array's shape, float64.
    """
    from tinytorch.core.tensor import Tensor

    points = [np.asarray(a, dtype=np.float64) for a in arrays]
    weights = np.asarray(cotangent, dtype=np.float64)

    def total(values: list[np.ndarray]) -> float:
        return float((np.asarray(fn(*[Tensor(v) for v in values]).numpy(), dtype=np.float64) * weights).sum())

    grads = []
    for i, point in enumerate(points):
        def f(x: np.ndarray, i: int = i) -> float:
            return total([x if j == i else p for j, p in enumerate(points)])

        grads.append(central_difference(f, point, eps))
    return grads


# %%
#| export
def gradcheck(fn: Callable[..., Tensor], inputs: Sequence[Tensor], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0) -> bool:
    """Compare backward's gradients of `fn(*inputs)` with float64 central differences.

    Every input with requires_grad is checked element by element against
    `(f(x + eps) - f(x - eps)) / (2 eps)`, where f = Σ v ⊙ fn(*inputs) for a random
    (seeded) cotangent v. Returns True, or raises AssertionError naming the input, the
    element index and both values where |analytic - numeric| > atol + rtol·|numeric|.
    Works on float64 copies: the caller's tensors (and their .grad) are left untouched.
    """
    ### BEGIN SOLUTION
    xs = [Tensor(t.data.astype(np.float64), requires_grad=t.requires_grad) if isinstance(t, Tensor)
          else t for t in inputs]
    out = fn(*xs)
    xp = array_module(out.data)
    v = xp.asarray(np.random.default_rng(seed).standard_normal(out.shape))
    backward(out, v)

    def f() -> float:
        with no_grad():
            return float((fn(*xs).data * v).sum())

    for i, x in enumerate(xs):
        if not isinstance(x, Tensor) or not x.requires_grad:
            continue
        analytic = x.grad.data if x.grad is not None else xp.zeros(x.shape)
        for index in np.ndindex(*x.shape):  # one element at a time: a test, not a kernel
            original = float(x.data[index])  # index the array itself: works for any memory layout
            x.data[index] = original + eps
            plus = f()
            x.data[index] = original - eps
            minus = f()
            x.data[index] = original
            numeric = (plus - minus) / (2 * eps)
            got = float(analytic[index])
            if not abs(got - numeric) <= atol + rtol * abs(numeric):
                raise AssertionError(
                    f"gradcheck: input {i}, index {index}: backward gives {got:.8g}, "
                    f"central differences give {numeric:.8g} (atol={atol}, rtol={rtol})."
                )
    return True
    ### END SOLUTION


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
    assert np.allclose(a.grad.numpy(), [5.0, 6.0]) and np.allclose(b.grad.numpy(), [2.0, 3.0])
    x = Tensor([1.0, -2.0, 0.5], requires_grad=True)
    y = x * x + x
    backward(y.sum())
    assert np.allclose(x.grad.numpy(), [3.0, -3.0, 2.0])
    assert np.allclose(y.grad.numpy(), [1.0, 1.0, 1.0])  # intermediates get .grad too
    backward((x * 3).sum())  # a second backward adds to .grad
    assert np.allclose(x.grad.numpy(), [6.0, 0.0, 5.0])
    x.zero_grad()
    assert x.grad is None
    print("✓ chain rule, a tensor used twice, accumulation across backward calls")


test_unit_chain_rule_and_accumulation()


# %%
def test_unit_broadcast_backward():
    a = Tensor(np.zeros((2, 3)), requires_grad=True)
    b = Tensor(np.zeros((1, 3)), requires_grad=True)
    c = Tensor(np.zeros(3), requires_grad=True)
    upstream = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    backward(a + b + c, upstream)
    assert a.grad.shape == (2, 3) and np.array_equal(a.grad.numpy(), upstream)
    assert b.grad.shape == (1, 3) and np.array_equal(b.grad.numpy(), [[5.0, 7.0, 9.0]])
    assert c.grad.shape == (3,) and np.array_equal(c.grad.numpy(), [5.0, 7.0, 9.0])
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
    backward(y.sum())
    assert x.grad.numpy().tolist() == [1.0]
    print("✓ 10,000-op chain, no recursion")


test_unit_deep_chain()

# %% [markdown]
# ### Every rule, checked numerically
#
# One line per op: the largest gap between `backward` and float64 central differences.
# `gradcheck` must pass for each; the printed numbers show how close they are.

# %%
def _numeric_gap(fn, inputs) -> float:
    """max |backward - central difference| over all inputs (float64, random cotangent)."""
    xs = [Tensor(t.data.astype(np.float64), requires_grad=True) for t in inputs]
    out = fn(*xs)
    v = np.random.default_rng(1).standard_normal(out.shape)
    backward(out, v)
    worst, eps = 0.0, 1e-6
    for x in xs:
        for index in np.ndindex(*x.shape):
            keep = float(x.data[index])
            x.data[index] = keep + eps
            with no_grad():
                plus = float((fn(*xs).data * v).sum())
            x.data[index] = keep - eps
            with no_grad():
                minus = float((fn(*xs).data * v).sum())
            x.data[index] = keep
            worst = max(worst, abs((plus - minus) / (2 * eps) - x.grad.data[index]))
    return worst


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
        assert gradcheck(fn, xs), name
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
    assert np.allclose(x.grad.numpy(), [0.0, 0.5, 0.5])
    y = Tensor([10.0, 20.0, 30.0], requires_grad=True)
    backward(y[[0, 0, 1]].sum())
    assert np.allclose(y.grad.numpy(), [2.0, 1.0, 0.0])
    print("✓ max ties share the gradient; repeated indices accumulate")


test_unit_max_ties_and_repeated_indices()

# %% [markdown]
# ### `no_grad` and `detach`

# %%
def test_unit_no_grad():
    w = Tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        y = w * 2
        with no_grad():
            pass
        assert not is_grad_enabled()  # the inner block restored "off", not "on"
    assert y._node is None and not y.requires_grad and is_grad_enabled()
    try:
        with no_grad():
            raise KeyError("boom")
    except KeyError:
        pass
    assert is_grad_enabled()  # restored after the exception
    assert (w * 2).requires_grad and w.detach()._node is None and not w.detach().requires_grad

    @no_grad()
    def evaluate(t):
        return t * 3

    assert evaluate(w)._node is None and is_grad_enabled()
    print("✓ no_grad records nothing, nests, and restores the mode even after an exception")


test_unit_no_grad()

# %% [markdown]
# ### gradcheck catches a wrong rule
#
# Register a deliberately wrong rule (`d(x³) = 2x²`, a classic slip) for a made-up op
# and watch gradcheck name the culprit; then remove it again.

# %%
from tinytorch.core.tensor import record_op


def test_unit_gradcheck_catches_wrong_rule():
    def cube(x: Tensor) -> Tensor:
        return record_op("cube_demo", x.data**3, (x,))

    register_backward("cube_demo")(lambda grad, node: (grad * 2 * node.inputs[0].data ** 2,))
    try:
        gradcheck(cube, [Tensor(np.array([0.5, 1.0, 2.0]), requires_grad=True)])
    except AssertionError as err:
        message = str(err)
    else:
        raise AssertionError("gradcheck accepted a wrong rule")
    finally:
        del BACKWARD_RULES["cube_demo"]
    assert "input 0" in message and "(0,)" in message
    print("✓ gradcheck reports:", message)


test_unit_gradcheck_catches_wrong_rule()

# %% [markdown]
# ### float32 versus float64 central differences
#
# The same rule (`d/dx Σ x² = 2x`) checked with central differences computed in float32
# and in float64, `eps = 1e-6`. In float32, `x + 1e-6` is barely distinguishable from `x`
# (float32 resolves about 1 part in 10⁷), so the difference quotient is mostly rounding
# noise. In float64 it agrees to about 1e-9.

# %%
def central_difference(f, x: np.ndarray, eps: float) -> np.ndarray:
    """Numerical gradient of the scalar f at x, computed in x's own dtype."""
    grad = np.zeros_like(x)
    for j in range(x.size):
        step = np.zeros_like(x)
        step.reshape(-1)[j] = eps
        grad.reshape(-1)[j] = (f(x + step) - f(x - step)) / x.dtype.type(2 * eps)
    return grad


_x = np.random.default_rng(3).uniform(0.5, 2.0, 5)
for _dtype in (np.float32, np.float64):
    _xd = _x.astype(_dtype)
    _numeric = central_difference(lambda v: (v * v).sum(), _xd, 1e-6)
    _err = np.abs(_numeric - 2 * _xd).max()
    _ok = np.allclose(_numeric, 2 * _xd, atol=1e-5, rtol=1e-3)
    print(f"{np.dtype(_dtype).name}: max error {_err:.2e} -> {'passes' if _ok else 'FAILS'} atol=1e-5, rtol=1e-3")


# %%
def test_unit_float32_vs_float64():
    x = np.random.default_rng(3).uniform(0.5, 2.0, 5)
    f = lambda v: (v * v).sum()  # noqa: E731
    x32 = x.astype(np.float32)
    assert not np.allclose(central_difference(f, x32, 1e-6), 2 * x32, atol=1e-5, rtol=1e-3)
    assert np.allclose(central_difference(f, x, 1e-6), 2 * x, atol=1e-5, rtol=1e-3)
    # gradcheck itself promotes float32 inputs to float64, so it passes on them
    assert gradcheck(lambda t: t * t, [Tensor(x32, requires_grad=True)])
    print("✓ float32 central differences fail at eps=1e-6, float64 passes; gradcheck uses float64")


test_unit_float32_vs_float64()

# %% [markdown]
# ## Summary
#
# * `record_op` builds the graph; `BACKWARD_RULES` maps each op name to its local
#   derivative; `backward` walks a topological order (iteratively) and **adds**
#   contributions, so a tensor used twice gets both.
# * `unbroadcast` is broadcasting's backward: sum over the leading and the stretched
#   size-1 dimensions.
# * `no_grad` stops recording and restores the previous mode on exit, always.
# * `gradcheck` compares every rule with float64 central differences against a random
#   cotangent; float32 is too coarse for `eps = 1e-6`.
# * A new op anywhere in TinyTorch = a forward through `record_op` + one
#   `@register_backward` rule, checked with `gradcheck`.
