"""Issue 31 (reliability round 3): module 17's GradScaler arguments and checkpoint's random numbers
and closures.

* GradScaler(init_scale=inf) (or 1e39, inf in float32) was accepted and never stepped: loss·inf is
  inf, every step is skipped and inf·0.5 stays inf. Every argument is now checked.
* checkpoint(fn, x) with fn drawing from NumPy's global generator recomputed other numbers in
  backward: wrong gradients, no warning. Its state is now saved and put back, as
  torch.utils.checkpoint's preserve_rng_state does, and a recomputation that still differs is refused.
* checkpoint(lambda z: mlp(z), x) raised "pass params=...": the weights a closure reads are found
  while fn runs, and their gradients equal the plain call's.
"""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.perf.memory import GradScaler, checkpoint, generators_kept, random_generators


# ---- GradScaler -----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(init_scale=float("inf")), "init_scale must be a finite number, got inf"),
    (dict(init_scale=1e39), r"init_scale must be > 0 and finite in float32 \(at most 3.403e\+38\), got 1e\+39"),
    (dict(init_scale=1e-50), "init_scale must be > 0 and finite in float32"),
    (dict(init_scale=float("nan")), "init_scale must be a finite number, got nan"),
    (dict(init_scale=-1.0), "init_scale must be > 0"),
    (dict(init_scale="65536"), "init_scale must be a finite number, got '65536'"),
    (dict(growth_factor=float("inf")), "growth_factor must be a finite number"),
    (dict(growth_factor=float("nan")), "growth_factor must be a finite number"),
    (dict(backoff_factor=float("nan")), "backoff_factor must be a finite number"),
    (dict(backoff_factor=0.0), r"backoff_factor must be in \(0, 1\)"),
    (dict(growth_interval=float("nan")), "growth_interval must be a whole number"),
    (dict(growth_interval=float("inf")), "growth_interval must be a whole number"),
    (dict(growth_interval=2.5), "growth_interval must be a whole number"),
    (dict(growth_interval=-3), "growth_interval must be at least 1"),
])
def test_every_grad_scaler_argument_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=f"GradScaler: {message}"):
        GradScaler(**kwargs)


def test_enabled_must_be_a_bool():
    with pytest.raises(TypeError, match="GradScaler: enabled must be True or False, got 'no'"):
        GradScaler(enabled="no")


def test_the_largest_float32_scale_is_accepted_and_steps():
    w = Tensor(np.ones(2, np.float32), requires_grad=True)
    scaler = GradScaler(init_scale=2.0**100)
    from tinytorch.core.optimizers import SGD
    optimizer = SGD([w], lr=0.5)
    scaler.scale((w * 1e-3).sum()).backward()
    assert scaler.step(optimizer) and np.allclose(w.data, 1 - 0.5e-3)


@pytest.mark.parametrize("key, value", [("scale", float("inf")), ("scale", 0.0), ("growth_interval", 0.5),
                                        ("_growth_tracker", -1), ("backoff_factor", float("nan"))])
def test_load_state_dict_refuses_a_bad_value_and_changes_nothing(key, value):
    scaler = GradScaler(init_scale=8.0)
    state = {**GradScaler(init_scale=4.0).state_dict(), key: value}
    with pytest.raises(ValueError, match=key.lstrip("_")):
        scaler.load_state_dict(state)
    assert scaler.get_scale() == 8.0 and scaler.growth_interval == 2000


# ---- checkpoint and NumPy's global generator ------------------------------------------------
def global_dropout(z, p=0.5):
    """Dropout written with NumPy's global generator, as a student might."""
    keep = np.random.rand(*z.shape) >= p
    return z * Tensor((keep / (1 - p)).astype(z.dtype))


def layer_with_global_dropout(z, w):
    return global_dropout(z @ w)


def grads_of(fn, x, w, use_checkpoint, seed=0):
    np.random.seed(seed)
    xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    out = checkpoint(fn, xt, wt) if use_checkpoint else fn(xt, wt)
    (out * out).sum().backward()
    return xt.grad.numpy(), wt.grad.numpy(), np.random.get_state()[1].copy()


def test_global_numpy_draws_are_replayed_so_gradients_equal_the_plain_call():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 6)), rng.standard_normal((6, 5))
    plain_dx, plain_dw, plain_after = grads_of(layer_with_global_dropout, x, w, use_checkpoint=False)
    dx, dw, after = grads_of(layer_with_global_dropout, x, w, use_checkpoint=True)
    assert np.array_equal(dx, plain_dx) and np.array_equal(dw, plain_dw), "the recomputation drew another mask"
    assert np.array_equal(after, plain_after), "afterwards np.random must be where the plain call leaves it"


def test_a_generator_checkpoint_cannot_see_is_refused_not_differentiated_wrongly():
    hidden = np.random.default_rng(5)

    def noise(z):  # reaches `hidden` only through another function: checkpoint cannot find it
        return z * Tensor(draw(z.shape))

    def draw(shape):
        return hidden.random(shape)
    x = Tensor(np.ones((3, 4)), requires_grad=True)
    out = checkpoint(noise, x)
    with pytest.raises(RuntimeError, match="recomputing fn gave other values than the forward"):
        out.sum().backward()


# ---- checkpoint of a closure ----------------------------------------------------------------
def mlp_with_dropout():
    return Sequential(Linear(6, 16, seed=0, dtype=np.float64), ReLU(), Dropout(0.3, seed=1),
                      Linear(16, 3, seed=2, dtype=np.float64))


def closure_grads(mlp, x, use_checkpoint):
    mlp.zero_grad()
    xt = Tensor(x, requires_grad=True)
    out = checkpoint(lambda z: mlp(z), xt) if use_checkpoint else mlp(xt)
    (out * out).sum().backward()
    return [xt.grad.numpy()] + [p.grad.numpy() for p in mlp.parameters()]


def test_a_closure_over_a_module_gets_the_plain_calls_gradients_dropout_included():
    mlp = mlp_with_dropout()
    x = np.random.default_rng(3).standard_normal((5, 6))
    for call in range(2):
        with generators_kept(random_generators(mlp)):
            plain = closure_grads(mlp, x, use_checkpoint=False)
        ours = closure_grads(mlp, x, use_checkpoint=True)
        for a, b in zip(plain, ours):
            assert np.array_equal(a, b), f"call {call + 1}: gradients differ by {np.abs(a - b).max():.2e}"


def test_a_closure_records_the_weights_as_inputs_and_accumulates_like_torch():
    mlp = mlp_with_dropout()
    mlp.eval()
    x = Tensor(np.random.default_rng(4).standard_normal((2, 6)), requires_grad=True)
    out = checkpoint(lambda z: mlp(z), x)
    assert [id(t) for t in out._node.inputs] == [id(x)] + [id(p) for p in mlp.parameters()]
    out.sum().backward()
    first = [p.grad.numpy().copy() for p in mlp.parameters()]
    checkpoint(lambda z: mlp(z), x).sum().backward()
    assert all(np.allclose(p.grad.numpy(), 2 * g) for p, g in zip(mlp.parameters(), first)), \
        "a second backward accumulates into .grad, as any other op's"


# ---- kv_cache_bytes counts ------------------------------------------------------------------
@pytest.mark.parametrize("value", [2.5, float("inf"), float("nan")])
def test_kv_cache_bytes_counts_are_whole_numbers(value):
    from tinytorch.perf.memory import kv_cache_bytes
    with pytest.raises(ValueError, match="kv_cache_bytes: num_layers must be a whole number"):
        kv_cache_bytes(value, 1, 4, 8, np.float32)


# ---- checkpoint under autocast, backward outside it -----------------------------------------
def test_a_forward_under_autocast_is_recomputed_in_float16_when_backward_runs_outside():
    """Found while adding the recomputation check: the backward recomputed in float32 what the
    forward had computed in float16 (gradients of other numbers); autocast's switch is now replayed."""
    from tinytorch.perf.memory import autocast

    def grads(use_checkpoint):
        layer = Linear(6, 4, seed=0)
        x = Tensor(np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32), requires_grad=True)
        with autocast():
            out = checkpoint(layer, x) if use_checkpoint else layer(x)
        out.sum().backward()  # outside autocast
        return [x.grad.numpy(), layer.weight.grad.numpy(), layer.bias.grad.numpy()]
    for a, b in zip(grads(False), grads(True)):
        assert np.array_equal(a, b)
    from tinytorch.core.tensor import Autocast
    assert Autocast.dtype is None, "backward leaves mixed precision as it found it (off)"
