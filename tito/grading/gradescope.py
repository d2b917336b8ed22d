"""`tito grade --gradescope autograder.zip`: the bundle Gradescope's autograder runs, one submission per container.

Gradescope unpacks the zip into `/autograder/source`, runs `setup.sh` once (as root) to build
its image, copies `run_autograder` to `/autograder/run_autograder`, and runs that for every
submission, with the student's files in `/autograder/submission`; it reads
`/autograder/results/results.json`. (Gradescope's "Autograder Specifications" describe this.)

The bundle holds:

* `course/`: the reference course (package, tests, tito) with the graded cases, their values,
  `grading.toml` and the mistakes catalogues (the grader names a mistake from them); `tito grade`
  runs from it, as on the instructor's machine, so the same sandbox and the same scoring apply,
  and `setup.sh` makes it readable by root only (student code runs as another user);
* `requirements.txt`: what `setup.sh` installs from the package index into a virtual
  environment (the course's dependencies, nothing else: grading runs no pytest, the graded
  cases are plain Python);
* `setup.sh` and `run_autograder`, which take the root folder from `TITO_AUTOGRADER_ROOT`
  (default `/autograder`), so the bundle can be tried end to end in a scratch folder.
"""
from __future__ import annotations

import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tinytorch.files import atomic_write

from ..course import CourseError, CourseModule, Settings, list_modules
from ..destination import check_file_destination
from .config import CONFIG_FILE, GRADING_DIR, config_path
from ..mistakes import catalogue_path
from ..release import copy_course

ROOT_ENV = "TITO_AUTOGRADER_ROOT"
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip entry times: the same course gives the same bundle

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image.
# It installs the course's dependencies into a virtual environment; the course itself is run
# from source/course, which only root may read (student code runs as another user).
set -euo pipefail
ROOT="${TITO_AUTOGRADER_ROOT:-/autograder}"
PYTHON="${TITO_PYTHON:-python3}"
if ! "$PYTHON" -m venv "$ROOT/venv"; then
    # Ubuntu images may lack the venv module
    apt-get install -y python3-venv python3-pip
    "$PYTHON" -m venv "$ROOT/venv"
fi
"$ROOT/venv/bin/python" -m pip install --quiet -r "$ROOT/source/requirements.txt"
"$ROOT/venv/bin/python" -c "import numpy, nbdev, jupytext; print('tinytorch autograder: set up')"
chmod -R go-rwx "$ROOT/source/course"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade $ROOT/submission (one student's files),
# write $ROOT/results/results.json. If grading itself fails, the student gets a result that
# says so (and the instructor the log in Gradescope's stdout), never a silent 0.
set -uo pipefail
ROOT="${TITO_AUTOGRADER_ROOT:-/autograder}"
COURSE="$ROOT/source/course"
OUT="$(mktemp -d)"
mkdir -p "$ROOT/results"
cd "$COURSE"
PYTHONPATH="$COURSE" "$ROOT/venv/bin/python" -m tito grade "$ROOT/submission" --single __MODULES__ --out "$OUT"
code=$?
if [ "$code" -eq 0 ] && [ -f "$OUT/results/submission.json" ]; then
    cp "$OUT/results/submission.json" "$ROOT/results/results.json"
else
    "$ROOT/venv/bin/python" - "$ROOT/results/results.json" "$code" <<'EOF'
import json, sys
json.dump({"score": 0.0, "output": f"The autograder could not grade this submission (tito grade exited "
           f"{sys.argv[2]}); your instructor can see why in the autograder's output.", "tests": []},
          open(sys.argv[1], "w"))
EOF
fi
rm -rf "$OUT"
"""


@dataclass(frozen=True)
class Bundle:
    path: Path
    modules: list[str]
    files: int


def requirements(settings: Settings) -> list[str]:
    """The course's dependencies, read from pyproject.toml (the one place they live).

    Nothing more: the sandbox runs the graded cases (plain Python over the student's package), and the
    grader compares their values; pytest and hypothesis are the test suite's, in the `dev` extra.
    """
    project = tomllib.loads((settings.root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project.get("dependencies", []))


def build_bundle(settings: Settings, dest: Path, modules: list[CourseModule]) -> Bundle:
    """Write Gradescope's autograder zip for `modules` to `dest`."""
    dest = Path(dest).resolve()
    if dest.suffix != ".zip":
        raise CourseError(f"{dest.name}: Gradescope takes the autograder as a .zip, e.g. autograder.zip.")
    if dest.is_relative_to(settings.root / GRADING_DIR):
        raise CourseError(f"{dest}: write the bundle outside the grading/ folder (it would end up inside itself).")
    check_file_destination(dest, "--gradescope")  # before any work, not after the course is copied
    keys = " ".join(m.number for m in modules)
    with tempfile.TemporaryDirectory(prefix="tito-gradescope-") as tmp:
        staging = Path(tmp)
        course = staging / "course"
        copy_course(settings, course, {}, with_package=True)
        for catalogue in map(catalogue_path, list_modules(settings)):  # the grader names mistakes from them
            if catalogue.is_file():
                shutil.copy2(catalogue, course / catalogue.relative_to(settings.root))
        shutil.rmtree(course / settings.tests_path.name / "tito", ignore_errors=True)  # tito's own tests
        hidden = settings.root / GRADING_DIR
        if hidden.is_dir():
            shutil.copytree(hidden, course / GRADING_DIR, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        config = config_path(settings)
        if config is not None and config.parent == settings.root:
            shutil.copy2(config, course / CONFIG_FILE)
        (staging / "requirements.txt").write_text("\n".join(requirements(settings)) + "\n", encoding="utf-8")
        (staging / "setup.sh").write_text(SETUP_SH, encoding="utf-8")
        (staging / "run_autograder").write_text(RUN_AUTOGRADER.replace("__MODULES__", f"--modules {keys}"),
                                                encoding="utf-8")
        files = sorted(p for p in staging.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(dest) as handle:  # a full disk or Ctrl-C here leaves an earlier bundle whole
                _write_zip(handle, staging, files)
        except OSError as err:
            raise CourseError(f"Could not write {dest} ({err.strerror or err}); an earlier bundle there is as it "
                              "was. Free some space (or fix the folder) and build it again.") from None
    return Bundle(dest, [m.key for m in modules], len(files))


def _write_zip(handle, staging: Path, files: list[Path]) -> None:
    """The bundle's files, with fixed dates and modes, so the same course gives the same zip."""
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            name = path.relative_to(staging).as_posix()
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            executable = name in ("setup.sh", "run_autograder") or path.stat().st_mode & stat.S_IXUSR
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


def unpack_like_gradescope(bundle: Path, root: Path) -> None:
    """Lay the bundle out as Gradescope does under `root` (for trying it end to end): source/, run_autograder, results/."""
    source = root / "source"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(source)
        for info in archive.infolist():
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                (source / info.filename).chmod(mode)
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir(exist_ok=True)
    (root / "results").mkdir(exist_ok=True)
