#!/usr/bin/env python
"""Tokenizer benchmarks (module 10): BPE training time, incremental counts against recounting.

    python benchmarks/tokenization.py           # the whole of Tiny Shakespeare, vocabulary 512
    python benchmarks/tokenization.py --quick   # smoke run: 100,000 characters, vocabulary 300

What is measured, on one thread (the thread variables are set before NumPy is imported):
1. training a byte-level BPE tokenizer to the vocabulary size on the text: the package's
   `BPETokenizer.train` (pair counts updated incrementally after each merge) against the same
   loop recounting every pair after every merge (`count_pairs` of the whole sequence), runs
   interleaved, CPU time (`time.process_time`), median; both must learn the same merges;
2. encoding speed of the trained tokenizer on the last 10% of the text;
3. tokens per character on the last 10% for several vocabulary sizes, trained on the first 90%.

Prints Markdown tables (paste them into benchmarks/RESULTS.md).
"""
from __future__ import annotations

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once, when it starts

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from tinytorch.text.tokenization import BPETokenizer, train_by_recounting  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "datasets" / "tinyshakespeare.txt"


def cpu_seconds(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 characters, vocabulary 300, one run each")
    args = parser.parse_args()
    text = DATA.read_text(encoding="utf-8")
    if args.quick:
        text, vocab_size, repeats = text[:100_000], 300, 1
    else:
        vocab_size, repeats = 512, 3

    print(f"Python {platform.python_version()}, NumPy {np.__version__}, one thread; "
          f"{len(text):,} characters, vocabulary {vocab_size}, median of {repeats} interleaved runs (CPU time)\n")
    incremental, recount = [], []
    for _ in range(repeats):
        seconds, fast = cpu_seconds(lambda: BPETokenizer().train(text, vocab_size))
        incremental.append(seconds)
        seconds, slow = cpu_seconds(lambda: train_by_recounting(text, vocab_size))
        recount.append(seconds)
        if slow != fast.merges:
            print("ERROR: the two training loops learned different merges")
            return 1
    t_fast, t_slow = statistics.median(incremental), statistics.median(recount)
    print("### BPE training")
    print("| training loop | CPU time | ratio |")
    print("|---|---:|---:|")
    print(f"| `BPETokenizer.train` (incremental pair counts) | {t_fast:.2f} s | 1.00× |")
    print(f"| recount every pair after every merge (`count_pairs`, NumPy) | {t_slow:.2f} s | {t_slow / t_fast:.2f}× |")

    cut = int(0.9 * len(text))
    train_text, held_out = text[:cut], text[cut:]
    largest = 300 if args.quick else 1024
    big = BPETokenizer().train(train_text, largest)
    seconds, ids = cpu_seconds(lambda: BPETokenizer(big.merges[: min(512, largest) - 256]).encode(held_out))
    print(f"\nencode {len(held_out):,} held-out characters with {min(512, largest)} tokens: {seconds * 1e3:.0f} ms "
          f"({len(held_out) / seconds / 1e6:.2f} M characters/s), {len(ids):,} tokens\n")
    print("### Tokens per character (trained on the first 90%, measured on the last 10%)")
    print("| vocabulary | tokens | tokens / character |")
    print("|---:|---:|---:|")
    for size in (256, 300, 384, 512, 768, 1024):
        if size > largest:
            break
        count = len(BPETokenizer(big.merges[: size - 256]).encode(held_out))
        print(f"| {size} | {count:,} | {count / len(held_out):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
