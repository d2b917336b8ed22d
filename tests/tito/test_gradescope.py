"""tito grade --gradescope: the bundle, laid out as Gradescope does under a scratch root, set up in a
fresh virtual environment by its own setup.sh, then run_autograder on three submissions.
"""
from __future__ import annotations

import json
import os
import subprocess
import zipfile

import pytest

from tito.grading.gradescope import ROOT_ENV, build_bundle, unpack_like_gradescope
from tito.mistakes import load_catalogue
from tito.notebook import stub_text

pytestmark = pytest.mark.slow
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


def check_results(results: dict) -> None:
    """The fields Gradescope's harness reads, with the types it expects."""
    assert isinstance(results["score"], float) and isinstance(results["output"], str)
    assert results.get("stdout_visibility", "hidden") in VISIBILITIES
    assert isinstance(results["execution_time"], int)
    assert results["tests"], "no test entries"
    for test in results["tests"]:
        assert isinstance(test["name"], str) and isinstance(test["output"], str)
        assert isinstance(test["score"], float) and isinstance(test["max_score"], float)
        assert 0 <= test["score"] <= test["max_score"] and test["visibility"] in VISIBILITIES
    assert sum(t["score"] for t in results["tests"]) == pytest.approx(results["score"])


def test_the_bundle_installs_itself_and_grades_three_submissions(grading_course, tmp_path):
    module = grading_course.module("01")
    bundle = build_bundle(grading_course.settings, tmp_path / "autograder.zip", [module]).path
    names = zipfile.ZipFile(bundle).namelist()
    assert {"setup.sh", "run_autograder", "requirements.txt", "course/grading/01_tensor/cases.py",
            "course/grading/01_tensor/expected.npz", "course/grading/01_tensor/mistakes.npz",
            "course/grading/grading.toml", "course/tinytorch/core/tensor.py"} <= set(names)
    grading_code = {f"course/tito/grading/{name}.py" for name in ("__init__", "grade", "cases", "compare", "sandbox")}
    assert grading_code <= set(names), f"tito grade runs from the bundle's course: {sorted(grading_code - set(names))}"
    assert "course/modules/01_tensor/mistakes.toml" in names  # for the grader only (setup.sh: root-only)
    assert not any(n.startswith("course/tests/tito/") for n in names)

    root = tmp_path / "autograder"
    unpack_like_gradescope(bundle, root)
    env = {**os.environ, ROOT_ENV: str(root)}
    env.pop("PYTHONPATH", None)
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=900)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]

    reference = module.notebook.read_text(encoding="utf-8")
    [mistake] = [m for m in load_catalogue(module) if m.name == "mean-upcasts"]  # a case tells it apart
    submissions = {
        "reference": {"tensor_dev.py": reference},  # a loose file, as a student uploads it
        "student_edition": {"modules/01_tensor/tensor_dev.py":
                            stub_text(reference, module.notebook, "modules/01_tensor/tensor_dev.py", module.key)},
        "mistake": {"repo/modules/01_tensor/tensor_dev.py": mistake.apply(reference), "repo/conftest.py": "x = 1\n"},
    }
    results = {}
    for name, files in submissions.items():
        for folder in (root / "submission", root / "results"):
            subprocess.run(["rm", "-rf", str(folder)], check=True)
            folder.mkdir()
        for path, text in files.items():
            (root / "submission" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / "submission" / path).write_text(text, encoding="utf-8")
        done = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        results[name] = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
        check_results(results[name])

    assert results["reference"]["score"] == 10.0
    cases = [t for t in results["reference"]["tests"] if t["max_score"] > 0]
    assert len(cases) > 10 and all(t["visibility"] == "after_due_date" for t in cases)
    assert results["reference"]["visibility"] == "after_due_date"
    assert results["student_edition"]["score"] == 0.0 and "16 stubs left" in results["student_edition"]["output"]
    assert 0 < results["mistake"]["score"] < 10
    assert mistake.message in "".join(t["output"] for t in results["mistake"]["tests"])
    assert "repo/conftest.py" in results["mistake"]["output"]
