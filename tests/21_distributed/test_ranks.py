"""Module 21 on 2, 3 and 4 MPI ranks (through `tito run`'s launcher, time-limited): the collectives
equal the sum for every size and dtype, the ring's bytes per rank, DDP against one process, no_sync,
ZeRO-1 against AdamW, and a failing rank that fails the run instead of hanging it."""
import numpy as np
import pytest

from distributed_ranks import launch, problems, requires_mpi, results_of

pytestmark = requires_mpi


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_collectives_are_exact(ranks):
    rows = results_of("collectives", ranks)
    found = problems(rows)
    assert not found, f"{len(found)} problems on {ranks} ranks, the first: " + "; ".join(found[:3])
    assert len({r["digest"] for r in rows}) == 1, (
        f"{ranks} ranks ended with different float results: every rank must hold the same bits "
        "(each element summed once in the reduce-scatter, then copied in the all-gather)")


def ring_bytes(n, itemsize, ranks, rank):
    """The bytes rank `rank` sends in one ring all-reduce of n elements: in each half it sends every
    chunk but one (reduce-scatter: all but chunk rank+1, all-gather: all but chunk rank+2), chunk i
    having i·n//N .. (i+1)·n//N elements. When N divides n that is exactly 2(N−1)/N·n·itemsize."""
    b = [i * n // ranks for i in range(ranks + 1)]
    size = [b[i + 1] - b[i] for i in range(ranks)]
    return (2 * n - size[(rank + 1) % ranks] - size[(rank + 2) % ranks]) * itemsize


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_ring_sends_two_n_minus_one_over_n_of_the_array(ranks):
    for row in results_of("collectives", ranks):
        nbytes = 1200 * 8  # 1200 splits evenly over 2, 3 and 4 ranks
        assert row["sent"]["1200/float64"] == 2 * (ranks - 1) * nbytes // ranks, (
            f"rank {row['rank']} sent {row['sent']['1200/float64']} bytes for a {nbytes}-byte array on {ranks} ranks, "
            f"want 2(N−1)/N·{nbytes} = {2 * (ranks - 1) * nbytes // ranks}: one chunk per step, 2(N−1) steps")
        for key, sent in row["sent"].items():
            n, dtype = key.split("/")
            want = ring_bytes(int(n), np.dtype(dtype).itemsize, ranks, row["rank"])
            assert sent == want, (f"rank {row['rank']} of {ranks}: {sent} bytes sent for {n} {dtype}, want {want} "
                                  "(every chunk but one in each half, chunk i = flat[i·n//N:(i+1)·n//N])")


@pytest.mark.parametrize("ranks", [2, 3])
def test_ddp_equals_one_process_on_the_whole_batch(ranks):
    rows = results_of("ddp", ranks)
    found = problems(rows)
    assert not found, "; ".join(found[:3])
    for row in rows:
        assert row["weights_gap"] < 1e-10, (
            f"rank {row['rank']} of {ranks}: after 5 AdamW steps the weights differ from one process on the whole "
            f"batch by {row['weights_gap']:.3g}: every .grad must be the mean over ranks when backward returns")


@pytest.mark.parametrize("ranks", [2, 3])
def test_no_sync_then_a_synced_backward(ranks):
    for row in results_of("ddp", ranks):
        assert row["no_sync_gap"] < 1e-12, (
            f"rank {row['rank']}: inside no_sync() the gradients differ from the rank's own by {row['no_sync_gap']:.3g}")
        assert row["synced_gap"] < 1e-12, (
            f"rank {row['rank']} of {ranks}: after two no_sync micro-batches and a synced one, the gradients differ "
            f"from one process accumulating every rank's micro-batches (divided by N) by {row['synced_gap']:.3g}: "
            "the synced backward must average the accumulated sums")


@pytest.mark.parametrize("ranks", [2, 3])
def test_zero1_equals_adamw_with_a_share_of_the_state(ranks):
    rows = results_of("zero", ranks)
    owners = rows[0]["owners"]
    for row in rows:
        assert row["owners"] == owners, "every rank must compute the same owners"
        assert max(row["gaps"]) == 0.0, (
            f"rank {row['rank']} of {ranks}: ZeRO-1's weights differ from AdamW's by {max(row['gaps']):.3g} "
            f"(per step {row['gaps']}); parameters {row['never_moved']} never moved: step the own share, then "
            "broadcast each parameter from its owner (wrong shard owner?)")
        assert row["state_bytes"] == row["own_state_bytes"], (
            f"rank {row['rank']}: {row['state_bytes']} bytes of optimizer state, want {row['own_state_bytes']} "
            "(AdamW's two moments of the parameters this rank owns, and no others)")
    assert sum(r["state_bytes"] for r in rows) == rows[0]["full_state_bytes"], (
        "the ranks' optimizer states must add up to AdamW's: each parameter's state on exactly one rank")
    load = [sum(s for s, o in zip(rows[0]["sizes"], owners) if o == r) for r in range(ranks)]
    assert max(load) - min(load) <= max(rows[0]["sizes"]), f"unbalanced shares {load} (bytes per rank)"


def test_a_failing_rank_fails_the_run_quickly():
    result = launch("failing", 2)
    assert result.returncode != 0 and not result.timed_out, (
        f"rank 1 raised while rank 0 waited for it: the run must fail (exit {result.returncode}, "
        f"timed out: {result.timed_out})")
    assert "rank 1 fails on purpose" in result.output
    assert result.seconds < 60, f"the failure took {result.seconds:.0f} s to end the run"
