"""Hidden tests compare a student's results with the reference's, recorded once from the reference package.

A hidden test file (`grading/NN_name/test_hidden_*.py`) defines `CASES`: {name: (function,
what it checks[, tolerances])}. Each function takes a NumPy generator seeded from the case's
name and returns {label: value} computed with the tinytorch API (Tensors, arrays, numbers,
lists of token ids). `python grading/record_expected.py` runs every case against the
reference package and writes the results beside the test file (`test_hidden_*.npz`); the
test runs the same case on the student's package and compares, naming the case and the
first difference. So the inputs differ from the visible tests' (a solution fitted to those
fails here), and the expected values are the reference's own, never typed in.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

Case = tuple  # (function(rng) -> {label: value}, what it checks[, {"rtol": .., "atol": ..}])
DEFAULT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
FLOAT16_TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}


def seeded(name: str) -> np.random.Generator:
    """The generator for case `name`: the same numbers on every machine and every run."""
    return np.random.default_rng(zlib.crc32(name.encode("utf-8")))


def as_array(value: Any) -> np.ndarray:
    """A case's value as a NumPy array: Tensors through .numpy(), everything else through np.asarray."""
    if hasattr(value, "numpy") and callable(value.numpy):
        value = value.numpy()
    return np.asarray(value)


def compute(name: str, case: Case) -> dict[str, np.ndarray]:
    function = case[0]
    return {f"{name}/{label}": as_array(value) for label, value in function(seeded(name)).items()}


def expected_file(test_file: str | Path) -> Path:
    return Path(test_file).with_suffix(".npz")


def load_expected(test_file: str | Path) -> dict[str, np.ndarray]:
    with np.load(expected_file(test_file), allow_pickle=False) as stored:
        return {key: stored[key] for key in stored.files}


def check(name: str, case: Case, expected: dict[str, np.ndarray]) -> None:
    """Assert that the student's results for case `name` equal the reference's; the message says what differs."""
    what = case[1]
    tolerance = {**DEFAULT_TOLERANCE, **(case[2] if len(case) > 2 else {})}
    wanted = {k: v for k, v in expected.items() if k.startswith(name + "/")}
    assert wanted, f"no recorded values for {name}: run `python grading/record_expected.py`"
    got = compute(name, case)
    for key, reference in wanted.items():
        label = key.split("/", 1)[1]
        value = got.get(key)
        assert value is not None, f"{what}: the case gave no {label!r}"
        assert value.shape == reference.shape, (
            f"{what}: {label} has shape {value.shape}, the reference {reference.shape}")
        if reference.dtype.kind in "fc":
            assert value.dtype == reference.dtype, (
                f"{what}: {label} has dtype {value.dtype}, the reference {reference.dtype} (keep the input's dtype)")
            close = np.isclose(value, reference, **tolerance, equal_nan=True)
            if not close.all():
                where = tuple(int(i) for i in np.argwhere(~close)[0])
                raise AssertionError(
                    f"{what}: {label} differs from the reference at {int((~close).sum())} of {close.size} "
                    f"position(s); first at index {where}: got {value[where]!r}, expected {reference[where]!r}")
        else:
            assert np.array_equal(value, reference), (
                f"{what}: {label} is {value.tolist()!r}, the reference {reference.tolist()!r}")


def record(cases: dict[str, Case], test_file: str | Path) -> Path:
    """Run every case (against the package importable now: the reference) and store the results."""
    values: dict[str, np.ndarray] = {}
    for name, case in cases.items():
        values.update(compute(name, case))
    path = expected_file(test_file)
    np.savez_compressed(path, **values)
    return path


Function = Callable[[np.random.Generator], dict[str, Any]]


def raised(function: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The type name of what function(*args, **kwargs) raises, or "nothing": how a graded case
    reports an error it checks (the type only: messages change from version to version)."""
    try:
        function(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - the type is the value the case reports
        return type(err).__name__
    return "nothing"
