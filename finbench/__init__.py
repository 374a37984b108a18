"""finbench: offline benchmark runner for financial multimodal benchmarks on open VLMs.

The public API is `finbench.evaluate`, `finbench.score` and `finbench.compare` (see finbench/api.py)."""

from finbench.api import compare, evaluate, score

__version__ = "0.1.0"
__all__ = ["compare", "evaluate", "score"]
