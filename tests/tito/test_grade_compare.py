"""The trusted side of grading: reading what the student's code produced, and comparing it with the reference.

No sandbox here: the values files are written by the tests themselves, as hostile code could write them.
"""
from __future__ import annotations

import os
import zipfile
from fractions import Fraction

import numpy as np
import pytest

from tito.grading.cases import produce, seeded
from tito.grading.compare import (CaseSpec, ProducedError, compare_case, label_problem, named_mistakes,
                                  rank_mistakes, read_values, split_mistakes)
from tito.mistakes import Mistake

SPEC = CaseSpec("sum", "sum of a float32 matrix", {"rtol": 1e-5, "atol": 1e-6},
                {"out": np.array([1.0, 2.0, 3.0], dtype=np.float32), "count": np.array(3)})
ALLOWED = {"sum": {"out", "count"}}


def _write(path, **values):
    np.savez(path, **values)
    return path


def test_values_are_read_and_checked_against_the_known_cases(tmp_path):
    good = _write(tmp_path / "good.npz", **{"sum/out": np.zeros(3, np.float32), "sum/(raised)": np.array("E: x"),
                                             "sum/extra": np.zeros(1)})
    assert set(read_values(good, ALLOWED)) == {"sum/out", "sum/(raised)"}  # a label the reference lacks: left out
    for name, values, message in [
        ("unknown", {"secret/out": np.zeros(1)}, "names a case or label the module does not have"),
        ("other-case", {"mean/(raised)": np.array("E")}, "names a case the module does not have"),
        ("raised-not-text", {"sum/(raised)": np.zeros(2)}, "not one line of text"),
    ]:
        with pytest.raises(ProducedError, match=message):
            read_values(_write(tmp_path / f"{name}.npz", **values), ALLOWED)


def test_pickled_objects_links_fifos_oversize_and_junk_are_refused(tmp_path):
    objects = tmp_path / "objects.npz"
    np.savez(objects, **{"sum/out": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ProducedError, match="cannot be read"):
        read_values(objects, ALLOWED)
    target = _write(tmp_path / "real.npz", **{"sum/out": np.zeros(3, np.float32)})
    os.symlink(target, tmp_path / "link.npz")
    with pytest.raises(ProducedError, match="cannot be opened"):
        read_values(tmp_path / "link.npz", ALLOWED)
    os.mkfifo(tmp_path / "fifo.npz")
    with pytest.raises(ProducedError, match="not a plain file"):
        read_values(tmp_path / "fifo.npz", ALLOWED)
    with pytest.raises(ProducedError, match="larger than"):
        read_values(_write(tmp_path / "big.npz", **{"sum/out": np.zeros(2 ** 20)}), ALLOWED, limit=2 ** 20)
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("sum/out.npy", b"\0" * 2 ** 22)  # 4 MiB of zeros: a few KiB on disk
    with pytest.raises(ProducedError, match="unpack to more than 1 MiB"):
        read_values(tmp_path / "bomb.npz", ALLOWED, limit=2 ** 20)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ProducedError, match="not an .npz"):
        read_values(tmp_path / "junk.npz", ALLOWED)
    with pytest.raises(ProducedError, match="wrote no values"):
        read_values(tmp_path / "missing.npz", ALLOWED)


def test_what_differs_shows_the_students_values_only_with_detail():
    want = SPEC.expected["out"]
    got = np.array([1.0, 2.5, 3.0], dtype=np.float32)
    assert label_problem("out", want.copy(), want, SPEC.tolerance, False) == ""
    assert label_problem("out", got, want, SPEC.tolerance, False) == (
        "out has the wrong values (the reference's: shape (3,), float32)")
    detailed = label_problem("out", got, want, SPEC.tolerance, True)
    assert detailed.startswith("out differs from the reference at 1 of 3 position(s); first at index (1,): got 2.5")
    assert label_problem("out", got.astype(np.float64), want, SPEC.tolerance, False) == (
        "out has the wrong dtype: the reference's is float32 (keep the input's dtype)")
    assert label_problem("out", got[:2], want, SPEC.tolerance, False) == (
        "out has the wrong shape: the reference's is (3,)")
    assert label_problem("out", None, want, SPEC.tolerance, False) == "out is missing"
    assert label_problem("count", np.array(3.0), SPEC.expected["count"], SPEC.tolerance, False).startswith(
        "count has the wrong dtype")


def test_an_exception_is_named_only_when_it_is_a_builtin_one_unless_detail():
    raised = {"sum/(raised)": np.array("ValueError: shapes (3,) and (4,) do not broadcast")}
    assert compare_case(SPEC, raised, Fraction(2), False).message == "raised ValueError"
    assert compare_case(SPEC, raised, Fraction(2), True).message == (
        "raised ValueError: shapes (3,) and (4,) do not broadcast")
    forged = {"sum/(raised)": np.array("def attention(q, k, v): return the reference solution")}
    message = compare_case(SPEC, forged, Fraction(2), False).message
    assert message == "raised an exception (not one of Python's built-in ones)" and "reference" not in message


def test_a_case_whose_values_are_a_catalogued_mistakes_names_it():
    mistake = Mistake("01_tensor", "sum-upcasts", "sum computes in float64", "a", "b", "keep the input's dtype")
    unseen = Mistake("01_tensor", "harmless", "changes nothing the case sees", "a", "b", "x")
    upcast = {"out": SPEC.expected["out"].astype(np.float64), "count": np.array(3)}
    mistakes = split_mistakes({**{f"sum-upcasts/sum/{k}": v for k, v in upcast.items()},
                               **{f"harmless/sum/{k}": v for k, v in SPEC.expected.items()}})
    produced = {f"sum/{k}": v for k, v in upcast.items()}
    assert named_mistakes(SPEC, produced, mistakes, [unseen, mistake]) == [mistake]
    result = compare_case(SPEC, produced, Fraction(2), False, mistakes, [unseen, mistake])
    assert not result.passed and result.points == 0 and result.max_points == 2 and result.mistakes == (mistake,)
    assert result.message.endswith("a catalogued mistake, sum-upcasts: sum computes in float64 (keep the input's dtype)")
    other = {"sum/out": np.array([9.0, 9.0, 9.0], dtype=np.float32), "sum/count": np.array(3)}
    assert named_mistakes(SPEC, other, mistakes, [unseen, mistake]) == []
    passed = compare_case(SPEC, {f"sum/{k}": v for k, v in SPEC.expected.items()}, Fraction(2), False, mistakes,
                          [mistake])
    assert passed.passed and passed.points == 2 and passed.message == ""


def test_the_runner_records_values_and_exceptions_with_the_seeded_generator():
    def draws(rng):
        return {"x": rng.standard_normal(3), "ids": [1, 2]}

    def broken(rng):
        raise NotImplementedError("matmul: write it in modules/01_tensor\nsecond line")

    found = produce({"draws": (draws, "three draws"), "broken": (broken, "raises"),
                     "scalars": (lambda rng: {"loss": np.float32(0.5), "flag": True, "none": None}, "0-d values")})
    assert found["scalars/none"].item() == "(not a plain array)"  # as record_expected.py records it
    assert found["scalars/loss"].shape == () and found["scalars/loss"].dtype == np.float32
    assert found["scalars/flag"].shape == () and found["scalars/flag"].item() is True
    assert np.array_equal(found["draws/x"], seeded("draws").standard_normal(3))
    assert found["draws/ids"].tolist() == [1, 2]
    assert found["broken/(raised)"].item() == "NotImplementedError: matmul: write it in modules/01_tensor"


def test_the_mistake_that_explains_every_case_is_named_and_twins_no_case_tells_apart_are_named_together():
    """Two mistakes raise the same error in case `sum`; only one of them also matches case `mean`: that one is
    named. A third mistake with exactly the values of the second is named with it."""
    mean = CaseSpec("mean", "mean", SPEC.tolerance, {"out": np.array(2.0)})
    specs = [SPEC, mean]
    make = lambda *a: Mistake("01_tensor", a[0], a[1], "a", "b", a[2])  # noqa: E731
    first, second, twin = make("first", "raises early", "m1"), make("second", "raises and means 3", "m2"), \
        make("twin", "the same as second", "m3")
    raised = {"sum/(raised)": np.array("ValueError: no")}
    mistakes = {"first": {**raised, "mean/out": np.array(2.0)}, "second": {**raised, "mean/out": np.array(3.0)},
                "twin": {**raised, "mean/out": np.array(3.0)}}
    produced = {**raised, "mean/out": np.array(3.0)}
    ranking = rank_mistakes(specs, produced, mistakes, [first, second, twin])
    # sum: each raised the student's very line (+1.5); mean: first's value is the reference's (not counted),
    # second's and twin's are the student's (+1)
    assert ranking == {"first": 1.5, "second": 2.5, "twin": 2.5}
    assert named_mistakes(SPEC, produced, mistakes, [first, second, twin], ranking) == [second, twin]
    message = compare_case(SPEC, produced, Fraction(1), False, mistakes, [first, second, twin], ranking).message
    assert message.endswith("a catalogued mistake, second: raises and means 3 (m2) or of a catalogued mistake, "
                            "twin: the same as second (m3)")
