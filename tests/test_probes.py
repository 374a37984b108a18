"""Contamination probes (--probe none-of-the-above,open-ended): the pure replacement and matching
rules, FAMMA's non-English option, and a tiny model's run through the CLI (variants rows, the
results block, the reports, a rerun served from the cache)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from helpers import assert_refused_in_one_line

import finbench
from finbench.app.api import make_config
from finbench.benchmarks import famma, finmme, finmtm
from finbench.core.requests import Choose, Generate
from finbench.core.types import OPTION_LETTERS, Question
from finbench.offline import famma_synthetic
from finbench.runner.keys import request_payload
from finbench.runner.run_requests import build_requests
from finbench.runner.studies import expand
from finbench.scoring.probe_scores import names_gold, option_matches, probe_summary
from finbench.studies.probe_items import language_code, none_of_the_above_text, with_none_of_the_above

LIMIT = 8


def _question(**overrides):
    return Question(**{"id": "q", "benchmark": "x", "kind": "single", "text": "Which?", "options": ("red", "blue", "green"),
                       "gold": "B", **overrides})


# ---- the pure rules -------------------------------------------------------------------------------
def test_the_gold_option_is_taken_out_and_none_of_the_above_put_last_in_the_items_language():
    probed = with_none_of_the_above(_question(), "chinese")
    assert probed.options == ("red", "green", "以上都不是") and probed.gold == "C"
    assert with_none_of_the_above(_question(), "fr").options[-1] == "Aucune des réponses ci-dessus"
    assert with_none_of_the_above(_question(), "").options[-1] == "None of the above"
    # gold A: "None of the above" is never first (the audit's case), always last
    first = with_none_of_the_above(_question(gold="A"), "")
    assert first.options == ("blue", "green", "None of the above") and first.gold == "C"
    # the control: a wrong option taken out, the gold still shown and re-lettered
    control = with_none_of_the_above(_question(gold="C"), "", replaced="A")
    assert control.options == ("blue", "green", "None of the above") and control.gold == "B"
    assert none_of_the_above_text("klingon") == "None of the above" and language_code("zh-CN") == "zh"


@pytest.mark.parametrize("question", [
    _question(kind="multi", gold="AB"),  # no one gold text
    _question(gold=""),  # no gold
    _question(options=("red",), gold="A"),  # nothing to choose from
    _question(options=("red", "blue", "All of the above")),  # an option names the others
])
def test_items_that_cannot_be_probed_are_none(question):
    assert with_none_of_the_above(question, "en") is None


@pytest.mark.parametrize("question, reason", [
    (_question(text="Which segment had the highest revenue?"), "superlative_or_approximate"),
    (_question(text="Which value is closest to the margin?"), "superlative_or_approximate"),
    (_question(text="What is approximately the growth rate?"), "superlative_or_approximate"),
    (_question(text="哪个板块的收入最高？"), "superlative_or_approximate"),
    (_question(text="What is the margin?", options=("8.8%", "0.088", "9.1%")), "option_equal_to_gold"),
    (_question(text="What is the margin?", options=("7.1%", "8.8 %", "0.088"), gold="C"), "option_equal_to_gold"),
])
def test_items_whose_gold_is_not_well_defined_once_removed_are_not_probed(question, reason):
    """The next-best option answers a superlative or approximate question, and an option equal in
    value to the gold still answers it: "None of the above" is not the one right answer there."""
    from finbench.studies.probe_items import none_of_the_above_item

    assert none_of_the_above_item(None, question, None, None, None) == reason
    assert none_of_the_above_item(None, question, None, None, None, control=True) == reason


def test_a_plain_question_is_probed_with_its_control():
    from finbench.studies.probe_items import equal_to_gold, relative_question

    assert not relative_question("What is the interest expense in the latest year?")
    assert not equal_to_gold(["8.8%", "0.88", "9.1%"], 0)

@pytest.mark.parametrize("answer, option, expected", [
    ("The second bar.", "second", True),
    ("**Second**", "second", True),
    ("secondary", "second", False),  # word boundaries
    ("8.81%", "8.81 %", True),
    ("about 8.8", "8.81%", False),  # a number is matched exactly
    ("$1,200 million", "1200", True),
    ("12000", "1200", False),
    ("The revenue does not increase", "Increase", False),  # the audit's strings: a negation in the clause
    ("The revenue doesn't increase.", "increase", False),
    ("There was no increase", "increase", False),
    ("It never increased, it fell; an increase is expected next year", "increase", True),
    ("不是上升", "上升", False),
    ("不会上升", "上升", False),
    ("没有上升，而是下降", "下降", True),
    ("收入未上升", "上升", False),
    ("收入不仅上升", "上升", True),  # words that only contain a negation character
    ("没有下降，反而上升", "上升", True),
    ("Not only an increase but a large one", "increase", True),
    ("答案是营业收入增长", "营业收入", True),
    ("anything", "", False),
    ("", "second", False),
])
def test_option_matches(answer, option, expected):
    assert option_matches(answer, option) is expected


def test_the_gold_is_named_only_when_no_other_option_is():
    options = ["first", "second", "third"]
    assert names_gold("second", options, "B")
    assert not names_gold("first or second", options, "B")  # a list of options is no answer
    assert not names_gold("first", options, "B")
    assert names_gold("revenue growth", ["revenue", "revenue growth"], "B")  # "revenue" is inside the gold's text
    assert not names_gold("revenue growth", ["revenue", "revenue growth"], "A")
    assert not names_gold("second", options, "AB") and not names_gold("second", options, "")


def test_the_summary_against_the_base_rows_by_hand():
    samples = pd.DataFrame({"id": ["a", "b", "c", "d"], "correct": [1.0, 1.0, 0.0, 1.0], "error": [""] * 4,
                            "cluster": ["a", "b", "c", "d"]})
    variants = pd.DataFrame({"id": ["a", "b", "c"], "probe": ["open-ended"] * 3, "correct": [1.0, 0.0, 1.0],
                             "error": ["", "", ""], "cluster": ["a", "b", "c"]})
    found = probe_summary(samples, variants, ("open-ended", "none-of-the-above"), {"open-ended": {"multi_answer": 2}})
    entry = found["open-ended"]
    assert entry["n"] == 3 and entry["n_not_probed"] == 2 and entry["not_probed"] == {"multi_answer": 2}
    assert entry["accuracy"] == pytest.approx(2 / 3) and entry["base_accuracy"] == pytest.approx(2 / 3)
    assert entry["diff"] == pytest.approx(0.0) and entry["kept_when_right"] == pytest.approx(0.5)
    assert entry["n_base_right"] == 2 and entry["paired"]["n"] == 3
    assert found["none-of-the-above"]["n"] == 0 and found["none-of-the-above"]["accuracy"] is None


# ---- the variants each benchmark makes ----------------------------------------------------------------
def test_famma_probes_write_the_option_in_the_items_language_and_ask_the_stem_alone(tmp_path):
    records = famma_synthetic.records(None)
    choice = next(r for r in records if r["options"] == ["left", "right", "neither"])  # "neither" names the others
    records += [dict(choice, options=["left", "right", "equal"], language=language, question_id=f"probe-{language}",
                     main_question_id=900 + k) for k, language in enumerate(("english", "chinese", "french"))]
    path = famma_synthetic.write_parquet(tmp_path / "release_basic.parquet", records)
    questions = [q for q in famma.load_questions(str(path)) if not q.error]
    config = make_config(model="m", benchmark="famma", probes=("none-of-the-above", "open-ended"))
    requests, errors = build_requests(famma.BENCHMARK, questions, config, None, None)
    notes: list[str] = []
    study = expand(famma.BENCHMARK, questions, requests, errors, config, None, notes)
    nota = [(v, q, r) for v, q, r in zip(study.variants, study.questions[len(questions):],
                                          study.requests[len(questions):]) if v.get("probe") == "none-of-the-above"]
    assert nota and all(isinstance(r, Choose) and r.probe == "none-of-the-above" for _, _, r in nota)
    languages = set()
    for variant, question, request in nota:
        base = questions[variant.base]
        language = base.meta["language"]
        languages.add(language)
        expected = {"chinese": "以上都不是", "french": "Aucune des réponses ci-dessus"}.get(language, "None of the above")
        gold = OPTION_LETTERS.index(base.gold)
        last = OPTION_LETTERS[len(base.options) - 1]
        assert question.options[-1] == expected and question.gold == last
        text = "".join(p.get("text", "") for p in request.prompt.messages[-1]["content"])
        assert f"{last}. {expected}" in text and base.options[gold] not in question.options
    assert languages == {"english", "chinese", "french"}
    assert study.states["probe"]["none-of-the-above"] == {"names_other_options": 1}
    opened = [(v, r) for v, r in zip(study.variants, study.requests[len(questions):]) if v.get("probe") == "open-ended"]
    assert opened and all(isinstance(r, Generate) and r.probe == "open-ended" for _, r in opened)
    for variant, request in opened:
        text = "".join(p.get("text", "") for p in request.prompt.messages[-1]["content"])
        assert questions[variant.base].text in text and "A. " not in text
        assert request_payload(request, questions[variant.base])["probe"] == "open-ended"


def test_finmtm_has_no_stem_without_its_options_and_counts_its_items_as_not_probed(tmp_path):
    from test_finmtm import write_fixtures

    questions = [q for q in finmtm.load_questions(str(write_fixtures(tmp_path))) if not q.error]
    choices = None
    for probe in ("none-of-the-above", "open-ended"):  # a probe that tests nothing: refused, its items counted by reason
        config = make_config(model="m", benchmark="finmtm", probes=(probe,))
        requests, errors = build_requests(finmtm.BENCHMARK, questions, config, None, None)
        choices = sum(1 for r in requests if isinstance(r, Choose) and r.n_options >= 2)
        with pytest.raises(ValueError, match=rf"--probe {probe}: none of this run's {choices} choice item\(s\) can be "
                                             r"tested \(.*multi answer.*\)"):
            expand(finmtm.BENCHMARK, questions, requests, errors, config, None, [])
    assert choices


def test_base_requests_keep_their_keys():
    from finbench.core.requests import Prompt, user_message
    from finbench.runner.keys import sample_key

    question = _question()
    plain = Choose(Prompt(messages=(user_message("Which?"),)), n_options=3)
    assert "probe" not in request_payload(plain, question)  # a run without probes keeps the keys it had
    probed = Choose(plain.prompt, n_options=3, probe="none-of-the-above")
    assert sample_key({}, "v", plain, question) != sample_key({}, "v", probed, question)


# ---- through the CLI ---------------------------------------------------------------------------------
def _cli(tiny_qwen_dir, data, out, *extra):
    from typer.testing import CliRunner

    from finbench.cli import app

    return CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(data), "--out", str(out),
                                    "--limit", str(LIMIT), "--device", "cpu", "--dtype", "float32", "--bootstrap", "0",
                                    "--no-progress", "--max-new-tokens", "8", *extra], env={"COLUMNS": "300"})


@pytest.fixture(scope="module")
def factual_parquet(synthetic_parquet, tmp_path_factory):
    """The synthetic items with their superlatives taken out of the stems: every synthetic choice
    item asks for "the lowest", "the highest", …, which none-of-the-above does not probe."""
    frame = pd.read_parquet(synthetic_parquet)
    frame["question_text"] = frame["question_text"].str.replace(
        r"\b(the )?(lowest|highest|smallest|largest|most|least|best|worst)\b", "the reported", regex=True)
    path = tmp_path_factory.mktemp("factual") / "finmme_factual.parquet"
    frame.to_parquet(path)
    return path


@pytest.fixture(scope="module")
def questions(factual_parquet):
    from finbench.benchmarks import finmme

    return finmme.load_questions(str(factual_parquet))


@pytest.fixture(scope="module")
def probed(tiny_qwen_dir, factual_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("probed") / "run"
    first = _cli(tiny_qwen_dir, factual_parquet, out, "--probe", "none-of-the-above,open-ended")
    assert first.exit_code == 0, first.output[-3000:]
    results = json.loads((out / "results.json").read_text())
    # the same probes as a repeated option (issue 44): both run, and every answer comes from the cache
    again = _cli(tiny_qwen_dir, factual_parquet, out, "--probe", "none-of-the-above", "--probe", "open-ended")
    assert again.exit_code == 0, again.output[-3000:]
    return out, first, results, json.loads((out / "results.json").read_text())


def test_both_probes_through_the_cli(probed, questions):
    out, first, results, rerun = probed
    variants = pd.read_parquet(out / "variants.parquet")
    samples = pd.read_parquet(out / "samples.parquet")
    assert set(variants["study"]) == {"probe"}
    assert set(variants["probe"]) == {"none-of-the-above", "none-of-the-above-control", "open-ended"}
    single = samples[(samples["kind"] == "single") & (samples["error"] == "")]
    for probe in ("none-of-the-above", "open-ended"):
        rows = variants[variants["probe"] == probe]
        found = results["probes"][probe]
        assert found["n"] == len(rows) and 0 < len(rows) <= len(single)
        assert found["n"] + found["n_not_probed"] == int((samples["kind"].isin(["single", "multi"])).sum())
        base = samples.set_index("id").loc[rows["id"]]
        assert found["base_accuracy"] == pytest.approx(float(np.mean(base["correct"])))
        assert found["accuracy"] == pytest.approx(float(np.mean(rows["correct"])))
        assert (rows["variant"] == f"probe-{probe}").all()
    nota = variants[variants["probe"] == "none-of-the-above"]
    for _, row in nota.iterrows():  # the last letter shows "None of the above" and is the gold
        assert list(row["options"])[-1] == "None of the above" and row["gold"] == OPTION_LETTERS[len(row["options"]) - 1]
        assert row["correct"] == float(row["answer"] == row["gold"])
    control = variants[variants["probe"] == "none-of-the-above-control"]
    assert set(control["id"]) == set(nota["id"])
    for _, row in control.iterrows():  # "None of the above" last and wrong, the gold still shown
        assert list(row["options"])[-1] == "None of the above" and row["gold"] != OPTION_LETTERS[len(row["options"]) - 1]
    found = results["probes"]["none-of-the-above"]
    picks = lambda rows: float(np.mean([a == OPTION_LETTERS[len(o) - 1] for a, o in zip(rows["answer"], rows["options"])]))  # noqa: E731
    assert found["picks_none_when_right"] == pytest.approx(picks(nota))
    assert found["picks_none_when_wrong"] == pytest.approx(picks(control)) and found["control"]["n"] == len(control)
    opened = variants[variants["probe"] == "open-ended"]
    by_id = {q.id: q for q in questions}
    for _, row in opened.iterrows():  # the rule restated: the free text names the gold option's text
        question = by_id[row["id"]]
        assert row["answer"] == row["raw_output"].strip()
        assert row["correct"] == float(names_gold(row["raw_output"], question.options, question.gold))
        assert "A. " not in row["prompt"]
    jsonschema.validate(results, json.loads((Path(finbench.__file__).parent / "report" / "results.schema.json").read_text()))
    assert "probe none-of-the-above (" in first.output and "probe open-ended (" in first.output
    assert 'id="probes"' in (out / "report.html").read_text()
    assert "## Contamination probes" in (out / "report.md").read_text()
    assert results["variants"]["n"] == len(variants) == results["variants"]["n_computed"]
    assert rerun["variants"]["n_computed"] == 0 and rerun["variants"]["n_cached"] == len(variants)
    assert rerun["n_computed"] == 0 and rerun["probes"] == results["probes"]
    assert set(rerun["probes"]) == {"none-of-the-above", "open-ended"}  # `--probe a --probe b`: both, not the last


def test_compare_and_sweep_show_the_probes(probed):
    from finbench.report.markdown import sweep_markdown
    from finbench.report.studies import compare_rows
    from finbench.app.sweep import summarize

    out, _, results, _ = probed
    summary = summarize([out, out], ["a", "b"], n_bootstrap=0)
    assert summary["variants"][0]["studies"]["probes"]["open-ended"]["accuracy"] == results["probes"]["open-ended"]["accuracy"]
    header, rows = compare_rows({v["name"]: v["studies"] for v in summary["variants"]})
    assert "none-of-the-above: accuracy ×100 (probe − base)" in header and len(rows[0]) == len(header)
    assert "none-of-the-above: accuracy" in sweep_markdown(summary)


@pytest.mark.parametrize("extra, message", [
    (("--probe", "none-of-the-above,memory"), "--probe none-of-the-above,memory: unknown probe 'memory'"),
    (("--probe", "open-ended", "--protocol", "official"), "--probe applies to the constrained protocol"),
])
def test_bad_probes_fail_at_start_up_in_one_line(tiny_qwen_dir, synthetic_parquet, tmp_path, extra, message):
    assert_refused_in_one_line(_cli(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", *extra), message,
                               tmp_path / "run")


def test_a_negated_chinese_answer_does_not_name_the_option():
    from finbench.scoring.probe_scores import names_gold, option_matches

    assert option_matches("是的，是这样", "是") and option_matches("答案：是", "是")
    assert not option_matches("不是", "是") and not option_matches("并非如此，没有增长", "增长")
    assert option_matches("不是，是增长", "增长") and option_matches("不是下降，而是增长", "增长")
    assert names_gold("否", ["是", "否"], "B") and not names_gold("不是", ["是", "否"], "A")
