"""The mistakes catalogue: entries are checked against the notebook, and each must be caught with its cause."""
from __future__ import annotations

import pytest

from tito.course import CourseError
from tito.mistakes import load_catalogue
from tito.release import check_release

TOY_TESTS = '''from tinytorch.core.toy import double


def test_double_of_three():
    assert double(3) == 6, "double(3) must be 6: multiply by 2, not add 2"
'''

CAUGHT = """
[[mistake]]
name = "adds-two"
what = "adds 2 instead of multiplying by 2"
find = '''
    return 2 * x
'''
replace = '''
    return x + 2
'''
message = "multiply by 2"
"""


INLINE_NAMES_IT = 'assert double(4) == 8, "double(4) must be 8: multiply by 2, not add 2"'


def _toy(course, catalogue: str, tests: str = TOY_TESTS, inline: str = "assert double(4) == 8"):
    course.add_module("02_toy", course.TOY.replace("assert double(3) == 6", inline))
    folder = course.root / "tests" / "02_toy"
    folder.mkdir()
    (folder / "test_toy.py").write_text(tests, encoding="utf-8")
    (course.root / "modules" / "02_toy" / "mistakes.toml").write_text(catalogue, encoding="utf-8")
    return course.module("02")


def test_a_caught_mistake_names_the_test_that_caught_it(course):
    module = _toy(course, CAUGHT, inline=INLINE_NAMES_IT)
    [size, check] = check_release(course.settings, [module], stubs=False)
    assert not size.ok and "at least 8" in size.problem  # one mistake is not a catalogue
    assert check.ok, check.problem
    assert check.caught_by == "inline test_unit_double"  # the inline tests run first: theirs is the first failure


def test_pytest_is_shown_when_the_inline_tests_pass(course):
    """The inline tests do not look at double(3): pytest's first failure is the one a student reads."""
    module = _toy(course, CAUGHT.replace("return x + 2", "return 7 if x == 3 else 2 * x"), inline="assert double(4) == 8")
    [check] = check_release(course.settings, [module], stubs=False, only="adds-two")
    assert check.ok, check.problem
    assert check.caught_by == "tests/02_toy/test_toy.py::test_double_of_three"


def test_a_mistake_whose_failure_does_not_name_the_cause_is_a_problem(course):
    module = _toy(course, CAUGHT)  # the inline test catches it first, with a bare assert
    [check] = check_release(course.settings, [module], stubs=False, only="adds-two")
    assert not check.ok and "does not say 'multiply by 2'" in check.problem
    assert "first failure a student sees (inline test_unit_double)" in check.problem


def test_the_cause_must_be_in_the_first_failure_not_in_a_later_one(course):
    later = TOY_TESTS.replace("def test_double_of_three():", "def test_double_of_five():\n    assert double(5) == 10\n\n\n"
                                                             "def test_double_of_three():")
    module = _toy(course, CAUGHT.replace("return x + 2", "return x + 6 if x in (3, 5) else 2 * x"), later)
    [check] = check_release(course.settings, [module], stubs=False, only="adds-two")
    assert not check.ok and check.caught_by == "tests/02_toy/test_toy.py::test_double_of_five", check
    assert "does not say 'multiply by 2'" in check.problem  # test_double_of_three says it, but comes second


def test_a_mistake_no_test_catches_is_a_problem(course):
    module = _toy(course, CAUGHT.replace("return x + 2", "return x * 2"))
    [check] = check_release(course.settings, [module], stubs=False, only="adds-two")
    assert not check.ok and "every test passes" in check.problem


@pytest.mark.parametrize("change, error", [
    (("return 2 * x", "return 3 * x"), "occurs 0 times"),
    (('message = "multiply by 2"', ""), "needs the fields message"),
    (("name = \"adds-two\"", "name = \"Adds Two\""), "lower-case words"),
])
def test_a_broken_catalogue_is_refused_before_anything_runs(course, change, error):
    module = _toy(course, CAUGHT.replace(*change))
    with pytest.raises(CourseError, match=error):
        load_catalogue(module)


def test_a_mistake_outside_a_solution_block_is_refused(course):
    module = _toy(course, CAUGHT.replace("    return 2 * x\n'''\nreplace", '    """Twice x."""\n\'\'\'\nreplace'))
    with pytest.raises(CourseError, match="not inside one solution block"):
        load_catalogue(module)


DECORATED = """
def plain(fn):
    return fn


@plain
def given(x):
    return x


@plain
def double(x):
"""


@pytest.mark.parametrize("decorated, allowed", [("double", True), ("given", False)])
def test_a_mistake_may_change_how_a_students_function_is_compiled_not_given_code(course, decorated, allowed):
    """A student may add `fastmath=True` to their kernel's `@kernel()`: the decorators and def line of a
    function holding a solution block are theirs; the same lines of given code are not."""
    course.add_module("02_toy", course.TOY.replace("def double(x):\n", DECORATED.lstrip("\n"), 1))
    (course.root / "modules" / "02_toy" / "mistakes.toml").write_text(f"""
[[mistake]]
name = "decorated-twice"
what = "decorates {decorated} twice"
find = '''
@plain
def {decorated}(x):
'''
replace = '''
@plain
@plain
def {decorated}(x):
'''
message = "twice"
""", encoding="utf-8")
    module = course.module("02")
    if allowed:
        assert [m.name for m in load_catalogue(module)] == ["decorated-twice"]
    else:
        with pytest.raises(CourseError, match="not inside one solution block"):
            load_catalogue(module)


def test_the_student_edition_never_carries_the_catalogue(course, tmp_path):
    _toy(course, CAUGHT)
    result = course.tito("release", "student", str(tmp_path / "student"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "student" / "modules" / "02_toy" / "toy_dev.py").is_file()
    assert not (tmp_path / "student" / "modules" / "02_toy" / "mistakes.toml").exists()


def test_sharing_the_beginning_gives_the_verdicts_of_runs_from_the_top(course, tmp_path):
    """`release check` runs a module's mistakes from their first changed cell (`tito.cell_variants`);
    each verdict, and the test that caught it, is what a run of that mistake from the top gives."""
    from tito.release import check_mistakes

    catalogue = CAUGHT + CAUGHT.replace("adds-two", "only-three").replace("return x + 2", "return 7 if x == 3 else 2 * x") \
        + CAUGHT.replace("adds-two", "no-change-seen").replace("return x + 2", "return x * 2")
    module = _toy(course, catalogue, inline=INLINE_NAMES_IT)
    mistakes = load_catalogue(module)
    (tmp_path / "shared").mkdir()
    (tmp_path / "alone").mkdir()
    shared = check_mistakes(course.settings, module, mistakes, tmp_path / "shared")
    alone = check_mistakes(course.settings, module, mistakes, tmp_path / "alone", share_beginning=False)
    assert [(c.name, c.ok, c.caught_by, c.problem) for c in shared] == \
           [(c.name, c.ok, c.caught_by, c.problem) for c in alone]
    assert [c.caught_by for c in shared] == ["inline test_unit_double", "tests/02_toy/test_toy.py::test_double_of_three",
                                             ""]
    assert (tmp_path / "shared" / "reports" / "0.json").is_file()  # the shared run did run them
