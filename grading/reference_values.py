"""What a module's graded cases (`grading/NN_name/cases.py`) import: tolerances and the seeded generator.

A cases file defines `CASES`: {name: (function, what it checks[, tolerances])}. Each function
takes a NumPy generator seeded from the case's name and returns {label: value} computed with
the tinytorch API (Tensors, arrays, numbers, lists of numbers). `tito.grade_cases` runs them
(in the sandbox on a student's package; `python grading/record_expected.py` on the reference's)
and `tito.grade_compare` compares, in the grader, with these tolerances (`np.isclose`).
This file is given to the sandbox with the cases; it holds nothing secret.
"""
from tito.grade_cases import DEFAULT_TOLERANCE, seeded  # noqa: F401  (one generator for recording and grading)

FLOAT16_TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}
