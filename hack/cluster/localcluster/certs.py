"""Self-signed PKI for the local control plane (``cryptography`` package)."""

from __future__ import annotations

import datetime as _dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = _dt.timedelta(days=365)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def generate_pki(d: Path, service_ip: str = "10.96.0.1") -> dict[str, Path]:
    """Write ca, apiserver serving cert, admin client cert and SA keys into ``d``.

    Returns a mapping of logical name -> path. Idempotent: files present are kept.
    """
    d.mkdir(parents=True, exist_ok=True)
    paths = {
        "ca_crt": d / "ca.crt",
        "ca_key": d / "ca.key",
        "apiserver_crt": d / "apiserver.crt",
        "apiserver_key": d / "apiserver.key",
        "admin_crt": d / "admin.crt",
        "admin_key": d / "admin.key",
        "sa_key": d / "sa.key",
        "sa_pub": d / "sa.pub",
    }
    if all(p.exists() for p in paths.values()):
        return paths
    now = _dt.datetime.now(_dt.UTC) - _dt.timedelta(minutes=5)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("phalanx-local-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, org: str | None, server: bool):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes"),
                        x509.DNSName("kubernetes.default"),
                        x509.DNSName("kubernetes.default.svc"),
                        x509.DNSName("kubernetes.default.svc.cluster.local"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address(service_ip)),
                    ]
                ),
                critical=False,
            )
        return key, b.sign(ca_key, hashes.SHA256())

    srv_key, srv = leaf("kube-apiserver", None, server=True)
    adm_key, adm = leaf("phalanx-admin", "system:masters", server=False)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    _write(paths["ca_crt"], _cert_pem(ca))
    _write(paths["ca_key"], _key_pem(ca_key), private=True)
    _write(paths["apiserver_crt"], _cert_pem(srv))
    _write(paths["apiserver_key"], _key_pem(srv_key), private=True)
    _write(paths["admin_crt"], _cert_pem(adm))
    _write(paths["admin_key"], _key_pem(adm_key), private=True)
    _write(paths["sa_key"], _key_pem(sa_key), private=True)
    _write(
        paths["sa_pub"],
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return paths
