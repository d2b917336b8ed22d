"""Module 18 against PyTorch: bias_gelu equals F.gelu(x + b, approximate="tanh") and blas_layer_norm
equals F.layer_norm, in value and gradient (float64); FusedAdamW follows torch.optim.AdamW with weight
decay on some parameters only."""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.perf.acceleration import FusedAdamW, bias_gelu, blas_layer_norm

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def test_bias_gelu_matches_torch():
    rng = np.random.default_rng(0)
    x, b, g = rng.standard_normal((4, 7)) * 3, rng.standard_normal(7), rng.standard_normal((4, 7))
    xt, bt = Tensor(x, requires_grad=True), Tensor(b, requires_grad=True)
    out = bias_gelu(xt, bt)
    out.backward(g)
    tx, tb = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
    tout = torch.nn.functional.gelu(tx + tb, approximate="tanh")
    tout.backward(torch.tensor(g))
    assert np.allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert np.allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert np.allclose(bt.grad.numpy(), tb.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm_shape", [(7,), (3, 7)])
def test_blas_layer_norm_matches_torch(norm_shape):
    rng = np.random.default_rng(2)
    shape = (4, 3) + norm_shape[-1:] if len(norm_shape) == 1 else (4,) + norm_shape
    x, w, b, g = (rng.standard_normal(shape) * 2 + 1, 1 + 0.3 * rng.standard_normal(norm_shape),
                  rng.standard_normal(norm_shape), rng.standard_normal(shape))
    ours = [Tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    out = blas_layer_norm(*ours, eps=1e-5)
    out.backward(g)
    tout = torch.nn.functional.layer_norm(theirs[0], norm_shape, theirs[1], theirs[2], eps=1e-5)
    tout.backward(torch.tensor(g))
    assert np.allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name, p, t in zip(("x", "weight", "bias"), ours, theirs):
        assert np.allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12), f"d{name} differs from torch's"


def test_fused_adamw_follows_torch():
    rng = np.random.default_rng(1)
    shapes = [(4, 3), (3,), (2, 5), (5,)]
    values = [rng.standard_normal(s) for s in shapes]
    ours = [Tensor(v.copy(), requires_grad=True) for v in values]
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in values]
    groups = lambda ps: [{"params": [ps[0], ps[2]], "weight_decay": 0.1}, {"params": [ps[1], ps[3]], "weight_decay": 0.0}]
    optimizer = FusedAdamW(groups(ours), lr=1e-2, betas=(0.9, 0.99))
    torch_optimizer = torch.optim.AdamW(groups(theirs), lr=1e-2, betas=(0.9, 0.99))
    for step in range(4):
        grads = [rng.standard_normal(s) for s in shapes]
        for p, t, g in zip(ours, theirs, grads):
            p.grad, t.grad = Tensor(g), torch.tensor(g)
        optimizer.step()
        torch_optimizer.step()
        for p, t in zip(ours, theirs):
            assert np.allclose(p.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12), f"step {step + 1} differs"
