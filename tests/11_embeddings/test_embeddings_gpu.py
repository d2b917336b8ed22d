"""Module 11 on CuPy arrays: the same values and gradients as on NumPy (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.tensor import Tensor
from tinytorch.text.embeddings import Embedding, PositionalEmbedding, SinusoidalPositionalEncoding, embedding

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_embedding_on_gpu_matches_cpu():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((9, 5))
    ids = rng.integers(0, 9, (4, 6))
    ids[0, :3] = 2  # repeated ids: the GPU scatter-add must add them up too
    cotangent = rng.standard_normal((4, 6, 5))
    cpu = Tensor(weight, requires_grad=True)
    gpu = Tensor(weight, requires_grad=True, device="cuda")
    out_cpu, out_gpu = embedding(cpu, ids, padding_idx=3), embedding(gpu, ids, padding_idx=3)
    assert out_gpu.device == "cuda"
    np.testing.assert_allclose(out_gpu.numpy(), out_cpu.numpy())
    out_cpu.backward(cotangent)
    out_gpu.backward(cotangent)
    assert gpu.grad.device == "cuda"
    np.testing.assert_allclose(gpu.grad.numpy(), cpu.grad.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(IndexError):
        embedding(gpu, [9])


def test_position_layers_move_to_the_gpu():
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    for layer in (PositionalEmbedding(6, 8, seed=0), SinusoidalPositionalEncoding(8, 6), Embedding(6, 8, seed=0)):
        data = (np.arange(5) if isinstance(layer, Embedding) else x)
        expected = layer(Tensor(data) if not isinstance(layer, Embedding) else data).numpy()
        layer.to("cuda")
        got = layer(Tensor(data, device="cuda") if not isinstance(layer, Embedding) else data)
        assert got.device == "cuda"
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
