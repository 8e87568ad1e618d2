"""SGLang's log format, so tools that scrape a real server's log also work on the simulator.

SGLang configures ``[%(asctime)s] %(message)s`` with datefmt ``%Y-%m-%d %H:%M:%S`` (no level
name) on stderr; the launcher captures stdout and stderr into one file.
"""

from __future__ import annotations

import logging
import sys

LOG_FORMAT = "[%(asctime)s] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LOGGER_NAME = "pytest_llmperf.sim"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


class _FlushingHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """Flush every record: the launcher tails the log file while we run."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        self.flush()


def configure_logging(level: str = "info") -> logging.Logger:
    """SGLang-formatted lines on stderr for our logger and the root logger (aiohttp's errors)."""
    handler = _FlushingHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
    root = logging.getLogger()
    root.handlers.clear()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    logger.setLevel(_LEVELS.get(level.lower(), logging.INFO))
    logger.propagate = True
    return logger


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)
