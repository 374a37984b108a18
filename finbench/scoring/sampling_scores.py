"""Repeated sampling (`--samples K`) scored from a run's tables alone: results.json's `sampling`.

The K samples of a question are its row in samples.parquet (sample 0) and its K−1 rows of
variants.parquet of the repeated-sampling study (`sample` 1…K−1; studies/sampling.py). Each sample is
scored by the benchmark's own rule (its `Scorer`, the per-question score the headline averages;
a row the rule leaves to a judge keeps its stored `correct`), and two samples give the same
answer when the rule's extracted answers (the `answer` column) are equal. Then, with
`clustered.repeated_sampling`:

- `mean`: the mean score over all N × K samples; `se`: the cluster-robust SE of the N per-question
  means on the run's clusters (`se_iid` without them; Miller, "Adding Error Bars to Evals",
  arXiv:2411.00640, on resampling), and `ci` their clustered 95% interval;
- `maj_at_k`: the score of each question's most frequent parsed answer (a tie: the earliest
  sample's);
- `pass_at_k`: the score of each question's best sample (any sample right);
- `agreement`: the mean share of a question's parsed samples that give its modal answer (1:
  always the same answer). A sample whose rule read no answer (an empty `answer`) is no vote:
  `n_unparsed` counts them, `n_no_parsed` the questions without any parsed sample.

The same numbers per group of every breakdown the benchmark's score has (`by`). A question some
sample's rule gives no per-question score (NaN: an open answer without a judge, a row the rule
scores only as a whole) is left out of every number and counted in `n_unscored`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.kernels.bitmask import to_str_array
from finbench.kernels.segments import MISSING_LABEL, factorize
from finbench.scoring.clustered import repeated_sampling
from finbench.scoring.tables import _clusters, _group_frame, _jsonable, build_table

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark


def sample_scores(frame: pd.DataFrame, benchmark: Benchmark) -> np.ndarray:
    """The benchmark's per-question score of each row of `frame` [N] (float; NaN: not scored)."""
    table = build_table(frame, benchmark)
    out = pd.to_numeric(frame["correct"], errors="coerce").to_numpy(np.float64).copy() if "correct" in frame.columns \
        else np.full(len(frame), np.nan)
    rows = table.info.get("rows")
    out[np.arange(len(frame)) if rows is None else np.asarray(rows, dtype=np.int64)] = \
        table.score.cpu().numpy().astype(np.float64)
    return out


def sampling_summary(frames: Sequence[pd.DataFrame], benchmark: Benchmark, k: int) -> dict[str, Any]:
    """results.json's `sampling`: {k, n, mean, se, maj_at_k, pass_at_k, agreement, by: {breakdown:
    {group: the same}}} over `frames`, the K tables of the same questions in the same order."""
    n_rows = len(frames[0]) if frames else 0
    if n_rows == 0:
        return {"k": k, "n": 0, "mean": None, "se": None, "se_iid": None, "maj_at_k": None, "pass_at_k": None,
                "agreement": None, "n_unparsed": 0, "n_no_parsed": 0, "n_unscored": 0, "by": {}}
    correct = torch.from_numpy(np.stack([sample_scores(f, benchmark) for f in frames], axis=1))  # [N, K]
    texts = pd.Series(np.concatenate([to_str_array(f["answer"]) for f in frames]), dtype=object)  # any text a reply holds
    answers = factorize(texts)[0].reshape(len(frames), n_rows).T.contiguous()  # [N, K]: equal code, equal answer
    parsed = torch.from_numpy((texts.str.strip() != "").to_numpy().reshape(len(frames), n_rows).T.copy())
    keep = ~torch.isnan(correct).any(1)
    spec = benchmark
    clusters = factorize(pd.Series(_clusters(frames[0].reset_index(drop=True), spec)[1][keep].numpy()))[0]
    out = {**repeated_sampling(answers[keep], correct[keep], parsed[keep], clusters), "n_unscored": int((~keep).sum())}
    rows = _group_frame(frames[0].reset_index(drop=True), spec.scorer)[keep.numpy()]
    out["by"] = {}
    for column in [c for c in spec.group_columns if c in rows.columns and len(rows)]:  # (none scored: no groups)
        values = rows[column]
        ids, labels = factorize(values.astype(object).where(values.isna(), values.astype(str)))
        groups = {}
        for j, label in enumerate([*map(str, labels), MISSING_LABEL]):
            member = ids == (j if j < len(labels) else -1)  # one mask per group: breakdowns have few groups
            if bool(member.any()):
                groups[label] = repeated_sampling(answers[keep][member], correct[keep][member],
                                                  parsed[keep][member], factorize(pd.Series(clusters[member].numpy()))[0])
        out["by"][column] = groups
    return _jsonable(out)


def per_question_means(samples: pd.DataFrame, rows: pd.DataFrame | None, benchmark: Benchmark) -> pd.Series | None:
    """The mean score of each sampled question over its K samples (sample 0 in `samples`, the
    others the sampling study's `rows` of variants.parquet), by id; None for a run without samples.
    A paired comparison of --samples runs uses these, not sample 0 alone: averaging the K samples
    takes the within-question sampling noise out of the difference (Miller 2024, arXiv:2411.00640,
    on resampling)."""
    if rows is None or not len(rows):
        return None
    rows = rows.reset_index(drop=True)
    base = samples[samples["id"].astype(str).isin(set(rows["id"].astype(str)))].reset_index(drop=True)
    scores = pd.concat([pd.Series(sample_scores(base, benchmark), index=base["id"].astype(str).to_numpy()),
                        pd.Series(sample_scores(rows, benchmark), index=rows["id"].astype(str).to_numpy())])
    return scores.groupby(level=0).mean()
