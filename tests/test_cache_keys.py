"""Cache keys pinned to fixed values, one per request type and per setting a study adds: a change
that moves code around (a module renamed, a type moved to another package) must not change one
key, or every cached answer of every earlier run would be computed again. A key that changes on
purpose (a new request field, a decoder change) is updated here in the same commit, with the reason
(runner/keys.py `DECODER_VERSION`, runner/judge_step.py `JUDGE_PROMPT_VERSION`)."""

from __future__ import annotations

import pytest

from finbench.core.requests import Choose, Generate, Number, Prompt, Session, Turn, user_message
from finbench.core.types import Question
from finbench.runner.judge_step import judge_key
from finbench.runner.keys import request_payload, sample_key

FINGERPRINT = {"source": "m", "dtype": "float32", "quant": "none", "weights": "abc123",
               "processor": {"max_pixels": 12544}}
QUESTION = Question(id="q1", benchmark="toy", kind="single", text="Which?", options=("a", "b", "c"), gold="B",
                    images=(b"\x89PNG one", b"\x89PNG two"), meta={"domain": "Banking"})
PROMPT = Prompt(messages=(user_message("Which?\nA. a\nB. b\nC. c", 1),), images=(0,), answer_prefix="Answer:")
SAMPLED = (("seed", 3), ("temperature", 0.7), ("top_p", 0.9))
TURNS = (Turn(ask=user_message("First?", 1), recall=user_message("First?")),
         Turn(ask=user_message("Then?"), recall=user_message("Then?")))

REQUESTS = {
    "choose": Choose(PROMPT, n_options=3),
    "choose multi, thinking, rotated": Choose(PROMPT, n_options=3, multi=True, think_budget=64, rotation=1,
                                              sampling=SAMPLED),
    "choose probed": Choose(PROMPT, n_options=3, probe="none-of-the-above"),
    "number": Number(PROMPT, budget=8),
    "number thinking": Number(PROMPT, think_budget=0),
    "generate": Generate(PROMPT, max_new_tokens=64),
    "generate sampled, ablated": Generate(PROMPT.ablated("blank"), max_new_tokens=32, sampling=SAMPLED),
    "generate without images": Generate(PROMPT.ablated("none"), max_new_tokens=32, probe="open-ended"),
    "session": Session(prefix=(), turns=TURNS, max_new_tokens=16, images=(1,), reply_after="Answer:"),
}
PINNED = {
    "choose": "4b02f37588be46e2b576dae66042bbfa2247a51c3714ec2ac42529064ae81dc6",
    "choose multi, thinking, rotated": "db57490a6bccb3237b0703a01994164c9cdf733a953bb078c100e04fb26bc3e9",
    "choose probed": "642e11b8e123992fe78d5967439b07d02b6c813cf713834aee81f5ed87675a69",
    "number": "cc63eba847bf2cf3fd85b7fc0da2ad8768149876110d849aeb47ee752e75de20",
    "number thinking": "07cfaf2a8a08c9a9d4f9c2fcf845aa402383a6e3b815033114906b87593e494a",
    "generate": "587eee461fdbe33455ec916324ce0debb5c27f2f7e5c7e1a80c6a792cb94b64a",
    "generate sampled, ablated": "0253429f50867e13caf1707e18e2db9be55d1c81e058ec23a58a2ade4c6bfc92",
    "generate without images": "10f663ed8529f40c6bf8c55407d454e0484c58d0b1f586e2be5c1dea497e81ae",
    "session": "9177a847807578edbd6025696ce97eb46fedd7b2c4c739cc346f5e860d96145e",
}
JUDGE_PINNED = "judge:ad1812548b39208b030341edb0134fddc9f8db651c332a154d77f9c2102ee59f"


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_the_cache_key_of_each_request_type_is_pinned(name):
    assert sample_key(FINGERPRINT, "toy-constrained-v1", REQUESTS[name], QUESTION) == PINNED[name]


def test_the_judge_key_is_pinned():
    request = REQUESTS["generate"]
    assert judge_key({"source": "judge", "weights": "def456"}, request_payload(request, QUESTION)) == JUDGE_PINNED


def test_the_pinned_keys_are_distinct():
    assert len(set(PINNED.values())) == len(PINNED)
