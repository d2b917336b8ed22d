#!/usr/bin/env python
"""Quantization (module 15): loss and accuracy against bits, checkpoint bytes, NumPy's integer product against float32.

    python benchmarks/quantization.py                 # full run (several minutes on one core)
    python benchmarks/quantization.py --write-results # also rewrite the quantization section of RESULTS.md
    python benchmarks/quantization.py --quick         # smoke run: an untrained GPT when none is saved, few
                                                      # batches and epochs (never written to RESULTS.md)

What is measured, on the CPU, one thread:
1. the Shakespeare GPT that `tito milestone run shakespeare` saved (milestones/quantize.py finds it, checks
   its recipe, and runs that milestone first when it is missing): validation loss on the shakespeare
   milestone's 200 validation batches (the same batches for every version) and the size of module 07's
   checkpoint on disk, for float32, weight-only int8 ... int2 per tensor and per channel, int8 dynamic,
   and int8 / int4 with the embedding tables left in float32;
2. the digits MLP and CNN of the milestones (their data, split and recipes: AdamW, cosine warm-up, 30 and
   20 epochs): test accuracy against the same bits, and int8 dynamic;
3. speed: the (768, 128) @ (128, 512) product of one batch through the GPT's MLP, float32 (BLAS) against
   NumPy's int32 product and integer_matmul, and the whole layers; next to PyTorch's float32 product and
   its int8 kernels (torch._int_mm, and a dynamically quantized nn.Linear), all interleaved (CPU time).
"""
from __future__ import annotations

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once, when it starts

import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402

from _common import interleaved_medians, machine, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "milestones"))
import digits_cnn  # noqa: E402  milestones/: the CNN, and (through digits_mlp) the data and its split
import shakespeare  # noqa: E402

from tinytorch.core.activations import ReLU  # noqa: E402
from tinytorch.core.autograd import no_grad  # noqa: E402
from tinytorch.core.layers import Dropout, Linear, Sequential  # noqa: E402
from tinytorch.core.losses import CrossEntropyLoss  # noqa: E402
from tinytorch.core.optimizers import AdamW  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.core.training import CosineWarmupLR, Trainer, accuracy  # noqa: E402
from tinytorch.data.loader import DataLoader, TensorDataset  # noqa: E402
from tinytorch.models.transformer import GPT  # noqa: E402
from tinytorch.perf.quantization import checkpoint_bytes, integer_matmul, quantize_model  # noqa: E402

torch = _common.import_torch()
RESULTS = _common.RESULTS  # where --write-results writes (a test points it elsewhere)
SECTION = "## Quantization (module 15)"
BITS = (8, 6, 4, 3, 2)
console = Console(width=None if sys.stdout.isatty() else 120)


# ---- 1. the GPT -----------------------------------------------------------------------------------
def gpt_model(checkpoint: Path, quick: bool) -> tuple[GPT, str]:
    """The milestone's trained GPT and where it came from; with --quick and no saved model, an untrained one."""
    return _common.shakespeare_model(checkpoint, quick, console)


def bench_gpt(model: GPT, batches: int, folder: Path, bits: tuple = BITS) -> list[dict]:
    """One row per version: name, validation loss, checkpoint bytes."""
    _, val, _ = shakespeare.load_text()
    versions = [("float32", None)]
    versions += [(f"int{b} weight-only, {'per channel' if pc else 'per tensor'}", dict(bits=b, per_channel=pc))
                 for b in bits for pc in (True, False)]
    versions += [("int8 dynamic, per channel", dict(mode="dynamic")),
                 ("int8 weight-only, embedding tables float32", dict(bits=8, embeddings=False)),
                 ("int4 weight-only, embedding tables float32", dict(bits=4, embeddings=False)),
                 ("int4 weight-only, embedding tables int4", dict(bits=4, embedding_bits=4))]
    rows = []
    for i, (name, options) in enumerate(versions):
        variant = model if options is None else quantize_model(model, **options)
        loss = shakespeare.estimate_loss(variant, val, batches, np.random.default_rng(2))
        rows.append({"name": name, "loss": loss, "bytes": checkpoint_bytes(variant, folder / f"gpt{i}.npz")})
        console.print(f"  GPT {name:45s} loss {loss:.4f} ({loss - rows[0]['loss']:+.4f}), {rows[-1]['bytes']:,} bytes")
    return rows


# ---- 2. the digits -----------------------------------------------------------------------------------
def digits_models(quick: bool) -> dict:
    """{name: (trained model, test inputs, test labels)}: the milestones' MLP and CNN, their recipe."""
    x_train, y_train, x_test, y_test = digits_cnn.load_digits()
    mlp = Sequential(Linear(64, 128, seed=1), ReLU(), Dropout(0.1, seed=2), Linear(128, 64, seed=3), ReLU(),
                     Linear(64, 10, seed=4))  # milestones/digits_mlp.py's network
    models = {}
    for name, model, shape, epochs in (("MLP", mlp, (-1, 64), 30), ("CNN", digits_cnn.build_model(), (-1, 1, 8, 8),
                                                                     digits_cnn.EPOCHS)):
        epochs = 2 if quick else epochs  # the warm-up is one epoch
        train = DataLoader(TensorDataset(Tensor(x_train.reshape(shape)), Tensor(y_train)), batch_size=32,
                           shuffle=True, seed=0)
        optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)  # both milestones' recipe
        scheduler = CosineWarmupLR(optimizer, warmup_steps=len(train), total_steps=epochs * len(train))
        Trainer(model, optimizer, CrossEntropyLoss(), scheduler=scheduler, clip=5.0, metric=accuracy,
                verbose=False).fit(train, epochs=epochs)
        models[name] = (model.eval(), x_test.reshape(shape), y_test)
    return models


def bench_digits(models: dict, bits: tuple = BITS) -> dict:
    """{model: {version: test accuracy}} for float32, the bits per tensor / per channel, and int8 dynamic."""
    results = {}
    for name, (model, x, y) in models.items():
        def acc(m):
            with no_grad():
                return accuracy(m(Tensor(x)), y)

        row = {"float32": acc(model), "int8 dynamic": acc(quantize_model(model, mode="dynamic"))}
        for b in bits:
            for per_channel in (True, False):
                row[b, per_channel] = acc(quantize_model(model, bits=b, per_channel=per_channel))
        results[name] = row
        console.print(f"  digits {name}: float32 {100 * row['float32']:.2f}%, int8 per channel "
                      f"{100 * row[8, True]:.2f}%, int8 dynamic {100 * row['int8 dynamic']:.2f}%")
    return results


# ---- 3. speed -----------------------------------------------------------------------------------------
def bench_speed(repeats: int) -> list[dict]:
    """Interleaved CPU-time medians (seconds) of the integer and float products and layers."""
    rng = np.random.default_rng(0)
    a8, b8 = rng.integers(-128, 128, (768, 128)).astype(np.int8), rng.integers(-128, 128, (128, 512)).astype(np.int8)
    a32, b32 = a8.astype(np.float32), b8.astype(np.float32)
    ai, bi = a8.astype(np.int32), b8.astype(np.int32)
    fc = Linear(128, 512, seed=0)
    rows = Tensor(rng.standard_normal((768, 128)).astype(np.float32))
    weight_only, dynamic = quantize_model(fc), quantize_model(fc, mode="dynamic")
    fns = {
        "NumPy float32 @ float32 (BLAS sgemm)": lambda: a32 @ b32,
        "NumPy int32 @ int32": lambda: ai @ bi,
        "integer_matmul, int8 → int32": lambda: integer_matmul(a8, 3, b8),
        "Linear(128, 512), float32": lambda: fc(rows),
        "QuantizedLinear, weight-only int8": lambda: weight_only(rows),
        "QuantizedLinear, dynamic int8": lambda: dynamic(rows),
    }
    if torch is not None:
        ta, tb, tfa, tfb = (torch.tensor(v) for v in (a8, b8, a32, b32))
        tlin = torch.nn.Linear(128, 512)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tdyn = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(tlin), {torch.nn.Linear},
                                                         dtype=torch.qint8)
        trows = torch.tensor(rows.numpy())
        fns.update({
            "PyTorch float32 @ float32": lambda: tfa @ tfb,
            "PyTorch torch._int_mm, int8 → int32": lambda: torch._int_mm(ta, tb),
            "PyTorch nn.Linear(128, 512), float32": lambda: tlin(trows),
            "PyTorch dynamic int8 Linear (fbgemm)": lambda: tdyn(trows),
        })
    with no_grad():
        medians = interleaved_medians(fns, repeats)
    return [{"name": name, "seconds": seconds} for name, seconds in medians.items()]


# ---- RESULTS.md -----------------------------------------------------------------------------------------
def write_results(info: dict, source: str, batches: int, gpt: list[dict], digits: dict, speed: list[dict],
                  repeats: int) -> None:
    fp32 = gpt[0]
    by_name = {row["name"]: row for row in gpt}
    int8, dyn, int4 = (by_name[n] for n in ("int8 weight-only, per channel", "int8 dynamic, per channel",
                                            "int4 weight-only, per channel"))
    lines = [
        SECTION, "",
        f"Measured {info['date']} with `python benchmarks/quantization.py` (`tito bench quantization`).", "",
        f"* CPU: {info['cpu']}, {info['cores']} logical cores visible; one thread. Python {info['python']}, "
        f"NumPy {info['numpy']} (BLAS: {info['blas']}), PyTorch {info['torch']}.",
        f"* The GPT: {source}. Validation loss: mean over the shakespeare milestone's {batches} validation "
        "batches of 12 × 64 characters, the same batches for every version. Bytes: the file module 07's "
        "`save_checkpoint` writes, measured on disk.",
        "* Weight-only: integers stored, float arithmetic (`quantize_model(model, bits=b, per_channel=...)`; weights "
        "symmetric, the embedding tables int8 with one scale per row unless said otherwise). Dynamic: int8 activations "
        "quantized at every call, int32 accumulation.",
        "",
        "### The issue's acceptance (the Shakespeare GPT)",
        "",
        "| check | measured | threshold | |",
        "|---|---:|---:|---|",
    ]
    checks = [("int8 weight-only per channel: loss − fp32", int8["loss"] - fp32["loss"], "≤", 0.01),
              ("int8 dynamic: loss − fp32", dyn["loss"] - fp32["loss"], "≤", 0.05),
              ("int4 weight-only per channel: loss − fp32", int4["loss"] - fp32["loss"], "≤", 0.15),
              ("fp32 checkpoint bytes / int8 checkpoint bytes", fp32["bytes"] / int8["bytes"], "≥", 3.5)]
    for label, value, relation, limit in checks:
        passed = value <= limit if relation == "≤" else value >= limit
        shown = f"{value:+.4f}" if relation == "≤" else f"{value:.2f}×"
        lines.append(f"| {label} | {shown} | {relation} {limit} | {'pass' if passed else 'FAIL'} |")
    lines += ["", "### The GPT against bits", "",
              "| version | validation loss | − fp32 | checkpoint bytes | fp32 / this |", "|---|---:|---:|---:|---:|"]
    for row in gpt:
        lines.append(f"| {row['name']} | {row['loss']:.4f} | {row['loss'] - fp32['loss']:+.4f} | {row['bytes']:,} | "
                     f"{fp32['bytes'] / row['bytes']:.2f}× |")
    lines += ["", "### The digits (test accuracy, %, 359 test images: one image is 0.28 points)", "",
              "| model | float32 | " + " | ".join(f"int{b} channel | int{b} tensor" for b in BITS) + " | int8 dynamic |",
              "|---|" + "---:|" * (2 + 2 * len(BITS))]
    for name, row in digits.items():
        cells = " | ".join(f"{100 * row[b, True]:.1f} | {100 * row[b, False]:.1f}" for b in BITS)
        lines.append(f"| {name} | {100 * row['float32']:.1f} | {cells} | {100 * row['int8 dynamic']:.1f} |")
    lines += [""] + [f"* digits {name}: int8 weight-only per channel loses "
                     f"{100 * (row['float32'] - row[8, True]):.2f} points, int8 dynamic "
                     f"{100 * (row['float32'] - row['int8 dynamic']):.2f} (the issue allows 0.5)."
                     for name, row in digits.items()]
    reference = {True: next(r["seconds"] for r in speed if r["name"].startswith("NumPy float32")),
                 False: next((r["seconds"] for r in speed if r["name"] == "PyTorch float32 @ float32"), None)}
    lines += ["", f"### Integer against float products ((768, 128) @ (128, 512), CPU time, median of {repeats} "
              "interleaved runs)", "",
              "| what | time | × its library's float32 product |", "|---|---:|---:|"]
    for row in speed:
        base = reference[not row["name"].startswith("PyTorch")]
        lines.append(f"| {row['name']} | {row['seconds'] * 1e3:.3f} ms | {row['seconds'] / base:.2f}× |")
    lines += [
        "",
        "NumPy sends float32 products to BLAS (`sgemm`: SIMD fused multiply-adds, blocked for the caches) and",
        "integer products to its own generic loop: there is no integer BLAS, so the integer product is many",
        "times slower than the float one, however few bits the integers have. PyTorch's int8 kernels (fbgemm",
        "and oneDNN, using this CPU's integer dot-product instructions where it has them, AVX-512 VNNI or AMX)",
        "are what int8 speed takes. Module 15's lesson (section 10) explains the difference.",
        "",
    ]
    write_section(SECTION, "\n".join(lines), RESULTS)
    console.print(f"[green]wrote the quantization section of {RESULTS}[/green]")


def main(argv: list[str] | None = None) -> int:
    args = _common.shakespeare_model_arguments(__doc__, "quantization", "few batches and epochs; an untrained GPT if none is saved", argv)
    info = machine(torch)
    console.print(f"[bold]Quantization benchmark[/bold] — {info['cpu']} ({info['cores']} cores), one thread; "
                  f"NumPy {info['numpy']} ({info['blas']}), PyTorch {info['torch']}, {info['date']}")
    batches, repeats = (2, 2) if args.quick else (shakespeare.EVAL_BATCHES, 15)
    model, source = gpt_model(args.checkpoint, args.quick)
    console.print(f"1. the GPT: {source}; {batches} validation batches")
    bits = (8, 4) if args.quick else BITS
    with tempfile.TemporaryDirectory() as folder:
        gpt = bench_gpt(model, batches, Path(folder), bits)
    console.print("2. the digits MLP and CNN (the milestones' recipes)")
    digits = bench_digits(digits_models(args.quick), bits)
    console.print("3. integer against float products")
    speed = bench_speed(repeats)
    for row in speed:
        console.print(f"  {row['name']:40s} {row['seconds'] * 1e3:9.3f} ms")
    if args.write_results:
        write_results(info, source, batches, gpt, digits, speed, repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
