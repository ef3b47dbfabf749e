"""TLS material from Centrifugo's ``TLSConfig`` options (``http_server.tls``, ``engine.redis.tls``,
``grpc_api.tls``): each ``*_pem`` value is the PEM text itself, its base64, or the path of a PEM
file (Centrifugo's ``PEMData`` order). This module resolves those values, checks them, and hands
them to the libraries in the form each needs: file paths (uvicorn, redis-py) or bytes (grpcio).

Inline PEM is written once to a private temporary file (mode 0600 in a 0700 directory, removed
at exit) because ``ssl.SSLContext.load_cert_chain`` and the libraries above only take paths.
Imports nothing from the gateway but ``schema``.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import hashlib
import os
import shutil
import ssl
import tempfile
from pathlib import Path
from typing import Any

from gateway.config.schema import ConfigError
from gateway.config.sections.tls import TlsSettings

_BEGIN = b"-----BEGIN "
_private_dir: Path | None = None


def load_pem(value: str, option: str) -> bytes:
    """The PEM bytes of an option value (raw PEM, base64 of PEM, or a PEM file path).

    Raises:
        ConfigError: none of the three, an unreadable file, or a file without PEM data.
    """
    raw = value.strip().encode()
    if _BEGIN in raw:
        return raw + b"\n"
    try:
        decoded = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if _BEGIN in decoded:
        return decoded
    path = Path(value).expanduser()
    if not _is_file(path):
        raise ConfigError(option, "is neither PEM data, base64-encoded PEM, nor the path of a PEM file")
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ConfigError(option, f"cannot read {value}: {exc.strerror or exc}") from exc
    if _BEGIN not in content:
        raise ConfigError(option, f"file {value!r} contains no PEM data")
    return content


def pem_path(value: str, option: str) -> str:
    """A file path holding the option's PEM: the path itself when the value is one, else a
    private temporary copy (same content ⇒ same file)."""
    data = load_pem(value, option)
    path = Path(value).expanduser()
    if _BEGIN not in value.encode() and _is_file(path) and path.read_bytes() == data:
        return str(path)
    directory = _private_directory()
    target = directory / (hashlib.sha256(data).hexdigest()[:32] + ".pem")
    if not target.exists():
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return str(target)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a long base64 value is no file name
        return False


def _private_directory() -> Path:
    global _private_dir  # one directory per process, removed at exit
    if _private_dir is None:
        _private_dir = Path(tempfile.mkdtemp(prefix="taskcast-tls-"))
        atexit.register(shutil.rmtree, _private_dir, True)
    return _private_dir


def check_listener(tls: TlsSettings, section: str) -> None:
    """A listener's TLS (``http_server.tls``, ``grpc_api.tls``) must name a certificate and its
    key, both loadable and matching; ``client_ca_pem`` (mTLS) must hold certificates.

    Raises:
        ConfigError: naming the first bad option.
    """
    if not tls.enabled:
        return
    for option in ("cert_pem", "key_pem"):
        if not getattr(tls, option):
            raise ConfigError(f"{section}.{option}", f"must be set when {section}.enabled is true")
    server_context(tls, section)


def check_client(tls: TlsSettings, section: str) -> None:
    """A client's TLS (``engine.redis.tls``): a client certificate needs its key and the other
    way round; every PEM given must load.

    Raises:
        ConfigError: naming the first bad option.
    """
    if not tls.enabled:
        return
    if bool(tls.cert_pem) != bool(tls.key_pem):
        missing = "key_pem" if tls.cert_pem else "cert_pem"
        raise ConfigError(f"{section}.{missing}", "must be set together with cert_pem/key_pem (mTLS)")
    client_ssl_kwargs(tls, section)


def server_context(tls: TlsSettings, section: str) -> ssl.SSLContext:
    """An ``SSLContext`` serving ``cert_pem``/``key_pem``; with ``client_ca_pem`` client
    certificates signed by it are required.

    Raises:
        ConfigError: a PEM that does not load, or a key that does not match the certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert = pem_path(tls.cert_pem, f"{section}.cert_pem")
    key = pem_path(tls.key_pem, f"{section}.key_pem")
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise ConfigError(f"{section}.cert_pem", f"certificate and key do not load together: {exc}") from None
    if tls.client_ca_pem:
        _load_ca(context, tls.client_ca_pem, f"{section}.client_ca_pem")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def uvicorn_ssl_kwargs(tls: TlsSettings, section: str) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for a TLS listener (empty when TLS is off)."""
    if not tls.enabled:
        return {}
    kwargs: dict[str, Any] = {
        "ssl_certfile": pem_path(tls.cert_pem, f"{section}.cert_pem"),
        "ssl_keyfile": pem_path(tls.key_pem, f"{section}.key_pem"),
    }
    if tls.client_ca_pem:
        kwargs["ssl_ca_certs"] = pem_path(tls.client_ca_pem, f"{section}.client_ca_pem")
        kwargs["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return kwargs


def client_ssl_kwargs(tls: TlsSettings, section: str, ca_file: str = "") -> dict[str, Any]:
    """redis-py connection keyword arguments: verification (``server_ca_pem`` or ``ca_file``,
    else the system store; ``insecure_skip_verify`` turns it off), the client certificate for
    mTLS, and ``server_name`` as the name to check.

    Raises:
        ConfigError: a PEM that does not load.
    """
    kwargs: dict[str, Any] = {
        "ssl_cert_reqs": ssl.CERT_NONE if tls.insecure_skip_verify else ssl.CERT_REQUIRED,
        "ssl_check_hostname": not tls.insecure_skip_verify,
    }
    if tls.server_ca_pem:
        _load_ca(ssl.create_default_context(), tls.server_ca_pem, f"{section}.server_ca_pem")
        kwargs["ssl_ca_certs"] = pem_path(tls.server_ca_pem, f"{section}.server_ca_pem")
    elif ca_file:
        kwargs["ssl_ca_certs"] = ca_file
    if tls.cert_pem and tls.key_pem:
        cert = pem_path(tls.cert_pem, f"{section}.cert_pem")
        key = pem_path(tls.key_pem, f"{section}.key_pem")
        try:
            ssl.create_default_context().load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{section}.cert_pem", f"certificate and key do not load together: {exc}"
            ) from None
        kwargs["ssl_certfile"] = cert
        kwargs["ssl_keyfile"] = key
    return kwargs


def _load_ca(context: ssl.SSLContext, value: str, option: str) -> None:
    try:
        context.load_verify_locations(cadata=load_pem(value, option).decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise ConfigError(option, f"holds no usable CA certificate: {exc}") from None
