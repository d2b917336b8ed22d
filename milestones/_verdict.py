"""The one way a milestone ends: its metric against its threshold, and the exit status."""
from __future__ import annotations

import time
from typing import NamedTuple

from rich.console import Console


def verdict(console: Console, label: str, value: float, threshold: float, started: float) -> int:
    """Print `label value% vs threshold%: PASS/FAIL` and return the exit status (0 = pass)."""
    passed = value >= threshold
    console.print(f"done in {time.perf_counter() - started:.1f}s")
    console.print(f"{label} {100 * value:.2f}% vs threshold {100 * threshold:.2f}%: "
                  + ("[bold green]PASS[/]" if passed else "[bold red]FAIL[/]"))
    return 0 if passed else 1


def verdict_at_most(console: Console, label: str, value: float, threshold: float, started: float) -> int:
    """For a metric where lower is better (a loss): `label value vs threshold at most t: PASS/FAIL`."""
    passed = value <= threshold
    console.print(f"done in {time.perf_counter() - started:.1f}s")
    console.print(f"{label} {value:.4f} vs threshold at most {threshold:.4f}: "
                  + ("[bold green]PASS[/]" if passed else "[bold red]FAIL[/]"))
    return 0 if passed else 1


class Check(NamedTuple):
    """One criterion of a milestone that ends with several: `value` against `threshold`.

    relation: "at most", "at least" or "above" (strictly). fmt formats both numbers. A check with
    judged False is printed with its value but decides nothing (a time in --fast mode, say)."""
    label: str
    value: float
    relation: str
    threshold: float
    fmt: str = ".4f"
    judged: bool = True


RELATIONS = {"at most": lambda v, t: v <= t, "at least": lambda v, t: v >= t, "above": lambda v, t: v > t}


def verdict_checks(console: Console, checks: list[Check], started: float) -> int:
    """Print `label value vs threshold RELATION t: PASS/FAIL` (or `printed, not judged`) for each check
    and a summary line; return 0 when every judged check passes, else 1."""
    console.print(f"done in {time.perf_counter() - started:.1f}s")
    failed = judged = 0
    for check in checks:
        if check.relation not in RELATIONS:
            raise ValueError(f"verdict_checks: relation must be one of {sorted(RELATIONS)}, got {check.relation!r}")
        passed = RELATIONS[check.relation](check.value, check.threshold)
        judged += check.judged
        failed += check.judged and not passed
        result = ("[bold green]PASS[/]" if passed else "[bold red]FAIL[/]") if check.judged else "printed, not judged"
        console.print(f"{check.label} {check.value:{check.fmt}} vs threshold {check.relation} "
                      f"{check.threshold:{check.fmt}}: {result}")
    console.print(f"{judged - failed} of {judged} judged checks passed: "
                  + ("[bold green]PASS[/]" if not failed else "[bold red]FAIL[/]"))
    return 0 if not failed else 1
