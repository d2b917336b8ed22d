"""Module 19, graded cases: bootstrap intervals, measure() on a scripted clock, compare and
ranking, the loss of each position from logits, language-model window losses, accuracy, the
Pareto front.

Nothing is timed for real: measure() gets a clock that moves only when a scripted variant
runs, so readings, the order of the calls and every interval are exact. The bootstrap uses
the documented recipe with a seed. Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.layers import Dropout, Linear, Module
from tinytorch.core.tensor import Tensor
from tinytorch.perf.benchmarking import (Measurement, accuracy, bootstrap_ci, compare, lm_validation_loss,
                                         lm_window_losses, measure, paired_difference, pareto_front, ranking,
                                         token_losses)
from tinytorch.text.embeddings import embedding


def _bootstrap(rng):
    readings = np.concatenate([rng.normal(10.0, 0.5, 24), [40.0]])  # one descheduled reading
    return {"ci95": list(bootstrap_ci(readings, seed=7)), "ci80": list(bootstrap_ci(readings, 0.8, 500, seed=3)),
            "again": list(bootstrap_ci(readings, seed=7)), "one": list(bootstrap_ci([2.5])),
            "empty": raised(bootstrap_ci, []), "bad_confidence": raised(bootstrap_ci, readings, 1.0)}


class ScriptedClock:
    """A clock that moves only when a variant runs: variant `name` takes durations[name][k] on its k-th call."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 0.0, durations, []

    def __call__(self):
        return self.now

    def variant(self, name):
        def run():
            k = sum(1 for c in self.calls if c == name)
            self.calls.append(name)
            self.now += self.durations[name][min(k, len(self.durations[name]) - 1)]
        return run


def _measure(rng):
    durations = {name: [5.0, 4.0] + list(rng.uniform(low, low * 1.1, 8))
                 for name, low in (("fast", 1.0), ("slow", 2.0), ("middle", 1.5))}
    clock = ScriptedClock(durations)
    results = measure({name: clock.variant(name) for name in durations}, repeats=6, warmup=2,
                      clock=clock, sync=lambda: None)
    synced = ScriptedClock({"q": [1.0]})

    def sync():  # queued device work: it finishes only when waited for
        synced.now += 0.25
    waited = measure({"q": synced.variant("q")}, repeats=3, warmup=0, clock=synced, sync=sync)["q"].samples
    return {"names": list(results), "calls": clock.calls, "fast": results["fast"].samples, "synced": waited,
            "slow_median": results["slow"].median, "middle_interval": [results["middle"].low, results["middle"].high],
            "ranking": ranking(results), "no_variants": raised(measure, {})}


def _compare(rng):
    a = Measurement("a", rng.normal(1.0, 0.01, 15))
    b = Measurement("b", rng.normal(1.2, 0.01, 15))
    close = Measurement("close", rng.normal(1.0, 0.01, 15))
    rate_a = Measurement("rate_a", rng.normal(500.0, 2.0, 15), unit="tokens/s")
    rate_b = Measurement("rate_b", rng.normal(450.0, 2.0, 15), unit="tokens/s")
    loss_a = Measurement("loss_a", rng.normal(2.0, 0.01, 15), unit="nats")
    loss_b = Measurement("loss_b", rng.normal(2.5, 0.01, 15), unit="nats")
    results = [compare(a, b), compare(b, a), compare(a, close), compare(rate_b, rate_a), compare(loss_a, loss_b)]
    scale = float(rng.uniform(1.0, 2.0))  # a wide interval that overlaps a narrow one far from its median
    wide = Measurement("wide", scale * np.linspace(1.0, 2.0, 15))
    narrow = Measurement("narrow", scale * np.linspace(1.66, 1.74, 15))
    return {"overlap_off_median": compare(wide, narrow).verdict,
            "ratios": [r.ratio for r in results], "verdicts": [r.verdict for r in results],
            "winners": [str(r.winner) for r in results], "differences": [r.difference for r in results],
            "rates_ranked": ranking([rate_b, rate_a]), "units": raised(compare, a, rate_a)}


class Bigram(Module):
    """A toy language model: logits = dropout(table[x]); notes whether each call recorded a graph."""

    def __init__(self, rng, vocab=6):
        super().__init__()
        self.table = Tensor(rng.standard_normal((vocab, vocab)) * 2, requires_grad=True)
        self.drop = Dropout(0.5, seed=int(rng.integers(1000)))
        object.__setattr__(self, "recorded", [])

    def forward(self, x):
        logits = self.drop(embedding(self.table, x))
        self.recorded.append(logits._node is not None)
        return logits, None


def _token_losses(rng):
    logits = rng.standard_normal((2, 5, 7)) * 3
    targets = rng.integers(0, 7, (2, 5))
    large = logits * 300  # values in the thousands: exp needs the max subtracted first
    rows = rng.standard_normal((4, 3))  # any leading shape: (N, V) rows give (N,)
    return {"losses": token_losses(logits, targets), "large": token_losses(large, targets),
            "rows": token_losses(rows, rng.integers(0, 3, 4)), "shapes": raised(token_losses, logits, targets[0])}


def _token_losses_float64(rng):
    """float32 logits near 3000: float32 arithmetic is off by about 1e-5 of the loss, float64 by 1e-15."""
    precise = (3000.0 + rng.standard_normal((3, 4, 9))).astype(np.float32)
    return {"losses": token_losses(precise, rng.integers(0, 9, (3, 4)))}


def _lm_losses(rng):
    model = Bigram(rng)
    tokens = rng.integers(0, 6, 47)  # (47 - 1) // 4 = 11 windows: batches of 4, 4, 3
    losses = lm_window_losses(model, tokens, context=4, batch_size=4)
    first_two = lm_window_losses(model, tokens, context=4, batch_size=4, max_batches=2)
    exact = lm_window_losses(model, rng.integers(0, 6, 48), context=4, batch_size=5)  # 4 divides 48: 11 windows
    return {"losses": losses, "first_two": first_two, "mean": lm_validation_loss(model, tokens, 4, batch_size=4),
            "exact_multiple": exact,
            "recorded": model.recorded, "training_after": model.training,
            "too_short": raised(lm_window_losses, model, tokens[:4], 4)}


def _accuracy_and_pairs(rng):
    model = Linear(3, 4, rng=rng, dtype=np.float64)
    X, y = rng.standard_normal((10, 3)), rng.integers(0, 4, 10)
    a, b = rng.normal(2.0, 0.3, 30), rng.normal(2.1, 0.3, 30)
    return {"accuracy": accuracy(model, X, y, batch_size=4), "one_batch": accuracy(model, Tensor(X), y),
            "paired": list(paired_difference(a, b, seed=5)),
            "mismatch": raised(accuracy, model, X, y[:9])}


def _pareto(rng):
    rows = [{"name": "base", "acc": 0.90, "ms": 10.0, "mb": 40.0},
            {"name": "int8", "acc": 0.89, "ms": 6.0, "mb": 10.0},
            {"name": "int8-copy", "acc": 0.89, "ms": 6.0, "mb": 10.0},  # identical rows: neither dominates
            {"name": "pruned", "acc": 0.85, "ms": 9.0, "mb": 30.0},      # dominated by int8
            {"name": "big", "acc": 0.93, "ms": 20.0, "mb": 80.0},
            {"name": "worse", "acc": 0.80, "ms": 25.0, "mb": 90.0}]
    losses = [{"name": n, "loss": float(l), "ms": float(m)} for n, l, m in
              zip("abcde", rng.uniform(1, 3, 5), rng.uniform(1, 10, 5))]
    return {"accuracy_front": [r["name"] for r in pareto_front(rows, "acc", ["ms", "mb"], higher_quality_is_better=True)],
            "as_loss_front": [r["name"] for r in pareto_front(rows, "acc", ["ms", "mb"])],
            "loss_front": [r["name"] for r in pareto_front(losses, "loss", ["ms"])],
            "missing": raised(pareto_front, rows, "acc", ["gb"])}


def _compare_exact(rng):
    """Two identical exact measurements (every reading equal: intervals [c, c]) touch, so they overlap."""
    value = float(rng.uniform(0.5, 2.0))
    a = Measurement("exact_a", np.full(9, value))
    b = Measurement("exact_b", np.full(9, value))
    c = Measurement("exact_c", np.full(9, 2 * value))
    results = [compare(a, b), compare(b, a), compare(a, c)]
    return {"verdicts": [r.verdict for r in results], "ratios": [r.ratio for r in results]}


CASES = {
    "bootstrap": (_bootstrap, "bootstrap_ci of the median, with replacement, seeded, half the tail each side"),
    "measure": (_measure, "measure() on a scripted clock: warm-up untimed, rounds rotated, readings and intervals"),
    "compare-exact": (_compare_exact, "compare: two identical exact measurements make no measurable difference"),
    "compare": (_compare, "compare: ratio a/b, verdicts for times, rates and other units, overlapping intervals"),
    "token-losses": (_token_losses, "token_losses: the target's logit, logsumexp with the max shift, any leading shape"),
    "token-losses-float64": (_token_losses_float64, "token_losses of float32 logits computes in float64",
                             {"rtol": 1e-9, "atol": 0.0}),
    "lm-losses": (_lm_losses, "lm_window_losses: non-overlapping windows, shifted targets, one loss per window, eval mode"),
    "accuracy-and-pairs": (_accuracy_and_pairs, "accuracy over batches (a short last one) and the paired difference"),
    "pareto": (_pareto, "pareto_front with higher-is-better accuracy, identical rows, and a loss"),
}
