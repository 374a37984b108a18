"""The jail for model-written programs (finbench/sandbox/) against hostile programs, one of each
class an attacker tried (the FinMMR pot protocol runs them): switching the audit hook off, calls
that Python does not audit (mknod, mkfifo, pidfd_send_signal, prlimit, setpriority, setxattr),
/proc path variants to finbench's command line and environment, signals to sibling programs,
leftovers (descriptors, shared memory, files), results built to fool or stall the scorer. Each is
contained: it scores 0, its neighbours keep their right answers, nothing outside changes, no
process, segment or folder is left, finbench's memory, limits and niceness are unchanged.

The suite runs as root here and again, as the ordinary user `nobody`, in a subprocess (setpriv, in
a private mount namespace where the Python installation is readable by nobody); both run the
end-to-end `finbench score --protocol pot --predictions …` with a program that hunts the gold.
The second red team's classes are in test_finmmr_sandbox_classes.py, re-run the same way. Every
test adopts its jails' orphans (PR_SET_CHILD_SUBREAPER), so "no process left" judges this test's
jails only, while other jails run on the machine."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from helpers import shared
from finbench.benchmarks import finmmr
from finbench.benchmarks.finmmr_rule import get_acc, outcome_value
from finbench.core.types import Prediction
from finbench.sandbox import Limits, isolation, run_programs

ROOT = Path(__file__).resolve().parents[1]
REAL = shared("data", "finmmr")
FAST = Limits(wall_seconds=2, cpu_seconds=1, workers=2, start_seconds=3)
GOLD = 42
AS_USER = "FINBENCH_SANDBOX_SUITE_AS"  # set in the re-run as another user (its name)
jail = pytest.mark.skipif(isolation().mode != "jail", reason="no kernel jail on this machine (finbench doctor)")


def attacks(fin: int, victim: Path, port: int, marker: str) -> dict[str, str]:
    """{class: program}; each returns 42 (the gold) only when its attack worked."""
    libc = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    return {
        "hook_off_then_kill": f"import __main__, os\n__main__._audit.__code__ = (lambda e, a: None).__code__\n"
                              f"def solution():\n    os.kill({fin}, 9)\n    return 42",
        "hook_list_emptied_then_connect": f"import __main__, socket\n__main__.WORDED = ()\ndef solution():\n"
                                          f"    socket.create_connection(('127.0.0.1', {port}), 1)\n    return 42",
        "ctypes_kill": libc + f"def solution():\n    return 42 if libc.kill({fin}, 9) == 0 else 0",
        "ctypes_unlink": libc + f"def solution():\n    return 42 if libc.unlink({str(victim).encode()!r}) == 0 else 0",
        "ctypes_fork": libc + "import os\ndef solution():\n    pid = libc.fork()\n    if pid == 0:\n"
                              "        os._exit(0)\n    return 42 if pid > 0 else 0",
        "exec_binary": "import os\ndef solution():\n    os.execv('/bin/sh', ['sh', '-c', 'exit 0'])",
        "thread": "import threading\ndef solution():\n    threading.Thread(target=lambda: None).start()\n    return 42",
        "unix_socket": f"import socket\ndef solution():\n    s = socket.socket(socket.AF_UNIX)\n"
                       f"    s.connect({str(victim.parent / 'sock')!r})\n    return 42",
        "mknod_mkfifo": f"import os\ndef solution():\n    os.mkfifo('/tmp/{marker}-fifo')\n    os.mknod('{marker}-node')\n"
                        f"    return 42",
        "mkfifo_flood": f"import os\ndef solution():\n    for i in range(100000):\n        os.mkfifo(f'/tmp/{marker}-{{i}}')\n"
                        f"    return 42",
        "pidfd_signals": f"import os, signal\ndef solution():\n    hits = 0\n    for pid in [{fin}, *range(1, 64)]:\n"
                         f"        try:\n            signal.pidfd_send_signal(os.pidfd_open(pid), 9)\n            hits += 1\n"
                         f"        except OSError:\n            pass\n    return 42 if hits else 0",
        "kill_siblings": libc + "import os\ndef solution():\n    hits = sum(libc.kill(pid, 9) == 0 for pid in range(-1, 4096)"
                                " if pid not in (0, os.getpid()))\n    return 42 if hits else 0",
        "prlimit_finbench": f"import resource\ndef solution():\n    resource.prlimit({fin}, resource.RLIMIT_AS, (1 << 20, 1 << 20))\n"
                            f"    return 42",
        "setpriority": f"import os\ndef solution():\n    for which, who in ((os.PRIO_PROCESS, {fin}), (os.PRIO_PGRP, 0), "
                       f"(os.PRIO_USER, 0), (os.PRIO_PROCESS, 0)):\n        try:\n            os.setpriority(which, who, 19)\n"
                       f"            return 42\n        except OSError:\n            pass\n    return 0",
        "setxattr": f"import os\ndef solution():\n    os.setxattr({str(victim)!r}, 'user.x', b'1')\n    return 42",
        "proc_paths": f"import os\ndef solution():\n    found = []\n    def grab(path, **kw):\n        try:\n"
                      f"            found.append(os.read(os.open(path, os.O_RDONLY, **kw), 65536))\n        except OSError:\n"
                      f"            pass\n    for path in ('/proc/{fin}/cmdline', '/proc/self/../{fin}/cmdline', '//proc/{fin}/environ',"
                      f" '/proc/./{fin}/environ'):\n        grab(path)\n    try:\n        os.chdir('/proc')\n"
                      f"        grab('{fin}/cmdline')\n    except OSError:\n        pass\n    try:\n"
                      f"        grab('{fin}/environ', dir_fd=os.open('/proc', os.O_RDONLY))\n    except OSError:\n        pass\n"
                      f"    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n        grab(f'/proc/{{pid}}/cmdline')\n"
                      f"        grab(f'/proc/{{pid}}/environ')\n"
                      f"    return 42 if any(b'pytest' in f or b'FINMMR_SECRET' in f for f in found) else 0",
        "environment": "import os\ndef solution():\n    return float(os.environ.get('FINMMR_SECRET', 0))",
        "host_files": f"def solution():\n    for path in ({str(victim)!r}, '/etc/passwd', '/root/.bashrc', {str(REAL)!r}):\n"
                      f"        try:\n            open(path).read()\n            return 42\n        except OSError:\n            pass\n"
                      f"    return 0",
        "write_host": f"def solution():\n    open({str(victim.parent / 'written')!r}, 'w').write('x')\n    return 42",
        "fd_flood": "import os, resource\ndef solution():\n    try:\n        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 16, 1 << 16))\n"
                    "    except (OSError, ValueError):\n        pass\n    held = []\n    try:\n        while True:\n"
                    "            held.append(os.open('/dev/null', os.O_RDONLY))\n    except OSError:\n        pass\n"
                    "    return 42 if len(held) > 64 else 0",
        "sysv_shm": libc + f"def solution():\n    return 42 if libc.shmget({SHM_KEY}, 1 << 20, 0o1666) >= 0 else 0",
        "posix_shm_and_leftovers": f"import _posixshmem, os\ndef solution():\n"
                                   f"    _posixshmem.shm_open('/{marker}', os.O_CREAT | os.O_RDWR, 0o600)\n"
                                   f"    open('{marker}', 'w').write('x')\n    open('/tmp/{marker}-tmp', 'w').write('x')\n    return 0",
        "namespaces_and_kernel": libc + f"import platform\ndef solution():\n    if platform.machine() != 'x86_64':\n        return 0\n"
                                        f"    calls = [(272, 0x10000000), (308, 0, 0), (321, 0, 0, 0), (250, 0, 0), (298, 0, 0, -1, -1, 0),"
                                        f" (323, 0), (425, 1, 0), (101, 16, {fin}, 0, 0), (310, {fin}, 0, 0, 0, 0, 0), "
                                        f"(165, 0, b'/tmp', 0, 0x1000, 0)]\n"
                                        f"    return 42 if any(libc.syscall(*c) >= 0 for c in calls) else 0",
        "fill_memory_through_tmpfs": "def solution():\n    written = 0\n    for folder in ('/dev/shm', '/dev', '/tmp', '.'):\n"
                                     "        for i in range(64):\n            try:\n"
                                     "                open(f'{folder}/f{i}', 'wb').write(b'x' * (1 << 20))\n"
                                     "                written += 1\n            except OSError:\n                break\n"
                                     "    return 42 if written > 8 else 0",
        "result_flood": "import os\ndef solution():\n    while True:\n        os.write(3, b'x' * 65536)",
        "memory": "def solution():\n    block = bytearray(64 << 30)\n    return 42",
        "cpu_loop": "def solution():\n    while True:\n        pass",
        "sleep": "import time\ndef solution():\n    time.sleep(60)\n    return 42",
        "pretends_to_be_the_gold": "class Gold:\n    def __float__(self):\n        return 42.0\n    def __ge__(self, other):\n"
                                   "        return True\n    __le__ = __eq__ = __ge__\ndef solution():\n    return Gold()",
        "float_subclass": "class Gold(float):\n    def __ge__(self, other):\n        return True\n    __le__ = __ge__\n"
                          "def solution():\n    return Gold(1.0)",
        "sum_bomb_text": "def solution():\n    return 'sum([[0]*99999]*99999,[])'",
        "format_bomb_text": "def solution():\n    return \"len('%0999999999d' % 0)\"",
        "long_text": "def solution():\n    return '42' + ' ' * 5000",
        "exits": "import os\ndef solution():\n    os._exit(0)",
    }


SHM_KEY = 0x4A41494C  # a System V segment key of the attack's own, looked for on the host afterwards
BENIGN = "import time\ndef solution():\n    time.sleep(0.3)\n    return 41 + 1"


@pytest.fixture(autouse=True)
def orphans_stay_ours():
    """While a test runs, this process reaps the orphans of its descendants (PR_SET_CHILD_SUBREAPER):
    whatever a jail of this test leaves behind stays below this process, so `_jail_processes`
    judges this test's jails only (other jails run on this machine at the same time), and the
    clean-up ends only what this test started."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield
    finally:
        for pid in _descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in _descendants():
            try:
                os.waitpid(pid, 0)  # this process's own children (the orphans it adopted among them)
            except ChildProcessError:
                pass
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


PR_SET_CHILD_SUBREAPER = 36


def _descendants() -> dict[int, str]:
    """Every process below this one, live or a zombie: {pid: its uid, state and command line}."""
    parents, described = {}, {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
            status, cmdline = ((entry / "status").read_text(), (entry / "cmdline").read_bytes()) if stat else ("", b"")
        except OSError:
            continue
        if stat:
            state, parent = stat[stat.rindex(")") + 2:].split()[:2]
            uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), "?")
            parents[int(entry.name)] = int(parent)
            described[int(entry.name)] = f"{entry.name} uid {uid} {state} {cmdline[:120]!r}"

    def below(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid in (0, 1):
                return False
            if pid == os.getpid():
                return True
        return False

    return {pid: text for pid, text in described.items() if below(pid)}


def _jail_processes() -> list[str]:
    """What this test's jails left running: every live process below this test (there is none once
    a judgement is over: the sandbox's users included, whatever their command line). A zombie is
    not one: adopted here, it would have been reaped by init; the fixture reaps it."""
    return sorted(text for text in _descendants().values() if text.split()[3] != "Z")


def _host_state(marker: str) -> dict:
    shm = Path("/proc/sysvipc/shm")
    return {"sysv": [line for line in (shm.read_text().splitlines()[1:] if shm.exists() else [])
                     if line.split()[0] == str(SHM_KEY)],
            "marked": sorted(str(p) for root in ("/tmp", "/dev/shm") for p in Path(root).glob(f"*{marker}*")),
            "nice": os.getpriority(os.PRIO_PROCESS, 0), "as": resource.getrlimit(resource.RLIMIT_AS),
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}


def _mode_or_skip(mode: str) -> None:
    """Skips where this machine gives no `mode` (finbench data check --benchmark finmmr says which
    isolation); as root where nobody cannot read the Python installation, checks first that
    Landlock mode is refused (it would run programs as root)."""
    trial = run_programs(["def solution():\n    return 1"], FAST, mode=mode)[0]
    if trial.ok:
        return
    if mode == "landlock" and os.geteuid() == 0:
        assert "Landlock mode is refused as root" in trial.reason, trial.reason
        pytest.skip("Landlock refused as root here (nobody cannot read the installation); the re-runs as "
                    "nobody cover it")
    pytest.skip(f"no {mode} on this machine: {trial.reason}")


@pytest.mark.parametrize("mode", ["jail", "landlock"])
def test_every_hostile_program_is_contained_and_its_neighbours_are_not_touched(tmp_path, monkeypatch, mode):
    """In the kernel jail, and in the Landlock fallback used where no jail can be built."""
    _mode_or_skip(mode)
    if os.environ.get(AS_USER) == "root-runtime-readable":
        from finbench.sandbox.jail import NOBODY, host_uid, runtime

        assert host_uid(runtime()) == NOBODY  # bwrap itself runs as nobody: the jail is not root outside either
    victim = tmp_path / "keep.txt"
    victim.write_text("mine")
    monkeypatch.setenv("FINMMR_SECRET", str(GOLD))
    listener, unix = socket.create_server(("127.0.0.1", 0)), socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "sock"))
    unix.listen()
    marker = f"finbench-jail-{uuid.uuid4().hex[:8]}"
    programs = attacks(os.getpid(), victim, listener.getsockname()[1], marker)
    before, rss = _host_state(marker), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    batch = [p for program in programs.values() for p in (program, BENIGN)]  # each attack between two neighbours
    outcomes = run_programs(batch, FAST, mode=mode)
    hostile, neighbours = outcomes[0::2], outcomes[1::2]
    scores = {name: get_acc(outcome_value(o.kind, o.value, o.first_kind), GOLD) for name, o in zip(programs, hostile)}
    assert all(score == 0 for score in scores.values()), {n: o for n, o in zip(programs, hostile) if scores[n]}
    assert all(o.ok and o.value == "42" for o in neighbours), neighbours
    reasons = {name: o.reason for name, o in zip(programs, hostile)}
    assert "timed out" in reasons["cpu_loop"] and "timed out" in reasons["sleep"] and "MemoryError" in reasons["memory"]
    assert "output over" in reasons["result_flood"]
    assert "Operation not permitted" in reasons["hook_off_then_kill"]  # the hook was off: the kernel refused
    assert [o.kind for n, o in zip(programs, hostile) if n in ("pretends_to_be_the_gold", "float_subclass", "long_text")] \
        == ["other"] * 3
    assert victim.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "sock"]
    for server in (listener, unix):
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # no connection came
    assert _host_state(marker) == before
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200_000  # KiB: the scorer held no bomb
    assert not _jail_processes()
    assert not list(Path("/tmp").glob("finbench-sandbox-*"))


def test_benign_programs_return_what_the_official_exec_returns():
    outcomes = run_programs(BENIGN_PROGRAMS, Limits(workers=2))
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes if not o.ok]
    for program, outcome, truth in zip(BENIGN_PROGRAMS, outcomes, TRUTHS):
        value = _official_value(program)
        ours = outcome_value(outcome.kind, outcome.value, outcome.first_kind)
        assert get_acc(ours, truth) == get_acc(value, truth), program
        for near in (truth * 0.999, truth * 1.0021) if not isinstance(truth, bool) else ():
            assert get_acc(ours, near) == get_acc(value, near), (program, near)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            assert ours == value and isinstance(ours, int) == isinstance(value, int)
    assert [get_acc(outcome_value(o.kind, o.value, o.first_kind), t) for o, t in zip(outcomes, TRUTHS)][:3] == [1, 1, 1]


BENIGN_PROGRAMS = [
    "def solution():\n    return 600000 / 50000",
    "import math\ndef solution():\n    return math.sqrt(2) * math.log(10)",
    "import numpy as np\ndef solution():\n    return np.mean(np.array([1.5, 2.5, 4.0]))",
    "import numpy as np\ndef solution():\n    return np.array([3.25])",
    "def helper(a, b):\n    return (a - b) / b * 100\ndef solution():\n    return round(helper(7000, 6000), 2)",
    "def solution():\n    print('computing', 1, 2)\n    x = [i * i for i in range(10)]\n    print(x)\n    return sum(x)",
    "def solution():\n    return (12.5, 'pct')",
    "def solution():\n    return ['7']",
    "def solution():\n    return '12.5%'",
    "def solution():\n    return None",
    "def solution():\n    return True",
    "def solution():\n    return {'a': 1}",
    "from decimal import Decimal\ndef solution():\n    return Decimal('2.50')",
    "from fractions import Fraction\ndef solution():\n    return Fraction(3, 4)",
    "import statistics\ndef solution():\n    return statistics.median([3, 1, 2])",
    "def solution():\n    return 10 ** 5000",
    "def solution():\n    return float('nan')",
    "def solution():\n    return 1e308 * 10",
    "def solution():\n    return -0.0",
    "import numpy as np\ndef solution():\n    return np.int64(7) + np.float32(0.5)",
    "def solution():\n    open('scratch.txt', 'w').write('12')\n    return int(open('scratch.txt').read())",
]
TRUTHS = [12, 3.2563, 2.6667, 3.25, 16.67, 285, 12.5, 7, 12.5, 0, True, 1, 2.5, 0.75, 2, 1e308, 1, 1e308, 0, 7.5, 12]


def _official_value(program: str):
    """What the official run_code_in_process returns for OUR OWN benign program (never model text)."""
    namespace = {"print": lambda *args, **kwargs: None}
    cwd = os.getcwd()
    scratch = Path(f"/tmp/finbench-official-{uuid.uuid4().hex[:8]}")
    scratch.mkdir()
    try:
        os.chdir(scratch)
        exec(program, namespace)  # noqa: S102 — a fixed, benign test program
        return namespace["solution"]()
    finally:
        os.chdir(cwd)
        shutil.rmtree(scratch)


def test_faults_are_per_program_outcomes(monkeypatch):
    assert run_programs([]) == []
    import finbench.sandbox as sandbox
    from finbench.sandbox import jail as jail_module

    real = sandbox._run_one
    monkeypatch.setattr(sandbox, "_run_one", lambda job, program: real(job, program) if "1" in program else 1 / 0)
    outcomes = run_programs(["def solution():\n    return 1", "def solution():\n    return 2"], FAST)
    assert outcomes[0].ok and outcomes[1].reason == "the sandbox failed: ZeroDivisionError: division by zero"
    monkeypatch.setattr(sandbox.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError(11, "EAGAIN")))
    assert "the jail did not start" in run_programs(["def solution():\n    return 1"], FAST)[0].reason
    monkeypatch.undo()
    monkeypatch.setattr(sandbox, "compile_filter", lambda role="program": (_ for _ in ()).throw(OSError("no libseccomp")))
    for mode in ("jail", "landlock"):  # never without the filter they are described with
        assert run_programs(["def solution():\n    return 1"], FAST, mode=mode)[0].reason == \
            "sandbox unavailable: OSError: no libseccomp"
    monkeypatch.setattr(sandbox, "compile_filter", lambda role="program": b"\0" * 8)  # a filter the kernel refuses: nothing runs
    marker = Path(f"/tmp/finbench-ran-{uuid.uuid4().hex[:8]}")
    refused = run_programs([f"def solution():\n    open({str(marker)!r}, 'w')\n    return 1"], FAST, mode="unsafe")[0]
    assert refused.reason == "the jail's start failed: [Errno 22] seccomp filter refused" and not marker.exists()
    monkeypatch.undo()

    monkeypatch.setattr(jail_module.sys, "base_prefix", "/nonexistent")  # the jail cannot bind its runtime
    monkeypatch.setattr(jail_module.sys, "executable", "/nonexistent/python")
    outcomes = run_programs(["def solution():\n    return 1", "def solution():\n    return 2"], FAST)
    assert all(not o.ok and o.reason for o in outcomes)
    assert not _jail_processes()


def test_unsafe_mode_is_weaker_but_still_a_separate_limited_process(tmp_path):
    outcomes = run_programs(["import os\ndef solution():\n    return os.getpid()", "def solution():\n    while True:\n        pass",
                             "import socket\ndef solution():\n    return socket.socket()"], FAST, mode="unsafe")
    assert outcomes[0].ok and int(outcomes[0].value) != os.getpid()
    assert not outcomes[1].ok and "timed out" in outcomes[1].reason
    assert not outcomes[2].ok


def test_unsafe_mode_programs_start_in_a_scratch_folder_of_their_own_removed_after(tmp_path, monkeypatch):
    """Unsafe mode confines no file; still, a program's relative paths land in its own scratch
    folder, not in "/" (where a mkdir loop once left 32,873 folders) nor in finbench's folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where mkdtemp makes the scratch folder
    (tmp_path / "tmp").mkdir()
    marker = f"finbench-unsafe-{uuid.uuid4().hex[:8]}"
    program = (f"import os\ndef solution():\n    for i in range(5):\n        os.mkdir('{marker}-' + str(i))\n"
               f"    open('{marker}.txt', 'w').write('x')\n    return os.getcwd()")
    outcome = run_programs([program], FAST, mode="unsafe")[0]
    assert outcome.ok, outcome.reason
    assert outcome.value.strip("'").startswith(str(tmp_path / "tmp" / "finbench-unsafe-"))
    assert not [p for p in Path("/").iterdir() if p.name.startswith(marker)]
    assert not list(tmp_path.glob(f"{marker}*")) and not list((tmp_path / "tmp").iterdir())


@jail
@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/finmmr (60 real items) is absent")
def test_data_check_says_which_isolation_this_machine_gives():
    from finbench.app.datacheck import check_data

    notes = check_data("finmmr", str(REAL / "validation" / "easy_validation.json"))["notes"]
    assert any(n.startswith("programs of --protocol pot run in: kernel jail: bubblewrap") for n in notes), notes


@jail
def test_a_pot_run_scores_failed_programs_as_the_official_eval_pot():
    """Through the benchmark: acc 0 and execution_rate 0 with the reason, for each failure."""
    from finbench.core.types import NUMERICAL, Question

    question = Question(id="q", benchmark="finmmr", kind=NUMERICAL, text="?", gold="42", fields={"ground_truth": 42})
    outputs = ["```python\ndef solution():\n    return 42\n```", "    import os\n    os.kill(os.getppid(), 9)\n    return 42",
               "    return 42.05", "    return (42, 0)", "    return '42%'", "    return 'forty-two'"]
    verdicts = finmmr.rule_judgements([question] * len(outputs),
                                      [Prediction(id="q", answer="", generated_text=o) for o in outputs], "pot")
    assert [v[0] for v in verdicts] == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert [v[1]["execution_rate"] for v in verdicts] == [1, 0, 1, 1, 1, 1]
    assert "os.kill" in verdicts[1][1]["reason"]


GOLD_HUNTER = """import json, os
def solution():
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        try:
            args = open(f'/proc/{pid}/cmdline', 'rb').read().decode().split('\\0')
        except OSError:
            continue
        if '--data' in args:
            records = json.load(open(args[args.index('--data') + 1]))
            return next(r['ground_truth'] for r in records if r['question_id'] == QID)
    return -1.5
"""


@pytest.mark.slow
@jail
@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/finmmr (60 real items) is absent")
def test_score_predictions_pot_end_to_end_is_contained(tmp_path):
    """`finbench score --protocol pot --predictions …` in a process of its own, the gold on its
    command line (--data): the program that hunts it scores 0; an honest neighbour scores 1."""
    data = REAL / "validation" / "easy_validation.json"
    right = {q.id: q.fields["ground_truth"] for q in finmmr.load_questions(data)}
    ids = sorted(right)
    lines = [{"id": ids[0], "answer": GOLD_HUNTER.replace("QID", repr(ids[0]))},
             {"id": ids[1], "answer": f"def solution():\n    return {right[ids[1]]!r}"}]
    predictions, out = tmp_path / "pot.jsonl", tmp_path / "samples.jsonl"
    predictions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = subprocess.run([sys.executable, "-m", "finbench", "score", "--benchmark", "finmmr", "--data", str(data),
                           "--predictions", str(predictions), "--protocol", "pot", "--samples-out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "FINMMR_SECRET": "s3cret"})
    assert done.returncode == 0, done.stderr[-2000:]
    by_id = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert by_id[ids[0]]["correct"] == 0.0 and by_id[ids[1]]["correct"] == 1.0
    assert "s3cret" not in out.read_text() and str(data) not in out.read_text()
    assert not _jail_processes()


def _reachable_commands(needed: list[Path], staging: Path) -> tuple[list[str] | None, str]:
    """Shell lines that, in a private mount namespace, let any user reach the folders in `needed`
    (the Python installation, the virtual environment, this checkout, the re-run's home): each
    folder above them that others cannot search becomes a tmpfs holding only the paths down to
    them, shallowest first, so a checkout in a 0700 home or a private temp dir is reached too.
    None (with the reason) where that cannot work: `/` itself or a needed folder is closed to others."""
    needed = [Path(os.path.realpath(p)) for p in needed]
    closed = [p for p in needed if p.stat().st_mode & 0o005 != 0o005]
    if closed:
        return None, f"{closed[0]} is not readable by other users (its own mode, not a folder above it)"
    blocked = sorted({a for p in needed for a in p.parents if not a.stat().st_mode & 0o001}, key=lambda a: len(a.parts))
    if Path("/") in blocked:
        return None, "/ is not searchable by other users"
    commands = []
    for index, top in enumerate(blocked):
        children = sorted({top / p.relative_to(top).parts[0] for p in needed if top in p.parents})
        parked = [staging / f"{index}-{n}" for n in range(len(children))]
        commands += [f"mkdir -p {place} && mount --bind {child} {place}" for child, place in zip(children, parked)]
        commands.append(f"mount -t tmpfs -o mode=755 tmpfs {top}")
        commands += [f"mkdir -p {child} && mount --move {place} {child}" for child, place in zip(children, parked)]
    return commands, ""


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(AS_USER) is not None, reason="already the re-run")
@pytest.mark.parametrize("who", ["nobody", "root-runtime-readable"])
def test_the_suite_holds_as_an_ordinary_user(tmp_path, who):
    """The tests above and test_finmmr_sandbox_classes.py again, as `nobody` (uid 65534, no
    groups, no capabilities: bwrap then makes an unprivileged user namespace, Landlock mode runs
    as nobody); and the hostile programs of both files as root where the Python installation is
    readable by nobody (finbench then starts bwrap, and Landlock mode's programs, as nobody)."""
    if os.geteuid() != 0:
        pytest.skip("not root: this run already is an ordinary user's")
    if not shutil.which("setpriv") or not shutil.which("unshare"):
        pytest.skip("util-linux setpriv/unshare are missing: no ordinary user can be made")
    staging = tmp_path / "staging"
    staging.mkdir()
    home = Path(tempfile.mkdtemp(prefix="finbench-nobody-"))  # pytest's own tmp_path is root's alone
    os.chown(home, 65534, 65534)
    home.chmod(0o755)
    needed = [Path(sys.base_prefix), Path(sys.prefix), ROOT, home, *([REAL] if REAL.exists() else [])]
    setup, why = _reachable_commands(needed, staging)
    if setup is None:
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip(f"no ordinary user can be given this checkout and its Python: {why}")
    files = [str(Path(__file__)), str(Path(__file__).with_name("test_finmmr_sandbox_classes.py"))]
    pytest_argv = [sys.executable, "-m", "pytest", *files, "-n", "0", "-q", "-rs", "-p", "no:cacheprovider",
                   "--basetemp", str(home / "t"), "-W", "ignore",
                   *(["-k", "not ordinary_user"] if who == "nobody" else ["-k", "hostile or class", "--noconftest"])]
    user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"] \
        if who == "nobody" else []
    user += ["env", f"HOME={home}", f"{AS_USER}={who}", f"PYTHONPATH={ROOT}", "PYTHONDONTWRITEBYTECODE=1", *pytest_argv]
    script = " && ".join([*setup, "exec " + " ".join(map(_quoted, user))])
    try:
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, timeout=1800, cwd=ROOT)  # a hang guard only
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "passed" in done.stdout, done.stdout[-1500:]
    # The re-run skips only what this run skips for the same reason (e.g. ../shared is absent in a
    # user's clone): a skip for any other reason means the ordinary user lost a guarantee.
    expected = set() if REAL.exists() else {"../shared/data/finmmr (60 real items) is absent"}
    skipped = {line.split(": ", 1)[-1] for line in done.stdout.splitlines() if line.startswith("SKIPPED")}
    assert skipped <= expected, done.stdout[-3000:]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _no_jail(monkeypatch):
    import finbench.sandbox as sandbox

    monkeypatch.setattr(sandbox, "isolation", lambda limits=None: sandbox.Isolation(
        mode="none", detail="no isolation", reason="bwrap: setting up uid map: Permission denied; Landlock: ENOSYS"))


@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/finmmr (60 real items) is absent")
def test_without_jail_or_landlock_pot_is_refused_in_one_line_unless_unsafe_sandbox_which_is_named(monkeypatch,
                                                                                                  tmp_path):
    from typer.testing import CliRunner

    from finbench.cli import app
    from finbench.sandbox import UNSAFE_NOTE

    _no_jail(monkeypatch)
    data = str(REAL / "validation" / "easy_validation.json")
    refused = CliRunner().invoke(app, ["run", "--model", str(tmp_path / "no-model"), "--benchmark", "finmmr", "--data",
                                       data, "--protocol", "pot", "--out", str(tmp_path / "run")])
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
    assert "neither a kernel jail nor Landlock" in refused.output and "--unsafe-sandbox" in refused.output  # no model looked at
    assert not (tmp_path / "run").exists()
    qid = finmmr.load_questions(data)[0].id
    predictions = tmp_path / "pot.jsonl"
    predictions.write_text(json.dumps({"id": qid, "answer": "def solution():\n    return 1"}) + "\n")
    score = ["score", "--benchmark", "finmmr", "--data", data, "--predictions", str(predictions), "--protocol", "pot"]
    refused = CliRunner().invoke(app, score)
    assert refused.exit_code == 2 and "nor Landlock" in refused.output and refused.output.count("\n") == 1
    done = CliRunner().invoke(app, [*score, "--samples-out", str(tmp_path / "out.jsonl"), "--unsafe-sandbox"])
    assert done.exit_code == 0, done.output
    assert UNSAFE_NOTE in json.loads(done.output[done.output.index("{"):])["notes"]
    rows = {row["id"]: row for row in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert rows[qid]["extracted"] == "1"  # it ran, outside a jail
    assert CliRunner().invoke(app, [*score[:-1], "cot"]).exit_code == 0  # cot runs no program: never refused
    import finbench.sandbox as sandbox

    monkeypatch.setattr(sandbox, "isolation", lambda limits=None: sandbox.Isolation(mode="landlock", detail="",
                                                                                  reason="no user namespaces"))
    done = CliRunner().invoke(app, score)  # Landlock, where it works, is the fallback: not refused, but named
    assert done.exit_code == 0 and sandbox.LANDLOCK_NOTE in json.loads(done.output[done.output.index("{"):])["notes"]


def test_the_supervisor_works_without_pidfds(monkeypatch, tmp_path):
    """Before Linux 5.3 there is no pidfd: the supervisor then looks at its program's exit every
    10 ms, with the same outcomes (a result, the wall clock, a flood)."""
    import finbench.sandbox as sandbox

    bootstrap = tmp_path / "child.py"
    text = sandbox.BOOTSTRAP.read_text(encoding="utf-8")
    bootstrap.write_text(text.replace("exited = [os.pidfd_open(child)]", "exited = [os.pidfd_open(-1)]"), encoding="utf-8")
    assert bootstrap.read_text(encoding="utf-8") != text
    monkeypatch.setattr(sandbox, "BOOTSTRAP", bootstrap)
    found = run_programs([BENIGN, "import time\ndef solution():\n    time.sleep(60)",
                          "import os\ndef solution():\n    while True:\n        os.write(3, b'x' * 65536)"], FAST)
    assert found[0].ok and found[0].value == "42", found
    assert [o.reason for o in found[1:]] == ["timed out (wall clock)", "output over 100000 bytes"], found
    assert not _jail_processes()
