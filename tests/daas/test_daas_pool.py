"""The Kubernetes device pool (`daas.pool.PoolController` + `io.devicepool.KubePodBackend`).

Against a FAKE Kubernetes API server on loopback (kmock; see kube_fake_api, devpool_helpers): the
official `kubernetes` client creates, lists, patches and deletes real API objects over HTTP, but
kmock has no kubelet, so pod readiness is simulated by PATCHing pod status through the API
(`Kubelet`, `set_ready`, `set_failed`). The lease registry, gateway and SDK are the real ones,
and the "device" behind a pod is a real TCP echo server on loopback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daas_helpers import SECRET, tcp_server
from devpool_helpers import NAMESPACE, POD_RESOURCE, Kubelet, pod_names, set_failed
from kube_fake_api import FakeKubeAPI
from proc_lines import wait_for_line

from venus_core.daas import (
    DevicePool,
    DeviceTable,
    Gateway,
    GatewayThread,
    LeaseExpired,
    LeaseRegistry,
    NoDeviceAvailable,
    TokenSigner,
    UpstreamClosed,
)
from venus_core.daas.errors import DeviceNotReady
from venus_core.daas.pool import PoolController
from venus_core.io.devicepool import (
    A_HEARTBEAT,
    L_LEASE,
    L_POOL,
    KubePodBackend,
    PodAPIError,
    core_api,
    load_templates,
)


@pytest.fixture()
def kube() -> Iterator[FakeKubeAPI]:
    """A fresh fake API server per test (kmock keeps every object's history, and a long-lived
    one gets slower test after test)."""
    k = FakeKubeAPI(POD_RESOURCE)
    yield k
    k.stop()


@pytest.fixture()
def api(kube: FakeKubeAPI):  # noqa: ANN201 - CoreV1Api
    return core_api(host=kube.url)


@pytest.fixture()
def kubelet(api) -> Iterator[Kubelet]:  # noqa: ANN001
    k = Kubelet(api).start()
    yield k
    k.stop()


def make(api, pool: str = "p1", port: int | None = None, **kw: float):  # noqa: ANN001, ANN201
    templates = load_templates()
    if port is not None:  # the "device" is a loopback echo server instead of an emulator
        for t in templates.values():
            t.port = port
    backend = KubePodBackend(api, NAMESPACE, pool, templates)
    registry = LeaseRegistry([], TokenSigner(SECRET), ["127.0.0.1:1"], ttl=5.0, probe=None,
                             reap_interval=0.05)
    kw.setdefault("ready_timeout", 30.0)
    return PoolController(registry, backend, **kw), registry, backend


def test_templates_come_from_the_manifests(tmp_path: Path) -> None:
    t = load_templates()
    assert (t["android"].port, t["web"].port) == (5555, 9223)
    pod = t["android"].pod("venus-android-p-1", NAMESPACE, {"x": "y"}, {"a": "b"})
    emulator = pod["spec"]["containers"][0]
    assert emulator["resources"]["limits"]["devices.kubevirt.io/kvm"] == "1"  # /dev/kvm, unprivileged
    assert emulator["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "android-emulator-pool"
    assert pod["metadata"]["labels"]["x"] == "y" and pod["metadata"]["annotations"] == {"a": "b"}
    bad = tmp_path / "pool.yaml"
    bad.write_text("kind: StatefulSet\nmetadata: {name: android-emulator}\nspec: {}\n")
    with pytest.raises(ValueError, match=r"pool.yaml: StatefulSet android-emulator: field spec"):
        load_templates(bad)


def test_scale_up_registers_ready_pods_with_labels(api, kubelet) -> None:  # noqa: ANN001
    ctl, reg, _ = make(api)
    res = ctl.scale("android", 3, labels={"lang": "en"}, timeout=30)
    assert len(res.created) == 3 and sorted(res.ready) == sorted(res.created)
    ours = pod_names(api, **{L_POOL: "p1", "venus.dev/device-kind": "android"})
    assert ours == sorted(res.created)
    assert sorted(reg.devices) == sorted(res.created)
    dev = reg.devices[res.created[0]]
    assert (dev.kind, dev.host, dev.port) == ("android", "127.0.0.1", 5555)
    assert dev.labels == {"lang": "en"}
    grants = reg.lease("w1", "android", 3, {"lang": "en"})
    assert len(grants) == 3
    with pytest.raises(NoDeviceAvailable):
        reg.lease("w1", "android", 1, {"lang": "de"})
    # leases are mirrored onto the pods as labels
    ctl.sync()
    labelled = {p.metadata.name: p.metadata.labels.get(L_LEASE)
                for p in api.list_namespaced_pod(NAMESPACE).items}
    assert sorted(labelled.values()) == sorted(g.lease for g in grants)
    for g in grants:
        reg.release(g.lease, "w1")
    ctl.sync()
    assert all(L_LEASE not in (p.metadata.labels or {})
               for p in api.list_namespaced_pod(NAMESPACE).items)


def test_scale_down_deletes_free_pods_and_keeps_leased_ones(api, kubelet) -> None:  # noqa: ANN001
    ctl, reg, _ = make(api)
    created = ctl.scale("web", 3, timeout=30).created
    held = reg.lease("w1", "web", 1)[0]
    res = ctl.scale("web", 0)
    assert sorted(res.deleted) == sorted(set(created) - {held.device})
    assert res.kept_leased == [held.device]
    assert pod_names(api) == [held.device] and list(reg.devices) == [held.device]
    reg.release(held.lease, "w1")
    assert ctl.scale("web", 0).deleted == [held.device]
    assert pod_names(api) == [] and reg.devices == {}


def test_readiness_timeout_is_typed_and_deletes_the_pods(api, kubelet) -> None:  # noqa: ANN001
    ctl, reg, _ = make(api)
    kubelet.hold = True  # pods stay Pending (no node can run them)
    t0 = time.monotonic()
    with pytest.raises(DeviceNotReady, match=r"2/2 pod\(s\) not ready within 0.5s.*Pending"):
        ctl.scale("android", 2, timeout=0.5)
    assert time.monotonic() - t0 < 10  # 0.5 s plus the deletions, on a loaded machine
    assert pod_names(api) == [] and reg.devices == {} and ctl.pods_of("android") == []


def test_a_pod_that_fails_is_unregistered_and_later_deleted(api, kubelet) -> None:  # noqa: ANN001
    ctl, reg, _ = make(api)
    name = ctl.scale("android", 1, timeout=30).created[0]
    ctl.ready_timeout = 0.3
    set_failed(api, name)
    assert ctl.sync()["removed"] == 1 and name not in reg.devices
    time.sleep(0.35)  # it gets ready_timeout to come back, then it is garbage
    assert ctl.sync()["stuck"] == 1 and pod_names(api) == []


def _age_heartbeat(api, name: str, seconds: float) -> None:  # noqa: ANN001
    """As if the pod's owner last stamped it `seconds` ago."""
    api.patch_namespaced_pod(name, NAMESPACE, {"metadata": {"annotations": {
        A_HEARTBEAT: f"{time.time() - seconds:.3f}"}}})


def test_orphans_are_collected_after_their_heartbeat_ttl(api, kubelet) -> None:  # noqa: ANN001
    alive, _, _ = make(api, orphan_ttl=30, stamp_every=0)
    crashed, _, _ = make(api, orphan_ttl=30)
    other_pool, _, _ = make(api, pool="p2", orphan_ttl=30)
    kept = alive.scale("android", 1, timeout=30).created
    lost = crashed.scale("android", 1, timeout=30).created  # `crashed` never syncs again
    foreign = other_pool.scale("android", 1, timeout=30).created
    gc, _, _ = make(api, orphan_ttl=30)
    assert gc.sync()["orphans"] == 0  # young pods are not orphans yet
    for name in kept + lost + foreign:
        _age_heartbeat(api, name, 100)
    # a live controller re-stamps its own pods and collects the crashed one's
    assert alive.sync()["orphans"] == 1
    hb = api.read_namespaced_pod(kept[0], NAMESPACE).metadata.annotations[A_HEARTBEAT]
    assert time.time() - float(hb) < 10
    assert gc.sync()["orphans"] == 0  # the live pod and the other pool's pod stay
    assert pod_names(api) == sorted(kept + foreign) and lost[0] not in pod_names(api)


def test_quarantined_too_long_is_replaced_by_scaling(api, kubelet) -> None:  # noqa: ANN001
    ctl, reg, _ = make(api, quarantine_ttl=0.0)
    name = ctl.scale("android", 1, timeout=30).created[0]
    g = reg.lease("w1", "android", 1)[0]
    reg.report_failure(g.lease, "w1", "adb hangs")
    assert ctl.sync()["quarantined"] == 1 and pod_names(api) == [] and reg.devices == {}
    fresh = ctl.scale("android", 1, timeout=30).created
    assert fresh and fresh[0] != name and list(reg.devices) == fresh


def test_pod_deleted_under_a_lease_gives_typed_errors_and_frees_the_lease(api, kubelet) -> None:  # noqa: ANN001
    echo = tcp_server("echo")
    signer = TokenSigner(SECRET)
    table = DeviceTable([])
    gw = GatewayThread(Gateway(table, signer)).start()
    ctl, reg, _ = make(api, port=echo.port, tables=[table], interval=0.05)
    reg.signer, reg.gateways = signer, [f"127.0.0.1:{gw.port}"]
    reg.on_end.append(gw.revoke)
    reg.start()
    try:
        name = ctl.scale("android", 1, timeout=30).created[0]
        ctl.start()  # the background reconcile loop from here on
        pool = DevicePool(reg, "worker-1", wait=0.5, io_timeout=15.0, heartbeat_interval=0.05)
        with pool.lease("android", 1) as (lease,):
            assert lease.device == name
            with lease.connect() as tunnel:
                tunnel.sendall(b"ping")
                assert tunnel.recv_exact(4) == b"ping"
                api.delete_namespaced_pod(name, NAMESPACE)  # kubectl delete pod, node drain ...
                with pytest.raises(UpstreamClosed):
                    tunnel.recv(4)  # the gateway closed the lease's session
            deadline = time.monotonic() + 15
            while lease.lost is None and time.monotonic() < deadline:
                time.sleep(0.02)
            with pytest.raises(LeaseExpired, match=f"pod {name} was deleted"):
                lease.connect()
        assert reg.status()["leased"] == 0 and reg.devices == {} and table.devices == {}
    finally:
        ctl.stop()
        reg.stop()
        gw.stop()
        echo.shutdown()
        echo.server_close()


def test_api_server_down_is_a_typed_error_within_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    from venus_core.io.devicepool import core_api

    backend = KubePodBackend(core_api(host="http://127.0.0.1:9"), NAMESPACE, "p1",
                             request_timeout=1.0)
    backend.api.api_client.configuration.retries = 0
    t0 = time.monotonic()
    with pytest.raises(PodAPIError, match="list pods in namespace venus"):
        backend.list_pods()
    assert time.monotonic() - t0 < 3
    registry = LeaseRegistry([], TokenSigner(SECRET), ["127.0.0.1:1"], probe=None)
    ctl = PoolController(registry, backend, interval=0.02)
    with pytest.raises(PodAPIError):
        ctl.scale("web", 1)
    caplog.set_level(logging.ERROR, logger="venus_core.daas.pool")
    with ctl:  # the reconcile loop logs the failures and keeps trying
        deadline = time.monotonic() + 15
        while sum("sync failed (retrying)" in r.getMessage() for r in caplog.records) < 3:
            assert time.monotonic() < deadline, "the reconcile loop stopped retrying"
            time.sleep(0.02)
        assert ctl._thread is not None and ctl._thread.is_alive()


def test_cli_up_ls_down(kube: FakeKubeAPI, api, kubelet) -> None:  # noqa: ANN001
    import yaml
    from typer.testing import CliRunner

    from venus_core.cli import app

    run = CliRunner().invoke
    common = ["--pool", "cli", "--api-server", kube.url]
    res = run(app, ["devices", "up", "--kind", "web", "-n", "2", "--label", "lang=en",
                    "--timeout", "30", *common])
    assert res.exit_code == 0, res.output
    table = yaml.safe_load(res.stdout)["devices"]
    assert [(d["kind"], d["endpoint"], d["labels"]) for d in table] == \
        [("web", "127.0.0.1:9223", {"lang": "en"})] * 2
    again = run(app, ["devices", "up", "--kind", "web", "-n", "2", *common])  # adopts: idempotent
    assert again.exit_code == 0 and yaml.safe_load(again.stdout)["devices"] == table
    listed = run(app, ["devices", "ls", *common]).stdout.splitlines()
    assert [line.split("\t")[:4] for line in listed] == \
        [[d["id"], "web", "Running", "ready"] for d in table]
    assert run(app, ["devices", "down", *common]).stdout.strip() == "deleted 2 pod(s)"
    assert pod_names(api) == []
    bad = run(app, ["devices", "ls", "--api-server", "http://127.0.0.1:9"])
    assert bad.exit_code == 2 and "list pods in namespace venus" in bad.output


@pytest.mark.slow
def test_cli_up_serve_runs_the_registry_until_sigterm(
        kube: FakeKubeAPI, api, kubelet, tmp_path: Path) -> None:  # noqa: ANN001
    import json
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from venus_core.io.devicepool import DEFAULT_MANIFEST

    # the registry probes a device before leasing it: an echo server answers ADB's CNXN with CNXN
    echo = tcp_server("echo")
    manifest = tmp_path / "device-pool.yaml"
    manifest.write_text(DEFAULT_MANIFEST.read_text().replace(
        "containerPort: 5555", f"containerPort: {echo.port}"))
    env = dict(os.environ, VENUS_GATEWAY_SECRET="serve-test-secret-0123456789abcdef")
    venus = str(Path(sys.executable).parent / "venus")
    proc = subprocess.Popen(
        [venus, "devices", "up", "--kind", "android", "-n", "2", "--manifest", str(manifest),
         "--api-server", kube.url, "--pool", "srv", "--serve", "0", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = wait_for_line(proc.stderr, lambda s: s.startswith("# registry "), timeout=60,
                             what="venus devices up --serve")
        url = line.split()[2].rstrip(",")
        status = json.loads(urllib.request.urlopen(f"{url}/v1/status", timeout=10).read())
        assert status["devices"] == 2 and status["leased"] == 0
        grant = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{url}/v1/lease", data=json.dumps({"client": "w", "kind": "android"}).encode(),
            method="POST"), timeout=10).read())["grants"][0]
        assert grant["device"] in pod_names(api)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        echo.shutdown()
        echo.server_close()
    assert rc == 0, proc.stderr.read()[-2000:]
