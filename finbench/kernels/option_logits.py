"""Option-logit kernels: pure tensor functions, no benchmark or model knowledge.

The constrained decoders never compute full-vocabulary logits. They project the last hidden
state onto just the LM-head rows of the tokens a grammar allows (a few dozen rows instead of
~150k), then combine spellings and normalise over the allowed candidates.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def project_rows(hidden: torch.Tensor, rows: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of a few vocabulary rows: hidden [B, H] × rows [R, H]ᵀ → [B, R] in float32.

    The matmul runs in the model's dtype (as the real LM head would) and is upcast afterwards."""
    logits = hidden.to(rows.dtype) @ rows.T
    if bias is not None:
        logits = logits + bias
    return logits.float()


def combine_spellings(logits: torch.Tensor, n_spellings: int) -> torch.Tensor:
    """[B, S·K] logits laid out spelling-major (all bare letters, then all space-prefixed ones)
    → [B, K]: each candidate's spellings are alternatives for one answer, so their probabilities
    add (logsumexp of logits)."""
    batch, width = logits.shape
    return torch.logsumexp(logits.view(batch, n_spellings, width // n_spellings), dim=1)


def masked_log_softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the allowed candidates only; disallowed ones get -inf.
    A row with nothing allowed yields all -inf instead of NaN."""
    masked = scores.masked_fill(~allowed, NEG_INF)
    normaliser = torch.logsumexp(masked, dim=-1, keepdim=True)
    return (masked - normaliser.clamp_min(torch.finfo(scores.dtype).min)).masked_fill(~allowed, NEG_INF)


def first_allowed(n_candidates: int, counts: torch.Tensor) -> torch.Tensor:
    """[B, n_candidates] mask: candidate k is allowed in row b iff k < counts[b]."""
    return torch.arange(n_candidates, device=counts.device)[None, :] < counts[:, None]
