"""Reading test output: the first failure in full, where a stopped script was, no colour codes."""
from __future__ import annotations

from tito.export import export_modules
from tito.reports import cell_number, first_pytest_failure, strip_ansi, tidy_rules, where_in_notebook
from tito.testing import run_pytest


def test_colour_codes_are_removed_and_text_kept():
    coloured = "\x1b[0;31mAssertionError\x1b[0m: sum changed the dtype float32 \x1b[1;32m→\x1b[0m float64"
    assert strip_ansi(coloured) == "AssertionError: sum changed the dtype float32 → float64"


def test_wide_rules_are_redrawn_to_the_terminal_width():
    wide = "=" * 120 + " FAILURES " + "=" * 120
    assert tidy_rules(wide, 40) == "=" * 15 + " FAILURES " + "=" * 15
    assert tidy_rules("x = 1", 40) == "x = 1"


def test_where_a_stopped_script_was_names_the_test_and_cell(tmp_path):
    notebook = tmp_path / "toy_dev.py"
    notebook.write_text("# %%\ndef double(x):\n    while True:\n        pass\n\n# %%\ndef test_unit_double():\n"
                        "    double(3)\n\n\ntest_unit_double()\n", encoding="utf-8")
    traceback = (f'Traceback (most recent call last):\n  File "{notebook}", line 11, in <module>\n'
                 f'  File "{notebook}", line 8, in test_unit_double\n  File "{notebook}", line 3, in double\n'
                 "KeyboardInterrupt\n")
    assert cell_number(notebook.read_text(encoding="utf-8"), 8) == 2
    assert (where_in_notebook(traceback, notebook)
            == "test_unit_double at toy_dev.py line 8 (cell 2), inside double at line 3")
    assert where_in_notebook("no traceback here", notebook) is None


def test_a_collection_error_is_the_first_failure(course):
    course.add_module("02_toy", course.TOY)
    export_modules(course.settings, [course.module("02")])
    tests = course.add_tests("02_toy", "from tinytorch.core.toy import triple\n\n\ndef test_x():\n    pass\n")
    part = run_pytest(course.settings, [tests.parent])
    assert part.failed and part.failures == 1
    nodeid, body = first_pytest_failure(part.output)
    assert nodeid == "tests/02_toy/test_toy.py"
    assert "ImportError: cannot import name 'triple'" in body
    assert part.detail.startswith("tests/02_toy/test_toy.py\n")
