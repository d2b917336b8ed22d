"""grading.toml: every key checked (type, finite, range) with a message naming the file, the key and
what to write; a grading.toml that exists but cannot be read is an error, never the defaults.

A NaN time limit used to switch the time and CPU limits off (a `while True` ran on past 150 s),
and a folder named grading.toml made every test count one point without a word.
"""
from __future__ import annotations

import pytest

from tito.course import CourseError
from tito.grading.config import load_config

BAD_LIMITS = [  # (the line under [limits], what the message must say)
    ("time_s = nan", "time_s = nan must be a positive number, at most 86400 (e.g. time_s = 600)"),
    ("time_s = inf", "time_s = inf must be a positive number"),
    ("cpu_s = -inf", "cpu_s = -inf must be a positive number"),
    ("time_s = 0", "time_s = 0 must be a positive number"),
    ("time_s = 1e9", "time_s = 1000000000.0 must be a positive number, at most 86400"),
    ('time_s = "600"', "time_s = '600' must be a positive number"),
    ("time_s = true", "time_s = True must be a positive number"),
    ("memory_mb = inf", "memory_mb = inf must be a positive number, at most 4.39805e+12 (e.g. memory_mb = 3072)"),
    ("memory_mb = nan", "memory_mb = nan must be a positive number"),
    ("memory_mb = 1e300", "memory_mb = 1e+300 must be a positive number, at most 4.39805e+12"),
    ("output_mb = 1e-9", "output_mb = 1e-09 must be a positive number"),  # 0 bytes: nothing may be printed
    ("disk_mb = [1]", "disk_mb = [1] must be a positive number"),
    ("processes = 2.5", "processes = 2.5 must be a positive whole number, at most 1e+06 (e.g. processes = 128)"),
    ("processes = nan", "processes = nan must be a positive whole number"),
]


@pytest.fixture
def toml(course):
    path = course.root / "grading" / "grading.toml"
    path.parent.mkdir()

    def write(text: str):
        path.write_text(text + "\n", encoding="utf-8")
        return path

    return write


@pytest.mark.parametrize("line, message", BAD_LIMITS, ids=[line for line, _ in BAD_LIMITS])
def test_every_limit_must_be_a_finite_positive_number_in_its_range(course, toml, line, message):
    path = toml(f"[limits]\n{line}")
    with pytest.raises(CourseError) as refused:
        load_config(course.settings)
    assert str(refused.value).startswith(f"{path}: [limits] ") and message in str(refused.value)


BAD_TABLES = [  # (grading.toml, what the message must say)
    ("limits = 5", "[limits] must be a table, e.g. [limits] followed by lines like time_s = 600 (found 5)"),
    ('limits = "fast"', "[limits] must be a table"),
    ("modules = 5", "modules must be a table, e.g. [modules.01_tensor] followed by weight = 10 (found 5)"),
    ("[modules.01]\npoints = 5", '[modules.01.points] must be a table, e.g. [modules.01.points] followed by lines '
                                 'like "tests/01_tensor" = 7 (found 5)'),
    ("[modules.01]\nweight = nan", "[modules.01] weight must be a number of points, 0 or more, e.g. 10 (found nan)"),
    ("[modules.01]\nweight = inf", "[modules.01] weight must be a number of points"),
    ("[modules.01]\nweight = -1", "[modules.01] weight must be a number of points"),
    ('[modules.01.points]\n"tests/01_tensor" = nan', "[modules.01.points] 'tests/01_tensor' must be a number"),
    ('[modules.01.points]\n"tests/01_tensor" = -inf', "[modules.01.points] 'tests/01_tensor' must be a number"),
    ("hidden_visibility = 5", "hidden_visibility = 5; use one of visible"),
    ("hidden_visibility = ['visible']", "hidden_visibility = ['visible']; use one of visible"),
]


@pytest.mark.parametrize("text, message", BAD_TABLES, ids=[text for text, _ in BAD_TABLES])
def test_every_table_and_value_is_checked_naming_the_file_and_the_key(course, toml, text, message):
    path = toml(text)
    with pytest.raises(CourseError) as refused:
        load_config(course.settings)
    assert str(refused.value).startswith(f"{path}: ") and message in str(refused.value)


def test_good_values_still_load(course, toml):
    toml('[limits]\ntime_s = 30.5\nmemory_mb = 512\nprocesses = 64.0\noutput_mb = 0.5\n'
         '[modules.01]\nweight = 12.5\n[modules.01.points]\n"tests/01_tensor" = 0')
    config = load_config(course.settings)
    assert config.limits.wall_s == 30.5 == config.limits.cpu_s
    assert config.limits.memory_bytes == 512 * 2 ** 20 and config.limits.output_bytes == 2 ** 19
    assert config.limits.processes == 64 and isinstance(config.limits.processes, int)
    assert str(config.weights["01_tensor"]) == "25/2" and config.points == {"01_tensor": {"tests/01_tensor": 0}}


def test_a_grading_toml_that_is_a_folder_a_dangling_link_or_unreadable_is_an_error(course):
    folder = course.root / "grading" / "grading.toml"
    folder.mkdir(parents=True)
    with pytest.raises(CourseError, match=rf"^{folder} is a folder, so the points and limits cannot be read"):
        load_config(course.settings)
    folder.rmdir()
    link = course.root / "grading.toml"
    link.symlink_to(course.root / "points.toml")
    with pytest.raises(CourseError, match=rf"^{link} is a link to nothing, so .* remove it to count every test"):
        load_config(course.settings)
    link.unlink()
    unreadable = course.root / "grading" / "grading.toml"
    unreadable.write_bytes(b"[limits]\ntime_s = 600 # caf\xe9\n")
    with pytest.raises(CourseError, match=rf"{unreadable}.*UTF-8.* Fix {unreadable} or remove it"):
        load_config(course.settings)


def test_a_grading_toml_without_read_permission_is_an_error_not_the_defaults(course, toml, unprivileged):
    import subprocess
    import sys

    path = toml("[limits]\ntime_s = 5")
    path.chmod(0o000)
    try:
        result = subprocess.run([*unprivileged, sys.executable, "-c", "from tito.course import load_settings; "
                                 "from tito.grading.config import load_config; load_config(load_settings())"],
                                cwd=course.root, env=course.env(), capture_output=True, text=True, timeout=120)
    finally:
        path.chmod(0o644)
    assert result.returncode == 1
    assert (f"CourseError: {path}: cannot read the file (Permission denied). Fix {path} or remove it to count every "
            "test one point.") in result.stderr
