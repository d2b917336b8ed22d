"""benchmarks/RESULTS.md: benchmarks that write their sections at the same time lose none.

`write_section` reads the file, replaces one section and writes the file back. Two benchmarks
finishing together each wrote the file they had read, so one's section was lost (3 of 5 trials);
the read-modify-write now holds `results_lock`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROCESSES, SECTIONS = 5, 30

_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import _common

    results, writer, start = Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    while not start.exists():  # every writer begins at once
        time.sleep(0.001)
    for number in range({sections}):
        heading = f"## writer {{writer}} section {{number}}"
        _common.write_section(heading, heading + "\\n\\nvalue " + str(number) + "\\n", results)
""").format(sections=SECTIONS)


def test_benchmarks_writing_their_sections_at_once_lose_none(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## kept\n\nan older section\n", encoding="utf-8")
    start = tmp_path / "start"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(REPO / "benchmarks"), str(results), str(n),
                                 str(start)], env=env) for n in range(PROCESSES)]
    start.touch()
    assert [w.wait(timeout=300) for w in writers] == [0] * PROCESSES
    text = results.read_text(encoding="utf-8")
    missing = [(n, k) for n in range(PROCESSES) for k in range(SECTIONS)
               if f"## writer {n} section {k}\n\nvalue {k}\n" not in text]
    assert not missing, f"{len(missing)} of {PROCESSES * SECTIONS} sections lost, e.g. {missing[:3]}"
    assert text.startswith("# Benchmark results\n\n## kept\n\nan older section\n")
    assert text.count("## ") == PROCESSES * SECTIONS + 1


def test_a_plot_saved_by_a_benchmark_is_whole_or_the_old_one(tmp_path, monkeypatch):
    """A kill or a full disk while matplotlib writes memory_vs_length.png (or the Pareto plots) used
    to leave a truncated picture in the repository; they are saved through atomic_write now."""
    import importlib.util

    matplotlib = pytest.importorskip("matplotlib")
    import matplotlib.figure

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("memory_bench", REPO / "benchmarks" / "memory.py")
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    picture = tmp_path / "memory_vs_length.png"
    picture.write_bytes(b"the committed picture")

    def disk_full_half_way(self, target, **kwargs):
        (open(target, "wb") if isinstance(target, (str, Path)) else target).write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", disk_full_half_way)
    with pytest.raises(OSError, match="No space left"):
        memory.save_plot([64, 128], {"plain": [2**20, 2**21]}, picture)
    assert picture.read_bytes() == b"the committed picture"
    assert [p.name for p in tmp_path.iterdir()] == ["memory_vs_length.png"]
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    memory.save_plot([64, 128], {"plain": [2**20, 2**21]}, picture)
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
