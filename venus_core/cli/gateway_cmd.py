"""`venus gateway`: run one device-gateway shard (and, optionally, the lease registry beside it).

    venus gateway --devices devices.yaml --secret-file /run/secrets/gateway \\
        [--host 0.0.0.0] [--port 7000] [--shard 0 --shards 4] [--metrics-port 9100] \\
        [--registry-port 7070 --shard-addr gw-0:7000 --shard-addr gw-1:7000 ...]
        [--registry-url http://registry:7070]

The device table is YAML/JSON (`id, kind, group, endpoint, labels`); every shard reads the whole
table and serves the groups that hash to it. The token secret comes from `--secret-file` or the
`VENUS_GATEWAY_SECRET` environment variable (credentials only; everything else is a flag). With
`--registry-port` the process also serves the lease registry over HTTP; it hands out the
`--shard-addr` addresses (default: this shard); a shard whose registry runs elsewhere gets
`--registry-url` and closes the sessions of ended leases within a second. Prints one line with
the bound ports, then runs until SIGINT/SIGTERM. Heavy imports stay inside the command so that `venus --help` is fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the `gateway` command to a typer app."""

    @app.command("gateway")
    def gateway(
        devices: Annotated[Path, typer.Option(help="device table (YAML or JSON)")],
        secret_file: Annotated[
            Path | None,
            typer.Option(help="file holding the token secret (else $VENUS_GATEWAY_SECRET)"),
        ] = None,
        host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="gateway port (0 = any free port)")] = 7000,
        shard: Annotated[int, typer.Option(help="index of this shard")] = 0,
        shards: Annotated[int, typer.Option(help="number of gateway shards")] = 1,
        max_upstream: Annotated[int, typer.Option(help="upstream connections per device")] = 8,
        metrics_port: Annotated[int | None, typer.Option(help="Prometheus /metrics port")] = None,
        registry_port: Annotated[
            int | None, typer.Option(help="also serve the lease registry over HTTP on this port")
        ] = None,
        shard_addr: Annotated[
            list[str] | None,
            typer.Option(help="host:port of every shard, in shard order (registry only)"),
        ] = None,
        ttl: Annotated[float, typer.Option(help="lease TTL in seconds (registry only)")] = 30.0,
        registry_url: Annotated[
            str | None,
            typer.Option(
                help="URL of a lease registry in another process: sessions of ended"
                " leases are closed (polled every second)"
            ),
        ] = None,
    ) -> None:
        """Run a device-gateway shard: token-checked TCP forwarding to ADB / CDP / SSH devices."""
        import logging
        import signal
        import threading

        from venus_core.daas import (
            DeviceTable,
            Gateway,
            GatewayConfig,
            GatewayThread,
            HttpRegistry,
            LeaseHTTPServer,
            LeaseRegistry,
            TokenSigner,
            load_devices,
        )
        from venus_core.daas.service import RevocationPoller, loop_name

        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        if secret_file is not None:
            secret = secret_file.read_bytes().strip()
        elif os.environ.get("VENUS_GATEWAY_SECRET"):
            secret = os.environ["VENUS_GATEWAY_SECRET"].encode()
        else:
            raise typer.BadParameter(
                "give --secret-file or set VENUS_GATEWAY_SECRET", param_hint="--secret-file"
            )
        try:
            specs = load_devices(devices)
            signer = TokenSigner(secret)
            table = DeviceTable(specs, shard=shard, n_shards=shards, max_upstream=max_upstream)
        except (OSError, ValueError) as exc:
            typer.echo(f"venus gateway: {exc}", err=True)
            raise typer.Exit(2) from exc
        gw = GatewayThread(
            Gateway(table, signer, GatewayConfig(host=host, port=port)), metrics_port=metrics_port
        ).start()
        registry = http = poller = None
        try:
            if registry_url is not None:
                poller = RevocationPoller(gw, HttpRegistry(registry_url).live_leases).start()
            assert gw.loop is not None
            line = (
                f"gateway shard {shard}/{shards} on {host}:{gw.port} ({loop_name(gw.loop)},"
                f" {len(table.pools)}/{len(specs)} devices)"
            )
            if metrics_port is not None:
                line += f" metrics :{gw.metrics_port}"
            if registry_port is not None:
                addrs = shard_addr or [f"{host}:{gw.port}"]
                if len(addrs) != shards:
                    raise typer.BadParameter(
                        f"{len(addrs)} addresses for {shards} shards", param_hint="--shard-addr"
                    )
                registry = LeaseRegistry(specs, signer, addrs, ttl=ttl).start()
                registry.on_end.append(gw.revoke)
                http = LeaseHTTPServer(registry, host, registry_port).start()
                line += f" registry {http.url}"
            typer.echo(line)
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            stop.wait()
        finally:
            if poller is not None:
                poller.stop()
            if http is not None:
                http.stop()
            if registry is not None:
                registry.stop()
            gw.stop()
