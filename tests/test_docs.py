"""Every `finbench …` command and every `--option` the README and docs/ name exists in the CLI.

Parsed from the Markdown (code-block lines, their `\\` continuations, and inline code spans) and
checked against the typer app's own commands and parameters, in-process: a renamed option or a
removed command fails here instead of in a newcomer's first hour.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from finbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Spans that call another program: their options are that program's, not finbench's.
OTHER_TOOLS = re.compile(r"scripts/|pytest|\bpip\b|huggingface-cli|gpu_check|bench_\w+|python3? -m (?!finbench)"
                         r"|\bgit\b|\bdu\b|make-tiny\.py|vllm serve|transformers serve|ray start|\bmlflow (?:ui|server)\b")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FINBENCH = re.compile(r"(?:^|[\s(`/])finbench((?:\s+[a-z][a-z-]*)*)")


def _group():
    return typer.main.get_command(app)


def _subcommands(command) -> dict:
    # typer vendors its own click, so a group is recognised by its commands, not its class
    return vars(command).get("commands") or {}


def _names(command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names


def _all_options(command) -> set[str]:
    names = _names(command)
    for sub in _subcommands(command).values():
        names |= _all_options(sub)
    return names


def _spans(text: str) -> list[tuple[str, str]]:
    """(where, text) of every code-block command (continuations joined) and inline code span."""
    spans, in_block = [], False
    lines = text.split("\n")
    buffer = ""
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            buffer += line.split(" #")[0] if not line.lstrip().startswith("#") else ""
            if buffer.rstrip().endswith("\\"):
                buffer = buffer.rstrip()[:-1] + " "
                continue
            spans.append((f"line {number}", buffer))
            buffer = ""
        else:
            spans.extend((f"line {number}", m) for m in re.findall(r"`([^`]+)`", line))
    return spans


def _resolve(group, words: list[str]):
    command, path = group, []
    for word in words:
        if word in _subcommands(command):
            command = _subcommands(command)[word]
            path.append(word)
        else:
            break
    return command, path


def _problems(path: Path) -> list[str]:
    group = _group()
    every = _all_options(group)
    problems = []
    for where, span in _spans(path.read_text()):
        if OTHER_TOOLS.search(span):
            continue
        for part in re.split(r";|&&|\|", span):
            found = FINBENCH.search(part)
            if found and found.group(1).strip():
                words = found.group(1).split()
                command, resolved = _resolve(group, words)
                if not resolved and words[0] not in {"demo", "run"}:
                    # "finbench's", prose; a real subcommand word always resolves
                    if words[0] in group.commands or not part.lstrip().startswith(("finbench", ".venv")):
                        continue
                    problems.append(f"{path.name} {where}: no command `finbench {words[0]}`")
                    continue
                if _subcommands(command) and resolved and len(words) > len(resolved):
                    problems.append(f"{path.name} {where}: no command `finbench {' '.join(words)}`")
                allowed = _names(command) if not _subcommands(command) else every
                problems += [f"{path.name} {where}: `finbench {' '.join(resolved)}` has no {o}"
                             for o in OPTION.findall(part[found.start():]) if o not in allowed]
            else:
                problems += [f"{path.name} {where}: no finbench command has {o}"
                             for o in OPTION.findall(part) if o not in every]
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_command_and_option_named_exists(path):
    assert _problems(path) == []


def test_the_checker_catches_a_stale_option(tmp_path):
    stale = tmp_path / "stale.md"
    stale.write_text("```bash\nfinbench run --model M --no-such-flag \\\n    --out runs/x\n```\n"
                     "Use `finbench scroe runs/x` or `--benchmark-typo`.\n")
    assert _problems(stale) == ["stale.md line 3: `finbench run` has no --no-such-flag",
                                "stale.md line 5: no command `finbench scroe`",
                                "stale.md line 5: no finbench command has --benchmark-typo"]


INSTALL_AND_DEMO = "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && .venv/bin/finbench demo"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[test]' && .venv/bin/python -m pytest"


def test_readme_is_short_and_keeps_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert INSTALL_AND_DEMO in text and TEST_COMMAND in text
    for page in ("usage", "benchmarks", "studies", "quantization", "performance", "reliability",
                 "fidelity", "architecture", "statistics"):
        assert f"docs/{page}.md" in text


# a path into finbench/ as the docs write it: whole (finbench/runner/keys.py) or from a wing (runner/keys.py)
WINGS = "|".join(sorted(p.name for p in (ROOT / "finbench").iterdir() if p.is_dir() and p.name != "__pycache__"))
PACKAGE_PATH = re.compile(rf"(?<![\w/.-])(?:finbench/)?(?:{WINGS})/[\w/]+\.(?:py|json|j2)\b|(?<![\w/.-])finbench/\w+\.py\b")


def package_paths(text: str) -> set[str]:
    return set(PACKAGE_PATH.findall(text))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_finbench_file_the_docs_name_exists(path):
    """A module moved or renamed (issue 51: the wings core/, config/, app/) leaves no stale path in
    the README or docs/: every finbench/… file they name, whole or from its wing, is there."""
    missing = sorted(p for p in package_paths(path.read_text(encoding="utf-8"))
                     if not (ROOT / (p if p.startswith("finbench/") else f"finbench/{p}")).is_file())
    assert missing == [], f"{path.name} names files that are not there: {missing}"


def test_the_path_check_sees_whole_and_wing_paths():
    text = "see finbench/runner/keys.py, `scoring/tables.py`, finbench/api.py and tests/test_x.py; a/runner/x.py"
    assert package_paths(text) == {"finbench/runner/keys.py", "scoring/tables.py", "finbench/api.py"}
