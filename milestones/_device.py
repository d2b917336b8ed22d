"""The one way a milestone chooses where it runs: `--device {cpu,cuda}`, checked before any work.

    add_device_argument(parser)        # --device cpu (default, NumPy) or cuda (CuPy on an NVIDIA GPU)
    if not device_ready(args.device):  # printed one line on stderr saying what is missing
        return 2
    ... device_label(args.device)      # "cpu", or "cuda (NVIDIA H100 80GB HBM3)" for the header line

On cuda a milestone moves its model with `model.to(device)` before it makes the optimizer (the
optimizer's state arrays are then made on the device at the first step), and puts its data set
on the device once, up front, so that batches are gathered there and never pass through the host.
"""
from __future__ import annotations

import argparse
import sys

from tinytorch.core.tensor import device_problem

DEVICES = ("cpu", "cuda")


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="cpu (NumPy, the default) or cuda (CuPy on an NVIDIA GPU: "
                             "pip install -e \".[gpu]\"); the same recipe and threshold on both")


def device_ready(name: str) -> bool:
    """True when `name` can be used; otherwise print `error: <why>` as ONE line on stderr (no
    traceback, no wrapping) and return False: the milestone then exits with status 2."""
    problem = device_problem(name)  # module 01's check
    if problem is None:
        return True
    print(f"error: {' '.join(problem.split())}", file=sys.stderr)
    return False


def device_label(name: str) -> str:
    """"cpu", or "cuda (<GPU name>)" for the header line."""
    if name != "cuda":
        return name
    import cupy

    gpu = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return f"cuda ({gpu.decode() if isinstance(gpu, bytes) else gpu})"
