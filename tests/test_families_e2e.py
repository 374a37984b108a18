"""Every model family end to end through the command line: `finbench models make-tiny FAMILY DIR`,
then `finbench run --model DIR` on a synthetic FinMME set, asserting on what a user reads —
`samples.parquet` and `results.json`. A family whose bookkeeping raises after decoding (Qwen3-VL
once inherited Qwen2.5-VL's FLOP count and lost every answer) fails here, whatever its unit tests say.

Both commands run in-process through typer's CliRunner (the same `app` the console script calls),
so the test pays for importing torch once, not twice per family."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from finbench.cli import app
from finbench.offline.tiny import TINY_FAMILIES, tiny_family_available

E2E_FAMILIES = [f for f in ("qwen2.5-vl", "qwen3-vl", "qwen3-vl-moe", "qwen3.5", "qwen3.5-moe", "internvl",
                            "deepseek-vl2") if f in TINY_FAMILIES and tiny_family_available(f)]
ADAPTER = {"qwen3.5-moe": "qwen3.5"}  # tiny family -> the adapter family that loads it (default: same name)
N_ITEMS = 24
NUMBER = re.compile(r"-?\d*(\.\d*)?%?")


@pytest.fixture(scope="session")
def e2e_data(tmp_path_factory):
    from finbench.offline.finmme_synthetic import write_parquet

    return write_parquet(tmp_path_factory.mktemp("e2e") / "finmme.parquet", n_items=N_ITEMS, seed=3)


@pytest.fixture(scope="session")
def e2e_gold(e2e_data):
    from finbench.benchmarks import finmme

    return {q.id: q for q in finmme.load_questions(e2e_data)}


@pytest.fixture(scope="session", params=E2E_FAMILIES)
def family_run(request, tmp_path_factory, e2e_data):
    """(family, run folder, CLI result) of one family's tiny model run through the CLI."""
    family = request.param
    root = tmp_path_factory.mktemp(family.replace(".", ""))
    runner = CliRunner()
    built = runner.invoke(app, ["models", "make-tiny", family, str(root / "model")])
    assert built.exit_code == 0, built.output
    done = runner.invoke(app, ["run", "--model", str(root / "model"), "--data", str(e2e_data), "--dtype", "float32",
                               "--device", "cpu", "--batch-size", "8", "--bootstrap", "0", "--no-progress",
                               "--out", str(root / "run")])
    return family, root / "run", done


@pytest.mark.slow
def test_every_item_is_answered_without_errors(family_run, e2e_gold):
    family, out, done = family_run
    assert done.exit_code == 0, f"{family}: {done.output[-3000:]}"
    samples = pd.read_parquet(out / "samples.parquet")
    results = json.loads((out / "results.json").read_text())
    assert len(samples) == N_ITEMS and samples["id"].is_unique and set(samples["id"]) == set(e2e_gold)
    errors = samples.loc[samples["error"] != "", ["id", "error"]]
    assert errors.empty, f"{family}: {errors.head().to_dict('records')}"
    assert results["errors"]["count"] == 0, results["errors"]
    assert results["n_questions"] == N_ITEMS and results["n_computed"] == N_ITEMS
    assert (samples["answer"] != "").all(), samples.loc[samples["answer"] == "", "id"].tolist()


@pytest.mark.slow
def test_answers_lie_within_each_items_options(family_run, e2e_gold):
    family, out, done = family_run
    assert done.exit_code == 0, f"{family}: {done.output[-3000:]}"
    samples = pd.read_parquet(out / "samples.parquet")
    kinds = set()
    for row in samples.itertuples():
        question = e2e_gold[row.id]
        kinds.add(question.kind)
        allowed = question.letters[:len(question.options)]
        if question.kind == "single":
            assert len(row.answer) == 1 and row.answer in allowed, (family, row.id, row.answer, allowed)
        elif question.kind == "multi":
            assert row.answer and set(row.answer) <= set(allowed), (family, row.id, row.answer, allowed)
            assert list(row.answer) == sorted(set(row.answer))
        else:
            assert NUMBER.fullmatch(row.answer), (family, row.id, row.answer)
    assert kinds == {"single", "multi", "numerical"}, "the synthetic set must exercise all three decoders"


@pytest.mark.slow
def test_results_carry_scores_and_throughput(family_run):
    from finbench.models.families import FAMILIES

    family, out, done = family_run
    assert done.exit_code == 0, f"{family}: {done.output[-3000:]}"
    results = json.loads((out / "results.json").read_text())
    scores = results["scores"]
    assert 0.0 <= scores["finscore"] <= 1.0
    assert results["fingerprint"]["family"] == ADAPTER.get(family, family)
    assert results["throughput"]["samples"] == N_ITEMS
    # a family that declares a FLOP count reports one; the others report null ("not counted")
    declared = {f.family: f for f in FAMILIES}[ADAPTER.get(family, family)].capabilities
    flops = results["throughput"]["prefill_flops"]
    assert (flops is not None) == declared.flop_count, results["throughput"]
    assert flops is None or flops > 0.0


@pytest.mark.slow
def test_undeclared_features_fail_at_start_up(family_run, e2e_data):
    """What a family does not declare (device preprocessing, a quantization mode) ends the run at
    start-up with one line and exit code 2, before any work."""
    from finbench.models.families import FAMILIES

    family, out, _ = family_run
    declared = {f.family: f for f in FAMILIES}[ADAPTER.get(family, family)].capabilities
    base = ["run", "--model", str(out.parent / "model"), "--data", str(e2e_data), "--device", "cpu", "--no-progress"]
    runner = CliRunner()
    if not declared.device_preprocessing:
        done = runner.invoke(app, base + ["--device-preprocess", "--out", str(out.parent / "dp")])
        assert done.exit_code == 2 and "--device-preprocess" in done.output, done.output
        assert not (out.parent / "dp" / "samples.parquet").exists()
    # Qwen3.5's MoE checkpoints refuse --quant though the family (dense ones) accepts it
    refused = {"8bit", "4bit"} if family == "qwen3.5-moe" else {"8bit", "4bit"} - set(declared.quantization)
    for mode in sorted(refused):
        done = runner.invoke(app, base + ["--quant", mode, "--out", str(out.parent / "q")])
        assert done.exit_code == 2 and f"--quant {mode}" in done.output, done.output


def test_models_list_shows_what_each_family_declares():
    from finbench.models.families import FAMILIES

    done = CliRunner().invoke(app, ["models", "list"], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[1:-1]]
            for line in done.output.splitlines() if line.startswith("│") and line.split("│")[1].strip()}
    expected = {  # family: (thinking, FLOP count) as the issue and the tests above establish them
        "qwen2.5-vl": ("no", "yes"), "qwen3-vl": ("yes", "yes"), "qwen3-vl-moe": ("yes", "yes"),
        "qwen3.5": ("yes", "yes"), "internvl": ("no", "no")}
    assert set(rows) == {f.family for f in FAMILIES}
    for family, (thinking, flop_count) in expected.items():
        _, model_types, shown_thinking, quant, max_images, device, shown_flops = rows[family]
        assert (shown_thinking, shown_flops) == (thinking, flop_count), family
    assert "qwen3_5_moe" in done.output
    # the checkpoints: one hub id per line, whole even at 80 columns (a table column broke them)
    narrow = CliRunner().invoke(app, ["models", "list"], env={"COLUMNS": "80"})
    listed = {tuple(line.strip().split(": ", 1)) for line in narrow.output.splitlines() if line.startswith("  ")}
    for family in FAMILIES:
        assert family.checkpoints and {(family.family, c) for c in family.checkpoints} <= listed, family.family


def test_make_tiny_help_lists_the_families():
    done = CliRunner().invoke(app, ["models", "make-tiny", "--help"], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    for family in TINY_FAMILIES:
        assert family in done.output
    unknown = CliRunner().invoke(app, ["models", "make-tiny", "qwen4", "/tmp/never-written"])
    assert unknown.exit_code == 2 and "unknown family" in unknown.output


@pytest.mark.slow
def test_qwen3_5_reasons_when_asked_and_answers_directly_otherwise(tmp_path, e2e_data):
    """Qwen3.5 through the CLI with `--think-budget`: the adapter renders the prompt with its
    template's thinking switch on, the runner reasons, closes the block and answers; every row
    still answers within its options. The instruct run (budget 0) records no reasoning."""
    if "qwen3.5" not in E2E_FAMILIES:
        pytest.skip("this transformers has no Qwen3.5")
    runner = CliRunner()
    assert runner.invoke(app, ["models", "make-tiny", "qwen3.5", str(tmp_path / "model")]).exit_code == 0
    base = ["run", "--model", str(tmp_path / "model"), "--data", str(e2e_data), "--dtype", "float32", "--device",
            "cpu", "--limit", "6", "--question-type", "single_choice", "--bootstrap", "0", "--no-progress"]
    thought = runner.invoke(app, base + ["--think-budget", "3", "--out", str(tmp_path / "think")])
    assert thought.exit_code == 0, thought.output[-3000:]
    results = json.loads((tmp_path / "think" / "results.json").read_text())
    samples = pd.read_parquet(tmp_path / "think" / "samples.parquet")
    assert results["errors"]["count"] == 0 and len(samples) == 6
    assert results["thinking"]["opener"] == "<think>\n"
    assert ((samples["reasoning_tokens"] >= 1) & (samples["reasoning_tokens"] <= 3)).all()
    assert samples["answer"].str.fullmatch("[A-N]").all()
    direct = runner.invoke(app, base + ["--out", str(tmp_path / "direct")])
    assert direct.exit_code == 0, direct.output[-3000:]
    plain = json.loads((tmp_path / "direct" / "results.json").read_text())
    assert plain["thinking"] is None and plain["errors"]["count"] == 0
