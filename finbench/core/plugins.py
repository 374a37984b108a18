"""Plugins of an installed package: the Python entry points of a group (`finbench.benchmarks`,
`finbench.studies`), each naming a module or an object, handed to the registry that takes them.
Reading the installed packages' metadata costs tens of milliseconds, so each registry reads its
group once, when it first needs it (benchmarks/__init__.py, studies/__init__.py)."""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable


def load_entry_points(group: str, take: Callable[[Any], None]) -> tuple[str, ...]:
    """Load every entry point of `group` and give what each names to `take`; the names loaded. A
    plugin that cannot be loaded is one ValueError line naming it, not a traceback."""
    loaded = []
    for entry in metadata.entry_points(group=group):
        try:
            found = entry.load()
        except Exception as err:  # noqa: BLE001 — whatever a broken plugin raises
            raise ValueError(f"entry point {entry.name} = {entry.value} ({group}): cannot be loaded: "
                             f"{type(err).__name__}: {err}") from None
        take(found)
        loaded.append(entry.name)
    return tuple(loaded)
