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


def tiny_task(**overrides):
    from tito.olympics import Task
    from tito.sandbox import Limits

    rng = np.random.default_rng(7)
    settings = dict(val_tokens=rng.integers(0, VOCAB, 4000), context=CONTEXT, vocab_size=VOCAB, eval_windows=16,
                    eval_batch=8, new_tokens=24, generation_repeats=3, prompt_tokens=4,
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
