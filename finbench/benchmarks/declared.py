"""What a registered benchmark's rule declares, looked up by the benchmark's name: its `Scorer`,
metric labels and directions, parts (benchmarks/scorer.py, metrics.py, parts.py). Shared by the
reports (report/format.py) and the studies' lines (finbench/studies/), below both."""

from __future__ import annotations

from typing import Any

from finbench.benchmarks import get_benchmark
from finbench.benchmarks.metrics import Metric, undeclared
from finbench.benchmarks.parts import Part
from finbench.benchmarks.scorer import Scorer, resolved


def declared_scorer(benchmark: str | None) -> Scorer | None:
    """The `Scorer` of a benchmark registered in this process (its declarations: metrics, parts,
    variants); None for a score of a benchmark not registered here, shown under its own keys."""
    if not benchmark:
        return None

    try:
        return resolved(get_benchmark(str(benchmark)).scorer)
    except ValueError:
        return None


def metric_of(benchmark: str | None, key: str) -> Metric:
    """The declaration of metric `key` of the benchmark's rule (an undeclared one: its key, ×100)."""
    scorer = declared_scorer(benchmark)
    return scorer.metric(key) if scorer is not None else undeclared(key)


def metric_label(benchmark: str | None, key: str) -> str:
    return metric_of(benchmark, key).label


def metric_labels(benchmark: str | None, keys: Any) -> dict[str, str]:
    """{key: label} of the metrics `keys` (the templates' `labels`)."""
    return {key: metric_label(benchmark, key) for key in keys}


def penalties(benchmark: str | None, keys: Any) -> set[str]:
    """The metrics among `keys` the rule declares lower-is-better (FinMME's P_H)."""
    return {key for key in keys if not metric_of(benchmark, key).higher_is_better}


def declared_parts(benchmark: str | None) -> tuple[Part, ...]:
    """The parts the benchmark's rule scores apart, as its `Scorer` declares them; none for a
    benchmark not registered in this process (its scores are shown without parts rather than not
    at all)."""
    scorer = declared_scorer(benchmark)
    return () if scorer is None else scorer.parts
