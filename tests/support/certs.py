"""A throwaway certificate authority for TLS tests: a self-signed CA and leaf certificates it
signs (server certificates for 127.0.0.1/localhost, client certificates for mTLS), written as PEM
files under a test's directory."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class Issued:
    """PEM files of one certificate and its private key."""

    cert: Path
    key: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class TestCA:
    """``TestCA(dir)`` makes ``dir/ca.pem``; ``server()`` / ``client()`` issue leaves signed by it."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "Taskcast test CA") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / "ca.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    @property
    def pem(self) -> str:
        return self.cert.read_text()

    def server(self, name: str = "server") -> Issued:
        """A server certificate for 127.0.0.1, ::1 and localhost."""
        san = x509.SubjectAlternativeName(
            [
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1")),
                x509.DNSName("localhost"),
            ]
        )
        return self._issue(name, san, ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, name: str = "client") -> Issued:
        """A client certificate (mTLS)."""
        return self._issue(name, None, ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self, name: str, san: x509.SubjectAlternativeName | None, usage: x509.ObjectIdentifier
    ) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(x509.ExtendedKeyUsage([usage]), False)
        )
        if san is not None:
            builder = builder.add_extension(san, False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(self.directory / f"{name}.pem", self.directory / f"{name}-key.pem")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(_key_pem(key))
        return issued
