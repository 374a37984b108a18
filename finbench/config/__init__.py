"""The run's configuration, torch-free: RunConfig and its specs (specs.py), each run option
declared once on its field there (options.py's `option`; run_options.py derives the table from
the fields) with its checks (option_checks.py), --gen-kwargs (gen_kwargs.py) and a request with
one run's settings (run_settings.py). It imports core/ and the benchmarks' registry
(docs/architecture.md)."""
