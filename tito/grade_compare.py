"""The trusted side of grading: what a student's code produced, compared with the reference's values.

`tito.grade_cases` runs a module's graded cases in the sandbox and writes what the student's
code produced (an `.npz`). Everything here runs in the grader's own process, which never
imports the student's code: it reads that file as untrusted data (`read_values`: a plain file
of bounded size, at most `MAX_KEYS` entries, every key a known case and label, numbers only,
text or numbers only, never pickled objects), compares each case with the reference's values
(`grading/NN_name/expected.npz`, recorded by `grading/record_expected.py`) within the case's
tolerance, and says why a case failed. Where a case's values equal those a catalogued mistake
produces (`grading/NN_name/mistakes.npz`) and not the reference's, it names that mistake.

What the feedback may show depends on what the student's run could have read:

* `detail=True` (`--cumulative`: no reference code anywhere in the sandbox): what the student's
  code produced (values at the first difference, the first line of an exception);
* `detail=False` (modules graded on their own: the other modules' reference code is in the
  sandbox): nothing the student's run wrote, only what the grader derives from the
  reference's values: per label one of a few outcomes (missing, wrong shape, wrong dtype, wrong
  values, raised one of Python's built-in exceptions or "an exception"), the reference's shape
  and dtype, and a catalogued mistake's name. A student cannot copy text out through it.
"""
from __future__ import annotations

import builtins
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from .grade_cases import IMPORT_FAILED, RAISED, VALUE_KINDS
from .mistakes import Mistake

MAX_PRODUCED_BYTES = 64 * 1024 ** 2  # the produced file, and all its arrays unpacked together
MAX_KEYS = 10_000
_BUILTIN_ERRORS = frozenset(name for name, value in vars(builtins).items()
                            if isinstance(value, type) and issubclass(value, BaseException))


class ProducedError(Exception):
    """The produced file cannot be used (missing, too large, not an npz, unknown keys, not numbers): why."""


@dataclass(frozen=True)
class CaseSpec:
    """One graded case as the grader knows it: from the cases file (described on the reference) and expected.npz."""

    name: str
    what: str
    tolerance: dict[str, float]
    expected: dict[str, np.ndarray]  # label -> the reference's value


@dataclass
class CaseResult:
    name: str
    what: str
    passed: bool
    message: str  # why it failed ("" when it passed); computed here, never text of the student's run
    points: Fraction
    max_points: Fraction
    mistake: Mistake | None = None  # the catalogued mistake its values match


# ---------------------------------------------------------------------------- reading


def _read_plain_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a plain file (no link, no fifo) of at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ProducedError("it wrote no values (the run ended before the cases finished)") from None
    except OSError as err:
        raise ProducedError(f"its values file cannot be opened ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ProducedError("its values file is not a plain file")
        if info.st_size > limit:
            raise ProducedError(f"its values file is larger than {limit // 1024 ** 2} MiB")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    finally:
        os.close(fd)


def read_values(path: Path, allowed: dict[str, set[str]] | None = None,
                limit: int = MAX_PRODUCED_BYTES) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` written by `tito.grade_cases`, read as untrusted data.

    allowed: {case: its labels}; a key "case/label" must name one ("case/!raised" and "!import"
    always may). Raises ProducedError with the reason for anything else: a link, a file or
    unpacked arrays over `limit`, more than MAX_KEYS arrays, object or structured arrays, text
    where numbers belong.
    """
    raw = _read_plain_file(Path(path), limit)
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise ProducedError("its values file is not an .npz archive") from None
    if len(members) > MAX_KEYS:
        raise ProducedError(f"its values file holds {len(members)} arrays (at most {MAX_KEYS})")
    if sum(m.file_size for m in members) > limit:
        raise ProducedError(f"its values unpack to more than {limit // 1024 ** 2} MiB")
    values = {}
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as stored:
            for key in stored.files:
                values[key] = _checked(key, stored[key], allowed)
    except ProducedError:
        raise
    except Exception as err:  # a malformed member: numpy's own error says little to a student
        raise ProducedError(f"its values file cannot be read ({type(err).__name__})") from None
    return values


def _checked(key: str, value: np.ndarray, allowed: dict[str, set[str]] | None) -> np.ndarray:
    case, _, label = key.partition("/")
    if key == IMPORT_FAILED or label == RAISED:
        if value.dtype.kind != "U" or value.size != 1:
            raise ProducedError(f"its values file holds {key!r} that is not one line of text")
        if allowed is not None and key != IMPORT_FAILED and case not in allowed:
            raise ProducedError("its values file names a case the module does not have")
        return value
    if allowed is not None and label not in allowed.get(case, ()):
        raise ProducedError("its values file names a case or label the module does not have")
    if value.dtype.kind not in VALUE_KINDS:
        raise ProducedError(f"its values file holds an array of {value.dtype.kind!r} kind, not numbers or text")
    return value


# ---------------------------------------------------------------------------- comparing


def _error_name(raised: np.ndarray) -> str:
    return str(raised.item()).split(":", 1)[0].strip()


def describe_raised(raised: np.ndarray, detail: bool) -> str:
    """"raised ValueError: ..." (detail), else only a built-in exception's name, never the student's text."""
    if detail:
        text = "".join(c if c.isprintable() else " " for c in str(raised.item()))
        return f"raised {text}"
    name = _error_name(raised)
    return f"raised {name}" if name in _BUILTIN_ERRORS else "raised an exception (not one of Python's built-in ones)"


def label_problem(label: str, got: np.ndarray | None, want: np.ndarray, tolerance: dict[str, float],
                  detail: bool) -> str:
    """Why `got` is not the reference's `want` for `label`, or "" when it is (np.isclose with `tolerance`)."""
    if got is None:
        return f"{label} is missing"
    if got.shape != want.shape:
        mine = f" (yours: {got.shape})" if detail else ""
        return f"{label} has the wrong shape: the reference's is {want.shape}{mine}"
    if want.dtype.kind in "fc":
        if got.dtype != want.dtype:
            mine = f", yours {got.dtype}" if detail else ""
            return f"{label} has the wrong dtype: the reference's is {want.dtype}{mine} (keep the input's dtype)"
        if got.dtype.kind not in "fc":
            return f"{label} has the wrong dtype: the reference's is {want.dtype}"
        close = np.isclose(got, want, **tolerance, equal_nan=True)
    elif want.dtype.kind == "U":
        if got.dtype.kind != "U":
            return f"{label} has the wrong dtype: the reference's is text"
        close = got == want
    else:
        if got.dtype.kind not in "biu" or (want.dtype.kind == "b") != (got.dtype.kind == "b"):
            mine = f", yours {got.dtype}" if detail else ""
            return f"{label} has the wrong dtype: the reference's is {want.dtype}{mine}"
        close = got == want
    if np.all(close):
        return ""
    if not detail:
        return f"{label} has the wrong values (the reference's: shape {want.shape}, {want.dtype})"
    where = tuple(int(i) for i in np.argwhere(~np.asarray(close))[0]) if want.ndim else ()
    return (f"{label} differs from the reference at {int((~np.asarray(close)).sum())} of {want.size} "
            f"position(s); first at index {where}: got {got[where].item()!r}, expected {want[where].item()!r}")


def case_problems(spec: CaseSpec, produced: dict[str, np.ndarray], detail: bool) -> list[str]:
    """Why case `spec` did not produce the reference's values ([] when it did)."""
    raised = produced.get(f"{spec.name}/{RAISED}")
    if raised is not None:
        return [describe_raised(raised, detail)]
    problems = [label_problem(label, produced.get(f"{spec.name}/{label}"), want, spec.tolerance, detail)
                for label, want in spec.expected.items()]
    return [p for p in problems if p]


def _same_as(spec: CaseSpec, produced: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> bool:
    """Whether `produced` equals `other` (a mistake's values, keyed "case/label") for this case."""
    raised = other.get(f"{spec.name}/{RAISED}")
    if raised is not None:
        mine = produced.get(f"{spec.name}/{RAISED}")
        return mine is not None and _error_name(mine) == _error_name(raised)
    if f"{spec.name}/{RAISED}" in produced:
        return False
    return all(f"{spec.name}/{label}" in other and not label_problem(
        label, produced.get(f"{spec.name}/{label}"), other[f"{spec.name}/{label}"], spec.tolerance, False)
        for label in spec.expected)


def named_mistake(spec: CaseSpec, produced: dict[str, np.ndarray], mistakes: dict[str, dict[str, np.ndarray]],
                  catalogue: list[Mistake]) -> Mistake | None:
    """The first catalogued mistake whose recorded values for this case the student's equal (and the reference's
    do not: a mistake this case cannot tell apart names nothing)."""
    reference = {f"{spec.name}/{label}": value for label, value in spec.expected.items()}
    for mistake in catalogue:
        values = mistakes.get(mistake.name)
        if not values or not any(k.startswith(spec.name + "/") for k in values):
            continue
        if _same_as(spec, reference, values):
            continue
        if _same_as(spec, produced, values):
            return mistake
    return None


def compare_case(spec: CaseSpec, produced: dict[str, np.ndarray], points: Fraction, detail: bool,
                 mistakes: dict[str, dict[str, np.ndarray]] | None = None,
                 catalogue: list[Mistake] | None = None) -> CaseResult:
    problems = case_problems(spec, produced, detail)
    if not problems:
        return CaseResult(spec.name, spec.what, True, "", points, points)
    mistake = named_mistake(spec, produced, mistakes or {}, catalogue or [])
    message = "; ".join(problems)
    if mistake is not None:
        message = (f"{message}. These are the values of a catalogued mistake, {mistake.name}: "
                   f"{mistake.what} ({mistake.message})")
    return CaseResult(spec.name, spec.what, False, message, Fraction(0), points, mistake)


def split_mistakes(values: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """mistakes.npz's {"mistake/case/label": value} as {mistake: {"case/label": value}}."""
    found: dict[str, dict[str, np.ndarray]] = {}
    for key, value in values.items():
        mistake, _, rest = key.partition("/")
        found.setdefault(mistake, {})[rest] = value
    return found


def load_expected(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """expected.npz as {case: {label: value}} (the instructor's file: read with the same care)."""
    cases: dict[str, dict[str, np.ndarray]] = {}
    for key, value in read_values(path, limit=1024 ** 3).items():
        case, _, label = key.partition("/")
        cases.setdefault(case, {})[label] = value
    return cases
