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
