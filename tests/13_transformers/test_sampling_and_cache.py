"""Module 13, sections 7-9: sampling, the KV cache, and generation with and without it.

Tolerances for "cached equals uncached": float64 logits to 1e-10, float32 to 1e-4 (the cached
step multiplies a 1 × T row where the full pass multiplies T × T blocks, so BLAS rounds in a
different order; the difference is a few units in the last place). Tokens must be identical:
the draw is made in float64 from the same generator.
"""
import math

import numpy as np
import pytest

from tinytorch.core.autograd import no_grad
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import (GPT, KVCache, LayerKVCache, next_token_probs, sample_next_token)


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---- sampling ----------------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_divides_the_logits(temperature):
    z = np.random.default_rng(0).standard_normal((3, 7)) * 2
    p = next_token_probs(z, temperature)
    assert p.shape == (3, 7) and p.dtype == np.float64
    assert np.allclose(p, softmax(z / temperature)), (
        f"next_token_probs at temperature {temperature}: softmax(logits / temperature) -- the temperature "
        "divides the logits before the softmax (dividing the probabilities afterwards and renormalising "
        "changes nothing)")


@pytest.mark.parametrize("k", [1, 2, 4])
def test_top_k_keeps_exactly_k(k):
    z = np.array([[0.5, 2.0, -1.0, 1.5, 0.0, 3.0], [1.0, 0.0, 2.0, 3.0, 4.0, 5.0]])
    p = next_token_probs(z, 1.0, top_k=k)
    kept = (p > 0).sum(-1)
    assert np.array_equal(kept, [k, k]), (
        f"top_k={k} must leave exactly {k} tokens with non-zero probability (the k largest logits), got {kept}")
    expected = np.where(z >= np.sort(z, -1)[:, [-k]], z, -np.inf)
    assert np.allclose(p, softmax(expected)), "top-k: the kept logits go through the softmax, the rest get 0"
    assert np.allclose(next_token_probs(z, 1.0, top_k=100), softmax(z)), "top_k >= vocabulary keeps every token"


def test_top_k_keeps_ties():
    p = next_token_probs(np.array([[1.0, 3.0, 3.0, 0.0]]), 1.0, top_k=1)
    assert np.allclose(p, [[0, 0.5, 0.5, 0]]), "tokens tied with the k-th largest logit are kept"


def test_greedy_and_draws():
    z = np.array([[0.1, 2.0, 0.3], [5.0, -1.0, 4.9]])
    assert np.array_equal(sample_next_token(z, temperature=0), [1, 0]), "temperature 0 is greedy: the argmax"
    out = sample_next_token(Tensor(z), 1.0, rng=np.random.default_rng(1))
    assert out.shape == (2,) and out.dtype == np.int64
    many = np.repeat(z[:1], 40000, axis=0)
    for top_k in (None, 2):
        draws = sample_next_token(many, 0.7, top_k=top_k, rng=np.random.default_rng(2))
        freq = np.bincount(draws, minlength=3) / len(draws)
        assert np.allclose(freq, next_token_probs(z[:1], 0.7, top_k)[0], atol=0.01), \
            "the draws must follow next_token_probs (the first token whose cumulative probability exceeds u)"
    assert np.array_equal(sample_next_token(z, 1.0, rng=np.random.default_rng(3)),
                          sample_next_token(z, 1.0, rng=np.random.default_rng(3))), "the same generator, the same draw"


def test_inverse_cdf_rule():
    """The draw is exactly: u = rng.random((B, 1)) · total, token = first index whose cumulative probability exceeds u."""
    z = np.log(np.random.default_rng(5).dirichlet(np.ones(6), size=200))
    got = sample_next_token(z, 1.0, rng=np.random.default_rng(6))
    cdf = np.cumsum(next_token_probs(z), -1)
    u = np.random.default_rng(6).random((200, 1)) * cdf[:, -1:]
    assert np.array_equal(got, (cdf <= u).sum(-1)), \
        "sample_next_token: one rng.random((B, 1)) draw per row, the first token whose cumulative probability exceeds it"


def test_sampling_errors():
    with pytest.raises(ValueError):
        sample_next_token(np.zeros((1, 3)), temperature=-1)
    with pytest.raises(ValueError):
        sample_next_token(np.zeros((1, 3)), top_k=0)


# ---- the cache ---------------------------------------------------------------------------------
def test_layer_cache_appends_keys_and_values_in_order():
    cache = LayerKVCache(batch_size=2, num_heads=3, max_len=10, head_dim=4, dtype=np.float64)
    assert cache.length == 0 and cache.keys.shape == (2, 3, 10, 4) and cache.max_len == 10
    rng = np.random.default_rng(4)
    ks = [rng.standard_normal((2, 3, n, 4)) for n in (3, 1, 2)]
    vs = [rng.standard_normal((2, 3, n, 4)) for n in (3, 1, 2)]
    for step, (k, v) in enumerate(zip(ks, vs), start=1):
        keys, values = cache.update(Tensor(k), Tensor(v))
        stored = sum(a.shape[2] for a in ks[:step])
        assert cache.length == stored, f"after storing {stored} positions, length must be {stored}, got {cache.length}"
        assert isinstance(keys, Tensor) and keys.shape == (2, 3, stored, 4) and values.shape == (2, 3, stored, 4), \
            "update returns all keys and values so far, (B, H, length, D)"
        assert np.array_equal(keys.numpy(), np.concatenate(ks[:step], 2)), \
            "LayerKVCache.update: keys must be stored at positions length ... length + n - 1, old ones first"
        assert np.array_equal(values.numpy(), np.concatenate(vs[:step], 2)), \
            "LayerKVCache.update: the new VALUES must be stored too, at the same positions as their keys"
    assert np.shares_memory(keys.numpy(), cache.keys), "update returns views of the preallocated buffers (no copy)"


def test_layer_cache_refuses_overflow_and_gradients():
    cache = LayerKVCache(1, 1, 3, 2)
    cache.update(Tensor(np.zeros((1, 1, 3, 2), np.float32)), Tensor(np.zeros((1, 1, 3, 2), np.float32)))
    with pytest.raises(ValueError):
        cache.update(Tensor(np.zeros((1, 1, 1, 2), np.float32)), Tensor(np.zeros((1, 1, 1, 2), np.float32)))
    with pytest.raises(ValueError):
        LayerKVCache(1, 1, 3, 2).update(Tensor(np.zeros((1, 2, 1, 2))), Tensor(np.zeros((1, 2, 1, 2))))
    with pytest.raises(RuntimeError):
        k = Tensor(np.zeros((1, 1, 1, 2)), requires_grad=True)
        LayerKVCache(1, 1, 3, 2).update(k, k)


def test_cache_memory_formula():
    model = GPT(10, 24, 3, 4, 16, seed=0)
    cache = model.make_cache(2)
    assert isinstance(cache, KVCache) and len(cache.layers) == 3 and cache.length == 0
    assert cache.nbytes == 2 * 3 * 4 * 16 * 6 * 4 * 2, "2 · layers · heads · T · head_dim · bytes, per sequence"
    assert GPT(10, 24, 3, 4, 16, dtype=np.float64).make_cache(1).layers[0].keys.dtype == np.float64


def _zero_writers(model):
    for block in model.blocks:
        for lin in (block.attn.out_proj, block.mlp.proj):
            lin.weight.data = np.zeros_like(lin.weight.data)


def test_cached_positions_start_at_cache_length():
    """With the sub-layers writing nothing, a token's logits depend only on its id and position."""
    model = GPT(9, 8, 1, 2, 8, seed=1, dtype=np.float64)
    _zero_writers(model)
    idx = np.random.default_rng(5).integers(0, 9, (1, 6))
    with no_grad():
        full = model(idx)[0].numpy()
        cache = model.make_cache(1)
        model(idx[:, :4], cache=cache)
        step = model(idx[:, 4:5], cache=cache)[0].numpy()
    assert np.allclose(step[:, 0], full[:, 4], atol=1e-12), (
        "with a cache holding `past` tokens, the new tokens sit at positions past ... past + T - 1: look the "
        "position embedding up at xp.arange(cache.length, cache.length + T)")
    assert cache.length == 5


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-4)], ids=["float64", "float32"])
@pytest.mark.parametrize("chunks", [[1] * 10, [4, 1, 1, 3, 1], [10]], ids=["1x10", "4+1+1+3+1", "10"])
def test_cached_logits_equal_full_logits(dtype, tol, chunks):
    model = GPT(17, 16, 2, 2, 12, seed=2, dtype=dtype)
    idx = np.random.default_rng(6).integers(0, 17, (3, 10))
    with no_grad():
        full = model(idx)[0].numpy()
        cache, pieces, start = model.make_cache(3), [], 0
        for n in chunks:
            pieces.append(model(idx[:, start:start + n], cache=cache)[0].numpy())
            start += n
    got = np.concatenate(pieces, axis=1)
    assert np.abs(got - full).max() <= tol, (
        f"logits through the KV cache differ from the full forward pass by {np.abs(got - full).max():.1e} "
        f"(allowed {tol:.0e} in {np.dtype(dtype).name})")
    assert cache.length == 10


# ---- generation --------------------------------------------------------------------------------
def test_generate_returns_prompt_then_new_tokens():
    model = GPT(13, 16, 2, 2, 16, seed=3)
    prompt = np.random.default_rng(7).integers(0, 13, (2, 5))
    out = model.generate(prompt, 7, seed=0)
    assert isinstance(out, Tensor) and out.shape == (2, 12) and out.dtype == np.int64
    assert np.array_equal(out.numpy()[:, :5], prompt), "generate returns the prompt followed by the new tokens"
    assert out.numpy().min() >= 0 and out.numpy().max() < 13
    single = model.generate(list(prompt[0]), 3, temperature=0)
    assert single.shape == (8,), "a 1-D prompt gives a 1-D result"
    assert model.training, "generate restores the training mode it found"
    assert np.array_equal(model.generate(prompt, 6, seed=4).numpy(), model.generate(prompt, 6, seed=4).numpy())
    assert model.generate(prompt, 0).shape == (2, 5)


def test_greedy_generation_follows_the_argmax():
    model = GPT(11, 16, 1, 2, 16, seed=4, dtype=np.float64)
    prompt = np.array([[1, 2, 3]])
    out = model.generate(prompt, 4, temperature=0, use_cache=False).numpy()
    with no_grad():
        for t in range(3, 7):
            assert out[0, t] == model(out[:, :t])[0].numpy()[0, -1].argmax(), \
                "greedy generation: each new token is the argmax of the logits of the last position"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("top_k,temperature", [(None, 1.0), (3, 0.8), (None, 0)], ids=["plain", "top3-t0.8", "greedy"])
def test_cached_generation_equals_uncached(dtype, top_k, temperature):
    model = GPT(19, 16, 2, 2, 10, seed=5, dtype=dtype)
    prompt = np.random.default_rng(8).integers(0, 19, (2, 4))
    try:  # 20 tokens: past max_seq_len=10
        uncached = model.generate(prompt, 16, temperature=temperature, top_k=top_k, seed=1, use_cache=False).numpy()
    except ValueError as err:
        pytest.fail(f"generate without the cache failed past max_seq_len ({err}): crop a prompt longer than "
                    "max_seq_len, i.e. feed the model only the last max_seq_len tokens")
    try:  # the cache fills up at max_seq_len=10 and must be rebuilt
        cached = model.generate(prompt, 16, temperature=temperature, top_k=top_k, seed=1, use_cache=True).numpy()
    except ValueError as err:
        pytest.fail(f"generate with the cache failed past max_seq_len ({err}): when the cache is full "
                    "(cache.length == max_seq_len), make a new cache and prefill it with the last max_seq_len tokens")
    assert np.array_equal(cached[:, :10], uncached[:, :10]), \
        "cached and uncached generation must give the same tokens (within max_seq_len)"
    assert np.array_equal(cached, uncached), (
        "past max_seq_len cached and uncached generation must still agree: rebuild the cache from the last "
        "max_seq_len tokens when it is full")


@pytest.mark.parametrize("mode", ["training", "eval"])
def test_cached_generation_with_dropout_equals_uncached(mode):
    """generate runs in eval mode, whatever mode it finds: with dropout > 0 both paths must agree."""
    model = GPT(19, 16, 2, 2, 12, dropout=0.5, seed=11)
    if mode == "eval":
        model.eval()
    prompt = np.random.default_rng(11).integers(0, 19, (2, 4))
    cached = model.generate(prompt, 8, seed=3).numpy()
    uncached = model.generate(prompt, 8, seed=3, use_cache=False).numpy()
    assert np.array_equal(cached, uncached), (
        f"GPT(dropout=0.5) in {mode} mode: cached and uncached generation differ. generate runs in eval mode, where "
        "dropout does nothing; the cached path must pass training=self.training to scaled_dot_product_attention")
    assert model.training == (mode == "training"), "generate must switch the model back to the mode it found"


def test_long_prompt_is_cropped():
    model = GPT(7, 8, 1, 2, 6, seed=6)
    prompt = np.random.default_rng(9).integers(0, 7, 15)
    for use_cache in (True, False):
        try:
            out = model.generate(prompt, 3, seed=2, use_cache=use_cache).numpy()
        except ValueError as err:
            pytest.fail(f"generate must crop a prompt longer than max_seq_len to its last max_seq_len tokens: {err}")
        assert np.array_equal(out[:15], prompt), "the result starts with the whole prompt"
        cropped = model.generate(prompt[-6:], 3, seed=2, use_cache=use_cache).numpy()
        assert np.array_equal(out[15:], cropped[6:]), "the model sees only the last max_seq_len tokens"


def test_generation_errors():
    model = GPT(7, 8, 1, 2, 6)
    with pytest.raises(ValueError):
        model.generate(np.zeros((1, 0), dtype=np.int64), 3)
    with pytest.raises(ValueError):
        model.generate([1, 2], -1)


# ---- issue 20: no distribution, no sample; integers are integers ---------------------------------

Z = np.array([[2.0, 1.0, 0.5, 0.0], [0.0, 3.0, 0.0, 1.0]])


@pytest.mark.parametrize("case, logits, temperature, says", [
    ("nan-logit", [[0.1, np.nan, 0.3, 0.0], [0, 1, 2, 3]], 1.0, "row 0 contain NaN"),
    ("nan-greedy", [[0.0, 1.0, 2.0, 3.0], [np.nan, 1, 2, 3]], 0.0, "row 1 contain NaN"),
    ("all-minus-inf", [[0.0, 1.0, 2.0, 3.0], [-np.inf] * 4], 1.0, "every logit of row 1 is -inf"),
    ("plus-inf", [[np.inf, 1.0, 2.0, 3.0], [0, 1, 2, 3]], 1.0, "+inf"),
    ("nan-temperature", Z, float("nan"), "temperature must be >= 0, got nan"),
    ("tiny-temperature", Z, 1e-310, "overflows"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_sampling_without_a_distribution_raises_as_torch_multinomial_does(case, logits, temperature, says):
    """A NaN used to make every cumulative probability NaN, and the sample token 0, forever."""
    with pytest.raises(ValueError, match=says.replace("+", r"\+")):
        sample_next_token(np.array(logits), temperature, rng=np.random.default_rng(0))
    if temperature != 0:
        with pytest.raises(ValueError):
            next_token_probs(np.array(logits), temperature)


def test_a_diverged_model_cannot_generate():
    model = GPT(11, 8, 1, 2, 8, seed=0)
    model.ln_f.weight.data = np.full(8, np.nan, dtype=np.float32)
    with pytest.raises(ValueError, match="NaN"):
        model.generate([1, 2, 3], 5, seed=0)


@pytest.mark.parametrize("top_k, error", [(2.5, ValueError), (0, ValueError), (True, TypeError), ("2", TypeError)])
def test_top_k_must_be_a_whole_number_at_least_one(top_k, error):
    with pytest.raises(error, match="top_k must"):
        sample_next_token(Z, 1.0, top_k=top_k, rng=np.random.default_rng(0))
    assert np.array_equal(next_token_probs(Z, 1.0, top_k=2.0), next_token_probs(Z, 1.0, top_k=2))


def test_generate_takes_whole_numbers_only():
    model = GPT(11, 8, 1, 2, 8, seed=0)
    with pytest.raises(ValueError, match="whole numbers"):
        model.generate([1, 2.5], 3, seed=0)
    with pytest.raises(TypeError, match="integers"):
        model.generate(np.array([True, False]), 3, seed=0)
    with pytest.raises(IndexError, match="token id 11"):
        model.generate([1, 11], 3, seed=0)
    with pytest.raises(ValueError, match="max_new_tokens must be a whole number, got 2.5"):
        model.generate([1, 2], 2.5, seed=0)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 0"):
        model.generate([1, 2], -1, seed=0)
    assert np.array_equal(model.generate([1.0, 2.0], 3.0, seed=0).numpy(), model.generate([1, 2], 3, seed=0).numpy())
