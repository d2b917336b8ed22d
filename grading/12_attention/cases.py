"""Module 12, graded cases: attention on seeded shapes, masks and weights the visible tests never use.

Each case runs on the student's package in the sandbox (`tito.grading.cases`); the grader compares
its values and gradients with the reference's, recorded by `python grading/record_expected.py`.
"""
import numpy as np
from reference_values import FLOAT16_TOLERANCE

from tinytorch.core.attention import (MultiHeadAttention, SelfAttention, composed_attention, create_causal_mask,
                                      create_padding_mask, flash_attention, scaled_dot_product_attention)
from tinytorch.core.tensor import Tensor


def leaves(rng, *shapes, dtype=np.float64):
    return [Tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True) for shape in shapes]


def _sdpa_mask(rng):
    Q, K, V = leaves(rng, (2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6))
    mask = rng.random((2, 1, 5, 7)) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    out, weights = scaled_dot_product_attention(Q, K, V, mask=mask)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    return {"out": out, "weights": weights, "dQ": Q.grad, "dK": K.grad, "dV": V.grad}


def _sdpa_causal_scale(rng):
    Q, K, V = leaves(rng, (3, 6, 8), (3, 6, 8), (3, 6, 5))
    out, weights = scaled_dot_product_attention(Q, K, V, is_causal=True, scale=0.3)
    out.sum().backward()
    return {"out": out, "weights": weights, "dQ": Q.grad, "dK": K.grad}


def _fully_blocked_row(rng):
    Q, K, V = leaves(rng, (1, 4, 3), (1, 5, 3), (1, 5, 2))
    mask = np.ones((4, 5), dtype=bool)
    mask[2] = False  # query 2 sees no key
    out, weights = scaled_dot_product_attention(Q, K, V, mask=mask.astype(np.int64))
    out.sum().backward()
    return {"out": out, "weights": weights, "dQ": Q.grad, "dV": V.grad}


def _weights_gradient(rng):
    Q, K, V = leaves(rng, (2, 4, 3), (2, 5, 3), (2, 5, 3))
    _, weights = scaled_dot_product_attention(Q, K, V)
    (weights * Tensor(rng.standard_normal((2, 4, 5)))).sum().backward()
    return {"dQ": Q.grad, "dK": K.grad}


def _float16(rng):
    Q, K, V = (Tensor((rng.standard_normal((2, 5, 8)) * 30).astype(np.float16)) for _ in range(3))
    out, weights = scaled_dot_product_attention(Q, K, V, is_causal=True)
    return {"out": out, "weights": weights}


def _masks(rng):
    lengths = rng.integers(1, 7, 4)
    return {"causal": create_causal_mask(5), "padding": create_padding_mask(lengths, 6),
            "padding_list": create_padding_mask(lengths.tolist(), 7)}


def _set_weights(mha, rng):
    for layer in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
        layer.weight.data = (rng.standard_normal(layer.weight.shape) * 0.3).astype(np.float32)
        layer.bias.data = (rng.standard_normal(layer.bias.shape) * 0.1).astype(np.float32)


def _multi_head_cross(rng):
    mha = MultiHeadAttention(12, 3)
    _set_weights(mha, rng)
    query = Tensor(rng.standard_normal((2, 4, 12)).astype(np.float32), requires_grad=True)
    memory = Tensor(rng.standard_normal((2, 6, 12)).astype(np.float32), requires_grad=True)
    padding = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    out, weights = mha(query, memory, key_padding_mask=padding)
    out.sum().backward()
    return {"out": out, "weights": weights, "dquery": query.grad, "dmemory": memory.grad,
            "dWq": mha.q_proj.weight.grad, "dbout": mha.out_proj.bias.grad}


def _multi_head_masks(rng):
    mha = MultiHeadAttention(8, 2)
    _set_weights(mha, rng)
    x = Tensor(rng.standard_normal((3, 5, 8)).astype(np.float32))
    per_item = rng.random((3, 5, 5)) > 0.4
    per_item[..., 0] = True
    causal_out, causal_weights = mha(x, is_causal=True)
    masked_out, _ = mha(x, mask=per_item)
    return {"causal_out": causal_out, "causal_weights": causal_weights, "masked_out": masked_out}


def _flash(rng):
    Q, K, V = leaves(rng, (2, 9, 4), (2, 13, 4), (2, 13, 3))
    mask = rng.random((9, 13)) > 0.25
    mask[:, 0] = True
    out = flash_attention(Q, K, V, mask=mask, block_size=5)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    return {"out": out, "dQ": Q.grad, "dK": K.grad, "dV": V.grad}


def _flash_causal(rng):
    Q, K, V = leaves(rng, (1, 2, 11, 4), (1, 2, 11, 4), (1, 2, 11, 4))
    out = flash_attention(Q, K, V, is_causal=True, block_size=4)
    out.sum().backward()
    return {"out": out, "dK": K.grad}


def _composed(rng):
    """composed_attention (built from Tensor ops): a mask and the causal triangle together, the default scale, a
    fully blocked query, and float16 scores past float16's range."""
    Q, K, V = leaves(rng, (2, 4, 6), (2, 5, 6), (2, 5, 3))
    mask = rng.random((4, 5)) > 0.4
    mask[:, 0] = True
    mask[3] = False  # query 3 sees nothing
    out, weights = composed_attention(Q, K, V, mask=mask, is_causal=True)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    big = [Tensor((rng.standard_normal((1, 3, 8)) * 200).astype(np.float16)) for _ in range(3)]
    out16, weights16 = composed_attention(*big)
    return {"out": out, "weights": weights, "dQ": Q.grad, "dK": K.grad, "dV": V.grad,
            "float16_out": out16, "float16_weights": weights16}


def _dropout(rng):
    """scaled_dot_product_attention with dropout 0.4 (a seeded mask): output, the weights as applied, gradients
    through the output and through the weights; with training=False the same call has no dropout."""
    Q, K, V = leaves(rng, (2, 5, 4), (2, 6, 4), (2, 6, 3))
    out, weights = scaled_dot_product_attention(Q, K, V, dropout_p=0.4, rng=7)
    cotangent = Tensor(rng.standard_normal(out.shape))
    weights_cotangent = Tensor(rng.standard_normal(weights.shape))
    ((out * cotangent).sum() + (weights * weights_cotangent).sum()).backward()
    evaluated, eval_weights = scaled_dot_product_attention(Q, K, V, dropout_p=0.4, rng=7, training=False)
    return {"out": out, "weights": weights, "dQ": Q.grad, "dK": K.grad, "dV": V.grad,
            "cotangent_untouched": weights_cotangent, "eval_out": evaluated, "eval_weights": eval_weights}


def _weights_sum_dropout(rng):
    """A loss that is the sum of the weights returned with dropout: the gradient that reaches their rule is a
    broadcast view (read-only) that the rule must not scale in place."""
    Q, K, V = leaves(rng, (3, 4), (5, 4), (5, 2))
    _, weights = scaled_dot_product_attention(Q, K, V, dropout_p=0.3, rng=11)
    weights.sum().backward()
    return {"weights": weights, "dQ": Q.grad, "dK": K.grad}


def _modules_in_eval(rng):
    """MultiHeadAttention(dropout=0.5) after .eval() has no dropout; SelfAttention(causal=True) is causal."""
    mha = MultiHeadAttention(8, 2, dropout=0.5, seed=3)  # seeded: a dropout left on in eval gives known values
    _set_weights(mha, rng)
    mha.eval()
    x = Tensor(rng.standard_normal((2, 4, 8)).astype(np.float32))
    out, weights = mha(x)
    causal = SelfAttention(8, 2, causal=True)
    _set_weights(causal.attention, rng)
    causal_out, causal_weights = causal(x)
    return {"eval_out": out, "eval_weights": weights, "causal_out": causal_out, "causal_weights": causal_weights}


CASES = {
    "sdpa-mask": (_sdpa_mask, "scaled_dot_product_attention with a (2,1,5,7) boolean mask: output, weights, gradients"),
    "sdpa-causal-scale": (_sdpa_causal_scale, "is_causal=True with scale=0.3: output, weights, gradients"),
    "fully-blocked-row": (_fully_blocked_row, "a query whose keys are all blocked (0/1 mask) gets weights 0 and output 0"),
    "weights-gradient": (_weights_gradient, "a loss on the returned weights differentiates through Q and K"),
    "float16": (_float16, "float16 inputs with large scores neither overflow nor give NaN", FLOAT16_TOLERANCE),
    "masks": (_masks, "create_causal_mask and create_padding_mask values"),
    "multi-head-cross": (_multi_head_cross, "MultiHeadAttention(12, 3), cross-attention with key_padding_mask"),
    "multi-head-masks": (_multi_head_masks, "MultiHeadAttention(8, 2) with is_causal and a (B, Tq, Tk) mask"),
    "flash": (_flash, "flash_attention with a mask, block_size 5 (not a divisor of 13): output and gradients"),
    "flash-causal": (_flash_causal, "flash_attention with is_causal, 4-D inputs, block_size 4"),
    "composed": (_composed, "composed_attention with a mask and is_causal together, the default 1/sqrt(d_k) scale, "
                            "a fully blocked query, float16 scores past float16's range"),
    "dropout": (_dropout, "scaled_dot_product_attention with dropout 0.4 (seeded): output, weights, gradients, "
                          "and no dropout with training=False"),
    "weights-sum-dropout": (_weights_sum_dropout, "the gradient of the sum of the weights returned with dropout"),
    "modules-in-eval": (_modules_in_eval, "MultiHeadAttention with dropout after .eval(), SelfAttention(causal=True)"),
}

