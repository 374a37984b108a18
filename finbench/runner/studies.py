"""The run's studies (finbench/studies/: circular evaluation, image ablation, repeated sampling,
contamination probes, and any registered one) as more requests of the same run.

`expand` lets every study the run asks for adjust the run's own requests, then puts each study's
variants — (variant, question, request maker) — after the run's questions, so the engine computes
base and variant requests in one batch loop (they batch by kind), each cached under its own key.
`Studies.finish` splits the answers: the base ones go to samples.parquet exactly as without
studies, the variants to variants.parquet (one row per question × variant: `variant`, `study` and
every registered study's columns), and each study's block to results.json — with the majority and
prior baselines, which need no variant and are scored on every run. This module names no study.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from finbench.benchmarks.base import Benchmark
from finbench.config.specs import RunConfig
from finbench.core.judging import Judging
from finbench.core.requests import Request
from finbench.core.types import Prediction, Question
from finbench.runner.outputs import samples_table
from finbench.runner.run_requests import read_by
from finbench.scoring.robustness import majority_baselines
from finbench.scoring.tables import per_question_correct
from finbench.studies import active_studies, all_studies, flat_config
from finbench.studies.base import Study, StudyRows, Variant

__all__ = ["Studies", "Variant", "expand", "flat_config"]


@dataclass(frozen=True)
class Studies:
    """The run's questions and requests followed by its variants' (`questions[n_base:]`)."""

    n_base: int
    questions: list[Question]
    requests: list[Request | None]
    errors: dict[int, str]
    variants: list[Variant] = field(default_factory=list)
    config: RunConfig | None = None
    states: dict[str, Any] = field(default_factory=dict)  # per study: what its expand kept for its summary

    def counts(self, keys: Sequence[str], cached: Mapping[str, Any], todo: Sequence[int]) -> dict[str, int]:
        """results.json's n_cached and n_computed: of the run's own questions (the variants' are
        under `variants`)."""
        return {"n_cached": sum(1 for key in keys[:self.n_base] if key in cached),
                "n_computed": sum(1 for i in todo if i < self.n_base)}

    def judged_questions(self) -> list[Question]:
        """The questions as the judge sees them: a variant judged against its base question's own
        images (an answer given without the chart is still judged with it, as the official judge
        sees the chart)."""
        out = list(self.questions)
        for offset, variant in enumerate(self.variants):
            index = self.n_base + offset
            out[index] = dataclasses.replace(out[index], images=self.questions[variant.base].images)
        return out

    def judging(self) -> dict[int, Judging]:
        """{question: the `Judging` the judge uses in the benchmark's place}: the variants a study
        judges its own way."""
        studies = {study.name: study for study in all_studies()}
        out = {}
        for offset, variant in enumerate(self.variants):
            found = studies[variant.study].judging(variant, self.config) if self.config is not None else None
            if found is not None:
                out[self.n_base + offset] = found
        return out

    def finish(self, benchmark: Benchmark, predictions: Mapping[int, Prediction], keys: Sequence[str],
               judged_columns: Mapping[str, Sequence[Any]], samples: Any, cached: Mapping[str, Any],
               todo: Sequence[int], readings: Mapping[str, str] | None = None) -> tuple[dict[str, Any], Any]:
        """(results.json's study entries, the variants table or None). `samples` is the scored base
        table; `judged_columns` the judging columns of every question, base and variants; `readings`
        the model's declared reading per kind (`read_by`, as for the base rows)."""
        studied: dict[str, Any] = {"majority_baseline": majority_baselines(samples)}
        active = active_studies(self.config) if self.config is not None else []
        if not active:
            return studied, None
        table = self._table(benchmark, predictions, keys, judged_columns, readings)
        for study in active:
            rows = (table["study"] == study.name).to_numpy()
            found = StudyRows(samples, table[rows].reset_index(drop=True),
                              [v for v in self.variants if v.study == study.name], benchmark, self.config,
                              self.states.get(study.name))
            studied[study.block] = study.summary(found)
        n = self.n_base
        studied["variants"] = {"n": len(self.variants), "n_cached": sum(1 for key in keys[n:] if key in cached),
                               "n_computed": sum(1 for i in todo if i >= n),
                               "n_errors": int((table["error"] != "").sum()) if len(table) else 0,
                               "file": "variants.parquet" if len(table) else None}
        return studied, table if len(table) else None

    def _table(self, benchmark: Benchmark, predictions: Mapping[int, Prediction], keys: Sequence[str],
               judged_columns: Mapping[str, Sequence[Any]], readings: Mapping[str, str] | None = None) -> Any:
        """The variants table, scored: the benchmark's verdicts, then each study's own rescoring of
        its rows."""
        n = self.n_base
        table = samples_table(self.questions[n:], {j: predictions[n + j] for j in range(len(self.variants))}, keys[n:])
        table["read_by"] = read_by(self.requests[n:], readings)
        for column, values in judged_columns.items():
            table[column] = list(values[n:])
        columns = [("variant", [v.name for v in self.variants]), ("study", [v.study for v in self.variants])]
        for study in all_studies():
            columns += [(c.name, [v.get(c.name, c.empty) for v in self.variants]) for c in study.columns]
        for position, (column, values) in enumerate(columns):
            table.insert(1 + position, column, values)
        if not len(table):
            table["correct"] = []
            return table
        table = table.assign(correct=np.asarray(per_question_correct(table, benchmark), dtype=np.float64))
        for study in active_studies(self.config):
            rows = (table["study"] == study.name).to_numpy()
            if not rows.any():
                continue
            rescored = study.rescore(table[rows], self.config)
            for column in rescored.columns:  # only what it changed: the other columns keep their types
                if column not in table.columns or not rescored[column].equals(table.loc[rows, column]):
                    table.loc[rows, column] = rescored[column].to_numpy()
        return table


def expand(benchmark: Benchmark, questions: Sequence[Question], requests: Sequence[Request | None],
           errors: Mapping[int, str], config: RunConfig, think_budget: int | None, notes: list[str]) -> Studies:
    """The run's questions and requests (as the active studies adjust them) followed by every
    variant they ask for. Raises ValueError (a start-up line) for a study value no item of this
    run can honour (e.g. more orders than any item has options)."""
    active = active_studies(config)
    requests = [None if r is None else _adjusted(r, active, config) for r in requests]
    all_questions, all_requests, all_errors = list(questions), list(requests), dict(errors)
    variants: list[Variant] = []
    states: dict[str, Any] = {}
    for study in active:
        expanded = study.expand(benchmark, questions, requests, config, think_budget, notes)
        states[study.name] = expanded.state
        for variant, question, make in expanded.variants:
            index = len(all_questions)
            variants.append(variant)
            all_questions.append(question)
            try:
                all_requests.append(_adjusted(make(), active, config))
            except Exception as err:  # noqa: BLE001 — a variant that cannot be built is that variant's error
                all_requests.append(None)
                all_errors[index] = f"bad request: {type(err).__name__}: {err}"
    return Studies(len(questions), all_questions, all_requests, all_errors, variants, config, states)


def _adjusted(request: Request, active: Sequence[Study], config: RunConfig) -> Request:
    for study in active:
        request = study.adjust(request, config)
    return request
