#!/usr/bin/env python
"""Engine memory (module 05): peak of backward with .grad on leaves only, against keeping every intermediate's .grad.

    python benchmarks/engine_memory.py          # MLP and attention training steps (seconds)
    python benchmarks/engine_memory.py --quick  # smaller sizes (the test suite's smoke run)

The engine writes `.grad` only on leaves (as PyTorch) and releases each intermediate
gradient as soon as its rule has run. The comparison keeps what an engine that stored
`.grad` on every tensor it walked would keep: `retain_grad()` on every intermediate of the
graph. Both runs are the same step on the same data, alternated, and the peak is the
largest amount of memory NumPy had allocated (tracemalloc) during `backward()`, above
what the forward pass already held.

Only modules 01-05 are used: the attention step is written out with matmul, masked_fill
and softmax.
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc

import numpy as np

from tinytorch.core import losses
from tinytorch.core.activations import relu, softmax
from tinytorch.core.autograd import topological_order
from tinytorch.core.tensor import Tensor


def mlp_step(batch: int, width: int, layers: int, rng: np.random.Generator):
    """A ReLU MLP with biases and a cross-entropy loss over 10 classes: returns step() -> loss."""
    sizes = [width] * layers + [10]
    weights = [Tensor((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), requires_grad=True)
               for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [Tensor(np.zeros(b, dtype=np.float32), requires_grad=True) for b in sizes[1:]]
    x = Tensor(rng.standard_normal((batch, width)).astype(np.float32))
    y = rng.integers(0, 10, batch)

    def step() -> Tensor:
        h = x
        for i, (w, b) in enumerate(zip(weights, biases)):
            h = h @ w + b
            if i < len(weights) - 1:
                h = relu(h)
        return losses.cross_entropy(h, y)

    return step


def attention_step(batch: int, length: int, dim: int, heads: int, rng: np.random.Generator):
    """One causal multi-head self-attention layer and a cross-entropy loss: returns step() -> loss."""
    head = dim // heads
    proj = [Tensor((rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32), requires_grad=True)
            for _ in range(4)]
    x = Tensor(rng.standard_normal((batch, length, dim)).astype(np.float32), requires_grad=True)
    y = rng.integers(0, dim, (batch, length))
    future = np.triu(np.ones((length, length), dtype=bool), k=1)

    def split(t: Tensor) -> Tensor:  # (B, T, D) -> (B, H, T, head)
        return t.reshape(batch, length, heads, head).permute(0, 2, 1, 3)

    def step() -> Tensor:
        q, k, v = (split(x @ w) for w in proj[:3])
        scores = (q @ k.transpose()) * (1.0 / np.sqrt(head))
        weights = softmax(scores.masked_fill(future, -1e9), dim=-1)
        out = (weights @ v).permute(0, 2, 1, 3).reshape(batch, length, dim) @ proj[3]
        return losses.cross_entropy(out, y)

    return step


def backward_peak(step, keep_every_grad: bool) -> float:
    """MiB allocated during backward() above what the forward pass held."""
    loss = step()
    if keep_every_grad:
        for t in topological_order(loss):
            if t._node is not None:
                t.retain_grad()
    tracemalloc.start()  # traces what is allocated from here on: the forward's arrays are not counted
    loss.backward()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (a smoke run)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    if args.quick:
        cases = {"MLP (batch 32, width 64, 3 layers)": mlp_step(32, 64, 3, rng),
                 "attention (B 2, T 16, D 32, 4 heads)": attention_step(2, 16, 32, 4, rng)}
        repeats = 1
    else:
        cases = {"MLP (batch 256, width 512, 3 layers)": mlp_step(256, 512, 3, rng),
                 "attention (B 8, T 64, D 128, 4 heads)": attention_step(8, 64, 128, 4, rng)}
        repeats = 3
    print("Peak memory of backward() above the forward pass (tracemalloc, MiB, float32; min over "
          f"{repeats} alternated runs)")
    print(f"{'step':40s} {'every .grad kept':>17s} {'leaves only':>12s} {'saving':>8s}")
    worse = []
    for name, step in cases.items():
        step().backward()  # warm up: the leaves' .grad exist in both runs
        kept, leaves = [], []
        for _ in range(repeats):
            kept.append(backward_peak(step, keep_every_grad=True))
            leaves.append(backward_peak(step, keep_every_grad=False))
        kept_mib, leaves_mib = min(kept), min(leaves)
        print(f"{name:40s} {kept_mib:17.2f} {leaves_mib:12.2f} {1 - leaves_mib / kept_mib:8.0%}")
        if not leaves_mib < kept_mib:
            worse.append(name)
    if worse:
        print("leaves-only backward did not use less memory for:", ", ".join(worse))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
