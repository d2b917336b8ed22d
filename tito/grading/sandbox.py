"""Running one untrusted command in a scratch folder, under limits, and saying what happened.

`tito grade` runs each module's graded cases on a student's package through `run_sandboxed`
(`python -m tito.grading.cases`); the Olympics judge (module 20) runs its runner beside a
contestant's program the same way:

    with SandboxUsers(1) as claimed:             # [None] unless tito runs as root with setpriv
        user = claimed.users[0]
        work = prepare_workdir(scratch / "work", user)
        result = run_sandboxed([sys.executable, "-m", "tito.grading.cases", ...], work, Limits(wall_s=60), user=user)
    if not result.ok:
        print(result.reason)                     # "ran past its 60 s wall-clock limit", ...

What the command gets:

* its own process group and session, `work` as its folder, HOME and TMPDIR, no standard
  input, and an environment built from nothing (no proxy settings, no tokens, no PYTHONPATH
  but the one the caller gives; one BLAS/OpenMP thread);
* limits: wall-clock time (the group is killed), CPU time (of everything it starts, read twice a
  second: below), address space (`RLIMIT_AS`: an allocation past it is a `MemoryError`), the size
  of any one file it writes (`RLIMIT_FSIZE`), all it writes in `work` together (checked while it
  runs), what it prints (stdout and stderr together; the run is stopped past the limit), no core files;
* its own cgroup v2 group where root can make one (`ControlGroup`): every process it starts stays
  in it, setsid and double forks included, so their CPU time (exited ones too) is counted together
  and all of them are killed together; the group also caps processes and memory where the machine
  delegates those controllers. Without one, the CPU time is summed over its processes, each as last
  read (`_CpuLedger`);
* when it ends, every process it started is killed, also those that left its process group
  (`setsid`, double forks): they are found by their group, their user (below) or else by a mark in
  their environment, and counted as a violation; if tito itself is killed outright (SIGKILL, where no
  clean-up can run), the kernel kills the command with it (Linux's parent-death signal; the
  command's own children are not covered by that backstop);
* where tito runs as root and `setpriv` exists: its own unprivileged user (a uid from
  `SANDBOX_UID_BASE` up that no account or process has, claimed for the run: `SandboxUsers`;
  no groups, no capabilities, no new privileges, at most `Limits.processes` processes), so it
  cannot write the grader's files or signal other processes; and, where the machine allows
  namespaces, a network namespace of its own (no network) and a mount namespace in which /dev/shm
  and /run/lock (and, when the caller says what the run needs, `visible`, also /tmp and /var/tmp)
  are private tmpfs of `Limits.tmp_bytes`, the `hidden` folders (the instructor's course) show
  empty, and of the folders other users cannot enter (root's home) only Python's installation is
  visible (`covers`). Files it leaves in a shared temporary folder are removed and counted as a
  violation.

What it does not do: code inside the process can still do anything that process can do, e.g.
forge the file the command writes (the values of `tito.grading.cases`: which is why the score is
computed outside, by `tito.grading.compare`, and forging that file earns points only with the right
values) or read files every user may read; without root, the command runs as the grader's own
user and can write what the grader can. README ("For instructors") lists what was measured.
"""
from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

MiB = 1024 ** 2
GiB = 1024 ** 3
SANDBOX_UID_BASE = 64000  # users of their own are uids from here up (no account needed; SandboxUsers)
SANDBOX_MARK_ENV = "TITO_SANDBOX"  # every sandboxed process carries TITO_SANDBOX=<run id>
# The folders every user may write (`find / -writable` as a sandbox user found these and no other;
# /var/lock and /run/shm are links to two of them): in the sandbox's mount namespace each is a private,
# size-limited tmpfs; where there are no namespaces, what the run's own user leaves there is removed and counted.
_SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/run/shm")
_POLL_S = 0.05
_DISK_CHECK_S = 0.5  # how often the files written and the CPU time used are looked at
_MAX_FILES = 50_000

# Runs before the command, as a tiny Python without site-packages (and as root when the run
# has a user of its own): into its control group (every process it starts is counted there),
# private network and mount namespaces where it can, the limits, then exec: the command keeps
# the pid tito waits for. Each "cover" puts an empty tmpfs of its own over a folder, with some
# paths of the real one bound back into it: the tmpfs is built on a stage in the work folder,
# then moved over the folder (so a folder that holds the work folder itself, /tmp, can be covered).
_SHIM = r"""
import ctypes, json, os, resource, sys
setup = json.loads(sys.argv[1])
if setup.get("cgroup"):
    with open(os.path.join(setup["cgroup"], "cgroup.procs"), "w") as handle:
        handle.write(str(os.getpid()))
if setup["namespaces"]:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    def call(result, what):
        if result != 0:
            sys.stderr.write("tito sandbox: %s failed: %s\n" % (what, os.strerror(ctypes.get_errno())))
            os._exit(125)
    call(libc.unshare(0x00020000 | 0x40000000), "unshare (mount and network namespaces)")
    call(libc.mount(None, b"/", None, 0x4000 | 0x40000, None), "making every mount private")  # MS_REC|MS_PRIVATE
    work = os.getcwd()
    for number, cover in enumerate(setup["covers"]):
        stage = os.path.join(work, ".tito-stage-%d" % number)
        os.mkdir(stage, 0o700)
        options = "mode=%s,size=%d" % (cover["mode"], cover["bytes"])
        call(libc.mount(b"tmpfs", stage.encode(), b"tmpfs", 2 | 4, options.encode()),  # MS_NOSUID|MS_NODEV
             "tmpfs for " + cover["path"])
        for path in cover["expose"]:
            inside = os.path.join(stage, os.path.relpath(path, cover["path"]))
            if os.path.isdir(path):
                os.makedirs(inside, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(inside), 0o755, exist_ok=True)
                open(inside, "w").close()
            call(libc.mount(path.encode(), inside.encode(), None, 4096 | 0x4000, None), "bind " + path)  # MS_BIND|MS_REC
        call(libc.mount(stage.encode(), cover["path"].encode(), None, 8192, None), "move to " + cover["path"])  # MS_MOVE
        os.chdir(work)  # through the new mounts
        if os.path.ismount(stage):  # the work folder was bound with its mounts: the stage came along
            libc.umount2(stage.encode(), 2)  # MNT_DETACH
        os.rmdir(stage)
for name, (soft, hard) in setup["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (soft, hard))
os.execvp(sys.argv[2], sys.argv[2:])
"""

# Runs last, as the user the command runs as (a change of user clears the setting, so it cannot be
# done in _SHIM): the command is killed by the kernel if tito dies without cleaning up (SIGKILL, a
# crash), the backstop for what `run_sandboxed`'s own clean-up cannot do then. argv[1] is tito's pid.
_DIE_WITH_TITO = r"""
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL
if os.getppid() != int(sys.argv[1]):  # tito is already gone: nobody would kill us
    os._exit(125)
os.execvp(sys.argv[2], sys.argv[2:])
"""


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use. Sizes in bytes, times in seconds."""

    wall_s: float = 300.0  # wall-clock time; the whole run is killed past it
    cpu_s: float = 300.0  # CPU time of the command and the children it waited for
    memory_bytes: int = 3 * GiB  # address space of each process (RLIMIT_AS)
    file_bytes: int = 64 * MiB  # the largest file it may write (RLIMIT_FSIZE)
    disk_bytes: int = 512 * MiB  # everything in its work folder together
    output_bytes: int = 1 * MiB  # what it prints, stdout and stderr together
    processes: int = 128  # processes and threads of its user at once (RLIMIT_NPROC; own user only)
    tmp_bytes: int = 64 * MiB  # each private temporary folder (/tmp, /var/tmp, /dev/shm, /run/lock; namespaces only)


@dataclass(frozen=True)
class SandboxUser:
    """The unprivileged user a sandboxed run becomes (tito must be root to switch to it)."""

    uid: int
    gid: int


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # the command's exit status, -N for signal N; None when the sandbox stopped it
    reason: str  # "" when it ended by itself within every limit; else what went wrong, in words
    output: str  # what it printed (at most the output limit)
    seconds: float
    cpu_seconds: float  # the command and the children it waited for
    leftovers: int = 0  # processes still running when it ended (killed)
    outside: tuple[str, ...] = field(default=())  # files it left in the shared temporary folders (removed)

    @property
    def ok(self) -> bool:
        return not self.reason


# ---------------------------------------------------------------------------- who runs it


@lru_cache(maxsize=None)
def _setpriv() -> str | None:
    return shutil.which("setpriv") if os.geteuid() == 0 and hasattr(os, "fork") else None


def _reachable(path: str) -> bool:
    """Whether a user with no rights of its own may walk to `path`: every folder on the way has `x` for others."""
    current = Path("/")
    for part in Path(path).parts[1:]:
        try:
            if not current.stat().st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        current = current / part
    return True


def python_paths() -> list[str]:
    """The folders this Python needs: its installation (binary, libpython, standard library) and its environment."""
    found = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix)}
    found.add(os.path.dirname(os.path.realpath(sys.executable)))
    found.update(os.path.realpath(p) for p in sysconfig.get_paths().values() if os.path.isdir(p))
    # one entry per tree: a path inside another one is exposed with it
    return sorted(p for p in found if not any(p != q and p.startswith(q + "/") for q in found))


def exposures(paths: list[str]) -> list[tuple[str, list[str]]]:
    """For the paths another user cannot reach: (the first private folder on the way, the paths below it).

    In the sandbox's own mount namespace that folder is covered by an empty tmpfs holding only
    those paths, so the sandbox user reaches Python, and nothing else of that folder.
    """
    plan: dict[str, list[str]] = {}
    for path in paths:
        if _reachable(path):
            continue
        current = Path("/")
        for part in Path(path).parts[1:]:
            if not current.stat().st_mode & stat.S_IXOTH:
                break
            current = current / part
        plan.setdefault(str(current), []).append(path)
    hidden = sorted(plan)
    # a private folder inside another one's plan is covered by the outer tmpfs already
    return [(h, sorted(plan[h])) for h in hidden if not any(h != o and h.startswith(o + "/") for o in hidden)]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def shared_tmp_folders() -> list[str]:
    """The folders every user may write (/tmp, /var/tmp, /dev/shm, /run/lock), each once (links resolved)."""
    found = []
    for folder in _SHARED_TMP:
        real = os.path.realpath(folder)
        if os.path.isdir(real) and real not in found:
            found.append(real)
    return found


def covers(needed: list[str], private_tmp: list[str], hidden: list[str], tmp_bytes: int) -> list[dict]:
    """The mounts of a run's own namespace: what each covered folder shows ("expose"), outer folders first.

    `needed`: what the run must reach (its work folder, the paths it was given, Python's installation).
    `private_tmp`: shared temporary folders that become an empty tmpfs of `tmp_bytes`, writable by all.
    `hidden`: folders that become an empty read-only-looking tmpfs; and, from `exposures`, root's
    private folders on the way to Python. In each, only the `needed` paths inside it are bound back.
    """
    needed = [os.path.realpath(p) for p in needed]
    plan = {os.path.realpath(f): ("1777", tmp_bytes) for f in private_tmp}
    for folder in hidden:
        plan.setdefault(os.path.realpath(folder), ("755", MiB))
    for folder, _ in exposures(python_paths()):
        plan.setdefault(folder, ("755", MiB))
    chosen = []
    for folder in sorted(plan, key=lambda f: (f.count("/"), f)):
        # a folder inside a covered one is gone already, unless it lies inside a path bound back there
        outer = [c for c in chosen if _inside(folder, c["path"])]
        if outer and not any(_inside(folder, e) for c in outer for e in c["expose"]):
            continue
        mode, size = plan[folder]
        expose = sorted(p for p in needed if _inside(p, folder) and p != folder)
        # one entry per tree: a path inside another exposed one comes with it
        expose = [p for p in expose if not any(q != p and _inside(p, q) for q in expose)]
        if any(p == folder for p in needed):
            continue  # the run needs this whole folder: nothing to cover
        chosen.append({"path": folder, "mode": mode, "bytes": size, "expose": expose})
    return chosen


@lru_cache(maxsize=None)
def _namespaces_work() -> bool:
    """Whether this machine lets root make mount and network namespaces (a locked-down container may not)."""
    if os.geteuid() != 0 or not Path("/proc/self/ns/mnt").exists():
        return False
    setup = {"namespaces": True, "covers": [], "rlimits": {}}
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _SHIM, json.dumps(setup), "true"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def can_switch_user() -> bool:
    """Whether runs here can have a user of their own: tito runs as root and setpriv exists."""
    return _setpriv() is not None


def _uid_is_free(uid: int) -> bool:
    """No account has it and no process runs as it (it may be some other program's spare uid)."""
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    return not any(owner == uid for _, _, owner, _ in _process_table())


class SandboxUsers:
    """Users of their own for `count` runs at once, each claimed for as long as this object is open.

        with SandboxUsers(2) as users:      # users.users: [SandboxUser(64000, 64000), SandboxUser(64001, ...)]
            run_sandboxed(..., user=users.users[0])

    A uid is claimed with a lock file (in a folder only root may write), so two tito processes
    on one machine never share one: each kills every process of its uids when a run ends, and
    would otherwise kill the other's. A uid that an account or a running process has is skipped.
    Without root or setpriv every entry is None (runs use the grader's own user).
    """

    LOCKS = Path(tempfile.gettempdir()) / "tito-sandbox-uids"

    def __init__(self, count: int):
        self.users: list[SandboxUser | None] = [None] * count
        self._locks: list[int] = []
        if not can_switch_user():
            return
        self.LOCKS.mkdir(mode=0o700, exist_ok=True)
        info = self.LOCKS.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
            raise RuntimeError(f"{self.LOCKS} must be a folder that only root may write; remove it and try again.")
        uid = SANDBOX_UID_BASE
        for slot in range(count):
            while True:
                fd = os.open(self.LOCKS / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    uid += 1
                    continue
                if _uid_is_free(uid):
                    break
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                uid += 1
            self._locks.append(fd)
            self.users[slot] = SandboxUser(uid, uid)
            uid += 1

    def close(self) -> None:
        for fd in self._locks:
            os.close(fd)  # releases the lock
        self._locks.clear()

    def __enter__(self) -> SandboxUsers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def describe_isolation(switch_user: bool | None = None) -> list[str]:
    """What protects the grader here, in words (printed by `tito grade`); `switch_user` defaults to whether it can."""
    if switch_user is None:
        switch_user = can_switch_user()
    if not switch_user:
        why = "tito is not root" if os.geteuid() != 0 else "setpriv is not installed"
        return [f"runs as your own user ({why}): it could write your files",
                "own process group, limits on time, CPU, memory, file sizes and output"]
    found = ["own unprivileged user (no groups, no capabilities, no new privileges)",
             "own process group, limits on time, CPU, memory, file sizes, output and processes"]
    found.append("no network, private temporary folders, the course and other runs out of sight, of root's "
                 "private folders only Python's (own namespaces)" if _namespaces_work()
                 else "network reachable, temporary folders shared (this machine does not allow namespaces)")
    found.append("CPU time of every process it starts counted together (cgroup v2)" if _cgroup_parent()
                 else "CPU time summed over its processes as read twice a second (no writable cgroup v2)")
    return found


def prepare_workdir(path: Path, user: SandboxUser | None) -> Path:
    """An empty folder (with `home/` and `tmp/`) that only `user` (or, without one, the grader) may write."""
    path.mkdir(parents=True)
    for sub in ("home", "tmp"):
        (path / sub).mkdir()
    if user is not None:
        for folder in (path, path / "home", path / "tmp"):
            os.chown(folder, user.uid, user.gid)
            folder.chmod(0o700)
    return path


# One BLAS/OpenMP thread for every run of course code the grader compares: a product's float32 rounding
# can depend on how many threads share it, so grading/record_expected.py records the expected values
# with this same setting; it also keeps per-thread arenas from eating a run's address space.
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}


def scratch_env(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed command: built from nothing, so nothing of the grader's leaks in."""
    home, tmp = workdir / "home", workdir / "tmp"
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home), "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp),
        "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
        "MPLCONFIGDIR": str(home / ".config" / "matplotlib"), "MPLBACKEND": "Agg",
        "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        **ONE_THREAD_ENV,
        "NO_COLOR": "1", "COLUMNS": "200",
    }
    if extra:
        env.update(extra)
    return env


# ---------------------------------------------------------------------------- finding its processes


def _process_table() -> list[tuple[int, int, int, str]]:
    """(pid, process group, real uid, state) of every process, zombies included."""
    table = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
            with open(f"/proc/{entry.name}/status", "rb") as handle:  # its real uid (stat has none)
                uid_line = next(l for l in handle if l.startswith(b"Uid:"))
        except (OSError, StopIteration):
            continue  # ended while we looked
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (name) ": state, ppid, pgrp, ...
        try:
            table.append((int(entry.name), int(fields[2]), int(uid_line.split()[1]), fields[0]))
        except (ValueError, IndexError):
            continue
    return table


def _carries_mark(pid: int, mark: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return mark in handle.read().split(b"\0")
    except OSError:
        return False


def _live_processes(pgid: int, user: SandboxUser | None, mark: bytes) -> list[int]:
    """The live processes of one sandboxed run: its process group, and its user's processes (or, without a
    user of its own, those carrying its mark: they may have left the group)."""
    if not Path("/proc/self/stat").exists():
        return []  # no /proc (macOS): only the process group can be found, and it is killed
    me = os.getpid()
    found = []
    for pid, group, uid, state in _process_table():
        if pid == me or state in ("Z", "X"):
            continue  # a zombie has ended already; nothing can kill it again
        if group == pgid or (uid == user.uid if user is not None else _carries_mark(pid, mark)):
            found.append(pid)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended: it only waits for its parent to read its status)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            line = handle.read().decode("ascii", "replace")
    except OSError:
        return False
    return line[line.rfind(")") + 2:][:1] not in ("Z", "X", "")


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
        return " ".join(w.decode("utf-8", "replace") for w in words[:4] if w)[:80] or f"pid {pid}"
    except OSError:
        return f"pid {pid}"


def _kill_everything(pgid: int, user: SandboxUser | None, mark: bytes,
                     group: ControlGroup | None = None) -> list[str]:
    """Kill every process of the run (see `_live_processes`, and its control group); the commands of those alive."""
    seen: dict[int, str] = {}
    for _ in range(200):  # a process that forks while we kill is caught on a later round
        alive = _live_processes(pgid, user, mark)  # counted (and named) before they are killed
        if group is not None:
            alive += [pid for pid in group.pids() if pid not in alive and _running(pid)]
        for pid in alive:
            seen.setdefault(pid, _command_name(pid))
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return list(seen.values())


def _disk_usage(folder: Path) -> tuple[int, int]:
    """(bytes on disk, entries) under `folder`, links not followed; stops counting past _MAX_FILES entries."""
    total = count = 0
    stack = [str(folder)]
    while stack and count <= _MAX_FILES:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            count += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += getattr(info, "st_blocks", 0) * 512 or info.st_size
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total, count


def _remove_strays(user: SandboxUser | None) -> tuple[str, ...]:
    """Files the run's own user left in the shared temporary folders, removed; their paths."""
    if user is None:
        return ()  # they cannot be told from the grader's own files
    found = []
    for folder in _SHARED_TMP:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != user.uid:
                    continue
                found.append(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue
    return tuple(sorted(found))


# ---------------------------------------------------------------------------- counting all it starts


@lru_cache(maxsize=None)
def _cgroup_parent() -> str | None:
    """The grader's own cgroup v2 group, where root may make a group per run; None where it cannot."""
    if os.geteuid() != 0:
        return None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = [line.split() for line in handle]
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = next((line.strip()[3:] for line in handle if line.startswith("0::")), None)
    except OSError:
        return None
    root = next((m[4] for m in mounts if "-" in m and m[m.index("-") + 1] == "cgroup2"), None)
    if root is None or own is None:
        return None
    parent = os.path.join(root, own.lstrip("/"))
    probe = os.path.join(parent, f"tito-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        usable = os.path.exists(os.path.join(probe, "cpu.stat"))
        os.rmdir(probe)
    except OSError:
        return None
    return parent if usable else None


class ControlGroup:
    """A cgroup v2 group of its own for one run: every process the run starts stays in it (setsid and
    double forks included), so their CPU time is counted together (`cpu.stat`, exited ones too) and
    all of them can be found and killed. Where the machine delegates the controllers, also a limit on
    processes (`pids.max`) and memory (`memory.max`) for the whole run.

    `ControlGroup.create(limits)` is None where there is no writable cgroup v2 (not root, cgroup v1 only).
    """

    def __init__(self, path: str, limited: tuple[str, ...]):
        self.path, self.limited = path, limited

    @classmethod
    def create(cls, limits: Limits) -> ControlGroup | None:
        parent = _cgroup_parent()
        if parent is None:
            return None
        path = os.path.join(parent, f"tito-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        limited = []
        for name, value in (("pids.max", limits.processes), ("memory.max", limits.memory_bytes),
                            ("memory.swap.max", 0)):
            try:
                with open(os.path.join(path, name), "w") as handle:
                    handle.write(str(value))
                limited.append(name)
            except OSError:
                continue  # the controller is not delegated here: the per-process limits stay
        return cls(path, tuple(limited))

    def cpu_seconds(self) -> float | None:
        try:
            with open(os.path.join(self.path, "cpu.stat"), encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs"), encoding="ascii") as handle:
                return [int(line) for line in handle if line.strip()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w") as handle:
                handle.write("1")
        except OSError:
            pass
        for pid in self.pids():  # kernels before 5.14 have no cgroup.kill
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self) -> None:
        """Kill what is left and remove the group (it can be removed once its last process is gone)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            self.kill()
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


class _CpuLedger:
    """Without a control group: the CPU time of every process of the run seen so far (by its user, or by its
    mark), each process's own time as last read, so children in sessions of their own count too. A process
    that starts and ends between two readings (half a second) is missed, unless its parent waited for it."""

    def __init__(self):
        self.seen: dict[int, float] = {}

    def total(self, main_pid: int, pgid: int, user: SandboxUser | None, mark: bytes) -> float | None:
        ticks = os.sysconf("SC_CLK_TCK")
        for pid in _live_processes(pgid, user, mark):
            own = _own_cpu_ticks(pid)
            if own is not None:
                self.seen[pid] = max(self.seen.get(pid, 0.0), own / ticks)
        main = _cpu_seconds(main_pid)
        return max(sum(self.seen.values()), main or 0.0)


def _own_cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            line = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = line[line.rfind(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


# ---------------------------------------------------------------------------- running


def _cpu_seconds(pid: int) -> float | None:
    """CPU time of a running process and of the children it has waited for (from /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat_line = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat_line[stat_line.rfind(")") + 2:].split()  # utime, stime, cutime, cstime are fields 14-17
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _rlimits(limits: Limits, user: SandboxUser | None) -> dict[str, tuple[int, int]]:
    chosen = {
        "RLIMIT_AS": (limits.memory_bytes, limits.memory_bytes),
        "RLIMIT_FSIZE": (limits.file_bytes, limits.file_bytes),
        "RLIMIT_CORE": (0, 0),
    }
    if user is not None:  # counted per user: only meaningful for a user of its own
        chosen["RLIMIT_NPROC"] = (limits.processes, limits.processes)
    if not Path("/proc/self/stat").exists():
        # No /proc to read CPU time from (macOS): the kernel's per-process limit instead. Not used where
        # /proc exists: with RLIMIT_CPU set, Linux reads time.process_time() in 4 ms ticks, which
        # breaks every test that times CPU work.
        cpu = max(1, int(limits.cpu_s + 0.999))
        chosen["RLIMIT_CPU"] = (cpu, cpu + 5)  # SIGXCPU at the soft limit, SIGKILL 5 s later
    return chosen


def _command_line(command: list[str], limits: Limits, user: SandboxUser | None, workdir: Path,
                  visible: list[Path] | None, hidden: list[Path], group: ControlGroup | None) -> list[str]:
    setup = {"namespaces": False, "covers": [], "rlimits": _rlimits(limits, user),
             "cgroup": group.path if group else None}
    prefix: list[str] = []
    if user is not None:
        if _namespaces_work():
            setup.update(namespaces=True, covers=_run_covers(workdir, visible, hidden, limits))
        prefix = [_setpriv(), f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                  "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    backstop = [sys.executable, "-I", "-S", "-c", _DIE_WITH_TITO, str(os.getpid())] if sys.platform == "linux" else []
    return [sys.executable, "-I", "-S", "-c", _SHIM, json.dumps(setup), *prefix, *backstop, *command]


def _run_covers(workdir: Path, visible: list[Path] | None, hidden: list[Path], limits: Limits) -> list[dict]:
    """The private mounts of one run. `visible` None (the judge's runs): /tmp and /var/tmp stay shared
    (what it leaves there is removed and counted); else every shared temporary folder is private."""
    shared = shared_tmp_folders()
    if visible is None:
        keep = {os.path.realpath(f) for f in ("/tmp", "/var/tmp")}
        private = [f for f in shared if f not in keep]
    else:
        private = shared
    needed = [str(workdir), *map(str, visible or []), *python_paths()]
    return covers(needed, private, [str(h) for h in hidden], limits.tmp_bytes)


def _signal_reason(number: int, limits: Limits) -> str:
    name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
    if number == signal.SIGXCPU:
        return f"used more than its {limits.cpu_s:g} s of CPU time"
    if number == signal.SIGXFSZ:
        return f"wrote a file larger than the {limits.file_bytes / MiB:g} MiB limit"
    if number == signal.SIGKILL:
        return "was killed (SIGKILL), usually by the kernel when memory ran out"
    return f"crashed ({name})"


STOP = threading.Event()  # set (e.g. on Ctrl-C) to stop every run in progress at once; runs then end at once


class _OutputReader(threading.Thread):
    """Keeps the first `limit` bytes of a pipe and counts the rest; `flooded` is set past the limit."""

    def __init__(self, pipe, limit: int):
        super().__init__(daemon=True)
        self.pipe, self.limit = pipe, limit
        self.kept = bytearray()
        self.total = 0
        self.flooded = threading.Event()

    def run(self) -> None:
        while True:
            chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.limit - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            if self.total > self.limit:
                self.flooded.set()


def run_sandboxed(command: list[str], workdir: Path, limits: Limits = Limits(),
                  env: dict[str, str] | None = None, user: SandboxUser | None = None, *,
                  visible: list[Path] | None = None, hidden: list[Path] = ()) -> SandboxResult:
    """Run `command` in `workdir` (made by `prepare_workdir`) under `limits`; never raises for what the command does.

    `env` adds to the scratch environment (`scratch_env`), e.g. {"PYTHONPATH": course}.
    `user` (one of `SandboxUsers(n).users`) is the user it runs as; None runs it as the grader itself.
    `visible` (with a user of its own, where namespaces work): the paths besides `workdir` the run needs
    (e.g. its course); then /tmp and /var/tmp are private too, and only those paths show inside them.
    `hidden`: folders the run must not see (e.g. the instructor's course): each shows as an empty folder,
    with only the paths it needs (its work folder, `visible`, Python's installation) bound back.
    The result's `reason` says which limit it broke (the first one noticed), or that it left
    processes or files behind; "" means it ended by itself and within every limit.
    """
    run_id = uuid.uuid4().hex
    mark = f"{SANDBOX_MARK_ENV}={run_id}".encode()
    environment = scratch_env(workdir, {**(env or {}), SANDBOX_MARK_ENV: run_id})
    group = ControlGroup.create(limits)
    ledger = _CpuLedger()
    start = time.monotonic()
    try:
        process = subprocess.Popen(_command_line(command, limits, user, workdir, visible, list(hidden), group),
                                   cwd=workdir, env=environment, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True, close_fds=True)
    except BaseException:
        if group is not None:
            group.remove()
        raise
    try:
        return _watch(process, workdir, limits, user, mark, group, ledger, start)
    finally:
        if group is not None:
            group.remove()


def _watch(process: subprocess.Popen, workdir: Path, limits: Limits, user: SandboxUser | None, mark: bytes,
           group: ControlGroup | None, ledger: _CpuLedger, start: float) -> SandboxResult:
    """Wait for the run, stop it at the first limit it breaks, kill all it left; its result."""
    reader = _OutputReader(process.stdout, limits.output_bytes)
    reader.start()
    reason = ""
    status = rusage = None
    next_disk_check = start + _DISK_CHECK_S
    try:
        while True:
            pid, status, rusage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if STOP.is_set():
                reason = "stopped: the grader was interrupted"
            elif reader.flooded.is_set():
                reason = f"printed more than its {limits.output_bytes / MiB:g} MiB output limit"
            elif now - start > limits.wall_s:
                reason = f"ran past its {limits.wall_s:g} s wall-clock limit"
            elif now >= next_disk_check:
                next_disk_check = now + _DISK_CHECK_S
                used, entries = _disk_usage(workdir)
                # everything it started: its control group, or else each of its processes as last seen
                cpu_used = group.cpu_seconds() if group is not None else None
                if cpu_used is None:
                    cpu_used = ledger.total(process.pid, process.pid, user, mark)
                if cpu_used is not None and cpu_used > limits.cpu_s:
                    reason = f"used more than its {limits.cpu_s:g} s of CPU time"
                elif used > limits.disk_bytes:
                    reason = f"wrote more than its {limits.disk_bytes / MiB:g} MiB of files"
                elif entries > _MAX_FILES:
                    reason = f"created more than {_MAX_FILES:,} files"
            if reason:
                _kill_everything(process.pid, user, mark, group)
                _, status, rusage = os.wait4(process.pid, 0)
                break
            reader.flooded.wait(_POLL_S)
    finally:
        if status is None:  # interrupted (Ctrl-C): nothing may outlive the grader
            _kill_everything(process.pid, user, mark, group)
            process.wait()
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; tell Popen
    left = _kill_everything(process.pid, user, mark, group)
    reader.join(timeout=5)
    process.stdout.close()
    seconds = time.monotonic() - start
    strays = _remove_strays(user)
    returncode = None if reason else process.returncode
    if not reason and reader.total > limits.output_bytes:
        reason = f"printed more than its {limits.output_bytes / MiB:g} MiB output limit"
    if not reason and returncode is not None and returncode < 0:
        reason = _signal_reason(-returncode, limits)
    if not reason and left:
        names = "; ".join(sorted(set(left))[:2]) + ("; ..." if len(set(left)) > 2 else "")
        reason = f"left {len(left)} process(es) running when it ended ({names}; they were killed)"
    if not reason and strays:
        reason = f"wrote outside its work folder: {', '.join(strays[:3])} (removed)"
    cpu = (rusage.ru_utime + rusage.ru_stime) if rusage else 0.0
    counted = group.cpu_seconds() if group is not None else None
    cpu = max(cpu, counted or 0.0, sum(ledger.seen.values()))  # everything it started, as far as it was counted
    output = reader.kept.decode("utf-8", "replace")
    return SandboxResult(returncode, reason, output, seconds, cpu, len(left), strays)
