"""`finbench.types` and `finbench.requests` moved to `finbench.core` (and RunConfig with its specs to
`finbench.config.specs`); for one release the old modules stay as aliases, since a benchmark kept
outside finbench imports them: every name the old module had is there and is the new module's own
object, importing one warns (DeprecationWarning, naming where to import from), and nothing in
finbench or its tests but this file imports them."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

from finbench.config import specs
from finbench.core import requests, types

ROOT = Path(__file__).resolve().parent.parent
# every public name of the modules as they were before the move
OLD_NAMES = {
    "finbench.types": ({"OPTION_LETTERS", "SINGLE", "MULTI", "NUMERICAL", "OPEN", "KINDS", "PROTOCOLS",
                        "DEFAULT_PROTOCOL", "DEFAULT_BENCHMARK", "RESULTS_FILE", "QUANT_CHOICES", "DTYPE_NAMES", "AUTO",
                        "option_letters", "Question", "ModelRequest", "Prediction", "LoadSpec", "DecodeSpec",
                        "BatchSpec", "OutputSpec", "JudgeSpec", "SPECS", "SPEC_OF", "RunConfig"}, (types, specs)),
    "finbench.requests": ({"DEFAULT_NUMERIC_BUDGET", "IMAGE_ABLATIONS", "PROBES", "Prompt", "Choose", "Number",
                           "Generate", "Turn", "Session", "Request", "text_part", "image_part", "user_message",
                           "assistant_message", "system_message", "is_generated"}, (requests,)),
}


def _fresh_import(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, caught


@pytest.mark.parametrize("alias", sorted(OLD_NAMES))
def test_an_old_module_is_an_alias_of_the_new_ones_and_warns(alias):
    names, homes = OLD_NAMES[alias]
    module, caught = _fresh_import(alias)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1 and f"{alias} is deprecated" in str(deprecations[0].message)
    for home in homes:
        assert home.__name__ in str(deprecations[0].message)
    assert set(module.__all__) == names
    for name in names:
        owner = next(home for home in homes if hasattr(home, name))
        assert getattr(module, name) is getattr(owner, name), name


def _imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found |= {node.module or ""} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_nothing_in_finbench_or_its_tests_imports_an_alias():
    files = [p for folder in ("finbench", "tests", "scripts") for p in (ROOT / folder).rglob("*.py")
             if p != Path(__file__).resolve() and p.relative_to(ROOT).as_posix() not in
             ("finbench/types.py", "finbench/requests.py")]
    assert ROOT / "finbench" / "runner" / "engine.py" in files
    offenders = {f"{p.relative_to(ROOT)}: {name}" for p in files for name in _imports_of(p) if name in OLD_NAMES}
    assert offenders == set()
