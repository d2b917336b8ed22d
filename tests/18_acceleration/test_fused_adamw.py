"""Module 18, section 7: FusedAdamW on one flat buffer, bit-for-bit module 06's AdamW."""
import numpy as np
import pytest

from tinytorch.core.optimizers import AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import CosineWarmupLR, clip_grad_norm
from tinytorch.models.transformer import GPT
from tinytorch.perf.acceleration import FusedAdamW


def run(model, optimizer, steps, seed=0, scheduler=None, clip=None):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x, y = rng.integers(0, model.vocab_size, (2, 3, 6))
        _, loss = model(x, targets=y)
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            clip_grad_norm(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return [p.data.copy() for p in model.parameters()]


def twins(dtype=np.float32, **kwargs):
    return (GPT(13, 8, 2, 2, 6, seed=7, dtype=dtype, **kwargs), GPT(13, 8, 2, 2, 6, seed=7, dtype=dtype, **kwargs))


def assert_identical(reference_model, model, expected, got, what):
    for (name, _), a, b in zip(model.named_parameters(), expected, got):
        assert np.array_equal(a, b), (
            f"{what}: {name} differs from AdamW's by up to {np.abs(a - b).max():.2e} — FusedAdamW must apply "
            "module 06's operations in its order, so that every element is bit-identical")


def test_parameters_stay_views_after_steps():
    _, model = twins()
    optimizer = FusedAdamW(model.parameters(), lr=1e-2)
    run(model, optimizer, 2)
    for name, p in model.named_parameters():
        assert np.shares_memory(p.data, optimizer.flat), \
            f"{name} is no longer a view into the flat buffer: update p, m, v in place (p -= …), never p = …"


def test_identical_to_adamw_with_decay_on_matrices_only():
    reference_model, model = twins(bias=False)
    settings = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    reference = AdamW(weight_decay_groups(reference_model, 0.1), **settings)
    fused = FusedAdamW(weight_decay_groups(model, 0.1), **settings)
    assert_identical(reference_model, model, run(reference_model, reference, 5), run(model, fused, 5),
                     "two groups (decay 0.1 on matrices, 0 on vectors), 5 steps")
    for s_ref, s in zip(reference.state, fused.state):
        assert s_ref["step"] == s["step"] == 5, "each parameter's step count must be 5 after 5 steps"
        assert np.array_equal(s_ref["exp_avg"], s["exp_avg"]) and np.array_equal(s_ref["exp_avg_sq"], s["exp_avg_sq"]), \
            "the moments differ from AdamW's"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_identical_with_one_group_schedule_and_clipping(dtype):
    reference_model, model = twins(dtype=dtype)
    reference = AdamW(reference_model.parameters(), lr=1e-2, weight_decay=0.05)
    fused = FusedAdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    schedules = (CosineWarmupLR(reference, warmup_steps=2, total_steps=6, min_lr=1e-3),
                 CosineWarmupLR(fused, warmup_steps=2, total_steps=6, min_lr=1e-3))
    assert_identical(reference_model, model, run(reference_model, reference, 6, scheduler=schedules[0], clip=0.5),
                     run(model, fused, 6, scheduler=schedules[1], clip=0.5), f"{np.dtype(dtype).name}, schedule, clipping")


def test_a_parameter_without_gradient_falls_back_to_adamw():
    reference_model, model = twins()
    extra_ref, extra = Tensor(np.ones(3, np.float32), requires_grad=True), Tensor(np.ones(3, np.float32), requires_grad=True)
    reference = AdamW(list(reference_model.parameters()) + [extra_ref], lr=1e-2)
    fused = FusedAdamW(list(model.parameters()) + [extra], lr=1e-2)
    assert_identical(reference_model, model, run(reference_model, reference, 2), run(model, fused, 2),
                     "a parameter that never gets a gradient")
    assert np.array_equal(extra.numpy(), np.ones(3)), "a parameter without a gradient must not change"
    assert fused.state[-1]["step"] == 0 and reference.state[-1] == {}, "its step count stays 0"
    extra_ref.grad, extra.grad = Tensor(np.ones(3, np.float32)), Tensor(np.ones(3, np.float32))
    for p_ref, p in zip(reference_model.parameters(), model.parameters()):
        p_ref.grad, p.grad = Tensor(np.full(p_ref.shape, 0.1, np.float32)), Tensor(np.full(p.shape, 0.1, np.float32))
    reference.step()
    fused.step()  # step counts differ (2 and 0): the per-parameter path
    assert np.array_equal(extra.numpy(), extra_ref.numpy())
    assert all(np.array_equal(a.data, b.data) for a, b in zip(reference_model.parameters(), model.parameters()))
    run(model, fused, 1)
    assert all(np.shares_memory(p.data, fused.flat) for p in model.parameters()), \
        "after the per-parameter path the parameters must become views into the flat buffer again"


def test_state_dict_round_trip_and_replaced_arrays():
    _, model = twins()
    optimizer = FusedAdamW(model.parameters(), lr=1e-2)
    run(model, optimizer, 2)
    saved_state = optimizer.state_dict()
    saved_params = {name: p.data.copy() for name, p in model.named_parameters()}
    assert saved_state["type"] == "FusedAdamW" and saved_state["state"][0]["step"] == 2
    continued = run(model, optimizer, 2, seed=1)
    model.load_state_dict(saved_params)  # replaces or copies parameter arrays
    optimizer.load_state_dict(saved_state)  # replaces the state's arrays
    again = run(model, optimizer, 2, seed=1)
    for a, b in zip(continued, again):
        assert np.array_equal(a, b), "resuming from state_dict() must repeat the same steps exactly"
    assert all(np.shares_memory(p.data, optimizer.flat) for p in model.parameters())


def test_mixed_dtypes_are_refused():
    with pytest.raises(ValueError, match="one dtype and device"):
        FusedAdamW([Tensor(np.ones(2, np.float32), requires_grad=True),
                    Tensor(np.ones(2, np.float64), requires_grad=True)])
