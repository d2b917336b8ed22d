"""Module 17, sections 1-2: training_memory and kv_cache_bytes, against what the code really allocates.

Peaks are measured with module 14's peak_memory (tracemalloc). Everything is built inside the
tests (never at import time).
"""
import numpy as np
import pytest

from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.activations import ReLU
from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.models.transformer import GPT
from tinytorch.perf.memory import kv_cache_bytes, training_memory
from tinytorch.perf.profiling import graph_saved_bytes, peak_memory


# ---- kv_cache_bytes ----------------------------------------------------------------------------------------------
def test_kv_cache_bytes_formula():
    assert kv_cache_bytes(1, 1, 1, 1, np.float32) == 8, \
        "one layer, one sequence, one position, one number: a key AND a value (the factor 2) of 4 bytes"
    assert kv_cache_bytes(3, 1, 1, 1, np.float32) == 24, "every layer keeps its own keys and values: × num_layers"
    assert kv_cache_bytes(12, 1, 1024, 768, "float32") == 75_497_472, "GPT-2 small at T=1024: 72 MiB"
    assert kv_cache_bytes(32, 1, 4096, 4096, np.float16) == 2 * 2**30, "Llama-2-7B at T=4096 in float16: 2 GiB"
    assert isinstance(kv_cache_bytes(2, 3, 4, 5, np.float64), int)
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(2, 3, 0, 5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
def test_kv_cache_bytes_equals_what_the_cache_allocates(dtype):
    model = GPT(11, 16, 3, 4, 10, seed=0, dtype=dtype)
    cache = model.make_cache(5)
    allocated = sum(a.nbytes for layer in cache.layers for a in (layer.keys, layer.values))
    assert kv_cache_bytes(3, 5, 10, 16, dtype) == allocated == cache.nbytes, \
        f"module 13's cache allocates {allocated} bytes; kv_cache_bytes says {kv_cache_bytes(3, 5, 10, 16, dtype)}"


def test_kv_cache_bytes_against_the_measured_peak():
    model = GPT(11, 32, 4, 4, 64, seed=0)
    expected = kv_cache_bytes(4, 8, 64, 32, np.float32)
    measured = peak_memory(lambda: model.make_cache(8))
    assert expected <= measured <= expected * 1.02 + 8192, f"measured {measured} bytes, predicted {expected}"


# ---- training_memory -------------------------------------------------------------------------------------------
def small_gpt():
    return GPT(17, 16, 2, 2, 8, seed=0)


def test_training_memory_keys_and_parameters():
    model = small_gpt()
    nbytes = sum(p.data.nbytes for p in model.parameters())
    parts = training_memory(model, AdamW(model.parameters()), (2, 8))
    assert set(parts) == {"parameters", "gradients", "optimizer_state", "activations", "total"}, sorted(parts)
    assert parts["parameters"] == nbytes, f"parameters: sum of p.data.nbytes = {nbytes}, got {parts['parameters']}"
    assert parts["gradients"] == nbytes, "gradients: one array of each parameter's shape and dtype"
    assert all(isinstance(v, int) for v in parts.values())


@pytest.mark.parametrize("make, arrays", [
    (lambda ps: AdamW(ps), 2), (lambda ps: Adam(ps), 2), (lambda ps: SGD(ps, lr=0.1), 0),
    (lambda ps: SGD(ps, lr=0.1, momentum=0.9), 1)], ids=["AdamW", "Adam", "SGD", "SGD+momentum"])
def test_training_memory_optimizer_state(make, arrays):
    model = small_gpt()
    nbytes = sum(p.data.nbytes for p in model.parameters())
    optimizer = make(model.parameters())
    parts = training_memory(model, optimizer, (2, 8))
    assert parts["optimizer_state"] == arrays * nbytes, (
        f"{type(optimizer).__name__} keeps {arrays} array(s) per parameter: {arrays * nbytes} bytes, got "
        f"{parts['optimizer_state']}: predict it with optimizer_state_arrays (before the first step() the optimizer "
        "holds nothing yet; AdamW keeps TWO arrays, exp_avg and exp_avg_sq)")
    model(*np.random.default_rng(0).integers(0, 17, (2, 2, 8)))[0].sum().backward()
    optimizer.step()
    assert parts["optimizer_state"] == optimizer.state_nbytes(), "the prediction equals the state after a step"


def test_training_memory_activations_and_total():
    model = small_gpt()
    parts = training_memory(model, AdamW(model.parameters()), (3, 8))
    ids = np.random.default_rng(0).integers(0, 17, (2, 3, 8))
    assert parts["activations"] == graph_saved_bytes(model(ids[0], targets=ids[1])[1]), \
        "activations: graph_saved_bytes of the loss of one forward pass on the batch"
    assert parts["total"] == sum(parts[k] for k in ("parameters", "gradients", "optimizer_state", "activations")), \
        "total is the sum of the four parts"
    longer = training_memory(model, AdamW(model.parameters()), (3, 4))
    assert longer["activations"] < parts["activations"] and longer["parameters"] == parts["parameters"]


def test_training_memory_draws_nothing_and_other_models():
    model = GPT(17, 16, 2, 2, 8, dropout=0.1, seed=0)
    state = model.rng.bit_generator.state
    training_memory(model, AdamW(model.parameters()), (2, 8))
    assert model.rng.bit_generator.state == state, "the model's random generators are put back"
    mlp = Sequential(Linear(5, 7, seed=0), ReLU(), Linear(7, 2, seed=1))
    parts = training_memory(mlp, SGD(mlp.parameters(), lr=0.1, momentum=0.9), (4, 5))
    assert parts["parameters"] == (5 * 7 + 7 + 7 * 2 + 2) * 4 and parts["optimizer_state"] == parts["parameters"]
    with pytest.raises(TypeError, match="not known"):
        training_memory(mlp, object(), (4, 5))


def measured_training_peak(make_model, batch, length):
    """peak_memory of building the model and AdamW and running two training steps (each in its own call)."""
    def run():
        model = make_model()
        optimizer = AdamW(model.parameters(), lr=1e-3)
        ids = np.random.default_rng(0).integers(0, model.vocab_size, (2, batch, length))

        def step():
            optimizer.zero_grad()
            model(ids[0], targets=ids[1])[1].backward()
            optimizer.step()
        step()
        step()
    return peak_memory(run)


def test_prediction_against_the_measured_peak():
    """The four parts are all alive at the end of backward(): the peak is their sum plus the backward
    pass's working memory (about one block's worth at most), within 10% for a GPT of 8 blocks."""
    make = lambda: GPT(29, 32, 8, 4, 64, seed=0)
    model = make()
    predicted = training_memory(model, AdamW(model.parameters()), (4, 64))["total"]
    measured = measured_training_peak(make, 4, 64)
    assert 0.98 * predicted <= measured <= 1.10 * predicted, \
        f"measured peak {measured / 2**20:.2f} MiB, predicted {predicted / 2**20:.2f} MiB (ratio {measured / predicted:.3f})"
