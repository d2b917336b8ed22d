"""tito test runs and records every part; tito status reports only what was recorded.

Issue 9, rows 9-11 (time limits that name what hung, concurrent runs, results kept as
each module finishes) and issue 8's student-facing output (one line for a module nobody
started, the first failure in full, no colour codes in pipes, -x and -v passed through,
no "passed" for a notebook that does not export, stubs left and stale .ipynb in status).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import pytest

from tito.export import export_modules
from tito.notebook import stub_text
from tito.status import course_status
from tito.testing import load_results, record_results, results_problem, run_in_kernel, run_tests


def _student(course, key: str, text: str) -> str:
    """`text` as the student edition has it: every solution body replaced by its stub."""
    return stub_text(text, Path("x.py"), f"modules/{key}/{key.split('_', 1)[1]}_dev.py", key)


def _plain_env(course) -> dict[str, str]:
    """tito's environment as a pipe gets it: nothing that asks for or forbids colour."""
    env = course.env()
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    return env


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has finished
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_status_says_not_run_before_tests_and_the_result_after(course):
    [before] = course_status(course.settings)
    assert before.tests == "not run" and before.exported and before.in_sync

    listed = course.tito("status", cwd=course.root / "tests" / "01_tensor")
    assert listed.returncode == 0 and "not run" in listed.stdout

    ran = course.tito("status", "--run", cwd=course.root / "tests" / "01_tensor")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "passed 20" in ran.stdout and "not run" not in ran.stdout
    [after] = course_status(course.settings)
    assert after.tests.startswith("passed ") and "inline passed, pytest passed" in after.tests

    module = course.module("01")
    module.notebook.write_text(module.notebook.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    [changed] = course_status(course.settings)
    assert changed.tests.endswith("the notebook changed since")


def test_a_failing_inline_test_fails_the_run_and_is_recorded(course):
    course.add_module("02_toy", course.TOY.replace("return 2 * x", "return 3 * x"))
    course.tito("export", "02")
    done = course.tito("test", "toy")
    assert done.returncode == 1
    assert "AssertionError" in done.stdout and "02_toy" in done.stdout

    record = json.loads((course.root / ".tito" / "results.json").read_text(encoding="utf-8"))
    toy = record["runs"]["02_toy"]
    assert toy["passed"] is False and toy["parts"]["inline"]["status"] == "failed"
    assert toy["finished_at"].endswith("+00:00") and toy["seconds"] > 0
    statuses = {s.module.key: s.tests for s in course_status(course.settings)}
    assert statuses["02_toy"].startswith("failed ") and statuses["01_tensor"] == "not run"


def test_no_argument_also_runs_the_folders_of_no_module(course):
    extra = course.root / "tests" / "integration"
    extra.mkdir()
    (extra / "test_sum.py").write_text("def test_sum():\n    assert sum([1, 2]) == 4\n", encoding="utf-8")
    course.add_module("02_toy", course.TOY)
    export_modules(course.settings, [course.module("02")])
    [toy, folder] = run_tests(course.settings, [course.module("02")], include_extra=True)
    assert toy.passed and toy.parts["inline"].status == "passed"
    assert folder.name == "tests/integration" and not folder.passed
    assert "1 failed" in folder.parts["pytest"].summary and "assert 3 == 4" in folder.parts["pytest"].detail
    assert set(load_results(course.settings)) == {"02_toy", "tests/integration"}


def test_two_jobs_test_side_by_side_and_report_in_course_order(course):
    """`tito test --jobs 2`: the slow folder of no module starts first and runs beside the
    modules (it ends last: 2 s of sleep), yet the rows come in course order, every one recorded."""
    extra = course.root / "tests" / "integration"
    extra.mkdir()
    (extra / "test_slow.py").write_text(
        "import time\n\ndef test_slow():\n    time.sleep(2)\n", encoding="utf-8")
    course.add_module("02_toy", course.TOY)
    export_modules(course.settings, [course.module("01"), course.module("02")])
    heard: list[str] = []
    started = time.monotonic()
    runs = run_tests(course.settings, [course.module("01"), course.module("02")], include_extra=True,
                     finished=lambda run: heard.append(run.name), jobs=2)
    assert [r.name for r in runs] == heard == ["01_tensor", "02_toy", "tests/integration"]
    assert all(r.passed for r in runs), [(r.name, r.verdict) for r in runs]
    assert set(load_results(course.settings)) == set(heard)
    one_at_a_time = sum(r.seconds for r in runs)
    assert time.monotonic() - started < one_at_a_time, "the two jobs did not overlap"

    refused = course.tito("test", "--jobs", "0")
    assert refused.returncode != 0 and "--jobs takes a positive number" in refused.stdout + refused.stderr


def test_the_notebook_runs_in_a_jupyter_kernel_and_fails_with_whole_lines(course):
    course.add_module("02_toy", course.TOY)
    assert run_in_kernel(course.settings, course.module("02")).status == "passed"
    reason = "double(3) must be 6: " + "multiply by two, " * 8 + "not by three"
    course.add_module("02_toy", course.TOY.replace("return 2 * x", "return 3 * x")
                      .replace("assert double(3) == 6", f"assert double(3) == 6, {reason!r}"))
    failed = run_in_kernel(course.settings, course.module("02"))
    assert failed.status == "failed" and failed.summary.startswith("cell 4 raised AssertionError")
    assert "\x1b" not in failed.detail  # IPython colours its tracebacks; none of that reaches a log
    assert f"AssertionError: {reason}" in failed.detail.splitlines()  # one whole line
    assert "def test_unit_double():" in failed.detail  # the cell that failed, as the student wrote it


# ---------------------------------------------------------------------------- issue 9, row 9
# A hung run waits out its whole time limit. The two hung tito runs start together, in the
# background (the fixture below), so they and the hung kernel run wait side by side.

HUNG_LIMIT_S = 15  # each limit: time for a child to start and reach its loop on a busy machine, several times over
HUNG_LOOP = "while double(3) == 6:"


@pytest.fixture(scope="module")
def hung_runs(new_course):
    """{"inline": (course, its notebook, tito, started), "pytest": ...}: `tito test 02` runs left to hang."""
    inline = new_course("hung-inline")
    settings_file = inline.root / "settings.ini"
    settings_file.write_text(settings_file.read_text(encoding="utf-8").replace(
        "test_timeout_minutes = 10", f"test_timeout_minutes = {HUNG_LIMIT_S / 60}"), encoding="utf-8")
    # The budget covers the whole module, the export check before the inline run included:
    # it must leave the child time to start Python and reach the loop, even on a busy machine.
    text = inline.TOY.replace("    assert double(3) == 6\n", f"    {HUNG_LOOP}\n        pass\n")
    inline.add_module("02_toy", text)
    export_modules(inline.settings, [inline.module("02")])

    hangs = new_course("hung-pytest")
    hangs.add_module("02_toy", hangs.TOY)
    hangs.add_tests("02_toy", "import time\n\n\ndef test_fast():\n    assert 1 + 1 == 2\n\n\n"
                              "def test_hangs():\n    while True:\n        time.sleep(0.05)\n")
    export_modules(hangs.settings, [hangs.module("02")])

    started = time.monotonic()
    runs = {
        # tito started as a background job is (CI runners, `nohup … &`): SIGINT ignored, which every
        # child inherits unless tito hands them a handler; its Ctrl-C at the timeout must still work.
        "inline": (inline, text, inline.start_tito(
            "test", "02", preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)), started),
        "pytest": (hangs, None, hangs.start_tito("test", "02", "--timeout", str(HUNG_LIMIT_S / 60)), started),
    }
    yield runs
    for _, _, run, _ in runs.values():
        if run.poll() is None:  # a test failed before waiting for it
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()


def test_a_hung_notebook_cell_in_the_kernel_is_named(course, hung_runs):
    """Runs while the two tito runs of `hung_runs` wait out their limits."""
    course.add_module("02_toy", course.TOY + "\n# %%\nimport time\nwhile True:\n    time.sleep(0.05)\n")
    part = run_in_kernel(course.settings, course.module("02"), timeout_s=HUNG_LIMIT_S)
    assert part.failed and part.summary == f"timed out after {HUNG_LIMIT_S} s: it was running cell 5"
    assert "while True:" in part.detail


def test_a_hung_inline_test_is_stopped_at_the_settings_limit_naming_its_cell(hung_runs):
    course, text, run, started = hung_runs["inline"]
    output = run.communicate(timeout=300)[0]
    assert time.monotonic() - started < HUNG_LIMIT_S + 45, output  # the limit, not the loop, ended it
    out = course.flat(output)
    assert run.returncode == 1, out
    line = course.line_of(text, HUNG_LOOP)
    assert (f"timed out after {HUNG_LIMIT_S} s: it was running test_unit_double at toy_dev.py line {line} (cell 4)"
            in out)


def test_a_hung_pytest_test_is_stopped_by_the_timeout_flag_naming_the_test(hung_runs):
    course, _, run, _ = hung_runs["pytest"]
    out = course.flat(run.communicate(timeout=300)[0])
    assert run.returncode == 1, out
    assert f"timed out after {HUNG_LIMIT_S} s: it was running tests/02_toy/test_toy.py::test_hangs" in out
    assert load_results(course.settings)["02_toy"].verdict == "failed"


def test_a_child_left_running_does_not_keep_a_finished_test_waiting(course, tmp_path):
    pid_file = tmp_path / "child.pid"
    leaves_a_child = (f"\n# %%\nimport subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', "
                      f"'import time; time.sleep(300)'])\nopen({str(pid_file)!r}, 'w').write(str(child.pid))\n")
    course.add_module("02_toy", course.TOY + leaves_a_child)
    export_modules(course.settings, [course.module("02")])
    started = time.monotonic()
    result = course.tito("test", "02")
    assert result.returncode == 0 and "02_toy: passed" in result.stdout, result.stdout
    assert time.monotonic() - started < 120  # not the child's 300 s
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the child the notebook left running was not stopped"


# ---------------------------------------------------------------------------- issue 9, rows 10 and 11


def test_two_test_runs_at_once_both_finish_and_both_are_recorded(course):
    course.add_module("02_toy", course.TOY)
    course.add_module("03_other", course.TOY.replace("core.toy", "core.other"))
    export_modules(course.settings, [course.module("02"), course.module("03")])
    runs = [course.start_tito("test", key) for key in ("02", "03")]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    for run, output in zip(runs, outputs):
        assert run.returncode == 0 and "Summary: 1 passed, 0 failed" in output and "Traceback" not in output, output
    assert {"02_toy", "03_other"} <= set(load_results(course.settings))


RECORD_MANY = """
import sys
from tito.course import load_settings
from tito.testing import PartResult, RunRecord, record_results
settings = load_settings(sys.argv[1])
for i in range(20):
    record_results(settings, [RunRecord(f"{sys.argv[2]}-{i}", {"pytest": PartResult("passed", 0.1)})])
"""


def test_concurrent_writers_lose_no_result(course):
    writers = [subprocess.Popen([sys.executable, "-c", RECORD_MANY, str(course.root), f"writer{n}"],
                                env=course.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for n in range(4)]
    for writer in writers:
        output = writer.communicate(timeout=300)[0]
        assert writer.returncode == 0, output
    assert len(load_results(course.settings)) == 4 * 20
    assert list(course.settings.state_path.glob("*.tito-new")) == []
    assert list(course.settings.state_path.glob(".results.json.*.tmp")) == []  # atomic_write's scratch files


@pytest.mark.parametrize("content", [
    "not json at all", "[]", '{"runs": []}', '{"runs": {"01_tensor": "passed"}}',
    '{"runs": {"01_tensor": {"parts": {"inline": {"status": 1}}}}}',
    '{"runs": {"01_tensor": {"parts": {"inline": "passed"}}}}', '{"runs": {"01_tensor": {"pa',
    b"\xff\xfe not utf-8",
])
def test_a_damaged_results_file_is_kept_aside_never_silently_reset(course, content):
    """Issue 20: status shows no result and says the file is damaged; the next writer renames the
    damaged file aside (the student's record may be repaired by hand) and starts a whole new file."""
    path = course.settings.state_path / "results.json"
    path.parent.mkdir(parents=True)
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    path.write_bytes(data)
    [row] = course_status(course.settings)
    assert row.tests == "not run"
    assert results_problem(course.settings).startswith(f"{path} is damaged: ")
    record_results(course.settings, [])
    assert json.loads(path.read_text(encoding="utf-8")) == {"runs": {}}
    [kept] = course.settings.state_path.glob("results.json.damaged-*")
    assert kept.read_bytes() == data and results_problem(course.settings) is None


def test_status_and_test_say_the_results_file_is_damaged_and_where_it_went(course):
    path = course.settings.state_path / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"runs": {"01_tensor": {"parts": 5}}}', encoding="utf-8")
    status = course.tito("status")
    assert status.returncode == 0 and "not run" in status.stdout and "Traceback" not in status.stderr
    assert "results.json is damaged" in course.flat(status.stdout), status.stdout
    course.add_module("02_toy", course.TOY)  # a module whose tests take no time
    course.tito("export", "02")
    tested = course.tito("test", "02")
    out = course.flat(tested.stdout)
    assert "results.json is damaged: its row '01_tensor' is not one tito writes" in out, out
    [kept] = course.settings.state_path.glob("results.json.damaged-*")
    assert kept.name in out, out
    assert kept.read_text(encoding="utf-8") == '{"runs": {"01_tensor": {"parts": 5}}}'
    assert load_results(course.settings)["02_toy"].passed


@pytest.mark.parametrize("kill", ["SIGKILL to tito and its group", "SIGTERM to tito"])
def test_a_kill_mid_run_keeps_the_modules_that_finished(course, tmp_path, kill):
    pid_file = tmp_path / "slow.pid"
    course.add_module("02_toy", course.TOY)
    slow = course.TOY.replace("core.toy", "core.slow").replace(
        "test_unit_double()\n", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                "time.sleep(300)\ntest_unit_double()\n")
    course.add_module("03_slow", slow)
    export_modules(course.settings, [course.module("02"), course.module("03")])
    run = course.start_tito("test", "02", "03", env=course.env(PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 240
    seen = ""
    while "02_toy: passed" not in seen and time.monotonic() < deadline:
        seen += run.stdout.readline()
    try:
        assert "02_toy: passed" in seen, seen
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if kill.startswith("SIGKILL"):
            os.killpg(run.pid, signal.SIGKILL)  # tito, killed while module 03 runs
        else:
            os.kill(run.pid, signal.SIGTERM)  # `kill PID`: tito stops what it started, then exits
        run.communicate(timeout=60)
        if kill.startswith("SIGTERM"):
            assert not _alive(int(pid_file.read_text())), "tito left the notebook it was running behind"
    finally:
        if pid_file.exists():  # SIGKILL gives tito no chance to stop the script it started
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    results = load_results(course.settings)
    assert results["02_toy"].passed and "03_slow" not in results


# ---------------------------------------------------------------------------- issue 8, item 5: what a student sees

FAILING_TESTS = '''from tinytorch.core.toy import double


def test_one():
    assert double(1) == 2


def test_two():
    assert double(2) == 5, "SECOND_REASON " + "x" * 150


def test_three():
    assert double(3) == 7, "THIRD_REASON"


def test_four():
    assert double(4) == 9, "FOURTH_REASON"
'''


def test_a_module_nobody_started_is_one_line(course):
    course.add_module("02_toy", _student(course, "02_toy", course.TOY))
    export_modules(course.settings, [course.module("02")])
    result = course.tito("test", "02")
    assert result.returncode == 1
    assert "02_toy: not started: 1 stub left" in result.stdout
    assert "Summary: 0 passed, 0 failed, 1 not started" in result.stdout
    assert "Traceback" not in result.stdout and "NotImplementedError" not in result.stdout
    assert load_results(course.settings)["02_toy"].verdict == "not started"


def test_the_first_failure_in_full_then_how_many_more_and_the_command(course):
    course.add_module("02_toy", course.TOY)
    course.add_tests("02_toy", FAILING_TESTS)
    export_modules(course.settings, [course.module("02")])
    result = course.tito_process("test", "02", env=_plain_env(course))
    out = result.stdout
    assert result.returncode == 1
    assert "\x1b[" not in out  # piped: no colour codes
    assert "tests/02_toy/test_toy.py::test_two" in out and "assert double(2) == 5" in out
    assert f"AssertionError: SECOND_REASON {'x' * 150}" in out  # the reason is not cut to 80 columns
    assert "THIRD_REASON" not in out and "FOURTH_REASON" not in out  # one failure in full, not all
    assert "2 more failures in 02_toy (2 pytest); `tito test 02_toy -v` shows everything." in course.flat(out)


def test_x_and_v_are_passed_to_pytest(course):
    course.add_module("02_toy", course.TOY)
    course.add_tests("02_toy", FAILING_TESTS)
    export_modules(course.settings, [course.module("02")])
    first_only = course.tito("test", "02", "-x")
    assert "pytest 1 failed, 1 passed" in first_only.stdout, first_only.stdout
    everything = course.tito("test", "02", "-v")
    out = everything.stdout
    assert "tests/02_toy/test_toy.py::test_one PASSED" in out
    assert "THIRD_REASON" in out and "FOURTH_REASON" in out
    assert f"FAILED tests/02_toy/test_toy.py::test_two - AssertionError: SECOND_REASON {'x' * 150}" in out


def test_a_notebook_that_does_not_export_never_records_passed(course):
    """Markers are comments to Python: the script runs, and pytest would pass on the old package."""
    course.add_module("02_toy", course.TOY)
    course.add_tests("02_toy", "from tinytorch.core.toy import double\n\n\ndef test_double():\n    assert double(3) == 6\n")
    export_modules(course.settings, [course.module("02")])
    course.add_module("02_toy", course.TOY.replace("    ### END SOLUTION\n", ""))
    result = course.tito("test", "02")
    assert result.returncode == 1
    assert "02_toy: does not export" in result.stdout and "is never closed" in result.stdout
    run = load_results(course.settings)["02_toy"]
    assert not run.passed and run.verdict == "does not export"
    [_, toy] = course_status(course.settings)
    assert toy.tests.startswith("does not export")


def test_a_fresh_student_course_prints_one_line_per_module(course):
    for key in ("01_tensor",):
        notebook = course.module(key).notebook
        notebook.write_text(_student(course, key, notebook.read_text(encoding="utf-8")), encoding="utf-8")
    course.add_module("02_toy", _student(course, "02_toy", course.TOY))
    extra = course.root / "tests" / "integration"
    extra.mkdir()
    (extra / "test_all.py").write_text("def test_all():\n    assert False\n", encoding="utf-8")
    result = course.tito("test", "--all")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 1
    assert any(line.startswith("  01_tensor: not started:") and "stubs left" in line for line in lines)
    assert "  02_toy: not started: 1 stub left" in lines
    assert any(line.startswith("  tests/integration: not run:") for line in lines)
    assert lines[-1] == "Summary: 0 passed, 0 failed, 2 not started, 1 not run"
    assert len(lines) <= 7 and "Traceback" not in result.stdout, result.stdout


# ---------------------------------------------------------------------------- issue 8, item 6: status


def test_status_shows_stubs_left_and_flags_a_newer_ipynb(course):
    course.add_module("02_toy", _student(course, "02_toy", course.TOY))
    rows = {row.module.key: row for row in course_status(course.settings)}
    assert rows["02_toy"].stubs == "1 of 1 left"
    assert rows["01_tensor"].stubs.startswith("none left (")

    module = course.module("02")
    copy = module.folder / "toy_dev.ipynb"  # the student converted the notebook and edits the copy
    jupytext.write(jupytext.read(module.notebook), copy)
    later = module.notebook.stat().st_mtime + 60
    os.utime(copy, (later, later))
    status = course.tito("status")
    out = course.flat(status.stdout)
    assert "1 of 1 left" in out
    assert "toy_dev.ipynb is newer than toy_dev.py: tito exports the .py, so edits made in the .ipynb" in out
    export = course.tito("export", "02")
    assert "toy_dev.ipynb was saved after toy_dev.py" in course.flat(export.stdout)


def test_a_deleted_notebook_without_a_backup_is_shown_missing_with_what_to_do(course):
    """It used to vanish from `tito status` without a word (list_modules lists only notebooks that exist)."""
    notebook = course.module("01").notebook
    notebook.unlink()  # the module folder keeps its mistakes catalogue, tests/01_tensor its tests
    status = course.tito("status", cwd=course.root)
    said = course.flat(status.stdout)
    assert status.returncode == 0
    row = next(line for line in status.stdout.splitlines() if "01_tensor" in line and "│" in line)
    assert "notebook missing" in row
    assert ("Warning: 01_tensor has no notebook any more (modules/01_tensor/tensor_dev.py) and no backup: if it "
            "was committed, `git checkout -- modules/01_tensor/tensor_dev.py` brings it back") in said


def test_a_notebook_known_only_from_its_recorded_run_is_missing_too(course):
    from tito.status import missing_notebooks
    from tito.testing import RunRecord

    module = course.module("01")
    record_results(course.settings, [RunRecord(name="01_tensor", seconds=1.0, finished_at="2026-11-28T00:00:01")])
    assert missing_notebooks(course.settings) == []
    for companion in module.companions:  # given code beside the lesson (tensor_checks.py)
        companion.unlink()
    module.notebook.unlink()
    (module.folder / "mistakes.toml").unlink()
    module.folder.rmdir()
    for path in sorted((course.root / "tests" / "01_tensor").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (course.root / "tests" / "01_tensor").rmdir()
    [gone] = missing_notebooks(course.settings)
    assert gone.key == "01_tensor" and gone.notebook == module.notebook and not gone.has_backups


@pytest.mark.parametrize("command", [("test", "01"), ("export", "01"), ("module", "reset", "tensor")])
def test_a_command_naming_a_module_whose_notebook_is_deleted_says_it_is_missing(course, command):
    course.module("01").notebook.unlink()
    result = course.tito(*command, cwd=course.root)
    assert result.returncode == 1
    assert ("modules/01_tensor/tensor_dev.py is missing (deleted?). `tito status` says how to bring it back: "
            "`git checkout -- modules/01_tensor/tensor_dev.py`") in course.flat(result.stdout)
