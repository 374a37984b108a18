"""The generic layers know a protocol only by what the requests are (finbench/core/requests.py: Choose,
Number, Generate, Session) or by what a Benchmark declares (`protocol_names`, `program_protocols`,
`thinking_protocols`): no string constant naming a protocol where a protocol is decided on in the
generic layers (tests/generic_layers.py: runner, report, CLI, app/, config/, scoring's shared
modules, …). Docstrings and help texts are not counted."""

from __future__ import annotations

import ast
from pathlib import Path
from generic_layers import generic_files
from test_architecture import docstring_ids

from finbench.benchmarks import BENCHMARKS

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
def protocol_names() -> set[str]:
    """Every protocol a registered benchmark accepts, and the names the runner once tested."""
    names = {"constrained", "official", "pot", "cot"}
    for benchmark in BENCHMARKS.values():
        names.update(benchmark.protocol_names)
        names.update(benchmark.program_protocols)
    return {name.lower() for name in names}


def _excluded(tree: ast.AST) -> set[int]:
    """ids of docstring constants and `help=` texts."""
    skip = docstring_ids(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "help":
            skip.update(id(n) for n in ast.walk(node.value) if isinstance(n, ast.Constant))
    return skip


def _names_protocol(node: ast.AST) -> bool:
    """Whether `node` reads or names something called protocol (a variable, attribute, argument,
    keyword or a "protocol" key)."""
    for part in ast.walk(node):
        if isinstance(part, ast.Name):
            name = part.id
        elif isinstance(part, ast.Attribute):
            name = part.attr
        elif isinstance(part, (ast.arg, ast.keyword)):
            name = part.arg or ""
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            name = part.value
        else:
            continue
        if "protocol" in name.lower():
            return True
    return False


def _protocol_places(tree: ast.AST) -> list[ast.AST]:
    """Where a protocol is decided on: each simple statement, and each compound statement's header
    (an `if`'s test, a `for`'s iterable), that names a protocol; each default of a parameter
    called protocol. A constant elsewhere ("official" as a scoring rule's name, a figure's
    "constrained" layout) is another word spelled alike."""
    places: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults),
                     *zip(args.kwonlyargs, args.kw_defaults)]
            places.extend(default for arg, default in pairs if default is not None and "protocol" in arg.arg.lower())
        elif isinstance(node, ast.stmt) and not isinstance(node, ast.ClassDef):
            headers = [part for field, value in ast.iter_fields(node)
                       if field not in ("body", "orelse", "finalbody", "handlers", "cases", "args", "decorator_list")
                       for part in (value if isinstance(value, list) else [value]) if isinstance(part, ast.AST)]
            if any(_names_protocol(header) for header in headers):
                places.extend(headers)
    return places


def protocol_constants(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every string constant in `path` naming a protocol where a protocol is
    decided on; docstrings and help texts left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _excluded(tree)
    found = {(node.lineno, node.value) for place in _protocol_places(tree) for node in ast.walk(place)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
             and node.value.strip().lower() in names}
    return sorted(found)


def test_no_protocol_name_in_generic_layers():
    names = protocol_names()
    hits = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
            for path in generic_files() for line, text in protocol_constants(path, names)]
    assert not hits, "protocol names decided on in generic layers:\n" + "\n".join(hits)


def test_the_check_sees_a_protocol_constant(tmp_path):
    """The check can fail: a comparison with a protocol name and a protocol's default are found;
    docstrings, help texts and a constant that names no protocol are not."""
    module = tmp_path / "probe.py"
    module.write_text('"""constrained"""\n\n\n'
                      'def f(config, variant="official", protocol="pot"):\n'
                      '    """official"""\n'
                      '    option(help="pot", layout="constrained")\n'
                      '    if config.protocol == "constrained":\n'
                      '        return {"protocol": "cot"}\n', encoding="utf-8")
    assert protocol_constants(module, protocol_names()) == [(4, "pot"), (7, "constrained"), (8, "cot")]
