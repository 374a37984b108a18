"""`finbench` command line: run, demo, score, compare, sweep, report, leaderboard, data, models, benchmarks,
judge-agreement.

Configuration errors (unknown model, missing path, impossible quantization) end the command at
start-up with one clear line and exit code 2; per-sample problems never stop a run.

One module per command group: `evaluate` (run, demo, sweep), `scores` (score, compare, report,
leaderboard, judge-agreement), `tools` (data check, models, benchmarks); `common` holds the apps, the consoles and
how a command ends. The commands are registered below, in the order `finbench --help` lists them.
"""

from __future__ import annotations

from finbench.cli import evaluate, scores, tools
from finbench.cli.common import app, data_app, models_app

CLASSES = {evaluate.demo: evaluate.DemoCommand}  # a command whose help is read from the registry when asked for
for command in (evaluate.run, evaluate.demo, scores.score, scores.compare, evaluate.sweep, scores.report,
                scores.leaderboard):
    app.command(cls=CLASSES.get(command))(command)
data_app.command("check")(tools.data_check)
models_app.command("make-tiny", cls=tools.MakeTinyCommand)(tools.make_tiny_command)
models_app.command("list")(tools.list_models)
app.command()(tools.benchmarks)
app.command("judge-agreement")(scores.judge_agreement)

__all__ = ["app"]
