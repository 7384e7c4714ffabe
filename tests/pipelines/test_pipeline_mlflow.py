"""A local run's MLflow parent run (pipelines/local.py `_ParentRun`) on a real SQLite store, without
running the pipeline: the parent carries the git revision its stages report, a stage nested under
it is named as the Kubeflow UI shows the task, and closing it with a (fabricated) run summary
leaves the stage table on it: `<stage>/<metric>` metrics, stages.json and stages.html."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipelines.gui_agent import build_pipeline
from pipelines.local import _ParentRun
from pipelines.progress import plan_stages
from venus_core.config import load_spec, spec_hash
from venus_core.config.stages import stage_display_name
from venus_core.runtime.common import git_revision
from venus_core.runtime.tracking import KFP_RUN_ENV, PARENT_ENV, TRACKING_ENV, job_tracking

TINY = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def test_kubeflow_display_names_are_the_stage_display_names() -> None:
    spec = load_spec(TINY)
    plans = plan_stages(build_pipeline(spec).pipeline_spec, spec)
    assert [p.label for p in plans] == [stage_display_name(p.stage, p.domain) for p in plans]
    assert "offline_rl: grounding" in [p.label for p in plans] and "evaluate" in [p.label for p in plans]


def test_local_parent_run_has_the_git_revision_and_the_stage_table(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv(TRACKING_ENV, uri)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in (PARENT_ENV, KFP_RUN_ENV, "VENUS_GIT_REV"):
        monkeypatch.delenv(name, raising=False)  # the revision comes from git, as on a fresh clone
    spec = load_spec(TINY, [f"platform.artifact_store=file://{tmp_path}/art", "platform.experiment=local-parent"])
    parent = _ParentRun(spec)
    assert parent.run_id is not None and parent.git_revision == git_revision() != "unknown"
    with parent.exported():
        assert os.environ["VENUS_GIT_REV"] == parent.git_revision  # what the stage subprocesses see
        with job_tracking("offline_rl", spec, tmp_path / "rl", section="offline_rl.grounding",
                          tags={"venus.domain": "grounding"}) as tracker:
            tracker.log_metrics({"reward/mean": 0.25}, step=0)
    assert "VENUS_GIT_REV" not in os.environ

    stages = [
        {"task": "score-data", "stage": "score_data", "status": "SUCCESS", "seconds": 0.0, "cached": True,
         "metrics": {"mixture_train_records": 40.0}},
        {"task": "offline-rl", "stage": "offline_rl", "domain": "grounding", "status": "SUCCESS", "seconds": 3.5,
         "cached": False, "metrics": {"held_out_accuracy": 0.5, "train_s": 3.0}},
    ]
    summary = {"agent": spec.name, "spec_sha256": spec_hash(spec), "overrides": [], "status": "SUCCESS",
               "seconds": 12.5, "stages": stages}
    info = parent.finish(summary, tmp_path / "summary.json")
    assert info is not None and info["run_id"] == parent.run_id

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(parent.run_id)
    child = client.get_run(tracker.run_id or "")
    assert child.info.run_name == "offline_rl: grounding" and child.data.tags["mlflow.parentRunId"] == parent.run_id
    assert run.data.tags["venus.git_revision"] == child.data.tags["venus.git_revision"] == parent.git_revision
    assert run.info.status == "FINISHED" and run.data.metrics["pipeline_seconds"] == 12.5
    assert {k: v for k, v in run.data.metrics.items() if "/" in k} == {
        "score_data/mixture_train_records": 40.0,  # a cached stage: in the table, without seconds
        "offline_rl.grounding/held_out_accuracy": 0.5, "offline_rl.grounding/train_s": 3.0,
        "offline_rl.grounding/seconds": 3.5}
    assert {"stages.json", "stages.html", "summary.json", "spec.json"} <= {
        a.path for a in client.list_artifacts(parent.run_id)}
    table = json.loads(Path(client.download_artifacts(parent.run_id, "stages.json", str(tmp_path))).read_text())
    assert table["status"] == "SUCCESS" and table["agent"] == spec.name
    assert [(r["name"], r["key"], r["cached"], r["run_id"]) for r in table["stages"]] == [
        ("score_data", "score_data", True, None),
        ("offline_rl: grounding", "offline_rl.grounding", False, child.info.run_id)]
    page = Path(client.download_artifacts(parent.run_id, "stages.html", str(tmp_path))).read_text()
    assert "<td><b>offline_rl: grounding</b></td>" in page and "held_out_accuracy" in page and "cached" in page
