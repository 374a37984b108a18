"""The Python API and the interface habits users bring from lm-eval / lmms-eval / VLMEvalKit:
`finbench.evaluate/score/compare`, several benchmarks in one run, model and generation
arguments in the cache key, a reproducible results.json, per-sample prompts, quiet output."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers import ENV
from helpers import cli
from helpers import run_cli as finbench_cli

import finbench
from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark

FAMMA_MOCK = Path(__file__).parent / "fixtures" / "famma" / "mock.json"


@pytest.fixture(scope="module")
def cli_run(tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    done = finbench_cli("run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit", "16",
                        "--dtype", "float32", "--device", "cpu", "--bootstrap", "100", "--out", str(out),
                        "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_evaluate_returns_what_the_cli_writes(cli_run, tiny_qwen_dir, synthetic_parquet, tmp_path):
    out, _ = cli_run
    results, samples = finbench.evaluate(str(tiny_qwen_dir), "finmme", data=str(synthetic_parquet), limit=16,
                                         dtype="float32", device="cpu", bootstrap=100, out=tmp_path / "api")
    cli_results = json.loads((out / "results.json").read_text())
    for metric in ("finscore", "accuracy", "domain_accuracy", "p_h"):
        assert results["scores"][metric] == pytest.approx(cli_results["scores"][metric])
    cli_samples = pd.read_parquet(out / "samples.parquet")
    assert list(samples["answer"]) == list(cli_samples["answer"])
    assert list(samples["sample_key"]) == list(cli_samples["sample_key"])  # the same cache keys: one code path
    assert results["provenance"]["command"].startswith(f"finbench.evaluate({str(tiny_qwen_dir)!r}, 'finmme'")
    assert cli_results["provenance"]["command"].startswith("finbench run --model")


def test_evaluate_takes_a_loaded_model_and_rejects_unknown_options(tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                                   cli_run, tmp_path):
    run = finbench.evaluate(tiny_model, data=str(synthetic_parquet), limit=16, bootstrap=0, out=tmp_path / "m")
    cli_samples = pd.read_parquet(cli_run[0] / "samples.parquet")
    assert list(run.samples["answer"]) == list(cli_samples["answer"])
    with pytest.raises(TypeError, match="unknown option.*temprature"):
        finbench.evaluate(tiny_model, data=str(synthetic_parquet), temprature=0.5, out=tmp_path / "x")


def test_score_and_compare_in_python_equal_the_cli(cli_run, tmp_path):
    out, _ = cli_run
    scores = finbench.score(out, bootstrap=0)
    done = cli("score", str(out))
    assert done.returncode == 0, done.stderr
    assert scores["finscore"] == pytest.approx(json.loads((out / "scores_official.json").read_text())["finscore"])
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    comparison = finbench.compare([out, copy], bootstrap=50, out=tmp_path / "cmp.json")
    written = json.loads((tmp_path / "cmp.json").read_text())
    assert comparison["n_shared"] == written["n_shared"] == 16
    assert "flipped" in json.dumps(written) and '"copy"' in json.dumps(written)


def test_two_benchmarks_in_one_run_write_both_folders_and_a_summary(tiny_qwen_dir, synthetic_parquet, tmp_path):
    out = tmp_path / "both"
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finmme,famma",
               "--data", f"finmme={synthetic_parquet}", "--data", f"famma={FAMMA_MOCK}", "--limit", "6",
               "--dtype", "float32", "--device", "cpu", "--bootstrap", "0", "--out", str(out),
               "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["benchmarks"]) == {"finmme", "famma"}
    for name in ("finmme", "famma"):
        results = json.loads((out / name / "results.json").read_text())
        assert results["benchmark"] == name and (out / name / "samples.parquet").exists()
        assert summary["benchmarks"][name]["n_questions"] == results["n_questions"]
        assert summary["benchmarks"][name]["scores"]["accuracy"] == pytest.approx(results["scores"]["accuracy"])
    assert json.loads((out / "famma" / "results.json").read_text())["n_questions"] == 5
    bad = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finmme,famma",
              "--data", str(synthetic_parquet), "--out", str(tmp_path / "bad"), "--no-progress")
    assert bad.returncode == 2 and "BENCHMARK=SOURCE" in bad.stderr
    # a later benchmark's unusable data stops the run before the first benchmark starts
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(synthetic_parquet.read_bytes()[:2000])
    late = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finmme,famma",
               "--data", f"finmme={synthetic_parquet}", "--data", f"famma={truncated}", "--limit", "2",
               "--out", str(tmp_path / "late"), "--no-progress")
    assert late.returncode == 2 and "famma:" in late.stderr and "Traceback" not in late.stderr, late.stderr
    assert not (tmp_path / "late" / "finmme" / "results.json").exists()


@pytest.fixture(scope="module")
def key_of(tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")

    def key(**options) -> str:
        out = folder / f"run{len(list(folder.iterdir()))}"
        config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=1, dtype="float32",
                           device="cpu", bootstrap=0, out=str(out), **options)
        return run_benchmark(config, show_progress=False).samples["sample_key"].iloc[0]

    return key


def test_every_model_and_generation_argument_changes_the_cache_key(key_of, tiny_qwen_dir, tmp_path):
    template = tmp_path / "template.jinja"
    original = json.loads((tiny_qwen_dir / "chat_template.json").read_text())["chat_template"] \
        if (tiny_qwen_dir / "chat_template.json").exists() else (tiny_qwen_dir / "chat_template.jinja").read_text()
    template.write_text(original + "\n")  # one byte more: a different template
    base = key_of()
    assert key_of() == base  # deterministic
    variants = {"revision": dict(revision="v1.0"), "trust_remote_code": dict(trust_remote_code=True),
                "attn_implementation": dict(attn_implementation="eager"),
                "chat_template": dict(chat_template=str(template)), "system_prompt": dict(system_prompt="Be exact.")}
    keys = {name: key_of(**options) for name, options in variants.items()}
    assert base not in keys.values(), keys
    assert len(set(keys.values())) == len(keys), keys
    # generation settings key what is generated (the official protocol's answers), and only that:
    # a letter read from one prefill cannot depend on a generation budget
    official = key_of(protocol="official", max_new_tokens=4)
    assert key_of(protocol="official", max_new_tokens=4, gen_kwargs=(("max_new_tokens", 7),)) != official
    assert key_of(protocol="official", max_new_tokens=5) != official
    assert key_of(gen_kwargs=(("max_new_tokens", 7),)) == base


def test_results_json_validates_against_its_schema_and_records_provenance(cli_run, synthetic_parquet):
    import jsonschema

    out, _ = cli_run
    results = json.loads((out / "results.json").read_text())
    schema = json.loads((Path(finbench.__file__).parent / "report" / "results.schema.json").read_text())
    jsonschema.validate(results, schema)
    provenance = results["provenance"]
    assert provenance["command"].startswith("finbench run --model")
    assert provenance["data"]["files"][str(synthetic_parquet)] == hashlib.sha256(synthetic_parquet.read_bytes()).hexdigest()
    assert provenance["versions"]["torch"] and provenance["versions"]["transformers"]
    broken = {**results, "provenance": {k: v for k, v in provenance.items() if k != "command"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    import pyarrow.parquet as pq

    assert pq.read_schema(out / "samples.parquet").metadata[b"finbench.schema_version"] == b"1.0"


def test_samples_keep_the_prompt_or_its_hash(cli_run, tiny_model, synthetic_parquet, tmp_path):
    out, _ = cli_run
    logged = pd.read_parquet(out / "samples.parquet")
    assert logged["prompt"].str.contains("Question: ").all()
    assert (logged["question"].str.len() > 0).all()
    assert all(len(o) == n for o, n in zip(logged["options"], logged["n_options"]))
    hashed = finbench.evaluate(tiny_model, data=str(synthetic_parquet), limit=16, bootstrap=0, log_prompts=False,
                               out=tmp_path / "hashed").samples
    assert list(hashed["prompt"]) == ["sha256:" + hashlib.sha256(p.encode()).hexdigest() for p in logged["prompt"]]


def test_no_progress_prints_no_progress_bar(cli_run):
    _, done = cli_run
    for mark in ("%|", "━", "Loading weights", "it/s]"):
        assert mark not in done.stderr, done.stderr[-2000:]


def test_system_prompt_reaches_the_model(tiny_model, synthetic_parquet, tmp_path):
    samples = finbench.evaluate(tiny_model, data=str(synthetic_parquet), limit=2, bootstrap=0,
                                system_prompt="You are a careful analyst.", out=tmp_path / "sys").samples
    assert samples["prompt"].str.startswith("<|im_start|>system\nYou are a careful analyst.").all()


@pytest.mark.parametrize("value, message", [("temperature", "key=value"), ("beams=2", "key=value"),
                                            ("top_k=many", "not a int")])
def test_bad_gen_kwargs_are_one_line(value, message, tiny_qwen_dir, tmp_path):
    done = cli("run", "--model", str(tiny_qwen_dir), "--gen-kwargs", value, "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_sampled_generation_repeats_for_the_same_seed(tiny_model, synthetic_parquet, tmp_path):
    def run(name: str, seed: int, **gen):
        return finbench.evaluate(tiny_model, data=str(synthetic_parquet), limit=4, bootstrap=0, protocol="official",
                                 gen_kwargs={"max_new_tokens": 6, **gen}, seed=seed, out=tmp_path / name).samples
    first, again = run("a", 0, temperature=1.5), run("b", 0, temperature=1.5)
    assert list(first["raw_output"]) == list(again["raw_output"])
    others = [list(run(f"s{seed}", seed, temperature=1.5)["raw_output"]) for seed in (1, 2, 3)]
    assert any(o != list(first["raw_output"]) for o in others)  # the seed (and the sampling) is real


def test_the_seed_keys_sampled_answers_and_greedy_ignores_sampling_settings(tiny_model, synthetic_parquet, tmp_path):
    """In one run folder: a sampled rerun with another --seed is recomputed, not read back from
    the cache; top_p without a temperature is greedy decoding, so it keys as greedy does."""
    def run(seed: int, **gen):
        return finbench.evaluate(tiny_model, data=str(synthetic_parquet), protocol="official", limit=3, bootstrap=0,
                                 show_progress=False,
                                 gen_kwargs={"max_new_tokens": 4, **gen}, seed=seed, out=tmp_path / "one",
                                 overwrite=True)

    first = run(0, temperature=1.5)
    again, other = run(0, temperature=1.5), run(1, temperature=1.5)
    assert again.results["n_cached"] == 3 and other.results["n_cached"] == 0
    assert set(other.samples["sample_key"]).isdisjoint(first.samples["sample_key"])
    greedy, top_p = run(0), run(7, top_p=0.9)
    assert top_p.results["n_cached"] == 3 and list(top_p.samples["sample_key"]) == list(greedy.samples["sample_key"])


def test_subpackages_are_attributes_without_importing_torch_up_front():
    import subprocess
    import sys

    code = ("import sys, finbench\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'import finbench loads torch'\n"
            "assert callable(finbench.models.load_model)\n"
            "assert set(finbench.benchmarks.BENCHMARKS) >= {'finmme', 'famma', 'finmtm', 'mme-finance', 'finmmr', "
            "'finchart-bench', 'fcmr'}\n"
            "assert callable(finbench.scoring.score_samples)\n"
            "try:\n    finbench.nothing_here\nexcept AttributeError as err:\n    print('refused:', err)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: module 'finbench' has no attribute 'nothing_here'" in done.stdout


def test_finbench_api_is_the_python_api_where_its_users_import_it():
    """`from finbench.api import make_config, …` and `finbench.api.make_config` keep working now
    that the code lives in finbench/app/api.py: every public name the module had is there, the
    same object (finbench's own modules import from app/api.py)."""
    import finbench.api
    from finbench.app import api

    names = {"SUMMARY_FILE", "MultiRunResult", "benchmark_names", "make_config", "data_sources", "other_run",
             "refuse_other_results", "evaluate", "SUMMARY_PARTS", "SUMMARY_SCALE", "SUMMARY_SCALE_NOTE",
             "summary_file", "run_summary", "score", "compare"}
    assert set(finbench.api.__all__) == names
    assert all(getattr(finbench.api, name) is getattr(api, name) for name in names)
    assert (finbench.evaluate, finbench.score, finbench.compare) == (api.evaluate, api.score, api.compare)


def test_gen_kwargs_and_data_in_their_command_line_forms(tiny_model, synthetic_parquet, tmp_path):
    def keys(name, **options):
        return list(finbench.evaluate(tiny_model, protocol="official", limit=2, bootstrap=0, out=tmp_path / name,
                                      **options).samples["sample_key"])

    mapping = keys("mapping", data=str(synthetic_parquet), gen_kwargs={"max_new_tokens": 3})
    assert keys("string", data=str(synthetic_parquet), gen_kwargs="max_new_tokens=3") == mapping
    assert keys("pairs", data=str(synthetic_parquet), gen_kwargs=[("max_new_tokens", 3)]) == mapping
    assert keys("list", data=[str(synthetic_parquet)], gen_kwargs="max_new_tokens=3") == mapping
    assert keys("named", data=[f"finmme={synthetic_parquet}"], gen_kwargs="max_new_tokens=3") == mapping
    assert keys("path", data=synthetic_parquet, gen_kwargs="max_new_tokens=3") == mapping
    # broken: each is one clear line naming what to write instead
    with pytest.raises(ValueError, match="--gen-kwargs.*key=value"):
        finbench.evaluate(tiny_model, data=str(synthetic_parquet), gen_kwargs="temperature", out=tmp_path / "b1")
    with pytest.raises(TypeError, match=r"gen_kwargs=5: expected a mapping"):
        finbench.evaluate(tiny_model, data=str(synthetic_parquet), gen_kwargs=5, out=tmp_path / "b2")
    with pytest.raises(ValueError, match="BENCHMARK=SOURCE"):
        finbench.evaluate(tiny_model, data=[str(synthetic_parquet), str(synthetic_parquet)], out=tmp_path / "b3")
    with pytest.raises(TypeError, match=r"data=42: expected a path or hub id"):
        finbench.evaluate(tiny_model, data=42, out=tmp_path / "b4")
    assert not any((tmp_path / f"b{i}").exists() for i in range(1, 5))


def test_results_json_has_one_started_in_iso_8601(cli_run):
    import datetime

    out, _ = cli_run
    results = json.loads((out / "results.json").read_text())
    assert "started" not in results and results["schema_version"] == "1.1"
    started = datetime.datetime.fromisoformat(results["provenance"]["started"])
    assert started.tzinfo is not None and json.dumps(results).count('"started"') == 1


def test_an_out_folder_holding_another_runs_results_is_refused_unless_overwrite(tiny_qwen_dir, synthetic_parquet,
                                                                               tmp_path):
    from typer.testing import CliRunner

    from finbench.cli import app

    def run(*extra):
        return CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet),
                                        "--dtype", "float32", "--device", "cpu", "--bootstrap", "0",
                                        "--out", str(out), "--no-progress", *extra], env={"COLUMNS": "300"})

    out = tmp_path / "run"
    first = run("--limit", "2")
    assert first.exit_code == 0, first.output[-2000:]
    before = (out / "results.json").read_bytes()
    refused = run("--limit", "2", "--protocol", "official", "--max-new-tokens", "2")
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert "holds the results of another run (protocol 'constrained' → 'official')" in refused.output
    assert "--overwrite" in refused.output and (out / "results.json").read_bytes() == before
    # the same evaluation again (here: more questions) resumes in place
    more = run("--limit", "4")
    assert more.exit_code == 0 and json.loads((out / "results.json").read_text())["n_cached"] == 2
    replaced = run("--limit", "2", "--protocol", "official", "--max-new-tokens", "2", "--overwrite")
    assert replaced.exit_code == 0 and json.loads((out / "results.json").read_text())["protocol"] == "official"
    with pytest.raises(ValueError, match="holds the results of another run"):
        finbench.evaluate(str(tiny_qwen_dir), data=str(synthetic_parquet), limit=2, out=out)
