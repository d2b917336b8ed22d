"""Quantize the Shakespeare GPT (after module 15): int8 and int4 weights, losses within their thresholds, int8 file >= 3.5x smaller.

The model is the one `tito milestone run shakespeare` trained and saved (module 07's checkpoint,
`shakespeare_gpt.npz` in that milestone's --out folder; by default <temp>/tinytorch-shakespeare/).
It is used only after checking that it is that milestone's recipe (vocabulary, width, layers, heads,
context; for the full run also its 2,000 iterations); a different model is refused with a message
that says what differs. When the file does not exist, the shakespeare milestone runs first (same
recipe, --fast with --fast) and saves its model there.

Then module 15's quantize_model makes four versions, and each is evaluated on the same validation
batches (200 of 12 x 64 characters, those of the shakespeare milestone; 10 with --fast):
  fp32                 the trained model
  int8 weight-only     per output channel, symmetric; the embedding tables int8, one scale per row
  int8 dynamic         the same weights, the activations quantized at every call, int32 accumulation
  int4 weight-only     the Linears per output channel, two weights per byte; the tables int8 (the tied
                       table is the first and the last layer: module 15 measures what 4 bits there cost)
and saved as module 07's checkpoint, whose size on disk is measured.

Passes when (full run): int8 weight-only within 0.01 of the fp32 loss, int8 dynamic within 0.05,
int4 weight-only within 0.15, and the int8 checkpoint at least 3.5x smaller than the fp32 one.
With --fast (200 training iterations, 10 batches) the thresholds are the same ones. They were set
for the trained model; a model trained for 200 iterations has weights still close to their small
start, and lost less to quantization than the trained one when the thresholds were set (each run
prints its differences), so the same limits are no looser a bar for the short run.

    python milestones/quantize.py [--fast] [--checkpoint PATH] [--out DIR] [--device cpu|cuda]

NumPy has no integer matrix product in BLAS: the dynamic model's evaluation is much slower than the
others (module 15, section 10, measures why), which is most of this milestone's time.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from _args import check_output_folder, non_finite_weights  # milestones/_args.py
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import Check, verdict_checks  # milestones/_verdict.py
import shakespeare  # milestones/shakespeare.py: the recipe, the data and the evaluation
from tinytorch.core.tensor import to_array
from tinytorch.core.training import load_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.perf.quantization import checkpoint_bytes, quantize_model

DEFAULT_CHECKPOINT = shakespeare.DEFAULT_OUT / shakespeare.CHECKPOINT
EVAL_BATCHES, FAST_EVAL_BATCHES = shakespeare.EVAL_BATCHES, 10
# (name, quantize_model arguments, the largest loss increase over fp32 allowed)
VARIANTS = [("fp32", None, None),
            ("int8 weight-only", dict(mode="weight_only", bits=8), 0.01),
            ("int8 dynamic", dict(mode="dynamic", bits=8), 0.05),
            ("int4 weight-only", dict(mode="weight_only", bits=4), 0.15)]
MIN_INT8_RATIO = 3.5
def trained_model(path: Path, vocab_size: int, fast: bool, device: str, console: Console) -> tuple[GPT, Path, int] | str:
    """(the shakespeare milestone's trained GPT on `device`, the file it came from, its iterations), or a
    message saying why the file at `path` is refused. A missing file is made first by running the
    shakespeare milestone (--fast when `fast`) with --out path's folder."""
    if path.exists():
        problem = shakespeare.saved_model_problem(path, vocab_size, fast)
        if problem is not None:
            return (f"{problem}. Train the recipe with `tito milestone run shakespeare` (or --fast), or pass "
                    "--checkpoint with a path that does not exist yet to train one there.")
    else:
        console.print(f"[bold]No trained model at {path}[/]: running the shakespeare milestone first "
                      f"({'--fast' if fast else 'the full recipe'}), saving its model in {path.parent}")
        shakespeare.main([*(["--fast"] if fast else []), "--out", str(path.parent), "--device", device])
        path = path.parent / shakespeare.CHECKPOINT
    diverged = non_finite_weights(path)
    if diverged is not None:
        return f"{diverged}. Train the model again with `tito milestone run shakespeare` (or --fast)."
    recipe = shakespeare.RECIPE
    model = GPT(vocab_size, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"], recipe["context"],
                dropout=0.0, tie_weights=True, bias=False)
    info = load_checkpoint(path, model)
    return model.to(device).eval(), path, int(info["extra"].get("iters", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true",
                        help=f"accept (or train) the 200-iteration model, evaluate on {FAST_EVAL_BATCHES} batches")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help="the shakespeare milestone's trained model; trained there first when the file is absent "
                             f"(default {DEFAULT_CHECKPOINT})")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "tinytorch-quantize",
                        help="folder for the quantized checkpoints whose sizes are measured")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if args.checkpoint.is_dir():
        parser.error(f"--checkpoint {args.checkpoint}: it is a folder; give the path of the model's file "
                     f"(e.g. {args.checkpoint / shakespeare.CHECKPOINT})")
    if not args.checkpoint.exists():  # the shakespeare milestone will write its model there
        check_output_folder(parser, args.checkpoint.parent, "--checkpoint")
    check_output_folder(parser, args.out)  # before any training, not after it
    if not device_ready(args.device):
        return 2
    console = Console(highlight=False, soft_wrap=True)
    start = time.perf_counter()
    _, val, tokenizer = shakespeare.load_text()
    found = trained_model(args.checkpoint, tokenizer.vocab_size, args.fast, args.device, console)
    if isinstance(found, str):
        print(f"error: {found}", file=sys.stderr)
        return 2
    model, path, iters = found
    recipe = shakespeare.RECIPE
    batches = FAST_EVAL_BATCHES if args.fast else EVAL_BATCHES
    console.print(f"[bold]Quantize[/]: the shakespeare GPT ({path}, {iters} iterations, "
                  f"{sum(p.size for p in model.parameters()):,} parameters); validation loss on {batches} batches of "
                  f"{recipe['batch']} x {recipe['context']}; device {device_label(args.device)}")
    val = to_array(val, device=args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, options, _ in VARIANTS:
        tick = time.perf_counter()
        variant = model if options is None else quantize_model(model, **options)
        loss = shakespeare.estimate_loss(variant, val, batches, np.random.default_rng(2))  # the same batches for all
        size = checkpoint_bytes(variant, args.out / f"shakespeare_{name.replace(' ', '_').replace('-', '_')}.npz")
        results[name] = (loss, size)
        base_loss, base_size = results["fp32"]
        console.print(f"{name:17s} validation loss {loss:.4f} ({loss - base_loss:+.4f}), checkpoint {size:>10,} bytes "
                      f"({base_size / size:.2f}x smaller), {time.perf_counter() - tick:.1f} s")
    base_loss, base_size = results["fp32"]
    checks = [Check(f"{name} loss increase", results[name][0] - base_loss, "at most", limit)
              for name, _, limit in VARIANTS if limit is not None]
    checks.append(Check("int8 checkpoint, times smaller than fp32", base_size / results["int8 weight-only"][1],
                        "at least", MIN_INT8_RATIO, ".2f"))
    return verdict_checks(console, checks, start)


if __name__ == "__main__":
    sys.exit(main())
