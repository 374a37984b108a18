"""A served model (models/served.py) against a REAL `transformers serve` on 127.0.0.1, serving the
same tiny checkpoint the in-process runs load: greedy generated answers identical to finbench's
own generation, decision-endpoint probabilities equal to transformers' decision pipeline run
in-process on the same requests, reruns from the cache, and a server killed mid-run."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import ENV, cache_rows, cli, finmme_request
from served_server import start_server

from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark

pytestmark = pytest.mark.slow
LIMIT = 8
GENERATION = ("--max-new-tokens", "24")  # greedy answers of 24 tokens: long enough to differ, quick on a CPU


@pytest.fixture(scope="session")
def server(tiny_qwen_dir, tmp_path_factory):
    """`transformers serve` of the sharpened tiny Qwen2.5-VL, for the whole session; stopped by pid."""
    started = start_server(tiny_qwen_dir, tmp_path_factory.mktemp("serve") / "server.log")
    yield started
    started.stop()


def _run(url, data, out, *extra, limit=LIMIT):
    return cli("run", "--model", url, "--benchmark", "finmme", "--data", str(data), "--out", str(out),
               "--limit", str(limit), "--bootstrap", "0", "--no-progress", *extra)


def _results(out):
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def official_served(server, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("served") / "official"
    done = _run(server.url, synthetic_parquet, out, "--protocol", "official", *GENERATION)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def official_in_process(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """finbench's own greedy generation, one row per batch (no padding: the server pads nothing)."""
    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), protocol="official", limit=LIMIT,
                       batch_size=1, max_new_tokens=24, dtype="float32", device="cpu", bootstrap=0,
                       out=str(tmp_path_factory.mktemp("local") / "local-official"))
    return run_benchmark(config, tiny_model, show_progress=False)


def _without_special_tokens(text: str, tokenizer) -> str:
    """transformers serve parses a Qwen reply from its decode WITH special tokens (its response
    template), so a special token the random model emits mid-text (<|video_pad|>) stays in the
    message; finbench's own decode skips them. Everything else must be equal."""
    for token in tokenizer.all_special_tokens + [t.content for t in tokenizer.added_tokens_decoder.values() if t.special]:
        text = text.replace(token, "")
    return text


def test_greedy_official_answers_equal_in_process_generation(official_served, official_in_process, tiny_model):
    samples = pd.read_parquet(official_served / "samples.parquet")
    assert (samples["error"] == "").all(), samples["error"].tolist()
    assert samples["raw_output"].str.len().gt(0).all()
    served = [_without_special_tokens(text, tiny_model.tokenizer) for text in samples["raw_output"]]
    assert served == official_in_process.samples["raw_output"].tolist()
    assert samples["answer"].tolist() == official_in_process.samples["answer"].tolist()
    import jsonschema

    import finbench

    schema = json.loads((Path(finbench.__file__).parent / "report" / "results.schema.json").read_text())
    jsonschema.validate(_results(official_served), schema)
    fingerprint = _results(official_served)["fingerprint"]
    assert fingerprint["served_model"] and fingerprint["generation_endpoint"] == "/v1/chat/completions"
    assert fingerprint["weights"].startswith("not fingerprinted")


def test_a_rerun_is_all_cache_hits(official_served, server, synthetic_parquet):
    before = pd.read_parquet(official_served / "samples.parquet")
    done = _run(server.url, synthetic_parquet, official_served, "--protocol", "official", *GENERATION)
    assert done.returncode == 0, done.stderr[-3000:]
    results = _results(official_served)
    assert results["n_cached"] == LIMIT and results["n_computed"] == 0
    pd.testing.assert_series_equal(pd.read_parquet(official_served / "samples.parquet")["raw_output"],
                                   before["raw_output"])


def test_decision_endpoint_probabilities_equal_the_decision_pipeline(server, tiny_qwen_dir, synthetic_parquet,
                                                                      tmp_path):
    """Each single choice read by /v1/systemone equals transformers' DecisionPipeline run here on the
    very request finbench sent (the body built by the adapter's own pure function, replayed)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from transformers.pipelines import DecisionPipeline

    from finbench.benchmarks import finmme
    from finbench.models.served import decision_body, served_row

    out = tmp_path / "decision"
    done = _run(server.url, synthetic_parquet, out, "--question-type", "single_choice", limit=6)
    assert done.returncode == 0, done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet")
    assert (samples["error"] == "").all(), samples["error"].tolist()
    results = _results(out)
    assert results["fingerprint"]["read_by"] == {"single": "decision endpoint"}
    assert set(samples["read_by"]) == {"decision endpoint"}
    assert samples["prompt_tokens"].gt(0).all() and results["cost"]["total"]["prompt_tokens"] > 0  # the usage's
    assert any("prompt differs from finbench's constrained prompt" in note for note in results["notes"])

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen_dir, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(tiny_qwen_dir)
    pipe = DecisionPipeline(model=model, tokenizer=processor.tokenizer, processor=processor)
    questions = finmme.load_questions(synthetic_parquet, question_types=("single_choice",), limit=6)
    for question, (_, row) in zip(questions, samples.iterrows()):
        request = dataclasses.replace(finmme_request(question), n_options=len(question.options))
        body = {k: v for k, v in decision_body("m", served_row(request)).items() if k != "model"}
        expected = pipe(body)["answer"]["probabilities"]
        got = list(row["option_probs"])
        assert got == pytest.approx([expected[c] for c in question.letters], abs=1e-4)
        assert row["answer"] == max(expected, key=expected.get)


def test_a_constrained_finmme_run_is_refused_at_start_up_naming_the_protocol_that_reads_it(server, synthetic_parquet,
                                                                                            tmp_path):
    """transformers serve reads single choices only (its decision endpoint): a constrained FinMME run
    with sets and numbers is refused in one line before any question is sent, naming the protocol
    that reads them — none is left unasked and scored wrong; nothing is written."""
    out = tmp_path / "constrained"
    done = _run(server.url, synthetic_parquet, out, limit=6)  # single, multi and numerical items
    assert done.returncode != 0 and not out.exists()
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "cannot be read" in line]
    assert len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"error: --model {server.url}: multi-answer sets and numbers (the numeric grammar) "
                               "cannot be read") and lines[0].endswith("--protocol official generates and reads them")


def test_the_logprobs_reading_is_refused_at_start_up_with_the_server_s_reason(server, synthetic_parquet, tmp_path):
    """--served-reading logprobs: transformers serve has no /tokenize and refuses finbench's
    continuation of the answer prefix with HTTP 422: one start-up line with its reason and the
    reading that works there, instead of one error per question."""
    out = tmp_path / "logprobs"
    done = _run(server.url, synthetic_parquet, out, "--served-reading", "logprobs", "--question-type", "single_choice")
    assert done.returncode != 0 and not out.exists()
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "--served-reading logprobs" in line]
    assert len(lines) == 1, done.stdout + done.stderr
    assert "top logprobs: POST /chat/completions: HTTP 422: Unexpected fields in the request" in lines[0]
    assert "continue_final_message" in lines[0]
    assert lines[0].endswith("the decision endpoint reading works here (--served-reading decision)")


def test_server_killed_mid_run_stops_in_one_line_and_a_rerun_completes(tiny_qwen_dir, synthetic_parquet,
                                                                       official_served, server, tmp_path):
    """A server that dies mid-run: the run stops with one line and keeps its committed answers; a
    rerun against another server of the same checkpoint (another port: the session's) computes
    only the rest, with the answers of an uninterrupted served run."""
    own = start_server(tiny_qwen_dir, tmp_path / "server.log")
    out = tmp_path / "killed"
    args = ["run", "--model", own.url, "--benchmark", "finmme", "--data", str(synthetic_parquet), "--out", str(out),
            "--limit", str(LIMIT), "--bootstrap", "0", "--no-progress", "--protocol", "official", *GENERATION,
            "--batch-size", "1", "--in-flight", "1"]
    try:
        process = subprocess.Popen([sys.executable, "-m", "finbench.cli", *args], env=ENV, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while cache_rows(out / "cache.sqlite") < 2 and time.time() < deadline and process.poll() is None:
            time.sleep(0.05)
        os.kill(own.process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        own.stop()
    output = stdout + stderr
    assert process.returncode == 1, output[-3000:]
    lines = [line for line in output.splitlines() if "stopped" in line]
    assert len(lines) == 1 and "stopped answering" in lines[0], output[-3000:]
    saved = cache_rows(out / "cache.sqlite")
    assert 2 <= saved < LIMIT
    done = cli(*[server.url if a == own.url else a for a in args])
    assert done.returncode == 0, done.stderr[-3000:]
    results = _results(out)
    assert results["n_cached"] == saved and results["n_computed"] == LIMIT - saved
    resumed = pd.read_parquet(out / "samples.parquet")
    assert (resumed["error"] == "").all()
    assert resumed["raw_output"].tolist() == pd.read_parquet(official_served / "samples.parquet")["raw_output"].tolist()


def test_a_served_judge_extracts_finmmr_cot_answers_as_the_same_checkpoint_in_process(server, tiny_model,
                                                                                      tiny_qwen_dir, tmp_path):
    """--judge http://…: FinMMR's cot answers go to the served judge with the official extraction
    prompt; its verdicts equal those of the same checkpoint judging in-process."""
    from finbench.offline.finmmr_synthetic import demo_data

    data, _ = demo_data(tmp_path / "home")
    runs = {}
    for name, judge in (("served", server.url), ("local", str(tiny_qwen_dir))):
        config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmmr", data=str(data), protocol="cot",
                           out=str(tmp_path / name), device="cpu", dtype="float32", max_pixels=28 * 28 * 4,
                           max_new_tokens=6, bootstrap=0, judge=judge, judge_max_new_tokens=4, batch_size=1)
        runs[name] = run_benchmark(config, tiny_model, show_progress=False)
    served, local = runs["served"], runs["local"]
    assert served.results["errors"]["count"] == 0 and served.results["scores"]["extraction"] == ["judge"]
    assert served.samples["judge_score"].notna().all()
    def replies(column, tokenizer=None):  # the server's reply parser also strips the text's ends
        return [[(_without_special_tokens(r, tokenizer) if tokenizer else r).strip() for r in json.loads(text)]
                for text in column]

    assert replies(served.samples["judge_output"], tiny_model.tokenizer) == replies(local.samples["judge_output"])
    assert served.samples["judge_score"].tolist() == local.samples["judge_score"].tolist()


def test_compare_reports_answer_agreement_and_the_largest_probability_difference(
        official_served, official_in_process, server, tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    """`finbench compare` of an in-process run and a served run of one checkpoint: under the
    official protocol every answer agrees (no probabilities); constrained in-process vs the decision
    endpoint (another prompt) reports the largest option-probability difference, recomputed here."""
    written = tmp_path / "official-compare.json"  # compare writes a file only when asked (--out)
    done = cli("compare", str(official_in_process.out_dir), str(official_served), "--bootstrap", "0", "--out", str(written))
    assert done.returncode == 0, done.stderr[-3000:]
    agreed = json.loads(written.read_text())["agreement"]["official"]
    assert agreed["n"] == LIMIT and agreed["agree"] == LIMIT and agreed["max_prob_diff"] is None
    assert f"same answer on {LIMIT} of {LIMIT}" in done.stdout

    local = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=4, batch_size=1,
                                    question_types=("single_choice",), dtype="float32", device="cpu", bootstrap=0,
                                    out=str(tmp_path / "local")), tiny_model, show_progress=False)
    assert _run(server.url, synthetic_parquet, tmp_path / "served", "--question-type", "single_choice",
                limit=4).returncode == 0
    done = cli("compare", str(tmp_path / "local"), str(tmp_path / "served"), "--bootstrap", "0",
               "--out", str(tmp_path / "compare.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    agreed = json.loads((tmp_path / "compare.json").read_text())["agreement"]["served"]
    served = pd.read_parquet(tmp_path / "served" / "samples.parquet")
    gaps = [max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(local.samples["option_probs"], served["option_probs"])]
    assert agreed["n"] == 4 and agreed["max_prob_diff"] == pytest.approx(max(gaps))
    assert agreed["agree"] == sum(a == b for a, b in zip(local.samples["answer"], served["answer"]))
