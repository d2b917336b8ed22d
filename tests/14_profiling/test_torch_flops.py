"""count_flops against PyTorch's own counter, torch.utils.flop_counter.FlopCounterMode, on the same
models: a GPT (nanoGPT's layout, our weights copied in), Conv2d, and attention.

PyTorch's CPU attention kernel (_scaled_dot_product_flash_attention_for_cpu) is not in the
counter's table, so attention is counted on PyTorch's math backend (SDPBackend.MATH), where it
is two batched products forward and four backward: what our fused sdpa rule runs. Our
flash_attention is checked against the formulas PyTorch applies to its fused kernels
(sdpa_flop_count, sdpa_backward_flop_count: the backward recomputes the scores).
"""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count  # noqa: E402

from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.perf.profiling import count_flops  # noqa: E402


def torch_flops(fn) -> int:
    """FlopCounterMode's total for fn(), attention on the math backend (its CPU kernel is not counted)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def assert_same(ours: int, theirs: int, what: str) -> None:
    assert theirs > 0 and abs(ours - theirs) <= 0.01 * theirs, (
        f"{what}: count_flops {ours:,}, FlopCounterMode {theirs:,} ({ours / theirs:.4f}×): expected within 1%")


class TorchGPT:
    """nanoGPT's GPT in PyTorch, reading every weight from one of ours (our Linear weights are
    (in, out), PyTorch's (out, in): F.linear gets the transpose; GELU is the tanh approximation)."""

    def __init__(self, ours):
        self.p = {name: torch.tensor(value.numpy(), requires_grad=True) for name, value in ours.named_parameters()}
        self.layers, self.heads, self.embed = ours.num_layers, ours.num_heads, ours.embed_dim

    def linear(self, x, name):
        return F.linear(x, self.p[f"{name}.weight"].T, self.p.get(f"{name}.bias"))

    def ln(self, x, name):
        return F.layer_norm(x, (self.embed,), self.p[f"{name}.weight"], self.p.get(f"{name}.bias"), 1e-5)

    def __call__(self, idx, targets):
        B, T = idx.shape
        x = F.embedding(idx, self.p["token_embedding.weight"]) + F.embedding(torch.arange(T), self.p["position_embedding.weight"])
        for i in range(self.layers):
            b = f"blocks.{i}"
            h = self.ln(x, f"{b}.ln1")
            q, k, v = (self.linear(h, f"{b}.attn.{n}_proj").view(B, T, self.heads, -1).transpose(1, 2) for n in "qkv")
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, self.embed)
            x = x + self.linear(a, f"{b}.attn.out_proj")
            x = x + self.linear(F.gelu(self.linear(self.ln(x, f"{b}.ln2"), f"{b}.mlp.fc"), approximate="tanh"), f"{b}.mlp.proj")
        logits = self.ln(x, "ln_f") @ self.p["token_embedding.weight"].T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_gpt_flops_equal_flop_counter_mode(bias):
    from tinytorch.models.transformer import GPT

    ours = GPT(65, 32, 2, 4, 16, bias=bias, seed=0, dtype=np.float64)
    theirs = TorchGPT(ours)
    x, y = np.random.default_rng(0).integers(0, 65, (2, 3, 16))
    tx, ty = torch.tensor(x), torch.tensor(y)
    with sdpa_kernel(SDPBackend.MATH):
        ref = theirs(tx, ty)
    assert abs(ref.item() - ours(x, targets=y)[1].item()) < 1e-10, "the PyTorch model is not the same model as ours"
    assert_same(count_flops(lambda: ours(x, targets=y)[1]), torch_flops(lambda: theirs(tx, ty)), "GPT forward")
    assert_same(count_flops(lambda: ours(x, targets=y)[1], backward=True),
                torch_flops(lambda: theirs(tx, ty).backward()), "GPT forward + backward")


CONV_CASES = [((2, 3, 9, 8), (4, 3, 3, 3), 1, 1, True), ((2, 3, 9, 8), (4, 3, 3, 2), (2, 1), (0, 1), False),
              ((1, 2, 7, 7), (3, 2, 1, 1), 1, 0, True)]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,x_grad", CONV_CASES,
                         ids=["3x3-pad1-xgrad", "3x2-stride21-nox", "1x1"])
def test_conv2d_flops_equal_flop_counter_mode(x_shape, w_shape, stride, padding, x_grad):
    from tinytorch.core.spatial import conv2d

    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    mine = [Tensor(x, requires_grad=x_grad), Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)]
    theirs = [torch.tensor(x, requires_grad=x_grad), torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)]
    assert_same(count_flops(lambda: conv2d(*mine, stride=stride, padding=padding)),
                torch_flops(lambda: F.conv2d(*theirs, stride=stride, padding=padding)), "conv2d forward")
    assert_same(count_flops(lambda: conv2d(*mine, stride=stride, padding=padding).sum(), backward=True),
                torch_flops(lambda: F.conv2d(*theirs, stride=stride, padding=padding).sum().backward()),
                f"conv2d forward + backward (x requires grad: {x_grad})")


@pytest.mark.parametrize("needs_grad", [(True, True, True), (False, False, True), (True, False, False)],
                         ids=["qkv", "v-only", "q-only"])
def test_sdpa_flops_equal_flop_counter_mode(needs_grad):
    from tinytorch.core.attention import scaled_dot_product_attention

    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((2, 3, 10, 8)), rng.standard_normal((2, 3, 12, 8)), rng.standard_normal((2, 3, 12, 5))]
    mine = [Tensor(a, requires_grad=g) for a, g in zip(arrays, needs_grad)]
    theirs = [torch.tensor(a, requires_grad=g) for a, g in zip(arrays, needs_grad)]
    assert_same(count_flops(lambda: scaled_dot_product_attention(*mine)[0]),
                torch_flops(lambda: F.scaled_dot_product_attention(*theirs)), "attention forward")
    assert_same(count_flops(lambda: scaled_dot_product_attention(*mine, is_causal=True)[0].sum(), backward=True),
                torch_flops(lambda: F.scaled_dot_product_attention(*theirs, is_causal=True).sum().backward()),
                f"attention forward + backward, requires_grad (Q, K, V) = {needs_grad}")


def test_flash_attention_flops_follow_pytorchs_fused_kernel_formulas():
    from tinytorch.core.attention import flash_attention

    rng = np.random.default_rng(3)
    shapes = [(2, 4, 40, 16), (2, 4, 40, 16), (2, 4, 40, 8)]
    mine = [Tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    forward = sdpa_flop_count(*shapes)
    backward = sdpa_backward_flop_count(shapes[0][:3] + (8,), *shapes)
    assert count_flops(lambda: flash_attention(*mine, is_causal=True, block_size=16)) == forward
    got = count_flops(lambda: flash_attention(*mine, is_causal=True, block_size=16).sum(), backward=True)
    assert got == forward + backward, f"flash_attention forward + backward: {got:,}, PyTorch's formulas {forward + backward:,}"
