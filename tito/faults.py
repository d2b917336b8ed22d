"""Fault injection, for tito's own tests only: die at a chosen point, as a crash or a kill would.

A test sets `TITO_TEST_FAULT=<point>:<count>` in the environment of a real tito process;
when that process reaches the point for the count-th time, it kills itself with SIGKILL
(no cleanup, no `finally`), exactly like `kill -9` or a power cut. Without the variable
`checkpoint` does nothing. Points: `export-write` (after each new file is written beside
the package), `export-commit` (after the journal is written), `export-rename` (after each
file is switched in).
"""
from __future__ import annotations

import os
import signal

FAULT_ENV = "TITO_TEST_FAULT"


def checkpoint(point: str, count: int = 1) -> None:
    if os.environ.get(FAULT_ENV) == f"{point}:{count}":
        os.kill(os.getpid(), signal.SIGKILL)
