"""The registry of benchmarks (names, protocols, declarations) is read without torch or pandas, so
that a mistyped --benchmark or --protocol is refused at once (tests/test_startup_fast.py); each
benchmark's scorer is named by its module (benchmarks/scorer.py `ScorerModule`) and imported when
something scores. The import checks run in a fresh interpreter: this test process has torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ENV

HEAVY = ("torch", "pandas", "transformers", "torchao", "bitsandbytes")


def _fresh(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reading_the_registry_imports_neither_torch_nor_pandas():
    found = _fresh(f"""
import json, sys
from finbench.benchmarks import BENCHMARKS, describe
listed = {{name: [b.protocol_names, describe(b)["metrics"], b.group_columns] for name, b in BENCHMARKS.items()}}
print(json.dumps({{"names": sorted(listed), "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
""")
    assert {"finmme", "famma", "finmtm", "mme-finance", "finmmr"} <= set(found["names"])
    assert found["heavy"] == [], f"import finbench.benchmarks imported {found['heavy']}"


def test_a_scorer_is_imported_when_first_used_and_is_its_modules_own():
    found = _fresh(f"""
import json, sys
from finbench.benchmarks import get_benchmark
benchmark = get_benchmark("finmtm")
before = [m for m in {HEAVY!r} if m in sys.modules]
parts = [p.name for p in benchmark.scorer.parts]  # the first use imports the scorer's module
from finbench.scoring import finmtm
print(json.dumps({{"before": before, "parts": parts, "same": benchmark.scorer.build_table is finmtm.build_table,
                  "torch": "torch" in sys.modules}}))
""")
    assert found["before"] == [] and found["torch"]
    assert found["parts"] == ["dialogue", "agent"] and found["same"]


def test_every_builtin_scorer_resolves_to_the_scorer_its_module_defines():
    import importlib

    from finbench.benchmarks import BENCHMARKS
    from finbench.benchmarks.scorer import Scorer, ScorerModule, resolved

    for name, benchmark in BENCHMARKS.items():
        if isinstance(benchmark.scorer, ScorerModule):
            module = importlib.import_module(benchmark.scorer.module)
            assert resolved(benchmark.scorer) is module.SCORER, name
            assert benchmark.scorer.variants == module.SCORER.variants
        assert isinstance(resolved(benchmark.scorer), Scorer), name


def test_a_scorer_module_without_a_scorer_is_one_clear_error():
    from finbench.benchmarks.scorer import ScorerModule

    with pytest.raises(TypeError, match="finbench.benchmarks.parts: its SCORER is not a finbench Scorer"):
        ScorerModule("finbench.benchmarks.parts").build_table  # noqa: B018 — the attribute read is the test
    with pytest.raises(AttributeError):
        ScorerModule("finbench.scoring.finmme").no_such_field  # noqa: B018


def test_the_breakdowns_declared_apart_from_their_scorer_agree_with_it():
    """FAMMA's derived breakdowns and FinMMR's execution-rate breakdowns are declared with the
    benchmark (the registry reads them without the scorer): the scorer works on the same ones."""
    import pandas as pd

    from finbench.benchmarks import get_benchmark
    from finbench.benchmarks.famma.texts import DERIVED_GROUP_COLUMNS
    from finbench.scoring import famma, finmmr

    frame = pd.DataFrame({"is_arithmetic": [True, False], "difficulty": ["easy", "hard"], "language": ["en", "zh"],
                          "subfield": ["a", "b"]})
    assert tuple(famma.group_frame(frame).columns) == DERIVED_GROUP_COLUMNS
    assert set(DERIVED_GROUP_COLUMNS) <= set(get_benchmark("famma").group_columns)
    assert get_benchmark("finmmr").group_columns == finmmr.GROUP_COLUMNS
