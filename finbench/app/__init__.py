"""What the commands compute, nothing printed: the Python API (api.py), sweeps, the leaderboard,
the data check and finished run folders scored and compared (runs.py). It imports the runner and
the wings below it, torch only inside the functions that run or score (docs/architecture.md)."""
