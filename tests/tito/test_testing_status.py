"""tito test runs and records every part; tito status reports only what was recorded."""
from __future__ import annotations

import json

from tito.status import course_status
from tito.testing import load_results, run_in_kernel, run_tests


def test_status_says_not_run_before_tests_and_the_result_after(course):
    [before] = course_status(course.settings)
    assert before.tests == "not run" and before.exported and before.in_sync

    listed = course.tito("status", cwd=course.root / "tests" / "01_tensor")
    assert listed.returncode == 0 and "not run" in listed.stdout

    ran = course.tito("status", "--run", cwd=course.root / "tests" / "01_tensor")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "passed 20" in ran.stdout and "not run" not in ran.stdout
    [after] = course_status(course.settings)
    assert after.tests.startswith("passed ") and "inline passed, pytest passed" in after.tests

    module = course.module("01")
    module.notebook.write_text(module.notebook.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    [changed] = course_status(course.settings)
    assert changed.tests.endswith("the notebook changed since")


def test_a_failing_inline_test_fails_the_run_and_is_recorded(course):
    course.add_module("02_toy", course.TOY.replace("return 2 * x", "return 3 * x"))
    course.tito("export", "02")
    done = course.tito("test", "toy")
    assert done.returncode == 1
    assert "AssertionError" in done.stdout and "02_toy" in done.stdout

    record = json.loads((course.root / ".tito" / "results.json").read_text(encoding="utf-8"))
    toy = record["runs"]["02_toy"]
    assert toy["passed"] is False and toy["parts"]["inline"]["status"] == "failed"
    assert toy["finished_at"].endswith("+00:00") and toy["seconds"] > 0
    statuses = {s.module.key: s.tests for s in course_status(course.settings)}
    assert statuses["02_toy"].startswith("failed ") and statuses["01_tensor"] == "not run"


def test_no_argument_also_runs_the_folders_of_no_module(course):
    extra = course.root / "tests" / "integration"
    extra.mkdir()
    (extra / "test_sum.py").write_text("def test_sum():\n    assert sum([1, 2]) == 4\n", encoding="utf-8")
    course.add_module("02_toy", course.TOY)
    [toy, folder] = run_tests(course.settings, [course.module("02")], include_extra=True)
    assert toy.passed and toy.parts["inline"].status == "passed"
    assert folder.name == "tests/integration" and not folder.passed
    assert "1 failed" in folder.parts["pytest"].detail or "assert 3 == 4" in folder.parts["pytest"].detail
    assert set(load_results(course.settings)) == {"02_toy", "tests/integration"}


def test_the_notebook_runs_in_a_jupyter_kernel(course):
    course.add_module("02_toy", course.TOY)
    assert run_in_kernel(course.settings, course.module("02")).status == "passed"
    course.add_module("02_toy", course.TOY.replace("return 2 * x", "return 3 * x"))
    failed = run_in_kernel(course.settings, course.module("02"))
    assert failed.status == "failed" and "AssertionError" in failed.detail
