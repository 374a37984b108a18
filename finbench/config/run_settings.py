"""A benchmark's request with the settings of one run (`for_run`), and a request's sampling
settings with their seed (`sampled_settings`, `with_seed`, `seed_of`, `repeatable`: the
repeated-sampling study's, finbench/studies/sampling.py): below the runner and the studies, which
both build requests (runner/run_requests.py `build_requests`; a study's rotated, probed or sampled
items, finbench/studies/)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from finbench.config.specs import RunConfig
from finbench.core.requests import Choose, Generate, Number, Request, Session, system_message


def for_run(request: Request, config: RunConfig, think_budget: int | None) -> Request:
    """`request` with the run's settings, each a field of the request (so of its cache key): the
    system prompt first; the numeric budget; the generation budget (`--gen-kwargs
    max_new_tokens`, else `--max-new-tokens`, else the benchmark's official one) and sampling
    (with its seed; none for greedy decoding);
    the thinking budget of constrained answers (None: no thinking block; its reasoning greedy
    unless a study samples it: the study's `adjust`, finbench/studies/)."""
    generation = dict(config.decode.gen_kwargs)
    budget = generation.pop("max_new_tokens", None) or config.decode.max_new_tokens
    # greedy ignores top_p/top_k; a sampled answer depends on the seed, so the seed is part of it
    sampled = float(generation.get("temperature") or 0) > 0
    sampling = tuple(sorted({**generation, "seed": config.output.seed}.items())) if sampled else ()
    if isinstance(request, Session):
        prefix = (system_message(config.decode.system_prompt), *request.prefix) if config.decode.system_prompt else request.prefix
        return replace(request, prefix=prefix, max_new_tokens=budget or request.max_new_tokens, sampling=sampling)
    prompt = request.prompt.with_system(config.decode.system_prompt) if config.decode.system_prompt else request.prompt
    if isinstance(request, Generate):
        return replace(request, prompt=prompt, max_new_tokens=budget or request.max_new_tokens, sampling=sampling)
    if isinstance(request, Number):
        return replace(request, prompt=prompt, budget=config.decode.numeric_budget, think_budget=think_budget, sampling=())
    return replace(request, prompt=prompt, think_budget=think_budget, sampling=())


def sampled_settings(config: RunConfig) -> dict[str, Any]:
    """The run's sampling settings (`--gen-kwargs` without the budget), {} when decoding is greedy."""
    generation = {k: v for k, v in config.decode.gen_kwargs if k != "max_new_tokens"}
    return generation if float(generation.get("temperature") or 0) > 0 else {}


def with_seed(sampling: Sequence[tuple[str, Any]], seed: int) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted({**dict(sampling), "seed": seed}.items()))


def repeatable(request: Request | None) -> bool:
    """Whether a request's answer is sampled, so worth asking again: generated text, or a thinking
    block before a constrained answer."""
    if isinstance(request, (Generate, Session)):
        return True
    return isinstance(request, (Choose, Number)) and request.think_budget is not None


def seed_of(sampling: Sequence[tuple[str, Any]]) -> int | None:
    return dict(sampling).get("seed")
