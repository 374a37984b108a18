"""finbench: offline benchmark runner for financial multimodal benchmarks on open VLMs."""
__version__ = "0.1.0"
