"""Running Python in a child process against one course's own package.

Every program tito starts (a notebook as a script, pytest, a milestone) goes
through here, so they all see the same environment: the `tinytorch` of the
course they belong to comes first on the path (the virtual environment may
have a different checkout installed), and matplotlib never opens a window.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# pytest's exit codes (pytest.ExitCode), spelled out so reports can name them.
PYTEST_EXIT = {
    0: "all tests passed",
    1: "some tests failed",
    2: "interrupted (usually a collection error)",
    3: "internal error",
    4: "usage error",
    5: "no tests collected",
}
_SUMMARY_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


@dataclass(frozen=True)
class ProcessResult:
    command: list[str]
    returncode: int
    output: str  # stdout and stderr, interleaved as the program wrote them
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def course_env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process that must use `root`'s tinytorch."""
    env = dict(os.environ)
    paths = [str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["MPLBACKEND"] = "Agg"  # notebooks that plot must not need a display
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONIOENCODING", "utf-8")
    if extra:
        env.update(extra)
    return env


def run_python(args: list[str], cwd: Path, root: Path, timeout: float | None = None,
               env: dict[str, str] | None = None) -> ProcessResult:
    """`python ARGS` in `cwd` with `root`'s package first; output captured, never raises on failure.

    `env` adds to (or overrides) the course environment, e.g. {"COLUMNS": "400"}.
    """
    command = [sys.executable, *args]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=cwd, env=course_env(root, env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            encoding="utf-8", errors="replace", timeout=timeout,
        )
        code, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as err:
        partial = err.stdout if isinstance(err.stdout, str) else (err.stdout or b"").decode("utf-8", "replace")
        code, output = 124, partial + f"\n[tito] stopped after {timeout:.0f} s"
    return ProcessResult(command, code, output, time.perf_counter() - start)


def pytest_counts(output: str) -> dict[str, int]:
    """Counts from pytest's closing summary line, e.g. {"failed": 3, "passed": 2}."""
    lines = [l for l in output.strip().splitlines() if l.strip()]
    summary = lines[-1] if lines else ""
    counts: dict[str, int] = {}
    for number, word in _SUMMARY_COUNT.findall(summary):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def describe_pytest(result: ProcessResult) -> str:
    """A short human reading of a pytest run: its summary counts, or what its exit code means."""
    counts = pytest_counts(result.output)
    if counts:
        return ", ".join(f"{n} {k}" for k, n in counts.items())
    return PYTEST_EXIT.get(result.returncode, f"exit code {result.returncode}")
