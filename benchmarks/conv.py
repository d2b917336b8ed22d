#!/usr/bin/env python
"""Convolution benchmarks: TinyTorch (module 09) next to PyTorch, in one process.

    python benchmarks/conv.py                 # full run (about a minute on one core)
    python benchmarks/conv.py --quick         # smoke run: small sizes, few repeats
    python benchmarks/conv.py --write-results # also rewrite the convolution section of benchmarks/RESULTS.md
    python benchmarks/conv.py --device cuda   # CuPy + a GPU, against PyTorch on the GPU; with
                                              # --write-results, its own "... on GPU: <name>" section

What is measured:
1. forward + backward of Conv2d (batch 32, 3 -> 16 channels, 3x3, 32x32, padding 1, float32),
   with and without the input's gradient, and of MaxPool2d(2) on its output; ours and
   PyTorch's interleaved, median over >= 20 runs (5 with --quick);
2. memory: the im2col column matrix against the input, and the peak of a forward + backward
   pass, as the image grows (tracemalloc on the CPU; on a GPU, CuPy's memory pool on the device,
   see `_common.cupy_peak_bytes`);
3. time as the image grows (side 16 ... 256): each doubling of the side quadruples the work.

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
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import (cupy_peak_bytes, Device, device_ready, doubling_table, gpu_facts_lines,  # noqa: E402
                     gpu_heading, gpu_speed_table, interleaved_medians, open_device,
                     write_section)

torch = _common.import_torch()  # None without PyTorch: the benchmark then measures TinyTorch alone
RESULTS = _common.RESULTS  # where --write-results writes (a test points it elsewhere)

from tinytorch.core.spatial import Conv2d, MaxPool2d, im2col  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402

SECTION = "## Convolution (module 09)"
console = Console(width=None if sys.stdout.isatty() else 120)


def conv_step(device: Device, batch: int, c_in: int, c_out: int, side: int, input_grad: bool = True):
    """(ours, theirs): one forward + backward of Conv2d(c_in, c_out, 3, padding=1) on (batch, c_in, side, side)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c_in, side, side), dtype=np.float32)
    g = rng.standard_normal((batch, c_out, side, side), dtype=np.float32)
    conv = Conv2d(c_in, c_out, 3, padding=1, seed=0, device=device.name)
    X = Tensor(x, requires_grad=input_grad, device=device.name)
    G = Tensor(g, device=device.name).data

    def ours():
        X.grad = None
        for p in conv.parameters():  # set_to_none, as torch's zero_grad() does by default
            p.grad = None
        conv(X).backward(G)

    if torch is None:
        return ours, None
    theirs_conv = torch.nn.Conv2d(c_in, c_out, 3, padding=1).to(device.torch_device)
    tx = torch.tensor(x, device=device.torch_device).requires_grad_(input_grad)
    tg = torch.tensor(g, device=device.torch_device)

    def theirs():
        tx.grad = None
        theirs_conv.zero_grad(set_to_none=True)
        theirs_conv(tx).backward(tg)

    return ours, theirs


def pool_step(device: Device, batch: int, channels: int, side: int):
    """(ours, theirs): one forward + backward of MaxPool2d(2) on (batch, channels, side, side)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, channels, side, side), dtype=np.float32)
    g = rng.standard_normal((batch, channels, side // 2, side // 2), dtype=np.float32)
    pool = MaxPool2d(2)
    X = Tensor(x, requires_grad=True, device=device.name)
    G = Tensor(g, device=device.name).data

    def ours():
        X.grad = None
        pool(X).backward(G)

    if torch is None:
        return ours, None
    tx = torch.tensor(x, device=device.torch_device).requires_grad_(True)
    tg = torch.tensor(g, device=device.torch_device)

    def theirs():
        tx.grad = None
        torch.nn.functional.max_pool2d(tx, 2).backward(tg)

    return ours, theirs


# ---- 1. speed against PyTorch -------------------------------------------------------------------
SPEED_CASES = [  # (name, step function, its arguments); --quick uses batch 4
    ("Conv2d(3, 16, 3, padding=1) fwd+bwd, input (32, 3, 32, 32), with the input's gradient",
     conv_step, dict(batch=32, c_in=3, c_out=16, side=32)),
    ("  same, no gradient for the input (a first layer)",
     conv_step, dict(batch=32, c_in=3, c_out=16, side=32, input_grad=False)),
    ("Conv2d(16, 32, 3, padding=1) fwd+bwd, input (32, 16, 16, 16)",
     conv_step, dict(batch=32, c_in=16, c_out=32, side=16)),
    ("MaxPool2d(2) fwd+bwd, input (32, 16, 32, 32)", pool_step, dict(batch=32, channels=16, side=32)),
]


def bench_speed(device: Device, repeats: int, quick: bool) -> list[dict]:
    rows = []
    for name, step, kwargs in SPEED_CASES:
        if quick:
            kwargs, name = {**kwargs, "batch": 4}, name.replace("(32,", "(4,")
        ours, theirs = step(device, **kwargs)
        fns = {"ours": ours} if theirs is None else {"ours": ours, "torch": theirs}
        medians = interleaved_medians(fns, repeats, device.sync)
        rows.append({"name": name, "ours": medians["ours"], "torch": medians.get("torch")})
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


# ---- 2. memory: the column matrix ---------------------------------------------------------------
def peak_fwd_bwd(batch: int, side: int, device: str = "cpu") -> int:
    """Peak bytes of one forward + backward of Conv2d(3, 16, 3, padding=1): tracemalloc on the CPU;
    on "cuda", bytes in use on the device (CuPy's pool) above the layer, the input and its gradient."""
    rng = np.random.default_rng(1)
    conv = Conv2d(3, 16, 3, padding=1, seed=0)
    x = rng.standard_normal((batch, 3, side, side), dtype=np.float32)
    g = rng.standard_normal((batch, 16, side, side), dtype=np.float32)
    if device == "cuda":
        def prepare():  # the layer, the input and its gradient: in the measured pool, not counted
            conv.to("cuda")
            return Tensor(x, requires_grad=True, device="cuda"), Tensor(g, device="cuda")

        def run(tensors):
            X, G = tensors
            conv(X).backward(G.data)

        return cupy_peak_bytes(prepare, run)[0]
    gc.collect()
    tracemalloc.start()
    X = Tensor(x, requires_grad=True)
    conv(X).backward(g)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def bench_memory(sides: list[int], batch: int, device: str = "cpu") -> list[dict]:
    rows = []
    if device == "cuda":
        peak_fwd_bwd(batch, sides[0], device)  # CuPy compiles each kernel on its first call
    for side in sides:
        x = np.zeros((batch, 3, side + 2, side + 2), np.float32)  # padded by 1
        cols = im2col(x, (3, 3), (1, 1))
        rows.append({"side": side, "input": batch * 3 * side * side * 4, "cols": cols.nbytes,
                     "peak": peak_fwd_bwd(batch, side, device)})
    how = "tracemalloc" if device == "cpu" else "on the device, CuPy memory pool"
    table = Table(title=f"Memory of Conv2d(3, 16, 3, padding=1), batch {batch}, float32, peak fwd+bwd: {how}")
    for col in ("side", "input", "column matrix", "cols / input", "peak fwd+bwd", "peak / input"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(str(row["side"]), f"{row['input'] / 2**20:.2f} MiB", f"{row['cols'] / 2**20:.2f} MiB",
                      f"{row['cols'] / row['input']:.2f}", f"{row['peak'] / 2**20:.2f} MiB",
                      f"{row['peak'] / row['input']:.1f}")
    console.print(table)
    return rows


# ---- 3. time as the image grows --------------------------------------------------------------------
def bench_scaling(device: Device, sides: list[int], batch: int, repeats: int) -> list[dict]:
    rows = []
    for side in sides:
        ours, theirs = conv_step(device, batch, 3, 16, side)
        fns = {"ours": ours} if theirs is None else {"ours": ours, "torch": theirs}
        rows.append({"side": side, **interleaved_medians(fns, repeats, device.sync)})
    table = Table(title=f"Time as the image grows: Conv2d(3, 16, 3, padding=1) fwd+bwd, batch {batch}, "
                        f"median of {repeats}")
    cols = ["side", "TinyTorch (ms)", "x prev"] + (["PyTorch (ms)", "x prev", "ratio"] if torch else [])
    for col in cols:
        table.add_column(col, justify="right")
    for i, row in enumerate(rows):
        prev = rows[i - 1] if i else None
        cells = [str(row["side"])]
        for key in ("ours", "torch") if torch else ("ours",):
            cells += [f"{row[key] * 1e3:.2f}", f"{row[key] / prev[key]:.2f}" if prev else ""]
        if torch:
            cells.append(f"{row['ours'] / row['torch']:.2f}x")
        table.add_row(*cells)
    console.print(table)
    return rows


# ---- RESULTS.md ------------------------------------------------------------------------------------
def memory_table(memory: list[dict]) -> list[str]:
    """Markdown lines of the memory table: input, column matrix and peak, per image side."""
    lines = ["| side | input | column matrix | cols / input | peak fwd+bwd | peak / input |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in memory:
        lines.append(f"| {row['side']} | {row['input'] / 2**20:.2f} MiB | {row['cols'] / 2**20:.2f} MiB | "
                     f"{row['cols'] / row['input']:.2f} | {row['peak'] / 2**20:.2f} MiB | "
                     f"{row['peak'] / row['input']:.1f} |")
    return lines


def write_results(info: dict, speed: list, memory: list, scaling: list, args) -> None:
    lines = [
        SECTION,
        "",
        f"Measured {info['date']} with `python benchmarks/conv.py` (`tito bench conv`).",
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
        theirs = f"{row['torch'] * 1e3:.2f} ms" if row["torch"] else "not installed"
        lines.append(f"| {row['name'].strip()} | {row['ours'] * 1e3:.2f} ms | {theirs} | {ratio} |")
    lines += [
        "",
        "Target: at most 2× PyTorch for the first row. TinyTorch's conv2d is one recorded op: im2col",
        "(a strided view of the padded input, copied once into the column matrix), one batched matrix",
        "product forward; backward, one product for the weight and, for the input, col2im computed one",
        "kernel offset at a time (9 small products, each scatter-added into place, so the column-shaped",
        "gradient is never built). PyTorch's CPU convolution (oneDNN or its own im2col kernels) does the same",
        "arithmetic without Python in between. Without the input's gradient both skip the input's",
        "gradient (for us: col2im). Max-pooling reuses im2col and col2im; most of its time is NumPy's",
        "argmax over windows of 4 values.",
        "",
        "Memory is time here: every large new NumPy array is backed by fresh pages that the kernel must",
        "hand out and zero. An earlier version that built the column-shaped gradient Wᵀ·g whole before",
        "col2im measured 1.53×, 1.68× and 1.97× on the first row in three runs, with 2,000–2,800 minor",
        "page faults per step (PyTorch: none); computing it one kernel offset at a time brought the",
        "faults after warm-up to zero and the ratio, in five runs on the same machine, to 1.35–1.43×.",
        "",
        f"### Memory: the column matrix (batch {args.memory_batch}, float32, tracemalloc peak of forward + backward)",
        "",
        *memory_table(memory),
    ]
    lines += [
        "",
        "With same padding and stride 1, each of the H·W output positions copies a 3×3 window of every",
        "channel: the column matrix is exactly 9× the input. It is saved for the backward pass; with",
        "the output and its gradient (16 channels against the input's 3) and the input's gradient the",
        "peak is about 23× the input. (Building the column-shaped gradient Wᵀ·g whole, then col2im,",
        "would add another 9×.)",
        "",
        f"### Time as the image grows (Conv2d(3, 16, 3, padding=1) fwd+bwd, batch {args.scaling_batch}, "
        f"median of {args.scaling_repeats})",
        "",
        *doubling_table(scaling, "side", {"ours": "TinyTorch", **({"torch": "PyTorch"} if torch else {})},
                        ratio=("ours", "torch") if torch else None),
    ]
    lines += [
        "",
        "The work is proportional to the number of output pixels, so each doubling of the side",
        "approaches 4× once fixed costs (Python, small arrays) stop mattering.",
        "",
        "### GPU",
        "",
        "TinyTorch's convolution and pooling run unchanged on CuPy arrays (every array call goes through",
        "`array_module`; im2col uses `lib.stride_tricks.as_strided`, which CuPy has). GPU measurements have",
        "their own section, \"Convolution (module 09) on GPU: <its name>\", written beside this one (never",
        "over it) by",
        "",
        "```bash",
        "pip install -e \".[gpu]\"          # CuPy for CUDA 12 (and a CUDA build of torch to compare)",
        "python benchmarks/conv.py --device cuda --write-results",
        "```",
        "",
    ]
    write_section(lines[0], "\n".join(lines), RESULTS)
    console.print(f"[green]wrote the convolution section of {RESULTS}[/green]")


def write_gpu_results(info: dict, facts: dict, speed: list, memory: list, scaling: list, args) -> None:
    """The GPU's own section, after the CPU one: speed, memory on the device, time as the image grows."""
    heading = gpu_heading(SECTION, facts)
    lines = [heading, "", *gpu_facts_lines(info, facts, "python benchmarks/conv.py --device cuda"), "",
             *gpu_speed_table(speed, args.repeats)]
    lines += [
        "",
        "PyTorch runs cuDNN's convolution kernels; ours is im2col, one batched cuBLAS product and col2im,",
        "each a handful of CuPy kernels launched from Python.",
        "",
        f"### Memory on the device (batch {args.memory_batch}, float32, peak in use during forward + backward)",
        "",
        "Peak bytes in use above the layer, the input and its upstream gradient, read from a fresh CuPy",
        "memory pool after every allocation (`_common.cupy_peak_bytes`).",
        "",
        *memory_table(memory),
    ]
    lines += [
        "",
        f"### Time as the image grows (Conv2d(3, 16, 3, padding=1) fwd+bwd, batch {args.scaling_batch}, "
        f"median of {args.scaling_repeats})",
        "",
        *doubling_table(scaling, "side", {"ours": "TinyTorch", **({"torch": "PyTorch"} if torch else {})},
                        ratio=("ours", "torch") if torch else None),
    ]
    lines += ["", "While the GPU is not full, a doubling of the side costs far less than 4×: the time is",
              "kernel launches, not arithmetic.", ""]
    write_section(heading, "\n".join(lines), RESULTS, after=SECTION)
    console.print(f"[green]wrote the section {heading[3:]!r} of {RESULTS}[/green]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke run)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite {RESULTS.name}'s convolution section")
    args = parser.parse_args(argv)
    args.repeats = 5 if args.quick else 25
    args.scaling_repeats = 3 if args.quick else 9
    args.memory_batch = 4 if args.quick else 32
    args.scaling_batch = 2 if args.quick else 8
    if not device_ready(args.device):
        return 2
    global torch
    device, info, facts = open_device(args.device, torch, console, "Convolution benchmark")
    torch = device.torch_module  # None: not installed, or (on cuda) a build without CUDA
    speed = bench_speed(device, args.repeats, args.quick)
    memory = bench_memory([16, 32] if args.quick else [16, 32, 64, 128], args.memory_batch, device.name)
    scaling = bench_scaling(device, [16, 32] if args.quick else [16, 32, 64, 128, 256], args.scaling_batch,
                            args.scaling_repeats)
    if args.write_results:
        if facts is None:
            write_results(info, speed, memory, scaling, args)
        else:
            write_gpu_results(info, facts, speed, memory, scaling, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
