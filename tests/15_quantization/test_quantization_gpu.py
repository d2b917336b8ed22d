"""Module 15 on CuPy arrays: the same integers and outputs as on NumPy (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT
from tinytorch.perf.quantization import (PerChannelMinMaxObserver, dequantize, pack_int4, quantize_model,
                                         quantize_per_channel, quantize_per_tensor, unpack_int4)

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_quantizers_on_gpu_give_the_cpu_integers():
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32) * 3
    q_cpu = quantize_per_tensor(x, 0.05, 3).numpy()
    q_gpu = quantize_per_tensor(Tensor(x, device="cuda"), 0.05, 3)
    assert q_gpu.device == "cuda" and np.array_equal(q_gpu.numpy(), q_cpu)
    observer = PerChannelMinMaxObserver(axis=1, symmetric=True)
    observer.observe(Tensor(x, device="cuda"))
    s, z = observer.qparams()
    qc = quantize_per_channel(Tensor(x, device="cuda"), s, z, axis=1)
    assert np.array_equal(qc.numpy(), quantize_per_channel(x, s, z, axis=1).numpy())
    assert np.array_equal(dequantize(qc, s, z, axis=1).numpy(), dequantize(qc.numpy(), s, z, axis=1).numpy())
    packed = pack_int4(qc.data.clip(-8, 7))
    assert np.array_equal(unpack_int4(packed, 5).get(), qc.numpy().clip(-8, 7))


@pytest.mark.parametrize("options", [dict(bits=8), dict(bits=4), dict(mode="dynamic")], ids=["int8", "int4", "dynamic"])
def test_quantized_gpt_on_gpu_matches_cpu(options):
    model = GPT(13, 16, 2, 2, 8, seed=0, bias=False)
    idx = np.random.default_rng(1).integers(0, 13, (2, 8))
    quantized = quantize_model(model, **options)
    with no_grad():
        cpu = quantized(idx)[0].numpy()
        gpu = quantize_model(model.to("cuda"), **options)(idx)[0]
    assert gpu.device == "cuda"
    np.testing.assert_allclose(gpu.numpy(), cpu, atol=1e-5)


def test_linear_layer_on_gpu():
    linear = Linear(32, 8, seed=0)
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    cpu = quantize_model(linear, mode="dynamic")(Tensor(x)).numpy()
    gpu = quantize_model(linear.to("cuda"), mode="dynamic")(Tensor(x, device="cuda"))
    np.testing.assert_allclose(gpu.numpy(), cpu, atol=1e-6)
