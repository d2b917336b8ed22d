# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 10: Tokenization
#
# > A model reads integers. Which integers, and how many of them, is a design decision.
#
# **After this module you will be able to**
#
# * turn text into a list of integers and back with a character tokenizer whose
#   vocabulary is the same on every run;
# * explain what UTF-8 does to a character, and why a tokenizer built on bytes can encode
#   *any* string, emoji included;
# * train a byte-level BPE tokenizer (byte pair encoding): count every adjacent pair,
#   merge the most frequent one, repeat, and keep the counts up to date after each merge
#   instead of recounting, so that training on a megabyte of text takes seconds;
# * measure how many tokens per character each vocabulary size costs on real text;
# * save a tokenizer to JSON and load it back.
#
# **Time:** about 2 to 3 hours. Every measurement runs in a few seconds.
#
# | piece | what it does |
# |---|---|
# | `CharTokenizer` | one id per distinct character of a text, ids in sorted order |
# | `count_pairs` | how often each adjacent pair of ids occurs |
# | `merge_positions`, `merge_pair` | where a pair is merged (left to right, never overlapping), and the merge |
# | `BPETokenizer.train` | the training loop, with pair counts updated incrementally |
# | `BPETokenizer.encode`, `.decode` | text to ids by replaying the merges; ids to text through bytes |
#
# The text we train on is Tiny Shakespeare (`datasets/tinyshakespeare.txt`, 1.1 million
# characters), the same file module 13's GPT learns to imitate.

# %%
#| default_exp text.tokenization

# %%
#| export
from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from tinytorch.core.tensor import as_int, to_host
from tinytorch.files import atomic_write

# %% [markdown]
# Three given helpers keep the tokenizers honest with what they are handed. `check_text`
# refuses anything but a `str` where text is expected (bytes from a file opened in binary
# mode, say, with a `TypeError` that says to decode them); `whole_ids`
# turns what `decode` receives into a list of Python ints and refuses a fraction or a
# boolean (`int(2.7)` would quietly decode token 2); `read_tokenizer_json` reads a saved
# tokenizer and refuses, naming the file, anything that is not one: a hand-edited or
# truncated file must never load as a different tokenizer.

# %%
#| export
def whole_ids(ids: Any, owner: str) -> list[int]:
    """`ids` (a list, an array or a Tensor of token ids) as a list of Python ints, for decode.

    Whole-number floats are fine (a Tensor made from a list is float32); a fraction, a
    boolean, a string or a nested sequence raises (ValueError or TypeError naming `owner`):
    `int(2.7)` would quietly decode token 2. The range is checked by decode itself.
    """
    try:
        values = to_host(ids) if hasattr(ids, "shape") else np.asarray(list(ids))
    except (TypeError, ValueError):  # not iterable, or ragged
        raise TypeError(f"{owner}: ids must be a flat sequence of token ids, got {ids!r:.60}.") from None
    if values.size == 0:
        return []
    if values.ndim != 1:
        raise ValueError(f"{owner}: ids must be a flat sequence of token ids, got shape {values.shape}.")
    if values.dtype.kind == "f":
        bad = values[~(np.isfinite(values) & (values == np.round(values)))]
        if bad.size:
            raise ValueError(f"{owner}: token ids must be whole numbers, got {bad[0].item()!r}.")
    elif values.dtype.kind not in "iu":
        raise TypeError(f"{owner}: token ids must be integers, got {values.dtype} values ({values[0].item()!r}).")
    return values.astype(np.int64).tolist()


def check_text(text: Any, owner: str) -> str:
    """`text` itself when it is a str; TypeError naming `owner` and saying what to pass otherwise
    (bytes iterate as ints and have no .encode: they would fail deep inside, or be read as ids)."""
    if isinstance(text, str):
        return text
    hint = (": decode them first, e.g. data.decode('utf-8')" if isinstance(text, (bytes, bytearray, memoryview))
            else "")
    raise TypeError(f"{owner}: text must be a str, got {type(text).__name__}{hint}.")


def read_tokenizer_json(path: Any, kind: str) -> dict:
    """The JSON object of a tokenizer file of type `kind` ("char" or "bpe"); ValueError naming the
    file (and the field) for anything else: bytes that are not UTF-8, text that is not JSON, JSON
    that is not an object, or another tokenizer's file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not a tokenizer file: it is not UTF-8 text ({err.reason} at byte {err.start}).") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path} is not a tokenizer file: it is not JSON ({err}).") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a tokenizer file: it holds a JSON {type(data).__name__}, not an object.")
    if data.get("type") != kind:
        raise ValueError(f"{path}: field 'type' is {data.get('type')!r}; this loader reads {kind!r} tokenizers.")
    return data

# %% [markdown]
# ## 1. Why integers, and which ones
#
# An embedding layer (module 11) maps each id to a learned vector; the output layer scores
# every id of the vocabulary. So before any learning, text must become a sequence of ids
# from a fixed vocabulary, and the model's predictions must turn back into text. Three
# choices of unit:
#
# | unit | vocabulary | tokens for a sentence | unknown input |
# |---|---|---|---|
# | character | the characters seen in training (65 for Shakespeare) | one per character | a new character has no id |
# | byte (UTF-8) | exactly 256 | one per byte (1 to 4 per character) | impossible: every string is bytes |
# | merged bytes (BPE) | 256 + the merges you train | fewer: frequent pieces become one token | impossible, as for bytes |
#
# Fewer tokens means shorter sequences (attention costs grow with the square of the
# length) but a larger vocabulary means larger embedding and output layers. Let us load
# the text.

# %%
DATA = Path("../../datasets/tinyshakespeare.txt")
if not DATA.exists():  # run from the repository root instead of the notebook's folder
    DATA = Path("datasets/tinyshakespeare.txt")
text = DATA.read_text(encoding="utf-8")
print(f"{len(text):,} characters, {len(set(text))} distinct, {len(text.encode('utf-8')):,} UTF-8 bytes")
print(text[:200])

# %% [markdown]
# ## 2. A character tokenizer
#
# The vocabulary is the set of characters in the training text. A set has no order, and
# the order of a Python `set` of strings changes from one run of Python to the next (string
# hashing is randomised). A tokenizer whose ids change between runs would make every saved
# model useless, so the vocabulary is **sorted**: id 0 is the smallest character.
#
# **Write three methods of `CharTokenizer`.**
#
# * `from_text(text)` (a classmethod): a tokenizer whose vocabulary is the sorted distinct
#   characters of `text`: `cls(sorted(...))`.
# * `encode(text) -> list[int]`: the id of each character, in order. A character that is not
#   in the vocabulary raises `ValueError` naming that character (tests check the type and
#   that the character appears in the message).
# * `decode(ids) -> str`: the characters of the ids, joined. An id outside
#   `[0, vocab_size)` raises `IndexError` naming the id and the vocabulary size (negative ids
#   too: Python would silently read from the end of the list).
#
# `self.chars` is the list of characters (id `i` is `self.chars[i]`) and `self.index` the
# dictionary from character to id; the given `__init__` builds both.

# %%
#| export
class CharTokenizer:
    """One id per character: id i is chars[i]. Build with CharTokenizer.from_text(text).

    encode(str) -> list[int]; decode(list[int]) -> str; vocab_size; save(path) / load(path) as JSON.
    """

    def __init__(self, chars: Sequence[str]):
        if isinstance(chars, (bytes, bytearray)) or not hasattr(chars, "__iter__"):
            raise TypeError(f"CharTokenizer: the vocabulary must be a sequence of single characters, "
                            f"got {type(chars).__name__}.")
        chars = list(chars)
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("CharTokenizer: the vocabulary must be a sequence of single characters.")
        if len(set(chars)) != len(chars):
            raise ValueError("CharTokenizer: the vocabulary has a repeated character.")
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        """A tokenizer whose vocabulary is the distinct characters of `text`, sorted."""
        text = check_text(text, "CharTokenizer.from_text")  # given: TypeError unless a str
        ### BEGIN SOLUTION
        return cls(sorted(set(text)))
        ### END SOLUTION

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """The id of every character of `text`; ValueError naming a character outside the vocabulary."""
        text = check_text(text, "CharTokenizer.encode")  # given: TypeError unless a str
        ### BEGIN SOLUTION
        try:
            return [self.index[c] for c in text]
        except KeyError as err:
            raise ValueError(
                f"CharTokenizer: character {err.args[0]!r} (U+{ord(err.args[0]):04X}) is not in the vocabulary "
                f"of {self.vocab_size} characters."
            ) from None
        ### END SOLUTION

    def decode(self, ids: Iterable[int]) -> str:
        """The characters of `ids`, joined; IndexError naming an id outside [0, vocab_size)."""
        ids = whole_ids(ids, "CharTokenizer.decode")  # given: a list of ints (2.5 and True are refused)
        ### BEGIN SOLUTION
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise IndexError(f"CharTokenizer: id {i} is out of range for a vocabulary of {self.vocab_size}.")
            out.append(self.chars[i])
        return "".join(out)
        ### END SOLUTION

    def save(self, path: Any) -> None:
        """Write the vocabulary as JSON: {"type": "char", "chars": [...]} (with `atomic_write`: an
        older file at `path` stays whole until the new one is)."""
        with atomic_write(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"type": "char", "chars": self.chars}, ensure_ascii=False))

    @classmethod
    def load(cls, path: Any) -> "CharTokenizer":
        """The tokenizer `save` wrote; ValueError naming the file and the field for anything else."""
        data = read_tokenizer_json(path, "char")
        chars = data.get("chars")
        if not isinstance(chars, list):
            raise ValueError(f"{path}: field 'chars' must be a list of single characters, got {type(chars).__name__}.")
        for i, c in enumerate(chars):
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"{path}: field 'chars' item {i} is {c!r}, not a single character.")
        if len(set(chars)) != len(chars):
            repeated = next(c for i, c in enumerate(chars) if c in chars[:i])
            raise ValueError(f"{path}: field 'chars' lists {repeated!r} twice; each character has one id.")
        return cls(chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


# %%
def expect_error(error: type, call, *facts: str, what: str = "the call", cause: str = "") -> None:
    """Inline-test helper: call() must raise `error` whose message mentions every fact.

    what -- the call as the student reads it; cause -- the likely reason when it does not.
    """
    why = f": {cause}" if cause else ""
    try:
        call()
    except error as err:
        for fact in facts:
            assert fact in str(err), f"{what}: the {error.__name__} should mention {fact!r}, it says: {err}{why}"
        return
    raise AssertionError(f"{what} must raise {error.__name__}, but nothing was raised{why}")


def test_unit_char_tokenizer():
    tok = CharTokenizer.from_text("hello world")
    assert tok.chars == [" ", "d", "e", "h", "l", "o", "r", "w"], f"vocabulary {tok.chars} must be sorted"
    ids = tok.encode("hello")
    assert ids == [3, 2, 4, 4, 5], f"encode('hello'): each character's index in the sorted vocabulary, [3, 2, 4, 4, 5]; got {ids}"
    text = tok.decode([3, 2, 4, 4, 5])
    assert text == "hello", f"decode([3, 2, 4, 4, 5]) must give 'hello', got {text!r}"
    assert tok.vocab_size == 8, f"'hello world' has 8 distinct characters: vocab_size 8, got {tok.vocab_size}"
    round_trip = tok.decode(tok.encode("low world"))
    assert round_trip == "low world", f"decode(encode('low world')) must give it back, got {round_trip!r}"
    expect_error(ValueError, lambda: tok.encode("help"), "p", what="encode('help') ('p' is not in the vocabulary)",
                 cause="an unknown character must raise ValueError naming it, not be skipped")
    bad_id = ("check every id is in 0 ... vocab_size - 1 and raise IndexError naming the bad one (a negative id would "
              "silently read from the end)")
    expect_error(IndexError, lambda: tok.decode([8]), "8", what="decode([8]) with 8 characters", cause=bad_id)
    expect_error(IndexError, lambda: tok.decode([-1]), "-1", what="decode([-1])", cause=bad_id)
    print("✓ CharTokenizer: sorted vocabulary, encode/decode, unknown characters and bad ids")


test_unit_char_tokenizer()

# %%
chars = CharTokenizer.from_text(text)
print("vocabulary size:", chars.vocab_size)
print("vocabulary:", "".join(chars.chars).encode("unicode_escape").decode())
print("encode('First Citizen'):", chars.encode("First Citizen"))
print("1 token per character: Tiny Shakespeare is", len(chars.encode(text)), "tokens")

# %% [markdown]
# ## 3. Unknown characters, and why bytes have none
#
# Our character tokenizer has never seen "é": Shakespeare's text here is plain ASCII.
# Any character outside those 65 cannot be encoded at all:

# %%
for sample in ("Romeo", "café", "naïve 🙂", "東京"):
    try:
        print(f"{sample!r:12} -> {chars.encode(sample)}")
    except ValueError as err:
        print(f"{sample!r:12} -> ValueError: {err}")

# %% [markdown]
# A character vocabulary could reserve an "unknown" id, but then the text is lost. Bytes
# avoid the problem. Unicode numbers every character (`ord("é") = 233`, `ord("🙂") =
# 128578`), and **UTF-8** writes each number as 1 to 4 bytes: ASCII as one byte (so
# Shakespeare's 1,115,394 characters are 1,115,394 bytes), accented Latin letters as two,
# most Chinese and Japanese characters as three, emoji as four. Every string, in any
# language, is a sequence of bytes `0 ... 255`. A vocabulary of the 256 byte values
# therefore encodes *everything*, and decoding the bytes gives back the string exactly.
#
# **Predict, then run:** how many bytes does each sample take? Which of them will a
# byte-level tokenizer fail on?

# %%
for sample in ("Romeo", "café", "naïve 🙂", "東京"):
    raw = sample.encode("utf-8")
    print(f"{sample!r:12} {len(sample)} characters -> {len(raw):2d} bytes {list(raw)}")

# %% [markdown]
# None: there is nothing to fail on. The price is length: "東京" is 2 characters but 6
# byte tokens. Byte pair encoding wins the length back.
#
# ## 4. Byte pair encoding: counting pairs
#
# BPE (Gage, 1994, for compression; Sennrich et al., 2016, for translation; GPT-2 for
# bytes) starts from the 256 byte tokens and repeats one step:
#
# 1. count how often each **adjacent pair** of tokens occurs in the training text;
# 2. give the most frequent pair a new id (256, 257, ...) and replace its occurrences;
# 3. until the vocabulary has the size you asked for.
#
# Frequent pieces of words ("th", "e ", "the ", "ing") become single tokens.
#
# **Counting.** Every adjacent pair counts, and pairs may overlap: in `[1, 1, 1]` the pair
# `(1, 1)` occurs **twice** (positions 0-1 and 1-2). The sequence `[1, 2, 3, 1, 2]` has
# the pairs `(1, 2)` twice, `(2, 3)` once and `(3, 1)` once.
#
# **Write `count_pairs(ids)`**: a dict from each adjacent pair `(a, b)` (a tuple of two
# Python ints) to its number of occurrences; `{}` for fewer than two ids. `ids` is a 1-D
# integer NumPy array (or a list). `collections.Counter(zip(...))` is a fine first
# version; a vectorised one encodes each pair as one integer `a · 2³² + b` and counts
# them with `np.unique(..., return_counts=True)`.

# %%
#| export
def count_pairs(ids: Any) -> dict[tuple[int, int], int]:
    """{(a, b): number of positions i with ids[i] == a and ids[i + 1] == b}; every adjacent pair counts."""
    ### BEGIN SOLUTION
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size < 2:
        return {}
    codes, counts = np.unique((ids[:-1] << 32) | ids[1:], return_counts=True)
    return {(int(code >> 32), int(code & 0xFFFFFFFF)): int(n) for code, n in zip(codes, counts)}
    ### END SOLUTION


# %%
def test_unit_count_pairs():
    counts = count_pairs([1, 2, 3, 1, 2])
    assert counts == {(1, 2): 2, (2, 3): 1, (3, 1): 1}, \
        f"count_pairs([1, 2, 3, 1, 2]): every adjacent pair, {{(1, 2): 2, (2, 3): 1, (3, 1): 1}}; got {counts}"
    assert count_pairs(np.array([1, 1, 1])) == {(1, 1): 2}, "overlapping pairs count: [1, 1, 1] has (1, 1) twice"
    assert count_pairs([7]) == {} and count_pairs([]) == {}, "fewer than two ids have no pairs: {}"
    kinds = {(type(a).__name__, type(n).__name__) for (a, _), n in count_pairs([300, 5, 300]).items()}
    assert kinds == {("int", "int")}, f"pairs and counts must be Python ints (not NumPy scalars), got {kinds}"
    print("✓ count_pairs: every adjacent pair, overlaps included")


test_unit_count_pairs()

# %% [markdown]
# ## 5. Merging a pair
#
# Replacing a pair `(a, b)` by a new id `z` goes **left to right** and an occurrence that
# overlaps one already merged is skipped: `[1, 1, 1]` with the pair `(1, 1)` becomes
# `[z, 1]` (positions 0-1 merge; position 1 is taken, so 1-2 cannot). So the number of
# replacements can be smaller than the count: counts are of every adjacent pair, merges of
# non-overlapping ones. Overlaps only happen when `a == b`: for `a != b` two occurrences can
# never share a token.
#
# **Write `merge_positions(ids, pair)`**: a 1-D int64 array of the positions `i` (in
# increasing order) where `ids[i], ids[i + 1]` is merged, by the rule above. A Python loop
# is a correct first version and passes the tests, but section 7 calls this function once
# per merge on a million ids: with a loop the rest of the lesson takes many minutes, so
# vectorise it before you go on. The vectorised one: find every `i` where the pair matches; for
# `a != b` that is the answer; for `a == b` the matches come in runs of consecutive
# positions, and the merged ones are the 1st, 3rd, 5th ... of each run (an even distance
# from the run's first position; `np.maximum.accumulate` can carry each run's start along).
#
# **Write `merge_pair(ids, pair, new_id)`**: a new int array in which each merged
# occurrence is replaced by `new_id` (the left token becomes `new_id`, the right one is
# removed). `ids` itself is not changed.

# %%
#| export
def merge_positions(ids: Any, pair: tuple[int, int]) -> np.ndarray:
    """Positions i (increasing, int64) where (ids[i], ids[i+1]) == pair is merged: left to right, never overlapping."""
    ### BEGIN SOLUTION
    ids = np.asarray(ids)
    a, b = pair
    if ids.size < 2:
        return np.zeros(0, dtype=np.int64)
    matches = np.flatnonzero((ids[:-1] == a) & (ids[1:] == b))
    if a != b or matches.size == 0:
        return matches.astype(np.int64)
    starts_run = np.ones(matches.size, dtype=bool)
    starts_run[1:] = matches[1:] != matches[:-1] + 1
    run_start = np.maximum.accumulate(np.where(starts_run, matches, 0))
    return matches[(matches - run_start) % 2 == 0].astype(np.int64)
    ### END SOLUTION


def merge_pair(ids: Any, pair: tuple[int, int], new_id: int) -> np.ndarray:
    """A new array: every merged occurrence of `pair` (see merge_positions) replaced by `new_id`."""
    ### BEGIN SOLUTION
    ids = np.asarray(ids)
    positions = merge_positions(ids, pair)
    out = ids.copy()
    out[positions] = new_id
    return np.delete(out, positions + 1)
    ### END SOLUTION


# %%
def test_unit_merge_pair():
    assert merge_positions([1, 1, 1], (1, 1)).tolist() == [0], "left to right, never overlapping"
    for ids, pair, expected in (([1, 1, 1, 1, 5, 1, 1], (1, 1), [0, 2, 5]), ([1, 2, 1, 2, 2], (1, 2), [0, 2])):
        got = merge_positions(ids, pair).tolist()
        assert got == expected, f"merge_positions({ids}, {pair}): left to right, never overlapping, {expected}; got {got}"
    got = merge_pair(np.array([1, 1, 1]), (1, 1), 9).tolist()
    assert got == [9, 1], f"merge_pair([1, 1, 1], (1, 1), 9): the first two merge, the third stays: [9, 1]; got {got}"
    ids = np.array([5, 1, 2, 7, 1, 2])
    got = merge_pair(ids, (1, 2), 256).tolist()
    assert got == [5, 256, 7, 256], f"merge_pair([5, 1, 2, 7, 1, 2], (1, 2), 256) must be [5, 256, 7, 256], got {got}"
    assert ids.tolist() == [5, 1, 2, 7, 1, 2], f"merge_pair changed its input to {ids.tolist()}: return a new array"
    single = merge_pair(np.array([3]), (3, 3), 256).tolist()
    assert single == [3], f"one id has no pair to merge: [3], got {single}"
    print("✓ merge_positions, merge_pair: left to right, overlaps skipped, input unchanged")


test_unit_merge_pair()

# %% [markdown]
# ### By hand: `"aaabdaaabac"`
#
# The bytes are `a = 97, b = 98, c = 99, d = 100`. Count the pairs: `(97, 97)` occurs 4
# times (twice in each `aaa`), `(97, 98)` twice, the others once. Merge `(97, 97)` into 256:
# each `aaa` becomes `256 a`. Now `(256, 97)` and `(97, 98)` both occur twice: a **tie**.
#
# Ties must be broken the same way every time, or two runs give two tokenizers. Our rule:
# **among the most frequent pairs, take the smallest `(a, b)`** (compare `a` first, then
# `b`). `(97, 98) < (256, 97)`, so `ab` becomes 257. Then `(256, 257)` occurs twice and
# becomes 258: the text is `258 d 258 a c`. Run it:

# %%
ids = np.frombuffer(b"aaabdaaabac", dtype=np.uint8).astype(np.int64)
for new_id in (256, 257, 258):
    pairs = count_pairs(ids)
    top = max(pairs.values())
    best = min(pair for pair, n in pairs.items() if n == top)  # the tie rule
    ids = merge_pair(ids, best, new_id)
    print(f"merge {best} (count {top}) -> {new_id}: {ids.tolist()}")

# %% [markdown]
# ## 6. Training without recounting
#
# The loop above recounts every pair of the whole text after each merge. On Tiny
# Shakespeare that is a million pairs, 256 times over for a vocabulary of 512. But a merge
# changes only the pairs **next to** the tokens it merges. For merged positions `p` (pair
# `ids[p], ids[p+1]`):
#
# * the pairs that **disappear** are the old pairs at indices `p - 1`, `p` and `p + 1`
#   (pair index `i` means `(ids[i], ids[i + 1])`). Take each index once: in `a b a b` with
#   the pair `(a, b)`, index 1 (`b a`) is `p + 1` of the first merge *and* `p - 1` of the
#   second; subtracting it twice would count it below zero;
# * the pairs that **appear** are the new pairs at indices `q - 1` and `q`, where `q` is
#   where a new token sits in the merged sequence. A merge at old position `p` moves left
#   by one for every merge before it: `q = p - (its rank among the merged positions)`.
#   Again take each index once (in `z z` both new tokens share a pair);
# * keep only the indices that are pairs: `0 <= i <= len(ids) - 2` (the old `ids` for the
#   pairs that disappear, the merged ones for those that appear). A merge at the very start
#   or end has no neighbour there, and NumPy would read `ids[-1]` without complaint;
# * every other pair is untouched.
#
# The given `PairCounter` keeps the counts and finds the most frequent pair quickly. It
# holds a dict from pair to count and a heap (Python's `heapq`) of `(-count, pair)`
# entries; when a count changes it pushes a new entry and leaves the stale one in the
# heap; `most_frequent()` pops stale entries until the top agrees with the dict. The
# heap's order is the tie rule: the largest count, then the smallest pair. `add(left,
# right, sign)` adds `sign` (+1 or -1) once for each pair `(left[i], right[i])`; a count
# that would drop below zero is a bug in the caller and raises `RuntimeError`.

# %%
#| export
class PairCounter:
    """Counts of adjacent pairs, with the most frequent pair (ties: the smallest pair) always at hand.

    add(left, right, sign): count[(left[i], right[i])] += sign for every i (sign +1 or -1).
    most_frequent() -> ((a, b), count) or None when no pair is left.
    """

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # pair code a · 2³² + b -> count (codes order like (a, b))
        self._heap: list[tuple[int, int]] = []  # (-count, code); stale entries are skipped

    def add(self, left: Any, right: Any, sign: int) -> None:
        codes = (np.asarray(left, dtype=np.int64) << 32) | np.asarray(right, dtype=np.int64)
        uniques, repeats = np.unique(codes, return_counts=True)
        for code, n in zip(uniques.tolist(), repeats.tolist()):
            count = self.counts.get(code, 0) + sign * n
            if count < 0:
                raise RuntimeError(
                    f"PairCounter: the count of pair {(code >> 32, code & 0xFFFFFFFF)} went below zero: a pair "
                    "that disappeared was subtracted twice (take each pair index once), or a pair that does "
                    "not exist was subtracted (keep only pair indices 0 <= i <= len(ids) - 2: ids[-1] wraps around)."
                )
            if count == 0:
                self.counts.pop(code, None)
            else:
                self.counts[code] = count
                heapq.heappush(self._heap, (-count, code))

    def most_frequent(self) -> tuple[tuple[int, int], int] | None:
        while self._heap:
            negative, code = self._heap[0]
            if self.counts.get(code) == -negative:
                return (code >> 32, code & 0xFFFFFFFF), -negative
            heapq.heappop(self._heap)  # stale: this pair's count has changed since
        return None

    def __len__(self) -> int:
        return len(self.counts)


# %% [markdown]
# **Write `BPETokenizer.train(text, vocab_size)`.** The given part turns the text into its
# UTF-8 bytes, `ids` (an int64 array), and checks `vocab_size >= 256`. Then:
#
# 1. a `PairCounter` with every adjacent pair of `ids`;
# 2. while the vocabulary is smaller than `vocab_size`: take `most_frequent()` (stop early
#    if it is None: the text has no pair left), the new id `256 + len(merges)`, the merged
#    positions (`merge_positions`); subtract the pairs that disappear, replace the pair in
#    `ids` (the left token becomes the new id, the right one is deleted: `np.delete`), add
#    the pairs that appear; append the pair to `merges`;
# 3. store the merges with `self._set_merges(merges)` (given: it also rebuilds
#    `self.vocab`, the bytes of every id) and return `self`.
#
# `verbose=True` may print each merge. Training always starts from the 256 bytes: any
# earlier merges are replaced. `self.merges` is a list of `(a, b)` tuples of Python ints;
# merge `k` created id `256 + k`.
#
# **Write `encode(text) -> list[int]`**: the UTF-8 bytes of `text`, then every merge in
# the order it was learned (merge `k` makes id `256 + k` with `merge_pair`), then a list of
# Python ints. Replaying the merges in order reproduces exactly what training did. Any
# other order is a different tokenizer: a later merge can only combine tokens that earlier
# merges have made.
#
# **Write `decode(ids) -> str`**: join the bytes of every id (`self.vocab[i]`) into one
# `bytes` object and decode it as UTF-8 with `errors="replace"`. Decode the joined bytes,
# never token by token: a character's bytes may be split across tokens (`é` is two bytes,
# and "c" + "af" + "\xc3" + "\xa9" is a perfectly possible tokenization of "café"). A
# sequence of ids that ends in the middle of a character (a model can generate one) gives
# `"\ufffd"` (�) there instead of an error. An id outside `[0, vocab_size)` raises
# `IndexError` naming the id and the vocabulary size.

# %%
#| export
class BPETokenizer:
    """Byte-level byte pair encoding: ids 0-255 are the bytes; merge k makes id 256 + k.

    train(text, vocab_size): learn vocab_size - 256 merges from `text` (most frequent adjacent
    pair first, every adjacent pair counted; ties go to the smallest pair (a, b)).
    encode(str) -> list[int]; decode(list[int]) -> str (UTF-8, errors="replace");
    decode(encode(s)) == s for every string; save(path) / load(path) as JSON.
    """

    def __init__(self, merges: Iterable[tuple[int, int]] = ()):
        try:
            merges = [tuple(pair) for pair in merges]
        except TypeError:  # not iterable, or a merge that is not a pair
            raise TypeError(f"BPETokenizer: merges must be a sequence of (a, b) id pairs, got {merges!r:.60}.") from None
        self._set_merges(merges)

    def _set_merges(self, merges: list[tuple[int, int]]) -> None:
        """Check the merges and rebuild self.vocab (the bytes of every id).

        Each merge is a pair of ints (not booleans) naming ids that exist before it, and no
        pair is merged twice (the second would never apply, and shift every later id)."""
        vocab = [bytes([i]) for i in range(256)]
        seen: set[tuple[int, int]] = set()
        for k, pair in enumerate(merges):
            if len(pair) != 2 or not all(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))
                                         for i in pair):
                raise ValueError(f"BPETokenizer: merge {k} {pair!r} is not a pair of integer ids.")
            a, b = pair
            if not (0 <= a < 256 + k and 0 <= b < 256 + k):
                raise ValueError(f"BPETokenizer: merge {k} ({a}, {b}) uses an id that does not exist yet.")
            if (a, b) in seen:
                raise ValueError(f"BPETokenizer: merge {k} ({a}, {b}) repeats an earlier merge (once merged, a "
                                 "pair never occurs again: if train learned it twice, a pair count was not updated).")
            seen.add((a, b))
            vocab.append(vocab[a] + vocab[b])
        self.merges = [(int(a), int(b)) for a, b in merges]
        self.vocab = vocab

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges)

    def train(self, text: str, vocab_size: int, verbose: bool = False) -> "BPETokenizer":
        """Learn vocab_size - 256 merges from `text`, pair counts updated incrementally; returns self."""
        vocab_size = as_int(vocab_size, "BPETokenizer.train: vocab_size")
        if vocab_size < 256:
            raise ValueError(f"BPETokenizer.train: vocab_size must be at least 256 (the bytes), got {vocab_size}.")
        ids = np.frombuffer(check_text(text, "BPETokenizer.train").encode("utf-8"), dtype=np.uint8).astype(np.int64)
        ### BEGIN SOLUTION
        merges: list[tuple[int, int]] = []
        counter = PairCounter()
        counter.add(ids[:-1], ids[1:], +1)
        while 256 + len(merges) < vocab_size:
            best = counter.most_frequent()
            if best is None:
                break
            pair, count = best
            new_id = 256 + len(merges)
            positions = merge_positions(ids, pair)
            gone = np.unique(np.concatenate((positions - 1, positions, positions + 1)))
            gone = gone[(gone >= 0) & (gone < ids.size - 1)]
            counter.add(ids[gone], ids[gone + 1], -1)
            ids[positions] = new_id
            ids = np.delete(ids, positions + 1)
            new_positions = positions - np.arange(positions.size)
            made = np.unique(np.concatenate((new_positions - 1, new_positions)))
            made = made[(made >= 0) & (made < ids.size - 1)]
            counter.add(ids[made], ids[made + 1], +1)
            merges.append(pair)
            if verbose:
                print(f"merge {len(merges):4d}: {pair} -> {new_id} (count {count})")
        self._set_merges(merges)
        return self
        ### END SOLUTION

    def encode(self, text: str) -> list[int]:
        """UTF-8 bytes of `text`, then every merge in the order it was learned."""
        text = check_text(text, "BPETokenizer.encode")  # given: TypeError unless a str
        ### BEGIN SOLUTION
        ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        for k, pair in enumerate(self.merges):
            if ids.size < 2:
                break
            ids = merge_pair(ids, pair, 256 + k)
        return ids.tolist()
        ### END SOLUTION

    def decode(self, ids: Iterable[int]) -> str:
        """The joined bytes of `ids` decoded as UTF-8 (errors="replace"); IndexError for an unknown id."""
        ids = whole_ids(ids, "BPETokenizer.decode")  # given: a list of ints (2.5 and True are refused)
        ### BEGIN SOLUTION
        pieces = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise IndexError(f"BPETokenizer: id {i} is out of range for a vocabulary of {self.vocab_size}.")
            pieces.append(self.vocab[i])
        return b"".join(pieces).decode("utf-8", errors="replace")
        ### END SOLUTION

    def token_text(self, i: int) -> str:
        """A readable form of token i's bytes (for printing vocabularies)."""
        return self.vocab[i].decode("utf-8", errors="backslashreplace")

    def save(self, path: Any) -> None:
        """Write the merges as JSON: {"type": "bpe", "merges": [[a, b], ...]} (the vocabulary follows
        from them), with `atomic_write`: an older file at `path` stays whole until the new one is."""
        with atomic_write(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"type": "bpe", "merges": [list(p) for p in self.merges]}))

    @classmethod
    def load(cls, path: Any) -> "BPETokenizer":
        """The tokenizer `save` wrote; ValueError naming the file and the field for anything else."""
        data = read_tokenizer_json(path, "bpe")
        merges = data.get("merges")
        if not isinstance(merges, list):
            raise ValueError(f"{path}: field 'merges' must be a list of [a, b] pairs, got {type(merges).__name__}.")
        for k, pair in enumerate(merges):
            if not (isinstance(pair, list) and len(pair) == 2 and all(type(i) is int for i in pair)):
                raise ValueError(f"{path}: field 'merges' item {k} is {pair!r}, not a pair [a, b] of integer ids.")
        try:
            return cls(tuple(pair) for pair in merges)
        except ValueError as err:
            raise ValueError(f"{path}: field 'merges': {err}") from None

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"


# %%
def test_unit_bpe_tokenizer():
    tok = BPETokenizer().train("aaabdaaabac", 259)
    merges = tok.merges
    if merges != [(97, 97), (97, 98), (256, 257)]:
        cause = ("train makes vocab_size - 256 merges: vocab_size counts the 256 byte tokens too" if len(merges) != 3 else
                 "merge k (counting from 0) makes the new id 256 + k" if (255, 256) in merges else
                 "the pair counts disagree with a full recount: after a merge, subtract the pairs it destroyed and count "
                 "the new ones at the merged positions")
        raise AssertionError(f"merges {merges}; the hand example gives (97, 97), (97, 98), (256, 257): {cause}")
    assert tok.vocab_size == 259 and tok.vocab[258] == b"aaab", \
        f"256 bytes + 3 merges: vocab_size 259, and token 258 = 256 + 257 = b'aaab'; got {tok.vocab_size}, {tok.vocab.get(258)!r}"
    ids = tok.encode("aaabdaaabac")
    assert ids == [258, 100, 258, 97, 99], f"encode applies the merges in the order learned: [258, 100, 258, 97, 99]; got {ids}"
    for s in ("aaabdaaabac", "", "café 🙂 東京", "abracadabra"):
        try:
            back = tok.decode(tok.encode(s))
        except UnicodeDecodeError as err:
            raise AssertionError(f"decode(encode({s!r})) raised UnicodeDecodeError ({err}): decode with "
                                 "errors='replace'") from None
        assert back == s, (f"round trip failed for {s!r}, got {back!r}: join the bytes of all tokens first, then decode "
                           "once (a character's bytes may span tokens)")
    try:
        partial = BPETokenizer().decode([195])
    except UnicodeDecodeError as err:
        raise AssertionError(f"decode([195]) raised UnicodeDecodeError ({err}): decode with errors='replace'") from None
    assert partial == "\ufffd", f"byte 195 alone is half a UTF-8 character: decode with errors='replace' (\ufffd), got {partial!r}"
    expect_error(IndexError, lambda: tok.decode([259]), "259", what="decode([259]) with 259 tokens",
                 cause="check every id is in 0 ... vocab_size - 1 and raise IndexError naming the bad one (a negative "
                       "id would silently read from the end)")
    assert BPETokenizer().train("ab", 300).vocab_size == 257, "stops when no pair is left"
    print("✓ BPETokenizer: the hand example, encode/decode round trips, partial characters, bad ids")


test_unit_bpe_tokenizer()

# %% [markdown]
# ## 7. Training on Tiny Shakespeare
#
# First, the two training loops side by side on the first 100,000 characters, 50 merges
# each: the one of section 5 (recount everything after each merge) and yours.
#
# **Predict, then run.** Which is faster, and by how much? Will they learn the same merges?

# %%
#| export
def train_by_recounting(text: str, vocab_size: int) -> list[tuple[int, int]]:
    """The slow reference (given): recount every pair after every merge; the merges `train` must
    also learn. The benchmark (`tito bench tokenization`) times it against `train`."""
    ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    merges = []
    while 256 + len(merges) < vocab_size:
        pairs = count_pairs(ids)
        if not pairs:
            break
        top = max(pairs.values())
        best = min(pair for pair, n in pairs.items() if n == top)
        ids = merge_pair(ids, best, 256 + len(merges))
        merges.append(best)
    return merges


# %%
import time

sample = text[:100_000]
start = time.perf_counter()
slow = train_by_recounting(sample, 306)
t_slow = time.perf_counter() - start
start = time.perf_counter()
fast = BPETokenizer().train(sample, 306)
t_fast = time.perf_counter() - start
print(f"recounting: {t_slow:.2f} s   incremental: {t_fast:.2f} s   ({t_slow / t_fast:.1f}x)   same merges: {slow == fast.merges}")

# %% [markdown]
# **Predict, then run:** how long will 256 merges (a vocabulary of 512) take on the whole
# text, ten times longer than the sample? (Seconds with a vectorised `merge_positions`;
# if yours is still a Python loop, vectorise it first.)

# %%
start = time.perf_counter()
bpe = BPETokenizer().train(text, 512)
print(f"trained to {bpe.vocab_size} tokens on {len(text):,} characters in {time.perf_counter() - start:.1f} s")
print("first 12 merges:", [bpe.token_text(256 + k) for k in range(12)])
print("last 8 merges:  ", [bpe.token_text(i) for i in range(504, 512)])
print("longest tokens: ", sorted((bpe.token_text(i) for i in range(256, 512)), key=len)[-6:])

# %% [markdown]
# Where does the time go? Your `train` no longer recounts, but each merge still makes one
# vectorised pass over the ids: `merge_positions` compares the whole array, and `np.delete`
# copies it. That is about a millisecond per merge on this text. Avoiding even that pass
# needs an index from each pair to its positions, updated as tokens merge (real BPE
# trainers do this); in Python, looping over every merged position costs more than the
# NumPy pass it saves. The counting, which was the expensive part, now touches only the
# pairs next to the merged tokens.
#
# The first merges are the commonest letter pairs with spaces and line ends (`e` + space,
# `t` + `h`, ...); later ones are whole frequent words and names of speakers, because the
# text is a play and every speech starts with a name and a colon.
#
# ## 8. Tokens per character
#
# The point of merging is shorter sequences. We train on the first 90% of the text and
# measure on the last 10%, which the tokenizer has not seen. A tokenizer with the first
# `k` merges of a longer training run *is* the tokenizer trained to `256 + k` (training is
# deterministic and one merge at a time), so one training run gives every size.
#
# **Predict, then run:** with 256 merges, what fraction of the byte tokens is left? With
# 1,024?

# %%
cut = int(0.9 * len(text))
train_text, held_out = text[:cut], text[cut:]
start = time.perf_counter()
big = BPETokenizer().train(train_text, 1280)
print(f"trained to 1280 in {time.perf_counter() - start:.1f} s")
print(f"{'vocab size':>10} {'tokens':>8} {'tokens/char':>11} {'chars/token':>11}")
print(f"{'chars: ' + str(chars.vocab_size):>10} {len(held_out):8,} {1.0:11.3f} {1.0:11.2f}")
for size in (256, 300, 384, 512, 768, 1024, 1280):
    tokens = len(BPETokenizer(big.merges[: size - 256]).encode(held_out))
    print(f"{size:>10} {tokens:8,} {tokens / len(held_out):11.3f} {len(held_out) / tokens:11.2f}")

# %% [markdown]
# The first merges buy the most: each takes the most frequent remaining pair, so each
# later merge saves less than the one before (the curve flattens). On this ASCII text the
# 256 bytes are no better than the 65 characters (one token per character either way); the
# merges are what shorten the sequence. Real tokenizers (GPT-2: 50,257 tokens; Llama 3:
# 128,256) are trained on far more varied text and reach about four characters per token on
# English.
#
# Remember the trade: a vocabulary of `V` tokens costs an embedding table and an output
# layer of `V × D` parameters each, and every training step computes a softmax over `V`
# scores per position; a sequence of `T` tokens costs attention `O(T²)`.
#
# ## 9. Saving and loading
#
# A tokenizer is part of a model: a checkpoint is useless without the exact tokenizer it
# was trained with. Both tokenizers save as small JSON files: the character list, or the
# list of merges (the vocabulary follows from the merges).

# %%
import os
import tempfile

folder = tempfile.mkdtemp()
bpe.save(os.path.join(folder, "bpe.json"))
chars.save(os.path.join(folder, "chars.json"))
again = BPETokenizer.load(os.path.join(folder, "bpe.json"))
print("bpe.json:", os.path.getsize(os.path.join(folder, "bpe.json")), "bytes;",
      "chars.json:", os.path.getsize(os.path.join(folder, "chars.json")), "bytes")
line = "ROMEO: But soft, what light through yonder window breaks? 🌅"
print("same ids after loading:", again.encode(line) == bpe.encode(line), " round trip:", again.decode(again.encode(line)) == line)
print(len(line), "characters ->", len(bpe.encode(line)), "tokens:", [bpe.token_text(i) for i in bpe.encode(line)])


# %%
def test_unit_save_load():
    folder = tempfile.mkdtemp()
    tok = BPETokenizer().train("the cat sat on the mat; the end", 270)
    tok.save(os.path.join(folder, "t.json"))
    loaded = BPETokenizer.load(os.path.join(folder, "t.json"))
    assert loaded.merges == tok.merges and loaded.vocab == tok.vocab, \
        "BPETokenizer.load must give back the same merges (as tuples, in order) and vocabulary"
    ct = CharTokenizer.from_text("hello")
    ct.save(os.path.join(folder, "c.json"))
    chars = CharTokenizer.load(os.path.join(folder, "c.json")).chars
    assert chars == ct.chars, f"CharTokenizer.load must give back the characters {ct.chars}, got {chars}"
    expect_error(ValueError, lambda: CharTokenizer.load(os.path.join(folder, "t.json")), "bpe")
    print("✓ save and load: the same merges and vocabulary, wrong kind refused")


test_unit_save_load()

# %% [markdown]
# ## Summary
#
# * Models read ids from a fixed vocabulary. Characters give a small vocabulary but cannot
#   encode a character they never saw; bytes (UTF-8) encode every string with 256 ids.
# * BPE merges the most frequent adjacent pair into a new token, again and again. Counting
#   takes every adjacent pair (overlaps too); merging goes left to right without overlaps;
#   ties go to the smallest pair, so training is deterministic.
# * A merge only changes the pairs next to the merged tokens: update those counts instead
#   of recounting, and training on a megabyte takes seconds.
# * Encoding replays the merges in the order they were learned; decoding joins the bytes
#   first and then decodes UTF-8.
# * More merges, fewer tokens per character, with diminishing returns.
#
# ## Exercises and questions
#
# Answer each by running your own code.
#
# 1. **Non-English text.** Take your 512-token Shakespeare BPE and encode the sentence
#    "Überall ist es schön, sagt die Köchin." and a line of Japanese. How many tokens per
#    character does each take, compared with English? What does that mean for a model
#    whose tokenizer was trained on English alone?
# 2. **The unknown character.** Build `CharTokenizer.from_text(text)` and find a character
#    it cannot encode in a line of your own. Could a character tokenizer handle it with an
#    extra "unknown" id? What would `decode` give back?
# 3. **Splitting a character.** Find a string and a list of BPE ids whose decoding contains
#    `"\ufffd"`. Why can a generating model produce such a list, and why does `decode` not
#    raise?
# 4. **The tie rule.** Train on `"abcabcabc"` to 258. Which pairs tie for the first merge,
#    and which one wins? Would a tokenizer trained with "the pair that occurs first in the
#    text wins" learn the same merges here?
# 5. **Cost of recounting.** Time `train_by_recounting` and your `train` for 20, 40 and 80
#    merges on 100,000 characters. How does each grow with the number of merges? Which
#    part of your `train` still touches every token once per merge?
# 6. **Diminishing returns.** From the table of section 8, how many tokens did merges
#    257-300 save on the held-out text, and how many did merges 1025-1280 save? Print the
#    counts of the first and the last merge during training (`verbose=True`).
# 7. **Overfitting a tokenizer.** Train to 1280 on the first 10% of the text only and
#    measure tokens per character on the last 10%. Is it better or worse than training on
#    90%? What do the last merges look like?
# 8. **Trade-offs.** For a GPT with width 128, how many parameters does the token embedding
#    have with the character vocabulary, with 512 BPE tokens and with 50,257? At the same
#    context of 256 tokens, how many characters of text does each model see at once?
