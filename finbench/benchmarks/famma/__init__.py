"""FAMMA — financial multilingual multimodal question answering (Xue et al., arXiv 2410.04526).

~1,945 answered questions (`release_basic`) and 103 live questions with withheld answers
(`release_livepro`) in English, Chinese and French, 8 subfields, multiple-choice and open.
Data: the hub set `weaverbirdllm/famma` (Arrow/parquet, images as {bytes, path} structs), the
official downloader's JSON (relative JPEG paths) or the early JSON (inline base64 images).
Official code: famma-bench/bench-script @ fcb95d7 (generation_runner, eval_runner, analyzer).

Two protocols:
- `constrained` (default): one sub-question per request, images interleaved where `<image_n>`
  stands; multiple-choice read from option-letter logits, open questions generated and judged.
- `official`: the grouped JSON prompt (all sub-questions of a main question in one call, the first
  sub-question's images after the text), json-repair parsing, then judging as the official runner.

The package, read in the order the data flows: `texts` (official prompts, labels, limits),
`record` (one record → Question), `loader` (records → Questions, the official groups),
`prompts` (requests), `extraction` (answers from the grouped JSON), `verdicts` (rule and LLM judges).
"""

from __future__ import annotations

from finbench.benchmarks.base import Benchmark, Demo
from finbench.benchmarks.famma.extraction import (_lenient_json, answer, extract_official, parse_grouped_response,
                                                  reply_form)
from finbench.benchmarks.famma.loader import REQUIRED_COLUMNS, load_questions
from finbench.benchmarks.famma.prompts import fill_template, official_prompt, open_prompt, request
from finbench.benchmarks.famma.record import answer_text, image_bytes, record_to_question
from finbench.benchmarks.famma.texts import (DOMAIN_FIELD, FORMS, GROUP_COLUMNS, HUB_ID, JUDGE_MAX_NEW_TOKENS, METRICS,
                                             NAME, OFFICIAL_MAX_NEW_TOKENS, PROMPT_VERSION, PROTOCOLS)
from finbench.benchmarks.famma.verdicts import judge_requests, read_judgement, rule_judgement, rule_verdict
from finbench.benchmarks.recognise import requires_columns
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.judging import Judging
from finbench.core.types import Question

__all__ = ["BENCHMARK", "Question", "answer", "answer_text", "extract_official", "fill_template", "image_bytes",
           "judge_requests", "load_questions", "official_prompt", "parse_grouped_response", "read_judgement",
           "record_to_question", "reply_form", "request", "rule_judgement", "rule_verdict", "JUDGE_MAX_NEW_TOKENS",
           "_lenient_json"]

BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=ScorerModule("finbench.scoring.famma"),
    load=load_questions, request=request, answer=answer, reply_form=reply_form, rule_judgement=rule_judgement,
    judging=Judging(judge_requests, read_judgement), forms=FORMS, protocols=PROTOCOLS, metrics=METRICS,
    cluster_field="main_question_id",  # sub-questions share their main question's images and context
    open_prompt=open_prompt, language_field="language",  # english, chinese, french
    recognise=requires_columns("FAMMA", REQUIRED_COLUMNS),
    demo=Demo(module="finbench.offline.famma_synthetic", sizes="FAMMA main questions of two sub-questions (12)"))
