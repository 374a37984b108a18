"""The check's JSON and Markdown, and the time limits every section runs under.

Every planned section is written from the start (`pending`), becomes `running` when it starts and
ends `done`, `timed_out`, `skipped` or `failed`. A section's own limit is a SIGALRM; the outer
limit (gpu_check.sh's `timeout`) is a SIGTERM, which `Report.stop_on_term` turns into the same
`SectionTimeout` and a stop: the running section is written `timed_out`, the rest `skipped`. A
SIGKILL leaves `running` in the file: `mark_killed`, which the shell runs after, writes it
`timed_out`. An A/B row that is cut keeps the pairs it finished (`Report.partial`)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from gpucheck.plan import RESULT_KINDS

FINMME_ITEMS = 11_099
KEYS = ("name", "limit_s", "elapsed_s", "status")


class SectionTimeout(BaseException):
    """A section's time is up. A BaseException, so that no handler of the runner (the batch retry in
    runner/loop.py, the report writer in runner/outputs.py) takes it for an ordinary failure and
    carries on: it unwinds to `Report.section`, which records the section as timed out."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise SectionTimeout in the main thread after `seconds` (None: no limit)."""
    if not seconds:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise SectionTimeout(f"over its {seconds:g} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Report:
    """The check's JSON and Markdown, rewritten (write-then-rename) at every change of a section."""

    def __init__(self, out: Path, stem: str, args: Any, planned: list[tuple[str, float | None]] = (),
                 started: float | None = None) -> None:
        import torch
        import transformers

        self.out, self.stem = out, stem
        self.started = time.perf_counter() if started is None else started  # the budget's clock
        self.budget = args.budget
        self.stopped: str | None = None  # why the check stops (the outer limit's SIGTERM)
        self.partial: dict[str, Any] = {}  # what the running section has finished so far
        self.payload: dict[str, Any] = {
            "tiny": args.tiny, "model": args.model, "sections": [dict(zip(KEYS, (n, limit, 0.0, "pending")))
                                                                 for n, limit in planned],
            "results": {}, "ab": {},
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "transformers": transformers.__version__,
                            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                            "cpus": os.cpu_count()},
            "note": "random weights; accuracy is chance level and not a result"}
        self.write()

    def left(self) -> float | None:
        return None if not self.budget else self.budget - (time.perf_counter() - self.started)

    @contextlib.contextmanager
    def stop_on_term(self) -> Iterator[None]:
        """SIGTERM (the outer limit) ends the running section as timed out and stops the check."""
        def stop(signum: int, frame: Any) -> None:
            self.stopped = "stopped by the outer time limit (SIGTERM)"
            raise SectionTimeout(self.stopped)

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _record(self, name: str, limit: float | None) -> dict[str, Any]:
        for record in self.payload["sections"]:
            if record["name"] == name and record["status"] == "pending":
                record["limit_s"] = limit
                return record
        record = dict(zip(KEYS, (name, limit, 0.0, "pending")))
        self.payload["sections"].append(record)
        return record

    def section(self, name: str, limit: float | None, work: Callable[[], Any], where: dict[str, Any] | None = None) -> Any:
        """Run `work` under `limit` seconds (cut to what the budget leaves); record its result or why
        it has none under `name`, in `where` (default: the results), with its record
        {name, limit_s, elapsed_s, status} in the run-ordered `sections` list, and write. Status:
        "done", "timed_out" (over its limit, even when the work came back late, or stopped by the
        outer limit; the pairs an A/B row finished are kept), "skipped" (no budget left, the check
        stopped, or the section itself says it cannot run here) or "failed"."""
        where = self.payload["results"] if where is None else where
        left = self.left()
        record = self._record(name, limit)
        if self.stopped or (left is not None and left < 5):
            where[name] = {"skipped": self.stopped or "the check's time budget ran out"}
            record["status"] = "skipped"
            self.write()
            return None
        limit = min(x for x in (limit, left) if x) if (limit or left) else None
        record.update(limit_s=limit, status="running")
        self.partial = {}
        self.write()
        print(f"== {name}" + (f" (limit {limit:.0f} s)" if limit else ""), flush=True)
        started = time.perf_counter()
        result, status = None, "done"
        try:
            with deadline(limit):
                result = work()
            where[name] = result if isinstance(result, dict) else {"result": result}
        except SectionTimeout as err:
            where[name], status = {**self.partial, "error": f"SectionTimeout: {err}"}, "timed_out"
        except Exception as err:  # noqa: BLE001 — one section failing must not cost the others
            traceback.print_exc()
            where[name], status = {**self.partial, "error": f"{type(err).__name__}: {err}"}, "failed"
        elapsed = time.perf_counter() - started
        if status == "done" and limit and elapsed > limit:  # the alarm came late (a long C call)
            status = "timed_out"
        elif status == "done" and "skipped" in where[name]:
            status = "skipped"
        record.update(elapsed_s=elapsed, status=status)
        where[name]["section_s"] = elapsed
        self.write()
        return result if status == "done" else None

    def finish(self) -> None:
        """Sections never reached (the check stopped, or not run here) written as skipped."""
        for record in self.payload["sections"]:
            if record["status"] in ("pending", "running"):
                record["status"] = "skipped" if record["status"] == "pending" else "timed_out"
        self.write()

    def write(self) -> None:
        from gpucheck.output import markdown

        self.payload["seconds"] = time.perf_counter() - self.started
        write_files(self.out, self.stem, self.payload, markdown(self.payload, self.stem))


def write_files(out: Path, stem: str, payload: dict[str, Any], text: str) -> None:
    for path, content in ((out / f"{stem}.json", json.dumps(payload, indent=1, default=str)), (out / f"{stem}.md", text)):
        partial = path.with_suffix(path.suffix + ".partial")
        partial.write_text(content)
        partial.replace(path)


def mark_killed(out: Path) -> list[str]:
    """After the check was killed (SIGKILL: no handler ran), its files with the running section
    written `timed_out` and the pending ones `skipped`; returns the sections it changed."""
    from gpucheck.output import markdown

    changed = []
    for path in sorted(out.glob("gpu_check_*.json")):
        payload = json.loads(path.read_text())
        for record in payload.get("sections", []):
            if record["status"] in ("running", "pending"):
                killed = record["status"] == "running"
                record["status"] = "timed_out" if killed else "skipped"
                place = payload["results"] if record["name"] in RESULT_KINDS else payload["ab"]
                place.setdefault(record["name"], {})["error" if killed else "skipped"] = (
                    "killed by the outer time limit" if killed else "not reached: the check was killed")
                changed.append(record["name"])
        write_files(out, path.stem, payload, markdown(payload, path.stem))
    return changed
