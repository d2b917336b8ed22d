"""Module 13, sections 2-6: the MLP, causal self-attention with a cache hook, the block, the GPT.

Everything is built inside the tests (never at import time).
"""
import math

import numpy as np
import pytest

from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Module, count_parameters
from tinytorch.core.tensor import Tensor, as_tensor
from tinytorch.models.transformer import (GPT, MLP, CausalSelfAttention, TransformerBlock,
                                          cached_causal_mask, layer_norm)
from tinytorch.testing import numeric_vjp


def gelu_tanh(h):
    return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


class ConcatCache:
    """The cache protocol of section 3 (length, update) in its simplest form: concatenation."""

    def __init__(self):
        self.k = self.v = None

    @property
    def length(self):
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k, v):
        self.k = k.numpy() if self.k is None else np.concatenate([self.k, k.numpy()], axis=-2)
        self.v = v.numpy() if self.v is None else np.concatenate([self.v, v.numpy()], axis=-2)
        return Tensor(self.k), Tensor(self.v)


# ---- MLP ---------------------------------------------------------------------------------------
def test_mlp_values():
    mlp = MLP(6, 24, seed=0, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((2, 3, 6))
    h = gelu_tanh(x @ mlp.fc.weight.numpy() + mlp.fc.bias.numpy())
    expected = h @ mlp.proj.weight.numpy() + mlp.proj.bias.numpy()
    assert np.allclose(mlp(Tensor(x)).numpy(), expected, atol=1e-12), \
        "MLP: proj(GELU(fc(x))) -- fc first, then the GELU activation, then proj"
    assert count_parameters(mlp) == 6 * 24 + 24 + 24 * 6 + 6


def test_mlp_no_bias_and_dropout():
    mlp = MLP(4, 8, dropout=0.5, bias=False, seed=1)
    assert mlp.fc.bias is None and mlp.proj.bias is None and count_parameters(mlp) == 64
    x = Tensor(np.ones((50, 4), np.float32))
    out_train = mlp(x).numpy()
    mlp.eval()
    out_eval = mlp(x).numpy()
    assert np.allclose(out_eval, out_eval[0]) and not np.allclose(out_train, out_eval), "dropout only in training"


# ---- the cached causal mask and the attention ----------------------------------------------
@pytest.mark.parametrize("new,past", [(3, 0), (1, 4), (2, 3), (1, 0)], ids=lambda v: str(v))
def test_cached_causal_mask(new, past):
    mask = np.asarray(cached_causal_mask(new, past))
    expected = np.arange(past + new)[None, :] <= np.arange(past, past + new)[:, None]
    assert mask.shape == (new, past + new), f"cached_causal_mask({new}, {past}) must have shape (num_new, num_past + num_new)"
    assert np.array_equal(mask.astype(bool), expected), (
        f"cached_causal_mask({new}, {past}): query i (at position past + i) sees keys 0 ... past + i, itself "
        f"included, and nothing after it; expected\n{expected.astype(int)}\ngot\n{mask.astype(int)}")


def test_attention_is_causal():
    attn = CausalSelfAttention(8, 2, seed=0, dtype=np.float64)
    x = np.random.default_rng(1).standard_normal((2, 6, 8))
    out, weights = attn(Tensor(x))
    assert np.allclose(np.triu(weights.numpy(), 1), 0), \
        "CausalSelfAttention without a cache must be causal: token t attends only to tokens 0 ... t (is_causal=True)"
    changed = x.copy()
    changed[:, 4:] += 1.0
    assert np.allclose(attn(Tensor(changed))[0].numpy()[:, :4], out.numpy()[:, :4]), \
        "changing tokens 4 and 5 changed the attention output of earlier tokens: the attention must be causal"


def test_attention_matches_module_12():
    attn = CausalSelfAttention(8, 4, seed=2, dtype=np.float64)
    x = Tensor(np.random.default_rng(2).standard_normal((2, 5, 8)))
    from tinytorch.core.attention import MultiHeadAttention
    assert np.allclose(attn(x)[0].numpy(), MultiHeadAttention.forward(attn, x, is_causal=True)[0].numpy())


@pytest.mark.parametrize("chunks", [[1] * 6, [3, 1, 2], [6]], ids=["one-at-a-time", "3+1+2", "all-at-once"])
def test_attention_through_a_cache_equals_all_at_once(chunks):
    attn = CausalSelfAttention(8, 2, seed=3, dtype=np.float64)
    x = Tensor(np.random.default_rng(3).standard_normal((2, 6, 8)))
    full, _ = attn(x)
    cache, outputs, start = ConcatCache(), [], 0
    for n in chunks:
        out, weights = attn(x[:, start:start + n], cache=cache)
        assert weights.shape == (2, 2, n, start + n), "with a cache the weights are (B, H, T_new, past + T_new)"
        outputs.append(out.numpy())
        start += n
    got = np.concatenate(outputs, axis=1)
    if not np.allclose(got, full.numpy(), atol=1e-10):
        first_step_ok = np.allclose(got[:, :chunks[0]], full.numpy()[:, :chunks[0]], atol=1e-10)
        pytest.fail("attention through the cache differs from attention over the whole sequence"
                    + (" after the first step: a new query must see every cached key and itself. Module 12's "
                       "is_causal is top-left aligned (query row i sees key columns 0 ... i), which is wrong when "
                       "Tq < Tk; pass mask=cached_causal_mask(T, past) instead" if first_step_ok else
                       ": project x to q, k, v heads, let cache.update(k, v) extend k and v, attend with "
                       "cached_causal_mask(T, past), merge the heads and apply out_proj"))


# ---- the block ---------------------------------------------------------------------------------
def _zero_writers(block):
    for lin in (block.attn.out_proj, block.mlp.proj):
        lin.weight.data = np.zeros_like(lin.weight.data)
        if lin.bias is not None:
            lin.bias.data = np.zeros_like(lin.bias.data)


def test_block_residual_stream():
    block = TransformerBlock(8, 2, seed=4, dtype=np.float64)
    _zero_writers(block)
    x = np.random.default_rng(4).standard_normal((2, 5, 8)) * 3 + 1
    out = block(Tensor(x)).numpy()
    if not np.allclose(out, x, atol=1e-12):
        normalised = layer_norm(x, np.ones(8)).numpy()
        hint = ("the output is normalised: that is post-norm (x = ln(x + f(x))). GPT is pre-norm: "
                "x = x + attn(ln1(x)), then x = x + mlp(ln2(x)); no LayerNorm on the residual stream itself"
                if np.allclose(out, normalised, atol=1e-6) else
                "the residual connections are missing: each sub-layer must ADD its output to the stream, "
                "x = x + attn(ln1(x))[0], then x = x + mlp(ln2(x))")
        pytest.fail("with attn.out_proj and mlp.proj zeroed (sub-layers that write nothing), the block must "
                    "return its input unchanged, but it did not: " + hint)


class DropEverything(Module):
    """A Dropout that drops every value: where a block applies its dropout shows in the output."""

    def forward(self, x):
        return as_tensor(x) * 0.0


def test_block_dropout_is_on_the_attention_output():
    block = TransformerBlock(8, 2, seed=8, dtype=np.float64)
    x = Tensor(np.random.default_rng(8).standard_normal((2, 4, 8)))
    a = x + block.attn(block.ln1(x))[0]
    without_dropout = (a + block.mlp(block.ln2(a))).numpy()
    block.dropout = DropEverything()
    got = block(x).numpy()
    assert np.allclose(got, (x + block.mlp(block.ln2(x))).numpy(), atol=1e-12), (
        "with a dropout that drops everything the block must give x + mlp(ln2(x)): "
        + ("the block never applies self.dropout to the attention's output; x = x + self.dropout(attended)"
           if np.allclose(got, without_dropout) else
           "self.dropout belongs on the attention's output only, before it is added: x = x + self.dropout(attended)"))


@pytest.mark.parametrize("mode", ["training", "eval"])
def test_block_dropout_follows_the_mode(mode):
    block = TransformerBlock(8, 2, dropout=0.5, seed=9, dtype=np.float64)
    x = Tensor(np.random.default_rng(9).standard_normal((2, 6, 8)))
    if mode == "eval":
        block.eval()
    first, second = block(x).numpy(), block(x).numpy()
    if mode == "training":
        assert not np.allclose(first, second), "TransformerBlock(dropout=0.5) in training mode must drop at random"
        return
    a = x + block.attn(block.ln1(x))[0]
    assert np.allclose(first, second) and np.allclose(first, (a + block.mlp(block.ln2(a))).numpy(), atol=1e-12), \
        "after .eval() a block with dropout=0.5 must drop nothing: x + attn(ln1(x)), then + mlp(ln2(x))"


@pytest.mark.parametrize("mode", ["training", "eval"])
def test_cached_attention_dropout_follows_the_mode(mode):
    attn = CausalSelfAttention(8, 2, dropout=0.5, seed=10, dtype=np.float64)
    x = Tensor(np.random.default_rng(10).standard_normal((2, 6, 8)))
    visible = np.tril(np.ones((6, 6), dtype=bool))
    if mode == "training":
        _, weights = attn(x, cache=ConcatCache())
        assert np.any(weights.numpy()[..., visible] == 0), (
            "CausalSelfAttention(dropout=0.5) in training mode dropped no weight on the cached path: pass "
            "dropout_p=self.dropout, training=self.training, rng=self.rng as module 12's forward does")
        return
    attn.eval()
    out, weights = attn(x, cache=ConcatCache())
    assert np.all(weights.numpy()[..., visible] > 0) and np.allclose(out.numpy(), attn(x)[0].numpy(), atol=1e-12), (
        "after .eval() the cached path still drops attention weights (dropout=0.5): pass training=self.training to "
        "scaled_dot_product_attention, so that model.eval() (and generate) switch dropout off")


def test_block_values():
    block = TransformerBlock(8, 2, seed=5, dtype=np.float64)
    x = Tensor(np.random.default_rng(5).standard_normal((2, 4, 8)))
    a = x + block.attn(block.ln1(x))[0]
    expected = (a + block.mlp(block.ln2(a))).numpy()
    assert np.allclose(block(x).numpy(), expected, atol=1e-12), \
        "pre-norm block: x = x + attn(ln1(x))[0], then x = x + mlp(ln2(x)), in this order"


def test_block_parameters():
    block = TransformerBlock(16, 4)
    assert count_parameters(block) == 12 * 16 * 16 + 13 * 16
    assert count_parameters(TransformerBlock(16, 4, bias=False)) == 12 * 16 * 16 + 2 * 16
    names = [n for n, _ in block.named_parameters()]
    assert names[:4] == ["ln1.weight", "ln1.bias", "attn.q_proj.weight", "attn.q_proj.bias"]


# ---- the GPT -----------------------------------------------------------------------------------
def test_initialisation():
    L = 3
    model = GPT(50, 64, L, 4, 32, seed=0)
    for name, p in model.named_parameters():
        values = p.numpy()
        if name.endswith("attn.out_proj.weight") or name.endswith("mlp.proj.weight"):
            expected = 0.02 / math.sqrt(2 * L)
            assert abs(values.std() / expected - 1) < 0.1, (
                f"{name} has std {values.std():.4f}: the residual projections (attn.out_proj, mlp.proj) are drawn "
                f"with std 0.02/sqrt(2·num_layers) = {expected:.4f}")
        elif p.ndim == 2:
            assert abs(values.std() / 0.02 - 1) < 0.1 and abs(values.mean()) < 0.005, (
                f"{name} has std {values.std():.4f}: every Linear weight and both embedding tables start as "
                "normal(0, 0.02)")
        elif name.endswith("bias"):
            assert np.all(values == 0), f"{name} must start at 0"
        else:
            assert np.all(values == 1), f"{name} (a LayerNorm weight) must start at 1"


def test_fresh_loss_is_ln_vocab():
    for V in (65, 500):
        model = GPT(V, 64, 2, 4, 32, seed=1)
        idx, targets = np.random.default_rng(V).integers(0, V, (2, 8, 32))
        loss = model(idx, targets=targets)[1].item()
        assert abs(loss - math.log(V)) < 0.15, (
            f"a fresh model's loss must be close to ln(vocab_size) = {math.log(V):.3f}, got {loss:.3f}: "
            "check the initialisation (std 0.02, small logits, a near-uniform prediction)")


def test_forward_shapes_and_loss():
    model = GPT(11, 16, 2, 2, 8, seed=2, dtype=np.float64)
    idx, targets = np.random.default_rng(6).integers(0, 11, (2, 3, 8))
    logits, loss = model(idx)
    assert logits.shape == (3, 8, 11) and loss is None and logits.dtype == np.float64
    logits, loss = model(Tensor(idx), targets=Tensor(targets))
    z = logits.numpy()
    log_probs = z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, targets[..., None], -1).mean()
    assert loss.shape == () and np.isclose(loss.item(), expected), "the loss is the mean cross-entropy of all positions"
    assert model(idx[:, :5])[0].shape == (3, 5, 11)


def test_forward_matches_the_pieces():
    """The GPT computed by hand from its own modules: embeddings, blocks, ln_f, the tied head."""
    model = GPT(13, 8, 2, 2, 6, seed=3, dtype=np.float64)
    idx = np.random.default_rng(7).integers(0, 13, (2, 6))
    x = model.token_embedding.weight.numpy()[idx] + model.position_embedding.weight.numpy()[np.arange(6)]
    h = Tensor(x)
    for block in model.blocks:
        h = block(h)
    expected = model.ln_f(h).numpy() @ model.token_embedding.weight.numpy().T
    assert np.allclose(model(idx)[0].numpy(), expected, atol=1e-12), \
        "GPT: tok_emb(idx) + pos_emb(0..T-1), the blocks in order, ln_f, then @ token_embedding.weight transposed"


def test_weights_are_tied():
    model = GPT(20, 8, 1, 2, 6, seed=4, dtype=np.float64)
    assert model.lm_head is None
    assert count_parameters(model) == 20 * 8 + 6 * 8 + 12 * 64 + 13 * 8 + 2 * 8
    idx = np.zeros((1, 6), dtype=np.int64)  # only token 0 is ever looked up
    model(idx, targets=np.ones((1, 6), dtype=np.int64))[1].backward()
    grad = model.token_embedding.weight.grad
    assert grad is not None and np.abs(grad.numpy()[1:]).sum() > 0, (
        "tied weights: the output layer must use token_embedding.weight itself (transposed), not a copy, so the "
        "rows of tokens never looked up still get the head's gradient")
    untied = GPT(20, 8, 1, 2, 6, tie_weights=False, seed=4)
    assert untied.lm_head is not None and untied.lm_head.weight.shape == (8, 20) and untied.lm_head.bias is None
    assert count_parameters(untied) == count_parameters(model) + 20 * 8
    assert abs(untied.lm_head.weight.numpy().std() / 0.02 - 1) < 0.15


def test_loss_gradient_against_central_differences():
    model = GPT(7, 4, 1, 2, 4, seed=5, dtype=np.float64)
    idx, targets = np.random.default_rng(8).integers(0, 7, (2, 2, 4))
    params = model.parameters()
    model(idx, targets=targets)[1].backward()

    def loss_of(*values):
        saved = [p.data for p in params]
        for p, v in zip(params, values):
            p.data = v.data
        try:
            with no_grad():
                return model(idx, targets=targets)[1]
        finally:
            for p, s in zip(params, saved):
                p.data = s

    numeric = numeric_vjp(loss_of, [p.numpy().copy() for p in params], np.array(1.0))
    for (name, p), expected in zip(model.named_parameters(), numeric):
        assert np.allclose(p.grad.numpy(), expected, atol=1e-7), f"the loss's gradient for {name} is wrong"


def test_causality():
    model = GPT(13, 16, 2, 2, 10, seed=6, dtype=np.float64)
    idx = np.random.default_rng(9).integers(0, 13, (2, 10))
    base = model(idx)[0].numpy()
    for t in range(10):
        changed = idx.copy()
        changed[:, t] = (changed[:, t] + 1) % 13
        out = model(changed)[0].numpy()
        assert np.allclose(out[:, :t], base[:, :t], atol=1e-12), \
            f"changing token {t} changed a logit before position {t}: the model must be causal"
        assert not np.allclose(out[:, t], base[:, t]), f"changing token {t} must change the logits at {t}"


def test_no_bias_recipe_and_dropout():
    model = GPT(65, 32, 2, 4, 16, dropout=0.1, bias=False, seed=7)
    assert all(not n.endswith("bias") for n, _ in model.named_parameters())
    idx = np.random.default_rng(10).integers(0, 65, (2, 16))
    a, b = model(idx)[0].numpy(), model(idx)[0].numpy()
    assert not np.allclose(a, b), "dropout is active in training mode"
    model.eval()
    assert np.allclose(model(idx)[0].numpy(), model(idx)[0].numpy())


def test_attention_maps():
    model = GPT(30, 16, 3, 4, 8, seed=9)
    maps = model.attention_maps(np.random.default_rng(11).integers(0, 30, (2, 8)), layer=1)
    assert isinstance(maps, np.ndarray) and maps.shape == (2, 4, 8, 8)
    assert np.allclose(maps.sum(-1), 1, atol=1e-5) and np.allclose(np.triu(maps, 1), 0) and model.training


def test_errors():
    with pytest.raises(ValueError):
        GPT(10, 10, 1, 3, 8)
    with pytest.raises(ValueError):
        GPT(0, 8, 1, 2, 8)
    model = GPT(10, 8, 1, 2, 4)
    with pytest.raises(ValueError) as err:
        model(np.zeros((1, 5), dtype=np.int64))
    assert "max_seq_len=4" in str(err.value)
    with pytest.raises(ValueError):
        model(np.zeros(4, dtype=np.int64))


def test_a_checkpoint_refuses_a_gpt_built_with_other_heads(tmp_path):
    """Issue 20: num_heads changes no weight shape, so only the recorded configuration can tell."""
    from tinytorch.core.training import load_checkpoint, save_checkpoint

    path = save_checkpoint(tmp_path / "gpt", GPT(13, 16, 1, 2, 8, seed=0))
    four_heads = GPT(13, 16, 1, 4, 8, seed=1)
    before = [p.numpy().copy() for p in four_heads.parameters()]
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, four_heads)
    assert str(path) in str(err.value) and "num_heads=2 in the file, 4 here" in str(err.value), str(err.value)
    assert all(np.array_equal(b, p.numpy()) for b, p in zip(before, four_heads.parameters()))
    two_heads = GPT(13, 16, 1, 2, 8, seed=1)
    load_checkpoint(path, two_heads)
    ids = np.array([[1, 2, 3, 4]])
    assert np.array_equal(two_heads(ids)[0].numpy(), GPT(13, 16, 1, 2, 8, seed=0)(ids)[0].numpy())
