"""The one way a milestone checks its arguments: all of them, before any training starts.

    parser.add_argument("--iters", type=positive_int, ...)   # 0, -3 and 2.5 are refused by argparse
    check_output_folder(parser, args.out)                    # right after parse_args
    check_output_file(parser, args.heatmap)
    problem = non_finite_weights(path)                       # a checkpoint given to load, before using it

A mistake in an argument must cost a second, not the minutes of training that come before
the first file is written: a folder that cannot be written, or a number of iterations the
schedule cannot use, ends the program at once with one line (argparse's usage and
`error: ...`, exit status 2), before any data is loaded.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def _whole_number(text: str, minimum: int, below: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} is {below}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 ("0", "-3", "2.5" and "ten" are refused)."""
    return _whole_number(text, 1, "not at least 1")


def natural_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (a seed)."""
    return _whole_number(text, 0, "negative")


def _writable(folder: Path) -> str | None:
    """None when `folder` exists (or can be made) and takes a new file; otherwise why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return None


def check_output_folder(parser: argparse.ArgumentParser, folder: Path, option: str = "--out") -> None:
    """Exit (argparse's error, status 2) unless `folder` is, or can become, a folder that takes files."""
    if folder.exists() and not folder.is_dir():
        parser.error(f"{option} {folder}: it exists and is not a folder")
    problem = _writable(folder)
    if problem:
        parser.error(f"{option} {folder}: cannot write there ({problem}); choose another folder")


def check_output_file(parser: argparse.ArgumentParser, path: Path, option: str) -> None:
    """Exit unless `path` can be written: not a folder, and its folder takes files."""
    if path.is_dir():
        parser.error(f"{option} {path}: it is a folder; give the path of a file (e.g. {path / 'out.png'})")
    problem = _writable(path.parent)
    if problem:
        parser.error(f"{option} {path}: cannot write in {path.parent} ({problem}); choose another path")


def non_finite_weights(path: Path) -> str | None:
    """None when the module-07 checkpoint at `path` reads and every float parameter is finite;
    otherwise one line naming the file and the first parameter holding NaN or ±inf (a diverged
    run): quantizing or compressing it fails much later, with a traceback of numbers or inside LAPACK."""
    import numpy as np

    from tinytorch.core.training import read_checkpoint

    try:
        weights = read_checkpoint(path)["model"]
    except (OSError, ValueError) as err:
        return " ".join(str(err).split())
    for name, value in weights.items():
        values = np.asarray(value)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            bad = values.size - int(np.count_nonzero(np.isfinite(values)))
            return (f"{path}: parameter {name!r} holds {bad} NaN or infinite value(s) of {values.size} "
                    "(the training that saved it diverged)")
    return None
