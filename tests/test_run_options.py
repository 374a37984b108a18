"""The run options are declared once, each on its RunConfig field (finbench/config/specs.py,
`option(...)`), and everything else is derived from those fields: `finbench run`'s and `finbench
sweep`'s flags, `make_config`'s keywords and coercions, the start-up checks and RUN_IDENTITY.
RunConfig is split into typed specs, and results.json still records it flat.

The flags, `make_config`'s keywords and results.json's `config` keys are pinned against
tests/fixtures/run_flags.json, a snapshot of the command line as it was before the options moved
onto the fields: a flag renamed, lost, or given another help text or default fails here. A new option
adds its line there (the failure prints it)."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import typer.main
from generic_layers import PACKAGE
from typer.testing import CliRunner

from finbench.app.api import RUN_IDENTITY, make_config
from finbench.cli import app
from finbench.config.options import field_options, option, with_options
from finbench.config.run_options import run_options
from finbench.config.specs import BatchSpec, LoadSpec, RunConfig

SNAPSHOT = json.loads((Path(__file__).parent / "fixtures" / "run_flags.json").read_text(encoding="utf-8"))
MAX_OPTION_CONSTRUCTIONS = 5  # outside finbench/studies/ (each study declares its one Option whole)


def _flags(command: str) -> dict[str, dict[str, object]]:
    """Each parameter of a command as the snapshot holds it."""
    flags = {}
    for p in typer.main.get_command(app).commands[command].params:
        default = list(p.default) if isinstance(p.default, (list, tuple)) else p.default
        flags[p.name] = {"opts": list(p.opts), "secondary_opts": list(p.secondary_opts), "help": p.help,
                         "default": default, "required": p.required, "multiple": p.multiple, "is_flag": p.is_flag,
                         "type": p.bare_type()}
    return flags


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_and_sweep_take_the_flags_they_always_took(command):
    flags, pinned = _flags(command), SNAPSHOT[command]
    lost = sorted(set(pinned) - set(flags))
    assert not lost, f"`finbench {command}` lost (or renamed) {lost}"
    new = {name: flags[name] for name in set(flags) - set(pinned)}
    assert not new, f"a new flag of `finbench {command}`: add it to tests/fixtures/run_flags.json: {json.dumps(new)}"
    changed = {name: {k: (v, flags[name][k]) for k, v in entry.items() if flags[name][k] != v}
               for name, entry in pinned.items() if flags[name] != entry}
    assert not changed, f"`finbench {command}` flags changed (pinned, now): {changed}"


def test_make_config_takes_the_keywords_it_always_took():
    with pytest.raises(TypeError) as refused:
        make_config("m", "finmme", quantization="8bit")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("unknown option(s) quantization; known: ")
    assert message.partition("; known: ")[2].split(", ") == SNAPSHOT["make_config"]


def test_results_json_records_the_config_keys_it_always_recorded_in_their_order():
    assert list(make_config("m").record()) == SNAPSHOT["record"]


def _option_constructions() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "studies" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Option":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_no_second_table_restates_the_options():
    """The Option list is derived from the fields: `Option(` is built in a handful of places outside
    the studies, not once per option."""
    assert len(_option_constructions()) <= MAX_OPTION_CONSTRUCTIONS, _option_constructions()


def test_run_options_lists_every_option_with_its_flag_type_default_and_help():
    options = run_options()
    studied = {"permutations", "image_ablation", "samples", "probes"}  # the studies' own (finbench/studies)
    assert {o.name for o in options} == set(SNAPSHOT["make_config"]) - studied - {"sized", "studies"} | {"model",
                                                                                                        "benchmark"}
    for o in options:
        pinned = SNAPSHOT["run"][o.name]
        assert o.cli_flag in pinned["opts"] and o.help == pinned["help"], o.name
        if o.run:  # `run` writes the others itself (several benchmarks, BENCHMARK=SOURCE data)
            assert pinned["type"] == ("list[str]" if o.many else o.kind.__name__), o.name
            assert pinned["default"] == (list(o.default) if o.many else None if o.default is ... else o.default)


@dataclass(frozen=True)
class _Part:
    level: int | None = option(None, "A level.", flag="--toy-level")
    names: tuple[str, ...] = option((), "Names, comma-separated or repeated.")
    note: str = "not an option"


@dataclass(frozen=True)
class _Toy:
    target: str = option(help="What to aim at.", identity=True)
    part: _Part = _Part()
    ratio: float = option(0.5, "A ratio.", sweep=True)
    quiet: bool = option(False, "Say less.")


def test_one_field_with_its_metadata_is_one_option_flag_and_keyword():
    options = field_options(_Toy)
    assert [(o.name, o.kind, o.many, o.default, o.spec) for o in options] == [
        ("target", str, False, ..., ""), ("level", int, False, None, "part"), ("names", str, True, (), "part"),
        ("ratio", float, False, 0.5, ""), ("quiet", bool, False, False, "")]
    assert options[0].identity and options[3].sweep and options[1].cli_flag == "--toy-level"

    toy = typer.Typer()
    seen = {}

    @toy.command()
    @with_options(lambda: field_options(_Toy))
    def go(*, options: dict) -> None:
        seen.update({o.name: o.coerce(options[o.name]) for o in field_options(_Toy)})

    done = CliRunner().invoke(toy, ["--target", "t", "--toy-level", "3", "--names", "a,b", "--quiet"])
    assert done.exit_code == 0, done.output
    assert seen == {"target": "t", "level": 3, "names": ("a", "b"), "ratio": 0.5, "quiet": True}
    with pytest.raises(TypeError, match=r"option\(\): unknown setting\(s\) chek"):
        option(1, "A number.", chek=None)


def test_run_identity_is_the_options_declared_identity():
    assert set(RUN_IDENTITY) == {"model", "revision", "benchmark", "data", "data_spec", "image_root", "protocol",
                                 "quant", "dtype", "think_budget", "judge", "chat_template", "system_prompt"}


def test_make_config_coerces_each_option_once_and_rejects_an_unknown_one_in_one_line():
    config = make_config("m", "finmme", batch_size="16", domains=["Banking, Loans"], gen_kwargs="temperature=0.5")
    assert config.batching == BatchSpec(batch_size=16)
    assert config.domains == ("Banking, Loans",)  # a domain is taken whole
    assert config.decode.gen_kwargs == (("temperature", 0.5),)
    assert make_config("m", batch_size="auto").batching.batch_size == "auto"
    with pytest.raises(ValueError, match=r"^--batch-size lots: expected a positive integer or 'auto'$"):
        make_config("m", batch_size="lots")


def test_the_config_is_built_read_replaced_and_recorded_by_flat_names():
    config = make_config("m", quant="8bit", seed=3, limit=2, judge="j", permutations=3)  # every study filled in
    assert config.load == LoadSpec(quant="8bit") and config.output.seed == 3 and config.judging.judge == "j"
    assert config.option("quant") == "8bit" and config.option("limit") == 2
    changed = config.replaced(batch_size=4, seed=5, protocol="official")
    assert (changed.batching.batch_size, changed.output.seed, changed.protocol, changed.load) == (4, 5, "official",
                                                                                                 config.load)
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
