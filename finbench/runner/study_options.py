"""The robustness studies' options, checked with the other start-up checks before torch or
transformers is imported (so this module imports neither): `--permutations`, `--image-ablation`,
`--samples`, `--probe`. The studies themselves are runner/studies.py, runner/sampling.py and
runner/probes.py."""

from __future__ import annotations

from finbench.requests import IMAGE_ABLATIONS, PROBES
from finbench.types import OPTION_LETTERS, RunConfig


def check_options(config: RunConfig) -> None:
    """--permutations, --image-ablation, --samples and --probe, checked with the other options (one
    ValueError line)."""
    k = config.permutations
    if k < 0 or k == 1:
        raise ValueError(f"--permutations {k}: give 2 or more orders of the options (the published one and "
                         "k−1 rotations), or 0 for none")
    if k > len(OPTION_LETTERS):
        raise ValueError(f"--permutations {k}: an item has at most {len(OPTION_LETTERS)} options, so at most "
                         f"{len(OPTION_LETTERS)} orders")
    if k and config.protocol != "constrained":
        raise ValueError("--permutations applies to the constrained protocol: the official prompts write the "
                         "options themselves")
    unknown = [mode for mode in config.image_ablation if mode not in IMAGE_ABLATIONS]
    if unknown:
        raise ValueError(f"--image-ablation {','.join(config.image_ablation)}: unknown mode {unknown[0]!r}; "
                         f"expected {', '.join(IMAGE_ABLATIONS)} (comma-separated)")
    if len(set(config.image_ablation)) != len(config.image_ablation):
        raise ValueError(f"--image-ablation {','.join(config.image_ablation)}: a mode is named twice")
    _check_samples(config)
    _check_probes(config)


def _check_samples(config: RunConfig) -> None:
    """--samples, checked with the other options (one ValueError line)."""
    if not isinstance(config.samples, int) or config.samples < 1:
        raise ValueError(f"--samples {config.samples}: give the number of samples per generated request, 1 or more "
                         "(1: each asked once, as without --samples)")


def _check_probes(config: RunConfig) -> None:
    """--probe, checked with the other options (one ValueError line)."""
    unknown = [name for name in config.probes if name not in PROBES]
    if unknown:
        raise ValueError(f"--probe {','.join(config.probes)}: unknown probe {unknown[0]!r}; expected "
                         f"{', '.join(PROBES)} (comma-separated)")
    if len(set(config.probes)) != len(config.probes):
        raise ValueError(f"--probe {','.join(config.probes)}: a probe is named twice")
    if config.probes and config.protocol != "constrained":
        raise ValueError("--probe applies to the constrained protocol: the official prompts write the options "
                         "themselves")
