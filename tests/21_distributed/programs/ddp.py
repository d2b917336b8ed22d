"""Every rank: DistributedDataParallel against one process on the whole batch.

1. Five AdamW steps (float64), every rank starting from different weights and training on its
   1/N of each batch, must give the weights of one process training on the whole batches.
2. no_sync: two micro-batches inside `no_sync()` leave this rank's own gradient sums; a third,
   synced backward must give the mean over ranks of (sum of three micro-batch gradients), which
   is one process accumulating the same micro-batches of all ranks, divided by N.
Prints `RESULT {json}` with the largest differences and the problems found.
"""
import json

import numpy as np

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import mse_loss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.perf.distributed import DistributedDataParallel, init_world

world = init_world()
N, rank = world.size, world.rank
ROWS = 4  # per rank


def model(seed):
    return Sequential(Linear(3, 8, seed=seed, dtype="float64"), ReLU(), Linear(8, 5, seed=seed + 1, dtype="float64"),
                      ReLU(), Linear(5, 2, seed=seed + 2, dtype="float64"))


def gap(ps, qs):
    return max(float(np.max(np.abs(p - q))) for p, q in zip(ps, qs))


rng = np.random.default_rng(0)
batches = [(rng.normal(size=(ROWS * N, 3)), rng.normal(size=(ROWS * N, 2))) for _ in range(5)]
mine = slice(ROWS * rank, ROWS * (rank + 1))
problems = []

# 1. DDP over N ranks == one process on the whole batch
single = model(0)
opt = AdamW(single.parameters(), lr=0.05, weight_decay=0.1)
for x, y in batches:
    opt.zero_grad()
    mse_loss(single(Tensor(x)), Tensor(y)).backward()
    opt.step()
ddp = DistributedDataParallel(model(0 if rank == 0 else 50 * rank), world, bucket_bytes=200)
start_gap = gap([p.data for p in ddp.parameters()], [p.data for p in model(0).parameters()])
if start_gap != 0:
    problems.append(f"after construction the weights differ from rank 0's by {start_gap:.3g}: "
                    "rank 0's parameters must be broadcast to every rank")
opt = AdamW(ddp.parameters(), lr=0.05, weight_decay=0.1)
first_grads = None
for x, y in batches:
    opt.zero_grad()
    mse_loss(ddp(Tensor(x[mine])), Tensor(y[mine])).backward()
    if first_grads is None:
        first_grads = [p.grad.data.copy() for p in ddp.parameters()]
    opt.step()
weights_gap = gap([p.data for p in ddp.parameters()], [p.data for p in single.parameters()])

# the first step's gradient against the whole batch's, to name the cause when they differ
reference = model(0)
mse_loss(reference(Tensor(batches[0][0])), Tensor(batches[0][1])).backward()
whole = [p.grad.data for p in reference.parameters()]
grad_gap = gap(first_grads, whole)
if grad_gap > 1e-12:
    times_n = gap(first_grads, [g * N for g in whole])
    if times_n < 1e-12:
        problems.append(f"the gradients are {N}× the whole batch's: the sum over ranks, not the mean "
                        "(missing divide by N in _write_mean)")
    else:
        problems.append(f"the first gradients differ from the whole batch's by {grad_gap:.3g}")

# 2. no_sync: accumulate two micro-batches locally, then one synced backward
acc = DistributedDataParallel(model(7), world, bucket_bytes=200)
micro = [(rng.normal(size=(ROWS * N, 3)), rng.normal(size=(ROWS * N, 2))) for _ in range(3)]
with acc.no_sync():
    for x, y in micro[:2]:
        mse_loss(acc(Tensor(x[mine])), Tensor(y[mine])).backward()
local = [p.grad.data.copy() for p in acc.parameters()]
own = model(7)  # this rank's own two micro-batches, one process
for x, y in micro[:2]:
    mse_loss(own(Tensor(x[mine])), Tensor(y[mine])).backward()
no_sync_gap = gap(local, [p.grad.data for p in own.parameters()])
if no_sync_gap > 1e-12:
    problems.append(f"inside no_sync() the gradients differ from this rank's own sums by {no_sync_gap:.3g}: "
                    "no_sync must leave each rank's own gradients")
x, y = micro[2]
mse_loss(acc(Tensor(x[mine])), Tensor(y[mine])).backward()
everyone = model(7)  # one process: every rank's three micro-batches, each loss a mean over ROWS rows
for x, y in micro:
    for r in range(N):
        part = slice(ROWS * r, ROWS * (r + 1))
        mse_loss(everyone(Tensor(x[part])), Tensor(y[part])).backward()
synced_gap = gap([p.grad.data for p in acc.parameters()], [p.grad.data / N for p in everyone.parameters()])

print("RESULT " + json.dumps({"rank": rank, "weights_gap": weights_gap, "no_sync_gap": no_sync_gap,
                              "synced_gap": synced_gap, "buckets": ddp.buckets, "problems": problems}))
