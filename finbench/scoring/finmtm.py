"""FinMTM objective items (single and multiple choice): current and old protocols.

Official source: HiThink-Research/FinMTM @ 40557ba — `finmtm_eval/metrics.py`
(`objective_set_score`, the manuscript's Eq. 1) and `inference/SC_MC/etest.py` (parsing, summary).

- Current protocol (Eq. 1): P = predicted set, G = gold set; score 0 if P contains any option not
  in G, else |P ∩ G| / |G|. Reported as the mean × 100 (`score_percent`), plus `accuracy` = share
  of items with score 1.
- Old protocol (behind the published table): exact set equality. Note that score 1 under Eq. 1
  happens exactly when P = G, so the old-protocol mean equals the current strict accuracy; both
  are reported under their own names.
- Official parsing of generated text: the reply after the FIRST `</think>` (the client's split),
  ```json / ``` fences and `<|begin_of_box|>` / `<|end_of_box|>` removed, stripped; one pair of
  surrounding quotes stripped, `\\"` unescaped, `json.loads`, take `answer` (a string → one option,
  a list → its items); any failure → [] (score 0). A reply without '{' therefore has no answer.
- Current protocol compares `str(o).strip().upper()` (empties dropped): the string "A,C" is one
  unknown option and scores 0; an option named beyond N ("P", "AA") keeps its own identity.
- Old protocol (etest.py before 0305353): `set(pred) == set(gold)` on the raw strings, so " a"
  and "A" differ there. (Its parser also fell back to bare letters; finbench keeps the current
  parser for both protocols, so only the comparison differs.)
- Items whose (well-formed) gold is empty are skipped by the current protocol, as etest.py does:
  they are not in its denominator and are counted as `n_empty_gold`; the old protocol keeps them
  in its denominator, as the old snapshots did (accuracy = correct / total over every line:
  `n_score_old`). Rows with a per-sample error (a broken record included: a gold that is not
  JSON, no `choices`, a malformed line) stay in every denominator with score 0.
- In a samples table an `answer` containing '{' is parsed as above; any other answer is taken as
  canonical letters (the constrained decoder's 'AC'). A gold containing '{' is the official gold
  JSON, read as etest.py `get_ground_truth`; any other gold is canonical letters.

Dialogue sessions and agent items are scored apart (`extra_scores`): the dialogue score is the
mean over judged sessions of (0.5·turn + 0.5·session)×10 (the judge's `judge_score`; a session whose
judge reply cannot be read has none: `n_unparsed`), beside the turn and session means; the agent part the means of precision, recall, F2 and Qt = 25·F2 over
replayed items (`rule_score`, `judge_details`). Both carry n and bootstrap CIs.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import ACCURACY, Metric
from finbench.benchmarks.parts import Part
from finbench.benchmarks.scorer import Scorer
from finbench.core.types import MULTI, SINGLE
from finbench.kernels.bitmask import popcount
from finbench.kernels.bootstrap import bootstrap_segment_sums, percentile_ci
from finbench.scoring.stats import ScoreTable, ci_dict, error_mask, float_column, str_column

LABEL = "FinMTM objective (HiThink-Research/FinMTM Eq. 1; old protocol = exact set match)"
OBJECTIVE_KINDS = (SINGLE, MULTI)
_BOX_MARKERS = re.compile(r"<\|begin_of_box\|>|<\|end_of_box\|>")


def clean_output(text: str) -> str:
    """Remove reasoning, code fences and box markers, as the official client/etest.py do."""
    text = text.split("</think>", 1)[-1].strip()
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


def answer_lists(answers: np.ndarray, json_gold: bool = False) -> list[list[Any]]:
    """Option lists as the official code holds them: JSON answers through the official parser
    (gold JSON through `get_ground_truth`), anything else as its letters A–N (canonical letters)."""
    out = []
    for text in answers:
        if "{" in text:
            out.append(gold_options(text) if json_gold else parse_official_answer(text))
        else:
            out.append(re.findall(r"[A-N]", text.upper()))
    return out


def gold_options(text: str) -> list[Any]:
    """etest.py `get_ground_truth` on the gold JSON."""
    try:
        answer = json.loads(text).get("answer", [])
    except Exception:  # noqa: BLE001
        return []
    return [answer] if isinstance(answer, str) else answer if isinstance(answer, list) else []


def membership(lists: Sequence[Sequence[Any]], vocabulary: dict[Any, int], normalise: bool) -> torch.Tensor:
    """Bool [N, V]: row i holds option v. Options are `str(o).strip().upper()` (empties dropped)
    when `normalise`, else the raw values; the vocabulary grows with every new option."""
    rows, cols = [], []
    for i, options in enumerate(lists):
        for option in options:
            name = str(option).strip().upper() if normalise else _hashable(option)
            if normalise and not name:
                continue
            rows.append(i)
            cols.append(vocabulary.setdefault(name, len(vocabulary)))
    matrix = torch.zeros(len(lists), max(len(vocabulary), 1), dtype=torch.bool)
    if rows:
        matrix[torch.tensor(rows), torch.tensor(cols)] = True
    return matrix


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else json.dumps(value, sort_keys=True)


def objective_scores(pred_mask: torch.Tensor, gold_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1 on letter bitmasks [N] (A–N; see kernels/bitmask.py) and exact set match (bool [N])."""
    has_gold = gold_mask != 0
    subset = (pred_mask & ~gold_mask) == 0
    hits = popcount(pred_mask & gold_mask).to(torch.float64)
    size = popcount(gold_mask).to(torch.float64).clamp(min=1)
    score = torch.where(subset & has_gold, hits / size, torch.zeros_like(hits))
    return score, (pred_mask == gold_mask) & has_gold


def set_scores(pred: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1 over membership matrices [N, V] (float64 [N]) and exact set equality (bool [N]),
    for options of any name; a row with an empty gold scores 0 in both."""
    has_gold = gold.any(1)
    over = (pred & ~gold).any(1)
    hits = (pred & gold).sum(1).to(torch.float64)
    size = gold.sum(1).to(torch.float64).clamp(min=1)
    score = torch.where(~over & has_gold, hits / size, torch.zeros_like(hits))
    return score, (pred == gold).all(1) & has_gold


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """From segment sums [..., S, 5] (channels: in the current protocol, Eq. 1 score, Eq. 1 = 1,
    old exact match, 1): 0–1 means, each over its own protocol's denominator."""
    total = sums.sum(-2)
    return {"score": total[..., 1] / total[..., 0], "accuracy": total[..., 2] / total[..., 0],
            "score_old": total[..., 3] / total[..., 4]}


def objective_rows(df: pd.DataFrame) -> np.ndarray:
    """Positions of the objective (single / multiple choice) rows."""
    return np.flatnonzero(np.isin(str_column(df, "kind"), OBJECTIVE_KINDS))


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    """The FinMTM ScoreTable of the objective rows of `df` (other rows: `extra_scores`).

    - A row with a per-sample error (a broken record, a missing image, a model error) is scored
      as wrong, whatever its gold: it is in every denominator and counted in `n_errors`.
    - A well-formed row whose gold is empty is skipped by the current protocol, as etest.py does
      (`n_empty_gold`), but stays in the old protocol's denominator, as the old official snapshots
      (etest.py before 0305353: accuracy = correct / total, `set(pred) == set(gold)`) kept it.
      It is a row of the table whose current-protocol channels are 0 (channel 0 is the current
      protocol's denominator, channel 4 the old one's); its breakdown label is EMPTY_GOLD."""
    candidates = objective_rows(df)
    sub = df.iloc[candidates]
    has_error = error_mask(sub)
    gold_lists = [[] if bad else g for g, bad in zip(answer_lists(str_column(sub, "gold"), json_gold=True), has_error)]
    has_gold = np.array([any(str(g).strip() for g in golds) for golds in gold_lists], dtype=bool)
    scored = torch.from_numpy(has_gold | has_error)
    pred_lists = [[] if bad else p for p, bad in zip(answer_lists(str_column(sub, "answer")), has_error)]
    names: dict[Any, int] = {}
    pred, gold = membership(pred_lists, names, True), membership(gold_lists, names, True)
    width = max(len(names), 1)
    pred, gold = _widen(pred, width), _widen(gold, width)
    score, _ = set_scores(pred, gold)
    raw: dict[Any, int] = {}
    raw_pred, raw_gold = membership(pred_lists, raw, False), membership(gold_lists, raw, False)
    width = max(len(raw), 1)
    old = (_widen(raw_pred, width) == _widen(raw_gold, width)).all(1) & ~torch.from_numpy(has_error)
    in_current = scored.to(torch.float64)
    values = torch.stack([in_current, score, (score == 1).to(torch.float64), old.to(torch.float64),
                          torch.ones_like(score)], dim=1)
    dev = torch.device(device)
    n_empty = int((~scored).sum())
    notes = [f"{int(len(df) - len(candidates))} non-objective rows scored apart (dialogue, agent)"] \
        if len(candidates) < len(df) else []
    if n_empty:
        notes.append(f"{n_empty} objective items have an empty gold: skipped by the current protocol, as etest.py "
                     "does; kept in score_old's denominator, as the old official snapshots did")
    if has_error.any():
        notes.append(f"{int(has_error.sum())} objective items are errors (broken records, missing images, model "
                     "errors): scored as wrong")
    return ScoreTable(ids=str_column(sub, "id"), correct=(score == 1).to(torch.float64).to(dev), score=score.to(dev),
                      values=values.to(dev), segments=torch.zeros(len(sub), dtype=torch.int64, device=dev),
                      n_segments=1, statistic=statistics, headline=("score", "score_old", "accuracy"),
                      primary="score",
                      info={"label": LABEL, "rows": candidates, "n_excluded": int(len(df) - len(candidates)),
                            "n_errors": int(has_error.sum()), "n_empty_gold": n_empty,
                            "n_scored": int(scored.sum()), "notes": notes})


EMPTY_GOLD = "(empty gold: score_old only)"  # the breakdown label of the rows only the old protocol scores


def group_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The breakdown columns of the table's rows, with the rows only score_old counts (a
    well-formed empty gold) under their own label, so that no breakdown counts them as wrong."""
    sub = df[[c for c in ("question_type", "kind") if c in df.columns]].copy()
    has_error = error_mask(df)
    golds = answer_lists(str_column(df, "gold"), json_gold=True)
    empty = np.array([not bad and not any(str(g).strip() for g in gold) for gold, bad in zip(golds, has_error)],
                     dtype=bool)
    for column in sub.columns:
        sub[column] = sub[column].astype(object).where(~empty, EMPTY_GOLD)
    return sub


def _widen(matrix: torch.Tensor, width: int) -> torch.Tensor:
    """Pad a membership matrix built before the vocabulary reached `width` columns."""
    if matrix.shape[1] >= width:
        return matrix
    return torch.cat([matrix, torch.zeros(matrix.shape[0], width - matrix.shape[1], dtype=torch.bool)], dim=1)


DIALOGUE_SCALE = "turn and session 0-10 (judge rubric means), score 0-100 = (0.5·turn + 0.5·session)×10"
AGENT_SCALE = ("precision, recall, F2 0-1 over matched tool calls; Qt = 25·F2 (0-25), offline replay; answer "
               "(0-50) and reasoning (0-25) are not scored offline")


def extra_scores(df: pd.DataFrame, n_bootstrap: int = 0, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Dialogue and agent scores of the non-objective rows, each a mean over its items with n and,
    when `n_bootstrap` > 0, percentile bootstrap CIs (items resampled).

    - dialogue: per session the judge's turn mean and session checklist (0–10, `judge_details`)
      and the final (0.5·turn + 0.5·session)×10 (`judge_score`, 0–100). Without any verdict (no
      --judge) the part is unscored and says so; with verdicts, a session with a per-sample error
      scores 0 (wrong, never dropped) and one the judge failed on is counted as unscored — a
      session whose judge replies could not be read (`parsed` False) is a failed judgement,
      counted in `n_unparsed` and never given a default score; when no reply could be read the
      part says so instead of showing a table.
    - agent: per item the replayed tool plan's precision, recall, F2 and Qt = 25·F2 (the rule
      verdict in `judge_details` "rules"); an item with a per-sample error scores 0."""
    task = str_column(df, "task")
    errors = error_mask(df)
    details = _details(df)
    out: dict[str, Any] = {}
    dialogue = np.flatnonzero(task == "dialogue")
    if len(dialogue):
        out["dialogue"] = _dialogue(df.iloc[dialogue], errors[dialogue], [details[i] for i in dialogue],
                                    n_bootstrap, seed, level)
    agent = np.flatnonzero(task == "agent")
    if len(agent):
        out["agent"] = _agent(df.iloc[agent], errors[agent], [details[i] for i in agent], n_bootstrap, seed, level)
    return out


def _details(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Each row's `judge_details` JSON ({} when empty or unreadable)."""
    out = []
    for text in str_column(df, "judge_details"):
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            value = {}
        out.append(value if isinstance(value, dict) else {})
    return out


def _dialogue(rows: pd.DataFrame, errors: np.ndarray, details: list[dict[str, Any]], n_bootstrap: int, seed: int,
              level: float) -> dict[str, Any]:
    final = float_column(rows, "judge_score")
    judged = ~np.isnan(final) & ~errors
    verdicts = [d.get("judge", {}) if isinstance(d.get("judge"), dict) else {} for d in details]
    turn = np.array([_number(v.get("turn_score")) for v in verdicts])
    session = np.array([_number(v.get("session_score")) for v in verdicts])
    unread = np.array([v.get("parsed") is False for v in verdicts], dtype=bool) & ~judged & ~errors
    scored = judged | (errors if judged.any() else np.zeros_like(errors))
    values = np.stack([np.ones(len(rows)), np.where(judged, turn, 0.0), np.where(judged, session, 0.0),
                       np.where(judged, final, 0.0)], axis=1)[scored]
    part: dict[str, Any] = {"n": int(len(rows)), "n_scored": int(scored.sum()), "n_judged": int(judged.sum()),
                            "n_errors": int(errors.sum()), "n_unscored": int((~scored).sum()),
                            "n_unparsed": int(unread.sum()), "scale": DIALOGUE_SCALE}
    part.update(_means(values, ("turn", "session", "score"), n_bootstrap, seed, level))
    levels = str_column(rows, "level")[scored]
    part["by_level"] = {lv: {"n": int((levels == lv).sum()), "score": float(values[levels == lv, 3].mean())}
                        for lv in sorted(set(levels))}
    why = _dialogue_unscored(len(rows), int((~scored).sum()), int(unread.sum()), bool(judged.any()))
    if why:
        part["unscored"] = why
    return part


def _dialogue_unscored(n: int, n_unscored: int, n_unread: int, any_judged: bool) -> str | None:
    """Why sessions have no score: no judge at all, judge replies that could not be read (failed
    judgements: counted, never given a default score), or another judge error; None when every
    session is scored."""
    other = n_unscored - n_unread
    why = ", ".join([f"{n_unread} failed: a judge reply could not be read"] * bool(n_unread)
                    + ["a judge error" if other == 1 else f"{other} judge errors"] * bool(other))
    if not any_judged and n_unread:
        return f"no judge reply could be read ({n_unread} failed; none given a default score)"
    if not any_judged:
        return f"{n} dialogue sessions generated and stored, not scored: no judge verdicts (run with --judge MODEL)"
    return f"{n_unscored} of {n} sessions have no judge verdict ({why})" if n_unscored else None


def _agent(rows: pd.DataFrame, errors: np.ndarray, details: list[dict[str, Any]], n_bootstrap: int, seed: int,
           level: float) -> dict[str, Any]:
    tool = float_column(rows, "rule_score")
    replayed = ~np.isnan(tool) & ~errors
    rules = [d.get("rules", {}) if isinstance(d.get("rules"), dict) else {} for d in details]
    precision, recall, f2 = (np.array([_number(r.get(k)) for r in rules]) for k in ("precision", "recall", "f2"))
    scored = replayed | errors
    channels = [np.ones(len(rows))] + [np.where(replayed, np.nan_to_num(v), 0.0) for v in (precision, recall, f2, tool)]
    values = np.stack(channels, axis=1)[scored]
    part: dict[str, Any] = {"n": int(len(rows)), "n_scored": int(scored.sum()), "n_errors": int(errors.sum()),
                            "n_unscored": int((~scored).sum()), "scale": AGENT_SCALE}
    part.update(_means(values, ("precision", "recall", "f2", "tool_score"), n_bootstrap, seed, level))
    if (~scored).any():
        part["unscored"] = f"{int((~scored).sum())} of {len(rows)} agent items have no tool-plan verdict"
    return part


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number


def _means(values: np.ndarray, names: Sequence[str], n_bootstrap: int, seed: int, level: float) -> dict[str, Any]:
    """Means of the channels after the first (a column of ones) over the rows of `values` [N, 1+C],
    and their percentile bootstrap CIs (rows resampled, every mean recomputed per resample)."""
    if len(values) == 0:
        return {**{name: None for name in names}, "ci": {}}
    data = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    means = data[:, 1:].sum(0) / data[:, 0].sum()
    out: dict[str, Any] = {name: float(m) for name, m in zip(names, means)}
    out["ci"] = {}
    if n_bootstrap > 0:
        sums = bootstrap_segment_sums(data, torch.zeros(len(data), dtype=torch.int64), 1, n_bootstrap, seed=seed)
        resampled = sums[:, 0, 1:] / sums[:, 0, :1]  # [R, C]
        out["ci"] = {name: ci_dict(*percentile_ci(resampled[:, k], level), level) for k, name in enumerate(names)}
    return out


def summary(df: pd.DataFrame, table: ScoreTable, estimates: dict[str, Any]) -> dict[str, Any]:
    """The objective counts (`n`: items the current protocol scores; `n_score_old`: those of the
    old protocol, empty golds included), then the dialogue and agent parts (`extra_scores`, in which
    a broken session or agent item is scored 0 and counted in that part's `n_errors`) with the
    run's bootstrap settings (`estimates["bootstrap"]`, when CIs were asked for)."""
    score = estimates.get("score")
    bootstrap = estimates.get("bootstrap") or {}
    extra = extra_scores(df, bootstrap.get("n_resamples", 0), bootstrap.get("seed", 0), bootstrap.get("level", 0.95))
    return {"score_percent": score * 100 if score is not None else None, "n_excluded": table.info["n_excluded"],
            "n": table.info["n_scored"], "n_score_old": table.n, "n_empty_gold": table.info["n_empty_gold"], **extra}


PARTS = (  # what `extra_scores` puts under scores["dialogue"] and scores["agent"], as it is shown
    Part("dialogue", "FinMTM dialogue sessions (judged by the run's judge model)", "FinMTM dialogue",
         (Metric("turn", "turn (judge, 0–10)", scale=1.0, full=10.0), Metric("session", "session checklist (0–10)", scale=1.0, full=10.0),
          Metric("score", "final = (0.5·turn + 0.5·session)×10 (0–100)", scale=1.0, full=100.0)),
         headline="score", headline_label="dialogue score"),
    Part("agent", "FinMTM agent items (offline replay of the tool plan)", "FinMTM agent",
         (Metric("precision", "tool precision ×100"), Metric("recall", "tool recall ×100"),
          Metric("f2", "tool F2 ×100"), Metric("tool_score", "Qt = 25·F2 (0–25)", scale=1.0, full=25.0)),
         headline="f2", headline_label="agent tool F2"),
)
METRICS = (Metric("score", "score"), Metric("score_old", "score_old"),
           ACCURACY)
SCORER = Scorer(build_table=build_table, summary=summary, group_frame=group_frame, parts=PARTS, metrics=METRICS)
