"""Module 06, graded cases: SGD (momentum, Nesterov, decay), Adam, AdamW, groups, state dicts.

Gradients are set by hand (seeded arrays), so the cases need no autograd: they check the
update rules over several steps, the state the optimizers keep, and the group settings.
Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.layers import Linear, Module
from tinytorch.core.optimizers import SGD, Adam, AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor


def parameters(rng, *shapes):
    return [Tensor(rng.standard_normal(shape), requires_grad=True) for shape in shapes]


def run_steps(optimizer, params, rng, steps, skip=()):
    """`steps` steps, each with fresh seeded gradients; (step, i) in `skip` leaves params[i] without one.

    Returns the first gradient array given to each parameter and a copy of it (an update
    rule that keeps that array and changes it in place shows up as a difference)."""
    first = {}
    for step in range(steps):
        for i, p in enumerate(params):
            if (step, i) in skip:
                p.grad = None
                continue
            p.grad = Tensor(rng.standard_normal(p.shape))
            first.setdefault(i, (p.grad.data, p.grad.data.copy()))
        optimizer.step()
    return first


def _sgd_momentum(rng):
    params = parameters(rng, (3, 4), (5,))
    optimizer = SGD(params, lr=0.1, momentum=0.9, weight_decay=0.05)
    first = run_steps(optimizer, params, rng, 4)
    return {"p0": params[0], "p1": params[1], "buffer0": optimizer.state[0]["momentum_buffer"],
            "grads_untouched": all(np.array_equal(kept, copy) for kept, copy in first.values())}


def _sgd_nesterov(rng):
    params = parameters(rng, (2, 3))
    optimizer = SGD(params, lr=0.05, momentum=0.8, nesterov=True)
    first = run_steps(optimizer, params, rng, 3)
    plain = parameters(rng, (4,))
    plain_optimizer = SGD(plain, lr=0.3)
    run_steps(plain_optimizer, plain, rng, 2)
    return {"p": params[0], "plain": plain[0],
            "grads_untouched": all(np.array_equal(kept, copy) for kept, copy in first.values()), "plain_state": len(plain_optimizer.state[0]),
            "nesterov_without_momentum": raised(SGD, parameters(rng, (2,)), lr=0.1, nesterov=True)}


def _adam(rng):
    params = parameters(rng, (3, 3), (4,))
    optimizer = Adam(params, lr=0.01, betas=(0.8, 0.95), eps=1e-3)
    run_steps(optimizer, params, rng, 5, skip={(1, 1), (3, 1)})
    return {"p0": params[0], "p1": params[1], "steps": [s["step"] for s in optimizer.state],
            "m0": optimizer.state[0]["exp_avg"], "v1": optimizer.state[1]["exp_avg_sq"]}


def _adam_first_step(rng):
    params = parameters(rng, (6,))
    start = params[0].numpy().copy()
    optimizer = Adam(params, lr=0.1)
    run_steps(optimizer, params, rng, 1)
    return {"moved": params[0].numpy() - start}


def _adam_decay(rng):
    params = parameters(rng, (2, 4))
    optimizer = Adam(params, lr=0.02, weight_decay=0.3, eps=1e-6)
    run_steps(optimizer, params, rng, 3)
    return {"p": params[0]}


def _adamw(rng):
    params = parameters(rng, (3, 2), (2,))
    optimizer = AdamW(params, lr=0.05, weight_decay=0.2)
    run_steps(optimizer, params, rng, 3)
    default = AdamW(parameters(rng, (1,)))
    return {"p0": params[0], "p1": params[1], "default_decay": default.param_groups[0]["weight_decay"]}


def _groups(rng):
    a, b, c = parameters(rng, (2, 2), (3,), (2,))
    optimizer = SGD([{"params": [a, b], "lr": 0.5}, {"params": [c], "momentum": 0.5}], lr=0.01, momentum=0.9)
    run_steps(optimizer, [a, b, c], rng, 2)
    settings = [(g["lr"], g["momentum"]) for g in optimizer.param_groups]
    optimizer.lr = 0.2
    run_steps(optimizer, [a, b, c], rng, 1)
    optimizer.zero_grad()
    return {"a": a, "c": c, "settings": settings, "lr_after": [g["lr"] for g in optimizer.param_groups],
            "hyper_lr": optimizer.hyperparams["lr"], "grads_none": [p.grad is None for p in (a, b, c)],
            "twice": raised(SGD, [a, a], lr=0.1), "negative_lr": raised(SGD, [b], lr=-1.0)}


def _state_dict(rng):
    params = parameters(rng, (2, 3), (3,))
    optimizer = Adam(params, lr=0.03, betas=(0.7, 0.9))
    run_steps(optimizer, params, rng, 2)
    saved = optimizer.state_dict()
    before = saved["state"][0]["exp_avg"].copy()
    run_steps(optimizer, params, rng, 1)  # the optimizer moves on; the saved copy must not
    copies = bool(np.array_equal(saved["state"][0]["exp_avg"], before))
    clones = [Tensor(p.numpy().copy(), requires_grad=True) for p in params]
    resumed = Adam(clones, lr=0.5)
    resumed.load_state_dict(saved)
    grads = [rng.standard_normal(p.shape) for p in clones]
    for p, g in zip(clones, grads):
        p.grad = Tensor(g)
    resumed.step()
    return {"copies": copies, "lr": resumed.param_groups[0]["lr"], "betas": list(resumed.param_groups[0]["betas"]),
            "steps": [s["step"] for s in resumed.state], "p0": clones[0], "groups": saved["param_groups"][0]["params"],
            "wrong_type": raised(SGD(parameters(rng, (2, 3), (3,)), lr=0.1).load_state_dict, saved)}


class Net(Module):
    def __init__(self, rng):
        super().__init__()
        self.gain = Tensor(np.ones(3), requires_grad=True)
        self.first = Linear(3, 4, rng=rng)
        self.second = Linear(4, 2, rng=rng)


def _decay_groups(rng):
    net = Net(rng)
    groups = weight_decay_groups(net, 0.1)
    names = {id(p): n for n, p in net.named_parameters()}
    return {"decayed": [names[id(p)] for p in groups[0]["params"]],
            "not_decayed": [names[id(p)] for p in groups[1]["params"]],
            "decay": [g["weight_decay"] for g in groups],
            "vectors_only": len(weight_decay_groups([Tensor(np.ones(2), requires_grad=True)], 0.1))}


CASES = {
    "sgd-momentum": (_sgd_momentum, "SGD with momentum 0.9 and weight decay over 4 steps; .grad never changed"),
    "sgd-nesterov": (_sgd_nesterov, "Nesterov SGD without decay (.grad never changed) and plain SGD (no state)"),
    "adam": (_adam, "Adam with betas (0.8, 0.95), eps 1e-3, a parameter skipped on two steps: per-parameter counts"),
    "adam-first-step": (_adam_first_step, "Adam's first step moves each parameter by about lr (bias correction)"),
    "adam-decay": (_adam_decay, "Adam's weight decay is L2, added to the gradient"),
    "adamw": (_adamw, "AdamW's decoupled decay p·(1 − lr·wd); default weight_decay 0.01"),
    "groups": (_groups, "group settings override the defaults; the lr setter reaches every group; zero_grad"),
    "state-dict": (_state_dict, "state_dict copies; load_state_dict restores settings and state, then steps alike"),
    "decay-groups": (_decay_groups, "weight_decay_groups decays matrices only"),
}
