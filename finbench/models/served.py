"""A model behind an OpenAI-compatible server (`--model http://HOST:PORT/v1`: vLLM, SGLang,
`transformers serve`, llama.cpp), as a model adapter (models/contract.py) like any other: the
runner, cache, studies, reports and the judge use it unchanged. Differs from an in-process family
in where every answer is computed — the server — and so in what it can read. At start-up a probe
finds which server it is and what it reads (models/served_engines.py); then:

- generated answers (official protocols, cot/pot, sessions, `--samples`): `/v1/chat/completions`
  with the benchmark's exact messages, its images as base64 PNG data URLs (lossless: the pixels
  finbench prepared), `max_tokens`, temperature/top_p/seed (temperature 0 = greedy);
- constrained answers, read from the server, never guessed (`read_by` names the reading):
  - "token logprobs" (vLLM): the full-vocabulary log-probability of the answer tokens' ids
    (`logprob_token_ids`) after finbench's own constrained prompt (`continue_final_message`). A
    single choice is one request; a multi-answer set and a number are decoded by finbench's own
    set and number grammars (runner/decoding.py) over these scores: `prefill` and `decode_step`
    ask the server for the next token's scores after the answer begun so far, `logits` reads them;
  - "top logprobs" (SGLang, llama.cpp): single choices from the top 20 log-probabilities of the
    first answer token; an option missing from them is that item's error, never renormalised;
  - "decision endpoint" (`/v1/systemone` of transformers serve, vLLM): single choices, one choice
    question per item; the server renders its OWN decision template, so the prompt differs from
    finbench's constrained prompt;
  what a server cannot read (sets and numbers without token log-probabilities, a thinking block)
  is declared and refused at start-up in one line naming what reads it; `generate_ids` raises.
- token counts: each row's prompt and image tokens as the server's `usage` reports them, kept in
  the prepared batch (`prompt_tokens`, `image_tokens`: models/inputs.py) for the runner's cost.

Token ids: the runner's answer vocabulary asks for the ids of letters, digits and separators;
they are positions in `ANSWER_TEXTS` (finbench's own); the server's ids of each were found by the
probe. Nothing about the weights can be fingerprinted from a client: the cache keys name the
served model's id, the server, the endpoints and the readings; results.json says the weights are
not fingerprinted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

import torch

from finbench.core.types import MULTI, NUMERICAL, OPTION_LETTERS, SINGLE, ModelRequest
from finbench.models.contract import Capabilities, GenerationInterrupted, ModelUnavailable
from finbench.models.inputs import ModelInputs
from finbench.models.part_timing import PartClock
from finbench.models.served_bodies import (ServedRow, chat_body, decision_body, generation_settings, logprobs_body,
                                          logprobs_of_letters, option_logprobs, prompt_part_text, served_row,
                                          token_logprobs, token_logprobs_body, usage_counts)
from finbench.models.served_client import ClientSettings, Interrupted, ServedClient, ServedError
from finbench.models.served_engines import (ANSWER_TEXTS, CHAT_PATH, DECISION, DECISION_PATH, TOKEN_LOGPROBS,
                                           TOP_LOGPROBS, Engine, Readings, engine_of, find_readings)

__all__ = ["ANSWER_TEXTS", "ServedModel", "decision_body", "load_served", "logprobs_of_letters", "served_for",
           "served_row"]

MEMO_SIZE = 4096  # answers kept for a batch asked again row by row (ServedModel._answered)
CHOICE_READINGS = {  # Capabilities.choice_reading: the note results.json and the report carry
    DECISION: "the server's decision endpoint (/v1/systemone): it renders its own decision template, so the prompt "
              "differs from finbench's constrained prompt (read_by: decision endpoint)",
    TOKEN_LOGPROBS: "the server's full-vocabulary log-probabilities of the answer tokens after finbench's constrained "
                    "prompt (read_by: token logprobs; sets and numbers decoded over them by finbench's grammars)",
    TOP_LOGPROBS: "the server's top 20 log-probabilities of the first answer token after finbench's constrained "
                  "prompt (read_by: top logprobs; an option not among them is that item's error)"}
GRAMMAR_READINGS = {MULTI: "set decoding over token logprobs", NUMERICAL: "number grammar over token logprobs"}
NOT_FINGERPRINTED = "not fingerprinted: the weights are behind the server (keyed by the served model's id)"
END_ID = len(ANSWER_TEXTS)  # finbench's id of "the answer ends": any of the server's end ids


def load_served(url: str, *, served_model: str | None = None, api_key_env: str | None = None,
                in_flight: int | None = None, timeout: float = 600.0, role: str = "--model",
                thinking: bool = False, reading: str | None = "auto") -> "ServedModel":
    """The adapter of the model `url` serves (`served_model`, or the only one it lists), or a
    ValueError with one line: no server there, no such model, several to choose from, a key
    variable that is not set, a `reading` of choices the server refuses (models/served_engines.py).
    `reading`: "auto", "logprobs", "decision", or None (a judge: generation only, nothing probed)."""
    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ValueError(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set")
    entry = _listed(url, served_model, role, key, timeout)
    owned_by = str(entry.get("owned_by") or "")
    engine = engine_of(owned_by)
    client = ServedClient(url, ClientSettings(in_flight=in_flight or engine.in_flight, timeout=timeout), key)
    try:
        readings = find_readings(client, entry["id"], engine, reading) if reading else Readings()
    except ModelUnavailable as err:
        client.close()
        raise ValueError(f"{role} {url}: {err}") from None
    except ValueError:
        client.close()
        raise
    return ServedModel(client, url, entry["id"], engine, readings, thinking, owned_by)


def _listed(url: str, served_model: str | None, role: str, key: str | None, timeout: float) -> dict[str, Any]:
    """The /v1/models entry of the model asked for (`_pick`), or a ValueError line."""
    probe = ServedClient(url, ClientSettings(in_flight=1, timeout=min(timeout, 60.0), retries=2), key)
    try:
        listed = probe.get("/models").get("data") or []
        return _pick(url, [m for m in listed if isinstance(m, dict) and "id" in m], served_model, role)
    except ValueError:  # the models listed do not name one: its own line
        raise
    except (ServedError, AttributeError) as err:
        raise ValueError(f"{role} {url}: not an OpenAI-compatible server ({err})") from None
    except (Exception, ModelUnavailable) as err:  # noqa: BLE001 — nothing listening, a bad URL: one start-up line
        raise ValueError(f"{role} {url}: no server answers there ({err})") from None
    finally:
        probe.close()


def served_for(config: Any, judge: bool = False) -> "ServedModel":
    """The served adapter of a run's --model (or, `judge`, its --judge: it only generates); the
    options that only apply when finbench loads weights were refused at start-up (sources.py
    `check_sources`)."""
    return load_served(config.judging.judge if judge else config.model,
                       served_model=config.judging.judge_served_model if judge else config.load.served_model,
                       api_key_env=config.load.api_key_env, in_flight=config.load.in_flight, timeout=config.load.request_timeout,
                       role="--judge" if judge else "--model", thinking=config.load.served_thinking and not judge,
                       reading=None if judge else config.load.served_reading)


def _pick(url: str, models: list[dict[str, Any]], name: str | None, role: str) -> dict[str, Any]:
    ids = [m["id"] for m in models]
    flag = "--judge-served-model" if role == "--judge" else "--served-model"
    if name is not None:
        if name not in ids:
            raise ValueError(f"{flag} {name}: {url} serves {', '.join(ids) or 'no model'}")
        return models[ids.index(name)]
    if len(ids) != 1:
        listed = f"several models ({', '.join(ids)}); name one with {flag}" if ids else "no model"
        raise ValueError(f"{role} {url} serves {listed}")
    return models[0]


@dataclass
class Answering:
    """`prefill`'s state of a batch decoded over token log-probabilities: each row's answer so far
    (finbench's answer texts, after the answer prefix), whether it has ended, and the scores
    [B, END_ID + 1] of finbench's answer ids at each row's next token."""

    rows: list[ServedRow]
    answered: list[str]
    done: list[bool]
    scores: torch.Tensor


class ServedModel:
    """The model contract over HTTP (module docstring). `reading` is how choices are read (None:
    this server reads none); `readings` all the probe found."""

    family = "served"
    device = torch.device("cpu")  # where finbench's own tensors (the option scores) live
    dtype = torch.float32

    def __init__(self, client: ServedClient, url: str, model_id: str, engine: Engine, readings: Readings,
                 thinking: bool = False, owned_by: str = "") -> None:
        self.client, self.source, self.model_id, self.engine = client, url, model_id, engine
        self.server = owned_by or "unknown"
        self.thinking = thinking  # chat_template_kwargs enable_thinking of every chat completion
        weakref.finalize(self, client.close)  # its connections close with the adapter
        # answers of the latest requests by body: a batch with one failed row is asked again row by
        # row (runner/loop.py), and the rows that were answered are not sent a second time
        self._answered: dict[str, Any] = {}
        self.readings, self.reading = readings, readings.choices
        self.vocabulary = readings.vocabulary
        kinds = ((SINGLE,) if readings.choices else ()) + ((MULTI, NUMERICAL) if readings.grammar else ())
        self.capabilities = Capabilities(thinking=False, quantization=("none",), sampling=True, chat_template=False,
                                         hub_options=False, constrained=kinds, unread=readings.refused,
                                         choice_reading=CHOICE_READINGS.get(readings.choices or "", ""))

    @property
    def in_flight(self) -> int:
        return self.client.settings.in_flight

    def read_by(self) -> dict[str, str]:
        """How each constrained kind is read (samples.parquet `read_by`)."""
        readings = {SINGLE: self.reading} if self.reading else {}
        return {**readings, **({k: GRAMMAR_READINGS[k] for k in (MULTI, NUMERICAL)} if self.readings.grammar else {})}

    # ---- text and tokens (finbench's own ids: positions in ANSWER_TEXTS) -----------------------------
    def prompt_text(self, request: ModelRequest) -> str:
        """The prompt as a readable transcript (the server renders it with its own template)."""
        lines = [f"{m['role']}: {prompt_part_text(m, '<image>')}" for m in request.messages]
        return "\n".join(lines) + (f"\nassistant: {request.answer_prefix}" if request.answer_prefix else "")

    def text_token_counts(self, texts: Sequence[str]) -> list[int]:
        return [max(1, len(t) // 4) for t in texts]  # an estimate, for batching only: the server counts

    def image_token_count(self, width: int, height: int) -> int:
        return 0  # counted by the server

    def single_token_ids(self, texts: Sequence[str]) -> list[int]:
        unknown = [t for t in texts if t not in ANSWER_TEXTS]
        if unknown:
            raise ValueError(f"{self.source}: finbench reads no token ids of {unknown!r} from a server")
        return [ANSWER_TEXTS.index(t) for t in texts]

    def stop_token_ids(self) -> list[int]:
        return [END_ID]

    def end_token_ids(self) -> list[int]:
        return [END_ID]

    def encode(self, text: str) -> list[int]:
        raise ValueError(f"{self.source}: a served model's tokenizer is the server's")

    def decode(self, rows: Sequence[Sequence[int]]) -> list[str]:
        raise ValueError(f"{self.source}: a served model's tokenizer is the server's")

    def reserved_token_ids(self) -> frozenset[int]:
        return frozenset()  # no ids here: the server's replies are text, and thinking is not declared

    @property
    def pad_token_id(self) -> int | None:
        return None

    def thinking_token_ids(self) -> tuple[int, int] | None:
        return None

    def template_opens_thinking(self) -> bool:
        return False

    # ---- inputs ------------------------------------------------------------------------------------
    def prepare(self, requests: Sequence[ModelRequest]) -> ModelInputs:
        """Each request as the server takes it (images encoded here, in the worker threads)."""
        rows = [served_row(r) for r in requests]
        return ModelInputs({"finbench_rows": rows}, texts=[r.text or self.prompt_text(r) for r in requests])

    def to_device(self, inputs: ModelInputs) -> ModelInputs:
        return inputs

    # ---- compute -------------------------------------------------------------------------------------
    def score_options(self, inputs: Any, option_token_ids: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [B, 14] of the option letters, read by the server (-inf past each
        row's options; finbench's ids [S, 14]: S spellings, combined). A row the server cannot
        read fails the batch: the runner then asks each question alone, and that one becomes the error."""
        rows = inputs["finbench_rows"]
        if self.reading == TOKEN_LOGPROBS:
            scores = self._next_scores(inputs, rows, [""] * len(rows))
            letters = scores[:, option_token_ids.reshape(-1)].reshape(len(rows), *option_token_ids.shape)
            combined = torch.logsumexp(letters, dim=1)
            past = torch.arange(len(OPTION_LETTERS))[None] >= torch.tensor([r.n_options for r in rows])[:, None]
            return combined.masked_fill(past, -math.inf)
        read = {DECISION: self._read_decision, TOP_LOGPROBS: self._read_top}.get(self.reading or "")
        if read is None:
            raise ServedError(f"{self.source} returns no option probabilities")
        results = self._map(read, rows)
        self._count(inputs, [answer for _, answer in results])
        return torch.tensor([row + [-math.inf] * (len(OPTION_LETTERS) - len(row)) for row, _ in results])

    def _map(self, call: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`call` over `items`, in flight together; the first failure raised."""
        results = self.client.map(call, items)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        return results

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body`, or the answer it got in the latest batches (see `_answered`)."""
        key = hashlib.sha256(json.dumps([path, body], sort_keys=True).encode()).hexdigest()
        if key not in self._answered:
            if len(self._answered) >= MEMO_SIZE:
                self._answered.clear()
            self._answered[key] = self.client.post(path, body)
        return self._answered[key]

    def _read_decision(self, row: ServedRow) -> tuple[list[float], Any]:
        answer = self._post(DECISION_PATH, decision_body(self.model_id, row, self.engine.decision or "assets"))
        try:
            probabilities = answer["answers"]["answer"]["probabilities"]
        except (KeyError, TypeError):
            raise ServedError(f"{DECISION_PATH}: the answer has no option probabilities") from None
        return option_logprobs(probabilities, row.n_options, "the decision endpoint's probabilities"), answer

    def _read_top(self, row: ServedRow) -> tuple[list[float], Any]:
        answer = self._post(CHAT_PATH, logprobs_body(self.model_id, row, self.thinking))
        return logprobs_of_letters(answer, row.n_options), answer

    def _next_scores(self, inputs: Any, rows: Sequence[ServedRow], answered: Sequence[str]) -> torch.Tensor:
        """[B, END_ID + 1] log-probabilities of finbench's answer ids at the next token after each
        row's prompt and answer begun (-inf for a text that is not one server token; the end: the
        server's end ids together); `inputs` given: the rows' token counts recorded there."""
        vocabulary = self.vocabulary
        if vocabulary is None:
            raise ServedError(f"{self.source} returns no log-probabilities of token ids")

        def ask(pair: tuple[ServedRow, str]) -> tuple[list[float], Any]:
            answer = self._post(CHAT_PATH, token_logprobs_body(self.model_id, pair[0], vocabulary.asked, pair[1],
                                                               self.thinking))
            found = token_logprobs(answer, vocabulary.asked)
            ends = torch.logsumexp(torch.tensor([found[i] for i in vocabulary.ends], dtype=torch.float64), 0)
            return [found[i] if i is not None else -math.inf for i in vocabulary.ids] + [float(ends)], answer

        results = self._map(ask, list(zip(rows, answered)))
        if inputs is not None:
            self._count(inputs, [answer for _, answer in results])
        return torch.tensor([scores for scores, _ in results], dtype=torch.float32)

    def _count(self, inputs: Any, answers: Sequence[Any]) -> None:
        """Each row's prompt and image tokens as its answer's usage reports them (models/inputs.py)."""
        counts = [usage_counts(answer) for answer in answers]
        inputs["prompt_tokens"] = [prompt for prompt, _, _ in counts]
        inputs["image_tokens"] = [image for _, image, _ in counts]

    def prefill(self, inputs: Any) -> tuple[torch.Tensor, Any]:
        """The scores of finbench's answer ids at each row's first answer token, and the state
        `decode_step` continues (`Answering`): sets and numbers are decoded over the server's scores."""
        if not self.readings.grammar:
            raise ValueError(f"{self.source}: multi-answer sets and numbers are not read here ({self.readings.refused})")
        rows = list(inputs["finbench_rows"])
        scores = self._next_scores(inputs, rows, [""] * len(rows))
        return scores, Answering(rows, [""] * len(rows), [False] * len(rows), scores)

    def decode_step(self, state: Answering, token_ids: torch.Tensor) -> torch.Tensor:
        """Each unfinished row's answer grown by its token (finbench's id; END_ID ends it), and the
        scores at the next token asked of the server (a finished row keeps its last)."""
        for row, token in enumerate(token_ids.tolist()):
            if not state.done[row]:
                state.done[row] = token == END_ID
                state.answered[row] += "" if state.done[row] else ANSWER_TEXTS[token]
        active = [row for row, done in enumerate(state.done) if not done]
        if active:
            scores = state.scores.clone()
            scores[active] = self._next_scores(None, [state.rows[r] for r in active],
                                               [state.answered[r] for r in active])
            state.scores = scores
        return state.scores

    def output_rows(self, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)  # finbench's ids index the scores

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return hidden.index_select(1, rows.to(hidden.device)).float()

    def generate(self, inputs: Any, max_new_tokens: int,
                 sampling: dict[str, Any] | None = None) -> tuple[list[str], list[int]]:
        """Free text of each row from /v1/chat/completions: greedy (temperature 0) unless `sampling`
        gives a temperature. Ctrl-C keeps the rows that had finished (`GenerationInterrupted`)."""
        body = generation_settings(max_new_tokens, sampling)
        rows = inputs["finbench_rows"]
        # a sampled row's seed is drawn from the run's seed stream (finbench/models/sampled_decoding.py has made it
        # current), one per row: a rerun with the same --seed asks the server for the same samples
        first = int(torch.randint(0, 2**31 - len(rows), (1,))) if body["temperature"] > 0 else None
        seeded = [{**body, "seed": first + k} if first is not None else body for k in range(len(rows))]
        try:
            results = self.client.map(lambda pair: self._generate_one(*pair), list(zip(rows, seeded)))
        except Interrupted as stop:
            raise GenerationInterrupted({k: t for k, (t, _, _) in stop.done.items()},
                                        {k: n for k, (_, n, _) in stop.done.items()}) from None
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        self._count(inputs, [answer for _, _, answer in results])
        return [text for text, _, _ in results], [n for _, n, _ in results]

    def _generate_one(self, row: ServedRow, settings: dict[str, Any]) -> tuple[str, int, Any]:
        if row.answer_prefix and not (self.engine.logprobs or self.reading in (TOKEN_LOGPROBS, TOP_LOGPROBS)):
            raise ServedError(f"{self.source} cannot continue the answer prefix {row.answer_prefix!r} (vLLM and "
                              "SGLang take continue_final_message)")
        answer = self._post(CHAT_PATH, {**chat_body(self.model_id, row, self.thinking), **settings})
        try:
            choice = answer["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ServedError(f"{CHAT_PATH}: the answer has no message") from None
        return text, usage_counts(answer)[2] or 0, answer

    def generate_ids(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int]) -> torch.Tensor:
        raise ValueError(f"{self.source}: a served model's token ids are the server's (no thinking block is read)")

    def vocabulary_size(self) -> int:
        return END_ID + 1

    # ---- bookkeeping -----------------------------------------------------------------------------------
    def count_image_tokens(self, inputs: Any) -> int:
        counts = self.image_tokens_per_row(inputs)
        if any(n is None for n in counts):
            raise ValueError("the server does not count image tokens")
        return sum(counts)

    def image_tokens_per_row(self, inputs: Any) -> list[int]:
        """Each row's image tokens as the server's usage reported them (None where it does not)."""
        if "image_tokens" not in inputs:
            raise ValueError("counted by the server, once it answers")
        return list(inputs["image_tokens"])

    def prefill_flops(self, inputs: Any) -> float | None:
        return None

    def max_context(self) -> int | None:
        return None  # the server refuses a prompt longer than its context: that question's error

    def memory_footprint(self) -> int | None:
        return None

    def timed_parts(self, clock: PartClock) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def compile_vision(self) -> dict[str, int]:
        return {}

    def compile_language_model(self) -> dict[str, int]:
        return {}

    def fingerprint(self, file_digest: Callable[[Path], str] | None = None) -> dict[str, Any]:
        """What names the answers: the served model's id, the server, the endpoints and the
        readings of constrained answers (the URL is not in the cache key: a server restarted on
        another port answers the same). The weights, their type, dtype and quantization cannot be
        known from here (None)."""
        choice_path = DECISION_PATH if self.reading == DECISION else CHAT_PATH
        return {"family": self.family, "source": self.source, "model_type": None, "dtype": None, "quant": None,
                "served_model": self.model_id, "server": self.server, "generation_endpoint": "/v1" + CHAT_PATH,
                "choice_endpoint": "/v1" + choice_path if self.reading else None,
                "read_by": self.read_by(), "enable_thinking": self.thinking, "weights": NOT_FINGERPRINTED}
