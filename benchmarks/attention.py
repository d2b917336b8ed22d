#!/usr/bin/env python
"""Attention benchmarks: TinyTorch (module 12) next to PyTorch, in one process.

    python benchmarks/attention.py                 # full run (a few minutes on one core)
    python benchmarks/attention.py --quick         # smoke run: small sizes, few repeats
    python benchmarks/attention.py --write-results # also rewrite benchmarks/RESULTS.md
    python benchmarks/attention.py --device cuda   # CuPy + a GPU, against PyTorch on the GPU; with
                                                   # --write-results, its own "... on GPU: <name>" section

What is measured:
1. forward + backward of scaled_dot_product_attention (B=4, H=8, T=128, d=64, causal) and of
   MultiHeadAttention (B=4, T=128, E=512, H=8, causal), float32, ours and PyTorch's
   interleaved, median over >= 20 runs (5 with --quick);
2. peak memory of forward + backward, flash_attention versus the standard path, B=1, H=1, d=64:
   on the CPU by tracemalloc (T = 1024 ... 8192); on a GPU on the device itself, by CuPy's memory
   pool (T = 1024 ... 16384; see `_common.cupy_peak_bytes`), next to PyTorch's
   torch.cuda.max_memory_allocated for its F.scaled_dot_product_attention;
3. time per doubling of the sequence length.

On the CPU everything runs on ONE thread: the thread variables are set before NumPy is imported
and torch.set_num_threads(1) is called, so the comparison is kernel against kernel. On a GPU the
clock is read after synchronising both libraries.
"""
from __future__ import annotations

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once, when it starts

import argparse  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import (cupy_peak_bytes, Device, device_ready, doubling_table, gpu_facts_lines,  # noqa: E402
                     gpu_heading, gpu_speed_table, interleaved_medians, open_device,
                     write_section)

torch = _common.import_torch()  # None without PyTorch: the benchmark then measures TinyTorch alone
RESULTS = _common.RESULTS  # where --write-results writes (a test points it elsewhere)

from tinytorch.core.attention import (MultiHeadAttention, flash_attention,  # noqa: E402
                                      scaled_dot_product_attention)
from tinytorch.core.tensor import Tensor  # noqa: E402

SECTION = "## Attention (module 12)"
SCALING_COLUMNS = {"ours": "standard", "flash": "flash", **({"torch": "PyTorch"} if torch else {})}
console = Console(width=None if sys.stdout.isatty() else 120)


def sdpa_step(device: Device, B: int, H: int, T: int, d: int, flash: bool = False):
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((B, H, T, d), dtype=np.float32) for _ in range(4))
    Q, K, V = (device.tensor(a, requires_grad=True) for a in (q, k, v))
    G = device.tensor(g).data

    def ours():
        for t in (Q, K, V):
            t.grad = None
        out = flash_attention(Q, K, V, is_causal=True) if flash else \
            scaled_dot_product_attention(Q, K, V, is_causal=True)[0]
        out.backward(G)

    if torch is None:
        return ours, None
    tq, tk, tv = (device.torch(a, requires_grad=True) for a in (q, k, v))
    tg = device.torch(g)

    def theirs():
        for t in (tq, tk, tv):
            t.grad = None
        torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tg)

    return ours, theirs


def mha_step(device: Device, B: int, T: int, E: int, H: int):
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((B, T, E), dtype=np.float32) for _ in range(2))
    mha = MultiHeadAttention(E, H, seed=0, device=device.name)
    X = device.tensor(x, requires_grad=True)
    G = device.tensor(g).data
    params = mha.parameters()

    def ours():
        X.grad = None
        for p in params:  # set_to_none, as torch's zero_grad() does by default
            p.grad = None
        out, _ = mha(X, is_causal=True)
        out.backward(G)

    if torch is None:
        return ours, None, None
    theirs_mha = torch.nn.MultiheadAttention(E, H, batch_first=True).to(device.torch_device)
    tx, tg = device.torch(x, requires_grad=True), device.torch(g)
    blocked = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tx.device), 1)

    def theirs(need_weights: bool):
        def run():
            tx.grad = None
            theirs_mha.zero_grad(set_to_none=True)
            out, _ = theirs_mha(tx, tx, tx, attn_mask=blocked, is_causal=True, need_weights=need_weights,
                                average_attn_weights=False)
            out.backward(tg)
        return run

    return ours, theirs(False), theirs(True)


# ---- 1. speed against PyTorch -------------------------------------------------------------------
def bench_speed(device: Device, repeats: int) -> list[dict]:
    rows = []
    ours, theirs = sdpa_step(device, 4, 8, 128, 64)
    fns = {"ours": ours} if theirs is None else {"ours": ours, "torch": theirs}
    medians = interleaved_medians(fns, repeats, device.sync)
    rows.append({"name": "scaled_dot_product_attention fwd+bwd (B=4, H=8, T=128, d=64, causal)",
                 "ours": medians["ours"], "torch": medians.get("torch"),
                 "torch_label": "F.scaled_dot_product_attention"})
    ours, fused, explicit = mha_step(device, 4, 128, 512, 8)
    fns = {"ours": ours} if fused is None else {"ours": ours, "fused": fused, "explicit": explicit}
    medians = interleaved_medians(fns, repeats, device.sync)
    rows.append({"name": "MultiHeadAttention fwd+bwd (B=4, T=128, E=512, H=8, causal)",
                 "ours": medians["ours"], "torch": medians.get("fused"),
                 "torch_label": "nn.MultiheadAttention, need_weights=False"})
    if explicit is not None:
        rows.append({"name": "  same, PyTorch also returning per-head weights (as ours does)",
                     "ours": medians["ours"], "torch": medians["explicit"],
                     "torch_label": "nn.MultiheadAttention, need_weights=True"})
    where = "one thread" if device.name == "cpu" else "GPU, synchronised"
    table = Table(title=f"Forward + backward, float32, {where}, median of {repeats} interleaved runs")
    for col in ("benchmark", "TinyTorch (ms)", "PyTorch (ms)", "ratio (ours / PyTorch)"):
        table.add_column(col, justify="left" if col == "benchmark" else "right")
    for row in rows:
        ratio = f"{row['ours'] / row['torch']:.2f}x" if row["torch"] else "-"
        theirs = f"{row['torch'] * 1e3:.2f}" if row["torch"] else "not installed"
        table.add_row(row["name"], f"{row['ours'] * 1e3:.2f}", theirs, ratio)
    console.print(table)
    return rows


# ---- 2. memory: flash versus standard -------------------------------------------------------------
def peak_fwd_bwd(fn, T: int, d: int = 64) -> tuple[int, float]:
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((1, 1, T, d), dtype=np.float32) for _ in range(4)]
    gc.collect()
    tracemalloc.start()
    start = time.process_time()
    Q, K, V = (Tensor(a, requires_grad=True) for a in arrays[:3])
    fn(Q, K, V).backward(arrays[3])
    seconds = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, seconds


def bench_memory(lengths: list[int], skip_standard_above: int) -> list[dict]:
    rows = []
    standard = lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    flash = lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_size=64)
    for T in lengths:
        row = {"T": T, "flash": peak_fwd_bwd(flash, T)}
        row["standard"] = peak_fwd_bwd(standard, T) if T <= skip_standard_above else None
        rows.append(row)
    table = Table(title="Peak memory of forward + backward (tracemalloc), B=1, H=1, d=64, causal, float32")
    for col in ("T", "standard peak", "flash peak", "flash / standard", "standard time", "flash time"):
        table.add_column(col, justify="right")
    for row in rows:
        fp, ft = row["flash"]
        if row["standard"] is None:
            table.add_row(str(row["T"]), "skipped", f"{fp / 2**20:.2f} MiB", "-", "-", f"{ft * 1e3:.0f} ms")
        else:
            sp, st = row["standard"]
            table.add_row(str(row["T"]), f"{sp / 2**20:.2f} MiB", f"{fp / 2**20:.2f} MiB", f"1/{sp / fp:.1f}",
                          f"{st * 1e3:.0f} ms", f"{ft * 1e3:.0f} ms")
    console.print(table)
    return rows


def bench_memory_gpu(lengths: list[int]) -> list[dict]:
    """Peak GPU memory of forward + backward, measured on the device: ours (flash and standard)
    with CuPy's pool, PyTorch's F.scaled_dot_product_attention with its own allocator's counter."""
    standard = lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    flash = lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_size=64)

    def measure(fn, T: int, d: int = 64) -> tuple[int, int, float]:
        rng = np.random.default_rng(2)
        arrays = [rng.standard_normal((1, 1, T, d), dtype=np.float32) for _ in range(4)]

        def prepare():
            return [Tensor(a, requires_grad=i < 3, device="cuda") for i, a in enumerate(arrays)]

        def run(tensors):
            Q, K, V, G = tensors
            fn(Q, K, V).backward(G.data)

        return cupy_peak_bytes(prepare, run)

    def measure_torch(T: int, d: int = 64) -> int:
        q, k, v, g = (torch.randn(1, 1, T, d, device="cuda", requires_grad=i < 3) for i in range(4))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    for fn in (standard, flash):  # CuPy compiles each kernel on its first call: not in the times below
        measure(fn, 256)
    if torch is not None:  # nor PyTorch's one-time allocations (its kernels' workspaces)
        measure_torch(256)
    rows = []
    for T in lengths:
        row = {"T": T, "flash": measure(flash, T), "standard": measure(standard, T)}
        row["torch"] = measure_torch(T) if torch is not None else None
        rows.append(row)
    table = Table(title="Peak GPU memory of forward + backward (CuPy memory pool: bytes in use, above the inputs), "
                        "B=1, H=1, d=64, causal, float32")
    for col in ("T", "standard peak", "flash peak", "flash / standard", "standard time", "flash time",
                "PyTorch SDPA peak"):
        table.add_column(col, justify="right")
    for row in rows:
        (sp, _, st), (fp, _, ft) = row["standard"], row["flash"]
        theirs = f"{row['torch'] / 2**20:.2f} MiB" if row["torch"] is not None else "-"
        table.add_row(str(row["T"]), f"{sp / 2**20:.2f} MiB", f"{fp / 2**20:.2f} MiB", f"1/{sp / fp:.1f}",
                      f"{st * 1e3:.1f} ms", f"{ft * 1e3:.1f} ms", theirs)
    console.print(table)
    return rows


# ---- 3. time per doubling --------------------------------------------------------------------------
def bench_scaling(device: Device, lengths: list[int], repeats: int) -> list[dict]:
    rows = []
    for T in lengths:
        ours, theirs = sdpa_step(device, 1, 4, T, 64)
        flash, _ = sdpa_step(device, 1, 4, T, 64, flash=True)
        fns = {"ours": ours, "flash": flash}
        if theirs is not None:
            fns["torch"] = theirs
        rows.append({"T": T, **interleaved_medians(fns, repeats, device.sync)})
    table = Table(title=f"Time per doubling: attention fwd+bwd, B=1, H=4, d=64, causal, median of {repeats}")
    cols = ["T", "standard (ms)", "x prev", "flash (ms)", "x prev"] + (["PyTorch (ms)", "x prev"] if torch else [])
    for col in cols:
        table.add_column(col, justify="right")
    for i, row in enumerate(rows):
        prev = rows[i - 1] if i else None
        cells = [str(row["T"])]
        for key in ("ours", "flash") + (("torch",) if torch else ()):
            cells += [f"{row[key] * 1e3:.2f}", f"{row[key] / prev[key]:.2f}" if prev else ""]
        table.add_row(*cells)
    console.print(table)
    return rows


# ---- RESULTS.md ------------------------------------------------------------------------------------
def write_results(info: dict, speed: list, memory: list, scaling: list, args) -> None:
    lines = [
        SECTION,
        "",
        f"Measured {info['date']} with `python benchmarks/attention.py` (`tito bench attention`).",
        "",
        f"* CPU: {info['cpu']}, {info['cores']} logical cores visible; every measurement on **one thread**",
        "  (`OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1`, `torch.set_num_threads(1)`).",
        f"* Python {info['python']}, NumPy {info['numpy']} (BLAS: {info['blas']}), PyTorch {info['torch']}.",
        "* Times are CPU time of the process (`time.process_time`; one thread, so it is the work",
        "  itself), ours and PyTorch's runs interleaved, medians reported: CPU time is far less",
        "  disturbed than wall-clock time when other programs share the machine.",
        "",
        f"### Speed against PyTorch (forward + backward, float32, median of {args.repeats} interleaved runs)",
        "",
        "| benchmark | TinyTorch | PyTorch | ratio |",
        "|---|---:|---:|---:|",
    ]
    for row in speed:
        ratio = f"{row['ours'] / row['torch']:.2f}×" if row["torch"] else "-"
        theirs = f"{row['torch'] * 1e3:.2f} ms ({row['torch_label']})" if row["torch"] else "not installed"
        lines.append(f"| {row['name'].strip()} | {row['ours'] * 1e3:.2f} ms | {theirs} | {ratio} |")
    lines += [
        "",
        "Target: at most 1.5× PyTorch. TinyTorch's attention is one recorded op (`sdpa`) with a fused",
        "backward rule (one new T × T array forward, one backward, everything else in place); it always",
        "materialises the weights (it returns them), while PyTorch's `F.scaled_dot_product_attention`",
        "runs a fused flash kernel on the CPU. In MultiHeadAttention most of the time is the four",
        "E × E projections (BLAS matrix products in both libraries).",
        "",
        "### Memory: flash_attention versus the standard path (forward + backward, tracemalloc peak)",
        "",
        "B=1, H=1, d=64, causal, float32, block_size=64 (queries in blocks of 256).",
        "",
        "| T | standard | flash | flash / standard | standard time | flash time |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in memory:
        fp, ft = row["flash"]
        if row["standard"] is None:
            lines.append(f"| {row['T']} | skipped | {fp / 2**20:.2f} MiB | - | - | {ft * 1e3:.0f} ms |")
        else:
            sp, st = row["standard"]
            lines.append(f"| {row['T']} | {sp / 2**20:.2f} MiB | {fp / 2**20:.2f} MiB | 1/{sp / fp:.1f} | "
                         f"{st * 1e3:.0f} ms | {ft * 1e3:.0f} ms |")
    lines += [
        "",
        "Times in this table were taken under tracemalloc, which slows allocation; see the next table",
        "for clean timings. The standard path holds the T × T weights for the backward pass (and one more T × T array",
        "while it runs), so its peak grows 4× per doubling; flash_attention keeps only the output and",
        "one log-sum-exp per query, and recomputes tiles, so its peak grows 2× per doubling.",
        "",
        f"### Time per doubling of T (forward + backward, B=1, H=4, d=64, causal, median of {args.scaling_repeats})",
        "",
        *doubling_table(scaling, "T", SCALING_COLUMNS),
    ]
    lines += [
        "",
        "Attention is O(T²·d): each doubling of T approaches 4× as T grows (at these sizes the O(T·d)",
        "work — the output and the gradients of Q, K and V — still counts, so 3–4× is typical). PyTorch's",
        "causal CPU kernel, like our flash_attention, skips the key blocks that lie entirely in the future.",
        "",
        "### GPU",
        "",
        "GPU measurements have their own section, \"Attention (module 12) on GPU: <its name>\", written",
        "beside this one (never over it) by",
        "",
        "```bash",
        "pip install -e \".[gpu]\"          # CuPy for CUDA 12 (and a CUDA build of torch to compare)",
        "python benchmarks/attention.py --device cuda --write-results",
        "```",
        "",
    ]
    write_section(lines[0], "\n".join(lines), RESULTS)
    console.print(f"[green]wrote the attention section of {RESULTS}[/green]")


def write_gpu_results(info: dict, facts: dict, speed: list, memory: list, scaling: list, args) -> None:
    """The GPU's own section, after the CPU one: speed, memory measured on the device, scaling."""
    heading = gpu_heading(SECTION, facts)
    lines = [heading, "", *gpu_facts_lines(info, facts, "python benchmarks/attention.py --device cuda"), "",
             *gpu_speed_table(speed, args.repeats)]
    lines += [
        "",
        "### Memory on the device: flash_attention versus the standard path (forward + backward)",
        "",
        "B=1, H=1, d=64, causal, float32, block_size=64. Peak bytes in use above the inputs, read from a",
        "fresh CuPy memory pool after every allocation (`_common.cupy_peak_bytes`); PyTorch's column is",
        "`torch.cuda.max_memory_allocated` above its inputs, for F.scaled_dot_product_attention.",
        "",
        "| T | standard | flash | flash / standard | standard time | flash time | PyTorch SDPA |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in memory:
        (sp, _, st), (fp, _, ft) = row["standard"], row["flash"]
        theirs = f"{row['torch'] / 2**20:.2f} MiB" if row["torch"] is not None else "-"
        lines.append(f"| {row['T']} | {sp / 2**20:.2f} MiB | {fp / 2**20:.2f} MiB | 1/{sp / fp:.1f} | "
                     f"{st * 1e3:.1f} ms | {ft * 1e3:.1f} ms | {theirs} |")
    lines += [
        "",
        "The standard path holds T × T arrays (the weights, kept for backward, and their gradient), so",
        "its peak grows about 4× per doubling of T; flash_attention keeps the output and one",
        "log-sum-exp per query and recomputes tiles, so its peak grows about 2× per doubling. Times are",
        "of one run (synchronised), with CuPy's kernels already compiled.",
        "",
        f"### Time per doubling of T (forward + backward, B=1, H=4, d=64, causal, median of {args.scaling_repeats})",
        "",
        *doubling_table(scaling, "T", SCALING_COLUMNS),
    ]
    lines.append("")
    write_section(heading, "\n".join(lines), RESULTS, after=SECTION)
    console.print(f"[green]wrote the section {heading[3:]!r} of {RESULTS}[/green]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke run)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite {RESULTS.name}")
    args = parser.parse_args(argv)
    args.repeats = 5 if args.quick else 25
    args.scaling_repeats = 3 if args.quick else 7
    if not device_ready(args.device):
        return 2
    global torch
    device, info, facts = open_device(args.device, torch, console, "Attention benchmark")
    torch = device.torch_module  # None: not installed, or (on cuda) a build without CUDA
    speed = bench_speed(device, args.repeats)
    if device.name == "cpu":
        lengths = [256, 512] if args.quick else [1024, 2048, 4096, 8192]
        memory = bench_memory(lengths, skip_standard_above=8192)
    else:
        memory = bench_memory_gpu([512, 1024] if args.quick else [1024, 2048, 4096, 8192, 16384])
    scaling = bench_scaling(device, [64, 128, 256] if args.quick else [128, 256, 512, 1024, 2048],
                            args.scaling_repeats)
    if args.write_results:
        if facts is None:
            write_results(info, speed, memory, scaling, args)
        else:
            write_gpu_results(info, facts, speed, memory, scaling, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
