"""Fuzz the lease registry's HTTP API (`daas/lease_http.py`): method, path and body bytes.

A real `LeaseRegistry` with three web devices (no probe) is served by a real `LeaseHTTPServer` on
loopback; each input is one request over a fresh HTTP connection: lease / heartbeat / release /
report / replace bodies built from valid templates (the lease id of a device leased just before,
for the calls that name one) with hostile structural or textual edits, hostile constants (5,000
`[`, a 5,000-digit integer) and arbitrary bytes, POSTed to the endpoint or to an unknown path, or a
GET. Documented outcome: an HTTP reply whose body is a JSON object — 200, or 400 / 404 / 409 with
`{error: <code>, message}`. After each input the fuzz client's leases are released and the
registry holds none: a request that crashed its handler would leave the connection without a
reply, one that waited forever would hang the run (the server's `max_wait` is 0.2 s here).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_helpers import BUDGETS, DEEP_JSON, HUGE_INT_TEXT, Budget, fuzz, mutated, mutated_text
from hypothesis import strategies as st

from venus_core.daas.lease_http import LeaseHTTPServer
from venus_core.daas.registry import LeaseRegistry
from venus_core.daas.routing import DeviceSpec
from venus_core.daas.tokens import TokenSigner

CLIENT = "fuzz-client"
LEASE = "<lease>"  # replaced by the id of a lease held when the request is sent
PATHS = ["/v1/lease", "/v1/heartbeat", "/v1/release", "/v1/report", "/v1/replace"]
TEMPLATES: dict[str, dict[str, Any]] = {
    "/v1/lease": {"client": CLIENT, "kind": "web", "n": 1, "labels": {"zone": "a"}, "wait": 0},
    "/v1/heartbeat": {"lease": LEASE, "client": CLIENT},
    "/v1/release": {"lease": LEASE, "client": CLIENT},
    "/v1/report": {"lease": LEASE, "client": CLIENT, "reason": "adb went away"},
    "/v1/replace": {"lease": LEASE, "client": CLIENT, "reason": "stuck", "wait": 0.05},
}


def _body(path: str) -> st.SearchStrategy[bytes]:
    valid = TEMPLATES[path]
    return st.one_of(
        st.just(json.dumps(valid).encode()),
        mutated(valid).map(lambda b: json.dumps(b, allow_nan=True).encode("utf-8", "surrogatepass")),
        mutated_text(json.dumps(valid)).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.sampled_from([DEEP_JSON.encode(), b'{"client": "c", "kind": "web", "n": ' + HUGE_INT_TEXT.encode() + b"}",
                         b"", b"null", b"[]", b"\xff\xfe"]),
        st.binary(max_size=120),
    )


REQUEST = st.one_of(
    st.sampled_from(PATHS).flatmap(lambda p: st.tuples(st.just("POST"), st.just(p), _body(p))),
    st.tuples(st.just("POST"), st.sampled_from(["/v1/nope", "/", "/v1/lease/../status", "/v1/status"]),
              _body("/v1/lease")),
    st.tuples(st.just("GET"), st.sampled_from(["/v1/status", "/v1/leases", "/v1/lease", "/x" * 50]), st.just(b"")),
)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[LeaseRegistry, int]]:
    devices = [DeviceSpec(f"w{i}", "web", "g", "127.0.0.1", 9000 + i, labels={"zone": "a"}) for i in range(3)]
    registry = LeaseRegistry(devices, TokenSigner(b"k" * 32), ["127.0.0.1:1"], probe=None, recheck_after=0.0)
    with LeaseHTTPServer(registry, max_wait=0.2, request_timeout=5.0) as http:
        yield registry, int(http.httpd.server_address[1])


def _release_all(registry: LeaseRegistry) -> None:
    for lease_id, held in registry.status()["leases"].items():
        registry.release(lease_id, held["client"])
    registry.reap()  # recheck_after 0 and no probe: a reported device is back at once


def check(registry: LeaseRegistry, port: int, request: tuple[str, str, bytes]) -> str:
    method, path, body = request
    if LEASE.encode() in body:
        grant = registry.lease(CLIENT, "web")[0]
        body = body.replace(LEASE.encode(), grant.lease.encode())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body if method == "POST" else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        status, raw = resp.status, resp.read()
    finally:
        conn.close()
    reply = json.loads(raw)
    assert isinstance(reply, dict), raw[:200]
    assert status in (200, 400, 404, 409), (status, raw[:200])
    if status != 200:
        assert isinstance(reply.get("error"), str) and isinstance(reply.get("message"), str), reply
    _release_all(registry)
    assert registry.status()["leased"] == 0 and not registry.status()["quarantined"]
    return f"{method} {status}" + (f" {reply['error']}" if status != 200 else "")


@pytest.mark.parametrize("budget", BUDGETS)
def test_registry_http_api(budget: Budget, served: tuple[LeaseRegistry, int]) -> None:
    registry, port = served
    tally = fuzz("registry HTTP API", REQUEST, lambda r: check(registry, port, r), budget)
    assert tally.outcomes["POST 200"] > 0 and tally.outcomes["POST 400 bad_request"] > 0


def test_a_body_shorter_than_its_content_length_frees_its_thread(served: tuple[LeaseRegistry, int]) -> None:
    """A client that announces 100 bytes and sends 10 is dropped after the request timeout (5 s
    here), and the registry keeps answering meanwhile (each request has its own thread)."""
    registry, port = served
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        sock.sendall(b"POST /v1/lease HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"client":')
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/v1/status")
        assert conn.getresponse().status == 200
        conn.close()
        assert sock.recv(1024) == b""  # closed by the server, without a reply
        waited = time.monotonic() - t0
    finally:
        sock.close()
    assert 4.0 <= waited <= 10.0, waited
