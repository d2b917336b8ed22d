"""Module 10 (tokenization): character and byte-level BPE tokenizers.

Everything is built inside the tests (never at import time), so that with module 10's
solutions replaced by stubs every test *fails* instead of erroring at collection.
"""
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinytorch.text.tokenization import (BPETokenizer, CharTokenizer, PairCounter, count_pairs, merge_pair,
                                         merge_positions)

SHAKESPEARE = Path(__file__).resolve().parents[2] / "datasets" / "tinyshakespeare.txt"


def reference_merges(text: str, vocab_size: int) -> list[tuple[int, int]]:
    """BPE by full recount after every merge, in plain Python: the definition the fast trainer must match."""
    ids = list(text.encode("utf-8"))
    merges = []
    while 256 + len(merges) < vocab_size and len(ids) > 1:
        counts = Counter(zip(ids, ids[1:]))  # every adjacent pair, overlaps included
        top = max(counts.values())
        best = min(pair for pair, n in counts.items() if n == top)  # ties: the smallest pair
        new_id, out, i = 256 + len(merges), [], 0
        while i < len(ids):  # left to right, never overlapping
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
        merges.append(best)
    return merges


def reference_positions(ids, pair):
    out, i = [], 0
    while i + 1 < len(ids):
        if (ids[i], ids[i + 1]) == pair:
            out.append(i)
            i += 2
        else:
            i += 1
    return out


def trained_merges(text: str, vocab_size: int) -> list[tuple[int, int]]:
    try:
        return BPETokenizer().train(text, vocab_size).merges
    except NotImplementedError:  # an unwritten stub is a stub, not a counting bug
        raise
    except (RuntimeError, ValueError) as err:  # PairCounter's checks, or a merge learned twice (a stale count)
        raise AssertionError(f"training crashed ({err}): the incremental counts disagree with a full recount") from err


# ---- CharTokenizer ----------------------------------------------------------------------------
def test_char_vocabulary_is_sorted():
    alphabet = "zyxwvutsrqponmlkjihgfedcba ZYX!?"
    tok = CharTokenizer.from_text(alphabet * 2)
    assert tok.chars == sorted(set(alphabet)), (
        f"vocabulary {''.join(tok.chars)!r}: the vocabulary must be sorted (a set's order changes from run to run)")
    assert tok.vocab_size == len(set(alphabet))


def test_char_encode_decode_by_hand():
    tok = CharTokenizer.from_text("hello world")
    assert tok.encode("hello") == [3, 2, 4, 4, 5]
    assert tok.decode([7, 5, 6, 4, 1]) == "world"
    assert tok.encode("") == [] and tok.decode([]) == ""
    assert tok.decode(np.array([3, 2])) == "he"
    assert all(type(i) is int for i in tok.encode("hello"))


@given(st.text(alphabet="abcdefg \n.!é東🙂", max_size=60))
def test_char_round_trip(s):
    tok = CharTokenizer.from_text("abcdefg \n.!é東🙂")
    assert tok.decode(tok.encode(s)) == s


def test_char_unknown_character_raises_value_error_naming_it():
    tok = CharTokenizer.from_text("abc")
    try:
        ids = tok.encode("abé")
    except ValueError as err:
        assert "é" in str(err), f"the error should name the unknown character: {err}"
    else:
        raise AssertionError(f"encode('abé') returned {ids}: an unknown character must raise ValueError, not be skipped")


@pytest.mark.parametrize("bad", [3, 10, -1], ids=["id=3", "id=10", "id=-1"])
def test_char_decode_bad_ids_raise_index_error(bad):
    tok = CharTokenizer.from_text("abc")
    try:
        out = tok.decode([0, bad])
    except IndexError as err:
        assert str(bad) in str(err) and "3" in str(err), (
            f"the IndexError should name the id {bad} and the size 3 (check the range yourself: negative ids would "
            f"silently read from the end): {err}")
    else:
        raise AssertionError(f"decode([0, {bad}]) returned {out!r}: ids outside [0, 3) must raise IndexError "
                             "(negative ids would silently read from the end)")


def test_char_save_and_load(tmp_path):
    tok = CharTokenizer.from_text("to be, or not to bé 🙂")
    path = tmp_path / "chars.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["type"] == "char" and data["chars"] == tok.chars
    loaded = CharTokenizer.load(path)
    assert loaded.chars == tok.chars and loaded.encode("not bé") == tok.encode("not bé")
    with pytest.raises(ValueError):
        CharTokenizer(["a", "a"])
    BPETokenizer().save(tmp_path / "bpe.json")
    with pytest.raises(ValueError):
        CharTokenizer.load(tmp_path / "bpe.json")


# ---- counting and merging ----------------------------------------------------------------------
def test_count_pairs_by_hand():
    assert count_pairs([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}, "count every adjacent pair"
    got = count_pairs(np.array([5, 5, 5, 5]))
    assert got == {(5, 5): 3}, f"count_pairs([5, 5, 5, 5]) = {got}: overlapping pairs count, every adjacent pair"
    assert count_pairs([]) == {} and count_pairs([4]) == {}
    counts = count_pairs(np.array([300, 7, 300]))
    assert all(type(x) is int for pair, n in counts.items() for x in (*pair, n)), "pairs and counts are Python ints"


@given(st.lists(st.integers(0, 5), max_size=50))
def test_count_pairs_matches_counter(ids):
    assert count_pairs(np.array(ids, dtype=np.int64)) == dict(Counter(zip(ids, ids[1:]))), "count every adjacent pair"


def test_merge_positions_by_hand():
    got = merge_positions(np.array([1, 1, 1]), (1, 1)).tolist()
    assert got == [0], f"merge_positions([1, 1, 1], (1, 1)) = {got}: merges go left to right, never overlapping"
    assert merge_positions(np.array([1, 1, 1, 1, 2, 1, 1]), (1, 1)).tolist() == [0, 2, 5]
    assert merge_positions(np.array([1, 2, 1, 2]), (1, 2)).tolist() == [0, 2]
    assert merge_positions(np.array([2, 1]), (1, 2)).tolist() == []
    assert merge_positions(np.array([], dtype=np.int64), (1, 2)).tolist() == []


@given(st.lists(st.integers(0, 2), max_size=40), st.tuples(st.integers(0, 2), st.integers(0, 2)))
def test_merge_positions_matches_a_python_loop(ids, pair):
    got = merge_positions(np.array(ids, dtype=np.int64), pair).tolist()
    assert got == reference_positions(ids, pair), "merges go left to right, never overlapping"


def test_merge_pair_by_hand_and_leaves_its_input_alone():
    ids = np.array([5, 1, 2, 7, 1, 2, 1])
    out = merge_pair(ids, (1, 2), 256)
    assert out.tolist() == [5, 256, 7, 256, 1]
    assert ids.tolist() == [5, 1, 2, 7, 1, 2, 1], "merge_pair must return a new array: ids itself must not change"
    assert merge_pair(np.array([3, 3, 3, 3, 3]), (3, 3), 9).tolist() == [9, 9, 3]


def test_pair_counter_finds_the_most_frequent_pair_and_breaks_ties_by_the_smallest():
    counter = PairCounter()
    counter.add(np.array([5, 1, 1, 9]), np.array([6, 2, 2, 0]), +1)
    counter.add(np.array([5, 9]), np.array([6, 0]), +1)
    assert counter.most_frequent() == ((1, 2), 2)  # (1, 2), (5, 6), (9, 0) all twice: the smallest wins
    counter.add(np.array([1]), np.array([2]), -1)
    assert counter.most_frequent() == ((5, 6), 2)
    with pytest.raises(RuntimeError):
        counter.add(np.array([7]), np.array([7]), -1)


# ---- BPE training --------------------------------------------------------------------------------
def test_bpe_train_hand_example():
    merges = trained_merges("aaabdaaabac", 259)
    expected = [(97, 97), (97, 98), (256, 257)]
    if len(merges) != 3:
        cause = "vocab_size counts the 256 bytes, so 259 means 3 merges"
    elif any(255 in pair for pair in merges):
        cause = "merge k makes id 256 + k (255 is a byte)"
    else:
        cause = ("the incremental counts disagree with a full recount, which gives the expected merges (subtract "
                 "every pair that touched a merged token, once; add every pair next to a new token, once)")
    assert merges == expected, f"merges {merges}, expected {expected}: {cause}"
    assert BPETokenizer(merges).vocab[256:] == [b"aa", b"ab", b"aaab"]


def test_bpe_new_ids_and_vocab_size():
    tok = BPETokenizer().train("the cat and the hat and the bat", 262)
    assert tok.vocab_size == 262 and len(tok.merges) == 6, (
        f"train(..., 262) gave vocab_size {tok.vocab_size} with {len(tok.merges)} merges: vocab_size counts the "
        "256 bytes, so 262 means 6 merges")
    ids = tok.encode("the cat")
    assert max(ids) < 262 and min(i for i in ids if i > 255) >= 256
    first = bytes(tok.merges[0]).decode()
    assert tok.encode(first) == [256], f"encode({first!r}) = {tok.encode(first)}: merge k makes id 256 + k"
    for k, (a, b) in enumerate(tok.merges):
        assert tok.vocab[256 + k] == tok.vocab[a] + tok.vocab[b], "merge k makes id 256 + k"


def test_bpe_tie_rule():
    assert BPETokenizer().train("abcabcabc", 257).merges == [(97, 98)], (
        "(97, 98) and (98, 99) both occur 3 times: ties go to the smallest pair")
    assert BPETokenizer().train("xyzzyzy", 257).merges == [(121, 122)]


@pytest.mark.parametrize("text", ["abababababab", "aaaaaaaaaaa", "aaabdaaabac" * 3, "ab ab abab aab bab baba a",
                                  "mississippi missing misses", "ééé 東京東京 🙂🙂🙂 naïve naïve"],
                         ids=["abab", "aaaa", "aaabdaaabac", "ab-mix", "mississippi", "unicode"])
def test_bpe_train_matches_a_full_recount(text):
    got = trained_merges(text, 290)
    expected = reference_merges(text, 290)
    assert got == expected, (
        f"merges {got[:8]}..., a full recount gives {expected[:8]}...: the incremental counts disagree with a full "
        "recount (subtract every pair that touched a merged token, once; add every pair next to a new token, once)")


@given(st.text(alphabet="aab c", min_size=0, max_size=80))
def test_bpe_train_matches_a_full_recount_on_random_text(text):
    assert trained_merges(text, 270) == reference_merges(text, 270), "the incremental counts disagree with a full recount"


def test_bpe_train_on_shakespeare_matches_a_full_recount():
    text = SHAKESPEARE.read_text(encoding="utf-8")[:20_000]
    assert trained_merges(text, 300) == reference_merges(text, 300), "the incremental counts disagree with a full recount"


def test_bpe_train_stops_when_no_pair_is_left_and_restarts_from_bytes():
    assert BPETokenizer().train("ab", 300).merges == [(97, 98)]
    assert BPETokenizer().train("", 300).vocab_size == 256
    tok = BPETokenizer().train("aaaa", 257)
    tok.train("bbbb", 257)
    assert tok.merges == [(98, 98)], "train starts again from the 256 bytes"
    with pytest.raises(ValueError):
        BPETokenizer().train("abc", 255)


# ---- encode / decode -------------------------------------------------------------------------------
def test_encode_replays_the_merges_in_order():
    tok = BPETokenizer([(97, 98), (256, 99), (257, 257)])
    got = tok.encode("abcabcab")
    assert got == [258, 256], f"encode('abcabcab') = {got}, expected [258, 256]: apply the merges in the order they were learned"
    assert tok.encode("") == [] and tok.encode("a") == [97]
    assert all(type(i) is int for i in got)


def test_encode_of_the_training_text_equals_the_training_result():
    text = "aaabdaaabac the cat sat on the mat " * 3
    tok = BPETokenizer().train(text, 280)
    ids = list(text.encode("utf-8"))
    for k, pair in enumerate(tok.merges):
        ids = merge_pair(np.array(ids), pair, 256 + k).tolist()
    assert tok.encode(text) == ids, "encode must apply the merges in the order they were learned"


def test_decode_is_byte_level():
    tok = BPETokenizer([(99, 97), (102, 195)])  # "ca", then "f" + the first byte of "é"
    ids = tok.encode("café")
    assert ids == [256, 257, 169]
    got = tok.decode(ids)
    assert got == "café", f"decode({ids}) = {got!r}: join the bytes of all tokens first, then decode UTF-8 once"
    try:
        broken = BPETokenizer().decode([99, 195])
    except UnicodeDecodeError as err:
        raise AssertionError("decode must not raise on a cut character: decode UTF-8 with errors='replace'") from err
    assert broken == "c\ufffd"


@pytest.mark.parametrize("bad", [262, 1000, -1], ids=["id=262", "id=1000", "id=-1"])
def test_decode_bad_ids_raise_index_error(bad):
    tok = BPETokenizer().train("the cat and the hat and the bat", 262)
    try:
        out = tok.decode([97, bad])
    except IndexError as err:
        assert str(bad) in str(err) and "262" in str(err), (
            f"the IndexError should name the id {bad} and the size 262 (check the range yourself: negative ids would "
            f"silently read from the end): {err}")
    else:
        raise AssertionError(f"decode([97, {bad}]) returned {out!r}: ids outside [0, 262) must raise IndexError "
                             "(negative ids would silently read from the end)")


@given(st.text(max_size=40))
def test_bpe_round_trips_any_unicode_string(s):
    tok = BPETokenizer([(195, 169), (99, 97), (256, 256), (226, 128), (240, 159), (32, 32), (101, 32)])
    assert tok.decode(tok.encode(s)) == s, f"round trip failed for {s!r}"
    assert BPETokenizer().decode(BPETokenizer().encode(s)) == s


def test_bpe_trained_on_shakespeare_round_trips_other_languages():
    tok = BPETokenizer().train(SHAKESPEARE.read_text(encoding="utf-8")[:30_000], 320)
    for s in ("Überall ist es schön.", "東京は大きい", "emoji 🙂👍🏽", "tab\tand\r\nnewlines", "\x00\x7f"):
        assert tok.decode(tok.encode(s)) == s, f"round trip failed for {s!r}"
    assert len(tok.encode("the king")) < len("the king"), "merges learned on Shakespeare shorten English"


def test_bpe_save_and_load(tmp_path):
    tok = BPETokenizer().train("to be or not to be, that is the question", 270)
    path = tmp_path / "bpe.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["type"] == "bpe" and [tuple(p) for p in data["merges"]] == tok.merges
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tok.merges and loaded.vocab == tok.vocab and loaded.vocab_size == 270
    assert loaded.encode("to be") == tok.encode("to be")
    with pytest.raises(ValueError):
        BPETokenizer([(97, 300)])
    CharTokenizer.from_text("ab").save(tmp_path / "c.json")
    with pytest.raises(ValueError):
        BPETokenizer.load(tmp_path / "c.json")
