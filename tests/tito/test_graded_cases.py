"""The graded cases (grading/NN_name/cases.py) and what record_expected.py recorded for them.

Fast: nothing is recorded here; the committed expected.npz and mistakes.npz are read. For
every module with cases: expected.npz holds values for exactly its cases, and mistakes.npz
holds, for every mistake of the module's catalogue, values that differ from the reference's
on at least one case (the cases tell the mistake apart), and the module's student edition
passes no case (student_edition.npz). The comparison itself
(record_expected.differs / telling_cases) is tested on made-up values.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tito.course import list_modules, load_settings
from tito.mistakes import load_catalogue

REPO = Path(__file__).resolve().parents[2]
GRADING = REPO / "grading"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(GRADING))  # reference_values, as record_expected.py itself puts it
record_expected = _load("record_expected_under_test", GRADING / "record_expected.py")

CASE_FOLDERS = sorted(p.parent for p in GRADING.glob("[0-9][0-9]_*/cases.py"))
MODULES = {m.key: m for m in list_modules(load_settings(REPO))}


def cases_of(folder: Path) -> dict:
    return _load(f"graded_cases_{folder.name}", folder / "cases.py").CASES


def stored(path: Path) -> dict[str, np.ndarray]:
    assert path.is_file(), f"{path.relative_to(REPO)} is missing: run `python grading/record_expected.py {path.parent.name[:2]}`"
    return record_expected.load(path)


def test_every_module_with_a_catalogue_is_graded_by_cases():
    graded = {f.name for f in CASE_FOLDERS}
    ungraded = [key for key, module in MODULES.items() if load_catalogue(module) and key not in graded]
    assert not ungraded, f"modules with solution blocks but no grading/NN/cases.py: {ungraded}"


@pytest.mark.parametrize("folder", CASE_FOLDERS, ids=lambda f: f.name)
def test_expected_values_cover_exactly_the_cases(folder):
    cases = cases_of(folder)
    expected = stored(folder / record_expected.EXPECTED_FILE)
    recorded = {key.split("/", 1)[0] for key in expected}
    assert recorded == set(cases), (
        f"{folder.name}/expected.npz holds cases {sorted(recorded - set(cases))} that cases.py no longer has and "
        f"lacks {sorted(set(cases) - recorded)}: run `python grading/record_expected.py {folder.name[:2]}`")
    raised = [key for key in expected if key.endswith("/" + record_expected.RAISED)]
    assert not raised, f"the reference raised in {raised}: a case checks an error by catching it itself"
    assert all(value.dtype != object for value in expected.values())


@pytest.mark.parametrize("folder", CASE_FOLDERS, ids=lambda f: f.name)
def test_every_catalogued_mistake_is_recorded_and_told_apart(folder):
    catalogue = [m.name for m in load_catalogue(MODULES[folder.name])]
    assert catalogue, f"{folder.name} has cases but no mistakes catalogue"
    mistakes = stored(folder / record_expected.MISTAKES_FILE)
    recorded = {key.split("/", 1)[0] for key in mistakes}
    assert recorded == set(catalogue), (
        f"{folder.name}/mistakes.npz holds {sorted(recorded - set(catalogue))} that the catalogue no longer has "
        f"and lacks {sorted(set(catalogue) - recorded)}: run `python grading/record_expected.py {folder.name[:2]}`")
    telling = record_expected.telling_cases(cases_of(folder), stored(folder / record_expected.EXPECTED_FILE),
                                            mistakes, catalogue)
    untold = [name for name, by in telling.items() if not by]
    assert not untold, f"{folder.name}: no case tells these mistakes apart from the reference: {untold}"


@pytest.mark.parametrize("folder", CASE_FOLDERS, ids=lambda f: f.name)
def test_the_student_edition_passes_no_case(folder):
    cases = cases_of(folder)
    expected = stored(folder / record_expected.EXPECTED_FILE)
    stubbed = stored(folder / record_expected.STUDENT_EDITION_FILE)
    free = [name for name, case in cases.items()
            if not record_expected.differs(case, {k: v for k, v in expected.items() if k.startswith(name + "/")},
                                           {k: v for k, v in stubbed.items() if k.startswith(name + "/")})]
    assert not free, f"{folder.name}: the student edition (every solution block a stub) passes {free}: points for no work"


# ---- the comparison on made-up values -------------------------------------------------------------------


def test_differs_uses_the_case_tolerance_dtype_and_shape():
    base = {"c/x": np.array([1.0, 2.0])}
    assert not record_expected.differs((None, ""), base, {"c/x": np.array([1.0, 2.0 + 1e-9])})
    assert record_expected.differs((None, ""), base, {"c/x": np.array([1.0, 2.001])})
    assert not record_expected.differs((None, "", {"rtol": 1e-2}), base, {"c/x": np.array([1.0, 2.001])})
    assert record_expected.differs((None, ""), base, {"c/x": np.array([1.0, 2.0], dtype=np.float32)})
    assert record_expected.differs((None, ""), base, {"c/x": np.array([[1.0, 2.0]])})
    assert record_expected.differs((None, ""), base, {"c/(raised)": np.asarray("ValueError")})
    assert record_expected.differs((None, ""), {"c/n": np.array([3, 4])}, {"c/n": np.array([3, 5])})


def test_telling_cases_names_the_cases_that_differ_and_finds_an_untold_mistake():
    cases = {"a": (None, ""), "b": (None, "")}
    expected = {"a/v": np.array(1.0), "b/v": np.array("x")}
    mistakes = {"same/a/v": np.array(1.0), "same/b/v": np.array("x"),
                "one/a/v": np.array(1.5), "one/b/v": np.array("x"),
                "hangs/(run)/(timed out)": np.asarray(True)}
    telling = record_expected.telling_cases(cases, expected, mistakes, ["same", "one", "hangs"])
    assert telling == {"same": [], "one": ["a"], "hangs": ["(run)", "a", "b"]}  # no values: every case differs


def test_a_raising_case_is_recorded_by_its_type_unless_strict(tmp_path):
    folder = tmp_path / "99_toy"
    folder.mkdir()
    (folder / "cases.py").write_text(
        "def _ok(rng):\n    return {'v': rng.integers(0, 10, 3)}\n\n"
        "def _bad(rng):\n    raise KeyError('no')\n\n"
        "CASES = {'ok': (_ok, 'fine'), 'bad': (_bad, 'raises')}\n", encoding="utf-8")
    values = record_expected.compute_all(folder, strict=False)
    assert set(values) == {"ok/v", "bad/(raised)"} and str(values["bad/(raised)"]) == "KeyError"
    assert np.array_equal(values["ok/v"], record_expected.compute_all(folder, strict=False)["ok/v"]), "seeded by name"
    with pytest.raises(KeyError):
        record_expected.compute_all(folder, strict=True)


def test_raised_reports_the_type_of_the_error_or_nothing():
    from reference_values import raised

    assert raised(int, "seven") == "ValueError"
    assert raised({}.__getitem__, "k") == "KeyError"
    assert raised(int, "7") == "nothing"
