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
    _check_names("--image-ablation", "mode", config.image_ablation, IMAGE_ABLATIONS)
    _check_samples(config)
    _check_probes(config)


def _check_samples(config: RunConfig) -> None:
    """--samples, checked with the other options (one ValueError line)."""
    if not isinstance(config.samples, int) or config.samples < 1:
        raise ValueError(f"--samples {config.samples}: give the number of samples per generated request, 1 or more "
                         "(1: each asked once, as without --samples)")


def _check_probes(config: RunConfig) -> None:
    """--probe, checked with the other options (one ValueError line)."""
    _check_names("--probe", "probe", config.probes, PROBES)
    if config.probes and config.protocol != "constrained":
        raise ValueError("--probe applies to the constrained protocol: the official prompts write the options "
                         "themselves")


def _check_names(flag: str, kind: str, given: tuple[str, ...], known: tuple[str, ...]) -> None:
    """A comma-separated list of names: each known, none twice."""
    unknown = [name for name in given if name not in known]
    if unknown:
        raise ValueError(f"{flag} {','.join(given)}: unknown {kind} {unknown[0]!r}; expected {', '.join(known)} "
                         "(comma-separated)")
    if len(set(given)) != len(given):
        raise ValueError(f"{flag} {','.join(given)}: a {kind} is named twice")
