"""run.log: held in memory until the run folder exists, so that a run refused at start-up writes nothing."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

from finbench.core.encodable import ENCODING, ERRORS

log = logging.getLogger("finbench")


class RunLog:
    """run.log: finbench's log and every library warning (the console shows each once). Records
    are held in memory from the start of the run and written once the run folder exists, so a run
    refused at start-up writes nothing."""

    def __init__(self) -> None:
        self.buffer = logging.handlers.MemoryHandler(capacity=10**6, flushLevel=logging.CRITICAL + 1)
        self._attach(self.buffer)
        log.setLevel(logging.INFO)

    @staticmethod
    def _attach(handler: logging.Handler) -> None:
        for logger in (log, logging.getLogger("py.warnings")):
            for old in [h for h in logger.handlers
                        if isinstance(h, (logging.FileHandler, logging.handlers.MemoryHandler))]:
                logger.removeHandler(old)
                old.close()
            logger.addHandler(handler)

    def open(self, path: Path) -> None:
        """Start writing to `path`, with everything logged so far."""
        handler = logging.FileHandler(path, encoding=ENCODING, errors=ERRORS)  # a reply's lone surrogate: escaped
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        self.buffer.setTarget(handler)
        self.buffer.flush()
        self.buffer.setTarget(None)
        self._attach(handler)
