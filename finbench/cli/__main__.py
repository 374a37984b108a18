"""`python -m finbench.cli`."""

from finbench.cli import app

app()
