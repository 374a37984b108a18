"""What each sample cost, and what the run's answers cost together.

Per sample (samples.parquet, and the cached prediction: a cached sample keeps the counts of the
run that computed it; one cached before they existed has none, null):
- `prompt_tokens`: the real tokens prefilled for the row, its attention mask's sum (text and
  image placeholders, no padding); a session's later turns add theirs; a thinking row's
  reasoning is generated, not prompt;
- `image_tokens`: of those, the image placeholder tokens (the adapter's `image_tokens_per_row`);
- `generated_tokens`: the tokens decoded for the row — the reasoning, then the answer: 0 for a
  single choice (read from the prefill's option scores, nothing is decoded), the letters,
  separators and end of a multiple choice, the characters and end of a number, free text up to
  its stop (every turn of a session);
- `seconds`: the row's share of its batch's wall seconds (from the copy to the device to the
  predictions), split by tokens processed: prompt + generated tokens of the row over the batch's,
  so a long prompt or a long generation carries its part; equal shares where nothing was counted.
  The shares add up to the batch's seconds.

results.json's `cost` (`cost_summary`) totals them per kind, the judge's calls under "judge"
(they go through the same batch loop), each distinct request once (questions sharing one
request — one sample key — were computed once: it counts under its first question's kind), and
per correct answer: (prompt + generated) tokens and seconds over the sum of the `correct` column;
null when nothing is correct.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

from finbench.core.requests import Choose, Request
from finbench.core.types import Prediction

COST_COLUMNS = ("prompt_tokens", "image_tokens", "generated_tokens", "seconds")
JUDGE_KIND = "judge"


def row_counts(model: Any, inputs: Any) -> tuple[list[int], list[int | None]] | None:
    """(prompt tokens, image tokens) of each row of a prepared batch: its attention mask's sums, or
    for a batch a server answered, the server's counts (models/inputs.py `prompt_tokens`; an image
    count it does not report is None); None when the adapter cannot count them (bookkeeping never
    fails a batch)."""
    try:
        if "attention_mask" in inputs:
            prompt = [int(n) for n in inputs["attention_mask"].sum(1).tolist()]
        else:
            prompt = [int(n) for n in inputs["prompt_tokens"]]
        image = [None if n is None else int(n) for n in model.image_tokens_per_row(inputs)]
    except Exception:  # noqa: BLE001
        return None
    return (prompt, image) if len(prompt) == len(image) else None


class RowCounts:
    """The prompt and image tokens of a batch's rows (`counts`: None when not counted): its first
    prefill's, plus every later session turn's (`add`). Counted when first read, after the batch
    is answered: a server reports its counts with its answers."""

    def __init__(self, model: Any, inputs: Any) -> None:
        self.model, self._parts = model, [(None, inputs)]
        self._counts: tuple[list[int], list[int | None]] | None = None

    def add(self, rows: Sequence[int], inputs: Any) -> None:
        """A later turn prefilled for `rows` (positions in the batch), one per row of `inputs`."""
        self._parts.append((list(rows), inputs))

    @property
    def counts(self) -> tuple[list[int], list[int | None]] | None:
        if self._parts:
            parts, self._parts = self._parts, []
            self._counts = row_counts(self.model, parts[0][1])
            for rows, inputs in parts[1:]:
                self._add(rows, row_counts(self.model, inputs))
        return self._counts

    def _add(self, rows: list[int], more: tuple[list[int], list[int | None]] | None) -> None:
        if self._counts is None or more is None:
            self._counts = None  # part of a row's prompts uncounted: the row is not counted
            return
        for row, prompt, image in zip(rows, *more):
            self._counts[0][row] += prompt
            old = self._counts[1][row]
            self._counts[1][row] = None if old is None or image is None else old + image


def generated_tokens(request: Request | None, prediction: Prediction) -> int:
    answer = 0 if isinstance(request, Choose) and not request.multi else prediction.n_generated_tokens
    return prediction.reasoning_tokens + answer


def with_costs(decoded: Mapping[int, Prediction], requests: Sequence[Request | None],
               counts: tuple[list[int], list[int]] | None, seconds: float, n_rows: int) -> dict[int, Prediction]:
    """The batch rows in `decoded` (row → prediction; `requests` and `counts` by row) with their
    token counts and their share of the batch's `seconds` (the module docstring says how)."""
    out: dict[int, Prediction] = {}
    for row, p in decoded.items():
        generated = generated_tokens(requests[row], p)
        prompt, image = (counts[0][row], counts[1][row]) if counts else (None, None)
        out[row] = dataclasses.replace(p, prompt_tokens=prompt, image_tokens=image, generated_tokens=generated)
    weights = {row: (p.prompt_tokens or 0) + (p.generated_tokens or 0) for row, p in out.items()}
    total = sum(weights.values())
    for row, p in out.items():
        share = seconds * weights[row] / total if counts and total > 0 else seconds / max(n_rows, 1)
        out[row] = dataclasses.replace(p, seconds=share)
    return out


def totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"n", "n_counted", prompt/image/generated tokens, seconds} over rows (dicts of the cost
    columns); a row whose tokens were not counted adds its seconds only; token sums are null when
    no row was counted."""
    n = n_counted = 0
    values: dict[str, list[float]] = {column: [] for column in COST_COLUMNS}
    for row in rows:
        n += 1
        counted = _number(row.get("prompt_tokens")) is not None
        n_counted += counted
        for column in COST_COLUMNS:
            values[column].append(_number(row.get(column)) or 0.0)
    # fsum: exact, so the same rows in another order (a rerun reads its cached judge calls in
    # another order than they were answered) give the same total to the last bit
    sums = {column: math.fsum(found) for column, found in values.items()}
    out: dict[str, Any] = {"n": n, "n_counted": n_counted}
    for column in COST_COLUMNS[:3]:
        out[column] = int(sums[column]) if n_counted else None
    out["seconds"] = sums["seconds"]
    return out


def prediction_rows(predictions: Iterable[Prediction]) -> list[dict[str, Any]]:
    return [{"prompt_tokens": p.prompt_tokens, "image_tokens": p.image_tokens,
             "generated_tokens": p.generated_tokens, "seconds": p.seconds} for p in predictions]


def cost_summary(samples: Any, judge: Mapping[str, Any] | None = None, variants: Any = None) -> dict[str, Any]:
    """results.json's `cost`: {"by_kind": {KIND: totals}, "total", "per_correct": {"tokens",
    "seconds"}}, over the run's questions and the judge's calls (`judge`: their totals); the
    robustness studies' variants (variants.parquet) in `variants`, apart."""
    distinct = _distinct(samples)  # a request shared by questions of two kinds: under its first question's
    by_kind = {str(kind): totals(group.to_dict("records"))
               for kind, group in distinct.groupby("kind", sort=True)} if len(distinct) else {}
    if judge and judge.get("n"):
        by_kind[JUDGE_KIND] = dict(judge)
    total = _sum(list(by_kind.values()))
    correct = float(samples["correct"].fillna(0).sum()) if "correct" in samples and len(samples) else 0.0
    tokens = None if total["prompt_tokens"] is None else total["prompt_tokens"] + (total["generated_tokens"] or 0)
    out = {"by_kind": by_kind, "total": total,
           "per_correct": {"correct": correct,
                           "tokens": tokens / correct if correct > 0 and tokens is not None else None,
                           "seconds": total["seconds"] / correct if correct > 0 else None}}
    if variants is not None and len(variants):
        out["variants"] = totals(_distinct(variants).to_dict("records"))
    return out


def _distinct(frame: Any) -> Any:
    """Each computed request once: rows sharing a sample key answered from one computation."""
    if "sample_key" not in frame:
        return frame
    keys = frame["sample_key"].astype(str)
    return frame[(keys == "") | ~keys.duplicated()]


def _sum(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": sum(p["n"] for p in parts), "n_counted": sum(p["n_counted"] for p in parts)}
    for column in COST_COLUMNS[:3]:
        values = [p[column] for p in parts if p[column] is not None]
        out[column] = sum(values) if values else None
    out["seconds"] = math.fsum(p["seconds"] for p in parts)
    return out


def _number(value: Any) -> float | None:
    """A counted value, or None (null, NaN: not counted)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value
