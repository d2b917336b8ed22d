"""Module 09 on CuPy arrays: the same values and gradients as on NumPy (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.spatial import Conv2d, MaxPool2d, avg_pool2d, col2im, conv2d, im2col, max_pool2d
from tinytorch.core.tensor import Tensor

pytestmark = [pytest.mark.gpu, requires_gpu]


def _pair(rng, shape):
    data = rng.standard_normal(shape)
    return Tensor(data, requires_grad=True), Tensor(data, requires_grad=True, device="cuda")


def test_im2col_and_col2im_on_gpu_match_cpu():
    import cupy

    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8))
    cols = im2col(x, (3, 2), (2, 1))
    cols_gpu = im2col(cupy.asarray(x), (3, 2), (2, 1))
    assert isinstance(cols_gpu, cupy.ndarray)
    np.testing.assert_array_equal(cols_gpu.get(), cols)
    back = col2im(cols_gpu, x.shape, (3, 2), (2, 1))
    np.testing.assert_allclose(back.get(), col2im(cols, x.shape, (3, 2), (2, 1)), rtol=1e-12)


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0), ((2, 1), (0, 2))], ids=["s1-p1", "s2-p0", "s2x1-p0x2"])
def test_conv2d_on_gpu_matches_cpu(stride, padding):
    rng = np.random.default_rng(1)
    (x, x_gpu), (w, w_gpu), (b, b_gpu) = (_pair(rng, s) for s in ((2, 3, 9, 8), (4, 3, 3, 2), (4,)))
    out, out_gpu = conv2d(x, w, b, stride, padding), conv2d(x_gpu, w_gpu, b_gpu, stride, padding)
    assert out_gpu.device == "cuda"
    np.testing.assert_allclose(out_gpu.numpy(), out.numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    out_gpu.backward(g)
    for cpu, gpu in ((x, x_gpu), (w, w_gpu), (b, b_gpu)):
        np.testing.assert_allclose(gpu.grad.numpy(), cpu.grad.numpy(), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("pool", [max_pool2d, avg_pool2d], ids=["max", "avg"])
def test_pools_on_gpu_match_cpu(pool):
    rng = np.random.default_rng(2)
    x, x_gpu = _pair(rng, (2, 3, 7, 6))
    out, out_gpu = pool(x, 3, 2), pool(x_gpu, 3, 2)
    np.testing.assert_allclose(out_gpu.numpy(), out.numpy(), rtol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    out_gpu.backward(g)
    np.testing.assert_allclose(x_gpu.grad.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_conv_layer_built_on_the_gpu():
    conv = Conv2d(3, 4, 3, padding=1, device="cuda", seed=0)
    assert conv.weight.device == "cuda" and conv.bias.device == "cuda"
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    out = MaxPool2d(2)(conv(Tensor(x, device="cuda")))
    cpu = Conv2d(3, 4, 3, padding=1, seed=0)
    np.testing.assert_allclose(out.numpy(), MaxPool2d(2)(cpu(Tensor(x))).numpy(), rtol=1e-5, atol=1e-6)
