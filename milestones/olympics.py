"""The TinyTorch Olympics (after module 20): the reference entries judged by `tito olympics judge`, three times.

The entries are the folders in milestones/olympics_entries/ (each a submission.py), built on the
shakespeare milestone's trained GPT (module 07's checkpoint, `shakespeare_gpt.npz` in its --out
folder; used only after the same recipe check the quantize milestone makes; trained first when
the file is missing):
  fp32          the trained model: the baseline, whose loss sets the quality bar (+ module 20's QUALITY_MARGIN)
  int8, int4    module 15's weight-only quantize_model (per output channel)
  pruned        module 16's prune_mlps (a quarter of every MLP's hidden units), then fine-tuned
  distilled     a 2-layer GPT trained from scratch on the 4-layer model's logits (module 16)
  fused         module 18's fuse(model): bias + GELU as one op, BLAS LayerNorm, the same weights
                (its speedrun also cuts each batch in two parts on the 2 threads: ThreadedDataParallel)
  checkpointed  module 17's checkpoint_blocks(model): a training-memory technique, judged here too
This program writes each entry's checkpoint into a copy of its folder (--out/entries/NAME; it replaces
only the files it wrote there, listed in --out/entries/.olympics-milestone, and refuses to start when
such a folder holds anything else), then
runs the judge (tito/grading/judge.py: each entry in the sandbox; every number measured by the judge)
on the events `smallest` and `generation` --runs times, and writes the first run's leaderboard
(leaderboard.md, leaderboard.csv, pareto.png) to --out.

Passes when: the baseline and the int8 entry qualify, int8's checkpoint is at least 3.5x smaller
than fp32's, and the ranking is reproducible: `smallest` (bytes, exact) gives every entry the same
rank in every run, and in `generation` no two entries are ranked in opposite orders by two runs
(entries whose speeds the judge cannot tell apart share a rank, and a pair that is tied in one run
and ordered in another is not a contradiction; module 19's three-run check is the same rule). With
--fast the generation ranks are printed, not judged: 3 repeats on a busy machine. Speeds closer
than 5% share a rank, as do speeds whose 95% intervals overlap.
The speedrun (training to loss 1.95 from scratch, about a minute and a half per entry) is judged only
with --speedrun, once, on the entries that define train(): fp32 (nanoGPT's recipe, the baseline)
and fused; `tito olympics judge --event speedrun` runs it on any entries.

    python milestones/olympics.py [--fast] [--runs N] [--speedrun] [--checkpoint PATH] [--out DIR] [--write-results]

--write-results puts the first run's leaderboard and every run's ranks into benchmarks/RESULTS.md
(section "The Olympics (module 20)"); take it under the shared lock, on a quiet machine.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from _args import check_output_folder, positive_int  # milestones/_args.py
from _device import add_device_argument, device_ready  # milestones/_device.py
from _verdict import Check, verdict_checks  # milestones/_verdict.py
import compress  # milestones/compress.py: the fine-tune and distillation loop, the student's shape
import quantize  # milestones/quantize.py: the trained model, checked to be the shakespeare recipe's
import shakespeare  # milestones/shakespeare.py: the recipe and the data
from tinytorch.core.training import save_checkpoint
from tinytorch.perf.acceleration import fuse
from tinytorch.perf.compression import prune_mlps
from tinytorch.perf.memory import checkpoint_blocks
from tinytorch.perf.olympics import SPEEDRUN_TARGET  # module 20: the speedrun's validation loss
from tinytorch.perf.quantization import quantize_model
from tito.grading.judge import judge, read_submission, shakespeare_task, write_leaderboard

ENTRIES = Path(__file__).resolve().parent / "olympics_entries"
ENTRY_NAMES = ("fp32", "int8", "int4", "pruned", "distilled", "fused", "checkpointed")
ENTRY_FILES = ("submission.py", "model.npz")
MANIFEST = ".olympics-milestone"  # in --out/entries: the files this program wrote there ("fp32/model.npz"), one a line
EVENTS = ["smallest", "generation"]
PRUNE_AMOUNT = 0.25  # must equal AMOUNT in olympics_entries/pruned/submission.py
MIN_INT8_RATIO = 3.5
FULL = dict(fine_tune=200, student_iters=600, runs=3, repeats=15)
FAST = dict(fine_tune=20, student_iters=30, runs=2, repeats=3)


def build_entries(model, train_ids, plan: dict, out: Path, console: Console) -> list[Path]:
    """Each reference entry's folder in `out`: its submission.py and the checkpoint made from `model`."""
    model.eval()
    pruned = prune_mlps(model, PRUNE_AMOUNT)
    compress.train(console, f"pruned (-{PRUNE_AMOUNT:.0%} MLP units), fine-tune", pruned, train_ids,
                   plan["fine_tune"], seed=1, lr=shakespeare.RECIPE["lr"] / 3, warmup=20)
    student = compress.train(console, "2-layer student, distilled", compress.new_gpt(2, seed=0), train_ids,
                             plan["student_iters"], seed=100, teacher=model)
    made = {"fp32": model, "int8": quantize_model(model, mode="weight_only", bits=8),
            "int4": quantize_model(model, mode="weight_only", bits=4), "pruned": pruned, "distilled": student,
            "fused": fuse(model), "checkpointed": checkpoint_blocks(compress.new_gpt())}
    made["checkpointed"].load_state_dict(model.state_dict())
    assert tuple(made) == ENTRY_NAMES, "ENTRY_NAMES lists the entries built here, in order"
    folders = []
    for name, variant in made.items():
        folders.append(write_entry_folder(out / "entries", name, variant.eval()))
    return folders


def entry_folder_problem(out: Path) -> str:
    """"" when each entry folder in `out`/entries is absent or holds only files this program wrote there (the
    manifest `out`/entries/.olympics-milestone lists them); otherwise why the run must not start. Checked
    before any work: the folders are rewritten later, and a user's own files in them are never deleted."""
    entries = out / "entries"
    manifest = entries / MANIFEST
    ours = set(manifest.read_text(encoding="utf-8").split()) if manifest.is_file() else set()
    for name in ENTRY_NAMES:
        folder = entries / name
        if not folder.exists() and not folder.is_symlink():
            continue
        if folder.is_symlink() or not folder.is_dir():
            return f"{folder} exists and is not a folder this program wrote: move it away or choose another --out"
        theirs = sorted(p.relative_to(entries).as_posix() for p in folder.rglob("*")
                        if p.relative_to(entries).as_posix() not in ours and not p.is_dir())
        if theirs:
            return (f"{folder} holds files this program did not write ({', '.join(theirs[:3])}"
                    f"{', ...' if len(theirs) > 3 else ''}): move them away or choose another --out")
    return ""


def write_entry_folder(entries: Path, name: str, model) -> Path:
    """`entries`/NAME: its submission.py (from olympics_entries/NAME) and `model`'s checkpoint, replacing what
    an earlier run wrote there and nothing else. The manifest, which lists the files this program writes in
    `entries`, is written first, so that a run killed half-way leaves no file a later run cannot claim."""
    manifest = entries / MANIFEST
    entries.mkdir(parents=True, exist_ok=True)
    listed = set(manifest.read_text(encoding="utf-8").split()) if manifest.is_file() else set()
    listed |= {f"{name}/{file}" for file in ENTRY_FILES}
    manifest.write_text("\n".join(sorted(listed)) + "\n", encoding="utf-8")
    folder = entries / name
    folder.mkdir(exist_ok=True)
    shutil.copyfile(ENTRIES / name / "submission.py", folder / "submission.py")
    save_checkpoint(folder / "model.npz", model)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true",
                        help="accept (or train) the 200-iteration model, short fine-tunes, 2 runs of 3 repeats")
    parser.add_argument("--runs", type=positive_int, default=None, help="judge runs (default 3; 2 with --fast)")
    parser.add_argument("--checkpoint", type=Path, default=quantize.DEFAULT_CHECKPOINT,
                        help=f"the shakespeare milestone's trained model (default {quantize.DEFAULT_CHECKPOINT})")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "tinytorch-olympics",
                        help="folder for the entries and the leaderboard")
    parser.add_argument("--speedrun", action="store_true",
                        help="also judge the speedrun once: each entry that defines train() trains from scratch to "
                             f"loss {SPEEDRUN_TARGET} on 2 threads (about a minute and a half each; not with --fast)")
    parser.add_argument("--write-results", action="store_true",
                        help="write the leaderboard and every run's ranks to benchmarks/RESULTS.md")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if args.speedrun and args.fast:
        parser.error(f"--speedrun trains to validation loss {SPEEDRUN_TARGET} from scratch: run it without --fast")
    check_output_folder(parser, args.out)
    problem = entry_folder_problem(args.out)
    if problem:
        parser.error(f"--out {args.out}: {problem}")
    if not device_ready(args.device):
        return 2
    if args.device != "cpu":  # every entry runs in the sandbox's runner, on NumPy
        print("error: the Olympics judge runs every entry on the CPU (NumPy); run without --device cuda",
              file=sys.stderr)
        return 2
    console = Console(highlight=False, soft_wrap=True)
    plan = FAST if args.fast else FULL
    runs = args.runs or plan["runs"]
    start = time.perf_counter()
    train_ids, _, tokenizer = shakespeare.load_text()
    found = quantize.trained_model(args.checkpoint, tokenizer.vocab_size, args.fast, "cpu", console)
    if isinstance(found, str):
        print(f"error: {found}", file=sys.stderr)
        return 2
    model, path, iters = found
    console.print(f"[bold]Olympics[/]: reference entries from {path} ({iters} iterations); events "
                  f"{', '.join(EVENTS)}; {runs} judge runs")
    folders = build_entries(model, train_ids, plan, args.out, console)
    root = Path(__file__).resolve().parent.parent
    task = shakespeare_task(root, generation_repeats=plan["repeats"])
    entries = [read_submission(folder) for folder in folders]
    boards = []
    for run in range(runs):
        tick = time.perf_counter()
        board = judge(entries, task, EVENTS, baseline=entries[0], course_root=root,
                      progress=lambda text: console.print(f"  run {run + 1}: {text}"))
        boards.append(board)
        console.print(f"run {run + 1} judged in {time.perf_counter() - tick:.1f} s")
        for event in EVENTS:
            console.print(f"  {event}: " + ", ".join(f"{r.rank or '—'} {r.name}" for r in board.boards[event]))
    written = write_leaderboard(boards[0], args.out)
    console.print((args.out / "leaderboard.md").read_text(encoding="utf-8"))
    console.print(f"wrote {', '.join(str(p) for p in written)}")
    differ = {}
    for event in EVENTS:
        ranks = [{r.name: r.rank for r in board.boards[event]} for board in boards]
        differ[event] = sum(any(r[name] != ranks[0][name] for r in ranks[1:]) for name in ranks[0])
    reversed_pairs = opposite_orders([{r.name: r.rank for r in board.boards["generation"]} for board in boards])
    rows = {r.name: r for r in boards[0].boards["smallest"]}

    def checkpoint_of(name: str) -> float:  # the smallest event scores every byte shipped; this is the checkpoint's part
        return float(rows[name].extra["parts"]["checkpoint"])

    checks = [Check("fp32 baseline qualifies (1 = yes)", float(rows["fp32"].qualified), "at least", 1.0, ".0f"),
              Check("int8 qualifies (1 = yes)", float(rows["int8"].qualified), "at least", 1.0, ".0f"),
              Check("int8 checkpoint, times smaller than fp32", checkpoint_of("fp32") / checkpoint_of("int8"),
                    "at least", MIN_INT8_RATIO, ".2f"),
              Check(f"smallest: entries whose rank differs between {runs} runs", float(differ["smallest"]),
                    "at most", 0.0, ".0f"),
              # --fast: 3 repeats on a machine busy with the test suite; the ranking of speeds is printed only
              Check(f"generation: pairs of entries ranked in opposite orders by two of {runs} runs "
                    f"({differ['generation']} entries' ranks differ by a tie)", float(len(reversed_pairs)),
                    "at most", 0.0, ".0f", judged=not args.fast)]
    for a, b in reversed_pairs:
        console.print(f"  generation: {a} and {b} are ranked in opposite orders by two runs")
    speed = None
    if args.speedrun:
        speed = speedrun(folders, task, root, args.out / "speedrun", console)
        rows = {r.name: r for r in speed.boards["speedrun"]}
        checks.append(Check(f"speedrun: fp32 (nanoGPT's recipe) reaches loss {SPEEDRUN_TARGET} from scratch (1 = yes)",
                            float(rows["fp32"].qualified), "at least", 1.0, ".0f"))
    status = verdict_checks(console, checks, start)
    if args.write_results:
        console.print(f"wrote {write_results(boards, path, iters, args.fast, speed)}")
    return status


def speedrun(folders: list[Path], task, root: Path, out: Path, console: Console):
    """The speedrun, judged once on the entries that define train() (fp32: nanoGPT's recipe, the baseline);
    its leaderboard goes to `out`."""
    entries = [entry for entry in map(read_submission, folders) if entry.has_train]
    baseline = next(entry for entry in entries if entry.name == "fp32")
    tick = time.perf_counter()
    board = judge(entries, task, ["speedrun"], baseline=baseline, course_root=root,
                  progress=lambda text: console.print(f"  {text}"))
    console.print(f"speedrun judged in {time.perf_counter() - tick:.1f} s")
    written = write_leaderboard(board, out)
    console.print((out / "leaderboard.md").read_text(encoding="utf-8"))
    console.print(f"wrote {', '.join(str(p) for p in written)}")
    return board


def opposite_orders(runs: list[dict]) -> list[tuple[str, str]]:
    """The pairs of entries that one run ranks a before b and another b before a.

    runs: one {entry name: rank or None} per run (None: disqualified, left out). A pair tied (the same
    rank) in some run and ordered in another is no contradiction: it is one the judge could not tell
    apart there."""
    names = sorted(set.intersection(*(set(n for n, rank in r.items() if rank is not None) for r in runs)))
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if any(r[a] < r[b] for r in runs) and any(r[a] > r[b] for r in runs)]


def write_results(boards: list, checkpoint: Path, iters: int, fast: bool, speed=None) -> Path:
    """The section "The Olympics (module 20)" of benchmarks/RESULTS.md: the first run's leaderboard
    (what write_leaderboard wrote), each entry's rank in every run, and the speedrun's board when judged."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from _common import write_section  # benchmarks/_common.py: one section of RESULTS.md, the rest kept

    from tinytorch.perf.olympics import EVENTS as EVENT_SPECS, leaderboard_markdown

    first = boards[0]
    lines = ["## The Olympics (module 20)", "",
             f"`python milestones/olympics.py{' --fast' if fast else ''}{' --speedrun' if speed is not None else ''} --write-results`: "
             "the reference entries built "
             f"from the shakespeare milestone's GPT ({checkpoint.name}, {iters} iterations), judged by "
             f"`tito olympics judge` {len(boards)} times; every number measured by the judge. "
             f"Judge's environment: {', '.join(f'{k} {v}' for k, v in first.environment.items())}.", ""]
    for event in EVENTS:
        lines.append(leaderboard_markdown(EVENT_SPECS[event], first.boards[event], first.baseline_loss,
                                          margin=first.rules.quality_margin).replace("### ", "### run 1, ", 1))
    lines += [f"### The ranks in each of the {len(boards)} runs", "",
              "| event | entry | " + " | ".join(f"run {i + 1}" for i in range(len(boards))) + " |",
              "|---|---|" + "---|" * len(boards)]
    for event in EVENTS:
        for row in first.boards[event]:
            ranks = [{r.name: r.rank for r in b.boards[event]}[row.name] for b in boards]
            lines.append(f"| {event} | {row.name} | " + " | ".join("—" if r is None else str(r) for r in ranks) + " |")
    if speed is not None:
        task = speed.task
        lines += ["", "### The speedrun (`--speedrun`, judged once)", "",
                  f"Each entry that defines `train(time_budget_s)` trained from scratch in the sandbox on "
                  f"{task.speedrun_threads} threads, one after the other; the judge timed the call and computed the "
                  f"validation loss of the model it returned. Target {speed.rules.speedrun_target}, budget "
                  f"{task.speedrun_budget_s:g} s. Baseline: fp32 (nanoGPT's recipe), "
                  f"{speed.speedrun_baseline_s:.1f} s.", "",
                  "| rank | entry | seconds | ratio to the baseline | validation loss | verdict |", "|---|---|---:|---:|---:|---|"]
        for row in speed.boards["speedrun"]:
            ratio = row.extra.get("ratio_to_baseline")
            lines.append(f"| {row.rank or '—'} | {row.name} | {row.score:.1f} | "
                         f"{'—' if ratio is None else f'{ratio:.2f}×'} | {row.extra['val_loss']:.4f} | "
                         f"{'ok' if row.qualified else 'disqualified: ' + row.reason} |")
    return write_section("## The Olympics (module 20)", "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
