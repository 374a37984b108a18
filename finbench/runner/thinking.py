"""The thinking step: reasoning before a constrained answer, for models with a thinking block.

A thinking request's prompt ends inside an open block (`ModelRequest.thinking`: the chat template
opens it, or the adapter adds the open tag). Then, for a whole batch at once:
1. greedy generation (left padding) for at most `budget` tokens; a row finishes early when it emits
   the close tag or a stop token, and finished rows are dropped from the batch every few steps
   (models/compaction.py; `compact_every=0`: the adapter's `generate_ids` instead);
2. each row keeps its reasoning up to (not including) that tag or stop token; a row that stopped
   without closing, or ran out of budget, gets the close tag appended — the block is always closed;
3. the batch is rebuilt as prompt + reasoning + close tag + "\\n\\n" + answer prefix, re-packed to
   left padding (`ModelInputs.extend`: the batch knows its token-aligned inputs), and handed to
   the ordinary constrained decoders (runner/decoding.py). The reasoning goes in as the generated
   ids — never decoded and tokenised again — less the adapter's `reserved_token_ids` (special
   tokens, image placeholders: a reasoning that emits its image token would leave the answer step
   an image token without features). A caller that drops finished rows cuts the batch with
   `ModelInputs.select`.
The rebuilt batch is prefilled again from scratch: it costs one more prompt prefill, but keeps the
answer step identical to the instruct path (same decoders, same positions, no cache surgery).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Mapping, Sequence

import torch

from finbench.models.compaction import COMPACT_EVERY, greedy_ids
from finbench.models.contract import ModelAdapter
from finbench.models.inputs import ModelInputs

AFTER_CLOSE = "\n\n"  # what Qwen3 templates put between </think> and the answer


@dataclass(frozen=True)
class Reasoning:
    text: str
    tokens: int  # generated tokens, including the model's own close tag or stop token
    cut: bool  # the budget ran out with the block still open


def _no_stage(name: str) -> ContextManager[Any]:
    return contextlib.nullcontext()


@torch.inference_mode()
def think(model: ModelAdapter, inputs: ModelInputs, budget: int, answer_prefixes: Sequence[str],
          stage: Callable[[str], ContextManager[Any]] = _no_stage,
          compact_every: int = COMPACT_EVERY,
          sampling: Mapping[str, Any] | None = None) -> tuple[ModelInputs, list[Reasoning]]:
    """Reason for up to `budget` tokens, close the block, append the answer prefix.

    `inputs`: a prepared batch on the model's device whose prompts end inside the open block.
    Returns the rebuilt inputs (`ModelInputs.extend`) and one `Reasoning`
    per row. With budget 0 nothing is generated: the block is closed at once. `sampling`
    (temperature, top_p, top_k; --samples > 1 only, finbench/models/sampled_decoding.py) samples the reasoning
    instead of taking the argmax."""
    tags = model.thinking_token_ids()
    if tags is None:
        raise ValueError(f"{model.source}: this model has no thinking block")
    close_id = tags[1]
    input_ids, mask = inputs["input_ids"], inputs["attention_mask"]
    batch, device = input_ids.shape[0], input_ids.device
    if budget > 0:
        with stage("think"):
            stops = sorted(set(model.stop_token_ids()) | {close_id})
            # finished rows dropped every few steps (models/compaction.py); 0: transformers' generate
            generated = (greedy_ids(model, inputs, budget, stops, compact_every, sampling) if compact_every or sampling
                         else model.generate_ids(inputs, budget, stops))
    else:
        generated = input_ids.new_zeros((batch, 0))
    width = generated.shape[1]
    is_stop = torch.isin(generated, torch.tensor(sorted(set(model.stop_token_ids()) | {close_id}), device=device))
    ended = is_stop.any(-1)
    # argmax of the first stop; a column of zeros keeps argmax defined when nothing was generated
    first = torch.cat([is_stop, is_stop.new_ones((batch, 1))], dim=1).int().argmax(-1)
    first_stop = torch.where(ended, first, torch.full_like(first, width))
    kept = first_stop  # reasoning tokens kept: everything before the close tag / stop token
    n_generated = torch.where(ended, first_stop + 1, first_stop)
    cut = ~ended & (n_generated >= budget) & (budget > 0)
    columns = torch.arange(width, device=device)
    # the reasoning carried into the answer prompt as ids, never re-tokenised text; without the ids
    # no prompt may hold (a special token, an image placeholder: one more image token than images)
    reserved = torch.tensor(sorted(model.reserved_token_ids()), dtype=generated.dtype, device=device)
    reasoning_mask = (columns[None, :] < kept[:, None]) & ~torch.isin(generated, reserved)

    close_tag = model.capabilities.thinking_tags[1]
    suffixes = [model.encode(close_tag + AFTER_CLOSE + prefix) for prefix in answer_prefixes]
    suffix_width = max(len(s) for s in suffixes)
    suffix_ids = torch.zeros((batch, suffix_width), dtype=input_ids.dtype)
    suffix_mask = torch.zeros((batch, suffix_width), dtype=mask.dtype)
    for row, ids in enumerate(suffixes):  # one short list per row: the answer prefix may differ
        suffix_ids[row, :len(ids)] = torch.tensor(ids, dtype=input_ids.dtype)
        suffix_mask[row, :len(ids)] = 1
    suffix_ids, suffix_mask = suffix_ids.to(device), suffix_mask.to(device)

    # the reasoning kept and the suffix after every row's real tokens, re-packed to left padding
    # by the batch itself (token-aligned inputs extended, positions dropped for the adapter)
    new_ids = torch.cat([generated.to(input_ids.dtype), suffix_ids], dim=1)
    rebuilt = inputs.extend(new_ids, torch.cat([reasoning_mask.to(mask.dtype), suffix_mask], dim=1),
                            model.pad_token_id)

    kept_rows = [row[:k] for row, k in zip(generated.tolist(), kept.tolist())]
    texts = model.decode(kept_rows)
    reasoning = [Reasoning(text=t, tokens=int(n), cut=bool(c))
                 for t, n, c in zip(texts, n_generated.tolist(), cut.tolist())]
    return rebuilt, reasoning
