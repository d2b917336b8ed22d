"""Module 06: the shared machinery (groups, step, lr, state_dict), then each update rule by hand.

The order matters for students: the machinery is tested first with a stand-in rule, then
each rule one property at a time (each test isolates one thing that can go wrong and its
message names it), then the promises every optimizer keeps.
"""
import json

import numpy as np
import pytest

from tinytorch.core.optimizers import SGD, Adam, AdamW, Optimizer, weight_decay_groups
from tinytorch.core.tensor import Tensor


def param(value, grad=None, dtype=np.float64):
    p = Tensor(np.array(value, dtype=dtype), requires_grad=True)
    if grad is not None:
        p.grad = Tensor(np.array(grad, dtype=dtype))
    return p


class Nudge(Optimizer):
    """A stand-in rule, so the machinery is tested without any real optimizer:
    p ← p − lr·scale·g, counting calls and keeping the last gradient in the state."""

    def __init__(self, params, lr=0.1, scale=1.0):
        super().__init__(params, {"lr": lr, "scale": scale})

    def _update(self, param, grad, state, settings):
        state["calls"] = state.get("calls", 0) + 1
        state["last_grad"] = grad.copy()
        param.data = param.data - settings["lr"] * settings["scale"] * grad


# ---- the machinery --------------------------------------------------------------

def test_zero_grad_sets_none():
    a, b = param([1.0], [1.0]), param([2.0], [2.0])
    opt = Nudge([{"params": [a]}, {"params": [b]}])
    opt.zero_grad()
    for name, p in (("first", a), ("second", b)):
        assert p.grad is None, (f"zero_grad left the {name} parameter's .grad = {p.grad!r}: zero_grad must set "
                                ".grad to None, not zeros (a parameter without a gradient is skipped by step)")


def test_one_group_from_a_list_of_tensors():
    a, b = param([1.0]), param([2.0, 3.0])
    opt = Nudge([a, b], lr=0.3)
    assert opt.params == [a, b] and len(opt.state) == 2 and opt.state == [{}, {}]
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["params"] == [a, b]
    assert opt.param_groups[0]["lr"] == 0.3 and opt.param_groups[0]["scale"] == 1.0
    assert opt.defaults == {"lr": 0.3, "scale": 1.0}


def test_group_settings_override_the_defaults():
    a, b, c = param([1.0]), param([2.0]), param([3.0])
    opt = Nudge([{"params": [a]}, {"params": [b, c], "lr": 0.5}], lr=0.1, scale=2.0)
    first, second = opt.param_groups
    assert set(first) == set(second) == {"params", "lr", "scale"}, (
        f"group keys {sorted(first)} and {sorted(second)}: every group must hold every setting "
        "(a setting the group does not give takes the constructor's default)")
    assert first["lr"] == 0.1 and second["scale"] == 2.0, "a setting the group does not give takes the default"
    assert second["lr"] == 0.5, (f"the second group's lr is {second['lr']}: a group's own setting must override "
                                 "the constructor's default (defaults first, then the group's keys on top)")
    assert opt.params == [a, b, c] and second["params"] == [b, c]
    assert opt.defaults["lr"] == 0.1, "the defaults are not changed by a group"


def test_lr_property_reads_the_first_group_and_sets_every_group():
    a, b = param([1.0], [1.0]), param([1.0], [1.0])
    opt = Nudge([{"params": [a], "lr": 0.2}, {"params": [b], "lr": 0.05}])
    assert opt.lr == 0.2
    opt.lr = 0.5
    rates = [g["lr"] for g in opt.param_groups]
    assert rates == [0.5, 0.5], (f"after opt.lr = 0.5 the groups' rates are {rates}: opt.lr = x must set the lr "
                                 "of every group (a schedule changes them all)")
    assert isinstance(rates[0], float)
    opt.step()
    np.testing.assert_allclose([a.item(), b.item()], [0.5, 0.5])


def test_step_skips_parameters_without_grad_and_uses_each_groups_settings():
    a, b, c = param([1.0, 2.0], [1.0, 1.0]), param([10.0], [4.0]), param([-1.0])
    opt = Nudge([{"params": [a]}, {"params": [b, c], "lr": 0.5, "scale": 0.5}], lr=0.1)
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.9, 1.9], err_msg="the first group steps with lr 0.1")
    np.testing.assert_allclose(b.numpy(), [9.0], err_msg="the second group steps with its own lr 0.5 and scale 0.5")
    assert c.numpy().tolist() == [-1.0] and opt.state[2] == {}, "a parameter whose .grad is None is skipped"
    assert [s.get("calls") for s in opt.state] == [1, 1, None], "each parameter gets its own state dict"
    assert np.array_equal(a.grad.numpy(), [1.0, 1.0]), "step() leaves .grad as it is"
    np.testing.assert_array_equal(opt.state[1]["last_grad"], [4.0], err_msg="_update receives grad as an array")


def test_state_dict_lists_groups_by_position_and_copies_state():
    a, b, c = param([1.0, 2.0], [1.0, 1.0]), param([10.0], [4.0]), param([-1.0], [2.0])
    opt = Nudge([{"params": [a]}, {"params": [b, c], "lr": 0.5}], lr=0.1)
    opt.step()
    saved = opt.state_dict()
    assert saved["type"] == "Nudge"
    assert [g["params"] for g in saved["param_groups"]] == [[0], [1, 2]], (
        "state_dict's param_groups hold the positions of their parameters in opt.params")
    assert saved["param_groups"][1] == {"lr": 0.5, "scale": 1.0, "params": [1, 2]}
    assert len(saved["state"]) == 3 and saved["state"][1]["calls"] == 1
    last = saved["state"][1]["last_grad"]
    assert isinstance(last, np.ndarray) and last.tolist() == [4.0]
    assert not np.shares_memory(last, opt.state[1]["last_grad"]), (
        "state_dict() returned the optimizer's own state array: state_dict() must return copies of the "
        "state arrays (a snapshot that later steps do not change)")


def test_load_state_dict_restores_settings_and_copies_state():
    a, b = param([1.0, 2.0], [1.0, 1.0]), param([10.0], [4.0])
    opt = Nudge([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    opt.step()
    saved = opt.state_dict()
    twin = Nudge([{"params": [a]}, {"params": [b], "lr": 0.9}], lr=0.3, scale=7.0)
    twin.load_state_dict(saved)
    assert [(g["lr"], g["scale"]) for g in twin.param_groups] == [(0.1, 1.0), (0.5, 1.0)], (
        "load_state_dict restores every group's settings")
    assert twin.param_groups[1]["params"] == [b], "the groups keep their own Tensors"
    assert twin.state[1]["calls"] == 1 and twin.state[1]["last_grad"].tolist() == [4.0]
    saved["state"][1]["last_grad"][:] = 99.0
    assert twin.state[1]["last_grad"].tolist() == [4.0], "load_state_dict must copy the arrays it is given"


def test_constructor_checks():
    p = param([1.0])
    with pytest.raises(ValueError, match="empty"):
        Nudge([])
    with pytest.raises(TypeError):
        Nudge(p)  # one Tensor, not a list
    with pytest.raises(TypeError):
        Nudge([p, {"params": [param([2.0])]}])
    with pytest.raises(ValueError, match="twice"):
        Nudge([{"params": [p]}, {"params": [p]}])
    with pytest.raises(ValueError, match="group 1"):
        Nudge([{"params": [p]}, {"params": [param([2.0])], "lr": -1.0}])
    with pytest.raises(TypeError, match="parameter 1 of group 0"):
        Nudge([p, np.ones(2)])


# ---- SGD ------------------------------------------------------------------------

def test_sgd_plain_step_by_hand():
    p = param([1.0, -2.0, 0.0], [0.5, 0.25, -1.0])
    SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.numpy(), [0.95, -2.025, 0.1], rtol=0, atol=1e-15,
                               err_msg="plain SGD: p = p − lr·g")


def test_sgd_momentum_buffer_is_a_copy_of_the_gradient():
    grad = np.array([0.5, -1.0])
    p = param([1.0, 1.0], grad)
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    opt.step()
    assert p.grad.numpy().tolist() == grad.tolist(), (
        f"after two SGD steps .grad is {p.grad.numpy().tolist()}, was {grad.tolist()}: step() changed .grad; "
        "the first momentum buffer must be a copy of the gradient, not the gradient array itself")


def test_sgd_momentum_two_steps_by_hand():
    p = param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    buf = opt.state[0]["momentum_buffer"]
    np.testing.assert_allclose(buf, [0.5], err_msg=(
        "momentum_buffer after the first step must be the gradient itself (PyTorch's rule: buf = d on the first "
        "step, then buf = μ·buf + d; the buffer is not an average, there is no (1−μ) factor)"))
    np.testing.assert_allclose(p.numpy(), [0.95], err_msg="SGD momentum, step 1: p = 1 − 0.1·0.5")
    p.grad = Tensor(np.array([-1.0]))
    opt.step()  # buf = 0.9*0.5 - 1 = -0.55 ; p = 0.95 + 0.055
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"], [-0.55], err_msg="step 2: buf = μ·buf + d")
    np.testing.assert_allclose(p.numpy(), [1.005])


def test_sgd_weight_decay_enters_the_momentum_buffer():
    p = param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1)
    opt.step()
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"], [0.6], err_msg=(
        "with weight decay 0.1 the first momentum buffer must be g + wd·p = 0.6: weight decay enters d "
        "before the momentum buffer (d = g + wd·p, then buf = d)"))
    np.testing.assert_allclose(p.numpy(), [0.94])


def test_sgd_nesterov_and_weight_decay_by_hand():
    p = param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)
    opt.step()  # d = 0.6; buf = 0.6; d = 0.6 + 0.54 = 1.14; p = 1 - 0.114
    np.testing.assert_allclose(p.numpy(), [0.886], err_msg="nesterov: d = d + μ·buf, then p = p − lr·d")
    opt.step()  # d = 0.5 + 0.0886 = 0.5886; buf = 0.54 + 0.5886 = 1.1286; d = 0.5886 + 1.01574
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"], [1.1286])
    np.testing.assert_allclose(p.numpy(), [0.886 - 0.1 * (0.5886 + 0.9 * 1.1286)])


def test_sgd_weight_decay_without_momentum_keeps_no_state():
    p = param([2.0], [0.0])
    opt = SGD([p], lr=0.5, weight_decay=0.1)
    opt.step()  # zero gradient, but decay still shrinks: 2 - 0.5*0.2
    np.testing.assert_allclose(p.numpy(), [1.9])
    assert opt.state[0] == {}, "plain SGD keeps no state (no momentum buffer when momentum is 0)"


def test_sgd_rejects_bad_settings():
    p = param([1.0])
    with pytest.raises(ValueError):
        SGD([p], lr=-0.1)
    with pytest.raises(ValueError):
        SGD([p], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="[Nn]esterov"):
        SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="[Nn]esterov"):
        SGD([{"params": [p], "nesterov": True}], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)


# ---- Adam -----------------------------------------------------------------------

def test_adam_moments_after_one_step():
    p = param([1.0, -3.0, 2.0], [0.5, -2.0, 1e-4])
    opt = Adam([p], lr=0.1, betas=(0.9, 0.999))
    opt.step()
    state = opt.state[0]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}, f"Adam's state keys are {sorted(state)}"
    np.testing.assert_allclose(state["exp_avg"], [0.05, -0.2, 1e-5], err_msg=(
        "exp_avg after one step must be (1−β1)·g with β1 = betas[0] = 0.9 (m = β1·m + (1−β1)·g)"))
    np.testing.assert_allclose(state["exp_avg_sq"], [0.00025, 0.004, 1e-11], err_msg=(
        "exp_avg_sq after one step must be (1−β2)·g² with β2 = betas[1] = 0.999 (v = β2·v + (1−β2)·g²)"))
    assert state["step"] == 1


def test_adam_counts_steps_per_parameter():
    a, b = param([1.0], [0.5]), param([2.0, 3.0], [0.1, 0.2])
    opt = Adam([a, b], lr=0.1)
    opt.step()
    steps = [opt.state[0].get("step"), opt.state[1].get("step")]
    assert steps == [1, 1], (f"after one step() the parameters' step counts are {steps}: each parameter keeps "
                             "its own step count in state['step'], +1 per update of that parameter")
    b.grad = None
    opt.step()
    opt.step()
    steps = [opt.state[0]["step"], opt.state[1]["step"]]
    assert steps == [3, 1], (f"a parameter without a gradient takes no step: counts {steps}, expected [3, 1]; "
                             "each parameter keeps its own step count in state['step']")


def test_adam_eps_is_added_after_the_square_root():
    # betas 0: m̂ = g and v̂ = g² exactly, so only eps decides the step: lr·g/(|g| + eps)
    p = param([0.0], [1.0])
    Adam([p], lr=1.0, betas=(0.0, 0.0), eps=0.5).step()
    assert p.item() == pytest.approx(-1 / 1.5, rel=1e-12), (
        f"with m̂ = 1, v̂ = 1, eps = 0.5 the step is {-p.item():.4f}, expected 1/(√1 + 0.5) = 0.6667 "
        f"(1/√1.5 = 0.8165 means eps went inside the square root): eps is added after the square root, "
        "m̂/(√v̂ + ε)")


def test_adam_step_is_proportional_to_lr():
    moves = []
    for lr in (0.1, 0.2):
        p = param([0.0], [0.5])
        Adam([p], lr=lr).step()
        moves.append(-p.item())
    ratio = moves[1] / moves[0]
    assert ratio == pytest.approx(2.0, rel=1e-9), (
        f"doubling lr multiplied Adam's step by {ratio:.3f}, not 2: the step is proportional to lr "
        "(lr applied twice makes it lr²)")


def test_adam_first_step_is_lr_per_coordinate():
    # eps = 0 isolates the bias correction: m̂ = g, v̂ = g², so every coordinate moves by exactly lr
    grads = np.array([0.5, -2.0, 1e-4, 300.0])
    p = param(np.zeros(4), grads)
    Adam([p], lr=0.1, eps=0.0).step()
    moved = -p.numpy()
    np.testing.assert_allclose(moved, 0.1 * np.sign(grads), rtol=1e-12, err_msg=(
        f"Adam's first step moved the coordinates by {moved.tolist()}: it must be lr = 0.1 for each, whatever "
        "the gradient's size. (1−β1)/√(1−β2) = 3.16 times lr means the bias correction is missing: "
        "m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ)"))


def test_adam_first_step_with_eps_by_hand():
    p = param([1.0, -3.0, 2.0], [0.5, -2.0, 1e-4])
    Adam([p], lr=0.1).step()
    grads = np.array([0.5, -2.0, 1e-4])
    expected = np.array([1.0, -3.0, 2.0]) - 0.1 * grads / (np.abs(grads) + 1e-8)
    np.testing.assert_allclose(p.numpy(), expected, rtol=0, atol=1e-14)


def test_adam_second_step_by_hand():
    p = param([0.0], [1.0])
    opt = Adam([p], lr=0.01, betas=(0.5, 0.75), eps=0.0)
    opt.step()
    p.grad = Tensor(np.array([3.0]))
    opt.step()
    m = 0.5 * 0.5 + 0.5 * 3.0  # 1.75
    v = 0.75 * 0.25 + 0.25 * 9.0  # 2.4375
    m_hat, v_hat = m / (1 - 0.25), v / (1 - 0.5625)
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [m])
    np.testing.assert_allclose(opt.state[0]["exp_avg_sq"], [v])
    np.testing.assert_allclose(p.numpy(), [-0.01 - 0.01 * m_hat / np.sqrt(v_hat)], rtol=1e-13)


def test_adam_weight_decay_is_added_to_the_gradient():
    p = param([2.0], [0.5])
    opt = Adam([p], lr=0.1, weight_decay=0.5, betas=(0.9, 0.99))
    opt.step()  # g = 0.5 + 1.0 = 1.5
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.15], err_msg=(
        "Adam's weight_decay is L2: g + wd·p (here 1.5) enters m and v; decoupled decay is AdamW's"))
    np.testing.assert_allclose(opt.state[0]["exp_avg_sq"], [0.01 * 2.25])


def test_adam_rejects_bad_betas():
    with pytest.raises(ValueError, match="betas"):
        Adam([param([1.0])], betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="eps"):
        Adam([param([1.0])], eps=-1.0)


# ---- AdamW ----------------------------------------------------------------------

def test_adamw_moments_use_the_raw_gradient():
    p = param([2.0], [0.5])
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    opt.step()
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.05], err_msg=(
        "AdamW builds m and v from the raw gradient: its decay is decoupled (p ← p·(1 − lr·wd)), not added "
        "to g (that is Adam's L2)"))


def test_adamw_decay_is_scaled_by_lr():
    p = param([4.0], [0.0])
    AdamW([p], lr=0.5, weight_decay=0.01).step()  # zero gradient: only the decay moves p
    assert p.item() == pytest.approx(4.0 * (1 - 0.5 * 0.01), rel=1e-12), (
        f"with a zero gradient AdamW moved p from 4.0 to {p.item():.6f}, expected 4·(1 − lr·wd) = 3.98: "
        "AdamW shrinks p by (1 − lr·wd): the decay is multiplied by lr")


def test_adamw_step_by_hand():
    p = param([2.0], [0.5])
    AdamW([p], lr=0.1, weight_decay=0.5).step()  # p = 2·(1 − 0.05) = 1.9, then the Adam step
    np.testing.assert_allclose(p.numpy(), [1.9 - 0.1 * 0.5 / (0.5 + 1e-8)], rtol=0, atol=1e-14)


def test_adamw_defaults():
    p = param([4.0], [0.0])
    opt = AdamW([p], lr=0.5)
    assert opt.defaults == {"lr": 0.5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    assert Adam([p]).defaults == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    assert dict(Adam([p]).hyperparams) == Adam([p]).defaults


# ---- parameter groups with the real rules ---------------------------------------

def test_weight_decay_groups_split_matrices_from_vectors():
    w1, b1, w2, b2 = param(np.ones((3, 2))), param(np.ones(2)), param(np.ones((2, 2, 2))), param(np.ones(1))
    scalar = param(1.0)
    groups = weight_decay_groups([w1, b1, w2, b2, scalar], 0.1)
    assert len(groups) == 2, f"expected two groups, got {len(groups)}"
    decayed, kept = groups
    assert decayed["params"] == [w1, w2] and kept["params"] == [b1, b2, scalar], (
        f"weight_decay_groups put {[p.shape for p in decayed['params']]} in the decayed group and "
        f"{[p.shape for p in kept['params']]} in the other: only tensors with 2 or more dims are decayed; "
        "biases and gains (1-D) go in the group with weight_decay 0")
    assert decayed["weight_decay"] == 0.1 and kept["weight_decay"] == 0.0
    assert weight_decay_groups([b1], 0.1) == [{"params": [b1], "weight_decay": 0.0}], "empty groups are left out"

    class Model:
        def parameters(self):
            return [w1, b1]

    assert [g["params"] for g in weight_decay_groups(Model(), 0.3)] == [[w1], [b1]]


def test_adamw_with_two_groups_decays_only_the_first():
    w, b = param(np.full((2, 2), 3.0), np.zeros((2, 2))), param([3.0, 3.0], [0.0, 0.0])
    opt = AdamW(weight_decay_groups([w, b], 0.1), lr=0.5, weight_decay=0.7)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0], (
        "a group's own weight_decay must override the constructor's default")
    opt.step()
    np.testing.assert_allclose(w.numpy(), 3.0 * (1 - 0.5 * 0.1), err_msg="the matrix decays with its group's wd")
    np.testing.assert_allclose(b.numpy(), [3.0, 3.0], err_msg="the vector's group has weight_decay 0")


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_groups_with_different_lr_step_like_separate_optimizers(name):
    make = {"SGD": lambda ps, **kw: SGD(ps, momentum=0.9, **kw), "Adam": Adam, "AdamW": AdamW}[name]
    rng = np.random.default_rng(3)
    starts, grads = [rng.standard_normal((3, 2)), rng.standard_normal(2)], rng.standard_normal((4, 2))
    together = [param(s) for s in starts]
    apart = [param(s) for s in starts]
    opt = make([{"params": [together[0]]}, {"params": [together[1]], "lr": 0.01, "weight_decay": 0.0}],
               lr=0.1, weight_decay=0.2)
    first, second = make([apart[0]], lr=0.1, weight_decay=0.2), make([apart[1]], lr=0.01, weight_decay=0.0)
    for g in grads:
        for p, q, shape in zip(together, apart, [(3, 2), (2,)]):
            p.grad = Tensor(np.resize(g, shape))
            q.grad = Tensor(np.resize(g, shape))
        opt.step()
        first.step()
        second.step()
    for p, q in zip(together, apart):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=0, atol=1e-15)


# ---- the contract ---------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda ps: SGD(ps, lr=0.1),
    "momentum": lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "nesterov": lambda ps: SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: Adam(ps, lr=0.1, weight_decay=0.01),
    "adamw": lambda ps: AdamW(ps, lr=0.1),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_step_never_modifies_grad(name):
    p = param([[1.0, 2.0], [3.0, 4.0]], [[0.1, -0.2], [0.3, -0.4]])
    grad_array = p.grad.data
    before = grad_array.copy()
    opt = OPTIMIZERS[name]([p])
    for _ in range(3):
        opt.step()
    assert p.grad.data is grad_array, "step() must leave .grad as it is (the same Tensor and array)"
    np.testing.assert_array_equal(grad_array, before, err_msg="step() changed the values of .grad in place")
    assert not np.array_equal(p.numpy(), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_parameters_without_grad_are_skipped(name):
    used = param([1.0, 2.0], [0.5, 0.5])
    unused = param([3.0, 4.0])
    opt = OPTIMIZERS[name]([used, unused])
    opt.step()
    np.testing.assert_array_equal(unused.numpy(), [3.0, 4.0])
    assert opt.state[1] == {} and unused.grad is None


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_update_replaces_data_and_keeps_dtype(name):
    p = param(np.ones((3, 2)), np.full((3, 2), 0.5), dtype=np.float32)
    old = p.data
    old_copy = old.copy()
    OPTIMIZERS[name]([p]).step()
    assert p.dtype == np.float32 and p.shape == (3, 2)
    np.testing.assert_array_equal(old, old_copy, err_msg="assign a new array to param.data, do not edit the old one")
    assert np.all(p.numpy() < 1.0)


def test_accepts_a_generator_and_objects_with_parameters():
    ps = [param([1.0], [1.0]), param([2.0], [1.0])]
    assert SGD((p for p in ps), lr=0.1).params == ps

    class Holder:
        def parameters(self):
            return ps

    assert Adam(Holder()).params == ps
    assert isinstance(SGD(ps, lr=0.1), Optimizer)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_dict_round_trip_continues_identically(name):
    rng = np.random.default_rng(1)
    starts = [rng.standard_normal((4, 3)), rng.standard_normal(3)]
    grads = [[rng.standard_normal((4, 3)), rng.standard_normal(3)] for _ in range(6)]

    def groups(ps):
        return [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.03}]

    def run(opt, ps, gs):
        for g in gs:
            for p, gi in zip(ps, g):
                p.grad = Tensor(gi)
            opt.step()

    straight = [param(s) for s in starts]
    opt = OPTIMIZERS[name](groups(straight))
    run(opt, straight, grads)

    first_half = [param(s) for s in starts]
    first = OPTIMIZERS[name](groups(first_half))
    run(first, first_half, grads[:3])
    saved = first.state_dict()
    resumed = [param(p.numpy().copy()) for p in first_half]
    second = OPTIMIZERS[name](groups(resumed))
    second.lr = 123.0  # overwritten by load_state_dict
    second.load_state_dict(saved)
    assert [g["lr"] for g in second.param_groups] == [0.1, 0.03]
    run(second, resumed, grads[3:])
    for a, b in zip(resumed, straight):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_state_dict_is_inspectable_and_a_copy():
    p = param([1.0, 2.0], [0.5, -0.5])
    opt = Adam([p], lr=0.1)
    opt.step()
    sd = opt.state_dict()
    assert sd["type"] == "Adam" and set(sd) == {"type", "param_groups", "state"}
    assert sd["param_groups"] == [{"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                                   "params": [0]}]
    assert sd["state"][0]["step"] == 1
    assert isinstance(sd["state"][0]["exp_avg"], np.ndarray)
    np.testing.assert_allclose(sd["state"][0]["exp_avg"], [0.05, -0.05])
    sd["state"][0]["exp_avg"][:] = 99.0
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.05, -0.05],
                               err_msg="state_dict() must return copies of the state arrays")
    opt.step()
    np.testing.assert_allclose(sd["state"][0]["exp_avg_sq"], [0.00025, 0.00025])  # snapshot kept


def test_state_dict_holds_only_plain_values():
    """Module 07 writes it into a checkpoint as JSON plus arrays: nothing else may appear."""
    p, q = param([1.0, 2.0], [0.5, -0.5]), param(np.ones((2, 2)), np.ones((2, 2)))
    opt = SGD(weight_decay_groups([p, q], 0.1), lr=0.1, momentum=0.9, nesterov=True)
    opt.step()
    sd = opt.state_dict()

    def without_arrays(value):
        if isinstance(value, np.ndarray):
            return None
        if isinstance(value, dict):
            return {k: without_arrays(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [without_arrays(v) for v in value]
        return value

    json.dumps(without_arrays(sd))  # raises TypeError on a Tensor or another object
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]


def test_load_state_dict_rejects_mismatches():
    p = param([1.0, 2.0], [0.5, 0.5])
    adam = Adam([p])
    adam.step()
    with pytest.raises(ValueError, match="SGD"):
        SGD([p], lr=0.1).load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match="2"):
        Adam([p, param([3.0])]).load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match=r"\[1, 1\]"):
        Adam([{"params": [p]}, {"params": [param([3.0])]}]).load_state_dict(
            Adam([p, param([3.0])]).state_dict())
    with pytest.raises(ValueError, match="shape"):
        Adam([param([1.0, 2.0, 3.0])]).load_state_dict(adam.state_dict())


def test_state_nbytes_counts_state_arrays():
    ps = [param(np.zeros((10, 10)), np.ones((10, 10))), param(np.zeros(10), np.ones(10))]
    sgd, mom, adam = SGD(ps, lr=0.1), SGD(ps, lr=0.1, momentum=0.9), Adam(ps)
    for opt in (sgd, mom, adam):
        opt.step()
    assert (sgd.state_nbytes(), mom.state_nbytes(), adam.state_nbytes()) == (0, 880, 1760)


def test_minimises_a_quadratic():
    target = np.array([3.0, -1.0, 0.5])
    for make in (lambda ps: SGD(ps, lr=0.1), lambda ps: SGD(ps, lr=0.05, momentum=0.9),
                 lambda ps: Adam(ps, lr=0.1), lambda ps: AdamW(ps, lr=0.1, weight_decay=0.0)):
        p = param(np.zeros(3))
        opt = make([p])
        for _ in range(300):
            p.grad = Tensor(2 * (p.data - target))
            opt.step()
        np.testing.assert_allclose(p.numpy(), target, atol=1e-3)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_float64_gradient_does_not_change_a_float32_parameter(name):
    p = param([1.0, 2.0], dtype=np.float32)
    p.grad = Tensor(np.array([0.5, -0.5], dtype=np.float64))
    opt = OPTIMIZERS[name]([p])
    opt.step()
    opt.step()
    assert p.dtype == np.float32, f"a float64 gradient turned the float32 parameter into {p.dtype}: write back in the parameter's dtype"
