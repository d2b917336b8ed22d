"""Module 14, graded cases: the profiler's counts, count_flops, measure_latency, peak_memory,
graph_saved_bytes and machine_peak, on what is deterministic.

Time is never read from the machine: each case that needs it puts a FakeClock in the
module's `clock` (and, for machine_peak, a scripted measure_latency) and puts the real one
back before it returns, as the visible tests do with monkeypatch. What is checked: calls,
FLOPs, bytes, sorted orders, medians and spreads of scripted samples, peaks of allocations
of known size (to 2%). Format: grading/reference_values.py.
"""
import tracemalloc
from contextlib import contextmanager

import numpy as np
from reference_values import raised

from tinytorch.core.activations import relu
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear
from tinytorch.core.tensor import Tensor
from tinytorch.perf import profiling
from tinytorch.perf.profiling import (FakeClock, Profiler, Timing, count_flops, graph_saved_bytes, machine_peak,
                                      measure_latency, peak_memory, record_function)

MIB = 2**20


@contextmanager
def replaced(name, value):
    """profiling.<name> = value inside the block; the original back afterwards, whatever happens."""
    original = getattr(profiling, name)
    setattr(profiling, name, value)
    try:
        yield value
    finally:
        setattr(profiling, name, original)


def stats_rows(prof):
    """[calls, backward_calls, forward_flops, backward_flops, forward_bytes, backward_bytes] per op, by op name."""
    names = sorted(prof.by_op())
    rows = [[s.calls, s.backward_calls, s.forward_flops, s.backward_flops, s.forward_bytes, s.backward_bytes]
            for s in (prof.by_op()[n] for n in names)]
    return names, np.array(rows, dtype=np.int64)


def mlp_step(rng):
    """A float64 two-layer step: x (data, no gradient) @ W1, relu, @ W2, a sum."""
    first = Linear(5, 7, rng=rng, dtype=np.float64)
    second = Linear(7, 3, rng=rng, dtype=np.float64)
    x = Tensor(rng.standard_normal((4, 5)))
    return first, second, x


def _profile_step(rng):
    first, second, x = mlp_step(rng)
    with replaced("clock", FakeClock()):
        with Profiler() as prof:
            loss = second(relu(first(x))).sum()
            loss.backward()
        names, rows = stats_rows(prof)
        table = prof.table(sort_by="flops")
    return {"ops": names, "rows": rows, "total": prof.total_flops(), "forward": prof.total_flops("forward"),
            "backward": prof.total_flops("backward"),
            "table_order": [line.split()[0] for line in table.splitlines()[3:3 + len(names)]],
            "bad_phase": raised(prof.total_flops, "both")}


def _profile_inference(rng):
    first, second, x = mlp_step(rng)
    with replaced("clock", FakeClock()):
        with no_grad(), Profiler() as prof:
            second(relu(first(x)))
    names, rows = stats_rows(prof)
    return {"ops": names, "rows": rows, "forward": prof.total_flops("forward")}


def _profile_times(rng):
    """Made-up ops whose forward and rule advance the fake clock by known amounts: the time columns."""
    fake = FakeClock()
    double, total = profiling.demo_ops(fake)
    try:
        with replaced("clock", fake):
            x = Tensor(rng.standard_normal(6), requires_grad=True)
            with Profiler() as prof:
                fake.advance(0.5)
                loss = total(double(double(x)))
                loss.backward()
                with record_function("update"):
                    fake.advance(7.0)
                fake.advance(0.25)
            by_op = prof.by_op()
            table = prof.table(sort_by="time")
    finally:
        profiling.forget_demo_ops()
    names = sorted(by_op)
    return {"ops": names, "forward_s": [by_op[n].forward_s for n in names],
            "backward_s": [by_op[n].backward_s for n in names], "outside_s": prof.outside_s, "wall_s": prof.wall_s,
            "flops": [by_op[n].flops for n in names], "region_s": prof.regions["update"].forward_s,
            "table_order": [line.split()[0] for line in table.splitlines()[3:6]]}


def _count_flops(rng):
    first, second, x = mlp_step(rng)
    forward = count_flops(lambda: second(relu(first(x))).sum())
    both = count_flops(lambda: second(relu(first(x))).sum(), backward=True)
    with_args = count_flops(lambda a, b: a @ b, Tensor(rng.standard_normal((3, 8))), Tensor(rng.standard_normal((8, 2))))
    return {"forward": forward, "both": both, "with_args": with_args,
            "not_a_loss": raised(count_flops, lambda: first(x), backward=True)}


def _latency(rng):
    """Scripted call times: slow first calls (the warm-up must skip them), one interrupted call."""
    fake = FakeClock()
    durations = iter([5.0, 4.0, 3.0] + list(rng.uniform(0.010, 0.012, 9)) + [0.9] + list(rng.uniform(0.010, 0.012, 6)))

    def call():
        fake.advance(float(next(durations)))

    with replaced("clock", fake):
        timing = measure_latency(call, warmup=3, repeats=16)
    return {"median": timing.median_s, "iqr": timing.iqr_s, "samples": timing.samples,
            "bad_repeats": raised(measure_latency, call, repeats=0)}


def _latency_gpu(rng):
    """A scripted GPU: each call only queues its work; synchronize() waits for it (advances the clock)."""
    fake = FakeClock()
    queued = []
    durations = iter(rng.uniform(0.5, 1.5, 8))

    def call():
        queued.append(float(next(durations)))

    def synchronize(device):
        if device == "cuda":
            fake.advance(sum(queued))
            queued.clear()

    with replaced("clock", fake), replaced("synchronize", synchronize):
        timing = measure_latency(call, warmup=2, repeats=6, device="cuda")
    return {"samples": timing.samples, "median": timing.median_s}


def _peak_memory(rng):
    size = int(rng.integers(6, 10)) * MIB

    def spike():
        block = np.ones(size, dtype=np.uint8)  # allocated and freed inside fn
        del block
        return np.zeros(16)

    alone = peak_memory(spike)
    tracing_after = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        bigger = np.ones(3 * size, dtype=np.uint8)  # an earlier, larger peak of a running trace
        del bigger
        inside = peak_memory(spike)
        still = tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
    return {"alone_mib": alone / MIB, "inside_mib": inside / MIB, "stops_its_trace": not tracing_after,
            "keeps_a_running_trace": still}


def _graph_bytes(rng):
    w = Tensor(rng.standard_normal((6, 5)), requires_grad=True)
    x = Tensor(rng.standard_normal((4, 6)))  # data: no gradient
    h = x @ w                                # (4, 5) float64: 160 bytes
    r = relu(h)
    v = r.reshape(5, 4)                      # a view of r's array
    loss = (v * v).sum()
    shared = r + r                           # one array used twice by the same node
    return {"loss": graph_saved_bytes(loss), "shared": graph_saved_bytes(shared), "h": graph_saved_bytes(h),
            "leaf": graph_saved_bytes(w)}


def _table_top(rng):
    """The table cut to `top` rows after sorting: the op seen first is not the largest by forward time."""
    fake = FakeClock()
    double, total = profiling.demo_ops(fake)
    try:
        with replaced("clock", fake):
            x = Tensor(rng.standard_normal(6), requires_grad=True)
            with Profiler() as prof:
                loss = total(double(x))
                loss.backward()
                with record_function("update"):
                    fake.advance(5.0)
            orders = {f"{key}_top{top}": [line.split()[0] for line in prof.table(sort_by=key, top=top).splitlines()[3:-2]]
                      for key in ("forward", "calls") for top in (1, 2)}
    finally:
        profiling.forget_demo_ops()
    return orders


def _peak_memory_kept(rng):
    """peak_memory inside a running trace while an array allocated before the call stays alive."""
    size = int(rng.integers(6, 10)) * MIB

    def spike():
        block = np.ones(size, dtype=np.uint8)
        del block

    tracemalloc.start()
    try:
        kept = np.ones(2 * size, dtype=np.uint8)  # alive during the call: below its baseline
        inside = peak_memory(spike)
        del kept
    finally:
        tracemalloc.stop()
    return {"inside_mib": inside / MIB}


def _graph_bytes_saved(rng):
    """An array a node saves for its backward (masked_fill's mask) is held by the graph too."""
    w = Tensor(rng.standard_normal((6, 5)), requires_grad=True)
    mask = rng.random((6, 5)) < 0.5
    return {"masked": graph_saved_bytes(w.masked_fill(mask, 0.0).sum())}


def _machine_peak(rng):
    best = [float(rng.uniform(0.003, 0.005)), float(rng.uniform(0.001, 0.002))]
    calls = []

    def scripted_latency(fn, *args, warmup=3, repeats=20, device=None):
        fn(*args)
        fastest = best[len(calls)]
        calls.append([warmup, repeats])
        return Timing(2.0 * fastest, fastest, [3 * fastest, fastest, 2.0 * fastest, 2.5 * fastest])

    with replaced("measure_latency", scripted_latency):
        gflops, gbytes = machine_peak(n=48, copy_mib=1, repeats=4)
    return {"gflops": gflops, "gbytes": gbytes, "calls": calls}


CASES = {
    "profile-step": (_profile_step, "Profiler on a two-layer forward and backward: calls, FLOPs, bytes per op; table by FLOPs"),
    "profile-inference": (_profile_inference, "Profiler under no_grad still counts forward FLOPs and bytes"),
    "profile-times": (_profile_times, "scripted op times: forward, backward, outside, a record_function row, table by time"),
    "count-flops": (_count_flops, "count_flops of a forward, of forward and backward, with arguments; a non-loss raises"),
    "latency": (_latency, "measure_latency on scripted call times: warm-up skipped, median and IQR"),
    "latency-gpu": (_latency_gpu, "measure_latency on a scripted GPU waits for the queued work before each reading"),
    "peak-memory": (_peak_memory, "peak_memory of a 6-9 MiB spike, alone and inside a running trace",
                    {"rtol": 0.02, "atol": 0.05}),
    "graph-bytes": (_graph_bytes, "graph_saved_bytes counts each buffer once, views as their base, no leaves"),
    "table-top": (_table_top, "table(sort_by, top): every row sorted first, then the first `top` kept"),
    "peak-memory-kept": (_peak_memory_kept, "peak_memory inside a running trace with a 12-18 MiB array alive",
                         {"rtol": 0.02, "atol": 0.05}),
    "graph-bytes-saved": (_graph_bytes_saved, "graph_saved_bytes counts what a node saved (masked_fill's mask)"),
    "machine-peak": (_machine_peak, "machine_peak from scripted timings: 2·n³ FLOPs, copy bytes twice, fastest sample"),
}
