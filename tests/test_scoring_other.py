"""FinMTM objective rules and FAMMA accuracy against plain-Python references."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pandas as pd
import pytest
import torch

from finbench.benchmarks import get_benchmark
from finbench.kernels.bitmask import letters_to_mask
from finbench.scoring import finmtm
from finbench.scoring.tables import per_question_correct, score_samples

LETTERS = "ABCDEFGHIJKLMN"


# ---- FinMTM -------------------------------------------------------------------------------------------
def ref_objective_set_score(predicted, ground_truth) -> float:
    """finmtm_eval/metrics.py objective_set_score (Eq. 1), transcribed."""
    predicted_set = {str(x).strip().upper() for x in predicted if str(x).strip()}
    truth = {str(x).strip().upper() for x in ground_truth if str(x).strip()}
    if not truth:
        return 0.0  # the official code raises; finbench scores 0
    if predicted_set - truth:
        return 0.0
    return len(predicted_set & truth) / len(truth)


def test_objective_scores_match_reference_on_random_sets():
    rng = random.Random(0)
    preds, golds = [], []
    for _ in range(4000):
        k = rng.randint(2, 8)
        gold = rng.sample(LETTERS[:k], rng.randint(1, min(3, k)))
        r = rng.random()
        if r < 0.1:
            pred = []  # empty selection
        elif r < 0.2:
            pred = [c for c in LETTERS[:k] if c not in gold][:2] or ["N"]  # all wrong
        else:
            pred = rng.sample(LETTERS[:k], rng.randint(1, k))
        preds.append(pred)
        golds.append(gold)
    pm = letters_to_mask(["".join(p) for p in preds])
    gm = letters_to_mask(["".join(g) for g in golds])
    score, exact = finmtm.objective_scores(pm, gm)
    ref = [ref_objective_set_score(p, g) for p, g in zip(preds, golds)]
    assert np.allclose(score.numpy(), ref, atol=1e-9, rtol=0)
    assert exact.tolist() == [set(p) == set(g) for p, g in zip(preds, golds)]
    assert torch.equal(exact, score == 1.0)  # strict accuracy = old protocol, by construction


@pytest.mark.parametrize("text, expected", [
    ('{"answer": "A"}', ["A"]),
    ('{"answer": ["A", "C"]}', ["A", "C"]),
    ('```json\n{"answer": ["a"]}\n```', ["a"]),
    ('<think>A or B?</think>{"answer": "B"}', ["B"]),
    ('<|begin_of_box|>{"answer": "D"}<|end_of_box|>', ["D"]),
    ('"{\\"answer\\": \\"A\\"}"', ["A"]),
    ('{"answer": "A,C"}', ["A,C"]),
    ("{answer: A}", []),
    ('{"answer": 3}', []),
    ('["A"]', []),
    ("", []),
])
def test_parse_official_answer(text, expected):
    assert finmtm.parse_official_answer(text) == expected


def finmtm_frame(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["id"] = [f"m{i}" for i in range(len(df))]
    df["benchmark"] = "finmtm"
    if "error" not in df.columns:
        df["error"] = ""
    return df


def test_finmtm_score_samples_hand_computed():
    df = finmtm_frame([
        {"kind": "multi", "gold": "AC", "answer": "A"},  # 1/2
        {"kind": "multi", "gold": "AC", "answer": "AC"},  # 1
        {"kind": "multi", "gold": "AC", "answer": "AB"},  # over-selection → 0
        {"kind": "multi", "gold": "AC", "answer": '{"answer": "A,C"}'},  # one unknown option → 0
        {"kind": "multi", "gold": "AC", "answer": '{"answer": ["c", "A"]}'},  # 1
        {"kind": "single", "gold": "B", "answer": "B"},  # 1
        {"kind": "single", "gold": "B", "answer": ""},  # empty selection → 0
        {"kind": "single", "gold": "B", "answer": "B", "error": "timeout"},  # error → 0
        {"kind": "open", "gold": "some text", "answer": "x"},  # not objective: excluded
    ])
    out = score_samples(df, benchmark=get_benchmark("finmtm"))
    assert out["n"] == 8 and out["n_excluded"] == 1
    assert out["score"] == pytest.approx((0.5 + 1 + 0 + 0 + 1 + 1 + 0 + 0) / 8)
    assert out["score_percent"] == pytest.approx(100 * out["score"])
    # the old protocol compares raw strings (etest.py before 0305353): ["c", "A"] ≠ gold ["A", "C"]
    assert out["accuracy"] == pytest.approx(3 / 8) and out["score_old"] == pytest.approx(2 / 8)
    kinds = out["breakdowns"]["kind"]
    assert kinds["single"]["n"] == 3 and kinds["single"]["score"] == pytest.approx(1 / 3)
    assert kinds["multi"]["score"] == pytest.approx(2.5 / 5)
    correct = per_question_correct(df.assign(correct=[np.nan] * 8 + [1.0]), get_benchmark("finmtm"))
    assert correct.tolist() == [0, 1, 0, 0, 1, 1, 0, 0, 1]


def test_finmtm_random_matches_reference_and_json_gold():
    rng = random.Random(1)
    rows, ref = [], []
    for _ in range(1000):
        gold = sorted(rng.sample(LETTERS[:5], rng.randint(1, 3)))
        pred = rng.sample(LETTERS[:6], rng.randint(0, 3))
        as_json = rng.random() < 0.5
        answer = json.dumps({"answer": pred}) if as_json else "".join(sorted(pred))
        gold_text = json.dumps({"answer": gold}) if rng.random() < 0.3 else "".join(gold)
        rows.append({"kind": "multi" if len(gold) > 1 else "single", "gold": gold_text, "answer": answer})
        ref.append(ref_objective_set_score(pred, gold))
    out = score_samples(finmtm_frame(rows), benchmark=get_benchmark("finmtm"), n_bootstrap=200)
    assert out["score"] == pytest.approx(np.mean(ref), abs=1e-9)
    assert out["accuracy"] == pytest.approx(np.mean([r == 1.0 for r in ref]), abs=1e-9)
    assert out["ci"]["score"]["low"] <= out["score"] <= out["ci"]["score"]["high"]


# ---- FAMMA --------------------------------------------------------------------------------------------
def famma_frame(n: int, seed: int) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = rng.choice(["single", "open"])
        gold = rng.choice("ABCD") if kind == "single" else rng.choice(["42", "rises", "Alpha beta"])
        if kind == "single":
            answer = rng.choice(["A", "B", "C", "D", ""])
            correct = float(rng.random() < 0.5)  # stale: recomputed for canonical letters
        else:
            answer = rng.choice(["42", "falls", "alpha  BETA", "x"])
            correct = rng.choice([0.0, 1.0, np.nan])
        rows.append({"id": f"f{i}", "benchmark": "famma", "kind": kind, "gold": gold, "answer": answer,
                     "correct": correct, "error": "", "tolerance": np.nan,
                     "language": rng.choice(["english", "chinese", "french"]),
                     "topic_difficulty": rng.choice(["easy", "medium", "hard"]),
                     "subfield": rng.choice(["equity", "derivatives", "fixed income"]),
                     "is_arithmetic": rng.choice([True, False]),
                     "question_type": "multiple-choice" if kind == "single" else "open question"})
    return pd.DataFrame(rows)


def ref_famma_correct(row) -> bool:
    if row["kind"] == "single":
        return row["answer"] == row["gold"]
    if not pd.isna(row["correct"]):
        return row["correct"] > 0.5
    return " ".join(str(row["answer"]).casefold().split()) == " ".join(str(row["gold"]).casefold().split())


def test_famma_accuracy_and_breakdowns_match_groupby():
    df = famma_frame(900, 0)
    df["ref"] = df.apply(ref_famma_correct, axis=1)
    df["arith_label"] = np.where(df["is_arithmetic"], "arithmetic", "non-arithmetic")
    df["lang_diff"] = df["language"] + "|" + df["topic_difficulty"]
    out = score_samples(df.drop(columns=["ref", "arith_label", "lang_diff"]), benchmark=get_benchmark("famma"), n_bootstrap=100)
    assert out["accuracy"] == pytest.approx(df["ref"].mean(), abs=1e-12)
    for column, ref_column in [("language", "language"), ("difficulty", "topic_difficulty"),
                               ("subfield", "subfield"), ("arithmetic", "arith_label"),
                               ("question_type", "question_type"), ("language×difficulty", "lang_diff")]:
        ref = df.groupby(ref_column)["ref"].agg(["size", "mean"])
        got = out["breakdowns"][column]
        assert set(got) == set(ref.index), column
        for value, row in ref.iterrows():
            assert got[value]["n"] == row["size"]
            assert got[value]["accuracy"] == pytest.approx(row["mean"], abs=1e-12)
    sources = out["correct_sources"]
    assert sources["recomputed_letters"] == int((df["kind"] == "single").sum())
    assert sources["rule_fallback"] == int(((df["kind"] == "open") & df["correct"].isna()).sum())
    assert out["notes"]  # the rule fallback is reported


def test_famma_numerical_fallback_and_errors():
    df = pd.DataFrame([
        {"id": "a", "kind": "numerical", "gold": "8.81%", "answer": "8.8", "tolerance": 0.05, "error": ""},
        {"id": "b", "kind": "numerical", "gold": "8.81", "answer": "9", "tolerance": 0.05, "error": ""},
        {"id": "c", "kind": "single", "gold": "A", "answer": "A", "tolerance": np.nan, "error": "bad image"},
        {"id": "d", "kind": "open", "gold": "Yes", "answer": "yes", "tolerance": np.nan, "error": ""},
    ])
    assert per_question_correct(df, get_benchmark("famma")).tolist() == [1.0, 0.0, 0.0, 1.0]


def test_unknown_benchmark_and_variant_rejected():
    df = famma_frame(5, 1)
    with pytest.raises(ValueError):
        score_samples(df, benchmark=get_benchmark("nope"))
    with pytest.raises(ValueError):
        score_samples(df, benchmark=get_benchmark("famma"), variant="paper")


def test_print_scores_for_other_benchmarks():
    from rich.console import Console

    from finbench.report.console import print_scores

    console = Console(file=io.StringIO(), width=120)
    print_scores(score_samples(famma_frame(60, 2), benchmark=get_benchmark("famma"), n_bootstrap=20), console)
    mtm = finmtm_frame([{"kind": "multi", "gold": "AC", "answer": "A"}, {"kind": "single", "gold": "B", "answer": "B"}])
    print_scores(score_samples(mtm, benchmark=get_benchmark("finmtm"), n_bootstrap=20), console)
    text = console.file.getvalue()
    assert "by language×difficulty" in text and "FinMTM" in text and "75.00" in text  # (0.5 + 1) / 2 × 100
