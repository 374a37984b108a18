"""The study contract: a robustness or sampling study asks a run's questions again, changed, as
more requests of the same run (one batch loop, one cache), and reports what the answers show.

A study file (finbench/studies/circular.py is the model) defines one subclass of `Study` and ends
in `STUDY = ...`; finbench/studies/__init__.py registers it (`register_study`, also for a study
defined outside finbench). A study declares:
- `name`: the `study` column of variants.parquet; `key`: its block of results.json (default: name);
- `option`: its `Option` (finbench/config/options.py): the `finbench run` flag, the `sweep` flag where
  `sweep=True`, the API keyword and the start-up check, all from this one declaration; the run's
  value is `study.value(config)` (RunConfig.studies, the option's default when absent);
- `columns`: the variants.parquet columns it fills, each with its empty value (other studies'
  rows hold that);
- `expand`: its variants of the run's questions — (Variant, question, request maker) triples;
- `judging`: the `Judging` (finbench/core/judging.py) a judge model uses for one of its variants in
  the benchmark's place (None: the benchmark's own);
- `rescore`, `summary`: its rows of the variants table scored again where it scores its own way,
  and its results.json block; `headline`: the numbers `compare` and `sweep` show side by side;
- `console_lines`, `section`, `compare_columns`: how the console, report.md/report.html and the
  comparison tables render its block.
The engine (runner/studies.py) loops over the active studies and names none of them. This module
imports nothing heavy: the command line builds its flags from the registry before torch loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

from finbench.config.options import Option
from finbench.config.specs import RunConfig
from finbench.core.judging import Judging
from finbench.core.types import Question

if TYPE_CHECKING:
    import pandas as pd

    from finbench.benchmarks.base import Benchmark
    from finbench.core.requests import Request

Maker = Callable[[], "Request"]  # builds a variant's request; what it raises is that variant's error


class Column(NamedTuple):
    """A variants.parquet column a study fills: its name, the value the other studies' rows hold,
    and what it means (report/schema.py lists it)."""

    name: str
    empty: Any
    meaning: str = ""


@dataclass(frozen=True)
class Variant:
    """One more asking of the question at `base`, by the study `study`: `name` is the
    variants.parquet `variant` (e.g. rotation-1), `fields` the study's own columns' values."""

    base: int
    study: str
    name: str
    fields: tuple[tuple[str, Any], ...] = ()

    def get(self, column: str, default: Any = None) -> Any:
        """The value of one of the study's columns (`default` when it does not fill it)."""
        return dict(self.fields).get(column, default)


@dataclass
class Expanded:
    """What a study adds to a run: its variants, and what its summary needs to know of those it
    left out (`state`: items not rotated, probes' reasons, …)."""

    variants: list[tuple[Variant, Question, Maker]] = field(default_factory=list)
    state: Any = None


@dataclass
class StudyRows:
    """What a study's summary sees: the run's scored samples, its own rows of the variants table
    (index reset) with their `variants` in the same order, the benchmark, the config and the
    state its `expand` returned."""

    samples: pd.DataFrame
    rows: pd.DataFrame
    variants: list[Variant]
    benchmark: Benchmark
    config: RunConfig
    state: Any = None


class Study:
    """One study; a subclass overrides what it does (the defaults do nothing)."""

    name: str = ""
    key: str = ""  # results.json key (default: `name`)
    option: Option
    columns: tuple[Column, ...] = ()  # the variants.parquet columns it fills

    @property
    def block(self) -> str:
        """Its results.json key."""
        return self.key or self.name

    def value(self, config: RunConfig) -> Any:
        """The run's value of the study's option (its default when the config does not hold it)."""
        return dict(config.studies).get(self.option.name, self.option.default)

    def active(self, config: RunConfig) -> bool:
        """Whether the run asks for this study."""
        return bool(self.value(config))

    def variant(self, base: int, name: str, **fields: Any) -> Variant:
        return Variant(base, self.name, name, tuple(fields.items()))

    def adjust(self, request: Request, config: RunConfig) -> Request:
        """A request of the run (its own, or any study's variant) as this study needs it asked."""
        return request

    def expand(self, benchmark: Benchmark, questions: Sequence[Question], requests: Sequence[Request | None],
               config: RunConfig, think_budget: int | None, notes: list[str]) -> Expanded:
        """Its variants of the run's questions; a note for what it leaves out. A ValueError is a
        start-up line (a value no item of this run can honour)."""
        return Expanded()

    def judging(self, variant: Variant, config: RunConfig) -> Judging | None:
        """The judging of one of its variants in the benchmark's place (None: the benchmark's)."""
        return None

    def rescore(self, rows: pd.DataFrame, config: RunConfig) -> pd.DataFrame:
        """Its rows of the variants table, `correct` as it scores them (default: the benchmark's)."""
        return rows

    def summary(self, found: StudyRows) -> Any:
        """Its results.json block."""
        return None

    def headline(self, block: Any) -> Any:
        """The numbers of its block `compare` and `sweep` show side by side (None: none)."""
        return None

    def console_lines(self, block: Any, benchmark: str | None = None) -> list[str]:
        return []

    def section(self, block: Any, benchmark: str | None = None) -> dict[str, Any] | None:
        """Its report section {id, title, tables: [{header, rows}], note}."""
        return None

    def compare_columns(self, headlines: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        """(header cells, one list of cells per run) from each run's `headline` (or None)."""
        return [], [[] for _ in headlines]

    def question_means(self, samples: pd.DataFrame, rows: pd.DataFrame, benchmark: Any) -> Any:
        """Per-question scores (by id) that a paired comparison should use instead of the run's
        own answers (e.g. the mean over repeated samples); None: the run's own."""
        return None
