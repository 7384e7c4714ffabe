"""`venus submit` / `pipelines.submit.submit` against a FAKE Kubeflow Pipelines API server.

The server (tests/pipelines/fake_kfp_api.py) is a stand-in written for this test: no KFP cluster can
run on these machines. It answers the v2beta1 endpoints kfp.Client calls and keeps what it was sent,
so the test checks what a real server would receive: the compiled package, the version, the
experiment and a run that references the uploaded version.
"""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from fake_kfp_api import FakeKfpServer
from typer.testing import CliRunner

from pipelines.submit import submit
from venus_core.cli.pipeline_cmd import register

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "agents" / "venus-tiny"


def test_submit_uploads_a_version_and_starts_a_run_in_the_experiment() -> None:
    with FakeKfpServer() as fake:
        first = submit(TINY, fake.url, experiment="tuning", overrides=["mid_train.lr=0.001"])
        second = submit(TINY, fake.url, experiment="tuning")
        state = fake.state
    assert list(state.pipelines) == ["venus-tiny"]  # uploaded once, then new versions
    assert first.pipeline_id == second.pipeline_id and first.version_id != second.version_id
    package = next(yaml.safe_load_all(state.versions[-2]["package"]))
    assert package["pipelineInfo"]["name"] == "venus-tiny"
    assert package["root"]["inputDefinitions"]["parameters"]["mid_train_lr"]["defaultValue"] == 0.001
    run = state.runs[0]
    assert run["pipeline_version_reference"] == {"pipeline_id": first.pipeline_id,
                                                 "pipeline_version_id": first.version_id}
    assert run["experiment_id"] == first.experiment_id
    assert state.experiments["tuning"]["namespace"] == "venus"
    assert first.url == f"{fake.url}/#/runs/details/{first.run_id}"
    assert run.get("service_account") is None  # the tiny spec names none: the namespace's default


def test_the_run_uses_the_specs_service_account() -> None:
    with FakeKfpServer() as fake:
        submit(TINY, fake.url, overrides=["platform.service_account=venus-pipeline"])
        run = fake.state.runs[0]
    assert run["service_account"] == "venus-pipeline"  # the IR cannot carry it: a setting of the run


def test_venus_submit_prints_the_run_url_and_names_a_missing_host() -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    with FakeKfpServer() as fake:
        result = runner.invoke(app, ["submit", str(TINY), "--host", fake.url, "--experiment", "e1"])
        runs = list(fake.state.runs)
    assert result.exit_code == 0, result.output
    assert len(runs) == 1 and f"{fake.url}/#/runs/details/" in result.output
    result = runner.invoke(app, ["submit", str(TINY)])
    assert result.exit_code == 2 and "platform.kfp_host" in result.output


def test_venus_compile_writes_the_ir_and_reports_bad_overrides(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["compile", str(TINY), "-o", str(out), "--set", "merge.density=0.5"])
    assert result.exit_code == 0, result.output
    params = next(yaml.safe_load_all(out.read_text()))["root"]["inputDefinitions"]["parameters"]
    assert params["merge_density"]["defaultValue"] == 0.5
    result = runner.invoke(app, ["compile", str(TINY), "-o", str(out), "--set", "merge.density=7"])
    assert result.exit_code == 2 and "merge.density" in result.output
