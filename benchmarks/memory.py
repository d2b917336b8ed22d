#!/usr/bin/env python
"""Memory benchmarks (module 17): checkpointing against keeping, float16 against float32, predicted bytes.

    python benchmarks/memory.py                  # everything below (a few minutes)
    python benchmarks/memory.py --quick          # smoke run: short sequences, one repeat
    python benchmarks/memory.py --write-results  # also rewrite the "Memory (module 17)" section of
                                                 # benchmarks/RESULTS.md and benchmarks/memory_vs_length.png
    python benchmarks/memory.py --device cuda    # float16 against float32 on the GPU (CuPy); with
                                                 # --write-results, its own "Memory (module 17) on GPU: <name>" section

What is measured, on ONE thread (the milestone's GPT: 4 layers, 4 heads, width 128, no biases, batch 12):
1. activation checkpointing: the peak memory of a training step (module 14's `peak_memory`, i.e.
   tracemalloc: every NumPy allocation) with and without `checkpoint_blocks`, and the step's CPU time
   (`time.process_time`, the two variants interleaved, medians), at T = 64, 256, 512. The peak counts
   everything: the function measured builds the model and AdamW and runs two steps, the second one
   steady (the optimizer's state exists, the first step's graph is gone). Target at T = 512: at least
   40% less memory for at most 40% more time;
2. accounting: `training_memory`'s prediction (parameters, gradients, AdamW's state, the activations
   the graph holds, the backward pass's gradients in flight) against that measured peak (within 10%); `kv_cache_bytes` against what `GPT.make_cache`
   allocates (its arrays' nbytes, and the measured peak of making it);
3. float16 on the CPU: matrix products of float16 against float32 arrays, and a training step under
   `autocast` against the float32 step (batch 2: NumPy's float16 products are slow);
4. the plot: the peak memory of the training step against T for the GPT with standard attention,
   with flash attention in its blocks (module 12's `flash_attention`, swapped in here for the
   comparison), checkpointed, and checkpointed with flash attention.
With --device cuda: float16 against float32 products and the autocast step with CuPy on the GPU
(wall time after synchronising), written to a section of its own.
"""
from __future__ import annotations

import sys

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once, when it starts

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import (Device, device_ready, gpu_facts, gpu_facts_lines, gpu_heading, interleaved_medians,  # noqa: E402
                     machine, save_figure, write_section)
from tinytorch.core.attention import flash_attention  # noqa: E402
from tinytorch.core.layers import Module  # noqa: E402
from tinytorch.core.optimizers import AdamW  # noqa: E402
from tinytorch.core.tensor import Tensor, as_tensor  # noqa: E402
from tinytorch.models.transformer import GPT  # noqa: E402
from tinytorch.perf.memory import autocast, checkpoint_blocks, kv_cache_bytes, training_memory  # noqa: E402
from tinytorch.perf.profiling import peak_memory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
PLOT = ROOT / "benchmarks" / "memory_vs_length.png"
SECTION = "## Memory (module 17)"
console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
RECIPE = dict(vocab=65, embed=128, layers=4, heads=4, batch=12)


# ---- the models -----------------------------------------------------------------------------------
class FlashSelfAttention(Module):
    """A block's causal self-attention computed by module 12's flash_attention (for this comparison
    only): the same projections under the same names, so the model and its weights stay the same."""

    def __init__(self, attn: Module):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj
        self.num_heads, self.head_dim = attn.num_heads, attn.head_dim

    def forward(self, x: Any, cache: Any = None) -> tuple[Tensor, None]:
        x = as_tensor(x)
        B, T, E = x.shape
        q, k, v = (proj(x.reshape(B * T, E)).reshape(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        out = flash_attention(q, k, v, is_causal=True)
        return self.out_proj(out.permute(0, 2, 1, 3).reshape(B * T, E)).reshape(B, T, E), None


VARIANTS = {
    "standard attention": lambda model: model,
    "flash attention": lambda model: use_flash(model),
    "checkpointed": lambda model: checkpoint_blocks(model),
    "checkpointed + flash": lambda model: checkpoint_blocks(use_flash(model)),
}


def use_flash(model: GPT) -> GPT:
    for block in model.blocks:
        block.attn = FlashSelfAttention(block.attn)
    return model


def make_model(length: int, variant: str = "standard attention", device: str = "cpu") -> GPT:
    r = RECIPE
    model = GPT(r["vocab"], r["embed"], r["layers"], r["heads"], length, bias=False, seed=0)
    return VARIANTS[variant](model).to(device)


def batch(length: int, size: int = RECIPE["batch"], device: str = "cpu") -> tuple[Tensor, Tensor]:
    ids = np.random.default_rng(0).integers(0, RECIPE["vocab"], (2, size, length))
    return Tensor(ids[0], device=device), Tensor(ids[1], device=device)


def step_function(model: GPT, x: Tensor, y: Tensor, mixed: bool = False) -> Callable[[], None]:
    optimizer = AdamW(model.parameters(), lr=1e-3)

    def step() -> None:  # the loss and its graph die when the step returns
        optimizer.zero_grad()
        with autocast(enabled=mixed):
            _, loss = model(x, targets=y)
        loss.backward()
        optimizer.step()
    return step


def training_peak(length: int, variant: str) -> int:
    """Peak bytes of: build the model and AdamW, two training steps (the second is a steady one)."""
    def run() -> None:
        model = make_model(length, variant)
        step = step_function(model, *batch(length))
        step()
        step()
    return peak_memory(run)


# ---- 1 and 2. checkpointing, and the prediction ----------------------------------------------------------
def checkpointing(lengths: list[int], repeats: int) -> list[dict]:
    rows = []
    table = Table(title="Training step: checkpointed blocks against keeping everything (one thread)")
    for column in ("T", "peak kept", "peak checkpointed", "memory saved", "time kept", "time checkpointed",
                   "time added", "predicted (kept)", "measured / predicted"):
        table.add_column(column, justify="right")
    for length in lengths:
        kept, ckpt = make_model(length), make_model(length, "checkpointed")
        x, y = batch(length)
        times = interleaved_medians({"kept": step_function(kept, x, y), "ckpt": step_function(ckpt, x, y)}, repeats)
        peaks = {"kept": training_peak(length, "standard attention"), "ckpt": training_peak(length, "checkpointed")}
        predicted = training_memory(kept, AdamW(kept.parameters()), (RECIPE["batch"], length))
        row = dict(T=length, peak_kept=peaks["kept"], peak_ckpt=peaks["ckpt"], time_kept=times["kept"],
                   time_ckpt=times["ckpt"], predicted=predicted)
        rows.append(row)
        table.add_row(str(length), f"{peaks['kept'] / 2**20:.1f} MiB", f"{peaks['ckpt'] / 2**20:.1f} MiB",
                      f"{1 - peaks['ckpt'] / peaks['kept']:.0%}", f"{times['kept'] * 1e3:.0f} ms",
                      f"{times['ckpt'] * 1e3:.0f} ms", f"{times['ckpt'] / times['kept'] - 1:+.0%}",
                      f"{predicted['total'] / 2**20:.1f} MiB", f"{peaks['kept'] / predicted['total']:.3f}")
    console.print(table)
    return rows


def kv_cache(lengths: list[int]) -> list[dict]:
    rows = []
    for length in lengths:
        model = make_model(length)
        cache = model.make_cache(RECIPE["batch"])
        allocated = sum(a.nbytes for layer in cache.layers for a in (layer.keys, layer.values))
        measured = peak_memory(lambda: model.make_cache(RECIPE["batch"]))
        predicted = kv_cache_bytes(RECIPE["layers"], RECIPE["batch"], length, RECIPE["embed"], np.float32)
        rows.append(dict(T=length, predicted=predicted, allocated=allocated, measured=measured))
        console.print(f"KV cache, B={RECIPE['batch']}, T={length}: predicted {predicted:,} bytes, the arrays "
                      f"{allocated:,}, measured peak {measured:,}")
    return rows


# ---- 3. float16 -----------------------------------------------------------------------------------------
def float16_speed(device, sizes: list[int], repeats: int, quick: bool = False) -> dict:
    xp = device.cupy if device.name == "cuda" else np
    products = []
    for n in sizes:
        a32 = xp.asarray(np.random.default_rng(n).standard_normal((n, n)).astype(np.float32))
        a16 = a32.astype(np.float16)
        times = interleaved_medians({"float32": lambda: a32 @ a32, "float16": lambda: a16 @ a16},
                                    repeats if n <= 256 or device.name == "cuda" else max(1, repeats // 3), device.sync)
        products.append(dict(n=n, **times))
        console.print(f"{n} x {n} product: float32 {times['float32'] * 1e3:.3f} ms, float16 {times['float16'] * 1e3:.3f} ms "
                      f"(float16 / float32 = {times['float16'] / times['float32']:.2f})")
    size = RECIPE["batch"] if device.name == "cuda" else (1 if quick else 2)
    length = 32 if quick else 64
    model = make_model(length, device=device.name)
    x, y = batch(length, size, device.name)
    steps = interleaved_medians({"float32": step_function(model, x, y),
                                 "autocast": step_function(make_model(length, device=device.name), x, y, mixed=True)},
                                repeats if device.name == "cuda" else min(repeats, 3), device.sync)
    console.print(f"training step (batch {size}, T={length}): float32 {steps['float32'] * 1e3:.1f} ms, "
                  f"autocast {steps['autocast'] * 1e3:.1f} ms (autocast / float32 = {steps['autocast'] / steps['float32']:.2f})")
    return dict(products=products, step=dict(batch=size, T=length, **steps))


# ---- 4. the plot ------------------------------------------------------------------------------------------------
def memory_against_length(lengths: list[int]) -> dict[str, list[int]]:
    peaks = {variant: [training_peak(length, variant) for length in lengths] for variant in VARIANTS}
    table = Table(title="Peak memory of a training step (MiB)")
    table.add_column("T", justify="right")
    for variant in VARIANTS:
        table.add_column(variant, justify="right")
    for i, length in enumerate(lengths):
        table.add_row(str(length), *(f"{peaks[v][i] / 2**20:.1f}" for v in VARIANTS))
    console.print(table)
    return peaks


def save_plot(lengths: list[int], peaks: dict[str, list[int]], path: Path) -> Path:
    import matplotlib.ticker  # noqa: F401  (the axis formatter below)

    from tinytorch.plotting import pyplot  # the course's one backend switch: files only without a screen

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for variant, values in peaks.items():
        ax.plot(lengths, [v / 2**20 for v in values], marker="o", label=variant)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lengths, [str(t) for t in lengths])
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("peak memory of a training step (MiB)")
    ax.set_title(f"GPT {RECIPE['layers']}x{RECIPE['embed']}, batch {RECIPE['batch']}, AdamW (tracemalloc)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    console.print(f"saved {path}")
    return path


# ---- RESULTS.md ---------------------------------------------------------------------------------------------------
def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def write_results(info: dict, rows: list[dict], kv: list[dict], half: dict, lengths: list[int],
                  peaks: dict, args) -> None:
    last = rows[-1]
    saved, added = 1 - last["peak_ckpt"] / last["peak_kept"], last["time_ckpt"] / last["time_kept"] - 1
    lines = [
        SECTION, "",
        f"Measured {info['date']} with `python benchmarks/memory.py` (`tito bench memory`) on {info['cpu']}, "
        f"{info['cores']} logical cores visible; Python {info['python']}, NumPy {info['numpy']} ({info['blas']}).",
        "Everything on **one thread**. Peak memory is module 14's `peak_memory` (tracemalloc: every NumPy",
        "allocation) of a function that builds the model and AdamW and runs two training steps, so it counts",
        "everything: weights, AdamW's state, gradients, the graph and the backward pass's working memory.",
        "Times are CPU time (`time.process_time`), the variants interleaved, medians.", "",
        "### Activation checkpointing (`checkpoint_blocks`), the milestone's GPT", "",
        f"4 layers, 4 heads, width 128, no biases, batch {RECIPE['batch']}, AdamW; median of {args.repeats} steps.", "",
        "| T | peak, kept | peak, checkpointed | memory saved | step, kept | step, checkpointed | time added |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['T']} | {mib(r['peak_kept'])} | {mib(r['peak_ckpt'])} | "
                     f"{1 - r['peak_ckpt'] / r['peak_kept']:.0%} | {r['time_kept'] * 1e3:.0f} ms | "
                     f"{r['time_ckpt'] * 1e3:.0f} ms | {r['time_ckpt'] / r['time_kept'] - 1:+.0%} |")
    lines += [
        "", f"Target at T = {last['T']}: at least 40% less peak memory for at most 40% more time: "
        f"**{saved:.0%} less for {added:+.0%} time** ({'met' if saved >= 0.4 and added <= 0.4 else 'NOT met'}).",
        "A checkpointed step keeps each block's input and, during the backward pass, one block's graph at a",
        "time; it pays one more forward pass of every block (not of the embeddings, the head or the loss).", "",
        "### Predicted against measured (the kept GPT above)", "",
        "| T | parameters | gradients | AdamW state | activations (graph) | backward working | predicted | measured peak "
        "| measured / first four | measured / predicted |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = r["predicted"]
        four = p["total"] - p["backward_working"]
        lines.append(f"| {r['T']} | {mib(p['parameters'])} | {mib(p['gradients'])} | {mib(p['optimizer_state'])} | "
                     f"{mib(p['activations'])} | {mib(p['backward_working'])} | {mib(p['total'])} | "
                     f"{mib(r['peak_kept'])} | {r['peak_kept'] / four:.3f} | {r['peak_kept'] / p['total']:.3f} |")
    worst = max(r["peak_kept"] / r["predicted"]["total"] for r in rows)
    lines += [
        "", "`training_memory` adds up five parts. The first four are alive at the end of `backward()` in our engine",
        "(it keeps the whole graph until the loss is dropped); the fifth, `backward_working_bytes`, is the most",
        "gradient bytes the engine holds at once on the way down (the gradients waiting for their tensor's turn",
        "plus those the running rule returns), replayed from the graph's shapes without computing anything.",
        "Without it the prediction falls short by about one block's worth; with it the largest measured /",
        f"predicted above is {worst:.3f} (target: within 10%, {'met' if worst <= 1.10 else 'NOT met'}). What is left is",
        "what the rules make inside themselves (GELU's rule builds a few arrays of its B·T·4E input, attention's",
        "a T × T one), which the prediction does not count.", "",
        "### KV cache", "",
        f"| T | `kv_cache_bytes` (4 layers, batch {RECIPE['batch']}, width 128, float32) | the cache's arrays | measured peak of `make_cache` |",
        "|---:|---:|---:|---:|",
    ]
    for r in kv:
        lines.append(f"| {r['T']} | {r['predicted']:,} | {r['allocated']:,} | {r['measured']:,} |")
    step = half["step"]
    lines += [
        "", "### float16 on this CPU", "",
        f"| product | float32 | float16 | float16 / float32 |", "|---:|---:|---:|---:|",
    ]
    for r in half["products"]:
        lines.append(f"| {r['n']} × {r['n']} | {r['float32'] * 1e3:.3f} ms | {r['float16'] * 1e3:.3f} ms | "
                     f"{r['float16'] / r['float32']:.0f}× |")
    lines += [
        "", f"Training step of the GPT above at batch {step['batch']}, T = {step['T']}: float32 "
        f"{step['float32'] * 1e3:.0f} ms, under `autocast` {step['autocast'] * 1e3:.0f} ms "
        f"({step['autocast'] / step['float32']:.0f}× slower).",
        "NumPy has no fast float16 matrix product: BLAS multiplies float32 and float64, and for float16 NumPy",
        "runs its own loop. On a CPU, `autocast` teaches float16's numerics; it does not save time.", "",
        "### Memory against T", "",
        f"![Peak memory of a training step against T]({PLOT.name})", "",
        "| T | " + " | ".join(VARIANTS) + " |", "|---:|" + "---:|" * len(VARIANTS),
    ]
    for i, length in enumerate(lengths):
        lines.append(f"| {length} | " + " | ".join(mib(peaks[v][i]) for v in VARIANTS) + " |")
    lines += [
        "", "With standard attention every block keeps its B·H·T·T weights, so the peak grows faster than T, the",
        "more so the larger the share of attention (towards 4× per doubling); flash attention keeps one",
        "log-sum-exp per query instead (its backward recomputes the tiles), checkpointing keeps each block's",
        "input and one block's graph. Together the peak grows about linearly with T.", "",
        "GPU measurements have their own section, written by `python benchmarks/memory.py --device cuda --write-results`.",
        "",
    ]
    write_section(SECTION, "\n".join(lines), RESULTS)
    console.print(f"wrote the section {SECTION[3:]!r} of {RESULTS}")


def write_gpu_results(info: dict, facts: dict, half: dict, args) -> None:
    heading = gpu_heading(SECTION, facts)
    step = half["step"]
    lines = [heading, ""] + gpu_facts_lines(info, facts, "python benchmarks/memory.py --device cuda") + [
        "", "### float16 against float32 on the GPU (CuPy)", "",
        "| product | float32 | float16 | float16 / float32 |", "|---:|---:|---:|---:|"]
    for r in half["products"]:
        lines.append(f"| {r['n']} × {r['n']} | {r['float32'] * 1e3:.3f} ms | {r['float16'] * 1e3:.3f} ms | "
                     f"{r['float16'] / r['float32']:.2f} |")
    lines += ["", f"Training step of the milestone's GPT at batch {step['batch']}, T = {step['T']}: float32 "
              f"{step['float32'] * 1e3:.1f} ms, under `autocast` {step['autocast'] * 1e3:.1f} ms "
              f"(autocast / float32 = {step['autocast'] / step['float32']:.2f}).", ""]
    write_section(heading, "\n".join(lines), RESULTS, after=SECTION)
    console.print(f"wrote the section {heading[3:]!r} of {RESULTS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short sequences, one repeat (a smoke run)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite the memory section of {RESULTS.name}")
    args = parser.parse_args(argv)
    args.repeats = 1 if args.quick else 7
    if not device_ready(args.device):
        return 2
    device = Device(args.device)  # TinyTorch alone: these are its own tools, nothing to time against PyTorch
    info = machine()
    facts = gpu_facts() if device.name == "cuda" else None
    where = "one thread" if facts is None else f"GPU {facts['gpu']}, CuPy {facts['cupy']}, CUDA {facts['cuda_runtime']}"
    console.print(f"[bold]Memory benchmark[/bold] — {info['cpu']} ({info['cores']} cores), {where}; "
                  f"NumPy {info['numpy']} ({info['blas']}), {info['date']}")
    sizes = [64, 128] if args.quick else [64, 128, 256, 512]
    if device.name == "cuda":
        sizes = [256, 1024, 4096]
    started = time.perf_counter()
    half = float16_speed(device, sizes, args.repeats, args.quick)
    if device.name == "cuda":
        if args.write_results:
            write_gpu_results(info, facts, half, args)
        return 0
    lengths = [32, 64] if args.quick else [64, 256, 512]
    rows = checkpointing(lengths, args.repeats)
    kv = kv_cache(lengths)
    plot_lengths = [32, 64] if args.quick else [64, 128, 256, 512, 1024]
    peaks = memory_against_length(plot_lengths)
    console.print(f"done in {time.perf_counter() - started:.0f} s")
    if args.write_results:
        save_plot(plot_lengths, peaks, PLOT)
        write_results(info, rows, kv, half, plot_lengths, peaks, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
