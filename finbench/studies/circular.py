"""Circular evaluation (`--permutations K`): every constrained choice item asked again with its
options rotated by 1..k−1 positions (k = min(K, the item's option count)); the benchmark's `rotate`
moves the options and the gold letters, its `request` renders them, and the rotation is a field of
the request (so of its cache key). Items whose options name other options ("All of the above")
are asked only in their published order (`n_not_rotatable`). Scored in scoring/robustness.py
`circular_summary`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import names_other_options
from finbench.config.options import Option
from finbench.config.run_settings import for_run
from finbench.config.specs import RunConfig
from finbench.core.requests import Choose
from finbench.core.types import OPTION_LETTERS, Question
from finbench.studies.base import Column, Expanded, Study, StudyRows
from finbench.studies.cells import pct

HEADLINE = ("k", "n", "base_accuracy", "circular_accuracy", "position_bias", "option_consistency")


def check(k: Any, config: RunConfig) -> None:
    """--permutations, checked with the other options (one ValueError line)."""
    if k < 0 or k == 1:
        raise ValueError(f"--permutations {k}: give 2 or more orders of the options (the published one and "
                         "k−1 rotations), or 0 for none")
    if k > len(OPTION_LETTERS):
        raise ValueError(f"--permutations {k}: an item has at most {len(OPTION_LETTERS)} options, so at most "
                         f"{len(OPTION_LETTERS)} orders")
    if k and config.protocol != "constrained":
        raise ValueError("--permutations applies to the constrained protocol: the official prompts write the "
                         "options themselves")


def raises(err: Exception) -> Any:
    """A request maker that raises `err` again: that variant's error."""
    def make() -> Any:
        raise err
    return make


class Circular(Study):
    name = "circular"
    option = Option("permutations", 0, "Circular evaluation: ask every constrained choice item again with its "
                    "options rotated, K orders in all (capped at its option count; 0 = off); "
                    "results.json['circular'], variants.parquet.", kind=int, check=check, spec="studies", sweep=True)
    columns = (Column("rotation", 0, "int — positions the options are rotated by (0 for ablation rows): letter j "
                      "shows the published option (j + rotation) mod n"),)

    def expand(self, benchmark: Any, questions: Sequence[Question], requests: Sequence[Any], config: RunConfig,
               think_budget: int | None, notes: list[str]) -> Expanded:
        """A variant for every rotation of every rotatable choice item; the state is the number of
        choice items not rotated because an option names other options."""
        k = self.value(config)
        choices = [i for i, r in enumerate(requests) if isinstance(r, Choose) and r.n_options >= 2]
        if k < 2:
            return Expanded(state=0)
        if not choices:
            notes.append("circular evaluation (--permutations): this run has no constrained choice item to rotate")
            return Expanded(state=0)
        rotatable = [i for i in choices if benchmark.rotate(questions[i], 1) is not None]
        naming = [i for i in choices if i not in set(rotatable)
                  and names_other_options(questions[i].options, questions[i].letters)]
        if not (rotatable or len(naming) == len(choices)):  # a benchmark that rotates nothing: not for this reason
            naming = []
        if naming:
            notes.append(f"circular evaluation: {len(naming)} choice item(s) have an option that names other options "
                         "(\"All of the above\", \"Both A and C\", 以上都是, …), which a rotation would make false: "
                         "asked only in their published order, not in the circular numbers (n_not_rotatable)")
            choices = [i for i in choices if i not in set(naming)]
        if not rotatable:
            if choices:
                notes.append(f"circular evaluation does not apply to {benchmark.name}: its prompts do not render the "
                             f"options apart from the question text, so they cannot be rotated honestly; its "
                             f"{len(choices)} choice items are asked once")
            return Expanded(state=len(naming))
        most = max(requests[i].n_options for i in rotatable)
        if k > most:
            raise ValueError(f"--permutations {k}: the choice items of this run have at most {most} options, so at "
                             f"most {most} orders")
        out = self._rotations(benchmark, questions, requests, rotatable, config, think_budget, notes)
        if len(rotatable) < len(choices):
            notes.append(f"circular evaluation: {len(choices) - len(rotatable)} choice item(s) cannot be rotated and "
                         "are asked once")
        return Expanded(out, len(naming))

    def _rotations(self, benchmark: Any, questions: Sequence[Question], requests: Sequence[Any],
                   rotatable: Sequence[int], config: RunConfig, think_budget: int | None,
                   notes: list[str]) -> list[Any]:
        k, out, unchanged = self.value(config), [], 0
        for i in rotatable:
            base = requests[i]
            for shift in range(1, min(k, base.n_options)):
                rotated = benchmark.rotate(questions[i], shift) or questions[i]
                variant = self.variant(i, f"rotation-{shift}", rotation=shift)
                try:
                    request = replace(for_run(benchmark.request(rotated, config.protocol), config, think_budget),
                                      rotation=shift)
                except Exception as err:  # noqa: BLE001 — raised again by the maker: that variant's error
                    out.append((variant, rotated, raises(err)))
                    continue
                if request.prompt == base.prompt:  # identical options, or a prompt that ignores their order
                    unchanged += 1
                    break
                out.append((variant, rotated, lambda request=request: request))
        if unchanged:
            notes.append(f"circular evaluation: {unchanged} choice item(s) read the same in every order (repeated "
                         "options) and are not rotated")
        return out

    def summary(self, found: StudyRows) -> dict[str, Any]:
        from finbench.scoring.robustness import circular_summary

        return circular_summary(found.samples, found.rows, self.value(found.config), found.benchmark.domain_field,
                                found.state or 0)

    def headline(self, block: Any) -> Any:
        return {k: block.get(k) for k in HEADLINE} if block else None

    def console_lines(self, block: Any, benchmark: str | None = None) -> list[str]:
        if not block:
            return []
        if not block["n"]:
            return [f"circular evaluation (K {block['k']}): no item rotated (see the notes)"]
        return [f"circular evaluation (K {block['k']}, {block['n']} items, ×100): accuracy "
                f"{pct(block['base_accuracy'])} → {pct(block['circular_accuracy'])} when right in every order · "
                f"position bias {pct(block['position_bias'])} · option consistency {pct(block['option_consistency'])}"]

    def section(self, block: Any, benchmark: str | None = None) -> dict[str, Any] | None:
        if not block:
            return None
        tables = [{"header": ["metric", "value ×100"], "rows": [
            ["accuracy in the published order", pct(block["base_accuracy"])],
            ["circular accuracy (right in every order)", pct(block["circular_accuracy"])],
            ["position bias (same letter in every order)", pct(block["position_bias"])],
            ["option consistency (same option in every order)", pct(block["option_consistency"])]]}]
        if block.get("pick_rate"):
            tables.append({"header": ["position", "pick rate ×100", "a position-blind pick ×100"],
                           "rows": [[letter, pct(rate), pct(block["chance_pick_rate"].get(letter))]
                                    for letter, rate in block["pick_rate"].items()]})
        if block.get("by_domain"):
            tables.append({"header": ["domain", "n", "accuracy ×100", "circular accuracy ×100"],
                           "rows": [[d, str(g["n"]), pct(g["base_accuracy"]), pct(g["circular_accuracy"])]
                                    for d, g in block["by_domain"].items()]})
        return {"id": "circular", "title": f"Circular evaluation (K = {block['k']})", "tables": tables,
                "note": f"{block['n']} choice items, each asked in its published order and rotated by 1…k−1 "
                        "positions (k = min(K, its options); the gold moves with its option). Position bias and option "
                        f"consistency are over the {block.get('n_consistency', 0)} items answered without an error in "
                        "every order: a model that always picks A has position bias 100 and option consistency 0."}

    def compare_columns(self, headlines: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        cells = [[pct(c.get("circular_accuracy")), pct(c.get("position_bias")), pct(c.get("option_consistency"))]
                 for c in (h or {} for h in headlines.values())]
        return ["circular accuracy ×100", "position bias ×100", "option consistency ×100"], cells


STUDY = Circular()
