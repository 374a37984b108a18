"""Which server answers a served model (models/served.py), what each takes, and what a start-up
probe finds it reads — before any question is sent.

Each engine names itself in /v1/models (`owned_by`) and takes its own request shapes (`Engine`):
- vLLM: chat completions return the full-vocabulary log-probability of given token ids
  (`logprob_token_ids`, the ids found with its /tokenize), so single choices, multi-answer sets
  and numbers are all read from finbench's own prompt; its decision endpoint (/v1/systemone) reads
  images from `images` (a field it does not know, such as `assets`, is ignored in silence) and
  answers 501 for the architectures it has no decision strategy for (Qwen2.5-VL, Qwen3-VL);
- SGLang and llama.cpp: the top 20 log-probabilities only; SGLang's /v1/decisions takes its own
  schema and llama.cpp serves decisions only for decision GGUFs, so finbench reads neither;
- any other server (`transformers serve`): its /v1/systemone with `assets`.
The probe asks the same question twice, shown two different images, in the reading chosen: an
HTTP error (501, 400, 422) or answers that do not change with the image (the prompt token counts
and the probabilities identical: the images were dropped) refuse that reading in one line naming
the server's answer and the reading that works (`find_readings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from finbench.core.types import OPTION_LETTERS, ModelRequest
from finbench.models.served_bodies import (ServedRow, decision_body, logprobs_body, served_row, token_logprobs,
                                          token_logprobs_body, usage_counts)
from finbench.models.served_client import ServedClient, ServedError

CHAT_PATH, DECISION_PATH, TOKENIZE_PATH = "/chat/completions", "/systemone", "/tokenize"
TOKEN_LOGPROBS, TOP_LOGPROBS, DECISION = "token logprobs", "top logprobs", "decision endpoint"
READING_FLAG = {TOKEN_LOGPROBS: "logprobs", TOP_LOGPROBS: "logprobs", DECISION: "decision"}  # --served-reading
# the texts the runner's answer vocabulary asks ids for (runner/decoding.py), by position: finbench's
# own ids of a served model; the server's ids of each are found by the probe (`Vocabulary`)
ANSWER_TEXTS = (*OPTION_LETTERS, *(" " + c for c in OPTION_LETTERS), ",", *"0123456789", ".", "-", "%", " ")
GRAMMAR_TEXTS = (*OPTION_LETTERS, ",", *"0123456789")  # must each be one server token to decode sets and numbers
PROBE_QUESTION = "Which colour fills most of the picture?"
PROBE_OPTIONS = ("red", "blue", "green", "grey")


@dataclass(frozen=True)
class Engine:
    """What one kind of server takes: how its chat completions give log-probabilities (`logprobs`:
    TOKEN_LOGPROBS, TOP_LOGPROBS or None), the image field of its /v1/systemone (`decision`; None:
    none finbench reads, `no_decision` says why) and how many requests it takes at once."""

    name: str
    logprobs: str | None
    decision: str | None
    no_decision: str = ""
    in_flight: int = 4


ENGINES = {  # by /v1/models `owned_by`
    "vllm": Engine("vLLM", TOKEN_LOGPROBS, "images", in_flight=64),
    "sglang": Engine("SGLang", TOP_LOGPROBS, None, "SGLang's /v1/decisions takes its own schema, which finbench "
                     "does not send", in_flight=64),
    "llamacpp": Engine("llama.cpp", TOP_LOGPROBS, None, "llama.cpp answers decisions only for decision GGUFs"),
}
OTHER = Engine("", None, "assets")  # transformers serve, and servers that do not say what they are


@dataclass(frozen=True)
class Vocabulary:
    """The server's token id of each of ANSWER_TEXTS (None: not one token there) and the ids that
    end an answer (the chat template's end of turn, and a newline when it is one token)."""

    ids: tuple[int | None, ...]
    ends: tuple[int, ...]

    @property
    def asked(self) -> tuple[int, ...]:
        """Every id a token-logprobs request asks for."""
        return tuple(sorted({i for i in self.ids if i is not None} | set(self.ends)))

    @property
    def grammar(self) -> bool:
        """Whether sets and numbers can be decoded: letters, ',' and digits are single tokens, and an answer can end."""
        return bool(self.ends) and all(self.ids[ANSWER_TEXTS.index(t)] is not None for t in GRAMMAR_TEXTS)


@dataclass(frozen=True)
class Readings:
    """What the probe found: how choices are read (None: not here), whether sets and numbers are
    decoded (over token log-probabilities), the server's answer-token ids, whether its usage counts
    image tokens, and, for what it cannot read, one line saying why (with what works)."""

    choices: str | None = None
    grammar: bool = False
    vocabulary: Vocabulary | None = None
    image_tokens: bool = False
    refused: str = ""


def engine_of(owned_by: str) -> Engine:
    return ENGINES.get(owned_by.lower(), OTHER)


def find_readings(client: ServedClient, model_id: str, engine: Engine, asked: str) -> Readings:
    """The reading of choices `asked` ("auto", "logprobs", "decision"), probed. "auto": the first of
    the engine's readings that passes (none: `Readings.refused` says why); a named one that fails
    is a ValueError line naming the server's answer and the reading that works."""
    order = _candidates(engine, asked)
    vocabulary = _vocabulary(client, model_id) if TOKEN_LOGPROBS in order else None
    failures: dict[str, str] = {}
    for reading in order:
        failure, image_tokens = probe(client, model_id, engine, reading, vocabulary)
        if failure is None:
            grammar = reading == TOKEN_LOGPROBS and vocabulary is not None and vocabulary.grammar
            refused = "" if grammar else _no_grammar(engine, reading, vocabulary)
            return Readings(reading, grammar, vocabulary if reading == TOKEN_LOGPROBS else None, image_tokens, refused)
        failures[reading] = failure
    line = "; ".join(f"{reading}: {failure}" for reading, failure in failures.items())
    if asked == "auto":
        return Readings(refused=line or f"{engine.name or 'the server'} returns no option probabilities")
    others = [r for r in _candidates(engine, "auto") if r not in failures]
    vocabulary = vocabulary or (_vocabulary(client, model_id) if TOKEN_LOGPROBS in others else None)
    works = next((r for r in others if probe(client, model_id, engine, r, vocabulary)[0] is None), None)
    hint = (f"the {works} reading works here (--served-reading {READING_FLAG[works]})" if works else
            "no reading of choices works here; --protocol official generates and reads every answer")
    raise ValueError(f"--served-reading {asked}: {line}; {hint}")


def _candidates(engine: Engine, asked: str) -> list[str]:
    if asked == "decision":
        return [DECISION]
    logprobs = [engine.logprobs] if engine.logprobs else [TOKEN_LOGPROBS, TOP_LOGPROBS]
    if asked == "logprobs":
        return logprobs
    if engine is OTHER:
        return [DECISION, *logprobs]
    return [*logprobs, *([DECISION] if engine.decision else [])]


def _no_grammar(engine: Engine, reading: str, vocabulary: Vocabulary | None) -> str:
    if reading != TOKEN_LOGPROBS:
        return (f"{engine.name or 'this server'} reads single choices only ({reading}); sets and numbers need the "
                "log-probabilities of given tokens (vLLM's logprob_token_ids)")
    return "the server's tokenizer does not spell letters, ',' and digits as single tokens, or no answer can end"


def probe(client: ServedClient, model_id: str, engine: Engine, reading: str,
          vocabulary: Vocabulary | None) -> tuple[str | None, bool]:
    """(why `reading` fails here — None when it works —, whether the usage counted image tokens):
    the probe question asked twice, shown two different images."""
    if reading == DECISION and engine.decision is None:
        return engine.no_decision, False
    if reading == TOKEN_LOGPROBS and vocabulary is None:
        return "no /tokenize to find the answer tokens' ids", False
    ask: Callable[[ServedRow], tuple[Any, Any]] = {
        TOKEN_LOGPROBS: lambda row: _ask(client, CHAT_PATH, token_logprobs_body(model_id, row, vocabulary.asked),
                                         lambda answer: token_logprobs(answer, vocabulary.asked)),
        TOP_LOGPROBS: lambda row: _ask(client, CHAT_PATH, logprobs_body(model_id, row), _top),
        DECISION: lambda row: _ask(client, DECISION_PATH, decision_body(model_id, row, engine.decision or "assets"),
                                   lambda answer: answer["answers"]["answer"]["probabilities"]),
    }[reading]
    try:
        answers = [ask(row) for row in probe_rows()]
    except ServedError as err:
        return str(err), False
    (first, read_first), (second, read_second) = answers
    counts = [usage_counts(first), usage_counts(second)]
    if read_first == read_second and counts[0][0] == counts[1][0]:
        return ("the images were dropped: one question shown two different images got the same answer and "
                f"{counts[0][0] if counts[0][0] is not None else 'no'} prompt tokens both times"), False
    return None, counts[0][1] is not None


def _ask(client: ServedClient, path: str, body: dict[str, Any], read: Callable[[Any], Any]) -> tuple[Any, Any]:
    """(the answer, what the reading reads from it); an answer it cannot read is a ServedError."""
    answer = client.post(path, body)
    try:
        return answer, read(answer)
    except (KeyError, TypeError, IndexError):
        raise ServedError(f"POST {path}: the answer has no option probabilities") from None


def _top(answer: Any) -> list[tuple[str, float]]:
    """The top log-probabilities of the reply's first token; a server that returns none (it ignores
    `logprobs`) is a ServedError."""
    try:
        top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        return [(str(e.get("token")), float(e.get("logprob"))) for e in top]
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ServedError("the server returned no log-probabilities (it ignores `logprobs`)") from None


def probe_rows() -> tuple[ServedRow, ServedRow]:
    """The probe question, shown a red square, then a blue and green picture of another size."""
    from PIL import Image

    red = Image.new("RGB", (64, 64), (220, 30, 30))
    other = Image.new("RGB", (112, 56), (30, 30, 220))
    other.paste(Image.new("RGB", (40, 56), (30, 200, 30)), (72, 0))
    text = PROBE_QUESTION + "\n" + "\n".join(f"{c}. {o}" for c, o in zip(OPTION_LETTERS, PROBE_OPTIONS))
    messages = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]},)
    return tuple(served_row(ModelRequest(messages=messages, images=(image,), answer_prefix="Answer:",
                                         n_options=len(PROBE_OPTIONS))) for image in (red, other))


def _vocabulary(client: ServedClient, model_id: str) -> Vocabulary | None:
    """The server's ids of ANSWER_TEXTS and of an answer's end, from its /tokenize (vLLM); None
    without one."""
    def single(text: str) -> int | None:
        ids = client.post(TOKENIZE_PATH, {"model": model_id, "prompt": text, "add_special_tokens": False},
                          root=True).get("tokens") or []
        return int(ids[0]) if len(ids) == 1 else None

    try:
        ids = client.map(single, list(ANSWER_TEXTS))
        if any(isinstance(i, BaseException) for i in ids):
            return None
        turn = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        closed, open_ = (client.post(TOKENIZE_PATH, {"model": model_id, "messages": turn, "add_generation_prompt": False,
                                                    "continue_final_message": keep}, root=True)["tokens"]
                         for keep in (False, True))
        newline = single("\n")
    except (ServedError, KeyError, TypeError, AttributeError):
        return None
    ends = _end_of_turn(closed, open_) + ((newline,) if newline is not None else ())
    return Vocabulary(tuple(ids), tuple(dict.fromkeys(ends)))


def _end_of_turn(closed: Sequence[int], open_: Sequence[int]) -> tuple[int, ...]:
    """The token the chat template ends an assistant turn with: the first after the open turn."""
    if len(closed) > len(open_) and list(closed[:len(open_)]) == list(open_):
        return (int(closed[len(open_)]),)
    return ()
