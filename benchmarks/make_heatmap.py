#!/usr/bin/env python
"""Draw benchmarks/attention_heatmap.png: bidirectional next to causal attention on a sentence.

The same figure as lesson 12, section 11 (which writes it to a temporary folder). Everything
is seeded, so the picture only changes when the code does; the file is rewritten only when
its bytes differ.

    python benchmarks/make_heatmap.py [--output PATH]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # a script: never open a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tinytorch.core.attention import plot_attention, scaled_dot_product_attention  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402

SENTENCE = "the cat sat on the mat because it was tired"
OUTPUT = Path(__file__).resolve().parent / "attention_heatmap.png"


GROUPS = {"the": 0, "mat": 1, "cat": 2, "it": 2, "tired": 2, "sat": 3, "was": 3, "on": 4, "because": 4}


def sentence_attention(sentence: str, dim: int = 32, seed: int = 0):
    """Toy embeddings, Q = K = V: returns (tokens, bidirectional weights, causal weights).

    Each word gets a fixed random vector (the same word, the same vector) plus a vector shared
    by words with a similar role (GROUPS: the cat / it / tired, the verbs, the connectives), as
    trained embeddings would, plus a small position signal. Seeded: always the same picture.
    """
    tokens = sentence.split()
    vocab = {word: i for i, word in enumerate(sorted(set(tokens)))}
    rng = np.random.default_rng(seed)
    words = rng.standard_normal((len(vocab), dim))
    roles = rng.standard_normal((max(GROUPS.values()) + 1, dim))
    positions = np.arange(len(tokens))[:, None] / 10000 ** (np.arange(dim)[None, :] / dim)
    x = 0.5 * words[[vocab[w] for w in tokens]] + 0.7 * roles[[GROUPS.get(w, 0) for w in tokens]] + 0.3 * np.sin(positions)
    x = Tensor(x, dtype=np.float32)
    return tokens, scaled_dot_product_attention(x, x, x)[1], scaled_dot_product_attention(x, x, x, is_causal=True)[1]


def draw(path: Path) -> None:
    tokens, bidirectional, causal = sentence_attention(SENTENCE)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    plot_attention(bidirectional, tokens, tokens, title="bidirectional (BERT-style)", ax=axes[0])
    plot_attention(causal, tokens, tokens, title="causal (GPT-style)", ax=axes[1])
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "heatmap.png"
        draw(fresh)
        new = fresh.read_bytes()
    if args.output.is_file() and args.output.read_bytes() == new:
        print(f"{args.output} is up to date")
        return 0
    args.output.write_bytes(new)
    print(f"wrote {args.output} ({len(new):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
