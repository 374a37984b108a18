"""The batch loop: token estimates for batching, preprocessing (in worker threads), and decoding
each batch by its requests' type, with out-of-memory backoff and per-sample failure isolation.

Dispatch is on the request type (finbench/requests.py), one decoder per batch kind:
`Choose` → `decode_single` / `decode_multi`, `Number` → `decode_numerical`, `Generate` → the
adapter's `generate`, `Session` → turn by turn (runner/sessions.py). A request with a thinking
budget first reasons (runner/thinking.py), then answers with the same decoders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
from typing import Any, MutableMapping, Sequence

import torch

from finbench.benchmarks.base import Benchmark
from finbench.requests import Choose, Generate, Number, Prompt, Request, Session, is_generated
from finbench.runner.batching import Item
from finbench.runner.decoding import AnswerVocabulary, decode_multi, decode_numerical, decode_single
from finbench.runner.preprocess import PreparedBatch, image_size, pin_host_memory, prepare_batch
from finbench.runner.requests import batch_kind, first_prompt, render, text_of, thinking
from finbench.runner.sessions import continue_sessions
from finbench.runner.thinking import think
from finbench.runner.timing import StageTimer, Throughput
from finbench.types import Prediction, Question, RunConfig

AUTO_BATCH_START = 64  # --batch-size auto starts here and halves on out-of-memory
log = logging.getLogger("finbench")


class BatchLoop:
    """Per-batch work for one run. `prepare` is thread-safe; `run` runs on the model's thread."""

    def __init__(self, model: Any, benchmark: Benchmark, questions: Sequence[Question],
                 requests: Sequence[Request | None], config: RunConfig, vocab: AnswerVocabulary | None,
                 timer: StageTimer, read_answers: bool = True) -> None:
        self.model, self.benchmark, self.questions, self.requests = model, benchmark, questions, requests
        self.config, self.vocab, self.timer = config, vocab, timer
        self.read_answers = read_answers  # False: replies kept as generated (the judge's verdicts)
        self.throughput = Throughput(timer)
        if not model.capabilities.flop_count:  # "not counted" from the start, also when no batch runs
            self.throughput.flops = None
        self.max_batch = first_rows(config)
        self._copy_stream: Any = None  # CUDA: the side stream of copies made one batch ahead
        if dict(config.gen_kwargs).get("temperature"):
            torch.manual_seed(config.seed)  # sampled generation repeats for the same seed and batches

    # ---- planning ---------------------------------------------------------------------------
    def items(self, indices: Sequence[int]) -> list[Item]:
        """Token estimates for batching: the first prompt's text tokens (image placeholders
        unexpanded) plus each image's tokens, from its header size and the processor's resize
        rule (no pixel decoding)."""
        if not indices:
            return []
        counts = self.prompt_tokens(indices, [first_prompt(self.requests[i]) for i in indices])
        return [Item(index, batch_kind(self.requests[index]), n) for index, n in zip(indices, counts)]

    def prompt_tokens(self, indices: Sequence[int], prompts: Sequence[Prompt]) -> list[int]:
        """Each prompt's tokens as the model will see them: its rendered text, plus each image's
        tokens (a session's later turns are checked with it against the context too)."""
        texts = [self.model.prompt_text(text_of(p, thinking(self.requests[i]))) for i, p in zip(indices, prompts)]
        return [n_text + self.image_tokens(index, prompt)
                for index, prompt, n_text in zip(indices, prompts, self.model.text_token_counts(texts))]

    def image_tokens(self, index: int, prompt: Prompt) -> int:
        total = 0
        for i in prompt.images:
            with contextlib.suppress(Exception):  # a broken header is reported when decoding
                total += self.model.image_token_count(*image_size(self.questions[index].images[i]))
        return total

    # ---- preprocessing (worker threads) ------------------------------------------------------
    def prepare(self, indices: Sequence[int]) -> PreparedBatch:
        return self.prepare_prompts(indices, {i: first_prompt(self.requests[i]) for i in indices})

    def prepare_prompts(self, indices: Sequence[int], prompts: dict[int, Prompt]) -> PreparedBatch:
        rendered: dict[int, Any] = {}

        def build(index: int, images: list[Any]) -> Any:
            rendered[index] = render(self.benchmark, prompts[index], images, thinking(self.requests[index]))
            return rendered[index]

        batch = prepare_batch(indices, self.questions, build, self._model_inputs)
        batch.prompts = {i: self._logged_prompt(rendered[i]) for i in batch.indices}
        return batch

    def _model_inputs(self, requests: list[Any]) -> Any:
        """The model's `prepare`, plus, for a CUDA model, pinning in this worker thread (off the
        model's thread, which then only enqueues the copy)."""
        inputs = self.model.prepare(requests)
        if self.model.device.type == "cuda" and isinstance(inputs, MutableMapping):
            return pin_host_memory(inputs)
        return inputs

    def copy_ahead(self, prepared: PreparedBatch) -> None:
        """A CUDA model: enqueue the host-to-device copy of the next batch (`prefetch`'s `ahead`) on a
        side stream now, while the model's stream works on the current batch; `_on_device` makes
        the model's stream wait for it. Nothing elsewhere, or for a batch that will be re-cut."""
        if (self.model.device.type != "cuda" or prepared.inputs is None
                or len(prepared.indices) > self.max_batch):
            return
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.model.device)
        with torch.cuda.stream(self._copy_stream):
            moved = self.model.to_device(prepared.inputs)
            copied = torch.cuda.Event()
            copied.record(self._copy_stream)
        prepared.on_device = (moved, copied)

    def _on_device(self, prepared: PreparedBatch) -> Any:
        """The batch's inputs on the model's device: copied ahead (waited for on the model's stream,
        and marked as used there so that the allocator keeps them until it is done), or now."""
        if prepared.on_device is None:
            return self.model.to_device(prepared.inputs)
        moved, copied = prepared.on_device
        prepared.on_device = None
        current = torch.cuda.current_stream(self.model.device)
        current.wait_event(copied)
        for value in moved.values() if isinstance(moved, MutableMapping) else ():
            for tensor in value if isinstance(value, list) else [value]:
                if torch.is_tensor(tensor) and tensor.is_cuda:
                    tensor.record_stream(current)
        return moved

    def _logged_prompt(self, request: Any) -> str:
        """What the model saw, as text (image placeholders unexpanded), or its hash."""
        try:
            text = self.model.prompt_text(request)
        except Exception as err:  # noqa: BLE001 — a log line never fails a batch
            return f"(prompt not rendered: {type(err).__name__})"
        return text if self.config.log_prompts else "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    # ---- decoding (the model's thread) -------------------------------------------------------
    def run(self, prepared: PreparedBatch) -> dict[int, Prediction]:
        out = {i: Prediction(id=self.questions[i].id, answer="", error=e) for i, e in prepared.errors.items()}
        if prepared.inputs is None:
            return out
        if len(prepared.indices) > self.max_batch:  # learned from an earlier out-of-memory
            prepared.on_device = None  # a copy made ahead would hold device memory while its parts run
            step = self.max_batch  # fixed: a part that runs out of memory lowers max_batch for the next ones
            for start in range(0, len(prepared.indices), step):
                out.update(self.run(self.prepare(prepared.indices[start:start + step])))
            return out
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
                return out
            self.max_batch = max(1, len(prepared.indices) // 2)
            log.warning("out of memory at batch size %d; retrying at %d", len(prepared.indices), self.max_batch)
            return {**out, **self.run(prepared)}
        except Exception as err:  # noqa: BLE001 — one bad sample must not stop the run
            if len(prepared.indices) > 1:  # find the culprit: retry each question alone
                log.warning("batch failed (%s); retrying its questions one by one", err)
                for index in prepared.indices:
                    out.update(self.run(self.prepare([index])))
                return out
            index = prepared.indices[0]
            log.error("question %s failed: %r", self.questions[index].id, err)
            out[index] = Prediction(id=self.questions[index].id, answer="",
                                    error=f"model error: {type(err).__name__}: {err}")
        return out

    def _decode(self, prepared: PreparedBatch) -> dict[int, Prediction]:
        requests = [self.requests[i] for i in prepared.indices]
        first = requests[0]  # a batch holds one kind: one decoder, one set of settings
        started = time.perf_counter()
        stage = self.timer.stage
        with stage("h2d"):
            inputs = self._on_device(prepared)
        reasoning = None
        if thinking(first):
            inputs, reasoning = think(self.model, inputs, first.think_budget,
                                      [r.prompt.answer_prefix for r in requests], stage)
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
                texts, counts = self._generate(first, inputs)
                if isinstance(first, Session):
                    texts, counts, failed = continue_sessions(
                        requests, texts, counts, lambda rows, prompts: self._ask(prepared, first, rows, prompts))
            decoded = [Prediction(id="", answer="", generated_text=t, n_generated_tokens=n, error=failed.get(k))
                       for k, (t, n) in enumerate(zip(texts, counts))]
        if reasoning is not None:
            decoded = [dataclasses.replace(p, reasoning_text=r.text, reasoning_tokens=r.tokens, budget_cut=r.cut)
                       for p, r in zip(decoded, reasoning)]
        share = (time.perf_counter() - started) / len(requests)
        self.throughput.account(self.model, prepared.inputs)
        out = {}
        for i, request, p in zip(prepared.indices, requests, decoded):
            question = self.questions[i]
            out[i] = self.finish(question, request, dataclasses.replace(
                p, id=question.id, seconds=share, prompt=prepared.prompts.get(i, "")))
        return out

    def _generate(self, request: Generate | Session, inputs: Any) -> tuple[list[str], list[int]]:
        sampling = {k: v for k, v in request.sampling if k != "seed"}  # the seed is set once, in __init__
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
        if context:
            for k, n in zip(rows, self.prompt_tokens(indices, prompts)):
                if n > context:
                    errors[k] = f"prompt of {n} tokens exceeds the model's context of {context}"
        go = {i: (k, p) for k, i, p in zip(rows, indices, prompts) if k not in errors}
        replies: dict[int, tuple[str, int]] = {}
        if go:
            batch = self.prepare_prompts(list(go), {i: p for i, (_, p) in go.items()})
            errors.update({go[i][0]: message for i, message in batch.errors.items()})
            if batch.inputs is not None:
                texts, counts = self._generate(request, self.model.to_device(batch.inputs))
                replies = {go[i][0]: (t, n) for i, t, n in zip(batch.indices, texts, counts)}
        return ([replies[k][0] if k in replies else None for k in rows],
                [replies[k][1] if k in replies else 0 for k in rows], errors)

    def finish(self, question: Question, request: Request, prediction: Prediction) -> Prediction:
        """The prediction with its answer read by the benchmark's rule from generated text (a cached
        or shared generation is read again for each question it answers)."""
        if prediction.error or not is_generated(request) or not self.read_answers:
            return dataclasses.replace(prediction, id=question.id)
        answer = self.benchmark.answer(question, prediction.generated_text, self.config.protocol)
        return dataclasses.replace(prediction, id=question.id, answer=answer)


def first_rows(config: RunConfig) -> int:
    """The row cap a run starts with: its batch size, or AUTO_BATCH_START for "auto"."""
    return config.batch_size if isinstance(config.batch_size, int) else AUTO_BATCH_START


def too_long(items: Sequence[Item], model: Any) -> list[tuple[Item, str]]:
    """Prompts (text + image tokens) longer than the model's context, with their error: run, they
    would be truncated or fail deep inside the model."""
    context = model.max_context() if items else None
    if not context:
        return []
    return [(item, f"prompt of {item.n_tokens} tokens exceeds the model's context of {context}")
            for item in items if item.n_tokens > context]
