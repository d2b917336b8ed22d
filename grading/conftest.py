"""Hidden tests (instructors only: `tito release student` never copies grading/).

The same per-test setup as the visible tests (tests/conftest.py: grad mode on around every
test, the hypothesis profile), and `reference_values` importable by the test files.
"""
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# tests/conftest.py loaded by its path: `import conftest` would find whichever conftest a test
# folder put first on sys.path (tests/05_autograd adds its own).
_spec = importlib.util.spec_from_file_location("tinytorch_tests_conftest", HERE.parent / "tests" / "conftest.py")
_visible = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_visible)
_grad_mode_on = _visible._grad_mode_on  # autouse: every hidden test starts and ends with recording on

sys.path.append(str(HERE))  # reference_values
