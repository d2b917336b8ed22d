"""Module 07 against PyTorch: clip_grad_norm_ and the learning-rate schedulers."""
import math

import numpy as np
import pytest

from tinytorch.core.optimizers import SGD
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import CosineWarmupLR, StepLR, clip_grad_norm

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 3.0, 100.0])
@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s) for s in [(3, 4), (4,), (2, 2, 2)]]
    ours = []
    theirs = []
    for g in grads:
        p = Tensor(np.zeros_like(g), requires_grad=True)
        p.grad = Tensor(g.copy())
        ours.append(p)
        t = torch.zeros(g.shape, dtype=torch.float64, requires_grad=True)
        t.grad = torch.tensor(g.copy())
        theirs.append(t)
    total = clip_grad_norm(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert total == pytest.approx(expected.item(), rel=1e-13)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-13, atol=0)


def test_step_lr_matches_torch():
    ours = StepLR(SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.3), step_size=3, gamma=0.7)
    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=0.3)
    theirs = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
    for _ in range(12):
        assert ours.lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-14)
        opt.step()
        theirs.step()
        ours.step()


def test_cosine_without_warmup_matches_cosine_annealing():
    ours = CosineWarmupLR(SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1), warmup_steps=0,
                          total_steps=20, min_lr=0.001)
    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=0.1)
    theirs = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20, eta_min=0.001)
    for _ in range(21):
        assert ours.lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-10, abs=1e-15)
        opt.step()
        theirs.step()
        ours.step()


@pytest.mark.parametrize("warmup,total,min_lr", [(4, 20, 0.0), (2, 9, 0.01), (10, 40, 0.001)],
                         ids=lambda v: str(v))
def test_cosine_with_warmup_matches_linear_then_cosine_annealing(warmup, total, min_lr):
    """Warm-up base·(t+1)/W is LinearLR(1/W → 1 over W−1 steps); then CosineAnnealingLR to min_lr."""
    ours = CosineWarmupLR(SGD([Tensor(np.zeros(1), requires_grad=True)], lr=0.1), warmup_steps=warmup,
                          total_steps=total, min_lr=min_lr)
    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=0.1)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
    theirs = torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[warmup])
    for step in range(total + 1):
        assert ours.lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9, abs=1e-15), f"step {step}"
        opt.step()
        theirs.step()
        ours.step()
