"""finbench: offline benchmark runner for financial multimodal benchmarks on open VLMs.

The public API is `finbench.evaluate`, `finbench.score` and `finbench.compare` (see finbench/api.py).
The subpackages are attributes too — `finbench.models.load_model`, `finbench.benchmarks`,
`finbench.scoring` — imported on first use, so `import finbench` stays light (no torch)."""

from finbench.api import compare, evaluate, score

__version__ = "0.1.0"
__all__ = ["benchmarks", "compare", "evaluate", "models", "scoring", "score"]


def __getattr__(name: str):  # PEP 562: a subpackage is imported when first asked for
    if name == "models":
        import finbench.models as models

        return models
    if name == "benchmarks":
        import finbench.benchmarks as benchmarks

        return benchmarks
    if name == "scoring":
        import finbench.scoring as scoring

        return scoring
    raise AttributeError(f"module 'finbench' has no attribute {name!r}")
