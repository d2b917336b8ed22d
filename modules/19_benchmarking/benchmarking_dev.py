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
# # Module 19: Benchmarking — numbers you can defend
#
# > A benchmark is a claim: "this variant is faster", "this one is as good and half the size".
# > A claim needs the machine it was measured on, a measurement that treats every variant the
# > same, and an error bar. Without them, a 3% "speed-up" is the noise of the next run.
#
# Modules 14–17 built variants of the same models: int8 weights, pruned weights, smaller
# MLPs, checkpointed blocks. Which of them *really* differ? This module builds the harness
# that answers it honestly, and the course's later capstone (module 20) judges submissions
# with exactly this code:
#
# * **the environment** — CPU, cores, the BLAS library and its threads, versions, the GPU:
#   a number without them cannot be reproduced;
# * **interleaved measurement** — warm up, then run the variants round by round in a rotating
#   order, so a burst of load from another program hits all of them, not one;
# * **confidence intervals** — the median of the readings with a *bootstrap* interval, and a
#   comparison that says "no measurable difference" when the intervals overlap;
# * **quality on held-out data** — accuracy on the digits test split, cross-entropy on the
#   Shakespeare validation split, computed by the harness from the model's outputs (never a
#   number the model reports about itself);
# * **the Pareto front** — the variants no other variant beats on quality *and* cost at once.
#
# **What you will be able to do when you finish:**
#
# * record the facts a benchmark result needs beside it, and explain why each one matters;
# * compute a bootstrap confidence interval of a median with one vectorised NumPy expression;
# * write an interleaved timing loop with warm-up, and tell "faster" from "no measurable
#   difference" with intervals, not medians alone;
# * measure accuracy, validation loss, latency (p50, p90), throughput and tokens per second
#   on held-out data, and check that a model outputting random numbers scores chance;
# * find the Pareto front of quality against latency and size, as a table and a plot.
#
# **Time:** about three hours.
#
# | section | you write | what it does |
# |---|---|---|
# | 2 | `bootstrap_ci` | a confidence interval of the median, by resampling |
# | 3 | `measure` | warm-up, then interleaved rounds in a rotating order |
# | 4 | `compare` | ratio, interval of the difference, and the verdict |
# | 5 | `token_losses`, `lm_window_losses`, `accuracy` | quality on held-out data, from the outputs |
# | 7 | `pareto_front` | the rows no other row dominates |
#
# Module 14's tools do the low-level work here: `measure_latency` (warm-up and a timed loop,
# CuPy synchronised), `count_flops` and `peak_memory`.

# %% [markdown]
# This lesson times your code. The lesson asks NumPy's BLAS for one thread before NumPy
# starts (in Jupyter: restart the kernel before running from the top), so that a timing does
# not depend on how many cores other programs leave free.

# %%
import os

for _thread_setting in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_thread_setting, "1")

# %%
#| default_exp perf.benchmarking

# %%
#| export
import importlib.util
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import count_parameters
from tinytorch.core.tensor import Tensor, as_int, to_host
from tinytorch.perf.profiling import measure_latency
from tinytorch.perf.quantization import checkpoint_bytes
from tinytorch.plotting import pyplot

# %% [markdown]
# ## 1. The environment: what a number needs beside it
#
# The same code runs at very different speeds on different machines, with different BLAS
# libraries (OpenBLAS, MKL, Accelerate), with one BLAS thread or sixteen, on a GPU or not.
# `environment()` collects these facts (given code: nothing to write here). The BLAS library
# and its thread count come from `threadpoolctl`, which asks the loaded library itself, so
# what it reports is what NumPy really uses, not what an environment variable asked for.

# %%
#| export
def _cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _blas() -> str:
    """NumPy's BLAS library, its version and its thread count, as the loaded library reports them."""
    from threadpoolctl import threadpool_info

    found = [pool for pool in threadpool_info() if pool.get("user_api") == "blas"]
    if not found:
        return "unknown"
    return "; ".join(f"{pool.get('internal_api', '?')} {pool.get('version') or ''}".strip()
                     + f" ({pool.get('num_threads', '?')} thread{'' if pool.get('num_threads') == 1 else 's'})"
                     for pool in found)


def _gpu() -> str:
    """The GPU CuPy would use ("none" without CuPy or without a visible GPU)."""
    if importlib.util.find_spec("cupy") is None:
        return "none"
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    except Exception as err:  # CuPy installed but no driver or no device: say so, do not fail
        return f"none ({type(err).__name__})"
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} ({props['totalGlobalMem'] / 2**30:.0f} GiB), CuPy {cupy.__version__}"


def environment() -> dict[str, str]:
    """The facts a measurement needs beside it, as strings.

    Keys: cpu (model name), cores (logical CPUs), blas (library, version, threads),
    python, numpy, tinytorch, torch (its version, or "not installed"; read from the installed
    package's metadata, so PyTorch is never imported just to ask), gpu (name, memory and CuPy
    version, or "none"), date (UTC).
    """
    import tinytorch

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return {
        "cpu": _cpu_name(),
        "cores": str(os.cpu_count()),
        "blas": _blas(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tinytorch": tinytorch.__version__,
        "torch": torch_version,
        "gpu": _gpu(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }

# %%
for key, value in environment().items():
    print(f"{key:>9}: {value}")

# %% [markdown]
# ## 2. One number is not a measurement: the bootstrap
#
# Time the same function twenty times and you get twenty different numbers: the CPU's clock
# changes speed, caches are warm or cold, another program takes the core for a moment. We
# report the **median** (an unlucky reading that took ten times longer moves a mean a lot and
# a median not at all) — but how sure are we of that median?
#
# The **bootstrap** answers without any formula: pretend the readings you have *are* the
# distribution, draw `n` readings from them **with replacement** (some twice, some not at
# all), and take the median of that resample. Do it 2,000 times. The spread of those 2,000
# medians is how much the median would move if you measured again; the middle 95% of them is
# the **95% confidence interval** (the *percentile bootstrap*: the 2.5th and 97.5th
# percentiles).
#
# The whole thing is one array operation: an index array of shape `(resamples, n)` picks the
# resamples, `np.median(..., axis=1)` takes all 2,000 medians at once. No Python loop.

# %%
#| export
def bootstrap_ci(samples: Any, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """(low, high): the percentile-bootstrap confidence interval of the median of `samples`.

    samples    -- the readings, any shape (flattened), at least one, all finite
    confidence -- the interval's probability, in (0, 1): 0.95 keeps the middle 95%
    resamples  -- how many resamples (at least 1)
    seed       -- the resampling is drawn from np.random.default_rng(seed): the same call
                  gives the same interval

    Steps (the exact recipe: the tests recompute it):
      x = the samples as a float64 1-D array, n = len(x)
      rng = np.random.default_rng(seed)
      idx = rng.integers(0, n, size=(resamples, n))        # WITH replacement
      medians = np.median(x[idx], axis=1)                  # (resamples,): one median per row
      tail = (1 - confidence) / 2                          # half outside on each side
      low, high = np.quantile(medians, [tail, 1 - tail])
    Return (float(low), float(high)). With one sample, the interval is that sample twice.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"bootstrap_ci: samples must be at least one finite number, got {x.size} values "
                         f"({int(np.sum(~np.isfinite(x)))} not finite).")
    resamples = as_int(resamples, "bootstrap_ci: resamples", minimum=1)  # 2.5 was taken as 2, inf crashed
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"bootstrap_ci: confidence must be in (0, 1) and resamples >= 1, "
                         f"got {confidence} and {resamples}.")
    ### BEGIN SOLUTION
    n = x.size
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(int(resamples), n))
    medians = np.median(x[idx], axis=1)
    tail = (1.0 - float(confidence)) / 2.0
    low, high = np.quantile(medians, [tail, 1.0 - tail])
    return float(low), float(high)
    ### END SOLUTION

# %%
def bootstrap_slip(got: tuple, readings: np.ndarray, confidence: float = 0.95, resamples: int = 2000,
                   seed: int = 0) -> str:
    """The classic bootstrap slip whose interval equals `got`, in words ("" when none does)."""
    n, tail = readings.size, (1 - confidence) / 2
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    medians = np.median(readings[idx], axis=1)
    swapped = np.random.default_rng(seed).integers(0, n, size=(n, resamples))
    short = np.random.default_rng(seed).integers(0, n - 1, size=(resamples, n)) if n > 1 else idx
    candidates = {
        "the medians were taken over axis 0 (one per position, across the resamples): take one median per "
        "resample, np.median(x[idx], axis=1)": np.quantile(np.median(readings[idx], axis=0), [tail, 1 - tail]),
        "the index array has shape (n, resamples): it must be (resamples, n), one resample of n readings per row":
            np.quantile(np.median(readings[swapped], axis=1), [tail, 1 - tail]),
        "np.percentile was given fractions (it takes 2.5 and 97.5): use np.quantile(medians, [tail, 1 - tail])":
            np.percentile(medians, [tail, 1 - tail]),
        "the upper bound is the `confidence` quantile: the interval keeps the middle, so it is 1 - tail, "
        "with tail = (1 - confidence) / 2 on EACH side": np.quantile(medians, [tail, confidence]),
        "rng.integers(0, n - 1, ...) never draws the last reading: the high end is already excluded, "
        "rng.integers(0, n, ...)": np.quantile(np.median(readings[short], axis=1), [tail, 1 - tail]),
        "this is the interval of the mean: take the interval of the MEDIAN (np.median of each resample)":
            np.quantile(readings[idx].mean(axis=1), [tail, 1 - tail]),
        "the interval cuts 1 - confidence off each side: cut (1 - confidence) / 2 on EACH side":
            np.quantile(medians, [1 - confidence, confidence]),
        "every resample has the same median (a permutation of the readings): resample WITH replacement "
        "(rng.integers)": np.full(2, np.median(readings)),
    }
    named = [words for words, wrong in candidates.items() if np.allclose(got, wrong, rtol=1e-12, atol=0)]
    return named[0] if named else ""


def test_unit_bootstrap_ci():
    # 101 continuous readings: every classic slip gives its own interval, so the first check can name it
    wide = np.random.default_rng(1).exponential(1.0, size=101)
    got = bootstrap_ci(wide, resamples=200)
    expected = np.quantile(np.median(wide[np.random.default_rng(0).integers(0, 101, size=(200, 101))], axis=1),
                           [0.025, 0.975])
    if not np.allclose(got, expected):
        slip = bootstrap_slip(got, wide, resamples=200)
        assert not slip, f"101 readings, 200 resamples: expected the interval {tuple(map(float, expected))}, got {got}: {slip}"
    readings = np.array([10.0, 11.0, 9.0, 10.5, 10.2, 9.8, 30.0, 10.1, 9.9, 10.3])
    low, high = bootstrap_ci(readings)
    rng = np.random.default_rng(0)
    expected = np.quantile(np.median(readings[rng.integers(0, 10, size=(2000, 10))], axis=1), [0.025, 0.975])
    median = float(np.median(readings))
    assert low <= median <= high, f"the interval [{low}, {high}] must contain the median {median}"
    assert high < 12.0, (f"high = {high}: one slow reading (30) must not drag the interval of the MEDIAN "
                         "up (an interval of the mean would be)")
    assert high - low > 0, "the interval has width 0: resample WITH replacement (rng.integers), not a permutation"
    assert bootstrap_ci(readings) == (low, high), \
        "the same seed must give the same interval: make the generator with np.random.default_rng(seed)"
    assert np.allclose((low, high), expected), (f"expected {tuple(expected)}, got {(low, high)}: follow the recipe — np.random.default_rng(seed), "
                                                "indices of shape (resamples, n), (1 - confidence) / 2 on EACH side")
    # Ten readings give few distinct medians, so two generators can agree by chance; 101 continuous
    # readings and three seeds cannot: each interval must be the recipe's for ITS seed.
    for seed in (0, 1, 2):
        idx = np.random.default_rng(seed).integers(0, wide.size, size=(200, wide.size))
        expected = np.quantile(np.median(wide[idx], axis=1), [0.025, 0.975])
        got = bootstrap_ci(wide, resamples=200, seed=seed)
        assert np.allclose(got, expected), (f"seed={seed}: expected {tuple(expected)}, got {got}: make the generator "
                                            "with np.random.default_rng(seed), so the same seed gives the same interval")
    print("✓ bootstrap_ci: the interval of the median, by resampling with replacement")


test_unit_bootstrap_ci()

# %% [markdown]
# **Predict, then run.** With 10 readings the interval is wide; with 1,000 from the same
# distribution it is narrower. By how much? (For a median, roughly like `1/√n`.) Run it:

# %%
noise = np.random.default_rng(1)
for n in (10, 100, 1000):
    readings = 1.0 + noise.exponential(0.1, size=n)  # a lower bound plus positive noise, as timings are
    low, high = bootstrap_ci(readings)
    print(f"n = {n:>4}: median {np.median(readings):.4f}, 95% interval [{low:.4f}, {high:.4f}], width {high - low:.4f}")

# %% [markdown]
# ## 3. A measurement: a name, the raw readings, a unit
#
# A `Measurement` keeps the raw readings (so anyone can re-analyse them), their unit, and the
# median with its interval (given code). Seconds print as milliseconds; rates (a unit ending
# in `/s`, such as `tokens/s`) are *better when higher*, which `compare` needs to know.

# %%
#| export
@dataclass
class Measurement:
    """Readings of one variant: `samples` (1-D float64 array, in `unit`: "s", "tokens/s", ...),
    their `median` and the bootstrap confidence interval of the median `[low, high]`."""

    name: str
    samples: np.ndarray
    unit: str = "s"
    confidence: float = 0.95
    median: float = field(init=False)
    low: float = field(init=False)
    high: float = field(init=False)

    def __post_init__(self) -> None:
        self.samples = np.asarray(self.samples, dtype=np.float64).ravel()
        self.median = float(np.median(self.samples))
        self.low, self.high = bootstrap_ci(self.samples, self.confidence)

    @property
    def higher_is_better(self) -> bool:
        """True for rates (units ending in "/s"): more tokens per second is better."""
        return self.unit.endswith("/s")

    def percentile(self, q: float) -> float:
        """The q-th percentile of the readings (q in 0..100; numpy's linear interpolation)."""
        return float(np.percentile(self.samples, q))

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p90(self) -> float:
        return self.percentile(90)

    def _format(self, value: float) -> str:
        return f"{value * 1e3:.3f} ms" if self.unit == "s" else f"{value:.4g} {self.unit}"

    def __str__(self) -> str:
        return (f"{self.name}: {self._format(self.median)} [{self._format(self.low)}, {self._format(self.high)}] "
                f"({len(self.samples)} readings, {self.confidence:.0%} interval of the median)")

# %% [markdown]
# ### Interleaving: every variant sees the same machine
#
# The naive benchmark times variant A twenty times, then variant B twenty times. If another
# program starts in the middle, or the CPU heats up and slows down, B pays for it and A does
# not: the "difference" is the machine's. The fix is to **interleave**: round 1 runs A then
# B, round 2 runs B then A, and so on — a **rotating order**, so that neither variant is
# always the one that runs right after the other (caches left warm or cold by the previous
# call favour whichever comes second).
#
# Before any reading, every variant is called `warmup` times (also interleaved): the first
# calls pay for things later calls do not (memory the allocator has not seen yet, code paths
# never run), and they are not what we want to measure.
#
# On a GPU, work is queued and the call returns before it finishes; `measure` waits for the
# queued CuPy work (given: `_synchronizer()`) after every timed call, before reading the
# clock, and once after the whole warm-up, so that the first reading does not pay for it.

# %%
#| export
def _synchronizer() -> Callable[[], None]:
    """A function that waits for queued GPU work: CuPy's, when CuPy is imported and sees a GPU; else nothing."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return lambda: cupy.cuda.Device().synchronize()
        except Exception:  # CuPy without a driver: there is no GPU work to wait for
            pass
    return lambda: None


def measure(variants: dict[str, Callable[[], object]], repeats: int = 15, warmup: int = 3,
            clock: Callable[[], float] = time.perf_counter, sync: Callable[[], None] | None = None,
            unit: str = "s") -> dict[str, Measurement]:
    """Time each variant (a function of no arguments) `repeats` times, interleaved.

    variants -- name -> fn; at least one
    clock    -- read before and after each call (seconds): time.perf_counter (wall clock);
                time.process_time counts only this process's CPU time
    sync     -- called after every timed call, before the clock is read, and once after the
                whole warm-up, so that no warm-up work is still queued when the first reading
                starts (None: `_synchronizer()`, which waits for CuPy's queued work on a GPU)

    Steps:
      names = list(variants)
      warm-up: `warmup` rounds, each calling every variant once (in the order of names), untimed;
               then sync() once
      then for round r in 0 .. repeats-1:
          order = names rotated left by r (r % len(names)): round 0 A,B,C; round 1 B,C,A; ...
          for each name in order: start = clock(); variants[name](); sync(); reading = clock() - start
    Return {name: Measurement(name, its `repeats` readings in round order, unit)}, in the order
    of `variants`. Warm-up calls are never readings.
    """
    names = list(variants)
    repeats = as_int(repeats, "measure: repeats", minimum=1)
    warmup = as_int(warmup, "measure: warmup", minimum=0)
    if not names or int(repeats) < 1 or int(warmup) < 0:
        raise ValueError(f"measure: needs at least one variant, repeats >= 1 and warmup >= 0; "
                         f"got {len(names)} variants, repeats={repeats}, warmup={warmup}.")
    wait = _synchronizer() if sync is None else sync
    ### BEGIN SOLUTION
    for _ in range(int(warmup)):
        for name in names:
            variants[name]()
    wait()
    readings: dict[str, list[float]] = {name: [] for name in names}
    for r in range(int(repeats)):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            variants[name]()
            wait()
            readings[name].append(clock() - start)
    return {name: Measurement(name, np.array(readings[name]), unit) for name in names}
    ### END SOLUTION

# %% [markdown]
# The test drives `measure` with module 14's `FakeClock`: each variant advances the fake clock
# by a known amount, so the readings are known exactly, and a log shows the order of calls.

# %%
from tinytorch.perf.profiling import FakeClock


def measure_readings_slip(got: dict, rounds: list, seconds: dict) -> str:
    """Why measure's readings `got` ({name: readings}) are not one reading of `seconds[name]` per round,
    told from the timed rounds' call order `rounds` (lists of names)."""
    names = list(seconds)
    if all(len(got[name]) == len(rounds) * len(names) for name in names) and \
            all(np.array_equal(got[name], got[names[0]]) for name in names):
        return (f"every variant has the same {len(got[names[0]])} readings: they share ONE list "
                "(dict.fromkeys(names, []) does that); make one list per name, {name: [] for name in names}")
    cumulative = {name: [] for name in names}
    by_position = {name: [] for name in names}
    for order in rounds:
        elapsed = 0.0
        for position, name in enumerate(order):
            elapsed += seconds[name]
            cumulative[name].append(elapsed)
            by_position[names[position]].append(seconds[name])
    if all(np.array_equal(got[name], cumulative[name]) for name in names):
        return ("each reading includes the variants that ran before it in the round: read the clock (start = "
                "clock()) right before EACH call, not once per round")
    if all(np.array_equal(got[name], by_position[name]) for name in names):
        return ("each reading was filed under the variant at the same position in `names`, not the variant that "
                "ran: append it to readings[name] of the name just called")
    return "the clock was read around the wrong call"


def test_unit_measure():
    fake, calls = FakeClock(), []

    def variant(name, seconds, first_seconds):
        def run():
            calls.append(name)
            fake.advance(first_seconds if calls.count(name) == 1 else seconds)
        return run

    seconds = {"A": 1.0, "B": 2.0, "C": 3.0}
    result = measure({name: variant(name, s, 50.0) for name, s in seconds.items()}, repeats=4, warmup=2, clock=fake)
    assert list(result) == ["A", "B", "C"], f"keys in the order of the variants, got {list(result)}"
    assert len(calls) == 18, (f"2 warm-up rounds + 4 timed rounds of 3 variants = 18 calls, got {len(calls)}: "
                              "call every variant `warmup` times before the first reading")
    timed = "".join(calls[6:])
    rounds = [list(timed[3 * r:3 * r + 3]) for r in range(4)]
    for name, want in seconds.items():
        got = result[name].samples
        assert len(got) == 4 and 50.0 not in got, (
            f"{name}: 4 readings of {want} s, got {list(map(float, got))}: "
            + ("the warm-up calls were kept as readings (the first call took 50 s): time only the `repeats` rounds "
               "after the warm-up" if 50.0 in got or len(got) in (5, 6) else
               measure_readings_slip({n: result[n].samples for n in seconds}, rounds, seconds)
               if len(got) == 12 else "one reading per round"))
        assert np.all(got == want), (f"{name}: every reading should be {want} s, got {got}: "
                                     + measure_readings_slip({n: result[n].samples for n in seconds}, rounds, seconds))
    warm = "".join(calls[:6])
    assert warm == "ABCABC", (
        f"warm-up: 2 rounds, each calling every variant once (ABCABC), got {warm}"
        + (": each variant was warmed up `warmup` times in a row; warm up in rounds, as the timed rounds run"
           if warm == "AABBCC" else ""))
    assert timed == "ABC" "BCA" "CAB" "ABC", (
        f"every round must call each variant once (interleaved) and rotate the order each round (ABC, BCA, CAB, ...), "
        f"got {' '.join(timed[3 * r:3 * r + 3] for r in range(4))}"
        + (": the order was rotated RIGHT; rotate left by r, names[r:] + names[:r]" if timed == "ABC" "CAB" "BCA" "ABC"
           else ""))
    print("✓ measure: warm-up first, then interleaved rounds in a rotating order")


test_unit_measure()

# %% [markdown]
# ## 4. Comparing two measurements
#
# Two medians always differ. The question is whether the difference is larger than what
# measuring again would change. `compare(a, b)` reports:
#
# * `ratio` = median of a / median of b (for times: above 1 means a is slower);
# * `difference` = median of a − median of b, with its own bootstrap interval
#   `[difference_low, difference_high]` (both medians resampled at once; given code);
# * `verdict`: exactly `"no measurable difference"` when the two intervals `[low, high]`
#   **overlap**; otherwise who wins: for times the smaller median is faster, for rates
#   (`higher_is_better`, a unit ending in "/s") the larger one, and for any other unit
#   (bytes, say) the smaller median is *better* ("faster" is only for "s" and "/s").
#
# Overlapping 95% intervals is a cautious test (two intervals can overlap a little while the
# difference is still real): we prefer "we cannot tell" to a false claim.

# %%
#| export
@dataclass
class Comparison:
    """The comparison of two Measurements of the same unit (see `compare`)."""

    a: Measurement
    b: Measurement
    ratio: float
    difference: float
    difference_low: float
    difference_high: float
    verdict: str

    @property
    def winner(self) -> str | None:
        """The name of the better variant, or None when there is no measurable difference."""
        return None if self.verdict == NO_DIFFERENCE else self.verdict.split(" is ")[0]

    def __str__(self) -> str:
        return (f"{self.a.name} / {self.b.name} = {self.ratio:.3f}x; difference {self.a._format(self.difference)} "
                f"[{self.a._format(self.difference_low)}, {self.a._format(self.difference_high)}]: {self.verdict}")


NO_DIFFERENCE = "no measurable difference"


def difference_ci(a: Measurement, b: Measurement, confidence: float = 0.95, resamples: int = 2000,
                  seed: int = 0) -> tuple[float, float]:
    """The percentile-bootstrap interval of median(a) − median(b): both resampled at once (vectorised)."""
    rng = np.random.default_rng(seed)
    med_a = np.median(a.samples[rng.integers(0, a.samples.size, size=(resamples, a.samples.size))], axis=1)
    med_b = np.median(b.samples[rng.integers(0, b.samples.size, size=(resamples, b.samples.size))], axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(med_a - med_b, [tail, 1.0 - tail])
    return float(low), float(high)


def ranking(measurements: dict[str, Measurement] | list[Measurement]) -> list[str]:
    """The names, best first by median: the smallest time first, or the largest rate for rates."""
    items = list(measurements.values()) if isinstance(measurements, dict) else list(measurements)
    return [m.name for m in sorted(items, key=lambda m: -m.median if m.higher_is_better else m.median)]


def compare(a: Measurement, b: Measurement) -> Comparison:
    """Compare two Measurements of the same unit.

    ratio      -- a.median / b.median
    difference -- a.median - b.median, with difference_ci(a, b) as its interval (given)
    verdict    -- NO_DIFFERENCE ("no measurable difference") when the intervals overlap
                  (a.low <= b.high and b.low <= a.high); otherwise the better one wins:
                  for rates (a.higher_is_better: the unit ends in "/s") the LARGER median,
                  for every other unit (times "s", bytes, ...) the SMALLER median;
                  f"{winner.name} is faster" when the unit is "s" or a rate ("/s"),
                  f"{winner.name} is better" for any other unit ("small is better" in bytes).
    Raises ValueError when the units differ.
    """
    if a.unit != b.unit:
        raise ValueError(f"compare: {a.name} is in {a.unit!r} and {b.name} in {b.unit!r}; compare the same unit.")
    low, high = difference_ci(a, b)
    ### BEGIN SOLUTION
    ratio = a.median / b.median
    if a.low <= b.high and b.low <= a.high:
        verdict = NO_DIFFERENCE
    else:
        a_wins = a.median > b.median if a.higher_is_better else a.median < b.median
        winner = a if a_wins else b
        word = "faster" if a.unit == "s" or a.higher_is_better else "better"
        verdict = f"{winner.name} is {word}"
    return Comparison(a, b, float(ratio), a.median - b.median, low, high, verdict)
    ### END SOLUTION

# %%
def classic_verdicts(a: Measurement, b: Measurement) -> dict:
    """{the slip in words: the verdict compare(a, b) gives with it} for the classic verdict slips."""
    def verdict(overlap: bool, swapped: bool = False, rate_word: str = "faster", rate_lower_wins: bool = False) -> str:
        if overlap:
            return NO_DIFFERENCE
        a_wins = (a.median > b.median) != rate_lower_wins if a.higher_is_better else a.median < b.median
        winner = (b if a_wins else a) if swapped else (a if a_wins else b)
        word = "faster" if a.unit == "s" else rate_word if a.higher_is_better else "better"
        return f"{winner.name} is {word}"

    both = a.low <= b.high and b.low <= a.high
    return {
        "only half of the overlap test: the intervals overlap when a.low <= b.high AND b.low <= a.high":
            verdict(a.low <= b.high),
        "'no measurable difference' means the two INTERVALS overlap (a.low <= b.high and b.low <= a.high), not "
        "that a's median lies in b's interval": verdict(b.low <= a.median <= b.high),
        "compare intervals, not medians: overlapping intervals are 'no measurable difference'": verdict(False),
        "intervals that touch overlap; use <= in the overlap test, not <": verdict(a.low < b.high and b.low < a.high),
        "the loser was named: the winner is the better median (the smaller time, the larger rate)":
            verdict(both, swapped=True),
        "a rate (a unit ending in /s) says 'faster', like seconds; only other units say 'better'":
            verdict(both, rate_word="better"),
        "for a rate (tokens/s) more is better: the larger median wins": verdict(both, rate_lower_wins=True),
    }


def compare_verdict_slip(pairs: list) -> str:
    """The classic slip that gives compare's verdicts on every (a, b, verdict it gave) of `pairs`; "" if none."""
    named = [words for words in classic_verdicts(*pairs[0][:2])
             if all(classic_verdicts(a, b)[words] == got for a, b, got in pairs)]
    return named[0] if named else ""


def test_unit_compare():
    fast = Measurement("fast", np.r_[np.linspace(1.0, 1.1, 14), 1.6])  # one slow reading: its mean is not its median
    slow = Measurement("slow", np.linspace(2.0, 2.2, 15))
    result = compare(slow, fast)
    ratio = slow.median / fast.median
    assert abs(result.ratio - ratio) < 1e-12, (
        f"ratio = median(a) / median(b) = {ratio}, got {result.ratio}"
        + (": that is the ratio of the MEANS; one slow reading moves a mean, not a median"
           if abs(result.ratio - slow.samples.mean() / fast.samples.mean()) < 1e-12 else ""))
    for a, b in ((slow, fast), (fast, slow)):
        got, want = compare(a, b).difference, a.median - b.median
        assert abs(got - want) < 1e-12, (
            f"compare({a.name}, {b.name}).difference: expected {want:+.4f}, got {got:+.4f}: "
            + ("its sign was lost (abs): " if abs(got - abs(want)) < 1e-12 else "")
            + "the difference is median(a) - median(b), a minus b, negative when a is the smaller")
    wide = Measurement("wide", np.linspace(1.0, 2.0, 15))  # interval about [1.29, 1.79], median 1.5
    narrow = Measurement("narrow", np.linspace(1.66, 1.74, 15))  # interval about [1.68, 1.72]: they overlap
    same = Measurement("same", np.linspace(1.02, 1.12, 15))
    low_rate = Measurement("low", np.linspace(100, 110, 9), unit="tokens/s")
    high_rate = Measurement("high", np.linspace(200, 210, 9), unit="tokens/s")
    expected = [(slow, fast, "fast is faster"), (fast, same, NO_DIFFERENCE), (wide, narrow, NO_DIFFERENCE),
                (low_rate, high_rate, "high is faster"), (high_rate, low_rate, "high is faster")]
    got = [(a, b, compare(a, b).verdict) for a, b, _ in expected]
    for (a, b, want), (_, _, verdict) in zip(expected, got):
        assert verdict == want, (
            f"compare({a.name} [{a.low:.3f}, {a.high:.3f}] {a.unit}, {b.name} [{b.low:.3f}, {b.high:.3f}]): expected "
            f"exactly {want!r}, got {verdict!r}: "
            + (compare_verdict_slip(got) or ("overlapping intervals are no measurable difference" if want == NO_DIFFERENCE
                                             else "the better median wins: the smaller time, the larger rate")))
    assert result.difference_low > 0, "slow − fast: the interval of the difference must exclude zero here"
    print(f"✓ compare: {result}")


test_unit_compare()

# %% [markdown]
# **Predict, then run.** Two functions: one multiplies two 64×64 matrices, the other does the
# same and then sleeps for 2 ms. Will the harness call them different? Will it call two
# *identical* functions different? Run it a few times.

# %%
a_matrix = np.random.default_rng(0).standard_normal((64, 64))
plain = lambda: a_matrix @ a_matrix  # noqa: E731
delayed = lambda: (a_matrix @ a_matrix, time.sleep(0.002))  # noqa: E731
twin = lambda: a_matrix @ a_matrix  # noqa: E731
timed = measure({"plain": plain, "delayed": delayed, "twin": twin}, repeats=15)
for m in timed.values():
    print(m)
print(compare(timed["delayed"], timed["plain"]))
print(compare(timed["twin"], timed["plain"]))

# %% [markdown]
# ## 5. Quality on held-out data, computed by the harness
#
# The course this one is modelled on scored models on random inputs against random labels.
# The number meant nothing. Ours are measured on the data the milestones hold out: the 359
# digits of the test split, and the last 10% of Tiny Shakespeare.
#
# Two rules keep a quality number honest:
#
# * **The harness computes it from the outputs.** `lm_window_losses` takes the model's
#   logits and computes the cross-entropy itself (in float64, with a stable log-sum-exp); it
#   never trusts a loss the model returns. A model that outputs random logits then scores
#   chance, whatever it claims: about `ln(vocab_size)` nats for a language model, about 10%
#   for ten digit classes.
# * **Every variant sees exactly the same examples.** The validation text is cut into fixed,
#   **non-overlapping** windows: window `i` is the tokens `i·context … (i+1)·context − 1` as
#   input and the same positions shifted by one as targets. No random batches, so running it
#   twice gives the same number to the last digit, and the difference between two variants is
#   the variants'.
#
# The model runs in evaluation mode (dropout off) and without recording a graph
# (`no_grad()`), and is put back into the mode it was in afterwards.
#
# You write `lm_window_losses`, which returns **one loss per window**; `lm_validation_loss`
# (given) is their mean. Keeping the windows apart is what lets us ask later whether two
# models *really* differ in quality: the validation set is a sample too, and
# `paired_difference(a, b)` (given) bootstraps the mean difference of two models' losses on the
# same windows.
#
# ### The loss of one position, from the logits
#
# First the loss itself. At one position the model's logits `z` (one score per class, `V` of
# them) and the true class `y` give the cross-entropy `−log softmax(z)[y] = logsumexp(z) − z_y`,
# the log-sum-exp of module 04. The harness computes it itself, in NumPy, from the raw logits:
#
# * **in float64**, whatever dtype the model computed in. The harness compares models whose
#   losses differ in the fourth digit; float32 arithmetic on logits in the thousands is off by
#   about that much;
# * **with each row's maximum subtracted first**, `logsumexp(z) = m + log Σ exp(z − m)` with
#   `m = max(z)`: `exp(1000)` overflows even float64, and a sharp, confident model (or one that
#   scales its logits up) must get its true loss, not `inf` or `nan`;
# * **at the target's logit** `z_y` (`np.take_along_axis`), not the largest one.
#
# You write `token_losses(logits, targets)`: logits `(..., V)` and integer targets `(...)` give
# one float64 loss per position, shape `(...)`. It is the course's one cross-entropy from raw
# logits: `lm_window_losses` averages it over each window, and module 20's judge over all the
# positions a submission was asked about.

# %%
#| export
def token_losses(logits: Any, targets: Any) -> np.ndarray:
    """−log softmax(logits)[target] at every position, in float64: logsumexp(row) − row[target].

    logits  -- (..., V): V class scores per position, any float dtype (Tensor, NumPy or CuPy array)
    targets -- (...): integer class ids in [0, V), logits' shape without its last axis
    Returns a float64 NumPy array of shape (...). Steps: z = the logits in float64; m = each row's
    max (keepdims); logsumexp = m + log(sum(exp(z − m))) over the last axis; the target's logit
    picked with np.take_along_axis(z, targets[..., None], axis=-1); loss = logsumexp − picked.
    ValueError (given) when the shapes do not fit.
    """
    z = np.asarray(to_host(logits.data if isinstance(logits, Tensor) else logits))
    t = np.asarray(to_host(targets.data if isinstance(targets, Tensor) else targets)).astype(np.int64)
    if z.ndim < 1 or t.shape != z.shape[:-1]:
        raise ValueError(f"token_losses: logits (..., V) and targets (...) with the same leading shape expected, "
                         f"got {z.shape} and {t.shape}.")
    ### BEGIN SOLUTION
    z = z.astype(np.float64)
    peak = z.max(axis=-1, keepdims=True)
    log_norm = peak[..., 0] + np.log(np.exp(z - peak).sum(axis=-1))
    picked = np.take_along_axis(z, t[..., None], axis=-1)[..., 0]
    return log_norm - picked
    ### END SOLUTION


# %%
import math


def token_loss_slip(got: np.ndarray, logits: np.ndarray, targets: np.ndarray) -> str:
    """The classic slip whose per-position losses of `logits` (..., V) against `targets` (...) are `got`,
    in words ("" if none): each slip is made on the same inputs and compared."""
    z = np.asarray(logits, dtype=np.float64)
    peak = z.max(axis=-1, keepdims=True)[..., 0]
    log_norm = peak + np.log(np.exp(z - peak[..., None]).sum(axis=-1))
    right = log_norm - np.take_along_axis(z, targets[..., None], axis=-1)[..., 0]
    slips = {
        "the max was subtracted inside exp but not added back: log Σ exp(z) = m + log Σ exp(z − m)": right - peak,
        "the sign is flipped: the loss is −log softmax(z)[target] = logsumexp(z) − z[target], positive": -right,
        "that is log base 2 (bits): the loss is in nats, the natural log": right / math.log(2),
        "pick the TARGET's logit, not the largest one": log_norm - peak,
    }
    got = np.asarray(got, dtype=np.float64)
    named = [words for words, wrong in slips.items()
             if got.shape == wrong.shape and np.allclose(got, wrong, rtol=0, atol=1e-9)
             and not np.allclose(wrong, right, rtol=0, atol=1e-9)]
    return named[0] if named else ""


def losses_of(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """token_losses(logits, targets), with NumPy's shape and index errors from inside it named as the axis slip
    they come from (the inputs here are valid, so the given shape check never speaks)."""
    try:
        return token_losses(logits, targets)
    except (ValueError, IndexError) as err:
        which = ("the target's logit was picked along another axis than the classes" if isinstance(err, IndexError)
                 else "the log-sum-exp (or the max) ran over another axis than the classes")
        raise AssertionError(
            f"logits {np.shape(logits)}, targets {np.shape(targets)} raised {type(err).__name__}: {err}: {which}; both "
            "run over the classes, the LAST axis (sum(axis=-1), take_along_axis(..., axis=-1))") from None


def test_unit_token_losses():
    uniform = np.zeros((2, 3, 4))
    targets = np.array([[0, 1, 2], [3, 0, 1]])
    got = losses_of(uniform, targets)
    assert np.shape(got) == (2, 3), f"one loss per position: expected shape (2, 3), got {np.shape(got)}"
    assert np.allclose(got, math.log(4), rtol=0, atol=1e-12), (
        f"uniform logits over 4 classes: expected ln 4 = {math.log(4):.6f} everywhere, got {got}: "
        + (token_loss_slip(got, uniform, targets) or "-log p(target)"))
    logits = np.array([[2.0, 0.0, -1.0]])
    expected = -(2.0 - math.log(math.exp(2) + 1 + math.exp(-1)))
    got = losses_of(logits, np.array([0]))
    assert abs(got[0] - expected) < 1e-12, (f"expected {expected:.6f}, got {got[0]}: "
                                            + (token_loss_slip(got, logits, np.array([0]))
                                               or "-log softmax(logits)[target]"))
    got = losses_of(logits, np.array([2]))
    assert abs(got[0] - (expected + 3.0)) < 1e-12, \
        f"target 2: expected {expected + 3:.6f}, got {got[0]}: pick the TARGET's logit, not the largest one"
    rng = np.random.default_rng(0)
    noisy = (rng.normal(size=(2, 8, 65)) * 3).astype(np.float32)
    picks = rng.integers(0, 65, size=(2, 8))
    z = noisy.astype(np.float64)
    exact = np.log(np.exp(z).sum(-1)) - np.take_along_axis(z, picks[..., None], -1)[..., 0]
    got = token_losses(noisy, picks)
    assert got.dtype == np.float64 and np.allclose(got, exact, rtol=0, atol=1e-12), \
        f"float32 logits: expected {exact.ravel()[:2]} in float64, got {got.ravel()[:2]} ({got.dtype}): compute in float64"
    huge = np.array([[1000.0, 0.0]], dtype=np.float32)
    got = token_losses(huge, np.array([1]))
    assert abs(got[0] - 1000.0) < 1e-9, \
        f"logits 1000 and 0, target 1: expected 1000, got {got[0]}: subtract each row's max before exp (it overflows)"
    print("✓ token_losses: ln V for uniform logits, the target's log-probability, float64, stable at logits of 1000")


test_unit_token_losses()

# %%
#| export
def _logits_of(output: Any) -> np.ndarray:
    """The logits from a model's output (a Tensor/array, or a (logits, loss) pair), as a host array."""
    if isinstance(output, tuple):
        output = output[0]
    return np.asarray(to_host(output.data if isinstance(output, Tensor) else output))


def _predicted_classes(logits: np.ndarray, first: int) -> np.ndarray:
    """The arg-max class of each row of logits (B, classes) -> (B,), for examples first … first + B − 1.
    ValueError naming those examples when a row holds NaN: a diverged model predicts nothing (NumPy's
    arg-max would call the first NaN the largest, and all-NaN rows would all predict class 0)."""
    broken = np.isnan(logits).any(axis=-1)
    if broken.any():
        bad = first + int(np.flatnonzero(broken.ravel())[0])
        raise ValueError(f"accuracy: the model's logits hold NaN for {int(broken.sum())} of examples {first}…"
                         f"{first + len(logits) - 1} (the first: example {bad}): a diverged model has no "
                         "prediction; check its weights (or the input) for NaN.")
    return logits.argmax(axis=-1)


def _window_cross_entropy(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """logits (B, T, V), targets (B, T) -> (B,): each window's mean of token_losses over its T positions."""
    z = np.asarray(logits)
    t = np.asarray(targets)
    if z.ndim != 3 or t.shape != z.shape[:2]:  # named here, not by NumPy's broadcast error below
        raise ValueError(f"lm_validation_loss: the model's logits have shape {z.shape} and the targets {t.shape}; "
                         "they need (B, T, V) and (B, T): one target per input position, the inputs shifted by one "
                         "(each window is context inputs and the context next characters)")
    return token_losses(z, t).mean(axis=-1)


class _evaluating:
    """`with _evaluating(model):` evaluation mode and no graph inside; the model's mode restored after."""

    def __init__(self, model: Any):
        self.model, self.was_training = model, getattr(model, "training", False)
        self.no_grad = no_grad()

    def __enter__(self) -> Any:
        if hasattr(self.model, "eval"):
            self.model.eval()
        self.no_grad.__enter__()
        return self.model

    def __exit__(self, *exc: Any) -> None:
        self.no_grad.__exit__(*exc)
        if hasattr(self.model, "train"):
            self.model.train(self.was_training)


def lm_window_losses(model: Any, tokens: Any, context: int, batch_size: int = 32,
                     max_batches: int | None = None) -> np.ndarray:
    """The mean cross-entropy (nats per token) of a language model on each window of held-out `tokens`.

    model      -- called as model(x) with x an int64 (B, context) array; returns logits
                  (B, context, V) or (logits, loss) as a GPT does (its loss is ignored)
    tokens     -- 1-D token ids (list, array or Tensor), at least context + 1 of them
    context    -- window length T
    batch_size -- windows per forward call; max_batches -- use only the first batches (None: all)

    Steps:
      n = (len(tokens) - 1) // context                    # whole, non-overlapping windows
      starts = np.arange(n) * context                      # window i: tokens[i*T : i*T + T]
      inputs = tokens[starts[:, None] + np.arange(T)]      # (n, T); targets: the same + 1
      keep the first max_batches * batch_size windows when max_batches is given
      with _evaluating(model):  (eval mode, no graph; mode restored afterwards; given)
          for each batch of batch_size windows: logits = _logits_of(model(x))   (given)
              its windows' losses: _window_cross_entropy(logits, y)   (given: (B,), float64)
    Return one loss per window: a float64 array of shape (number of windows,), in window order.
    """
    ids = np.asarray(to_host(tokens.data if isinstance(tokens, Tensor) else tokens), dtype=np.int64).ravel()
    context = int(context)
    batch_size = as_int(batch_size, "lm_window_losses: batch_size", minimum=1)
    if max_batches is not None:
        max_batches = as_int(max_batches, "lm_window_losses: max_batches", minimum=1)
    if context < 1 or ids.size < context + 1:
        raise ValueError(f"lm_window_losses: needs context >= 1 and at least context + 1 = {context + 1} "
                         f"tokens, got context={context} and {ids.size} tokens.")
    ### BEGIN SOLUTION
    n = (ids.size - 1) // context
    starts = np.arange(n) * context
    inputs = ids[starts[:, None] + np.arange(context)]
    targets = ids[starts[:, None] + np.arange(context) + 1]
    if max_batches is not None:
        inputs, targets = inputs[:int(max_batches) * batch_size], targets[:int(max_batches) * batch_size]
    losses = []
    with _evaluating(model):
        for first in range(0, len(inputs), batch_size):
            logits = _logits_of(model(inputs[first:first + batch_size]))
            losses.append(_window_cross_entropy(logits, targets[first:first + batch_size]))
    return np.concatenate(losses)
    ### END SOLUTION


def lm_validation_loss(model: Any, tokens: Any, context: int, batch_size: int = 32,
                       max_batches: int | None = None) -> float:
    """Mean cross-entropy (nats per token) of a language model on held-out `tokens`, in fixed,
    non-overlapping windows (see `lm_window_losses`): the mean of the windows' losses, which is
    the mean over tokens, since every window has `context` of them. Deterministic."""
    return float(np.mean(lm_window_losses(model, tokens, context, batch_size, max_batches)))


def paired_difference(a: Any, b: Any, confidence: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> tuple[float, float, float]:
    """(mean of a − b, low, high): the percentile-bootstrap interval of the mean difference of
    PAIRED scores — the same windows (or examples) scored by two models, a[i] and b[i]. Resampling
    the pairs (one index array (resamples, n)) keeps what is common to both models out of the
    interval: the windows that are hard for every model. The interval excluding 0 means the two
    models' quality measurably differs on this data."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.size != b.size or a.size == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(f"paired_difference: a and b must be paired scores, as many finite numbers each; got "
                         f"{a.size} and {b.size} values, {int(np.sum(~np.isfinite(a)) + np.sum(~np.isfinite(b)))} "
                         "not finite (a diverged model's NaN loss has no difference to measure).")
    resamples = as_int(resamples, "paired_difference: resamples", minimum=1)
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"paired_difference: confidence must be in (0, 1), got {confidence}.")
    diff = a - b
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, diff.size, size=(int(resamples), diff.size))].mean(axis=1)
    low, high = np.quantile(means, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return float(diff.mean()), float(low), float(high)


def accuracy(model: Any, X: Any, y: Any, batch_size: int = 256) -> float:
    """Fraction of the examples X (N, ...) whose arg-max logit equals the label y (N,).

    model(x) returns logits (B, classes) (or (logits, loss)); x is a Tensor slice of X (X is
    made a Tensor first when it is an array; a Tensor stays on its device). Runs under `_evaluating(model)`
    (eval mode, no graph, mode restored), `batch_size` examples per call; each batch's predictions are
    `_predicted_classes(logits, first)` (given: the arg-max per row; ValueError for NaN logits); returns
    (number correct) / N as a float — count correct answers per batch, divide once at the end.
    """
    x_all = X if isinstance(X, Tensor) else Tensor(np.asarray(X))  # a Tensor stays on its device
    labels = np.asarray(to_host(y.data if isinstance(y, Tensor) else y)).ravel()
    batch_size = as_int(batch_size, "accuracy: batch_size", minimum=1)  # -1 scored 0.0 without a call
    if len(x_all) != labels.size or labels.size == 0:
        raise ValueError(f"accuracy: X has {len(x_all)} examples and y {labels.size} labels; "
                         "give one label per example (and at least one).")
    ### BEGIN SOLUTION
    correct = 0
    with _evaluating(model):
        for first in range(0, labels.size, batch_size):
            logits = _logits_of(model(x_all[first:first + batch_size]))
            correct += int(np.sum(_predicted_classes(logits, first) == labels[first:first + batch_size]))
    return correct / labels.size
    ### END SOLUTION

# %% [markdown]
# The test checks both against hand-computed facts: a model whose logits are all equal
# predicts each of `V` tokens with probability `1/V`, so its loss is exactly `ln V`; a model
# that looks the answer up scores 100%; a model that outputs random numbers scores chance.

# %%
class RandomLogits:
    """A "model" that ignores its input and outputs random logits (seeded): it must score chance."""

    def __init__(self, classes: int, scale: float = 1.0, seed: int = 0):
        self.classes, self.scale, self.rng = classes, scale, np.random.default_rng(seed)

    def __call__(self, x):
        data = np.asarray(to_host(x.data if isinstance(x, Tensor) else x))
        # token ids (B, T) -> (B, T, classes); features (B, F) -> (B, classes)
        shape = data.shape if np.issubdtype(data.dtype, np.integer) else data.shape[:-1]
        return Tensor((self.scale * self.rng.standard_normal(shape + (self.classes,))).astype(np.float32))


def test_unit_quality_metrics():
    vocab, text = 7, np.arange(101) % 7  # 0 1 2 ... 6 0 1 ...: the next token is (token + 1) % 7
    uniform = lambda x: (Tensor(np.zeros(np.shape(x) + (vocab,), np.float32)), None)  # noqa: E731
    per_window = lm_window_losses(uniform, text, context=8, batch_size=5)  # batches of 5, 5 and 2 windows
    why = {(10,): "the last, smaller batch (2 windows) was never scored: range(0, n, batch_size) includes it",
           (5,): "only the first batch was scored: batch i is inputs[first:first + batch_size], its END offset by first "
                 "too (inputs[first:batch_size] is empty after the first batch)",
           (3,): "that is one loss per BATCH: keep each window's loss"}.get(np.shape(per_window), "")
    assert np.shape(per_window) == (12,), (f"(101 - 1) // 8 = 12 non-overlapping windows: expected one loss per "
                                           f"WINDOW, shape (12,), got {np.shape(per_window)}" + (f": {why}" if why else ""))
    try:
        exact = lm_window_losses(uniform, np.arange(96) % vocab, context=8, batch_size=5)
    except IndexError as err:
        raise AssertionError(f"96 tokens, context 8 raised IndexError ({err}): a window needs context + 1 tokens (its "
                             "targets reach one further), so there are (96 - 1) // 8 = 11 of them, "
                             "n = (len(tokens) - 1) // context") from None
    assert np.shape(exact) == (11,), f"96 tokens, context 8: (96 - 1) // 8 = 11 windows, got {np.shape(exact)}"
    capped = lm_window_losses(uniform, text, context=8, batch_size=5, max_batches=2)
    assert np.shape(capped) == (10,), (
        f"max_batches=2 with batch_size 5: the first 2 · 5 = 10 windows, got {np.shape(capped)}"
        + (": max_batches counts BATCHES, not windows (keep max_batches · batch_size windows)"
           if np.shape(capped) == (2,) else ""))
    loss = lm_validation_loss(uniform, text, context=8, batch_size=4)
    assert abs(loss - np.log(vocab)) < 1e-9, f"equal logits: the loss is ln(V) = {np.log(vocab):.6f}, got {loss}"

    def oracle(x):  # puts logit 20 on the true next token
        logits = np.zeros(np.shape(x) + (vocab,), np.float32)
        np.put_along_axis(logits, ((np.asarray(x) + 1) % vocab)[..., None], 20.0, axis=-1)
        return logits
    good = lm_validation_loss(oracle, text, context=8, batch_size=5)
    assert good < 1e-6, (f"a model that knows the next token scores ~0, got {good}: the targets must be the "
                         "inputs shifted by one position (tokens[i*T + 1 : i*T + T + 1])")
    noise = lm_validation_loss(RandomLogits(vocab, scale=0.01), text, context=8)
    assert abs(noise - np.log(vocab)) < 0.01, f"random (tiny) logits score chance ln(V), got {noise}"

    labels = np.arange(200) % 10
    features = np.eye(10, dtype=np.float32)[labels]  # one-hot: the logits ARE the answer
    identity = lambda x: x  # noqa: E731
    try:
        perfect = accuracy(identity, features, labels, batch_size=64)
    except ValueError as err:  # NumPy's message names shapes, not the slip: name it
        if "broadcast" not in str(err):
            raise
        if "(200,)" in str(err):
            raise AssertionError(
                f"batches of 64 examples, 200 labels raised {err!r}: each batch's predictions were compared with ALL "
                "the labels; compare them with the batch's own, labels[first:first + batch_size]") from None
        raise AssertionError(
            f"batches of 64 examples, logits (64, 10), labels (64,) raised {err!r}: one prediction per example is the "
            "argmax over the classes (axis=-1, the last axis), shape (64,); axis 0 is the batch") from None
    assert perfect == 1.0, f"a model outputting the answer scores 1.0, got {perfect}" + (
        ": only the last batch's correct answers (8 of 200) were counted; add every batch's count (correct += ...)"
        if perfect == 8 / 200 else "")
    chance = accuracy(RandomLogits(10), features, labels)
    assert 0.03 <= chance <= 0.17, f"random logits over 10 classes score about 0.1, got {chance}"
    print(f"✓ lm_validation_loss and accuracy: equal logits ln(V) = {loss:.4f}, oracle {good:.2g}, "
          f"random logits {noise:.4f} nats and {chance:.0%}")


test_unit_quality_metrics()

# %% [markdown]
# ## 6. Speed and size: latency, throughput, tokens per second, bytes
#
# Four numbers describe the cost of a model, each measured (given code, built on what you
# wrote and on module 14):
#
# * **latency at batch 1** — one example in, one answer out: what a user waits. We report
#   the median (p50) and the 90th percentile (p90): the p90 is the wait one request in ten
#   exceeds. `latency(fn, *args)` uses module 14's `measure_latency` and keeps its readings
#   as a `Measurement` (with `.p50`, `.p90`, `.percentile(q)`).
# * **throughput** — examples per second with a large batch: what a server pays per answer.
#   Batching spreads the fixed cost of each call (Python, the graph, small kernels) over many
#   examples.
# * **tokens per second of generation** — `generation_rate(model, prompt, new_tokens)`
#   times the whole `generate` call (greedy, batch 1, KV cache on), `repeats` times.
# * **size** — `parameter_count(model)` (the numbers the model stores: a quantized layer's
#   integer weights count as the weights they replace) and module 15's
#   `checkpoint_bytes(path or model)`, the bytes of module 07's checkpoint file on disk.
#
# FLOPs (module 14's `count_flops`) and peak memory (`peak_memory`) complete the picture.

# %%
#| export
def latency(fn: Callable[..., Any], *args: Any, warmup: int = 3, repeats: int = 20, name: str | None = None) -> Measurement:
    """Seconds per call of fn(*args): module 14's measure_latency (warm-up, CuPy synchronised),
    its readings kept as a Measurement (median with interval; `.p50`, `.p90`)."""
    timing = measure_latency(fn, *args, warmup=warmup, repeats=repeats)
    return Measurement(name or getattr(fn, "__name__", "fn"), np.array(timing.samples), "s")


def throughput(fn: Callable[..., Any], batch: Any, warmup: int = 2, repeats: int = 10,
               name: str | None = None) -> Measurement:
    """Examples per second of fn(batch): len(batch) / each latency reading (unit "examples/s")."""
    seconds = latency(fn, batch, warmup=warmup, repeats=repeats).samples
    return Measurement(name or getattr(fn, "__name__", "fn"), len(batch) / seconds, "examples/s")


def generation_rate(model: Any, prompt_tokens: Any, new_tokens: int = 256, repeats: int = 3, warmup: int = 1,
                    name: str | None = None) -> Measurement:
    """Tokens per second of model.generate(prompt (1, T), new_tokens, temperature=0) — greedy,
    batch 1, the whole call timed (wall clock, CuPy synchronised) — `repeats` readings after
    `warmup` untimed calls. Unit "tokens/s": new_tokens / seconds of each call."""
    prompt = np.asarray(to_host(prompt_tokens.data if isinstance(prompt_tokens, Tensor) else prompt_tokens),
                        dtype=np.int64).reshape(1, -1)
    run = lambda: model.generate(prompt, int(new_tokens), temperature=0.0)  # noqa: E731
    seconds = measure({"generate": run}, repeats=repeats, warmup=warmup)["generate"].samples
    return Measurement(name or type(model).__name__, int(new_tokens) / seconds, "tokens/s")


def parameter_count(model: Any) -> int:
    """The numbers a model stores as weights: every parameter's size, plus, for a quantized
    layer (a module with a `qweight` buffer), the in_features × out_features weights its
    integers stand for (packed int4 holds two in a byte). Masks, scales and zero points are
    bookkeeping, not weights."""
    total = count_parameters(model)  # module 03's: every parameter once (tied weights too)
    for module in model.modules():
        own = module.__dict__
        if "qweight" not in own:
            continue
        if hasattr(module, "in_features"):          # QuantizedLinear: a weight (in, out) and maybe a bias buffer
            total += int(module.in_features) * int(module.out_features)
            total += int(own["bias"].size) if isinstance(own.get("bias"), Tensor) else 0
        else:                                       # QuantizedEmbedding: a table (num, dim)
            total += int(module.num_embeddings) * int(module.embedding_dim)
    return total


# %% [markdown]
# ## 7. The Pareto front: which variants are worth keeping
#
# A variant is **dominated** when another variant is at least as good on every axis — quality
# and each cost — and strictly better on at least one. A dominated variant is never the right
# choice: the other one is better, whatever you care about. The variants left are the
# **Pareto front**: moving along it, you buy quality with latency or size.
#
# Quality may be "lower is better" (a loss) or "higher is better" (an accuracy); costs are
# always lower-is-better. Two identical rows do not dominate each other (neither is strictly
# better), so both stay.

# %%
#| export
def pareto_front(rows: list[dict], quality: str, costs: list[str], higher_quality_is_better: bool = False) -> list[dict]:
    """The rows no other row dominates, in their original order.

    rows    -- dicts holding at least the keys `quality` and each of `costs` (numbers)
    quality -- the quality key: lower is better (a loss) unless higher_quality_is_better
    costs   -- cost keys (latency, bytes, ...): lower is better
    Row j dominates row i when j is <= i on every axis and < on at least one, after turning
    quality into "lower is better" (negate it when higher_quality_is_better).
    Vectorised: build values (n, 1 + len(costs)), compare every pair at once by broadcasting
    (n, 1, k) against (1, n, k); no Python loop over pairs.
    """
    if not rows:
        return []
    missing = [key for key in [quality, *costs] if any(key not in row for row in rows)]
    if missing:
        raise ValueError(f"pareto_front: some rows lack {missing}; every row needs {[quality, *costs]}.")
    for row in rows:  # NaN compares False with everything: such a row would be dominated by none
        for key in [quality, *costs]:
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or np.isnan(value):
                raise ValueError(f"pareto_front: row {row.get('name', rows.index(row))!r} has {key} = {value!r}; "
                                 "every quality and cost must be a number, not NaN (drop a diverged variant first).")
    ### BEGIN SOLUTION
    values = np.array([[row[quality], *(row[c] for c in costs)] for row in rows], dtype=np.float64)
    if higher_quality_is_better:
        values[:, 0] = -values[:, 0]
    other, this = values[None, :, :], values[:, None, :]          # [i, j]: row j against row i
    dominated = (np.all(other <= this, axis=2) & np.any(other < this, axis=2)).any(axis=1)
    return [row for row, out in zip(rows, dominated) if not out]
    ### END SOLUTION


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:.5g}"
    return str(value)


def pareto_table(rows: list[dict], quality: str, costs: list[str], higher_quality_is_better: bool = False,
                 columns: list[str] | None = None) -> str:
    """A Markdown table of every row (`columns`, default: name, quality, costs) and a last
    column "Pareto": "✓" for the rows on the front, "dominated" for the others."""
    front = pareto_front(rows, quality, costs, higher_quality_is_better)
    keys = columns or ["name", quality, *costs]
    lines = ["| " + " | ".join([*keys, "Pareto"]) + " |", "|" + "---|" * (len(keys) + 1)]
    for row in rows:
        mark = "✓" if any(row is kept for kept in front) else "dominated"
        lines.append("| " + " | ".join([*(_cell(row.get(k, "")) for k in keys), mark]) + " |")
    return "\n".join(lines)


def plot_pareto(rows: list[dict], quality: str, cost: str, path: Any = None, higher_quality_is_better: bool = False,
                title: str = "", dpi: int = 100):
    """Quality against one cost: every row a labelled point, the front joined by a line.
    Returns the figure; saves a PNG at `path` when given (module 02's pyplot(): the Agg backend
    where no window can open)."""
    plt = pyplot()

    front = sorted(pareto_front(rows, quality, [cost], higher_quality_is_better), key=lambda r: r[cost])
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.scatter([r[cost] for r in rows], [r[quality] for r in rows], color="tab:gray", label="variants")
    ax.plot([r[cost] for r in front], [r[quality] for r in front], "o-", color="tab:red", label="Pareto front")
    costs = [r[cost] for r in rows]
    if min(costs) > 0 and max(costs) / min(costs) > 20:
        ax.set_xscale("log")
    ax.autoscale_view()  # the final limits, so that label positions can be compared below
    to_axes = ax.transData + ax.transAxes.inverted()  # data -> fractions of the axes (log scale included)
    placed = []
    for r in sorted(rows, key=lambda r: r[cost]):
        x, y = to_axes.transform((r[cost], r[quality]))
        crowd = sum(abs(x - px) < 0.15 and abs(y - py) < 0.06 for px, py in placed)  # labels that would overlap
        placed.append((x, y))
        ax.annotate(str(r.get("name", "")), (r[cost], r[quality]), textcoords="offset points",
                    xytext=(5, 4 - 11 * crowd), fontsize=8)  # each crowded label one line lower
    ax.set_xlabel(f"{cost} (lower is better)")
    ax.set_ylabel(f"{quality} ({'higher' if higher_quality_is_better else 'lower'} is better)")
    ax.set_title(title or f"{quality} against {cost}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=dpi, metadata={"Software": None})
    return fig

# %%
def pareto_slip(got: list, rows: list, quality: str, costs: list, higher_quality_is_better: bool = False) -> str:
    """The classic pareto_front slip that keeps the names `got` of `rows`, in words ("" when none does)."""
    values = np.array([[row[quality], *(row[c] for c in costs)] for row in rows], dtype=np.float64)
    flipped = values.copy()
    if higher_quality_is_better:
        flipped[:, 0] = -flipped[:, 0]
    other, this = flipped[None, :, :], flipped[:, None, :]
    no_worse, better = np.all(other <= this, axis=2), np.any(other < this, axis=2)
    kept = lambda dominated: [row["name"] for row, out in zip(rows, dominated) if not out]  # noqa: E731
    candidates = {
        "the rows that dominate another were removed, not the dominated ones: dominated[i, j] says row j beats "
        "row i, so reduce over j, the OTHER rows (.any(axis=1))": kept((no_worse & better).any(axis=0)),
        "a row was dropped for being beaten on ONE axis: it is dominated only when another row is no worse on "
        "EVERY axis (np.all(other <= this)) and better on at least one": kept(better.any(axis=1)),
        "identical rows do not dominate each other: a dominating row must also be strictly better somewhere "
        "(np.any(other < this))": kept((no_worse & ~np.eye(len(rows), dtype=bool)).any(axis=1)),
        "with accuracy HIGHER is better: negate the quality column only when higher_quality_is_better":
            kept((np.all(values[None] <= values[:, None], axis=2) & np.any(values[None] < values[:, None], axis=2))
                 .any(axis=1)),
        "every column was negated: only the quality turns around (values[:, 0] = -values[:, 0]); costs stay "
        "lower-is-better": kept((np.all(-values[None] <= -values[:, None], axis=2)
                                 & np.any(-values[None] < -values[:, None], axis=2)).any(axis=1)),
        "the pairs were not all compared: values[None, :, :] (1, n, k) against values[:, None, :] (n, 1, k) "
        "broadcasts to (n, n, k), one [i, j] per pair; a (n, 1) operand gives a (1, n) mask, one row's answer":
            kept((np.all(other <= flipped[:, None, 0], axis=2)
                  & np.any(other < flipped[:, None, 0], axis=2)).any(axis=1)),
    }
    named = [words for words, names in candidates.items() if names == got]
    return named[0] if named else ""


def test_unit_pareto_front():
    rows = [{"name": "worse", "loss": 1.6, "ms": 3.0}, {"name": "big", "loss": 1.0, "ms": 10.0},
            {"name": "small", "loss": 1.5, "ms": 2.0}, {"name": "twin", "loss": 1.5, "ms": 2.0}]
    names = [r["name"] for r in pareto_front(rows, "loss", ["ms"])]
    assert names == ["big", "small", "twin"], (f"expected ['big', 'small', 'twin'], got {names}: " + (
        pareto_slip(names, rows, "loss", ["ms"])
        or "'worse' is dominated by 'small'; identical rows do not dominate each other"))
    rows_acc = [{"name": "a", "acc": 0.9, "ms": 5.0}, {"name": "b", "acc": 0.8, "ms": 6.0},
                {"name": "c", "acc": 0.9, "ms": 7.0}]
    names = [r["name"] for r in pareto_front(rows_acc, "acc", ["ms"], higher_quality_is_better=True)]
    assert names == ["a"], (f"with accuracy higher is better, 'a' dominates 'b' (more accurate and faster) and "
                            f"'c' (as accurate, faster): "
                            f"expected ['a'], got {names}: " + (
                                pareto_slip(names, rows_acc, "acc", ["ms"], True)
                                or "with accuracy HIGHER is better: negate it before comparing"))
    print("✓ pareto_front: the rows nothing beats on every axis")


test_unit_pareto_front()

# %% [markdown]
# ## 8. Which of the course's variants really differ? (digits)
#
# Now the harness on real models. We train the milestones' digits MLP (`64 → 128 → 64 → 10`)
# for a few seconds on the training split (`datasets/digits.npz`, the milestones' 80/20
# split with seed 0), and build three variants with modules 15 and 16:
#
# * `int8` — `quantize_model(mlp)`: int8 weights per channel, dequantized in the forward;
# * `pruned-80%` — `prune_global` of 80% of the Linear weights (masks; still dense products);
# * `low-rank-16` — the first layer replaced by `low_rank(linear, 16)`: two thinner products.
#
# For each: accuracy on the **359 test images**, latency at batch 1 (the four variants
# interleaved), throughput on the whole test split, parameters, checkpoint bytes, FLOPs per
# image (module 14's `count_flops`) and the peak memory of the batched forward
# (`peak_memory`).
#
# **Predict first:** which variant is the fastest at batch 1? Which has the smallest
# checkpoint? Will int8 be *faster* (NumPy has no fast int8 product: module 15)?

# %%
import copy

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import cross_entropy
from tinytorch.core.optimizers import AdamW
from tinytorch.perf.compression import low_rank, prune_global
from tinytorch.perf.profiling import count_flops, peak_memory
from tinytorch.perf.quantization import quantize_model
from threadpoolctl import threadpool_limits

DATASETS = Path("../../datasets")
if not DATASETS.exists():  # run from the repository root
    DATASETS = Path("datasets")
with np.load(DATASETS / "digits.npz", allow_pickle=False) as digits:
    features = digits["images"].reshape(len(digits["images"]), -1).astype(np.float32) / 16.0
    labels = digits["labels"].astype(np.int64)
order = np.random.default_rng(0).permutation(len(labels))  # the milestones' split
n_test = int(round(0.2 * len(labels)))
x_train, y_train, x_test, y_test = features[order[n_test:]], labels[order[n_test:]], features[order[:n_test]], labels[order[:n_test]]

mlp = Sequential(Linear(64, 128, seed=1), ReLU(), Linear(128, 64, seed=2), ReLU(), Linear(64, 10, seed=3))
optimizer, shuffle = AdamW(mlp.parameters(), lr=3e-3, weight_decay=0.01), np.random.default_rng(0)
for epoch in range(10):
    for batch in np.array_split(shuffle.permutation(len(y_train)), len(y_train) // 32):
        loss = cross_entropy(mlp(Tensor(x_train[batch])), y_train[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
mlp.eval()

pruned = copy.deepcopy(mlp)
prune_global([m for m in pruned.modules() if isinstance(m, Linear)], 0.8)
thin = copy.deepcopy(mlp)
thin[0] = low_rank(mlp[0], 16)
variants = {"fp32": mlp, "int8": quantize_model(mlp), "pruned-80%": pruned, "low-rank-16": thin}

one_image, test_batch = Tensor(x_test[:1]), Tensor(x_test)
with threadpool_limits(limits=1), no_grad():
    at_batch_1 = measure({name: (lambda m=model: m(one_image)) for name, model in variants.items()}, repeats=40)
    batched = measure({name: (lambda m=model: m(test_batch)) for name, model in variants.items()}, repeats=8)
rows = []
for name, model in variants.items():
    with no_grad():
        flops, peak = count_flops(model, one_image), peak_memory(model, test_batch)
    rows.append({"name": name, "accuracy": accuracy(model, x_test, y_test),
                 "p50_ms": 1e3 * at_batch_1[name].p50, "p90_ms": 1e3 * at_batch_1[name].p90,
                 "images_per_s": len(y_test) / batched[name].median, "params": parameter_count(model),
                 "bytes": checkpoint_bytes(model), "flops": flops, "peak_kib": peak / 1024})
print(pareto_table(rows, "accuracy", ["p50_ms", "bytes"], higher_quality_is_better=True,
                   columns=["name", "accuracy", "p50_ms", "p90_ms", "images_per_s", "params", "bytes", "flops", "peak_kib"]))
print(f"(test split: {len(y_test)} images; one image is {100 / len(y_test):.2f} accuracy points)")
for name in ("int8", "pruned-80%", "low-rank-16"):
    print(compare(at_batch_1[name], at_batch_1["fp32"]))

# %% [markdown]
# Read the table before the verdicts. Some things to notice (your numbers will differ; the
# *shape* of the result is what to look at):
#
# * `int8` should keep the accuracy within a test image or two, and its checkpoint holds one
#   byte per weight plus a scale per channel instead of four bytes per weight. Its forward
#   dequantizes the weights back to float32 on every call (module 15), so it does *more*
#   work than fp32 at the same FLOPs: see what `compare` says about its latency.
# * `pruned-80%` has exactly the FLOPs of fp32 (a mask zeroes weights; the product is still
#   dense), adds a mask multiply, and its checkpoint stores the weights *and* the masks. Pruning
#   pays only with a sparse format or structured pruning (module 16); look at its bytes and its
#   accuracy after 80% of the weights are gone without fine-tuning.
# * `low-rank-16` has fewer parameters and FLOPs. Whether that makes it measurably faster at
#   batch 1 — where Python's per-call overhead, not arithmetic, sets the time — is what
#   `compare` answers.
# * A variant is on the Pareto front of accuracy against latency and bytes when nothing else
#   beats it on all three at once.
#
# The plot shows accuracy against latency with the front joined:

# %%
import tempfile

figure = plot_pareto(rows, "accuracy", "p50_ms", Path(tempfile.gettempdir()) / "tinytorch_pareto_digits.png",
                     higher_quality_is_better=True, title="digits MLP variants: accuracy against batch-1 latency")
print(f"saved {Path(tempfile.gettempdir()) / 'tinytorch_pareto_digits.png'}")

# %% [markdown]
# ## 9. The Shakespeare GPT: validation loss and tokens per second
#
# A cost must be lower-is-better, so the table's cost is milliseconds per token (the inverse
# of tokens per second). The language model's quality is its cross-entropy on the validation split (the last 10% of
# Tiny Shakespeare), in fixed windows. The cell uses the model `tito milestone run shakespeare`
# saved (`shakespeare_gpt.npz` in `<temp>/tinytorch-shakespeare/`, module 07's checkpoint)
# when it exists, evaluated on the first 16 batches of 16 windows; otherwise a **fresh,
# untrained** GPT (width 64, 2 layers), whose loss must then be close to `ln(vocab_size)` —
# the check to make before trusting any language-model number. It says which it used.
#
# Is a difference in validation loss real? The validation windows are a sample of text, and a
# different sample would give slightly different losses. Both models are scored on the *same*
# windows, so `paired_difference` bootstraps the windows' differences: an interval that holds 0
# means "no measurable difference" in quality on this data.
#
# **Predict first:** how much does int8 change the validation loss — more or less than the
# interval's width? Is int8 generation faster or slower than fp32?

# %%
from tinytorch.core.training import load_checkpoint, read_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.text.tokenization import CharTokenizer

text = (DATASETS / "tinyshakespeare.txt").read_text(encoding="utf-8")
tokenizer = CharTokenizer.from_text(text)
all_ids = np.array(tokenizer.encode(text), dtype=np.int64)
validation_ids = all_ids[int(0.9 * len(all_ids)):]  # the milestone's split: the last 10%
saved_gpt = Path(tempfile.gettempdir()) / "tinytorch-shakespeare" / "shakespeare_gpt.npz"
recipe = None
if saved_gpt.is_file():
    try:
        recipe = read_checkpoint(saved_gpt)["extra"]["recipe"]
    except (ValueError, KeyError, TypeError) as err:
        print(f"{saved_gpt} is not the milestone's checkpoint ({err})")
if recipe is not None:
    gpt = GPT(tokenizer.vocab_size, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"], recipe["context"],
              bias=False)
    load_checkpoint(saved_gpt, gpt)
    context, used = recipe["context"], f"the milestone's trained GPT ({saved_gpt})"
else:
    context, used = 64, "a fresh, untrained GPT (no milestone checkpoint found): its loss should be near ln(vocab)"
    gpt = GPT(tokenizer.vocab_size, 64, 2, 4, context, bias=False, seed=0)
print(f"model: {used}; {parameter_count(gpt):,} parameters; ln(vocab) = {np.log(tokenizer.vocab_size):.4f}")

gpt_variants = {"fp32": gpt, "int8": quantize_model(gpt)}
prompt = validation_ids[:16]
with threadpool_limits(limits=1):
    rates = measure({name: (lambda m=model: m.generate(prompt[None], 32, temperature=0.0))
                     for name, model in gpt_variants.items()}, repeats=5, warmup=1)
gpt_rows = []
for name, model in gpt_variants.items():
    tokens_per_s = Measurement(name, 32 / rates[name].samples, "tokens/s")
    windows = lm_window_losses(model, validation_ids, context, batch_size=16, max_batches=16)
    gpt_rows.append({"name": name, "val_loss": float(windows.mean()), "windows": windows,
                     "tokens_per_s": tokens_per_s.median, "ms_per_token": 1e3 / tokens_per_s.median,
                     "bytes": checkpoint_bytes(model), "rate": tokens_per_s})
print(pareto_table(gpt_rows, "val_loss", ["ms_per_token", "bytes"],
                   columns=["name", "val_loss", "tokens_per_s", "ms_per_token", "bytes"]))
print(compare(gpt_rows[1]["rate"], gpt_rows[0]["rate"]))
change, low, high = paired_difference(gpt_rows[1]["windows"], gpt_rows[0]["windows"])
print(f"int8 − fp32 validation loss on the same {len(gpt_rows[0]['windows'])} windows: {change:+.5f} nats, "
      f"95% interval [{low:+.5f}, {high:+.5f}]: "
      + ("no measurable difference" if low <= 0 <= high else "a measurable difference"))

# %% [markdown]
# ## 10. Exercises and questions
#
# Answer each by running your own code (add cells below).
#
# 1. **How many readings?** Time `fp32` and `low-rank-16` at batch 1 with `repeats` 5, 20
#    and 80. At which count does `compare` first tell them apart? How does the width of each
#    interval change as `repeats` grows four-fold?
# 2. **Interleaving matters.** Write a non-interleaved `measure` (all of A's readings, then
#    all of B's) and time two *identical* functions while a third, busy loop starts half-way
#    (for example a `threading.Thread` that multiplies matrices for one second). Which
#    version calls the identical functions different?
# 3. **Warm-up.** Measure a fresh GPT's `generate` with `warmup=0` and `repeats=5`. Is the
#    first reading different from the others? Why?
# 4. **Wall clock or CPU time?** Re-run the 2 ms `sleep` comparison of section 4 with
#    `clock=time.process_time`. What does the harness say now, and why? When is CPU time the
#    better clock (hint: `benchmarks/_common.py` uses it on the CPU)?
# 5. **Batch 1 against batched.** In the digits table, by how much does the images per
#    second of the batched forward exceed `1 / p50` at batch 1? What does that say about where
#    the time of a batch-1 call goes?
# 6. **Chance.** Evaluate `RandomLogits(tokenizer.vocab_size)` (scale 1) on the validation
#    split. Its loss is *above* `ln(vocab)`: show that for standard-normal logits the expected
#    excess is about `1/2` nat (the log of the mean of `exp(z)` is `1/2`), and check it.
# 7. **Pareto by hand.** Add a row `{"name": "tiny", ...}` for an MLP `64 → 16 → 10`
#    trained the same way. Is it on the front of accuracy against bytes? Of accuracy against
#    latency?
# 8. **Trust.** A colleague reports "int8 is 5% faster" from one run of ten readings each,
#    not interleaved, on a laptop. List three questions the harness answers that their number
#    does not.
