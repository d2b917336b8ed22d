"""Record the reference's results for every hidden test: `python grading/record_expected.py [NN ...]`.

Run it from the reference edition after changing a hidden test or a module's reference
solution; it imports each `grading/NN_name/test_hidden_*.py` against the package of this
checkout and rewrites the `.npz` beside it. The tests of tito (`tests/tito/test_grade_course.py`)
prove that the reference scores full marks against these values.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main(selected: list[str]) -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE)]
    from reference_values import record

    files = sorted(HERE.glob("[0-9][0-9]_*/test_hidden_*.py"))
    if selected:
        files = [f for f in files if any(f.parent.name.startswith(s) for s in selected)]
    for path in files:
        spec = importlib.util.spec_from_file_location(f"hidden_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        written = record(module.CASES, path)
        print(f"{written.relative_to(ROOT)}: {len(module.CASES)} case(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
