"""Start-up work happens once per run (issue 27 item 7): the options are validated once, the
family's refusal is made once, and config.json is read once per load into the `Checkpoint`
record that the checks and the loader share — for `finbench.evaluate` and for every variant of
a sweep. Counted by wrapping the one reader and the two checks."""

from __future__ import annotations

from collections import Counter

import pytest

import finbench
from finbench.models import contract, quant_checkpoint
from finbench.runner import startup


@pytest.fixture
def counted(monkeypatch):
    """Calls of config.json's reader (by source), of `validate` and of the family's refusal."""
    counts: Counter = Counter()

    def wrap(owner, name, key=lambda *a, **k: None):
        real = getattr(owner, name)

        def counting(*args, **kwargs):
            counts[(name, key(*args, **kwargs))] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    wrap(quant_checkpoint, "read_config_json", key=lambda source: str(source))
    wrap(startup, "validate")
    wrap(contract, "refusal")
    return counts


def test_one_run_reads_config_json_once_and_checks_once(counted, tiny_qwen_dir, synthetic_parquet, tmp_path):
    result = finbench.evaluate(str(tiny_qwen_dir), "finmme", data=str(synthetic_parquet), out=tmp_path / "run",
                               limit=2, device="cpu", dtype="float32", bootstrap=0)
    assert result.results["n_questions"] == 2 and result.results["errors"]["count"] == 0
    assert counted == Counter({("read_config_json", str(tiny_qwen_dir)): 1, ("validate", None): 1,
                               ("refusal", None): 1})


def test_each_sweep_variant_reads_config_json_once_and_checks_once(counted, tiny_qwen_dir, synthetic_parquet,
                                                                   tmp_path):
    from finbench.app.sweep import run_sweep
    from finbench.config.specs import RunConfig

    base = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=2, device="cpu", bootstrap=0)
    summary = run_sweep(base, {"dtype": ["float32", "bfloat16"]}, tmp_path / "sweep")
    assert [v["name"] for v in summary["variants"]] == ["dtype-float32", "dtype-bfloat16"]
    assert counted == Counter({("read_config_json", str(tiny_qwen_dir)): 2, ("validate", None): 2,
                               ("refusal", None): 2})
