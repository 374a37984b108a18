"""Sessions turn by turn: every later turn of a batch of `Session` requests, batched across the
sessions still going. Turn k's prompt is built from the request and the replies so far
(`Session.turn_prompt`); a session's generated text is the JSON list of its replies, one turn
included, whatever it shares a batch with."""

from __future__ import annotations

import json
from typing import Callable, Sequence

from finbench.requests import Prompt, Session

# (positions in the batch, their prompts) → (replies, generated token counts)
Ask = Callable[[list[int], list[Prompt]], tuple[list[str], list[int]]]


def continue_sessions(sessions: Sequence[Session], first_replies: Sequence[str], first_counts: Sequence[int],
                      ask: Ask) -> tuple[list[str], list[int]]:
    """Given every session's first reply, ask the rest of its turns; returns the JSON lists of
    replies and the total generated tokens per session."""
    history = [[reply] for reply in first_replies]
    counts = list(first_counts)
    for turn in range(1, max(len(s.turns) for s in sessions)):
        active = [k for k, session in enumerate(sessions) if len(session.turns) > turn]
        replies, more = ask(active, [sessions[k].turn_prompt(history[k]) for k in active])
        for k, reply, n in zip(active, replies, more):
            history[k].append(reply)
            counts[k] += n
    return [json.dumps(h, ensure_ascii=False) for h in history], counts
