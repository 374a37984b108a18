"""`finbench` command line: run, demo, score, compare, sweep, report, leaderboard, track, data, models,
benchmarks, judge-agreement.

Configuration errors (unknown model, missing path, impossible quantization) end the command at
start-up with one clear line and exit code 2; per-sample problems never stop a run.

One module per command group: `evaluate` (run, demo, sweep; `config_file`: their --config),
`scores` (score, compare, report, leaderboard, judge-agreement), `track` (track), `tools` (data
check, models, benchmarks); `common` holds the apps, the consoles and how a command ends. The
commands are registered below, in the order `finbench --help` lists them.
"""

from __future__ import annotations

from finbench.cli import evaluate, scores, tools, track
from finbench.cli.common import app, data_app, models_app
from finbench.cli.config_file import config_command



def _summary(command: object) -> str:
    """A command's line in `finbench --help`: its docstring's first paragraph on one line, wrapped
    at the terminal's width between words, never at the docstring's own line ends mid-sentence."""
    return " ".join((command.__doc__ or "").strip().split("\n\n")[0].split())


# a command whose help is read from the registry when asked for (run: its --protocol list); those that
# take --config FILE
RUN_COMMAND = type("RunCommand", (evaluate.ProtocolsCommand, config_command(evaluate.run_takes)), {})
CLASSES = {evaluate.demo: evaluate.DemoCommand, evaluate.run: RUN_COMMAND,
           evaluate.sweep: config_command(evaluate.sweep_takes)}
for command in (evaluate.run, evaluate.demo, scores.score, scores.compare, evaluate.sweep, scores.report,
                scores.leaderboard, track.track):
    app.command(cls=CLASSES.get(command), short_help=_summary(command))(command)
data_app.command("check", short_help=_summary(tools.data_check))(tools.data_check)
models_app.command("make-tiny", cls=tools.MakeTinyCommand, short_help=_summary(tools.make_tiny_command))(
    tools.make_tiny_command)
models_app.command("list", short_help=_summary(tools.list_models))(tools.list_models)
app.command(short_help=_summary(tools.benchmarks))(tools.benchmarks)
app.command("judge-agreement", short_help=_summary(scores.judge_agreement))(scores.judge_agreement)

__all__ = ["app"]
