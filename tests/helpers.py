"""Helpers shared by the end-to-end tests: the CLI in a subprocess, and a cache's row count."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_cli(*args: str, env: dict | None = None, timeout: int = 600, **kwargs) -> subprocess.CompletedProcess:
    """`finbench ARGS…` in a fresh process, offline."""
    return subprocess.run([sys.executable, "-m", "finbench.cli", *args], capture_output=True, text=True,
                          env=env or ENV, timeout=timeout, **kwargs)


def cache_rows(path: str | Path) -> int:
    """Committed rows of a run's cache, read-only (0 while it does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet
        return 0
