"""The value of an answer written as a Python expression — literals and arithmetic only, read by
an `ast` walk, never `eval` — with the work bounded before each step.

An answer is hostile input: 24 characters can ask for a gigabyte ('%0999999999d' % 0) or for
hours (sum([[0]*99999]*99999, [])). Each operation's result size is computed from its operands
before the operation runs, and refused (`EvalFailed`) when it passes a limit: integers of more
than `MAX_INT_BITS` bits (≈ 4,000 digits), sequences and strings of more than `MAX_ITEMS`
items, more than `MAX_NODES` nodes, more than `MAX_WORK` items made by one expression in all,
format widths and precisions above `MAX_ITEMS`, `round` to more than `MAX_DIGITS` places,
`pow(a, b, m)` above `MAX_MODULAR` bit products, `sum` of sequences by what its copies cost,
`str` of a container by its nested size. Texts longer than `MAX_TEXT` characters are not read.
What `eval` would compute inside those limits, this computes identically.

`names`: the identifiers that `eval` resolves (to an object no number rule accepts, `Opaque`);
any other name raises as `eval` would.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any, Callable

MAX_NODES, MAX_ITEMS, MAX_INT_BITS = 2000, 100_000, 13_300  # 13,300 bits ≈ 4,000 digits
MAX_WORK = 1_000_000  # items (or 64-bit words) made by one expression in all
MAX_TEXT = 1_000
MAX_DIGITS = 5_000
MAX_MODULAR = 1 << 20
SEQUENCES = (str, bytes, tuple, list)
FORMAT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class Opaque:
    """A value the official `eval` produces but no number rule accepts (a function, a set): it
    compares with nothing, as the official `within_eps` then raises and scores 0."""

    def __bool__(self) -> bool:
        return True


class EvalFailed(Exception):
    """`eval` would raise (or finbench will not compute it): the caller's clean-up follows."""


def _bits(value: Any) -> int:
    return value.bit_length() if isinstance(value, int) else 64


def _size(value: Any) -> int:
    """Items (or 64-bit words of an integer) a value holds at its top level."""
    if isinstance(value, SEQUENCES):
        return len(value)
    return _bits(value) // 64 + 1 if isinstance(value, int) else 1


def _nested(value: Any, budget: int) -> int:
    """Items of `value` counted through nested lists and tuples (a shared list once per place),
    stopping once past `budget`."""
    if not isinstance(value, (tuple, list)):
        return _size(value)
    total = len(value)
    for item in value:
        if total > budget:
            break
        if isinstance(item, (tuple, list)):
            total += _nested(item, budget - total)
    return total


def _integer(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise EvalFailed("integer too large")


def _items(count: int) -> None:
    if count > MAX_ITEMS:
        raise EvalFailed("value too large")


def _product(a: Any, b: Any) -> None:
    for seq, count in ((a, b), (b, a)):
        if isinstance(seq, SEQUENCES) and isinstance(count, int):
            _items(len(seq) * max(count, 0))
    if isinstance(a, int) and isinstance(b, int):
        _integer(_bits(a) + _bits(b))


def _sum_check(a: Any, b: Any) -> None:
    if isinstance(a, SEQUENCES) and isinstance(b, SEQUENCES):
        _items(len(a) + len(b))


def _power_check(a: Any, b: Any) -> None:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        _integer(b * abs(a).bit_length())


def _shift_check(a: Any, b: Any) -> None:
    if isinstance(a, int) and isinstance(b, int) and b > 0:
        _integer(_bits(a) + b)


def _format_check(a: Any, b: Any) -> None:
    """`text % args`: widths and precisions bounded, no `*` (a width taken from the args)."""
    if not isinstance(a, (str, bytes)):
        return
    text = a.decode("latin-1") if isinstance(a, bytes) else a
    args = b if isinstance(b, tuple) else (b,)
    widths = 0
    for match in FORMAT_SPEC.finditer(text):
        for part in match.groups():
            if part == "*":
                raise EvalFailed("a width from the arguments")
            widths += int(part) if part else 0
    _items(len(text) + widths + sum(_nested(arg, MAX_ITEMS) for arg in args))


CHECKS: dict[type, Callable[[Any, Any], None]] = {
    ast.Mult: _product, ast.Add: _sum_check, ast.Pow: _power_check, ast.LShift: _shift_check, ast.Mod: _format_check}
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
          ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
           ast.Is: operator.is_, ast.IsNot: operator.is_not}


def _sum(items: Any, start: Any = 0) -> Any:
    """`sum`, refused where concatenating sequences would copy more than MAX_WORK items."""
    items = list(items) if isinstance(items, SEQUENCES) else items
    if isinstance(items, list) and (isinstance(start, SEQUENCES) or any(isinstance(i, SEQUENCES) for i in items)):
        total = _size(start) + sum(_size(i) for i in items)
        _items(total)
        if total * len(items) > MAX_WORK:
            raise EvalFailed("sum of sequences too large")
    return sum(items, start)


def _round(*args: Any) -> Any:
    if len(args) == 2 and isinstance(args[1], int) and abs(args[1]) > MAX_DIGITS:
        raise EvalFailed("round to too many digits")
    return round(*args)


def _pow(*args: Any) -> Any:
    if len(args) == 3 and all(isinstance(a, int) for a in args) and _bits(args[1]) * _bits(args[2]) > MAX_MODULAR:
        raise EvalFailed("modular power too large")
    if len(args) == 2:
        _power_check(*args)
    return pow(*args)


def _str(*args: Any) -> Any:
    if args:
        _items(_nested(args[0], MAX_ITEMS) * 4)  # at least "0, " per item
    return str(*args)


CALLS = {"abs": abs, "round": _round, "min": min, "max": max, "sum": _sum, "int": int, "float": float, "bool": bool,
         "len": len, "complex": complex, "str": _str, "divmod": divmod, "pow": _pow}


def safe_eval(text: str, names: frozenset[str] = frozenset()) -> Any:
    """The value `eval(text)` has, for literals and arithmetic; EvalFailed where it would raise,
    or where finbench does not compute it (module docstring)."""
    if len(text) > MAX_TEXT:
        raise EvalFailed("text too long")
    try:
        tree = ast.parse(text.lstrip(" \t"), mode="eval")  # eval strips leading spaces and tabs
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        raise EvalFailed(str(err)) from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise EvalFailed("expression too large")
    try:
        return _Walk(names).value(tree.body)
    except EvalFailed:
        raise
    except Exception as err:  # noqa: BLE001 — what the operation itself raises, as eval would
        raise EvalFailed(f"{type(err).__name__}: {err}") from None


class _Walk:
    """One expression's walk: `work` counts the items made so far (MAX_WORK in all)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names, self.work = names, 0

    def charge(self, items: int) -> None:
        self.work += items
        if self.work > MAX_WORK:
            raise EvalFailed("expression too costly")

    def weighed(self, value: Any) -> Any:
        """`value`, its nested size charged first (comparing or reducing it walks all of it)."""
        self.charge(_nested(value, MAX_WORK))
        return value

    def made(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            _integer(value.bit_length())
        if isinstance(value, SEQUENCES):
            _items(len(value))
        self.charge(_size(value))
        return value

    def plain(self, node: ast.AST, allow_opaque: bool = False) -> Any:
        value = self.value(node)
        if isinstance(value, Opaque) and not allow_opaque:
            raise EvalFailed("an official object in arithmetic")
        return value

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return self.made(node.value)
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return Opaque()
            raise EvalFailed(f"name {node.id!r} is not defined")
        if isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            items = [self.value(e) for e in node.elts]
            return self.made(tuple(items) if isinstance(node, ast.Tuple) else items)
        if isinstance(node, (ast.Set, ast.Dict)):
            for child in [*getattr(node, "elts", ()), *getattr(node, "keys", ()), *getattr(node, "values", ())]:
                if child is not None:
                    self.value(child)
            return Opaque()
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            return self.made(UNARY[type(node.op)](self.plain(node.operand, isinstance(node.op, ast.Not))))
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            left, right = self.plain(node.left), self.plain(node.right)
            CHECKS.get(type(node.op), lambda a, b: None)(left, right)
            return self.made(BINARY[type(node.op)](left, right))
        if isinstance(node, ast.BoolOp):
            value = self.value(node.values[0])
            for child in node.values[1:]:
                if bool(value) == isinstance(node.op, ast.Or):
                    return value
                value = self.value(child)
            return value
        return self.compound(node)

    def compound(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Compare):
            left = self.weighed(self.plain(node.left))
            for op, child in zip(node.ops, node.comparators):
                right = self.weighed(self.plain(child))
                if not COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLS and not node.keywords:
            if any(isinstance(a, ast.Starred) for a in node.args):
                raise EvalFailed("starred call")
            return self.made(CALLS[node.func.id](*[self.weighed(self.plain(a)) for a in node.args]))
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return self.made(self.plain(node.value)[self.plain(node.slice)])
        raise EvalFailed(f"{type(node).__name__} is not evaluated")
