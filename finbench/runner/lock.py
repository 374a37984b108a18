"""One writer per folder: a run folder (or a sweep's, or FINBENCH_HOME while the demo builds) is
written by one process at a time.

The lock is an OS file lock (`filelock`: flock on POSIX) on `.finbench.lock` in the folder, so a
process killed with -9 leaves no lock behind — the kernel drops it with the process. Beside it,
`.finbench.owner` says who holds it (pid, start time, command) so that a refused process can name
the first; an owner file found by whoever takes the lock next was left by a process that ended
without releasing it (killed), and is reported as a stale lock taken over.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Iterator

import filelock

LOCK_FILE = ".finbench.lock"
OWNER_FILE = ".finbench.owner"


class FolderBusy(ValueError):
    """Another live process holds the folder's lock: one line naming it."""


def _owner(folder: Path) -> dict | None:
    try:
        return json.loads((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None


def describe(owner: dict | None) -> str:
    """'pid 123, started 2026-12-02 09:44:18 UTC' (or what is known of it)."""
    if not owner:
        return "another finbench process"
    started = datetime.datetime.fromtimestamp(owner.get("started", 0), datetime.timezone.utc)
    return f"pid {owner.get('pid', '?')}, started {started:%Y-%m-%d %H:%M:%S} UTC"


@contextlib.contextmanager
def folder_lock(folder: Path, what: str = "--out", wait: bool = False) -> Iterator[str]:
    """Hold `folder`'s lock for the block; yields a note when a stale lock was taken over ("" if not).
    `wait`: block until the holder is done (a shared build), else refuse at once with `FolderBusy`.
    A folder this call created and that holds nothing but the lock afterwards is removed, so a run
    refused at start-up writes nothing. Under a launcher (torchrun, accelerate) rank 0 alone takes
    it: the other ranks write only their own run.rankN.log beside it."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and os.environ.get("RANK", "0") != "0":
        yield ""
        return
    folder = Path(folder)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{what} {folder}: cannot write there ({err.strerror or err})") from None
    # one lock object per path in this process (is_singleton): taken again by the same thread it
    # counts up (evaluate() and then run_benchmark() hold the same folder); another thread is refused
    lock = filelock.FileLock(folder / LOCK_FILE, is_singleton=True)  # (a singleton's arguments never differ)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except filelock.Timeout:
        raise FolderBusy(f"{what} {folder} is in use by another finbench run ({describe(_owner(folder))}): wait for "
                         f"it to finish, or choose another {what}") from None
    if lock.lock_counter > 1:  # held further out in this thread: the outer block wrote and cleans up
        try:
            yield (_owner(folder) or {}).get("took_over", "")
        finally:
            lock.release()
        return
    stale = _owner(folder)
    note = ""
    if stale and stale.get("pid") != os.getpid():
        note = (f"{what} {folder}: took over the lock of a run that ended without releasing it "
                f"({describe(stale)}, killed?)")
    try:
        (folder / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "started": time.time(),
                                                     "command": shlex.join(sys.argv), "took_over": note}))
        yield note
    finally:
        (folder / OWNER_FILE).unlink(missing_ok=True)
        lock.release()
        if created and folder.is_dir() and {p.name for p in folder.iterdir()} <= {LOCK_FILE}:
            (folder / LOCK_FILE).unlink(missing_ok=True)
            folder.rmdir()
