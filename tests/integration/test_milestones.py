"""The milestones, end to end: each runs with --fast as a subprocess, exits 0 and prints a passing metric."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MILESTONES = ROOT / "milestones"
RESULT = re.compile(r"accuracy ([0-9.]+)% vs threshold ([0-9.]+)%: (PASS|FAIL)")
LOSS_RESULT = re.compile(r"loss ([0-9.]+) vs threshold at most ([0-9.]+): (PASS|FAIL)")

# name -> the smallest accuracy (in %) its --fast run must report
EXPECTED = {"xor": 100.0, "spirals": 95.0, "digits_mlp": 90.0, "digits_cnn": 97.0, "reversal": 90.0}
# name -> the largest loss its --fast run may report (lower is better)
EXPECTED_LOSS = {"shakespeare": 2.7}

pytestmark = pytest.mark.slow


def run_milestone(name: str, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env or {}),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(MILESTONES / f"{name}.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_every_milestone_file_is_covered_and_documented():
    found = {p.stem for p in MILESTONES.glob("*.py") if not p.name.startswith("_")}
    assert set(EXPECTED) | set(EXPECTED_LOSS) <= found
    for name in [*EXPECTED, *EXPECTED_LOSS]:
        text = (MILESTONES / f"{name}.py").read_text(encoding="utf-8")
        first_line = text.split('"""')[1].strip().splitlines()[0]
        assert len(first_line) > 20, f"{name}.py: the docstring's first line should describe the milestone"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_milestone_passes_in_fast_mode(name):
    result = run_milestone(name, "--fast")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} --fast exited {result.returncode}:\n{output[-3000:]}"
    matches = RESULT.findall(output)
    assert matches, f"{name} printed no 'accuracy ...% vs threshold ...%: PASS' line:\n{output[-3000:]}"
    accuracy, threshold, verdict = matches[-1]
    assert verdict == "PASS"
    assert float(accuracy) >= float(threshold) >= EXPECTED[name]
    assert "epoch" in output  # progress was printed while training


@pytest.mark.parametrize("name", sorted(EXPECTED_LOSS))
def test_loss_milestone_passes_in_fast_mode(name, tmp_path):
    # One BLAS thread: the model's matrices are small, and on a busy machine BLAS threads that
    # wait for each other can make a step ten times slower. About 30 s on an idle machine.
    one_thread = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = run_milestone(name, "--fast", "--out", str(tmp_path), timeout=900, env=one_thread)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} --fast exited {result.returncode}:\n{output[-3000:]}"
    matches = LOSS_RESULT.findall(output)
    assert matches, f"{name} printed no 'loss ... vs threshold at most ...: PASS' line:\n{output[-3000:]}"
    loss, threshold, verdict = matches[-1]
    assert verdict == "PASS" and float(loss) <= float(threshold) <= EXPECTED_LOSS[name]
    assert "iter" in output and "sample" in output  # progress while training, a sample at the end
    assert any(p.suffix == ".png" and p.stat().st_size > 10_000 for p in tmp_path.iterdir()), "heat maps saved"


def test_milestone_rejects_unknown_arguments():
    result = run_milestone("xor", "--no-such-flag")
    assert result.returncode != 0


def test_reversal_saves_its_heat_map_where_asked(tmp_path):
    target = tmp_path / "heads.png"
    result = run_milestone("reversal", "--fast", "--heatmap", str(target))
    assert result.returncode == 0, result.stdout + result.stderr
    assert str(target) in result.stdout, "the milestone must print where it saved the heat map"
    assert target.read_bytes()[:4] == b"\x89PNG"
    weights = re.search(r"per head: ([0-9. ]+)", result.stdout)
    assert weights and max(float(w) for w in weights.group(1).split()) > 0.5, (
        "a trained head should put most of its weight on the anti-diagonal")
