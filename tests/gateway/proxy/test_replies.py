"""The pure pieces of the proxies: reading answers, the config rules, no drift in the
generated protobuf code."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError
from gateway.protocol import codes
from gateway.protocol.policy import Override, ServerSub
from gateway.proxy.http import normalise
from gateway.proxy.replies import (
    ConnectGrant,
    MapWriteGrant,
    ProxyFailure,
    connect_grant,
    map_publish_grant,
    map_remove_grant,
    parse_reply,
    publish_grant,
    refresh_grant,
    subscribe_grant,
)

ROOT = Path(__file__).resolve().parents[3]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


@pytest.mark.parametrize(
    ("answer", "error", "disconnect"),
    [
        ({"error": {"code": 1000, "message": "m", "temporary": True}}, codes.Error(1000, "m", True), None),
        ({"disconnect": {"code": 4501, "reason": "r"}}, None, codes.Disconnect(4501, "r")),
        # disconnect is checked first, as Centrifugo does
        (
            {"error": {"code": 1}, "disconnect": {"code": 4000, "reason": ""}},
            None,
            codes.Disconnect(4000, ""),
        ),
        ({}, None, None),
    ],
)
def test_parse_reply_outcomes(answer: dict[str, Any], error: Any, disconnect: Any) -> None:
    reply = parse_reply(answer)
    assert (reply.error, reply.disconnect) == (error, disconnect)


@pytest.mark.parametrize(
    "answer",
    [[], "x", {"result": []}, {"error": {"code": "x"}}, {"disconnect": {"code": 1, "reason": 5}}],
)
def test_malformed_answers(answer: object) -> None:
    with pytest.raises(ProxyFailure) as exc:
        parse_reply(answer)
    assert exc.value.reason == "malformed"


def test_connect_grant_reads_every_field() -> None:
    result = normalise(
        {
            "result": {
                "user": "u",
                "expire_at": 100,
                "b64info": _b64(b'{"b":1}'),
                "info": {"ignored": True},
                "data": {"d": 1},
                "channels": ["a"],
                "subs": {
                    "b": {
                        "info": {"i": 1},
                        "b64data": _b64(b"xyz"),
                        "override": {"presence": {"value": True}},
                    }
                },
                "meta": {"m": 1},
            }
        }
    )
    grant = connect_grant(parse_reply(result).result)
    assert grant == ConnectGrant(
        user="u",
        expire_at=100,
        info=b'{"b":1}',
        data=b'{"d":1}',
        subs={"a": ServerSub(), "b": ServerSub(b'{"i":1}', b"xyz", Override(presence=True))},
        meta=b'{"m":1}',
    )
    assert connect_grant(None) == ConnectGrant(user="")


def test_other_grants() -> None:
    assert refresh_grant(None).expired and refresh_grant({"expired": True}).expired
    assert refresh_grant({"expire_at": "7"}).expire_at == 7  # protobuf JSON writes int64 as a string
    assert subscribe_grant({"expire_at": 0}).expire_at is None
    assert publish_grant({"b64data": _b64(b"\x00"), "skip_history": True}) == publish_grant(
        {"data": b"\x00", "skip_history": True}
    )
    with pytest.raises(ProxyFailure):
        subscribe_grant({"b64info": "***"})


def test_map_write_grants() -> None:
    """Centrifugo's map publish / remove proxy results: a non-empty key and the data replace the
    client's; the write options pass through; an unknown key_mode or bad values are malformed."""
    assert map_publish_grant(None, "k") == MapWriteGrant("k")
    full = {
        "key": "other",
        "b64data": _b64(b'{"a":1}'),
        "tags": {"t": "v"},
        "key_mode": "if_new",
        "idempotency_key": "i1",
        "delta": True,
        "version": "9",
        "version_epoch": "e",
        "score": 5,
    }
    assert map_publish_grant(full, "k") == MapWriteGrant(
        "other", b'{"a":1}', {"t": "v"}, "if_new", "i1", True, 9, "e"
    )
    assert map_publish_grant({"key": "", "data": b"1"}, "k") == MapWriteGrant("k", b"1")
    for bad in ({"key_mode": "sometimes"}, {"tags": {"t": 1}}, {"version": -1}, {"b64data": "***"}):
        with pytest.raises(ProxyFailure):
            map_publish_grant(bad, "k")
    assert map_remove_grant({"key": "x", "idempotency_key": "i"}, "k") == MapWriteGrant(
        "x", idempotency_key="i"
    )
    assert map_remove_grant({}, "k") == MapWriteGrant("k")


def _load(tmp_path: Path, config: dict[str, Any]) -> Any:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    return load_settings(str(path), {})


def test_config_rules(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"channel.namespaces\[nn\].subscribe_proxy_name"):
        _load(
            tmp_path,
            {
                "channel": {
                    "namespaces": [
                        {"name": "nn", "subscribe_proxy_enabled": True, "subscribe_proxy_name": "x"}
                    ]
                }
            },
        )
    with pytest.raises(ConfigError, match=r"channel.proxy.subscribe.endpoint"):
        _load(tmp_path, {"channel": {"namespaces": [{"name": "nn", "subscribe_proxy_enabled": True}]}})
    with pytest.raises(ConfigError, match=r"client.proxy.connect.endpoint"):
        _load(tmp_path, {"client": {"proxy": {"connect": {"enabled": True, "endpoint": "ftp://x"}}}})
    with pytest.raises(ConfigError, match="duplicate"):
        _load(
            tmp_path,
            {"proxies": [{"name": "a", "endpoint": "http://x"}, {"name": "a", "endpoint": "http://y"}]},
        )
    settings, warnings = _load(
        tmp_path,
        {
            "proxies": [{"name": "g", "endpoint": "grpc://127.0.0.1:1", "grpc": {"credentials_value": "s3"}}],
            "rpc": {"namespaces": [{"name": "r", "proxy_enabled": True, "proxy_name": "g"}]},
        },
    )
    assert warnings == []
    assert settings.rpc.options("r:m").proxy_name == "g" and settings.rpc.options("zz:m") is None
    assert "s3" not in json.dumps(settings.redacted())


def test_proxies_from_environment() -> None:
    env = {"CENTRIFUGO_PROXIES": json.dumps([{"name": "p", "endpoint": "http://h/x", "timeout": "3s"}])}
    settings, _ = load_settings(None, env)
    assert settings.proxies[0].name == "p" and settings.proxies[0].timeout == 3.0


def test_generated_code_has_no_drift(tmp_path: Path) -> None:
    """The committed *_pb2 files are what protoc makes of proxy.proto today."""
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out}", f"--pyi_out={out}",
         f"--grpc_python_out={out}", str(ROOT / "gateway/proxy/proxy.proto")],
        check=True,
        cwd=ROOT,
    )  # fmt: skip
    for name in ("proxy_pb2.py", "proxy_pb2.pyi", "proxy_pb2_grpc.py"):
        generated = (out / "gateway" / "proxy" / name).read_text()
        assert generated == (ROOT / "gateway" / "proxy" / name).read_text(), name


def test_subscribe_stream_proxy_rules(tmp_path: Path) -> None:
    """Centrifugo's rules: a gRPC endpoint, and no other channel proxy in the namespace."""
    ns = {"name": "nn", "subscribe_stream_proxy_enabled": True}
    stream = {"endpoint": "grpc://127.0.0.1:1"}
    with pytest.raises(ConfigError, match=r"channel.proxy.subscribe_stream.endpoint"):
        _load(tmp_path, {"channel": {"namespaces": [ns]}})
    with pytest.raises(ConfigError, match="must be a grpc:// endpoint"):
        _load(
            tmp_path,
            {"channel": {"proxy": {"subscribe_stream": {"endpoint": "http://x/s"}}, "namespaces": [ns]}},
        )
    with pytest.raises(ConfigError, match="together with subscribe"):
        _load(
            tmp_path,
            {
                "channel": {
                    "proxy": {"subscribe_stream": stream, "publish": {"endpoint": "http://x/p"}},
                    "namespaces": [{**ns, "publish_proxy_enabled": True}],
                }
            },
        )
    settings, warnings = _load(
        tmp_path,
        {
            "channel": {
                "proxy": {"subscribe_stream": stream},
                "namespaces": [{**ns, "subscribe_stream_proxy_bidirectional": True}],
            }
        },
    )
    assert warnings == []
    assert settings.channel.by_name["nn"].subscribe_stream_proxy_bidirectional


def test_status_transforms_and_tls_options(tmp_path: Path) -> None:
    """``http.status_to_code_transforms`` (a list without names), v6 TLS names, static metadata."""
    proxy = {
        "endpoint": "https://127.0.0.1:1/c",
        "http": {
            "status_to_code_transforms": [
                {"status_code": 401, "to_disconnect": {"code": 4501, "reason": "unauthorized"}},
                {"status_code": 429, "to_error": {"code": 111, "message": "slow down", "temporary": True}},
            ],
            "tls": {"enabled": True, "insecure_skip_verify": True, "server_name": "backend"},
        },
        "grpc": {"static_metadata": {"x-env": "prod"}},
    }
    settings, warnings = _load(tmp_path, {"client": {"proxy": {"connect": {"enabled": True, **proxy}}}})
    assert warnings == []
    connect = settings.client.proxy.connect
    first, second = connect.http.status_to_code_transforms
    assert (first.status_code, first.to_disconnect.code, first.to_disconnect.reason) == (
        401,
        4501,
        "unauthorized",
    )
    assert (second.to_error.code, second.to_error.message, second.to_error.temporary) == (
        111,
        "slow down",
        True,
    )
    assert connect.http.tls.server_name == "backend" and dict(connect.grpc.static_metadata) == {
        "x-env": "prod"
    }
    assert "prod" not in json.dumps(settings.redacted())
    bad = {"status_code": 401, "to_error": {"code": 100}, "to_disconnect": {"code": 4501}}
    with pytest.raises(ConfigError, match=r"status_to_code_transforms\[0\]"):
        _load(
            tmp_path,
            {
                "proxies": [
                    {"name": "p", "endpoint": "http://x", "http": {"status_to_code_transforms": [bad]}}
                ]
            },
        )
    with pytest.raises(ConfigError, match=r"status_to_code_transforms\[0\].status_code"):
        _load(
            tmp_path,
            {"proxies": [{"name": "p", "endpoint": "http://x", "http": {"status_to_code_transforms": [{}]}}]},
        )
    with pytest.raises(ConfigError, match=r"client.proxy.connect.http.tls.server_ca_pem"):
        tls = {"enabled": True, "server_ca_pem": "/no/such/ca.pem"}
        _load(
            tmp_path,
            {
                "client": {
                    "proxy": {"connect": {"enabled": True, "endpoint": "https://x", "http": {"tls": tls}}}
                }
            },
        )


def test_emulated_headers_are_options_of_every_proxy(tmp_path: Path) -> None:
    settings, warnings = _load(
        tmp_path,
        {
            "proxies": [{"name": "p", "endpoint": "http://x", "emulated_headers": ["Authorization"]}],
            "rpc": {"proxy": {"endpoint": "http://x", "emulated_headers": ["X-A"]}},
        },
    )
    assert warnings == []
    assert settings.proxies[0].emulated_headers == ("Authorization",)
    assert settings.rpc.proxy.emulated_headers == ("X-A",)


def test_static_header_also_forwarded_warns(tmp_path: Path) -> None:
    """A forwarded header wins over a static one (Centrifugo): a static secret under a forwarded
    name could be replaced by the client, so startup says so."""
    proxy = {
        "enabled": True,
        "endpoint": "http://x/c",
        "http_headers": ["Cookie", "X-Secret"],
        "http": {"static_headers": {"x-secret": "s3cr3t", "X-Env": "prod"}},
    }
    _, warnings = _load(tmp_path, {"client": {"proxy": {"connect": proxy}}})
    assert len(warnings) == 1
    assert (
        "client.proxy.connect.http.static_headers: 'x-secret'" in warnings[0] and "s3cr3t" not in warnings[0]
    )
