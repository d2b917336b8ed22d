"""Module 21, graded cases: the collectives, DDP and ZeRO-1 on 3 to 5 ranks inside one process.

The sandbox has no MPI launcher, so the ranks are threads: `ThreadWorld` has the interface of
the module's `World` (rank, size, send, recv, sendrecv, barrier, bytes_sent, threads_ok) and
carries messages in thread-safe queues, one per (source, destination) pair, as raw bytes that
the receiver reads as the array it expects (what MPI does). `run_ranks` runs one function per
rank, each on its own daemon thread, and returns what each rank returned in rank order; a rank
that waits longer than WAIT_S for a message (a student's ring whose sends and receives do not
match) makes the case raise instead of hanging, and an error on one rank stops the others at
their next message. The values do not depend on how the threads are scheduled: every rank adds
what it receives in the order the algorithm fixes. Format: grading/reference_values.py.
"""
import queue
import threading
import time

import numpy as np
from reference_values import raised

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import mse_loss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import OP_LISTENERS, Tensor
from tinytorch.perf.distributed import (DistributedDataParallel, ShardedOptimizer, all_gather, broadcast,
                                        bucket_parameters, fit_alpha_beta, predict_ring_all_reduce_s,
                                        ring_all_reduce, shard_owners)

WAIT_S = 5.0  # the longest a rank waits for one message before the case fails: a mismatched ring
POLL_S = 0.02  # how often a waiting rank checks whether another rank has failed


class RankFailed(RuntimeError):
    """Another rank raised: this one stops waiting (its own error is not the cause)."""


class _NoCommunicator:
    """`world.comm` of the in-process world: there is no MPI here, so MPI's own calls fail by name."""

    def __getattr__(self, name):
        raise AttributeError(f"world.comm.{name}: the graded cases run the ranks as threads without MPI; "
                             "build the collectives on world.send, world.recv and world.sendrecv")


class ThreadWorld:
    """Rank `rank` of `size` ranks that are threads of one process; the module's World's interface.

    mailboxes -- {(source, dest): queue.Queue} shared by the ranks; each message is the sender's bytes
    barrier   -- a threading.Barrier(size) shared by the ranks
    failed    -- a threading.Event set when any rank raised
    """

    def __init__(self, rank, size, mailboxes, barrier, failed):
        self.rank, self.size = rank, size
        self.comm = _NoCommunicator()
        self.threads_ok = False  # DDP then runs each bucket's all-reduce on the rank's own thread, in order
        self.bytes_sent = 0
        self.messages_sent = 0
        self._mailboxes, self._barrier, self._failed = mailboxes, barrier, failed

    def __repr__(self):
        return f"ThreadWorld(rank={self.rank}, size={self.size})"

    def _peer(self, peer, what):
        if isinstance(peer, bool) or not isinstance(peer, (int, np.integer)) or not 0 <= peer < self.size:
            raise ValueError(f"World.{what}: rank {peer!r} does not exist in a world of size {self.size}.")
        return int(peer)

    @staticmethod
    def _array(array):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"the world sends NumPy arrays, got a {type(array).__name__}: pass a Tensor's .data")
        return np.ascontiguousarray(array)

    def send(self, array, dest):
        array, dest = self._array(array), self._peer(dest, "send: dest")
        self.bytes_sent += array.nbytes
        self.messages_sent += 1
        self._mailboxes[self.rank, dest].put(array.tobytes())  # a copy: the sender may change its array

    def recv(self, like, source):
        like, source = self._array(like), self._peer(source, "recv: source")
        waited = 0.0
        while True:
            try:
                message = self._mailboxes[source, self.rank].get(timeout=POLL_S)
                break
            except queue.Empty:
                if self._failed.is_set():
                    raise RankFailed(f"rank {self.rank} stopped waiting for rank {source}: another rank failed")
                waited += POLL_S
                if waited >= WAIT_S:
                    raise TimeoutError(f"rank {self.rank} waited {WAIT_S} s for a message from rank {source} that "
                                       "never came: the ranks' sends and receives do not match") from None
        if len(message) != like.nbytes:
            raise RuntimeError(f"rank {source} sent {len(message)} bytes, rank {self.rank} expected {like.nbytes} "
                               f"({like.shape} {like.dtype}): the two ranks disagree on what this step moves")
        return np.frombuffer(message, dtype=like.dtype).reshape(like.shape).copy()

    def sendrecv(self, array, dest, like, source):
        self.send(array, dest)
        return self.recv(like, source)

    def barrier(self):
        self._barrier.wait(timeout=WAIT_S)


def run_ranks(size, program):
    """[program(world) for each rank], each rank on its own thread; raises what a rank raised."""
    mailboxes = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
    barrier, failed = threading.Barrier(size), threading.Event()
    worlds = [ThreadWorld(rank, size, mailboxes, barrier, failed) for rank in range(size)]
    results, errors = [None] * size, [None] * size

    def run(rank):
        try:
            results[rank] = program(worlds[rank])
        except BaseException as err:  # noqa: BLE001 - handed to the case below
            errors[rank] = err
            failed.set()

    threads = [threading.Thread(target=run, args=(rank,), daemon=True, name=f"rank-{rank}") for rank in range(size)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 3 * WAIT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    failed.set()  # a rank still waiting stops at its next poll
    first_causes = [e for e in errors if e is not None and not isinstance(e, (RankFailed, TimeoutError))]
    for error in first_causes + [e for e in errors if e is not None]:
        raise error
    stuck = [rank for rank, thread in enumerate(threads) if thread.is_alive()]
    if stuck:
        raise TimeoutError(f"rank(s) {stuck} did not finish in {3 * WAIT_S} s")
    return results, worlds


def _per_rank(rng, size, shape, dtype, scale=10.0):
    if np.dtype(dtype).kind in "iu":
        return [rng.integers(-50, 50, shape).astype(dtype) for _ in range(size)]
    return [(rng.standard_normal(shape) * scale).astype(dtype) for _ in range(size)]


def _all_reduce_on(rng, size, shape, dtype):
    """Every rank's result, whether its input is unchanged, and its bytes and messages sent."""
    inputs = _per_rank(rng, size, shape, dtype)
    kept = [x.copy() for x in inputs]
    results, worlds = run_ranks(size, lambda world: ring_all_reduce(inputs[world.rank], world))
    return {"results": np.stack(results), "dtypes": [str(r.dtype) for r in results],
            "inputs_unchanged": [bool(np.array_equal(x, k)) for x, k in zip(inputs, kept)],
            "bytes_sent": [w.bytes_sent for w in worlds], "messages": [w.messages_sent for w in worlds]}


def _ring_uneven(rng):
    got = _all_reduce_on(rng, 3, (2, 5), np.float64)  # 10 elements over 3 ranks: chunks of 3, 3, 4
    return {**got, "bit_identical": [bool(np.array_equal(r, got["results"][0])) for r in got["results"]]}


def _ring_integers_five_ranks(rng):
    return _all_reduce_on(rng, 5, (13,), np.int64)  # 13 over 5: chunks of 2, 3, 2, 3, 3


def _ring_small_and_float32(rng):
    small = _all_reduce_on(rng, 4, (3,), np.float32)  # fewer elements than ranks: one chunk is empty
    square = _all_reduce_on(rng, 3, (4, 3), np.float32)  # 12 over 3: equal chunks
    return {**{f"small_{k}": v for k, v in small.items()}, **{f"even_{k}": v for k, v in square.items()}}


def _ring_traffic_and_model(rng):
    """Bytes each rank sends for arrays of several sizes on 4 ranks, beside the α–β model's
    2(N−1)/N·nbytes (α = 0, β = 1 s/byte), and the model fitted to scripted times of those messages."""
    sizes = [8, 64, 1000, 4099]
    sent = []
    for n in sizes:
        inputs = _per_rank(rng, 4, (n,), np.float64)
        _, worlds = run_ranks(4, lambda world: ring_all_reduce(inputs[world.rank], world))
        sent.append([w.bytes_sent for w in worlds])
    model = [predict_ring_all_reduce_s(8 * n, 4, 0.0, 1.0) for n in sizes]
    alpha, beta = rng.uniform(2e-6, 2e-5), rng.uniform(1e-10, 1e-9)
    message_bytes = np.asarray(sent, dtype=np.float64).max(axis=1)
    seconds = (alpha + beta * message_bytes) * rng.uniform(0.97, 1.03, len(sizes))
    fitted = fit_alpha_beta(message_bytes, seconds)
    return {"bytes_sent": sent, "model_bytes": model, "fitted": list(fitted),
            "predicted_s": [predict_ring_all_reduce_s(8 * n, 8, *fitted) for n in sizes]}


def _broadcast(rng):
    inputs = _per_rank(rng, 4, (3, 2), np.float32)
    results, worlds = run_ranks(4, lambda world: broadcast(inputs[world.rank], world, root=2))
    ints = _per_rank(rng, 3, (5,), np.int16)
    from_one, int_worlds = run_ranks(3, lambda world: broadcast(ints[world.rank], world, root=1))
    bad, _ = run_ranks(2, lambda world: [raised(broadcast, inputs[0], world, root=root) for root in (2, -1, 1.0)])
    return {"from_2": np.stack(results), "bytes_sent": [w.bytes_sent for w in worlds],
            "from_1": np.stack(from_one), "int_bytes_sent": [w.bytes_sent for w in int_worlds],
            "not_a_copy_of_input": [not np.shares_memory(r, x) for r, x in zip(from_one, ints)],
            "bad_roots": bad}


def _all_gather(rng):
    inputs = _per_rank(rng, 3, (2, 3), np.int32)
    results, worlds = run_ranks(3, lambda world: all_gather(inputs[world.rank], world))
    vectors = _per_rank(rng, 5, (4,), np.float64)
    five, five_worlds = run_ranks(5, lambda world: all_gather(vectors[world.rank], world))
    return {"three": np.stack(results), "bytes_sent": [w.bytes_sent for w in worlds],
            "five": np.stack(five), "five_bytes_sent": [w.bytes_sent for w in five_worlds]}


def _bucket_layout(buckets, count):
    """A bucket list as arrays: the indices in bucket order, and each parameter's bucket number."""
    bucket_of = [-1] * count
    for number, bucket in enumerate(buckets):
        for index in bucket:
            bucket_of[index] = number
    return [index for bucket in buckets for index in bucket], bucket_of


def _buckets(rng):
    sizes = rng.integers(1, 9, 7).tolist()  # float64 elements per parameter
    params = [Tensor(np.zeros(n)) for n in sizes]
    out = {"sizes": sizes}
    for bucket_bytes in (1, 24, 8 * sizes[-1] + 8 * sizes[-2], 64, 10_000):
        order, bucket_of = _bucket_layout(bucket_parameters(params, bucket_bytes), len(params))
        out[f"order_{bucket_bytes}"], out[f"bucket_of_{bucket_bytes}"] = order, bucket_of
    mixed = [Tensor(np.zeros(3, dtype=np.float32)), Tensor(np.zeros((2, 2))), Tensor(np.zeros(5, dtype=np.int16)),
             Tensor(np.zeros(2, dtype=np.float32))]  # 12, 32, 10 and 8 bytes
    out["mixed_order"], out["mixed_bucket_of"] = _bucket_layout(bucket_parameters(mixed, 18), len(mixed))
    return out


class _ListenerOfEachRank:
    """The engine's listeners are one global list; with every rank's backward on its own thread,
    each rank's DDP must hear only its own thread's events. This one listener passes each event
    to the DDP of the thread that raised it."""

    def __init__(self):
        self.by_thread = {}

    def _of_this_thread(self):
        return self.by_thread.get(threading.get_ident())

    def op_recorded(self, *args):
        if (ddp := self._of_this_thread()) is not None:
            ddp.op_recorded(*args)

    def rule_started(self, *args):
        if (ddp := self._of_this_thread()) is not None:
            ddp.rule_started(*args)

    def rule_finished(self, *args):
        if (ddp := self._of_this_thread()) is not None:
            ddp.rule_finished(*args)

    def backward_finished(self, *args):
        if (ddp := self._of_this_thread()) is not None:
            ddp.backward_finished(*args)


def _ddp_world(rng, size, bucket_bytes, steps):
    """`size` DDP ranks, each with its own weights (rank 0's must win) and its own data.

    steps -- a list of "sync" / "no_sync": one forward and backward each, in that mode.
    Constructing DDP (its broadcast) runs on the rank threads; each forward runs on the main
    thread (the DDPs listen to it as they would on their own rank: each counts its own
    parameters' uses); each backward runs on the rank threads, all ranks at once, while one
    listener routes the engine's events to the DDP of the thread that raised them.
    """
    models = []
    for _ in range(size):
        model = Sequential(Linear(3, 4, rng=rng, dtype=np.float64), ReLU(), Linear(4, 2, rng=rng, dtype=np.float64))
        models.append(model)
    ddps, _ = run_ranks(size, lambda world: DistributedDataParallel(models[world.rank], world,
                                                                     bucket_bytes=bucket_bytes))
    router = _ListenerOfEachRank()
    before = list(OP_LISTENERS)
    try:
        for mode in steps:
            losses = []
            for ddp in ddps:
                x, y = Tensor(rng.standard_normal((3, 3))), Tensor(rng.standard_normal((3, 2)))
                if mode == "no_sync":
                    with ddp.no_sync():
                        losses.append(mse_loss(ddp(x), y))
                else:
                    losses.append(mse_loss(ddp(x), y))
            OP_LISTENERS[:] = before + [router]  # the DDPs that armed themselves hear only the router now

            def backward(world):
                router.by_thread[threading.get_ident()] = ddps[world.rank]
                losses[world.rank].backward()
                return [p.grad.data.copy() for p in ddps[world.rank].parameters()]

            grads, _ = run_ranks(size, backward)
            OP_LISTENERS[:] = before
    finally:
        OP_LISTENERS[:] = before
    return ddps, grads


def _ddp_mean_gradients(rng):
    ddps, grads = _ddp_world(rng, 3, bucket_bytes=80, steps=["sync"])
    out = {f"grad_{i}": np.stack([g[i] for g in grads]) for i in range(len(grads[0]))}
    out.update({f"weight_{i}": np.stack([list(d.parameters())[i].data for d in ddps]) for i in range(4)})
    out["bucket_order"], out["bucket_of"] = _bucket_layout(ddps[0].buckets, 4)
    return out


def _ddp_accumulates_then_syncs(rng):
    _, grads = _ddp_world(rng, 4, bucket_bytes=1, steps=["no_sync", "sync"])  # a bucket per parameter
    return {f"grad_{i}": np.stack([g[i] for g in grads]) for i in range(len(grads[0]))}


def _shard_owners(rng):
    sizes = rng.integers(1, 200, 9).tolist()
    out = {"sizes": sizes}
    for ranks in (1, 2, 3, 4, 12):
        owners = shard_owners(sizes, ranks)
        out[f"owners_{ranks}"] = owners
        out[f"load_{ranks}"] = [sum(s for s, o in zip(sizes, owners) if o == r) for r in range(ranks)]
    out["ties"] = shard_owners([16, 16, 8, 8, 16, 8], 3)
    return out


def _sharded_run(rng, size, shapes, steps):
    """`size` ranks step ShardedOptimizer(AdamW) with the same gradients; every rank's final weights."""
    start = [rng.standard_normal(shape) for shape in shapes]
    grads = [[rng.standard_normal(shape) for shape in shapes] for _ in range(steps)]

    def program(world):
        params = [Tensor(s.copy(), requires_grad=True) for s in start]
        zero = ShardedOptimizer(params, lambda own: AdamW(own, lr=0.05, weight_decay=0.1), world)
        for step in range(steps):
            zero.zero_grad()
            for p, g in zip(params, grads[step]):
                p.grad = Tensor(g.copy())
            zero.step()
        return [p.data.copy() for p in params], zero.owners, zero.state_bytes()

    results, worlds = run_ranks(size, program)
    out = {f"param_{i}": np.stack([r[0][i] for r in results]) for i in range(len(shapes))}
    out.update({"owners": results[0][1], "same_owners_everywhere": [r[1] == results[0][1] for r in results],
                "state_bytes": [r[2] for r in results], "bytes_sent": [w.bytes_sent for w in worlds]})
    return out


def _sharded_adamw(rng):
    return _sharded_run(rng, 3, [(4, 3), (5,), (2, 2), (7,), (3,), (6, 2)], steps=3)


def _sharded_more_ranks_than_params(rng):
    return _sharded_run(rng, 4, [(3, 3), (2,), (4,)], steps=2)


CASES = {
    "ring-uneven": (_ring_uneven, "ring_all_reduce on 3 ranks, 10 elements (chunks of 3, 3, 4): the sum on every "
                                  "rank, bit-identical, inputs untouched, 2(N-1) messages per rank"),
    "ring-integers-five-ranks": (_ring_integers_five_ranks, "ring_all_reduce of int64 on 5 ranks, 13 elements: "
                                                            "exact sums, dtype kept, bytes sent per rank"),
    "ring-small-and-float32": (_ring_small_and_float32, "ring_all_reduce of float32 with fewer elements than ranks "
                                                        "(an empty chunk) and with equal chunks"),
    "ring-traffic-and-model": (_ring_traffic_and_model, "bytes each rank sends in the ring against the α–β model "
                                                        "2(N-1)/N·nbytes, and the model fitted to scripted times"),
    "broadcast": (_broadcast, "broadcast from a root other than 0 on 4 and 3 ranks: the root's array everywhere, "
                              "the root sends N-1 messages, roots outside the world refused"),
    "all-gather": (_all_gather, "all_gather on 3 and 5 ranks: row r is rank r's array on every rank, N-1 ring steps"),
    "buckets": (_buckets, "bucket_parameters: last parameter first, a bucket closes once it holds >= bucket_bytes, "
                          "bytes of mixed dtypes"),
    "ddp-mean-gradients": (_ddp_mean_gradients, "DistributedDataParallel on 3 ranks: rank 0's weights everywhere, "
                                                "every .grad the mean over ranks, two buckets"),
    "ddp-accumulates-then-syncs": (_ddp_accumulates_then_syncs, "DDP on 4 ranks: a no_sync backward then a synced "
                                                                "one give the mean over ranks of each rank's sum"),
    "shard-owners": (_shard_owners, "shard_owners: largest first, each to the rank with the fewest bytes (ties: "
                                    "the lower rank), for 1 to 12 ranks"),
    "sharded-adamw": (_sharded_adamw, "ShardedOptimizer(AdamW) on 3 ranks, 3 steps: the weights of one AdamW on "
                                      "every rank, each rank holding the state of its share only"),
    "sharded-more-ranks-than-params": (_sharded_more_ranks_than_params, "ShardedOptimizer on 4 ranks with 3 "
                                                                        "parameters: a rank that owns none"),
}
