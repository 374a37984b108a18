"""FinMME scoring: the official judge and FinScore, and the paper's FinScore as a labelled variant.

Official source: luo-junyu/FinMME @ bc37fdf, `eval.py` (`normalize_response`, `check_answer`,
`calculate_finscore`). What it does, and what is implemented here:

- The extracted answer token is normalised: `**`, `:`, `$\\boxed{`, `}$`, `\\$`, `$`, `{`,
  `\\boxed` are removed, in that order. The samples table's `answer` is already the extracted
  token (or canonical letters), so only this normalisation is re-applied (a no-op on letters).
- Choice items (every `question_type` other than `numerical`): correct iff the SET of letters
  A–N in the upper-cased normalised answer equals the set of letters A–N in the upper-cased gold
  (`{c for c in s.upper() if c in 'ABCDEFGHIJKLMN'}`). So 'A,C', 'AC', 'ca' are all {A, C};
  '' is the empty set (wrong against any non-empty gold).
- Numerical items: keep only the characters of each string for which `c.isdigit()` or `c in '.-'`,
  parse with `float`, correct iff |pred − gold| ≤ tolerance (absolute). A parse failure, or a
  NaN tolerance, is wrong; a table without a tolerance column is judged with 0.0, as eval.py's
  `item.get('tolerance', 0.0)`. ('8.81%' and '8.81' are both 8.81.)
- Rows with a per-sample error count as wrong (their answer is treated as '').
- FinScore = F × (1 − P_H): F = unweighted mean over `knowledge_domain` of per-domain accuracy
  (rows with a missing domain are left out of F, as `groupby` drops NaN keys); P_H = error rate
  over items whose question_type is `multiple_choice` and whose gold has more than one letter
  (eval.py tests `len(str(answer)) > 1`, identical for canonical gold letters); P_H = 0 when
  there is no such item. Overall accuracy = plain mean of correctness. Scale 0–1 (papers ×100).

Paper variant (arXiv 2505.24714, not implemented by eval.py): per choice question
S = max(0, c/n − i/s) with c = |P ∩ G|, i = |P \\ G|, s = |P| (i/s := 0 when s = 0) and
n = |G| (`gold`, default: a perfect answer scores 1) or the number of options (`options`, the
seeds' wording); numerical items score their official 0/1 correctness. F = domain-normalised mean
of S; P_H = mean(i/s) over choice questions with s > 0; FinScore = F × (1 − P_H).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import ACCURACY, OFFICIAL as OFFICIAL_RULE, Metric, Variant
from finbench.benchmarks.scorer import Scorer
from finbench.core.types import OPTION_LETTERS
from finbench.kernels.bitmask import letters_to_mask, popcount
from finbench.kernels.segments import factorize, joint_counts, parallel_chunk_sum
from finbench.scoring.answers import normalize_response, numeric_values, numerical_correct
from finbench.scoring.stats import ScoreTable, error_mask, first_present, float_column, str_column

OFFICIAL = "official"
PAPER = "paper"
VARIANTS = (OFFICIAL, PAPER)
DENOMINATORS = ("gold", "options")
OFFICIAL_LABEL = "FinMME official FinScore (luo-junyu/FinMME eval.py calculate_finscore)"
DOMAIN_COLUMNS = ("domain", "knowledge_domain")
KIND_TO_QUESTION_TYPE = {"single": "single_choice", "multi": "multiple_choice", "numerical": "numerical"}


def paper_label(denominator: str = "gold") -> str:
    return f"FinMME paper variant — S = max(0, c/n − i/s), n = {denominator}; not the official FinScore"


# ---- the official judge ---------------------------------------------------------------------------
# (its answer reading, `normalize_response` and the number rule, is shared: scoring/answers.py)
def choice_correct(pred_mask: torch.Tensor, gold_mask: torch.Tensor) -> torch.Tensor:
    """Binary exact set match."""
    return pred_mask == gold_mask


def official_correct(pred_mask: torch.Tensor, gold_mask: torch.Tensor, pred_value: torch.Tensor,
                     gold_value: torch.Tensor, tolerance: torch.Tensor, is_numerical: torch.Tensor,
                     has_error: torch.Tensor) -> torch.Tensor:
    """Per-question official correctness (bool [N])."""
    ok = torch.where(is_numerical, numerical_correct(pred_value, gold_value, tolerance),
                     choice_correct(pred_mask, gold_mask))
    return ok & ~has_error


def multi_answer_mask(is_multiple_choice: torch.Tensor, gold_mask: torch.Tensor) -> torch.Tensor:
    """Items P_H is computed over: question_type multiple_choice AND more than one gold letter."""
    return is_multiple_choice & (popcount(gold_mask) > 1)


# ---- official FinScore -------------------------------------------------------------------------------
OFFICIAL_CHANNELS = ("n", "correct", "multi", "multi_correct")


def official_values(correct: torch.Tensor, multi_answer: torch.Tensor) -> torch.Tensor:
    """[N, 4] channels of the official statistic: 1, correct, multi-answer, multi-answer ∧ correct."""
    c = correct.to(torch.float64)
    m = multi_answer.to(torch.float64)
    return torch.stack([torch.ones_like(c), c, m, m * c], dim=1)


def official_statistics(sums: torch.Tensor, n_domains: int) -> dict[str, torch.Tensor]:
    """Official FinScore from segment sums [..., S, 4] (segments 0..n_domains-1 are the domains;
    any further segment holds rows without a domain: counted in accuracy and P_H, not in F).
    A domain absent from a (resampled) sample is absent from F, as in `groupby().mean().mean()`."""
    n_d, c_d = sums[..., :n_domains, 0], sums[..., :n_domains, 1]
    present = n_d > 0
    per_domain = torch.where(present, c_d / n_d.clamp(min=1), torch.zeros_like(c_d))
    domain_accuracy = per_domain.sum(-1) / present.sum(-1)  # NaN when no domain is present
    total = sums.sum(-2)
    accuracy = total[..., 1] / total[..., 0]
    multi, multi_correct = total[..., 2], total[..., 3]
    p_h = torch.where(multi > 0, (multi - multi_correct) / multi.clamp(min=1), torch.zeros_like(multi))
    return {"finscore": domain_accuracy * (1 - p_h), "domain_accuracy": domain_accuracy,
            "p_h": p_h, "accuracy": accuracy}


MAX_CELL_DOMAINS = 31  # domains + the no-domain slot must fit 5 bits (cell = domain·2 + multi < 64)


def official_cells(domain_ids: torch.Tensor, n_domains: int, multi_answer: torch.Tensor) -> torch.Tensor:
    """Per-question metadata cell (uint8) = domain · 2 + multi-answer, fixed for a benchmark, so it
    is encoded once. Domain ids outside 0..n_domains-1 (missing) go to slot n_domains."""
    if n_domains > MAX_CELL_DOMAINS:
        raise ValueError(f"at most {MAX_CELL_DOMAINS} domains in the byte-cell kernel")
    slot = torch.where((domain_ids < 0) | (domain_ids >= n_domains), torch.full_like(domain_ids, n_domains),
                       domain_ids)
    return (slot.to(torch.uint8) * 2).add_(multi_answer.to(torch.uint8))


def _code_histogram(cells: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    return torch.bincount(cells.add(flags, alpha=64), minlength=256)


def official_finscore_from_cells(correct: torch.Tensor, cells: torch.Tensor, n_domains: int) -> dict[str, torch.Tensor]:
    """Official FinScore from per-question correctness and metadata cells, in one histogram pass:
    code = cell + 64 · correct (a uint8), and the 128 code counts (domain × multi × correct) are
    the whole sufficient statistic of F, P_H and accuracy."""
    flags = correct.view(torch.uint8) if correct.dtype == torch.bool else correct.to(torch.uint8)  # no copy
    counts = parallel_chunk_sum(_code_histogram, cells, flags)  # code = cell + 64·correct, per chunk
    counts = counts[:128].to(torch.float64).view(2, 32, 2)[:, : n_domains + 1]  # [correct, slot, multi]
    right, wrong = counts[1], counts[0]
    sums = torch.stack([(right + wrong).sum(1), right.sum(1), (right + wrong)[:, 1], right[:, 1]], dim=1)
    return official_statistics(sums, n_domains)


def official_finscore(correct: torch.Tensor, domain_ids: torch.Tensor, n_domains: int,
                      multi_answer: torch.Tensor) -> dict[str, torch.Tensor]:
    """Official FinScore straight from per-question tensors (domain id -1 = missing: outside F).
    Up to MAX_CELL_DOMAINS domains it uses the byte-cell histogram; beyond, one int64 bincount
    over the domain × (multi, correct) table."""
    if n_domains <= MAX_CELL_DOMAINS:
        return official_finscore_from_cells(correct, official_cells(domain_ids, n_domains, multi_answer), n_domains)
    state = multi_answer.to(torch.int64) * 2 + correct.to(torch.int64)
    domains = torch.where(domain_ids < 0, torch.full_like(domain_ids, n_domains), domain_ids)
    table = joint_counts(domains, state, n_domains + 1, 4).to(torch.float64)  # [D+1, 4]
    sums = torch.stack([table.sum(1), table[:, 1] + table[:, 3], table[:, 2] + table[:, 3], table[:, 3]], dim=1)
    return official_statistics(sums, n_domains)


# ---- paper variant -------------------------------------------------------------------------------------
PAPER_CHANNELS = ("n", "score", "selected", "wrong_ratio", "correct")


def paper_question_scores(pred_mask: torch.Tensor, gold_mask: torch.Tensor, n_options: torch.Tensor,
                          denominator: str = "gold") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per choice question: (S = max(0, c/n − i/s), i/s, s > 0). With n = 0 (no gold, no options)
    S = 0; with s = 0, i/s := 0 (nothing selected, nothing hallucinated)."""
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator must be one of {DENOMINATORS}")
    c = popcount(pred_mask & gold_mask).to(torch.float64)
    i = popcount(pred_mask & ~gold_mask).to(torch.float64)
    s = popcount(pred_mask).to(torch.float64)
    n_gold = popcount(gold_mask).to(torch.float64)
    if denominator == "gold":
        n = n_gold
    else:  # options; an unknown option count falls back to the gold count
        n = torch.where(n_options > 0, n_options.to(torch.float64), n_gold)
    ratio = torch.where(s > 0, i / s.clamp(min=1), torch.zeros_like(s))
    score = torch.where(n > 0, (c / n.clamp(min=1) - ratio).clamp(min=0), torch.zeros_like(s))
    return score, ratio, s > 0


def paper_values(score: torch.Tensor, ratio: torch.Tensor, selected: torch.Tensor,
                 correct: torch.Tensor) -> torch.Tensor:
    """[N, 5] channels: 1, S, s > 0, i/s, official correctness (for plain accuracy)."""
    s = score.to(torch.float64)
    return torch.stack([torch.ones_like(s), s, selected.to(torch.float64), ratio.to(torch.float64),
                        correct.to(torch.float64)], dim=1)


def paper_statistics(sums: torch.Tensor, n_domains: int) -> dict[str, torch.Tensor]:
    """Paper FinScore from segment sums [..., S, 5]."""
    n_d, s_d = sums[..., :n_domains, 0], sums[..., :n_domains, 1]
    present = n_d > 0
    domain_score = torch.where(present, s_d / n_d.clamp(min=1), torch.zeros_like(s_d)).sum(-1) / present.sum(-1)
    total = sums.sum(-2)
    selected, ratios = total[..., 2], total[..., 3]
    p_h = torch.where(selected > 0, ratios / selected.clamp(min=1), torch.zeros_like(selected))
    return {"finscore": domain_score * (1 - p_h), "domain_score": domain_score, "p_h": p_h,
            "accuracy": total[..., 4] / total[..., 0]}


# ---- samples table → judged tensors ------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """Every per-question quantity the FinMME rules need (tensors [N])."""

    pred_mask: torch.Tensor
    gold_mask: torch.Tensor
    correct: torch.Tensor  # bool, official
    is_numerical: torch.Tensor
    multi_answer: torch.Tensor
    has_error: torch.Tensor
    n_options: torch.Tensor


def official_question_types(df: pd.DataFrame) -> np.ndarray:
    """FinMME question_type per row (eval.py dispatches on it); rows without one are mapped from `kind`."""
    qtype = str_column(df, "question_type")
    from_kind = np.array([KIND_TO_QUESTION_TYPE.get(k, k) for k in str_column(df, "kind")], dtype=object)
    return np.where(qtype == "", from_kind, qtype)


def judge_frame(df: pd.DataFrame, device: str | torch.device = "cpu") -> Judged:
    """Recompute official correctness from answer / gold / tolerance (never trusting `correct`)."""
    has_error = error_mask(df)
    answers = normalize_response(np.where(has_error, "", str_column(df, "answer")))
    golds = str_column(df, "gold")
    qtype = official_question_types(df)
    is_numerical = qtype == "numerical"
    pred_mask = letters_to_mask(answers, OPTION_LETTERS)
    gold_mask = letters_to_mask(golds, OPTION_LETTERS)
    # numbers are parsed for numerical items only (choice answers stay NaN, unused)
    pred_value = torch.full((len(df),), math.nan, dtype=torch.float64)
    gold_value = torch.full((len(df),), math.nan, dtype=torch.float64)
    num = torch.from_numpy(is_numerical)
    if is_numerical.any():
        pred_value[num] = numeric_values(answers[is_numerical])
        gold_value[num] = numeric_values(golds[is_numerical])
    # a table without the column (a samples table made by hand, `score_samples`): eval.py's `item.get('tolerance', 0.0)`
    tolerance = torch.from_numpy(float_column(df, "tolerance") if "tolerance" in df.columns else np.zeros(len(df)))
    err = torch.from_numpy(has_error)
    pred_mask = torch.where(err, torch.zeros_like(pred_mask), pred_mask)
    correct = official_correct(pred_mask, gold_mask, pred_value, gold_value, tolerance, num, err)
    multi = multi_answer_mask(torch.from_numpy(qtype == "multiple_choice"), gold_mask)
    n_options = torch.from_numpy(np.nan_to_num(float_column(df, "n_options"), nan=0.0))
    dev = torch.device(device)
    return Judged(pred_mask=pred_mask.to(dev), gold_mask=gold_mask.to(dev), correct=correct.to(dev),
                  is_numerical=num.to(dev), multi_answer=multi.to(dev), has_error=err.to(dev),
                  n_options=n_options.to(dev))


def domain_segments(df: pd.DataFrame) -> tuple[torch.Tensor, list[Any], int, list[str]]:
    """(segment ids, domain labels, number of domains, notes). Rows without a domain get the
    extra segment n_domains; with no domain column at all every row is one domain (F = accuracy)."""
    column = first_present(df, DOMAIN_COLUMNS)
    if column is None:
        return torch.zeros(len(df), dtype=torch.int64), ["(all)"], 1, [
            "no domain column: F is computed over a single domain (equals accuracy)"]
    ids, labels = factorize(df[column])
    notes = []
    if bool((ids < 0).any()):
        notes.append(f"{int((ids < 0).sum())} rows without a {column}: counted in accuracy and P_H, not in F")
    ids = torch.where(ids < 0, torch.full_like(ids, len(labels)), ids)
    return ids, labels, len(labels), notes


def build_table(df: pd.DataFrame, variant: str = OFFICIAL, device: str | torch.device = "cpu",
                denominator: str = "gold") -> ScoreTable:
    """The FinMME ScoreTable of one run, official or paper variant."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}")
    judged = judge_frame(df, device)
    segments, labels, n_domains, notes = domain_segments(df)
    segments = segments.to(judged.correct.device)
    correct = judged.correct.to(torch.float64)
    n_segments = n_domains + 1  # the last segment holds rows without a domain (possibly none)
    info: dict[str, Any] = {"domains": [str(x) for x in labels], "notes": notes,
                            "n_multi_answer": int(judged.multi_answer.sum()), "n_errors": int(judged.has_error.sum())}
    if variant == OFFICIAL:
        return ScoreTable(ids=str_column(df, "id"), correct=correct, score=correct,
                          values=official_values(judged.correct, judged.multi_answer), segments=segments,
                          n_segments=n_segments, statistic=partial(official_statistics, n_domains=n_domains),
                          headline=("finscore", "domain_accuracy", "p_h", "accuracy"), primary="finscore",
                          info={**info, "label": OFFICIAL_LABEL})
    choice_pred = torch.where(judged.is_numerical, torch.zeros_like(judged.pred_mask), judged.pred_mask)
    score, ratio, selected = paper_question_scores(choice_pred, judged.gold_mask, judged.n_options, denominator)
    score = torch.where(judged.is_numerical, correct, score)
    return ScoreTable(ids=str_column(df, "id"), correct=correct, score=score,
                      values=paper_values(score, ratio, selected, correct), segments=segments,
                      n_segments=n_segments, statistic=partial(paper_statistics, n_domains=n_domains),
                      headline=("finscore", "domain_score", "p_h", "accuracy"), primary="finscore",
                      info={**info, "label": paper_label(denominator), "n_denominator": denominator,
                            "n_selected": int(selected.sum())})


def summary(df: pd.DataFrame, table: ScoreTable, estimates: dict[str, Any]) -> dict[str, Any]:
    return {"n_multi_answer": table.info["n_multi_answer"], "n_domains": len(table.info["domains"])}


METRICS = (Metric("finscore", "FinScore"), Metric("domain_accuracy", "domain-normalised accuracy (F)"),
           Metric("domain_score", "domain score"),
           Metric("p_h", "multi-answer error rate (P_H)", higher_is_better=False, n_key="n_multi_answer",
                  n_label="multi-answer item"),
           ACCURACY)
PAPER_VARIANT = Variant(PAPER, "the paper's formula (not the headline)", info_fields=("n_denominator",))
SCORER = Scorer(build_table=build_table, variants=(OFFICIAL_RULE, PAPER_VARIANT), summary=summary, metrics=METRICS)
