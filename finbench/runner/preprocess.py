"""Parallel preprocessing: image decode, prompt building and the processor call run in worker
threads (the heavy parts release the GIL; a fork-based process pool deadlocks once torch is
loaded), with batches prefetched while the model works on the current one. The first batch is
prepared in one piece per thread, at once, so the pipeline fill (~5 s on the H200 for 64 charts on
one thread) is one piece's time; its pieces are then joined (`join`, the batch loop's) into the one
batch the plan made, so that a planned batch of N items is one forward of N rows."""

from __future__ import annotations

import io
import logging
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from finbench.core.types import Question
from finbench.models.inputs import ModelInputs

log = logging.getLogger("finbench")
MAX_IMAGE_PIXELS = 64_000_000  # larger images are rejected per sample instead of exhausting memory


class ImageError(ValueError):
    """A question's image cannot be used; becomes that sample's error."""


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image header only, without decoding the pixels."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size


def decode_image(question: Question, n: int) -> Any:
    """The question's image `n` (from 0), decoded to RGB; an `ImageError` naming it otherwise."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(question.images[n])) as image:
            if image.size[0] * image.size[1] > MAX_IMAGE_PIXELS:
                raise ImageError(f"image {n + 1} is {image.size[0]}×{image.size[1]} pixels, over the "
                                 f"{MAX_IMAGE_PIXELS:,} pixel limit")
            return image.convert("RGB")
    except ImageError:
        raise
    except Exception as err:  # noqa: BLE001 — PIL raises many types for corrupt data
        # without PIL's object addresses ("<_io.BytesIO object at 0x7f…>"): the same data gives the same message
        reason = re.sub(r" at 0x[0-9a-f]+", "", str(err))
        raise ImageError(f"image {n + 1} cannot be decoded: {type(err).__name__}: {reason}") from None


def decode_images(question: Question) -> list[Any]:
    """Every image of the question, decoded (scripts, the judge's images, tests)."""
    return [decode_image(question, n) for n in range(len(question.images))]


def decode_shown(question: Question, shown: Sequence[int]) -> dict[int, Any]:
    """Only the images a prompt shows ({image index: decoded image}): a broken image the prompt
    never shows fails nothing."""
    return {n: decode_image(question, n) for n in sorted(set(shown))}


@dataclass
class PreparedBatch:
    indices: list[int]  # questions whose inputs are in `inputs`, in row order
    inputs: Any  # processor output (CPU tensors), None when no question survived
    errors: dict[int, str] = field(default_factory=dict)  # question index → message
    seconds: float = 0.0
    prompts: dict[int, str] = field(default_factory=dict)  # question index → rendered prompt (for samples.parquet)
    on_device: Any = None  # (inputs on the device, the copy's CUDA event) when copied ahead (runner/loop.py)
    images: dict[int, dict[int, Any]] = field(default_factory=dict)  # question index → its decoded images


def prepare_batch(indices: Sequence[int], questions: Sequence[Question], shown: Callable[[int], Sequence[int]],
                  build_request: Callable[[int, dict[int, Any]], Any],
                  prepare: Callable[[list[Any]], Any],
                  decoded: Mapping[int, dict[int, Any]] | None = None) -> PreparedBatch:
    """Decode the images each prompt shows (`shown(index)`: indices into the question's images;
    those in `decoded` are reused), build requests (`build_request(index, decoded images)`) and
    call the processor (`prepare(requests)`) for one batch. A question whose image fails,
    or that the processor rejects (e.g. an aspect ratio over 200), is dropped from the batch with
    its error recorded; the others go on."""
    started = time.perf_counter()
    kept, requests, errors, images = [], [], {}, {}
    for index in indices:
        try:
            images[index] = (decoded or {}).get(index) or decode_shown(questions[index], shown(index))
            requests.append(build_request(index, images[index]))
            kept.append(index)
        except ImageError as err:
            errors[index] = str(err)
        except Exception as err:  # noqa: BLE001 — a prompt that cannot be built is that sample's error
            errors[index] = f"bad request: {type(err).__name__}: {err}"
    try:
        inputs = prepare(requests) if requests else None
    except Exception:  # noqa: BLE001 — find the request the processor rejects, keep the rest
        survivors = []
        for index, request in zip(kept, requests):
            try:
                prepare([request])
                survivors.append((index, request))
            except Exception as err:  # noqa: BLE001
                errors[index] = f"preprocess error: {type(err).__name__}: {err}"
        kept = [index for index, _ in survivors]
        inputs = prepare([request for _, request in survivors]) if survivors else None
    return PreparedBatch(kept, inputs, errors, time.perf_counter() - started,
                         images={i: images[i] for i in kept})


def join_prepared(pieces: Sequence[PreparedBatch], join_inputs: Callable[[list[Any]], Any]) -> PreparedBatch:
    """Prepared pieces of one planned batch as that batch: their rows in order, their errors,
    prompts and images together, the inputs joined by `join_inputs` (which raises ValueError when
    it cannot); the seconds are the pieces' worker seconds and the join's."""
    started = time.perf_counter()
    kept = [piece for piece in pieces if piece.inputs is not None]
    inputs = join_inputs([piece.inputs for piece in kept]) if kept else None
    return PreparedBatch([i for piece in kept for i in piece.indices], inputs,
                         {i: e for piece in pieces for i, e in piece.errors.items()},
                         sum(piece.seconds for piece in pieces) + time.perf_counter() - started,
                         {i: t for piece in pieces for i, t in piece.prompts.items()},
                         images={i: d for piece in pieces for i, d in piece.images.items()})


def join_pieces(pieces: list[PreparedBatch], model: Any) -> list[PreparedBatch]:
    """The first batch's pieces (prepared at once on the worker threads) as the one batch the plan
    made: one forward of all its rows (`ModelInputs.join`, input ids padded with the model's pad
    token), pinned again for a CUDA model. Inputs that cannot be joined (keys whose rows a family
    does not declare, e.g. DeepSeek-VL2's tiles) stay pieces, each its own forward."""
    def joined(parts: list[Any]) -> Any:
        if not all(isinstance(part, ModelInputs) for part in parts):
            raise ValueError("the prepared batches are no ModelInputs")
        inputs = ModelInputs.join(parts, model.pad_token_id)  # none: 0, under the mask
        return inputs.pin() if model.device.type == "cuda" and len(parts) > 1 else inputs

    try:
        return [join_prepared(pieces, joined)]
    except ValueError as err:
        log.debug("the first batch runs as %d pieces: %s", len(pieces), err)
        return list(pieces)


def split_first(batches: Sequence[Sequence[int]], parts: int) -> list[Sequence[int]]:
    """The plan with its first batch cut into up to `parts` consecutive pieces (the rest as planned)."""
    if not batches or parts <= 1 or len(batches[0]) <= 1:
        return list(batches)
    first = list(batches[0])
    size = -(-len(first) // min(parts, len(first)))
    return [first[start:start + size] for start in range(0, len(first), size)] + list(batches[1:])


def prefetch(batches: Sequence[Sequence[int]], work: Callable[[Sequence[int]], PreparedBatch],
             workers: int = 2, depth: int = 2,
             ahead: Callable[[PreparedBatch], None] | None = None,
             join: Callable[[list[PreparedBatch]], list[PreparedBatch]] | None = None) -> Iterator[PreparedBatch]:
    """Yield `work(batch)` for every batch, in order, keeping up to `depth` batches in flight on
    `workers` threads while the caller runs the model on the one it holds. The first batch is
    prepared in `workers` pieces at once (`split_first`); `join(pieces)` makes them the planned
    batch again (without `join`, or when it returns the pieces, they are yielded one by one).
    `ahead(next)` is called on the caller's thread with the next prepared batch, once, when it is
    ready by the time the current one is handed over (a CUDA model copies it to the device on a
    side stream meanwhile: runner/loop.py)."""
    cut = split_first(batches, workers)
    pieces = len(cut) - len(batches) + 1 if batches else 0  # the first batch's
    depth = max(depth, min(workers, len(cut)))  # every piece of the first batch at once
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="finbench-prep") as pool:
        pending: list[Future] = [pool.submit(work, b) for b in cut[:depth]]
        next_batch = len(pending)
        held: list[PreparedBatch] = []
        while pending:
            result = pending.pop(0).result()
            if next_batch < len(cut):
                pending.append(pool.submit(work, cut[next_batch]))
                next_batch += 1
            if join is not None and pieces > 1 and len(held) < pieces:
                held.append(result)
                if len(held) < pieces:
                    continue
                *first, result = join(held)
                yield from first
            if ahead is not None and pending and pending[0].done() and pending[0].exception() is None:
                ahead(pending[0].result())
            yield result
