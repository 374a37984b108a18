"""The token ids constrained decoding and generation rely on, from a Hugging Face tokenizer."""

from __future__ import annotations

from typing import Any, Sequence


def single_token_ids(tokenizer: Any, texts: Sequence[str], source: str) -> list[int]:
    """Token ids of strings that must each be exactly one token; fails loudly otherwise,
    because a letter split in two would make its logit meaningless."""
    ids = []
    for text in texts:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if not encoded:
            raise ValueError(f"{source}: the tokenizer turns {text!r} into no tokens at all; are the "
                             "tokenizer files (tokenizer.json, tokenizer_config.json) in the model folder?")
        if len(encoded) != 1:
            raise ValueError(f"{source}: {text!r} is {len(encoded)} tokens {encoded}; "
                             "constrained decoding needs it to be a single token")
        ids.append(encoded[0])
    return ids


def stop_token_ids(tokenizer: Any, generation_config: Any) -> list[int]:
    """Tokens that end generation: EOS, the chat turn's end, the generation config's EOS."""
    ids = {tokenizer.eos_token_id}
    for text in ("<|im_end|>", "<|endoftext|>"):
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == 1:
            ids.add(encoded[0])
    generation_eos = getattr(generation_config, "eos_token_id", None)
    ids.update(generation_eos if isinstance(generation_eos, list) else [generation_eos])
    return sorted(i for i in ids if i is not None)


def end_token_ids(tokenizer: Any, stops: Sequence[int]) -> list[int]:
    """Tokens that may end a constrained answer: the stop tokens and a newline."""
    newline = tokenizer.encode("\n", add_special_tokens=False)
    return sorted(set(stops) | (set(newline) if len(newline) == 1 else set()))


def _declared(source: Any) -> dict[str, Any]:
    """A config's or processor's own attributes (none for an object without them)."""
    try:
        return dict(vars(source))
    except TypeError:
        return {}


def reserved_token_ids(tokenizer: Any, config: Any, processor: Any) -> frozenset[int]:
    """Ids that text a model generated must never carry back into a prompt: the tokenizer's special
    tokens (its own and every added token marked special) and the placeholders the model expands
    or reads positions from — the config's `*_token_id` / `*_token_index` (its text config's too)
    and the processor's `*_token` strings (image, video, begin/end of image). Generated reasoning
    holding one (a Gemma 4 reasoning its image token) would otherwise be one more image token the
    answer step has no features for."""
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", None) or () if isinstance(i, int)}
    ids |= {int(i) for i, token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
            if getattr(token, "special", False)}
    names = []
    for source in (config, getattr(config, "text_config", None), processor):
        for key, value in _declared(source).items():
            if key.endswith(("_token_id", "_token_index")) and isinstance(value, int) and not isinstance(value, bool):
                ids.add(value)
            elif key.endswith("_token") and isinstance(value, str) and value:
                names.append(value)
    unknown = getattr(tokenizer, "unk_token_id", None)
    for name in names:
        found = tokenizer.convert_tokens_to_ids(name)
        if isinstance(found, int) and found != unknown and found >= 0:
            ids.add(found)
    return frozenset(i for i in ids if i >= 0)
