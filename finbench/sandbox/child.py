"""The start of every jailed interpreter (`python -I -S -c <this file's text>`): standard library
only, nothing of finbench, never imported by finbench itself.

Two processes, both limited and filtered before any line of the program runs:
- the *supervisor* (this interpreter; under bubblewrap the jail's PID 1, so the kernel ends every
  process of the jail when it ends) reads one job from stdin (finbench's own `marshal` of
  {"settings", "filter", "supervisor_filter", "landlock", "mode", "program"}; the standard `json`
  module would import `re`), keeps the result pipe (stdout) on a private descriptor and points 0,
  1 and 2 at /dev/null; in the jail, mounts the private /tmp, bounded in bytes and in inodes, and
  drops every capability (bwrap lends CAP_SYS_ADMIN and CAP_SETPCAP in the jail's own user
  namespace for that mount only); refuses to go on holding any capability, or as root under
  Landlock; makes itself undumpable (no process reads or writes its memory or descriptors through
  /proc); lowers every resource limit (soft = hard); imports the genuine Decimal and Fraction;
  confines itself with Landlock (mode "landlock"); forks the program's process, loads its own
  seccomp filter and only then lets the program start;
- the *program's process* asks for SIGKILL when the supervisor dies, keeps only its record pipe
  (descriptor 3), lowers RLIMIT_NPROC to 0, enters a Landlock domain of its own nested in the
  supervisor's (Landlock then keeps it from tracing or signalling the supervisor), loads the
  program's seccomp filter (no_new_privs first), waits for the supervisor's go, adds an audit hook
  that only words the reason of what the kernel refuses anyway, and runs the program as the
  official `eval_pot` does — `exec` with `print` replaced by a function that prints nothing, then
  `solution()` — and writes one JSON line: {"ok", "kind", "value", "first_kind", "reason"}.

The supervisor times the program from its go — `wall_seconds`, the official 10 s, excludes the
jail's own start — reads its record pipe (at most `result_bytes`) and waits for it to exit; it kills
it on a timeout or a flood. Then it writes the one line finbench reads, {"status", "reason",
"record"}: "returned" with the program's last line only when its process ended by itself with
status 0 — a line the program wrote before hanging is never taken. The program cannot reach that
descriptor: its own copy is closed before its first line, and the supervisor is undumpable and
outside the program's Landlock domain.

A value is read only when its exact type is one a number rule knows (int, float, bool, None, a
string ≤ `result_chars`, the genuine Decimal and Fraction, numpy's own integer, floating and bool
scalars told by their static C types — not a timedelta64 — a one-element numeric array, a list or
tuple by its first element); any other object is kind "other" without calling its methods, so an
object that pretends to be the gold scores 0, as the official comparison rejects it.
"""

import marshal
import os
import sys

RECORD_FD = 3  # the program's process writes its result line here
HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by Python code (numpy's scalar types are static C types)
GENUINE = {}  # the standard library's Decimal and Fraction, imported before the program
SIGKILL, SIGXCPU = 9, 24
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 24, 38, 22


def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _limits(settings):
    """Lowers every resource limit (soft = hard: none can be raised again) but RLIMIT_NPROC,
    which goes to 0 once the supervisor has forked (`_nproc_zero`)."""
    import resource

    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cpu = max(1, int(settings["cpu_seconds"]))
    for name, value in (("RLIMIT_AS", mapped + int(settings["memory_bytes"])), ("RLIMIT_CPU", cpu),
                        ("RLIMIT_FSIZE", int(settings["file_bytes"])), ("RLIMIT_CORE", 0),
                        ("RLIMIT_NOFILE", int(settings["open_files"])), ("RLIMIT_MEMLOCK", 0),
                        ("RLIMIT_MSGQUEUE", 0), ("RLIMIT_LOCKS", 0), ("RLIMIT_STACK", 8 << 20)):
        limit = getattr(resource, name, None)
        if limit is None:
            continue
        ceiling = resource.getrlimit(limit)[1]  # a limit already lower stays as it is
        hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU at the soft limit, SIGKILL one second on
        if ceiling != resource.RLIM_INFINITY:
            value, hard = min(value, ceiling), min(hard, ceiling)
        resource.setrlimit(limit, (value, hard))


def _private_tmp(settings):
    """Mounts the jail's /tmp and makes it the working folder: a tmpfs bounded in bytes and in
    inodes (bwrap's --tmpfs bounds bytes only, and a mkdir loop would pin the host's kernel memory)."""
    ctypes, libc = _libc()
    options = f"size={int(settings['tmp_bytes'])},nr_inodes={int(settings['tmp_inodes'])},mode=0700".encode()
    if libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) != 0:
        raise OSError(ctypes.get_errno(), "the jail's /tmp could not be mounted")
    os.chdir("/tmp")


def _drop_capabilities():
    """Empties the bounding set (while CAP_SETPCAP is held), then every other set (capset to
    nothing clears the ambient set too)."""
    import struct

    ctypes, libc = _libc()
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for cap in range(int(last.read()) + 1):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0))  # _LINUX_CAPABILITY_VERSION_3, self
    if libc.capset(header, ctypes.create_string_buffer(24)) != 0:  # two zeroed __user_cap_data_struct
        raise OSError(ctypes.get_errno(), "capabilities not dropped")


def _unprivileged(mode):
    """Raises unless this process holds no capability in any set (and, under Landlock, is not
    root: it shares the host's namespaces there)."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    sets = ("CapInh", "CapPrm", "CapEff", "CapAmb") + (("CapBnd",) if mode == "jail" else ())  # the jail emptied all
    held = [k for k in sets if int(fields.get(k, "0"), 16)]
    if mode == "landlock" and (0 in os.getresuid() or held):
        raise PermissionError("Landlock mode refuses to run a program as root or with a capability")
    if mode == "jail" and held:
        raise PermissionError(f"the jail still holds capabilities ({', '.join(held)})")


def _landlock(rules):
    """Confines this process with Landlock: `rules` ([path, access bits]) are all it may read or
    run; nothing may be written or created anywhere; with ABI 4+ no TCP, with 6+ no signal or
    abstract socket outside the domain. Raises OSError where the kernel has no Landlock."""
    import struct

    ctypes, libc = _libc()
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not available")
    handled = (1 << 13) - 1 | (abi >= 2) << 13 | (abi >= 3) << 14 | (abi >= 5) << 15  # every file right it knows
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # fs rights; + net (TCP bind/connect); + scopes (signal, socket)
    attr = struct.pack("QQQ", handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)[:size]
    ruleset = libc.syscall(444, ctypes.create_string_buffer(attr, len(attr)), len(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "Landlock ruleset refused")
    for path, access in rules:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr (packed)
        if libc.syscall(445, ruleset, 1, ctypes.create_string_buffer(rule, len(rule)), 0) != 0:
            raise OSError(ctypes.get_errno(), f"Landlock rule for {path} refused")
        os.close(fd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(446, ruleset, 0) != 0:  # restrict_self
        raise OSError(ctypes.get_errno(), "Landlock refused")
    os.close(ruleset)


def _seccomp(program):
    """Loads a classic BPF program (bytes of struct sock_filter) for this process; raises
    OSError when the kernel refuses it. Nothing to load (b"") only in mode "unsafe"."""
    if not program:
        return
    ctypes, libc = _libc()

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(code, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs refused")
    if libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


WORDED = ("os.kill", "os.killpg", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
          "subprocess.Popen", "socket.", "signal.pthread_kill", "os.mknod", "os.mkfifo", "pty.")


def _audit(event, args):
    """Words a refusal the seccomp filter makes anyway (the kernel is the boundary, not this)."""
    if event.startswith(WORDED):
        raise PermissionError(f"sandbox: {event} is not allowed")


def _exact(value, types):
    return any(type(value) is t for t in types if t is not None)


def _numpy_kind(value):
    """"int", "float", "bool", "array" or "" for numpy's own scalar and array types, told by the
    class itself — a static C type of module numpy, which no Python code can make — never by the
    numpy in sys.modules, which the program may have replaced. A timedelta64 (an integer to numpy)
    is none of them: the official comparison with a float raises."""
    cls = type(value)
    if cls.__flags__ & HEAPTYPE or cls.__module__ != "numpy":
        return ""
    names = {c.__name__ for c in cls.__mro__ if c.__module__ == "numpy"}
    if cls.__name__ == "ndarray":
        return "array"
    if names & {"bool", "bool_"}:
        return "bool"
    if "integer" in names and cls.__name__ != "timedelta64":
        return "int"
    return "float" if "floating" in names else ""


def _encode(value, limit):
    """(kind, text) of a result by its exact type; nothing of an unknown object is called."""
    numpy = _numpy_kind(value)
    if value is None:
        return "none", "None"
    if _exact(value, (bool,)) or numpy == "bool":
        return "bool", str(bool(value))
    if _exact(value, (int,)) or numpy == "int":
        number = int(value)  # beyond ~4,000 digits in hex: finbench reads it without the str-conversion limit
        return "int", str(number) if number.bit_length() < 13_000 else hex(number)
    if _exact(value, (float, GENUINE.get("Decimal"), GENUINE.get("Fraction"))) or numpy == "float":
        return "float", repr(float(value))
    if _exact(value, (str,)):
        return ("str", value) if len(value) <= limit else ("other", "")
    if numpy == "array" and value.size == 1 and value.dtype.kind in "biuf":
        return _encode(value.reshape(-1)[0], limit)
    return "other", ""


def _run(job):
    namespace = {"print": lambda *args, **kwargs: None}  # the official empty_print
    exec(job["program"], namespace)  # noqa: S102 — inside the jail, never in finbench
    value = namespace["solution"]()
    limit = job["settings"]["result_chars"]
    if _exact(value, (list, tuple)):
        first_kind, text = _encode(value[0], limit) if value else ("", "")
        return {"ok": True, "kind": "seq", "value": text, "first_kind": first_kind}
    kind, text = _encode(value, limit)
    return {"ok": True, "kind": kind, "value": text}


def _error(err):
    """The official `str(e)` of a failure, bounded; an exception whose text itself fails is named."""
    try:
        return f"{type(err).__name__}: {str(err)[:300]}"
    except BaseException:  # noqa: BLE001 — its __str__ is the program's too
        return f"{type(err).__name__} (its message could not be read)"


def _json(answer):
    """A flat dict of str and bool as one JSON line (`_json`, the C half of `json`, without `re`);
    ASCII only: a lone surrogate is written as its \\u escape."""
    from _json import encode_basestring_ascii as quoted

    items = (f"{quoted(k)}: {'true' if v is True else 'false' if v is False else quoted(str(v))}"
             for k, v in answer.items())
    return "{" + ", ".join(items) + "}"


def _program_start(job, record, go, supervisor):
    """Everything the program's process does before the program (`record`: its result pipe,
    moved to RECORD_FD; `go`: the supervisor's signal that its own filter is loaded)."""
    ctypes, libc = _libc()
    if libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 or os.getppid() != supervisor:
        os._exit(1)  # the supervisor is already gone
    if record != RECORD_FD:
        os.dup2(record, RECORD_FD)
        os.close(record)
    os.closerange(RECORD_FD + 1, go)
    os.closerange(go + 1, 1 << 16)
    _nproc_zero()  # every other limit is the supervisor's, inherited
    if job["landlock"]:
        _landlock(job["landlock"])
    _seccomp(bytes.fromhex(job["filter"]))
    if os.read(go, 1) != b"g":
        os._exit(1)  # the supervisor did not seal itself
    os.close(go)
    sys.addaudithook(_audit)


def _nproc_zero():
    """No process may start another (the supervisor's one fork is done)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def _program(job, record, go, supervisor):
    """The program's process, from the fork to its exit: it never returns."""
    try:
        _program_start(job, record, go, supervisor)
    except BaseException as err:  # noqa: BLE001 — the program never runs without its limits and filter
        answer = {"ok": False, "reason": f"the jail's start failed: {err}"}
    else:
        try:
            answer = _run(job)
        except BaseException as err:  # noqa: BLE001 — sys.exit and KeyboardInterrupt are the program's failures too
            answer = {"ok": False, "reason": _error(err)}
    os.write(RECORD_FD, ("\n" + _json(answer) + "\n").encode())
    os._exit(0)


def _supervisor_start(job, out):
    """Everything the supervisor does before it forks (`out`: the result descriptor, kept)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, out)
    os.closerange(out + 1, 1 << 16)
    if job["mode"] != "unsafe" and not (job["filter"] and job["supervisor_filter"]):
        raise ValueError("no seccomp filter")  # only --unsafe-sandbox runs without one
    if job["mode"] == "jail":
        _private_tmp(job["settings"])
        _drop_capabilities()
    _unprivileged(job["mode"])
    ctypes, libc = _libc()
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "could not become undumpable")
    sys.path.extend(job["settings"]["path"])
    sys.set_int_max_str_digits(0)
    _limits(job["settings"])
    import decimal
    import fractions

    GENUINE.update(Decimal=decimal.Decimal, Fraction=fractions.Fraction)
    if job["landlock"]:
        _landlock(job["landlock"])


def _watch(child, reader, deadline, limit):
    """(status, reason, record) of the program's process: its record pipe read (at most `limit`
    bytes) until it exits; killed at `deadline` or on a flood. A pidfd wakes the wait when it
    exits (before Linux 5.3, none: its exit is looked at every 10 ms)."""
    import select
    import time

    try:
        exited = [os.pidfd_open(child)]
    except OSError:
        exited = []
    data, reading = bytearray(), [reader]
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return _kill(child, "timed out (wall clock)")
        ready = select.select(reading + exited, [], [], left if exited else min(left, 0.01))[0]
        if reader in ready:
            chunk = os.read(reader, 65536)
            data += chunk
            reading = reading if chunk else []
        if len(data) > limit:
            return _kill(child, f"output over {limit} bytes")
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
    while reading and len(data) <= limit:  # the program is gone: what is left in the pipe, to its end
        chunk = os.read(reader, 65536)
        data += chunk
        reading = reading if chunk else []
    if len(data) > limit:
        return "failed", f"output over {limit} bytes", b""
    return _ended(status, data)


def _kill(child, reason):
    """Ends the program's process (the supervisor's filter lets it send SIGKILL only)."""
    os.kill(child, SIGKILL)
    os.waitpid(child, 0)
    return "failed", reason, b""


def _ended(status, data):
    """The outcome of a program's process that exited: its last line only when it exited by
    itself with status 0 (the program's own os._exit(0) without a line: no result)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        reason = "timed out: CPU limit" if sig == SIGXCPU else f"killed by signal {sig} (a crash, or the memory limit)"
        return "failed", reason, b""
    lines = [line for line in bytes(data).split(b"\n") if line.strip()]
    code = os.WEXITSTATUS(status)
    if code or not lines:
        return "failed", f"no result (the program exited with {code})", b""
    return "returned", "", lines[-1]


def _report(out, status, reason, record=b""):
    """The one line finbench reads, then the supervisor's end (as PID 1, the jail's)."""
    from _json import encode_basestring_ascii as quoted

    line = f'{{"status": {quoted(status)}, "reason": {quoted(reason)}, "record": {quoted(record.decode("latin-1"))}}}'
    os.write(out, ("\n" + line + "\n").encode())
    os._exit(0)


def main():
    job = marshal.loads(sys.stdin.buffer.read())
    out, supervisor = os.dup(1), os.getpid()
    try:
        _supervisor_start(job, out)
        record_r, record_w = os.pipe()
        go_r, go_w = os.pipe()
        child = os.fork()
    except BaseException as err:  # noqa: BLE001 — no program runs without its supervisor's limits
        _report(out, "failed", f"the jail's start failed: {err}")
    if child == 0:
        for fd in (out, record_r, go_w):
            os.close(fd)
        _program(job, record_w, go_r, supervisor)
    os.close(record_w)
    os.close(go_r)
    os.write(out, f'\n{{"program": {child}}}\n'.encode())  # its pid, for finbench to end it by (outside a jail)
    try:
        _nproc_zero()
        _seccomp(bytes.fromhex(job["supervisor_filter"]))
    except BaseException as err:  # noqa: BLE001 — the program never starts beside an unfiltered supervisor
        _kill(child, "")
        _report(out, "failed", f"the jail's start failed: {err}")
    import time

    deadline = time.monotonic() + float(job["settings"]["wall_seconds"])
    os.write(go_w, b"g")
    _report(out, *_watch(child, record_r, deadline, int(job["settings"]["result_bytes"])))


main()
