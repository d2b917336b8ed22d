"""The pytest plugin `tito grade` loads in the sandbox (`-p tito.grade_plugin`): a report file of every test.

`tito grade` reads each test's outcome from the JSON file this plugin writes when pytest's
session ends, never from pytest's exit status or what it printed: a test that calls
`sys.exit(0)` fails like any other exception, and one that calls `os._exit(0)` ends the
process before the report exists, so it scores nothing.

On import (before any conftest or test file) it also makes sure `tinytorch` can only come
from the scratch course: an editable install of the instructor's course adds an import hook
that would find the reference package for a module the scratch course lacks.

The report (`TITO_GRADE_REPORT`, written whole or not at all):
    {"exitstatus": 0, "tinytorch": "/scratch/course/tinytorch/__init__.py", "peak_kib": 812345,
     "tests": {nodeid: {"outcome": "passed" | "failed" | "error" | "skipped", "message": "...",
                        "exception": "AssertionError", "seconds": 0.01}},
     "collection_errors": {path: message},
     "collected": {nodeid: skip reason or ""}}      # with --collect-only
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPORT_ENV = "TITO_GRADE_REPORT"
COURSE_ENV = "TITO_GRADE_COURSE"
MESSAGE_CHARS = 3000  # a failure message is cut here (a test may print a whole array)
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _only_the_scratch_course() -> None:
    """Drop what could import a package from outside the scratch course: the work folder that
    `python -m` puts first on sys.path, and the import hooks of editable installs."""
    course = os.environ.get(COURSE_ENV)
    if not course:
        return
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    sys.meta_path[:] = [finder for finder in sys.meta_path
                        if not getattr(finder, "__module__", "").startswith("__editable__")]


_only_the_scratch_course()

_tests: dict[str, dict] = {}
_collection_errors: dict[str, str] = {}
_collected: dict[str, str] = {}


def _message(report) -> tuple[str, str]:
    """(first failure message, exception name) of a failed report, as pytest's short summary shows them."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    exception = text.split(":", 1)[0].strip() if crash is not None else ""
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + f"\n... ({len(text) - MESSAGE_CHARS} more characters)"
    return text, exception.rsplit(".", 1)[-1]


def pytest_runtest_logreport(report) -> None:
    entry = _tests.setdefault(report.nodeid, {"outcome": "passed", "message": "", "exception": "",
                                              "seconds": 0.0})
    entry["seconds"] = round(entry["seconds"] + getattr(report, "duration", 0.0), 4)
    if report.passed:
        return
    if report.skipped:
        outcome = "skipped"
        message = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        exception = ""
    else:
        outcome = "failed" if report.when == "call" else "error"
        message, exception = _message(report)
    if _OUTCOME_RANK[outcome] > _OUTCOME_RANK[entry["outcome"]]:
        entry.update(outcome=outcome, message=message, exception=exception)


def pytest_collectreport(report) -> None:
    if report.failed:
        _collection_errors[report.nodeid] = _message(report)[0]


def pytest_collection_finish(session) -> None:
    """The tests collected, each with the reason it will be skipped here ("" when it runs)."""
    try:
        from _pytest.skipping import evaluate_skip_marks
    except ImportError:  # pragma: no cover - a pytest without it: assume every test runs
        evaluate_skip_marks = None
    for item in session.items:
        skip = ""
        if evaluate_skip_marks is not None:
            try:
                found = evaluate_skip_marks(item)
                skip = found.reason if found is not None else ""
            except Exception as err:  # a skipif condition that raises: pytest reports it as an error later
                skip = ""
                _collection_errors.setdefault(item.nodeid, f"skip condition failed: {err}")
        _collected[item.nodeid] = skip


def _address_space_peak_kib() -> int | None:
    """The largest address space this process had (VmPeak): what the memory limit (RLIMIT_AS) is compared with."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("VmPeak:"))
    except (OSError, StopIteration, ValueError):
        return None


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    package = sys.modules.get("tinytorch")
    payload = {"exitstatus": int(exitstatus), "tinytorch": getattr(package, "__file__", None),
               "peak_kib": _address_space_peak_kib(),
               "tests": _tests, "collection_errors": _collection_errors, "collected": _collected}
    target = Path(path)
    scratch = target.with_name(target.name + ".partial")
    scratch.write_text(json.dumps(payload, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(scratch, target)
