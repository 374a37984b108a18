"""A prepared batch (`ModelInputs`): what an adapter's `prepare` returns and every later call takes.

The adapter knows its own inputs, so the batch says what each tensor is aligned with, and the
runner asks the batch — never walks it — to pin, move, extend or cut it:
- `pin()`           page-locked host memory (the worker threads of a CUDA run);
- `to(device)`      a copy on the model's device; `record_stream` keeps it alive on a stream;
- `extend(...)`     new tokens appended to every row and the rows re-packed to left padding (thinking);
- `select(rows)`    the batch of some rows only (e.g. a thinking batch whose finished rows leave);
- `join(parts)`     one batch of the rows of several (the first batch's pieces, prepared at once on
                    the worker threads, run as the one forward the plan made: runner/preprocess.py).
Keys: `input_ids` and `attention_mask` [B, T]; `token_keys` are [B, T] too (new tokens are plain
text: 0); `row_keys` are [B, …]; `spans[key]` gives each row's extent along dim 0 of a tensor (or
list) of the batch's images (e.g. Qwen's patches); `derived_keys` are computed from the tokens
(positions) and dropped when the tokens change, `image_derived_keys` from the images (a tower's
indices) and dropped when the rows do: the adapter recomputes what it needs, at once for a joined
batch when the parts carry its `derive` (the function that computed them in the workers).
A key none of these name cannot be cut by rows (`select` refuses it). A batch a server answers
(models/served.py) has no tokens here: once answered it holds `prompt_tokens` and `image_tokens`,
each row's counts as the server's usage reports them (None where it does not), which the runner's
cost reads in place of the attention mask (runner/cost.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

TOKEN_ALIGNED = ("input_ids", "attention_mask")


def pinned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in page-locked host memory (a copy unless it is there already), so that a
    non-blocking copy to the GPU overlaps with work queued before it."""
    return tensor if tensor.is_pinned() else tensor.pin_memory()


class ModelInputs(dict):
    """A mapping of the tensors a family's forward takes (as transformers names them), plus what
    each is aligned with and the rendered prompt text of each row (`texts`, for the run's log)."""

    def __init__(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), *,
                 token_keys: Iterable[str] = (), row_keys: Iterable[str] = (),
                 spans: Mapping[str, Sequence[int]] | None = None, derived_keys: Iterable[str] = (),
                 image_derived_keys: Iterable[str] = (), texts: Sequence[str] = (),
                 derive: Callable[["ModelInputs"], "ModelInputs"] | None = None) -> None:
        super().__init__(data)
        self.token_keys = frozenset(token_keys) & set(self)
        self.row_keys = frozenset(row_keys) & set(self)
        self.spans = {k: tuple(int(n) for n in v) for k, v in (spans or {}).items() if k in self}
        self.derived_keys = frozenset(derived_keys)
        self.image_derived_keys = frozenset(image_derived_keys)
        self.texts = tuple(texts)
        self.derive = derive  # the adapter's: recomputes the derived keys of a joined batch (`join`)

    def like(self, data: Mapping[str, Any], **changes: Any) -> "ModelInputs":
        """New inputs `data` with this batch's alignment (and `changes` to it)."""
        layout = {"token_keys": self.token_keys, "row_keys": self.row_keys, "spans": self.spans,
                  "derived_keys": self.derived_keys, "image_derived_keys": self.image_derived_keys,
                  "texts": self.texts, "derive": self.derive}
        return ModelInputs(data, **{**layout, **changes})

    # ---- host and device ------------------------------------------------------------------------
    def pin(self, pin: Any = None) -> "ModelInputs":
        """Every CPU tensor (and every tensor of a list value) copied into page-locked memory, in
        place; returns self. `pin` replaces `pinned` (tests on machines without CUDA)."""
        pin = pin or pinned
        for key, value in list(self.items()):
            if torch.is_tensor(value):
                self[key] = pin(value)
            elif isinstance(value, list) and value and all(torch.is_tensor(v) for v in value):
                self[key] = [pin(v) for v in value]
        return self

    def to(self, device: torch.device) -> "ModelInputs":
        """A copy with every tensor value on `device` (non-blocking from pinned memory on CUDA)."""
        blocking = device.type != "cuda"
        return self.like({k: v.to(device, non_blocking=not blocking) if torch.is_tensor(v) else v
                          for k, v in self.items()})

    def record_stream(self, stream: Any) -> None:
        """Mark every CUDA tensor as used on `stream`, so the allocator keeps it until that stream is
        done with it (inputs copied on a side stream, used on the model's)."""
        for value in self.values():
            for tensor in value if isinstance(value, list) else [value]:
                if torch.is_tensor(tensor) and tensor.is_cuda:
                    tensor.record_stream(stream)

    # ---- tokens and rows ----------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return int(self["input_ids"].shape[0])

    def extend(self, token_ids: torch.Tensor, mask: torch.Tensor, pad_token_id: int | None) -> "ModelInputs":
        """Append `token_ids` [B, N] where `mask` [B, N] is 1 to each row, after its real tokens, and
        re-pack every row to left padding (a stable sort on "is real" moves every pad to the front,
        keeping the order); token keys get 0 for the new tokens, derived keys are dropped."""
        old_mask = self["attention_mask"]
        full_mask = torch.cat([old_mask, mask.to(old_mask.dtype)], dim=1)
        length = int(full_mask.sum(1).max())
        order = torch.sort(full_mask.to(torch.int8), dim=1, stable=True).indices[:, -length:]
        data = {k: v for k, v in self.items() if k not in self.derived_keys}
        data["attention_mask"] = full_mask.gather(1, order)
        ids = self["input_ids"]
        data["input_ids"] = torch.cat([ids, token_ids.to(ids.device, ids.dtype)], dim=1).gather(1, order)
        if pad_token_id is not None:  # pads out of the mask: the pad token, as the processor pads
            data["input_ids"] = torch.where(data["attention_mask"].bool(), data["input_ids"], pad_token_id)
        for key in self.token_keys:
            value = self[key]
            data[key] = torch.cat([value, value.new_zeros(token_ids.shape)], dim=1).gather(1, order)
        return self.like(data, derived_keys=frozenset())

    def select(self, rows: Sequence[int]) -> "ModelInputs":
        """The batch of `rows` only (in that order), its columns of padding only trimmed away; derived
        and image-derived keys dropped. Raises ValueError for a key whose rows the batch does not know."""
        keep = torch.as_tensor(list(rows), dtype=torch.long)
        mask = self["attention_mask"].index_select(0, keep.to(self["attention_mask"].device))
        width = int(mask.sum(1).max()) if len(rows) else 0
        data: dict[str, Any] = {}
        spans: dict[str, tuple[int, ...]] = {}
        for key, value in self.items():
            if key in self.derived_keys or key in self.image_derived_keys:
                continue
            if key in TOKEN_ALIGNED or key in self.token_keys:
                data[key] = value.index_select(0, keep.to(value.device))[:, value.shape[1] - width:]
            elif key in self.row_keys:
                data[key] = value.index_select(0, keep.to(value.device))
            elif key in self.spans:  # rows without images have none: the key goes, as the processor leaves it out
                if sum(self.spans[key][r] for r in rows):
                    data[key], spans[key] = _select_spans(value, self.spans[key], list(rows))
            elif torch.is_tensor(value) or isinstance(value, list):
                raise ValueError(f"the prepared batch cannot select rows of {key!r}: its rows are not declared")
            else:
                data[key] = value
        return self.like(data, spans=spans, derived_keys=frozenset(), image_derived_keys=frozenset(),
                         texts=tuple(self.texts[r] for r in rows) if self.texts else ())

    @staticmethod
    def join(parts: Sequence["ModelInputs"], pad_token_id: int | None = None) -> "ModelInputs":
        """One batch of the rows of `parts`, in order, as one call of the processor on all of them
        gives it: token-aligned keys left-padded to the widest part (input ids with `pad_token_id`,
        else 0; masks and token keys with 0), row keys and the per-image tensors (`spans`)
        concatenated along dim 0 (a part without images has extents 0), other values equal in
        every part; derived keys dropped, then recomputed by the parts' `derive` when they have
        one. Raises ValueError for a key whose rows are not declared or that differs."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        if any("input_ids" not in part for part in parts):
            raise ValueError("the prepared batches cannot be joined without their input ids")
        width = max(int(part["input_ids"].shape[1]) for part in parts)
        dropped = first.derived_keys | first.image_derived_keys
        keys = [k for k in dict.fromkeys(k for part in parts for k in part) if k not in dropped]
        data: dict[str, Any] = {}
        spans: dict[str, tuple[int, ...]] = {}
        for key in keys:
            present = [part for part in parts if key in part]
            if key in TOKEN_ALIGNED or key in first.token_keys:
                fill = (pad_token_id or 0) if key == "input_ids" else 0
                data[key] = torch.cat([_left_pad(part[key], width, fill) for part in _all(parts, key)])
            elif key in first.row_keys:
                rows = [part[key] for part in _all(parts, key)]
                if len({tuple(row.shape[1:]) for row in rows}) > 1:  # e.g. images of other sizes, unpadded
                    raise ValueError(f"the prepared batches cannot be joined on {key!r}: its rows differ in shape")
                data[key] = torch.cat(rows)
            elif any(key in part.spans for part in present):
                values = [part[key] for part in present]
                data[key] = sum(values, []) if isinstance(values[0], list) else torch.cat(values)
                spans[key] = tuple(n for part in parts for n in (part.spans.get(key) or [0] * part.n_rows))
            elif torch.is_tensor(first.get(key)) or isinstance(first.get(key), list):
                raise ValueError(f"the prepared batches cannot be joined on {key!r}: its rows are not declared")
            elif any(part.get(key) != first.get(key) for part in parts):
                raise ValueError(f"the prepared batches differ in {key!r}")
            else:
                data[key] = first[key]
        joined = first.like(data, spans=spans, token_keys=frozenset().union(*(p.token_keys for p in parts)),
                            texts=tuple(t for part in parts for t in part.texts))
        return first.derive(joined) if first.derive is not None else joined


def _all(parts: Sequence[ModelInputs], key: str) -> Sequence[ModelInputs]:
    if any(key not in part for part in parts):
        raise ValueError(f"the prepared batches cannot be joined: {key!r} is missing from some of them")
    return parts


def _left_pad(value: torch.Tensor, width: int, fill: int) -> torch.Tensor:
    """[B, T] → [B, width] with `fill` before the tokens (the batch is left-padded)."""
    if value.shape[1] == width:
        return value
    return torch.cat([value.new_full((value.shape[0], width - value.shape[1]), fill), value], dim=1)


def _select_spans(value: Any, extents: Sequence[int], rows: Sequence[int]) -> tuple[Any, tuple[int, ...]]:
    """The parts of `value` (along dim 0) that belong to `rows`, given each row's extent."""
    starts = [0]
    for n in extents:
        starts.append(starts[-1] + n)
    picked = [i for r in rows for i in range(starts[r], starts[r + 1])]
    kept = tuple(extents[r] for r in rows)
    if isinstance(value, list):
        return [value[i] for i in picked], kept
    return value.index_select(0, torch.as_tensor(picked, dtype=torch.long, device=value.device)), kept
