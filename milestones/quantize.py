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

Passes when: int8 weight-only within 0.00025 of the fp32 loss, int8 dynamic within 0.002, int4 weight-only
within 0.015; the weights of each variant use the bits its name says (int3 called int4 fails, so does int6
called int8); and the int8 checkpoint at least 3.5x smaller than the fp32 one. The loss bounds sit between the
right width's measured increase and its nearest wrong width's (int6 for int8, int3 for int4; the measurements
are in the comment above MAX_LOSS_INCREASE, and `--widths` measures them again). With --fast (200 training
iterations, 10 batches) the bounds are the same: such a model loses almost nothing at any width, so there the
bits check is what tells a wrong width.

    python milestones/quantize.py [--fast] [--widths] [--checkpoint PATH] [--out DIR] [--device cpu|cuda]

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
from tinytorch.core.tensor import to_array, to_host
from tinytorch.core.training import load_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.perf.quantization import QuantizedLinear, checkpoint_bytes, quantize_model, unpack_int4

DEFAULT_CHECKPOINT = shakespeare.DEFAULT_OUT / shakespeare.CHECKPOINT
EVAL_BATCHES, FAST_EVAL_BATCHES = shakespeare.EVAL_BATCHES, 10
# (name, quantize_model arguments): the four versions judged
VARIANTS = [("fp32", None),
            ("int8 weight-only", dict(mode="weight_only", bits=8)),
            ("int8 dynamic", dict(mode="dynamic", bits=8)),
            ("int4 weight-only", dict(mode="weight_only", bits=4))]
# The largest loss increase over fp32 allowed, set between the right width's measured increase and that of its
# nearest wrong width. `python milestones/quantize.py --widths` on the trained model (2,000 iterations; fp32 loss
# 1.8994 on the 200 batches) measured, weight-only, per channel / per tensor:
#   int8 +0.00016 / +0.00017   int6 +0.00034 / +0.00097   int5 +0.00101 / +0.00515
#   int4 +0.00669 / +0.00661   int3 +0.02817 / +0.10406
# int4: 0.015, about twice int4's increase and half int3's. int8: 0.00025, between int8's and int6's; the margin
# is small (int6 costs 0.0002 more than int8), so the exact check is the bits the weights use (bits_used), which
# also holds in --fast mode, where 200 iterations leave weights that lose almost nothing at any width (measured on
# 10 batches: int8 +0.0001, int6 +0.0002, int4 +0.0003, int3 +0.0025 per channel). int8 dynamic (its activations
# quantized too) measured +0.00056 on the trained model: 0.002, under the int4 weights' +0.0067 (it was 0.05).
MAX_LOSS_INCREASE = {"int8 weight-only": 0.00025, "int8 dynamic": 0.002, "int4 weight-only": 0.015}
MIN_INT8_RATIO = 3.5
# The widths --widths measures (weight-only, per output channel and per tensor)
WIDTHS = (8, 6, 5, 4, 3)


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


def bits_used(model) -> int:
    """The width of the integers in the weights of `model`'s QuantizedLinear layers: the fewest bits of a signed
    integer that hold all of them (-8..7 is 4 bits, -4..3 is 3). The quantizers here are symmetric and the largest
    |weight| of each channel maps to an end of the range, so this is the width really used, whatever the variant
    is called."""
    low = high = 0
    for _, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            q = to_host(module.qweight.data)
            q = unpack_int4(q, module.out_features) if module.bits <= 4 else q
            low, high = min(low, int(q.min())), max(high, int(q.max()))
    return max(high, -low - 1).bit_length() + 1


def quantize_checks(results: dict[str, tuple[float, int, int]]) -> list[Check]:
    """The milestone's verdict from {variant name: (validation loss, checkpoint bytes, bits used)} of the VARIANTS:
    each quantized variant's loss increase over fp32 at most its MAX_LOSS_INCREASE, the bits its weights use
    (bits_used) at least the width in its name, and the int8 checkpoint at least MIN_INT8_RATIO times smaller
    than fp32's."""
    base_loss, base_size, _ = results["fp32"]
    checks = []
    for name, options in VARIANTS[1:]:
        loss, _, bits = results[name]
        checks.append(Check(f"{name} loss increase", loss - base_loss, "at most", MAX_LOSS_INCREASE[name], ".5f"))
        checks.append(Check(f"{name} bits the weights use", bits, "at least", options["bits"], ".0f"))
    checks.append(Check("int8 checkpoint, times smaller than fp32", base_size / results["int8 weight-only"][1],
                        "at least", MIN_INT8_RATIO, ".2f"))
    return checks


def measure_widths(model, val, batches: int, console: Console) -> int:
    """--widths: the loss increase of every width in WIDTHS, weight-only, per output channel and per tensor, on
    the milestone's batches: the measurements MAX_LOSS_INCREASE is set from (each bound between a width and the
    next narrower one). Prints them; judges nothing."""
    start = time.perf_counter()
    base = shakespeare.estimate_loss(model, val, batches, np.random.default_rng(2))
    console.print(f"fp32 validation loss {base:.4f}")
    for per_channel in (True, False):
        for bits in WIDTHS:
            variant = quantize_model(model, mode="weight_only", bits=bits, per_channel=per_channel)
            loss = shakespeare.estimate_loss(variant, val, batches, np.random.default_rng(2))
            console.print(f"int{bits} weight-only, {'per channel' if per_channel else 'per tensor '}: validation loss "
                          f"{loss:.4f} ({loss - base:+.5f}), bits used {bits_used(variant)}")
    console.print(f"bounds: {', '.join(f'{name} at most {limit:g}' for name, limit in MAX_LOSS_INCREASE.items())}; "
                  f"done in {time.perf_counter() - start:.1f}s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true",
                        help=f"accept (or train) the 200-iteration model, evaluate on {FAST_EVAL_BATCHES} batches")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help="the shakespeare milestone's trained model; trained there first when the file is absent "
                             f"(default {DEFAULT_CHECKPOINT})")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "tinytorch-quantize",
                        help="folder for the quantized checkpoints whose sizes are measured")
    parser.add_argument("--widths", action="store_true",
                        help=f"instead: measure the loss increase of int{', int'.join(map(str, WIDTHS))} weight-only, "
                             "per channel and per tensor (what the bounds are set from); judges nothing")
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
    if args.widths:
        return measure_widths(model, val, batches, console)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, options in VARIANTS:
        tick = time.perf_counter()
        variant = model if options is None else quantize_model(model, **options)
        loss = shakespeare.estimate_loss(variant, val, batches, np.random.default_rng(2))  # the same batches for all
        size = checkpoint_bytes(variant, args.out / f"shakespeare_{name.replace(' ', '_').replace('-', '_')}.npz")
        results[name] = (loss, size, bits_used(variant))
        base_loss, base_size, _ = results["fp32"]
        console.print(f"{name:17s} validation loss {loss:.4f} ({loss - base_loss:+.5f}), checkpoint {size:>10,} bytes "
                      f"({base_size / size:.2f}x smaller), {time.perf_counter() - tick:.1f} s")
    return verdict_checks(console, quantize_checks(results), start)


if __name__ == "__main__":
    sys.exit(main())
