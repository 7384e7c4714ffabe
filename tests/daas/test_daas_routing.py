"""Group -> shard hashing, device table parsing, per-shard ownership and upstream pool caps."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from venus_core.daas import DeviceSpec, DeviceTable, load_devices, shard_of
from venus_core.daas.routing import UpstreamPool


def test_shard_of_is_stable_spread_and_moves_little_on_resize() -> None:
    groups = [f"group-{i}" for i in range(2000)]
    four = [shard_of(g, 4) for g in groups]
    assert four == [shard_of(g, 4) for g in groups]
    counts = Counter(four)
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 400
    five = [shard_of(g, 5) for g in groups]
    moved = [(a, b) for a, b in zip(four, five, strict=True) if a != b]
    assert all(b == 4 for _, b in moved)  # only groups that now hash to the new shard move
    assert 0.12 < len(moved) / len(groups) < 0.28  # about 1/5 of them
    with pytest.raises(ValueError):
        shard_of("g", 0)


def test_table_owns_only_its_shard() -> None:
    devs = [DeviceSpec(f"d{i}", "tcp", f"g{i % 7}", "127.0.0.1", 5555) for i in range(40)]
    tables = [DeviceTable(devs, shard=s, n_shards=3) for s in range(3)]
    owned = [set(t.pools) for t in tables]
    assert set().union(*owned) == {d.id for d in devs}
    assert sum(len(o) for o in owned) == len(devs)
    for d in devs:  # every device of one group lives on the same shard
        assert tables[shard_of(d.group, 3)].owns(d.id)


def test_pool_caps_connections() -> None:
    pool = UpstreamPool(DeviceSpec("d", "tcp", "g", "h", 1), max_conns=2)
    assert pool.try_acquire() and pool.try_acquire() and not pool.try_acquire()
    pool.release()
    assert pool.try_acquire() and pool.opened_total == 3
    pool.release(), pool.release()
    with pytest.raises(RuntimeError):
        pool.release()


def test_load_devices(tmp_path: Path) -> None:
    p = tmp_path / "devices.yaml"
    p.write_text(
        "devices:\n- {id: phone-1, kind: android, group: g1, endpoint: '10.0.0.5:5555',"
        " labels: {lang: en}}\n- {id: web-1, kind: web, endpoint: 'localhost:9222'}\n"
    )
    a, b = load_devices(p)
    assert (a.host, a.port, a.labels, b.group) == ("10.0.0.5", 5555, {"lang": "en"}, "default")
    assert a.matches("android", {"lang": "en"}) and not a.matches("android", {"lang": "zh"})


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("- {id: a, kind: android}\n", "device #0: missing field 'endpoint'"),
        ("- {id: a, kind: tablet, endpoint: 'h:1'}\n", "kind 'tablet'"),
        ("- {id: a, kind: tcp, endpoint: 'h'}\n", "host:port"),
        ("- {id: a, kind: tcp, endpoint: 'h:1', colour: red}\n", "unknown field"),
        (
            "- {id: a, kind: tcp, endpoint: 'h:1'}\n- {id: a, kind: tcp, endpoint: 'h:2'}\n",
            "device #1: duplicate",
        ),
        ("{id: a}\n", "expected a list"),
    ],
)
def test_load_devices_errors(tmp_path: Path, yaml_text: str, message: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml_text)
    with pytest.raises(ValueError, match=message) as err:
        load_devices(p)
    assert "bad.yaml" in str(err.value)
