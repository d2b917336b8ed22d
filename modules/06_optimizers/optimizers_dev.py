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
# # Module 06: Optimizers
#
# > Turning gradients into better weights.
#
# **When you finish this module you will be able to**
#
# * write the update rules of SGD (with momentum, Nesterov momentum and weight decay), Adam
#   and AdamW so that they take *exactly* the steps `torch.optim` takes;
# * explain, with numbers you measured, why Adam's first step is about `lr` whatever the
#   gradient's size, and why AdamW decays weights differently from Adam's L2 penalty;
# * give different parts of a model different settings with **parameter groups**, and
#   explain why GPT-style training decays weight matrices but not biases or norm gains;
# * save an optimizer's state and resume training bit for bit;
# * say what each optimizer costs in memory (0×, 1× or 2× the model) and in time.
#
# **Time:** about 2 to 3 hours: 30 minutes for the shared machinery (section 1), 30 for
# SGD, 45 for Adam and AdamW, 30 for parameter groups, the rest for the measurements and
# the exercises at the end.
#
# After module 05, `loss.backward()` leaves in every parameter's `.grad` the direction in
# which the loss grows fastest. Learning is a step in the *opposite* direction. How big
# that step is, and whether it remembers earlier steps, is what an **optimizer** decides.
#
# | optimizer | update (per parameter `p` with gradient `g`) | extra state per parameter |
# |---|---|---|
# | SGD | `p ← p − lr·g` | none |
# | SGD + momentum | `buf ← μ·buf + g`, `p ← p − lr·buf` | 1 array (velocity) |
# | Adam | running means of `g` and `g²`, bias-corrected | 2 arrays (1st and 2nd moments) |
# | AdamW | Adam, with weight decay applied to `p` directly | 2 arrays |
#
# Every rule here is **exactly** PyTorch's rule for the optimizer of the same name, so a
# model trained with TinyTorch and one trained with `torch.optim` take the same steps
# (the tests compare ten steps in float64 to 1e-9).
#
# Three promises every optimizer here keeps:
#
# 1. `.step()` reads `.grad` and never changes it (clipping, logging and debugging rely on that);
# 2. a parameter whose `.grad` is `None` (it took no part in this loss) is skipped, its state untouched;
# 3. the new values *replace* `param.data` (a new array, in the parameter's dtype),
#    computed with whole-array operations, so the same code runs on NumPy and CuPy.

# %%
#| default_exp core.optimizers

# %%
#| export
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from tinytorch.core.tensor import Tensor, array_module, to_host

# %% [markdown]
# ## 1. What every optimizer shares
#
# An optimizer holds:
#
# * **parameter groups**, `optimizer.param_groups`: a list of dicts. Each group has
#   `"params"` (a list of Tensors) and **every** setting of the update rule (`"lr"`,
#   `"weight_decay"`, `"momentum"`, ...). Usually there is one group holding all the
#   parameters; section 5 explains why you would want two;
# * **defaults**, `optimizer.defaults`: the settings given to the constructor. A group
#   that does not set a key gets the default; a key the group sets **overrides** it:
#
#   ```python
#   AdamW([{"params": matrices},                          # weight_decay 0.1, lr 1e-3
#          {"params": vectors, "weight_decay": 0.0}],     # weight_decay 0.0, lr 1e-3
#         lr=1e-3, weight_decay=0.1)
#   ```
#
#   (That is PyTorch's interface: a plain list of Tensors is one group; a list of dicts is
#   several.)
# * **state**, `optimizer.state`: one dict per parameter, `state[i]` for `params[i]`,
#   where `optimizer.params` lists every parameter, group after group. It holds the
#   arrays the rule keeps between steps (momentum, Adam's moments, a step count) and is
#   empty until the first step that updates that parameter;
# * for printing and comparing, `optimizer.hyperparams` is a read-only view of the first
#   group's settings (all of them, when there is one group).
#
# The parts you write:
#
# * `_settings_for(group)`: the settings a new group ends up with: the defaults, then the
#   group's own keys on top (everything except `"params"`);
# * `zero_grad()`: every parameter's `.grad` becomes `None`. Not zeros: `None` costs no
#   memory, and it lets `step()` tell "took no part" from "a gradient of zero" (weight
#   decay still shrinks a parameter whose gradient is zero, but not one that took no part);
# * `step()`: for every parameter with a gradient, call the rule
#   `self._update(param, grad, state, settings)` (the subclass writes `_update`);
# * the `lr` setter: `optimizer.lr = x` sets **every** group's `"lr"` (a learning-rate
#   schedule in module 07 does this after every step); reading `optimizer.lr` gives the
#   first group's;
# * `state_dict()` / `load_state_dict()`: everything needed to continue training later,
#   as plain NumPy arrays and numbers (module 07 writes them into checkpoints).
#
# The rest is given: the constructor, `add_param_group` with its checks, and
# `_each_parameter()`, which walks the groups and yields `(param, state, settings)`
# for every parameter, in the order of `optimizer.params`.

# %%
#| export
def _finite_at_least_zero(value: Any) -> bool:
    """True for a real number (not a bool) that is finite and >= 0: NaN and inf fail every comparison we need."""
    return (not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
            and 0 <= value < math.inf)


class Optimizer:
    """Base class: parameter groups, per-parameter state, and the step loop.

    params   -- an iterable of Tensors (e.g. `model.parameters()`, or the model itself), or
                an iterable of dicts `{"params": [Tensors], <setting>: value, ...}`, one per group
    defaults -- every setting of the update rule with the value a group gets when it does not set it

    Attributes: `param_groups` (list of dicts: "params" and every setting), `defaults`,
    `params` (every parameter, group after group), `state` (`state[i]` belongs to `params[i]`).
    Subclasses implement `_update(param, grad, state, settings)` and may extend `_check_settings`.
    """

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        if hasattr(params, "parameters") and callable(params.parameters):
            params = params.parameters()
        if isinstance(params, Tensor):
            raise TypeError(f"{type(self).__name__} takes an iterable of Tensors (e.g. [p]), not one Tensor.")
        entries = list(params)
        if not entries:
            raise ValueError(f"{type(self).__name__} got an empty parameter list: nothing to optimize.")
        self.defaults: dict[str, Any] = self._check_settings(dict(defaults), "")
        self.param_groups: list[dict[str, Any]] = []
        self.params: list[Tensor] = []
        self.state: list[dict[str, Any]] = []
        dicts = [isinstance(entry, dict) for entry in entries]
        if any(dicts) and not all(dicts):
            raise TypeError(f"{type(self).__name__}: give either Tensors or parameter-group dicts, not a mix.")
        for group in entries if all(dicts) else [{"params": entries}]:
            self.add_param_group(group)

    def _check_settings(self, settings: dict[str, Any], where: str) -> dict[str, Any]:
        """`settings` checked and normalised (floats, tuples); ValueError names the bad value.
        `where` says which group (" in parameter group 1"), or "" for the constructor's."""
        if "lr" in settings:
            if not _finite_at_least_zero(settings["lr"]):  # NaN or inf: every weight becomes NaN at the first step
                raise ValueError(f"Invalid learning rate: {settings['lr']!r} (must be a finite number >= 0){where}.")
            settings["lr"] = float(settings["lr"])
        if "weight_decay" in settings:
            if not _finite_at_least_zero(settings["weight_decay"]):
                raise ValueError(f"Invalid weight_decay: {settings['weight_decay']!r} (must be a finite number >= 0)"
                                 f"{where}.")
            settings["weight_decay"] = float(settings["weight_decay"])
        return settings

    def _settings_for(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """The settings of a new group: a new dict with every key of `self.defaults`, where
        each key that `group` sets (all of its keys except "params") takes the group's value."""
        ### BEGIN SOLUTION
        settings = dict(self.defaults)
        settings.update({key: value for key, value in group.items() if key != "params"})
        return settings
        ### END SOLUTION

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add a group `{"params": Tensors, <setting>: value, ...}`; missing settings take the defaults."""
        name, number = type(self).__name__, len(self.param_groups)
        if not isinstance(group, Mapping) or "params" not in group:
            raise TypeError(f"{name}: a parameter group is a dict with a 'params' key, got {group!r}.")
        params = [group["params"]] if isinstance(group["params"], Tensor) else list(group["params"])
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: parameter {i} of group {number} is a {type(p).__name__}, not a Tensor.")
            if any(p is q for q in self.params) or any(p is q for q in params[:i]):
                raise ValueError(f"{name}: parameter {i} of group {number} appears twice; "
                                 "each parameter belongs to exactly one group.")
        settings = self._check_settings(self._settings_for(group), f" in parameter group {number}")
        settings["params"] = params
        self.param_groups.append(settings)
        self.params.extend(params)
        self.state.extend({} for _ in params)

    def _each_parameter(self) -> Iterator[tuple[Tensor, dict[str, Any], dict[str, Any]]]:
        """(param, its state dict, its group's settings) for every parameter, in `self.params` order."""
        index = 0
        for group in self.param_groups:
            for param in group["params"]:
                yield param, self.state[index], group
                index += 1

    @property
    def lr(self) -> float:
        """The learning rate of the first group (of every group, when they share one)."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        """Set the learning rate of every group to `value` (a float). ValueError (given) unless it is a
        finite number >= 0 (a scheduler computing NaN would make every weight NaN at the next step)."""
        if not _finite_at_least_zero(value):
            raise ValueError(f"Invalid learning rate: {value!r} (must be a finite number >= 0).")
        ### BEGIN SOLUTION
        for group in self.param_groups:
            group["lr"] = float(value)
        ### END SOLUTION

    @property
    def hyperparams(self) -> Mapping[str, Any]:
        """The first group's settings, read-only (all settings when there is one group)."""
        return MappingProxyType({k: v for k, v in self.param_groups[0].items() if k != "params"})

    def zero_grad(self) -> None:
        """Forget every parameter's gradient: `.grad = None` for each one of `self.params`."""
        ### BEGIN SOLUTION
        for p in self.params:
            p.grad = None
        ### END SOLUTION

    def step(self) -> None:
        """One update of every parameter that has a gradient.

        For each `(param, state, settings)` of `self._each_parameter()`: skip the parameter
        when `param.grad` is None; otherwise call `self._update(param, param.grad.data,
        state, settings)`. `.grad` itself is never changed.
        """
        ### BEGIN SOLUTION
        for param, state, settings in self._each_parameter():
            if param.grad is None:
                continue
            self._update(param, param.grad.data, state, settings)
        ### END SOLUTION

    def _update(self, param: Tensor, grad: Any, state: dict[str, Any], settings: dict[str, Any]) -> None:
        """The rule: replace `param.data` using `grad` (an array), the parameter's `state`
        dict (kept between steps) and its group's `settings`."""
        raise NotImplementedError(f"{type(self).__name__} must implement _update(param, grad, state, settings).")

    def state_nbytes(self) -> int:
        """Bytes held by the optimizer's state arrays (what it costs on top of the model)."""
        return int(sum(v.nbytes for s in self.state for v in s.values() if hasattr(v, "nbytes")))

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as NumPy copies and plain Python values:

            {"type": "Adam",
             "param_groups": [{<every setting>, "params": [0, 1]}, {..., "params": [2]}],
             "state": [{"step": 3, "exp_avg": ndarray, ...}, {}, ...]}

        "type": the optimizer's class name (`type(self).__name__`), checked when loading.
        "param_groups": one dict per group, its settings (not the Tensors) plus "params",
        the positions in `self.params` of the group's parameters. "state": one dict per
        parameter, in `self.params` order; every array in it is an independent NumPy copy
        (`to_host` brings a CuPy array to the host); other values (the step count) as they are.
        """
        ### BEGIN SOLUTION
        groups, start = [], 0
        for group in self.param_groups:
            saved = {key: value for key, value in group.items() if key != "params"}
            saved["params"] = list(range(start, start + len(group["params"])))
            start += len(group["params"])
            groups.append(saved)
        state = [{key: np.array(to_host(value), copy=True) if hasattr(value, "shape") else value
                  for key, value in entry.items()} for entry in self.state]
        return {"type": type(self).__name__, "param_groups": groups, "state": state}
        ### END SOLUTION

    def _array_like(self, value: Any, param: Tensor) -> Any:
        """A new array holding `value`, on `param`'s device and in its dtype."""
        return array_module(param.data).array(value, dtype=param.dtype, copy=True)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what `state_dict()` returned, into an optimizer built over the same
        parameters with the same groups.

        After the checks below (given): each group takes the saved settings (every key
        but "params", normalised by `self._check_settings(settings, "")`); `self.state`
        becomes a new list with, per parameter, "step" as an int, every array (a value
        with a shape) as `self._array_like(value, param)` (a copy on the parameter's device
        and dtype), and any other value as it is.
        """
        name = type(self).__name__
        kind = state_dict.get("type", name)
        if kind != name:
            raise ValueError(f"load_state_dict: this is a {name}, the state is a {kind}'s.")
        groups, states = list(state_dict["param_groups"]), list(state_dict["state"])
        saved_sizes = [len(g["params"]) for g in groups]
        own_sizes = [len(g["params"]) for g in self.param_groups]
        if saved_sizes != own_sizes or len(states) != len(self.params):
            raise ValueError(f"load_state_dict: the state holds groups of {saved_sizes} parameters "
                             f"({len(states)} in all), this {name} has groups of {own_sizes} ({len(self.params)}).")
        for i, (param, saved) in enumerate(zip(self.params, states)):
            for key, value in saved.items():
                if key != "step" and hasattr(value, "shape") and tuple(np.shape(value)) != param.shape:
                    raise ValueError(f"load_state_dict: state {key!r} of parameter {i} has shape "
                                     f"{tuple(np.shape(value))}, the parameter has shape {param.shape}.")
        ### BEGIN SOLUTION
        for group, saved in zip(self.param_groups, groups):
            group.update(self._check_settings({k: v for k, v in saved.items() if k != "params"}, ""))

        def restore(key: str, value: Any, param: Tensor) -> Any:
            if key == "step":
                return int(value)
            return self._array_like(value, param) if hasattr(value, "shape") else value

        self.state = [{key: restore(key, value, param) for key, value in saved.items()}
                      for param, saved in zip(self.params, states)]
        ### END SOLUTION

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for number, group in enumerate(self.param_groups):
            settings = ", ".join(f"{k}={v}" for k, v in group.items() if k != "params")
            lines.append(f"  group {number}: {len(group['params'])} parameters, {settings}")
        return "\n".join(lines) + "\n)"


# %% [markdown]
# ### A worked example, and the test
#
# Before any real rule exists, a tiny stand-in shows what the machinery does. `Nudge`
# moves every parameter by `-lr·grad` and counts its own calls in the parameter's state.
# Two groups: the second overrides `lr`. The unused parameter `c` has no gradient, so it
# is skipped and its state stays empty.

# %%
class Nudge(Optimizer):
    """A stand-in rule for the demo and the test: p ← p − lr·g, counting calls in the state."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    def _update(self, param, grad, state, settings):
        state["calls"] = state.get("calls", 0) + 1
        state["last_grad"] = grad.copy()
        param.data = param.data - settings["lr"] * grad


a = Tensor(np.array([1.0, 2.0]), requires_grad=True)
b = Tensor(np.array([10.0]), requires_grad=True)
c = Tensor(np.array([-1.0]), requires_grad=True)
demo = Nudge([{"params": [a]}, {"params": [b, c], "lr": 0.5}], lr=0.1)
a.grad, b.grad = Tensor(np.array([1.0, 1.0])), Tensor(np.array([4.0]))
demo.step()
print(demo)
print("a:", a.numpy(), " b:", b.numpy(), " c (no gradient):", c.numpy())
print("state:", demo.state)
print("state_dict()['param_groups']:", demo.state_dict()["param_groups"])

# %%
def test_unit_optimizer_machinery():
    a = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = Tensor(np.array([10.0]), requires_grad=True)
    c = Tensor(np.array([-1.0]), requires_grad=True)
    opt = Nudge([{"params": [a]}, {"params": [b, c], "lr": 0.5}], lr=0.1)
    assert opt.params == [a, b, c] and len(opt.state) == 3, \
        f"opt.params is every parameter, group after group ([a, b, c]), with one state dict each; got {len(opt.params)} and {len(opt.state)}"
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5], "a group's own lr overrides the default"
    a.grad, b.grad = Tensor(np.array([1.0, 1.0])), Tensor(np.array([4.0]))
    opt.step()
    assert np.allclose(a.numpy(), [0.9, 1.9]) and np.allclose(b.numpy(), [8.0]), "each group steps with its own lr"
    assert c.numpy().tolist() == [-1.0] and opt.state[2] == {}, "a parameter without .grad is skipped"
    assert opt.state[0]["calls"] == 1, f"step() must call _update once per parameter with a gradient, got {opt.state[0]}"
    assert np.array_equal(a.grad.numpy(), [1.0, 1.0]), "step() must not change .grad"
    opt.lr = 0.01
    assert opt.lr == 0.01 and [g["lr"] for g in opt.param_groups] == [0.01, 0.01], "opt.lr = x sets every group"
    saved = opt.state_dict()
    positions = [g["params"] for g in saved["param_groups"]]
    assert saved["type"] == "Nudge" and positions == [[0], [1, 2]], (
        f"state_dict(): type 'Nudge' and each group's params as positions in opt.params, [[0], [1, 2]]; got "
        f"{saved['type']!r}, {positions}")
    assert saved["state"][0]["last_grad"] is not opt.state[0]["last_grad"], "state_dict copies arrays"
    twin = Nudge([{"params": [a]}, {"params": [b, c], "lr": 0.7}], lr=0.3)
    twin.load_state_dict(saved)
    lrs = [g["lr"] for g in twin.param_groups]
    assert lrs == [0.01, 0.01] and twin.state[0]["calls"] == 1, \
        f"load_state_dict restores every group's settings ([0.01, 0.01]) and the state; got lrs {lrs}, state {twin.state[0]}"
    opt.zero_grad()
    assert a.grad is None and b.grad is None, "zero_grad() sets every parameter's .grad to None"
    print("✓ groups and defaults, step skips None, lr sets every group, state_dict round trip, zero_grad")


test_unit_optimizer_machinery()

# %% [markdown]
# ## 2. SGD, momentum and weight decay
#
# Plain **stochastic gradient descent** steps downhill: `p ← p − lr·g`. Its weakness shows
# on a long, narrow valley: the gradient points mostly across the valley, so SGD
# zig-zags from wall to wall and crawls along the floor.
#
# **Momentum** keeps a running *velocity* `buf` (one array the size of the parameter):
#
# ```
# d   = g + wd·p            (weight decay, if any, is added to the gradient: "L2")
# buf = d                   on the first step (a copy of d, never d itself)
# buf = μ·buf + d           afterwards
# d   = d + μ·buf  (nesterov)   or   d = buf  (classic)
# p   = p − lr·d
# ```
#
# Components that keep the same sign add up (speed along the valley floor); components
# that flip sign cancel (less zig-zag). With μ = 0.9 a constant gradient ends up moving
# the parameter 1/(1−0.9) = 10× as far per step. Note what the buffer is *not*: it is
# not an average (`μ·buf + (1−μ)·d` would be Adam's first moment), and on the first step
# it is `d` itself, not `μ·0 + d` computed from a zero array (the same numbers here, but
# PyTorch's definition, which matters once dampening enters). **Nesterov** momentum
# looks one step ahead along the velocity.
#
# Hand-computed first steps, `p = 1.0`, `g = 0.5`, `lr = 0.1`:
#
# * plain: `p = 1 − 0.1·0.5 = 0.95`
# * momentum 0.9: step 1 `buf = 0.5`, `p = 0.95`; step 2 (same g) `buf = 0.9·0.5 + 0.5 = 0.95`, `p = 0.95 − 0.095 = 0.855`
# * weight decay 0.1: `d = 0.5 + 0.1·1 = 0.6`, `p = 0.94`
# * nesterov 0.9: step 1 `buf = 0.5`, `d = 0.5 + 0.45 = 0.95`, `p = 0.905`
#
# **Your `_update`** reads its settings from `settings` (the parameter's group) and keeps
# the velocity in `state["momentum_buffer"]` (only when momentum ≠ 0; plain SGD keeps no
# state). Three traps: the first buffer must be a *copy* (when there is no weight decay,
# `d` is the gradient array itself, and the in-place `buf *= μ` of the next step would
# change `.grad`); weight decay enters `d` *before* the buffer; the result is written
# back in the parameter's dtype (a float64 gradient must not turn a float32 parameter
# into float64).

# %%
#| export
class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, weight decay and Nesterov momentum.

    The same rule as `torch.optim.SGD` (dampening 0):
        d = g + weight_decay * p
        buf = copy of d (first step), else momentum * buf + d
        d = d + momentum * buf if nesterov else buf
        p = p - lr * d
    State per parameter: "momentum_buffer" (only when momentum != 0).
    """

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    def _check_settings(self, settings: dict[str, Any], where: str) -> dict[str, Any]:
        settings = super()._check_settings(settings, where)
        if not _finite_at_least_zero(settings.get("momentum", 0.0)):
            raise ValueError(f"Invalid momentum: {settings['momentum']!r} (must be a finite number >= 0){where}.")
        if settings.get("nesterov") and settings.get("momentum", 0.0) <= 0:
            raise ValueError(f"Nesterov momentum needs momentum > 0{where}.")
        if "momentum" in settings:
            settings["momentum"] = float(settings["momentum"])
        if "nesterov" in settings:
            settings["nesterov"] = bool(settings["nesterov"])
        return settings

    def _update(self, param: Tensor, grad: Any, state: dict[str, Any], settings: dict[str, Any]) -> None:
        lr, momentum = settings["lr"], settings["momentum"]
        weight_decay, nesterov = settings["weight_decay"], settings["nesterov"]
        ### BEGIN SOLUTION
        xp = array_module(param.data)
        d = grad
        if weight_decay != 0:
            d = d + weight_decay * param.data  # a new array: grad stays untouched
        if momentum != 0:
            if "momentum_buffer" not in state:
                buf = xp.array(d, copy=True)  # a copy, so the in-place updates never touch grad
            else:
                buf = state["momentum_buffer"]
                buf *= momentum
                buf += d
            state["momentum_buffer"] = buf
            d = d + momentum * buf if nesterov else buf
        param.data = (param.data - lr * d).astype(param.data.dtype, copy=False)
        ### END SOLUTION


# %% [markdown]
# ### Test: SGD's first steps, by hand

# %%
def _param(value, grad):
    p = Tensor(np.array(value, dtype=np.float64), requires_grad=True)
    p.grad = Tensor(np.array(grad, dtype=np.float64))
    return p


def test_unit_sgd():
    p = _param([1.0, -2.0], [0.5, 0.25])
    SGD([p], lr=0.1).step()
    assert np.allclose(p.numpy(), [0.95, -2.025]), f"plain SGD: p - lr·g = [0.95, -2.025], got {p.numpy().tolist()}"

    p = _param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    buffer = opt.state[0].get("momentum_buffer")
    assert np.allclose(p.numpy(), [0.95]) and np.allclose(buffer, [0.5]), (
        f"momentum, first step: the buffer starts as g (0.5), p = 1 - 0.1·0.5 = 0.95; got buffer {buffer}, p {p.numpy()}: "
        "buffer = μ·buffer + g, not an average (no (1 - μ) factor)")
    opt.step()
    assert np.array_equal(p.grad.numpy(), [0.5]), \
        f"step() changed .grad to {p.grad.numpy()}: copy the first buffer (the buffer updated in place must not be .grad itself)"
    buffer = opt.state[0]["momentum_buffer"]
    assert np.allclose(buffer, [0.95]) and np.allclose(p.numpy(), [0.855]), (
        f"momentum, second step: buffer = 0.9·0.5 + 0.5 = 0.95, p = 0.95 - 0.1·0.95 = 0.855; got buffer {buffer}, "
        f"p {p.numpy()}")
    assert np.array_equal(p.grad.numpy(), [0.5]), "step() must not change .grad (copy the first buffer)"

    p = _param([1.0], [0.5])
    SGD([p], lr=0.1, weight_decay=0.1).step()
    assert np.allclose(p.numpy(), [0.94]), \
        f"weight decay adds wd·p to g: 1 - 0.1·(0.5 + 0.1·1) = 0.94, got {p.numpy().tolist()}"

    p = _param([1.0], [0.5])
    SGD([p], lr=0.1, momentum=0.9, nesterov=True).step()
    assert np.allclose(p.numpy(), [0.905]), \
        f"nesterov, first step: p - lr·(g + 0.9·buffer) = 1 - 0.1·0.95 = 0.905, got {p.numpy().tolist()}"
    print("✓ SGD: plain, momentum, weight decay, nesterov")


test_unit_sgd()

# %% [markdown]
# ### Predict, then run: momentum in a narrow valley
#
# `f(x, y) = ½(x² + 50·y²)` is a valley 50× steeper across (`y`) than along (`x`). Its
# gradient is `(x, 50y)`, written by hand here so this experiment needs no autograd.
# The largest safe learning rate is set by the steep direction (`lr < 2/50`); take
# `lr = 0.02` and start at `(10, 1)`, where `f = 75`.
#
# **Predict** before running: after 100 steps, roughly what is `f` with plain SGD? (Hint:
# along `x` each step multiplies `x` by `1 − lr = 0.98`.) Will momentum 0.9 do better or
# worse, and by how many orders of magnitude? Write your guesses down, then run.

# %%
def valley_run(make_optimizer, steps=100):
    p = Tensor(np.array([10.0, 1.0]), requires_grad=True)
    opt = make_optimizer([p])
    for _ in range(steps):
        x, y = p.data
        p.grad = Tensor(np.array([x, 50.0 * y]))
        opt.step()
    x, y = p.data
    return 0.5 * (x * x + 50 * y * y)


for name, make in [("SGD lr=0.02", lambda ps: SGD(ps, lr=0.02)),
                   ("SGD lr=0.02 momentum=0.9", lambda ps: SGD(ps, lr=0.02, momentum=0.9)),
                   ("SGD lr=0.02 nesterov 0.9", lambda ps: SGD(ps, lr=0.02, momentum=0.9, nesterov=True))]:
    print(f"{name:28s} f after 100 steps = {valley_run(make):.3e}   (start: 75.0)")

# %% [markdown]
# Plain SGD: `x` shrinks by `0.98¹⁰⁰ ≈ 0.13`, so `f ≈ ½·(1.3)² ≈ 0.9`. Momentum reaches
# about `1e-3` or below: it builds speed along the floor while the steep direction's
# oscillations cancel in the buffer.
#
# ## 3. Adam: a step size per coordinate
#
# Momentum gives every coordinate the same learning rate. **Adam** (Kingma & Ba, 2015)
# divides each coordinate's step by a running estimate of that coordinate's gradient
# size, so steep and flat directions move at similar speeds. It keeps two arrays per
# parameter, and a step count:
#
# ```
# g = g + wd·p                         (Adam's weight decay is L2: added to the gradient)
# t = t + 1                            this parameter's own step count, from 1
# m = β1·m + (1−β1)·g                  first moment: a running mean of g
# v = β2·v + (1−β2)·g²                 second moment: a running mean of g²
# m̂ = m / (1−β1ᵗ),  v̂ = v / (1−β2ᵗ)    bias correction
# p = p − lr · m̂ / (√v̂ + ε)            ε is added *after* the square root
# ```
#
# **Why bias correction?** `m` and `v` start at zero, so early on they underestimate:
# after one step `m = (1−β1)·g = 0.1·g`. Dividing by `1−β1ᵗ` (0.1 at t = 1) undoes exactly
# that. The consequence is Adam's signature: **the first step moves every coordinate by
# about `lr`**, whatever the gradient's size: `m̂ = g`, `√v̂ = |g|`, so the step is
# `lr·g/(|g|+ε) ≈ lr·sign(g)`.
#
# **Why a count per parameter?** `t` lives in each parameter's state (`state["step"]`), as
# in PyTorch: a parameter that had no gradient on some step (an embedding row nobody
# used) has taken fewer steps, and its bias correction must say so.
#
# Hand-computed, `p = 1`, `g = 0.5`, `lr = 0.1`: step 1 `m = 0.05`, `v = 0.00025`,
# `m̂ = 0.5`, `v̂ = 0.25`, `p = 1 − 0.1·0.5/(0.5 + 1e−8) = 0.9000000002`.
#
# **Your `_update`** keeps `state["step"]` (an int), `state["exp_avg"]` (m) and
# `state["exp_avg_sq"]` (v), the arrays created as zeros like the parameter on its first
# step and then updated in place. It gets the gradient from `self._weight_decay(param,
# grad, settings)` first (you write that too: Adam's returns `grad + wd·p`, a new array,
# or `grad` itself when `wd = 0`). To agree with PyTorch to the last bits, compute in its
# order: `denom = √v / √(1−β2ᵗ) + ε`, `step_size = lr / (1−β1ᵗ)`,
# `p = p − step_size · m / denom`, written back in the parameter's dtype.

# %%
#| export
class Adam(Optimizer):
    """Adam with L2 weight decay (added to the gradient), as `torch.optim.Adam`.

    State per parameter: "step" (int, this parameter's own count), "exp_avg" (m) and
    "exp_avg_sq" (v), arrays shaped like the parameter: 2 extra copies of every parameter.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _check_settings(self, settings: dict[str, Any], where: str) -> dict[str, Any]:
        settings = super()._check_settings(settings, where)
        if "betas" in settings:
            beta1, beta2 = settings["betas"]
            if not all(_finite_at_least_zero(b) and b < 1.0 for b in (beta1, beta2)):
                raise ValueError(f"Invalid betas: {tuple(settings['betas'])} (each must be in [0, 1)){where}.")
            settings["betas"] = (float(beta1), float(beta2))
        if "eps" in settings:
            if not _finite_at_least_zero(settings["eps"]):
                raise ValueError(f"Invalid eps: {settings['eps']!r} (must be a finite number >= 0){where}.")
            settings["eps"] = float(settings["eps"])
        return settings

    def _weight_decay(self, param: Tensor, grad: Any, settings: dict[str, Any]) -> Any:
        """Adam's weight decay is L2: return `grad + wd·p` (a new array), or `grad` when wd is 0."""
        weight_decay = settings["weight_decay"]
        ### BEGIN SOLUTION
        if weight_decay != 0:
            return grad + weight_decay * param.data
        return grad
        ### END SOLUTION

    def _update(self, param: Tensor, grad: Any, state: dict[str, Any], settings: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps = settings["lr"], settings["betas"], settings["eps"]
        ### BEGIN SOLUTION
        xp = array_module(param.data)
        grad = self._weight_decay(param, grad, settings)
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(param.data)
            state["exp_avg_sq"] = xp.zeros_like(param.data)
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1 - beta1) * grad
        v *= beta2
        v += (1 - beta2) * (grad * grad)
        step_size = lr / (1 - beta1 ** t)
        denom = xp.sqrt(v) / math.sqrt(1 - beta2 ** t) + eps
        param.data = (param.data - step_size * (m / denom)).astype(param.data.dtype, copy=False)
        ### END SOLUTION


# %% [markdown]
# ## 4. AdamW: weight decay that is really decay
#
# With Adam, L2 weight decay goes into `g`, and then gets *divided by √v̂* like the rest
# of the gradient: weights with large gradients are barely decayed, weights with small
# ones a lot. Loshchilov & Hutter (2019) **decouple** the two: shrink the weight directly,
# then take a plain Adam step,
#
# ```
# p = p − lr·wd·p        (i.e. p·(1 − lr·wd): note the lr)
# p = p − lr · m̂/(√v̂ + ε)   with m, v built from the raw gradient
# ```
#
# Every weight shrinks by the same fraction per step. This is what transformers are
# trained with; PyTorch's default `weight_decay` for AdamW is 0.01 (and 0 for Adam).
#
# **Your `_weight_decay`** for AdamW replaces `param.data` by `param.data·(1 − lr·wd)`
# (a new array; only when wd ≠ 0) and returns `grad` unchanged, so Adam's `_update`
# builds its moments from the raw gradient.

# %%
#| export
class AdamW(Adam):
    """Adam with decoupled weight decay, as `torch.optim.AdamW` (default weight_decay=0.01)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    def _weight_decay(self, param: Tensor, grad: Any, settings: dict[str, Any]) -> Any:
        """Decoupled decay: replace `param.data` by `param.data * (1 − lr·wd)`; return `grad` unchanged."""
        lr, weight_decay = settings["lr"], settings["weight_decay"]
        ### BEGIN SOLUTION
        if weight_decay != 0:
            param.data = param.data * (1 - lr * weight_decay)
        return grad
        ### END SOLUTION


# %% [markdown]
# ### Test: Adam and AdamW, first steps by hand

# %%
def test_unit_adam_adamw():
    p = _param([1.0, -3.0], [0.5, -2.0])
    opt = Adam([p], lr=0.1)
    opt.step()
    # first step: about lr in the direction of -sign(g), whatever |g| is
    expected = [1 - 0.1 * 0.5 / (0.5 + 1e-8), -3 + 0.1 * 2.0 / (2.0 + 1e-8)]
    assert opt.state[0].get("step") == 1, f"the state counts the steps: step 1, got {opt.state[0].get('step')!r}"
    assert np.allclose(opt.state[0]["exp_avg"], [0.05, -0.2]), \
        f"exp_avg after one step is (1 - β1)·g = (1 - 0.9)·g = [0.05, -0.2], got {opt.state[0]['exp_avg']}"
    assert np.allclose(opt.state[0]["exp_avg_sq"], [0.00025, 0.004]), \
        f"exp_avg_sq after one step is (1 - β2)·g² = (1 - 0.999)·g² = [0.00025, 0.004], got {opt.state[0]['exp_avg_sq']}"
    moved = 1 - p.numpy()[0]
    cause = ("the step is lr² · m̂/√v̂: multiply by lr once, the step is proportional to lr" if np.isclose(moved, 0.01) else
             "the bias correction is missing: divide m by 1 - β1^t and v by 1 - β2^t before the step"
             if np.isclose(moved, 0.1 * 0.05 / (np.sqrt(0.00025) + 1e-8)) else
             "p -= lr · m̂ / (√v̂ + eps), with m̂ = m / (1 - β1^t) and v̂ = v / (1 - β2^t)")
    assert np.allclose(p.numpy(), expected, atol=1e-12), (
        f"Adam's first step moves each weight by about lr against the gradient's sign: expected ~[0.9, -2.9], got "
        f"{p.numpy().tolist()}: {cause}")
    opt.step()  # same gradient again: m̂ = g, v̂ = g², so again a step of ~lr
    assert np.allclose(p.numpy(), [0.8, -2.8], atol=1e-7), \
        f"the same gradient again: another step of ~lr, [0.8, -2.8]; got {p.numpy().tolist()}"

    p = _param([1.0], [0.5])
    Adam([p], lr=0.1, weight_decay=0.1).step()  # g = 0.6, still a step of ~lr
    assert np.allclose(p.numpy(), [0.9], atol=1e-7), \
        f"Adam's weight decay is added to g (0.6), still a step of ~lr: 0.9; got {p.numpy().tolist()}"

    p = _param([1.0], [0.5])
    AdamW([p], lr=0.1, weight_decay=0.1).step()  # p = 1·(1 − 0.01) = 0.99, then − ~0.1
    assert np.allclose(p.numpy(), [0.99 - 0.1 * 0.5 / (0.5 + 1e-8)], atol=1e-12), (
        f"AdamW decays the weight itself, p·(1 - lr·wd) = 0.99, then the Adam step: 0.89; got {p.numpy().tolist()}: "
        "decoupled decay, not added to the gradient")
    decay = AdamW([p]).defaults["weight_decay"]
    assert decay == 0.01, f"AdamW's default weight_decay is 0.01 (PyTorch's), got {decay}"
    assert np.array_equal(p.grad.numpy(), [0.5]), "step() must not change .grad"
    print("✓ Adam and AdamW: first steps, bias correction, decoupled decay")


test_unit_adam_adamw()

# %% [markdown]
# ### Predict, then run: Adam's first step
#
# Three coordinates with gradients `1e-3`, `1` and `1e3`, `lr = 0.1`. **Predict** how far
# each moves on Adam's first step, and on plain SGD's. Then run.

# %%
for name, make in [("SGD ", lambda ps: SGD(ps, lr=0.1)), ("Adam", lambda ps: Adam(ps, lr=0.1))]:
    p = _param([0.0, 0.0, 0.0], [1e-3, 1.0, 1e3])
    make([p]).step()
    print(f"{name} first step moves each coordinate by {(-p.numpy()).tolist()}")

# %% [markdown]
# SGD's step is proportional to the gradient (a factor of a million between the first and
# the last coordinate); Adam's is `0.1` for all three. That is why Adam needs less tuning
# per layer, and why its `lr` is in units of *the parameter*, not of the gradient.
#
# ### Predict, then run: L2 decay versus decoupled decay
#
# Two coordinates start at `1.0`. Their gradients are zero-mean noise, one of size 10 and
# one of size 0.01: the loss cares a lot about the first and hardly about the second. We
# run 200 steps (`lr = 0.01`) with `weight_decay = 0.1` and with `0`, on the same noise,
# and print how much the decay changed each coordinate.
#
# **Predict**: under Adam's L2 decay, which coordinate does the decay shrink more? Under
# AdamW? (AdamW's factor per step is `1 − lr·wd = 0.999`; what is `0.999²⁰⁰`?)

# %%
def decay_effect(make, steps=200, lr=0.01, weight_decay=0.1):
    rng = np.random.default_rng(0)
    noise = [rng.standard_normal(2) * np.array([10.0, 0.01]) for _ in range(steps)]
    finals = []
    for wd in (0.0, weight_decay):
        p = Tensor(np.ones(2), requires_grad=True)
        opt = make([p], lr=lr, weight_decay=wd)
        for g in noise:
            p.grad = Tensor(g)
            opt.step()
        finals.append(p.numpy())
    return finals[1] - finals[0]


for name, make in [("Adam (L2)", Adam), ("AdamW", AdamW)]:
    noisy, quiet = decay_effect(make)
    print(f"{name:10s} change caused by decay: large-gradient coordinate {noisy:+.3f}, "
          f"small-gradient coordinate {quiet:+.3f}")
print(f"AdamW's factor alone: 1 - 0.999**200 = {1 - 0.999 ** 200:.3f}")

# %% [markdown]
# Under Adam, the decay term `wd·p = 0.1` drowns in the gradient noise of size 10 but
# dominates the noise of size 0.01, and after the division by `√v̂` it moves the quiet
# coordinate by about `lr` per step: it collapses to almost 0, while the noisy one barely
# feels the decay. AdamW shrinks both by about the same fraction, 18%: the decay no longer
# depends on the gradient's size. That is "decoupled".
#
# ## 5. Parameter groups: decay the matrices, not the biases
#
# Weight decay is a regulariser: it keeps **weight matrices** small, so that no output
# leans hard on a few input features. That reasoning does not carry over to every tensor:
#
# * a **bias** is an offset. Its right value is set by the data (an average, a
#   threshold), not by how complex the model is, and pulling it towards 0 just makes the
#   model wrong everywhere by the same amount;
# * a **norm gain** (LayerNorm's `γ` in module 13) starts at 1 and scales features
#   that were just normalised; pulling it towards 0 shrinks the signal that the
#   normalisation was there to keep at a fixed size;
# * both are **vectors**: a handful of numbers next to the matrices (count them below),
#   so decaying them buys almost no regularisation.
#
# nanoGPT therefore makes two groups: every tensor with 2 or more dimensions (weight
# matrices and embedding tables) gets `weight_decay`, every 1-D tensor (biases, gains)
# gets 0. `weight_decay_groups` builds those two groups, in parameter order, leaving out
# a group that would be empty:
#
# ```python
# optimizer = AdamW(weight_decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99))
# ```

# %%
#| export
def weight_decay_groups(params: Iterable[Tensor] | Any, weight_decay: float) -> list[dict[str, Any]]:
    """Two parameter groups, as nanoGPT makes them: `{"params": [tensors with ndim >= 2],
    "weight_decay": weight_decay}` and `{"params": [tensors with ndim < 2], "weight_decay": 0.0}`,
    each keeping the parameters' order; an empty group is left out. `params` may be a model."""
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    params = list(params)
    ### BEGIN SOLUTION
    decayed = [p for p in params if p.ndim >= 2]
    not_decayed = [p for p in params if p.ndim < 2]
    groups = [{"params": decayed, "weight_decay": float(weight_decay)},
              {"params": not_decayed, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]
    ### END SOLUTION


# %%
def test_unit_weight_decay_groups():
    w1, b1 = _param(np.ones((3, 2)), np.zeros((3, 2))), _param([0.0, 0.0], [0.0, 0.0])
    w2 = _param(np.ones((2, 1)), np.zeros((2, 1)))
    groups = weight_decay_groups([w1, b1, w2], 0.1)
    assert [len(g["params"]) for g in groups] == [2, 1] and groups[0]["params"] == [w1, w2] and groups[1]["params"] == [b1], \
        "two groups: the matrices (ndim >= 2) first, [w1, w2], then the vectors, [b1]"
    decays = [g["weight_decay"] for g in groups]
    assert decays == [0.1, 0.0], f"the matrices are decayed (0.1), the vectors not (0.0); got {decays}"
    opt = AdamW(groups, lr=0.5, weight_decay=0.3)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0], "a group's weight_decay overrides"
    b1.data = np.array([4.0, 4.0])
    opt.step()  # zero gradients: only the decay moves anything
    assert np.allclose(w1.numpy(), 1 - 0.5 * 0.1) and np.allclose(b1.numpy(), 4.0), "the bias is not decayed"
    assert len(weight_decay_groups([w1], 0.1)) == 1, "with no vectors there is no (empty) second group"
    print("✓ weight_decay_groups: matrices decayed, vectors not")


test_unit_weight_decay_groups()

# %% [markdown]
# ### Predict, then run: decaying a bias
#
# Data: `y = x·w_true + 5` plus a little noise (4 features, 256 points). A linear model
# `x @ w + b` trained with AdamW (`lr = 0.02`, `weight_decay = 0.1`, as nanoGPT) on
# batches of 32 for 1,000 steps, once with decay on both `w` and `b`, once with
# `weight_decay_groups` (decay on `w` only).
#
# **Predict** the learned `b` in each run (the data wants 5), and which run ends with the
# lower loss. Then run (about a second).

# %%
_rng = np.random.default_rng(0)
_features = _rng.uniform(-1, 1, (256, 4))
_targets = _features @ _rng.standard_normal((4, 1)) + 5.0 + 0.1 * _rng.standard_normal((256, 1))


def fit_offset(groups_of, steps=1000):
    w = Tensor(np.zeros((4, 1)), requires_grad=True)
    b = Tensor(np.zeros(1), requires_grad=True)
    opt = AdamW(groups_of([w, b]), lr=0.02, weight_decay=0.1)
    batches = np.random.default_rng(1)
    for _ in range(steps):
        rows = batches.integers(0, 256, 32)
        opt.zero_grad()
        loss = ((Tensor(_features[rows]) @ w + b - Tensor(_targets[rows])) ** 2).mean()
        loss.backward()
        opt.step()
    full_loss = float(((_features @ w.numpy() + b.numpy() - _targets) ** 2).mean())
    return b.item(), full_loss


for name, groups_of in [("decay on w and b", lambda ps: ps),
                        ("weight_decay_groups", lambda ps: weight_decay_groups(ps, 0.1))]:
    bias, full_loss = fit_offset(groups_of)
    print(f"{name:20s} b = {bias:.3f}   loss = {full_loss:.4f}")

# %% [markdown]
# With the bias decayed it settles well short of 5 (near 4.3 here) and the loss is about
# 50 times higher: every prediction is off by the same amount. AdamW's update is at most
# about `lr` per step, while the decay takes `lr·wd·b` per step, so a decayed parameter
# can only hold a value where its gradient's push still beats `wd·b`. With the bias in
# the group without decay it reaches 5. The two groups hold very different numbers of
# values: in a GPT the 1-D tensors are well under 1% of the parameters.
#
# ## 6. The promises: `.grad` untouched, `None` skipped, state that round-trips

# %%
def test_unit_optimizer_contract():
    a = _param([1.0, 2.0], [0.1, 0.2])
    b = Tensor(np.array([5.0]), requires_grad=True)  # took no part: grad is None
    for make in (lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
                 lambda ps: Adam(ps, lr=0.1, weight_decay=0.1), lambda ps: AdamW(ps, lr=0.1)):
        opt = make([a, b])
        grad_before = a.grad.numpy().copy()
        opt.step()
        name = type(opt).__name__
        assert np.array_equal(a.grad.numpy(), grad_before), f"{name}.step() changed .grad: work on copies"
        assert b.numpy().tolist() == [5.0] and opt.state[1] == {}, \
            f"{name}: a parameter whose .grad is None is skipped (unchanged, no state); got {b.numpy()}, {opt.state[1]}"
    opt = Adam([{"params": [a]}, {"params": [b], "lr": 0.2}], lr=0.05)
    opt.step()
    saved = opt.state_dict()
    twin = Adam([{"params": [Tensor(a.numpy().copy(), requires_grad=True)]}, {"params": [b]}], lr=0.9)
    twin.load_state_dict(saved)
    lrs = [g["lr"] for g in twin.param_groups]
    assert lrs == [0.05, 0.2] and twin.state[0]["step"] == 1, \
        f"load_state_dict restores each group's lr ([0.05, 0.2]) and the step; got {lrs}, step {twin.state[0].get('step')}"
    assert np.array_equal(twin.state[0]["exp_avg"], opt.state[0]["exp_avg"]), "load_state_dict restores exp_avg"
    saved["state"][0]["exp_avg"][:] = 123.0  # a copy: changing it changes nothing inside
    assert not np.any(opt.state[0]["exp_avg"] == 123.0), "state_dict() must hold copies of the state's arrays"
    opt.zero_grad()
    assert a.grad is None and b.grad is None, "zero_grad() sets every parameter's .grad to None"
    print("✓ .grad untouched, None skipped, state_dict round trip with groups, zero_grad")


test_unit_optimizer_contract()

# %% [markdown]
# ## 7. With autograd: the three lines of every training step
#
# So far the gradients were written by hand. With module 05 they come from
# `loss.backward()`, and a training step is always the same three lines:
# `zero_grad()` (forget the last batch's gradients, which would otherwise *accumulate*),
# `loss.backward()`, `step()`. Fitting `y = 3x − 1` from noisy points:

# %%
_x = Tensor(_rng.uniform(-1, 1, (64, 1)).astype(np.float32))
_y = Tensor((3 * _x.numpy() - 1 + 0.05 * _rng.standard_normal((64, 1))).astype(np.float32))
for name, make in [("SGD lr=0.1", lambda ps: SGD(ps, lr=0.1)),
                   ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                   ("Adam lr=0.1", lambda ps: Adam(ps, lr=0.1))]:
    w = Tensor(np.zeros((1, 1), dtype=np.float32), requires_grad=True)
    b = Tensor(np.zeros(1, dtype=np.float32), requires_grad=True)
    opt = make([w, b])
    for _ in range(100):
        opt.zero_grad()
        loss = ((_x @ w + b - _y) ** 2).mean()
        loss.backward()
        opt.step()
    print(f"{name:13s} w = {w.item():.3f}, b = {b.item():.3f}, loss = {loss.item():.5f}")

# %% [markdown]
# ## 8. Systems view: what the optimizer costs in memory
#
# A model's parameters are not the only thing in memory during training. For every
# parameter there is also its gradient (same size) and the optimizer's state:
#
# | optimizer | state per parameter | training memory ≈ |
# |---|---|---|
# | SGD | 0 | weights + grads = 2× |
# | SGD + momentum | 1× | 3× |
# | Adam / AdamW | 2× (m and v) | 4× |
#
# (plus activations, which depend on the batch). A 7-billion-parameter model in float32
# is 28 GB of weights; Adam's state adds another 56 GB. That is why large models are
# trained with sharded optimizer states or 8-bit optimizers.
#
# **Predict, then run.** An MLP for the 8×8 digits (64 → 128 → 64 → 10) has
# `64·128+128 + 128·64+64 + 64·10+10` parameters. Write down how many KiB its float32
# weights take, and the state of each optimizer after one step (state is created on the
# first step), as a multiple of the weights. Then run.

# %%
def mlp_parameters(sizes=(64, 128, 64, 10), dtype=np.float32):
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(Tensor(rng.standard_normal((fan_in, fan_out)).astype(dtype) / np.sqrt(fan_in), requires_grad=True))
        params.append(Tensor(np.zeros(fan_out, dtype=dtype), requires_grad=True))
    return params


model_params = mlp_parameters()
n_params = sum(p.size for p in model_params)
weight_bytes = sum(p.data.nbytes for p in model_params)
print(f"MLP 64-128-64-10: {n_params:,} parameters, {weight_bytes / 1024:.1f} KiB of float32 weights")
for name, make in [("SGD", lambda ps: SGD(ps, lr=0.1)),
                   ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                   ("Adam", lambda ps: Adam(ps)), ("AdamW", lambda ps: AdamW(ps))]:
    params = mlp_parameters()
    for p in params:
        p.grad = Tensor(np.ones_like(p.data))
    opt = make(params)
    opt.step()
    extra = opt.state_nbytes()
    print(f"  {name:13s} state {extra / 1024:7.1f} KiB = {extra / weight_bytes:.0f}x the weights")

# %% [markdown]
# ## 9. Time: one vectorised update per parameter
#
# Each step is a handful of whole-array operations per parameter tensor, never a Python
# loop over numbers. **Predict, then run:** Adam does roughly 10 passes over the arrays
# (moments, square root, division, ...) against SGD's 1 or 2. Guess how many times
# slower an Adam step is than a plain SGD step on one million float32 parameters.

# %%
import time


def time_step(make, size=1_000_000, repeats=5):
    p = Tensor(np.zeros(size, dtype=np.float32), requires_grad=True)
    p.grad = Tensor(np.ones(size, dtype=np.float32))
    opt = make([p])
    opt.step()
    start = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    return (time.perf_counter() - start) / repeats * 1e3


_times = {name: time_step(make) for name, make in [("SGD", lambda ps: SGD(ps, lr=0.1)),
                                                    ("SGD momentum", lambda ps: SGD(ps, lr=0.1, momentum=0.9)),
                                                    ("Adam", lambda ps: Adam(ps))]}
for name, ms in _times.items():
    print(f"{name:13s} {ms:6.2f} ms per step for 1M parameters ({ms / _times['SGD']:.1f}x SGD)")

# %% [markdown]
# Adam costs a few times an SGD step, still small next to a forward and backward pass
# through the same parameters (a matmul does `2·n` FLOPs per weight per example in the batch).
#
# ## Summary
#
# * An optimizer turns `.grad` into a new `param.data`; it never changes `.grad` and
#   skips parameters without one.
# * Parameter groups give tensors different settings; a group's own keys override the
#   constructor's defaults; `opt.lr = x` sets every group's learning rate.
# * SGD has no state; momentum keeps a velocity (1× the parameters); Adam keeps the
#   running mean and mean square of the gradient (2×) and a step count per parameter,
#   bias-corrected so that its first step is about `lr` per coordinate.
# * Adam's weight decay is L2 (inside the gradient, then divided by `√v̂`); AdamW decays
#   every weight by the same factor `1 − lr·wd`. Decay matrices, not biases or gains.
# * `state_dict()` / `load_state_dict()` capture everything needed to resume: module 07
#   writes them to checkpoints.
#
# ## Exercises and questions
#
# Answer each by running your own code (a new cell below is the place).
#
# 1. **How fast does momentum build up?** Give one parameter a constant gradient of 1
#    and run SGD with `lr = 0.1, momentum = 0.9` for 50 steps, printing the distance moved
#    per step. After how many steps is the step within 1% of its limit `lr/(1−μ)`? Work
#    out the answer from `1 − μᵗ` and compare.
# 2. **Adam without its first moment.** Run the "first step" experiment of section 3
#    with `betas=(0.0, 0.999)`, then for ten steps with a gradient that alternates
#    between `+1` and `−1`. How do the steps compare with `betas=(0.9, 0.999)`? What is
#    the first moment doing to a noisy gradient?
# 3. **The bias correction's size.** For `β2 = 0.999`, print `1 − β2ᵗ` at t = 1, 10,
#    100, 1000. Without the correction, how much smaller than `lr` would the first step
#    be? (Compute `(1−β1)/√(1−β2)` and check it with one step of your Adam on a copy of
#    its state where you skip the division.)
# 4. **Groups in a real model.** Build the MLP of section 8 with `mlp_parameters()` and
#    `weight_decay_groups(params, 0.1)`. How many tensors and how many numbers are in each
#    group? What fraction of the numbers escapes the decay?
# 5. **A schedule with two learning rates.** Make SGD with two groups whose `lr` are
#    0.1 and 0.01, then set `opt.lr = 0.05`. What are the groups' rates now? How would you
#    write a schedule that keeps their 10:1 ratio (hint: store each group's initial rate
#    in the group under a new key, e.g. `"initial_lr"`)?
# 6. **Resuming.** Train the section 7 line fit for 50 steps with Adam, save
#    `opt.state_dict()`, and continue in two ways for 50 more steps: the same optimizer,
#    and a new Adam over the same tensors with the state loaded. Are the results
#    bit-identical? Now continue with a fresh Adam *without* loading: how big is the first
#    step, and why (think of `t`)?
#
# Questions to answer in a sentence, each checked with a few lines of code:
#
# * Why does `zero_grad()` set `None` rather than zeros? Find a setting where the two
#   would give a different parameter after `step()`.
# * AdamW multiplies the decay by `lr`. What happens to the decay during a warm-up where
#   `lr` starts at 0?
# * Adam's state holds a step count per parameter. Give an example (one parameter has no
#   gradient on some steps) where a single count for the whole optimizer would give a
#   different result, and measure the difference.
