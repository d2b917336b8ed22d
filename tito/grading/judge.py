"""`tito olympics judge`: the capstone's judge (module 20). It measures everything itself.

    entries = [read_submission(Path(p)) for p in folders]       # SubmissionError says what to fix
    task = shakespeare_task(settings.root, heldout=None, seed=0)  # an instructor's private text or seed
    board = judge(entries, task, events=["smallest", "generation"], baseline=entries[0])
    write_leaderboard(board, Path("olympics-out"))              # leaderboard.md, leaderboard.csv, pareto.png

One entry, in order:

1. **Read without running.** `submission.py` is parsed (never imported by the judge): it must
   define `build_model()` (and `train(time_budget_s)` for the speedrun) and a constant
   `CHECKPOINT = "file.npz"` naming a file in the folder. A submission holds plain files only
   (a link could hand the sandbox a file only the judge may read). The judge's digest of the
   folder's bytes orders exact ties, so renaming the folder changes nothing.
2. **Copy and run the judge's runner** (`tito.grading.judge_runner`) in `tito grade`'s sandbox
   (`tito.grading.sandbox`): a scratch work folder holding a copy of the submission only (and, for the
   speedrun, the training text), the submission's own user where tito runs as root, limits on
   time, memory and output. The runner and the tinytorch package it imports are the judge's
   copies beside its work folder (`runner_library`), so the course itself may be a folder only
   its owner can enter. The runner installs an audit hook, imports the submission, builds the
   model and loads the declared checkpoint with module 07's `load_checkpoint` from the judge's
   read-only copy beside the work folder (the submission's code runs before the load and could
   otherwise replace the file), then answers the judge over a Unix socket in the work folder.
3. **Measure from outside.** Quality: the runner returns logits for windows of the held-out
   text the judge picked (module 20's `heldout_windows`, with the task's seed); the judge
   computes the loss (`loss_from_logits`) and applies the bar (`quality_verdict`, its margin
   read when the judge runs). Smallest: every byte the entry ships, measured on the judge's
   copies (the checkpoint plus its code and any other file). Generation: module 19's `measure`
   times the requests from the judge's process, all entries interleaved; afterwards (untimed)
   the judge checks that every answer is the same and that every generated token of it is the
   greedy choice of the model's own logits over the context it had (`greedy_consistent` on
   sliding windows of the context length). Speedrun: wall time of the `train` request, then the
   judge's own loss against the target (module 20's `SPEEDRUN_TARGET`, read when judged).
4. **Disqualify with the reason**: missed bar, a file opened outside the folder or weights
   other than the declared checkpoint (the runner's hook, read from the sandbox's output), a
   broken sandbox limit, a crash, answers that differ or tokens that are not greedy.

What it does not stop, in words (module 20, section 5, says the same): code in the
submission's process can do what that process can do — read files every user may read
without `open` (C code via ctypes), or tamper with the runner's hook. The judge never believes
a number that process reports, and the sandbox shows it only a copy of its own folder (where
tito runs as root, as a user of its own that cannot read root's files).
"""
from __future__ import annotations

import ast
import csv
import hashlib
import io
import math
import os
import shutil
import signal
import site
import socket
import struct
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..course import CourseError
from .judge_runner import receive, send
from .sandbox import GiB, Limits, SandboxResult, SandboxUser, SandboxUsers, prepare_workdir, run_sandboxed
from .scratch import remove_tree

_SOCKET = "judge.sock"
MAX_BUDGET_S = 24 * 3600.0  # the speedrun's budget: a day at most (a socket's timeout must fit in C's timeval)


class SubmissionError(CourseError):
    """A submission folder the judge cannot take: the message says what to fix."""


@dataclass(frozen=True)
class Submission:
    """One entry as read from its folder (nothing of it has run)."""

    name: str  # the folder's name: shown, never used to order or measure
    folder: Path
    checkpoint: str  # the declared file, relative to the folder
    has_train: bool
    digest: str  # sha256 of the folder's files (paths and bytes)
    files: tuple[str, ...] = ()  # every file of the folder (relative, "/"-separated), the checkpoint included


@dataclass
class Task:
    """What the entries are judged on: the held-out text, the model's context, the events' settings."""

    val_tokens: np.ndarray  # held-out ids (1-D)
    context: int
    vocab_size: int
    train_files: dict = field(default_factory=dict)  # name -> text, put in a speedrun entry's work folder
    eval_windows: int = 64
    eval_batch: int = 16  # windows per logits request
    seed: int = 0  # draws the held-out windows and the generation prompt's place
    heldout: str = "the held-out text"  # where val_tokens come from, in words (the leaderboard says it)
    prompt_tokens: int = 8  # the generation prompt: ids of the held-out text at a place drawn with `seed`
    new_tokens: int = 256
    generation_repeats: int = 15
    answer_timeout_s: float = 300.0  # building the model, or answering one request (train: the budget + this)
    speed_resolution: float = 0.05  # speeds closer than this (relative) share a rank, whatever the intervals say
    speedrun_target: float | None = None  # None: module 20's SPEEDRUN_TARGET, read when the judge runs
    speedrun_budget_s: float = 600.0
    speedrun_threads: int = 2
    limits: Limits = field(default_factory=lambda: Limits(wall_s=1800, cpu_s=3600, memory_bytes=4 * GiB,
                                                          output_bytes=1024 * 1024))


@dataclass
class EntryResult:
    """Everything the judge measured on one entry; `reason` is "" or why it is disqualified."""

    submission: Submission
    val_loss: float = math.nan
    checkpoint_bytes: int = 0  # the declared checkpoint, measured on the judge's sealed copy
    other_bytes: int = 0  # every other file it ships (code included), measured on the judge's copies
    generation_s: object = None  # module 19's Measurement of seconds per generation request
    speedrun_s: float = math.nan
    speedrun_loss: float = math.nan  # the model train() returned; val_loss is the checkpoint's
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def shipped_bytes(self) -> int:
        """The smallest event's score: everything the model needs, the checkpoint and all other files."""
        return self.checkpoint_bytes + self.other_bytes


@dataclass(frozen=True)
class Rules:
    """The bars, read from module 20 when the judge runs (so an exercise that changes them changes the judge)."""

    quality_margin: float  # module 20's QUALITY_MARGIN
    speedrun_target: float  # the task's, else module 20's SPEEDRUN_TARGET


@dataclass
class Leaderboard:
    task: Task
    events: list[str]
    results: list[EntryResult]
    baseline_loss: float
    boards: dict  # event -> rows in rank order (module 20's Row)
    environment: dict
    speedrun_baseline_s: float = math.nan
    rules: Rules | None = None

    @property
    def quality_bar(self) -> float:
        return self.baseline_loss + self.rules.quality_margin


# ---------------------------------------------------------------------------- reading a submission


def _submission_files(folder: Path) -> list[str]:
    """Every file of a submission folder (relative, sorted; __pycache__ left out); SubmissionError for a
    link or anything else that is not a plain file or folder."""
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if "__pycache__" in relative.parts:
            continue
        if path.is_symlink():
            raise SubmissionError(f"{path} is a link: a submission holds plain files only (copy the file in "
                                  "instead of linking to it).")
        if path.is_dir():
            continue
        if not path.is_file():
            raise SubmissionError(f"{path} is not a plain file: a submission holds plain files and folders only.")
        files.append(relative.as_posix())
    return files


def _digest(folder: Path, files: list[str]) -> str:
    hasher = hashlib.sha256()
    for name in files:
        hasher.update(name.encode() + b"\0")
        hasher.update((folder / name).read_bytes())
    return hasher.hexdigest()[:16]


def _top_level(tree: ast.Module) -> tuple[set[str], dict]:
    """The names of submission.py's top-level functions and the values of its literal constants."""
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return functions, constants


def read_submission(folder: Path, need_train: bool = False) -> Submission:
    """Check a submission folder without running any of it; SubmissionError says what to fix."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SubmissionError(f"{folder} is not a folder: a submission is a folder holding submission.py and its checkpoint.")
    source = folder / "submission.py"
    if not source.is_file():
        raise SubmissionError(f"{folder} holds no submission.py: write one with build_model() and "
                              "CHECKPOINT = \"model.npz\" (module 20, section 7).")
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, UnicodeDecodeError) as err:
        raise SubmissionError(f"{source} does not parse: {err}") from None
    functions, constants = _top_level(tree)
    if "build_model" not in functions:
        raise SubmissionError(f"{source} defines no build_model(): it must return the model, untrained weights "
                              "are fine (the judge loads CHECKPOINT into it).")
    if need_train and "train" not in functions:
        raise SubmissionError(f"{source} defines no train(time_budget_s): the speedrun calls it to train from scratch.")
    checkpoint = constants.get("CHECKPOINT")
    if not isinstance(checkpoint, str) or not checkpoint:
        raise SubmissionError(f"{source} declares no checkpoint: add a line CHECKPOINT = \"model.npz\" naming the "
                              "weights file in the folder (module 07's save_checkpoint writes it).")
    path = (folder / checkpoint).resolve()
    if not path.is_relative_to(folder.resolve()) or Path(checkpoint).is_absolute():
        raise SubmissionError(f"{source}: CHECKPOINT = {checkpoint!r} must name a file inside the submission folder.")
    files = _submission_files(folder)
    if not need_train and not path.is_file():
        raise SubmissionError(f"{folder} has no {checkpoint} (its declared CHECKPOINT): save the model there with "
                              "module 07's save_checkpoint.")
    return Submission(folder.name, folder, checkpoint, "train" in functions, _digest(folder, files), tuple(files))


# ---------------------------------------------------------------------------- what the runner imports


# The files of tito the runner imports, relative to the course: the packages on the way to it and itself.
RUNNER_FILES = ("tito/__init__.py", "tito/grading/__init__.py", "tito/grading/judge_runner.py")


def runner_sources(course_root: Path) -> Path:
    """The course's tinytorch package, which the runner's copies are made from (with `RUNNER_FILES`);
    CourseError when `course_root` is not a course."""
    package = Path(course_root) / "tinytorch"
    if not (package / "__init__.py").is_file() or not all((Path(course_root) / f).is_file() for f in RUNNER_FILES):
        raise CourseError(f"{course_root} holds no tinytorch package and tito runner: the judge runs from a course.")
    return package


def runner_library(library: Path, course_root: Path, user: SandboxUser | None) -> Path:
    """`library`: one runner's copies of what it imports (the course's tinytorch package and `RUNNER_FILES`:
    tito/grading/judge_runner.py and the two `__init__.py` on its way), which `user` may read and nobody
    else but the judge.

    The sandbox's user runs the runner from these copies, never from the course: the course may be a
    folder only its owner can enter, and nothing of it is made readable to others. The copies belong
    to the judge (the entry cannot change them) and to `user`'s group (folders 750, files 640). Copied
    with their times, so that Python's compiled files of the package stay valid."""
    package = runner_sources(course_root)
    shutil.copytree(package, library / "tinytorch", ignore=shutil.ignore_patterns("*.tito-new"))
    for name in RUNNER_FILES:
        (library / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(course_root) / name, library / name)
    for folder, _, names in os.walk(library):
        _share_with(Path(folder), user, 0o750)
        for name in names:
            _share_with(Path(folder) / name, user, 0o640)
    return library


def _share_with(path: Path, user: SandboxUser | None, mode: int) -> None:
    """The judge keeps `path`; `user`'s group may read it (without a user of its own: the judge alone)."""
    if user is not None:
        os.chown(path, os.getuid(), user.gid)
    path.chmod(mode)


def _site_packages() -> list[str]:
    """The folders of this Python's installed packages (NumPy's): the runner starts without `site` (`-S`),
    so that no .pth file (an editable install's) leads it to the course instead of the judge's copies."""
    found = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return [p for i, p in enumerate(found) if os.path.isdir(p) and p not in found[:i]]


# ---------------------------------------------------------------------------- one sandboxed runner


class Session:
    """One submission's runner in the sandbox, and the judge's end of its socket."""

    def __init__(self, entry: Submission, task: Task, scratch: Path, user: SandboxUser | None, mode: str,
                 course_root: Path):
        self.entry, self.task, self.mode = entry, task, mode
        self.work = prepare_workdir(scratch, user)
        self.other_bytes = self._copy_submission(user)
        library = runner_library(scratch.parent / f"{scratch.name}-lib", course_root, user)
        # The weights the runner loads: the judge's own read-only copy beside the work folder, which the
        # submission's code (running before the load) cannot replace; its size is measured here, now.
        self.sealed = scratch.parent / f"{scratch.name}-checkpoint"
        self.sealed.mkdir(mode=0o755)
        self.checkpoint_path = self.sealed / Path(entry.checkpoint).name
        self.checkpoint_bytes = 0
        if mode == "serve":
            shutil.copyfile(entry.folder / entry.checkpoint, self.checkpoint_path)
            self.checkpoint_path.chmod(0o444)
            self.checkpoint_bytes = self.checkpoint_path.stat().st_size
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.work / _SOCKET))
        if user is not None:
            os.chown(self.work / _SOCKET, user.uid, user.gid)
        self.listener.listen(1)
        self.result: SandboxResult | None = None
        self.conn: socket.socket | None = None
        self.violations: list[str] = []
        self.error = ""
        self.thread = threading.Thread(target=self._run, args=(self._command(), user, self._env(library)),
                                       daemon=True)
        self.thread.start()

    def _copy_submission(self, user: SandboxUser | None) -> int:
        """Copy the submission's files into the work folder; the bytes of all but the declared checkpoint."""
        other, declared = 0, os.path.normpath(self.entry.checkpoint)
        for name in self.entry.files:
            target = self.work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            # content only (no modes from the submission); a file made a link since it was read stays a link,
            # which the sandbox's user follows with its own rights, never the judge's
            shutil.copyfile(self.entry.folder / name, target, follow_symlinks=False)
            if name != declared:
                other += target.lstat().st_size
        if self.mode == "speedrun":
            for name, text in self.task.train_files.items():
                (self.work / name).write_text(text, encoding="utf-8")
        if user is not None:
            for path in self.work.rglob("*"):
                os.chown(path, user.uid, user.gid, follow_symlinks=False)
        return other

    def _command(self) -> list[str]:
        return [sys.executable, "-S", "-m", "tito.grading.judge_runner", str(self.work), str(self.work / _SOCKET),
                str(self.checkpoint_path), self.mode, self.entry.checkpoint]

    def _env(self, library: Path) -> dict[str, str]:
        env = {"PYTHONPATH": os.pathsep.join([str(library), *_site_packages()]),
               # Numba (module 18's compiled kernels) keeps what it compiled beside the package it compiles;
               # here that is the judge's copy, outside the entry's folder: keep it in the folder instead.
               "NUMBA_CACHE_DIR": str(self.work / ".numba-cache")}
        if self.mode == "speedrun":
            threads = str(self.task.speedrun_threads)
            env.update(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        return env

    def _run(self, command, user, env) -> None:
        self.result = run_sandboxed(command, self.work, self.task.limits, env, user)

    def connect(self) -> None:
        """Wait for the runner's hello; sets `error` when it does not come."""
        self.listener.settimeout(0.2)
        while self.conn is None:
            try:
                self.conn, _ = self.listener.accept()
            except socket.timeout:
                if not self.thread.is_alive():
                    self.error = "the runner ended before it connected: " + self._ended()
                    return
        # The runner's pid, from the kernel (SO_PEERCRED): the runner connects before the submission is
        # imported, so this is the judge's own program, and killing it ends the sandboxed run.
        ucred = self.conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        self.pid = struct.unpack("3i", ucred)[0]
        header = self._reply(self.task.answer_timeout_s)
        if header is not None and not header.get("ready"):
            self.error = self.error or f"building the model failed: {header.get('error', 'no reason given')}"

    def _ended(self) -> str:
        self.thread.join(timeout=30)
        result = self.result
        if result is None:
            return "(no result)"
        return result.reason or f"exit status {result.returncode}: {result.output.strip()[-800:]}"

    def _reply(self, timeout: float) -> dict | None:
        self.conn.settimeout(timeout)
        try:
            header, payload = receive(self.conn)
        except socket.timeout:
            self._stop()
            self.error = self.error or f"did not answer within {timeout:g} s (stopped)"
            return None
        except (OSError, ValueError, ConnectionError) as err:
            self.error = self.error or f"the runner stopped answering ({err}): " + self._ended()
            return None
        for why in header.get("violations") or []:
            if isinstance(why, str) and why not in self.violations:
                self.violations.append(why)
        self.payload = payload
        if header.get("error"):
            self.error = self.error or str(header["error"])[:500]
        return header

    def abort(self) -> None:
        """Stop the runner if it still runs (a judge that failed itself); a closed session is left alone."""
        if self.thread.is_alive():
            if getattr(self, "pid", None):
                self._stop()
            for end in (self.conn, self.listener):
                if end is not None:
                    end.close()
            self.thread.join(timeout=30)

    def _stop(self) -> None:
        """Kill the runner (the sandbox then kills whatever it started)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            pass

    def request(self, header: dict, payload: bytes = b"", timeout: float | None = None) -> tuple[dict, bytes] | None:
        """Send one request and wait for its reply; None (and `error` set) when it failed."""
        if self.error or self.conn is None:
            return None
        try:
            send(self.conn, header, payload)
        except OSError as err:
            self.error = f"the runner stopped answering ({err}): " + self._ended()
            return None
        reply = self._reply(timeout or self.task.answer_timeout_s)
        if reply is None or reply.get("error"):
            return None
        return reply, self.payload

    def logits(self, ids: np.ndarray) -> np.ndarray | None:
        """The model's logits for `ids` (B, T), checked to be (B, T, vocab) float32."""
        reply = self.request({"op": "logits", "shape": list(ids.shape)}, ids.astype(np.int64).tobytes())
        if reply is None:
            return None
        header, payload = reply
        expected = [*ids.shape, self.task.vocab_size]
        if header.get("shape") != expected or len(payload) != 4 * math.prod(expected):
            self.error = f"returned logits of shape {header.get('shape')} for a request that needs {expected}"
            return None
        return np.frombuffer(payload, dtype=np.float32).reshape(expected)

    def generate(self, prompt: np.ndarray, new_tokens: int) -> np.ndarray | None:
        reply = self.request({"op": "generate", "new_tokens": new_tokens}, prompt.astype(np.int64).tobytes())
        if reply is None:
            return None
        tokens = np.frombuffer(reply[1], dtype=np.int64)
        if (len(tokens) != len(prompt) + new_tokens or not np.array_equal(tokens[:len(prompt)], prompt)
                or tokens.min() < 0 or tokens.max() >= self.task.vocab_size):
            self.error = (f"generate returned {len(tokens)} ids for a prompt of {len(prompt)} and {new_tokens} new "
                          "tokens (it must return the prompt followed by exactly the new tokens, ids in the vocabulary)")
            return None
        return tokens

    def close(self) -> None:
        """Say goodbye, wait for the sandbox to end, and collect what its output reports."""
        if self.conn is not None and not self.error:
            self.request({"op": "bye"})
        if self.conn is not None:
            self.conn.close()
        self.listener.close()
        self.thread.join(timeout=self.task.limits.wall_s + 30)
        result = self.result
        if result is not None:
            for line in result.output.splitlines():
                if line.startswith("VIOLATION: ") and line[11:] not in self.violations:
                    self.violations.append(line[11:])
            if result.reason and not self.error:
                self.error = f"the sandbox stopped it: {result.reason}"

    def verdict(self) -> str:
        """"" or why this entry is disqualified by how it ran (the quality bar is judged elsewhere)."""
        if self.violations:
            why = self.violations[0] + (f" (and {len(self.violations) - 1} more)" if len(self.violations) > 1 else "")
        else:
            why = self.error
        return why.replace(str(self.work) + os.sep, "<its folder>/")  # the scratch path means nothing to the reader


# ---------------------------------------------------------------------------- the task


def shakespeare_task(root: Path, heldout: Path | None = None, seed: int = 0, **overrides) -> Task:
    """The Shakespeare GPT's task: module 10's CharTokenizer on datasets/tinyshakespeare.txt, split
    90/10 (the shakespeare milestone's split), context 64 (its recipe), 256 held-out windows.

    The default is public and reproducible: windows drawn with seed 0 from the last 10% of the
    shipped text, which a student can read (and could train on). An instructor judges on text and
    windows no student has seen: `heldout` (a text file of the course's characters) replaces the
    held-out text, `seed` (>= 0) draws other windows and another generation prompt.
    CourseError for a file that cannot be read or holds characters the tokenizer does not know."""
    from tinytorch.text.tokenization import CharTokenizer

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CourseError(f"The seed must be a whole number >= 0 (e.g. --seed 12345), got {seed!r}.")
    text = (Path(root) / "datasets" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    tokenizer = CharTokenizer.from_text(text)
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    split = int(0.9 * len(ids))
    settings = dict(eval_windows=256, context=64)  # 256 x 64 = 16,384 held-out characters, the same for every entry
    settings.update(overrides)
    if heldout is None:
        val, where = ids[split:], "the last 10% of datasets/tinyshakespeare.txt"
    else:
        val, where = _heldout_ids(Path(heldout), tokenizer, settings["context"] + 1), f"{Path(heldout).name} (--heldout)"
    return Task(val_tokens=val, vocab_size=tokenizer.vocab_size, train_files=speedrun_files(text[:split], tokenizer),
                seed=int(seed), heldout=where, **settings)


def _heldout_ids(path: Path, tokenizer, least: int) -> np.ndarray:
    """An instructor's held-out text as ids; CourseError naming the file and what to fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CourseError(f"--heldout {path}: cannot read it as UTF-8 text ({err}).") from None
    unknown = sorted(set(text) - set(tokenizer.chars))
    if unknown:
        raise CourseError(f"--heldout {path} holds {len(unknown)} character(s) the course's tokenizer does not know "
                          f"({''.join(unknown[:10])!r}): use text of the {tokenizer.vocab_size} characters of "
                          "datasets/tinyshakespeare.txt.")
    if len(text) < least:
        raise CourseError(f"--heldout {path} holds {len(text)} characters: the judge needs at least {least} "
                          "(one window of the context and its targets).")
    return np.array(tokenizer.encode(text), dtype=np.int64)


def speedrun_files(train_text: str, tokenizer) -> dict:
    """The files a speedrun entry finds in its folder (module 20's speedrun_data reads them)."""
    import json

    from tinytorch.perf.olympics import SPEEDRUN_TEXT, SPEEDRUN_TOKENIZER

    return {SPEEDRUN_TEXT: train_text, SPEEDRUN_TOKENIZER: json.dumps({"type": "char", "chars": tokenizer.chars})}


def generation_prompt(task: Task) -> np.ndarray:
    """The generation event's prompt: `prompt_tokens` held-out ids at a place drawn with the task's seed."""
    start = np.random.default_rng([task.seed, 1]).integers(0, len(task.val_tokens) - task.prompt_tokens + 1)
    return task.val_tokens[int(start):int(start) + task.prompt_tokens].astype(np.int64)


def read_rules(task: Task) -> Rules:
    """Module 20's bars as they are now (an exercise may have changed them)."""
    from tinytorch.perf import olympics as lesson

    target = lesson.SPEEDRUN_TARGET if task.speedrun_target is None else task.speedrun_target
    return Rules(quality_margin=float(lesson.QUALITY_MARGIN), speedrun_target=float(target))


# ---------------------------------------------------------------------------- what the judge checks


def _quality(session: Session, task: Task) -> float:
    from tinytorch.perf.olympics import heldout_windows, loss_from_logits

    inputs, targets = heldout_windows(task.val_tokens, task.context, task.eval_windows, seed=task.seed)
    logits = _logits_in_batches(session, task, inputs)
    return math.nan if logits is None else loss_from_logits(logits, targets)


def _logits_in_batches(session: Session, task: Task, inputs: np.ndarray) -> np.ndarray | None:
    """The model's logits (B, T, V) for `inputs` (B, T), `eval_batch` windows per request; None (and the
    session's error set) when a request failed or returned inf or nan."""
    parts = []
    for start in range(0, len(inputs), task.eval_batch):
        logits = session.logits(inputs[start:start + task.eval_batch])
        if logits is None:
            return None
        if not np.isfinite(logits).all():
            session.error = "returned logits that are inf or nan"
            return None
        parts.append(logits)
    return np.concatenate(parts)


def greedy_windows(length: int, prompt_len: int, context: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each generated token of a sequence of `length` ids (the prompt's `prompt_len`, then the new ones)
    was chosen, for a model that sees at most `context` tokens (module 13's generate crops to the last ones).

    Returns (starts (W,), window (N,), position (N,)) for the N = length - prompt_len generated tokens: the
    model is asked for the logits of the W windows ids[s : s + width] (width = min(context, length - 1)), and
    token i must be the greedy choice of row position[i] of window window[i]: its context was
    ids[max(0, i - width) : i]. Tokens inside the first window share it; each later one has its own."""
    width = min(context, length - 1)
    chosen = np.arange(prompt_len, length)
    window = np.maximum(0, chosen - width)
    return np.arange(window.max() + 1 if len(chosen) else 1), window, chosen - 1 - window


def _check_greedy(session: Session, task: Task, tokens: np.ndarray, prompt_len: int) -> str:
    """"" when every generated token is the greedy choice of the model's own logits over the context it had."""
    from tinytorch.perf.olympics import greedy_consistent

    starts, window, position = greedy_windows(len(tokens), prompt_len, task.context)
    width = min(task.context, len(tokens) - 1)
    logits = _logits_in_batches(session, task, tokens[starts[:, None] + np.arange(width)])
    if logits is None:
        return session.error or "no logits for the generated tokens"
    ok = greedy_consistent(logits[window, position], tokens[prompt_len:])
    if ok.all():
        return ""
    first = int(np.flatnonzero(~ok)[0])
    return (f"generation: new token {first + 1} is not the greedy choice of its own model over the "
            f"{min(prompt_len + first, width)} tokens before it ({int((~ok).sum())} of {len(ok)} new tokens are not; "
            "every token of the answer is checked)")


def _check_answers(session: Session, task: Task, answers: list, prompt_len: int) -> str:
    """"" when every answer (warm-up and timed) is the same and that one is the model's greedy continuation."""
    if not answers or any(a is None for a in answers):
        return session.error or "generation: no answer"
    for number, tokens in enumerate(answers[1:], start=2):
        if not np.array_equal(tokens, answers[0]):
            return (f"generation: answer {number} of {len(answers)} differs from answer 1 (greedy decoding of one "
                    "prompt gives the same tokens every time; every answer is compared)")
    return _check_greedy(session, task, answers[0], prompt_len)


# ---------------------------------------------------------------------------- the judge


def judge(entries: list[Submission], task: Task, events: list[str], baseline: Submission | None = None,
          baseline_loss: float | None = None, course_root: Path | None = None, progress=None) -> Leaderboard:
    """Judge `entries` in `events`; the quality bar is `baseline_loss` or the loss measured on `baseline`.

    `baseline` (judged like the others, and for the speedrun the entry whose time the others are
    divided by) may be one of `entries`. Never raises for what a submission does.
    """
    from tinytorch.perf import benchmarking

    _check_events(events, baseline, baseline_loss)
    rules = read_rules(task)
    course_root = Path(course_root) if course_root else Path(__file__).resolve().parents[2]
    say = progress or (lambda text: None)
    everyone = list(entries) if baseline is None or baseline in entries else [baseline, *entries]
    results = {id(e): EntryResult(e) for e in everyone}
    environment = benchmarking.environment()
    scratch = Path(tempfile.mkdtemp(prefix="tito-olympics-"))
    try:
        scratch.chmod(0o711)  # the sandbox's users walk through to their own folders
        runner_sources(course_root)  # a course to copy the runner from, before anything starts
        with SandboxUsers(len(everyone)) as claimed:
            if any(event != "speedrun" for event in events):
                _judge_serving(everyone, results, task, events, scratch, course_root, claimed.users, say)
            if "speedrun" in events:
                _judge_speedrun(everyone, results, task, scratch, course_root, claimed.users, say)
    finally:
        remove_tree(scratch)
    serving = any(event != "speedrun" for event in events)
    if baseline_loss is None:
        baseline_loss = _baseline_loss(results[id(baseline)], serving)
    speed_base = results[id(baseline)].speedrun_s if baseline is not None else math.nan
    boards = {event: _ranked(event, [results[id(e)] for e in everyone], task, rules, baseline_loss, speed_base)
              for event in events}
    return Leaderboard(task, list(events), [results[id(e)] for e in everyone], baseline_loss, boards, environment,
                       speed_base, rules)


def _check_events(events: list[str], baseline, baseline_loss) -> None:
    from tinytorch.perf.olympics import EVENTS

    unknown = [e for e in events if e not in EVENTS]
    if unknown or not events:
        raise CourseError(f"Unknown event {', '.join(unknown) or '(none)'}: choose from {', '.join(EVENTS)}.")
    if baseline is None and baseline_loss is None:
        raise CourseError("The quality bar needs a baseline: give --baseline DIR (an entry judged first) or a loss.")


def _baseline_loss(base: EntryResult, serving: bool) -> float:
    # In a speedrun alone no checkpoint is judged: the baseline's loss is that of the model it trained.
    loss = base.val_loss if serving else base.speedrun_loss
    if base.reason or not math.isfinite(loss):
        raise CourseError(f"The baseline {base.submission.name} could not be judged, so there is no quality bar: "
                          f"{base.reason or 'no loss'}")
    return loss


def _judge_serving(everyone, results, task: Task, events, scratch: Path, course_root: Path, users, say) -> None:
    """The smallest and generation events: one runner per entry, all started at once, all closed at the end."""
    sessions: dict[int, Session] = {}
    try:
        say(f"starting {len(everyone)} runner(s) in the sandbox")
        for index, (entry, user) in enumerate(zip(everyone, users)):
            sessions[id(entry)] = Session(entry, task, scratch / f"serve-{index}", user, "serve", course_root)
        for entry in everyone:
            session, result = sessions[id(entry)], results[id(entry)]
            session.connect()
            result.checkpoint_bytes, result.other_bytes = session.checkpoint_bytes, session.other_bytes
            say(f"quality: {entry.name}")
            result.val_loss = _quality(session, task)
        if "generation" in events:
            _judge_generation(everyone, sessions, results, task, say)
        for entry in everyone:
            sessions[id(entry)].close()
            results[id(entry)].reason = sessions[id(entry)].verdict()
    finally:
        for session in sessions.values():  # after an error of the judge's own: nothing may outlive it
            session.abort()


def _judge_generation(everyone, sessions, results, task: Task, say) -> None:
    """All entries' generation requests interleaved by module 19's `measure`, timed in this process; then,
    untimed, every answer of each entry checked (`_check_answers`)."""
    from tinytorch.perf import benchmarking

    prompt = generation_prompt(task)
    live = [e for e in everyone if not sessions[id(e)].error]
    if not live:
        return
    answers: dict[int, list] = {id(e): [] for e in live}

    def request(entry):
        session, kept = sessions[id(entry)], answers[id(entry)]

        def call():
            kept.append(session.generate(prompt, task.new_tokens))
        return call

    say(f"generation: {task.new_tokens} tokens, batch 1, {task.generation_repeats} interleaved repeats")
    variants = {e.digest + ":" + str(i): request(e) for i, e in enumerate(live)}
    measured = benchmarking.measure(variants, repeats=task.generation_repeats, warmup=1)
    for index, entry in enumerate(live):
        session = sessions[id(entry)]
        if session.error:
            continue
        say(f"generation: checking {entry.name}'s answers")
        problem = _check_answers(session, task, answers[id(entry)], len(prompt))
        if problem:
            session.error = session.error or problem
            continue
        results[id(entry)].generation_s = measured[entry.digest + ":" + str(index)]


def _judge_speedrun(everyone, results, task: Task, scratch: Path, course_root: Path, users, say) -> None:
    """Each entry's train(budget) from scratch, one at a time on `speedrun_threads` threads, timed here."""
    for index, (entry, user) in enumerate(zip(everyone, users)):
        result = results[id(entry)]
        if not entry.has_train:
            result.speedrun_s = math.nan
            result.notes.append("no train(): not in the speedrun")
            continue
        say(f"speedrun: {entry.name} (budget {task.speedrun_budget_s:g} s)")
        session = Session(entry, task, scratch / f"speedrun-{index}", user, "speedrun", course_root)
        try:
            seconds, loss = _time_training(session, task)
            session.close()
        finally:
            session.abort()
        why = session.verdict()
        if why:
            result.reason = result.reason or f"speedrun: {why}"
        elif math.isfinite(loss):
            result.speedrun_s, result.speedrun_loss = seconds, loss
            result.notes.append(f"speedrun loss {loss:.4f}")


def _time_training(session: Session, task: Task) -> tuple[float, float]:
    """(seconds of the train request, the judge's loss of the model it returned); nan loss when it failed."""
    session.connect()
    start = time.perf_counter()
    reply = session.request({"op": "train", "budget_s": task.speedrun_budget_s},
                            timeout=task.speedrun_budget_s + task.answer_timeout_s)
    seconds = time.perf_counter() - start
    if reply is not None and seconds > task.speedrun_budget_s:
        session.error = f"train() ran {seconds:.1f} s, past its budget of {task.speedrun_budget_s:g} s"
    return seconds, (_quality(session, task) if reply is not None else math.nan)


# ---------------------------------------------------------------------------- ranking


def _ranked(event: str, results: list[EntryResult], task: Task, rules: Rules, baseline_loss: float,
            speed_base: float) -> list:
    """One event's rows (module 20's Row), ranked by module 20's rank_entries."""
    from tinytorch.perf.olympics import EVENTS, rank_entries

    rows = [_row(event, result, task, rules, baseline_loss, speed_base) for result in results]
    return rank_entries(rows, EVENTS[event].higher_is_better)


def _row(event: str, result: EntryResult, task: Task, rules: Rules, baseline_loss: float, speed_base: float):
    """One entry's row in one event: its score and interval, and the reason it is disqualified ("" if not)."""
    from tinytorch.perf.olympics import Row, quality_verdict

    reason = result.reason
    if event == "speedrun":
        loss = result.speedrun_loss
        if not reason and not loss <= rules.speedrun_target:
            reason = f"validation loss {loss:.4f} did not reach the target {rules.speedrun_target}"
        score = low = high = result.speedrun_s
    else:
        loss = result.val_loss
        reason = reason or quality_verdict(loss, baseline_loss, rules.quality_margin)
        if event == "smallest":
            score = low = high = float(result.shipped_bytes)
        else:
            score, low, high = _rate(result.generation_s, task.new_tokens)
    extra = {"val_loss": float(loss)}
    if event == "smallest":
        extra["parts"] = {"checkpoint": result.checkpoint_bytes, "other files": result.other_bytes}
    if event in ("generation", "speedrun") and math.isfinite(score):
        # Ranked on the interval widened by half the resolution each side: on a shared machine a few
        # percent is not reproducible, so the judge does not rank it. The table shows the CI (the
        # speedrun's is its one timed run).
        extra["ci"] = (low, high)
        low, high = min(low, score * (1 - task.speed_resolution / 2)), max(high, score * (1 + task.speed_resolution / 2))
    if event == "speedrun" and math.isfinite(speed_base) and math.isfinite(score):
        extra["ratio_to_baseline"] = score / speed_base
    return Row(result.submission.name, score, low, high, reason, result.submission.digest, extra=extra)


def _rate(measurement, new_tokens: int) -> tuple[float, float, float]:
    """(median, low, high) tokens per second from module 19's Measurement of seconds per request."""
    if measurement is None:
        return math.nan, math.nan, math.nan
    return new_tokens / measurement.median, new_tokens / measurement.high, new_tokens / measurement.low


# ---------------------------------------------------------------------------- the files


def check_output_folder(out: Path) -> None:
    """CourseError unless `out` is, or can become, a folder that takes files: checked before any work,
    changing nothing on disk (the probe is a nameless file, gone when closed)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CourseError(f"--out {out} exists and is not a folder: choose another --out.")
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CourseError(f"--out {out}: {existing} is a file, not a folder: choose another --out.")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise CourseError(f"--out {out}: cannot write in {existing} ({err.strerror or err}): "
                          "choose another --out.") from None


def leaderboard_files(board: Leaderboard) -> dict[str, bytes]:
    """The leaderboard's files, made in memory: leaderboard.md, leaderboard.csv and one Pareto plot
    per event with a qualified entry (pareto.png for the first event, pareto-<event>.png after)."""
    files = {"leaderboard.md": _markdown(board).encode("utf-8"), "leaderboard.csv": _csv(board).encode("utf-8")}
    for index, event in enumerate(board.events):
        plot = _pareto_png(board, event)
        if plot is not None:
            files["pareto.png" if index == 0 else f"pareto-{event}.png"] = plot
    return files


def write_leaderboard(board: Leaderboard, out: Path) -> list[Path]:
    """leaderboard.md, leaderboard.csv and pareto.png (one plot per event: pareto-<event>.png) in `out`,
    each written whole or not at all (tinytorch.files.atomic_write): a full disk leaves no empty file."""
    from tinytorch.files import atomic_write

    files = leaderboard_files(board)  # everything made before the first byte is written
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        with atomic_write(out / name, "wb") as handle:
            handle.write(data)
        written.append(out / name)
    return written


def _markdown(board: Leaderboard) -> str:
    from tinytorch.perf.olympics import EVENTS, leaderboard_markdown

    task = board.task
    env = ", ".join(f"{k} {v}" for k, v in board.environment.items() if isinstance(v, (str, int, float)))
    parts = ["# TinyTorch Olympics: leaderboard", "",
             "Every number below was measured by `tito olympics judge` on this machine; none was read from a submission.",
             f"Judge's environment: {env}.",
             f"Each entry ran in tito's sandbox on 1 BLAS thread (the speedrun on {task.speedrun_threads}); "
             f"quality: mean cross-entropy over {task.eval_windows} windows of {task.context} tokens of "
             f"{task.heldout} (seed {task.seed}); smallest: every byte an entry ships (checkpoint and other files); "
             f"generation: {task.new_tokens} greedy tokens after a {task.prompt_tokens}-token prompt, batch 1, "
             f"{task.generation_repeats} interleaved repeats, every answer checked token by token "
             f"(median and 95% bootstrap interval; entries whose intervals overlap, or whose speeds differ by less than "
             f"{task.speed_resolution:.0%}, share a rank; the speedrun: one timed run per entry, times closer than "
             f"{task.speed_resolution:.0%} share a rank).", ""]
    for event in board.events:
        # The speedrun's bar is its target loss, reached from scratch, not the baseline's loss + margin.
        target = board.rules.speedrun_target if event == "speedrun" else None
        parts.append(leaderboard_markdown(EVENTS[event], board.boards[event], board.baseline_loss, target,
                                          margin=board.rules.quality_margin))
        if event == "speedrun":
            baseline = (f" Speedrun baseline time: {board.speedrun_baseline_s:.1f} s (ratio = entry / baseline, "
                        "same run)." if math.isfinite(board.speedrun_baseline_s) else "")
            parts.append(f"Budget {task.speedrun_budget_s:g} s per entry on {task.speedrun_threads} "
                         f"threads.{baseline}\n")
    return "\n".join(parts)


def _csv(board: Leaderboard) -> str:
    from tinytorch.perf.olympics import CSV_FIELDS, EVENTS, leaderboard_rows_csv

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for event in board.events:
        writer.writerows(leaderboard_rows_csv(EVENTS[event], board.boards[event]))
    return text.getvalue()


def _pareto_png(board: Leaderboard, event: str) -> bytes | None:
    """One event's Pareto plot of its qualified entries as PNG bytes; None when none qualified."""
    from tinytorch.perf import benchmarking
    from tinytorch.perf.olympics import EVENTS

    rows = [{"name": r.name, "val_loss": r.extra["val_loss"], "cost": r.score if EVENTS[event].higher_is_better is False
             else 1.0 / r.score} for r in board.boards[event] if r.qualified and math.isfinite(r.score)]
    if not rows:
        return None
    label = {"smallest": "bytes shipped", "generation": "seconds per token", "speedrun": "seconds"}[event]
    figure = benchmarking.plot_pareto([{**r, label: r["cost"]} for r in rows], "val_loss", label,
                                      title=f"{event}: validation loss against {label} (qualified entries)")
    import matplotlib.pyplot as plt

    try:
        image = io.BytesIO()
        figure.savefig(image, format="png", dpi=100)
        return image.getvalue()
    finally:
        plt.close(figure)
