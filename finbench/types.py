"""Deprecated alias, kept for one release: `finbench.types` is now `finbench.core.types` (the
vocabulary: Question, Prediction, ModelRequest, the question kinds) and `finbench.config.specs`
(RunConfig and its specs). The names below are those modules' own objects; importing this module
warns once (DeprecationWarning). Nothing in finbench imports it."""

import warnings

from finbench.config.specs import SPEC_OF, SPECS, BatchSpec, DecodeSpec, JudgeSpec, LoadSpec, OutputSpec, RunConfig
from finbench.core.types import (
    AUTO,
    DEFAULT_BENCHMARK,
    DEFAULT_PROTOCOL,
    DTYPE_NAMES,
    KINDS,
    MULTI,
    NUMERICAL,
    OPEN,
    OPTION_LETTERS,
    PROTOCOLS,
    QUANT_CHOICES,
    RESULTS_FILE,
    SINGLE,
    ModelRequest,
    Prediction,
    Question,
    option_letters,
)

__all__ = ["AUTO", "DEFAULT_BENCHMARK", "DEFAULT_PROTOCOL", "DTYPE_NAMES", "KINDS", "MULTI", "NUMERICAL", "OPEN",
           "OPTION_LETTERS", "PROTOCOLS", "QUANT_CHOICES", "RESULTS_FILE", "SINGLE", "SPECS", "SPEC_OF", "BatchSpec",
           "DecodeSpec", "JudgeSpec", "LoadSpec", "ModelRequest", "OutputSpec", "Prediction", "Question", "RunConfig",
           "option_letters"]

warnings.warn("finbench.types is deprecated and goes in the next release: import Question, Prediction, ModelRequest "
              "and the constants from finbench.core.types, RunConfig and its specs from finbench.config.specs",
              DeprecationWarning, stacklevel=2)
