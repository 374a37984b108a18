"""Benchmarks: one file each. A benchmark module exposes NAME, HUB_ID, SCORER, GROUP_COLUMNS,
PROMPT_VERSION, load_questions(source, limit, domains, question_types), build_request(question,
images, protocol), extract_official(text) and OFFICIAL_MAX_NEW_TOKENS. The runner knows no more."""

from __future__ import annotations

from types import ModuleType

from finbench.benchmarks import finmme

BENCHMARKS: dict[str, ModuleType] = {finmme.NAME: finmme}


def get_benchmark(name: str) -> ModuleType:
    try:
        return BENCHMARKS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}") from None
