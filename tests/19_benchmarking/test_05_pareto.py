"""Module 19, section 7: pareto_front, pareto_table and plot_pareto."""
import numpy as np
import pytest

from tinytorch.perf.benchmarking import pareto_front, pareto_table, plot_pareto

ROWS = [{"name": "fp32", "loss": 1.50, "ms": 10.0, "bytes": 400},
        {"name": "int8", "loss": 1.51, "ms": 9.0, "bytes": 100},
        {"name": "slow-int8", "loss": 1.51, "ms": 12.0, "bytes": 100},
        {"name": "tiny", "loss": 2.50, "ms": 2.0, "bytes": 20},
        {"name": "tiny-twin", "loss": 2.50, "ms": 2.0, "bytes": 20}]


def names(rows):
    return [r["name"] for r in rows]


def test_front_on_one_cost():
    got = names(pareto_front(ROWS, "loss", ["ms"]))
    assert got == ["fp32", "int8", "tiny", "tiny-twin"], (
        f"got {got}: 'slow-int8' is dominated by 'int8' (same loss, slower); two identical rows do not dominate "
        "each other (neither is STRICTLY better anywhere), so both stay")


def test_front_on_two_costs():
    rows = ROWS + [{"name": "fat", "loss": 1.50, "ms": 10.0, "bytes": 800}]
    got = names(pareto_front(rows, "loss", ["ms", "bytes"]))
    assert "fat" not in got and "fp32" in got, f"'fat' loses to 'fp32' on bytes, ties elsewhere: got {got}"


def test_higher_quality_is_better():
    rows = [{"name": "a", "acc": 0.95, "ms": 5.0}, {"name": "b", "acc": 0.90, "ms": 5.0},
            {"name": "c", "acc": 0.80, "ms": 1.0}]
    assert names(pareto_front(rows, "acc", ["ms"], higher_quality_is_better=True)) == ["a", "c"], \
        "with accuracy, HIGHER is better: 'b' is dominated by 'a' (same time, lower accuracy)"
    assert names(pareto_front(rows, "acc", ["ms"])) == ["c"], "as a loss (lower is better) only 'c' survives"


def test_single_and_empty():
    assert pareto_front([], "loss", ["ms"]) == []
    assert names(pareto_front(ROWS[:1], "loss", ["ms"])) == ["fp32"]
    with pytest.raises(ValueError, match="ms"):
        pareto_front([{"name": "x", "loss": 1.0}], "loss", ["ms"])


def test_table_marks_the_front():
    table = pareto_table(ROWS, "loss", ["ms", "bytes"])
    lines = table.splitlines()
    assert lines[0] == "| name | loss | ms | bytes | Pareto |", f"header, got {lines[0]!r}"
    assert len(lines) == 2 + len(ROWS), f"a header, a rule and one line per row: {2 + len(ROWS)} lines, got {len(lines)}"
    assert "| slow-int8 | 1.51 | 12 | 100 | dominated |" in lines, (
        f"int8 (the same loss and bytes, 9 ms) dominates slow-int8 (12 ms):\n{table}")
    assert "| int8 | 1.51 | 9 | 100 | ✓ |" in lines, f"int8 is on the front:\n{table}"


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "pareto.png"
    plot_pareto(ROWS, "loss", "ms", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
