"""The acceptance check of gradual pruning (module 16, section 5): a digits MLP pruned to 90% global
sparsity on the cubic schedule, with fine-tuning between the steps, stays within one point of its dense
test accuracy. The MLP is 64-256-128-10 (the milestone's split and training recipe); the lesson shows
why the milestone's smaller 64-128-64-10 MLP, with fewer weights to spare, ends a point or two lower.
Named to run after the module's other tests, so that a mistake is reported by the test that names it."""
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from tinytorch.core.activations import ReLU
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import CosineWarmupLR, Trainer, accuracy
from tinytorch.data.loader import DataLoader, TensorDataset
from tinytorch.perf.compression import prunable_layers, prune_gradually, sparsity

DIGITS = Path(__file__).resolve().parents[2] / "datasets" / "digits.npz"


def trainer_for(model, x, y, epochs, lr, seed):
    loader = DataLoader(TensorDataset(Tensor(x), Tensor(y)), batch_size=32, shuffle=True, seed=seed)
    optimizer = AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = CosineWarmupLR(optimizer, warmup_steps=0, total_steps=epochs * len(loader))
    return Trainer(model, optimizer, CrossEntropyLoss(), scheduler=schedule, verbose=False), loader


def test_digits_mlp_at_90_percent_within_one_point():
    with np.load(DIGITS, allow_pickle=False) as archive:
        x = archive["images"].reshape(-1, 64).astype(np.float32) / 16.0
        y = archive["labels"].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    test, train = order[:359], order[359:]

    def held_out_accuracy(model):
        model.eval()
        with no_grad():
            result = accuracy(model(Tensor(x[test])), y[test])
        model.train()
        return result

    with threadpool_limits(limits=1):
        model = Sequential(Linear(64, 256, seed=1), ReLU(), Linear(256, 128, seed=2), ReLU(), Linear(128, 10, seed=3))
        trainer, loader = trainer_for(model, x[train], y[train], epochs=20, lr=3e-3, seed=0)
        for _ in range(20):
            trainer.train_epoch(loader)
        dense = held_out_accuracy(model)
        trainer, loader = trainer_for(model, x[train], y[train], epochs=26, lr=1e-3, seed=5)
        prune_gradually(prunable_layers(model), 0.9, 10, lambda step: [trainer.train_epoch(loader) for _ in range(2)])
        for _ in range(6):
            trainer.train_epoch(loader)
    pruned = held_out_accuracy(model)
    assert abs(sparsity(model) - 0.9) < 1e-4, f"the schedule ends at 90% sparsity, got {sparsity(model):.4f}"
    assert pruned >= dense - 0.01, f"90% sparse: {pruned:.2%}, dense {dense:.2%}: more than one point lost"
