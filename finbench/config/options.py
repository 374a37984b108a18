"""Run options declared once: each `Option` is a RunConfig field, a `finbench run` flag (and, where
`sweep` says so, a `finbench sweep` flag or axis), an API keyword with its coercion, a start-up check
and, where `identity` says so, part of what makes a run folder's results another run's.

A field of RunConfig or of one of its specs declares itself an option where it is defined
(finbench/config/specs.py): `dtype: str = option("auto", "help …", check=…)`; `field_options` reads
the `Option`s back from the fields, its name, default and value type from the field itself. The
command line, the API (`finbench.api.make_config`), start-up validation and the sweep read these
declarations; none of them restates an option. A study (finbench/studies/) declares its `Option`
whole, so a study defined outside finbench gets its flag, keyword and check with no edit here.
This module imports nothing heavy: the commands build their parameters from it before torch loads.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Callable

Check = Callable[[Any, Any], None]  # (value, the whole RunConfig) → None, or one ValueError line


@dataclass(frozen=True)
class Option:
    """One option. `name` is the RunConfig field and the API keyword; the flag is `--name` with
    dashes unless `flag` says otherwise. `kind` is the command line's value type (int, float, str,
    bool); `many`: a list option (comma-separated or repeated), held as a tuple. `parse` turns the
    command line's or the API's value into the config's (ValueError: one line); `check` validates it
    at start-up with the rest of the config. `spec`: the RunConfig part that holds it (load, decode,
    batching, output, judging; "" for the run's own fields). `run` False: `finbench run` writes its
    own flag (e.g. --benchmark, which takes several); `sweep_help`/`sweep_default`: the sweep flag's
    where they differ from run's. `commas` False: a list option whose values are taken whole."""

    name: str
    default: Any
    help: str
    kind: type = str
    many: bool = False
    parse: Callable[[Any], Any] | None = None
    check: Check | None = None
    spec: str = ""
    sweep: bool = False  # also a `finbench sweep` option: one value, every variant
    axis: bool = False  # a `finbench sweep` axis: several values, one variant each
    identity: bool = False  # part of the run's identity (a run folder holding another's results is refused)
    flag: str | None = None
    run: bool = True
    sweep_help: str | None = None
    sweep_default: Any = None
    commas: bool = True

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def coerce(self, value: Any) -> Any:
        """The command line's or the API's value as the config holds it."""
        if self.many and (isinstance(value, str) or isinstance(value, (list, tuple))
                          and all(isinstance(item, str) for item in value)):  # a mapping or pairs: to `parse`
            items = [value] if isinstance(value, str) else list(value)
            parts = [p for item in items for p in (item.split(",") if self.commas else [item])]
            value = tuple(p.strip() for p in parts if p.strip())
        return self.parse(value) if self.parse is not None and value is not None else value


def typer_parameter(option: Option) -> Any:
    """`option` as a keyword parameter of a typer command (typer reads signatures)."""
    import inspect
    from typing import List, Optional

    import typer

    if option.many:
        annotation: Any = List[option.kind]
        default: Any = list(option.default or ())
    else:
        annotation = Optional[option.kind] if option.default is None else option.kind
        default = option.default
    declared = (option.flag,) if option.flag else ()
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, *declared, help=option.help))


def with_options(options: Callable[[], list[Option]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A typer command that takes, besides its own parameters, one flag per declared option; the
    command receives their values as one mapping `options` (name → value as given on the command
    line, before `Option.coerce`). `options` is called when the command is built, so a study or an
    option registered before the CLI is built (a test's, a plugin's) gets its flag."""
    import functools
    import inspect

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        declared = options()
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)  # after the declared ones (typer passes keywords)
               for name, p in inspect.signature(command, eval_str=True).parameters.items() if name != "options"]
        names = {o.name for o in declared}

        @functools.wraps(command)
        def wrapper(**given: Any) -> Any:
            return command(**{k: v for k, v in given.items() if k not in names},
                           options={k: v for k, v in given.items() if k in names})

        extra = [typer_parameter(o) for o in declared]  # first: --help lists the declared options, then the command's
        wrapper.__signature__ = inspect.Signature([*extra, *own])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in [*extra, *own]}
        del wrapper.__wrapped__  # typer reads this signature, not the command's
        return wrapper

    return wrap


OPTION = "finbench.option"  # the metadata key under which a dataclass field declares its option
_DECLARED = {f.name for f in dataclasses.fields(Option)} - {"name", "default", "help", "spec"}


def option(default: Any = dataclasses.MISSING, help: str = "", **declared: Any) -> Any:
    """A dataclass field that is a run option: `dataclasses.field(default=default)` whose metadata
    holds `help` and what else `Option` takes (flag, parse, check, sweep, axis, identity, …). The
    option's name is the field's; its `kind` and `many` are read from the field's type
    (`value_type`) unless given here. No default: a value every caller gives (the model)."""
    unknown = sorted(set(declared) - _DECLARED)
    if unknown:
        raise TypeError(f"option(): unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(_DECLARED))})")
    return dataclasses.field(default=default, metadata={OPTION: {"help": help, **declared}})


def value_type(hint: Any) -> dict[str, Any]:
    """The command line's value type of a field's type: a tuple is a list option of texts (`many`);
    bool, int or float (alone or with None) is that kind; anything else is text, parsed by the
    option's `parse` (e.g. `int | str | None` for a number or "auto")."""
    if typing.get_origin(hint) is tuple:
        return {"kind": str, "many": True}
    given = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    return {"kind": given[0] if len(given) == 1 and given[0] in (bool, int, float) else str}


def field_options(cls: type, spec: str = "") -> list[Option]:
    """The options a dataclass's fields declare (`option`), in field order. A field whose type is
    itself a dataclass (a RunConfig spec) holds options of its own: they are listed in its place,
    their `spec` the field's name."""
    hints = typing.get_type_hints(cls)
    found: list[Option] = []
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            found += field_options(hints[field.name], field.name)
        elif OPTION in field.metadata:
            default = ... if field.default is dataclasses.MISSING else field.default
            found.append(Option(name=field.name, default=default, spec=spec,
                                **{**value_type(hints[field.name]), **field.metadata[OPTION]}))
    return found
