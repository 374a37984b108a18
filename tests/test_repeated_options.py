"""Issue 44 item 2: an option given twice never drops a value silently. One that takes a list is
repeatable and reads as its comma list (`--probe a --probe b` is `--probe a,b`; the probes' own
end-to-end run gives it that way, tests/test_probes.py); every single-valued option given twice
is refused in one line, exit code 2, before any work — checked for run, sweep, score and compare
in a fresh interpreter (nothing heavy imported), and for every single-valued option of every
command, whatever its name, so an option added later is covered without being listed here."""

from __future__ import annotations

import pytest
import typer.core
import typer.main
from test_startup_fast import _probe
from typer.testing import CliRunner

from finbench.cli import app


@pytest.mark.parametrize("args, message", [
    (["run", "--model", "x", "--limit", "2", "--limit", "3"], "--limit is given 2 times"),
    (["run", "--model", "x", "--progress", "--no-progress"], "--progress/--no-progress is given 2 times"),
    (["sweep", "--model", "x", "--quant", "none,8bit", "--seed", "1", "--seed=2"], "--seed is given 2 times"),
    (["score", "/no/such/run", "--variant", "official", "--variant", "paper"], "--variant is given 2 times"),
    (["compare", "/no/a", "/no/b", "--bootstrap", "0", "--bootstrap", "10"], "--bootstrap is given 2 times"),
])
def test_a_repeated_single_valued_option_is_one_line_before_torch_is_imported(tmp_path, args, message):
    result, stderr, _ = _probe(*args, cwd=tmp_path)
    assert result["code"] == 2, stderr
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], stderr
    assert result["heavy"] == [], f"imported {result['heavy']} before refusing"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, message", [  # each refusal names the value of BOTH occurrences: both were read
    (["run", "--model", "x", "--benchmark", "finmme", "--benchmark", "finmmx"], "unknown benchmark 'finmmx'"),
    (["run", "--model", "x", "--probe", "open-ended", "--probe", "memory"],
     "--probe open-ended,memory: unknown probe 'memory'"),
    (["run", "--model", "x", "--image-ablation", "blank", "--image-ablation", "blank"],
     "--image-ablation blank,blank: a mode is named twice"),
    (["run", "--model", "x", "--gen-kwargs", "temperature=0.5", "--gen-kwargs", "temperature=0"],
     "temperature is given twice"),
    (["sweep", "--model", "x", "--quant", "none", "--quant", "3bit"], "--quant 3bit: expected one of"),
    (["sweep", "--model", "x", "--dtype", "float32", "--dtype", "float32"],
     "a value is repeated (['float32', 'float32'])"),
])
def test_a_repeated_list_option_reads_every_value(tmp_path, args, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert done.exit_code == 2, done.output
    errors = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.output
    assert "is given 2 times" not in errors[0]


def _commands(group, path=()):
    for name, command in group.commands.items():
        if isinstance(command, typer.core.TyperGroup):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


SINGLE = [pytest.param(path, option, id=" ".join((*path, option.opts[0])))
          for path, command in _commands(typer.main.get_command(app)) for option in command.params
          if isinstance(option, typer.core.TyperOption) and option.expose_value and not option.multiple
          and not option.count]


def test_every_command_has_single_valued_options_to_check():
    names = {" ".join(path) for path, _ in (p.values for p in SINGLE)}
    assert {"run", "sweep", "score", "compare", "demo"} <= names


@pytest.mark.parametrize("path, option", SINGLE)
def test_every_single_valued_option_of_every_command_given_twice_is_refused(path, option, tmp_path, monkeypatch):
    """Whatever the option's name: the group refuses it before the command's own parse, so the
    command (and its required options) is never reached."""
    monkeypatch.chdir(tmp_path)
    flag = option.opts[0]
    once = [flag] if option.is_flag else [flag, "1"]
    done = CliRunner().invoke(app, [*path, *once, *once], env={"COLUMNS": "300"})
    assert done.exit_code == 2, done.output
    errors = [line for line in done.output.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and " is given 2 times" in errors[0], done.output
    assert flag in errors[0].split(" is given")[0]
    assert list(tmp_path.iterdir()) == []  # nothing written
