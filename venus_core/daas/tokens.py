"""HMAC-signed lease tokens: what a client shows the gateway to reach one device.

Why stateless tokens: the gateway must admit thousands of connections without asking the lease
registry each time. The registry signs `{lease, device, client, group, exp}` with a secret it
shares with the gateway shards; a shard checks the signature, the expiry, and that the token names
the device and client of the connection. Format: `base64url(json claims) "." base64url(HMAC-SHA256)`
(a JWT-like layout without the header, since there is exactly one algorithm). The signature is
compared in constant time. Tokens are short-lived (the lease TTL); heartbeats return fresh ones.

Departure from the paper: UI-Venus-1.5 does not describe its token scheme; this is our own.
The client id is a claim the client repeats on its handshake; in a cluster it should come from an
mTLS certificate instead, which the gateway does not terminate here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import time
from dataclasses import asdict, dataclass

from venus_core.daas.errors import TokenExpired, TokenForged, TokenMismatch

MIN_SECRET_BYTES = 16


@dataclass(frozen=True)
class Claims:
    lease: str
    device: str
    client: str
    group: str
    exp: float  # unix time after which the token no longer admits connections


def _claims(body: bytes) -> Claims:
    """The claims of a signed body, checked for shape: signed but not ours is still refused.

    Ids must be strings and `exp` a finite number (a NaN expiry would compare as never expired).
    """
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):  # not JSON / not UTF-8, a 4,300+ digit number, deep nesting
        raise TokenForged("bad token claims: not JSON") from None
    if not isinstance(raw, dict):
        raise TokenForged(f"bad token claims: a JSON {type(raw).__name__}, not an object")
    missing = [k for k in ("lease", "device", "client", "group", "exp") if k not in raw]
    if missing:
        raise TokenForged(f"bad token claims: missing {', '.join(missing)}")
    ids = {k: raw[k] for k in ("lease", "device", "client", "group")}
    wrong = sorted(k for k, v in ids.items() if not isinstance(v, str))
    if wrong:
        raise TokenForged(f"bad token claims: {', '.join(wrong)} not a string")
    exp = raw["exp"]
    try:
        finite = not isinstance(exp, bool) and isinstance(exp, (int, float)) and math.isfinite(float(exp))
    except OverflowError:
        finite = False
    if not finite:
        raise TokenForged(f"bad token claims: exp {str(exp)[:40]!r} is not a finite number")
    return Claims(exp=float(exp), **ids)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    """Sign and verify lease tokens with one shared secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(
                f"token secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}"
            )
        self._secret = secret

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._secret, body, hashlib.sha256).digest()

    def sign(self, claims: Claims) -> str:
        body = json.dumps(asdict(claims), separators=(",", ":"), sort_keys=True).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def verify(
        self,
        token: str,
        *,
        device: str | None = None,
        client: str | None = None,
        now: float | None = None,
    ) -> Claims:
        """The claims of `token`; raises TokenForged / TokenExpired / TokenMismatch."""
        try:
            body_s, mac_s = token.split(".")
            body, mac = _unb64(body_s), _unb64(mac_s)
        except (ValueError, binascii.Error) as exc:
            raise TokenForged("malformed token") from exc
        if not hmac.compare_digest(mac, self._mac(body)):
            raise TokenForged("bad token signature")
        claims = _claims(body)
        if (time.time() if now is None else now) >= claims.exp:
            raise TokenExpired(f"token of lease {claims.lease} expired")
        if device is not None and claims.device != device:
            raise TokenMismatch(
                f"token of lease {claims.lease} is for device {claims.device!r}, not {device!r}"
            )
        if client is not None and claims.client != client:
            raise TokenMismatch(
                f"token of lease {claims.lease} is for client {claims.client!r}, not {client!r}"
            )
        return claims
