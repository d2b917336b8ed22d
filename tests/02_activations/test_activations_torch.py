"""Module 02 against PyTorch (float64 forward values)."""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.activations import (GELU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh, gelu,  # noqa: E402
                                        log_softmax, relu, sigmoid, softmax, tanh)
from tinytorch.core.tensor import Tensor  # noqa: E402

F = torch.nn.functional


def sample(rng, shape=(3, 4, 5), scale=4.0):
    x = rng.standard_normal(shape) * scale
    x.flat[:4] = [-1000.0, 1000.0, -40.0, 40.0]  # the extremes, in every comparison
    return x


@pytest.mark.parametrize("ours,theirs", [
    (relu, torch.relu),
    (sigmoid, torch.sigmoid),
    (tanh, torch.tanh),
    (gelu, lambda t: F.gelu(t, approximate="tanh")),
], ids=["relu", "sigmoid", "tanh", "gelu"])
def test_elementwise_match_torch(ours, theirs, rng):
    x = sample(rng)
    expected = theirs(torch.from_numpy(x)).numpy()
    got = ours(Tensor(x)).numpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
def test_softmax_and_log_softmax_match_torch(dim, rng):
    x = sample(rng)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(softmax(Tensor(x), dim=dim).numpy(), torch.softmax(t, dim=dim).numpy(),
                               rtol=1e-12, atol=1e-300)
    # x - (m + lse) and (x - m) - lse round differently near 0: an absolute tolerance there
    np.testing.assert_allclose(log_softmax(Tensor(x), dim=dim).numpy(),
                               torch.log_softmax(t, dim=dim).numpy(), rtol=1e-12, atol=1e-13)


def test_layer_objects_match_torch_modules(rng):
    x = sample(rng, (4, 6))
    t = torch.from_numpy(x)
    pairs = [(ReLU(), torch.nn.ReLU()), (Sigmoid(), torch.nn.Sigmoid()), (Tanh(), torch.nn.Tanh()),
             (GELU(), torch.nn.GELU(approximate="tanh")), (Softmax(dim=0), torch.nn.Softmax(dim=0)),
             (LogSoftmax(dim=-1), torch.nn.LogSoftmax(dim=-1))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(t).numpy(), rtol=1e-12, atol=1e-300)


def test_float32_softmax_matches_torch(rng):
    x = (rng.standard_normal((8, 10)) * 30).astype(np.float32)
    np.testing.assert_allclose(softmax(Tensor(x)).numpy(), torch.softmax(torch.from_numpy(x), -1).numpy(),
                               rtol=1e-5, atol=1e-7)


def test_float16_softmax_over_70000_classes_matches_torch(rng):
    # PyTorch accumulates a float16 softmax in float32; so must we (float16 stops at 65,504)
    x = (rng.standard_normal((2, 70_000)) * 2).astype(np.float16)
    t = torch.from_numpy(x)
    ours, theirs = softmax(Tensor(x)).numpy(), torch.softmax(t, -1).numpy()
    assert ours.dtype == np.float16
    np.testing.assert_allclose(ours.astype(np.float64), theirs.astype(np.float64), rtol=1e-2, atol=1e-7)
    np.testing.assert_allclose(log_softmax(Tensor(x)).numpy().astype(np.float64),
                               torch.log_softmax(t, -1).numpy().astype(np.float64), atol=2e-2)
