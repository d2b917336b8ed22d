"""Module 07, checkpoints a careless or unlucky user can trust (issue 20).

* A checkpoint records how its model was built and refuses a model built otherwise, even
  when every weight has the right shape (a GPT with 2 heads and one with 4).
* What `extra` holds is checked before a byte is written: a checkpoint that saves, loads.
* The save survives a full disk, an error half-way through serialising, and 8 processes
  saving the same path at once (`tinytorch.files.atomic_write`).
* Random damage to a valid file (truncated, bytes flipped, entries dropped or retyped)
  loads correctly or raises ValueError naming the file, and then changes nothing.

Named `test_zz_*` so that it runs after test_training.py: a mistake in the lesson's
functions is reported there first, by the test that names it.
"""
import errno
import json
import multiprocessing
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinytorch.files
from corruption import byte_damage, damage_bytes, damage_json, json_damage  # tests/corruption.py
from tinytorch.core.activations import Tanh
from tinytorch.core.layers import Dropout, Linear, Module, Sequential
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import CosineWarmupLR, load_checkpoint, read_checkpoint, save_checkpoint
from tinytorch.files import atomic_write


class Heads(Module):
    """Weights of the same shape whatever `heads` is, as a GPT's num_heads."""

    def __init__(self, width: int, heads: int, seed: int = 0):
        super().__init__()
        self.heads = heads
        self.proj = Linear(width, width, seed=seed, dtype=np.float64)

    def forward(self, x):
        return self.proj(x)


def meta_text(array: np.ndarray) -> str:
    """The JSON of a checkpoint's `meta` entry: UTF-8 bytes as saved, or a str array (older files)."""
    return array.tobytes().decode("utf-8") if array.dtype == np.uint8 else str(array)


def test_meta_is_stored_as_utf8_bytes_and_an_older_str_meta_still_loads(tmp_path):
    model = Heads(4, 2)
    path = save_checkpoint(tmp_path / "new", model)
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    text = meta_text(arrays["meta"])
    assert arrays["meta"].dtype == np.uint8 and arrays["meta"].nbytes == len(text.encode("utf-8")), (
        f"meta must be stored as UTF-8 bytes (1 byte per ASCII character), got {arrays['meta'].dtype}, "
        f"{arrays['meta'].nbytes} bytes for {len(text)} characters")
    arrays["meta"] = np.array(text)  # the form files had before: a str array, 4 bytes per character
    np.savez(tmp_path / "old.npz", **arrays)
    assert read_checkpoint(tmp_path / "old.npz")["config"] == read_checkpoint(path)["config"]

def weights(model):
    return [p.numpy().copy() for p in model.parameters()]


def scratch_files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- how the model was built ---------------------------------------------------------------

def test_checkpoint_records_how_the_model_was_built(tmp_path):
    path = save_checkpoint(tmp_path / "heads", Heads(4, 2))
    config = read_checkpoint(path)["config"]
    assert config is not None and config.get("") == {"type": "Heads", "args": {"width": 4, "heads": 2}}, (
        f"the checkpoint's 'config' is {config!r}: save_checkpoint must store \"config\": _model_config(model) "
        "in meta, so that loading can refuse a model built with other arguments")
    target = Heads(4, 4, seed=1)
    before = weights(target)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, target)
    message = str(err.value)
    assert str(path) in message and "heads=2 in the file, 4 here" in message, message
    assert all(np.array_equal(a, b) for a, b in zip(before, weights(target))), "a refused load changed the model"
    same = Heads(4, 2, seed=7)  # the same arguments, another seed: the seed is not part of the build
    load_checkpoint(path, same)
    assert all(np.array_equal(a, b) for a, b in zip(weights(Heads(4, 2)), weights(same)))


def test_a_sequential_records_each_layer(tmp_path):
    path = save_checkpoint(tmp_path / "mlp", Sequential(Linear(3, 4, seed=0), Tanh(), Dropout(0.1), Linear(4, 2)))
    other = Sequential(Linear(3, 4), Tanh(), Dropout(0.5), Linear(4, 2))  # same shapes, other dropout
    with pytest.raises(ValueError, match=r"2 \(Dropout\) was built with p=0.1 in the file, 0.5 here"):
        load_checkpoint(path, other)
    from tinytorch.core.activations import ReLU
    relu = Sequential(Linear(3, 4), ReLU(), Dropout(0.1), Linear(4, 2))
    with pytest.raises(ValueError, match="1 is a Tanh in the file, a ReLU here"):
        load_checkpoint(path, relu)


def test_an_old_checkpoint_without_config_loads_with_a_warning(tmp_path):
    path = save_checkpoint(tmp_path / "old", Heads(4, 2))
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(meta_text(arrays["meta"]))
    del meta["config"]  # what a checkpoint saved before issue 20 looks like
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)
    target = Heads(4, 4, seed=3)
    with pytest.warns(UserWarning, match="does not record how its model was built"):
        load_checkpoint(path, target)
    assert all(np.array_equal(a, b) for a, b in zip(weights(Heads(4, 2)), weights(target)))


# ---- what extra may hold ------------------------------------------------------------------------

@pytest.mark.parametrize("extra, error, says", [
    ({"names": np.array(["a", None], dtype=object)}, TypeError, "array of Python objects"),
    ({"counts": {1: 5}}, TypeError, "string keys only"),
    ({"a/b": np.zeros(2), "a": {"b": np.ones(2)}}, ValueError, "both stored as 'extra/a/b'"),
    ({"x": [np.zeros(2)], "x/0": np.ones(2)}, ValueError, "both stored as 'extra/x/0'"),
    ({"seen": {1, 2}}, TypeError, "cannot store a set"),
    ({"when": np.array(3, dtype=object)}, TypeError, "array of Python objects"),
], ids=["object-array", "int-key", "collision-dict", "collision-list", "set", "object-scalar"])
def test_extra_that_would_not_load_is_refused_before_anything_is_written(tmp_path, extra, error, says):
    model = Heads(3, 1)
    path = save_checkpoint(tmp_path / "run", model, extra={"ok": 1})
    before = path.read_bytes()
    with pytest.raises(error, match=says):
        save_checkpoint(path, model, extra=extra)
    assert path.read_bytes() == before and scratch_files(tmp_path) == []
    fresh = tmp_path / "fresh.npz"
    with pytest.raises(error):
        save_checkpoint(fresh, model, extra=extra)
    assert not fresh.exists()


@pytest.mark.parametrize("step, error", [(2.5, ValueError), (-1, ValueError), ("3", TypeError)])
def test_the_step_must_be_a_whole_number(tmp_path, step, error):
    with pytest.raises(error, match="save_checkpoint: step must"):
        save_checkpoint(tmp_path / "run", Heads(3, 1), step=step)
    assert not (tmp_path / "run.npz").exists()
    assert read_checkpoint(save_checkpoint(tmp_path / "run", Heads(3, 1), step=4.0))["step"] == 4


def test_integer_arrays_and_strings_round_trip(tmp_path):
    """Quantised models keep int8 weights in buffers; extra may hold ids and labels."""
    model = Heads(3, 1)
    model.register_buffer("codes", Tensor(np.array([[-128, 0, 127]], dtype=np.int8)))
    extra = {"ids": np.arange(5, dtype=np.int64), "labels": np.array(["cat", "dog"]), "pair": (1, "b")}
    path = save_checkpoint(tmp_path / "int8", model, extra=extra)
    parts = read_checkpoint(path)
    assert parts["model"]["codes"].dtype == np.int8 and parts["model"]["codes"].tolist() == [[-128, 0, 127]]
    assert parts["extra"]["ids"].dtype == np.int64 and parts["extra"]["labels"].tolist() == ["cat", "dog"]
    assert parts["extra"]["pair"] == (1, "b")
    target = Heads(3, 1)
    target.register_buffer("codes", Tensor(np.zeros((1, 3), dtype=np.int8)))
    load_checkpoint(path, target)
    assert target.codes.dtype == np.int8 and target.codes.numpy().tolist() == [[-128, 0, 127]]


# ---- the save survives faults ------------------------------------------------------------

class FullDisk:
    """A file that takes `room` bytes, then fails as a full disk does (OSError ENOSPC)."""

    def __init__(self, stream, room: int):
        self.stream, self.room = stream, room

    def write(self, data):
        if len(data) > self.room:
            self.stream.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.stream.write(data)

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.stream.__exit__(*exc)


def full_disk_after(monkeypatch, room: int) -> None:
    real = os.fdopen
    monkeypatch.setattr(tinytorch.files.os, "fdopen", lambda fd, *a, **k: FullDisk(real(fd, *a, **k), room))


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_a_full_disk_leaves_the_old_checkpoint(tmp_path, monkeypatch, where):
    old = Heads(8, 2, seed=0)
    path = save_checkpoint(tmp_path / "run", old, step=1)
    before = path.read_bytes()
    if where == "write":
        full_disk_after(monkeypatch, room=300)  # dies inside the first array
    else:
        def no_room(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(tinytorch.files.os, "fsync", no_room)
    with pytest.raises(OSError) as err:
        save_checkpoint(path, Heads(8, 2, seed=1), step=2)
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert path.read_bytes() == before and scratch_files(tmp_path) == []
    target = Heads(8, 2, seed=5)
    assert load_checkpoint(path, target)["step"] == 1
    assert all(np.array_equal(a, b) for a, b in zip(weights(old), weights(target)))


def test_an_error_half_way_through_serialising_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "run", Heads(8, 2), step=1)
    before = path.read_bytes()
    real, calls = np.lib.format.write_array, []

    def fails_on_the_second_array(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("serialisation failed half-way")
        return real(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", fails_on_the_second_array)
    with pytest.raises(RuntimeError, match="half-way"):
        save_checkpoint(path, Heads(8, 2, seed=1), step=2)
    monkeypatch.undo()
    assert len(calls) == 2 and path.read_bytes() == before and scratch_files(tmp_path) == []
    assert read_checkpoint(path)["step"] == 1


def test_atomic_write_keeps_permissions_and_refuses_other_modes(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o600)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write("new")
    assert path.read_text(encoding="utf-8") == "new" and path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(path, "a"):
            pass


WRITERS, SAVES = 8, 50


def _save_many(folder: str, writer: int) -> None:
    model = Heads(4, 1)
    for i in range(SAVES):
        value = float(writer * 1000 + i)
        for p in model.parameters():
            p.data = np.full(p.shape, value)
        save_checkpoint(os.path.join(folder, "shared.npz"), model, step=i, extra={"writer": writer})


def test_eight_processes_saving_one_path_leave_one_whole_checkpoint(tmp_path):
    """8 processes save the same path 50 times each while this one reads it: every read and the
    final file load, and each is exactly one of the versions saved (never a mixture)."""
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    writers = [context.Process(target=_save_many, args=(str(tmp_path), n)) for n in range(WRITERS)]
    for writer in writers:
        writer.start()
    path, reads = tmp_path / "shared.npz", 0

    def check(parts):
        writer, step = parts["extra"]["writer"], parts["step"]
        values = {float(v) for array in parts["model"].values() for v in np.ravel(array)}
        assert values == {float(writer * 1000 + step)}, f"a mixture of saves: writer {writer} step {step}, {values}"

    while any(w.is_alive() for w in writers):
        if path.exists():
            check(read_checkpoint(path))
            reads += 1
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0, f"a writer failed (exit {writer.exitcode})"
    check(read_checkpoint(path))
    assert scratch_files(tmp_path) == [] and reads > 0


# ---- random damage: load correctly, or ValueError naming the file, and nothing changed ----------

def _run(seed: int):
    model = Sequential(Linear(3, 4, seed=seed, dtype=np.float64), Tanh(), Dropout(0.2, seed=seed + 1),
                       Linear(4, 2, seed=seed + 2, dtype=np.float64))
    params = model.parameters()
    optimizer = AdamW([{"params": params[:2]}, {"params": params[2:], "lr": 0.005}], lr=0.01)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=2, total_steps=20)
    return model, optimizer, scheduler


def _step(model, optimizer, scheduler):
    x = Tensor(np.linspace(-1, 1, 12).reshape(4, 3))
    loss = (model(x) * model(x)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()


_VALID: dict = {}


def valid_checkpoint(folder) -> bytes:
    if "bytes" not in _VALID:
        run = _run(0)
        for _ in range(3):
            _step(*run)
        path = save_checkpoint(folder / "valid.npz", *run, step=3, extra={"note": "hi", "ids": np.arange(3)})
        _VALID["bytes"] = path.read_bytes()
    return _VALID["bytes"]


def _entries(data: bytes) -> dict:
    import io
    with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
        return {k: loaded[k] for k in loaded.files}


RETYPED = [None, 0, -1, 1.5, True, "x", [], {}, [1, 2], {"__array__": "nope"}, {"__array__": [1]},
           {"__dict__": 5}, {"__dict__": [[1, 2]]}, {"__tuple__": 3}, 10 ** 30]

corruption = st.one_of(
    byte_damage,
    json_damage(RETYPED),  # in the JSON of 'meta'
    st.tuples(st.just("drop-array"), st.integers(0, 50)),
    st.tuples(st.just("retype-array"), st.integers(0, 50),
              st.sampled_from(["text", "float32-scalar", "wrong-shape", "int", "bool"])),
)


def corrupt(data: bytes, case) -> bytes:
    import io
    kind = case[0]
    if kind in ("truncate", "flip"):
        return damage_bytes(data, case)
    arrays = _entries(data)
    names = sorted(k for k in arrays if k != "meta")
    if kind in ("drop", "retype", "duplicate"):
        arrays["meta"] = np.array(json.dumps(damage_json(json.loads(meta_text(arrays["meta"])), case)))
    elif kind == "drop-array":
        del arrays[names[case[1] % len(names)]]
    else:
        name, how = names[case[1] % len(names)], case[2]
        original = arrays[name]
        arrays[name] = {"text": np.array(["a"] * original.size).reshape(original.shape),
                        "float32-scalar": np.float32(2.0), "wrong-shape": np.zeros(original.size + 1),
                        "int": original.astype(np.int64), "bool": original != 0}[how]
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def snapshot(model, optimizer, scheduler):
    return (weights(model), json.dumps(optimizer.state_dict(), default=lambda a: np.asarray(a).tolist()),
            scheduler.state_dict(), model[2].rng.bit_generator.state)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=corruption)
def test_a_damaged_checkpoint_loads_correctly_or_names_the_file(tmp_path, case):
    path = tmp_path / "damaged.npz"
    path.write_bytes(corrupt(valid_checkpoint(tmp_path), case))
    target = _run(9)
    before = snapshot(*target)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a dropped 'config' is an old file: it loads, with a warning
            load_checkpoint(path, *target)
    except ValueError as err:
        assert str(path) in str(err), f"{case}: the error does not name the file: {err}"
        assert _same(snapshot(*target), before), f"{case}: a refused load changed something: {err}"
        return
    except FileNotFoundError:
        raise AssertionError(f"{case}: FileNotFoundError for a file that exists")
    _step(*target)  # loaded: training goes on from it
    assert all(np.isfinite(w).all() for w in weights(target[0])), case


def _same(a, b) -> bool:
    return (all(np.array_equal(x, y) for x, y in zip(a[0], b[0])) and a[1] == b[1] and a[2] == b[2]
            and a[3] == b[3])


def test_the_corruptions_reach_every_kind_of_failure(tmp_path):
    """The property above is only as good as its corruptions: each kind must be refused at least once."""
    data = valid_checkpoint(tmp_path)
    path = tmp_path / "c.npz"
    refused = {}
    for case in [("truncate", 100), ("flip", [(200, 1)]), ("drop", [0]), ("retype", [3, 0], "x"),
                 ("drop-array", 0), ("retype-array", 1, "text")]:
        path.write_bytes(corrupt(data, case))
        with pytest.raises(ValueError) as err:
            load_checkpoint(path, *_run(9))
        refused[case[0]] = str(err.value)
    assert all(str(path) in m for m in refused.values()), refused
