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
# # Module 03: Layers
#
# > Parameters, the containers that own them, and the first real layer.
#
# A model is a function with knobs. The knobs are the **parameters**: tensors with
# `requires_grad=True` that an optimizer (module 06) will nudge after every batch. A
# real model has thousands to billions of them, spread over layers nested inside
# layers, so the framework needs bookkeeping:
#
# * **find** every parameter, in a fixed order, with a readable name (`fc1.weight`);
# * **switch** every layer between training and evaluation (dropout behaves differently);
# * **save and load** all parameters at once (`state_dict`).
#
# `Module` does that bookkeeping. Assigning a parameter tensor or a child module to an
# attribute (`self.fc1 = Linear(4, 8)`) **registers** it; everything else follows from
# the registry. On top of `Module` you build `Linear` (with the initialisation PyTorch
# uses, and why it scales by the fan-in), `Dropout`, `Sequential` and `ModuleList`.
#
# Layers compute with `Tensor` operations (`@`, `+`, `*`) only, so module 05's
# autograd differentiates them with no extra code here.

# %%
#| default_exp core.layers

# %%
#| export
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator

import numpy as np

from tinytorch.core.activations import Activation
from tinytorch.core.tensor import Tensor, array_module, to_array

# %% [markdown]
# ## 1. What counts as a parameter, and what counts as a child
#
# Two small predicates decide what an attribute assignment registers:
#
# * a **parameter** is a `Tensor` with `requires_grad=True` that was created directly
#   (a *leaf*: no recorded operation made it). A tensor *computed* from parameters also
#   requires a gradient, but caching one (`self.last_scores = q @ k`) must not turn it
#   into something the optimizer updates, so it is not registered;
# * a **child** is a `Module` or an activation layer from module 02 (no parameters, but
#   it switches train/eval with its parent and shows in the printout); a plain `list`
#   (or tuple) of children and parameters is a child too, its items named `name.0`,
#   `name.1`, ... exactly as PyTorch's `ModuleList` names them.

# %%
#| export
def _is_parameter(value: Any) -> bool:
    """A leaf Tensor that requires a gradient (not the result of a recorded operation)."""
    return isinstance(value, Tensor) and value.requires_grad and value._node is None


def _is_child(value: Any) -> bool:
    return isinstance(value, (Module, Activation))


def _is_child_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_is_child(v) or _is_parameter(v) for v in value)


# %% [markdown]
# ## 2. `Module`: registration by assignment
#
# Python calls `__setattr__` for every `self.name = value`. `Module` overrides it to
# keep two ordered registries (dicts used as ordered sets of attribute names):
# `_param_names` for parameters and `_child_names` for children, then stores the value
# as usual. Re-assigning a name keeps its place in the order; assigning something of
# another kind (e.g. `self.bias = None`) moves or removes it from the registries.
#
# The order is **deterministic**: a module's own parameters in the order they were
# assigned, then each child's, recursively, in the order the children were assigned.
# That is PyTorch's order too, so `named_parameters()` gives the same names in the same
# order as the equivalent PyTorch model (with one difference, below: our `Linear`
# stores its weight as `(in, out)`).
#
# What the registry buys:
#
# | method | does |
# |---|---|
# | `named_parameters()` | `[("fc1.weight", Tensor), ...]`, each tensor once (shared weights are not repeated) |
# | `parameters()` | the tensors of `named_parameters()`: what an optimizer receives |
# | `zero_grad()` | every parameter's `.grad = None` |
# | `train(mode=True)` / `eval()` | set `.training` on this module and every child |
# | `state_dict()` | `{name: NumPy copy}` of every parameter, then every buffer |
# | `load_state_dict(d)` | copy values back in; refuses missing or extra names and wrong shapes |
# | `register_buffer(name, t)` / `buffers()` | state that is saved and moved but not learned (no gradient) |
# | `to(device)` | move every parameter and buffer to `"cpu"` or `"cuda"`, in place |
#
# A subclass defines `__init__` (calling `super().__init__()` first) and `forward`;
# `module(x)` calls `forward(x)`.

# %%
#| export
class Module:
    """Base class of every layer and model: parameters registered by attribute assignment.

    Subclasses call `super().__init__()`, assign parameters (Tensors with
    requires_grad=True) and child modules as attributes, and define `forward`.
    """

    training: bool = True

    def __init__(self) -> None:
        self._registry("_param_names")
        self._registry("_child_names")
        self._registry("_buffer_names")
        object.__setattr__(self, "training", True)

    def _registry(self, kind: str) -> dict:
        """The ordered set of names of one kind (created on first use)."""
        return self.__dict__.setdefault(kind, {})

    def __setattr__(self, name: str, value: Any) -> None:
        """Store the attribute; register it as a parameter or a child if it is one."""
        ### BEGIN SOLUTION
        params, children = self._registry("_param_names"), self._registry("_child_names")
        if _is_parameter(value):
            children.pop(name, None)
            params.setdefault(name, None)  # an existing name keeps its position
        elif _is_child(value) or _is_child_list(value):
            params.pop(name, None)
            children.setdefault(name, None)
        else:
            params.pop(name, None)
            children.pop(name, None)
        object.__setattr__(self, name, value)
        ### END SOLUTION

    def __delattr__(self, name: str) -> None:
        self._registry("_param_names").pop(name, None)
        self._registry("_child_names").pop(name, None)
        self._registry("_buffer_names").pop(name, None)
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        """Keep `tensor` as `self.<name>`: state that is not learned (no gradient, not in
        `parameters()`) but belongs to the model: it moves with `to(device)` and is saved in
        `state_dict()`. Example: module 11's fixed sinusoidal position table."""
        if not isinstance(tensor, Tensor) or tensor.requires_grad:
            raise TypeError(f"register_buffer({name!r}, ...): a buffer is a Tensor without requires_grad.")
        object.__setattr__(self, name, tensor)
        self._registry("_buffer_names").setdefault(name, None)

    # ---- running --------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward().")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ---- walking the tree ---------------------------------------------------------------
    def named_children(self) -> list[tuple[str, Any]]:
        """Direct children in registration order; items of a registered list are `name.i`."""
        out = []
        for name in self._registry("_child_names"):
            value = self.__dict__[name]
            if isinstance(value, (list, tuple)):
                out.extend((f"{name}.{i}", item) for i, item in enumerate(value) if _is_child(item))
            else:
                out.append((name, value))
        return out

    def children(self) -> list[Any]:
        return [child for _, child in self.named_children()]

    def named_modules(self, prefix: str = "") -> list[tuple[str, Any]]:
        """This module (named `prefix`, "" at the top) and every descendant, depth first."""
        out = [(prefix, self)]
        for name, child in self.named_children():
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(child, Module):
                out.extend(child.named_modules(full))
            else:
                out.append((full, child))
        return out

    def modules(self) -> list[Any]:
        return [m for _, m in self.named_modules()]

    # ---- parameters ------------------------------------------------------------------------
    def named_parameters(self, prefix: str = "") -> list[tuple[str, Tensor]]:
        """[(dotted name, parameter)] in registration order, own parameters first, then each
        child's; a tensor reachable twice (shared weights) is listed once, under its first name.
        """
        ### BEGIN SOLUTION
        found: list[tuple[str, Tensor]] = []
        seen: set[int] = set()

        def add(name: str, tensor: Tensor) -> None:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                found.append((prefix + name, tensor))

        for name in self._registry("_param_names"):
            add(name, self.__dict__[name])
        for name in self._registry("_child_names"):
            value = self.__dict__[name]
            items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
            for i, item in items:
                key = name if i is None else f"{name}.{i}"
                if isinstance(item, Tensor) and item._node is None:
                    add(key, item)
                elif isinstance(item, Module):
                    for sub, tensor in item.named_parameters():
                        add(f"{key}.{sub}", tensor)
        return found
        ### END SOLUTION

    def named_buffers(self, prefix: str = "") -> list[tuple[str, Tensor]]:
        """[(dotted name, buffer)]: this module's buffers, then each child module's."""
        found = [(prefix + name, self.__dict__[name]) for name in self._registry("_buffer_names")]
        for name, child in self.named_children():
            if isinstance(child, Module):
                found.extend(child.named_buffers(f"{prefix}{name}."))
        return found

    def buffers(self) -> list[Tensor]:
        return [tensor for _, tensor in self.named_buffers()]

    def to(self, device: str) -> "Module":
        """Move every parameter and buffer to `device` ("cpu" or "cuda") in place; returns self.

        The tensors stay the same objects (an optimizer made before the move still holds
        them); only their `.data` (and `.grad`) move.
        """
        for tensor in [*self.parameters(), *self.buffers()]:
            if tensor.device != device:
                tensor.data = to_array(tensor.data, device=device)
                if tensor.grad is not None:
                    tensor.grad = Tensor(to_array(tensor.grad.data, device=device))
        return self

    def parameters(self) -> list[Tensor]:
        """Every parameter, once, in the order of `named_parameters()`."""
        ### BEGIN SOLUTION
        return [tensor for _, tensor in self.named_parameters()]
        ### END SOLUTION

    def zero_grad(self) -> None:
        """Forget accumulated gradients: every parameter's `.grad` becomes None."""
        ### BEGIN SOLUTION
        for tensor in self.parameters():
            tensor.grad = None
        ### END SOLUTION

    # ---- modes ----------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set `.training = mode` here and in every child, recursively; returns self."""
        ### BEGIN SOLUTION
        self.training = bool(mode)
        for child in self.children():
            child.train(mode)
        return self
        ### END SOLUTION

    def eval(self) -> "Module":
        """Evaluation mode (`train(False)`): dropout off. Returns self."""
        return self.train(False)

    # ---- saving and loading -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: NumPy copy}: every parameter in `named_parameters()` order, then every buffer."""
        ### BEGIN SOLUTION
        tensors = [*self.named_parameters(), *self.named_buffers()]
        return {name: np.array(tensor.numpy(), copy=True) for name, tensor in tensors}
        ### END SOLUTION

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> tuple[list[str], list[str]]:
        """Copy values (arrays, Tensors or lists) into the parameters and buffers, by name.

        Each value is copied and cast to its parameter's dtype and device. With
        strict=True, missing or unexpected names raise KeyError listing them; a value
        whose shape differs raises ValueError naming both shapes. Nothing is changed
        unless everything checks out. Returns (missing names, unexpected names).
        """
        ### BEGIN SOLUTION
        own = dict([*self.named_parameters(), *self.named_buffers()])
        missing = [name for name in own if name not in state_dict]
        unexpected = [name for name in state_dict if name not in own]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict for {type(self).__name__}: missing keys {missing}, "
                f"unexpected keys {unexpected}."
            )
        new_values = {}
        mismatched = []
        for name, value in state_dict.items():
            if name not in own:
                continue
            array = to_array(value, device=own[name].device)
            if tuple(array.shape) != own[name].shape:
                mismatched.append(f"{name}: checkpoint shape {tuple(array.shape)}, model shape {own[name].shape}")
            new_values[name] = array
        if mismatched:
            raise ValueError(f"load_state_dict for {type(self).__name__}: shape mismatch for " + "; ".join(mismatched))
        for name, array in new_values.items():
            own[name].data = array_module(array).array(array, dtype=own[name].dtype, copy=True)
        return missing, unexpected
        ### END SOLUTION

    # ---- printing -----------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        children = self.named_children()
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({name}): " + repr(child).replace("\n", "\n  ") for name, child in children]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


def count_parameters(module: Module) -> int:
    """Number of scalar parameters (each shared tensor counted once)."""
    ### BEGIN SOLUTION
    return sum(tensor.size for tensor in module.parameters())
    ### END SOLUTION


# %% [markdown]
# A first module by hand: a parameter assigned in `__init__`, a list of parameters,
# and a child. The names come out in registration order.

# %%
class Scale(Module):
    def __init__(self):
        super().__init__()
        self.gain = Tensor([2.0], requires_grad=True)
        self.note = "not a parameter"
        self.frozen_data = Tensor([1.0])  # requires_grad=False: plain data, not a parameter

    def forward(self, x):
        return x * self.gain


class Pair(Module):
    def __init__(self):
        super().__init__()
        self.inner = Scale()
        self.offset = Tensor([0.5], requires_grad=True)
        self.extras = [Tensor([1.0], requires_grad=True), Scale()]

    def forward(self, x):
        return self.inner(x) + self.offset


pair = Pair()
for name, p in pair.named_parameters():
    print(f"{name:15s} shape {p.shape}")
print(pair)

# %%
def test_unit_module_registration():
    m = Pair()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["offset", "inner.gain", "extras.0", "extras.1.gain"], names
    assert m.parameters()[0] is m.offset and len(m.parameters()) == 4
    assert np.allclose(m(Tensor([3.0])).numpy(), [6.5])  # 3 * gain 2 + offset 0.5
    m.offset = None  # no longer a parameter
    assert [n for n, _ in m.named_parameters()][0] == "inner.gain"
    shared = Pair()
    shared.extras = [shared.inner, shared.inner]  # the same module twice: counted once
    assert len(shared.parameters()) == 2
    print("✓ Module registers parameters and children by assignment")


test_unit_module_registration()

# %%
def test_unit_module_modes_and_state():
    m = Pair()
    assert m.training and m.inner.training
    assert m.eval() is m and not m.training and not m.inner.training and not m.extras[1].training
    m.train()
    assert m.inner.training
    for p in m.parameters():
        p.grad = Tensor(np.ones(p.shape, dtype=np.float32))
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    state = m.state_dict()
    assert list(state) == ["offset", "inner.gain", "extras.0", "extras.1.gain"]
    state["offset"][0] = 99.0  # a copy: the model is unchanged
    assert m.offset.numpy()[0] == 0.5
    other = Pair()
    other.load_state_dict(state)
    assert other.offset.numpy()[0] == 99.0
    try:
        other.load_state_dict({"offset": np.zeros(1)})
    except KeyError as err:
        assert "inner.gain" in str(err)
    else:
        raise AssertionError("missing keys must raise KeyError")
    print("✓ train/eval, zero_grad, state_dict round trip")


test_unit_module_modes_and_state()

# %% [markdown]
# ## 3. `Linear`: `y = x @ W + b`
#
# The fully connected layer. With `in_features = n` and `out_features = m`:
#
# * `weight` has shape `(n, m)` (TinyTorch stores it input-major, so the forward is a
#   plain `x @ W`; PyTorch stores the transpose `(m, n)` and computes `x @ W.T`);
# * `bias` has shape `(m,)`, or is `None` with `bias=False`;
# * `x` may have any leading dimensions: `(n,)`, `(B, n)`, `(B, T, n)` give `(m,)`,
#   `(B, m)`, `(B, T, m)`; the matmul batches over them and the bias broadcasts.
#
# It has `n·m + m` parameters and costs `2·n·m` FLOPs per input row.
#
# ### Initialisation: why divide by the fan-in
#
# Each output is a sum of `n` products, `y_j = Σ_i x_i W_ij`. If the inputs have
# variance `v` and the weights (independent, zero-mean) variance `σ²`, the output has
# variance `n·σ²·v`. With `σ = 1` every layer multiplies the variance by `n`: after a
# few layers of width 256 the numbers overflow, and the gradients with them. To keep
# the variance steady the weight scale must shrink like `1/√n`, where `n`, the number
# of inputs feeding each output, is the **fan-in**.
#
# TinyTorch draws weight and bias from `uniform(-1/√n, 1/√n)`, as PyTorch's
# `nn.Linear` does. A uniform variable on `(-a, a)` has variance `a²/3`, so here
# `σ² = 1/(3n)` and each layer multiplies the variance by `1/3`: small but
# independent of the width. The measurement below shows all three regimes; deep ReLU
# stacks use Kaiming/He initialisation (`σ² = 2/n`) to hold the variance exactly.
#
# ### Reproducibility
#
# `Linear(n, m, seed=0)` (or `rng=0`, or `rng=np.random.default_rng(0)`) draws the same
# weights every time; passing one `Generator` to several layers makes a whole model
# reproducible while giving each layer different weights. With neither, each layer
# draws fresh random weights. `dtype=` (float32 by default) and `device=` pick where
# the parameters live.

# %%
#| export
def make_rng(rng: Any = None, seed: int | None = None) -> np.random.Generator:
    """A NumPy Generator from `rng` (a Generator, or an int seed) or `seed`; fresh if neither."""
    if rng is not None and seed is not None:
        raise ValueError("Pass either rng= or seed=, not both.")
    if isinstance(rng, np.random.Generator):
        return rng
    source = seed if rng is None else rng
    if source is not None and not isinstance(source, (int, np.integer)):
        raise TypeError(f"rng must be a numpy.random.Generator or an int seed, got {type(source).__name__}.")
    return np.random.default_rng(source)


class Linear(Module):
    """Fully connected layer: y = x @ weight + bias over any leading dimensions.

    in_features  -- n, the size of the last input dimension
    out_features -- m, the size of the last output dimension
    bias         -- add a learned (m,) bias (default True)
    dtype        -- parameter dtype (float32 default); device -- "cpu" or "cuda"
    rng / seed   -- a numpy Generator or int seed for reproducible initialisation

    weight: (n, m), bias: (m,) or None, both uniform(-1/sqrt(n), 1/sqrt(n)) as in PyTorch.
    x: (..., n) -> y: (..., m).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 dtype: Any = np.float32, device: str | None = None,
                 rng: Any = None, seed: int | None = None):
        super().__init__()
        for label, size in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(size, (int, np.integer)) or size <= 0:
                raise ValueError(f"Linear: {label} must be a positive int, got {size!r}.")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        generator = make_rng(rng, seed)
        ### BEGIN SOLUTION
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight = Tensor(generator.uniform(-bound, bound, (self.in_features, self.out_features)),
                             requires_grad=True, dtype=dtype, device=device)
        self.bias = (Tensor(generator.uniform(-bound, bound, self.out_features),
                            requires_grad=True, dtype=dtype, device=device) if bias else None)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., in_features) -> (..., out_features)."""
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"Linear({self.in_features} -> {self.out_features}) expects inputs of shape "
                f"(..., {self.in_features}), got {x.shape}; weight has shape {self.weight.shape}."
            )
        ### BEGIN SOLUTION
        out = x @ self.weight
        if self.bias is not None:
            out = out + self.bias
        return out
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


# %%
layer = Linear(3, 2, seed=0)
print(layer, "weight", layer.weight.shape, "bias", layer.bias.shape)
x = Tensor([[1.0, 2.0, 3.0]])
print("layer(x)          =", layer(x).numpy())
print("x @ W + b by hand =", x.numpy() @ layer.weight.numpy() + layer.bias.numpy())
print("a (4, 5, 3) batch ->", layer(Tensor(np.ones((4, 5, 3)))).shape)

# %%
def test_unit_linear():
    layer = Linear(3, 2, seed=0)
    assert layer.weight.shape == (3, 2) and layer.bias.shape == (2,) and layer.weight.dtype == np.float32
    assert layer.weight.requires_grad and [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    bound = 1 / math.sqrt(3)
    assert np.abs(layer.weight.numpy()).max() <= bound and np.abs(layer.bias.numpy()).max() <= bound
    layer.weight.data = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    layer.bias.data = np.array([0.5, -0.5], dtype=np.float32)
    assert np.allclose(layer(Tensor([[1.0, 2.0, 3.0]])).numpy(), [[4.5, 4.5]])
    assert layer(Tensor(np.ones((4, 5, 3)))).shape == (4, 5, 2)
    assert Linear(3, 2, bias=False).bias is None and len(Linear(3, 2, bias=False).parameters()) == 1
    assert np.array_equal(Linear(3, 2, seed=7).weight.numpy(), Linear(3, 2, rng=7).weight.numpy())
    assert Linear(3, 2, dtype=np.float64).weight.dtype == np.float64
    try:
        layer(Tensor(np.ones((2, 4))))
    except ValueError as err:
        assert "(2, 4)" in str(err)
    else:
        raise AssertionError("a wrong input size must raise ValueError")
    print("✓ Linear")


test_unit_linear()

# %% [markdown]
# ### Measuring the fan-in argument
#
# Push a batch of standard-normal inputs through 10 linear layers of width 256 (no
# activation, so only the weights act) and print the standard deviation after each
# layer, for three weight scales.

# %%
def activation_std(scale_for_fan_in, depth: int = 10, width: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    h = Tensor(rng.standard_normal((512, width)))
    stds = []
    for _ in range(depth):
        layer = Linear(width, width, bias=False, dtype=np.float64, rng=rng)
        a = scale_for_fan_in(width)
        layer.weight.data = rng.uniform(-a, a, (width, width))
        h = layer(h)
        stds.append(float(h.numpy().std()))
    return stds


schemes = {
    "uniform(±1)        ": lambda n: 1.0,
    "uniform(±1/√n) [PT]": lambda n: 1 / math.sqrt(n),
    "uniform(±√(3/n))   ": lambda n: math.sqrt(3 / n),
}
print(f"{'layer:':20s}" + "".join(f"{k:>10d}" for k in range(1, 11)))
for label, scale in schemes.items():
    print(label, "".join(f"{s:10.3g}" for s in activation_std(scale)))
print("predicted per-layer factor on the std: √(n/3) = %.2f, 1/√3 = %.3f, 1" % (math.sqrt(256 / 3), 1 / math.sqrt(3)))

# %% [markdown]
# Unscaled weights grow the signal by `√(n/3) ≈ 9.2` per layer (`1e9` after ten
# layers); the PyTorch default shrinks it by `1/√3 ≈ 0.577` per layer, whatever the
# width; `±√(3/n)` (variance exactly `1/n`) keeps it at 1. The width has disappeared
# from the last two rows: that is what dividing by the fan-in buys.
#
# ## 4. `Dropout`: noise during training only
#
# During training, `Dropout(p)` zeroes each element independently with probability `p`
# and multiplies the survivors by `1/(1-p)`. The rescaling keeps every element's
# **expected value** unchanged (`(1-p) · x/(1-p) = x`), so at evaluation time, when
# dropout is switched off (`model.eval()`), the next layer sees inputs of the same
# scale it was trained on, with no correction needed ("inverted dropout").
#
# It is implemented as `x * mask` with a constant mask tensor, so module 05's `mul` rule
# gives the right gradient: zero where dropped, `1/(1-p)` where kept. Edge cases:
# `p = 0` returns `x` unchanged; `p = 1` gives zeros; in eval mode it returns `x` itself.

# %%
#| export
class Dropout(Module):
    """Inverted dropout: in training, zero each element with probability p and scale the
    rest by 1/(1-p); identity in eval mode. Any shape; same shape and dtype out.

    p in [0, 1]; rng / seed -- a numpy Generator or int seed for reproducible masks.
    """

    def __init__(self, p: float = 0.5, *, rng: Any = None, seed: int | None = None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout probability must be between 0 and 1, got {p}.")
        self.p = float(p)
        self.rng = make_rng(rng, seed)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        ### BEGIN SOLUTION
        if not self.training or self.p == 0.0:
            return x
        xp = array_module(x.data)
        if self.p == 1.0:
            mask = xp.zeros(x.shape, dtype=x.dtype)
        else:
            keep = self.rng.random(x.shape) >= self.p
            mask = xp.asarray(keep.astype(x.dtype) / (1.0 - self.p))
        return x * Tensor(mask)
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"p={self.p}"


# %%
drop = Dropout(0.25, seed=0)
ones = Tensor(np.ones((1000, 100)))
out = drop(ones).numpy()
print(f"training: zeros {np.mean(out == 0):.4f} (p = 0.25), survivors = {out.max():.4f} (1/(1-p) = {1 / 0.75:.4f}), mean {out.mean():.4f}")
drop.eval()
print("eval: identity ->", drop(ones) is ones)

# %%
def test_unit_dropout():
    x = Tensor(np.ones((200, 500)))
    d = Dropout(0.3, seed=1)
    y = d(x).numpy()
    assert abs(np.mean(y == 0) - 0.3) < 0.01 and abs(y.mean() - 1.0) < 0.02
    assert np.allclose(y[y != 0], 1 / 0.7)
    assert d.eval()(x) is x
    assert Dropout(0.0)(x) is x
    assert not Dropout(1.0)(x).numpy().any()
    try:
        Dropout(1.5)
    except ValueError:
        pass
    else:
        raise AssertionError("p > 1 must raise ValueError")
    print("✓ Dropout (inverted, identity in eval)")


test_unit_dropout()

# %% [markdown]
# ## 5. Containers: `ModuleList` and `Sequential`
#
# `ModuleList` holds layers in a list that the registry understands: item `i` is the
# child named `"i"`, so `self.blocks = ModuleList([...])` names its parameters
# `blocks.0.weight`, `blocks.1.weight`, ... It supports `len`, indexing (negative too,
# slices give a new list), iteration and `append`. It has no `forward`: you decide how
# to call its items.
#
# `Sequential(*layers)` is a `ModuleList` whose forward feeds each layer's output into
# the next: the model of a plain stack.

# %%
#| export
class ModuleList(Module):
    """A list of modules (or activations) registered as children "0", "1", ..."""

    def __init__(self, modules: Iterable[Any] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def append(self, module: Any) -> "ModuleList":
        """Add `module` at the end (registered as child str(len(self))); returns self."""
        if not _is_child(module):
            raise TypeError(
                f"{type(self).__name__} holds Modules or activation layers, got {type(module).__name__} "
                f"{module!r}; wrap functions in a layer (e.g. ReLU() instead of relu)."
            )
        ### BEGIN SOLUTION
        setattr(self, str(len(self)), module)
        return self
        ### END SOLUTION

    def extend(self, modules: Iterable[Any]) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def __len__(self) -> int:
        return len(self._registry("_child_names"))

    def __iter__(self) -> Iterator[Any]:
        return iter([self.__dict__[name] for name in self._registry("_child_names")])

    def _new(self, items: list) -> "ModuleList":
        return ModuleList(items)

    def __getitem__(self, index: int | slice) -> Any:
        """self[i] (negative counts from the end) or self[a:b] (a new container)."""
        ### BEGIN SOLUTION
        items = list(self)
        if isinstance(index, slice):
            return self._new(items[index])
        if not -len(items) <= index < len(items):
            raise IndexError(f"index {index} is out of range for {type(self).__name__} of length {len(items)}.")
        return items[index]
        ### END SOLUTION

    def __setitem__(self, index: int, module: Any) -> None:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for {type(self).__name__} of length {len(self)}.")
        if not _is_child(module):
            raise TypeError(f"{type(self).__name__} holds Modules or activation layers, got {type(module).__name__}.")
        setattr(self, str(index % len(self)), module)


class Sequential(ModuleList):
    """Layers applied in order: Sequential(a, b, c)(x) = c(b(a(x))). Also accepts one list."""

    def __init__(self, *modules: Any):
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):
            modules = tuple(modules[0])
        super().__init__(modules)

    def _new(self, items: list) -> "Sequential":
        return Sequential(*items)

    def forward(self, x: Any) -> Any:
        ### BEGIN SOLUTION
        for module in self:
            x = module(x)
        return x
        ### END SOLUTION


# %% [markdown]
# ## 6. Counting parameters
#
# An MLP for 28×28 images: `784 → 128 → 64 → 10`. Each `Linear(n, m)` holds `n·m + m`
# numbers; activations and dropout hold none.

# %%
from tinytorch.core.activations import ReLU

rng = np.random.default_rng(0)
mlp = Sequential(Linear(784, 128, rng=rng), ReLU(), Dropout(0.1, rng=rng),
                 Linear(128, 64, rng=rng), ReLU(), Linear(64, 10, rng=rng))
print(mlp)
for name, p in mlp.named_parameters():
    print(f"  {name:10s} {str(p.shape):12s} {p.size:7,d}")
print(f"total: {count_parameters(mlp):,d} parameters = {count_parameters(mlp) * 4 / 1024:.1f} KiB in float32")
print("by hand: 784·128+128 + 128·64+64 + 64·10+10 =", 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10)
mlp.eval()
print("logits for a batch of 2:", mlp(Tensor(rng.standard_normal((2, 784)))).shape,
      "| every layer in eval mode:", all(not m.training for m in mlp.modules()))

# %%
def test_unit_containers():
    rng = np.random.default_rng(0)
    model = Sequential(Linear(4, 8, rng=rng), ReLU(), Linear(8, 2, rng=rng))
    assert len(model) == 3 and isinstance(model[1], ReLU) and model[-1] is model[2]
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert count_parameters(model) == 4 * 8 + 8 + 8 * 2 + 2
    x = Tensor(rng.standard_normal((5, 4)))
    h = np.maximum(x.numpy() @ model[0].weight.numpy() + model[0].bias.numpy(), 0)
    assert np.allclose(model(x).numpy(), h @ model[2].weight.numpy() + model[2].bias.numpy(), atol=1e-6)
    assert np.allclose(model[:2](x).numpy(), h, atol=1e-6)
    blocks = ModuleList([Linear(2, 2)])
    blocks.append(Linear(2, 3))
    assert len(blocks) == 2 and [b.out_features for b in blocks] == [2, 3]
    assert [n for n, _ in blocks.named_parameters()][2] == "1.weight"
    print("✓ ModuleList and Sequential")


test_unit_containers()

# %% [markdown]
# ## Summary
#
# * A parameter is a leaf tensor with `requires_grad=True`; assigning it (or a module, or a
#   list of them) to an attribute registers it. Order: own parameters first, then
#   children, in assignment order; names are dotted paths, as in PyTorch.
# * `parameters()` is what the optimizer updates; `state_dict()` / `load_state_dict()`
#   save and restore them exactly and refuse wrong names or shapes.
# * `Linear` computes `x @ W + b` with `W` of shape `(in, out)`, initialised
#   `uniform(±1/√fan_in)`: dividing by the fan-in removes the width from the variance.
# * Dropout zeroes with probability `p` and rescales by `1/(1-p)` in training, and does
#   nothing in eval mode.
# * No layer here defines a backward: they are compositions of `matmul`, `add` and
#   `mul`, which module 05 differentiates.
