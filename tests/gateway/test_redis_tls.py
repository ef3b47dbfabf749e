"""The Redis engine over TLS (`engine.redis.tls`): a throwaway redis-server with a TLS port and a
self-signed certificate made here; the gateway verifies it with `ca_cert_pem_file`, and refuses a
server it cannot verify."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import GatewayProcess, free_port, scaled, wait_until_blocking
from tests.support.certs import TestCA

pytestmark = pytest.mark.redis


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    server = shutil.which("redis-server")
    assert server, "redis-server missing: scripts/services.sh installs it"
    cert, key = _self_signed(tmp_path)
    port = free_port()
    argv = [server, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert)]
    argv += ["--tls-auth-clients", "no", "--dir", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield port, cert
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _gateway(tmp_path: Path, port: int, tls: dict[str, object]) -> GatewayProcess:
    config = {
        "engine": {"type": "redis", "redis": {"address": f"redis://127.0.0.1:{port}/0", "tls": tls}},
        "channel": {"without_namespace": {"history_size": 5, "history_ttl": "60s"}},
    }
    return GatewayProcess(config, tmp_path).start()


def _publish(gw: GatewayProcess) -> dict[str, object]:
    reply = httpx.post(
        f"{gw.api_url}/publish",
        json={"channel": "tls", "data": 1},
        headers={"X-API-Key": gw.api_key},
        timeout=5,
    )
    return dict(reply.json())


def test_gateway_talks_to_redis_over_verified_tls(tls_redis: tuple[int, Path], tmp_path: Path) -> None:
    port, cert = tls_redis
    gw = _gateway(tmp_path / "ok", port, {"enabled": True, "ca_cert_pem_file": str(cert)})
    try:
        deadline = time.monotonic() + scaled(10)
        reply = _publish(gw)
        while "result" not in reply and time.monotonic() < deadline:  # the server may still be starting
            time.sleep(0.1)
            reply = _publish(gw)
        assert reply["result"] == {"offset": 1, "epoch": reply["result"]["epoch"]}  # type: ignore[index]
    finally:
        gw.terminate()


def _assert_refused_and_unhealthy(gw: GatewayProcess, reasons: tuple[str, ...]) -> None:
    """Start ``gw`` without waiting for readiness; once it serves HTTP and has logged the TLS
    refusal, its /health answers 503 (it never falls back to an unverified or anonymous link)."""
    gw.launch()
    try:
        wait_until_blocking(
            lambda: "Uvicorn running" in gw.log_text() and any(r in gw.log_text() for r in reasons),
            within=60,
            what=f"the gateway serving HTTP and logging one of {reasons}",
        )
        assert httpx.get(gw.health_url, timeout=scaled(10)).status_code == 503
    finally:
        gw.terminate()


def test_unverifiable_redis_certificate_is_refused(tls_redis: tuple[int, Path], tmp_path: Path) -> None:
    """Without the CA the handshake fails verification: the gateway never reports healthy (its
    /health stays 503) and says why in its log; it never falls back to an unverified link."""
    port, _ = tls_redis
    gw = GatewayProcess(
        {
            "engine": {"type": "redis", "redis": {"address": f"127.0.0.1:{port}", "tls": {"enabled": True}}},
            "channel": {"without_namespace": {"history_size": 5, "history_ttl": "60s"}},
        },
        tmp_path / "bad",
    )
    _assert_refused_and_unhealthy(gw, ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed"))


# Redis mTLS with Centrifugo v6's TLS names (issue 19) --------------------------------------------


@pytest.fixture
def mtls_redis(tmp_path: Path) -> Iterator[tuple[int, TestCA]]:
    """A redis-server that requires a client certificate signed by its CA."""
    server = shutil.which("redis-server")
    assert server, "redis-server missing: scripts/services.sh installs it"
    ca = TestCA(tmp_path / "ca")
    leaf = ca.server("redis")
    port = free_port()
    argv = [server, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += [
        "--tls-cert-file",
        str(leaf.cert),
        "--tls-key-file",
        str(leaf.key),
        "--tls-ca-cert-file",
        str(ca.cert),
    ]
    argv += ["--tls-auth-clients", "yes", "--dir", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield port, ca
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_redis_mtls_with_server_ca_cert_and_key_pem(mtls_redis: tuple[int, TestCA], tmp_path: Path) -> None:
    """``rediss://`` + ``tls.server_ca_pem`` (inline PEM) + ``cert_pem`` (a file path) +
    ``key_pem`` (base64 PEM): the three PEM forms Centrifugo accepts, against a Redis that
    refuses clients without a certificate."""
    port, ca = mtls_redis
    client = ca.client("gateway")
    tls = {
        "enabled": True,
        "server_ca_pem": ca.pem,
        "cert_pem": str(client.cert),
        "key_pem": base64.b64encode(client.key.read_bytes()).decode(),
    }
    config = {
        "engine": {"type": "redis", "redis": {"address": f"rediss://127.0.0.1:{port}/0", "tls": tls}},
        "channel": {"without_namespace": {"history_size": 5, "history_ttl": "60s"}},
    }
    gw = GatewayProcess(config, tmp_path / "ok").start()  # /health 200: the script ran over mTLS
    try:
        reply = _publish(gw)
        assert reply["result"] == {"offset": 1, "epoch": reply["result"]["epoch"]}  # type: ignore[index]
    finally:
        gw.terminate()


def test_redis_mtls_without_a_client_certificate_is_refused(
    mtls_redis: tuple[int, TestCA], tmp_path: Path
) -> None:
    port, ca = mtls_redis
    tls = {"enabled": True, "server_ca_pem": ca.pem}
    gw = GatewayProcess(
        {"engine": {"type": "redis", "redis": {"address": f"rediss://127.0.0.1:{port}", "tls": tls}}},
        tmp_path / "nocert",
    )
    _assert_refused_and_unhealthy(gw, ("CERTIFICATE_REQUIRED", "certificate required"))
