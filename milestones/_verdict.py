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


def verdict_checks(console: Console, checks: list[tuple[str, float, str, float, str]], started: float) -> int:
    """Several criteria, all of which must hold. Each check is (label, value, "at most" | "at least",
    threshold, format), printed as `label value vs threshold at most t: PASS/FAIL` (the format, e.g.
    ".4f", applies to both numbers); returns 0 when every check passes."""
    console.print(f"done in {time.perf_counter() - started:.1f}s")
    failed = 0
    for label, value, relation, threshold, fmt in checks:
        if relation not in ("at most", "at least"):
            raise ValueError(f"verdict_checks: relation must be 'at most' or 'at least', got {relation!r}")
        passed = value <= threshold if relation == "at most" else value >= threshold
        failed += not passed
        console.print(f"{label} {value:{fmt}} vs threshold {relation} {threshold:{fmt}}: "
                      + ("[bold green]PASS[/]" if passed else "[bold red]FAIL[/]"))
    console.print(f"{len(checks) - failed} of {len(checks)} checks passed: "
                  + ("[bold green]PASS[/]" if not failed else "[bold red]FAIL[/]"))
    return 0 if not failed else 1
