"""Every rank: ShardedOptimizer (ZeRO-1) against AdamW on the same gradients, five steps.

Prints `RESULT {json}`: the largest weight difference, the owners, this rank's state bytes and
the bytes of AdamW's state for its own parameters (computed here from the owners).
"""
import json

import numpy as np

from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.perf.distributed import ShardedOptimizer, init_world

world = init_world()
rng = np.random.default_rng(0)
SHAPES = [(4, 3), (3,), (3, 5), (5,), (7,), (2, 2)]
start = [rng.normal(size=s) for s in SHAPES]
steps = [[rng.normal(size=s) for s in SHAPES] for _ in range(5)]
plain = [Tensor(a.copy(), requires_grad=True) for a in start]
sharded = [Tensor(a.copy(), requires_grad=True) for a in start]
reference = AdamW(plain, lr=0.1, weight_decay=0.1)
zero = ShardedOptimizer(sharded, lambda ps: AdamW(ps, lr=0.1, weight_decay=0.1), world)
gaps = []
for grads in steps:
    for p, q, g in zip(plain, sharded, grads):
        p.grad, q.grad = Tensor(g), Tensor(g)
    reference.step()
    zero.step()
    gaps.append(max(float(np.max(np.abs(p.data - q.data))) for p, q in zip(plain, sharded)))
never_moved = [i for i, (q, a) in enumerate(zip(sharded, start)) if np.array_equal(q.data, a)]
own_state = 2 * sum(a.nbytes for a, owner in zip(start, zero.owners) if owner == world.rank)  # exp_avg, exp_avg_sq
print("RESULT " + json.dumps({"rank": world.rank, "gaps": gaps, "owners": zero.owners, "state_bytes": zero.state_bytes(),
                              "own_state_bytes": own_state, "full_state_bytes": reference.state_nbytes(),
                              "sizes": [a.nbytes for a in start], "never_moved": never_moved}))
