"""Module 19 on a GPU (skipped without one): the environment names it, readings wait for queued CuPy work,
and the quality metrics of a model on the GPU equal those of the same model on the CPU."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT
from tinytorch.perf.benchmarking import accuracy, environment, generation_rate, lm_validation_loss, measure

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_environment_names_the_gpu():
    assert not environment()["gpu"].startswith("none"), environment()["gpu"]


def test_measure_waits_for_queued_gpu_work():
    import cupy

    a = cupy.ones((2048, 2048), dtype=cupy.float32)
    waited = measure({"mm": lambda: a @ a}, repeats=5, warmup=2)["mm"].median  # default: CuPy synchronised
    explicit = measure({"mm": lambda: a @ a}, repeats=5, warmup=2,
                       sync=lambda: cupy.cuda.Device().synchronize())["mm"].median
    assert explicit / 3 < waited < explicit * 3, f"synchronised by default: {waited} s, explicitly: {explicit} s"


def test_quality_on_the_gpu_equals_the_cpu():
    tokens = np.random.default_rng(0).integers(0, 13, 400)
    cpu = GPT(13, 16, 1, 2, 16, seed=0)
    gpu = GPT(13, 16, 1, 2, 16, seed=0).to("cuda")
    on_gpu, on_cpu = lm_validation_loss(gpu, tokens, 16), lm_validation_loss(cpu, tokens, 16)
    assert on_gpu == pytest.approx(on_cpu, rel=1e-5), \
        f"the same model scores {on_cpu:.6f} on the CPU and {on_gpu:.6f} on the GPU: bring the logits to the host"
    assert generation_rate(gpu, tokens[:4], new_tokens=4, repeats=2).median > 0
    mlp = Sequential(Linear(8, 16, seed=1), ReLU(), Linear(16, 3, seed=2))
    x = np.random.default_rng(1).normal(size=(50, 8)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 3, 50)
    on_cpu = accuracy(mlp, x, y)
    assert accuracy(mlp.to("cuda"), Tensor(x, device="cuda"), y) == on_cpu
