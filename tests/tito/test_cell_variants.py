"""tito.cell_variants: variants of a notebook run from their first changed cell, after one run
of the shared beginning, and report what a run from the top (`tito.cells --first-failure`) would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tito.cells import run as run_from_the_top

REFERENCE = '''# %%
import pathlib
with open("beginnings.txt", "a") as f:  # the shared beginning: one line each time it runs
    f.write("ran\\n")
pathlib.Path("made-by-the-beginning.txt").write_text("kept")

# %% [markdown]
# ## 1. Twice

# %%
def double(x):
    return 2 * x

# %%
def test_unit_double():
    assert double(3) == 6, "double(3) must be 6: multiply by 2"
    assert pathlib.Path("made-by-the-beginning.txt").read_text() == "kept", "the beginning's file is missing"


test_unit_double()

# %% [markdown]
# ## 2. Thrice

# %%
def triple(x):
    return 3 * x

# %%
def test_unit_triple():
    assert triple(2) == 6, "triple(2) must be 6"


test_unit_triple()
'''

VARIANTS = {
    "adds-two": ("return 2 * x", "return x + 2"),
    "late": ("return 3 * x", "return 3 + x"),
    "exits": ("return 3 * x", "raise SystemExit(4)"),
    "hangs": ("return 3 * x", "while True:\n        pass"),
    "imports-own": ("return 3 * x", "import demo_own_module\n    return 3 * x"),
    "renames-a-section": ("# ## 2. Thrice", "# ## 2. Three times"),
}


def _serve(tmp_path: Path, timeout_s: float = 5) -> dict[str, dict]:
    ref = tmp_path / "reference" / "demo"
    ref.mkdir(parents=True)
    (ref / "demo_dev.py").write_text(REFERENCE, encoding="utf-8")
    (ref / "demo_own_module.py").write_text("VALUE = 1\n", encoding="utf-8")
    plan = {"own_modules": ["demo_own_module"], "timeout_s": timeout_s, "variants": []}
    for name, (find, replace) in VARIANTS.items():
        folder = tmp_path / name / "demo"
        folder.mkdir(parents=True)
        (folder / "demo_dev.py").write_text(REFERENCE.replace(find, replace), encoding="utf-8")
        (folder / "demo_own_module.py").write_text("VALUE = 1\n", encoding="utf-8")
        plan["variants"].append({"notebook": str(folder / "demo_dev.py"), "report": str(tmp_path / f"{name}.json"),
                                 "output": str(tmp_path / f"{name}.out")})
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tito.cell_variants", "demo_dev.py", str(tmp_path / "plan.json")],
                          cwd=ref, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {name: json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8")) for name in VARIANTS}


def test_each_variant_reports_what_a_run_from_the_top_reports_and_the_beginning_runs_once(tmp_path):
    reports = _serve(tmp_path)
    assert (tmp_path / "reference" / "demo" / "beginnings.txt").read_text() == "ran\n"  # once, for six variants
    for name in ("adds-two", "late"):
        forked = reports[name]
        assert forked["forked"] is True, forked
        # the beginning's files are carried into the variant's folder, where its own run would have made them
        assert (tmp_path / name / "demo" / "made-by-the-beginning.txt").read_text() == "kept"
        assert (tmp_path / name / "demo" / "beginnings.txt").read_text() == "ran\n"
        alone = tmp_path / f"{name}-alone" / "demo"
        alone.mkdir(parents=True)
        (alone / "demo_dev.py").write_text((tmp_path / name / "demo" / "demo_dev.py").read_text(), encoding="utf-8")
        top = subprocess.run([sys.executable, "-m", "tito.cells", "demo_dev.py", "--first-failure", "--report",
                              str(alone / "report.json")], cwd=alone, capture_output=True, text=True, timeout=60)
        assert top.returncode == 1
        expected = json.loads((alone / "report.json").read_text(encoding="utf-8"))
        for key in ("sections", "tests_passed", "waiting", "stopped_early"):
            assert forked[key] == expected[key], (name, key)
        [got], [want] = forked["failures"], expected["failures"]
        assert {k: got[k] for k in ("line", "section", "test", "error")} == \
               {k: want[k] for k in ("line", "section", "test", "error")}
        assert str(tmp_path / name / "demo" / "demo_dev.py") in got["traceback"]  # the variant's own file
    assert reports["adds-two"]["failures"][0]["error"] == "AssertionError: double(3) must be 6: multiply by 2"
    assert reports["late"]["failures"][0]["test"] == "test_unit_triple"
    assert reports["late"]["tests_passed"] == 1  # test_unit_double passed in the shared beginning


def test_what_a_fork_cannot_report_faithfully_is_left_to_a_run_from_the_top(tmp_path):
    reports = _serve(tmp_path, timeout_s=3)
    assert reports["exits"] == {**reports["exits"], "forked": False} and "sys.exit" in reports["exits"]["reason"]
    assert not reports["hangs"]["forked"] and "ran past 3 s" in reports["hangs"]["reason"]
    assert not reports["imports-own"]["forked"] and "demo_own_module" in reports["imports-own"]["reason"]
    assert not reports["renames-a-section"]["forked"] and "sections differ" in reports["renames-a-section"]["reason"]


def test_the_plain_runner_still_runs_a_notebook_from_the_top(tmp_path):
    (tmp_path / "demo_dev.py").write_text(REFERENCE.replace("return 3 * x", "return 3 + x"), encoding="utf-8")
    import os
    here = os.getcwd()
    os.chdir(tmp_path)
    saved_main, saved_argv, saved_path0 = sys.modules["__main__"], sys.argv, sys.path[0]
    try:
        report = run_from_the_top(tmp_path / "demo_dev.py", first_failure=True)
    finally:
        os.chdir(here)
        sys.modules["__main__"], sys.argv, sys.path[0] = saved_main, saved_argv, saved_path0
    assert [f["test"] for f in report["failures"]] == ["test_unit_triple"] and report["tests_passed"] == 1
