"""A configuration holding every option of Centrifugo v6.9 loads: each option is either supported
or warned as unsupported with what to do instead, none is "unknown", ``checkconfig --strict``
accepts the file, and every unsupported option has a row in docs/migrating-from-centrifugo.md.

``centrifugo_v6_9_options.json`` lists every option path of Centrifugo v6.9.1's ``config.Config``
(read from its Go sources: internal/config/config.go and internal/configtypes), each with its
kind and Centrifugo's default.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.config.doc import MIGRATION_PATH
from gateway.config.loading import load_settings
from gateway.config.unsupported import UNSUPPORTED, UNSUPPORTED_CHANNEL_OPTIONS, env_name
from taskcast import centrifugo_cli

OPTIONS_FILE = Path(__file__).with_name("centrifugo_v6_9_options.json")
OPTIONS: dict[str, list[Any]] = {
    path: spec for path, spec in json.loads(OPTIONS_FILE.read_text()).items() if not path.startswith("_")
}

VALUES: dict[str, object] = {
    # What a valid Centrifugo config needs beyond the defaults (Centrifugo refuses these empty too).
    "consumers[].type": "postgresql",  # internal/config/validate.go: a known type, enabled or not
    "proxies[].endpoint": "http://127.0.0.1:9/proxy",
    "proxies[].http.status_to_code_transforms[].status_code": 404,
    "proxies[].http.status_to_code_transforms[].to_error.code": 1000,
    "proxies[].http.status_to_code_transforms[].to_error.message": "not found",
}
"""Option path -> the value the all-options file gives it (default: Centrifugo's default)."""


def _value(path: str, kind: str, default: str | None) -> object:
    if path in VALUES:
        return VALUES[path]
    if path.endswith("[].name"):
        return "opt"
    if kind == "bool":
        return default == "true"
    if kind == "int":
        return int(default or 0)
    if kind == "duration":
        return default or "0s"
    if kind == "string":
        return default or ""
    if kind == "map of strings":
        return {}
    assert kind in ("list of strings", "list of objects"), kind
    return []


def every_option_tree() -> dict[str, Any]:
    """A config tree with every v6.9 option; each list of objects holds one entry with all of
    its options."""
    tree: dict[str, Any] = {}
    for path, (kind, default) in OPTIONS.items():
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            if part.endswith("[]"):
                entries = node.setdefault(part[:-2], [])
                if not entries:
                    entries.append({})
                node = entries[0]
            else:
                node = node.setdefault(part, {})
        if kind == "list of objects" and leaf in node:
            continue
        node[leaf] = _value(path, kind, default)
    return tree


@pytest.fixture
def every_option_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(every_option_tree()))
    return path


def test_the_list_is_centrifugo_v6_9s() -> None:
    """A sample of what v6.9 added or named, so a truncated list cannot pass."""
    for path in (
        "shared_poll.hmac_secret_key",
        "prometheus.native_histograms",
        "prometheus.recovered_publications_histogram",
        "http_server.h2c_external",
        "websocket.decompressed_message_size_limit",
        "uni_websocket.decompressed_message_size_limit",
        "uni_websocket.disable_closing_handshake",
        "channel.namespaces[].map_clients_presence_channel_prefix",
        "channel.namespaces[].map_users_presence_channel_prefix",
        "proxies[].emulated_headers",
        "init.handler_prefix",
        "consumers[].name",
    ):
        assert path in OPTIONS, path
    assert len(OPTIONS) > 1100


def test_every_v6_9_option_is_supported_or_warned_unsupported(every_option_file: Path) -> None:
    _, warnings = load_settings(str(every_option_file), {})
    assert [w for w in warnings if not w.startswith("unsupported option ")] == []


def test_checkconfig_strict_accepts_every_v6_9_option(
    every_option_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert centrifugo_cli.main("checkconfig", ["--strict", "-c", str(every_option_file)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "unknown" not in err


def test_checkconfig_strict_still_refuses_a_misspelt_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"prometheus": {"native_histogram": True}}))
    assert centrifugo_cli.main("checkconfig", ["--strict", "-c", str(path)]) == 1
    assert capsys.readouterr().out == "unknown keys in config: prometheus.native_histogram\n"


def _env_value(kind: str, default: str | None) -> str:
    if kind == "list of strings":
        return ""
    if kind == "map of strings":
        return "{}"
    if kind == "list of objects":
        return "[]"
    value = _value("", kind, default)
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_no_v6_9_environment_variable_is_unknown() -> None:
    env = {
        env_name(path): _env_value(kind, default)
        for path, (kind, default) in OPTIONS.items()
        if "[]" not in path
    }
    _, warnings = load_settings(None, env)
    assert [w for w in warnings if "unknown" in w] == []


def _unsupported_paths(warnings: list[str]) -> set[str]:
    found = set()
    for warning in warnings:
        path = warning.split('"')[1]
        path = re.sub(r"\[[^\]]*\]", "[]", path)
        found.add(path)
    return found


def test_every_unsupported_option_has_a_row_in_the_migration_guide() -> None:
    text = MIGRATION_PATH.read_text(encoding="utf-8")
    missing = [path for path in UNSUPPORTED if f"`{path}`" not in text]
    missing += [name for name in UNSUPPORTED_CHANNEL_OPTIONS if f"`{name}`" not in text]
    assert missing == []


def test_the_named_v6_9_options_warn_with_advice(every_option_file: Path) -> None:
    _, warnings = load_settings(str(every_option_file), {})
    warned = _unsupported_paths(warnings)
    for path in (
        "prometheus.native_histograms",
        "prometheus.recovered_publications_histogram",
        "http_server.h2c_external",
    ):
        assert path in warned, path


def test_external_http2_extended_connect_is_named_though_v6_9_only_comments_it(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"http_server": {"external_http2_extended_connect": True}}))
    _, warnings = load_settings(str(path), {})
    assert len(warnings) == 1
    assert warnings[0].startswith('unsupported option "http_server.external_http2_extended_connect" (')
