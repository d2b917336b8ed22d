"""The milestones, end to end: each runs with --fast as a subprocess, exits 0 and prints a passing metric.

On a machine with CuPy and an NVIDIA GPU the same runs happen again with `--device cuda`
(marked `gpu`, skipped elsewhere); without CuPy, `--device cuda` must stop at once with one line
that says what to install.
"""
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devices import requires_gpu

ROOT = Path(__file__).resolve().parents[2]
MILESTONES = ROOT / "milestones"
RESULT = re.compile(r"accuracy ([0-9.]+)% vs threshold ([0-9.]+)%: (PASS|FAIL)")
LOSS_RESULT = re.compile(r"loss ([0-9.]+) vs threshold at most ([0-9.]+): (PASS|FAIL)")

# name -> the smallest accuracy (in %) its --fast run must report
EXPECTED = {"xor": 100.0, "spirals": 95.0, "digits_mlp": 90.0, "digits_cnn": 97.0, "reversal": 90.0}
# name -> the largest loss its --fast run may report (lower is better)
EXPECTED_LOSS = {"shakespeare": 2.7}
# name -> the checks its --fast run must pass (several thresholds, one line each: `_verdict.verdict_checks`)
EXPECTED_CHECKS = {
    "compress": ("structured pruning: validation loss", "low rank: validation loss"),
    "quantize": ("int8 weight-only loss increase", "int8 dynamic loss increase", "int4 weight-only loss increase",
                 "int8 weight-only bits the weights use", "int8 dynamic bits the weights use",
                 "int4 weight-only bits the weights use", "int8 checkpoint, times smaller than fp32"),
    "olympics": ("fp32 baseline qualifies (1 = yes)", "int8 qualifies (1 = yes)",
                 "int8 checkpoint, times smaller than fp32", "smallest: entries whose rank differs between 2 runs"),
}
# quantize and olympics load the model that shakespeare's --fast run saved: their own tests below
CHECKS_RUN_ALONE = sorted(set(EXPECTED_CHECKS) - {"quantize", "olympics"})
CHECK_RESULT = re.compile(r"^(.+?) (-?[0-9.]+) vs threshold (at least|at most|above) (-?[0-9.]+): "
                          r"(PASS|FAIL|printed, not judged)$", re.MULTILINE)

pytestmark = pytest.mark.slow


def run_milestone(name: str, *args: str, timeout: float = 120, env: dict | None = None,
                  first_on_path: Path | None = None) -> subprocess.CompletedProcess:
    path = [str(first_on_path) if first_on_path else None, str(ROOT), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(filter(None, path)))
    return subprocess.run([sys.executable, str(MILESTONES / f"{name}.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_every_milestone_file_is_covered_and_documented():
    found = {p.stem for p in MILESTONES.glob("*.py") if not p.name.startswith("_")}
    assert set(EXPECTED) | set(EXPECTED_LOSS) | set(EXPECTED_CHECKS) <= found
    for name in [*EXPECTED, *EXPECTED_LOSS, *EXPECTED_CHECKS]:
        text = (MILESTONES / f"{name}.py").read_text(encoding="utf-8")
        first_line = text.split('"""')[1].strip().splitlines()[0]
        assert len(first_line) > 20, f"{name}.py: the docstring's first line should describe the milestone"


def check_accuracy_run(name: str, result: subprocess.CompletedProcess, device: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} --fast --device {device} exited {result.returncode}:\n{output[-3000:]}"
    matches = RESULT.findall(output)
    assert matches, f"{name} printed no 'accuracy ...% vs threshold ...%: PASS' line:\n{output[-3000:]}"
    accuracy, threshold, verdict = matches[-1]
    assert verdict == "PASS"
    assert float(accuracy) >= float(threshold) >= EXPECTED[name]
    assert "epoch" in output  # progress was printed while training
    assert f"device {device}" in output.splitlines()[0], "the header line names the device"


def check_loss_run(name: str, result: subprocess.CompletedProcess, device: str, out: Path) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} --fast --device {device} exited {result.returncode}:\n{output[-3000:]}"
    matches = LOSS_RESULT.findall(output)
    assert matches, f"{name} printed no 'loss ... vs threshold at most ...: PASS' line:\n{output[-3000:]}"
    loss, threshold, verdict = matches[-1]
    assert verdict == "PASS" and float(loss) <= float(threshold) <= EXPECTED_LOSS[name]
    assert "iter" in output and "sample" in output  # progress while training, a sample at the end
    assert any(p.suffix == ".png" and p.stat().st_size > 10_000 for p in out.iterdir()), "heat maps saved"
    assert f"device {device}" in output.splitlines()[0], "the header line names the device"


# One BLAS thread: the models' matrices are small, and on a busy machine BLAS threads that
# wait for each other can make a step ten times slower.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Shakespeare on two: with module 18 done, its fused path then cuts each batch into two parts on two
# threads (ThreadedDataParallel, one BLAS thread each), the path the README's full run takes.
TWO_THREADS = {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_milestone_passes_in_fast_mode(name):
    check_accuracy_run(name, run_milestone(name, "--fast"), "cpu")


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    """run(name) -> (result, out folder): each loss milestone's --fast run, made once per module and shared
    (the quantize milestone loads the model that shakespeare's run saved)."""
    runs = {}

    def run(name: str):
        if name not in runs:
            out = tmp_path_factory.mktemp(name)
            threads = TWO_THREADS if name == "shakespeare" else ONE_THREAD
            runs[name] = (run_milestone(name, "--fast", "--out", str(out), timeout=900, env=threads), out)
        return runs[name]

    return run


@pytest.mark.parametrize("name", sorted(EXPECTED_LOSS))
def test_loss_milestone_passes_in_fast_mode(name, fast_run):
    # About 30 s on an idle machine.
    result, out = fast_run(name)
    check_loss_run(name, result, "cpu", out)
    output = result.stdout + result.stderr
    if name == "shakespeare" and "training path: fused (module 18)" in output:
        assert "each batch in 2 parts on 2 threads (module 18's ThreadedDataParallel)" in output, \
            f"on 2 threads the fused path cuts each batch in two:\n{output[:1500]}"


def run_tito_killing_the_group(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`python -m tito ARGS` from the repository root in a session of its own; past `timeout` seconds
    the whole session (tito, mpiexec and every rank) is killed and the test fails: never a hang."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               COLUMNS="200", NO_COLOR="1")
    process = subprocess.Popen([sys.executable, "-m", "tito", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"tito {' '.join(args)} ran past {timeout} s and was stopped:\n{output[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, output, "")


def test_shakespeare_on_two_ranks_trains_the_same_recipe_to_the_same_loss(fast_run, tmp_path):
    """`tito milestone run shakespeare --ranks 2 --fast`: data-parallel on 2 MPI processes (module 21), each
    rank 6 rows of every batch of 12; passes its threshold, only rank 0 prints and saves, and, being the
    same recipe, ends at the validation loss of the one-process run (within 0.02: the gradients are
    summed in another order). About a minute and a half on a busy 2-core machine; stopped at 15 minutes."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py mpich)")
    pytest.importorskip("tinytorch.perf.distributed", reason="module 21 (distributed) is not exported: tito export 21")
    if shutil.which("mpiexec") is None and not (Path(sys.executable).parent / "mpiexec").exists():
        pytest.skip("no mpiexec beside this Python or on PATH (pip install mpich)")
    out = tmp_path / "ranks"
    result = run_tito_killing_the_group(["milestone", "run", "shakespeare", "--ranks", "2", "--fast", "--out", str(out)],
                                        timeout=900)
    output = result.stdout
    assert result.returncode == 0, f"shakespeare --ranks 2 --fast exited {result.returncode}:\n{output[-3000:]}"
    loss, threshold, verdict = LOSS_RESULT.findall(output)[-1]
    assert verdict == "PASS" and float(loss) <= float(threshold) <= EXPECTED_LOSS["shakespeare"]
    assert "data-parallel on 2 MPI ranks (module 21's DistributedDataParallel), 6 rows of every batch each" in output
    for once in ("Shakespeare: ", "sample (temperature", "trained model: "):
        assert output.count(once) == 1, f"only rank 0 prints: {once!r} appears {output.count(once)} times:\n{output[-3000:]}"
    assert len(LOSS_RESULT.findall(output)) == 1, "only rank 0 prints the verdict"
    from tinytorch.core.training import read_checkpoint

    assert read_checkpoint(out / "shakespeare_gpt.npz")["extra"]["ranks"] == 2
    one_process, _ = fast_run("shakespeare")
    one_loss = float(LOSS_RESULT.findall(one_process.stdout + one_process.stderr)[-1][0])
    assert abs(float(loss) - one_loss) <= 0.02, \
        f"2 ranks ended at validation loss {loss}, one process at {one_loss}: not the same recipe"


def test_shakespeare_refuses_ranks_that_do_not_split_its_batch():
    """5 ranks cannot share a batch of 12 rows evenly: every rank stops before training, rank 0 names the
    rule once, and MPI ends cleanly (no MPI_Abort: an aborted MPICH run leaves its shared memory in /dev/shm)."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py mpich)")
    pytest.importorskip("tinytorch.perf.distributed", reason="module 21 (distributed) is not exported: tito export 21")
    result = run_tito_killing_the_group(["milestone", "run", "shakespeare", "--ranks", "5", "--fast"], timeout=300)
    assert result.returncode == 2, result.stdout
    rule = "5 ranks: the batch of 12 rows must split evenly (ranks dividing 12: 1, 2, 3, 4, 6, 12)"
    assert result.stdout.count(rule) == 1, f"rank 0 alone says why:\n{result.stdout}"
    assert "MPI_Abort" not in result.stdout, f"a refusal every rank reaches ends MPI cleanly:\n{result.stdout}"
    assert "iter " not in result.stdout, "refused before any training"


def check_checks_output(name: str, output: str) -> None:
    """Every expected check of the milestone printed PASS, and no check failed."""
    results = {label: verdict for label, _, _, _, verdict in CHECK_RESULT.findall(output)}
    for label in EXPECTED_CHECKS[name]:
        assert results.get(label) == "PASS", f"{name}: no '{label} ... PASS' line:\n{output[-3000:]}"
    assert "FAIL" not in results.values(), results


def check_checks_run(name: str, result: subprocess.CompletedProcess, device: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} --fast --device {device} exited {result.returncode}:\n{output[-3000:]}"
    check_checks_output(name, output)
    assert "iter" in output, "progress was printed while training"
    assert f"device {device}" in output.splitlines()[0], "the header line names the device"


@pytest.mark.parametrize("name", CHECKS_RUN_ALONE)
def test_checks_milestone_passes_in_fast_mode(name):
    # About a minute on an idle machine: a short baseline, two fine-tunes, two students.
    check_checks_run(name, run_milestone(name, "--fast", timeout=900, env=ONE_THREAD), "cpu")


# ---- the same on a GPU: the same recipe and threshold, model and data on the device ----------------
@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_milestone_passes_in_fast_mode_on_the_gpu(name):
    check_accuracy_run(name, run_milestone(name, "--fast", "--device", "cuda", timeout=600, env=ONE_THREAD), "cuda")


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("name", sorted(EXPECTED_LOSS))
def test_loss_milestone_passes_in_fast_mode_on_the_gpu(name, tmp_path):
    result = run_milestone(name, "--fast", "--device", "cuda", "--out", str(tmp_path), timeout=900, env=ONE_THREAD)
    check_loss_run(name, result, "cuda", tmp_path)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("name", CHECKS_RUN_ALONE)
def test_checks_milestone_passes_in_fast_mode_on_the_gpu(name):
    check_checks_run(name, run_milestone(name, "--fast", "--device", "cuda", timeout=900, env=ONE_THREAD), "cuda")


def test_quantize_quantizes_the_model_shakespeare_saved(fast_run, tmp_path):
    # The shakespeare milestone's --fast run saved its model (a module-07 checkpoint with its recipe); quantize
    # loads it, checks the recipe, and evaluates and saves the four versions. About 15 s on an idle machine
    # (the dynamic model's integer products are most of it: NumPy has no integer BLAS). Training first when
    # the file is missing is shakespeare.main itself, run by the full milestone.
    _, out = fast_run("shakespeare")
    checkpoint = out / "shakespeare_gpt.npz"
    assert checkpoint.is_file(), "the shakespeare milestone saves its trained model in --out"
    result = run_milestone("quantize", "--fast", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "quantized"),
                           timeout=900, env=ONE_THREAD)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"quantize --fast exited {result.returncode}:\n{output[-3000:]}"
    assert output.startswith("Quantize:") and "device cpu" in output.splitlines()[0], "the header names the device"
    for name in ("fp32", "int8 weight-only", "int8 dynamic", "int4 weight-only"):
        assert re.search(rf"^{name} +validation loss [0-9.]+ .*checkpoint +[0-9,]+ bytes", output, re.MULTILINE), name
    check_checks_output("quantize", output)
    saved = sorted(p.name for p in (tmp_path / "quantized").iterdir())
    assert len(saved) == 4 and all(name.endswith(".npz") for name in saved), saved



@pytest.mark.parametrize("named,used", [(4, 3), (8, 6)])
def test_quantize_fails_for_a_width_narrower_than_its_name(fast_run, tmp_path, monkeypatch, capsys, named, used):
    # The milestone itself, run in this process on the model shakespeare's --fast run saved, with quantize_model
    # made to use int{used} where the milestone asks for int{named} weight-only: the run must fail, and say which.
    _, out = fast_run("shakespeare")
    spec = importlib.util.spec_from_file_location("quantize_milestone", MILESTONES / "quantize.py")
    quantize = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(MILESTONES))  # quantize.py imports shakespeare.py and the helpers from there
    try:
        spec.loader.exec_module(quantize)
    finally:
        sys.path.remove(str(MILESTONES))
    real = quantize.quantize_model

    def narrower(model, mode="weight_only", bits=8, **options):
        return real(model, mode, used if (mode, bits) == ("weight_only", named) else bits, **options)

    monkeypatch.setattr(quantize, "quantize_model", narrower)
    code = quantize.main(["--fast", "--checkpoint", str(out / "shakespeare_gpt.npz"), "--out", str(tmp_path / "q")])
    output = capsys.readouterr().out
    results = {label: verdict for label, _, _, _, verdict in CHECK_RESULT.findall(output)}
    assert code == 1, f"int{used} weights called int{named}: the milestone must fail, it exited {code}:\n{output}"
    assert results.get(f"int{named} weight-only bits the weights use") == "FAIL", output

def test_olympics_judges_the_reference_entries(fast_run, tmp_path):
    # The reference entries built from the model shakespeare's --fast run saved, each judged in the sandbox
    # twice (smallest and generation); about a minute on an idle machine.
    _, out = fast_run("shakespeare")
    result = run_milestone("olympics", "--fast", "--checkpoint", str(out / "shakespeare_gpt.npz"),
                           "--out", str(tmp_path / "olympics"), timeout=900, env=ONE_THREAD)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"olympics --fast exited {result.returncode}:\n{output[-3000:]}"
    check_checks_output("olympics", output)
    board = (tmp_path / "olympics" / "leaderboard.md").read_text(encoding="utf-8")
    for name in ("fp32", "int8", "int4", "pruned", "distilled", "fused", "checkpointed"):
        assert f"| {name} |" in board, f"the leaderboard has no row for the reference entry {name}:\n{board}"
    assert (tmp_path / "olympics" / "pareto.png").stat().st_size > 10_000, "the Pareto plot is written"


def test_olympics_reproducibility_counts_opposite_orders_not_ties():
    """Two runs contradict each other only when one ranks a before b and the other b before a."""
    spec = importlib.util.spec_from_file_location("olympics_milestone", MILESTONES / "olympics.py")
    olympics = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(MILESTONES))  # olympics.py imports the other milestones and their helpers
    try:
        spec.loader.exec_module(olympics)
    finally:
        sys.path.remove(str(MILESTONES))
    runs = [{"a": 1, "b": 2, "c": 2, "gone": None}, {"a": 1, "b": 1, "c": 3, "gone": 4}, {"a": 2, "b": 1, "c": 3, "gone": 1}]
    assert olympics.opposite_orders(runs) == [("a", "b")], "a before b in run 1, after it in run 3; b, c only tie"
    assert olympics.opposite_orders(runs[:2]) == [], "a tie in one run and an order in the other is no contradiction"


@pytest.mark.parametrize("case", ["other-width", "foreign", "fast-model-in-a-full-run"])
def test_quantize_refuses_a_checkpoint_that_is_not_the_recipe(tmp_path, case):
    spec = importlib.util.spec_from_file_location("shakespeare_milestone", MILESTONES / "shakespeare.py")
    shakespeare = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(MILESTONES))  # shakespeare.py imports its helpers (_device, _verdict) from there
    try:
        spec.loader.exec_module(shakespeare)
    finally:
        sys.path.remove(str(MILESTONES))
    from tinytorch.core.training import save_checkpoint
    from tinytorch.models.transformer import GPT

    recipe = dict(shakespeare.RECIPE, embed_dim=32 if case == "other-width" else shakespeare.RECIPE["embed_dim"])
    model = GPT(65, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"], recipe["context"], bias=False)
    extra = None if case == "foreign" else {"recipe": recipe, "vocab_size": 65,
                                            "iters": 200 if case == "fast-model-in-a-full-run" else recipe["iters"]}
    path = save_checkpoint(tmp_path / "model.npz", model, extra=extra)
    before = path.read_bytes()
    result = run_milestone("quantize", *([] if case == "fast-model-in-a-full-run" else ["--fast"]),
                           "--checkpoint", str(path), "--out", str(tmp_path / "out"))
    expected = {"other-width": "embed_dim 32 (the recipe's is 128)", "foreign": "holds no recipe",
                "fast-model-in-a-full-run": "trained for 200 iterations, the recipe's is 2000"}[case]
    assert_one_line_error(result, expected, "tito milestone run shakespeare")
    assert path.read_bytes() == before, "nothing written, nothing trained"


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stdout == "", result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
@pytest.mark.parametrize("name", sorted([*EXPECTED, *EXPECTED_LOSS, *EXPECTED_CHECKS]))
def test_cuda_without_cupy_stops_with_one_line_naming_the_gpu_extra(name):
    assert_one_line_error(run_milestone(name, "--fast", "--device", "cuda"), 'pip install -e ".[gpu]"')


def test_cuda_with_cupy_but_no_gpu_stops_with_one_line(tmp_path):
    # A stand-in CuPy, first on the path, whose runtime finds no device (as on a machine without a driver).
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(
        "class CUDARuntimeError(RuntimeError):\n    pass\n\n\n"
        "class runtime:\n    CUDARuntimeError = CUDARuntimeError\n\n"
        "    @staticmethod\n    def getDeviceCount():\n"
        "        raise CUDARuntimeError('cudaErrorNoDevice: no CUDA-capable device is detected')\n\n\n"
        "class cuda:\n    runtime = runtime\n", encoding="utf-8")
    assert_one_line_error(run_milestone("xor", "--device", "cuda", first_on_path=tmp_path), "no NVIDIA GPU")


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


# ---- issue 20: arguments and output paths are checked before any training ----------------------

@pytest.mark.parametrize("name, args, says", [
    ("shakespeare", ["--iters", "0"], "argument --iters: 0 is not at least 1"),
    ("shakespeare", ["--iters", "50"], "--iters 50: the learning rate warms up for 100 steps"),
    ("shakespeare", ["--iters", "2.5"], "argument --iters: '2.5' is not a whole number"),
    ("shakespeare", ["--out", "{file}"], "it exists and is not a folder"),
    ("shakespeare", ["--out", "{read_only}/maps"], "cannot write there"),
    ("reversal", ["--heatmap", "{read_only}/map.png"], "cannot write in"),
    ("reversal", ["--heatmap", "{folder}"], "it is a folder"),
    ("reversal", ["--seed", "-1"], "argument --seed: -1 is negative"),
    ("quantize", ["--out", "{file}"], "it exists and is not a folder"),
    ("quantize", ["--checkpoint", "{read_only}/model.npz"], "--checkpoint {read_only}: cannot write there"),
    ("quantize", ["--checkpoint", "{folder}"], "it is a folder"),
    ("compress", ["--baseline", "{folder}"], "it is a folder"),
    ("compress", ["--baseline", "{read_only}/baseline.npz"], "cannot write in"),
    ("olympics", ["--fast", "--speedrun"], "--speedrun trains to validation loss 1.95 from scratch: run it without --fast"),
], ids=["iters-0", "iters-below-warmup", "iters-fraction", "out-is-a-file", "out-read-only", "heatmap-read-only",
        "heatmap-is-a-folder", "negative-seed", "quantize-out-is-a-file", "quantize-checkpoint-read-only",
        "quantize-checkpoint-is-a-folder", "baseline-is-a-folder", "baseline-read-only", "olympics-fast-speedrun"])
@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                    reason="running as root without setpriv: a read-only folder cannot stop root")
def test_bad_arguments_stop_a_milestone_before_it_trains(tmp_path, name, args, says):
    """Before issue 20, --iters 0 trained 2,000 iterations and a read-only --out failed after them."""
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    args = [a.format(file=tmp_path / "file", read_only=read_only, folder=tmp_path) for a in args]
    read_only.chmod(0o555)
    prefix = []
    if os.geteuid() == 0:  # root writes anywhere: drop its capabilities, as tests/tito do
        prefix = [shutil.which("setpriv"), "--bounding-set=-all", "--inh-caps=-all"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        result = subprocess.run([*prefix, sys.executable, str(MILESTONES / f"{name}.py"), *args], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
    finally:
        read_only.chmod(0o755)
    says = says.format(read_only=read_only)
    assert result.returncode == 2 and says in result.stderr, result.stdout[-1000:] + result.stderr[-1000:]
    assert result.stdout == "" and "Traceback" not in result.stderr, "it stopped before printing a header or training"


def test_compress_refuses_a_baseline_that_is_not_the_recipe(tmp_path):
    from tinytorch.core.training import save_checkpoint
    from tinytorch.models.transformer import GPT

    path = save_checkpoint(tmp_path / "narrow.npz", GPT(65, 32, 2, 4, 64, bias=False))
    before = path.read_bytes()
    result = run_milestone("compress", "--fast", "--baseline", str(path))
    assert_one_line_error(result, "is not the shakespeare recipe's model", "embed_dim=32 in the file, 128 here")
    assert path.read_bytes() == before, "the file given is left as it was"


@pytest.mark.parametrize("milestone", ["quantize", "compress"])
def test_a_checkpoint_with_one_nan_weight_stops_the_milestone_with_one_line(tmp_path, milestone):
    """Issue 31: quantize printed a traceback listing 128 numbers, compress failed after 49 s inside LAPACK."""
    spec = importlib.util.spec_from_file_location("shakespeare_milestone", MILESTONES / "shakespeare.py")
    shakespeare = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(MILESTONES))
    try:
        spec.loader.exec_module(shakespeare)
    finally:
        sys.path.remove(str(MILESTONES))
    from tinytorch.core.training import save_checkpoint
    from tinytorch.models.transformer import GPT

    recipe = shakespeare.RECIPE
    model = GPT(65, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"], recipe["context"],
                dropout=0.0, tie_weights=True, bias=False)
    name, weight = [(n, p) for n, p in model.named_parameters() if p.ndim == 2][3]
    weight.data[0, 5] = float("nan")
    path = save_checkpoint(tmp_path / "diverged.npz", model,
                           extra={"recipe": recipe, "vocab_size": 65, "iters": recipe["iters"]})
    before = path.read_bytes()
    args = (["--checkpoint", str(path), "--out", str(tmp_path / "out")] if milestone == "quantize"
            else ["--baseline", str(path)])
    result = run_milestone(milestone, "--fast", *args, timeout=60)
    assert_one_line_error(result, f"{path}: parameter {name!r} holds 1 NaN or infinite value(s)")
    out = tmp_path / "out"  # quantize's argument check makes --out (it must take files) but writes nothing in it
    assert path.read_bytes() == before and (not out.exists() or not any(out.iterdir())), "nothing written"


def test_non_finite_weights_passes_a_finite_checkpoint_and_names_an_unreadable_one(tmp_path):
    """milestones/_args.py's check: None for a healthy file (the milestones then run as before)."""
    spec = importlib.util.spec_from_file_location("milestone_args", MILESTONES / "_args.py")
    args = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(args)
    from tinytorch.core.layers import Linear
    from tinytorch.core.training import save_checkpoint

    layer = Linear(3, 2, seed=0)
    assert args.non_finite_weights(save_checkpoint(tmp_path / "ok.npz", layer)) is None
    layer.weight.data[1, 1] = float("-inf")
    said = args.non_finite_weights(save_checkpoint(tmp_path / "bad.npz", layer))
    assert said == f"{tmp_path / 'bad.npz'}: parameter 'weight' holds 1 NaN or infinite value(s) of 6 " \
                   "(the training that saved it diverged)"
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    assert "cannot be read as a checkpoint" in args.non_finite_weights(tmp_path / "junk.npz")
