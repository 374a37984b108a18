"""Every score where users look, computed right: FinMTM's dialogue (turn, session, final) and agent
(precision, recall, F2, Qt) parts with n and CIs; a Wilson interval per breakdown group (FAMMA's
included); the same numbers in summary.json of a multi-benchmark run. References: the means and
intervals restated in plain Python / numpy, statsmodels' Wilson interval, a brute-force bootstrap."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pandas as pd
import pytest
from test_scoring_other import famma_frame

from finbench.benchmarks import get_benchmark
from finbench.scoring.finmtm import extra_scores
from finbench.scoring.tables import score_samples


def session_rows(n: int, seed: int, judged: bool = True, errors: tuple[int, ...] = ()) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        turn, session = round(rng.uniform(0, 10), 3), round(rng.uniform(0, 10), 3)
        error = "bad record: image 'x.png' not found" if i in errors else ""
        rows.append({"id": f"s{i}", "benchmark": "finmtm", "kind": "open", "gold": "", "answer": "[]", "error": error,
                     "task": "dialogue", "level": f"L{1 + i % 4}",
                     "judge_score": (0.5 * turn + 0.5 * session) * 10 if judged and not error else math.nan,
                     "judge_details": json.dumps({"judge": {"turn_score": turn, "session_score": session}})
                     if judged and not error else ""})
    return rows


def agent_rows(n: int, seed: int, errors: tuple[int, ...] = ()) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        p, r = rng.random(), rng.random()
        f2 = 0.0 if 4 * p + r == 0 else 5 * p * r / (4 * p + r)  # F-beta, beta = 2, restated
        error = "preprocess error: broken" if i in errors else ""
        rows.append({"id": f"a{i}", "benchmark": "finmtm", "kind": "open", "gold": "", "answer": "[]", "error": error,
                     "task": "agent", "rule_score": math.nan if error else 25 * f2,
                     "judge_details": "" if error else json.dumps({"rules": {"precision": p, "recall": r, "f2": f2}})})
    return rows


def bootstrap_mean_ci(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """A percentile bootstrap of the mean, brute force (numpy's generator: another stream)."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (resamples, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def test_dialogue_and_agent_parts_equal_their_definitions_restated():
    sessions, agents = session_rows(40, 1, errors=(3, 7)), agent_rows(30, 2, errors=(0,))
    out = extra_scores(pd.DataFrame(sessions + agents), n_bootstrap=4000, seed=0)
    dialogue, agent = out["dialogue"], out["agent"]
    # dialogue: a session with an error scores 0 and stays in the denominator
    turns = [json.loads(r["judge_details"])["judge"]["turn_score"] if r["judge_details"] else 0.0 for r in sessions]
    checklist = [json.loads(r["judge_details"])["judge"]["session_score"] if r["judge_details"] else 0.0 for r in sessions]
    finals = [(0.5 * t + 0.5 * c) * 10 for t, c in zip(turns, checklist)]
    assert (dialogue["n"], dialogue["n_scored"], dialogue["n_judged"], dialogue["n_errors"]) == (40, 40, 38, 2)
    assert dialogue["turn"] == pytest.approx(sum(turns) / 40) and dialogue["session"] == pytest.approx(sum(checklist) / 40)
    assert dialogue["score"] == pytest.approx(sum(finals) / 40)
    for level in ("L1", "L2", "L3", "L4"):
        mine = [f for f, r in zip(finals, sessions) if r["level"] == level]
        assert dialogue["by_level"][level] == {"n": len(mine), "score": pytest.approx(sum(mine) / len(mine))}
    # agent: precision, recall, F2 from each row's rule verdict; Qt = 25·F2; an error scores 0
    rules = [json.loads(r["judge_details"])["rules"] if r["judge_details"] else {"precision": 0, "recall": 0, "f2": 0}
             for r in agents]
    assert (agent["n"], agent["n_scored"], agent["n_errors"]) == (30, 30, 1)
    for key in ("precision", "recall", "f2"):
        assert agent[key] == pytest.approx(sum(r[key] for r in rules) / 30), key
    assert agent["tool_score"] == pytest.approx(25 * agent["f2"])
    # CIs: percentile bootstrap of each mean (another generator: within a few hundredths)
    for part, key, values in (("dialogue", "score", finals), ("agent", "f2", [r["f2"] for r in rules])):
        low, high = bootstrap_mean_ci(np.array(values, dtype=float), 4000, 1)
        ci = out[part]["ci"][key]
        scale = max(values) - min(values)
        assert abs(ci["low"] - low) < 0.05 * scale and abs(ci["high"] - high) < 0.05 * scale, (part, ci, low, high)
        assert ci["low"] < out[part][key] < ci["high"] and ci["level"] == 0.95


def test_a_part_without_verdicts_is_unscored_and_says_why():
    out = extra_scores(pd.DataFrame(session_rows(3, 0, judged=False, errors=(1,))), n_bootstrap=100)
    dialogue = out["dialogue"]
    assert dialogue["score"] is None and dialogue["n_scored"] == 0 and dialogue["ci"] == {}
    assert dialogue["unscored"] == ("3 dialogue sessions generated and stored, not scored: no judge verdicts "
                                    "(run with --judge MODEL)")
    # a judge that failed on one session (no verdict, no sample error): scored on the others, said so
    rows = session_rows(4, 0)
    rows[2].update(judge_score=math.nan, judge_details=json.dumps({"error": "judge error: boom"}))
    partial = extra_scores(pd.DataFrame(rows))["dialogue"]
    assert partial["n_scored"] == 3 and partial["n_unscored"] == 1 and "a judge error" in partial["unscored"]
    assert partial["n_unparsed"] == 0
    # broken details (not JSON) never raise: that row simply has no numbers
    rows[0]["judge_details"] = "{not json"
    assert extra_scores(pd.DataFrame(rows))["dialogue"]["n"] == 4


def test_a_session_whose_judge_reply_cannot_be_read_is_a_failed_judgement_not_a_default_score():
    """Fail closed (issue 41): a session the judge answered with no readable verdict (the runner
    leaves its judge_score empty and its reading says `parsed` False) is counted and left out;
    when no reply could be read the part says so instead of a table of made-up scores."""
    unreadable = {"judge": {"turn_scores": [0.0], "turn_score": 0.0, "session_score": 0.0, "parsed": False,
                            "unreadable": ["T1", "session"]},
                  "error": "the judge's reply has no verdict the benchmark's reading can parse"}
    rows = session_rows(4, 0)
    rows[1].update(judge_score=math.nan, judge_details=json.dumps(unreadable))
    partial = extra_scores(pd.DataFrame(rows))["dialogue"]
    kept = [r["judge_score"] for r in rows if r["judge_score"] == r["judge_score"]]
    assert (partial["n_scored"], partial["n_unscored"], partial["n_unparsed"]) == (3, 1, 1)
    assert partial["score"] == pytest.approx(sum(kept) / 3)  # the failed session is out, not a 0 in the mean
    assert partial["unscored"] == "1 of 4 sessions have no judge verdict (1 failed: a judge reply could not be read)"
    for row in rows:
        row.update(judge_score=math.nan, judge_details=json.dumps(unreadable))
    none = extra_scores(pd.DataFrame(rows), n_bootstrap=50)["dialogue"]
    assert none["score"] is None and none["n_scored"] == 0 and none["ci"] == {} and none["n_unparsed"] == 4
    assert none["unscored"] == "no judge reply could be read (4 failed; none given a default score)"


def test_score_samples_gives_the_parts_the_runs_bootstrap():
    rows = [{"id": "o1", "benchmark": "finmtm", "kind": "single", "gold": "B", "answer": "B", "error": "",
             "task": "objective", "question_type": "single"}] + session_rows(6, 3) + agent_rows(5, 4)
    with_ci = score_samples(pd.DataFrame(rows), benchmark=get_benchmark("finmtm"), n_bootstrap=200, seed=5)
    assert set(with_ci["dialogue"]["ci"]) == {"turn", "session", "score"}
    assert set(with_ci["agent"]["ci"]) == {"precision", "recall", "f2", "tool_score"}
    assert with_ci["bootstrap"]["n_resamples"] == 200
    assert score_samples(pd.DataFrame(rows), benchmark=get_benchmark("finmtm"), n_bootstrap=0)["dialogue"]["ci"] == {}
    # --domain agent: no objective item at all, the agent part still has its CIs
    only_agents = score_samples(pd.DataFrame(agent_rows(5, 4)), benchmark=get_benchmark("finmtm"), n_bootstrap=100)
    assert only_agents["n"] == 0 and only_agents["agent"]["ci"]["f2"]["low"] is not None


def test_every_breakdown_group_has_its_wilson_interval():
    from statsmodels.stats.proportion import proportion_confint

    scores = score_samples(famma_frame(90, 7), benchmark=get_benchmark("famma"), n_bootstrap=0)
    assert len(scores["breakdowns"]) >= 8  # language, difficulty, subfield, the analyzer's crossings
    for column, groups in scores["breakdowns"].items():
        for label, g in groups.items():
            successes = round(g["accuracy"] * g["n"])
            low, high = proportion_confint(successes, g["n"], alpha=0.05, method="wilson")
            assert g["ci"]["method"] == "wilson" and g["ci"]["level"] == 0.95
            assert (g["ci"]["low"], g["ci"]["high"]) == (pytest.approx(low, abs=1e-9), pytest.approx(high, abs=1e-9)), \
                (column, label)


@pytest.mark.slow
def test_summary_json_of_several_benchmarks_holds_every_part_with_n_and_cis(tiny_model, tmp_path):
    import finbench
    from finbench.offline.finmme_synthetic import write_parquet
    from test_finmtm import write_fixtures

    finmme = write_parquet(tmp_path / "finmme.parquet", n_items=8)
    finmtm = write_fixtures(tmp_path / "finmtm")
    runs = finbench.evaluate(tiny_model, "finmme,finmtm", data={"finmme": str(finmme), "finmtm": str(finmtm)},
                             max_new_tokens=3, bootstrap=100, out=tmp_path / "both")
    summary = json.loads((tmp_path / "both" / "summary.json").read_text())
    for name, run in runs.runs.items():
        entry, scores = summary["benchmarks"][name], run.results["scores"]
        assert entry["headline"]["n"] == scores["n"] and entry["ci"] == scores["ci"]
        assert entry["breakdowns"] == scores["breakdowns"] and entry["protocol"] == "constrained"
        primary = scores["primary"]
        assert entry["headline"]["value"] == pytest.approx(100 * scores[primary])
        assert entry["headline"]["low"] == pytest.approx(100 * scores["ci"][primary]["low"])
    mtm = summary["benchmarks"]["finmtm"]
    assert mtm["agent"]["n"] == 1 and set(mtm["agent"]["ci"]) == {"precision", "recall", "f2", "tool_score"}
    assert mtm["agent"]["f2"] is not None
    assert mtm["dialogue"]["n"] == 2 and mtm["dialogue"]["unscored"].startswith("2 dialogue sessions")
