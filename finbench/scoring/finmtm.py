"""FinMTM objective items (single and multiple choice): current and old protocols.

Official source: HiThink-Research/FinMTM @ 40557ba — `finmtm_eval/metrics.py`
(`objective_set_score`, the manuscript's Eq. 1) and `inference/SC_MC/etest.py` (parsing, summary).

- Current protocol (Eq. 1): P = predicted set, G = gold set; score 0 if P contains any option not
  in G, else |P ∩ G| / |G|. Reported as the mean × 100 (`score_percent`), plus `accuracy` = share
  of items with score 1.
- Old protocol (behind the published table): exact set equality. Note that score 1 under Eq. 1
  happens exactly when P = G, so the old-protocol mean equals the current strict accuracy; both
  are reported under their own names.
- Official parsing of generated text: drop reasoning up to `</think>`, remove ```json / ``` fences
  and `<|begin_of_box|>` / `<|end_of_box|>`, strip; strip one pair of surrounding quotes, unescape
  `\\"`, `json.loads`, take `answer` (a string → one option, a list → its items); any failure → []
  (score 0). Options are compared as `str(o).strip().upper()`, so the string "A,C" is one unknown
  option and scores 0.
- In a samples table an `answer` containing '{' is parsed that way; any other answer is taken as
  canonical letters (the constrained decoder's 'AC'): the letters A–N it contains. Gold is
  canonical letters (or the official `{"answer": ...}` JSON). An empty gold scores 0 (the
  official code raises) and is counted in the output.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

import numpy as np
import pandas as pd
import torch

from finbench.kernels.bitmask import UNKNOWN_BIT, letters_to_mask, popcount
from finbench.scoring.stats import ScoreTable, error_mask, str_column
from finbench.types import MULTI, OPTION_LETTERS, SINGLE

LABEL = "FinMTM objective (HiThink-Research/FinMTM Eq. 1; old protocol = exact set match)"
OBJECTIVE_KINDS = (SINGLE, MULTI)
_BOX_MARKERS = re.compile(r"<\|begin_of_box\|>|<\|end_of_box\|>")


def clean_output(text: str) -> str:
    """Remove reasoning, code fences and box markers, as the official client/etest.py do."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    text = text.replace("```json", "").replace("```", "").strip()
    return _BOX_MARKERS.sub("", text).strip()


def parse_official_answer(text: str) -> list[Any]:
    """etest.py `parse_model_answer`: the `answer` field of a JSON object, as a list; [] on failure."""
    s = clean_output(text or "").strip()
    if not s:
        return []
    if s.startswith('"') and s.endswith('"'):
        s = s[1:-1]
    s = s.replace('\\"', '"')
    try:
        answer = json.loads(s).get("answer", None)
    except Exception:  # noqa: BLE001 — the official parser treats every failure as no answer
        return []
    if isinstance(answer, str):
        return [answer]
    if isinstance(answer, list):
        return answer
    return []


def options_to_mask(options: Iterable[Any]) -> int:
    """Bitmask of normalised options (`str(o).strip().upper()`, empties dropped); anything that is
    not a single letter A–N sets UNKNOWN_BIT, which no gold contains."""
    mask = 0
    for option in options:
        name = str(option).strip().upper()
        if not name:
            continue
        mask |= 1 << OPTION_LETTERS.index(name) if len(name) == 1 and name in OPTION_LETTERS else 1 << UNKNOWN_BIT
    return mask


def answer_masks(answers: np.ndarray, json_gold: bool = False) -> torch.Tensor:
    """Masks of answers: JSON answers through the official parser (gold JSON through plain
    `json.loads`), everything else as canonical letters (vectorised)."""
    answers = np.asarray(answers, dtype=object)
    is_json = np.array(["{" in a for a in answers], dtype=bool)
    masks = letters_to_mask(np.where(is_json, "", answers), OPTION_LETTERS)
    for i in np.flatnonzero(is_json):  # per-string parsing, only for generated JSON text
        masks[i] = options_to_mask(_gold_options(answers[i]) if json_gold else parse_official_answer(answers[i]))
    return masks


def _gold_options(text: str) -> list[Any]:
    """etest.py `get_ground_truth` on the gold JSON."""
    try:
        answer = json.loads(text).get("answer", [])
    except Exception:  # noqa: BLE001
        return []
    return [answer] if isinstance(answer, str) else answer if isinstance(answer, list) else []


def objective_scores(pred_mask: torch.Tensor, gold_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Eq. 1 score float64 [N], exact set match bool [N]); an empty gold scores 0 in both."""
    has_gold = gold_mask != 0
    subset = (pred_mask & ~gold_mask) == 0
    hits = popcount(pred_mask & gold_mask).to(torch.float64)
    size = popcount(gold_mask).to(torch.float64).clamp(min=1)
    score = torch.where(subset & has_gold, hits / size, torch.zeros_like(hits))
    return score, (pred_mask == gold_mask) & has_gold


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """From segment sums [..., S, 3] (channels 1, Eq. 1 score, exact): means on the 0–1 scale."""
    total = sums.sum(-2)
    return {"score": total[..., 1] / total[..., 0], "score_old": total[..., 2] / total[..., 0],
            "accuracy": total[..., 2] / total[..., 0]}


def objective_rows(df: pd.DataFrame) -> np.ndarray:
    """Positions of the objective (single / multiple choice) rows."""
    return np.flatnonzero(np.isin(str_column(df, "kind"), OBJECTIVE_KINDS))


def build_table(df: pd.DataFrame, device: str | torch.device = "cpu") -> ScoreTable:
    """The FinMTM ScoreTable of the objective rows of `df` (other rows are not scored here)."""
    rows = objective_rows(df)
    sub = df.iloc[rows]
    has_error = torch.from_numpy(error_mask(sub))
    pred = answer_masks(str_column(sub, "answer"))
    pred = torch.where(has_error, torch.zeros_like(pred), pred)
    gold = answer_masks(str_column(sub, "gold"), json_gold=True)
    score, exact = objective_scores(pred, gold)
    ones = torch.ones_like(score)
    values = torch.stack([ones, score, exact.to(torch.float64)], dim=1)
    dev = torch.device(device)
    return ScoreTable(ids=str_column(sub, "id"), correct=exact.to(torch.float64).to(dev), score=score.to(dev),
                      values=values.to(dev), segments=torch.zeros(len(sub), dtype=torch.int64, device=dev),
                      n_segments=1, statistic=statistics, headline=("score", "score_old", "accuracy"),
                      primary="score",
                      info={"label": LABEL, "rows": rows, "n_excluded": int(len(df) - len(rows)),
                            "n_errors": int(has_error.sum()), "n_empty_gold": int((gold == 0).sum()),
                            "notes": ([f"{int(len(df) - len(rows))} non-objective rows not scored"]
                                      if len(rows) < len(df) else [])})
