"""XOR with a two-layer MLP (after module 07): 100% accuracy on the four points.

XOR is the classic problem that no linear model can solve: (0,0) and (1,1) are class 0,
(0,1) and (1,0) class 1, and no straight line separates them. One hidden layer with a
non-linearity bends the plane enough. Uses Tensor, Linear, Tanh, CrossEntropyLoss, Adam
and the Trainer; the four points are the whole batch.

    python milestones/xor.py [--fast] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from rich.console import Console

from tinytorch.core.activations import Tanh
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import Adam
from tinytorch.core.tensor import Tensor
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import verdict  # milestones/_verdict.py
from tinytorch.core.training import Trainer, accuracy

THRESHOLD = 1.0  # every one of the four points right


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fewer epochs (same threshold), for the test suite")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if not device_ready(args.device):
        return 2
    console = Console(highlight=False, soft_wrap=True)
    epochs = 150 if args.fast else 400
    start = time.perf_counter()

    x = Tensor(np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32), device=args.device)
    y = Tensor(np.array([0, 1, 1, 0], dtype=np.int64), device=args.device)
    batches = [(x, y)]  # any iterable of (x, y) batches will do

    # The model moves before the optimizer is made: its state then lives on the same device.
    model = Sequential(Linear(2, 8, seed=0), Tanh(), Linear(8, 2, seed=1)).to(args.device)
    optimizer = Adam(model.parameters(), lr=0.05)
    trainer = Trainer(model, optimizer, CrossEntropyLoss(), metric=accuracy)
    console.print(f"[bold]XOR[/]: MLP 2-8-2 (tanh), Adam lr=0.05, {epochs} epochs of one full batch; "
                  f"device {device_label(args.device)}")
    trainer.fit(batches, batches, epochs=epochs, log_every=max(1, epochs // 5))

    logits = model(x).numpy()  # one copy to the host (from the GPU on cuda)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    for point, target, p in zip(x.numpy(), y.numpy(), probs):
        console.print(f"  {point.astype(int).tolist()} -> class {int(p.argmax())} (p={p.max():.3f}), target {int(target)}")
    acc = trainer.evaluate(batches)["accuracy"]
    return verdict(console, "accuracy", acc, THRESHOLD, start)


if __name__ == "__main__":
    sys.exit(main())
