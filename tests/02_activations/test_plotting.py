"""Module 02's given `tinytorch.plotting.pyplot()`: the one place the course chooses matplotlib's backend.

Each case runs in a fresh Python (a backend, once chosen, stays for the process), with the
environment of the case; and a scan checks that nothing else in the course switches backends."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = "from tinytorch.plotting import pyplot; plt = pyplot(); import matplotlib; print(matplotlib.get_backend().lower())"


def backend_in_a_fresh_python(env_changes: dict, code: str = PROBE) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MPLBACKEND")}
    env.update(env_changes)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the headless rule is Linux's (no DISPLAY)")
def test_no_screen_gives_agg():
    assert backend_in_a_fresh_python({}) == "agg", "a script on Linux without DISPLAY must draw into files (Agg)"


def test_the_users_choice_stands():
    assert backend_in_a_fresh_python({"MPLBACKEND": "pdf"}) == "pdf", "MPLBACKEND set by the user must be kept"


def test_a_backend_already_in_use_is_not_switched():
    code = ("import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot; " + PROBE)
    assert backend_in_a_fresh_python({}, code) == "svg", "pyplot() must not switch a backend pyplot already uses"


def test_nothing_else_switches_the_backend():
    files = [*ROOT.glob("modules/*/*_dev.py"), *ROOT.glob("milestones/*.py"), *ROOT.glob("benchmarks/*.py")]
    switching = [f"{path.relative_to(ROOT)}:{number}" for path in files
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"\bmatplotlib\.use\(", line) and not path.name == "activations_dev.py"]
    assert not switching, ("matplotlib.use(...) outside module 02's pyplot(): " + ", ".join(switching)
                           + ". Get pyplot from tinytorch.plotting.pyplot() instead.")
