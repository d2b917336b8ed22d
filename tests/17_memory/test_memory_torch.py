"""Module 17 against PyTorch: torch.utils.checkpoint, torch.amp.GradScaler("cpu"), torch.autocast."""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.activations import gelu  # noqa: E402
from tinytorch.core.layers import Linear, Module  # noqa: E402
from tinytorch.core.losses import cross_entropy, mse_loss  # noqa: E402
from tinytorch.core.optimizers import SGD  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.models.transformer import LayerNorm  # noqa: E402
from tinytorch.perf.memory import GradScaler, autocast, checkpoint  # noqa: E402


class PreNormMLP(Module):
    """x + proj(gelu(fc(ln(x)))): half a transformer block."""

    def __init__(self, width, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.ln = LayerNorm(width, dtype=np.float64)
        self.fc = Linear(width, 4 * width, rng=rng, dtype=np.float64)
        self.proj = Linear(4 * width, width, rng=rng, dtype=np.float64)
        self.ln.weight.data = rng.standard_normal(width) + 1
        self.ln.bias.data = rng.standard_normal(width)

    def forward(self, x):
        return x + self.proj(gelu(self.fc(self.ln(x))))


def torch_twin(ours):
    """The same function in PyTorch, with leaf copies of our parameters (same order)."""
    params = [torch.tensor(p.numpy(), requires_grad=True) for p in ours.parameters()]
    ln_w, ln_b, fc_w, fc_b, proj_w, proj_b = params
    width = ln_w.shape[0]

    def fn(x):
        h = torch.nn.functional.layer_norm(x, (width,), ln_w, ln_b, eps=1e-5)
        return x + torch.nn.functional.gelu(h @ fc_w + fc_b, approximate="tanh") @ proj_w + proj_b

    return fn, params


def test_checkpoint_equals_torch_utils_checkpoint():
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    ours = PreNormMLP(6)
    x = np.random.default_rng(1).standard_normal((2, 5, 6))
    g = np.random.default_rng(2).standard_normal((2, 5, 6))
    xt = Tensor(x, requires_grad=True)
    out = checkpoint(ours, xt)
    out.backward(g)
    fn, params = torch_twin(ours)
    x_torch = torch.tensor(x, requires_grad=True)
    out_torch = torch_checkpoint(fn, x_torch, use_reentrant=False)
    out_torch.backward(torch.tensor(g))
    assert np.allclose(out.numpy(), out_torch.detach().numpy(), atol=1e-12)
    for name, a, b in zip(["x"] + [n for n, _ in ours.named_parameters()], [xt, *ours.parameters()], [x_torch, *params]):
        assert np.allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12), f"{name}: differs from torch"


def run_torch_scaler(gradients, manual_unscale=(), **settings):
    scaler = torch.amp.GradScaler("cpu", **settings)
    w = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=1.0)
    scales, weights, trackers = [], [], []
    for step, g in enumerate(gradients):
        scaler.scale(torch.ones(()))  # PyTorch makes its scale in the first scale() call
        w.grad = torch.tensor(g) * scaler.get_scale()
        if step in manual_unscale:
            scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
        weights.append(w.detach().numpy().copy())
        trackers.append(int(scaler._growth_tracker.item()))
    return scales, weights, trackers


def run_our_scaler(gradients, manual_unscale=(), **settings):
    scaler = GradScaler(**settings)
    w = Tensor(np.zeros(3, np.float32), requires_grad=True)
    optimizer = SGD([w], lr=1.0)
    scales, weights, trackers = [], [], []
    for step, g in enumerate(gradients):
        w.grad = Tensor(g * np.float32(scaler.get_scale()))
        if step in manual_unscale:
            scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
        weights.append(w.numpy().copy())
        trackers.append(scaler._growth_tracker)
    return scales, weights, trackers


def overflowing_pattern(steps, seed):
    """Gradients of `steps` steps, some with an inf or a NaN (about one step in four)."""
    rng = np.random.default_rng(seed)
    gradients = []
    for _ in range(steps):
        g = rng.standard_normal(3).astype(np.float32)
        roll = rng.random()
        if roll < 0.15:
            g[rng.integers(3)] = np.inf * rng.choice([-1, 1])
        elif roll < 0.25:
            g[rng.integers(3)] = np.nan
        gradients.append(g)
    return gradients


@pytest.mark.parametrize("seed, settings", [
    (0, dict(init_scale=8.0, growth_interval=3)),
    (1, dict(init_scale=2.0**16, growth_interval=2, growth_factor=3.0, backoff_factor=0.25)),
    (2, dict(init_scale=1.0, growth_interval=1)),
    (3, dict()),
    (4, dict(init_scale=3.0, growth_interval=1, growth_factor=1.7, backoff_factor=0.3)),
], ids=["interval 3", "factors 3 and 0.25", "interval 1", "defaults", "factors 1.7 and 0.3"])
def test_grad_scaler_follows_torch_step_for_step(seed, settings):
    gradients = overflowing_pattern(40, seed)
    manual = (5, 11, 20)
    ours = run_our_scaler(gradients, manual, **settings)
    theirs = run_torch_scaler(gradients, manual, **settings)
    assert ours[0] == theirs[0], f"scales differ from torch.amp.GradScaler:\nours   {ours[0]}\ntorch {theirs[0]}"
    assert ours[2] == theirs[2], "the growth tracker differs from torch's"
    for step, (a, b) in enumerate(zip(ours[1], theirs[1])):
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True), \
            f"step {step}: the weights differ from torch's (a skipped or an extra step?)"


def test_autocast_policy_matches_torch_cpu_float16():
    """Products in float16, the losses in float32, as torch.autocast("cpu", dtype=float16). (Our float32 list
    follows PyTorch's CUDA list, which also puts softmax, log_softmax and layer_norm in float32; on the CPU
    PyTorch runs those in float16, so they are not compared here.)"""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    targets = np.array([0, 1, 2, 0])
    with autocast():
        h = Tensor(x) @ Tensor(w)
        ours = {"mm": h, "cross_entropy": cross_entropy(h, targets), "mse": mse_loss(h, np.zeros((4, 3), np.float32))}
    with torch.autocast("cpu", dtype=torch.float16):
        ht = torch.tensor(x) @ torch.tensor(w)
        theirs = {"mm": ht, "cross_entropy": torch.nn.functional.cross_entropy(ht, torch.tensor(targets)),
                  "mse": torch.nn.functional.mse_loss(ht, torch.zeros(4, 3))}
    for name in ours:
        assert str(ours[name].dtype) == str(theirs[name].dtype).replace("torch.", ""), \
            f"{name}: ours {ours[name].dtype}, torch.autocast {theirs[name].dtype}"
        assert np.allclose(ours[name].numpy().astype(np.float32), theirs[name].float().numpy(), rtol=2e-3, atol=2e-3), name
