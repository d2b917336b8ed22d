"""What the graded cases (`grading/NN_name/cases.py`) and record_expected.py import: the seeded generator,
tolerances, `raised`, and `compute` (one case's values as arrays).

A cases file defines `CASES`: {name: (function, what it checks[, tolerances])}. Each function
takes a NumPy generator seeded from the case's name and returns {label: value} computed with
the tinytorch API (Tensors, arrays, numbers, lists, text). `tito.grading.cases` runs them in the
sandbox on a student's package; `python grading/record_expected.py` on the reference's and on
each catalogued mistake (the values `tito.grading.compare` compares with). The generator and the
conversion to arrays are tito.grading.cases' own, so recording and grading draw the same numbers.
This file is given to the sandbox with the cases: it holds nothing secret.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tito.grading.cases import DEFAULT_TOLERANCE, as_array, fresh_modes, seeded  # noqa: F401  (one generator for both)

Case = tuple  # (function(rng) -> {label: value}, what it checks[, {"rtol": .., "atol": ..}])
FLOAT16_TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}


def compute(name: str, case: Case) -> dict[str, np.ndarray]:
    fresh_modes()  # as the grader's runner does before each case: a mistake that leaves a mode changed
    function = case[0]  # changes its own case only, in the recording as in grading
    return {f"{name}/{label}": as_array(value) for label, value in function(seeded(name)).items()}


Function = Callable[[np.random.Generator], dict[str, Any]]


def raised(function: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The type name of what function(*args, **kwargs) raises, or "nothing": how a graded case
    reports an error it checks (the type only: messages change from version to version)."""
    try:
        function(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - the type is the value the case reports
        return type(err).__name__
    return "nothing"


def node_record(y, x) -> dict:
    """What y's graph node says: its op, whether its one input is x itself, the saved names and values
    (the cases of modules 02 and 04 check what each op records for its backward rule)."""
    node = y._node
    values = {"op": node.op, "input_is_x": len(node.inputs) == 1 and node.inputs[0] is x,
              "saved": sorted(node.saved)}
    for name, value in node.saved.items():
        values[f"saved_{name}"] = np.asarray(value)
    return values
