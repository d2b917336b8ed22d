"""Issue 30: the Olympics judged honestly. Each cheat below once won an event without doing the task;
on the test suite's tiny task the judge must now disqualify it (or size it honestly) with a reason that
names the rule, and honest entries keep their ranks. Also the judge's own bad-input answers (issue 31).
"""
import errno
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olympics_entries import (CONTEXT, HIDDEN_WEIGHTS_MODEL, VOCAB, empty_model, shipped_bytes, tiny_gpt,
                              tiny_task, tiny_text, weights_as_text, write_entry)
from tito.course import CourseError
from tito.grading.judge import (SubmissionError, greedy_windows, judge, read_rules, read_submission,
                                shakespeare_task, write_leaderboard)

COURSE = Path(__file__).resolve().parents[2]


def _rows(board, event):
    return {row.name: row for row in board.boards[event]}


# ---- generation: every answer, every token ------------------------------------------------------------------------
def test_greedy_windows_give_each_token_the_context_it_had():
    # 10 ids, a prompt of 2, a context of 4: token i was chosen after ids[max(0, i - 4) : i]
    starts, window, position = greedy_windows(10, 2, 4)
    assert list(starts) == [0, 1, 2, 3, 4, 5], f"one window of 4 per start 0 .. 10 - 4 - 1, got {list(starts)}"
    assert list(window) == [0, 0, 0, 1, 2, 3, 4, 5], f"tokens 2..4 share window 0, later ones start at i - 4: {list(window)}"
    assert list(position) == [1, 2, 3, 3, 3, 3, 3, 3], f"token i is read at row i - 1 - start, got {list(position)}"
    starts, window, position = greedy_windows(5, 2, 8)
    assert list(starts) == [0] and list(window) == [0, 0, 0] and list(position) == [1, 2, 3], \
        "a sequence shorter than the context is one window of all but its last id"


_HONEST_NEW = CONTEXT + 1 - 4  # tiny_task's prompt is 4 ids: greedy up to the end of the first context window
_GENERATION_CHEATS = {
    # every call but the last answered with made-up tokens (1 warm-up + 3 timed calls in tiny_task)
    "last-call-only": '''
        import numpy as np
        CALLS = [0]

        def generate(model, prompt, new_tokens):
            CALLS[0] += 1
            if CALLS[0] < 4:
                return np.concatenate([prompt, np.zeros(new_tokens, dtype=np.int64)])
            return model.generate(prompt, new_tokens, temperature=0.0)
    ''',
    # greedy over the first context window (all the old check looked at), zeros after it
    "greedy-prefix": f'''
        import numpy as np

        def generate(model, prompt, new_tokens):
            head = model.generate(prompt, {_HONEST_NEW}, temperature=0.0).data
            return np.concatenate([head, np.zeros(new_tokens - {_HONEST_NEW}, dtype=np.int64)])
    ''',
    # the right count of ids, the same every call, none computed by the model
    "random-tokens": f'''
        import numpy as np

        def generate(model, prompt, new_tokens):
            return np.concatenate([prompt, np.random.default_rng(0).integers(0, {VOCAB}, new_tokens)])
    ''',
}


def test_generation_cheats_are_disqualified_and_honest_entries_keep_their_ranks(tmp_path):
    folders = [write_entry(tmp_path / "baseline"), write_entry(tmp_path / "honest", model=tiny_gpt(seed=2))]
    folders += [write_entry(tmp_path / name, body=body) for name, body in _GENERATION_CHEATS.items()]
    entries = [read_submission(f) for f in folders]
    board = judge(entries, tiny_task(), ["generation"], baseline=entries[0])
    rows = _rows(board, "generation")
    for name in ("baseline", "honest"):
        assert rows[name].qualified and rows[name].rank is not None and rows[name].score > 0, \
            f"{name} generates honestly: it must be ranked, got {rows[name].reason!r}"
    reason = rows["last-call-only"].reason
    assert reason.startswith("generation: answer 4 of 4 differs from answer 1"), \
        f"an entry that answers only its last call honestly: every answer must be compared, got {reason!r}"
    reason = rows["greedy-prefix"].reason
    assert reason.startswith("generation: new token ") and "not the greedy choice" in reason, \
        f"zeros after the first context window: every token must be checked, got {reason!r}"
    first_bad = int(reason.split("new token ")[1].split()[0])
    assert first_bad > _HONEST_NEW, f"the first {_HONEST_NEW} new tokens are greedy; the check named token {first_bad}"
    reason = rows["random-tokens"].reason
    assert reason.startswith("generation: new token ") and "not the greedy choice" in reason, \
        f"random ids of the right count are not the model's: got {reason!r}"
    assert [r.name for r in board.boards["generation"] if not r.qualified] == sorted(
        ["last-call-only", "greedy-prefix", "random-tokens"], key=lambda n: rows[n].key)


# ---- smallest: every byte shipped ----------------------------------------------------------------------------------
def test_weights_in_the_code_or_in_a_second_file_are_counted(tmp_path):
    base = write_entry(tmp_path / "baseline")
    text = weights_as_text(tiny_gpt())  # the baseline's weights, as base64 text
    in_code = write_entry(tmp_path / "weights-in-code", model=empty_model(), body=f"WEIGHTS = {text!r}\n" +
                          HIDDEN_WEIGHTS_MODEL)
    second = write_entry(tmp_path / "weights-in-a-txt", model=empty_model(),
                         body="WEIGHTS = open('weights.txt').read()\n" + HIDDEN_WEIGHTS_MODEL)
    (second / "weights.txt").write_text(text, encoding="ascii")
    entries = [read_submission(f) for f in (base, in_code, second)]
    board = judge(entries, tiny_task(), ["smallest"], baseline=entries[0])
    rows = _rows(board, "smallest")
    baseline_loss = rows["baseline"].extra["val_loss"]
    for name, folder in (("weights-in-code", in_code), ("weights-in-a-txt", second)):
        row = rows[name]
        assert row.extra["val_loss"] == baseline_loss, f"{name} answers with the baseline's weights: the same loss"
        assert row.extra["parts"]["checkpoint"] < 1000, f"{name}'s declared checkpoint holds no weights"
        assert row.score == shipped_bytes(folder), \
            f"{name}: the smallest event counts every byte shipped ({shipped_bytes(folder):,}), got {row.score:,.0f}"
        assert row.rank > rows["baseline"].rank, f"{name} ships more bytes than the baseline: it must rank behind it"
    assert rows["baseline"].rank == 1 and rows["baseline"].score == shipped_bytes(base)
    markdown = write_leaderboard(board, tmp_path / "board") and (tmp_path / "board" / "leaderboard.md").read_text()
    line = next(l for l in markdown.splitlines() if "| weights-in-code |" in l)
    assert "checkpoint " in line and "other files " in line, f"the table says what the bytes are: {line}"


# ---- held-out data: what a student can know ------------------------------------------------------------------------
def _memorising_entry(folder: Path, task) -> Path:
    """A model that loses badly on its own, with a table of the answers to the task's held-out windows, looked
    up by the hash of each window the judge asks about."""
    from tinytorch.models.transformer import GPT
    from tinytorch.perf.olympics import heldout_windows

    inputs, targets = heldout_windows(task.val_tokens, task.context, task.eval_windows, seed=task.seed)
    answers = {hashlib.sha256(x.astype(np.int64).tobytes()).hexdigest(): [int(t) for t in y]
               for x, y in zip(inputs, targets)}

    class Memo(GPT):  # the class name the checkpoint records
        pass

    model = Memo(VOCAB, 16, 1, 2, CONTEXT, seed=1)
    model.token_embedding.weight.data[...] *= 300  # confident and wrong without its table
    return write_entry(folder, model=model, body=f'''
        import hashlib
        import numpy as np
        from tinytorch.core.tensor import Tensor

        ANSWERS = {answers!r}


        class Memo(GPT):
            def forward(self, idx, targets=None, cache=None):
                logits, loss = super().forward(idx, targets, cache)
                out = np.array(logits.data)
                for row, window in enumerate(np.asarray(idx.data)):
                    known = ANSWERS.get(hashlib.sha256(window.astype(np.int64).tobytes()).hexdigest())
                    if known is not None:
                        out[row] = -30.0
                        out[row, np.arange(len(known)), known] = 30.0
                return Tensor(out), loss


        def build_model():
            return Memo({VOCAB}, 16, 1, 2, {CONTEXT}, seed=0)
    ''')


def test_answers_learnt_from_the_public_windows_fail_on_an_instructors_seed_or_text(tmp_path):
    from tinytorch.text.tokenization import CharTokenizer

    public = tiny_task()
    base = write_entry(tmp_path / "baseline")
    memo = _memorising_entry(tmp_path / "memorised", public)
    entries = [read_submission(base), read_submission(memo)]
    board = judge(entries, public, ["smallest"], baseline=entries[0])
    row = _rows(board, "smallest")["memorised"]
    assert row.qualified and row.extra["val_loss"] < 0.01, \
        f"the default windows are public: a table of their answers passes (the lesson says so), got {row.reason!r}"
    tokenizer = CharTokenizer.from_text("".join(chr(ord("a") + i) for i in range(VOCAB)))
    other_text = np.array(tokenizer.encode(tiny_text(4000, seed=11)), dtype=np.int64)
    for private in (tiny_task(seed=12345), tiny_task(val_tokens=other_text)):
        board = judge(entries, private, ["smallest"], baseline=entries[0])
        rows = _rows(board, "smallest")
        assert rows["baseline"].qualified and rows["baseline"].rank == 1, "the honest entry keeps its rank"
        reason = rows["memorised"].reason
        assert reason.startswith("validation loss") and "above the quality bar" in reason, \
            f"on windows it has never seen, the memorised answers are worth nothing: got {reason!r}"


def test_heldout_and_seed_make_the_task(tmp_path):
    text = "\n".join(["First Citizen:", "Before we proceed any further, hear me speak."] * 20)
    heldout = tmp_path / "exam.txt"
    heldout.write_text(text, encoding="utf-8")
    task = shakespeare_task(COURSE, heldout=heldout, seed=7)
    assert len(task.val_tokens) == len(text) and task.seed == 7 and "exam.txt" in task.heldout, \
        f"--heldout replaces the held-out text, --seed the seed: got {len(task.val_tokens)} ids, seed {task.seed}"
    default = shakespeare_task(COURSE)
    assert default.seed == 0 and default.heldout == "the last 10% of datasets/tinyshakespeare.txt"
    (tmp_path / "bad.txt").write_text("naïve" * 100, encoding="utf-8")
    with pytest.raises(CourseError, match=r"bad.txt holds 1 character\(s\) the course's tokenizer does not know \('ï'\)"):
        shakespeare_task(COURSE, heldout=tmp_path / "bad.txt")
    (tmp_path / "short.txt").write_text("Romeo", encoding="utf-8")
    with pytest.raises(CourseError, match="short.txt holds 5 characters: the judge needs at least 65"):
        shakespeare_task(COURSE, heldout=tmp_path / "short.txt")
    with pytest.raises(CourseError, match="seed must be a whole number >= 0"):
        shakespeare_task(COURSE, seed=-1)


# ---- the hook: no folder every user may write, no way round it through /proc ---------------------------------------
def test_writing_to_dev_shm_or_reading_through_proc_self_root_is_named(tmp_path):
    base = write_entry(tmp_path / "baseline")
    shm = write_entry(tmp_path / "shm", body='''
        import os
        _path = "/dev/shm/tito-olympics-test-" + str(os.getpid())
        with open(_path, "w") as handle:  # a message to another entry, removed before the sandbox looks
            handle.write("weights")
        os.remove(_path)
    ''')
    heldout = COURSE / "datasets" / "tinyshakespeare.txt"  # every user may read it
    proc = write_entry(tmp_path / "proc-root", body=f'''
        SECRET = open("/proc/self/root" + {str(heldout)!r}).read()
    ''')
    entries = [read_submission(f) for f in (base, shm, proc)]
    board = judge(entries, tiny_task(), ["smallest"], baseline_loss=10.0)
    rows = _rows(board, "smallest")
    assert rows["baseline"].qualified
    assert rows["shm"].reason.startswith("writes outside its folder: /dev/shm/tito-olympics-test-"), \
        f"/dev/shm is a folder every user may write: the hook must name the write, got {rows['shm'].reason!r}"
    assert rows["proc-root"].reason == f"reads outside its folder: {heldout.resolve()}", \
        f"/proc/self/root/... is the file it names: got {rows['proc-root'].reason!r}"


# ---- the bars: one definition each, read when the judge runs -------------------------------------------------------
def test_the_quality_margin_is_read_when_the_judge_runs(tmp_path, monkeypatch):
    import tinytorch.perf.olympics as lesson

    entries = [read_submission(write_entry(tmp_path / "plain"))]
    loss = judge(entries, tiny_task(), ["smallest"], baseline_loss=10.0).results[0].val_loss
    monkeypatch.setattr(lesson, "QUALITY_MARGIN", 0.01)  # module 20's exercise 2
    board = judge(entries, tiny_task(), ["smallest"], baseline_loss=loss - 0.03)
    reason = board.boards["smallest"][0].reason
    assert board.rules.quality_margin == 0.01 and reason.endswith(f"+ 0.01) by {0.02:.4f}"), \
        f"a loss 0.03 above the baseline misses a bar of + 0.01 by 0.02: the margin is read when judging, got {reason!r}"
    write_leaderboard(board, tmp_path / "board")
    assert "+ 0.01)." in (tmp_path / "board" / "leaderboard.md").read_text(), "the leaderboard shows the margin used"


def test_the_speedrun_target_has_one_definition(monkeypatch):
    import tinytorch.perf.olympics as lesson

    monkeypatch.setattr(lesson, "SPEEDRUN_TARGET", 1.5)
    assert read_rules(tiny_task()).speedrun_target == 1.5, "the judge reads module 20's SPEEDRUN_TARGET when it runs"
    assert read_rules(tiny_task(speedrun_target=2.0)).speedrun_target == 2.0, "a task may set its own (the tests do)"
    assert shakespeare_task(COURSE).speedrun_target is None, "the Shakespeare task keeps no second copy of 1.95"


def test_the_judge_imports_without_the_export_machinery():
    code = ("import sys, tito.grading.judge; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nbdev', 'jupytext')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=COURSE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", \
        f"importing the judge must not import nbdev or jupytext (export's): {done.stdout}{done.stderr}"


# ---- a private course ----------------------------------------------------------------------------------------------
def test_the_runner_runs_from_the_judges_copies_when_the_course_is_private(tmp_path):
    private = tmp_path / "private"
    course = private / "course"
    for part in ("tinytorch", "tito"):
        shutil.copytree(COURSE / part, course / part)
    private.chmod(0o700)  # only its owner may enter: the sandbox's user cannot read the course
    honest = write_entry(tmp_path / "entries" / "honest")
    where = write_entry(tmp_path / "entries" / "where", body='''
        import tinytorch
        import tito.grading.judge_runner

        def build_model():
            raise RuntimeError("ran from " + tinytorch.__file__ + " and " + tito.grading.judge_runner.__file__)
    ''')
    entries = [read_submission(honest), read_submission(where)]
    board = judge(entries, tiny_task(), ["smallest"], baseline=entries[0], course_root=course)
    rows = _rows(board, "smallest")
    assert rows["honest"].qualified, f"a private course must not stop an honest entry: {rows['honest'].reason!r}"
    reason = rows["where"].reason
    assert ("/tito-olympics-" in reason and "-lib/tinytorch/__init__.py" in reason
            and "-lib/tito/grading/judge_runner.py" in reason), \
        f"the runner and tinytorch come from the judge's copies in its scratch folder: {reason!r}"
    assert str(COURSE) not in reason and str(course) not in reason, f"nothing is read from a course: {reason!r}"
    assert oct(private.stat().st_mode & 0o777) == "0o700", "nothing of the course was made readable to others"


def test_the_runners_copies_are_readable_by_its_user_only(tmp_path):
    import os
    import stat

    from tito.grading.judge import runner_library
    from tito.grading.sandbox import SandboxUser

    user = SandboxUser(64999, 64999)
    library = runner_library(tmp_path / "lib", COURSE, user)
    runner = library / "tito" / "grading" / "judge_runner.py"
    paths = [library, library / "tinytorch", library / "tinytorch" / "__init__.py", library / "tito",
             library / "tito" / "__init__.py", runner.parent, runner.parent / "__init__.py", runner]
    for path in paths:
        info = path.stat()
        assert info.st_uid == os.getuid() and info.st_gid == user.gid, f"{path}: the judge's, in the user's group"
        assert stat.S_IMODE(info.st_mode) == (0o750 if path.is_dir() else 0o640), \
            f"{path}: the user may read, nobody else (mode {oct(stat.S_IMODE(info.st_mode))})"
    assert (library / "tinytorch" / "__init__.py").read_bytes() == (COURSE / "tinytorch" / "__init__.py").read_bytes()


# ---- reading a submission ------------------------------------------------------------------------------------------
def test_a_link_in_a_submission_is_refused(tmp_path):
    entry = write_entry(tmp_path / "linked")
    (entry / "notes.txt").symlink_to(COURSE / "datasets" / "tinyshakespeare.txt")
    with pytest.raises(SubmissionError, match=r"notes.txt is a link: a submission holds plain files only"):
        read_submission(entry)


# ---- the files -----------------------------------------------------------------------------------------------------
def test_a_full_disk_leaves_the_earlier_leaderboard_whole(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    entries = [read_submission(write_entry(tmp_path / "plain"))]
    board = judge(entries, tiny_task(), ["smallest"], baseline_loss=10.0)
    out = tmp_path / "board"
    write_leaderboard(board, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(self, target, *args, **kwargs):
        if hasattr(target, "write"):
            target.write(b"\x89PNG")
        else:
            open(target, "wb").close()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_leaderboard(board, out)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before, f"a failed write changes no file and leaves none empty: {sorted(after)} vs {sorted(before)}"


# ---- the command line: every number, and --out, checked before any work --------------------------------------------
@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    import tito.grading.judge
    from tito.cli import main

    def no_work(*args, **kwargs):
        raise AssertionError("the judge ran: a bad argument must be refused before any work")

    monkeypatch.chdir(COURSE)
    monkeypatch.setattr(tito.grading.judge, "judge", no_work)
    entry = write_entry(tmp_path / "entry")

    def run(*args):
        status = main(["olympics", "judge", str(entry), *args])
        return status, " ".join(capsys.readouterr().out.split())
    return run


@pytest.mark.parametrize("budget", ["-1000", "nan", "inf", "0", "1e300"])
def test_the_cli_refuses_a_bad_budget(cli, tmp_path, budget):
    status, out = cli("--budget", budget, "--out", str(tmp_path / "out"))
    assert status == 1 and "--budget takes the speedrun's seconds per entry, more than 0 and at most 86400" in out, out
    assert not (tmp_path / "out").exists(), "nothing written"


def test_the_cli_refuses_a_negative_seed_and_a_heldout_it_cannot_use(cli, tmp_path):
    status, out = cli("--seed", "-1")
    assert status == 1 and "--seed takes a whole number >= 0" in out, out
    (tmp_path / "exam.txt").write_text("¿Qué?" * 50, encoding="utf-8")
    status, out = cli("--heldout", str(tmp_path / "exam.txt"), "--out", str(tmp_path / "out"))
    assert status == 1 and "character(s) the course's tokenizer does not know" in out, out


def test_the_cli_refuses_an_out_it_cannot_write(cli, tmp_path):
    (tmp_path / "a-file").write_text("mine", encoding="utf-8")
    status, out = cli("--out", str(tmp_path / "a-file"))
    assert status == 1 and "a-file exists and is not a folder" in out, out
    status, out = cli("--out", str(tmp_path / "a-file" / "board"))
    assert status == 1 and "a-file is a file, not a folder" in out, out
    assert (tmp_path / "a-file").read_text() == "mine"


# ---- the milestone never deletes what it did not write -------------------------------------------------------------
def test_the_milestone_replaces_only_the_entry_files_it_wrote(tmp_path):
    import importlib.util

    milestones = COURSE / "milestones"
    spec = importlib.util.spec_from_file_location("olympics_milestone", milestones / "olympics.py")
    olympics = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(milestones))
    try:
        spec.loader.exec_module(olympics)
    finally:
        sys.path.remove(str(milestones))
    out = tmp_path / "out"
    assert olympics.entry_folder_problem(out) == "", "no entries folder yet: nothing to refuse"
    folder = olympics.write_entry_folder(out / "entries", "fp32", tiny_gpt())
    assert sorted(p.name for p in folder.iterdir()) == ["model.npz", "submission.py"]
    assert olympics.entry_folder_problem(out) == "", "a folder it wrote itself may be rewritten"
    (folder / "my-notes.txt").write_text("mine", encoding="utf-8")
    problem = olympics.entry_folder_problem(out)
    assert "fp32 holds files this program did not write (fp32/my-notes.txt)" in problem, problem
    (out / "entries" / "int8").mkdir()
    (out / "entries" / "int8" / "model.npz").write_text("a user's own", encoding="utf-8")
    (folder / "my-notes.txt").unlink()
    assert "int8 holds files this program did not write (int8/model.npz)" in olympics.entry_folder_problem(out)
    done = subprocess.run([sys.executable, str(milestones / "olympics.py"), "--fast", "--out", str(out)],
                          cwd=COURSE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "int8 holds files this program did not write" in done.stderr, \
        f"the milestone refuses before any work: {done.returncode} {done.stderr[-500:]}"
    assert (out / "entries" / "int8" / "model.npz").read_text() == "a user's own"


# ---- the lesson's guards table -------------------------------------------------------------------------------------
def test_every_row_of_the_guards_table_names_a_test_that_exists():
    import re

    lesson = (COURSE / "modules" / "20_olympics" / "olympics_dev.py").read_text(encoding="utf-8")
    table = lesson.split("## What the guards do and do not stop")[1].split("\n#\n# Not stopped")[0]
    rows = [line for line in table.splitlines() if line.startswith("# | ") and "---" not in line][1:]
    defined = {name for path in Path(__file__).parent.glob("test_*.py")
               for name in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M)}
    assert len(rows) >= 10, f"the table has a row per guard, found {len(rows)}"
    for row in rows:
        named = re.findall(r"`(test_\w+)`", row.split(" | ")[-1])
        assert named, f"a row of the guards table names no test: {row}"
        missing = [name for name in named if name not in defined]
        assert not missing, f"the guards table names tests that do not exist: {missing}"
