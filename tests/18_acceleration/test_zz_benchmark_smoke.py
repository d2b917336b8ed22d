"""The acceleration benchmark runs (a smoke run: few repeats). Named to run after the module's own
tests, so a mistake is reported by the test that names it, not by the benchmark."""
import pytest

from benchmark_runs import check_benchmark

from tinytorch.perf.acceleration import NUMBA_AVAILABLE

# with Numba: the compiled path in the step, and the per-kernel table with its roofline and compile time
COMPILED = ["training step, compiled, allocator default", "causal attention (12 × 4 heads", "of it reached; compiling",
            "AdamW update ("] if NUMBA_AVAILABLE else []


@pytest.mark.slow
def test_acceleration_benchmark_quick():
    check_benchmark("acceleration.py", ["Profile of one forward + backward, fused", "training step, fused, allocator default",
                                       "bias + GELU (768 × 512)", "LayerNorm (768 × 128)", "AdamW step", "convolution",
                                       "blocked 512³, tile 64", *COMPILED])


@pytest.mark.slow
def test_acceleration_benchmark_on_two_threads_quick():
    out = check_benchmark("acceleration.py", ["2 threads, the training step only", "training step, plain, allocator default",
                                              "training step, fused, allocator kept",
                                              "training step, fused, batch in 2 parts, allocator kept"], "--threads", "2")
    assert "Profile of one forward" not in out and "convolution" not in out, \
        f"--threads 2 measures the training step only:\n{out}"
