"""tito milestone / tito bench: listed from their docstrings, run with their exit status."""
from __future__ import annotations

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
