"""The Shakespeare GPT made smaller (after module 16): structured pruning, low rank and distillation against the baseline.

The baseline is milestone `shakespeare`'s GPT (4 layers, 4 heads, width 128, context 64, no
biases, tied embeddings), trained by its recipe (2,000 iterations), or loaded from a module-07
checkpoint of that model (`--baseline PATH`: loaded when the file exists, else written there
after training). Without --baseline, a full run uses the model that `tito milestone run shakespeare`
saved in its default --out when that file holds the full recipe's model (`tito milestone run --all`
runs shakespeare first), and trains the baseline itself otherwise. Then, each compared with the baseline on validation loss (mean over 200 random
validation batches), parameters, bytes of the float32 weights and the time of one training step
(forward, backward, AdamW; one thread, the variants timed in turn with module 14's
measure_latency):

0. the control: the baseline with the same short fine-tune as 1 and 2 and nothing removed, so that
   "after more training" is not mistaken for "after compression";
1. structured pruning: half of every block's MLP hidden units removed (`prune_mlps`, importance
   ‖fc[:, j]‖·‖proj[j, :]‖), then a short fine-tune; also the MLP's forward + backward alone;
2. low rank: every block's MLP `fc` and `proj` replaced by two Linears through a truncated SVD
   (`low_rank`), rank LOW_RANK, then the same short fine-tune;
3. distillation: a 2-layer student trained from scratch for the same iterations, once on the
   labels and once distilled from the baseline (`distillation_loss`, T = 2, alpha = 0.5), three
   seeds each.

Thresholds (the full run; exit status 1 when one fails):
* structured and low rank: validation loss at most the baseline's + 0.10;
* structured: the MLP's forward + backward at least 1.6x faster, the training step at least 1.2x;
* distillation: the distilled students' mean validation loss below the label-trained students'
  mean by more than the spread (max - min) over the seeds of either arm.
With --fast (the test suite: 200 baseline iterations, shorter fine-tunes and students, one seed,
20 validation batches) only the two quality thresholds are judged; times and the distillation
comparison are printed, not judged (one seed has no spread, and the suite does not rely on time).
The speed targets are for one CPU thread: with --device cuda the times are printed, not judged.

    python milestones/compress.py [--fast] [--baseline PATH] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from threadpoolctl import threadpool_limits

from _args import check_output_file, non_finite_weights  # milestones/_args.py
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import Check, verdict_checks  # milestones/_verdict.py
from shakespeare import CHECKPOINT, DEFAULT_OUT, RECIPE, estimate_loss, get_batch, load_text, saved_model_problem  # milestones/shakespeare.py
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import count_parameters
from tinytorch.core.optimizers import AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor, to_array, to_host
from tinytorch.core.training import CosineWarmupLR, clip_grad_norm, load_checkpoint, save_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.perf.compression import choose_rank, distillation_loss, low_rank, prune_mlps
from tinytorch.perf.profiling import measure_latency

QUALITY_MARGIN = 0.10      # structured pruning and low rank: validation loss <= baseline + this
MLP_SPEEDUP = 1.6          # structured pruning: the MLP's forward + backward, at least this much faster
STEP_SPEEDUP = 1.2         # structured pruning: the training step
PRUNE_AMOUNT = 0.5         # half of every MLP's hidden units
LOW_RANK = 64              # rank of each factorised MLP matrix (128 x 512: full rank 128)
STUDENT_LAYERS = 2
TEMPERATURE, ALPHA = 2.0, 0.5
FULL = dict(baseline_iters=RECIPE["iters"], fine_tune=300, student_iters=600, seeds=3, eval_batches=200,
            timing_rounds=25)
FAST = dict(baseline_iters=200, fine_tune=60, student_iters=120, seeds=1, eval_batches=20, timing_rounds=4)


def new_gpt(num_layers: int = RECIPE["num_layers"], seed: int = 1337) -> GPT:
    return GPT(65, RECIPE["embed_dim"], num_layers, RECIPE["num_heads"], RECIPE["context"],
               dropout=0.0, tie_weights=True, bias=False, seed=seed)


def train(console: Console, label: str, model: GPT, data, iters: int, seed: int, lr: float = RECIPE["lr"],
          warmup: int = RECIPE["warmup"], teacher: GPT | None = None) -> GPT:
    """The shakespeare recipe for `iters` iterations (AdamW, cosine with warm-up to lr/10, clipping),
    on the labels, or distilled from `teacher` (its logits computed without gradients)."""
    optimizer = AdamW(weight_decay_groups(model, RECIPE["weight_decay"]), lr=lr, betas=RECIPE["betas"])
    scheduler = CosineWarmupLR(optimizer, warmup_steps=min(warmup, iters // 10), total_steps=iters, min_lr=lr / 10)
    batches = np.random.default_rng(seed)
    log_every = max(iters // 4, 1)
    tick = time.perf_counter()
    for it in range(1, iters + 1):
        x, y = get_batch(data, RECIPE["batch"], RECIPE["context"], batches)
        logits, loss = model(Tensor(x), targets=Tensor(y))
        if teacher is not None:
            with no_grad():
                teacher_logits, _ = teacher(Tensor(x))
            loss = distillation_loss(logits, teacher_logits, y, temperature=TEMPERATURE, alpha=ALPHA)
        optimizer.zero_grad()
        loss.backward()
        clip_grad_norm(model.parameters(), RECIPE["clip"])
        optimizer.step()
        scheduler.step()
        if it % log_every == 0 or it == iters:
            console.print(f"  {label}: iter {it:4d}/{iters}, loss {loss.item():.4f}, "
                          f"{1e3 * (time.perf_counter() - tick) / it:.0f} ms/iter")
    return model


def weight_bytes(model: GPT) -> int:
    """Bytes of the model's weights as stored (its state_dict's arrays)."""
    return sum(array.nbytes for array in model.state_dict().values())


def low_rank_mlps(model: GPT, rank: int) -> GPT:
    """A copy of `model` whose every block's MLP fc and proj are low_rank(..., rank) pairs."""
    factored = copy.deepcopy(model)
    for block in factored.blocks:
        block.mlp.fc = low_rank(block.mlp.fc, rank)
        block.mlp.proj = low_rank(block.mlp.proj, rank)
    return factored


def energy_kept(linear, rank: int) -> float:
    """The fraction of the weight's squared Frobenius norm that its first `rank` singular values hold."""
    with no_grad():
        sigma = np.linalg.svd(to_host(linear.weight).astype(np.float64), compute_uv=False)
    return float(np.sum(sigma[:rank] ** 2) / np.sum(sigma ** 2))


def choose_rank_all(model: GPT, energy: float) -> int:
    """The largest of the ranks that keep `energy` of each MLP matrix (module 16's choose_rank)."""
    ranks = []
    for block in model.blocks:
        for layer in (block.mlp.fc, block.mlp.proj):
            with no_grad():
                ranks.append(choose_rank(np.linalg.svd(to_host(layer.weight).astype(np.float64), compute_uv=False),
                                         energy))
    return max(ranks)


def interleaved_medians(fns: dict, rounds: int) -> dict:
    """Median seconds of each function, timed in turn, round after round, with module 14's
    measure_latency (one warm-up call each first), so that a busy moment affects every variant."""
    samples = {name: [] for name in fns}
    for fn in fns.values():
        measure_latency(fn, warmup=1, repeats=1)
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += measure_latency(fn, warmup=0, repeats=1).samples
    return {name: float(np.median(values)) for name, values in samples.items()}


def training_step(model: GPT, device: str):
    """A function that runs one training step of `model` (AdamW with the recipe's groups) on a fixed batch."""
    optimizer = AdamW(weight_decay_groups(model, RECIPE["weight_decay"]), lr=1e-4, betas=RECIPE["betas"])
    ids = to_array(np.random.default_rng(0).integers(0, 65, (RECIPE["batch"], RECIPE["context"] + 1)), device=device)
    x, y = Tensor(ids[:, :-1]), Tensor(ids[:, 1:])

    def step() -> None:
        _, loss = model(x, targets=y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def mlp_forward_backward(mlp, device: str):
    tokens = to_array(np.random.default_rng(1).standard_normal(
        (RECIPE["batch"], RECIPE["context"], RECIPE["embed_dim"])).astype(np.float32), device=device)

    def run() -> None:
        mlp.zero_grad()
        mlp(Tensor(tokens, requires_grad=True)).sum().backward()
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="short runs, one seed, 20 validation batches; "
                                                            "quality judged, times and distillation printed only")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkpoint of the shakespeare model: loaded when it exists, else written after training "
                             f"(default: the model `tito milestone run shakespeare` saved in {DEFAULT_OUT}, when it "
                             "is the full recipe's; else the baseline is trained here)")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if args.baseline is not None and not args.baseline.is_file():
        check_output_file(parser, args.baseline, "--baseline")  # it will be written: before training, not after
    if not device_ready(args.device):
        return 2
    saved = DEFAULT_OUT / CHECKPOINT
    if args.baseline is None and not args.fast and saved.is_file() and saved_model_problem(saved, 65, fast=False) is None:
        args.baseline = saved  # the shakespeare milestone's model, trained by the same recipe: no need to train it again
    baseline = new_gpt().to(args.device)
    loaded = args.baseline is not None and args.baseline.exists()
    diverged = non_finite_weights(args.baseline) if loaded else None
    if diverged is not None:  # found now, not after minutes of fine-tuning or inside LAPACK
        print(f"error: --baseline {diverged}; train the baseline again (or pass a new path to train one there).",
              file=sys.stderr)
        return 2
    if loaded:
        try:  # module 07 checks names, shapes and the model's config before it changes anything
            load_checkpoint(args.baseline, baseline)
        except ValueError as err:
            print(f"error: --baseline {args.baseline} is not the shakespeare recipe's model: "
                  f"{' '.join(str(err).split())}", file=sys.stderr)
            return 2
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 120)
    plan = FAST if args.fast else FULL
    start = time.perf_counter()
    train_ids, val_ids, tokenizer = load_text()
    train_ids, val_ids = to_array(train_ids, device=args.device), to_array(val_ids, device=args.device)
    console.print(f"[bold]Compress[/]: the shakespeare GPT ({RECIPE['num_layers']} layers, width {RECIPE['embed_dim']}) "
                  f"against half its MLP units, rank-{LOW_RANK} MLPs and a {STUDENT_LAYERS}-layer distilled student; "
                  f"validation over {plan['eval_batches']} batches; device {device_label(args.device)}")

    def quality(model: GPT) -> float:
        return estimate_loss(model, val_ids, plan["eval_batches"], np.random.default_rng(2))

    # ---- the baseline --------------------------------------------------------------------------------
    if loaded:
        console.print(f"baseline: loaded {args.baseline}")
    else:
        train(console, "baseline", baseline, train_ids, plan["baseline_iters"], seed=0)
        if args.baseline is not None:
            console.print(f"baseline: saved to {save_checkpoint(args.baseline, baseline)}")
    rows = {"baseline": baseline}

    # ---- the control: the baseline with the same fine-tune, nothing removed ------------------------------
    control = train(console, "baseline, the same fine-tune (control)", copy.deepcopy(baseline), train_ids,
                    plan["fine_tune"], seed=1, lr=RECIPE["lr"] / 3, warmup=20)
    rows["baseline + fine-tune (control)"] = control

    # ---- 1. structured pruning ------------------------------------------------------------------------
    pruned = prune_mlps(baseline, PRUNE_AMOUNT)
    before_fine_tune = quality(pruned)
    train(console, "pruned, fine-tune", pruned, train_ids, plan["fine_tune"], seed=1, lr=RECIPE["lr"] / 3, warmup=20)
    rows[f"MLP units -{PRUNE_AMOUNT:.0%}"] = pruned

    # ---- 2. low rank ----------------------------------------------------------------------------------------
    factored = low_rank_mlps(baseline, LOW_RANK)
    kept = [energy_kept(layer, LOW_RANK) for block in baseline.blocks for layer in (block.mlp.fc, block.mlp.proj)]
    console.print(f"rank {LOW_RANK} keeps {min(kept):.1%} to {max(kept):.1%} of each MLP matrix's energy "
                  f"(Σ of the kept σ² over Σ σ²; rank {choose_rank_all(baseline, 0.9)} would keep 90% of every one)")
    factored_before = quality(factored)
    train(console, "low rank, fine-tune", factored, train_ids, plan["fine_tune"], seed=1, lr=RECIPE["lr"] / 3, warmup=20)
    rows[f"MLPs rank {LOW_RANK}"] = factored

    # ---- 3. distillation ------------------------------------------------------------------------------------
    baseline.eval()
    students: dict[str, list] = {"labels only": [], "distilled": []}
    for seed in range(plan["seeds"]):
        for arm, teacher in (("labels only", None), ("distilled", baseline)):
            student = train(console, f"{STUDENT_LAYERS}-layer student, {arm}, seed {seed}",
                            new_gpt(STUDENT_LAYERS, seed=seed).to(args.device), train_ids, plan["student_iters"],
                            seed=100 + seed, teacher=teacher)
            students[arm].append((quality(student), student))
    baseline.train()

    # ---- the table ------------------------------------------------------------------------------------------
    losses = {name: quality(model) for name, model in rows.items()}
    for arm, runs in students.items():
        losses[f"student, {arm}"] = float(np.mean([loss for loss, _ in runs]))
        rows[f"student, {arm}"] = runs[0][1]
    # One timing per architecture: the control is the baseline's, the two students are one 2-layer model.
    architecture = {"baseline + fine-tune (control)": "baseline", "student, distilled": "student, labels only"}
    timed = {name: model for name, model in rows.items() if name not in architecture}
    with threadpool_limits(limits=1):
        steps = interleaved_medians({name: training_step(model, args.device) for name, model in timed.items()},
                                    plan["timing_rounds"])
        steps.update({name: steps[same] for name, same in architecture.items()})
        mlp_times = interleaved_medians({"dense": mlp_forward_backward(baseline.blocks[0].mlp, args.device),
                                         "pruned": mlp_forward_backward(pruned.blocks[0].mlp, args.device)},
                                        4 * plan["timing_rounds"])
    table = Table(title="against the baseline", show_lines=False)
    for column in ("model", "validation loss", "Δ loss", "parameters", "weight bytes", "step", "speed-up"):
        table.add_column(column, justify="left" if column == "model" else "right")
    base_loss, base_step = losses["baseline"], steps["baseline"]
    for name, model in rows.items():
        table.add_row(name, f"{losses[name]:.4f}", f"{losses[name] - base_loss:+.4f}", f"{count_parameters(model):,}",
                      f"{weight_bytes(model):,}", f"{steps[name] * 1e3:.1f} ms", f"{base_step / steps[name]:.2f}x")
    console.print(table)
    console.print(f"before fine-tuning: pruned {before_fine_tune:.4f}, low rank {factored_before:.4f}; students: the "
                  f"mean of {plan['seeds']} seed(s); step: the median of {plan['timing_rounds']} interleaved steps, one "
                  "per architecture (the control is the baseline's, both students one 2-layer model's)")
    for arm, runs in students.items():
        console.print(f"  {arm}: " + ", ".join(f"{loss:.4f}" for loss, _ in runs))
    mlp_speedup = mlp_times["dense"] / mlp_times["pruned"]
    step_speedup = base_step / steps[f"MLP units -{PRUNE_AMOUNT:.0%}"]
    console.print(f"one block's MLP, forward + backward on ({RECIPE['batch']}, {RECIPE['context']}, {RECIPE['embed_dim']}): "
                  f"dense {mlp_times['dense'] * 1e3:.2f} ms, half the units {mlp_times['pruned'] * 1e3:.2f} ms "
                  f"({mlp_speedup:.2f}x)")

    labels_runs = [loss for loss, _ in students["labels only"]]
    distilled_runs = [loss for loss, _ in students["distilled"]]
    gain = float(np.mean(labels_runs) - np.mean(distilled_runs))
    spread = max(float(np.ptp(labels_runs)), float(np.ptp(distilled_runs)))
    judge_time = not args.fast and args.device == "cpu"  # the targets are for one CPU thread
    checks = [
        Check("structured pruning: validation loss", losses[f"MLP units -{PRUNE_AMOUNT:.0%}"], "at most",
              base_loss + QUALITY_MARGIN),
        Check("low rank: validation loss", losses[f"MLPs rank {LOW_RANK}"], "at most", base_loss + QUALITY_MARGIN),
        Check("structured pruning: MLP forward + backward speed-up", mlp_speedup, "at least", MLP_SPEEDUP,
              judged=judge_time),
        Check("structured pruning: training step speed-up", step_speedup, "at least", STEP_SPEEDUP, judged=judge_time),
        Check("distillation: loss gain over labels only (spread over seeds)", gain, "above", spread,
              judged=not args.fast),
    ]
    return verdict_checks(console, checks, start)


if __name__ == "__main__":
    sys.exit(main())
