"""Hidden tests (instructors only: `tito release student` never copies grading/).

The same per-test setup as the visible tests (tests/conftest.py: grad mode on around every
test, the hypothesis profile), and `reference_values` importable by the test files.
"""
import sys
from pathlib import Path

from conftest import _grad_mode_on  # noqa: F401  tests/conftest.py (pyproject puts tests/ on the path)

sys.path.append(str(Path(__file__).resolve().parent))  # appended: `conftest` above stays tests/conftest.py
