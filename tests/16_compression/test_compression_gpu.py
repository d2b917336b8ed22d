"""Module 16 on CuPy arrays: the same masks, gradients, smaller layers and losses as on NumPy (skipped
without a GPU)."""
import copy

import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import MLP
from tinytorch.perf.compression import distillation_loss, low_rank, prune_global, prune_magnitude, prune_mlp_units

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_pruned_layer_on_gpu_matches_cpu():
    cpu = Linear(6, 5, seed=0, dtype=np.float64)
    gpu = copy.deepcopy(cpu).to("cuda")
    prune_magnitude(cpu, 0.5)
    prune_magnitude(gpu, 0.5)
    assert gpu.weight_mask.device == "cuda" and gpu.weight_orig.device == "cuda", (
        "weight_orig and weight_mask stay on the GPU")
    np.testing.assert_array_equal(gpu.weight_mask.numpy(), cpu.weight_mask.numpy())
    x = np.random.default_rng(1).standard_normal((3, 6))
    out_cpu, out_gpu = cpu(Tensor(x)), gpu(Tensor(x, device="cuda"))
    np.testing.assert_allclose(out_gpu.numpy(), out_cpu.numpy(), atol=1e-12)
    out_cpu.sum().backward()
    out_gpu.sum().backward()
    np.testing.assert_allclose(gpu.weight_orig.grad.numpy(), cpu.weight_orig.grad.numpy(), atol=1e-12)
    prune_global([gpu], 0.7)
    assert gpu.weight_mask.device == "cuda" and (gpu.weight_mask.numpy() == 0).sum() == 21, (
        "global pruning on the GPU: 21 of 30 entries")


def test_structured_and_low_rank_stay_on_the_gpu():
    mlp = MLP(8, 32, seed=2, dtype=np.float64).to("cuda")
    small = prune_mlp_units(mlp, 0.5)
    assert small.fc.weight.device == "cuda" and small.fc.weight.shape == (8, 16), "the smaller MLP is made on the GPU"
    pair = low_rank(mlp.fc, 4)
    assert pair[0].weight.device == "cuda" and pair[1].bias.device == "cuda", "the factors are made on the GPU"
    x = Tensor(np.random.default_rng(3).standard_normal((2, 8)), device="cuda")
    with no_grad():
        assert small(x).device == "cuda" and pair(x).shape == (2, 32), "the smaller layers run on the GPU"


def test_distillation_loss_on_gpu_matches_cpu():
    rng = np.random.default_rng(4)
    s, t, y = rng.standard_normal((4, 6)), rng.standard_normal((4, 6)), rng.integers(0, 6, 4)
    cpu, gpu = Tensor(s, requires_grad=True), Tensor(s, requires_grad=True, device="cuda")
    loss_cpu = distillation_loss(cpu, t, y)
    loss_gpu = distillation_loss(gpu, Tensor(t, device="cuda"), Tensor(y, device="cuda"))
    assert abs(loss_gpu.item() - loss_cpu.item()) < 1e-12, "the same loss on the GPU"
    loss_cpu.backward()
    loss_gpu.backward()
    np.testing.assert_allclose(gpu.grad.numpy(), cpu.grad.numpy(), atol=1e-12)
