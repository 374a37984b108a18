"""A benchmark defined outside finbench — its loader, request, scoring rule (with one part scored
apart), synthetic data writer and demo — to prove that adding a benchmark is its own files plus
one `finbench.benchmarks.register` call (tests/test_register.py). Nothing under finbench/ knows it.

Data: `toy.jsonl`, one record a line: id, question, options (a list), answer (a letter), level
("easy" or "hard"), topic, image (a PNG file name beside the JSONL). The rule: accuracy over every
item; the hard items are also scored apart, as the part "hard" (accuracy and its bootstrap CI)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.base import Benchmark, Demo
from finbench.benchmarks.metrics import Metric
from finbench.benchmarks.parts import Part
from finbench.benchmarks.scorer import Scorer
from finbench.core.requests import Choose, Prompt, Request, user_message
from finbench.core.types import SINGLE, Question
from finbench.kernels.bootstrap import bootstrap_segment_sums, percentile_ci
from finbench.scoring.stats import ScoreTable, error_mask, str_column

NAME = "toybench"
DATA_FILE = "toy.jsonl"
TOPICS = ("rates", "equity", "credit")
LABEL = "ToyBench (accuracy; hard items scored apart)"


# ---- data ---------------------------------------------------------------------------------------
def png(seed: int) -> bytes:
    from PIL import Image

    image = Image.new("RGB", (28, 28), (40 * (seed % 6), 90, 200 - 20 * (seed % 8)))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_data(folder: Path, n_items: int = 9) -> Path:
    """`n_items` records (every third one hard) and their images under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for k in range(n_items):
        (folder / f"chart{k}.png").write_bytes(png(k))
        lines.append(json.dumps({"id": f"toy-{k}", "question": f"Which bar is tallest in chart {k}?",
                                 "options": ["first", "second", "third"], "answer": "ABC"[(k // 3) % 3],
                                 "level": "hard" if k % 3 == 2 else "easy", "topic": TOPICS[k % len(TOPICS)],
                                 "image": f"chart{k}.png"}))
    (folder / DATA_FILE).write_text("\n".join(lines) + "\n")
    return folder


def demo_data(folder: Path, size: int | None) -> tuple[Path, bool]:
    """The demo's data: written once per size under `folder` (the `Demo` contract)."""
    target = Path(folder) / f"toybench-{size or 9}"
    if (target / DATA_FILE).is_file():
        return target, False
    return write_data(target, size or 9), True


# ---- benchmark ------------------------------------------------------------------------------------
def record_to_question(record: Mapping[str, Any], folder: Path) -> Question:
    qid = str(record.get("id", ""))
    try:
        options = tuple(str(o) for o in record["options"])
        image = (folder / str(record["image"])).read_bytes()
        return Question(id=qid, benchmark=NAME, kind=SINGLE, text=str(record["question"]), options=options,
                        gold=str(record["answer"]), images=(image,),
                        meta={"level": str(record["level"]), "topic": str(record["topic"])})
    except (KeyError, TypeError, OSError) as err:
        return Question(id=qid, benchmark=NAME, kind=SINGLE, text="", error=f"bad record: {err}",
                        meta={"level": str(record.get("level", "")), "topic": str(record.get("topic", ""))})


def load(source: Any = None, limit: int | None = None, domains: Sequence[str] = (), question_types: Sequence[str] = (),
         notes: list[str] | None = None) -> list[Question]:
    path = Path(source)
    folder = path if path.is_dir() else path.parent
    records = [json.loads(line) for line in (folder / DATA_FILE).read_text().splitlines() if line.strip()]
    kept = [r for r in records if (not domains or r.get("topic") in domains)
            and (not question_types or "single_choice" in question_types)]
    return [record_to_question(r, folder) for r in kept[:limit]]


def request(question: Question, protocol: str) -> Request:
    choices = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    text = f"{question.text}\n{choices}Answer with the option's letter."
    prompt = Prompt(messages=(user_message(text, len(question.images)),), images=tuple(range(len(question.images))),
                    answer_prefix="Answer:")
    return Choose(prompt, n_options=len(question.options))


# ---- scoring ------------------------------------------------------------------------------------
def _statistic(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    total = sums.sum(-2)  # [..., C]: (n, correct)
    return {"accuracy": total[..., 1] / total[..., 0]}


def build_table(df: pd.DataFrame, variant: str = "official", device: Any = "cpu") -> ScoreTable:
    correct = (str_column(df, "answer") == str_column(df, "gold")) & ~error_mask(df)
    values = torch.from_numpy(np.stack([np.ones(len(df)), correct.astype(np.float64)], axis=1)).to(device)
    right = values[:, 1]
    return ScoreTable(ids=str_column(df, "id"), correct=right, score=right, values=values,
                      segments=torch.zeros(len(df), dtype=torch.int64, device=values.device), n_segments=1,
                      statistic=_statistic, headline=("accuracy",), primary="accuracy",
                      info={"label": LABEL, "n_errors": int(error_mask(df).sum())})


def summary(df: pd.DataFrame, table: ScoreTable, estimates: Mapping[str, Any]) -> dict[str, Any]:
    """The part "hard": the hard items' accuracy, with a bootstrap CI when the run asked for CIs."""
    hard = str_column(df, "level") == "hard"
    if not hard.any():
        return {"hard": {"n": 0, "n_scored": 0, "n_errors": 0, "unscored": "no hard item in this run"}}
    right = table.correct[torch.from_numpy(hard).to(table.correct.device)].to(torch.float64)
    part: dict[str, Any] = {"n": int(hard.sum()), "n_scored": int(hard.sum()),
                            "n_errors": int((error_mask(df) & hard).sum()), "accuracy": float(right.mean())}
    bootstrap = estimates.get("bootstrap") or {}
    if bootstrap.get("n_resamples"):
        values = torch.stack([torch.ones_like(right), right], 1)
        sums = bootstrap_segment_sums(values, torch.zeros(len(right), dtype=torch.int64), 1,
                                      bootstrap["n_resamples"], seed=bootstrap["seed"])
        low, high = percentile_ci(_statistic(sums)["accuracy"], bootstrap["level"])
        part["ci"] = {"accuracy": {"low": float(low), "high": float(high), "level": bootstrap["level"]}}
    return {"hard": part}


HARD = Part("hard", "ToyBench hard items (scored apart)", "ToyBench hard",
            (Metric("accuracy", "hard accuracy ×100"),),
            headline="accuracy", headline_label="hard-item accuracy")
SCORER = Scorer(build_table=build_table, summary=summary, parts=(HARD,))

BENCHMARK = Benchmark(
    name=NAME, title="ToyBench: a benchmark defined in tests/", hub_id="nobody/toybench", domain_field="topic",
    prompt_version="toybench-v1", official_max_new_tokens=8, group_columns=("topic", "level"), scorer=SCORER,
    load=load, request=request, protocols=("constrained",), metrics="accuracy; hard items apart",
    leaderboard_breakdown="level", demo=Demo(module="toybench", sizes="ToyBench items (9)", in_home=True))
