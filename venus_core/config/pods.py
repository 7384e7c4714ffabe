"""The device-pod record shared by the pool controller and its Kubernetes backend.

Why here, in the bottom layer: `venus_core.daas.pool` (the controller, an algorithm package) reads
these records and `venus_core.io.devicepool` (the edge that talks to the `kubernetes` client)
builds them. The import rule (tests/test_layout.py) lets neither import the other — algorithms
never import io, io imports only config — so config is the one place both can share a single
definition instead of a Protocol in one and a look-alike dataclass in the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DevicePod:
    """One pool pod as the controller sees it (built by a `daas.pool.PodBackend`)."""

    name: str
    kind: str
    ready: bool
    deleting: bool
    failed: bool
    host: str | None
    port: int | None
    created: float  # epoch seconds
    heartbeat: float  # epoch seconds, last stamp by the owning controller
    group: str
    phase: str
    lease: str | None = None
    client: str | None = None
    # device labels (for leasing), not the Kubernetes bookkeeping ones
    labels: dict[str, str] = field(default_factory=dict)
