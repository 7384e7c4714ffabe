"""A buffered, outage-tolerant writer of one MLflow run's metrics, params, tags and artifacts.

Why: a multi-hour training run must not die, or stall, because the MLflow server is restarting.
Log calls only append to an in-memory buffer; a background thread sends it with
`MlflowClient.log_batch` (at most 1000 entities per call, params/tags in their own calls so a
rejected param never takes metrics with it). On a transient error (connection refused, timeout,
5xx) the batch goes back to the buffer and the thread retries with exponential backoff. The buffer
is bounded: when the bound is hit, the buffered metrics are appended to a local JSONL spill file
and memory is freed; the spill file is replayed when the run closes. A batch the server rejects
outright (a 4xx such as a param logged twice with different values) is written to the spill file
marked `rejected` and never retried. Whatever is still buffered when the run closes with the
server down goes to the spill file too, so nothing is lost: the file is the run's local record.

On close the writer flushes what it can within `close_timeout`, replays the spill file, and
reports the gap on the run itself: tag `venus.tracking.outages` (JSON list of windows) and metrics
`venus.tracking.outage_seconds`, `.metrics_delayed` (buffered in memory or on disk while MLflow
was unreachable, then sent late), `.metrics_spilled`, `.metrics_unsent`,
`.metrics_rejected`. The same report is returned and written next to the spill file
(`<spill>.gap.json`), which is the only record when the server is still down at the end.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from venus_core.config.redact import redact

log = logging.getLogger(__name__)

BATCH_METRICS = 1000  # MAX_METRICS_PER_BATCH
BATCH_PARAMS_TAGS = 100  # MAX_PARAMS_TAGS_PER_BATCH
TRANSIENT_CODES = frozenset({
    "INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "IO_ERROR", "SERVICE_UNDER_MAINTENANCE", "DEADLINE_EXCEEDED",
    "ABORTED", "REQUEST_LIMIT_EXCEEDED", "RESOURCE_EXHAUSTED", "COULD_NOT_ACQUIRE_LOCK", "UNPARSEABLE_HTTP_ERROR",
})
GAP_PREFIX = "venus.tracking."


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: the server is down, slow or overloaded (not a bad request)."""
    if isinstance(exc, MlflowException):
        return exc.error_code in TRANSIENT_CODES
    return isinstance(exc, (OSError, TimeoutError, ConnectionError)) or type(exc).__module__.startswith("requests")


@dataclass
class Outage:
    start: float
    end: float | None = None
    error: str = ""

    @property
    def seconds(self) -> float:
        return (self.end if self.end is not None else time.time()) - self.start


@dataclass
class GapReport:
    """What the outages cost: counts of delayed / spilled / unsent / rejected metrics, and the windows."""

    outages: list[Outage] = field(default_factory=list)
    metrics_delayed: int = 0
    metrics_spilled: int = 0
    metrics_unsent: int = 0
    metrics_rejected: int = 0
    params_tags_unsent: int = 0
    artifacts_unsent: list[str] = field(default_factory=list)
    reported_to_server: bool = False

    @property
    def outage_seconds(self) -> float:
        return sum(o.seconds for o in self.outages)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outage_seconds"] = round(self.outage_seconds, 3)
        return d


def _metric_json(m: Metric) -> dict[str, Any]:
    v = m.value if math.isfinite(m.value) else str(m.value)
    return {"kind": "metric", "key": m.key, "value": v, "timestamp": m.timestamp, "step": m.step}


def _metric_from_json(d: dict[str, Any]) -> Metric:
    return Metric(d["key"], float(d["value"]), int(d["timestamp"]), int(d["step"]))


class BufferedRunWriter:
    """Owns the buffer and the sender thread of one run. Thread-safe; `close()` once at the end."""

    def __init__(self, client: Any, run_id: str, spill_path: str | Path, *, max_buffer: int = 100_000,
                 flush_interval: float = 2.0, backoff: tuple[float, float] = (1.0, 60.0),
                 close_timeout: float = 120.0) -> None:
        if max_buffer < 1:
            raise ValueError(f"max_buffer must be >= 1, got {max_buffer}")
        self.client = client
        self.run_id = run_id
        self.spill_path = Path(spill_path)
        self.max_buffer = max_buffer
        self.flush_interval = flush_interval
        self.backoff = backoff
        self.close_timeout = close_timeout
        self.gap = GapReport()
        self._metrics: deque[Metric] = deque()
        self._params_tags: deque[Param | RunTag] = deque()
        self._artifacts: deque[tuple[str, str | None, bool]] = deque()
        self._spilled_pending = 0
        self._spill_uncounted = 0  # spilled outside an outage, not yet in metrics_delayed
        self._failures = 0
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"mlflow-writer-{run_id[:8]}", daemon=True)
        self._thread.start()

    # ---- producer side (training thread) ----
    def add_metrics(self, metrics: Iterable[Metric]) -> None:
        self._check_open()
        new = list(metrics)
        with self._lock:
            if self._in_outage():
                self.gap.metrics_delayed += len(new)
            if len(self._metrics) + len(new) > self.max_buffer:
                self._spill_locked(list(self._metrics) + new)
                self._metrics.clear()
            else:
                self._metrics.extend(new)

    def add_params_tags(self, items: Iterable[Param | RunTag]) -> None:
        self._check_open()
        with self._lock:
            self._params_tags.extend(items)
        self._wake.set()

    def add_artifact(self, path: str, artifact_path: str | None, is_dir: bool = False) -> None:
        """Upload now; on a transient failure queue the upload (the file is read when it is retried)."""
        self._check_open()
        item = (path, artifact_path, is_dir)
        try:
            self._upload(item)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._note_failure(exc)
            with self._lock:
                self._artifacts.append(item)

    def _upload(self, item: tuple[str, str | None, bool]) -> None:
        path, artifact_path, is_dir = item
        if is_dir:
            self.client.log_artifacts(self.run_id, path, artifact_path)
        else:
            self.client.log_artifact(self.run_id, path, artifact_path)

    def buffered(self) -> int:
        with self._lock:
            return len(self._metrics) + len(self._params_tags)

    # ---- sender side ----
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"tracking writer of run {self.run_id} is closed")

    def _in_outage(self) -> bool:
        return bool(self.gap.outages) and self.gap.outages[-1].end is None

    def _note_failure(self, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            if not self._in_outage():
                self.gap.outages.append(Outage(time.time(), error=redact(str(exc))[:300]))
                self.gap.metrics_delayed += len(self._metrics) + self._spill_uncounted
                self._spill_uncounted = 0
                log.warning("MLflow unreachable for run %s, buffering: %s", self.run_id, redact(str(exc))[:300])

    def _note_success(self) -> None:
        with self._lock:
            self._failures = 0
            if self._in_outage():
                self.gap.outages[-1].end = time.time()
                log.warning("MLflow reachable again for run %s after %.1f s", self.run_id,
                            self.gap.outages[-1].seconds)

    def _spill_locked(self, metrics: Sequence[Metric], rejected: str | None = None) -> None:
        self.spill_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spill_path.open("a", encoding="utf-8") as f:
            for m in metrics:
                rec = _metric_json(m)
                if rejected is not None:
                    rec["rejected"] = rejected
                f.write(json.dumps(rec) + "\n")
        if rejected is None:
            self.gap.metrics_spilled += len(metrics)
            self._spilled_pending += len(metrics)
            if not self._in_outage():
                self._spill_uncounted += len(metrics)
        else:
            self.gap.metrics_rejected += len(metrics)

    def _send(self, metrics: list[Metric], params_tags: list[Param | RunTag]) -> None:
        params = [p for p in params_tags if isinstance(p, Param)]
        tags = [t for t in params_tags if isinstance(t, RunTag)]
        with self._send_lock:
            if params or tags:
                self.client.log_batch(self.run_id, params=params, tags=tags)
            if metrics:
                self.client.log_batch(self.run_id, metrics=metrics)

    def flush_once(self) -> bool:
        """Send one batch (params/tags, then metrics, then a pending artifact). True when all is sent."""
        with self._lock:
            pt = [self._params_tags.popleft() for _ in range(min(BATCH_PARAMS_TAGS, len(self._params_tags)))]
            ms = [self._metrics.popleft() for _ in range(min(BATCH_METRICS, len(self._metrics)))]
            art = self._artifacts.popleft() if self._artifacts else None
        if not pt and not ms and art is None:
            return True
        try:
            self._send([], pt)
        except Exception as exc:
            self._give_back(ms, [], art)
            self._failed(exc, [], pt)
            return False
        try:
            self._send(ms, [])
        except Exception as exc:
            self._give_back([], [], art)
            self._failed(exc, ms, [])
            return False
        if art is not None:
            try:
                self._upload(art)
            except Exception as exc:
                if is_transient(exc):
                    self._give_back([], [], art)
                    self._note_failure(exc)
                    return False
                log.error("MLflow rejected artifact %s of run %s: %s", art[0], self.run_id, exc)
                with self._lock:
                    self.gap.artifacts_unsent.append(art[0])
        self._note_success()
        with self._lock:
            return not (self._metrics or self._params_tags or self._artifacts)

    def _give_back(self, ms: list[Metric], pt: list[Param | RunTag],
                   art: tuple[str, str | None, bool] | None = None) -> None:
        with self._lock:
            self._metrics.extendleft(reversed(ms))
            self._params_tags.extendleft(reversed(pt))
            if art is not None:
                self._artifacts.appendleft(art)

    def _failed(self, exc: BaseException, ms: list[Metric], pt: list[Param | RunTag]) -> None:
        """Transient: back to the buffer, retry later. Rejected: to the spill file, never retried."""
        if is_transient(exc):
            self._give_back(ms, pt)
            self._note_failure(exc)
            return
        reason = redact(str(exc))[:300]
        log.error("MLflow rejected a batch of run %s (kept in %s): %s", self.run_id, self.spill_path, reason)
        with self._lock:
            self._spill_locked(ms, rejected=reason)
            self._spill_params_tags_locked(pt, reason)

    def _spill_params_tags_locked(self, items: Sequence[Param | RunTag], rejected: str | None) -> None:
        if not items:
            return
        self.spill_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spill_path.open("a", encoding="utf-8") as f:
            for item in items:
                rec: dict[str, Any] = {"kind": type(item).__name__.lower(), "key": item.key, "value": item.value}
                if rejected is not None:
                    rec["rejected"] = rejected
                f.write(json.dumps(rec) + "\n")

    def _delay(self) -> float:
        with self._lock:
            n = self._failures
        if n == 0:
            return self.flush_interval
        base, cap = self.backoff
        return min(cap, base * 2 ** (n - 1))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._delay())
            self._wake.clear()
            if self._stop.is_set():
                break
            while not self._stop.is_set() and not self.flush_once():
                if self._failures:
                    break

    # ---- end of run ----
    def _replay_spill(self) -> None:
        """Send the spilled (not rejected) metrics; count what could not be sent as unsent."""
        if self._spilled_pending == 0 or not self.spill_path.exists():
            return
        pending = [_metric_from_json(d) for d in
                   (json.loads(line) for line in self.spill_path.read_text(encoding="utf-8").splitlines() if line)
                   if d.get("kind") == "metric" and "rejected" not in d]
        sent = 0
        for i in range(0, len(pending), BATCH_METRICS):
            chunk = pending[i:i + BATCH_METRICS]
            try:
                self._send(chunk, [])
            except Exception as exc:
                log.warning("replaying %s for run %s stopped: %s", self.spill_path, self.run_id, redact(str(exc))[:300])
                break
            sent += len(chunk)
        self.gap.metrics_unsent += len(pending) - sent
        self._spilled_pending = 0

    def close(self) -> GapReport:
        """Stop the thread, flush within close_timeout, replay the spill file, report the gap."""
        if self._closed:
            return self.gap
        self._closed = True
        self._stop.set()
        self._wake.set()
        self._thread.join()
        deadline = time.monotonic() + self.close_timeout
        while not self.flush_once():
            if time.monotonic() >= deadline:
                break
            if self._failures:
                time.sleep(min(self._delay(), max(0.0, deadline - time.monotonic())))
        with self._lock:
            if self._metrics:  # still down: keep them on disk
                left = list(self._metrics)
                self._metrics.clear()
                self._spill_locked(left)
            if self._params_tags:
                self._spill_params_tags_locked(list(self._params_tags), None)
                self.gap.params_tags_unsent += len(self._params_tags)
                self._params_tags.clear()
            self.gap.artifacts_unsent += [a[0] for a in self._artifacts]
        if self._in_outage():  # nothing left to send proved the server back: probe it
            try:
                self.client.get_run(self.run_id)
                self._note_success()
            except Exception as exc:
                log.warning("MLflow still unreachable at the end of run %s: %s", self.run_id, redact(str(exc))[:200])
        if not self._in_outage():
            self._replay_spill()
        else:
            self.gap.metrics_unsent += self._spilled_pending
        self._report_gap()
        return self.gap

    def _report_gap(self) -> None:
        g = self.gap
        report = g.to_dict()
        windows = json.dumps([{"start": round(o.start, 3), "end": None if o.end is None else round(o.end, 3),
                               "seconds": round(o.seconds, 3), "error": o.error[:120]} for o in g.outages])
        if len(windows) > 8000:
            windows = windows[:7900] + f"... [{len(g.outages)} windows, see {self.spill_path.name}.gap.json]"
        now = int(time.time() * 1000)
        values = {"outage_seconds": g.outage_seconds, "metrics_delayed": g.metrics_delayed,
                  "metrics_spilled": g.metrics_spilled, "metrics_unsent": g.metrics_unsent,
                  "metrics_rejected": g.metrics_rejected}
        if g.outages or g.metrics_spilled or g.metrics_rejected or g.artifacts_unsent or g.params_tags_unsent:
            try:
                self.client.log_batch(
                    self.run_id, metrics=[Metric(GAP_PREFIX + k, float(v), now, 0) for k, v in values.items()],
                    tags=[RunTag(GAP_PREFIX + "outages", windows),
                          RunTag(GAP_PREFIX + "artifacts_unsent", json.dumps(g.artifacts_unsent)[:8000])])
                g.reported_to_server = True
            except Exception as exc:
                log.error("could not report the tracking gap of run %s to MLflow (%s); see %s.gap.json",
                          self.run_id, redact(str(exc))[:200], self.spill_path)
            self.spill_path.parent.mkdir(parents=True, exist_ok=True)
            gap_file = self.spill_path.with_name(self.spill_path.name + ".gap.json")
            gap_file.write_text(json.dumps({**report, "reported_to_server": g.reported_to_server}, indent=2))
        else:
            g.reported_to_server = True
