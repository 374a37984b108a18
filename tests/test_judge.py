"""The judge path: rule and model verdicts per sample, cached like answers (a rerun computes
nothing), failures kept per sample, a bad --judge refused at start-up, and the tiny Qwen2.5-VL
judging a FAMMA run end to end (text only)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from finbench.app.api import make_config
from finbench.benchmarks import famma
from finbench.config.specs import BatchSpec, JudgeSpec, RunConfig
from finbench.core.types import OPEN, Prediction, Question
from finbench.models.contract import Capabilities, ModelAdapter
from finbench.models.inputs import ModelInputs
from finbench.offline import famma_synthetic as synthetic
from finbench.runner.cache import PredictionCache
from finbench.runner.judge_step import judge_run


class FakeJudge:
    """A text judge adapter for the batch loop: replies 'correct' to prompts whose student answer
    is 'right'; records each batch's prompts. `fail_on`: a batch holding that text raises;
    `oom_above`: a batch of more rows raises CUDA out-of-memory."""

    capabilities = Capabilities(sees_images=False)
    device = torch.device("cpu")
    pad_token_id = None  # the contract's: its texts are not padded
    source = "fake-judge"

    def __init__(self, fail_on: str | None = None, oom_above: int | None = None) -> None:
        self.prompts: list[str] = []
        self.batches: list[int] = []
        self.budgets: list[int] = []  # each batch's reply budget
        self.fail_on, self.oom_above = fail_on, oom_above

    def fingerprint(self):
        return {"fake": 1}

    def prompt_text(self, request):
        return request.messages[0]["content"][-1]["text"]

    def text_token_counts(self, texts):
        return [len(t.split()) for t in texts]

    def image_token_count(self, width, height):
        raise ValueError("a text judge takes no images")

    def max_context(self):
        return None

    def count_image_tokens(self, inputs):
        return 0

    def prefill_flops(self, inputs):
        return None

    def prepare(self, requests):
        prompts = [self.prompt_text(r) for r in requests]
        return ModelInputs({"prompts": prompts, "attention_mask": torch.ones(len(prompts), 1)}, texts=prompts)

    def to_device(self, inputs):
        return inputs

    def generate(self, inputs, max_new_tokens):
        prompts = inputs["prompts"]
        if self.oom_above is not None and len(prompts) > self.oom_above:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self.fail_on and any(self.fail_on in p for p in prompts):
            raise RuntimeError("judge exploded")
        self.prompts.extend(prompts)
        self.batches.append(len(prompts))
        self.budgets.append(max_new_tokens)
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
    first = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, JudgeSpec(judge="fake"))
    assert first.columns["judge_score"][:2] == [1.0, 0.0] and first.columns["judge_output"][2] == ""
    assert first.summary["n_computed"] == 2 and len(judge.prompts) == 2  # no gold: not judged
    again = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, JudgeSpec(judge="fake"))
    assert again.summary["n_cached"] == 2 and again.summary["n_computed"] == 0 and len(judge.prompts) == 2
    assert again.columns["judge_output"] == first.columns["judge_output"]
    predictions[1] = Prediction(id="b", answer="right", generated_text="right")
    changed = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, JudgeSpec(judge="fake"))
    assert changed.summary["n_computed"] == 1 and changed.columns["judge_score"][1] == 1.0
    cache.close()


class MumblingJudge(FakeJudge):
    """Replies without a verdict to prompts whose student answer is 'mumble'."""

    def generate(self, inputs, max_new_tokens):
        replies, counts = super().generate(inputs, max_new_tokens)
        return ["I am not sure." if "'student_answer': 'mumble'" in p else r
                for p, r in zip(inputs["prompts"], replies)], counts


def test_an_unparseable_judge_reply_fails_closed_counted_and_named(tmp_path):
    """A reply the benchmark's reading cannot parse is no verdict: no judge score (not the
    official reading's default 0), counted, named and said in a note."""
    questions = [open_question("a"), open_question("b")]
    predictions = {0: Prediction(id="a", answer="right", generated_text="right"),
                   1: Prediction(id="b", answer="mumble", generated_text="mumble")}
    judged = judge_run(famma.BENCHMARK, questions, predictions, MumblingJudge(), None, JudgeSpec(judge="fake"))
    assert judged.columns["judge_score"][0] == 1.0 and math.isnan(judged.columns["judge_score"][1])
    assert judged.summary["n_unparsed_items"] == 1 and judged.summary["unparsed_items"] == ["b"]
    assert any("could not be parsed" in note and "b" in note for note in judged.notes)
    assert "no verdict" in json.loads(judged.columns["judge_details"][1])["error"]


def test_a_failing_judge_is_a_per_sample_error_scored_zero_and_named(tmp_path):
    questions = [open_question("a"), open_question("b")]
    predictions = {0: Prediction(id="a", answer="right", generated_text="right"),
                   1: Prediction(id="b", answer="boom", generated_text="boom")}
    cache = PredictionCache(tmp_path / "cache.sqlite")
    judge = FakeJudge(fail_on="boom")
    judged = judge_run(famma.BENCHMARK, questions, predictions, judge, cache, JudgeSpec(judge="fake"))
    details = [json.loads(d) if d else {} for d in judged.columns["judge_details"]]
    # the batch of both fails, then each is asked alone: only "b" keeps the error, and scores 0
    assert "error" not in details[0] and "judge exploded" in details[1]["error"]
    assert judged.columns["judge_score"] == [1.0, 0.0]
    assert judged.summary["n_failed"] == 1 and judged.summary["failed_items"] == ["b"]
    assert judged.summary["n_failed_items"] == 1
    assert len(judged.notes) == 1 and "scored 0" in judged.notes[0] and "b" in judged.notes[0]
    # the failure is not cached
    again = judge_run(famma.BENCHMARK, questions, predictions, FakeJudge(), cache, JudgeSpec(judge="fake"))
    assert again.summary["n_cached"] == 1 and again.summary["n_computed"] == 1 and again.notes == []
    cache.close()


def test_a_judge_out_of_memory_at_batch_8_halves_and_answers_every_item():
    """The judge's requests run through the one batch loop: a batch of 8 that raises CUDA
    out-of-memory (above 2 rows) is halved until it fits, and every item is judged."""
    questions = [open_question(f"q{k}") for k in range(8)]
    predictions = {k: Prediction(id=f"q{k}", answer="right" if k % 2 else "wrong",
                                 generated_text="right" if k % 2 else "wrong") for k in range(8)}
    judge = FakeJudge(oom_above=2)
    batching = BatchSpec(batch_size=8, token_budget=10**6, workers=1)
    judged = judge_run(famma.BENCHMARK, questions, predictions, judge, None, JudgeSpec(judge="fake"), batching)
    assert judged.columns["judge_score"] == [float(k % 2) for k in range(8)]
    assert judged.summary["n_failed"] == 0 and judged.summary["oom_retries"] == 2  # 8 → 4 → 2
    assert judge.batches == [2, 2, 2, 2] and len(judge.prompts) == 8


def test_judge_run_takes_the_run_s_judging_and_batching_specs_whole():
    """The judging spec names the judge (the summary's model) and its reply budget, which replaces
    each request's (none: the benchmark's official judge budget); the batching spec caps the
    judge's batches."""
    from finbench.benchmarks.famma.verdicts import JUDGE_MAX_NEW_TOKENS

    questions = [open_question(f"q{k}") for k in range(3)]
    predictions = {k: Prediction(id=f"q{k}", answer="right", generated_text="right") for k in range(3)}
    judge = FakeJudge()
    judged = judge_run(famma.BENCHMARK, questions, predictions, judge, None,
                       JudgeSpec(judge="owner/judge", judge_max_new_tokens=7),
                       BatchSpec(batch_size=1, token_budget=10**6, workers=1))
    assert judged.summary["model"] == "owner/judge" and judged.columns["judge_score"] == [1.0] * 3
    assert judge.batches == [1, 1, 1] and judge.budgets == [7, 7, 7]
    judge = FakeJudge()
    judged = judge_run(famma.BENCHMARK, questions, predictions, judge, None, JudgeSpec(),
                       BatchSpec(batch_size=2, token_budget=10**6, workers=1))
    assert judged.summary["model"] is None and judged.columns["judge_score"] == [1.0] * 3
    assert judge.batches == [2, 1] and judge.budgets == [JUDGE_MAX_NEW_TOKENS] * 2


def test_a_judge_prompt_longer_than_the_judge_s_context_fails_alone_and_scores_zero():
    questions = [open_question("short"), open_question("long", gold="word " * 400)]
    predictions = {0: Prediction(id="short", answer="right", generated_text="right"),
                   1: Prediction(id="long", answer="right", generated_text="right")}

    class SmallContext(FakeJudge):
        def max_context(self):
            return 300  # the short prompt fits (~150 words), the long one (~550) does not

    judge = SmallContext()
    judged = judge_run(famma.BENCHMARK, questions, predictions, judge, None, JudgeSpec(judge="small"))
    assert judged.columns["judge_score"] == [1.0, 0.0] and len(judge.prompts) == 1  # never sent
    assert "exceeds the model's context of 300" in json.loads(judged.columns["judge_details"][1])["error"]
    assert judged.summary["failed_items"] == ["long"]


def _failed_judge_scores(benchmark, questions, predictions):
    """Every judge call raises: the verdicts as judged, and the benchmark's scores of them."""
    from finbench.runner.outputs import samples_table, score

    class Broken(FakeJudge):
        def generate(self, inputs, max_new_tokens):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    judged = judge_run(benchmark, questions, dict(enumerate(predictions)), Broken(), None, JudgeSpec(judge="broken"))
    samples = samples_table(questions, dict(enumerate(predictions)), [f"k{i}" for i in range(len(questions))])
    for column, values in judged.columns.items():
        samples[column] = values
    return judged, score(samples, benchmark, 0, 0)


@pytest.mark.parametrize("name", ["famma", "mme-finance", "finmtm"])
def test_a_judge_call_that_fails_scores_its_item_zero_for_every_judged_benchmark(name, tmp_path):
    """A judge that runs out of memory even on one row: its items are not dropped from the score
    (issue 29 item 5): each scores 0, is counted and named."""
    from finbench.benchmarks import finmtm, mme_finance
    from finbench.offline import mme_finance_synthetic

    if name == "famma":
        benchmark, questions = famma.BENCHMARK, [open_question("a"), open_question("b")]
        predictions = [Prediction(id="a", answer="right", generated_text="right"),
                       Prediction(id="b", answer="right", generated_text="right")]
    elif name == "mme-finance":
        benchmark = mme_finance.BENCHMARK
        questions = [q for q in mme_finance.load_questions(mme_finance_synthetic.write_folder(tmp_path))
                     if q.kind == OPEN][:2]
        predictions = [Prediction(id=q.id, answer=q.gold, generated_text=q.gold) for q in questions]
    else:
        from test_finmtm import write_fixtures

        write_fixtures(tmp_path / "data")
        benchmark = finmtm.BENCHMARK
        questions = [q for q in finmtm.load_questions(tmp_path / "data") if q.meta.get("task") == "dialogue"]
        replies = json.dumps(["120", "20%", "15%"])
        predictions = [Prediction(id=q.id, answer=replies, generated_text=replies) for q in questions]
    judged, scores = _failed_judge_scores(benchmark, questions, predictions)
    assert judged.columns["judge_score"] == [0.0] * len(questions)
    assert judged.summary["failed_items"] == [q.id for q in questions] and len(judged.notes) == 1
    assert all("out of memory" in json.loads(d)["error"] for d in judged.columns["judge_details"])
    if name == "famma":
        assert scores["accuracy"] == 0.0 and scores["n"] == 2
    elif name == "mme-finance":
        assert scores["score"] == 0.0 and scores.get("n_unjudged", 0) == 0
    else:
        dialogue = scores["dialogue"]
        assert dialogue["n_scored"] == len(questions) and dialogue["n_unscored"] == 0 and dialogue["score"] == 0.0


def test_a_bad_judge_is_refused_at_start_up(tiny_qwen_dir, tmp_path):
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import BatchSpec, JudgeSpec, RunConfig

    data = synthetic.write_early_json(tmp_path / "f.json", synthetic.records(None)[:2])
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="famma", data=str(data), out=str(tmp_path / "run"),
                       device="cpu", dtype="float32", judge=str(tmp_path / "no-such-judge"))
    with pytest.raises(ValueError, match="--judge"):
        run_benchmark(config, show_progress=False)
    assert not (tmp_path / "run" / "samples.parquet").exists()


@pytest.mark.slow
def test_tiny_judge_end_to_end_and_rerun_computes_nothing(tiny_model, tiny_qwen_dir, tmp_path):
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import BatchSpec, JudgeSpec, RunConfig

    data = synthetic.write_parquet(tmp_path / "famma.parquet", synthetic.records(None))
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="famma", data=str(data), out=str(tmp_path / "run"),
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
        if value is None:  # no verdict to read: a failed judgement, never the analyzer's default 0
            assert math.isnan(row["judge_score"]) and row["id"] in first.results["judge"]["unparsed_items"]
        else:
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

    from finbench.models.judge_model import TextChatModel, load_judge

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen_dir)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "judge")
    tokenizer.save_pretrained(tmp_path / "judge")
    judge = load_judge(str(tmp_path / "judge"), dtype="float32", device="cpu")
    assert isinstance(judge, TextChatModel) and isinstance(judge, ModelAdapter)  # an honest adapter
    assert judge.capabilities.sees_images is False and judge.max_context() == config.max_position_embeddings
    question = open_question("a", gold="5")
    judged = judge_run(famma.BENCHMARK, [question], {0: Prediction(id="a", answer="5", generated_text="5")}, judge,
                       None, JudgeSpec(judge="text", judge_max_new_tokens=4))
    reply = json.loads(judged.columns["judge_output"][0])[0]
    parsed = famma._lenient_json(reply)
    value = parsed.get("a") if isinstance(parsed, dict) else None
    score = judged.columns["judge_score"][0]
    assert (math.isnan(score) and judged.summary["unparsed_items"] == ["a"]) if value is None \
        else score == float(value == "correct" or value is True)
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
    from finbench.config.specs import BatchSpec, JudgeSpec, RunConfig

    write_fixtures(tmp_path / "data")
    seen = _recording(tiny_model, monkeypatch)
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(tmp_path / "data"),
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
            texts = [r.messages[0]["content"][-1]["text"] for r in requests]
            return ModelInputs({"prompts": texts}, texts=texts)

        def generate(self, inputs, max_new_tokens):
            return ["{}"] * len(inputs["prompts"]), [1] * len(inputs["prompts"])

    judge = TextJudge()
    judged = judge_run(finmtm.BENCHMARK, [session], {0: Prediction(id="s1", answer=replies, generated_text=replies)},
                       judge, None, JudgeSpec(judge="text", judge_max_new_tokens=4))
    assert judge.requests and all(r.images == () for r in judge.requests)
    assert all(p["type"] == "text" for r in judge.requests for p in r.messages[0]["content"])
    assert "text_only" in judged.summary and not judged.summary["sees_images"]
    assert "not shown" in json.loads(judged.columns["judge_details"][0])["text_only"]


def test_the_judge_is_loaded_by_the_one_loader_on_the_rank_s_device(monkeypatch):
    """Under torchrun each rank's model is on its own GPU; the judge is loaded once, by rank 0 (the
    rank that gathers and judges), on that rank's device — not on `config.load.device` for all."""
    from finbench.models import judge_model as judge_module
    from finbench.runner import startup
    from finbench.runner.distributed import World

    loaded = []
    monkeypatch.setattr(judge_module, "load_judge", lambda source, dtype, device, model: loaded.append(device) or "J")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    config = RunConfig.flat(model="m", benchmark="famma", judge="owner/judge", device="auto")
    assert startup.load_judge_for_run(config, World(rank=0, size=2, local_rank=3)) == "J" and loaded == ["cuda:3"]
    assert startup.load_judge_for_run(config, World(rank=1, size=2, local_rank=1)) is None and loaded == ["cuda:3"]
    assert startup.load_judge_for_run(RunConfig(model="m"), World()) is None  # no --judge


class RubricJudge(FakeJudge):
    """FinMTM's judge, faked: every turn prompt gets the five dimensions (8, 6, 7, 5, 9: turn
    score 7), every session prompt its level's checklist at 6 — except the prompts naming
    `mumble_on`, answered with text no reading can parse."""

    def __init__(self, mumble_on: str | None = None) -> None:
        super().__init__()
        self.mumble_on = mumble_on

    def generate(self, inputs, max_new_tokens):
        from finbench.benchmarks.finmtm import JUDGE_FIELDS

        replies = []
        for prompt in inputs["prompts"]:
            if self.mumble_on and self.mumble_on in prompt:
                replies.append("I am not sure.")
            elif "SESSION level" in prompt:
                items = [line.split('"')[1] for line in prompt.splitlines() if line.strip().endswith('": 0-10,')
                         or line.strip().endswith('": 0-10')]
                replies.append(json.dumps({"Checklist_Scores": {item: 6 for item in items if item != "Overall_Score"}}))
            else:
                replies.append(json.dumps(dict(zip(JUDGE_FIELDS, (8, 6, 7, 5, 9)))))
        self.prompts.extend(inputs["prompts"])
        return replies, [1] * len(replies)


def _finmtm_sessions(tmp_path):
    from test_finmtm import write_fixtures

    from finbench.benchmarks import finmtm

    write_fixtures(tmp_path / "data")
    questions = [q for q in finmtm.load_questions(tmp_path / "data") if q.meta.get("task") == "dialogue"]
    replies = json.dumps(["120", "20%", "15%"])
    return finmtm.BENCHMARK, questions, [Prediction(id=q.id, answer=replies, generated_text=replies) for q in questions]


def _scored(benchmark, questions, predictions, judged):
    from finbench.runner.outputs import samples_table, score

    samples = samples_table(questions, dict(enumerate(predictions)), [f"k{i}" for i in range(len(questions))])
    for column, values in judged.columns.items():
        samples[column] = values
    return score(samples, benchmark, 0, 0)


def test_a_finmtm_session_whose_judge_reply_cannot_be_read_fails_closed(tmp_path):
    """Issue 41: a FinMTM session whose turn or session judge reply has no readable verdict gets
    no judge score (not the official reading's 0-filled one), is counted, named and said in a
    note; the dialogue part averages the sessions that were judged, and when none was it says
    "no judge reply could be read" instead of a table."""
    from rich.console import Console

    from finbench.report.console import print_scores

    benchmark, questions, predictions = _finmtm_sessions(tmp_path)
    s1, s2 = (next(i for i, q in enumerate(questions) if q.id == name) for name in ("s1", "s2"))
    judged = judge_run(benchmark, questions, dict(enumerate(predictions)), RubricJudge(mumble_on="Name the company."),
                       None, JudgeSpec(judge="rubric"))
    assert judged.columns["judge_score"][s1] == pytest.approx((0.5 * 7 + 0.5 * 6) * 10)
    assert math.isnan(judged.columns["judge_score"][s2])
    assert judged.summary["unparsed_items"] == ["s2"] and judged.summary["n_failed_items"] == 0
    assert any("could not be parsed" in note and "s2" in note for note in judged.notes)
    assert json.loads(judged.columns["judge_details"][s2])["judge"]["unreadable"] == ["T1", "session"]
    dialogue = _scored(benchmark, questions, predictions, judged)["dialogue"]
    assert (dialogue["n_scored"], dialogue["n_unparsed"], dialogue["score"]) == (1, 1, pytest.approx(65.0))
    # every reply unreadable: nothing scored, and the console says why in one line, no table
    judged = judge_run(benchmark, questions, dict(enumerate(predictions)), RubricJudge(mumble_on="0-10"), None,
                       JudgeSpec(judge="rubric"))
    assert all(math.isnan(s) for s in judged.columns["judge_score"]) and judged.summary["n_unparsed_items"] == 2
    scores = _scored(benchmark, questions, predictions, judged)
    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    print_scores(scores, console=console)
    text = console.export_text()
    assert "dialogue: no judge reply could be read (2 failed; none given a default score)" in text
    assert "final = (0.5·turn + 0.5·session)×10" not in text and scores["dialogue"]["score"] is None


def test_a_finmtm_judge_whose_replies_parse_fills_the_dialogue_table_everywhere(tiny_model, tiny_qwen_dir, tmp_path,
                                                                                monkeypatch):
    """The dialogue table (turn, session, final with CIs) in the console, report.md and
    report.html, from a judge whose replies the official reading parses (the tiny demo judge's
    random replies cannot be read, so the demo shows the part's one-line reason instead)."""
    from rich.console import Console
    from test_finmtm import write_fixtures

    from finbench.report.console import print_run
    from finbench.runner import startup
    from finbench.runner.engine import run_benchmark

    data = write_fixtures(tmp_path / "finmtm")
    # --judge names a real folder (start-up checks it); the loader is replaced by the rubric judge
    monkeypatch.setattr(startup, "load_judge_for_run", lambda config, world=None, model=None: RubricJudge())
    config = make_config(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(data), out=str(tmp_path / "run"),
                         dtype="float32", device="cpu", max_new_tokens=3, judge=str(tiny_qwen_dir), bootstrap=50)
    result = run_benchmark(config, tiny_model, show_progress=False)
    dialogue = result.results["scores"]["dialogue"]
    assert dialogue["n_judged"] == dialogue["n"] == 2 and dialogue["n_unparsed"] == 0 and "unscored" not in dialogue
    assert dialogue["score"] == pytest.approx(65.0) and set(dialogue["ci"]) == {"turn", "session", "score"}
    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    print_run(result.results, tmp_path / "run", console)
    shown = {"console": console.export_text(), "report.md": (tmp_path / "run" / "report.md").read_text(),
             "report.html": (tmp_path / "run" / "report.html").read_text()}
    for where, text in shown.items():
        for part in ("FinMTM dialogue sessions", "final = (0.5·turn + 0.5·session)×10", "65.00"):
            assert part in text, (where, part)
        assert "no judge reply could be read" not in text, where
    from finbench.app.leaderboard import build  # and the leaderboard's dialogue headline, on its 0–100 scale

    (row,) = build([tmp_path / "run"])["rows"]
    shown = {h["metric"]: h for h in row["headlines"]}
    assert shown["dialogue.score"]["value"] == pytest.approx(65.0)
