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
# # Module 03: Layers
#
# > Parameters, the containers that own them, and the first real layer.
#
# **When you finish this module you will be able to**
#
# * say what makes a tensor a *parameter* (what an optimizer will update), and build a
#   `Module` that finds all of a model's parameters by itself, with PyTorch's names and order;
# * switch a whole model between training and evaluation, save it, load it, and move it
#   (with its non-learned *buffers*) to another device in one call;
# * write `Linear` with PyTorch's initialisation, and show by measurement why its scale
#   divides by the **fan-in**;
# * write inverted `Dropout`, and explain why it multiplies by `1/(1-p)` in training
#   and does nothing in evaluation;
# * count a model's parameters by hand and check the count with your code.
#
# **Time:** about 2 hours: 50 minutes for `Module` (sections 1 to 3), 30 for `Linear`
# and its initialisation, 20 for `Dropout`, 20 for the containers and counting, then
# the exercises at the end.
#
# A model is a function with knobs. The knobs are the **parameters**: tensors with
# `requires_grad=True` that an optimizer (module 06) will nudge after every batch. A
# real model has thousands to billions of them, spread over layers nested inside
# layers, so the framework needs bookkeeping:
#
# * **find** every parameter, in a fixed order, with a readable name (`fc1.weight`);
# * **switch** every layer between training and evaluation (dropout behaves differently);
# * **save and load** all parameters at once (`state_dict`), and **move** them between
#   devices (`to`).
#
# `Module` does that bookkeeping. Assigning a parameter tensor or a child module to an
# attribute (`self.fc1 = Linear(4, 8)`) **registers** it; everything else follows from
# the registry. On top of `Module` you build `Linear`, `Dropout`, `Sequential` and
# `ModuleList`.
#
# Layers compute with `Tensor` operations (`@`, `+`, `*`) only, so module 05's
# autograd differentiates them with no extra code here.

# %%
#| default_exp core.layers

# %%
#| export
from __future__ import annotations

import inspect
import math
from functools import lru_cache
from typing import Any, Iterable, Iterator

import numpy as np

from tinytorch.core.activations import Activation
from tinytorch.core.tensor import Tensor, array_module, as_tensor, to_array, to_host

# %% [markdown]
# ## 1. Parameters: the tensors an optimizer will update
#
# Training repeats one move for every parameter `p`: read its gradient, then replace its
# values, `p.data = p.data - lr * p.grad.data`. Two things follow:
#
# * the optimizer must be handed **the parameter tensors themselves**, not copies: the
#   model keeps pointing at the same `Tensor` objects, so when the optimizer replaces
#   `p.data` the model computes with the new values at once;
# * only some tensors are parameters. A **parameter** is a `Tensor` with
#   `requires_grad=True` that was created directly (a *leaf*: no recorded operation made
#   it). A tensor *computed* from parameters also requires a gradient, but caching one
#   (`self.last_scores = q @ k`) must not turn it into something the optimizer updates.
#
# A worked example with one parameter and one computed tensor:

# %%
#| export
def _is_parameter(value: Any) -> bool:
    """A leaf Tensor that requires a gradient (not the result of a recorded operation)."""
    return isinstance(value, Tensor) and value.requires_grad and value._node is None


def _is_child(value: Any) -> bool:
    return isinstance(value, (Module, Activation))


def _is_child_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_is_child(v) or _is_parameter(v) for v in value)


def _walk(root: Any, atoms: list[str], where: str) -> Any:
    """What the dotted path `atoms` names inside `root`: each part is an attribute of a module or
    the index of an item of a registered list (`extras.1`). AttributeError, starting with `where`,
    naming the first part that is missing or holds neither a module nor a registered list."""
    found = root
    for atom in atoms:
        if isinstance(found, (list, tuple)):
            if not (atom.isdigit() and int(atom) < len(found)):
                raise AttributeError(f"{where}: the list has no item `{atom}` (it holds {len(found)}).")
            found = found[int(atom)]
        elif hasattr(found, atom):
            found = getattr(found, atom)
        else:
            raise AttributeError(f"{where}: {type(found).__name__} has no attribute `{atom}`.")
        if not (_is_child(found) or _is_child_list(found)):
            raise AttributeError(f"{where}: `{atom}` is not a Module (it is a {type(found).__name__}).")
    return found


_NOT_CONFIG = ("rng", "seed", "dtype", "device")  # how weights are drawn and where they live, not what is computed


@lru_cache(maxsize=None)
def _init_signature(cls: type) -> inspect.Signature:
    return inspect.signature(cls.__init__)


def _plain(value: Any) -> Any:
    """`value` as JSON: numbers, strings, None, lists and dicts as they are; anything else by its class name."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return type(value).__name__


def _constructor_args(cls: type, args: tuple, kwargs: dict) -> dict:
    """{argument name: JSON value} of `cls(*args, **kwargs)`, defaults filled in, without _NOT_CONFIG."""
    try:
        bound = _init_signature(cls).bind(None, *args, **kwargs)  # None stands for self
    except (TypeError, ValueError):
        return {}  # arguments __init__ will refuse itself (or a signature Python cannot read)
    bound.apply_defaults()
    return {name: _plain(value) for name, value in list(bound.arguments.items())[1:] if name not in _NOT_CONFIG}


# %%
w = Tensor([[0.5, -1.0]], requires_grad=True)  # made directly: a parameter
doubled = w * 2                                 # computed from w: requires a gradient, but not a parameter
constant = Tensor([3.0])                        # no gradient wanted: plain data
print("parameter?  w:", _is_parameter(w), "| w * 2:", _is_parameter(doubled), "| constant:", _is_parameter(constant))

w.grad = Tensor([[0.2, -0.4]])  # pretend a backward pass wrote this gradient
holder = [w]                    # what an optimizer holds: the same object, not a copy
holder[0].data = holder[0].data - 0.5 * holder[0].grad.data
print("after one step of size 0.5, w =", w.numpy(), "(the change is visible through every reference)")

# %% [markdown]
# ## 2. `Module`: registration by assignment
#
# Python calls `__setattr__` for every `self.name = value`. `Module` overrides it to
# keep two ordered registries (dicts used as ordered sets of attribute names):
# `_param_names` for parameters and `_child_names` for children, then stores the value
# as usual. What counts as what:
#
# * a **parameter**: `_is_parameter(value)` (section 1);
# * a **child**: a `Module`, or an activation layer from module 02 (no parameters, but
#   it switches train/eval with its parent and shows in the printout): `_is_child(value)`;
#   a plain `list` (or tuple) of children and parameters is a child too
#   (`_is_child_list(value)`), its items named `name.0`, `name.1`, ... exactly as
#   PyTorch's `ModuleList` names them;
# * anything else (numbers, strings, `None`, tensors without `requires_grad`): removed
#   from both registries, so `self.bias = None` un-registers a bias.
#
# Re-assigning a name keeps its place in the order (`dict.setdefault` does not move an
# existing key).
#
# The order is **deterministic**: a module's own parameters in the order they were
# assigned, then each child's, recursively, in the order the children were assigned.
# That is PyTorch's order too, so `named_parameters()` gives the same names in the same
# order as the equivalent PyTorch model (with one difference: our `Linear` stores its
# weight as `(in, out)`, section 4).
#
# What the registry buys (you write the methods marked ✎):
#
# | method | does |
# |---|---|
# | `__setattr__` ✎ | registers parameters and children as they are assigned |
# | `named_parameters()` ✎ | `[("fc1.weight", Tensor), ...]`, each tensor once (shared weights are not repeated) |
# | `parameters()` ✎ | the tensors of `named_parameters()`: what an optimizer receives |
# | `zero_grad()` ✎ | every parameter's `.grad = None`, children's included |
# | `train(mode=True)` ✎ / `eval()` | set `.training` on this module and every child, recursively |
# | `state_dict()` ✎ | `{name: NumPy copy}` of every parameter, then every buffer |
# | `load_state_dict(d)` ✎ | copy values back in; refuses missing or extra names and wrong shapes (given) |
# | `register_buffer(name, t)`, `buffers()` | state that is saved and moved but not learned (section 3) |
# | `to(device)` | move every parameter and buffer to `"cpu"` or `"cuda"`, in place (section 3) |
# | `config()` | how the model was built: every module's class and constructor arguments (given) |
# | `set_submodule(name, m)`, `get_submodule(name)` | put or read a part by its dotted name, as PyTorch does (given; section 6) |
#
# A subclass defines `__init__` (calling `super().__init__()` first) and `forward`;
# `module(x)` calls `forward(x)`.
#
# Weights alone do not describe a model: a GPT with 2 attention heads and one with 4 have
# exactly the same weight shapes, and compute different things with them. So `Module`
# also remembers the arguments each module was built with (given code: `__new__` runs
# before `__init__` and sees the same arguments) and `config()` reports them for the whole
# tree. Module 07's checkpoints store it and refuse to load into a model built otherwise.

# %%
#| export
class Module:
    """Base class of every layer and model: parameters registered by attribute assignment.

    Subclasses call `super().__init__()`, assign parameters (Tensors with
    requires_grad=True) and child modules as attributes, and define `forward`.
    """

    training: bool = True

    def __new__(cls, *args: Any, **kwargs: Any) -> "Module":
        """Create the object and note the arguments it is being built with (`config()` reports
        them), before `__init__` runs with the same arguments."""
        module = super().__new__(cls)
        object.__setattr__(module, "_init_args", _constructor_args(cls, args, kwargs))
        return module

    def __init__(self) -> None:
        self._registry("_param_names")
        self._registry("_child_names")
        self._registry("_buffer_names")
        object.__setattr__(self, "training", True)

    def _registry(self, kind: str) -> dict:
        """The ordered set of names of one kind (created on first use)."""
        return self.__dict__.setdefault(kind, {})

    def __setattr__(self, name: str, value: Any) -> None:
        """Store `value` as the attribute `name` and keep the registries in step.

        `params = self._registry("_param_names")`, `children = self._registry("_child_names")`:
        a parameter (`_is_parameter(value)`) gets `name` in `params` and out of `children`;
        a child (`_is_child(value)` or `_is_child_list(value)`) gets `name` in `children`
        and out of `params`; anything else takes `name` out of both. A name already
        registered keeps its position (`setdefault(name, None)`). Store the value itself
        with `object.__setattr__(self, name, value)` (plain `setattr` would call this method again).
        """
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

    # ---- replacing a part (given) ---------------------------------------------------------
    def get_submodule(self, target: str) -> Any:
        """The descendant at the dotted `target`, a name as `named_modules()` gives it
        ("blocks.0.mlp"); "" is this module itself. An AttributeError names the first part that
        is missing or is not a module (PyTorch's `get_submodule`)."""
        where = f"get_submodule({target!r})"
        found = _walk(self, target.split(".") if target else [], where)
        if not _is_child(found):  # a registered list is a step on the way, not a module
            raise AttributeError(f"{where}: `{target.split('.')[-1]}` is not a Module (it is a "
                                 f"{type(found).__name__}).")
        return found

    def set_submodule(self, target: str, module: Any, strict: bool = False) -> None:
        """Put `module` at the dotted `target` ("blocks.0.mlp"), as PyTorch's `set_submodule` does:
        the parent is `get_submodule` of every part but the last, and the last part is assigned
        (`setattr`, so `__setattr__` registers it; an item of a plain list is replaced in the list).

        ValueError for the target "" (a module cannot replace itself) and for a `module` that is
        neither a Module nor an activation layer. AttributeError when the parent path is missing,
        when the last part holds something that is not a module (a parameter, a number), or, with
        strict=True, when the last part does not exist yet. TypeError for an item of a tuple."""
        if not target:
            raise ValueError("set_submodule: the target '' is the module itself; a module cannot replace itself "
                             "(use the new module in its place instead).")
        if not _is_child(module):
            raise ValueError(f"set_submodule({target!r}, ...): the new value must be a Module or an activation "
                             f"layer, got {type(module).__name__}.")
        where = f"set_submodule({target!r}, ...)"
        *path, last = target.split(".")
        parent = _walk(self, path, where)
        if isinstance(parent, (list, tuple)):
            _walk(parent, [last], where)  # an index of a module inside the list, else AttributeError
            if isinstance(parent, tuple):
                raise TypeError(f"set_submodule({target!r}, ...): the modules are held in a tuple, which cannot "
                                "change; hold them in a list or a ModuleList.")
            parent[int(last)] = module
            return
        if not isinstance(parent, Module):  # an activation layer holds no modules
            raise AttributeError(f"set_submodule({target!r}, ...): {type(parent).__name__} holds no modules.")
        if hasattr(parent, last):
            if not _is_child(getattr(parent, last)):
                raise AttributeError(f"set_submodule({target!r}, ...): `{last}` is not a Module (it is a "
                                     f"{type(getattr(parent, last)).__name__}); only a module is replaced.")
        elif strict:
            raise AttributeError(f"set_submodule({target!r}, ...): {type(parent).__name__} has no attribute `{last}`.")
        setattr(parent, last, module)

    # ---- parameters ------------------------------------------------------------------------
    def named_parameters(self, prefix: str = "") -> list[tuple[str, Tensor]]:
        """[(dotted name, parameter)]: own parameters first, in `_param_names` order; then,
        for each name in `_child_names` in order: a Module child's `named_parameters()`
        under `name.`; a list child item by item, item i named `name.i` (a parameter item
        is itself, a Module item's parameters go under `name.i.`). Activations have none.
        A tensor already listed (the same object, compare `id`) is skipped: shared weights
        appear once, under their first name. Every name starts with `prefix`.
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
        """Every parameter, once, in the order of `named_parameters()` (the tensors only)."""
        ### BEGIN SOLUTION
        return [tensor for _, tensor in self.named_parameters()]
        ### END SOLUTION

    def zero_grad(self) -> None:
        """Forget accumulated gradients: `.grad = None` for every tensor of `self.parameters()`
        (children's included). None, not zeros: no memory, and "no gradient" stays visible."""
        ### BEGIN SOLUTION
        for tensor in self.parameters():
            tensor.grad = None
        ### END SOLUTION

    # ---- modes ----------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set `self.training = bool(mode)`, then call `child.train(mode)` for every child of
        `self.children()` (Modules and activations alike), so the whole tree switches.
        Returns self (so `model = Model().train()` works)."""
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
        """{name: NumPy array}: every parameter in `named_parameters()` order, then every
        buffer in `named_buffers()` order. Each array is an independent copy on the host
        (`to_host(tensor).copy()`), so later changes to the model do not change it."""
        ### BEGIN SOLUTION
        tensors = [*self.named_parameters(), *self.named_buffers()]
        return {name: to_host(tensor).copy() for name, tensor in tensors}
        ### END SOLUTION

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> tuple[list[str], list[str]]:
        """Copy values (arrays, Tensors or lists) into the parameters and buffers, by name.

        The checks are given: with strict=True, missing or unexpected names raise KeyError
        listing them; a value whose shape differs raises ValueError naming both shapes;
        nothing is changed unless everything checks out. Then (your part), for each
        `name, array` of `arrays`: replace `own[name].data` by a new array with the
        tensor's dtype, on its device (`arrays` are already there), never sharing memory
        with the value given (`array_module(array).array(array, dtype=..., copy=True)`).
        Returns (missing names, unexpected names).
        """
        own = dict([*self.named_parameters(), *self.named_buffers()])
        missing = [name for name in own if name not in state_dict]
        unexpected = [name for name in state_dict if name not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict for {type(self).__name__}: missing keys {missing}, "
                           f"unexpected keys {unexpected}.")
        arrays = {name: to_array(value, device=own[name].device)
                  for name, value in state_dict.items() if name in own}
        mismatched = [f"{name}: checkpoint shape {tuple(array.shape)}, model shape {own[name].shape}"
                      for name, array in arrays.items() if tuple(array.shape) != own[name].shape]
        if mismatched:
            raise ValueError(f"load_state_dict for {type(self).__name__}: shape mismatch for " + "; ".join(mismatched))
        ### BEGIN SOLUTION
        for name, array in arrays.items():
            own[name].data = array_module(array).array(array, dtype=own[name].dtype, copy=True)
        return missing, unexpected
        ### END SOLUTION

    def config(self) -> dict[str, dict]:
        """How this model was built: {dotted name: {"type": class name, "args": {name: value}}} for
        this module (named "") and every descendant, in `named_modules()` order.

        "args" are the constructor's arguments by name, defaults filled in, as JSON values (a
        Module or any other object given as an argument appears as its class name); rng, seed,
        dtype and device are left out: they say how the weights were drawn and where they
        live, not what the model computes. Activations have no recorded arguments.
        """
        return {name: {"type": type(m).__name__, "args": dict(getattr(m, "_init_args", {}))}
                for name, m in self.named_modules()}

    # ---- printing -----------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        children = self.named_children()
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({name}): " + repr(child).replace("\n", "\n  ") for name, child in children]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


# %% [markdown]
# A first module by hand: a parameter assigned in `__init__`, a list holding a parameter
# and a module, and a child. The names come out in registration order: own parameters
# (`offset`) before the children's, although `inner` was assigned first.

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
print("pair(3) =", pair(Tensor([3.0])).numpy(), "= 3·gain + offset")
pair.parameters()[1].data = np.array([10.0], dtype=np.float32)  # what an optimizer does to inner.gain
print("after changing parameters()[1] (inner.gain) to 10: pair(3) =", pair(Tensor([3.0])).numpy())

# %%
def test_unit_module_registration():
    m = Pair()
    names = [n for n, _ in m.named_parameters()]
    expected = ["offset", "inner.gain", "extras.0", "extras.1.gain"]
    assert names == expected, (f"named_parameters() must list {expected} (own tensors first, then children, lists "
                               f"item by item, dotted names), got {names}")
    assert m.parameters()[0] is m.offset and len(m.parameters()) == 4, \
        f"parameters() must hold the 4 tensors themselves, in that order, got {len(m.parameters())}"
    out = m(Tensor([3.0])).numpy()
    assert np.allclose(out, [6.5]), f"pair(3) = 3 · gain 2 + offset 0.5 = 6.5, got {out}"
    m.offset = None  # no longer a parameter
    first = [n for n, _ in m.named_parameters()][0]
    assert first == "inner.gain", f"after `m.offset = None` offset is no longer a parameter; the first is {first!r}"
    shared = Pair()
    shared.extras = [shared.inner, shared.inner]  # the same module twice: counted once
    count = len(shared.parameters())
    assert count == 2, f"a module registered twice holds its tensor once: expected 2 parameters, got {count}"
    print("✓ Module registers parameters and children by assignment")


test_unit_module_registration()

# %%
def test_unit_module_modes_and_state():
    m = Pair()
    assert m.training and m.inner.training, "a new module and its children start in training mode"
    assert m.eval() is m, "train() and eval() must return the module itself (so that model = Model().eval() works)"
    assert not m.training and not m.inner.training and not m.extras[1].training, \
        "eval() must switch the module and every child (extras[1] is in a list) to eval mode"
    m.train()
    assert m.inner.training, "train() must switch the children back too"
    for p in m.parameters():
        p.grad = Tensor(np.ones(p.shape, dtype=np.float32))
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters()), "zero_grad() sets every parameter's .grad to None"
    state = m.state_dict()
    assert list(state) == ["offset", "inner.gain", "extras.0", "extras.1.gain"], \
        f"state_dict() keys are the dotted parameter names, in named_parameters() order; got {list(state)}"
    state["offset"][0] = 99.0  # a copy: the model is unchanged
    assert m.offset.numpy()[0] == 0.5, "changing the state_dict changed the model: state_dict() holds NumPy COPIES"
    other = Pair()
    other.load_state_dict(state)
    assert other.offset.numpy()[0] == 99.0, f"load_state_dict must copy the values in: offset 99, got {other.offset.numpy()}"
    state["offset"][0] = -1.0  # loading copied too: `other` keeps 99
    assert other.offset.numpy()[0] == 99.0, "load_state_dict kept a reference to the dict's array: copy it"
    try:
        other.load_state_dict({"offset": np.zeros(1)})
    except KeyError as err:
        assert "inner.gain" in str(err), f"the KeyError must name the missing keys (inner.gain, ...), it says: {err}"
    else:
        raise AssertionError("missing keys must raise KeyError")
    print("✓ train/eval, zero_grad, state_dict round trip")


test_unit_module_modes_and_state()

# %% [markdown]
# ## 3. Buffers, and moving a model to another device
#
# Some tensors belong to a model without being learned: a fixed table of position
# encodings (module 11), the mean and standard deviation used to normalise the inputs,
# a running statistic. They must be **saved** with the model and **moved** with it, but
# the optimizer must never see them. Such a tensor is a **buffer**:
# `self.register_buffer("mean", Tensor(...))` keeps it as `self.mean`, lists it in
# `named_buffers()` / `buffers()` (children's included, with dotted names), and
# `state_dict()` saves it after all the parameters (PyTorch interleaves parameters and
# buffers module by module; the names are the same). It refuses a tensor with
# `requires_grad=True`: that would be a parameter.
#
# **`to(device)`** moves a whole model: every parameter and every buffer gets its
# `.data` (and `.grad`, if any) replaced by a copy on the other device, `"cuda"` (a
# CuPy array on the GPU, when CuPy and a GPU are there) or `"cpu"`. Two design choices:
#
# * it works **in place** and returns the model itself, so `model = Net().to("cuda")`
#   and `model.to("cuda")` both work;
# * the tensors stay **the same objects**, so an optimizer made before the move still
#   holds the model's parameters (PyTorch moves in place too, and still advises
#   creating the optimizer after the move; both orders work here).
#
# Everything else follows from section 2's rule that ops take their array library from
# their inputs: after `to("cuda")` the forward runs on the GPU, and inputs must be moved
# too (`x.to("cuda")`); mixing devices raises an error that says so. `state_dict()`
# always returns NumPy arrays (so a checkpoint can be written from either device), and
# `load_state_dict` puts each value on its tensor's device.
#
# A worked example: inputs standardised with fixed statistics held in buffers.

# %%
class Standardize(Module):
    """(x − mean) / std with fixed, saved statistics: buffers, not parameters."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", Tensor(mean))
        self.register_buffer("std", Tensor(std))

    def forward(self, x):
        return (x - self.mean) / self.std


class Scorer(Module):
    def __init__(self):
        super().__init__()
        self.prep = Standardize([10.0, 100.0], [2.0, 20.0])
        self.weight = Tensor([[1.0], [-1.0]], requires_grad=True)

    def forward(self, x):
        return self.prep(x) @ self.weight


scorer = Scorer()
print("parameters:", [n for n, _ in scorer.named_parameters()], "| buffers:", [n for n, _ in scorer.named_buffers()])
print("state_dict keys:", list(scorer.state_dict()))
print("score of [12, 80]:", scorer(Tensor([[12.0, 80.0]])).numpy(), "= (12−10)/2 − (80−100)/20")
weight_before = scorer.weight
print("to('cpu') returns the model:", scorer.to("cpu") is scorer, "| same weight object:", scorer.weight is weight_before)

# %%
def test_unit_buffers_and_to():
    s = Scorer()
    buffers = [n for n, _ in s.named_buffers()]
    assert buffers == ["prep.mean", "prep.std"], f"named_buffers() must list ['prep.mean', 'prep.std'], got {buffers}"
    assert all(b is not p for b in s.buffers() for p in s.parameters()), "a buffer is not a parameter"
    state = s.state_dict()
    assert list(state) == ["weight", "prep.mean", "prep.std"], \
        f"state_dict() must hold every parameter, then every buffer: ['weight', 'prep.mean', 'prep.std']; got {list(state)}"
    other = Scorer()
    other.prep.mean.data = np.zeros(2, dtype=np.float32)
    other.load_state_dict(state)
    assert np.array_equal(other.prep.mean.numpy(), [10.0, 100.0]), "load_state_dict restores buffers"
    weight = s.weight
    assert s.to("cpu") is s and s.weight is weight and s.weight.device == "cpu", \
        "to(device) moves parameters and buffers in place: it returns the module, and the weight stays the same object"
    try:
        s.register_buffer("bad", Tensor([1.0], requires_grad=True))
    except TypeError:
        pass
    else:
        raise AssertionError("a tensor with requires_grad is a parameter, not a buffer")
    print("✓ buffers saved and loaded, not parameters; to() moves in place")


test_unit_buffers_and_to()

# %% [markdown]
# ## 4. `Linear`: `y = x @ W + b`
#
# The fully connected layer. With `in_features = n` and `out_features = m`:
#
# * `weight` has shape `(n, m)` (TinyTorch stores it input-major, so the forward is a
#   plain `x @ W`; PyTorch stores the transpose `(m, n)` and computes `x @ W.T`);
# * `bias` has shape `(m,)`, or is `None` with `bias=False`;
# * `x` may have any leading dimensions: `(n,)`, `(B, n)`, `(B, T, n)` give `(m,)`,
#   `(B, m)`, `(B, T, m)`; the matmul batches over them and the bias broadcasts, so
#   nothing needs reshaping.
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
# of inputs feeding each output, is the **fan-in**. (The fan-out, `m`, is how many
# outputs each input feeds; it does not enter the forward variance.)
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
#
# **What you write.** In `__init__` (after the given checks, with `generator` ready):
# `self.weight`, a Tensor of shape `(in_features, out_features)` drawn with
# `generator.uniform(-bound, bound, shape)` where `bound = 1/√in_features`, then, if
# `bias`, `self.bias` of shape `(out_features,)` from the same generator and bound
# (otherwise `self.bias = None`); both with `requires_grad=True`, `dtype=dtype`,
# `device=device`. Draw the weight first, then the bias, so that a seed gives the same
# layer as the reference. In `forward` (after the given shape check): `x @ self.weight`,
# then `+ self.bias` when there is one: the graph records `matmul` with inputs
# `(x, weight)`, then `add` with inputs `(that product, bias)`.

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

    weight: (n, m), bias: (m,) or None, both uniform(-1/sqrt(n), 1/sqrt(n)) as in PyTorch
    (the weight drawn first). x: (..., n) -> y: (..., m).
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
        """x: (..., in_features) -> (..., out_features): x @ weight, then + bias if any."""
        x = as_tensor(x)
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
print("a (4, 5, 3) batch ->", layer(Tensor(np.ones((4, 5, 3)))).shape, "| a single (3,) vector ->", layer(Tensor(np.ones(3))).shape)
print(f"largest |weight| = {np.abs(layer.weight.numpy()).max():.4f} <= 1/√3 = {1 / math.sqrt(3):.4f}")

# %%
def test_unit_linear():
    layer = Linear(3, 2, seed=0)
    assert layer.weight.shape == (3, 2) and layer.bias.shape == (2,), \
        f"Linear(3, 2): weight (in, out) = (3, 2) and bias (2,), got {layer.weight.shape} and {layer.bias.shape}"
    assert layer.weight.dtype == np.float32, f"the weight must be float32 by default, got {layer.weight.dtype}"
    names = [n for n, _ in layer.named_parameters()]
    assert layer.weight.requires_grad and names == ["weight", "bias"], \
        f"weight and bias are parameters that require gradients, in that order; got {names}"
    bound = 1 / math.sqrt(3)
    largest = max(np.abs(layer.weight.numpy()).max(), np.abs(layer.bias.numpy()).max())
    assert largest <= bound, (f"weights and bias start uniform in [-1/√in, 1/√in] = ±{bound:.4f}, but one is "
                              f"{largest:.4f}")
    layer.weight.data = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    layer.bias.data = np.array([0.5, -0.5], dtype=np.float32)
    try:
        out = layer(Tensor([[1.0, 2.0, 3.0]])).numpy()
    except ValueError as err:
        raise AssertionError(f"Linear(3, 2) on a (1, 3) input raised ValueError ({err}): the weight is stored (in, out) "
                             "= (3, 2), so y = x @ W + b, with no transpose") from None
    assert np.allclose(out, [[4.5, 4.5]]), f"x @ W + b for x = [1, 2, 3]: expected [[4.5, 4.5]], got {out.tolist()}"
    shapes = (layer(Tensor(np.ones((4, 5, 3)))).shape, layer(Tensor(np.ones(3))).shape)
    assert shapes == ((4, 5, 2), (2,)), (f"(4, 5, 3) -> (4, 5, 2) and (3,) -> (2,): keep the input's leading dims, "
                                         f"the last axis is the features; got {shapes}")
    plain = Linear(3, 2, bias=False)
    assert plain.bias is None and len(plain.parameters()) == 1, "bias=False: no bias, one parameter"
    assert np.array_equal(Linear(3, 2, seed=7).weight.numpy(), Linear(3, 2, rng=7).weight.numpy()), \
        "seed=7 and rng=7 must draw the same weights (make_rng)"
    wide = Linear(3, 2, dtype=np.float64).weight.dtype
    assert wide == np.float64, f"Linear(..., dtype=np.float64) must hold float64 weights, got {wide}"
    try:
        layer(Tensor(np.ones((2, 4))))
    except ValueError as err:
        assert "(2, 4)" in str(err), f"the ValueError for a (2, 4) input must name its shape, it says: {err}"
    else:
        raise AssertionError("a wrong input size must raise ValueError")
    print("✓ Linear")


test_unit_linear()

# %% [markdown]
# ### Predict, then run: the fan-in argument
#
# Push a batch of standard-normal inputs (standard deviation 1) through 10 linear layers
# of width 256 (no activation, so only the weights act) and print the standard
# deviation after each layer, for three weight scales: `uniform(±1)` (no scaling),
# `uniform(±1/√n)` (PyTorch's default, yours) and `uniform(±√(3/n))` (variance exactly `1/n`).
#
# **Predict** before running, from the variance argument above: by what factor does the
# standard deviation change per layer in each case, and roughly what is it after 10
# layers? Would the answer change for width 1024? Write your numbers down, then run.

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
print("per-layer factor on the std from the formula: √(n/3) = %.2f, 1/√3 = %.3f, 1" % (math.sqrt(256 / 3), 1 / math.sqrt(3)))

# %% [markdown]
# Unscaled weights grow the signal by `√(n/3) ≈ 9.2` per layer (`1e9` after ten
# layers); the PyTorch default shrinks it by `1/√3 ≈ 0.577` per layer, whatever the
# width; `±√(3/n)` (variance exactly `1/n`) keeps it at 1. The width has disappeared
# from the last two rows: that is what dividing by the fan-in buys.
#
# ## 5. `Dropout`: noise during training only
#
# During training, `Dropout(p)` zeroes each element independently with probability `p`
# and multiplies the survivors by `1/(1-p)`. The rescaling keeps every element's
# **expected value** unchanged (`(1-p) · x/(1-p) = x`), so at evaluation time, when
# dropout is switched off (`model.eval()`), the next layer sees inputs of the same
# scale it was trained on, with no correction needed ("inverted dropout"). Without the
# rescaling, a layer trained on inputs shrunk to `(1-p)·x` on average would see inputs
# `1/(1-p)` times larger at evaluation: twice as large for `p = 0.5`.
#
# **What you write** (`forward`, after `x = as_tensor(x)`):
#
# * in eval mode (`not self.training`) or with `p = 0`: return `x` itself (not a copy,
#   and no operation recorded);
# * with `p = 1`: `x` times a mask of zeros (avoid dividing by `1 - p = 0`);
# * otherwise: `keep = self.rng.random(x.shape) >= p` (True with probability `1 - p`,
#   drawn from the layer's own NumPy generator, so a seed reproduces the masks), then
#   `mask = keep / (1 - p)` in `x`'s dtype, moved to `x`'s device with
#   `xp.asarray` (`xp = array_module(x.data)`), and return `x * Tensor(mask)`: the
#   graph records `mul` with inputs `(x, mask)`, and module 05's `mul` rule gives the
#   right gradient (zero where dropped, `1/(1-p)` where kept).

# %%
#| export
class Dropout(Module):
    """Inverted dropout: in training, zero each element with probability p and scale the
    rest by 1/(1-p); identity in eval mode (returns x itself). Any shape; same shape and dtype.

    p in [0, 1]; rng / seed -- a numpy Generator or int seed for reproducible masks.
    """

    def __init__(self, p: float = 0.5, *, rng: Any = None, seed: int | None = None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout probability must be between 0 and 1, got {p}.")
        self.p = float(p)
        self.rng = make_rng(rng, seed)

    def forward(self, x: Tensor) -> Tensor:
        """x (any shape) -> x * mask in training (op mul, inputs (x, mask)); x itself in eval."""
        x = as_tensor(x)
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
def test_unit_dropout():
    x = Tensor(np.ones((200, 500)))
    d = Dropout(0.3, seed=1)
    y = d(x).numpy()
    dropped = np.mean(y == 0)
    assert abs(dropped - 0.3) < 0.01, f"Dropout(0.3) must zero about 30% of the values, it zeroed {dropped:.1%}"
    assert np.allclose(y[y != 0], 1 / 0.7), (f"the kept values must be scaled by 1/(1-p) = {1 / 0.7:.4f}, got "
                                             f"{np.unique(y[y != 0])[:3]}: the expected value stays 1")
    assert abs(y.mean() - 1.0) < 0.02, f"the mean must stay about 1, got {y.mean():.4f}"
    assert d.eval()(x) is x, "in eval mode dropout returns its input itself"
    assert Dropout(0.0)(x) is x, "Dropout(0.0) returns its input itself"
    assert not Dropout(1.0)(x).numpy().any(), "Dropout(1.0) drops everything: all zeros"
    try:
        Dropout(1.5)
    except ValueError:
        pass
    else:
        raise AssertionError("p > 1 must raise ValueError")
    print("✓ Dropout (inverted, identity in eval)")


test_unit_dropout()

# %% [markdown]
# ### Predict, then run: what dropout does to a batch of ones
#
# `Dropout(0.25)` on a `(1000, 100)` tensor of ones. **Predict**: the fraction of zeros,
# the value of the survivors, the mean of the output in training mode, and the output in
# eval mode. Then: if the survivors were *not* rescaled, what would the training mean be,
# and by what factor would the inputs of the next layer jump when you switch to eval?

# %%
drop = Dropout(0.25, seed=0)
ones = Tensor(np.ones((1000, 100)))
out = drop(ones).numpy()
print(f"training: zeros {np.mean(out == 0):.4f}, survivors {out.max():.4f}, mean {out.mean():.4f}")
print(f"without the 1/(1-p) rescale the training mean would be {np.mean(out != 0):.4f}; "
      f"eval's inputs would then be {1 / np.mean(out != 0):.3f}x larger than in training")
drop.eval()
print("eval: returns its input itself ->", drop(ones) is ones)

# %% [markdown]
# ## 6. Containers: `ModuleList` and `Sequential`
#
# `ModuleList` holds layers in a list that the registry understands: item `i` is the
# child named `"i"`, so `self.blocks = ModuleList([...])` names its parameters
# `blocks.0.weight`, `blocks.1.weight`, ... It supports `len`, indexing (negative too,
# slices give a new list), iteration and `append`. It has no `forward`: you decide how
# to call its items.
#
# `Sequential(*layers)` is a `ModuleList` whose forward feeds each layer's output into
# the next: the model of a plain stack.
#
# **What you write:** `append` registers `module` as the attribute named `str(len(self))`
# (with `setattr`, so `__setattr__` registers it) and returns `self`; `__getitem__`
# returns item `index` (negative counts from the end; out of range raises `IndexError`
# naming the index and the length) or, for a slice, a new container of the same kind
# (`self._new(items)`); `Sequential.forward` calls each item in turn on the previous
# output and returns the last one.

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
        """self[i] (negative counts from the end; IndexError naming i and the length when out
        of range) or self[a:b] (a new container of the same kind, `self._new(items)`)."""
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
        """Each item called on the previous one's output, in order; the last output."""
        ### BEGIN SOLUTION
        for module in self:
            x = module(x)
        return x
        ### END SOLUTION


# %%
from tinytorch.core.activations import ReLU


def test_unit_containers():
    rng = np.random.default_rng(0)
    model = Sequential(Linear(4, 8, rng=rng), ReLU(), Linear(8, 2, rng=rng))
    assert len(model) == 3 and isinstance(model[1], ReLU) and model[-1] is model[2], \
        "Sequential(a, b, c): len 3, model[1] is b, model[-1] is c"
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"], f"items are named by position, got {names}"
    x = Tensor(rng.standard_normal((5, 4)))
    h = np.maximum(x.numpy() @ model[0].weight.numpy() + model[0].bias.numpy(), 0)
    out = model(x).numpy()
    assert np.allclose(out, h @ model[2].weight.numpy() + model[2].bias.numpy(), atol=1e-6), \
        "Sequential calls each item on the previous one's output, in order, and returns the last output"
    assert np.allclose(model[:2](x).numpy(), h, atol=1e-6), "a slice of a Sequential is a Sequential of those items"
    blocks = ModuleList([Linear(2, 2)])
    blocks.append(Linear(2, 3))
    assert len(blocks) == 2 and [b.out_features for b in blocks] == [2, 3], "append adds a module at the end"
    third = [n for n, _ in blocks.named_parameters()][2]
    assert third == "1.weight", f"the appended module's parameters are named '1.weight', ...; got {third!r}"
    print("✓ ModuleList and Sequential")


test_unit_containers()

# %% [markdown]
# ### Replacing a part by its name
#
# Later modules build a changed copy of a model: module 15 puts a quantized layer where each
# `Linear` was, module 16 a smaller MLP where each MLP was, module 18 a fused MLP. They find
# the parts with `named_modules()` and put the new part at the same dotted name with
# `model.set_submodule("blocks.0.mlp", new)` (given code, PyTorch's method of the same name):
# every part of the name but the last leads to the parent (an attribute, or an index into a
# `ModuleList` or a registered list), and the last part is assigned, so `__setattr__`
# registers the new module under the old name and at the old place in the order.
# `get_submodule(name)` reads the part at a name. A wrong name raises `AttributeError` naming
# the part that is missing; replacing something that is not a module (a parameter), or
# putting in something that is not one, is refused rather than silently registering a
# parameter where a layer was.

# %%
stack = Sequential(Linear(4, 8, seed=0), ReLU(), Linear(8, 2, seed=1))
stack.set_submodule("2", Linear(8, 3, seed=2))
print("after set_submodule('2', Linear(8, 3)):", [(n, p.shape) for n, p in stack.named_parameters()][2:])
try:
    stack.set_submodule("0.weight", Linear(4, 8))
except AttributeError as err:
    print("a parameter is not a module:", err)

# %%
def test_unit_set_submodule():
    pair = Pair()
    new = Scale()
    pair.set_submodule("extras.1", new)  # an item of a registered list
    assert pair.extras[1] is new and pair.get_submodule("extras.1") is new, \
        "set_submodule('extras.1', m) replaces item 1 of the list `extras`"
    stack = Sequential(Linear(2, 3, seed=0), ReLU(), Linear(3, 1, seed=1))
    outer = Sequential(stack)
    outer.set_submodule("0.1", Scale())
    assert isinstance(stack[1], Scale), "set_submodule('0.1', m) puts m at item 1 of item 0"
    names = [n for n, _ in outer.named_parameters()]
    assert names == ["0.0.weight", "0.0.bias", "0.1.gain", "0.2.weight", "0.2.bias"], \
        f"the new module takes the old one's place in the order; got {names}"
    checks = [(lambda: outer.set_submodule("0.7", Scale(), strict=True), AttributeError, "no attribute `7`"),
              (lambda: pair.set_submodule("extras.5", Scale()), AttributeError, "no item `5`"),
              (lambda: outer.set_submodule("0.0.weight", Scale()), AttributeError, "`weight` is not a Module"),
              (lambda: outer.set_submodule("", Scale()), ValueError, "itself"),
              (lambda: outer.set_submodule("0.1", 3.0), ValueError, "got float"),
              (lambda: outer.get_submodule("0.9"), AttributeError, "no attribute `9`"),
              (lambda: pair.set_submodule("inner.missing", Scale(), strict=True), AttributeError, "no attribute")]
    for call, error, words in checks:
        try:
            call()
        except error as err:
            assert words in str(err), f"expected {error.__name__} saying {words!r}, got: {err}"
        else:
            raise AssertionError(f"expected {error.__name__} ({words})")
    pair.set_submodule("inner.extra", Scale())  # strict=False: a new name is added, as in PyTorch
    assert pair.get_submodule("inner.extra") in pair.inner.children(), "a new name registers a new child"
    print("✓ set_submodule and get_submodule: dotted names, lists, PyTorch's errors")


test_unit_set_submodule()

# %% [markdown]
# ## 7. Counting parameters
#
# How big is a model? Count the numbers an optimizer will update: the sum of the sizes
# of `parameters()`. Each shared tensor counts once (that is why `parameters()` lists it
# once). Activations and dropout hold none. **What you write:** `count_parameters(module)`,
# that sum.

# %%
#| export
def count_parameters(module: Module) -> int:
    """Number of scalar parameters: the sum of `.size` over `module.parameters()` (shared
    tensors once)."""
    ### BEGIN SOLUTION
    return sum(tensor.size for tensor in module.parameters())
    ### END SOLUTION


# %% [markdown]
# ### Predict, then run
#
# An MLP for 28×28 images: `784 → 128 → 64 → 10`, with ReLU and one `Dropout(0.1)`.
# **Predict** by hand, before running: how many parameters does each `Linear(n, m)`
# hold (`n·m + m`), how many in all, and how many KiB in float32 (4 bytes each)? Which
# layer holds most of them? Then run.

# %%
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
def test_unit_count_parameters():
    model = Sequential(Linear(4, 8), ReLU(), Linear(8, 2))
    count = count_parameters(model)
    assert count == 4 * 8 + 8 + 8 * 2 + 2, (f"Linear(4, 8), ReLU, Linear(8, 2) hold 4·8 + 8 + 8·2 + 2 = 58 numbers, "
                                            f"got {count}: count the numbers in the tensors (their .size), not the tensors")
    shared = Module()
    shared.a = shared.b = Linear(3, 3)
    count = count_parameters(shared)
    assert count == 12, f"one Linear(3, 3) registered twice holds 3·3 + 3 = 12 (shared tensors count once), got {count}"
    print("✓ count_parameters")


test_unit_count_parameters()

# %% [markdown]
# The first layer holds 92% of the parameters: the input is wide. That pattern (the
# layers touching the raw input or the vocabulary are the heavy ones) comes back in
# language models, where the embedding table is often the largest single tensor.
#
# ## Summary
#
# * A parameter is a leaf tensor with `requires_grad=True`; assigning it (or a module, or a
#   list of them) to an attribute registers it. Order: own parameters first, then
#   children, in assignment order; names are dotted paths, as in PyTorch.
# * `parameters()` hands the optimizer the tensors themselves; `state_dict()` /
#   `load_state_dict()` save and restore them (and the buffers) as copies and refuse
#   wrong names or shapes; `to(device)` moves parameters and buffers in place.
# * `Linear` computes `x @ W + b` with `W` of shape `(in, out)`, initialised
#   `uniform(±1/√fan_in)`: dividing by the fan-in removes the width from the variance.
# * Dropout zeroes with probability `p` and rescales by `1/(1-p)` in training, and returns
#   its input in eval mode.
# * No layer here defines a backward: they are compositions of `matmul`, `add` and
#   `mul`, which module 05 differentiates.
#
# ## Exercises and questions
#
# Answer each by running your own code (a new cell below is the place).
#
# 1. **Width.** Run `activation_std` with `width=64` and `width=1024` for the three
#    schemes. Which rows change with the width, and which do not? Explain with the
#    variance formula.
# 2. **ReLU stacks.** Put a `ReLU()` after each layer inside `activation_std` (copy it).
#    ReLU zeroes half of a symmetric input; by what factor does that cut the variance?
#    Which bound, `√(3/n)` or `√(6/n)`, now keeps the standard deviation near its start?
# 3. **Fan-out instead of fan-in.** Build `Linear(256, 1024)` with its weights redrawn
#    from `uniform(±1/√1024)` (the fan-out). Feed standard-normal inputs: what standard
#    deviation comes out, against `1/√3` with the right bound? Which of the two depends
#    on the layer's *output* width, and why should it not?
# 4. **Dropout's noise.** For `p` in 0.1, 0.5, 0.9, measure the mean and the standard
#    deviation of `Dropout(p)` applied to ones. Check the standard deviation against
#    `√(p/(1-p))`. Which `p` makes the training signal noisiest?
# 5. **Counting.** A GPT-2 block's MLP is `Linear(768, 3072)` then `Linear(3072, 768)`.
#    Predict its parameter count and size in float32, then build it and check with
#    `count_parameters`. How does it compare with the MLP of section 7?
# 6. **Saving and moving.** Build a `Scorer`, change its `weight`, save `state_dict()`,
#    load it into a fresh `Scorer` with `strict=False` after deleting one key: what do the
#    two returned lists say? Which tensors does `to("cpu")` touch, and are they the same
#    objects afterwards?
#
# Questions to answer in a sentence, each checked with a few lines of code:
#
# * Why must `named_parameters()` skip a tensor computed from parameters? Cache
#   `self.last = self.weight * 2` in a module and look at what would go wrong.
# * `state_dict()` returns copies. Find an operation on the model (hint: an in-place
#   `p.data *= 0.5`) after which arrays that were *not* copies would no longer hold the
#   saved values.
# * A model shares one `Linear` under two attribute names. How many times does it
#   appear in `parameters()`, in `state_dict()`, and in `count_parameters`? What would an
#   optimizer do to a tensor that appeared twice?
# * Why does `Dropout` in eval mode return `x` itself rather than `x * 1`?
