"""Module 17, sections 3-4: checkpoint (one recorded op, recomputed in backward) and checkpoint_blocks.

Gradients are compared with np.array_equal: recomputing runs the same operations on the same
numbers, so the checkpointed gradients must be bit-identical to the plain call's.
Everything is built inside the tests (never at import time).
"""
import numpy as np
import pytest

from tinytorch.core.activations import gelu
from tinytorch.core.autograd import BACKWARD_RULES, gradcheck, no_grad, topological_order
from tinytorch.core.layers import Dropout, Linear, Module
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT, TransformerBlock
from tinytorch.perf.memory import (AUTOCAST_SETTING, GLOBAL_NUMPY_RANDOM, CheckpointedBlock, checkpoint, checkpoint_blocks,
                                   generators_kept, random_generators)


class Piece(Module):
    """x -> dropout(gelu(x @ W1 + b1)) @ W2 + b2 + x."""

    def __init__(self, width=6, p=0.3, seed=0, dtype=np.float32):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc = Linear(width, 3 * width, rng=rng, dtype=dtype)
        self.proj = Linear(3 * width, width, rng=rng, dtype=dtype)
        self.drop = Dropout(p, rng=rng)

    def forward(self, x):
        return self.proj(self.drop(gelu(self.fc(x)))) + x


def piece_gradients(piece, x, use_checkpoint, **kwargs):
    piece.zero_grad()
    xt = Tensor(x, requires_grad=True)
    out = checkpoint(piece, xt, **kwargs) if use_checkpoint else piece(xt)
    (out * out).sum().backward()
    return [xt.grad.numpy()] + [p.grad.numpy() for p in piece.parameters()]


def x_of(shape=(2, 4, 6), seed=1, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- the forward: the value, one op, nothing else kept ---------------------------------------------
def test_value_equals_the_plain_call():
    piece, x = Piece(), x_of()
    with generators_kept(random_generators(piece)):
        plain = piece(Tensor(x)).numpy()
    assert np.array_equal(checkpoint(piece, Tensor(x, requires_grad=True)).numpy(), plain), \
        "checkpoint(fn, x) must return the value of fn(x)"


def test_records_one_op_and_keeps_only_the_inputs():
    piece = Piece()
    x = Tensor(x_of(), requires_grad=True)
    out = checkpoint(piece, x)
    assert out._node is not None and out._node.op == "checkpoint", "checkpoint records ONE op named 'checkpoint'"
    behind = [t for t in topological_order(out) if t is not out]
    assert all(t._node is None for t in behind), (
        "the forward kept intermediate results (the graph behind the output has other ops): run fn under "
        "no_grad() so only the inputs are kept")
    assert out._node.inputs[0] is x, "node.inputs starts with the tensor arguments, in order"


def test_parameters_are_inputs_of_the_op():
    piece = Piece()
    out = checkpoint(piece, Tensor(x_of(), requires_grad=True))
    params = piece.parameters()
    assert len(out._node.inputs) == 1 + len(params) and all(a is b for a, b in zip(out._node.inputs[1:], params)), (
        "node.inputs must be the tensor arguments followed by fn's parameters (so the rule can return their "
        "gradients): the weights of a checkpointed Module are inputs of the op")
    saved = out._node.saved
    assert saved["num_args"] == 1 and saved["fn"] is piece and len(saved["args"]) == 1
    assert [g for g, _ in saved["rng_states"]] == random_generators(piece) + [GLOBAL_NUMPY_RANDOM, AUTOCAST_SETTING], \
        "rng_states: one (generator, state) pair per generator fn uses, then NumPy's global one and autocast's switch"


def test_rng_state_saved_before_fn_runs():
    piece = Piece()
    generator = random_generators(piece)[0]
    before = generator.bit_generator.state
    out = checkpoint(piece, Tensor(x_of(), requires_grad=True))
    assert out._node.saved["rng_states"][0][1] == before, \
        "save each generator's state BEFORE running fn (after it, the recomputation would draw other masks)"


def test_fn_runs_with_recording_off_in_the_forward():
    from tinytorch.core.tensor import GradMode

    piece, modes = Piece(p=0.0), []

    def fn(x):
        modes.append(GradMode.enabled)
        return piece(x)
    out = checkpoint(fn, Tensor(x_of(), requires_grad=True), params=piece)
    assert modes == [False], (
        "the forward ran fn with recording on: it built the whole graph of fn (all its activations) just to "
        "drop it; run fn under no_grad() so only the inputs are kept")
    out.sum().backward()
    assert modes == [False, True], "the backward rule runs fn once more, with recording on"


# ---- the backward: bit-identical gradients ------------------------------------------------------------
def test_recomputes_on_detached_copies():
    """The small backward must stop at copies of fn's tensor arguments, never run on into the real graph."""
    piece, x = Piece(p=0.0), x_of()
    plain = piece_gradients(piece, x, use_checkpoint=False)
    ours = piece_gradients(piece, x, use_checkpoint=True)
    assert np.array_equal(ours[0], plain[0]), (
        f"the gradient of the input x differs (ratio {np.median(ours[0] / plain[0]):.2f} to the plain call's): it "
        "is counted twice when the rule recomputes on x itself. Recompute fn on DETACHED copies, "
        "Tensor(x.data, requires_grad=x.requires_grad), and return the copies' gradients")
    w = Tensor(np.float32(1.5), requires_grad=True)
    xt = Tensor(x, requires_grad=True)
    (checkpoint(piece, xt * w) ** 2).sum().backward()
    ours = (xt.grad.numpy(), w.grad.numpy())
    xt2, w2 = Tensor(x, requires_grad=True), Tensor(np.float32(1.5), requires_grad=True)
    piece.zero_grad()
    (piece(xt2 * w2) ** 2).sum().backward()
    assert np.array_equal(ours[0], xt2.grad.numpy()) and np.array_equal(ours[1], w2.grad.numpy()), \
        "the gradients of tensors BEFORE the checkpoint are wrong: recompute fn on detached copies"


def test_an_argument_that_needs_no_gradient_gets_none():
    """A copy keeps its original's requires_grad: the rule computes no gradient nobody asked for."""
    piece = Piece(p=0.0)
    x = Tensor(x_of())  # needs no gradient; the piece's weights do, so the op is recorded
    out = checkpoint(piece, x)
    grads = BACKWARD_RULES["checkpoint"](np.ones(out.shape, np.float32), out._node)
    assert grads[0] is None, (
        f"x does not require a gradient, yet the rule returned one for it (shape {np.shape(grads[0])}): make each "
        "copy with the original's requires_grad, Tensor(x.data, requires_grad=x.requires_grad); a copy that "
        "requires a gradient makes the small backward compute one for nothing (an attention mask, a constant)")
    assert all(g is not None for g in grads[1:]), "the weights do require gradients: the rule returns them"


@pytest.mark.parametrize("p", [0.0, 0.3], ids=["no dropout", "dropout 0.3"])
def test_gradients_identical_to_the_plain_call(p):
    piece, x = Piece(p=p), x_of()
    names = ["x"] + [name for name, _ in piece.named_parameters()]
    with generators_kept(random_generators(piece)):
        plain = piece_gradients(piece, x, use_checkpoint=False)
    ours = piece_gradients(piece, x, use_checkpoint=True)
    for name, a, b in zip(names, plain, ours):
        assert np.array_equal(a, b), (
            f"the gradient of {name} differs from the plain call (max |diff| {np.abs(a - b).max():.2e}): restore "
            "the saved generator states before recomputing, so dropout draws the same mask; hand each gradient "
            "back once (set the parameters' .grad aside during the small backward)")


def test_weights_get_their_gradient_once():
    piece, x = Piece(p=0.0), x_of()
    plain = piece_gradients(piece, x, use_checkpoint=False)
    for p in piece.parameters():  # gradients already there from an earlier backward accumulate as usual
        p.grad = Tensor(np.ones(p.shape, np.float32))
    xt = Tensor(x, requires_grad=True)
    out = checkpoint(piece, xt)
    (out * out).sum().backward()
    for (name, p), g in zip(piece.named_parameters(), plain[1:]):
        assert np.allclose(p.grad.numpy(), g + 1, rtol=1e-6, atol=1e-6), (
            f"{name}: expected the earlier gradient (1) plus this backward's, once: the small backward must "
            "not write into the real .grad (set it aside, read the result, put it back) and the rule returns it")


def test_backward_under_no_grad_still_recomputes():
    piece, x = Piece(p=0.0), x_of()
    plain = piece_gradients(piece, x, use_checkpoint=False)
    piece.zero_grad()
    xt = Tensor(x, requires_grad=True)
    loss = (checkpoint(piece, xt) ** 2).sum()
    with no_grad():
        loss.backward()
    assert np.array_equal(xt.grad.numpy(), plain[0]), \
        "the recomputation must record its graph even when backward() runs with recording off: use enable_grad()"


def test_generators_put_back_after_recomputing():
    piece = Piece(p=0.5)
    generator = random_generators(piece)[0]
    xt = Tensor(x_of(), requires_grad=True)
    out = checkpoint(piece, xt)
    generator.random(7)  # the program draws more before backward
    now = generator.bit_generator.state
    (out * out).sum().backward()
    assert generator.bit_generator.state == now, (
        "after recomputing, put each generator back to the state it had before the rule ran (the rest of "
        "training must draw what it would have drawn without checkpointing)")


def test_gradcheck_float64():
    piece = Piece(width=3, p=0.0, seed=4, dtype=np.float64)
    x = Tensor(np.random.default_rng(5).standard_normal((2, 3)), requires_grad=True)
    assert gradcheck(lambda x: checkpoint(piece, x), [x])
    w = Tensor(np.random.default_rng(6).standard_normal((3, 3)), requires_grad=True)
    assert gradcheck(lambda x, w: checkpoint(lambda a, b: (a @ b).exp(), x, w), [x, w])


# ---- functions, params and arguments -------------------------------------------------------------------
def test_plain_function_with_params():
    rng = np.random.default_rng(7)
    w = Tensor(rng.standard_normal((4, 4)), requires_grad=True)
    x = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    (checkpoint(lambda a: gelu(a @ w), x, params=[w]) ** 2).sum().backward()
    ours = (x.grad.numpy(), w.grad.numpy())
    x.grad = w.grad = None
    (gelu(x @ w) ** 2).sum().backward()
    assert np.array_equal(ours[0], x.grad.numpy()) and np.array_equal(ours[1], w.grad.numpy())


def test_weight_from_a_closure_becomes_an_input():
    """As torch.utils.checkpoint: a weight read from a closure gets its gradient (issue 31; it was refused)."""
    rng = np.random.default_rng(8)
    w = Tensor(rng.standard_normal((4, 4)), requires_grad=True)
    x = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    out = checkpoint(lambda a: a @ w, x)  # w is read but not passed
    assert len(out._node.inputs) == 2 and out._node.inputs[1] is w, (
        f"checkpoint(lambda a: a @ w, x): node.inputs must be (x, w), got {len(out._node.inputs)} input(s): w, read "
        "from the closure, is a parameter too: parameters = [*parameters, *read] (what tensors_read found)")
    (out * out).sum().backward()
    assert np.array_equal(w.grad.numpy(), x.data.T @ (2 * (x.data @ w.data)))


def test_a_weight_read_only_when_recomputing_is_refused():
    """The listener can only see what the forward read: a tensor read for the first time in the
    recomputation would lose its gradient, and is still refused."""
    rng = np.random.default_rng(8)
    w = Tensor(rng.standard_normal((4, 4)), requires_grad=True)
    x = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    calls = []

    def fn(a):
        calls.append(1)
        return a @ w if len(calls) > 1 else a @ Tensor(w.data)
    out = checkpoint(fn, x)
    with pytest.raises(RuntimeError, match="neither its inputs nor its params"):
        out.sum().backward()


def test_non_tensor_arguments_reach_the_recomputation():
    piece = Piece(p=0.0, dtype=np.float64)
    x = x_of(dtype=np.float64)

    def scaled(z, factor, shift):  # the Tensor first, then two plain numbers the recomputation needs as well
        return piece(z) * factor + shift

    xt = Tensor(x, requires_grad=True)
    out = checkpoint(scaled, xt, 3.0, 0.5, params=piece)
    args, num_args = out._node.saved.get("args"), out._node.saved.get("num_args")
    assert isinstance(args, tuple) and len(args) == 3 and args[1:] == (3.0, 0.5), (
        f"saved args must be the inputs as given, (x, 3.0, 0.5), non-Tensors included: the rule calls fn(*args) "
        f"again; got {args!r}")
    assert num_args == 1, (
        f"num_args counts the Tensor arguments only: 1 here (x), of 3 arguments; got {num_args}. node.inputs holds "
        "the Tensor arguments first, then the parameters, and the rule finds the parameters at node.inputs[num_args:]")
    (out * out).sum().backward()
    ours = [xt.grad.numpy()] + [p.grad.numpy() for p in piece.parameters()]
    piece.zero_grad()
    x2 = Tensor(x, requires_grad=True)
    plain = scaled(x2, 3.0, 0.5)
    (plain * plain).sum().backward()
    reference = [x2.grad.numpy()] + [p.grad.numpy() for p in piece.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(ours, reference)), (
        "with non-Tensor arguments the gradients must equal the plain call's")


def test_module_method_and_non_tensor_arguments():
    block = TransformerBlock(8, 2, seed=0, dtype=np.float64)
    x = Tensor(np.random.default_rng(9).standard_normal((2, 3, 8)), requires_grad=True)
    out = checkpoint(block.forward, x, None)  # a bound method finds the block's parameters; None passes through
    assert len(out._node.inputs) == 1 + len(block.parameters())
    out.sum().backward()
    ours = [x.grad.numpy()] + [p.grad.numpy() for p in block.parameters()]
    block.zero_grad()
    x2 = Tensor(x.numpy(), requires_grad=True)
    block(x2).sum().backward()
    plain = [x2.grad.numpy()] + [p.grad.numpy() for p in block.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(ours, plain))


def test_nothing_to_differentiate_runs_fn_plainly():
    piece = Piece(p=0.0)
    for p in piece.parameters():
        p.requires_grad = False
    out = checkpoint(piece, Tensor(x_of()))
    assert out._node is None, "nothing requires a gradient: checkpoint is fn(*inputs) itself"
    piece = Piece(p=0.0)
    with no_grad():
        assert checkpoint(piece, Tensor(x_of(), requires_grad=True))._node is None, "under no_grad: fn itself"


def test_fn_must_return_one_tensor():
    piece = Piece(p=0.0)
    with pytest.raises(TypeError, match="one Tensor"):
        checkpoint(lambda x: (piece(x), x), Tensor(x_of(), requires_grad=True), params=piece)


# ---- checkpoint_blocks ---------------------------------------------------------------------------------------
def gpt_grads(model, idx, targets):
    model.zero_grad()
    _, loss = model(idx, targets=targets)
    loss.backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_checkpoint_blocks_in_place_same_weights():
    model = GPT(13, 16, 3, 2, 8, seed=0)
    weights, blocks = model.parameters(), list(model.blocks)
    assert checkpoint_blocks(model) is model, "checkpoint_blocks changes the model in place and returns it"
    assert all(isinstance(b, CheckpointedBlock) and b.block is old for b, old in zip(model.blocks, blocks)), \
        "every TransformerBlock is replaced by CheckpointedBlock(block), holding the block itself"
    assert all(a is b for a, b in zip(weights, model.parameters())), "the same parameter tensors, not copies"
    checkpoint_blocks(model)
    assert all(isinstance(b.block, TransformerBlock) for b in model.blocks), (
        "wrapping twice must not nest wrappers: blocks that are already CheckpointedBlocks stay as they are "
        "(wrap only the TransformerBlocks)")
    with pytest.raises(TypeError, match="blocks"):
        checkpoint_blocks(Piece())


def test_checkpoint_blocks_state_dict_loads_both_ways():
    plain, kept = GPT(13, 16, 2, 2, 8, seed=0), checkpoint_blocks(GPT(13, 16, 2, 2, 8, seed=1))
    assert list(kept.state_dict()) == list(plain.state_dict()), \
        "parameter names and state_dict keys must stay the block's own (blocks.0.ln1.weight, ...)"
    kept.load_state_dict(plain.state_dict())
    other = GPT(13, 16, 2, 2, 8, seed=2)
    other.load_state_dict(kept.state_dict())
    assert all(np.array_equal(a, b) for a, b in zip(other.state_dict().values(), plain.state_dict().values()))


def test_checkpointed_gpt_gradients_identical_over_two_steps():
    plain = GPT(17, 16, 3, 2, 10, dropout=0.2, seed=3)
    kept = checkpoint_blocks(GPT(17, 16, 3, 2, 10, dropout=0.2, seed=3))
    ids = np.random.default_rng(10).integers(0, 17, (2, 3, 10))
    for step in range(2):
        for (name, _), a, b in zip(plain.named_parameters(), gpt_grads(plain, ids[0], ids[1]),
                                   gpt_grads(kept, ids[0], ids[1])):
            assert np.array_equal(a, b), (
                f"step {step + 1}: {name}'s gradient differs from the plain GPT's"
                + (": after recomputing, put each generator back to the state it had before the rule ran "
                   "(the next step's dropout masks must be the plain run's)" if step else
                   ": restore the saved generator states before recomputing (the same dropout masks)"))


def test_checkpointed_gpt_trains_like_the_plain_one():
    plain = GPT(17, 16, 2, 2, 8, seed=4)
    kept = checkpoint_blocks(GPT(17, 16, 2, 2, 8, seed=4))
    ids = np.random.default_rng(11).integers(0, 17, (2, 2, 8))
    for model in (plain, kept):
        optimizer = AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            optimizer.zero_grad()
            model(ids[0], targets=ids[1])[1].backward()
            optimizer.step()
    assert all(np.array_equal(a, b) for a, b in zip(plain.state_dict().values(), kept.state_dict().values())), \
        "three AdamW steps: the checkpointed GPT must end with exactly the plain GPT's weights"


def test_checkpointed_gpt_generates_and_switches_modes():
    plain = GPT(17, 16, 2, 2, 8, dropout=0.1, seed=5)
    kept = checkpoint_blocks(GPT(17, 16, 2, 2, 8, dropout=0.1, seed=5))
    prompt = np.array([[1, 2, 3]])
    kept.eval()
    ids = np.array([[1, 2, 3, 4, 5]])
    with no_grad():
        full = kept(ids)[0].numpy()
        cache = kept.make_cache(1)
        stepwise = np.concatenate([kept(ids[:, :3], cache=cache)[0].numpy()] +
                                  [kept(ids[:, t:t + 1], cache=cache)[0].numpy() for t in (3, 4)], axis=1)
    assert cache.length == 5 and np.allclose(stepwise, full, atol=1e-5), \
        "with a KV cache (generation) the wrapper calls the block itself, passing the cache on"
    kept.train()
    assert np.array_equal(kept.generate(prompt, 6, seed=0).numpy(), plain.generate(prompt, 6, seed=0).numpy()), \
        "with a KV cache (generation) the wrapper calls the block itself"
    kept.eval()
    assert all(not b.block.training and not b.mlp.dropout.training for b in kept.blocks)
    kept.train()
    assert all(b.block.training for b in kept.blocks)
    assert kept.attention_maps(prompt).shape == (1, 2, 3, 3)
