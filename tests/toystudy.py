"""A study defined outside finbench — its option, variants, summary, report section and comparison
column — to prove that adding a study is its own file plus one `register_study` call
(tests/test_register_study.py). Nothing under finbench/ knows it.

The nudge study (`--nudge TEXT`): every constrained choice item asked again with TEXT as a system
message before it; its block is the accuracy on the nudged items against the base run's on the
same items. A command line gets it by naming this module in FINBENCH_STUDIES (with tests/ on
PYTHONPATH); importing it registers it."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from finbench.config.options import Option
from finbench.studies import register_study
from finbench.studies.base import Column, Expanded, Study, StudyRows

NAME = "nudge"
TITLE = "Nudged by a system message (accuracy ×100)"


def _check(text: Any, config: Any) -> None:
    if len(str(text)) > 200:
        raise ValueError(f"--nudge: at most 200 characters, not {len(str(text))}")


def _accuracy(rows: Any) -> float | None:
    right = (rows["answer"].astype(str) == rows["gold"].astype(str)) & (rows["error"].astype(str) == "")
    return float(right.mean()) if len(rows) else None


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * value:.2f}"


class Nudge(Study):
    name = NAME
    option = Option(NAME, "", "Nudge: every constrained choice item asked again with this text as a system message "
                    "(a study defined in tests/).", check=_check, sweep=True)
    columns = (Column("nudged_by", "", "str — the system message the item was asked with"),)

    def expand(self, benchmark: Any, questions: Sequence[Any], requests: Sequence[Any], config: Any,
               think_budget: int | None, notes: list[str]) -> Expanded:
        from finbench.core.requests import Choose

        text = self.value(config)
        chosen = [i for i, r in enumerate(requests) if isinstance(r, Choose)]
        if not chosen:
            notes.append("nudge: no constrained choice item to nudge")
        return Expanded([(self.variant(i, "nudged", nudged_by=text), questions[i],
                          lambda r=requests[i]: dataclasses.replace(r, prompt=r.prompt.with_system(text)))
                         for i in chosen], state=len(chosen))

    def summary(self, found: StudyRows) -> dict[str, Any]:
        base = found.samples[found.samples["id"].astype(str).isin(set(found.rows["id"].astype(str)))]
        return {"n": int(len(found.rows)), "text": self.value(found.config), "accuracy": _accuracy(found.rows),
                "base_accuracy": _accuracy(base)}

    def headline(self, block: Any) -> Any:
        return {k: block.get(k) for k in ("n", "accuracy", "base_accuracy")}

    def console_lines(self, block: Any, benchmark: str | None = None) -> list[str]:
        return [f"nudge ({block['n']} items, ×100): accuracy {_pct(block['base_accuracy'])} → "
                f"{_pct(block['accuracy'])} with {block['text']!r}"]

    def section(self, block: Any, benchmark: str | None = None) -> dict[str, Any]:
        return {"id": NAME, "title": TITLE, "tables": [{"header": ["n", "base accuracy", "nudged accuracy"], "rows": [
            [str(block["n"]), _pct(block["base_accuracy"]), _pct(block["accuracy"])]]}],
            "note": f"Each constrained choice item asked again after the system message {block['text']!r}."}

    def compare_columns(self, headlines: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        return ["nudged accuracy ×100"], [[_pct((h or {}).get("accuracy"))] for h in headlines.values()]


STUDY = register_study(Nudge())
