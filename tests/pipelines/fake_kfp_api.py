"""A FAKE Kubeflow Pipelines API server on loopback, for testing `venus submit`.

No KFP cluster can run on these machines (no Kubernetes, no Docker), so this `http.server` answers
only the v2beta1 endpoints that `kfp.Client` calls to find / upload a pipeline and a version, find
or create an experiment and create a run, with the JSON shapes of the real API. It keeps what it
was sent (uploaded packages, run bodies) for the test to check; it validates nothing else.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class FakeKfpState:
    def __init__(self) -> None:
        self.pipelines: dict[str, str] = {}            # display name -> id
        self.versions: list[dict[str, Any]] = []       # {pipeline_id, id, name, package}
        self.experiments: dict[str, dict[str, str]] = {}
        self.runs: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.ids = itertools.count(1)
        self.lock = threading.Lock()


def _multipart_file(headers: Any, body: bytes) -> bytes:
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + headers["Content-Type"].encode() + b"\r\n\r\n" + body)
    for part in msg.iter_parts():
        if part.get_param("name", header="content-disposition") == "uploadfile":
            return part.get_payload(decode=True)
    raise ValueError("multipart body without an 'uploadfile' part")


def _make_handler(state: FakeKfpState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            url = urlparse(self.path)
            q = parse_qs(url.query)
            state.requests.append(("GET", url.path))
            wanted = _filter_name(q)
            if url.path == "/apis/v2beta1/pipelines":
                found = [{"pipeline_id": i, "display_name": n} for n, i in state.pipelines.items()
                         if wanted in (None, n)]
                self._send(200, {"pipelines": found, "total_size": len(found)} if found else {})
            elif url.path == "/apis/v2beta1/experiments":
                found = [e for n, e in state.experiments.items() if wanted in (None, n)]
                self._send(200, {"experiments": found, "total_size": len(found)} if found else {})
            else:
                self._send(404, {"error": f"fake KFP API: no GET {url.path}"})

        def do_POST(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            q = parse_qs(url.query)
            state.requests.append(("POST", url.path))
            body = self._body()
            with state.lock:
                n = next(state.ids)
                if url.path == "/apis/v2beta1/pipelines/upload":
                    name = q["name"][0]
                    state.pipelines[name] = f"pipeline-{n}"
                    state.versions.append({"pipeline_id": f"pipeline-{n}", "id": f"default-{n}", "name": name,
                                           "package": _multipart_file(self.headers, body).decode()})
                    self._send(200, {"pipeline_id": f"pipeline-{n}", "display_name": name})
                elif url.path == "/apis/v2beta1/pipelines/upload_version":
                    pid = q["pipelineid"][0]
                    state.versions.append({"pipeline_id": pid, "id": f"version-{n}", "name": q["name"][0],
                                           "package": _multipart_file(self.headers, body).decode()})
                    self._send(200, {"pipeline_id": pid, "pipeline_version_id": f"version-{n}",
                                     "display_name": q["name"][0]})
                elif url.path == "/apis/v2beta1/experiments":
                    exp = json.loads(body)
                    record = {"experiment_id": f"experiment-{n}", "display_name": exp["display_name"],
                              "namespace": exp.get("namespace") or ""}
                    state.experiments[exp["display_name"]] = record
                    self._send(200, record)
                elif url.path == "/apis/v2beta1/runs":
                    run = json.loads(body)
                    state.runs.append(run)
                    self._send(200, {"run_id": f"run-{n}", "display_name": run.get("display_name"),
                                     "experiment_id": run.get("experiment_id"), "state": "PENDING"})
                else:
                    self._send(404, {"error": f"fake KFP API: no POST {url.path}"})

    return Handler


def _filter_name(q: dict[str, list[str]]) -> str | None:
    """The display name a kfp.Client list call filters on (its `filter` is JSON with predicates)."""
    if "filter" not in q:
        return None
    flt = json.loads(q["filter"][0])
    for pred in flt.get("predicates", []):
        if pred.get("key") in ("display_name", "name"):
            return pred.get("string_value") or pred.get("stringValue")
    return None


class FakeKfpServer:
    """`with FakeKfpServer() as fake:` -> fake.url, fake.state."""

    def __init__(self) -> None:
        self.state = FakeKfpState()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self.state))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeKfpServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
