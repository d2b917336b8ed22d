"""Module 12 against PyTorch: F.scaled_dot_product_attention and nn.MultiheadAttention.

Conventions to translate:
* F.scaled_dot_product_attention's boolean attn_mask: True = attend (the same as ours);
* nn.MultiheadAttention's boolean attn_mask and key_padding_mask: True = BLOCKED (the opposite);
* nn.MultiheadAttention's in_proj_weight is (3E, E), rows [q; k; v], applied as x @ Wᵀ + b;
  our Linear weights are (in, out), applied as x @ W + b: ours = theirs.T.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.attention import (MultiHeadAttention, create_padding_mask, flash_attention,  # noqa: E402
                                      scaled_dot_product_attention)
from tinytorch.core.tensor import Tensor  # noqa: E402


def ours_and_grads(fn, arrays, cotangent, **kwargs):
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(cotangent)
    return out.numpy(), [t.grad.numpy() for t in tensors]


def torch_and_grads(arrays, cotangent, **kwargs):
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = torch.nn.functional.scaled_dot_product_attention(*tensors, **kwargs)
    out.backward(torch.tensor(cotangent))
    return out.detach().numpy(), [t.grad.numpy() for t in tensors]


CASES = {
    "plain": ((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8), {}),
    "causal": ((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 4), {"is_causal": True}),
    "rect_causal": ((2, 4, 8), (2, 7, 8), (2, 7, 5), {"is_causal": True}),
    "bool_mask": ((2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), {"mask": "bool"}),
    "padding": ((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4), {"mask": "padding"}),
    "scale": ((3, 5, 4), (3, 5, 4), (3, 5, 6), {"scale": 0.37}),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_matches_torch(case, dtype, rng):
    qs, ks, vs, kwargs = CASES[case]
    arrays = [rng.standard_normal(s).astype(dtype) for s in (qs, ks, vs)]
    Tq, Tk = qs[-2], ks[-2]
    ours_kwargs, torch_kwargs = dict(kwargs), dict(kwargs)
    if kwargs.get("mask") == "bool":
        keep = rng.random((Tq, Tk)) > 0.4
        keep[:, 0] = True  # torch gives NaN for fully blocked rows; ours gives 0
        ours_kwargs["mask"], torch_kwargs = keep, {"attn_mask": torch.tensor(keep)}
    elif kwargs.get("mask") == "padding":
        pad = create_padding_mask([5, 3], 5)
        ours_kwargs["mask"], torch_kwargs = pad, {"attn_mask": torch.tensor(pad.numpy() > 0)}
    g = rng.standard_normal(qs[:-1] + (vs[-1],)).astype(dtype)
    tol = 1e-10 if dtype == np.float64 else 1e-5
    theirs, their_grads = torch_and_grads(arrays, g, **torch_kwargs)
    for fn in (scaled_dot_product_attention, lambda *a, **k: flash_attention(*a, block_size=2, **k)):
        out, our_grads = ours_and_grads(fn, arrays, g, **ours_kwargs)
        assert out.dtype == dtype
        assert np.allclose(out, theirs, atol=tol, rtol=tol)
        for a, b in zip(our_grads, their_grads):
            assert np.allclose(a, b, atol=tol, rtol=tol)


def copy_weights(ours: MultiHeadAttention, theirs: "torch.nn.MultiheadAttention") -> None:
    E = ours.embed_dim
    W, b = theirs.in_proj_weight.detach().numpy(), theirs.in_proj_bias.detach().numpy()
    for i, lin in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
        lin.weight.data = W[i * E:(i + 1) * E].T.copy()
        lin.bias.data = b[i * E:(i + 1) * E].copy()
    ours.out_proj.weight.data = theirs.out_proj.weight.detach().numpy().T.copy()
    ours.out_proj.bias.data = theirs.out_proj.bias.detach().numpy().copy()


@pytest.mark.parametrize("case", ["self", "causal", "cross", "padding", "causal_padding", "key_padding_mask",
                                  "causal_key_padding_mask"])
def test_multihead_attention_matches_torch(case, rng):
    torch.manual_seed(0)
    B, Tq, E, H = 2, 5, 16, 4
    Tk = 7 if case in ("cross", "padding", "key_padding_mask") else Tq
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
    torch.nn.init.normal_(theirs.in_proj_bias)
    torch.nn.init.normal_(theirs.out_proj.bias)
    ours = MultiHeadAttention(E, H, dtype=np.float64)
    copy_weights(ours, theirs)

    x = rng.standard_normal((B, Tq, E))
    mem = rng.standard_normal((B, Tk, E)) if Tk != Tq else x
    g = rng.standard_normal((B, Tq, E))
    cross = mem is not x
    lengths = [Tk, 3]

    ours_kwargs, torch_kwargs = {}, {}
    if case.startswith("causal"):
        ours_kwargs["is_causal"] = True
        torch_kwargs["attn_mask"] = torch.triu(torch.ones(Tq, Tk, dtype=torch.bool), 1)  # True = blocked
    if case in ("padding", "causal_padding"):
        ours_kwargs["mask"] = create_padding_mask(lengths, Tk)  # 1 = attend
        torch_kwargs["key_padding_mask"] = torch.tensor(create_padding_mask(lengths, Tk).numpy()[:, 0, 0] == 0)
    if case.endswith("key_padding_mask"):  # ours: (B, Tk), 1 = real token; torch's: True = padding
        real = create_padding_mask(lengths, Tk).numpy()[:, 0, 0]
        ours_kwargs["key_padding_mask"] = real
        torch_kwargs["key_padding_mask"] = torch.tensor(real == 0)

    xq = Tensor(x, requires_grad=True)
    xk = Tensor(mem, requires_grad=True) if cross else xq
    out, w = ours(xq, xk if cross else None, **ours_kwargs)
    out.backward(g)

    tq = torch.tensor(x, requires_grad=True)
    tk = torch.tensor(mem, requires_grad=True) if cross else tq
    t_out, t_w = theirs(tq, tk, tk, need_weights=True, average_attn_weights=False, **torch_kwargs)
    t_out.backward(torch.tensor(g))

    assert np.allclose(out.numpy(), t_out.detach().numpy(), atol=1e-10)
    assert w.shape == (B, H, Tq, Tk) and np.allclose(w.numpy(), t_w.detach().numpy(), atol=1e-10)
    assert np.allclose(xq.grad.numpy(), tq.grad.numpy(), atol=1e-10)
    if cross:
        assert np.allclose(xk.grad.numpy(), tk.grad.numpy(), atol=1e-10)
    t_W, t_b = theirs.in_proj_weight.grad.numpy(), theirs.in_proj_bias.grad.numpy()
    for i, lin in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
        assert np.allclose(lin.weight.grad.numpy(), t_W[i * E:(i + 1) * E].T, atol=1e-10)
        assert np.allclose(lin.bias.grad.numpy(), t_b[i * E:(i + 1) * E], atol=1e-10)
    assert np.allclose(ours.out_proj.weight.grad.numpy(), theirs.out_proj.weight.grad.numpy().T, atol=1e-10)
    assert np.allclose(ours.out_proj.bias.grad.numpy(), theirs.out_proj.bias.grad.numpy(), atol=1e-10)


def test_multihead_attention_float32_matches_torch(rng):
    torch.manual_seed(1)
    theirs = torch.nn.MultiheadAttention(32, 8, batch_first=True)
    ours = MultiHeadAttention(32, 8)
    copy_weights(ours, theirs)
    x = rng.standard_normal((3, 10, 32)).astype(np.float32)
    out, _ = ours(Tensor(x), is_causal=True)
    mask = torch.triu(torch.ones(10, 10, dtype=torch.bool), 1)
    t_out, _ = theirs(*(torch.tensor(x),) * 3, attn_mask=mask)
    assert out.dtype == np.float32 and np.allclose(out.numpy(), t_out.detach().numpy(), atol=1e-5)
