"""TLS for the device service: gateway and lease registry as TLS servers, the SDK as their client,
and the client's identity taken from its certificate (mTLS) instead of from what it says.

Why: on a shared pod network, lease tokens in the clear can be read off the wire and replayed by
anyone until they expire, and without certificates a client id is a name anyone can type. With
`ServerTLS(client_ca=...)` a client must present a certificate signed by that CA; its identity is
the certificate's subject common name (`peer_identity`). The registry then leases, heartbeats and
releases only for that client id, and the gateway admits a token only on a connection whose
certificate names the token's client, so a token copied to another machine is useless there.
Without `client_ca` the connection is encrypted and the server authenticated, but the client id
stays self-asserted (what loopback tests and a laptop use).

Files, not bytes: in a cluster they are a mounted Secret. TLS 1.2 at least, the ssl module's
default ciphers; the client checks the server's name (host of the gateway / registry address)
against the certificate's subjectAltName. Half-closes are not forwarded over TLS (asyncio's TLS
transports cannot write EOF): a client's EOF ends the session.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Client-side credentials come from the environment (docs/architecture.md, rule 4: endpoints and
# credentials only): file paths of the CA bundle, and of the client certificate and key for mTLS.
CA_ENV, CERT_ENV, KEY_ENV = "VENUS_DAAS_CA", "VENUS_DAAS_CERT", "VENUS_DAAS_KEY"


def _check_files(where: str, **paths: Path | None) -> None:
    for name, path in paths.items():
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{where}: {name} file {path} does not exist")


@dataclass(frozen=True)
class ServerTLS:
    """A TLS server's certificate chain and key; `client_ca` set = client certificates required."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def context(self) -> ssl.SSLContext:
        _check_files("server TLS", cert=self.cert, key=self.key, client_ca=self.client_ca)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert, self.key)
        if self.client_ca is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cafile=str(self.client_ca))
        return ctx


@dataclass(frozen=True)
class ClientTLS:
    """The CA that signed the servers' certificates, and this client's own certificate for mTLS."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("client TLS: give both cert and key, or neither")

    def context(self) -> ssl.SSLContext:
        _check_files("client TLS", ca=self.ca, cert=self.cert, key=self.key)
        ctx = ssl.create_default_context(cafile=str(self.ca))  # CERT_REQUIRED, hostname checked
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert is not None:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def identity(self) -> str | None:
        """The subject common name of this client's certificate (what servers will see)."""
        if self.cert is None:
            return None
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        cert = x509.load_pem_x509_certificate(Path(self.cert).read_bytes())
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ClientTLS | None:
        """From $VENUS_DAAS_CA (and $VENUS_DAAS_CERT + $VENUS_DAAS_KEY for mTLS); None if unset."""
        env = os.environ if environ is None else environ
        ca = env.get(CA_ENV)
        if not ca:
            if env.get(CERT_ENV) or env.get(KEY_ENV):
                raise ValueError(f"${CERT_ENV} / ${KEY_ENV} are set but ${CA_ENV} is not")
            return None
        cert, key = env.get(CERT_ENV), env.get(KEY_ENV)
        return cls(Path(ca), Path(cert) if cert else None, Path(key) if key else None)


def peer_identity(cert: dict[str, Any] | None) -> str | None:
    """The subject commonName of a verified peer certificate (`getpeercert()` form), if any."""
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
