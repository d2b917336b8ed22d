"""The quantization benchmark runs (a smoke run: an untrained GPT of the recipe, few batches and epochs). Named
to run after the module's own tests, so a mistake is reported by the test that names it, not by the benchmark."""
import re

import pytest

from benchmark_runs import check_benchmark, run_benchmark


@pytest.mark.slow
def test_quantization_benchmark_quick(tmp_path):
    output = check_benchmark("quantization.py", ["1. the GPT", "2. the digits", "3. integer against float"],
                             "--checkpoint", str(tmp_path / "absent.npz"))
    assert "UNTRAINED" in output, "--quick without a saved model says its GPT numbers mean nothing"
    assert re.search(r"GPT int4 weight-only, per channel +loss [0-9.]+ .*[0-9,]+ bytes", output), \
        f"the int4 row with its loss and bytes:\n{output}"
    refused = run_benchmark("quantization.py", "--quick", "--write-results", timeout=60)
    assert refused.returncode == 2 and "smoke run" in refused.stderr, \
        f"--quick --write-results is refused (a smoke run's numbers are not results): {refused.stderr}"
