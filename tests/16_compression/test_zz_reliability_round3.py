"""Issue 31 (reliability round 3): module 16 on non-finite weights and logits.

low_rank on a small layer holding inf never returned (inside LAPACK: Ctrl-C could not stop it),
and a 128x512 layer returned NaN with LAPACK warnings. Magnitude pruning ranked |NaN| after every
magnitude, so a NaN weight was never pruned, and structured pruning kept NaN units; distillation
trained a student towards a NaN teacher. Each is refused before any work, naming what holds the
values.
"""
import numpy as np
import pytest

from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import MLP
from tinytorch.perf.compression import (distillation_loss, low_rank, magnitude_mask, prune_global, prune_magnitude,
                                        prune_mlp_units, prune_mlps)


def poisoned_linear(shape, bad, seed=0):
    layer = Linear(*shape, seed=seed)
    layer.weight.data[1, 2] = bad
    return layer


@pytest.mark.parametrize("shape", [(4, 6), (128, 512)], ids=["small", "128x512"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_low_rank_refuses_a_non_finite_weight_before_the_svd(shape, bad, monkeypatch):
    layer = poisoned_linear(shape, bad)
    before = layer.weight.data.copy()

    def no_svd(*args, **kwargs):  # on inf LAPACK never returns: a regression must fail, not hang
        raise AssertionError("low_rank ran the SVD on a non-finite weight")
    monkeypatch.setattr(np.linalg, "svd", no_svd)
    with pytest.raises(ValueError, match=r"low_rank: the Linear's weight holds 1 NaN or infinite value"):
        low_rank(layer, 2)
    assert np.array_equal(layer.weight.data, before, equal_nan=True), "the layer must not change"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_magnitude_pruning_refuses_nan_weights_naming_the_layer(bad):
    layer = poisoned_linear((4, 6), bad)
    with pytest.raises(ValueError, match=r"prune_magnitude: Linear.weight holds 1 NaN or infinite"):
        prune_magnitude(layer, 0.5)
    assert "weight_mask" not in dict(layer.named_buffers()), "a refused pruning must leave the layer unpruned"
    with pytest.raises(ValueError, match=r"prune_global: Linear.weight holds 1 NaN"):
        prune_global([Linear(3, 3, seed=1), layer], 0.5)
    with pytest.raises(ValueError, match=r"magnitude_mask: weights holds 1 NaN"):
        magnitude_mask(layer.weight.data, 0.5)


def test_without_the_check_a_nan_weight_would_survive_any_amount():
    """Why the check: NumPy sorts NaN last, so |NaN| is 'the largest magnitude'."""
    scores = np.abs(np.array([0.1, np.nan, 0.3]))
    assert np.argsort(scores, kind="stable")[-1] == 1


@pytest.mark.parametrize("which", ["fc", "proj"])
def test_structured_pruning_refuses_nan_units(which):
    mlp = MLP(4, 8, seed=0)
    getattr(mlp, which).weight.data[0, 0] = np.nan
    with pytest.raises(ValueError, match=rf"prune_mlp_units: mlp.{which}.weight holds 1 NaN"):
        prune_mlp_units(mlp, 0.5)
    with pytest.raises(ValueError, match="prune_mlp_units"):
        prune_mlps(Sequential(mlp), 0.5)


def test_distillation_refuses_a_nan_teacher():
    student = Tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    teacher = np.array([[1.0, np.nan, 0.0], [0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match=r"distillation_loss: the teacher's logits hold 1 NaN"):
        distillation_loss(student, teacher, np.array([0, 1]))
    with pytest.raises(ValueError, match="teacher's logits hold 1 NaN"):
        distillation_loss(student, Tensor(teacher), np.array([0, 1]))


@pytest.mark.parametrize("temperature", [float("inf"), float("nan"), 0.0, -1.0, "2", True])
def test_distillation_temperature_must_be_a_finite_positive_number(temperature):
    """T = inf made T²·KL = inf·0 = NaN; a string crashed comparing with 0."""
    student = Tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        distillation_loss(student, np.zeros((2, 3)), np.array([0, 1]), temperature=temperature)


def test_a_nan_student_still_gives_a_nan_loss_as_cross_entropy_does():
    """The student's own logits are the quantity being trained: NaN in, NaN loss out (as PyTorch)."""
    student = Tensor(np.array([[np.nan, 0.0, 0.0], [0.0, 1.0, 2.0]], np.float32), requires_grad=True)
    assert np.isnan(distillation_loss(student, np.zeros((2, 3)), np.array([0, 1])).item())
