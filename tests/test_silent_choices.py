"""A generation setting is never resolved or dropped silently (issue 55, item 8): `--gen-kwargs
max_new_tokens` given beside `--max-new-tokens` says which one is the budget, and a sampling setting
that no question of the run can use (every answer read from the logits) says it has no effect."""

from __future__ import annotations

from helpers import cli


def _run(model, data, out, *extra):
    done = cli("run", "--model", str(model), "--data", str(data), "--limit", "3", "--out", str(out), "--device", "cpu",
               "--dtype", "float32", "--bootstrap", "0", "--no-progress", *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    return " ".join(done.stderr.split())


def test_two_generation_budgets_and_an_unused_temperature_are_each_one_note(tiny_qwen_dir, synthetic_parquet, tmp_path):
    said = _run(tiny_qwen_dir, synthetic_parquet, tmp_path / "both", "--gen-kwargs", "max_new_tokens=8,temperature=0.7",
                "--max-new-tokens", "16")
    assert said.count("note: --gen-kwargs max_new_tokens=8 is the generation budget; --max-new-tokens 16 is not "
                      "used") == 1, said
    assert said.count("note: --gen-kwargs temperature=0.7 has no effect: no question of this run generates text "
                      "(--protocol constrained reads its answers from the logits)") == 1, said


def test_a_setting_that_applies_is_not_noted(tiny_qwen_dir, synthetic_parquet, tmp_path):
    said = _run(tiny_qwen_dir, synthetic_parquet, tmp_path / "official", "--protocol", "official", "--gen-kwargs",
                "max_new_tokens=2,temperature=0.7", "--max-new-tokens", "2")
    assert "has no effect" not in said and "is not used" not in said, said
