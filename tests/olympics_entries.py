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
    from tito.grading.judge import Task, speedrun_files
    from tito.grading.sandbox import Limits

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


def shipped_bytes(folder: Path) -> int:
    """Every byte a submission folder ships (its __pycache__ left out): what the smallest event counts."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def weights_as_text(model) -> str:
    """A model's state dict as base64 text of an .npz: weights a cheat can hide in code or in a .txt file."""
    import base64
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **model.state_dict())
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# A model with no parameters of its own (so its checkpoint holds none): the GPT it answers with is loaded from
# WEIGHTS, base64 text that the entry's code defines (in submission.py or read from a second file).
HIDDEN_WEIGHTS_MODEL = f'''
import base64
import io

import numpy as np
from tinytorch.core.layers import Module


class Shell(Module):
    def __init__(self):
        super().__init__()
        inner = {BUILD}
        arrays = np.load(io.BytesIO(base64.b64decode(WEIGHTS)))
        inner.load_state_dict({{name: arrays[name] for name in arrays.files}})
        self.__dict__["hidden"] = inner  # past Module's attribute hook: not a child, so not in the checkpoint

    def forward(self, idx, targets=None):
        return self.hidden(idx, targets)

    def eval(self):
        self.hidden.eval()
        return self


def build_model():
    return Shell()
'''


def empty_model():
    """A module without parameters: the checkpoint of an entry that hides its weights elsewhere."""
    from tinytorch.core.layers import Module

    class Shell(Module):  # the class name the checkpoint records: HIDDEN_WEIGHTS_MODEL's
        def forward(self, x):
            return x

    return Shell()
