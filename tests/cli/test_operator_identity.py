"""Who forced a request: the CLI names its TLS client certificate's subject, or says it can't."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.connection import TemporalOptions
from cli.output import CliError


def client_certificate(tmp_path: Path, common_name: str) -> Path:
    """A self-signed client certificate, as an operator's mTLS identity would be."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "platform"),
        ]
    )
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "client.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = tmp_path / "client.key"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def test_a_tls_client_certificate_names_the_requester(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert = client_certificate(tmp_path, "alice")
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(cert))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(tmp_path / "client.key"))
    assert TemporalOptions().principal() == "mTLS O=platform,CN=alice"


def test_without_a_client_certificate_the_requester_is_not_authenticated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA"):
        monkeypatch.delenv(var, raising=False)
    # An API key authenticates the connection, but its principal is the server's to know.
    monkeypatch.setenv("TEMPORAL_API_KEY", "secret")
    assert TemporalOptions().principal() is None


def test_an_unreadable_client_certificate_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(bad))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(bad))
    with pytest.raises(CliError, match="cannot read the TLS client certificate"):
        TemporalOptions().principal()
