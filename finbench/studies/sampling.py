"""Repeated sampling (`--samples K`): every generated request asked K times, as more requests of
the same run.

Sample 0 is the run's own request (seed `--seed`); sample j = 1…K−1 is the same request with seed
seed + j in its sampling settings, so each sample is a field-for-field request of its own: its own
cache key, and its own batch kind (samples of one seed batch together). Which requests are sampled:
free generation (`Generate`: official protocols, open answers) and sessions — they carry
`--gen-kwargs` sampling settings (finbench/config/run_settings.py `for_run`) — and a thinking
block's reasoning before a constrained answer (sampled with the same settings, only with
--samples > 1: `adjust`; a run without it reasons greedily as always). A constrained letter or
number read from the logits without thinking is deterministic: it is asked once (one note). The
settings with their seeds: finbench/config/run_settings.py; how each seed draws its own random
stream: finbench/models/sampled_decoding.py. Scored in scoring/sampling_scores.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from finbench.config.options import Option
from finbench.config.run_settings import repeatable, sampled_settings, with_seed
from finbench.config.specs import RunConfig
from finbench.core.requests import Choose, Number
from finbench.core.types import Question
from finbench.studies.base import Column, Expanded, Study, StudyRows
from finbench.studies.cells import pct

COLUMNS = ["n", "mean ×100", "95% CI (clustered) ×100", "maj@k ×100", "pass@k ×100", "agreement ×100",
           "unparsed samples"]


def check(k: Any, config: RunConfig) -> None:
    """--samples, checked with the other options (one ValueError line)."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"--samples {k}: give the number of samples per generated request, 1 or more "
                         "(1: each asked once, as without --samples)")


def sample_frames(samples: Any, variants: Any, bases: Sequence[int], sample_of: Sequence[int], k: int) -> list[Any]:
    """The K tables of the sampled questions, each in the same question order: sample 0 the
    run's own rows (samples.parquet), sample j its variants rows. `bases[v]`, `sample_of[v]`: the
    base question and the sample of variants row v."""
    order = sorted({bases[v] for v in range(len(bases)) if sample_of[v] > 0})
    frames = [samples.iloc[order].reset_index(drop=True)]
    for j in range(1, k):
        rows: Mapping[int, int] = {bases[v]: v for v in range(len(bases)) if sample_of[v] == j}
        frames.append(variants.iloc[[rows[i] for i in order]].reset_index(drop=True))
    return frames


def _row(found: dict[str, Any]) -> list[str]:
    ci = found.get("ci") or {}
    interval = "–" if ci.get("low") is None else f"[{pct(ci['low'])}, {pct(ci['high'])}]"
    return [str(found["n"]), pct(found["mean"]), interval, pct(found["maj_at_k"]), pct(found["pass_at_k"]),
            pct(found["agreement"]), str(found.get("n_unparsed", "–"))]


class Sampling(Study):
    name = "sampling"
    option = Option("samples", 1, "Repeated sampling: every generated request K times, seeds seed…seed+K−1, "
                    "sampled as --gen-kwargs says (a temperature is needed); results.json['sampling'].", kind=int,
                    check=check, spec="studies")
    columns = (Column("sample", 0, "int — the sample J = 1…K−1 of repeated sampling, drawn with seed --seed + J (0 "
                    "for other rows)"),)

    def active(self, config: RunConfig) -> bool:
        return self.value(config) > 1

    def adjust(self, request: Any, config: RunConfig) -> Any:
        """A thinking block before a constrained answer sampled with the run's settings and seed
        (sample 0); one that has its sampling already (a sample j) as it is."""
        if not (isinstance(request, (Choose, Number)) and request.think_budget is not None) or request.sampling:
            return request
        settings = sampled_settings(config)
        return replace(request, sampling=with_seed(settings.items(), config.output.seed)) if settings else request

    def expand(self, benchmark: Any, questions: Sequence[Question], requests: Sequence[Any], config: RunConfig,
               think_budget: int | None, notes: list[str]) -> Expanded:
        """Samples 1…K−1 of every sampled request. Raises ValueError (a start-up line) when the
        run's generation is greedy: its K samples would be K copies."""
        k = self.value(config)
        if k <= 1:
            return Expanded()
        shown = [i for i, r in enumerate(requests) if repeatable(r)]
        constrained = sum(1 for r in requests if r is not None and not repeatable(r))
        if shown and not sampled_settings(config):
            raise ValueError(f"--samples {k}: decoding is greedy (no --gen-kwargs temperature), so all {k} samples "
                             "would be identical; pass a sampling temperature, e.g. --gen-kwargs temperature=0.7 "
                             "(top_p, top_k as wanted)")
        if constrained:
            notes.append(f"repeated sampling (--samples {k}): {constrained} constrained answer(s) read from the "
                         "logits (a letter, a set, a number, no thinking) are deterministic, so they are asked once "
                         "and are not in the sampling numbers")
        if not shown:
            notes.append(f"repeated sampling (--samples {k}): this run has no generated request to sample")
            return Expanded()
        out = []
        for j in range(1, k):
            for i in shown:
                request = replace(requests[i], sampling=with_seed(requests[i].sampling, config.output.seed + j))
                out.append((self.variant(i, f"sample-{j}", sample=j), questions[i], lambda request=request: request))
        return Expanded(out)

    def summary(self, found: StudyRows) -> dict[str, Any]:
        from finbench.scoring.sampling_scores import sampling_summary

        k = self.value(found.config)
        frames = sample_frames(found.samples, found.rows, [v.base for v in found.variants],
                               [v.get("sample", 0) for v in found.variants], k)
        return sampling_summary(frames, found.benchmark, k)

    def question_means(self, samples: Any, rows: Any, benchmark: Any) -> Any:
        from finbench.scoring.sampling_scores import per_question_means

        return per_question_means(samples, rows, benchmark)

    def console_lines(self, block: Any, benchmark: str | None = None) -> list[str]:
        if not block:
            return []
        if not block["n"]:
            unscored = block.get("n_unscored") or 0
            return [f"repeated sampling (K {block['k']}): {unscored} sampled questions, none with a per-question "
                    "score (variants.parquet holds the samples)" if unscored
                    else f"repeated sampling (K {block['k']}): no generated answer sampled (see the notes)"]
        n, mean, interval, maj, passed, agree, unparsed = _row(block)
        return [f"repeated sampling (K {block['k']}, {n} questions, ×100): mean {mean} {interval} · maj@k {maj} · "
                f"pass@k {passed} · agreement {agree} (parsed answers; {unparsed} unparsed samples)"]

    def section(self, block: Any, benchmark: str | None = None) -> dict[str, Any] | None:
        """Overall, then every breakdown's groups."""
        if not block:
            return None
        tables = [{"header": ["", *COLUMNS], "rows": [["all", *_row(block)]]}]
        for column, groups in (block.get("by") or {}).items():
            tables.append({"header": [column, *COLUMNS], "rows": [[g, *_row(v)] for g, v in groups.items()]})
        return {"id": "sampling", "title": f"Repeated sampling (K = {block['k']})", "tables": tables,
                "note": "Every generated answer asked K times with seeds seed…seed+K−1. mean: over all samples, with "
                        "the clustered 95% interval of the per-question means (t, G − 1 degrees of freedom); maj@k: "
                        "the most frequent parsed answer's score; pass@k: the best sample's; agreement: the share of "
                        "a question's parsed samples giving its modal answer (an unparsed sample is no vote)."}


STUDY = Sampling()
