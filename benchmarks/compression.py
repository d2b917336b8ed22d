#!/usr/bin/env python
"""Compression benchmarks (module 16): what structured, unstructured and low-rank compression do to the time of the GPT's MLP and training step.

    python benchmarks/compression.py                  # a minute or two
    python benchmarks/compression.py --quick          # smoke run: few repeats, targets not judged
    python benchmarks/compression.py --write-results  # also rewrite the Compression section of benchmarks/RESULTS.md

What is measured, on ONE thread, the variants' runs interleaved, median CPU time (`time.process_time`):
1. forward + backward of one MLP of the shakespeare milestone's GPT (E = 128, H = 512, no biases) on
   (12, 64, 128) float32 tokens: dense; half the hidden units removed (`prune_mlp_units`, 0.5); 90% of
   the weights pruned by magnitude (`prune_global` on fc and proj: a mask, the shapes unchanged);
   fc and proj each as two rank-64 Linears (`low_rank`). The same four in PyTorch (nn.Linear, tanh
   GELU; `torch.nn.utils.prune.global_unstructured` for the masks), so that the ratios can be compared;
2. one training step (forward, cross-entropy, backward, AdamW) of the milestone's GPT: dense; every
   MLP with half its units (`prune_mlps`); every MLP at rank 64; a 2-layer model of the same width;
3. the bytes of one 128 x 512 MLP weight stored densely, as a bitmask and as CSR, at several sparsities
   (`storage_bytes`: the real arrays' `.nbytes`).
The acceptance targets of module 16 are checked at the end: structured pruning of half the MLP's
hidden units makes the MLP's forward + backward at least 1.6x and the training step at least 1.2x
faster; the exit status is 1 when one is missed.
"""
from __future__ import annotations

import sys

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once, when it starts

import argparse  # noqa: E402
import copy  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import interleaved_medians, machine, write_section  # noqa: E402
from tinytorch.core.optimizers import AdamW, weight_decay_groups  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.models.transformer import GPT, MLP  # noqa: E402
from tinytorch.perf.compression import (low_rank, magnitude_mask, prune_global, prune_mlp_units,  # noqa: E402
                                        prune_mlps, storage_bytes)

console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
RECIPE = dict(vocab=65, embed=128, layers=4, heads=4, context=64, batch=12)
RANK = 64
MLP_TARGET, STEP_TARGET = 1.6, 1.2
SECTION = "## Compression (module 16)"


def factored(mlp: MLP, rank: int) -> MLP:
    """A copy of `mlp` whose fc and proj are low_rank(..., rank) pairs."""
    copied = copy.deepcopy(mlp)
    copied.fc, copied.proj = low_rank(mlp.fc, rank), low_rank(mlp.proj, rank)
    return copied


# ---- 1. the MLP -------------------------------------------------------------------------------------
def mlp_variants(torch) -> dict:
    dense = MLP(RECIPE["embed"], 4 * RECIPE["embed"], bias=False, seed=0)
    unstructured = copy.deepcopy(dense)
    prune_global([unstructured.fc, unstructured.proj], 0.9)
    ours = {"dense": dense, "50% of hidden units removed": prune_mlp_units(dense, 0.5),
            "90% of weights masked": unstructured, f"fc and proj at rank {RANK}": factored(dense, RANK)}
    tokens = np.random.default_rng(1).standard_normal((RECIPE["batch"], RECIPE["context"], RECIPE["embed"]))
    tokens = tokens.astype(np.float32)

    def ours_run(mlp):
        def run():
            mlp.zero_grad()
            mlp(Tensor(tokens, requires_grad=True)).sum().backward()
        return run

    fns = {("ours", name): ours_run(mlp) for name, mlp in ours.items()}
    if torch is not None:
        from torch.nn.utils import prune as torch_prune

        def torch_mlp(model: MLP):
            """The same MLP in PyTorch (our (in, out) weights transposed into nn.Linear's (out, in))."""
            layers = []
            for linear in (model.fc, model.proj):
                parts = list(linear) if hasattr(linear, "__iter__") else [linear]
                for part in parts:
                    twin = torch.nn.Linear(part.in_features, part.out_features, bias=False)
                    twin.weight.data = torch.tensor(part.weight.numpy().T.copy())
                    layers.append(twin)
                if linear is model.fc:
                    layers.append(torch.nn.GELU(approximate="tanh"))
            return torch.nn.Sequential(*layers)

        theirs = {name: torch_mlp(mlp) for name, mlp in ours.items() if name != "90% of weights masked"}
        masked = torch_mlp(dense)
        torch_prune.global_unstructured([(masked[0], "weight"), (masked[2], "weight")],
                                        torch_prune.L1Unstructured, amount=0.9)
        theirs["90% of weights masked"] = masked
        torch_tokens = torch.tensor(tokens)

        def torch_run(module):
            def run():
                module.zero_grad(set_to_none=True)
                module(torch_tokens.clone().requires_grad_(True)).sum().backward()
            return run

        fns.update({("torch", name): torch_run(module) for name, module in theirs.items()})
    return {"fns": fns, "names": list(ours), "params": {name: sum(p.size for p in m.parameters())
                                                         for name, m in ours.items()}}


# ---- 2. the training step ------------------------------------------------------------------------------
def step_variants() -> dict:
    r = RECIPE
    dense = GPT(r["vocab"], r["embed"], r["layers"], r["heads"], r["context"], bias=False, seed=0)
    low = copy.deepcopy(dense)
    for block in low.blocks:
        block.mlp = factored(block.mlp, RANK)
    models = {"dense (4 layers)": dense, "every MLP: 50% of units removed": prune_mlps(dense, 0.5),
              f"every MLP: fc and proj at rank {RANK}": low,
              "2 layers": GPT(r["vocab"], r["embed"], 2, r["heads"], r["context"], bias=False, seed=0)}
    x, y = np.random.default_rng(0).integers(0, r["vocab"], (2, r["batch"], r["context"]))
    x, y = Tensor(x), Tensor(y)

    def step_of(model):
        optimizer = AdamW(weight_decay_groups(model, 0.1), lr=1e-4, betas=(0.9, 0.99))

        def step():
            _, loss = model(x, targets=y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return step

    return {"fns": {name: step_of(model) for name, model in models.items()},
            "params": {name: sum(p.size for p in model.parameters()) for name, model in models.items()}}


# ---- 3. storage ------------------------------------------------------------------------------------------
def storage_rows() -> list[tuple]:
    weight = MLP(RECIPE["embed"], 4 * RECIPE["embed"], bias=False, seed=0).fc.weight.numpy()
    rows = []
    for s in (0.0, 0.5, 0.75, 0.9, 0.95, 0.99):
        sizes = storage_bytes(weight * magnitude_mask(weight, s))
        rows.append((s, sizes["dense"], sizes["bitmask"], sizes["csr"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    parser.add_argument("--write-results", action="store_true", help="rewrite the Compression section of RESULTS.md")
    args = parser.parse_args(argv)
    torch = _common.import_torch()
    info = machine(torch)
    console.print(f"[bold]Compression (module 16)[/bold] — {info['cpu']} ({info['cores']} cores), one thread; "
                  f"NumPy {info['numpy']} ({info['blas']}), PyTorch {info['torch']}, {info['date']}")
    mlp_repeats, step_repeats = (5, 3) if args.quick else (41, 21)

    mlps = mlp_variants(torch)
    mlp_times = interleaved_medians(mlps["fns"], mlp_repeats)
    table = Table(title=f"MLP forward + backward, (12, 64, 128) float32, E=128, H=512, median CPU time of {mlp_repeats}")
    for column in ("variant", "weights stored", "TinyTorch", "× dense", "PyTorch", "× dense (PyTorch)"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    mlp_lines = []
    for name in mlps["names"]:
        ours = mlp_times[("ours", name)]
        theirs = mlp_times.get(("torch", name))
        speed = mlp_times[("ours", "dense")] / ours
        torch_speed = mlp_times[("torch", "dense")] / theirs if theirs else None
        stored = f"{mlps['params'][name]:,}" if "masked" not in name else f"{mlps['params'][name]:,} + mask"
        cells = (name, stored, f"{ours * 1e3:.2f} ms", f"{speed:.2f}x",
                 f"{theirs * 1e3:.2f} ms" if theirs else "-", f"{torch_speed:.2f}x" if theirs else "-")
        table.add_row(*cells)
        mlp_lines.append("| " + " | ".join(cells) + " |")
    console.print(table)

    steps = step_variants()
    step_times = interleaved_medians(steps["fns"], step_repeats)
    table = Table(title=f"GPT training step (forward, cross-entropy, backward, AdamW), median CPU time of {step_repeats}")
    for column in ("model", "parameters", "TinyTorch", "× dense"):
        table.add_column(column, justify="left" if column == "model" else "right")
    dense_step = step_times["dense (4 layers)"]
    step_lines = []
    for name, seconds in step_times.items():
        cells = (name, f"{steps['params'][name]:,}", f"{seconds * 1e3:.1f} ms", f"{dense_step / seconds:.2f}x")
        table.add_row(*cells)
        step_lines.append("| " + " | ".join(cells) + " |")
    console.print(table)

    storage = storage_rows()
    table = Table(title="bytes of one 128 x 512 MLP weight (storage_bytes: the arrays' .nbytes)")
    for column in ("sparsity", "dense", "bitmask", "CSR (int32 indices)"):
        table.add_column(column, justify="right")
    storage_lines = []
    for s, dense, bitmask, csr in storage:
        cells = (f"{s:.0%}", f"{dense:,}", f"{bitmask:,}", f"{csr:,}")
        table.add_row(*cells)
        storage_lines.append("| " + " | ".join(cells) + " |")
    console.print(table)

    mlp_speedup = mlp_times[("ours", "dense")] / mlp_times[("ours", "50% of hidden units removed")]
    step_speedup = dense_step / step_times["every MLP: 50% of units removed"]
    checks = [(f"structured pruning (50% of hidden units): MLP forward + backward {mlp_speedup:.2f}x faster",
               mlp_speedup >= MLP_TARGET, f"target at least {MLP_TARGET}x"),
              (f"structured pruning (50% of hidden units): training step {step_speedup:.2f}x faster",
               step_speedup >= STEP_TARGET, f"target at least {STEP_TARGET}x")]
    for text, passed, target in checks:
        verdict = ("[bold green]PASS[/]" if passed else "[bold red]FAIL[/]") if not args.quick else "not judged (--quick)"
        console.print(f"{text} ({target}): {verdict}")

    if args.write_results:
        lines = [
            SECTION, "",
            f"Measured {info['date']} with `python benchmarks/compression.py` (`tito bench compression`) on "
            f"{info['cpu']}, {info['cores']} logical cores visible; Python {info['python']}, NumPy {info['numpy']} "
            f"({info['blas']}), PyTorch {info['torch']}.",
            "One thread, the variants' runs interleaved, median CPU time (`time.process_time`).", "",
            f"### One MLP of the shakespeare GPT, forward + backward (median of {mlp_repeats})", "",
            "| variant | weights stored | TinyTorch | × dense | PyTorch | × dense (PyTorch) |",
            "|---|---:|---:|---:|---:|---:|", *mlp_lines, "",
            "Removing hidden units shrinks both matrices, and the time falls with them. A 90% mask leaves the",
            "shapes as they were: the products cost what they cost dense, and the multiply by the mask (in",
            "both libraries: PyTorch's `prune` multiplies in a forward pre-hook) is one elementwise pass over",
            "the weights, small next to them. Rank 64 does 5/8 of the dense multiplications, in four",
            "products instead of two.", "",
            f"### Training step of the milestone's GPT (median of {step_repeats})", "",
            "| model | parameters | TinyTorch | × dense |", "|---|---:|---:|---:|", *step_lines, "",
            "### Bytes of one 128 x 512 MLP weight", "",
            "| sparsity | dense | bitmask | CSR (int32 indices) |", "|---:|---:|---:|---:|", *storage_lines, "",
            "A bitmask pays above 1/32 sparsity, CSR above about one half (two numbers per nonzero), and",
            "CSR beats the bitmask above about 97% (module 16 derives the crossovers).", "",
            "### Targets (module 16)", "",
            *[f"* {text} ({target}): {'PASS' if passed else 'FAIL'}" for text, passed, target in checks],
        ]
        console.print(f"wrote {write_section(SECTION, chr(10).join(lines))}")
    return 0 if args.quick or all(passed for _, passed, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
