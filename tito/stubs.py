"""What a stub says, in one place: the student edition writes it, `tito test` recognises it.

Standard library only: the notebook runner (`tito.cells`) and the pytest plugin import this
before anything of the student's runs (module 12 sets its thread count before NumPy loads).
"""
from __future__ import annotations

import re

STUB_SAYS = "is not implemented yet: write its body between the solution markers"
_STUB = re.compile(r"(\S+) " + re.escape(STUB_SAYS) + r" in (\S+?),")


def stub_message(owner: str, notebook_relpath: str, module_key: str) -> str:
    """What the stub of `owner` (e.g. "Tensor.sum") raises. It names the function and the file,
    never a line number: lines move as soon as the student writes code in an earlier block."""
    return f"{owner} {STUB_SAYS} in {notebook_relpath}, then run `tito export {module_key}`."


def waiting_for(error: BaseException | str) -> str | None:
    """The function whose stub raised `error` (e.g. "composed_attention"), or None.

    Also finds the stub's words inside another error's message (a test that ran a program
    and reports its output), and in the exception's cause or context.
    """
    seen = 0
    while error is not None and seen < 5:
        match = _STUB.search(str(error))
        if match:
            return match.group(1)
        if isinstance(error, str):
            return None
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def stub_notebook(error: BaseException | str) -> str | None:
    """The notebook (relative path) whose stub raised `error`, or None."""
    match = _STUB.search(str(error))
    return match.group(2) if match else None
