"""Module 08 with module 07: a shuffled, seeded DataLoader feeding the Trainer, resumed bit for bit."""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import Adam
from tinytorch.core.training import CosineWarmupLR, Trainer, accuracy
from tinytorch.data.loader import DataLoader, TensorDataset


def dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 3))
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64)
    return TensorDataset(x, y)


def run(init_seed):
    model = Sequential(Linear(3, 16, seed=init_seed, dtype=np.float64), ReLU(),
                       Linear(16, 2, seed=init_seed + 1, dtype=np.float64))
    opt = Adam(model.parameters(), lr=0.02)
    loader = DataLoader(dataset(), batch_size=16, shuffle=True, seed=3)  # 4 batches, last one short
    sched = CosineWarmupLR(opt, warmup_steps=2, total_steps=6 * len(loader))
    return Trainer(model, opt, CrossEntropyLoss(), scheduler=sched, clip=2.0, metric=accuracy, verbose=False), loader


def test_trainer_over_a_dataloader_resumes_bit_for_bit(tmp_path):
    straight, loader = run(1)
    straight.fit(loader, loader, epochs=6)
    # evaluation iterates the same loader too, so its epoch counter is part of the state
    first, loader1 = run(1)
    first.fit(loader1, loader1, epochs=3)
    path = first.save(tmp_path / "ckpt", loader=loader1)
    resumed, loader2 = run(77)
    resumed.load(path, loader=loader2)
    assert loader2.epoch == loader1.epoch == 6
    resumed.fit(loader2, loader2, epochs=3)
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert np.array_equal(a.numpy(), b.numpy())
    assert resumed.history == straight.history
    assert straight.history["val_accuracy"][-1] > 0.8


def test_a_different_loader_seed_changes_the_run():
    a, loader_a = run(1)
    b, _ = run(1)
    loader_b = DataLoader(dataset(), batch_size=16, shuffle=True, seed=4)
    a.fit(loader_a, epochs=2)
    b.fit(loader_b, epochs=2)
    assert not np.array_equal(a.model.parameters()[0].numpy(), b.model.parameters()[0].numpy())


def test_resuming_with_a_loader_of_another_seed_changes_nothing(tmp_path):
    first, loader1 = run(1)
    first.fit(loader1, epochs=2)
    path = first.save(tmp_path / "ckpt", loader=loader1)
    target, _ = run(77)
    other = DataLoader(dataset(), batch_size=16, shuffle=True, seed=4)
    before = [p.numpy().copy() for p in target.model.parameters()]
    with pytest.raises(ValueError, match="seed"):
        target.load(path, loader=other)
    assert other.epoch == 0 and target.step == 0
    assert all(np.array_equal(b, p.numpy()) for b, p in zip(before, target.model.parameters()))
