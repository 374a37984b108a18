"""The run's configuration, torch-free: RunConfig and its specs (specs.py), every run option
declared once (options.py, run_options.py) with its checks (option_checks.py), --gen-kwargs
(gen_kwargs.py) and a request with one run's settings (run_settings.py). It imports core/ and the
benchmarks' registry (docs/architecture.md)."""
