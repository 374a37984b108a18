"""Sessions turn by turn: every later turn of a batch of `Session` requests, batched across the
sessions still going. Turn k's prompt is built from the request and the replies so far
(`Session.turn_prompt`); a session's generated text is the JSON list of its replies, one turn
included, whatever it shares a batch with. A later turn the model cannot be asked (its whole
prompt longer than the context, preprocessing refuses it) ends that session with an error; the
other sessions of the batch go on."""

from __future__ import annotations

import json
from typing import Callable, Sequence

from finbench.core.requests import Prompt, Session

# (positions in the batch, their prompts) → (replies, generated token counts, errors), the replies
# aligned with the positions (None where that position failed: its message is in errors)
Ask = Callable[[list[int], list[Prompt]], tuple[list[str | None], list[int], dict[int, str]]]


def continue_sessions(sessions: Sequence[Session], first_replies: Sequence[str], first_counts: Sequence[int],
                      ask: Ask) -> tuple[list[str], list[int], dict[int, str]]:
    """Given every session's first reply, ask the rest of its turns; returns the JSON lists of
    replies, the total generated tokens per session and the errors of sessions that stopped
    (position → "turn N: message")."""
    history = [[reply] for reply in first_replies]
    counts = list(first_counts)
    errors: dict[int, str] = {}
    for turn in range(1, max(len(s.turns) for s in sessions)):
        active = [k for k, session in enumerate(sessions) if len(session.turns) > turn and k not in errors]
        if not active:
            break
        replies, more, failed = ask(active, [sessions[k].turn_prompt(history[k]) for k in active])
        errors.update({k: f"turn {turn + 1}: {message}" for k, message in failed.items()})
        for k, reply, n in zip(active, replies, more):
            if reply is not None and k not in failed:
                history[k].append(reply)
                counts[k] += n
    return [json.dumps(h, ensure_ascii=False) for h in history], counts, errors
