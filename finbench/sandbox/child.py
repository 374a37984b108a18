"""The start of every jailed interpreter (`python -I -S -c <this file's text>`): standard library
only, nothing of finbench, never imported by finbench itself.

It reads one job from stdin (finbench's own `marshal` of {"settings", "filter", "program"}; the
standard `json` module would import `re`, a tenth of the start-up), then, before the program runs:
keeps the result pipe (stdout) on a private descriptor and points 0, 1 and 2 at /dev/null (a
flood goes nowhere), closes every other descriptor, lowers every resource limit (soft = hard, so
none can be raised again), loads the seccomp filter (no_new_privs first; a job whose filter does
not load never runs its program), and adds an audit hook that only words the reason of what the
kernel refuses anyway. Then it runs the program as the official `eval_pot` does — `exec` with
`print` replaced by a function that prints nothing, then `solution()` — and writes one JSON line:
{"ok", "kind", "value", "first_kind", "reason"}. The value is read only when its type is one a
number rule knows (int, float, bool, None, a string ≤ `result_chars`, numpy's and the standard
library's number types, a one-element array, a list or tuple by its first element); any other
object is kind "other" without calling its methods, so an object that pretends to be the gold
scores 0, as in the official evaluator.
"""

import marshal
import os
import sys

RESULT_FD = 1


def _limits(settings):
    import resource

    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cpu = max(1, int(settings["cpu_seconds"]))
    for name, value in (("RLIMIT_AS", mapped + int(settings["memory_bytes"])), ("RLIMIT_CPU", cpu),
                        ("RLIMIT_NPROC", 0), ("RLIMIT_FSIZE", int(settings["file_bytes"])), ("RLIMIT_CORE", 0),
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


def _landlock(rules):
    """Confines this process with Landlock: `rules` ([path, access bits]) are all it may read or
    run; nothing may be written or created anywhere; with ABI 4+ no TCP, with 6+ no signal or
    abstract socket outside the domain. Raises OSError where the kernel has no Landlock."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
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
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(446, ruleset, 0) != 0:  # no_new_privs, restrict_self
        raise OSError(ctypes.get_errno(), "Landlock refused")
    os.close(ruleset)


def _seccomp(program):
    """Loads a classic BPF program (bytes of struct sock_filter) for this process and its future
    threads; raises OSError when the kernel refuses it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(code, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs refused")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


WORDED = ("os.kill", "os.killpg", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
          "subprocess.Popen", "socket.", "signal.pthread_kill", "os.mknod", "os.mkfifo", "pty.")


def _audit(event, args):
    """Words a refusal the seccomp filter makes anyway (the kernel is the boundary, not this)."""
    if event.startswith(WORDED):
        raise PermissionError(f"sandbox: {event} is not allowed")


def _exact(value, types):
    return any(type(value) is t for t in types)


def _encode(value, limit):
    """(kind, text) of a result by its exact type; nothing of an unknown object is called (a
    Decimal or Fraction exists only where the program imported its module)."""
    exact = tuple(getattr(sys.modules.get(m), n, None) for m, n in (("decimal", "Decimal"), ("fractions", "Fraction")))
    numpy = sys.modules.get("numpy")
    scalars = tuple(set(numpy.sctypeDict.values())) if numpy is not None else ()
    if value is None:
        return "none", "None"
    if _exact(value, (bool,)) or (scalars and _exact(value, (numpy.bool_,))):
        return "bool", str(bool(value))
    if _exact(value, (int,)) or (scalars and _exact(value, scalars) and isinstance(value, numpy.integer)):
        number = int(value)  # beyond ~4,000 digits in hex: finbench reads it without the str-conversion limit
        return "int", str(number) if number.bit_length() < 13_000 else hex(number)
    if _exact(value, (float, *[t for t in exact if t is not None])) or (scalars and _exact(value, scalars)
                                                      and isinstance(value, numpy.floating)):
        return "float", repr(float(value))
    if _exact(value, (str,)):
        return ("str", value) if len(value) <= limit else ("other", "")
    if numpy is not None and _exact(value, (numpy.ndarray,)) and value.size == 1 and value.dtype.kind in "biuf":
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


def _json(answer):
    """A flat dict of str and bool as one JSON line (`_json`, the C half of `json`, without `re`)."""
    from _json import encode_basestring_ascii as quoted

    items = (f"{quoted(k)}: {'true' if v is True else 'false' if v is False else quoted(str(v))}"
             for k, v in answer.items())
    return "{" + ", ".join(items) + "}"


def _start(job, out):
    """Everything before the program (`out`: the result descriptor, kept)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, out)
    os.closerange(out + 1, 1 << 16)
    sys.path.extend(job["settings"]["path"])
    sys.set_int_max_str_digits(0)
    _limits(job["settings"])
    if job.get("landlock"):
        _landlock(job["landlock"])
    if job["filter"]:
        _seccomp(bytes.fromhex(job["filter"]))
    sys.addaudithook(_audit)


def main():
    job = marshal.loads(sys.stdin.buffer.read())
    out = os.dup(RESULT_FD)
    try:
        _start(job, out)
    except BaseException as err:  # noqa: BLE001 — the program never runs without its limits and filter
        os.write(out, ("\n" + _json({"ok": False, "reason": f"the jail's start failed: {err}"}) + "\n").encode())
        os._exit(0)
    try:
        answer = _run(job)
    except BaseException as err:  # noqa: BLE001 — sys.exit and KeyboardInterrupt are the program's failures too
        answer = {"ok": False, "reason": f"{type(err).__name__}: {str(err)[:300]}"}
    os.write(out, ("\n" + _json(answer) + "\n").encode())
    os._exit(0)


main()
