"""The install a new user gets: the README's commands and CI install under constraints.txt, which
pins every dependency pyproject.toml names to a release its bounds admit (so a fresh machine gets
what the suite last passed with, whatever was released since)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from test_docs import TEST_COMMAND

tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))
    return {canonicalize_name(name): version for name, version in pins.items()}


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *(r for group in ("test", "quant", "serve", "track") for r in extras[group])]
    requirements = [Requirement(r) for r in wanted if not r.startswith("finbench")]
    # what this interpreter installs (tomli only below Python 3.11): what constraints.txt, made here, pins
    return [r for r in requirements if r.marker is None or r.marker.evaluate()]


def test_ci_runs_the_readmes_test_command():
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text()


def test_every_dependency_is_pinned_inside_pyprojects_bounds():
    pins = _pins()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name], requirement)


def test_the_libraries_whose_minors_changed_behaviour_are_bounded_both_ways():
    """transformers 5.25 changed what torch's FLOP counter meets; torch, torchao and bitsandbytes
    minors changed quantization kernels: each has a lower and an upper bound."""
    bounded = {canonicalize_name(r.name): r.specifier for r in _requirements()}
    for name in ("transformers", "torch", "torchvision", "torchao", "bitsandbytes"):
        operators = {spec.operator for spec in bounded[name]}
        assert ">=" in operators and "<" in operators, (name, bounded[name])

