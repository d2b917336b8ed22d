"""tito doctor: required problems fail it, each with a fix; the export check really exports."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from tito.doctor import check_export, check_mpi, check_python, required_problems, run_checks


def test_this_environment_is_ready(course):
    checks = {c.name: c for c in run_checks(course.settings)}
    assert required_problems(list(checks.values())) == []
    assert checks["nbdev + jupytext export"].detail == "01_tensor → tinytorch.core.tensor"
    assert {"numpy", "nbdev", "jupytext", "nbclient", "ipykernel", "filelock", "jupyterlab", "torch",
            "cupy"} <= set(checks)
    assert not checks["cupy"].required and not checks["torch"].required and not checks["jupyterlab"].required


def test_a_broken_first_notebook_is_a_problem_with_a_fix(course):
    notebook = course.module("01").notebook
    notebook.write_text(notebook.read_text(encoding="utf-8").replace("#| default_exp core.tensor", ""),
                        encoding="utf-8")
    check = check_export(course.settings)
    assert not check.ok and "default_exp" in check.detail and "tito export 01_tensor" in check.fix
    assert required_problems([check]) == [check]


def test_too_old_a_python_is_required(course):
    old = course.settings.__class__(**{**course.settings.__dict__, "min_python": "9.0"})
    check = check_python(old)
    assert not check.ok and check.required and "Python 9.0" in check.fix


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py is not installed (pip install mpi4py mpich)")
def test_mpi_is_found_where_tito_run_looks(monkeypatch, tmp_path):
    """The MPI row names mpi4py's version and the mpiexec `tito run` would use; without an mpiexec
    (none beside this Python, none on PATH) it says so, with the install hint, and stays optional."""
    from tito.launch import find_mpiexec

    found = check_mpi()
    assert found.ok and not found.required
    assert found.detail.startswith("mpi4py ") and found.detail.endswith(find_mpiexec())
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # nothing beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = check_mpi()
    assert not missing.ok and not missing.required and required_problems([missing]) == []
    assert missing.detail.startswith("No MPI launcher: `mpiexec` is neither beside") and "pip install" in missing.fix
