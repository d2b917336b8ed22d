# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 14: Profiling
#
# > Before you make a model faster, find out where its time goes: on your machine, in your
# > code, measured.
#
# Modules 01–13 built a GPT that trains on Shakespeare. This module starts the second half
# of the course, the *systems* half: making models smaller and faster. Every later module
# (quantization, compression, memory, acceleration, benchmarking) needs the same instruments,
# and they are what you build here. One rule runs through all of them: **every number is
# measured on your own code**, and where PyTorch has the same tool, your number is checked
# against PyTorch's.
#
# **What you will be able to do when you finish:**
#
# * attach a profiler to the engine's one recording point (`record_op`) and its backward
#   loop, and read its table: per operation, calls, forward and backward time, FLOPs and
#   bytes, sorted the way PyTorch's profiler sorts;
# * count floating-point operations in PyTorch's convention (`2·m·k·n` per matrix product,
#   the backward included) and check your count against `torch.utils.flop_counter`;
# * time code honestly: warm-up, repeats, median and spread, and a GPU synchronised before
#   the clock is read;
# * measure peak memory, and the memory a graph keeps alive for its backward pass;
# * measure your machine's own peak (matrix-product GFLOP/s, copy GB/s), draw its
#   roofline, place every operation of a training step on it, and compute the step's
#   model-FLOP utilisation.
#
# **Time:** about 3 hours: sections 1–3 (the profiler and FLOPs), then 4–6 (time, memory,
# the machine's peak), then 7–8 (the Shakespeare GPT, PyTorch) and the exercises.
#
# | section | you write | what it does |
# |---|---|---|
# | 2 | `Profiler.op_recorded`, `Profiler.rule_finished`, `Profiler.total_flops`, `Profiler.table` | per-op time, FLOPs and bytes, forward and backward |
# | 3 | `count_flops` | the FLOPs of any function, optionally with its backward |
# | 4 | `measure_latency` | warm-up, repeats, median and interquartile range |
# | 5 | `peak_memory`, `graph_saved_bytes` | the peak of a call; what a graph holds for backward |
# | 6 | `machine_peak` | this machine's matrix-product GFLOP/s and copy GB/s |
#
# Given: the listener list in module 01 and module 05's `apply_rule` (the hooks), each
# op's FLOP formula (beside its backward rule, in modules 05, 09 and 12), the clock, the
# table's layout, GPU memory accounting and the plots.

# %%
#| default_exp perf.profiling

# %%
#| export
from __future__ import annotations

import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tinytorch.core.autograd import (BACKWARD_RULES, FLOP_RULES, op_flops, register_backward, register_flops,
                                     topological_order)
from tinytorch.core.tensor import OP_LISTENERS, Node, Tensor, as_int, cuda_module, device_of, record_op
from tinytorch.plotting import pyplot

# %% [markdown]
# ## 1. Listening to the engine
#
# Every result in TinyTorch is made by one function, module 01's `record_op`, and every
# gradient by one loop, module 05's `backward`, which runs each backward rule through the
# given `apply_rule`. So a profiler needs no copy of the engine: it only has to **listen**.
# Module 01 keeps a list, `OP_LISTENERS`; whoever is in it hears three things:
#
# | event | when | with |
# |---|---|---|
# | `op_recorded(op, out, inputs, saved)` | `record_op` has made the result `out` (also under `no_grad`) | the op's name, its output Tensor, its input Tensors, what it saved |
# | `rule_started(node, grad)` | `apply_rule` is about to run the backward rule of `node` | the node, the output's gradient (an array) |
# | `rule_finished(node, grad, grads)` | the rule returned | ... and `grads`, one array (or None) per input |
#
# With nobody listening, the engine pays one check of an empty list per event: the benchmark
# `tito bench profiler_overhead` measures that cost (and the profiler's own).
#
# A listener that only prints, on a two-layer example:

# %%
from tinytorch.core.activations import relu


class PrintingListener:
    def op_recorded(self, op, out, inputs, saved):
        print(f"forward  {op:8s} -> {out.shape}")

    def rule_started(self, node, grad):
        print(f"backward {node.op:8s} starts, grad {grad.shape}")

    def rule_finished(self, node, grad, grads):
        print(f"backward {node.op:8s} done: {[None if g is None else g.shape for g in grads]}")


rng = np.random.default_rng(0)
x = Tensor(rng.standard_normal((4, 3)))
w = Tensor(rng.standard_normal((3, 2)), requires_grad=True)
listener = PrintingListener()
OP_LISTENERS.append(listener)
try:
    loss = relu(x @ w).sum()
    loss.backward()
finally:
    OP_LISTENERS.remove(listener)

# %% [markdown]
# The backward pass visits the ops in reverse, and `matmul`'s rule returns `None` for `x`:
# `x` needs no gradient, so the rule skips that product (module 05's `matmul_backward`).
# That is the first thing a profiler must get right: it counts the work that was done.
#
# ## 2. The profiler
#
# `Profiler` is a context manager. While it runs it sits in `OP_LISTENERS` and keeps one
# `OpStats` per op name: forward calls and backward calls, forward and backward seconds,
# forward and backward FLOPs, and the bytes each produced (the output in the forward, the
# gradients in the backward).
#
# **What "the time of an op" means here.** `record_op` is called *after* an op has computed
# its result, so the profiler never sees an op start. It sees events, and it reads a clock
# at each one. The time between two events belongs to exactly one row:
#
# * ending at `op_recorded(op)`: to `op`'s forward time. That is the op's own work **plus
#   the Python that led to it** (the `reshape` call, the argument checks, the layer's
#   `forward`): what the op cost the step;
# * between `rule_started` and `rule_finished`: to that op's backward time (the rule itself);
# * from `rule_finished` to the next `rule_started`: also to the op whose rule just ran:
#   the engine is summing its gradients into their inputs (`unbroadcast`, the cast, the
#   accumulation);
# * anything else (from the last op of the forward pass to the first rule: `zero_grad`,
#   `backward()`'s own start; after the last rule; the optimizer's step) goes to the row
#   `(not in an op)`, or to a named row when you wrap it in
#   `record_function("AdamW.step")` (as `torch.profiler.record_function` does).
#
# So the rows add up to the wall time between entering and leaving the profiler, exactly,
# by construction. Section 7 compares them with a step measured without a profiler. One
# consequence to remember: unlabelled work that is *followed by an op* counts as that op's
# forward time, because the profiler cannot tell it from the Python that led to the op.
# Profile several steps in a loop without labelling the optimizer and each step's AdamW
# lands in the next step's first op (the embedding); label it.
#
# The clock is `clock`, a module-level name (`time.perf_counter`, wall-clock seconds), so
# that the tests can replace it with a `FakeClock` that only moves when told to: a test of a
# profiler must not depend on how busy the machine is.
#
# The given part of the class: entering and leaving, `_lap()` (seconds since the previous
# event; it moves the mark to now), `rule_started`, `record_function`, `by_op`, and the
# table's layout.

# %%
#| export
clock: Callable[[], float] = time.perf_counter  # wall-clock seconds; tests swap in a FakeClock

NOT_IN_AN_OP = "(not in an op)"


class FakeClock:
    """A clock for tests: reading it (`fake()`) returns the time, which moves only by `advance(s)`."""

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class OpStats:
    """What the profiler adds up for one op name (or one `record_function` label)."""

    calls: int = 0            # forward calls
    backward_calls: int = 0   # backward rules run
    forward_s: float = 0.0
    backward_s: float = 0.0
    forward_flops: int = 0
    backward_flops: int = 0
    forward_bytes: int = 0    # bytes of the outputs the forward produced
    backward_bytes: int = 0   # bytes of the gradients the backward rule returned
    traffic_bytes: int = 0    # bytes moved, estimated (_traffic): for the roofline

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def flops(self) -> int:
        return self.forward_flops + self.backward_flops

    @property
    def bytes(self) -> int:
        return self.forward_bytes + self.backward_bytes


def _is_array(value: Any) -> bool:
    """True for a NumPy or CuPy array (what node.saved may hold besides numbers, tuples and None)."""
    return hasattr(value, "nbytes") and hasattr(value, "dtype") and hasattr(value, "shape") \
        and not isinstance(value, Tensor)


def _buffer_of(array: Any) -> Any:
    """The array that owns `array`'s memory: follow `.base` from a view to its owner."""
    while getattr(array, "base", None) is not None and _is_array(array.base):
        array = array.base
    return array


def _traffic(read: Any, written: Any) -> int:
    """Bytes an op moves, estimated: the new arrays it wrote (not views of what it read) and the
    distinct arrays in `read` (Tensors count their array), each buffer once; 0 when it wrote
    nothing new (a view, a gradient handed on unchanged): then it moved no bytes."""
    read_buffers: dict[int, int] = {}
    for v in read:
        v = v.data if isinstance(v, Tensor) else v
        if _is_array(v):
            read_buffers.setdefault(id(_buffer_of(v)), int(v.nbytes))
    new: dict[int, int] = {}
    for v in written:
        v = v.data if isinstance(v, Tensor) else v
        if _is_array(v) and id(_buffer_of(v)) not in read_buffers:
            new.setdefault(id(_buffer_of(v)), int(v.nbytes))
    return sum(new.values()) + sum(read_buffers.values()) if new else 0


SORT_KEYS: dict[str, Callable[[OpStats], float]] = {
    "time": lambda s: s.total_s, "forward": lambda s: s.forward_s, "backward": lambda s: s.backward_s,
    "flops": lambda s: s.flops, "bytes": lambda s: s.bytes, "calls": lambda s: s.calls,
}


class Profiler:
    """`with Profiler() as prof:` around a forward and backward pass (or a whole training step).

    prof.by_op()            -> {op name: OpStats}
    prof.total_flops(phase) -> FLOPs, phase None (both), "forward" or "backward"
    prof.table(sort_by, top)-> PyTorch-style table, one row per op (and record_function label)
    prof.wall_s             -> seconds between entering and leaving
    prof.outside_s          -> seconds in no op and no label (the "(not in an op)" row)
    prof.regions            -> {label: OpStats} of the record_function blocks (calls, forward_s)
    Built on the engine's hooks (module 01's OP_LISTENERS); one profiler at a time.
    """

    def __init__(self) -> None:
        self.stats: dict[str, OpStats] = {}
        self.regions: dict[str, OpStats] = {}
        self.outside_s = 0.0
        self.wall_s = 0.0
        self._start = self._mark = 0.0
        self._after_rule: str | None = None  # the op whose rule finished last, until the next event
        self._open: list[str] = []           # record_function labels open now, innermost last

    # ---- entering and leaving -----------------------------------------------------------------
    def __enter__(self) -> "Profiler":
        if any(isinstance(listener, Profiler) for listener in OP_LISTENERS):
            raise RuntimeError("Profiler: another profiler is already running; nest record_function "
                               "blocks inside one profiler instead.")
        self.__init__()
        self._start = self._mark = clock()
        OP_LISTENERS.append(self)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        OP_LISTENERS.remove(self)
        self._charge_outside(self._lap())
        self.wall_s = self._mark - self._start
        return False

    # ---- the clock ------------------------------------------------------------------------------
    def _lap(self) -> float:
        """Seconds since the previous event (or since the profiler started); the mark moves to now."""
        now = clock()
        elapsed, self._mark = now - self._mark, now
        return elapsed

    def _row(self, op: str) -> OpStats:
        """The OpStats of `op`, made on first use."""
        stats = self.stats.get(op)
        if stats is None:
            stats = self.stats[op] = OpStats()
        return stats

    def _charge_outside(self, seconds: float) -> None:
        """Time in no op: to the innermost open record_function label, else to "(not in an op)"."""
        if self._open:
            self.regions[self._open[-1]].forward_s += seconds
        else:
            self.outside_s += seconds
        self._after_rule = None

    # ---- what the engine tells us ---------------------------------------------------------------
    def op_recorded(self, op: str, out: Tensor, inputs: tuple, saved: dict) -> None:
        """record_op made `out`: add one forward call of `op` to its row.

        Given: `elapsed` (the seconds since the previous event: this op's share of the time)
        and `stats`, op's OpStats. Yours: add 1 to stats.calls, `elapsed` to stats.forward_s,
        the op's FLOPs to stats.forward_flops and the bytes of the OUTPUT array
        (`out.data.nbytes`) to stats.forward_bytes. FLOPs come from module 05's
        `op_flops(node, out.shape)` with node = `out._node`, or, when no graph was recorded
        (gradients off, or no input requires a gradient: `out._node` is None),
        `Node(op, inputs, saved)`, which describes the same op: inference has FLOPs too.
        `op_flops` returns 0 for an op without a FLOP formula (elementwise ops, `demo_sum`):
        add what it returns, whatever the op.
        """
        elapsed = self._lap()
        self._after_rule = None
        stats = self._row(op)
        stats.traffic_bytes += _traffic(inputs, (out,))
        ### BEGIN SOLUTION
        stats.calls += 1
        stats.forward_s += elapsed
        node = out._node if out._node is not None else Node(op, inputs, saved)
        stats.forward_flops += op_flops(node, out.shape)
        stats.forward_bytes += int(out.data.nbytes)
        ### END SOLUTION

    def rule_started(self, node: Node, grad: Any) -> None:
        """apply_rule is about to run node's rule: the time since the previous event was the engine
        summing the gradients of the rule before (charged to that op's backward) or, when no rule
        ran before it, time in no op."""
        elapsed = self._lap()
        if self._after_rule is not None:
            self._row(self._after_rule).backward_s += elapsed
        else:
            self._charge_outside(elapsed)
        self._after_rule = None

    def rule_finished(self, node: Node, grad: Any, grads: Any) -> None:
        """node's backward rule returned `grads` (one array or None per node.inputs).

        Given: `elapsed` (seconds since rule_started: the rule itself) and `stats`, the
        OpStats of node.op. Yours: add 1 to stats.backward_calls, `elapsed` to
        stats.backward_s, the backward's FLOPs, `op_flops(node, grad.shape, grads)` (grads
        tells the formula which products the rule ran), to stats.backward_flops, and the
        bytes of the gradients it returned (the arrays in grads, skipping None: an input
        that needs no gradient got none, so it produced no bytes) to stats.backward_bytes:
        not the bytes of node.inputs.
        """
        elapsed = self._lap()
        self._after_rule = node.op
        stats = self._row(node.op)
        stats.traffic_bytes += _traffic((grad, *node.saved.values()), grads)
        ### BEGIN SOLUTION
        stats.backward_calls += 1
        stats.backward_s += elapsed
        stats.backward_flops += op_flops(node, grad.shape, grads)
        stats.backward_bytes += sum(int(g.nbytes) for g in grads if g is not None)
        ### END SOLUTION

    # ---- record_function -----------------------------------------------------------------------
    def _region_started(self, label: str) -> None:
        self._charge_outside(self._lap())
        self.regions.setdefault(label, OpStats()).calls += 1
        self._open.append(label)

    def _region_finished(self, label: str) -> None:
        self.regions[label].forward_s += self._lap()
        self._after_rule = None
        if label in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(label)]

    # ---- what you read ---------------------------------------------------------------------------
    def by_op(self) -> dict[str, OpStats]:
        """{op name: OpStats} for every op seen (the labels of record_function are in `regions`)."""
        return dict(self.stats)

    def total_flops(self, phase: str | None = None) -> int:
        """FLOPs of every op seen: phase None = forward + backward, "forward" or "backward" only.

        Sum stats.forward_flops and/or stats.backward_flops over self.stats.values():
        total_flops("forward") is the sum of forward_flops alone, total_flops("backward") of
        backward_flops alone, total_flops() both. Returns an int.
        """
        if phase not in (None, "forward", "backward"):
            raise ValueError(f"total_flops: phase must be None, 'forward' or 'backward', got {phase!r}.")
        ### BEGIN SOLUTION
        forward = sum(s.forward_flops for s in self.stats.values())
        backward = sum(s.backward_flops for s in self.stats.values())
        return {None: forward + backward, "forward": forward, "backward": backward}[phase]
        ### END SOLUTION

    def table(self, sort_by: str = "time", top: int | None = None) -> str:
        """The table, one row per op and per record_function label, as PyTorch's profiler prints it:
        sorted by `sort_by` (a key of SORT_KEYS: "time" = forward + backward seconds, "forward",
        "backward", "flops", "bytes", "calls"), largest first, ties in name order, the first
        `top` rows (all when None); "(not in an op)" always comes last.

        Given: `items`, a list of (name, OpStats) pairs, ops and labels together; `key`, the
        function of SORT_KEYS that gives a row's number (key(stats)); and the layout
        (`_format`, which adds the "(not in an op)" line itself). Yours: `rows`, the list
        `items` sorted and cut as described.
        """
        if sort_by not in SORT_KEYS:
            raise ValueError(f"table: sort_by must be one of {sorted(SORT_KEYS)}, got {sort_by!r}.")
        key = SORT_KEYS[sort_by]
        items = list(self.stats.items()) + list(self.regions.items())
        ### BEGIN SOLUTION
        rows = sorted(items, key=lambda item: (-key(item[1]), item[0]))
        if top is not None:
            rows = rows[:top]
        ### END SOLUTION
        return self._format(rows, sort_by)

    def _format(self, rows: list[tuple[str, OpStats]], sort_by: str) -> str:
        """PyTorch's layout: a dashed header, one line per row, a dashed footer with the totals."""
        wall = self.wall_s or sum(s.total_s for _, s in rows) or 1.0
        columns = ("Name", "Calls", "Forward", "Backward", "Total", "% wall", "FLOPs", "GFLOP/s", "Bytes")
        widths = (22, 9, 11, 11, 11, 7, 10, 8, 10)
        line = "  ".join("-" * w for w in widths)
        out = [line, "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(columns, widths))),
               line]
        for name, s in rows + [(NOT_IN_AN_OP, OpStats(forward_s=self.outside_s))]:
            calls = f"{s.calls}/{s.backward_calls}" if s.backward_calls else str(s.calls or "")
            rate = f"{s.flops / s.total_s / 1e9:.2f}" if s.flops and s.total_s > 0 else ""
            cells = (name[:22], calls, _ms(s.forward_s), _ms(s.backward_s) if s.backward_calls else "",
                     _ms(s.total_s), f"{100 * s.total_s / wall:.1f}%", _si(s.flops) if s.flops else "",
                     rate, _mib(s.bytes) if s.bytes else "")
            out.append("  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths))))
        out += [line, f"Wall time {_ms(self.wall_s)}; FLOPs {_si(self.total_flops())} (forward "
                f"{_si(self.total_flops('forward'))}, backward {_si(self.total_flops('backward'))}); sorted by "
                f"{sort_by}; Calls = forward/backward; (not in an op): time in no op and no label"]
        return "\n".join(out)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _si(count: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count:.0f}"


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


class record_function:
    """`with record_function("AdamW.step"): optimizer.step()`: the block's time (outside any op
    recorded inside it) gets a row of its own in the running profiler's table, as
    torch.profiler.record_function does. Without a running profiler it does nothing."""

    def __init__(self, label: str):
        self.label = str(label)

    def __enter__(self) -> "record_function":
        for listener in OP_LISTENERS:
            if isinstance(listener, Profiler):
                listener._region_started(self.label)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        for listener in OP_LISTENERS:
            if isinstance(listener, Profiler):
                listener._region_finished(self.label)
        return False


# %% [markdown]
# ### Test: a fake clock and two made-up ops
#
# The test registers two ops that exist only here, `demo_double` (forward 2 seconds,
# backward rule 3 seconds, a FLOP formula of 10 forward and 20 backward) and `demo_sum`,
# runs them under a `FakeClock` that moves only when the ops say so, and checks every number
# of the table against a hand count.

# %%
#| export
def demo_ops(fake: FakeClock):
    """(double, total): two made-up ops for tests, whose forward and backward advance `fake` by known
    amounts. demo_double: forward 2 s, rule 3 s, 10 FLOPs forward and 20 backward; demo_sum:
    forward 1 s, rule 0.5 s, no FLOP formula. Registers their rules; forget_demo_ops() removes them."""
    register_backward("demo_double")(lambda grad, node: (fake.advance(3.0), 2 * grad)[1:])
    register_flops("demo_double")(lambda node, shape, grads=None: 10 if grads is None else 20)
    register_backward("demo_sum")(lambda grad, node: (fake.advance(0.5), np.ones(node.inputs[0].shape) * grad)[1:])

    def double(t):
        fake.advance(2.0)
        return record_op("demo_double", 2 * t.data, (t,))

    def total(t):
        fake.advance(1.0)
        return record_op("demo_sum", t.data.sum(), (t,))

    return double, total


def forget_demo_ops() -> None:
    """Remove demo_ops' rules and formulas from the registries."""
    for registry in (BACKWARD_RULES, FLOP_RULES):
        for op in ("demo_double", "demo_sum"):
            registry.pop(op, None)


# %%
from tinytorch.core.autograd import no_grad


def test_unit_profiler():
    global clock
    real, fake = clock, FakeClock()
    clock = fake
    double, total = demo_ops(fake)
    try:
        x = Tensor(np.ones(4), requires_grad=True)
        with Profiler() as prof:
            fake.advance(0.25)              # before the first op: the first op's share
            loss = total(double(x))
            fake.advance(0.125)             # between the forward pass and backward(): in no op
            loss.backward()
            with record_function("update"):
                fake.advance(4.0)           # an optimizer step: its own row
            fake.advance(0.0625)            # after it: in no op again
        d, s = prof.by_op()["demo_double"], prof.by_op()["demo_sum"]
        calls = (d.calls, d.backward_calls, s.calls, s.backward_calls)
        assert calls == (1, 1, 1, 1), \
            f"calls: demo_double {d.calls}/{d.backward_calls}, demo_sum {s.calls}/{s.backward_calls}, expected 1/1 each: " + {
                (0, 1, 0, 1): "op_recorded counted no call: add 1 to stats.calls",
                (1, 0, 1, 0): "rule_finished counted no call: add 1 to stats.backward_calls",
                (2, 0, 2, 0): "rule_finished added its call to stats.calls (the forward's): a rule's call counts in "
                              "stats.backward_calls"}.get(calls, "one forward call and one rule each")
        forward = (d.forward_s, s.forward_s)
        assert forward == (2.25, 1.0), f"forward times {forward[0]}, {forward[1]}: expected 2.25 (2 + the 0.25 before " \
            "it) and 1.0 (elapsed)" + {
                (0.0, 0.0): ": the given line already took the lap (elapsed); calling self._lap() again reads 0 s",
                (5.25, 1.5): ": each includes its rule's time (3.0 and 0.5): rule_finished adds elapsed to "
                             "stats.backward_s, not forward_s"}.get(forward, "")
        assert s.backward_s == 0.5 and d.backward_s == 3.0, \
            f"backward times {s.backward_s}, {d.backward_s}: expected 0.5 and 3.0 (elapsed, per rule)"
        flops = (d.forward_flops, d.backward_flops)
        assert flops == (10, 20), f"demo_double's FLOPs forward/backward {flops[0]}/{flops[1]}, expected 10/20: " + {
            0: "the backward added none: count the backward's FLOPs too, op_flops(node, grad.shape, grads) in "
               "rule_finished",
            10: "the backward's equal the forward's: pass the rule's grads to op_flops(node, grad.shape, grads) "
                "(without them the formula counts the forward)"}.get(d.backward_flops, "see op_recorded and rule_finished")
        total = prof.total_flops()
        last_row = list(prof.stats.values())[-1].flops
        assert total == 30, f"total_flops() = {total}, expected 30: " + (
            "that is the forward's alone; phase None is forward + backward" if total == 10
            else f"that is the last row's alone ({last_row}): add up every row's (sum, or +=, not =)"
            if total == last_row else "phase None is forward + backward")
        phases = (prof.total_flops("forward"), prof.total_flops("backward"))
        assert phases == (10, 20), (f"total_flops('forward'), total_flops('backward') = {phases}, expected (10, 20): "
                                    + ("the two phases are swapped: 'forward' sums forward_flops, 'backward' "
                                       "backward_flops" if phases == (20, 10) else
                                       "a phase sums that phase's FLOPs only (forward_flops or backward_flops)"))
        produced = (d.forward_bytes, s.forward_bytes)
        assert produced == (32, 8), (
            f"forward bytes {produced[0]}, {produced[1]}, expected 32 and 8: the bytes an op produces are its "
            "OUTPUT's, out.data.nbytes" + {
                (32, 32): " (demo_sum's 32 are the bytes of its input, 4 float64; its output is one float64)",
                (8, 8): " (8 and 8 are out.data.itemsize, the bytes of ONE element)",
                (4, 1): " (4 and 1 are the outputs' element counts, out.data.size, not bytes)"}.get(produced, ""))
        assert d.backward_bytes == 32 and s.backward_bytes == 32, (
            f"backward bytes {d.backward_bytes}, {s.backward_bytes}: expected 32 each, the bytes of the gradients "
            "each rule returned (4 float64)" + (": demo_sum's 8 are the INCOMING gradient's (grad, one float64), "
                                                "not the gradients its rule returned (grads)"
                                                if (d.backward_bytes, s.backward_bytes) == (32, 8) else ""))
        xd, wd = Tensor(np.ones((4, 3))), Tensor(np.ones((3, 5)), requires_grad=True)  # xd needs no gradient
        try:
            with Profiler() as product:
                (xd @ wd).sum().backward()
        except AttributeError as err:
            raise AssertionError(f"profiling x @ w where x needs no gradient raised AttributeError: {err}. matmul's "
                                 "rule returned None for x (no gradient computed): skip None in grads when adding "
                                 "backward bytes") from err
        got = product.by_op()["matmul"].backward_bytes
        assert got == 120, (f"matmul's backward bytes {got}, expected 120 (dW alone: x needs no gradient, so the rule "
                            "returned None for it): the bytes of the gradients the rule RETURNED (the arrays in "
                            "grads, skipping None)" + (", not of node.inputs (x's 96 and w's 120)" if got == 216 else ""))
        assert prof.regions["update"].forward_s == 4.0 and prof.outside_s == 0.125 + 0.0625, (
            f"the 'update' label {prof.regions['update'].forward_s} s and (not in an op) {prof.outside_s} s: "
            "expected 4.0 and 0.1875 (given code: check that op_recorded and rule_finished keep the given lines)")
        rows = d.total_s + s.total_s + prof.regions["update"].forward_s + prof.outside_s
        assert rows == prof.wall_s == fake.now, f"rows add up to {rows}, wall time {prof.wall_s}"
        try:
            with no_grad(), Profiler() as quiet:
                double(Tensor(np.ones(4)))
        except Exception as err:
            raise AssertionError(f"profiling under no_grad() raised {type(err).__name__}: {err}. Count FLOPs with "
                                 "gradients off too: out._node is None then, so build Node(op, inputs, saved) "
                                 "for op_flops") from err
        got = quiet.total_flops("forward")
        assert got == 10, (f"forward FLOPs under no_grad(): {got}, expected 10. Count FLOPs with gradients off too: "
                           "build Node(op, inputs, saved) when out._node is None")
        text = prof.table(sort_by="time")
        names = [line[:22].strip() for line in text.splitlines()[3:-2]]
        assert names == ["demo_double", "update", "demo_sum", NOT_IN_AN_OP], (
            f"table rows {names}: sorted by total time, largest first (5.25 s, 4 s, 1.5 s), '(not in an op)' last")
        top = [line[:22].strip() for line in prof.table("flops", top=1).splitlines()[3:-2]]
        assert top == ["demo_double", NOT_IN_AN_OP], f"table('flops', top=1) rows {top}: the first row only, rows[:top]"
        top = [line[:22].strip() for line in prof.table("forward", top=1).splitlines()[3:-2]]
        assert top == ["update", NOT_IN_AN_OP], (
            f"table('forward', top=1) rows {top}, expected ['update', ...] (4 s forward, the largest): "
            + ("that is the first row SEEN: sort all the rows first, then cut to top" if top[0] == "demo_double"
               else "sort by the forward time, largest first, then keep the first top rows"))
    finally:
        clock = real
        forget_demo_ops()
    print("✓ profiler: calls, forward and backward time, FLOPs, bytes, labels; the rows add up to the wall time")
    print(text)


test_unit_profiler()

# %% [markdown]
# Read the table the way you read PyTorch's: the name, the calls (forward/backward), the
# time of each phase and their total, the share of the wall time, the FLOPs and the rate they
# were done at, and the bytes produced. The footer says how long the whole block took.
#
# ## 3. FLOPs, in PyTorch's convention
#
# A floating-point operation is one addition or one multiplication. The convention of
# PyTorch's `torch.utils.flop_counter.FlopCounterMode`, which we follow exactly:
#
# * **matrix products count, `2·m·k·n`** for `(m, k) @ (k, n)`: each of the `m·n` outputs is
#   `k` multiplications and `k` additions (a batch multiplies this); a convolution counts
#   as the product it is (`2·C·kh·kw` per output element), attention as its two products
#   (`Q Kᵀ` and `W V`);
# * **elementwise ops, reductions and copies count 0**: they still take time and move
#   bytes, and the profiler shows both, but they are not FLOPs in this convention;
# * **the backward counts too**: the products the backward rules actually run. For
#   `y = x @ W` that is `dW = xᵀ dy` and, only when `x` needs a gradient, `dx = dy Wᵀ`.
#
# Each op's formula sits beside its backward rule: `matmul_flops` in module 05,
# `conv2d_flops` in module 09, `sdpa_flops` and `flash_attention_flops` in module 12. The
# profiler adds them up.
#
# Worked example, one `Linear(128, 512)` on a batch of 64 rows: the forward is
# `2·64·128·512` FLOPs. The backward computes `dW` (the same size) and, if the input needs a
# gradient, `dx` (the same size again): a training step costs 2× or 3× its forward.
#
# **Your turn: `count_flops(fn, *args, backward=False)`** runs `fn(*args)` inside a profiler
# and returns its total FLOPs; with `backward=True`, `fn` returns a scalar loss and its
# `backward()` runs inside the profiler too.

# %%
#| export
def _loss_of(out: Any) -> Tensor:
    """`out` if it is a one-element Tensor that requires a gradient, else ValueError (what backward needs)."""
    if not isinstance(out, Tensor) or out.size != 1 or not out.requires_grad:
        what = f"a Tensor of shape {out.shape}, requires_grad={out.requires_grad}" if isinstance(out, Tensor) \
            else type(out).__name__
        raise ValueError(f"count_flops(backward=True): fn must return the scalar loss, a one-element Tensor that "
                         f"requires a gradient; it returned {what}. For a GPT: lambda: model(x, targets=y)[1].")
    return out


def count_flops(fn: Callable[..., Any], *args: Any, backward: bool = False) -> int:
    """FLOPs (PyTorch's convention) of fn(*args), and of the loss's backward pass when backward=True.

    Run fn inside a Profiler; with backward=True pass what fn returned through `_loss_of`
    (given: it raises ValueError unless it is a scalar loss) and call its .backward(), still
    inside the profiler. Return the profiler's total FLOPs (an int).
    """
    ### BEGIN SOLUTION
    with Profiler() as prof:
        out = fn(*args)
        if backward:
            _loss_of(out).backward()
    return prof.total_flops()
    ### END SOLUTION


# %%
from tinytorch.core.layers import Linear


class BackwardSpy:
    """A listener for tests: counts the forward ops (`forwards`, of matmul) and notes whether a Profiler was
    listening while a backward rule ran (`profiled`)."""

    def __init__(self):
        self.forwards, self.profiled = 0, False

    def op_recorded(self, op, out, inputs, saved):
        self.forwards += op == "matmul"

    def rule_started(self, node, grad):
        self.profiled |= any(isinstance(listener, Profiler) for listener in OP_LISTENERS)

    def rule_finished(self, node, grad, grads):
        pass


def test_unit_count_flops():
    layer = Linear(128, 512)
    x = Tensor(np.random.default_rng(1).standard_normal((64, 128)), dtype=np.float32)
    forward = 2 * 64 * 128 * 512
    got = count_flops(layer, x)
    assert got == forward, f"count_flops of Linear(128, 512) on 64 rows: {got}, expected 2·64·128·512 = {forward}"
    rules = BackwardSpy()
    OP_LISTENERS.append(rules)
    try:
        train = count_flops(lambda: layer(x).sum(), backward=True)
    finally:
        OP_LISTENERS.remove(rules)
    assert train == 2 * forward, f"forward + backward: {train}, expected {2 * forward} (forward + dW; x needs no gradient)" + (
        ": that is the forward alone. The backward ran inside the profiler, so return its total, "
        "prof.total_flops() (both phases), not one phase" if train == forward and rules.profiled else
        ": that is the forward alone, so run the loss's backward() inside the profiler (inside the with block)"
        if train == forward else
        ": that is the forward twice and dW: call backward() on what fn returned, not on a second call of fn"
        if train == 3 * forward and rules.forwards == 2 else "")
    x.requires_grad = True
    assert count_flops(lambda: layer(x).sum(), backward=True) == 3 * forward, "with x needing a gradient: 3× the forward"
    with no_grad():
        assert count_flops(layer, x) == forward, "FLOPs must be counted with gradients off too"
    print(f"✓ count_flops: Linear(128, 512) on 64 rows: forward {forward:,}, with backward {train:,} "
          f"(and {3 * forward:,} when x needs a gradient)")


test_unit_count_flops()

# %% [markdown]
# Where PyTorch is installed, its own counter gives the same numbers for the same layer
# (`F.linear` is an `addmm`, counted as its product; the bias is free):

# %%
try:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    tw = torch.randn(512, 128, requires_grad=True)
    tx = torch.randn(64, 128)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.linear(tx, tw).sum().backward()
    print(f"FlopCounterMode, Linear(128, 512) forward + backward: {counter.get_total_flops():,}; ours: "
          f"{count_flops(lambda: Linear(128, 512)(Tensor(tx.numpy())).sum(), backward=True):,}")

# %% [markdown]
# ## 4. Timing: warm-up, repeats, the median and its spread
#
# One measurement of a function's time tells you little:
#
# * **the first calls are slower**: memory the process has never touched must be mapped,
#   caches are cold, a BLAS library starts its threads, CuPy compiles its kernels the first
#   time it meets a shape. Run the function a few times first (**warm-up**) and throw those
#   times away;
# * **the machine is shared**: other programs, the garbage collector, the operating system
#   interrupt you now and then, so each time is the true cost plus a non-negative delay.
#   Repeat, and report the **median**: one long interruption moves the mean, not the median;
# * report the **spread** too, the interquartile range (the 75th minus the 25th percentile
#   of the samples, `np.percentile`'s default interpolation): two medians whose ranges
#   overlap may not differ at all;
# * **a GPU runs asynchronously**: a CuPy call queues the kernel and returns at once. Read
#   the clock after the call returns and you time the queueing, not the work. Wait for the
#   device to finish (`synchronize(device)`, given) after the warm-up and after each call,
#   before reading the clock.
#
# **Your turn: `measure_latency(fn, *args, warmup=3, repeats=20, device=None)`**. The given
# part checks the arguments and finds the device from the arguments (`device_of_args`: a
# GPU if any argument lives there; pass `device="cuda"` for a function that takes none).

# %%
#| export
@dataclass(frozen=True)
class Timing:
    """The result of measure_latency: median and interquartile range of `samples` (seconds)."""

    median_s: float
    iqr_s: float
    samples: list[float] = field(repr=False)

    def __str__(self) -> str:
        return f"{self.median_s * 1e3:.3f} ms (IQR {self.iqr_s * 1e3:.3f} ms, {len(self.samples)} runs)"


def device_of_args(args: tuple) -> str:
    """"cuda" when an argument (a Tensor, a NumPy/CuPy array, or a model's parameters) is on the GPU, else "cpu"."""
    for a in args:
        if isinstance(a, Tensor) and a.device == "cuda":
            return "cuda"
        if hasattr(a, "parameters") and callable(a.parameters):
            if any(p.device == "cuda" for p in a.parameters()):
                return "cuda"
        elif device_of(a) == "cuda":
            return "cuda"
    return "cpu"


def synchronize(device: str) -> None:
    """Wait until the GPU has finished every kernel queued so far (on "cpu": nothing to wait for)."""
    if device == "cuda":
        cuda_module().cuda.Device().synchronize()


def measure_latency(fn: Callable[..., Any], *args: Any, warmup: int = 3, repeats: int = 20,
                    device: str | None = None) -> Timing:
    """Time fn(*args): `warmup` calls first (not timed), then `repeats` timed calls.

    Each timed call: start = clock(); fn(*args); synchronize(device); sample = clock() - start
    (read the module's `clock`, never time.perf_counter directly: the tests replace it).
    Call synchronize(device) once after the warm-up too, so queued warm-up work is not
    timed. Returns Timing(median_s, iqr_s, samples): the median of the samples, their
    interquartile range (np.percentile 75 minus 25), and the list of the `repeats` samples
    in call order (warm-up excluded).
    """
    warmup = as_int(warmup, "measure_latency: warmup", minimum=0)  # 2.5 was taken as 2, inf crashed in int()
    repeats = as_int(repeats, "measure_latency: repeats", minimum=1)
    device = device_of_args(args) if device is None else device
    ### BEGIN SOLUTION
    for _ in range(int(warmup)):
        fn(*args)
    synchronize(device)
    samples = []
    for _ in range(int(repeats)):
        start = clock()
        fn(*args)
        synchronize(device)
        samples.append(clock() - start)
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return Timing(float(median), float(q3 - q1), samples)
    ### END SOLUTION


# %% [markdown]
# ### Test: a scripted function on a fake clock
#
# `ScriptedCall` takes the given durations, one per call: called, it advances the fake clock
# by the next one. The first calls are slow (a warm-up that matters), one later call is an
# outlier (where mean and median part). A second script plays a GPU: a call only *queues*
# its work and returns at once; the work is done (the clock moves) when someone synchronises.

# %%
class ScriptedCall:
    """fn() advances `fake` by the next duration of `durations` (a GPU call: queues it until synchronize)."""

    def __init__(self, fake: FakeClock, durations, queued: bool = False):
        self.fake, self.durations, self.queued, self.calls, self.pending = fake, list(durations), queued, 0, 0.0

    def __call__(self):
        seconds = self.durations[self.calls]
        self.calls += 1
        if self.queued:
            self.pending += seconds
        else:
            self.fake.advance(seconds)

    def synchronize(self, device):
        assert device == "cuda", f"measure_latency passed device={device!r} to synchronize; expected 'cuda'"
        self.fake.advance(self.pending)
        self.pending = 0.0


def test_unit_measure_latency():
    global clock, synchronize
    real_clock, real_sync = clock, synchronize
    fake = FakeClock()
    clock = fake
    try:
        durations = [9.0, 7.0, 5.0] + [1.0, 2.0, 1.0, 100.0, 1.0, 3.0, 1.0, 2.0]  # 3 cold calls, then 8 timed
        fn = ScriptedCall(fake, durations)
        t = measure_latency(fn, warmup=3, repeats=8)
        assert fn.calls == 11, f"fn was called {fn.calls} times, expected warmup (3) + repeats (8) = 11" + {
            8: ": run the warm-up calls first (fn(*args) `warmup` times, not timed)",
            10: ": one timed call short: range(repeats) runs `repeats` calls"}.get(fn.calls, "")
        if t.samples == list(np.cumsum(durations[3:])):
            raise AssertionError(f"samples {t.samples} grow call after call: each is the time since the FIRST timed "
                                 "call. Read start = clock() before EACH call, inside the loop")
        assert set(t.samples) <= set(durations), (
            f"samples {t.samples} are not times of the fake clock: read the module's `clock()` before and after "
            "each call (the tests replace it with a FakeClock), never time.perf_counter() or time.time()")
        assert t.samples == durations[3:], f"samples {t.samples}: the 8 timed calls, warm-up excluded, in order" + (
            ": the first three are the warm-up calls' (9, 7, 5): run the warm-up untimed, keep no reading of it"
            if t.samples == durations else "")
        mean = float(np.mean(durations[3:]))
        assert t.median_s == 1.5, f"median_s {t.median_s}: expected the median of the samples, 1.5" + (
            f" (that is their mean, {mean}, which the one slow run pulls up)" if np.isclose(t.median_s, mean) else "")
        spread = max(t.samples) - min(t.samples)
        assert t.iqr_s == 1.25, (
            f"iqr_s {t.iqr_s}: expected the interquartile range, np.percentile(samples, 75) - np.percentile(samples, 25)"
            " = 1.25" + (f" (that is max - min, {spread}, which the one outlier decides)" if t.iqr_s == spread else
                         " (negative: the 25th percentile minus the 75th, the quartiles swapped)" if t.iqr_s == -1.25
                         else " (that is the standard deviation, np.std, which the one outlier decides)"
                         if np.isclose(t.iqr_s, np.std(t.samples)) else ""))
        gpu = ScriptedCall(fake, [5.0] * 2 + [4.0] * 3, queued=True)
        synchronize = gpu.synchronize
        t = measure_latency(gpu, warmup=2, repeats=3, device="cuda")
        assert t.samples == [4.0] * 3, (
            f"GPU samples {t.samples}, expected [4, 4, 4]: synchronise the device (synchronize(device)) after the "
            "warm-up and after each call, before reading the clock" + (
                " (the clock was read while the work was still queued)" if max(t.samples) == 0 else
                " (the first sample carries the warm-up's 10 s of queued work: synchronize once after the warm-up, "
                "before the first reading)" if t.samples == [14.0, 4.0, 4.0] else ""))
    finally:
        clock, synchronize = real_clock, real_sync
    print("✓ measure_latency: warm-up not timed, median and IQR of the samples, GPU synchronised before reading the clock")


test_unit_measure_latency()

# %% [markdown]
# ### Predict, then run: how much does the first call cost?
#
# A `(256, 256) @ (256, 256)` float32 product on one BLAS thread. Before running the next
# cell, predict: is the first call slower than the median of the next twenty? By how much?
# And how far apart will the mean and the median of those twenty be?

# %%
from threadpoolctl import threadpool_limits  # one BLAS thread: timings that repeat (module 01)

with threadpool_limits(limits=1):
    a = np.random.default_rng(2).standard_normal((256, 256), dtype=np.float32)
    first = measure_latency(np.matmul, a, a + 1, warmup=0, repeats=1)
    steady = measure_latency(np.matmul, a, a, warmup=3, repeats=20)
print(f"first call {first.median_s * 1e6:.0f} us; after warm-up {steady}; "
      f"mean {np.mean(steady.samples) * 1e6:.0f} us, median {steady.median_s * 1e6:.0f} us, "
      f"max {max(steady.samples) * 1e6:.0f} us")

# %% [markdown]
# On a quiet machine the mean sits a little above the median: delays only ever add. On a
# busy one, the maximum can be many times the median while the median hardly moves.
#
# ## 5. Memory: the peak of a call, and what a graph holds
#
# **The peak.** NumPy reports every array it allocates to Python's `tracemalloc`: start it,
# call the function, and `tracemalloc.get_traced_memory()` returns `(current, peak)` bytes
# since the start. Two details: if tracing is *already* running (another measurement, an
# outer `peak_memory`), its peak holds whatever happened earlier, so **reset it**
# (`tracemalloc.reset_peak()`) and count from the bytes traced when you started (`current`
# then), not from zero; and stop tracing only if you started it. On a GPU, NumPy's tracer
# sees nothing: there the peak comes from CuPy's memory pool, read after every allocation
# (`CupyMemory`, given; the benchmarks use the same class).
#
# **Your turn: `peak_memory(fn, *args, device=None)`**, the CPU part; the GPU part is given.

# %%
#| export
class CupyMemory:
    """GPU memory measured on the device by CuPy: the peak in use, and what the pool reserved.

        with CupyMemory() as memory:  # every CuPy allocation inside comes from a fresh pool
            inputs = ...              # made inside, and not counted once start() is called
            memory.start()
            out = forward(inputs)
            memory.in_use()           # bytes in use now, above start()
            out.backward()
        memory.peak, memory.reserved  # above start(): the peak in use, and the pool's growth

    How: a fresh `cupy.cuda.MemoryPool` serves every CuPy allocation made inside the block (a
    thread-local allocator, `cupy.cuda.using_allocator`), through a small wrapper that reads the
    pool's `used_bytes()` right after each allocation. Bytes in use only grow at an allocation,
    and an array's memory goes back to the pool the moment the array is freed, so the largest
    value read is exactly the peak in use (in CuPy's 512-byte rounding), like tracemalloc's peak
    on the CPU. The pool's `total_bytes()` is what it had to ask the driver for: freed blocks stay
    cached and are reused, so its growth is the peak plus what fragmentation cost. PyTorch's
    allocator is not seen here (it has torch.cuda.max_memory_allocated).
    """

    def __init__(self):
        self.cupy = cuda_module()
        self.pool = self.cupy.cuda.MemoryPool()
        self._peak = self._base = self._reserved_base = 0
        self.peak = self.reserved = 0

    def _malloc(self, size: int):
        memory = self.pool.malloc(size)
        self._peak = max(self._peak, self.pool.used_bytes())
        return memory

    def __enter__(self) -> "CupyMemory":
        self._context = self.cupy.cuda.using_allocator(self._malloc)
        self._context.__enter__()
        return self

    def start(self) -> None:
        """Count from here: what is allocated now (the inputs) is the baseline."""
        self.cupy.cuda.Device().synchronize()
        self._base = self._peak = self.pool.used_bytes()
        self._reserved_base = self.pool.total_bytes()

    def in_use(self) -> int:
        return self.pool.used_bytes() - self._base

    def __exit__(self, *exc: Any) -> None:
        self.cupy.cuda.Device().synchronize()
        self.peak = self._peak - self._base
        self.reserved = self.pool.total_bytes() - self._reserved_base
        self._context.__exit__(*exc)


def peak_memory(fn: Callable[..., Any], *args: Any, device: str | None = None) -> int:
    """Peak bytes allocated while fn(*args) runs, above what was allocated before it started.

    On a GPU (device "cuda", found from the arguments when None): CuPy's pool (given). On the
    CPU: tracemalloc. Start tracing unless it is already running (then stop it at the end
    only if you started it; `tracemalloc.is_tracing()`), reset the peak
    (`tracemalloc.reset_peak()`), note the current traced bytes as the baseline, run fn,
    and return the peak traced bytes minus the baseline (an int). Stop tracing even when
    fn raises (try/finally). fn's return value is discarded.
    """
    device = device_of_args(args) if device is None else device
    if device == "cuda":
        with CupyMemory() as memory:
            memory.start()
            fn(*args)
        return int(memory.peak)
    ### BEGIN SOLUTION
    started_here = not tracemalloc.is_tracing()
    if started_here:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        fn(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if started_here:
            tracemalloc.stop()
    return int(peak - baseline)
    ### END SOLUTION


# %%
def test_unit_peak_memory():
    def temporary(n):  # allocates n float64 (8·n bytes), keeps nothing
        return float(np.ones(n).sum())

    mib = 2**20
    got = peak_memory(temporary, mib // 8)
    assert mib <= got < mib + 64 * 1024, (
        f"peak_memory of a 1 MiB temporary that is freed before fn returns: {got} bytes; expected just above {mib}: "
        "return the PEAK (get_traced_memory()[1]), not what is left" + (
            " (less than the temporary: that is what was left at the end)" if got < mib else ""))
    assert not tracemalloc.is_tracing(), "peak_memory must stop tracing when it started it"
    tracemalloc.start()
    try:
        kept = np.ones(2 * mib)  # 16 MiB alive during the call: below its baseline
        big = np.ones(4 * mib)   # a 32 MiB peak before the call
        del big
        got = peak_memory(temporary, mib // 8)
        assert tracemalloc.is_tracing(), "tracing was running before peak_memory: leave it running"
        del kept
    finally:
        tracemalloc.stop()
    assert mib <= got < mib + 64 * 1024, (
        f"peak_memory inside a running trace returned {got} bytes for a 1 MiB temporary, expected just above {mib}. "
        + ("Reset tracemalloc's peak before calling fn (tracemalloc.reset_peak()): a 32 MiB peak from before the "
           "call was reported" if got >= 24 * mib else
           "The 16 MiB allocated before the call were counted: subtract the bytes traced when fn started "
           "(get_traced_memory()[0] then) from the peak" if got >= 16 * mib else
           "Reset tracemalloc's peak before calling fn (tracemalloc.reset_peak()) and subtract the bytes traced "
           "when fn started"))
    print(f"✓ peak_memory: a 1 MiB temporary peaks at {got:,} bytes, also inside a running trace")


test_unit_peak_memory()

# %% [markdown]
# **What a graph holds for backward.** After a forward pass, every recorded node keeps its
# input Tensors (so their arrays) and whatever it saved (`node.saved`: the im2col matrix, the
# attention weights, LayerNorm's normalised input...). Those arrays stay alive until the
# backward pass has run and the graph is dropped: they are the **activation memory** that
# grows with the batch and that module 17 will trade for time.
#
# **Your turn: `graph_saved_bytes(tensor)`**: the bytes of the distinct arrays that the
# graph behind `tensor` keeps alive. Walk `topological_order(tensor)` (module 05): for every
# tensor `t` made by a node (`t._node` not None), take the arrays of the node's inputs
# (`inp.data`) and every array among `node.saved.values()` (`_is_array`, given), and the
# array of `tensor` itself. Then:
#
# * **count each buffer once**: a view (`reshape`, `transpose`, a slice) shares the memory
#   of the array it views, its `.base`; `_buffer_of(array)` (given) follows `.base` to the
#   array that owns the memory. Count each owner once, by identity (`id`), with its `nbytes`;
# * **leave out the leaves**: tensors made by no node (`t._node is None`: the parameters,
#   your data) exist with or without the graph; skip every buffer that a leaf's array owns or
#   views. Find them among the nodes' inputs (`inp._node is None`), not in the order:
#   `topological_order` lists only `tensor` and the tensors that need a gradient, so your
#   data (a Tensor without `requires_grad`) is met only as an input of a node;
# * a `tensor` that is itself a leaf has no graph behind it: 0 bytes.

# %%
#| export
def graph_saved_bytes(tensor: Tensor) -> int:
    """Bytes of the distinct arrays the graph behind `tensor` keeps alive for backward.

    The arrays: tensor's own, and for every t in topological_order(tensor) with a node,
    each input's `.data` and each array in node.saved (use _is_array). Each memory buffer
    (_buffer_of) is counted once, by id, with its nbytes; buffers owned by leaves (inputs
    whose _node is None: parameters, data) are left out. Take the leaves from node.inputs:
    topological_order holds only the tensors that need a gradient, so data tensors are not
    in it. A leaf `tensor` (tensor._node is None) returns 0. Returns an int.
    """
    ### BEGIN SOLUTION
    if tensor._node is None:  # a leaf: no graph behind it
        return 0
    arrays = [tensor.data]
    leaves: set[int] = set()
    for t in topological_order(tensor):
        node = t._node
        if node is None:
            continue
        for inp in node.inputs:
            if inp._node is None:
                leaves.add(id(_buffer_of(inp.data)))
            else:
                arrays.append(inp.data)
        arrays.extend(v for v in node.saved.values() if _is_array(v))
    owners = {}
    for array in arrays:
        owner = _buffer_of(array)
        if id(owner) not in leaves:
            owners[id(owner)] = owner
    return int(sum(owner.nbytes for owner in owners.values()))
    ### END SOLUTION


# %%
def test_unit_graph_saved_bytes():
    w = Tensor(np.ones((8, 4)), requires_grad=True)        # a parameter: 256 bytes, a leaf
    x = Tensor(np.ones((16, 8)))                              # data: a leaf too
    h = x @ w                                                 # (16, 4): 512 bytes, made by the graph
    r = h.reshape(64)                                         # a view of h: no new memory
    loss = (r * r).sum()                                      # r used twice; r*r: 512 bytes; loss: 8
    got = graph_saved_bytes(h)
    assert got == 512, f"graph_saved_bytes(x @ w) = {got}, expected 512 (h's own array): " + {
        0: "count tensor's own array (tensor.data) too",
        512 + 1024: "x (your data, 1024 bytes) is a leaf too: it needs no gradient, so it is not in "
                    "topological_order; find the leaves among node.inputs (inp._node is None)",
        512 + 256: "w (a parameter, 256 bytes) is a leaf: leaves (parameters, data) and views of them exist "
                   "without the graph",
        512 + 256 + 1024: "w and x were counted: leaves (parameters, data) and views of them exist without the graph"}.get(
            got, "leaves (parameters, data) and views of them exist without the graph")
    assert graph_saved_bytes(w) == 0, f"graph_saved_bytes(w) = {graph_saved_bytes(w)}: a leaf has no graph behind it, 0"
    got = graph_saved_bytes(loss)
    assert got == 512 + 512 + 8, (
        f"graph_saved_bytes = {got}, expected 1032: h (512) once (r is a view of it and is used twice: count each "
        "array once), r*r (512), the loss (8); leaves (w, x) exist without the graph" + {
            1544: ". The extra 512 are r's: a view (reshape) shares its base's memory, so count the buffer that "
                  "owns it (_buffer_of(array)), not the view",
            520: ". h and r*r are two arrays of the same size (512 bytes): tell arrays apart by identity "
                 "(id(_buffer_of(array))), not by their size"}.get(got, ""))
    mask = np.eye(8, 4, dtype=bool)
    got = graph_saved_bytes(w.masked_fill(mask, 0.0).sum())
    assert got == 256 + 32 + 8, (
        f"graph_saved_bytes of w.masked_fill(mask, 0).sum(): {got}, expected 296: the filled (8, 4) array (256), the "
        "mask masked_fill saved for its backward (32 bools, in node.saved) and the loss (8)" + (
            ": count the arrays in node.saved too" if got == 256 + 8 else ""))
    e = w.exp()                                               # exp saves its output: the same array as e
    assert graph_saved_bytes(e.sum()) == 256 + 8, "exp's saved `out` is e's own array: count it once"
    assert graph_saved_bytes(w.transpose().sum()) == 8, "a view of a parameter is the parameter's memory: not the graph's"
    print(f"✓ graph_saved_bytes: {graph_saved_bytes(loss)} bytes for h, h*h and the loss; views and leaves not counted")


test_unit_graph_saved_bytes()

# %% [markdown]
# ### Predict, then run: what does a GPT's forward pass leave behind?
#
# The Shakespeare milestone's model (4 layers, width 128, context 64, batch 12). Predict
# before you run: how many MiB does the graph hold after the forward pass, compared with
# the parameters (about 0.8 million floats, 3 MiB)? Then we measure it a second way,
# independently: the bytes `tracemalloc` sees the forward pass add and keep.

# %%
from pathlib import Path

from tinytorch.core.optimizers import AdamW, weight_decay_groups
from tinytorch.models.transformer import GPT
from tinytorch.text.tokenization import CharTokenizer

DATA = Path("../../datasets/tinyshakespeare.txt")
if not DATA.exists():  # run from the repository root instead of the notebook's folder
    DATA = Path("datasets/tinyshakespeare.txt")
text = DATA.read_text(encoding="utf-8")
tokenizer = CharTokenizer.from_text(text)
ids = np.array(tokenizer.encode(text[:200_000]), dtype=np.int64)
B, T = 12, 64
starts = np.random.default_rng(3).integers(0, len(ids) - T - 1, B)
xb = np.stack([ids[s:s + T] for s in starts])
yb = np.stack([ids[s + 1:s + T + 1] for s in starts])
tracemalloc.start()  # traced from before the model exists, so that replacing its arrays is seen (next cell)
model = GPT(tokenizer.vocab_size, 128, 4, 4, T, bias=False, seed=0)
param_bytes = sum(p.data.nbytes for p in model.parameters())
before = tracemalloc.get_traced_memory()[0]
logits, loss = model(xb, targets=yb)
added = tracemalloc.get_traced_memory()[0] - before
held = graph_saved_bytes(loss)
print(f"parameters {param_bytes / 2**20:.2f} MiB; the forward pass added {added / 2**20:.2f} MiB (tracemalloc); "
      f"graph_saved_bytes(loss) = {held / 2**20:.2f} MiB ({held / added:.1%} of what tracemalloc saw)")

# %% [markdown]
# The two agree closely: nearly everything the forward pass allocates and keeps is held by
# the graph for backward (the rest is Python's own objects: Tensors, Nodes, dicts). And the
# activations are several times the parameters: with a larger batch or context they grow
# while the parameters stay put.
#
# **The optimizer's memory.** AdamW keeps two arrays per parameter, the running means of the
# gradient and of its square. Measured, not assumed: the bytes the first `step()` adds and
# keeps, against the parameters'. (The step also replaces every parameter's array by a new
# one and frees the old: tracing ran since before the model was made, so the two cancel.)

# %%
optimizer = AdamW(weight_decay_groups(model, 0.1), lr=1e-3)
optimizer.zero_grad()
loss.backward()
del logits, loss
before = tracemalloc.get_traced_memory()[0]
optimizer.step()
state_added = tracemalloc.get_traced_memory()[0] - before
tracemalloc.stop()
arrays_per_param = {sum(_is_array(v) for v in s.values()) for s in optimizer.state}
print(f"AdamW's first step kept {state_added / 2**20:.2f} MiB = {state_added / param_bytes:.3f} × the parameters; "
      f"arrays per parameter in optimizer.state: {sorted(arrays_per_param)}")

# %% [markdown]
# So a training step holds parameters (1×), gradients (1×), AdamW's state (2×) and the
# activations: module 17 builds this accounting into `training_memory` and checks it against
# a measured peak.
#
# ## 6. The machine's own peak, and the roofline
#
# How fast *could* your code be? Two numbers bound every operation on a machine:
#
# * the **compute peak** `P` (GFLOP/s): the rate of the best-tuned kernel there is, a large
#   float32 matrix product from the BLAS library NumPy uses;
# * the **memory bandwidth** `β` (GB/s): how fast bytes move between memory and the
#   processor, measured by a large copy (`xp.copyto(dst, src)`). A copy reads every byte and
#   writes it again: it moves `2 × nbytes`.
#
# An op that does `F` FLOPs and must move `Q` bytes cannot take less than `F / P` (compute)
# nor less than `Q / β` (memory). Its **operational intensity** `I = F / Q` (FLOPs per byte)
# decides which bound wins: the attainable rate is `min(P, I · β)`. Drawn on log–log axes that
# is the **roofline**: a slope `I · β` for memory-bound ops, a flat roof `P` for compute-bound
# ones, meeting at the ridge `I = P / β`. A large matrix product has `I` in the hundreds and
# sits under the roof; an elementwise op does 0 to a few FLOPs per 8 or 12 bytes and lives on
# the slope: only fewer bytes (fusing it with its neighbour, a smaller dtype) make it faster.
#
# Vendors print peaks in data sheets; we **measure** them, on the BLAS threads in use now.
# A peak is the best the machine did, so it takes the fastest of the repeats (an
# interruption only ever adds time); the latency of your own code is its typical time, the
# median.
#
# **Your turn: `machine_peak(n=1024, copy_mib=64, repeats=5, device="cpu")`**.

# %%
#| export
def _xp(device: str):
    """NumPy on "cpu", CuPy (checked) on "cuda"."""
    return cuda_module() if device == "cuda" else np


def machine_peak(n: int = 1024, copy_mib: int = 64, repeats: int = 5, device: str = "cpu") -> tuple[float, float]:
    """(GFLOP/s, GB/s) measured on this machine: a float32 (n, n) @ (n, n) product and a copy of
    copy_mib MiB of float32, each timed with measure_latency(..., warmup=1, repeats=repeats,
    device=device): the product first, then the copy (the test's fake measure_latency answers
    in that order). measure_latency passes only positional arguments to fn, so time a lambda:
    measure_latency(lambda: xp.matmul(a, b, out=c), ...). A peak is the best the machine did: use the FASTEST sample of each
    (min(timing.samples)), not the median (an interruption only ever adds time).

    Given: `a`, `b`, `c` (n × n float32, c the product's output: xp.matmul(a, b, out=c)) and
    `src`, `dst` (copy_mib MiB of float32: xp.copyto(dst, src)). GFLOP/s = FLOPs of the
    product / seconds / 1e9; GB/s = bytes the copy moves (it reads src and writes dst) /
    seconds / 1e9. Returns two floats.
    """
    xp = _xp(device)
    rng = np.random.default_rng(0)
    a, b = (xp.asarray(rng.standard_normal((n, n), dtype=np.float32)) for _ in range(2))
    c = xp.empty((n, n), dtype=np.float32)
    src = xp.ones(copy_mib * 2**20 // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    ### BEGIN SOLUTION
    product = measure_latency(lambda: xp.matmul(a, b, out=c), warmup=1, repeats=repeats, device=device)
    copy = measure_latency(lambda: xp.copyto(dst, src), warmup=1, repeats=repeats, device=device)
    gflops = 2 * n**3 / min(product.samples) / 1e9
    gbytes_per_s = 2 * src.nbytes / min(copy.samples) / 1e9
    return float(gflops), float(gbytes_per_s)
    ### END SOLUTION


# %%
import math


def test_unit_machine_peak():
    global measure_latency
    real = measure_latency
    timed = []

    def fake_latency(fn, *args, warmup=3, repeats=20, device=None):
        fn(*args)  # runs the product or the copy once
        timed.append((warmup, repeats, device))
        best = 0.004 if len(timed) == 1 else 0.002
        return Timing(2.5 * best, best, [3 * best, best, 2.5 * best])  # median 2.5×, fastest 1×

    measure_latency = fake_latency
    try:
        gflops, gbytes = machine_peak(n=64, copy_mib=1, repeats=3)
    finally:
        measure_latency = real
    assert len(timed) == 2 and all(t == (1, 3, "cpu") for t in timed), \
        f"measure_latency was called as {timed}: twice, with warmup=1, repeats=repeats, device=device"
    assert not (math.isclose(gflops, 2 * 64**3 / 0.002 / 1e9) and math.isclose(gbytes, 2 * 2**20 / 0.004 / 1e9)), \
        "machine_peak timed the copy first (the second answer of measure_latency): time the product first, then the copy"
    assert not math.isclose(gflops, 2 * 64**3 / 0.010 / 1e9), \
        "machine_peak used the median: a peak is the FASTEST sample, min(timing.samples)"
    right = 2 * 64**3 / 0.004 / 1e9
    assert math.isclose(gflops, right), (
        f"GFLOP/s {gflops}: a (64, 64) @ (64, 64) product taking 4 ms at best is 2·64³ FLOPs (a multiply and an "
        f"add per term) / 0.004 s = {right:.4f} GFLOP/s" + (
            f" ({gflops / right:.0f}× too large: a GFLOP is 1e9 FLOPs, divide by 1e9)" if gflops > 10 * right else ""))
    assert math.isclose(gbytes, 2 * 2**20 / 0.002 / 1e9), (
        f"GB/s {gbytes}: a copy of 1 MiB taking 2 ms reads and writes every byte: 2·2^20 bytes / 0.002 s / 1e9")
    print("✓ machine_peak: 2·n³ FLOPs per product, 2 × nbytes per copy, the fastest of the repeats")


test_unit_machine_peak()

# %% [markdown]
# Now on this machine, on one BLAS thread (the setting of every timing in this lesson):

# %%
with threadpool_limits(limits=1):
    peak_gflops, peak_gbps = machine_peak()
print(f"this machine, one thread: {peak_gflops:.1f} GFLOP/s (float32 matrix product), {peak_gbps:.1f} GB/s (copy); "
      f"ridge at {peak_gflops / peak_gbps:.1f} FLOPs per byte")

# %% [markdown]
# ## 7. Where a GPT training step spends its time
#
# The milestone's model and batch from section 5, one whole training step: forward,
# cross-entropy, `zero_grad`, backward, AdamW. The optimizer's step records no op (it works
# on arrays), so it goes under its own label.
#
# **Predict, then run.** Which op takes most of the step: the matrix products, attention,
# LayerNorm, GELU? What share of the step is the backward pass? What fraction of the
# machine's peak will the step reach (its **model-FLOP utilisation**, MFU)?

# %%
def train_step():
    _, loss = model(xb, targets=yb)
    optimizer.zero_grad()
    loss.backward()
    with record_function("AdamW.step"):
        optimizer.step()


steps = 2
with threadpool_limits(limits=1):
    step = measure_latency(train_step, warmup=1, repeats=5)
    with Profiler() as prof:
        for _ in range(steps):
            train_step()
print(f"one step without a profiler: {step}")
print(prof.table(top=12))

# %% [markdown]
# How the numbers fit together: the rows add up to the profiled wall time by construction;
# what matters is how that time compares with the step measured *without* the profiler (the
# profiler's own cost), and how much lands in `(not in an op)`.

# %%
per_step = prof.wall_s / steps
in_ops = sum(s.total_s for s in prof.by_op().values()) / steps
labelled = sum(s.forward_s for s in prof.regions.values()) / steps
print(f"profiled step {per_step * 1e3:.1f} ms = {per_step / step.median_s:.2f} × the unprofiled median; "
      f"ops {in_ops * 1e3:.1f} ms + AdamW.step {labelled * 1e3:.1f} ms + not in an op "
      f"{prof.outside_s / steps * 1e3:.1f} ms; ops and label: {(in_ops + labelled) / step.median_s:.1%} of the step")
forward_share = sum(s.forward_s for s in prof.by_op().values()) / (in_ops * steps)
print(f"forward {forward_share:.0%} and backward {1 - forward_share:.0%} of the time in ops")

# %% [markdown]
# **Model-FLOP utilisation.** The FLOPs a step must do (forward and backward, the model's
# products) divided by the step's time is the rate the step achieved; divided by the
# machine's peak, the fraction of the machine it used.

# %%
step_flops = count_flops(lambda: model(xb, targets=yb)[1], backward=True)
achieved = step_flops / step.median_s / 1e9
print(f"{step_flops / 1e9:.3f} GFLOP per step ({prof.total_flops() / steps / 1e9:.3f} in the profile); "
      f"{achieved:.2f} GFLOP/s achieved; MFU = {achieved / peak_gflops:.1%} of {peak_gflops:.1f} GFLOP/s")

# %% [markdown]
# ### The roofline of this machine, with every op on it
#
# For each op, `roofline_rows` (given) computes its operational intensity (FLOPs over
# `traffic_bytes`), the rate it achieved (FLOPs over its time), and the time the roofline
# says it needs at least, `max(F / P, Q / β)`. `traffic_bytes` is an estimate of the bytes the
# op must move, added up by the profiler: in the forward pass the inputs it reads and the new
# output it writes; in the backward pass the incoming gradient and the saved arrays it reads
# and the new gradients it writes (a rule that also reads an input, as `mul`'s does, moves a
# little more); a view writes nothing new and moves nothing. Ops with FLOPs sit on the
# roofline plot; ops with none (elementwise, reductions) get the second panel: the bandwidth
# each achieved against the copy's.

# %%
#| export
def roofline_rows(prof: Profiler, peak: tuple[float, float]) -> list[dict]:
    """One dict per op of `prof`: name, seconds, flops, traffic (bytes), intensity (FLOPs/byte),
    gflops (achieved), gbps (achieved traffic rate), bound_s (the roofline's least time,
    max(F/P, Q/β)) and excess_s (seconds above it; 0 when the op was faster than the estimate,
    as a view is: it moves no bytes), sorted by excess_s, largest first."""
    peak_gflops, peak_gbps = peak
    rows = []
    for name, s in prof.by_op().items():
        if s.total_s <= 0:
            continue
        bound = max(s.flops / (peak_gflops * 1e9), s.traffic_bytes / (peak_gbps * 1e9))
        rows.append({"name": name, "seconds": s.total_s, "flops": s.flops, "traffic": s.traffic_bytes,
                     "intensity": s.flops / s.traffic_bytes if s.traffic_bytes else 0.0,
                     "gflops": s.flops / s.total_s / 1e9, "gbps": s.traffic_bytes / s.total_s / 1e9,
                     "bound_s": bound, "excess_s": max(0.0, s.total_s - bound)})
    return sorted(rows, key=lambda r: -r["excess_s"])


def plot_roofline(prof: Profiler, peak: tuple[float, float], path: Any = None, title: str = "", dpi: int = 100):
    """Left: the roofline min(P, I·β) with every op that has FLOPs placed at (intensity, achieved
    GFLOP/s). Right: the achieved bandwidth of the ops without FLOPs, against the copy's β.
    Returns the figure; saves a PNG at `path` when given (module 02's pyplot(): the Agg backend
    where no window can open)."""
    plt = pyplot()

    peak_gflops, peak_gbps = peak
    rows = roofline_rows(prof, peak)
    compute = [r for r in rows if r["flops"] > 0]
    memory = sorted((r for r in rows if r["flops"] == 0 and r["traffic"] > 0), key=lambda r: -r["seconds"])[:10]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    lowest = min([r["intensity"] for r in compute] + [peak_gflops / peak_gbps]) / 4
    highest = max([r["intensity"] for r in compute] + [peak_gflops / peak_gbps]) * 4
    xs = np.geomspace(lowest, highest, 200)
    left.loglog(xs, np.minimum(peak_gflops, xs * peak_gbps), color="black", lw=2, label="roofline min(P, I·β)")
    for r in compute:
        left.scatter(r["intensity"], r["gflops"], s=30 + 400 * r["seconds"] / max(x["seconds"] for x in rows))
        left.annotate(r["name"], (r["intensity"], r["gflops"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    rates = [r["gflops"] for r in compute] + [peak_gflops]
    left.set_ylim(min(min(rates), lowest * peak_gbps) / 2, peak_gflops * 2)
    left.set_xlabel("operational intensity (FLOPs per byte)")
    left.set_ylabel("GFLOP/s")
    left.set_title(f"compute peak P = {peak_gflops:.1f} GFLOP/s, bandwidth β = {peak_gbps:.1f} GB/s")
    left.legend(loc="lower right", fontsize=8)
    names = [r["name"] for r in memory]
    right.barh(names[::-1], [r["gbps"] for r in memory][::-1], color="tab:orange")
    right.axvline(peak_gbps, color="black", lw=2, label="copy bandwidth β")
    right.set_xlabel("achieved GB/s (bytes read and written / time)")
    right.set_title("ops without FLOPs, by time: memory-bound")
    right.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=dpi, metadata={"Software": None})
    return fig


# %%
import os
import tempfile

roofline_path = os.path.join(tempfile.mkdtemp(), "roofline.png")
figure = plot_roofline(prof, (peak_gflops, peak_gbps), roofline_path,
                       title="GPT training step (milestone model), one thread")
print(f"roofline saved to {roofline_path}")
print(f"{'op':>16} | {'time':>9} | {'FLOP/byte':>9} | {'achieved':>14} | {'roofline min':>12} | above it")
for r in roofline_rows(prof, (peak_gflops, peak_gbps)):
    rate = f"{r['gflops']:.2f} GFLOP/s" if r["flops"] else f"{r['gbps']:.2f} GB/s"
    print(f"{r['name']:>16} | {r['seconds'] / steps * 1e3:6.2f} ms | {r['intensity']:9.2f} | {rate:>14} | "
          f"{r['bound_s'] / steps * 1e3:9.2f} ms | {r['excess_s'] / steps * 1e3:6.2f} ms")

# %% [markdown]
# The last column is the time each op spends above what the roofline says it needs: the
# time a better implementation could win back. `matmul` is NumPy calling the very BLAS
# kernel `machine_peak` measured, on smaller matrices (the step's products are a few hundred
# rows wide, the peak's 1024): whatever gap it shows comes from the shapes, and module 18
# cannot write a better product in NumPy. Ops without FLOPs are bound by memory, and many
# reach only a small fraction of the copy's bandwidth: each is several NumPy passes over its
# arrays (one pass per arithmetic operation, each reading and writing whole arrays), plus
# Python for every call.
#
# **What module 18 will speed up.** Among the ops that are not BLAS products, those at the top
# of the last column are where fusing passes (one pass instead of several, fewer arrays
# written, a backward that reuses what the forward computed) can pay. The cell picks the
# first three of *your* profile:

# %%
above_roof = [r for r in roofline_rows(prof, (peak_gflops, peak_gbps)) if r["name"] != "matmul"]
candidates = [r["name"] for r in above_roof[:3]]
share = sum(prof.by_op()[n].total_s for n in candidates) / prof.wall_s
won_back = sum(r["excess_s"] for r in above_roof[:3]) / prof.wall_s
print(f"module 18's candidates on this machine: {', '.join(candidates)}. They take {share:.0%} of the profiled "
      f"step; {won_back:.0%} of the step is their time above the roofline's bound")

# %% [markdown]
# ## 8. Checking against PyTorch
#
# The test suite builds the same GPT in PyTorch (nanoGPT's layout, our weights copied in)
# and checks that `count_flops` of its forward pass, and of forward and backward, equals
# `FlopCounterMode`'s count (`tests/14_profiling/test_flops_torch.py`; also Conv2d and
# attention). One detail shows why a check is worth making: PyTorch's CPU attention kernel.

# %%
import contextlib

if torch is not None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(2, 4, 64, 32, requires_grad=True) for _ in range(3))
    for label, backend in (("default CPU kernel", None), ("math backend", SDPBackend.MATH)):
        chosen = contextlib.nullcontext() if backend is None else sdpa_kernel(backend)
        with chosen, FlopCounterMode(display=False) as counter:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        print(f"FlopCounterMode, attention forward + backward, {label}: {counter.get_total_flops():,}")
    from tinytorch.core.attention import scaled_dot_product_attention

    ours = count_flops(lambda: scaled_dot_product_attention(*(Tensor(t.detach().numpy(), requires_grad=True)
                                                               for t in (q, k, v)), is_causal=True)[0].sum(),
                       backward=True)
    print(f"count_flops, our scaled_dot_product_attention forward + backward:   {ours:,}")

# %% [markdown]
# Run the cell: with the version of PyTorch installed here, does its counter see the
# default CPU attention kernel at all? Its table of formulas lists the GPU kernels and the
# matrix products (`mm`, `bmm`, `addmm`, convolutions); an op missing from the table is
# counted only if it breaks down into ops that are in it, and a fused CPU kernel does not.
# With the math backend, attention is two batched products forward and four backward
# (`dV`, `dP`, `dQ`, `dK`), exactly what our fused rule runs.
#
# ## Summary
#
# * The profiler listens at the engine's one recording point and its one backward loop: a
#   list in module 01 and a given `apply_rule` in module 05. Your own engine is profiled too.
# * An op's time is the time since the previous event; the rows add up to the wall time.
# * FLOPs follow PyTorch: `2·m·k·n` per product, elementwise work 0, the backward counted as
#   the products the rules really run; the formulas sit beside the backward rules.
# * Time with warm-up and repeats, report the median and the interquartile range,
#   synchronise a GPU before reading the clock.
# * Peak memory: tracemalloc with its peak reset; the graph holds the activations, several
#   times the parameters; AdamW holds two more arrays per parameter.
# * The roofline `min(P, I·β)`, with `P` and `β` measured here, says which ops are
#   compute-bound and which memory-bound, and how far each is from its bound.
#
# ## Exercises
#
# 1. **Threads.** Run `machine_peak()` and the GPT step under `threadpool_limits(limits=2)`.
#    How do the peak, the step time and the MFU change? Which ops gain from the second
#    thread, and which do not (look at the table sorted by time)?
# 2. **The batch.** Profile the step with batches of 4, 12 and 48 windows. How does each op's
#    time grow? Which ops' share falls? What happens to the MFU, and why?
# 3. **Inference.** Profile `model(xb)` under `no_grad()`. What share of the training step
#    was the forward pass? Does inference have the same most expensive op?
# 4. **Flash attention.** Replace the attention of one block by `flash_attention` (write a
#    small subclass whose forward calls it) and profile. What happens to the FLOPs in the
#    table, forward and backward, and to the time? Why does PyTorch count a recomputation?
# 5. **The copy.** `machine_peak(copy_mib=1)` and `copy_mib=256`: why does the small copy
#    report a higher bandwidth? (Hint: the processor's caches.) Which size gives the
#    bandwidth that matters for a GPT step's activations?
# 6. **The profiler's own cost.** Measure the step inside and outside a profiler with
#    `measure_latency`, interleaving the two. What is the cost per recorded op? Compare with
#    `tito bench profiler_overhead`.
#
# ## Questions (answer them by running your code)
#
# 1. How many FLOPs does one `Linear(128, 512)` on 64 rows cost forward, and with backward
#    when its input does and does not need a gradient? Why do they differ?
# 2. Which op of the step has the highest operational intensity, and is it above the ridge?
# 3. What fraction of the step is `(not in an op)`? What does it contain?
# 4. `graph_saved_bytes` after the forward pass: how does it change when the batch doubles?
#    When the context doubles (attention's weights grow with T²)?
# 5. Your MFU: which two ops would you change first, and how much could the step gain if
#    each reached its roofline time?
