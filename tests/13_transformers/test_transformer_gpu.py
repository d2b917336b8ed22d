"""Module 13 on CuPy arrays: the same values, gradients and tokens as on NumPy (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.autograd import no_grad
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT, layer_norm

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_layer_norm_on_gpu_matches_cpu():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 5, 8)), rng.standard_normal(8), rng.standard_normal(8)]
    cpu = [Tensor(a, requires_grad=True) for a in arrays]
    gpu = [Tensor(a, requires_grad=True, device="cuda") for a in arrays]
    g = rng.standard_normal((2, 5, 8))
    out_cpu, out_gpu = layer_norm(*cpu), layer_norm(*gpu)
    assert out_gpu.device == "cuda"
    np.testing.assert_allclose(out_gpu.numpy(), out_cpu.numpy(), atol=1e-12)
    out_cpu.backward(g)
    out_gpu.backward(Tensor(g, device="cuda").data)
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), atol=1e-11)


def test_gpt_moves_to_gpu_and_matches_cpu():
    model = GPT(13, 16, 2, 2, 12, seed=0, dtype=np.float64)
    idx, targets = np.random.default_rng(1).integers(0, 13, (2, 2, 12))
    logits_cpu, loss_cpu = model(idx, targets=targets)
    loss_cpu.backward()
    grads_cpu = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    tokens_cpu = model.generate(idx[:, :4], 12, seed=3).numpy()
    model.zero_grad()
    assert model.to("cuda") is model and model.device == "cuda"
    logits_gpu, loss_gpu = model(idx, targets=targets)
    assert logits_gpu.device == "cuda"
    np.testing.assert_allclose(logits_gpu.numpy(), logits_cpu.numpy(), atol=1e-10)
    loss_gpu.backward()
    for name, p in model.named_parameters():
        assert p.grad.device == "cuda"
        np.testing.assert_allclose(p.grad.numpy(), grads_cpu[name], atol=1e-10, err_msg=name)
    assert np.array_equal(model.generate(idx[:, :4], 12, seed=3).numpy(), tokens_cpu)
    cache = model.make_cache(2)
    assert cache.layers[0].keys.__class__.__module__.startswith("cupy")
    with no_grad():
        model(idx[:, :3], cache=cache)
    assert cache.length == 3
