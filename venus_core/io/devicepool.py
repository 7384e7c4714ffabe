"""Device pods on Kubernetes: the `PodBackend` of `venus_core.daas.pool`, over the official client.

Why here: the controller logic is an algorithm (`venus_core.daas.pool`) and must not import the
`kubernetes` client; this module is the edge that does, and it imports nothing from the algorithm
packages (the controller duck-types `KubePodBackend`; the pod record both read, `DevicePod`,
lives in `venus_core.config.pods`, the one layer both may import).

Pods are built from the pod templates of the StatefulSets in `manifests/base/device-pool.yaml`
(`android-emulator` -> kind "android", port `adb`; `browser` -> kind "web", port `cdp`), so the
cluster manifests and the elastic pool share one definition of an emulator or browser pod.
Departures from those StatefulSets, on purpose:
- pods are bare (no controller owns them) and named by the pool (`venus-<kind>-<pool>-<hex>`);
  the pool deletes them one by one, which a StatefulSet (always its highest ordinal) cannot;
- the template's `app.kubernetes.io/name` label gets a `-pool` suffix: a pod matching the
  StatefulSet's selector would be adopted (and possibly deleted) by the StatefulSet controller;
- bookkeeping lives on the pod: labels `app.kubernetes.io/managed-by=venus-device-pool`,
  `venus.dev/pool`, `venus.dev/device-kind`, the device labels as `device.venus.dev/<key>`, the
  lease as `venus.dev/lease` / `venus.dev/client`; annotations `venus.dev/created-at` and
  `venus.dev/heartbeat` (epoch seconds; stamped by the controller, read by orphan GC).

Label selectors are sent to the API server AND re-checked here: a fake API server (kmock, in the
tests) ignores them, and re-checking costs nothing. Replies are read as raw JSON, not as the
client's model objects (measured on kmock with 50 pods: a sync went from 0.99 s to 0.24 s).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config

from venus_core.config.pods import DevicePod
from venus_core.config.yamlfile import read_yaml_documents

MANAGED_BY = "venus-device-pool"
L_MANAGED = "app.kubernetes.io/managed-by"
L_POOL = "venus.dev/pool"
L_KIND = "venus.dev/device-kind"
L_GROUP = "venus.dev/group"
L_LEASE = "venus.dev/lease"
L_CLIENT = "venus.dev/client"
DEVICE_LABEL_PREFIX = "device.venus.dev/"
A_CREATED = "venus.dev/created-at"
A_HEARTBEAT = "venus.dev/heartbeat"
TEMPLATES = {"android": ("android-emulator", "adb"), "web": ("browser", "cdp")}
"""pool kind -> (StatefulSet in device-pool.yaml, name of the device's container port)."""
DEFAULT_MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "base" / "device-pool.yaml"


class PodAPIError(RuntimeError):
    """The Kubernetes API refused or did not answer a device-pod request."""


@dataclass
class PodTemplate:
    kind: str
    source: str  # "file: StatefulSet name", for error messages
    template: dict[str, Any]  # the StatefulSet's spec.template (metadata + spec)
    port: int

    def pod(self, name: str, namespace: str, labels: dict[str, str],
            annotations: dict[str, str]) -> dict[str, Any]:
        tpl = copy.deepcopy(self.template)
        meta = tpl.get("metadata") or {}
        tpl_labels = dict(meta.get("labels") or {})
        if "app.kubernetes.io/name" in tpl_labels:
            tpl_labels["app.kubernetes.io/name"] += "-pool"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**tpl_labels, **labels},
                "annotations": {**(meta.get("annotations") or {}), **annotations},
            },
            "spec": tpl["spec"],
        }


def _mapping(value: Any, where: str, field: str, *, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        got = "nothing" if value is None else type(value).__name__
        raise ValueError(f"{where}: field {field} must be a mapping, got {got}")
    return value


def _string_map(value: Any, where: str, field: str) -> None:
    """Labels and annotations: string keys and values (the API server refuses anything else)."""
    for k, v in _mapping(value, where, field, required=False).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{where}: field {field}: {str(k)[:50]!r}: {type(v).__name__} value; keys and "
                             "values must be strings (quote them)")


def _container_port(spec: dict[str, Any], port_name: str, where: str) -> int:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ValueError(f"{where}: field spec.template.spec.containers must be a non-empty list")
    for i, c in enumerate(containers):
        c = _mapping(c, where, f"spec.template.spec.containers[{i}]")
        ports = c.get("ports") or []
        if not isinstance(ports, list):
            raise ValueError(f"{where}: field spec.template.spec.containers[{i}].ports must be a list")
        for j, p in enumerate(ports):
            p = _mapping(p, where, f"spec.template.spec.containers[{i}].ports[{j}]")
            if p.get("name") == port_name:
                port = p.get("containerPort")
                if type(port) is not int or not 0 < port < 65536:
                    raise ValueError(f"{where}: field spec.template.spec.containers[{i}].ports[{j}].containerPort "
                                     f"must be a port number (1-65535), got {str(port)[:50]!r}")
                return port
    raise ValueError(f"{where}: no container port named {port_name!r}")


MAX_MANIFEST_BYTES = 1 << 20
"""Largest device-pool manifest read (the shipped one is ~6 kB)."""


def load_templates(path: Path = DEFAULT_MANIFEST) -> dict[str, PodTemplate]:
    """The pod templates of the device-pool StatefulSets in `path` (a multi-document YAML); ValueError
    naming the file, the StatefulSet and the field for a manifest that cannot make pods."""
    docs = read_yaml_documents(path, what="the device-pool manifest", max_bytes=MAX_MANIFEST_BYTES)
    for i, d in enumerate(docs):
        if d is not None and not isinstance(d, dict):
            raise ValueError(f"{path}: document {i + 1} is a {type(d).__name__}, not a Kubernetes object")
    docs = [d for d in docs if d]
    out: dict[str, PodTemplate] = {}
    for kind, (sts_name, port_name) in TEMPLATES.items():
        where = f"{path}: StatefulSet {sts_name}"
        sts = next((d for d in docs if d.get("kind") == "StatefulSet" and isinstance(d.get("metadata"), dict)
                    and d["metadata"].get("name") == sts_name), None)
        if sts is None:
            raise ValueError(f"{path}: no StatefulSet named {sts_name!r} (template of {kind} pods)")
        tpl = _mapping(sts.get("spec"), where, "spec").get("template")
        if not isinstance(tpl, dict) or not isinstance(tpl.get("spec"), dict):
            raise ValueError(f"{where}: field spec.template.spec is missing")
        meta = _mapping(tpl.get("metadata"), where, "spec.template.metadata", required=False)
        _string_map(meta.get("labels"), where, "spec.template.metadata.labels")
        _string_map(meta.get("annotations"), where, "spec.template.metadata.annotations")
        out[kind] = PodTemplate(kind, where, tpl, _container_port(tpl["spec"], port_name, where))
    return out


def core_api(host: str | None = None, kubeconfig: str | None = None,
             context: str | None = None) -> client.CoreV1Api:
    """A CoreV1Api: against `host` (no auth: a fake server), in-cluster, or from a kubeconfig."""
    if host is not None:
        return client.CoreV1Api(client.ApiClient(client.Configuration(host=host)))
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, context=context)
    return client.CoreV1Api()


def _epoch(value: str | None, fallback: float) -> float:
    try:
        return float(value) if value else fallback
    except ValueError:
        return fallback


class KubePodBackend:
    """List / create / label / delete the pods of one device pool in one namespace."""

    def __init__(self, api: client.CoreV1Api, namespace: str, pool: str,
                 templates: dict[str, PodTemplate] | None = None,
                 request_timeout: float = 10.0) -> None:
        self.api = api
        self.namespace = namespace
        self.pool = pool
        self.templates = templates if templates is not None else load_templates()
        self.request_timeout = request_timeout
        self.selector = {L_MANAGED: MANAGED_BY, L_POOL: pool}

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.request_timeout, **kw)
        except client.ApiException as exc:
            raise PodAPIError(f"{what} in namespace {self.namespace}: HTTP {exc.status}"
                              f" {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PodAPIError(f"{what} in namespace {self.namespace}: {exc}") from exc

    def _view(self, pod: dict[str, Any]) -> DevicePod | None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if v is not None}
        if any(labels.get(k) != v for k, v in self.selector.items()):
            return None
        kind = labels.get(L_KIND, "")
        tpl = self.templates.get(kind)
        ann = meta.get("annotations") or {}
        stamp = meta.get("creationTimestamp")
        made = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0.0
        created = _epoch(ann.get(A_CREATED), made)
        phase = status.get("phase") or "Pending"
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [])
        return DevicePod(
            name=meta["name"], kind=kind, ready=ready and phase == "Running",
            deleting=meta.get("deletionTimestamp") is not None,
            failed=phase in ("Failed", "Succeeded") or tpl is None,
            host=status.get("podIP"), port=tpl.port if tpl else None,
            created=created, heartbeat=_epoch(ann.get(A_HEARTBEAT), created),
            group=labels.get(L_GROUP, self.pool), phase=phase,
            lease=labels.get(L_LEASE), client=labels.get(L_CLIENT),
            labels={k.removeprefix(DEVICE_LABEL_PREFIX): v for k, v in labels.items()
                    if k.startswith(DEVICE_LABEL_PREFIX)},
        )

    def list_pods(self) -> list[DevicePod]:
        """The pool's pods. Read as raw JSON: the client's model classes cost ~7 ms per pod
        (measured), which a reconcile loop over hundreds of pods cannot afford."""
        sel = ",".join(f"{k}={v}" for k, v in self.selector.items())
        resp = self._call("list pods", self.api.list_namespaced_pod, self.namespace,
                          label_selector=sel, _preload_content=False)
        try:
            items = json.loads(resp.data)["items"] or []
        except (ValueError, KeyError, TypeError) as exc:
            raise PodAPIError(f"list pods in namespace {self.namespace}: bad reply: {exc}") \
                from exc
        return [v for p in items if (v := self._view(p)) is not None]

    def create_pod(self, kind: str, name: str, labels: dict[str, str], group: str) -> None:
        tpl = self.templates.get(kind)
        if tpl is None:
            raise ValueError(f"no pod template for kind {kind!r} (have {sorted(self.templates)})")
        now = f"{time.time():.3f}"
        body = tpl.pod(
            name, self.namespace,
            {**self.selector, L_KIND: kind, L_GROUP: group,
             **{DEVICE_LABEL_PREFIX + k: v for k, v in labels.items()}},
            {A_CREATED: now, A_HEARTBEAT: now},
        )
        self._call(f"create pod {name}", self.api.create_namespaced_pod, self.namespace, body,
                   _preload_content=False)

    def delete_pod(self, name: str) -> bool:
        """Delete `name`; False if it was already gone."""
        try:
            self.api.delete_namespaced_pod(name, self.namespace, _preload_content=False,
                                           _request_timeout=self.request_timeout)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise PodAPIError(f"delete pod {name}: HTTP {exc.status} {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PodAPIError(f"delete pod {name}: {exc}") from exc
        return True

    def _patch(self, name: str, body: dict[str, Any], what: str) -> bool:
        """Patch pod `name`; False if it is gone (deleted since the last list)."""
        try:
            self.api.patch_namespaced_pod(name, self.namespace, body, _preload_content=False,
                                          _request_timeout=self.request_timeout)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise PodAPIError(f"{what} {name}: HTTP {exc.status} {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PodAPIError(f"{what} {name}: {exc}") from exc
        return True

    def mark_lease(self, name: str, lease: str | None, client_id: str | None) -> None:
        """Set (or, with None, remove) the lease labels of pod `name`."""
        self._patch(name, {"metadata": {"labels": {L_LEASE: lease, L_CLIENT: client_id}}},
                    "label pod")

    def stamp(self, names: Sequence[str]) -> None:
        """Refresh the heartbeat annotation of the pods this controller owns."""
        now = f"{time.time():.3f}"
        for name in names:
            self._patch(name, {"metadata": {"annotations": {A_HEARTBEAT: now}}}, "stamp pod")
