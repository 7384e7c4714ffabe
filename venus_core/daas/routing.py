"""Devices, the two-level route (device group -> gateway shard -> device upstream), upstream pools.

Why two levels (UI-Venus-1.5's "secondary hash route"): if every client dialled every device it
uses, connections would grow as clients x devices and every device would face many peers. Here a
client only ever talks to the one gateway shard that owns its device's *group* (rendezvous hash of
the group name over the shards), and that shard is the only peer the device sees: each device has
exactly one upstream pool, on one shard, capped at `max_upstream` connections. Total upstream
connections are therefore bounded by devices x max_upstream whatever the number of clients, client
connections equal the sessions actually open, and adding a shard moves only the groups that hash to
it (rendezvous hashing), not all of them.

Departure from the paper: the paper's pool also multiplexes; ADB, CDP and SSH are stateful per TCP
connection, so an upstream connection here serves one client session and is never reused. The pool
bounds and counts connections per device; it does not share them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_core.config.yamlfile import check_expansion, read_small_text, read_yaml_documents

KINDS = ("android", "web", "ssh", "tcp")
"""android = ADB over TCP, web = Chrome DevTools (HTTP, then WebSocket), ssh, tcp = raw bytes."""


@dataclass(frozen=True)
class DeviceSpec:
    id: str
    kind: str
    group: str
    host: str
    port: int
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id or any(c.isspace() for c in self.id):
            raise ValueError(f"device id must be non-empty without spaces, got {self.id!r}")
        if self.kind not in KINDS:
            raise ValueError(f"device {self.id}: kind {self.kind!r} is not one of {KINDS}")
        if not 0 < self.port < 65536:
            raise ValueError(f"device {self.id}: port {self.port} out of range")

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def matches(self, kind: str, labels: dict[str, str] | None) -> bool:
        return self.kind == kind and all(self.labels.get(k) == v for k, v in (labels or {}).items())


def shard_of(group: str, n_shards: int) -> int:
    """Rendezvous (highest-random-weight) hash of a device group over shards 0..n_shards-1."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")

    def weight(i: int) -> int:
        return int.from_bytes(
            hashlib.blake2b(f"{group}\x00{i}".encode(), digest_size=8).digest(), "big"
        )

    return max(range(n_shards), key=weight)


MAX_DEVICE_TABLE_BYTES = 16 << 20
"""Largest device table read (a line per device: ~100 bytes; 16 MiB is ~150,000 devices)."""
TABLE_MAX_VALUES = 2_000_000
"""Most values a device table may expand to (aliases counted at each use)."""


def _text(value: Any, where: str, key: str) -> str:
    """A scalar field as text (YAML reads `id: 7` as an int); a mapping or list is refused."""
    if isinstance(value, dict | list) or value is None:
        raise ValueError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return str(value)


def parse_devices(records: Iterable[Any], source: str) -> list[DeviceSpec]:
    """Device specs from records `{id, kind, group, endpoint: "host:port", labels}`; ValueError
    naming `source`, the device and the field for anything else."""
    out: list[DeviceSpec] = []
    seen: set[str] = set()
    for i, rec in enumerate(records):
        where = f"{source}: device #{i}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(rec).__name__}")  # noqa: TRY004 - bad file content
        unknown = set(rec) - {"id", "kind", "group", "endpoint", "labels"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(map(str, unknown))}")
        for key in ("id", "kind", "endpoint"):
            if key not in rec:
                raise ValueError(f"{where}: missing field {key!r}")
        endpoint = _text(rec["endpoint"], where, "endpoint")
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not (port.isascii() and port.isdigit()) or len(port) > 5:
            raise ValueError(f"{where}: field 'endpoint' must be host:port, got {endpoint[:200]!r}")
        labels = rec.get("labels") or {}
        if not isinstance(labels, dict):
            raise ValueError(f"{where}: field 'labels' must be a mapping, got {type(labels).__name__}")
        fields = {"id": _text(rec["id"], where, "id"), "kind": _text(rec["kind"], where, "kind"),
                  "group": _text(rec.get("group", "default"), where, "group"),
                  "labels": {_text(k, where, "labels"): _text(v, where, f"labels.{k}") for k, v in labels.items()}}
        try:
            spec = DeviceSpec(host=host, port=int(port), **fields)
        except ValueError as exc:  # DeviceSpec's own checks (id, kind, port range)
            raise ValueError(f"{where}: {exc}") from None
        if spec.id in seen:
            raise ValueError(f"{where}: duplicate device id {spec.id!r}")
        seen.add(spec.id)
        out.append(spec)
    return out


def load_devices(path: Path) -> list[DeviceSpec]:
    """Read a device table (YAML or JSON: a list, or a mapping with key `devices`); ValueError naming
    the file (and the device and field) for a table that cannot be used."""
    what = "the device table"
    if path.suffix == ".json":
        text = read_small_text(path, what=what, max_bytes=MAX_DEVICE_TABLE_BYTES)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, an int past 4,300 digits, nesting
            detail = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:300]
            raise ValueError(f"{path}: {what} is not valid JSON: {detail}") from None
        check_expansion(data, str(path), what=what, max_values=TABLE_MAX_VALUES, max_depth=64)
    else:
        docs = read_yaml_documents(path, what=what, max_bytes=MAX_DEVICE_TABLE_BYTES, max_values=TABLE_MAX_VALUES)
        if len(docs) != 1:
            raise ValueError(f"{path}: expected one YAML document, found {len(docs)}")
        data = docs[0]
    if isinstance(data, dict):
        data = data.get("devices")
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of devices (or a mapping with 'devices')")  # noqa: TRY004
    return parse_devices(data, str(path))


class UpstreamPool:
    """The connections one gateway shard holds to one device, capped at `max_conns`."""

    def __init__(self, device: DeviceSpec, max_conns: int) -> None:
        if max_conns < 1:
            raise ValueError(f"max_conns must be >= 1, got {max_conns}")
        self.device = device
        self.max_conns = max_conns
        self.active = 0
        self.opened_total = 0

    def try_acquire(self) -> bool:
        if self.active >= self.max_conns:
            return False
        self.active += 1
        self.opened_total += 1
        return True

    def release(self) -> None:
        if self.active <= 0:
            raise RuntimeError(f"pool of {self.device.id}: release without acquire")
        self.active -= 1


class DeviceTable:
    """The devices a shard routes to, with one `UpstreamPool` each for the devices it owns."""

    def __init__(
        self,
        devices: Sequence[DeviceSpec],
        *,
        shard: int = 0,
        n_shards: int = 1,
        max_upstream: int = 8,
    ) -> None:
        if not 0 <= shard < n_shards:
            raise ValueError(f"shard index {shard} not in [0, {n_shards})")
        self.shard = shard
        self.n_shards = n_shards
        self._max_upstream = max_upstream
        self.devices = {d.id: d for d in devices}
        if len(self.devices) != len(devices):
            raise ValueError("duplicate device ids in device table")
        self.pools = {
            d.id: UpstreamPool(d, max_upstream)
            for d in devices
            if shard_of(d.group, n_shards) == shard
        }

    def owns(self, device_id: str) -> bool:
        return device_id in self.pools

    def add(self, device: DeviceSpec) -> bool:
        """Route to a device that appeared (a pool pod became ready); True if this shard owns it.

        Single dict assignments, so a gateway's event loop can read the table while another
        thread (the device pool controller) changes it."""
        if device.id in self.devices:
            raise ValueError(f"device {device.id!r} is already in the table")
        if shard_of(device.group, self.n_shards) == self.shard:
            self.pools[device.id] = UpstreamPool(device, self._max_upstream)
        self.devices[device.id] = device
        return device.id in self.pools

    def remove(self, device_id: str) -> None:
        """Stop routing to a device (its pod is gone); open sessions keep their own pool object."""
        self.devices.pop(device_id, None)
        self.pools.pop(device_id, None)
