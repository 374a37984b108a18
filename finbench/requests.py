"""Deprecated alias, kept for one release: `finbench.requests` is now `finbench.core.requests`
(the request types a benchmark makes: Choose, Number, Generate, Session). The names below are that
module's own objects; importing this module warns once (DeprecationWarning). Nothing in finbench
imports it."""

import warnings

from finbench.core.requests import (
    DEFAULT_NUMERIC_BUDGET,
    IMAGE_ABLATIONS,
    PROBES,
    Choose,
    Generate,
    Number,
    Prompt,
    Request,
    Session,
    Turn,
    assistant_message,
    image_part,
    is_generated,
    system_message,
    text_part,
    user_message,
)

__all__ = ["DEFAULT_NUMERIC_BUDGET", "IMAGE_ABLATIONS", "PROBES", "Choose", "Generate", "Number", "Prompt", "Request",
           "Session", "Turn", "assistant_message", "image_part", "is_generated", "system_message", "text_part",
           "user_message"]

warnings.warn("finbench.requests is deprecated and goes in the next release: import the request types from "
              "finbench.core.requests", DeprecationWarning, stacklevel=2)
