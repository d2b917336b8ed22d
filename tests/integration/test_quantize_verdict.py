"""The quantize milestone's verdict refuses a width narrower than its name (int3 called int4, int6 called int8).

Fast (a small untrained GPT, no Shakespeare training): `bits_used` reads the width really used from the
quantized weights, and `quantize_checks` fails the variant whose weights use fewer bits than its name says.
The end-to-end run of the milestone with a narrower width is in test_milestones.py (slow: it needs shakespeare's
--fast model).
"""
import importlib.util
import sys
from pathlib import Path

import pytest

from tinytorch.models.transformer import GPT
from tinytorch.perf.quantization import quantize_model

MILESTONES = Path(__file__).resolve().parents[2] / "milestones"


@pytest.fixture(scope="module")
def quantize():
    spec = importlib.util.spec_from_file_location("quantize_milestone", MILESTONES / "quantize.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(MILESTONES))  # quantize.py imports shakespeare.py and the helpers from there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(MILESTONES))
    return module


@pytest.fixture(scope="module")
def small_gpt():
    return GPT(20, 16, 1, 2, 8, dropout=0.0, tie_weights=True, bias=False)


@pytest.mark.parametrize("bits", [8, 6, 4, 3])
def test_bits_used_is_the_width_quantized_to(quantize, small_gpt, bits):
    for per_channel in (True, False):
        got = quantize.bits_used(quantize_model(small_gpt, bits=bits, per_channel=per_channel))
        assert got == bits, f"int{bits} ({'per channel' if per_channel else 'per tensor'}): bits_used says {got}"


def verdicts(quantize, small_gpt, widths):
    """{check label: passed} of quantize_checks for the small GPT, each variant quantized to widths[its name's bits]
    (the losses all equal fp32's: only the widths differ)."""
    results = {"fp32": (1.0, 1_000_000, 0)}
    for name, options in quantize.VARIANTS[1:]:
        model = quantize_model(small_gpt, **dict(options, bits=widths.get(options["bits"], options["bits"])
                                                 if options["mode"] == "weight_only" else options["bits"]))
        results[name] = (1.0, 100_000, quantize.bits_used(model))
    return {check.label: check.value >= check.threshold if check.relation == "at least" else check.value <= check.threshold
            for check in quantize.quantize_checks(results)}


def test_right_widths_pass(quantize, small_gpt):
    failed = [label for label, passed in verdicts(quantize, small_gpt, {}).items() if not passed]
    assert not failed, f"int8 and int4 quantized as named should pass every check; failed: {failed}"


@pytest.mark.parametrize("named,used", [(4, 3), (8, 6)])
def test_a_narrower_width_fails(quantize, small_gpt, named, used):
    got = verdicts(quantize, small_gpt, {named: used})
    label = f"int{named} weight-only bits the weights use"
    assert got[label] is False, f"int{used} weights called int{named}: the check {label!r} must fail"
    assert [label for label, passed in got.items() if not passed] == [label], got
