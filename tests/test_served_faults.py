"""What a real `transformers serve` cannot produce, replayed by a small HTTP server on 127.0.0.1:
429s and 5xx before an answer, a server that is not there, several served models, an API key, and
SGLang's chat-completion top logprobs (the OpenAI shape SGLang and llama.cpp document:
choices[0].logprobs.content[0].top_logprobs = [{token, logprob, bytes}, …]). vLLM's readings:
tests/test_served_readings.py (replayed) and tests/test_vllm.py (a real vLLM)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import ENV, cache_rows, cli
from served_server import free_port, image_usage, mock, models, vllm_routes  # noqa: F401 (mock: a fixture)

from finbench.models.contract import ModelUnavailable
from finbench.models.served import load_served, logprobs_of_letters
from finbench.models.served_client import ClientSettings, ServedClient, ServedError
from finbench.models.served_engines import PROBE_QUESTION


def test_429_and_5xx_are_retried_with_backoff_then_answered(mock):
    answers = iter([(429, {"error": {"message": "slow down"}}, {"retry-after": "0"}),
                    (503, {"detail": "busy"}, {}), (200, {"ok": 1}, {})])
    server = mock({("POST", "/v1/x"): lambda body, headers: next(answers)})
    client = ServedClient(server.url, ClientSettings(in_flight=1, timeout=5, retries=3, backoff=0.01))
    assert client.post("/x", {"a": 1}) == {"ok": 1}
    assert len(server.requests) == 3


def test_a_request_refused_after_its_retries_is_that_question_s_error(mock):
    server = mock({("POST", "/v1/x"): lambda body, headers: (500, {"detail": "boom"}, {}),
                   ("POST", "/v1/bad"): lambda body, headers: (400, {"detail": "bad image\nsecond line"}, {})})
    client = ServedClient(server.url, ClientSettings(in_flight=1, timeout=5, retries=2, backoff=0.01))
    with pytest.raises(ServedError, match="HTTP 500 after 3 tries"):
        client.post("/x", {})
    with pytest.raises(ServedError, match=r"HTTP 400: bad image$"):  # not retried; first line only
        client.post("/bad", {})
    assert len(server.requests) == 4


def test_no_server_is_model_unavailable_and_a_start_up_line():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = ServedClient(url, ClientSettings(in_flight=1, timeout=2, retries=1, backoff=0.01))
    with pytest.raises(ModelUnavailable, match="stopped answering"):
        client.post("/chat/completions", {})
    with pytest.raises(ValueError, match="no server answers there"):
        load_served(url)


def test_several_served_models_are_refused_naming_them_and_one_is_picked(mock):
    server = mock({("GET", "/v1/models"): models(("org/a", "vllm"), ("org/b", "vllm"))})
    with pytest.raises(ValueError, match=r"^--model http://\S+ serves several models \(org/a, org/b\); name one with "
                                         r"--served-model$"):
        load_served(server.url)
    with pytest.raises(ValueError, match=r"^--judge \S+ serves several models .*--judge-served-model$"):
        load_served(server.url, role="--judge")
    with pytest.raises(ValueError, match="--served-model org/c: .* serves org/a, org/b"):
        load_served(server.url, served_model="org/c")
    server.routes.update({k: v for k, v in vllm_routes().items() if k[1] != "/v1/models"})
    model = load_served(server.url, served_model="org/b")
    assert (model.model_id, model.reading, model.in_flight) == ("org/b", "token logprobs", 64)
    # a vLLM server is asked what it serves, then probed: its answer tokens' ids, then one question, two images
    paths = [path for _, path, _, _ in server.requests]
    assert paths.count("/v1/models") == 4 and paths.count("/v1/chat/completions") == 2
    assert set(paths) == {"/v1/models", "/tokenize", "/v1/chat/completions"}


def test_the_reading_can_be_named_for_a_server_that_does_not_say_what_it_is(mock):
    """A server behind a gateway lists itself as someone else: --served-reading logprobs reads its
    top logprobs; a reading the server has no endpoint for is one start-up line naming its answer
    and the reading that works; "auto" finds the one that works."""
    def chat(body, headers):
        return 200, _top([("A", -0.5), ("B", -1.0)], body), {}

    server = mock({("GET", "/v1/models"): models(("org/a", "gateway")), ("POST", "/v1/chat/completions"): chat})
    model = load_served(server.url, reading="logprobs")
    assert model.reading == "top logprobs" and model.capabilities.constrained == ("single",)
    with pytest.raises(ValueError, match=r"^--served-reading decision: decision endpoint: POST /systemone: HTTP 404: "
                                         r"Not Found; the top logprobs reading works here \(--served-reading logprobs\)$"):
        load_served(server.url, reading="decision")
    assert load_served(server.url).reading == "top logprobs"
    silent = mock({("GET", "/v1/models"): models(("org/a", "gateway")),
                   ("POST", "/v1/chat/completions"): lambda body, headers: (200, {"choices": [{"message": {}}]}, {})})
    assert load_served(silent.url).reading is None  # auto: nothing here returns option probabilities
    assert load_served(silent.url).capabilities.constrained == ()


def _top(pairs, body=None):
    """An SGLang chat completion with one generated token and its top log-probabilities (the usage
    of `body`'s images: the start-up probe sees them read)."""
    entries = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in pairs]
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": pairs[0][0]},
                         "logprobs": {"content": [{"token": pairs[0][0], "logprob": pairs[0][1],
                                                   "bytes": list(pairs[0][0].encode()), "top_logprobs": entries}]},
                         "finish_reason": "length"}],
            "usage": image_usage(body) if body else {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


def test_logprobs_combine_both_spellings_and_a_missing_option_is_an_error():
    answer = _top([(" B", -0.5), ("A", -1.5), ("B", -2.0), (" A", -3.0), ("C", -4.0), ("\n", -5.0)])
    got = logprobs_of_letters(answer, 3)
    expected = [math.log(math.exp(-1.5) + math.exp(-3.0)), math.log(math.exp(-0.5) + math.exp(-2.0)), -4.0]
    assert got == pytest.approx(expected, abs=1e-9)
    with pytest.raises(ServedError, match="option D not among the 6 most likely first tokens"):
        logprobs_of_letters(answer, 4)
    with pytest.raises(ServedError, match="returned no logprobs"):
        logprobs_of_letters({"choices": [{"message": {"content": "A"}}]}, 2)


def test_an_sglang_shaped_server_answers_a_constrained_run_with_a_key_never_written(mock, tmp_path):
    """finmme single choices through the top-logprobs reading: the request continues finbench's prompt
    (its answer prefix as a final assistant message) with the chart as a data URL; the answer is
    the letter the logprobs favour; the key travels only in the Authorization header (the probe's too)."""
    from finbench.offline.finmme_synthetic import write_parquet

    def chat(body, headers):
        if headers.get("authorization") != "Bearer s3cret-key":
            return 401, {"error": {"message": "bad key"}}, {}
        return 200, _top([("C", -0.2), (" A", -2.5), ("B", -3.0), ("D", -4.0), ("E", -5.0), ("F", -6.0),
                          ("G", -7.0), ("H", -8.0)], body), {}

    server = mock({("GET", "/v1/models"): models(("served/tiny", "sglang")), ("POST", "/v1/chat/completions"): chat})
    data = write_parquet(tmp_path / "finmme.parquet", n_items=12, seed=0)
    out = tmp_path / "run"
    done = cli("run", "--model", server.url, "--data", str(data), "--out", str(out), "--question-type", "single_choice",
               "--limit", "3", "--bootstrap", "0", "--no-progress", "--api-key-env", "SERVED_KEY",
               env={**ENV, "SERVED_KEY": "s3cret-key"})
    assert done.returncode == 0, done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet")
    assert samples["answer"].tolist() == ["C"] * 3 and (samples["error"] == "").all()
    posted = [body for method, path, body, _ in server.requests
              if path == "/v1/chat/completions" and PROBE_QUESTION not in json.dumps(body)]
    assert len(posted) == 3
    body = posted[0]
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["continue_final_message"] is True
    assert body["messages"][-1]["role"] == "assistant"
    assert any(part.get("type") == "image_url" and part["image_url"]["url"].startswith("data:image/png;base64,")
               for part in body["messages"][-2]["content"])
    results = json.loads((out / "results.json").read_text())
    assert results["fingerprint"]["read_by"] == {"single": "top logprobs"}
    assert set(samples["read_by"]) == {"top logprobs"} and samples["image_tokens"].gt(0).all()
    for path in out.rglob("*"):
        if path.is_file():
            assert b"s3cret-key" not in path.read_bytes(), path


def test_options_that_load_weights_or_need_a_server_are_refused_in_one_line(tmp_path):
    done = cli("run", "--model", "http://127.0.0.1:9/v1", "--quant", "8bit", "--dtype", "bfloat16",
               "--out", str(tmp_path / "a"))
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "not for a served model" in line]
    assert len(lines) == 1 and "--quant, --dtype" in lines[0]
    done = cli("run", "--model", "some/model", "--served-model", "x", "--out", str(tmp_path / "b"))
    assert done.returncode != 0 and "--served-model: for a served model" in done.stdout + done.stderr
    done = cli("run", "--model", "http://127.0.0.1:9/v1", "--api-key-env", "NOT_SET_ANYWHERE",
               "--out", str(tmp_path / "c"))
    assert "the environment variable NOT_SET_ANYWHERE is not set" in done.stdout + done.stderr


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background test job starts children with SIGINT ignored


@pytest.mark.slow
def test_ctrl_c_keeps_every_finished_served_answer_of_the_batch_in_flight(mock, tmp_path):
    """One batch of 20 generated answers, one request at a time, each taking 0.2 s: Ctrl-C after
    the fifth request keeps the answers that had come back (committed), says how many, exit 130."""
    from finbench.offline.finmme_synthetic import write_parquet

    def chat(body, headers):
        time.sleep(0.2)
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is A."},
                                  "finish_reason": "stop"}], "usage": {"completion_tokens": 5}}, {}

    server = mock({("GET", "/v1/models"): models(("served/tiny", "local")), ("POST", "/v1/chat/completions"): chat})
    data = write_parquet(tmp_path / "finmme.parquet", n_items=20, seed=0)
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "finbench.cli", "run", "--model", server.url, "--data", str(data),
                                "--out", str(out), "--protocol", "official", "--in-flight", "1", "--batch-size", "20",
                                "--bootstrap", "0", "--no-progress"], env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)
    deadline = time.time() + 120
    asked = lambda: sum(path == "/v1/chat/completions" and "logprobs" not in body for _, path, body, _ in server.requests)
    while asked() < 5 and time.time() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    saved = cache_rows(out / "cache.sqlite")
    assert 4 <= saved < 20
    assert f"interrupted: {saved} of 20 answers saved; rerun the same command to resume" in stderr


def test_an_item_the_server_cannot_read_is_its_error_and_the_others_are_not_asked_twice(mock, tmp_path):
    """One item's logprobs lack an option: that item is an error naming why (not a renormalised
    guess); the batch is retried question by question without sending any request again."""
    from finbench.benchmarks import finmme
    from finbench.offline.finmme_synthetic import write_parquet

    data = write_parquet(tmp_path / "finmme.parquet", n_items=12, seed=0)
    odd = finmme.load_questions(data, question_types=("single_choice",), limit=3)[1]

    def chat(body, headers):
        letters = "ABCDEFGH".replace("B", "") if odd.text in json.dumps(body) else "ABCDEFGH"
        return 200, _top([(c, -1.0 - k) for k, c in enumerate(letters)], body), {}

    server = mock({("GET", "/v1/models"): models(("served/tiny", "sglang")), ("POST", "/v1/chat/completions"): chat})
    out = tmp_path / "run"
    done = cli("run", "--model", server.url, "--data", str(data), "--out", str(out), "--question-type", "single_choice",
               "--limit", "3", "--bootstrap", "0", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet").set_index("id")
    assert samples.loc[odd.id, "error"].startswith("model error: ServedError: option B not among the 7 most likely")
    assert (samples.drop(odd.id)["error"] == "").all() and (samples.drop(odd.id)["answer"] == "A").all()
    # each item asked once: the retry question by question reuses the answers the server gave
    assert sum(path == "/v1/chat/completions" and PROBE_QUESTION not in json.dumps(body)
               for _, path, body, _ in server.requests) == 3
