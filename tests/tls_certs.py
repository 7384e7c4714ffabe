"""A throw-away certificate authority for the TLS tests (the `cryptography` package, no openssl CLI).

`make_pki(dir)` writes a CA, a server certificate for 127.0.0.1 / localhost (plus any extra DNS
names), client certificates whose subject common names are the given client ids, and a second,
unrelated CA with one client certificate of its own (a forger's). EC P-256 keys: fast to make.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class PKI:
    ca: Path
    server: Pair
    clients: dict[str, Pair]
    rogue_ca: Path
    rogue_client: Pair  # CN "worker-1", signed by rogue_ca


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pair:
    crt, pem = path.with_suffix(".crt"), path.with_suffix(".key")
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return Pair(crt, pem)


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(cn: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, server: bool,
          dns: tuple[str, ...] = ()) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                               else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                         x509.DNSName("localhost"), *map(x509.DNSName, dns)]
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


def make_pki(root: Path, clients: tuple[str, ...] = ("worker-1", "worker-2"),
             server_dns: tuple[str, ...] = ()) -> PKI:
    root.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("venus test CA")
    (root / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server = _write(root / "server", *_leaf("device-gateway", ca, ca_key, server=True, dns=server_dns))
    pairs = {c: _write(root / c, *_leaf(c, ca, ca_key, server=False)) for c in clients}
    rogue, rogue_key = _ca("someone else's CA")
    (root / "rogue-ca.crt").write_bytes(rogue.public_bytes(serialization.Encoding.PEM))
    forged = _write(root / "rogue-worker-1", *_leaf("worker-1", rogue, rogue_key, server=False))
    return PKI(root / "ca.crt", server, pairs, root / "rogue-ca.crt", forged)
