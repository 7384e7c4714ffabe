"""The lease registry over HTTP (JSON on loopback by default), and its client.

Why HTTP: rollout workers in other processes or pods lease devices through one registry; the
stdlib server and `urllib` keep the SDK free of extra dependencies (the paper mentions a
multi-language SDK; any language with an HTTP client can speak this). Endpoints, all JSON:
`POST /v1/lease {client, kind, n, labels, wait}` -> `{grants: [...]}`,
`POST /v1/heartbeat|release|report {lease, client[, reason]}`, `POST /v1/replace {lease, client,
reason, wait}` -> `{grant}`, `GET /v1/status`, `GET /v1/leases` (`{leases, ended}`: ids of held and
recently ended leases). Errors: HTTP 4xx with `{error: <code>, message}` where code is an `errors`
class code, so the client raises the same typed exception.

TLS (`tls`): the server can speak HTTPS; with client certificates required (mTLS) the `client` of
every POST must be the certificate's identity (or be left out, and is then taken from it), so no
client can lease, heartbeat, release or replace in another client's name. The TLS handshake runs
in the request's thread with a timeout, so a silent client cannot stall the accept loop.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import ssl
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from venus_core.daas.errors import DaasError, GatewayUnavailable, IdentityMismatch, error_for
from venus_core.daas.registry import Grant, LeaseRegistry, LeaseSnapshot
from venus_core.daas.tls import ClientTLS, ServerTLS, peer_identity

log = logging.getLogger(__name__)
MAX_BODY = 1 << 16
TLS_HANDSHAKE_TIMEOUT = 10.0
MAX_WAIT_S = 3600.0  # the longest a lease or replace request may wait for a device (a request thread each)
MAX_LEASE_N = 4096  # devices one lease request may ask for
REQUEST_TIMEOUT_S = 60.0  # a client that stops sending (a body shorter than its Content-Length) is dropped
LISTEN_BACKLOG = 4096  # pending connections the registry's socket queues (see `_Server`)


def _str(body: dict[str, Any], key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v:
        raise ValueError(f"field {key!r} must be a non-empty string")
    return v


def _reason(body: dict[str, Any]) -> str:
    v = body.get("reason", "")
    if not isinstance(v, str):
        raise ValueError(f"field 'reason' must be a string, got {_shown(v)}")
    return v


def _shown(v: Any) -> str:
    return type(v).__name__ if isinstance(v, (dict, list)) else repr(v)[:40]


def _count(body: dict[str, Any], key: str) -> int:
    v = body.get(key, 1)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_LEASE_N:
        raise ValueError(f"field {key!r} must be an integer in [1, {MAX_LEASE_N}], got {_shown(v)}")
    return v


def _wait(body: dict[str, Any], limit: float) -> float:
    v = body.get("wait", 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= limit:
        raise ValueError(f"field 'wait' must be a number of seconds in [0, {limit:g}], got {_shown(v)}")
    return float(v)


class _Handler(BaseHTTPRequestHandler):
    registry: LeaseRegistry
    mutual_tls: bool
    max_wait: float = MAX_WAIT_S
    protocol_version = "HTTP/1.1"
    identity: str | None = None
    timeout = REQUEST_TIMEOUT_S  # StreamRequestHandler: the connection's socket timeout

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(TLS_HANDSHAKE_TIMEOUT)
            self.request.do_handshake()  # ssl.SSLError / timeout: the request is dropped
            self.identity = peer_identity(self.request.getpeercert())
            self.request.settimeout(None)
        super().setup()

    def _client(self, b: dict[str, Any]) -> str:
        """The request's client: its certificate's identity under mTLS, else what it says."""
        if not self.mutual_tls:
            return _str(b, "client")
        said = b.get("client", self.identity)
        if said != self.identity:
            raise IdentityMismatch(
                f"request names client {said!r}, the TLS certificate {self.identity!r}"
            )
        return str(self.identity)

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("lease http: " + fmt, *args)

    def _reply(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/status":
            self._reply(200, self.registry.status())
        elif self.path == "/v1/leases":
            snap = self.registry.leases()
            self._reply(200, {"leases": sorted(snap.live), "ended": sorted(snap.ended)})
        else:
            self._reply(404, {"error": "not_found", "message": self.path})

    def do_POST(self) -> None:
        try:
            n = int(self.headers.get("Content-Length", "0"))
            if not 0 <= n <= MAX_BODY:
                raise ValueError(f"body of {n} bytes (max {MAX_BODY})")
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
            except RecursionError:  # JSON nested past the decoder's limit
                raise ValueError("body is not valid JSON: nested too deeply") from None
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")  # noqa: TRY004 - answered with HTTP 400
            self._reply(200, self._dispatch(body))
        except DaasError as exc:
            self._reply(409, {"error": exc.code, "message": str(exc)})
        except (ValueError, TypeError) as exc:  # a JSONDecodeError is a ValueError
            self._reply(400, {"error": "bad_request", "message": f"{self.path}: {exc}"})

    def _dispatch(self, b: dict[str, Any]) -> dict[str, Any]:
        r = self.registry
        if self.path == "/v1/lease":
            labels = b.get("labels") or {}
            if not isinstance(labels, dict):
                raise ValueError("field 'labels' must be an object")
            if any(isinstance(v, (dict, list)) for v in labels.values()):
                raise ValueError("field 'labels' must map names to strings, not to objects or lists")
            grants = r.lease(self._client(b), _str(b, "kind"), _count(b, "n"),
                             {str(k): str(v) for k, v in labels.items()}, _wait(b, self.max_wait))
            return {"grants": [g.to_dict() for g in grants]}
        if self.path == "/v1/heartbeat":
            return {"grant": r.heartbeat(_str(b, "lease"), self._client(b)).to_dict()}
        if self.path == "/v1/release":
            r.release(_str(b, "lease"), self._client(b))
            return {}
        if self.path == "/v1/report":
            r.report_failure(_str(b, "lease"), self._client(b), _reason(b))
            return {}
        if self.path == "/v1/replace":
            g = r.replace(_str(b, "lease"), self._client(b), _reason(b), _wait(b, self.max_wait))
            return {"grant": g.to_dict()}
        raise ValueError("unknown endpoint")


class _Server(ThreadingHTTPServer):
    """The stdlib threading server with a listen backlog for a pool's worth of clients.

    socketserver's default backlog is 5: with a few hundred rollout workers calling at once the
    kernel drops or resets the connections beyond it, so clients saw `Connection reset by peer`
    and 1-2 s SYN retransmits (found by benchmarks/scale_devices.py; 300 lease+release calls at
    once on loopback: 139 failed, p50 1.0 s; with this backlog none failed, p50 0.43 s). The
    kernel caps it at net.core.somaxconn."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


class _TLSServer(_Server):
    """Accepts plain TCP, wraps each connection in TLS; the handshake happens in `_Handler.setup`
    (in the request's thread), not in the accept loop."""

    context: ssl.SSLContext

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, OSError)):  # a failed handshake: one line, no traceback
            log.warning("lease http: TLS connection from %s refused: %s", client_address, exc)
        else:
            super().handle_error(request, client_address)


class LeaseHTTPServer:
    """Serve a `LeaseRegistry` on host:port (0 = free port) from a background thread; HTTPS (and
    client certificates, if `tls.client_ca`) with `tls`. `max_wait`: the longest wait a lease or
    replace request may ask for (a longer one is a 400); `request_timeout`: a connection silent that
    long (a body that never arrives whole) is closed, freeing its thread."""

    def __init__(
        self,
        registry: LeaseRegistry,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: ServerTLS | None = None,
        max_wait: float = MAX_WAIT_S,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        mutual = tls is not None and tls.mutual
        handler = type("Handler", (_Handler,), {"registry": registry, "mutual_tls": mutual, "max_wait": max_wait,
                                                "timeout": request_timeout})
        if tls is None:
            self.httpd = _Server((host, port), handler)
        else:
            self.httpd = _TLSServer((host, port), handler, bind_and_activate=False)
            self.httpd.context = tls.context()
            try:
                self.httpd.server_bind()
                self.httpd.server_activate()
            except OSError:
                self.httpd.server_close()
                raise
        self.httpd.daemon_threads = True
        scheme = "http" if tls is None else "https"
        self.url = f"{scheme}://{host}:{self.httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="lease-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpRegistry:
    """Client of `LeaseHTTPServer` with the same methods as `LeaseRegistry`; an https:// URL
    needs `tls` (the CA, and the client certificate where the server requires one)."""

    def __init__(self, url: str, timeout: float = 10.0, *, tls: ClientTLS | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        if self.url.startswith("https://") and tls is None:
            raise ValueError(f"lease registry {self.url}: an https URL needs client TLS settings")
        self._context = tls.context() if tls is not None else None

    def _post(self, path: str, body: dict[str, Any], extra_timeout: float = 0.0) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(
                req, timeout=self.timeout + extra_timeout, context=self._context
            ) as resp:
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read())
            except ValueError:
                raise DaasError(f"lease registry {path}: HTTP {exc.code}") from exc
            raise error_for(str(err.get("error")), str(err.get("message"))) from None
        except OSError as exc:
            raise GatewayUnavailable(f"lease registry {self.url}: {exc}") from exc

    def lease(
        self,
        client: str,
        kind: str,
        n: int = 1,
        labels: dict[str, str] | None = None,
        wait: float = 0.0,
    ) -> list[Grant]:
        out = self._post(
            "/v1/lease",
            {"client": client, "kind": kind, "n": n, "labels": labels or {}, "wait": wait},
            wait,
        )
        return [Grant.from_dict(g) for g in out["grants"]]

    def heartbeat(self, lease_id: str, client: str) -> Grant:
        return Grant.from_dict(
            self._post("/v1/heartbeat", {"lease": lease_id, "client": client})["grant"]
        )

    def release(self, lease_id: str, client: str) -> None:
        self._post("/v1/release", {"lease": lease_id, "client": client})

    def report_failure(self, lease_id: str, client: str, reason: str) -> None:
        self._post("/v1/report", {"lease": lease_id, "client": client, "reason": reason})

    def replace(self, lease_id: str, client: str, reason: str, wait: float = 0.0) -> Grant:
        body = {"lease": lease_id, "client": client, "reason": reason, "wait": wait}
        return Grant.from_dict(self._post("/v1/replace", body, wait)["grant"])

    def _get(self, path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(
                self.url + path, timeout=self.timeout, context=self._context
            ) as resp:
                return dict(json.loads(resp.read()))
        except OSError as exc:
            raise GatewayUnavailable(f"lease registry {self.url}: {exc}") from exc

    def status(self) -> dict[str, Any]:
        return self._get("/v1/status")

    def leases(self) -> LeaseSnapshot:
        out = self._get("/v1/leases")
        return LeaseSnapshot(
            frozenset(str(x) for x in out["leases"]), frozenset(str(x) for x in out["ended"])
        )
