"""The batch loop: questions → cached or computed predictions → samples table and results.

It knows neither the benchmark nor the model family: a benchmark module supplies questions,
requests and the official extraction rule; a model adapter supplies the contract in
`finbench.models.base`. Order of work:
1. load questions, load the model, compute every sample's cache key;
2. take what the cache has; plan batches for the rest (by decoder, longest first, token budget);
3. preprocess batches in worker threads, one or more ahead of the model;
4. decode each batch (halving and retrying on CUDA out-of-memory), commit it to the cache;
5. score, write `samples.parquet` and `results.json`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import platform
import resource
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from finbench.benchmarks import get_benchmark
from finbench.runner.batching import Item, plan_batches
from finbench.runner.cache import PredictionCache, sample_key
from finbench.runner.decoding import AnswerVocabulary, decode_multi, decode_numerical, decode_single
from finbench.runner.preprocess import PreparedBatch, image_size, prefetch, prepare_batch
from finbench.types import MULTI, NUMERICAL, OPEN, PROTOCOLS, SINGLE, Prediction, Question, RunConfig

AUTO_BATCH_START = 64  # --batch-size auto starts here and halves on out-of-memory
log = logging.getLogger("finbench")


class StageTimer:
    """Wall time per stage. On CUDA it synchronises at stage boundaries so that asynchronous
    kernels are charged to the stage that launched them."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize()
            self.seconds[name] += time.perf_counter() - started


@dataclass
class RunResult:
    out_dir: Path
    results: dict[str, Any]
    samples: Any  # pandas.DataFrame


def decoder_name(question: Question, protocol: str) -> str:
    if protocol == "official" or question.kind == OPEN:
        return "generate"
    return question.kind


def decoding_settings(config: RunConfig) -> dict[str, Any]:
    """The part of the config that changes answers (it goes into every cache key)."""
    if config.protocol == "official":
        return {"max_new_tokens": config.max_new_tokens, "temperature": 0}
    return {"numeric_budget": config.numeric_budget, "spellings": "bare+space", "separator": ","}


def validate(config: RunConfig) -> None:
    if config.protocol not in PROTOCOLS:
        raise ValueError(f"--protocol {config.protocol}: expected one of {', '.join(PROTOCOLS)}")
    if config.batch_size is not None and config.batch_size < 1:
        raise ValueError("--batch-size must be a positive integer or 'auto'")
    if config.data is not None and not Path(config.data).exists():
        looks_like_path = Path(config.data).suffix in {".parquet", ".arrow", ".jsonl", ".json"} \
            or config.data.startswith((".", "/", "~")) or config.data.count("/") != 1
        if looks_like_path:  # anything else is taken as a hub id ("owner/name")
            raise ValueError(f"--data {config.data}: no such file or folder")


def run_benchmark(config: RunConfig, model: Any = None, *, show_progress: bool = True,
                  console: Any = None) -> RunResult:
    """Run (or resume) one evaluation and write its outputs into `config.out`."""
    from finbench.models import load_model

    validate(config)
    out_dir = Path(config.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    _log_to(out_dir / "run.log")
    started = time.time()
    benchmark = get_benchmark(config.benchmark)
    model = model or load_model(config.model, dtype=config.dtype, device=config.device,
                                quant=config.quant, max_pixels=config.max_pixels,
                                device_preprocess=config.device_preprocess)
    questions = benchmark.load_questions(config.data, config.limit, config.domains, config.question_types)
    if not questions:
        raise ValueError("no questions matched the data and filters")
    vocab = AnswerVocabulary.for_model(model) if config.protocol == "constrained" else None
    fingerprint = model.fingerprint()
    prompt_version = benchmark.PROMPT_VERSION if config.protocol == "constrained" else f"{benchmark.NAME}-official"
    decoding = decoding_settings(config)
    keys = [sample_key(fingerprint, config.protocol, prompt_version, decoding, q) for q in questions]
    cache = PredictionCache(config.cache or out_dir / "cache.sqlite")
    cached = cache.get_many(keys)
    log.info("%d questions, %d cached, model %s", len(questions), len(cached), config.model)

    predictions: dict[int, Prediction] = {}
    for index, (question, key) in enumerate(zip(questions, keys)):
        if question.error:
            predictions[index] = Prediction(id=question.id, answer="", error=question.error)
        elif key in cached:
            predictions[index] = dataclasses.replace(cached[key], id=question.id)
    n_cached = sum(1 for i in predictions if keys[i] in cached)
    todo = [i for i in range(len(questions)) if i not in predictions]

    timer = StageTimer(model.device)
    loop = _BatchLoop(model, benchmark, questions, config, vocab, timer)
    with timer.stage("plan"):
        batches = plan_batches(loop.items(todo), config.batch_size or AUTO_BATCH_START, config.token_budget)

    compute_started = time.perf_counter()
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    with _progress(show_progress, len(todo), console) as advance:
        for prepared in prefetch(batches, loop.prepare, workers=config.workers, depth=config.workers + 1):
            timer.seconds["preprocess"] += prepared.seconds
            batch_predictions = loop.run(prepared)
            with timer.stage("cache_write"):
                cache.put_many((keys[i], p) for i, p in batch_predictions.items() if not p.error)
            predictions.update(batch_predictions)
            advance(len(batch_predictions))
    compute_seconds = time.perf_counter() - compute_started
    cache.close()

    samples = _samples_table(questions, predictions, keys)
    scores = _score(samples, benchmark.SCORER, config.bootstrap, config.seed)
    samples["correct"] = scores.pop("_correct")
    throughput = loop.throughput(len(todo), compute_seconds)
    errors = samples.loc[samples["error"] != "", ["id", "error"]]
    results = {
        "benchmark": benchmark.NAME,
        "config": dataclasses.asdict(config),
        "fingerprint": fingerprint,
        "protocol": config.protocol,
        "prompt_version": prompt_version,
        "n_questions": len(questions),
        "n_cached": n_cached,
        "n_computed": len(todo),
        "scores": scores,
        "throughput": throughput,
        "errors": {"count": int(len(errors)),
                   "by_message": {k: int(v) for k, v in errors["error"].str.split(":").str[0].value_counts().items()},
                   "samples": errors.head(50).to_dict("records")},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "platform": platform.platform()},
        "started": started,
        "seconds": time.time() - started,
    }
    # write-then-rename: a kill while writing never leaves a truncated output behind
    samples.to_parquet(out_dir / "samples.parquet.tmp", index=False)
    os.replace(out_dir / "samples.parquet.tmp", out_dir / "samples.parquet")
    _write_json(out_dir / "results.json", results)
    from finbench.report.html import write_report

    write_report(out_dir)
    log.info("done: %s", {k: scores.get(k) for k in ("finscore", "accuracy")})
    return RunResult(out_dir, results, samples)


class _BatchLoop:
    """Per-batch work: preprocessing (thread-safe), decoding with out-of-memory backoff, stats."""

    def __init__(self, model: Any, benchmark: Any, questions: Sequence[Question], config: RunConfig,
                 vocab: AnswerVocabulary | None, timer: StageTimer) -> None:
        self.model, self.benchmark, self.questions = model, benchmark, questions
        self.config, self.vocab, self.timer = config, vocab, timer
        self.max_batch = config.batch_size or AUTO_BATCH_START
        self.image_tokens = 0
        self.prompt_tokens = 0
        self.flops = 0.0
        self.oom_retries = 0

    def items(self, indices: Sequence[int]) -> list[Item]:
        """Token estimates for batching: the prompt's text tokens plus each image's tokens,
        from its header size and the processor's resize rule (no pixel decoding)."""
        if not indices:
            return []
        requests = [self.benchmark.build_request(self.questions[i], [], self.config.protocol) for i in indices]
        text_tokens = self.model.text_token_counts([self.model.prompt_text(r) for r in requests])
        items = []
        for index, n_text in zip(indices, text_tokens):
            n_image = 0
            for data in self.questions[index].images:
                with contextlib.suppress(Exception):  # a broken header is reported when decoding
                    n_image += self.model.image_token_count(*image_size(data))
            items.append(Item(index, decoder_name(self.questions[index], self.config.protocol), n_text + n_image))
        return items

    def prepare(self, indices: Sequence[int]) -> PreparedBatch:
        protocol = self.config.protocol
        return prepare_batch(indices, self.questions,
                             lambda q, images: self.benchmark.build_request(q, images, protocol), self.model.prepare)

    def run(self, prepared: PreparedBatch) -> dict[int, Prediction]:
        out = {i: Prediction(id=self.questions[i].id, answer="", error=e) for i, e in prepared.errors.items()}
        if prepared.inputs is None:
            return out
        if len(prepared.indices) > self.max_batch:  # learned from an earlier out-of-memory
            for start in range(0, len(prepared.indices), self.max_batch):
                out.update(self.run(self.prepare(prepared.indices[start:start + self.max_batch])))
            return out
        try:
            out.update(self._decode(prepared))
        except torch.cuda.OutOfMemoryError:
            self.oom_retries += 1
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
        questions = [self.questions[i] for i in prepared.indices]
        name = decoder_name(questions[0], self.config.protocol)
        started = time.perf_counter()
        with self.timer.stage("h2d"):
            inputs = self.model.to_device(prepared.inputs)
        n_options = torch.tensor([len(q.options) for q in questions])
        stage = self.timer.stage
        if name == SINGLE:
            decoded = decode_single(self.model, inputs, n_options, self.vocab, stage)
        elif name == MULTI:
            decoded = decode_multi(self.model, inputs, n_options, self.vocab, stage)
        elif name == NUMERICAL:
            decoded = decode_numerical(self.model, inputs, self.config.numeric_budget, self.vocab, stage)
        else:
            with stage("generate"):
                texts, counts = self.model.generate(inputs, self.config.max_new_tokens)
            decoded = [Prediction(id="", answer=self.benchmark.extract_official(t) if q.kind != OPEN else t,
                                  generated_text=t, n_generated_tokens=n)
                       for q, t, n in zip(questions, texts, counts)]
        share = (time.perf_counter() - started) / len(questions)
        self.image_tokens += self.model.count_image_tokens(prepared.inputs)
        self.prompt_tokens += int(prepared.inputs["attention_mask"].sum())
        self.flops += self.model.prefill_flops(prepared.inputs)
        return {i: dataclasses.replace(p, id=q.id, seconds=share)
                for i, q, p in zip(prepared.indices, questions, decoded)}

    def throughput(self, n_samples: int, seconds: float) -> dict[str, Any]:
        device = self.model.device
        stats: dict[str, Any] = {
            "samples": n_samples,
            "seconds": seconds,
            "samples_per_s": n_samples / seconds if seconds > 0 else None,
            "image_tokens": self.image_tokens,
            "image_tokens_per_s": self.image_tokens / seconds if seconds > 0 else None,
            "prompt_tokens": self.prompt_tokens,
            "stages_s": dict(self.timer.seconds),
            "device": str(device),
            "oom_retries": self.oom_retries,
            "final_max_batch": self.max_batch,
            # analytic prefill FLOPs over the time spent in prefill forwards (the "forward" stage)
            "prefill_flops": self.flops,
            "prefill_tflops_per_s": self.flops / forward / 1e12 if (forward := self.timer.seconds.get("forward")) else None,
        }
        if device.type == "cuda":
            stats["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        else:
            stats["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        return stats


def _samples_table(questions: Sequence[Question], predictions: dict[int, Prediction], keys: Sequence[str]) -> Any:
    import pandas as pd

    rows = []
    for index, question in enumerate(questions):
        p = predictions[index]
        rows.append({
            "id": question.id, "benchmark": question.benchmark, "kind": question.kind, "gold": question.gold,
            "answer": p.answer, "raw_output": p.generated_text, "n_options": len(question.options),
            "option_probs": [math.exp(lp) for lp in p.option_logprobs],
            "tolerance": math.nan if question.tolerance is None else question.tolerance,
            "error": p.error or "", "seconds": p.seconds, "n_generated_tokens": p.n_generated_tokens,
            "sample_key": keys[index], **dict(question.meta),
        })
    return pd.DataFrame(rows)


def _score(samples: Any, scorer: str, n_bootstrap: int, seed: int) -> dict[str, Any]:
    from finbench.scoring import per_question_correct, score_samples

    scores = score_samples(samples, benchmark=scorer, n_bootstrap=n_bootstrap, seed=seed)
    scores["_correct"] = per_question_correct(samples, benchmark=scorer)
    return scores


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    import json

    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(payload, indent=2, default=str, allow_nan=True))
    os.replace(temporary, path)


def _log_to(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    for old in [h for h in log.handlers if isinstance(h, logging.FileHandler)]:
        log.removeHandler(old)
        old.close()
    log.addHandler(handler)
    log.setLevel(logging.INFO)


@contextlib.contextmanager
def _progress(show: bool, total: int, console: Any) -> Iterator[Callable[[int], None]]:
    if not show or total == 0:
        yield lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    started = time.perf_counter()
    with Progress(TextColumn("[bold]evaluating"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]} samples/s"), TimeRemainingColumn(), console=console) as bar:
        task = bar.add_task("run", total=total, rate="–")
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            rate = done / max(time.perf_counter() - started, 1e-9)
            bar.update(task, advance=n, rate=f"{rate:.1f}")

        yield advance
