"""What a scoring rule scores apart, beside its headline, declared as data (`Scorer.parts`,
scoring/stats.py) so that the console, the reports and the leaderboard draw it without knowing
the benchmark: FinMTM's dialogue sessions and agent items (scoring/finmtm.py `PARTS`). Each metric
of a part is a `Metric` (benchmarks/metrics.py): a 0–1 value shown ×100 (`scale` 100), or one on its
own scale (`scale` 1) from 0 to `full` (0–10, 0–25, 0–100)."""

from __future__ import annotations

from dataclasses import dataclass

from finbench.benchmarks.metrics import Metric


@dataclass(frozen=True)
class Part:
    """A part of the score a rule scores apart, beside the headline (FinMTM's dialogue sessions
    and agent items): `summary` puts a dict under `scores[name]` with `n`, `n_scored`,
    `n_errors`, `unscored` (why nothing was scored), `ci` and, optionally, `by_level`, plus
    one value per metric. The console, the reports and the leaderboard draw it from this
    declaration alone: `title` heads its table, `figure` names its chart, and `headline`
    (a metric key, with `headline_label`) stands for the run when the rule's primary metric
    scored nothing (a FinMTM run of sessions only)."""

    name: str
    title: str
    figure: str
    metrics: tuple[Metric, ...]
    headline: str | None = None
    headline_label: str = ""
