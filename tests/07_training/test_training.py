"""Module 07: clip_grad_norm, schedules, accuracy, the Trainer's loops, checkpoints.

Ordered like the lesson, one property per test, so that the first failure names its
cause: clipping, then each schedule, the metric, each Trainer method, and checkpoints
(what each part restores, then whole runs resumed bit for bit, then files that do not fit).
"""
import math

import numpy as np
import pytest

from tinytorch.core.activations import Tanh
from tinytorch.core.autograd import is_grad_enabled
from tinytorch.core.layers import Dropout, Linear, Module, Sequential
from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import (CosineWarmupLR, StepLR, Trainer, accuracy, clip_grad_norm,
                                     load_checkpoint, read_checkpoint, save_checkpoint)


def mse(outputs, targets):
    diff = outputs - targets
    return (diff * diff).mean()


def with_grad(values, grad, dtype=np.float64):
    p = Tensor(np.array(values, dtype=dtype), requires_grad=True)
    p.grad = Tensor(np.array(grad, dtype=dtype))
    return p


# ---- clip_grad_norm ------------------------------------------------------------------

def test_clip_scales_all_gradients_by_one_factor_and_returns_the_norm_before():
    a, b = with_grad([0.0, 0.0], [3.0, 4.0]), with_grad([0.0], [12.0])
    total = clip_grad_norm([a, b], max_norm=6.5)
    scale = 6.5 / (13.0 + 1e-6)
    got = (a.grad.numpy().tolist(), b.grad.numpy().tolist())
    np.testing.assert_allclose(
        np.concatenate([a.grad.numpy(), b.grad.numpy()]), [3 * scale, 4 * scale, 12 * scale], rtol=1e-15,
        err_msg=f"gradients [3, 4] and [12] clipped to 6.5 became {got}: scale every gradient by one common "
                "factor computed from the global norm of all gradients together (13), not each parameter by its own")
    assert isinstance(total, float), f"clip_grad_norm returned a {type(total).__name__}: return a Python float"
    assert total == 13.0, (f"clip_grad_norm returned {total}: return the norm before clipping (13.0), "
                           "the number worth logging")
    assert a.numpy().tolist() == [0.0, 0.0], "clip_grad_norm changes .grad, never the parameters"


def test_clip_below_the_cap_changes_nothing():
    a = with_grad([0.0, 0.0], [0.3, 0.4])
    total = clip_grad_norm([a], max_norm=1.0)
    assert a.grad.numpy().tolist() == [0.3, 0.4], (
        f"a gradient of norm 0.5 under max_norm 1.0 became {a.grad.numpy().tolist()}: below the cap nothing "
        "changes (clipping never scales a gradient up)")
    assert total == pytest.approx(0.5, rel=1e-15)


def test_clip_skips_parameters_without_grad_and_returns_zero_without_any():
    a = with_grad([0.0], [2.0])
    b = Tensor(np.zeros(3), requires_grad=True)
    assert clip_grad_norm([a, b], max_norm=1.0) == 2.0
    assert b.grad is None, "a parameter whose .grad is None is skipped"
    np.testing.assert_allclose(a.grad.numpy(), [1.0 / (2.0 + 1e-6) * 2.0])
    assert clip_grad_norm([Tensor(np.zeros(2), requires_grad=True)], 1.0) == 0.0
    c = with_grad([0.0], [4.0])
    assert clip_grad_norm(c, max_norm=100.0) == 4.0, "one Tensor is accepted as well as a list"


def test_clip_float16_gradients_sum_squares_in_float32():
    a = with_grad([0.0, 0.0], [300.0, 400.0], dtype=np.float16)
    total = clip_grad_norm([a], max_norm=1000.0)
    assert math.isfinite(total) and total == pytest.approx(500.0, rel=1e-3), (
        f"the norm of the float16 gradient [300, 400] came out {total}: 300² overflows float16 (max 65504); "
        "sum the squares in at least float32")
    clip_grad_norm([a], max_norm=50.0)
    assert a.grad.dtype == np.float16, f"clipping turned a float16 gradient into {a.grad.dtype}: keep its dtype"
    np.testing.assert_allclose(a.grad.numpy().astype(np.float64), [30.0, 40.0], rtol=2e-3)


def test_clip_inf_norm_is_the_largest_absolute_entry():
    a = with_grad([0.0, 0.0], [-5.0, 1.0], dtype=np.float32)
    b = with_grad([0.0], [2.0], dtype=np.float32)
    total = clip_grad_norm([a, b], max_norm=1.0, norm_type=math.inf)
    assert total == 5.0, (f"the inf-norm of [-5, 1] and [2] came out {total}: it is the largest |g| over "
                          "all entries (5), absolute values included")
    assert a.grad.dtype == np.float32
    np.testing.assert_allclose(a.grad.numpy(), [-5.0 / (5 + 1e-6), 1.0 / (5 + 1e-6)], rtol=1e-6)


def test_clip_rejects_other_norm_types():
    a = with_grad([0.0], [1.0])
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm([a], 1.0, norm_type=1.0)


# ---- schedules -------------------------------------------------------------------------

def one_param_sgd(lr):
    return SGD([Tensor(np.zeros(1), requires_grad=True)], lr=lr)


def test_step_lr_values():
    sched = StepLR(one_param_sgd(0.8), step_size=2, gamma=0.5)
    values = [sched.lr_at(t) for t in range(7)]
    assert values == [0.8, 0.8, 0.4, 0.4, 0.2, 0.2, 0.1], (
        f"StepLR(step_size=2, gamma=0.5) from 0.8 gave {values}: lr_at(t) = base_lr · gamma^(t // step_size), "
        "an integer division (the rate changes every step_size steps)")


def test_scheduler_step_moves_to_the_next_steps_rate():
    opt = one_param_sgd(0.8)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    assert opt.lr == 0.8, "creating a scheduler sets optimizer.lr = lr_at(0)"
    first = sched.step()
    assert sched.last_step == 1, f"after one step() last_step is {sched.last_step}: step() adds 1 to last_step"
    assert opt.lr == sched.lr_at(1) == first, (
        f"after one step() the optimizer's lr is {opt.lr} (returned {first}): step() advances last_step, then "
        f"sets optimizer.lr = lr_at(last_step) = {sched.lr_at(1)} and returns it")
    lrs = [first] + [sched.step() for _ in range(3)]
    assert lrs == [0.4, 0.2, 0.1, 0.05] and opt.lr == 0.05 and sched.last_step == 4


def test_cosine_warmup_starts_near_zero_and_rises_linearly():
    opt = one_param_sgd(1.0)
    sched = CosineWarmupLR(opt, warmup_steps=4, total_steps=14, min_lr=0.1)
    warm = [sched.lr_at(t) for t in range(4)]
    assert warm[0] == pytest.approx(0.25), (
        f"lr_at(0) = {warm[0]} with base_lr 1 and 4 warm-up steps: warm-up starts near 0, at "
        "base_lr / warmup_steps = 0.25 (not at 0, a wasted step, and not at base_lr)")
    np.testing.assert_allclose(warm, [0.25, 0.5, 0.75, 1.0], rtol=1e-15,
                               err_msg="warm-up: lr_at(t) = base_lr · (t + 1) / warmup_steps, base_lr at t = W − 1")
    assert opt.lr == 0.25, "creating the scheduler sets the optimizer's lr to lr_at(0)"


def test_cosine_decay_starts_at_base_and_reaches_the_floor():
    sched = CosineWarmupLR(one_param_sgd(1.0), warmup_steps=4, total_steps=14, min_lr=0.1)
    assert sched.lr_at(4) == pytest.approx(1.0, rel=1e-15), (
        f"lr_at(warmup_steps) = {sched.lr_at(4)}: the decay starts at base_lr at step warmup_steps "
        "(progress = (t − W) / (T − W) is 0 there)")
    expected = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 10)) for k in range(11)]
    got = [sched.lr_at(t) for t in range(4, 15)]
    np.testing.assert_allclose(
        got, expected, rtol=1e-14,
        err_msg=f"steps 4..14 with base_lr 1, min_lr 0.1, W = 4, T = 14 gave {np.round(got, 4).tolist()}, "
                f"half-way (step 9) 0.55 was expected: the cosine goes from base_lr at step W down to min_lr, "
                "reached exactly at step T: progress = (t − W) / (T − W), lr = min_lr + (base_lr − min_lr) · "
                "½ (1 + cos(π · progress))")


def test_cosine_stays_at_the_floor_after_the_run():
    sched = CosineWarmupLR(one_param_sgd(1.0), warmup_steps=4, total_steps=14, min_lr=0.1)
    after = [sched.lr_at(t) for t in (15, 18, 24, 1000)]
    assert after == [0.1] * 4, (f"after total_steps the rates are {after}: after total_steps the rate stays at "
                                "min_lr (the cosine must not climb back up)")


def test_cosine_without_warmup_starts_at_base():
    sched = CosineWarmupLR(one_param_sgd(0.5), warmup_steps=0, total_steps=4)
    np.testing.assert_allclose([sched.lr_at(t) for t in range(5)],
                               [0.5, 0.5 * (1 + math.cos(math.pi / 4)) / 2, 0.25,
                                0.5 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.0], atol=1e-15)
    with pytest.raises(ValueError):
        CosineWarmupLR(one_param_sgd(0.5), warmup_steps=5, total_steps=5)


def test_schedule_sets_every_parameter_group():
    a, b = Tensor(np.zeros(1), requires_grad=True), Tensor(np.zeros(1), requires_grad=True)
    opt = SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.05]


def test_scheduler_state_round_trip():
    opt = one_param_sgd(0.3)
    sched = CosineWarmupLR(opt, warmup_steps=3, total_steps=20)
    for _ in range(7):
        sched.step()
    opt2 = one_param_sgd(99.0)
    sched2 = CosineWarmupLR(opt2, warmup_steps=3, total_steps=20)
    sched2.load_state_dict(sched.state_dict())
    assert sched2.last_step == 7 and sched2.base_lr == 0.3 and opt2.lr == opt.lr
    assert sched2.step() == sched.step()
    with pytest.raises(ValueError):
        StepLR(one_param_sgd(0.1), step_size=2).load_state_dict(sched.state_dict())


# ---- accuracy --------------------------------------------------------------------------

def test_accuracy_takes_the_arg_max_over_the_classes():
    square = Tensor(np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [9.0, 0.0, 0.0]]))
    got = accuracy(square, np.array([0, 1, 0]))
    assert got == 1.0, (f"logits [[2, 1, 0], [0, 3, 1], [9, 0, 0]] against targets [0, 1, 0] gave {got}, expected 1.0: "
                        "the prediction is the arg-max over the last axis (the classes), one per example")
    logits = Tensor(np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [9.0, 0.0, 0.0]]))
    got = accuracy(logits, Tensor(np.array([0, 1, 1, 2])))
    assert got == 0.5 and isinstance(got, float), f"accuracy returned {got!r}, expected 0.5 as a Python float"
    assert accuracy(logits, np.array([0, 1, 2, 0])) == 1.0
    assert accuracy(logits, [0, 0, 0, 0]) == 0.5, "targets may be a list"


def test_accuracy_of_one_score_per_example_thresholds_the_logit_at_zero():
    got = accuracy(Tensor(np.array([[0.3], [-2.0], [1.0]])), np.array([1, 0, 0]))
    assert got == pytest.approx(2 / 3), (
        f"scores [0.3, -2, 1] against [1, 0, 0] gave {got}, expected 2/3: one score per example is a logit: "
        "predict 1 where it is > 0 (not > 0.5)")
    assert accuracy(np.array([0.1, -0.1]), [1, 0]) == 1.0


# ---- Trainer ---------------------------------------------------------------------------

class Recorder(Module):
    """y = x @ w; remembers the mode and whether a graph was being recorded at each call."""

    def __init__(self):
        super().__init__()
        self.w = Tensor(np.array([[1.0], [2.0]]), requires_grad=True)
        self.calls = []

    def forward(self, x):
        self.calls.append((self.training, is_grad_enabled()))
        return x @ self.w


W0 = np.array([[1.0], [2.0]])


def fixed_batches():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    y = np.array([[1.0], [1.0], [1.0], [0.0]])
    return [(Tensor(x[:3]), Tensor(y[:3])), (Tensor(x[3:]), Tensor(y[3:]))], x, y


def mse_grad(w, x, y):
    return 2 * x.T @ (x @ w - y) / len(y)


def test_train_step_updates_like_a_manual_loop():
    batches, _, _ = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)
    loss = trainer.train_step(*batches[0])
    x, y = batches[0][0].numpy(), batches[0][1].numpy()
    np.testing.assert_allclose(model.w.numpy(), W0 - 0.1 * mse_grad(W0, x, y), rtol=1e-12)
    assert isinstance(loss, float) and loss == pytest.approx(float(((x @ W0 - y) ** 2).mean()), rel=1e-12), (
        "train_step returns the batch's loss (before the update) as a Python float")
    assert trainer.step == 1, f"after one train_step trainer.step is {trainer.step}: self.step counts optimizer steps"


def test_train_step_zeroes_the_gradients_first():
    batches, _, _ = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)
    x, y = batches[0][0].numpy(), batches[0][1].numpy()
    model.w.grad = Tensor(np.full((2, 1), 100.0))  # left over from somewhere else
    trainer.train_step(*batches[0])
    expected = W0 - 0.1 * mse_grad(W0, x, y)
    assert np.allclose(model.w.numpy(), expected), (
        f"with a stale .grad in place the step moved the weights to {model.w.numpy().ravel()}, expected "
        f"{expected.ravel()}: call optimizer.zero_grad() before backward(), or gradients accumulate")
    trainer.train_step(*batches[0])
    np.testing.assert_allclose(model.w.numpy(), expected - 0.1 * mse_grad(expected, x, y), rtol=1e-12,
                               err_msg="the second step must use only the second step's gradient")


def test_train_step_clips_between_backward_and_step():
    model = Sequential(Linear(2, 1, seed=0, dtype=np.float64))
    before = [p.numpy().copy() for p in model.parameters()]
    x, y = np.ones((4, 2)) * 100, np.zeros((4, 1))
    trainer = Trainer(model, SGD(model.parameters(), lr=1.0), mse, clip=1.0, verbose=False)
    trainer.train_step(x, y)
    moved = np.sqrt(sum(((p.numpy() - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert moved == pytest.approx(1.0, rel=1e-5), (
        f"with lr 1 and clip 1 the weights moved by {moved:.4g}: clip between backward() and step(), so the "
        "step uses the clipped gradient (its norm is at most 1)")
    assert trainer.last_grad_norm is not None and trainer.last_grad_norm > 100, (
        "trainer.last_grad_norm holds what clip_grad_norm returned (the norm before clipping)")


def test_train_step_uses_lr_at_0_first_then_steps_the_schedule():
    batches, _, _ = fixed_batches()
    model = Recorder()
    opt = SGD(model.parameters(), lr=0.1)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    trainer = Trainer(model, opt, mse, scheduler=sched, verbose=False)
    trainer.train_step(*batches[0])
    x, y = batches[0][0].numpy(), batches[0][1].numpy()
    expected = W0 - 0.1 * mse_grad(W0, x, y)
    assert np.allclose(model.w.numpy(), expected), (
        "the first step moved the weights with another learning rate than lr_at(0) = 0.1: the first step must "
        "use lr_at(0): call scheduler.step() after optimizer.step()")
    assert sched.last_step == 1 and opt.lr == 0.05, "one train_step steps the scheduler once"


def test_train_epoch_returns_the_mean_loss_per_example():
    batches, x, y = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.0), mse, verbose=False)
    loss = trainer.train_epoch(batches)
    per_example = ((x @ W0 - y) ** 2)[:, 0]
    expected = per_example.mean()
    per_batch = (per_example[:3].mean() + per_example[3:].mean()) / 2
    assert loss == pytest.approx(expected, rel=1e-12), (
        f"train_epoch returned {loss}; the mean loss per example is {expected} (the mean over batches would be "
        f"{per_batch}): weight each batch's loss by its number of examples")
    assert trainer.step == 2 and all(call == (True, True) for call in model.calls), (
        "train_epoch runs one train_step per batch, in training mode, recording the graph")


def test_train_epoch_puts_the_model_in_training_mode():
    batches, _, _ = fixed_batches()
    model = Recorder()
    model.eval()
    Trainer(model, SGD(model.parameters(), lr=0.0), mse, verbose=False).train_epoch(batches)
    assert model.calls[0][0], "train_epoch must put the model in training mode first"


def test_empty_loader_is_an_error():
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)
    with pytest.raises(ValueError):
        trainer.train_epoch([])
    with pytest.raises(ValueError):
        trainer.evaluate([])


def evaluated_recorder():
    batches, x, y = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)

    def max_output(outputs, targets):
        return float(outputs.numpy().max())

    return model, trainer.evaluate(batches, metric=max_output), x, y


def test_evaluate_runs_the_model_in_eval_mode():
    model, _, _, _ = evaluated_recorder()
    modes = [training for training, _ in model.calls]
    assert modes == [False, False], (f"the model saw training={modes} during evaluate: evaluate must run the model "
                                     "in eval mode (dropout off): self._set_mode(False) first")


def test_evaluate_records_no_graph():
    model, _, _, _ = evaluated_recorder()
    grads = [grad for _, grad in model.calls]
    assert grads == [False, False], (f"gradient recording was {grads} during evaluate: evaluate must run under "
                                     "no_grad() (no graph: less memory and time)")


def test_evaluate_puts_the_model_back_in_training_mode():
    model, _, _, _ = evaluated_recorder()
    assert model.training, "after evaluate the model must be back in training mode"
    assert model.w.grad is None and model.w.numpy().tolist() == [[1.0], [2.0]], "evaluate changes no parameter"

    class Failing(Recorder):
        def forward(self, x):
            raise RuntimeError("boom")

    broken = Failing()
    with pytest.raises(RuntimeError, match="boom"):
        Trainer(broken, SGD(broken.parameters(), lr=0.1), mse, verbose=False).evaluate(fixed_batches()[0])
    assert broken.training, "after evaluate the model must be back in training mode, even after an error"


def test_evaluate_averages_loss_and_metric_over_examples():
    _, result, x, y = evaluated_recorder()
    assert set(result) == {"loss", "max_output"}, f"keys {sorted(result)}: 'loss' and the metric's __name__"
    per_example = ((x @ W0 - y) ** 2)[:, 0]
    assert result["loss"] == pytest.approx(per_example.mean(), rel=1e-12), (
        "evaluate's loss is the mean per example: weight each batch by its number of examples")
    assert result["max_output"] == pytest.approx((3.0 * 3 + 2.0 * 1) / 4), (
        "the metric is averaged over examples too (each batch's value weighted by its size)")


def test_fit_history_counts_and_validation():
    batches, _, _ = fixed_batches()
    val = [(Tensor(np.array([[3.0, 3.0]])), Tensor(np.array([[0.0]])))]
    model = Recorder()
    opt = SGD(model.parameters(), lr=0.05)
    trainer = Trainer(model, opt, mse, scheduler=StepLR(opt, step_size=2, gamma=0.5), clip=10.0,
                      metric=lambda o, t: 1.0, verbose=False)
    history = trainer.fit(batches, val, epochs=3)
    assert history is trainer.history, "fit returns self.history"
    assert history["epoch"] == [1, 2, 3] and trainer.epoch == 3 and trainer.step == 6
    assert history["lr"] == [0.025, 0.0125, 0.00625], "the lr recorded is the optimizer's after the epoch"
    assert set(history) == {"epoch", "train_loss", "lr", "val_loss", "val_<lambda>"}
    assert history["val_loss"][-1] == pytest.approx(trainer.evaluate(val)["loss"], rel=1e-12), (
        "history['val_loss'] does not match evaluate(val): the val_ entries come from evaluate(val), "
        "the validation data, not the training batches")
    assert history["train_loss"][2] < history["train_loss"][0]
    assert history["val_<lambda>"] == [1.0, 1.0, 1.0]


def test_fit_continues_the_epoch_count():
    batches, _, _ = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.05), mse, verbose=False)
    trainer.fit(batches, batches, epochs=2)
    history = trainer.fit(batches, epochs=2)
    assert history["epoch"] == [1, 2, 3, 4] and trainer.epoch == 4, (
        f"two fit calls of 2 epochs recorded epochs {history['epoch']}: fit continues the epoch count "
        "(self.epoch += 1 per epoch, over the trainer's life)")
    assert len(history["val_loss"]) == 2 and trainer.step == 8


def test_fit_prints_progress_when_verbose(capsys):
    batches, _, _ = fixed_batches()
    model = Recorder()
    Trainer(model, SGD(model.parameters(), lr=0.01), mse, metric=accuracy).fit(batches, batches, epochs=3,
                                                                                log_every=2)
    out = capsys.readouterr().out
    assert "epoch   2" in out and "epoch   3" in out and "train loss" in out and "val loss" in out
    assert "epoch   1" not in out, "with log_every=2 only every second epoch (and the last) is printed"


def test_trainer_accepts_plain_arrays():
    model = Sequential(Linear(2, 1, seed=0, dtype=np.float64))
    trainer = Trainer(model, SGD(model.parameters(), lr=0.0), mse, verbose=False)
    loss = trainer.train_epoch([(np.ones((4, 2)), np.zeros((4, 1)))])
    assert np.isfinite(loss) and trainer.evaluate([(np.ones((2, 2)), np.zeros((2, 1)))])["loss"] == pytest.approx(loss)


# ---- checkpoints: what each part restores ----------------------------------------------

class SeededBatches:
    """A minimal reproducible shuffling iterable with an epoch state (module 08 builds the real one)."""

    def __init__(self, x, y, batch_size, seed):
        self.x, self.y, self.batch_size, self.seed, self.epoch = x, y, batch_size, seed, 0

    def __iter__(self):
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.y))
        self.epoch += 1
        return iter([(Tensor(self.x[order[i:i + self.batch_size]]), Tensor(self.y[order[i:i + self.batch_size]]))
                     for i in range(0, len(order), self.batch_size)])

    def state_dict(self):
        return {"epoch": self.epoch, "seed": self.seed}

    def load_state_dict(self, state):
        if state["seed"] != self.seed:
            raise ValueError(f"seed {state['seed']} saved, this loader has {self.seed}")
        self.epoch = int(state["epoch"])


def regression_data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 4))
    return x, np.tanh(x @ rng.standard_normal((4, 2)))


OPTIMIZERS = {
    "adam": lambda ps: Adam(ps, lr=0.02),
    "adamw-groups": lambda ps: AdamW([{"params": ps[::2], "weight_decay": 0.1}, {"params": ps[1::2], "lr": 0.01}],
                                     lr=0.02, weight_decay=0.0),
    "sgd-nesterov": lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
}


def new_run(init_seed, optimizer="adam"):
    x, y = regression_data()
    model = Sequential(Linear(4, 8, seed=init_seed, dtype=np.float64), Tanh(),
                       Dropout(0.1, seed=init_seed + 1), Linear(8, 2, seed=init_seed + 2, dtype=np.float64))
    opt = OPTIMIZERS[optimizer](model.parameters())
    sched = CosineWarmupLR(opt, warmup_steps=3, total_steps=10)
    loader = SeededBatches(x, y, batch_size=8, seed=7)  # 5 steps per epoch
    return Trainer(model, opt, mse, scheduler=sched, clip=0.5, verbose=False), loader


def saved_and_fresh(tmp_path, optimizer="adam"):
    """A trainer after one epoch, its checkpoint, and a fresh trainer (other weights) loaded from it."""
    trained, loader = new_run(0, optimizer)
    trained.fit(loader, epochs=1)
    path = save_checkpoint(tmp_path / "ck.npz", trained.model, trained.optimizer, trained.scheduler, step=5,
                           extra={"note": "hello", "pair": (1, 2.5), "table": np.arange(3)})
    fresh, _ = new_run(50, optimizer)
    info = load_checkpoint(path, fresh.model, fresh.optimizer, fresh.scheduler)
    return trained, fresh, info, path


def test_checkpoint_file_is_an_npz_readable_without_pickle(tmp_path):
    trained, _, _, path = saved_and_fresh(tmp_path)
    with np.load(path, allow_pickle=False) as data:
        files = set(data.files)
        np.testing.assert_array_equal(data["model/0.weight"], trained.model.state_dict()["0.weight"])
        np.testing.assert_array_equal(data["optimizer/state/0/exp_avg"], trained.optimizer.state[0]["exp_avg"])
    assert {"meta", "model/3.bias", "optimizer/state/3/exp_avg_sq", "extra/table"} <= files, (
        f"the file holds {sorted(files)}: save each part with _pack under its key ('model', 'optimizer', "
        "'extra', ...) and the JSON under 'meta'")
    assert save_checkpoint(tmp_path / "plain", trained.model).name == "plain.npz", "'.npz' is appended when missing"


def test_checkpoint_restores_the_model(tmp_path):
    trained, fresh, _, _ = saved_and_fresh(tmp_path)
    for (name, a), (_, b) in zip(trained.model.named_parameters(), fresh.model.named_parameters()):
        assert np.array_equal(a.numpy(), b.numpy()) and a.dtype == b.dtype, f"weight {name} was not restored"


def test_checkpoint_restores_the_optimizer_state(tmp_path):
    trained, fresh, _, _ = saved_and_fresh(tmp_path)
    for i, (sa, sb) in enumerate(zip(trained.optimizer.state, fresh.optimizer.state)):
        assert sa.keys() == sb.keys() and sb.get("step") == sa["step"], (
            f"parameter {i}: the optimizer state is {sorted(sb)} with step {sb.get('step')}, saved "
            f"{sorted(sa)} with step {sa['step']}: the optimizer's state (Adam's moments and step counts) was not "
            "restored: save optimizer.state_dict() and load it with optimizer.load_state_dict")
        for key in ("exp_avg", "exp_avg_sq"):
            assert np.array_equal(sa[key], sb[key]), (
                f"{key} of parameter {i} differs: the optimizer's state (Adam's moments and step counts) was not "
                "restored")
    assert fresh.optimizer.lr == trained.optimizer.lr


def test_checkpoint_restores_parameter_groups(tmp_path):
    trained, fresh, _, _ = saved_and_fresh(tmp_path, "adamw-groups")
    for i, (ga, gb) in enumerate(zip(trained.optimizer.param_groups, fresh.optimizer.param_groups)):
        settings_a = {k: v for k, v in ga.items() if k != "params"}
        settings_b = {k: v for k, v in gb.items() if k != "params"}
        assert settings_a == settings_b, f"group {i}'s settings {settings_b} after loading, saved {settings_a}"
        assert gb["params"] == fresh.optimizer.param_groups[i]["params"]


def test_checkpoint_restores_the_scheduler(tmp_path):
    trained, fresh, _, _ = saved_and_fresh(tmp_path)
    assert fresh.scheduler.last_step == trained.scheduler.last_step == 5, (
        f"the loaded scheduler is at step {fresh.scheduler.last_step}, saved at 5: the scheduler's position "
        "(last_step) was not restored, so warm-up would start again")


def test_checkpoint_restores_step_and_extra(tmp_path):
    _, _, info, _ = saved_and_fresh(tmp_path)
    assert info["step"] == 5, (f"load_checkpoint returned step {info['step']}, saved 5: the step count must be "
                               "saved in meta and returned")
    assert info["extra"]["note"] == "hello" and info["extra"]["pair"] == (1, 2.5)
    np.testing.assert_array_equal(info["extra"]["table"], [0, 1, 2])


def test_checkpoint_restores_random_generators(tmp_path):
    trained, fresh, _, _ = saved_and_fresh(tmp_path)
    saved = trained.model[2].rng.bit_generator.state
    loaded = fresh.model[2].rng.bit_generator.state
    assert loaded == saved, ("the dropout layer's random generator differs after loading: save and restore each "
                             "module's random generator state, or the dropout masks of the resumed run differ")


def test_model_only_checkpoint(tmp_path):
    trainer, _ = new_run(0)
    path = save_checkpoint(tmp_path / "weights", trainer.model)
    fresh, _ = new_run(9)
    assert load_checkpoint(path, fresh.model) == {"step": 0, "extra": None}
    assert np.array_equal(fresh.model.parameters()[0].numpy(), trainer.model.parameters()[0].numpy())


# ---- checkpoints: whole runs ------------------------------------------------------------

@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_resume_from_checkpoint_is_bit_for_bit(tmp_path, optimizer):
    straight, loader = new_run(0, optimizer)
    straight.fit(loader, epochs=2)  # 10 steps
    assert straight.step == 10

    first, loader1 = new_run(0, optimizer)
    first.fit(loader1, epochs=1)  # 5 steps
    path = first.save(tmp_path / "half", loader=loader1)
    assert path.name == "half.npz"

    resumed, loader2 = new_run(123, optimizer)  # fresh objects, different initial weights
    resumed.load(path, loader=loader2)
    assert resumed.step == 5 and resumed.epoch == 1 and loader2.epoch == 1
    resumed.fit(loader2, epochs=1)
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert np.array_equal(a.numpy(), b.numpy()), f"{name} differs from the uninterrupted run"
    for sa, sb in zip(straight.optimizer.state, resumed.optimizer.state):
        assert sa.keys() == sb.keys()
        for key in sa:
            assert np.array_equal(sa[key], sb[key]), key
    assert resumed.optimizer.lr == straight.optimizer.lr
    assert resumed.history == straight.history


# ---- checkpoints that do not fit: an error naming the file, and nothing changed ------------

def snapshot(trainer):
    return ([p.numpy().copy() for p in trainer.model.parameters()], trainer.optimizer.state_dict(),
            trainer.scheduler.state_dict(), trainer.model[2].rng.bit_generator.state)


def assert_unchanged(trainer, before):
    weights, opt_state, sched_state, rng_state = before
    for i, (w, p) in enumerate(zip(weights, trainer.model.parameters())):
        assert np.array_equal(w, p.numpy()), f"parameter {i} was overwritten by a load that failed"
    now = trainer.optimizer.state_dict()
    assert [{k: v for k, v in g.items()} for g in now["param_groups"]] == opt_state["param_groups"]
    assert len(now["state"]) == len(opt_state["state"])
    for a, b in zip(now["state"], opt_state["state"]):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert trainer.scheduler.state_dict() == sched_state
    assert trainer.model[2].rng.bit_generator.state == rng_state


def trained_checkpoint(tmp_path, optimizer="adam"):
    trainer, loader = new_run(0, optimizer)
    trainer.fit(loader, epochs=1)
    return trainer.save(tmp_path / "run.npz", loader=loader)


def test_truncated_file_names_the_path_and_changes_nothing(tmp_path):
    path = trained_checkpoint(tmp_path)
    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    target, _ = new_run(5)
    before = snapshot(target)
    with pytest.raises(ValueError) as err:
        load_checkpoint(cut, target.model, target.optimizer, target.scheduler)
    assert str(cut) in str(err.value) and "truncated" in str(err.value)
    assert_unchanged(target, before)


def test_file_that_is_not_an_archive_names_the_path(tmp_path):
    text = tmp_path / "notes.npz"
    text.write_text("these are not weights\n")
    single = tmp_path / "single.npz"
    np.save(tmp_path / "single.npy", np.arange(3))
    single.write_bytes((tmp_path / "single.npy").read_bytes())
    target, _ = new_run(5)
    before = snapshot(target)
    for path in (text, single):
        with pytest.raises(ValueError) as err:
            load_checkpoint(path, target.model, target.optimizer)
        assert str(path) in str(err.value) and ".npz" in str(err.value)
    assert_unchanged(target, before)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "absent.npz", target.model)


def test_foreign_npz_names_the_path(tmp_path):
    target, _ = new_run(5)
    np.savez(tmp_path / "weights.npz", w=np.zeros(3))
    with pytest.raises(ValueError, match="no 'meta'") as err:
        load_checkpoint(tmp_path / "weights.npz", target.model)
    assert str(tmp_path / "weights.npz") in str(err.value)
    np.savez(tmp_path / "other.npz", meta=np.array('{"format": "something-else"}'))
    with pytest.raises(ValueError, match="not a TinyTorch checkpoint"):
        load_checkpoint(tmp_path / "other.npz", target.model)


def test_file_missing_an_array_names_it_and_changes_nothing(tmp_path):
    path = trained_checkpoint(tmp_path)
    with np.load(path, allow_pickle=False) as data:
        kept = {k: data[k] for k in data.files if k != "optimizer/state/2/exp_avg"}
    np.savez(tmp_path / "partial.npz", **kept)
    target, _ = new_run(5)
    before = snapshot(target)
    with pytest.raises(ValueError, match="optimizer/state/2/exp_avg") as err:
        load_checkpoint(tmp_path / "partial.npz", target.model, target.optimizer, target.scheduler)
    assert str(tmp_path / "partial.npz") in str(err.value)
    assert_unchanged(target, before)


def test_checkpoint_of_another_model_changes_nothing(tmp_path):
    path = trained_checkpoint(tmp_path)
    model = Sequential(Linear(4, 16, seed=0, dtype=np.float64), Tanh(), Linear(16, 2, seed=1, dtype=np.float64))
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, model)
    message = str(err.value)
    assert str(path) in message and "0.weight" in message and "(4, 16)" in message and "(4, 8)" in message
    assert all(np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters()))
    bigger = Sequential(Linear(4, 8, dtype=np.float64), Tanh(), Dropout(0.1), Linear(8, 2, dtype=np.float64),
                        Tanh(), Linear(2, 2, dtype=np.float64))
    with pytest.raises(ValueError, match="5.weight"):
        load_checkpoint(path, bigger)


def test_optimizer_with_other_groups_changes_nothing(tmp_path):
    path = trained_checkpoint(tmp_path)  # Adam with one group of 4 parameters
    target, _ = new_run(5)
    params = target.model.parameters()
    target.optimizer = Adam([{"params": params[:2]}, {"params": params[2:], "lr": 0.5}], lr=0.02)
    target.scheduler = CosineWarmupLR(target.optimizer, warmup_steps=3, total_steps=10)
    before = snapshot(target)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, target.model, target.optimizer, target.scheduler)
    assert str(path) in str(err.value) and "groups" in str(err.value) and "[4]" in str(err.value)
    assert_unchanged(target, before)


def test_optimizer_of_another_type_changes_nothing(tmp_path):
    path = trained_checkpoint(tmp_path, "sgd-nesterov")
    target, _ = new_run(5)  # Adam
    before = snapshot(target)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, target.model, target.optimizer, target.scheduler)
    assert str(path) in str(err.value) and "SGD" in str(err.value) and "Adam" in str(err.value)
    assert_unchanged(target, before)


def test_scheduler_of_another_type_changes_nothing(tmp_path):
    path = trained_checkpoint(tmp_path)
    target, _ = new_run(5)
    target.scheduler = StepLR(target.optimizer, step_size=3)
    before = snapshot(target)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, target.model, target.optimizer, target.scheduler)
    assert str(path) in str(err.value) and "CosineWarmupLR" in str(err.value) and "StepLR" in str(err.value)
    assert_unchanged(target, before)


def test_missing_optimizer_part_changes_nothing(tmp_path):
    trainer, _ = new_run(0)
    path = save_checkpoint(tmp_path / "weights", trainer.model)
    target, _ = new_run(5)
    before = snapshot(target)
    with pytest.raises(ValueError, match="optimizer") as err:
        load_checkpoint(path, target.model, target.optimizer)
    assert str(path) in str(err.value)
    assert_unchanged(target, before)
    with pytest.raises(ValueError, match="scheduler"):
        load_checkpoint(path, target.model, scheduler=target.scheduler)
    assert_unchanged(target, before)


def test_trainer_load_that_fails_leaves_trainer_and_loader_as_they_were(tmp_path):
    path = trained_checkpoint(tmp_path)
    target, loader = new_run(5)
    target.optimizer = SGD(target.model.parameters(), lr=0.1)
    target.scheduler = CosineWarmupLR(target.optimizer, warmup_steps=3, total_steps=10)
    before = snapshot(target)
    with pytest.raises(ValueError, match="Adam"):
        target.load(path, loader=loader)
    assert_unchanged(target, before)
    assert loader.epoch == 0 and target.step == 0 and target.epoch == 0
    other_seed = SeededBatches(*regression_data(), batch_size=8, seed=8)
    right, _ = new_run(5)
    before = snapshot(right)
    with pytest.raises(ValueError, match="seed"):
        right.load(path, loader=other_seed)
    assert_unchanged(right, before)


def test_read_checkpoint_returns_every_part(tmp_path):
    path = trained_checkpoint(tmp_path)
    parts = read_checkpoint(path)
    assert set(parts) == {"format", "step", "model", "rng", "optimizer", "scheduler", "extra", "config"}
    assert parts["step"] == 5 and parts["optimizer"]["type"] == "Adam" and parts["extra"]["loader"]["epoch"] == 1
