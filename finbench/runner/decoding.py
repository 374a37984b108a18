"""Constrained answer decoding over a batch, on top of the model contract (prefill / decode_step /
output_rows / score_options). Every decision is a tensor op over the whole batch; the only
per-row Python is turning the chosen ids into answer strings at the end.

- single choice: one prefill; log-softmax over the item's K letters ("A" and " A" combined).
- multiple choice: greedy set decoding — strictly ascending letters, a ',' separator, or end.
- numerical: greedy decoding inside a number grammar ([space] [-] digits [. digits] [%]) with a
  token budget.
Only the LM-head rows of the allowed tokens are ever projected. Every answer carries a confidence,
the probability of the decoded answer under the constrained distribution: the chosen option's
(single) or the product over the chosen steps (multi, numerical; each step renormalised over
what the grammar allows there).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import torch

from finbench.core.types import OPTION_LETTERS, Prediction
from finbench.kernels.option_logits import combine_spellings, first_allowed, masked_log_softmax
from finbench.models.contract import ModelAdapter
from finbench.models.inputs import ModelInputs

N_LETTERS = len(OPTION_LETTERS)
DIGITS = "0123456789"
NUMBER_SYMBOLS = (".", "-", "%", " ")  # candidate order after the ten digits; end comes last


@dataclass(frozen=True)
class AnswerVocabulary:
    """Token ids of everything a constrained answer may contain, checked to be single tokens."""

    letters: torch.Tensor  # [2, 14]: bare "A".."N", then space-prefixed " A".." N"
    separator: int  # ","
    ends: tuple[int, ...]  # end of answer: EOS, end of turn, newline
    number: torch.Tensor  # [14]: digits 0-9, ".", "-", "%", " "

    @classmethod
    def for_model(cls, model: ModelAdapter) -> "AnswerVocabulary":
        bare = model.single_token_ids(list(OPTION_LETTERS))
        spaced = model.single_token_ids([" " + c for c in OPTION_LETTERS])
        return cls(letters=torch.tensor([bare, spaced]), separator=model.single_token_ids([","])[0],
                   ends=tuple(model.end_token_ids()),
                   number=torch.tensor(model.single_token_ids(list(DIGITS) + list(NUMBER_SYMBOLS))))


Stage = Callable[[str], ContextManager[Any]]


def _no_stage(name: str) -> ContextManager[Any]:
    return contextlib.nullcontext()


@torch.inference_mode()
def decode_single(model: ModelAdapter, inputs: ModelInputs, n_options: torch.Tensor, vocab: AnswerVocabulary,
                  stage: Stage = _no_stage) -> list[Prediction]:
    """Argmax over the item's own options from one prefill (last position, option rows only)."""
    with stage("forward"):
        logprobs = model.score_options(inputs, vocab.letters)  # [B, 14] over all letters
    with stage("decode"):
        n_options = n_options.to(logprobs.device)
        logprobs = masked_log_softmax(logprobs, first_allowed(N_LETTERS, n_options))  # renormalise over K
        best, choice = logprobs.max(-1)
        confidence = best.exp().tolist()
        choice = choice.tolist()
        rows = logprobs.cpu().tolist()
    return [Prediction(id="", answer=OPTION_LETTERS[c], option_logprobs=tuple(r[:k]), n_generated_tokens=1,
                       confidence=p)
            for c, r, k, p in zip(choice, rows, n_options.tolist(), confidence)]


@torch.inference_mode()
def decode_multi(model: ModelAdapter, inputs: ModelInputs, n_options: torch.Tensor, vocab: AnswerVocabulary,
                 stage: Stage = _no_stage) -> list[Prediction]:
    """Greedy ascending-set decoding. Candidates per step: the 14 letters, ',', end. A letter must
    exceed the last one chosen and exist in the item; ',' and end need at least one letter and
    may not follow ','. Each step's distribution over the candidates is kept."""
    with stage("forward"):
        hidden, state = model.prefill(inputs)
    with stage("decode"):
        device = hidden.device
        end_ids = torch.tensor(vocab.ends)
        candidate_ids = torch.cat([vocab.letters.reshape(-1), torch.tensor([vocab.separator]), end_ids])
        rows = model.output_rows(candidate_ids)
        n_options = n_options.to(device)
        batch = hidden.shape[0]
        letter_index = torch.arange(N_LETTERS, device=device)
        last = torch.full((batch,), -1, device=device)
        after_separator = torch.zeros(batch, dtype=torch.bool, device=device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        chosen = torch.zeros(batch, dtype=torch.long, device=device)  # bitmask of selected letters
        n_tokens = torch.zeros(batch, dtype=torch.long, device=device)
        sequence_logprob = torch.zeros(batch, dtype=torch.float32, device=device)
        steps: list[torch.Tensor] = []
        separator, end = N_LETTERS, N_LETTERS + 1
        for _ in range(2 * N_LETTERS + 1):
            logits = model.logits(hidden, rows)
            scores = torch.cat([combine_spellings(logits[:, : 2 * N_LETTERS], 2),
                                logits[:, 2 * N_LETTERS: 2 * N_LETTERS + 1],
                                torch.logsumexp(logits[:, 2 * N_LETTERS + 1:], -1, keepdim=True)], dim=1)
            letter_ok = (letter_index[None] < n_options[:, None]) & (letter_index[None] > last[:, None])
            may_stop = (last >= 0) & ~after_separator
            allowed = torch.cat([letter_ok, (may_stop & letter_ok.any(-1))[:, None], may_stop[:, None]], dim=1)
            logprobs = masked_log_softmax(scores, allowed)
            steps.append(torch.where(done[:, None], torch.nan, logprobs))
            choice = logprobs.argmax(-1)
            active = ~done
            sequence_logprob += torch.where(active, logprobs.gather(1, choice[:, None]).squeeze(1).float(), 0.0)
            is_letter = active & (choice < N_LETTERS)
            chosen = torch.where(is_letter, chosen | (1 << choice.clamp(max=N_LETTERS - 1)), chosen)
            last = torch.where(is_letter, choice, last)
            after_separator = torch.where(active, choice == separator, after_separator)
            n_tokens = n_tokens + active.long()
            done = done | (active & (choice == end))
            if bool(done.all()):
                break
            bare, spaced = vocab.letters[0].to(device), vocab.letters[1].to(device)
            letter_col = choice.clamp(max=N_LETTERS - 1)
            # feed the spelling the model preferred, so the continuation stays on its own path
            prefers_spaced = (logits.gather(1, (N_LETTERS + letter_col)[:, None])
                              > logits.gather(1, letter_col[:, None])).squeeze(1)
            letter_token = torch.where(prefers_spaced, spaced[letter_col], bare[letter_col])
            next_token = torch.where(choice < N_LETTERS, letter_token, torch.full_like(choice, vocab.separator))
            next_token = torch.where(choice == end, torch.full_like(choice, vocab.ends[0]), next_token)
            hidden = model.decode_step(state, next_token)
        masks = chosen.tolist()
        step_rows = torch.stack(steps, dim=1).cpu()  # [B, steps, 16]
        counts, tokens = n_options.tolist(), n_tokens.tolist()
        confidence = sequence_logprob.exp().tolist()
    predictions = []
    for b, mask in enumerate(masks):
        answer = "".join(c for i, c in enumerate(OPTION_LETTERS) if mask >> i & 1)
        row_steps = [s for s in step_rows[b].tolist() if s[0] == s[0]]  # drop NaN rows (already done)
        predictions.append(Prediction(id="", answer=answer, option_logprobs=tuple(row_steps[0][: counts[b]]),
                                      step_logprobs=tuple(tuple(s) for s in row_steps),
                                      n_generated_tokens=tokens[b], confidence=confidence[b]))
    return predictions


# Number grammar: states × candidates → next state (-1 = not allowed). Candidates are the ten
# digits, ".", "-", "%", " ", then end.
START, AFTER_SPACE, AFTER_MINUS, INTEGER, AFTER_DOT, FRACTION, PERCENT, DONE = range(8)
_D, _DOT, _MINUS, _PCT, _SPACE, _END = 0, 10, 11, 12, 13, 14


def _number_grammar() -> torch.Tensor:
    table = torch.full((8, 15), -1, dtype=torch.long)
    table[START, _D:_DOT] = INTEGER
    table[START, _MINUS] = AFTER_MINUS
    table[START, _SPACE] = AFTER_SPACE
    table[AFTER_SPACE, _D:_DOT] = INTEGER
    table[AFTER_SPACE, _MINUS] = AFTER_MINUS
    table[AFTER_MINUS, _D:_DOT] = INTEGER
    table[INTEGER, _D:_DOT] = INTEGER
    table[INTEGER, _DOT] = AFTER_DOT
    table[INTEGER, _PCT] = PERCENT
    table[INTEGER, _END] = DONE
    table[AFTER_DOT, _D:_DOT] = FRACTION
    table[FRACTION, _D:_DOT] = FRACTION
    table[FRACTION, _PCT] = PERCENT
    table[FRACTION, _END] = DONE
    table[PERCENT, _END] = DONE
    return table


NUMBER_GRAMMAR = _number_grammar()
NUMBER_CHARS = list(DIGITS) + list(NUMBER_SYMBOLS) + [""]


@torch.inference_mode()
def decode_numerical(model: ModelAdapter, inputs: ModelInputs, budget: int, vocab: AnswerVocabulary,
                     stage: Stage = _no_stage) -> list[Prediction]:
    """Greedy decoding inside the number grammar for at most `budget` tokens. A row that runs out
    of budget keeps what it has (e.g. "12." parses as 12; a lone "-" does not parse: wrong).
    `step_logprobs` holds one tuple: the log-probability of each chosen token (end included)."""
    with stage("forward"):
        hidden, state = model.prefill(inputs)
    with stage("decode"):
        device = hidden.device
        end_ids = torch.tensor(vocab.ends)
        rows = model.output_rows(torch.cat([vocab.number, end_ids]))
        grammar = NUMBER_GRAMMAR.to(device)
        batch = hidden.shape[0]
        state_id = torch.full((batch,), START, device=device)
        chosen_steps: list[torch.Tensor] = []
        chosen_logprobs: list[torch.Tensor] = []
        n_symbols = len(vocab.number)
        for step in range(budget):
            logits = model.logits(hidden, rows)
            scores = torch.cat([logits[:, :n_symbols], torch.logsumexp(logits[:, n_symbols:], -1, keepdim=True)], 1)
            allowed = grammar[state_id] >= 0
            logprobs = masked_log_softmax(scores, allowed)
            choice = logprobs.argmax(-1)
            active = state_id != DONE
            chosen_steps.append(torch.where(active, choice, -1))
            chosen_logprobs.append(torch.where(active, logprobs.gather(1, choice[:, None]).squeeze(1), torch.nan))
            state_id = torch.where(active, grammar[state_id, choice], state_id)
            if bool((state_id == DONE).all()) or step == budget - 1:
                break
            next_token = torch.where(choice < n_symbols, vocab.number.to(device)[choice.clamp(max=n_symbols - 1)],
                                     torch.full_like(choice, vocab.ends[0]))
            hidden = model.decode_step(state, next_token)
        choices = torch.stack(chosen_steps, 1).tolist()
        step_logprobs = torch.stack(chosen_logprobs, 1).tolist()
    predictions = []
    for row, lps in zip(choices, step_logprobs):
        used = [c for c in row if c >= 0]
        text = "".join(NUMBER_CHARS[c] for c in used).strip()
        chosen = tuple(lp for lp in lps if lp == lp)
        predictions.append(Prediction(id="", answer=text, step_logprobs=(chosen,), n_generated_tokens=len(used),
                                      confidence=math.exp(sum(chosen))))
    return predictions


def answer_confidence(kind: str, option_logprobs: tuple[float, ...],
                      step_logprobs: tuple[tuple[float, ...], ...]) -> float:
    """The confidence a decoder would have attached, recomputed from what the cache stores (rows
    written before confidences existed): single → the best option's probability; multi → the
    product of each step's best (= chosen, decoding is greedy) probability; numerical → the
    product of the chosen tokens' probabilities. NaN when nothing was stored."""
    if kind == "single" and option_logprobs:
        return math.exp(max(option_logprobs))
    if kind == "multi" and step_logprobs:
        return math.exp(sum(max(lp for lp in step if lp == lp) for step in step_logprobs))
    if kind == "numerical" and step_logprobs and step_logprobs[0]:
        return math.exp(sum(step_logprobs[0]))
    return math.nan
