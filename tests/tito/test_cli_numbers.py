"""Numbers given to tito on the command line or in settings.ini: NaN, inf and nonsense are refused
by name before any work. (`tito test --timeout nan` used to run with no time limit at all, as
grading.toml's `time_s = nan` did.)"""
from __future__ import annotations

import pytest

from tito.course import CourseError, load_settings


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "1e308"])
def test_test_timeout_must_be_a_finite_positive_number_of_minutes(course, value):
    result = course.tito("test", "01", f"--timeout={value}")
    assert result.returncode == 1
    assert (f"--timeout takes a positive number of minutes, e.g. --timeout 5 (found {float(value)})"
            in course.flat(result.stdout))
    assert not course.settings.state_path.exists()  # refused before anything ran or was recorded


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "ten"])
def test_the_courses_test_timeout_must_be_a_finite_positive_number(course, value):
    settings_file = course.root / "settings.ini"
    text = settings_file.read_text(encoding="utf-8")
    assert "test_timeout_minutes = 10" in text
    settings_file.write_text(text.replace("test_timeout_minutes = 10", f"test_timeout_minutes = {value}"),
                             encoding="utf-8")
    with pytest.raises(CourseError, match=rf"test_timeout_minutes = '{value}' must be a positive number of minutes"):
        load_settings(course.root)


@pytest.mark.parametrize("value", ["0", "-3"])
def test_release_check_jobs_must_be_positive(course, value):
    result = course.tito("release", "check", "01", f"--jobs={value}")
    assert result.returncode == 1
    assert f"--jobs takes a positive number, e.g. --jobs 2 (found {value})" in course.flat(result.stdout)


def _one_submission(course, tmp_path):
    """A submissions folder holding one student's module 01 (the reference notebook)."""
    student = tmp_path / "subs" / "bob" / "modules" / "01_tensor"
    student.mkdir(parents=True)
    student.joinpath("tensor_dev.py").write_bytes(course.module("01").notebook.read_bytes())
    return tmp_path / "subs"


@pytest.mark.parametrize("extra", [1, 1000])
def test_grade_jobs_above_the_cores_are_refused_before_any_work(course, tmp_path, extra):
    """`tito grade --jobs 1000` claimed 1000 sandbox users and ran 1000 jobs on a few cores, each job's
    wall-clock limit counting the time it waited for one."""
    import os

    cores = os.cpu_count() or 1
    out = tmp_path / "grades"
    result = course.tito("grade", str(_one_submission(course, tmp_path)), "--modules", "01",
                         "--jobs", str(cores + extra), "--out", str(out))
    assert result.returncode == 1
    assert (f"--jobs {cores + extra}: this machine has {cores} core(s), so at most --jobs {cores}."
            in course.flat(result.stdout)), result.stdout
    assert f"Give --jobs {cores} or fewer" in course.flat(result.stdout) and "Traceback" not in result.stdout
    assert not out.exists(), "refused before --out was made or anything graded"


@pytest.mark.parametrize("value", ["0", "-3"])
def test_grade_jobs_must_be_positive(course, tmp_path, value):
    out = tmp_path / "grades"
    result = course.tito("grade", str(_one_submission(course, tmp_path)), "--modules", "01", f"--jobs={value}",
                         "--out", str(out))
    assert result.returncode == 1
    assert "--jobs takes a positive number, e.g. --jobs " in course.flat(result.stdout)
    assert f"(found {value})" in course.flat(result.stdout) and not out.exists()


@pytest.mark.parametrize("script, arguments, message", [
    ("grading.py", ["--jobs", "0"], "--students 20 --jobs 0: students 0 or more, jobs at least 1"),
    ("grading.py", ["--students", "-5"], "--students -5 --jobs 1: students 0 or more, jobs at least 1"),
    ("gpt.py", ["--milestone", "--milestone-threads", "0"],
     "--milestone-threads 0: give a whole number of threads, at least 1"),
])
def test_benchmark_counts_are_refused_before_any_work(script, arguments, message):
    """`benchmarks/grading.py --jobs 0` graded a class first (as one job) and wrote `--jobs 0` into RESULTS.md."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    jobs = ["--jobs", "1"] if script == "grading.py" and "--jobs" not in arguments else []
    result = subprocess.run([sys.executable, str(root / "benchmarks" / script), *arguments, *jobs], cwd=root,
                            env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr
