"""The distributed benchmark runs (a smoke run: two small sizes, few repeats, on 1, 2 and 4 MPI ranks).
Named to run after the module's own tests, so a mistake is reported by the test that names it, not
by the benchmark. Its own checks stop it on a wrong result: the ring's sum against MPI's Allreduce,
and the bytes each rank sent against 2(N−1)/N of the array."""
import re

import pytest

from benchmark_runs import check_benchmark
from distributed_ranks import requires_mpi


@pytest.mark.slow
@requires_mpi
def test_distributed_benchmark_quick():
    out = check_benchmark("distributed.py", [
        "1. all-reduce (median; slowest rank)", "2. α–β fit: α = ", "2. one message between two ranks",
        "3. training step of the milestone's GPT", "4. optimizer state per rank",
        "5. MODEL (not measured): ring all-reduce on a cluster",
        "Inputs (published figures and assumptions, not measured here): network InfiniBand 4x EDR (100 Gb/s per link)"],
        timeout=900)
    for ranks, ratio in ((2, "1.000"), (4, "1.500")):
        assert f"ring all-reduce on {ranks} ranks: every rank sent {ratio} × the array at every size" in out, out
    assert "ZeRO-1 on 1 ranks: the ranks hold 1.000 × AdamW's state together, the largest share 1.000" in out, out
    for ranks in (2, 4):  # balanced shares: together the whole state once, none above 1/N by much
        found = re.search(rf"ZeRO-1 on {ranks} ranks: the ranks hold ([0-9.]+) × AdamW's state together, "
                          r"the largest share ([0-9.]+) of it", out)
        assert found, out
        together, largest = map(float, found.groups())
        assert together == 1.0 and largest <= 1 / ranks + 0.05, found.group(0)
