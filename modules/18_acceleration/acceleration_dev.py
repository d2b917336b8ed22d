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
# # Module 18: Acceleration — make the GPT faster where the time really goes
#
# > Speed is found by measuring, not by guessing. The profiler of module 14 names the
# > operations that take the time; each fix here is one of them, checked to compute exactly
# > what it replaces, and timed before and after on your own machine.
#
# Module 13's GPT trains on Shakespeare. Module 14's profiler showed where its training step
# spends its time: the matrix products (the same BLAS kernels PyTorch calls), then GELU,
# LayerNorm and attention, then a long tail of small operations and the optimizer. This module
# makes the step faster with the three tools that every fast framework uses:
#
# * **fusion** — several elementwise steps as one recorded op that keeps exactly what its
#   backward needs (GELU's backward recomputes a `tanh` its forward already had);
# * **multi-tensor updates** — AdamW over one flat buffer in which every parameter is a view,
#   so a step is a handful of array calls instead of a dozen per parameter;
# * **vectorisation** — the same arithmetic, fewer Python-level steps: a loop convolution
#   against im2col, and a blocked matrix product against BLAS, explained with the roofline;
# * **data parallelism** — on two cores, half of the batch each: two forward and backward
#   passes at once, their gradients added.
#
# **What you will be able to do when you finish:**
#
# * read a profile and say which operation to fuse and why;
# * write a fused op (`bias_gelu`) with its backward rule, check it against central
#   differences and against the composed version, and measure what it saves;
# * write `fuse(model)`: a new GPT with the fused ops in place and the same weight tensors,
#   without touching module 13's classes;
# * write the flat-buffer update of `FusedAdamW` and show it is bit-for-bit `AdamW`;
# * predict from arithmetic intensity when a blocked product or a loop is slow, and check
#   it on your machine;
# * say why a batch's gradient can be computed in parts on several threads, and measure what
#   the second core buys.
#
# **Time:** about three hours — sections 1–5 (profile, fused GELU, `fuse`, LayerNorm) in a first sitting,
# 6–10 (the flat optimizer, vectorisation, the whole step, the allocator, two cores) in a second.
#
# | section | you write | what it does |
# |---|---|---|
# | 2 | `bias_gelu`, `bias_gelu_backward` | bias + GELU as one op that saves its `tanh` |
# | 3 | `FusedMLP.forward`, `fuse` | the GPT with fused MLPs, same weight tensors |
# | 6 | `FusedAdamW._group_update` | one group's AdamW update on flat arrays |
# | 7 | `blocked_matmul` | a matrix product tile by tile, honouring the tile size |
#
# **On a GPU.** The same ideas go further there (one CuPy `ElementwiseKernel` per fused op,
# the whole step captured in a CUDA graph, because small GPU steps are bound by kernel
# launches). This edition of the lesson was written and tested without a GPU: those parts
# are not in it, and no GPU number appears here.

# %% [markdown]
# This lesson times your code. NumPy's matrix products may split over several threads, and on a
# busy machine the same product can take ten times longer from one run to the next, so the
# lesson asks for one BLAS thread before NumPy starts (in Jupyter: restart the kernel before
# running the notebook from the top).

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| default_exp perf.acceleration

# %%
#| export
import copy
import math
from typing import Any, Iterable

import numpy as np

from tinytorch.core.activations import GELU_COEFF, SQRT_2_OVER_PI
from tinytorch.core.autograd import register_backward
from tinytorch.core.layers import Module
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor, array_module, as_tensor, record_op
from tinytorch.models.transformer import MLP, check_floating_input

# %% [markdown]
# ## 1. Where the time goes
#
# Before changing anything, measure. Module 14's `Profiler` listens to every recorded op and
# to every backward rule. Here it watches one forward and backward pass of a small GPT (the
# milestone's shape with 2 layers and a shorter context, so the lesson runs in seconds; the
# benchmark `tito bench acceleration` profiles the milestone's own model).

# %%
from tinytorch.core.optimizers import weight_decay_groups
from tinytorch.models.transformer import GPT
from tinytorch.perf.profiling import Profiler, measure_latency

small = GPT(65, 128, 2, 4, 32, bias=False, seed=0)
ids, targets = np.random.default_rng(0).integers(0, 65, (2, 8, 32))
with Profiler() as prof:
    _, loss = small(ids, targets=targets)
    loss.backward()
print(prof.table(top=8))

# %% [markdown]
# Read the table from the top. The matrix products are BLAS: NumPy and PyTorch call the same
# kind of kernel, and there is little to win there. Below them, `gelu` has a backward much
# slower than its forward: module 05's rule recomputes `tanh(c·(x + 0.044715·x³))`, the most
# expensive step of the forward, because the forward saved nothing. `layer_norm` and `sdpa`
# are already one op each (modules 12 and 13 fused them), and so is `cross_entropy`
# (module 04 computes softmax and the loss from the logits in one op and saves the
# probabilities). The optimizer is not in the table at all: it records no op, so it is
# timed separately in section 6.
#
# Profiling costs time itself (the profiler runs Python for every op), so compare rows of one
# table with each other, and time the step without the profiler.

# %% [markdown]
# ## 2. Fusion: bias + GELU as one op
#
# GELU (tanh form) is `0.5·u·(1 + t)` with `t = tanh(c·(u + 0.044715·u³))`, `c = √(2/π)`, and in
# an MLP `u = x + b` is the output of a Linear layer with a bias. Composed, that is two ops
# (`add`, then `gelu`), and the backward of `gelu` computes `t` again. The derivative is
#
# `dGELU/du = 0.5·(1 + t) + 0.5·u·(1 − t²)·c·(1 + 3·0.044715·u²)`
#
# so with `t` saved, the backward is a few multiplications and additions: no `tanh`. The
# fused op takes `x` and the bias, computes `u` once, and saves `u` and `t`. Its gradient for
# `x` and for the bias is the same array `grad·slope` (the engine sums it over the rows for the
# bias, with `unbroadcast`).
#
# ### Your turn: `bias_gelu` and its backward rule
#
# Write both. The docstrings are the whole contract. Work in place where you can (`xp.tanh(…,
# out=…)`, `*=`): each temporary array of an elementwise op costs a pass over memory, which is
# what an elementwise op's time is.

# %%
#| export
GELU_C = SQRT_2_OVER_PI  # c in tanh(c·(u + GELU_COEFF·u³)): √(2/π), module 02's constant; GELU_COEFF = 0.044715


def bias_gelu(x: Any, bias: Any = None) -> Tensor:
    """GELU (tanh form) of x + bias, as ONE recorded op that saves what its backward needs.

    x    -- a floating Tensor (..., N) (or array/list); bias -- a Tensor of shape (N,) or None.
    Returns 0.5·u·(1 + t), u = x + bias (u = x without a bias), t = tanh(c·(u + 0.044715·u³)),
    c = GELU_C = √(2/π): equal to gelu(x + bias) of modules 02/05, in x's dtype and shape.
    Records op "bias_gelu" with inputs (x, bias), or (x,) when bias is None, and saves:
        u    -- the pre-activation x + bias (x's array itself when there is no bias)
        tanh -- the array t, the same shape and dtype as x
    ValueError (given) when the bias is not of shape (x.shape[-1],); TypeError (given) for an integer x.
    """
    x = as_tensor(x)
    bias = None if bias is None else as_tensor(bias)
    check_floating_input("bias_gelu", x)  # given: t is saved in x's dtype, which must hold fractions
    if bias is not None and bias.shape != (x.shape[-1],):  # given
        raise ValueError(f"bias_gelu: the bias must have shape ({x.shape[-1]},) for x of shape {x.shape}, "
                         f"got {bias.shape}.")
    xp = array_module(x.data)
    ### BEGIN SOLUTION
    u = x.data if bias is None else x.data + bias.data
    with np.errstate(over="ignore"):  # float16 u³ may overflow; tanh(±inf) = ±1 is right
        t = u * u
        t *= GELU_COEFF
        t += 1
        t *= u
        t *= GELU_C
        xp.tanh(t, out=t)
    out = t + 1
    out *= u
    out *= 0.5
    inputs = (x,) if bias is None else (x, bias)
    return record_op("bias_gelu", out, inputs, u=u, tanh=t)
    ### END SOLUTION


@register_backward("bias_gelu")
def bias_gelu_backward(grad: Any, node) -> tuple:
    """The gradient of bias_gelu from its saved `u` and `tanh` (no tanh computed here).

    slope = 0.5·(1 + t) + 0.5·u·(1 − t²)·c·(1 + 3·0.044715·u²), c = GELU_C.
    Returns (grad·slope,) for inputs (x,), or (grad·slope, grad·slope) for (x, bias): the same
    array twice is fine (the engine sums the bias's copy over the rows). Never changes `grad`
    or the saved arrays in place (backward may run twice on a kept graph).
    """
    u, t = node.saved["u"], node.saved["tanh"]
    ### BEGIN SOLUTION
    slope = u * u
    slope *= 3 * GELU_COEFF
    slope += 1
    slope *= u
    slope *= GELU_C
    slope *= 1 - t * t
    slope += t
    slope += 1
    slope *= 0.5
    slope *= grad
    return (slope,) if len(node.inputs) == 1 else (slope, slope)
    ### END SOLUTION

# %% [markdown]
# No FLOP formula goes beside this rule: like PyTorch's counter, module 14 counts elementwise
# ops as 0 FLOPs (they still show their time and bytes in the profile).
#
# The test checks, in this order: the op and what it saves, the value against the composed
# `gelu(x + b)`, that the rule leaves its inputs alone, then the gradients against central
# differences in float64 (module 05's `gradcheck`).

# %%
from tinytorch.core.activations import gelu
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck


def check_gelu_slope(slope: np.ndarray, u: np.ndarray, t: np.ndarray) -> None:
    """AssertionError naming the classic mistake when `slope` is not GELU's derivative at u."""
    inner = GELU_C * (1 + 3 * GELU_COEFF * u * u)
    right = 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * inner
    if np.allclose(slope, right, rtol=1e-8, atol=1e-10):
        return
    mistakes = {
        "(1 − t²) written as (1 − t): d tanh(z)/dz = 1 − tanh(z)²": 0.5 * (1 + t) + 0.5 * u * (1 - t) * inner,
        "the 3 of d(u³)/du = 3u² is missing: (1 + 3·0.044715·u²)":
            0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * (1 + GELU_COEFF * u * u),
        "the factor 0.5 is missing": 2 * right,
        "the term 0.5·(1 + t) is missing (the product rule has two terms)": right - 0.5 * (1 + t),
    }
    named = [name for name, wrong in mistakes.items() if np.allclose(slope, wrong, rtol=1e-8, atol=1e-10)]
    raise AssertionError("bias_gelu_backward: the slope is not GELU's derivative (max |diff| "
                         f"{np.abs(slope - right).max():.2e}): " + (named[0] if named else
                         "0.5·(1 + t) + 0.5·u·(1 − t²)·c·(1 + 3·0.044715·u²), times grad"))


def test_unit_bias_gelu():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)) * 2
    b = rng.standard_normal(7)
    out = bias_gelu(Tensor(x, requires_grad=True), Tensor(b, requires_grad=True))
    node = out._node
    assert node is not None and node.op == "bias_gelu", \
        f"record ONE op named 'bias_gelu', got {None if node is None else node.op!r}"
    assert len(node.inputs) == 2, f"inputs (x, bias) when a bias is given, got {len(node.inputs)} input(s)"
    assert set(node.saved) >= {"u", "tanh"}, f"save u and tanh, got {sorted(node.saved)}"
    expected_u = x + b
    assert np.allclose(node.saved["u"], expected_u), \
        "saved u must be x + bias (the pre-activation), got something else: did you save x, or forget the bias?"
    expected_t = np.tanh(GELU_C * (expected_u + GELU_COEFF * expected_u ** 3))
    assert np.allclose(node.saved["tanh"], expected_t), \
        "saved tanh must be tanh(c·(u + 0.044715·u³)) of u = x + bias (the t of the forward, before 1 + t)"
    composed = gelu(Tensor(expected_u)).numpy()
    assert np.allclose(out.numpy(), composed, rtol=1e-12, atol=1e-12), (
        f"value differs from gelu(x + bias) by up to {np.abs(out.numpy() - composed).max():.2e}: "
        "0.5·u·(1 + t), with u = x + bias")
    assert bias_gelu(Tensor(x.astype(np.float32))).dtype == np.float32, "keep x's dtype (float32 in, float32 out)"
    grad = rng.standard_normal(x.shape)
    kept = grad.copy(), node.saved["u"].copy(), node.saved["tanh"].copy()
    grads = BACKWARD_RULES["bias_gelu"](grad, node)
    assert np.array_equal(grad, kept[0]), "the rule changed `grad` in place: compute the slope in a new array"
    assert np.array_equal(node.saved["u"], kept[1]) and np.array_equal(node.saved["tanh"], kept[2]), \
        "the rule changed a saved array in place (u or tanh): start the slope from a new array (u * u)"
    assert isinstance(grads, tuple) and len(grads) == 2, (
        f"the rule must return one gradient per input: (grad·slope, grad·slope) for inputs (x, bias), got "
        f"{len(grads) if isinstance(grads, tuple) else type(grads).__name__}")
    check_gelu_slope(grads[0] / grad, expected_u, expected_t)
    assert gradcheck(bias_gelu, [Tensor(x, requires_grad=True), Tensor(b, requires_grad=True)]), "bias_gelu: gradients differ from central differences"
    assert gradcheck(bias_gelu, [Tensor(x, requires_grad=True)]), "bias_gelu without a bias: gradients differ from central differences"
    print("✓ bias_gelu: one op, saves u and tanh, equals gelu(x + b), gradients checked")


test_unit_bias_gelu()

# %% [markdown]
# ### Predict, then run: what does the saved `tanh` buy?
#
# The composed version is `add` then `gelu` (whose backward computes `tanh` again); the fused
# one is a single op. Before running the cell: which half — forward or backward — should
# get faster, and by roughly how much, if `tanh` is the most expensive step of GELU?

# %%
h = Tensor(np.random.default_rng(1).standard_normal((768, 512)).astype(np.float32), requires_grad=True)
b512 = Tensor(np.zeros(512, np.float32), requires_grad=True)
g = np.ones(h.shape, np.float32)


def composed_step():
    (gelu(h + b512)).backward(g)


def fused_step():
    bias_gelu(h, b512).backward(g)


for label, fn in (("composed add + gelu", composed_step), ("fused bias_gelu", fused_step)):
    print(f"{label:22s} forward + backward: {measure_latency(fn, warmup=2, repeats=10)}")

# %% [markdown]
# The fused op saves the backward's `tanh` and one op's worth of Python and temporaries.
# What is left is memory traffic: every `*=` is a pass over 1.5 MB. A compiled kernel (C,
# or CuPy's `ElementwiseKernel` on a GPU) does the whole formula in one pass; NumPy cannot.

# %% [markdown]
# ## 3. `fuse(model)`: the GPT with fused MLPs
#
# Module 13's `MLP` computes `proj(gelu(fc(rows)))`. A fused MLP computes the first layer's
# product itself and hands the bias to `bias_gelu`: `proj(bias_gelu(rows @ fc.weight,
# fc.bias))`. We never change module 13's classes: `fuse(model)` returns a **new** model
# (a deep copy of the module tree) in which every `MLP` is replaced by a `FusedMLP`. The
# weight tensors are **shared**, not copied: the copy is told that every parameter is its
# own copy (`copy.deepcopy(model, memo)` with `memo = {id(p): p}`), so an optimizer built on
# the fused model trains the original too, and saving the original saves what was trained.
# The parameter names stay the same (`blocks.0.mlp.fc.weight`), because `FusedMLP` registers
# the MLP's own `fc`, `proj` and `dropout` under the same names. Which classes are replaced, and
# by what, is one table, `FUSED_REPLACEMENTS` (given); section 5 adds a second entry to it.

# %%
#| export
class FusedMLP(Module):
    """Module 13's MLP with bias + GELU fused: dropout(proj(bias_gelu(rows @ fc.weight, fc.bias))).

    Built from an MLP: registers the MLP's own `fc`, `proj` and `dropout` (the same objects,
    so the same weights and the same parameter names). forward(x (..., E)) -> (..., E).
    """

    def __init__(self, mlp: MLP):
        super().__init__()
        self.fc, self.proj, self.dropout = mlp.fc, mlp.proj, mlp.dropout

    def forward(self, x: Any) -> Tensor:
        """As MLP.forward: rows = x flattened to (N, E) (given); `out` (N, E) =
        dropout(proj(bias_gelu(rows @ fc.weight, fc.bias))) — fc's product without its bias
        (fc.bias may be None), the bias inside bias_gelu; then reshaped to x's shape (given)."""
        x = as_tensor(x)
        rows = x.reshape(-1, x.shape[-1])
        ### BEGIN SOLUTION
        out = self.dropout(self.proj(bias_gelu(rows @ self.fc.weight, self.fc.bias)))
        ### END SOLUTION
        return out.reshape(x.shape)


# Module 13's classes and what `fuse` puts in their place, each built from the module it replaces
# (FusedMLP(mlp)). Exact types: a subclass of MLP may compute something else. Section 5 adds one.
FUSED_REPLACEMENTS: dict[type, type] = {MLP: FusedMLP}


def fuse(model: Module) -> Module:
    """A new model with the fused ops in place: every sub-module whose type is exactly a key of
    FUSED_REPLACEMENTS (module 13's MLP) becomes FUSED_REPLACEMENTS[type](module), e.g.
    FusedMLP(mlp). `model` itself is not changed.

    The new model is copy.deepcopy(model, memo) with memo = {id(t): t for every parameter and
    buffer t of model} (model.parameters() and model.buffers()): the module tree is new, the weight tensors are the SAME objects (an
    update through either model changes both). Walk model.named_modules()[1:] of the copy and
    replace each with fused.set_submodule(name, replacement) (module 03; fused is the copy). A model whose own type is a key
    (a lone MLP) is returned as its replacement, built from the copy. TypeError (given) for
    anything but a Module.
    """
    if not isinstance(model, Module):
        raise TypeError(f"fuse needs a Module (e.g. module 13's GPT), got {type(model).__name__}.")
    ### BEGIN SOLUTION
    shared = {id(t): t for t in model.parameters()}
    shared.update({id(t): t for _, t in model.named_buffers()})
    fused = copy.deepcopy(model, shared)
    if type(fused) in FUSED_REPLACEMENTS:
        return FUSED_REPLACEMENTS[type(fused)](fused)
    for name, module in fused.named_modules()[1:]:
        if type(module) in FUSED_REPLACEMENTS:
            fused.set_submodule(name, FUSED_REPLACEMENTS[type(module)](module))
    return fused
    ### END SOLUTION

# %%
from tinytorch.core.autograd import topological_order


def recorded_ops(tensor: Tensor) -> set:
    """The names of the ops in the graph behind `tensor`."""
    return {t._node.op for t in topological_order(tensor) if t._node is not None}


def test_unit_fuse():
    model = GPT(17, 16, 2, 2, 8, seed=3, dtype=np.float64)
    for block in model.blocks:  # biases start at 0: make them count, so a forgotten bias shows
        block.mlp.fc.bias.data = np.linspace(-1.0, 1.0, block.mlp.fc.bias.size)
    before = {name: p.data.copy() for name, p in model.named_parameters()}
    fused = fuse(model)
    assert fused is not model, "fuse must return a NEW model (copy.deepcopy), not change the one it is given"
    assert all(type(block.mlp) is MLP for block in model.blocks), \
        "the original model's MLPs were replaced: replace them in the copy only"
    kinds = [type(block.mlp).__name__ for block in fused.blocks]
    assert kinds == ["FusedMLP"] * 2, f"every block's mlp must become a FusedMLP, got {kinds}"
    names = [name for name, _ in fused.named_parameters()]
    assert names == list(before), "the fused model must have the same parameter names, in the same order"
    same = [p is q for p, q in zip(model.parameters(), fused.parameters())]
    assert all(same), (
        f"{same.count(False)} parameter(s) are copies: share the weight tensors (memo = {{id(p): p}} in "
        "copy.deepcopy), so that training the fused model trains the original")
    ids = np.random.default_rng(0).integers(0, 17, (3, 8))
    tgt = np.random.default_rng(1).integers(0, 17, (3, 8))
    logits, loss = model(ids, targets=tgt)
    flogits, floss = fused(ids, targets=tgt)
    ops = recorded_ops(floss)
    assert "bias_gelu" in ops and "gelu" not in ops, \
        f"the fused model's graph must use bias_gelu and no gelu; its ops: {sorted(ops)}"
    assert np.allclose(flogits.numpy(), logits.numpy(), rtol=1e-12, atol=1e-12), \
        "the fused model's logits differ from the original's: FusedMLP must compute proj(gelu(fc(rows)))"
    loss.backward()
    plain = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    model.zero_grad()
    floss.backward()
    for name, p in fused.named_parameters():
        assert p.grad is not None, f"{name} got no gradient from the fused model: is it used in the forward?"
        assert np.allclose(p.grad.numpy(), plain[name], rtol=1e-10, atol=1e-12), \
            f"gradient of {name} differs from the original model's"
    print("✓ fuse: a new model, the same weight tensors, bias_gelu in every MLP, same loss and gradients")


test_unit_fuse()

# %% [markdown]
# ## 4. Softmax and cross-entropy: fused since module 04
#
# The issue every framework meets is the loss: `log(softmax(z))[y]` composed from three ops
# keeps the softmax, its log and the picked entries, and is unstable for large logits.
# Module 04's `cross_entropy` is already the fused version: one op from the logits, with
# log-sum-exp, saving only the probabilities, and a backward of `probs − onehot`. Measure
# what that fusion is worth against the composed chain (`log_softmax`, then picking the
# targets with a one-hot mask, then the mean):

# %%
from tinytorch.core.activations import log_softmax
from tinytorch.core.losses import cross_entropy

logits = Tensor(np.random.default_rng(2).standard_normal((768, 65)).astype(np.float32), requires_grad=True)
labels = np.random.default_rng(3).integers(0, 65, 768)
onehot = np.eye(65, dtype=np.float32)[labels]


def composed_loss():
    (-(log_softmax(logits, dim=-1) * onehot).sum() / len(labels)).backward()


def fused_loss():
    cross_entropy(logits, labels).backward()


assert np.isclose((-(log_softmax(logits, dim=-1) * onehot).sum() / len(labels)).item(),
                  cross_entropy(logits, labels).item(), rtol=1e-5), "the two losses must agree"
for label, fn in (("composed log_softmax·onehot", composed_loss), ("fused cross_entropy", fused_loss)):
    print(f"{label:28s} forward + backward: {measure_latency(fn, warmup=2, repeats=10)}")

# %% [markdown]
# ## 5. LayerNorm: the row reductions as matrix products
#
# After the products and GELU, the profile names `layer_norm`. Module 13's op is
# already one recorded op, so there is nothing left to fuse: its time goes to *reductions*.
# Each row of D = 128 features needs a mean and a mean of squares forward, and two more means
# backward, all over the short last axis. Its backward also hands the engine `grad·x̂` and
# `grad` in x's shape, and the engine sums them over the N rows to the weight's shape
# (`unbroadcast`): two more passes over the whole array.
#
# A mean over the last axis is a matrix–vector product: `rows @ a` with `a = [1/D, …, 1/D]`,
# one BLAS call, the kernel behind every Linear layer; a sum over the rows is `ones @ rows`.
# Measure both ways on the milestone's activations (N = 12·64 rows of 128):

# %%
rows768 = np.random.default_rng(4).standard_normal((768, 128)).astype(np.float32)
averager = np.full(128, 1 / 128, np.float32)
assert np.allclose(rows768.mean(axis=-1), rows768 @ averager, atol=1e-6), "a mean is a product with [1/D]*D"
print(f"rows.mean(axis=-1): {measure_latency(lambda: rows768.mean(axis=-1), repeats=200)}")
print(f"rows @ averager   : {measure_latency(lambda: rows768 @ averager, repeats=200)}")
ones768 = np.ones(768, np.float32)
assert np.allclose(rows768.sum(axis=0), ones768 @ rows768, atol=1e-4), "a column sum is a product with [1]*N"
print(f"rows.sum(axis=0)  : {measure_latency(lambda: rows768.sum(axis=0), repeats=200)}")
print(f"ones @ rows       : {measure_latency(lambda: ones768 @ rows768, repeats=200)}")

# %% [markdown]
# `blas_layer_norm` below is module 13's `layer_norm` computed on the rows (N, D):
#
# * the mean is `rows @ a` and the variance `square(centred) @ a`, squared in the input's
#   dtype. A float32 square overflows above about 1.8·10¹⁹ (module 13's catalogue has that
#   mistake), so when any row's variance is not finite the op squares that array again in
#   float64: one check of N numbers instead of a float64 copy of every row;
# * the backward's two means are `ĝ @ a` and `(ĝ·x̂) @ a`, with ĝ = grad·weight;
# * the weight's and the bias's gradients are summed over the rows inside the rule, also as
#   products (`ones @ (grad·x̂)` and `ones @ grad`), so the engine has nothing left to reduce.
#
# `BlasLayerNorm` wraps module 13's `LayerNorm` (the same weight and bias tensors, the same
# names), and one line adds it to `FUSED_REPLACEMENTS`: from now on `fuse(model)` puts it in
# place of every `LayerNorm`. All of this is given code: read it, then run the checks.

# %%
#| export
from tinytorch.core.tensor import autocast_float32
from tinytorch.models.transformer import LayerNorm, check_eps, normalized_axes


def blas_layer_norm(x: Any, weight: Any, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Module 13's layer_norm, (x − mean)/sqrt(var + eps)·weight + bias, with the row means as
    BLAS matrix-vector products.

    x (..., *S); weight S; bias S or None (S = weight's shape, the normalised trailing dims).
    Same value, shape and dtype as module 13's layer_norm, float16 under module 17's autocast
    included. The rows are x viewed as (N, D) with D = the size of S; each mean is `rows @ a`
    with a = [1/D]*D. Squares are taken in the rows' dtype, again in float64 when a variance is
    not finite. Records one op, "blas_layer_norm", inputs (x, weight) or (x, weight, bias);
    saved: xhat (N, D), rstd (N, 1) in the rows' dtype, averager a (D,).
    """
    x, weight = autocast_float32(as_tensor(x)), as_tensor(weight)
    bias = None if bias is None else as_tensor(bias)
    check_floating_input("blas_layer_norm", x)  # TypeError for integers, as module 13's layer_norm
    normalized_axes(weight.shape, x.shape)  # ValueError unless x ends with weight's shape
    check_eps("blas_layer_norm", eps)
    xp = array_module(x.data)
    size = math.prod(weight.shape)
    rows = x.data.reshape(-1, size)
    averager = xp.full(size, 1.0 / size, dtype=rows.dtype)
    centred = rows - (rows @ averager)[:, None]
    with np.errstate(over="ignore"):  # an overflow is caught just below
        var = xp.square(centred) @ averager
    if not bool(xp.isfinite(var).all()):  # a square overflowed the dtype (or x holds inf/NaN)
        var = xp.square(centred, dtype=np.float64) @ averager.astype(np.float64)
    rstd = (1.0 / xp.sqrt(var + eps)).astype(rows.dtype)[:, None]
    xhat = centred
    xhat *= rstd  # in place: `centred` is not needed any more
    out = xhat * weight.data.reshape(size)
    if bias is not None:
        out += bias.data.reshape(size)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return record_op("blas_layer_norm", out.reshape(x.shape), inputs, xhat=xhat, rstd=rstd, averager=averager)


@register_backward("blas_layer_norm")
def blas_layer_norm_backward(grad: Any, node) -> tuple:
    """On the rows (N, D): dx = rstd·(ĝ − ĝ@a − x̂·((ĝ·x̂)@a)) with ĝ = grad·weight;
    dweight = Σ_rows grad·x̂ and dbias = Σ_rows grad, as products with a vector of N ones,
    already in weight's shape S.
    Returns (dx, dweight) or (dx, dweight, dbias), one per input."""
    xhat, rstd, averager = node.saved["xhat"], node.saved["rstd"], node.saved["averager"]
    x, weight = node.inputs[0], node.inputs[1]
    xp = array_module(grad)
    g = grad.reshape(xhat.shape)
    g_hat = g * weight.data.reshape(-1)
    product = g_hat * xhat
    d_x = xhat * (product @ averager)[:, None]
    xp.subtract(g_hat, d_x, out=d_x)
    d_x -= (g_hat @ averager)[:, None]
    d_x *= rstd
    xp.multiply(g, xhat, out=product)  # reuse the array: grad·x̂ for the weight
    ones = xp.ones(len(g), dtype=product.dtype)
    grads = (d_x.reshape(x.shape), (ones @ product).reshape(weight.shape))
    return grads if len(node.inputs) == 2 else grads + ((ones @ g).reshape(node.inputs[2].shape),)


class BlasLayerNorm(Module):
    """Module 13's LayerNorm computed by blas_layer_norm. Built from a LayerNorm: its own weight
    and bias tensors (the same objects, the same names) and eps. forward(x (..., *S)) -> same shape."""

    def __init__(self, norm: LayerNorm):
        super().__init__()
        self.normalized_shape, self.eps = norm.normalized_shape, norm.eps
        self.weight, self.bias = norm.weight, norm.bias

    def forward(self, x: Any) -> Tensor:
        return blas_layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, bias={self.bias is not None}"


FUSED_REPLACEMENTS[LayerNorm] = BlasLayerNorm

# %%
from tinytorch.models.transformer import layer_norm


def test_unit_blas_layer_norm():
    rng = np.random.default_rng(5)
    for shape, norm_shape, with_bias in (((3, 4, 6), (6,), True), ((2, 3, 4), (3, 4), False)):
        x = rng.standard_normal(shape) * 3 + 1
        w = 1 + 0.2 * rng.standard_normal(norm_shape)
        b = rng.standard_normal(norm_shape) if with_bias else None
        args = [Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)]
        args += [Tensor(b, requires_grad=True)] if with_bias else []
        ours, theirs = blas_layer_norm(*args), layer_norm(*args)
        assert ours._node.op == "blas_layer_norm", f"one op named 'blas_layer_norm', got {ours._node.op!r}"
        assert np.allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12), \
            f"blas_layer_norm differs from module 13's layer_norm for S = {norm_shape}"
        assert gradcheck(blas_layer_norm, args), f"blas_layer_norm (S = {norm_shape}): gradients differ"
    huge = np.array([[1e20, -1e20, 3e20, 0.0], [1.0, 2.0, 3.0, 4.0]], np.float32)
    ones4 = np.ones(4, np.float32)
    got = blas_layer_norm(huge, ones4).numpy()
    assert got.dtype == np.float32 and np.allclose(got, layer_norm(huge, ones4).numpy(), atol=1e-5), \
        "a row near 1e20 must normalise as in module 13 (float32 squares overflow: the float64 retry)"
    block = GPT(17, 16, 2, 2, 8, seed=3, dtype=np.float64)
    fused_ops = recorded_ops(fuse(block)(np.zeros((1, 8), int), targets=np.zeros((1, 8), int))[1])
    assert "blas_layer_norm" in fused_ops and "layer_norm" not in fused_ops, \
        f"fuse must now replace every LayerNorm; the fused graph's ops: {sorted(fused_ops)}"
    print("✓ blas_layer_norm: module 13's values and gradients (one and two normalised axes), "
          "huge rows handled, and fuse puts it in place of every LayerNorm")


test_unit_blas_layer_norm()

# %% [markdown]
# ### Predict, then run: what do products instead of reductions buy?
#
# The arithmetic is the same; only the way each reduction is done changed. Time module 13's op
# against this one, forward and backward, at the milestone's shape:

# %%
ln_x = Tensor(np.random.default_rng(6).standard_normal((12, 64, 128)).astype(np.float32), requires_grad=True)
ln_w = Tensor(np.ones(128, np.float32), requires_grad=True)
ln_g = np.ones(ln_x.shape, np.float32)
for label, norm in (("module 13's layer_norm", layer_norm), ("blas_layer_norm", blas_layer_norm)):
    print(f"{label:22s} forward + backward: {measure_latency(lambda: norm(ln_x, ln_w).backward(ln_g), repeats=50)}")

# %% [markdown]
# ## 6. A multi-tensor optimizer: AdamW over one flat buffer
#
# Module 06's `AdamW.step` loops over the parameters and runs about a dozen array operations
# on each: for the milestone's GPT (35 parameter tensors, printed below) that is several hundred
# NumPy calls on arrays of a few hundred bytes to a few hundred kilobytes. Each call costs a few microseconds of Python
# and NumPy dispatch whatever its size. PyTorch's `foreach` and `fused` AdamW (and Apex's
# multi-tensor apply) solve it by working on all parameters at once.
#
# `FusedAdamW` lays every parameter end to end in **one flat array** and makes each parameter's
# `.data` a **view** into it (`flat[start:end].reshape(shape)`); the two moments are flat
# arrays too. Then a step is: gather the gradients into one flat array (one
# `concatenate`, given), and run AdamW's formula once per parameter group on slices of the
# flat arrays (the GPT has two groups: decayed matrices, undecayed vectors, which lie end to
# end because the groups are laid out in order). Each element goes through exactly the
# operations `AdamW` applies to it, in the same order and the same dtype, so the result is
# **bit-for-bit** the same. The update writes into the flat arrays **in place**: assigning a
# new array to `param.data` would cut the view.
#
# The given code lays out the buffer, keeps it in step when something replaces a parameter's
# array (`load_state_dict`, `model.to`), and falls back to `AdamW`'s per-parameter loop when a
# parameter has no gradient or the step counts differ (the flat update assumes one step count
# per group). You write one group's update.

# %%
#| export
class FusedAdamW(AdamW):
    """AdamW (module 06) whose step runs on one flat buffer: the same updates, bit for bit.

    Every parameter's `.data` becomes a view into `self.flat` (all parameters end to end,
    group after group); `state[i]["exp_avg"]` and `["exp_avg_sq"]` are views into the flat
    moments `self.exp_avg`, `self.exp_avg_sq` (so `state_dict()` is AdamW's, with type
    "FusedAdamW"). All parameters must share one dtype and device (ValueError otherwise).
    The state exists from construction on (zeros, step 0), not from the first step.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        kinds = {(p.dtype, p.device) for p in self.params}
        if len(kinds) != 1:
            raise ValueError(f"FusedAdamW: every parameter must have one dtype and device for one flat buffer, "
                             f"got {sorted(map(str, kinds))}; use AdamW, or one FusedAdamW per dtype.")
        xp = array_module(self.params[0].data)
        sizes = [p.size for p in self.params]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        self.flat = xp.empty(self.offsets[-1], dtype=self.params[0].dtype)
        self.grad_flat, self.work = xp.empty_like(self.flat), xp.empty_like(self.flat)
        self.exp_avg, self.exp_avg_sq = xp.zeros_like(self.flat), xp.zeros_like(self.flat)
        self._views: list = [None] * len(self.params)
        for i in range(len(self.params)):
            self._adopt(i)
        ends = np.cumsum([len(group["params"]) for group in self.param_groups]).tolist()
        self.group_ranges = [(self.offsets[e - len(g["params"])], self.offsets[e])
                             for g, e in zip(self.param_groups, ends)]

    def _view(self, array: Any, i: int) -> Any:
        return array[self.offsets[i]:self.offsets[i + 1]].reshape(self.params[i].shape)

    def _adopt(self, i: int, state: dict | None = None) -> None:
        """Copy parameter i's values (and `state`'s moments and step, if given) into the flat
        arrays and point the parameter and its state at their views."""
        param = self.params[i]
        view = self._view(self.flat, i)
        view[...] = param.data
        param.data = view
        self._views[i] = view
        old = state if state is not None else self.state[i]
        entry = {"step": int(old.get("step", 0)), "exp_avg": self._view(self.exp_avg, i),
                 "exp_avg_sq": self._view(self.exp_avg_sq, i)}
        for key in ("exp_avg", "exp_avg_sq"):
            entry[key][...] = old[key] if key in old else 0
        self.state[i] = entry

    def _keep_flat(self) -> None:
        """Re-adopt every parameter whose array or state was replaced since the last step."""
        for i, param in enumerate(self.params):
            state = self.state[i]
            if (param.data is not self._views[i] or state.get("exp_avg") is None
                    or state["exp_avg"].base is not self.exp_avg or state["exp_avg_sq"].base is not self.exp_avg_sq):
                self._adopt(i, state)

    def step(self) -> None:
        """One AdamW step: on the flat buffer when every parameter has a gradient and each
        group's parameters share one step count; otherwise AdamW's per-parameter loop."""
        self._keep_flat()
        groups, start = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            groups.append((group, self.state[start:start + count]))
            start += count
        if any(p.grad is None for p in self.params) or \
                any(len({s["step"] for s in states}) != 1 for _, states in groups):
            super().step()  # AdamW assigns new arrays to param.data ...
            self._keep_flat()  # ... copied back into the flat buffer, the parameters views again
            return
        xp = array_module(self.flat)
        xp.concatenate([p.grad.data.reshape(-1) for p in self.params], out=self.grad_flat)
        for (group, states), (lo, hi) in zip(groups, self.group_ranges):
            t = states[0]["step"] + 1
            self._group_update(self.flat[lo:hi], self.grad_flat[lo:hi], self.exp_avg[lo:hi],
                               self.exp_avg_sq[lo:hi], self.work[lo:hi], t, group)
            for state in states:
                state["step"] = t

    def _group_update(self, p: Any, g: Any, m: Any, v: Any, work: Any, t: int, settings: dict[str, Any]) -> None:
        """AdamW's update of one group, in place on flat 1-D arrays (views into the buffers):
        p parameters, g gradients, m and v the moments, `work` a scratch array of the same size
        for the intermediate results, t the step number AFTER this step (1 on the first),
        settings the group's lr, betas, eps, weight_decay.

        Exactly module 06's operations, in its order, so every element is bit-identical:
            p *= 1 − lr·wd                 (only when wd != 0)
            m *= β1;  m += (1 − β1)·g
            v *= β2;  v += (1 − β2)·(g·g)
            step_size = lr / (1 − β1^t);  denom = sqrt(v) / sqrt(1 − β2^t) + eps   (math.sqrt for the scalar)
            p -= step_size · (m / denom)
        No new arrays: compute every intermediate into `work` with out= (xp.multiply(g, g,
        out=work), xp.sqrt(v, out=work), ...). An 800,000-element temporary is a fresh 3 MB
        allocation each time, slower than the arithmetic on it. Every write into p, m, v is in
        place (`*=`, `+=`, `-=`): `p = …` would only rebind the local name.
        """
        lr, (beta1, beta2), eps, weight_decay = (settings["lr"], settings["betas"], settings["eps"],
                                                 settings["weight_decay"])
        xp = array_module(p)
        ### BEGIN SOLUTION
        if weight_decay != 0:
            p *= 1 - lr * weight_decay
        m *= beta1
        xp.multiply(g, 1 - beta1, out=work)
        m += work
        v *= beta2
        xp.multiply(g, g, out=work)
        work *= 1 - beta2
        v += work
        step_size = lr / (1 - beta1 ** t)
        xp.sqrt(v, out=work)
        work /= math.sqrt(1 - beta2 ** t)
        work += eps
        xp.divide(m, work, out=work)
        work *= step_size
        p -= work
        ### END SOLUTION

# %%
from tinytorch.core.optimizers import AdamW


def train_steps(model, optimizer, steps=3, seed=0):
    """`steps` training steps of `model` on fixed random batches; returns the parameters after them."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x, y = rng.integers(0, model.vocab_size, (2, 4, 8))
        _, loss = model(x, targets=y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.data.copy() for p in model.parameters()]


def test_unit_fused_adamw():
    reference_model = GPT(19, 16, 2, 2, 8, bias=False, seed=4)
    model = GPT(19, 16, 2, 2, 8, bias=False, seed=4)
    settings = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    reference = AdamW(weight_decay_groups(reference_model, 0.1), **settings)
    fused = FusedAdamW(weight_decay_groups(model, 0.1), **settings)
    assert all(np.shares_memory(p.data, fused.flat) for p in model.parameters()), \
        "every parameter must be a view into fused.flat"
    initial = [p.data.copy() for p in model.parameters()]
    expected = train_steps(reference_model, reference)
    got = train_steps(model, fused)
    assert all(np.shares_memory(p.data, fused.flat) for p in model.parameters()), (
        "after step() a parameter is no longer a view into the flat buffer: update p, m, v in place "
        "(p -= …), never p = …")
    names = [name for name, _ in model.named_parameters()]
    for name, b, start in zip(names, got, initial):
        assert not np.array_equal(b, start), (f"{name} did not change in 3 steps: write into p in place (p -= …); "
                                              "`p = p - …` only rebinds the local name")
    for name, a, b in zip(names, expected, got):
        assert np.array_equal(a, b), (
            f"{name} after 3 steps differs from AdamW's by up to {np.abs(a - b).max():.2e}: follow module 06's "
            "operations in its order (decay first, then m and v in place, bias corrections with step t, "
            "sqrt(v)/sqrt(1 − β2^t) + eps)")
    for s_ref, s_fused in zip(reference.state, fused.state):
        assert s_ref["step"] == s_fused["step"], f"step counts differ: AdamW {s_ref['step']}, ours {s_fused['step']}"
        assert np.array_equal(s_ref["exp_avg"], s_fused["exp_avg"]), "exp_avg differs from AdamW's"
        assert np.array_equal(s_ref["exp_avg_sq"], s_fused["exp_avg_sq"]), "exp_avg_sq differs from AdamW's"
    print("✓ FusedAdamW: bit-for-bit AdamW over 3 steps, decay on the matrices only, parameters stay views")


test_unit_fused_adamw()

# %% [markdown]
# ### Predict, then run: how much does the flat step save?
#
# The update does the same arithmetic on the same number of elements either way. Before
# running: is the milestone-sized GPT's optimizer step bound by arithmetic, by memory, or by
# the number of calls? What should the ratio be?

# %%
mid = GPT(65, 128, 4, 4, 64, bias=False, seed=0)
mid_twin = GPT(65, 128, 4, 4, 64, bias=False, seed=0)
per_parameter = AdamW(weight_decay_groups(mid, 0.1), lr=1e-3, betas=(0.9, 0.99))
flat = FusedAdamW(weight_decay_groups(mid_twin, 0.1), lr=1e-3, betas=(0.9, 0.99))
for params in (mid.parameters(), mid_twin.parameters()):
    for p in params:
        p.grad = Tensor(np.full(p.shape, 1e-3, np.float32))
loop_time = measure_latency(per_parameter.step, warmup=2, repeats=15)
flat_time = measure_latency(flat.step, warmup=2, repeats=15)
print(f"{len(per_parameter.params)} parameters, {flat.flat.size:,} elements")
print(f"AdamW (per parameter): {loop_time}")
print(f"FusedAdamW (flat):     {flat_time}")
print(f"ratio: {loop_time.median_s / flat_time.median_s:.2f}x")

# %% [markdown]
# ## 7. Vectorisation, measured: loops, tiles and BLAS
#
# A Python loop costs roughly a microsecond per iteration before any arithmetic; NumPy does
# its arithmetic in C. So the question for any loop is how much work each iteration hands to
# C. Module 14's **roofline** says how fast that work can be: an operation that does `F`
# FLOPs on `B` bytes has arithmetic intensity `I = F / B` and cannot run faster than
# `min(peak FLOP/s, I × peak bytes/s)`.
#
# **Convolution.** Module 09's `conv2d` is im2col: the input windows laid out as one matrix,
# then one matrix product. The naive alternative loops over the output positions and does a
# small dot product at each. Measure both on the same input:

# %%
#| export
def conv2d_loops(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid convolution (stride 1, no padding) with a Python loop over output positions:
    out[:, :, i, j] = Σ x[:, :, i:i+kh, j:j+kw] · w, a tensordot per position."""
    n, _, height, width = x.shape
    out_channels, _, kh, kw = w.shape
    out = np.empty((n, out_channels, height - kh + 1, width - kw + 1), x.dtype)
    for i in range(height - kh + 1):
        for j in range(width - kw + 1):
            out[:, :, i, j] = np.tensordot(x[:, :, i:i + kh, j:j + kw], w, axes=([1, 2, 3], [1, 2, 3]))
    return out

# %%
from tinytorch.core.spatial import conv2d

images = np.random.default_rng(5).standard_normal((16, 8, 16, 16)).astype(np.float32)
kernels = np.random.default_rng(6).standard_normal((16, 8, 3, 3)).astype(np.float32)
assert np.allclose(conv2d_loops(images, kernels), conv2d(Tensor(images), Tensor(kernels)).numpy(), atol=1e-4), \
    "the loop convolution and module 09's conv2d disagree: is your conv2d (module 09) correct? `tito test 09`"
loops_time = measure_latency(conv2d_loops, images, kernels, warmup=1, repeats=5)
im2col_time = measure_latency(lambda: conv2d(Tensor(images), Tensor(kernels)), warmup=1, repeats=5)
print(f"loop over {14 * 14} output positions: {loops_time}")
print(f"im2col + one product:           {im2col_time}")
print(f"ratio: {loops_time.median_s / im2col_time.median_s:.1f}x")

# %% [markdown]
# The loop runs 196 small `tensordot`s, each a few thousand FLOPs: the time is Python and
# NumPy's per-call cost, not arithmetic. im2col does the same FLOPs in one large product.
#
# **Matrix products.** A blocked (tiled) product splits `A (m, k) @ B (k, n)` into tiles of
# `tile × tile` and adds up tile products: `C[I, J] += A[I, K] @ B[K, J]`. In C, tiling keeps
# the tiles in cache (a `t × t` tile product does `2t³` FLOPs on `3·4t²` bytes, intensity
# `t/6` FLOP/byte: larger tiles, more reuse); that is how BLAS itself is built. In NumPy each
# tile product is already a BLAS call, so the only thing tiling adds is Python iterations:
# `⌈m/t⌉·⌈n/t⌉·⌈k/t⌉` of them.
#
# ### Your turn: `blocked_matmul`
#
# Write it so that the tile size really matters (a "tiled" product that ignores its tile is a
# plain product with extra steps). Edge tiles are smaller when the sizes are not multiples of
# the tile (slicing past the end of an array stops at its end).

# %%
#| export
def blocked_matmul(a: np.ndarray, b: np.ndarray, tile: int) -> np.ndarray:
    """A @ B for 2-D arrays a (m, k), b (k, n), computed tile by tile.

    out (m, n) in the dtype of a @ b (np.result_type(a, b)), starting at zeros; for every tile
    row i, tile column j and tile depth p (steps of `tile` along m, n and k):
        out[i:i+tile, j:j+tile] += a[i:i+tile, p:p+tile] @ b[p:p+tile, j:j+tile]
    so there are exactly ceil(m/tile)·ceil(n/tile)·ceil(k/tile) tile products (edge tiles are
    smaller). ValueError (given) for shapes that do not chain or a tile < 1.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"blocked_matmul: need a (m, k) and b (k, n), got {a.shape} and {b.shape}.")
    if isinstance(tile, (bool, np.bool_)) or not isinstance(tile, (int, float, np.integer, np.floating)) \
            or not 1 <= tile < np.inf or int(tile) != tile:  # inf crashed in int(), nan compares False
        raise ValueError(f"blocked_matmul: tile must be a positive int, got {tile!r}.")
    tile = int(tile)
    ### BEGIN SOLUTION
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.result_type(a, b))
    for i in range(0, m, tile):
        for j in range(0, n, tile):
            for p in range(0, k, tile):
                out[i:i + tile, j:j + tile] += a[i:i + tile, p:p + tile] @ b[p:p + tile, j:j + tile]
    return out
    ### END SOLUTION

# %%
class CountingArray(np.ndarray):
    """A NumPy array that counts the matrix products it takes part in as the left operand."""
    products = 0

    def __matmul__(self, other):
        CountingArray.products += 1
        return np.asarray(self) @ np.asarray(other)


def blocked_matmul_slip(got: np.ndarray, a: np.ndarray, b: np.ndarray, tile: int) -> str:
    """Why blocked_matmul(a, b, tile) gave `got` instead of a @ b, told from what it computed."""
    (m, k), n = a.shape, b.shape[1]
    whole = lambda size: size // tile * tile  # noqa: E731  the part of an axis that whole tiles cover
    skipped = [f"{axis} {whole(size)}..{size - 1}" for axis, size, edge in
               (("rows", m, got[whole(m):, :]), ("columns", n, got[:, whole(n):]))
               if size % tile and not edge.any()]
    if k % tile and np.allclose(got[:whole(m), :whole(n)], (a[:, :whole(k)] @ b[:whole(k), :])[:whole(m), :whole(n)]):
        skipped.append(f"depth {whole(k)}..{k - 1}")
    if skipped:
        return (f"the edge tiles were skipped ({', '.join(skipped)} are missing): when tile does not divide a size, "
                "the last tile is smaller, and range(0, size, tile) includes it")
    last = (k - 1) // tile * tile
    if k > tile and np.allclose(got, a[:, last:] @ b[last:, :]):
        return "only the last tile depth is in the output: add every tile depth p (+=), do not assign (=)"
    return "add every tile depth p (+=), and start from zeros"


def test_unit_blocked_matmul():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((10, 7)), rng.standard_normal((7, 9))
    for tile in (1, 3, 4, 16):
        got = blocked_matmul(a, b, tile)
        assert got.shape == (10, 9), f"tile {tile}: expected shape (10, 9), got {got.shape}"
        assert np.allclose(got, a @ b, atol=1e-12), (
            f"tile {tile}: differs from a @ b by up to {np.abs(got - a @ b).max():.2e}: "
            + blocked_matmul_slip(got, a, b, tile))
    CountingArray.products = 0
    blocked_matmul(a.view(CountingArray), b, 3)
    expected = math.ceil(10 / 3) * math.ceil(9 / 3) * math.ceil(7 / 3)
    assert CountingArray.products == expected, (
        f"tile 3 on (10, 7) @ (7, 9): expected {expected} tile products, got {CountingArray.products}: "
        "loop over tiles of `tile` along m, n AND k (a tiled product that ignores its tile is not tiled)")
    assert blocked_matmul(a.astype(np.float32), b.astype(np.float32), 4).dtype == np.float32, \
        "keep the inputs' dtype (float32 in, float32 out): np.zeros(..., dtype=np.result_type(a, b))"
    print("✓ blocked_matmul: equals a @ b for every tile size, ceil(m/t)·ceil(n/t)·ceil(k/t) tile products")


test_unit_blocked_matmul()

# %% [markdown]
# ### Predict, then run: tiles against BLAS, on the roofline
#
# For a 256 × 256 float32 product, predict the time of tiles of 16, 64 and 256 compared with
# one `a @ b`. The roofline of each tile product is printed beside the measurement: which
# tiles are bound by Python, which by arithmetic?

# %%
from tinytorch.perf.profiling import machine_peak

peak_gflops, peak_gbytes = machine_peak(n=256, copy_mib=16, repeats=3)
a256 = np.random.default_rng(8).standard_normal((256, 256)).astype(np.float32)
b256 = np.random.default_rng(9).standard_normal((256, 256)).astype(np.float32)
blas = measure_latency(lambda: a256 @ b256, warmup=2, repeats=10)
flops = 2 * 256 ** 3
print(f"this machine: {peak_gflops:.1f} GFLOP/s (256³ product), {peak_gbytes:.1f} GB/s (copy)")
print(f"BLAS a @ b: {blas.median_s * 1e3:.3f} ms, {flops / blas.median_s / 1e9:.1f} GFLOP/s")
for tile in (16, 64, 256):
    timing = measure_latency(blocked_matmul, a256, b256, tile, warmup=1, repeats=5)
    intensity = tile / 6  # 2t³ FLOPs on 3·4t² bytes
    bound = min(peak_gflops, intensity * peak_gbytes)
    print(f"tile {tile:3d}: {(256 // tile) ** 3:5d} tile products, {timing.median_s * 1e3:8.3f} ms, "
          f"{flops / timing.median_s / 1e9:6.1f} GFLOP/s; a tile's roofline {bound:.1f} GFLOP/s "
          f"(intensity {intensity:.1f} FLOP/byte); {timing.median_s / blas.median_s:.1f}x BLAS")

# %% [markdown]
# Small tiles fall far below their own roofline: 4,096 tile products of 16 × 16 spend their
# time in Python and in NumPy's per-call cost, not in arithmetic or memory. Large tiles
# approach BLAS because each call does enough work to hide that cost; the last step (one
# tile) *is* BLAS. Tiling is the right idea inside a compiled kernel; from Python, the
# fastest tiling is the one BLAS already does.

# %% [markdown]
# ## 8. The whole step, fused against plain
#
# Put the pieces together: the fused model with `FusedAdamW`, against the plain model with
# `AdamW`, interleaved on the same batch (a small GPT here; `tito bench acceleration` runs
# the milestone's model against PyTorch eager and writes the result to
# `benchmarks/RESULTS.md`). Both models start from the same weights, so after a few steps
# their weights must still agree (to rounding: the fused GELU's arithmetic is ordered
# differently from module 05's rule).

# %%
plain_model = GPT(65, 128, 2, 4, 32, bias=False, seed=0)
fused_source = GPT(65, 128, 2, 4, 32, bias=False, seed=0)
fused_model = fuse(fused_source)
plain_opt = AdamW(weight_decay_groups(plain_model, 0.1), lr=1e-3, betas=(0.9, 0.99))
fused_opt = FusedAdamW(weight_decay_groups(fused_model, 0.1), lr=1e-3, betas=(0.9, 0.99))
xb, yb = np.random.default_rng(10).integers(0, 65, (2, 8, 32))


def make_step(model, optimizer):
    def step():
        _, loss = model(xb, targets=yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


plain_step, fused_step_fn = make_step(plain_model, plain_opt), make_step(fused_model, fused_opt)
plain_samples, fused_samples = [], []
for _ in range(6):  # interleaved: the same load on both
    plain_samples.append(measure_latency(plain_step, warmup=0, repeats=1).median_s)
    fused_samples.append(measure_latency(fused_step_fn, warmup=0, repeats=1).median_s)
plain_ms, fused_ms = np.median(plain_samples) * 1e3, np.median(fused_samples) * 1e3
print(f"plain step {plain_ms:.1f} ms, fused step {fused_ms:.1f} ms, fused/plain {fused_ms / plain_ms:.2f}")
drift = max(np.abs(p.data - q.data).max() for p, q in zip(plain_model.parameters(), fused_source.parameters()))
print(f"largest weight difference after {len(plain_samples)} steps each: {drift:.2e}")

# %% [markdown]
# ## 9. The allocator: memory handed back, then faulted in again
#
# Time the two steps at the milestone's size with the CPU clock and a surprise can appear: the
# fused step does less arithmetic yet may take *more* time (the benchmark saw it on our machine). The clock counts the kernel's time too, and
# the kernel is busy with **page faults**. NumPy gets its arrays from the C library's `malloc`.
# glibc's `malloc` hands large arrays straight to the operating system (`mmap`), and when the
# freed memory at the top of its heap grows past a threshold it gives it back (`trim`). A
# training step frees its whole graph at the end, so memory goes back to the system, and the
# next step touches fresh pages again; each first touch of a 4 KiB page is a fault. How many
# faults a step takes depends on the sizes of its arrays, how many are alive at once (the fused
# op keeps `tanh` until the backward) and the order they are freed in: it can differ from one
# step to the next and between the two models, so count them rather than guess.
#
# `keep_freed_memory()` (given) raises glibc's two thresholds with `mallopt`, so freed memory stays
# in the process and is reused. It changes the whole process — PyTorch in the same process too —
# and does nothing on a C library other than glibc. Count the page faults of one step
# (`resource.getrusage(...).ru_minflt`, the minor faults of this process so far):

# %%
#| export
def keep_freed_memory(limit_bytes: int = 256 * 2**20) -> bool:
    """Ask glibc's malloc to keep up to `limit_bytes` of freed memory in the process instead of
    returning it to the system (mallopt M_TRIM_THRESHOLD), and to serve arrays below that size
    from its heap instead of fresh mmap'ed pages (M_MMAP_THRESHOLD). Affects the whole process.
    Returns True when both settings were accepted; False (and changes nothing) off glibc."""
    import ctypes
    import ctypes.util
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    return bool(libc.mallopt(m_trim_threshold, int(limit_bytes))) and \
        bool(libc.mallopt(m_mmap_threshold, min(int(limit_bytes), 32 * 2**20)))  # glibc caps it at 32 MiB

# %%
import resource


def faults_of(step_fn) -> int:
    """Minor page faults of this process during one call of step_fn."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step_fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


# The milestone's size (section 8's small model allocates too little to show it).
big_plain = GPT(65, 128, 4, 4, 64, bias=False, seed=0)
big_fused = fuse(GPT(65, 128, 4, 4, 64, bias=False, seed=0))
big_x, big_y = np.random.default_rng(11).integers(0, 65, (2, 12, 64))
big_steps = {"plain": make_step(big_plain, AdamW(weight_decay_groups(big_plain, 0.1))),
             "fused": make_step(big_fused, FusedAdamW(weight_decay_groups(big_fused, 0.1)))}
xb, yb = big_x, big_y  # make_step's closures read the batch from these names
for name, step_fn in big_steps.items():
    step_fn()  # the first step creates the optimizer's state
    print(f"default allocator, {name} step: {faults_of(step_fn):6d} page faults")
print("glibc keeps freed memory:", keep_freed_memory())
for name, step_fn in big_steps.items():
    step_fn()  # one step to fill the kept heap
    print(f"memory kept,       {name} step: {faults_of(step_fn):6d} page faults")

# %% [markdown]
# Run the timing of section 8 again after this cell to see what the faults cost on your
# machine (the benchmark measures both settings, with PyTorch in the same process).

# %% [markdown]
# ## 10. Two cores: half of the batch each
#
# Everything so far ran on one core. Give NumPy two (`OMP_NUM_THREADS=2` before it starts) and
# it splits each **BLAS product** over both, but nothing else: GELU, LayerNorm, the softmax,
# the optimizer and the Python between them still run on one core. PyTorch also splits its
# elementwise kernels over its threads, so on two threads it pulls ahead of us even where we
# are level on one (`tito bench acceleration --threads 2` measures both on your machine).
#
# The first idea, cutting each elementwise op in two and handing one half to a second thread,
# gains little: every op pays for waking the thread and waiting for it, and the two threads
# take turns with Python's lock (the GIL) between NumPy calls. (NumPy releases the GIL *inside*
# its array loops: two threads can each be in a NumPy loop at once, but only one can run
# Python.) The larger and fewer the pieces of work a thread is handed, the less those costs
# weigh, and the largest independent piece of a training step is a part of its batch.
#
# So split the **batch**. The loss is a mean over the batch's rows, so its gradient is the
# mean of the rows' gradients: with the 12 rows cut into parts of 6 and 6, the batch's gradient
# is ½·(gradient of part 1's loss) + ½·(gradient of part 2's loss), each part's loss being the
# mean over its own rows. Each part is a whole forward and backward pass, about half of the
# step's work, and the parts share nothing but the weights, which nobody writes until the
# optimizer runs. So each part runs in its own thread on its own **replica** of the model:
# a copy of the module tree whose parameter tensors hold the *same* arrays as the model's but
# have their own `.grad`. At the end the replicas' gradients are added to the model's. Each
# part's seed gradient is its share of the rows (`loss.backward(6/12)`), so the sum is already
# the mean. While the parts run, the BLAS threads are shared out among them (threadpoolctl):
# on two cores each part's products get one thread, so the parts do not fight over the cores.
#
# This is **data parallelism**, the way large models train on many GPUs: PyTorch's
# `DistributedDataParallel` keeps one replica per device and adds the gradients over the
# network instead of in memory. `ThreadedDataParallel` (given) is the same on the cores of one
# machine. The gradients equal the whole batch's up to rounding (the sums over rows are added
# in a different order), so training follows the same path.

# %%
#| export
import functools
import os
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

from tinytorch.core.autograd import no_grad
from tinytorch.core.tensor import OP_LISTENERS

_WORKERS: list = []  # [(ThreadPoolExecutor, its number of threads)], made on first use, grown when asked for more
# A forked child has none of the parent's threads: it must make its own pool.
os.register_at_fork(after_in_child=_WORKERS.clear)


@functools.lru_cache(maxsize=None)
def _blas_controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS libraries, looked up once."""
    return ThreadpoolController()


def blas_threads() -> int:
    """How many threads NumPy's BLAS may use now (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS when NumPy
    started, or threadpoolctl's limits since); 1 when no BLAS library is found."""
    return max([1] + [lib.get_num_threads() for lib in _blas_controller().select(user_api="blas").lib_controllers])


def _workers(count: int) -> ThreadPoolExecutor:
    """A pool with at least `count` worker threads, kept for the next call."""
    if not _WORKERS or _WORKERS[0][1] < count:
        if _WORKERS:
            _WORKERS.pop()[0].shutdown(wait=False)
        _WORKERS.append((ThreadPoolExecutor(count, thread_name_prefix="tinytorch-data-parallel"), count))
    return _WORKERS[0][0]


class ThreadedDataParallel:
    """Forward and backward of `model` on several cores at once, the batch cut into parts by rows.

    model   -- a Module whose forward(ids, targets=targets) returns (output, loss) with `loss` the
               mean over the batch's rows of a per-row loss (module 13's GPT: cross-entropy over
               (B, T) positions, T per row)
    threads -- how many parts and threads; default blas_threads() (OMP_NUM_THREADS=2: two). On a
               GPU (CuPy parameters) always 1: its kernels already use the whole device.
    The model itself runs part 1 in the caller's thread; each other part runs in a worker thread
    on a replica: copy.deepcopy(model) whose parameters are new tensors holding the model's own
    arrays (re-read before every call, so optimizers that replace `.data` are followed) and
    whose buffers are the model's. Replicas copy the module tree once: build a new
    ThreadedDataParallel after changing the model's modules. Dropout in a replica draws from a
    copy of the model's generator, as each process of PyTorch's DDP draws from the same seed.
    While the parts run, BLAS may use blas_threads() // parts threads (at least 1), so that the
    parts do not take each other's cores. Under a profiler (module 14) the parts run one after
    another in the caller's thread.
    """

    def __init__(self, model: Module, threads: int | None = None):
        if not isinstance(model, Module):
            raise TypeError(f"ThreadedDataParallel needs a Module (e.g. module 13's GPT), got {type(model).__name__}.")
        threads = blas_threads() if threads is None else threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"ThreadedDataParallel: threads must be a whole number >= 1, got {threads!r}.")
        self.model = model
        self.params = model.parameters()
        on_gpu = any(array_module(p.data) is not np for p in self.params)
        self.threads = 1 if on_gpu else threads
        self.replicas = []
        for _ in range(self.threads - 1):
            memo = {id(p): Tensor(p.data, requires_grad=p.requires_grad) for p in self.params}
            memo.update({id(b): b for b in model.buffers()})
            self.replicas.append(copy.deepcopy(model, memo))
        self._replica_params = [replica.parameters() for replica in self.replicas]

    def forward_backward(self, ids: Any, targets: Any) -> Tensor:
        """The batch's loss (a Tensor without a graph), with its gradient added to the model's
        parameters' .grad, as `model(ids, targets=targets)[1].backward()` does.

        ids, targets -- (B, ...) arrays or Tensors; the parts are rows [B·k/n, B·(k+1)/n) for
        k < n = min(threads, B). An error in any part is raised after every part has finished;
        the gradients are then incomplete (zero them before the next step).
        """
        return self._run_parts(ids, targets, backward=True)

    def loss(self, ids: Any, targets: Any) -> Tensor:
        """The batch's loss only, under no_grad (no graph, no gradient), its parts on threads as
        in forward_backward: for evaluating a model (put it in eval mode first)."""
        with no_grad():
            return self._run_parts(ids, targets, backward=False)

    def _run_parts(self, ids: Any, targets: Any, backward: bool) -> Tensor:
        ids, targets = as_tensor(ids), as_tensor(targets)
        rows = ids.shape[0] if ids.ndim else 0
        if rows < 1 or targets.ndim == 0 or targets.shape[0] != rows:
            raise ValueError(f"ThreadedDataParallel: ids and targets need the same number of rows (axis 0), at least 1; "
                             f"got shapes {ids.shape} and {targets.shape}.")
        parts = min(self.threads, rows)
        if parts == 1:
            _, loss = self.model(ids, targets=targets)
            if backward:
                loss.backward()
            return Tensor(loss.data.copy())
        edges = [rows * k // parts for k in range(parts + 1)]
        runners = [self.model] + self.replicas[:parts - 1]
        for replica, replica_params in zip(runners[1:], self._replica_params):
            replica.train(self.model.training)
            for mine, theirs in zip(replica_params, self.params):
                mine.data, mine.grad = theirs.data, None

        def run_part(k: int) -> Any:
            start, stop = edges[k], edges[k + 1]
            _, loss = runners[k](ids[start:stop], targets=targets[start:stop])
            share = (stop - start) / rows
            if backward:
                loss.backward(np.full(loss.shape, share))
            return loss.data * share

        if OP_LISTENERS:  # a profiler is listening: it expects one thread
            losses = [run_part(k) for k in range(parts)]
        else:
            # The cores are shared out: with 2 BLAS threads and 2 parts, each part's products get one.
            with _blas_controller().limit(limits=max(1, blas_threads() // parts), user_api="blas"):
                futures = [_workers(parts - 1).submit(run_part, k) for k in range(1, parts)]
                try:
                    first = run_part(0)
                finally:
                    errors = [f.exception() for f in futures]  # waits for every part
            for error in errors:
                if error is not None:
                    raise error
            losses = [first] + [f.result() for f in futures]
        for replica_params in self._replica_params[:parts - 1]:
            for mine, theirs in zip(self.params, replica_params):
                if theirs.grad is not None:
                    mine.grad = theirs.grad if mine.grad is None else Tensor(mine.grad.data + theirs.grad.data)
                    theirs.grad = None
        return Tensor(sum(losses[1:], losses[0]))

# %%
def test_unit_threaded_data_parallel():
    ids, targets = np.random.default_rng(12).integers(0, 17, (2, 5, 8))
    model = GPT(17, 16, 2, 2, 8, seed=4, dtype=np.float64)
    _, whole_loss = model(ids, targets=targets)
    whole_loss.backward()
    expected = [p.grad.data.copy() for p in model.parameters()]
    model.zero_grad()
    for threads in (2, 3):  # 5 rows: parts of 2 + 3, then 1 + 2 + 2
        loss = ThreadedDataParallel(model, threads).forward_backward(ids, targets)
        assert loss._node is None and abs(loss.item() - whole_loss.item()) < 1e-12, \
            f"{threads} threads: loss {loss.item()} is not the whole batch's {whole_loss.item()}"
        for (name, p), want in zip(model.named_parameters(), expected):
            assert np.allclose(p.grad.data, want, rtol=1e-10, atol=1e-12), \
                f"{threads} threads: the gradient of {name} is not the whole batch's"
        model.zero_grad()
    print("✓ ThreadedDataParallel: the whole batch's loss and gradients, from 2 and 3 parts")


test_unit_threaded_data_parallel()

# %% [markdown]
# ### Predict, then run: one core or two?
#
# The milestone's fused model and batch: one forward and backward on one core, against two
# parts on two threads. Before running: if half of the work is in BLAS products that were
# already on one thread here, and the parts are independent, what is the best ratio you could
# see? What in the step still runs one part at a time?

# %%
cores_model = fuse(GPT(65, 128, 4, 4, 64, bias=False, seed=0))
on_one, on_two = ThreadedDataParallel(cores_model, threads=1), ThreadedDataParallel(cores_model, threads=2)
one_samples, two_samples = [], []
for _ in range(8):  # interleaved: the same load on both
    for runner, samples in ((on_one, one_samples), (on_two, two_samples)):
        cores_model.zero_grad()
        samples.append(measure_latency(lambda: runner.forward_backward(big_x, big_y), warmup=0, repeats=1).median_s)
one_ms, two_ms = np.median(one_samples) * 1e3, np.median(two_samples) * 1e3
print(f"this machine has {os.cpu_count()} cores; forward + backward on 1 thread {one_ms:.1f} ms, "
      f"in 2 parts on 2 threads {two_ms:.1f} ms: {one_ms / two_ms:.2f}× faster")

# %% [markdown]
# ## Summary
#
# * Measure first: module 14's profile names the ops; the matrix products are BLAS in both
#   libraries, so the gains are in what surrounds them.
# * A reduction over a short last axis is slow in NumPy; as a product with `[1/D]*D` it is one
#   BLAS call. `blas_layer_norm` is module 13's LayerNorm done that way.
# * A fused op records once and saves what its backward needs: `bias_gelu` saves `u` and
#   `tanh(·)`, so its backward computes no `tanh`. It is checked three ways: central
#   differences, the composed version, and (in the tests) PyTorch.
# * `fuse(model)` is a deep copy of the module tree that shares the weight tensors; module
#   13's classes are unchanged.
# * `FusedAdamW` keeps every parameter as a view into one flat buffer and updates each group
#   with a handful of array calls: bit-for-bit `AdamW`, because every element sees the same
#   operations in the same order.
# * The C library's allocator is part of the step: memory returned to the system at the end
#   of one step is faulted back in by the next. Count faults before blaming arithmetic.
# * Python loops cost per iteration, whatever the work: a convolution looped over positions,
#   or a product of small tiles, is bound by calls, far below the roofline. Hand each call
#   enough work.
# * NumPy puts only its BLAS products on a second core. Cutting the batch into parts, each
#   with its own forward and backward on its own thread, puts everything there: the gradient
#   of a mean is the share-weighted sum of the parts' gradients. The Python between NumPy
#   calls still runs one thread at a time.
#
# ## Exercises
#
# 1. **LayerNorm's passes.** Count the passes over the (N, D) array that `blas_layer_norm` and
#    its backward make. Which of them could a compiled kernel merge, and how much of section 5's
#    time would that leave?
# 2. **Fuse the residual add.** Write `bias_gelu`'s sibling `bias_dropout_add(x, bias,
#    residual, p)` as one op with its rule; check it with `gradcheck`. Does it help at E = 128?
# 3. **One flat gradient.** `FusedAdamW` copies every gradient into `grad_flat`. How long does
#    that copy take compared with the update? What would the engine have to do to write the
#    gradients straight into the flat buffer?
# 4. **Tiles in C.** On the roofline of section 7, at what tile size does a tile's intensity
#    reach this machine's ridge point (peak FLOP/s ÷ peak bytes/s)?
#
# ## Questions (answer them by running your code)
#
# 1. In section 2, how much of `gelu`'s backward time does the saved `tanh` remove? Does the
#    forward get slower or faster?
# 2. What fraction of the small GPT's step is the optimizer? How much of it does
#    `FusedAdamW` remove?
# 3. Change `_group_update` to compute `denom = xp.sqrt(v / (1 - β2^t)) + eps`, which is the
#    same formula. Do the weights still match `AdamW` bit for bit? Why not?
# 4. For which tile size is `blocked_matmul` closest to BLAS on your machine, and why is even
#    that one slower?
# 5. In section 10, how much faster are two parts on two threads than the whole batch on one?
#    Profile one part (module 14): how much of its time is Python between NumPy calls, which
#    the two threads cannot run at once? Does that explain the gap to 2×?
