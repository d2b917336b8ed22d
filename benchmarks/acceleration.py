#!/usr/bin/env python
"""Acceleration benchmarks (module 18): the fused GPT step against plain and PyTorch, each fusion
before and after, loops against vectorised code, tiles against BLAS.

    python benchmarks/acceleration.py                  # everything below (a few minutes)
    python benchmarks/acceleration.py --quick          # smoke run: few repeats
    python benchmarks/acceleration.py --write-results  # also rewrite the "Acceleration (module 18)"
                                                       # section of benchmarks/RESULTS.md
    python benchmarks/acceleration.py --threads 2      # only the training step (2.), both libraries on
                                                       # 2 threads, wall time; its own section

What is measured, on ONE thread, CPU time (`time.process_time`), variants interleaved, medians:
1. where the time goes: module 14's Profiler on one forward and backward pass of the milestone's GPT
   (4 layers, 4 heads, width 128, context 64, batch 12, no biases), plain and fused;
2. the training step (forward, cross-entropy, backward, AdamW with decay on the matrices only): module
   13's GPT with module 06's AdamW; the NumPy fusions, `fuse(model, FUSED_REPLACEMENTS)` with
   `FusedAdamW(compiled=False)`; the compiled kernels, `fuse(model)` with `FusedAdamW` (what both pick
   when Numba imports; this path is left out without Numba); and PyTorch eager (the same model,
   written in benchmarks/gpt.py), interleaved in the same run; first with glibc's default allocator,
   then after module 18's `keep_freed_memory()` (the process keeps freed memory: no page faults);
3. each fusion before and after: add + gelu against bias_gelu (with a bias, and gelu against bias_gelu
   without one) at the MLP's shape (768 × 512), forward and backward; module 13's layer_norm against
   blas_layer_norm at the activations' shape (12 × 64 × 128); log_softmax · one-hot against
   module 04's cross_entropy; AdamW's per-parameter step against FusedAdamW's flat step on the
   milestone's parameters (gradients set, no graph);
3b. each compiled kernel (module 18 section 6, as its recorded op, forward + backward) against the
   composed NumPy version and the NumPy fusion, beside its roofline bound: max(bytes the kernel moves /
   peak GB/s, FLOPs / peak GFLOP/s), both peaks from module 14's `machine_peak`; and each kernel's
   compile time (a fresh `numba.njit` of the same function, no cache), measured apart from the step;
4. vectorisation: a convolution looped over output positions against module 09's im2col `conv2d`;
   `blocked_matmul` at several tile sizes against one BLAS product, beside each tile's roofline
   (module 14's `machine_peak`).
The GPU parts of module 18 (CuPy kernels, CUDA graphs) are not written yet: this benchmark is CPU only.
Compilation never lands in a timed step: every variant is called once before timing (`measure`'s
warm-up), and the kernels are cached on disk (`cache=True`) where the package is writable.
"""
from __future__ import annotations

import sys

import _common

def threads_asked(argv: list[str]) -> int:
    """The number after --threads in argv (1 without it; argparse checks it again, with a message)."""
    if "--threads" in argv[:-1] and argv[argv.index("--threads") + 1].isdigit():
        return max(1, int(argv[argv.index("--threads") + 1]))
    return 1


THREADS = threads_asked(sys.argv)
_common.use_threads(THREADS)  # before NumPy is imported: BLAS reads the thread count once, when it starts

import argparse  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402

from _common import import_torch, interleaved_medians, machine, threaded_medians, write_section  # noqa: E402
from tinytorch.core.activations import gelu, log_softmax  # noqa: E402
from tinytorch.core.losses import cross_entropy  # noqa: E402
from tinytorch.core.optimizers import AdamW, weight_decay_groups  # noqa: E402
from tinytorch.core.spatial import conv2d  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.models.transformer import GPT  # noqa: E402
from tinytorch.models.transformer import layer_norm  # noqa: E402
from tinytorch.core.attention import composed_attention, scaled_dot_product_attention  # noqa: E402
from tinytorch.perf import acceleration  # noqa: E402
from tinytorch.perf.acceleration import (COMPILED_REPLACEMENTS, FUSED_REPLACEMENTS, FusedAdamW,  # noqa: E402
                                         ThreadedDataParallel, bias_gelu, blas_layer_norm, blocked_matmul,
                                         causal_attention, compiled_bias_gelu, compiled_cross_entropy,
                                         compiled_layer_norm, conv2d_loops, fuse, keep_freed_memory)
from tinytorch.perf.profiling import Profiler, machine_peak  # noqa: E402

torch = import_torch(THREADS)
if torch is not None:
    from gpt import TorchGPT, torch_groups  # noqa: E402  (benchmarks/gpt.py: the same model in PyTorch)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Acceleration (module 18)"
RECIPE = dict(vocab=65, embed=128, layers=4, heads=4, context=64, batch=12)
console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)


PARTS = f"fused, batch in {THREADS} parts"  # the --threads path that cuts each batch (ThreadedDataParallel)


PATHS = ("plain", "fused", "compiled") if acceleration.NUMBA_AVAILABLE else ("plain", "fused")


def milestone_model(path: str):
    """The milestone's GPT and its optimizer: "plain" (GPT, AdamW), "fused" (the NumPy fusions:
    fuse(GPT, FUSED_REPLACEMENTS), FusedAdamW(compiled=False)) or "compiled" (the Numba kernels:
    fuse(GPT, COMPILED_REPLACEMENTS), FusedAdamW(compiled=True)). True/False mean compiled/plain."""
    path = {True: "compiled" if acceleration.NUMBA_AVAILABLE else "fused", False: "plain"}.get(path, path)
    r = RECIPE
    model = GPT(r["vocab"], r["embed"], r["layers"], r["heads"], r["context"], bias=False, seed=0)
    groups = lambda: weight_decay_groups(model, 0.1)  # noqa: E731  (after fuse: the model's own tensors)
    if path == "plain":
        return model, AdamW(groups(), lr=1e-3, betas=(0.9, 0.99))
    model = fuse(model, COMPILED_REPLACEMENTS if path == "compiled" else FUSED_REPLACEMENTS)
    return model, FusedAdamW(groups(), lr=1e-3, betas=(0.9, 0.99), compiled=path == "compiled")


def batch() -> tuple[np.ndarray, np.ndarray]:
    return tuple(np.random.default_rng(0).integers(0, RECIPE["vocab"], (2, RECIPE["batch"], RECIPE["context"])))


# ---- 1. the profile ------------------------------------------------------------------------------
def profiles() -> dict[str, str]:
    x, y = batch()
    tables = {}
    for label in PATHS:
        model, _ = milestone_model(label)
        for _ in range(2):  # warm up: the first pass pays for first-touch allocations
            model(x, targets=y)[1].backward()
        with Profiler() as prof:
            _, loss = model(x, targets=y)
            loss.backward()
        tables[label] = prof.table(top=8)
        console.print(f"[bold]Profile of one forward + backward, {label}[/]")
        console.print(tables[label], markup=False)
    return tables


# ---- 2. the training step --------------------------------------------------------------------------
def training_step(repeats: int, threaded: bool = False) -> dict[str, float]:
    x, y = batch()
    fns = {}
    for label in PATHS:
        model, optimizer = milestone_model(label)

        def step(model=model, optimizer=optimizer):
            _, loss = model(x, targets=y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        fns[label] = step
    if threaded:  # the milestone's way on several threads: the fused step, each batch in THREADS parts
        model, optimizer = milestone_model(True)
        parallel = ThreadedDataParallel(model, THREADS)

        def parts_step():
            optimizer.zero_grad()
            parallel.forward_backward(x, y)
            optimizer.step()

        fns[PARTS] = parts_step
    if torch is not None:
        r = RECIPE
        torch.manual_seed(0)
        theirs = TorchGPT(r["vocab"], r["embed"], r["layers"], r["heads"], r["context"])
        theirs_opt = torch.optim.AdamW(torch_groups(theirs, 0.1), lr=1e-3, betas=(0.9, 0.99))
        tx, ty = torch.tensor(x), torch.tensor(y)

        def torch_step():
            _, loss = theirs(tx, ty)
            theirs_opt.zero_grad(set_to_none=True)
            loss.backward()
            theirs_opt.step()

        fns["torch"] = torch_step
    results = {}
    for allocator in ("default", "kept"):  # glibc's defaults first: keep_freed_memory cannot be undone
        if allocator == "kept" and not keep_freed_memory():
            break
        medians = threaded_medians(fns, max(3, repeats // 3)) if threaded else interleaved_medians(fns, repeats)
        for label in (name for name in medians if name != "torch"):
            ratio = f", {medians[label] / medians['torch']:.2f}x PyTorch eager" if "torch" in medians else ""
            console.print(f"training step, {label}, allocator {allocator}: {medians[label] * 1e3:.1f} ms{ratio}")
        if "torch" in medians:
            console.print(f"training step, PyTorch eager, allocator {allocator}: {medians['torch'] * 1e3:.1f} ms")
        results[allocator] = medians
    return results


# ---- 3. each fusion, before and after ---------------------------------------------------------------
def fusions(repeats: int) -> list[dict]:
    rng = np.random.default_rng(1)
    h = Tensor(rng.standard_normal((768, 512)).astype(np.float32), requires_grad=True)
    bias = Tensor(np.zeros(512, np.float32), requires_grad=True)
    ones = np.ones(h.shape, np.float32)
    logits = Tensor(rng.standard_normal((768, 65)).astype(np.float32), requires_grad=True)
    labels = rng.integers(0, 65, 768)
    onehot = np.eye(65, dtype=np.float32)[labels]
    activations = Tensor(rng.standard_normal((12, 64, 128)).astype(np.float32), requires_grad=True)
    norm_weight = Tensor(np.ones(128, np.float32), requires_grad=True)
    row_grad = rng.standard_normal(activations.shape).astype(np.float32)
    plain_model, plain_opt = milestone_model("plain")
    fused_model, fused_opt = milestone_model("fused")
    for model in (plain_model, fused_model):
        for p in model.parameters():
            p.grad = Tensor(np.full(p.shape, 1e-3, np.float32))
    cases = [
        ("bias + GELU (768 × 512), forward + backward", "add, gelu", "bias_gelu",
         lambda: gelu(h + bias).backward(ones), lambda: bias_gelu(h, bias).backward(ones)),
        ("GELU without a bias (768 × 512), forward + backward", "gelu", "bias_gelu",
         lambda: gelu(h).backward(ones), lambda: bias_gelu(h).backward(ones)),
        ("LayerNorm (768 × 128), forward + backward", "layer_norm", "blas_layer_norm",
         lambda: layer_norm(activations, norm_weight).backward(row_grad),
         lambda: blas_layer_norm(activations, norm_weight).backward(row_grad)),
        ("softmax + cross-entropy (768 × 65), forward + backward", "log_softmax · one-hot, sum", "cross_entropy",
         lambda: (-(log_softmax(logits, dim=-1) * onehot).sum() / 768).backward(),
         lambda: cross_entropy(logits, labels).backward()),
        (f"AdamW step, the milestone's {len(plain_opt.params)} parameters", "AdamW (per parameter)", "FusedAdamW (flat)",
         plain_opt.step, fused_opt.step),
    ]
    rows = []
    for what, before, after, slow, fast in cases:
        medians = interleaved_medians({"before": slow, "after": fast}, repeats)
        rows.append({"what": what, "before": before, "after": after,
                     "before_s": medians["before"], "after_s": medians["after"]})
        console.print(f"{what}: {before} {medians['before'] * 1e3:.3f} ms, {after} {medians['after'] * 1e3:.3f} ms, "
                      f"{medians['before'] / medians['after']:.2f}x")
    return rows


# ---- 3b. each compiled kernel against the composed NumPy version and its roofline ----------------------
def compile_seconds(dispatcher, *args) -> float:
    """Seconds of the first call of a fresh numba.njit of `dispatcher`'s Python function with the same
    options and no cache: the compilation a process pays where the disk cache cannot be used."""
    import time

    import numba

    options = {k: v for k, v in dispatcher.targetoptions.items() if k in ("fastmath", "parallel", "error_model")}
    fresh = numba.njit(cache=False, **options)(dispatcher.py_func)
    started = time.perf_counter()
    fresh(*args)
    return time.perf_counter() - started


def kernels(repeats: int, peaks: tuple[float, float], compile_times: bool = True) -> list[dict]:
    """Each compiled op, forward + backward at the milestone's shapes, against the composed NumPy version and
    the NumPy fusion, with its roofline bound. Bytes and FLOPs count what the compiled op's kernels do
    (float32, 4 bytes): each array element read or written once per pass over it; FLOPs count +, −, ·, /,
    comparisons, and exp, tanh and sqrt as one each (an estimate: the roofline is a bound, not a prediction).
    compile_times -- also compile each kernel afresh, without cache, and time it (seconds per kernel: left
    out of --quick runs)."""
    peak_gflops, peak_gbytes = peaks
    rng = np.random.default_rng(3)
    n, e, hidden, vocab, b, h, t, d = 768, 128, 512, 65, 12, 4, 64, 32
    x = Tensor(rng.standard_normal((n, e)).astype(np.float32), requires_grad=True)
    w = Tensor(np.ones(e, np.float32), requires_grad=True)
    gx = rng.standard_normal((n, e)).astype(np.float32)
    u = Tensor(rng.standard_normal((n, hidden)).astype(np.float32), requires_grad=True)
    ub = Tensor(np.zeros(hidden, np.float32), requires_grad=True)
    gu = np.ones((n, hidden), np.float32)
    z = Tensor(rng.standard_normal((n, vocab)).astype(np.float32), requires_grad=True)
    labels = rng.integers(0, vocab, n)
    onehot = np.eye(vocab, dtype=np.float32)[labels]
    q, k, v = (Tensor(rng.standard_normal((b, h, t, d)).astype(np.float32), requires_grad=True) for _ in range(3))
    go = rng.standard_normal((b, h, t, d)).astype(np.float32)
    optimizers = {}
    for label, make in (("plain", AdamW), ("numpy", lambda g, **o: FusedAdamW(g, compiled=False, **o)),
                        ("compiled", lambda g, **o: FusedAdamW(g, compiled=True, **o))):
        model, _ = milestone_model("plain")  # one model each: every optimizer updates its own parameters
        for p in model.parameters():
            p.grad = Tensor(np.full(p.shape, 1e-3, np.float32))
        optimizers[label] = make(weight_decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99))
    numpy_adamw, compiled_adamw = optimizers["numpy"], optimizers["compiled"]
    size = numpy_adamw.flat.size
    scores = b * h * t * t
    cases = [
        ("LayerNorm (768 × 128)", "layer_norm (module 13)", "blas_layer_norm",
         lambda: layer_norm(x, w).backward(gx), lambda: blas_layer_norm(x, w).backward(gx),
         lambda: compiled_layer_norm(x, w).backward(gx),
         4 * n * e * 5, n * e * (7 + 12), ["layer_norm_rows", "layer_norm_rows_backward"]),
        ("bias + GELU (768 × 512)", "add, gelu", "bias_gelu",
         lambda: gelu(u + ub).backward(gu), lambda: bias_gelu(u, ub).backward(gu),
         lambda: compiled_bias_gelu(u, ub).backward(gu),
         4 * n * hidden * 8, n * hidden * (10 + 14), ["bias_gelu_rows", "bias_gelu_rows_backward"]),
        ("softmax + cross-entropy (768 × 65)", "log_softmax · one-hot, sum", "cross_entropy (module 04)",
         lambda: (-(log_softmax(z, dim=-1) * onehot).sum() / n).backward(), lambda: cross_entropy(z, labels).backward(),
         lambda: compiled_cross_entropy(z, labels).backward(),
         4 * n * vocab * 4, n * vocab * (6 + 2), ["softmax_cross_entropy_rows", "softmax_cross_entropy_rows_backward"]),
        ("causal attention (12 × 4 heads, T 64, d 32)", "composed_attention", "sdpa (module 12)",
         lambda: composed_attention(q, k, v, is_causal=True)[0].backward(go),
         lambda: scaled_dot_product_attention(q, k, v, is_causal=True)[0].backward(go),
         lambda: causal_attention(q, k, v).backward(go),
         4 * (3 * b * h * t * d * 3 + scores * 6), 12 * scores * d + scores * (6 + 5),
         ["causal_softmax_rows", "causal_softmax_rows_backward"]),
        (f"AdamW update ({size:,} parameters)", "AdamW (per parameter)", "FusedAdamW (NumPy)",
         optimizers["plain"].step, numpy_adamw.step, compiled_adamw.step, 4 * size * 9, size * 14, ["adamw_kernel"]),
    ]
    compile_args = {
        "layer_norm_rows": lambda: (gx[:2], np.ones(e, np.float32), np.zeros(e, np.float32), 1e-5, gx[:2].copy(),
                                    np.empty(2), np.empty(2)),
        "layer_norm_rows_backward": lambda: (gx[:2], gx[:2], np.ones(e, np.float32), np.zeros(2), np.ones(2),
                                             gx[:2].copy(), np.zeros(e), np.zeros(e), 0, 2),
        "bias_gelu_rows": lambda: (gu[:2], np.zeros(hidden, np.float32), *(gu[:2].copy() for _ in range(3))),
        "bias_gelu_rows_backward": lambda: (gu[:2], gu[:2], gu[:2], gu[:2].copy(), np.zeros(hidden)),
        "softmax_cross_entropy_rows": lambda: (onehot[:2], labels[:2], onehot[:2].copy(), np.empty(2)),
        "softmax_cross_entropy_rows_backward": lambda: (onehot[:2], labels[:2], 0.5, onehot[:2].copy()),
        "causal_softmax_rows": lambda: (np.ones((1, 4, 4), np.float32),),
        "causal_softmax_rows_backward": lambda: (np.ones((1, 4, 4), np.float32), np.ones((1, 4, 4), np.float32)),
        "adamw_kernel": lambda: (*(np.ones(4, np.float32) for _ in range(4)), *(np.float32(0.5) for _ in range(8))),
    }
    rows = []
    for what, composed_label, fusion_label, composed, fusion, compiled, nbytes, flops, names in cases:
        medians = interleaved_medians({"composed": composed, "fusion": fusion, "compiled": compiled}, repeats)
        bound = max(nbytes / (peak_gbytes * 1e9), flops / (peak_gflops * 1e9))
        compile_s = (sum(compile_seconds(getattr(acceleration, name), *compile_args[name]()) for name in names)
                     if compile_times else float("nan"))
        rows.append({"what": what, "composed": composed_label, "fusion": fusion_label, **{f"{key}_s": medians[key]
                     for key in ("composed", "fusion", "compiled")}, "bytes": nbytes, "flops": flops,
                     "bound_s": bound, "compile_s": compile_s, "kernels": names})
        console.print(f"{what}: {composed_label} {medians['composed'] * 1e3:.3f} ms, {fusion_label} "
                      f"{medians['fusion'] * 1e3:.3f} ms, compiled {medians['compiled'] * 1e3:.3f} ms; roofline bound "
                      f"{bound * 1e3:.3f} ms ({nbytes / 1e6:.2f} MB, {flops / 1e6:.2f} MFLOP), {bound / medians['compiled']:.0%} "
                      f"of it reached; compiling {' + '.join(names)}: "
                      + (f"{compile_s:.2f} s" if compile_times else "not measured (--quick)"))
    return rows


# ---- 4. vectorisation --------------------------------------------------------------------------------
def vectorisation(repeats: int) -> dict:
    rng = np.random.default_rng(2)
    images = rng.standard_normal((16, 8, 16, 16)).astype(np.float32)
    kernels = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    if not np.allclose(conv2d_loops(images, kernels), conv2d(Tensor(images), Tensor(kernels)).numpy(), atol=1e-4):
        raise SystemExit("conv2d_loops and conv2d disagree: fix module 18 (or 09) before timing them")
    conv = interleaved_medians({"loops": lambda: conv2d_loops(images, kernels),
                                "im2col": lambda: conv2d(Tensor(images), Tensor(kernels))}, repeats)
    console.print(f"convolution 16×8×16×16 * 16×8×3×3: loops {conv['loops'] * 1e3:.2f} ms, "
                  f"im2col {conv['im2col'] * 1e3:.2f} ms, {conv['loops'] / conv['im2col']:.1f}x")
    n = 512
    peak_gflops, peak_gbytes = machine_peak(n=1024, copy_mib=64, repeats=3)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    if not np.allclose(blocked_matmul(a, b, 64), a @ b, rtol=1e-3, atol=1e-2):
        raise SystemExit("blocked_matmul differs from a @ b: fix module 18 before timing it")
    tiles = (16, 32, 64, 128, 256)
    fns = {"blas": lambda: a @ b, **{t: (lambda t=t: blocked_matmul(a, b, t)) for t in tiles}}
    medians = interleaved_medians(fns, max(3, repeats // 3))
    flops = 2 * n ** 3
    rows = []
    for tile in tiles:
        intensity = tile / 6  # a t×t tile product: 2t³ FLOPs on 3·4t² bytes
        rows.append({"tile": tile, "products": math.ceil(n / tile) ** 3, "s": medians[tile],
                     "gflops": flops / medians[tile] / 1e9, "intensity": intensity,
                     "roofline": min(peak_gflops, intensity * peak_gbytes)})
        console.print(f"blocked {n}³, tile {tile}: {medians[tile] * 1e3:.2f} ms, {rows[-1]['gflops']:.1f} GFLOP/s "
                      f"(roofline {rows[-1]['roofline']:.1f}); BLAS {medians['blas'] * 1e3:.2f} ms")
    return {"conv": conv, "n": n, "blas_s": medians["blas"], "blas_gflops": flops / medians["blas"] / 1e9,
            "tiles": rows, "peak": (peak_gflops, peak_gbytes)}


# ---- RESULTS.md ------------------------------------------------------------------------------------
def threads_heading(threads: int) -> str:
    return f"{SECTION}: the training step on {threads} threads"


def write_threads_results(info: dict, step: dict, args) -> None:
    """The training step on args.threads threads, its own section after the one-thread one."""
    heading = threads_heading(args.threads)
    lines = [heading, "",
             f"Measured {info['date']} with `python benchmarks/acceleration.py --threads {args.threads}` on {info['cpu']}, "
             f"{info['cores']} logical cores visible; NumPy {info['numpy']} ({info['blas']}), PyTorch {info['torch']}.",
             f"Both libraries on {args.threads} threads in one process; the variants take turns in blocks of 5 "
             f"steps ({max(3, args.repeats // 3)} rounds; the first step of each block not counted: the other library's "
             "threads may still be spinning), wall time (`time.perf_counter`: CPU time would add the threads up), "
             "medians. The model and the step are the one-thread section's.", "",
             "| allocator | path | step | PyTorch eager | ratio |", "|---|---|---:|---:|---:|"]
    for allocator, medians in step.items():
        for label in (name for name in medians if name != "torch"):
            theirs = (f"{medians['torch'] * 1e3:.1f} ms | {medians[label] / medians['torch']:.2f}×" if "torch" in medians
                      else "not measured | -")
            lines.append(f"| {allocator} | {label} | {medians[label] * 1e3:.1f} ms | {theirs} |")
    lines += ["", "NumPy runs only the matrix products on the extra threads; PyTorch also splits its elementwise,",
              "LayerNorm and attention kernels. The last path is how the milestone uses the extra threads: the fused",
              f"step with each batch cut into {args.threads} parts by rows, each part's forward and backward on its own thread",
              "(module 18's `ThreadedDataParallel`; BLAS shared out among the parts). The 2-thread target (issue 33: at most",
              "1.0× PyTorch's wall time) is for the whole Shakespeare recipe: `benchmarks/gpt.py --milestone` measures that (section",
              "\"GPT (module 13)\").", ""]
    write_section(heading, "\n".join(lines), RESULTS, after=SECTION)
    console.print(f"wrote the section {heading[3:]!r} of {RESULTS}")


def write_results(info: dict, tables: dict, step: dict, rows: list, vec: dict, kernel_rows: list, args) -> None:
    lines = [
        SECTION, "",
        f"Measured {info['date']} with `python benchmarks/acceleration.py` (`tito bench acceleration`) on "
        f"{info['cpu']}, {info['cores']} logical cores visible; Python {info['python']}, NumPy {info['numpy']} "
        f"({info['blas']}), PyTorch {info['torch']}.",
        "One thread; CPU time (`time.process_time`); the variants of each table interleaved in the same run,",
        f"medians of {args.repeats} (the tile sizes: {max(3, args.repeats // 3)}). CPU only: module 18's GPU parts "
        "(CuPy kernels, CUDA graphs) are not written yet.", "",
        "### Training step of the milestone's model", "",
        "4 layers, 4 heads, width 128, context 64, batch 12, no biases, tied head: forward, cross-entropy,",
        "backward, AdamW (decay on matrices only). Plain: module 13's GPT, module 06's AdamW. Fused: the NumPy",
        "fusions, `fuse(model, FUSED_REPLACEMENTS)` (bias + GELU as one op saving its tanh, LayerNorm with its row",
        "reductions as BLAS products) and `FusedAdamW(compiled=False)` (one flat buffer). Compiled: `fuse(model)`",
        "with Numba, the kernels of module 18 section 6 (LayerNorm, bias + GELU, the causal softmax, softmax +",
        "cross-entropy) and `FusedAdamW` with `adamw_kernel`" + ("" if acceleration.NUMBA_AVAILABLE else
                                                                " (not measured: Numba is not installed)") + ".", "",
        "The step ran twice, all three variants interleaved each time: first with glibc's default allocator,",
        "then after `keep_freed_memory()` (module 18 section 10: glibc keeps freed memory instead of returning",
        "it, so a step does not fault its pages back in; it applies to PyTorch in this process too).", "",
        "| allocator | path | step | PyTorch eager | ratio |", "|---|---|---:|---:|---:|",
    ]
    for allocator, medians in step.items():
        for label in (name for name in medians if name != "torch"):
            theirs = (f"{medians['torch'] * 1e3:.1f} ms | {medians[label] / medians['torch']:.2f}×" if "torch" in medians
                      else "not installed | -")
            lines.append(f"| {allocator} | {label} | {medians[label] * 1e3:.1f} ms | {theirs} |")
    lines += ["", "Fused / plain: " + ", ".join(f"{a} allocator {m['fused'] / m['plain']:.2f}" for a, m in step.items())
              + ("; compiled / plain: " + ", ".join(f"{a} allocator {m['compiled'] / m['plain']:.2f}"
                                                    for a, m in step.items()) if "compiled" in PATHS else "")
              + ". Target (issue 33): the compiled step at most 1.0× PyTorch eager, kept memory.", "",
              "### Each fusion, before and after", "",
              "| what | before | after | before | after | speed-up |", "|---|---|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['what']} | {row['before']} | {row['after']} | {row['before_s'] * 1e3:.3f} ms | "
                     f"{row['after_s'] * 1e3:.3f} ms | {row['before_s'] / row['after_s']:.2f}× |")
    conv = vec["conv"]
    gflops, gbytes = vec["peak"]
    lines += ["", "### Loops against vectorised code", "",
              "Convolution of 16 images of 8 × 16 × 16 with 16 kernels of 8 × 3 × 3 (valid, stride 1):", "",
              "| loop over the 196 output positions | im2col + one product (module 09) | ratio |", "|---:|---:|---:|",
              f"| {conv['loops'] * 1e3:.2f} ms | {conv['im2col'] * 1e3:.2f} ms | {conv['loops'] / conv['im2col']:.1f}× |",
              "", f"`blocked_matmul` of two {vec['n']} × {vec['n']} float32 matrices against one BLAS product "
              f"({vec['blas_s'] * 1e3:.2f} ms, {vec['blas_gflops']:.1f} GFLOP/s). This machine's peaks "
              f"(module 14's `machine_peak`): {gflops:.1f} GFLOP/s, {gbytes:.1f} GB/s. A tile's roofline is "
              "min(peak FLOP/s, intensity × peak bytes/s) with intensity t/6 FLOP/byte (2t³ FLOPs on 3·4t² bytes).", "",
              "| tile | tile products | time | GFLOP/s | a tile's roofline | × BLAS |", "|---:|---:|---:|---:|---:|---:|"]
    for row in vec["tiles"]:
        lines.append(f"| {row['tile']} | {row['products']:,} | {row['s'] * 1e3:.2f} ms | {row['gflops']:.1f} | "
                     f"{row['roofline']:.1f} GFLOP/s | {row['s'] / vec['blas_s']:.1f}× |")
    lines += ["", "Small tiles fall far below their roofline: the time is Python and NumPy's cost per call, not",
              "arithmetic or memory. Each tile product is itself a BLAS call, so tiling from Python can only add calls.",
              ""]
    if kernel_rows:
        lines += ["### Each compiled kernel against the composed NumPy version and its roofline", "",
                  "Each op forward + backward at the milestone's shapes (float32), interleaved, medians. The roofline",
                  "bound is max(bytes / peak GB/s, FLOPs / peak GFLOP/s) with this machine's peaks above; bytes and",
                  "FLOPs are counted from what the compiled kernels do (benchmarks/acceleration.py, `kernels`).",
                  "Compile time: a fresh `numba.njit` of the kernels, no cache, measured apart (a process with the",
                  "disk cache loads them instead; no timed step ever includes it).", "",
                  "| op | composed | time | NumPy fusion | time | compiled | roofline bound | bound / compiled | compile |",
                  "|---|---|---:|---|---:|---:|---:|---:|---:|"]
        for row in kernel_rows:
            lines.append(f"| {row['what']} | {row['composed']} | {row['composed_s'] * 1e3:.3f} ms | {row['fusion']} | "
                         f"{row['fusion_s'] * 1e3:.3f} ms | {row['compiled_s'] * 1e3:.3f} ms | {row['bound_s'] * 1e3:.3f} ms | "
                         f"{row['bound_s'] / row['compiled_s']:.0%} | {row['compile_s']:.2f} s |")
        lines += ["", "The peak GB/s is main memory's (module 14 copies a buffer larger than the caches): a kernel whose",
                  "arrays stay in the CPU's caches between calls can beat that bound (bound / compiled above 100%).", ""]
    lines += ["### Where the time goes (module 14's Profiler, one forward + backward, after warm-up)", ""]
    for label in tables:
        lines += [f"{label.capitalize()}:", "", "```", tables[label], "```", ""]
    write_section(SECTION, "\n".join(lines), RESULTS)
    console.print(f"wrote the section {SECTION[3:]!r} of {RESULTS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite the {SECTION[3:]} section of {RESULTS.name}")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="N > 1: only the training step, both libraries on N threads, wall time "
                             f"(with --write-results its own section, '{threads_heading(2)[3:]}' for N = 2)")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.threads != THREADS:
        parser.error(f"--threads {args.threads}: give a whole number of threads, at least 1")
    args.repeats = 3 if args.quick else 21
    info = machine(torch)
    if args.threads > 1:
        console.print(f"[bold]Acceleration benchmark[/] — {info['cpu']} ({info['cores']} cores), {args.threads} threads, "
                      f"the training step only; NumPy {info['numpy']} ({info['blas']}), PyTorch {info['torch']}, {info['date']}")
        step = training_step(args.repeats, threaded=True)
        if args.write_results:
            write_threads_results(info, step, args)
        return 0
    console.print(f"[bold]Acceleration benchmark[/] — {info['cpu']} ({info['cores']} cores), one thread; "
                  f"NumPy {info['numpy']} ({info['blas']}), PyTorch {info['torch']}, {info['date']}")
    tables = profiles()
    step = training_step(args.repeats)
    rows = fusions(args.repeats)
    vec = vectorisation(args.repeats)
    kernel_rows = kernels(args.repeats, vec["peak"], compile_times=not args.quick) if acceleration.NUMBA_AVAILABLE else []
    if args.write_results:
        write_results(info, tables, step, rows, vec, kernel_rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
