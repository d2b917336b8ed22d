# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 20: The TinyTorch Olympics — a judge that trusts nothing it is told
#
# > A benchmark is only as honest as the code that takes the measurement. In the capstone
# > this course is modelled on, teams type their own numbers into a JSON file. Here the judge
# > measures everything itself, on code it does not trust.
#
# Modules 14–19 gave you tools to make the Shakespeare GPT smaller (quantization, pruning,
# distillation), cheaper to train (checkpointing, mixed precision) and faster (fused ops),
# and a harness to measure all of it honestly. The Olympics put them to work in three events,
# each under one **quality bar** — validation loss at most the baseline's + `QUALITY_MARGIN` (0.05):
#
# | event | what is measured | better |
# |---|---|---|
# | `smallest` | every byte the submission ships: its checkpoint, its code and any other file | fewer |
# | `generation` | tokens per second, batch 1, 256 new greedy tokens, every answer checked | more |
# | `speedrun` | wall time of `train(time_budget_s)` from scratch, to validation loss `SPEEDRUN_TARGET` (1.95; 2 threads) | less |
#
# A submission is a folder: `submission.py` with `build_model()` (and `train(time_budget_s)`
# for the speedrun), a line `CHECKPOINT = "model.npz"` naming its weights, and that file.
# `tito olympics judge SUBMISSION...` copies each folder into a scratch folder, runs **the
# judge's own runner** there in `tito grade`'s sandbox, and talks to it over a socket. The
# submission's code shares a process with the runner, so **nothing computed in that process
# is believed**:
#
# * the runner sends back *logits* for windows of held-out text the judge picked; the judge
#   computes the loss (`loss_from_logits`, with module 19's `token_losses`);
# * the judge times generation from outside (request sent → tokens received), then checks that
#   every answer is the same and that every token of it is the greedy choice of the model's own
#   logits (your `greedy_consistent`);
# * the judge measures every byte the submission ships on the copies it made;
# * the runner's audit hook refuses every file the submission opens outside its folder and
#   every weights file but the declared checkpoint (your `access_violation`), and the
#   sandbox shows it no other folder to read from.
#
# **What you will be able to do when you finish:**
#
# * pick held-out evaluation windows that are the same in every run and never touch the
#   training text;
# * compute a language model's validation loss from raw logits with the harness of module 19,
#   and refuse logits there is nothing to score in;
# * write the quality bar and the access rule of a judge, and see each refuse a cheat;
# * rank measurements that have confidence intervals without inventing differences that
#   are noise, so that the same entries give the same ranking run after run;
# * enter the Olympics: judge the reference entries (fp32, int8, int4, pruned, ...) and
#   your own, and read what each technique really gains on this machine.
#
# **Time:** about three hours — sections 1–5 (the judge's pieces) in a first sitting, 6–7
# (the judge at work, your own entry) in a second.
#
# | section | you write | what it does |
# |---|---|---|
# | 1 | `heldout_windows` | the judge's evaluation windows: seeded, from the held-out text, targets shifted by one |
# | 2 | — (given: `loss_from_logits`) | mean of module 19's `token_losses` over (B, T) positions, after the judge's checks |
# | 3 | `quality_verdict` | the quality bar: "" or the reason a submission is disqualified |
# | 4 | `greedy_consistent` | does each generated token have the largest logit? |
# | 5 | `access_violation` | the audit hook's rule: inside the folder, and no weights but the declared ones |
# | 6 | `rank_entries` | competition ranks from intervals; overlapping intervals share a rank |
#
# The judge itself (`tito/grading/judge.py`, the sandbox, the socket and the runner) is given: it
# calls the functions you write here. The lesson runs on a tiny GPT so that it finishes in
# seconds; the full leaderboard on the Shakespeare GPT is `tito milestone run olympics`.

# %% [markdown]
# This lesson times code. NumPy's matrix products may split over several threads, and on a
# busy machine the same product can take ten times longer from one run to the next, so the
# lesson asks for one BLAS thread before NumPy starts (in Jupyter: restart the kernel before
# running the notebook from the top).

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| default_exp perf.olympics

# %%
#| export
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
import time
from typing import Any

import numpy as np

# %%
#| export
from tinytorch.core.tensor import Tensor, as_int
from tinytorch.perf.benchmarking import token_losses

# %%
from tinytorch.core.autograd import no_grad
from tinytorch.models.transformer import GPT

# %% [markdown]
# ## The events and the bar
#
# Every event has a unit and a direction. The quality margin is the issue's: a submission's
# validation loss may be at most the baseline's + 0.05 (nats per character). The speedrun's
# target, 1.95, is the validation loss the shakespeare milestone must reach (nanoGPT's small
# CPU recipe). Each is defined once, here, and the judge reads both when it runs: change one
# (exercise 2) and the judge changes with it.

# %%
#| export
@dataclass(frozen=True)
class Event:
    """One Olympic event: what is measured, in which unit, and which direction wins."""

    name: str
    metric: str  # the leaderboard's column
    unit: str
    higher_is_better: bool


EVENTS = {
    "smallest": Event("smallest", "bytes shipped", "B", higher_is_better=False),
    "generation": Event("generation", "generation rate", "tokens/s", higher_is_better=True),
    "speedrun": Event("speedrun", "time to target loss", "s", higher_is_better=False),
}
# The one definition of each bar. The judge (tito/grading/judge.py) reads both when it runs, so changing one
# here (or `tinytorch.perf.olympics.QUALITY_MARGIN = 0.01` before calling judge()) changes the judge.
QUALITY_MARGIN = 0.05  # validation loss at most the baseline's + this
SPEEDRUN_TARGET = 1.95  # the speedrun's validation loss to reach from scratch
WEIGHT_SUFFIXES = (".npz", ".npy", ".pt", ".pth", ".safetensors", ".bin", ".pkl", ".pickle", ".h5", ".ckpt", ".onnx")

# %% [markdown]
# ## 1. Held-out windows
#
# The judge evaluates every submission on the same windows of **validation** text: the last
# 10% of Tiny Shakespeare, which no reference entry trained on. A window is `context`
# characters of input and the same characters shifted by one as targets: position `t` must
# predict character `t + 1`. Three properties matter:
#
# * **the same windows every run** — drawn from `np.random.default_rng(seed)`, so two runs of
#   the judge (and two submissions) are scored on identical text;
# * **inside the held-out text** — a window starting at `s` needs characters `s … s+context`
#   (that is `context + 1` of them), so `s` runs from 0 to `len(tokens) - context - 1`;
# * **vectorised** — one fancy-indexing gather, no Python loop over windows.
#
# **What you can and cannot know of the judged windows.** By default the judge draws them with
# seed 0 from the last 10% of `datasets/tinyshakespeare.txt`, the text you have: you can
# recompute every window, so you can practise against exactly what `tito olympics judge` scores.
# That also means an entry *could* train on those windows, or carry a table of their answers (a
# test in `tests/20_olympics/test_zz_judge_cheats.py` does, and passes the default bar with a loss
# near 0). So the default is for practice. An instructor judges with `--seed N` (other windows,
# and another generation prompt) or `--heldout FILE` (text you have never seen); what you can
# know then is the rule — `context`-token windows, `eval_windows` of them, targets shifted by
# one, the same for every entry — and not which windows they are. An entry that learnt the
# public windows instead of Shakespeare loses on those.

# %%
#| export
def heldout_windows(tokens: Any, context: int, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`count` windows of `context` tokens from `tokens` (1-D ids) and their targets.

    Starts: `np.random.default_rng(seed).integers(0, len(tokens) - context, size=count)` (the high
    end excluded), so every start leaves room for `context + 1` tokens. Returns (inputs, targets),
    both int64 arrays of shape (count, context): inputs[i] = tokens[s_i : s_i + context] and
    targets[i] = tokens[s_i + 1 : s_i + context + 1] (shifted by one). The same arguments give the
    same windows in every call. One gather (`tokens[starts[:, None] + np.arange(context + 1)]`),
    no loop. ValueError when `tokens` has fewer than `context + 1` ids or `count`/`context` < 1.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"heldout_windows: tokens must be a 1-D array of ids, got shape {tokens.shape}.")
    context = as_int(context, "heldout_windows: context")  # 2.5 crashed as an index, count=2.5 inside NumPy
    count = as_int(count, "heldout_windows: count")
    if int(context) < 1 or int(count) < 1:
        raise ValueError(f"heldout_windows: context and count must be >= 1, got {context} and {count}.")
    if len(tokens) < int(context) + 1:
        raise ValueError(f"heldout_windows: {len(tokens)} tokens hold no window of {context} + 1 (its targets).")
    ### BEGIN SOLUTION
    starts = np.random.default_rng(seed).integers(0, len(tokens) - context, size=count)
    windows = tokens[starts[:, None] + np.arange(context + 1)].astype(np.int64)
    return windows[:, :-1], windows[:, 1:]
    ### END SOLUTION


# %%
def test_unit_heldout_windows():
    def windows(*args, **kwargs):
        try:
            return heldout_windows(*args, **kwargs)
        except IndexError as err:
            raise AssertionError(f"a window ran past the end ({err}): starts go up to len - context - 1 "
                                 "(integers(0, len(tokens) - context): the high end is excluded)") from None
        except ValueError as err:
            if "high" not in str(err):
                raise
            raise AssertionError(f"6 tokens, context 5 raised ValueError ({err}): rng.integers(0, high) already "
                                 "excludes high, so integers(0, len(tokens) - context) draws every start up to "
                                 "len - context - 1 (here 0, the one window)") from None

    tokens = (np.arange(30) * 7) % 30 + 100  # ids that are not their positions: 100, 107, 114, ...
    x, y = windows(tokens, 5, 40, seed=3)
    assert x.shape == y.shape == (40, 5), (
        f"expected inputs and targets of shape (40, 5), got {x.shape} and {y.shape}"
        + (": the gather took context tokens per window; take context + 1 (np.arange(context + 1)): the inputs are "
           "the first context of them, the targets the last context" if y.shape == (40, 4) else ""))
    assert x.dtype == np.int64 and y.dtype == np.int64, f"expected int64 ids, got {x.dtype} and {y.dtype}"
    starts = np.array([int(np.flatnonzero(tokens == first)[0]) for first in x[:, 0]])
    assert np.array_equal(x, tokens[starts[:, None] + np.arange(5)]), "inputs[i] must be tokens[s_i : s_i + context]"
    shifted = tokens[np.minimum(starts[:, None] + np.arange(1, 6), len(tokens) - 1)]
    assert np.array_equal(y, shifted), (
        "targets must be the inputs shifted by one (position t predicts token t+1): "
        + ("the targets are not shifted by one" if np.array_equal(y, x) else
           "the targets are the input IDS plus one; shift the POSITIONS: targets[i] = tokens[s_i + 1 : s_i + context + 1]"
           if np.array_equal(y, x + 1) else "targets[i] = tokens[s_i + 1 : s_i + context + 1]"))
    assert y.max() <= tokens.max() and starts.max() <= len(tokens) - 6, \
        f"a window ran past the end (start {starts.max()} of {len(tokens)} tokens): starts go up to len - context - 1"
    x_again, _ = windows(tokens, 5, 40, seed=3)
    assert np.array_equal(x, x_again), "the same seed must give the same windows: draw the starts from np.random.default_rng(seed)"
    many, _ = windows(np.arange(30), 5, 400, seed=0)
    assert many[:, 0].max() == 24, (
        f"400 windows of 5 from 30 tokens: the last start, 30 - 5 - 1 = 24, must be drawn; the largest was "
        f"{many[:, 0].max()}: rng.integers(0, len(tokens) - context) already excludes its high end")
    narrow, _ = windows(np.arange(30, dtype=np.int32), 5, 3)
    assert narrow.dtype == np.int64, f"int32 tokens in: expected int64 windows, got {narrow.dtype} (.astype(np.int64))"
    last = windows(np.arange(6), 5, 8)[1]
    assert np.array_equal(last, np.tile(np.arange(1, 6), (8, 1))), \
        f"6 tokens hold exactly one window of 5 (+1): expected starts 0 only, got targets {last[:2]}"
    print("✓ heldout_windows: seeded, shifted by one, never past the end")


test_unit_heldout_windows()

# %% [markdown]
# ## 2. The loss, computed by the judge
#
# The runner sends logits of shape `(B, T, V)`; the judge turns them into the mean
# cross-entropy over all `B·T` positions: `−log softmax(logits)[target]`. That is module 19's
# `token_losses`, which you wrote there: float64, each row's maximum subtracted first, so a
# submission with large logits (a sharp, confident model, or one that scales its logits to
# overflow float32's `exp`) gets its true loss, not `inf` or `nan`. The judge and the harness
# compute the loss with the same function, so a number on the leaderboard and one from module
# 19's benchmarks mean the same thing.
#
# What the judge adds is what it refuses (given code): logits that are not `(B, T, V)` for
# targets `(B, T)`, a target outside `[0, V)`, and non-finite logits — there is nothing to
# score in those, and a submission must not get a number for them. Read `loss_from_logits`,
# then run the checks below: they hold for the judge's loss and name what each case tests.

# %%
#| export
def loss_from_logits(logits: Any, targets: Any) -> float:
    """Mean cross-entropy of `logits` (B, T, V) against integer `targets` (B, T), as a Python float.

    The mean over the B·T positions of module 19's token_losses (float64, each row's max subtracted
    before exp: logsumexp(row) - row[target]). ValueError when the shapes do not match ((B, T, V)
    against (B, T)), a target is outside [0, V), or a logit is not finite. Given code.
    """
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if logits.ndim != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"loss_from_logits: logits (B, T, V) and targets (B, T) expected, got {logits.shape} and {targets.shape}.")
    if targets.size and (targets.min() < 0 or targets.max() >= logits.shape[2]):
        raise ValueError(f"loss_from_logits: targets must lie in [0, {logits.shape[2]}).")
    if not np.isfinite(logits).all():
        raise ValueError("loss_from_logits: the logits hold inf or nan: there is no loss to score.")
    return float(token_losses(logits, targets).mean())


# %%
def loss_slip(got: float, logits: np.ndarray, targets: np.ndarray) -> str:
    """The classic slip whose loss of `logits` (B, T, V) against `targets` (B, T) is `got`, in words ("" if none)."""
    z = np.asarray(logits, dtype=np.float64)
    peak = z.max(axis=-1, keepdims=True)
    log_norm = peak[..., 0] + np.log(np.sum(np.exp(z - peak), axis=-1))
    picked = np.take_along_axis(z, targets[..., None], axis=-1)[..., 0]
    right = log_norm - picked
    candidates = {
        "the max was subtracted inside exp but not added back: log Σ exp(z) = m + log Σ exp(z − m)":
            float((right - peak[..., 0]).mean()),
        "the sign is flipped: the loss is −log softmax(z)[target] = logsumexp(z) − z[target], positive":
            float(-right.mean()),
        "that is log base 2 (bits per character): the loss is in nats, the natural log": float(right.mean() / np.log(2)),
        "pick the TARGET's logit, not the largest one": float((log_norm - z.max(axis=-1)).mean()),
        "the positions' losses were summed: the loss is the mean over positions (B·T of them)": float(right.sum()),
    }
    named = [words for words, wrong in candidates.items() if abs(got - wrong) < 1e-9 and abs(got - right.mean()) > 1e-9]
    return named[0] if named else ""


def test_unit_loss_from_logits():
    def loss(logits, targets):
        try:
            return loss_from_logits(logits, targets)
        except (ValueError, IndexError) as err:  # NumPy's message names shapes or indices, not the slip
            which = ("the target's logit was picked along another axis than the classes" if isinstance(err, IndexError)
                     else "the log-sum-exp ran over another axis than the classes")
            raise AssertionError(
                f"logits {np.shape(logits)}, targets {np.shape(targets)} raised {type(err).__name__}: {err}: {which}; "
                "the log-sum-exp and the target's pick both run over the classes, the LAST axis (sum(axis=-1), "
                "take_along_axis(..., axis=-1)); axis 0 is the batch, axis 1 the positions") from None

    uniform = np.zeros((2, 3, 4))
    targets = np.array([[0, 1, 2], [3, 0, 1]])
    got = loss(uniform, targets)
    assert abs(got - math.log(4)) < 1e-12, (
        f"uniform logits over 4 classes: expected ln 4 = {math.log(4):.6f}, got {got}: "
        + (loss_slip(got, uniform, targets) or "the mean over positions of -log p(target)"))
    logits = np.array([[[2.0, 0.0, -1.0]]])
    expected = -(2.0 - math.log(math.exp(2) + 1 + math.exp(-1)))
    got = loss(logits, np.array([[0]]))
    assert abs(got - expected) < 1e-12, (f"expected {expected:.6f}, got {got}: "
                                         + (loss_slip(got, logits, np.array([[0]])) or "-log softmax(logits)[target]"))
    got = loss(logits, np.array([[2]]))
    assert abs(got - (expected + 3.0)) < 1e-12, \
        f"target 2: expected {expected + 3:.6f}, got {got}: pick the TARGET's logit, not the largest one"
    rng = np.random.default_rng(0)
    noisy = (rng.normal(size=(2, 8, 65)) * 3).astype(np.float32)
    picks = rng.integers(0, 65, size=(2, 8))
    z = noisy.astype(np.float64)
    exact = float(np.mean(np.log(np.exp(z).sum(-1)) - np.take_along_axis(z, picks[..., None], -1)[..., 0]))
    got = loss(noisy, picks)
    assert abs(got - exact) < 1e-12, f"expected {exact!r}, got {got!r}: compute in float64, not in the logits' float32"
    huge = np.array([[[1000.0, 0.0]]], dtype=np.float32)
    got = loss(huge, np.array([[1]]))
    assert abs(got - 1000.0) < 1e-9, \
        f"logits 1000 and 0, target 1: expected 1000, got {got}: subtract each row's max before exp (it overflows)"
    print("✓ loss_from_logits: ln V for uniform logits, the target's log-probability, stable at logits of 1000")


test_unit_loss_from_logits()

# %% [markdown]
# **Worked example.** A GPT that has learned nothing predicts every character about equally:
# its loss is `ln 65 ≈ 4.17`, the entropy of a uniform guess over the 65 characters. Run the
# cell: an untrained tiny GPT lands close to it, because its initial weights are small.

# %%
_vocab = 65
tiny = GPT(_vocab, 32, 2, 2, 16, seed=0)
_val = np.random.default_rng(1).integers(0, _vocab, 2000)
_x, _y = heldout_windows(_val, 16, 8, seed=0)
tiny.eval()
with no_grad():
    _logits = tiny(Tensor(_x))[0].data
print(f"untrained tiny GPT: loss {loss_from_logits(_logits, _y):.4f}   uniform guess: ln 65 = {math.log(65):.4f}")

# %% [markdown]
# ## 3. The quality bar
#
# A smaller or faster model that forgot Shakespeare wins nothing. A submission passes when
# its validation loss is **at most** the baseline's + 0.05: exactly at the bar passes. The
# verdict is a reason in words, because a disqualified student must learn why.

# %%
#| export
def quality_verdict(loss: float, baseline_loss: float, margin: float | None = None) -> str:
    """"" when `loss` <= baseline_loss + margin (at the bar passes); otherwise the reason, which says
    the loss, the bar and by how much it was missed, e.g.
    "validation loss 1.9731 is above the quality bar 1.9500 (baseline 1.9000 + 0.05) by 0.0231".
    A loss that is not finite is always above the bar. `margin` None: QUALITY_MARGIN as it is when
    called (not when this function was defined).

    Your code sets `bar` (the largest loss allowed) and returns "" when the loss passes; the given
    line after it writes the reason from `bar`. ValueError (given) unless baseline_loss is finite and
    margin a finite number >= 0: a NaN bar would disqualify every entry, with "bar nan" as the reason."""
    margin = QUALITY_MARGIN if margin is None else margin
    for name, value in (("baseline_loss", baseline_loss), ("margin", margin)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(value) or (name == "margin" and value < 0):
            raise ValueError(f"quality_verdict: {name} must be a finite number{' >= 0' if name == 'margin' else ''}, "
                             f"got {value!r}.")
    ### BEGIN SOLUTION
    bar = baseline_loss + margin
    if math.isfinite(loss) and loss <= bar:
        return ""
    ### END SOLUTION
    return (f"validation loss {loss:.4f} is above the quality bar {bar:.4f} "
            f"(baseline {baseline_loss:.4f} + {margin:g}) by {loss - bar:.4f}")


# %%
def test_unit_quality_verdict():
    refused = quality_verdict(2.0, 1.5, 0.25)  # the reason names the bar this code computes
    relative = "quality bar 1.8750" in refused
    assert quality_verdict(1.5, 1.5, 0.25) == "", \
        "a loss equal to the baseline's passes: the bar is baseline + margin (the margin added, not subtracted)"
    reason = quality_verdict(1.625, 1.5, 0.25)
    assert reason == "", (
        f"1.625 is under the bar 1.5 + 0.25 = 1.75, got {reason!r}: "
        + ("your bar is the baseline alone: the margin was left out (bar = baseline + margin)"
           if "quality bar 1.5000" in reason else "the bar is baseline + margin (the margin added, not subtracted)"))
    reason = quality_verdict(1.75, 1.5, 0.25)
    assert reason == "", (
        f"a loss exactly AT the bar (1.5 + 0.25) passes, got {reason!r}: "
        + ("'at most' is <=, not <" if "quality bar 1.7500" in reason else "the bar is baseline + margin"))
    reason = quality_verdict(1.875, 1.5, 0.25)
    assert "above the quality bar" in reason and "1.7500" in reason, (
        f"1.875 > 1.5 + 0.25 must be refused with the bar in the reason, got {reason!r}"
        + (": the margin was taken as a fraction of the baseline (bar = 1.5·(1 + 0.25) = 1.875); it is in nats, "
           "added: bar = baseline + margin" if relative else ""))
    reason = quality_verdict(1.0, 1.5, 0.25)
    assert reason == "", (
        f"a loss far BELOW the baseline (1.0 against 1.5: a better model) passes, got {reason!r}: the bar is an "
        "upper limit only, loss <= baseline + margin (not |loss − baseline| <= margin)")
    assert quality_verdict(float("nan"), 1.5) != "", "a nan loss is never under the bar"
    print("✓ quality_verdict: at the bar passes, above it is refused with the reason")


test_unit_quality_verdict()

# %% [markdown]
# ## 4. Are the generated tokens the model's?
#
# The generation event is timed from outside: the judge sends a prompt, starts a clock, and
# stops it when 256 tokens arrive. A submission could answer fast with tokens it never
# computed. So after the timing (the check's cost is not the entry's) the judge checks **every
# answer and every token**:
#
# * the same prompt was sent every time, and greedy decoding is deterministic, so every answer
#   must be the same (an entry that computes only the last answer and makes up the others is
#   caught here);
# * each generated token must be the greedy one under the model's own logits over the context
#   it had: the model sees at most `context` tokens, so token `i` was chosen from the logits at
#   the last position of `tokens[max(0, i - context) : i]`. The judge asks the model for the
#   logits of those windows — one window covers every token up to `context`, each later token
#   needs its own — and your function checks each row: the chosen token's logit is the row's
#   maximum.
# Two tokens can tie (or nearly tie: a KV cache
# adds in a different order from a full forward pass), so the test is "within `atol` of the
# maximum", not `argmax ==`: `argmax` picks the first of two equal logits, and a correct
# generator may have picked the other.

# %%
#| export
def greedy_consistent(logits: Any, chosen: Any, atol: float = 1e-4) -> np.ndarray:
    """For each row of `logits` (N, V), whether token `chosen[i]` is a greedy choice: its logit is
    within `atol` (absolute, plus 1e-6 relative to the row's largest magnitude) of the row's maximum.
    Returns a bool array of shape (N,). Ties pass: any token with the largest logit is greedy.
    ValueError when `chosen` is not (N,) ids in [0, V)."""
    logits = np.asarray(logits, dtype=np.float64)
    chosen = np.asarray(chosen)
    if logits.ndim != 2 or chosen.shape != logits.shape[:1]:
        raise ValueError(f"greedy_consistent: logits (N, V) and chosen (N,) expected, got {logits.shape} and {chosen.shape}.")
    if chosen.size and (chosen.min() < 0 or chosen.max() >= logits.shape[1]):
        raise ValueError(f"greedy_consistent: chosen ids must lie in [0, {logits.shape[1]}).")
    if isinstance(atol, bool) or not isinstance(atol, (int, float, np.integer, np.floating)) \
            or not 0 <= atol < math.inf:  # inf called every token greedy, NaN none
        raise ValueError(f"greedy_consistent: atol must be a finite number >= 0, got {atol!r}.")
    ### BEGIN SOLUTION
    best = logits.max(axis=1)
    mine = logits[np.arange(len(chosen)), chosen.astype(np.int64)]
    slack = atol + 1e-6 * np.abs(logits).max(axis=1)
    return mine >= best - slack
    ### END SOLUTION


# %%
def test_unit_greedy_consistent():
    logits = np.array([[0.0, 3.0, 1.0], [2.0, 2.0, -1.0], [5.0, 4.99999, 0.0], [1.0, 0.0, 0.5]])
    try:
        got = greedy_consistent(logits, np.array([1, 1, 1, 2]))
    except ValueError as err:  # NumPy's broadcast error names shapes, not the slip
        raise AssertionError(
            f"4 rows of 3 logits raised {err!r}: the maximum is per ROW, logits.max(axis=1), shape (4,); "
            "max(axis=0) gives one per class, shape (3,)") from None
    assert got.shape == (4,) and got.dtype == bool, (
        f"expected a bool array of shape (4,), got {got.shape} {got.dtype}"
        + (": logits[:, chosen] takes every chosen column in every row; pick one per row, "
           "logits[np.arange(N), chosen]" if got.shape == (4, 4) else ""))
    assert got[0], "token 1 has the largest logit (3.0): it is greedy" + (
        "; nothing passed, not even a row's maximum: the chosen logit passes when it is >= max − slack "
        "(the slack lowers the bar, it does not raise it)" if not got.any() else "")
    assert got[1], "tokens 0 and 1 tie at 2.0: a tie is a greedy choice too (argmax picks the first; compare with the max)"
    assert got[2], "4.99999 is within 1e-4 of 5.0: a near-tie from a different order of additions passes"
    assert not got[3], "token 2 (0.5) is not the largest (1.0): not greedy"
    large = greedy_consistent(np.array([[1e5, 1e5 - 0.05, 0.0]]), np.array([1]))
    assert large[0], (f"logits near 1e5, 0.05 apart (float32 steps there are {np.spacing(np.float32(1e5)):.4f}): "
                      f"within the slack atol + 1e-6·(the row's largest |logit|) = {1e-4 + 1e-6 * 1e5:.4f}; "
                      "the relative part is missing")
    print("✓ greedy_consistent: the largest logit, ties and near-ties pass")


test_unit_greedy_consistent()

# %% [markdown]
# ## 5. The access rule
#
# The runner installs an **audit hook** (`sys.addaudithook`, PEP 578) before it imports the
# submission: Python calls it for every `open()` with the path and mode. The hook asks your
# `access_violation(path, work, checkpoint, allowed)` and refuses the open (it raises
# `PermissionError`) when the answer is not empty, and the judge disqualifies the submission
# with that answer. The rule:
#
# 1. resolve the path first (`os.path.realpath`): `work/../elsewhere/x` is not in `work`, a
#    symbolic link in the folder must not lead out of it, and `/proc/self/root/x` is `/x`;
# 2. a path is *inside* a folder when it is the folder or starts with the folder **plus a
#    separator**: `/tmp/work-evil/model.npz` starts with the text `/tmp/work` but is not in it;
# 3. inside the work folder, a file whose name ends in a weights suffix (`.npz`, `.pt`,
#    `.safetensors`, ...) may be opened only if it is the declared checkpoint;
# 4. outside the work folder, only the `allowed` folders (Python's installation and the
#    tinytorch package) may be read — and nothing may be written there.
#
# What the hook does **not** stop: code that reads files without `open` (C code through
# `ctypes`, a memory map of an already-open descriptor), or that tampers with the runner in
# its own process. That is why the sandbox is the first line and the hook the second: the
# submission runs on a copy of its folder only, as a user of its own where the judge runs
# as root, in a mount namespace where root's private folders hold only Python.

# %%
#| export
def _inside(path: str, folder: str) -> bool:
    """Whether `path` is `folder` itself or lies inside it; both are already resolved (os.path.realpath).
    Inside means: equal, or starts with the folder plus os.sep (so /tmp/work-evil is not inside /tmp/work)."""
    ### BEGIN SOLUTION
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
    ### END SOLUTION


def access_violation(path: Any, work: Any, checkpoint: Any, allowed: Any = (), writing: bool = False) -> str:
    """Why opening `path` breaks the rules ("" when it does not).

    All paths are resolved with os.path.realpath first (`..` and links followed). `work` is the
    submission's folder, `checkpoint` its declared weights file, `allowed` folders outside `work`
    that may be read (never written). A path is inside a folder when it equals it or starts with
    the folder plus os.sep. Returns:
      "loads weights other than its declared checkpoint: <path>" for a file inside `work` whose name
          ends in one of WEIGHT_SUFFIXES (case-insensitive) and is not `checkpoint`;
      "writes outside its folder: <path>" when `writing` and `path` is outside `work`;
      "reads outside its folder: <path>" for a path outside `work` and outside every `allowed` folder;
      "" otherwise.
    """
    work = os.path.realpath(os.fspath(work))
    checkpoint = os.path.realpath(os.fspath(checkpoint))
    ### BEGIN SOLUTION
    real = os.path.realpath(os.fspath(path))
    if _inside(real, work):
        if real.lower().endswith(WEIGHT_SUFFIXES) and real != checkpoint:
            return f"loads weights other than its declared checkpoint: {real}"
        return ""
    if writing:
        return f"writes outside its folder: {real}"
    if any(_inside(real, os.path.realpath(os.fspath(folder))) for folder in allowed):
        return ""
    return f"reads outside its folder: {real}"
    ### END SOLUTION


# %%
def test_unit_access_violation():
    work, ckpt = "/tmp/olympics/work", "/tmp/olympics/work/model.npz"
    assert access_violation("/tmp/olympics/work/submission.py", work, ckpt) == "", "a file in the folder may be read"
    assert access_violation(ckpt, work, ckpt) == "", "the declared checkpoint may be read"
    got = access_violation(work, work, ckpt)
    assert got == "", (f"the work folder itself is inside it (listing it is allowed), got {got!r}: inside means "
                       "path == folder or path.startswith(folder + os.sep)")
    got = access_violation("/tmp/olympics/work/out/log.txt", work, ckpt, writing=True)
    assert got == "", (f"a write inside the work folder is allowed, got {got!r}: `writing` matters only for paths "
                       "outside it")
    got = access_violation("/usr/lib/python3/numpy/lib/tests/data/py3-objarr.npz", work, ckpt, allowed=["/usr/lib/python3"])
    assert got == "", (f"NumPy's own .npz test data in an allowed folder may be read, got {got!r}: the weights rule is "
                       "for files INSIDE the work folder")
    got = access_violation("/tmp/olympics/work/other.npz", work, ckpt)
    assert got.startswith("loads weights other than its declared checkpoint"), \
        f"another .npz in the folder is other weights, got {got!r}"
    got = access_violation("/tmp/olympics/work/BEST.PT", work, ckpt)
    assert got.startswith("loads weights other"), f"weights suffixes case-insensitive (.PT is .pt), got {got!r}"
    got = access_violation("/tmp/olympics/work-evil/model.npz", work, ckpt)
    assert got.startswith("reads outside its folder"), \
        f"/tmp/olympics/work-evil is NOT inside /tmp/olympics/work (compare with the folder + os.sep), got {got!r}"
    got = access_violation("/tmp/olympics/work/../fp32/model.npz", work, ckpt)
    assert got.startswith("reads outside its folder"), \
        f"work/../fp32 leaves the folder: resolve the path with os.path.realpath first, got {got!r}"
    assert access_violation("/usr/lib/python3/os.py", work, ckpt, allowed=["/usr/lib/python3"]) == "", \
        "a file in an allowed folder (Python's installation) may be read"
    got = access_violation("/usr/lib/python3/evil.py", work, ckpt, allowed=["/usr/lib/python3"], writing=True)
    assert got.startswith("writes outside its folder"), f"allowed folders are never written (only read), got {got!r}"
    print("✓ access_violation: resolved paths, folder + separator, only the declared weights")


test_unit_access_violation()

# %% [markdown]
# ## 6. Ranking without inventing differences
#
# Bytes are exact; tokens per second are not: two runs of the same model differ by a few
# percent. Module 19's harness reports a median with a bootstrap confidence interval. If the
# judge ranked by the median alone, two entries whose intervals overlap would swap places
# from run to run — a ranking made of noise. The rule here:
#
# * qualified entries first (disqualified ones last, unranked), sorted by their score in the
#   event's direction;
# * **competition ranking** ("1, 1, 3"): an entry shares the rank of the entry just above it
#   when their intervals `[low, high]` overlap (module 19's "no measurable difference");
#   otherwise it opens a new group, whose rank is its position (1-based). A chain of entries
#   each indistinguishable from the next is one group: which of them "wins" would change from
#   run to run;
# * within a group, the order is by score, then by `key` (a digest of the submission's
#   bytes) — never by the entry's name, so renaming an entry changes nothing.
#
# The judge gives your function the bootstrap interval of each entry's median, widened to at
# least ±2.5% of the median for speeds: on a shared machine a difference of a few percent does
# not survive a second run, so the judge does not rank it (the leaderboard shows the measured
# interval).

# %%
#| export
@dataclass
class Row:
    """One entry in one event. `score` is the median (or the exact value); [low, high] its interval
    (low == high == score for exact measurements). `reason` is "" or why it was disqualified;
    `key` a content digest used to order exact ties; `rank` is filled by rank_entries."""

    name: str
    score: float
    low: float
    high: float
    reason: str = ""
    key: str = ""
    rank: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def qualified(self) -> bool:
        return not self.reason


def rank_entries(rows: list[Row], higher_is_better: bool) -> list[Row]:
    """The rows in leaderboard order, each qualified row's `rank` set (disqualified rows: rank None, last).

    Qualified rows sorted by score (descending when higher_is_better), then by `key`; ranks are
    competition ranks of groups: a row takes the rank of the row just above it when their
    intervals [low, high] overlap (a.low <= b.high and b.low <= a.high), else it opens a new
    group whose rank is its 1-based position. Disqualified rows follow in `key` order. The rows are
    modified in place and returned in a new list.

    Your code builds `qualified`: the qualified rows in leaderboard order, each with its rank set;
    the given lines after it append the disqualified rows (rank None).
    """
    ### BEGIN SOLUTION
    sign = -1.0 if higher_is_better else 1.0
    qualified = sorted((r for r in rows if r.qualified), key=lambda r: (sign * r.score, r.key))
    above = None
    for position, row in enumerate(qualified, start=1):
        if above is not None and row.low <= above.high and above.low <= row.high:
            row.rank = above.rank
        else:
            row.rank = position
        above = row
    ### END SOLUTION
    disqualified = sorted((r for r in rows if not r.qualified), key=lambda r: r.key)
    for row in disqualified:
        row.rank = None
    return qualified + disqualified


# %%
def test_unit_rank_entries():
    def row(name, score, spread=0.0, reason="", key=None):
        return Row(name, score, score - spread, score + spread, reason, key or name)

    smallest = rank_entries([row("a", 300), row("b", 100), row("c", 200), row("d", 50, reason="above the bar")],
                            higher_is_better=False)
    assert [r.name for r in smallest] == ["b", "c", "a", "d"], \
        f"bytes: fewest first, disqualified last (a disqualified entry is never ranked): expected b, c, a, d, got {[r.name for r in smallest]}"
    ranks = [r.rank for r in smallest]
    assert ranks == [1, 2, 3, None], (f"expected ranks 1, 2, 3 and None for the disqualified entry, got {ranks}"
                                      + (": ranks count from 1 (enumerate(..., start=1))" if ranks[:3] == [0, 1, 2] else ""))
    fastest = rank_entries([row("slow", 90, 2), row("fast", 120, 3), row("fast-too", 118, 3), row("mid", 100, 2)],
                           higher_is_better=True)
    assert [r.name for r in fastest] == ["fast", "fast-too", "mid", "slow"], \
        f"tokens/s: most first (descending when higher_is_better), got {[r.name for r in fastest]}"
    assert [r.rank for r in fastest] == [1, 1, 3, 4], \
        f"fast and fast-too overlap: they share rank 1 (competition ranking 1, 1, 3, 4), got {[r.rank for r in fastest]}"
    chain = rank_entries([row("a", 100, 6), row("b", 90, 6), row("c", 80, 6)], higher_is_better=True)
    assert [r.rank for r in chain] == [1, 1, 1], (
        f"a [94, 106] overlaps b [84, 96], b overlaps c [74, 86]: one chain, ranks 1, 1, 1; got "
        f"{[r.rank for r in chain]}: compare each row with the row just ABOVE it, not with its group's first row")
    renamed = rank_entries([row("zz", 100, key="k1"), row("aa", 100, key="k2")], higher_is_better=False)
    assert [r.name for r in renamed] == ["zz", "aa"], "exact ties are ordered by key (the content), never by the entry's name"
    assert [r.rank for r in renamed] == [1, 1], (
        f"two exact scores of 100 (intervals [100, 100]) tie: ranks 1, 1, got {[r.rank for r in renamed]}: intervals "
        "that touch overlap, so compare with <= (row.low <= above.high and above.low <= row.high)")
    print("✓ rank_entries: direction, shared ranks for overlapping intervals, disqualified last")


test_unit_rank_entries()

# %% [markdown]
# ## The leaderboard's files
#
# Given code: the judge writes each event's rows as Markdown (for people) and CSV (for
# programs). Every number in them was measured by the judge.

# %%
#| export
def _format_score(value: float, unit: str) -> str:
    if unit == "B":
        return f"{int(round(value)):,}"
    return f"{value:,.2f}"


def leaderboard_markdown(event: Event, rows: list[Row], baseline_loss: float | None = None,
                         target_loss: float | None = None, margin: float | None = None) -> str:
    """One event's leaderboard as a Markdown table (rows in the order given: rank_entries' order).
    Under the heading, the bar the entries had to pass: the quality bar from `baseline_loss` and
    `margin` (None: QUALITY_MARGIN as it is now), or for the speedrun `target_loss`, the loss to
    reach from scratch. A row whose extra holds "parts" (bytes by file) shows them."""
    margin = QUALITY_MARGIN if margin is None else margin
    lines = [f"### {event.name}: {event.metric} ({event.unit}, {'higher' if event.higher_is_better else 'lower'} is better)", ""]
    if target_loss is not None:
        lines += [f"Target: validation loss <= {target_loss} from scratch.", ""]
    elif baseline_loss is not None:
        lines += [f"Quality bar: validation loss <= {baseline_loss + margin:.4f} "
                  f"(baseline {baseline_loss:.4f} + {margin:g}).", ""]
    lines += ["| rank | entry | " + event.metric + " | 95% interval | validation loss | verdict |",
              "|---|---|---|---|---|---|"]
    for row in rows:
        low, high = row.extra.get("ci", (row.low, row.high))  # the measured interval, when ranking used a wider one
        single = "exact" if event.unit == "B" else "one reading"  # bytes are exact; one timing is not
        interval = single if low == high else f"{_format_score(low, event.unit)} – {_format_score(high, event.unit)}"
        if row.extra.get("parts"):  # what the bytes are: the checkpoint and every other file shipped
            interval += " (" + " + ".join(f"{name} {_format_score(n, 'B')}" for name, n in row.extra["parts"].items()) + ")"
        score = _format_score(row.score, event.unit) if math.isfinite(row.score) else "—"
        loss = row.extra.get("val_loss")
        shown_loss = f"{loss:.4f}" if isinstance(loss, float) and math.isfinite(loss) else "—"
        verdict = "ok" if row.qualified else "disqualified: " + row.reason.replace("|", "/")
        lines.append(f"| {row.rank if row.rank is not None else '—'} | {row.name} | {score} | "
                     f"{interval if math.isfinite(row.score) else '—'} | {shown_loss} | {verdict} |")
    return "\n".join(lines) + "\n"


def leaderboard_rows_csv(event: Event, rows: list[Row]) -> list[dict]:
    """One dict per row for csv.DictWriter (the columns of CSV_FIELDS)."""
    return [{"event": event.name, "rank": "" if r.rank is None else r.rank, "entry": r.name,
             "metric": event.metric, "unit": event.unit, "score": r.score, "low": r.low, "high": r.high,
             "val_loss": r.extra.get("val_loss", ""), "qualified": r.qualified, "reason": r.reason,
             "digest": r.key} for r in rows]


CSV_FIELDS = ["event", "rank", "entry", "metric", "unit", "score", "low", "high", "val_loss", "qualified",
              "reason", "digest"]

# %% [markdown]
# ## The speedrun's given pieces
#
# A speedrun entry trains from scratch inside the sandbox, so the judge puts the training text
# and its tokenizer into the entry's work folder (`olympics_train.txt`, and module 10's
# `CharTokenizer` file `olympics_tokenizer.json`: the ids the judge evaluates with). Given code:
# `speedrun_data()` reads them; `train_recipe` is nanoGPT's small CPU recipe (the shakespeare
# milestone's), stopped early when the time budget runs out, with the optimizer class as a
# parameter so that module 18's `FusedAdamW` can stand in for `AdamW`, and a `parallel_class`
# so that module 18's `ThreadedDataParallel` can run each batch's forward and backward in parts
# on the speedrun's two threads. The judge times the whole
# `train(time_budget_s)` call from outside and computes the loss of the model it returns itself.

# %%
#| export
SPEEDRUN_TEXT, SPEEDRUN_TOKENIZER = "olympics_train.txt", "olympics_tokenizer.json"


def speedrun_data(folder: Any = ".") -> tuple[np.ndarray, Any]:
    """(training ids as int64, module 10's CharTokenizer) from the files the judge put in `folder`."""
    from tinytorch.text.tokenization import CharTokenizer

    folder = Path(folder)
    tokenizer = CharTokenizer.load(folder / SPEEDRUN_TOKENIZER)
    text = (folder / SPEEDRUN_TEXT).read_text(encoding="utf-8")
    return np.array(tokenizer.encode(text), dtype=np.int64), tokenizer


def train_recipe(model: Any, train_ids: np.ndarray, time_budget_s: float, iters: int = 2000, batch: int = 12,
                 lr: float = 1e-3, min_lr: float = 1e-4, warmup: int = 100, weight_decay: float = 0.1,
                 betas: tuple = (0.9, 0.99), clip: float = 1.0, seed: int = 1337, optimizer_class: Any = None,
                 parallel_class: Any = None) -> Any:
    """Train `model` (a GPT) by nanoGPT's small CPU recipe for `iters` steps of `batch` random windows of
    its context, or until `time_budget_s` seconds have passed (then it stops, a little early). AdamW (or
    `optimizer_class`, same arguments) with weight decay on the matrices only, `warmup` linear steps, a
    cosine decay to `min_lr`, gradients clipped to `clip`. With `parallel_class` (module 18's
    ThreadedDataParallel), each step's forward and backward is `parallel_class(model).forward_backward(
    ids, targets)`: the same gradient, from parts of the batch on threads. Returns the model (in eval mode)."""
    from tinytorch.core.optimizers import AdamW, weight_decay_groups
    from tinytorch.core.training import CosineWarmupLR, clip_grad_norm

    start = time.perf_counter()
    optimizer = (optimizer_class or AdamW)(weight_decay_groups(model, weight_decay), lr=lr, betas=betas)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=warmup, total_steps=iters, min_lr=min_lr)
    batches = np.random.default_rng(seed)
    context = model.max_seq_len
    model.train()
    parallel = None if parallel_class is None else parallel_class(model)
    for _ in range(iters):
        starts = batches.integers(0, len(train_ids) - context, batch)
        windows = train_ids[starts[:, None] + np.arange(context + 1)]
        optimizer.zero_grad()
        if parallel is None:
            _, loss = model(Tensor(windows[:, :-1]), targets=Tensor(windows[:, 1:]))
            loss.backward()
        else:
            parallel.forward_backward(Tensor(windows[:, :-1]), Tensor(windows[:, 1:]))
        clip_grad_norm(model.parameters(), clip)
        optimizer.step()
        scheduler.step()
        if time.perf_counter() - start > 0.95 * time_budget_s:
            break
    return model.eval()

# %% [markdown]
# ## 7. The judge at work
#
# Everything above is what `tito olympics judge` calls. Here it judges three tiny entries,
# written as real submission folders in a scratch folder: an honest one (the baseline), one
# that also *claims* a checkpoint of 1 byte and a billion tokens per second (it prints them and
# writes them to `results.json`), and one whose `build_model()` quietly reads a second weights
# file from its folder. **Predict, then run:** which numbers does the leaderboard show for the
# boastful entry, and what happens to the third?

# %%
import shutil
import tempfile
import textwrap

from tinytorch.core.training import save_checkpoint


def write_tiny_entry(folder: Path, body: str = "", seed: int = 1) -> Path:
    """A submission folder: submission.py (a 16-token, width-16 GPT) and its module-07 checkpoint."""
    folder.mkdir(parents=True)
    (folder / "submission.py").write_text(textwrap.dedent('''
        from tinytorch.models.transformer import GPT
        CHECKPOINT = "model.npz"

        def build_model():
            return GPT(16, 16, 1, 2, 16, seed=0)
    ''') + textwrap.dedent(body), encoding="utf-8")
    save_checkpoint(folder / "model.npz", GPT(16, 16, 1, 2, 16, seed=seed))
    return folder


from tito.grading.judge import Task, judge, read_submission  # the course's CLI: the judge itself
from tito.grading.sandbox import Limits

_scratch = Path(tempfile.mkdtemp(prefix="olympics-lesson-"))
_folders = [write_tiny_entry(_scratch / "honest"),
            write_tiny_entry(_scratch / "boastful", seed=2, body='''
                print("checkpoint_bytes = 1, tokens_per_s = 1e9")
                open("results.json", "w").write('{"checkpoint_bytes": 1, "tokens_per_s": 1e9}')
            '''),
            write_tiny_entry(_scratch / "swapper", body='''
                from tinytorch.core.training import load_checkpoint
                _plain = build_model
                def build_model():
                    model = _plain()
                    load_checkpoint("better.npz", model)
                    return model
            ''')]
save_checkpoint(_folders[2] / "better.npz", GPT(16, 16, 1, 2, 16, seed=3))
_entries = [read_submission(f) for f in _folders]
_task = Task(val_tokens=np.random.default_rng(7).integers(0, 16, 3000), context=16, vocab_size=16,
             eval_windows=16, new_tokens=32, generation_repeats=5, prompt_tokens=4, limits=Limits(wall_s=60, cpu_s=60))
_tick = time.perf_counter()
_board = judge(_entries, _task, ["smallest", "generation"], baseline=_entries[0])
print(f"judged {len(_entries)} entries in {time.perf_counter() - _tick:.1f} s, each in the sandbox")
for _event in ("smallest", "generation"):
    print(leaderboard_markdown(EVENTS[_event], _board.boards[_event], _board.baseline_loss))
shutil.rmtree(_scratch)  # the three folders were only for this demonstration

# %% [markdown]
# The boastful entry is ranked on what the judge measured: every byte it ships (its checkpoint,
# and its code, the lines that print its claims included) from the copies the judge made, its
# speed from the judge's clock, its loss from its logits; its claims never reach the leaderboard. The swapper is disqualified with the file it opened. Random
# tokens give a loss near `ln 16`, so the honest entries pass a bar set by the honest baseline.
# The honest and the boastful entry are the same architecture: in the generation event they
# should share a rank. If they do not, something else was running on the machine while they
# were timed (a few milliseconds per request is easily disturbed): run the cell again, and see
# why the reference leaderboard uses more repeats.
#
# ### Why the smallest event counts every byte
#
# A judge could score the checkpoint alone and allow some code besides it (this one once allowed
# 256 KiB). But weights are only bytes: base64 text in `submission.py`, or a `.txt` file the code
# reads, holds them as well as an `.npz` does, and an entry whose checkpoint holds no parameters
# then "wins" with the same loss. Any allowance is a prize of up to its size for whoever moves
# weights out of the checkpoint. How large is that prize against what entries really ship? The
# cell measures the reference entries' code and the int4 checkpoint of the Shakespeare GPT's shape.

# %%
import tito.grading.judge
from tinytorch.perf.quantization import checkpoint_bytes, quantize_model

_course = Path(tito.grading.judge.__file__).resolve().parents[2]
_code = {p.parent.name: p.stat().st_size for p in (_course / "milestones" / "olympics_entries").glob("*/submission.py")}
_sizes = Path(tempfile.mkdtemp(prefix="olympics-sizes-"))
_shakespeare_shape = GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False, seed=1337)  # the fp32 entry's
_int4 = checkpoint_bytes(quantize_model(_shakespeare_shape, mode="weight_only", bits=4), _sizes / "int4.npz")
shutil.rmtree(_sizes)
_allowance = 256 * 1024
print(f"the {len(_code)} reference entries' submission.py: {min(_code.values()):,} to {max(_code.values()):,} bytes")
print(f"an int4 checkpoint of the Shakespeare GPT: {_int4:,} bytes")
print(f"a code allowance of {_allowance:,} bytes would be {_allowance / _int4:.0%} of it; "
      f"the largest reference code is {max(_code.values()) / _int4:.2%} of it")

# %% [markdown]
# An allowance large enough for honest code is large enough to hide weights worth winning with,
# and any allowance at all pays whoever moves weights into it. So the judge counts **everything
# an entry ships** — the checkpoint, the code and every other file, measured on its own copies
# before the entry runs — and the leaderboard shows the two parts. Code costs every entry about
# the same small fraction (the cell's last line), and moving weights anywhere gains nothing:
# `test_weights_in_the_code_or_in_a_second_file_are_counted` ranks both tricks behind the honest
# checkpoint they copied.
#
# ## Your own entry
#
# An entry is a folder you can write now, with everything modules 14–19 gave you:
#
# ```python
# # my_entry/submission.py
# from tinytorch.models.transformer import GPT
# from tinytorch.perf.quantization import quantize_model
#
# CHECKPOINT = "model.npz"          # the only weights the judge lets you load
#
# def build_model():                # the shapes only: the judge loads CHECKPOINT into it
#     return quantize_model(GPT(65, 128, 4, 4, 64, bias=False), mode="weight_only", bits=8)
#
# def train(time_budget_s):         # the speedrun only: from scratch, the judge's text in your folder
#     ...
# ```
#
# Make the checkpoint with module 07's `save_checkpoint(folder / "model.npz", model)` from the
# shakespeare milestone's model. `tito milestone run olympics` builds the reference entries
# (fp32, int8, int4, pruned, distilled, fused, checkpointed; their `submission.py` files are in
# `milestones/olympics_entries/`) with their checkpoints in `<temp>/tinytorch-olympics/entries/`,
# judges them three times and writes their leaderboard. Then judge yours against the baseline:
# `tito olympics judge <temp>/tinytorch-olympics/entries/fp32 my_entry` — the first folder is the
# baseline that sets the bar (`--baseline DIR` picks another).
#
# ## What the guards do and do not stop
#
# Each row names the test that proves it (in `tests/20_olympics/`; `test_zz_judge_cheats.py` for
# the ones marked *).
#
# | cheat | caught by | proved by |
# |---|---|---|
# | a number printed or written to a file, a loss made up in the runner's process | nothing to catch: the judge never reads one; it computes the loss from logits on windows it chose | `test_a_self_reported_number_is_ignored` |
# | a loss above the bar | `quality_verdict`, with the margin read when the judge runs | `test_missing_the_quality_bar_disqualifies_with_the_reason`, `test_the_quality_margin_is_read_when_the_judge_runs`* |
# | made-up answers to all timed calls but the last | every answer (warm-up and timed) must equal the first | `test_generation_cheats_are_disqualified_and_honest_entries_keep_their_ranks`* |
# | greedy tokens for the first context window, anything after it; random ids of the right count | every new token checked against the model's logits over the context it had (sliding windows) | `test_generation_cheats_are_disqualified_and_honest_entries_keep_their_ranks`* |
# | weights in the code, or in a second file that is not a weights file | counted: the smallest event scores every byte shipped | `test_weights_in_the_code_or_in_a_second_file_are_counted`* |
# | another weights file in the folder (`teacher.npz`) | the hook (weights suffixes) | `test_loading_other_weights_disqualifies` |
# | rewriting CHECKPOINT at import, before it is loaded | the runner loads the judge's read-only copy, measured when copied | `test_replacing_the_checkpoint_before_the_load_changes_nothing` |
# | another entry's weights (`../fp32/model.npz`), files elsewhere on the machine | the copy (the scratch folder holds this entry only); the hook, on the resolved path; where the judge runs as root, a user of its own | `test_reading_outside_the_folder_disqualifies` |
# | `/proc/self/root/...` to the held-out text; a message left in `/dev/shm` | the hook resolves the path first and exempts only harmless devices | `test_writing_to_dev_shm_or_reading_through_proc_self_root_is_named`* |
# | a link in the folder to a file only the judge may read | refused before anything runs: a submission holds plain files only | `test_a_link_in_a_submission_is_refused`* |
# | answers learnt from the judged windows | nothing, with the public default (seed 0: for practice); `--seed N` or `--heldout FILE` make them worthless | `test_answers_learnt_from_the_public_windows_fail_on_an_instructors_seed_or_text`* |
# | a runner that never answers | a time limit per request: the judge kills it and disqualifies it | `test_a_submission_that_hangs_is_stopped_and_disqualified` |
# | a train() past its budget | the judge's clock around the request | `test_speedrun_times_train_and_judges_the_loss_itself` |
# | a name that sorts first | ties are ordered by the digest of the folder's bytes | `test_renaming_an_entry_changes_nothing` |
#
# Not stopped: C code that reads a world-readable file without Python's `open` (through
# `ctypes`), or code that disables the hook's reporting inside its own process — the
# numbers the judge ranks would still be its own measurements, but a model could have been
# built from data the rules forbid. An instructor who needs more runs the judge as root (a
# user of its own per entry, and mount and network namespaces where the machine allows them).
# Nor does the judge stop an entry from computing its answer once and returning it from a
# cache on later calls (and answering the check's logits requests to match): the same prompt
# every time is what makes answers comparable, and the check can only ask the entry's own
# process. Different prompts per call would need the full check on every answer, about one more
# generation's worth of work per call (you can measure it), so the judge trades that for the
# equality check. With the default seed the prompt is public too, so such an answer could even be
# computed before the judge runs; with an instructor's `--seed` it cannot.
#
# ## Summary
#
# * A judge that shares nothing with the judged code but bytes over a socket can compute every
#   number itself: logits in, loss out; requests timed from its own side.
# * Held-out windows drawn from a seeded generator make every run and every entry comparable.
# * Stable log-sum-exp in float64 (module 19's `token_losses`) gives the true loss of any finite logits;
#   the judge and the benchmarks compute it with the same function.
# * The bar is "at most baseline + margin"; a verdict is a reason in words.
# * Overlapping intervals share a rank: the ranking reproduces because it claims no more
#   than the measurements show.
#
# ## Exercises
#
# 1. **Predict the reference leaderboard.** Before running `tito milestone run olympics`, write
#    down the order you expect in each event. Which technique gains most in bytes? Which one
#    loses speed, and why (module 15, section 10)?
# 2. **A sharper bar.** Change `QUALITY_MARGIN` to 0.01 and judge the reference entries again
#    (edit it here and `tito export 20`, or in Python set `tinytorch.perf.olympics.QUALITY_MARGIN =
#    0.01` before calling `judge`: the judge reads it when it runs). Which ones drop out? What
#    margin keeps int4?
# 3. **More repeats.** Judge the generation event with `generation_repeats` 3 and 15. How do
#    the intervals change, and do any shared ranks split?
# 4. **Your entry.** Combine two techniques (say, structured pruning and int8) into one entry.
#    Does it beat both on bytes while staying under the bar?
# 5. **Break the judge.** Write an entry that gets a number past the judge. If you succeed,
#    write the test that catches it.
#
# ## Questions (answer them by running your code)
#
# 1. An untrained GPT's loss is close to `ln V`. Why, and what does the small difference tell you?
# 2. Compute `log Σ exp(z) − z_y` in float32 without the max shift for logits of 100 and 0
#    (what `token_losses` would do without its shift). What does NumPy return, and why?
# 3. How many held-out windows does the judge need before two runs of the same entry with
#    different seeds agree to within 0.01 in loss? Measure it.
# 4. The greedy check needs one window for all tokens up to the context length, and one more
#    for each token after it. Why? Time the check against one generation call.
# 5. The pruned entry in the reference leaderboard is faster, and the fused one is not. Use
#    module 14's profiler to say where each one's time goes.
