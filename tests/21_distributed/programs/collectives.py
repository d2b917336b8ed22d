"""Every rank: ring_all_reduce, broadcast and all_gather against the sums they must give.

Prints `RESULT {json}`: problems (each naming what is wrong and its likely cause), bytes sent per
all-reduce, and a digest of the float results (every rank must end with the same bits).
"""
import hashlib
import json

import numpy as np

from tinytorch.perf.distributed import all_gather, all_reduce_mistake, broadcast, init_world, ring_all_reduce

world = init_world()
N, rank = world.size, world.rank
SIZES = (0, 1, 2, 7, 1000, 1001, 1200)
DTYPES = ("float32", "float64", "int32", "int64")


def values(r, n, dtype):
    """Rank r's array: integers up to about 1e5, exact in every dtype; floats with fractions."""
    base = np.arange(n) * 7 + r * 1000 + 3
    return (base + 0.25 * (r + 1)).astype(dtype) if dtype.startswith("float") else base.astype(dtype)


problems, sent, digest = [], {}, hashlib.sha256()
for n in SIZES:
    for dtype in DTYPES:
        mine = values(rank, n, dtype)
        keep = mine.copy()
        want = sum(values(r, n, dtype) for r in range(N)).astype(dtype)
        before = world.bytes_sent
        try:
            got = ring_all_reduce(mine, world)
        except (ValueError, IndexError) as err:
            problems.append(f"ring_all_reduce n={n} {dtype} raised {type(err).__name__}: {err} "
                            "(chunk off by one? chunk i is flat[i·n//N : (i+1)·n//N])")
            continue
        sent[f"{n}/{dtype}"] = world.bytes_sent - before
        label = f"ring_all_reduce of {n} {dtype} on {N} ranks"
        if not np.array_equal(mine, keep):
            problems.append(f"{label} changed the caller's array: work on a copy")
        if not isinstance(got, np.ndarray) or got.shape != mine.shape or got.dtype != mine.dtype:
            problems.append(f"{label} returned {getattr(got, 'dtype', type(got))} {getattr(got, 'shape', '')}, "
                            f"want {dtype} {mine.shape}: same shape and dtype as the input")
        elif not np.array_equal(got, want):
            problems.append(f"{label}: {all_reduce_mistake(got, want, keep, N, rank)}")
        elif dtype.startswith("float"):
            digest.update(got.tobytes())

for root in range(N):
    mine = np.full((2, 3), 10 * rank + root, dtype=np.int32)
    got = broadcast(mine, world, root=root)
    if not np.array_equal(got, np.full((2, 3), 10 * root + root)):
        problems.append(f"broadcast from root {root} gave {np.asarray(got).ravel()[:1].tolist()}, want rank {root}'s "
                        f"value {10 * root + root}: broadcast from the wrong root (send from `root`, receive from `root`)")

stacked = all_gather(np.array([rank, 100 + rank]), world)
want = np.array([[r, 100 + r] for r in range(N)])
if np.shape(stacked) != want.shape or not np.array_equal(stacked, want):
    problems.append(f"all_gather gave rows {np.asarray(stacked).tolist()}, want {want.tolist()}: all-gather order, "
                    "row r must be rank r's array")

print("RESULT " + json.dumps({"rank": rank, "problems": problems, "sent": sent, "digest": digest.hexdigest()}))
