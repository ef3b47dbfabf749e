"""``log.level`` and ``log.file`` (issue 13, defect 10): every Centrifugo level loads (the
official SDKs' test configs use ``trace``), ``gateway.logging_setup`` maps them onto Python's
levels and honours ``log.file``; a real gateway process started with them serves and logs to
the file."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, LogSettings
from gateway.logging_setup import TRACE, configure_logging, uvicorn_log_level
from tests.support import GatewayProcess

LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "none"]


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("level", [*LEVELS, "TRACE", "Warn"])
def test_every_centrifugo_level_loads(level: str) -> None:
    s, warnings = load_settings(None, {"CENTRIFUGO_LOG_LEVEL": level})
    assert warnings == []
    assert s.log.level == level.lower()


def test_unknown_level_and_missing_log_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as bad_level:
        load_settings(None, {"CENTRIFUGO_LOG_LEVEL": "verbose"})
    with pytest.raises(ConfigError) as bad_file:
        load_settings(None, {"CENTRIFUGO_LOG_FILE": str(tmp_path / "missing" / "gw.log")})
    assert bad_level.value.option == "log.level" and "trace" in bad_level.value.problem
    assert bad_file.value.option == "log.file" and "does not exist" in bad_file.value.problem


def test_levels_map_onto_python_levels(restore_root_logging: None) -> None:
    out = io.StringIO()
    log = logging.getLogger("taskcast.test.levels")
    seen = {}
    for level in LEVELS:
        configure_logging(LogSettings(level=level), stream=out)
        seen[level] = [log.isEnabledFor(n) for n in (TRACE, logging.DEBUG, logging.WARNING, logging.CRITICAL)]
    assert seen == {
        "trace": [True, True, True, True],
        "debug": [False, True, True, True],
        "info": [False, False, True, True],
        "warn": [False, False, True, True],
        "error": [False, False, False, True],
        "fatal": [False, False, False, True],
        "none": [False, False, False, False],
    }
    assert uvicorn_log_level("trace") == 5 == TRACE  # uvicorn's own TRACE level


def test_none_silences_loggers_that_set_their_own_level(restore_root_logging: None) -> None:
    out = io.StringIO()
    configure_logging(LogSettings(level="none"), stream=out)
    chatty = logging.getLogger("taskcast.test.chatty")
    chatty.setLevel(logging.DEBUG)
    try:
        chatty.critical("must not appear")
    finally:
        chatty.setLevel(logging.NOTSET)
    assert out.getvalue() == ""


def test_log_file_receives_the_log(tmp_path: Path, restore_root_logging: None) -> None:
    path = tmp_path / "gateway.log"
    configure_logging(LogSettings(level="trace", file=str(path)))
    logging.getLogger("taskcast.test.file").log(TRACE, "a trace line")
    logging.getLogger().handlers[0].flush()
    assert "TRACE taskcast.test.file: a trace line" in path.read_text()


def test_unwritable_log_file_is_a_config_error(tmp_path: Path, restore_root_logging: None) -> None:
    with pytest.raises(ConfigError) as info:
        configure_logging(LogSettings(file=str(tmp_path)))  # a directory
    assert info.value.option == "log.file"


def test_gateway_process_with_trace_level_serves_and_logs_to_the_file(tmp_path: Path) -> None:
    log_file = tmp_path / "gw-file.log"
    gw = GatewayProcess({"log": {"level": "trace", "file": str(log_file)}}, tmp_path).start()
    try:
        assert gw.health_ok()
    finally:
        gw.terminate()
    text = log_file.read_text()
    assert " INFO " in text or " DEBUG " in text, text[:2000]
    assert json.loads(gw.config_path.read_text())["log"]["level"] == "trace"
