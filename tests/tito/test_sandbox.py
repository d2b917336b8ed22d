"""tito.grading.sandbox: each limit, the cleanup of every process a run starts, the scratch environment,
and (when the tests run as root with setpriv) the unprivileged user of its own.

Every test runs a few lines of Python in the sandbox twice where it can: as the grader's own
user, and as the sandbox's user (root only; skipped otherwise, with the reason).
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from tito.grading.sandbox import (GiB, MiB, Limits, SandboxUsers, _namespaces_work, can_switch_user,
                                  describe_isolation, prepare_workdir, run_sandboxed)

SMALL = Limits(wall_s=30, cpu_s=30, memory_bytes=1 * GiB, file_bytes=4 * MiB, disk_bytes=16 * MiB,
               output_bytes=64 * 1024, processes=64)


@pytest.fixture(scope="module")
def own_user():
    """A user of its own, claimed for this file's tests; None where runs cannot change user."""
    with SandboxUsers(1) as claimed:
        yield claimed.users[0]


# Known when the tests are collected: a run can change user only as root with setpriv.
needs_own_user = pytest.mark.skipif(not can_switch_user(),
                                    reason="not root, or no setpriv: runs cannot change user here")


@pytest.fixture(params=["grader", pytest.param("own-user", marks=needs_own_user)])
def user(request, own_user):
    return None if request.param == "grader" else own_user


@pytest.fixture
def scratch(tmp_path):
    tmp_path.chmod(0o755)  # the sandbox user walks through it to its work folder
    return tmp_path


def run(scratch: Path, user, code: str, limits: Limits = SMALL, env: dict | None = None):
    work = prepare_workdir(scratch / f"work-{time.monotonic_ns()}", user)
    return run_sandboxed([sys.executable, "-c", code], work, limits, env, user), work


def test_a_plain_run_reports_its_output_and_exit_status(scratch, user):
    result, work = run(scratch, user, "import sys; print('hello'); sys.exit(3)")
    assert result.ok and result.returncode == 3 and result.output == "hello\n", result


def test_the_environment_is_built_from_nothing(scratch, user, monkeypatch):
    monkeypatch.setenv("https_proxy", "http://proxy.invalid:3128")
    monkeypatch.setenv("GRADER_SECRET", "s3cret")
    code = ("import os, sys; print(sorted(k for k in os.environ if 'proxy' in k.lower() or 'SECRET' in k));"
            "print(os.environ['HOME']); print(os.environ['TMPDIR']); print(os.environ['OMP_NUM_THREADS']);"
            "print(repr(sys.stdin.read()))")
    result, work = run(scratch, user, code, env={"EXTRA": "1"})
    lines = result.output.splitlines()
    assert lines == ["[]", str(work / "home"), str(work / "tmp"), "1", "''"], result.output


def test_past_the_wall_clock_limit_the_run_is_killed(scratch, user):
    start = time.monotonic()
    result, _ = run(scratch, user, "import time; time.sleep(120)", Limits(wall_s=1.5))
    assert "ran past its 1.5 s wall-clock limit" in result.reason and result.returncode is None
    assert time.monotonic() - start < 15


def test_past_the_cpu_limit_the_run_is_killed(scratch, user):
    result, _ = run(scratch, user, "while True: pass", Limits(wall_s=60, cpu_s=1))
    assert result.reason == "used more than its 1 s of CPU time", result


def test_an_allocation_past_the_memory_limit_is_a_memory_error(scratch, user):
    result, _ = run(scratch, user, "import numpy as np; a = np.ones(3 * 2**29, dtype=np.uint8); print(a.sum())")
    assert result.returncode == 1 and "MemoryError" in result.output, result.output[-2000:]


def test_printing_past_the_output_limit_stops_the_run(scratch, user):
    start = time.monotonic()
    result, _ = run(scratch, user, "import sys\nwhile True: sys.stdout.write('x' * 4096)")
    assert result.reason == "printed more than its 0.0625 MiB output limit" and len(result.output) == 64 * 1024
    assert time.monotonic() - start < 15


def test_a_file_past_the_size_limit_cannot_be_written(scratch, user):
    result, work = run(scratch, user, "open('big', 'wb').write(b'x' * (5 * 2**20))")
    assert "File too large" in result.output and (work / "big").stat().st_size <= 4 * MiB


def test_writing_past_the_disk_limit_stops_the_run(scratch, user):
    code = "import time\nfor i in range(7): open(f'f{i}', 'wb').write(b'x' * (3 * 2**20))\ntime.sleep(60)"
    result, _ = run(scratch, user, code)
    assert result.reason == "wrote more than its 16 MiB of files", result


def test_every_process_it_started_is_killed_and_counted(scratch, user):
    """Children, and a grandchild that left the process group (setsid after a double fork)."""
    code = """
import os, subprocess, sys, time
children = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']) for _ in range(3)]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
time.sleep(1)
print(' '.join(str(c.pid) for c in children), flush=True)
"""
    result, _ = run(scratch, user, code)
    pids = [int(p) for p in result.output.split()]
    assert result.reason.startswith("left ") and result.leftovers >= 4, result
    for pid in pids:
        assert not _alive(pid), f"process {pid} outlived the sandbox"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_crash_is_named(scratch, user):
    result, _ = run(scratch, user, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert result.reason == "crashed (SIGSEGV)" and result.returncode == -signal.SIGSEGV


@needs_own_user
def test_own_user_cannot_write_the_graders_files_or_signal_it(scratch, own_user):
    user = own_user
    instructor = scratch / "grading"
    instructor.mkdir()
    (instructor / "hidden.py").write_text("secret = 1\n")
    code = f"""
import os
print(os.getuid(), os.getgid(), os.getgroups())
for attempt in (lambda: open({str(instructor / 'hidden.py')!r}, 'a'), lambda: open({str(instructor / 'new.py')!r}, 'w'),
                lambda: os.kill(os.getppid(), 0)):
    try:
        attempt()
        print('allowed')
    except PermissionError:
        print('refused')
"""
    result, _ = run(scratch, user, code)
    assert result.output.split("\n")[:4] == [f"{user.uid} {user.gid} []", "refused", "refused", "refused"], result
    assert (instructor / "hidden.py").read_text() == "secret = 1\n" and not (instructor / "new.py").exists()


@needs_own_user
@pytest.mark.skipif(not _namespaces_work(), reason="no network and mount namespaces here: nothing to isolate")
def test_own_user_has_no_network_and_reaches_python_again(scratch, own_user):
    """No network namespace of the grader (a server it listens on is unreachable); Python can start Python."""
    user = own_user
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = f"""
import socket, subprocess, sys
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=3)
    print('reached')
except OSError:
    print('unreachable')
print(subprocess.run([sys.executable, '-c', 'import numpy, sys; print(sys.version)'], capture_output=True,
                     text=True).stdout.strip() == sys.version)
"""
    try:
        result, _ = run(scratch, user, code)
    finally:
        server.close()
    assert result.output.split() == ["unreachable", "True"], result
    assert any("no network" in line for line in describe_isolation(True))


@needs_own_user
def test_own_users_files_left_in_tmp_are_removed_and_named(scratch, own_user):
    user = own_user
    name = f"/tmp/tito-stray-{os.getpid()}-{time.monotonic_ns()}"
    result, _ = run(scratch, user, f"open({name!r}, 'w').write('x')")
    assert result.reason == f"wrote outside its work folder: {name} (removed)" and not os.path.exists(name)


@needs_own_user
def test_two_claims_never_share_a_user():
    """Two tito processes on one machine: each kills every process of its users when a run ends."""
    with SandboxUsers(2) as first, SandboxUsers(2) as second:
        uids = [u.uid for u in first.users + second.users]
        assert len(set(uids)) == 4
    with SandboxUsers(1) as again:
        assert again.users[0].uid == uids[0]  # released at the end of the claim


def test_cpu_time_can_still_be_measured_finely(scratch, user):
    """The CPU limit is read from /proc, not set with RLIMIT_CPU: with that set, Linux reads
    time.process_time() in 4 ms ticks, and every test that times CPU work would read 0."""
    code = """
import time
values, start = set(), time.process_time()
while time.process_time() - start < 0.05:
    values.add(time.process_time())
print(len(values))
"""
    result, _ = run(scratch, user, code)
    assert int(result.output) > 100, result.output


def test_stop_ends_every_run_at_once(scratch):
    """What Ctrl-C in `tito grade` does: runs in progress are killed now, not at their time limit."""
    import threading

    from tito.grading.sandbox import STOP

    timer = threading.Timer(1.0, STOP.set)
    timer.start()
    start = time.monotonic()
    try:
        result, _ = run(scratch, None, "import time; time.sleep(120)")
    finally:
        timer.cancel()
        STOP.clear()
    assert result.reason == "stopped: the grader was interrupted" and time.monotonic() - start < 15


GRADER_KILLED_OUTRIGHT = r"""
import sys, time
from pathlib import Path
from tito.grading.sandbox import SandboxUsers, prepare_workdir, run_sandboxed
scratch, own_user = Path(sys.argv[1]), sys.argv[2] == "own-user"
with SandboxUsers(1 if own_user else 0) as claimed:
    user = claimed.users[0] if own_user else None
    work = prepare_workdir(scratch / "work", user)
    code = "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(120)"
    run_sandboxed([sys.executable, "-c", code], work, user=user)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("who", ["grader", pytest.param("own-user", marks=needs_own_user)])
def test_a_grader_killed_outright_takes_the_command_with_it(scratch, who):
    """SIGKILL leaves tito no chance to clean up: the kernel's parent-death signal ends the command."""
    import subprocess

    course = str(Path(__file__).resolve().parents[2])
    grader = subprocess.Popen([sys.executable, "-c", GRADER_KILLED_OUTRIGHT, str(scratch), who],
                              env={**os.environ, "PYTHONPATH": course})
    pid_file = scratch / "work" / "pid"
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline and grader.poll() is None:
        time.sleep(0.05)
    assert pid_file.exists(), f"the sandboxed command never started (grader exit status {grader.poll()})"
    command_pid = int(pid_file.read_text())
    assert _alive(command_pid)
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 10
    while _alive(command_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(command_pid)
    if alive:
        os.kill(command_pid, signal.SIGKILL)
    assert not alive, "the sandboxed command outlived a grader killed with SIGKILL"


# ---------------------------------------------------------------------------- issue 29: counted, private, every writable place

needs_namespaces = pytest.mark.skipif(not (can_switch_user() and _namespaces_work()),
                                      reason="needs root, setpriv and mount namespaces (private temporary folders)")
SPINNERS = """
import os, time
for _ in range(30):  # 30 spinning children, each in a session of its own: not in the process group
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                pass
        os._exit(0)
    os.waitpid(middle, 0)  # the double fork: nobody waits for the spinner
time.sleep(120)
"""


@pytest.mark.parametrize("counting", ["control group", "per process"])
def test_cpu_of_children_in_their_own_sessions_counts_against_the_run(scratch, user, counting, monkeypatch):
    """Spinners that left the process group (setsid, double fork) and that nobody waits for: their CPU time
    is the run's (a control group, or each process as last seen), so the run stops at its CPU limit, not
    at its wall-clock limit while starving every other run on the machine."""
    import tito.grading.sandbox as sandbox

    if counting == "control group" and sandbox.ControlGroup.create(SMALL) is None:
        pytest.skip("no writable cgroup v2 here (not root, or cgroup v1 only)")
    if counting == "per process":
        monkeypatch.setattr(sandbox.ControlGroup, "create", classmethod(lambda cls, limits: None))
    start = time.monotonic()
    result, _ = run(scratch, user, SPINNERS, Limits(wall_s=60, cpu_s=3, processes=64))
    assert result.reason == "used more than its 3 s of CPU time", result
    assert time.monotonic() - start < 20 and result.cpu_seconds >= 3


@needs_namespaces
def test_every_place_the_sandbox_user_can_write_is_its_own(scratch, own_user):
    """`find / -writable` as the sandbox user, inside the sandbox: only its work folder and its private
    temporary folders (each an empty tmpfs of its own), nothing shared with the machine or other runs."""
    code = ("import subprocess; print(subprocess.run(['find', '/', '(', '-path', '/proc', '-o', '-path', '/sys', ')',"
            " '-prune', '-o', '-writable', '!', '-type', 'l', '!', '-type', 'c', '-print'], capture_output=True,"
            " text=True).stdout)")
    result, work = _run_private(scratch, own_user, code, Limits(wall_s=120, cpu_s=120, memory_bytes=GiB))
    writable = [p for p in result.output.splitlines() if p]
    private = [os.path.realpath(p) for p in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")]
    outside = [p for p in writable if not p.startswith(str(work)) and not any(
        p == f or p.startswith(f + "/") for f in private)]
    assert str(work) in writable and outside == [], outside


def _run_private(scratch: Path, user, code: str, limits: Limits = SMALL):
    """A run as `tito grade` starts one: every shared temporary folder private (visible=[])."""
    work = prepare_workdir(scratch / f"work-{time.monotonic_ns()}", user)
    return run_sandboxed([sys.executable, "-c", code], work, limits, None, user, visible=[]), work


@needs_namespaces
def test_dev_shm_is_a_private_tmpfs_of_limited_size(scratch, own_user):
    """128 MiB into /dev/shm with a 16 MiB limit: stopped at the limit (no space), nothing in the real one."""
    code = """
import errno, os
written = 0
try:
    with open('/dev/shm/fill', 'wb') as handle:
        for _ in range(32):
            handle.write(b'x' * (4 * 2**20)); handle.flush(); written += 4 * 2**20
except OSError as err:
    print(errno.errorcode[err.errno])
print(written)
"""
    limits = Limits(wall_s=60, cpu_s=30, memory_bytes=GiB, file_bytes=256 * MiB, tmp_bytes=16 * MiB)
    before = set(os.listdir("/dev/shm"))
    result, _ = _run_private(scratch, own_user, code, limits)
    lines = result.output.splitlines()
    assert lines[0] == "ENOSPC" and int(lines[1]) <= 16 * MiB, result
    assert set(os.listdir("/dev/shm")) == before


@pytest.mark.parametrize("private", [True, False], ids=["private", "shared"])
@needs_namespaces
def test_a_file_written_to_run_lock_never_reaches_it_or_is_removed_and_named(scratch, own_user, private,
                                                                            monkeypatch):
    """/run/lock (= /var/lock) is writable by every user. In the sandbox's namespace it is a private tmpfs
    (the file never reaches the machine's); where it stays shared (no namespaces), the file is removed
    and the reason names it."""
    import tito.grading.sandbox as sandbox

    if not private:
        monkeypatch.setattr(sandbox, "shared_tmp_folders", lambda: [])
    name = f"tito-stray-{os.getpid()}-{time.monotonic_ns()}"
    code = f"open('/var/lock/{name}', 'w').write('x'); print('written')"
    result, _ = _run_private(scratch, own_user, code)
    assert result.output == "written\n" and not os.path.exists(f"/run/lock/{name}")
    if private:
        assert result.ok, result
    else:
        assert result.reason == f"wrote outside its work folder: /run/lock/{name} (removed)", result


@needs_own_user
def test_a_setuid_program_does_not_raise_the_sandbox_users_rights(scratch, own_user):
    """A setuid-root program within reach (a leftover copy of Python, as `su` or `passwd` are on every
    machine) runs with the sandbox user's rights only: no new privileges."""
    import shutil

    user = own_user
    work = prepare_workdir(scratch / f"work-{time.monotonic_ns()}", user)
    setuid = work / "python-setuid"
    shutil.copy2(os.path.realpath(sys.executable), setuid)
    os.chown(setuid, 0, 0)
    setuid.chmod(0o4755)
    code = f"import subprocess; print(subprocess.run(['./{setuid.name}', '-c', 'import os; print(os.geteuid())'],"\
           " capture_output=True, text=True).stdout.strip())"
    result = run_sandboxed([sys.executable, "-c", code], work, SMALL, None, user)
    assert result.output.strip() == str(user.uid), result.output


def test_no_file_descriptor_of_the_grader_is_inherited(scratch, user, tmp_path):
    """The grader holds files open (the uid locks, reports): none reaches the command; fds 3-1023 are closed."""
    secret = tmp_path / "held-open"
    secret.write_text("grader's")
    held = os.open(secret, os.O_RDONLY)
    code = """
import os
found = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    found.append((fd, os.readlink(f'/proc/self/fd/{fd}')))
print(found)
"""
    try:
        result, _ = run(scratch, user, code)
    finally:
        os.close(held)
    assert result.output.strip() == "[]", result.output
