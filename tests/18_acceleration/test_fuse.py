"""Module 18, section 3: FusedMLP and fuse(model, FUSED_REPLACEMENTS) (the NumPy fusions): a new model,
the same weight tensors, the same values and gradients as module 13's GPT, with bias_gelu in every MLP."""
import numpy as np
import pytest

from tinytorch.core.activations import relu
from tinytorch.core.autograd import topological_order
from tinytorch.core.layers import Linear
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import load_checkpoint, save_checkpoint
from tinytorch.models.transformer import GPT, MLP
from tinytorch.perf.acceleration import FUSED_REPLACEMENTS, FusedMLP, fuse


def ops_of(tensor):
    return [t._node.op for t in topological_order(tensor) if t._node is not None]


def batch(vocab=11, shape=(2, 6), seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, shape), rng.integers(0, vocab, shape)


def test_fuse_returns_a_new_model_and_leaves_the_original():
    model = GPT(11, 8, 2, 2, 6, seed=0)
    fused = fuse(model, FUSED_REPLACEMENTS)
    assert fused is not model, "fuse must return a NEW model (copy.deepcopy), not change the one it is given"
    assert all(type(b.mlp) is MLP for b in model.blocks), "the original's MLPs must stay module 13's MLP"
    assert all(type(b.mlp) is FusedMLP for b in fused.blocks), "every MLP of the copy must become a FusedMLP"


def test_weights_are_shared_with_the_same_names():
    model = GPT(11, 8, 2, 2, 6, seed=0)
    fused = fuse(model, FUSED_REPLACEMENTS)
    assert [n for n, _ in fused.named_parameters()] == [n for n, _ in model.named_parameters()], \
        "the fused model must keep the parameter names (FusedMLP registers fc, proj, dropout)"
    copies = sum(p is not q for p, q in zip(model.parameters(), fused.parameters()))
    assert copies == 0, (f"{copies} parameter(s) are copies: share the weight tensors (memo = {{id(p): p}} "
                         "in copy.deepcopy)")
    assert fused.token_embedding.weight is model.token_embedding.weight, "the tied head must stay tied"


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_same_logits_loss_and_gradients(bias):
    model = GPT(11, 8, 2, 2, 6, bias=bias, seed=1, dtype=np.float64)
    for block in model.blocks:  # non-zero biases, so a forgotten bias shows
        if block.mlp.fc.bias is not None:
            block.mlp.fc.bias.data = np.linspace(-1, 1, block.mlp.fc.bias.size)
    fused = fuse(model, FUSED_REPLACEMENTS)
    x, y = batch()
    logits, loss = model(x, targets=y)
    flogits, floss = fused(x, targets=y)
    ops = ops_of(floss)
    assert "gelu" not in ops and ops.count("bias_gelu") == 2, \
        f"each of the 2 MLPs must record one bias_gelu and no gelu; ops: {sorted(set(ops))}"
    if bias:
        assert ops.count("add") < ops_of(loss).count("add"), \
            "fc's bias must go into bias_gelu, not through a separate add (rows @ fc.weight, then bias_gelu)"
    assert np.allclose(flogits.numpy(), logits.numpy(), rtol=1e-12, atol=1e-12), \
        "the fused model's logits differ: FusedMLP must compute dropout(proj(gelu(rows @ fc.weight + fc.bias)))"
    loss.backward()
    expected = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    floss.backward()
    for (name, p), g in zip(fused.named_parameters(), expected):
        assert np.allclose(p.grad.numpy(), g, rtol=1e-10, atol=1e-12), f"gradient of {name} differs"


def test_dropout_masks_follow_the_same_generator_state():
    model = GPT(11, 8, 1, 2, 6, dropout=0.3, seed=2, dtype=np.float64)
    fused = fuse(model, FUSED_REPLACEMENTS)
    x, y = batch(seed=3)
    _, loss = model(x, targets=y)
    _, floss = fused(x, targets=y)
    assert np.isclose(loss.item(), floss.item(), rtol=1e-12), \
        "with dropout, the fused copy must draw the same masks (its generators are copies in the same state)"


def test_training_the_fused_model_trains_the_original(tmp_path):
    model = GPT(11, 8, 1, 2, 6, seed=4)
    fused = fuse(model, FUSED_REPLACEMENTS)
    optimizer = AdamW(fused.parameters(), lr=1e-2)
    x, y = batch(seed=5)
    before = model.blocks[0].mlp.fc.weight.numpy().copy()
    _, loss = fused(x, targets=y)
    loss.backward()
    optimizer.step()
    assert not np.array_equal(model.blocks[0].mlp.fc.weight.numpy(), before), \
        "an optimizer over the fused model must update the original's weights (they are the same tensors)"
    save_checkpoint(tmp_path / "m.npz", model)
    other = GPT(11, 8, 1, 2, 6, seed=9)
    load_checkpoint(tmp_path / "m.npz", other)
    assert np.array_equal(other.blocks[0].mlp.fc.weight.numpy(), model.blocks[0].mlp.fc.weight.numpy())


def test_a_lone_mlp_and_other_models():
    mlp = MLP(4, 8, seed=0)
    fused = fuse(mlp, FUSED_REPLACEMENTS)
    assert isinstance(fused, FusedMLP) and fused.fc.weight is mlp.fc.weight, \
        "a model that is itself an MLP comes back as a FusedMLP with the same weights"
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert np.allclose(fused(x).numpy(), mlp(x).numpy(), atol=1e-6)
    linear = Linear(3, 2, seed=0)
    assert isinstance(fuse(linear, FUSED_REPLACEMENTS), Linear), "a model without an MLP comes back as a copy, unchanged"
    with pytest.raises(TypeError, match="needs a Module"):
        fuse(lambda t: t)


class ReluMLP(MLP):
    """A subclass of MLP that computes something else (ReLU): fuse must leave it alone."""

    def forward(self, x):
        return self.proj(relu(self.fc(x)))


def test_a_subclass_of_mlp_is_not_replaced():
    mlp = ReluMLP(4, 8, seed=0)
    fused = fuse(mlp, FUSED_REPLACEMENTS)
    assert type(fused) is ReluMLP, (
        f"fuse replaced a subclass of MLP by {type(fused).__name__}: look each module's type up EXACTLY "
        "(type(module) in replacements), not with isinstance: a subclass may compute something else")
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    assert np.array_equal(fused(x).numpy(), mlp(x).numpy()), "the subclass's own forward (ReLU) must be kept"


def test_generation_still_works():
    model = GPT(11, 8, 1, 2, 16, seed=6)
    fused = fuse(model, FUSED_REPLACEMENTS)
    prompt = np.array([[1, 2, 3]])
    assert np.array_equal(fused.generate(prompt, 5, seed=0).numpy(), model.generate(prompt, 5, seed=0).numpy()), \
        "the fused model must generate the same tokens as the original (same weights, same ops' values)"
