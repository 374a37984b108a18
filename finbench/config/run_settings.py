"""A benchmark's request with the settings of one run (`for_run`): below the runner and the
studies, which both build requests (runner/run_requests.py `build_requests`; a study's rotated or
probed items, finbench/studies/)."""

from __future__ import annotations

from dataclasses import replace

from finbench.core.requests import Generate, Number, Request, Session, system_message
from finbench.config.specs import RunConfig


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
