#!/usr/bin/env python
"""Profiler overhead (module 14): what the engine's hooks cost with nobody listening, and what a running profiler costs.

    python benchmarks/profiler_overhead.py                  # about a minute
    python benchmarks/profiler_overhead.py --quick          # smoke run: few repeats
    python benchmarks/profiler_overhead.py --write-results  # also rewrite its section of benchmarks/RESULTS.md

What is measured, on ONE thread, everything interleaved so that other load affects every variant alike:
1. the hooks with nobody listening: module 01's `record_op` and module 05's `apply_rule` as they are,
   against the same functions with their `if OP_LISTENERS:` blocks removed (their own source, minus
   those lines, compiled here), called in turn in blocks of many calls: the difference per call;
   then the milestone's GPT training step with every module's `record_op` and the engine's
   `apply_rule` swapped for the hook-free copies, against the step as it is;
2. the same step inside a `Profiler` (the AdamW step under `record_function`), against the plain
   step: the profiler's overhead (target: at most 10%, median CPU time); and the profiled step's
   rows (ops forward + backward, the AdamW.step label, "(not in an op)") against the plain step's
   median wall time, the profiler's own clock (target: the rows within 10% of the step).
"""
from __future__ import annotations

import _common

_common.one_thread()  # before NumPy is imported: BLAS reads the thread count once

import argparse  # noqa: E402
import inspect  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402

from _common import machine, write_section  # noqa: E402
import tinytorch.core.autograd as autograd  # noqa: E402
import tinytorch.core.tensor as tensor_module  # noqa: E402
from tinytorch.core.optimizers import AdamW, weight_decay_groups  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.models.transformer import GPT  # noqa: E402
from tinytorch.perf.profiling import Profiler, record_function  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
SECTION = "## Profiler (module 14)"
RECIPE = dict(vocab=65, embed=128, layers=4, heads=4, context=64, batch=12)


# ---- hook-free copies of the engine's two hook points -----------------------------------------------
def without_hooks(fn):
    """`fn` compiled from its own source with every `if OP_LISTENERS:` block removed, in fn's module."""
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    kept, skip_deeper_than = [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if skip_deeper_than is not None:
            if line.strip() and indent <= skip_deeper_than:
                skip_deeper_than = None
            else:
                continue
        if line.strip().startswith("if OP_LISTENERS:"):
            skip_deeper_than = indent
            continue
        kept.append(line)
    source = "\n".join(kept)
    if "if OP_LISTENERS" in source or len(kept) == len(lines):
        raise RuntimeError(f"could not remove the listener check from {fn.__name__}: the benchmark needs updating")
    namespace = dict(vars(sys.modules[fn.__module__]))
    exec(compile(source, f"<{fn.__name__} without hooks>", "exec"), namespace)
    return namespace[fn.__name__]


def swap_hooks(record_op, apply_rule) -> None:
    """Make every tinytorch module use `record_op` and the engine use `apply_rule` (module globals)."""
    for name, module in list(sys.modules.items()):
        if name.startswith("tinytorch.") and getattr(module, "record_op", None) in HOOKED_RECORD_OPS:
            module.record_op = record_op
    autograd.apply_rule = apply_rule


ORIGINAL_RECORD_OP, ORIGINAL_APPLY_RULE = tensor_module.record_op, autograd.apply_rule
BARE_RECORD_OP, BARE_APPLY_RULE = without_hooks(ORIGINAL_RECORD_OP), without_hooks(ORIGINAL_APPLY_RULE)
HOOKED_RECORD_OPS = (ORIGINAL_RECORD_OP, BARE_RECORD_OP)


def per_call_cost(calls: int, blocks: int) -> dict:
    """Median CPU seconds per call (and the blocks' IQR) of record_op and apply_rule, with and without the
    listener check, in blocks of `calls` calls, the variants' order alternating from block to block."""
    a, b = Tensor(np.ones(4), requires_grad=True), Tensor(np.ones(4), requires_grad=True)
    data = np.ones(4)
    out = a * b
    grad = np.ones(4)

    def record(fn):
        return lambda: [fn("mul", data, (a, b)) for _ in range(calls)]

    def apply(fn):
        return lambda: [fn(out, grad) for _ in range(calls)]

    variants = {"record_op": record(ORIGINAL_RECORD_OP), "record_op bare": record(BARE_RECORD_OP),
                "apply_rule": apply(ORIGINAL_APPLY_RULE), "apply_rule bare": apply(BARE_APPLY_RULE)}
    assert np.array_equal(BARE_RECORD_OP("mul", data, (a, b)).data, data)
    times = {name: [] for name in variants}
    for fn in variants.values():
        fn()
    order = list(variants.items())
    for block in range(blocks):
        for name, fn in order if block % 2 == 0 else order[::-1]:  # alternate: no variant always runs first
            start = time.process_time()
            fn()
            times[name].append((time.process_time() - start) / calls)
    result = {name: statistics.median(ts) for name, ts in times.items()}
    result.update({f"{name} iqr": float(np.subtract(*np.percentile(ts, [75, 25]))) for name, ts in times.items()})
    return result


def check_alone_ns(number: int) -> float:
    """Nanoseconds of `if OP_LISTENERS: pass` with the list empty, minus those of `pass` (the best of 7
    timeit runs each, OP_LISTENERS looked up as a global, as in record_op): the check by itself."""
    namespace = {"OP_LISTENERS": tensor_module.OP_LISTENERS}
    assert not tensor_module.OP_LISTENERS
    check = min(timeit.repeat("if OP_LISTENERS:\n    pass", globals=namespace, number=number, repeat=7))
    empty = min(timeit.repeat("pass", globals=namespace, number=number, repeat=7))
    return (check - empty) / number * 1e9


# ---- the GPT step ---------------------------------------------------------------------------------------
def gpt_step():
    r = RECIPE
    model = GPT(r["vocab"], r["embed"], r["layers"], r["heads"], r["context"], bias=False, seed=0)
    optimizer = AdamW(weight_decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99))
    x, y = np.random.default_rng(0).integers(0, r["vocab"], (2, r["batch"], r["context"]))

    def step():
        _, loss = model(x, targets=y)
        optimizer.zero_grad()
        loss.backward()
        with record_function("AdamW.step"):
            optimizer.step()

    return step


def step_overhead(repeats: int) -> dict:
    """Interleaved runs of the plain step, the step without hooks, and the step inside a Profiler."""
    step = gpt_step()
    runs = {"plain": [], "no hooks": [], "profiled": []}
    rows = {"ops forward": [], "ops backward": [], "AdamW.step": [], "not in an op": [], "wall": []}
    events = {}

    def profiled():
        with Profiler() as prof:
            step()
        return prof

    def no_hooks():
        swap_hooks(BARE_RECORD_OP, BARE_APPLY_RULE)
        try:
            step()
        finally:
            swap_hooks(ORIGINAL_RECORD_OP, ORIGINAL_APPLY_RULE)

    for _ in range(2):  # warm-up: the optimizer's state exists from the first step on
        step()
        no_hooks()
        profiled()
    for _ in range(repeats):
        for name in runs:
            wall, cpu = time.perf_counter(), time.process_time()
            prof = profiled() if name == "profiled" else no_hooks() if name == "no hooks" else step()
            runs[name].append((time.process_time() - cpu, time.perf_counter() - wall))
            if name == "profiled":
                ops = prof.by_op().values()
                rows["ops forward"].append(sum(s.forward_s for s in ops))
                rows["ops backward"].append(sum(s.backward_s for s in ops))
                rows["AdamW.step"].append(prof.regions["AdamW.step"].forward_s)
                rows["not in an op"].append(prof.outside_s)
                rows["wall"].append(prof.wall_s)
                events = {"ops": sum(s.calls for s in ops), "rules": sum(s.backward_calls for s in ops)}
    result = {name: {"cpu": statistics.median(c for c, _ in ts), "wall": statistics.median(w for _, w in ts),
                     "cpu_iqr": float(np.subtract(*np.percentile([c for c, _ in ts], [75, 25])))}
              for name, ts in runs.items()}
    result["rows"] = {name: statistics.median(v) for name, v in rows.items()}
    result["events"] = events
    return result


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def report(cost: dict, step: dict, repeats: int, blocks: int, calls: int) -> list[str]:
    """Print the results; return the lines of the RESULTS.md section's tables."""
    check_ns = {k: (cost[k] - cost[f"{k} bare"]) * 1e9 for k in ("record_op", "apply_rule")}
    events = step["events"]
    checks = events["ops"] + 2 * events["rules"]  # one in record_op, two in apply_rule
    checks_per_step = checks * cost["check alone"]
    plain, bare, profiled = step["plain"], step["no hooks"], step["profiled"]
    rows = step["rows"]
    in_rows = rows["ops forward"] + rows["ops backward"] + rows["AdamW.step"]
    lines = [
        f"### Nobody listening: the hooks' check (median of {blocks} interleaved blocks of {calls:,} calls)", "",
        "| function | as it is (IQR) | without its `if OP_LISTENERS:` (IQR) | difference |", "|---|---:|---:|---:|",
        *(f"| `{k}` | {cost[k] * 1e9:.0f} ns ({cost[f'{k} iqr'] * 1e9:.0f}) | {cost[f'{k} bare'] * 1e9:.0f} ns "
          f"({cost[f'{k} bare iqr'] * 1e9:.0f}) | {check_ns[k]:+.0f} ns ({check_ns[k] / (cost[f'{k} bare'] * 1e9):+.1%}) |"
          for k in ("record_op", "apply_rule")),
        "", "The difference is the check's cost plus the noise of the blocks (their interquartile ranges, in",
        "brackets): where it is smaller than those, the check is too cheap to be measured this way.", "",
        f"The check by itself (`if OP_LISTENERS: pass` against `pass`, timeit, best of 7): "
        f"{cost['check alone']:.1f} ns. One training step of the milestone's GPT records {events['ops']} ops and "
        f"runs {events['rules']} rules, {checks} checks: {checks_per_step / 1e3:.2f} µs of a step of "
        f"{plain['cpu'] * 1e3:.1f} ms ({checks_per_step / 1e9 / plain['cpu']:.4%}). Measured end to end, the step with "
        f"every `record_op` and `apply_rule` swapped for the hook-free copies takes {bare['cpu'] * 1e3:.1f} ms, "
        f"as it is {plain['cpu'] * 1e3:.1f} ms ({plain['cpu'] / bare['cpu'] - 1:+.1%}; the interquartile range of "
        f"the {repeats} interleaved runs is {plain['cpu_iqr'] * 1e3:.1f} ms as it is, {bare['cpu_iqr'] * 1e3:.1f} ms "
        "without the hooks).", "",
        f"### A running profiler on the GPT training step (median of {repeats} interleaved runs)", "",
        "4 layers, 4 heads, width 128, context 64, batch 12, no biases: forward, cross-entropy, `zero_grad`,",
        "backward, AdamW (under `record_function(\"AdamW.step\")`).", "",
        "| | CPU time | wall time |", "|---|---:|---:|",
        f"| plain step | {plain['cpu'] * 1e3:.1f} ms | {plain['wall'] * 1e3:.1f} ms |",
        f"| inside a `Profiler` | {profiled['cpu'] * 1e3:.1f} ms | {profiled['wall'] * 1e3:.1f} ms |",
        f"| **profiler overhead** | **{profiled['cpu'] / plain['cpu'] - 1:+.1%}** | {profiled['wall'] / plain['wall'] - 1:+.1%} |",
        "", f"Target: at most +10% (CPU time): {verdict(profiled['cpu'] / plain['cpu'] <= 1.10)}.", "",
        "The profiled step's rows (the profiler's clock, wall time), against the plain step's median wall time:", "",
        "| row | time | share of the plain step |", "|---|---:|---:|",
        *(f"| {name} | {rows[name] * 1e3:.2f} ms | {rows[name] / plain['wall']:.1%} |"
          for name in ("ops forward", "ops backward", "AdamW.step", "not in an op")),
        f"| **ops and the AdamW.step label** | **{in_rows * 1e3:.2f} ms** | **{in_rows / plain['wall']:.1%}** |",
        f"| every row (= the profiled wall time) | {rows['wall'] * 1e3:.2f} ms | {rows['wall'] / plain['wall']:.1%} |",
        "", f"Target: the ops and the label within 10% of the step (90% to 110%): "
        f"{verdict(0.9 <= in_rows / plain['wall'] <= 1.1)}.",
    ]
    for line in lines:
        console.print(line)
    return lines


def write_results(info: dict, lines: list[str]) -> None:
    text = [SECTION, "",
            f"Measured {info['date']} with `python benchmarks/profiler_overhead.py` (`tito bench profiler_overhead`) "
            f"on {info['cpu']}, {info['cores']} logical cores visible; Python {info['python']}, NumPy {info['numpy']}; "
            "**one thread**.", "",
            "The profiler listens at the engine's two hook points: module 01's `record_op` (after every op) and",
            "module 05's `apply_rule` (around every backward rule), through one list, `OP_LISTENERS`. With nobody",
            "listening each pays one truthiness check of that empty list per call; the copies without the check",
            "are the functions' own source with the `if OP_LISTENERS:` blocks removed, compiled by the benchmark.",
            "", *lines, ""]
    write_section(SECTION, "\n".join(text))
    console.print(f"wrote the section {SECTION[3:]!r} of {_common.RESULTS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    parser.add_argument("--write-results", action="store_true", help="rewrite this benchmark's section of RESULTS.md")
    args = parser.parse_args(argv)
    info = machine()
    console.print(f"[bold]Profiler overhead[/bold] — {info['cpu']} ({info['cores']} cores), one thread; "
                  f"NumPy {info['numpy']} ({info['blas']}), {info['date']}")
    calls, blocks = (2_000, 5) if args.quick else (20_000, 15)
    repeats = 3 if args.quick else 15
    cost = per_call_cost(calls, blocks)
    cost["check alone"] = check_alone_ns(200_000 if args.quick else 2_000_000)
    step = step_overhead(repeats)
    lines = report(cost, step, repeats, blocks, calls)
    if args.write_results:
        write_results(info, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
