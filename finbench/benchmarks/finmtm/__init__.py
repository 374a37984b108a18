"""FinMTM — A Multi-Turn Multimodal Benchmark for Financial Reasoning and Agent Evaluation (2026).

11,133 Chinese/English items: single- and multi-choice objective items, multi-turn open-ended
sessions (levels L1–L4) and agent tasks. Data: the hub set `HiThink-Research/FinMTM` (JSONL files
such as `OQ/SC.jsonl`, images beside them) or the same files locally. Official code:
HiThink-Research/FinMTM @ 40557ba (inference/SC_MC/etest.py, inference/MTQA/inference.py,
judge/MTQA, judge/Agent, finmtm_eval/metrics.py).

Two protocols for objective items:
- `constrained` (default): the item's text and images, the answer read from option-letter logits.
- `official`: the item's own message (images, then text), free generation, the official parser.
Sessions are always generated turn by turn (text-only history, images re-attached every turn)
and judged by `--judge`; agent items are replayed offline (recorded tool results as observations)
and scored on their tool plan. Scoring lives in `finbench.scoring.finmtm`.

The package, in the order the data flows: `texts` (official prompts and rubrics), `loader`
(records → Questions), `prompts` (requests, answers), `verdicts` (judge calls, verdicts, the agent
replay).
"""

from __future__ import annotations

from finbench.benchmarks.base import Benchmark, Demo, no_open_prompt, options_not_rendered
from finbench.benchmarks.finmtm.loader import canonical_gold, load_questions, recognise, record_to_question
from finbench.benchmarks.finmtm.prompts import after_think, answer, extract_official, request
from finbench.benchmarks.finmtm.texts import (AGENT, DIALOGUE, DOMAIN_FIELD, FORMS, GROUP_COLUMNS, HUB_ID,
                                              JUDGE_FIELDS, JUDGE_MAX_NEW_TOKENS, LEVELS, METRICS, NAME, OBJECTIVE,
                                              OFFICIAL_MAX_NEW_TOKENS, OPEN_ENDED_SYSTEM_PROMPT, PROMPT_VERSION,
                                              PROTOCOLS)
from finbench.benchmarks.finmtm.verdicts import (judge_requests, match_calls, parse_judge_json, read_judgement, replies,
                                             rule_judgement, tool_calls, unique_calls)
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.judging import Judging

__all__ = ["AGENT", "BENCHMARK", "DIALOGUE", "JUDGE_FIELDS", "JUDGE_MAX_NEW_TOKENS", "LEVELS", "OBJECTIVE",
           "OPEN_ENDED_SYSTEM_PROMPT", "after_think", "answer", "canonical_gold", "extract_official",
           "judge_requests", "load_questions", "match_calls", "parse_judge_json", "read_judgement",
           "record_to_question", "replies", "request", "rule_judgement", "tool_calls", "unique_calls"]

BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=ScorerModule("finbench.scoring.finmtm"),
    load=load_questions, request=request, answer=answer, rule_judgement=rule_judgement,
    judging=Judging(judge_requests, read_judgement), forms=FORMS, protocols=PROTOCOLS, metrics=METRICS,
    rotate=options_not_rendered,  # objective items carry their options inside the question text
    open_prompt=no_open_prompt,  # (so no stem without them: no open-ended probe)
    leaderboard_breakdown="question_type", recognise=recognise,
    cluster_field="image",  # a session is one question; objective items and sessions on one image share it
    demo=Demo(module="finbench.offline.finmtm_synthetic", sizes="FinMTM objective items per file (12)", self_judge=True,
              judge_max_new_tokens=48))
