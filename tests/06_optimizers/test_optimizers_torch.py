"""Module 06 against torch.optim: several steps in float64, same trajectory to 1e-9,
with one group and with two groups (different lr and weight decay, as nanoGPT uses them)."""
import numpy as np
import pytest

from tinytorch.core.optimizers import SGD, Adam, AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

CASES = {
    "SGD(lr=0.1)": ("SGD", dict(lr=0.1)),
    "SGD(momentum=0.9)": ("SGD", dict(lr=0.05, momentum=0.9)),
    "SGD(momentum=0.8,wd=0.1)": ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1)),
    "SGD(nesterov,wd=0.05)": ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05)),
    "Adam(lr=0.01)": ("Adam", dict(lr=0.01)),
    "Adam(betas=(0.8,0.95),eps=1e-6,wd=0.1)": ("Adam", dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    "AdamW(lr=0.01)": ("AdamW", dict(lr=0.01)),
    "AdamW(betas=(0.85,0.99),wd=0.3)": ("AdamW", dict(lr=0.05, betas=(0.85, 0.99), weight_decay=0.3)),
}
OURS = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}
STATE_KEYS = {"SGD": ["momentum_buffer"], "Adam": ["exp_avg", "exp_avg_sq"], "AdamW": ["exp_avg", "exp_avg_sq"]}
SHAPES = [(5, 3), (3,), (2, 2, 2), (4,)]


def gradient(values: np.ndarray) -> np.ndarray:
    """A gradient that depends on the current values, so the whole trajectory is compared."""
    return 2.0 * (values - 0.3) + np.sin(3.0 * values)


def make_pair(starts):
    ours = [Tensor(s.copy(), requires_grad=True) for s in starts]
    theirs = [torch.tensor(s.copy(), dtype=torch.float64, requires_grad=True) for s in starts]
    return ours, theirs


def run_and_compare(name, opt_ours, opt_theirs, ours, theirs, steps=10, on_step=None):
    for step in range(steps):
        if on_step is not None:
            on_step(step)
        for i, (p, t) in enumerate(zip(ours, theirs)):
            if step == 4 and i == 1:  # one parameter without a gradient on one step
                p.grad, t.grad = None, None
                continue
            p.grad = Tensor(gradient(p.numpy()))
            t.grad = torch.tensor(gradient(t.detach().numpy()))
        opt_ours.step()
        opt_theirs.step()
        for i, (p, t) in enumerate(zip(ours, theirs)):
            np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=0, atol=1e-9,
                                       err_msg=f"{name}: parameter {i} after step {step + 1}")
    for i, t in enumerate(theirs):
        torch_state = opt_theirs.state[t]
        for key in STATE_KEYS[name]:
            if key in torch_state and torch_state[key] is not None:
                np.testing.assert_allclose(opt_ours.state[i][key], torch_state[key].numpy(), rtol=0, atol=1e-9)
        if name != "SGD":
            assert opt_ours.state[i]["step"] == int(torch_state["step"]), f"step count of parameter {i}"


@pytest.mark.parametrize("case", CASES)
def test_matches_torch_optim_for_ten_steps(case):
    name, kwargs = CASES[case]
    rng = np.random.default_rng(7)
    ours, theirs = make_pair([rng.standard_normal(s) for s in SHAPES])
    run_and_compare(name, OURS[name](ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs), ours, theirs)


@pytest.mark.parametrize("case", CASES)
def test_two_groups_with_their_own_lr_and_weight_decay_match_torch(case):
    name, kwargs = CASES[case]
    rng = np.random.default_rng(11)
    ours, theirs = make_pair([rng.standard_normal(s) for s in SHAPES])

    def groups(ps):  # matrices with a larger weight decay; vectors with their own lr and none
        return [{"params": [ps[0], ps[2]], "weight_decay": 0.2},
                {"params": [ps[1], ps[3]], "weight_decay": 0.0, "lr": kwargs["lr"] / 2}]

    opt_ours, opt_theirs = OURS[name](groups(ours), **kwargs), getattr(torch.optim, name)(groups(theirs), **kwargs)
    for ours_group, torch_group in zip(opt_ours.param_groups, opt_theirs.param_groups):
        for key, value in ours_group.items():
            if key != "params":
                assert value == torch_group[key], f"group setting {key}: ours {value}, torch {torch_group[key]}"
    run_and_compare(name, opt_ours, opt_theirs, [ours[i] for i in (0, 2, 1, 3)], [theirs[i] for i in (0, 2, 1, 3)])


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_setting_lr_every_step_matches_torch(name):
    """A schedule sets `opt.lr`; torch's schedulers set every group's "lr": the same steps."""
    rng = np.random.default_rng(5)
    ours, theirs = make_pair([rng.standard_normal(s) for s in SHAPES])
    kwargs = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.1)
    opt_ours = OURS[name]([{"params": ours[:2]}, {"params": ours[2:], "weight_decay": 0.0}], **kwargs)
    opt_theirs = getattr(torch.optim, name)([{"params": theirs[:2]}, {"params": theirs[2:], "weight_decay": 0.0}],
                                            **kwargs)

    def set_lr(step):
        lr = 0.1 * (step + 1) / 10
        opt_ours.lr = lr
        for group in opt_theirs.param_groups:
            group["lr"] = lr

    run_and_compare(name, opt_ours, opt_theirs, ours, theirs, on_step=set_lr)


def test_nanogpt_groups_match_torch_adamw():
    """nanoGPT: AdamW(lr 1e-3, betas (0.9, 0.99)), weight decay 0.1 on tensors with ndim >= 2 only."""
    rng = np.random.default_rng(2)
    shapes = [(6, 4), (4,), (4, 4), (4,), (4,)]
    ours, theirs = make_pair([rng.standard_normal(s) for s in shapes])
    opt_ours = AdamW(weight_decay_groups(ours, 0.1), lr=1e-3, betas=(0.9, 0.99))
    torch_groups = [{"params": [t for t in theirs if t.dim() >= 2], "weight_decay": 0.1},
                    {"params": [t for t in theirs if t.dim() < 2], "weight_decay": 0.0}]
    opt_theirs = torch.optim.AdamW(torch_groups, lr=1e-3, betas=(0.9, 0.99))
    order = [0, 2, 1, 3, 4]  # the groups list matrices first
    run_and_compare("AdamW", opt_ours, opt_theirs, [ours[i] for i in order], [theirs[i] for i in order], steps=20)
