"""The seccomp filter every jailed program runs under, compiled to classic BPF by libseccomp
(through `pyseccomp`, a ctypes binding) in finbench and loaded by the jail's own start
(sandbox/child.py) before the program's first line.

The filter allows what an interpreter computing numbers needs and answers EPERM to the calls
below — each a way out of the jail or a way to act on another process, whatever namespaces the
machine gives: sockets; signals to anything (kill, tkill, tgkill, rt_*sigqueueinfo, pidfd_*);
reading or writing other processes (ptrace, process_vm_*, process_madvise, kcmp); new processes
and threads (clone, clone3, fork, vfork) and new programs (execve, execveat: the interpreter is
already running when the filter loads); namespaces and mounts; System V IPC; device nodes and
fifos (mknod); extended attributes; limits and priorities (setrlimit, prlimit64 on another
process, setpriority, sched_set*, ioprio_set); and the kernel's larger surfaces (bpf, keyctl,
perf_event_open, userfaultfd, io_uring, kernel modules, kexec, reboot, swap, chroot). Another
architecture's calls (i386, x32) kill the process (libseccomp's bad-architecture action).
"""

from __future__ import annotations

import errno
import tempfile

DENIED = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "clone", "clone3", "fork", "vfork", "execve", "execveat",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "shmget", "shmat", "msgget", "msgsnd", "semget", "semop", "semtimedop",
    "mknod", "mknodat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "setrlimit", "setpriority", "sched_setscheduler", "sched_setparam", "sched_setattr", "sched_setaffinity",
    "ioprio_set",
    "bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "personality",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
)


def compile_filter() -> bytes:
    """The filter as bytes of `struct sock_filter`; raises OSError (or ImportError without
    libseccomp) when it cannot be built — the caller then has no kernel jail."""
    import pyseccomp

    denied = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    refuse = pyseccomp.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            denied.add_rule(refuse, name)
        except (OSError, ValueError):  # a call this kernel's table does not know: nothing to refuse
            continue
    # prlimit64 only reads or lowers its own limits: pid 0 is the caller, any other pid is refused;
    # a new limit (argument 2 set) is refused too, as setrlimit: the start lowered every limit already
    denied.add_rule(refuse, "prlimit64", pyseccomp.Arg(0, pyseccomp.NE, 0))
    denied.add_rule(refuse, "prlimit64", pyseccomp.Arg(2, pyseccomp.NE, 0))
    with tempfile.TemporaryFile() as file:
        denied.export_bpf(file)
        file.seek(0)
        return file.read()
