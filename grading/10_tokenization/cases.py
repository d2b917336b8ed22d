"""Module 10, graded cases: the character tokenizer, pair counting and merging, byte-level BPE.

Texts are drawn from seeded words with runs ("aaaa", "zzz") and multi-byte characters, so
overlapping merges, merges at the very start and characters split across tokens all occur.
A save/load case writes into a temporary folder it makes and removes.
Format: grading/reference_values.py.
"""
import tempfile
from pathlib import Path

import numpy as np
from reference_values import raised

from tinytorch.text.tokenization import BPETokenizer, CharTokenizer, count_pairs, merge_pair, merge_positions

WORDS = ["aaaa", "zzz", "the", "then", "über", "café", "日本", "aa", "ab", "ba", "naïve", "zz", "a"]


def seeded_text(rng, words):
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), words))


def pairs_table(counts):
    """count_pairs' dict as rows [a, b, count], sorted by pair."""
    return np.array(sorted([a, b, n] for (a, b), n in counts.items()), dtype=np.int64).reshape(-1, 3)


def _char(rng):
    text = seeded_text(rng, 40)
    tokenizer = CharTokenizer.from_text(text)
    probe = seeded_text(rng, 6)
    ids = tokenizer.encode(probe)
    return {"chars": tokenizer.chars, "vocab_size": tokenizer.vocab_size, "ids": ids,
            "round_trip": tokenizer.decode(ids) == probe, "decoded": tokenizer.decode([3, 0, 5]),
            "unknown": raised(tokenizer.encode, "q!"), "negative": raised(tokenizer.decode, [1, -2]),
            "too_large": raised(tokenizer.decode, [tokenizer.vocab_size])}


def _char_save_load(rng):
    tokenizer = CharTokenizer.from_text(seeded_text(rng, 10))
    with tempfile.TemporaryDirectory(prefix="case-tokenizer-") as folder:
        path = Path(folder) / "chars.json"
        tokenizer.save(path)
        loaded = CharTokenizer.load(path)
    return {"chars": loaded.chars}


def _count_pairs(rng):
    ids = rng.integers(0, 4, 30)
    ids[5:9] = 7  # a run: every adjacent pair counts, overlapping ones too
    return {"pairs": pairs_table(count_pairs(ids)), "short": pairs_table(count_pairs([5]))}


def _merge(rng):
    runs = np.array([1, 1, 1, 2, 1, 1, 1, 1, 3, 1, 1])
    mixed = rng.integers(0, 3, 25)
    before = mixed.copy()
    merged = merge_pair(mixed, (1, 2), 300)
    return {"runs_positions": merge_positions(runs, (1, 1)), "runs_merged": merge_pair(runs, (1, 1), 256),
            "mixed_positions": merge_positions(mixed, (1, 2)), "mixed_merged": merged,
            "input_unchanged": bool(np.array_equal(mixed, before))}


def _bpe_train(rng):
    text = "aaaa " + seeded_text(rng, 300)  # the text starts with the pair merged first
    tokenizer = BPETokenizer().train(text, vocab_size=256 + 30)
    probe = seeded_text(rng, 12)
    ids = tokenizer.encode(probe)
    return {"merges": np.array(tokenizer.merges, dtype=np.int64), "vocab_size": tokenizer.vocab_size,
            "ids": ids, "round_trip": tokenizer.decode(ids) == probe,
            "max_id": max(tokenizer.encode(text))}


def _bpe_runs(rng):
    text = "".join(rng.choice(["aaa", "zz ", "za", "az"], 200))
    tokenizer = BPETokenizer().train(text, vocab_size=256 + 12)
    return {"merges": np.array(tokenizer.merges, dtype=np.int64), "ids": tokenizer.encode("aaaaaaa zzz aza")}


def _bpe_decode(rng):
    tokenizer = BPETokenizer().train(seeded_text(rng, 200), vocab_size=256 + 20)
    cafe = list("café".encode("utf-8"))  # é is two bytes: 0xC3 0xA9, here two separate tokens
    return {"split_character": tokenizer.decode(cafe), "cut_short": tokenizer.decode([0xE6, 0x97]),
            "negative": raised(tokenizer.decode, [97, -1]), "too_large": raised(tokenizer.decode, [256 + 20]),
            "japanese": tokenizer.decode(tokenizer.encode("日本 über"))}


def _bpe_save_load(rng):
    tokenizer = BPETokenizer().train(seeded_text(rng, 100), vocab_size=256 + 8)
    with tempfile.TemporaryDirectory(prefix="case-tokenizer-") as folder:
        path = Path(folder) / "bpe.json"
        tokenizer.save(path)
        loaded = BPETokenizer.load(path)
    return {"merges": np.array(loaded.merges, dtype=np.int64), "small_vocab": raised(BPETokenizer().train, "ab", 100)}


CASES = {
    "char": (_char, "CharTokenizer: sorted vocabulary, encode, decode, unknown characters and bad ids raise"),
    "char-save-load": (_char_save_load, "CharTokenizer save/load keeps the vocabulary"),
    "count-pairs": (_count_pairs, "count_pairs counts every adjacent pair, overlapping ones in a run too"),
    "merge": (_merge, "merge_positions/merge_pair: left to right, never overlapping; the input is not changed"),
    "bpe-train": (_bpe_train, "BPE train to 286 tokens: the merges, their ids, encode/decode"),
    "bpe-runs": (_bpe_runs, "BPE on text full of runs ('aaa', 'zz'): incremental counts stay right"),
    "bpe-decode": (_bpe_decode, "BPE decode joins bytes before UTF-8 (errors='replace'); bad ids raise"),
    "bpe-save-load": (_bpe_save_load, "BPE save/load keeps the merges; vocab_size below 256 raises"),
}
