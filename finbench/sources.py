"""What a `--model`, `--judge` or `--data` string names: a local path or a hub id (`owner/name`).
Pure string and path checks, importable without torch: start-up refuses a missing path in one
line before any library loads (runner/startup.py `validate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def looks_like_path(source: str, suffixes: Sequence[str] = ()) -> bool:
    """A source that is meant as a path (absolute, ./…, ~/…, more than one '/', or ending in one of
    `suffixes`), not a hub id, when it does not exist."""
    return source.startswith((".", "/", "~")) or source.count("/") != 1 or Path(source).suffix in suffixes


def check_judge_source(source: str | None) -> None:
    """A --judge that is neither a folder nor a hub id is one line, before any model loads: a path
    (absolute, ./…, ~/…, or with more than one '/') that does not exist is not taken for a hub id."""
    if not source or Path(source).expanduser().exists():
        return
    if looks_like_path(source):
        raise ValueError(f"--judge {source}: no such model folder (a hub id is written owner/name)")
