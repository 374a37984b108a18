"""A run served from the cache alone, without its model: the engine's replay mode.

A sweep rerun whose model folder is gone (finbench/app/sweep.py) can still write its variant's
outputs from the answers an earlier run cached: those answers are keyed with the fingerprint of
the weights that computed them, which cannot be recomputed without the weights, so it is taken
from that run's results.json, with its thinking mode. The engine loads no model, computes
nothing, and refuses the run in one line when a question is not in the cache."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finbench.benchmarks import get_benchmark
from finbench.config.specs import RunConfig
from finbench.core.types import RESULTS_FILE


@dataclass(frozen=True)
class Replay:
    """What the run that computed the answers recorded of its model `source`: its fingerprint and
    its thinking mode (results.json `thinking`: the budget and what opened the block, or None)."""

    source: str
    fingerprint: dict[str, Any]
    thinking: dict[str, Any] | None = None

    @classmethod
    def from_run(cls, source: str, run_dir: Path) -> "Replay":
        """The replay of the run recorded in `run_dir`/results.json, or one ValueError line."""
        path = Path(run_dir) / RESULTS_FILE
        try:
            results = json.loads(path.read_text())
            return cls(source, dict(results["fingerprint"]), results.get("thinking"))
        except (OSError, ValueError, KeyError, TypeError):
            raise ValueError(f"cannot load model {source!r} and {path} records no earlier run of it to serve "
                             "from the cache") from None

    def think_budget(self, config: RunConfig) -> int | None:
        """The thinking budget of the run's constrained requests, as runner/startup.py
        `think_budget_for` decides it for a loaded model, here from the recorded thinking block."""
        if config.protocol not in get_benchmark(config.benchmark).constrained_protocols:
            return None
        if self.thinking is None:
            if config.decode.think_budget > 0:
                raise ValueError(f"--think-budget {config.decode.think_budget}: {self.source} has no thinking block "
                                 f"(family {self.fingerprint.get('family', 'recorded')})")
            return None
        opens = self.thinking.get("opener", "") == ""  # the template opened the block itself
        return config.decode.think_budget if config.decode.think_budget > 0 or opens else None

    def missing(self, n: int) -> ValueError:
        """The one line refusing a replay with `n` questions not in the cache."""
        return ValueError(f"model {self.source!r} is missing: only answers already in the cache can be served, and "
                          f"{n} question(s) of this run are not there (restore the model folder)")
