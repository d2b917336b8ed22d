"""Module 04 against PyTorch (float64 loss values)."""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.losses import (BCEWithLogitsLoss, BinaryCrossEntropyLoss, CrossEntropyLoss,  # noqa: E402
                                   MSELoss)
from tinytorch.core.tensor import Tensor  # noqa: E402

F = torch.nn.functional


def test_mse_matches_torch(rng):
    a, b = rng.standard_normal((4, 5, 3)), rng.standard_normal((4, 5, 3))
    expected = F.mse_loss(torch.from_numpy(a), torch.from_numpy(b)).item()
    assert MSELoss()(Tensor(a), b).item() == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("scale", [1.0, 30.0, 1000.0])
def test_cross_entropy_2d_matches_torch(scale, rng):
    z = rng.standard_normal((16, 10)) * scale
    t = rng.integers(0, 10, 16)
    expected = F.cross_entropy(torch.from_numpy(z), torch.from_numpy(t)).item()
    assert CrossEntropyLoss()(Tensor(z), t).item() == pytest.approx(expected, rel=1e-12)


def test_cross_entropy_sequences_with_ignore_index_match_torch(rng):
    z = rng.standard_normal((3, 7, 11)) * 4
    t = rng.integers(0, 11, (3, 7))
    t[0, 5:] = -100
    t[2, 1] = -100
    # PyTorch puts classes in dim 1 for N-d inputs; TinyTorch keeps them last
    expected = F.cross_entropy(torch.from_numpy(z).permute(0, 2, 1), torch.from_numpy(t), ignore_index=-100).item()
    assert CrossEntropyLoss(ignore_index=-100)(Tensor(z), t).item() == pytest.approx(expected, rel=1e-12)
    flat = F.cross_entropy(torch.from_numpy(z.reshape(-1, 11)), torch.from_numpy(t.reshape(-1)),
                           ignore_index=-100).item()
    assert flat == pytest.approx(expected, rel=1e-12)


def test_cross_entropy_saved_probs_match_torch_softmax(rng):
    z = rng.standard_normal((5, 6)) * 10
    node = CrossEntropyLoss()(Tensor(z, requires_grad=True), rng.integers(0, 6, 5))._node
    np.testing.assert_allclose(node.saved["probs"], torch.softmax(torch.from_numpy(z), -1).numpy(), rtol=1e-12,
                               atol=1e-300)


def test_bce_matches_torch(rng):
    p = rng.uniform(0.01, 0.99, (6, 4))
    t = (rng.random((6, 4)) > 0.5).astype(np.float64)
    expected = F.binary_cross_entropy(torch.from_numpy(p), torch.from_numpy(t)).item()
    assert BinaryCrossEntropyLoss()(Tensor(p), t).item() == pytest.approx(expected, rel=1e-12)
    soft = rng.random((6, 4))
    expected = F.binary_cross_entropy(torch.from_numpy(p), torch.from_numpy(soft)).item()
    assert BinaryCrossEntropyLoss()(Tensor(p), soft).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("scale", [1.0, 20.0, 1000.0])
def test_bce_with_logits_matches_torch(scale, rng):
    x = rng.standard_normal((8, 5)) * scale
    t = rng.random((8, 5))
    expected = F.binary_cross_entropy_with_logits(torch.from_numpy(x), torch.from_numpy(t)).item()
    assert BCEWithLogitsLoss()(Tensor(x), t).item() == pytest.approx(expected, rel=1e-12)


def test_float16_cross_entropy_over_70000_classes_matches_torch(rng):
    # PyTorch accumulates a float16 cross-entropy in float32; the float16 sum of 70,000 exponentials is inf
    z = (rng.standard_normal((3, 70_000)) * 2).astype(np.float16)
    t = rng.integers(0, 70_000, 3)
    expected = F.cross_entropy(torch.from_numpy(z), torch.from_numpy(t)).item()
    loss = CrossEntropyLoss()(Tensor(z), t)
    assert loss.dtype == np.float16
    assert float(loss.item()) == pytest.approx(expected, rel=2e-3)
