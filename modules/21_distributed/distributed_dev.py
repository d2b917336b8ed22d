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
# # Module 21: Distributed — training on N processes that talk through MPI
#
# > One process has one memory and a few cores. Past that, a model trains on many processes
# > at once, each on its share of the batch, and the only thing they share is the messages
# > they send each other. How many bytes, to whom, and when: that is this module.
#
# Module 18 cut a batch in two and ran the halves on two threads of one process. Here the
# parts run in separate *processes* (on one machine or on a thousand), started by MPI's
# launcher; each process is a **rank** with its own copy of the model. After each backward
# pass the ranks must agree on one gradient, the mean of theirs, and that is an
# **all-reduce**. You will build it from two-way messages, then make data-parallel training
# use it while the backward pass is still running, then split the optimizer's memory across
# the ranks.
#
# **What you will be able to do when you finish:**
#
# * start a program on N processes with `tito run --ranks N` and say what each rank holds;
# * write a ring all-reduce from `sendrecv` (reduce-scatter, then all-gather) that is exact for
#   any size, and show each rank sends 2(N−1)/N of the array, whatever N;
# * fit the α–β (latency, bandwidth) model to your machine's messages and predict collective
#   times with it;
# * write the bucketing of `DistributedDataParallel`: gradients grouped, each group's
#   all-reduce started as soon as its last gradient is final, while the backward pass goes on;
# * write a ZeRO-1 optimizer step (each rank keeps 1/N of AdamW's state) and check it gives
#   AdamW's weights exactly;
# * predict, with a labelled model, when communication dominates a step on 8 to 512 ranks.
#
# **Time:** about three hours: sections 1–4 (the world, the α–β model, the ring, broadcast
# and all-gather) in a first sitting, 5–7 (DDP, ZeRO-1, the model of a cluster) in a second.
#
# | section | you write | what it does |
# |---|---|---|
# | 3 | `ring_all_reduce` | the element-wise sum over ranks, from `sendrecv` |
# | 4 | `broadcast`, `all_gather` | one rank's array to all; every rank's array to all |
# | 5 | `bucket_parameters`, `DistributedDataParallel._gradient_ready`, `._write_mean` | gradients averaged in buckets during backward |
# | 6 | `shard_owners`, `ShardedOptimizer.step` | ZeRO-1: each rank steps its share, then shares it |
#
# **Installing MPI.** `pip install -e .` brings mpi4py and MPICH's wheel (which holds
# `mpiexec`): nothing else to install on a laptop. On a cluster, use the cluster's MPI instead
# (see the README). Without MPI, everything here runs as a one-process world, and the cells
# that start several ranks say what is missing.
#
# **On a GPU.** The same collectives run on GPUs through NCCL or a CUDA-aware MPI. This lesson
# was written and tested on CPUs only; no GPU number appears here.

# %% [markdown]
# Each rank below runs NumPy on one BLAS thread (N ranks share the machine's cores), and so
# does this notebook, so that its timings mean the same thing.

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| default_exp perf.distributed

# %%
#| export
import atexit
import concurrent.futures
import contextlib
import math
import os
import sys
import threading
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from tinytorch.core.autograd import unbroadcast
from tinytorch.core.layers import Module
from tinytorch.core.tensor import OP_LISTENERS, GradMode, Tensor, as_int

# %% [markdown]
# ## 1. The world: ranks and messages
#
# `mpiexec -n 4 python -m mpi4py prog.py` (what `tito run --ranks 4 prog.py` runs) starts four
# copies of `prog.py`. Each asks MPI who it is: its **rank** (0 to 3) and the **size** of the
# world (4). Nothing is shared: a rank sees another's data only when that rank sends it.
#
# `init_world()` (given) returns a `World` that wraps MPI's communicator with the few calls
# this module uses. Under a launcher it is MPI's world; in a plain Python (this notebook, a
# test) it is a **one-process world** of size 1, in which every collective you write still
# runs (and does nothing but copy). Messages are NumPy arrays:
#
# | call | does |
# |---|---|
# | `world.send(array, dest)` | sends the array's bytes to rank `dest` (blocks until MPI has them) |
# | `world.recv(like, source) -> array` | receives an array shaped and typed like `like` from `source` |
# | `world.sendrecv(array, dest, like, source) -> array` | both at once: the step of every ring algorithm |
# | `world.barrier()` | waits until every rank has called it |
# | `world.bytes_sent` | every byte this rank has sent through the world |
#
# `sendrecv` is not a luxury: if every rank of a ring first *sends* to its right neighbour and
# only then receives, and the messages are large, every rank waits for its neighbour to
# receive, and nobody receives: a deadlock. `sendrecv` lets MPI do both at once.

# %%
#| export
_LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")
_TAG = 21  # every message of this module carries this tag


def _contiguous(array: Any) -> np.ndarray:
    """`array` as a C-contiguous NumPy array (MPI sends raw memory)."""
    if not isinstance(array, np.ndarray):
        kind = f"{type(array).__module__.split('.')[0]}.{type(array).__name__}"
        raise TypeError(f"the world sends NumPy arrays, got a {kind}: pass a Tensor's .data; this module runs on "
                        "the CPU (a CuPy array would have to be copied to the host with .get() first).")
    return array if array.flags["C_CONTIGUOUS"] else np.ascontiguousarray(array)  # (which makes a 0-d array 1-d)


def _named(err: Exception, expected: np.ndarray, source: int) -> Exception:
    """MPI's "message truncated" said in the student's terms; any other error unchanged."""
    from mpi4py import MPI

    if isinstance(err, MPI.Exception) and err.Get_error_class() == MPI.ERR_TRUNCATE:
        return RuntimeError(
            f"rank {source} sent a longer message than the {expected.nbytes} bytes ({expected.shape} {expected.dtype}) "
            f"this rank expected from it: the two ranks disagree on what this step moves; check which chunk each "
            f"step sends and receives (both ranks must compute the same chunk boundaries).")
    return err


class World:
    """The processes of one run: `rank` (this one, 0..size-1), `size`, and messages between them.

    comm -- an mpi4py communicator, or None for the one-process world (rank 0 of 1), in which a
            rank's messages to itself go through a local mailbox, so every algorithm runs unchanged.
    `bytes_sent` counts every byte this rank sent through `send` and `sendrecv` (the collectives
    of this module are built on them); MPI's own collectives (`world.comm.Allreduce`) are not
    counted. `threads_ok` says whether several threads may call MPI at once (MPI_THREAD_MULTIPLE).
    """

    def __init__(self, comm: Any = None, threads_ok: bool = True):
        self.comm = comm
        self.rank = 0 if comm is None else comm.Get_rank()
        self.size = 1 if comm is None else comm.Get_size()
        self.threads_ok = threads_ok
        self.bytes_sent = 0
        self._count_lock = threading.Lock()  # DDP's communication thread counts too
        self._mailbox: list[np.ndarray] = []  # the one-process world's messages to itself

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.size}{', one process' if self.comm is None else ''})"

    def _check_peer(self, peer: int, what: str) -> int:
        peer = as_int(peer, f"World.{what}", 0)
        if peer >= self.size:
            raise ValueError(f"World.{what}: rank {peer} does not exist in a world of size {self.size}.")
        return peer

    def _count(self, array: np.ndarray) -> None:
        with self._count_lock:
            self.bytes_sent += array.nbytes

    def send(self, array: Any, dest: int) -> None:
        """Send `array` (any shape; the receiver must expect the same shape and dtype) to rank `dest`."""
        array, dest = _contiguous(array), self._check_peer(dest, "send: dest")
        self._count(array)
        if self.comm is None:
            self._mailbox.append(array.copy())
        else:
            self.comm.Send(array, dest=dest, tag=_TAG)

    def recv(self, like: Any, source: int) -> np.ndarray:
        """A new array shaped and typed like `like`, filled with what rank `source` sent."""
        like, source = _contiguous(like), self._check_peer(source, "recv: source")
        if self.comm is None:
            if not self._mailbox:
                raise RuntimeError("World.recv: nothing was sent; in a one-process world, send before you receive.")
            return self._mailbox.pop(0).reshape(like.shape).astype(like.dtype, copy=False)
        out = np.empty_like(like)
        try:
            self.comm.Recv(out, source=source, tag=_TAG)
        except Exception as err:
            raise _named(err, out, source) from err
        return out

    def sendrecv(self, array: Any, dest: int, like: Any, source: int) -> np.ndarray:
        """Send `array` to `dest` and, at the same time, receive an array like `like` from `source`."""
        array, like = _contiguous(array), _contiguous(like)
        dest, source = self._check_peer(dest, "sendrecv: dest"), self._check_peer(source, "sendrecv: source")
        self._count(array)
        if self.comm is None:
            return array.reshape(like.shape).astype(like.dtype, copy=True)
        out = np.empty_like(like)
        try:
            self.comm.Sendrecv(array, dest=dest, sendtag=_TAG, recvbuf=out, source=source, recvtag=_TAG)
        except Exception as err:
            raise _named(err, out, source) from err
        return out

    def barrier(self) -> None:
        """Return once every rank has called barrier()."""
        if self.comm is not None:
            self.comm.Barrier()


def _unlink_mpich_shared_memory_after_an_error() -> None:
    """At exit after an uncaught exception (mpi4py then aborts every rank), remove the shared-memory
    files of MPICH that this rank still maps: an aborted run never reaches MPI_Finalize, which would
    remove them, and each one left in /dev/shm holds a few MB of memory until the machine restarts.
    The other ranks keep their own mappings; they are being aborted anyway."""
    if getattr(sys, "last_value", None) is None:  # a normal exit: MPI_Finalize cleans up
        return
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "/dev/shm/mpich_shm_" in line}
    except OSError:  # no /proc (not Linux): nothing to find
        return
    for path in paths:
        if not path.endswith("(deleted)"):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _under_launcher() -> bool:
    return "mpi4py.MPI" in sys.modules or any(name in os.environ for name in _LAUNCHER_VARIABLES)


def init_world() -> World:
    """MPI's world when this process was started by a launcher with N > 1 processes; otherwise
    (a plain `python`, one process, or no mpi4py) the one-process world. Never starts MPI
    in a plain Python: importing mpi4py is what initialises it."""
    if not _under_launcher():
        return World(None)
    try:
        from mpi4py import MPI
    except ImportError:
        return World(None)
    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return World(None)
    atexit.register(_unlink_mpich_shared_memory_after_an_error)  # runs before mpi4py's own exit handler
    return World(comm, threads_ok=MPI.Query_thread() >= MPI.THREAD_MULTIPLE)

# %% [markdown]
# In this notebook there is no launcher, so the world has one process:

# %%
world = init_world()
print(world)
world.send(np.arange(3.0), 0)
print("a message to myself:", world.recv(np.zeros(3), 0), "| bytes sent so far:", world.bytes_sent)

# %% [markdown]
# To see several ranks, the lesson writes small programs to a scratch folder and runs them with
# `tito run --ranks N` (given helper below). Each rank prints one line; the helper returns the
# lines that start with `RESULT` (as JSON), in rank order.
#
# **Predict** before you run: four ranks each print their rank and the sum of the ranks they
# received from their left neighbour in a ring. What does rank 0 receive?

# %%
import atexit
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import mse_loss
from tinytorch.core.optimizers import AdamW

SCRATCH = Path(tempfile.mkdtemp(prefix="tinytorch-21-"))
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)  # the scratch programs go when this kernel ends


def run_on_ranks(program: str, ranks: int, *args: str, timeout_s: float = 120) -> list:
    """Write `program` to the scratch folder, run it with `tito run --ranks N`, and return what
    each rank printed after `RESULT ` (parsed as JSON), in rank order. RuntimeError with the
    ranks' output when the run fails or passes `timeout_s`."""
    path = SCRATCH / f"program_{abs(hash(program))}.py"
    path.write_text(program)
    command = [sys.executable, "-m", "tito", "run", "--ranks", str(ranks), "--timeout", str(timeout_s),
               str(path), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`tito run --ranks {ranks}` failed (exit {done.returncode}):\n"
                           + (done.stdout + done.stderr)[-3000:])
    decoder, results = json.JSONDecoder(), []
    at = done.stdout.find("RESULT ")
    while at >= 0:  # the ranks' lines may interleave: read each JSON value where it starts
        value, end = decoder.raw_decode(done.stdout, at + len("RESULT "))
        results.append(value)
        at = done.stdout.find("RESULT ", end)
    if len(results) != ranks:
        raise RuntimeError(f"{len(results)} of {ranks} ranks printed a RESULT line:\n{done.stdout[-3000:]}")
    return sorted(results, key=lambda r: r["rank"])


def one_process_first(*checks: Callable[[], Any]) -> None:
    """Run each check in this process, in the one-process world, before any ranks start: a stub
    (NotImplementedError) or an error then stops here, instead of in N ranks that MPI must abort
    (an aborted MPICH run leaves its shared-memory segment behind in /dev/shm)."""
    for check in checks:
        check()


def _ddp_one_step() -> None:
    model = Sequential(Linear(3, 2, seed=0))
    mse_loss(DistributedDataParallel(model, init_world(), bucket_bytes=8)(Tensor(np.ones((1, 3)))),
             Tensor(np.zeros((1, 2)))).backward()


def _zero_one_step() -> None:
    p = Tensor(np.ones(2), requires_grad=True)
    p.grad = Tensor(np.ones(2))
    ShardedOptimizer([p], lambda ps: AdamW(ps, lr=0.1), init_world()).step()


HELLO = """
import json
import numpy as np
from tinytorch.perf.distributed import init_world
world = init_world()
left, right = (world.rank - 1) % world.size, (world.rank + 1) % world.size
got = world.sendrecv(np.array([world.rank]), right, like=np.zeros(1, dtype=int), source=left)
print("RESULT " + json.dumps({"rank": world.rank, "size": world.size, "from_left": int(got[0])}))
"""
for row in run_on_ranks(HELLO, 4):
    print(row)

# %% [markdown]
# Four processes on this machine's cores (more ranks than cores is fine for correctness, and
# labelled wherever it is timed). Each sent one 8-byte integer to its right and received its
# left neighbour's rank: rank 0 hears from rank 3.

# %% [markdown]
# ## 2. What a message costs: the α–β model
#
# Sending `m` bytes takes about `t(m) = α + β·m`: a fixed **latency** α (software, the network
# card, the wire) and a time per byte β (1/bandwidth). Small messages cost α, large ones β·m.
# Two numbers describe a network well enough to predict every collective built from messages.
#
# `fit_alpha_beta` (given) fits them by least squares (of relative errors, so that the small
# messages, which set α, count as much as the large ones) to measured (bytes, seconds) pairs, and
# `predict_ring_all_reduce_s` (given) is what section 3's ring costs in this model: 2(N−1)
# steps, each paying α, and 2(N−1)/N of the array's bytes sent by each rank.

# %%
#| export
def fit_alpha_beta(message_bytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of t = α + β·m to measured messages: returns (alpha_s, beta_s_per_byte).

    The squared errors are weighted by 1/t² (relative errors), so that sizes from 1 KB to 16 MB
    all count: unweighted, the largest messages alone would set α.

    message_bytes, seconds -- equally long sequences (≥ 2 distinct sizes) of one message's size
    and the time it took. ValueError names the problem when the data cannot determine a line.
    """
    m = np.asarray(message_bytes, dtype=np.float64).reshape(-1)
    t = np.asarray(seconds, dtype=np.float64).reshape(-1)
    if m.shape != t.shape:
        raise ValueError(f"fit_alpha_beta: {m.size} sizes but {t.size} times; give one time per size.")
    if np.unique(m).size < 2:
        raise ValueError("fit_alpha_beta: needs at least two different message sizes to fit a line.")
    if np.any(t <= 0):
        raise ValueError("fit_alpha_beta: every time must be positive seconds.")
    weight = 1 / t  # minimise the RELATIVE error: a 1 KB message's 10 µs counts as much as a 16 MB one's 10 ms
    design = np.stack([np.ones_like(m), m], axis=1) * weight[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, t * weight, rcond=None)
    return float(alpha), float(beta)


def predict_ring_all_reduce_s(nbytes: float, ranks: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """The α–β model of a ring all-reduce of `nbytes` over `ranks` processes:
    2(N−1)·α + 2(N−1)/N·nbytes·β (0 for one rank)."""
    n = as_int(ranks, "predict_ring_all_reduce_s: ranks", 1)
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * nbytes * beta_s_per_byte

# %% [markdown]
# A quick check on made-up data: points exactly on t = 5 µs + m / (1 GB/s) must give back
# those two numbers.

# %%
_sizes = np.array([1e3, 1e5, 1e7])
print(fit_alpha_beta(_sizes, 5e-6 + _sizes / 1e9))
print(f"ring of 4 MB over 8 ranks in that model: {predict_ring_all_reduce_s(4e6, 8, 5e-6, 1e-9) * 1e3:.3f} ms")

# %% [markdown]
# ## 3. The ring all-reduce
#
# Every rank holds an array of the same shape; afterwards every rank must hold their
# element-wise sum. The obvious way, everyone sends to rank 0, rank 0 adds and sends the sum
# back, makes rank 0 send and receive (N−1) whole arrays: its link is the bottleneck, and it
# gets worse with every rank added.
#
# The **ring** keeps every link equally busy. Cut the array into N chunks. Rank r sends to
# rank r+1 and receives from rank r−1 (mod N).
#
# * **Reduce-scatter**, N−1 steps. At step s (0, 1, …, N−2) rank r sends chunk (r − s) mod N
#   to the right and receives chunk (r − s − 1) mod N from the left, which it *adds* into its
#   own copy of that chunk. After N−1 steps, rank r holds the complete sum of chunk
#   (r + 1) mod N.
# * **All-gather**, N−1 steps. At step s rank r sends chunk (r + 1 − s) mod N (the first time:
#   the chunk it completed) and receives chunk (r − s) mod N, which it *stores* (it is already
#   a complete sum).
#
# Worked example, N = 3 ranks, array of 3 elements (one per chunk), rank r holding
# `[r+1, r+1, r+1]`: after the reduce-scatter, rank 0 holds the full sum 1+2+3 = 6 in chunk 1,
# rank 1 in chunk 2, rank 2 in chunk 0; the all-gather passes those around.
#
# **The chunks.** When N does not divide the array's length n, the chunks cannot be equal. Use
# the boundaries `bounds[i] = i·n // N` for i = 0..N: chunk i is `flat[bounds[i]:bounds[i+1]]`,
# sizes differ by at most one, and n = 0 or n < N gives empty chunks, which are fine messages.
#
# **Bytes.** Each step a rank sends one chunk, 2(N−1) steps: when N divides n, each rank sends
# exactly 2(N−1)/N of the array's bytes, for any N: nearly twice the array, never N times.
#
# ### Your turn: `ring_all_reduce`
#
# Work on a flat copy (`np.array(array, copy=True).reshape(-1)`: never change the caller's
# array), use `world.sendrecv` for every step, add in the array's own dtype (integers stay
# exact), and return the flat result in the input's shape.

# %%
#| export
def ring_all_reduce(array: Any, world: World) -> np.ndarray:
    """The element-wise sum of `array` over all ranks of `world`, on every rank.

    array -- a NumPy array, the same shape and dtype on every rank (any size, also 0 and 1).
    Returns a new array of that shape and dtype (the caller's array is not changed). Built as
    a reduce-scatter then an all-gather, each N−1 `world.sendrecv` steps around the ring
    (send to rank+1, receive from rank−1), chunk i = flat[i·n//N : (i+1)·n//N]; every rank ends
    with bit-identical values. A one-process world returns a copy.
    """
    flat = np.array(array, copy=True).reshape(-1)
    n, size, rank = flat.size, world.size, world.rank
    ### BEGIN SOLUTION
    if size == 1:
        return flat.reshape(np.shape(array))
    bounds = [i * n // size for i in range(size + 1)]
    right, left = (rank + 1) % size, (rank - 1) % size

    def chunk(i: int) -> slice:
        return slice(bounds[i], bounds[i + 1])

    for step in range(size - 1):  # reduce-scatter: add what the left neighbour has summed so far
        send, receive = chunk((rank - step) % size), chunk((rank - step - 1) % size)
        incoming = world.sendrecv(flat[send], right, like=flat[receive], source=left)
        flat[receive] += incoming
    for step in range(size - 1):  # all-gather: pass the complete sums around
        send, receive = chunk((rank + 1 - step) % size), chunk((rank - step) % size)
        flat[receive] = world.sendrecv(flat[send], right, like=flat[receive], source=left)
    return flat.reshape(np.shape(array))
    ### END SOLUTION

# %% [markdown]
# When a sum comes out wrong, *where* it is wrong says what went wrong. `all_reduce_mistake`
# (given) compares a wrong result with what the classic mistakes produce and names the one it
# matches; the tests below print what it says.

# %%
#| export
def all_reduce_mistake(got: np.ndarray, want: np.ndarray, mine: np.ndarray, size: int, rank: int) -> str:
    """What a wrong all-reduce most likely did, from the places where `got` differs from `want`.

    got -- what ring_all_reduce returned on rank `rank` of `size`; want -- the true sum;
    mine -- the rank's own input. All flat of n elements. Returns one sentence for the student.
    """
    got, want, mine = (np.asarray(a).reshape(-1) for a in (got, want, mine))
    n = want.size
    edges = [i * n // size for i in range(size + 1)]
    wrong = np.flatnonzero(got != want)
    tail = n - n % size
    completed = (rank + 1) % size  # the chunk this rank completes in the reduce-scatter
    if n % size and np.array_equal(wrong, np.arange(tail, n)):
        return (f"the last {n - tail} of {n} elements are wrong: chunk off by one, chunks of n // N elements drop "
                f"the remainder; use bounds[i] = i·n // N (the last one n)")
    if np.array_equal(got, mine):
        return "nothing was summed: the result is this rank's own array"
    own = slice(edges[completed], edges[completed + 1])
    if np.array_equal(got[own], want[own]) and wrong.size == n - (own.stop - own.start):
        return (f"only chunk {completed}, the one this rank completes in the reduce-scatter, holds the sum: the "
                "all-gather is missing or stores into the wrong chunk")
    first = int(wrong[0])
    chunk = next(i for i in range(size) if edges[i] <= first < edges[i + 1])
    return (f"wrong at {wrong.size} of {n} places, first at {first} (chunk {chunk}): got {got[first]}, want "
            f"{want[first]}; check which chunk each step sends and receives")

# %% [markdown]
# In the one-process world the ring has nothing to do, so the test below checks that much,
# and the real test runs your ring on 3 ranks (sizes that split unevenly among them included).

# %%
ALL_REDUCE_TEST = """
import json, sys
import numpy as np
from tinytorch.perf.distributed import all_reduce_mistake, init_world, ring_all_reduce
world = init_world()
problems = []
for n in (0, 1, 2, 7, 1000, 1001, 1200):
    for dtype in ("float32", "float64", "int32", "int64"):
        mine = (np.arange(n) * 7 + world.rank * 1000 + 3).astype(dtype)
        before = world.bytes_sent
        got = ring_all_reduce(mine, world)
        sent = world.bytes_sent - before
        want = sum((np.arange(n) * 7 + r * 1000 + 3).astype(dtype) for r in range(world.size)).astype(dtype)
        if got.dtype != np.dtype(dtype) or got.shape != mine.shape:
            problems.append(f"n={n} {dtype}: got {got.dtype} {got.shape}, want {dtype} {mine.shape}")
        elif not np.array_equal(got, want):
            problems.append(f"n={n} {dtype}: " + all_reduce_mistake(got, want, mine, world.size, world.rank))
        if n == 1200 and dtype == "float64":  # 9600 bytes: 1200 splits evenly over 2, 3 and 4 ranks
            bytes_sent = sent
        if not np.array_equal(mine, (np.arange(n) * 7 + world.rank * 1000 + 3).astype(dtype)):
            problems.append(f"n={n} {dtype}: the caller's array was changed; work on a copy")
print("RESULT " + json.dumps({"rank": world.rank, "problems": problems, "bytes_sent": bytes_sent}))
"""


def test_unit_ring_all_reduce():
    one = init_world()
    x = np.arange(5, dtype=np.int64)
    got = ring_all_reduce(x, one)
    assert got is not x and np.array_equal(got, x) and got.dtype == x.dtype, (
        f"one-process world: the sum over one rank is a copy of the array, got {got!r}")
    for ranks in (3,):  # the tests (tests/21_distributed) run 2 and 4 ranks too
        for row in run_on_ranks(ALL_REDUCE_TEST, ranks):
            assert not row["problems"], f"{ranks} ranks, rank {row['rank']}: " + "; ".join(row["problems"][:3])
            expected = 2 * (ranks - 1) * 9600 // ranks
            assert row["bytes_sent"] == expected, (
                f"{ranks} ranks, rank {row['rank']} sent {row['bytes_sent']} bytes for a 9600-byte array, "
                f"want 2(N−1)/N·9600 = {expected}: one chunk per step, 2(N−1) steps")
    print("ring_all_reduce: exact sums on 3 ranks for sizes 0, 1, 2, 7, 1000, 1001, 1200 and four dtypes;",
          "bytes per rank 2(N−1)/N of the array")


test_unit_ring_all_reduce()

# %% [markdown]
# ### Measured: the ring, MPI's `Allreduce`, and everything through rank 0
#
# **Predict:** on two ranks of this machine, for a 4 MB array, which is fastest, and by how
# much? Which sends the most bytes from rank 0?
#
# The program below (2 ranks) times three all-reduces for sizes from 1 KB to 4 MB (the median
# of several calls, each started after a barrier, the slowest rank's time), counts the bytes
# each rank sent for ours, and times one-way messages between the two ranks (ping-pong, half of
# the round trip) for the α–β fit. It takes a few seconds.

# %%
COLLECTIVES_BENCH = """
import json, sys, time
import numpy as np
from mpi4py import MPI
from tinytorch.perf.distributed import init_world, ring_all_reduce
world = init_world()
comm, rank, size = world.comm, world.rank, world.size

def naive_all_reduce(x):  # everything through rank 0, then back out
    if rank == 0:
        total = x.copy()
        for source in range(1, size):
            total += world.recv(x, source)
        for dest in range(1, size):
            world.send(total, dest)
        return total
    world.send(x, 0)
    return world.recv(x, 0)

def mpi_all_reduce(x):
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=MPI.SUM)
    return out

def ping_pong(x):  # half a round trip between ranks 0 and 1: one message
    if rank == 0:
        world.send(x, 1); world.recv(x, 1)
    elif rank == 1:
        world.recv(x, 0); world.send(x, 0)

def timed(fn, x, repeats):
    times = []
    for _ in range(repeats):
        world.barrier()
        start = time.perf_counter()
        fn(x)
        times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    return float(np.median(times))

rows = []
for nbytes in [int(s) for s in sys.argv[1].split(",")]:
    x = np.full(nbytes // 8, rank + 1.0)
    repeats = 5 if nbytes >= 1 << 20 else 11
    before = world.bytes_sent
    ring_all_reduce(x, world)
    ring_bytes = world.bytes_sent - before
    before = world.bytes_sent
    naive_all_reduce(x)
    naive_bytes = world.bytes_sent - before
    rows.append(dict(nbytes=nbytes, ring_s=timed(lambda a: ring_all_reduce(a, world), x, repeats),
                     mpi_s=timed(mpi_all_reduce, x, repeats), naive_s=timed(naive_all_reduce, x, repeats),
                     message_s=timed(ping_pong, x, repeats) / 2, ring_bytes=ring_bytes, naive_bytes=naive_bytes))
print("RESULT " + json.dumps({"rank": rank, "rows": rows}))
"""
one_process_first(lambda: ring_all_reduce(np.ones(3), init_world()))  # your ring, in this process first
SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22]
measured = run_on_ranks(COLLECTIVES_BENCH, 2, ",".join(map(str, SIZES)))
print(f"2 ranks on this machine ({os.cpu_count()} cores; other programs may share them)")
print(f"{'bytes':>10} {'ring ms':>9} {'MPI ms':>9} {'via rank 0 ms':>14} {'one message ms':>15} "
      f"{'ring bytes sent':>16} {'2(N-1)/N·bytes':>15}")
for row in measured[0]["rows"]:
    print(f"{row['nbytes']:>10} {row['ring_s'] * 1e3:>9.3f} {row['mpi_s'] * 1e3:>9.3f} {row['naive_s'] * 1e3:>14.3f} "
          f"{row['message_s'] * 1e3:>15.3f} {row['ring_bytes']:>16} {2 * (2 - 1) * row['nbytes'] // 2:>15}")

# %% [markdown]
# Now the model: fit α and β to the one-way messages, and compare the ring's measured time with
# what the model predicts for it.

# %%
rows = measured[0]["rows"]
alpha_s, beta_s_per_byte = fit_alpha_beta([r["nbytes"] for r in rows], [r["message_s"] for r in rows])
print(f"α = {alpha_s * 1e6:.1f} µs, β = {beta_s_per_byte * 1e9:.4f} ns/byte "
      f"(bandwidth {1 / beta_s_per_byte / 1e9:.2f} GB/s between two processes of this machine)")
for r in rows:
    model_s = predict_ring_all_reduce_s(r["nbytes"], 2, alpha_s, beta_s_per_byte)
    print(f"{r['nbytes']:>10} bytes: ring measured {r['ring_s'] * 1e3:8.3f} ms, model {model_s * 1e3:8.3f} ms")

# %% [markdown]
# Read the table. At small sizes every method costs a few latencies, so what counts is the
# number of messages and the work around them: MPI's `Allreduce` is one call into C, your ring
# makes 2(N−1) steps from Python. At large sizes the time is bytes over bandwidth; with N = 2
# the ring and "via rank 0" send the same bytes, and their difference grows with N (rank 0
# sends N−1 arrays, a ring rank 2(N−1)/N of one). Two processes on one machine talk through
# shared memory, so β here is a memory copy; a network's β is larger, and its α much larger.
# Where the model and the measurement disagree, look for what the model leaves out: the
# additions of the reduce-scatter, Python's time per step, caches, and other programs on the
# same cores (a busy machine makes every number here larger and noisier). The ring's bytes
# column is 2(N−1)/N of the array for every size that splits evenly; the bytes per rank at
# N = 3 and 4, uneven sizes included, are checked by the tests.

# %% [markdown]
# ## 4. Broadcast and all-gather
#
# Two more collectives, both needed below:
#
# * `broadcast(array, world, root)`: every rank gets the root's array. Here the root sends it
#   to each other rank in turn (N−1 messages from the root; a tree would take log₂N rounds);
#   the others receive from the root. Every rank returns a new array; the root returns a copy.
# * `all_gather(array, world)`: every rank gets everyone's array, stacked in **rank order**:
#   result `[r]` is rank r's array, shape `(N, *array.shape)`. Use the ring: put your own array
#   at `[rank]`; at step s (0..N−2) send block (rank − s) mod N to the right and store what
#   arrives from the left as block (rank − s − 1) mod N.

# %%
#| export
def broadcast(array: Any, world: World, root: int = 0) -> np.ndarray:
    """Rank `root`'s `array` on every rank (a new array; every rank passes an array of the same
    shape and dtype, whose values only matter on the root). The root sends to every other rank.
    ValueError (given) when `root` is not a rank of the world."""
    array = _contiguous(array)
    if not isinstance(root, (int, np.integer)) or isinstance(root, bool) or not 0 <= root < world.size:
        raise ValueError(f"broadcast: root must be a rank of this world (0..{world.size - 1}), got {root!r}.")
    ### BEGIN SOLUTION
    if world.rank == root:
        for dest in range(world.size):
            if dest != root:
                world.send(array, dest)
        return array.copy()
    return world.recv(array, root)
    ### END SOLUTION


def all_gather(array: Any, world: World) -> np.ndarray:
    """Every rank's `array` on every rank, stacked in rank order: shape (N, *array.shape),
    result[r] is rank r's array. A ring of N−1 `sendrecv` steps (send right, receive from the left)."""
    array = _contiguous(array)
    size, rank = world.size, world.rank
    out = np.empty((size, *array.shape), dtype=array.dtype)
    ### BEGIN SOLUTION
    out[rank] = array
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        send, receive = (rank - step) % size, (rank - step - 1) % size
        out[receive] = world.sendrecv(out[send], right, like=out[receive], source=left)
    return out
    ### END SOLUTION

# %%
GATHER_TEST = """
import json
import numpy as np
from tinytorch.perf.distributed import init_world, broadcast, all_gather
world = init_world()
problems = []
for root in range(world.size):
    mine = np.full((2, 3), 10 * world.rank + root, dtype=np.int32)
    got = broadcast(mine, world, root=root)
    if not np.array_equal(got, np.full((2, 3), 10 * root + root)):
        problems.append(f"broadcast from root {root}: got {got[0, 0]}, want rank {root}'s value {10 * root + root}: "
                        "broadcast from the wrong root (the root sends, every other rank receives from the root)")
stacked = all_gather(np.array([world.rank, 100 + world.rank]), world)
want = np.array([[r, 100 + r] for r in range(world.size)])
if stacked.shape != want.shape or not np.array_equal(stacked, want):
    problems.append(f"all_gather: got rows {stacked.tolist()}, want {want.tolist()}: all-gather order, row r must "
                    "be rank r's array")
print("RESULT " + json.dumps({"rank": world.rank, "problems": problems}))
"""


def test_unit_broadcast_all_gather():
    one = init_world()
    assert np.array_equal(broadcast(np.arange(3), one), np.arange(3)), "one-process broadcast: a copy of the array"
    assert all_gather(np.arange(3), one).tolist() == [[0, 1, 2]], "one-process all_gather: shape (1, n), row 0 = the array"
    for row in run_on_ranks(GATHER_TEST, 3):
        assert not row["problems"], f"3 ranks, rank {row['rank']}: " + "; ".join(row["problems"])
    print("broadcast and all_gather: right on 1 and 3 ranks")


test_unit_broadcast_all_gather()

# %% [markdown]
# ## 5. Data parallelism: `DistributedDataParallel`
#
# Every rank holds the same model and runs forward and backward on its own share of the batch.
# If the loss is the mean over the batch and every rank's share is equally large, the
# gradient of the whole batch is the **mean over ranks** of their gradients: one all-reduce of
# every gradient, divided by N, and every rank takes the same optimizer step, so the models
# stay identical (they must start identical: at construction rank 0's weights are broadcast).
#
# **Overlap.** The backward pass produces the last layer's gradients first. Their all-reduce
# can start while the earlier layers' gradients are still being computed, instead of after the
# whole backward. One all-reduce per parameter would pay α for each of them, so gradients
# are grouped into **buckets** of about `bucket_bytes`, in **reverse registration order** (the
# order in which backward finishes them), and each bucket's all-reduce starts as soon as its
# *last* gradient is final.
#
# How DDP hears about gradients (given code below): it listens to module 05's engine through
# `OP_LISTENERS`. During the forward pass it counts, for each parameter, the recorded ops that
# take it as an input (`op_recorded`). During backward, each rule that finishes hands DDP its
# inputs' gradients (`rule_finished`); DDP adds each parameter's up as the engine does and,
# when the parameter's last consumer has reported, its gradient is final: DDP calls
# `_gradient_ready(index)`. (The engine itself writes `.grad` only when its walk reaches the
# leaf, which in module 05's order is after every rule: waiting for that would leave nothing
# to overlap.) A bucket's all-reduce runs on DDP's communication thread (`_launch`), so the
# backward pass goes on. When backward has finished (module 05's `backward_finished` event),
# DDP launches whatever is left, waits for every bucket and writes each mean into `.grad` with
# `_write_mean`: when `loss.backward()` returns, every `.grad` is the mean over ranks.
#
# **`no_sync()`.** Gradient accumulation: the forward and backward passes inside `with
# ddp.no_sync():` leave each rank's own gradients, added up across micro-batches; the next
# backward outside it averages the accumulated sums, in one all-reduce instead of one per
# micro-batch.
#
# ### Your turn: the buckets and what DDP does with them
#
# Three small pieces: `bucket_parameters` (which parameters go together), `_gradient_ready`
# (when a bucket is launched) and `_write_mean` (the bucket's sum back into the gradients).

# %%
#| export
def bucket_parameters(params: Sequence[Any], bucket_bytes: int) -> list[list[int]]:
    """Group parameter indices into buckets for the all-reduce, in REVERSE registration order.

    params       -- the model's parameters in registration order (`model.parameters()`); each has
                    `.data.nbytes`
    bucket_bytes -- the size a bucket grows to: walk the indices from last to first, adding each
                    to the current bucket; once the bucket holds >= bucket_bytes, close it and
                    start a new one. Every bucket holds at least one index; every index is in
                    exactly one bucket.
    Returns a list of buckets, each a list of indices into `params`, e.g. four parameters of 40
    bytes each with bucket_bytes = 80 -> [[3, 2], [1, 0]].
    """
    ### BEGIN SOLUTION
    buckets: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for index in reversed(range(len(params))):
        current.append(index)
        current_bytes += params[index].data.nbytes
        if current_bytes >= bucket_bytes:
            buckets.append(current)
            current, current_bytes = [], 0
    if current:
        buckets.append(current)
    return buckets
    ### END SOLUTION

# %%
def test_unit_bucket_parameters():
    params = [Tensor(np.zeros(n)) for n in (5, 5, 5, 5)]  # 40 bytes each
    got = bucket_parameters(params, 80)
    assert sorted(i for b in got for i in b) == [0, 1, 2, 3], (
        f"every parameter index in exactly one bucket, got {got}")
    assert got[0][0] == 3, (
        f"4 parameters, the first bucket starts with parameter {got[0][0]}: buckets go from the LAST parameter to "
        f"the first (backward finishes the last layer first), got {got}")
    assert got == [[3, 2], [1, 0]], (
        f"4 parameters of 40 bytes, bucket_bytes=80: want [[3, 2], [1, 0]], closing a bucket once it holds "
        f">= bucket_bytes, got {got}")
    assert bucket_parameters(params, 1) == [[3], [2], [1], [0]], "bucket_bytes below one parameter: one per bucket"
    assert bucket_parameters(params, 10**9) == [[3, 2, 1, 0]], "bucket_bytes above the model: one bucket"
    print("bucket_parameters:", got)


test_unit_bucket_parameters()

# %% [markdown]
# The class. Read `forward`, `op_recorded`, `rule_finished`, `_launch` and `backward_finished`
# (given): they are the plumbing. Then write `_gradient_ready` and `_write_mean`.

# %%
#| export
class _Done:
    """A finished all-reduce for the one-process world and for MPIs without thread support."""

    def __init__(self, value: np.ndarray):
        self._value = value

    def result(self) -> np.ndarray:
        return self._value


class DistributedDataParallel(Module):
    """Data-parallel training: every rank runs `model` on its share of the batch, and after
    backward every parameter's `.grad` is the mean over ranks.

    model        -- a Module; `.module` is it, and `parameters()` are its parameters
    world        -- the World (init_world()); at construction rank 0's parameters are copied to every rank
    bucket_bytes -- gradients are all-reduced in buckets of about this many bytes (bucket_parameters)
    Calling it calls the model. A forward pass with gradients on arms it; the backward pass of
    that graph launches each bucket's ring_all_reduce on a communication thread as soon as the
    bucket's last gradient is final, and waits for all of them before `backward()` returns.
    Inside `no_sync()`, forward and backward leave each rank's own (accumulated) gradients.
    """

    def __init__(self, model: Module, world: World, bucket_bytes: int = 1 << 20):
        super().__init__()
        if not isinstance(model, Module):
            raise TypeError(f"DistributedDataParallel wraps a Module, got {type(model).__name__}.")
        self.module = model
        object.__setattr__(self, "world", world)
        self.bucket_bytes = as_int(bucket_bytes, "DistributedDataParallel: bucket_bytes", 1)
        params = list(model.parameters())
        for p in params:  # every rank starts from rank 0's weights
            p.data = broadcast(p.data, world, root=0)
        params = [p for p in params if p.requires_grad]  # frozen parameters get no gradient to average
        object.__setattr__(self, "_params", params)
        self._index_of = {id(p): index for index, p in enumerate(params)}
        self.buckets = bucket_parameters(params, self.bucket_bytes)
        self._bucket_of = {index: b for b, bucket in enumerate(self.buckets) for index in bucket}
        self._sync = True
        self._armed = False
        threaded = world.size > 1 and world.threads_ok
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "ddp-allreduce") if threaded else None

    # ---- given: the plumbing ---------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if GradMode.enabled and self._sync:
            self._arm()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Forward and backward passes inside leave each rank's own gradients (accumulated)."""
        self._sync = False
        try:
            yield self
        finally:
            self._sync = True

    def _arm(self) -> None:
        """A forward pass with gradients on: count, op by op, the consumers of each parameter."""
        if not self._armed:
            self._armed, self._started = True, False
            self._consumers = [0] * len(self._params)
        if not any(listener is self for listener in OP_LISTENERS):
            OP_LISTENERS.append(self)

    def op_recorded(self, op, out, inputs, saved) -> None:
        if self._armed and not self._started and out.requires_grad:
            for inp in inputs:
                index = self._index_of.get(id(inp))
                if index is not None:
                    self._consumers[index] += 1

    def rule_started(self, node, grad) -> None:
        if self._armed and not self._started:  # the first rule of the backward pass
            self._started = True
            self._grad_before = [p.grad for p in self._params]
            self._ready = [False] * len(self._params)
            self._missing = [len(bucket) for bucket in self.buckets]
            self._sums: list[Any] = [None] * len(self._params)
            self._pending: dict[int, Any] = {}

    def rule_finished(self, node, grad, grads) -> None:
        """A rule has given its inputs' gradients: add each parameter's, as the engine will, and
        when a parameter's last consumer has reported, its gradient is final: `_gradient_ready`."""
        if not (self._armed and self._started):
            return
        for inp, g in zip(node.inputs, grads):
            index = self._index_of.get(id(inp))
            if index is None or self._ready[index]:
                continue
            if g is not None:
                g = unbroadcast(g, inp.shape).astype(inp.dtype, copy=False)
                self._sums[index] = g if self._sums[index] is None else self._sums[index] + g
            self._consumers[index] -= 1
            if self._consumers[index] == 0:
                self._ready[index] = True
                self._gradient_ready(index)

    def _launch(self, bucket: int) -> None:
        """Start the all-reduce of bucket `bucket`: its gradients flattened, in bucket order."""
        not_final = [i for i in self.buckets[bucket] if not self._ready[i]]
        if not_final:
            raise RuntimeError(
                f"DistributedDataParallel: bucket {bucket} launched before its last gradient was final: "
                f"parameter(s) {not_final} have no gradient of this backward yet; launch a bucket only when "
                f"all {len(self.buckets[bucket])} of its gradients are ready (count them in _gradient_ready).")
        if bucket in self._pending:
            raise RuntimeError(f"DistributedDataParallel: bucket {bucket} launched twice in one backward; "
                               "launch it once, when its last gradient is ready.")
        flat = np.concatenate([self._grad_array(i).reshape(-1) for i in self.buckets[bucket]])
        if self._executor is None:
            self._pending[bucket] = _Done(ring_all_reduce(flat, self.world))
        else:
            self._pending[bucket] = self._executor.submit(ring_all_reduce, flat, self.world)

    def _grad_array(self, index: int) -> np.ndarray:
        """Parameter `index`'s gradient after this backward: what the engine has written into .grad,
        or will write (the .grad before it plus this backward's sum); zeros if it has none."""
        p = self._params[index]
        if p.grad is not self._grad_before[index]:  # the engine has written it already
            return np.asarray(p.grad.data)
        before = None if p.grad is None else p.grad.data
        new = self._sums[index]
        if new is None:
            return np.zeros(p.shape, dtype=p.dtype) if before is None else before
        return new if before is None else before + new

    def backward_finished(self, tensor: Tensor) -> None:
        """Module 05's event: every .grad is written. Launch what is left, wait, write the means."""
        if not (self._armed and self._started):
            return
        self._armed = False
        if any(listener is self for listener in OP_LISTENERS):
            OP_LISTENERS.remove(self)
        for index, ready in enumerate(self._ready):  # a parameter this loss did not reach: its gradient is 0 here
            if not ready:
                self._ready[index] = True
                self._gradient_ready(index)
        for bucket in range(len(self.buckets)):  # in launch order on every rank
            if bucket not in self._pending:
                raise RuntimeError(f"DistributedDataParallel: bucket {bucket} was never launched although all its "
                                   "gradients are ready: _gradient_ready must launch a bucket when its count reaches 0.")
            self._write_mean(bucket, self._pending.pop(bucket).result())

    # ---- yours -------------------------------------------------------------------------
    def _gradient_ready(self, index: int) -> None:
        """Parameter `index`'s gradient is final for this backward (called once per parameter).

        Count it in its bucket (`self._bucket_of[index]`; `self._missing[bucket]` is how many of
        the bucket's gradients are still to come) and, when the bucket's LAST gradient has
        arrived, start its all-reduce with `self._launch(bucket)`. Never launch a bucket earlier.
        """
        ### BEGIN SOLUTION
        bucket = self._bucket_of[index]
        self._missing[bucket] -= 1
        if self._missing[bucket] == 0:
            self._launch(bucket)
        ### END SOLUTION

    def _write_mean(self, bucket: int, summed: np.ndarray) -> None:
        """Write the mean over ranks into each gradient of `bucket`.

        summed -- the ring all-reduce of the bucket: the parameters' gradients of
                  `self.buckets[bucket]`, flattened and concatenated in that order, summed over ranks.
        For each parameter p of the bucket, in order: its slice of `summed` (p.size elements,
        after those of the parameters before it), divided by the number of ranks, reshaped to
        p.shape, in p.dtype, as a new Tensor in `p.grad`.
        """
        offset = 0
        ### BEGIN SOLUTION
        for index in self.buckets[bucket]:
            p = self._params[index]
            part = summed[offset: offset + p.size] / self.world.size
            p.grad = Tensor(part.reshape(p.shape).astype(p.dtype, copy=False))
            offset += p.size
        ### END SOLUTION

# %% [markdown]
# In the one-process world DDP must change nothing: the mean over one rank is the gradient
# itself, and once backward has returned DDP no longer listens to the engine.

# %%
from tinytorch.core.activations import ReLU


def _tiny_model():
    return Sequential(Linear(3, 4, seed=0), ReLU(), Linear(4, 2, seed=1))


def test_unit_ddp_one_process():
    x, y = Tensor(np.random.default_rng(0).normal(size=(5, 3))), Tensor(np.ones((5, 2)))
    plain = _tiny_model()
    mse_loss(plain(x), y).backward()
    ddp = DistributedDataParallel(_tiny_model(), init_world(), bucket_bytes=40)
    mse_loss(ddp(x), y).backward()
    for (name, p), q in zip(ddp.module.named_parameters(), plain.parameters()):
        assert p.grad is not None and np.allclose(p.grad.data, q.grad.data, rtol=1e-6, atol=1e-7), (
            f"{name}: the gradient over one rank must be the gradient itself; check _write_mean "
            "(each parameter's own slice of the bucket, divided by the number of ranks)")
    assert ddp not in OP_LISTENERS, "DDP stops listening once backward has finished (given code)"
    print("DDP on one process: the same gradients;", len(ddp.buckets), "buckets:", ddp.buckets)


test_unit_ddp_one_process()

# %% [markdown]
# On several ranks the test is the real promise: DDP over N ranks, each on 1/N of the batch,
# trains exactly like one process on the whole batch. Every rank starts from *different*
# weights (seeded by its rank) and five AdamW steps later all ranks hold the one-process
# weights (float64, so the only difference is the order of additions).

# %%
DDP_TEST = """
import json
import numpy as np
from tinytorch.core.tensor import Tensor
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.activations import ReLU
from tinytorch.core.losses import mse_loss
from tinytorch.core.optimizers import AdamW
from tinytorch.perf.distributed import init_world, DistributedDataParallel

def model(seed):
    return Sequential(Linear(3, 8, seed=seed, dtype="float64"), ReLU(), Linear(8, 2, seed=seed + 1, dtype="float64"))

world = init_world()
rng = np.random.default_rng(0)
batches = [(rng.normal(size=(6 * world.size, 3)), rng.normal(size=(6 * world.size, 2))) for _ in range(5)]
single = model(0)
opt = AdamW(single.parameters(), lr=0.05)
for x, y in batches:
    opt.zero_grad(); mse_loss(single(Tensor(x)), Tensor(y)).backward(); opt.step()

ddp = DistributedDataParallel(model(0 if world.rank == 0 else 100 + world.rank), world, bucket_bytes=100)
opt = AdamW(ddp.parameters(), lr=0.05)
mine = slice(6 * world.rank, 6 * (world.rank + 1))
for x, y in batches:
    opt.zero_grad(); mse_loss(ddp(Tensor(x[mine])), Tensor(y[mine])).backward(); opt.step()
gap = max(float(np.max(np.abs(p.data - q.data))) for p, q in zip(ddp.parameters(), single.parameters()))
# one backward on the first batch: the gradient must be the whole batch's (not N times it)
whole, ddp_grads = model(0), model(0)
mse_loss(whole(Tensor(batches[0][0])), Tensor(batches[0][1])).backward()
check = DistributedDataParallel(ddp_grads, world, bucket_bytes=100)
mse_loss(check(Tensor(batches[0][0][mine])), Tensor(batches[0][1][mine])).backward()
ratio = float(np.median([np.median(p.grad.data / q.grad.data) for p, q in zip(ddp_grads.parameters(), whole.parameters())
                         if np.all(q.grad.data != 0)]))
print("RESULT " + json.dumps({"rank": world.rank, "gap": gap, "grad_ratio": ratio}))
"""


def test_unit_ddp_matches_one_process():
    one_process_first(_ddp_one_step)
    for ranks in (2,):  # 3 ranks in tests/21_distributed
        for row in run_on_ranks(DDP_TEST, ranks):
            assert abs(row["grad_ratio"] - ranks) > 1e-6, (
                f"{ranks} ranks, rank {row['rank']}: the gradients are {ranks}× the whole batch's: the sum over "
                "ranks, not the mean (missing divide by N in _write_mean)")
            assert row["gap"] < 1e-10, (
                f"{ranks} ranks, rank {row['rank']}: after 5 AdamW steps the weights differ from one process on "
                f"the whole batch by {row['gap']:.3g}: check _write_mean (divide by the number of ranks) and "
                "_gradient_ready (launch each bucket once, after its last gradient)")
    print("DDP on 2 ranks: the weights of one process on the whole batch")


test_unit_ddp_matches_one_process()

# %% [markdown]
# ### Measured: a training step on 1, 2 and 4 ranks
#
# **Predict:** the global batch of 12 sequences is split among the ranks (12, 6, 3 rows each).
# On a machine with two cores, how much faster is a step on 2 ranks than on 1? On 4?
#
# The program times forward + backward of a 2-layer version of the milestone's GPT (context 32)
# three ways:
# with `no_sync()` (compute only, no communication), with DDP in buckets of 64 KB (the
# all-reduces overlap the backward pass), and with one bucket for the whole model (its
# all-reduce can only start when the last gradient is final, so nothing overlaps). Each time is
# the slowest rank's, the median of a few steps. **4 ranks on this machine's cores are
# oversubscribed**: they take turns, which is not what 4 machines would do.

# %%
STEP_BENCH = """
import contextlib, json, time
import numpy as np
from tinytorch.models.transformer import GPT
from tinytorch.perf.distributed import DistributedDataParallel, all_gather, init_world
world = init_world()
rows = 12 // world.size
ids, targets = np.random.default_rng(world.rank).integers(0, 65, (2, rows, 32))

def step_ms(ddp, sync, repeats=3):
    times = []
    for i in range(repeats + 1):  # the first step warms up
        world.barrier()
        start = time.perf_counter()
        with contextlib.nullcontext() if sync else ddp.no_sync():
            _, loss = ddp(ids, targets=targets)
            loss.backward()
        mine = np.array([time.perf_counter() - start])
        for p in ddp.parameters():
            p.grad = None
        if i:
            times.append(float(all_gather(mine, world).max()))
    return 1e3 * float(np.median(times))

model = GPT(65, 128, 2, 4, 32, seed=0)
small = DistributedDataParallel(model, world, bucket_bytes=64 << 10)
whole = DistributedDataParallel(model, world, bucket_bytes=1 << 40)
result = {"rank": world.rank, "rows": rows, "buckets": len(small.buckets),
          "compute_ms": step_ms(small, sync=False), "overlap_ms": step_ms(small, sync=True),
          "one_bucket_ms": step_ms(whole, sync=True)}
print("RESULT " + json.dumps(result))
"""
print(f"forward + backward of a 2-layer GPT (batch 12 × 32 split among the ranks); this machine has {os.cpu_count()} cores")
print(f"{'ranks':>6} {'rows/rank':>10} {'compute only ms':>16} {'DDP, 64 KB buckets ms':>22} {'DDP, one bucket ms':>19}")
one_process_first(_ddp_one_step)
for ranks in (1, 2, 4):
    row = run_on_ranks(STEP_BENCH, ranks)[0]
    label = f"{ranks}{' (oversubscribed)' if ranks > (os.cpu_count() or 1) else ''}"
    print(f"{label:>6} {row['rows']:>10} {row['compute_ms']:>16.1f} {row['overlap_ms']:>22.1f} {row['one_bucket_ms']:>19.1f}")

# %% [markdown]
# Read it as three differences. *Compute only* against the ranks: how the work divides (on two
# cores, at most 2× from 1 to 2 ranks; at 4 ranks the cores are shared). *64 KB buckets* minus
# *compute only*: what communication adds to a step when it overlaps the backward pass (at 1
# rank nothing is sent: the difference there is DDP's own bookkeeping, listening to the engine
# and copying gradients into buckets, plus the noise of a shared machine). *One
# bucket* minus *64 KB buckets*: what the overlap saves, or costs: each bucket pays α, and on a
# machine whose cores are all busy computing, the communication thread competes with the
# backward pass for them instead of running beside it. On a cluster each rank has its own
# cores and network card, which is where overlap pays.

# %% [markdown]
# ## 6. ZeRO stage 1: the optimizer's state, sharded
#
# AdamW keeps two arrays per parameter (the moments): twice the model's size, on *every*
# rank, and every rank computes the same update. ZeRO stage 1 splits that work: the
# parameters are shared out among the ranks in balanced shares; each rank keeps the optimizer
# state of its own share only and steps only those parameters; then every rank gets every
# updated parameter from its owner. The weights are AdamW's exactly (the same update, computed
# once instead of N times), and each rank holds about 1/N of the state.
#
# **Balanced shares** (`shard_owners`): go through the parameters from the largest to the
# smallest (ties: the earlier parameter first) and give each to the rank that owns the fewest
# bytes so far (ties: the lower rank). Every rank computes the same answer from the sizes, so
# they need not talk about it.
#
# **The step** (`ShardedOptimizer.step`): step the own share's optimizer (a rank that owns
# nothing has none), then for every parameter, in order, `broadcast` it from its owner.

# %%
#| export
def shard_owners(sizes: Sequence[int], ranks: int) -> list[int]:
    """The rank that owns each parameter, balancing the bytes per rank.

    sizes -- each parameter's bytes, in parameter order; ranks -- the world's size N >= 1.
    Greedy: parameters from the largest to the smallest (equal sizes: the earlier first), each to
    the rank with the fewest bytes so far (equal: the lower rank). Returns one rank per parameter,
    e.g. shard_owners([100, 10, 60, 50], 2) -> [0, 0, 1, 1]: 100 to rank 0, 60 and 50 to rank 1
    (0 < 100, then 60 < 100), 10 to rank 0 (100 < 110); each rank owns 110 bytes.
    """
    ranks = as_int(ranks, "shard_owners: ranks", 1)
    ### BEGIN SOLUTION
    owners = [0] * len(sizes)
    load = [0] * ranks
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(ranks), key=lambda r: (load[r], r))
        owners[index] = rank
        load[rank] += sizes[index]
    return owners
    ### END SOLUTION


class ShardedOptimizer:
    """ZeRO stage 1: each rank keeps the optimizer state of its balanced share of `params` only.

    params         -- the parameters (a list, or a Module), the same on every rank
    make_optimizer -- `make_optimizer(own_params) -> optimizer` of module 06 (e.g.
                      `lambda ps: AdamW(ps, lr=1e-3)`), built over this rank's share
    world          -- the World
    `owners[i]` is the rank that owns params[i] (shard_owners of their bytes). `step()` updates
    the own share, then every rank has every updated parameter: the same weights as
    make_optimizer(params) on one process. `state_bytes()`: the optimizer state on this rank.
    """

    def __init__(self, params: Iterable[Any] | Module, make_optimizer: Callable[[list], Any], world: World):
        params = list(params.parameters() if isinstance(params, Module) else params)
        if not params:
            raise ValueError("ShardedOptimizer got an empty parameter list: nothing to optimize.")
        self.params, self.world = params, world
        self.owners = shard_owners([p.data.nbytes for p in params], world.size)
        own = [p for p, owner in zip(params, self.owners) if owner == world.rank]
        self.optimizer = make_optimizer(own) if own else None  # more ranks than parameters: some own none

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_bytes(self) -> int:
        """Bytes of optimizer state held on this rank (0 before the first step creates it)."""
        return 0 if self.optimizer is None else self.optimizer.state_nbytes()

    def step(self) -> None:
        """Step this rank's share (self.optimizer; None when it owns nothing), then give every
        rank every updated parameter: for each params[i], in order, p.data = broadcast from
        its owner (self.owners[i])."""
        ### BEGIN SOLUTION
        if self.optimizer is not None:
            self.optimizer.step()
        for p, owner in zip(self.params, self.owners):
            p.data = broadcast(p.data, self.world, root=owner)
        ### END SOLUTION

# %%
def test_unit_shard_owners():
    got = shard_owners([100, 10, 60, 50], 2)
    assert got == [0, 0, 1, 1], (
        f"shard_owners([100, 10, 60, 50], 2) must be [0, 0, 1, 1] (largest first, each to the rank with the "
        f"fewest bytes so far: 100→0, 60→1, 50→1, 10→0), got {got}: wrong shard owner")
    assert shard_owners([8, 8, 8], 1) == [0, 0, 0], "one rank owns everything"
    assert sorted(shard_owners([4] * 6, 3)) == [0, 0, 1, 1, 2, 2], "six equal parameters over 3 ranks: two each"
    one = init_world()
    p, q = Tensor(np.arange(3.0), requires_grad=True), Tensor(np.arange(3.0), requires_grad=True)
    sharded, plain = ShardedOptimizer([p], lambda ps: AdamW(ps, lr=0.1), one), AdamW([q], lr=0.1)
    p.grad = q.grad = Tensor(np.ones(3))
    sharded.step()
    plain.step()
    assert np.array_equal(p.data, q.data), (
        f"one process: ShardedOptimizer.step must be AdamW's step, got {p.data}, want {q.data}: "
        "step the own share (self.optimizer.step()), then broadcast each parameter from its owner")
    print("shard_owners:", got, "| one-process step equals AdamW:", p.data)


test_unit_shard_owners()

# %% [markdown]
# On 3 ranks: five steps of the sharded AdamW give AdamW's weights, and the state per rank
# adds up to AdamW's state.

# %%
ZERO_TEST = """
import json
import numpy as np
from tinytorch.core.tensor import Tensor
from tinytorch.core.optimizers import AdamW
from tinytorch.perf.distributed import init_world, ShardedOptimizer
world = init_world()
rng = np.random.default_rng(0)
shapes = [(4, 3), (3,), (3, 5), (5,), (7,)]
start = [rng.normal(size=s) for s in shapes]
grads = [[rng.normal(size=s) for s in shapes] for _ in range(5)]
plain = [Tensor(a.copy(), requires_grad=True) for a in start]
sharded = [Tensor(a.copy(), requires_grad=True) for a in start]
reference = AdamW(plain, lr=0.1, weight_decay=0.1)
zero = ShardedOptimizer(sharded, lambda ps: AdamW(ps, lr=0.1, weight_decay=0.1), world)
for step in grads:
    for p, q, g in zip(plain, sharded, step):
        p.grad, q.grad = Tensor(g), Tensor(g)
    reference.step(); zero.step()
gap = max(float(np.max(np.abs(p.data - q.data))) for p, q in zip(plain, sharded))
print("RESULT " + json.dumps({"rank": world.rank, "gap": gap, "owners": zero.owners, "state_bytes": zero.state_bytes(),
                            "full_state_bytes": reference.state_nbytes()}))
"""


def test_unit_sharded_optimizer():
    one_process_first(_zero_one_step)
    for ranks in (3,):  # 2 ranks in tests/21_distributed
        rows = run_on_ranks(ZERO_TEST, ranks)
        for row in rows:
            assert row["gap"] == 0.0, (
                f"{ranks} ranks, rank {row['rank']}: the sharded AdamW's weights differ from AdamW's by {row['gap']:.3g} "
                "after 5 steps: step the own share, then broadcast each parameter from its owner (owners[i])")
        total = sum(row["state_bytes"] for row in rows)
        assert total == rows[0]["full_state_bytes"], (
            f"{ranks} ranks hold {total} bytes of optimizer state together, AdamW alone {rows[0]['full_state_bytes']}: "
            "each parameter's state on exactly one rank")
    print("ShardedOptimizer on 3 ranks: AdamW's weights; state bytes per rank", [r["state_bytes"] for r in rows])


test_unit_sharded_optimizer()

# %% [markdown]
# ### Measured: optimizer state per rank
#
# **Predict:** the milestone's GPT has about 0.8 million parameters in float32. How many bytes
# of AdamW state does each rank hold with plain DDP, and with ZeRO-1 on 4 ranks?
#
# The program builds the milestone's GPT on every rank, takes one step (AdamW creates its state
# on the first step) and reports each rank's optimizer-state bytes. 4 ranks on this machine
# share its cores (oversubscribed): only bytes are measured here, no time.

# %%
STATE_BYTES = """
import json
import numpy as np
from tinytorch.core.tensor import Tensor
from tinytorch.core.optimizers import AdamW
from tinytorch.models.transformer import GPT
from tinytorch.perf.distributed import init_world, ShardedOptimizer
world = init_world()
model = GPT(65, 128, 4, 4, 64, seed=0)  # the Shakespeare milestone's shape
for p in model.parameters():
    p.grad = Tensor(np.zeros_like(p.data))  # the state's size does not depend on the gradient's values
plain = AdamW(model.parameters(), lr=1e-3)
plain.step()
zero = ShardedOptimizer(model.parameters(), lambda ps: AdamW(ps, lr=1e-3), world)
zero.step()
print("RESULT " + json.dumps({"rank": world.rank, "params": int(sum(p.size for p in model.parameters())),
                            "plain": plain.state_nbytes(), "zero": zero.state_bytes()}))
"""
one_process_first(_zero_one_step)
for ranks in (4,):
    rows = run_on_ranks(STATE_BYTES, ranks)
    print(f"{ranks} ranks{' (oversubscribed)' if ranks > (os.cpu_count() or 1) else ''}, "
          f"{rows[0]['params']:,} parameters: AdamW state per rank without sharding "
          f"{rows[0]['plain'] / 2**20:.2f} MiB; with ZeRO-1 " +
          ", ".join(f"rank {r['rank']} {r['zero'] / 2**20:.2f} MiB" for r in rows) +
          f" (1/N would be {rows[0]['plain'] / ranks / 2**20:.2f} MiB)")

# %% [markdown]
# The shares are within one parameter of 1/N: the largest tensor (the token embedding, tied to
# the output layer) cannot be split by a per-parameter owner. ZeRO stage 2 and 3 go further:
# they shard the gradients and the parameters themselves, at the cost of more messages.

# %% [markdown]
# ## 7. Beyond one machine: a MODEL, not a measurement
#
# Everything so far ran on one machine. What happens on 8 to 512 ranks of a cluster? Put the
# numbers into the α–β model of the ring. This is arithmetic on assumed inputs, labelled so:
#
# * the network: α and bandwidth of a 200 Gb/s InfiniBand link as its vendor quotes them (not
#   measured here);
# * the compute: each rank a GPU that does an assumed number of useful FLOP per second, and a
#   training step of `6 · parameters · tokens` FLOPs (forward 2, backward 4 per parameter and
#   token), each rank on the milestone's batch of 12 × 64 tokens (weak scaling: N ranks, N
#   times the batch);
# * two models: the milestone's GPT, and one with 100 times its parameters;
# * no overlap: step = compute + all-reduce (perfect overlap would be their maximum).

# %%
MODEL_INPUTS = dict(alpha_s=2e-6, bandwidth_bytes_per_s=25e9,  # ASSUMED: 200 Gb/s InfiniBand, vendor figures
                    flops_per_s=100e12,  # ASSUMED: useful FLOP/s of one GPU in training
                    tokens_per_rank=12 * 64)  # the milestone's batch per rank

from tinytorch.models.transformer import GPT

milestone_params = sum(p.size for p in GPT(65, 128, 4, 4, 64, seed=0).parameters())  # counted, not typed in
print("MODEL inputs:", MODEL_INPUTS)
print(f"{'model':>22} {'ranks':>6} {'compute ms':>11} {'all-reduce ms':>14} {'step ms':>9} {'efficiency':>11}")
for label, params in (("milestone GPT", milestone_params), ("100× larger", 100 * milestone_params)):
    compute_s = 6 * params * MODEL_INPUTS["tokens_per_rank"] / MODEL_INPUTS["flops_per_s"]
    for ranks in (8, 32, 128, 512):
        comm_s = predict_ring_all_reduce_s(4 * params, ranks, MODEL_INPUTS["alpha_s"],
                                           1 / MODEL_INPUTS["bandwidth_bytes_per_s"])
        print(f"{label + f' ({params / 1e6:.1f} M)':>22} {ranks:>6} {compute_s * 1e3:>11.3f} {comm_s * 1e3:>14.3f} "
              f"{(compute_s + comm_s) * 1e3:>9.3f} {compute_s / (compute_s + comm_s):>10.0%}")
balance = 2 * 4 / MODEL_INPUTS["bandwidth_bytes_per_s"] * MODEL_INPUTS["flops_per_s"] / 6
print(f"MODEL: compute equals the all-reduce's bandwidth term at about {balance:,.0f} tokens per rank per step, "
      "whatever the model's size")

# %% [markdown]
# Read the model. Both the compute and the all-reduce's bytes grow with the parameter count,
# so the larger model is not better off; what decides is the **tokens per rank per step**: the
# compute of a step is proportional to them, the all-reduce is not. With the milestone's small
# batch, communication dominates at every N in this model. The latency term 2(N−1)·α grows
# with N and matters at 512 ranks for the small model only. This is why large runs use large
# batches per GPU, overlap the all-reduce with backward (section 5), and, past a point, other
# kinds of parallelism.

# %% [markdown]
# ## Summary
#
# * A rank sees another's data only as a message; `sendrecv` is the step of every ring.
# * The ring all-reduce: reduce-scatter, then all-gather, 2(N−1) steps of one chunk each; every
#   rank sends 2(N−1)/N of the array, whatever N, and every rank ends with the same bits.
#   Uneven sizes need chunk boundaries `i·n // N`, nothing else.
# * α–β: t = α + β·m per message; fitted here to this machine's messages, and used to predict
#   collectives.
# * DDP: the same model everywhere (rank 0's weights broadcast), each rank on its share of the
#   batch, the mean gradient by all-reduce; buckets in reverse order, each launched when its
#   last gradient is final, overlap communication with the rest of backward. `no_sync()`
#   accumulates locally and synchronises once.
# * ZeRO-1: balanced shares of the optimizer state, each rank steps its own, then broadcasts
#   it; AdamW's weights exactly, with about 1/N of its state per rank.
#
# ## Exercises
#
# 1. **A tree broadcast.** Rewrite `broadcast` so that in round k every rank that has the array
#    sends it to the rank 2^k further on. How many rounds for N ranks? Count the bytes the root
#    sends with `world.bytes_sent`, before and after.
# 2. **Bucket size.** Time a DDP training step of the milestone's GPT on 2 ranks for
#    `bucket_bytes` of 1 KB, 64 KB, 1 MB and the whole model. Which is fastest here, and what
#    does the α–β model say it should be?
# 3. **A ring broadcast.** Pipelining a large broadcast through the ring in chunks costs the
#    root only one array's bytes. Write it and compare its bytes with yours.
# 4. **ZeRO-2.** Shard the gradients too: replace the all-reduce by a reduce-scatter (the
#    first half of your ring), so each rank only receives the summed gradients of its own
#    share. How many bytes per rank does one step send now?
#
# ## Questions (answer them by running your code)
#
# 1. In section 3, at which size does the ring beat "everything through rank 0" on 2 ranks?
#    Rerun the measurement with 4 ranks (oversubscribed): what changes, and why?
# 2. How many bytes does `ring_all_reduce` send per rank for an array of 1001 float64 on 3
#    ranks? Derive it from the chunk sizes, then check it with `world.bytes_sent`.
# 3. Why must every rank of DDP launch its buckets in the same order? What happens if one rank
#    numbers its buckets differently?
# 4. Your fitted α and β: how long does a 1-byte message take, and how large must a message be
#    before the bytes cost as much as the latency?
# 5. In section 7's model, at what number of tokens per rank does the milestone's GPT reach 90%
#    efficiency on 512 ranks?
