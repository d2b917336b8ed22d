"""Two interleaved spirals with an MLP (after module 07): held-out accuracy >= 95%.

Each class is a spiral arm winding 1.75 turns around the origin, the other arm rotated
by 180 degrees, with a little seeded noise: a 2-D problem whose decision boundary is
far from linear. The data is generated here (no files). An MLP with two hidden layers
of 64 ReLU units, Adam with a cosine schedule and warm-up, gradient clipping, trained
with the Trainer on shuffled mini-batches; 20% of the points are held out for the test.

    python milestones/spirals.py [--fast] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from rich.console import Console

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import Adam
from tinytorch.core.tensor import Tensor, array_module, to_array
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import verdict  # milestones/_verdict.py
from tinytorch.core.training import CosineWarmupLR, Trainer, accuracy

THRESHOLD = 0.95


def make_spirals(n_per_class: int = 500, turns: float = 1.75, noise: float = 0.05, seed: int = 0):
    """Points (2 * n_per_class, 2) float32 and labels (2 * n_per_class,) int64, shuffled."""
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.uniform(0.0, 1.0, n_per_class))  # more points further out, where arms are long
    angle = t * turns * 2 * np.pi
    arm = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1)
    x = np.concatenate([arm, -arm]) + noise * rng.standard_normal((2 * n_per_class, 2))
    y = np.repeat(np.arange(2), n_per_class)
    order = rng.permutation(len(y))
    return x[order].astype(np.float32), y[order].astype(np.int64)


class ShuffledBatches:
    """A reshuffled list of (x, y) batches every epoch, from a seed (module 08 builds the real DataLoader).

    x and y are put on `device` once; each epoch's order is drawn on the host (the same order on
    every device) and sent over once, so the batches are gathered where the data lives.
    """

    def __init__(self, x, y, batch_size, seed, device="cpu"):
        self.x, self.y = to_array(x, device=device), to_array(y, device=device)
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)

    def __iter__(self):
        order = array_module(self.x).asarray(self.rng.permutation(len(self.y)))
        for i in range(0, len(order), self.batch_size):
            idx = order[i:i + self.batch_size]
            yield Tensor(self.x[idx]), Tensor(self.y[idx])

    def __len__(self):
        return -(-len(self.y) // self.batch_size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fewer epochs (same threshold), for the test suite")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if not device_ready(args.device):
        return 2
    console = Console(highlight=False, soft_wrap=True)
    epochs = 60 if args.fast else 150
    start = time.perf_counter()

    x, y = make_spirals()
    n_train = int(0.8 * len(y))
    train = ShuffledBatches(x[:n_train], y[:n_train], batch_size=32, seed=1, device=args.device)
    test = [(Tensor(x[n_train:], device=args.device), Tensor(y[n_train:], device=args.device))]

    # The model moves before the optimizer is made: its state then lives on the same device.
    model = Sequential(Linear(2, 64, seed=2), ReLU(), Linear(64, 64, seed=3), ReLU(),
                       Linear(64, 2, seed=4)).to(args.device)
    optimizer = Adam(model.parameters(), lr=0.02)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=50, total_steps=epochs * len(train), min_lr=1e-4)
    trainer = Trainer(model, optimizer, CrossEntropyLoss(), scheduler=scheduler, clip=5.0, metric=accuracy)
    console.print(f"[bold]Two spirals[/]: {n_train} training / {len(y) - n_train} test points, MLP 2-64-64-2 (ReLU), "
                  f"Adam + cosine warm-up, {epochs} epochs; device {device_label(args.device)}")
    trainer.fit(train, test, epochs=epochs, log_every=max(1, epochs // 10))

    acc = trainer.evaluate(test)["accuracy"]
    return verdict(console, "test accuracy", acc, THRESHOLD, start)


if __name__ == "__main__":
    sys.exit(main())
