"""The plan of the house, read from the source with `ast` (nothing is imported): its rooms (the
packages of finbench and the modules loose at its top), the arrows between them (imports,
module-level and inside functions, counted), and what docs/architecture.md promises of them —
how many imports of finbench modules are made inside functions (each must avoid importing torch
or a heavy library for a command that does not need it), which modules answer attribute look-ups
with a module `__getattr__`, how many modules lie loose at the top, and the longest functions.

    python scripts/house.py            # rooms, arrows and counts
    python scripts/house.py --lazy     # also every function-level import, one per line

tests/test_architecture.py asserts the counts through the functions here.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "finbench"
TOP = ("__init__", "__main__")  # the package's own face and entry point: not loose modules
CHECKING = "TYPE_CHECKING"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def room(module: str) -> str:
    """The room a module is in: its first two name parts (finbench.runner, finbench.types); the
    package's own face and entry point (__init__, __main__) are the room `finbench`."""
    first_two = ".".join(module.split(".")[:2])
    return "finbench" if first_two.rpartition(".")[2] in TOP else first_two


def _imports(tree: ast.AST, inside: bool = False):
    """(node, inside a function) for every import statement; `if TYPE_CHECKING:` blocks are skipped
    (annotations only, never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == CHECKING:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, inside
        yield from _imports(node, inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The finbench modules an import statement imports, resolved to files."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def imports(package: Path = PACKAGE) -> list[tuple[str, int, str, bool]]:
    """(importer, line, imported module, inside a function) for every import of a finbench module."""
    files = modules(package)
    found = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, inside in _imports(tree):
            for target in sorted(_targets(node, module, path.name == "__init__.py", set(files))):
                found.append((module, node.lineno, target, inside))
    return found


def function_level_imports(package: Path = PACKAGE) -> list[tuple[str, int]]:
    """(module, line) of each import statement inside a function that imports a finbench module."""
    return sorted({(module, line) for module, line, _, inside in imports(package) if inside})


def module_getattrs(package: Path = PACKAGE) -> list[str]:
    """Modules that define a module-level `__getattr__` (PEP 562)."""
    return [module for module, path in modules(package).items()
            if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                   for n in ast.parse(path.read_text(encoding="utf-8")).body)]


def loose_modules(package: Path = PACKAGE) -> list[str]:
    """The modules at the top of the package, its own __init__ and __main__ aside."""
    return sorted(p.stem for p in package.glob("*.py") if p.stem not in TOP)


def longest_functions(package: Path = PACKAGE, n: int = 5) -> list[tuple[int, str]]:
    """(lines, module:function) of the `n` longest functions and methods."""
    found = []
    for module, path in modules(package).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{module}:{node.name}"))
    return sorted(found, reverse=True)[:n]


def arrows(package: Path = PACKAGE) -> Counter:
    """(room, room it imports, inside a function) → how many imports, between different rooms."""
    return Counter((room(a), room(b), inside) for a, _, b, inside in imports(package) if room(a) != room(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lazy", action="store_true", help="list every function-level import of a finbench module")
    args = parser.parse_args()
    files = modules()
    rooms = Counter(room(m) for m in files)
    print(f"rooms ({len(rooms)}):")
    for name, count in sorted(rooms.items()):
        print(f"  {name:28} {count:3} module(s)")
    print("arrows (room → room it imports: module-level + inside functions):")
    counted = arrows()
    for source, target in sorted({(a, b) for a, b, _ in counted}):
        print(f"  {source:28} → {target:28} {counted[(source, target, False)]:3} + {counted[(source, target, True)]}")
    lazy = function_level_imports()
    print(f"function-level imports of finbench modules: {len(lazy)}")
    if args.lazy:
        for module, line in lazy:
            print(f"  {module}:{line}")
    print(f"module __getattr__: {', '.join(module_getattrs()) or 'none'}")
    print(f"loose modules at the top ({len(loose_modules())}): {', '.join(loose_modules())}")
    print("longest functions: " + "; ".join(f"{name} {lines} lines" for lines, name in longest_functions()))


if __name__ == "__main__":
    main()
