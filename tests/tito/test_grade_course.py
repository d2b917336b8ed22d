"""tito grade on the whole course (every module, visible and hidden tests, in the sandbox).

Two submissions hold the reference notebooks with one catalogued mistake (the first of each
catalogue) in every other module: one in the odd modules, one in the even ones. So every
module is graded once with its mistake and once as the reference, next to neighbours that
are correct in one run and wrong in the other:

* the reference notebook of every module scores full marks (acceptance: the reference
  edition, submitted as a student, scores full marks), whatever the other modules hold;
* the mistake costs points in its own module only, and the feedback names its cause;
* a fresh `tito release student` edition scores 0 in every module, "N stubs left".
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tito.course import list_modules, load_settings
from tito.grade import GradeOptions, GradingRun, grade_submissions
from tito.grade_report import write_outputs
from tito.mistakes import load_catalogue
from tito.notebook import read_text
from tito.release import write_student_edition
from tito.submissions import collect_submissions

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SETTINGS = load_settings(REPO)
MODULES = list_modules(SETTINGS)
WITH_MISTAKE = {0: "mistakes_in_even_modules", 1: "mistakes_in_odd_modules"}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course-grade")
    tmp.chmod(0o755)
    submissions = tmp / "submissions"
    mistakes = {}
    for parity, name in WITH_MISTAKE.items():
        for module in MODULES:
            text = read_text(module.notebook)
            if int(module.number) % 2 == parity:
                mistakes[module.key] = load_catalogue(module)[0]
                text = mistakes[module.key].apply(text)
            lesson = submissions / name / "modules" / module.key / module.notebook.name
            lesson.parent.mkdir(parents=True)
            lesson.write_text(text, encoding="utf-8")
    edition = write_student_edition(SETTINGS, tmp / "edition").dest
    shutil.copytree(edition, submissions / "student_edition")
    options = GradeOptions(jobs=2)
    with GradingRun(SETTINGS, options) as run:
        students = grade_submissions(SETTINGS, collect_submissions(submissions, MODULES), options, run=run)
        write_outputs(tmp / "grades", students, run.points)
    return {s.name: s for s in students}, mistakes, tmp / "grades"


def _with_mistake(module) -> str:
    return WITH_MISTAKE[int(module.number) % 2]


def _reference(module) -> str:
    return WITH_MISTAKE[1 - int(module.number) % 2]


@pytest.mark.parametrize("module", MODULES, ids=[m.key for m in MODULES])
def test_the_reference_scores_full_marks(graded, module):
    result = graded[0][_reference(module)].modules[module.key]
    failures = [f"{t.nodeid}: {t.message}" for t in result.tests if t.outcome != "passed"]
    assert result.score == result.max_score > 0 and not result.reason, result.reason or failures[:3]


@pytest.mark.parametrize("module", MODULES, ids=[m.key for m in MODULES])
def test_a_catalogued_mistake_costs_points_in_its_module_and_the_feedback_names_it(graded, module):
    students, mistakes, out = graded
    result = students[_with_mistake(module)].modules[module.key]
    assert 0 < result.score < result.max_score and not result.reason, result.reason
    feedback = (out / "feedback" / f"{_with_mistake(module)}.md").read_text(encoding="utf-8")
    section = feedback.split(f"## {module.key}:", 1)[1].split("\n## ", 1)[0]
    assert mistakes[module.key].message in section


@pytest.mark.parametrize("module", MODULES, ids=[m.key for m in MODULES])
def test_a_fresh_student_edition_scores_0_with_its_stubs_left(graded, module):
    result = graded[0]["student_edition"].modules[module.key]
    assert result.score == 0 and re.fullmatch(r"\d+ stubs? left", result.reason), result.reason
