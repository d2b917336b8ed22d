"""Issue 31 (reliability round 3), neighbours in module 16: the gradual-pruning schedule's numbers
(final_sparsity nan gave nan, -1 gave a negative 'sparsity', 2.5 gave 0.68) and choose_rank on NaN
singular values (rank 1 in silence)."""
import numpy as np
import pytest

from tinytorch.core.layers import Linear
from tinytorch.perf.compression import choose_rank, cubic_sparsity, prune_gradually, sparsity


@pytest.mark.parametrize("final", [float("nan"), float("inf"), -1.0, 2.5])
def test_cubic_sparsity_refuses_a_final_sparsity_outside_zero_one(final):
    with pytest.raises(ValueError, match=r"cubic_sparsity \(final_sparsity\): .* a number in \[0, 1\]"):
        cubic_sparsity(1, 10, final)


@pytest.mark.parametrize("kwargs, says", [(dict(total_steps=2.5), "total_steps must be a whole number"),
                                          (dict(total_steps=float("inf")), "total_steps must be a whole number"),
                                          (dict(step=float("nan")), "step must be a whole number"),
                                          (dict(initial_sparsity=float("nan")), r"\(initial_sparsity\)")])
def test_cubic_sparsity_other_numbers(kwargs, says):
    args = {**dict(step=1, total_steps=10, final_sparsity=0.5), **kwargs}
    with pytest.raises(ValueError, match=says):
        cubic_sparsity(**args)


def test_prune_gradually_checks_before_pruning_anything():
    layer, tuned = Linear(4, 4, seed=0), []
    with pytest.raises(ValueError, match="final_sparsity"):
        prune_gradually([layer], float("nan"), 3, tuned.append)
    with pytest.raises(ValueError, match="prune_gradually: steps must be"):
        prune_gradually([layer], 0.5, 2.5, tuned.append)
    assert tuned == [] and sparsity(layer) == 0.0


@pytest.mark.parametrize("sigma", [[3.0, float("nan"), 1.0], [float("inf"), 1.0], []])
def test_choose_rank_refuses_non_finite_singular_values(sigma):
    with pytest.raises(ValueError, match="choose_rank: singular values must be finite numbers"):
        choose_rank(sigma, 0.9)
