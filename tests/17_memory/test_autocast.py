"""Module 17, sections 5-7: autocast (module 01's switch) and float16 underflow.

Everything is built inside the tests (never at import time).
"""
import numpy as np
import pytest

from tinytorch.core.activations import log_softmax, softmax
from tinytorch.core.layers import Linear
from tinytorch.core.losses import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, mse_loss
from tinytorch.core.tensor import Autocast, Tensor
from tinytorch.models.transformer import GPT, layer_norm
from tinytorch.perf.memory import autocast


def weights(shape, seed=0):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), requires_grad=True)


# ---- the context ---------------------------------------------------------------------------------------------
def test_sets_and_restores_the_switch():
    assert Autocast.dtype is None
    with autocast() as ctx:
        assert isinstance(ctx, autocast), (
            f"__enter__ returns the context itself: `with autocast() as ctx` bound {ctx!r}; end __enter__ with "
            "`return self`")
        assert Autocast.dtype == np.float16, "inside autocast() the switch Autocast.dtype is float16"
    assert Autocast.dtype is None, "on exit autocast must restore the previous setting (None: off)"


def test_nests():
    with autocast():
        with autocast(enabled=False):
            assert Autocast.dtype is None, "autocast(enabled=False) switches mixed precision off inside"
        assert Autocast.dtype == np.float16, \
            "leaving an inner autocast must restore the OUTER setting (float16), not switch it off"
        with autocast():
            pass
        assert Autocast.dtype == np.float16, "leaving a nested autocast() must leave the outer one on"
    assert Autocast.dtype is None


def test_the_same_object_nests_inside_itself():
    """One autocast object entered again inside its own block (a helper that wraps its work in a shared
    `amp = autocast(enabled=False)`, called from inside that block) must remember both outer settings."""
    off, on = autocast(enabled=False), autocast()
    try:
        with off:
            with on:
                with off:  # `off` again, inside itself
                    assert Autocast.dtype is None
                assert Autocast.dtype == np.float16, (
                    f"leaving the inner `with off:` must restore float16, got {Autocast.dtype}")
            assert Autocast.dtype is None
    except IndexError as err:  # popping a list that holds one saved setting instead of two
        raise AssertionError(
            f"an autocast object entered a second time inside its own block lost a saved setting ({err}): __enter__ "
            "must push the current setting onto self._previous (append), not overwrite what it holds; each "
            "__exit__ pops one") from None
    finally:
        Autocast.dtype = None  # whatever happened, the next test starts with mixed precision off


def test_restores_after_an_error_and_never_swallows_it():
    try:
        with autocast():
            raise KeyError("inside")
    except KeyError:
        pass
    else:
        raise AssertionError("autocast swallowed an exception: __exit__ must return False so it propagates")
    assert Autocast.dtype is None, "after an exception inside autocast, the switch must be off again"
    context = autocast()
    with context:
        pass
    with context:  # a context object can be reused
        assert Autocast.dtype == np.float16
    assert Autocast.dtype is None


def test_only_float16():
    with pytest.raises(ValueError, match="float16"):
        autocast(dtype="float32")
    assert autocast(np.float16).dtype == np.float16


# ---- what runs in which dtype ------------------------------------------------------------------------------------
def test_matmul_in_float16_from_float32_weights():
    x, w = weights((4, 8), 1), weights((8, 3), 2)
    with autocast():
        y = x @ w
    assert y.dtype == np.float16, f"a matrix product under autocast is float16, got {y.dtype}"
    assert np.array_equal(y.numpy(), x.numpy().astype(np.float16) @ w.numpy().astype(np.float16)), \
        "the product of the float16 copies of both operands"
    assert y._node.op == "matmul" and all(t._node is not None and t._node.op == "cast" for t in y._node.inputs), \
        "the operands are cast with the recorded op 'cast' (so gradients flow back through it)"
    y.sum().backward()
    assert w.dtype == np.float32 and w.grad.dtype == np.float32 and x.grad.dtype == np.float32, \
        "the parameters stay float32 and get float32 gradients"
    expected = np.ones((4, 3), np.float16).T @ x.numpy().astype(np.float16)
    assert np.array_equal(w.grad.numpy(), expected.T.astype(np.float32))


def test_integer_and_float64_operands():
    ids = Tensor(np.arange(6).reshape(2, 3))
    with autocast():
        assert (ids @ Tensor(np.ones((3, 2), np.int64))).dtype == np.int64, "integer products are never cast"
        assert (Tensor(np.ones((2, 2))) @ Tensor(np.ones((2, 2)))).dtype == np.float16, \
            "float64 operands are cast to float16 too, as PyTorch's autocast does"


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "cross_entropy", "mse_loss", "bce", "bce_logits",
                                  "layer_norm"])
def test_range_hungry_ops_run_in_float32(name):
    x, w = weights((4, 6), 3), weights((6, 3), 4)
    targets = np.array([0, 1, 2, 0])
    ops = {
        "softmax": lambda h: softmax(h),
        "log_softmax": lambda h: log_softmax(h),
        "cross_entropy": lambda h: cross_entropy(h, targets),
        "mse_loss": lambda h: mse_loss(h, np.zeros((4, 3), np.float32)),
        "bce": lambda h: binary_cross_entropy(softmax(h), np.full((4, 3), 0.5, np.float32)),
        "bce_logits": lambda h: binary_cross_entropy_with_logits(h, np.full((4, 3), 0.5, np.float32)),
        "layer_norm": lambda h: layer_norm(h, Tensor(np.ones(3, np.float32)), Tensor(np.zeros(3, np.float32))),
    }
    with autocast():
        h = x @ w
        out = ops[name](h)
    assert h.dtype == np.float16 and out.dtype == np.float32, \
        f"{name} under autocast must compute a float16 input in float32 and return float32, got {out.dtype}"
    with autocast(enabled=False):
        reference = ops[name](Tensor(h.numpy().astype(np.float32)))
    assert np.allclose(out.numpy(), reference.numpy(), rtol=1e-6, atol=1e-7), f"{name}: same values as in float32"
    out.sum().backward()
    assert w.grad.dtype == np.float32 and np.isfinite(w.grad.numpy()).all()


def test_off_by_default():
    x, w = weights((2, 3), 5), weights((3, 2), 6)
    assert (x @ w).dtype == np.float32 and softmax(Tensor(np.zeros(3, np.float16))).dtype == np.float16, \
        "without autocast nothing changes: float32 products, float16 softmax stays float16"


def test_gpt_under_autocast():
    model = GPT(29, 32, 2, 4, 16, seed=0, bias=False)
    ids = np.random.default_rng(7).integers(0, 29, (2, 4, 16))
    _, full = model(ids[0], targets=ids[1])
    with autocast():
        logits, mixed = model(ids[0], targets=ids[1])
    assert logits.dtype == np.float16 and mixed.dtype == np.float32, "float16 logits (a product), a float32 loss"
    assert abs(mixed.item() - full.item()) < 2e-3, f"float32 loss {full.item()}, mixed {mixed.item()}"
    mixed.backward()
    assert all(p.grad is not None and p.grad.dtype == np.float32 and p.dtype == np.float32 for p in model.parameters())


# ---- underflow -------------------------------------------------------------------------------------------------------
def test_tiny_gradients_underflow_in_float16():
    """A gradient of 1e-8 reaching a float16 product is 0 in float16 (below 2^-24)."""
    x, layer = weights((8, 4), 8), Linear(4, 3, bias=False, seed=0)
    tiny = Tensor(np.float32(1e-8))
    with autocast():
        ((layer(x) * tiny).sum()).backward()
    assert np.count_nonzero(layer.weight.grad.numpy()) == 0, "1e-8 is below float16's smallest subnormal: all zeros"
    layer.weight.grad = None
    ((layer(x) * tiny).sum()).backward()
    assert np.count_nonzero(layer.weight.grad.numpy()) == 12, "in float32 every entry is nonzero"
