"""Module 19 against PyTorch: the validation loss the harness computes from a model's logits equals
torch.nn.functional.cross_entropy on the same logits and targets (float64)."""
import numpy as np
import pytest

from tinytorch.models.transformer import GPT
from tinytorch.perf.benchmarking import lm_validation_loss

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def test_lm_validation_loss_equals_torch_cross_entropy():
    gpt = GPT(19, 16, 2, 2, 12, seed=0)
    tokens = np.random.default_rng(0).integers(0, 19, 12 * 9 + 1)
    windows = tokens[:-1].reshape(9, 12)
    targets = tokens[1:].reshape(9, 12)
    logits = np.asarray(gpt.eval()(windows)[0].data, dtype=np.float64)
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(logits).reshape(-1, 19),
                                                 torch.from_numpy(targets).reshape(-1)).item()
    got = lm_validation_loss(gpt, tokens, 12, batch_size=4)
    assert got == pytest.approx(expected, rel=1e-6), \
        f"PyTorch's cross_entropy over the 9 windows gives {expected:.6f}, lm_validation_loss {got:.6f}"


@pytest.mark.parametrize("scale", [1.0, 400.0], ids=["plain", "logits-in-the-thousands"])
def test_token_losses_equal_torch_cross_entropy_per_position(scale):
    from tinytorch.perf.benchmarking import token_losses

    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 5, 11)) * scale
    targets = rng.integers(0, 11, (3, 5))
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(logits).reshape(-1, 11),
                                                 torch.from_numpy(targets).reshape(-1), reduction="none").numpy()
    np.testing.assert_allclose(token_losses(logits, targets), expected.reshape(3, 5), rtol=1e-12, atol=1e-9)
