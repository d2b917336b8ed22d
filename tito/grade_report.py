"""What `tito grade` writes: the grade book, each student's feedback, and Gradescope's results.

In `--out` (default `grades/`):

* `grades.csv`: one row per student, one column per module and the total; the row
  `(max points)` first. `grades_long.csv`: one row per (student, module, test) with its
  points, for spreadsheets. Both hold only points and outcomes, so the same submissions
  give byte-identical files.
* `feedback/<student>.md`: per module the score and why: each failed test with its first
  failure message (the course's messages name the cause), or the reason the module scored 0.
* `results/<student>.json`: Gradescope's results format (`score`, and `tests` with `name`,
  `score`, `max_score`, `output`, `visibility`): one entry per module and test file, hidden
  tests with `hidden_visibility` from grading.toml (default `after_due_date`).
"""
from __future__ import annotations

import csv
import io
import json
from fractions import Fraction
from pathlib import Path

from .grade import ModuleResult, StudentResult, GradedTest

MAX_ROW = "(max points)"
FAILURES_SHOWN = 25  # per module in the feedback; the rest are counted
IGNORED_SHOWN = 15


def fmt(points: Fraction) -> str:
    """Points as a spreadsheet reads them: "10", "7.5", "3.33" (two decimals at most, the same every run)."""
    value = round(Fraction(points), 2)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def _csv_text(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def grades_csv(students: list[StudentResult]) -> str:
    modules = list(students[0].modules) if students else []
    rows = [["student", *modules, "total"]]
    if students:
        first = students[0]
        rows.append([MAX_ROW, *(fmt(first.modules[m].max_score) for m in modules), fmt(first.max_total)])
    for student in students:
        rows.append([student.name, *(fmt(student.modules[m].score) for m in modules), fmt(student.total)])
    return _csv_text(rows)


def grades_long_csv(students: list[StudentResult], expected: dict[str, dict[str, Fraction]]) -> str:
    """Student x module x test x points; a module that scored 0 as a whole lists its tests as not run, with why."""
    rows = [["student", "module", "test", "visibility", "outcome", "points", "max_points", "reason"]]
    for student in students:
        for key, module in student.modules.items():
            if module.tests:
                for test in module.tests:
                    rows.append([student.name, key, test.nodeid, "hidden" if test.hidden else "visible",
                                 test.outcome, fmt(test.points), fmt(test.max_points), ""])
                continue
            for nodeid, points in expected.get(key, {}).items():
                hidden = nodeid.startswith("grading/")
                rows.append([student.name, key, nodeid, "hidden" if hidden else "visible", "not run", "0",
                             fmt(points), module.reason])
    return _csv_text(rows)


def _fence(text: str) -> str:
    """A code block that the text itself cannot close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _failures(module: ModuleResult) -> list[GradedTest]:
    return [t for t in module.tests if t.outcome != "passed"]


def module_summary(module: ModuleResult) -> str:
    """One line: "3 of 200 tests failed", or the reason it scored 0 as a whole."""
    if module.reason:
        return module.reason
    if not module.tests:
        return "no tests"
    failed = len(_failures(module))
    return f"all {len(module.tests)} tests passed" if not failed else f"{failed} of {len(module.tests)} tests failed"


def feedback_markdown(student: StudentResult) -> str:
    lines = [f"# Grade: {student.name}", "",
             f"**Total: {fmt(student.total)} / {fmt(student.max_total)}**", "",
             "| module | score | |", "|---|---|---|"]
    for key, module in student.modules.items():
        lines.append(f"| {key} | {fmt(module.score)} / {fmt(module.max_score)} | "
                     f"{module_summary(module).replace('|', '/')} |")
    if student.error:
        lines += ["", f"**The submission could not be read:** {student.error}"]
    for key, module in student.modules.items():
        lines += ["", f"## {key}: {fmt(module.score)} / {fmt(module.max_score)}", ""]
        if module.notebook:
            lines.append(f"Graded `{module.notebook}`" + (f" ({module.note})" if module.note else "") + ".")
            lines.append("")
        if module.reason:
            lines.append(f"**Scored 0:** {module.reason}")
            continue
        failures = _failures(module)
        if not failures:
            lines.append(module_summary(module) + ".")
            continue
        if module.first_failure:
            lines += [f"What `tito test {key}` shows you first (the inline tests in your notebook):", "",
                      _fence(module.first_failure), ""]
        lines.append(f"{module_summary(module)}. Each failed test with its first message:")
        for test in failures[:FAILURES_SHOWN]:
            kind = "hidden test " if test.hidden else ""
            lines += ["", f"- {kind}`{test.nodeid}` ({test.outcome}, {fmt(test.max_points)} point(s))", "",
                      _fence(test.message or "(no message)")]
        if len(failures) > FAILURES_SHOWN:
            lines += ["", f"... and {len(failures) - FAILURES_SHOWN} more failed tests."]
    if student.ignored:
        shown = ", ".join(f"`{p}`" for p in student.ignored[:IGNORED_SHOWN])
        more = f" and {len(student.ignored) - IGNORED_SHOWN} more" if len(student.ignored) > IGNORED_SHOWN else ""
        lines += ["", "## Not used from your submission", "",
                  "Only the lesson notebooks (`modules/NN_name/name_dev.py`) are graded, with the course's own "
                  f"tests and package. These files were ignored: {shown}{more}."]
    return "\n".join(lines) + "\n"


def _file_entries(key: str, module: ModuleResult, hidden_visibility: str) -> list[dict]:
    """Gradescope test entries for one module: one per test file (hidden files with their own visibility)."""
    if module.reason or not module.tests:
        return [{"name": f"{key}", "score": float(module.score),
                 "max_score": float(module.max_score),
                 "output": module.reason or "no tests", "visibility": "visible"}]
    files: dict[str, list[GradedTest]] = {}
    for test in module.tests:
        files.setdefault(test.nodeid.split("::", 1)[0], []).append(test)
    entries = []
    first = ([f"What `tito test {key}` shows you first (the inline tests in your notebook):", module.first_failure, ""]
             if module.first_failure else [])
    for path, tests in files.items():
        failures = [t for t in tests if t.outcome != "passed"]
        output = [f"{len(tests) - len(failures)} of {len(tests)} tests passed."]
        if first and not tests[0].hidden:  # once per module, in its first visible entry
            output, first = first + output, []
        for test in failures[:FAILURES_SHOWN]:
            output += ["", f"{test.nodeid} ({test.outcome}):", test.message or "(no message)"]
        if len(failures) > FAILURES_SHOWN:
            output += ["", f"... and {len(failures) - FAILURES_SHOWN} more failed tests."]
        hidden = tests[0].hidden
        entries.append({
            "name": f"{key}: {'hidden tests ' if hidden else ''}{path}",
            "score": float(sum((t.points for t in tests), Fraction(0))),
            "max_score": float(sum((t.max_points for t in tests), Fraction(0))),
            "output": "\n".join(output),
            "visibility": hidden_visibility if hidden else "visible",
        })
    return entries


def gradescope_results(student: StudentResult, hidden_visibility: str = "after_due_date") -> dict:
    """Gradescope's results.json for one student (the fields its autograder harness reads)."""
    tests = [e for key, module in student.modules.items() for e in _file_entries(key, module, hidden_visibility)]
    summary = [f"Total: {fmt(student.total)} / {fmt(student.max_total)}"]
    summary += [f"{key}: {fmt(m.score)} / {fmt(m.max_score)} ({module_summary(m)})" for key, m in student.modules.items()]
    if student.error:
        summary.append(f"The submission could not be read: {student.error}")
    if student.ignored:
        summary.append(f"Ignored {len(student.ignored)} file(s) that are not lesson notebooks "
                       f"(the course's own tests and package are used): {', '.join(student.ignored[:IGNORED_SHOWN])}"
                       + (" ..." if len(student.ignored) > IGNORED_SHOWN else ""))
    return {
        "score": float(student.total),
        "execution_time": int(round(sum(m.seconds for m in student.modules.values()))),
        "output": "\n".join(summary),
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_outputs(out: Path, students: list[StudentResult], expected: dict[str, dict[str, Fraction]],
                  hidden_visibility: str = "after_due_date") -> list[Path]:
    """Write every output file into `out` (created); the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)

    write(out / "grades.csv", grades_csv(students))
    write(out / "grades_long.csv", grades_long_csv(students, expected))
    for student in students:
        write(out / "feedback" / f"{student.name}.md", feedback_markdown(student))
        write(out / "results" / f"{student.name}.json",
              json.dumps(gradescope_results(student, hidden_visibility), indent=2, ensure_ascii=False) + "\n")
    return written
