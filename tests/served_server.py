"""A real `transformers serve` on 127.0.0.1 for the served-model tests: started on a free port with
a checkpoint the tests build, waited for until /v1/models answers, stopped by its pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from helpers import ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    checkpoint: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


def start_server(checkpoint: Path, log: Path, port: int | None = None, timeout: float = 180) -> Server:
    """`transformers serve CHECKPOINT --host 127.0.0.1` (CPU, float32: the in-process runs' dtype),
    up and answering /v1/models."""
    port = port or free_port()
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    handle = open(log, "ab")
    process = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", str(checkpoint),
                                "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                               stdout=handle, stderr=subprocess.STDOUT, env=env)
    server = Server(process, port, checkpoint, log)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/models", timeout=2) as answer:
                if json.loads(answer.read()).get("data"):
                    return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"transformers serve did not answer within {timeout} s: {log.read_text()[-2000:]}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
