"""The classic attention bugs of lesson 12, section 12: each one has a symptom, and a check
that sees the symptom. Every check must pass on the real implementation and fail on the
buggy one (so the check can fail, and the real code is what makes it pass)."""
import numpy as np
import pytest

from tinytorch.core.attention import (MultiHeadAttention, create_causal_mask, create_padding_mask,
                                      scaled_dot_product_attention)
from tinytorch.core.tensor import Tensor


def numpy_attention(q, k, v, mask=None, transpose_k=True, scale=True, axis=-1, keep_value=1, mask_axis="keys"):
    """A from-scratch attention whose keyword arguments switch on one bug at a time."""
    q, k, v = (t.numpy() if isinstance(t, Tensor) else np.asarray(t) for t in (q, k, v))
    s = q @ (np.swapaxes(k, -1, -2) if transpose_k else k)
    if scale:
        s = s / np.sqrt(q.shape[-1])
    if mask is not None:
        m = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
        if mask_axis == "queries":  # a (B, 1, 1, T) padding mask laid along the queries: (B, 1, T, 1)
            m = m.reshape(m.shape[0], 1, -1, 1)
        s = np.where(m == keep_value, s, -1e30)
    w = np.exp(s - s.max(axis, keepdims=True))
    w = w / w.sum(axis, keepdims=True)
    return Tensor(w @ v), Tensor(w)


# ---- the checks (symptom detectors) ---------------------------------------------------------
def rows_sum_to_one(attn):
    x = Tensor(np.random.default_rng(0).standard_normal((2, 5, 8)))
    return bool(np.allclose(attn(x, x, x)[1].numpy().sum(-1), 1.0))


def invariant_to_key_order(attn):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((4, 4)) for _ in range(3))  # square: a wrong transpose runs silently
    order = [2, 0, 3, 1]
    a = attn(Tensor(q), Tensor(k), Tensor(v))[0].numpy()
    b = attn(Tensor(q), Tensor(k[order]), Tensor(v[order]))[0].numpy()
    return bool(np.allclose(a, b))


def matches_reference(attn):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, 64)) for _ in range(3))
    s = q @ k.T / 8.0
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return bool(np.allclose(attn(Tensor(q), Tensor(k), Tensor(v))[0].numpy(), w @ v, atol=1e-6))


def padded_keys_ignored(attn):
    x = Tensor(np.random.default_rng(3).standard_normal((2, 1, 5, 8)))  # (B, H, T, D)
    w = attn(x, x, x, mask=create_padding_mask([3, 5], 5))[1].numpy().reshape(2, 5, 5)
    return bool(np.all(w[0, :, 3:] == 0) and np.allclose(w.sum(-1), 1))


def future_does_not_leak(attn):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8))
    y = x.copy()
    y[4:] = rng.standard_normal((2, 8))
    run = lambda a: attn(Tensor(a), Tensor(a), Tensor(a), mask=create_causal_mask(6))[0].numpy()
    return bool(np.allclose(run(x)[:4], run(y)[:4]))


BUGS = {
    "wrong transpose": (dict(transpose_k=False), invariant_to_key_order),
    "forgotten scale": (dict(scale=False), matches_reference),
    "softmax on the wrong axis": (dict(axis=-2), rows_sum_to_one),
    "mask broadcasts over queries": (dict(mask_axis="queries"), padded_keys_ignored),
    "flipped mask convention": (dict(keep_value=0), future_does_not_leak),
}


@pytest.mark.parametrize("name", list(BUGS))
def test_check_passes_real_attention_and_catches_the_bug(name):
    bug, check = BUGS[name]
    assert check(scaled_dot_product_attention), f"scaled_dot_product_attention fails {check.__name__}"
    assert check(lambda *a, **k: numpy_attention(*a, **k)), "the correct NumPy attention must pass"
    assert not check(lambda *a, **k: numpy_attention(*a, **{**k, **bug})), f"{check.__name__} misses '{name}'"


def test_wrong_transpose_is_a_shape_error_when_not_square():
    q, k, v = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))
    with pytest.raises(ValueError):
        numpy_attention(q, k, v, transpose_k=False)
    assert scaled_dot_product_attention(q, k, v)[0].shape == (3, 2)


def test_forgotten_scale_saturates_the_softmax():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((64, 512)) for _ in range(3))
    peak_bug = numpy_attention(q, k, v, scale=False)[1].numpy().max(-1).mean()
    peak_ours = scaled_dot_product_attention(q, k, v)[1].numpy().max(-1).mean()
    assert peak_bug > 0.9 and peak_ours < 0.5


def test_torch_style_blocked_mask_flips_the_meaning():
    """A True = blocked mask (torch.nn.MultiheadAttention's convention) passed to ours attends to the future."""
    blocked_future = np.triu(np.ones((4, 4), dtype=bool), 1)  # what torch's MHA wants
    x = np.random.default_rng(6).standard_normal((4, 3))
    w_wrong = scaled_dot_product_attention(x, x, x, mask=blocked_future)[1].numpy()
    w_right = scaled_dot_product_attention(x, x, x, mask=~blocked_future)[1].numpy()
    assert np.all(np.tril(w_wrong) == 0) and np.all(np.triu(w_right, 1) == 0)


def test_mha_mask_with_batch_axis_gets_a_head_axis():
    """(B, Tq, Tk) masks must not be read as (H, Tq, Tk): item 1's mask must not leak into item 0."""
    mha = MultiHeadAttention(8, 2, seed=0)
    x = Tensor(np.random.default_rng(7).standard_normal((2, 3, 8)).astype(np.float32))
    keep = np.ones((2, 3, 3))
    keep[1, :, 2] = 0
    w = mha(x, mask=keep)[1].numpy()
    assert np.all(w[1, :, :, 2] == 0) and np.all(w[0, :, :, 2] > 0)
