"""Quantization libraries' chatter (torchao's deprecation lines, compressed-tensors' loguru) kept in
run.log through finbench's log, never on the console; the libraries' progress bars off while a model loads."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Sequence


@contextlib.contextmanager
def quiet_library_import() -> Iterator[None]:
    """torchao's import logs deprecation lines through torch's own stderr handler; keep them in
    finbench's log (run.log) instead of on the console."""
    chatty = logging.getLogger("torch.utils._pytree")
    saved, handlers = chatty.propagate, list(chatty.handlers)
    keep_in_run_log(["torch.utils._pytree"])
    try:
        yield
    finally:
        chatty.handlers[:] = handlers
        chatty.propagate = saved


@contextlib.contextmanager
def no_library_bars() -> Iterator[None]:
    """transformers' "Loading weights" bar and the hub's bars off while a model loads — for every
    caller, the Python API included, which never sets up the command line's output — and left as
    the caller had them afterwards."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    transformers_bar, hub_bars = hf_logging.is_progress_bar_enabled(), not are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    disable_progress_bars()
    try:
        yield
    finally:
        if transformers_bar:
            hf_logging.enable_progress_bar()
        if hub_bars:
            enable_progress_bars()


class IntoRunLog(logging.Handler):
    """Hands a library logger's records to finbench's log, whose handlers write run.log. Records
    that arrive before a run has opened its log (a sweep loads its model first) wait, and go with
    the next one that finds it open."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger("finbench")
        if not target.handlers:
            self.pending = [*self.pending[-199:], record]
            return
        for waiting in [*self.pending, record]:
            target.handle(waiting)
        self.pending = []


def keep_in_run_log(names: Sequence[str]) -> None:
    """Each named logger's records go to run.log only, never through a console handler of its own
    or of a parent (torch's stderr handler)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(h, IntoRunLog) for h in logger.handlers):
            logger.addHandler(IntoRunLog())
        logger.propagate = False


def loguru_into_run_log() -> None:
    """compressed-tensors logs through loguru, whose default sink is stderr: send its records to
    run.log instead (loguru is only installed with compressed-tensors; nothing to do without it)."""
    import importlib.util

    if importlib.util.find_spec("loguru") is None:
        return
    from loguru import logger

    with contextlib.suppress(ValueError):  # the default sink was removed already
        logger.remove(0)
        logger.add(lambda message: logging.getLogger("finbench.library").log(
            message.record["level"].no, message.record["message"]), level="INFO", format="{message}")


def hub_into_run_log() -> None:
    """huggingface_hub logs through a stderr handler of its own (its import adds it): a model that
    is not there offline printed ten "Retrying in 1s" lines before the one error line. Its records
    go to run.log instead."""
    import importlib.util

    if importlib.util.find_spec("huggingface_hub") is None:
        return
    import huggingface_hub.utils.logging  # noqa: F401  (light: the package imports lazily)

    hub = logging.getLogger("huggingface_hub")
    for handler in [h for h in hub.handlers if type(h) is logging.StreamHandler]:
        hub.removeHandler(handler)
    keep_in_run_log(["huggingface_hub"])
