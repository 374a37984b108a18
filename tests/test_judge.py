"""The judge path: rule and model verdicts per sample, cached like answers (a rerun computes
nothing), failures kept per sample, a bad --judge refused at start-up, and the tiny Qwen2.5-VL
judging a FAMMA run end to end (text only)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from finbench.benchmarks import famma
from finbench.models.contract import Capabilities
from finbench.offline import famma_synthetic as synthetic
from finbench.runner.cache import PredictionCache
from finbench.runner.judge import judge_run
from finbench.types import OPEN, Prediction, Question


class FakeJudge:
    """Replies 'correct' to prompts whose student answer is 'right'; counts its calls."""

    capabilities = Capabilities(sees_images=False)

    def __init__(self, fail_on: str | None = None) -> None:
        self.prompts: list[str] = []
        self.fail_on = fail_on

    def fingerprint(self):
        return {"fake": 1}

    def prepare(self, requests):
        return [r.messages[0]["content"][-1]["text"] for r in requests]

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
    first = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, "fake")
    assert first.columns["judge_score"][:2] == [1.0, 0.0] and first.columns["judge_output"][2] == ""
    assert first.summary["n_computed"] == 2 and len(judge.prompts) == 2  # no gold: not judged
    again = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, "fake")
    assert again.summary["n_cached"] == 2 and again.summary["n_computed"] == 0 and len(judge.prompts) == 2
    assert again.columns["judge_output"] == first.columns["judge_output"]
    predictions[1] = Prediction(id="b", answer="right", generated_text="right")
    changed = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, "fake")
    assert changed.summary["n_computed"] == 1 and changed.columns["judge_score"][1] == 1.0
    cache.close()


def test_a_failing_judge_is_a_per_sample_error(tmp_path):
    questions = [open_question("a"), open_question("b")]
    predictions = {0: Prediction(id="a", answer="right", generated_text="right"),
                   1: Prediction(id="b", answer="boom", generated_text="boom")}
    judged = judge_run(famma.BENCHMARK, questions, predictions, FakeJudge(fail_on="boom"), None, "fake")
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
    judged = judge_run(famma.BENCHMARK, [question], {0: Prediction(id="a", answer="5", generated_text="5")}, judge,
                       None, "text", max_new_tokens=4)
    reply = json.loads(judged.columns["judge_output"][0])[0]
    parsed = famma._lenient_json(reply)
    value = parsed.get("a") if isinstance(parsed, dict) else None
    assert judged.columns["judge_score"][0] == float(value == "correct" or value is True)
    assert judged.columns["rule_score"][0] == 1.0 and judged.summary["n_computed"] == 1


def _recording(model, monkeypatch):
    """The ModelRequests `model.prepare` is given (the judge shares the tiny model's adapter)."""
    seen = []
    original = model.prepare

    def prepare(requests):
        seen.extend(requests)
        return original(requests)

    monkeypatch.setattr(model, "prepare", prepare)
    return seen


@pytest.mark.slow
def test_a_vision_language_judge_is_shown_the_session_images_and_its_verdicts_are_cached(
        tiny_model, tiny_qwen_dir, tmp_path, monkeypatch):
    """FinMTM's official judge sees the session's images: a --judge VLM gets each turn-judge and
    session-judge prompt with them (images first, as the official client sends them), keyed by the
    judge's fingerprint and the request with its images; a rerun computes nothing."""
    from test_finmtm import write_fixtures

    from finbench.runner.engine import run_benchmark
    from finbench.runner.preprocess import decode_images
    from finbench.types import RunConfig

    write_fixtures(tmp_path / "data")
    seen = _recording(tiny_model, monkeypatch)
    config = RunConfig(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(tmp_path / "data"),
                       out=str(tmp_path / "run"), device="cpu", dtype="float32", max_new_tokens=3,
                       judge=str(tiny_qwen_dir), judge_max_new_tokens=4, bootstrap=0)
    first = run_benchmark(config, tiny_model, show_progress=False)
    judged = [r for r in seen if "Senior Financial Auditor" in r.messages[0]["content"][-1]["text"]
              or "SESSION level" in r.messages[0]["content"][-1]["text"]]
    sessions = {q.id: q for q in __import__("finbench.benchmarks.finmtm", fromlist=["x"]).load_questions(
        tmp_path / "data") if q.meta.get("task") == "dialogue" and not q.error}
    assert len(judged) == sum(len(q.fields["turns"]) + 1 for q in sessions.values())  # every turn, then the session
    two_images = [tuple(im.size for im in decode_images(sessions["s1"]))]
    for request in judged:
        parts = [p["type"] for p in request.messages[0]["content"]]
        assert parts == ["image"] * len(request.images) + ["text"] and request.images  # shown, images first
    assert two_images[0] in {tuple(im.size for im in r.images) for r in judged}
    summary = first.results["judge"]
    assert summary["sees_images"] and summary["n_shown_images"] == len(sessions) and "text_only" not in summary
    assert summary["n_computed"] == summary["n_calls"] == len(judged)
    seen.clear()
    again = run_benchmark(config, tiny_model, show_progress=False)
    assert again.results["judge"]["n_cached"] == len(judged) and again.results["judge"]["n_computed"] == 0
    assert seen == []  # nothing prepared at all: answers and verdicts from the cache


def test_a_text_judge_is_shown_the_text_and_labelled(tmp_path):
    """A judge that declares no images gets the same requests without their image parts; the
    rows and the summary say so (the verdict is not the official, image-seeing one)."""
    from test_finmtm import write_fixtures

    from finbench.benchmarks import finmtm

    write_fixtures(tmp_path / "data")
    session = next(q for q in finmtm.load_questions(tmp_path / "data") if q.id == "s1")
    replies = json.dumps(["120", "20%", "15%"])

    class TextJudge(FakeJudge):
        def prepare(self, requests):
            self.requests = list(requests)
            return [r.messages[0]["content"][-1]["text"] for r in requests]

        def generate(self, prompts, max_new_tokens):
            return ["{}"] * len(prompts), [1] * len(prompts)

    judge = TextJudge()
    judged = judge_run(finmtm.BENCHMARK, [session], {0: Prediction(id="s1", answer=replies, generated_text=replies)},
                       judge, None, "text", max_new_tokens=4)
    assert judge.requests and all(r.images == () for r in judge.requests)
    assert all(p["type"] == "text" for r in judge.requests for p in r.messages[0]["content"])
    assert "text_only" in judged.summary and not judged.summary["sees_images"]
    assert "not shown" in json.loads(judged.columns["judge_details"][0])["text_only"]
