"""Module 07: clip_grad_norm, schedules, accuracy, Trainer loops and history, checkpoints."""
import math

import numpy as np
import pytest

from tinytorch.core.activations import Tanh
from tinytorch.core.autograd import is_grad_enabled
from tinytorch.core.layers import Dropout, Linear, Module, Sequential
from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import (CosineWarmupLR, StepLR, Trainer, accuracy, clip_grad_norm,
                                     load_checkpoint, save_checkpoint)


def mse(outputs, targets):
    diff = outputs - targets
    return (diff * diff).mean()


def with_grad(values, grad, dtype=np.float64):
    p = Tensor(np.array(values, dtype=dtype), requires_grad=True)
    p.grad = Tensor(np.array(grad, dtype=dtype))
    return p


# ---- clip_grad_norm ------------------------------------------------------------------

def test_clip_scales_all_gradients_by_one_factor():
    a, b = with_grad([0.0, 0.0], [3.0, 4.0]), with_grad([0.0], [12.0])
    total = clip_grad_norm([a, b], max_norm=6.5)
    assert isinstance(total, float) and total == 13.0
    scale = 6.5 / (13.0 + 1e-6)
    np.testing.assert_allclose(a.grad.numpy(), [3 * scale, 4 * scale], rtol=1e-15)
    np.testing.assert_allclose(b.grad.numpy(), [12 * scale], rtol=1e-15)
    assert a.numpy().tolist() == [0.0, 0.0]  # parameters themselves untouched


def test_clip_below_the_cap_changes_nothing():
    a = with_grad([0.0, 0.0], [0.3, 0.4])
    assert clip_grad_norm([a], max_norm=1.0) == pytest.approx(0.5, rel=1e-15)
    assert a.grad.numpy().tolist() == [0.3, 0.4]


def test_clip_ignores_missing_grads_and_returns_zero_without_any():
    a = with_grad([0.0], [2.0])
    b = Tensor(np.zeros(3), requires_grad=True)
    assert clip_grad_norm([a, b], max_norm=1.0) == 2.0
    assert b.grad is None
    np.testing.assert_allclose(a.grad.numpy(), [1.0 / (2.0 + 1e-6) * 2.0])
    assert clip_grad_norm([Tensor(np.zeros(2), requires_grad=True)], 1.0) == 0.0


def test_clip_inf_norm_and_dtype():
    a = with_grad([0.0, 0.0], [-5.0, 1.0], dtype=np.float32)
    b = with_grad([0.0], [2.0], dtype=np.float32)
    assert clip_grad_norm([a, b], max_norm=1.0, norm_type=math.inf) == 5.0
    assert a.grad.dtype == np.float32
    np.testing.assert_allclose(a.grad.numpy(), [-5.0 / (5 + 1e-6), 1.0 / (5 + 1e-6)], rtol=1e-6)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm([a], 1.0, norm_type=1.0)


# ---- schedules -------------------------------------------------------------------------

def one_param_sgd(lr):
    return SGD([Tensor(np.zeros(1), requires_grad=True)], lr=lr)


def test_step_lr_values_and_attachment():
    opt = one_param_sgd(0.8)
    sched = StepLR(opt, step_size=2, gamma=0.5)
    assert [sched.lr_at(t) for t in range(7)] == [0.8, 0.8, 0.4, 0.4, 0.2, 0.2, 0.1]
    assert opt.lr == 0.8
    lrs = [sched.step() for _ in range(4)]
    assert lrs == [0.8, 0.4, 0.4, 0.2] and opt.lr == 0.2 and sched.last_step == 4


def test_cosine_warmup_values():
    opt = one_param_sgd(1.0)
    sched = CosineWarmupLR(opt, warmup_steps=4, total_steps=14, min_lr=0.1)
    assert opt.lr == 0.25
    values = [sched.lr_at(t) for t in range(16)]
    np.testing.assert_allclose(values[:4], [0.25, 0.5, 0.75, 1.0])
    expected = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 10)) for k in range(11)]
    np.testing.assert_allclose(values[4:15], expected, rtol=1e-15)
    assert values[4] == 1.0 and values[9] == pytest.approx(0.55) and values[14] == pytest.approx(0.1)
    assert values[15] == 0.1 and sched.lr_at(1000) == 0.1


def test_cosine_without_warmup_starts_at_base():
    sched = CosineWarmupLR(one_param_sgd(0.5), warmup_steps=0, total_steps=4)
    np.testing.assert_allclose([sched.lr_at(t) for t in range(5)],
                               [0.5, 0.5 * (1 + math.cos(math.pi / 4)) / 2, 0.25, 0.5 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.0],
                               atol=1e-15)
    with pytest.raises(ValueError):
        CosineWarmupLR(one_param_sgd(0.5), warmup_steps=5, total_steps=5)


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

def test_accuracy_values():
    logits = Tensor(np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [9.0, 0.0, 0.0]]))
    assert accuracy(logits, Tensor(np.array([0, 1, 1, 2]))) == 0.5
    assert accuracy(logits, np.array([0, 1, 2, 0])) == 1.0
    assert accuracy(Tensor(np.array([[0.3], [-2.0], [1.0]])), np.array([1, 0, 0])) == pytest.approx(2 / 3)


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


def fixed_batches():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    y = np.array([[1.0], [1.0], [1.0], [0.0]])
    return [(Tensor(x[:3]), Tensor(y[:3])), (Tensor(x[3:]), Tensor(y[3:]))], x, y


def test_train_epoch_returns_the_mean_loss_per_example():
    batches, x, y = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.0), mse, verbose=False)
    loss = trainer.train_epoch(batches)
    per_example = ((x @ np.array([[1.0], [2.0]]) - y) ** 2)[:, 0]
    expected = (per_example[:3].mean() * 3 + per_example[3:].mean() * 1) / 4
    assert loss == pytest.approx(expected, rel=1e-12) and loss != pytest.approx(
        (per_example[:3].mean() + per_example[3:].mean()) / 2)
    assert trainer.step == 2 and all(call == (True, True) for call in model.calls)


def test_train_step_updates_like_a_manual_loop():
    batches, _, _ = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)
    trainer.train_step(*batches[0])
    x, y = batches[0][0].numpy(), batches[0][1].numpy()
    w = np.array([[1.0], [2.0]])
    grad = 2 * x.T @ (x @ w - y) / 3
    np.testing.assert_allclose(model.w.numpy(), w - 0.1 * grad, rtol=1e-12)


def test_evaluate_uses_eval_mode_and_no_graph_then_restores_training():
    batches, x, y = fixed_batches()
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)

    def max_output(outputs, targets):
        return float(outputs.numpy().max())

    result = trainer.evaluate(batches, metric=max_output)
    assert set(result) == {"loss", "max_output"}
    per_example = ((x @ np.array([[1.0], [2.0]]) - y) ** 2)[:, 0]
    assert result["loss"] == pytest.approx(per_example.mean(), rel=1e-12)
    assert result["max_output"] == pytest.approx((3.0 * 3 + 2.0 * 1) / 4)
    assert model.calls == [(False, False), (False, False)]
    assert model.training and model.w.grad is None and model.w.numpy().tolist() == [[1.0], [2.0]]


def test_fit_history_and_continuation():
    batches, _, _ = fixed_batches()
    model = Recorder()
    opt = SGD(model.parameters(), lr=0.05)
    trainer = Trainer(model, opt, mse, scheduler=StepLR(opt, step_size=2, gamma=0.5), clip=10.0,
                      metric=lambda o, t: 1.0, verbose=False)
    history = trainer.fit(batches, batches, epochs=3)
    assert history["epoch"] == [1, 2, 3] and trainer.epoch == 3 and trainer.step == 6
    assert history["lr"] == [0.025, 0.0125, 0.00625]
    assert set(history) == {"epoch", "train_loss", "lr", "val_loss", "val_<lambda>"}
    assert history["train_loss"][2] < history["train_loss"][0]
    assert history["val_<lambda>"] == [1.0, 1.0, 1.0]
    assert trainer.last_grad_norm is not None and trainer.last_grad_norm > 0
    trainer.fit(batches, epochs=1)
    assert history["epoch"] == [1, 2, 3, 4] and len(history["val_loss"]) == 3


def test_fit_prints_progress_when_verbose(capsys):
    batches, _, _ = fixed_batches()
    model = Recorder()
    Trainer(model, SGD(model.parameters(), lr=0.01), mse, metric=accuracy).fit(batches, batches, epochs=2)
    out = capsys.readouterr().out
    assert "epoch   1" in out and "epoch   2" in out and "train loss" in out and "val loss" in out


def test_trainer_accepts_plain_arrays_and_clips():
    model = Sequential(Linear(2, 1, seed=0, dtype=np.float64))
    x, y = np.ones((4, 2)) * 100, np.zeros((4, 1))
    opt = SGD(model.parameters(), lr=0.0)
    trainer = Trainer(model, opt, mse, clip=1.0, verbose=False)
    trainer.train_epoch([(x, y)])
    grads = np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])
    assert trainer.last_grad_norm > 1.0 and np.linalg.norm(grads) == pytest.approx(1.0, rel=1e-5)


def test_empty_loader_is_an_error():
    model = Recorder()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse, verbose=False)
    with pytest.raises(ValueError, match="no batches"):
        trainer.train_epoch([])


# ---- checkpoints -----------------------------------------------------------------------

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
        return {"epoch": self.epoch}

    def load_state_dict(self, state):
        self.epoch = int(state["epoch"])


def regression_data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 4))
    return x, np.tanh(x @ rng.standard_normal((4, 2)))


def new_run(init_seed, optimizer="adam"):
    x, y = regression_data()
    model = Sequential(Linear(4, 8, seed=init_seed, dtype=np.float64), Tanh(),
                       Dropout(0.1, seed=init_seed + 1), Linear(8, 2, seed=init_seed + 2, dtype=np.float64))
    opt = {"adam": lambda ps: Adam(ps, lr=0.02), "adamw": lambda ps: AdamW(ps, lr=0.02, weight_decay=0.1),
           "sgd": lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True)}[optimizer](model.parameters())
    sched = CosineWarmupLR(opt, warmup_steps=3, total_steps=10)
    loader = SeededBatches(x, y, batch_size=8, seed=7)  # 5 steps per epoch
    return Trainer(model, opt, mse, scheduler=sched, clip=0.5, verbose=False), loader


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
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
        assert np.array_equal(a.numpy(), b.numpy()), name
    for sa, sb in zip(straight.optimizer.state, resumed.optimizer.state):
        assert sa.keys() == sb.keys()
        for key in sa:
            assert np.array_equal(sa[key], sb[key]), key
    assert resumed.optimizer.lr == straight.optimizer.lr
    assert resumed.history == straight.history


def test_checkpoint_file_is_readable_without_pickle(tmp_path):
    trainer, loader = new_run(0)
    trainer.fit(loader, epochs=1)
    path = save_checkpoint(tmp_path / "ck.npz", trainer.model, trainer.optimizer, trainer.scheduler, step=5,
                           extra={"note": "hello", "pair": (1, 2.5), "table": np.arange(3)})
    with np.load(path, allow_pickle=False) as data:
        files = set(data.files)
        np.testing.assert_array_equal(data["model/0.weight"], trainer.model.state_dict()["0.weight"])
        np.testing.assert_array_equal(data["optimizer/state/0/exp_avg"], trainer.optimizer.state[0]["exp_avg"])
    assert {"meta", "model/3.bias", "optimizer/state/3/exp_avg_sq", "extra/table"} <= files
    fresh, _ = new_run(50)
    info = load_checkpoint(path, fresh.model, fresh.optimizer, fresh.scheduler)
    assert info["step"] == 5 and info["extra"]["note"] == "hello" and info["extra"]["pair"] == (1, 2.5)
    np.testing.assert_array_equal(info["extra"]["table"], [0, 1, 2])
    assert fresh.optimizer.hyperparams == trainer.optimizer.hyperparams
    assert fresh.scheduler.last_step == 5 and fresh.optimizer.lr == trainer.optimizer.lr
    for a, b in zip(fresh.model.parameters(), trainer.model.parameters()):
        assert np.array_equal(a.numpy(), b.numpy()) and a.dtype == b.dtype


def test_checkpoint_model_only_and_errors(tmp_path):
    trainer, _ = new_run(0)
    path = save_checkpoint(tmp_path / "weights", trainer.model)
    fresh, _ = new_run(9)
    assert load_checkpoint(path, fresh.model) == {"step": 0, "extra": None}
    assert np.array_equal(fresh.model.parameters()[0].numpy(), trainer.model.parameters()[0].numpy())
    with pytest.raises(ValueError, match="optimizer"):
        load_checkpoint(path, fresh.model, fresh.optimizer)
    np.savez(tmp_path / "other.npz", meta=np.array('{"format": "something-else"}'))
    with pytest.raises(ValueError, match="not a TinyTorch checkpoint"):
        load_checkpoint(tmp_path / "other.npz", fresh.model)
