"""Image ablation (`--image-ablation blank,noise,none`): every single-turn item that shows an image
asked again with every image white (blank), uniform noise seeded by the image (noise) or removed
from the prompt (none: no image part, no image decoded) — the prompt's `ablated`
(finbench/core/requests.py). Scored in scoring/robustness.py `ablation_summary`: the headline score and
accuracy on the ablated items against the base run's on the same items (`retained`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from finbench.benchmarks.declared import metric_label
from finbench.benchmarks.metrics import ACCURACY
from finbench.config.options import Option
from finbench.config.specs import RunConfig
from finbench.core.requests import IMAGE_ABLATIONS, Session
from finbench.core.types import Question
from finbench.studies.base import Column, Expanded, Study, StudyRows
from finbench.studies.cells import kept, pct, ratio

HEADLINE = ("n", "metric", "base_score", "score", "retained", "base_accuracy", "accuracy", "retained_accuracy")


def check_names(flag: str, kind: str, given: Sequence[str], known: Sequence[str]) -> None:
    """A comma-separated list of names: each known, none twice (one ValueError line)."""
    unknown = [name for name in given if name not in known]
    if unknown:
        raise ValueError(f"{flag} {','.join(given)}: unknown {kind} {unknown[0]!r}; expected {', '.join(known)} "
                         "(comma-separated)")
    if len(set(given)) != len(given):
        raise ValueError(f"{flag} {','.join(given)}: a {kind} is named twice")


def _label(benchmark: str | None, key: str) -> str:
    """The label the benchmark's scorer declares for its metric `key` (benchmarks/declared.py)."""
    return metric_label(benchmark, key)


class ImageAblation(Study):
    name = "image_ablation"
    option = Option("image_ablation", (), "Image ablation: the same items again with every image blank, noise or "
                    "none (removed); comma-separated or repeated; results.json['image_ablation'].", many=True,
                    check=lambda modes, config: check_names("--image-ablation", "mode", modes, IMAGE_ABLATIONS),
                    spec="studies", sweep=True)
    columns = (Column("ablation", "", "str — blank | noise | none ('' for rotation rows)"),)

    def expand(self, benchmark: Any, questions: Sequence[Question], requests: Sequence[Any], config: RunConfig,
               think_budget: int | None, notes: list[str]) -> Expanded:
        """A variant per mode of every item that shows an image; a "none" variant's question
        carries no image, so none is decoded."""
        modes = self.value(config)
        if not modes:
            return Expanded()
        shown = [i for i, r in enumerate(requests) if r is not None and not isinstance(r, Session) and r.prompt.images]
        sessions = sum(1 for r in requests if isinstance(r, Session) and r.images)
        if sessions:
            notes.append(f"image ablation: {sessions} multi-turn item(s) (sessions) keep their images and are left out")
        if not shown:
            notes.append("image ablation (--image-ablation): no single-turn item of this run shows an image")
        out = []
        for mode in modes:
            for i in shown:
                question = dataclasses.replace(questions[i], images=()) if mode == "none" else questions[i]
                request = requests[i]
                out.append((self.variant(i, f"ablation-{mode}", ablation=mode), question,
                            lambda request=request, mode=mode: dataclasses.replace(
                                request, prompt=request.prompt.ablated(mode))))
        return Expanded(out)

    def summary(self, found: StudyRows) -> dict[str, Any]:
        from finbench.scoring.robustness import ablation_summary

        return ablation_summary(found.samples, found.rows, found.benchmark, found.benchmark.domain_field)

    def headline(self, block: Any) -> Any:
        return {mode: {k: f.get(k) for k in HEADLINE} for mode, f in block.items()} if block else None

    def console_lines(self, block: Any, benchmark: str | None = None) -> list[str]:
        return [f"image ablation {mode} ({f['n']} items, ×100): {_label(benchmark, f['metric'])} "
                f"{pct(f['base_score'])} → {pct(f['score'])} ({kept(f['retained'])})"
                + ("" if f["metric"] == ACCURACY.key else  # the headline is accuracy: said once
                   f" · accuracy {pct(f['base_accuracy'])} → {pct(f['accuracy'])} ({kept(f['retained_accuracy'])})")
                for mode, f in (block or {}).items()]

    def section(self, block: Any, benchmark: str | None = None) -> dict[str, Any] | None:
        if not block:
            return None
        also = any(f["metric"] != ACCURACY.key for f in block.values())  # accuracy columns beside another headline
        summary = [[mode, str(f["n"]), _label(benchmark, f["metric"]), pct(f["base_score"]), pct(f["score"]),
                    ratio(f["retained"]), *([pct(f["base_accuracy"]), pct(f["accuracy"]), ratio(f["retained_accuracy"])]
                                            if also else [])]
                   for mode, f in block.items()]
        domains = [[d, mode, str(g["n"]), pct(g["base"]), pct(g["ablated"]), ratio(g["retained"])]
                   for mode, f in block.items() for d, g in f.get("by_domain", {}).items()]
        tables = [{"header": ["mode", "n", "headline", "base ×100", "ablated ×100", "retained",
                              *(["base accuracy ×100", "ablated accuracy ×100", "accuracy retained"] if also else [])],
                   "rows": summary}]
        if domains:
            tables.append({"header": ["domain", "mode", "n", "base accuracy ×100", "ablated accuracy ×100",
                                      "retained"], "rows": domains})
        return {"id": "image-ablation", "title": "Image ablation", "tables": tables,
                "note": "The items that show an image, asked again with every image white (blank), uniform noise "
                        "seeded by the image (noise) or removed from the prompt (none); retained = ablated / base on "
                        "the same items: what survives without the chart is answered from the text alone."}

    def compare_columns(self, headlines: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        modes = sorted({mode for h in headlines.values() for mode in (h or {})})
        cells = [[ratio(((h or {}).get(mode) or {}).get("retained")) for mode in modes] for h in headlines.values()]
        return [f"{mode}: retained" for mode in modes], cells


STUDY = ImageAblation()
