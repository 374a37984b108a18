"""finbench: offline benchmark runner for financial multimodal benchmarks on open VLMs.

The public API is `finbench.evaluate`, `finbench.score` and `finbench.compare` (see finbench/api.py).
The subpackages are attributes too — `finbench.models.load_model`, `finbench.benchmarks`,
`finbench.scoring` — imported on first use, so `import finbench` stays light (no torch)."""

from finbench.api import compare, evaluate, score

__version__ = "0.1.0"
__all__ = ["benchmarks", "compare", "evaluate", "models", "scoring", "score"]


SUBPACKAGES = ("benchmarks", "models", "scoring")


def __getattr__(name: str):  # PEP 562: a subpackage is imported when first asked for
    if name in SUBPACKAGES:
        # importlib, not `import finbench.x as x`: that form looks the attribute up on this package,
        # which re-enters here while finbench.x is still being imported (a recursion)
        import importlib

        return importlib.import_module(f"finbench.{name}")
    raise AttributeError(f"module 'finbench' has no attribute {name!r}")
