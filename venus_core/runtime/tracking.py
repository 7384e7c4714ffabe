"""Where a runtime job's metrics go: always `OUT/metrics.jsonl`, and MLflow when a store is configured.

    with job_tracking("mid_train", spec, out) as tracker:     # a TeeTracker (Jsonl + MLflow)
        train(..., tracker=tracker)
        tracker.record_provenance(report["provenance"])

The MLflow store is `$MLFLOW_TRACKING_URI` when set (the endpoint a pod or `venus run` exports),
else the spec's `platform.tracking_uri`; the value `none` (or `off`, or empty) turns MLflow off and
leaves only the JSONL record (the test suite sets it, see tests/conftest.py). A relative
`sqlite:///runs/mlflow.db` is made absolute against the working directory, which is the file
`venus ui` opens from the same directory.

Nesting: each job is one MLflow run under the pipeline's parent run, named as the Kubeflow UI shows
its task (`offline_rl: grounding`, `merge`: venus_core.config.stages.stage_display_name of the job
and its `venus.domain` tag; tag `venus.job` holds the bare job name). The parent is
`$VENUS_PARENT_RUN_ID` when given (`venus run` creates it and exports it), else, inside a Kubeflow
run (`$KFP_RUN_ID`, which pipelines/k8s.py fills from the pod's `pipeline/runid` label), the run
tagged `venus.kfp_run_id` in the experiment, created by the first stage that needs it. The run id is not a component input: an input that changes every run would
defeat KFP's caching. Without either the job's run has no parent.

Departures from a plain `mlflow.start_run`: the run is opened through `io.tracking.stage_run`
(buffered, outage-tolerant); when MLflow cannot even be reached to create the run, the job goes on
with the JSONL record only and says so in `OUT/mlflow_run.json` instead of failing a training run
over its bookkeeping. Artifacts above `MAX_UPLOAD_BYTES` (multi-GB checkpoints, which already live
in the pipeline's artifact store) are not copied into MLflow: their path is recorded as a tag.

What the pipeline's runs carry besides metrics: every run, the parent included, the git revision
(`runtime.common.git_revision`: `$VENUS_GIT_REV` in the images and in a local run's stages, else
`git rev-parse`); each job's dataset inputs (the Venus datasets among its provenance inputs, as
MLflow dataset inputs whose digest is the manifest's sha256, io.tracking.datasets); the merge run, which the registered
model version points at, the dataset inputs of the stage runs before it; the parent, when the last
stage closes it (`finish_parent`), the stage-by-stage table (`io.tracking.stages`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from venus_core.config import AgentSpec, spec_hash
from venus_core.config.redact import redact
from venus_core.config.stages import stage_display_name
from venus_core.runtime.common import git_revision, write_json_atomic
from venus_core.train.tracker import JsonlTracker

TRACKING_ENV = "MLFLOW_TRACKING_URI"
PARENT_ENV = "VENUS_PARENT_RUN_ID"  # same name as venus_core.io.tracking.PARENT_ENV (imported lazily there)
KFP_RUN_ENV = "KFP_RUN_ID"
OFF_VALUES = frozenset({"", "none", "off"})
RUN_RECORD = "mlflow_run.json"
MAX_UPLOAD_BYTES = 64 * 1024 * 1024
KFP_TAG = "venus.kfp_run_id"
# the context (`mlflow.data.context`) of a job's dataset inputs; other jobs: "training"
DATASET_CONTEXT = {"evaluate": "evaluation", "score_data": "source", "merge": "training"}
log = logging.getLogger(__name__)


def resolve_tracking_uri(spec: AgentSpec) -> str | None:
    """The MLflow tracking URI of this job (`$MLFLOW_TRACKING_URI`, else the spec), None when off."""
    uri = os.environ.get(TRACKING_ENV)
    if uri is None:
        uri = spec.platform.tracking_uri
    uri = uri.strip()
    if uri.lower() in OFF_VALUES:
        return None
    return absolute_store_uri(uri)


def absolute_store_uri(uri: str) -> str:
    """`sqlite:///rel/path.db` -> `sqlite:////abs/rel/path.db` (against the working directory); others unchanged."""
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        path = uri[len(prefix):]
        if path and path != ":memory:" and not path.startswith("/"):
            return prefix + str(Path(path).resolve())
    return uri


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class TeeTracker:
    """Tracker protocol over the JSONL record and, when configured, an MLflow run.

    The JSONL file is the local record and is written first; MLflow errors are logged and never
    raised (the MLflow side is buffered already; an artifact upload it rejects must not end a run).
    """

    def __init__(self, jsonl: JsonlTracker, mlflow: Any | None = None, *, parent_run_id: str | None = None,
                 tracking_uri: str | None = None, experiment_id: str | None = None, job: str | None = None) -> None:
        self.jsonl = jsonl
        self.job = job
        self.mlflow = mlflow
        self.parent_run_id = parent_run_id
        self.tracking_uri = tracking_uri
        self.experiment_id = experiment_id
        self.skipped_artifacts: dict[str, str] = {}

    @property
    def run_id(self) -> str | None:
        return None if self.mlflow is None else str(self.mlflow.run_id)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.jsonl.log_params(params)
        if self.mlflow is not None:
            self.mlflow.log_params(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.jsonl.log_metrics(metrics, step)
        if self.mlflow is not None:
            self.mlflow.log_metrics(metrics, step)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.jsonl.log_artifact(path, name)
        if self.mlflow is None:
            return
        src = Path(path)
        label = name or src.name
        try:
            size = _size(src)
            if size > MAX_UPLOAD_BYTES:
                self.skipped_artifacts[label] = str(src)
                self.mlflow.set_tags({f"venus.artifact.{label}": f"{src} ({size} bytes, not copied into MLflow)"})
                return
            self.mlflow.log_artifact(src, name)
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not end the job
            log.error("MLflow artifact %s of run %s not stored: %s", src, self.run_id, str(exc)[:300])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self.mlflow is not None:
            self.mlflow.set_tags(tags)

    def record_provenance(self, provenance: Mapping[str, Any]) -> None:
        """Inputs (URI + sha256) and git revision of the finished job as tags, `provenance.json`, and
        the inputs that are Venus datasets (digest `manifest:<sha256>`) as MLflow dataset inputs."""
        if self.mlflow is None:
            return
        from venus_core.io.tracking.runs import MAX_TAG_VALUE

        inputs = json.dumps(provenance.get("inputs", []), default=str)
        if len(inputs) > MAX_TAG_VALUE:
            note = '..." [truncated; full list in artifact provenance.json]'
            inputs = inputs[: MAX_TAG_VALUE - len(note)] + note
        self.mlflow.set_tags({"venus.inputs": inputs,
                              "venus.git_revision": str(provenance.get("git_revision") or git_revision())})
        try:
            self.mlflow.client.log_dict(self.mlflow.run_id, dict(provenance), "provenance.json")
        except Exception as exc:  # noqa: BLE001
            log.error("MLflow: provenance.json of run %s not stored: %s", self.run_id, str(exc)[:300])
        job = str(provenance.get("job") or self.job or "")
        try:
            log_datasets(self.mlflow.client, str(self.run_id), provenance.get("inputs", []),
                         DATASET_CONTEXT.get(job, "training"))
        except Exception as exc:  # noqa: BLE001
            log.error("MLflow: dataset inputs of run %s not stored: %s", self.run_id, str(exc)[:300])


def _manifest_profile(uri: str) -> dict[str, Any]:
    """Record counts from a local dataset's manifest.json ({} when it is not readable here)."""
    try:
        manifest = json.loads((Path(uri) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: manifest[k] for k in ("records", "counts_by_domain", "counts_by_kind", "created_by") if k in manifest}


def log_datasets(client: Any, run_id: str, inputs: Any, context: str) -> list[Any]:
    """Log the Venus datasets among provenance `inputs` ([{uri, sha256}]) on run `run_id`."""
    from venus_core.io.tracking.datasets import dataset_input, is_dataset_digest, log_dataset_inputs

    found = [dataset_input(str(i.get("fetched_from") or i["uri"]), str(i["sha256"]), context=context,
                           profile={"uri": str(i["uri"]), **_manifest_profile(str(i["uri"]))})
             for i in inputs if isinstance(i, Mapping) and is_dataset_digest(str(i.get("sha256", "")))]
    log_dataset_inputs(client, run_id, found)
    return found


def ensure_pipeline_run(client: Any, spec: AgentSpec, kfp_run_id: str) -> str:
    """The parent run of Kubeflow run `kfp_run_id` in the spec's experiment, created if missing.

    Stages that start at the same moment (cached predecessors) may both create one; each then
    keeps the oldest (start time, then id) and deletes its own if it lost, so all agree.
    """
    from venus_core.io.tracking import experiment_id, start_pipeline_run

    exp = experiment_id(client, spec.platform.experiment, spec.platform.artifact_store)
    query = f"tags.`{KFP_TAG}` = '{kfp_run_id}' and tags.`venus.pipeline` = 'true'"

    def existing() -> list[Any]:
        runs = client.search_runs([exp], filter_string=query, max_results=50)
        return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))

    found = existing()
    if found:
        return str(found[0].info.run_id)
    mine = start_pipeline_run(spec, f"{spec.name}-{kfp_run_id[:8]}", client=client,
                              provenance={"git_revision": git_revision(), "spec_sha256": spec_hash(spec)})
    client.set_tag(mine, KFP_TAG, kfp_run_id)
    winner = str(existing()[0].info.run_id)
    if winner != mine:
        client.delete_run(mine)
    return winner


def _record(out: Path, data: dict[str, Any]) -> None:
    write_json_atomic(out / RUN_RECORD, data)


@contextlib.contextmanager
def job_tracking(job: str, spec: AgentSpec, out: Path, *, section: str | None = None,
                 tags: Mapping[str, str] | None = None) -> Iterator[TeeTracker]:
    """The job's tracker: `OUT/metrics.jsonl`, teed into a nested MLflow run when a store is set.

    `section` is the spec section logged as params (default: the job's own, `JOB_SECTIONS`);
    `tags` are added to the run. The MLflow run ends FAILED when the body raises;
    `OUT/metrics.jsonl` is uploaded either way.
    """
    out.mkdir(parents=True, exist_ok=True)
    jsonl = JsonlTracker(out / "metrics.jsonl")
    uri = resolve_tracking_uri(spec)
    if uri is None:
        yield TeeTracker(jsonl)
        return
    from venus_core.io.tracking import make_client, stage_run

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    kfp_run = os.environ.get(KFP_RUN_ENV) or None
    run_tags = {"venus.agent": spec.name, "venus.spec_sha256": spec_hash(spec), "venus.git_revision": git_revision(),
                **({KFP_TAG: kfp_run} if kfp_run else {}), **(tags or {})}
    try:
        client = make_client(uri)
        parent = os.environ.get(PARENT_ENV) or (ensure_pipeline_run(client, spec, kfp_run) if kfp_run else None)
        ctx = stage_run(job, spec, parent, section=section, client=client, spill_dir=out / ".tracking",
                        run_name=stage_display_name(job, (tags or {}).get("venus.domain")))
        ml = ctx.__enter__()
    except Exception as exc:  # noqa: BLE001 - no tracking store: keep the JSONL record, say why
        msg = redact(f"MLflow at {uri} unavailable ({type(exc).__name__}: {str(exc)[:300]}); metrics only in "
                     "metrics.jsonl")
        print(f"[{job}] warning: {msg}", file=sys.stderr)
        _record(out, {"tracking_uri": redact(uri), "run_id": None, "error": msg})
        yield TeeTracker(jsonl)
        return
    tee = TeeTracker(jsonl, ml, parent_run_id=parent, tracking_uri=uri,
                     experiment_id=str(client.get_run(ml.run_id).info.experiment_id), job=job)
    tee.set_tags(run_tags)
    shown = redact(uri)  # a URI may carry user:password (records and logs never do)
    _record(out, {"tracking_uri": shown, "run_id": ml.run_id, "parent_run_id": parent,
                  "experiment_id": tee.experiment_id, "job": job})
    print(f"[{job}] MLflow run {ml.run_id} (parent {parent}) at {shown}", file=sys.stderr)
    failed: BaseException | None = None
    try:
        yield tee
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if (out / "metrics.jsonl").is_file():
            tee.log_artifact(out / "metrics.jsonl")
        if failed is None:
            ctx.__exit__(None, None, None)
        else:
            ctx.__exit__(type(failed), failed, failed.__traceback__)
        gap = ml.gap.to_dict() if ml.gap is not None else {}
        _record(out, {"tracking_uri": shown, "run_id": ml.run_id, "parent_run_id": parent,
                      "experiment_id": tee.experiment_id, "job": job,
                      "status": "FAILED" if failed is not None else "FINISHED", "gap": gap,
                      "skipped_artifacts": tee.skipped_artifacts})


def finish_parent(tracker: TeeTracker, status: str = "FINISHED") -> None:
    """Close the pipeline's parent run (the last stage does this on a cluster): the stage table of
    the stage runs under it (`io.tracking.stages`: headline metrics as `<stage>/<metric>`,
    `stages.json`, `stages.html`), then terminated with `status`."""
    if tracker.mlflow is None or tracker.parent_run_id is None:
        return
    from venus_core.io.tracking.stages import log_stage_table, rows_from_runs

    client = tracker.mlflow.client
    try:
        tracker.mlflow.flush()  # this stage's own metrics belong in the table
        rows = rows_from_runs(client, tracker.parent_run_id, running_as=status)
        log_stage_table(client, tracker.parent_run_id, rows, extra={"status": status},
                        title=f"{client.get_run(tracker.parent_run_id).info.run_name}: {status}")
    except Exception as exc:  # noqa: BLE001
        log.error("MLflow: stage table of parent run %s not stored: %s", tracker.parent_run_id, str(exc)[:300])
    try:
        client.set_terminated(tracker.parent_run_id, status=status)
    except Exception as exc:  # noqa: BLE001
        log.error("MLflow: could not finish parent run %s: %s", tracker.parent_run_id, str(exc)[:300])



def stage_runs(tracker: TeeTracker) -> dict[str, str]:
    """Run ids of the sibling stage runs under the same parent, by stage display name:
    {"mid_train": id, "offline_rl: web": id, ...}."""
    if tracker.mlflow is None or tracker.parent_run_id is None or tracker.experiment_id is None:
        return {}
    from venus_core.io.tracking.stages import run_stage_name

    runs = tracker.mlflow.client.search_runs([tracker.experiment_id],
                                             filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_run_id}'")
    return {run_stage_name(r): r.info.run_id for r in sorted(runs, key=lambda r: r.info.start_time or 0)
            if r.info.run_id != tracker.run_id}


def register_merged(tracker: TeeTracker, spec: AgentSpec, model_dir: Path, lineage: Mapping[str, Any]) -> str | None:
    """Register the merged checkpoint as a new version of model `spec.name` with lineage tags.

    The version's source run is the merge run (`run_id`; `source` is the model folder among its
    artifacts). Lineage: the pipeline's parent run, the stage runs under it, the spec hash and what
    the caller adds (merge method, specialists), as `venus.lineage.*` tags; the datasets the stages
    before the merge used are logged on the merge run as its dataset inputs (context "training",
    input tag `venus.stage`; a stage taken from kfp.local's cache ran under an earlier parent and
    is not among them) and listed in tag `venus.lineage.datasets`. Returns the version number,
    None when MLflow is off or the registry refused (logged: a registry hiccup does not fail the merge).
    """
    if tracker.mlflow is None:
        return None
    from venus_core.io.tracking import register_model
    from venus_core.io.tracking.datasets import copy_dataset_inputs, describe

    siblings = stage_runs(tracker)
    full = {"parent_run": tracker.parent_run_id or "", "stage_runs": siblings,
            "spec_sha256": spec_hash(spec), **lineage}
    try:
        full["datasets"] = describe(copy_dataset_inputs(tracker.mlflow.client, siblings, str(tracker.run_id)))
    except Exception as exc:  # noqa: BLE001
        log.error("MLflow: dataset inputs of the merge run %s not stored: %s", tracker.run_id, str(exc)[:300])
    try:
        tracker.mlflow.flush()
        version = register_model(tracker.mlflow.client, str(tracker.run_id), model_dir, spec.name, full,
                                 description=f"{spec.name}: merged ({lineage.get('merge_method', '')}) checkpoint")
    except Exception as exc:  # noqa: BLE001
        log.error("MLflow: merged model %s not registered: %s", model_dir, str(exc)[:300])
        print(f"[merge] warning: model not registered in MLflow: {str(exc)[:300]}", file=sys.stderr)
        return None
    tracker.jsonl.log_params({"registered_model": spec.name, "registered_version": str(version.version)})
    return str(version.version)
