#!/usr/bin/env python
"""tito grade's speed: one full submission (every module with graded cases), then a class of them.

    python benchmarks/grading.py                                 # 1 submission, then 20; jobs: the CPU count
    python benchmarks/grading.py --students 20 --jobs 2 --write-results
    python benchmarks/grading.py --students 0 --modules 01 05    # one submission, some modules

Every submission holds the reference notebooks, so every graded case of every module runs to the
end (a submission with stubs or broken notebooks is faster: those modules score 0 without
running). Each (student, module) runs in the sandbox as `tito grade` runs it; the wall-clock
time of the whole grading is measured, setup included (the scratch course, describing the
graded cases, checking the sandbox user), and each module's own time is reported.
"""
from __future__ import annotations

import _common  # noqa: F401  (one BLAS thread, the machine's description, RESULTS.md)

import argparse
import importlib.metadata
import os
import shutil
import statistics
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
    parser.add_argument("--write-results", action="store_true", help=f"rewrite the section {HEADING!r} of RESULTS.md")
    args = parser.parse_args()
    if args.students < 0 or args.jobs < 1:  # before any grading, not after the first run
        parser.error(f"--students {args.students} --jobs {args.jobs}: students 0 or more, jobs at least 1")
    settings = load_settings(ROOT)
    modules = resolve_modules(settings, args.modules)
    options = GradeOptions(tuple(modules), jobs=args.jobs)
    facts = _common.machine()
    try:
        facts["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pass
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
        if args.students:
            wall, setup, students = grade(settings, make_submissions(tmp / "many", args.students, modules), options)
            per = statistics.mean(sum(m.seconds for m in s.modules.values()) for s in students)
            full = sum(s.total == s.max_total for s in students)
            many = (f"| {args.students} submissions | {wall:.1f} s | {setup:.1f} s | {wall / args.students:.1f} s per "
                    f"submission; {full} of {args.students} scored full marks |")
            print(f"{args.students} submissions: {wall:.1f} s (setup {setup:.1f} s), {wall / args.students:.1f} s per "
                  f"submission; the jobs of one submission took {per:.1f} s together")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not args.write_results:
        return 0
    section = f"""{HEADING}

`python benchmarks/grading.py --students {args.students} --jobs {args.jobs} --write-results`, on {facts['cpu']}
({facts['cores']} cores), Python {facts['python']}, NumPy {facts['numpy']}, PyTorch {facts['torch']}
(with PyTorch installed its comparison tests run too), {facts['date']}. Each submission holds the
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
""" + "\n".join(rows) + "\n"
    print(f"wrote {_common.write_section(HEADING, section)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
