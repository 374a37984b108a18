"""The scorer contract, without torch: `Scorer` (a benchmark's scoring rule as `score_samples` and
`compare_runs` call it) and `ScorerModule` (a scorer named by the module that defines it).

A benchmark file declares its scorer as `ScorerModule("finbench.scoring.<name>")`: one benchmark
stays one file, one scorer one file (scoring/<name>.py, ending in its `SCORER`), and the scorer —
its tensors, pandas, torch — is imported the first time something scores, not when the registry
is read. So `import finbench.benchmarks` (names, protocols, declarations) stays torch-free and a
mistyped `--benchmark` or `--protocol` is refused at once (tests/test_registry_torch_free.py).
A module path rather than a split of every scorer into a declaration file and a tensor file: the
registry needs no scorer field before scoring, and the demo's writer is named the same way
(`Demo.module`, benchmarks/base.py). A benchmark defined outside finbench may name its module
the same way or pass its `Scorer` itself."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from finbench.benchmarks.metrics import ACCURACY, OFFICIAL, Metric, Variant, undeclared
from finbench.benchmarks.parts import Part

if TYPE_CHECKING:
    import pandas as pd

ScoreTable = Any  # scoring/stats.py's, which imports torch (and this module): named here by its role only


def _no_summary(df: pd.DataFrame, table: ScoreTable, estimates: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def _same_frame(df: pd.DataFrame) -> pd.DataFrame:
    return df


@dataclass(frozen=True)
class Scorer:
    """A benchmark's scoring rule as `score_samples` and `compare_runs` call it (scoring/tables.py):
    `build_table(df, variant=..., device=..., **options)` → ScoreTable; `summary(df, table,
    estimates)` → the rule's own fields of the score (counts, side scores); `group_frame(df)` →
    df with derived breakdown columns (e.g. FAMMA's arithmetic × language); `parts` → the parts
    `summary` scores apart, in display order; `metrics` → every metric its tables' headlines
    can name (label, direction, scale, the count behind it: benchmarks/metrics.py), in display
    order; `variants` → the ways it scores, the official rule first; `breakdown_columns(df)` → the
    breakdowns of a table whose breakdowns are its data's own (a custom file's columns), read from
    the table (None: the benchmark's `group_columns`)."""

    build_table: Callable[..., ScoreTable]
    variants: tuple[Variant, ...] = (OFFICIAL,)
    summary: Callable[[pd.DataFrame, ScoreTable, Mapping[str, Any]], dict[str, Any]] = _no_summary
    group_frame: Callable[[pd.DataFrame], pd.DataFrame] = _same_frame
    parts: tuple[Part, ...] = ()
    metrics: tuple[Metric, ...] = (ACCURACY,)
    breakdown_columns: Callable[[pd.DataFrame], tuple[str, ...]] | None = None

    def metric(self, key: str) -> Metric:
        """The declared metric `key` (an undeclared one: shown ×100 under its key)."""
        return next((m for m in self.metrics if m.key == key), None) or undeclared(key)

    def variant(self, name: str) -> Variant:
        """The declared variant `name`; a ValueError naming the ones there are."""
        found = next((v for v in self.variants if v.name == name), None)
        if found is None:
            raise ValueError(f"variant {name!r}: this rule has {', '.join(repr(v.name) for v in self.variants)}")
        return found


SCORER_FIELDS = frozenset(f.name for f in dataclasses.fields(Scorer)) | {"metric", "variant"}  # fields, look-ups


@dataclass(frozen=True)
class ScorerModule:
    """The `SCORER` of `module`, imported on first use: reading one of the `Scorer`'s fields
    (`build_table`, `variants`, `summary`, `group_frame`, `parts`, `metrics`) or its look-ups
    (`metric`, `variant`) imports the module once (Python
    keeps it) and answers from its `SCORER`, so the rest of finbench reads `benchmark.scorer.parts`
    whichever way the benchmark declared it."""

    module: str

    @property
    def scorer(self) -> Scorer:
        found = getattr(importlib.import_module(self.module), "SCORER", None)
        if not isinstance(found, Scorer):
            raise TypeError(f"{self.module}: its SCORER is not a finbench Scorer")
        return found

    def __getattr__(self, name: str) -> Any:  # only for names the instance lacks: the Scorer's fields
        if name not in SCORER_FIELDS:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(self.scorer, name)


def resolved(scorer: Scorer | ScorerModule) -> Scorer:
    """The `Scorer` itself, whichever way a benchmark declared it."""
    return scorer.scorer if isinstance(scorer, ScorerModule) else scorer
