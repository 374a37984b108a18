"""What reaches the console besides finbench's own lines: library warnings once each (all of them
in run.log, runner/startup.py `RunLog`), the quantization libraries' chatter only in run.log, and
no progress bar at all with --no-progress. Set up once per command, before any model loads."""

from __future__ import annotations

import os
import sys

from finbench.models.library_logs import hub_into_run_log, keep_in_run_log, loguru_into_run_log


def configure_output(progress: bool, verbose: bool) -> None:
    """Quiet by default: library warnings go to run.log and are shown once each, the quantization
    libraries' (QUIET_LOGGERS, QUIET_WARNING_SOURCES) only in run.log; --no-progress turns off
    every progress bar (ours too; transformers' and huggingface_hub's are always off). Nothing heavy
is imported here."""
    import logging
    import warnings

    # transformers' and huggingface_hub's own bars ("Loading weights" on every load) are off even
    # with progress: finbench's bar is the one a run shows. Set in the environment, which they read
    # when imported, so that a command checks its options before torch or transformers is imported;
    # and directly where they are imported already (the Python API, tests).
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"
    if not verbose:
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        if not verbose:
            transformers.utils.logging.set_verbosity_error()
    logging.captureWarnings(True)
    logging.raiseExceptions = False  # a log line that cannot be written (disk full) is no traceback on the console
    shown = logging.StreamHandler()
    shown.setFormatter(logging.Formatter("warning: %(message)s"))
    if not verbose:
        seen: set[str] = set()

        def once(record: logging.LogRecord) -> bool:
            text = record.getMessage().strip().splitlines()[-1] if record.getMessage().strip() else ""
            new = text not in seen
            seen.add(text)
            return new

        shown.addFilter(once)
        warnings.simplefilter("always")  # every occurrence reaches run.log; the console filter keeps one
    logging.getLogger("py.warnings").addHandler(shown)
    if not verbose:
        shown.addFilter(_not_library_chatter)
        keep_in_run_log(QUIET_LOGGERS)  # their lines go to run.log (through finbench's log), not the console
        loguru_into_run_log()  # compressed-tensors logs through loguru
        hub_into_run_log()  # the hub's retries of a model that is not there


# Libraries that warn on every call (bitsandbytes: "MatMul8bitLt: inputs will be cast …" once per
# layer per batch, ~130 lines a run) or log through their own stderr handlers (torch's pytree
# deprecations when torchao loads, bitsandbytes' missing optional kernels). Kept in run.log only.
QUIET_WARNING_SOURCES = ("/bitsandbytes/", "/torchao/", "/compressed_tensors/")
QUIET_LOGGERS = ("bitsandbytes", "torchao", "torch.utils._pytree", "compressed_tensors")


def _not_library_chatter(record) -> bool:
    text = record.getMessage()
    return not any(source in text for source in QUIET_WARNING_SOURCES) and "MatMul8bitLt" not in text
