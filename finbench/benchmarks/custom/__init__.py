"""Custom — your own questions from a plain file: `--benchmark custom --data FILE`.

The forms the peers read: a CSV or TSV (VLMEvalKit's MCQ TSV as it is: `index`, `question`, `hint`,
`A`…, `answer`, base64 `image`, `category`), JSON lines or a JSON list (evalscope's general_vmcq:
`question` with `<image k>`, `options`, `image_1`…, `answer`), or parquet (Hugging Face `Image`
structs); a folder holds one subset per file. Columns are renamable with `--spec FILE.yaml`,
relative image paths are read from the file's folder or `--image-root` (columns.py, images.py).
Each row's gold decides its type (cells.py) and so how it is read (prompts.py): single choices by
the constrained option read, sets by set decoding, numbers by the number grammar, open answers by
generation. Every problem of the data — an empty file, a missing `question` column, duplicate ids,
a gold not among the options, 1 or more than 14 options, a missing, unreadable or http(s) image, an
unparseable numeric gold, `<image k>` without its image — refuses the run at start-up, before any
model loads, in at most two lines naming the file and the row; `finbench data check --benchmark
custom FILE` lists them all, with the schema it resolved, the counts and three rendered prompts.
Scoring (scoring/custom.py): accuracy = mean(correct) over every row, per type and per breakdown.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from finbench.benchmarks.base import Benchmark, Demo, Inspection, questions_digest
from finbench.benchmarks.custom.items import (IMAGE_ROOT_OPTION, MAX_PROBLEMS_SHOWN, NAME, SPEC_OPTION, Reading,
                                              read_source, refusal, selected)
from finbench.benchmarks.custom.prompts import (JUDGING, OPEN_MAX_NEW_TOKENS, PROMPT_VERSION, answer, open_prompt,
                                                rendered, request, rule_judgement)
from finbench.benchmarks.custom.tables import data_files
from finbench.benchmarks.raw import DataError
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.types import Question

GROUP_COLUMNS = ("subset", "answer_type")  # and the data's own breakdowns (scoring/custom.py `breakdown_columns`)
PROMPTS_SHOWN = 3


def load(source: Any = None, limit: int | None = None, domains: Sequence[str] = (), question_types: Sequence[str] = (),
         notes: list[str] | None = None) -> list[Question]:
    """The questions of a custom source; its first problem is a ValueError (a run is refused at
    start-up already: `recognise`)."""
    reading = read_source(source)
    if reading.problems:
        raise ValueError(refusal(reading))
    if notes is not None:
        notes.extend(reading.notes)
    return selected(reading.questions, domains, question_types, limit)


def recognise(source: Any) -> str:
    """"" when the source is a custom file finbench can run as it is, else the refusal (≤ 2 lines,
    naming the file and the row); a source the loader refuses alone (None) is its line."""
    if source is None:
        return ""
    try:
        return refusal(read_source(source))
    except DataError as err:
        return str(err)


def files(source: Any) -> list[Path]:
    return data_files(source)


def _counts(reading: Reading) -> dict[str, dict[str, int]]:
    counts = {"item type": dict(Counter(q.meta["answer_type"] for q in reading.questions))}
    for column in dict.fromkeys(c for _, schema in reading.schemas for c in schema.breakdowns):
        counts[column] = dict(Counter(q.meta.get(column, "") or "(empty)" for q in reading.questions))
    labels = Counter(f"{q.meta['answer_type']}: {q.gold}" for q in reading.questions if q.options)
    if labels:
        counts["gold label (per item type)"] = dict(sorted(labels.items()))
    return counts


def inspect(source: Any) -> Inspection:
    """What `finbench data check` shows: the schema resolved per file, counts per item type and
    breakdown, the gold label distribution, three rendered prompts, every problem by row and the
    digest of the good rows' content."""
    reading = read_source(source)
    sections = {f"schema of {file}": schema.lines() for file, schema in reading.schemas}
    shown = reading.questions[:PROMPTS_SHOWN]
    sections["prompts (the first three, an image shown as <image>)"] = tuple(
        line for q in shown for line in (f"[{q.id}]", *(f"    {text}" for text in rendered(q).splitlines())))
    problems = tuple(p.line() for p in reading.problems[:MAX_PROBLEMS_SHOWN])
    if len(reading.problems) > MAX_PROBLEMS_SHOWN:
        problems += (f"… and {len(reading.problems) - MAX_PROBLEMS_SHOWN} more",)
    return Inspection(files=reading.files, n_records=reading.n_rows, n_images=sum(len(q.images) for q in reading.questions),
                      counts=_counts(reading), sections=sections, problems=problems, notes=reading.notes,
                      digest="" if reading.problems else questions_digest(reading.questions))


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id="(your own file: --data)", domain_field="category",
    prompt_version=PROMPT_VERSION, official_max_new_tokens=OPEN_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS,
    scorer=ScorerModule("finbench.scoring.custom"), load=load, request=request, answer=answer,
    rule_judgement=rule_judgement, judging=JUDGING, open_prompt=open_prompt, recognise=recognise, files=files,
    inspect=inspect, data_options=(SPEC_OPTION, IMAGE_ROOT_OPTION), cluster_field="cluster_id",
    answer_type_field="answer_type", protocols=("constrained: choices from the option letters' logits, sets by set "
                                                "decoding, numbers by the number grammar, open answers generated",),
    protocol_names=("constrained",),
    forms=("csv, tsv (VLMEvalKit), jsonl, json (evalscope general_vmcq), parquet; a folder = one subset per file",
           "columns renamed with --spec FILE.yaml; images relative to the file or --image-root"),
    metrics="accuracy = mean(correct); per item type (single, multi, numbers exact and within tolerance, open); "
            "per breakdown with clustered intervals; label balance",
    leaderboard_breakdown="answer_type",
    demo=Demo(module="finbench.offline.custom_synthetic", sizes="custom rows, two of each kind (22)", in_home=True,
              short_generation=True))
