"""Kubeflow Trainer TrainJobs (trainer.kubeflow.org/v1alpha1): build, submit, watch, clean up.

    launcher = TrainJobLauncher(client.CustomObjectsApi(api_client), namespace="venus")
    body = trainjob_manifest("venus-mid-train-ab12", "venus", image, "venus_core.runtime.mid_train",
                             args, nodes=4, procs_per_node=8, runtime="venus-deepspeed", resources=res)
    result = launcher.run(body, timeout_s=86_400)   # returns on Complete; raises on Failed / timeout

Why a launcher in the component pod rather than fire-and-forget: the Kubeflow step must stay red or
green with the training job, and an abandoned TrainJob holds GPUs. So `run` submits, watches until
the `Complete` or `Failed` condition (the Trainer's terminal conditions), fails fast with the
failing condition's reason and message, enforces a deadline, and deletes the TrainJob (and with it,
by foreground propagation, its JobSet and pods) on every way out: success, failure, timeout,
KeyboardInterrupt, and SIGTERM (what the kubelet sends when the pipeline run is cancelled).

Runtimes: the project's namespaced TrainingRuntimes (manifests/base/trainer-runtimes.yaml),
`venus-torch-distributed` and `venus-deepspeed`; both use the torch MLPolicy (the Trainer starts
`torchrun` with PET_* settings and the trainer initialises DeepSpeed itself), so the command is
`torchrun -m <module>` and `runtimeRef.kind` must say TrainingRuntime (the API default is
ClusterTrainingRuntime).

Watching: a GET, then a watch stream on the one object until it changes or `watch_s` passes, in a
loop, so an event missed between streams (or a stream the server ends early) only delays the next
GET. The stream is requested with `watch=true` spelled in lower case: the client's own `Watch`
sends `True`, which the real API server accepts but kmock (the fake API of the tests) does not.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from venus_core.config.platform import ResourceSpec

GROUP, VERSION, PLURAL, KIND = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
RUNTIMES = {"torch": "venus-torch-distributed", "deepspeed": "venus-deepspeed"}
GPU_RESOURCE = "nvidia.com/gpu"
log = logging.getLogger(__name__)


class TrainJobError(RuntimeError):
    """The TrainJob failed, vanished or timed out; the message says which and why."""


class TrainJobFailed(TrainJobError):
    pass


class TrainJobTimeout(TrainJobError):
    pass


@dataclass
class TrainJobResult:
    name: str
    seconds: float
    conditions: list[dict[str, Any]] = field(default_factory=list)


def api_from_environment(kubeconfig: str | None = None) -> client.CustomObjectsApi:
    """In-cluster credentials (the component pod's service account), else the kubeconfig
    (`kubeconfig`, else `$KUBECONFIG` read now, not at import time as the client's default is)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG") or None)
    return client.CustomObjectsApi()


def runtime_for(backend: str) -> str:
    """TrainingRuntime of a `distributed.backend`: DeepSpeed's for deepspeed, torch's otherwise."""
    return RUNTIMES["deepspeed"] if backend == "deepspeed" else RUNTIMES["torch"]


def _resources(res: ResourceSpec) -> dict[str, dict[str, str]]:
    qty = {"cpu": res.cpu, "memory": res.memory}
    if res.gpu_count:
        qty[GPU_RESOURCE] = str(res.gpu_count)
    return {"requests": dict(qty), "limits": dict(qty)}


def trainjob_manifest(name: str, namespace: str, image: str, module: str, args: Sequence[str], *,
                      nodes: int, procs_per_node: int, runtime: str, resources: ResourceSpec,
                      env: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None
                      ) -> dict[str, Any]:
    """The TrainJob that runs `torchrun -m module args...` on `nodes` x `procs_per_node` processes."""
    if nodes < 1 or procs_per_node < 1:
        raise ValueError(f"TrainJob {name}: nodes ({nodes}) and procs_per_node ({procs_per_node}) must be >= 1")
    if len(name) > 63:
        raise ValueError(f"TrainJob name {name!r} is longer than 63 characters")
    trainer: dict[str, Any] = {
        "image": image,
        "command": ["torchrun", "-m", module],
        "args": list(args),
        "numNodes": nodes,
        "numProcPerNode": procs_per_node,
        "resourcesPerNode": _resources(resources),
    }
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "venus", **(labels or {})}},
        "spec": {"runtimeRef": {"apiGroup": GROUP, "kind": "TrainingRuntime", "name": runtime},
                 "trainer": trainer},
    }


def terminal_condition(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first True `Failed` or `Complete` condition of a TrainJob (Failed wins), else None."""
    conds = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    for kind in ("Failed", "Complete"):
        for c in conds:
            if c.get("type") == kind:
                return dict(c)
    return None


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while watching (main thread only), so cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class TrainJobLauncher:
    """Submits one TrainJob at a time and follows it to its end (see the module docstring)."""

    def __init__(self, api: client.CustomObjectsApi, namespace: str, *, watch_s: float = 30.0,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.watch_s = watch_s
        self.on_event = on_event or (lambda kind, obj: None)

    # ---- single API calls ----
    def submit(self, body: Mapping[str, Any]) -> str:
        name = str(body["metadata"]["name"])
        try:
            self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, dict(body))
        except client.ApiException as exc:
            raise TrainJobError(f"TrainJob {self.namespace}/{name}: create refused ({exc.status} {exc.reason}): "
                                f"{_message(exc)}") from None
        return name

    def get(self, name: str) -> dict[str, Any]:
        try:
            return dict(self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))
        except client.ApiException as exc:
            if exc.status == 404:
                raise TrainJobError(f"TrainJob {self.namespace}/{name} disappeared (deleted by someone else?)") from None
            raise

    def delete(self, name: str) -> bool:
        """Delete the TrainJob and (foreground) everything it owns; False when it was already gone."""
        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name,
                                                     propagation_policy="Foreground")
            return True
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    # ---- following a job ----
    def _stream(self, name: str, seconds: float) -> Iterator[dict[str, Any]]:
        """Watch events of `name` for up to `seconds` (lower-case watch=true; see the module doc)."""
        resp = self.api.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, watch="true", field_selector=f"metadata.name={name}",
            timeout_seconds=max(1, int(seconds)), _preload_content=False, _request_timeout=(10, seconds))
        try:
            for line in iter_resp_lines(resp):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and \
                        (obj.get("metadata") or {}).get("name") == name:  # kmock ignores field selectors
                    yield event
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            return
        finally:
            resp.close()
            resp.release_conn()

    def wait(self, name: str, timeout_s: float) -> TrainJobResult:
        """Block until `name` is Complete (returned) or Failed / gone / past `timeout_s` (raised)."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        last: list[dict[str, Any]] = []
        while True:
            obj = self.get(name)
            last = list((obj.get("status") or {}).get("conditions") or [])
            cond = terminal_condition(obj)
            if cond is not None:
                self.on_event(cond["type"], obj)
                if cond["type"] == "Failed":
                    raise TrainJobFailed(f"TrainJob {self.namespace}/{name} failed: {cond.get('reason', '')}: "
                                         f"{cond.get('message', '(no message)')}")
                return TrainJobResult(name, round(time.monotonic() - t0, 2), last)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TrainJobTimeout(f"TrainJob {self.namespace}/{name} did not finish within {timeout_s:.0f} s "
                                      f"(conditions: {[(c.get('type'), c.get('status')) for c in last]})")
            opened = time.monotonic()
            for event in self._stream(name, min(remaining, self.watch_s)):
                self.on_event(event["type"], event["object"])
                if event["type"] == "DELETED" or terminal_condition(event["object"]) is not None:
                    break
            if time.monotonic() - opened < 0.5:  # a stream that ends at once must not spin the API
                time.sleep(min(max(0.0, deadline - time.monotonic()), 0.5))

    def run(self, body: Mapping[str, Any], timeout_s: float) -> TrainJobResult:
        """Submit `body`, wait for it, and delete it whatever happens (see the module docstring)."""
        name = self.submit(body)
        log.info("TrainJob %s/%s submitted", self.namespace, name)
        try:
            with _sigterm_as_interrupt():
                return self.wait(name, timeout_s)
        finally:
            try:
                self.delete(name)
                log.info("TrainJob %s/%s deleted", self.namespace, name)
            except Exception as exc:  # noqa: BLE001 - do not mask the original outcome
                log.error("TrainJob %s/%s could not be deleted: %s", self.namespace, name, exc)


def _message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.body)[:500]
    except (ValueError, TypeError):
        return str(exc.body)[:500]
