"""`tito doctor`: is this machine ready for the course? Each problem comes with its fix.

Only required problems make `tito doctor` fail; optional ones (PyTorch for the
comparison tests, CuPy and a GPU for the device tests) are reported as notes.
"""
from __future__ import annotations

import importlib.util
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .course import Settings, list_modules
from .export import render_modules
from .notebook import BEGIN_MARKER, END_MARKER, NotebookError

INSTALL_DEV = 'pip install -e ".[dev]"  (in the repository folder, inside your virtual environment)'
# (distribution, required?, fix)
PACKAGES = [
    ("numpy", True, INSTALL_DEV),
    ("nbdev", True, INSTALL_DEV),
    ("jupytext", True, INSTALL_DEV),
    ("rich", True, INSTALL_DEV),
    ("matplotlib", True, INSTALL_DEV),
    ("pytest", True, INSTALL_DEV),
    ("hypothesis", True, INSTALL_DEV),
    ("nbclient", True, INSTALL_DEV),
    ("ipykernel", True, INSTALL_DEV),
    ("filelock", True, INSTALL_DEV),
    ("jupyterlab", False, 'pip install -e ".[lab]"  (JupyterLab, to open the notebooks as notebooks)'),
    ("torch", False, "pip install torch  (the PyTorch comparison tests skip without it)"),
    ("cupy", False, 'pip install -e ".[gpu]" (CUDA 12) or ".[gpu-cuda13]" (CUDA 13); NVIDIA GPUs only'),
]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # the version found, or what is wrong
    fix: str = ""  # what to run when it is not ok
    required: bool = True


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def check_python(settings: Settings) -> Check:
    found = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:3] >= _version_tuple(settings.min_python)
    fix = f"install Python {settings.min_python} or newer and recreate the virtual environment"
    return Check("Python", ok, f"{found} at {sys.executable}", "" if ok else fix)


def _distribution_version(name: str) -> str | None:
    # CuPy ships as cupy-cuda12x, cupy-cuda11x, ...: any distribution that provides `cupy`.
    candidates = [name] if name != "cupy" else [
        d.metadata["Name"] for d in metadata.distributions() if (d.metadata["Name"] or "").startswith("cupy")
    ]
    for candidate in candidates:
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_packages() -> list[Check]:
    checks = []
    for name, required, fix in PACKAGES:
        version = _distribution_version(name)
        ok = version is not None and importlib.util.find_spec(name) is not None
        checks.append(Check(name, ok, version or "not installed", "" if ok else fix, required))
    return checks


def check_export(settings: Settings) -> Check:
    """nbdev and jupytext really work: export the first module to a temporary folder and read it back."""
    modules = list_modules(settings)
    if not modules:
        return Check("nbdev + jupytext export", False, f"no modules in {settings.nbs_path}",
                     "run tito inside the TinyTorch repository")
    module = modules[0]
    try:
        with tempfile.TemporaryDirectory(prefix="tito-doctor-") as tmp:
            lib = Path(tmp) / settings.lib_name
            made, _ = render_modules(settings, [module], lib)
            text = (lib / made[0][2]).read_text(encoding="utf-8")
            compile(text, str(made[0][2]), "exec")
    except NotebookError as err:
        return Check("nbdev + jupytext export", False, str(err), f"fix the notebook, then `tito export {module.key}`")
    except Exception as err:  # any other failure here means the tools themselves are broken
        return Check("nbdev + jupytext export", False, f"{type(err).__name__}: {err}", INSTALL_DEV)
    if BEGIN_MARKER in text or END_MARKER in text:
        return Check("nbdev + jupytext export", False, "solution markers reached the package", INSTALL_DEV)
    return Check("nbdev + jupytext export", True, f"{module.key} → {settings.lib_name}.{made[0][1]}")


def check_package_location(settings: Settings) -> Check:
    """The `tinytorch` that Python imports should be this repository's (tito itself puts it first)."""
    spec = importlib.util.find_spec(settings.lib_name)
    where = Path(spec.origin).resolve() if spec and spec.origin else None
    ok = where is not None and where.is_relative_to(settings.root)
    detail = str(where) if where else "not importable"
    fix = f'{INSTALL_DEV}; tito itself always runs tests against {settings.root / settings.lib_name}'
    return Check(f"import {settings.lib_name}", ok, detail, "" if ok else fix, required=False)


def check_gpu() -> Check:
    if importlib.util.find_spec("cupy") is None:
        return Check("GPU (CuPy)", False, "no CuPy (see above): NumPy on the CPU only", required=False)
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CuPy raises its own CUDA errors when no driver or device is present
        return Check("GPU (CuPy)", False, f"CuPy installed, no GPU usable: {err}",
                     "check `nvidia-smi` and that the cupy-cuda package matches your CUDA version",
                     required=False)
    return Check("GPU (CuPy)", count > 0, f"{count} CUDA device(s) visible",
                 "" if count else "no CUDA device visible: check `nvidia-smi`", required=False)


def check_mpi() -> Check:
    """Module 21's MPI: mpi4py importable and an `mpiexec` found the way `tito run` finds it (beside
    this Python, then on PATH). Optional: only module 21 and `--ranks` need it. MPI itself is not
    started here (importing mpi4py.MPI would initialise it in tito's own process)."""
    from .course import CourseError
    from .launch import INSTALL_HINT, check_mpi4py, find_mpiexec

    try:
        check_mpi4py()
        mpiexec = find_mpiexec()
    except CourseError as err:
        return Check("MPI (module 21)", False, str(err).replace(INSTALL_HINT, "").strip(), INSTALL_HINT, required=False)
    return Check("MPI (module 21)", True, f"mpi4py {_distribution_version('mpi4py')}, {mpiexec}", required=False)


def run_checks(settings: Settings) -> list[Check]:
    return [check_python(settings), *check_packages(), check_export(settings),
            check_package_location(settings), check_gpu(), check_mpi()]


def required_problems(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.required and not c.ok]
