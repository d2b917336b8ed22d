"""`tito/grading/`: grading, its sandbox and the Olympics judge as one package.

Its modules import without nbdev (`tito grade` exports students' notebooks, but importing it, or
asking for its help, needs no nbdev; nor does the judge), and what its two sandboxed runners
import of it stays the few files that are copied or handed out for them.
"""
from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import tito.grading

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(tito.grading.__file__).parent
MODULES = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]))

# Run first in a fresh Python: any import of the named top-level packages raises.
BLOCK = """
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(name + " is blocked: tito.grading must import without it")
sys.meta_path.insert(0, Blocked())
"""
NBDEV = ("nbdev", "fastcore")  # fastcore: what nbdev is built on
TEST_TOOLS = ("pytest", "hypothesis", "_pytest")  # the test suite's (pyproject's dev extra), not grading's


def _run_without(blocked: tuple, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK.format(blocked=blocked) + code], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


def _run_without_nbdev(code: str) -> subprocess.CompletedProcess:
    return _run_without(NBDEV, code)


def test_the_package_holds_grading_the_sandbox_and_the_judge():
    assert {"grade", "cases", "compare", "config", "gradescope", "judge", "judge_runner", "out", "report",
            "sandbox", "scratch", "submissions"} <= set(MODULES), MODULES
    left = sorted(p.name for p in (REPO / "tito").glob("*.py")
                  if p.stem.startswith(("grade", "sandbox", "olympics", "submissions", "scratch")))
    assert not left, f"grading modules left outside tito/grading/: {left}"


def test_every_module_of_the_package_imports_without_nbdev():
    code = ("import json, importlib, tito.grading\n"
            f"for name in {MODULES!r}:\n"
            "    importlib.import_module('tito.grading.' + name)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('nbdev', 'fastcore'))))\n")
    done = _run_without_nbdev(code)
    assert done.returncode == 0, f"a module of tito.grading needs nbdev to import:\n{done.stderr[-3000:]}"
    assert json.loads(done.stdout.splitlines()[-1]) == [], done.stdout


def test_tito_grade_and_the_judge_answer_help_without_nbdev():
    for command in (["grade", "--help"], ["olympics", "judge", "--help"]):
        done = _run_without_nbdev(f"from tito.cli import main\nmain({command!r})\n")
        assert done.returncode == 0, f"tito {' '.join(command)} without nbdev:\n{done.stderr[-3000:]}"
        assert "usage: tito" in done.stdout, done.stdout


def test_the_blocker_is_real_exporting_still_needs_nbdev():
    """The check above would pass for nothing if blocking failed: exporting a notebook must hit it."""
    code = ("from tito.course import load_settings, list_modules\n"
            "from tito.export import render_modules\n"
            "import tempfile, pathlib\n"
            "settings = load_settings()\n"
            "render_modules(settings, list_modules(settings)[:1], pathlib.Path(tempfile.mkdtemp()))\n")
    done = _run_without_nbdev(code)
    assert done.returncode != 0 and "is blocked: tito.grading must import without it" in done.stderr, \
        done.stdout + done.stderr


def test_the_package_init_imports_nothing():
    """Both runners import the package inside the sandbox (the judge's runner from a copy of this one
    file, without `site`): an import here would run there too."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    imports = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imports == [], imports


def test_the_judges_runner_imports_from_its_copies_alone(tmp_path):
    """`runner_library` copies the runner and the two package files on its way; Python without `site`
    imports the runner from there (its own imports are the standard library's until it runs)."""
    from tito.grading.judge import runner_library

    library = runner_library(tmp_path / "lib", REPO, None)
    done = subprocess.run([sys.executable, "-S", "-c", "import tito.grading.judge_runner as r; print(r.__file__)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(library)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert Path(done.stdout.strip()) == library / "tito" / "grading" / "judge_runner.py"


def test_grading_needs_no_test_tools_and_the_bundle_installs_none():
    """The sandbox runs plain-Python graded cases and the grader compares values: neither pytest nor
    hypothesis is imported by tito.grading or by any module's cases.py, so the Gradescope bundle's
    requirements are the course's dependencies alone (what its setup.sh installs in a fresh venv)."""
    from tito.course import load_settings
    from tito.grading.gradescope import requirements

    cases = sorted(str(p.relative_to(REPO)) for p in (REPO / "grading").glob("*/cases.py"))
    assert len(cases) >= 20, cases
    code = ("import importlib, importlib.util, tito.grading\n"
            "sys.path.insert(0, 'grading')  # reference_values, as tito.grading.cases imports it\n"
            f"for name in {MODULES!r}:\n"
            "    importlib.import_module('tito.grading.' + name)\n"
            f"for path in {cases!r}:\n"
            "    spec = importlib.util.spec_from_file_location('cases_' + path.split('/')[1], path)\n"
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "print('imported', len(sys.modules))\n")
    done = _run_without(TEST_TOOLS, code)
    assert done.returncode == 0, f"grading imports a test tool:\n{done.stderr[-3000:]}"
    blocked = _run_without(TEST_TOOLS, "import pytest\n")  # the blocker is real
    assert blocked.returncode != 0 and "is blocked" in blocked.stderr, blocked.stderr

    wanted = requirements(load_settings(REPO))
    assert wanted and not [r for r in wanted if r.split(">")[0].split("=")[0].strip() in TEST_TOOLS], wanted
