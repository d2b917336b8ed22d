"""Module 20, graded cases: held-out windows, the quality bar, the greedy check, the access
rules, and the leaderboard's ranking. (The judge's loss is given code over module 19's
token_losses, graded there.)

The access rules are checked on paths under a folder that does not exist (os.path.realpath
needs no file), and only the kind of each verdict is compared (the text before its ":"), so
nothing depends on the machine's folders. Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.perf.olympics import (QUALITY_MARGIN, Row, access_violation, greedy_consistent, heldout_windows,
                                     quality_verdict, rank_entries)

ROOT = "/nonexistent-tinytorch-grading-case"
WORK = ROOT + "/work"


def _windows(rng):
    tokens = rng.integers(0, 50, 40)
    inputs, targets = heldout_windows(tokens, context=6, count=9, seed=11)
    tight_inputs, tight_targets = heldout_windows(np.arange(8), context=7, count=5, seed=2)  # one start only: 0
    many = heldout_windows(rng.integers(0, 9, 12), context=3, count=400, seed=4)[1]
    return {"inputs": inputs, "targets": targets, "tight_inputs": tight_inputs, "tight_targets": tight_targets,
            "many_targets_sum": int(many.sum()), "again": heldout_windows(tokens, 6, 9, seed=11)[0],
            "too_short": raised(heldout_windows, np.arange(5), 5, 1),
            "int32_dtype": str(heldout_windows(tokens.astype(np.int32), 6, 3, seed=1)[0].dtype)}


def _quality_bar(rng):
    baseline = float(rng.uniform(1.8, 2.2))
    at_bar = baseline + QUALITY_MARGIN
    losses = [baseline - 0.01, baseline, at_bar, at_bar + 0.001, float("nan")]
    return {"passes": [quality_verdict(loss, baseline) == "" for loss in losses],
            "custom_margin": quality_verdict(baseline + 0.2, baseline, margin=0.25) == ""}


def _greedy(rng):
    logits = rng.standard_normal((5, 6))
    logits[1, [2, 4]] = logits[1].max() + 1.0  # a tie: both tokens are greedy
    chosen = np.array([int(np.argmax(logits[0])), 4, 0, int(np.argmax(logits[3])), 5])
    near = logits.copy()
    near[3, 1] = near[3].max() - 5e-5  # within atol of the maximum
    top = 1e5 + float(rng.uniform(0, 100))  # large logits: float32 rounding there exceeds atol alone
    large = np.array([[top, top - 0.05, 0.0], [top, top - 0.5, 1.0]])
    return {"consistent": greedy_consistent(logits, chosen), "near": greedy_consistent(near, [1, 2, 0, 1, 3]),
            "large": greedy_consistent(large, [1, 1]),
            "bad_ids": raised(greedy_consistent, logits, [0, 1, 2, 3, 6])}


def _access(rng):
    checkpoint = WORK + "/model.npz"
    allowed = [ROOT + "/data", ROOT + "/python"]
    cases = [(WORK + "/model.npz", False), (WORK + "/notes.txt", False), (WORK + "/other.npz", False),
             (WORK + "/OTHER.NPZ", False), (WORK + "/sub/w.SafeTensors", False), (WORK + "-evil/x.txt", False),
             (WORK + "/../other/x.txt", False), (ROOT + "/data/train.txt", False),
             (ROOT + "/python/site.py", True), (WORK + "/out.txt", True), ("/etc/passwd", False),
             (WORK, False), (ROOT + "/python/numpy/tests/data.npz", False)]
    verdicts = [access_violation(path, WORK, checkpoint, allowed, writing=writing) for path, writing in cases]
    return {"kinds": [v.split(":")[0] if v else "ok" for v in verdicts]}


def _rank(rng):
    def row(name, score, spread, reason="", key=None):
        return Row(name, score, score - spread, score + spread, reason=reason, key=key or name[::-1])

    rows = [row("a", 10.0, 0.1), row("b", 12.0, 0.5), row("c", 12.3, 0.5), row("d", 9.0, 0.0, "too slow"),
            row("e", 15.0, 0.0), row("f", 15.0, 0.0, key="0"), row("g", 20.0, 1.0), row("h", 1.0, 0.0, "peeked")]
    lower = rank_entries([Row(**vars(r)) for r in rows], higher_is_better=False)
    higher = rank_entries([Row(**vars(r)) for r in rows], higher_is_better=True)
    chain = rank_entries([row("x", 100.0, 6.0), row("y", 90.0, 6.0), row("z", 80.0, 6.0)], higher_is_better=True)
    return {"chain_ranks": [r.rank for r in chain],
            "lower_names": [r.name for r in lower], "lower_ranks": [-1 if r.rank is None else r.rank for r in lower],
            "higher_names": [r.name for r in higher], "higher_ranks": [-1 if r.rank is None else r.rank for r in higher]}


CASES = {
    "windows": (_windows, "heldout_windows: seeded starts, targets shifted by one, never past the end"),
    "quality-bar": (_quality_bar, "quality_verdict: at most baseline + margin passes, exactly at the bar too"),
    "greedy": (_greedy, "greedy_consistent accepts ties and values within atol"),
    "access": (_access, "access_violation: resolved paths, folder separators, weight suffixes any case, no writes"),
    "rank": (_rank, "rank_entries: both directions, overlapping intervals share a rank, competition ranks, keys"),
}
