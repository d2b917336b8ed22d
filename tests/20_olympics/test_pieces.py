"""Module 20, sections 1-6: the judge's pieces on hand-computed values (fast; each names the cause)."""
import math

import numpy as np
import pytest

from tinytorch.perf.olympics import (EVENTS, Row, access_violation, greedy_consistent, heldout_windows,
                                     leaderboard_markdown, loss_from_logits, quality_verdict, rank_entries)


# ---- heldout_windows -----------------------------------------------------------------------------------------------
def test_windows_are_shifted_by_one():
    x, y = heldout_windows(np.arange(50), 7, 30, seed=1)
    assert x.shape == y.shape == (30, 7) and x.dtype == y.dtype == np.int64, f"got {x.shape} {x.dtype}, {y.shape} {y.dtype}"
    assert np.array_equal(y, x + 1), "the targets are not shifted by one: targets[i] = tokens[s+1 : s+context+1]"
    assert np.array_equal(np.diff(x, axis=1), np.ones((30, 6), dtype=np.int64)), "each window is consecutive tokens"


def test_windows_are_the_same_every_call():
    a = heldout_windows(np.arange(1000), 8, 20, seed=5)[0]
    b = heldout_windows(np.arange(1000), 8, 20, seed=5)[0]
    assert np.array_equal(a, b), "not the same windows for the same seed: draw the starts from np.random.default_rng(seed)"
    expected = np.random.default_rng(5).integers(0, 1000 - 8, size=20)
    assert np.array_equal(a[:, 0], expected), \
        "the starts must be np.random.default_rng(seed).integers(0, len(tokens) - context, size=count)"


def test_windows_reach_the_last_token_but_never_past_it():
    tokens = np.arange(12)
    try:
        x, y = heldout_windows(tokens, 11, 5)
    except IndexError as err:
        pytest.fail(f"a window ran past the end ({err}): starts go up to len - context - 1 "
                    "(integers(0, len(tokens) - context): the high end is excluded)")
    assert np.array_equal(y, np.tile(np.arange(1, 12), (5, 1))), \
        "12 tokens hold one window of 11 (+1 target): every start is 0 (starts run up to len - context - 1)"
    with pytest.raises(ValueError, match="no window"):
        heldout_windows(np.arange(5), 5, 1)


# ---- loss_from_logits ----------------------------------------------------------------------------------------------
def test_loss_is_the_targets_negative_log_probability():
    logits = np.array([[[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]]])
    targets = np.array([[0, 2]])
    row = lambda z, t: math.log(sum(math.exp(v) for v in z)) - z[t]
    expected = (row([1, 2, 3], 0) + row([0, 0, 5], 2)) / 2
    got = loss_from_logits(logits, targets)
    assert abs(got - expected) < 1e-12, \
        f"expected {expected:.6f}, got {got:.6f}: the mean over positions of logsumexp(row) - row[TARGET] (the TARGET's logit)"
    assert isinstance(got, float), f"return a Python float, got {type(got)}"


def test_loss_is_the_mean_over_every_position():
    logits = np.zeros((3, 4, 5))
    logits[0, 0, 1] = 4.0
    targets = np.zeros((3, 4), dtype=np.int64)
    one = math.log(4 + math.exp(4))
    expected = (one + 11 * math.log(5)) / 12
    got = loss_from_logits(logits, targets)
    assert abs(got - expected) < 1e-12, f"expected {expected:.6f}, got {got:.6f}: the mean over all B·T positions"


def test_loss_does_not_overflow_on_large_logits():
    logits = np.array([[[800.0, 0.0, -800.0]]], dtype=np.float32)
    got = loss_from_logits(logits, np.array([[1]]))
    assert math.isfinite(got) and abs(got - 800.0) < 1e-9, \
        f"logits 800, 0, -800, target 1: expected 800, got {got}: subtract each row's max before exp (it overflows)"


def test_loss_is_computed_in_float64():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 64, 65)).astype(np.float32) * 3
    targets = rng.integers(0, 65, size=(4, 64))
    z = logits.astype(np.float64)
    expected = float(np.mean(np.log(np.exp(z).sum(-1)) - np.take_along_axis(z, targets[..., None], -1)[..., 0]))
    got = loss_from_logits(logits, targets)
    assert abs(got - expected) < 1e-12, f"expected {expected!r}, got {got!r}: compute in float64, not in the logits' float32"


def test_loss_refuses_bad_input():
    with pytest.raises(ValueError, match="inf or nan"):
        loss_from_logits(np.array([[[np.inf, 0.0]]]), np.array([[0]]))
    with pytest.raises(ValueError, match="targets"):
        loss_from_logits(np.zeros((1, 2, 3)), np.array([[0, 3]]))


# ---- quality_verdict -----------------------------------------------------------------------------------------------
def test_quality_bar_adds_the_margin():
    reason = quality_verdict(1.625, 1.5, 0.25)
    assert reason == "", (
        f"1.625 is under the bar 1.5 + 0.25 = 1.75, got {reason!r}: "
        + ("your bar is the baseline alone: the margin was left out (bar = baseline + margin)"
           if "quality bar 1.5000" in reason else "the bar is baseline + margin (the margin added, not subtracted)"))
    reason = quality_verdict(1.875, 1.5, 0.25)
    assert reason.startswith("validation loss 1.8750 is above the quality bar 1.7500") and "by 0.1250" in reason, \
        f"1.875 is above the bar 1.75: expected the reason with the loss, the bar and the miss, got {reason!r}"
    assert quality_verdict(float("nan"), 1.5) != "", "a nan loss is never under the bar"


def test_quality_bar_at_the_bar_passes():
    reason = quality_verdict(1.75, 1.5, 0.25)
    assert reason == "", (f"a loss exactly AT the bar (1.5 + 0.25) passes, got {reason!r}: "
                          + ("'at most' is <=, not <" if "quality bar 1.7500" in reason else "the bar is baseline + margin"))
    assert quality_verdict(1.5, 1.5) == "", "the baseline's own loss passes"


# ---- greedy_consistent ---------------------------------------------------------------------------------------------
def test_greedy_accepts_ties_and_refuses_others():
    logits = np.array([[1.0, 3.0, 3.0], [0.0, -1.0, 2.0], [7.0, 6.9999999, 0.0]])
    got = greedy_consistent(logits, np.array([2, 0, 1]))
    assert got.dtype == bool and got.shape == (3,), f"expected a bool array of shape (3,), got {got.dtype} {got.shape}"
    assert got[0], "tokens 1 and 2 tie at 3.0: a tie is a greedy choice too (argmax picks the first; compare with the max)"
    assert not got[1], "token 0 (0.0) is below the row's max (2.0): not a greedy choice"
    assert got[2], "a logit within atol of the max is a greedy choice (a KV cache adds in a different order)"


def test_greedy_checks_each_row_against_its_own_max():
    logits = np.array([[5.0, 0.0], [0.0, 1.0]])
    got = greedy_consistent(logits, np.array([0, 1]))
    assert got.tolist() == [True, True], f"each row against ITS OWN maximum (axis=1), got {got.tolist()}"
    got = greedy_consistent(logits, np.array([1, 0]))
    assert got.tolist() == [False, False], f"the CHOSEN token's logit, per row, got {got.tolist()}"


# ---- access_violation ----------------------------------------------------------------------------------------------
WORK, CKPT = "/tmp/olympics/entry/work", "/tmp/olympics/entry/work/weights.npz"


def test_access_inside_the_folder():
    assert access_violation(WORK + "/submission.py", WORK, CKPT) == "", "a file in the folder may be read"
    assert access_violation(CKPT, WORK, CKPT) == "", "the declared checkpoint may be read"
    assert access_violation(WORK + "/notes.txt", WORK, CKPT, writing=True) == "", "a file in the folder may be written"


def test_access_other_weights_in_the_folder():
    for name in ("spare.npz", "teacher.pt", "Model.SafeTensors", "sub/x.npy"):
        got = access_violation(f"{WORK}/{name}", WORK, CKPT)
        assert got == f"loads weights other than its declared checkpoint: {WORK}/{name}", \
            f"{name}: weights other than the declared checkpoint (suffixes case-insensitive), got {got!r}"


def test_access_prefix_is_not_a_folder():
    got = access_violation(WORK + "-evil/model.npz", WORK, CKPT)
    assert got.startswith("reads outside its folder"), \
        f"{WORK}-evil is NOT inside {WORK}: compare with the folder + os.sep, got {got!r}"


def test_access_resolves_dotdot():
    got = access_violation(WORK + "/../../other/work/weights.npz", WORK, CKPT)
    assert got == "reads outside its folder: /tmp/olympics/other/work/weights.npz", \
        f"work/../.. leaves the folder: resolve the path with os.path.realpath first, got {got!r}"


def test_access_allowed_folders_are_read_only():
    assert access_violation("/opt/python/lib/os.py", WORK, CKPT, allowed=["/opt/python"]) == "", \
        "a file in an allowed folder (Python's installation) may be read"
    got = access_violation("/opt/python/lib/os.py", WORK, CKPT, allowed=["/opt/python"], writing=True)
    assert got == "writes outside its folder: /opt/python/lib/os.py", f"allowed folders are never written, got {got!r}"
    assert access_violation("/etc/passwd", WORK, CKPT, allowed=["/opt/python"]).startswith("reads outside its folder")


# ---- rank_entries --------------------------------------------------------------------------------------------------
def _row(name, score, spread=0.0, reason="", key=None):
    return Row(name, score, score - spread, score + spread, reason, key or name)


def test_rank_direction_follows_the_event():
    smallest = rank_entries([_row("a", 3.0), _row("b", 1.0), _row("c", 2.0)], EVENTS["smallest"].higher_is_better)
    assert [r.name for r in smallest] == ["b", "c", "a"], \
        f"smallest: fewest bytes first (ascending), got {[r.name for r in smallest]}"
    fastest = rank_entries([_row("a", 3.0), _row("b", 1.0), _row("c", 2.0)], EVENTS["generation"].higher_is_better)
    assert [r.name for r in fastest] == ["a", "c", "b"], \
        f"generation: most tokens/s first (descending when higher_is_better), got {[r.name for r in fastest]}"


def test_rank_disqualified_last_without_rank():
    rows = rank_entries([_row("dq", 1.0, reason="above the bar"), _row("ok", 5.0)], higher_is_better=False)
    assert [(r.name, r.rank) for r in rows] == [("ok", 1), ("dq", None)], \
        f"a disqualified entry is never ranked, whatever its score: expected ok 1, dq None, got {[(r.name, r.rank) for r in rows]}"


def test_rank_overlapping_intervals_share_a_rank():
    rows = rank_entries([_row("a", 100, 5), _row("b", 97, 5), _row("c", 80, 2), _row("d", 60, 2)], higher_is_better=True)
    assert [r.rank for r in rows] == [1, 1, 3, 4], \
        f"a and b overlap: they share rank 1, and c is 3rd (competition ranking 1, 1, 3, 4), got {[r.rank for r in rows]}"
    chain = rank_entries([_row("a", 100, 3), _row("b", 95, 3), _row("c", 90, 3)], higher_is_better=True)
    assert [r.rank for r in chain] == [1, 1, 1], \
        f"b overlaps a and c overlaps b: one group (compare each row with the row just above it), got {[r.rank for r in chain]}"


def test_rank_never_depends_on_the_name():
    first = rank_entries([_row("alpha", 10, key="k2"), _row("beta", 10, key="k1")], higher_is_better=False)
    second = rank_entries([_row("zulu", 10, key="k2"), _row("beta", 10, key="k1")], higher_is_better=False)
    assert [r.key for r in first] == [r.key for r in second] == ["k1", "k2"], \
        "exact ties are ordered by key (the content digest), never by the entry's name"


# ---- leaderboard_markdown ------------------------------------------------------------------------------------------
def test_bytes_are_exact_and_a_single_timing_is_one_reading():
    sizes = leaderboard_markdown(EVENTS["smallest"], [Row("int8", 876464.0, 876464.0, 876464.0, rank=1,
                                                          extra={"val_loss": 1.8792})], baseline_loss=1.8793)
    assert "| 1 | int8 | 876,464 | exact | 1.8792 | ok |" in sizes, f"a byte count is exact:\n{sizes}"
    times = leaderboard_markdown(EVENTS["speedrun"], [Row("fp32", 125.2, 125.2, 125.2, rank=1,
                                                          extra={"val_loss": 1.8856})], target_loss=1.95)
    assert "| 1 | fp32 | 125.20 | one reading | 1.8856 | ok |" in times, f"one timed run is one reading:\n{times}"
    rates = leaderboard_markdown(EVENTS["generation"], [Row("fused", 453.1, 451.0, 455.5, rank=1)], baseline_loss=1.88)
    assert "| 1 | fused | 453.10 | 451.00 – 455.50 | — | ok |" in rates, f"a measured interval is shown:\n{rates}"


def test_train_recipe_in_parts_follows_the_whole_batch():
    """train_recipe with module 18's ThreadedDataParallel takes the same steps as without (float64,
    to rounding): the parts' gradients add up to the batch's."""
    from tinytorch.models.transformer import GPT
    from tinytorch.perf.acceleration import ThreadedDataParallel
    from tinytorch.perf.olympics import train_recipe

    ids = np.random.default_rng(0).integers(0, 16, 400)
    settings = dict(iters=4, batch=6, warmup=1, lr=3e-2)
    whole = train_recipe(GPT(16, 16, 1, 2, 8, seed=0, dtype=np.float64), ids, 60.0, **settings)
    parts = train_recipe(GPT(16, 16, 1, 2, 8, seed=0, dtype=np.float64), ids, 60.0,
                         parallel_class=lambda model: ThreadedDataParallel(model, 2), **settings)
    for (name, p), q in zip(whole.named_parameters(), parts.parameters()):
        assert np.allclose(p.data, q.data, rtol=1e-9, atol=1e-12), f"{name} differs after 4 steps"
    moved = max(np.abs(p.data - q.data).max() for p, q in
                zip(whole.parameters(), GPT(16, 16, 1, 2, 8, seed=0, dtype=np.float64).parameters()))
    assert moved > 1e-3, "the recipe did not train at all: the comparison would prove nothing"
