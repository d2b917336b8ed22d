"""A pytest plugin tito loads (`-p tito.pytest_plugin`) for `tito test`.

* A timeout can name the test that hung: pytest prints a test's id only once it finishes,
  so this writes the id of each test as it starts to the file named by `TITO_CURRENT_TEST`.
* A test stopped by a stub nobody has written yet (`tito.stubs`) is *waiting*, not failing:
  it is reported as skipped, "waiting for composed_attention", without formatting a
  traceback (a student with nine stubs left would otherwise wait for two hundred of them).
  Once every stub is written no test can wait, so a finished module runs exactly as before.
* While the module has stubs left (`TITO_STUBS_LEFT`, the number), the tests marked `slow`
  (whole programs: benchmarks, milestones) wait for the whole module instead of running,
  and hypothesis does not shrink a failing example (a stub fails every one).
* `TITO_PYTEST_REPORT` names a file that receives, at the end, the counts tito reports:
  {"passed", "failed", "errors", "skipped", "waiting": {what: tests}, "first_failure"}.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _pytest.reports import TestReport

from .plugin_env import CURRENT_TEST_ENV, REPORT_ENV, STUBS_LEFT_ENV
from .stubs import waiting_label

WAITING = "waiting for "

_counts: dict = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "waiting": {}, "first_failure": None}


def _stubs_left() -> int:
    try:
        return int(os.environ.get(STUBS_LEFT_ENV, "0"))
    except ValueError:
        return 0


def pytest_runtest_logstart(nodeid, location):
    path = os.environ.get(CURRENT_TEST_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(nodeid)


def pytest_collection_modifyitems(config, items):
    left = _stubs_left()
    if left:
        reason = f"{WAITING}the whole module ({left} stub{'s' if left != 1 else ''} left)"
        for item in items:
            if item.get_closest_marker("slow"):
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionstart(session):
    if not _stubs_left():
        return
    try:
        from hypothesis import Phase, settings
    except ImportError:
        return
    settings.register_profile("tito-stubs-left", parent=settings.default,
                              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("tito-stubs-left")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A stub's NotImplementedError becomes a skip that names the stub (and costs no traceback)."""
    if call.excinfo is None or call.when not in ("setup", "call"):
        return None
    stub = waiting_label(call.excinfo.value, Path(str(item.fspath)).parent.name)  # tests/NN_name/test_*.py
    if stub is None:
        return None
    path, line, _ = item.location
    return TestReport(item.nodeid, item.location, {}, "skipped", (str(path), (line or 0) + 1, WAITING + stub),
                      call.when, [], call.duration, call.start, call.stop)


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        _counts["passed"] += 1
    elif report.failed:
        _counts["failed" if report.when == "call" else "errors"] += 1
        _counts["first_failure"] = _counts["first_failure"] or report.nodeid
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(WAITING):
            what = reason.removeprefix(WAITING)
            _counts["waiting"][what] = _counts["waiting"].get(what, 0) + 1
        else:
            _counts["skipped"] += 1


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(_counts, handle)
