"""benchmarks/gpt.py --milestone reads each run's loss and training-loop time from what the run printed:
the lines the shakespeare milestone and the PyTorch recipe really print."""
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpt import run_output_facts, whole_milestone  # noqa: E402  (benchmarks/gpt.py)


def test_the_printed_facts_of_a_run_are_read_back():
    milestone_like = ("iter  250: training loss 2.40, validation loss 2.3500 (10 batches), lr 1e-3, 46 ms/iter\n"
                      "training loop: 91.4 s for 2000 iterations (the validation estimates ... not counted)\n"
                      "validation loss 1.8994 vs threshold at most 1.9500: PASS\n")
    assert run_output_facts(milestone_like) == {"loss": 1.8994, "loop_seconds": 91.4}, \
        "the last validation loss printed and the training loop's seconds"
    facts = run_output_facts("crashed before any line\n")
    assert math.isnan(facts["loss"]) and math.isnan(facts["loop_seconds"]), \
        f"a run that printed nothing gives NaN, not a number: {facts}"


def test_whole_milestone_times_each_command_and_reads_its_loop():
    script = "import time; time.sleep(0.3); print('training loop: 0.2 s for 5 iterations'); print('validation loss 2.5')"
    rows = whole_milestone(threads=1, commands={"a": [sys.executable, "-c", script]})
    row = rows["a"]
    assert row["rc"] == 0 and row["loss"] == 2.5 and row["loop_seconds"] == 0.2, row
    assert row["seconds"] >= 0.3, f"the wall time is measured around the whole process: {row['seconds']}"


def test_the_milestone_table_gives_both_ratios_from_the_measured_times():
    from gpt import milestone_table

    rows = {"tinytorch (fused)": {"seconds": 113.0, "loop_seconds": 104.0, "loss": 1.8994},
            "torch": {"seconds": 92.0, "loop_seconds": 86.0, "loss": 1.8910}}
    lines = milestone_table(rows)
    assert "| tinytorch (fused) | 113 s | 104 s | 1.8994 |" in lines, lines
    assert "Ratio to torch's wall time: tinytorch (fused) 1.23×." in lines, f"113 / 92 = 1.23: {lines}"
    assert "Ratio to torch's training loop: tinytorch (fused) 1.21×." in lines, f"104 / 86 = 1.21: {lines}"
    alone = milestone_table({"tinytorch": rows["tinytorch (fused)"]})
    assert not any(line.startswith("Ratio") for line in alone), f"no ratio without a PyTorch run: {alone}"
