"""Shared fixtures: a tiny random Qwen2.5-VL and a synthetic FinMME set, built once per session,
offline. Everything runs on the CPU in float32 so equality tests are exact to ~1e-6."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
from helpers import sharpened_tiny_dir

# The CLI's consoles are made when finbench.cli.common is first imported, and a rich Console fixes
# its width if COLUMNS is set then. Made here, before any test invokes the CLI with its own
# COLUMNS, they follow each invocation's COLUMNS, whichever test file a worker process runs first.
os.environ.pop("COLUMNS", None)
import finbench.cli.common  # noqa: E402,F401


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory):
    return sharpened_tiny_dir(tmp_path_factory, "qwen2.5-vl")


@pytest.fixture(scope="session")
def synthetic_parquet(tmp_path_factory):
    from finbench.offline.finmme_synthetic import write_parquet

    return write_parquet(tmp_path_factory.mktemp("data") / "finmme_synthetic.parquet", n_items=72, seed=0)


@pytest.fixture(scope="session")
def finmme_demo(tmp_path_factory):
    """(run folder, CLI result) of `finbench demo` (FinMME), run once per session in this process
    with a fresh FINBENCH_HOME; read by the tests of the demo's console, files and answers."""
    from helpers import cli

    root = tmp_path_factory.mktemp("finmme-demo")
    done = cli("demo", "--out", str(root / "demo"), "--no-progress", env={"FINBENCH_HOME": str(root / "home")})
    return root / "demo", done


@pytest.fixture(scope="session")
def tiny_model(tiny_qwen_dir):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def questions(synthetic_parquet):
    from finbench.benchmarks import finmme

    return finmme.load_questions(synthetic_parquet)


def _available(*families: str) -> list[str]:
    from finbench.offline.tiny import tiny_family_available

    return [f for f in families if tiny_family_available(f)]


@pytest.fixture(scope="session", params=_available("internvl", "qwen3-vl", "qwen3-vl-moe", "qwen3.5"))
def other_family(request, tmp_path_factory):
    """Sharpened tiny models of the other families, loaded through `load_model`: InternVL (plain
    rotary positions), Qwen3-VL (M-RoPE, DeepStack), Qwen3-VL-MoE (routed experts) and Qwen3.5
    (hybrid linear/full attention: a recurrent state beside the KV cache)."""
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(sharpened_tiny_dir(tmp_path_factory, request.param)), LoadSpec(dtype="float32", device="cpu"))


@pytest.fixture()
def no_model(monkeypatch):
    """Loading a model (or a judge) fails the test: a refusal must come before."""
    import finbench.models
    import finbench.runner.startup

    def loads(*args, **kwargs):
        raise AssertionError("a model was loaded before the data was refused")

    monkeypatch.setattr(finbench.models, "load_model", loads)
    monkeypatch.setattr(finbench.runner.startup, "load_for_run", loads)
