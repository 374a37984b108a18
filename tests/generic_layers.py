"""The generic layers, listed once: the places of finbench that know a benchmark, a study, a metric
and a protocol only by what their declarations say (a `Benchmark`, a `Study`, a `Scorer`'s
`Metric`s, the request types) and so never name one as a string constant. Every architecture test
that checks a kind of name reads this list: test_architecture.py (benchmark names),
test_architecture_studies.py, test_architecture_metrics.py and test_architecture_protocols.py.

In the wings of docs/architecture.md: the runner, the reports, the command line, what the commands
compute (app/: the API, sweeps, the leaderboard, the data check, run folders) and the run's options
(config/) are generic whole; of studies/, the registry and the contract (each study's own file
names itself); of scoring/, its shared modules (a benchmark's own scorer and the studies'
statistics are not); of benchmarks/, what a scorer answers to and the declarations read by name.
core/ is not: it is the vocabulary that names the default benchmark, the protocols and the study
modes once. Paths are relative to finbench/."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
GENERIC_LAYERS = ("runner", "report", "cli", "app", "config", "studies/__init__.py", "studies/base.py",
                  "scoring/__init__.py", "scoring/tables.py", "scoring/stats.py", "scoring/clustered.py",
                  "scoring/agreement.py", "scoring/balance.py", "scoring/answers.py", "scoring/predictions.py",
                  "benchmarks/scorer.py", "benchmarks/parts.py", "benchmarks/declared.py")


def generic_files(root: Path = PACKAGE) -> list[Path]:
    """Every file of the generic layers under `root` (a folder's files recursively), in order."""
    files = []
    for place in GENERIC_LAYERS:
        path = root / place
        files += [path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []
    return files
