"""A pytest plugin tito loads (`-p tito.pytest_plugin`) so that a timeout can name the test that hung.

pytest prints a test's id only once it finishes; this writes the id of each test as it
starts to the file named by `TITO_CURRENT_TEST`, which tito reads when it has to stop a run.
"""
from __future__ import annotations

import os

CURRENT_TEST_ENV = "TITO_CURRENT_TEST"


def pytest_runtest_logstart(nodeid, location):
    path = os.environ.get(CURRENT_TEST_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(nodeid)
