"""Module 10, tokenizers a careless user can trust (issue 20).

* A saved tokenizer file that was truncated, had bytes flipped, or fields dropped or retyped
  by hand loads as exactly the tokenizer that was saved, or raises ValueError naming the
  file (and the field); never anything else, never a different tokenizer.
* Duplicate or boolean merges are refused; `save` goes through `atomic_write`.
* decode refuses a fractional or boolean id; train refuses a fractional vocab_size.

Named `test_zz_*` so that it runs after test_tokenization.py, whose tests name the
lesson's mistakes first.
"""
import errno
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinytorch.files
from corruption import byte_damage, damage_bytes, damage_json, json_damage  # tests/corruption.py
from tinytorch.core.tensor import Tensor
from tinytorch.text.tokenization import BPETokenizer, CharTokenizer

TEXT = "the cat sat on the mat; the end. café 🙂"


def _tokenizers():
    return {"bpe": BPETokenizer().train(TEXT, 270), "char": CharTokenizer.from_text(TEXT)}


# ---- hand-edited files -------------------------------------------------------------------------

@pytest.mark.parametrize("loader, content, field", [
    (BPETokenizer, '{"type": "bpe", "merges": [[97, 98], [97, 98]]}', "repeats an earlier merge"),
    (BPETokenizer, '{"type": "bpe", "merges": [[true, 98]]}', "item 0 is [True, 98]"),
    (BPETokenizer, '{"type": "bpe", "merges": [[97, 98, 99]]}', "item 0"),
    (BPETokenizer, '{"type": "bpe", "merges": [[97.0, 98]]}', "item 0"),
    (BPETokenizer, '{"type": "bpe", "merges": [[300, 98]]}', "does not exist yet"),
    (BPETokenizer, '{"type": "bpe", "merges": {"0": [97, 98]}}', "field 'merges' must be a list"),
    (BPETokenizer, '{"type": "bpe"}', "field 'merges' must be a list"),
    (BPETokenizer, '{"type": "char", "merges": []}', "field 'type' is 'char'"),
    (BPETokenizer, '[1, 2]', "JSON list, not an object"),
    (BPETokenizer, '{"type": "bpe", "merges": [[97, 98]', "not JSON"),
    (CharTokenizer, '{"type": "char", "chars": ["a", "a"]}', "lists 'a' twice"),
    (CharTokenizer, '{"type": "char", "chars": ["a", "bc"]}', "item 1 is 'bc'"),
    (CharTokenizer, '{"type": "char", "chars": ["a", 1]}', "item 1 is 1"),
    (CharTokenizer, '{"type": "char", "chars": "abc"}', "field 'chars' must be a list"),
    (CharTokenizer, '{"type": "char"}', "field 'chars' must be a list"),
    (CharTokenizer, '"char"', "JSON str"),
], ids=["bpe-duplicate", "bpe-boolean", "bpe-triple", "bpe-float", "bpe-future-id", "bpe-dict", "bpe-missing",
        "bpe-other-type", "bpe-list", "bpe-truncated", "char-duplicate", "char-two-letters", "char-number",
        "char-string", "char-missing", "char-not-an-object"])
def test_a_hand_edited_file_is_refused_naming_the_file_and_the_field(tmp_path, loader, content, field):
    path = tmp_path / "tokenizer.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        loader.load(path)
    assert str(path) in str(err.value) and field in str(err.value), str(err.value)


def test_bytes_that_are_not_utf8_name_the_file(tmp_path):
    path = tmp_path / "bpe.json"
    path.write_bytes(b'{"type": "bpe", "merges": [[\xff, 1]]}')
    with pytest.raises(ValueError, match="not UTF-8") as err:
        BPETokenizer.load(path)
    assert str(path) in str(err.value)


def test_merges_given_in_code_are_checked_too():
    with pytest.raises(ValueError, match="repeats an earlier merge"):
        BPETokenizer([(97, 98), (97, 98)])
    with pytest.raises(ValueError, match="not a pair of integer ids"):
        BPETokenizer([(True, 98)])


# ---- random damage: the same tokenizer, or ValueError naming the file ----------------------------

RETYPED = [None, 0, -1, 1.5, True, False, "x", "", [], {}, [1, 2], [97, 98], "ab", 10 ** 20]
corruption = st.one_of(byte_damage, json_damage(RETYPED, depth=3))


def corrupt(data: bytes, case) -> bytes:
    if case[0] in ("truncate", "flip"):
        return damage_bytes(data, case)
    return json.dumps(damage_json(json.loads(data), case), ensure_ascii=False).encode("utf-8")


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["bpe", "char"]), case=corruption)
def test_a_damaged_tokenizer_file_loads_as_saved_or_names_the_file(tmp_path, which, case):
    tokenizer = _tokenizers()[which]
    path = tmp_path / f"{which}.json"
    tokenizer.save(path)
    damaged = corrupt(path.read_bytes(), case)
    path.write_bytes(damaged)
    cls = type(tokenizer)
    try:
        loaded = cls.load(path)
    except ValueError as err:
        assert str(path) in str(err), f"{case}: the error does not name the file: {err}"
        return
    if cls is BPETokenizer:
        same = loaded.merges == tokenizer.merges
    else:
        same = loaded.chars == tokenizer.chars
    # A damaged file may still be a valid tokenizer (a flipped letter in "chars" is another
    # character, a merge dropped from the end is a smaller one), but it must be exactly what the file says.
    expected = json.loads(damaged)
    says = [tuple(p) for p in expected["merges"]] if cls is BPETokenizer else expected["chars"]
    assert same or (loaded.merges if cls is BPETokenizer else loaded.chars) == says, case
    sample = "the mat" if cls is BPETokenizer else "".join(loaded.chars[:5])
    assert loaded.decode(loaded.encode(sample)) == sample, case


# ---- saving: atomic ----------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["bpe", "char"])
def test_a_full_disk_leaves_the_old_tokenizer_file(tmp_path, monkeypatch, which):
    tokenizer = _tokenizers()[which]
    path = tmp_path / "tok.json"
    tokenizer.save(path)
    before = path.read_bytes()

    def no_room(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tinytorch.files.os, "fsync", no_room)
    other = BPETokenizer().train("something else entirely", 260) if which == "bpe" else CharTokenizer.from_text("xyz")
    with pytest.raises(OSError):
        other.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["tok.json"]


# ---- integers are integers ---------------------------------------------------------------------

@pytest.mark.parametrize("which", ["bpe", "char"])
def test_decode_refuses_fractional_and_boolean_ids(which):
    tokenizer = _tokenizers()[which]
    ids = tokenizer.encode("the")
    assert tokenizer.decode(np.array(ids, dtype=np.float32)) == "the"  # whole floats are fine
    assert tokenizer.decode(Tensor(ids)) == "the"  # a Tensor made from a list is float32
    with pytest.raises(ValueError, match="whole numbers, got 1.5"):
        tokenizer.decode([ids[0], 1.5])
    with pytest.raises(TypeError, match="must be integers"):
        tokenizer.decode([True, False])
    with pytest.raises(TypeError, match="flat sequence"):
        tokenizer.decode([[1, 2], [3]])


def test_train_refuses_a_fractional_vocab_size():
    with pytest.raises(ValueError, match="vocab_size must be a whole number, got 300.5"):
        BPETokenizer().train(TEXT, 300.5)
    assert BPETokenizer().train(TEXT, 260.0).vocab_size == 260
