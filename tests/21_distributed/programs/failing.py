"""Rank 1 raises while rank 0 waits for a message from it: the run must fail, quickly, not hang."""
import numpy as np

from tinytorch.perf.distributed import init_world

world = init_world()
if world.rank == 1:
    raise RuntimeError("rank 1 fails on purpose")
world.recv(np.zeros(1), 1)  # never arrives
