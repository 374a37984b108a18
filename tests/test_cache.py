"""Cache keys change with everything that changes an answer; rows round-trip exactly."""

from __future__ import annotations

import dataclasses

from finbench.benchmarks import finmme
from finbench.core.requests import (
    Choose,
    Generate,
    Number,
    Prompt,
    Session,
    Turn,
    user_message,
)
from finbench.core.types import Prediction, Question
from finbench.runner.cache import PredictionCache
from finbench.runner.keys import sample_key

FINGERPRINT = {"source": "m", "dtype": "float32", "quant": "none", "processor": {"max_pixels": 12544}}
QUESTION = Question(id="q1", benchmark="finmme", kind="single", text="Which?", options=("a", "b"), gold="A",
                    images=(b"\x89PNG fake",), fields={"verified_caption": "c", "related_sentences": "",
                                                        "raw_options": "['a', 'b']", "raw_answer": "A"},
                    meta={"domain": "Banking", "question_type": "single_choice"})
PROMPT = Prompt(messages=(user_message("Which?\nA. a\nB. b", 1),), images=(0,), answer_prefix="Answer:")
REQUEST = Choose(PROMPT, n_options=2)


def _key(fingerprint=FINGERPRINT, prompt="finmme-constrained-v1", request=REQUEST, question=QUESTION):
    return sample_key(fingerprint, prompt, request, question)


def test_everything_that_changes_an_answer_changes_the_key():
    base = _key()
    generate = Generate(PROMPT, max_new_tokens=64)
    variants = {
        "dtype": _key(fingerprint={**FINGERPRINT, "dtype": "bfloat16"}),
        "quant": _key(fingerprint={**FINGERPRINT, "quant": "4bit"}),
        "max_pixels": _key(fingerprint={**FINGERPRINT, "processor": {"max_pixels": 50176}}),
        "prompt template": _key(prompt="finmme-constrained-v2"),
        "request type": _key(request=Number(PROMPT)),
        "numeric budget": _key(request=Number(PROMPT, budget=8)),
        "multi": _key(request=dataclasses.replace(REQUEST, multi=True)),
        "options": _key(request=dataclasses.replace(REQUEST, n_options=3)),
        "thinking": _key(request=dataclasses.replace(REQUEST, think_budget=0)),
        "think budget": _key(request=dataclasses.replace(REQUEST, think_budget=64)),
        "generation": _key(request=generate),
        "max new tokens": _key(request=dataclasses.replace(generate, max_new_tokens=65)),
        "sampling": _key(request=dataclasses.replace(generate, sampling=(("temperature", 0.7),))),
        "system prompt": _key(request=dataclasses.replace(REQUEST, prompt=PROMPT.with_system("Be brief."))),
        "answer prefix": _key(request=dataclasses.replace(REQUEST, prompt=dataclasses.replace(PROMPT, answer_prefix=""))),
        "image rule": _key(request=dataclasses.replace(REQUEST, prompt=dataclasses.replace(PROMPT, image_rule="x"))),
        "image bytes": _key(question=dataclasses.replace(QUESTION, images=(b"\x89PNG other",))),
        "text": _key(request=dataclasses.replace(REQUEST, prompt=dataclasses.replace(
            PROMPT, messages=(user_message("Which one?\nA. a\nB. b", 1),)))),
        "session": _key(request=Session(prefix=(), turns=(Turn(ask=PROMPT.messages[0], recall=PROMPT.messages[0]),),
                                        max_new_tokens=64, images=(0,))),
    }
    assert len(set(variants.values()) | {base}) == len(variants) + 1, variants
    assert _key() == base  # deterministic


def test_a_benchmark_request_changes_its_key_with_what_the_model_sees():
    """Through FinMME's real request: options and text change the key, the gold does not."""
    def key(question):
        return _key(request=finmme.request(question, "constrained"), question=question)

    assert key(dataclasses.replace(QUESTION, options=("a", "c"))) != key(QUESTION)
    assert key(dataclasses.replace(QUESTION, text="Which one?")) != key(QUESTION)
    assert key(dataclasses.replace(QUESTION, gold="B")) == key(QUESTION)


def test_a_local_folder_is_keyed_by_its_content_and_a_hub_id_by_its_name():
    local = {**FINGERPRINT, "weights": "0123abcd"}
    assert _key(fingerprint={**local, "source": "./m"}) == _key(fingerprint={**local, "source": "/abs/m"})
    assert _key(fingerprint={**local, "weights": "ffff"}) != _key(fingerprint=local)
    assert _key(fingerprint={**FINGERPRINT, "source": "org/a"}) != _key(fingerprint={**FINGERPRINT, "source": "org/b"})


def test_gold_and_grouping_metadata_do_not_change_the_key():
    fixed_gold = dataclasses.replace(QUESTION, gold="B", fields={**QUESTION.fields, "raw_answer": "B"},
                                     meta={"domain": "Bond Market", "question_type": "single_choice"})
    assert _key(question=fixed_gold) == _key()


def test_rows_round_trip_and_survive_reopening(tmp_path):
    path = tmp_path / "cache.sqlite"
    cache = PredictionCache(path)
    stored = Prediction(id="q1", answer="AC", option_logprobs=(-0.1, float("-inf")),
                        step_logprobs=((-0.1, -2.0), (-0.5,)), generated_text="", n_generated_tokens=3, seconds=0.25)
    cache.put_many([("k1", stored)])
    cache.close()
    reopened = PredictionCache(path)
    assert reopened.get_many(["k1", "missing"]) == {"k1": stored}
    assert len(reopened) == 1
    assert reopened.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_real_adapter_fingerprint_tracks_dtype_and_max_pixels(tiny_model, tiny_qwen_dir):
    """The keys above are only as good as the fingerprint: it must change when the model is
    loaded in another dtype or with another pixel cap, and stay put otherwise."""
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    base = tiny_model.fingerprint()
    same = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu")).fingerprint()
    bf16 = load_model(str(tiny_qwen_dir), LoadSpec(dtype="bfloat16", device="cpu")).fingerprint()
    capped = load_model(str(tiny_qwen_dir),
                        LoadSpec(dtype="float32", device="cpu", max_pixels=28 * 28 * 8)).fingerprint()
    assert _key(fingerprint=same) == _key(fingerprint=base)
    assert _key(fingerprint=bf16) != _key(fingerprint=base)
    assert _key(fingerprint=capped) != _key(fingerprint=base)
    assert capped["processor"]["max_pixels"] == 28 * 28 * 8 and base["weights"]
