"""The trusted side of grading: what a student's code produced, compared with the reference's values.

`tito.grading.cases` runs a module's graded cases in the sandbox and writes what the student's
code produced (an `.npz`). Everything here runs in the grader's own process, which never
imports the student's code: it reads that file as untrusted data (`read_values`: a plain file
of bounded size, at most `MAX_KEYS` entries, every key a known case (a label the reference does
not return is left out), text or numbers only, never pickled objects), compares each case with the reference's values
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

from .cases import IMPORT_FAILED, RAISED, VALUE_KINDS
from ..mistakes import Mistake

MAX_PRODUCED_BYTES = 64 * 1024 ** 2  # the produced file, and all its arrays unpacked together
MAX_KEYS = 10_000
MISTAKES_NAMED = 5  # at most, for one case
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
    mistakes: tuple[Mistake, ...] = ()  # the catalogued mistakes its values match (several: no case tells them apart)


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
    """The arrays of an `.npz` written by `tito.grading.cases`, read as untrusted data.

    allowed: {case: its labels}; a key must name a known case ("(import)/(raised)" always may); a label the
    reference does not return is left out. Raises ProducedError with the reason for anything else: a link, a file or
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
                case, _, label = key.partition("/")
                if allowed is not None and case in allowed and label not in allowed[case] and label != RAISED:
                    continue  # a label the reference does not return (a student's code path): it counts for nothing
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
    """Whether `produced` equals `other` (a mistake's values, keyed "case/label") for this case: the same
    exception type when `other` raised, else every label the same (missing in both counts as the same)."""
    raised = other.get(f"{spec.name}/{RAISED}")
    if raised is not None:
        mine = produced.get(f"{spec.name}/{RAISED}")
        return mine is not None and _error_name(mine) == _error_name(raised)
    if f"{spec.name}/{RAISED}" in produced:
        return False
    for label in spec.expected:
        theirs, mine = other.get(f"{spec.name}/{label}"), produced.get(f"{spec.name}/{label}")
        if theirs is None or mine is None:
            if (theirs is None) != (mine is None):
                return False
        elif label_problem(label, mine, theirs, spec.tolerance, False):
            return False
    return True


def _tells_apart(spec: CaseSpec, values: dict[str, np.ndarray]) -> bool:
    """Whether this case's values for a mistake differ from the reference's (else the case cannot name it)."""
    reference = {f"{spec.name}/{label}": value for label, value in spec.expected.items()}
    return any(k.startswith(spec.name + "/") for k in values) and not _same_as(spec, reference, values)


def rank_mistakes(specs: list[CaseSpec], produced: dict[str, np.ndarray],
                  mistakes: dict[str, dict[str, np.ndarray]], catalogue: list[Mistake]) -> dict[str, float]:
    """How well each catalogued mistake explains the student's values over all the module's cases.

    Per case that tells the mistake apart: +1 when the student's values equal the mistake's (+0.5 more
    when an exception's whole first line is the same), -1 when they do not. A mistake is named only
    where it has the best score of those that match a case (two mistakes no case tells apart are
    named together)."""
    ranking = {}
    for mistake in catalogue:
        values = mistakes.get(mistake.name)
        if not values:
            continue
        score = 0.0
        for spec in specs:
            if not _tells_apart(spec, values):
                continue
            if _same_as(spec, produced, values):
                raised = values.get(f"{spec.name}/{RAISED}")
                mine = produced.get(f"{spec.name}/{RAISED}")
                score += 1.5 if raised is not None and mine is not None and raised.item() == mine.item() else 1.0
            else:
                score -= 1.0
        ranking[mistake.name] = score
    return ranking


def named_mistakes(spec: CaseSpec, produced: dict[str, np.ndarray], mistakes: dict[str, dict[str, np.ndarray]],
                   catalogue: list[Mistake], ranking: dict[str, float] | None = None) -> list[Mistake]:
    """The catalogued mistakes whose recorded values for this case the student's equal (and the reference's do
    not), keeping those that best explain all the student's cases (`rank_mistakes`); [] when none does."""
    ranking = ranking if ranking is not None else rank_mistakes([spec], produced, mistakes, catalogue)
    matching = [m for m in catalogue if m.name in mistakes and _tells_apart(spec, mistakes[m.name])
                and _same_as(spec, produced, mistakes[m.name]) and ranking.get(m.name, 0) > 0]
    if not matching:
        return []
    best = max(ranking[m.name] for m in matching)
    return [m for m in matching if ranking[m.name] == best][:MISTAKES_NAMED]


def compare_case(spec: CaseSpec, produced: dict[str, np.ndarray], points: Fraction, detail: bool,
                 mistakes: dict[str, dict[str, np.ndarray]] | None = None,
                 catalogue: list[Mistake] | None = None, ranking: dict[str, float] | None = None) -> CaseResult:
    problems = case_problems(spec, produced, detail)
    if not problems:
        return CaseResult(spec.name, spec.what, True, "", points, points)
    named = named_mistakes(spec, produced, mistakes or {}, catalogue or [], ranking)
    message = "; ".join(problems)
    if named:
        message += ". These are the values of " + " or of ".join(
            f"a catalogued mistake, {m.name}: {m.what} ({m.message})" for m in named)
    return CaseResult(spec.name, spec.what, False, message, Fraction(0), points, tuple(named))


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
