"""Module 19's held-out data for the tests: the milestones' digits test split and the Shakespeare
validation split (the same splits as milestones/digits_mlp.py and milestones/shakespeare.py)."""
from pathlib import Path

import numpy as np
import pytest

DATASETS = Path(__file__).resolve().parents[2] / "datasets"


@pytest.fixture(scope="session")
def digits_split():
    """(x_train, y_train, x_test, y_test): 64 float32 features in [0, 1], int64 labels; 359 test images."""
    with np.load(DATASETS / "digits.npz", allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    x = images.reshape(len(images), -1).astype(np.float32) / 16.0
    y = labels.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    n_test = int(round(0.2 * len(y)))
    return x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]]


@pytest.fixture(scope="session")
def shakespeare_validation():
    """(validation ids as int64, vocab_size): the last 10% of Tiny Shakespeare, character ids."""
    from tinytorch.text.tokenization import CharTokenizer

    text = (DATASETS / "tinyshakespeare.txt").read_text(encoding="utf-8")
    tokenizer = CharTokenizer.from_text(text)
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    return ids[int(0.9 * len(ids)):], tokenizer.vocab_size
