"""The gateway process's logging, from ``log.level`` and ``log.file`` (Centrifugo's options).

Centrifugo's levels map onto Python's: ``trace`` is level 5 (uvicorn's TRACE too), ``warn`` is
WARNING, ``fatal`` is CRITICAL and ``none`` silences everything. One handler on the root logger
(stderr, or ``log.file`` opened for appending) serves every logger, uvicorn's included when its
server is built with ``log_config=None``. Called once by the CLI; imports nothing from the rest
of the gateway but the settings types.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from gateway.config.schema import ConfigError, LogSettings

TRACE = 5
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = {
    "trace": TRACE,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
    "none": logging.CRITICAL + 10,
}


def level_number(level: str) -> int:
    """The Python level of a Centrifugo ``log.level`` (validated settings: always known)."""
    return LEVELS[level]


def uvicorn_log_level(level: str) -> int:
    """What to pass as ``uvicorn.Config(log_level=...)`` for a Centrifugo ``log.level``."""
    return level_number(level)


def configure_logging(log: LogSettings, *, stream: TextIO | None = None) -> logging.Handler:
    """Install the process's one log handler on the root logger, replacing any there.

    Args:
        log: ``log.level`` and ``log.file`` (validated by ``gateway.config.loading.load_settings``).
        stream: Where to write without ``log.file`` (default stderr).

    Returns:
        The installed handler (tests remove it again).

    Raises:
        ConfigError: ``log.file`` cannot be opened for appending.
    """
    logging.addLevelName(TRACE, "TRACE")
    handler: logging.Handler
    if log.file:
        try:
            handler = logging.FileHandler(log.file, mode="a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError("log.file", f"cannot open {log.file!r}: {exc.strerror or exc}") from exc
    else:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    level = level_number(log.level)
    # On the handler too: loggers with a level of their own (uvicorn's) still obey log.level.
    handler.setLevel(level)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    # httpx logs every request at INFO: one line per proxy call / JWKS fetch is noise (and the
    # URL may be sensitive); its warnings still show.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))
    return handler
