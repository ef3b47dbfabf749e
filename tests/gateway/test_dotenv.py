"""The ``.env`` file (gateway/config/dotenv.py): godotenv's format, the environment wins over the
file, and ``taskcast gateway`` reads it from its working directory as Centrifugo v6 does."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from gateway.config.dotenv import parse_dotenv, read_dotenv
from gateway.config.schema import ConfigError
from tests.support import free_port
from tests.support.procs import ServiceProcess

DOC = """# a comment
export CENTRIFUGO_A=1
B = two words # trailing comment
C="line\\nnext ${CENTRIFUGO_A}"
D='raw ${CENTRIFUGO_A} \\n'
E=
F: $CENTRIFUGO_A-$HOME
G="spans
two lines"
H=\\$CENTRIFUGO_A
I=a#b
"""


def test_godotenv_format() -> None:
    assert parse_dotenv(DOC, {"HOME": "/home/u"}) == {
        "CENTRIFUGO_A": "1",
        "B": "two words",
        "C": "line\nnext 1",
        "D": "raw ${CENTRIFUGO_A} \\n",
        "E": "",
        "F": "1-/home/u",
        "G": "spans\ntwo lines",
        "H": "$CENTRIFUGO_A",
        "I": "a#b",
    }


@pytest.mark.parametrize(("text", "problem"), [("NOVALUE\n", "line 1"), ('A=1\nB="open\n', "line 2")])
def test_a_malformed_file_is_a_coded_error_naming_the_line(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_dotenv(text, {})
    assert info.value.option == ".env" and problem in info.value.problem


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CENTRIFUGO_NODE_NAME=file\nCENTRIFUGO_LOG_LEVEL=debug\n")
    merged = read_dotenv({"CENTRIFUGO_NODE_NAME": "env"}, tmp_path)
    assert merged == {"CENTRIFUGO_NODE_NAME": "env", "CENTRIFUGO_LOG_LEVEL": "debug"}
    assert read_dotenv({}, tmp_path / "missing") is None


def test_the_gateway_reads_dotenv_from_its_working_directory(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"http_server": {"address": "127.0.0.1", "port": port}}))
    (tmp_path / ".env").write_text(
        "CENTRIFUGO_HEALTH_ENABLED=true\nCENTRIFUGO_HTTP_API_KEY=from-dotenv\nCENTRIFUGO_NODE_NAME=file\n"
    )
    gw = ServiceProcess(
        "gateway-dotenv", ["gateway", "--config", str(config)], tmp_path,
        f"http://127.0.0.1:{port}/health", env={"CENTRIFUGO_NODE_NAME": "from-env"}, cwd=tmp_path,
    )  # fmt: skip
    gw.start()
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/info", data=b"{}", headers={"X-API-Key": "from-dotenv"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            nodes = json.loads(answer.read())["result"]["nodes"]
        assert [node["name"] for node in nodes] == ["from-env"]
        assert "environment variables have been loaded from .env file" in gw.log_text()
    finally:
        gw.terminate()
