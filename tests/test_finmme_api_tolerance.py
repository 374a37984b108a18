"""FinMME through the scoring API (`finbench.scoring.score_samples` on a samples table of one's
own): a table without a tolerance column is judged with tolerance 0.0, as eval.py's
`item.get('tolerance', 0.0)` (issue 29 item 13; it was NaN: every numerical item wrong)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from finbench.benchmarks import get_benchmark
from finbench.scoring.tables import score_samples


def _rows():
    return [{"id": "n1", "kind": "numerical", "question_type": "numerical", "gold": "8.81", "answer": "8.81%",
             "domain": "X", "error": ""},
            {"id": "n2", "kind": "numerical", "question_type": "numerical", "gold": "5", "answer": "5.01",
             "domain": "X", "error": ""},
            {"id": "c1", "kind": "single", "question_type": "single_choice", "gold": "B", "answer": "B",
             "domain": "Y", "error": ""}]


def test_a_samples_table_without_tolerance_is_judged_with_tolerance_zero():
    out = score_samples(pd.DataFrame(_rows()), benchmark=get_benchmark("finmme"))
    assert out["accuracy"] == pytest.approx(2 / 3)  # n1 exact, n2 off by 0.01 > 0, c1 right
    assert out["domain_accuracy"] == pytest.approx((0.5 + 1.0) / 2)


def test_a_present_but_missing_tolerance_stays_wrong_as_eval_py_compares_nan():
    rows = [dict(r, tolerance=math.nan) for r in _rows()]
    assert score_samples(pd.DataFrame(rows), benchmark=get_benchmark("finmme"))["accuracy"] == pytest.approx(1 / 3)
    rows = [dict(r, tolerance=0.05) for r in _rows()]
    assert score_samples(pd.DataFrame(rows), benchmark=get_benchmark("finmme"))["accuracy"] == pytest.approx(1.0)
