"""The contamination probes' open ends: the open-ended probe's free answers judged by the run's
--judge (a generic yes/no prompt, read by rule; a rerun all cache hits), and MME-Finance's items
probed in their language, its two-option (yes/no) items not probed with none-of-the-above."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from finbench.app.api import make_config
from finbench.benchmarks import mme_finance
from finbench.core.requests import Generate
from finbench.core.types import Prediction, Question
from finbench.runner.run_requests import build_requests
from finbench.scoring.probe_scores import names_gold, probe_summary, probe_verdicts
from finbench.studies.probe_items import probe_variants, with_none_of_the_above
from finbench.studies.probes import OPEN_ENDED_JUDGING, judge_verdict, open_ended_judge_requests
from test_probes import factual_parquet, questions  # noqa: F401 — fixtures: items none-of-the-above probes

LIMIT = 8


def _question(**overrides):
    return Question(**{"id": "q", "benchmark": "x", "kind": "single", "text": "Which colour?",
                       "options": ("red", "blue", "green"), "gold": "B", **overrides})


# ---- the generic judge prompt and its reading -------------------------------------------------------
@pytest.mark.parametrize("reply, expected", [
    ("Yes", True), ("yes.", True), ("**No**", False), ("no, it names red", False), ('{"match": true}', True),
    ("Not sure", None), ("", None), ("Nobody knows", None),
])
def test_the_judge_s_reply_is_read_by_rule(reply, expected):
    assert judge_verdict(reply) is expected
    score, info = OPEN_ENDED_JUDGING.read_judgement(_question(), Prediction(id="q", answer=""), [reply])
    assert score == float(bool(expected)) and info["parsed"] is (expected is not None)  # no verdict: 0


def test_the_judge_is_asked_whether_the_free_answer_names_the_gold_text():
    question = _question(images=(b"png",))
    [request] = open_ended_judge_requests(question, Prediction(id="q", answer="", generated_text="  azure  "))
    text = request.prompt.messages[0]["content"][-1]["text"]
    assert isinstance(request, Generate) and not request.prompt.images  # two texts matched: no image
    assert "Reference answer: blue\n" in text and "Candidate answer: azure\n" in text
    assert "Other choices (wrong): red | green" in text and "Which colour?" in text
    assert open_ended_judge_requests(_question(gold="AB", kind="multi"), Prediction(id="q", answer="")) == []


def test_the_judge_s_verdict_replaces_the_rule_s_only_when_a_judge_was_given():
    table = pd.DataFrame({"id": ["a", "b", "c", "d"], "probe": ["open-ended"] * 3 + ["none-of-the-above"],
                          "raw_output": ["blue", "azure", "blue", "B"], "answer": ["", "", "", "B"],
                          "options": [("red", "blue", "green")] * 4, "gold": ["B"] * 4,
                          "error": ["", "", "", ""], "judge_score": [0.0, 1.0, np.nan, np.nan],
                          "cluster": ["a", "b", "c", "d"]})
    correct = [np.nan, np.nan, np.nan, 1.0]
    by_rule = probe_verdicts(table, correct)
    assert list(by_rule["correct"]) == [1.0, 0.0, 1.0, 1.0]
    judged = probe_verdicts(table, correct, judged=True)
    assert list(judged["correct"]) == [0.0, 1.0, 1.0, 1.0]  # both flipped; a row not judged keeps the rule's
    samples = pd.DataFrame({"id": list("abcd"), "correct": [1.0] * 4, "error": [""] * 4, "cluster": list("abcd")})
    found = probe_summary(samples, judged, ("open-ended", "none-of-the-above"), {}, judged=True)
    assert found["open-ended"]["scored_by"] == "judge" and found["none-of-the-above"]["scored_by"] == "rule"
    assert found["open-ended"]["accuracy"] == pytest.approx(2 / 3)
    assert probe_summary(samples, by_rule, ("open-ended",), {})["open-ended"]["scored_by"] == "rule"


# ---- a run judged by a fake --judge ---------------------------------------------------------------
class YesJudge:
    """A text judge that says yes to every probe prompt, so every free answer wrong by the rule
    flips; counts the prompts it is shown."""

    def __new__(cls):
        from test_judge import FakeJudge

        judge = FakeJudge()

        def generate(inputs, max_new_tokens):
            judge.prompts.extend(inputs["prompts"])
            return ["Yes." if "Candidate answer:" in p else "" for p in inputs["prompts"]], [1] * len(inputs["prompts"])

        judge.generate = generate
        return judge


@pytest.fixture(scope="module")
def judged_run(tiny_model, tiny_qwen_dir, factual_parquet, tmp_path_factory):
    from finbench.runner import startup
    from finbench.runner.engine import run_benchmark

    judge = YesJudge()
    out = tmp_path_factory.mktemp("probes_judge") / "run"
    config = make_config(model=str(tiny_qwen_dir), benchmark="finmme", data=str(factual_parquet), out=str(out),
                       limit=LIMIT, device="cpu", dtype="float32", bootstrap=0, max_new_tokens=8,
                       probes=("none-of-the-above", "open-ended"), judge=str(tiny_qwen_dir))
    patch = pytest.MonkeyPatch()
    patch.setattr(startup, "load_judge_for_run", lambda config, world=None, model=None: judge)
    try:
        first = run_benchmark(config, tiny_model, show_progress=False)
        variants = pd.read_parquet(out / "variants.parquet")
        n_prompts = len(judge.prompts)
        again = run_benchmark(config, tiny_model, show_progress=False)
    finally:
        patch.undo()
    return first.results, variants, again.results, n_prompts, len(judge.prompts), out


def test_the_judge_s_yes_flips_a_free_answer_wrong_by_the_rule(judged_run, questions):
    results, variants, _, n_prompts, _, _ = judged_run
    opened = variants[variants["probe"] == "open-ended"]
    by_id = {q.id: q for q in questions}
    rule = np.array([float(names_gold(r["raw_output"], by_id[r["id"]].options, by_id[r["id"]].gold))
                     for _, r in opened.iterrows()])
    ok = (opened["error"] == "").to_numpy()
    assert ok.any() and (rule[ok] == 0).any()  # something for the judge to flip
    assert (opened["judge_score"].to_numpy()[ok] == 1.0).all() and (opened["correct"].to_numpy()[ok] == 1.0).all()
    assert n_prompts == int(ok.sum())  # one judge call per open-ended row, none for the base items
    for _, row in opened[ok].iterrows():
        assert json.loads(row["judge_output"]) == ["Yes."]
        assert json.loads(row["judge_details"])["judge"]["verdict"] is True
    nota = variants[variants["probe"] == "none-of-the-above"]
    assert (nota["judge_output"] == "").all()  # letters: scored by the rule, not asked of the judge
    assert (nota["correct"] == (nota["answer"] == nota["gold"]).astype(float)).all()
    probes = results["probes"]
    assert probes["open-ended"]["scored_by"] == "judge" and probes["none-of-the-above"]["scored_by"] == "rule"
    assert probes["open-ended"]["accuracy"] == pytest.approx(float(opened["correct"].mean()))
    assert results["judge"]["n_calls"] == n_prompts == results["judge"]["n_computed"]


def test_a_judged_rerun_is_all_cache_hits_and_the_lines_name_the_judge(judged_run):
    from finbench.report.studies import study_lines, study_sections

    results, _, again, n_prompts, n_after, out = judged_run
    assert n_after == n_prompts  # the rerun showed the judge nothing
    assert again["judge"]["n_cached"] == again["judge"]["n_calls"] == n_prompts and again["judge"]["n_computed"] == 0
    assert again["n_computed"] == 0 and again["variants"]["n_computed"] == 0
    assert again["probes"] == results["probes"]
    lines = study_lines(results)
    assert any(line.startswith("probe open-ended (") and "scored by judge" in line for line in lines)
    assert any(line.startswith("probe none-of-the-above (") and "scored by rule" in line for line in lines)
    [section] = [s for s in study_sections(results) if s["id"] == "probes"]
    assert section["tables"][0]["header"][-1] == "scored by" and {r[-1] for r in section["tables"][0]["rows"]} == {
        "judge", "rule"}
    assert "scored by" in (out / "report.md").read_text()
    from finbench.report.studies import compare_rows
    from finbench.app.sweep import summarize

    summary = summarize([out, out], ["a", "b"], n_bootstrap=0)
    header, rows = compare_rows({v["name"]: v["studies"] for v in summary["variants"]})
    cells = dict(zip(header, rows[0]))
    assert cells["open-ended: accuracy ×100 (probe − base)"].endswith(" by judge")
    assert not cells["none-of-the-above: accuracy ×100 (probe − base)"].endswith(" by judge")


# ---- MME-Finance: the item's language; two options not probed ------------------------------------------
@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    from finbench.offline import mme_finance_synthetic

    folder = mme_finance_synthetic.write_folder(tmp_path_factory.mktemp("mmfin"))
    return [q for q in mme_finance.load_questions(folder) if q.meta["set"] == "MMfin_Binary" and not q.error]


def _probed(questions, probes=("none-of-the-above", "open-ended")):
    config = make_config(model="m", benchmark="mme-finance", probes=probes)
    requests, _ = build_requests(mme_finance.BENCHMARK, questions, config, None, None)
    notes: list[str] = []
    found, not_probed = probe_variants(mme_finance.BENCHMARK, questions, requests, config, None, notes,
                                       lambda base, probe: (base, probe), probes)
    return found, not_probed, notes


def test_mme_finance_declares_its_language_field_and_a_chinese_item_gets_its_none_of_the_above(binary):
    assert mme_finance.BENCHMARK.language_field == "language" and binary
    field = mme_finance.BENCHMARK.language_field
    question = binary[0]
    assert question.meta[field] == "zh" and question.options == ("是", "否")
    probed = with_none_of_the_above(question, question.meta[field])
    assert probed.options[-1] == "以上都不是" and probed.gold == "B"
    # through the probe itself: an item of three options (the binary set has none) is probed in Chinese
    three = [dataclasses.replace(question, text="图中收入是否上升？", options=("是", "否", "不确定"), gold="A")]
    found, not_probed, _ = _probed(three, ("none-of-the-above",))
    [((base, probe), variant, make)] = [f for f in found if f[0][1] == "none-of-the-above"]
    assert probe == "none-of-the-above" and variant.options == ("否", "不确定", "以上都不是") and variant.gold == "C"
    [(_, control, _)] = [f for f in found if f[0][1] == "none-of-the-above-control"]
    assert control.options == ("是", "不确定", "以上都不是") and control.gold == "A"
    assert "C. 以上都不是\n" in make().prompt.messages[0]["content"][-1]["text"] and not_probed == {
        "none-of-the-above": {}}


def test_two_option_items_are_not_probed_with_none_of_the_above_and_counted(binary):
    with pytest.raises(ValueError, match=rf"--probe none-of-the-above: none of this run's {len(binary)} choice item\(s\) "
                                         rf"can be tested \({len(binary)} two options\)"):
        _probed(binary)
    found, not_probed, notes = _probed(binary, ("open-ended",))
    assert sum(1 for (_, probe), _, _ in found if probe == "open-ended") == len(binary)  # still asked open-ended
    assert notes == [f"probe open-ended: {len(binary)} of {len(binary)} choice item(s) tested"]
