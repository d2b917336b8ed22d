"""The classic attention bugs of lesson 12, section 13, made with the student's own functions.

Each bug is produced by calling the real function the wrong way on purpose (K handed over
transposed, scale=1.0, a mask moved to the query axis, an inverted or shifted causal mask, the
roles of Q and K swapped). Its check must pass on the real function and fail on the misused
one with a message that names this bug, not another.
"""
import re

import numpy as np
import pytest

from tinytorch.core.attention import MultiHeadAttention, composed_attention, scaled_dot_product_attention
from tinytorch.core.attention_checks import CLASSIC_BUGS, AttentionBug, check_padding
from tinytorch.core.tensor import Tensor

FUNCTIONS = {"scaled_dot_product_attention": scaled_dot_product_attention, "composed_attention": composed_attention}


@pytest.mark.parametrize("bug", list(CLASSIC_BUGS))
@pytest.mark.parametrize("function", list(FUNCTIONS))
def test_check_passes_the_real_function_and_names_the_bug(function, bug):
    make, check, cause = CLASSIC_BUGS[bug]
    attn = FUNCTIONS[function]
    check(attn)
    with pytest.raises(AttentionBug, match=re.escape(cause)):
        check(make(attn), f"{function} with the bug")


def test_wrong_transpose_is_a_shape_error_when_not_square():
    make, _, _ = CLASSIC_BUGS["Q @ K instead of Q @ Kᵀ"]
    q, k, v = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))
    with pytest.raises(ValueError):
        make(scaled_dot_product_attention)(q, k, v)
    assert scaled_dot_product_attention(q, k, v)[0].shape == (3, 2)


def test_forgotten_scale_saturates_the_softmax():
    make, _, _ = CLASSIC_BUGS["forgotten 1/√d_k"]
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((64, 512)) for _ in range(3))
    peak_bug = make(scaled_dot_product_attention)(q, k, v)[1].numpy().max(-1).mean()
    peak_ours = scaled_dot_product_attention(q, k, v)[1].numpy().max(-1).mean()
    assert peak_bug > 0.9 and peak_ours < 0.5


def test_torch_style_blocked_mask_flips_the_meaning():
    """A True = blocked mask (torch.nn.MultiheadAttention's convention) passed to ours attends to the future."""
    blocked_future = np.triu(np.ones((4, 4), dtype=bool), 1)  # what torch's MHA wants
    x = np.random.default_rng(6).standard_normal((4, 3))
    w_wrong = scaled_dot_product_attention(x, x, x, mask=blocked_future)[1].numpy()
    w_right = scaled_dot_product_attention(x, x, x, mask=~blocked_future)[1].numpy()
    assert np.all(np.tril(w_wrong) == 0) and np.all(np.triu(w_right, 1) == 0)
    with pytest.raises(AttentionBug, match="inverted"):
        check_padding(lambda q, k, v, mask=None, **kw: scaled_dot_product_attention(q, k, v, mask=1 - mask, **kw))


def test_mha_mask_with_batch_axis_gets_a_head_axis():
    """(B, Tq, Tk) masks must not be read as (H, Tq, Tk): item 1's mask must not leak into item 0."""
    mha = MultiHeadAttention(8, 2, seed=0)
    x = Tensor(np.random.default_rng(7).standard_normal((2, 3, 8)).astype(np.float32))
    keep = np.ones((2, 3, 3))
    keep[1, :, 2] = 0
    w = mha(x, mask=keep)[1].numpy()
    assert np.all(w[1, :, :, 2] == 0) and np.all(w[0, :, :, 2] > 0)
