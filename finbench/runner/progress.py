"""A run's progress: a bar on a terminal; plain lines where no bar can be drawn.

Outside a terminal — stdout piped (`| tee`), nohup, a CI log, a notebook cell — a bar draws
nothing until the end, so the run says where it is in plain lines instead: one when evaluation
starts, then one every `EVERY_S` seconds or `STEP` of the total, whichever comes first —
done/total, samples/s, the time left. The same lines go to run.log on every run (a terminal's
bar leaves no trace there), and a thread keeps the rhythm while a long batch runs. A run may bring
one hint, said once when the time left first reaches `LONG_S` (on a CPU, what a smaller
--max-pixels would give: runner/pixel_hint.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
import time
from typing import Any, Callable, Iterator

log = logging.getLogger("finbench")
EVERY_S = 10.0  # a line at least this often while samples are being answered
STEP = 0.05  # and one each time another 5 % of the samples is done
LONG_S = 600.0  # a time left at least this long brings the run's hint, once (runner/pixel_hint.py)


@contextlib.contextmanager
def progress(show: bool, total: int, console: Any,
             hint: Callable[[float], str] | None = None) -> Iterator[Callable[[int], None]]:
    """`advance(n)` after each batch: a bar with the running samples/s on a terminal (`show`), else
    plain lines on `console` (`show`) — and the lines in run.log either way. `hint(seconds_left)`:
    a line said once, the first time the time left is `LONG_S` or more (runner/pixel_hint.py)."""
    if total == 0:
        yield lambda n: None
        return
    bar = show and console is not None and getattr(console, "is_terminal", False) and sys.stdout.isatty()
    with plain_lines(total, console if show and not bar else None, hint, console if show else None) as said:
        if not bar:
            yield said
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        started = time.perf_counter()
        with Progress(TextColumn("[bold]evaluating"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[rate]} samples/s"), TimeRemainingColumn(), console=console) as shown:
            task = shown.add_task("run", total=total, rate="–")
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                shown.update(task, advance=n, rate=f"{done / max(time.perf_counter() - started, 1e-9):.1f}")
                said(n)

            yield advance


def line(done: int, total: int, seconds: float) -> str:
    """'evaluating: 12/72 (17%), 1.50 samples/s, 40 s left'."""
    rate = done / seconds if seconds > 0 else 0.0
    left = f"{_duration((total - done) / rate)} left" if rate > 0 and done < total else ("done" if done >= total else
                                                                                          "time left unknown yet")
    return f"evaluating: {done}/{total} ({done / total:.0%}), {rate:.2f} samples/s, {left}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s" if seconds < 3600 else \
        f"{seconds // 3600} h {seconds // 60 % 60:02d} min"


@contextlib.contextmanager
def plain_lines(total: int, console: Any, hint: Callable[[float], str] | None = None,
                hint_console: Any = None) -> Iterator[Callable[[int], None]]:
    """`advance(n)`; a line at once, on each `STEP` of `total` and after `EVERY_S` without one, to
    run.log and (when given) `console`; `hint`'s line once, to run.log and `hint_console`."""
    started = time.perf_counter()
    step = max(1, math.ceil(total * STEP))
    lock = threading.Lock()
    stop = threading.Event()
    state = {"done": 0, "last": started}
    hinted: list[str] = []

    def say() -> None:
        with lock:
            state["last"] = time.perf_counter()
            done, seconds = state["done"], state["last"] - started
            text = line(done, total, seconds)
            left = (total - done) * seconds / done if 0 < done < total else 0.0
            extra = hint(left) if hint is not None and not hinted and left >= LONG_S else ""
            if extra:
                hinted.append(extra)
        log.info("%s", text)
        if console is not None:
            console.print(text, markup=False, highlight=False)
        if extra:
            log.info("%s", extra)
            if hint_console is not None:
                hint_console.print(extra, markup=False, highlight=False)

    def keep_rhythm() -> None:
        while not stop.wait(1.0):
            if time.perf_counter() - state["last"] >= EVERY_S:
                say()

    def advance(n: int) -> None:
        with lock:
            before, state["done"] = state["done"], state["done"] + n
        if before // step != state["done"] // step or state["done"] >= total > before:
            say()

    say()
    ticker = threading.Thread(target=keep_rhythm, name="finbench-progress", daemon=True)
    ticker.start()
    try:
        yield advance
    finally:
        stop.set()
        ticker.join()
