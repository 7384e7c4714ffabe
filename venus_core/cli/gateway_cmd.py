"""`venus gateway`: run one device-gateway shard (and, optionally, the lease registry beside it).

    venus gateway --devices devices.yaml --secret-file /run/secrets/gateway \\
        [--host 0.0.0.0] [--port 7000] [--shard 0 --shards 4] [--metrics-port 9100] \\
        [--registry-port 7070 --shard-addr gw-0:7000 --shard-addr gw-1:7000 ...]
        [--registry-url http://registry:7070]
        [--tls-cert /run/tls/tls.crt --tls-key /run/tls/tls.key [--tls-client-ca /run/tls/ca.crt]]

The device table is YAML/JSON (`id, kind, group, endpoint, labels`); every shard reads the whole
table and serves the groups that hash to it. The token secret comes from `--secret-file` or the
`VENUS_GATEWAY_SECRET` environment variable (credentials only; everything else is a flag). With
`--registry-port` the process also serves the lease registry over HTTP; it hands out the
`--shard-addr` addresses (default: this shard); a shard whose registry runs elsewhere gets
`--registry-url` and closes the sessions of ended leases within a second. With `--tls-cert` and
`--tls-key` the gateway and the registry speak TLS; `--tls-client-ca` also requires client
certificates signed by that CA and binds every lease and tunnel to the certificate's identity
(see `venus_core.daas.tls`). A `--registry-url https://...` is reached with the client TLS files
of `$VENUS_DAAS_CA` / `$VENUS_DAAS_CERT` / `$VENUS_DAAS_KEY`. Prints one line with the bound
ports, then runs until SIGINT/SIGTERM. Heavy imports stay inside the command so that
`venus --help` is fast.
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
        tls_cert: Annotated[
            Path | None, typer.Option(help="TLS certificate chain (PEM) of gateway and registry")
        ] = None,
        tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM)")] = None,
        tls_client_ca: Annotated[
            Path | None,
            typer.Option(help="require client certificates signed by this CA (mutual TLS)"),
        ] = None,
    ) -> None:
        """Run a device-gateway shard: token-checked TCP forwarding to ADB / CDP / SSH devices."""
        import logging
        import signal
        import threading

        from venus_core.daas import (
            ClientTLS,
            DeviceTable,
            Gateway,
            GatewayConfig,
            GatewayThread,
            HttpRegistry,
            LeaseHTTPServer,
            LeaseRegistry,
            ServerTLS,
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
        if (tls_cert is None) != (tls_key is None) or (tls_client_ca and tls_cert is None):
            raise typer.BadParameter(
                "give --tls-cert and --tls-key together (and --tls-client-ca only with them)",
                param_hint="--tls-cert",
            )
        tls = ServerTLS(tls_cert, tls_key, tls_client_ca) if tls_cert and tls_key else None
        try:
            specs = load_devices(devices)
            signer = TokenSigner(secret)
            table = DeviceTable(specs, shard=shard, n_shards=shards, max_upstream=max_upstream)
            if tls is not None:
                tls.context()  # unreadable or mismatched files fail here, before binding
            remote = (
                HttpRegistry(registry_url, tls=ClientTLS.from_env())
                if registry_url is not None
                else None
            )
        except (OSError, ValueError) as exc:
            typer.echo(f"venus gateway: {exc}", err=True)
            raise typer.Exit(2) from exc
        config = GatewayConfig(host=host, port=port, tls=tls, revoked_for=max(3600.0, ttl))
        gw = GatewayThread(Gateway(table, signer, config), metrics_port=metrics_port).start()
        registry = http = poller = None
        try:
            if remote is not None:
                poller = RevocationPoller(gw, remote.leases).start()
            assert gw.loop is not None
            line = (
                f"gateway shard {shard}/{shards} on {host}:{gw.port} ({loop_name(gw.loop)},"
                f" {len(table.pools)}/{len(specs)} devices,"
                f" {'mTLS' if gw.gateway.mutual_tls else 'TLS' if tls else 'plain TCP'})"
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
                http = LeaseHTTPServer(registry, host, registry_port, tls=tls).start()
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
