"""Tiny Olympics entries for the tests: a GPT of width 16 on a 16-token vocabulary, written as real
submission folders (submission.py + module 07 checkpoint). Each cheat is a few lines of submission.py."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from tinytorch.core.training import save_checkpoint
from tinytorch.models.transformer import GPT

VOCAB, WIDTH, LAYERS, HEADS, CONTEXT = 16, 16, 1, 2, 16
BUILD = f"GPT({VOCAB}, {WIDTH}, {LAYERS}, {HEADS}, {CONTEXT}, seed=0)"


def tiny_gpt(seed: int = 1) -> GPT:
    return GPT(VOCAB, WIDTH, LAYERS, HEADS, CONTEXT, seed=seed)


def tiny_text(length: int, seed: int) -> str:
    """Text over VOCAB letters that a model can learn: mostly the next letter of the alphabet, sometimes a random one."""
    rng = np.random.default_rng(seed)
    steps = np.where(rng.random(length) < 0.8, 1, rng.integers(0, VOCAB, length))
    return "".join(chr(ord("a") + int(i)) for i in np.cumsum(steps) % VOCAB)


def tiny_task(**overrides):
    from tinytorch.text.tokenization import CharTokenizer
    from tito.olympics import Task, speedrun_files
    from tito.sandbox import Limits

    tokenizer = CharTokenizer.from_text("".join(chr(ord("a") + i) for i in range(VOCAB)))
    val = np.array(tokenizer.encode(tiny_text(4000, seed=7)), dtype=np.int64)
    settings = dict(val_tokens=val, context=CONTEXT, vocab_size=VOCAB, eval_windows=16,
                    eval_batch=8, new_tokens=24, generation_repeats=3, prompt_tokens=4,
                    train_files=speedrun_files(tiny_text(20000, seed=8), tokenizer),
                    limits=Limits(wall_s=120, cpu_s=120))
    settings.update(overrides)
    return Task(**settings)


def write_entry(folder: Path, model=None, body: str = "", build: str = BUILD, imports: str = "",
                checkpoint: str = "model.npz") -> Path:
    """A submission folder: submission.py (build_model returns `build`, plus `body`) and the checkpoint of `model`."""
    folder.mkdir(parents=True, exist_ok=True)
    source = f'''
        from tinytorch.models.transformer import GPT
        {imports}
        CHECKPOINT = "{checkpoint}"


        def build_model():
            return {build}
    '''
    (folder / "submission.py").write_text(textwrap.dedent(source) + textwrap.dedent(body), encoding="utf-8")
    save_checkpoint(folder / checkpoint, model if model is not None else tiny_gpt())
    return folder
