"""What a student reads while a module is in progress, and which failure comes first (issue 21).

The inline tests run cell by cell (`tito.cells`): a cell stopped by a stub waits for it, a
failure does not stop the later sections, and a section's test is shown before the crash of
a worked example that calls the same function. pytest tests that stop on a stub wait too,
cheaply, and whole programs (`slow`) wait for the whole module.
"""
from __future__ import annotations

import json
import subprocess
import sys

from tito.export import export_modules
from tito.stubs import stub_message
from tito.testing import first_failure_only, load_results, run_module_tests, shown_failure

TWO_SECTIONS = '''# %% [markdown]
# # Module 02: Toy
#
# ## 1. Doubling

# %%
#| default_exp core.toy

# %%
#| export
def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION


# %%
def test_unit_double():
    assert double(3) == 6, f"double(3) must be 6, got {double(3)}: DOUBLE_CAUSE"
    print("✓ double")


test_unit_double()

# %% [markdown]
# ## 2. Tripling

# %%
#| export
def triple(x):
    """Three times x."""
    ### BEGIN SOLUTION
    return 3 * x
    ### END SOLUTION


# %%
example = triple(2) + 1
print("a worked example:", example)

# %%
def test_unit_triple():
    assert triple(2) == 6, f"triple(2) must be 6, got {triple(2)}: TRIPLE_CAUSE"
    print("✓ triple")


test_unit_triple()

# %%
print("uses the example:", example)
'''

TWO_TESTS = '''import pytest

from tinytorch.core.toy import double, triple


def test_double():
    assert double(3) == 6, "PYTEST_DOUBLE"


def test_triple():
    assert triple(2) == 6, "PYTEST_TRIPLE"


@pytest.mark.slow
def test_whole_program():
    assert double(triple(1)) == 6
'''


def _triple_stubbed(text: str) -> str:
    """`text` as a student has it after writing double and before writing triple."""
    stub = stub_message("triple", "modules/02_toy/toy_dev.py", "02_toy")
    return text.replace("    return 3 * x\n", f"    raise NotImplementedError({stub!r})\n")


def _toy(course, text: str = TWO_SECTIONS, tests: str = TWO_TESTS):
    course.add_module("02_toy", text)
    course.add_tests("02_toy", tests)
    module = course.module("02")
    export_modules(course.settings, [module])
    return module


def test_a_module_in_progress_shows_its_sections_and_the_next_stub(course):
    _toy(course, _triple_stubbed(TWO_SECTIONS))
    result = course.tito("test", "02")
    out = course.flat(result.stdout)
    assert result.returncode == 1, out
    assert "02_toy: in progress (1 stub left)" in out
    assert "✓ 1. Doubling: 1 test passed" in out and "… 2. Tripling: waiting for triple" in out
    line = course.line_of(course.module("02").notebook.read_text(encoding="utf-8"), "### BEGIN SOLUTION", 2) + 1
    assert f"Next stub: modules/02_toy/toy_dev.py:{line} triple" in out
    assert "pytest 1 passed, 2 waiting" in out  # test_triple stops on the stub, the whole program waits
    assert "Traceback" not in result.stdout and "NotImplementedError" not in result.stdout
    assert "Summary: 0 passed, 0 failed, 1 in progress" in out
    assert load_results(course.settings)["02_toy"].verdict == "in progress"


def test_a_failure_before_a_stub_is_shown_with_the_sections(course):
    text = _triple_stubbed(TWO_SECTIONS).replace("return 2 * x", "return 2 + x")
    _toy(course, text)
    run = run_module_tests(course.settings, course.module("02"))
    assert run.verdict == "failed" and run.stubs_left == 1
    part, first = shown_failure(run)
    assert part == "inline" and "DOUBLE_CAUSE" in first.detail
    states = {s["title"]: s["state"] for s in run.sections if s["title"]}
    assert states == {"1. Doubling": "failed", "2. Tripling": "waiting"}
    assert run.parts["inline"].failures == 1 and run.parts["pytest"].failures == 1  # test_double; test_triple waits


def test_a_finished_module_runs_every_test(course):
    _toy(course)
    run = run_module_tests(course.settings, course.module("02"))
    assert run.passed and run.parts["pytest"].summary == "3 passed"
    assert run.parts["inline"].summary == "2 tests passed" and not run.next_stub


def test_a_sections_test_comes_before_the_crash_of_its_worked_example(course):
    """triple(2) returns None: the example crashes first, but the test names the cause."""
    _toy(course, TWO_SECTIONS.replace("return 3 * x", "return None if x == 2 else 3 * x"))
    run = run_module_tests(course.settings, course.module("02"))
    part, first = shown_failure(run)
    assert part == "inline" and "TRIPLE_CAUSE" in first.detail, first.detail
    assert run.parts["inline"].failures == 2  # the example's TypeError is counted, and shown second
    quick = first_failure_only(course.settings, course.module("02"))
    assert "TRIPLE_CAUSE" in shown_failure(quick)[1].detail and "pytest" not in quick.parts


def test_the_runner_goes_on_after_a_failure_and_skips_what_needed_it(course, tmp_path):
    text = TWO_SECTIONS.replace("return 2 * x", "return 2 + x").replace("example = triple(2) + 1",
                                                                        "example = triple(2) + 1 + undefined")
    notebook = course.add_module("02_toy", text)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "tito.cells", notebook.name, "--report", str(report)],
                          cwd=notebook.parent, env=course.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    data = json.loads(report.read_text(encoding="utf-8"))
    assert [f["test"] for f in data["failures"]] == ["test_unit_double", None]  # the example: NameError
    assert data["tests_passed"] == 1 and "✓ triple" in done.stdout  # section 2 ran after section 1 failed
    sections = {s["title"]: s for s in data["sections"] if s["title"]}
    assert sections["2. Tripling"]["not_run"] == 1  # the last cell needs `example`, which never came


BASE = '''# %% [markdown]
# # Module 01: Base

# %%
#| default_exp core.base

# %%
#| export
def base(x):
    """x itself."""
    ### BEGIN SOLUTION
    raise NotImplementedError(STUB)
    ### END SOLUTION
'''

USES_BASE = '''# %% [markdown]
# # Module 02: Toy
#
# ## 1. Doubling

# %%
#| default_exp core.toy

# %%
#| export
from tinytorch.core.base import base


def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    return 2 * base(x)
    ### END SOLUTION


# %%
def test_unit_double():
    assert double(3) == 6, "DOUBLE_CAUSE"
    print("✓ double")


test_unit_double()
'''


def test_a_stub_left_in_an_earlier_module_is_named_with_its_module(course):
    """Module 02 is written, but it calls module 01's stub: the student must see where that stub lives."""
    stub = stub_message("base", "modules/01_base/base_dev.py", "01_base")
    course.add_module("01_base", BASE.replace("STUB", repr(stub)))
    course.add_module("02_toy", USES_BASE)
    course.add_tests("02_toy", "from tinytorch.core.toy import double\n\n\ndef test_double():\n    assert double(3) == 6\n")
    export_modules(course.settings, [course.module("01"), course.module("02")])
    out = course.flat(course.tito("test", "02").stdout)
    assert "02_toy: in progress" in out and "1. Doubling: waiting for base (module 01_base)" in out, out
    assert "These tests need stubs of 01_base that are not written yet" in out and "`tito test 01_base`" in out, out
    run = run_module_tests(course.settings, course.module("02"))
    assert run.in_progress and run.parts["pytest"].waiting == 1, run.parts["pytest"]
