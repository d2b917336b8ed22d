"""Module 14: the profiler, count_flops, measure_latency, peak_memory, graph_saved_bytes, machine_peak.

Time is never read from the machine here: the profiler and measure_latency read the module's
`clock`, which these tests replace with a FakeClock that moves only when a scripted op or
call says so, so every expected number is exact. Tests that explain a likely mistake come
first; the GPT-sized checks (memory against tracemalloc, AdamW's state) come last.
"""
import math
import tracemalloc

import numpy as np
import pytest

import tinytorch.perf.profiling as profiling
from tinytorch.core.autograd import no_grad
from tinytorch.core.tensor import Tensor
from tinytorch.perf.profiling import (NOT_IN_AN_OP, FakeClock, Profiler, Timing, count_flops, graph_saved_bytes,
                                      machine_peak, measure_latency, peak_memory, record_function)


@pytest.fixture
def fake(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(profiling, "clock", clock)
    return clock


@pytest.fixture
def demo_ops(fake):
    """Two made-up ops (the lesson's): demo_double (forward 2 s, rule 3 s, 10 FLOPs forward and 20
    backward) and demo_sum (forward 1 s, rule 0.5 s, no FLOP formula). Removed afterwards."""
    yield profiling.demo_ops(fake)
    profiling.forget_demo_ops()


def profile_demo(fake, double, total):
    x = Tensor(np.ones(4), requires_grad=True)
    with Profiler() as prof:
        fake.advance(0.25)          # before the first op: part of the first op's time
        loss = total(double(x))
        fake.advance(0.125)         # between the forward pass and backward(): in no op
        loss.backward()
        with record_function("update"):
            fake.advance(4.0)       # its own row
        fake.advance(0.0625)        # after it: in no op
    return prof


# ---- the profiler's rows ----------------------------------------------------------------------------------
def test_forward_bytes_are_the_outputs(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    got = prof.by_op()["demo_sum"].forward_bytes
    assert got == 8, (f"demo_sum (4 float64 in, one float64 out) produced {got} bytes: the bytes an op produces "
                      "are its OUTPUT's, out.data.nbytes, not its inputs'")


def test_forward_flops_are_counted_with_gradients_off(fake, demo_ops):
    double, _ = demo_ops
    try:
        with no_grad(), Profiler() as prof:
            double(Tensor(np.ones(4), requires_grad=True))
    except Exception as err:
        pytest.fail(f"profiling under no_grad() raised {type(err).__name__}: {err}. Count FLOPs with gradients off "
                    "too: out._node is None then, so build Node(op, inputs, saved) for op_flops")
    assert prof.total_flops("forward") == 10, (
        f"forward FLOPs under no_grad(): {prof.total_flops('forward')}, expected 10: count FLOPs with gradients off "
        "too (Node(op, inputs, saved) when out._node is None)")


def test_backward_flops_are_counted(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    stats = prof.by_op()["demo_double"]
    assert stats.backward_flops == 20, (
        f"demo_double's backward FLOPs: {stats.backward_flops}, expected 20: count the backward's FLOPs too, and "
        "pass the rule's grads to op_flops(node, grad.shape, grads) in rule_finished (without them it counts the forward)")


def test_total_flops_of_each_phase(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    got = (prof.total_flops(), prof.total_flops("forward"), prof.total_flops("backward"))
    if got[1:] == (30, 30):
        pytest.fail(f"total_flops('forward') and total_flops('backward') are both 30, expected 10 and 20: a phase sums "
                    "that phase's FLOPs only (forward_flops or backward_flops); phase None is forward + backward")
    assert got == (30, 10, 20), f"total_flops(None/'forward'/'backward') = {got}: phase None is forward + backward"
    with pytest.raises(ValueError, match="phase"):
        prof.total_flops("both")


def test_backward_flops_follow_the_gradients_the_rule_computed():
    w = Tensor(np.ones((3, 5)), requires_grad=True)
    for x_needs_grad, factor in ((True, 2), (False, 1)):
        x = Tensor(np.ones((4, 3)), requires_grad=x_needs_grad)
        with Profiler() as prof:
            (x @ w).sum().backward()
        forward, backward = prof.total_flops("forward"), prof.total_flops("backward")
        assert forward == 2 * 4 * 3 * 5, f"x @ w forward FLOPs {forward}, expected 2·4·3·5 = 120"
        assert backward == factor * forward, (
            f"backward FLOPs of x @ w with x.requires_grad={x_needs_grad}: {backward}, expected {factor} × {forward} "
            "(dW, and dx only when x needs it): pass the rule's grads to op_flops(node, grad.shape, grads)")


def test_backward_bytes_are_the_gradients_returned(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    for op in ("demo_double", "demo_sum"):
        got = prof.by_op()[op].backward_bytes
        assert got == 32, f"{op}'s backward bytes {got}: the bytes of the gradients its rule returned (4 float64: 32)"
    x = Tensor(np.ones((4, 3)))                       # data: its gradient is None, not computed
    w = Tensor(np.ones((3, 5)), requires_grad=True)   # dW: 15 float64, 120 bytes
    with Profiler() as prof:
        (x @ w).sum().backward()
    got = prof.by_op()["matmul"].backward_bytes
    assert got == 120, (
        f"matmul's backward bytes {got}, expected 120 (dW only: x needs no gradient, so the rule returned None for "
        "it): the bytes of the gradients the rule RETURNED (the arrays in grads, skipping None), not of node.inputs")


def test_calls_and_times_of_each_phase(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    d, s = prof.by_op()["demo_double"], prof.by_op()["demo_sum"]
    assert (d.calls, d.backward_calls, s.calls, s.backward_calls) == (1, 1, 1, 1), \
        f"calls demo_double {d.calls}/{d.backward_calls}, demo_sum {s.calls}/{s.backward_calls}: expected 1/1 each"
    assert (d.forward_s, s.forward_s) == (2.25, 1.0), (
        f"forward times {d.forward_s} and {s.forward_s}, expected 2.25 and 1.0: add `elapsed` (the time since the "
        "previous event) to stats.forward_s")
    assert (d.backward_s, s.backward_s) == (3.0, 0.5), (
        f"backward times {d.backward_s} and {s.backward_s}, expected 3.0 and 0.5: add `elapsed` to stats.backward_s")



def test_a_repeated_op_adds_up_its_calls(fake, demo_ops):
    # demo_double twice in a row: forward 0.25 (before the first op) + 2 + 2 s, backward 3 + 3 s, FLOPs 10 + 10
    # and 20 + 20, bytes 32 + 32 each way. A row that keeps only the last call's numbers (=, not +=) halves them.
    double, total = demo_ops
    x = Tensor(np.ones(4), requires_grad=True)
    with Profiler() as prof:
        fake.advance(0.25)
        total(double(double(x))).backward()
    d = prof.by_op()["demo_double"]
    got = {"calls": d.calls, "forward_s": d.forward_s, "forward_flops": d.forward_flops, "forward_bytes": d.forward_bytes,
           "backward_calls": d.backward_calls, "backward_s": d.backward_s, "backward_flops": d.backward_flops,
           "backward_bytes": d.backward_bytes}
    expected = {"calls": 2, "forward_s": 4.25, "forward_flops": 20, "forward_bytes": 64,
                "backward_calls": 2, "backward_s": 6.0, "backward_flops": 40, "backward_bytes": 64}
    overwritten = [name for name in expected if got[name] != expected[name]]
    assert not overwritten, (
        f"demo_double called twice: {', '.join(f'{n} {got[n]} (expected {expected[n]})' for n in overwritten)}: "
        "a repeated op's row must ADD each call's numbers (+=), not overwrite them with the last call's")

def test_rows_add_up_to_the_wall_time(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    ops = sum(s.total_s for s in prof.by_op().values())
    labels = sum(s.forward_s for s in prof.regions.values())
    assert prof.regions["update"].calls == 1 and prof.regions["update"].forward_s == 4.0
    assert prof.outside_s == 0.1875, f"time in no op {prof.outside_s}, expected 0.125 + 0.0625"
    assert ops + labels + prof.outside_s == prof.wall_s == fake.now, \
        f"ops {ops} + labels {labels} + outside {prof.outside_s} != wall {prof.wall_s}"


def table_names(text):
    return [line[:22].strip() for line in text.splitlines()[3:-2]]


def test_table_is_sorted_largest_first_and_cut_to_top(fake, demo_ops):
    prof = profile_demo(fake, *demo_ops)
    names = table_names(prof.table())
    assert names == ["demo_double", "update", "demo_sum", NOT_IN_AN_OP], (
        f"table rows {names}: sorted by total time, largest first (5.25 s, 4 s, 1.5 s), '(not in an op)' last")
    assert table_names(prof.table("calls")) == ["demo_double", "demo_sum", "update", NOT_IN_AN_OP], \
        "ties (one call each) go in name order"
    assert table_names(prof.table("flops", top=1)) == ["demo_double", NOT_IN_AN_OP], \
        "table(top=1) keeps the first row only (and the '(not in an op)' line)"
    assert table_names(prof.table("backward", top=2)) == ["demo_double", "demo_sum", NOT_IN_AN_OP]
    with pytest.raises(ValueError, match="sort_by"):
        prof.table("name")


def test_only_one_profiler_at_a_time():
    with Profiler():
        with pytest.raises(RuntimeError, match="already running"):
            Profiler().__enter__()
    from tinytorch.core.tensor import OP_LISTENERS

    assert not OP_LISTENERS, "a profiler must leave OP_LISTENERS when it exits"


# ---- count_flops ------------------------------------------------------------------------------------------
def test_count_flops_of_a_linear_layer_forward_and_backward():
    from tinytorch.core.layers import Linear

    layer = Linear(6, 5)
    x = Tensor(np.ones((4, 6)))
    forward = 2 * 4 * 6 * 5
    assert count_flops(layer, x) == forward, f"count_flops(Linear(6, 5), x (4, 6)) = {count_flops(layer, x)}, expected 240"
    got = count_flops(lambda: layer(x).sum(), backward=True)
    assert got == 2 * forward, (
        f"count_flops(..., backward=True) = {got}, expected {2 * forward} (forward + dW): run the loss's backward() "
        "inside the profiler")
    try:
        count_flops(lambda: layer(x), backward=True)
    except ValueError as err:
        assert "scalar loss" in str(err), f"the ValueError says {err}: let _loss_of (given) raise it"
    except Exception as err:  # what backward() itself raises on a (4, 5) output
        pytest.fail(f"count_flops(fn returning a (4, 5) Tensor, backward=True) raised {type(err).__name__}: {err}. "
                    "Pass what fn returned through _loss_of (given) before calling .backward(): it raises the "
                    "ValueError that says fn must return the scalar loss")
    else:
        pytest.fail("count_flops(fn returning a (4, 5) Tensor, backward=True) raised nothing: pass what fn returned "
                    "through _loss_of (given), which raises ValueError unless it is the scalar loss")


# ---- measure_latency --------------------------------------------------------------------------------------
class Scripted:
    """Each call advances `fake` by the next duration (a GPU call: queues it until synchronize)."""

    def __init__(self, fake, durations, queued=False):
        self.fake, self.durations, self.queued, self.calls, self.pending = fake, list(durations), queued, 0, 0.0

    def __call__(self, *args):
        seconds = self.durations[self.calls]
        self.calls += 1
        if self.queued:
            self.pending += seconds
        else:
            self.fake.advance(seconds)

    def synchronize(self, device):
        self.fake.advance(self.pending)
        self.pending = 0.0


COLD_THEN_STEADY = [9.0, 7.0, 5.0] + [1.0, 2.0, 1.0, 100.0, 1.0, 3.0, 1.0, 2.0]


def test_measure_latency_reads_the_modules_clock(fake):
    t = measure_latency(Scripted(fake, [1.0] * 4), warmup=1, repeats=3)
    assert t.samples == [1.0, 1.0, 1.0], (
        f"samples {t.samples}, expected [1, 1, 1] from a fake clock that moves 1 s per call: read the module's "
        "`clock()` before and after each call (the tests replace it), never time.perf_counter() or time.time()")


def test_measure_latency_warms_up_first(fake):
    fn = Scripted(fake, COLD_THEN_STEADY)
    t = measure_latency(fn, warmup=3, repeats=8)
    assert fn.calls == 11, f"fn was called {fn.calls} times, expected warmup + repeats = 11: run the warm-up calls first"
    assert t.samples == COLD_THEN_STEADY[3:], (
        f"samples {t.samples}: expected the 8 timed calls after the warm-up, in order (warm-up calls are not timed)")


def test_measure_latency_reports_the_median(fake):
    t = measure_latency(Scripted(fake, COLD_THEN_STEADY), warmup=3, repeats=8)
    assert isinstance(t, Timing) and t.median_s == 1.5, (
        f"median_s {t.median_s}: expected the median of the samples, 1.5 (the mean, {np.mean(COLD_THEN_STEADY[3:])}, "
        "is pulled up by the one slow run)")


def test_measure_latency_reports_the_interquartile_range(fake):
    t = measure_latency(Scripted(fake, COLD_THEN_STEADY), warmup=3, repeats=8)
    assert t.iqr_s == 1.25, (f"iqr_s {t.iqr_s}: expected the interquartile range, np.percentile(samples, 75) - "
                             "np.percentile(samples, 25) = 1.25 (not the whole range, not a standard deviation)")


def test_measure_latency_synchronises_a_gpu_before_reading_the_clock(fake, monkeypatch):
    gpu = Scripted(fake, [5.0, 5.0, 4.0, 4.0, 4.0], queued=True)  # a call queues its work and returns
    monkeypatch.setattr(profiling, "synchronize", gpu.synchronize)
    t = measure_latency(gpu, warmup=2, repeats=3, device="cuda")
    assert t.samples == [4.0, 4.0, 4.0], (
        f"GPU samples {t.samples}, expected [4, 4, 4]: synchronise the device (synchronize(device)) after the warm-up "
        "and after each call, before reading the clock")


def test_measure_latency_refuses_nonsense():
    with pytest.raises(ValueError, match="repeats"):
        measure_latency(lambda: None, repeats=0)


# ---- peak_memory -------------------------------------------------------------------------------------------
MIB = 2**20


def temporary(n):
    """Allocates n float64 (8·n bytes) and keeps nothing."""
    return float(np.ones(n).sum())


def test_peak_memory_is_the_peak_not_what_is_left():
    got = peak_memory(temporary, MIB // 8)
    assert MIB <= got < MIB + 64 * 1024, (
        f"peak_memory of a 1 MiB temporary that is freed before fn returns: {got} bytes, expected just above "
        f"{MIB}: the PEAK (get_traced_memory()[1]), not what is left at the end")
    assert not tracemalloc.is_tracing(), "peak_memory started tracing: it must stop it"


def test_peak_memory_inside_a_running_trace():
    tracemalloc.start()
    try:
        kept = np.ones(2 * MIB)  # 16 MiB alive during the call: below the call's baseline
        big = np.ones(4 * MIB)   # a 32 MiB peak before the call
        del big
        got = peak_memory(temporary, MIB // 8)
        still = tracemalloc.is_tracing()
        del kept
    finally:
        tracemalloc.stop()
    assert MIB <= got < MIB + 64 * 1024, (
        f"peak_memory of a 1 MiB temporary inside a running trace (16 MiB allocated, a 32 MiB peak before): {got} "
        "bytes. Reset tracemalloc's peak before calling fn (tracemalloc.reset_peak()) and subtract the bytes traced "
        "when fn started")
    assert still, "tracing was running before peak_memory: leave it running (stop only what you started)"


def test_peak_memory_stops_tracing_when_fn_raises():
    def boom():
        raise KeyError("inside fn")

    with pytest.raises(KeyError):
        peak_memory(boom)
    assert not tracemalloc.is_tracing(), "stop tracing even when fn raises (try/finally)"


# ---- graph_saved_bytes -------------------------------------------------------------------------------------
def small_graph():
    w = Tensor(np.ones((8, 4)), requires_grad=True)  # a parameter: a leaf
    x = Tensor(np.ones((16, 8)))                      # data: a leaf
    h = x @ w                                         # 512 bytes
    r = h.reshape(64)                                 # a view of h
    return w, (r * r).sum()                           # r used twice; r*r 512 bytes; the loss 8


def test_graph_saved_bytes_leaves_out_the_leaves():
    w = Tensor(np.ones((8, 4)), requires_grad=True)    # a parameter: 256 bytes
    x = Tensor(np.ones((16, 8)))                        # data, no gradient: 1024 bytes
    got = graph_saved_bytes(x @ w)                      # h: 512 bytes
    assert got == 512, f"graph_saved_bytes(x @ w) = {got}, expected 512 (h's own array): " + {
        0: "count tensor's own array (tensor.data) too",
        512 + 1024: "x (data, 1024 bytes) is a leaf too: it needs no gradient, so it is not in topological_order; "
                    "find the leaves among node.inputs (inp._node is None)",
        512 + 256: "w (a parameter, 256 bytes) is a leaf: leaves (parameters, data) and views of them exist "
                   "without the graph",
        512 + 256 + 1024: "leaves (parameters, data) and views of them exist without the graph"}.get(
            got, "leaves (parameters, data) and views of them exist without the graph")
    assert graph_saved_bytes(w) == 0, f"graph_saved_bytes(w) = {graph_saved_bytes(w)}: a leaf has no graph behind it, 0"
    got = graph_saved_bytes(w.transpose().sum())
    assert got == 8, (f"graph_saved_bytes of w.transpose().sum(): {got}, expected 8 (the loss): leaves (parameters, "
                      "data) and views of them exist without the graph (a view shares its base's memory: "
                      "_buffer_of(array) is the owner to compare)")


def test_graph_saved_bytes_counts_each_array_once():
    w = Tensor(np.ones(8), requires_grad=True)
    h = w * 2.0                                       # 64 bytes
    got = graph_saved_bytes((h * h).sum())            # h is both inputs of h*h
    assert got == 64 + 64 + 8, (f"graph_saved_bytes of (h*h).sum(): {got}, expected 136 (h, h*h, the loss): "
                                "count each array once, however many nodes hold it")
    e = Tensor(np.ones((8, 4)), requires_grad=True).exp()
    got = graph_saved_bytes(e.sum())
    assert got == 256 + 8, (f"graph_saved_bytes of w.exp().sum(): {got}, expected 264: exp saves its output, which is "
                            "e's own array: count each array once")


def test_graph_saved_bytes_counts_a_view_as_its_base():
    _, loss = small_graph()
    got = graph_saved_bytes(loss)
    assert got == 512 + 512 + 8, (f"graph_saved_bytes = {got}, expected 1032: a view (reshape) shares its base's "
                                  "memory: count the buffer that owns it (_buffer_of) once")


# ---- machine_peak -------------------------------------------------------------------------------------------
def test_machine_peak_counts_2n3_flops_and_2x_bytes_at_the_fastest_sample(monkeypatch):
    calls = []

    def fake_latency(fn, *args, warmup=3, repeats=20, device=None):
        fn(*args)
        calls.append((warmup, repeats, device))
        best = 0.004 if len(calls) == 1 else 0.002
        return Timing(2.5 * best, best, [3 * best, best, 2.5 * best])  # the fastest sample is `best`

    monkeypatch.setattr(profiling, "measure_latency", fake_latency)
    gflops, gbytes = machine_peak(n=64, copy_mib=1, repeats=3)
    assert calls == [(1, 3, "cpu")] * 2, f"measure_latency calls {calls}: the product, then the copy, warmup=1"
    right = 2 * 64**3 / 0.004 / 1e9
    if math.isclose(gflops, 2 * 64**3 / 0.002 / 1e9) and math.isclose(gbytes, 2 * MIB / 0.004 / 1e9):
        pytest.fail("machine_peak timed the copy first (its numbers are the second answer of measure_latency): "
                    "time the product first, then the copy")
    if math.isclose(gflops, 2 * 64**3 / 0.010 / 1e9):
        pytest.fail(f"GFLOP/s {gflops} comes from the median time: a peak is the FASTEST sample, min(timing.samples)")
    assert math.isclose(gflops, right), (
        f"GFLOP/s {gflops}: (64, 64) @ (64, 64) in 4 ms is 2·n³ = {2 * 64**3} FLOPs (a multiply and an add per "
        f"term) / 0.004 s / 1e9 = {right:.4f}")
    assert math.isclose(gbytes, 2 * MIB / 0.002 / 1e9), (
        f"GB/s {gbytes}: copying 1 MiB in 2 ms reads and writes every byte: 2·{MIB} bytes / 0.002 s / 1e9")


def test_machine_peak_measures_this_machine():
    # A shared, busy machine can be slow: the real rates are only checked to be positive, finite floats
    # (a fixed floor such as 0.1 GFLOP/s failed under load); the arithmetic is checked on a fake clock above.
    gflops, gbytes = machine_peak(n=128, copy_mib=4, repeats=2)
    assert isinstance(gflops, float) and isinstance(gbytes, float), (type(gflops), type(gbytes))
    assert 0 < gflops < math.inf and 0 < gbytes < math.inf, f"machine_peak measured {gflops} GFLOP/s, {gbytes} GB/s"


# ---- a GPT: the graph's bytes against tracemalloc, AdamW's state --------------------------------------------
def milestone_model():
    from tinytorch.models.transformer import GPT

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 65, (2, 12, 64))
    return GPT(65, 128, 4, 4, 64, bias=False, seed=0), x, y


def test_graph_saved_bytes_of_a_gpt_forward_matches_tracemalloc():
    tracemalloc.start()
    try:
        model, x, y = milestone_model()
        before = tracemalloc.get_traced_memory()[0]
        logits, loss = model(x, targets=y)
        added = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    held = graph_saved_bytes(loss)
    assert abs(held - added) <= 0.1 * added, (
        f"graph_saved_bytes after a GPT forward: {held:,} bytes; tracemalloc saw the forward add {added:,}: "
        "expected within 10%")


def test_adamw_state_is_two_arrays_per_parameter_measured():
    from tinytorch.core.optimizers import AdamW, weight_decay_groups

    tracemalloc.start()  # before the model: the step replaces every parameter's array, and both are seen
    try:
        model, x, y = milestone_model()
        optimizer = AdamW(weight_decay_groups(model, 0.1), lr=1e-3)
        model(x, targets=y)[1].backward()
        before = tracemalloc.get_traced_memory()[0]
        optimizer.step()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    params = sum(p.data.nbytes for p in model.parameters())
    assert abs(kept / params - 2) < 0.01, f"AdamW's first step kept {kept / params:.4f} × the parameters' bytes, expected 2"
    for p, state in zip(optimizer.params, optimizer.state):
        arrays = [v for v in state.values() if hasattr(v, "shape")]
        assert len(arrays) == 2 and all(a.shape == p.shape and a.dtype == p.dtype for a in arrays)
