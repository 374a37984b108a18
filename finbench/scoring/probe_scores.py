"""Contamination probes scored from a run's tables alone (no model, CPU): results.json's `probes`.

The probe rows of variants.parquet (`study` "probe", `probe` none-of-the-above or open-ended;
studies/probes.py) against the base run's rows of the same items:

- none-of-the-above: the gold option taken out and "None of the above" put last, so `accuracy`
  is the share of probed items whose answer is "None of the above"; its control (`probe`
  none-of-the-above-control) takes out a wrong option instead, so "None of the above" is wrong and
  the gold still shown. `picks_none_when_right` and `picks_none_when_wrong` are the two rates of
  answering "None of the above": only their gap says the model reads the options — a model that
  picks "None of the above" (or one letter) whatever the item shows both alike.
- open-ended: the item asked without its options; the free answer is right when it names the gold
  option's text (`option_matches`: normalized containment, or the same number for an option that
  is a number, not negated in its clause: "does not increase", 不会上升) and no other option's —
  or, in a run with --judge, when the judge says so (studies/probes.py's generic prompt; a reply
  without yes or no is no verdict: the rule's verdict stands and the row is counted).

Per probe: `n` probed items, `not_probed` by reason (multi-answer items, options that name the
others, prompts that show no option apart from the text), `accuracy` on the probed items beside
`base_accuracy` on the same items, their paired difference (`paired`: clustered SE on the run's
`cluster` column, 95% interval, minimum detectable effect; scoring/clustered.py) and
`kept_when_right`: of the items right in the base run, the share still right under the probe.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.core.types import OPTION_LETTERS
from finbench.kernels.segments import factorize
from finbench.scoring.clustered import paired_difference
from finbench.scoring.stats import error_mask, float_column, str_column
from finbench.scoring.tables import _jsonable

PROBE = "probe"  # the `study` column of variants.parquet
OPEN_ENDED = "open-ended"  # the probe whose rows are scored here by rule (studies/probes.py)
NONE_OF_THE_ABOVE = "none-of-the-above"
CONTROL = "none-of-the-above-control"  # its control rows: "None of the above" last and wrong

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_MARKUP = re.compile(r"\\boxed\{|\\text\{|[*_`$\\{}]")
# the words of a normalized text: a number keeps its sign, decimal point and thousands separators
# ("-5", "1,200.5"; a sign only where no word runs into it: "5-6" is 5 and 6), "%" is a word of its own
_TOKEN = re.compile(r"(?<!\w)[-+]?\d+(?:[.,]\d+)*|\w+|%")
_MINUS = str.maketrans({"\u2212": "-"})  # the minus sign, which NFKC leaves as it is
_CJK_NEGATIONS = set("不非没沒未无無否")  # a character that negates the rest of its clause
_CJK_NOT_NEGATING = ("非常", "不仅", "不僅", "不但", "不只", "无论", "無論", "并非只", "不断", "不斷")
# English negations, as `normalized` writes them ("doesn't" → "doesn t"): a clause holding one
# before the option does not name it
_NEGATORS = frozenset({"not", "no", "never", "neither", "nor", "cannot", "t", "none", "without"})
# clause ends: punctuation (a comma or point inside a number aside: "1,200.5"), and contrasting words
_CLAUSE = re.compile(r"[;:!?\n，。；：！？、]|(?<!\d)[.,]|[.,](?!\d)|\b(?:but|however|although|though|whereas)\b"
                     r"|但|而是|但是|反而", re.IGNORECASE)
_UNIT_WORDS = {"%", "percent", "usd", "us", "eur", "rmb", "cny", "yuan", "dollars", "dollar", "million", "millions",
               "billion", "billions", "thousand", "thousands", "k", "m", "bn", "mn", "x", "times", "years", "year",
               "days", "day", "months", "month", "bp", "bps"}


def _nfkc(text: Any) -> str:
    return unicodedata.normalize("NFKC", str(text or "")).translate(_MINUS)


def normalized(text: Any) -> str:
    """Case-folded NFKC text, markdown and LaTeX marks removed, words separated by one space; a
    number keeps its sign, decimals and thousands separators and "%" stays a word ("-5 %" is not
    "5 %", "1,200.5" stays one word)."""
    text = _MARKUP.sub(" ", _nfkc(text).casefold())
    return " ".join(m.group(0) for m in _TOKEN.finditer(text))


def numbers(text: Any) -> list[float]:
    """The numbers written in `text` ('1,200.5' is one number, '−5' a negative one), in order."""
    return [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(_nfkc(text))]


def named_numbers(text: Any) -> list[float]:
    """The numbers `text` names: each not negated in its clause ("not 5 percent", "isn't 5",
    "不是5%" name no 5; "It is 5 percent, not 6" names 5 and not 6)."""
    found = []
    for clause in _CLAUSE.split(_nfkc(text)):
        for match in _NUMBER.finditer(clause):
            if not _negated(clause[:match.start()]):
                found.append(float(match.group(0).replace(",", "")))
    return found


def _negated(before: str) -> bool:
    """Whether a clause negates what follows `before`: an English negation among its words, or a
    CJK one in it."""
    words = set(f" {normalized(before)} ".replace(" not only ", " ").split())
    return bool(_NEGATORS & words) or _negated_cjk(before.replace(" ", ""))


def numeric_option(option: str) -> float | None:
    """The option's number when the option is a number with at most a unit ('8.81%', '$1,200 million')."""
    found = numbers(option)
    if len(found) != 1:
        return None
    rest = normalized(_NUMBER.sub(" ", _nfkc(option)))
    return found[0] if all(w in _UNIT_WORDS for w in rest.split()) else None


def option_matches(answer: Any, option: Any) -> bool:
    """Whether a free answer names `option`: the same number for an option that is a number (with
    at most a unit), else the option's normalized text inside the answer's, on word boundaries
    (plain containment for text without spaces between words, e.g. Chinese) — either in a clause
    with no negation before it ("does not increase", "no increase", "isn't", "not 5 percent",
    不是上升, 不会上升, 不是5%, 没有)."""
    option = str(option or "")
    wanted = normalized(option)
    if not wanted:
        return False
    number = numeric_option(option)
    if number is not None:
        return any(abs(found - number) <= 1e-9 * max(1.0, abs(number)) for found in named_numbers(answer))
    cjk = re.search(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", wanted) is not None
    for clause in _CLAUSE.split(_nfkc(answer)):
        said = normalized(clause)
        if cjk:
            said, target = said.replace(" ", ""), wanted.replace(" ", "")
            starts = [m.start() for m in re.finditer(re.escape(target), said)]
            if any(not _negated_cjk(said[:start]) for start in starts):
                return True
            continue
        padded = f" {said} "
        starts = [m.start() for m in re.finditer(re.escape(f" {wanted} "), padded)]
        if any(not (_NEGATORS & set(padded[:start].replace(" not only ", " ").split())) for start in starts):
            return True
    return False


def _negated_cjk(before: str) -> bool:
    """Whether a CJK clause negates what follows `before`: 不, 没, 非, 未, 无, 否 anywhere in it
    (不是上升, 不会上升, 没有上升), words that only contain one (非常 "very", 不仅 "not only") aside."""
    for word in _CJK_NOT_NEGATING:
        before = before.replace(word, "")
    return bool(_CJK_NEGATIONS & set(before))


def names_gold(answer: Any, options: Sequence[Any], gold: str) -> bool:
    """Whether a free answer names the gold option (one letter) and no other option, an option
    contained in the gold's own text aside ('revenue' in 'revenue growth')."""
    options = [str(o) for o in (options if options is not None else ())]
    index = OPTION_LETTERS.find(gold) if len(gold) == 1 else -1
    if not 0 <= index < len(options) or not option_matches(answer, options[index]):
        return False
    gold_text = normalized(options[index])
    return not any(option_matches(answer, o) and not option_matches(gold_text, o)
                   for j, o in enumerate(options) if j != index and normalized(o) != gold_text)


def probe_verdicts(table: pd.DataFrame, correct: Sequence[Any], judged: bool = False) -> pd.DataFrame:
    """The variants table with each open-ended row's `answer` its free text (stripped) and its
    `correct` the rule's verdict (errors 0) — or, `judged` (a run with --judge), the judge's
    verdict (`judge_score`) where it gave one; other rows keep `correct` as scored."""
    out = table.assign(correct=np.asarray(correct, dtype=np.float64))
    if "probe" not in out.columns:
        return out
    rows = np.flatnonzero(str_column(out, "probe") == OPEN_ENDED)
    if not len(rows):
        return out
    text = str_column(out, "raw_output")[rows]
    options, golds = out["options"].to_numpy(dtype=object)[rows], str_column(out, "gold")[rows]
    verdict = np.array([names_gold(t, o, g) for t, o, g in zip(text, options, golds)], dtype=np.float64)
    verdict[error_mask(out)[rows]] = 0.0
    if judged and "judge_score" in out.columns:
        by_judge = float_column(out, "judge_score")[rows]
        verdict = np.where(np.isnan(by_judge), verdict, by_judge)
    out.iloc[rows, out.columns.get_loc("answer")] = [str(t).strip() for t in text]
    out.iloc[rows, out.columns.get_loc("correct")] = verdict
    return out


def _hits(df: pd.DataFrame) -> np.ndarray:
    """Per-row 0/1 correctness, errors wrong, NaN where not scored."""
    correct = float_column(df, "correct")
    return np.where(error_mask(df), np.where(np.isnan(correct), np.nan, 0.0), correct)


def probe_summary(samples: pd.DataFrame, variants: pd.DataFrame | None, probes: Sequence[str],
                  not_probed: Mapping[str, Mapping[str, int]], judged: bool = False) -> dict[str, Any]:
    """results.json's `probes`: per probe asked, its numbers on the probed items (module docstring);
    `scored_by` "judge" for the open-ended probe of a run with --judge (`judged`), else "rule"."""
    out: dict[str, Any] = {}
    rows_all = variants if variants is not None and "probe" in variants.columns else pd.DataFrame()
    base = samples.drop_duplicates("id").set_index(samples.drop_duplicates("id")["id"].astype(str))
    for probe in probes:
        skipped = dict(not_probed.get(probe, {}))
        entry: dict[str, Any] = {"n": 0, "n_errors": 0, "not_probed": skipped, "n_not_probed": sum(skipped.values()),
                                 "accuracy": None, "base_accuracy": None, "diff": None, "kept_when_right": None,
                                 "n_base_right": 0, "paired": None,
                                 "scored_by": "judge" if judged and probe == OPEN_ENDED else "rule"}
        rows = rows_all[str_column(rows_all, "probe") == probe] if len(rows_all) else rows_all
        ids = str_column(rows, "id") if len(rows) else np.array([], dtype=object)
        keep = np.isin(ids, base.index.to_numpy(dtype=object))
        rows, ids = (rows[keep], ids[keep]) if len(rows) else (rows, ids)
        if len(rows):
            probed = torch.from_numpy(_hits(rows))
            before = torch.from_numpy(_hits(base.loc[list(ids)]))
            right = before == 1
            clusters = str_column(rows, "cluster") if "cluster" in rows.columns else ids
            cluster_ids, labels = factorize(pd.Series(np.where(clusters == "", ids, clusters), dtype=object))
            paired = paired_difference(probed, before, cluster_ids, len(labels))
            entry.update({"n": int(len(rows)), "n_errors": int(error_mask(rows).sum()),
                          "accuracy": _nanmean(probed), "base_accuracy": _nanmean(before), "diff": paired["diff"],
                          "kept_when_right": _nanmean(probed[right]), "n_base_right": int(right.sum()),
                          "paired": paired})
        if probe == NONE_OF_THE_ABOVE:
            entry.update(_control(rows, rows_all, base))
        out[probe] = entry
    return _jsonable(out)


def _picks_last(rows: pd.DataFrame) -> np.ndarray:
    """Per row: 1 when the answer is the last option's letter ("None of the above"), 0 when it is
    another answer, NaN for an error (no answer to count)."""
    counts = pd.to_numeric(rows["n_options"], errors="coerce").fillna(0) if "n_options" in rows.columns else \
        rows["options"].map(lambda o: 0 if o is None else len(o)) if "options" in rows.columns else pd.Series(0, rows.index)
    last = np.array([OPTION_LETTERS[int(n) - 1] if 0 < int(n) <= len(OPTION_LETTERS) else "" for n in counts],
                    dtype=object)
    picked = (str_column(rows, "answer") == last).astype(np.float64)
    return np.where(error_mask(rows) | (last == ""), np.nan, picked)


def _control(rows: pd.DataFrame, rows_all: pd.DataFrame, base: pd.DataFrame) -> dict[str, Any]:
    """The none-of-the-above probe beside its control on the same items: how often the model picks
    "None of the above" where it is right (the probe) and where it is wrong (the control, the gold
    still shown). Reading shows as a high first rate and a low second; a model that picks it, or
    a letter, whatever the item shows both alike."""
    control = rows_all[str_column(rows_all, "probe") == CONTROL] if len(rows_all) else rows_all
    if len(control):
        control = control[np.isin(str_column(control, "id"), base.index.to_numpy(dtype=object))]
    when_right = _picks_last(rows) if len(rows) else np.array([])
    when_wrong = _picks_last(control) if len(control) else np.array([])
    mean = (lambda v: float(np.nanmean(v)) if np.isfinite(v).any() else None)  # noqa: E731
    return {"picks_none_when_right": mean(when_right), "picks_none_when_wrong": mean(when_wrong),
            "control": {"n": int(len(control)), "n_errors": int(error_mask(control).sum()) if len(control) else 0,
                        "accuracy": _nanmean(torch.from_numpy(_hits(control))) if len(control) else None}}


def _nanmean(values: torch.Tensor) -> float | None:
    known = values[~torch.isnan(values)]
    return float(known.mean()) if known.numel() else None
