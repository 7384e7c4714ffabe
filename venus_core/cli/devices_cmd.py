"""`venus devices`: the Kubernetes device pool from the command line.

    venus devices up --kind android -n 4 [--label lang=en] [--pool default] [--namespace venus]
                     [--timeout 300] [--serve 7070 --shard-addr gw-0:7000 ...]
    venus devices ls [--pool default]
    venus devices down [--kind web] [--pool default]

`up` adopts the pool's existing pods, creates or deletes pods to reach `-n` of that kind, waits
until they are ready and prints the ready devices as a device table (YAML, the format of
`venus gateway --devices`). With `--serve PORT` it keeps running: the lease registry over HTTP on
PORT (tokens signed with $VENUS_GATEWAY_SECRET or --secret-file) and the reconcile loop, which
registers pods that turn ready, ends leases on pods that go away and collects orphans, until
SIGINT/SIGTERM. The cluster is reached in-cluster, from a kubeconfig, or at `--api-server` (a
URL without auth, e.g. a fake API server in tests). Heavy imports stay inside the commands.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

devices_app = typer.Typer(help="The Kubernetes device pool: emulator and browser pods.",
                          no_args_is_help=True)

Pool = Annotated[str, typer.Option(help="pool name (label venus.dev/pool)")]
Namespace = Annotated[str, typer.Option(help="Kubernetes namespace")]
ApiServer = Annotated[str | None, typer.Option(help="API server URL (no auth); default:"
                                                    " in-cluster config, else kubeconfig")]
Kubeconfig = Annotated[str | None, typer.Option(help="kubeconfig file")]
Manifest = Annotated[Path | None, typer.Option(help="pod templates (default: manifests/base/"
                                                    "device-pool.yaml)")]


def _backend(pool: str, namespace: str, api_server: str | None, kubeconfig: str | None,
             manifest: Path | None) -> Any:
    from venus_core.io.devicepool import DEFAULT_MANIFEST, KubePodBackend, core_api, load_templates

    try:
        templates = load_templates(manifest or DEFAULT_MANIFEST)
        return KubePodBackend(core_api(api_server, kubeconfig), namespace, pool, templates)
    except (OSError, ValueError) as exc:
        typer.echo(f"venus devices: {exc}", err=True)
        raise typer.Exit(2) from exc


def _labels(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--label")
        out[key] = value
    return out


def _secret(secret_file: Path | None) -> bytes:
    if secret_file is not None:
        return secret_file.read_bytes().strip()
    if os.environ.get("VENUS_GATEWAY_SECRET"):
        return os.environ["VENUS_GATEWAY_SECRET"].encode()
    raise typer.BadParameter("give --secret-file or set VENUS_GATEWAY_SECRET",
                             param_hint="--secret-file")


@devices_app.command("up")
def up(
    kind: Annotated[str, typer.Option(help="android (emulator pods) or web (browser pods)")],
    n: Annotated[int, typer.Option("-n", "--count", help="number of pods of this kind")],
    label: Annotated[list[str] | None, typer.Option(help="device label key=value")] = None,
    pool: Pool = "default",
    namespace: Namespace = "venus",
    timeout: Annotated[float, typer.Option(help="seconds to wait for readiness")] = 300.0,
    api_server: ApiServer = None,
    kubeconfig: Kubeconfig = None,
    manifest: Manifest = None,
    serve: Annotated[int | None, typer.Option(help="keep running: lease registry over HTTP on"
                                                   " this port and the reconcile loop")] = None,
    host: Annotated[str, typer.Option(help="address of the registry (--serve)")] = "127.0.0.1",
    shard_addr: Annotated[list[str] | None, typer.Option(help="gateway shard host:port, in"
                                                              " shard order (--serve)")] = None,
    secret_file: Annotated[Path | None, typer.Option(help="token secret (--serve)")] = None,
    ttl: Annotated[float, typer.Option(help="lease TTL in seconds (--serve)")] = 30.0,
) -> None:
    """Scale the pool to N pods of KIND, wait until they are ready, print the device table."""
    import logging
    import signal
    import threading

    import yaml

    from venus_core.daas import LeaseHTTPServer, LeaseRegistry, TokenSigner
    from venus_core.daas.errors import DeviceNotReady
    from venus_core.daas.pool import PoolController

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signer = TokenSigner(_secret(secret_file) if serve is not None else os.urandom(32))
    registry = LeaseRegistry([], signer, shard_addr or ["127.0.0.1:7000"], ttl=ttl)
    backend = _backend(pool, namespace, api_server, kubeconfig, manifest)
    ctl = PoolController(registry, backend, ready_timeout=timeout)
    try:
        ctl.adopt()
        res = ctl.scale(kind, n, labels=_labels(label), timeout=timeout)
    except DeviceNotReady as exc:
        typer.echo(f"venus devices: {exc}", err=True)
        raise typer.Exit(1) from exc
    except (ValueError, RuntimeError) as exc:
        typer.echo(f"venus devices: {exc}", err=True)
        raise typer.Exit(2) from exc
    table = [{"id": d.id, "kind": d.kind, "group": d.group, "endpoint": d.endpoint,
              "labels": d.labels} for d in sorted(registry.devices.values(), key=lambda d: d.id)]
    typer.echo(yaml.safe_dump({"devices": table}, sort_keys=False), nl=False)
    typer.echo(f"# {kind}: created {len(res.created)}, deleted {len(res.deleted)},"
               f" kept (leased) {len(res.kept_leased)}", err=True)
    if serve is None:
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    registry.start()
    http = LeaseHTTPServer(registry, host, serve).start()
    ctl.start()
    typer.echo(f"# registry {http.url}, pool {pool} in {namespace}", err=True)
    try:
        stop.wait()
    finally:
        ctl.stop()
        http.stop()
        registry.stop()


@devices_app.command("ls")
def ls(pool: Pool = "default", namespace: Namespace = "venus", api_server: ApiServer = None,
       kubeconfig: Kubeconfig = None, manifest: Manifest = None) -> None:
    """List the pool's pods: name, kind, phase, ready, endpoint, lease."""
    backend = _backend(pool, namespace, api_server, kubeconfig, manifest)
    try:
        pods = backend.list_pods()
    except RuntimeError as exc:  # PodAPIError
        typer.echo(f"venus devices: {exc}", err=True)
        raise typer.Exit(2) from exc
    for p in sorted(pods, key=lambda p: p.name):
        endpoint = f"{p.host}:{p.port}" if p.host else "-"
        typer.echo(f"{p.name}\t{p.kind}\t{p.phase}\t{'ready' if p.ready else 'not-ready'}"
                   f"\t{endpoint}\t{p.lease or '-'}")


@devices_app.command("down")
def down(kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
         pool: Pool = "default", namespace: Namespace = "venus", api_server: ApiServer = None,
         kubeconfig: Kubeconfig = None, manifest: Manifest = None) -> None:
    """Delete the pool's pods (of one kind, or all)."""
    backend = _backend(pool, namespace, api_server, kubeconfig, manifest)
    try:
        names = [p.name for p in backend.list_pods() if kind is None or p.kind == kind]
        for name in names:
            backend.delete_pod(name)
    except RuntimeError as exc:  # PodAPIError
        typer.echo(f"venus devices: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"deleted {len(names)} pod(s)")


def register(app: typer.Typer) -> None:
    """Mount `venus devices` on a typer app."""
    app.add_typer(devices_app, name="devices")
