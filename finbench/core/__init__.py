"""The vocabulary every wing shares, torch-free: questions, predictions and model requests
(types.py), the requests a benchmark makes (requests.py), judging (judging.py), sources
(sources.py), text every writer can write (encodable.py), numbers as shown (formatting.py), installed packages' plugins (plugins.py). It
imports nothing of finbench (docs/architecture.md)."""
