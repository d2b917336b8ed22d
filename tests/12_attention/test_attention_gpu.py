"""Module 12 on CuPy arrays: the same values and gradients as on NumPy (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.attention import MultiHeadAttention, flash_attention, scaled_dot_product_attention
from tinytorch.core.tensor import Tensor

pytestmark = [pytest.mark.gpu, requires_gpu]


def _pair(rng, shape):
    data = rng.standard_normal(shape)
    return Tensor(data, requires_grad=True), Tensor(data, requires_grad=True, device="cuda")


@pytest.mark.parametrize("attend", ["sdpa", "flash"])
def test_attention_on_gpu_matches_cpu(attend):
    rng = np.random.default_rng(0)
    (q, q_gpu), (k, k_gpu), (v, v_gpu) = (_pair(rng, s) for s in ((2, 3, 40, 8), (2, 3, 40, 8), (2, 3, 40, 5)))
    run = {"sdpa": lambda *a: scaled_dot_product_attention(*a, is_causal=True)[0],
           "flash": lambda *a: flash_attention(*a, is_causal=True, block_size=16)}[attend]
    out, out_gpu = run(q, k, v), run(q_gpu, k_gpu, v_gpu)
    assert out_gpu.device == "cuda"
    np.testing.assert_allclose(out_gpu.numpy(), out.numpy(), rtol=1e-10, atol=1e-12)
    cotangent = rng.standard_normal(out.shape)
    out.backward(cotangent)
    out_gpu.backward(cotangent)
    for cpu, gpu in ((q, q_gpu), (k, k_gpu), (v, v_gpu)):
        np.testing.assert_allclose(gpu.grad.numpy(), cpu.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_multi_head_attention_on_gpu_matches_cpu():
    import cupy

    mha = MultiHeadAttention(16, 4)
    x = np.random.default_rng(1).standard_normal((2, 6, 16)).astype(np.float32)
    out_cpu, weights_cpu = mha(Tensor(x), is_causal=True)
    for p in mha.parameters():
        p.data = cupy.asarray(p.data)
    out_gpu, weights_gpu = mha(Tensor(x, device="cuda"), is_causal=True)
    np.testing.assert_allclose(out_gpu.numpy(), out_cpu.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights_gpu.numpy(), weights_cpu.numpy(), rtol=1e-5, atol=1e-6)


def test_masks_and_key_padding_mask_on_gpu():
    """Keep masks made on the host or on the GPU, key_padding_mask, and the 0/1 rule, with CuPy arrays."""
    import cupy

    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    real = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.float32)
    mha = MultiHeadAttention(8, 2, seed=0)
    out_cpu, weights_cpu = mha(Tensor(x), key_padding_mask=real, is_causal=True)
    mha.to("cuda")
    for mask in (real, cupy.asarray(real)):
        out_gpu, weights_gpu = mha(Tensor(x, device="cuda"), key_padding_mask=mask, is_causal=True)
        np.testing.assert_allclose(out_gpu.numpy(), out_cpu.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(weights_gpu.numpy(), weights_cpu.numpy(), rtol=1e-5, atol=1e-6)
    additive = cupy.asarray(np.where(np.tril(np.ones((4, 4), dtype=bool)), 0.0, -np.inf))
    q = Tensor(x, device="cuda")
    with pytest.raises(ValueError, match="keep = additive == 0"):
        scaled_dot_product_attention(q, q, q, mask=additive)
