"""Greedy reasoning with finished rows dropped: the thinking step's decode loop.

The batch is prefilled once; each step projects the last hidden states onto the whole vocabulary
and takes the argmax (greedy, as `generate(do_sample=False)`), then feeds the chosen tokens back
through `decode_step`. Every `every` steps the rows that have emitted a stop token are dropped from
the step and from the decode state, once at least a quarter of the rows are done (KV cache or static KV buffers, masks, positions:
`DecodeState.select`), so finished rows stop costing. A row's tokens do not depend on the other
rows of its batch, so the result equals the loop without compaction (tests/test_compaction.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from finbench.kernels.compaction import compaction_due, live_rows, worth_compacting
from finbench.models.sampled_decoding import next_tokens

if TYPE_CHECKING:
    from finbench.models.contract import ModelAdapter

COMPACT_EVERY = 8  # steps between compactions in the thinking loop


@torch.inference_mode()
def greedy_ids(model: "ModelAdapter", inputs: Any, budget: int, stop_token_ids: Sequence[int],
               every: int = COMPACT_EVERY, sampling: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Greedy token ids [B, ≤ budget] after each prompt of `inputs` (a prepared batch on the device),
    a row stopping at any of `stop_token_ids` (its later positions hold the pad token): the result
    of `generate_ids`. `every`: steps between compactions (0: never compact). `sampling`
    (temperature > 0, top_p, top_k) draws each token instead (finbench/models/sampled_decoding.py `next_tokens`)."""
    hidden, state = model.prefill(inputs)
    device = hidden.device
    head = model.output_rows(torch.arange(model.vocabulary_size(), device=device))
    pad = model.pad_token_id if model.pad_token_id is not None else stop_token_ids[0]
    stops = torch.tensor(sorted(set(stop_token_ids)), device=device)
    batch = hidden.shape[0]
    out = torch.full((batch, max(budget, 0)), pad, dtype=torch.long, device=device)
    rows = torch.arange(batch, device=device)  # the original row of each row still in the batch
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    ends = torch.full((batch,), max(budget, 0), dtype=torch.long, device=device)  # tokens up to the stop
    width = 0
    for step in range(budget):
        logits = model.logits(hidden, head)
        token = torch.where(finished, pad, next_tokens(logits, sampling) if sampling else logits.argmax(-1))
        out[rows, step] = token
        width = step + 1
        stopped = torch.isin(token, stops) & ~finished
        ends[rows] = torch.where(stopped, step + 1, ends[rows])
        finished = finished | stopped
        if step == budget - 1:
            break
        # the host looks (a sync) only every `every` steps: the steps between queue up on the device
        if not every or compaction_due(step, every):
            if bool(finished.all()):
                break
            if every and worth_compacting(int(finished.sum()), len(rows)):
                keep = live_rows(finished)
                state, hidden, rows, finished, token = (state.select(keep), hidden[keep], rows[keep],
                                                        finished[keep], token[keep])
        hidden = model.decode_step(state, token)
    # as generate: as wide as the longest row (a batch that finished between looks drops the pads)
    return out[:, :min(width, int(ends.max())) if batch else width]
