"""Module 16, sections 2-5: magnitude masks, the weight_orig * weight_mask reparametrisation, global
pruning, sparsity and the cubic schedule. Everything is built inside the tests (never at import time)."""
import copy

import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.optimizers import SGD, AdamW
from tinytorch.core.spatial import Conv2d
from tinytorch.core.tensor import Tensor
from tinytorch.perf.compression import (apply_mask, cubic_sparsity, magnitude_mask, masked_weight, prunable_layers,
                                        prune_global, prune_gradually, prune_magnitude, pruned_names, remove_pruning,
                                        sparsity)


# ---- magnitude_mask ------------------------------------------------------------------------------
def test_mask_prunes_smallest_absolute_values():
    w = np.array([[0.5, -0.1, 0.9], [-0.7, 0.05, -0.3]])
    got = magnitude_mask(w, 0.5)
    expected = np.array([[True, False, True], [True, False, False]])
    assert got.dtype == bool and got.shape == w.shape, f"a bool mask of the weights' shape, got {got.dtype} {got.shape}"
    assert np.array_equal(got, expected), (
        f"prune the entries of smallest ABSOLUTE value: expected\n{expected}\ngot\n{got}\n"
        "(sorting the signed values prunes the most negative weights, the large ones)")


@pytest.mark.parametrize("size,amount", [(10, 0.27), (8, 0.3125), (7, 0.5), (100, 0.905), (5, 0.0), (5, 1.0)],
                         ids=lambda v: str(v))
def test_mask_counts_with_round(size, amount):
    w = np.random.default_rng(size).permutation(np.arange(1.0, size + 1))
    pruned = int((~magnitude_mask(w, amount)).sum())
    assert pruned == round(amount * size), (
        f"prune round(amount * size) = {round(amount * size)} of {size} entries (Python's round, as torch counts), "
        f"got {pruned}")
    assert np.array_equal(np.sort(w[~magnitude_mask(w, amount)]), np.arange(1.0, pruned + 1)), (
        "the pruned entries are the smallest ones")


def test_mask_keeps_earlier_pruning():
    w = np.random.default_rng(0).standard_normal((4, 5))
    first = magnitude_mask(w, 0.5)
    again = magnitude_mask(np.ones_like(w), 0.2, keep=first)
    assert np.array_equal(again, first), "a pruned weight stays pruned, even when amount is smaller than before"
    more = magnitude_mask(np.where(first, w, 0.0), 0.75, keep=first)
    assert (~more).sum() == 15 and not (more & ~first).any(), "already-pruned weights count towards the total"
    # an already-pruned weight counts first even when its (stale) value is large
    stale = np.where(first, w, 100.0)
    assert np.array_equal(magnitude_mask(stale, 0.5, keep=first), first), (
        "entries pruned before are counted first (score them below every magnitude), whatever value they hold")


def test_mask_ties_and_shapes():
    assert np.array_equal(magnitude_mask(np.ones(4), 0.5), [False, False, True, True]), "ties: first in C order goes"
    ties = np.round(np.random.default_rng(0).standard_normal((10, 20)), 1)  # many equal magnitudes
    for amount in (0.37, 0.5, 0.81):
        first_in_c_order = np.argsort(np.abs(ties), axis=None, kind="stable")[:round(amount * ties.size)]
        expected = ~np.isin(np.arange(ties.size), first_in_c_order).reshape(ties.shape)
        assert np.array_equal(magnitude_mask(ties, amount), expected), (
            f"ties at the threshold (amount {amount}): the entry first in C order is pruned first; sort with "
            "np.argsort(..., kind=\"stable\") (the default quicksort puts equal values in no particular order)")
    w3 = np.random.default_rng(1).standard_normal((2, 3, 4))
    assert magnitude_mask(w3, 0.25).shape == (2, 3, 4) and (~magnitude_mask(w3, 0.25)).sum() == 6, (
        "a mask of any shape: 6 of 24 entries pruned at 0.25")


@pytest.mark.parametrize("amount", [-0.1, 1.5, "half", None, True])
def test_amount_must_be_a_fraction(amount):
    with pytest.raises(ValueError, match="fraction"):
        magnitude_mask(np.ones(3), amount)
    with pytest.raises(ValueError, match="fraction"):
        prune_magnitude(Linear(2, 2), amount)


# ---- the reparametrisation -------------------------------------------------------------------------
def test_pruned_weights_get_gradient_zero():
    layer = Linear(5, 4, seed=0, dtype=np.float64)
    W = layer.weight.numpy().copy()
    prune_magnitude(layer, 0.5)
    mask = magnitude_mask(W, 0.5)
    x = np.random.default_rng(1).standard_normal((3, 5))
    out = layer(Tensor(x))
    assert np.allclose(out.numpy(), x @ (W * mask) + layer.bias.numpy(), atol=1e-12), \
        "the forward must use weight_orig * weight_mask"
    out.sum().backward()
    grad = layer.weight_orig.grad.numpy()
    assert np.all(grad[~mask] == 0), (
        "pruned weights get gradient 0: the mask must be applied in the forward as a recorded multiply "
        "(weight_orig * weight_mask), not written into the weights once")
    assert np.allclose(grad[mask], np.broadcast_to(x.sum(0)[:, None], W.shape)[mask]), (
        "kept weights get the ordinary gradient x^T · grad")
    assert np.array_equal(layer.weight_orig.numpy(), W), "pruning keeps the original values in weight_orig"


def test_parameter_moves_to_weight_orig_and_mask_is_a_buffer():
    layer = Linear(3, 2, seed=1)
    original = layer.weight
    prune_magnitude(layer, 0.5)
    names = [n for n, _ in layer.named_parameters()]
    assert names == ["bias", "weight_orig"] and layer.weight_orig is original, (
        f"the parameter moves to weight_orig (the SAME Tensor object, so an optimizer made before pruning still "
        f"updates it), got parameters {names}")
    assert list(layer.state_dict()) == ["bias", "weight_orig", "weight_mask"], (
        "register the mask with register_buffer: it must be in the state_dict (a saved pruned model would come back "
        f"unpruned); state_dict keys: {list(layer.state_dict())}")
    assert [n for n, _ in layer.named_buffers()] == ["weight_mask"], "the mask is the one buffer"
    assert layer.weight_mask.dtype == np.float32 and not layer.weight_mask.requires_grad, (
        "the mask is in the weight's dtype and takes no gradient")
    assert set(np.unique(layer.weight_mask.numpy())) == {0.0, 1.0}, "the mask holds 0s and 1s"
    assert isinstance(layer, Linear) and type(layer).__name__ == "PrunedLinear" and pruned_names(layer) == ("weight",), (
        f"the pruned layer is a PrunedLinear, still a Linear; got {type(layer).__name__}")
    assert type(Linear(3, 2)) is Linear, "only the pruned layer changes class"


def test_masked_weight_is_one_recorded_mul():
    layer = prune_magnitude(Linear(4, 3, seed=2), 0.5)
    w = masked_weight(layer)
    assert w._node is not None and w._node.op == "mul", "masked_weight records one 'mul'"
    assert w._node.inputs[0] is layer.weight_orig and w._node.inputs[1] is layer.weight_mask, \
        "mul's inputs are (weight_orig, weight_mask), in that order"
    with no_grad():
        assert np.array_equal(layer.weight.numpy(), layer.weight_orig.numpy() * layer.weight_mask.numpy()), (
            "the weight the layer uses is weight_orig * weight_mask")


def test_optimizer_made_before_pruning_keeps_pruned_weights_at_zero():
    model = Sequential(Linear(6, 8, seed=3), ReLU(), Linear(8, 3, seed=4))
    optimizer = AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    x, y = Tensor(np.random.default_rng(5).standard_normal((16, 6)).astype(np.float32)), np.arange(16) % 3
    from tinytorch.core.losses import cross_entropy

    def step():
        optimizer.zero_grad()
        cross_entropy(model(x), y).backward()
        optimizer.step()

    step()  # Adam's moments now hold every weight's gradient
    prune_global(prunable_layers(model), 0.6)
    before = [layer.weight_orig.numpy().copy() for layer in prunable_layers(model)]
    for _ in range(5):
        step()
    for layer, old in zip(prunable_layers(model), before):
        pruned = layer.weight_mask.numpy() == 0
        with no_grad():
            assert np.all(layer.weight.numpy()[pruned] == 0), "the weights the forward uses stay 0 under AdamW"
        assert not np.array_equal(layer.weight_orig.numpy()[~pruned], old[~pruned]), (
            "the optimizer still trains the rest")


def test_pruning_again_and_state_dict_round_trip():
    layer = Linear(6, 5, seed=6, dtype=np.float64)
    prune_magnitude(layer, 0.3)
    first = layer.weight_mask.numpy().copy()
    prune_magnitude(layer, 0.6)
    second = layer.weight_mask.numpy()
    assert (second == 0).sum() == 18 and not (second > first).any(), (
        "pruning again to 60% prunes 18 of 30 entries and keeps the first ones pruned")
    prune_magnitude(layer, 0.1)
    assert (layer.weight_mask.numpy() == 0).sum() == 18, "a smaller amount never un-prunes"
    fresh = prune_magnitude(Linear(6, 5, seed=7, dtype=np.float64), 0.0)
    fresh.load_state_dict(layer.state_dict())
    x = Tensor(np.random.default_rng(8).standard_normal((2, 6)))
    assert np.array_equal(fresh(x).numpy(), layer(x).numpy()), "a pruned model's state_dict restores weights and mask"
    with pytest.raises(KeyError):
        Linear(6, 5).load_state_dict(layer.state_dict())  # as in PyTorch: prune the model first, then load


def test_assigning_a_pruned_weight_is_refused_and_copies_work():
    layer = prune_magnitude(Linear(3, 3, seed=9), 0.5)
    with pytest.raises(AttributeError, match="weight_orig"):
        layer.weight = Tensor(np.zeros((3, 3)), requires_grad=True)
    twin = copy.deepcopy(layer)
    assert type(twin) is type(layer) and twin.weight_mask is not layer.weight_mask, (
        "a deep copy is pruned too, with its own mask")
    x = Tensor(np.ones((1, 3), np.float32))
    assert np.array_equal(twin(x).numpy(), layer(x).numpy()), "a deep copy computes the same outputs"


def test_remove_pruning_makes_it_permanent():
    layer = Linear(4, 4, seed=10)
    original = layer.weight
    prune_magnitude(layer, 0.5)
    with no_grad():
        effective = layer.weight.numpy().copy()
    remove_pruning(layer)
    assert type(layer) is Linear and layer.weight is original and np.array_equal(layer.weight.numpy(), effective), (
        "remove_pruning: a plain Linear again, the same weight Tensor, holding orig * mask")
    names = [n for n, _ in layer.named_parameters()]
    assert names == ["bias", "weight"] and list(layer.state_dict()) == names, (
        "remove_pruning: weight_orig and weight_mask are gone")
    with pytest.raises(ValueError, match="not pruned"):
        remove_pruning(layer)


def test_other_layers_and_names():
    conv = Conv2d(2, 3, 3, seed=11, dtype=np.float64)
    prune_magnitude(conv, 0.4)
    assert conv.weight_mask.shape == (3, 2, 3, 3) and (conv.weight_mask.numpy() == 0).sum() == round(0.4 * 54), (
        "a Conv2d weight is pruned like a Linear one")
    x = Tensor(np.random.default_rng(12).standard_normal((1, 2, 5, 5)))
    conv(x).sum().backward()
    assert np.all(conv.weight_orig.grad.numpy()[conv.weight_mask.numpy() == 0] == 0), (
        "a pruned Conv2d weight gets gradient 0 where pruned")
    layer = Linear(3, 4, seed=13)
    prune_magnitude(layer, 0.5, name="bias")
    prune_magnitude(layer, 0.5, name="weight")
    assert pruned_names(layer) == ("bias", "weight") and (layer.bias_mask.numpy() == 0).sum() == 2, (
        f"bias and weight pruned one after the other: pruned_names(layer) is {pruned_names(layer)}"
        + (": pruning the weight forgot that the bias was pruned. The class must list every pruned name: "
           "_pruned_class(_unpruned_class(module), pruned_names(module) + (name,))"
           if pruned_names(layer) == ("weight",) else ""))
    remove_pruning(layer, "bias")
    assert pruned_names(layer) == ("weight",) and "bias" in dict(layer.named_parameters()), (
        "removing the bias's pruning keeps the weight's")
    with pytest.raises(ValueError, match="no parameter named 'scale'"):
        prune_magnitude(Linear(2, 2), 0.5, name="scale")
    with pytest.raises(TypeError):
        prune_magnitude(np.ones((2, 2)), 0.5)
    with pytest.raises(ValueError, match="shape"):
        apply_mask(Linear(2, 3), np.ones((3, 2)))


# ---- global pruning, sparsity ----------------------------------------------------------------------
def test_global_pruning_uses_one_threshold():
    small, large = Linear(6, 5, seed=0, dtype=np.float64), Linear(4, 3, seed=1, dtype=np.float64)
    small.weight.data = small.weight.data * 0.01
    prune_global([small, large], 0.5)
    pruned_small = int((small.weight_mask.numpy() == 0).sum())
    assert pruned_small == 21, (
        f"one threshold over all layers together: the 21 smallest of the 42 weights are all in the layer of tiny "
        f"weights, got {pruned_small} pruned there (a threshold per layer prunes half of each)")
    everything = np.concatenate([small.weight_orig.numpy().ravel(), large.weight_orig.numpy().ravel()])
    masks = np.concatenate([small.weight_mask.numpy().ravel(), large.weight_mask.numpy().ravel()]) == 1
    assert np.array_equal(masks, magnitude_mask(everything, 0.5)), (
        "the masks together equal magnitude_mask of all weights concatenated")


def test_global_pruning_again_keeps_each_layers_mask():
    layers = [Linear(5, 5, seed=s, dtype=np.float64) for s in range(3)]
    prune_magnitude(layers[1], 0.8)  # one layer pruned on its own first
    before = layers[1].weight_mask.numpy().copy()
    prune_global(layers, 0.5)
    assert not (layers[1].weight_mask.numpy() > before).any(), "a pruned weight stays pruned"
    assert sum(int((layer.weight_mask.numpy() == 0).sum()) for layer in layers) == round(0.5 * 75), (
        "half of all 75 weights pruned, round(0.5 * 75) of them")
    with pytest.raises(ValueError, match="no modules"):
        prune_global([], 0.5)


def test_sparsity_counts_all_weights_together():
    model = Sequential(Linear(10, 10, seed=2), ReLU(), Linear(10, 2, seed=3))
    assert sparsity(model) == 0.0, "a fresh model has sparsity 0"
    prune_magnitude(model[2], 0.5)
    assert abs(sparsity(model) - 10 / 120) < 1e-12, (
        f"sparsity: zeros over all prunable weights together, not the mean of the layers' sparsities; "
        f"expected {10 / 120:.4f}, got {sparsity(model):.4f}")
    assert isinstance(sparsity(model), float), "sparsity returns a Python float"
    assert prunable_layers(model) == [model[0], model[2]] and abs(sparsity([model[2]]) - 0.5) < 1e-12, (
        "prunable_layers: the Linear layers; sparsity of a list of layers")
    with pytest.raises(ValueError, match="no Linear"):
        sparsity(Sequential(ReLU()))


# ---- the schedule ------------------------------------------------------------------------------------------
def test_cubic_schedule():
    got = [cubic_sparsity(t, 4, 0.9) for t in range(5)]
    expected = [0.9 - 0.9 * (1 - t / 4) ** 3 for t in range(5)]
    assert np.allclose(got, expected), (
        f"s_t = s_f + (s_i - s_f)(1 - t/n)^3: from s_i at t = 0 to s_f at t = n, fast at first; "
        f"expected {np.round(expected, 4)}, got {np.round(got, 4)}")
    assert cubic_sparsity(0, 4, 0.9) == 0.0 and cubic_sparsity(4, 4, 0.9) == 0.9, "s_i at step 0, s_f at step n"
    assert cubic_sparsity(9, 4, 0.9) == 0.9 and cubic_sparsity(-1, 4, 0.9) == 0.0, (
        "clamped: s_f after step n, s_i before step 0")
    assert abs(cubic_sparsity(1, 2, 0.8, initial_sparsity=0.4) - (0.8 - 0.4 / 8)) < 1e-12, (
        "with initial_sparsity 0.4: 0.8 + (0.4 - 0.8)(1/2)^3 at step 1 of 2")
    with pytest.raises(ValueError):
        cubic_sparsity(1, 0, 0.5)


def test_prune_gradually_follows_the_schedule():
    layers = [Linear(8, 8, seed=s) for s in range(2)]
    seen = []
    targets = prune_gradually(layers, 0.75, 3, fine_tune=lambda step: seen.append((step, sparsity(layers))))
    assert targets == [cubic_sparsity(t, 3, 0.75) for t in (1, 2, 3)], "prune_gradually returns the schedule's targets"
    assert [step for step, _ in seen] == [1, 2, 3], "fine_tune is called after every pruning step"
    assert all(abs(s - round(t * 128) / 128) < 1e-12 for (_, s), t in zip(seen, targets)), (
        "each step reaches its target sparsity before fine-tuning")


def test_sgd_step_keeps_zeros():
    layer = prune_magnitude(Linear(4, 4, seed=14), 0.5)
    optimizer = SGD(layer.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        layer(Tensor(np.ones((2, 4), np.float32))).sum().backward()
        optimizer.step()
    with no_grad():
        assert np.all(layer.weight.numpy()[layer.weight_mask.numpy() == 0] == 0), (
            "pruned weights stay 0 under SGD with momentum and weight decay")
