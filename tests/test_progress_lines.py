"""A voice in a pipe (runner/progress.py): outside a terminal a run prints plain progress lines —
at once, every 5 % and at least every EVERY_S seconds — and writes the same lines to run.log."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading
import time

import pytest
from helpers import ENV
from rich.console import Console

LINE = re.compile(r"^evaluating: (\d+)/(\d+) \((\d+)%\), ([\d.]+) samples/s, (.+)$")


def test_the_line_says_done_total_rate_and_time_left():
    from finbench.runner.progress import line

    assert line(0, 72, 3.0) == "evaluating: 0/72 (0%), 0.00 samples/s, time left unknown yet"
    assert line(18, 72, 9.0) == "evaluating: 18/72 (25%), 2.00 samples/s, 27 s left"  # 54 left at 2/s
    assert line(1, 400, 2.0) == "evaluating: 1/400 (0%), 0.50 samples/s, 13 min 18 s left"  # 399 × 2 s
    assert line(72, 72, 36.0) == "evaluating: 72/72 (100%), 2.00 samples/s, done"


def test_lines_come_every_five_percent_and_on_a_rhythm_while_nothing_finishes(monkeypatch):
    from finbench.runner import progress

    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with progress.progress(True, 100, console) as advance:
        for _ in range(100):
            advance(1)
    said = [LINE.match(text) for text in console.file.getvalue().splitlines()]
    assert all(said) and [int(m.group(1)) for m in said] == list(range(0, 101, 5))

    monkeypatch.setattr(progress, "EVERY_S", 0.2)  # a batch that takes long: the rhythm goes on without it
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with progress.progress(True, 10, console):
        # the rhythm's lines come while nothing finishes: waited for as events (a loaded machine
        # delays the ticker, it does not stop it), never counted in a fixed sleep
        while len(console.file.getvalue().splitlines()) < 4:
            time.sleep(0.05)
    said = console.file.getvalue().splitlines()
    assert len(said) >= 4 and all(text.startswith("evaluating: 0/10 (0%)") for text in said), said


def test_no_progress_prints_nothing_but_run_log_still_gets_the_lines(caplog):
    from finbench.runner.progress import progress

    console = Console(file=io.StringIO(), force_terminal=False)
    with caplog.at_level("INFO", logger="finbench"), progress(False, 4, console) as advance:
        advance(4)
    assert console.file.getvalue() == ""
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluating")] == [
        "evaluating: 0/4 (0%), 0.00 samples/s, time left unknown yet", caplog.records[-1].getMessage()]
    assert caplog.records[-1].getMessage().startswith("evaluating: 4/4 (100%)")


@pytest.mark.slow
def test_a_demo_with_stdout_piped_prints_its_progress_lines_as_it_goes(tmp_path, tiny_qwen_dir):
    """Measured as the order of events in the one pipe (stdout and stderr together), never as wall
    time: the first progress line comes before any result line, so it was not held back to the end;
    that a command's first line comes before torch loads is tests/test_first_line.py's."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "tiny-qwen2.5-vl").symlink_to(tiny_qwen_dir)  # built already
    out = tmp_path / "demo"
    process = subprocess.Popen([sys.executable, "-m", "finbench.cli", "demo", "--n-items", "24", "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**ENV, "FINBENCH_HOME": str(home)})
    seen: list[tuple[int, str]] = []
    reader = threading.Thread(target=lambda: seen.extend(enumerate(text.rstrip("\n") for text in process.stdout)))
    reader.start()
    process.wait(timeout=600)
    reader.join()
    assert process.returncode == 0, "\n".join(text for _, text in seen)
    progress = [(at, text) for at, text in seen if LINE.match(text)]
    results = [at for at, text in seen if text.startswith(("wrote ", "errors: "))]
    assert progress and results and progress[0][0] < min(results), seen[:20]
    assert progress[0][1].startswith("evaluating: 0/24 (0%)")  # said when evaluation starts, not at its end
    assert progress[-1][1].startswith("evaluating: 24/24 (100%)")
    logged = [text.split(" finbench ", 1)[1] for text in (out / "run.log").read_text().splitlines()
              if " finbench evaluating: " in text]
    assert logged == [text for _, text in progress]
