"""Module 13 against PyTorch, float64: LayerNorm, a transformer block, and a GPT's loss, values and gradients.

PyTorch's side is written here as the same model (nanoGPT's layout). Conventions to translate:
our Linear weights are (in, out) and compute x @ W; torch's are (out, in) and compute x @ Wᵀ,
so torch's weight = ours.T. Our GELU is the tanh approximation: torch's gelu(approximate="tanh").
"""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.models.transformer import GPT, TransformerBlock, layer_norm  # noqa: E402


def t64(array, grad=False):
    return torch.tensor(np.asarray(array), dtype=torch.float64, requires_grad=grad)


class TorchBlock:
    """The same pre-norm block in PyTorch, reading its weights from one of ours."""

    def __init__(self, ours: TransformerBlock):
        p = dict(ours.named_parameters())
        self.p = {name: t64(value.numpy(), grad=True) for name, value in p.items()}
        self.heads = ours.attn.num_heads

    def linear(self, x, name):
        bias = self.p.get(f"{name}.bias")
        return F.linear(x, self.p[f"{name}.weight"].T, bias)

    def ln(self, x, name):
        return F.layer_norm(x, x.shape[-1:], self.p[f"{name}.weight"], self.p.get(f"{name}.bias"), 1e-5)

    def __call__(self, x):
        B, T, E = x.shape
        h = self.ln(x, "ln1")
        q, k, v = (self.linear(h, f"attn.{n}_proj").view(B, T, self.heads, -1).transpose(1, 2) for n in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, E)
        x = x + self.linear(a, "attn.out_proj")
        h = F.gelu(self.linear(self.ln(x, "ln2"), "mlp.fc"), approximate="tanh")
        return x + self.linear(h, "mlp.proj")


@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 16)], ids=["2x5x8", "3x16"])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-5)], ids=["float64", "float32"])
def test_layer_norm_matches_torch(shape, dtype, tol):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(dtype) * 3 for s in (shape, shape[-1:], shape[-1:]))
    g = rng.standard_normal(shape).astype(dtype)
    ours = [Tensor(a, requires_grad=True) for a in (x, w, b)]
    out = layer_norm(*ours)
    out.backward(g)
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    ref = F.layer_norm(theirs[0], shape[-1:], theirs[1], theirs[2], 1e-5)
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=tol, rtol=tol)
    for name, a, t in zip(("x", "weight", "bias"), ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=tol * 10, rtol=tol * 10,
                                   err_msg=f"layer_norm gradient for {name}")


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_block_matches_torch(bias):
    ours = TransformerBlock(16, 4, bias=bias, seed=1, dtype=np.float64)
    for p in ours.parameters():  # move LayerNorms away from 1/0 so every parameter matters
        p.data = p.data + np.random.default_rng(p.size).standard_normal(p.shape) * 0.1
    theirs = TorchBlock(ours)
    rng = np.random.default_rng(2)
    x, g = rng.standard_normal((2, 7, 16)), rng.standard_normal((2, 7, 16))
    xt = Tensor(x, requires_grad=True)
    out = ours(xt)
    out.backward(g)
    x_torch = t64(x, grad=True)
    ref = theirs(x_torch)
    ref.backward(t64(g))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), x_torch.grad.numpy(), atol=1e-11)
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs.p[name].grad.numpy(), atol=1e-11, err_msg=name)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_gpt_loss_and_gradients_match_torch(tie):
    model = GPT(23, 16, 2, 4, 12, tie_weights=tie, seed=3, dtype=np.float64)
    rng = np.random.default_rng(4)
    idx, targets = rng.integers(0, 23, (2, 3, 12))
    _, loss = model(idx, targets=targets)
    loss.backward()

    blocks = [TorchBlock(b) for b in model.blocks]
    wte = t64(model.token_embedding.weight.numpy(), grad=True)
    wpe = t64(model.position_embedding.weight.numpy(), grad=True)
    ln_f = {n: t64(p.numpy(), grad=True) for n, p in model.ln_f.named_parameters()}
    head = wte if tie else t64(model.lm_head.weight.numpy().T, grad=True)
    x = wte[torch.tensor(idx)] + wpe[torch.arange(12)]
    for block in blocks:
        x = block(x)
    x = F.layer_norm(x, (16,), ln_f["weight"], ln_f["bias"], 1e-5)
    logits = x @ head.T
    ref = F.cross_entropy(logits.reshape(-1, 23), torch.tensor(targets).reshape(-1))
    ref.backward()

    assert abs(loss.item() - ref.item()) < 1e-12
    np.testing.assert_allclose(model.token_embedding.weight.grad.numpy(), wte.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(model.position_embedding.weight.grad.numpy(), wpe.grad.numpy(), atol=1e-12)
    if not tie:
        np.testing.assert_allclose(model.lm_head.weight.grad.numpy(), head.grad.numpy().T, atol=1e-12)
    for ours_block, block in zip(model.blocks, blocks):
        for name, p in ours_block.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), block.p[name].grad.numpy(), atol=1e-12, err_msg=name)
    for name, p in model.ln_f.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), ln_f[name].grad.numpy(), atol=1e-12)
