"""The environment variables by which `tito test` talks to its pytest plugin (`tito.pytest_plugin`).

Their own module, without pytest: `tito.testing` needs the names, and whatever imports it (the
release check, `tito grade`) must import without the test suite's tools.
"""
CURRENT_TEST_ENV = "TITO_CURRENT_TEST"  # a file: the id of the test now running (a timeout names it)
REPORT_ENV = "TITO_PYTEST_REPORT"  # a file: the counts tito reports, written at the end
STUBS_LEFT_ENV = "TITO_STUBS_LEFT"  # the number of stubs left in the module under test
