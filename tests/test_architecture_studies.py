"""The generic layers name no study: a study's names (its `study` value, results.json key, option,
probe, rotation or ablation modes) are string constants of its own file under finbench/studies/
only. The generic layers (tests/generic_layers.py: the runner, the reports, the command line,
app/, config/, scoring's shared modules, …) loop over the registry (finbench/studies). Docstrings and help texts are
not counted (read with `ast`, as the benchmark-name hook reads them); a constant "circular" (a
default, a branch, a dict key) is."""

from __future__ import annotations

import ast
from pathlib import Path
from generic_layers import generic_files
from test_architecture import docstring_ids

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
STUDY_NAMES = {"circular", "image_ablation", "image-ablation", "sampling", "probe", "probes", "permutations", "samples",
               "none-of-the-above", "none-of-the-above-control", "open-ended", "rotation", "ablation", "sample",
               "blank", "noise", "--permutations", "--image-ablation", "--samples", "--probe"}
HELP_KEYWORDS = {"help", "short_help", "epilog"}  # a flag's help text says what the flag does
# the same words meaning something else than a study, each named with why
ALLOWED = {
    ("finbench/runner/keys.py", "rotation"), ("finbench/runner/keys.py", "probe"),  # request fields (finbench/core/
    ("finbench/runner/keys.py", "sampling"), ("finbench/runner/keys.py", "ablation"),  # requests.py): the cache key
    ("finbench/runner/run_requests.py", "blank"), ("finbench/runner/run_requests.py", "noise"),  # Prompt.ablation rendered
    ("finbench/runner/outputs.py", "samples"),  # throughput: rows counted
    ("finbench/runner/timing.py", "samples"),
    ("finbench/runner/startup.py", "sampling"),  # --gen-kwargs sampling a family may refuse
    ("finbench/report/console.py", "sample"),  # "N samples" in a sentence
}


def _help_texts(tree: ast.AST) -> set[int]:
    return {id(sub) for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg in HELP_KEYWORDS
            for sub in ast.walk(node.value)}


def study_names_in(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = docstring_ids(tree) | _help_texts(tree)
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
            and node.value.strip().lower() in STUDY_NAMES]


def test_no_generic_layer_names_a_study():
    hits = [hit for path in generic_files() for hit in study_names_in(path)
            if (hit.split(":")[0], ast.literal_eval(hit.split(": ", 1)[1])) not in ALLOWED]
    assert hits == [], "study names in generic layers:\n" + "\n".join(hits)


def test_the_check_finds_a_study_name_and_skips_docstrings_and_help(tmp_path):
    """The check can fail: a branch on a study's name is found; the same word in a docstring or a
    flag's help is not."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""Circular evaluation: "circular"."""\n'
                      'import typer\n'
                      'def f(config):\n'
                      '    """probes"""\n'
                      '    option = typer.Option(0, help="probes")\n'
                      '    return config.get("circular") or "open-ended"\n')
    assert sorted(hit.rsplit(": ", 1)[1] for hit in study_names_in(sample, tmp_path)) == ["'circular'", "'open-ended'"]
