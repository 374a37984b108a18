"""The batch loop: token estimates for batching, preprocessing (in worker threads), and decoding
each batch by its requests' type, with out-of-memory backoff and per-sample failure isolation.

Dispatch is on the request type (finbench/core/requests.py), one decoder per batch kind: `Choose` → `decode_single` /
`decode_multi`, `Number` → `decode_numerical`, `Generate` → the adapter's `generate`, `Session` → turn by turn
(runner/sessions.py). A request with a thinking budget first reasons (runner/thinking.py), then the same decoders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
from typing import Any, Sequence

import torch

from finbench.benchmarks.base import Benchmark
from finbench.config.run_settings import seed_of
from finbench.config.specs import BatchSpec, RunConfig
from finbench.core.encodable import encodable
from finbench.core.requests import Choose, Generate, Number, Prompt, Request, Session, is_generated
from finbench.core.types import Prediction, Question
from finbench.models.contract import GenerationInterrupted, ModelAdapter
from finbench.models.inputs import ModelInputs
from finbench.models.sampled_decoding import SeedStreams
from finbench.runner.batching import Item
from finbench.runner.copy_ahead import CopyAhead
from finbench.runner.cost import RowCounts, with_costs
from finbench.runner.decoding import AnswerVocabulary, decode_multi, decode_numerical, decode_single
from finbench.runner.preprocess import PreparedBatch, image_size, join_pieces, prepare_batch
from finbench.runner.run_requests import batch_kind, first_prompt, n_options, render, text_of, thinking
from finbench.runner.sessions import continue_sessions
from finbench.runner.thinking import think
from finbench.runner.timing import StageTimer, Throughput

AUTO_BATCH_START = 64  # --batch-size auto starts here and halves on out-of-memory
log = logging.getLogger("finbench")


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C while a batch ran, carrying the predictions of its rows that had finished (question index →
    prediction): the engine commits them before it stops, so an interrupt keeps them."""

    def __init__(self, predictions: dict[int, Prediction]) -> None:
        super().__init__()
        self.predictions = predictions


class BatchLoop:
    """Per-batch work for one run. `prepare` is thread-safe; `run` runs on the model's thread."""

    def __init__(self, model: ModelAdapter, benchmark: Benchmark, questions: Sequence[Question],
                 requests: Sequence[Request | None], config: RunConfig, vocab: AnswerVocabulary | None,
                 timer: StageTimer, read_answers: bool = True) -> None:
        self.model, self.benchmark, self.questions, self.requests = model, benchmark, questions, requests
        self.config, self.vocab, self.timer = config, vocab, timer
        self.read_answers = read_answers  # False: replies kept as generated (the judge's verdicts)
        self.throughput = Throughput(timer)
        if not model.capabilities.flop_count:  # "not counted" from the start, also when no batch runs
            self.throughput.flops = None
        self.max_batch = first_rows(config.batching)
        self._copies = CopyAhead(model.device, model.to_device)  # CUDA: the next batch copied on a side stream
        self._planned: dict[int, str] = {}  # first prompts rendered for planning, until prepared (rendered once)
        if dict(config.decode.gen_kwargs).get("temperature"):
            torch.manual_seed(config.output.seed)  # sampled generation repeats for the same seed and batches
        self.streams = SeedStreams(config.output.seed)  # --samples: each other seed its own stream
        self.join = lambda pieces: join_pieces(pieces, model)  # prefetch's: the first batch's pieces as one

    # ---- planning ---------------------------------------------------------------------------
    def items(self, indices: Sequence[int]) -> list[Item]:
        """Token estimates for batching: the first prompt's text tokens (image placeholders
        unexpanded) plus each image's tokens, from its header size and the processor's resize
        rule (no pixel decoding)."""
        if not indices:
            return []
        texts, counts = self.rendered(indices, [first_prompt(self.requests[i]) for i in indices])
        self._planned.update(zip(indices, texts))
        return [Item(index, batch_kind(self.requests[index]), n) for index, n in zip(indices, counts)]

    def rendered(self, indices: Sequence[int], prompts: Sequence[Prompt]) -> tuple[list[str], list[int]]:
        """Each prompt rendered by the model (`prompt_text`, image placeholders unexpanded), and
        its tokens: the text's plus each image's."""
        texts = [self.model.prompt_text(text_of(p, thinking(self.requests[i]))) for i, p in zip(indices, prompts)]
        return texts, [n_text + self.image_tokens(index, prompt)
                       for index, prompt, n_text in zip(indices, prompts, self.model.text_token_counts(texts))]

    def image_tokens(self, index: int, prompt: Prompt) -> int:
        total = 0
        for i in prompt.images:
            with contextlib.suppress(Exception):  # a broken header is reported when decoding
                total += self.model.image_token_count(*image_size(self.questions[index].images[i]))
        return total

    # ---- preprocessing (worker threads) ------------------------------------------------------
    def prepare(self, indices: Sequence[int]) -> PreparedBatch:
        """The batch's first prompts prepared, with the texts planning rendered (each used once: a
        batch prepared again, e.g. after an out-of-memory error, renders its prompts again)."""
        planned = {i: text for i in indices if (text := self._planned.pop(i, None)) is not None}
        return self.prepare_prompts(indices, {i: first_prompt(self.requests[i]) for i in indices}, planned)

    def prepare_prompts(self, indices: Sequence[int], prompts: dict[int, Prompt], texts: dict[int, str] | None = None,
                        decoded: dict[int, dict[int, Any]] | None = None) -> PreparedBatch:
        """Decode the images the prompts show (those in `decoded` reused), render (unless `texts`
        holds the rendered prompts already) and call the model's `prepare`; for a CUDA model the batch
        is pinned here, in the worker thread (off the model's thread, which then only enqueues the copy)."""
        first = self.requests[indices[0]] if indices else None
        prefill = first is not None and not is_generated(first) and not thinking(first)

        def build(index: int, images: dict[int, Any]) -> Any:
            asked = self.requests[index]
            request = render(self.benchmark, prompts[index], images, thinking(asked), n_options(asked))
            return dataclasses.replace(request, text=(texts or {}).get(index, ""), prefilled=prefill)

        def inputs(requests: list[Any]) -> ModelInputs:
            prepared = self.model.prepare(requests)
            return prepared.pin() if self.model.device.type == "cuda" else prepared

        batch = prepare_batch(indices, self.questions, lambda i: prompts[i].images, build, inputs, decoded)
        if batch.inputs is not None:
            batch.prompts = {i: self._logged_prompt(t) for i, t in zip(batch.indices, batch.inputs.texts)}
        if not isinstance(first, Session):  # only a session's later turns show the images again
            batch.images = {}
        return batch

    def copy_ahead(self, prepared: PreparedBatch) -> None:
        """`prefetch`'s `ahead`: the next batch copied to a CUDA device now (runner/copy_ahead.py)."""
        self._copies.enqueue(prepared, self.max_batch)

    def _logged_prompt(self, text: str) -> str:
        """What the model saw, as text (image placeholders unexpanded, as `prepare` rendered it), or its hash."""
        if self.config.decode.log_prompts:
            return text
        return "sha256:" + hashlib.sha256(encodable(text).encode()).hexdigest()  # a reply's lone surrogate: escaped

    # ---- decoding (the model's thread) -------------------------------------------------------
    def run(self, prepared: PreparedBatch) -> dict[int, Prediction]:
        """The batch's predictions. Ctrl-C raises `BatchInterrupted` with those finished so far."""
        out = {i: Prediction(id=self.questions[i].id, answer="", error=e) for i, e in prepared.errors.items()}
        try:
            self._run(prepared, out)
        except KeyboardInterrupt as stop:
            finished = stop.predictions if isinstance(stop, BatchInterrupted) else {}
            raise BatchInterrupted({**out, **finished}) from None
        return out

    def _run(self, prepared: PreparedBatch, out: dict[int, Prediction]) -> None:
        if prepared.inputs is None:
            return
        if len(prepared.indices) > self.max_batch:  # learned from an earlier out-of-memory
            prepared.on_device = None  # a copy made ahead would hold device memory while its parts run
            step = self.max_batch  # fixed: a part that runs out of memory lowers max_batch for the next ones
            for start in range(0, len(prepared.indices), step):
                out.update(self.run(self.prepare(prepared.indices[start:start + step])))
            return
        try:
            out.update(self._decode(prepared))
        except torch.cuda.OutOfMemoryError:
            self.throughput.oom_retries += 1
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if len(prepared.indices) == 1:
                index = prepared.indices[0]
                out[index] = Prediction(id=self.questions[index].id, answer="",
                                        error="out of memory: CUDA out of memory even at batch size 1")
                return
            self.max_batch = max(1, len(prepared.indices) // 2)
            log.warning("out of memory at batch size %d; retrying at %d", len(prepared.indices), self.max_batch)
            out.update(self.run(prepared))
        except Exception as err:  # noqa: BLE001 — one bad sample must not stop the run
            if len(prepared.indices) > 1:  # find the culprit: retry each question alone
                log.warning("batch failed (%s); retrying its questions one by one", err)
                for index in prepared.indices:
                    out.update(self.run(self.prepare([index])))
                return
            index = prepared.indices[0]
            log.error("question %s failed: %r", self.questions[index].id, err)
            out[index] = Prediction(id=self.questions[index].id, answer="",
                                    error=f"model error: {type(err).__name__}: {err}")

    def _decode(self, prepared: PreparedBatch) -> dict[int, Prediction]:
        requests = [self.requests[i] for i in prepared.indices]
        first = requests[0]  # a batch holds one kind: one decoder, one set of settings
        started = time.perf_counter()
        stage = self.timer.stage
        self._counts = RowCounts(self.model, prepared.inputs)  # a session's later turns add theirs (`_ask`)
        with stage("h2d"):
            inputs = self._copies.on_device(prepared)
        reasoning = None
        if thinking(first):
            with self.streams.use(seed_of(first.sampling)):  # sampled reasoning only with --samples > 1
                inputs, reasoning = think(self.model, inputs, first.think_budget, [r.prompt.answer_prefix for r in
                                          requests], stage, sampling={k: v for k, v in first.sampling if k != "seed"})
            self.throughput.reasoning_tokens += sum(r.tokens for r in reasoning)
        if isinstance(first, Choose):
            n_options = torch.tensor([r.n_options for r in requests])
            decoder = decode_multi if first.multi else decode_single
            decoded = decoder(self.model, inputs, n_options, self.vocab, stage)
        elif isinstance(first, Number):
            decoded = decode_numerical(self.model, inputs, first.budget, self.vocab, stage)
        else:
            failed: dict[int, str] = {}
            with stage("generate"):
                try:
                    texts, counts = self._generate(first, inputs)
                except GenerationInterrupted as stop:  # keep the rows that had finished (a session's have not)
                    finished = {k: Prediction(id="", answer="", generated_text=text, n_generated_tokens=stop.counts[k])
                                for k, text in stop.texts.items() if not isinstance(first, Session)}
                    raise BatchInterrupted(self._predictions(prepared, finished, started)) from None
                if isinstance(first, Session):
                    texts, counts, failed = continue_sessions(
                        requests, texts, counts, lambda rows, prompts: self._ask(prepared, first, rows, prompts))
            decoded = [Prediction(id="", answer="", generated_text=t, n_generated_tokens=n, error=failed.get(k))
                       for k, (t, n) in enumerate(zip(texts, counts))]
        if reasoning is not None:
            decoded = [dataclasses.replace(p, reasoning_text=r.text, reasoning_tokens=r.tokens, budget_cut=r.cut)
                       for p, r in zip(decoded, reasoning)]
        self.throughput.account(self.model, prepared.inputs)
        return self._predictions(prepared, dict(enumerate(decoded)), started)

    def _predictions(self, prepared: PreparedBatch, decoded: dict[int, Prediction], started: float) -> dict[int, Prediction]:
        """Question index → prediction for the batch rows in `decoded` (row → decoder output), each
        with its question's id, token counts and share of the batch's seconds (runner/cost.py),
        logged prompt and read answer."""
        costed = with_costs(decoded, [self.requests[i] for i in prepared.indices], self._counts.counts,
                            time.perf_counter() - started, len(prepared.indices))
        out = {}
        for row, p in costed.items():
            i = prepared.indices[row]
            question = self.questions[i]
            out[i] = self.finish(question, self.requests[i], dataclasses.replace(
                p, id=question.id, prompt=prepared.prompts.get(i, "")))
        return out

    def _generate(self, request: Generate | Session, inputs: Any) -> tuple[list[str], list[int]]:
        sampling = {k: v for k, v in request.sampling if k != "seed"}  # the seed: its stream (finbench/models/sampled_decoding.py)
        with self.streams.use(seed_of(request.sampling)):
            if sampling:
                return self.model.generate(inputs, request.max_new_tokens, sampling)
            return self.model.generate(inputs, request.max_new_tokens)  # greedy: the plain contract

    def _ask(self, prepared: PreparedBatch, request: Session, rows: list[int],
             prompts: list[Prompt]) -> tuple[list[str | None], list[int], dict[int, str]]:
        """One later session turn for `rows` (positions in the batch). Each row's whole prompt
        (history, text and image tokens) is checked against the context before anything is
        prepared: a row too long, or one its preprocessing refuses, fails alone (None, its error);
        the others are generated together. (A 1 MB recorded tool result in an agent's round 2
        would otherwise be padded into one batched allocation of hundreds of GB.)"""
        indices = [prepared.indices[k] for k in rows]
        context = self.model.max_context()
        errors: dict[int, str] = {}
        texts, counts = self.rendered(indices, prompts)  # each prompt rendered once, here
        if context:
            errors = {k: f"prompt of {n} tokens exceeds the model's context of {context}"
                      for k, n in zip(rows, counts) if n > context}
        go = {i: (k, p, t) for k, i, p, t in zip(rows, indices, prompts, texts) if k not in errors}
        replies: dict[int, tuple[str, int]] = {}
        if go:
            # the images decoded for the first turn are shown again, not decoded again
            batch = self.prepare_prompts(list(go), {i: p for i, (_, p, _) in go.items()},
                                         {i: t for i, (_, _, t) in go.items()}, prepared.images)
            errors.update({go[i][0]: message for i, message in batch.errors.items()})
            if batch.inputs is not None:
                self._counts.add([go[i][0] for i in batch.indices], batch.inputs)
                texts, counts = self._generate(request, self.model.to_device(batch.inputs))
                replies = {go[i][0]: (t, n) for i, t, n in zip(batch.indices, texts, counts)}
        return ([replies[k][0] if k in replies else None for k in rows],
                [replies[k][1] if k in replies else 0 for k in rows], errors)

    def finish(self, question: Question, request: Request, prediction: Prediction) -> Prediction:
        """The prediction with its answer read by the benchmark's rule (`read_answer`)."""
        return read_answer(self.benchmark, self.config.protocol, question, request, prediction, self.read_answers)


def read_answer(benchmark: Benchmark, protocol: str, question: Question, request: Request, prediction: Prediction,
                read: bool = True) -> Prediction:
    """The prediction with its answer read by the benchmark's rule from generated text (a cached
    or shared generation is read again for each question it answers); `read` False: kept as
    generated (the judge's verdicts)."""
    if prediction.error or not is_generated(request) or not read:
        return dataclasses.replace(prediction, id=question.id)
    return dataclasses.replace(prediction, id=question.id, answer=benchmark.answer(question, prediction.generated_text,
                                                                                   protocol))


def first_rows(batching: BatchSpec) -> int:
    """The row cap a run starts with: its batch size, or AUTO_BATCH_START for "auto"."""
    return batching.batch_size if isinstance(batching.batch_size, int) else AUTO_BATCH_START
