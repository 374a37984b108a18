"""Robustness studies as more requests of the same run: circular evaluation and image ablation.

`expand` puts, after the run's questions, one variant question and request
- per rotation of a constrained choice item's options (`--permutations K`: rotations 1..k−1,
  k = min(K, the item's option count); the benchmark's `rotate` moves the options and the gold
  letters, its `request` renders them, and the rotation is a field of the request), and
- per image ablation mode (`--image-ablation blank,noise,none`: the prompt's `ablated`; "none"
  shows no image part and decodes no image),
and one per contamination probe of a constrained single-answer choice item (`--probe`,
runner/probes.py: its gold option's text replaced by "None of the above", or asked open-ended),
so the engine computes base and variant requests in one batch loop (they batch by kind), each
cached under its own key. `Studies.finish` splits the answers: the base ones go to
samples.parquet exactly as without studies, the variants to variants.parquet (one row per
question × variant), and the studies' numbers (scoring/robustness.py) to results.json — with the
majority and prior baselines, which need no variant and are scored on every run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, names_other_options
from finbench.requests import Choose, Request, Session
from finbench.runner.outputs import samples_table
from finbench.runner.probes import OPEN_ENDED_JUDGING, probe_variants
from finbench.runner.requests import for_run
from finbench.runner.sampling import sample_frames, sample_variants
from finbench.scoring.robustness import (ABLATION, CIRCULAR, ablation_summary, circular_summary,
                                         majority_baselines)
from finbench.scoring.sampling import SAMPLING, sampling_summary
from finbench.scoring.probes import OPEN_ENDED, PROBE, probe_summary, probe_verdicts
from finbench.types import Prediction, Question, RunConfig


@dataclass(frozen=True)
class Variant:
    """One more asking of the question at `base`: rotated by `rotation`, with its images ablated,
    sampled again with seed + `sample` (repeated sampling, runner/sampling.py), or as a contamination
    `probe` (runner/probes.py)."""

    base: int
    study: str  # CIRCULAR, ABLATION, SAMPLING or PROBE
    rotation: int = 0
    ablation: str = ""
    sample: int = 0
    probe: str = ""

    @property
    def name(self) -> str:
        if self.study == SAMPLING:
            return f"sample-{self.sample}"
        if self.study == PROBE:
            return f"probe-{self.probe}"
        return f"rotation-{self.rotation}" if self.study == CIRCULAR else f"ablation-{self.ablation}"


@dataclass
class Studies:
    """The run's questions and requests followed by its variants' (`questions[n_base:]`)."""

    n_base: int
    questions: list[Question]
    requests: list[Request | None]
    errors: dict[int, str]
    variants: list[Variant] = field(default_factory=list)
    config: RunConfig | None = None
    n_not_rotatable: int = 0  # choice items whose options name other options: asked once
    not_probed: dict[str, dict[str, int]] = field(default_factory=dict)  # per probe: {reason: items}

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

    def judging(self) -> dict[int, Any]:
        """{question: what the judge is asked in the benchmark's place}: each open-ended probe row is
        matched to its gold option's text by a generic prompt (runner/probes.py), not judged as
        the benchmark judges its own items."""
        return {self.n_base + offset: OPEN_ENDED_JUDGING for offset, variant in enumerate(self.variants)
                if variant.study == PROBE and variant.probe == OPEN_ENDED}

    def finish(self, benchmark: Benchmark, predictions: Mapping[int, Prediction], keys: Sequence[str],
               judged_columns: Mapping[str, Sequence[Any]], samples: Any, cached: Mapping[str, Any],
               todo: Sequence[int]) -> tuple[dict[str, Any], Any]:
        """(results.json's study entries, the variants table or None). `samples` is the scored base
        table; `judged_columns` the judging columns of every question, base and variants."""
        from finbench.scoring import per_question_correct

        studied: dict[str, Any] = {"majority_baseline": majority_baselines(samples)}
        if self.config is None or not (self.config.permutations or self.config.image_ablation or
                                       self.config.samples > 1 or self.config.probes):
            return studied, None
        n = self.n_base
        table = samples_table(self.questions[n:], {j: predictions[n + j] for j in range(len(self.variants))},
                              keys[n:])
        for column, values in judged_columns.items():
            table[column] = list(values[n:])
        for position, (column, values) in enumerate((
                ("variant", [v.name for v in self.variants]), ("study", [v.study for v in self.variants]),
                ("rotation", [v.rotation for v in self.variants]), ("ablation", [v.ablation for v in self.variants]),
                ("sample", [v.sample for v in self.variants]),
                ("probe", [v.probe for v in self.variants]))):
            table.insert(1 + position, column, values)
        if len(table):  # the open-ended probe's free answers are matched to the gold text here (or judged)
            table = probe_verdicts(table, per_question_correct(table, benchmark.name), bool(self.config.judging.judge))
        else:
            table["correct"] = []
        if self.config.permutations:
            studied["circular"] = circular_summary(samples, table, self.config.permutations, benchmark.domain_field,
                                                   self.n_not_rotatable)
        if self.config.image_ablation:
            studied["image_ablation"] = ablation_summary(samples, table, benchmark.name, benchmark.domain_field)
        if self.config.samples > 1:
            studied["sampling"] = sampling_summary(sample_frames(samples, table, [v.base for v in self.variants], [
                v.sample for v in self.variants], self.config.samples), benchmark.name, self.config.samples)
        if self.config.probes:
            studied["probes"] = probe_summary(samples, table, self.config.probes, self.not_probed,
                                              bool(self.config.judging.judge))
        studied["variants"] = {"n": len(self.variants), "n_cached": sum(1 for key in keys[n:] if key in cached),
                               "n_computed": sum(1 for i in todo if i >= n),
                               "n_errors": int((table["error"] != "").sum()) if len(table) else 0,
                               "file": "variants.parquet" if len(table) else None}
        return studied, table if len(table) else None


def expand(benchmark: Benchmark, questions: Sequence[Question], requests: Sequence[Request | None],
           errors: Mapping[int, str], config: RunConfig, think_budget: int | None, notes: list[str]) -> Studies:
    """The run's questions and requests followed by every variant the studies ask for. Raises
    ValueError (a start-up line) for --permutations above every rotatable item's option count."""
    studies = Studies(len(questions), list(questions), list(requests), dict(errors), config=config)
    rotations, studies.n_not_rotatable = _rotations(benchmark, questions, requests, config, think_budget, notes)
    samples = [(Variant(i, SAMPLING, sample=j), question, lambda request=request: request)
               for i, j, question, request in sample_variants(questions, requests, config, notes)]
    probes, studies.not_probed = probe_variants(benchmark, questions, requests, config, think_budget, notes,
                                                lambda base, probe: Variant(base, PROBE, probe=probe))
    for variant, question, make in [*rotations, *_ablations(questions, requests, config, notes), *samples,
                                    *probes]:
        index = len(studies.questions)
        studies.variants.append(variant)
        studies.questions.append(question)
        try:
            studies.requests.append(make())
        except Exception as err:  # noqa: BLE001 — a variant that cannot be built is that variant's error
            studies.requests.append(None)
            studies.errors[index] = f"bad request: {type(err).__name__}: {err}"
    return studies


def _rotations(benchmark: Benchmark, questions: Sequence[Question], requests: Sequence[Request | None],
               config: RunConfig, think_budget: int | None,
               notes: list[str]) -> tuple[list[tuple[Variant, Question, Any]], int]:
    """((variant, rotated question, its request's maker) for every rotation of every choice item,
    the number of choice items not rotated because an option names other options)."""
    k = config.permutations
    choices = [i for i, r in enumerate(requests) if isinstance(r, Choose) and r.n_options >= 2]
    if k < 2:
        return [], 0
    if not choices:
        notes.append("circular evaluation (--permutations): this run has no constrained choice item to rotate")
        return [], 0
    rotatable = [i for i in choices if benchmark.rotate(questions[i], 1) is not None]
    naming = [i for i in choices if i not in set(rotatable)
              and names_other_options(questions[i].options, questions[i].letters)]
    if not (rotatable or len(naming) == len(choices)):  # a benchmark that rotates nothing: not for this reason
        naming = []
    if naming:
        notes.append(f"circular evaluation: {len(naming)} choice item(s) have an option that names other options "
                     "(\"All of the above\", \"Both A and C\", 以上都是, …), which a rotation would make false: asked "
                     "only in their published order, not in the circular numbers (n_not_rotatable)")
        choices = [i for i in choices if i not in set(naming)]
    if not rotatable:
        if choices:
            notes.append(f"circular evaluation does not apply to {benchmark.name}: its prompts do not render the "
                         f"options apart from the question text, so they cannot be rotated honestly; its "
                         f"{len(choices)} choice items are asked once")
        return [], len(naming)
    most = max(requests[i].n_options for i in rotatable)
    if k > most:
        raise ValueError(f"--permutations {k}: the choice items of this run have at most {most} options, so at most "
                         f"{most} orders")
    out = []
    unchanged = 0
    for i in rotatable:
        base = requests[i]
        for shift in range(1, min(k, base.n_options)):
            rotated = benchmark.rotate(questions[i], shift) or questions[i]
            try:
                request = replace(for_run(benchmark.request(rotated, config.protocol), config, think_budget),
                                  rotation=shift)
            except Exception as err:  # noqa: BLE001 — raised again by the maker: that variant's error
                out.append((Variant(i, CIRCULAR, rotation=shift), rotated, _raises(err)))
                continue
            if request.prompt == base.prompt:  # identical options, or a prompt that ignores their order
                unchanged += 1
                break
            out.append((Variant(i, CIRCULAR, rotation=shift), rotated, lambda request=request: request))
    if unchanged:
        notes.append(f"circular evaluation: {unchanged} choice item(s) read the same in every order (repeated "
                     "options) and are not rotated")
    if len(rotatable) < len(choices):
        notes.append(f"circular evaluation: {len(choices) - len(rotatable)} choice item(s) cannot be rotated and "
                     "are asked once")
    return out, len(naming)


def _raises(err: Exception) -> Any:
    def make() -> Any:
        raise err
    return make


def _ablations(questions: Sequence[Question], requests: Sequence[Request | None], config: RunConfig,
               notes: list[str]) -> list[tuple[Variant, Question, Any]]:
    """(variant, question, its request's maker) for every ablation mode of every item that shows an
    image; a "none" variant's question carries no image, so none is decoded."""
    if not config.image_ablation:
        return []
    shown = [i for i, r in enumerate(requests) if r is not None and not isinstance(r, Session) and r.prompt.images]
    sessions = sum(1 for r in requests if isinstance(r, Session) and r.images)
    if sessions:
        notes.append(f"image ablation: {sessions} multi-turn item(s) (sessions) keep their images and are left out")
    if not shown:
        notes.append("image ablation (--image-ablation): no single-turn item of this run shows an image")
    out = []
    for mode in config.image_ablation:
        for i in shown:
            question = dataclasses.replace(questions[i], images=()) if mode == "none" else questions[i]
            request = requests[i]
            out.append((Variant(i, ABLATION, ablation=mode), question,
                        lambda request=request, mode=mode: replace(request, prompt=request.prompt.ablated(mode))))
    return out
