"""venus_core.daas: Device-as-a-Service (UI-Venus-1.5) — gateway, lease registry, client SDK.

Modules: `tokens` (HMAC lease tokens), `routing` (device table, group -> shard hash, upstream
pools), `gateway` (the token-checked TCP splice), `metrics` (Prometheus text), `service` (event
loop / thread runners), `probes` (protocol health checks), `registry` (leases, TTL, quarantine),
`lease_http` (registry over HTTP), `tls` (TLS / mTLS contexts, client identity from the
certificate), `forward` (client handshake, local port forwarder), `client`
(DevicePool / Lease / Tunnel), `pool` (PoolController: device pods in Kubernetes kept in step
with the registry; its Kubernetes side is `venus_core.io.devicepool`), `errors` (typed errors
shared by all of them).
"""

from venus_core.daas.client import DevicePool, Lease, Tunnel
from venus_core.daas.errors import (
    DaasError,
    DeviceNotReady,
    DeviceTimeout,
    DeviceUnavailable,
    GatewayBusy,
    GatewayUnavailable,
    IdentityMismatch,
    LeaseError,
    LeaseExpired,
    NoDeviceAvailable,
    PoolError,
    TokenError,
    TokenExpired,
    TokenForged,
    TokenMismatch,
    TokenRevoked,
    UnknownDevice,
    UpstreamClosed,
    WrongShard,
)
from venus_core.daas.gateway import Gateway, GatewayConfig
from venus_core.daas.lease_http import HttpRegistry, LeaseHTTPServer
from venus_core.daas.pool import PodBackend, PoolController, ScaleResult
from venus_core.daas.registry import Grant, LeaseRegistry
from venus_core.daas.routing import DeviceSpec, DeviceTable, load_devices, shard_of
from venus_core.daas.service import GatewayThread, new_event_loop
from venus_core.daas.tls import ClientTLS, ServerTLS
from venus_core.daas.tokens import Claims, TokenSigner

__all__ = [
    "Claims",
    "ClientTLS",
    "DaasError",
    "DevicePool",
    "DeviceNotReady",
    "DeviceSpec",
    "DeviceTable",
    "DeviceTimeout",
    "DeviceUnavailable",
    "Gateway",
    "GatewayBusy",
    "GatewayConfig",
    "GatewayThread",
    "GatewayUnavailable",
    "Grant",
    "HttpRegistry",
    "IdentityMismatch",
    "Lease",
    "LeaseError",
    "LeaseExpired",
    "LeaseHTTPServer",
    "LeaseRegistry",
    "NoDeviceAvailable",
    "PodBackend",
    "PoolController",
    "PoolError",
    "ScaleResult",
    "ServerTLS",
    "TokenError",
    "TokenExpired",
    "TokenForged",
    "TokenMismatch",
    "TokenRevoked",
    "TokenSigner",
    "Tunnel",
    "UnknownDevice",
    "UpstreamClosed",
    "WrongShard",
    "load_devices",
    "new_event_loop",
    "shard_of",
]
