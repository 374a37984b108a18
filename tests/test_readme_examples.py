"""The README's examples run as written (issue 31): every `finbench …` command in its bash blocks
that can run offline is run, in order, in a fresh folder with a fresh FINBENCH_HOME, and must
succeed; the ones that cannot (a model or data set at an absolute path, or a run folder only such a
command makes) are named, and only those are left out. The demo's last line is the one the README
quotes."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from helpers import cli

README = Path(__file__).resolve().parents[1] / "README.md"
FINBENCH = re.compile(r"^(?:\.venv/bin/)?finbench\s")


def readme_commands(text: str) -> list[list[str]]:
    """The `finbench …` commands of the README's bash blocks, in order, as argument lists (after
    `finbench`): continuation lines joined, `&&` chains split, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                part = part.split("  #")[0].strip()
                if FINBENCH.match(part):
                    commands.append(shlex.split(part)[1:])
    return commands


def _outputs(args: list[str]) -> list[str]:
    """The run folders a command writes: its --out values, or a demo's default folder."""
    outs = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--out"]
    if args[0] == "demo" and not outs:
        benchmark = args[args.index("--benchmark") + 1] if "--benchmark" in args else "finmme"
        outs = ["runs/demo" if benchmark == "finmme" else f"runs/demo-{benchmark}"]
    return outs


def _as_bash_expands(arg: str, home: str) -> str:
    """`~/…` as bash gives it to the command: the user's home in its place."""
    return home + arg[1:] if arg == "~" or arg.startswith("~/") else arg


def _offline(args: list[str], unavailable: set[str]) -> str:
    """Why a command cannot run here ("" when it can)."""
    absolute = [arg for arg in args if arg.startswith("/")]
    if absolute:
        return f"needs {absolute[0]}"
    missing = [arg for arg in args if arg.startswith("runs/") and arg in unavailable]
    return f"reads {missing[0]}, which only a left-out command makes" if missing else ""


def test_the_parser_reads_chains_continuations_and_comments():
    text = ("```bash\npython3 -m venv .venv && .venv/bin/finbench demo\n"
            "finbench run --model /m \\\n    --out runs/x\nfinbench data check /d     # a comment\n```\n"
            "```python\nfinbench.evaluate()\n```\n")
    assert readme_commands(text) == [["demo"], ["run", "--model", "/m", "--out", "runs/x"], ["data", "check", "/d"]]
    assert _offline(["compare", "runs/x", "runs/demo"], {"runs/x"}) == "reads runs/x, which only a left-out command makes"
    assert _offline(["report", "runs/demo"], {"runs/x"}) == ""


@pytest.mark.slow
def test_every_offline_example_of_the_readme_runs_as_written(tmp_path):
    text = README.read_text()
    commands = readme_commands(text)
    assert ["demo"] in commands and any(c[0] == "leaderboard" for c in commands)
    unavailable: set[str] = set()
    left_out, ran = [], []
    # a fresh home, where the README's ~ and FINBENCH_HOME's default (~/.cache/finbench) point
    env = {**os.environ, "HOME": str(tmp_path / "user"), "FINBENCH_HOME": str(tmp_path / "user/.cache/finbench"),
           "HF_HUB_OFFLINE": "1"}
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for args in commands:
            reason = _offline(args, unavailable)
            if reason:
                left_out.append((" ".join(args), reason))
                unavailable.update(_outputs(args))
                continue
            done = cli(*[_as_bash_expands(arg, env["HOME"]) for arg in args], env=env)
            assert done.returncode == 0, f"finbench {' '.join(args)}\n{done.stdout}\n{done.stderr}"
            ran.append((args, done))
            for out in _outputs(args):
                if args[0] in ("demo", "run"):
                    assert (tmp_path / out / "results.json").is_file(), out
                else:
                    assert (tmp_path / out).exists(), out
    finally:
        os.chdir(here)

    # what is left out needs what this machine cannot have, and nothing else
    assert left_out and all(reason.startswith(("needs /", "reads runs/")) for _, reason in left_out)
    names = {args[0] for args, _ in ran}
    assert {"demo", "report", "score", "leaderboard", "sweep"} <= names, names
    assert any("--permutations" in args for args, _ in ran)  # the studies run as written too
    assert "track" in names and any("--config" in args for args, _ in ran)  # a config run, a tracker call
    demos = [args for args, _ in ran if args[0] == "demo"]
    assert len(demos) >= 5  # the default and every benchmark's demo

    # the README's quoted last line of `finbench demo` is what the demo prints
    quoted = re.search(r"`finbench demo` ends with one line —\s*`([^`]+)`", text)
    assert quoted, "the README no longer quotes the demo's last line"
    demo_stdout = next(done.stdout for args, done in ran if args == ["demo"])
    assert demo_stdout.strip().splitlines()[-1] == quoted.group(1).replace("\n", " ")
