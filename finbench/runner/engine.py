"""The batch loop: questions → cached or computed predictions → samples table and results.

It knows neither the benchmark nor the model family: a benchmark module supplies questions,
requests and the official extraction rule; a model adapter supplies the contract in
`finbench.models.base`. Order of work:
1. check every option, load the questions (a bad record becomes that sample's error, unusable
   data one start-up line), open the cache (a corrupt one is moved aside), load the model (with
   `--compile-vision`, compile its vision blocks), compute every sample's cache key;
2. take what the cache has; plan batches for the rest (by decoder, longest first, token budget);
   prompts longer than the context become errors; with several ranks (torchrun, accelerate),
   each takes a token-balanced share (runner/distributed.py) and rank 0 gathers the answers;
3. preprocess batches in worker threads, one or more ahead of the model;
4. decode each batch (halving and retrying on CUDA out-of-memory), commit it to the cache; a
   thinking run first reasons up to `--think-budget` tokens, closes the block, then answers
   (runner/thinking.py); a multi-turn session is generated turn by turn, and questions that
   share one request (FAMMA's grouped official call) are generated once;
5. judge open answers (the benchmark's rules; a `--judge` model, its replies cached too), score,
   write `samples.parquet` and `results.json` (a rerun served entirely from the cache keeps
   the throughput of the run that computed the answers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
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

from finbench import benchmarks as hooks
from finbench.benchmarks import get_benchmark
from finbench.runner.batching import Item, plan_batches
from finbench.runner.cache import PredictionCache, model_identity, sample_key
from finbench.runner.decoding import (AnswerVocabulary, answer_confidence, decode_multi, decode_numerical,
                                      decode_single)
from finbench.runner.distributed import finish as finish_world
from finbench.runner.distributed import barrier, gather, rank_device, shard, world_from_env
from finbench.runner.distributed import start as start_world
from finbench.runner.judge import judge_run, load_judge
from finbench.runner.preprocess import PreparedBatch, image_size, pin_host_memory, prefetch, prepare_batch
from finbench.runner.provenance import RESULTS_SCHEMA_VERSION, provenance
from finbench.runner.thinking import think
from finbench.runner.timing import ModelParts
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
    """A finished run: `results` is results.json, `samples` the samples.parquet frame;
    `results, samples = finbench.evaluate(...)` unpacks them."""

    out_dir: Path
    results: dict[str, Any]
    samples: Any  # pandas.DataFrame

    def __iter__(self) -> Iterator[Any]:
        return iter((self.results, self.samples))


def decoder_name(question: Question, protocol: str) -> str:
    if protocol == "official" or question.kind == OPEN:
        return "generate"
    return question.kind


def decoding_settings(config: RunConfig, thinking: bool = False) -> dict[str, Any]:
    """The part of the config that changes answers (it goes into every cache key). The thinking
    budget is added only for thinking runs, so instruct runs keep their keys."""
    if config.protocol == "official":
        settings = {"max_new_tokens": config.max_new_tokens, "temperature": 0}
    else:
        settings = {"numeric_budget": config.numeric_budget, "spellings": "bare+space", "separator": ","}
    if thinking:
        settings["think_budget"] = config.think_budget
    if config.system_prompt:
        settings["system_prompt"] = config.system_prompt
    if config.gen_kwargs:
        settings["generation"] = dict(config.gen_kwargs)
    return settings


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
        try:
            pairs.append((key, GENERATION_KEYS[key](value.strip())))
        except ValueError:
            raise ValueError(f"--gen-kwargs: {key}={value.strip()!r} is not a {GENERATION_KEYS[key].__name__}") from None
    return tuple(sorted(pairs))


def model_arguments(config: RunConfig) -> dict[str, Any]:
    """Loading arguments that change outputs, for the cache key (the family's fingerprint may
    not know them)."""
    template = Path(config.chat_template).read_text(encoding="utf-8") if config.chat_template else ""
    return {"revision": config.revision or "", "trust_remote_code": config.trust_remote_code,
            "attn_implementation": config.attn_implementation or "",
            "chat_template": hashlib.sha256(template.encode()).hexdigest()[:16] if template else ""}


def thinking_mode(config: RunConfig, model: Any) -> str | None:
    """None for an instruct run, else the text that opens the thinking block after the
    generation prompt. A checkpoint whose template opens the block itself always runs as a
    thinking run (budget 0 = the block is closed at once); others only when asked to think."""
    if config.protocol != "constrained":
        return None
    if model.thinking_token_ids() is None:
        if config.think_budget > 0:
            raise ValueError(f"--think-budget {config.think_budget}: {config.model} has no thinking block "
                             f"(family {getattr(model, 'family', '?')})")
        return None
    opener = model.thinking_opener()
    return opener if config.think_budget > 0 or opener == "" else None


def _compile_vision(model: Any, notes: list[str]) -> None:
    """--compile-vision before the cache keys are made (the fingerprint says what is compiled)."""
    from finbench.models.compile import compile_unavailable

    reason = compile_unavailable(model.device)
    if reason:
        raise ValueError(f"--compile-vision: {reason}")
    compiled = model.compile_vision()
    if compiled:
        log.info("compiled vision blocks: %s", ", ".join(f"{n} ×{k}" for n, k in compiled.items()))
    else:
        notes.append(f"--compile-vision: {getattr(model, 'family', 'this model')} declares no repeated vision "
                     "blocks; the vision tower ran uncompiled")


def _check_sampling(config: RunConfig, model: Any) -> None:
    sampling = {k: v for k, v in config.gen_kwargs if k != "max_new_tokens"}
    if sampling and "sampling" not in inspect.signature(model.generate).parameters:
        raise ValueError(f"--gen-kwargs {', '.join(sampling)}: {getattr(model, 'family', 'this family')} "
                         "generates greedily only")


class Interrupted(Exception):
    """Ctrl-C during a run: what was committed to the cache is kept; the message says how much."""

    def __init__(self, saved: int, total: int) -> None:
        super().__init__(f"interrupted: {saved} of {total} answers saved; rerun the same command to resume")
        self.saved, self.total = saved, total


def validate(config: RunConfig) -> None:
    """Every option checked before any work: a bad one is one ValueError line."""
    if config.protocol not in PROTOCOLS:
        raise ValueError(f"--protocol {config.protocol}: expected one of {', '.join(PROTOCOLS)}")
    if config.batch_size is not None and config.batch_size < 1:
        raise ValueError("--batch-size must be a positive integer or 'auto'")
    if config.think_budget < 0:
        raise ValueError(f"--think-budget {config.think_budget}: must be 0 (no reasoning) or a positive token count")
    if config.think_budget > 0 and config.protocol != "constrained":
        raise ValueError("--think-budget applies to the constrained protocol (official generates freely)")
    at_least = {"--limit": (config.limit, 1), "--token-budget": (config.token_budget, 1),
                "--workers": (config.workers, 1), "--max-new-tokens": (config.max_new_tokens, 1),
                "--numeric-budget": (config.numeric_budget, 1), "--max-pixels": (config.max_pixels, 1),
                "--bootstrap": (config.bootstrap, 0), "--think-budget": (getattr(config, "think_budget", 0), 0)}
    for option, (value, low) in at_least.items():
        if value is not None and value < low:
            raise ValueError(f"{option} {value}: must be at least {low}")
    _validate_device(config.device)
    from finbench.models.base import resolve_dtype
    from finbench.models.quant import QUANT_CHOICES

    resolve_dtype(config.dtype, torch.device("cpu"))  # the name only (auto is decided at load)
    if config.quant not in QUANT_CHOICES:
        raise ValueError(f"--quant {config.quant}: expected one of {', '.join(QUANT_CHOICES)}")
    if config.device_map not in (None, "auto", "balanced", "balanced_low_0", "sequential"):
        raise ValueError(f"--device-map {config.device_map}: expected auto, balanced, balanced_low_0 or sequential")
    if config.chat_template and not Path(config.chat_template).is_file():
        raise ValueError(f"--chat-template {config.chat_template}: no such file")
    for key, value in config.gen_kwargs:
        if key not in GENERATION_KEYS:
            raise ValueError(f"--gen-kwargs: unknown key {key!r} (known: {', '.join(GENERATION_KEYS)})")
        if key in ("max_new_tokens", "top_k") and value < 1 or key in ("temperature", "top_p") and value < 0:
            raise ValueError(f"--gen-kwargs: {key}={value} is out of range")
    if config.data is not None and not Path(config.data).exists():
        looks_like_path = Path(config.data).suffix in {".parquet", ".arrow", ".jsonl", ".json"} \
            or config.data.startswith((".", "/", "~")) or config.data.count("/") != 1
        if looks_like_path:  # anything else is taken as a hub id ("owner/name")
            raise ValueError(f"--data {config.data}: no such file or folder")


def _validate_device(device: str) -> None:
    if device == "auto":
        return
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {device}: expected auto, cpu, cuda or cuda:N") from None
    if resolved.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"--device {device}: expected auto, cpu, cuda or cuda:N")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available on this machine")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def _writable_folder(out_dir: Path) -> None:
    """Create the run folder and prove it takes a file, or fail with one line."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".finbench-write-test-{os.getpid()}"  # per process: ranks probe at once
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"--out {out_dir}: cannot write there ({err.strerror or err})") from None


def mark_duplicate_ids(questions: list[Question], notes: list[str]) -> list[Question]:
    """A repeated question id is a per-sample error on every repeat (the first keeps it): results
    are keyed by id, so two rows with one id would be merged or miscounted downstream."""
    first_seen: dict[str, int] = {}
    marked = []
    for index, question in enumerate(questions):
        first = first_seen.setdefault(question.id, index)
        if first != index:  # renamed too, so that ids stay unique in samples.parquet
            question = dataclasses.replace(
                question, id=f"{question.id}#dup{index + 1}",
                error=f"duplicate id {question.id!r}: record {index + 1} repeats the id of record {first + 1}; "
                      "only the first is evaluated")
        marked.append(question)
    repeats = len(questions) - len(first_seen)
    if repeats:
        notes.append(f"{repeats} question(s) repeat an earlier id; each repeat is a per-sample error")
    return marked


def run_benchmark(config: RunConfig, model: Any = None, *, show_progress: bool = True,
                  console: Any = None, command: str | None = None) -> RunResult:
    """Run (or resume) one evaluation and write its outputs into `config.out`. `command` is
    recorded in results.json (default: this process's finbench command line)."""
    from finbench.models import load_model

    validate(config)
    if config.data is not None and Path(config.data).expanduser().exists():
        # results.json records where the data is from anywhere: `finbench report` re-reads the
        # images for its thumbnails, possibly from another working folder
        config = dataclasses.replace(config, data=str(Path(config.data).expanduser().resolve()))
    world = world_from_env()
    start_world(world)
    show_progress = show_progress and world.main
    started = time.time()
    benchmark = get_benchmark(config.benchmark)
    notes: list[str] = []  # warnings that go into results.json
    # the data first: unusable data is one line with nothing written, not a run folder with a log
    questions = hooks.load_matching(benchmark, config.data, config.limit, config.domains, config.question_types, notes)
    out_dir = Path(config.out)
    _writable_folder(out_dir)
    _log_to(out_dir / ("run.log" if world.main else f"run.rank{world.rank}.log"))
    questions = mark_duplicate_ids(questions, notes)
    cache = PredictionCache(config.cache or out_dir / "cache.sqlite")
    notes.extend(cache.notes)
    loading = [name for name in ("revision", "trust_remote_code", "attn_implementation", "chat_template")
               if getattr(config, name)]
    if model is not None and loading:
        raise ValueError(f"{', '.join(loading)}: these apply when finbench loads the model; pass the model "
                         "name instead of a loaded model, or load it with them")
    model = model or load_model(
        config.model, dtype=config.dtype, device=rank_device(config.device, world), quant=config.quant,
        max_pixels=config.max_pixels, device_map=config.device_map,
        device_preprocess=config.device_preprocess, revision=config.revision,
        trust_remote_code=config.trust_remote_code, attn_implementation=config.attn_implementation,
        chat_template=Path(config.chat_template).read_text(encoding="utf-8") if config.chat_template else None)
    _check_sampling(config, model)
    if config.compile_vision:
        _compile_vision(model, notes)
    vocab = AnswerVocabulary.for_model(model) if config.protocol == "constrained" else None
    fingerprint = {**model.fingerprint(file_digest=cache.file_digest), "arguments": model_arguments(config)}
    prompt_version = benchmark.PROMPT_VERSION if config.protocol == "constrained" else f"{benchmark.NAME}-official"
    opener = thinking_mode(config, model)
    decoding = decoding_settings(config, thinking=opener is not None)
    keys = [sample_key(fingerprint, config.protocol, prompt_version, decoding, q) for q in questions]
    cached = cache.get_many(keys)
    barrier(world)  # every rank has read the cache before any writes to it: all shard the same list
    log.info("%d questions, %d cached, model %s", len(questions), len(cached), config.model)

    predictions: dict[int, Prediction] = {}
    for index, (question, key) in enumerate(zip(questions, keys)):
        if question.error:
            predictions[index] = Prediction(id=question.id, answer="", error=question.error)
        elif key in cached:
            predictions[index] = dataclasses.replace(cached[key], id=question.id)
    n_cached = sum(1 for i in predictions if keys[i] in cached)
    todo = [i for i in range(len(questions)) if i not in predictions]
    leaders, followers = shared_generations(benchmark, questions, todo, config.protocol)
    judge = _load_judge(config, model)

    timer = StageTimer(model.device)
    loop = _BatchLoop(model, benchmark, questions, config, vocab, timer, opener)
    with timer.stage("plan"):
        items = loop.items(leaders)
        for item, error in too_long(items, model):
            predictions[item.index] = Prediction(id=questions[item.index].id, answer="", error=error)
            predictions.update(loop.follow({item.index: predictions[item.index]}, followers))
        items = shard([item for item in items if item.index not in predictions], world)
        batches = plan_batches(items, config.batch_size or AUTO_BATCH_START, config.token_budget)

    compute_started = time.perf_counter()
    first_batch_wait: float | None = None
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    saved = n_cached
    parts = ModelParts(model)
    try:
        n_followers = sum(len(followers.get(item.index, ())) for item in items)  # answered with their leader
        with _progress(show_progress, len(items) + n_followers, console) as advance, parts:
            for prepared in prefetch(batches, loop.prepare, workers=config.workers, depth=config.workers + 1):
                if first_batch_wait is None:  # the pipeline fill: nothing for the model to do yet
                    first_batch_wait = time.perf_counter() - compute_started
                timer.seconds["preprocess"] += prepared.seconds
                batch_predictions = loop.run(prepared)
                batch_predictions.update(loop.follow(batch_predictions, followers))
                answered = [(keys[i], p) for i, p in batch_predictions.items() if not p.error]
                with timer.stage("cache_write"):
                    cache.put_many(answered)
                saved += len(answered)
                predictions.update(batch_predictions)
                advance(len(batch_predictions))
    except KeyboardInterrupt:
        cache.close()
        log.warning("interrupted after %d of %d answers were saved", saved, len(questions))
        raise Interrupted(saved, len(questions)) from None
    compute_seconds = time.perf_counter() - compute_started
    if world.size > 1:  # rank 0 takes every rank's answers (errors too: the cache keeps none) and writes
        computed = {i: p for i, p in predictions.items() if i in {item.index for item in items}
                    or any(i in followers.get(item.index, ()) for item in items)}
        shares = gather({"predictions": computed, "seconds": compute_seconds, "samples": len(computed)}, world)
        if not world.main:
            cache.close()
            finish_world(world)
            return RunResult(out_dir, {"rank": world.rank, "computed": len(computed)}, None)
        for share in shares[1:]:
            predictions.update(share["predictions"])
        compute_seconds = max(share["seconds"] for share in shares)
        notes.append(f"data parallel over {world.size} ranks: {[share['samples'] for share in shares]} samples each")
    with timer.stage("judge"):
        judged = judge_run(benchmark, questions, predictions, judge, cache, config.judge or "",
                           config.judge_max_new_tokens)
    cache.close()

    samples = _samples_table(questions, predictions, keys)
    for column, values in judged.columns.items():
        samples[column] = values
    scores = _score(samples, benchmark.SCORER, config.bootstrap, config.seed)
    samples["correct"] = scores.pop("_correct")
    throughput = {**loop.throughput(len(todo), compute_seconds), "model_parts_s": dict(parts.seconds),
                  "first_batch_wait_s": first_batch_wait}
    if not todo:
        throughput = _previous_throughput(out_dir, fingerprint) or {**throughput, "all_from_cache": True}
    errors = samples.loc[samples["error"] != "", ["id", "error"]]
    results = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "benchmark": benchmark.NAME,
        "config": dataclasses.asdict(config),
        "fingerprint": fingerprint,
        "protocol": config.protocol,
        "prompt_version": prompt_version,
        "decoding": decoding,
        "thinking": None if opener is None else {"budget": config.think_budget, "opener": opener},
        "n_questions": len(questions),
        "n_cached": n_cached,
        "n_computed": len(todo),
        "scores": scores,
        "judge": judged.summary,
        "throughput": throughput,
        "notes": notes,
        "errors": {"count": int(len(errors)),
                   "by_message": {k: int(v) for k, v in errors["error"].str.split(":").str[0].value_counts().items()},
                   "samples": errors.head(50).to_dict("records")},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "platform": platform.platform()},
        "provenance": provenance(config, started, model.device, _digest_or_empty(config), command),
        "started": started,
        "seconds": time.time() - started,
    }
    # write-then-rename: a kill while writing never leaves a truncated output behind
    write_samples(samples, out_dir / "samples.parquet")
    _write_json(out_dir / "results.json", results)
    from finbench.report.html import write_report

    try:  # the answers and scores are on disk already; a report that fails to render loses nothing
        write_report(out_dir)
    except Exception as err:  # noqa: BLE001
        log.exception("report.html could not be written")
        results["notes"].append(f"report.html could not be written ({type(err).__name__}: {err}); "
                                f"rebuild it with `finbench report {out_dir}`")
        _write_json(out_dir / "results.json", results)
    log.info("done: %s", {k: scores.get(k) for k in ("finscore", "accuracy")})
    finish_world(world)
    return RunResult(out_dir, results, samples)


def shared_generations(benchmark: Any, questions: Sequence[Question], todo: Sequence[int],
                       protocol: str) -> tuple[list[int], dict[int, list[int]]]:
    """(questions to compute, leader → followers): questions with one `group_key` send the same
    request (FAMMA's grouped official call), so only the first is generated."""
    leaders: dict[str, int] = {}
    followers: dict[int, list[int]] = {}
    kept = []
    for index in todo:
        key = hooks.group_key(benchmark, questions[index], protocol)
        if key is not None and key in leaders:
            followers.setdefault(leaders[key], []).append(index)
            continue
        if key is not None:
            leaders[key] = index
        kept.append(index)
    return kept, followers


def _load_judge(config: RunConfig, model: Any) -> Any:
    if not getattr(config, "judge", None):
        return None
    return load_judge(config.judge, dtype=config.dtype, device=config.device, model=model)


def too_long(items: Sequence[Item], model: Any) -> list[tuple[Item, str]]:
    """Prompts (text + image tokens) longer than the model's context, with their error: run, they
    would be truncated or fail deep inside the model."""
    context = model.max_context() if hasattr(model, "max_context") else None
    if not context:
        return []
    return [(item, f"prompt of {item.n_tokens} tokens exceeds the model's context of {context}")
            for item in items if item.n_tokens > context]


class _BatchLoop:
    """Per-batch work: preprocessing (thread-safe), decoding with out-of-memory backoff, stats."""

    def __init__(self, model: Any, benchmark: Any, questions: Sequence[Question], config: RunConfig,
                 vocab: AnswerVocabulary | None, timer: StageTimer, thinking_opener: str | None = None) -> None:
        self.model, self.benchmark, self.questions = model, benchmark, questions
        self.config, self.vocab, self.timer = config, vocab, timer
        self.thinking_opener = thinking_opener  # None: no thinking block
        self.reasoning_tokens = 0
        self.max_batch = config.batch_size or AUTO_BATCH_START
        self.image_tokens = 0
        self.prompt_tokens = 0
        self.padded_tokens = 0  # rows × padded length of every prefill: padding_ratio = padded / prompt
        self.flops = 0.0
        self.oom_retries = 0
        self.accounting_errors = 0  # batches whose token/FLOP count raised (answers kept)
        generation = dict(config.gen_kwargs)
        budget = generation.pop("max_new_tokens", config.max_new_tokens)
        self.generation = (budget, generation) if generation else (budget,)  # greedy: the plain contract
        if generation.get("temperature"):
            torch.manual_seed(config.seed)  # sampled generation repeats for the same seed and batches

    def items(self, indices: Sequence[int]) -> list[Item]:
        """Token estimates for batching: the prompt's text tokens plus each image's tokens,
        from its header size and the processor's resize rule (no pixel decoding)."""
        if not indices:
            return []
        requests = [self.request(self.questions[i], []) for i in indices]
        text_tokens = self.model.text_token_counts([self.model.prompt_text(r) for r in requests])
        items = []
        for index, n_text in zip(indices, text_tokens):
            n_image = 0
            for data in self.questions[index].images:
                with contextlib.suppress(Exception):  # a broken header is reported when decoding
                    n_image += self.model.image_token_count(*image_size(data))
            items.append(Item(index, decoder_name(self.questions[index], self.config.protocol), n_text + n_image))
        return items

    def request(self, question: Question, images: list[Any]) -> Any:
        """The benchmark's request, with the run's system prompt (if any) in front."""
        request = self.benchmark.build_request(question, images, self.config.protocol)
        if self.config.system_prompt:
            system = {"role": "system", "content": [{"type": "text", "text": self.config.system_prompt}]}
            request = dataclasses.replace(request, messages=(system, *request.messages))
        return request

    def prepare(self, indices: Sequence[int]) -> PreparedBatch:
        opener = self.thinking_opener
        requests: dict[str, Any] = {}

        def build(question: Question, images: list[Any]) -> Any:
            request = self.request(question, images)
            # a thinking prompt ends inside the open block; the answer prefix comes after it closes
            request = request if opener is None else dataclasses.replace(request, answer_prefix=opener)
            requests[question.id] = request
            return request

        batch = prepare_batch(indices, self.questions, build, self._model_inputs)
        batch.prompts = {i: self._logged_prompt(requests[self.questions[i].id]) for i in batch.indices}
        return batch

    def _model_inputs(self, requests: list[Any]) -> Any:
        """The model's `prepare`, plus, for a CUDA model, pinning in this worker thread (off the
        model's thread, which then only enqueues the copy)."""
        inputs = self.model.prepare(requests)
        if self.model.device.type == "cuda" and hasattr(inputs, "items"):
            return pin_host_memory(inputs)
        return inputs

    def _logged_prompt(self, request: Any) -> str:
        """What the model saw, as text (image placeholders unexpanded), or its hash."""
        try:
            text = self.model.prompt_text(request)
        except Exception as err:  # noqa: BLE001 — a log line never fails a batch
            return f"(prompt not rendered: {type(err).__name__})"
        return text if self.config.log_prompts else "sha256:" + hashlib.sha256(text.encode()).hexdigest()

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
        reasoning = None
        if self.thinking_opener is not None and name != "generate":
            prefixes = [self.benchmark.build_request(q, [], self.config.protocol).answer_prefix for q in questions]
            inputs, reasoning = think(self.model, inputs, self.config.think_budget, prefixes, stage)
            self.reasoning_tokens += sum(r.tokens for r in reasoning)
        if name == SINGLE:
            decoded = decode_single(self.model, inputs, n_options, self.vocab, stage)
        elif name == MULTI:
            decoded = decode_multi(self.model, inputs, n_options, self.vocab, stage)
        elif name == NUMERICAL:
            decoded = decode_numerical(self.model, inputs, self.config.numeric_budget, self.vocab, stage)
        else:
            with stage("generate"):
                texts, counts = self._generate(prepared, questions, inputs)
            decoded = [Prediction(id="", answer=hooks.extract_answer(self.benchmark, q, t, self.config.protocol),
                                  generated_text=t, n_generated_tokens=n)
                       for q, t, n in zip(questions, texts, counts)]
        if reasoning is not None:
            decoded = [dataclasses.replace(p, reasoning_text=r.text, reasoning_tokens=r.tokens, budget_cut=r.cut)
                       for p, r in zip(decoded, reasoning)]
        share = (time.perf_counter() - started) / len(questions)
        self._account(prepared.inputs)
        return {i: dataclasses.replace(p, id=q.id, seconds=share, prompt=prepared.prompts.get(i, ""))
                for i, q, p in zip(prepared.indices, questions, decoded)}

    def _generate(self, prepared: PreparedBatch, questions: Sequence[Question], inputs: Any) -> tuple[list[str], list[int]]:
        """Free generation. A multi-turn benchmark's sessions are asked turn by turn: every later
        turn is rebuilt by the benchmark from the replies so far, and the texts are the JSON
        lists of the replies."""
        turns = [hooks.n_turns(self.benchmark, q) for q in questions]
        texts, counts = self.model.generate(inputs, *self.generation)
        sessions = [hooks.is_session(self.benchmark, q) for q in questions]
        if not any(sessions):
            return texts, counts
        history = [[t] for t in texts]
        for turn in range(1, max(turns)):
            active = [k for k, n in enumerate(turns) if n > turn]
            indices = [prepared.indices[k] for k in active]
            replies = {id(self.questions[i]): history[k] for i, k in zip(indices, active)}
            batch = prepare_batch(indices, self.questions, lambda q, images: hooks.build_turn_request(
                self.benchmark, q, images, self.config.protocol, replies[id(q)]), self.model.prepare)
            if batch.errors:
                raise ValueError(next(iter(batch.errors.values())))
            more, more_counts = self.model.generate(self.model.to_device(batch.inputs), *self.generation)
            for k, text, n in zip(active, more, more_counts):
                history[k].append(text)
                counts[k] += n
        # per row, not per batch: a session's text is its list of replies (one turn included),
        # anything else is the reply as generated, whatever it shares a batch with
        return [json.dumps(h, ensure_ascii=False) if session else h[0] for h, session in zip(history, sessions)], counts

    def follow(self, batch: dict[int, Prediction], followers: dict[int, list[int]]) -> dict[int, Prediction]:
        """Predictions of questions that share a leader's generation (see `shared_generations`):
        the leader's text, each with its own extracted answer."""
        out = {}
        for leader, prediction in batch.items():
            for index in followers.get(leader, ()):
                question = self.questions[index]
                answer = "" if prediction.error else hooks.extract_answer(
                    self.benchmark, question, prediction.generated_text, self.config.protocol)
                out[index] = dataclasses.replace(prediction, id=question.id, answer=answer)
        return out

    def _account(self, inputs: Any) -> None:
        """Token and FLOP bookkeeping. It never fails a batch: the answers are already decoded,
        so a family whose count raises loses its count (noted once), never its answers."""
        try:
            image_tokens = self.model.count_image_tokens(inputs)
            prompt_tokens = int(inputs["attention_mask"].sum())
            padded_tokens = int(inputs["attention_mask"].numel())
            flops = float(self.model.prefill_flops(inputs))
        except Exception as err:  # noqa: BLE001
            if not self.accounting_errors:
                log.warning("throughput accounting failed (%s: %s); answers are kept, counts are incomplete",
                            type(err).__name__, err)
            self.accounting_errors += 1
            return
        self.image_tokens += image_tokens
        self.prompt_tokens += prompt_tokens
        self.padded_tokens += padded_tokens
        self.flops += flops

    def throughput(self, n_samples: int, seconds: float) -> dict[str, Any]:
        device = self.model.device
        stats: dict[str, Any] = {
            "samples": n_samples,
            "seconds": seconds,
            "samples_per_s": n_samples / seconds if seconds > 0 else None,
            "image_tokens": self.image_tokens,
            "image_tokens_per_s": self.image_tokens / seconds if seconds > 0 else None,
            "prompt_tokens": self.prompt_tokens,
            "padding_ratio": self.padded_tokens / self.prompt_tokens if self.prompt_tokens else None,
            "reasoning_tokens": self.reasoning_tokens,
            "stages_s": dict(self.timer.seconds),
            "device": str(device),
            "oom_retries": self.oom_retries,
            "accounting_errors": self.accounting_errors,
            "final_max_batch": self.max_batch,
            # analytic prefill FLOPs over the time spent in prefill forwards (the "forward" stage)
            "prefill_flops": self.flops,
            "prefill_tflops_per_s": self.flops / forward / 1e12 if (forward := self.timer.seconds.get("forward")) else None,
        }
        with contextlib.suppress(Exception):  # bookkeeping never fails a run
            stats["model_memory_gib"] = self.model.model.get_memory_footprint() / 2**30
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
            "question": question.text, "options": list(question.options), "prompt": p.prompt,
            "answer": p.answer, "raw_output": p.generated_text, "n_options": len(question.options),
            "option_probs": [math.exp(lp) for lp in p.option_logprobs],
            "confidence": _confidence(question, p),
            "reasoning_text": p.reasoning_text, "reasoning_tokens": p.reasoning_tokens, "budget_cut": p.budget_cut,
            "tolerance": math.nan if question.tolerance is None else question.tolerance,
            "error": p.error or "", "seconds": p.seconds, "n_generated_tokens": p.n_generated_tokens,
            "sample_key": keys[index], **dict(question.meta),
        })
    return pd.DataFrame(rows)


def _confidence(question: Question, p: Prediction) -> float:
    """The prediction's confidence; recomputed from the stored distributions for cache rows
    written before confidences existed; NaN for errors and for answers without probabilities."""
    if p.error:
        return math.nan
    if p.confidence is not None and not math.isnan(p.confidence):
        return p.confidence
    return answer_confidence(question.kind, p.option_logprobs, p.step_logprobs)


def _previous_throughput(out_dir: Path, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The throughput of the run that computed this folder's answers, for a rerun that computed
    nothing (same model fingerprint only)."""
    import json

    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        previous = json.loads((out_dir / "results.json").read_text())
        current = json.loads(json.dumps(fingerprint, default=str))
        if model_identity(previous["fingerprint"]) == model_identity(current) and previous["throughput"].get("samples"):
            return {**previous["throughput"], "all_from_cache": True}
    return None


def _score(samples: Any, scorer: str, n_bootstrap: int, seed: int) -> dict[str, Any]:
    from finbench.scoring import per_question_correct, score_samples

    scores = score_samples(samples, benchmark=scorer, n_bootstrap=n_bootstrap, seed=seed)
    scores["_correct"] = per_question_correct(samples, benchmark=scorer)
    return scores


def _digest_or_empty(config: RunConfig) -> Callable[[Path], str]:
    """File digests for provenance, remembered in the run's cache (reopened: the run closed it)."""
    def digest(path: Path) -> str:
        try:
            cache = PredictionCache(config.cache or Path(config.out) / "cache.sqlite")
            try:
                return cache.file_digest(path)
            finally:
                cache.close()
        except Exception:  # noqa: BLE001 — provenance never fails a run
            return ""
    return digest


def write_samples(samples: Any, path: Path) -> None:
    """samples.parquet with its schema version in the file's metadata; write-then-rename, so a
    kill while writing never leaves a truncated file behind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from finbench.report.schema import SAMPLES_SCHEMA_VERSION

    table = pa.Table.from_pandas(samples, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"finbench.schema_version": SAMPLES_SCHEMA_VERSION.encode()})
    temporary = path.with_suffix(".parquet.tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    import json

    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(payload, indent=2, default=str, allow_nan=True))
    os.replace(temporary, path)


def _log_to(path: Path) -> None:
    """run.log gets finbench's log and every library warning (the console shows each once)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for logger in (log, logging.getLogger("py.warnings")):
        for old in [h for h in logger.handlers if isinstance(h, logging.FileHandler)]:
            logger.removeHandler(old)
            old.close()
        logger.addHandler(handler)
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
