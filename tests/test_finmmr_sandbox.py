"""The sandbox for model-written programs (runner/sandbox.py): every hostile kind is contained
(acc 0, execution rate 0, its reason kept, nothing outside changed, no process left behind, the
batch goes on), and benign programs return what the official `exec` returns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from finbench.benchmarks import finmmr
from finbench.sandbox import Limits, run_programs
from finbench.scoring.finmmr import get_acc, outcome_value
from finbench.types import Prediction

FAST = Limits(wall_seconds=3, cpu_seconds=2, workers=2)


def _processes_of_sandbox() -> list[str]:
    """Live processes that are sandbox servers or run as the sandbox user (nobody)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            uid = next(line.split()[1] for line in (entry / "status").read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if "runner/sandbox.py" in cmdline or (os.geteuid() == 0 and uid == "65534"):
            found.append(f"{entry.name}: {cmdline}")
    return found


def hostile(victim: Path) -> dict[str, str]:
    return {
        "loop": "def solution():\n    while True:\n        pass",
        "sleep": "import time\ndef solution():\n    time.sleep(60)\n    return 1",
        "fork": "import os\ndef solution():\n    os.fork()\n    return 1",
        "subprocess": "import subprocess\ndef solution():\n    return subprocess.run(['true']).returncode + 1",
        "thread": "import threading\ndef solution():\n    threading.Thread(target=lambda: None).start()\n    return 1",
        "alloc_64gb": "def solution():\n    block = bytearray(64 << 30)\n    return len(block)",
        "write_file": f"def solution():\n    open({str(victim.parent / 'written')!r}, 'w').write('x')\n    return 1",
        "write_cwd": "def solution():\n    open('here', 'w').write('x')\n    return 1",
        "delete_file": f"import os\ndef solution():\n    os.remove({str(victim)!r})\n    return 1",
        "socket": "import socket\ndef solution():\n    socket.create_connection(('127.0.0.1', 9))\n    return 1",
        "env_secret": "import os\ndef solution():\n    return float(os.environ['FINMMR_SECRET'])",
        "parent_environ": "import os\ndef solution():\n    return open(f'/proc/{os.getppid()}/environ').read()[:0] + 1",
        "kill_parent": "import os, signal\ndef solution():\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 1",
        "ctypes": "import ctypes\ndef solution():\n    ctypes.CDLL(None).kill(1, 9)\n    return 1",
        "sys_exit": "import sys\ndef solution():\n    sys.exit(0)",
        "os_exit": "import os\ndef solution():\n    os._exit(0)",
        "recursion": "def f(n):\n    return f(n + 1)\ndef solution():\n    return f(0)",
        "stdout_flood": "import sys\ndef solution():\n    while True:\n        sys.stdout.write('x' * 65536)",
        "fd_flood": "import os\ndef solution():\n    while True:\n        os.write(1, b'x' * 65536)",
        "no_solution": "x = 1",
        "syntax": "def solution(:\n    return 1",
    }


def test_every_hostile_program_is_contained(tmp_path, monkeypatch, capfd):
    victim = tmp_path / "keep.txt"
    victim.write_text("mine")
    monkeypatch.setenv("FINMMR_SECRET", "42")
    programs = hostile(victim)
    benign = "def solution():\n    return 41 + 1"
    outcomes = run_programs([*programs.values(), benign], FAST)
    for (kind, _), outcome in zip(programs.items(), outcomes):
        assert not outcome.ok, kind
        assert outcome.reason, kind
        assert get_acc(outcome_value(outcome.kind, outcome.value), 42) == 0
    assert outcomes[-1].ok and outcomes[-1].value == "42"  # the batch went on
    reasons = dict(zip(programs, (o.reason for o in outcomes)))
    assert reasons["loop"].startswith("timed out") and reasons["sleep"].startswith("timed out")
    assert "MemoryError" in reasons["alloc_64gb"] and "SystemExit" in reasons["sys_exit"]
    assert "RecursionError" in reasons["recursion"] and "KeyError" in reasons["env_secret"]
    assert victim.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    assert not _processes_of_sandbox()
    assert "xxxx" not in capfd.readouterr().out  # the floods went nowhere
    assert not [p for p in Path("/tmp").glob("finbench-sandbox-*")]  # working folders removed


def test_a_pot_run_scores_failed_programs_as_the_official_eval_pot():
    """Through the benchmark: acc 0 and execution_rate 0 with the reason, for each failure."""
    from finbench.types import NUMERICAL, Question

    question = Question(id="q", benchmark="finmmr", kind=NUMERICAL, text="?", gold="42", fields={"ground_truth": 42})
    outputs = ["```python\ndef solution():\n    return 42\n```", "    import os\n    os.kill(os.getppid(), 9)\n    return 42",
               "    return 42.05", "    return (42, 0)", "    return '42%'", "    return 'forty-two'"]
    verdicts = finmmr.rule_judgements([question] * len(outputs),
                                      [Prediction(id="q", answer="", generated_text=o) for o in outputs], "pot")
    assert [v[0] for v in verdicts] == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert [v[1]["execution_rate"] for v in verdicts] == [1, 0, 1, 1, 1, 1]
    assert "os.kill" in verdicts[1][1]["reason"]


BENIGN = [
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
]
TRUTHS = [12, 3.2563, 2.6667, 3.25, 16.67, 285, 12.5, 7, 12.5, 0, True, 1, 2.5, 0.75, 2, 1e308, 1, 1e308, 0]


def _official_value(program: str):
    """What the official run_code_in_process returns for OUR OWN benign program (never model text)."""
    namespace = {"print": lambda *args, **kwargs: None}
    exec(program, namespace)  # noqa: S102 — a fixed, benign test program
    return namespace["solution"]()


def test_benign_programs_return_what_the_official_exec_returns():
    outcomes = run_programs(BENIGN, Limits(workers=2))
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes if not o.ok]
    for program, outcome, truth in zip(BENIGN, outcomes, TRUTHS):
        value = _official_value(program)
        ours = outcome_value(outcome.kind, outcome.value, outcome.first_kind)
        assert get_acc(ours, truth) == get_acc(value, truth), program
        for near in (truth * 0.999, truth * 1.0021) if not isinstance(truth, bool) else ():
            assert get_acc(ours, near) == get_acc(value, near), (program, near)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            assert ours == value and isinstance(ours, int) == isinstance(value, int)
    assert [get_acc(outcome_value(o.kind, o.value, o.first_kind), t) for o, t in zip(outcomes, TRUTHS)][:3] == [1, 1, 1]


def test_an_empty_batch_and_a_dead_server_are_outcomes_not_errors(monkeypatch):
    assert run_programs([]) == []
    import sys

    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    outcomes = run_programs(["def solution():\n    return 1"])
    assert not outcomes[0].ok and "sandbox server failed" in outcomes[0].reason
