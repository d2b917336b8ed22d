"""Leaves-only gradients use less memory than keeping every intermediate's .grad.

In-process on a small MLP, and the benchmark script's smoke run (benchmarks/engine_memory.py).
"""
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from tinytorch.core.tensor import Tensor

ROOT = Path(__file__).resolve().parents[2]


def _backward_peak(retain_intermediates: bool) -> int:
    from tinytorch.core.activations import relu
    from tinytorch.core.autograd import topological_order

    rng = np.random.default_rng(0)
    w1 = Tensor(rng.standard_normal((64, 64)), requires_grad=True)
    w2 = Tensor(rng.standard_normal((64, 64)), requires_grad=True)
    loss = (relu(Tensor(rng.standard_normal((128, 64))) @ w1) @ w2).mean()
    if retain_intermediates:
        for t in topological_order(loss):
            if t._node is not None:
                t.retain_grad()
    tracemalloc.start()
    try:  # tracing left on (backward raised) would slow every later test
        loss.backward()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_leaves_only_backward_needs_less_memory_than_keeping_every_grad():
    leaves, everything = _backward_peak(False), _backward_peak(True)
    # every intermediate here is a (128, 64) float64 array: keeping four of them costs 256 KiB
    assert everything - leaves >= 128 * 64 * 8, (
        f"backward peaked at {leaves} bytes with .grad on leaves only and {everything} with every .grad kept: "
        "only leaves (and retain_grad tensors) get .grad, intermediate gradients are released once used, "
        "and each stored .grad is its own copy (if retained gradients share arrays, keeping them costs nothing "
        "here and the difference vanishes)"
    )


@pytest.mark.slow
def test_engine_memory_benchmark_quick():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "benchmarks/engine_memory.py", "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "leaves only" in result.stdout and "attention" in result.stdout
