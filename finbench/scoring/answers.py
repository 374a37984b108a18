"""Answer readings several benchmarks share, restated once from the official code that defines
them: FinMME eval.py's `normalize_response` (markdown bold and LaTeX boxes removed) and its number
reading (digits, '.' and '-' only, then `float`), with its absolute-tolerance comparison. FinMME's
rule (scoring/finmme.py), FAMMA's number fallback (scoring/famma.py) and the answer comparison of
two runs (scoring/robustness.py `read_answers`) import them from here, none from another's rule."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd
import torch

from finbench.kernels.bitmask import to_str_array

NORMALIZE_REPLACEMENTS = ("**", ":", "$\\boxed{", "}$", "\\$", "$", "{", "\\boxed")  # eval.py, in its order


def normalize_response(answers: Iterable[Any] | np.ndarray) -> np.ndarray:
    """eval.py `normalize_response` on every answer (vectorised string replacements, same order)."""
    series = pd.Series(to_str_array(answers), dtype=object)
    for old in NORMALIZE_REPLACEMENTS:
        series = series.str.replace(old, "", regex=False)
    return series.to_numpy(dtype=object)


def official_number(text: str) -> float:
    """eval.py's number reading: digits, '.' and '-' only, then `float`; failure → NaN."""
    kept = "".join(c for c in text if c.isdigit() or c in ".-")
    try:
        return float(kept)
    except (ValueError, TypeError):
        return math.nan


def numeric_values(texts: Iterable[Any] | np.ndarray) -> torch.Tensor:
    """`official_number` of each string (float64 [N]); parsed once per distinct string."""
    codes, uniques = pd.factorize(pd.Series(to_str_array(texts), dtype=object))
    parsed = np.array([official_number(u) for u in uniques], dtype=np.float64)
    return torch.from_numpy(parsed[codes] if len(codes) else np.zeros(0))


def numerical_correct(pred: torch.Tensor, gold: torch.Tensor, tolerance: torch.Tensor) -> torch.Tensor:
    """|pred − gold| ≤ tolerance; any NaN (parse failure, missing tolerance) compares False."""
    return (pred - gold).abs() <= tolerance
