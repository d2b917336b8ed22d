"""Deleting the scratch folders that sandboxed code ran in (`tito grade`, `tito olympics judge`).

Its own module (standard library only): the grader, `--out`'s replacement and the judge share it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def remove_tree(path: Path) -> None:
    """Delete a scratch folder even where the code that ran in it took its own permissions away."""
    def retry(function, target, _):
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
        except OSError:
            pass
        function(target)

    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=retry)
