"""FinMME rules against plain-Python references of luo-junyu/FinMME eval.py and of the paper formula."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
import torch

from finbench.benchmarks import get_benchmark
from finbench.scoring import finmme, finmme_cells
from finbench.scoring.stats import point_estimates
from finbench.scoring.tables import per_question_correct, score_samples

LETTERS = "ABCDEFGHIJKLMN"


# ---- plain references (eval.py, transcribed) ---------------------------------------------------------
def ref_normalize(response: str) -> str:
    return (response.replace("**", "").replace(":", "").replace("$\\boxed{", "").replace("}$", "")
            .replace("\\$", "").replace("$", "").replace("{", "").replace("\\boxed", ""))


def ref_check(question_type: str, gold: str, answer: str, tolerance) -> bool:
    pred = ref_normalize(answer)
    if question_type == "numerical":
        try:
            model_value = float("".join(c for c in pred if c.isdigit() or c in ".-"))
            correct_value = float("".join(c for c in gold if c.isdigit() or c in ".-"))
            return abs(model_value - correct_value) <= float(tolerance)
        except (ValueError, TypeError):
            return False
    return {c for c in pred.upper() if c in LETTERS} == {c for c in gold.upper() if c in LETTERS}


def ref_calculate_finscore(df: pd.DataFrame) -> tuple[float, float, float]:
    """eval.py calculate_finscore on (knowledge_domain, question_type, answer = gold, correct_or_not)."""
    domain_scores = df.groupby("knowledge_domain")["correct_or_not"].mean()
    domain_normed = domain_scores.mean()
    multi = df[(df["question_type"] == "multiple_choice") & (df["answer"].astype(str).str.len() > 1)]
    rate = 0.0
    if not multi.empty:
        rate = (~multi["correct_or_not"]).mean()
    return domain_normed * (1 - rate), domain_normed, rate


def ref_paper(rows: list[dict], denominator: str) -> tuple[float, float, float]:
    """Paper FinScore, one question at a time."""
    per_domain: dict[str, list[float]] = {}
    ratios = []
    for r in rows:
        if r["question_type"] == "numerical":
            s_q = float(r["ref_correct"])
        else:
            pred = {c for c in ref_normalize(r["answer"]).upper() if c in LETTERS} if not r["error"] else set()
            gold = {c for c in r["gold"].upper() if c in LETTERS}
            c, i, s = len(pred & gold), len(pred - gold), len(pred)
            n = len(gold) if denominator == "gold" else (r["n_options"] if r["n_options"] > 0 else len(gold))
            ratio = i / s if s > 0 else 0.0
            s_q = max(0.0, c / n - ratio) if n > 0 else 0.0
            if s > 0:
                ratios.append(ratio)
        per_domain.setdefault(r["domain"], []).append(s_q)
    f = sum(sum(v) / len(v) for v in per_domain.values()) / len(per_domain)
    p_h = sum(ratios) / len(ratios) if ratios else 0.0
    return f * (1 - p_h), f, p_h


# ---- random data with the edge cases -------------------------------------------------------------------
CHOICE_ANSWERS = ["", "A", "A,C", "AC", "ac", "C,A", "**B**", "$\\boxed{C}$", "\\boxed{D}", "B:", "Answer",
                  "ﬀ", "ACD", "N", "O", "ABCDEFGHIJKLMN", "a, c", "{B}"]
NUMBER_ANSWERS = ["8.81", "8.81%", "8.8", "-3", "-3.0", "1.2.3", "", "abc", "１２", "²", "3.", ".5", "-", "12",
                  "1,234.5", "$8.81$", "\\boxed{8.81}"]


def random_frame(n: int, seed: int, n_domains: int = 6) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        qtype = rng.choice(["single_choice", "multiple_choice", "numerical"])
        domain = f"d{rng.randrange(n_domains)}"
        n_options = rng.randint(2, 6)
        if qtype == "numerical":
            gold = rng.choice(["8.81", "8.81%", "-3", "12", "0.5", "1234.5"])
            answer = rng.choice(NUMBER_ANSWERS + [gold])
            tol = rng.choice([0.0, 0.05, 0.5, 1.0, float("nan")])
            n_options = 0
        else:
            k = 1 if qtype == "single_choice" else rng.randint(1, 3)  # multiple_choice with ONE gold letter too
            gold = "".join(sorted(rng.sample(LETTERS[:n_options], min(k, n_options))))
            answer = rng.choice(CHOICE_ANSWERS + [gold, gold.lower(), ",".join(gold)])
            tol = float("nan")
        error = "image: corrupt" if rng.random() < 0.03 else ""
        rows.append({"id": f"q{i}", "benchmark": "finmme", "question_type": qtype,
                     "kind": {"single_choice": "single", "multiple_choice": "multi", "numerical": "numerical"}[qtype],
                     "gold": gold, "answer": answer, "tolerance": tol, "n_options": n_options,
                     "domain": domain, "error": error, "correct": float(rng.random() < 0.5)})  # stale column
    # a domain with exactly one question
    rows[-1]["domain"] = "lonely"
    df = pd.DataFrame(rows)
    df["ref_correct"] = [(not r.error) and ref_check(r.question_type, r.gold, r.answer, r.tolerance)
                         for r in df.itertuples()]
    return df


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_official_judge_matches_reference(seed):
    df = random_frame(1500, seed)
    got = per_question_correct(df.drop(columns=["ref_correct"]), get_benchmark("finmme"))
    assert got.tolist() == df["ref_correct"].astype(float).tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_official_finscore_equals_pandas_groupby(seed):
    df = random_frame(1500, seed)
    ref = ref_calculate_finscore(pd.DataFrame({
        "knowledge_domain": df["domain"], "question_type": df["question_type"], "answer": df["gold"],
        "correct_or_not": df["ref_correct"].astype(bool)}))
    out = score_samples(df.drop(columns=["ref_correct"]))
    assert out["finscore"] == pytest.approx(ref[0], abs=1e-9)
    assert out["domain_accuracy"] == pytest.approx(ref[1], abs=1e-9)
    assert out["p_h"] == pytest.approx(ref[2], abs=1e-9)
    assert out["accuracy"] == pytest.approx(df["ref_correct"].mean(), abs=1e-9)
    assert out["n"] == len(df) and out["n_errors"] == int((df["error"] != "").sum())
    assert out["variant"] == "official" and "official" in out["label"]
    # the stale stored column was ignored, and flagged
    assert out["stored_correct_mismatches"] == int((df["correct"].astype(bool) != df["ref_correct"]).sum())


@pytest.mark.parametrize("denominator", ["gold", "options"])
@pytest.mark.parametrize("seed", [0, 3])
def test_paper_variant_matches_per_question_reference(seed, denominator):
    df = random_frame(1200, seed)
    rows = df.to_dict("records")
    ref = ref_paper(rows, denominator)
    out = score_samples(df.drop(columns=["ref_correct"]), variant="paper", denominator=denominator)
    assert out["finscore"] == pytest.approx(ref[0], abs=1e-9)
    assert out["domain_score"] == pytest.approx(ref[1], abs=1e-9)
    assert out["p_h"] == pytest.approx(ref[2], abs=1e-9)
    assert out["variant"] == "paper" and "paper" in out["label"] and out["n_denominator"] == denominator


def frame(rows: list[dict]) -> pd.DataFrame:
    base = {"benchmark": "finmme", "error": "", "tolerance": float("nan"), "n_options": 4}
    df = pd.DataFrame([{**base, **r} for r in rows])
    df["id"] = [f"q{i}" for i in range(len(df))]
    df["kind"] = df["question_type"].map({"single_choice": "single", "multiple_choice": "multi",
                                          "numerical": "numerical"})
    return df


def test_hand_computed_domain_normalisation_and_multi_answer_rule():
    df = frame([
        # domain X: one question, right
        {"domain": "X", "question_type": "single_choice", "gold": "B", "answer": "B"},
        # domain Y: 3 questions, 1 right
        {"domain": "Y", "question_type": "multiple_choice", "gold": "AC", "answer": "A,C"},  # multi-answer, right
        {"domain": "Y", "question_type": "multiple_choice", "gold": "AC", "answer": "A"},  # multi-answer, wrong
        {"domain": "Y", "question_type": "multiple_choice", "gold": "D", "answer": "C"},  # ONE gold letter: not in P_H
    ])
    out = score_samples(df)
    assert out["accuracy"] == pytest.approx(2 / 4)
    assert out["domain_accuracy"] == pytest.approx((1 + 1 / 3) / 2)  # domain-normalised, not 2/4
    assert out["p_h"] == pytest.approx(1 / 2)  # over the two multi-answer items only
    assert out["finscore"] == pytest.approx((1 + 1 / 3) / 2 * (1 - 1 / 2))
    assert out["n_multi_answer"] == 2


def test_no_multi_answer_items_means_no_penalty():
    df = frame([{"domain": "X", "question_type": "single_choice", "gold": "B", "answer": "B"},
                {"domain": "Y", "question_type": "single_choice", "gold": "A", "answer": "C"}])
    out = score_samples(df)
    assert out["p_h"] == 0.0 and out["finscore"] == pytest.approx(0.5)


def test_numerical_tolerance_cases():
    cases = [  # (gold, answer, tolerance, expected)
        ("8.81%", "8.81", 0.0, True),
        ("8.81", "8.81%", 0.0, True),
        ("8.81", "8.85", 0.05, True),
        ("8.81", "8.9", 0.05, False),
        ("8.81", "8.81", float("nan"), False),  # missing tolerance → wrong
        ("8.81", "abc", 1.0, False),  # parse failure → wrong
        ("8.81", "", 1.0, False),
        ("-3", "-3.0", 0.0, True),
        ("12", "1.2.3", 100.0, False),
        ("12", "１２", 0.0, True),  # str.isdigit and float accept full-width digits
    ]
    df = frame([{"domain": "X", "question_type": "numerical", "gold": g, "answer": a, "tolerance": t}
                for g, a, t, _ in cases])
    assert per_question_correct(df).tolist() == [float(e) for *_, e in cases]


def test_missing_tolerance_column_is_tolerance_zero_and_choice_cases():
    df = frame([{"domain": "X", "question_type": "numerical", "gold": "1", "answer": "1"},
                {"domain": "X", "question_type": "numerical", "gold": "1", "answer": "1.5"}]).drop(columns="tolerance")
    assert per_question_correct(df).tolist() == [1.0, 0.0]  # eval.py's item.get('tolerance', 0.0) (issue 29)
    cases = [("AC", "A,C", True), ("AC", "a, c", True), ("AC", "A, C", True), ("A", "", False),
             ("B", "**B**", True), ("C", "$\\boxed{C}$", True), ("D", "\\boxed{D}", True), ("B", "Answer", False),
             ("AC", "CA", True), ("A", "AA", True), ("A", "AB", False)]
    df = frame([{"domain": "X", "question_type": "multiple_choice", "gold": g, "answer": a} for g, a, _ in cases])
    assert per_question_correct(df).tolist() == [float(e) for *_, e in cases]


def test_errors_count_as_wrong_and_missing_correct_column():
    df = frame([{"domain": "X", "question_type": "single_choice", "gold": "A", "answer": "A", "error": "oops"},
                {"domain": "X", "question_type": "single_choice", "gold": "A", "answer": "A"}])
    assert "correct" not in df.columns
    out = score_samples(df)
    assert out["accuracy"] == 0.5 and out["n_errors"] == 1


def test_paper_hand_computed():
    df = frame([
        {"domain": "X", "question_type": "multiple_choice", "gold": "AC", "answer": "AB"},  # c=1,i=1,s=2 → 0
        {"domain": "X", "question_type": "multiple_choice", "gold": "AC", "answer": "A"},  # 1/2
        {"domain": "X", "question_type": "multiple_choice", "gold": "AC", "answer": ""},  # s = 0 → 0, no P_H
        {"domain": "Y", "question_type": "single_choice", "gold": "B", "answer": "B"},  # 1
    ])
    out = score_samples(df, variant="paper")
    f = ((0 + 0.5 + 0) / 3 + 1) / 2
    p_h = (0.5 + 0 + 0) / 3
    assert out["domain_score"] == pytest.approx(f) and out["p_h"] == pytest.approx(p_h)
    assert out["finscore"] == pytest.approx(f * (1 - p_h))
    opt = score_samples(df, variant="paper", denominator="options")  # n = 4 options
    f_opt = ((0 + 0.25 + 0) / 3 + 0.25) / 2
    assert opt["domain_score"] == pytest.approx(f_opt)


def test_fast_official_finscore_equals_table_path():
    df = random_frame(800, 5)
    judged = finmme.judge_frame(df)
    ids, labels, n_domains, _ = finmme.domain_segments(df)
    ids = torch.where(ids >= n_domains, torch.full_like(ids, -1), ids)
    fast = finmme.official_finscore(judged.correct, ids, n_domains, judged.multi_answer)
    table = point_estimates(finmme.build_table(df))
    for key in ("finscore", "domain_accuracy", "p_h", "accuracy"):
        assert float(fast[key]) == pytest.approx(table[key], abs=1e-12)


def test_fast_official_finscore_many_domains_and_missing():
    rng = np.random.default_rng(0)
    for n_domains in (3, 31, 40):
        n = 5000
        domain = torch.from_numpy(rng.integers(-1, n_domains, n))
        correct = torch.from_numpy(rng.random(n) < 0.4)
        multi = torch.from_numpy(rng.random(n) < 0.3)
        fast = finmme.official_finscore(correct, domain, n_domains, multi)
        ref = ref_calculate_finscore(pd.DataFrame({
            "knowledge_domain": np.where(domain.numpy() < 0, None, domain.numpy()).astype(object),
            "question_type": np.where(multi.numpy(), "multiple_choice", "single_choice"),
            "answer": np.where(multi.numpy(), "AB", "A"), "correct_or_not": correct.numpy()}))
        assert float(fast["finscore"]) == pytest.approx(ref[0], abs=1e-12)
        assert float(fast["domain_accuracy"]) == pytest.approx(ref[1], abs=1e-12)


def test_missing_domain_rows_are_outside_f_like_groupby():
    df = random_frame(300, 7)
    df.loc[df.index[:20], "domain"] = None
    ref = ref_calculate_finscore(pd.DataFrame({
        "knowledge_domain": df["domain"], "question_type": df["question_type"], "answer": df["gold"],
        "correct_or_not": df["ref_correct"].astype(bool)}))
    out = score_samples(df.drop(columns=["ref_correct"]))
    assert out["finscore"] == pytest.approx(ref[0], abs=1e-9)
    assert out["notes"]


def test_breakdowns_match_groupby():
    df = random_frame(600, 8)
    df["asset_class"] = np.where(np.arange(len(df)) % 3 == 0, "equity", "fx")
    out = score_samples(df.drop(columns=["ref_correct"]))
    for column in ("domain", "question_type", "asset_class"):
        ref = df.groupby(column)["ref_correct"].agg(["size", "mean"])
        got = out["breakdowns"][column]
        assert set(got) == set(ref.index)
        for value, row in ref.iterrows():
            assert got[value]["n"] == row["size"]
            assert got[value]["accuracy"] == pytest.approx(row["mean"], abs=1e-12)


def test_calibration_matches_reference():
    rng = np.random.default_rng(9)
    rows = []
    for i in range(400):
        k = int(rng.integers(2, 6))
        p = rng.dirichlet(np.ones(k)) * (1 if i % 7 else 3.0)  # some rows need renormalising
        gold = LETTERS[int(rng.integers(0, k))]
        rows.append({"domain": "X", "question_type": "single_choice", "gold": gold, "answer": gold,
                     "option_probs": list(p), "n_options": k})
    rows.append({"domain": "X", "question_type": "numerical", "gold": "1", "answer": "1", "tolerance": 0.0,
                 "option_probs": []})
    out = score_samples(frame(rows))["calibration"]
    conf, hit, brier = [], [], []
    for r in rows[:-1]:
        p = np.asarray(r["option_probs"]) / np.sum(r["option_probs"])
        g = LETTERS.index(r["gold"])
        conf.append(p.max())
        hit.append(float(int(np.argmax(p)) == g))
        brier.append(sum((p[j] - (j == g)) ** 2 for j in range(len(p))))
    conf, hit = np.array(conf), np.array(hit)
    ece = 0.0
    for b in range(10):
        lo, hi = b / 10, (b + 1) / 10
        sel = (conf > lo) & (conf <= hi) if b else (conf <= hi)
        if sel.any():
            ece += sel.sum() / len(conf) * abs(hit[sel].mean() - conf[sel].mean())
    assert out["n"] == 400
    assert out["ece"] == pytest.approx(ece, abs=1e-9)
    assert out["brier"] == pytest.approx(np.mean(brier), abs=1e-9)
    assert sum(b["n"] for b in out["bins"]) == 400


def test_bootstrap_ci_seeded_and_json_ready():
    import json

    df = random_frame(500, 10).drop(columns=["ref_correct"])
    a = score_samples(df, n_bootstrap=300, seed=1)
    b = score_samples(df, n_bootstrap=300, seed=1)
    c = score_samples(df, n_bootstrap=300, seed=2)
    assert a["ci"] == b["ci"] and a["ci"] != c["ci"]
    for key in ("finscore", "domain_accuracy", "p_h", "accuracy"):
        ci = a["ci"][key]
        assert ci["level"] == 0.95 and ci["low"] <= a[key] <= ci["high"]
    json.dumps(a, allow_nan=False)


@pytest.mark.parametrize("chunked", [False, True], ids=["one-chunk", "threads"])
@pytest.mark.parametrize("form", ["str", "object", "category", "parquet"])
def test_arrow_cell_encoding_equals_general_path(form, chunked, tmp_path, monkeypatch):
    """encode_official_cells (Arrow dictionaries) vs factorize + letters_to_mask + official_cells,
    byte for byte, on messy metadata: missing values, unicode, lower case, separators, numbers."""
    import pyarrow.parquet as pq

    from finbench.kernels import segments
    from finbench.kernels.bitmask import letters_to_mask
    from finbench.kernels.segments import factorize

    if chunked:  # rows split over threads, as for millions of questions
        monkeypatch.setattr(segments, "PARALLEL_MIN_ELEMENTS", 100)
        monkeypatch.setattr(finmme_cells, "PARALLEL_MIN_ELEMENTS", 100)

    rng = random.Random(7)
    domains = ["Banking", "banking", "Équités", "", None, "Risk", "FX"]
    types = ["multiple_choice", "single_choice", "numerical", "Multiple_choice", None, ""]
    golds = ["A", "AC", "a,c", "ACA", "AA", "B D", "8.81", "", None, "ﬀ", "N", "xyz", "-3.5"]
    n = 4000
    df = pd.DataFrame({"d": [rng.choice(domains) for _ in range(n)], "q": [rng.choice(types) for _ in range(n)],
                       "g": [rng.choice(golds) for _ in range(n)]}, dtype=object)
    ids, labels = factorize(df["d"])
    is_mc = torch.tensor([q == "multiple_choice" for q in df["q"]])
    expected = finmme.official_cells(ids, len(labels), finmme.multi_answer_mask(is_mc, letters_to_mask(df["g"])))
    # an independent check of the multi-answer rule: more than one distinct letter A–N
    multi_ref = [q == "multiple_choice" and len({c for c in str(g or "").upper() if c in LETTERS}) > 1
                 for q, g in zip(df["q"], df["g"])]
    assert (expected % 2).bool().tolist() == multi_ref
    if form == "parquet":
        df.to_parquet(tmp_path / "s.parquet")
        table = pq.read_table(tmp_path / "s.parquet", read_dictionary=["d", "q", "g"])
        columns = [table.column(c) for c in "dqg"]
    else:
        columns = [df[c].astype(form) if form != "object" else df[c] for c in "dqg"]
        if form == "str":
            columns = [c.where(df[name].notna(), None) for c, name in zip(columns, "dqg")]
    cells, got_labels = finmme_cells.encode_official_cells(*columns, n_threads=3)
    assert torch.equal(cells, expected) and got_labels == labels


def _general_cells(domains, types, golds):
    """The general path encode_official_cells must equal: factorize + letters_to_mask + official_cells."""
    from finbench.kernels.bitmask import letters_to_mask
    from finbench.kernels.segments import factorize

    ids, labels = factorize(pd.Series(domains, dtype=object))
    is_mc = torch.tensor([q == "multiple_choice" for q in types], dtype=torch.bool)
    multi = finmme.multi_answer_mask(is_mc, letters_to_mask(pd.Series(golds, dtype=object)))
    multi_ref = [q == "multiple_choice" and len({c for c in str(g or "").upper() if c in LETTERS}) > 1
                 for q, g in zip(types, golds)]
    assert multi.tolist() == multi_ref  # the rule itself, independently
    return finmme.official_cells(ids, len(labels), multi), labels


# types that match "multiple_choice" in length or in part; golds for every branch of the buffer
# reader: 2..8 ASCII bytes (one word), longer than 8, non-ASCII (ﬀ upper-cases to FF), NUL bytes
EDGE_TYPES = ["multiple_choice", "multiple_choicE", "multiplE_choice", "Multiple_choice", "multiple_choice ",
              "multiple_choic", "single_choice", "numerical", "", None]
EDGE_GOLDS = ["A", "AC", "a,c", "ACA", "AA", "B D", "8.81", "", None, "ﬀ", "ﬀA", "ÀB", "N", "xyz", "-3.5", "op",
              "abcdefgh", "aaaaaaaa", "aaaaaaaab", "AAAAAAAAAAAAAAAAAAAAC", "A\x00C", "  a  ", "MN", "é"]


@pytest.mark.parametrize("string_type", ["string", "large_string"])
@pytest.mark.parametrize("sliced", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_plain_arrow_cells_read_buffers_exactly(string_type, sliced, threads, monkeypatch):
    """The plain-string path reads offsets and bytes in place (type windows, gold words, the very
    end of the data buffers, sliced arrays, validity bitmaps): byte for byte the general path."""
    import pyarrow as pa

    from finbench.kernels import segments

    monkeypatch.setattr(segments, "PARALLEL_MIN_ELEMENTS", 50)
    monkeypatch.setattr(finmme_cells, "PARALLEL_MIN_ELEMENTS", 50)
    rng = random.Random(11)
    n = 3000
    domains = [rng.choice(["Banking", "FX", "Équités", None]) for _ in range(n)]
    types = [rng.choice(EDGE_TYPES) for _ in range(n)]
    golds = [rng.choice(EDGE_GOLDS) for _ in range(n)]
    for gold in ("AC", "ﬀA", "abcdefgh", "AAAAAAAAAAAAAAAAAAAAC", "BD"):  # candidates at the end of the data
        domains.append("FX")
        types.append("multiple_choice")
        golds.append(gold)
    head = 7 if sliced else 0
    columns = [pa.array(v, type=getattr(pa, string_type)()).slice(head) for v in (domains, types, golds)]
    expected, labels = _general_cells(domains[head:], types[head:], golds[head:])
    cells, got_labels = finmme_cells.encode_official_cells(*columns, n_threads=threads)
    assert torch.equal(cells, expected) and got_labels == labels


def test_plain_arrow_cells_ignore_bytes_under_nulls():
    """A missing row may still hold bytes in Arrow's data buffer: it is missing all the same."""
    import pyarrow as pa

    rng = np.random.default_rng(2)
    n = 600
    columns = {"domains": rng.choice(["x", "y", "z"], n).tolist(),
               "types": rng.choice(["multiple_choice", "single_choice"], n).tolist(),
               "golds": rng.choice(["AC", "BD", "A", "abcdefgh", "ÀB"], n).tolist()}
    for name in columns:  # each column in turn loses ~1/3 of its rows, bytes kept
        arrays = {k: pa.array(v, type=pa.large_string()) for k, v in columns.items()}
        keep = rng.random(n) > 1 / 3
        bitmap = pa.py_buffer(np.packbits(keep, bitorder="little").tobytes())
        arrays[name] = pa.Array.from_buffers(pa.large_string(), n, [bitmap, *arrays[name].buffers()[1:]],
                                             null_count=int((~keep).sum()))
        cells, labels = finmme_cells.encode_official_cells(arrays["domains"], arrays["types"], arrays["golds"])
        expected, ref_labels = _general_cells(*(arrays[k].to_pylist() for k in ("domains", "types", "golds")))
        assert torch.equal(cells, expected) and labels == ref_labels


@pytest.mark.parametrize("threads", [1, 2])
def test_plain_arrow_cells_fall_back_for_a_late_domain(threads, monkeypatch):
    """A domain first seen after the probed rows: the general dictionary path, same cells."""
    import pyarrow as pa

    from finbench.kernels import segments

    monkeypatch.setattr(segments, "PROBE_ROWS", 16)
    monkeypatch.setattr(segments, "PARALLEL_MIN_ELEMENTS", 50)
    monkeypatch.setattr(finmme_cells, "PARALLEL_MIN_ELEMENTS", 50)
    rng = random.Random(5)
    n = 2000
    domains = [rng.choice(["Bonds", "Banking", None]) for _ in range(n)]
    domains[1500] = "Aardvark"  # sorts first: every id shifts
    types = [rng.choice(EDGE_TYPES) for _ in range(n)]
    golds = [rng.choice(EDGE_GOLDS) for _ in range(n)]
    cells, labels = finmme_cells.encode_official_cells(*(pa.array(v, type=pa.large_string()) for v in (domains, types, golds)),
                                                 n_threads=threads)
    expected, ref_labels = _general_cells(domains, types, golds)
    assert torch.equal(cells, expected) and labels == ref_labels


@pytest.mark.parametrize("threads", [1, 2])
def test_plain_arrow_cells_refuse_too_many_domains(threads, monkeypatch):
    import pyarrow as pa

    from finbench.kernels import segments

    monkeypatch.setattr(segments, "PARALLEL_MIN_ELEMENTS", 50)
    monkeypatch.setattr(finmme_cells, "PARALLEL_MIN_ELEMENTS", 50)
    domains = pa.array([f"d{i:02d}" for i in range(40)] * 10)
    types = pa.array(["multiple_choice"] * 400)
    with pytest.raises(ValueError, match="at most 31 domains"):
        finmme_cells.encode_official_cells(domains, types, types, n_threads=threads)


def test_arrow_cell_encoding_falls_back_for_non_strings():
    domains = pd.Series(["a", "b", "a", None], dtype=object)
    types = pd.Series(["multiple_choice"] * 4)
    gold = pd.Series([12, 3, 1.5, None], dtype=object)  # numbers: str() then the letter rule (none)
    cells, labels = finmme_cells.encode_official_cells(domains, types, gold)
    assert cells.tolist() == [0, 2, 0, 4] and labels == ["a", "b"]
    gold = pd.Series(["AB", "C", "ABC", "AB"])
    cells, _ = finmme_cells.encode_official_cells(pd.Series([1, 2, 1, 2]), types, gold)  # integer domains
    assert cells.tolist() == [1, 2, 1, 3]


def test_finscore_from_arrow_cells_equals_pandas_definition():
    rng = np.random.default_rng(5)
    n = 5000
    df = pd.DataFrame({"knowledge_domain": rng.choice(["x", "y", "z"], n),
                       "question_type": rng.choice(["single_choice", "multiple_choice", "numerical"], n),
                       "answer": rng.choice(["A", "AC", "BD", "C"], n), "correct_or_not": rng.random(n) < 0.5})
    cells, labels = finmme_cells.encode_official_cells(df["knowledge_domain"], df["question_type"], df["answer"])
    correct = torch.from_numpy(df["correct_or_not"].to_numpy(copy=True))
    got = finmme.official_finscore_from_cells(correct, cells, len(labels))
    assert float(got["finscore"]) == pytest.approx(ref_calculate_finscore(df)[0], abs=1e-12)
