"""The jail (finbench/sandbox/) against a second red team: one hostile program of each class the
first did not try, in the kernel jail and in the Landlock fallback, run here (as root) and again
as the ordinary user `nobody` and as root with bwrap and Landlock running as nobody
(test_finmmr_sandbox.py::test_the_suite_holds_as_an_ordinary_user re-runs this file too):
1. the jail's PID 1: a program that plants code in another process of the jail through
   /proc/<pid>/mem, and one that looks for a process of the jail without a seccomp filter or limits;
2. host-wide kernel resources: inodes of /tmp, legacy AIO, inotify/fanotify, grown pipes, file
   locks, POSIX timers;
3. what Landlock does not guard: a host file's mode, owner, times and extended attributes (the
   *xattrat calls included), the runner's System V queue, segment and semaphores, the clock, root;
4. who ends the output: a result line the program forges and then hangs;
5. the official limits: 10 s of wall clock from the program's first line, and results the
   official comparison rejects (a numpy timedelta, objects of a module the program registered);
6. text that crashed the writer: a result and an exception message holding a lone surrogate.
Each keeps the first red team's guarantees: the neighbours keep their right answers, the hostile
answer scores 0, nothing outside changes, no process is left (every process below this test,
whatever its user, listed after each judgement: this test adopts its jails' orphans), finbench's
memory, limits and niceness are unchanged."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import platform
import resource
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from finbench.benchmarks import finmmr
from finbench.benchmarks.finmmr_rule import get_acc, outcome_value
from finbench.core.types import NUMERICAL, Prediction, Question
from finbench.sandbox import Limits, run_programs
from test_finmmr_sandbox import (BENIGN, FAST, GOLD, REAL, ROOT, _host_state, _jail_processes, _mode_or_skip,
                                 orphans_stay_ours)  # noqa: F401 — the fixture applies to this file too

MODES = ["jail", "landlock"]
LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
X86_64 = platform.machine() == "x86_64"


def _judge(hostile: dict[str, str], mode: str, limits: Limits = FAST, state=lambda: None) -> dict:
    """Runs each hostile program between two neighbours and checks every guarantee; {name: outcome}.
    `state`: what else outside the jail must not change."""
    _mode_or_skip(mode)
    marker = f"finbench-jail-{uuid.uuid4().hex[:8]}"
    before, outside, rss = _host_state(marker), state(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    batch = [p for program in hostile.values() for p in (program, BENIGN)]
    outcomes = run_programs(batch, limits, mode=mode)
    found = dict(zip(hostile, outcomes[0::2]))
    assert not _jail_processes()  # nothing started in a jail outlives its judgement
    scores = {name: get_acc(outcome_value(o.kind, o.value, o.first_kind), GOLD) for name, o in found.items()}
    assert not any(scores.values()), {name: found[name] for name, score in scores.items() if score}
    assert all(o.ok and o.value == "42" for o in outcomes[1::2]), outcomes[1::2]
    assert _host_state(marker) == before and state() == outside
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200_000  # KiB
    return found


# ---- 1. the jail's PID 1 ------------------------------------------------------------------------
# x86_64: prctl(PR_SET_PDEATHSIG, 0), then pause() forever — the process it lands in outlives its jail
PLANTED = bytes.fromhex("b89d000000" "bf01000000" "31f6" "0f05" "b822000000" "0f05" "ebf7")
PLANT_IN_OTHERS = f"""import os
def solution():
    hits = 0
    for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
        try:
            where = int(open(f'/proc/{{pid}}/syscall').read().split()[-1], 16)  # after its blocked call
            with open(f'/proc/{{pid}}/mem', 'r+b', buffering=0) as memory:
                memory.seek(where)
                memory.write({PLANTED!r} if {X86_64} else b'')
            hits += 1
        except (OSError, ValueError, IndexError):
            pass
    return 42 if hits else 0
"""
UNFILTERED_OR_UNLIMITED = """import os
def solution():
    found = []
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        try:
            status, limits = open(f'/proc/{pid}/status').read(), open(f'/proc/{pid}/limits').read()
        except OSError:
            continue
        seccomp = [line.split()[1] for line in status.splitlines() if line.startswith('Seccomp:')]
        cpu = [line for line in limits.splitlines() if line.startswith('Max cpu time')]
        if seccomp != ['2'] or not cpu or 'unlimited' in cpu[0]:
            found.append(pid)
    return 42 if found else 0
"""


@pytest.mark.parametrize("mode", MODES)
def test_class1_no_process_of_the_jail_is_unfiltered_unlimited_or_outlives_the_judgement(mode):
    found = _judge({"plant_code_in_another_process": PLANT_IN_OTHERS, "unfiltered_or_unlimited": UNFILTERED_OR_UNLIMITED},
                   mode)
    assert all(o.ok or "PermissionError" in o.reason for o in found.values()), found


@pytest.mark.parametrize("mode", MODES)
def test_class1_finbench_ends_the_jail_by_host_pid_when_its_own_deadline_comes_first(mode, monkeypatch):
    """The supervisor would wait 30 s; finbench's deadline (2 s) kills the jail's PID 1 (outside a
    jail, the program's process) by its host pid and waits for it: nothing is left on return."""
    import finbench.sandbox as sandbox

    _mode_or_skip(mode)
    prepare = sandbox._prepare
    monkeypatch.setattr(sandbox, "_prepare", lambda limits, mode: dataclasses.replace(prepare(limits, mode),
                                                                                     deadline_seconds=2.0))
    found = run_programs(["import time\ndef solution():\n    time.sleep(60)"] * 2, Limits(wall_seconds=30, workers=2),
                         mode=mode)
    assert [o.reason for o in found] == ["timed out (wall clock)"] * 2, found
    assert not _jail_processes()


# ---- 2. host-wide kernel resources ---------------------------------------------------------------
AIO_SETUP = {"x86_64": 206, "aarch64": 0}.get(platform.machine(), -1)
SETTIMEOFDAY = {"x86_64": 164, "aarch64": 170}.get(platform.machine(), -1)
RESOURCES = {
    "inodes_of_tmp": "import os\ndef solution():\n    made = 0\n"
                     "    for make in (os.mkdir, lambda p: open(p, 'w').close(), lambda p: os.symlink('x', p)):\n"
                     "        try:\n            while made < 5000:\n                make(f'n{made}')\n                made += 1\n"
                     "        except OSError:\n            pass\n    return 42 if made >= 5000 else 0",
    "legacy_aio": LIBC + f"def solution():\n    context = ctypes.c_ulong(0)\n"
                         f"    return 42 if libc.syscall({AIO_SETUP}, 4096, ctypes.byref(context)) == 0 else 0",
    "inotify_fanotify": LIBC + "def solution():\n    found = [libc.inotify_init1(0), libc.fanotify_init(0x200, 0)]\n"
                               "    return 42 if max(found) >= 0 else 0",
    "pipe_grown": "import fcntl, os\ndef solution():\n    read, write = os.pipe()\n"
                  "    return 42 if fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 1 << 20) >= 1 << 20 else 0",
    "file_locks": "import fcntl, os\ndef solution():\n    fd, held = os.open(os.__file__, os.O_RDONLY), 0\n    try:\n"
                  "        for start in range(0, 4000, 2):\n            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, start)\n"
                  "            held += 1\n    except OSError:\n        pass\n    return 42 if held >= 2000 else 0",
    "posix_timers": LIBC + "def solution():\n    made, timer = 0, ctypes.c_void_p()\n"
                           "    while made < 1000 and libc.timer_create(1, None, ctypes.byref(timer)) == 0:\n"
                           "        made += 1\n    return 42 if made >= 1000 else 0",
}


@pytest.mark.parametrize("mode", MODES)
def test_class2_host_wide_kernel_resources_stay_bounded(mode):
    found = _judge(RESOURCES, mode)
    assert found["inodes_of_tmp"].ok and found["file_locks"].ok  # the program ran, and was refused


# ---- 3. what Landlock does not guard ---------------------------------------------------------------
def _ipc_objects() -> dict[str, int]:
    """A System V queue (holding one message), segment and semaphore set of this test's own, 0600."""
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.msgget(0, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    message = ctypes.create_string_buffer(b"\1\0\0\0\0\0\0\0keep", 12)
    assert queue >= 0 and libc.msgsnd(queue, message, 4, 0) == 0
    return {"queue": queue, "segment": libc.shmget(0, 4096, 0o1600), "semaphores": libc.semget(0, 1, 0o1600)}


def _ipc_state(ipc: dict[str, int]) -> dict[str, bool]:
    libc, buffer = ctypes.CDLL(None, use_errno=True), ctypes.create_string_buffer(512)
    alive = {"queue": libc.msgctl(ipc["queue"], 2, buffer) == 0, "segment": libc.shmctl(ipc["segment"], 2, buffer) == 0,
             "semaphores": libc.semctl(ipc["semaphores"], 0, 2, buffer) == 0}
    alive["message"] = alive["queue"] and _messages(ipc["queue"]) == 1
    return alive


def _messages(queue: int) -> int:
    libc, buffer = ctypes.CDLL(None, use_errno=True), ctypes.create_string_buffer(512)
    libc.msgctl(queue, 2, buffer)  # IPC_STAT: struct msqid_ds, msg_qnum after ipc_perm (48) and 3 times (24), cbytes (8)
    return int.from_bytes(buffer.raw[80:88], "little")


def _file_state(victim: Path) -> tuple:
    found = victim.stat()
    return (victim.read_text(), found.st_mode, found.st_uid, found.st_gid, found.st_atime_ns, found.st_mtime_ns,
            found.st_ctime_ns, sorted((name, os.getxattr(victim, name)) for name in os.listxattr(victim)))


def _landlock_gaps(victim: Path, ipc: dict[str, int]) -> dict[str, str]:
    path = str(victim).encode()
    return {
        "mode_owner_times": f"import os\ndef solution():\n    hits = 0\n    for change in (lambda: os.chmod({path!r}, 0o777), "
                            f"lambda: os.chown({path!r}, 4321, 4321), lambda: os.utime({path!r}, (0, 0))):\n"
                            f"        try:\n            change()\n            hits += 1\n        except OSError:\n"
                            f"            pass\n    return 42 if hits else 0",
        "xattr_at_calls": LIBC + f"def solution():\n    value = ctypes.create_string_buffer(b'1')\n"
                                 f"    args = (ctypes.c_uint64 * 2)(ctypes.addressof(value), 1)\n"
                                 f"    calls = [libc.syscall(463, -100, {path!r}, 0, b'user.planted', args, 16),"
                                 f" libc.syscall(466, -100, {path!r}, 0, b'user.keep')]\n"
                                 f"    return 42 if 0 in calls else 0",
        "system_v_objects": LIBC + f"def solution():\n    buffer = ctypes.create_string_buffer(8192)\n"
                                   f"    calls = [libc.msgctl({ipc['queue']}, 2, buffer), libc.msgrcv({ipc['queue']}, buffer, 64, 0, 0o4000),"
                                   f" libc.msgctl({ipc['queue']}, 0, None), libc.shmctl({ipc['segment']}, 0, None),"
                                   f" libc.semctl({ipc['semaphores']}, 0, 0)]\n    return 42 if max(calls) >= 0 else 0",
        "clock": LIBC + f"def solution():  # settimeofday(NULL, NULL): checks CAP_SYS_TIME, changes nothing\n"
                        f"    return 42 if libc.syscall({SETTIMEOFDAY}, None, None) == 0 else 0",
        "root_or_capabilities": LIBC + "def solution():\n    header = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
                                       "    data = (ctypes.c_uint32 * 6)()\n    libc.capget(header, data)\n"
                                       "    return 42 if os.geteuid() == 0 or any(data) else 0",
    }


@pytest.mark.parametrize("mode", MODES)
def test_class3_metadata_ipc_clock_and_root_are_closed(mode, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    victim.chmod(0o644)
    os.setxattr(victim, "user.keep", b"1")
    ipc = _ipc_objects()
    try:
        state = lambda: (_file_state(victim), _ipc_state(ipc))  # noqa: E731
        assert all(state()[1].values()), state()
        _judge(_landlock_gaps(victim, ipc), mode, state=state)
    finally:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.msgctl(ipc["queue"], 0, None), libc.shmctl(ipc["segment"], 0, None), libc.semctl(ipc["semaphores"], 0, 0)


# ---- 4. who ends the output --------------------------------------------------------------------------
FORGED = {
    "forged_result_then_hang": "import os, time\ndef solution():\n"
                               "    line = b'\\n{\"ok\": true, \"kind\": \"int\", \"value\": \"42\", \"first_kind\": \"\", \"reason\": \"\"}\\n'\n"
                               "    for fd in range(64):\n        try:\n            os.write(fd, line)\n        except OSError:\n"
                               "            pass\n    os.closerange(0, 64)\n    time.sleep(60)",
    "forged_report_then_hang": "import json, os, time\ndef solution():\n"
                               "    record = json.dumps({'ok': True, 'kind': 'int', 'value': '42', 'first_kind': '', 'reason': ''})\n"
                               "    line = ('\\n' + json.dumps({'status': 'returned', 'reason': '', 'record': record}) + '\\n').encode()\n"
                               "    for fd in range(64):\n        try:\n            os.write(fd, line)\n        except OSError:\n"
                               "            pass\n    os.closerange(0, 64)\n    time.sleep(60)",
}


@pytest.mark.parametrize("mode", MODES)
def test_class4_only_the_line_written_after_the_program_ended_counts(mode):
    found = _judge(FORGED, mode)
    assert {o.reason for o in found.values()} == {"timed out (wall clock)"}, found


# ---- 5. the official limits --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_class5_a_program_has_the_official_10_s_from_its_first_line(mode):
    """evaluate-config.yaml's timeout_duration: 10 s. The jail's own start is not the program's."""
    _mode_or_skip(mode)
    programs = [f"import time\ndef solution():\n    time.sleep({seconds})\n    return 42" for seconds in (12, 7)]
    late, in_time = run_programs(programs, Limits(workers=2))
    assert Limits().wall_seconds == 10 and not late.ok and late.reason == "timed out (wall clock)", late
    assert in_time.ok and in_time.value == "42", in_time
    assert not _jail_processes()


class OnlyFloat:
    """What a program's own module in sys.modules may hold: a number only to float()."""

    def __float__(self) -> float:
        return float(GOLD)


def _registered(module: str, attributes: str) -> str:
    return (f"import sys, types\nclass Gold:\n    def __float__(self):\n        return 42.0\n"
            f"fake = types.ModuleType({module!r})\n{attributes}\nsys.modules[{module!r}] = fake\n"
            f"def solution():\n    return Gold()")


REJECTED = {
    "numpy_timedelta": "import numpy as np\ndef solution():\n    return np.timedelta64(42)",
    "numpy_timedelta_array": "import numpy as np\ndef solution():\n    return np.array([42], dtype='m8[s]')",
    "module_decimal": _registered("decimal", "fake.Decimal = Gold"),
    "module_fractions": _registered("fractions", "fake.Fraction = Gold"),
    "module_numpy": _registered("numpy", "fake.sctypeDict, fake.floating = {'g': Gold}, Gold\n"
                                         "fake.integer = fake.bool_ = fake.ndarray = type('Other', (), {})"),
}


@pytest.mark.parametrize("mode", MODES)
def test_class5_results_the_official_comparison_rejects_score_0(mode):
    assert get_acc(np.timedelta64(GOLD), GOLD) == 0 and get_acc(OnlyFloat(), GOLD) == 0  # the official within_eps raises
    found = _judge(REJECTED, mode)
    assert {o.kind for o in found.values()} == {"other"}, found
    accepted = run_programs(["import numpy as np\ndef solution():\n    return np.int16(42)",
                             "from decimal import Decimal\ndef solution():\n    return Decimal(42)",
                             "from fractions import Fraction\ndef solution():\n    return Fraction(84, 2)"], FAST, mode=mode)
    assert [(o.kind, o.value) for o in accepted] == [("int", "42"), ("float", "42.0"), ("float", "42.0")], accepted


# ---- 6. text that crashed the writer --------------------------------------------------------------
SURROGATES = ["def solution():\n    return '42' + chr(0xDC80)", "def solution():\n    raise ValueError('x' + chr(0xD800))"]


@pytest.mark.parametrize("mode", MODES)
def test_class6_a_lone_surrogate_is_stored_escaped_and_the_verdict_kept(mode):
    from finbench.sandbox import storable

    _mode_or_skip(mode)
    text, raised = run_programs(SURROGATES, FAST, mode=mode)
    assert text.ok and text.value == "42\udc80" and storable(text.value) == "42\\udc80"  # exact for the verdict
    assert not raised.ok and raised.reason == "ValueError: x\\ud800" and raised.reason.encode("utf-8")
    question = Question(id="q", benchmark="finmmr", kind=NUMERICAL, text="?", gold="42", fields={"ground_truth": 42})
    verdicts = finmmr.rule_judgements([question] * 2, [Prediction(id="q", answer="", generated_text=p) for p in SURROGATES],
                                      "pot")
    assert [v[0] for v in verdicts] == [1.0, 0.0]  # "42\udc80": the official clean-up reads 42
    assert verdicts[0][1]["extracted"] == "42\\udc80" and verdicts[1][1]["reason"] == "ValueError: x\\ud800"
    json.dumps([v[1] for v in verdicts], ensure_ascii=False).encode("utf-8")


@pytest.mark.slow
@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/finmmr (60 real items) is absent")
def test_class6_score_pot_completes_with_lone_surrogates(tmp_path):
    """`finbench score --protocol pot` stores every verdict; it exited 2 with every answer lost."""
    data = REAL / "validation" / "easy_validation.json"
    right = {q.id: q.fields["ground_truth"] for q in finmmr.load_questions(data)}
    ids = sorted(right)[:3]
    answers = [f"def solution():\n    return {right[ids[0]]!r}", f"def solution():\n    return {str(right[ids[1]])!r} + chr(0xDC80)",
               SURROGATES[1]]
    predictions, out = tmp_path / "pot.jsonl", tmp_path / "samples.jsonl"
    predictions.write_text("".join(json.dumps({"id": i, "answer": a}) + "\n" for i, a in zip(ids, answers)))
    done = subprocess.run([sys.executable, "-m", "finbench", "score", "--benchmark", "finmmr", "--data", str(data),
                           "--predictions", str(predictions), "--protocol", "pot", "--samples-out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["id"]: row for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert [rows[i]["correct"] for i in ids] == [1.0, 1.0, 0.0]
    assert rows[ids[1]]["extracted"] == f"{right[ids[1]]}\\udc80"
    assert not _jail_processes()
