"""finbench: offline benchmark runner for financial multimodal benchmarks on open VLMs.

The public API is `finbench.evaluate`, `finbench.score` and `finbench.compare`, and `finbench.api`
(`make_config`, …; the code: finbench/app/api.py). The subpackages are attributes too —
`finbench.models.load_model`, `finbench.benchmarks`, `finbench.scoring` — imported on first use, so
`import finbench` stays light (no torch)."""

from finbench.api import compare, evaluate, score
from finbench.models.library_logs import keep_in_run_log

# torch's pytree logs two Enum deprecation lines through its own stderr handler whenever torchao
# is imported — transformers imports it with its quantizers, on every model load or build: they go
# to run.log (finbench's log), never to the console, for the command line and the API alike
keep_in_run_log(["torch.utils._pytree"])

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
