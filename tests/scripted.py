"""A loaded tiny model whose free generation is scripted: every generated reply is `reply(prompt)`
of the prompt it answers (the rendered text, image placeholders unexpanded), everything else —
rendering, preprocessing, the constrained decoders — is the real model's. A run through the real
engine then reads, judges and scores replies written the ways models write them."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence


def pick(prompt: str, pool: Sequence[str], salt: str = "") -> str:
    """One of `pool`, the same for the same prompt (a stable hash, not Python's)."""
    digest = hashlib.sha256((salt + prompt).encode("utf-8", "backslashreplace")).digest()
    return pool[int.from_bytes(digest[:4], "big") % len(pool)]


class Scripted:
    """`inner` with `generate` replaced by `reply(prompt)`; its fingerprint names the script, so
    no cache entry of the real model's generation is served in its place (nor the reverse)."""

    def __init__(self, inner: Any, reply: Callable[[str], str], name: str) -> None:
        self.inner, self.reply, self.name = inner, reply, name

    def generate(self, inputs: Any, max_new_tokens: int, sampling: Any = None) -> tuple[list[str], list[int]]:
        texts = [self.reply(text) for text in inputs.texts]
        return texts, [1] * len(texts)

    def fingerprint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {**self.inner.fingerprint(*args, **kwargs), "scripted": self.name}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
