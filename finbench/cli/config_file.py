"""`--config FILE` on `finbench run` and `finbench sweep`: a command's options from a YAML or TOML
file (config/files.py reads it).

A file's keys are the command's options, as `--help` lists them (the flag without its dashes, or
the option's name; dashes or underscores). A run option's key is typed by its one declaration, the
`Option` of its RunConfig field (config/run_options.py `run_options()`) or of its study, the same
the command's flag is built from (`ConfigCommand.declared`); the command's own parameters
(--benchmark, --progress, --track, …) by their annotations. Each value is checked against that
type (true/false, an integer, a number, text, or a list for an option that takes several) before
anything runs, then goes where the command line's would, so the declaration's `parse` and `check`
coerce and check it, as for a flag. A flag given on the command line overrides the file (the
file's values are the command's defaults: click's `default_map`). An unknown key or a value of the
wrong type is one line naming the key and the nearest option (difflib), before any model loads.

A `runs:` list runs the command once per entry, in order, each entry's keys over the file's others
(the shared defaults), each into its own folder: its own `out`, else a folder under the file's
`out` named by the entry's own settings (`OUT/protocol-official_max_new_tokens-2`: `entry_folder`).
A failed entry is reported and the next one runs; the exit code is 1 unless all succeeded. Every
entry is checked before the first runs.

A command returns a document (a mapping) instead of running when asked to `--print-config`:
printed here as YAML, one `runs:` list for several.
"""

from __future__ import annotations

import difflib
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import typer

from finbench.cli.common import console, fail
from finbench.config.files import RUNS, dump, read_file
from finbench.config.options import Option

OWN = ("config", "print_config", "help")  # the command's parameters a file does not set
KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


@dataclass(frozen=True)
class Key:
    """What a file's key sets: the command's parameter `name`, the value type of one item
    (`kind`), and whether it takes several (`many`)."""

    name: str
    kind: type
    many: bool


def _own_key(param: Any) -> Key:
    """A parameter the command declares itself (--benchmark, --progress, --track, …), typed by its
    annotation (typer's parameters keep it)."""
    hint = param.type_descriptor.annotation
    many = typing.get_origin(hint) in (list, tuple)
    if many:
        hint = typing.get_args(hint)[0]
    given = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    return Key(param.name, given[0] if given[0] in KINDS else str, many)


def spellings(params: Sequence[Any], declared: Sequence[Option]) -> dict[str, Key]:
    """Each way a file may name one of the command's parameters (its name, its long flags; dashes or
    underscores) → its Key. A declared option (`declared`: the RunConfig fields' and the studies'
    `Option`s the command takes, finbench/config/run_options.py) is typed by its declaration; the
    rest are the command's own parameters."""
    options = {option.name: option for option in declared}
    found: dict[str, Key] = {}
    for param in params:
        if param.name in OWN or not param.expose_value:
            continue
        option = options.get(param.name)
        key = Key(param.name, option.kind, option.many) if option is not None else _own_key(param)
        names = [param.name, *(o[2:] for o in param.opts if o.startswith("--"))]
        for name in names:
            found[name] = found[name.replace("_", "-")] = found[name.replace("-", "_")] = key
    return found


def _scalar(kind: type, value: Any) -> Any:
    """`value` as the option's kind, or None when the file gave another type."""
    if isinstance(value, bool):
        return value if kind is bool else None
    if kind is bool or not isinstance(value, (str, int, float)):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    if kind is float:
        return float(value) if isinstance(value, (int, float)) else None
    text = str(value)  # text: what the command line would pass (8, 0.5 as written)
    return str(Path(text).expanduser()) if text == "~" or text.startswith("~/") else text


def file_value(key: Key, value: Any) -> Any:
    """The file's `value` for `key` as the command line would give it; TypeError if it is not one.
    null leaves the option's default. A list option takes a list, one value, or a mapping (as the
    command line's KEY=VALUE items, e.g. gen_kwargs or BENCHMARK=SOURCE data)."""
    if value is None:
        return None
    kind = key.kind
    if key.many:
        if isinstance(value, Mapping):
            value = [f"{key}={str(item).lower() if isinstance(item, bool) else item}" for key, item in value.items()]
        items = value if isinstance(value, list) else [value]
        converted = [_scalar(kind, item) for item in items]
        if any(item is None for item in converted):
            raise TypeError(f"expected a list of {KINDS[kind].replace('an ', '').replace('a ', '')} values "
                            f"(or one), got {value!r}")
        return converted
    converted = _scalar(kind, value)
    if converted is None:
        raise TypeError(f"expected {KINDS[kind]}, got {value!r}")
    return converted


def file_options(where: str, given: Mapping[str, Any], known: Mapping[str, Key]) -> dict[str, Any]:
    """{parameter name: value} of one mapping of a file; one ValueError line for an unknown key
    (naming the nearest option), a key given twice, or a value of the wrong type."""
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in given.items():
        found = known.get(str(key))
        if found is None:
            near = nearest(str(key), list(known))
            hint = f"; the nearest option is {near!r}" if near else ""
            raise ValueError(f"{where}: unknown key {key!r}{hint} (the keys are the command's options: --help)")
        if found.name in spelled:
            raise ValueError(f"{where}: {found.name} is given twice (as {spelled[found.name]!r} and {key!r})")
        spelled[found.name] = str(key)
        try:
            values[found.name] = file_value(found, value)
        except TypeError as err:
            raise ValueError(f"{where}: {key}: {err}") from None
    return values


def nearest(key: str, names: Sequence[str]) -> str | None:
    """The option name nearest `key`: among the names it starts with or that start with it (a
    longer or shorter spelling: `quantization` → `quant`, not `quant_vision`), else among all,
    the most similar (difflib)."""
    affixed = [name for name in names if key.startswith(name) or name.startswith(key)]
    found = difflib.get_close_matches(key, affixed or names, n=1, cutoff=0.0)
    return found[0] if found else None


def plan(path: str, params: Sequence[Any], declared: Sequence[Option],
         given: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """(the file's options, each `runs:` entry's options or None): every entry checked, each with
    its own folder. `given`: what the command line gives (its --out would put every entry into one
    folder: refused with `runs:`)."""
    where = f"--config {path}"
    try:
        document = read_file(path)
    except ValueError as err:  # its line starts with the file's path
        raise ValueError(f"--config {err}") from None
    runs = document.pop(RUNS, None)
    known = spellings(params, declared)
    shared = file_options(where, document, known)
    if runs is None:
        return shared, None
    if not isinstance(runs, list) or not runs or not all(isinstance(entry, Mapping) for entry in runs):
        raise ValueError(f"{where}: {RUNS}: expected a list of mappings, one per run")
    if given.get("out") is not None:
        raise ValueError(f"{where}: --out with a {RUNS}: list would put every run into one folder; give each "
                         "entry its own out, or a top-level out (an entry without one runs into a folder under it, "
                         "named by the entry's settings)")
    default = next((p.default for p in params if p.name == "out"), None)
    entries = []
    for number, entry in enumerate(runs, 1):
        own = file_options(f"{where}: {RUNS} entry {number}", entry, known)
        folder = own.get("out") or str(Path(shared.get("out") or default) / (entry_folder(own) or str(number)))
        entries.append({**shared, **own, "out": folder})
    outs = [entry["out"] for entry in entries]
    twice = sorted({out for out in outs if outs.count(out) > 1})
    if twice:
        raise ValueError(f"{where}: {RUNS} entries share the folder {twice[0]}: give each its own out")
    return shared, entries


def entry_folder(own: Mapping[str, Any]) -> str:
    """The folder name of a `runs:` entry that names no `out`: its own settings, as a sweep names its
    variants (`protocol-official_max_new_tokens-2`; a path by its last part), so that adding or
    reordering entries keeps each one's folder, and its cache."""
    def text(value: Any) -> str:
        items = value if isinstance(value, list) else [value]
        return ",".join(Path(str(item)).name or str(item) for item in items)

    parts = [f"{key}-{re.sub(r'[^A-Za-z0-9.,+-]+', '-', text(value)).strip('-')}" for key, value in own.items()]
    return "_".join(parts)[:120]


class ConfigCommand(typer.core.TyperCommand):
    """A command that takes `--config FILE` (its options' defaults from the file, or a `runs:` list
    run entry by entry) and prints the document it returns (`--print-config`). `declared`: the
    declared options the command takes (what its `with_options` gives it), by which a file's keys
    are typed; `config_command` makes the class of one command."""

    declared: Callable[[], list[Option]] = staticmethod(lambda: [])

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        given, original = self._given(info_name, args, parent), list(args)  # parsing consumes `args`
        if given.get("config") is None:
            return super().make_context(info_name, args, parent, **extra)
        try:
            shared, entries = plan(given["config"], self.params, self.declared(), given)
        except ValueError as err:
            fail(str(err))
        if entries is None:
            return super().make_context(info_name, args, parent, default_map=shared, **extra)
        ctx = super().make_context(info_name, args, parent, resilient_parsing=True, **extra)
        ctx.finbench_runs = (original, entries)  # an attribute of this context (`meta` is shared)
        return ctx

    def _given(self, info_name: str | None, args: list[str], parent: Any) -> dict[str, Any]:
        """What the command line gives, parsed without checks (its errors are the real parse's)."""
        ctx = self.context_class(self, info_name=info_name, parent=parent, resilient_parsing=True)
        opts, _, _ = self.make_parser(ctx).parse_args(list(args))
        return opts

    def invoke(self, ctx: Any) -> Any:
        planned = getattr(ctx, "finbench_runs", None)
        if planned is None:
            document = super().invoke(ctx)
            if isinstance(document, dict):
                typer.echo(dump(document), nl=False)
            return None
        args, entries = planned
        documents, failed = [], []
        for number, defaults in enumerate(entries, 1):
            document, code = self._run_entry(ctx, args, defaults, f"run {number} of {len(entries)}")
            if isinstance(document, dict):
                documents += document.get(RUNS, [document])
            if code:
                failed.append(f"{number} ({defaults['out']})")
        if documents:
            typer.echo(dump({RUNS: documents}), nl=False)
        if failed:
            console.print(f"[bold red]error:[/] {len(failed)} of {len(entries)} runs failed: run {', '.join(failed)}",
                          markup=True, highlight=False)
            raise typer.Exit(1)
        return None

    def _run_entry(self, ctx: Any, args: list[str], defaults: dict[str, Any], title: str) -> tuple[Any, int]:
        """One entry of a `runs:` list: (what the command returned, its exit code); a failure is
        reported in one line and the next entry runs (a stop — Ctrl-C, SIGTERM — stops them all)."""
        console.print(f"{title}: {defaults['out']}", markup=False, highlight=False)
        try:
            entry = super().make_context(ctx.info_name, list(args), parent=ctx.parent, default_map=defaults)
            with entry:
                return super().invoke(entry), 0
        except typer.Exit as stop:
            if stop.exit_code >= 128:
                raise
            return None, stop.exit_code
        except Exception as err:  # noqa: BLE001 — one entry's failure (a usage error, a crash) is that entry's
            message = err.format_message() if hasattr(err, "format_message") else f"{type(err).__name__}: {err}"
            console.print(f"error: {title}: {message}", markup=False, highlight=False)
            return None, 1


def config_command(declared: Callable[[], list[Option]]) -> type[ConfigCommand]:
    """The ConfigCommand class of a command whose declared options are `declared()`."""
    return type("ConfigCommand", (ConfigCommand,), {"declared": staticmethod(declared)})
