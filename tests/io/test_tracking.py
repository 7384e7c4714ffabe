"""MLflow tracking on a local SQLite store: nested stage runs, params/tags, the outage buffer
(against an unreachable http:// URI: spill, replay, gap report), the registry, compare and the CLI."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import typer
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from typer.testing import CliRunner

from venus_core.cli.runs_cmd import register, ui_command
from venus_core.config import AgentSpec, apply_overrides, spec_from_dict, spec_hash, spec_to_dict
from venus_core.io.tracking import (PARENT_ENV, MlflowTracker, compare_runs, flatten, format_diff, is_transient,
                                    log_stage_table, make_client, register_model, rows_from_summary, stage_run,
                                    start_pipeline_run)
from venus_core.train.tracker import Tracker


@pytest.fixture(autouse=True)
def _mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.delenv(PARENT_ENV, raising=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mlflow")


_EXP = iter(range(10_000))


def _spec(store: Path, *overrides: str) -> AgentSpec:
    base = [f"platform.tracking_uri=sqlite:///{store}/mlflow.db", f"platform.artifact_store=file://{store}/art"]
    return spec_from_dict(apply_overrides({}, [*base, *overrides]))


@pytest.fixture
def spec(store: Path, request: pytest.FixtureRequest) -> AgentSpec:
    return _spec(store, f"platform.experiment=exp-{request.node.name[:40]}-{next(_EXP)}")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_stage_run_nests_under_parent_with_params_tags_metrics_and_artifacts(
        spec: AgentSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENUS_IMAGE", "venus/train-gpu@sha256:abc")
    client = make_client(spec.platform.tracking_uri)
    parent = start_pipeline_run(spec, "pipe-1", client=client)
    monkeypatch.setenv(PARENT_ENV, parent)
    report = tmp_path / "r.json"
    report.write_text('{"ok": true}')
    prov = {"git_revision": "deadbeef", "spec_sha256": spec_hash(spec),
            "inputs": [{"uri": "s3://b/data", "sha256": "f" * 64}]}
    with stage_run("offline_rl", spec, section="offline_rl.grounding", provenance=prov, client=client,
                   spill_dir=tmp_path / "spill", flush_interval=0.05) as tracker:
        assert isinstance(tracker, Tracker)
        for step in range(5):
            tracker.log_metrics({"loss": 1.0 / (step + 1), "reward": float(step)}, step=step)
        tracker.log_artifact(report, "reports/report.json")
        rid = tracker.run_id
    run = client.get_run(rid)
    assert run.info.run_name == "offline_rl" and run.info.status == "FINISHED"
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.tags["venus.git_revision"] == "deadbeef"
    assert run.data.tags["venus.spec_sha256"] == spec_hash(spec)
    assert run.data.tags["venus.image"] == "venus/train-gpu@sha256:abc"
    assert json.loads(run.data.tags["venus.inputs"]) == prov["inputs"]
    expected = flatten(spec_to_dict(spec)["offline_rl"]["grounding"], "offline_rl.grounding")
    assert run.data.params == expected and run.data.params["offline_rl.grounding.kl_coef"] == "0.004"
    assert _history(client, rid, "reward") == [(s, float(s)) for s in range(5)]
    assert {f.path for f in client.list_artifacts(rid, "reports")} == {"reports/report.json"}
    assert {f.path for f in client.list_artifacts(rid)} >= {"provenance.json"}
    assert not any(k.startswith("venus.tracking.") for k in run.data.metrics)  # no outage, no gap metrics


def test_stage_run_marks_failed_and_reraises(spec: AgentSpec, tmp_path: Path) -> None:
    client = make_client(spec.platform.tracking_uri)
    with pytest.raises(RuntimeError, match="boom"):
        with stage_run("mid_train", spec, client=client, spill_dir=tmp_path) as tracker:
            tracker.log_metrics({"loss": 2.0}, step=0)
            raise RuntimeError("boom")
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FAILED" and run.data.metrics["loss"] == 2.0
    assert run.data.params["mid_train.lr"] == str(spec.mid_train.lr)
    assert "mlflow.parentRunId" not in run.data.tags


def test_unknown_job_or_section_is_a_clear_error(spec: AgentSpec) -> None:
    with pytest.raises(KeyError, match="no default spec section"):
        with stage_run("train_dragon", spec):
            pass
    with pytest.raises(KeyError, match="offline_rl.nope"):
        with stage_run("offline_rl", spec, section="offline_rl.nope"):
            pass


def test_flatten_respects_mlflow_limits() -> None:
    flat = flatten({"a": {"b": 1, "c": [1, 2]}, "long": "x" * 7000, "we!rd key": None, "empty": {}})
    assert flat["a.b"] == "1" and flat["a.c"] == "[1, 2]" and flat["we_rd key"] == "None" and flat["empty"] == "{}"
    assert len(flat["long"]) == 6000 and flat["long"].endswith("[truncated]")


def test_inputs_tag_is_truncated_with_a_pointer(spec: AgentSpec, tmp_path: Path) -> None:
    client = make_client(spec.platform.tracking_uri)
    prov = {"inputs": [{"uri": f"s3://bucket/shard-{i:05d}", "sha256": "a" * 64} for i in range(200)]}
    with stage_run("merge", spec, provenance=prov, client=client, spill_dir=tmp_path) as tracker:
        pass
    run = client.get_run(tracker.run_id)
    tag = run.data.tags["venus.inputs"]
    assert len(tag) <= 8000 and tag.endswith("full list in artifact provenance.json]")
    local = client.download_artifacts(tracker.run_id, "provenance.json", str(tmp_path))
    assert len(json.loads(Path(local).read_text())["inputs"]) == 200


def test_param_relogged_with_another_value_becomes_a_conflict_tag(spec: AgentSpec, tmp_path: Path) -> None:
    client = make_client(spec.platform.tracking_uri)
    with stage_run("evaluate", spec, client=client, spill_dir=tmp_path) as tracker:
        tracker.log_params({"seed": 1, "domain": "web"})
        tracker.log_params({"seed": 2, "domain": "web"})
        tracker.log_metrics({"acc": 0.5}, step=1)
    run = client.get_run(tracker.run_id)
    assert run.data.params["seed"] == "1" and json.loads(run.data.tags["venus.param_conflicts"]) == {"seed": "2"}
    assert run.data.metrics["acc"] == 0.5 and tracker.gap is not None and tracker.gap.metrics_rejected == 0


def test_outage_buffers_spills_and_replays_then_reports_the_gap(spec: AgentSpec, tmp_path: Path) -> None:
    good = make_client(spec.platform.tracking_uri)
    exp = good.get_experiment_by_name(spec.platform.experiment) or None
    exp_id = exp.experiment_id if exp else good.create_experiment(spec.platform.experiment)
    rid = good.create_run(exp_id, run_name="mid_train").info.run_id
    down = MlflowClient(f"http://127.0.0.1:{_closed_port()}")
    tracker = MlflowTracker(down, rid, spill_dir=tmp_path, max_buffer=50, flush_interval=0.05,
                            backoff=(0.05, 0.2), close_timeout=10)
    t0 = time.monotonic()
    for step in range(120):
        tracker.log_metrics({"loss": float(step)}, step=step)
    deadline = time.monotonic() + 15
    while not tracker.writer.gap.outages and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tracker.writer.gap.outages, "the writer never noticed the outage"
    assert time.monotonic() - t0 < 15  # logging never blocked on the dead server
    spill = tmp_path / f"{rid}.jsonl"
    assert spill.exists() and tracker.writer.gap.metrics_spilled >= 50
    tracker.log_metrics({"loss": 120.0}, step=120)
    report = tmp_path / "report.json"
    report.write_text("{}")
    tracker.log_artifact(report)  # queued: the upload fails while the server is down
    tracker.log_params({"lr": 0.1})
    tracker.writer.client = good  # the server is back (same run, same store)
    gap = tracker.close()
    assert gap.reported_to_server and gap.metrics_unsent == 0 and gap.metrics_rejected == 0
    assert gap.metrics_delayed == 121 and gap.metrics_spilled >= 50
    assert len(gap.outages) == 1 and gap.outages[0].end is not None
    assert _history(good, rid, "loss") == [(s, float(s)) for s in range(121)]
    assert [f.path for f in good.list_artifacts(rid)] == ["report.json"] and not gap.artifacts_unsent
    run = good.get_run(rid)
    assert run.data.params == {"lr": "0.1"}
    assert run.info.status == "FINISHED"
    assert run.data.metrics["venus.tracking.metrics_spilled"] == gap.metrics_spilled
    assert run.data.metrics["venus.tracking.outage_seconds"] > 0
    windows = json.loads(run.data.tags["venus.tracking.outages"])
    assert len(windows) == 1 and windows[0]["end"] is not None and "127.0.0.1" in windows[0]["error"]


def test_outage_until_the_end_keeps_every_metric_on_disk(tmp_path: Path) -> None:
    down = MlflowClient(f"http://127.0.0.1:{_closed_port()}")
    tracker = MlflowTracker(down, "0" * 32, spill_dir=tmp_path, max_buffer=10, flush_interval=0.05,
                            backoff=(0.05, 0.1), close_timeout=0.5)
    for step in range(25):
        tracker.log_metrics({"a": float(step), "b": -1.0}, step=step)
    tracker.log_params({"seed": 3})
    gap = tracker.close()
    assert not gap.reported_to_server and gap.metrics_unsent == 50 and gap.outages[0].end is None
    assert gap.params_tags_unsent == 1
    lines = [json.loads(x) for x in (tmp_path / ("0" * 32 + ".jsonl")).read_text().splitlines()]
    metrics = [d for d in lines if d["kind"] == "metric"]
    assert sorted((d["key"], d["step"]) for d in metrics) == sorted((k, s) for s in range(25) for k in "ab")
    assert [d for d in lines if d["kind"] == "param"] == [{"kind": "param", "key": "seed", "value": "3"}]
    report = json.loads((tmp_path / ("0" * 32 + ".jsonl.gap.json")).read_text())
    assert report["metrics_unsent"] == 50 and report["reported_to_server"] is False
    with pytest.raises(RuntimeError, match="closed"):
        tracker.log_metrics({"a": 1.0}, step=99)


def test_rejected_batch_is_spilled_not_retried(spec: AgentSpec, tmp_path: Path) -> None:
    client = make_client(spec.platform.tracking_uri)
    exp_id = client.create_experiment(spec.platform.experiment + "-rej")
    rid = client.create_run(exp_id).info.run_id
    client.delete_run(rid)  # logging to a deleted run is a 4xx-class error, not an outage
    tracker = MlflowTracker(client, rid, spill_dir=tmp_path, flush_interval=0.05, close_timeout=2)
    tracker.log_metrics({"x": 1.0, "y": 2.0}, step=0)
    gap = tracker.close()
    assert gap.metrics_rejected == 2 and not gap.outages
    lines = [json.loads(x) for x in (tmp_path / f"{rid}.jsonl").read_text().splitlines()]
    assert {d["key"] for d in lines} == {"x", "y"} and all("rejected" in d for d in lines)


def test_is_transient_tells_outages_from_bad_requests() -> None:
    down = MlflowClient(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(MlflowException) as info:
        down.get_run("0" * 32)
    assert is_transient(info.value) and is_transient(ConnectionRefusedError())
    assert not is_transient(MlflowException("bad", error_code=INVALID_PARAMETER_VALUE))
    assert not is_transient(ValueError("x"))


def test_register_model_with_lineage(spec: AgentSpec, tmp_path: Path) -> None:
    client = make_client(spec.platform.tracking_uri)
    parent = start_pipeline_run(spec, client=client)
    with stage_run("merge", spec, parent, client=client, spill_dir=tmp_path) as tracker:
        pass
    model = tmp_path / "merged"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    lineage = {"parent_run": parent, "stage_runs": ["r1", "r2"], "merge_method": "ties",
               "spec_sha256": spec_hash(spec)}
    name = f"venus-{spec.platform.experiment}"
    v1 = register_model(client, tracker.run_id, model, name, lineage)
    v2 = register_model(client, tracker.run_id, "model", name, lineage)
    assert (int(v1.version), int(v2.version)) == (1, 2) and v1.source.endswith("/model")
    got = client.get_model_version(name, v1.version)
    assert got.tags["venus.lineage.parent_run"] == parent and got.tags["venus.lineage.merge_method"] == "ties"
    assert json.loads(got.tags["venus.lineage.stage_runs"]) == ["r1", "r2"] and got.run_id == tracker.run_id
    assert client.get_run(tracker.run_id).data.tags["venus.lineage.spec_sha256"] == spec_hash(spec)
    with pytest.raises(FileNotFoundError, match="neither a local folder"):
        register_model(client, tracker.run_id, "no/such/path", name, lineage)


def _pipeline(store: Path, exp: str, tmp: Path, lr: str, stages: dict[str, dict[str, float]]) -> str:
    """A finished pipeline run: parent (spec.json), one stage run per stage, the parent's stage table."""
    spec = _spec(store, f"platform.experiment={exp}", f"mid_train.lr={lr}")
    client = make_client(spec.platform.tracking_uri)
    parent = start_pipeline_run(spec, client=client, provenance={"git_revision": f"rev-{lr}"})
    summary = []
    for name, metrics in stages.items():
        stage, _, domain = name.partition(": ")
        section = f"offline_rl.{domain}" if domain else None
        with stage_run(stage, spec, parent, client=client, spill_dir=tmp, section=section, run_name=name) as t:
            t.log_metrics({"loss": 2.0}, step=0)
            t.log_metrics({"loss": 1.0}, step=1)
        summary.append({"stage": stage, "domain": domain or None, "status": "SUCCESS", "seconds": 2.0,
                        "metrics": metrics})
    log_stage_table(client, parent, rows_from_summary(summary))
    client.log_metric(parent, "final_score", 0.5 if lr == "1e-3" else 0.75)
    return parent


def test_compare_runs_and_the_cli(store: Path, tmp_path: Path) -> None:
    a = _pipeline(store, "cmp", tmp_path, "1e-3", {"mid_train": {"held_out_accuracy": 0.25},
                                                   "offline_rl: grounding": {"held_out_accuracy": 0.5},
                                                   "merge": {"seconds": 1.0}})
    b = _pipeline(store, "cmp", tmp_path, "2e-3", {"mid_train": {"held_out_accuracy": 0.25},
                                                   "offline_rl: grounding": {"held_out_accuracy": 0.75},
                                                   "evaluate": {"merged/web/success": 0.5}})
    uri = f"sqlite:///{store}/mlflow.db"
    diff = compare_runs(make_client(uri), a, b)
    assert diff.spec == [("mid_train.lr", "0.001", "0.002")]  # from the parents' spec.json
    assert [k for k, *_ in diff.tags] == ["venus.git_revision", "venus.spec_sha256"]
    assert diff.metrics == [("final_score", 0.5, 0.75, 0.25)]  # the stage table's copies are not run metrics
    assert [r for r in diff.stage_metrics if r[1] != "seconds"] == [
        ("offline_rl: grounding", "held_out_accuracy", 0.5, 0.75, 0.25)]
    assert (diff.stages_only_a, diff.stages_only_b, diff.stages_same) == (["merge"], ["evaluate"], 1)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["runs", "compare", a, b, "--tracking-uri", uri])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(line.split() == ["mid_train.lr", "0.001", "0.002"] for line in lines)
    assert any(line.split() == ["offline_rl:", "grounding", "held_out_accuracy", "0.5", "0.75", "+0.25"]
               for line in lines), res.output
    assert any(line.split() == ["merge", "only", "in", "A"] for line in lines)
    assert "1 stage(s) the same in both" in res.output
    res = CliRunner().invoke(app, ["runs", "compare", a, b, "--tracking-uri", uri, "--plain"])
    assert res.exit_code == 0 and res.output == format_diff(diff) + "\n" and "only in A: merge" in res.output
    res = CliRunner().invoke(app, ["runs", "compare", a, "f" * 32, "--tracking-uri", uri])
    assert res.exit_code == 2 and "f" * 32 in res.output


def test_compare_local_run_directories(tmp_path: Path) -> None:
    """Two `venus run --out DIR` directories (summary.json, spec.json), no tracking store needed."""
    def run_dir(name: str, lr: float, web: float, cached: bool) -> Path:
        out = tmp_path / name
        out.mkdir()
        (out / "spec.json").write_text(json.dumps({"name": "tiny", "mid_train": {"lr": lr, "max_steps": 2}}))
        stages = [{"task": "mid-train", "stage": "mid_train", "status": "SUCCESS", "seconds": 4.0, "cached": cached,
                   "metrics": {"steps": 2.0}},
                  {"task": "online-rl", "stage": "online_rl", "domain": "web", "status": "SUCCESS", "seconds": 9.0,
                   "metrics": {"held_out_success_after": web}}]
        (out / "summary.json").write_text(json.dumps({"agent": "tiny", "spec_sha256": f"sha-{lr}", "status": "SUCCESS",
                                                      "seconds": 20.0, "git_revision": "abc", "stages": stages}))
        return out

    a, b = run_dir("a", 1e-3, 0.25, False), run_dir("b", 2e-3, 0.5, True)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["runs", "compare", str(a), str(b / "summary.json"), "--json"])
    assert res.exit_code == 0, res.output
    diff = json.loads(res.output)
    assert diff["spec"] == [["mid_train.lr", "0.001", "0.002"]] and diff["tags"][0][0] == "venus.spec_sha256"
    assert ["online_rl: web", "held_out_success_after", 0.25, 0.5, 0.25] in diff["stage_metrics"]
    assert diff["stage_status"] == [["mid_train", "FINISHED", "FINISHED (cached)"]]
    res = CliRunner().invoke(app, ["runs", "compare", str(a), str(b)])
    assert res.exit_code == 0 and "online_rl: web" in res.output and "+0.25" in res.output, res.output


def test_ui_builds_a_loopback_mlflow_command(monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = ui_command("sqlite:///runs/mlflow.db", 5055)
    assert cmd[1:] == ["-m", "mlflow", "ui", "--backend-store-uri", "sqlite:///runs/mlflow.db",
                       "--host", "127.0.0.1", "--port", "5055"]
    with pytest.raises(ValueError, match="server"):
        ui_command("http://mlflow.venus:5000", 5000)
    calls: list[list[str]] = []

    class Done:
        returncode = 0

    monkeypatch.setattr("venus_core.cli.runs_cmd.subprocess.run", lambda c, **kw: calls.append(c) or Done())
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["ui", "--port", "5077"])
    assert res.exit_code == 0, res.output
    assert calls == [ui_command("sqlite:///runs/mlflow.db", 5077)]
    res = CliRunner().invoke(app, ["ui", "--tracking-uri", "https://mlflow.example"])
    assert res.exit_code == 2 and "own UI" in res.output
