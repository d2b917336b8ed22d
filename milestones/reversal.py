"""Sequence reversal with attention (after module 12): exact-match accuracy >= 95% on held-out sequences.

Each example is a sequence of 20 random letters (a-z); the target is the same sequence
backwards. The model has no recurrence and no residual path: token embeddings plus learned
positions (module 11), one bidirectional MultiHeadAttention layer (module 12, 4 heads,
width 64) and a Linear head that reads one letter per position. The only way for output
position t to produce the right letter is to look at input position T-1-t, so a trained
head's weights form the anti-diagonal; the program saves that heat map.

1,000 test sequences are drawn first and never used for training. A test sequence counts
as correct only when every one of its letters is. Training: AdamW, cosine schedule with
warm-up, gradient clipping, batches of 64 from a seeded, shuffling DataLoader.

    python milestones/reversal.py [--fast] [--heatmap PATH] [--seed N] [--device cpu|cuda]

--fast trains on shorter sequences (12 letters) and less data (2,560 sequences, three
epochs) and checks the lower bound 90% (the test suite's smoke run, a few seconds).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from _args import check_output_file, natural_int  # milestones/_args.py
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import verdict  # milestones/_verdict.py
from tinytorch.core.attention import MultiHeadAttention, plot_attention_heads
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear, Module
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor, array_module, as_tensor, to_array
from tinytorch.core.training import CosineWarmupLR, Trainer
from tinytorch.data.loader import DataLoader, TensorDataset
from tinytorch.text.embeddings import Embedding, PositionalEmbedding

LETTERS = "abcdefghijklmnopqrstuvwxyz"
THRESHOLD = 0.95
FAST_THRESHOLD = 0.90
DEFAULT_HEATMAP = Path(tempfile.gettempdir()) / "tinytorch-milestones" / "reversal_attention.png"

FULL = dict(length=20, width=64, heads=4, train_size=6400, epochs=4)
FAST = dict(length=12, width=64, heads=4, train_size=2560, epochs=3)


class Reverser(Module):
    """ids (B, T) -> letter logits (B, T, 26): embed + positions, one attention layer, a Linear head."""

    def __init__(self, vocab: int, length: int, width: int, heads: int, seed: int = 0):
        super().__init__()
        self.tokens = Embedding(vocab, width, seed=seed)
        self.positions = PositionalEmbedding(length, width, seed=seed + 1)
        self.attention = MultiHeadAttention(width, heads, seed=seed + 2)
        self.head = Linear(width, vocab, seed=seed + 3)
        self.last_weights = None  # (B, H, T, T) of the latest forward pass, for the heat map

    def forward(self, ids):
        x = self.positions(self.tokens(ids))
        mixed, self.last_weights = self.attention(x)  # bidirectional: no mask
        return self.head(mixed)


def exact_match(logits, targets) -> float:
    """Fraction of sequences whose every position is predicted right (computed where the logits
    live: on a GPU only the one number comes back to the host)."""
    predicted = as_tensor(logits).data.argmax(-1)
    xp = array_module(predicted)
    right = (predicted == xp.asarray(to_array(targets))).all(-1)
    return int(right.sum()) / right.size


exact_match.__name__ = "exact_match"


def make_data(length: int, train_size: int, test_size: int = 1000, seed: int = 0):
    """(train, test) int64 arrays of letter ids; no training sequence equals a test sequence."""
    rng = np.random.default_rng(seed)
    test = rng.integers(0, len(LETTERS), (test_size, length))
    held_out = {row.tobytes() for row in test}
    train = rng.integers(0, len(LETTERS), (train_size, length))
    train = train[[row.tobytes() not in held_out for row in train]]
    return train, test


def letters(ids) -> str:
    return "".join(LETTERS[i] for i in ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="shorter sequences, brief training, lower bound 90%%: for the test suite")
    parser.add_argument("--heatmap", type=Path, default=DEFAULT_HEATMAP, help=f"where to save the heat map (default {DEFAULT_HEATMAP})")
    parser.add_argument("--seed", type=natural_int, default=0, help="seed of the data, the initialisation and the shuffling")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    check_output_file(parser, args.heatmap, "--heatmap")  # before training, not after it
    if not device_ready(args.device):
        return 2
    console = Console(highlight=False, soft_wrap=True)
    config = FAST if args.fast else FULL
    threshold = FAST_THRESHOLD if args.fast else THRESHOLD
    start = time.perf_counter()

    length = config["length"]
    train, test = make_data(length, config["train_size"], seed=args.seed)
    # The sequences and their targets go to the device once; each batch is then gathered there.
    train_x, train_y, test_x, test_y = (Tensor(a, device=args.device) for a in
                                        (train, train[:, ::-1].copy(), test, test[:, ::-1].copy()))
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=64, shuffle=True, seed=args.seed)
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=500)
    # The model moves before the optimizer is made: its state then lives on the same device.
    model = Reverser(len(LETTERS), length, config["width"], config["heads"], seed=args.seed).to(args.device)
    optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    epochs = config["epochs"]
    scheduler = CosineWarmupLR(optimizer, warmup_steps=len(train_loader), total_steps=epochs * len(train_loader))
    trainer = Trainer(model, optimizer, CrossEntropyLoss(), scheduler=scheduler, clip=1.0, metric=exact_match)
    console.print(f"[bold]Reversal[/]: {len(train):,} training / {len(test):,} held-out sequences of {length} letters; "
                  f"Embedding + PositionalEmbedding + MultiHeadAttention({config['width']}, {config['heads']} heads, "
                  f"bidirectional) + Linear; AdamW + cosine warm-up, batch 64, {epochs} epochs; "
                  f"device {device_label(args.device)}")
    trainer.fit(train_loader, test_loader, epochs=epochs)

    model.eval()
    with no_grad():
        predictions = model(test_x[:3]).numpy().argmax(-1)  # .numpy(): to the host, once
        weights = model.last_weights.numpy()  # (3, H, T, T), on the host for the printing and the plot
    for source, guess in zip(test[:3], predictions):
        mark = "[green]✓[/]" if np.array_equal(guess, source[::-1]) else "[red]✗[/]"
        console.print(f"  {letters(source)} -> {letters(guess)} {mark}")
    mirror = weights[:, :, np.arange(length), length - 1 - np.arange(length)].mean(axis=(0, 2))
    console.print("mean weight on the anti-diagonal (query t -> key T-1-t), per head: "
                  + " ".join(f"{m:.2f}" for m in mirror) + f"  (uniform attention: {1 / length:.2f})")
    args.heatmap.parent.mkdir(parents=True, exist_ok=True)
    plot_attention_heads(weights[0], query_tokens=list(letters(predictions[0])), key_tokens=list(letters(test[0])),
                         title="reversal: output position (row) attends to input position (column)",
                         path=args.heatmap, cols=min(4, config["heads"]))
    console.print(f"heat map of the trained heads saved to {args.heatmap}")

    accuracy = trainer.evaluate(test_loader)["exact_match"]
    return verdict(console, "held-out exact-match accuracy", accuracy, threshold, start)


if __name__ == "__main__":
    sys.exit(main())
