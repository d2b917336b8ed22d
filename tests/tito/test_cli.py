"""Behaviour shared by every command: found from any folder, wrong names answered with the valid ones."""
from __future__ import annotations

import pytest

from tito.course import CourseError, resolve_module


def test_a_wrong_module_name_lists_the_valid_ones(course):
    course.add_module("02_toy", course.TOY)
    with pytest.raises(CourseError, match="Valid modules: 01_tensor, 02_toy"):
        resolve_module(course.settings, "tensr")


@pytest.mark.parametrize("command", [["export", "tensr"], ["test", "tensr"], ["module", "reset", "tensr"],
                                     ["release", "check", "tensr"]])
def test_every_module_command_answers_a_wrong_name(course, command):
    result = course.tito(*command, cwd=course.root / "tests")
    assert result.returncode == 1
    assert "Unknown module 'tensr'. Valid modules: 01_tensor" in result.stdout


def test_outside_a_course_the_error_says_where_to_run(tmp_path, course):
    result = course.tito("status", cwd=tmp_path)
    assert result.returncode == 1
    assert "No TinyTorch course found" in result.stdout
