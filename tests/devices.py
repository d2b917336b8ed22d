"""The one check of whether GPU tests can run: CuPy installed and an NVIDIA GPU visible.

GPU test files start with `pytestmark = [pytest.mark.gpu, requires_gpu]`; on a machine
without both, they are skipped with the reason, and everything else still runs.
"""
import importlib.util

import pytest


def gpu_count() -> int:
    """Number of CUDA devices CuPy sees; 0 when CuPy is not installed or no GPU is visible."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    import cupy

    try:
        return cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:  # CuPy installed, no driver or device
        return 0


requires_gpu = pytest.mark.skipif(gpu_count() == 0, reason="needs CuPy and an NVIDIA GPU")
