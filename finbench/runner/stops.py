"""How a run stops before its end: `Stopped` (its cache stops taking writes, its outputs cannot be
written) and `Interrupted` (Ctrl-C, SIGTERM), each one line saying why and what is kept."""

from __future__ import annotations

from typing import Any


class Stopped(Exception):
    """A run that cannot go on (its cache stops taking writes, its outputs cannot be written): one
    line saying why and what is kept."""


class Interrupted(Stopped):
    """Ctrl-C (or SIGTERM) during a run: what was committed to the cache is kept; the message says
    how much."""

    def __init__(self, saved: int, total: int) -> None:
        super().__init__(f"interrupted: {saved} of {total} answers saved; rerun the same command to resume")
        self.saved, self.total = saved, total


def stopped(err: Any, saved: int, total: int) -> Stopped:
    """`Stopped` for a cache that stops taking writes or a model that goes (CacheWriteError,
    ModelUnavailable): whether the answers saved so far are kept (`err.kept`, default yes)."""
    if getattr(err, "kept", True):
        return Stopped(f"stopped: {err}; {saved} of {total} answers saved; rerun the same command to resume")
    return Stopped(f"stopped: {err}; rerun the same command to start again")
