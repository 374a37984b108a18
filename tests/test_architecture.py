"""The house rules, checked on the code itself: no import circles (module-level or inside a
function), no runner file over 300 lines, no probing of benchmarks or models with hasattr or
signatures, and every benchmark and family behind its explicit contract."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from generic_layers import GENERIC_LAYERS, generic_files

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
RUNNER_MAX_LINES = 300


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """module → modules it imports (anywhere in the file), resolved to finbench's own files. An
    __init__ that only hands names on (no functions or classes) is left out, as importing a
    package runs it: it would tie every submodule to every other."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    faces = set()
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.name == "__init__.py" and not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
            faces.add(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(tree):
            found = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                found = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in found:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return {m: {t for t in ts if t not in faces} for m, ts in graph.items() if m not in faces}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_anywhere_in_finbench():
    graph = _import_graph()
    assert len(graph) > 50  # the walk really saw the package
    assert _cycles(graph) == []


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto packages: each module counts as its first two name parts
    (finbench.runner, finbench.scoring, …; a top-level module such as finbench.config.run_options is a
    package of its own); imports inside one package are dropped."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folded: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folded.setdefault(package(module), set()).update(package(t) for t in targets if package(t) != package(module))
    return folded


def test_no_import_cycles_between_packages():
    """The packages are layered (benchmarks and their declarations below scoring, scoring below the
    studies, the studies below the reports, all of them below the runner): no package reaches back
    into one that imports it, not even through a function-level import."""
    packages = _package_graph(_import_graph())
    assert {"finbench.benchmarks", "finbench.scoring", "finbench.studies", "finbench.runner"} <= set(packages)
    assert _cycles(packages) == []


def test_the_package_graph_folds_modules_onto_their_packages():
    graph = {"finbench.a.x": {"finbench.b.y"}, "finbench.b.y": {"finbench.a.z"}, "finbench.a.z": set()}
    assert _cycles(graph) == []  # no module cycle ...
    assert _cycles(_package_graph(graph)) == [["finbench.a", "finbench.b"]]  # ... but a package one


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_runner_file_is_at_most_300_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (PACKAGE / "runner").glob("*.py")}
    assert "engine.py" in sizes and "loop.py" in sizes
    assert {name: n for name, n in sizes.items() if n > RUNNER_MAX_LINES} == {}


RUNNER_MAX_FIELDS = 20  # a bigger record is several steps' state in one: split it by the step that fills it


def annotated_fields(tree: ast.AST) -> dict[str, int]:
    """class name → how many annotated fields its own body declares (`name: type`, with or without a default)."""
    return {node.name: sum(isinstance(s, ast.AnnAssign) for s in node.body)
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def test_no_runner_class_has_more_than_20_annotated_fields():
    """The run's state is the records its steps return (runner/run_state.py), none a bag of every
    step's fields."""
    counts = {f"{path.name}:{name}": n for path in (PACKAGE / "runner").glob("*.py")
              for name, n in annotated_fields(ast.parse(path.read_text(encoding="utf-8"))).items()}
    assert counts.get("engine.py:RunResult", 0) > 2 and counts.get("judge_step.py:Judged", 0) > 2  # the walk saw them
    assert {name: n for name, n in counts.items() if n > RUNNER_MAX_FIELDS} == {}
    wide = "class Wide:\n" + "".join(f"    f{i}: int = 0\n" for i in range(21))
    wide += "    def m(self) -> None:\n        x: int = 1\n"
    assert annotated_fields(ast.parse(wide)) == {"Wide": 21}  # the rule bites; a method's locals are not fields


def test_the_records_of_a_run_are_frozen_and_typed():
    """Each step's record is frozen (a later step returns its own, never rebinds an earlier one's
    fields) and says what each field holds: no field typed `Any` alone."""
    import dataclasses

    from finbench.runner import judge_step, run_state, studies

    records = [run_state.Started, run_state.Loaded, run_state.RunFolder, run_state.Planned, run_state.Computed,
               run_state.Scored, judge_step.Judged, studies.Studies]
    assert not hasattr(run_state, "RunState")
    for record in records:
        assert dataclasses.is_dataclass(record) and record.__dataclass_params__.frozen, record.__name__
        untyped = [f.name for f in dataclasses.fields(record) if str(f.type) in ("Any", "Any | None")]
        assert untyped == [], (record.__name__, untyped)
    judged = judge_step.Judged({"rule_score": [1.0]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        judged.notes = ["rebound"]


def test_runner_never_probes_benchmarks_or_models():
    """Capabilities are declared, never found out: no hasattr, no signature inspection, no
    reaching into the Hugging Face module (`.model.model`, `.tokenizer`, `.processor`)."""
    probing = re.compile(r"\bhasattr\(|inspect\.signature|\.model\.model\b|model\.tokenizer\b|model\.processor\b")
    files = [*(PACKAGE / "runner").glob("*.py"), PACKAGE / "benchmarks" / "__init__.py",
             PACKAGE / "benchmarks" / "base.py", PACKAGE / "app" / "api.py", PACKAGE / "app" / "sweep.py"]
    offenders = {f"{path.name}:{n}": line.strip() for path in files
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if probing.search(line)}
    assert offenders == {}


ADAPTER_NAMES = {"model", "adapter", "judge", "loaded"}


def _probes_an_adapter(node: ast.AST) -> bool:
    """A `getattr(x, …)` / `hasattr(x, …)` call whose `x` is a model adapter by name (`model`,
    `self.model`, `adapter`, `judge`, …)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and node.args):
        return False
    target = node.args[0]
    name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
    return name in ADAPTER_NAMES


def test_nothing_outside_the_adapters_probes_an_adapter_with_getattr_or_hasattr():
    """The runner, the API, the CLI, scoring and reports ask an adapter only what `ModelAdapter`
    declares (models/contract.py). Inside models/ (where `model` is the Hugging Face module an
    adapter owns) and offline/ (tiny checkpoints built from transformers) the names mean modules."""
    files = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in ("models", "offline")]
    assert PACKAGE / "runner" / "loop.py" in files and PACKAGE / "app" / "api.py" in files
    offenders = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in files
                 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if _probes_an_adapter(node)]
    assert offenders == []
    assert _probes_an_adapter(ast.parse("getattr(self.model, 'device', None)").body[0].value)  # the rule bites
    assert not _probes_an_adapter(ast.parse("getattr(config, 'device')").body[0].value)


def test_every_capabilities_field_is_read_somewhere():
    """A field a family declares but nothing reads is a promise nobody keeps: each is read (as
    `capabilities.field` or `caps.field`) somewhere."""
    import dataclasses

    from finbench.models.contract import Capabilities

    sources = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    unread = [f.name for f in dataclasses.fields(Capabilities)
              if not re.search(rf"\b(capabilities|caps)\.{f.name}\b", sources)]
    assert unread == []


def test_every_benchmark_and_family_stands_behind_its_contract(tiny_model):
    from finbench.benchmarks import BENCHMARKS
    from finbench.benchmarks.base import Benchmark
    from finbench.models.contract import Capabilities, ModelAdapter
    from finbench.models.families import FAMILIES
    from finbench.benchmarks.scorer import resolved
    from finbench.benchmarks.scorer import Scorer

    assert {"finmme", "famma", "finmtm", "mme-finance", "finmmr"} <= set(BENCHMARKS)  # a new one needs no edit here
    for name, benchmark in BENCHMARKS.items():
        assert isinstance(benchmark, Benchmark) and benchmark.name == name
        assert isinstance(resolved(benchmark.scorer), Scorer) and benchmark.group_columns
        assert benchmark.official_max_new_tokens > 0 and benchmark.title
    for family in FAMILIES:
        assert isinstance(family.capabilities, Capabilities), family.family
    assert isinstance(tiny_model, ModelAdapter)


def test_adding_a_benchmark_guide_names_real_code():
    """docs/adding-a-benchmark.md points at files and names that exist."""
    guide = (PACKAGE.parent / "docs" / "adding-a-benchmark.md").read_text(encoding="utf-8")
    for path in re.findall(r"`(finbench/[\w/]+\.py)`", guide):
        assert (PACKAGE.parent / path).is_file(), path
    from finbench.benchmarks import base, finmme

    for name in ("record_to_question", "load_questions", "request", "answer", "prepare_images", "BENCHMARK"):
        assert f"`{name}" in guide and hasattr(finmme, name), name
    for field in ("name", "load", "request", "answer", "scorer", "group_columns", "domain_field"):
        assert field in base.Benchmark.__dataclass_fields__ and f"`{field}`" in guide, field


@pytest.mark.parametrize("doc", ["architecture.md", "adding-a-benchmark.md"])
def test_docs_exist(doc):
    assert len((PACKAGE.parent / "docs" / doc).read_text(encoding="utf-8").splitlines()) > 20


def docstring_ids(tree: ast.AST) -> set[int]:
    """ids of a module's docstring constants (module, class, function): prose, not code."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return docstrings


def string_constants(tree: ast.AST) -> list[ast.Constant]:
    """Every string constant of a module but its docstrings (the architecture tests of studies,
    metrics and protocols read modules through this too)."""
    docstrings = docstring_ids(tree)
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def names_in_generic_layers(names: set[str]) -> list[str]:
    found = []
    for file in generic_files():
        for node in string_constants(ast.parse(file.read_text(encoding="utf-8"))):
            if node.value.strip().lower() in names:
                found.append(f"{file.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    return found


def test_no_registered_benchmark_is_named_in_the_generic_layers():
    """The generic layers (tests/generic_layers.py: the runner, reports, CLI, app/, config/, shared
    scoring, …) know a benchmark only by what its Benchmark and Scorer declare: no registered name
    (or its module spelling) appears there as a string constant — a default, a branch, a dict key."""
    from finbench.benchmarks import BENCHMARKS

    names = {spelling for name in BENCHMARKS for spelling in (name, name.replace("-", "_"))}
    assert {"finmme", "mme-finance", "mme_finance"} <= names
    assert all((PACKAGE / place).exists() for place in GENERIC_LAYERS) and len(generic_files()) > 60
    assert names_in_generic_layers(names) == []


def test_the_name_walk_sees_constants_and_skips_docstrings(tmp_path):
    tree = ast.parse('"""finmme"""\ndef f(b="finmme"):\n    """finmme"""\n    return {"famma": 1}\n')
    assert sorted(n.value for n in string_constants(tree)) == ["famma", "finmme"]


def test_no_cli_module_is_over_300_lines_and_the_entry_point_is_the_package():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (PACKAGE / "cli").glob("*.py")}
    assert {"__init__.py", "__main__.py"} <= set(sizes) and not (PACKAGE / "cli.py").exists()
    assert {name: n for name, n in sizes.items() if n > RUNNER_MAX_LINES} == {}
    assert 'finbench = "finbench.cli:app"' in (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    from finbench.cli import app

    assert {c.name or c.callback.__name__ for c in app.registered_commands} >= {"run", "demo", "score", "leaderboard"}


def _house():
    """scripts/house.py, the plan of the house read with `ast` (rooms, arrows, the counts below)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("house", PACKAGE.parent / "scripts" / "house.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAX_FUNCTION_LEVEL_IMPORTS = 80  # each keeps torch or a heavy library from a command that does not need it
MAX_LOOSE_MODULES = 3  # beside finbench/__init__.py and __main__.py: the rest lives in a wing


def test_the_house_keeps_its_wings_and_imports_from_where_things_live():
    """No module answers look-ups with a module `__getattr__` but the package's face (finbench/__init__.py:
    its subpackages as attributes); at most three modules lie loose at the top of finbench/ (the
    Python API's face, api.py, and two deprecated aliases); and few imports of finbench modules are
    made inside functions."""
    house = _house()
    assert house.module_getattrs() == ["finbench"]
    assert len(house.loose_modules()) <= MAX_LOOSE_MODULES, house.loose_modules()
    lazy = house.function_level_imports()
    assert len(lazy) <= MAX_FUNCTION_LEVEL_IMPORTS, "\n".join(f"{m}:{n}" for m, n in lazy)


def test_the_house_plan_sees_lazy_imports_getattr_and_loose_modules(tmp_path):
    house = _house()
    package = tmp_path / "finbench"
    (package / "wing").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "loose.py").write_text("def __getattr__(name):\n    from finbench.wing import a\n    return a\n")
    (package / "wing" / "__init__.py").write_text("")
    (package / "wing" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from finbench import loose\ndef f():\n    import finbench.loose\n"
                                           "    import json\n")
    assert house.function_level_imports(package) == [("finbench.loose", 2), ("finbench.wing.a", 5)]
    assert house.module_getattrs(package) == ["finbench.loose"] and house.loose_modules(package) == ["loose"]
    assert house.arrows(package) == {("finbench.loose", "finbench.wing", True): 1,
                                     ("finbench.wing", "finbench.loose", True): 1}
