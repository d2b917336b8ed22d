"""What `tito grade` writes: the grade book, each student's feedback, and Gradescope's results.

In `--out` (default `grades/`):

* `grades.csv`: one row per student, one column per module and the total; the row
  `(max points)` first. `grades_long.csv`: one row per (student, module, graded case) with its
  points, for spreadsheets. Both hold only points and outcomes, so the same submissions
  give byte-identical files.
* `feedback/<student>.md`: per module the score and why: each failed case with what the grader
  found (and the catalogued mistake its values match), or the reason the module scored 0.
  Written only from what the grader computed (`tito.grading.compare`); byte-identical across runs.
* `results/<student>.json`: Gradescope's results format (`score`, `output`, and `tests` with
  `name`, `score`, `max_score`, `output`, `visibility`). Every entry that carries points is a
  graded case with `hidden_visibility` (grading.toml; default `after_due_date`), and so is the
  whole result (`visibility`); what is visible before (one entry per module that says which
  notebook was graded or why it scored 0 as a whole, and the top-level `output`) holds no
  number that depends on a case's outcome. `execution_time` is the one field that changes
  from run to run (seconds spent, for Gradescope).
"""
from __future__ import annotations

import csv
import io
import json
from fractions import Fraction
from pathlib import Path

from .grade import ModuleResult, StudentResult
from .compare import CaseResult

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


def grades_long_csv(students: list[StudentResult], points: dict[str, dict[str, Fraction]]) -> str:
    """Student x module x case x points; a module that scored 0 as a whole lists its cases as not run, with why."""
    rows = [["student", "module", "case", "outcome", "points", "max_points", "reason"]]
    for student in students:
        for key, module in student.modules.items():
            if module.cases:
                for case in module.cases:
                    rows.append([student.name, key, case.name, "passed" if case.passed else "failed",
                                 fmt(case.points), fmt(case.max_points), ""])
                continue
            for name, max_points in points.get(key, {}).items():
                rows.append([student.name, key, name, "not run", "0", fmt(max_points), module.reason])
    return _csv_text(rows)


def _fence(text: str) -> str:
    """A code block that the text itself cannot close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _failures(module: ModuleResult) -> list[CaseResult]:
    return [c for c in module.cases if not c.passed]


def module_summary(module: ModuleResult) -> str:
    """One line: "3 of 11 cases failed", or the reason it scored 0 as a whole."""
    if module.reason:
        return module.reason
    if not module.cases:
        return "no graded cases"
    failed = len(_failures(module))
    return f"all {len(module.cases)} cases passed" if not failed else f"{failed} of {len(module.cases)} cases failed"


def _case_line(case: CaseResult) -> str:
    return f"case `{case.name}` ({case.what}; {fmt(case.max_points)} point(s)): {case.message}"


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
        lines.append(f"{module_summary(module)} (run `tito test {key.split('_', 1)[0]}` to see the lesson's "
                     "own tests). What differs from the reference in each:")
        lines += [""] + [f"- {_case_line(case)}" for case in failures[:FAILURES_SHOWN]]
        if len(failures) > FAILURES_SHOWN:
            lines += ["", f"... and {len(failures) - FAILURES_SHOWN} more failed cases."]
    if student.ignored:
        shown = ", ".join(f"`{p}`" for p in student.ignored[:IGNORED_SHOWN])
        more = f" and {len(student.ignored) - IGNORED_SHOWN} more" if len(student.ignored) > IGNORED_SHOWN else ""
        lines += ["", "## Not used from your submission", "",
                  "Only the lesson notebooks (`modules/NN_name/name_dev.py`) are graded, with the course's own "
                  f"package and graded cases. These files were ignored: {shown}{more}."]
    return "\n".join(lines) + "\n"


def _module_entries(key: str, module: ModuleResult, points: dict[str, Fraction],
                    hidden_visibility: str) -> list[dict]:
    """Gradescope entries for one module: a visible one without points (which notebook was graded, or why the
    module scored 0 as a whole: facts of the submission, not of any case's outcome), then one per graded case."""
    if module.reason:
        said = module.reason
    else:
        said = f"Graded `{module.notebook}`" + (f" ({module.note})" if module.note else "") + "."
    entries = [{"name": f"{key}: your notebook", "score": 0.0, "max_score": 0.0, "output": said,
                "visibility": "visible"}]
    results = {case.name: case for case in module.cases}
    for name, max_points in points.items():
        case = results.get(name)
        if case is None:
            output = f"not run: {module.reason}" if module.reason else "not run"
        else:
            output = f"{case.what}: " + ("passed." if case.passed else case.message)
        entries.append({"name": f"{key}: case {name}", "score": float(case.points if case else 0),
                        "max_score": float(max_points), "output": output, "visibility": hidden_visibility})
    return entries


def gradescope_results(student: StudentResult, points: dict[str, dict[str, Fraction]],
                       hidden_visibility: str = "after_due_date") -> dict:
    """Gradescope's results.json for one student (the fields its autograder harness reads).

    Before `hidden_visibility` lets a student see the cases, nothing visible says how a case went:
    the top-level `output` names the modules, the graded notebooks and only reasons that come from
    the submission itself ("3 stubs left", a broken limit)."""
    tests = [e for key, module in student.modules.items()
             for e in _module_entries(key, module, points.get(key, {}), hidden_visibility)]
    shown = hidden_visibility == "visible"
    summary = [f"Total: {fmt(student.total)} / {fmt(student.max_total)}" if shown else
               f"The graded cases' results and scores are shown {hidden_visibility.replace('_', ' ')}."]
    for key, module in student.modules.items():
        if shown:
            summary.append(f"{key}: {fmt(module.score)} / {fmt(module.max_score)} ({module_summary(module)})")
        else:
            summary.append(f"{key}: " + (f"scored 0: {module.reason}" if module.reason else
                                         f"graded `{module.notebook}`"))
    if student.error:
        summary.append(f"The submission could not be read: {student.error}")
    if student.ignored:
        summary.append(f"Ignored {len(student.ignored)} file(s) that are not lesson notebooks "
                       f"(the course's own package and cases are used): {', '.join(student.ignored[:IGNORED_SHOWN])}"
                       + (" ..." if len(student.ignored) > IGNORED_SHOWN else ""))
    results = {
        "score": float(student.total),
        "execution_time": int(round(sum(m.seconds for m in student.modules.values()))),
        "output": "\n".join(summary),
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    if not shown:
        results["visibility"] = hidden_visibility  # the whole result, its total score included
    return results


def write_outputs(out: Path, students: list[StudentResult], points: dict[str, dict[str, Fraction]],
                  hidden_visibility: str = "after_due_date") -> list[Path]:
    """Write every output file into `out` (created); the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)

    write(out / "grades.csv", grades_csv(students))
    write(out / "grades_long.csv", grades_long_csv(students, points))
    for student in students:
        write(out / "feedback" / f"{student.name}.md", feedback_markdown(student))
        write(out / "results" / f"{student.name}.json",
              json.dumps(gradescope_results(student, points, hidden_visibility), indent=2, ensure_ascii=False) + "\n")
    return written
