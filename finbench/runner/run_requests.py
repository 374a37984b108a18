"""A benchmark's request made ready for one run: the run's settings added (finbench/config/run_settings.py
`for_run`), its batch kind, and its prompt rendered for the model adapter with the question's decoded images."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark
from finbench.config.run_settings import for_run
from finbench.config.specs import RunConfig
from finbench.core.requests import Choose, Generate, Number, Prompt, Request, Session
from finbench.core.types import MULTI, NUMERICAL, SINGLE, ModelRequest, Question
from finbench.runner.keys import DECODER_VERSION, request_images
from finbench.runner.preprocess import decode_images


def batch_kind(request: Request) -> str:
    """Requests of one kind share a batch: one decoder with one set of settings."""
    if isinstance(request, Choose):
        kind = "multi" if request.multi else "single"
    elif isinstance(request, Number):
        kind = f"numerical/{request.budget}"
    else:
        name = "session" if isinstance(request, Session) else "generate"
        return f"{name}/{request.max_new_tokens}/{request.sampling}"
    if request.think_budget is None:
        return kind
    return f"{kind}/think-{request.think_budget}" + (f"/{request.sampling}" if request.sampling else "")


def constrained(requests: Sequence[Request | None]) -> bool:
    """Whether any request is answered by the constrained decoders (Choose, Number), which read
    the model's answer vocabulary."""
    return any(isinstance(request, (Choose, Number)) for request in requests)


def thinking(request: Request) -> bool:
    """Whether the request reasons in a thinking block before its constrained answer."""
    return isinstance(request, (Choose, Number)) and request.think_budget is not None


def first_prompt(request: Request) -> Prompt:
    """The prompt the model sees first (a session's first turn)."""
    return request.turn_prompt(()) if isinstance(request, Session) else request.prompt


def render(benchmark: Benchmark, prompt: Prompt, images: Sequence[Any], think: bool = False,
           options: int = 0) -> ModelRequest:
    """The adapter's request: `prompt` with the decoded question `images` it names, replaced as its
    ablation asks, then transformed by the benchmark's image rule (a replacement goes through the
    same transform the chart would). With `think` it ends inside an open thinking block; `options`:
    a choice's option count (`n_options`)."""
    named = [images[i] for i in prompt.images]
    shown = benchmark.prepare_images(prompt.image_rule, [ablated_image(image, prompt.ablation) for image in named])
    return ModelRequest(messages=prompt.messages, images=tuple(shown), answer_prefix=prompt.answer_prefix,
                        thinking=think, n_options=options)


def n_options(request: Request) -> int:
    """The options a choice is read among (0 for any other request)."""
    return request.n_options if isinstance(request, Choose) else 0


def ablated_image(image: Any, ablation: str) -> Any:
    """A decoded image as an ablation shows it: itself (""), a white image of its size ("blank"),
    or uniform RGB noise of its size seeded by the digest of its pixels ("noise": a rerun shows
    the same noise). ("none" prompts name no image.)"""
    if not ablation:
        return image
    import hashlib

    import numpy as np
    from PIL import Image

    if ablation == "blank":
        return Image.new("RGB", image.size, (255, 255, 255))
    if ablation == "noise":
        seed = int.from_bytes(hashlib.sha256(image.tobytes()).digest()[:8], "little")
        pixels = np.random.default_rng(seed).integers(0, 256, size=(image.size[1], image.size[0], 3), dtype=np.uint8)
        return Image.fromarray(pixels)  # uint8 [H, W, 3]: RGB
    raise ValueError(f"image ablation {ablation!r} replaces no image")


def text_of(prompt: Prompt, think: bool = False) -> ModelRequest:
    """The adapter's request without pixels, to render and count the prompt's text."""
    return ModelRequest(messages=prompt.messages, images=(), answer_prefix=prompt.answer_prefix, thinking=think)


def model_request(benchmark: Benchmark, question: Question, protocol: str) -> ModelRequest:
    """What the model is shown first for `question` (images decoded here): for scripts and tests."""
    return render(benchmark, first_prompt(benchmark.request(question, protocol)), decode_images(question))


def decoding_summary(config: RunConfig, requests: Sequence[Request | None], think_budget: int | None) -> dict[str, Any]:
    """results.json's `decoding`: how many requests of each batch kind the run made (each kind
    names its decoder and budgets), and the run-wide settings they carry."""
    from collections import Counter

    summary: dict[str, Any] = {"requests": dict(Counter(batch_kind(r) for r in requests if r is not None))}
    if constrained(requests):
        summary["decoder"] = DECODER_VERSION
    if think_budget is not None:
        summary["think_budget"] = think_budget
    if config.decode.system_prompt:
        summary["system_prompt"] = config.decode.system_prompt
    if config.decode.gen_kwargs:
        summary["generation"] = dict(config.decode.gen_kwargs)
    return summary


def setting_notes(config: RunConfig, requests: Sequence[Request | None]) -> list[str]:
    """One line for each generation setting the run resolves between two flags or cannot apply,
    never silently: `--gen-kwargs max_new_tokens` over `--max-new-tokens`; sampling settings where
    no request generates text (choices and numbers are read from the logits, and a thinking step
    before them reasons greedily)."""
    notes = []
    generation = dict(config.decode.gen_kwargs)
    budget, flag = generation.get("max_new_tokens"), config.decode.max_new_tokens
    if budget is not None and flag is not None and budget != flag:
        notes.append(f"--gen-kwargs max_new_tokens={budget} is the generation budget; --max-new-tokens {flag} is "
                     "not used (give one of them)")
    sampling = {k: v for k, v in generation.items() if k != "max_new_tokens"}
    if sampling and not any(isinstance(r, (Generate, Session)) for r in requests):
        shown = ",".join(f"{k}={v}" for k, v in sampling.items())
        notes.append(f"--gen-kwargs {shown} has no effect: no question of this run generates text (--protocol "
                     f"{config.protocol} reads its answers from the logits)")
    return notes


def build_requests(benchmark: Benchmark, questions: Sequence[Question], config: RunConfig, think_budget: int | None,
                   max_images: int | None) -> tuple[list[Request | None], dict[int, str]]:
    """Each question's one request, with the run's settings (None for a question that is an
    error already), and the errors of questions whose request cannot be made: a request that
    cannot be built, or one showing more images than the model's family takes."""
    requests: list[Request | None] = []
    errors: dict[int, str] = {}
    for index, question in enumerate(questions):
        request = None
        if not question.error:
            try:
                request = for_run(benchmark.request(question, config.protocol), config, think_budget)
            except Exception as err:  # noqa: BLE001 — a request that cannot be built is that sample's error
                errors[index] = f"bad request: {type(err).__name__}: {err}"
        if request is not None and max_images is not None and len(request_images(request)) > max_images:
            errors[index] = f"too many images: {len(request_images(request))}; this model takes at most {max_images}"
            request = None
        requests.append(request)
    return requests, errors


def shared_requests(todo: Sequence[int], keys: Sequence[str]) -> tuple[list[int], dict[int, list[int]]]:
    """(questions to compute, leader → followers): questions whose requests are identical (one
    key) get one computation, the first of them leading."""
    leaders: dict[str, int] = {}
    followers: dict[int, list[int]] = {}
    for index in todo:
        leader = leaders.setdefault(keys[index], index)
        if leader != index:
            followers.setdefault(leader, []).append(index)
    return list(leaders.values()), followers


KIND_NAMES = {SINGLE: "single-answer choices", MULTI: "multi-answer sets", NUMERICAL: "numbers (the numeric grammar)"}
GENERATION, LOGITS = "generation", "logits"  # samples.parquet `read_by` of generated answers, of in-process constrained ones


def constrained_kind(request: Any) -> str | None:
    """The constrained answer a request asks for (types.py kinds), None for a generated one."""
    if isinstance(request, Choose):
        return MULTI if request.multi else SINGLE
    return NUMERICAL if isinstance(request, Number) else None


def unreadable(model: Any, requests: Sequence[Any], notes: list[str]) -> None:
    """Constrained requests the model declares it cannot read (`Capabilities.constrained`: a served
    model reads what its server gives scores for) refuse the run at start-up in one line, before
    any is sent, saying why (`Capabilities.unread`) and what reads them: no question is left
    unasked and scored wrong. A model that reads choices its own way (`Capabilities.choice_reading`)
    says so in a note."""
    kinds = {constrained_kind(r) for r in requests if r is not None} - {None}
    refused = sorted(kinds - set(model.capabilities.constrained))
    if refused:
        what = " and ".join(KIND_NAMES[k] for k in refused)
        why = model.capabilities.unread or "no logits reach finbench"
        raise ValueError(f"--model {model.source}: {what} cannot be read from this {model.family} model under the "
                         f"constrained protocol ({why}); --protocol official generates and reads them")
    if model.capabilities.choice_reading and SINGLE in kinds:
        notes.append(f"choices read by {model.capabilities.choice_reading}")


def read_by(requests: Sequence[Any], readings: Mapping[str, str] | None) -> list[str]:
    """How each request's answer was read (samples.parquet `read_by`): a constrained one by the
    reading its model declares for its kind (a served model's `fingerprint()["read_by"]`), else
    from finbench's prompt and the model's logits ("logits"); a generated one "generation"; ""
    without a request."""
    declared = readings if isinstance(readings, Mapping) else {}

    def one(request: Any) -> str:
        kind = constrained_kind(request)
        return "" if request is None else GENERATION if kind is None else declared.get(kind, LOGITS)

    return [one(request) for request in requests]
