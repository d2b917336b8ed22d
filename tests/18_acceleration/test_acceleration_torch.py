"""Module 18 against PyTorch: bias_gelu equals F.gelu(x + b, approximate="tanh") and blas_layer_norm
equals F.layer_norm, in value and gradient (float64); FusedAdamW follows torch.optim.AdamW with weight
decay on some parameters only; section 6's compiled ops equal F.layer_norm, F.gelu, F.cross_entropy and the
causal F.scaled_dot_product_attention (float64)."""
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


def torch_parity(ours_fn, theirs_fn, arrays, upstream, rtol=1e-10):
    """ours_fn(*Tensors) against theirs_fn(*torch tensors), float64: the value and every input's gradient."""
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, tout = ours_fn(*ours), theirs_fn(*theirs)
    out.backward(upstream)
    tout.backward(torch.tensor(upstream))
    assert np.allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-12), "the value differs from PyTorch"
    for k, (a, t) in enumerate(zip(ours, theirs)):
        assert np.allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=1e-12), f"input {k}'s gradient differs"


def test_compiled_kernels_match_torch():
    """Section 6's compiled ops: F.layer_norm, F.gelu(tanh), F.cross_entropy, causal F.scaled_dot_product_attention."""
    from tinytorch.perf.acceleration import (causal_attention, compiled_bias_gelu, compiled_cross_entropy,
                                             compiled_layer_norm)

    F = torch.nn.functional
    rng = np.random.default_rng(5)
    x, g = rng.standard_normal((2, 5, 7)) * 2 + 1, rng.standard_normal((2, 5, 7))
    w, b = 1 + 0.3 * rng.standard_normal(7), rng.standard_normal(7)
    torch_parity(compiled_layer_norm, lambda x, w, b: F.layer_norm(x, (7,), w, b, eps=1e-5), [x, w, b], g)
    torch_parity(compiled_bias_gelu, lambda x, b: F.gelu(x + b, approximate="tanh"), [x, b], g)
    targets = rng.integers(0, 7, (2, 5))
    torch_parity(lambda z: compiled_cross_entropy(z, targets),
                 lambda z: F.cross_entropy(z.reshape(-1, 7), torch.tensor(targets.reshape(-1))), [x], np.array(1.5))
    q, k, v = (rng.standard_normal((2, 3, 6, 4)) for _ in range(3))
    torch_parity(causal_attention, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 [q, k, v], rng.standard_normal((2, 3, 6, 4)))
