"""Robustness studies from logits: circular evaluation (--permutations), image ablation
(--image-ablation), majority and prior baselines, and official vs constrained disagreements. The
numbers are checked against hand-built tables and brute-force loops over the run's own files,
never against the scoring code path itself."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from helpers import assert_refused_in_one_line
import torch

import finbench

from finbench.app.api import make_config
from finbench.benchmarks import famma, finmme, finmtm, get_benchmark
from finbench.core.requests import Choose
from finbench.core.types import OPTION_LETTERS
from finbench.offline import famma_synthetic
from finbench.report.schema import SAMPLE_COLUMNS, VARIANT_COLUMNS
from finbench.runner.engine import run_benchmark
from finbench.runner.keys import request_payload, sample_key
from finbench.runner.preprocess import decode_images
from finbench.runner.run_requests import build_requests, render
from finbench.runner.studies import expand
from finbench.scoring.robustness import answer_disagreements, circular_summary, majority_baselines

LIMIT = 8


def _config(tiny_qwen_dir, data, out, **overrides):
    return make_config(model=str(tiny_qwen_dir), benchmark="finmme", data=str(data), out=str(out), dtype="float32",
                     device="cpu", bootstrap=0, **{"limit": LIMIT, **overrides})


def _cli(tiny_qwen_dir, data, out, *extra):
    """`finbench run …` in this process (typer's runner: the command line as parsed, without a
    second start of torch)."""
    from typer.testing import CliRunner

    from finbench.cli import app

    return CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(data), "--out", str(out),
                                    "--limit", str(LIMIT), "--device", "cpu", "--dtype", "float32", "--bootstrap", "0",
                                    "--no-progress", *extra], env={"COLUMNS": "300"})


@pytest.fixture(scope="module")
def studied(tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """`finbench run … --permutations 4 --image-ablation blank` through the CLI, run twice."""
    out = tmp_path_factory.mktemp("studied") / "run"
    first = _cli(tiny_qwen_dir, synthetic_parquet, out, "--permutations", "4", "--image-ablation", "blank")
    assert first.exit_code == 0, first.output[-3000:]
    results = json.loads((out / "results.json").read_text())
    again = _cli(tiny_qwen_dir, synthetic_parquet, out, "--permutations", "4", "--image-ablation", "blank")
    assert again.exit_code == 0, again.output[-3000:]
    return out, first, results, json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def plain(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """The same items without studies, in-process."""
    return run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path_factory.mktemp("plain") / "run"),
                         tiny_model, show_progress=False)


# ---- the run through the CLI ----------------------------------------------------------------------
def test_the_cli_run_writes_the_three_studies_the_reports_and_a_rerun_computes_nothing(studied):
    out, first, results, rerun = studied
    assert {"circular", "image_ablation", "majority_baseline"} <= set(results)
    assert results["circular"]["k"] == 4 and results["circular"]["n"] > 0
    assert set(results["image_ablation"]) == {"blank"} and results["image_ablation"]["blank"]["n"] == LIMIT
    assert results["majority_baseline"]["by_type"]
    html, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    for section in ("majority-baseline", "circular", "image-ablation"):
        assert f'id="{section}"' in html
    for title in ("## Majority and prior baselines", "## Circular evaluation (K = 4)", "## Image ablation"):
        assert title in md
    assert "best prior baseline" in first.output and "circular evaluation (K 4" in first.output
    variants = pd.read_parquet(out / "variants.parquet")
    assert set(VARIANT_COLUMNS) | set(SAMPLE_COLUMNS) <= set(variants.columns)
    assert results["variants"]["n"] == len(variants) and results["variants"]["n_computed"] == len(variants)
    jsonschema.validate(results, json.loads((Path(finbench.__file__).parent / "report" / "results.schema.json").read_text()))
    assert rerun["n_computed"] == 0 and rerun["variants"]["n_computed"] == 0 and rerun["variants"]["n_cached"] == len(variants)
    assert rerun["circular"] == results["circular"] and rerun["image_ablation"] == results["image_ablation"]


def test_samples_stay_those_of_a_run_without_studies(studied, plain):
    out, _, results, _ = studied
    samples = pd.read_parquet(out / "samples.parquet")
    assert results["n_questions"] == LIMIT and list(samples["id"]) == list(plain.samples["id"])
    assert list(samples["sample_key"]) == list(plain.samples["sample_key"])  # the base keys are unchanged
    assert list(samples["answer"]) == list(plain.samples["answer"])
    assert list(samples["correct"]) == list(plain.samples["correct"])
    for a, b in zip(samples["option_probs"], plain.samples["option_probs"]):
        assert np.allclose(list(a), list(b), atol=1e-4)


def test_every_rotation_shows_its_options_rotated_with_the_gold_moved(studied, questions):
    out, _, _, _ = studied
    variants = pd.read_parquet(out / "variants.parquet")
    rotations = variants[variants["study"] == "circular"]
    by_id = {q.id: q for q in questions}
    expected = sum(min(4, len(by_id[i].options)) - 1 for i in pd.unique(rotations["id"]))
    assert len(rotations) == expected and set(rotations["kind"]) <= {"single", "multi"}
    for row in rotations.itertuples():
        base, r = by_id[row.id], row.rotation
        n = len(base.options)
        assert list(row.options) == [base.options[(j + r) % n] for j in range(n)]
        assert sorted(row.options[OPTION_LETTERS.index(c)] for c in row.gold) == \
            sorted(base.options[OPTION_LETTERS.index(c)] for c in base.gold)
        assert all(f"{OPTION_LETTERS[j]}. {row.options[j]}" in row.prompt for j in range(n))
        assert row.variant == f"rotation-{r}" and row.sample_key
    assert rotations["sample_key"].is_unique


def test_circular_numbers_match_a_brute_force_loop_over_the_run_files(studied):
    out, _, results, _ = studied
    samples = pd.read_parquet(out / "samples.parquet").set_index("id")
    variants = pd.read_parquet(out / "variants.parquet")
    rotations = variants[variants["study"] == "circular"]
    all_right, positions, texts, picks = [], [], [], []
    for qid, rows in rotations.groupby("id", sort=False):
        base = samples.loc[qid]
        asked = [(base["answer"], list(base["options"]), base["correct"])] + \
            [(r.answer, list(r.options), r.correct) for r in rows.itertuples()]
        all_right.append(all(c == 1 for _, _, c in asked))
        positions.append(len({a for a, _, _ in asked}) == 1)
        texts.append(len({tuple(sorted(o[OPTION_LETTERS.index(c)] for c in a)) for a, o, _ in asked}) == 1)
        picks += [a for a, _, _ in asked]
    found = results["circular"]
    assert found["n"] == len(all_right)
    assert found["circular_accuracy"] == pytest.approx(np.mean(all_right))
    assert found["position_bias"] == pytest.approx(np.mean(positions))
    assert found["option_consistency"] == pytest.approx(np.mean(texts))
    assert found["pick_rate"]["A"] == pytest.approx(np.mean(["A" in a for a in picks]))


def test_ablation_numbers_match_the_tables_by_hand(studied):
    out, _, results, _ = studied
    samples = pd.read_parquet(out / "samples.parquet")
    blank = pd.read_parquet(out / "variants.parquet").query("ablation == 'blank'")
    found = results["image_ablation"]["blank"]
    base = samples.set_index("id").loc[blank["id"]]
    assert found["accuracy"] == pytest.approx(blank["correct"].mean())
    assert found["base_accuracy"] == pytest.approx(base["correct"].mean())
    if base["correct"].mean():
        assert found["retained_accuracy"] == pytest.approx(blank["correct"].mean() / base["correct"].mean())
    for domain, g in found["by_domain"].items():
        assert g["n"] == int((base["domain"] == domain).sum())
        assert g["ablated"] == pytest.approx(blank.loc[blank["domain"] == domain, "correct"].mean())
        assert g["base"] == pytest.approx(base.loc[base["domain"] == domain, "correct"].mean())


# ---- hand-built cases -----------------------------------------------------------------------------
def _rotated(options, gold, r):
    n = len(options)
    return [options[(j + r) % n] for j in range(n)], "".join(sorted(OPTION_LETTERS[(OPTION_LETTERS.index(g) - r) % n]
                                                                     for g in gold))


def _tables(items, answer):
    """samples and variants frames for `items` = [(id, options, gold, k, domain)]; `answer(id,
    options, gold, r)` → the letters chosen at rotation r; correct = exact letter match."""
    base, rows = [], []
    for qid, options, gold, k, domain in items:
        for r in range(k):
            shown, asked = _rotated(options, gold, r)
            chosen = answer(qid, shown, asked, r)
            row = {"id": qid, "n_options": len(options), "answer": chosen, "gold": asked, "options": shown,
                   "correct": float(chosen == asked), "error": "", "domain": domain, "kind": "single"}
            (base if r == 0 else rows).append(row if r == 0 else {**row, "study": "circular", "rotation": r})
    return pd.DataFrame(base), pd.DataFrame(rows)


ITEMS = [("q1", ["w", "x", "y", "z"], "B", 4, "d1"), ("q2", ["p", "q", "r"], "A", 3, "d1"),
         ("q3", ["s", "t"], "B", 2, "d2")]


def test_a_model_that_always_picks_a_has_position_bias_one_and_circular_accuracy_zero():
    samples, variants = _tables(ITEMS, lambda qid, shown, gold, r: "A")
    found = circular_summary(samples, variants, 4)
    assert found["n"] == 3 and found["position_bias"] == 1.0 and found["circular_accuracy"] == 0.0
    assert found["option_consistency"] == 0.0 and found["pick_rate"]["A"] == 1.0
    assert found["base_accuracy"] == pytest.approx(1 / 3)  # only q2's gold is A as published
    assert found["rotations_per_item"] == {"2": 1, "3": 1, "4": 1}
    assert found["by_domain"]["d1"] == {"n": 2, "base_accuracy": 0.5, "circular_accuracy": 0.0}


def test_a_model_that_follows_the_gold_option_text_has_circular_accuracy_and_consistency_one():
    samples, variants = _tables(ITEMS, lambda qid, shown, gold, r: gold)
    found = circular_summary(samples, variants, 4)
    assert found["circular_accuracy"] == 1.0 and found["option_consistency"] == 1.0
    assert found["position_bias"] == 0.0 and found["base_accuracy"] == 1.0
    # the gold moves: over q1's 4 orders its option sits once at each letter
    assert found["pick_rate"]["D"] == pytest.approx(1 / 9)  # only q1 has a D: one of the 9 answers


def test_a_mixed_case_restated_by_hand():
    """q1 follows the content but misses once (rotation 2: says A), q2 always says B, q3 (multi
    gold AC of 4) follows the content; q4 fails at rotation 1 with an error."""
    items = ITEMS[:2] + [("q3", ["a", "b", "c", "d"], "AC", 3, "d2"), ("q4", ["m", "n"], "A", 2, "d2")]

    def answer(qid, shown, gold, r):
        if qid == "q1":
            return "A" if r == 2 else gold
        return "B" if qid == "q2" else gold

    samples, variants = _tables(items, answer)
    variants.loc[variants["id"] == "q4", ["answer", "correct", "error"]] = ["", 0.0, "model error: boom"]
    found = circular_summary(samples, variants, 4)
    # right in every order: q3 only (q1 misses at r=2, q2 is B always, q4 has an error)
    assert found["circular_accuracy"] == pytest.approx(1 / 4)
    # same letter in every order among the error-free q1, q2, q3: q2 → 1/3; same option: q3 → 1/3
    assert found["n_consistency"] == 3
    assert found["position_bias"] == pytest.approx(1 / 3) and found["option_consistency"] == pytest.approx(1 / 3)
    assert found["base_accuracy"] == pytest.approx(3 / 4)  # q1, q3, q4 right as published
    # q3's answer at rotation 1 is gold AC moved: letters D and B
    assert variants.loc[(variants["id"] == "q3") & (variants["rotation"] == 1), "answer"].item() == "BD"


def test_majority_and_prior_baselines_on_a_hand_made_samples_frame():
    rows = [  # (question_type, kind, options, gold, correct)
        ("single_choice", "single", ["Yes", "No"], "A", 1), ("single_choice", "single", ["No", "Yes"], "B", 1),
        ("single_choice", "single", ["No", "Yes", "Maybe"], "B", 0), ("single_choice", "single", ["Up", "Down"], "A", 0),
        ("single_choice", "single", ["Up", "Down", "Flat"], "C", 0),
        ("multiple_choice", "multi", ["a", "b", "c"], "AC", 1), ("multiple_choice", "multi", ["a", "b", "c"], "AB", 0),
        ("multiple_choice", "multi", ["c", "b", "a"], "AC", 0),
        ("numerical", "numerical", [], "1.5", 1), ("numerical", "numerical", [], "1.50", 0),
        ("numerical", "numerical", [], "2", 0),
        ("open_question", "open", [], "a long text", 1),  # open items: no baseline
    ]
    samples = pd.DataFrame([{"id": f"q{i}", "question_type": t, "kind": k, "options": o, "gold": g, "correct": float(c),
                             "error": ""} for i, (t, k, o, g, c) in enumerate(rows)])
    found = majority_baselines(samples)
    assert found["column"] == "question_type" and found["n"] == 11 and set(found["by_type"]) == \
        {"single_choice", "multiple_choice", "numerical"}
    single = found["by_type"]["single_choice"]
    # gold texts Yes, Yes, Yes, Up, Flat: majority "Yes" 3/5; gold letters A, B, B, A, C: always A 2/5;
    # most frequent gold letter A or B (2 each; the first in letter order wins) 2/5; model 2/5
    assert single["majority_answer"] == "Yes" and single["majority_answer_accuracy"] == pytest.approx(0.6)
    assert single["always_a_accuracy"] == pytest.approx(0.4) and single["most_frequent_position_accuracy"] == pytest.approx(0.4)
    assert single["model_accuracy"] == pytest.approx(0.4) and single["best_baseline"] == "majority_answer"
    assert single["above_best"] == pytest.approx(-0.2)
    multi = found["by_type"]["multiple_choice"]
    # gold texts "a | c", "a | b", "c | a": majority 1/3 ("a | b" first in order); letters AC twice: 2/3; never A alone
    assert multi["most_frequent_position"] == "AC" and multi["most_frequent_position_accuracy"] == pytest.approx(2 / 3)
    assert multi["majority_answer_accuracy"] == pytest.approx(1 / 3) and multi["always_a_accuracy"] == 0.0
    numerical = found["by_type"]["numerical"]
    assert numerical["majority_answer"] == "1.5" and numerical["majority_answer_accuracy"] == pytest.approx(2 / 3)
    assert numerical["always_a_accuracy"] is None and numerical["most_frequent_position_accuracy"] is None
    overall = found["all"]  # each item gets its type's prior: (3 + 1 + 2) / 11 majority, (2 + 0) / 11 always A
    assert overall["majority_answer_accuracy"] == pytest.approx(6 / 11) and overall["always_a_accuracy"] == pytest.approx(2 / 11)
    assert overall["most_frequent_position_accuracy"] == pytest.approx(4 / 11)
    assert overall["model_accuracy"] == pytest.approx(4 / 11) and overall["above_best"] == pytest.approx(-2 / 11)


# ---- an always-A model end to end -------------------------------------------------------------------
class AlwaysA:
    """The tiny model with every single-choice prefill putting letter A first."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def fingerprint(self, **options):
        return {**self._model.fingerprint(**options), "wrapped": "always-A"}

    def score_options(self, inputs, letters):
        scores = self._model.score_options(inputs, letters)
        return torch.where(torch.arange(scores.shape[-1]) == 0, scores.max() + 10.0, scores)


def test_an_always_a_model_end_to_end_has_position_bias_one_and_circular_accuracy_zero(
        tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    config = _config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=6, question_types=("single_choice",),
                     permutations=4)
    result = run_benchmark(config, AlwaysA(tiny_model), show_progress=False)
    found = result.results["circular"]
    assert (result.samples["answer"] == "A").all() and found["n"] == 6
    assert found["position_bias"] == 1.0 and found["circular_accuracy"] == 0.0 and found["option_consistency"] == 0.0
    assert found["pick_rate"]["A"] == 1.0 and found["base_accuracy"] == pytest.approx((result.samples["gold"] == "A").mean())
    assert "image_ablation" not in result.results


# ---- image ablation ---------------------------------------------------------------------------------
def test_ablation_none_shows_no_image_parts_and_blank_and_noise_replace_the_pixels(questions):
    config = make_config("m", "finmme", image_ablation=("none", "blank", "noise"))
    chosen = [q for q in questions if not q.error][:3]
    requests, errors = build_requests(finmme.BENCHMARK, chosen, config, None, None)
    study = expand(finmme.BENCHMARK, chosen, requests, errors, config, None, [])
    assert [(v.base, v.get("ablation")) for v in study.variants] == [(i, m) for m in ("none", "blank", "noise") for i in range(3)]
    for variant, question, request in zip(study.variants, study.questions[3:], study.requests[3:]):
        rendered = render(finmme.BENCHMARK, request.prompt, decode_images(question))
        original = decode_images(chosen[variant.base])[0]
        parts = [p for m in rendered.messages for p in m["content"]]
        if variant.get("ablation") == "none":
            assert question.images == () and rendered.images == () and request.prompt.images == ()
            assert all(p["type"] != "image" for p in parts)
            assert any(chosen[variant.base].text in p.get("text", "") for p in parts)  # the text stays
            continue
        assert [p["type"] for p in parts].count("image") == 1 and len(rendered.images) == 1
        shown = np.asarray(rendered.images[0])
        assert rendered.images[0].size == original.size
        if variant.get("ablation") == "blank":
            assert (shown == 255).all()
        else:
            again = np.asarray(render(finmme.BENCHMARK, request.prompt, decode_images(question)).images[0])
            assert (shown == again).all() and not (shown == np.asarray(original)).all()
            assert 100 < shown.mean() < 155 and shown.std() > 60  # uniform over 0..255
    noise = [np.asarray(render(finmme.BENCHMARK, r.prompt, decode_images(q)).images[0])
             for v, q, r in zip(study.variants, study.questions[3:], study.requests[3:]) if v.get("ablation") == "noise"]
    assert not all((a.shape == b.shape and (a == b).all()) for a, b in zip(noise, noise[1:]))  # seeded per image


def test_each_variant_is_a_request_of_its_own_and_the_base_keys_are_unchanged(questions):
    config = make_config("m", "finmme", permutations=3, image_ablation=("blank", "none"))
    chosen = [q for q in questions if not q.error and q.kind == "single" and len(q.options) >= 3][:2]
    requests, errors = build_requests(finmme.BENCHMARK, chosen, config, None, None)
    study = expand(finmme.BENCHMARK, chosen, requests, errors, config, None, [])
    payload = request_payload(requests[0], chosen[0])
    assert "rotation" not in payload and "ablation" not in payload["prompt"]  # keys of runs without studies
    keys = [sample_key({"m": 1}, "v", r, q) for q, r in zip(study.questions, study.requests)]
    assert len(set(keys)) == len(keys) == 2 + 2 * 2 + 2 * 2
    rotated = [r for r, v in zip(study.requests[2:], study.variants) if v.study == "circular"]
    assert [r.rotation for r in rotated] == [1, 2, 1, 2] and all(isinstance(r, Choose) for r in rotated)


def test_ablated_runs_rerun_identically_and_name_no_image_in_their_prompts(tiny_model, tiny_qwen_dir,
                                                                            synthetic_parquet, tmp_path):
    config = _config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=4, image_ablation=("noise", "none"))
    first = run_benchmark(config, tiny_model, show_progress=False)
    variants = pd.read_parquet(tmp_path / "run" / "variants.parquet")
    assert len(variants) == 8 and set(variants["ablation"]) == {"noise", "none"}
    assert not variants["prompt"][variants["ablation"] == "none"].str.contains("image_pad|vision_start").any()
    assert variants["prompt"][variants["ablation"] == "noise"].str.contains("image_pad").all()
    second = run_benchmark(config.replaced(cache=str(tmp_path / "run" / "cache.sqlite"), out=str(tmp_path / "again")),
                           tiny_model, show_progress=False)
    assert second.results["variants"]["n_computed"] == 0 and second.results["image_ablation"] == first.results["image_ablation"]
    assert list(pd.read_parquet(tmp_path / "again" / "variants.parquet")["answer"]) == list(variants["answer"])


# ---- other benchmarks -------------------------------------------------------------------------------
def test_finmtm_cannot_be_rotated_honestly_and_says_so_in_one_note(tmp_path):
    from test_finmtm import write_fixtures

    questions = [q for q in finmtm.load_questions(str(write_fixtures(tmp_path / "data"))) if not q.error]
    config = make_config(model="m", benchmark="finmtm", permutations=3)
    requests, errors = build_requests(finmtm.BENCHMARK, questions, config, None, None)
    assert any(isinstance(r, Choose) for r in requests)
    notes: list[str] = []
    study = expand(finmtm.BENCHMARK, questions, requests, errors, config, None, notes)
    assert study.variants == [] and len(notes) == 1 and "does not apply to finmtm" in notes[0]
    assert finmtm.BENCHMARK.rotate(next(q for q, r in zip(questions, requests) if isinstance(r, Choose)), 1) is None


def test_famma_choice_items_rotate_in_their_own_prompt(tmp_path):
    # the synthetic item's third option "neither" names the others (asked once, see the test below): "equal"
    records = [dict(r, options=["left", "right", "equal"]) if r["options"] == ["left", "right", "neither"] else r
               for r in famma_synthetic.records(None)]
    path = famma_synthetic.write_parquet(tmp_path / "release_basic.parquet", records)
    questions = [q for q in famma.load_questions(str(path)) if not q.error]
    config = make_config(model="m", benchmark="famma", permutations=2)
    requests, errors = build_requests(famma.BENCHMARK, questions, config, None, None)
    study = expand(famma.BENCHMARK, questions, requests, errors, config, None, [])
    assert study.variants and all(v.get("rotation") == 1 for v in study.variants)
    for variant, question, request in zip(study.variants, study.questions[len(questions):], study.requests[len(questions):]):
        base = questions[variant.base]
        text = "".join(p.get("text", "") for p in request.prompt.messages[-1]["content"])
        assert f"A. {base.options[1]}\n" in text and question.options[0] == base.options[1]
        assert {question.options[OPTION_LETTERS.index(c)] for c in question.gold} == \
            {base.options[OPTION_LETTERS.index(c)] for c in base.gold}


# ---- bad options: one start-up line, exit 2, nothing written ---------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (("--permutations", "1"), "--permutations 1: give 2 or more orders"),
    (("--permutations", "14"), "--permutations 14: the choice items of this run have at most"),
    (("--image-ablation", "blank,blur"), "--image-ablation blank,blur: unknown mode 'blur'"),
])
def test_bad_study_options_fail_at_start_up_in_one_line(tiny_qwen_dir, synthetic_parquet, tmp_path, extra, message):
    assert_refused_in_one_line(_cli(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", *extra), message,
                               tmp_path / "run")


# ---- official vs constrained --------------------------------------------------------------------------
def test_answer_disagreements_on_hand_made_runs():
    constrained = pd.DataFrame({"id": ["a", "b", "c", "d", "e", "f"], "kind": ["single", "multi", "single", "single",
                                                                               "numerical", "single"],
                                "gold": ["A", "AC", "B", "B", "8.81", "C"], "answer": ["A", "AC", "B", "B", "8.81", "A"],
                                "raw_output": [""] * 6, "n_options": [4, 4, 4, 4, 0, 4],
                                "tolerance": [np.nan] * 4 + [0.0, np.nan], "error": [""] * 6, "domain": ["x"] * 6,
                                "question_type": ["single_choice", "multiple_choice", "single_choice", "single_choice",
                                                  "numerical", "single_choice"]})
    official = constrained.assign(answer=["A,", "C, A", "**B**", "D", "8.810%", ""],
                                  raw_output=["Answer: A,", "Answer: C, A", "Answer: **B**", "Answer: D " + "x" * 300,
                                              "Answer: 8.810%", "I cannot tell"])
    found = answer_disagreements([constrained, official], ["c", "o"], get_benchmark("finmme"), official="o")
    # a, b, c, e read alike ('A,' is {A}, 'C, A' is {A, C}, bold removed, 8.810 is 8.81); d and f differ
    assert found["n_shared"] == 6 and found["n_disagree"] == 2 and [i["id"] for i in found["items"]] == ["d", "f"]
    d, f = found["items"]
    assert d["answers"] == {"c": "B", "o": "D"} and d["right"] == "c" and d["gold"] == "B"
    assert len(d["raw_output"]) == 200 and d["raw_output"].startswith("Answer: D x")
    assert f["right"] == "neither" and f["raw_output"] == "I cannot tell"
    assert found["right"] == {"c": 1, "o": 0, "both": 0, "neither": 1}


LETTERS = "ABCDEFGHIJKLMN"


def _read_by_hand(answer, kind):
    """The comparison's reading restated: FinMME's clean-up, then a letter set when only letters and
    separators are left (choice items), a number (numerical items), else the text."""
    for old in ("**", ":", "$\\boxed{", "}$", "\\$", "$", "{", "\\boxed"):
        answer = answer.replace(old, "")
    text = answer.strip()
    if kind != "numerical" and any(c in LETTERS for c in text.upper()) \
            and all(c in LETTERS + " ,;/&()." for c in text.upper()):
        return ("letters", "".join(sorted(set(c for c in text.upper() if c in LETTERS))))
    kept = "".join(c for c in text if c.isdigit() or c in ".-")
    if kind == "numerical":
        try:
            return ("number", float(kept))
        except ValueError:
            pass
    return ("text", " ".join(text.casefold().split()))


def test_compare_constrained_with_official_lists_the_disagreements(studied, tiny_model, tiny_qwen_dir,
                                                                  synthetic_parquet, tmp_path):
    out, _, _, _ = studied
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "official", protocol="official",
                          max_new_tokens=6), tiny_model, show_progress=False)
    from typer.testing import CliRunner

    from finbench.cli import app

    done = CliRunner().invoke(app, ["compare", str(out), str(tmp_path / "official"), "--allow-mixed-protocols",
                                    "--bootstrap", "0", "--out", str(tmp_path / "compare.json")], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output[-2000:]
    result = json.loads((tmp_path / "compare.json").read_text())
    found = result["disagreements"]["official"]
    a, b = pd.read_parquet(out / "samples.parquet"), pd.read_parquet(tmp_path / "official" / "samples.parquet")
    by_hand = [i for i, x, y, k in zip(a["id"], a["answer"], b["answer"], a["kind"])
               if _read_by_hand(x, k) != _read_by_hand(y, k)]
    assert [i["id"] for i in found["items"]] == by_hand and found["official"] == "official"
    assert "answers differ" in done.output and "robustness studies" in done.output
    assert result["studies"]["run"]["circular"]["k"] == 4 and "circular" not in result["studies"]["official"]
    assert finbench.compare([out, tmp_path / "official"], out=tmp_path / "c2.json", bootstrap=0,
                            allow_mixed_protocols=True)["disagreements"] == result["disagreements"]


def test_sweep_variants_carry_their_studies(studied, tmp_path):
    from finbench.report.markdown import sweep_markdown
    from finbench.app.sweep import summarize

    out, _, results, _ = studied
    summary = summarize([out, out], ["a", "b"], n_bootstrap=0)
    assert summary["variants"][0]["studies"]["circular"]["circular_accuracy"] == results["circular"]["circular_accuracy"]
    assert summary["variants"][1]["studies"]["image_ablation"]["blank"]["retained_accuracy"] == \
        results["image_ablation"]["blank"]["retained_accuracy"]
    assert "## Robustness studies" in sweep_markdown(summary)
    assert Path(out / "variants.parquet").is_file()


def test_options_that_name_other_options_are_asked_once_and_counted(tiny_qwen_dir, tmp_path):
    """"All of the above", "Both A and C", 以上都是: a rotation would make them false (the gold stays
    on an option that now names others), so such items are asked only in their published order,
    counted as `n_not_rotatable` and named in one note; the other items rotate as before."""
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("RGB", (32, 32), "white").save(buffer, format="PNG")
    (tmp_path / "a.png").write_bytes(buffer.getvalue())
    items = [("plain", ["10%", "20%", "30%", "40%"], "B"), ("above", ["Cash", "Debt", "Equity", "All of the above"], "D"),
             ("letters", ["Cash", "Debt", "Equity", "Both A and C"], "D"), ("zh", ["现金", "债务", "以上都是"], "C")]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": qid, "question_text": "Which?", "question_type": "single_choice",
                                        "answer": gold, "options": options, "image": {"path": "a.png"},
                                        "knowledge_domain": "Banking"}, ensure_ascii=False) + "\n"
                            for qid, options, gold in items))
    out = tmp_path / "run"
    done = _cli(tiny_qwen_dir, data, out, "--permutations", "4")
    assert done.exit_code == 0, done.output
    results = json.loads((out / "results.json").read_text())
    circular = results["circular"]
    assert circular["n_not_rotatable"] == 3 and circular["n"] == 1
    variants = pd.read_parquet(out / "variants.parquet")
    assert set(variants["id"]) == {"plain"} and sorted(variants["rotation"]) == [1, 2, 3]
    assert len(pd.read_parquet(out / "samples.parquet")) == 4  # every item is still asked once
    notes = [n for n in results["notes"] if "names other options" in n]
    assert len(notes) == 1 and notes[0].startswith("circular evaluation: 3 choice item(s)")


@pytest.mark.parametrize("option, names", [
    ("Both A and C", True), ("All of the above", True), ("None of the above", True), ("A and B", True),
    ("以上都是", True), ("以上皆非", True), ("Neither", True), ("all of these", True), ("both of the above", True),
    ("(A) and (C)", True), ("Options A and D", True), ("A或B", True), ("选项B", True), ("上述选项均正确", True),
    ("Class A shares", False), ("E and F", False), ("USA and UK", False), ("S&P 500", False), ("I and II", False),
    ("Both increase", False), ("The total of all segments", False), ("增长50%以上", False), ("完全正确", False)])
def test_which_options_name_other_options(option, names):
    from finbench.benchmarks.base import names_other_options

    assert names_other_options(["x", "y", "z", option], "ABCD") is names
