"""`python -m finbench …`, `torchrun … -m finbench run …`, `accelerate launch -m finbench run …`."""

from finbench.cli import app

app()
