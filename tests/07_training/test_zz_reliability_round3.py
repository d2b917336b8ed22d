"""Issue 31 (reliability round 3): module 07's accuracy, checkpoints of 0-d parameters, and
atomic_write through a symlink."""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.core.training import accuracy


@pytest.mark.parametrize("outputs", [np.full((3, 4), np.nan), np.full(3, np.nan), np.full((3, 1), np.nan),
                                     np.array([[0.0, 1.0], [np.nan, 0.0], [1.0, 0.0]])],
                         ids=["logits", "scores", "column", "one-row"])
def test_accuracy_refuses_nan_outputs(outputs):
    """All-NaN logits took arg-max 0 for every row: accuracy 1.0 against labels 0."""
    with pytest.raises(ValueError, match=r"accuracy: the outputs hold NaN"):
        accuracy(Tensor(outputs), np.zeros(3, dtype=np.int64))


def test_accuracy_of_finite_outputs_is_unchanged():
    assert accuracy(Tensor(np.array([[0.0, 1.0], [2.0, 0.0], [np.inf, 0.0]])), [1, 1, 0]) == pytest.approx(2 / 3)


# ---- checkpoints of 0-d parameters -----------------------------------------------------------
import os  # noqa: E402

from tinytorch.core.layers import Linear, Module  # noqa: E402
from tinytorch.core.optimizers import SGD, AdamW  # noqa: E402
from tinytorch.core.training import load_checkpoint, read_checkpoint, save_checkpoint  # noqa: E402
from tinytorch.files import atomic_write  # noqa: E402


class Scaled(Module):
    """A 0-d float64 scale (as a learned temperature) beside an ordinary vector."""

    def __init__(self):
        super().__init__()
        self.scale = Tensor(np.array(0.1, dtype=np.float64), requires_grad=True)
        self.w = Tensor(np.ones(3), requires_grad=True)

    def forward(self, x):
        return x * self.w * self.scale


def test_a_float64_0d_parameter_round_trips_exactly(tmp_path):
    """It was stored as a JSON number and loaded through float32: 0.10000000149 for 0.1."""
    model, path = Scaled(), tmp_path / "c.npz"
    save_checkpoint(path, model)
    saved = read_checkpoint(path)["model"]["scale"]
    assert isinstance(saved, np.ndarray) and saved.dtype == np.float64 and saved.shape == ()
    other = Scaled()
    other.scale.data = np.array(0.5)
    load_checkpoint(path, other)
    assert other.scale.data.item() == 0.1, f"0.1 came back as {other.scale.data.item()!r}"


@pytest.mark.parametrize("make", [AdamW, lambda params: SGD(params, lr=0.1, momentum=0.9)], ids=["AdamW", "SGD"])
def test_the_optimizer_state_of_a_0d_parameter_loads_back(tmp_path, make):
    """load_checkpoint refused the file save_checkpoint had just written ("should be arrays")."""
    model = Scaled()
    optimizer = make(model.parameters())
    for _ in range(2):
        optimizer.zero_grad()
        model(Tensor(np.arange(3.0))).sum().backward()
        optimizer.step()
    save_checkpoint(tmp_path / "c.npz", model, optimizer)
    other = Scaled()
    other_optimizer = make(other.parameters())
    load_checkpoint(tmp_path / "c.npz", other, other_optimizer)
    for mine, theirs in zip(optimizer.state_dict()["state"], other_optimizer.state_dict()["state"]):
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert np.array_equal(mine[key], theirs[key]) and np.shape(mine[key]) == np.shape(theirs[key]), key


def test_numpy_scalars_in_extra_still_come_back_as_numbers(tmp_path):
    save_checkpoint(tmp_path / "c.npz", Scaled(), extra={"best": np.float64(0.25), "epoch": np.int64(3)})
    assert read_checkpoint(tmp_path / "c.npz")["extra"] == {"best": 0.25, "epoch": 3}


# ---- atomic_write through a symbolic link ----------------------------------------------------
def test_saving_through_a_symlink_replaces_the_target_and_keeps_the_link(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "model-v2.npz"
    link = tmp_path / "latest.npz"
    save_checkpoint(target, Linear(2, 2, seed=0))
    link.symlink_to(target)
    newer = Linear(2, 2, seed=1)
    save_checkpoint(link, newer)
    assert link.is_symlink() and os.readlink(link) == str(target), "the link must stay a link to the same target"
    assert np.array_equal(read_checkpoint(target)["model"]["weight"], newer.weight.data), "the target holds the save"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["latest.npz", "model-v2.npz", "runs"], "no scratch left"


def test_atomic_write_follows_a_relative_and_a_dangling_link(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "notes.txt").symlink_to("data/notes.txt")  # relative, its target does not exist yet
    with atomic_write(tmp_path / "notes.txt", "w", encoding="utf-8") as stream:
        stream.write("first")
    assert (tmp_path / "notes.txt").is_symlink() and (tmp_path / "data" / "notes.txt").read_text() == "first"
    chain = tmp_path / "chain.txt"
    chain.symlink_to(tmp_path / "notes.txt")  # a link to a link
    with atomic_write(chain, "w", encoding="utf-8") as stream:
        stream.write("second")
    assert chain.is_symlink() and (tmp_path / "notes.txt").is_symlink()
    assert (tmp_path / "data" / "notes.txt").read_text() == "second"


def test_a_failed_write_through_a_link_leaves_the_target(tmp_path):
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("old")
    link.symlink_to(target)
    with pytest.raises(RuntimeError):
        with atomic_write(link, "w", encoding="utf-8") as stream:
            stream.write("half")
            raise RuntimeError("disk full")
    assert link.is_symlink() and target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


# ---- schedules, clipping and the learning-rate setter (neighbours of GradScaler(init_scale=inf)) ----
from tinytorch.core.training import CosineWarmupLR, StepLR, clip_grad_norm  # noqa: E402

NAN, INF = float("nan"), float("inf")


def sgd():
    return SGD([Tensor(np.ones(2), requires_grad=True)], lr=0.1)


@pytest.mark.parametrize("make, says", [
    (lambda: StepLR(sgd(), step_size=2.5), "StepLR: step_size must be a whole number"),
    (lambda: StepLR(sgd(), step_size=INF), "StepLR: step_size must be a whole number"),
    (lambda: StepLR(sgd(), step_size=2, gamma=NAN), "StepLR: gamma must be a finite number >= 0"),
    (lambda: StepLR(sgd(), step_size=2, gamma=-0.5), "StepLR: gamma must be a finite number >= 0"),
    (lambda: CosineWarmupLR(sgd(), warmup_steps=2.5, total_steps=10), "warmup_steps must be a whole number"),
    (lambda: CosineWarmupLR(sgd(), warmup_steps=2, total_steps=INF), "total_steps must be a whole number"),
    (lambda: CosineWarmupLR(sgd(), warmup_steps=2, total_steps=10, min_lr=NAN), "min_lr must be a finite number"),
])
def test_schedules_refuse_numbers_that_are_not_counts_or_rates(make, says):
    """min_lr=nan and gamma=nan gave a NaN learning rate; warmup_steps=2.5 was taken as 2; inf crashed."""
    with pytest.raises(ValueError, match=says):
        make()


@pytest.mark.parametrize("value", [NAN, INF, -0.1, "0.1"])
def test_the_learning_rate_setter_refuses_what_is_not_a_finite_rate(value):
    optimizer = sgd()
    with pytest.raises(ValueError, match=r"Invalid learning rate: .* \(must be a finite number >= 0\)"):
        optimizer.lr = value
    assert optimizer.lr == 0.1


@pytest.mark.parametrize("max_norm", [NAN, -1.0, "1"])
def test_clip_grad_norm_refuses_a_max_norm_that_is_not_a_number_at_least_zero(max_norm):
    """nan and -1 scaled every gradient to 0 (or NaN) without a word."""
    p = Tensor(np.ones(2), requires_grad=True)
    p.grad = Tensor(np.full(2, 3.0))
    with pytest.raises(ValueError, match="clip_grad_norm: max_norm must be a number >= 0"):
        clip_grad_norm([p], max_norm)
    assert np.array_equal(p.grad.numpy(), [3.0, 3.0])


def test_clip_grad_norm_with_an_infinite_max_norm_only_measures():
    p = Tensor(np.ones(2), requires_grad=True)
    p.grad = Tensor(np.array([3.0, 4.0]))
    assert clip_grad_norm([p], INF) == 5.0 and np.array_equal(p.grad.numpy(), [3.0, 4.0])
