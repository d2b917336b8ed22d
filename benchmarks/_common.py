"""What every benchmark shares: one thread, the machine's description, interleaved timing,
the device (CPU or a GPU through CuPy), peak GPU memory, and writing one section of RESULTS.md.

Import this module FIRST, before NumPy: `one_thread()` must set the BLAS thread variables
before the BLAS library starts, or they are ignored.

    import _common  # noqa: F401  (sets one thread)
    import numpy as np
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from filelock import FileLock

from tinytorch.files import atomic_write

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def one_thread() -> None:
    """Run NumPy's BLAS on one thread, so the comparison is kernel against kernel."""
    use_threads(1)


def use_threads(threads: int) -> None:
    """Run NumPy's BLAS (and OpenMP) on `threads` threads; like one_thread, before NumPy is imported."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


def import_torch(threads: int = 1):
    """PyTorch on one thread (or `threads`), or None when it is not installed (the benchmark then
    measures ours alone)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def machine(torch=None) -> dict:
    """The facts a result needs beside it: module 19's `environment()` (CPU, cores, BLAS and its
    threads, Python, NumPy, TinyTorch, GPU, when), with "torch" the version of the PyTorch this
    benchmark compares with (`torch`), or "not installed" when it has none."""
    from tinytorch.perf.benchmarking import environment  # here, not at the top: NumPy must start after one_thread()

    info = environment()
    info["torch"] = torch.__version__ if torch is not None else "not installed"
    return info


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int,
                        sync: Callable[[], None] | None = None) -> dict[str, float]:
    """Median seconds of each function: module 19's `measure` (one warm-up call each, then the
    functions in turn, in an order that rotates every round).

    Without `sync` (the CPU) the clock is the process's CPU time (`time.process_time`):
    everything runs on one thread, so it is the work itself, and it does not grow when other
    programs take the core away. With `sync` (a GPU) it is wall-clock time, read after
    synchronising the device.
    """
    from tinytorch.perf.benchmarking import measure

    clock = time.process_time if sync is None else time.perf_counter
    measured = measure(fns, repeats=repeats, warmup=1, clock=clock, sync=sync or (lambda: None))
    return {name: m.median for name, m in measured.items()}


def threaded_medians(fns: dict[str, Callable[[], object]], repeats: int, block: int = 5) -> dict[str, float]:
    """Median wall-clock seconds of each function when the libraries run on several threads.

    The functions take turns in blocks: `block` calls of one, then `block` of the next, for
    `repeats` rounds; the first call of each block is not counted. Calling them in turn one by one
    (as interleaved_medians does) is unfair with threads: after a call, one library's worker
    threads keep spinning for a while (OpenMP and OpenBLAS both wait busily before they sleep)
    and take the cores from the other library's next call. CPU time would add the threads up.
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            for call in range(block):
                start = time.perf_counter()
                fn()
                if call:
                    samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def device_ready(name: str) -> bool:
    """True when `name` ("cpu" or "cuda") can be used here; otherwise print `error: <why>` as ONE
    line on stderr (what to install, or that no GPU is visible; no traceback) and return False:
    the benchmark then exits with status 2 before measuring anything."""
    from tinytorch.core.tensor import device_problem  # module 01's check, as the milestones use

    problem = device_problem(name)
    if problem is None:
        return True
    print(f"error: {' '.join(problem.split())}", file=sys.stderr)
    return False


class Device:
    """Where the arrays live: NumPy on the CPU, or CuPy on a GPU (timings then synchronise).

    `torch_module` is the PyTorch to compare with on this device: None when PyTorch is not
    installed, or on "cuda" when this PyTorch has no CUDA (a CPU build); `torch_note` then says
    why. Check `device_ready(name)` first: on "cuda" this imports CuPy.
    """

    def __init__(self, name: str, torch=None):
        self.name = name
        self.torch_module = torch
        self.torch_note = "" if torch is not None else "PyTorch is not installed: measuring TinyTorch alone (pip install torch)."
        if name == "cuda":
            import cupy

            self.cupy = cupy
            if torch is not None and not torch.cuda.is_available():
                self.torch_module = None
                self.torch_note = (f"PyTorch {torch.__version__} cannot use the GPU (a CPU build, or no CUDA): "
                                   "measuring TinyTorch alone; install a CUDA build of torch to compare.")

    @property
    def torch_device(self) -> str:
        return "cuda" if self.name == "cuda" else "cpu"

    @property
    def sync(self) -> Callable[[], None] | None:
        """None on the CPU (CPU time needs no waiting); on a GPU, a function that waits for
        CuPy's and PyTorch's queued work: pass it to `interleaved_medians`."""
        if self.name != "cuda":
            return None

        def wait() -> None:
            self.cupy.cuda.Device().synchronize()
            if self.torch_module is not None and self.torch_module.cuda.is_available():
                self.torch_module.cuda.synchronize()

        return wait

    def tensor(self, array, requires_grad: bool = False):
        from tinytorch.core.tensor import Tensor

        return Tensor(array, requires_grad=requires_grad, device=self.name)

    def torch(self, array, requires_grad: bool = False):
        return self.torch_module.tensor(array, device=self.torch_device).requires_grad_(requires_grad)


def _section_span(text: str, heading: str) -> tuple[int, int] | None:
    """(start, end) of the section whose heading line is exactly `heading`, up to the next
    `## ` heading or the end; None when there is none. A whole line must match, so that
    "## Attention (module 12)" never finds "## Attention (module 12) on GPU: ..."."""
    found = re.search(rf"^{re.escape(heading)}[ \t]*$", text, flags=re.MULTILINE)
    if found is None:
        return None
    end = text.find("\n## ", found.end())
    return found.start(), len(text) if end < 0 else end + 1


def results_lock(results: Path = RESULTS) -> FileLock:
    """The lock every writer of `results` holds from its read to its write (`.RESULTS.md.lock` beside it):
    two benchmarks finishing at once would otherwise each write the file they read, and one section
    would be lost. The operating system releases it when a process dies."""
    return FileLock(str(results.with_name(f".{results.name}.lock")))


def write_section(heading: str, section: str, results: Path = RESULTS, after: str | None = None) -> Path:
    """Put `section` (which starts with the line `heading`) into RESULTS.md: replace the
    section with that heading; else insert it just after the section headed `after` (when
    given and present), else append it. The other sections stay as they are, also when
    other benchmarks write theirs at the same time (`results_lock`)."""
    section = section.rstrip("\n") + "\n"
    with results_lock(results):
        text = results.read_text(encoding="utf-8") if results.is_file() else "# Benchmark results\n\n"
        span = _section_span(text, heading)
        if span is not None:
            before, rest = text[:span[0]], text[span[1]:]
        else:
            anchor = _section_span(text, after) if after is not None else None
            cut = len(text) if anchor is None else anchor[1]
            before, rest = text[:cut].rstrip("\n") + "\n\n", text[cut:]
        text = before + section + ("\n" + rest if rest else "")
        with atomic_write(results, "w", encoding="utf-8") as handle:  # a run killed here keeps the old file whole
            handle.write(text)
    return results


def save_figure(fig, path: Path, **savefig) -> Path:
    """A matplotlib figure saved as the PNG `path` through atomic_write: a run killed while it
    saves (or a full disk) keeps the committed picture whole."""
    with atomic_write(path) as handle:
        fig.savefig(handle, format="png", **savefig)
    return path


# ---- the GPU: facts for RESULTS.md, and peak memory measured on the device ----------------------
# (the memory itself is measured by tinytorch.perf.profiling.CupyMemory, module 14's given code)
def gpu_facts(torch=None) -> dict:
    """The GPU's name and memory, CuPy's version, the CUDA runtime and driver, PyTorch and its CUDA."""
    import cupy

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def version(number: int) -> str:  # 12040 -> "12.4"
        return f"{number // 1000}.{number % 1000 // 10}"

    return {
        "gpu": name,
        "gpu_memory": f"{props['totalGlobalMem'] / 2**30:.0f} GiB",
        "cupy": cupy.__version__,
        "cuda_runtime": version(runtime.runtimeGetVersion()),
        "cuda_driver": version(runtime.driverGetVersion()),
        "torch": torch.__version__ if torch is not None else "not used",
        "torch_cuda": (torch.version.cuda or "none") if torch is not None else "-",
    }


def open_device(name: str, torch, console, title: str) -> tuple["Device", dict, dict | None]:
    """(device, machine facts, GPU facts or None) for `--device name`, with the benchmark's header
    line printed: what it runs on and with which versions, and why PyTorch is left out, if it is.
    The caller then uses `device.torch_module` as its torch (None without a usable PyTorch)."""
    device = Device(name, torch)
    info = machine(device.torch_module)
    facts = gpu_facts(device.torch_module) if device.name == "cuda" else None
    where = "one thread" if facts is None else f"GPU {facts['gpu']}, CuPy {facts['cupy']}, CUDA {facts['cuda_runtime']}"
    console.print(f"[bold]{title}[/bold] — {info['cpu']} ({info['cores']} cores), {where}; "
                  f"NumPy {info['numpy']} ({info['blas']}), PyTorch {info['torch']}, {info['date']}")
    if device.torch_note:
        console.print(f"[yellow]{device.torch_note}[/yellow]")
    return device, info, facts


def doubling_table(rows: list[dict], size_key: str, columns: dict[str, str],
                   ratio: tuple[str, str] | None = None) -> list[str]:
    """Markdown lines of a "time as the size doubles" table.

    rows    -- one dict per size: `size_key` (the size) and a time in seconds per key of `columns`
    columns -- key -> column label; each key gets its time (ms) and "× prev", its ratio to the row before
    ratio   -- (ours, theirs): a last column "ratio" with row[ours] / row[theirs]
    """
    header = f"| {size_key} |" + "".join(f" {label} | × prev |" for label in columns.values())
    lines = [header + (" ratio |" if ratio else ""), "|" + "---:|" * (1 + 2 * len(columns) + bool(ratio))]
    for i, row in enumerate(rows):
        prev = rows[i - 1] if i else None
        cells = [str(row[size_key])]
        for key in columns:
            cells += [f"{row[key] * 1e3:.2f} ms", f"{row[key] / prev[key]:.2f}" if prev else ""]
        if ratio:
            cells.append(f"{row[ratio[0]] / row[ratio[1]]:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def gpu_speed_table(speed: list[dict], repeats: int) -> list[str]:
    """Markdown lines of the GPU speed table: one row per benchmark (`name`, `ours` and `torch` in
    seconds, and `torch_label`, what PyTorch ran, when the row has one)."""
    lines = [f"### Speed against PyTorch on the GPU (forward + backward, float32, median of {repeats} "
             "interleaved runs)", "",
             "| benchmark | TinyTorch | PyTorch | ratio |", "|---|---:|---:|---:|"]
    for row in speed:
        ratio = f"{row['ours'] / row['torch']:.2f}×" if row["torch"] else "-"
        label = f" ({row['torch_label']})" if row.get("torch_label") else ""
        theirs = f"{row['torch'] * 1e3:.2f} ms{label}" if row["torch"] else "not measured"
        lines.append(f"| {row['name'].strip()} | {row['ours'] * 1e3:.2f} ms | {theirs} | {ratio} |")
    return lines


def gpu_heading(title: str, facts: dict) -> str:
    """The heading of a benchmark's GPU section, e.g. "## Attention (module 12) on GPU: NVIDIA H100
    80GB HBM3": one section per benchmark and GPU model, beside the CPU section, never replacing it."""
    return f"{title} on GPU: {facts['gpu']}"


def gpu_facts_lines(info: dict, facts: dict, command: str) -> list[str]:
    """The lines under a GPU section's heading: when, with what, and how the clock was read."""
    return [
        f"Measured {info['date']} with `{command}`.",
        "",
        f"* GPU: {facts['gpu']} ({facts['gpu_memory']}); CUDA runtime {facts['cuda_runtime']}, "
        f"driver {facts['cuda_driver']}; CuPy {facts['cupy']}.",
        f"* PyTorch {facts['torch']} (CUDA {facts['torch_cuda']}); Python {info['python']}, NumPy {info['numpy']}; "
        f"host CPU: {info['cpu']}.",
        "* Times are wall-clock (`time.perf_counter`) read after synchronising the device (CuPy's and",
        "  PyTorch's queued work both finished), ours and PyTorch's runs interleaved, medians reported.",
        "  TinyTorch on a GPU is CuPy kernels launched one NumPy-style call at a time from Python:",
        "  at small sizes the launch overhead, not the GPU, sets its time.",
    ]


def cupy_peak_bytes(prepare: Callable[[], object], run: Callable[[object], object]) -> tuple[int, int, float]:
    """(peak bytes in use, bytes the pool reserved, wall seconds) of `run(prepare())` on the GPU,
    measured by module 14's `CupyMemory` (tinytorch.perf.profiling: a fresh CuPy pool read after
    every allocation); what `prepare` allocates (the inputs) is not counted."""
    from tinytorch.perf.profiling import CupyMemory  # here, not at the top: NumPy must start after one_thread()

    with CupyMemory() as memory:
        inputs = prepare()
        memory.start()
        start = time.perf_counter()
        run(inputs)
        memory.cupy.cuda.Device().synchronize()
        seconds = time.perf_counter() - start
        del inputs
    memory.pool.free_all_blocks()
    return memory.peak, memory.reserved, seconds


# ---- the Shakespeare GPT the milestone trained (quantization and benchmarking use it) ---------------
def shakespeare_model_arguments(doc: str, section: str, quick_help: str, argv: list[str] | None):
    """The command line of a benchmark of the milestone's model: --quick (`quick_help`), --checkpoint (the
    shakespeare milestone's file by default), --write-results (rewrites RESULTS.md's `section`; refused
    with --quick, whose numbers are a smoke run's). `doc`: the script's docstring (its first line is
    the description). Returns the parsed arguments."""
    import argparse

    milestones = str(Path(__file__).resolve().parent.parent / "milestones")
    if milestones not in sys.path:
        sys.path.insert(0, milestones)
    import quantize as quantize_milestone

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--checkpoint", type=Path, default=quantize_milestone.DEFAULT_CHECKPOINT,
                        help="the shakespeare milestone's model (trained there first when missing, except with --quick)")
    parser.add_argument("--write-results", action="store_true", help=f"rewrite {RESULTS.name}'s {section} section")
    args = parser.parse_args(argv)
    if args.quick and args.write_results:
        parser.error("--quick is a smoke run: its numbers are not written to RESULTS.md")
    return args


def shakespeare_model(checkpoint: Path, quick: bool, console) -> tuple[object, str]:
    """(the shakespeare milestone's trained GPT, where it came from): milestones/quantize.py finds the file
    and checks its recipe, training it first when it is missing; with `quick` and no saved model, an
    UNTRAINED GPT of the recipe (a smoke run's numbers mean nothing, and say so)."""
    milestones = str(Path(__file__).resolve().parent.parent / "milestones")
    if milestones not in sys.path:
        sys.path.insert(0, milestones)
    import quantize as quantize_milestone
    import shakespeare

    from tinytorch.models.transformer import GPT

    _, _, tokenizer = shakespeare.load_text()
    if quick and not checkpoint.exists():
        recipe = shakespeare.RECIPE
        model = GPT(tokenizer.vocab_size, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"],
                    recipe["context"], tie_weights=True, bias=False, seed=0)
        return model.eval(), "an UNTRAINED GPT of the recipe (--quick, no saved model): numbers without meaning"
    found = quantize_milestone.trained_model(checkpoint, tokenizer.vocab_size, quick, "cpu", console)
    if isinstance(found, str):
        raise SystemExit(f"error: {found}")
    model, path, iters = found
    return model, f"the shakespeare milestone's model ({iters} iterations, {path.name})"
