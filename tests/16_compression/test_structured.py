"""Module 16, section 7: structured pruning of an MLP's hidden units, and of every MLP of a GPT."""
import numpy as np
import pytest

from tinytorch.core.activations import gelu
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import count_parameters
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT, MLP
from tinytorch.perf.compression import mlp_unit_importance, prune_magnitude, prune_mlp_units, prune_mlps


def hidden_of(mlp, x):
    """gelu(fc(x)) as a NumPy array."""
    return gelu(mlp.fc(Tensor(x))).numpy()


def test_importance_is_one_score_per_unit():
    mlp = MLP(4, 6, seed=0, dtype=np.float64)
    importance = mlp_unit_importance(mlp)
    assert importance.shape == (6,), (
        f"one importance per hidden unit: norm of fc.weight's column j (axis 0) times norm of proj.weight's row j "
        f"(axis 1); expected shape (6,), got {importance.shape}")
    assert importance.dtype == np.float64, "importance is float64"


def test_importance_is_the_product_of_in_and_out_norms():
    mlp = MLP(4, 6, seed=0, dtype=np.float64)
    mlp.proj.weight.data[2] = 0.0      # unit 2 writes nothing, however loudly it reads
    mlp.fc.weight.data[:, 2] *= 100.0
    expected = np.linalg.norm(mlp.fc.weight.numpy(), axis=0) * np.linalg.norm(mlp.proj.weight.numpy(), axis=1)
    importance = mlp_unit_importance(mlp)
    assert np.allclose(importance, expected), (
        "importance = ||fc.weight[:, j]|| * ||proj.weight[j, :]||: a unit whose outgoing weights (proj.weight row j) "
        f"are 0 contributes nothing; expected {np.round(expected, 3)}, got {np.round(importance, 3)}")
    assert importance[2] == 0.0, "a unit that writes nothing has importance 0"


def test_pruned_mlp_keeps_the_rows_of_proj():
    mlp = MLP(6, 4, seed=1, dtype=np.float64)  # hidden smaller than embed: rows and columns differ in length
    small = prune_mlp_units(mlp, 0.5)
    assert small.fc.weight.shape == (6, 2) and small.proj.weight.shape == (2, 6), (
        f"fc.weight keeps the COLUMNS of the kept units (E, H'), proj.weight their ROWS (H', E); "
        f"got {small.fc.weight.shape} and {small.proj.weight.shape}")


def test_pruned_mlp_equals_the_old_one_without_the_dropped_units():
    mlp = MLP(4, 6, seed=2, dtype=np.float64)
    mlp.fc.weight.data[:, 4] *= 0.01  # unit 4 reads almost nothing
    mlp.proj.weight.data[1] *= 0.01   # unit 1 writes almost nothing
    small = prune_mlp_units(mlp, 1 / 3)
    assert isinstance(small, MLP) and small is not mlp and small.fc.out_features == 4 and small.proj.in_features == 4, (
        "a new MLP with 4 of the 6 hidden units")
    assert mlp.fc.weight.shape == (4, 6), "prune_mlp_units returns a new MLP and leaves the old one as it was"
    x = np.random.default_rng(3).standard_normal((5, 4))
    h = hidden_of(mlp, x)
    h[:, [1, 4]] = 0.0
    expected = h @ mlp.proj.weight.numpy() + mlp.proj.bias.numpy()
    assert np.allclose(small(Tensor(x)).numpy(), expected, atol=1e-12), (
        "the smaller MLP must equal the old one with the dropped units set to 0: keep fc.weight's columns, fc.bias's "
        "entries and proj.weight's rows of the kept units, in their order")
    assert small.fc.weight.dtype == np.float64 and small.dropout.p == mlp.dropout.p, (
        "the new MLP keeps the dtype and the dropout probability")


def test_settings_are_kept():
    mlp = MLP(8, 32, dropout=0.25, bias=False, seed=4)
    small = prune_mlp_units(mlp, 0.75)
    assert small.fc.bias is None and small.proj.bias is None and small.dropout.p == 0.25, (
        "no biases in, no biases out; the same dropout")
    assert small.fc.weight.dtype == np.float32 and count_parameters(small) == 2 * 8 * 8, (
        "float32 kept; 8 of 32 units: two 8 x 8 weights")
    assert prune_mlp_units(mlp, 0.0).fc.out_features == 32, "amount 0 keeps every unit"
    with pytest.raises(ValueError, match="keep at least one"):
        prune_mlp_units(mlp, 1.0)


def test_a_magnitude_pruned_mlp_is_pruned_by_its_masked_weights():
    mlp = MLP(4, 8, seed=5, dtype=np.float64)
    prune_magnitude(mlp.fc, 0.5)
    small = prune_mlp_units(mlp, 0.5)
    with no_grad():
        masked = mlp.fc.weight.numpy()
    kept = np.sort(np.argsort(mlp_unit_importance(mlp), kind="stable")[4:])
    assert np.array_equal(small.fc.weight.numpy(), masked[:, kept]) and type(small.fc).__name__ == "Linear", (
        "a magnitude-pruned fc is read through its mask; the new MLP has plain Linears")


def test_prune_mlps_on_a_gpt():
    model = GPT(11, 16, 2, 2, 8, seed=6, dtype=np.float64)
    small = prune_mlps(model, 0.5)
    assert all(block.mlp.fc.out_features == 64 for block in model.blocks), "the original model is untouched"
    assert all(block.mlp.fc.out_features == 32 for block in small.blocks), "every block's MLP has half its 64 units"
    assert count_parameters(model) - count_parameters(small) == 2 * (2 * 16 * 32 + 32), (
        "each of 2 blocks loses 32 units: 2·16·32 weights and 32 biases")
    idx = np.random.default_rng(7).integers(0, 11, (2, 8))
    # the same model, with the dropped units zeroed by hand, gives the same logits
    zeroed = prune_mlps(model, 0.0)
    for block, pruned in zip(zeroed.blocks, small.blocks):
        kept = np.sort(np.argsort(mlp_unit_importance(block.mlp), kind="stable")[32:])
        drop = np.setdiff1d(np.arange(64), kept)
        block.mlp.proj.weight.data[drop] = 0.0
    with no_grad():
        assert np.allclose(small(idx)[0].numpy(), zeroed(idx)[0].numpy(), atol=1e-12), (
            "the pruned GPT equals the original with the dropped units' outputs zeroed")
    with pytest.raises(ValueError, match="no MLP"):
        prune_mlps(MLP(2, 2).fc, 0.5)
