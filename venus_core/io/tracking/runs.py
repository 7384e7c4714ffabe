"""MLflow runs of a pipeline: one parent run per pipeline run, one nested run per stage.

Why this shape: a stage run is named as its Kubeflow task is displayed (`offline_rl: grounding`,
`evaluate`; venus_core.config.stages.stage_display_name), so the run list reads without opening a
run, and tag `venus.job` keeps the bare job name to filter on; params are the resolved
spec section of that stage flattened to dotted keys (`offline_rl.grounding.lr`), metrics are per
step, and system tags make every run traceable: `venus.git_revision`, `venus.spec_sha256`,
`venus.image` (from `$VENUS_IMAGE`, set in the images), `venus.inputs` (JSON list of
{uri, sha256}; when it exceeds MLflow's 8000-character tag limit it is truncated and points to the
`provenance.json` artifact, which always holds the full list) and `venus.job`.

Stages of one pipeline run in separate pods: the pipeline creates the parent run
(`start_pipeline_run`) and passes its id to every stage pod in the environment variable
`VENUS_PARENT_RUN_ID`; `stage_run` nests under it when no `parent_run_id` is given. This is an
identifier, not configuration, so it stays within rule 4 of docs/architecture.md.

`MlflowTracker` satisfies the `venus_core.train.tracker.Tracker` protocol structurally (io may not
import train), so a runtime job hands it to a trainer as it is. All its calls are buffered
(`buffer.BufferedRunWriter`): an MLflow outage delays metrics, it does not stop training.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunStatus, RunTag

from venus_core.config import AgentSpec, spec_hash, spec_to_dict
from venus_core.config.redact import redact
from venus_core.io.tracking.buffer import BufferedRunWriter, GapReport, is_transient

PARENT_ENV = "VENUS_PARENT_RUN_ID"
IMAGE_ENV = "VENUS_IMAGE"
GIT_ENV = "VENUS_GIT_REV"
MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
MAX_TAG_VALUE = 8000  # mlflow.utils.validation.MAX_TAG_VAL_LENGTH
MAX_KEY = 250  # MAX_ENTITY_KEY_LENGTH
TRUNCATED = "...[truncated]"
# job (= runtime module = run name) -> the spec section whose values are its params
JOB_SECTIONS = {"generate_data": "flywheel", "score_data": "scoring", "mid_train": "mid_train",
                "offline_rl": "offline_rl", "online_rl": "online_rl", "merge": "merge", "evaluate": "eval"}
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
log = logging.getLogger(__name__)
T = TypeVar("T")


def with_retries(what: str, fn: Callable[[], T], attempts: int = 5, first_wait: float = 1.0) -> T:
    """Call `fn`, retrying transient tracking errors (server restarting as the pod starts) with backoff."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc) or i == attempts - 1:
                raise
            wait = first_wait * 2 ** i
            log.warning("%s: MLflow unreachable (%s); retrying in %.0f s", what, redact(str(exc))[:200], wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def make_client(tracking_uri: str) -> MlflowClient:
    """A client for `tracking_uri`; a local sqlite:/// store gets its directory created."""
    parts = urlsplit(tracking_uri)
    if parts.scheme == "sqlite":
        db = tracking_uri[len("sqlite:///"):]
        if db and db != ":memory:":
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def experiment_id(client: MlflowClient, name: str, artifact_store: str | None = None) -> str:
    """Id of experiment `name`, created on first use (artifact location only for local stores)."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    location = None
    if artifact_store and artifact_store.startswith("file://") and not client.tracking_uri.startswith("http"):
        raw = artifact_store[len("file://"):]
        location = Path(raw).expanduser().resolve().as_uri() + "/" + name
    try:
        return str(client.create_experiment(name, artifact_location=location))
    except Exception:  # created concurrently by another stage pod
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def _key(key: str) -> str:
    clean = _BAD_KEY_CHARS.sub("_", key)
    return clean[:MAX_KEY]


def _value(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str) if isinstance(
        value, (list, tuple, dict)) else str(value)
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def flatten(section: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> {"a.b.c": "value"}; lists become JSON; values fit MLflow's param limits."""
    out: dict[str, str] = {}
    for k, v in section.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key))
        else:
            out[_key(key)] = _value(v, MAX_PARAM_VALUE)
    return out


def spec_section(spec: AgentSpec, section: str) -> dict[str, Any]:
    """The resolved spec's section at dotted path `section` (e.g. "offline_rl.grounding")."""
    node: Any = spec_to_dict(spec)
    for part in section.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(f"spec has no section {section!r} (missing {part!r})")
        node = node[part]
    if not isinstance(node, Mapping):
        raise KeyError(f"spec field {section!r} is a value, not a section")
    return dict(node)


class MlflowTracker:
    """Tracker (log_params / log_metrics / log_artifact) on one MLflow run, buffered and outage-tolerant."""

    def __init__(self, client: MlflowClient, run_id: str, *, spill_dir: str | Path | None = None,
                 **writer_options: Any) -> None:
        self.run_id = run_id
        spill = Path(spill_dir) if spill_dir else Path(tempfile.gettempdir()) / "venus-tracking"
        self.writer = BufferedRunWriter(client, run_id, spill / f"{run_id}.jsonl", **writer_options)
        self._params: dict[str, str] = {}
        self.gap: GapReport | None = None

    @property
    def client(self) -> MlflowClient:
        return self.writer.client  # type: ignore[no-any-return]

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Params are write-once in MLflow: a key re-logged with another value is kept in tag
        `venus.param_conflicts` instead of failing the batch."""
        fresh: list[Param | RunTag] = []
        conflicts: dict[str, str] = {}
        for k, v in params.items():
            key, value = _key(str(k)), _value(v, MAX_PARAM_VALUE)
            old = self._params.get(key)
            if old is None:
                self._params[key] = value
                fresh.append(Param(key, value))
            elif old != value:
                conflicts[key] = value
        if conflicts:
            fresh.append(RunTag("venus.param_conflicts", _value(conflicts, MAX_TAG_VALUE)))
        if fresh:
            self.writer.add_params_tags(fresh)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.writer.add_metrics(Metric(_key(str(k)), float(v), now, int(step)) for k, v in metrics.items())

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        """Upload a file (or directory) as artifact `name` (default: its own name)."""
        src = Path(path)
        if not src.exists():
            raise FileNotFoundError(f"artifact {src} does not exist")
        if src.is_dir():
            self.writer.add_artifact(str(src), name or src.name, is_dir=True)
            return
        if name is None or name == src.name:
            self.writer.add_artifact(str(src), None)
            return
        parent, _, leaf = name.rpartition("/")
        stage = Path(tempfile.mkdtemp(prefix="venus-artifact-")) / leaf
        stage.write_bytes(src.read_bytes())
        self.writer.add_artifact(str(stage), parent or None)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.writer.add_params_tags(RunTag(_key(k), _value(v, MAX_TAG_VALUE)) for k, v in tags.items())

    def flush(self, timeout: float = 30.0) -> bool:
        """Send the buffer now (tests, checkpoints); True when everything went out."""
        deadline = time.monotonic() + timeout
        while not self.writer.flush_once():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self, status: str = "FINISHED") -> GapReport:
        """Flush, report the outage gap on the run, mark the run terminated (best effort when down)."""
        if self.gap is None:
            self.gap = self.writer.close()
            try:
                self.client.set_terminated(self.run_id, status=status)
            except Exception as exc:  # the run stays RUNNING in MLflow; the gap file says why
                log.error("could not mark MLflow run %s %s: %s", self.run_id, status, redact(str(exc))[:200])
        return self.gap


def _provenance_tags(job: str, spec: AgentSpec, provenance: Mapping[str, Any] | None,
                     artifact: str) -> dict[str, str]:
    prov = dict(provenance or {})
    inputs = json.dumps(prov.get("inputs", []), default=str)
    if len(inputs) > MAX_TAG_VALUE:
        note = f'..." [truncated; full list in artifact {artifact}]'
        inputs = inputs[: MAX_TAG_VALUE - len(note)] + note
    tags = {
        "venus.job": job,
        "venus.git_revision": str(prov.get("git_revision") or os.environ.get(GIT_ENV) or "unknown"),
        "venus.spec_sha256": str(prov.get("spec_sha256") or spec_hash(spec)),
        "venus.inputs": inputs,
        "venus.agent": spec.name,
    }
    if os.environ.get(IMAGE_ENV):
        tags["venus.image"] = os.environ[IMAGE_ENV]
    return tags


def start_pipeline_run(spec: AgentSpec, run_name: str | None = None, *, client: MlflowClient | None = None,
                       provenance: Mapping[str, Any] | None = None) -> str:
    """Create the parent run of one pipeline run in experiment `platform.experiment`; returns its id.

    Pass the id to every stage as `$VENUS_PARENT_RUN_ID`. The run stays RUNNING until
    `finish_pipeline_run`. Tag `venus.git_revision` is `provenance["git_revision"]`, else
    `$VENUS_GIT_REV`, else "unknown" (this layer runs no git): callers pass the revision their
    stages will report (pipelines/local.py, runtime.tracking.ensure_pipeline_run).
    """
    client = client or make_client(spec.platform.tracking_uri)
    exp = with_retries("experiment", lambda: experiment_id(client, spec.platform.experiment,
                                                              spec.platform.artifact_store))
    tags = _provenance_tags("pipeline", spec, provenance, "provenance.json")
    tags["venus.pipeline"] = "true"
    name = run_name or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run = with_retries("pipeline run", lambda: client.create_run(exp, run_name=name, tags=tags))
    rid = run.info.run_id
    client.log_batch(rid, params=[Param(k, v) for k, v in flatten({"name": spec.name, "model": spec_to_dict(spec)[
        "model"]}).items()])
    client.log_dict(rid, spec_to_dict(spec), "spec.json")
    return str(rid)


def finish_pipeline_run(run_id: str, spec: AgentSpec, status: str = "FINISHED",
                        client: MlflowClient | None = None) -> None:
    client = client or make_client(spec.platform.tracking_uri)
    client.set_terminated(run_id, status=status)


@contextmanager
def stage_run(job: str, spec: AgentSpec, parent_run_id: str | None = None, *, section: str | None = None,
              provenance: Mapping[str, Any] | None = None, client: MlflowClient | None = None,
              spill_dir: str | Path | None = None, run_name: str | None = None,
              **writer_options: Any) -> Iterator[MlflowTracker]:
    """A nested run named `run_name` (default: `job`) under the pipeline's parent run, yielding its MlflowTracker.

    `section` is the spec section logged as params (default: the job's own, JOB_SECTIONS);
    `provenance` is the job's provenance dict (runtime.common.provenance: git_revision,
    spec_sha256, inputs), logged as tags and as artifact `provenance.json`. The run ends FINISHED,
    or FAILED when the body raises (the exception propagates).
    """
    section = section or JOB_SECTIONS.get(job)
    if section is None:
        raise KeyError(f"job {job!r} has no default spec section (known: {sorted(JOB_SECTIONS)}); pass section=")
    params = flatten(spec_section(spec, section), section)
    client = client or make_client(spec.platform.tracking_uri)
    parent = parent_run_id or os.environ.get(PARENT_ENV) or None
    if parent is not None:
        exp = str(with_retries("parent run", lambda: client.get_run(parent)).info.experiment_id)
    else:
        exp = with_retries("experiment", lambda: experiment_id(client, spec.platform.experiment,
                                                                  spec.platform.artifact_store))
    tags = _provenance_tags(job, spec, provenance, "provenance.json")
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
    run = with_retries(f"{job} run", lambda: client.create_run(exp, run_name=run_name or job, tags=tags))
    tracker = MlflowTracker(client, run.info.run_id, spill_dir=spill_dir, **writer_options)
    tracker.log_params(params)
    if provenance is not None:
        client.log_dict(run.info.run_id, dict(provenance), "provenance.json")
    status = RunStatus.to_string(RunStatus.FINISHED)
    try:
        yield tracker
    except BaseException:
        status = RunStatus.to_string(RunStatus.FAILED)
        raise
    finally:
        tracker.close(status)
