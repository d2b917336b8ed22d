"""What a stub says, in one place: the student edition writes it, `tito test` recognises it.

Standard library only: the notebook runner (`tito.cells`) and the pytest plugin import this
before anything of the student's runs (module 12 sets its thread count before NumPy loads).
"""
from __future__ import annotations

import re
from pathlib import PurePath

STUB_SAYS = "is not implemented yet: write its body between the solution markers"
_STUB = re.compile(r"(\S+) " + re.escape(STUB_SAYS) + r" in (\S+?),")


def stub_message(owner: str, notebook_relpath: str, module_key: str) -> str:
    """What the stub of `owner` (e.g. "Tensor.sum") raises. It names the function and the file,
    never a line number: lines move as soon as the student writes code in an earlier block."""
    return f"{owner} {STUB_SAYS} in {notebook_relpath}, then run `tito export {module_key}`."


def _stub_match(error: BaseException | str):
    """The stub's words in `error`'s message, or in its cause or context (a few levels), or None."""
    seen = 0
    while error is not None and seen < 5:
        match = _STUB.search(str(error))
        if match or isinstance(error, str):
            return match
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def waiting_for(error: BaseException | str) -> str | None:
    """The function whose stub raised `error` (e.g. "composed_attention"), or None.

    Also finds the stub's words inside another error's message (a test that ran a program
    and reports its output), and in the exception's cause or context.
    """
    match = _stub_match(error)
    return match.group(1) if match else None


def waiting_label(error: BaseException | str, module_dir: str | None) -> str | None:
    """What a test stopped by a stub waits for, as the student reads it: the stub's name, and the
    module it lives in when that is not `module_dir` (the module being tested, e.g. "17_memory"):
    "Module.__setattr__ (module 03_layers)". None when `error` is no stub's."""
    match = _stub_match(error)
    if match is None:
        return None
    stub, owner = match.group(1), PurePath(match.group(2)).parent.name  # modules/03_layers/layers_dev.py
    return f"{stub} (module {owner})" if owner and module_dir and owner != module_dir else stub


_ELSEWHERE = re.compile(r" \(module (\S+)\)$")


def label_module(label: str) -> str | None:
    """The other module a `waiting_label` names ("03_layers"), or None for a stub of the module tested."""
    match = _ELSEWHERE.search(label)
    return match.group(1) if match else None
