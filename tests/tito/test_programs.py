"""tito milestone / tito bench: listed from their docstrings, run with their exit status."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tito.course import CourseError
from tito.programs import find_program, in_course_order, list_programs


@pytest.fixture
def milestones(course):
    folder = course.root / "milestones"
    folder.mkdir()
    (folder / "xor.py").write_text(
        '"""Learn XOR with a two-layer MLP.\n\nMore text."""\nimport sys\n'
        'print("fast" if "--fast" in sys.argv else "slow")\nsys.exit(3)\n', encoding="utf-8")
    (folder / "_shared.py").write_text("raise RuntimeError('a helper, never listed or imported')\n",
                                       encoding="utf-8")
    (folder / "broken.py").write_text("def (:\n", encoding="utf-8")
    return folder


def test_list_reads_docstrings_without_importing(milestones):
    programs = {p.name: p.summary for p in list_programs(milestones)}
    assert programs["xor"] == "Learn XOR with a two-layer MLP."
    assert programs["broken"].startswith("(cannot read")
    assert "_shared" not in programs


def test_run_passes_output_and_exit_status_through(course, milestones):
    done = course.tito_process("milestone", "run", "xor", "--fast")
    assert done.returncode == 3
    assert "fast" in done.stdout and "slow" not in done.stdout
    listing = course.tito_process("milestone", "list")
    assert listing.returncode == 0 and "Learn XOR with a two-layer MLP." in listing.stdout


def test_an_unknown_name_lists_the_valid_ones(course, milestones):
    with pytest.raises(CourseError, match="Valid names: broken, xor"):
        find_program(milestones, "xr", "milestone")
    bench = course.tito_process("bench", "nothing")
    assert bench.returncode == 1 and "Unknown benchmark 'nothing'" in bench.stdout


def test_run_all_runs_every_milestone_and_fails_if_one_fails(course):
    folder = course.root / "milestones"
    folder.mkdir()
    (folder / "good.py").write_text('"""Passes."""\nprint("good ran")\n', encoding="utf-8")
    (folder / "bad.py").write_text('"""Fails."""\nimport sys\nprint("bad ran")\nsys.exit(2)\n',
                                   encoding="utf-8")
    done = course.tito_process("milestone", "run", "--all")
    assert done.returncode == 1
    assert "good ran" in done.stdout and "bad ran" in done.stdout
    assert "Summary: 1 passed, 1 failed" in done.stdout
    (folder / "bad.py").unlink()
    assert course.tito_process("milestone", "run", "--all").returncode == 0
    neither = course.tito_process("milestone", "run")
    assert neither.returncode == 1 and "--all" in neither.stdout


def test_device_reaches_the_milestone_in_every_form(course):
    """`--device cuda` before or after the name, and with --all, is passed on to the program."""
    folder = course.root / "milestones"
    folder.mkdir()
    for name in ("one", "two"):
        (folder / f"{name}.py").write_text(
            f'"""Prints its arguments."""\nimport sys\nprint("{name} got", " ".join(sys.argv[1:]))\n',
            encoding="utf-8")
    for argv in (["one", "--device", "cuda"], ["--device", "cuda", "one"], ["one", "--fast", "--device", "cuda"],
                 ["--fast", "--device", "cuda", "one"]):
        done = course.tito_process("milestone", "run", *argv)
        assert done.returncode == 0, done.stdout + done.stderr
        got = next(line for line in done.stdout.splitlines() if line.startswith("one got"))
        assert "--device cuda" in got and ("--fast" in got) == ("--fast" in argv), (argv, got)
    both = course.tito_process("milestone", "run", "--all", "--fast", "--device", "cuda")
    assert both.returncode == 0, both.stdout + both.stderr
    assert "one got --fast --device cuda" in both.stdout and "two got --fast --device cuda" in both.stdout
    wrong = course.tito_process("milestone", "run", "--device", "tpu", "one")
    assert wrong.returncode != 0 and "invalid choice" in wrong.stdout + wrong.stderr


def test_run_all_follows_the_course_order(course):
    """A milestone that uses another's result (quantize loads the model shakespeare saved) runs after it."""
    folder = course.root / "milestones"
    folder.mkdir()
    for name, after in (("quantize", 15), ("shakespeare", 13), ("xor", 7), ("spirals", 7)):
        (folder / f"{name}.py").write_text(f'"""{name} (after module {after}): a check."""\nprint("{name} ran")\n',
                                           encoding="utf-8")
    (folder / "anything.py").write_text('"""No module named."""\nprint("anything ran")\n', encoding="utf-8")
    assert [p.name for p in in_course_order(list_programs(folder))] == [
        "anything", "spirals", "xor", "shakespeare", "quantize"]
    done = course.tito_process("milestone", "run", "--all")  # the milestones print from their own processes
    assert done.returncode == 0
    order = [done.stdout.index(f"{name} ran") for name in ("anything", "spirals", "xor", "shakespeare", "quantize")]
    assert order == sorted(order), done.stdout


# A milestone that needs time to clean up after Ctrl-C: its scratch folder (as the olympics judge's
# tito-olympics-*) and a child it started. argv[1]: the folder to make; it says "ready" once made.
CLEANS_UP = '''"""Holds a scratch folder and a child until Ctrl-C, then takes a second to remove them."""
import os, shutil, subprocess, sys, time
from pathlib import Path

scratch = Path(sys.argv[1])
scratch.mkdir()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
(scratch / "child.pid").write_text(str(child.pid))
try:
    print("ready", flush=True)
    time.sleep(120)
finally:
    time.sleep(1)  # cleaning up takes a while (the judge stops its runners first)
    child.kill()
    child.wait()
    shutil.rmtree(scratch)
    print("cleaned up", flush=True)
'''

# A milestone that ignores Ctrl-C and leaves a child running: killed, with the child, after the grace period.
IGNORES = '''"""Ignores Ctrl-C."""
import signal, subprocess, sys, time
from pathlib import Path

signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
Path(sys.argv[1]).write_text(str(child.pid))
print("ready", flush=True)
time.sleep(120)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").is_file() or Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _run_and_interrupt(course, name: str, target: Path, grace_s: float) -> tuple[subprocess.Popen, str, float]:
    """`tito milestone run NAME TARGET` with a grace period of grace_s, Ctrl-C'd as a terminal does (its group)."""
    code = (f"import sys; import tito.programs as p; p.INTERRUPT_GRACE_S = {grace_s}; from tito.cli import main; "
            f"sys.exit(main(['milestone', 'run', '{name}', '--', '{target}']))")
    tito = subprocess.Popen([sys.executable, "-c", code], cwd=course.root, env=course.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    for line in tito.stdout:
        lines.append(line)
        if line.strip() == "ready":
            break
    started = time.monotonic()
    os.killpg(tito.pid, signal.SIGINT)  # Ctrl-C at a terminal reaches its whole foreground group
    rest, _ = tito.communicate(timeout=60)
    return tito, "".join(lines) + rest, time.monotonic() - started


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
def test_ctrl_c_gives_a_milestone_time_to_clean_up(course, tmp_path):
    (course.root / "milestones").mkdir()
    (course.root / "milestones" / "cleans_up.py").write_text(CLEANS_UP, encoding="utf-8")
    scratch = tmp_path / "tito-olympics-scratch"
    tito, output, _ = _run_and_interrupt(course, "cleans_up", scratch, grace_s=30)
    assert "cleaned up" in output and not scratch.exists(), output
    assert tito.returncode == 130
    assert "Stopping cleans_up: it has 30 s to clean up (Ctrl-C again to kill it now)." in course.flat(output)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
def test_a_milestone_that_ignores_ctrl_c_is_killed_with_what_it_started_after_the_grace_period(course, tmp_path):
    (course.root / "milestones").mkdir()
    (course.root / "milestones" / "ignores.py").write_text(IGNORES, encoding="utf-8")
    pid_file = tmp_path / "child.pid"
    tito, output, seconds = _run_and_interrupt(course, "ignores", pid_file, grace_s=2)
    assert tito.returncode == 130 and 2 <= seconds < 30, (seconds, output)
    assert "ignores did not stop within 2 s: killed." in course.flat(output)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


RANK_PRINTER = ('"""Prints its rank and arguments."""\nimport sys\nfrom mpi4py import MPI\n{declare}'
                'sys.stdout.write(f"rank {{MPI.COMM_WORLD.rank}} of {{MPI.COMM_WORLD.size}} got {{\' \'.join(sys.argv[1:])}}\\n")\n')
# (one write per rank: the ranks share one pipe, and a line written in one piece is never cut by another's)


def needs_mpi() -> None:
    """Skip (saying why) where mpi4py or an mpiexec is missing: `pip install mpi4py mpich`."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py mpich)")
    from tito.launch import find_mpiexec

    try:
        find_mpiexec()
    except CourseError as err:
        pytest.skip(str(err))


def test_ranks_runs_a_milestone_that_says_it_can_on_n_processes(course):
    """`tito milestone run NAME --ranks N` (before or after the name) runs the program on N MPI ranks
    through tito's launcher; --ranks itself never reaches the program; a milestone that does not declare
    RUNS_ON_RANKS is refused before anything runs, naming the ones that can."""
    needs_mpi()
    folder = course.root / "milestones"
    folder.mkdir()
    (folder / "parallel.py").write_text(RANK_PRINTER.format(declare="RUNS_ON_RANKS = True\n"), encoding="utf-8")
    (folder / "single.py").write_text(RANK_PRINTER.format(declare=""), encoding="utf-8")
    for argv in (["parallel", "--ranks", "2", "--fast"], ["--ranks", "2", "parallel", "--fast"], ["parallel", "--ranks=2", "--fast"]):
        done = course.tito_process("milestone", "run", *argv)
        assert done.returncode == 0, (argv, done.stdout + done.stderr)
        got = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
        assert got == ["rank 0 of 2 got --fast", "rank 1 of 2 got --fast"], (argv, done.stdout)
    refused = course.tito_process("milestone", "run", "single", "--ranks", "2")
    assert refused.returncode == 1 and "rank 0" not in refused.stdout
    assert "single does not run on several ranks (--ranks); the ones that do: parallel." in refused.stdout


@pytest.mark.parametrize("argv, says", [
    (["--all", "--ranks", "2"], "--ranks runs one milestone on N MPI processes: name it"),
    (["parallel", "--ranks", "two"], "--ranks must be a whole number of processes, got 'two'."),
    (["parallel", "--ranks"], "--ranks must be a whole number of processes, got ''."),
    (["parallel", "--ranks", "0"], "--ranks must be a whole number >= 1, got 0."),
])
def test_ranks_that_cannot_run_are_refused_with_the_reason(course, argv, says):
    needs_mpi()  # "0" is refused by the launcher's own check, which looks for MPI first
    folder = course.root / "milestones"
    folder.mkdir()
    (folder / "parallel.py").write_text(RANK_PRINTER.format(declare="RUNS_ON_RANKS = True\n"), encoding="utf-8")
    done = course.tito_process("milestone", "run", *argv)
    assert done.returncode == 1 and says in done.stdout, done.stdout + done.stderr
    assert "rank 0" not in done.stdout
