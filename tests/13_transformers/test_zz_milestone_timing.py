"""benchmarks/gpt.py --milestone reads each run's loss and training-loop time from what the run printed:
the lines the shakespeare milestone and the PyTorch recipe really print."""
import math
import sys
from pathlib import Path

import numpy as np

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


def test_rounds_alternate_the_order_and_report_medians(tmp_path):
    # each command appends its name and sleeps for the time its round gives it: a (0.2, 0.6, 0.3) s, b (0.1 s)
    log = tmp_path / "order"
    script = ("import sys, time; from pathlib import Path; log = Path(sys.argv[1]); name = sys.argv[2]; "
              "done = log.read_text().count(name) if log.exists() else 0; "
              "log.open('a').write(name); s = [float(x) for x in sys.argv[3].split(',')][done]; time.sleep(s); "
              "print(f'training loop: {s} s for 1 iterations'); print('validation loss 2.5')")
    commands = {name: [sys.executable, "-c", script, str(log), name, times]
                for name, times in (("a", "0.2,0.6,0.3"), ("b", "0.1,0.1,0.1"))}
    rows = whole_milestone(threads=1, commands=commands, rounds=3)
    assert log.read_text() == "abbaab", f"rounds in order, reversed every other round: {log.read_text()}"
    assert [r["loop_seconds"] for r in rows["a"]["readings"]] == [0.2, 0.6, 0.3], rows["a"]
    assert rows["a"]["loop_seconds"] == 0.3 and rows["b"]["loop_seconds"] == 0.1, "the median of the rounds"


def test_several_rounds_give_the_median_of_each_rounds_ratio():
    from gpt import milestone_table

    def row(seconds, loops, loss):
        return {"seconds": float(np.median(seconds)), "loop_seconds": float(np.median(loops)), "loss": loss,
                "readings": [{"seconds": s, "loop_seconds": t} for s, t in zip(seconds, loops)]}

    ours, theirs = row([120.0, 100.0, 130.0], [110.0, 90.0, 120.0], 1.9), row([100.0, 90.0, 80.0], [90.0, 90.0, 75.0], 1.89)
    lines = milestone_table({"tinytorch (fused)": ours, "torch": theirs})
    assert "| tinytorch (fused) | 120 s (120, 100, 130) | 110 s (110, 90, 120) | 1.9000 |" in lines, lines
    # wall time per round: 1.20, 1.11, 1.625 -> median 1.20 (the medians' ratio, 120 / 90 = 1.33, mixes rounds)
    assert "Ratio to torch's wall time: tinytorch (fused) 1.20× (rounds 1.11–1.62×)." in lines, lines
    # training loop per round: 1.22, 1.00, 1.60 -> median 1.22
    assert "Ratio to torch's training loop: tinytorch (fused) 1.22× (rounds 1.00–1.60×)." in lines, lines


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
