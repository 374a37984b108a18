"""`finbench run --config FILE` and `finbench sweep --config FILE` (issue 53): a run from a YAML or a
TOML file, a flag overriding the file, a `runs:` list (one folder per entry, a failed entry reported
and the others run), each run folder's config.yaml rerunning its run from the cache, --print-config,
and every bad file refused in one line before anything loads.

Runs are the tiny random Qwen2.5-VL on the synthetic FinMME set (tests/conftest.py), on the CPU;
what is asserted is read back from results.json and samples.parquet, never from the code that wrote it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def base(tiny_qwen_dir, synthetic_parquet) -> dict:
    """The options every tiny run here shares, as a file writes them."""
    return {"model": str(tiny_qwen_dir), "data": str(synthetic_parquet), "dtype": "float32", "device": "cpu",
            "bootstrap": 0, "progress": False}


def _yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def _one_error_line(done) -> str:
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (done.stdout, done.stderr)
    return " ".join(lines[0].split())


def test_a_yaml_config_runs_and_a_flag_given_overrides_the_file(tmp_path, base):
    out = tmp_path / "run"
    config = _yaml(tmp_path / "run.yaml", {**base, "limit": 3, "out": str(out), "max-new-tokens": 5,
                                           "gen_kwargs": {"max_new_tokens": 4, "temperature": 0}})
    done = cli("run", "--config", str(config), "--limit", "2", "--numeric-budget", "6")
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = _results(out)["config"]
    assert recorded["limit"] == 2 and recorded["numeric_budget"] == 6  # the command line over the file
    assert (recorded["dtype"], recorded["device"], recorded["bootstrap"], recorded["max_new_tokens"]) == \
        ("float32", "cpu", 0, 5)  # the file over the defaults, a key with dashes too
    assert recorded["gen_kwargs"] == [["max_new_tokens", 4], ["temperature", 0.0]]
    assert len(pd.read_parquet(out / "samples.parquet")) == 2
    written = yaml.safe_load((out / "config.yaml").read_text())
    assert written["limit"] == 2 and written["gen_kwargs"] == {"max_new_tokens": 4, "temperature": 0.0}
    assert written["out"] == str(out.resolve()) and "sized" not in written


def test_a_toml_config_runs(tmp_path, base):
    out = tmp_path / "run"
    lines = [f"{key} = {json.dumps(value)}" for key, value in {**base, "limit": 2, "out": str(out)}.items()]
    config = tmp_path / "run.toml"
    config.write_text("\n".join([*lines, 'question_type = ["single_choice", "multiple_choice"]']) + "\n")
    done = cli("run", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = _results(out)["config"]
    assert recorded["limit"] == 2 and recorded["question_types"] == ["single_choice", "multiple_choice"]
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) == 2 and set(samples["kind"]) <= {"single", "multi"}


def test_the_run_folders_config_yaml_reruns_it_from_the_cache(tmp_path, base, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = ["--model", base["model"], "--data", base["data"], "--dtype", "float32", "--device", "cpu",
             "--bootstrap", "0", "--no-progress", "--limit", "3", "--system-prompt", "Answer briefly.",
             "--domain", "Banking", "--domain", "Stock Market", "--question-type", "single_choice",
             "--question-type", "multiple_choice", "--question-type", "numerical", "--out", "runs/first"]
    printed = cli("run", *flags, "--print-config")
    assert printed.returncode == 0 and not Path("runs").exists(), printed.stderr  # printed, nothing ran
    first = cli("run", *flags)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = tmp_path / "runs" / "first"
    before = _results(folder)
    assert before["n_computed"] == before["n_questions"] == 3
    written = yaml.safe_load((folder / "config.yaml").read_text())
    assert yaml.safe_load(printed.stdout) == written  # what --print-config printed is what the run wrote
    assert before["config"]["sized"] and all(written[key] is None for key in before["config"]["sized"])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the config names the folder wholly: it reruns the same run from anywhere
    again = cli("run", "--config", str(folder / "config.yaml"))
    assert again.returncode == 0, again.stderr[-3000:]
    after = _results(folder)
    assert (after["n_cached"], after["n_computed"]) == (3, 0)  # every answer from the cache
    assert after["throughput"]["all_from_cache"] is True
    assert {k: v for k, v in after["config"].items() if k != "out"} == \
        {k: v for k, v in before["config"].items() if k != "out"}
    assert not (elsewhere / "runs").exists()


def test_a_runs_list_runs_each_entry_into_its_own_folder_and_one_failure_does_not_stop_the_others(tmp_path, base):
    top = tmp_path / "study"
    entries = [{"protocol": "constrained", "out": str(tmp_path / "constrained")},
               {"protocol": "official", "max_new_tokens": 2}]
    config = _yaml(tmp_path / "study.yaml", {**base, "limit": 2, "out": str(top), "runs": entries})
    done = cli("run", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    named = top / "protocol-official_max_new_tokens-2"  # an entry without its own out: named by its settings
    constrained, official = _results(tmp_path / "constrained"), _results(named)
    assert (constrained["protocol"], official["protocol"]) == ("constrained", "official")
    assert official["config"]["max_new_tokens"] == 2 and constrained["config"]["max_new_tokens"] is None
    assert constrained["config"]["limit"] == official["config"]["limit"] == 2  # the shared defaults
    assert [p.name for p in top.iterdir()] == [named.name]

    # a broken entry between them: reported, the others still run (from the cache), exit code 1
    broken = {"protocol": "official", "data": str(tmp_path / "no-such.parquet"), "out": str(tmp_path / "broken")}
    config = _yaml(tmp_path / "study.yaml", {**base, "limit": 2, "out": str(top), "runs": [entries[0], broken,
                                                                                            entries[1]]})
    done = cli("run", "--config", str(config))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no-such.parquet: no such file" in done.stderr and not (tmp_path / "broken").exists()
    assert re.search(r"1 of 3 runs failed: run 2 \(\S*broken\)", " ".join(done.stderr.split())), done.stderr
    assert _results(tmp_path / "constrained")["n_cached"] == _results(named)["n_cached"] == 2


def test_print_config_of_a_sweep_and_of_a_runs_list_is_a_config_that_runs(tmp_path, base):
    sweep = _yaml(tmp_path / "sweep.yaml", {**base, "quant": ["none", "8bit"], "limit": 2, "out": str(tmp_path / "s")})
    done = cli("sweep", "--config", str(sweep), "--print-config", "--think-budget", "0")
    assert done.returncode == 0, done.stderr
    printed = yaml.safe_load(done.stdout)
    assert printed["quant"] == ["none", "8bit"] and printed["limit"] == 2 and printed["model"] == base["model"]
    assert "protocol" not in printed  # only what `finbench sweep` takes
    assert not (tmp_path / "s").exists()
    again = _yaml(tmp_path / "again.yaml", printed)
    assert cli("sweep", "--config", str(again), "--print-config").stdout == done.stdout

    runs = _yaml(tmp_path / "runs.yaml", {**base, "out": str(tmp_path / "r"),
                                          "runs": [{"limit": 1}, {"limit": 2, "protocol": "official"}]})
    done = cli("run", "--config", str(runs), "--print-config")
    assert done.returncode == 0, done.stderr
    entries = yaml.safe_load(done.stdout)["runs"]
    assert [(e["limit"], e["protocol"], e["out"]) for e in entries] == \
        [(1, "constrained", str(tmp_path / "r" / "limit-1")),
         (2, "official", str(tmp_path / "r" / "limit-2_protocol-official"))]
    assert not (tmp_path / "r").exists()


BAD_FILES = [  # (file name, its text, extra arguments, what the one line says)
    ("typo.yaml", "model: m\nquantt: 8bit\n", [], "typo.yaml: unknown key 'quantt'; the nearest option is 'quant'"),
    ("typo.yaml", "model: m\nthink-budgett: 2\n", [], "unknown key 'think-budgett'; the nearest option is "
                                                     "'think-budget'"),
    ("typo.yaml", "model: m\nquantization: 8bit\n", [], "unknown key 'quantization'; the nearest option is 'quant' "),
    ("type.yaml", "model: m\nlimit: ten\n", [], "type.yaml: limit: expected an integer, got 'ten'"),
    ("type.yaml", "model: m\nlimit: 2.5\n", [], "limit: expected an integer, got 2.5"),
    ("type.yaml", "model: m\nfast_paths: 1\n", [], "fast_paths: expected true or false, got 1"),
    ("type.yaml", "model: m\ndomain: [[a]]\n", [], "domain: expected a list of text values"),
    ("type.toml", 'model = "m"\nrequest_timeout = "long"\n', [], "request_timeout: expected a number, got 'long'"),
    ("twice.yaml", "model: m\nmax_new_tokens: 3\nmax-new-tokens: 4\n", [], "max_new_tokens is given twice"),
    ("bad.yaml", "model: m\nlimit: [1, 2\nquant: none\n", [], "bad.yaml: bad YAML at line 3, column 6: expected ',' or ']'"),
    ("bad.yaml", "model: m\n  limit: 2\n", [], "bad.yaml: bad YAML at line 2, column 8: mapping values are not "
                                               "allowed here"),
    ("bad.toml", 'model = "m"\nlimit = \n', [], "bad.toml: bad TOML: Invalid value (at line 2, column 9)"),
    ("list.yaml", "- model: m\n", [], "list.yaml: expected a mapping of options (key: value), found a list"),
    ("empty.yaml", "", [], "empty.yaml: the file is empty"),
    ("runs.yaml", "model: m\nruns: {limit: 2}\n", [], "runs: expected a list of mappings, one per run"),
    ("runs.yaml", "model: m\nruns: [{limit: 2}, {limitt: 3}]\n", [], "runs entry 2: unknown key 'limitt'; the "
                                                                       "nearest option is 'limit'"),
    ("runs.yaml", "model: m\nruns: [{limit: 2}, {limit: 3}]\n", ["--out", "x"], "--out with a runs: list would put "
                                                                               "every run into one folder"),
    ("runs.yaml", "model: m\nruns: [{out: a}, {out: a}]\n", [], "runs entries share the folder a"),
]


@pytest.mark.parametrize("name, text, extra, message", BAD_FILES, ids=[m[:30] for *_, m in BAD_FILES])
def test_a_bad_config_file_is_one_line_naming_what_is_wrong(tmp_path, monkeypatch, name, text, extra, message):
    monkeypatch.chdir(tmp_path)
    Path(name).write_text(text)
    line = _one_error_line(cli("run", "--config", name, *extra))
    assert line.startswith(f"error: --config {name}") and message in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing written


def test_a_missing_config_file_and_a_sweep_key_sweep_does_not_take(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _one_error_line(cli("run", "--config", "nowhere.yaml")) == "error: --config nowhere.yaml: no such file"
    Path("sweep.yaml").write_text("models: [a, b]\nprotocol: official\n")  # run takes --protocol, sweep does not
    line = _one_error_line(cli("sweep", "--config", "sweep.yaml"))
    assert "sweep.yaml: unknown key 'protocol'" in line
    Path("sweep.yaml").write_text("models: [a, b]\nquant: [none, 3bit]\n")  # a value: the option's own check
    assert "--quant 3bit: expected one of" in _one_error_line(cli("sweep", "--config", "sweep.yaml"))


def test_a_bad_config_file_is_refused_before_torch_is_imported(tmp_path):
    from test_startup_fast import _probe

    (tmp_path / "typo.yaml").write_text("model: m\nquantt: 8bit\n")
    (tmp_path / "check.yaml").write_text("model: m\nquant: 3bit\n")
    for name, message in (("typo.yaml", "unknown key 'quantt'"), ("check.yaml", "--quant 3bit: expected one of")):
        result, stderr, _ = _probe("run", "--config", name, cwd=tmp_path)
        assert result["code"] == 2 and message in stderr, stderr
        assert result["heavy"] == [], f"imported {result['heavy']} before refusing"


def test_the_docs_config_examples_are_configs_of_their_commands():
    """Every YAML block of docs/config.md (and the README) whose first line names its command
    (`# finbench run --config FILE`) is a file that command takes: known keys, values of their types."""
    import typer.main

    from finbench.cli import app
    from finbench.cli.config_file import plan

    group = typer.main.get_command(app)
    checked = 0
    for page in (ROOT / "docs" / "config.md", ROOT / "README.md"):
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S):
            named = re.match(r"# finbench (run|sweep) --config (\S+)", block)
            if named:
                path = Path("/nonexistent") / named.group(2)
                document = yaml.safe_load(block)
                command = group.commands[named.group(1)]
                shared, entries = _plan_text(plan, path, command, document)
                assert shared or entries, (page.name, block)
                checked += 1
    assert checked >= 4  # a single-GPU run, a quantization sweep, thinking vs instruct, a runs: list


def _plan_text(plan, path, command, document):
    """`plan` of a document as if read from `path` (the docs' files exist only on the page)."""
    from unittest import mock

    with mock.patch("finbench.cli.config_file.read_file", return_value=dict(document)):
        return plan(str(path), command.params, command.declared(), {})
