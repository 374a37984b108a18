"""What a served model (models/served.py) is sent and how its answers are read: OpenAI-compatible
chat-completion and System One decision bodies built from finbench's prompts (images as lossless
PNG data URLs), the log-probabilities (of given token ids, or the top 20) and the token counts read
back from them. Pure functions: the tests replay documented answer shapes through them."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from finbench.core.types import OPTION_LETTERS, ModelRequest
from finbench.models.served_client import ServedError

TOP_LOGPROBS = 20  # the most vLLM and SGLang return by default (vLLM: --max-logprobs)
MAX_ASSETS = 4  # images per System One request


@dataclass(frozen=True)
class ServedRow:
    """One request as the server takes it: OpenAI chat messages (images as data URLs), the answer
    prefix, the option count of a choice, and the same prompt as System One text and assets."""

    messages: tuple[dict[str, Any], ...]
    answer_prefix: str
    n_options: int
    state: str
    assets: tuple[tuple[str, str], ...]  # (placeholder, base64 PNG)


def served_row(request: ModelRequest) -> ServedRow:
    """The request's messages with each image placeholder filled, in order, by its image as a PNG
    data URL; the same text and images as System One state and assets (`<image-k>`)."""
    encoded = [_png_base64(image) for image in request.images]
    messages, state_lines, filled = [], [], 0
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            state_lines.append(content)
            continue
        parts, text = [], []
        for part in content:
            if part.get("type") == "image":
                if filled >= len(encoded):
                    raise ValueError("the prompt shows more images than the question has")
                parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + encoded[filled]}})
                filled += 1
                text.append(f"<image-{filled}>")
            else:
                parts.append({"type": "text", "text": part.get("text", "")})
                text.append(part.get("text", ""))
        messages.append({"role": message["role"], "content": parts})
        state_lines.append("".join(text))
    assets = tuple((f"<image-{k + 1}>", data) for k, data in enumerate(encoded[:filled]))
    return ServedRow(tuple(messages), request.answer_prefix, request.n_options, "\n\n".join(state_lines), assets)


def decision_body(model_id: str, row: ServedRow, media: str = "assets") -> dict[str, Any]:
    """One System One choice question over the prompt (its options' letters as the choices), its
    images in the field the server reads (`media`): "assets" keyed by their placeholders in the
    state (transformers serve), or "images", a list of data URLs (vLLM, which ignores "assets")."""
    if len(row.assets) > MAX_ASSETS:
        raise ServedError(f"the decision endpoint takes at most {MAX_ASSETS} images; this question shows "
                          f"{len(row.assets)}")
    criteria = {letter: None for letter in OPTION_LETTERS[:row.n_options]}
    body = {"model": model_id, "state": row.state, "questions": {"answer": {"type": "choice", "criteria": criteria}}}
    if media == "images":
        return {**body, "images": ["data:image/png;base64," + data for _, data in row.assets]}
    return {**body, "assets": {name: {"type": "image", "format": "png", "data_base64": data} for name, data in row.assets}}


def chat_body(model_id: str, row: ServedRow, thinking: bool = False, answered: str = "") -> dict[str, Any]:
    """finbench's prompt as a chat completion: its messages, then its answer prefix and the answer
    begun so far (`answered`) as a final assistant message the reply continues
    (`continue_final_message`); the template's thinking switch set."""
    begun = row.answer_prefix + answered
    messages = list(row.messages) + ([_assistant(begun)] if begun else [])
    extra = {"continue_final_message": True, "add_generation_prompt": False} if begun else {}
    return {"model": model_id, "messages": messages, "chat_template_kwargs": {"enable_thinking": thinking}, **extra}


def logprobs_body(model_id: str, row: ServedRow, thinking: bool = False) -> dict[str, Any]:
    """A one-token greedy completion continuing finbench's constrained prompt, with the top log-probs."""
    return {**chat_body(model_id, row, thinking), "max_tokens": 1, "temperature": 0, "logprobs": True,
            "top_logprobs": TOP_LOGPROBS}


def token_logprobs_body(model_id: str, row: ServedRow, ids: Sequence[int], answered: str = "",
                        thinking: bool = False) -> dict[str, Any]:
    """A one-token greedy completion continuing finbench's prompt and the answer begun, asking the
    full-vocabulary log-probability of each of `ids` at the reply's next token (vLLM's
    `logprob_token_ids`), with tokens named by id (`return_tokens_as_token_ids`)."""
    return {**chat_body(model_id, row, thinking, answered), "max_tokens": 1, "temperature": 0, "logprobs": True,
            "logprob_token_ids": sorted(set(ids)), "return_tokens_as_token_ids": True}


def token_logprobs(answer: dict[str, Any], ids: Sequence[int]) -> dict[int, float]:
    """The log-probability of each of `ids` from an answer to `token_logprobs_body`: vLLM lists the
    sampled token, then each id asked for, once (an id equal to the sampled one is not repeated),
    as "token_id:N" in choices[0].logprobs.content[0].top_logprobs. An id missing (a server that
    ignores `logprob_token_ids`) is a ServedError, never filled in."""
    try:
        listed = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        found = {int(str(e["token"]).removeprefix("token_id:")): float(e["logprob"]) for e in listed}
    except (KeyError, IndexError, TypeError, ValueError):
        raise ServedError("the server returned no log-probabilities of token ids for the answer token") from None
    missing = sorted(set(ids) - set(found))
    if missing:
        raise ServedError(f"the server returned no log-probability for token ids {missing[:5]} (it ignores "
                          "logprob_token_ids)")
    return {i: found[i] for i in ids}


def usage_counts(answer: Any) -> tuple[int | None, int | None, int | None]:
    """(prompt, image, generated) tokens an answer's `usage` reports, None where it does not: a chat
    completion's prompt_tokens, prompt_tokens_details.multimodal_tokens.image (vLLM with
    --enable-prompt-tokens-details; 0 for a prompt without images) and completion_tokens, or a
    decision endpoint's input_tokens and output_tokens."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return None, None, None
    prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    generated = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    details = usage.get("prompt_tokens_details")
    image = None
    if isinstance(details, dict) and "multimodal_tokens" in details:
        image = _count((details.get("multimodal_tokens") or {}).get("image", 0))
    return prompt, image, generated


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def logprobs_of_letters(answer: dict[str, Any], n_options: int) -> list[float]:
    """Each option letter's log-probability from a chat completion's first-token `top_logprobs`
    (OpenAI shape: choices[0].logprobs.content[0].top_logprobs[{token, logprob}]), its bare and
    space-prefixed spellings combined (logsumexp); an option absent from them is a ServedError."""
    try:
        top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise ServedError("the server returned no logprobs for the answer token (it ignores `logprobs`; "
                          "a decision endpoint reads choices there)") from None
    by_token: dict[str, float] = {}
    for entry in top:
        by_token[str(entry.get("token"))] = float(entry.get("logprob"))
    rows = {}
    for letter in OPTION_LETTERS[:n_options]:
        found = [by_token[t] for t in (letter, " " + letter) if t in by_token]
        if found:
            rows[letter] = float(torch.logsumexp(torch.tensor(found, dtype=torch.float64), 0))
    return option_logprobs({k: math.exp(v) for k, v in rows.items()}, n_options,
                           f"the {len(top)} most likely first tokens the server returned")


def option_logprobs(probabilities: dict[str, Any], n_options: int, where: str) -> list[float]:
    """log p of each of the item's option letters, in order; a letter missing from `probabilities`
    is a ServedError (the item's error), never filled in."""
    letters = OPTION_LETTERS[:n_options]
    missing = [c for c in letters if c not in probabilities]
    if missing:
        raise ServedError(f"option {', '.join(missing)} not among {where}; not renormalised over the others")
    return [math.log(float(probabilities[c])) if float(probabilities[c]) > 0 else -math.inf for c in letters]


def generation_settings(max_new_tokens: int, sampling: dict[str, Any] | None) -> dict[str, Any]:
    """max_tokens and the sampling of a chat completion: temperature 0 (greedy) unless a
    temperature is given, with top_p (top_k is not an OpenAI field: vLLM and SGLang take it as an
    extension, transformers serve refuses unknown fields, so it goes only when given)."""
    sampling = dict(sampling or {})
    settings: dict[str, Any] = {"max_tokens": int(max_new_tokens), "temperature": 0.0}
    if float(sampling.get("temperature") or 0) > 0:
        settings["temperature"] = float(sampling["temperature"])
        settings.update({k: sampling[k] for k in ("top_p", "top_k") if sampling.get(k) is not None})
    return settings


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def prompt_part_text(message: Any, image: str) -> str:
    """A message's text, each image part written as `image`."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(image if p.get("type") == "image" else p.get("text", "") for p in content)


def _png_base64(image: Any) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")  # lossless: the server sees the pixels finbench prepared
    return base64.b64encode(buffer.getvalue()).decode("ascii")
