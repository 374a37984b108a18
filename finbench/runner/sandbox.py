"""A sandbox for model-written programs (FinMMR's program of thought): never `exec` in finbench.

`run_programs(programs, limits)` runs each program as the official `eval_pot` does — `exec` with
`print` replaced by a function that prints nothing, then `solution()` — but in a child process of
a small server started for the batch (`python -I -B sandbox.py`, an empty environment), which
forks one child per program, `limits.workers` at a time (a pool across cores: a fork of the
warm server costs milliseconds, so 1,300 programs take seconds). Each child, before the program:
- starts its own session (process group), which the server kills with SIGKILL when the child
  ends, fails or runs out of time, so no process is left behind;
- points stdin/stdout/stderr at /dev/null (a flood goes nowhere) and closes every other inherited
  descriptor but its result pipe;
- works in a fresh empty folder the program cannot write to, removed afterwards;
- as root: leaves the network (a new network namespace, best effort through `unshare`), then
  drops to `nobody` (no supplementary groups), so it can neither signal nor read the processes
  and files of finbench;
- limits: wall clock (`wall_seconds`, the official 10 s), CPU (`cpu_seconds`), address space
  (`memory_bytes` above what the server already maps), no new processes or threads
  (RLIMIT_NPROC 0), no file data written (RLIMIT_FSIZE 0), no core files;
- clears its environment, and installs an audit hook (PEP 578) refusing, inside Python, opening
  files for writing, removing/renaming/creating files and folders, sockets, subprocesses, forks,
  exec, signals to other processes, ctypes and reading other processes under /proc.
A program that fails in any way (an exception, `sys.exit`, a signal, the time or memory limit)
is an `Outcome` with `ok` False and its reason: the official failed program (acc 0, execution
rate 0), never an error of the run.

What it does not stop (README "FinMMR"): without root there is no user switch and no network
namespace, so the audit hook is the only fence against sockets and signals to the same user's
processes, and an audit hook can be bypassed by native code reached without ctypes (a C
extension already imported that calls into libc); reading files the user may read (outside
/proc) is allowed, as imports need it; CPU time of the pool is bounded per program, not overall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from signal import SIGXCPU
from typing import Sequence

PRELOAD = ("math", "cmath", "decimal", "fractions", "statistics", "datetime", "random", "itertools", "functools",
           "collections", "operator", "json", "re", "string", "numpy")
RESULT_LIMIT = 100_000  # bytes of one child's result read back (a longer one is cut: ok False)


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0  # the official timeout_duration (evaluate-config.yaml)
    cpu_seconds: int = 10
    memory_bytes: int = 2 << 30  # address space a program may add to the server's own
    workers: int = 0  # programs at once (0: one per CPU core)
    result_chars: int = 10_000  # a result's text is cut here
    # imported by the server before it forks: instant for the programs, and, as root, the only
    # modules they can import when the Python installation is not readable by `nobody`
    preload: tuple[str, ...] = PRELOAD


@dataclass(frozen=True)
class Outcome:
    """`kind` is the result's type (int, float, bool, none, str, seq, other); `value` its text
    (`str(result)`, the official `executed_result`; for seq, the first element's text and
    `first_kind` its type); `reason` why the program failed."""

    ok: bool
    kind: str = ""
    value: str = ""
    first_kind: str = ""
    reason: str = ""


def run_programs(programs: Sequence[str], limits: Limits = Limits()) -> list[Outcome]:
    """Each program's outcome, in order. A server that dies (it cannot be killed by a program
    running as `nobody`) fails the programs it had not finished, with that reason."""
    if not programs:
        return []
    workers = limits.workers or os.cpu_count() or 1
    budget = (len(programs) / workers + 2) * (limits.wall_seconds + 1) + 30
    settings = {**asdict(limits), "workers": workers, "preload": list(limits.preload)}
    payload = json.dumps({"limits": settings, "programs": list(programs)})
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
    found: dict[int, Outcome] = {}
    try:
        done = subprocess.run([sys.executable, "-I", "-B", str(Path(__file__).resolve())], input=payload.encode(),
                              capture_output=True, env=env, timeout=budget, cwd="/")
        failure = f"sandbox server exited with {done.returncode}" if done.returncode else ""
        for line in done.stdout.decode("utf-8", "replace").splitlines():
            record = json.loads(line)
            index = record.pop("index")
            found[index] = Outcome(**record)
    except subprocess.TimeoutExpired:
        failure = f"sandbox server ran past {budget:.0f} s"
    except (OSError, ValueError, TypeError) as err:
        failure = f"sandbox server failed: {type(err).__name__}: {err}"
    return [found.get(i) or Outcome(ok=False, reason=failure or "no result") for i in range(len(programs))]


# ---- the server (run as a script: standard library only, nothing of finbench) --------------------
BLOCKED_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                  "os.symlink", "os.truncate", "os.utime", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                  "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.chdir", "os.setuid", "signal.pthread_kill",
                  "subprocess.Popen", "shutil.", "socket.", "ctypes.", "resource.setrlimit", "pty.", "mmap.")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args: tuple) -> None:
    """Refuses, inside Python, what a numerical program never needs (the OS limits back it)."""
    if event.startswith(BLOCKED_EVENTS):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
        if writes:
            raise PermissionError("sandbox: writing files is not allowed")
        text = os.fsdecode(path) if isinstance(path, (str, bytes)) else ""
        if text.startswith("/proc/") and not text.startswith(("/proc/self/", "/proc/thread-self/")):
            raise PermissionError("sandbox: other processes are not readable")


def _encode(value: object, limit: int) -> tuple[str, str]:
    """(kind, text) of a result as get_acc would see it (numbers exactly; bool before int)."""
    import numbers

    if value is None:
        return "none", "None"
    if isinstance(value, bool):
        return "bool", str(value)
    if isinstance(value, numbers.Integral):
        number = int(value)  # beyond ~4,000 digits in hex: finbench reads it without the str-conversion limit
        return "int", str(number) if number.bit_length() < 13_000 else hex(number)
    if isinstance(value, numbers.Real) or type(value).__name__ == "Decimal":  # Decimal compares with floats too
        return "float", repr(float(value))
    if isinstance(value, str):
        return "str", value[:limit]
    shape = getattr(value, "shape", None)  # a numpy array: one element compares as a number, more raise
    if shape is not None and getattr(value, "size", 0) == 1:
        return _encode(value.reshape(-1)[0].item(), limit)
    return "other", str(value)[:limit]


def _child(code: str, write_fd: int, folder: str, settings: dict) -> None:
    import resource

    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, write_fd)
    os.closerange(write_fd + 1, 1 << 16)
    os.chdir(folder)
    with open("/proc/self/statm") as statm:  # before the user switch, which makes /proc/self root's
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0:
        libc.unshare(0x40000000)  # CLONE_NEWNET, best effort (refused without CAP_SYS_ADMIN): the hook refuses sockets
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)  # nobody
    libc.prctl(1, 9)  # PR_SET_PDEATHSIG SIGKILL (after the switch, which clears it): dies with the server
    cpu = max(1, int(settings["cpu_seconds"]))
    for limit, value in ((resource.RLIMIT_AS, mapped + int(settings["memory_bytes"])), (resource.RLIMIT_CPU, cpu),
                         (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_FSIZE, 0), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value + 1 if limit == resource.RLIMIT_CPU else value))
    os.environ.clear()
    sys.set_int_max_str_digits(0)
    sys.addaudithook(_audit)
    answer: dict = {"ok": False}
    try:
        namespace: dict = {"print": lambda *args, **kwargs: None}  # the official empty_print
        exec(code, namespace)  # noqa: S102 — inside the sandbox, never in finbench
        value = namespace["solution"]()
        kind, text = _encode(value, settings["result_chars"])
        answer = {"ok": True, "kind": kind, "value": text}
        if isinstance(value, (list, tuple)):
            answer["kind"] = "seq"
            answer["first_kind"], answer["value"] = _encode(value[0], settings["result_chars"]) if value else ("", "")
    except BaseException as err:  # noqa: BLE001 — sys.exit and KeyboardInterrupt are the program's failures too
        answer = {"ok": False, "reason": f"{type(err).__name__}: {str(err)[:300]}"}
    data = json.dumps(answer).encode()
    os.write(write_fd, data[:RESULT_LIMIT])
    os._exit(0)


def _serve() -> None:
    import select
    import shutil
    import tempfile
    import time

    job = json.loads(sys.stdin.buffer.read())
    settings, programs = job["limits"], job["programs"]
    for name in settings["preload"]:
        try:  # imported once here: a program's own import is then instant
            __import__(name)
        except ImportError:
            pass
    pending = list(range(len(programs)))[::-1]
    running: dict[int, tuple[int, int, float, str, bytearray]] = {}  # read fd → (index, pid, deadline, dir, data)
    out = sys.stdout

    def finish(fd: int, reason: str = "") -> None:
        index, pid, _, folder, data = running.pop(fd)
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, 9)
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            answer = json.loads(bytes(data)) if data and not reason else {}
        except ValueError:
            answer = {}
        if not isinstance(answer, dict) or not answer:
            signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            answer = {"ok": False, "reason": reason or (
                f"timed out: CPU limit of {settings['cpu_seconds']:g} s (signal {signal})" if signal == SIGXCPU else
                f"killed by signal {signal} (a crash, or the memory limit)" if signal not in (0, 9) else
                "no result (the program ended its process)")}
        fields = {k: str(answer.get(k, "")) for k in ("kind", "value", "first_kind", "reason")}
        out.write(json.dumps({"index": index, "ok": answer.get("ok") is True, **fields}) + "\n")

    while pending or running:
        while pending and len(running) < settings["workers"]:
            index = pending.pop()
            folder = tempfile.mkdtemp(prefix="finbench-sandbox-")
            os.chmod(folder, 0o555)  # empty, and not writable by the program
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                try:
                    _child(programs[index], write_fd, folder, settings)
                finally:
                    os._exit(1)
            os.close(write_fd)
            running[read_fd] = (index, pid, time.monotonic() + settings["wall_seconds"], folder, bytearray())
        wait = max(0.0, min(r[2] for r in running.values()) - time.monotonic())
        ready, _, _ = select.select(list(running), [], [], wait)
        for fd in ready:
            chunk = os.read(fd, 65536)
            data = running[fd][4]
            if chunk and len(data) < RESULT_LIMIT:
                data.extend(chunk)
            elif not chunk:
                finish(fd)
        now = time.monotonic()
        for fd in [fd for fd, r in running.items() if r[2] <= now]:
            finish(fd, f"timed out after {settings['wall_seconds']:g} s")
    out.flush()


if __name__ == "__main__":
    _serve()
