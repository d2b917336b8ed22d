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
from tinytorch.core.tensor import Tensor
from tinytorch.perf.memory import backward_working_bytes, kv_cache_bytes, training_memory
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
    keys = {"parameters", "gradients", "optimizer_state", "activations", "backward_working", "total"}
    assert set(parts) == keys, (f"the keys are {sorted(keys)}; got {sorted(parts)}"
                                + (": add backward_working = backward_working_bytes(loss), the gradients the backward "
                                   "pass holds at once" if "backward_working" not in parts else ""))
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
    assert parts["backward_working"] == backward_working_bytes(model(ids[0], targets=ids[1])[1]), \
        "backward_working: backward_working_bytes of the loss of one forward pass on the batch"
    five = ("parameters", "gradients", "optimizer_state", "activations", "backward_working")
    assert parts["total"] == sum(parts[k] for k in five), \
        f"total is the sum of the five parts {five}: {sum(parts[k] for k in five)}, got {parts['total']}"
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_backward_working_bytes_by_hand(dtype):
    """Walked by hand: (x * 2).sum() holds at most y's gradient and x's (2 · 1000 numbers) at the mul;
    (x * x).sum() holds y's and two gradients for x (the mul returns one per input) before they are added."""
    x = Tensor(np.ones(1000, dtype=dtype), requires_grad=True)
    size = np.dtype(dtype).itemsize
    assert backward_working_bytes((x * 2).sum()) == 2000 * size
    assert backward_working_bytes((x * x).sum()) == 3000 * size
    assert backward_working_bytes(x) == 0, "a leaf has no backward pass"
    frozen = Tensor(np.ones(1000, dtype=dtype))  # needs no gradient: the rule returns none for it
    assert backward_working_bytes((x * frozen).sum()) == 2000 * size


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


@pytest.mark.parametrize("make, batch, length", [
    (lambda: GPT(65, 128, 4, 4, 64, bias=False, seed=0), 12, 64),
    (lambda: GPT(29, 32, 8, 4, 64, seed=0), 4, 64)], ids=["milestone-gpt-4-blocks", "gpt-8-blocks"])
def test_prediction_against_the_measured_peak(make, batch, length):
    """The first four parts are all alive at the end of backward(), the gradients on their way down during it:
    the measured peak is within 10% of the five parts' sum (above it by what the rules make inside themselves)."""
    model = make()
    parts = training_memory(model, AdamW(model.parameters()), (batch, length))
    measured = measured_training_peak(make, batch, length)
    assert 0.98 * parts["total"] <= measured <= 1.10 * parts["total"], (
        f"measured peak {measured / 2**20:.2f} MiB, predicted {parts['total'] / 2**20:.2f} MiB "
        f"(ratio {measured / parts['total']:.3f}; of it backward_working {parts['backward_working'] / 2**20:.2f} MiB)")
