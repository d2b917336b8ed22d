"""Module 17, section 8: GradScaler, against the rules of torch.amp.GradScaler worked out by hand.

(tests/17_memory/test_memory_torch.py checks the same sequences against PyTorch itself.)
Everything is built inside the tests (never at import time).
"""
import numpy as np
import pytest

from tinytorch.core.layers import Linear
from tinytorch.core.optimizers import SGD
from tinytorch.core.tensor import Tensor
from tinytorch.perf.memory import GradScaler, autocast

# (taken?, scale after update) for steps 1..10 with init_scale=8, growth_interval=3: inf at 4 and 10,
# NaN at 5, unscale_ by hand before step 9.
EXPECTED = [(True, 8), (True, 8), (True, 16), (False, 8), (False, 4), (True, 4), (True, 4), (True, 8), (True, 8),
            (False, 4)]


def scripted(step, shape=(3,)):
    g = np.full(shape, 0.5, dtype=np.float32) * step
    if step in (4, 10):
        g[1] = np.inf
    if step == 5:
        g[0] = np.nan
    return g


def parameter():
    return Tensor(np.zeros(3, np.float32), requires_grad=True)


# ---- scale ------------------------------------------------------------------------------------------------------
def test_scale_multiplies_the_loss():
    loss = Tensor(np.float32(3.0), requires_grad=True)
    scaled = GradScaler(init_scale=1024.0).scale(loss)
    assert scaled.dtype == np.float32 and scaled.item() == 3072.0, f"scale(loss) = loss · scale, got {scaled.item()}"
    scaled.backward()
    assert loss.grad.item() == 1024.0, "scale(loss) is a recorded op: the gradient is scaled too"


def test_scale_a_float16_loss_in_float32():
    loss = Tensor(np.float16(4.0), requires_grad=True)
    scaled = GradScaler().scale(loss)
    assert np.isfinite(scaled.item()) and scaled.dtype == np.float32, (
        f"scaling a float16 loss by 2^16 gives {scaled.item()} ({scaled.dtype}): float16 overflows above 65,504; "
        "cast the loss to float32 before multiplying")
    GradScaler(init_scale=1024.0).scale(loss).backward()
    assert loss.grad.dtype == np.float16 and loss.grad.item() == 1024.0, "the gradient goes back through the cast"


# ---- unscale_ ----------------------------------------------------------------------------------------------------
def test_unscale_divides_by_the_scale_in_place():
    w = parameter()
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler(init_scale=64.0)
    w.grad = Tensor(np.array([64.0, 128.0, -32.0], np.float32))
    grad_array = w.grad.data
    scaler.unscale_(optimizer)
    assert np.array_equal(w.grad.numpy(), [1.0, 2.0, -0.5]), \
        f"unscale_ multiplies the gradients by 1/scale: expected [1, 2, -0.5], got {w.grad.numpy()}"
    assert w.grad.data is grad_array or np.shares_memory(w.grad.data, grad_array), (
        "unscale_ must change the gradient arrays in place (g *= inverse.astype(g.dtype)), as PyTorch: "
        "p.grad.data = g * ... puts a new array in their place")
    assert w.grad.dtype == np.float32


def test_unscale_twice_is_refused():
    w = parameter()
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler(init_scale=4.0)
    w.grad = Tensor(np.ones(3, np.float32))
    scaler.unscale_(optimizer)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(optimizer)


def test_step_after_unscale_does_not_unscale_again():
    w = parameter()
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler(init_scale=4.0)
    w.grad = Tensor(np.full(3, 4.0, np.float32))
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    assert np.array_equal(w.numpy(), [-1.0, -1.0, -1.0]), (
        f"the optimizer must see the gradients divided by the scale ONCE (got a step of {-w.numpy()[0]} instead of "
        "1): step() unscales only when unscale_ was not called since the last update()")


def test_found_inf_remembers_an_inf_in_any_gradient():
    # The inf is in the FIRST parameter's gradient, the last one is finite: a found_inf that is set from each
    # gradient in turn (found_inf = not finite) forgets it, step() runs, and the first weight becomes -inf.
    first, last = parameter(), parameter()
    optimizer = SGD([first, last], lr=1.0)
    scaler = GradScaler(init_scale=2.0)
    first.grad = Tensor(np.array([1.0, np.inf, 1.0], np.float32))
    last.grad = Tensor(np.ones(3, np.float32))
    scaler.unscale_(optimizer)
    taken = scaler.step(optimizer)
    assert taken is False and np.array_equal(first.numpy(), np.zeros(3)), (
        f"step() returned {taken} and the first weight became {first.numpy()} with an inf in the FIRST of two "
        "gradients (the last one finite): found_inf must remember an inf in ANY gradient (set it once one is found, "
        "never overwrite it with the last gradient's answer)")


# ---- step and update: the sequence ---------------------------------------------------------------------------------
def test_skips_a_step_with_inf_and_with_nan():
    for bad in (np.inf, -np.inf, np.nan):
        w = parameter()
        optimizer = SGD([w], lr=1.0)
        scaler = GradScaler(init_scale=2.0)
        w.grad = Tensor(np.array([1.0, bad, 1.0], np.float32))
        taken = scaler.step(optimizer)
        assert taken is False and np.array_equal(w.numpy(), np.zeros(3)), (
            f"a gradient holding {bad} must skip the step (weights unchanged, step() returns False)"
            + ("; check for NaN too (np.isfinite)" if np.isnan(bad) else ""))
        scaler.update()
        assert scaler.get_scale() == 1.0, "after a skipped step the scale backs off: 2 · 0.5 = 1"


def test_sequence_of_scales_and_skipped_steps():
    w = parameter()
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler(init_scale=8.0, growth_interval=3)
    for step, (taken, scale) in enumerate(EXPECTED, start=1):
        before = w.numpy().copy()
        w.grad = Tensor(scripted(step) * np.float32(scaler.get_scale()))
        if step == 9:
            scaler.unscale_(optimizer)
        result = scaler.step(optimizer)
        assert result == taken and (not np.array_equal(before, w.numpy())) == taken, \
            f"step {step}: the step should be {'taken' if taken else 'SKIPPED'}"
        if taken:
            assert np.allclose(before - w.numpy(), scripted(step)), f"step {step}: unscaled gradients, once"
        scaler.update()
        assert scaler.get_scale() == scale, (
            f"after step {step} the scale should be {scale}, got {scaler.get_scale()}: back off and reset the count "
            "of good steps after a skipped step; grow only when growth_interval good steps came in a row")


def test_growth_tracker_counts_good_steps():
    w = parameter()
    optimizer = SGD([w], lr=0.0)
    scaler = GradScaler(init_scale=1.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=2)
    trackers, scales = [], []
    for bad in (False, True, False, False, False, False, True, False):
        w.grad = Tensor(np.array([np.inf if bad else 1.0, 1.0, 1.0], np.float32) * np.float32(scaler.get_scale()))
        scaler.step(optimizer)
        scaler.update()
        trackers.append(scaler._growth_tracker)
        scales.append(scaler.get_scale())
    assert trackers == [1, 0, 1, 0, 1, 0, 0, 1], \
        f"_growth_tracker: +1 per good step, 0 after growing, 0 after a skipped step; got {trackers}"
    assert scales == [1.0, 0.25, 0.25, 0.75, 0.75, 2.25, 0.5625, 0.5625], f"got {scales}"


def test_scale_never_grows_to_inf():
    w = parameter()
    optimizer = SGD([w], lr=0.0)
    scaler = GradScaler(init_scale=2.0**127, growth_interval=1)
    w.grad = Tensor(np.ones(3, np.float32))
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**127 and scaler._growth_tracker == 0, \
        "growing 2^127 by 2 overflows float32: keep the scale (PyTorch grows only to a finite float32)"


def test_scale_is_float32_products_in_float64():
    scaler = GradScaler(init_scale=3.0, growth_factor=1.7, backoff_factor=0.3, growth_interval=1)
    w = parameter()
    optimizer = SGD([w], lr=0.0)
    expected = []
    for bad in (True, False):
        w.grad = Tensor(np.array([np.nan if bad else 1.0, 0, 0], np.float32))
        scaler.step(optimizer)
        scaler.update()
        expected.append(scaler.get_scale())
    assert expected == [float(np.float32(3.0 * 0.3)), float(np.float32(float(np.float32(0.9)) * 1.7))], (
        f"got scales {expected}: compute scale · factor in float64 (float(scale) * factor), then round to float32, "
        "as PyTorch does (np.float32(3) * 0.3 gives 0.90000004, PyTorch 0.9)")


def test_any_optimizer_with_inf_backs_off():
    a, b = parameter(), parameter()
    opt_a, opt_b = SGD([a], lr=1.0), SGD([b], lr=1.0)
    scaler = GradScaler(init_scale=4.0)
    a.grad = Tensor(np.ones(3, np.float32))
    b.grad = Tensor(np.array([np.inf, 1, 1], np.float32))
    assert scaler.step(opt_a) and not scaler.step(opt_b)
    scaler.update()
    assert scaler.get_scale() == 2.0 and not np.array_equal(a.numpy(), 0) and np.array_equal(b.numpy(), np.zeros(3))


def test_misuse_is_refused():
    w = parameter()
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler()
    with pytest.raises(RuntimeError, match="no step"):
        scaler.update()
    w.grad = Tensor(np.ones(3, np.float32))
    scaler.step(optimizer)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.step(optimizer)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(optimizer)
    scaler.update()
    for bad in (dict(init_scale=0), dict(growth_factor=1.0), dict(backoff_factor=1.0), dict(growth_interval=0)):
        with pytest.raises(ValueError):
            GradScaler(**bad)


def test_disabled_is_a_plain_step():
    w = parameter()
    optimizer = SGD([w], lr=1.0)
    scaler = GradScaler(enabled=False)
    loss = (w * 2).sum()
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0
    w.grad = Tensor(np.ones(3, np.float32))
    assert scaler.step(optimizer) and np.array_equal(w.numpy(), -np.ones(3))
    scaler.update()


def test_state_dict_round_trip():
    scaler = GradScaler(init_scale=32.0, growth_interval=7)
    scaler._growth_tracker = 3
    other = GradScaler()
    other.load_state_dict(scaler.state_dict())
    assert other.get_scale() == 32.0 and other.growth_interval == 7 and other._growth_tracker == 3


def test_scaling_recovers_gradients_that_underflow():
    x = Tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    layer = Linear(4, 3, bias=False, seed=0)
    optimizer = SGD(layer.parameters(), lr=1.0)
    tiny = Tensor(np.float32(1e-8))
    (layer(x) * tiny).sum().backward()
    reference = layer.weight.grad.numpy().copy()
    layer.weight.grad = None
    scaler = GradScaler()
    with autocast():
        loss = (layer(x) * tiny).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    recovered = layer.weight.grad.numpy()
    assert np.count_nonzero(recovered) == 12 and np.allclose(recovered, reference, rtol=0, atol=1e-2 * np.abs(reference).max()), \
        "with the loss scaled by 2^16, gradients of 1e-8 survive float16 and unscale back to the float32 values"
