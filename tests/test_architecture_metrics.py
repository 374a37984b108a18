"""Metrics are declared where a rule is defined (benchmarks/metrics.py `Metric` and `Variant`, listed by
each benchmark's `Scorer`): the generic layers (tests/generic_layers.py: runner, reports, CLI, app/,
config/, scoring's shared modules, …) read a metric's label, direction, scale and count from the declaration
and never name a metric's key as a string constant (a default, a branch, a dict key, a set of
penalties). The two metrics every rule has, accuracy and the per-question score, are the generic
declarations `ACCURACY` and `SCORE`, referenced by their constant. Scoring never imports the
reports (a package cycle), and scoring is given a Benchmark, never a name that falls back to one."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest
from generic_layers import GENERIC_LAYERS, generic_files
from test_architecture import string_constants

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
# (file, constant) pairs that are not a metric's key though they spell one, each with its reason.
NOT_METRIC_KEYS = {
    ("app/leaderboard.py", "score"): "the board's own column of each run's headline value (a CSV header)",
}


def declared_keys() -> set[str]:
    """Every key a registered Scorer declares for its score (its metrics) and every variant name
    but the official one (which is also a protocol's name). Part metrics are left out: they live
    namespaced in their part's dict, and their keys (recall, session) are ordinary words in the
    generic layers (the label balance's recall, the session request)."""
    from finbench.benchmarks import BENCHMARKS
    from finbench.benchmarks.metrics import OFFICIAL

    keys = set()
    for benchmark in BENCHMARKS.values():
        scorer = benchmark.scorer
        keys |= {m.key for m in scorer.metrics}
        keys |= {v.name for v in scorer.variants if v.name != OFFICIAL.name}
    return keys


def keys_in_generic_layers(keys: set[str], root: Path = PACKAGE) -> list[str]:
    found = []
    for file in generic_files(root):
        relative = file.relative_to(root).as_posix()
        for node in string_constants(ast.parse(file.read_text(encoding="utf-8"))):
            if node.value in keys and (relative, node.value) not in NOT_METRIC_KEYS:
                found.append(f"{relative}:{node.lineno}: {node.value!r}")
    return found


def test_the_declarations_name_the_metrics_the_generic_layers_used_to_list():
    keys = declared_keys()
    assert {"finscore", "p_h", "accuracy", "score", "binary_f1", "qa_accuracy_tolerance", "paper"} <= keys


def test_no_declared_metric_key_is_a_string_constant_in_the_generic_layers():
    assert all((PACKAGE / place).exists() for place in GENERIC_LAYERS)
    assert keys_in_generic_layers(declared_keys()) == []


def test_the_key_walk_sees_a_metric_key_and_skips_docstrings(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "x.py").write_text('"""p_h"""\nLOWER = {"p_h"}\ndef f():\n    """finscore"""\n'
                                              '    return {"x": 1}\n')
    assert keys_in_generic_layers({"p_h", "finscore"}, tmp_path) == ["report/x.py:2: 'p_h'"]


def test_scoring_imports_no_report_module_at_any_level():
    found = []
    for file in sorted((PACKAGE / "scoring").rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{file.name}: {n}" for n in names if n.startswith(("finbench.report", "finbench.cli"))]
    assert found == []


def test_a_penalty_and_a_subset_count_come_from_the_declaration():
    from finbench.benchmarks import get_benchmark

    finmme = get_benchmark("finmme").scorer
    assert not finmme.metric("p_h").higher_is_better and finmme.metric("p_h").n_key == "n_multi_answer"
    assert finmme.metric("finscore").higher_is_better
    assert finmme.variant("paper").info_fields == ("n_denominator",)
    assert get_benchmark("mme-finance").scorer.metric("binary_f1").n_key == "n_binary"
    with pytest.raises(ValueError, match="variant 'nope'"):
        finmme.variant("nope")


def test_scoring_refuses_a_name_and_a_table_that_names_no_benchmark():
    from finbench.benchmarks import get_benchmark
    from finbench.scoring.tables import score_samples

    rows = pd.DataFrame({"id": ["a", "b"], "kind": ["single", "single"], "gold": ["A", "B"], "answer": ["A", "A"],
                         "error": ["", ""]})
    with pytest.raises(ValueError, match="names no benchmark"):
        score_samples(rows)
    with pytest.raises(TypeError, match="not its name"):
        score_samples(rows, "famma")
    assert score_samples(rows, get_benchmark("famma"))["accuracy"] == 0.5
    assert score_samples(rows.assign(benchmark="famma"))["benchmark"] == "famma"  # the table names it
