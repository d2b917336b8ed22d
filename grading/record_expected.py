"""Record what the graded cases produce: `python grading/record_expected.py [NN ...]`.

Run it from the reference edition after changing a module's cases (`grading/NN_name/cases.py`),
its reference solution or its mistakes catalogue. For each module with cases it writes, beside
the cases:

* `expected.npz`: what the reference package produces, {"case/label": value}: what `tito grade`
  compares a student's values with;
* `mistakes.npz`: what each catalogued mistake (`modules/NN_name/mistakes.toml`) produces,
  {"mistake/case/label": value}, made in a scratch copy of the course (the mistake applied to the
  notebook, the module exported): the feedback names a mistake when a student's values equal its own.

Each run goes through `python -m tito.grade_cases` in a fresh process, as grading does. It
prints, per module, the mistakes that no case tells apart from the reference: add a case that
does (a student who makes one loses no points). Neither file ever goes into the sandbox.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from tito.course import CourseModule, list_modules, load_settings  # noqa: E402
from tito.export import export_modules  # noqa: E402
from tito.grade_cases import RAISED, IMPORT_FAILED, describe, load_cases  # noqa: E402
from tito.grade_compare import CaseSpec, case_problems, read_values  # noqa: E402
from tito.mistakes import load_catalogue  # noqa: E402
from tito.release import copy_course  # noqa: E402
from tinytorch.files import atomic_write  # noqa: E402

CASES_FILE = "cases.py"


def run_cases(course: Path, cases: Path, out: Path) -> dict[str, np.ndarray]:
    """What `cases` produce with the package of `course`, in a fresh Python (as in the sandbox)."""
    env = {**os.environ, "PYTHONPATH": str(course), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "tito.grade_cases", str(cases), str(out)], cwd=out.parent, env=env,
                   check=True, stdin=subprocess.DEVNULL, timeout=1800)
    return read_values(out, limit=1024 ** 3)


def save(path: Path, values: dict[str, np.ndarray]) -> None:
    with atomic_write(path) as handle:
        np.savez_compressed(handle, **values)


def record_module(settings, module: CourseModule, cases: Path, scratch: Path) -> list[str]:
    """Write expected.npz and mistakes.npz of `module`; the names of the mistakes no case tells apart."""
    expected = run_cases(settings.root, cases, scratch / "expected.npz")
    failed = [k for k in expected if k.endswith("/" + RAISED) or k == IMPORT_FAILED]
    if failed:
        raise SystemExit(f"{cases}: the reference raised in {failed[0]}: {expected[failed[0]].item()}")
    specs = [CaseSpec(name, info["what"], info["tolerance"],
                      {k.split("/", 1)[1]: v for k, v in expected.items() if k.startswith(name + "/")})
             for name, info in describe(load_cases(cases)).items()]
    save(cases.with_name("expected.npz"), expected)
    mistakes = load_catalogue(module)
    course = scratch / "course"
    copy_course(settings, course, {}, with_package=True)
    copied = load_settings(course)
    [target] = [m for m in list_modules(copied) if m.key == module.key]
    reference_text = target.notebook.read_text(encoding="utf-8")
    recorded: dict[str, np.ndarray] = {}
    unseen = []
    for mistake in mistakes:
        target.notebook.write_text(mistake.apply(reference_text), encoding="utf-8")
        export_modules(copied, [target])
        values = run_cases(course, cases, scratch / f"{mistake.name}.npz")
        recorded.update({f"{mistake.name}/{k}": v for k, v in values.items()})
        if not any(case_problems(spec, values, detail=False) for spec in specs):
            unseen.append(mistake.name)
    save(cases.with_name("mistakes.npz"), recorded)
    return unseen


def main(selected: list[str]) -> int:
    settings = load_settings(ROOT)
    modules = [m for m in list_modules(settings) if (HERE / m.key / CASES_FILE).is_file()
               and (not selected or any(m.key.startswith(s) for s in selected))]
    for module in modules:
        cases = HERE / module.key / CASES_FILE
        with tempfile.TemporaryDirectory(prefix="record-expected-") as tmp:
            unseen = record_module(settings, module, cases, Path(tmp))
        count = len(load_cases(cases))
        print(f"grading/{module.key}: expected.npz ({count} case(s)), mistakes.npz "
              f"({len(load_catalogue(module))} mistake(s))")
        for name in unseen:
            print(f"  no case tells mistake {name!r} apart from the reference: add one that does")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
