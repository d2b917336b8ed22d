"""The judge at work (tito/grading/judge.py): real submission folders of a tiny GPT, each run in the sandbox.

Every cheat here is a few lines of submission.py; the judge must catch each one with its reason,
and never take a number a submission reports.
"""
import json
import textwrap
import time
import shutil

import numpy as np
import pytest

from olympics_entries import VOCAB, shipped_bytes, tiny_gpt, tiny_task, write_entry
from tito.course import CourseError
from tito.grading.judge import SubmissionError, judge, read_submission, write_leaderboard


def _by_name(board, event):
    return {row.name: row for row in board.boards[event]}


_JUDGED = {}


@pytest.fixture(scope="module")
def honesty(tmp_path_factory):
    """judge() -> (board, root): one judge run over the honest baseline and five cheats (smallest and
    generation), made by the first test that calls it (inside the test: a failure there is a failed
    test, not a setup error) and shared by the others."""
    def run():
        if not _JUDGED:
            _JUDGED["run"] = _judge_the_cheats(tmp_path_factory.mktemp("entries"))
        return _JUDGED["run"]
    return run


def _judge_the_cheats(root):
    base = write_entry(root / "baseline")
    claims = {"checkpoint_bytes": 1, "tokens_per_s": 1e9, "val_loss": 0.0}
    boastful = write_entry(root / "boastful", model=tiny_gpt(seed=2), body=f'''
        import json
        RESULTS = {claims!r}
        print(json.dumps(RESULTS))
        with open("results.json", "w") as handle:
            json.dump(RESULTS, handle)
    ''')
    sharp = tiny_gpt()
    sharp.token_embedding.weight.data[...] *= 300  # confident and wrong: a loss far above the bar
    careless = write_entry(root / "careless", model=sharp)
    snoop = write_entry(root / "snoop", body=f'''
        SECRET = open({str(root / "baseline" / "model.npz")!r}, "rb").read()
    ''')
    swapper = write_entry(root / "swapper", body='''
        import numpy as np
        from tinytorch.core.training import load_checkpoint
        _real = build_model
        def build_model():
            model = _real()
            load_checkpoint("teacher.npz", model)
            return model
    ''')
    shutil.copyfile(base / "model.npz", swapper / "teacher.npz")
    entries = [read_submission(p) for p in (base, boastful, careless, snoop, swapper)]
    board = judge(entries, tiny_task(), ["smallest", "generation"], baseline=entries[0])
    return board, root


def test_a_self_reported_number_is_ignored(honesty):
    board, root = honesty()
    row = _by_name(board, "smallest")["boastful"]
    assert row.qualified, f"an honest model that also prints claims is judged like any other, got {row.reason!r}"
    assert row.score == shipped_bytes(root / "boastful") > (root / "boastful" / "model.npz").stat().st_size > 1, \
        f"the judge measures every byte shipped itself (it claimed 1), got {row.score}"
    assert row.extra["val_loss"] > 1.0, f"the judge computes the loss itself (it claimed 0.0), got {row.extra['val_loss']}"
    rate = _by_name(board, "generation")["boastful"]
    assert rate.qualified and 0 < rate.score < 1e6, f"tokens/s timed by the judge (it claimed 1e9), got {rate.score}"


def test_missing_the_quality_bar_disqualifies_with_the_reason(honesty):
    board, _ = honesty()
    for event in ("smallest", "generation"):
        row = _by_name(board, event)["careless"]
        assert not row.qualified and row.rank is None, f"{event}: a loss far above the bar must be disqualified"
        assert row.reason.startswith("validation loss") and "above the quality bar" in row.reason, \
            f"{event}: the reason must say the loss and the bar, got {row.reason!r}"


def test_reading_outside_the_folder_disqualifies(honesty):
    board, root = honesty()
    row = _by_name(board, "smallest")["snoop"]
    assert not row.qualified and row.reason.startswith("reads outside its folder: "), \
        f"opening another entry's checkpoint must disqualify: reads outside its folder, got {row.reason!r}"
    assert str(root / "baseline" / "model.npz") in row.reason, f"the reason names the path, got {row.reason!r}"


def test_loading_other_weights_disqualifies(honesty):
    board, _ = honesty()
    row = _by_name(board, "generation")["swapper"]
    assert not row.qualified, "weights loaded from a file that is not the declared CHECKPOINT must disqualify"
    assert row.reason == "loads weights other than its declared checkpoint: <its folder>/teacher.npz", \
        f"the reason names the file it loaded, got {row.reason!r}"


def test_the_honest_baseline_wins_and_the_files_are_written(honesty, tmp_path):
    board, _ = honesty()
    ranks = [(r.name, r.rank) for r in board.boards["smallest"] if r.qualified]
    assert ranks == [("baseline", 1), ("boastful", 2)], \
        f"the same checkpoint's bytes, and the boastful entry's code that prints its claims counted too: got {ranks}"
    written = write_leaderboard(board, tmp_path)
    names = {p.name for p in written}
    assert {"leaderboard.md", "leaderboard.csv", "pareto.png"} <= names, f"got {names}"
    text = (tmp_path / "leaderboard.md").read_text()
    assert "reads outside its folder" in text and "above the quality bar" in text, "the reasons are on the leaderboard"


def test_renaming_an_entry_changes_nothing(tmp_path):
    small = tiny_gpt()
    small_entry = write_entry(tmp_path / "a" / "plain", model=small)
    other = write_entry(tmp_path / "a" / "other", model=tiny_gpt(seed=3))
    first = judge([read_submission(small_entry), read_submission(other)], tiny_task(), ["smallest"],
                  baseline_loss=10.0)
    renamed = tmp_path / "b" / "int1-world-record"
    shutil.copytree(small_entry, renamed)
    second = judge([read_submission(renamed), read_submission(other)], tiny_task(), ["smallest"], baseline_loss=10.0)
    before = [(r.key, r.rank, r.score, r.extra["val_loss"]) for r in first.boards["smallest"]]
    after = [(r.key, r.rank, r.score, r.extra["val_loss"]) for r in second.boards["smallest"]]
    assert before == after, f"the same folder under another name must be judged identically:\n{before}\n{after}"


def test_a_submission_that_hangs_is_stopped_and_disqualified(tmp_path):
    base = write_entry(tmp_path / "base")
    stuck = write_entry(tmp_path / "stuck", body='''
        import time

        def build_model():
            while True:
                time.sleep(0.1)
    ''')
    tick = time.perf_counter()
    board = judge([read_submission(base), read_submission(stuck)], tiny_task(answer_timeout_s=2.0), ["smallest"],
                  baseline_loss=10.0)
    row = _by_name(board, "smallest")["stuck"]
    assert not row.qualified and "did not answer within 2 s" in row.reason, f"got {row.reason!r}"
    assert time.perf_counter() - tick < 30, "the hung runner is killed, not waited for until the wall-clock limit"


def test_bad_input_says_what_to_do(tmp_path):
    with pytest.raises(SubmissionError, match="holds no submission.py"):
        read_submission(tmp_path)
    (tmp_path / "submission.py").write_text("CHECKPOINT = 'model.npz'\n")
    with pytest.raises(SubmissionError, match=r"defines no build_model\(\)"):
        read_submission(tmp_path)
    (tmp_path / "submission.py").write_text("def build_model():\n    pass\n")
    with pytest.raises(SubmissionError, match="declares no checkpoint"):
        read_submission(tmp_path)
    (tmp_path / "submission.py").write_text("CHECKPOINT = 'model.npz'\ndef build_model():\n    pass\n")
    with pytest.raises(SubmissionError, match="has no model.npz"):
        read_submission(tmp_path)
    with pytest.raises(SubmissionError, match="train"):
        read_submission(tmp_path, need_train=True)
    (tmp_path / "submission.py").write_text("CHECKPOINT = '../x.npz'\ndef build_model():\n    pass\n")
    with pytest.raises(SubmissionError, match="inside the submission folder"):
        read_submission(tmp_path)
    with pytest.raises(CourseError, match="Unknown event fastest.*smallest, generation, speedrun"):
        judge([], tiny_task(), ["fastest"], baseline_loss=1.0)


def test_speedrun_times_train_and_judges_the_loss_itself(tmp_path):
    train_body = '''
        from tinytorch.perf.olympics import speedrun_data, train_recipe

        def train(time_budget_s):
            ids, _ = speedrun_data()
            return train_recipe(GPT(16, 16, 1, 2, 16, seed=0), ids, time_budget_s, iters=ITERS, batch=8, warmup=2, lr=3e-2)
    '''
    base = write_entry(tmp_path / "recipe", body="ITERS = 40\n" + textwrap.dedent(train_body))
    short = write_entry(tmp_path / "short", body="ITERS = 3\n" + textwrap.dedent(train_body))
    slow = write_entry(tmp_path / "slow", body='''
        import time

        def train(time_budget_s):
            time.sleep(time_budget_s + 0.5)
            return build_model()
    ''')
    entries = [read_submission(p, need_train=True) for p in (base, short, slow)]
    # With a serving event too: the untrained checkpoint (loss ln 16 = 2.77) is judged there, the model
    # train() returns in the speedrun; neither loss may stand in for the other.
    board = judge(entries, tiny_task(speedrun_target=2.0, speedrun_budget_s=3.0), ["smallest", "speedrun"],
                  baseline=entries[0])
    rows = _by_name(board, "speedrun")
    checkpoint_loss = _by_name(board, "smallest")["recipe"].extra["val_loss"]
    assert checkpoint_loss > 2.5, f"the smallest event judges the untrained checkpoint, got loss {checkpoint_loss}"
    assert rows["recipe"].qualified and rows["recipe"].rank == 1, \
        f"40 steps on the alphabet text reach loss 2.0 (ln 16 = 2.77 untrained): got {rows['recipe'].reason!r}"
    assert 0 < rows["recipe"].score < 3 and rows["recipe"].extra["ratio_to_baseline"] == 1.0, \
        f"the time is the judge's wall clock around train(), got {rows['recipe'].score}"
    assert rows["recipe"].extra["val_loss"] <= 2.0, \
        f"the speedrun judges the model train() returned, not the checkpoint: got {rows['recipe'].extra['val_loss']}"
    assert not rows["short"].qualified and "did not reach the target 2.0" in rows["short"].reason, \
        f"2 steps cannot reach the target: expected the reason, got {rows['short'].reason!r}"
    assert not rows["slow"].qualified and "past its budget" in rows["slow"].reason, \
        f"train() past its budget is disqualified, got {rows['slow'].reason!r}"
    written = (tmp_path / "board").joinpath("leaderboard.md")
    write_leaderboard(board, tmp_path / "board")
    speedrun_part = written.read_text(encoding="utf-8").split("### speedrun")[1]
    assert "Target: validation loss <= 2.0 from scratch" in speedrun_part and "Quality bar" not in speedrun_part, \
        f"the speedrun's bar is its target loss, not the baseline's loss + 0.05:\n{speedrun_part}"
    assert "Budget 3 s per entry on 2 threads. Speedrun baseline time:" in speedrun_part, speedrun_part
    assert "| recipe |" in speedrun_part and "one reading" in speedrun_part and "exact" not in speedrun_part, \
        f"one timed run is one reading, not an exact number:\n{speedrun_part}"


def test_a_speedrun_entry_may_train_its_batch_in_parts_on_threads(tmp_path):
    # The fused reference entry trains with module 18's ThreadedDataParallel: worker threads, threadpoolctl
    # (it looks the BLAS libraries up in the process) and a thread pool, all inside the sandbox.
    entry = write_entry(tmp_path / "parts", body='''
        import threading
        from tinytorch.perf.acceleration import ThreadedDataParallel
        from tinytorch.perf.olympics import speedrun_data, train_recipe

        class Counted(ThreadedDataParallel):
            def forward_backward(self, ids, targets):
                assert self.threads == 2, f"the speedrun's 2 threads give 2 parts, got {self.threads}"
                return super().forward_backward(ids, targets)

        def train(time_budget_s):
            ids, _ = speedrun_data()
            return train_recipe(build_model(), ids, time_budget_s, iters=40, batch=8, warmup=2, lr=3e-2,
                                parallel_class=Counted)
    ''')
    entries = [read_submission(entry, need_train=True)]
    board = judge(entries, tiny_task(speedrun_target=2.0, speedrun_budget_s=3.0), ["speedrun"], baseline=entries[0])
    row = _by_name(board, "speedrun")["parts"]
    assert row.qualified and row.extra["val_loss"] <= 2.0, \
        f"training in 2 parts on 2 threads in the sandbox must reach the target: got {row.reason!r}"


def test_the_reference_techniques_rank_the_same_in_repeated_runs(tmp_path):
    from tinytorch.perf.quantization import quantize_model

    model = tiny_gpt()
    folders = [write_entry(tmp_path / "fp32", model=model)]
    for bits in (8, 4):
        folders.append(write_entry(tmp_path / f"int{bits}", model=quantize_model(model, mode="weight_only", bits=bits),
                                   imports="from tinytorch.perf.quantization import quantize_model",
                                   build=f"quantize_model(GPT(16, 16, 1, 2, 16, seed=0), mode='weight_only', bits={bits})"))
    entries = [read_submission(f) for f in folders]
    runs = [judge(entries, tiny_task(), ["smallest", "generation"], baseline=entries[0]) for _ in range(2)]
    ranks = [[(r.name, r.rank) for r in board.boards["smallest"]] for board in runs]
    assert ranks[0] == ranks[1], f"smallest: exact bytes must rank the same in every run: {ranks}"
    # Speeds on a tiny model, 3 repeats, on a machine running the test suite: two entries may share a rank in
    # one run and not in the other, but one never beats the other measurably in one run and loses in the next
    # (the milestone checks identical ranks on the Shakespeare GPT with 7 repeats).
    first, second = ({r.name: r.rank for r in board.boards["generation"]} for board in runs)
    reversed_pairs = [(a, b) for a in first for b in first
                      if first[a] < first[b] and second[a] > second[b]]
    assert not reversed_pairs, f"generation: measurably ahead in one run and behind in the next: {reversed_pairs}"
    assert first["fp32"] == second["fp32"] == 1, \
        f"fp32 (no dequantization per call) is the fastest in both runs, got ranks {first['fp32']} and {second['fp32']}"
    smallest = [r.name for r in runs[0].boards["smallest"]]
    assert smallest == ["int4", "int8", "fp32"], f"fewer bits, fewer bytes: expected int4, int8, fp32, got {smallest}"


def test_replacing_the_checkpoint_before_the_load_changes_nothing(tmp_path):
    base = write_entry(tmp_path / "base")
    tiny = write_entry(tmp_path / "shrinker", body='''
        import numpy as np
        from tinytorch.core.training import save_checkpoint
        # at import, before the judge loads CHECKPOINT: overwrite it with other weights
        save_checkpoint(CHECKPOINT, GPT(16, 16, 1, 2, 16, seed=5))
    ''')
    board = judge([read_submission(base), read_submission(tiny)], tiny_task(), ["smallest"], baseline_loss=10.0)
    rows = _by_name(board, "smallest")
    assert rows["shrinker"].score == shipped_bytes(tiny), "bytes measured on the judge's copies, before it ran"
    assert rows["shrinker"].extra["val_loss"] == rows["base"].extra["val_loss"], \
        "the model judged is the declared checkpoint as submitted (the same weights as base), not the file rewritten"


def test_the_cli_answers_bad_input_with_what_to_do(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from tito.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # tito finds the course from its folder (tito grade runs elsewhere)

    assert main(["olympics", "judge", str(tmp_path), "--event", "fastest"]) == 1
    assert "Unknown event fastest: choose from smallest, generation, speedrun" in capsys.readouterr().out
    assert main(["olympics", "judge", str(tmp_path)]) == 1
    assert "holds no submission.py: write one with build_model()" in capsys.readouterr().out
