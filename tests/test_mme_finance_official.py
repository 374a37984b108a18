"""MME-Finance against the official code's rules (HiThink-Research/MME-Finance @ 70f146b, its
VLMEvalKit fork), restated by hand: the set decides the language, binary accuracy and F1 know only
the item's own 是/否, a free "A" is not an option, the judge prompt shows pandas' `nan`, TSVs are read
with pandas' quoting, and another benchmark's folder is refused at start-up. Every case here failed
before the fix it names (issue 29, items 1–4, 6, 10)."""

from __future__ import annotations

import base64
import csv
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from finbench.benchmarks import get_benchmark, mme_finance
from finbench.cli import app
from finbench.core.types import OPEN, SINGLE
from finbench.offline import mme_finance_synthetic as synthetic
from finbench.scoring.tables import score_samples


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return synthetic.write_folder(tmp_path_factory.mktemp("mmfin"))


@pytest.fixture(scope="module")
def png(folder):
    return (folder / "images" / "MMfin" / "mmfin_000.png").read_bytes()


def _record(png: bytes, **fields) -> dict:
    return {"index": 1, "image": base64.b64encode(png).decode(), "question": "What is the revenue of 腾讯 in Q2?",
            "answer": "42", "task_category": "OCR", "image_type": "Table", "image_style": "Computer Screenshot",
            "background": "", **fields}


# ---- item 1: the set decides the language -------------------------------------------------------------
def test_an_english_set_record_naming_a_chinese_company_gets_the_english_prompts(png, tmp_path):
    path = tmp_path / "MMfin.tsv"
    pd.DataFrame([_record(png)]).to_csv(path, sep="\t", index=False)
    [question] = mme_finance.load_questions(path)
    assert question.error is None and question.fields["language"] == "en"
    assert mme_finance.official_text(question).startswith("You are a financial expert who is well-versed")
    assert mme_finance.judge_prompt_text(question, "42").startswith("\nYou are a financial expert")
    cn = tmp_path / "MMfin_CN.tsv"  # and the Chinese set stays Chinese whatever its text
    pd.DataFrame([_record(png, question="What is EBITDA?")]).to_csv(cn, sep="\t", index=False)
    assert mme_finance.load_questions(cn)[0].fields["language"] == "zh"


# ---- items 2 and 3: binary accuracy and F1 ------------------------------------------------------------
def _binary_rows(answers, golds, decoded=False, options=("是", "否")):
    return pd.DataFrame([{"id": f"b{k}", "kind": SINGLE, "gold": g, "answer": a, "options": list(options),
                          "option_probs": [0.5, 0.5] if decoded else [], "judge_score": math.nan, "error": "",
                          "task_category": "Binary", "language": "zh"} for k, (a, g) in enumerate(zip(answers, golds))])


def test_binary_f1_does_not_count_english_yes_no_for_a_chinese_item():
    out = score_samples(_binary_rows(["Yes", "No"], ["A", "B"]), benchmark=get_benchmark("mme-finance"))
    assert out["binary_accuracy"] == 0.0 and out["binary_f1"] == 0.0  # was F1 1.0 (tp 1)
    mixed = score_samples(_binary_rows(["是", "Yes", "否", "否"], ["A", "A", "B", "A"]), benchmark=get_benchmark("mme-finance"))
    tp, fp, fn = 1, 0, 1  # b0 | — | b3 ("Yes" counts nowhere)
    assert mixed["binary_accuracy"] == pytest.approx(2 / 4) and mixed["binary_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))


def test_a_free_reply_of_a_letter_is_not_an_option_but_a_decoded_letter_is():
    free = score_samples(_binary_rows(["A", "B", "A。"], ["A", "B", "A"]), benchmark=get_benchmark("mme-finance"))
    assert free["binary_accuracy"] == 0.0 and free["binary_f1"] == 0.0  # the fork compares "A" with 是: wrong
    decoded = score_samples(_binary_rows(["A", "B"], ["A", "B"], decoded=True), benchmark=get_benchmark("mme-finance"))
    assert decoded["binary_accuracy"] == 1.0 and decoded["binary_f1"] == 1.0


def test_binary_rows_without_an_options_column_read_the_gold_letter_in_their_language():
    rows = _binary_rows(["是", "否", "Yes"], ["A", "A", "A"]).drop(columns=["options", "option_probs"])
    rows.loc[2, "language"] = "en"
    out = score_samples(rows, benchmark=get_benchmark("mme-finance"))
    assert out["binary_accuracy"] == pytest.approx(2 / 3)


# ---- item 6: the judge prompt shows what pandas reads back ----------------------------------------------
@pytest.mark.parametrize("prediction, shown", [("", "nan"), ("N/A", "nan"), ("None", "nan"), ("null", "nan"),
                                               (" N/A", " N/A"), ("n.a.", "n.a."), ("42", "42")])
def test_the_judge_prompt_shows_nan_where_the_fork_reads_a_missing_value(folder, prediction, shown):
    question = next(q for q in mme_finance.load_questions(folder) if q.kind == OPEN and q.meta["set"] == "MMfin")
    assert mme_finance.judge_prompt_text(question, prediction).endswith(f" | {shown} | ")


# ---- item 4: TSV quoting as pandas reads it -----------------------------------------------------------------
def test_a_tsv_from_vlmevalkit_s_writer_and_a_quoted_question_round_trip(png, tmp_path):
    rows = [_record(png, index=1, question='What does the label "Net income" show?'),
            _record(png, index=2, question='"Net income" is which line?\tIt has a tab', answer="Line\n3"),
            _record(png, index=3, question="Plain?")]
    for quoting, name in ((csv.QUOTE_ALL, "all"), (csv.QUOTE_MINIMAL, "minimal")):
        data = tmp_path / name
        data.mkdir()
        pd.DataFrame(rows).to_csv(data / "MMfin.tsv", sep="\t", index=False, encoding="utf-8", quoting=quoting)
        questions = mme_finance.load_questions(data)
        assert [q.error for q in questions] == [None, None, None], name
        assert [q.text for q in questions] == [r["question"] for r in rows]
        assert questions[1].gold == "Line\n3" and questions[0].images == (png,)
        official = pd.read_csv(data / "MMfin.tsv", sep="\t")  # VLMEvalKit's own read
        assert list(official["question"]) == [q.text for q in questions]


def test_a_tsv_line_with_too_many_fields_or_a_bad_byte_fails_that_record_only(png, tmp_path):
    path = tmp_path / "MMfin.tsv"
    pd.DataFrame([_record(png)]).to_csv(path, sep="\t", index=False, quoting=csv.QUOTE_ALL)
    with path.open("ab") as tsv:
        tsv.write(b'"2"\t"x"\t"\xffQ?"\t"1"\t"OCR"\t"Table"\t"Computer Screenshot"\t""\n')
        tsv.write(b'3\tx\tQ?\t1\tOCR\tTable\tComputer Screenshot\t\textra\n')
    questions = mme_finance.load_questions(path)
    assert questions[0].error is None
    assert "field 'question' is not valid UTF-8 (byte 0xff at offset 0)" in questions[1].error
    assert "9 tab-separated fields, the header has 8" in questions[2].error


# ---- item 10: another benchmark's folder is refused at start-up ----------------------------------------------
def test_finmtm_s_folder_is_refused_by_mme_finance_at_start_up(tiny_qwen_dir, tmp_path):
    from finbench.offline import finmtm_synthetic

    data = finmtm_synthetic.write_folder(tmp_path / "finmtm")
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", "mme-finance", "--data",
                                    str(data), "--out", str(tmp_path / "run"), "--device", "cpu", "--no-progress"])
    assert done.exit_code == 2, done.output
    lines = done.stderr.strip().splitlines()
    # each FinMTM file lacks what MME-Finance needs: the agent file has a question and an answer but
    # no VLMEvalKit index, the others neither (the first file found is the one named)
    assert len(lines) == 1 and "not MME-Finance data — missing required column(s) " in lines[0]
    assert "index" in lines[0] or "question, answer" in lines[0]
    assert not (tmp_path / "run").exists()
