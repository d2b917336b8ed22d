"""What every benchmark shares: one thread, the machine's description, interleaved timing,
and writing one section of RESULTS.md.

Import this module FIRST, before NumPy: `one_thread()` must set the BLAS thread variables
before the BLAS library starts, or they are ignored.

    import _common  # noqa: F401  (sets one thread)
    import numpy as np
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def one_thread() -> None:
    """Run NumPy's BLAS on one thread, so the comparison is kernel against kernel."""
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"


def import_torch():
    """PyTorch on one thread, or None when it is not installed (the benchmark then measures ours alone)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def machine(torch=None) -> dict:
    """The facts a result needs beside it: CPU, cores, Python, NumPy and its BLAS, PyTorch, when."""
    import numpy as np

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = "unknown"
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    except Exception:  # older NumPy: no dict mode
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas,
        "torch": torch.__version__ if torch is not None else "not installed",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int,
                        sync: Callable[[], None] | None = None) -> dict[str, float]:
    """Median seconds of each function, calling them in turn (after one warm-up call each).

    Without `sync` (the CPU) the clock is the process's CPU time (`time.process_time`):
    everything runs on one thread, so it is the work itself, and it does not grow when other
    programs take the core away. With `sync` (a GPU) it is wall-clock time, read after
    synchronising the device.
    """
    clock = time.process_time if sync is None else time.perf_counter
    wait = sync or (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    wait()
    for _ in range(repeats):
        for name, fn in fns.items():
            start = clock()
            fn()
            wait()
            times[name].append(clock() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


class Device:
    """Where the arrays live: NumPy on the CPU, or CuPy on a GPU (timings then synchronise)."""

    def __init__(self, name: str, torch=None):
        self.name = name
        self.torch_module = torch
        if name == "cuda":
            import cupy

            self.cupy = cupy

    @property
    def torch_device(self) -> str:
        return "cuda" if self.name == "cuda" else "cpu"

    @property
    def sync(self) -> Callable[[], None] | None:
        """None on the CPU (CPU time needs no waiting); on a GPU, a function that waits for
        CuPy's and PyTorch's queued work: pass it to `interleaved_medians`."""
        if self.name != "cuda":
            return None

        def wait() -> None:
            self.cupy.cuda.Device().synchronize()
            if self.torch_module is not None and self.torch_module.cuda.is_available():
                self.torch_module.cuda.synchronize()

        return wait

    def tensor(self, array, requires_grad: bool = False):
        from tinytorch.core.tensor import Tensor

        return Tensor(array, requires_grad=requires_grad, device=self.name)

    def torch(self, array, requires_grad: bool = False):
        return self.torch_module.tensor(array, device=self.torch_device).requires_grad_(requires_grad)


def write_section(heading: str, section: str, results: Path = RESULTS) -> Path:
    """Put `section` (which starts with the line `heading`) into RESULTS.md: replace the
    section with that heading, or append it; the other benchmarks' sections stay as they are."""
    text = results.read_text(encoding="utf-8") if results.is_file() else "# Benchmark results\n\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("" if end < 0 else "\n" + text[end + 1:])
    results.write_text(text, encoding="utf-8")
    return results
