"""`finbench demo --benchmark B`: synthetic data of each benchmark in its real on-disk format,
and the run settings that keep a demo on a tiny random model short.

- FinMME: the hub's parquet (`finmme_synthetic`), kept in FINBENCH_HOME as it always was;
- FAMMA: the hub's parquet (`famma_synthetic`: its edge cases — images named out of order, a
  sub-question without context, live questions without an answer — and chart questions in three
  languages), written into the run folder as OUT/data/release_basic.parquet;
- FinMTM: the hub's folder layout (`finmtm_synthetic`: OQ/, MTQA/, Agent/), into OUT/data/.

A demo generates short answers (`max_new_tokens`) and, for FinMTM, judges its sessions with the
same tiny model, so that every part of the score — objective, dialogue, agent — is computed and
shown (at chance level: the weights are random).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEMOS = ("finmme", "famma", "finmtm")
DEFAULT_ITEMS = {"finmme": 72, "famma": 12, "finmtm": 12}
DEMO_MAX_NEW_TOKENS = 16  # a random model's free text is noise: a few tokens show the path
DEMO_JUDGE_MAX_NEW_TOKENS = 48


def demo_data(benchmark: str, home: Path, out: Path, n_items: int | None = None) -> tuple[Path, bool]:
    """(where the demo's data is, whether it was written now); written once per size."""
    n = n_items or DEFAULT_ITEMS[benchmark]
    if benchmark == "finmme":
        from finbench.offline.finmme_synthetic import write_parquet

        path = home / f"finmme-synthetic-{n}.parquet"
        if path.exists():
            return path, False
        return write_parquet(path, n_items=n), True
    folder = out / "data"
    if benchmark == "famma":
        from finbench.offline import famma_synthetic

        path = folder / f"famma-synthetic-{n}" / "release_basic.parquet"
        if path.exists():
            return path, False
        edge_cases = [r for r in famma_synthetic.records() if r["question_type"] != "true-false"]  # no broken record
        return famma_synthetic.write_parquet(path, edge_cases + famma_synthetic.chart_records(n, start=len(edge_cases))), True
    from finbench.offline.finmtm_synthetic import write_folder

    path = folder / f"finmtm-synthetic-{n}"
    if (path / "OQ" / "SC.jsonl").exists():
        return path, False
    return write_folder(path, n_objective=n), True


def demo_options(benchmark: str, model_dir: Path) -> dict[str, Any]:
    """evaluate() options of the demo (FinMME's demo keeps the defaults it always had)."""
    if benchmark == "finmme":
        return {}
    options: dict[str, Any] = {"max_new_tokens": DEMO_MAX_NEW_TOKENS}
    if benchmark == "finmtm":
        options.update(judge=str(model_dir), judge_max_new_tokens=DEMO_JUDGE_MAX_NEW_TOKENS)
    return options
