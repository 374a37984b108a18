"""Issue 37 part 4: the run options are declared once (finbench/config/run_options.py) and everything else
is generated from that table: `finbench run`'s and `finbench sweep`'s flags, `make_config`'s
coercions, the start-up checks and RUN_IDENTITY. RunConfig is split into typed specs, and results.json
still records it flat."""

from __future__ import annotations

import dataclasses

import pytest
import typer.main

from finbench.app.api import RUN_IDENTITY, make_config
from finbench.cli import app
from finbench.config.run_options import RUN_OPTIONS, sweep_flags
from finbench.config.specs import SPEC_OF, SPECS, BatchSpec, LoadSpec, RunConfig
from finbench.studies import study_options

# the fields that are not options of the table: the studies' (their own declarations) and start-up's record
NOT_DECLARED = {"permutations", "image_ablation", "samples", "probes", "sized"}
# results.json's "config": these flat keys, no more, no fewer (data_spec and image_root: read beside --data by
# the benchmarks that declare them, benchmarks/custom)
RECORDED = ["model", "served_model", "api_key_env", "in_flight", "request_timeout", "served_thinking",
            "served_reading", "judge_served_model", "benchmark", "data", "data_spec", "image_root", "protocol", "limit", "domains",
            "question_types", "batch_size", "token_budget", "workers", "dtype", "device", "device_map", "family",
            "quant", "quant_vision", "allow_dequantized", "max_new_tokens", "numeric_budget", "max_pixels",
            "device_preprocess", "compile_vision", "compile_lm", "profile", "fast_paths", "out", "cache", "seed",
            "bootstrap", "revision", "trust_remote_code", "attn_implementation", "chat_template", "system_prompt",
            "gen_kwargs", "log_prompts", "unsafe_sandbox", "judge", "judge_max_new_tokens", "think_budget",
            "permutations", "image_ablation", "samples", "probes", "sized"]


def _params(command: str) -> dict[str, object]:
    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def test_every_option_field_of_run_config_has_exactly_one_declaration_in_its_spec():
    fields = [name for name in RunConfig.flat("m").record() if name not in NOT_DECLARED]
    assert sorted(o.name for o in RUN_OPTIONS) == sorted(fields)  # one each: no field left out, none twice
    for option in RUN_OPTIONS:
        assert SPEC_OF.get(option.name, "") == option.spec, option.name
    assert set(SPEC_OF) == {f.name for spec in SPECS.values() for f in dataclasses.fields(spec)}
    renamed = {o.name: o.cli_flag for o in RUN_OPTIONS if o.cli_flag != "--" + o.name.replace("_", "-")}
    assert renamed == {"domains": "--domain", "question_types": "--question-type",  # the flags as they always were
                       "data_spec": "--spec"}


def test_every_declared_option_is_a_run_flag_with_its_help_and_default():
    params = _params("run")
    for option in RUN_OPTIONS:
        param = params[option.name]
        assert param.help == option.help, option.name
        if option.run:
            assert option.cli_flag in param.opts, (option.name, param.opts)
            assert param.default == (list(option.default) if option.many else option.default) or option.default is ...


def test_sweep_flags_are_exactly_the_sweep_and_axis_options_and_its_own():
    params = _params("sweep")
    declared = {o.name for o in RUN_OPTIONS if (o.sweep or o.axis) and o.name != "model"}
    own = {"model", "models", "progress", "verbose"}
    studied = {o.name for o in study_options(sweep=True)}  # each study's, declared by the study (finbench/studies)
    assert studied and set(params) - {"help"} == declared | own | studied
    assert {o.name for o in sweep_flags()} == declared
    assert params["out"].default == "runs/sweep" and params["quant"].multiple and params["think_budget"].multiple
    assert params["seed"].help == "Bootstrap seed." and params["benchmark"].help == "Benchmark name."


def test_run_identity_is_the_options_declared_identity():
    assert RUN_IDENTITY == tuple(o.name for o in RUN_OPTIONS if o.identity)
    assert set(RUN_IDENTITY) == {"model", "revision", "benchmark", "data", "data_spec", "image_root", "protocol", "quant",
                                 "dtype", "think_budget", "judge", "chat_template", "system_prompt"}


def test_make_config_coerces_each_option_once_and_rejects_an_unknown_one_in_one_line():
    config = make_config("m", "finmme", batch_size="16", domains=["Banking, Loans"], gen_kwargs="temperature=0.5")
    assert config.batching == BatchSpec(batch_size=16)
    assert config.domains == ("Banking, Loans",)  # a domain is taken whole
    assert config.decode.gen_kwargs == (("temperature", 0.5),)
    assert make_config("m", batch_size="auto").batching.batch_size == "auto"
    with pytest.raises(ValueError, match=r"^--batch-size lots: expected a positive integer or 'auto'$"):
        make_config("m", batch_size="lots")
    with pytest.raises(TypeError) as refused:
        make_config("m", "finmme", quantization="8bit")
    assert "\n" not in str(refused.value) and str(refused.value).startswith("unknown option(s) quantization;")


def test_the_config_is_built_read_replaced_and_recorded_by_flat_names():
    config = make_config("m", quant="8bit", seed=3, limit=2, judge="j", permutations=3)  # every study filled in
    assert config.load == LoadSpec(quant="8bit") and config.output.seed == 3 and config.judging.judge == "j"
    assert config.option("quant") == "8bit" and config.option("limit") == 2
    changed = config.replaced(batch_size=4, seed=5, protocol="official")
    assert (changed.batching.batch_size, changed.output.seed, changed.protocol, changed.load) == (4, 5, "official",
                                                                                                 config.load)
    assert sorted(config.record()) == sorted(RECORDED)
    assert config.record()["quant"] == "8bit" and config.record()["permutations"] == 3
    with pytest.raises(TypeError):
        RunConfig.flat("m", quantization="8bit")


def test_a_bad_declared_value_is_refused_by_its_declarations_check():
    from finbench.runner.startup import validate_options

    for options, message in [({"device": "gpu"}, "--device gpu: expected auto"),
                             ({"in_flight": 0}, "--in-flight 0: must be at least 1"),
                             ({"served_reading": "guess"}, "--served-reading guess: expected auto, logprobs, decision"),
                             ({"quant_vision": True}, "--quant-vision applies with --quant")]:
        with pytest.raises(ValueError, match=message):
            validate_options(make_config("m", "finmme", **options))
