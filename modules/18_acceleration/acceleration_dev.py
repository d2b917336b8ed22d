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
# makes the step faster with the tools that every fast framework uses:
#
# * **fusion** — several elementwise steps as one recorded op that keeps exactly what its
#   backward needs (GELU's backward recomputes a `tanh` its forward already had);
# * **compiled kernels** — the fused formula as one loop compiled by Numba: one pass over
#   memory instead of one per NumPy call;
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
# * write compiled kernels with Numba (LayerNorm, bias + GELU, softmax with cross-entropy, the
#   causal softmax, AdamW), forward and backward, and say where fastmath is safe and where not;
# * write the flat-buffer update of `FusedAdamW` and show it is bit-for-bit `AdamW`;
# * predict from arithmetic intensity when a blocked product or a loop is slow, and check
#   it on your machine;
# * say why a batch's gradient can be computed in parts on several threads, and measure what
#   the second core buys.
#
# **Time:** about four hours — sections 1–5 (profile, fused GELU, `fuse`, LayerNorm) in a first sitting,
# 6 (compiled kernels) in a second, 7–11 (the flat optimizer, vectorisation, the whole step, the
# allocator, two cores) in a third.
#
# | section | you write | what it does |
# |---|---|---|
# | 2 | `bias_gelu`, `bias_gelu_backward` | bias + GELU as one op that saves its `tanh` |
# | 3 | `FusedMLP.forward`, `fuse` | the GPT with fused MLPs, same weight tensors |
# | 6 | `layer_norm_rows`, `layer_norm_rows_backward` | LayerNorm as two compiled loops over rows |
# | 6 | `bias_gelu_rows`, `bias_gelu_rows_backward` | bias + GELU in one compiled pass each way |
# | 6 | `softmax_cross_entropy_rows` and its backward | the loss from the logits, max subtracted |
# | 6 | `causal_softmax_rows` and its backward | attention's masked softmax, in place |
# | 6 | `layer_norm_backward_parallel` | the backward on threads, one accumulator per part |
# | 7 | `FusedAdamW._group_update`, `adamw_kernel` | one group's AdamW update: NumPy, then compiled |
# | 8 | `blocked_matmul` | a matrix product tile by tile, honouring the tile size |
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
# timed separately in section 7.
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
# what an elementwise op's time is. But never in place on an array you did not make: without a
# bias, `u` is x's own array, so start `t` from a new one (`t = u * u`), and the backward never
# writes into `grad` or the saved arrays. In float16, `u³` overflows once |u| is above about 40:
# compute `t` under `np.errstate(over="ignore")`, since tanh(±inf) = ±1 is the right answer there.

# %%
#| export
GELU_C = SQRT_2_OVER_PI  # c in tanh(c·(u + GELU_COEFF·u³)): √(2/π), module 02's constant; GELU_COEFF = 0.044715


def bias_gelu(x: Any, bias: Any = None) -> Tensor:
    """GELU (tanh form) of x + bias, as ONE recorded op that saves what its backward needs.

    x    -- a floating Tensor (..., N) (or array/list); bias -- a Tensor of shape (N,) or None.
    Returns 0.5·u·(1 + t), u = x + bias (u = x without a bias), t = tanh(c·(u + 0.044715·u³)),
    c = GELU_C = √(2/π): equal to gelu(x + bias) of modules 02/05, in x's shape and the dtype of
    x + bias (x's dtype when the bias has it, or without a bias).
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


def gelu_value_slip(out: np.ndarray, x: np.ndarray, u: np.ndarray) -> str:
    """Why bias_gelu's value `out` is not 0.5·u·(1 + t), told from what it computed (x the input, u = x + bias)."""
    t = np.tanh(GELU_C * (u + GELU_COEFF * u ** 3))
    right = 0.5 * u * (1 + t)
    mistakes = {
        "the factor 0.5 is missing (u·(1 + t) instead of 0.5·u·(1 + t))": u * (1 + t),
        "the output multiplies x, not u = x + bias: 0.5·u·(1 + t)": 0.5 * x * (1 + t),
        "the tanh is missing the factor c = √(2/π)": 0.5 * u * (1 + np.tanh(u + GELU_COEFF * u ** 3)),
    }
    named = [name for name, wrong in mistakes.items() if np.allclose(out, wrong, rtol=1e-10, atol=1e-12)]
    return (f"value differs from gelu(x + bias) by up to {np.abs(out - right).max():.2e}: "
            + (named[0] if named else "0.5·u·(1 + t), with u = x + bias"))


def gelu_tanh_slip(saved: np.ndarray, u: np.ndarray) -> str:
    """Why the saved `tanh` is not t = tanh(c·(u + 0.044715·u³)), told from what was saved."""
    t = np.tanh(GELU_C * (u + GELU_COEFF * u ** 3))
    mistakes = {
        "you saved 1 + t: save t itself, before 1 + t": 1 + t,
        "the factor u of u + 0.044715·u³ is missing (tanh(c·(1 + 0.044715·u²)) was saved)":
            np.tanh(GELU_C * (1 + GELU_COEFF * u ** 2)),
        "the factor c = √(2/π) is missing (tanh(u + 0.044715·u³) was saved)": np.tanh(u + GELU_COEFF * u ** 3),
    }
    named = [name for name, wrong in mistakes.items() if np.allclose(saved, wrong, rtol=1e-10, atol=1e-12)]
    return ("saved tanh must be tanh(c·(u + 0.044715·u³)) of u = x + bias: "
            + (named[0] if named else "the t of the forward, before 1 + t"))


def check_gelu_slope(slope: np.ndarray, u: np.ndarray, t: np.ndarray, grad: np.ndarray) -> None:
    """AssertionError naming the classic mistake when `slope` (the rule's gradient for x) is not
    grad · GELU's derivative at u."""
    inner = GELU_C * (1 + 3 * GELU_COEFF * u * u)
    right = 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * inner
    if np.allclose(slope, grad * right, rtol=1e-8, atol=1e-10):
        return
    mistakes = {
        "the slope is not multiplied by grad (return grad·slope, the chain rule)": right / grad,
        "(1 − t²) written as (1 − t): d tanh(z)/dz = 1 − tanh(z)²": 0.5 * (1 + t) + 0.5 * u * (1 - t) * inner,
        "(1 − t²) written as (1 + t²): d tanh(z)/dz = 1 − tanh(z)²": 0.5 * (1 + t) + 0.5 * u * (1 + t * t) * inner,
        "the 3 of d(u³)/du = 3u² is missing: (1 + 3·0.044715·u²)":
            0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * (1 + GELU_COEFF * u * u),
        "the factor c = √(2/π) of the inner derivative c·(1 + 3·0.044715·u²) is missing":
            0.5 * (1 + t) + 0.5 * u * (1 - t * t) * (1 + 3 * GELU_COEFF * u * u),
        "the factor u of the second term 0.5·u·(1 − t²)·c·(…) is missing": 0.5 * (1 + t) + 0.5 * (1 - t * t) * inner,
        "the factor 0.5 is missing": 2 * right,
        "the term 0.5·(1 + t) is missing (the product rule has two terms)": right - 0.5 * (1 + t),
    }
    ratio = slope / grad
    named = [name for name, wrong in mistakes.items() if np.allclose(ratio, wrong, rtol=1e-8, atol=1e-10)]
    raise AssertionError("bias_gelu_backward: the slope is not GELU's derivative (max |diff| "
                         f"{np.abs(ratio - right).max():.2e}): " + (named[0] if named else
                         "0.5·(1 + t) + 0.5·u·(1 − t²)·c·(1 + 3·0.044715·u²), times grad"))


def test_unit_bias_gelu():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)) * 2
    b = rng.standard_normal(7)
    x_in = Tensor(x.copy(), requires_grad=True)
    out = bias_gelu(x_in, Tensor(b, requires_grad=True))
    assert np.array_equal(x_in.data, x), (
        "bias_gelu changed its input x in place (did u = x.data; u += bias add the bias into x's own array?): "
        "make u a new array, x.data + bias.data")
    node = out._node
    assert node is not None and node.op == "bias_gelu", \
        f"record ONE op named 'bias_gelu', got {None if node is None else node.op!r}"
    assert len(node.inputs) == 2, f"inputs (x, bias) when a bias is given, got {len(node.inputs)} input(s)"
    assert set(node.saved) >= {"u", "tanh"}, f"save u and tanh, got {sorted(node.saved)}"
    expected_u = x + b
    assert np.allclose(node.saved["u"], expected_u), \
        "saved u must be x + bias (the pre-activation), got something else: did you save x, or forget the bias?"
    expected_t = np.tanh(GELU_C * (expected_u + GELU_COEFF * expected_u ** 3))
    assert np.allclose(node.saved["tanh"], expected_t), gelu_tanh_slip(node.saved["tanh"], expected_u)
    composed = gelu(Tensor(expected_u)).numpy()
    assert np.allclose(out.numpy(), composed, rtol=1e-12, atol=1e-12), gelu_value_slip(out.numpy(), x, expected_u)
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
    check_gelu_slope(grads[0], expected_u, expected_t, grad)
    bias_shape = np.shape(grads[1])
    assert bias_shape in (x.shape, b.shape), (
        f"the bias's gradient has shape {bias_shape}, neither x's {x.shape} nor the bias's {b.shape}"
        + (": it was summed over the last axis (the features); a bias gets the sum over the ROWS, which the "
           "engine does for you: return grad·slope itself" if bias_shape == x.shape[:-1] else
           ": return grad·slope itself (the engine sums it over the rows)"))
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
# by what, is a table handed to `fuse`: here `{MLP: FusedMLP}`. The course's tables are built once
# each, complete where they are defined: `FUSED_REPLACEMENTS` (the NumPy fusions, section 5) and
# `COMPILED_REPLACEMENTS` (the Numba kernels, section 6). `fuse(model)` without a table takes the
# compiled one when Numba is installed, else the NumPy one (`fused_replacements()`, section 6).

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


def fuse(model: Module, replacements: dict | None = None) -> Module:
    """A new model with the fused ops in place: every sub-module whose type is exactly a key of
    `replacements` (e.g. module 13's MLP) becomes replacements[type](module), e.g. FusedMLP(mlp).
    Exact types: a subclass of MLP may compute something else. `model` itself is not changed.

    replacements -- {module 13's class: the class built from it}; None (given line): the best
                    table this machine has, fused_replacements() of section 6 (the compiled
                    kernels when Numba imports, else the NumPy fusions FUSED_REPLACEMENTS)
    The new model is copy.deepcopy(model, memo) with memo = {id(t): t for every parameter and
    buffer t of model} (model.parameters() and model.buffers()): the module tree is new, the weight tensors are the SAME objects (an
    update through either model changes both). Walk model.named_modules()[1:] of the copy and
    replace each with fused.set_submodule(name, replacement) (module 03; fused is the copy). Then,
    when the model's own type is a key (a lone MLP, or a GPT whose loss has a compiled replacement),
    return its replacement built from the copy (with its sub-modules already replaced); else the
    copy. TypeError (given) for anything but a Module.
    """
    if not isinstance(model, Module):
        raise TypeError(f"fuse needs a Module (e.g. module 13's GPT), got {type(model).__name__}.")
    replacements = fused_replacements() if replacements is None else replacements  # given
    ### BEGIN SOLUTION
    shared = {id(t): t for t in model.parameters()}
    shared.update({id(t): t for _, t in model.named_buffers()})
    fused = copy.deepcopy(model, shared)
    for name, module in fused.named_modules()[1:]:
        if type(module) in replacements:
            fused.set_submodule(name, replacements[type(module)](module))
    if type(fused) in replacements:
        return replacements[type(fused)](fused)
    return fused
    ### END SOLUTION

# %%
from tinytorch.core.autograd import topological_order


def recorded_ops(tensor: Tensor) -> set:
    """The names of the ops in the graph behind `tensor`."""
    return {t._node.op for t in topological_order(tensor) if t._node is not None}


def fused_mlp_slip(got: np.ndarray, mlp: MLP, x: np.ndarray) -> str:
    """Why FusedMLP(mlp)(x) gave `got` instead of mlp(x), told from what it computed (mlp with dropout off)."""
    rows = Tensor(x.reshape(-1, x.shape[-1]))
    product = rows @ mlp.fc.weight
    proj = lambda h: mlp.proj(h).numpy().reshape(x.shape)  # noqa: E731
    mistakes = {
        "fc's bias is added twice: self.fc(rows) already adds it, so hand bias_gelu the product rows @ fc.weight":
            proj(gelu(product + 2 * mlp.fc.bias)),
        "fc's bias is missing: hand it to bias_gelu (bias_gelu(rows @ fc.weight, fc.bias))": proj(gelu(product)),
        "GELU is missing: proj(bias_gelu(...)), not proj of fc's output": proj(product + mlp.fc.bias),
    }
    named = [name for name, wrong in mistakes.items() if np.allclose(got, wrong, rtol=1e-10, atol=1e-12)]
    return "FusedMLP differs from the MLP it replaces: " + (
        named[0] if named else "dropout(proj(bias_gelu(rows @ fc.weight, fc.bias)))")


def test_unit_fused_mlp():
    x = np.random.default_rng(2).standard_normal((3, 5, 16))
    mlp = MLP(16, 64, dropout=0.5, seed=1, dtype=np.float64)
    mlp.fc.bias.data = np.linspace(-1.0, 1.0, 64)  # biases start at 0: make them count
    plain, twin = copy.deepcopy(mlp), copy.deepcopy(mlp)  # the same weights, generators in the same state
    fused = FusedMLP(twin)
    try:
        got = fused(Tensor(x)).numpy()
    except Exception as err:  # NumPy's or the Tensor's own message names shapes or attributes, not the slip
        raise AssertionError(
            f"FusedMLP.forward on x of shape {x.shape} raised {type(err).__name__}: {str(err).rstrip('.')}. rows is (15, 16) and "
            f"fc.weight ({tuple(mlp.fc.weight.shape)}) is stored as (in_features, out_features): rows @ fc.weight "
            "needs no transpose; then bias_gelu(product, fc.bias), proj, dropout") from None
    want = plain(Tensor(x)).numpy()
    if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
        mlp.eval()  # dropout off: what the MLP computes before dropout
        no_dropout = mlp(Tensor(x)).numpy()
        assert not np.allclose(got, no_dropout, rtol=1e-12, atol=1e-12), (
            "FusedMLP leaves out the dropout (in training mode, dropout 0.5, its output equals the MLP's without "
            "dropout): dropout(proj(bias_gelu(...))), with the MLP's own self.dropout")
        twin.eval()
        raise AssertionError(fused_mlp_slip(FusedMLP(twin)(Tensor(x)).numpy(), mlp, x))
    print("✓ FusedMLP: the MLP's value, dropout included")


test_unit_fused_mlp()


def test_unit_fuse():
    model = GPT(17, 16, 2, 2, 8, seed=3, dtype=np.float64)
    for block in model.blocks:  # biases start at 0: make them count, so a forgotten bias shows
        block.mlp.fc.bias.data = np.linspace(-1.0, 1.0, block.mlp.fc.bias.size)
    before = {name: p.data.copy() for name, p in model.named_parameters()}
    fused = fuse(model, {MLP: FusedMLP})
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
# names). With it the NumPy table is complete, `FUSED_REPLACEMENTS = {MLP: FusedMLP, LayerNorm:
# BlasLayerNorm}`: `fuse(model, FUSED_REPLACEMENTS)` puts it in place of every `LayerNorm`. All
# of this is given code: read it, then run the checks.

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



# Module 13's classes and what `fuse` puts in their place with NumPy only, each built from the
# module it replaces (FusedMLP(mlp)). Complete here: no later cell changes it.
FUSED_REPLACEMENTS: dict[type, type] = {MLP: FusedMLP, LayerNorm: BlasLayerNorm}

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
    fused_ops = recorded_ops(fuse(block, FUSED_REPLACEMENTS)(np.zeros((1, 8), int), targets=np.zeros((1, 8), int))[1])
    assert "blas_layer_norm" in fused_ops and "layer_norm" not in fused_ops, \
        f"fuse(model, FUSED_REPLACEMENTS) must replace every LayerNorm; the fused graph's ops: {sorted(fused_ops)}"
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
# ## 6. Compiled kernels with Numba
#
# Every NumPy call is one pass over memory, plus a few microseconds of Python and dispatch.
# `blas_layer_norm` makes about eight passes over its (N, D) array forward and backward;
# `bias_gelu` makes seven forward (`t = u*u`, `t *= …`, `tanh`, …), each reading and writing
# 1.5 MB at the milestone's shape. The arithmetic is cheap; the passes are what costs. A
# **compiled loop** reads each element once, does the whole formula in registers and writes
# the result once: one pass. C, CUDA and Triton kernels are written this way; in Python,
# **Numba** compiles a function of loops over NumPy arrays to machine code (through LLVM, the
# compiler behind clang).
#
# `@numba.njit` compiles the function the first time it is called with new argument types
# (float32 and float64 arrays are two compilations; the cell below prints what one costs).
# `cache=True` writes the machine code to disk beside the source, so the next process loads it
# instead of compiling. `kernel()` below (given) is `numba.njit(cache=True)`, with two fallbacks: where
# the cache cannot be written (a read-only install, or a notebook cell, which has no file) it
# compiles in every process instead, and where Numba is not installed it returns the plain
# Python function: the kernels still run, as slow Python loops, so every check of this
# lesson works without Numba (only the timings lose).
#
# Three rules for a kernel:
# * it loops over indices and reads and writes array elements, nothing else: no Tensors, no
#   `record_op` (the op around it records, as `bias_gelu` does);
# * its outputs are arrays it is given (`out`, `rstd`, …), made by the caller with `np.empty`;
# * it is **one thread** (Numba's default): `prange` and threads are an exercise at the end.
#
# **fastmath.** `fastmath=True` lets LLVM reorder additions (so it can add 8 floats at a time
# with SIMD), fuse a multiply and an add, and *assume no NaN and no ±inf*. The reordering only
# changes rounding: `SAFE_FASTMATH` below allows exactly that, for the sums of LayerNorm and
# the polynomial of GELU. The "no inf" assumption is never safe in a softmax: a masked or very
# negative logit is `-inf`, `exp(-inf − max)` must be exactly 0, and the max search compares
# with it. Told that infinities do not exist, the compiler is free to drop or fold those
# comparisons; whether it does depends on the compiler version and the CPU, so a test that
# passes today proves nothing about tomorrow. The softmax kernels here use no fastmath at all,
# and neither does the AdamW kernel (section 7), which must round exactly as NumPy does. Their
# tests therefore read the flags a softmax kernel was compiled with (`unsafe_fastmath`, given
# below), not only its outputs.

# %%
#| export
import warnings

from tinytorch.core.attention import sdpa_flops
from tinytorch.core.autograd import register_flops
from tinytorch.core.losses import cross_entropy
from tinytorch.models.transformer import GPT, CausalSelfAttention

try:
    import numba
except ImportError:  # the course runs without it: fuse() then picks the NumPy fusions and says so
    numba = None

NUMBA_AVAILABLE = numba is not None
prange = range if numba is None else numba.prange  # a parallel loop under numba.njit(parallel=True)
# fastmath flags that change rounding only (reorder sums, fuse multiply-add, x/y as x·(1/y),
# ignore the sign of zero); never "nnan"/"ninf", which let the compiler assume no NaN or inf.
SAFE_FASTMATH = frozenset({"reassoc", "contract", "arcp", "nsz"})


def kernel(fastmath: Any = False, parallel: bool = False):
    """Decorator: numba.njit(cache=True, fastmath=fastmath, parallel=parallel, error_model="numpy",
    nogil=True) of the function: a division by zero gives inf or NaN as in NumPy, instead of
    Python's ZeroDivisionError (whose check in every division also keeps loops from vectorising),
    and the kernel lets go of Python's lock while it runs, as NumPy's loops do, so that section
    11's threads can run kernels at the same time.

    Where the cache cannot be written (Numba finds no writable folder: a read-only install and
    no writable NUMBA_CACHE_DIR or home, or a function defined in a notebook cell) it compiles
    without cache, once per process. Without Numba it returns the function itself (plain Python,
    the same results, slowly).
    """
    def compile_kernel(fn):
        if numba is None:
            return fn
        flags = set(fastmath) if isinstance(fastmath, frozenset) else fastmath  # numba takes a bool or a set
        options = dict(fastmath=flags, parallel=parallel, error_model="numpy", nogil=True)
        try:
            return numba.njit(cache=True, **options)(fn)
        except RuntimeError:  # "cannot cache function …: no locator available"
            return numba.njit(cache=False, **options)(fn)
    return compile_kernel


UNSAFE_FASTMATH = frozenset({"fast", "nnan", "ninf"})  # "fast" (fastmath=True) includes the other two


def unsafe_fastmath(fn: Any) -> set:
    """The fastmath flags of a compiled kernel that let the compiler assume no NaN and no inf (an empty
    set for a safe kernel, or a plain Python function when Numba is missing). A test cannot see what
    such a build drops, only that it was asked for: this reads the options the kernel was compiled with."""
    options = getattr(fn, "targetoptions", None)
    if numba is None or options is None:
        return set()
    from numba.core.cpu import FastMathOptions  # how Numba itself reads True / False / a set of flags
    return set(FastMathOptions(options.get("fastmath", False)).flags) & UNSAFE_FASTMATH


def check_no_unsafe_fastmath(*kernels: Any) -> None:
    """AssertionError naming a softmax kernel compiled with fastmath that assumes no inf (see the text)."""
    for fn in kernels:
        flags = unsafe_fastmath(fn)
        assert not flags, (
            f"{getattr(fn, '__name__', fn)} is compiled with fastmath {sorted(flags)}: fastmath on a softmax tells "
            "the compiler that inf never occurs, but a ruled-out or masked logit is -inf and exp(-inf − m) must be "
            "exactly 0: use @kernel() (or SAFE_FASTMATH, which changes rounding only)")


def compilable(*arrays: Any) -> bool:
    """True when every array is a NumPy float32 or float64 array: what the kernels here take.
    (float16, integers and CuPy arrays go to the NumPy versions.)"""
    return all(isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64) for a in arrays)

# %% [markdown]
# ### A worked example: `x·a + b` in one pass
#
# NumPy computes `x * a + b` in two passes (the product into a temporary, then the sum) and
# allocates the temporary. The kernel below reads `x` once and writes `out` once. Run it: the
# first call includes the compilation (or the load from the cache), so it is timed apart.

# %%
@kernel()
def scale_shift(x, a, b, out):
    """out[i] = x[i]·a + b for 1-D arrays x and out."""
    for i in range(x.shape[0]):
        out[i] = x[i] * a + b


import time

# Without Numba the kernel is a Python loop: a smaller array keeps the cell short.
demo_x = np.random.default_rng(20).standard_normal(2_000_000 if numba else 20_000).astype(np.float32)
demo_out = np.empty_like(demo_x)
started = time.perf_counter()
scale_shift(demo_x[:4], np.float32(2), np.float32(1), demo_out[:4])  # compiles for float32 arrays
print(f"first call (compile or load from the cache): {(time.perf_counter() - started) * 1e3:.0f} ms")
scale_shift(demo_x, np.float32(2), np.float32(1), demo_out)
assert np.allclose(demo_out, demo_x * 2 + 1), "the kernel must compute x·a + b"
numpy_time = measure_latency(lambda: demo_x * np.float32(2) + np.float32(1), warmup=2, repeats=20)
kernel_time = measure_latency(scale_shift, demo_x, np.float32(2), np.float32(1), demo_out, warmup=2, repeats=20)
moved = 2 * demo_x.nbytes  # the kernel's bytes: read x, write out
print(f"NumPy x * a + b (two passes, a temporary): {numpy_time}")
print(f"compiled kernel (one pass):               {kernel_time}  "
      f"{moved / kernel_time.median_s / 1e9:.1f} GB/s")
print("Numba installed:", NUMBA_AVAILABLE)

# %% [markdown]
# The kernel moves 8 bytes per element; NumPy's two passes move about 16 and allocate 8 MB.
# Without Numba the "kernel" line is a Python loop, hundreds of times slower: the lesson's
# checks still pass, and `fuse` uses the NumPy fusions.
#
# ### LayerNorm, forward and backward, one row at a time
#
# On the rows (N, D) of `x`, row i has `mean_i = Σ_j x_ij / D`, `var_i = Σ_j (x_ij − mean_i)² / D`,
# `rstd_i = 1/√(var_i + eps)`, `x̂_ij = (x_ij − mean_i)·rstd_i` and `out_ij = x̂_ij·w_j + b_j`. The
# forward saves `mean` and `rstd` (N numbers each, float64), not x̂: the backward recomputes x̂
# from x, which it reads anyway. Accumulate the sums in float64 (`total = 0.0` is a float64 in
# Numba): a float32 square overflows above 1.8·10¹⁹, and long float32 sums lose digits.
#
# The backward on row i, with ĝ_j = grad_ij·w_j:
#
# `dx_ij = rstd_i·(ĝ_j − mean_j(ĝ) − x̂_ij·mean_j(ĝ·x̂))`,  `dw_j += grad_ij·x̂_ij`,  `db_j += grad_ij`
#
# Both means are over the row's D features. The two terms inside come from the mean and the
# variance depending on every x of the row; forget either and the gradient is wrong (the test
# names which). The kernel handles rows `start … stop − 1` and *adds* to `dweight` and `dbias`
# (float64, zeros from the caller), so that the `prange` exercise at the end can reuse it.

# %%
#| export
@kernel(fastmath=SAFE_FASTMATH)
def layer_norm_rows(x, weight, bias, eps, out, mean, rstd):
    """LayerNorm of each row of x (N, D): out (N, D) = (x − mean)·rstd·weight + bias.

    weight, bias (D,) (zeros for no bias); eps > 0. Writes out (N, D) in x's dtype, and
    mean (N,), rstd (N,) = 1/sqrt(var + eps) in float64 (var the biased variance, /D).
    Sums in float64. N = 0 does nothing.
    """
    ### BEGIN SOLUTION
    n, d = x.shape
    for i in range(n):
        total = 0.0
        for j in range(d):
            total += x[i, j]
        m = total / d
        squares = 0.0
        for j in range(d):
            c = x[i, j] - m
            squares += c * c
        r = 1.0 / np.sqrt(squares / d + eps)
        mean[i] = m
        rstd[i] = r
        for j in range(d):
            out[i, j] = (x[i, j] - m) * r * weight[j] + bias[j]
    ### END SOLUTION


@kernel(fastmath=SAFE_FASTMATH)
def layer_norm_rows_backward(grad, x, weight, mean, rstd, dx, dweight, dbias, start, stop):
    """LayerNorm's backward for rows start … stop−1 of x (N, D), from the forward's mean, rstd.

    grad, x, dx (N, D); weight (D,); mean, rstd (N,). Writes dx[i] for those rows:
        dx_ij = rstd_i·(ĝ_ij − mean_j(ĝ_i) − x̂_ij·mean_j(ĝ_i·x̂_i)),  ĝ_ij = grad_ij·w_j,
        x̂_ij = (x_ij − mean_i)·rstd_i
    and ADDS grad_ij·x̂_ij to dweight[j] and grad_ij to dbias[j] (float64 (D,) accumulators).
    """
    ### BEGIN SOLUTION
    d = x.shape[1]
    for i in range(start, stop):
        m, r = mean[i], rstd[i]
        sum_g = 0.0
        sum_gx = 0.0
        for j in range(d):
            h = (x[i, j] - m) * r
            g_hat = grad[i, j] * weight[j]
            sum_g += g_hat
            sum_gx += g_hat * h
            dweight[j] += grad[i, j] * h
            dbias[j] += grad[i, j]
        mean_g = sum_g / d
        mean_gx = sum_gx / d
        for j in range(d):
            h = (x[i, j] - m) * r
            dx[i, j] = r * (grad[i, j] * weight[j] - mean_g - h * mean_gx)
    ### END SOLUTION

# %% [markdown]
# The op around the kernels is given: it checks its inputs as `blas_layer_norm` does, views x
# as rows, makes the outputs, calls the kernel and records **one** op, `compiled_layer_norm`,
# whose backward rule (beside it) calls the backward kernel. A float16 or CuPy input goes to
# `blas_layer_norm` instead (Numba compiles for the CPU, and float16 is not one of its types).

# %%
#| export
def compiled_layer_norm(x: Any, weight: Any, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Module 13's layer_norm computed by the kernel layer_norm_rows: the same value, shape and
    dtype. x (..., *S); weight S; bias S or None. Records ONE op "compiled_layer_norm", inputs
    (x, weight) or (x, weight, bias); saved: mean, rstd (N,) float64. float16 (outside module 17's
    autocast) and CuPy arrays: blas_layer_norm (section 5)."""
    x, weight = autocast_float32(as_tensor(x)), as_tensor(weight)
    bias = None if bias is None else as_tensor(bias)
    if not compilable(x.data, weight.data):
        return blas_layer_norm(x, weight, bias, eps)
    check_floating_input("compiled_layer_norm", x)
    normalized_axes(weight.shape, x.shape)
    check_eps("compiled_layer_norm", eps)
    size = math.prod(weight.shape)
    rows = np.ascontiguousarray(x.data.reshape(-1, size))
    w = np.ascontiguousarray(weight.data.reshape(size), dtype=rows.dtype)
    b = np.zeros(size, rows.dtype) if bias is None else np.ascontiguousarray(bias.data.reshape(size), dtype=rows.dtype)
    out = np.empty_like(rows)
    mean, rstd = np.empty(len(rows)), np.empty(len(rows))
    layer_norm_rows(rows, w, b, float(eps), out, mean, rstd)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return record_op("compiled_layer_norm", out.reshape(x.shape), inputs, mean=mean, rstd=rstd)


@register_backward("compiled_layer_norm")
def compiled_layer_norm_backward(grad: Any, node) -> tuple:
    """(dx, dweight) or (dx, dweight, dbias) from layer_norm_rows_backward over all rows; the
    weight's and bias's gradients already summed over the rows, in their own shape and dtype."""
    x, weight = node.inputs[0], node.inputs[1]
    mean, rstd = node.saved["mean"], node.saved["rstd"]
    size = weight.size
    rows = np.ascontiguousarray(x.data.reshape(-1, size))
    g = np.ascontiguousarray(grad.reshape(rows.shape), dtype=rows.dtype)
    dx = np.empty_like(rows)
    dweight, dbias = np.zeros(size), np.zeros(size)
    w = np.ascontiguousarray(weight.data.reshape(size), dtype=rows.dtype)
    layer_norm_rows_backward(g, rows, w, mean, rstd, dx, dweight, dbias, 0, len(rows))
    grads = (dx.reshape(x.shape), dweight.reshape(weight.shape).astype(weight.dtype))
    return grads if len(node.inputs) == 2 else grads + (dbias.reshape(weight.shape).astype(node.inputs[2].dtype),)

# %% [markdown]
# The test compares with module 13's `layer_norm` (the composed NumPy version): values in
# float32 and float64, gradients against central differences in float64, one row, odd shapes
# and an empty batch. When a gradient is wrong it says which term of the formula is missing.

# %%
def layer_norm_backward_slip(dx: np.ndarray, x: np.ndarray, w: np.ndarray, grad: np.ndarray) -> str:
    """Which classic mistake of the LayerNorm backward gives `dx` (rows (N, D), float64)."""
    m = x.mean(axis=1, keepdims=True)
    r = 1 / np.sqrt(((x - m) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    h, g_hat = (x - m) * r, grad * w
    mean_g, mean_gx = g_hat.mean(axis=1, keepdims=True), (g_hat * h).mean(axis=1, keepdims=True)
    wrong = {"the mean-of-ĝ term is missing: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))": r * (g_hat - h * mean_gx),
             "the x̂·mean(ĝ·x̂) term is missing: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))": r * (g_hat - mean_g),
             "the weight is missing from ĝ = grad·w": r * (grad - grad.mean(axis=1, keepdims=True)
                                                          - h * (grad * h).mean(axis=1, keepdims=True)),
             "rstd is missing in front: dx = rstd·(…)": g_hat - mean_g - h * mean_gx}
    named = [name for name, value in wrong.items() if np.allclose(dx, value, rtol=1e-6, atol=1e-9)]
    return named[0] if named else "dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = grad·w, means over the row"


def test_unit_compiled_layer_norm():
    rng = np.random.default_rng(21)
    x = rng.standard_normal((7, 13)) * 2 + 1
    w, b = 1 + 0.3 * rng.standard_normal(13), rng.standard_normal(13)
    out = compiled_layer_norm(Tensor(x, requires_grad=True), Tensor(w, requires_grad=True), Tensor(b))
    assert out._node is not None and out._node.op == "compiled_layer_norm", \
        f"record ONE op 'compiled_layer_norm', got {None if out._node is None else out._node.op!r}"
    expected = layer_norm(Tensor(x), Tensor(w), Tensor(b)).numpy()
    assert np.allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12), (
        f"layer_norm_rows differs from module 13's layer_norm by up to {np.abs(out.numpy() - expected).max():.2e}: "
        "out = (x − mean)·rstd·w + b, var the mean of squared deviations (/D), rstd = 1/sqrt(var + eps)")
    assert np.allclose(out._node.saved["rstd"], 1 / np.sqrt(x.var(axis=1) + 1e-5), rtol=1e-12), \
        "rstd[i] must be 1/sqrt(var_i + eps), eps inside the square root"
    grad = rng.standard_normal(x.shape)
    dx = BACKWARD_RULES["compiled_layer_norm"](grad, out._node)[0]
    want = BACKWARD_RULES["layer_norm"](grad, layer_norm(Tensor(x, requires_grad=True), Tensor(w, requires_grad=True),
                                                            Tensor(b))._node)[0]
    assert np.allclose(dx, want, rtol=1e-10, atol=1e-12), \
        f"layer_norm_rows_backward: dx is wrong (max |diff| {np.abs(dx - want).max():.2e}): " + \
        layer_norm_backward_slip(dx, x, w, grad)
    for shape in ((1, 5), (7, 13), (2, 3, 6)):
        args = [Tensor(rng.standard_normal(shape), requires_grad=True),
                Tensor(1 + 0.2 * rng.standard_normal(shape[-1]), requires_grad=True),
                Tensor(rng.standard_normal(shape[-1]), requires_grad=True)]
        assert gradcheck(compiled_layer_norm, args), f"compiled_layer_norm {shape}: gradients differ"
    x32 = (rng.standard_normal((4, 9)) * 3).astype(np.float32)
    got32 = compiled_layer_norm(x32, np.ones(9, np.float32)).numpy()
    assert got32.dtype == np.float32 and np.allclose(got32, layer_norm(x32, np.ones(9, np.float32)).numpy(),
                                                     atol=1e-5), "float32 in, float32 out, equal to module 13's"
    empty = compiled_layer_norm(Tensor(np.zeros((0, 4)), requires_grad=True), Tensor(np.ones(4), requires_grad=True))
    assert empty.shape == (0, 4), f"an empty batch gives an empty output, got shape {empty.shape}"
    print("✓ compiled_layer_norm: module 13's values (float32, float64) and gradients, odd shapes, empty batch")


test_unit_compiled_layer_norm()

# %% [markdown]
# ### Bias + GELU, forward and backward
#
# The same formula as section 2's `bias_gelu`, element by element: `u = x + b`,
# `t = tanh(c·(u + 0.044715·u³))`, `out = 0.5·u·(1 + t)`, saving `u` and `t`; the backward
# `dx = grad·slope` with section 2's slope, and the bias's gradient `Σ_rows dx`, summed in the
# kernel (float64) instead of by the engine.
#
# Two things make the forward fast. `np.tanh` in a kernel is the C library's scalar `tanh`, many
# times slower per element than NumPy's vectorised one; `exp` is cheap, and
# `tanh(z) = 1 − 2/(exp(2z) + 1)` is exact in real numbers and stays right at the ends
# (`exp(2z)` = inf gives 1, `exp(2z)` = 0 gives −1). And the arithmetic should be in the array's
# dtype: a Python float (`GELU_C`) is a float64 in Numba, which turns a float32 loop into a
# float64 one. Convert the constants once, `x.dtype.type(2 * GELU_C)`. (In float32 the cube may
# overflow to inf for |u| above 7·10¹²: `exp` then gives inf or 0, and t is ±1, as it should be.)

# %%
#| export
@kernel()
def bias_gelu_rows(x, bias, u, t, out):
    """GELU (tanh form) of x + bias on rows x (N, D), bias (D,) (zeros for no bias).
    Writes u = x + bias, t = tanh(z) with z = GELU_C·(u + GELU_COEFF·u³), computed as
    1 − 2/(exp(2z) + 1), and out = 0.5·u·(1 + t), each (N, D); the arithmetic in x's dtype (the
    constants converted with x.dtype.type)."""
    ### BEGIN SOLUTION
    n, d = x.shape
    two_c, coeff = x.dtype.type(2 * GELU_C), x.dtype.type(GELU_COEFF)
    one, two, half = x.dtype.type(1), x.dtype.type(2), x.dtype.type(0.5)
    for i in range(n):
        for j in range(d):
            v = x[i, j] + bias[j]
            th = one - two / (np.exp(two_c * (v + coeff * v * v * v)) + one)
            u[i, j] = v
            t[i, j] = th
            out[i, j] = half * v * (one + th)
    ### END SOLUTION


@kernel(fastmath=SAFE_FASTMATH)
def bias_gelu_rows_backward(grad, u, t, dx, dbias):
    """dx (N, D) = grad·slope, slope = 0.5·(1 + t) + 0.5·u·(1 − t²)·GELU_C·(1 + 3·GELU_COEFF·u²),
    from the saved u and t (no tanh here); ADDS Σ_i dx_ij to dbias[j] (float64 (D,))."""
    ### BEGIN SOLUTION
    n, d = u.shape
    for i in range(n):
        for j in range(d):
            v, th = u[i, j], t[i, j]
            slope = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * GELU_C * (1.0 + 3.0 * GELU_COEFF * v * v)
            value = grad[i, j] * slope
            dx[i, j] = value
            dbias[j] += value
    ### END SOLUTION

# %%
#| export
def compiled_bias_gelu(x: Any, bias: Any = None) -> Tensor:
    """bias_gelu (section 2) computed by the kernel bias_gelu_rows: the same value, shape and dtype.
    Records ONE op "compiled_bias_gelu", inputs (x, bias) or (x,); saved u, tanh (rows (N, D)).
    float16 and CuPy arrays: bias_gelu."""
    x = as_tensor(x)
    bias = None if bias is None else as_tensor(bias)
    if not compilable(x.data):
        return bias_gelu(x, bias)
    check_floating_input("compiled_bias_gelu", x)
    if bias is not None and bias.shape != (x.shape[-1],):
        raise ValueError(f"compiled_bias_gelu: the bias must have shape ({x.shape[-1]},) for x of shape {x.shape}, "
                         f"got {bias.shape}.")
    rows = np.ascontiguousarray(x.data.reshape(-1, x.shape[-1]) if x.ndim else x.data.reshape(1, 1))
    b = np.zeros(rows.shape[1], rows.dtype) if bias is None else np.ascontiguousarray(bias.data, dtype=rows.dtype)
    u, t, out = np.empty_like(rows), np.empty_like(rows), np.empty_like(rows)
    bias_gelu_rows(rows, b, u, t, out)
    inputs = (x,) if bias is None else (x, bias)
    return record_op("compiled_bias_gelu", out.reshape(x.shape), inputs, u=u, tanh=t)


@register_backward("compiled_bias_gelu")
def compiled_bias_gelu_backward(grad: Any, node) -> tuple:
    """(dx,) or (dx, dbias) from bias_gelu_rows_backward; dbias summed over the rows already."""
    u, t = node.saved["u"], node.saved["tanh"]
    x = node.inputs[0]
    dx, dbias = np.empty_like(u), np.zeros(u.shape[1])
    bias_gelu_rows_backward(np.ascontiguousarray(grad.reshape(u.shape), dtype=u.dtype), u, t, dx, dbias)
    if len(node.inputs) == 1:
        return (dx.reshape(x.shape),)
    return dx.reshape(x.shape), dbias.astype(node.inputs[1].dtype)

# %%
def test_unit_compiled_bias_gelu():
    rng = np.random.default_rng(22)
    x, b = rng.standard_normal((7, 13)) * 2, rng.standard_normal(13)
    out = compiled_bias_gelu(Tensor(x, requires_grad=True), Tensor(b, requires_grad=True))
    assert out._node is not None and out._node.op == "compiled_bias_gelu", \
        f"record ONE op 'compiled_bias_gelu', got {None if out._node is None else out._node.op!r}"
    reference = bias_gelu(Tensor(x, requires_grad=True), Tensor(b, requires_grad=True))
    assert np.allclose(out._node.saved["u"], x + b), "bias_gelu_rows: u must be x + bias"
    assert np.allclose(out._node.saved["tanh"], reference._node.saved["tanh"], rtol=1e-12, atol=1e-12), \
        "bias_gelu_rows: t must be tanh(GELU_C·(u + GELU_COEFF·u³)), before 1 + t"
    assert np.allclose(out.numpy(), reference.numpy(), rtol=1e-12, atol=1e-12), \
        f"bias_gelu_rows: out differs from bias_gelu by up to {np.abs(out.numpy() - reference.numpy()).max():.2e}"
    grad = rng.standard_normal(x.shape)
    dx, dbias = BACKWARD_RULES["compiled_bias_gelu"](grad, out._node)
    check_gelu_slope(dx, x + b, reference._node.saved["tanh"], grad)
    assert np.allclose(dbias, dx.sum(axis=0), rtol=1e-10), "dbias must be the sum of dx over the rows (+= per row)"
    assert gradcheck(compiled_bias_gelu, [Tensor(x, requires_grad=True), Tensor(b, requires_grad=True)]), \
        "compiled_bias_gelu: gradients differ from central differences"
    x3 = Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    assert gradcheck(compiled_bias_gelu, [x3]), "compiled_bias_gelu without a bias (3-D): gradients differ"
    x32 = rng.standard_normal((1, 6)).astype(np.float32) * 4
    got32 = compiled_bias_gelu(x32).numpy()
    assert got32.dtype == np.float32 and np.allclose(got32, bias_gelu(x32).numpy(), atol=1e-6), \
        "float32 in, float32 out, equal to bias_gelu"
    assert compiled_bias_gelu(np.zeros((0, 4))).shape == (0, 4), "an empty batch gives an empty output"
    print("✓ compiled_bias_gelu: bias_gelu's values and saved arrays, slope and bias gradient checked")


test_unit_compiled_bias_gelu()

# %% [markdown]
# ### Softmax and cross-entropy from the logits
#
# Module 04's `cross_entropy` in one pass per row of the logits (N, C): the row's maximum `m`,
# then `e_j = exp(z_j − m)` written into `probs` while summing `s = Σ e_j`, then `probs /= s`
# and the row's loss `log(s) + m − z_y`. The **max subtraction** is not optional: `exp(z)` of a
# float32 logit above 88.7 is inf, and inf/inf is NaN; with `m` subtracted every exponent is
# ≤ 0, so every `e_j` ≤ 1 and `s` ≥ 1. Find `m` by comparisons starting from the row's **first
# logit**, not from 0: a row whose logits are all below about −745 (float64) would make every
# `exp(z − 0)` exactly 0, and log 0 = −inf. Sum `s` in float64 (`s = 0.0` is a float64 in Numba).
# The backward of the mean loss over the N rows is `dz_ij = grad·(p_ij − [j = y_i]) / N`.
#
# No fastmath here: a logit may be `-inf` (a class that is ruled out), and `exp(-inf − m)`
# must give exactly 0 (the test checks the value, and the flags the kernel was compiled with:
# a passing value cannot prove that a fastmath build keeps it, see above).

# %%
#| export
@kernel()
def softmax_cross_entropy_rows(logits, targets, probs, losses):
    """Softmax and cross-entropy of each row of logits (N, C) with targets (N,) int64 in [0, C).
    Writes probs (N, C) (the softmax, logits' dtype) and losses (N,) float64, each
    log Σ_j exp(z_j − m) + m − z_y, m the row's maximum (subtracted before every exp)."""
    ### BEGIN SOLUTION
    n, c = logits.shape
    for i in range(n):
        m = logits[i, 0]
        for j in range(1, c):
            if logits[i, j] > m:
                m = logits[i, j]
        total = 0.0
        for j in range(c):
            e = np.exp(logits[i, j] - m)
            probs[i, j] = e
            total += e
        inverse = 1.0 / total
        for j in range(c):
            probs[i, j] *= inverse
        losses[i] = np.log(total) + m - logits[i, targets[i]]
    ### END SOLUTION


@kernel()
def softmax_cross_entropy_rows_backward(probs, targets, scale, dlogits):
    """dlogits (N, C) = scale·(probs − onehot(targets)): scale = grad / N for the mean loss."""
    ### BEGIN SOLUTION
    n, c = probs.shape
    for i in range(n):
        for j in range(c):
            dlogits[i, j] = scale * probs[i, j]
        dlogits[i, targets[i]] -= scale
    ### END SOLUTION

# %%
#| export
def compiled_cross_entropy(logits: Any, targets: Any) -> Tensor:
    """Module 04's cross_entropy(logits, targets) (no ignore_index) by softmax_cross_entropy_rows:
    the mean over the rows of logits (..., C) of LSE(z) − z_y, a 0-d Tensor in the logits' dtype.
    Records ONE op "compiled_cross_entropy", input (logits,); saved probs (N, C), targets (N,).
    ValueError when targets are not integers of shape logits.shape[:-1] in [0, C). float16 and
    CuPy arrays: module 04's cross_entropy. An empty batch has loss 0."""
    logits = autocast_float32(as_tensor(logits))
    if not compilable(logits.data):
        return cross_entropy(logits, targets)
    if logits.ndim == 0:
        raise ValueError("compiled_cross_entropy: logits need a class dimension, got a 0-d tensor.")
    ids = np.asarray(targets.data if isinstance(targets, Tensor) else targets)
    num_classes = logits.shape[-1]
    if ids.shape != logits.shape[:-1] or ids.dtype.kind not in "iu" or \
            (ids.size and (ids.min() < 0 or ids.max() >= num_classes)):
        raise ValueError(f"compiled_cross_entropy: logits of shape {logits.shape} need integer targets of shape "
                         f"{logits.shape[:-1]} in [0, {num_classes}), got {ids.dtype} {ids.shape}.")
    rows = np.ascontiguousarray(logits.data.reshape(-1, num_classes))
    flat_targets = np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)
    probs, losses = np.empty_like(rows), np.empty(len(rows))
    softmax_cross_entropy_rows(rows, flat_targets, probs, losses)
    loss = losses.sum() / max(len(rows), 1)
    return record_op("compiled_cross_entropy", np.asarray(loss, dtype=logits.dtype), (logits,),
                     probs=probs, targets=flat_targets)


@register_backward("compiled_cross_entropy")
def compiled_cross_entropy_backward(grad: Any, node) -> tuple:
    """(dlogits,) = grad·(probs − onehot)/N in the logits' shape, by the backward kernel."""
    probs, targets = node.saved["probs"], node.saved["targets"]
    dlogits = np.empty_like(probs)
    softmax_cross_entropy_rows_backward(probs, targets, float(grad) / max(len(probs), 1), dlogits)
    return (dlogits.reshape(node.inputs[0].shape),)

# %%
def test_unit_compiled_cross_entropy():
    check_no_unsafe_fastmath(softmax_cross_entropy_rows, softmax_cross_entropy_rows_backward)
    rng = np.random.default_rng(23)
    logits = rng.standard_normal((7, 13)) * 3
    labels = rng.integers(0, 13, 7)
    loss = compiled_cross_entropy(Tensor(logits, requires_grad=True), labels)
    assert loss._node is not None and loss._node.op == "compiled_cross_entropy", \
        f"record ONE op 'compiled_cross_entropy', got {None if loss._node is None else loss._node.op!r}"
    expected = cross_entropy(Tensor(logits), labels).item()
    assert np.isclose(loss.item(), expected, rtol=1e-12), \
        f"loss {loss.item()} is not module 04's {expected}: each row's loss is log(Σ exp(z − m)) + m − z_y"
    huge = np.array([[1000.0, 0.0, -1000.0], [0.0, 990.0, 1000.0]], np.float32)
    got = compiled_cross_entropy(huge, np.array([0, 1])).item()
    assert np.isfinite(got) and np.isclose(got, cross_entropy(huge, np.array([0, 1])).item(), rtol=1e-5), (
        f"logits near 1000 give loss {got}: subtract the row's maximum before every exp "
        "(exp(1000) is inf in float32 and float64, inf/inf is NaN)")
    low = np.array([[-1000.0, -1001.0]])
    got_low = compiled_cross_entropy(low, np.array([0])).item()
    assert np.isclose(got_low, cross_entropy(low, np.array([0])).item(), rtol=1e-12), (
        f"logits [-1000, -1001] give loss {got_low}, module 04 {cross_entropy(low, np.array([0])).item():.6f}: the "
        "max m was not found from the row's first logit (starting it at 0 makes every exp(z − m) 0 here)")
    ruled_out = np.array([[-np.inf, 0.0, 1.0], [2.0, -np.inf, -np.inf]])
    probs = compiled_cross_entropy(Tensor(ruled_out, requires_grad=True), np.array([2, 0]))._node.saved["probs"]
    assert np.isfinite(probs).all() and probs[0, 0] == 0 and probs[1, 1] == 0, (
        f"a logit of -inf must get probability exactly 0, got {probs.tolist()}: exp(-inf − m) = 0, m the row's "
        "maximum found by comparisons (start it at the row's first logit)")
    grad = BACKWARD_RULES["compiled_cross_entropy"](np.float64(2.0), loss._node)[0]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want = 2.0 * (p - np.eye(13)[labels]) / 7
    assert np.allclose(grad, want, rtol=1e-10, atol=1e-12), \
        "softmax_cross_entropy_rows_backward: dz = scale·(p − onehot), scale = grad / N, the target's entry − scale"
    assert gradcheck(lambda z: compiled_cross_entropy(z, labels), [Tensor(logits, requires_grad=True)]), \
        "compiled_cross_entropy: gradients differ from central differences"
    logits3 = rng.standard_normal((2, 3, 5)).astype(np.float32)
    labels3 = rng.integers(0, 5, (2, 3))
    got32 = compiled_cross_entropy(logits3, labels3)
    assert got32.dtype == np.float32 and np.isclose(got32.item(), cross_entropy(logits3, labels3).item(), rtol=1e-5), \
        "3-D float32 logits: module 04's loss, in float32"
    assert compiled_cross_entropy(np.zeros((0, 4)), np.zeros(0, int)).item() == 0.0, "an empty batch has loss 0"
    print("✓ compiled_cross_entropy: module 04's loss and gradient, huge and -inf logits, 3-D, empty batch")


test_unit_compiled_cross_entropy()

# %% [markdown]
# ### The causal softmax of attention
#
# Module 12's attention with `is_causal=True` computes the scores `S = Q Kᵀ·scale` (a BLAS
# product, shape (…, T, T)), fills the future (key j > query i) with `-inf`, and takes a softmax
# over each row in five NumPy passes. The kernel does row i of each (T, T) block in one
# sweep over keys `0 … i` only: the maximum (from the row's first score, as above), then
# `exp(s − max)` and its float64 sum, then the division;
# the future entries are written as exactly 0 and never exponentiated. It works in place: the
# scores become the probabilities. The backward of a softmax, with `dP = dO Vᵀ` from BLAS, is
# row by row `dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik)`, again over `k ≤ i` only, and 0 in the future.
#
# `causal_attention(q, k, v)` (given) is the op around them: the products are BLAS, the softmax
# and its backward are the kernels, and it records ONE op with the probabilities saved, like
# module 12's `sdpa` without dropout.

# %%
#| export
@kernel()
def causal_softmax_rows(scores):
    """In place: each (T, T) block of scores (M, T, T) becomes the causal softmax of its rows.
    Row i: P_ij = exp(S_ij − m_i) / Σ_{k ≤ i} exp(S_ik − m_i) for j ≤ i, m_i = max_{k ≤ i} S_ik;
    P_ij = 0 for j > i (the future). No fastmath (see the text)."""
    ### BEGIN SOLUTION
    blocks, tq, tk = scores.shape
    for b in range(blocks):
        for i in range(tq):
            m = scores[b, i, 0]
            for j in range(1, i + 1):
                if scores[b, i, j] > m:
                    m = scores[b, i, j]
            total = 0.0
            for j in range(i + 1):
                e = np.exp(scores[b, i, j] - m)
                scores[b, i, j] = e
                total += e
            inverse = 1.0 / total
            for j in range(i + 1):
                scores[b, i, j] *= inverse
            for j in range(i + 1, tk):
                scores[b, i, j] = 0.0
    ### END SOLUTION


@kernel()
def causal_softmax_rows_backward(probs, dprobs):
    """In place: dprobs (M, T, T) becomes dS, with dS_ij = P_ij·(dP_ij − Σ_{k ≤ i} P_ik·dP_ik) for
    j ≤ i and 0 for j > i; probs (M, T, T) from causal_softmax_rows."""
    ### BEGIN SOLUTION
    blocks, tq, tk = probs.shape
    for b in range(blocks):
        for i in range(tq):
            dot = 0.0
            for j in range(i + 1):
                dot += probs[b, i, j] * dprobs[b, i, j]
            for j in range(i + 1):
                dprobs[b, i, j] = probs[b, i, j] * (dprobs[b, i, j] - dot)
            for j in range(i + 1, tk):
                dprobs[b, i, j] = 0.0
    ### END SOLUTION

# %%
#| export
def causal_attention(q: Any, k: Any, v: Any, scale: float | None = None, return_weights: bool = False) -> Any:
    """softmax(Q Kᵀ·scale with the future masked) V, the softmax by causal_softmax_rows.

    q, k (..., T, dk), v (..., T, dv), the same leading dims (batch, heads) and T; scale
    default 1/√dk. Returns the output (..., T, dv) in q's dtype (float32 or float64 NumPy).
    Records ONE op "causal_attention", inputs (q, k, v); saved probs (M, T, T) (M = the
    product of the leading dims), scale. Equal to module 12's
    scaled_dot_product_attention(q, k, v, is_causal=True)[0] without dropout.
    return_weights -- also return the weights (..., T, T) as a Tensor without a graph (to look at).
    """
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    if not compilable(q.data, k.data, v.data) or not q.dtype == k.dtype == v.dtype \
            or q.shape[:-1] != k.shape[:-1] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"causal_attention: needs NumPy float32/float64 q, k (..., T, dk), v (..., T, dv) of one "
                         f"dtype, got {q.dtype} {q.shape}, {k.dtype} {k.shape}, {v.dtype} {v.shape}.")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    *lead, t, dk = q.shape
    qs, ks, vs = (a.data.reshape(-1, t, a.shape[-1]) for a in (q, k, v))
    scores = np.matmul(qs, np.swapaxes(ks, -1, -2))
    scores *= scale
    causal_softmax_rows(scores)  # in place: now the probabilities
    out = np.matmul(scores, vs)
    output = record_op("causal_attention", out.reshape(*lead, t, v.shape[-1]), (q, k, v), probs=scores, scale=scale)
    return (output, Tensor(scores.reshape(*lead, t, t))) if return_weights else output


@register_backward("causal_attention")
def causal_attention_backward(grad: Any, node) -> tuple:
    """dV = Pᵀ dO; dP = dO Vᵀ; dS = causal_softmax_rows_backward(P, dP); dQ = dS K·scale;
    dK = dSᵀ Q·scale. None for an input that needs no gradient."""
    q, k, v = node.inputs
    probs, scale = node.saved["probs"], node.saved["scale"]
    t = probs.shape[-1]
    qs, ks, vs = (a.data.reshape(-1, t, a.shape[-1]) for a in (q, k, v))
    g = grad.reshape(-1, t, v.shape[-1]).astype(probs.dtype, copy=False)
    d_v = np.matmul(np.swapaxes(probs, -1, -2), g).reshape(v.shape) if v.requires_grad else None
    d_q = d_k = None
    if q.requires_grad or k.requires_grad:
        d_s = np.matmul(g, np.swapaxes(vs, -1, -2))  # dP, a fresh array: dS in place below
        causal_softmax_rows_backward(probs, d_s)
        d_s *= scale
        d_q = np.matmul(d_s, ks).reshape(q.shape) if q.requires_grad else None
        d_k = np.matmul(np.swapaxes(d_s, -1, -2), qs).reshape(k.shape) if k.requires_grad else None
    return d_q, d_k, d_v


register_flops("causal_attention")(sdpa_flops)  # module 12's count: Q Kᵀ and P V, the whole square

# %%
from tinytorch.core.attention import scaled_dot_product_attention


def check_causal_softmax_backward(probs: np.ndarray, dprobs: np.ndarray) -> None:
    """AssertionError naming the slip when causal_softmax_rows_backward(probs, dprobs) (M, T, T) is not
    dS = P·(dP − Σ_k P·dP), 0 in the future."""
    dp = dprobs.copy()
    causal_softmax_rows_backward(probs, dp)
    want = probs * (dprobs - (probs * dprobs).sum(axis=-1, keepdims=True))  # P is 0 in the future, so is this
    if np.allclose(dp, want, rtol=1e-10, atol=1e-12):
        return
    future = np.triu(np.ones(probs.shape[-2:], bool), 1)
    slips = {"the future entries of dS must be 0 (key j > query i): write them as 0.0":
             np.where(future, dprobs, want),
             "the −Σ_k P_ik·dP_ik term is missing: dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik)": probs * dprobs}
    named = [words for words, wrong in slips.items() if np.allclose(dp, wrong, rtol=1e-10, atol=1e-12)]
    raise AssertionError("causal_softmax_rows_backward: " + (named[0] if named else
                         "dS_ij = P_ij·(dP_ij − Σ_{k ≤ i} P_ik·dP_ik) for j ≤ i, 0 for j > i"))


def test_unit_causal_attention():
    check_no_unsafe_fastmath(causal_softmax_rows, causal_softmax_rows_backward)
    rng = np.random.default_rng(24)
    for shape in ((1, 1, 1, 3), (2, 3, 7, 5)):
        q, k, v = (Tensor(rng.standard_normal(shape), requires_grad=True) for _ in range(3))
        out = causal_attention(q, k, v)
        assert out._node is not None and out._node.op == "causal_attention", "record ONE op 'causal_attention'"
        probs = out._node.saved["probs"]
        reference, weights = scaled_dot_product_attention(Tensor(q.numpy()), Tensor(k.numpy()), Tensor(v.numpy()),
                                                          is_causal=True)
        if not np.allclose(probs.reshape(weights.shape), weights.numpy(), rtol=1e-12, atol=1e-14):
            future = np.triu(np.ones((shape[-2], shape[-2]), bool), 1)
            assert np.all(probs.reshape(weights.shape)[..., future] == 0), \
                "causal_softmax_rows: the future (key j > query i) must get weight exactly 0"
            assert np.allclose(probs.sum(axis=-1), 1), "causal_softmax_rows: each row must sum to 1 over keys 0 … i"
            raise AssertionError("causal_softmax_rows: the weights differ from module 12's causal softmax: "
                                 "exp(S_ij − m_i) / Σ_{k ≤ i} exp(S_ik − m_i), m_i the max over k ≤ i")
        assert np.allclose(out.numpy(), reference.numpy(), rtol=1e-12, atol=1e-14), \
            "causal_attention: the output differs from module 12's sdpa with is_causal=True"
        check_causal_softmax_backward(probs, rng.standard_normal(probs.shape))
        assert gradcheck(causal_attention, [q, k, v]), \
            f"causal_attention {shape}: gradients differ (causal_softmax_rows_backward: P·(dP − Σ_k P·dP))"
    big = np.array([[[[0.0, 0.0], [1000.0, -1000.0]]]], np.float32)  # the scores themselves, with K = V = I
    eye = np.eye(2, dtype=np.float32)[None, None]
    got = causal_attention(big, eye, eye, scale=1.0).numpy()
    # first: without the max shift the all -1000 check below would fail too, naming the wrong cause
    assert np.isfinite(got).all(), ("scores near 1000 give NaN or inf: subtract the row's maximum before every exp "
                                    "(exp(1000) overflows)")
    low = np.full((1, 1, 2, 2), -1000.0)  # every score -1000 (K = V = I below): uniform weights over keys 0 … i
    got_low = causal_attention(low, np.eye(2)[None, None], np.eye(2)[None, None], scale=1.0).numpy()
    assert np.allclose(got_low, [[[[1.0, 0.0], [0.5, 0.5]]]]), (
        f"scores all -1000 give {got_low.tolist()}, not [[1, 0], [0.5, 0.5]]: the max m was not found from the "
        "row's first score (starting it at 0 makes every exp(s − m) 0, and 0/0 is NaN)")
    q32 = rng.standard_normal((2, 6, 4)).astype(np.float32)
    got32 = causal_attention(q32, q32, q32).numpy()
    want32 = scaled_dot_product_attention(q32, q32, q32, is_causal=True)[0].numpy()
    assert got32.dtype == np.float32 and np.allclose(got32, want32, atol=1e-6), "float32 in, float32 out"
    print("✓ causal_attention: module 12's causal attention, its gradients, huge scores, float32")


test_unit_causal_attention()

# %% [markdown]
# ### Into the GPT: the compiled table
#
# The kernels go into the model the way section 3's fused MLP did: classes built from module
# 13's modules, sharing their weight tensors, listed in one table. Each compiled class is a
# subclass of the class it replaces (a `CompiledGPT` *is* a `GPT`: its generation and
# attention maps still work), overriding only `forward`:
#
# | module 13's class | replaced by | what runs compiled |
# |---|---|---|
# | `MLP` | `CompiledMLP` | bias + GELU (`compiled_bias_gelu`) |
# | `LayerNorm` | `CompiledLayerNorm` | `compiled_layer_norm` |
# | `CausalSelfAttention` | `CompiledCausalSelfAttention` | `causal_attention` (the softmax) |
# | `GPT` | `CompiledGPT` | the loss, `compiled_cross_entropy` |
#
# The attention uses the kernel in training without attention dropout and without a KV cache;
# with dropout or a cache it calls module 13's forward (dropout needs the weights before the
# mask, a cache a rectangular mask). The weights it returns are for looking at: no gradient
# flows through them (module 12's `sdpa_weights` is the op for that).
#
# `fused_replacements()` is what `fuse(model)` uses without a table: the compiled one when Numba
# imports, else the NumPy one, with a warning (once) that says what to install.

# %%
#| export
class CompiledMLP(FusedMLP):
    """FusedMLP with compiled_bias_gelu: dropout(proj(compiled_bias_gelu(rows @ fc.weight, fc.bias)))."""

    def forward(self, x: Any) -> Tensor:
        x = as_tensor(x)
        rows = x.reshape(-1, x.shape[-1])
        out = self.dropout(self.proj(compiled_bias_gelu(rows @ self.fc.weight, self.fc.bias)))
        return out.reshape(x.shape)


class CompiledLayerNorm(BlasLayerNorm):
    """Module 13's LayerNorm computed by compiled_layer_norm (the same weight and bias tensors)."""

    def forward(self, x: Any) -> Tensor:
        return compiled_layer_norm(x, self.weight, self.bias, self.eps)


def _adopt(new: Module, old: Module) -> Module:
    """`new` (an empty instance of a subclass of old's class) takes old's attributes: the same
    sub-modules, parameters and settings, so the same names and the same weight tensors."""
    Module.__init__(new)
    for key, value in old.__dict__.items():
        object.__setattr__(new, key, dict(value) if isinstance(value, dict) else value)
    return new


class CompiledCausalSelfAttention(CausalSelfAttention):
    """Module 13's CausalSelfAttention with the softmax by causal_attention. Built from one (the
    same projections). forward(x (B, T, E), cache=None) -> (output (B, T, E), weights (B, H, T, T),
    without gradient); with a cache, or attention dropout in training: module 13's forward."""

    def __new__(cls, *args: Any, **kwargs: Any):  # the attributes come from the module adopted
        return object.__new__(cls)

    def __init__(self, attention: CausalSelfAttention):
        _adopt(self, attention)

    def forward(self, x: Any, cache: Any = None) -> tuple[Tensor, Tensor]:
        x = as_tensor(x)
        if cache is not None or (self.dropout > 0 and self.training) or not compilable(x.data):
            return super().forward(x, cache=cache)
        B, T, E = x.shape
        H, D = self.num_heads, self.head_dim
        rows = x.reshape(B * T, E)
        q, k, v = (proj(rows).reshape(B, T, H, D).permute(0, 2, 1, 3)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        heads, weights = causal_attention(q, k, v, return_weights=True)
        return self.out_proj(heads.permute(0, 2, 1, 3).reshape(B * T, E)).reshape(B, T, E), weights


class CompiledGPT(GPT):
    """Module 13's GPT whose loss is compiled_cross_entropy. Built from a GPT (the same modules
    and weight tensors). forward(idx, targets=None, cache=None) -> (logits, loss) as GPT's."""

    def __new__(cls, *args: Any, **kwargs: Any):  # the attributes come from the GPT adopted
        return object.__new__(cls)

    def __init__(self, gpt: GPT):
        _adopt(self, gpt)

    def forward(self, idx: Any, targets: Any = None, cache: Any = None) -> tuple[Tensor, Tensor | None]:
        logits, _ = super().forward(idx, cache=cache)
        return logits, (None if targets is None else compiled_cross_entropy(logits, targets))


# Module 13's classes and their compiled replacements. Complete here: no later cell changes it.
COMPILED_REPLACEMENTS: dict[type, type] = {MLP: CompiledMLP, LayerNorm: CompiledLayerNorm,
                                           CausalSelfAttention: CompiledCausalSelfAttention, GPT: CompiledGPT}
_MISSING_NUMBA_TOLD: list = []  # one entry once the warning below has been given


def fused_replacements() -> dict[type, type]:
    """The table fuse(model) uses by default: COMPILED_REPLACEMENTS when Numba imports, else
    FUSED_REPLACEMENTS (the NumPy fusions), with a warning, once per process, naming what to install."""
    if NUMBA_AVAILABLE:
        return COMPILED_REPLACEMENTS
    if not _MISSING_NUMBA_TOLD:
        _MISSING_NUMBA_TOLD.append(True)
        warnings.warn("Numba is not installed: fuse() uses module 18's NumPy fusions (bias_gelu, blas_layer_norm) "
                      "instead of the compiled kernels. `pip install numba` for those.", RuntimeWarning, stacklevel=3)
    return FUSED_REPLACEMENTS

# %%
def test_unit_compiled_gpt():
    model = GPT(17, 16, 2, 2, 8, seed=5, dtype=np.float64)
    for block in model.blocks:  # make the biases count
        block.mlp.fc.bias.data = np.linspace(-1.0, 1.0, block.mlp.fc.bias.size)
        block.ln1.bias.data = np.linspace(-0.5, 0.5, 16)
    compiled = fuse(model, COMPILED_REPLACEMENTS)
    assert type(compiled) is CompiledGPT and isinstance(compiled, GPT), \
        f"fuse must replace the GPT itself last (after its sub-modules), got {type(compiled).__name__}"
    kinds = {type(m).__name__ for _, m in compiled.named_modules()}
    assert {"CompiledMLP", "CompiledLayerNorm", "CompiledCausalSelfAttention"} <= kinds, \
        f"every MLP, LayerNorm and attention must be replaced; modules: {sorted(kinds)}"
    assert all(p is q for p, q in zip(model.parameters(), compiled.parameters())), "share the weight tensors"
    ids, targets = np.random.default_rng(6).integers(0, 17, (2, 3, 8))
    logits, loss = model(ids, targets=targets)
    clogits, closs = compiled(ids, targets=targets)
    ops = recorded_ops(closs)
    assert {"compiled_cross_entropy", "compiled_layer_norm", "compiled_bias_gelu", "causal_attention"} <= ops, \
        f"the compiled GPT's graph: {sorted(ops)}"
    assert np.allclose(clogits.numpy(), logits.numpy(), rtol=1e-10, atol=1e-12) and \
        np.isclose(closs.item(), loss.item(), rtol=1e-12), "the compiled GPT's logits or loss differ from GPT's"
    loss.backward()
    plain = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    closs.backward()
    for (name, p), want in zip(compiled.named_parameters(), plain):
        assert np.allclose(p.grad.numpy(), want, rtol=1e-9, atol=1e-12), f"the gradient of {name} differs from GPT's"
    print("✓ fuse(model, COMPILED_REPLACEMENTS): every kernel in the GPT, the same loss and gradients (float64)")


test_unit_compiled_gpt()

# %% [markdown]
# ### Exercise: two threads with `prange`
#
# `numba.njit(parallel=True)` runs the iterations of a `prange` loop on several threads
# (`numba.set_num_threads(n)`). LayerNorm's backward is the interesting case: the rows are
# independent for `dx`, but `dweight` and `dbias` are **sums over all rows**. If every thread
# adds into the same `dweight`, two threads read the same `dweight[j]`, each adds its own term
# and each writes back: one addition is lost. That is a **race** on a shared accumulator, and
# it gives different wrong answers from run to run.
#
# The cure is one accumulator per part: split the rows into `P` contiguous parts, let part p
# add into row p of `dweight_parts` (P, D), and sum the P rows afterwards (given). Write the
# loop: each part calls `layer_norm_rows_backward` on its own rows and its own accumulators.

# %%
#| export
@kernel(parallel=True)
def layer_norm_backward_parallel(grad, x, weight, mean, rstd, dx, dweight_parts, dbias_parts):
    """layer_norm_rows_backward on threads: P = dweight_parts.shape[0] parts, part p covering rows
    N·p//P … N·(p+1)//P − 1 and adding into dweight_parts[p], dbias_parts[p] (float64 (P, D)
    zeros) only, so that no two threads write one accumulator. One prange over the parts."""
    parts, n = dweight_parts.shape[0], x.shape[0]
    ### BEGIN SOLUTION
    for p in prange(parts):
        layer_norm_rows_backward(grad, x, weight, mean, rstd, dx, dweight_parts[p], dbias_parts[p],
                                 n * p // parts, n * (p + 1) // parts)
    ### END SOLUTION

# %%
def test_unit_layer_norm_backward_parallel():
    rng = np.random.default_rng(25)
    x, grad = rng.standard_normal((4000, 64)), rng.standard_normal((4000, 64))
    w = 1 + 0.1 * rng.standard_normal(64)
    mean, rstd = x.mean(axis=1), 1 / np.sqrt(x.var(axis=1) + 1e-5)
    dx, dw, db = np.empty_like(x), np.zeros(64), np.zeros(64)
    layer_norm_rows_backward(grad, x, w, mean, rstd, dx, dw, db, 0, len(x))
    if numba is not None:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    parts = 4
    pdx, dw_parts, db_parts = np.empty_like(x), np.zeros((parts, 64)), np.zeros((parts, 64))
    layer_norm_backward_parallel(grad, x, w, mean, rstd, pdx, dw_parts, db_parts)
    xhat = (x - mean[:, None]) * rstd[:, None]
    for p in range(parts):
        rows = slice(4000 * p // parts, 4000 * (p + 1) // parts)
        assert np.allclose(dw_parts[p], (grad[rows] * xhat[rows]).sum(axis=0), rtol=1e-9), (
            f"dweight_parts[{p}] is not the sum over part {p}'s rows: each part must add into its OWN row of "
            "dweight_parts (a shared accumulator races: threads overwrite each other's additions)")
    assert np.allclose(pdx, dx, rtol=1e-12), "dx differs from the one-thread kernel: every row, exactly once"
    assert np.allclose(dw_parts.sum(axis=0), dw, rtol=1e-9) and np.allclose(db_parts.sum(axis=0), db, rtol=1e-9), \
        "the parts' sums must add up to the one-thread dweight and dbias"
    print("✓ layer_norm_backward_parallel: one accumulator per part, the one-thread result")


test_unit_layer_norm_backward_parallel()

# %% [markdown]
# Time it against the one-thread kernel at the milestone's size (12·64 rows of 128) and at
# 100 times that. Before running: does the second thread pay for waking it at the small size?

# %%
for rows_count in (768, 76_800) if numba else ():  # plain Python loops would take minutes
    xs = np.random.default_rng(26).standard_normal((rows_count, 128)).astype(np.float32)
    gs, ws = np.ones_like(xs), np.ones(128, np.float32)
    means, rstds = xs.mean(axis=1).astype(np.float64), 1 / np.sqrt(xs.var(axis=1).astype(np.float64) + 1e-5)
    dxs = np.empty_like(xs)
    one = measure_latency(lambda: layer_norm_rows_backward(gs, xs, ws, means, rstds, dxs, np.zeros(128), np.zeros(128),
                                                           0, rows_count), warmup=2, repeats=20)
    two = measure_latency(lambda: layer_norm_backward_parallel(gs, xs, ws, means, rstds, dxs, np.zeros((2, 128)),
                                                               np.zeros((2, 128))), warmup=2, repeats=20)
    print(f"{rows_count:6d} rows: one thread {one.median_s * 1e3:.3f} ms, prange over 2 parts "
          f"{two.median_s * 1e3:.3f} ms ({numba.get_num_threads()} threads)")
if numba is None:
    print("Numba is not installed: no timing (the kernels run as plain Python here)")

# %% [markdown]
# ## 7. A multi-tensor optimizer: AdamW over one flat buffer
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
#
# Then the same update once more, as a compiled kernel (section 6): `adamw_kernel` walks the
# flat arrays once, element by element, instead of a dozen NumPy passes. To stay bit-for-bit
# AdamW it must round exactly as NumPy does: every scalar comes in already converted to the
# arrays' dtype (NumPy converts a Python float to float32 before it multiplies a float32
# array), the operations come in module 06's order, and there is **no fastmath** (a fused
# multiply-add rounds once where NumPy rounds twice). `FusedAdamW` uses the kernel when Numba
# imports (`compiled=None`), the NumPy update with `compiled=False`.

# %%
#| export
@kernel()
def adamw_kernel(p, g, m, v, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_root, eps, step_size):
    """AdamW on flat 1-D arrays p, g, m, v (one dtype), in place, element by element; every
    scalar already in the arrays' dtype. For each i, in this order and with these roundings:
        p_i = p_i·decay                                 (decay = 1 − lr·wd; 1 for no decay)
        m_i = m_i·beta1 + g_i·one_minus_beta1
        v_i = v_i·beta2 + (g_i·g_i)·one_minus_beta2
        p_i = p_i − (m_i / (sqrt(v_i) / bias_root + eps))·step_size
    with bias_root = sqrt(1 − β2^t) and step_size = lr / (1 − β1^t). No new arrays.
    """
    ### BEGIN SOLUTION
    for i in range(p.shape[0]):
        weight = p[i] * decay
        first = m[i] * beta1 + g[i] * one_minus_beta1
        second = v[i] * beta2 + (g[i] * g[i]) * one_minus_beta2
        m[i] = first
        v[i] = second
        p[i] = weight - (first / (np.sqrt(second) / bias_root + eps)) * step_size
    ### END SOLUTION

# %%
#| export
class FusedAdamW(AdamW):
    """AdamW (module 06) whose step runs on one flat buffer: the same updates, bit for bit.

    Every parameter's `.data` becomes a view into `self.flat` (all parameters end to end,
    group after group); `state[i]["exp_avg"]` and `["exp_avg_sq"]` are views into the flat
    moments `self.exp_avg`, `self.exp_avg_sq` (so `state_dict()` is AdamW's, with type
    "FusedAdamW"). All parameters must share one dtype and device (ValueError otherwise).
    The state exists from construction on (zeros, step 0), not from the first step.
    compiled -- each group's update by adamw_kernel (True), by _group_update's NumPy calls
                (False), or None: the kernel when Numba imports. CuPy and float16 buffers
                always take _group_update.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, compiled: bool | None = None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.compiled = NUMBA_AVAILABLE if compiled is None else bool(compiled)
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
        update = self._compiled_update if self.compiled and compilable(self.flat) else self._group_update
        for (group, states), (lo, hi) in zip(groups, self.group_ranges):
            t = states[0]["step"] + 1
            update(self.flat[lo:hi], self.grad_flat[lo:hi], self.exp_avg[lo:hi],
                               self.exp_avg_sq[lo:hi], self.work[lo:hi], t, group)
            for state in states:
                state["step"] = t

    def _compiled_update(self, p: Any, g: Any, m: Any, v: Any, work: Any, t: int, settings: dict[str, Any]) -> None:
        """_group_update's arguments, the update by adamw_kernel: the scalars converted to p's dtype
        as NumPy converts them (`work` is not needed: the kernel keeps its intermediates in registers)."""
        lr, (beta1, beta2), eps, weight_decay = (settings["lr"], settings["betas"], settings["eps"],
                                                 settings["weight_decay"])
        real = p.dtype.type
        adamw_kernel(p, g, m, v, real(1 - lr * weight_decay), real(beta1), real(1 - beta1), real(beta2),
                     real(1 - beta2), real(math.sqrt(1 - beta2 ** t)), real(eps), real(lr / (1 - beta1 ** t)))

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


def adamw_reference(p, g, m, v, t, lr, beta1, beta2, eps, wd, *, decay_first=True, decay_lr=True, l2=False,
                    one_minus_beta1=True, square=True, stale=False, bc1=True, bc2=True, eps_inside=False,
                    sign=1.0, t_shift=0):
    """AdamW's update of (p, m, v) in module 06's order, or one of the classic slips (the keywords).
    Returns the new (p, m, v); the inputs are not changed."""
    p, g, m, v = p.copy(), g.copy(), m.copy(), v.copy()
    t = t + t_shift
    if l2 and wd:
        g = g + wd * p
    if decay_first and not l2 and wd:
        p *= 1 - (lr if decay_lr else 1.0) * wd
    m = beta1 * m + ((1 - beta1) * g if one_minus_beta1 else g)
    v = beta2 * v + (1 - beta2) * (((1 - beta1) * g * g if stale else g * g) if square else g)
    step_size = lr / (1 - beta1 ** t) if bc1 else lr
    if eps_inside:
        denom = np.sqrt(v / (1 - beta2 ** t) + eps)
    else:
        denom = np.sqrt(v) / (math.sqrt(1 - beta2 ** t) if bc2 else 1.0) + eps
    p -= sign * step_size * (m / denom)
    if not decay_first and wd:
        p *= 1 - lr * wd
    return p, m, v


ADAMW_SLIPS = {  # what the slip is, in words -> the keywords of adamw_reference that make it
    "m's update adds the whole gradient: m = β1·m + (1 − β1)·g, the (1 − β1) is missing": dict(one_minus_beta1=False),
    "v's update takes the gradient, not its square: v = β2·v + (1 − β2)·g·g": dict(square=False),
    "v's update used `work` while it still held (1 − β1)·g from m's update: compute g·g into it first "
    "(xp.multiply(g, g, out=work))": dict(stale=True),
    "the bias correction of m is missing: step_size = lr / (1 − β1^t)": dict(bc1=False),
    "the bias correction of v is missing: denom = sqrt(v) / sqrt(1 − β2^t) + eps": dict(bc2=False),
    "eps is added under the square root: denom = sqrt(v) / sqrt(1 − β2^t) + eps, eps outside": dict(eps_inside=True),
    "the decay is applied after the Adam step: module 06 decays p first (p *= 1 − lr·wd), then steps": dict(decay_first=False),
    "the decay is not scaled by lr: p *= 1 − lr·wd, not 1 − wd": dict(decay_lr=False),
    "weight decay was added to the gradient (L2, Adam's way): AdamW shrinks p itself (p *= 1 − lr·wd) and leaves g "
    "alone": dict(l2=True),
    "the step climbs the gradient: p -= step_size·m/denom, not +=": dict(sign=-1.0),
    "the bias corrections use t + 1: t is already the step number AFTER this step (1 on the first)": dict(t_shift=1),
    "the bias corrections use t − 1: t is already the step number AFTER this step (1 on the first)": dict(t_shift=-1),
}
ROUNDED_DIFFERENTLY = ("the same formula, rounded differently: AdamW computes sqrt(v) / sqrt(1 − β2^t) (math.sqrt "
                       "for the scalar), and only the same operations in the same order are bit-for-bit")


def same_change(got: np.ndarray, wrong: np.ndarray, before: np.ndarray) -> bool:
    """Whether `got` and `wrong` changed `before` by the same amounts (to 1e-9 of the change): a slip that
    changes p by 1e-7 of itself must not pass for one that changes it by 1e-16."""
    with np.errstate(all="ignore"):
        return bool(np.allclose(got - before, wrong - before, rtol=1e-9, atol=0, equal_nan=True))


def adamw_slip(what: str, got: np.ndarray, inputs: tuple, settings: tuple, index: int) -> str:
    """The classic slip whose `what` (index 0 p, 1 m, 2 v of adamw_reference) equals `got`, in words; "" if none."""
    before = inputs[index + 1 if index else 0]
    right = adamw_reference(*inputs, *settings)[index]
    with np.errstate(all="ignore"):
        for words, slip in ADAMW_SLIPS.items():
            wrong = adamw_reference(*inputs, *settings, **slip)[index]
            if same_change(got, wrong, before) and not same_change(right, wrong, before):  # a slip that shows here
                return words
    return ROUNDED_DIFFERENTLY if same_change(got, right, before) else ""


def check_group_update(optimizer) -> None:
    """Run optimizer._group_update on small known arrays (step 3, with and without decay) and
    raise an AssertionError naming the slip when p, m or v is not AdamW's, bit for bit."""
    rng = np.random.default_rng(11)
    size = 12
    for wd in (0.5, 0.0):
        lr, betas, eps, t = 0.1, (0.9, 0.99), 1e-8, 3
        p, g = rng.standard_normal(size), rng.standard_normal(size)
        m, v = 0.1 * rng.standard_normal(size), 0.1 * rng.random(size)
        inputs, settings = (p.copy(), g.copy(), m.copy(), v.copy(), t), (lr, betas[0], betas[1], eps, wd)
        want_p, want_m, want_v = adamw_reference(*inputs, *settings)
        work = np.empty(size)
        group = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": wd}
        with np.errstate(all="ignore"):
            type(optimizer)._group_update(optimizer, p, g, m, v, work, t, group)
        where = f"FusedAdamW._group_update (weight_decay {wd}, step t = {t})"
        if not np.array_equal(g, inputs[1]):
            raise AssertionError(f"{where} changed g in place" + (
                " (wd·p added to it: weight decay as L2, Adam's way): AdamW shrinks p itself (p *= 1 − lr·wd)"
                if np.allclose(g, inputs[1] + wd * inputs[0]) else ": compute into `work`, never into g"))
        for index, name, got, want in ((1, "m", m, want_m), (2, "v", v, want_v)):
            if np.array_equal(got, inputs[index + 1]):  # inputs are (p, g, m, v, t)
                raise AssertionError(f"{where}: {name} did not change: update it in place ({name} *= …; {name} += …); "
                                     f"`{name} = …` only rebinds the local name, and the optimizer's state stays")
            if not np.array_equal(got, want):
                slip = adamw_slip(name, got, inputs, settings, index)
                raise AssertionError(f"{where}: {name} differs from AdamW's by up to {np.abs(got - want).max():.2e}: "
                                     + (slip or f"{name} = β·{name} + (1 − β)·" + ("g" if name == "m" else "g·g")))
        if np.array_equal(p, inputs[0]):
            raise AssertionError(f"{where}: p did not change: write into p in place (p -= …); `p = p - …` only "
                                 "rebinds the local name")
        if not np.array_equal(p, want_p):
            slip = ""
            first = optimizer.param_groups[0]["weight_decay"]  # a slip reads the first group's, not this one's
            if first != wd and same_change(p, adamw_reference(*inputs, *settings[:4], first)[0], inputs[0]):
                slip = (f"p was decayed with weight_decay {first} (the first group's), not this group's {wd}: use "
                        "the group's own settings['weight_decay']")
            if wd != 0 and same_change(p, adamw_reference(*inputs, *settings[:4], 0.0)[0], inputs[0]):
                slip = "p was not decayed: AdamW first shrinks p (p *= 1 − lr·wd) when the group's weight_decay is not 0"
            if wd != 0 and same_change(p, inputs[0] * (1 - lr * wd), inputs[0]):
                slip = ("p changed only by the decay: the step never reached it (`p = p - …` only rebinds the local "
                        "name; write p -= … in place)")
            slip = slip or adamw_slip("p", p, inputs, settings, 0)
            raise AssertionError(f"{where}: p differs from AdamW's by up to {np.abs(p - want_p).max():.2e}: " + (
                slip or "follow module 06's operations in its order (decay first, then m and v in place, bias "
                        "corrections with step t, sqrt(v)/sqrt(1 − β2^t) + eps, p -= step_size·m/denom)"))


def test_unit_fused_adamw():
    reference_model = GPT(19, 16, 2, 2, 8, bias=False, seed=4)
    model = GPT(19, 16, 2, 2, 8, bias=False, seed=4)
    settings = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    reference = AdamW(weight_decay_groups(reference_model, 0.1), **settings)
    fused = FusedAdamW(weight_decay_groups(model, 0.1), **settings, compiled=False)  # _group_update
    assert all(np.shares_memory(p.data, fused.flat) for p in model.parameters()), \
        "every parameter must be a view into fused.flat"
    check_group_update(fused)
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
    for dtype in (np.float32, np.float64):  # the kernel, in both dtypes: bit for bit too
        reference_model = GPT(19, 16, 2, 2, 8, bias=False, seed=4, dtype=dtype)
        model = GPT(19, 16, 2, 2, 8, bias=False, seed=4, dtype=dtype)
        expected = train_steps(reference_model, AdamW(weight_decay_groups(reference_model, 0.1), **settings))
        got = train_steps(model, FusedAdamW(weight_decay_groups(model, 0.1), **settings, compiled=True))
        for name, a, b in zip(names, expected, got):
            assert np.array_equal(a, b), (
                f"adamw_kernel ({np.dtype(dtype).name}): {name} after 3 steps differs from AdamW's by up to "
                f"{np.abs(a - b).max():.2e}: module 06's operations in its order, p·decay first, m and v before p, "
                "sqrt(v)/bias_root + eps, then ·step_size; and no fastmath (a fused multiply-add rounds once where "
                "NumPy rounds twice)")
    print("✓ FusedAdamW: bit-for-bit AdamW over 3 steps (NumPy update and adamw_kernel), decay on the matrices "
          "only, parameters stay views")


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
# ## 8. Vectorisation, measured: loops, tiles and BLAS
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
import itertools


class CountingArray(np.ndarray):
    """A NumPy array that counts the matrix products it takes part in as the left operand."""
    products = 0

    def __matmul__(self, other):
        CountingArray.products += 1
        return np.asarray(self) @ np.asarray(other)


def blocked_matmul_slip(got: np.ndarray, a: np.ndarray, b: np.ndarray, tile: int) -> str:
    """Why blocked_matmul(a, b, tile) gave `got` instead of a @ b, told from what it computed."""
    (m, k), n = a.shape, b.shape[1]
    right = a @ b
    whole = lambda size: size // tile * tile  # noqa: E731  the part of an axis that whole tiles cover
    skipped = [f"{axis} {whole(size)}..{size - 1}" for axis, size, edge in
               (("rows", m, got[whole(m):, :]), ("columns", n, got[:, whole(n):]))
               if size % tile and not edge.any()]
    if k % tile and np.allclose(got[:whole(m), :whole(n)], (a[:, :whole(k)] @ b[:whole(k), :])[:whole(m), :whole(n)]):
        skipped.append(f"depth {whole(k)}..{k - 1}")
    if skipped:
        return (f"the edge tiles were skipped ({', '.join(skipped)} are missing): when tile does not divide a size, "
                "the last tile is smaller, and range(0, size, tile) includes it")
    if not got.any():
        return ("the output is all zeros: no tile product was added to it (are the tile slices empty? a tile is "
                "a[i:i+tile, p:p+tile], the end excluded)")
    last = (k - 1) // tile * tile
    if k > tile and np.allclose(got, a[:, last:] @ b[last:, :]):
        return "only the last tile depth is in the output: add every tile depth p (+=), do not assign (=)"
    with np.errstate(all="ignore"):
        times = got / right  # how many times each output entry was added
    if tile > 1 and np.allclose(times, np.round(times), atol=1e-6) and times.max() > 1.5:
        return (f"some output entries were added up to {int(round(times.max()))} times: tiles overlap, so a loop "
                "steps by 1 where it must step by `tile` (range(0, size, tile))")
    short = np.zeros_like(right)  # every tile one short in each direction: i:i+tile-1
    for r, c, d in itertools.product(range(0, m, tile), range(0, n, tile), range(0, k, tile)):
        short[r:r + tile - 1, c:c + tile - 1] += a[r:r + tile - 1, d:d + tile - 1] @ b[d:d + tile - 1, c:c + tile - 1]
    if tile > 1 and np.allclose(got, short):
        return ("every tile is one row, column and depth short (i:i+tile-1): a slice's end is already excluded, "
                "so the tile is a[i:i+tile, p:p+tile]")
    return "add every tile depth p (+=), and start from zeros"


def tile_products_slip(got: int, shape: tuple, tile: int) -> str:
    """Which loop ran over the wrong range, told from the number of tile products `got` for (m, k) @ (k, n)."""
    m, k, n = shape
    counts = {name: math.ceil(size / tile) for name, size in (("m", m), ("k", k), ("n", n))}
    for loop, axis in (("depth p", "k"), ("row i", "m"), ("column j", "n")):
        for other, size in (("m", m), ("k", k), ("n", n)):
            if other != axis and got == counts["m"] * counts["k"] * counts["n"] // counts[axis] * math.ceil(size / tile):
                return (f"the {loop} loop runs over {other} ({size}), not {axis} ({dict(m=m, k=k, n=n)[axis]}): "
                        f"range(0, {axis}, tile)")
    return "loop over tiles of `tile` along m, n AND k (a tiled product that ignores its tile is not tiled)"


def test_unit_blocked_matmul():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((10, 7)), rng.standard_normal((7, 9))
    for tile in (3, 4, 1, 16):
        try:
            got = blocked_matmul(a, b, tile)
        except ValueError as err:  # NumPy's matmul names shapes, not the slip
            raise AssertionError(
                f"tile {tile} on a (10, 7) @ b (7, 9) raised {err!r}: a tile product is a[i:i+tile, p:p+tile] "
                "(rows i, depth p) @ b[p:p+tile, j:j+tile] (depth p, columns j); both are indexed by the depth p "
                "where they meet") from None
        assert got.shape == (10, 9), f"tile {tile}: expected shape (10, 9), got {got.shape}"
        assert np.allclose(got, a @ b, atol=1e-12), (
            f"tile {tile}: differs from a @ b by up to {np.abs(got - a @ b).max():.2e}: "
            + blocked_matmul_slip(got, a, b, tile))
    # tile 2 on (12, 5) @ (5, 8) tells the loops apart: 6, 3 and 4 tiles along m, k and n
    for (m, k, n), tile in (((10, 7, 9), 3), ((12, 5, 8), 2)):
        CountingArray.products = 0
        blocked_matmul(rng.standard_normal((m, k)).view(CountingArray), rng.standard_normal((k, n)), tile)
        expected = math.ceil(m / tile) * math.ceil(n / tile) * math.ceil(k / tile)
        assert CountingArray.products == expected, (
            f"tile {tile} on ({m}, {k}) @ ({k}, {n}): expected {expected} tile products, got {CountingArray.products}: "
            + tile_products_slip(CountingArray.products, (m, k, n), tile))
    assert blocked_matmul(a.astype(np.float32), b.astype(np.float32), 4).dtype == np.float32, \
        "keep the inputs' dtype (float32 in, float32 out): np.zeros(..., dtype=np.result_type(a, b))"
    try:
        mixed = blocked_matmul(np.arange(6).reshape(2, 3), b[:3, :2] / 3, 2)
    except TypeError as err:  # NumPy refuses to add float64 tiles into an int64 output
        raise AssertionError(f"int64 a @ float64 b raised {type(err).__name__}: {err}: the output was made with a's "
                             "dtype (int64); make it with the result type of BOTH inputs, np.result_type(a, b)") from None
    assert mixed.dtype == np.float64 and np.allclose(mixed, np.arange(6).reshape(2, 3) @ (b[:3, :2] / 3)), (
        f"int64 a @ float64 b must give float64 (np.result_type(a, b)), got {mixed.dtype}: the output's dtype is "
        "the result type of BOTH inputs, not a's")
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
# ## 9. The whole step, fused against plain
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
# ## 10. The allocator: memory handed back, then faulted in again
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


# The milestone's size (section 9's small model allocates too little to show it).
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
# Run the timing of section 9 again after this cell to see what the faults cost on your
# machine (the benchmark measures both settings, with PyTorch in the same process).

# %% [markdown]
# ## 11. Two cores: half of the batch each
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
# * A compiled kernel (Numba) does a whole fused formula in one pass over memory: LayerNorm,
#   bias + GELU, the softmax with its loss, the causal softmax and AdamW, each one recorded op
#   with its backward rule. Subtract the row's maximum before every exp; fastmath only where it
#   changes rounding and nothing else, never in a softmax or where bits must match; threads
#   (`prange`) need one accumulator per part. `fuse(model)` uses the kernels when Numba imports.
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
# 4. **One more kernel.** The profile of the compiled model still shows the embedding's
#    backward (a scatter-add of rows). Write it as a kernel with its op, and check it against
#    module 11's rule. Is it worth it at the milestone's size?
# 5. **Tiles in C.** On the roofline of section 8, at what tile size does a tile's intensity
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
# 5. In section 11, how much faster are two parts on two threads than the whole batch on one?
#    Profile one part (module 14): how much of its time is Python between NumPy calls, which
#    the two threads cannot run at once? Does that explain the gap to 2×?
# 6. In section 6, time each compiled op against its NumPy fusion at the milestone's shapes
#    (`tito bench acceleration` prints them beside their roofline bounds). Which comes closest
#    to its bound? Which gains least over NumPy, and what in its kernel would you change?
