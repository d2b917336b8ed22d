#!/usr/bin/env python
"""Benchmarking (module 19): which of the course's model variants really differ, with confidence intervals.

    python benchmarks/benchmarking.py                 # full run (a few minutes on one core)
    python benchmarks/benchmarking.py --write-results # also rewrite the benchmarking section of RESULTS.md
                                                      # and its two Pareto plots
    python benchmarks/benchmarking.py --quick         # smoke run: few epochs and readings, an untrained GPT when
                                                      # none is saved (never written to RESULTS.md)

Everything is measured by module 19's harness (tinytorch.perf.benchmarking), on the CPU, one BLAS thread:
1. the digits MLP of the milestones (their data, 80/20 split and recipe: AdamW, cosine warm-up, 30 epochs) and
   its variants from modules 15 and 16: int8 and int4 weight-only per channel, 50% and 90% global magnitude
   pruning (masks, no fine-tuning), the first layer at rank 16. Accuracy on the 359 test images; latency at
   batch 1 (p50, p90, all variants interleaved); throughput on the whole test split; parameters; checkpoint
   bytes; FLOPs per image (module 14's count_flops); peak memory of the batched forward (peak_memory).
2. the Shakespeare GPT that `tito milestone run shakespeare` saved (milestones/quantize.py finds it and trains
   it first when missing) and its int8, int4 and 30%-pruned variants: cross-entropy on the whole validation
   split in fixed, non-overlapping windows; tokens per second of greedy generation at batch 1 (interleaved);
   parameters; checkpoint bytes; FLOPs per token.
3. each variant against fp32 (ratio, the interval of the difference, the verdict), three independent runs of
   the batch-1 latencies (do they rank the variants the same way?), and the Pareto fronts.

Times are CPU time of this process (time.process_time), as in the other CPU benchmarks: one thread, so it is
the work itself, and it does not grow when another program takes the core.
"""
from __future__ import annotations

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once, when it starts

import copy  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "milestones"))
import digits_mlp  # noqa: E402  milestones/: the digits data and its split
import shakespeare  # noqa: E402

from tinytorch.core.activations import ReLU  # noqa: E402
from tinytorch.core.autograd import no_grad  # noqa: E402
from tinytorch.core.layers import Dropout, Linear, Sequential  # noqa: E402
from tinytorch.core.losses import CrossEntropyLoss  # noqa: E402
from tinytorch.core.optimizers import AdamW  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.core.training import CosineWarmupLR, Trainer  # noqa: E402
from tinytorch.core.training import accuracy as batch_accuracy  # noqa: E402
from tinytorch.data.loader import DataLoader, TensorDataset  # noqa: E402
from tinytorch.models.transformer import GPT  # noqa: E402
from tinytorch.perf.benchmarking import (Measurement, accuracy, compare, lm_window_losses, measure,  # noqa: E402
                                         paired_difference, parameter_count, pareto_table, plot_pareto, ranking)
from tinytorch.perf.compression import low_rank, prune_global  # noqa: E402
from tinytorch.perf.profiling import count_flops, peak_memory  # noqa: E402
from tinytorch.perf.quantization import checkpoint_bytes, quantize_model  # noqa: E402

RESULTS = _common.RESULTS  # where --write-results writes (a test points it elsewhere)
SECTION = "## Benchmarking (module 19)"
CLOCK = time.process_time
console = Console(width=None if sys.stdout.isatty() else 140)


# ---- 1. digits -----------------------------------------------------------------------------------
def digits_variants(epochs: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """({name: model}, test inputs, test labels): the milestone's MLP trained with its recipe, and its variants."""
    x_train, y_train, x_test, y_test = digits_mlp.load_digits()
    train = DataLoader(TensorDataset(Tensor(x_train), Tensor(y_train)), batch_size=32, shuffle=True, seed=0)
    mlp = Sequential(Linear(64, 128, seed=1), ReLU(), Dropout(0.1, seed=2), Linear(128, 64, seed=3), ReLU(),
                     Linear(64, 10, seed=4))
    optimizer = AdamW(mlp.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=len(train), total_steps=epochs * len(train))
    Trainer(mlp, optimizer, CrossEntropyLoss(), scheduler=scheduler, clip=5.0, metric=batch_accuracy).fit(
        train, None, epochs=epochs, log_every=epochs)
    mlp.eval()
    variants = {"fp32": mlp, "int8": quantize_model(mlp, bits=8), "int4": quantize_model(mlp, bits=4)}
    for amount in (0.5, 0.9):
        pruned = copy.deepcopy(mlp)
        prune_global([m for m in pruned.modules() if isinstance(m, Linear)], amount)
        variants[f"pruned-{amount:.0%}"] = pruned
    thin = copy.deepcopy(mlp)
    thin[0] = low_rank(mlp[0], 16)
    variants["low-rank-16"] = thin
    return variants, x_test, y_test


def bench_digits(variants: dict, x_test: np.ndarray, y_test: np.ndarray, repeats: int, runs: int) -> dict:
    """Rows (one per variant), the batch-1 Measurements of each of `runs` independent runs, and the batched ones."""
    one, batch = Tensor(x_test[:1]), Tensor(x_test)
    with no_grad():
        runs_at_1 = [measure({n: (lambda m=m: m(one)) for n, m in variants.items()}, repeats=repeats, warmup=5,
                             clock=CLOCK) for _ in range(runs)]
        batched = measure({n: (lambda m=m: m(batch)) for n, m in variants.items()}, repeats=max(5, repeats // 20),
                          warmup=2, clock=CLOCK)
    rows = []
    for name, model in variants.items():
        with no_grad():
            flops, peak = count_flops(model, one), peak_memory(model, batch)
        at_1 = runs_at_1[0][name]
        rows.append({"name": name, "accuracy": accuracy(model, x_test, y_test), "p50_us": 1e6 * at_1.p50,
                     "p90_us": 1e6 * at_1.p90, "ci_us": f"[{1e6 * at_1.low:.1f}, {1e6 * at_1.high:.1f}]",
                     "images_per_s": len(y_test) / batched[name].median, "params": parameter_count(model),
                     "bytes": checkpoint_bytes(model), "flops": flops, "peak_kib": round(peak / 1024, 1)})
    return {"rows": rows, "runs": runs_at_1, "batched": batched}


# ---- 2. the GPT ----------------------------------------------------------------------------------
def gpt_model(checkpoint: Path, quick: bool) -> tuple[GPT, str]:
    """The milestone's trained GPT and where it came from; with --quick and no saved model, an untrained one."""
    return _common.shakespeare_model(checkpoint, quick, console)


def gpt_variants(model: GPT) -> dict:
    pruned = copy.deepcopy(model)
    prune_global([m for m in pruned.modules() if isinstance(m, Linear)], 0.3)
    return {"fp32": model, "int8": quantize_model(model, bits=8), "int4": quantize_model(model, bits=4),
            "pruned-30%": pruned}


def bench_gpt(variants: dict, max_batches: int | None, new_tokens: int, repeats: int) -> dict:
    """Rows (validation loss, tokens/s, bytes, ...) and the tokens/s Measurements, generation interleaved."""
    _, val, _ = shakespeare.load_text()
    context = variants["fp32"].max_seq_len
    prompt = val[:context // 2][None]
    seconds = measure({n: (lambda m=m: m.generate(prompt, new_tokens, temperature=0.0)) for n, m in variants.items()},
                      repeats=repeats, warmup=1, clock=CLOCK)
    rates = {n: Measurement(n, new_tokens / seconds[n].samples, "tokens/s") for n in variants}
    rows = []
    for name, model in variants.items():
        with no_grad():
            flops = count_flops(model, val[None, :context]) // context
        windows = lm_window_losses(model, val, context, batch_size=32, max_batches=max_batches)
        rows.append({"name": name, "val_loss": float(windows.mean()), "windows": windows,
                     "tokens_per_s": rates[name].median,
                     "ci": f"[{rates[name].low:.0f}, {rates[name].high:.0f}]",
                     "ms_per_token": 1e3 / rates[name].median, "params": parameter_count(model),
                     "bytes": checkpoint_bytes(model), "flops_per_token": flops})
    return {"rows": rows, "rates": rates, "context": context, "windows": (len(val) - 1) // context}


# ---- 3. verdicts ---------------------------------------------------------------------------------
def verdict_lines(measured: dict, scale: float, unit: str) -> list[str]:
    """Markdown rows: each variant against fp32 (ratio, difference with its interval, verdict)."""
    base = measured["fp32"]
    lines = [f"| variant | ratio to fp32 | difference ({unit}) | 95% interval | verdict |", "|---|---:|---:|---|---|"]
    for name, m in measured.items():
        if name == "fp32":
            continue
        c = compare(m, base)
        lines.append(f"| {name} | {c.ratio:.3f} | {scale * c.difference:+.2f} | "
                     f"[{scale * c.difference_low:+.2f}, {scale * c.difference_high:+.2f}] | {c.verdict} |")
    return lines


def quality_lines(rows: list[dict]) -> list[str]:
    """Markdown rows: each variant's validation loss minus fp32's on the same windows, with the paired
    bootstrap interval of the mean difference, and whether it is measurable."""
    base = next(r for r in rows if r["name"] == "fp32")
    lines = ["| variant | loss − fp32 (nats) | 95% interval | verdict |", "|---|---:|---|---|"]
    for row in rows:
        if row is base:
            continue
        change, low, high = paired_difference(row["windows"], base["windows"])
        verdict = "no measurable difference" if low <= 0 <= high else ("worse" if low > 0 else "better")
        lines.append(f"| {row['name']} | {change:+.5f} | [{low:+.5f}, {high:+.5f}] | {verdict} |")
    return lines


def measurable_pairs(measured: dict) -> set[tuple[str, str]]:
    """(winner, loser) for every pair of variants the harness tells apart."""
    names, found = list(measured), set()
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            c = compare(measured[a], measured[b])
            if c.winner is not None:
                found.add((c.winner, b if c.winner == a else a))
    return found


def ranking_check(runs: list[dict]) -> tuple[list[list[str]], bool, bool]:
    """(each run's ranking, whether all rankings are identical, whether no measurable pair flips between runs)."""
    rankings = [ranking(run) for run in runs]
    pairs = [measurable_pairs(run) for run in runs]
    flips = any((loser, winner) in other for p in pairs for (winner, loser) in p for other in pairs)
    return rankings, all(r == rankings[0] for r in rankings), not flips


def write_results(info: dict, source: str, digits: dict, gpt: dict, repeats: int, gpt_repeats: int,
                  new_tokens: int) -> None:
    rankings, same, consistent = ranking_check(digits["runs"])
    cols = ["name", "accuracy", "p50_us", "p90_us", "ci_us", "images_per_s", "params", "bytes", "flops", "peak_kib"]
    gcols = ["name", "val_loss", "tokens_per_s", "ci", "ms_per_token", "params", "bytes", "flops_per_token"]
    lines = [
        SECTION, "",
        f"Measured {info['date']} with `python benchmarks/benchmarking.py --write-results` "
        f"(`tito bench benchmarking`), every number by module 19's harness.",
        "",
        f"* Environment (`environment()`): {info['cpu']}, {info['cores']} logical cores; BLAS {info['blas']}; "
        f"Python {info['python']}, NumPy {info['numpy']}, TinyTorch {info['tinytorch']}; GPU {info['gpu']}.",
        "* Times: CPU time of this process (`time.process_time`), one BLAS thread, variants interleaved in a "
        "rotating order after a warm-up; medians with 95% percentile-bootstrap intervals (2,000 resamples). "
        "\"no measurable difference\" = the two intervals overlap.",
        "",
        f"### Digits MLP (64-128-64-10, the milestone's recipe): 359 test images; batch-1 latency, {repeats} "
        "interleaved readings per variant", "",
        pareto_table(digits["rows"], "accuracy", ["p50_us", "bytes"], higher_quality_is_better=True, columns=cols),
        "",
        "Pareto: accuracy (higher is better) against batch-1 p50 latency and checkpoint bytes. "
        "`ci_us` is the interval of the p50; `flops` per image (module 14's counter; a pruning mask does not remove "
        "FLOPs from a dense product); `peak_kib` the peak memory of the forward on all 359 images.",
        "",
        "Batch-1 latency against fp32:", "",
        *verdict_lines(digits["runs"][0], 1e6, "µs"),
        "",
        f"Three independent runs of the batch-1 latencies ({repeats} readings each) rank the variants "
        + ("**identically**" if same else "**differently**") + ": "
        + "; ".join(" < ".join(r) for r in rankings) + ". "
        + ("No pair the harness tells apart in one run is reversed in another."
           if consistent else "**A pair told apart in one run is reversed in another.**")
        + (" Where the rankings differ, the variants that swap places are ones the harness calls "
           "\"no measurable difference\"." if not same and consistent else ""),
        "",
        f"### Shakespeare GPT: {source}", "",
        f"Validation loss on the whole validation split ({gpt['windows']} non-overlapping windows of "
        f"{gpt['context']} characters); tokens/s of greedy generation at batch 1 ({new_tokens} new tokens after "
        f"a {gpt['context'] // 2}-character prompt, {gpt_repeats} interleaved readings per variant, KV cache on).",
        "",
        pareto_table(gpt["rows"], "val_loss", ["ms_per_token", "bytes"], columns=gcols),
        "",
        "Validation loss against fp32, on the same windows (paired bootstrap of the mean difference, 2,000 "
        "resamples of the windows):", "",
        *quality_lines(gpt["rows"]),
        "",
        "Generation speed against fp32:", "",
        *verdict_lines(gpt["rates"], 1.0, "tokens/s"),
        "",
        "![digits Pareto](benchmarking_pareto_digits.png) ![GPT Pareto](benchmarking_pareto_gpt.png)",
    ]
    _common.write_section(SECTION, "\n".join(lines), RESULTS)
    pictures = {  # saved through atomic_write (plot_pareto's own path= writes in place)
        "benchmarking_pareto_digits.png": plot_pareto(digits["rows"], "accuracy", "p50_us",
                                                      higher_quality_is_better=True,
                                                      title="digits MLP: accuracy against batch-1 latency"),
        "benchmarking_pareto_gpt.png": plot_pareto(gpt["rows"], "val_loss", "bytes",
                                                   title="Shakespeare GPT: validation loss against checkpoint bytes"),
    }
    for name, figure in pictures.items():
        _common.save_figure(figure, RESULTS.parent / name, dpi=100, metadata={"Software": None})
    console.print(f"wrote {RESULTS} ({SECTION}) and the two Pareto plots")


def main(argv: list[str] | None = None) -> int:
    args = _common.shakespeare_model_arguments(__doc__, "benchmarking", "few epochs and readings; an untrained GPT if none is saved", argv)
    info = _common.machine()
    console.print(f"[bold]Benchmarking (module 19)[/bold] — {info['cpu']} ({info['cores']} cores), "
                  f"BLAS {info['blas']}; NumPy {info['numpy']}, GPU {info['gpu']}, {info['date']}")
    epochs, repeats, runs = (3, 20, 3) if args.quick else (30, 300, 3)
    gpt_batches, new_tokens, gpt_repeats = (2, 16, 3) if args.quick else (None, 64, 9)

    console.print(f"1. the digits MLP ({epochs} epochs) and its variants")
    variants, x_test, y_test = digits_variants(epochs)
    digits = bench_digits(variants, x_test, y_test, repeats, runs)
    console.print(pareto_table(digits["rows"], "accuracy", ["p50_us", "bytes"], higher_quality_is_better=True))
    for line in verdict_lines(digits["runs"][0], 1e6, "µs")[2:]:
        console.print(line)
    rankings, same, consistent = ranking_check(digits["runs"])
    console.print(f"three runs, batch-1 latency: {' | '.join(' < '.join(r) for r in rankings)}; identical: {same}; "
                  f"no measurable pair reversed: {consistent}")

    model, source = gpt_model(args.checkpoint, args.quick)
    console.print(f"2. the GPT: {source}")
    gpt = bench_gpt(gpt_variants(model), gpt_batches, new_tokens, gpt_repeats)
    console.print(pareto_table(gpt["rows"], "val_loss", ["ms_per_token", "bytes"]))
    for line in quality_lines(gpt["rows"])[2:] + verdict_lines(gpt["rates"], 1.0, "tokens/s")[2:]:
        console.print(line)
    if args.write_results:
        write_results(info, source, digits, gpt, repeats, gpt_repeats, new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
