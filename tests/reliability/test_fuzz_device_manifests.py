"""Fuzz the two device manifests an operator edits: the device-pool manifest (`venus devices up
--manifest`, `io/devicepool.load_templates`: the StatefulSets whose pod templates make the pool's
pods) and the gateway's device table (`venus gateway --devices`, `daas/routing.load_devices`).

Inputs: the shipped files with structural edits (values replaced by hostile JSON values, keys and
items deleted, values wrapped, unknown keys added; on the whole file and on the pod template or
device list alone), their YAML text with textual edits, hostile YAML (alias bombs, cycles, deep
nesting, 5,000-digit integers, tags), arbitrary text and bytes (not UTF-8). Documented error:
ValueError whose message names the file. An accepted manifest yields a template per device kind
whose pod carries string labels and a port number; an accepted table, devices with unique ids,
ports in range and string labels.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzz_helpers import (BUDGETS, DEEP_JSON, HUGE_INT_TEXT, Budget, fuzz, mutated, mutated_text,
                          yaml_alias_bomb)
from hypothesis import strategies as st

from venus_core.daas.routing import KINDS, load_devices
from venus_core.io.devicepool import DEFAULT_MANIFEST, TEMPLATES, load_templates

POOL_TEXT = DEFAULT_MANIFEST.read_text(encoding="utf-8")
POOL_DOCS = [d for d in yaml.safe_load_all(POOL_TEXT) if d]
TABLE = {"devices": [
    {"id": "android-emulator-0", "kind": "android", "group": "android-emulator-0",
     "endpoint": "android-emulator-0.android-emulator.venus.svc.cluster.local:5555", "labels": {"lang": "en"}},
    {"id": "browser-0", "kind": "web", "group": "browser-0", "endpoint": "10.244.1.7:9223"},
    {"id": "ssh-0", "kind": "ssh", "endpoint": "[::1]:22"},
]}
TABLE_TEXT = yaml.safe_dump(TABLE, sort_keys=False)

YAML_HOSTILE = st.sampled_from([
    "&a [*a]\n", "a: &a {b: *a}\n", "[" * 5000, "- " * 3000 + "x\n", f"port: {HUGE_INT_TEXT}\n",
    "!!python/object/apply:os.system ['true']\n", "%YAML 1.1\n---\n", "--- 1\n--- 2\n", "\x00", "\ufeff",
    "devices: !!binary AAAA\n", f"devices: [{DEEP_JSON}\n", "kind: StatefulSet\n", "- 1\n- 2\n",
])


def _bomb(levels: int, fanout: int, key: str) -> str:
    return yaml_alias_bomb(levels, fanout, key + ": {alias}")


def _dump_all(docs: Any) -> str:
    try:
        if isinstance(docs, list):
            return yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True)
        return yaml.safe_dump(docs, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, ValueError, TypeError):
        return POOL_TEXT


@st.composite
def _template_edited(draw: st.DrawFn) -> str:
    """One StatefulSet's pod template edited, the rest of the file as shipped."""
    docs = copy.deepcopy(POOL_DOCS)
    sts = [d for d in docs if d.get("kind") == "StatefulSet"]
    target = sts[draw(st.integers(0, len(sts) - 1))]
    target["spec"]["template"] = draw(mutated(target["spec"]["template"], 4))
    return _dump_all(docs)


@st.composite
def _devices_edited(draw: st.DrawFn) -> str:
    devices = draw(mutated(TABLE["devices"], 4))
    return _dump_all({"devices": devices} if draw(st.booleans()) else devices)


def _texts(text: str, data: Any, edited: st.SearchStrategy[str], key: str) -> st.SearchStrategy[str | bytes]:
    return st.one_of(
        st.just(text), edited, edited,
        mutated(data, 4).map(_dump_all),
        mutated_text(text, 6),
        st.builds(lambda at, tok: text[:at] + tok + text[at:], st.integers(0, len(text)), YAML_HOSTILE),
        st.builds(_bomb, st.integers(2, 9), st.integers(2, 9), st.just(key)),
        YAML_HOSTILE, st.text(max_size=200), st.binary(max_size=200),
        st.builds(lambda t, at: t.encode()[:at] + b"\xff\xfe" + t.encode()[at:], st.just(text),
                  st.integers(0, len(text))),
    )


POOL_TEXTS = _texts(POOL_TEXT, POOL_DOCS, _template_edited(), "spec")
TABLE_TEXTS = _texts(TABLE_TEXT, TABLE, _devices_edited(), "devices")


def _write(d: str, name: str, content: str | bytes) -> Path:
    path = Path(d) / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_bytes(content)
    return path


def check_pool_manifest(content: str | bytes) -> str:
    with tempfile.TemporaryDirectory(prefix="venus-fuzz-pool-") as d:
        path = _write(d, "device-pool.yaml", content)
        try:
            templates = load_templates(path)
        except ValueError as exc:
            assert str(path) in str(exc), f"error does not name the file: {exc}"
            return "ValueError"
    assert set(templates) == set(TEMPLATES)
    for kind, tpl in templates.items():
        assert type(tpl.port) is int and 0 < tpl.port < 65536
        pod = tpl.pod("venus-x", "venus", {"venus.dev/pool": "default"}, {"venus.dev/created-at": "1"})
        labels = pod["metadata"]["labels"]
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()), labels
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in pod["metadata"]["annotations"].items())
        if "app.kubernetes.io/name" in labels:
            assert labels["app.kubernetes.io/name"].endswith("-pool"), (kind, labels)
        assert isinstance(pod["spec"], dict)
    return "accepted"


def check_device_table(args: tuple[str | bytes, str]) -> str:
    content, suffix = args
    with tempfile.TemporaryDirectory(prefix="venus-fuzz-table-") as d:
        if suffix == ".json" and isinstance(content, str):
            try:  # a JSON table: the same data as JSON text (or the text as is when it is not data)
                content = json.dumps(yaml.safe_load(content))
            except (yaml.YAMLError, ValueError, TypeError, RecursionError):
                pass
        path = _write(d, "devices" + suffix, content)
        try:
            devices = load_devices(path)
        except ValueError as exc:
            assert str(path) in str(exc), f"error does not name the file: {exc}"
            return "ValueError"
    assert len({dev.id for dev in devices}) == len(devices)
    for dev in devices:
        assert dev.kind in KINDS and 0 < dev.port < 65536 and dev.host and dev.id
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in dev.labels.items())
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_device_pool_manifest(budget: Budget) -> None:
    tally = fuzz("device-pool manifest", POOL_TEXTS, check_pool_manifest, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["ValueError"] > 0


@pytest.mark.parametrize("budget", BUDGETS)
def test_gateway_device_table(budget: Budget) -> None:
    tally = fuzz("gateway device table", st.tuples(TABLE_TEXTS, st.sampled_from([".yaml", ".json"])),
                 check_device_table, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["ValueError"] > 0


def _bomb_text(key: str) -> str:
    return _bomb(9, 9, key)  # 9^8 = 43 million values from ~300 bytes


FOUND = [  # (loader, file name, content): what crashed or was accepted before the bounds, each refused now
    ("pool", "pool.yaml", "a: [\n"),  # yaml.ParserError escaped
    ("pool", "pool.yaml", b"\xff\xfe"),  # UnicodeDecodeError, the file not named
    ("pool", "pool.yaml", "- 1\n"),  # AttributeError: a document that is a list
    ("pool", "pool.yaml", "[" * 5000),  # RecursionError
    ("pool", "pool.yaml", POOL_TEXT.replace("containerPort: 5555", "containerPort: abc")),  # int(): file not named
    ("pool", "pool.yaml", POOL_TEXT.replace("containerPort: 5555", "containerPort: 0")),  # accepted
    ("pool", "pool.yaml", POOL_TEXT.replace("containerPort: 5555", "containerPort: " + HUGE_INT_TEXT)),
    # accepted: a label value that is not a string (the API server refuses the pod at every scale-up)
    ("pool", "pool.yaml", POOL_TEXT.replace("app.kubernetes.io/name: android-emulator,", "app.kubernetes.io/name: 7,")),
    ("pool", "pool.yaml", _bomb_text("spec")),
    ("table", "devices.yaml", "a: [\n"),  # yaml.ParserError escaped
    ("table", "devices.yaml", b"\xff"),  # UnicodeDecodeError, the file not named
    ("table", "devices.yaml", "- {id: a, kind: web, endpoint: 'h:1', labels: [1]}\n"),  # AttributeError
    ("table", "devices.yaml", "- {id: a, kind: web, endpoint: ':1'}\n"),  # accepted: no host
    ("table", "devices.yaml", "- {id: a, kind: web, endpoint: 'h:1', labels: {x: {y: 1}}}\n"),  # accepted: "{'y': 1}"
    ("table", "devices.yaml", "[" * 5000),  # RecursionError
    ("table", "devices.json", "[" * 5000),  # RecursionError
    ("table", "devices.json", "{"),  # JSONDecodeError, the file not named
    ("table", "devices.yaml", _bomb_text("devices")),
]


@pytest.mark.parametrize("loader,name,content", FOUND, ids=[f"{i}-{c[0]}" for i, c in enumerate(FOUND)])
def test_each_input_found_is_refused_naming_the_file(tmp_path: Path, loader: str, name: str,
                                                     content: str | bytes) -> None:
    path = _write(str(tmp_path), name, content)
    with pytest.raises(ValueError, match=r"^" + str(path).replace(".", r"\.")):
        (load_templates if loader == "pool" else load_devices)(path)


def test_the_shipped_files_load(tmp_path: Path) -> None:
    assert set(load_templates()) == {"android", "web"}
    assert check_device_table((TABLE_TEXT, ".yaml")) == check_device_table((TABLE_TEXT, ".json")) == "accepted"
