"""tito grade on the whole course: every module with graded cases, in the sandbox, compared by the grader.

* Two submissions hold the reference notebooks with one catalogued mistake in every other module
  (one in the odd modules, one in the even ones): the reference notebook of every module scores
  full marks whatever the other modules hold, and a mistake costs points in its own module only.
* Every catalogued mistake of modules 01, 05, 12 and 13 that a graded case tells apart (its
  recorded values differ from the reference's; `grading/record_expected.py` refuses a catalogue
  with a mistake no case tells apart) is submitted on its own: it loses points, and the feedback
  names it (its `what` and `message` from the catalogue). (The other modules' mistakes are proved
  told apart by tests/tito/test_graded_cases.py from the recorded values; grading each of them
  here too would take half an hour.)
* A fresh `tito release student` edition scores 0 in every module, "N stubs left".
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tito.course import list_modules, load_settings
from tito.grading.compare import case_problems
from tito.grading.config import GRADING_DIR
from tito.grading.grade import CASES_FILE, GradeOptions, GradingRun, grade_submissions
from tito.grading.report import write_outputs
from tito.grading.submissions import collect_submissions
from tito.mistakes import load_catalogue
from tito.notebook import read_text
from tito.release import write_student_edition

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SETTINGS = load_settings(REPO)
MODULES = [m for m in list_modules(SETTINGS) if (REPO / GRADING_DIR / m.key / CASES_FILE).is_file()]
WITH_MISTAKE = {0: "mistakes_in_even_modules", 1: "mistakes_in_odd_modules"}
EVERY_MISTAKE = ("01", "05", "12", "13")  # the modules whose every told-apart mistake is graded on its own


def _told_apart(run: GradingRun, key: str) -> list[str]:
    """The catalogued mistakes of `key` whose recorded values some case does not accept."""
    graded = run.cases[key]
    return [m.name for m in graded.catalogue if m.name in graded.mistakes
            and any(case_problems(spec, graded.mistakes[m.name], False) for spec in graded.specs)]


def _write(folder: Path, module, text: str) -> None:
    lesson = folder / "modules" / module.key / module.notebook.name
    lesson.parent.mkdir(parents=True)
    lesson.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course-grade")
    tmp.chmod(0o755)
    submissions = tmp / "submissions"
    options = GradeOptions(tuple(MODULES), jobs=2)
    with GradingRun(SETTINGS, options) as run:
        catalogues = {m.key: {c.name: c for c in load_catalogue(m)} for m in MODULES}
        told_apart = {m.key: _told_apart(run, m.key) for m in MODULES}
        mistakes = {}
        for parity, name in WITH_MISTAKE.items():
            for module in MODULES:
                text = read_text(module.notebook)
                if int(module.number) % 2 == parity:
                    mistakes[module.key] = catalogues[module.key][told_apart[module.key][0]]
                    text = mistakes[module.key].apply(text)
                _write(submissions / name, module, text)
        alone = {}  # every other mistake a case tells apart, alone: only its module's notebook
        for module in (m for m in MODULES if m.number in EVERY_MISTAKE):
            for mistake_name in told_apart[module.key][1:]:
                name = f"{module.number}-{mistake_name}"
                alone[name] = (module.key, catalogues[module.key][mistake_name])
                _write(submissions / name, module, alone[name][1].apply(read_text(module.notebook)))
        edition = write_student_edition(SETTINGS, tmp / "edition").dest
        shutil.copytree(edition, submissions / "student_edition")
        students = grade_submissions(SETTINGS, collect_submissions(submissions, MODULES), options, run=run)
        write_outputs(tmp / "grades", students, run.points)
    return {s.name: s for s in students}, mistakes, alone, tmp / "grades"


def _with_mistake(module) -> str:
    return WITH_MISTAKE[int(module.number) % 2]


def _reference(module) -> str:
    return WITH_MISTAKE[1 - int(module.number) % 2]


def _section(out: Path, student: str, key: str) -> str:
    feedback = (out / "feedback" / f"{student}.md").read_text(encoding="utf-8")
    return feedback.split(f"## {key}:", 1)[1].split("\n## ", 1)[0]


def test_the_modules_with_cases_are_graded():
    assert set(EVERY_MISTAKE) <= {m.number for m in MODULES}


@pytest.mark.parametrize("module", MODULES, ids=[m.key for m in MODULES])
def test_the_reference_scores_full_marks(graded, module):
    result = graded[0][_reference(module)].modules[module.key]
    failures = [f"{c.name}: {c.message}" for c in result.cases if not c.passed]
    assert result.score == result.max_score > 0 and not result.reason, result.reason or failures[:3]


@pytest.mark.parametrize("module", MODULES, ids=[m.key for m in MODULES])
def test_a_catalogued_mistake_costs_points_in_its_module_only_and_the_feedback_names_it(graded, module):
    students, mistakes, _, out = graded
    result = students[_with_mistake(module)].modules[module.key]
    assert 0 <= result.score < result.max_score and not result.reason, result.reason
    section = _section(out, _with_mistake(module), module.key)
    assert f"catalogued mistake, {mistakes[module.key].name}: {mistakes[module.key].what}" in section
    assert mistakes[module.key].message in section


def test_every_mistake_a_case_tells_apart_loses_points_and_is_named(graded):
    students, _, alone, out = graded
    assert len(alone) == sum(len(load_catalogue(m)) - 1 for m in MODULES if m.number in EVERY_MISTAKE)
    unnamed = []
    for name, (key, mistake) in alone.items():
        result = students[name].modules[key]
        assert result.score < result.max_score and not result.reason, (name, result.reason)
        if f"catalogued mistake, {mistake.name}: {mistake.what} ({mistake.message})" not in _section(out, name, key):
            unnamed.append(name)
    assert unnamed == []


@pytest.mark.parametrize("module", MODULES, ids=[m.key for m in MODULES])
def test_a_fresh_student_edition_scores_0_with_its_stubs_left(graded, module):
    result = graded[0]["student_edition"].modules[module.key]
    assert result.score == 0 and re.fullmatch(r"\d+ stubs? left", result.reason), result.reason
