"""Module 09 against PyTorch: values and gradients in float64 for many strides, paddings and odd sizes."""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.spatial import (AvgPool2d, Conv2d, Flatten, MaxPool2d, avg_pool2d, conv2d,  # noqa: E402
                                    max_pool2d)
from tinytorch.core.tensor import Tensor  # noqa: E402

F = torch.nn.functional

CONV_CASES = [  # x shape, weight shape, stride, padding, bias
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, True),
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, True),
    ((2, 3, 9, 8), (5, 3, 3, 3), 2, 1, True),
    ((1, 2, 11, 9), (3, 2, 5, 3), (3, 2), (2, 1), True),
    ((3, 1, 5, 5), (2, 1, 5, 5), 1, 2, False),
    ((2, 4, 6, 7), (3, 4, 1, 1), 2, 0, True),
    ((2, 2, 13, 13), (4, 2, 4, 4), 3, 0, True),   # the last window stops short of the edge
    ((1, 3, 8, 5), (2, 3, 2, 4), (1, 3), (0, 2), False),
    ((4, 3, 32, 32), (16, 3, 3, 3), 1, 1, True),  # the benchmark's layer, smaller batch
]
CONV_IDS = [f"x{x}-w{w}-s{s}-p{p}-{'bias' if b else 'nobias'}".replace(" ", "") for x, w, s, p, b in CONV_CASES]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,bias", CONV_CASES, ids=CONV_IDS)
def test_conv2d_matches_torch(x_shape, w_shape, stride, padding, bias, rng):
    arrays = [rng.standard_normal(x_shape), rng.standard_normal(w_shape)] + ([rng.standard_normal(w_shape[0])] if bias else [])
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = conv2d(*ours, stride=stride, padding=padding)
    ref = F.conv2d(*theirs, stride=stride, padding=padding)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    ref.backward(torch.tensor(g))
    for name, a, b in zip(("dx", "dweight", "dbias"), ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-11, err_msg=name)


POOL_CASES = [(2, None), (3, 2), (3, 1), ((2, 3), (1, 2)), ((3, 2), None), (4, 3)]
POOL_IDS = [f"k{k}-s{s}".replace(" ", "") for k, s in POOL_CASES]


@pytest.mark.parametrize("kernel,stride", POOL_CASES, ids=POOL_IDS)
@pytest.mark.parametrize("ours_fn,theirs_fn", [(max_pool2d, F.max_pool2d), (avg_pool2d, F.avg_pool2d)],
                         ids=["max", "avg"])
def test_pools_match_torch(ours_fn, theirs_fn, kernel, stride, rng):
    x = rng.standard_normal((2, 3, 9, 7))
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours_fn(ours, kernel, stride), theirs_fn(theirs, kernel, stride)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-14)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kernel,stride", [(2, None), (3, 1), (2, 1)], ids=["k2", "k3-s1", "k2-s1"])
def test_max_pool_ties_go_where_torch_sends_them(kernel, stride, rng):
    x = rng.integers(0, 3, size=(2, 2, 6, 6)).astype(np.float64)  # many ties
    x[0, 0] = 0.0  # a whole channel of ties (a ReLU's zeros)
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = max_pool2d(ours, kernel, stride), F.max_pool2d(theirs, kernel, stride)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    ref.backward(torch.tensor(g))
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_float32_conv_matches_torch(rng):
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    out = conv2d(x, w, padding=1).numpy()
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, F.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy(), rtol=1e-4, atol=1e-5)


def test_layers_match_torch_modules(rng):
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, stride=2, padding=1), torch.nn.MaxPool2d(2),
                                 torch.nn.Conv2d(6, 4, (2, 3), padding=(1, 0)), torch.nn.AvgPool2d(2, stride=1),
                                 torch.nn.Flatten()).double()
    ours = [Conv2d(3, 6, 3, stride=2, padding=1, dtype=np.float64), MaxPool2d(2),
            Conv2d(6, 4, (2, 3), padding=(1, 0), dtype=np.float64), AvgPool2d(2, stride=1), Flatten()]
    for mine, ref in ((ours[0], theirs[0]), (ours[2], theirs[2])):
        assert mine.weight.shape == tuple(ref.weight.shape), "same weight layout as torch.nn.Conv2d"
        mine.weight.data = ref.weight.detach().numpy().copy()
        mine.bias.data = ref.bias.detach().numpy().copy()
    x = rng.standard_normal((2, 3, 17, 15))
    tx, h = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    out = h
    for layer in ours:
        out = layer(out)
    ref = theirs(tx)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours[2].weight.grad.numpy(), theirs[2].weight.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_initialisation_range_matches_torch():
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(16, 32, 3)
    ours = Conv2d(16, 32, 3, seed=0)
    for name in ("weight", "bias"):
        ours_max = np.abs(getattr(ours, name).numpy()).max()
        ref_max = getattr(ref, name).detach().abs().max().item()
        assert abs(ours_max - ref_max) < 0.01, f"{name}: the same uniform(-1/√fan_in, 1/√fan_in) as PyTorch"
