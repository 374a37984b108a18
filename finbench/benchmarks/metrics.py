"""What a scoring rule reports, declared where the rule is defined: `Metric` (a number of the score:
its label, direction, display scale and the count it rests on) and `Variant` (a way the rule can
score, with the name the reports give it). A `Scorer` (benchmarks/scorer.py) lists its metrics and
variants; the console, the reports, the leaderboard and the sweep read these declarations, never a
metric's key, so that a penalty (FinMME's P_H), a subset's count (MME-Finance's judged open items)
or a rule's own variant (FinMME's paper formula) is said once, by the benchmark that has it.

`ACCURACY` and `SCORE` are the two metrics every rule has, whatever its benchmark: the mean of the
per-question correctness and of the per-question score of its `ScoreTable` (the breakdowns, the
clustered error bars and the paired differences are computed on them). `OFFICIAL` is the variant
every rule has: the benchmark's official rule. Torch-free: the registry reads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One number a rule reports: `key` in the score (or in its part's dict), its `label`, whether
    `higher_is_better` (False: a penalty, shown apart), the factor it is shown with (`scale`: 100
    for a 0–1 value shown ×100, 1 for a value on its own scale), `full` (the top of the stored
    value's scale: 1 for a 0–1 value, 10 for a 0–10 judge mean; a chart draws value / full), and
    the count of the score it rests on (`n_key`, its items named `n_label`), where the metric is
    computed on a subset of the scored items (FinMME's P_H on the multi-answer items)."""

    key: str
    label: str
    higher_is_better: bool = True
    scale: float = 100.0
    n_key: str = "n"
    n_label: str = "scored question"
    full: float = 1.0

    @property
    def percent(self) -> bool:
        """Whether the value is a 0–1 share shown ×100 (else it is shown on its own scale)."""
        return self.scale == 100.0

    @property
    def shown_full(self) -> float:
        """The top of the scale the value is shown on (100 for a 0–1 value ×100; 10 for 0–10)."""
        return self.full * self.scale


@dataclass(frozen=True)
class Variant:
    """A way a rule scores (`finbench score --variant NAME`): its `name`, `rule` (what the reports
    say scored the answers) and `info_fields`, the fields of its table's `info` the score carries
    (FinMME's paper variant: the n it divides by)."""

    name: str
    rule: str
    info_fields: tuple[str, ...] = ()


ACCURACY = Metric("accuracy", "accuracy")  # mean per-question correctness: every rule has it
SCORE = Metric("score", "score")  # mean per-question score (== accuracy for a 0/1 rule)
GENERIC_METRICS = (ACCURACY, SCORE)
OFFICIAL = Variant("official", "the benchmark's official rule")


def undeclared(key: str) -> Metric:
    """A metric no declaration names (a run of a benchmark not registered in this process): shown
    ×100 under its key, higher is better."""
    return next((m for m in GENERIC_METRICS if m.key == key), None) or Metric(key, key)
