"""A model behind an OpenAI-compatible server (`--model http://HOST:PORT/v1`: vLLM, SGLang,
`transformers serve`, llama.cpp), as a model adapter (models/contract.py) like any other: the
runner, cache, studies, reports and the judge use it unchanged. Differs from an in-process family
in where every answer is computed — the server — and so in what it can read:

- generated answers (official protocols, cot/pot, sessions, `--samples`): `/v1/chat/completions`
  with the benchmark's exact messages, its images as base64 PNG data URLs (lossless: the pixels
  finbench prepared), `max_tokens`, temperature/top_p/seed (temperature 0 = greedy);
- single-answer choices, read from the server, never guessed (`reading`):
  - "logprobs" (vLLM, SGLang): a one-token completion continuing finbench's own constrained prompt
    (`continue_final_message`) with the top 20 log-probabilities; every option's letter (bare or
    space-prefixed) must be among them, else the item is an error naming why — never a
    renormalised guess over what came back;
  - "decision endpoint" (`/v1/systemone`, `/v1/decisions`: transformers serve, llama.cpp, vLLM,
    SGLang): one choice question per item, the prompt's text as its state and its images as assets.
    The server renders its OWN decision template, so the prompt differs from finbench's
    constrained prompt (results name the reading: `fingerprint()["read_by"]`);
- what no server reads (multi-answer sets, the numeric grammar, a thinking block) is declared and
  refused at start-up in one line; the hidden-state methods (`prefill`, `logits`, …) raise.

Token ids: the runner's answer vocabulary asks for the ids of letters, digits and separators; the
server's tokenizer is not known here, so they are positions in `ANSWER_TEXTS` (finbench's own).
Nothing about the weights can be fingerprinted from a client: the cache keys name the served
model's id, the endpoints and the reading, and results.json says the weights are not fingerprinted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import weakref
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

import torch

from finbench.core.types import OPTION_LETTERS, SINGLE, ModelRequest
from finbench.models.contract import Capabilities, GenerationInterrupted, ModelUnavailable
from finbench.models.inputs import ModelInputs
from finbench.models.part_timing import PartClock
from finbench.models.served_bodies import (TOP_LOGPROBS, ServedRow, decision_body, generation_settings,
                                          logprobs_body, logprobs_of_letters, option_logprobs, prompt_part_text,
                                          served_row)
from finbench.models.served_client import ClientSettings, Interrupted, ServedClient, ServedError

CHAT_PATH = "/chat/completions"
DECISION_PATHS = ("/systemone", "/decisions")  # transformers serve and llama.cpp; SGLang
LOGPROB_SERVERS = ("vllm", "sglang")  # `owned_by` in /v1/models of the servers that return logprobs
READ_BY_LOGPROBS, READ_BY_DECISION = "logprobs", "decision endpoint"
IN_FLIGHT, OTHER_IN_FLIGHT = {"vllm": 64, "sglang": 64}, 4  # continuous batching; others mostly one at a time
MEMO_SIZE = 1024  # answers kept for a batch asked again row by row (ServedModel._answered)
CHOICE_READINGS = {  # Capabilities.choice_reading: the note results.json and the report carry
    READ_BY_DECISION: "the server's decision endpoint ({path}): it renders its own decision template, so the "
                      "prompt differs from finbench's constrained prompt (read_by: decision endpoint)",
    READ_BY_LOGPROBS: "the server's top {top} log-probabilities of the first answer token after finbench's "
                      "constrained prompt (read_by: logprobs)"}
NOT_FINGERPRINTED = "not fingerprinted: the weights are behind the server (keyed by the served model's id)"
# the texts the runner's answer vocabulary asks ids for (runner/decoding.py), by position
ANSWER_TEXTS = (*OPTION_LETTERS, *(" " + c for c in OPTION_LETTERS), ",", *"0123456789", ".", "-", "%", " ")
END_ID = len(ANSWER_TEXTS)


def load_served(url: str, *, served_model: str | None = None, api_key_env: str | None = None,
                in_flight: int | None = None, timeout: float = 600.0, role: str = "--model",
                thinking: bool = False, reading: str = "auto") -> "ServedModel":
    """The adapter of the model `url` serves (`served_model`, or the only one it lists), or a
    ValueError with one line: no server there, no such model, several to choose from, a key
    variable that is not set, a `reading` the server has no endpoint for. Asks /v1/models and
    which decision endpoint exists; nothing else. `reading`: "auto" (logprobs on vLLM and SGLang,
    else the decision endpoint), "logprobs" (e.g. vLLM behind a gateway that names itself) or
    "decision"."""
    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ValueError(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set")
    probe = ServedClient(url, ClientSettings(in_flight=1, timeout=min(timeout, 60.0), retries=2), key)
    try:
        listed = probe.get("/models").get("data") or []
        entry = _pick(url, [m for m in listed if isinstance(m, dict) and "id" in m], served_model, role)
        engine = str(entry.get("owned_by") or "").lower()
        logprobs = reading == "logprobs" or reading == "auto" and engine in LOGPROB_SERVERS
        decision = None if logprobs else next((p for p in DECISION_PATHS if probe.exists(p)), None)
    except ValueError:  # the models listed do not name one: its own line
        raise
    except (ServedError, AttributeError) as err:
        raise ValueError(f"{role} {url}: not an OpenAI-compatible server ({err})") from None
    except (Exception, ModelUnavailable) as err:  # noqa: BLE001 — nothing listening, a bad URL: one start-up line
        raise ValueError(f"{role} {url}: no server answers there ({err})") from None
    finally:
        probe.close()
    if reading == "decision" and decision is None:
        raise ValueError(f"--served-reading decision: {url} has no decision endpoint ({', '.join(DECISION_PATHS)})")
    settings = ClientSettings(in_flight=in_flight or IN_FLIGHT.get(engine, OTHER_IN_FLIGHT), timeout=timeout)
    read_by = READ_BY_LOGPROBS if logprobs else READ_BY_DECISION if decision else None
    return ServedModel(ServedClient(url, settings, key), url, entry["id"], engine, read_by, decision, thinking)


def served_for(config: Any, judge: bool = False) -> "ServedModel":
    """The served adapter of a run's --model (or, `judge`, its --judge); the options that only apply
    when finbench loads weights were refused at start-up (sources.py `check_sources`)."""
    return load_served(config.judging.judge if judge else config.model,
                       served_model=config.judging.judge_served_model if judge else config.load.served_model,
                       api_key_env=config.load.api_key_env, in_flight=config.load.in_flight, timeout=config.load.request_timeout,
                       role="--judge" if judge else "--model", thinking=config.load.served_thinking and not judge,
                       reading="auto" if judge else config.load.served_reading)


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


class ServedModel:
    """The model contract over HTTP (module docstring). `reading` is how choices are read (None:
    this server reads none)."""

    family = "served"
    device = torch.device("cpu")  # where finbench's own tensors (the option scores) live
    dtype = torch.float32

    def __init__(self, client: ServedClient, url: str, model_id: str, engine: str, reading: str | None,
                 decision_path: str | None = None, thinking: bool = False) -> None:
        self.client, self.source, self.model_id, self.engine = client, url, model_id, engine
        self.thinking = thinking  # chat_template_kwargs enable_thinking of every chat completion
        weakref.finalize(self, client.close)  # its connections close with the adapter
        # answers of the latest requests by body: a batch with one failed row is asked again row by
        # row (runner/loop.py), and the rows that were answered are not sent a second time
        self._answered: dict[str, Any] = {}
        self.decision_path = decision_path
        self.reading = reading  # READ_BY_LOGPROBS, READ_BY_DECISION or None (choices not readable here)
        self.capabilities = Capabilities(thinking=False, quantization=("none",), sampling=True, chat_template=False,
                                         hub_options=False, constrained=(SINGLE,) if self.reading else (),
                                         choice_reading=CHOICE_READINGS.get(self.reading or "", "").format(
                                             path="/v1" + (decision_path or ""), top=TOP_LOGPROBS))

    @property
    def in_flight(self) -> int:
        return self.client.settings.in_flight

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
        row's options). A row the server cannot read fails the batch: the runner then asks each
        question alone, and that one becomes the error."""
        if self.reading is None:
            raise ServedError(f"{self.source} returns no option probabilities")
        read = self._read_logprobs if self.reading == READ_BY_LOGPROBS else self._read_decision
        results = self.client.map(read, inputs["finbench_rows"])
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        return torch.tensor([row + [-math.inf] * (len(OPTION_LETTERS) - len(row)) for row in results])

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body`, or the answer it got in the latest batches (see `_answered`)."""
        key = hashlib.sha256(json.dumps([path, body], sort_keys=True).encode()).hexdigest()
        if key not in self._answered:
            if len(self._answered) >= MEMO_SIZE:
                self._answered.clear()
            self._answered[key] = self.client.post(path, body)
        return self._answered[key]

    def _read_decision(self, row: ServedRow) -> list[float]:
        answer = self._post(self.decision_path, decision_body(self.model_id, row))
        try:
            probabilities = answer["answers"]["answer"]["probabilities"]
        except (KeyError, TypeError):
            raise ServedError(f"{self.decision_path}: the answer has no option probabilities") from None
        return option_logprobs(probabilities, row.n_options, "the decision endpoint's probabilities")

    def _read_logprobs(self, row: ServedRow) -> list[float]:
        answer = self._post(CHAT_PATH, logprobs_body(self.model_id, row, self.thinking))
        return logprobs_of_letters(answer, row.n_options)

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
            raise GenerationInterrupted({k: t for k, (t, _) in stop.done.items()},
                                        {k: n for k, (_, n) in stop.done.items()}) from None
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        return [text for text, _ in results], [n for _, n in results]

    def _generate_one(self, row: ServedRow, settings: dict[str, Any]) -> tuple[str, int]:
        if row.answer_prefix and self.reading != READ_BY_LOGPROBS:
            raise ServedError(f"{self.source} cannot continue the answer prefix {row.answer_prefix!r} (vLLM and "
                              "SGLang take continue_final_message)")
        body = {**logprobs_body(self.model_id, row, self.thinking), **settings}
        for key in ("logprobs", "top_logprobs"):
            body.pop(key)
        answer = self._post(CHAT_PATH, body)
        try:
            choice = answer["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ServedError(f"{CHAT_PATH}: the answer has no message") from None
        return text, int((answer.get("usage") or {}).get("completion_tokens") or 0)

    def prefill(self, inputs: Any) -> tuple[torch.Tensor, Any]:
        raise ValueError(f"{self.source}: a served model shows finbench no hidden states (multi-answer sets and "
                         "numbers are refused at start-up)")

    def decode_step(self, state: Any, token_ids: torch.Tensor) -> torch.Tensor:
        return self.prefill(state)[0]

    def output_rows(self, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        return self.prefill(token_ids)[0]

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return self.prefill(hidden)[0]

    def generate_ids(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int]) -> torch.Tensor:
        return self.prefill(inputs)[0]

    def vocabulary_size(self) -> int:
        return END_ID + 1

    # ---- bookkeeping -----------------------------------------------------------------------------------
    def count_image_tokens(self, inputs: Any) -> int:
        raise ValueError("counted by the server")  # the runner records "not counted"

    def image_tokens_per_row(self, inputs: Any) -> list[int]:
        raise ValueError("counted by the server")

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
        reading of choices (the URL is not in the cache key: a server restarted on another port
        answers the same). The weights, their type, dtype and quantization cannot be known from
        here (None)."""
        return {"family": self.family, "source": self.source, "model_type": None, "dtype": None, "quant": None,
                "served_model": self.model_id, "server": self.engine or "unknown",
                "generation_endpoint": "/v1" + CHAT_PATH,
                "choice_endpoint": ("/v1" + (CHAT_PATH if self.reading == READ_BY_LOGPROBS else self.decision_path))
                if self.reading else None,
                "read_by": self.reading, "enable_thinking": self.thinking, "weights": NOT_FINGERPRINTED}
