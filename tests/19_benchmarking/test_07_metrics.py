"""Module 19, given code: environment, latency, throughput, generation_rate, sizes."""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT
from tinytorch.perf.benchmarking import Measurement, environment, generation_rate, latency, parameter_count, throughput


def test_environment_has_every_fact():
    env = environment()
    for key in ("cpu", "cores", "blas", "python", "numpy", "tinytorch", "torch", "gpu", "date"):
        assert isinstance(env.get(key), str) and env[key], f"environment()[{key!r}] missing or empty"
    assert env["numpy"] == np.__version__ and env["cores"].isdigit()
    assert "thread" in env["blas"], f"the BLAS entry says how many threads it uses: {env['blas']}"


def test_latency_is_a_measurement_with_percentiles():
    m = latency(lambda x: x @ x, np.ones((16, 16)), warmup=1, repeats=7)
    assert isinstance(m, Measurement) and m.unit == "s" and len(m.samples) == 7
    assert 0 < m.p50 <= m.p90 <= m.samples.max()


def test_throughput_is_examples_per_second():
    m = throughput(lambda b: b * 2, np.ones((50, 3)), warmup=0, repeats=3)
    assert m.unit == "examples/s" and m.higher_is_better and np.all(m.samples > 0)


def test_generation_rate():
    gpt = GPT(11, 16, 1, 2, 16, seed=0)
    m = generation_rate(gpt, [1, 2, 3], new_tokens=8, repeats=2)
    assert m.unit == "tokens/s" and len(m.samples) == 2 and np.all(m.samples > 0)


def test_parameter_count():
    from tinytorch.perf.quantization import quantize_model

    model = Sequential(Linear(64, 32, seed=1), ReLU(), Linear(32, 10, seed=2))
    assert parameter_count(model) == 64 * 32 + 32 + 32 * 10 + 10
    int8 = quantize_model(model)
    assert parameter_count(int8) == parameter_count(model), "a quantized layer stores the same number of weights"
