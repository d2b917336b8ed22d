"""The one way a milestone ends: its metric against its threshold, and the exit status."""
from __future__ import annotations

import time

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


def verdict_checks(console: Console, checks: list[tuple], started: float) -> int:
    """Several metrics against their thresholds, one line each, then the exit status (0 = every judged
    check passed). A check is (label, value, threshold, relation, judged): relation "at least",
    "at most" or "above"; a check with judged False is printed with its value but decides nothing
    (e.g. a time in --fast mode)."""
    console.print(f"done in {time.perf_counter() - started:.1f}s")
    failed = 0
    for label, value, threshold, relation, judged in checks:
        passed = {"at least": value >= threshold, "at most": value <= threshold, "above": value > threshold}[relation]
        result = ("[bold green]PASS[/]" if passed else "[bold red]FAIL[/]") if judged else "printed, not judged"
        console.print(f"{label} {value:.4f} vs threshold {relation} {threshold:.4f}: {result}")
        failed += int(judged and not passed)
    return 0 if failed == 0 else 1
