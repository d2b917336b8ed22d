"""Module 06 against torch.optim: several steps in float64, same trajectory to 1e-9."""
import numpy as np
import pytest

from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import Tensor

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.05, betas=(0.85, 0.99), weight_decay=0.3)),
]
OURS = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}


def gradient(values: np.ndarray) -> np.ndarray:
    """A gradient that depends on the current values, so the whole trajectory is compared."""
    return 2.0 * (values - 0.3) + np.sin(3.0 * values)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_matches_torch_optim_for_ten_steps(name, kwargs):
    rng = np.random.default_rng(7)
    shapes = [(5, 3), (3,), (2, 2, 2)]
    starts = [rng.standard_normal(s) for s in shapes]

    ours = [Tensor(s.copy(), requires_grad=True) for s in starts]
    theirs = [torch.tensor(s.copy(), dtype=torch.float64, requires_grad=True) for s in starts]
    opt_ours = OURS[name](ours, **kwargs)
    opt_theirs = getattr(torch.optim, name)(theirs, **kwargs)
    for step in range(10):
        for i, (p, t) in enumerate(zip(ours, theirs)):
            if step == 4 and i == 1:  # one parameter without a gradient on one step
                p.grad, t.grad = None, None
                continue
            g = gradient(p.numpy())
            p.grad = Tensor(g)
            t.grad = torch.tensor(gradient(t.detach().numpy()))
        opt_ours.step()
        opt_theirs.step()
        for p, t in zip(ours, theirs):
            np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=0, atol=1e-9)
    if name != "SGD" or kwargs.get("momentum"):
        key_map = {"SGD": {"momentum_buffer": "momentum_buffer"},
                   "Adam": {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"},
                   "AdamW": {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}}[name]
        for i, t in enumerate(theirs):
            for ours_key, torch_key in key_map.items():
                np.testing.assert_allclose(opt_ours.state[i][ours_key], opt_theirs.state[t][torch_key].numpy(),
                                           rtol=0, atol=1e-9)
            if name != "SGD":
                assert opt_ours.state[i]["step"] == int(opt_theirs.state[t]["step"])
