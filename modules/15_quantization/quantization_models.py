# %% [markdown]
# # Module 15's given code: the models that section 9 quantizes
#
# Given code for the lesson `quantization_dev.py`, exported with it (`tito export 15`) to
# `tinytorch.perf.quantization_models`: the digits of the milestones and their split, a short
# training loop, the Shakespeare GPT (the milestone's checkpoint when it is there, else a small
# one trained here), and the measures (test accuracy, validation loss). Only earlier modules
# are used: the quantizing is the lesson's. It holds no exercise: the student edition carries
# this file unchanged.

# %%
#| default_exp perf.quantization_models

# %%
#| export
import tempfile
from pathlib import Path

import numpy as np

from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Module
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import load_checkpoint, read_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.text.tokenization import CharTokenizer


def digits_split(datasets: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(images (N, 8, 8) float32 in [0, 1], labels int64, test indices, train indices): `digits.npz` in
    `datasets`, split 20/80 as the milestones split it."""
    with np.load(Path(datasets) / "digits.npz", allow_pickle=False) as digits:
        images, labels = digits["images"].astype(np.float32) / 16.0, digits["labels"].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))        # the milestones' split
    test_idx, train_idx = order[:int(round(0.2 * len(labels)))], order[int(round(0.2 * len(labels))):]
    return images, labels, test_idx, train_idx


def train_classifier(model: Module, x: np.ndarray, y: np.ndarray, epochs: int, seed: int = 0) -> Module:
    """A few epochs of AdamW on mini-batches of 32 (modules 04 and 06): enough for these digits."""
    from tinytorch.core.losses import cross_entropy

    optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    shuffle = np.random.default_rng(seed)
    for _ in range(epochs):
        for batch in np.array_split(shuffle.permutation(len(y)), len(y) // 32):
            loss = cross_entropy(model(Tensor(x[batch])), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def test_accuracy(model: Module, x: np.ndarray, y: np.ndarray) -> float:
    return float((model(Tensor(x)).numpy().argmax(axis=-1) == y).mean())


def shakespeare_gpt(datasets: Path) -> tuple[GPT, CharTokenizer, str, int]:
    """(gpt in eval mode, its tokenizer, the text, its context): the model `tito milestone run shakespeare`
    saved (`shakespeare_gpt.npz` in `<temp>/tinytorch-shakespeare/`, built from its saved recipe) when it is
    there, else a small GPT trained here for 150 steps. Prints which."""
    text = (Path(datasets) / "tinyshakespeare.txt").read_text(encoding="utf-8")
    tokenizer = CharTokenizer.from_text(text)
    milestone_checkpoint = Path(tempfile.gettempdir()) / "tinytorch-shakespeare" / "shakespeare_gpt.npz"
    recipe = None
    if milestone_checkpoint.is_file():
        try:
            saved = read_checkpoint(milestone_checkpoint)["extra"]
            recipe, trained_for = saved["recipe"], saved["iters"]
        except (ValueError, KeyError, TypeError) as err:
            print(f"{milestone_checkpoint} is not the milestone's checkpoint ({err}); training a small GPT instead")
    if recipe is not None:
        gpt = GPT(tokenizer.vocab_size, recipe["embed_dim"], recipe["num_layers"], recipe["num_heads"],
                  recipe["context"], tie_weights=True, bias=False)
        load_checkpoint(milestone_checkpoint, gpt)
        context = recipe["context"]
        print(f"GPT: the milestone's trained model ({trained_for} iterations), {milestone_checkpoint}")
    else:
        context = 32
        gpt = GPT(tokenizer.vocab_size, 64, 2, 4, context, bias=False, seed=0)
        ids = np.array(tokenizer.encode(text[:200_000]), dtype=np.int64)
        optimizer = AdamW(gpt.parameters(), lr=3e-3, weight_decay=0.0)
        batch_rng = np.random.default_rng(0)
        for step in range(150):
            starts = batch_rng.integers(0, len(ids) - context - 1, 16)
            window = ids[starts[:, None] + np.arange(context + 1)]
            _, loss = gpt(window[:, :-1], targets=window[:, 1:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"GPT: no milestone checkpoint at {milestone_checkpoint}: a small GPT (width 64, 2 layers, context 32) "
              f"trained here for 150 steps, training loss {loss.item():.3f}")
    gpt.eval()
    return gpt, tokenizer, text, context


def validation_batches(tokenizer: CharTokenizer, text: str, context: int) -> list:
    """4 fixed batches of 12 windows of `context` + 1 characters from the last tenth of `text` (seeded)."""
    val_ids = np.array(tokenizer.encode(text[int(0.9 * len(text)):]), dtype=np.int64)
    val_starts = np.random.default_rng(2).integers(0, len(val_ids) - context - 1, (4, 12))
    return [val_ids[s[:, None] + np.arange(context + 1)] for s in val_starts]


def validation_loss(model: Module, batches: list) -> float:
    """Mean cross-entropy over fixed batches: every variant sees the same windows, so differences are the model's."""
    with no_grad():
        return float(np.mean([model(b[:, :-1], targets=b[:, 1:])[1].item() for b in batches]))
