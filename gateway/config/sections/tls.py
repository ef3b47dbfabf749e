"""Centrifugo's ``TLSConfig`` as a frozen value: of a listener (``http_server.tls``,
``grpc_api.tls``) and of a client connection (a proxy's, Redis's). gateway/config/tls.py
resolves and checks its PEMs."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TlsSettings"]


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Centrifugo's ``TLSConfig``. Each ``*_pem`` option holds the PEM text itself, its base64, or
    the path of a PEM file (resolved by ``gateway.config.tls``). ``client_ca_pem`` on a listener makes
    client certificates required; on a client connection ``cert_pem``/``key_pem`` are the client
    certificate (mTLS) and ``server_ca_pem`` verifies the server."""

    enabled: bool = False
    cert_pem: str = ""
    key_pem: str = ""
    server_ca_pem: str = ""
    client_ca_pem: str = ""
    insecure_skip_verify: bool = False
    server_name: str = ""
