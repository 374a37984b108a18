"""Cache keys, computed from the request itself.

A sample's key hashes the model as the cache knows it (its fingerprint), the benchmark's prompt
version, the constrained decoders' reading of the vocabulary, and the whole request the question
makes (finbench/core/requests.py): its type, prompt messages, the digests of the images it shows, and
every setting it carries (options, budgets, sampling, thinking, system prompt). A setting that
changes an answer is a field of the request, so it cannot stay out of the key. The gold answer and
the grouping metadata are not in the request: fixing a gold label keeps the cache valid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from finbench.config.specs import RunConfig
from finbench.core.requests import Choose, Number, Request, Session
from finbench.core.types import Question

# How the constrained decoders read the vocabulary (runner/decoding.py); bump when that changes.
DECODER_VERSION = "letters bare+space; separator ','; ends eos, end of turn, newline"


def model_identity(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint as the cache knows a model: a local folder by its content digest
    (`weights`), not by how its path was spelled (./m, m and /abs/m, or the folder moved, share
    their answers); a hub id by its name and revision."""
    return {k: v for k, v in fingerprint.items() if not (k == "source" and fingerprint.get("weights"))}


def model_arguments(config: RunConfig) -> dict[str, Any]:
    """Loading arguments that change outputs, for the cache key (the family's fingerprint may
    not know them)."""
    template = Path(config.decode.chat_template).read_text(encoding="utf-8") if config.decode.chat_template else ""
    return {"revision": config.load.revision or "", "trust_remote_code": config.load.trust_remote_code,
            "attn_implementation": config.load.attn_implementation or "",
            "chat_template": hashlib.sha256(template.encode()).hexdigest()[:16] if template else ""}


def request_images(request: Request) -> tuple[int, ...]:
    """The question images a request shows (indices into `Question.images`)."""
    return request.images if isinstance(request, Session) else request.prompt.images


def request_payload(request: Request, question: Question) -> dict[str, Any]:
    """Everything of `request` that reaches the model, as JSON-ready data: images by content.
    The studies' fields (a rotation of the options, an image ablation, a probe: runner/studies.py)
    are in it only when set, so the requests of a run without studies keep the keys they always had."""
    digests = [hashlib.sha256(question.images[i]).hexdigest() for i in request_images(request)]
    payload = {"type": type(request).__name__, **dataclasses.asdict(request), "image_digests": digests}
    for name in ("rotation", "probe"):
        if not payload.get(name):
            payload.pop(name, None)
    if isinstance(request, (Choose, Number)) and not payload.get("sampling"):  # greedy thinking, or none
        payload.pop("sampling", None)
    if isinstance(payload.get("prompt"), dict) and not payload["prompt"].get("ablation"):
        payload["prompt"].pop("ablation", None)
    return payload


def sample_key(fingerprint: Mapping[str, Any], prompt_version: str, request: Request, question: Question) -> str:
    payload = json.dumps({"model": model_identity(fingerprint), "prompt": prompt_version, "decoder": DECODER_VERSION,
                          "request": request_payload(request, question)}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()
