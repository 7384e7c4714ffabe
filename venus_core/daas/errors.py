"""Typed errors of the device service, shared by the gateway, the lease registry and the SDK.

Why one module: the gateway refuses a connection with a short machine-readable code on its
handshake line (`ERR <code> <message>`), and the SDK turns that code back into the same exception
class the gateway would have raised in process, so callers catch one hierarchy whatever the
transport (in-process registry, HTTP registry, gateway socket).
"""

from __future__ import annotations


class DaasError(Exception):
    """Base class of every device-service error."""

    code = "error"


class TokenError(DaasError):
    """A lease token was rejected (base class)."""

    code = "token"


class TokenForged(TokenError):
    """The token is malformed or its signature does not match."""

    code = "token_forged"


class TokenExpired(TokenError):
    """The token's expiry has passed."""

    code = "token_expired"


class TokenMismatch(TokenError):
    """The token is valid but bound to another device or another client."""

    code = "token_mismatch"


class TokenRevoked(TokenError):
    """The token is well signed and unexpired, but its lease has ended (a replayed token)."""

    code = "token_revoked"


class IdentityMismatch(DaasError):
    """The client id a request names is not the identity of its TLS client certificate."""

    code = "identity_mismatch"


class UnknownDevice(DaasError):
    """No device of that id is known to the gateway or the registry."""

    code = "unknown_device"


class WrongShard(DaasError):
    """The device's group hashes to another gateway shard."""

    code = "wrong_shard"


class GatewayBusy(DaasError):
    """The device's upstream pool on this shard is full."""

    code = "busy"


class DeviceUnavailable(DaasError):
    """The device's endpoint refused or did not accept a connection."""

    code = "upstream_unreachable"


class DeviceTimeout(DaasError):
    """The device (or the gateway) did not answer within the timeout."""

    code = "timeout"


class UpstreamClosed(DaasError):
    """The tunnel ended unexpectedly: the device or the gateway went away mid-stream."""

    code = "upstream_closed"


class GatewayUnavailable(DaasError):
    """The gateway could not be reached or broke the handshake."""

    code = "gateway_unavailable"


class LeaseError(DaasError):
    """A lease operation failed: unknown/expired lease, or not enough devices."""

    code = "lease"


class LeaseExpired(LeaseError):
    """The lease is no longer held (released, expired, or its device was quarantined)."""

    code = "lease_expired"


class NoDeviceAvailable(LeaseError):
    """Not enough healthy free devices match the request within the wait time."""

    code = "no_device"


class PoolError(DaasError):
    """The device pool could not create, find or delete the pods behind its devices."""

    code = "pool"


class DeviceNotReady(PoolError):
    """Device pods did not become ready within the timeout (they are deleted, not leaked)."""

    code = "not_ready"


_BY_CODE: dict[str, type[DaasError]] = {
    c.code: c
    for c in (
        DaasError,
        TokenError,
        TokenForged,
        TokenExpired,
        TokenMismatch,
        TokenRevoked,
        IdentityMismatch,
        UnknownDevice,
        WrongShard,
        GatewayBusy,
        DeviceUnavailable,
        DeviceTimeout,
        UpstreamClosed,
        GatewayUnavailable,
        LeaseError,
        LeaseExpired,
        NoDeviceAvailable,
        PoolError,
        DeviceNotReady,
    )
}


def error_for(code: str, message: str) -> DaasError:
    """The exception for a wire `code` (unknown codes give a plain `DaasError`)."""
    return _BY_CODE.get(code, DaasError)(message)
