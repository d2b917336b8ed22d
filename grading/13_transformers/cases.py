"""Module 13, graded cases: LayerNorm, the block and the GPT on seeded weights and sizes the visible tests never use.

Weights are drawn from the case's generator and set with load_state_dict (or drawn by the
model's own seeded initialisation, whose order the lesson fixes), then outputs, losses,
gradients and greedy generations are compared (by the grader) with the reference's, recorded by
`python grading/record_expected.py`.
"""
import numpy as np

from tinytorch.core.autograd import no_grad
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import (GPT, MLP, LayerNorm, TransformerBlock, cached_causal_mask, layer_norm,
                                         next_token_probs, sample_next_token)


def randomise(model, rng, scale=0.2):
    """Every parameter drawn from rng, in named_parameters order, set through load_state_dict."""
    state = {name: (rng.standard_normal(p.shape) * scale).astype(p.dtype) for name, p in model.named_parameters()}
    model.load_state_dict({**model.state_dict(), **state})
    return model


def _layer_norm(rng):
    norm = randomise(LayerNorm(7), rng)
    x = Tensor(rng.standard_normal((3, 5, 7)).astype(np.float32) * 4 + 2, requires_grad=True)
    y = norm(x)
    (y * Tensor(rng.standard_normal((3, 5, 7)).astype(np.float32))).sum().backward()
    return {"y": y, "dx": x.grad, "dweight": norm.weight.grad, "dbias": norm.bias.grad}


def _layer_norm_trailing(rng):
    x = Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    weight = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    y = layer_norm(x, weight, None, eps=1e-3)
    (y ** 2).sum().backward()
    return {"y": y, "dx": x.grad, "dweight": weight.grad}


def _mlp(rng):
    mlp = randomise(MLP(6, 10), rng)
    x = Tensor(rng.standard_normal((2, 3, 6)).astype(np.float32), requires_grad=True)
    y = mlp(x)
    y.sum().backward()
    return {"y": y, "dx": x.grad, "dfc": mlp.fc.weight.grad}


def _block(rng):
    block = randomise(TransformerBlock(8, 2), rng)
    x = Tensor(rng.standard_normal((2, 5, 8)).astype(np.float32), requires_grad=True)
    y = block(x)
    (y * Tensor(rng.standard_normal((2, 5, 8)).astype(np.float32))).sum().backward()
    return {"y": y, "dx": x.grad, "dln1": block.ln1.weight.grad}


def _small_gpt(rng, **kwargs):
    return randomise(GPT(vocab_size=11, embed_dim=8, num_layers=2, num_heads=2, max_seq_len=6, **kwargs), rng)


def _gpt_forward(rng):
    model = _small_gpt(rng)
    idx = rng.integers(0, 11, (3, 6))
    targets = rng.integers(0, 11, (3, 6))
    logits, loss = model(idx, targets)
    loss.backward()
    return {"logits": logits, "loss": loss, "dtokens": model.token_embedding.weight.grad,
            "dpositions": model.position_embedding.weight.grad}


def _gpt_untied(rng):
    model = _small_gpt(rng, tie_weights=False)
    logits, loss = model(rng.integers(0, 11, (2, 4)))
    return {"logits": logits, "no_loss": [loss is None]}


def _gpt_initialisation(rng):
    model = GPT(vocab_size=13, embed_dim=8, num_layers=3, num_heads=2, max_seq_len=5, seed=int(rng.integers(1000)))
    return {name: p for name, p in model.named_parameters()}


def _greedy_generation(rng):
    model = _small_gpt(rng)
    prompt = rng.integers(0, 11, (2, 4))
    cached = model.generate(prompt, 7, top_k=1, use_cache=True)  # past max_seq_len: the prompt is cropped
    plain = model.generate(prompt, 7, top_k=1, use_cache=False)
    single = model.generate(prompt[0], 3, temperature=0.0)
    return {"cached": cached, "plain": plain, "single": single}


def _layer_norm_huge(rng):
    """layer_norm of float32 rows near 1e20: their squares overflow float32, the normalised rows must not."""
    x = Tensor((rng.standard_normal((3, 6)) * 1e20).astype(np.float32))
    return {"out": layer_norm(x, Tensor(np.ones(6, dtype=np.float32)), None)}


def _sampling(rng):
    """The KV cache's causal mask, the next-token probabilities at a temperature, and seeded sampling."""
    logits = rng.standard_normal((8, 7)) * 2.0
    return {"cached_mask_3_after_2": cached_causal_mask(3, 2), "cached_mask_2_after_0": cached_causal_mask(2, 0),
            "probs_t05": next_token_probs(logits, temperature=0.5), "probs_top3": next_token_probs(logits, 1.0, top_k=3),
            "sampled_t08": sample_next_token(logits, temperature=0.8, rng=3),
            "sampled_top2": sample_next_token(logits, temperature=1.3, top_k=2, rng=4)}


def _dropout_everywhere(rng):
    """GPT(dropout=0.3, seed=5): in training every dropout (embeddings, attention output, MLP) draws from the
    model's seeded generator; after .eval() none does, also on the KV-cache path."""
    training = GPT(vocab_size=11, embed_dim=8, num_layers=2, num_heads=2, max_seq_len=6, dropout=0.3, seed=5)
    idx = rng.integers(0, 11, (2, 5))
    logits, _ = training(idx)
    evaluated = GPT(vocab_size=11, embed_dim=8, num_layers=2, num_heads=2, max_seq_len=6, dropout=0.3, seed=5)
    evaluated.eval()
    prompt = rng.integers(0, 11, (2, 3))
    eval_logits, _ = evaluated(idx)
    with no_grad():  # the cache is for generation
        cached_logits, _ = evaluated(prompt, cache=evaluated.make_cache(2))
    return {"training_logits": logits, "eval_logits": eval_logits, "eval_cached_logits": cached_logits,
            "eval_generated_cached": evaluated.generate(prompt, 5, temperature=0.0, use_cache=True),
            "eval_generated_plain": evaluated.generate(prompt, 5, temperature=0.0, use_cache=False)}


CASES = {
    "layer-norm": (_layer_norm, "LayerNorm(7) with drawn weight and bias: output and gradients"),
    "layer-norm-trailing": (_layer_norm_trailing, "layer_norm over the last two axes, no bias, eps=1e-3"),
    "mlp": (_mlp, "MLP(6, 10) on (2, 3, 6): output and gradients"),
    "transformer-block": (_block, "TransformerBlock(8, 2), pre-norm with residuals: output and gradients"),
    "gpt-forward": (_gpt_forward, "GPT(11, 8, 2 layers, 2 heads, context 6): logits, loss and embedding gradients"),
    "gpt-untied": (_gpt_untied, "GPT with tie_weights=False: logits, and loss None without targets"),
    "gpt-initialisation": (_gpt_initialisation, "GPT(seed=...) initialisation (drawn in modules() order, GPT-2's scales)"),
    "greedy-generation": (_greedy_generation, "greedy generate() with and without the KV cache, past the context"),
    "layer-norm-huge": (_layer_norm_huge, "layer_norm of float32 rows near 1e20 (their squares overflow float32)"),
    "sampling": (_sampling, "cached_causal_mask, next_token_probs with temperature and top_k, seeded sampling"),
    "dropout-everywhere": (_dropout_everywhere, "GPT(dropout=0.3, seed=5): dropout after the embeddings, on the "
                                                "attention output and in the MLP in training, none after .eval()"),
}

