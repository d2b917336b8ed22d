"""Module 21 in one process: the one-process world, the α–β model, and the collectives, DDP and
ZeRO-1 where there is one rank (each must then change nothing)."""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import mse_loss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import OP_LISTENERS, Tensor
from tinytorch.perf.distributed import (DistributedDataParallel, ShardedOptimizer, World, all_gather, all_reduce_mistake,
                                        broadcast, bucket_parameters, fit_alpha_beta, init_world,
                                        predict_ring_all_reduce_s, ring_all_reduce, shard_owners)


def test_plain_python_is_a_one_process_world():
    world = init_world()
    assert (world.rank, world.size, world.comm) == (0, 1, None)


def test_one_process_world_messages_and_bytes():
    world = World(None)
    world.send(np.arange(4, dtype=np.int16), 0)
    assert world.recv(np.zeros(4, dtype=np.int16), 0).tolist() == [0, 1, 2, 3]
    got = world.sendrecv(np.ones((2, 3)), 0, like=np.zeros((2, 3)), source=0)
    assert got.tolist() == [[1.0] * 3] * 2
    assert world.bytes_sent == 8 + 48, "bytes_sent counts every byte sent: 4 int16 + 6 float64"


def test_world_refuses_bad_input_by_name():
    world = World(None)
    with pytest.raises(ValueError, match="rank 1 does not exist"):
        world.send(np.ones(2), 1)
    with pytest.raises(TypeError, match="NumPy arrays"):
        world.send([1.0, 2.0], 0)
    with pytest.raises(RuntimeError, match="nothing was sent"):
        world.recv(np.ones(2), 0)


def test_fit_alpha_beta_recovers_a_line():
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    alpha, beta = fit_alpha_beta(sizes, 3e-6 + sizes * 2e-10)
    assert alpha == pytest.approx(3e-6, rel=1e-9) and beta == pytest.approx(2e-10, rel=1e-9)


def test_fit_alpha_beta_refuses_what_cannot_be_fitted():
    with pytest.raises(ValueError, match="two different message sizes"):
        fit_alpha_beta([100, 100], [1e-5, 2e-5])
    with pytest.raises(ValueError, match="one time per size"):
        fit_alpha_beta([1, 2, 3], [1e-5, 2e-5])


def test_predict_ring_all_reduce():
    # 2(N−1)·α + 2(N−1)/N·bytes·β with N = 8: 14·5 µs + 1.75·4e6·1 ns = 70 µs + 7 ms
    assert predict_ring_all_reduce_s(4e6, 8, 5e-6, 1e-9) == pytest.approx(7.07e-3, rel=1e-12)
    assert predict_ring_all_reduce_s(4e6, 1, 5e-6, 1e-9) == 0.0


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("shape", [(0,), (1,), (), (3, 4)])
def test_collectives_on_one_rank_are_copies(shape, dtype):
    world = World(None)
    x = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    got = ring_all_reduce(x, world)
    assert got.shape == x.shape and got.dtype == x.dtype and np.array_equal(got, x), (
        "on one rank the sum over ranks is the array itself (same shape and dtype)")
    assert not np.shares_memory(got, x), "ring_all_reduce returns a new array, never the caller's"
    assert np.array_equal(broadcast(x, world), x)
    assert all_gather(x, world).shape == (1, *shape)
    assert world.bytes_sent == 0, "a ring of one rank sends nothing: 2(N−1)/N = 0"


def test_broadcast_refuses_a_root_outside_the_world():
    with pytest.raises(ValueError, match="root must be a rank"):
        broadcast(np.ones(2), World(None), root=1)


def test_bucket_parameters_reverse_order_and_sizes():
    params = [Tensor(np.zeros(n)) for n in (5, 5, 5, 5)]  # 40 bytes each
    assert bucket_parameters(params, 80) == [[3, 2], [1, 0]], (
        "buckets go from the LAST parameter to the first (backward finishes the last layer first), "
        "closing a bucket once it holds >= bucket_bytes")
    assert bucket_parameters(params, 100) == [[3, 2, 1], [0]]
    assert bucket_parameters(params, 1) == [[3], [2], [1], [0]]


def test_shard_owners_balances_bytes():
    assert shard_owners([100, 10, 60, 50], 2) == [0, 0, 1, 1], (
        "largest first, each to the rank with the fewest bytes so far (ties: the lower rank): wrong shard owner")
    assert shard_owners([8, 8, 8], 1) == [0, 0, 0]
    owners = shard_owners([40, 30, 20, 10, 10, 10], 3)
    load = [sum(s for s, o in zip([40, 30, 20, 10, 10, 10], owners) if o == r) for r in range(3)]
    assert sorted(load) == [40, 40, 40], f"balanced shares: 120 bytes over 3 ranks is 40 each, got {load}"


def _model(seed=0):
    return Sequential(Linear(3, 4, seed=seed, dtype="float64"), ReLU(), Linear(4, 2, seed=seed + 1, dtype="float64"))


def test_ddp_on_one_rank_keeps_the_gradients_and_stops_listening():
    x, y = Tensor(np.random.default_rng(0).normal(size=(5, 3))), Tensor(np.ones((5, 2)))
    plain = _model()
    mse_loss(plain(x), y).backward()
    ddp = DistributedDataParallel(_model(), World(None), bucket_bytes=40)
    assert ddp.module is not None and len(list(ddp.parameters())) == 4
    mse_loss(ddp(x), y).backward()
    for p, q in zip(ddp.parameters(), plain.parameters()):
        np.testing.assert_array_equal(p.grad.data, q.grad.data)
    assert not any(listener is ddp for listener in OP_LISTENERS), "DDP stops listening when backward has finished"


def test_ddp_launches_buckets_during_backward(monkeypatch):
    """The first bucket's all-reduce starts while rules are still to run, not after backward."""
    ddp = DistributedDataParallel(_model(), World(None), bucket_bytes=1)  # one parameter per bucket

    class RuleCounter:
        count = 0

        def op_recorded(self, *args):
            pass

        def rule_started(self, node, grad):
            RuleCounter.count += 1

        def rule_finished(self, *args):
            pass

    launched_at = []
    original = ddp._launch
    monkeypatch.setattr(ddp, "_launch", lambda bucket: (launched_at.append(RuleCounter.count), original(bucket)))
    counter = RuleCounter()
    OP_LISTENERS.append(counter)
    try:
        loss = mse_loss(ddp(Tensor(np.ones((2, 3)))), Tensor(np.zeros((2, 2))))
        loss.backward()
    finally:
        OP_LISTENERS.remove(counter)
    assert len(launched_at) == len(ddp.buckets) == 4, (
        f"one launch per bucket, got {len(launched_at)} for {len(ddp.buckets)} buckets")
    assert launched_at[0] < RuleCounter.count, (
        f"the first bucket was launched after all {RuleCounter.count} rules had run: launch each bucket in "
        "_gradient_ready as soon as its last gradient is final, not when backward ends")


def test_sharded_optimizer_on_one_rank_is_adamw():
    start = np.random.default_rng(1).normal(size=(3, 2))
    p, q = Tensor(start.copy(), requires_grad=True), Tensor(start.copy(), requires_grad=True)
    zero, plain = ShardedOptimizer([p], lambda ps: AdamW(ps, lr=0.1), World(None)), AdamW([q], lr=0.1)
    for step in range(3):
        p.grad = q.grad = Tensor(np.full((3, 2), step + 1.0))
        zero.step()
        plain.step()
    assert np.array_equal(p.data, q.data), (
        f"after 3 steps on one rank ShardedOptimizer gives {p.data.ravel()[:3]}, AdamW {q.data.ravel()[:3]}: "
        "step the own share (self.optimizer.step()), then broadcast each parameter from its owner")
    assert zero.state_bytes() == plain.state_nbytes() == 2 * start.nbytes


def test_all_reduce_mistake_names_the_classic_mistakes():
    mine = np.arange(1.0, 8.0)  # no zeros: a zero is its own sum
    want = 3 * mine  # three ranks; chunks of 7 over 3: [0, 2), [2, 4), [4, 7); rank 0 completes chunk 1
    assert "nothing was summed" in all_reduce_mistake(mine, want, mine, 3, 0)
    dropped = want.copy()
    dropped[6] = mine[6]  # 7 // 3 = 2-element chunks leave element 6 out
    assert "chunk off by one" in all_reduce_mistake(dropped, want, mine, 3, 0)
    no_gather = mine.copy()
    no_gather[2:4] = want[2:4]
    assert "all-gather is missing" in all_reduce_mistake(no_gather, want, mine, 3, 0)
    other = want.copy()
    other[0] += 1
    assert "wrong at 1 of 7 places, first at 0 (chunk 0)" in all_reduce_mistake(other, want, mine, 3, 0)
