"""The same rules on CuPy arrays (skipped without CuPy and an NVIDIA GPU)."""
import zlib

import numpy as np
import pytest

from autograd_op_table import CASES
from devices import requires_gpu
from tinytorch.core.tensor import Tensor

pytestmark = [pytest.mark.gpu, requires_gpu]

# cases whose fixed arguments are plain index arrays are CPU-only by construction
GPU_CASES = [c for c in CASES if c.name not in {"getitem_repeats", "getitem_pairs"}]


def cuda():
    import cupy  # requires_gpu guarantees it is installed

    return cupy


@pytest.mark.parametrize("case", GPU_CASES, ids=[c.name for c in GPU_CASES])
def test_gpu_gradients_match_cpu(case):
    cupy = cuda()
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    arrays = case.arrays(rng)
    cpu = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    gpu = [Tensor(a.copy(), requires_grad=True, device="cuda") for a in arrays]
    out_cpu, out_gpu = case.fn(*cpu), case.fn(*gpu)
    v = np.asarray(rng.standard_normal(out_cpu.shape))
    out_cpu.backward(v)
    out_gpu.backward(cupy.asarray(v))
    for x, y in zip(cpu, gpu):
        assert y.grad.device == "cuda"
        np.testing.assert_allclose(y.grad.numpy(), x.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_gpu_scatter_add_with_repeated_indices():
    cupy = cuda()
    x = Tensor(np.array([10.0, 20.0, 30.0]), requires_grad=True, device="cuda")
    x[cupy.asarray([2, 2, 0, 2])].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 3.0])


def test_to_moves_the_gradient_back_to_the_cpu():
    cuda()
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    (x.to("cuda") * 3.0).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
