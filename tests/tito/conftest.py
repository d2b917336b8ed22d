"""Fixtures for the tito tests: a small, throw-away copy of the course for every test.

Every test works on its own copy (module 01 and its tests, tito, the package), so
nothing a test does can touch the repository, and the tests can run while others
edit their modules.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

import pytest
from rich.console import Console

from tito.course import CourseModule, Settings, load_settings, resolve_module

REPO = Path(__file__).resolve().parents[2]
TITO_ENV = {"COLUMNS": "250", "NO_COLOR": "1"}  # every tito a test runs, in its process or its own: whole lines, no colour
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")

# A tiny module for the cases module 01 cannot show (broken notebooks, failing tests).
TOY = '''# %% [markdown]
# # Module 02: Toy

# %%
#| default_exp core.toy

# %%
#| export
def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION

# %%
def test_unit_double():
    assert double(3) == 6
    print("✓ double")


test_unit_double()
'''


def copy_course(dest: Path) -> Path:
    """Module 01, its tests, tito, the package and the settings: enough to run every command."""
    for name in ("tito", "tinytorch"):
        shutil.copytree(REPO / name, dest / name, ignore=IGNORE)
    shutil.copytree(REPO / "modules" / "01_tensor", dest / "modules" / "01_tensor", ignore=IGNORE)
    shutil.copytree(REPO / "tests" / "01_tensor", dest / "tests" / "01_tensor", ignore=IGNORE)
    for name in ("settings.ini", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)
    for shared in (REPO / "tests").glob("*.py"):  # conftest.py and the helpers every test folder uses
        shutil.copy2(shared, dest / "tests" / shared.name)
    return dest


def flat(text: str) -> str:
    """Output with its line breaks and runs of spaces made single spaces (rich wraps long lines)."""
    return " ".join(text.split())


def line_of(text: str, fragment: str, occurrence: int = 1) -> int:
    """1-based number of the line holding the `occurrence`-th `fragment`."""
    hits = [n for n, line in enumerate(text.splitlines(), start=1) if fragment in line]
    return hits[occurrence - 1]


class CourseCopy:
    """A throw-away course in a temporary folder, with the helpers the tests need."""

    TOY = TOY  # the tiny notebook above, for tests that add a module
    line_of = staticmethod(line_of)
    flat = staticmethod(flat)

    def __init__(self, root: Path):
        self.root = root
        self.settings: Settings = load_settings(root)

    def module(self, key: str) -> CourseModule:
        return resolve_module(self.settings, key)

    def add_module(self, key: str, text: str) -> Path:
        """Write `modules/<key>/<name>_dev.py`; return its path."""
        name = key.split("_", 1)[1]
        path = self.settings.nbs_path / key / f"{name}_dev.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def package_bytes(self) -> dict[str, bytes]:
        """Every file of the package by relative path: a snapshot to compare before and after."""
        lib = self.settings.lib_path
        return {p.relative_to(lib).as_posix(): p.read_bytes()
                for p in sorted(lib.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}

    def env(self, **extra: str) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(self.root), **TITO_ENV, **extra)

    def command(self, *args: str, prefix: Sequence[str] = ()) -> list[str]:
        return [*prefix, sys.executable, "-m", "tito", *args]

    def tito(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        """`tito ARGS` from `cwd` (default: deep inside the copy), run in this test's own process.

        The command line's own code (`tito.cli.main`), with what `env()` gives a process (250
        columns, no colour), output and exit status as `python -m tito` gives them, less the
        second it takes to start Python and import nbdev and jupytext: most tests check what
        tito does and says. Tests of the process itself (signals, kills, limits, the environment
        it is started with, the `python -m tito` entry) use `tito_process`; what tito starts
        (scripts, pytest, a kernel) are real processes either way.
        """
        from tito import cli

        out, err = io.StringIO(), io.StringIO()
        saved_env = {name: os.environ.get(name) for name in TITO_ENV}
        saved_signals = {name: signal.getsignal(getattr(signal, name)) for name in ("SIGTERM", "SIGHUP")}
        saved_console, saved_cwd = cli.console, os.getcwd()
        os.environ.update(TITO_ENV)
        cli.console = Console(file=out, width=int(TITO_ENV["COLUMNS"]), soft_wrap=True, color_system=None)
        os.chdir(cwd or self.root / "modules" / "01_tensor")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = cli.main(list(args))
                except SystemExit as stop:  # argparse: a usage error (2) or --help (0)
                    code = stop.code if isinstance(stop.code, int) else 1
        finally:
            os.chdir(saved_cwd)
            cli.console = saved_console
            for name, handler in saved_signals.items():
                signal.signal(getattr(signal, name), handler)
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        return subprocess.CompletedProcess(["tito", *args], code, out.getvalue(), err.getvalue())

    def tito_process(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                     prefix: Sequence[str] = (), **popen) -> subprocess.CompletedProcess:
        """`python -m tito ARGS` with this copy's tito, from `cwd` (default: deep inside the copy).

        `env` replaces the environment (see `env()`); `prefix` goes before python (e.g. `UNPRIVILEGED`).
        """
        return subprocess.run(
            self.command(*args, prefix=prefix), cwd=cwd or self.root / "modules" / "01_tensor",
            env=env or self.env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
            **popen,
        )

    def start_tito(self, *args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
        """A tito running in the background, in its own process group (so a test can kill it all)."""
        return subprocess.Popen(self.command(*args), cwd=self.root, env=env or self.env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True, **popen)

    def add_tests(self, key: str, text: str) -> Path:
        folder = self.root / "tests" / key
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"test_{key.split('_', 1)[1]}.py"
        path.write_text(text, encoding="utf-8")
        return path


ROOT_WITHOUT_SETPRIV = os.geteuid() == 0 and shutil.which("setpriv") is None


def pytest_collection_modifyitems(config, items):
    """Known before any test runs: as root without setpriv, the tests that need a folder tito cannot
    write (those using the `unprivileged` fixture) are skipped, with the reason."""
    if ROOT_WITHOUT_SETPRIV:
        skip = pytest.mark.skip(reason="running as root without setpriv: a read-only folder cannot stop root")
        for item in items:
            if "unprivileged" in getattr(item, "fixturenames", ()):
                item.add_marker(skip)


@pytest.fixture
def unprivileged() -> list[str]:
    """A command prefix that takes root's power to ignore file permissions away (nothing when not root).

    A read-only folder stops an ordinary user but not root, and CI may run as either; the
    tests that need a folder tito cannot write run tito through this prefix.
    """
    if os.geteuid() != 0:
        return []
    return [shutil.which("setpriv"), "--bounding-set=-all", "--inh-caps=-all"]


@pytest.fixture
def course(tmp_path: Path) -> CourseCopy:
    return CourseCopy(copy_course(tmp_path / "course"))


@pytest.fixture(scope="module")
def new_course(tmp_path_factory) -> Callable[[str], CourseCopy]:
    """Makes a fresh copy, `new_course("name")`, for a file's own module-scoped fixtures."""
    return lambda name: CourseCopy(copy_course(tmp_path_factory.mktemp(name) / "course"))


@pytest.fixture(scope="module")
def shared_course(tmp_path_factory) -> CourseCopy:
    """One copy for all the tests of a file: only for tests that do not change it."""
    return CourseCopy(copy_course(tmp_path_factory.mktemp("shared") / "course"))


GRADING_TOML = """
[modules.01_tensor]
weight = 10
"""


def add_grading(course: CourseCopy) -> CourseCopy:
    """Module 01's graded cases and their recorded values (grading/) and a grading.toml for module 01 alone."""
    course.root.parent.chmod(0o755)  # a sandbox user of its own walks through to the scratch folders
    hidden = course.root / "grading"
    shutil.copytree(REPO / "grading" / "01_tensor", hidden / "01_tensor", ignore=IGNORE)
    shutil.copy2(REPO / "grading" / "reference_values.py", hidden / "reference_values.py")
    (hidden / "grading.toml").write_text(GRADING_TOML, encoding="utf-8")
    return course


@pytest.fixture
def grading_course(course: CourseCopy) -> CourseCopy:
    """A course copy with module 01's graded cases and points: enough to grade module 01 end to end."""
    return add_grading(course)


@pytest.fixture(scope="module")
def shared_grading_course(shared_course: CourseCopy) -> CourseCopy:
    return add_grading(shared_course)
