#!/usr/bin/env python
"""Draw benchmarks/attention_heatmap.png: bidirectional next to causal attention on a sentence.

The figure is lesson 12's `plot_sentence_attention` (given code in tinytorch.core.attention,
the same the lesson draws in section 12). Everything is seeded, so the picture only changes
when the code does; the file is rewritten only when its bytes differ.

    python benchmarks/make_heatmap.py [--output PATH]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tinytorch.core.attention import plot_sentence_attention
from tinytorch.files import atomic_write
from tinytorch.plotting import pyplot  # the course's one backend switch: files only without a screen

plt = pyplot()

OUTPUT = Path(__file__).resolve().parent / "attention_heatmap.png"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "heatmap.png"
        plt.close(plot_sentence_attention(path=fresh))
        new = fresh.read_bytes()
    if args.output.is_file() and args.output.read_bytes() == new:
        print(f"{args.output} is up to date")
        return 0
    with atomic_write(args.output) as handle:
        handle.write(new)
    print(f"wrote {args.output} ({len(new):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
