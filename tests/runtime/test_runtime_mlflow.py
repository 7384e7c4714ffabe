"""Runtime jobs -> MLflow (venus_core/runtime/tracking.py) on one real local SQLite store per module.

The store's start-up costs seconds here, so the module shares one store and checks a whole
pipeline's worth of wiring per test: a real `merge` job (tiny safetensors checkpoints) nested under
the parent run found through the Kubeflow run id, a training-like stage (with a dataset input) and
a failing stage, run names as Kubeflow displays the tasks, the parent's git revision and stage
table, the model registry entry of the merged model (its source run and datasets), and the fallback
to the JSONL record when MLflow is down.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from venus_core.config import load_spec, spec_hash
from venus_core.models.integrity import write_manifest
from venus_core.runtime import merge as merge_job
from venus_core.runtime.common import git_revision, provenance
from venus_core.runtime.tracking import (KFP_RUN_ENV, PARENT_ENV, RUN_RECORD, TRACKING_ENV, absolute_store_uri,
                                         finish_parent, job_tracking, resolve_tracking_uri)

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
KEYS = {"model.language_model.layers.0.mlp.up_proj.weight": (8, 4), "model.visual.blocks.0.attn.qkv.weight": (6, 4)}


def _ckpt(path: Path, seed: int, base: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = ({k: torch.randn(s, generator=g) for k, s in KEYS.items()} if base is None
         else {k: v + torch.randn(v.shape, generator=g) * 0.1 for k, v in base.items()})
    path.mkdir(parents=True)
    save_file(t, str(path / "model.safetensors"))
    (path / "config.json").write_text('{"model_type": "qwen3_vl"}')
    write_manifest(path)  # as every stage output carries (the merge job verifies its inputs)
    return t


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mlflow-store")


@pytest.fixture
def tracked(store: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{store}/mlflow.db"
    monkeypatch.setenv(TRACKING_ENV, uri)
    monkeypatch.delenv(PARENT_ENV, raising=False)
    monkeypatch.delenv(KFP_RUN_ENV, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    return uri


def test_tracking_uri_from_env_else_spec_and_none_turns_it_off(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    spec = load_spec(SPEC, ["platform.tracking_uri=http://mlflow.venus.svc:5000"])
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    assert resolve_tracking_uri(spec) == "http://mlflow.venus.svc:5000"
    monkeypatch.setenv(TRACKING_ENV, "none")
    assert resolve_tracking_uri(spec) is None
    monkeypatch.setenv(TRACKING_ENV, "sqlite:///runs/mlflow.db")
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(spec) == f"sqlite:///{tmp_path}/runs/mlflow.db"  # what `venus ui` opens here
    assert absolute_store_uri("sqlite:////abs/m.db") == "sqlite:////abs/m.db"
    monkeypatch.setenv(TRACKING_ENV, "OFF")
    with job_tracking("merge", spec, tmp_path / "out") as tracker:
        tracker.log_metrics({"x": 1.0}, step=3)
    assert tracker.mlflow is None and not (tmp_path / "out" / RUN_RECORD).exists()
    assert json.loads((tmp_path / "out" / "metrics.jsonl").read_text())["metrics"] == {"x": 1.0}


@pytest.mark.slow
def test_jobs_nest_under_the_kfp_runs_parent_and_the_merged_model_is_registered(
        tracked: str, store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv(KFP_RUN_ENV, "kfp-run-0042")
    sets = ["--set", "platform.experiment=wiring", "--set", f"platform.artifact_store=file://{store}/art",
            "--set", "merge.method=ties"]  # venus-tiny publishes linear; the lineage tags below are TIES's
    spec = load_spec(SPEC, [s for s in sets if s != "--set"])

    data = tmp_path / "data" / "mixture" / "train"  # a Venus dataset: known by its manifest's sha256
    data.mkdir(parents=True)
    (data / "manifest.json").write_text(json.dumps({"records": 12, "counts_by_domain": {"web": 12}}))
    with job_tracking("mid_train", spec, tmp_path / "mid") as tr:  # a trainer logging through the Tracker protocol
        for step in range(3):
            tr.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
        prov = provenance("mid_train", spec, [data])
        tr.record_provenance(prov)
    manifest_sha = prov["inputs"][0]["sha256"].removeprefix("manifest:")
    with pytest.raises(RuntimeError, match="boom"), job_tracking("offline_rl", spec, tmp_path / "rl-web",
                                                                 section="offline_rl.web",
                                                                 tags={"venus.domain": "web"}):
        raise RuntimeError("boom")

    base = _ckpt(tmp_path / "base", 0)
    for i, name in enumerate(("grounding", "mobile", "web")):
        _ckpt(tmp_path / name, i + 1, base)
    out = tmp_path / "merge"
    rc = merge_job.main(["--spec", str(SPEC), *sets, "--base", str(tmp_path / "base"), "--out", str(out),
                         *[a for n in ("grounding", "mobile", "web") for a in ("--model", f"{n}={tmp_path / n}")]])
    assert rc == 0

    record = json.loads((out / RUN_RECORD).read_text())
    assert record["status"] == "FINISHED" and record["tracking_uri"] == tracked
    client = MlflowClient(tracking_uri=tracked, registry_uri=tracked)
    run = client.get_run(record["run_id"])
    parent = client.get_run(record["parent_run_id"])
    assert parent.data.tags["venus.kfp_run_id"] == "kfp-run-0042" and parent.data.tags["venus.pipeline"] == "true"
    assert parent.data.tags["venus.git_revision"] == git_revision() != "unknown"  # as its stages say
    tags = run.data.tags
    assert tags["mlflow.runName"] == "merge" and tags["mlflow.parentRunId"] == parent.info.run_id
    assert tags["venus.agent"] == "venus-tiny" and tags["venus.spec_sha256"] == spec_hash(spec)
    assert tags["venus.kfp_run_id"] == "kfp-run-0042" and tags["venus.git_revision"]
    assert len(json.loads(tags["venus.inputs"])) == 4  # base + three specialists, each with its sha256
    assert run.data.params["merge.method"] == "ties" and run.data.params["merge.density"] == "0.2"
    assert "ties/language/sign_conflict_rate" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.jsonl", "report.json", "provenance.json", "model"} <= arts

    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_name = {r.data.tags["mlflow.runName"]: r for r in children}
    assert set(by_name) == {"mid_train", "offline_rl: web", "merge"}  # one parent for the whole Kubeflow run
    web = by_name["offline_rl: web"]  # named as the Kubeflow UI shows the task; the job name is a tag
    assert web.data.tags["venus.job"] == "offline_rl" and web.data.tags["venus.domain"] == "web"
    assert web.info.status == "FAILED" and by_name["mid_train"].info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(by_name["mid_train"].info.run_id, "train/loss")] == [
        1.0, 0.5, 1 / 3]
    assert web.data.params["offline_rl.web.reward"] == "navigation_web"
    mid_inputs = client.get_run(by_name["mid_train"].info.run_id).inputs.dataset_inputs
    assert [(d.dataset.name, d.dataset.digest) for d in mid_inputs] == [("mixture/train", manifest_sha[:36])]
    assert json.loads(mid_inputs[0].dataset.profile) == {"sha256": manifest_sha, "uri": str(data), "records": 12,
                                                         "counts_by_domain": {"web": 12}}
    assert {t.key: t.value for t in mid_inputs[0].tags}["mlflow.data.context"] == "training"

    version = client.get_model_version("venus-tiny", "1")  # its source run is the merge run ...
    assert version.run_id == run.info.run_id and version.source == f"{run.info.artifact_uri}/model"
    merge_inputs = client.get_run(run.info.run_id).inputs.dataset_inputs  # ... which lists the data used
    assert [(d.dataset.digest, {t.key: t.value for t in d.tags}["venus.stage"]) for d in merge_inputs] == [
        (manifest_sha[:36], "mid_train")]
    assert json.loads(version.tags["venus.lineage.datasets"])[0]["sha256"] == manifest_sha
    lineage = json.loads(version.tags["venus.lineage.stage_runs"])
    assert lineage["mid_train"] == by_name["mid_train"].info.run_id
    assert lineage["offline_rl: web"] == web.info.run_id
    assert version.tags["venus.lineage.parent_run"] == parent.info.run_id
    assert version.tags["venus.lineage.merge_method"] == "ties"

    with job_tracking("evaluate", spec, tmp_path / "eval") as ev:  # the last stage closes the parent
        ev.log_metrics({"merged/web/success": 0.5, "merged/web/success_n": 8.0}, step=0)
        finish_parent(ev)
    assert ev.parent_run_id == parent.info.run_id
    closed = client.get_run(parent.info.run_id)
    assert closed.info.status == "FINISHED"
    # the stage table: headline metrics per stage on the parent, and as stages.json / stages.html
    assert closed.data.metrics["mid_train/train/loss"] == pytest.approx(1 / 3)
    assert closed.data.metrics["evaluate/merged/web/success"] == 0.5
    assert "evaluate/merged/web/success_n" not in closed.data.metrics and "mid_train/seconds" in closed.data.metrics
    assert {"stages.json", "stages.html", "spec.json"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    table = json.loads(Path(client.download_artifacts(parent.info.run_id, "stages.json", str(tmp_path))).read_text())
    assert [(r["name"], r["status"]) for r in table["stages"]] == [
        ("mid_train", "FINISHED"), ("offline_rl: web", "FAILED"), ("merge", "FINISHED"), ("evaluate", "FINISHED")]
    page = Path(client.download_artifacts(parent.info.run_id, "stages.html", str(tmp_path))).read_text()
    assert page.startswith("<!doctype html>") and "offline_rl: web" in page and "merged/web/success" in page


def test_unreachable_tracking_server_leaves_the_job_running_on_its_jsonl_record(
        tracked: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import venus_core.io.tracking.runs as runs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(TRACKING_ENV, f"http://127.0.0.1:{port}")
    monkeypatch.setattr(runs.time, "sleep", lambda s: None)  # with_retries' back-off, not the behaviour under test
    spec = load_spec(SPEC)
    with job_tracking("mid_train", spec, tmp_path) as tracker:
        tracker.log_metrics({"loss": 2.0}, step=0)
    assert tracker.mlflow is None
    record = json.loads((tmp_path / RUN_RECORD).read_text())
    assert record["run_id"] is None and f"127.0.0.1:{port}" in record["error"]
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["metrics"] == {"loss": 2.0}
