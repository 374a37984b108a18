"""The judge path: rule and model verdicts per sample, cached like answers (a rerun computes
nothing), failures kept per sample, a bad --judge refused at start-up, and the tiny Qwen2.5-VL
judging a FAMMA run end to end (text only)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from finbench.benchmarks import famma
from finbench.offline import famma_synthetic as synthetic
from finbench.runner.cache import PredictionCache
from finbench.runner.judge import judge_run
from finbench.types import OPEN, Prediction, Question


class FakeJudge:
    """Replies 'correct' to prompts whose student answer is 'right'; counts its calls."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.prompts: list[str] = []
        self.fail_on = fail_on

    def fingerprint(self):
        return {"fake": 1}

    def prepare(self, requests):
        return [r.messages[0]["content"][0]["text"] for r in requests]

    def to_device(self, inputs):
        return inputs

    def generate(self, prompts, max_new_tokens):
        if self.fail_on and any(self.fail_on in p for p in prompts):
            raise RuntimeError("judge exploded")
        self.prompts.extend(prompts)
        replies = []
        for p in prompts:
            qid = p.split("'question_id': '")[1].split("'")[0]
            replies.append(json.dumps({qid: "correct" if "'student_answer': 'right'" in p else "incorrect"}))
        return replies, [1] * len(prompts)


def open_question(qid: str, gold: str = "gold") -> Question:
    return Question(id=qid, benchmark="famma", kind=OPEN, text="q?", meta={"question_type": "open question"},
                    fields={"gold_text": gold, "context": ""})


def test_verdicts_are_cached_and_a_changed_answer_is_judged_again(tmp_path):
    questions = [open_question("a"), open_question("b"), open_question("c", gold="")]
    predictions = {0: Prediction(id="a", answer="right", generated_text="right"),
                   1: Prediction(id="b", answer="wrong", generated_text="wrong"),
                   2: Prediction(id="c", answer="x", generated_text="x")}
    cache = PredictionCache(tmp_path / "cache.sqlite")
    judge = FakeJudge()
    first = judge_run(famma, questions, predictions, judge, cache, "fake")
    assert first.columns["judge_score"][:2] == [1.0, 0.0] and first.columns["judge_output"][2] == ""
    assert first.summary["n_computed"] == 2 and len(judge.prompts) == 2  # no gold: not judged
    again = judge_run(famma, questions, predictions, judge, cache, "fake")
    assert again.summary["n_cached"] == 2 and again.summary["n_computed"] == 0 and len(judge.prompts) == 2
    assert again.columns["judge_output"] == first.columns["judge_output"]
    predictions[1] = Prediction(id="b", answer="right", generated_text="right")
    changed = judge_run(famma, questions, predictions, judge, cache, "fake")
    assert changed.summary["n_computed"] == 1 and changed.columns["judge_score"][1] == 1.0
    cache.close()


def test_a_failing_judge_is_a_per_sample_error(tmp_path):
    questions = [open_question("a"), open_question("b")]
    predictions = {0: Prediction(id="a", answer="right", generated_text="right"),
                   1: Prediction(id="b", answer="boom", generated_text="boom")}
    judged = judge_run(famma, questions, predictions, FakeJudge(fail_on="boom"), None, "fake")
    details = [json.loads(d) if d else {} for d in judged.columns["judge_details"]]
    # one batch holds both: both fail, both keep the error, neither gets a score
    assert all("judge exploded" in d.get("error", "") for d in details)
    assert judged.summary["n_failed"] == 2


def test_a_bad_judge_is_refused_at_start_up(tiny_qwen_dir, tmp_path):
    from finbench.runner.engine import run_benchmark
    from finbench.types import RunConfig

    data = synthetic.write_early_json(tmp_path / "f.json", synthetic.records(None)[:2])
    config = RunConfig(model=str(tiny_qwen_dir), benchmark="famma", data=str(data), out=str(tmp_path / "run"),
                       device="cpu", dtype="float32", judge=str(tmp_path / "no-such-judge"))
    with pytest.raises(ValueError, match="--judge"):
        run_benchmark(config, show_progress=False)
    assert not (tmp_path / "run" / "samples.parquet").exists()


@pytest.mark.slow
def test_tiny_judge_end_to_end_and_rerun_computes_nothing(tiny_model, tiny_qwen_dir, tmp_path):
    from finbench.runner.engine import run_benchmark
    from finbench.types import RunConfig

    data = synthetic.write_parquet(tmp_path / "famma.parquet", synthetic.records(None))
    config = RunConfig(model=str(tiny_qwen_dir), benchmark="famma", data=str(data), out=str(tmp_path / "run"),
                       device="cpu", dtype="float32", protocol="official", max_new_tokens=8,
                       judge=str(tiny_qwen_dir), judge_max_new_tokens=8, bootstrap=0)
    first = run_benchmark(config, tiny_model, show_progress=False)
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    judged = samples[samples["judge_output"] != ""]
    answered = samples[(samples["gold_status"] == "answered") & (samples["error"] == "")]
    assert set(judged["id"]) == set(answered["id"]) and len(judged) == 4  # 4 answered, error-free questions
    assert first.results["n_computed"] == 5  # every readable question, from 4 grouped calls:
    by_id = samples.set_index("id")  # the two sub-questions of main question 2 share one generation
    assert by_id.loc["english_2_1_r1", "raw_output"] == by_id.loc["english_2_2_r1", "raw_output"] != ""
    for _, row in judged.iterrows():
        reply = json.loads(row["judge_output"])[0]
        parsed = famma._lenient_json(reply)
        value = parsed.get(row["id"]) if isinstance(parsed, dict) else None
        assert row["judge_score"] == float(value == "correct" or value is True)  # the analyzer's reading
    summary = first.results["judge"]
    assert summary["n_computed"] == summary["n_calls"] == 4 and summary["n_cached"] == 0
    again = run_benchmark(config, tiny_model, show_progress=False)
    assert again.results["judge"]["n_cached"] == 4 and again.results["judge"]["n_computed"] == 0
    assert again.results["n_computed"] == 0
    assert list(pd.read_parquet(tmp_path / "run" / "samples.parquet")["judge_output"]) == list(samples["judge_output"])


def test_a_text_only_causal_lm_judges_too(tiny_qwen_dir, tmp_path):
    """A judge without a vision tower loads as a causal LM; its reply is read like any other."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from finbench.models.judge import TextChatModel, load_judge

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen_dir)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "judge")
    tokenizer.save_pretrained(tmp_path / "judge")
    judge = load_judge(str(tmp_path / "judge"), dtype="float32", device="cpu")
    assert isinstance(judge, TextChatModel)
    question = open_question("a", gold="5")
    judged = judge_run(famma, [question], {0: Prediction(id="a", answer="5", generated_text="5")}, judge, None,
                       "text", max_new_tokens=4)
    reply = json.loads(judged.columns["judge_output"][0])[0]
    parsed = famma._lenient_json(reply)
    value = parsed.get("a") if isinstance(parsed, dict) else None
    assert judged.columns["judge_score"][0] == float(value == "correct" or value is True)
    assert judged.columns["rule_score"][0] == 1.0 and judged.summary["n_computed"] == 1
