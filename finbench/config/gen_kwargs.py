"""`--gen-kwargs`: the generation settings a user may set, parsed once into sorted (key, value)
pairs (part of a generated request, so of its cache key). Torch-free: checked before any import."""

from __future__ import annotations

from typing import Any

GENERATION_KEYS = {"max_new_tokens": int, "temperature": float, "top_p": float, "top_k": int}


def parse_gen_kwargs(text: str) -> tuple[tuple[str, Any], ...]:
    """`max_new_tokens=64,temperature=0.7` → (("max_new_tokens", 64), ("temperature", 0.7)); one
    clear error for an unknown key or a bad value. Greedy decoding is the default."""
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in GENERATION_KEYS:
            raise ValueError(f"--gen-kwargs {text!r}: expected key=value pairs with keys "
                             f"{', '.join(GENERATION_KEYS)}")
        if key in dict(pairs):  # `--gen-kwargs temperature=0.7 --gen-kwargs temperature=0` would keep one silently
            raise ValueError(f"--gen-kwargs {text!r}: {key} is given twice")
        try:
            pairs.append((key, GENERATION_KEYS[key](value.strip())))
        except ValueError:
            raise ValueError(f"--gen-kwargs: {key}={value.strip()!r} is not a {GENERATION_KEYS[key].__name__}") from None
    return tuple(sorted(pairs))
