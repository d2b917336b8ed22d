"""Handwritten 8x8 digits with an MLP (after module 08): test accuracy >= 90%.

The 1,797 digit images shipped in datasets/digits.npz (UCI, via scikit-learn; see
datasets/README.md) are split once with a fixed seed into 1,438 training and 359 test
images. Pixels 0..16 are scaled to 0..1 and flattened to 64 features. An MLP
64-128-64-10 (ReLU, dropout) is trained with AdamW, a cosine schedule with warm-up and
gradient clipping, on mini-batches from a seeded, shuffling DataLoader.

    python milestones/digits_mlp.py [--fast] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import verdict  # milestones/_verdict.py
from tinytorch.core.training import CosineWarmupLR, Trainer, accuracy
from tinytorch.data.loader import DataLoader, TensorDataset

THRESHOLD = 0.90
DATA = Path(__file__).resolve().parent.parent / "datasets" / "digits.npz"


def load_digits(split_seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): float32 features in [0, 1], int64 labels."""
    with np.load(DATA, allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    x = images.reshape(len(images), -1).astype(np.float32) / 16.0
    y = labels.astype(np.int64)
    order = np.random.default_rng(split_seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fewer epochs (same threshold), for the test suite")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if not device_ready(args.device):
        return 2
    console = Console(highlight=False, soft_wrap=True)
    epochs = 8 if args.fast else 30
    start = time.perf_counter()

    x_train, y_train, x_test, y_test = load_digits()
    # The whole data set goes to the device once; each batch is then gathered there.
    x_train, y_train, x_test, y_test = (Tensor(a, device=args.device) for a in (x_train, y_train, x_test, y_test))
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True, seed=0)
    test = DataLoader(TensorDataset(x_test, y_test), batch_size=256)

    # The model moves before the optimizer is made: its state then lives on the same device.
    model = Sequential(Linear(64, 128, seed=1), ReLU(), Dropout(0.1, seed=2),
                       Linear(128, 64, seed=3), ReLU(), Linear(64, 10, seed=4)).to(args.device)
    optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=len(train), total_steps=epochs * len(train))
    trainer = Trainer(model, optimizer, CrossEntropyLoss(), scheduler=scheduler, clip=5.0, metric=accuracy)
    console.print(f"[bold]Digits[/]: {len(y_train)} training / {len(y_test)} test images (8x8), MLP 64-128-64-10, "
                  f"AdamW + cosine warm-up, batch 32, {epochs} epochs; device {device_label(args.device)}")
    trainer.fit(train, test, epochs=epochs, log_every=1 if args.fast else 3)

    acc = trainer.evaluate(test)["accuracy"]
    return verdict(console, "test accuracy", acc, THRESHOLD, start)


if __name__ == "__main__":
    sys.exit(main())
