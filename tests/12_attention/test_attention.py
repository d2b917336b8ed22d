"""Module 12 (attention): values, invariants, gradients, tiling, masks, errors.

The first tests run the lesson's checks (tinytorch.core.attention_checks) on each function:
when a result is wrong in the way a classic mistake makes it wrong, the failure names the
mistake. They come first because `tito release check` (and a student with -x) sees the first
failure only. Everything is built inside the tests (never at import time), so that with
module 12's solutions replaced by stubs every test *fails* instead of erroring at collection.
"""
import numpy as np
import pytest

from tinytorch.core.attention import (MultiHeadAttention, SelfAttention, composed_attention,
                                      create_causal_mask, create_padding_mask, flash_attention,
                                      plot_attention, plot_attention_heads,
                                      scaled_dot_product_attention)
from tinytorch.core.attention_checks import (ATTENTION_CHECKS, GRADIENT_CHECKS, HAND_OUTPUT, HAND_WEIGHTS,
                                             HAND_X, check_dropout, check_dropout_backward,
                                             check_flash_attention, check_key_padding_mask, check_multi_head,
                                             check_multi_head_dropout, reference_attention,
                                             reference_multi_head)
from tinytorch.core.autograd import gradcheck
from tinytorch.core.layers import count_parameters
from tinytorch.core.tensor import Tensor


def grads(fn, arrays, cotangent, **kwargs):
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(cotangent)
    return out.numpy(), [t.grad.numpy() for t in tensors]


def expect_value_error(fn, *fragments):
    with pytest.raises(ValueError) as info:
        fn()
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {info.value}"


def flash_small_blocks(*args, **kwargs):
    return flash_attention(*args, block_size=2, **kwargs)


ATTENTIONS = [scaled_dot_product_attention, composed_attention]
FUNCTIONS = {"composed_attention": composed_attention, "scaled_dot_product_attention": scaled_dot_product_attention}


# ---- masks (first: the checks below build their own masks, so a broken mask maker shows here) ----
def test_causal_mask():
    causal = create_causal_mask(4)
    assert causal.shape == (4, 4) and causal.dtype == np.float32, f"got {causal.shape} {causal.dtype}"
    assert np.array_equal(causal.numpy(), np.tril(np.ones((4, 4)))), \
        f"create_causal_mask(4) must be the lower triangle of ones, diagonal included (query i sees keys 0..i):\n{causal.numpy()}"


def test_padding_mask():
    pad = create_padding_mask([3, 1, 4], 4)
    assert pad.shape == (3, 1, 1, 4), (f"create_padding_mask must return (B, 1, 1, max_length) = (3, 1, 1, 4), "
                                      f"got {pad.shape}: the padding mask blocks keys (the last axis)")
    assert pad.dtype == np.float32
    assert np.array_equal(pad.numpy()[:, 0, 0], [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    for lengths in (np.array([2, 4]), Tensor(np.array([2, 4])), [2, 4]):
        assert np.array_equal(create_padding_mask(lengths, 5).numpy()[:, 0, 0], [[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    assert create_padding_mask([2, 3]).shape == (2, 1, 1, 3)


# ---- the lesson's checks, on each function (each failure names the mistake it sees) -------------
@pytest.mark.parametrize("check", ATTENTION_CHECKS + GRADIENT_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("function", list(FUNCTIONS))
def test_lesson_checks(function, check):
    check(FUNCTIONS[function])


def test_lesson_checks_dropout():
    check_dropout(scaled_dot_product_attention)
    check_dropout_backward(scaled_dot_product_attention)


def test_lesson_checks_multi_head():
    check_multi_head(MultiHeadAttention)
    check_key_padding_mask(MultiHeadAttention)
    check_multi_head_dropout(MultiHeadAttention)


def test_lesson_checks_flash_attention():
    check_flash_attention(flash_attention)
    for check in GRADIENT_CHECKS:
        check(flash_small_blocks, "flash_attention (block_size=2)")


# ---- values ------------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ATTENTIONS, ids=lambda f: f.__name__)
def test_hand_example(attn):
    X = Tensor(HAND_X)
    out, w = attn(X, X, X)
    assert np.allclose(w.numpy(), HAND_WEIGHTS, atol=1e-5)
    assert np.allclose(out.numpy(), HAND_OUTPUT, atol=1e-5)
    assert out.dtype == np.float32 and w.dtype == np.float32


def test_hand_example_flash():
    X = Tensor(HAND_X)
    assert np.allclose(flash_attention(X, X, X, block_size=2).numpy(), HAND_OUTPUT, atol=1e-5)


@pytest.mark.parametrize("attn", ATTENTIONS, ids=lambda f: f.__name__)
def test_matches_numpy_reference_any_leading_shape(attn, rng):
    q, k, v = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 7, 4)), rng.standard_normal((2, 3, 7, 6))
    out, w = attn(q, k, v)
    ref_out, ref_w = reference_attention(q, k, v)
    assert out.shape == (2, 3, 5, 6) and w.shape == (2, 3, 5, 7)
    assert np.allclose(out.numpy(), ref_out) and np.allclose(w.numpy(), ref_w)
    out2, _ = attn(q[0, 0], k[0, 0], v[0, 0])  # plain 2-D
    assert np.allclose(out2.numpy(), ref_out[0, 0])
    out3, _ = attn(q, k[:1], v[:1])  # broadcast leading dims
    assert np.allclose(out3.numpy(), reference_attention(q, k[:1], v[:1])[0])


def test_rows_sum_to_one_and_scale(rng):
    q, k, v = (rng.standard_normal((4, 6, 8)) for _ in range(3))
    _, w = scaled_dot_product_attention(q, k, v)
    assert np.allclose(w.numpy().sum(-1), 1.0) and (w.numpy() > 0).all()
    out, w = scaled_dot_product_attention(q, k, v, scale=0.3)
    assert np.allclose(out.numpy(), reference_attention(q, k, v, scale=0.3)[0])
    sharp = scaled_dot_product_attention(q, k, v, scale=3.0)[1].numpy().max(-1).mean()
    soft = scaled_dot_product_attention(q, k, v, scale=0.1)[1].numpy().max(-1).mean()
    assert sharp > soft


def test_fused_is_one_op():
    Q = Tensor(np.ones((2, 3)), requires_grad=True)
    out, w = scaled_dot_product_attention(Q, Q, Q)
    assert out._node.op == "sdpa" and out._node.inputs[0] is Q and len(out._node.inputs) == 3
    assert w._node.op == "sdpa_weights" and len(w._node.inputs) == 2
    assert flash_attention(Q, Q, Q)._node.op == "flash_attention"


# ---- masks -------------------------------------------------------------------------------
@pytest.mark.parametrize("dropout_p", [0.0, 0.5], ids=["no-dropout", "dropout"])
def test_backward_rules_leave_the_incoming_gradient_alone(dropout_p):
    """The engine may hand one gradient array to several rules: a rule must never change it."""
    from tinytorch.core.autograd import BACKWARD_RULES

    rng = np.random.default_rng(0)
    Q, K, V = (Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True) for _ in range(3))
    out, weights = scaled_dot_product_attention(Q, K, V, dropout_p=dropout_p, rng=np.random.default_rng(1))
    for tensor, op in ((out, "sdpa"), (weights, "sdpa_weights")):
        grad = rng.standard_normal(tensor.shape)
        before = grad.copy()
        BACKWARD_RULES[op](grad, tensor._node)
        assert np.array_equal(grad, before), (
            f"the {op} rule changed the gradient it was given in place: make a new array "
            "(e.g. grad * drop, not grad *= drop), the engine may pass the same array to other rules")


@pytest.mark.parametrize("attn", ATTENTIONS, ids=lambda f: f.__name__)
def test_blocked_weights_exactly_zero(attn, rng):
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    keep = rng.random((2, 5, 5)) > 0.4
    keep[..., 0] = True
    _, w = attn(q, k, v, mask=keep)
    assert np.all(w.numpy()[~keep] == 0.0)
    assert np.allclose(w.numpy().sum(-1), 1.0)
    _, w = attn(q, k, v, is_causal=True)
    assert np.all(w.numpy()[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0.0)


@pytest.mark.parametrize("as_type", ["bool", "int", "float", "tensor", "list"])
def test_mask_conventions_all_agree(as_type, rng):
    q, k, v = (rng.standard_normal((3, 4, 4)) for _ in range(3))
    keep = rng.random((4, 4)) > 0.5
    keep[:, 1] = True
    converted = {"bool": keep, "int": keep.astype(np.int64), "float": keep.astype(np.float32),
                 "tensor": Tensor(keep.astype(np.float32)), "list": keep.astype(int).tolist()}[as_type]
    expected = reference_attention(q, k, v, keep)[0]
    assert np.allclose(scaled_dot_product_attention(q, k, v, mask=converted)[0].numpy(), expected)
    assert np.allclose(composed_attention(q, k, v, mask=converted)[0].numpy(), expected)
    assert np.allclose(flash_attention(q, k, v, mask=converted, block_size=3).numpy(), expected)


ADDITIVE_AND_OTHER_MASKS = {
    "additive 0/-inf": lambda keep: np.where(keep, 0.0, -np.inf),
    "additive 0/-1e9": lambda keep: np.where(keep, 0.0, -1e9),
    "NaN": lambda keep: np.where(keep, 1.0, np.nan),
    "0.5": lambda keep: np.where(keep, 1.0, 0.5),
    "2": lambda keep: np.where(keep, 2.0, 0.0),
    "additive as a Tensor": lambda keep: Tensor(np.where(keep, 0.0, -np.inf)),
}


@pytest.mark.parametrize("kind", list(ADDITIVE_AND_OTHER_MASKS))
@pytest.mark.parametrize("fn", ["sdpa", "composed", "flash", "mha mask", "mha key_padding_mask"])
def test_masks_hold_only_booleans_or_zero_one(fn, kind):
    """An additive (0/-inf) mask read as a keep mask would attend exactly where it blocks: refuse it."""
    causal = np.tril(np.ones((4, 4), dtype=bool))
    mask = ADDITIVE_AND_OTHER_MASKS[kind](causal)
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    call = {"sdpa": lambda: scaled_dot_product_attention(x, x, x, mask=mask),
            "composed": lambda: composed_attention(x, x, x, mask=mask),
            "flash": lambda: flash_attention(x, x, x, mask=mask),
            "mha mask": lambda: MultiHeadAttention(8, 2, seed=0)(Tensor(x), mask=mask),
            "mha key_padding_mask": lambda: MultiHeadAttention(8, 2, seed=0)(
                Tensor(x[:, :2]), Tensor(x), key_padding_mask=mask[:2])}[fn]
    expect_value_error(call, "booleans or 0/1", "1/True = attend", "keep = additive == 0")


def test_mask_broadcasting_batch_and_heads(rng):
    q, k, v = (rng.standard_normal((2, 3, 4, 8)) for _ in range(3))
    pad = create_padding_mask([4, 2], 4)  # (2, 1, 1, 4)
    out, w = scaled_dot_product_attention(q, k, v, mask=pad, is_causal=True)
    keep = pad.numpy() * np.tril(np.ones((4, 4)))
    assert np.allclose(out.numpy(), reference_attention(q, k, v, keep)[0])
    assert np.all(w.numpy()[1, :, :, 2:] == 0)


@pytest.mark.parametrize("fn", ["sdpa", "composed", "flash"])
def test_fully_masked_rows_give_zeros_and_finite_grads(fn, rng):
    attn = {"sdpa": lambda *a, **k: scaled_dot_product_attention(*a, **k)[0],
            "composed": lambda *a, **k: composed_attention(*a, **k)[0],
            "flash": lambda *a, **k: flash_attention(*a, block_size=2, **k)}[fn]
    keep = np.ones((2, 4, 5))
    keep[0, 1] = 0  # query 1 of item 0 sees nothing
    keep[1, :, 3:] = 0
    arrays = [rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))]
    out, gs = grads(attn, arrays, np.ones((2, 4, 2)), mask=keep)
    assert np.all(out[0, 1] == 0.0) and np.isfinite(out).all()
    for g in gs:
        assert np.isfinite(g).all()
    assert np.all(gs[0][0, 1] == 0)  # the blocked query gets no gradient
    assert np.all(gs[1][1, 3:] == 0) and np.all(gs[2][1, 3:] == 0)  # blocked keys neither


def test_huge_scores_stay_finite():
    q = np.array([[1e4, 0.0], [0.0, 1e4], [1e4, 1e4]], dtype=np.float32)
    v = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    for mask in (None, np.tril(np.ones((3, 3)))):
        out, w = scaled_dot_product_attention(q, q, v, mask=mask)
        assert np.isfinite(out.numpy()).all() and np.isfinite(w.numpy()).all()
        assert np.allclose(w.numpy().sum(-1), 1.0)
        assert np.isfinite(flash_attention(q, q, v, mask=mask, block_size=1).numpy()).all()
    assert np.allclose(scaled_dot_product_attention(q, q, v)[1].numpy()[2], [0, 0, 1])


def test_float16(rng):
    h = (rng.standard_normal((2, 6, 64)) * 30).astype(np.float16)  # q.k overflows float16
    keep = np.ones((6, 6), dtype=bool)
    keep[2] = False
    for out in (scaled_dot_product_attention(h, h, h, mask=keep)[0], flash_attention(h, h, h, mask=keep),
                composed_attention(h, h, h, mask=keep)[0]):
        assert out.dtype == np.float16 and np.isfinite(out.numpy()).all()
        assert np.all(out.numpy()[:, 2] == 0)
    out, w = scaled_dot_product_attention(h, h, h, is_causal=True)
    assert w.dtype == np.float16 and np.isfinite(w.numpy()).all()
    expected = reference_attention(*(h.astype(np.float32),) * 3, np.tril(np.ones((6, 6))))[0]
    assert np.allclose(out.numpy().astype(np.float32), expected, atol=0.05 * np.abs(expected).max())
    for attn in ATTENTIONS:
        H = Tensor(h, requires_grad=True)
        attn(H, H, H, is_causal=True)[0].sum().backward()
        assert H.grad.dtype == np.float16 and np.isfinite(H.grad.numpy()).all()


def test_composed_float16_scores_past_65504_are_computed_like_the_fused_path():
    """q·k = 102,400 is inf in float16: composed attention must compute in float32, as sdpa does."""
    h = np.full((1, 3, 64), 40.0, np.float16)
    h[0, 1] = 20.0
    out, w = composed_attention(h, h, h, is_causal=True)
    fused, fused_w = scaled_dot_product_attention(h, h, h, is_causal=True)
    assert out.dtype == np.float16 and w.dtype == np.float16
    assert np.isfinite(out.numpy()).all() and np.isfinite(w.numpy()).all(), f"NaN or inf in float16: {out.numpy()}"
    assert np.array_equal(out.numpy(), fused.numpy()) and np.array_equal(w.numpy(), fused_w.numpy())


def test_float32_stays_float32(rng):
    q = Tensor(rng.standard_normal((2, 3, 4)).astype(np.float32), requires_grad=True)
    for attn in ATTENTIONS:
        q.grad = None
        out, w = attn(q, q, q, is_causal=True)
        assert out.dtype == np.float32 and w.dtype == np.float32
        out.sum().backward()
        assert q.grad.dtype == np.float32
    assert flash_attention(q, q, q).dtype == np.float32


@pytest.mark.parametrize("fn", ["sdpa", "flash"])
def test_causal_outputs_ignore_future_tokens(fn, rng):
    run = {"sdpa": lambda x: scaled_dot_product_attention(x, x, x, is_causal=True)[0].numpy(),
           "flash": lambda x: flash_attention(x, x, x, is_causal=True, block_size=3).numpy()}[fn]
    x = rng.standard_normal((2, 8, 4))
    y = x.copy()
    y[:, 5:] = rng.standard_normal((2, 3, 4))
    assert np.allclose(run(x)[:, :5], run(y)[:, :5])
    assert not np.allclose(run(x)[:, 5:], run(y)[:, 5:])


def test_causal_with_tq_different_from_tk_is_top_left(rng):
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 2))
    _, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert np.all(w.numpy()[0, 1:] == 0) and np.all(w.numpy()[2, 3:] == 0)
    assert np.allclose(flash_attention(q, k, v, is_causal=True, block_size=4).numpy(),
                       reference_attention(q, k, v, np.tril(np.ones((3, 6))))[0])


@pytest.mark.parametrize("new", [1, 3])
@pytest.mark.parametrize("fn", ["sdpa", "composed", "flash"])
def test_new_queries_attending_to_cached_keys(fn, new, rng):
    """A KV cache (module 13): the last `new` queries against all T keys with an explicit bottom-right
    mask equal the last rows of full causal attention; is_causal=True would align them top-left."""
    attn = {"sdpa": lambda *a, **k: scaled_dot_product_attention(*a, **k)[0],
            "composed": lambda *a, **k: composed_attention(*a, **k)[0],
            "flash": lambda *a, **k: flash_attention(*a, block_size=3, **k)}[fn]
    T = 7
    x = rng.standard_normal((2, 2, T, 4))
    full = attn(x, x, x, is_causal=True).numpy()
    latest = x[..., -new:, :]
    cached = attn(latest, x, x, mask=create_causal_mask(T)[-new:]).numpy()
    assert np.allclose(cached, full[..., -new:, :], atol=1e-12)
    if new == 1:
        assert np.allclose(attn(latest, x, x).numpy(), full[..., -1:, :], atol=1e-12)  # one query sees every key
    top_left = attn(latest, x, x, is_causal=True).numpy()  # query 0 of `latest` would see key 0 only
    assert np.allclose(top_left[..., 0, :], x[..., 0, :]) and not np.allclose(top_left, full[..., -new:, :])


def test_mha_single_new_query_with_cached_keys(rng):
    mha = MultiHeadAttention(8, 2, dtype=np.float64, seed=4)
    x = rng.standard_normal((2, 6, 8))
    full = mha(Tensor(x), is_causal=True)[0].numpy()
    last = mha(Tensor(x[:, -1:]), Tensor(x), mask=create_causal_mask(6)[-1:])[0].numpy()
    assert np.allclose(last, full[:, -1:], atol=1e-12)


def test_dropout_on_weights_only_in_training(rng):
    x = np.ones((1, 40, 4))
    _, w = scaled_dot_product_attention(x, x, x, dropout_p=0.25, rng=1)
    w = w.numpy()
    assert set(np.unique(w.round(8))) == {0.0, round(1 / 40 / 0.75, 8)}
    _, w_eval = scaled_dot_product_attention(x, x, x, dropout_p=0.25, training=False)
    assert np.allclose(w_eval.numpy(), 1 / 40)
    q, k, v = (Tensor(rng.standard_normal((2, 5, 3)), requires_grad=True) for _ in range(3))
    assert gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, dropout_p=0.3, rng=3)[0], [q, k, v])
    assert gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, dropout_p=0.3, rng=3)[1], [q, k, v])
    mha = MultiHeadAttention(8, 2, dropout=0.5, seed=0)
    x = Tensor(rng.standard_normal((1, 6, 8)).astype(np.float32))
    assert np.any(mha(x)[1].numpy() == 0)
    mha.eval()
    assert np.allclose(mha(x)[1].numpy().sum(-1), 1.0, atol=1e-6) and np.all(mha(x)[1].numpy() > 0)


# ---- gradients -----------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["plain", "mask", "causal", "rect", "padding4d", "scale", "broadcast"])
def test_sdpa_gradcheck(case, rng):
    shapes = {"rect": ((2, 3, 4), (2, 5, 4), (2, 5, 6)), "padding4d": ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3)),
              "broadcast": ((2, 3, 4), (1, 5, 4), (5, 2))}.get(case, ((2, 4, 3), (2, 4, 3), (2, 4, 2)))
    tensors = [Tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    kwargs = {"mask": {"mask": rng.random((4, 4)) > 0.3}, "causal": {"is_causal": True},
              "rect": {"is_causal": True, "mask": [1, 1, 0, 1, 1]},
              "padding4d": {"mask": create_padding_mask([5, 2], 5)}, "scale": {"scale": 0.9}}.get(case, {})
    assert gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, **kwargs)[0], tensors)
    assert gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, **kwargs)[1], tensors)
    assert gradcheck(lambda q, k, v: composed_attention(q, k, v, **kwargs)[0], tensors)


@pytest.mark.parametrize("case", ["plain", "causal", "mask", "rect"])
def test_flash_gradcheck(case, rng):
    shapes = ((2, 3, 4), (2, 7, 4), (2, 7, 2)) if case == "rect" else ((1, 5, 3), (1, 5, 3), (1, 5, 2))
    tensors = [Tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    kwargs = {"causal": {"is_causal": True}, "mask": {"mask": [[1, 0, 1, 1, 0]] * 4 + [[0] * 5]},
              "rect": {"is_causal": True}}.get(case, {})
    assert gradcheck(lambda q, k, v: flash_attention(q, k, v, block_size=2, **kwargs), tensors)


def test_gradient_reaches_q_k_through_weights_and_v_through_sum(rng):
    q, k, v = (Tensor(rng.standard_normal((3, 4)), requires_grad=True) for _ in range(3))
    _, w = scaled_dot_product_attention(q, k, v)
    (w * Tensor(rng.standard_normal((3, 3)))).sum().backward()
    assert v.grad is None and np.abs(q.grad.numpy()).sum() > 0 and np.abs(k.grad.numpy()).sum() > 0
    uniform = Tensor(np.zeros((3, 4)), requires_grad=True)  # equal scores: weights 1/3
    out, _ = scaled_dot_product_attention(uniform, k, v)
    out.sum().backward()
    assert np.allclose(v.grad.numpy(), 1.0)  # each key's weight summed over the 3 queries


def test_composed_and_fused_agree_in_values_and_gradients(rng):
    arrays = [rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 5, 3))]
    g = rng.standard_normal((2, 3, 6, 3))
    for kwargs in ({}, {"is_causal": True}, {"mask": create_padding_mask([5, 1], 5)}, {"scale": 2.0}):
        a = grads(scaled_dot_product_attention, arrays, g, **kwargs)
        b = grads(composed_attention, arrays, g, **kwargs)
        assert np.allclose(a[0], b[0], atol=1e-12)
        for x, y in zip(a[1], b[1]):
            assert np.allclose(x, y, atol=1e-12)


# ---- flash attention -----------------------------------------------------------------------
@pytest.mark.parametrize("block", [1, 3, 16, 64, 100])
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"mask": "padding"}, {"mask": "padding", "is_causal": True}],
                         ids=["no mask", "causal", "padding", "padding+causal"])
def test_flash_equals_sdpa_values_and_grads_float64(block, kwargs, rng):
    T = 37
    kwargs = dict(kwargs)
    if kwargs.get("mask") == "padding":
        kwargs["mask"] = create_padding_mask([37, 20], T)
    arrays = [rng.standard_normal((2, 2, T, 8)) for _ in range(3)]
    g = rng.standard_normal((2, 2, T, 8))
    a = grads(lambda q, k, v, **kw: flash_attention(q, k, v, block_size=block, **kw), arrays, g, **kwargs)
    b = grads(scaled_dot_product_attention, arrays, g, **kwargs)
    assert np.allclose(a[0], b[0], atol=1e-10, rtol=0)
    for x, y in zip(a[1], b[1]):
        assert np.allclose(x, y, atol=1e-10, rtol=0)


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_long_sequence_query_blocks_float32(is_causal, rng):
    """Longer than one query block (256), block sizes that do not divide T, Tq != Tk."""
    arrays = [rng.standard_normal((1, 2, 300, 16)).astype(np.float32),
              rng.standard_normal((1, 2, 333, 16)).astype(np.float32),
              rng.standard_normal((1, 2, 333, 8)).astype(np.float32)]
    g = rng.standard_normal((1, 2, 300, 8)).astype(np.float32)
    keep = rng.random((1, 1, 300, 333)) > 0.1
    b = grads(scaled_dot_product_attention, arrays, g, is_causal=is_causal, mask=keep)
    for block in (64, 70):
        a = grads(lambda q, k, v, **kw: flash_attention(q, k, v, block_size=block, **kw), arrays, g,
                  is_causal=is_causal, mask=keep)
        assert np.allclose(a[0], b[0], atol=1e-5)
        for x, y in zip(a[1], b[1]):
            assert np.allclose(x, y, atol=1e-5 * max(1.0, np.abs(y).max()))


@pytest.mark.parametrize("kind", ["float array", "bool array", "Tensor"])
def test_flash_gradient_ignores_later_changes_to_the_callers_mask(kind, rng):
    """The backward pass must see the mask the forward pass used, even if the caller changes theirs."""
    arrays = [rng.standard_normal((2, 5, 3)) for _ in range(3)]
    g = rng.standard_normal((2, 5, 3))

    def make_mask():
        keep = np.ones((2, 5, 5))
        keep[:, :, 3:] = 0
        return {"float array": keep, "bool array": keep > 0, "Tensor": Tensor(keep)}[kind]

    expected = grads(lambda *t: flash_attention(*t, mask=make_mask(), block_size=2), arrays, g)[1]
    mask = make_mask()
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    out = flash_attention(*tensors, mask=mask, block_size=2)
    data = mask.data if isinstance(mask, Tensor) else mask
    data[...] = 1  # the caller reuses their mask before calling backward
    out.backward(g)
    for name, t, e in zip("QKV", tensors, expected):
        assert np.allclose(t.grad.numpy(), e, atol=1e-12), f"d{name} changed with the caller's mask after the forward pass"


def test_flash_memory_is_linear():
    import tracemalloc

    def peak(fn):
        tracemalloc.start()
        try:  # tracing left on (fn raised) would slow every later test
            fn()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    rng = np.random.default_rng(0)
    peaks = {}
    for T in (512, 1024):
        q, k, v = (Tensor(rng.standard_normal((1, T, 32)).astype(np.float32)) for _ in range(3))
        peaks[T] = (peak(lambda: scaled_dot_product_attention(q, k, v, is_causal=True)),
                    peak(lambda: flash_attention(q, k, v, is_causal=True)))
    assert peaks[1024][1] < peaks[1024][0] / 4  # far below the T x T weights
    assert peaks[1024][1] < 2.5 * peaks[512][1]  # about 2x per doubling, not 4x
    assert peaks[1024][0] > 3.5 * peaks[512][0] * 0.9


# ---- an empty key sequence ----------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["sdpa", "composed", "flash", "mha"])
def test_no_keys_is_a_clear_error(fn):
    """Tk = 0 is refused the same way everywhere (not NumPy's 'zero-size array to reduction')."""
    q, k, v = np.zeros((2, 3, 4)), np.zeros((2, 0, 4)), np.zeros((2, 0, 5))
    call = {"sdpa": lambda: scaled_dot_product_attention(q, k, v),
            "composed": lambda: composed_attention(q, k, v),
            "flash": lambda: flash_attention(q, k, v),
            "mha": lambda: MultiHeadAttention(4, 2)(Tensor(q), Tensor(k))}[fn]
    expect_value_error(call, "Tk = 0" if fn != "mha" else "Tk = 0 leaves nothing to attend to", "(2, 0, 4)")


def test_no_queries_is_fine():
    out, w = scaled_dot_product_attention(np.zeros((2, 0, 4)), np.ones((2, 3, 4)), np.ones((2, 3, 5)), is_causal=True)
    assert out.shape == (2, 0, 5) and w.shape == (2, 0, 3)


# ---- multi-head attention -------------------------------------------------------------------
def test_mha_parameters_and_shapes():
    mha = MultiHeadAttention(64, 8)
    assert count_parameters(mha) == 16640
    assert [n for n, _ in mha.named_parameters()][:2] == ["q_proj.weight", "q_proj.bias"]
    assert count_parameters(MultiHeadAttention(128, 8)) == 4 * (128 * 128 + 128)
    assert count_parameters(MultiHeadAttention(64, 8, bias=False)) == 4 * 64 * 64
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        assert getattr(mha, name).weight.shape == (64, 64)
    assert mha.head_dim == 8 and mha.num_heads == 8
    out, w = mha(Tensor(np.zeros((1, 3, 64), dtype=np.float32)))
    assert out.shape == (1, 3, 64) and w.shape == (1, 8, 3, 3) and np.allclose(w.numpy(), 1 / 3)


@pytest.mark.parametrize("case", ["self", "causal", "cross", "padding", "mask3d", "mask2d", "nobias"])
def test_mha_matches_numpy(case, rng):
    mha = MultiHeadAttention(12, 3, bias=case != "nobias", seed=1)
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    mem = rng.standard_normal((2, 7, 12)).astype(np.float32)
    key = mem if case in ("cross", "padding", "mask3d") else x
    Tk = key.shape[1]
    keep, kwargs = None, {}
    if case == "causal":
        keep, kwargs = np.tril(np.ones((5, 5))), {"is_causal": True}
    elif case == "padding":
        kwargs = {"mask": create_padding_mask([7, 4], 7)}
        keep = kwargs["mask"].numpy()
    elif case == "mask3d":
        keep = rng.random((2, 5, Tk)) > 0.3
        keep[..., 0] = True
        kwargs = {"mask": keep}
        keep = keep[:, None]
    elif case == "mask2d":
        keep = rng.random((5, Tk)) > 0.3
        keep[:, 0] = True
        kwargs = {"mask": Tensor(keep.astype(np.float32))}
    out, w = mha(Tensor(x), None if key is x else Tensor(key), **kwargs)
    ref_out, ref_w = reference_multi_head(mha, x, key, key, keep)
    assert out.shape == (2, 5, 12) and w.shape == (2, 3, 5, Tk)
    assert np.allclose(out.numpy(), ref_out, atol=1e-5) and np.allclose(w.numpy(), ref_w, atol=1e-6)


def test_mha_key_padding_mask_when_batch_equals_query_length(rng):
    """B == Tq == Tk: a (B, Tk) padding mask passed as `mask` is read as (Tq, Tk); key_padding_mask is not."""
    mha = MultiHeadAttention(8, 2, dtype=np.float64, seed=3)
    x = rng.standard_normal((3, 3, 8))
    lengths = [3, 1, 2]
    real = create_padding_mask(lengths, 3).numpy()[:, 0, 0]  # (B, Tk) = (3, 3)
    out, w = mha(Tensor(x), key_padding_mask=real)
    by_4d, _ = mha(Tensor(x), mask=create_padding_mask(lengths, 3))
    assert np.allclose(out.numpy(), by_4d.numpy())
    assert np.all(w.numpy()[1, :, :, 1:] == 0) and np.all(w.numpy()[2, :, :, 2:] == 0)
    assert np.all(w.numpy()[0] > 0), "item 0 has no padding: none of its keys may be blocked"
    wrong, _ = mha(Tensor(x), mask=real)  # the trap key_padding_mask exists for
    assert not np.allclose(wrong.numpy(), out.numpy())
    combined, wc = mha(Tensor(x), key_padding_mask=real, is_causal=True, mask=np.ones((3, 3)))
    assert np.allclose(combined.numpy(), mha(Tensor(x), mask=create_padding_mask(lengths, 3), is_causal=True)[0].numpy())
    for bad in (np.ones((3,)), np.ones((3, 4)), np.ones((1, 3)), np.ones((3, 1, 1, 3))):
        expect_value_error(lambda bad=bad: mha(Tensor(x), key_padding_mask=bad), "key_padding_mask", str(bad.shape))


def test_mha_value_defaults_to_key_and_separate_value(rng):
    mha = MultiHeadAttention(8, 2, seed=0)
    x, k, v = (Tensor(rng.standard_normal((1, n, 8)).astype(np.float32)) for n in (3, 4, 4))
    assert np.allclose(mha(x, k)[0].numpy(), mha(x, k, k)[0].numpy())
    ref = reference_multi_head(mha, x.numpy(), k.numpy(), v.numpy())[0]
    assert np.allclose(mha(x, k, v)[0].numpy(), ref, atol=1e-5)


def test_mha_gradcheck_inputs_and_parameters(rng):
    mha = MultiHeadAttention(6, 2, dtype=np.float64, seed=2)
    x = Tensor(rng.standard_normal((2, 3, 6)), requires_grad=True)
    mem = Tensor(rng.standard_normal((2, 4, 6)), requires_grad=True)
    assert gradcheck(lambda a: mha(a, is_causal=True)[0], [x])
    assert gradcheck(lambda a, b: mha(a, b, mask=create_padding_mask([4, 2], 4))[0], [x, mem])
    assert gradcheck(lambda a, b: mha(a, b, key_padding_mask=[[1, 1, 1, 0], [1, 1, 0, 0]])[0], [x, mem])
    originals = {n: getattr(mha, n).weight for n in ("q_proj", "k_proj", "v_proj", "out_proj")}

    def with_weights(a, wq, wk, wv, wo):
        for name, w in zip(originals, (wq, wk, wv, wo)):
            getattr(mha, name).weight = w
        return mha(a, is_causal=True)[0]

    try:
        assert gradcheck(with_weights, [Tensor(x.numpy()), *(Tensor(w.numpy(), requires_grad=True) for w in originals.values())])
    finally:
        for name, w in originals.items():
            getattr(mha, name).weight = w


def test_self_attention_wrapper(rng):
    sa = SelfAttention(8, 2, causal=True, seed=3)
    x = Tensor(rng.standard_normal((2, 4, 8)).astype(np.float32))
    out, w = sa(x)
    ref, _ = sa.attention(x, x, x, is_causal=True)
    assert np.allclose(out.numpy(), ref.numpy()) and np.all(np.triu(w.numpy()[0, 0], 1) == 0)
    assert count_parameters(sa) == 4 * (8 * 8 + 8)
    out_pad, w_pad = SelfAttention(8, 2, seed=3)(x, mask=create_padding_mask([4, 2], 4))
    assert np.all(w_pad.numpy()[1, :, :, 2:] == 0)
    out_kpm, w_kpm = SelfAttention(8, 2, seed=3)(x, key_padding_mask=[[1, 1, 1, 1], [1, 1, 0, 0]])
    assert np.allclose(out_kpm.numpy(), out_pad.numpy()) and np.array_equal(w_kpm.numpy(), w_pad.numpy())


# ---- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["sdpa", "composed", "flash"])
def test_error_paths_attention(attn):
    fn = {"sdpa": scaled_dot_product_attention, "composed": composed_attention, "flash": flash_attention}[attn]
    q = np.zeros((2, 3, 4))
    expect_value_error(lambda: fn(q, np.zeros((2, 3, 5)), np.zeros((2, 3, 4))), "(2, 3, 4)", "(2, 3, 5)")
    expect_value_error(lambda: fn(q, q, np.zeros((2, 4, 4))), "(2, 3, 4)", "(2, 4, 4)")
    expect_value_error(lambda: fn(np.zeros(4), q, q), "(4,)")
    expect_value_error(lambda: fn(np.zeros((3, 3, 4)), q, q), "(3, 3, 4)", "(2, 3, 4)")
    expect_value_error(lambda: fn(q, q, q, mask=np.ones((4, 4))), "(4, 4)", "(2, 3, 3)")
    expect_value_error(lambda: fn(q, q, q, mask=np.ones((5, 2, 3, 3))), "(5, 2, 3, 3)", "(2, 3, 3)")


def test_error_paths_arguments():
    q = np.zeros((2, 3, 4))
    expect_value_error(lambda: scaled_dot_product_attention(q, q, q, dropout_p=1.0), "dropout_p")
    expect_value_error(lambda: scaled_dot_product_attention(q, q, q, dropout_p=-0.1), "dropout_p")
    expect_value_error(lambda: flash_attention(q, q, q, block_size=0), "block_size")
    expect_value_error(lambda: create_causal_mask(0), "seq_len")
    expect_value_error(lambda: create_padding_mask([3, 5], 4), "max_length")
    expect_value_error(lambda: create_padding_mask([-1, 2], 4), "lengths")


def test_error_paths_mha():
    expect_value_error(lambda: MultiHeadAttention(10, 3), "10", "3")
    expect_value_error(lambda: MultiHeadAttention(8, 2, dropout=1.5), "dropout")
    mha = MultiHeadAttention(8, 2)
    x = Tensor(np.zeros((2, 3, 8), dtype=np.float32))
    expect_value_error(lambda: mha(Tensor(np.zeros((2, 3, 6)))), "(2, 3, 6)", "8")
    expect_value_error(lambda: mha(x, Tensor(np.zeros((2, 4, 6)))), "(2, 4, 6)")
    expect_value_error(lambda: mha(x, Tensor(np.zeros((2, 4, 8))), Tensor(np.zeros((2, 5, 8)))), "(2, 4, 8)", "(2, 5, 8)")
    expect_value_error(lambda: mha(x, Tensor(np.zeros((3, 4, 8)))), "(2, 3, 8)", "(3, 4, 8)")
    expect_value_error(lambda: mha(Tensor(np.zeros((3, 8)))), "(3, 8)")
    expect_value_error(lambda: mha(x, mask=np.ones(3)), "(3,)", "key_padding_mask")
    expect_value_error(lambda: mha(x, mask=np.ones((4, 4))), "(4, 4)")
    expect_value_error(lambda: mha(x, mask=np.ones((2, 3, 2, 3, 3))), "(2, 3, 2, 3, 3)")


# ---- plots ----------------------------------------------------------------------------------
def test_plots_return_figures_and_write_png(tmp_path):
    import matplotlib.pyplot as plt

    w = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    path = tmp_path / "one.png"
    fig = plot_attention(Tensor(w), ["a", "b", "c"], ["a", "b", "c"], title="t", path=path)
    assert fig.axes[0].get_title() == "t" and path.read_bytes()[:4] == b"\x89PNG"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "b", "c"]
    grid = plot_attention_heads(np.stack([w] * 6), path=tmp_path / "grid.png", cols=4, titles=list("abcdef"))
    assert (tmp_path / "grid.png").stat().st_size > 1000
    assert [ax.get_title() for ax in grid.axes if ax.images] == list("abcdef")
    assert plot_attention(np.ones((1, 1, 2, 2))).axes[0].images[0].get_array().shape == (2, 2)
    expect_value_error(lambda: plot_attention(np.ones((2, 2, 2))), "(2, 2, 2)")
    expect_value_error(lambda: plot_attention(w, ["a"]), "query_tokens")
    expect_value_error(lambda: plot_attention_heads(w), "(3, 3)")
    plt.close("all")


def test_sentence_demo_is_causal_and_seeded():
    from tinytorch.core.attention import sentence_attention

    tokens, bidirectional, causal = sentence_attention()
    assert len(tokens) == 10 and bidirectional.shape == causal.shape == (10, 10)
    assert np.all(np.triu(causal.numpy(), 1) == 0) and np.allclose(causal.numpy().sum(-1), 1, atol=1e-6)
    assert np.array_equal(sentence_attention()[1].numpy(), bidirectional.numpy())


# ---- property: any shapes, any mask ----------------------------------------------------------
from hypothesis import given, strategies as st  # noqa: E402


@given(lead=st.lists(st.integers(1, 3), min_size=0, max_size=2), tq=st.integers(1, 6), tk=st.integers(1, 6),
       dk=st.integers(1, 5), dv=st.integers(1, 4), block=st.integers(1, 7), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_all_paths_agree_with_reference(lead, tq, tk, dk, dv, block, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(tuple(lead) + s) for s in ((tq, dk), (tk, dk), (tk, dv)))
    keep = rng.random(tuple(lead) + (tq, tk)) > 0.3  # fully blocked rows happen too
    full_keep = keep & (np.tril(np.ones((tq, tk), dtype=bool)) if causal else True)
    ref_out, ref_w = reference_attention(q, k, v, full_keep)
    out, w = scaled_dot_product_attention(q, k, v, mask=keep, is_causal=causal)
    assert np.allclose(out.numpy(), ref_out) and np.allclose(w.numpy(), ref_w)
    assert np.all(w.numpy()[~full_keep] == 0)
    assert np.allclose(composed_attention(q, k, v, mask=keep, is_causal=causal)[0].numpy(), ref_out)
    assert np.allclose(flash_attention(q, k, v, mask=keep, is_causal=causal, block_size=block).numpy(), ref_out)

