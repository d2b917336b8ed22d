"""The graded cases' runner: what runs inside the sandbox, next to the student's code.

A module's graded cases live in `grading/NN_name/cases.py`, a module that defines

    CASES = {name: (function, what it checks[, {"rtol": .., "atol": ..}])}

where each function takes a NumPy generator seeded from the case's name (`seeded`) and returns
`{label: value}` computed with the package's API (Tensors, arrays, numbers, lists of numbers).

`python -m tito.grading.cases CASES_FILE OUT.npz` imports the cases (and through them the package
on `PYTHONPATH`: the student's), runs every case with its own generator and writes what each
produced with `np.savez` (`produce`): one array per "case/label"; for a case that raised, the one
key "case/(raised)" holding "ExceptionType: its first line" (record_expected.py records the type alone:
the grader compares the types). It computes no score: the grader,
in a process of its own that never imports the student's code, compares this file with the
reference's values (`tito.grading.compare`), so code that forges this file can only change its
score by writing the right values, which it cannot read. `grading/record_expected.py` runs the
same `produce` against the reference package to record those values.

`python -m tito.grading.cases --describe OUT.json CASES_FILE...` writes each case's `what` and
tolerances (the grader runs it with the reference package, never a student's).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

RAISED = "(raised)"  # the label under which a case that raised records "ExceptionType: first line"
DEFAULT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
IMPORT_FAILED = "(import)/(raised)"  # the one key written when the cases (and so the package) did not import
NOT_AN_ARRAY = "(not a plain array)"  # the value of a label that is not numbers or text (a None, an object)
ERROR_CHARS = 300  # of the first line of an exception
# What an array produced by a case may hold: booleans, integers, floats, complex numbers, text (never objects).
VALUE_KINDS = "biufcU"

Case = tuple  # (function(rng) -> {label: value}, what it checks[, {"rtol": .., "atol": ..}])
Function = Callable[[np.random.Generator], dict[str, Any]]


def seeded(name: str) -> np.random.Generator:
    """The generator for case `name`: the same numbers on every machine and every run."""
    return np.random.default_rng(zlib.crc32(name.encode("utf-8")))


def as_array(value: Any) -> np.ndarray:
    """A case's value as a NumPy array: Tensors through .numpy(), everything else through np.asarray."""
    if hasattr(value, "numpy") and callable(value.numpy):
        value = value.numpy()
    if type(value).__module__.startswith("cupy"):  # a GPU array: its values, on the host
        value = value.get()
    return np.asarray(value)


def tolerance(case: Case) -> dict[str, float]:
    return {**DEFAULT_TOLERANCE, **(case[2] if len(case) > 2 else {})}


def load_cases(path: str | os.PathLike) -> dict[str, Case]:
    """The `CASES` of a cases file, imported by its path.

    Its folder and the one above (grading/, with reference_values.py) go first on sys.path: a
    cases file imports its helpers from there, in the course as in the sandbox's copy of it."""
    path = Path(path).resolve()
    sys.path[:0] = [str(path.parent), str(path.parent.parent)]
    spec = importlib.util.spec_from_file_location(f"graded_cases_{path.parent.name.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = getattr(module, "CASES", None)
    if not isinstance(cases, dict) or not cases:
        raise ValueError(f"{path}: defines no CASES dict ({{name: (function, what it checks[, tolerances])}}).")
    for name, case in cases.items():
        if "/" in name or not isinstance(case, tuple) or not 2 <= len(case) <= 3 or not callable(case[0]):
            raise ValueError(f"{path}: CASES[{name!r}] must be (function, what it checks[, tolerances]), "
                             "named without '/'.")
    return cases


def fresh_modes() -> None:
    """Recording on, mixed precision off before each case (as tests/conftest.py does around every test), so a
    case that leaves a mode changed (a student's `no_grad` that fails to restore it) cannot change the next."""
    tensor = sys.modules.get("tinytorch.core.tensor")
    if tensor is not None:
        for name, value in (("GradMode", ("enabled", True)), ("Autocast", ("dtype", None))):
            owner = getattr(tensor, name, None)
            if owner is not None:
                setattr(owner, *value)


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:ERROR_CHARS]


def run_case(name: str, case: Case) -> dict[str, np.ndarray]:
    """{"name/label": array} for what case `name` returned, or {"name/(raised)": "Type: first line"}."""
    fresh_modes()
    try:
        found = case[0](seeded(name))
        if not isinstance(found, dict):
            raise TypeError(f"the case returned {type(found).__name__}, not a dict of values")
        values = {}
        for label, value in found.items():
            array = as_array(value)
            if array.dtype.kind not in VALUE_KINDS:  # None, an object: recorded as record_expected.py records it
                array = np.asarray(NOT_AN_ARRAY)
            values[f"{name}/{label}"] = np.asarray(array, order="C")  # 0-d stays 0-d (ascontiguousarray makes it 1-d)
        return values
    except Exception as error:  # what the student's code raised is a result too: the grader names it
        return {f"{name}/{RAISED}": np.array(first_line(error))}


def produce(cases: dict[str, Case]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for name, case in cases.items():
        values.update(run_case(name, case))
    return values


def describe(cases: dict[str, Case]) -> dict[str, dict]:
    """{name: {"what": .., "tolerance": {"rtol": .., "atol": ..}}}: what the grader needs besides the values."""
    return {name: {"what": str(case[1]), "tolerance": tolerance(case)} for name, case in cases.items()}


def save_values(path: str | os.PathLike, values: dict[str, np.ndarray]) -> None:
    """np.savez (never pickled: no object arrays reach here), written whole or not at all."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        np.savez(handle, **values)
    os.replace(partial, path)


def _only_the_course() -> None:
    """Drop what could import a package from elsewhere than PYTHONPATH's course: the current folder that
    `python -m` puts first on sys.path, and the import hooks of editable installs (the instructor's course)."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    sys.meta_path[:] = [finder for finder in sys.meta_path
                        if not getattr(finder, "__module__", "").startswith("__editable__")]


def main(argv: list[str]) -> int:
    _only_the_course()
    if len(argv) >= 3 and argv[0] == "--describe":
        found = {str(Path(path)): describe(load_cases(path)) for path in argv[2:]}
        Path(argv[1]).write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
        return 0
    if len(argv) != 2:
        print("usage: python -m tito.grading.cases CASES_FILE OUT.npz | --describe OUT.json CASES_FILE...",
              file=sys.stderr)
        return 2
    try:
        cases = load_cases(argv[0])
    except Exception as error:  # the package does not import: the grader says so (IMPORT_FAILED)
        save_values(argv[1], {IMPORT_FAILED: np.array(first_line(error))})
        return 0
    save_values(argv[1], produce(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
