"""Module 14 on a GPU (skipped without one): the profiler, peak memory from CuPy's pool, timings synchronised."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.tensor import Tensor
from tinytorch.perf.profiling import Profiler, count_flops, machine_peak, measure_latency, peak_memory

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_peak_memory_reads_the_device_pool():
    x = Tensor(np.ones((1024, 256), dtype=np.float32), device="cuda")
    got = peak_memory(lambda t: float((t * 2.0).sum().item()), x)  # the device is found from the argument
    assert 1024 * 256 * 4 <= got < 4 * 1024 * 256 * 4, f"peak of t * 2 on the GPU: {got} bytes"
    assert peak_memory(lambda: None, device="cuda") == 0


def test_measure_latency_and_machine_peak_on_the_gpu():
    a = Tensor(np.ones((512, 512), dtype=np.float32), device="cuda")
    t = measure_latency(lambda m: m @ m, a, warmup=1, repeats=3)
    assert t.median_s > 0 and len(t.samples) == 3
    gflops, gbytes = machine_peak(n=512, copy_mib=8, repeats=2, device="cuda")
    assert gflops > 1 and gbytes > 1


def test_the_profiler_counts_the_same_flops_on_the_gpu():
    from tinytorch.models.transformer import GPT

    x, y = np.random.default_rng(0).integers(0, 17, (2, 2, 8))
    cpu = GPT(17, 16, 2, 2, 8, seed=0)
    gpu = GPT(17, 16, 2, 2, 8, seed=0).to("cuda")
    on_cpu = count_flops(lambda: cpu(x, targets=y)[1], backward=True)
    on_gpu = count_flops(lambda: gpu(Tensor(x, device="cuda"), targets=Tensor(y, device="cuda"))[1], backward=True)
    assert on_gpu == on_cpu > 0
    with Profiler() as prof:
        gpu(Tensor(x, device="cuda"), targets=Tensor(y, device="cuda"))[1].backward()
    assert prof.by_op()["matmul"].backward_calls > 0 and prof.wall_s > 0
