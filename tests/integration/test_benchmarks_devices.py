"""The benchmarks' --device cuda: a clear stop without CuPy, a GPU section of RESULTS.md of its own
(beside the CPU one, never over it), and, on a machine with a GPU, a quick run of each."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devices import requires_gpu

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("attention", "conv", "gpt")
CPU_HEADINGS = {"attention": "## Attention (module 12)", "conv": "## Convolution (module 09)",
                "gpt": "## GPT (module 13)"}
FACTS = {"gpu": "Test GPU 80GB", "gpu_memory": "80 GiB", "cupy": "13.9.9", "cuda_runtime": "12.8",
         "cuda_driver": "13.0", "torch": "2.99.0+cu128", "torch_cuda": "12.8"}


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def load(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # where the scripts find _common, as when run
    spec = importlib.util.spec_from_file_location(f"{name}_bench", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
@pytest.mark.parametrize("name", BENCHMARKS)
def test_cuda_without_cupy_stops_with_one_line_naming_the_gpu_extra(name):
    result = run(f"benchmarks/{name}.py", "--quick", "--device", "cuda")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install -e ".[gpu]"' in lines[0], result.stderr


def test_a_heading_matches_whole_lines_only(tmp_path, monkeypatch):
    common = load("_common", monkeypatch)
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## A\n\ncpu numbers\n\n## B\n\nkept\n", encoding="utf-8")
    common.write_section("## A on GPU: X", "## A on GPU: X\n\ngpu numbers\n", results, after="## A")
    assert results.read_text(encoding="utf-8") == (
        "# Benchmark results\n\n## A\n\ncpu numbers\n\n## A on GPU: X\n\ngpu numbers\n\n## B\n\nkept\n")
    common.write_section("## A", "## A\n\nnew cpu numbers\n", results)  # must not touch "## A on GPU: X"
    common.write_section("## A on GPU: X", "## A on GPU: X\n\nnew gpu numbers\n", results, after="## A")
    assert results.read_text(encoding="utf-8") == (
        "# Benchmark results\n\n## A\n\nnew cpu numbers\n\n## A on GPU: X\n\nnew gpu numbers\n\n## B\n\nkept\n")
    common.write_section("## C on GPU: X", "## C on GPU: X\n\nappended\n", results, after="## C")  # no "## C"
    assert results.read_text(encoding="utf-8").endswith("## B\n\nkept\n\n## C on GPU: X\n\nappended\n")


def test_threaded_medians_take_turns_in_blocks_and_skip_each_blocks_first_call(monkeypatch):
    common = load("_common", monkeypatch)
    calls, now = [], [0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])  # a clock in whole milliseconds

    def fn(name, ms):
        def call():
            first = not calls or calls[-1] != name  # the first call of a block: the other library's threads spin
            calls.append(name)
            now[0] += 100 if first else ms
        return call

    medians = common.threaded_medians({"a": fn("a", 1), "b": fn("b", 2)}, repeats=2, block=2)
    assert "".join(calls) == "aabbaabb", f"blocks of 2, one library after the other, 2 rounds: {calls}"
    assert medians == {"a": 1, "b": 2}, f"the first call of each block (100 ms) must not be counted: {medians}"


def fake_rows(name: str) -> tuple:
    """(args, the arguments of write_gpu_results after info and facts) with made-up numbers."""
    if name == "attention":
        args = type("Args", (), {"repeats": 1, "scaling_repeats": 1})()
        speed = [{"name": "sdpa", "ours": 0.002, "torch": 0.001, "torch_label": "F.sdpa"}]
        memory = [{"T": 1024, "standard": (8 * 2**20, 8 * 2**20, 0.01), "flash": (2**20, 2**20, 0.02),
                   "torch": 2**19}]
        scaling = [{"T": 64, "ours": 0.001, "flash": 0.002, "torch": 0.001}]
        return args, (speed, memory, scaling)
    if name == "conv":
        args = type("Args", (), {"repeats": 1, "memory_batch": 1, "scaling_batch": 1, "scaling_repeats": 1})()
        speed = [{"name": "Conv2d", "ours": 0.002, "torch": 0.001}]
        memory = [{"side": 8, "input": 2**20, "cols": 9 * 2**20, "peak": 20 * 2**20}]
        scaling = [{"side": 8, "ours": 0.001, "torch": 0.001}]
        return args, (speed, memory, scaling)
    args = type("Args", (), {"repeats": 1, "new_tokens": 8})()
    step = {"ours": 0.004, "torch": 0.002}
    gen = [{"prompt": 32, "no cache": 100.0, "cache": 300.0, "torch cache": 600.0, "torch no cache": 200.0}]
    memory = {"forward": 2**20, "peak": 2 * 2**20, "intermediate_grads": 0, "params": 3 * 2**20}
    return args, (step, gen, memory, None)


def load_writing_to_a_copy(name: str, tmp_path, monkeypatch):
    """The benchmark module, pointed at a copy of RESULTS.md in tmp_path: (module, the copy, its text)."""
    bench = load(name, monkeypatch)
    results = tmp_path / "RESULTS.md"
    original = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    results.write_text(original, encoding="utf-8")
    bench.RESULTS = results
    return bench, results, original


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_gpu_section_is_written_beside_the_cpu_one_never_over_it(name, tmp_path, monkeypatch):
    bench, results, original = load_writing_to_a_copy(name, tmp_path, monkeypatch)
    args, rows = fake_rows(name)
    bench.write_gpu_results(bench._common.machine(), FACTS, *rows, args)
    text = results.read_text(encoding="utf-8")
    heading = f"{CPU_HEADINGS[name]} on GPU: Test GPU 80GB"
    assert text.count(heading) == 1
    section = text[text.index(heading):]
    section = section[:section.find("\n## ") + 1 or len(section)].rstrip("\n") + "\n"
    added = section + "\n" if text.index(heading) + len(section) < len(text) else "\n" + section  # and its blank line
    assert text.replace(added, "", 1) == original, "only the GPU section was added: the rest is as it was"
    for fact in ("Test GPU 80GB", "CuPy 13.9.9", "CUDA runtime 12.8", "PyTorch 2.99.0+cu128"):
        assert fact in section, fact
    assert text.index(heading) > text.index(CPU_HEADINGS[name] + "\n"), "after the CPU section"
    again = text
    bench.write_gpu_results(bench._common.machine(), FACTS, *rows, args)  # a second run replaces it in place
    assert results.read_text(encoding="utf-8").count(heading) == 1
    assert len(results.read_text(encoding="utf-8")) == len(again)


# ---- on a GPU: a quick run of each, and its section written (to a copy of RESULTS.md) ---------------
@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("name", BENCHMARKS)
def test_quick_run_on_the_gpu_writes_its_own_section(name, tmp_path, monkeypatch):
    bench, results, original = load_writing_to_a_copy(name, tmp_path, monkeypatch)
    assert bench.main(["--quick", "--device", "cuda", "--write-results"]) == 0
    text = results.read_text(encoding="utf-8")
    assert f"{CPU_HEADINGS[name]} on GPU: " in text
    cpu_section = original[original.index(CPU_HEADINGS[name] + "\n"):]
    cpu_section = cpu_section[:cpu_section.find("\n## ") + 1 or len(cpu_section)]
    assert cpu_section in text, "the CPU section is unchanged"
