#!/usr/bin/env python
"""tito grade's speed: one full submission (every module with graded cases), then a class of them.

    python benchmarks/grading.py                                 # 1 submission, then 20; jobs: the CPU count
    python benchmarks/grading.py --students 20 --jobs 2 --write-results
    python benchmarks/grading.py --students 0 --modules 01 05    # one submission, some modules
    python benchmarks/grading.py --students 20 --jobs 2 --before /tmp/before/benchmarks/RESULTS.md --write-results

--before names a RESULTS.md that this script wrote at another revision of the course (a `git worktree`
of it, run with the same --students and --jobs, just before, on the same machine): the class is then
graded on that run's modules, so the two wall clocks time the same work, and the section shows both
with their ratio (the one full submission is still every module of this revision).

Every submission holds the reference notebooks, so every graded case of every module runs to the
end (a submission with stubs or broken notebooks is faster: those modules score 0 without
running). Each (student, module) runs in the sandbox as `tito grade` runs it; the wall-clock
time of the whole grading is measured, setup included (the scratch course, describing the
graded cases, checking the sandbox user), and each module's own time is reported.
"""
from __future__ import annotations

import _common  # noqa: F401  (one BLAS thread, the machine's description, RESULTS.md)

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tito.course import list_modules, load_settings, resolve_modules  # noqa: E402
from tito.grading.grade import GradeOptions, GradingRun, grade_submissions  # noqa: E402
from tito.grading.report import fmt  # noqa: E402
from tito.grading.sandbox import describe_isolation  # noqa: E402
from tito.grading.submissions import collect_submissions  # noqa: E402
from tito.notebook import read_text  # noqa: E402

HEADING = "## Grading (`tito grade`)"


def read_before(path: Path, students: int) -> dict:
    """What the grading section of another revision's RESULTS.md measured: its revision, the line that
    says how and when, its modules, and the wall clocks of one submission and of `students` of them."""
    if not path.is_file():
        raise SystemExit(f"--before {path}: no such file; name the RESULTS.md this script wrote at the other "
                         "revision (see the top of this file)")
    text = path.read_text(encoding="utf-8")
    start = text.find(HEADING + "\n")
    if start < 0:
        raise SystemExit(f"--before {path}: no section {HEADING!r} in it")
    section = text[start + len(HEADING):].split("\n## ", 1)[0]
    one = re.search(r"^\| one submission \| ([\d.]+) s \|", section, re.M)
    many = re.search(rf"^\| {students} submissions(?: of \d+ module\(s\))? \| ([\d.]+) s \|", section, re.M)
    if one is None or (students and many is None):
        raise SystemExit(f"--before {path}: its section has no row for one submission and for {students} "
                         "submissions: run it with the same --students")
    modules = re.findall(r"^\| (\d\d_[a-z_]+) \|", section, re.M)
    how = section.strip().split("\n\n", 1)[0].replace("\n", " ").split(" UTC.", 1)[0] + " UTC"  # command, machine, date
    revision = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    return {"revision": revision, "how": how, "modules": modules, "one": float(one.group(1)),
            "many": float(many.group(1)) if many else None}


def make_submissions(folder: Path, count: int, modules) -> Path:
    for number in range(count):
        for module in modules:
            lesson = folder / f"student{number:03d}" / "modules" / module.key / module.notebook.name
            lesson.parent.mkdir(parents=True, exist_ok=True)
            lesson.write_text(read_text(module.notebook), encoding="utf-8")
    return folder


def grade(settings, folder: Path, options: GradeOptions):
    """(wall seconds, setup seconds, students) of grading every submission in `folder`."""
    start = time.perf_counter()
    with GradingRun(settings, options) as run:
        setup = time.perf_counter() - start
        students = grade_submissions(settings, collect_submissions(folder, list_modules(settings)), options, run=run)
    return time.perf_counter() - start, setup, students


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--students", type=int, default=20, help="the class to grade after the single submission")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--modules", nargs="*", help="default: every module")
    parser.add_argument("--before", type=Path, metavar="RESULTS.md",
                        help="compare with what this script measured at another revision (see above)")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite the section {HEADING!r} of RESULTS.md")
    args = parser.parse_args()
    if args.students < 0 or args.jobs < 1:  # before any grading, not after the first run
        parser.error(f"--students {args.students} --jobs {args.jobs}: students 0 or more, jobs at least 1")
    settings = load_settings(ROOT)
    modules = resolve_modules(settings, args.modules)
    options = GradeOptions(tuple(modules), jobs=args.jobs)
    before = read_before(args.before, args.students) if args.before else None
    compared = modules  # the modules the class is graded on
    if before is not None:
        compared = resolve_modules(settings, before["modules"])
    facts = _common.machine()
    tmp = Path(tempfile.mkdtemp(prefix="tito-bench-grade-"))
    tmp.chmod(0o755)
    try:
        one_wall, one_setup, [one] = grade(settings, make_submissions(tmp / "one", 1, modules), options)
        bad = [k for k, m in one.modules.items() if m.score != m.max_score]
        print(f"one submission, {len(modules)} module(s), jobs {args.jobs}: {one_wall:.1f} s "
              f"(setup {one_setup:.1f} s); score {fmt(one.total)} / {fmt(one.max_total)}")
        if bad:
            print(f"warning: the reference did not score full marks in {', '.join(bad)}", file=sys.stderr)
        rows = []
        for key, module in one.modules.items():
            rows.append(f"| {key} | {len(module.cases)} | {module.seconds:.1f} |")
            print(f"  {key}: {len(module.cases)} cases, {module.seconds:.1f} s")
        many = ""
        one_compared = None  # one submission of the compared modules, when they are not every module
        compared_options = GradeOptions(tuple(compared), jobs=args.jobs)
        if before is not None and compared != modules:
            one_compared, _, _ = grade(settings, make_submissions(tmp / "one-compared", 1, compared), compared_options)
            print(f"one submission of the {len(compared)} module(s) graded before: {one_compared:.1f} s")
        if args.students:
            wall, setup, students = grade(settings, make_submissions(tmp / "many", args.students, compared),
                                          compared_options)
            per = statistics.mean(sum(m.seconds for m in s.modules.values()) for s in students)
            full = sum(s.total == s.max_total for s in students)
            many = (f"| {args.students} submissions of {len(compared)} module(s) | {wall:.1f} s | {setup:.1f} s | "
                    f"{wall / args.students:.1f} s per submission; {full} of {args.students} scored full marks |")
            print(f"{args.students} submissions: {wall:.1f} s (setup {setup:.1f} s), {wall / args.students:.1f} s per "
                  f"submission; the jobs of one submission took {per:.1f} s together")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    comparison = ""
    if before is not None:
        one_now = one_wall if one_compared is None else one_compared
        lines = [f"| one submission | {before['one']:.1f} s | {one_now:.1f} s | {one_now / before['one']:.2f}× |"]
        if args.students:
            lines.append(f"| {args.students} submissions | {before['many']:.1f} s | {wall:.1f} s | "
                         f"{wall / before['many']:.2f}× |")
        print("before → now: " + "; ".join(line.strip("| ").replace(" | ", " ") for line in lines))
        comparison = f"""
### Before and after, the same {len(compared)} module(s), jobs {args.jobs}

Before: revision {before['revision']}, measured by this script there ({before['how']}).
Now: this run. Target (issue 29): no slower than before by more than 20% (ratio at most 1.20).

| what | before | now | now / before |
|---|---:|---:|---:|
""" + "\n".join(lines) + "\n"
    if not args.write_results:
        return 0
    before_option = f" --before {args.before}" if args.before else ""
    section = f"""{HEADING}

`python benchmarks/grading.py --students {args.students} --jobs {args.jobs}{before_option} --write-results`, on
{facts['cpu']} ({facts['cores']} cores), Python {facts['python']}, NumPy {facts['numpy']}, {facts['date']}. Each submission holds the
reference notebooks of {len(modules)} module(s), so every graded case runs to the end. Sandbox:
{'; '.join(describe_isolation())}.

| what | wall clock | of which setup | |
|---|---|---|---|
| one submission | {one_wall:.1f} s | {one_setup:.1f} s | {args.jobs} (student, module) runs at a time |
{many}

Setup is once per run: the scratch reference course, describing the graded cases on the
reference, and a check that the sandbox's user runs this Python.

Each module of the single submission (the run's own time: copy, export, the cases in the sandbox,
the comparison):

| module | cases graded | seconds |
|---|---|---|
""" + "\n".join(rows) + "\n" + comparison
    print(f"wrote {_common.write_section(HEADING, section)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
