"""Grading, its sandbox and the Olympics judge: every part of tito that runs code it does not trust.

One module per concern, each with its entry point:

| concern | module | entry point |
|---|---|---|
| `tito grade`: a run, each (student, module) on its own | `grade` | `grade_submissions`, `GradingRun`, `GradeOptions` |
| reading what students handed in (folders, archives) | `submissions` | `collect_submissions` |
| the graded cases' runner, **the only part run inside the sandbox** | `cases` | `python -m tito.grading.cases` |
| the trusted comparison of what a run produced with the reference | `compare` | `read_values`, `compare_case` |
| `grading.toml`: points and limits | `config` | `load_config` |
| grade book, feedback and Gradescope results | `report` | `write_outputs` |
| `--out`: checked, locked, replaced only when complete | `out` | `check_destination`, `write_complete` |
| the Gradescope autograder bundle | `gradescope` | `build_bundle` |
| running one untrusted command under limits | `sandbox` | `run_sandboxed` |
| deleting the scratch folders sandboxed code ran in | `scratch` | `remove_tree` |
| `tito olympics judge` (module 20) | `judge` | `judge`, `read_submission`, `write_leaderboard` |
| the judge's runner, in the sandbox beside a submission | `judge_runner` | `python -S -m tito.grading.judge_runner` |

This file imports nothing, and the entry points are imported from their modules
(`from tito.grading.grade import grade_submissions`): both runners import this package first,
inside the sandbox, and the judge's runner does so from a copy of this file alone, without
`site` (`judge.RUNNER_FILES`). Nothing in the package imports nbdev until a notebook is
exported (`tests/tito/test_grading_package.py`).
"""
