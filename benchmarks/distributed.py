#!/usr/bin/env python
"""Distributed benchmarks (module 21): ring all-reduce against MPI's, the α–β fit, the GPT's step on 1, 2, 4 ranks, ZeRO-1, a cluster MODEL.

    python benchmarks/distributed.py                  # everything below (a few minutes)
    python benchmarks/distributed.py --quick          # smoke run: two small sizes, few repeats
    python benchmarks/distributed.py --write-results  # also rewrite the "Distributed (module 21)"
                                                      # section of benchmarks/RESULTS.md

How it runs: this script (the driver, one process) launches itself on N MPI ranks for each part
(tito's launcher, as `tito run --ranks N benchmarks/distributed.py --part PART --json FILE` would:
MPICH's `mpiexec` from the `mpich` wheel); every rank measures, rank 0 collects the ranks' numbers
(mpi4py's `gather`) and writes them as JSON, and the driver prints the tables. Every rank runs NumPy on ONE BLAS thread.
The clock is wall time (`time.perf_counter`): a collective's cost is mostly waiting, which CPU time
would not see (MPICH's ranks poll while they wait, so they keep their core busy either way). Every
timed repeat starts after a barrier and ends when the slowest rank ends (the maximum over ranks);
tables show the median over repeats. On a 2-core machine, 4 ranks are OVERSUBSCRIBED (two ranks per
core, taking turns): their times say what sharing a core costs, not what 4 machines would do.

What is measured:
1. collectives, on 2 and 4 ranks, float32 arrays of 1 KB to 64 MB (different values on every rank):
   module 21's `ring_all_reduce` (reduce-scatter then all-gather over `sendrecv`), MPI's own
   `Allreduce`, and a naive gather to rank 0 (every rank sends its array to rank 0, which adds them
   and sends the sum back to each); time, and the bytes each rank sent (`World.bytes_sent`; MPI's
   Allreduce sends inside MPI, where the counter cannot see). The ring's result is checked against
   MPI's before anything is timed.
2. the α–β model: one message of m bytes between two ranks (ping-pong, half the round trip) for m
   from 8 B to 32 MB, fitted by module 21's `fit_alpha_beta` (least squares: t = α + β·m); then
   `predict_ring_all_reduce_s` next to the measured ring times.
3. the training step of the shakespeare milestone's GPT (4 layers, 4 heads, width 128, context 64,
   global batch 12: each rank its share) on 1, 2 and 4 ranks: forward, backward, gradient averaging,
   AdamW. The averaging four ways, interleaved: none (the compute alone), one `ring_all_reduce` per
   parameter after backward, one all-reduce of all gradients in one buffer after backward
   (bucketing), and `DistributedDataParallel` (buckets started during backward: bucketing and
   overlap); the time spent averaging is measured where it is a separate phase.
4. optimizer memory: AdamW's state bytes on each rank, plain (every rank holds all of it) and in
   `ShardedOptimizer` (ZeRO stage 1), on 1, 2 and 4 ranks.
5. a MODEL, not a measurement, labelled so: the α–β model with a cluster network's published
   latency and bandwidth (the inputs are printed), predicting the step time and the efficiency of
   data parallelism on 8 to 512 ranks for the milestone's model and for a model 100× larger, with
   the compute per rank measured here (one core) and, as a labelled input, an accelerator's.
The GPU parts of module 21 (CuPy, NCCL) are not written: this benchmark is CPU only.
"""
from __future__ import annotations

import sys

import _common

_common.one_thread()  # before NumPy is imported: every rank (they inherit the variables) on one BLAS thread

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import RESULTS, machine, write_section  # noqa: E402
from tinytorch.core.optimizers import AdamW  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.files import atomic_write  # noqa: E402
from tinytorch.models.transformer import GPT  # noqa: E402
from tito.course import CourseError  # noqa: E402
from tito.launch import run_ranks  # noqa: E402
from tinytorch.perf.distributed import (DistributedDataParallel, ShardedOptimizer, fit_alpha_beta,  # noqa: E402
                                        init_world, predict_ring_all_reduce_s, ring_all_reduce)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "milestones"))
from shakespeare import RECIPE, get_batch, load_text  # noqa: E402  (the milestone's recipe and data)

SECTION = "## Distributed (module 21)"
console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)

KB, MB = 1024, 1024 * 1024
SIZES = [KB * 4 ** i for i in range(9)]  # 1 KB, 4 KB, ... 64 MB
QUICK_SIZES = [KB, 64 * KB]
PING_SIZES = [8 * 4 ** i for i in range(12)]  # 8 B, 32 B, ... 32 MB (up to 32 KB with --quick)
RANKS_COLLECTIVES = (2, 4)
RANKS_STEP = (1, 2, 4)
CORES = os.cpu_count() or 1
LAUNCH_TIMEOUT_S = 900  # one part on N ranks; past it, every rank is stopped and the benchmark fails

# ---- 5.'s inputs: published figures, NOT measured here ------------------------------------------
CLUSTER = {
    "network": "InfiniBand 4x EDR (100 Gb/s per link)",
    "bandwidth_bytes_per_s": 100e9 / 8,  # 100 Gb/s: EDR's data rate, the link's bandwidth per direction
    "alpha_s": 2e-6,  # "a few µs": the MPI point-to-point latency vendors publish for InfiniBand is 1-2 µs
    "accelerator": "an accelerator sustaining 100 TFLOP/s (a third of an NVIDIA A100's 312 TFLOP/s dense bf16 peak)",
    "accelerator_flops_per_s": 100e12,
}
MODEL_RANKS = [8, 16, 32, 64, 128, 256, 512]
LARGER = 100  # the second model: 100× the parameters (so 100× the gradient bytes and, per token, the FLOPs)


# =============================================================================== on every rank
def timed(world, comm, fn) -> float:
    """Seconds of fn() on this rank, started together after a barrier; the slowest rank's time
    (the collective is done when every rank is done)."""
    world.barrier()
    start = time.perf_counter()
    fn()
    return comm.allreduce(time.perf_counter() - start, op=_mpi().MAX)


def _mpi():
    from mpi4py import MPI

    return MPI


def naive_all_reduce(array: np.ndarray, world) -> np.ndarray:
    """The sum over ranks by way of rank 0: every other rank sends its array there; rank 0 adds them
    and sends the sum back to each. Rank 0 sends (N-1)·bytes, the others 1·bytes each."""
    if world.rank == 0:
        total = array.copy()
        for source in range(1, world.size):
            total += world.recv(array, source)
        for dest in range(1, world.size):
            world.send(total, dest)
        return total
    world.send(array, 0)
    return world.recv(array, 0)


def repeats_for(nbytes: int, quick: bool) -> int:
    """Fewer repeats for large messages (a 64 MB all-reduce takes a good fraction of a second)."""
    return 3 if quick else int(min(40, max(5, 64 * MB // max(nbytes, 1) // 4)))


def part_collectives(world, comm, quick: bool) -> dict:
    """1.: per size, the three all-reduces' median time (slowest rank) and the bytes each rank sent."""
    MPI = _mpi()
    rows = []
    for nbytes in QUICK_SIZES if quick else SIZES:
        x = np.random.default_rng(world.rank).standard_normal(nbytes // 4).astype(np.float32)
        expected = np.empty_like(x)
        comm.Allreduce(x, expected, op=MPI.SUM)
        got = ring_all_reduce(x, world)
        if not np.allclose(got, expected, rtol=1e-5, atol=1e-5 * world.size):
            raise AssertionError(f"ring_all_reduce of {nbytes} bytes differs from MPI's Allreduce on rank {world.rank}: "
                                 f"largest difference {np.abs(got - expected).max()}")
        sent = {}
        for name, fn in (("ring", lambda: ring_all_reduce(x, world)), ("naive", lambda: naive_all_reduce(x, world))):
            before = world.bytes_sent
            fn()
            sent[name] = comm.gather(world.bytes_sent - before)
        out = np.empty_like(x)
        variants = {"ring": lambda: ring_all_reduce(x, world), "mpi": lambda: comm.Allreduce(x, out, op=MPI.SUM),
                    "naive": lambda: naive_all_reduce(x, world)}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for rep in range(repeats_for(nbytes, quick)):
            names = list(variants)
            for name in names[rep % 3:] + names[:rep % 3]:  # the order rotates every repeat
                times[name].append(timed(world, comm, variants[name]))
        rows.append({"bytes": nbytes, "seconds": {name: statistics.median(t) for name, t in times.items()},
                     "repeats": len(times["ring"]), "sent": sent})
    return {"ranks": world.size, "rows": rows}


def part_ping_pong(world, comm, quick: bool) -> dict:
    """2.: one message of m bytes from rank 0 to rank 1: half the median round trip."""
    sizes = [m for m in PING_SIZES if not quick or m <= 32 * KB]
    rows = []
    for nbytes in sizes:
        message = np.zeros(nbytes, np.uint8)
        trips = []
        world.barrier()
        for trip in range(1 + (3 if quick else int(min(200, max(5, 16 * MB // nbytes))))):
            start = time.perf_counter()  # rank 1 is already waiting in recv (after the first trip, not timed)
            if world.rank == 0:
                world.send(message, 1)
                world.recv(message, 1)
            elif world.rank == 1:
                world.send(world.recv(message, 0), 0)
            if trip:
                trips.append(time.perf_counter() - start)
        times = comm.bcast(trips)  # rank 0's clock: the round trip as the sender sees it
        rows.append({"bytes": nbytes, "seconds": statistics.median(times) / 2})
    alpha, beta = fit_alpha_beta([r["bytes"] for r in rows], [r["seconds"] for r in rows])
    return {"rows": rows, "alpha_s": alpha, "beta_s_per_byte": beta}


def share_of_batch(x: np.ndarray, y: np.ndarray, world) -> tuple[np.ndarray, np.ndarray]:
    """This rank's rows of the global batch (12 rows: 6 each on 2 ranks, 3 each on 4)."""
    rows = np.array_split(np.arange(len(x)), world.size)[world.rank]
    return x[rows], y[rows]


def part_step(world, comm, quick: bool) -> dict:
    """3. and 4.: the training step's time four ways, and AdamW's state bytes plain and sharded."""
    train, _, tokenizer = load_text()
    recipe = RECIPE

    def make_model() -> GPT:
        return GPT(tokenizer.vocab_size, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"],
                   recipe["context"], dropout=0.0, tie_weights=True, bias=False, seed=1337)

    model, wrapped_model = make_model(), make_model()
    ddp = DistributedDataParallel(wrapped_model, world)
    optimizer = AdamW(model.parameters(), lr=recipe["lr"])
    ddp_optimizer = AdamW(ddp.parameters(), lr=recipe["lr"])
    params = model.parameters()
    grad_bytes = sum(p.data.nbytes for p in params)
    batches = np.random.default_rng(0)
    comm_seconds: dict[str, list[float]] = {"per parameter": [], "one buffer": []}

    def average_each(sync: str) -> None:
        """After backward: the mean over ranks of every gradient, one all-reduce per parameter or one in all."""
        start = time.perf_counter()
        if sync == "per parameter":
            for p in params:
                p.grad.data = ring_all_reduce(p.grad.data, world) / world.size
        else:
            flat = ring_all_reduce(np.concatenate([p.grad.data.ravel() for p in params]), world) / world.size
            offset = 0
            for p in params:
                p.grad.data = flat[offset:offset + p.size].reshape(p.shape)
                offset += p.size
        comm_seconds[sync].append(time.perf_counter() - start)

    compute_cpu_seconds: list[float] = []  # the compute-only step's CPU time: other programs do not inflate it

    def step(sync: str | None) -> None:
        cpu_start = time.process_time()
        x, y = share_of_batch(*get_batch(train, recipe["batch"], recipe["context"], batches), world)
        net, opt = (ddp, ddp_optimizer) if sync == "ddp" else (model, optimizer)
        opt.zero_grad()
        _, loss = net(Tensor(x), targets=Tensor(y))
        loss.backward()
        if sync in comm_seconds:
            average_each(sync)
        opt.step()
        if sync is None:
            compute_cpu_seconds.append(time.process_time() - cpu_start)

    variants = {"compute only": lambda: step(None), "per parameter": lambda: step("per parameter"),
                "one buffer": lambda: step("one buffer"), "ddp": lambda: step("ddp")}
    for fn in variants.values():  # warm-up: the first step allocates the optimizer's state
        fn()
    comm_seconds = {name: [] for name in comm_seconds}
    compute_cpu_seconds.clear()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(3 if quick else 15):
        names = list(variants)
        for name in names[rep % 4:] + names[:rep % 4]:
            times[name].append(timed(world, comm, variants[name]))
    slowest_comm = {name: comm.allreduce(statistics.median(t), op=_mpi().MAX) for name, t in comm_seconds.items()}

    # 4.: AdamW's state, plain on every rank against ZeRO-1's share; after one step (the state is made then)
    plain = AdamW(model.parameters(), lr=recipe["lr"])
    sharded = ShardedOptimizer(model.parameters(), lambda share: AdamW(share, lr=recipe["lr"]), world)
    for p in model.parameters():
        p.grad = Tensor(np.zeros_like(p.data))
    plain.step()
    sharded.step()
    return {"ranks": world.size, "grad_bytes": grad_bytes, "params": sum(p.size for p in params),
            "seconds": {name: statistics.median(t) for name, t in times.items()}, "comm_seconds": slowest_comm,
            "compute_cpu_s": statistics.median(compute_cpu_seconds),
            "repeats": len(times["ddp"]), "plain_state": comm.gather(plain.state_nbytes()),
            "sharded_state": comm.gather(sharded.state_bytes())}


PARTS = {"collectives": part_collectives, "ping-pong": part_ping_pong, "step": part_step}


def run_part(name: str, json_path: Path, quick: bool) -> None:
    """On every rank: run the part; rank 0 writes its result as JSON (atomically: a killed run
    leaves no half file for the driver to read)."""
    world = init_world()
    comm = _mpi().COMM_WORLD
    result = PARTS[name](world, comm, quick)
    if world.rank == 0:
        with atomic_write(json_path, "w", encoding="utf-8") as handle:
            json.dump(result, handle)


# =============================================================================== the driver
def on_ranks(ranks: int, part: str, quick: bool, scratch: Path) -> dict:
    """Run `part` on `ranks` MPI processes through tito's launcher (the one `tito run --ranks N`
    uses: one failing rank aborts all) and return what rank 0 wrote. A rank that fails, or a run
    past LAUNCH_TIMEOUT_S, ends the benchmark with what the ranks printed."""
    json_path = scratch / f"{part}-{ranks}.json"
    args = ["--part", part, "--json", str(json_path)] + (["--quick"] if quick else [])
    try:
        done = run_ranks(ROOT, ranks, str(Path(__file__).resolve()), args, timeout=LAUNCH_TIMEOUT_S, cwd=ROOT)
    except CourseError as err:  # no MPI installed: what to install
        raise SystemExit(f"error: {err}") from None
    if done.timed_out:
        raise SystemExit(f"error: {part} on {ranks} ranks ran past {LAUNCH_TIMEOUT_S} s and was stopped:\n{done.output}")
    if done.returncode != 0 or not json_path.is_file():
        raise SystemExit(f"error: {part} on {ranks} ranks failed (exit {done.returncode}):\n{done.output}")
    return json.loads(json_path.read_text(encoding="utf-8"))


def size_label(nbytes: float) -> str:
    for unit, scale in (("MB", MB), ("KB", KB)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:g} B"


def ms(seconds: float) -> str:
    """A duration with its unit: µs below a millisecond, ms above."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1e-2 else f"{seconds * 1e3:.1f} ms"


def signed_ms(seconds: float) -> str:
    """A difference of two times: "+" when the first was slower (a saving), "−" when it was faster."""
    return ("+" if seconds >= 0 else "−") + ms(abs(seconds))


def oversubscribed(ranks: int) -> str:
    return f"{ranks} (oversubscribed: {ranks} ranks on {CORES} cores)" if ranks > CORES else str(ranks)


def collectives_lines(results: list[dict], fit: dict) -> list[str]:
    """The Markdown table of 1. and 2.'s prediction: per ranks and size, the three times, the bytes
    each rank sent, and the α–β model's prediction for the ring."""
    lines = ["| ranks | size | ring | MPI Allreduce | gather to rank 0 | ring / MPI | ring sent per rank "
             "(2(N−1)/N · size) | gather: rank 0 sent, others sent | α–β predicts (ring) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in results:
        n = result["ranks"]
        for row in result["rows"]:
            s, b = row["seconds"], row["bytes"]
            ring_sent = row["sent"]["ring"]
            ring_cell = " / ".join(f"{v / b:.3f}" for v in sorted(set(ring_sent)))  # one value when all ranks agree
            predicted = predict_ring_all_reduce_s(b, n, fit["alpha_s"], fit["beta_s_per_byte"])
            lines.append(f"| {oversubscribed(n)} | {size_label(b)} | {ms(s['ring'])} | {ms(s['mpi'])} | {ms(s['naive'])} | "
                         f"{s['ring'] / s['mpi']:.2f}× | {ring_cell} × size ({2 * (n - 1) / n:.3f}) | "
                         f"{size_label(row['sent']['naive'][0])}, {size_label(max(row['sent']['naive'][1:]))} | "
                         f"{ms(predicted)} |")
    return lines


def check_ring_bytes(results: list[dict]) -> list[str]:
    """One line per number of ranks: what every rank of the ring sent, as a multiple of the array,
    against 2(N−1)/N. The sizes here split evenly over 2 and 4 ranks, so it must be exactly that:
    otherwise the benchmark stops (the ring is not the algorithm it claims to time)."""
    lines = []
    for result in results:
        n = result["ranks"]
        ratios = {sent / row["bytes"] for row in result["rows"] for sent in row["sent"]["ring"]}
        if ratios != {2 * (n - 1) / n}:
            raise SystemExit(f"error: on {n} ranks the ring sent {sorted(ratios)} × the array per rank; "
                             f"a ring all-reduce sends exactly 2(N−1)/N = {2 * (n - 1) / n} of it")
        lines.append(f"ring all-reduce on {n} ranks: every rank sent {ratios.pop():.3f} × the array "
                     f"at every size (2(N−1)/N = {2 * (n - 1) / n:.3f})")
    return lines


def print_lines(title: str, lines: list[str]) -> None:
    """A Markdown table printed as a rich table (the same cells RESULTS.md gets)."""
    header, _, *rows = lines
    table = Table(title=title)
    for cell in header.strip("|").split(" | "):
        table.add_column(cell.strip())
    for row in rows:
        table.add_row(*(cell.strip() for cell in row.strip("|").split(" | ")))
    console.print(table)


def step_lines(steps: list[dict]) -> list[str]:
    lines = ["| ranks | rows per rank | compute only (no averaging) | one all-reduce per parameter | (of it: averaging) | "
             "one buffer after backward | (of it: averaging) | DDP (buckets during backward) | "
             "bucketing saves (per parameter − one buffer) | overlap saves (one buffer − DDP) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in steps:
        s, c, n = result["seconds"], result["comm_seconds"], result["ranks"]
        lines.append(f"| {oversubscribed(n)} | {RECIPE['batch'] // n} | {ms(s['compute only'])} | {ms(s['per parameter'])} | "
                     f"{ms(c['per parameter'])} | {ms(s['one buffer'])} | {ms(c['one buffer'])} | {ms(s['ddp'])} | "
                     f"{signed_ms(s['per parameter'] - s['one buffer'])} | {signed_ms(s['one buffer'] - s['ddp'])} |")
    return lines


def memory_lines(steps: list[dict]) -> list[str]:
    lines = ["| ranks | AdamW state per rank, plain | ShardedOptimizer (ZeRO-1), per rank | largest share / (plain / N) |",
             "|---|---:|---:|---:|"]
    for result in steps:
        n, plain, sharded = result["ranks"], result["plain_state"], result["sharded_state"]
        lines.append(f"| {oversubscribed(n)} | {plain[0]:,} B | {', '.join(f'{v:,}' for v in sharded)} B | "
                     f"{max(sharded) / (plain[0] / n):.3f} |")
    return lines


def cluster_rows(compute_one_rank_s: float, step_flops: int, grad_bytes: int) -> list[dict]:
    """5.: per model and compute source, the predicted all-reduce, step and efficiency at MODEL_RANKS.
    Weak scaling: every rank keeps the milestone's batch of 12 (the global batch grows with N)."""
    alpha, beta = CLUSTER["alpha_s"], 1 / CLUSTER["bandwidth_bytes_per_s"]
    cases = []
    for model, scale in (("the milestone's GPT", 1), (f"a GPT {LARGER}× larger", LARGER)):
        for source, compute in (("this machine's core (measured)", compute_one_rank_s * scale),
                                ("accelerator (input)", step_flops * scale / CLUSTER["accelerator_flops_per_s"])):
            nbytes = grad_bytes * scale
            per_ranks = []
            for n in MODEL_RANKS:
                comm_s = predict_ring_all_reduce_s(nbytes, n, alpha, beta)
                per_ranks.append({"ranks": n, "comm_s": comm_s, "efficiency": compute / (compute + comm_s),
                                  "overlapped": compute / max(compute, comm_s)})
            dominated = next((r["ranks"] for r in per_ranks if r["comm_s"] > compute), None)
            cases.append({"model": model, "source": source, "compute_s": compute, "grad_bytes": nbytes,
                          "per_ranks": per_ranks, "dominated_from": dominated})
    return cases


def cluster_lines(cases: list[dict]) -> list[str]:
    lines = ["| model | compute per step per rank | gradients | " + " | ".join(f"N = {n}" for n in MODEL_RANKS)
             + " | communication > compute from |", "|---|---:|---:|" + "---:|" * len(MODEL_RANKS) + "---|"]
    for case in cases:
        cells = [f"{ms(r['comm_s'])}, {100 * r['efficiency']:.0f}% ({100 * r['overlapped']:.0f}%)" for r in case["per_ranks"]]
        dominated = (f"N = {case['dominated_from']}" + (" (the smallest modelled)" if case["dominated_from"] == MODEL_RANKS[0] else "")
                     if case["dominated_from"] else f"never up to {MODEL_RANKS[-1]}")
        lines.append(f"| {case['model']}, {case['source']} | {ms(case['compute_s'])} | {size_label(case['grad_bytes'])} | "
                     + " | ".join(cells) + f" | {dominated} |")
    return lines


def step_flops() -> int:
    """FLOPs of one forward + backward of the milestone's GPT on its batch of 12 (module 14's count_flops)."""
    from tinytorch.perf.profiling import count_flops

    train, _, tokenizer = load_text()
    model = GPT(tokenizer.vocab_size, RECIPE["embed_dim"], RECIPE["num_layers"], RECIPE["num_heads"],
                RECIPE["context"], dropout=0.0, tie_weights=True, bias=False, seed=1337)
    x, y = get_batch(train, RECIPE["batch"], RECIPE["context"], np.random.default_rng(0))
    return count_flops(lambda: model(Tensor(x), targets=Tensor(y))[1], backward=True)


def write_results(info: dict, lines: dict, fit: dict, args) -> None:
    heading = f"{SECTION} on {info['cpu']}"
    text = [
        heading, "",
        f"Measured {info['date']} with `python benchmarks/distributed.py` (`tito bench distributed`) on "
        f"{info['cpu']}, {info['cores']} logical cores visible; Python {info['python']}, NumPy {info['numpy']} "
        f"({info['blas']}); MPI: {info['mpi']}.",
        "Every rank is a process on this one machine with ONE BLAS thread, so messages go through shared",
        "memory, not a network. Wall time; each repeat starts after a barrier and lasts until the slowest",
        "rank is done; medians. With more ranks than cores the ranks take turns on a core (oversubscribed,",
        f"labelled so). Load average (1 minute) at the start and at the end: {info['load'][0]:.1f} and "
        f"{info['load'][1]:.1f} on {CORES} cores" + (
            ": other programs shared the cores while this ran, so the wall times are noisy (a rank waited for a "
            "core as well as for its messages); the cluster MODEL below takes the step's CPU time, which they do "
            "not inflate." if max(info["load"]) > CORES else "."), "",
        "### All-reduce: module 21's ring against MPI's Allreduce and a gather to rank 0", "",
        *lines["collectives"], "",
        "### The α–β model fitted on this machine", "",
        f"One message between two ranks (ping-pong, half the round trip), {len(fit['rows'])} sizes from "
        f"{size_label(fit['rows'][0]['bytes'])} to {size_label(fit['rows'][-1]['bytes'])}, fitted by "
        f"`fit_alpha_beta` (least squares): α = {fit['alpha_s'] * 1e6:.2f} µs per message, "
        f"β = {fit['beta_s_per_byte'] * 1e9:.4f} ns per byte ({1 / fit['beta_s_per_byte'] / 1e9:.2f} GB/s). "
        "The last column of the table above is `predict_ring_all_reduce_s` with these two numbers.", "",
        *lines["ping"], "",
        "### The training step of the milestone's GPT", "",
        "Global batch 12 (each rank its share), forward, backward, gradients averaged over ranks, AdamW; the",
        f"averaging four ways, interleaved, medians of {lines['step_repeats']} steps. Gradients: "
        f"{lines['grad_bytes']} per all-reduce.", "",
        *lines["step"], "",
        "### Optimizer state per rank", "",
        *lines["memory"], "",
        "### MODEL (not measured): the cluster", "",
        *lines["cluster_inputs"], "",
        *lines["cluster"], "",
        *lines["cluster_notes"],
    ]
    write_section(heading, "\n".join(text), RESULTS)
    console.print(f"wrote the section {heading[3:]!r} of {RESULTS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes and few repeats (a smoke run)")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite the {SECTION[3:]} section of {RESULTS.name}")
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)  # on each rank, launched by the driver
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part is not None:
        if args.json is None:
            parser.error("--part needs --json FILE")
        run_part(args.part, args.json, args.quick)
        return 0
    if args.quick and args.write_results:
        parser.error("--quick is a smoke run: its numbers are not written to RESULTS.md")
    from mpi4py import MPI

    info = machine()
    info["mpi"] = " ".join(MPI.Get_library_version().split()[:3]) + f", mpi4py {__import__('mpi4py').__version__}"
    console.print(f"[bold]Distributed benchmark[/] — {info['cpu']} ({info['cores']} cores), one BLAS thread per rank; "
                  f"{info['mpi']}; NumPy {info['numpy']} ({info['blas']}), {info['date']}")
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tinytorch-distributed-") as scratch:
        collectives = [on_ranks(n, "collectives", args.quick, Path(scratch)) for n in RANKS_COLLECTIVES]
        fit = on_ranks(2, "ping-pong", args.quick, Path(scratch))
        steps = [on_ranks(n, "step", args.quick, Path(scratch)) for n in RANKS_STEP]
    info["load"] = (load_start, os.getloadavg()[0])

    lines = {"collectives": collectives_lines(collectives, fit), "step": step_lines(steps), "memory": memory_lines(steps),
             "step_repeats": steps[0]["repeats"], "grad_bytes": size_label(steps[0]["grad_bytes"])}
    lines["ping"] = ["| message | one way | α + β·m (fit) |", "|---:|---:|---:|"] + [
        f"| {size_label(r['bytes'])} | {ms(r['seconds'])} | {ms(fit['alpha_s'] + fit['beta_s_per_byte'] * r['bytes'])} |"
        for r in fit["rows"]]
    print_lines("1. all-reduce (median; slowest rank)", lines["collectives"])
    for line in check_ring_bytes(collectives):
        console.print(line, soft_wrap=True)
    console.print(f"2. α–β fit: α = {fit['alpha_s'] * 1e6:.2f} µs, β = {fit['beta_s_per_byte'] * 1e9:.4f} ns/byte "
                  f"({1 / fit['beta_s_per_byte'] / 1e9:.2f} GB/s)")
    print_lines("2. one message between two ranks", lines["ping"])
    print_lines(f"3. training step of the milestone's GPT (gradients {lines['grad_bytes']})", lines["step"])
    print_lines("4. optimizer state per rank", lines["memory"])
    for result in steps:
        plain, sharded = result["plain_state"][0], result["sharded_state"]
        console.print(f"ZeRO-1 on {result['ranks']} ranks: the ranks hold {sum(sharded) / plain:.3f} × AdamW's state "
                      f"together, the largest share {max(sharded) / plain:.3f} of it (1/N = {1 / result['ranks']:.3f})",
                      soft_wrap=True)

    flops = step_flops()
    cases = cluster_rows(steps[0]["compute_cpu_s"], flops, steps[0]["grad_bytes"])
    lines["cluster_inputs"] = [
        "Inputs (published figures and assumptions, not measured here): network "
        f"{CLUSTER['network']}: bandwidth {CLUSTER['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s per rank (β = "
        f"{1e12 / CLUSTER['bandwidth_bytes_per_s']:.0f} ps per byte), latency α = {CLUSTER['alpha_s'] * 1e6:.0f} µs per message; "
        f"compute: the step measured on one core here ({ms(steps[0]['compute_cpu_s'])} of CPU time for batch 12, "
        "forward, backward and AdamW: CPU time, which other programs on the machine do not inflate), or "
        f"{CLUSTER['accelerator']} doing the step's {flops / 1e9:.2f} GFLOP (module 14's `count_flops`, forward + "
        f"backward, batch 12). The larger model: {LARGER}× the parameters, so {LARGER}× the gradient bytes and "
        f"{LARGER}× the FLOPs per step. Weak scaling: every rank keeps a batch of 12, the global batch is 12·N.",
        "Each cell: the predicted ring all-reduce of the gradients (`predict_ring_all_reduce_s`), the efficiency "
        "compute / (compute + all-reduce) with no overlap, and in brackets compute / max(compute, all-reduce) with "
        "perfect overlap."]
    lines["cluster"] = cluster_lines(cases)
    lines["cluster_notes"] = [
        "What the model says: the bandwidth term 2(N−1)/N · bytes · β stops growing after a few ranks (it tends to",
        "2 · bytes · β); the latency term 2(N−1)·α grows with N. Communication exceeds compute: "
        + "; ".join(f"{c['model']} on {c['source']}: "
                    + (f"from N = {c['dominated_from']}" if c["dominated_from"] else f"not up to N = {MODEL_RANKS[-1]}")
                    for c in cases) + ".",
        "The model leaves out the network's topology and congestion, the time to start and finish a bucket, and",
        "stragglers: a real cluster is slower than it says."]
    print_lines("5. MODEL (not measured): ring all-reduce on a cluster, efficiency of data parallelism", lines["cluster"])
    for line in lines["cluster_inputs"]:
        console.print(line)
    if args.write_results:
        write_results(info, lines, fit, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
