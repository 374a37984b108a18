"""The seccomp filters of a jail's two processes, compiled to classic BPF by libseccomp (through
`pyseccomp`, a ctypes binding) in finbench and loaded by the jail's start (sandbox/child.py)
before the program's first line: "program" for the process that runs the program, "supervisor"
for the one that starts it, times it and writes its result.

Both answer EPERM to the calls below — each a way out of the jail, a way to act on another
process, or a way to hold a host-wide kernel resource that no per-process limit bounds, whatever
namespaces the machine gives: sockets; signals (kill, tkill, tgkill, rt_*sigqueueinfo, pidfd_*);
reading or writing other processes (ptrace, process_vm_*, process_madvise, kcmp, NUMA page moves);
new processes and threads (clone, clone3, fork, vfork) and new programs (execve, execveat);
sessions and process groups; namespaces and mounts (mount info included); System V IPC, every
call of it (get, ctl, send, receive, attach) and POSIX message queues; device nodes and fifos;
a file's metadata (chmod, chown, utime, extended attributes, file_setattr: Landlock does not guard
them); the clock; limits and priorities (setrlimit, prlimit64 on another process or with a new
limit, setpriority, sched_set*, ioprio_set); capabilities and ids; legacy AIO (the host's
`aio-max-nr`), inotify and fanotify (per-user instance counts), POSIX timers (the user's pending
signals), file locks and leases (no limit at all: RLIMIT_LOCKS is not enforced), pipes grown past
their default (the user's pipe pages), secret memory; prctl's parent-death signal, dumpable flag,
subreaper, ptracer and mm fields; `sync` (every host file system); and the kernel's larger
surfaces (bpf, keyctl, perf_event_open, userfaultfd, io_uring, modules, kexec, reboot, swap,
chroot, quotas, file handles).

The list is a deny-list over a reviewed table: calls newer than libseccomp 2.5 knows are named by
number (shared by every architecture since Linux 5.1), and every number above the last reviewed
one (`REVIEWED_UP_TO`) is refused, so a call a newer kernel adds is closed until someone reads it.
Another architecture's calls (i386, x32) kill the process (libseccomp's bad-architecture action).

The supervisor's filter differs in two calls only: it may send SIGKILL (to end its program) and
open a pidfd (to see it exit). It forks its program before loading its filter, and neither
process runs a line of the program before both filters are loaded.
"""

from __future__ import annotations

import errno
import signal
import tempfile

DENIED = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "process_mrelease", "kcmp",
    "migrate_pages", "move_pages", "mbind", "set_mempolicy", "set_mempolicy_home_node",
    "clone", "clone3", "fork", "vfork", "execve", "execveat", "setsid", "setpgid",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
    "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "mknod", "mknodat",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
    "utimensat", "futimesat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "setrlimit", "setpriority", "sched_setscheduler", "sched_setparam", "sched_setattr", "sched_setaffinity",
    "ioprio_set",
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
    "timer_create", "flock", "memfd_secret", "sync", "name_to_handle_at", "open_by_handle_at",
    "bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "personality",
    "ioperm", "iopl", "vhangup", "lookup_dcookie", "uselib",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    "capset",
)
# calls libseccomp 2.5 cannot name, by their number (the same on every architecture since Linux 5.1)
DENIED_BY_NUMBER = {457: "statmount", 458: "listmount", 460: "lsm_set_self_attr", 463: "setxattrat",
                    466: "removexattrat", 467: "open_tree_attr", 469: "file_setattr"}
REVIEWED_UP_TO = 469  # Linux 6.18's last call; every later number is refused until reviewed
LAST_NUMBER = 511  # x86_64's x32 calls start at 512 (another architecture: killed)
# prctl options: PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_MM, PR_SET_CHILD_SUBREAPER, PR_SET_PTRACER
PRCTL_DENIED = (1, 4, 35, 36, 0x59616D61)
# fcntl commands: F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_NOTIFY, F_SETPIPE_SZ
FCNTL_DENIED = (6, 7, 37, 38, 1024, 1026, 1031)
SUPERVISOR_ALLOWED = ("kill", "pidfd_open")  # SIGKILL only (below): the supervisor ends and watches its program
ROLES = ("program", "supervisor")


def compile_filter(role: str = "program") -> bytes:
    """The filter of `role` as bytes of `struct sock_filter`; raises OSError (or ImportError
    without libseccomp) when it cannot be built — the caller then has no kernel jail."""
    import pyseccomp

    if role not in ROLES:
        raise ValueError(f"unknown filter role {role!r}")
    denied = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    refuse = pyseccomp.ERRNO(errno.EPERM)
    allowed = SUPERVISOR_ALLOWED if role == "supervisor" else ()
    for name in [n for n in DENIED if n not in allowed]:
        try:
            denied.add_rule(refuse, name)
        except (OSError, ValueError):  # not a call of this architecture (libseccomp knows its table)
            continue
    for number in [*DENIED_BY_NUMBER, *range(REVIEWED_UP_TO + 1, LAST_NUMBER + 1)]:
        denied.add_rule(refuse, number)
    if role == "supervisor":
        denied.add_rule(refuse, "kill", pyseccomp.Arg(1, pyseccomp.NE, signal.SIGKILL))
    for option in PRCTL_DENIED:
        denied.add_rule(refuse, "prctl", pyseccomp.Arg(0, pyseccomp.EQ, option))
    for command in FCNTL_DENIED:
        denied.add_rule(refuse, "fcntl", pyseccomp.Arg(1, pyseccomp.EQ, command))
    # prlimit64 only reads or lowers its own limits: pid 0 is the caller, any other pid is refused;
    # a new limit (argument 2 set) is refused too, as setrlimit: the start lowered every limit already
    denied.add_rule(refuse, "prlimit64", pyseccomp.Arg(0, pyseccomp.NE, 0))
    denied.add_rule(refuse, "prlimit64", pyseccomp.Arg(2, pyseccomp.NE, 0))
    with tempfile.TemporaryFile() as file:
        denied.export_bpf(file)
        file.seek(0)
        return file.read()
