"""The Olympics' runner: the judge's own program, run in the sandbox beside a copy of one submission.

    python -S -m tito.grading.judge_runner WORK SOCKET CHECKPOINT MODE DECLARED   (MODE: serve | speedrun)

The judge starts it from its own copies of this file and of tinytorch (PYTHONPATH: those copies, then
the installed packages; `-S`: no .pth file, so no editable install, leads back to the course).

CHECKPOINT is the judge's read-only copy of the declared weights (outside WORK), which the runner
loads; DECLARED the name the submission declared (its copy in WORK may be read too). No other
weights file may be opened.

It imports NumPy and tinytorch, installs an audit hook (PEP 578) that refuses every `open` the
access rule of module 20 (`access_violation`) forbids, imports `WORK/submission.py`, builds the
model (`build_model()` and module 07's `load_checkpoint` from the declared CHECKPOINT; or, for
the speedrun, `train(time_budget_s)` when the judge asks), connects to the judge's socket and
answers its requests until told to stop:

    {"op": "logits"} + int64 (B, T) ids   ->  {"shape": [B, T, V]} + float32 logits
    {"op": "generate", "new_tokens": n} + int64 (T,) prompt  ->  int64 (T + n,) tokens
    {"op": "train", "budget_s": s}        ->  {} once train() returned (speedrun only)
    {"op": "bye"}

The judge believes none of the numbers this process could compute: it computes the loss from
the logits, times the requests from its side and checks the tokens against the logits. A
violation is written to file descriptor 1 at once (`VIOLATION: ...`, read by the judge from the
sandbox's output) and sent with the next reply.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys
import sysconfig

MAX_HEADER = 1 << 16
MAX_PAYLOAD = 1 << 30
# Devices any program may open: nothing is kept in them. Every other path under /dev goes through the access
# rule, so a write to /dev/shm (a folder every user may write) is named like any write outside the folder.
HARMLESS_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/full")
# What the machine says about its CPU, read by Numba (module 18's compiled kernels) to pick the code it
# generates: the same for every entry, nothing of the course or of another entry.
MACHINE_FILES = ("/proc/cpuinfo",)


def send(conn: socket.socket, header: dict, payload: bytes = b"") -> None:
    """One message: 4-byte length, the JSON header (with nbytes), the raw payload."""
    head = json.dumps({**header, "nbytes": len(payload)}).encode("utf-8")
    conn.sendall(struct.pack(">I", len(head)) + head + payload)


def _exactly(conn: socket.socket, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(conn: socket.socket, max_payload: int = MAX_PAYLOAD) -> tuple[dict, bytes]:
    """One message (header, payload); ValueError for a malformed or oversized one."""
    (length,) = struct.unpack(">I", _exactly(conn, 4))
    if length > MAX_HEADER:
        raise ValueError(f"a message header of {length} bytes (at most {MAX_HEADER})")
    header = json.loads(_exactly(conn, length).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("a message header that is not a JSON object")
    nbytes = header.get("nbytes", 0)
    if not isinstance(nbytes, int) or not 0 <= nbytes <= max_payload:
        raise ValueError(f"a payload of {nbytes!r} bytes (at most {max_payload})")
    return header, _exactly(conn, nbytes)


def main(argv: list[str]) -> int:
    work, socket_path, checkpoint, mode, declared = argv
    import numpy as np

    from tinytorch.core.autograd import no_grad
    from tinytorch.core.tensor import Tensor, to_host
    from tinytorch.core.training import load_checkpoint
    from tinytorch.perf.olympics import access_violation
    import tinytorch

    work = os.path.realpath(work)
    checkpoint = os.path.realpath(checkpoint)  # the judge's read-only copy, outside the work folder
    declared = os.path.join(work, declared)  # the submission's own copy, which its code may read too
    package = os.path.dirname(os.path.realpath(tinytorch.__file__))
    # Python, and the folders the judge put on PYTHONPATH (its copies of tinytorch and tito, the installed
    # packages: the runner starts without `site`, so these are not in sysconfig's paths)
    searched = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    allowed = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                                     *sysconfig.get_paths().values(), *searched)} | {package, checkpoint})
    runner = os.path.realpath(__file__)  # a traceback through this file reads its source
    violations: list[str] = []
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(socket_path)

    def hook(event: str, args: tuple) -> None:
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return  # an open of a file descriptor number: the file was opened (and checked) before
        path = os.path.realpath(os.path.join(work, os.fsdecode(args[0])))  # /proc/self/root/... is the file it names
        own_proc = f"/proc/{os.getpid()}/"  # its own process's files (what /proc/self/status resolves to)
        if (path in HARMLESS_DEVICES or path in MACHINE_FILES or path.startswith((own_proc, "/sys/devices/system/cpu/"))
                or path in (runner, os.path.dirname(work))):
            return
        mode_text = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        writing = any(c in mode_text for c in "wax+") or bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        why = access_violation(path, work, declared, allowed, writing)
        if why:
            if why not in violations:
                violations.append(why)
                os.write(1, f"VIOLATION: {why}\n".encode("utf-8", "replace"))
            raise PermissionError(f"tito olympics: {why}")

    sys.path.insert(0, work)
    sys.addaudithook(hook)

    def fail(message: str) -> int:
        send(conn, {"error": message, "violations": violations})
        return 3

    try:
        import submission  # noqa: F401  (its code runs now, under the hook)
        model = None
        if mode == "serve":
            if not callable(getattr(submission, "build_model", None)):
                return fail("submission.py defines no build_model()")
            model = submission.build_model()
            load_checkpoint(checkpoint, model)
    except Exception as err:  # what the submission raised: reported to the judge, which disqualifies it
        return fail(f"{type(err).__name__}: {err}")
    send(conn, {"ready": True, "violations": violations})
    while True:
        try:
            header, payload = receive(conn)
        except (ConnectionError, ValueError):
            return 4  # the judge hung up (it has what it needs, or it refused an answer)
        op = header.get("op")
        try:
            if op == "bye":
                send(conn, {"violations": violations})
                return 0
            if op == "train":
                model = submission.train(float(header["budget_s"]))
                send(conn, {"violations": violations})
            elif op == "logits":
                ids = np.frombuffer(payload, dtype=np.int64).reshape(header["shape"])
                model.eval()
                with no_grad():
                    logits = to_host(model(Tensor(ids))[0].data).astype(np.float32)
                send(conn, {"shape": list(logits.shape), "violations": violations}, logits.tobytes())
            elif op == "generate":
                prompt = np.frombuffer(payload, dtype=np.int64)
                maker = getattr(submission, "generate", None)
                if callable(maker):
                    tokens = maker(model, prompt, int(header["new_tokens"]))
                else:
                    tokens = model.generate(prompt, int(header["new_tokens"]), temperature=0.0)
                tokens = np.asarray(to_host(getattr(tokens, "data", tokens))).astype(np.int64).ravel()
                send(conn, {"violations": violations}, tokens.tobytes())
            else:
                send(conn, {"error": f"unknown request {op!r}", "violations": violations})
        except Exception as err:
            send(conn, {"error": f"{type(err).__name__}: {err}", "violations": violations})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
