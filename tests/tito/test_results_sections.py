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
