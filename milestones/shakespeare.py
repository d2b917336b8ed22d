"""A character-level GPT on Tiny Shakespeare (after module 13): validation loss <= 1.95.

nanoGPT's small CPU recipe, with every piece from this course: the text of
datasets/tinyshakespeare.txt (about 1.1 million characters, 65 distinct ones, encoded by
module 10's CharTokenizer) split 90/10 into training and validation; a GPT (module 13) with 4 layers, 4 heads, width 128, a context
of 64 characters, no dropout, no biases and tied embeddings; AdamW (module 06) with lr 1e-3,
betas (0.9, 0.99) and weight decay 0.1 on the weight matrices only; 100 warm-up steps, then a
cosine decay to 1e-4 (module 07); gradients clipped to norm 1.0; 2,000 iterations of 12
random windows. The validation loss is the mean over 200 random validation batches
(nanoGPT reports 1.88 for this recipe; PyTorch with it reaches 1.91 here). At the end it
prints a sample, saves the attention heat maps of the last layer (module 12's plotting) and
the trained model as a module-07 checkpoint, `shakespeare_gpt.npz` in --out (the `quantize`
milestone loads it).

Once module 18 is done (exported, no stub left) the milestone trains through its fused path:
`fuse(model)` (the same weight tensors, bias + GELU as one op, LayerNorm's row means as BLAS products) and `FusedAdamW` (one flat buffer,
the same updates as AdamW); when NumPy may use two or more cores, each batch is cut into two halves that
run forward and backward at once on two threads (module 18's ThreadedDataParallel: the same gradient).
`--plain` trains with module 13's model and module 06's AdamW on one thread of Python. The
first lines say which path ran; the checkpoint is module 13's GPT either way.

    python milestones/shakespeare.py [--fast] [--iters N] [--out DIR] [--device cpu|cuda] [--plain]
    tito milestone run shakespeare --ranks 2      # data-parallel on 2 MPI processes (module 21)

On N MPI ranks (`tito milestone run shakespeare --ranks N`, or `tito run --ranks N
milestones/shakespeare.py`) it trains data-parallel with module 21's DistributedDataParallel:
every rank draws the same batch of 12 windows and trains on its share of the rows (12/N each; N
must divide 12), the gradients are averaged over the ranks during the backward pass, so each
step's gradient is the one of the whole batch: the same recipe, to the same threshold. BLAS gets
the cores divided among the ranks. The validation batches are shared out the same way. Only rank 0
prints, samples and saves.

On cuda the token ids live on the GPU from the start: each batch's 12 window starts are drawn on
the host (the same draws on both devices) and sent over, and the windows are gathered there.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from _args import check_output_folder, positive_int  # milestones/_args.py
from _device import add_device_argument, device_label, device_ready  # milestones/_device.py
from _verdict import verdict_at_most  # milestones/_verdict.py
from tinytorch.core.attention import plot_attention_heads
from tinytorch.core.autograd import no_grad
from tinytorch.core.optimizers import AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor, array_module, to_array, to_host
from tinytorch.core.training import CosineWarmupLR, clip_grad_norm, read_checkpoint, save_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.plotting import pyplot
from tinytorch.text.tokenization import CharTokenizer

DATA = Path(__file__).resolve().parent.parent / "datasets" / "tinyshakespeare.txt"
THRESHOLD = 1.95       # the full run: mean validation loss over EVAL_BATCHES batches
FAST_THRESHOLD = 2.70  # --fast: 200 iterations bring the loss from ln(65) = 4.17 to about 2.45
EVAL_BATCHES = 200
CHECKPOINT = "shakespeare_gpt.npz"  # the trained model, in --out: what milestones/quantize.py loads
DEFAULT_OUT = Path(tempfile.gettempdir()) / "tinytorch-shakespeare"  # --out's default: where later milestones look
ARCHITECTURE = ("embed_dim", "num_layers", "num_heads", "context")  # what a saved model must share with RECIPE
RUNS_ON_RANKS = True  # `tito milestone run shakespeare --ranks N` launches it on N MPI processes (module 21)

RECIPE = dict(embed_dim=128, num_layers=4, num_heads=4, context=64, batch=12, lr=1e-3, min_lr=1e-4,
              betas=(0.9, 0.99), weight_decay=0.1, warmup=100, clip=1.0, iters=2000)


def load_text() -> tuple[np.ndarray, np.ndarray, CharTokenizer]:
    """(training ids, validation ids, tokenizer): module 10's character tokenizer on the whole text,
    ids as an int64 array, the first 90% for training."""
    text = DATA.read_text(encoding="utf-8")
    tokenizer = CharTokenizer.from_text(text)
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    split = int(0.9 * len(ids))
    return ids[:split], ids[split:], tokenizer


def get_batch(data, batch: int, context: int, rng: np.random.Generator) -> tuple:
    """`batch` random windows of `context` characters (x) and the same windows shifted by one (y).

    `data` is a NumPy or a CuPy array of ids; the windows are gathered where it lives. The starts
    come from the NumPy generator `rng` on the host, so both devices see the same batches.
    """
    xp = array_module(data)
    starts = xp.asarray(rng.integers(0, len(data) - context, batch))
    windows = data[starts[:, None] + xp.arange(context + 1)]
    return windows[:, :-1], windows[:, 1:]


def mean_of(losses: list) -> float:
    """The mean of scalar losses (arrays on the model's device): one copy to the host for all of them."""
    return float(to_host(array_module(losses[0]).stack(losses)).mean(dtype=np.float64))


def estimate_loss(model: GPT, data, batches: int, rng: np.random.Generator, parallel: object = None,
                  world: object = None) -> float:
    """Mean cross-entropy over `batches` random batches, in eval mode, without gradients. With
    `parallel` (module 18's ThreadedDataParallel over `model`), each batch's parts run on threads.
    With `world` (module 21's, N ranks), each rank takes its share of every batch's rows and the
    ranks' means are averaged (equal shares: the mean of the whole batches)."""
    model.eval()
    with no_grad():
        losses = [(model(x, targets=y)[1] if parallel is None else parallel.loss(x, y)).data
                  for x, y in (map(Tensor, share_of(*get_batch(data, RECIPE["batch"], RECIPE["context"], rng), world))
                               for _ in range(batches))]
    model.train()
    return mean_over_ranks(mean_of(losses), world)


# ---- N ranks (module 21) ------------------------------------------------------------------------
def share_of(x, y, world) -> tuple:
    """This rank's rows of a batch (all of it without `world`): rows [r·B/N, (r+1)·B/N) on rank r."""
    if world is None or world.size == 1:
        return x, y
    share = len(x) // world.size
    rows = slice(world.rank * share, (world.rank + 1) * share)
    return x[rows], y[rows]


def mean_over_ranks(value: float, world) -> float:
    """The mean of a number over the ranks (module 21's ring all-reduce of one float64); the value
    itself without `world`. Every rank gets the same result, so every rank reaches the same verdict."""
    if world is None or world.size == 1:
        return value
    from tinytorch.perf.distributed import ring_all_reduce

    return float(ring_all_reduce(np.array([value], np.float64), world)[0]) / world.size


def mpi_world(parser: argparse.ArgumentParser, device: str) -> object:
    """Module 21's world when this process is one of N > 1 MPI ranks, else None (one process).
    Refused (argparse's error, before any training) where the ranks cannot run the same recipe: a
    batch that does not split evenly, a GPU, or module 21 not exported while a launcher started us."""
    launched = int(os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 1)  # MPICH, Open MPI
    rank = int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
    try:
        from tinytorch.perf.distributed import init_world
    except ImportError:
        if launched > 1:
            refuse_on_every_rank(parser, rank, f"started on {launched} MPI ranks, but module 21 (distributed) is not "
                                 "exported: `tito export 21`, or run without --ranks")
        return None
    world = init_world()
    if world.size == 1:
        return None
    if RECIPE["batch"] % world.size:
        refuse_on_every_rank(parser, world.rank, f"{world.size} ranks: the batch of {RECIPE['batch']} rows must split "
                             f"evenly (ranks dividing {RECIPE['batch']}: 1, 2, 3, 4, 6, 12)")
    if device != "cpu":
        refuse_on_every_rank(parser, world.rank, f"--device {device} with {world.size} ranks: the GPU part of module 21 "
                             "is not written; data-parallel runs on the CPU only")
    return world


def refuse_on_every_rank(parser: argparse.ArgumentParser, rank: int, message: str) -> None:
    """End the program with argparse's error (status 2) on a refusal every rank reaches alike (it depends
    on the arguments and the number of ranks only). MPI is ended cleanly first: an exit with an error
    status under mpi4py's runner would abort the ranks instead, and an aborted MPICH run leaves its
    shared memory in /dev/shm. Rank 0 alone prints the message."""
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    if rank == 0:
        parser.error(message)
    sys.exit(2)



def saved_model_problem(path: Path, vocab_size: int, fast: bool) -> str | None:
    """Why the checkpoint at `path` is not this milestone's trained model (None when it is): the recipe
    saved in its `extra` must have RECIPE's architecture and the text's vocabulary and, unless `fast`,
    the recipe's full number of iterations. Later milestones (quantize, compress) reuse the model
    only after this check."""
    try:
        extra = read_checkpoint(path)["extra"] or {}
    except ValueError as err:
        return str(err)
    recipe = extra.get("recipe")
    if not isinstance(recipe, dict):
        return f"{path} holds no recipe: it was not saved by the shakespeare milestone"
    differs = [f"{key} {recipe.get(key)!r} (the recipe's is {RECIPE[key]!r})"
               for key in ARCHITECTURE if recipe.get(key) != RECIPE[key]]
    if extra.get("vocab_size") != vocab_size:
        differs.append(f"vocabulary {extra.get('vocab_size')!r} (the text's is {vocab_size})")
    if differs:
        return f"{path} is a different model: " + ", ".join(differs)
    if not fast and extra.get("iters") != RECIPE["iters"]:
        return (f"{path} was trained for {extra.get('iters')} iterations, the recipe's is {RECIPE['iters']} "
                "(a --fast or --iters run)")
    return None

def fused_path() -> tuple[object, str]:
    """(module 18's exported module tinytorch.perf.acceleration, "") when it is exported and has no stub
    left; otherwise (None, why): the milestone then trains the plain way."""
    try:
        from tinytorch.perf import acceleration
        from tinytorch.models.transformer import MLP
    except ImportError:
        return None, "module 18 (acceleration) is not exported"
    try:  # a tiny call of each part: a stub raises NotImplementedError
        acceleration.fuse(MLP(2, 4, seed=0))(np.zeros((1, 2), np.float32)).sum().backward()
        weight = Tensor(np.ones(2, np.float32), requires_grad=True)
        weight.grad = Tensor(np.ones(2, np.float32))
        acceleration.FusedAdamW([weight]).step()
    except NotImplementedError:
        return None, "module 18 (acceleration) still has stubs"
    return acceleration, ""


def data_parallel(acceleration: object, net: object) -> object:
    """Module 18's ThreadedDataParallel over 2 parts of each batch when NumPy may use at least 2 BLAS
    threads (OMP_NUM_THREADS, or all cores when it is not set); otherwise None, and None on a GPU, where
    it would run one part. Two parts, not one per core: 2 is the count measured (benchmarks/RESULTS.md),
    and a batch of 12 rows cut finer leaves each thread more Python, which runs one thread at a time."""
    if not hasattr(acceleration, "ThreadedDataParallel") or acceleration.blas_threads() < 2:
        return None
    parallel = acceleration.ThreadedDataParallel(net, threads=2)
    return parallel if parallel.threads > 1 else None


def keep_freed_memory() -> bool:
    """Module 18's `keep_freed_memory()` when module 18 is exported (given code: it works before the
    stubs are done): glibc keeps freed memory in the process, so a step does not fault its pages
    back in. Used on both paths here, and by the PyTorch recipe in benchmarks/gpt.py."""
    try:
        from tinytorch.perf.acceleration import keep_freed_memory as keep
    except ImportError:
        return False
    return keep()


def _ddp(net: object, world: object) -> object:
    """Module 21's DistributedDataParallel over `net` (imported here: a one-process run never needs module 21)."""
    from tinytorch.perf.distributed import DistributedDataParallel

    return DistributedDataParallel(net, world)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true",
                        help=f"200 iterations, 20 validation batches, threshold {FAST_THRESHOLD} (for the test suite)")
    parser.add_argument("--iters", type=positive_int, default=None,
                        help=f"training iterations, more than the {RECIPE['warmup']} warm-up steps "
                             "(default 2000; 200 with --fast)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"folder for the attention heat maps and the trained model ({CHECKPOINT})")
    parser.add_argument("--plain", action="store_true",
                        help="train module 13's model with module 06's AdamW even when module 18's fused path is there")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    iters = args.iters if args.iters is not None else (200 if args.fast else RECIPE["iters"])
    if iters <= RECIPE["warmup"]:  # the cosine schedule needs steps after its warm-up
        parser.error(f"--iters {iters}: the learning rate warms up for {RECIPE['warmup']} steps, so train for "
                     f"more than {RECIPE['warmup']}")
    check_output_folder(parser, args.out)  # before the minutes of training, not after them
    world = mpi_world(parser, args.device)  # None: one process
    if not device_ready(args.device):
        return 2
    lead = world is None or world.rank == 0  # the one process that prints, samples and saves
    console = Console(highlight=False, soft_wrap=True, quiet=not lead)
    if world is not None:  # the cores shared out among the ranks: 2 ranks on 2 cores, one BLAS thread each
        from threadpoolctl import threadpool_limits

        threadpool_limits(max(1, (os.cpu_count() or 1) // world.size))
    threshold, eval_batches = (FAST_THRESHOLD, 20) if args.fast else (THRESHOLD, EVAL_BATCHES)
    start = time.perf_counter()

    train, val, tokenizer = load_text()
    train, val = to_array(train, device=args.device), to_array(val, device=args.device)  # once, up front
    vocab = tokenizer.vocab_size
    # The model moves before the optimizer is made: its state then lives on the same device.
    model = GPT(vocab, RECIPE["embed_dim"], RECIPE["num_layers"], RECIPE["num_heads"], RECIPE["context"],
                dropout=0.0, tie_weights=True, bias=False, seed=1337).to(args.device)
    acceleration, why_plain = (None, "--plain") if args.plain else fused_path()
    # `net` is what trains: module 18's fused copy (sharing `model`'s weight tensors) when it is there,
    # its batches cut in two parts on two threads when NumPy may use two cores.
    net = model if acceleration is None else acceleration.fuse(model)
    parallel = None if acceleration is None or world is not None else data_parallel(acceleration, net)
    # On N ranks: module 21's DDP over `net` (the same weight tensors; rank 0's copied to all); its
    # backward leaves every gradient averaged over the ranks.
    trained = net if world is None else _ddp(net, world)
    make_optimizer = AdamW if acceleration is None else acceleration.FusedAdamW
    optimizer = make_optimizer(weight_decay_groups(net, RECIPE["weight_decay"]), lr=RECIPE["lr"], betas=RECIPE["betas"])
    scheduler = CosineWarmupLR(optimizer, warmup_steps=RECIPE["warmup"], total_steps=iters, min_lr=RECIPE["min_lr"])
    console.print(f"[bold]Shakespeare[/]: {len(train):,} training / {len(val):,} validation characters, "
                  f"vocabulary {vocab} (module 10's CharTokenizer); GPT {RECIPE['num_layers']} layers x {RECIPE['num_heads']} heads, "
                  f"width {RECIPE['embed_dim']}, context {RECIPE['context']}, "
                  f"{sum(p.size for p in model.parameters()):,} parameters; batch {RECIPE['batch']}, {iters} iterations; "
                  f"device {device_label(args.device)}")
    kept = keep_freed_memory()
    console.print("training path: " + ("fused (module 18): fuse(model) + FusedAdamW" if acceleration is not None
                                       else f"plain (module 13's model, module 06's AdamW): {why_plain}")
                  + (f"; each batch in {parallel.threads} parts on {parallel.threads} threads "
                     "(module 18's ThreadedDataParallel)" if parallel is not None else "")
                  + ("; glibc keeps freed memory (module 18's keep_freed_memory)" if kept else "")
                  + (f"; data-parallel on {world.size} MPI ranks (module 21's DistributedDataParallel), "
                     f"{RECIPE['batch'] // world.size} rows of every batch each, BLAS on "
                     f"{max(1, (os.cpu_count() or 1) // world.size)} thread(s) per rank" if world is not None else ""))

    batches, checks = np.random.default_rng(0), np.random.default_rng(1)
    console.print(f"iter    0: validation loss {estimate_loss(net, val, 10, checks, parallel, world):.4f} "
                  f"(a fresh model: about ln {vocab} = {math.log(vocab):.4f})")
    log_every = 50 if args.fast else 250
    running, tick, loop_seconds = [], time.perf_counter(), 0.0
    for it in range(1, iters + 1):
        x, y = share_of(*get_batch(train, RECIPE["batch"], RECIPE["context"], batches), world)
        optimizer.zero_grad()
        if parallel is None:
            _, loss = trained(Tensor(x), targets=Tensor(y))
            loss.backward()
        else:  # the same gradient, from two halves of the batch at once
            loss = parallel.forward_backward(Tensor(x), Tensor(y))
        clip_grad_norm(model.parameters(), RECIPE["clip"])
        optimizer.step()
        scheduler.step()
        running.append(loss.data)  # kept where it is: read once per log line, not once per step
        if it % log_every == 0 or it == iters:
            train_loss = mean_over_ranks(mean_of(running), world)  # waits for the device's queued work: the time below is all of it
            seconds = time.perf_counter() - tick
            loop_seconds += seconds  # the training steps only: the validation estimate below is not counted
            console.print(f"iter {it:4d}: training loss {train_loss:.4f}, "
                          f"validation loss {estimate_loss(net, val, 10, checks, parallel, world):.4f} (10 batches), "
                          f"lr {optimizer.lr:.2e}, {1e3 * seconds / len(running):.0f} ms/iter")
            running, tick = [], time.perf_counter()

    console.print(f"training loop: {loop_seconds:.1f} s for {iters} iterations (the validation estimates, the "
                  "sample, the heat maps and the checkpoint not counted)")
    val_loss = estimate_loss(net, val, eval_batches, np.random.default_rng(2), parallel, world)
    if not lead:  # the other ranks end here, with the same verdict (val_loss is the ranks' mean)
        return 0 if val_loss <= threshold else 1
    sample = model.generate(tokenizer.encode("\n"), 300 if not args.fast else 100,
                            temperature=0.8, top_k=200, seed=0)
    console.print("[bold]sample[/] (temperature 0.8, top_k 200):")
    console.print(tokenizer.decode(sample.numpy()[1:]), markup=False)

    line = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?"
    maps = model.attention_maps(np.array([tokenizer.encode(line)]), layer=-1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "shakespeare_attention_last_layer.png"
    shown = [repr(c)[1:-1] for c in line]
    figure = plot_attention_heads(maps, shown, shown, title="last layer, trained: one panel per head", path=path, cols=2)
    pyplot().close(figure)
    console.print(f"attention heat maps of the last layer: {path}")
    # Module 07's checkpoint (written to a scratch file, then renamed: never half a file), with the
    # recipe beside the weights so that a program loading it can check it is this model.
    saved = save_checkpoint(args.out / CHECKPOINT, model, step=iters, extra={
        "recipe": RECIPE, "iters": iters, "vocab_size": vocab, "seed": 1337, "val_loss": val_loss,
        "ranks": 1 if world is None else world.size})
    console.print(f"trained model: {saved} ({saved.stat().st_size:,} bytes; `tito milestone run quantize` loads it)")
    console.print(f"validation loss: mean over {eval_batches} random batches of {RECIPE['batch']} x {RECIPE['context']}")
    return verdict_at_most(console, "validation loss", val_loss, threshold, start)


if __name__ == "__main__":
    sys.exit(main())
