"""Issue 31 (reliability round 3): every tokenizer entry point handed the wrong type, and a
tokenizer saved through a symbolic link.

BPETokenizer().train(b"abc", 300) crashed with a raw AttributeError ('bytes' object has no
attribute 'encode'); CharTokenizer.encode(b"ab") crashed inside its own error message (bytes
iterate as ints). Text must be a str: a TypeError names the entry point and says to decode bytes.
"""
import numpy as np
import pytest

from tinytorch.text.tokenization import BPETokenizer, CharTokenizer

TEXT = "abracadabra"
CALLS = {
    "BPETokenizer.train": lambda text: BPETokenizer().train(text, 260),
    "BPETokenizer.encode": lambda text: BPETokenizer().train(TEXT, 260).encode(text),
    "CharTokenizer.from_text": lambda text: CharTokenizer.from_text(text),
    "CharTokenizer.encode": lambda text: CharTokenizer.from_text(TEXT).encode(text),
}


@pytest.mark.parametrize("owner", CALLS)
@pytest.mark.parametrize("data", [b"abc", bytearray(b"abc"), memoryview(b"abc")], ids=["bytes", "bytearray", "memoryview"])
def test_bytes_are_refused_with_a_hint_to_decode_them(owner, data):
    with pytest.raises(TypeError, match=rf"{owner}: text must be a str, got {type(data).__name__}: decode them first"):
        CALLS[owner](data)


@pytest.mark.parametrize("owner", CALLS)
@pytest.mark.parametrize("data", [None, 42, ["a", "b"], np.array([97, 98])], ids=["None", "int", "list", "array"])
def test_other_types_are_refused_naming_the_entry_point(owner, data):
    with pytest.raises(TypeError, match=rf"{owner}: text must be a str, got {type(data).__name__}\."):
        CALLS[owner](data)


def test_decoded_bytes_give_the_same_tokenizer_as_the_text():
    data = TEXT.encode("utf-8")
    trained = BPETokenizer().train(data.decode("utf-8"), 260)
    assert trained.merges == BPETokenizer().train(TEXT, 260).merges
    assert trained.decode(trained.encode(TEXT)) == TEXT


@pytest.mark.parametrize("chars", [None, 5, b"abc"], ids=["None", "int", "bytes"])
def test_char_vocabulary_of_the_wrong_type(chars):
    with pytest.raises(TypeError, match=rf"CharTokenizer: the vocabulary must be a sequence of single characters, "
                                        rf"got {type(chars).__name__}"):
        CharTokenizer(chars)


@pytest.mark.parametrize("merges", [None, 7, [1, 2]], ids=["None", "int", "flat-list"])
def test_bpe_merges_of_the_wrong_type(merges):
    with pytest.raises(TypeError, match="BPETokenizer: merges must be a sequence of \\(a, b\\) id pairs"):
        BPETokenizer(merges)


@pytest.mark.parametrize("make", [lambda: BPETokenizer().train(TEXT, 260), lambda: CharTokenizer.from_text(TEXT)],
                         ids=["bpe", "char"])
def test_saving_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path, make):
    (tmp_path / "shared").mkdir()
    target = tmp_path / "shared" / "tok.json"
    target.write_text("{}", encoding="utf-8")
    link = tmp_path / "tok.json"
    link.symlink_to(target)
    tokenizer = make()
    tokenizer.save(link)
    assert link.is_symlink(), "the link was replaced by a file"
    loaded = type(tokenizer).load(target)
    assert loaded.encode(TEXT) == tokenizer.encode(TEXT), "the target must hold the saved tokenizer"
