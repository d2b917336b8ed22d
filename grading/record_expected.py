"""Record the reference's values for the graded cases: `python grading/record_expected.py [NN ...]`.

Run it from the reference edition after changing a module's cases or its reference solution.

* `grading/NN_name/cases.py` (the graded cases, format in reference_values.py): the cases are
  computed on the package of this checkout, twice, in fresh Pythons with different string
  hashing (a value that changes is an error: the cases must be deterministic), and written
  to `grading/NN_name/expected.npz` (keys "case/label"). Then every mistake of
  `modules/NN_name/mistakes.toml` is made in one scratch copy of the course (tito/mistakes.py
  applies it, tito/export.py exports that module there), the cases are computed on that
  package in a subprocess (PYTHONHASHSEED=0, 4 GiB of address space, MISTAKE_TIMEOUT_S), and
  the values go to `grading/NN_name/mistakes.npz` (keys "mistake/case/label"); the values of
  the student edition of the module (every solution block a stub) go to `student_edition.npz`
  (keys "case/label"), and a case it passes is an error (it gives points for no work). A case that
  raises records "case/(raised)" = the exception's type name; a run that does not finish
  records "(run)/(timed out)", one that dies "(run)/(crashed)". The tool prints, per module,
  which cases tell each mistake apart from the reference, and exits 1 if a mistake equals the
  reference on every case: add a case that catches it. (A mistake that draws unseeded random
  numbers or reads the real clock records other values on every recording.)

Nothing in the working tree changes but those .npz files (written atomically; no bytecode
is written); the scratch copy is removed at the end, whatever happens.
"""
from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES_FILE = "cases.py"
EXPECTED_FILE = "expected.npz"
MISTAKES_FILE = "mistakes.npz"
STUDENT_EDITION_FILE = "student_edition.npz"  # the cases' values on the module with every solution block a stub
RAISED = "(raised)"  # label recorded when a case raises: the exception's type name
TIMED_OUT = "(run)/(timed out)"  # key recorded when the cases of a mistake do not finish in time
CRASHED = "(run)/(crashed)"  # key recorded when the Python running them dies (its exit status)
NOT_AN_ARRAY = "(not a plain array)"  # recorded for a value a mistake made ragged or an object
MISTAKE_TIMEOUT_S = 120
REFERENCE_TIMEOUT_S = 600
MISTAKE_MEMORY_BYTES = 4 * 2**30  # address space of a mistake's run: a runaway allocation fails there, not here
WRONG_PACKAGE = 3  # exit status of a case run that imported another tinytorch than it was given: a fault of this tool


def load_cases(folder: Path) -> dict:
    """The CASES of `folder/cases.py`, imported against whichever tinytorch sys.path finds first."""
    path = folder / CASES_FILE
    spec = importlib.util.spec_from_file_location(f"cases_{folder.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


def compute_all(folder: Path, strict: bool) -> dict[str, np.ndarray]:
    """Every case of `folder` as {"case/label": array}; a case that raises gives "case/(raised)".

    `strict` (the reference): a raising case is an error in the case, so it propagates.
    """
    from reference_values import compute

    try:
        cases = load_cases(folder)
    except Exception as err:  # noqa: BLE001 - a mistake that breaks the import is a value too
        if strict:
            raise
        return {f"(import)/{RAISED}": np.asarray(type(err).__name__)}
    values: dict[str, np.ndarray] = {}
    for name, case in cases.items():
        try:
            values.update(compute(name, case))
        except Exception as err:  # noqa: BLE001 - what the mistake makes the case raise is its value
            if strict:
                raise
            values[f"{name}/{RAISED}"] = np.asarray(type(err).__name__)
    for key, value in values.items():
        if value.dtype.hasobject:  # not storable without pickle: a ragged list, a None, an object
            if strict:
                raise TypeError(f"case value {key} is not a plain array (dtype object): return numbers, "
                                "strings, bools or arrays")
            values[key] = np.asarray(NOT_AN_ARRAY)
    return values


def npz_bytes(values: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **values)
    return buffer.getvalue()


def save(path: Path, values: dict[str, np.ndarray]) -> None:
    from tinytorch.files import atomic_write

    with atomic_write(path, "wb") as stream:
        stream.write(npz_bytes(values))


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as stored:
        return {key: stored[key] for key in stored.files}


def fresh_python_env(hash_seed: int) -> dict[str, str]:
    """The environment of a case run: ours, with Python's string hashing fixed to `hash_seed`
    and no bytecode written (the cases files are read from the working tree, never written).

    A mistake that iterates a set (e.g. list(set(text))) then records the same values on
    every recording, so mistakes.npz changes only when the code does. BLAS runs on one thread,
    as in the grader's sandbox (ONE_THREAD_ENV): a float32 product can round differently on two,
    and a mistake whose values the sandbox does not reproduce exactly cannot be named."""
    from tito.grading.sandbox import ONE_THREAD_ENV  # main() put the course on sys.path
    return {**os.environ, **ONE_THREAD_ENV, "PYTHONHASHSEED": str(hash_seed), "PYTHONDONTWRITEBYTECODE": "1"}


def run_cases(folder: Path, package_root: Path, scratch: Path, *, strict: bool,
              hash_seed: int = 0) -> dict[str, np.ndarray]:
    """The cases of `folder` computed in a fresh Python whose tinytorch is `package_root`'s.

    strict (the reference, run from this checkout): any failure is an error in the cases,
    raised with the case's traceback. Otherwise (a mistake, run from the scratch copy): a
    run that times out or dies is recorded as such, a value like any other.
    """
    out = scratch / f"values-{folder.name}.npz"
    mode = "--compute-strict" if strict else "--compute"
    command = [sys.executable, str(Path(__file__)), mode, str(folder), str(package_root), str(out)]
    try:
        done = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                              timeout=REFERENCE_TIMEOUT_S if strict else MISTAKE_TIMEOUT_S,
                              env=fresh_python_env(hash_seed))
    except subprocess.TimeoutExpired:
        if strict:
            raise RuntimeError(f"the cases of {folder.name} ran past {REFERENCE_TIMEOUT_S} s on the reference") from None
        return {TIMED_OUT: np.asarray(True)}
    if done.returncode == WRONG_PACKAGE or (done.returncode != 0 and strict):
        raise RuntimeError(f"computing the cases of {folder.name} on {package_root} failed:\n{done.stderr[-5000:]}")
    if done.returncode != 0:
        return {CRASHED: np.asarray(done.returncode)}
    values = load(out)
    out.unlink()
    return values


def compute_main(folder: str, package_root: str, out: str, strict: bool) -> int:
    """The subprocess: `package_root` first on sys.path, so its tinytorch is the one imported."""
    sys.path[:0] = [package_root, str(HERE)]
    if not strict:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (MISTAKE_MEMORY_BYTES, MISTAKE_MEMORY_BYTES))
        except (ImportError, ValueError, OSError):  # not Linux, or a lower limit already set: keep it
            pass
    import tinytorch

    where = Path(tinytorch.__file__).resolve()
    if not where.is_relative_to(Path(package_root).resolve()):
        print(f"imported tinytorch from {where}, not from {package_root}", file=sys.stderr)
        return WRONG_PACKAGE
    values = compute_all(Path(folder), strict)
    Path(out).write_bytes(npz_bytes(values))
    return 0


def differs(case: tuple, reference: dict[str, np.ndarray], produced: dict[str, np.ndarray]) -> bool:
    """Whether `produced` (one case's "case/label" values) is not what the reference gave, within tolerance."""
    from reference_values import DEFAULT_TOLERANCE

    if set(reference) != set(produced):
        return True
    tolerance = {**DEFAULT_TOLERANCE, **(case[2] if len(case) > 2 else {})}
    for key, expected in reference.items():
        got = produced[key]
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return True
        if expected.dtype.kind in "fc":
            if not np.isclose(got, expected, **tolerance, equal_nan=True).all():
                return True
        elif not np.array_equal(got, expected):
            return True
    return False


def telling_cases(cases: dict, expected: dict[str, np.ndarray], mistakes: dict[str, np.ndarray],
                  names: list[str]) -> dict[str, list[str]]:
    """{mistake: the cases whose values differ from the reference's}; [] for a mistake no case tells apart.

    A mistake whose cases did not finish, or whose cases file did not import, is told apart
    by that: "(run)" or "(import)".
    """
    found = {}
    for mistake in names:
        prefix = mistake + "/"
        produced = {k[len(prefix):]: v for k, v in mistakes.items() if k.startswith(prefix)}
        special = sorted({k.split("/", 1)[0] for k in produced if k.split("/", 1)[0] not in cases})
        found[mistake] = special + [
            name for name, case in cases.items()
            if differs(case, {k: v for k, v in expected.items() if k.startswith(name + "/")},
                       {k: v for k, v in produced.items() if k.startswith(name + "/")})]
    return found


def record_module(folder: Path, scratch: Path, course, settings) -> tuple[list[str], list[str]]:
    """expected.npz and mistakes.npz for one module.

    Returns (the mistakes no case tells apart, the cases the student edition passes): both
    must be empty. The student edition (every solution block of the module a stub) is
    computed like a mistake; a case it passes gives points for no work."""
    from tito.course import list_modules
    from tito.export import export_modules
    from tito.mistakes import load_catalogue
    from tito.notebook import NotebookError, read_text

    expected = _reference(folder, scratch)
    save(folder / EXPECTED_FILE, expected)
    print(f"{(folder / EXPECTED_FILE).relative_to(ROOT)}: {len({k.split('/')[0] for k in expected})} case(s), "
          f"{len(expected)} value(s)")
    [module] = [m for m in list_modules(settings) if m.key == folder.name]
    [copied] = [m for m in list_modules(course) if m.key == folder.name]
    catalogue = load_catalogue(module)
    original = read_text(module.notebook)
    values: dict[str, np.ndarray] = {}
    try:
        for mistake in catalogue:
            try:
                export_modules(course, [copied], texts={copied.key: mistake.apply(original)})
            except NotebookError:
                values[f"{mistake.name}/(import)/{RAISED}"] = np.asarray("NotebookError")
                continue
            produced = run_cases(folder, course.root, scratch, strict=False)
            values.update({f"{mistake.name}/{k}": v for k, v in produced.items()})
        export_modules(course, [copied], texts={copied.key: stubbed_text(settings, module, original)})
        stubbed = run_cases(folder, course.root, scratch, strict=False)
    finally:
        export_modules(course, [copied], texts={copied.key: original})  # the next module sees the reference
    save(folder / MISTAKES_FILE, values)
    save(folder / STUDENT_EDITION_FILE, stubbed)
    cases = load_cases(folder)
    free = [name for name, case in cases.items()
            if not differs(case, {k: v for k, v in expected.items() if k.startswith(name + "/")},
                           {k: v for k, v in stubbed.items() if k.startswith(name + "/")})]
    telling = telling_cases(cases, expected, values, [m.name for m in catalogue])
    untold = [name for name, by in telling.items() if not by]
    print(f"{(folder / MISTAKES_FILE).relative_to(ROOT)}: {len(catalogue)} mistake(s), "
          f"{len(catalogue) - len(untold)} told apart")
    for name, by in telling.items():
        print(f"  {name}: " + (", ".join(by) if by else "NOT TOLD APART (add a case that catches it)"))
    print(f"  the student edition (every solution block a stub) passes {len(free)} case(s)"
          + (f": {', '.join(free)} (a case must need the student's code)" if free else ""))
    return untold, free


def stubbed_text(settings, module, text: str) -> str:
    """The module's notebook as the student edition has it: every solution block a stub."""
    from tito.notebook import stub_text

    return stub_text(text, module.notebook, module.notebook.relative_to(settings.root).as_posix(), module.key)


def _reference(folder: Path, scratch: Path) -> dict[str, np.ndarray]:
    """The reference's values, computed twice in fresh processes with different string hashing:
    a case must give the same values each time (no timing, no unseeded randomness, no set order)."""
    start = time.perf_counter()
    first = run_cases(folder, ROOT, scratch, strict=True, hash_seed=1)
    print(f"{folder.name}: the cases ran in {time.perf_counter() - start:.1f} s (a fresh Python, imports included)")
    second = run_cases(folder, ROOT, scratch, strict=True, hash_seed=2)
    changed = sorted(k for k in first.keys() | second.keys()
                     if k not in first or k not in second
                     or not np.array_equal(first[k], second[k], equal_nan=first[k].dtype.kind in "fc"))
    if changed:
        raise RuntimeError(f"{folder.name}: the cases are not deterministic; these values changed between two "
                           f"runs: {changed[:10]}")
    return first


def main(selected: list[str]) -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE)]
    graded = sorted(f.name for f in HERE.glob("[0-9][0-9]_*") if f.is_dir())
    unknown = [s for s in selected if not any(name.startswith(s) for name in graded)]
    if unknown:
        print(f"record_expected.py: no graded module starts with {', '.join(map(repr, unknown))}; "
              f"give module numbers or names from: {', '.join(graded)}", file=sys.stderr)
        return 2

    def chosen(folder: Path) -> bool:
        return not selected or any(folder.name.startswith(s) for s in selected)

    folders = [f.parent for f in sorted(HERE.glob(f"[0-9][0-9]_*/{CASES_FILE}")) if chosen(f.parent)]
    if not folders:
        return 0
    from tito.course import load_settings
    from tito.release import copy_course

    settings = load_settings(ROOT)
    untold: dict[str, list[str]] = {}
    free: dict[str, list[str]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="record-expected-"))
    try:
        copy_course(settings, scratch / "course", {}, with_package=True)
        course = load_settings(scratch / "course")
        for folder in folders:
            missed, passed_by_stubs = record_module(folder, scratch, course, settings)
            if missed:
                untold[folder.name] = missed
            if passed_by_stubs:
                free[folder.name] = passed_by_stubs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for module, names in untold.items():
        print(f"{module}: {len(names)} mistake(s) the cases do not tell apart: {', '.join(names)}")
    for module, names in free.items():
        print(f"{module}: {len(names)} case(s) the student edition passes: {', '.join(names)}")
    return 1 if untold or free else 0


if __name__ == "__main__":
    if sys.argv[1:2] in (["--compute"], ["--compute-strict"]):
        sys.exit(compute_main(*sys.argv[2:5], strict=sys.argv[1] == "--compute-strict"))
    sys.exit(main(sys.argv[1:]))
