"""How a served model's constrained answers are read, against servers replayed on 127.0.0.1 by a
rule (tests/served_server.py): a vLLM-shaped server's token log-probabilities read every item type
(single choices, sets decoded by finbench's set grammar, numbers by its number grammar) with each
row's reading and token counts; a reading the server refuses, or whose images it drops, is refused
at start-up in one line naming the server's answer and the reading that works; a constrained run
the server cannot read is refused before any question is sent. A real vLLM: tests/test_vllm.py."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from helpers import cli
from served_server import image_usage, mock, models, rule_logprobs, vllm_routes  # noqa: F401 (mock: a fixture)

from finbench.models.served_bodies import token_logprobs, usage_counts
from finbench.models.served_client import ServedError
from finbench.models.served_engines import ANSWER_TEXTS, PROBE_QUESTION


@pytest.fixture(scope="module")
def finmme_data(tmp_path_factory):
    from finbench.offline.finmme_synthetic import write_parquet

    return write_parquet(tmp_path_factory.mktemp("data") / "finmme.parquet", n_items=12, seed=0)


def _run(url, data, out, *extra):
    return cli("run", "--model", url, "--data", str(data), "--out", str(out), "--bootstrap", "0", "--no-progress",
               *extra)


def _asked(server):
    """The bodies the run sent (not the start-up probe's), by path."""
    return [(path, body) for _, path, body, _ in server.requests
            if body and PROBE_QUESTION not in json.dumps(body) and path != "/tokenize"]


def _rule_options(n_options):
    """The option probabilities the rule gives a single choice: B's bare spelling -0.1, every other
    spelling -6 (each letter's bare and spaced spellings combined)."""
    scores = [math.log(math.exp(-0.1 if c == "B" else -6.0) + math.exp(-6.0)) for c in "ABCDEFGH"[:n_options]]
    total = math.log(sum(math.exp(s) for s in scores))
    return [math.exp(s - total) for s in scores]


def test_a_vllm_shaped_server_reads_every_item_type_from_token_logprobs(mock, finmme_data, tmp_path):
    """Single choices B (option probabilities the rule's, renormalised over the item's options), sets
    B and D decoded step by step (B, ',', D, end: each step one request continuing the answer
    begun), numbers 12.5; each row's reading and the prompt and image tokens the server's usage
    gave for its first request in samples.parquet and the cost line."""
    server = mock(vllm_routes())
    out = tmp_path / "run"
    done = _run(server.url, finmme_data, out)
    assert done.returncode == 0, done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet")
    assert (samples["error"] == "").all() and set(samples["kind"]) == {"single", "multi", "numerical"}
    expected = {"single": "B", "multi": "BD", "numerical": "12.5"}
    assert samples["answer"].tolist() == [expected[k] for k in samples["kind"]]
    readings = {"single": "token logprobs", "multi": "set decoding over token logprobs",
                "numerical": "number grammar over token logprobs"}
    assert samples["read_by"].tolist() == [readings[k] for k in samples["kind"]]
    for _, row in samples[samples["kind"] == "single"].iterrows():
        assert list(row["option_probs"]) == pytest.approx(_rule_options(row["n_options"]), abs=1e-6)
    assert samples.loc[samples["kind"] == "multi", "generated_tokens"].eq(4).all()  # B , D end
    assert samples.loc[samples["kind"] == "numerical", "generated_tokens"].eq(5).all()  # 1 2 . 5 end

    asked = _asked(server)
    continued = [body["messages"][-1]["content"] for _, body in asked if body["messages"][-1]["role"] == "assistant"]
    assert {"Answer:", "Answer:B", "Answer:B,", "Answer:B,D", "Answer:1", "Answer:12", "Answer:12.", "Answer:12.5"} \
        == set(continued)
    assert all(body["continue_final_message"] and body["max_tokens"] == 1
               and set(body["logprob_token_ids"]) >= set(range(100, 100 + len(ANSWER_TEXTS))) for _, body in asked)
    first = [image_usage(body) for _, body in asked if body["messages"][-1]["content"] == "Answer:"]
    assert sorted(samples["prompt_tokens"]) == sorted(u["prompt_tokens"] for u in first)
    assert sorted(samples["image_tokens"]) == sorted(u["prompt_tokens_details"]["multimodal_tokens"]["image"]
                                                     for u in first)
    cost = json.loads((out / "results.json").read_text())["cost"]["total"]
    assert cost["prompt_tokens"] == samples["prompt_tokens"].sum() and cost["image_tokens"] == samples["image_tokens"].sum()
    assert f"cost: {cost['prompt_tokens'] + cost['generated_tokens']:,} tokens ({cost['image_tokens']:,} image, " \
           f"{cost['generated_tokens']} generated)" in done.stdout


def test_a_reading_the_server_refuses_or_whose_images_it_drops_is_refused_at_start_up_in_one_line(
        mock, finmme_data, tmp_path):
    """vLLM's decision endpoint answers 501 for a Qwen-VL model: --served-reading decision is one line
    with the server's answer and the reading that works, before anything is written; an endpoint
    that answers the same whatever the image was shown is refused as dropping the images; one that
    reads vLLM's `images` field is used, and sent the images there (not as `assets`)."""
    server = mock(vllm_routes())
    out = tmp_path / "refused"
    done = _run(server.url, finmme_data, out, "--served-reading", "decision", "--question-type", "single_choice")
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "--served-reading decision" in line]
    assert lines == ["error: --served-reading decision: decision endpoint: POST /systemone: HTTP 501: The model does "
                     "not support the structured decision API; the token logprobs reading works here "
                     "(--served-reading logprobs)"], done.stdout + done.stderr
    assert not out.exists()

    fixed = {"answers": {"answer": {"type": "choice", "probabilities": {c: 0.25 for c in "ABCD"}}},
             "usage": {"input_tokens": 120, "output_tokens": 0}}
    blind = mock(vllm_routes(decision=lambda body, headers: (200, fixed, {})))
    done = _run(blind.url, finmme_data, tmp_path / "blind", "--served-reading", "decision")
    assert done.returncode != 0 and "decision endpoint: the images were dropped: one question shown two different " \
                                    "images got the same answer and 120 prompt tokens both times" in done.stdout + done.stderr

    def sees(body, headers):  # vLLM's field: a list of data URLs; `assets` it would ignore
        images = body.get("images") or []
        letters = "ABCDEFGH"[:len(body["questions"]["answer"]["criteria"])]
        weights = [1.0 + (len(images) and len(images[0]) % (k + 2)) for k in range(len(letters))]
        return 200, {"answers": {"answer": {"type": "choice", "probabilities": {c: w / sum(weights) for c, w in
                                                                               zip(letters, weights)}}},
                     "usage": {"input_tokens": 100 + len(images), "output_tokens": 0}}, {}

    reading = mock(vllm_routes(decision=sees))
    done = _run(reading.url, finmme_data, tmp_path / "decision", "--served-reading", "decision",
                "--question-type", "single_choice")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    decisions = [body for path, body in _asked(reading) if path == "/v1/systemone"]
    assert decisions and all("assets" not in body and body["images"][0].startswith("data:image/png;base64,")
                             for body in decisions)
    samples = pd.read_parquet(tmp_path / "decision" / "samples.parquet")
    assert (samples["error"] == "").all() and set(samples["read_by"]) == {"decision endpoint"}


def test_a_constrained_run_the_server_cannot_read_is_refused_before_any_question_is_sent(mock, finmme_data, tmp_path):
    """A server whose only reading is its decision endpoint (transformers serve) reads single choices:
    a constrained FinMME run with sets and numbers is refused in one line naming why and the protocol
    that reads them — no question is left unasked and scored wrong; single choices alone run."""
    def decision(body, headers):
        assets = body.get("assets") or {}
        letters = "ABCDEFGH"[:len(body["questions"]["answer"]["criteria"])]
        first = 0.4 + 0.1 * (len(json.dumps(assets)) % 3)
        rest = (1 - first) / (len(letters) - 1)
        return 200, {"answers": {"answer": {"probabilities": {c: first if k == 0 else rest
                                                              for k, c in enumerate(letters)}}},
                     "usage": {"input_tokens": 90 + len(json.dumps(assets)) % 7, "output_tokens": 0}}, {}

    server = mock({("GET", "/v1/models"): models(("org/tiny", "org")), ("POST", "/v1/systemone"): decision})
    out = tmp_path / "mixed"
    done = _run(server.url, finmme_data, out)
    assert done.returncode != 0 and not out.exists()
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "cannot be read" in line]
    assert len(lines) == 1, done.stdout + done.stderr
    assert "multi-answer sets and numbers (the numeric grammar) cannot be read from this served model under the " \
           "constrained protocol" in lines[0] and lines[0].endswith("--protocol official generates and reads them")
    assert "sets and numbers need the log-probabilities of given tokens" in lines[0]
    assert _asked(server) == []
    done = _run(server.url, finmme_data, tmp_path / "single", "--question-type", "single_choice")
    assert done.returncode == 0, done.stderr[-2000:]
    samples = pd.read_parquet(tmp_path / "single" / "samples.parquet")
    assert (samples["error"] == "").all() and (samples["answer"] == "A").all()
    assert set(samples["read_by"]) == {"decision endpoint"} and samples["prompt_tokens"].notna().all()


def test_token_logprobs_are_read_by_id_and_a_missing_id_is_an_error():
    """vLLM lists the sampled token first, then each id asked for once: read by id, not position."""
    scores = rule_logprobs("")
    entries = [{"token": f"token_id:{i}", "logprob": scores[i]} for i in (101, 100, 102, 101)]
    answer = {"choices": [{"logprobs": {"content": [{"token": "token_id:101", "top_logprobs": entries}]}}]}
    assert token_logprobs(answer, [100, 101, 102]) == {100: -6.0, 101: -0.1, 102: -6.0}
    with pytest.raises(ServedError, match=r"no log-probability for token ids \[103\] \(it ignores logprob_token_ids\)"):
        token_logprobs(answer, [100, 103])
    with pytest.raises(ServedError, match="no log-probabilities of token ids"):
        token_logprobs({"choices": [{"message": {"content": "B"}}]}, [100])


def test_usage_counts_read_every_shape_and_leave_what_is_not_reported_unknown():
    details = {"prompt_tokens": 118, "completion_tokens": 1,
               "prompt_tokens_details": {"cached_tokens": 0, "multimodal_tokens": {"image": 16}}}
    assert usage_counts({"usage": details}) == (118, 16, 1)
    text_only = {**details, "prompt_tokens_details": {"cached_tokens": 0, "multimodal_tokens": None}}
    assert usage_counts({"usage": text_only}) == (118, 0, 1)
    assert usage_counts({"usage": {"prompt_tokens": 98, "completion_tokens": 4, "prompt_tokens_details": None}}) \
        == (98, None, 4)
    assert usage_counts({"usage": {"input_tokens": 321, "output_tokens": 0}}) == (321, None, 0)
    assert usage_counts({"answers": {}}) == (None, None, None)
