"""The evaluate job, the `venus eval` commands and the EVAL_SUITES plugin, on the untrained tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from venus_core.config import AgentSpec
from venus_core.config.registry import EVAL_SUITES
from venus_core.eval import suites
from venus_core.eval.results import load_result

from eval_fixtures import write_grounding, write_trajectories


def test_plugin_registers_the_evaluators(tmp_path: Path) -> None:
    assert {"grounding", "nav_offline", "nav_offline_low"} <= set(EVAL_SUITES.names())
    assert suites.get_evaluator("grounding") is suites.grounding
    assert suites.evaluator_for_dataset(write_grounding(tmp_path / "g")) == "grounding"
    assert suites.evaluator_for_dataset(write_trajectories(tmp_path / "n")) == "nav_offline"
    assert suites.parse_model_ref("mid=/ckpt/mid_train") == ("mid", "/ckpt/mid_train")
    assert suites.parse_model_ref("/ckpt/merged/") == ("merged", "/ckpt/merged/")
    with pytest.raises(ValueError, match="NAME=CKPT"):
        suites.parse_model_ref("=x")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        suites.make_predictor("m", str(tmp_path / "absent"), AgentSpec().model)


@pytest.mark.slow
def test_evaluate_job_two_models(tmp_path: Path, tiny_ckpt: Path) -> None:
    from venus_core.runtime.evaluate import main

    g = write_grounding(tmp_path / "ss")
    n = write_trajectories(tmp_path / "ac")
    out = tmp_path / "out"
    rc = main(["--spec", "agents/venus-tiny", "--set", "eval.batch_size=4", "--model", f"mid={tiny_ckpt}",
               "--model", f"merged={tiny_ckpt}", "--data", str(g), "--data", str(n), "--limit", "1", "--out", str(out)])
    assert rc == 0
    files = sorted(p.name for p in (out / "results").iterdir())
    assert files == ["merged--ac.json", "merged--ss.json", "mid--ac.json", "mid--ss.json"]
    res = load_result(out / "results" / "mid--ss.json")
    assert res.label == "mid" and res.summary["overall"]["n"] == 1 and res.settings["batch_size"] == 4
    assert res.settings["repetition_penalty"] == 1.05 and res.settings["temperature"] == 0.0
    nav = load_result(out / "results" / "mid--ac.json")
    assert nav.summary["step_success"]["n"] == 3  # limit 1 = the first episode's three steps
    summary = json.loads((out / "summary.json").read_text())
    assert summary["merged"]["ss"]["metric"] == "overall" and summary["mid"]["ac"]["metric"] == "step_success"
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["job"] == "evaluate" and {i["uri"] for i in prov["inputs"]} >= {str(g), str(n), str(tiny_ckpt)}
    assert all(i["sha256"] for i in prov["inputs"])
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    metrics = {k: v for line in lines if "metrics" in line for k, v in line["metrics"].items()}
    assert metrics["mid/ss/overall_n"] == 1.0 and "merged/ac/step_success" in metrics
    html = (out / "report.html").read_text()
    assert 'id="comparison"' in html and 'id="published"' in html  # fixture source is screenspot-pro


@pytest.mark.slow
def test_evaluate_workers_give_the_one_process_results(tmp_path: Path, tiny_ckpt: Path) -> None:
    """`eval.workers: 2` evaluates the models in two spawned processes: the same results (offline and
    live suites), files, summary and tracker steps as one process, in model order; a model whose
    worker fails stops the job with its name."""
    from venus_core.runtime.evaluate import main

    g = write_grounding(tmp_path / "ss")
    outs = {}
    for workers in (1, 2):
        out = outs[workers] = tmp_path / f"w{workers}"
        rc = main(["--spec", "agents/venus-tiny", "--set", "eval.batch_size=4", "--set", f"eval.workers={workers}",
                   "--model", f"mid={tiny_ckpt}", "--model", "fresh=tiny", "--model", f"merged={tiny_ckpt}",
                   "--data", str(g), "--online", "sim-phone:levels=1,episodes=3,max_steps=2", "--limit", "3",
                   "--out", str(out), "--viewer", "0"])
        assert rc == 0
    names = sorted(p.name for p in (outs[1] / "results").iterdir())
    assert names == sorted(p.name for p in (outs[2] / "results").iterdir()) and len(names) == 6
    for name in names:
        a, b = (load_result(outs[w] / "results" / name) for w in (1, 2))
        assert a.summary == b.summary and a.label == b.label
        assert [s.get("answer") or s.get("steps") for s in a.samples] == [s.get("answer") or s.get("steps") for s in b.samples]
    assert json.loads((outs[1] / "summary.json").read_text()) == json.loads((outs[2] / "summary.json").read_text())

    def steps(out: Path) -> list[tuple[int, list[str]]]:
        lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        return [(line["step"], sorted(k for k in line["metrics"] if not k.startswith("time/")))
                for line in lines if "metrics" in line]
    assert steps(outs[1]) == steps(outs[2]) and [s for s, _ in steps(outs[2])][::2] == [0, 1, 2]

    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="model 'broken' failed in its worker"):
        main(["--spec", "agents/venus-tiny", "--set", "eval.workers=2", "--model", f"mid={tiny_ckpt}",
              "--model", f"broken={tmp_path / 'empty'}", "--data", str(g), "--limit", "1", "--out", str(tmp_path / "o")])


def test_evaluate_workers_share_the_stage_threads() -> None:
    """Each spawned worker runs its share of the stage's threads, not the inherited OMP_NUM_THREADS."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    import torch

    from venus_core.runtime.evaluate import _worker_init

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_init, initargs=(3, os.getpid())) as pool:
        assert pool.submit(torch.get_num_threads).result() == 3
        assert pool.submit(torch.get_num_interop_threads).result() == 3


def test_evaluate_job_needs_suites(tmp_path: Path) -> None:
    from venus_core.config.spec import EvalSuiteSpec
    from venus_core.runtime.evaluate import main, resolve_suites

    g = str(write_grounding(tmp_path / "g"))
    got = resolve_suites([g], [], 5, ["sim-phone:episodes=2"])
    assert [(s.name, s.evaluator, s.data, s.limit) for s in got] == [
        ("g", "grounding", g, 5), ("online", "online_sim", "sim-phone:episodes=2", 5)]
    spec_suites = [EvalSuiteSpec(name="a", evaluator="grounding"), EvalSuiteSpec(name="b", evaluator="online_sim")]
    assert [s.name for s in resolve_suites([], spec_suites, None)] == ["b"]  # offline suite without data skipped
    with pytest.raises(ValueError, match="unknown key"):
        resolve_suites([], [], None, ["sim-phone:colour=red"])

    held = [EvalSuiteSpec(name="h", evaluator="grounding", data=g)]
    assert [(s.name, s.limit) for s in resolve_suites([], spec_suites, 3, held_out=held)] == [("h", 3), ("b", 3)]
    assert [s.name for s in resolve_suites([g], spec_suites, None, held_out=held)] == ["g"]  # explicit data wins
    with pytest.raises(ValueError, match="suite names must be unique"):
        resolve_suites([], [EvalSuiteSpec(name="h", evaluator="grounding", data=g)], None, held_out=held)
    with pytest.raises(ValueError, match="nothing to evaluate"):
        main(["--spec", "agents/venus-tiny", "--set", "eval.held_out_suites.enabled=false", "--set", "eval.suites=[]",
              "--model", "tiny", "--out", str(tmp_path / "o")])
    with pytest.raises(FileNotFoundError, match="not a directory"):
        main(["--spec", "agents/venus-tiny", "--model", "tiny", "--data", str(tmp_path / "nope"), "--out", str(tmp_path)])


@pytest.mark.slow
def test_evaluate_job_on_the_held_out_suites(tmp_path: Path, tiny_ckpt: Path) -> None:
    """Without --data the job scores the spec's held-out suites (generated once into the cache) and
    writes the stage-by-stage table with n and intervals to comparison.json and the tracker."""
    from venus_core.runtime.evaluate import main

    cache = tmp_path / "suites"
    small = ["--set", f"eval.held_out_suites.cache_dir={cache}", "--set", "eval.held_out_suites.grounding_per_level=3",
             "--set", "eval.held_out_suites.grounding_levels=[0,2]", "--set", "eval.held_out_suites.navigation_steps=4",
             "--set", "eval.batch_size=8", "--set", "eval.suites=[]"]  # the held-out suites alone (no live ones)
    out = tmp_path / "out"
    rc = main(["--spec", "agents/venus-tiny", *small, "--model", f"a={tiny_ckpt}", "--model", f"b={tiny_ckpt}",
               "--out", str(out), "--viewer", "0"])
    assert rc == 0
    assert len([p for p in cache.iterdir()]) == 1  # one suite for both models
    files = sorted(p.name for p in (out / "results").iterdir())
    assert files == [f"{m}--held-out-{s}.json" for m in "ab" for s in ("grounding-free", "grounding", "navigation")]
    g = load_result(out / "results" / "a--held-out-grounding.json")
    assert g.summary["overall"]["n"] == 6 and set(g.summary["by_level"]) == {"0", "2"}
    free = load_result(out / "results" / "a--held-out-grounding-free.json")  # venus-tiny: levels 1-2 off the grid
    assert free.summary["overall"]["n"] == 6 and set(free.summary["by_level"]) == {"1", "2"}
    nav = load_result(out / "results" / "b--held-out-navigation.json")
    assert nav.summary["step_success"]["n"] >= 4 and set(nav.summary["by_platform"]) == {"mobile", "web"}
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    level0 = [r for r in rows if r["suite"] == "held-out-grounding" and r["metric"] == "level: 0"]
    assert [(r["model"], r["n"]) for r in level0] == [("a", 3), ("b", 3)]
    assert all(0.0 <= r["ci95_low"] <= r["value"] <= r["ci95_high"] <= 1.0 for r in rows)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    metrics = {k: v for line in lines if "metrics" in line for k, v in line["metrics"].items()}
    assert metrics["a/held-out-grounding/by_level/2_n"] == 3.0
    assert {"b/held-out-navigation/by_type/Click/step_success_ci_low", "time/a/held-out-navigation_s"} <= set(metrics)
    params = next(line["params"] for line in lines if "params" in line)
    assert [s["name"] for s in params["suites"]] == ["held-out-grounding", "held-out-grounding-free", "held-out-navigation"]


def test_cli_grounding_and_report(tmp_path: Path, tiny_ckpt: Path) -> None:
    from venus_core.cli.eval_cmd import register

    app = typer.Typer()
    register(app)

    @app.command()
    def version() -> None:  # a second command, so that typer keeps `eval` as a group
        pass

    runner = CliRunner()
    g = write_grounding(tmp_path / "ss")
    out = tmp_path / "cli"
    r = runner.invoke(app, ["eval", "grounding", "--model", str(tiny_ckpt), "--data", str(g), "--limit", "2",
                            "--batch-size", "2", "--out", str(out), "--name", "tiny-untrained"])
    assert r.exit_code == 0, r.output
    assert "tiny-untrained" in r.output and "overall" in r.output
    assert load_result(out / "ss.json").model == "tiny-untrained" and (out / "report.html").is_file()
    r = runner.invoke(app, ["eval", "report", str(out / "ss.json"), str(out / "ss.json"), "--out", str(tmp_path / "c.html")])
    assert r.exit_code == 0 and 'id="comparison"' in (tmp_path / "c.html").read_text()
    r = runner.invoke(app, ["eval", "report", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "missing.json: result file not found" in r.output
    r = runner.invoke(app, ["eval", "nav-offline", "--model", str(tiny_ckpt), "--data", str(g), "--level", "mid"])
    assert r.exit_code == 2 and "--level must be high or low" in r.output
    shutil.rmtree(out)


@pytest.mark.slow
def test_evaluate_baselines_come_first(tmp_path: Path, tiny_ckpt: Path) -> None:
    """`--baselines` scores the spec's eval.baselines before the --model checkpoints, in the ablation's
    order: random-init (model.tiny at random init) then base (model.base as training resolves it,
    here the shipped bootstrap), with the same answers as naming those checkpoints directly. A base
    directory the user names may lack SHA256SUMS (a hub download); a stage output may not."""
    from venus_core.runtime.evaluate import baseline_refs, main
    from venus_core.train.base import BOOTSTRAP_DIR

    g = write_grounding(tmp_path / "ss")
    common = ["--spec", "agents/venus-tiny", "--set", "eval.batch_size=4", "--data", str(g), "--limit", "2",
              "--viewer", "0"]
    out = tmp_path / "with"
    assert main([*common, "--set", 'eval.baselines=["base", "random_init"]', "--baselines",
                 "--model", f"mid={tiny_ckpt}", "--out", str(out)]) == 0
    assert list(json.loads((out / "summary.json").read_text())) == ["random-init", "base", "mid"]
    direct = tmp_path / "direct"
    assert main([*common, "--model", f"base={BOOTSTRAP_DIR}", "--model", "random-init=tiny", "--out", str(direct)]) == 0
    for name in ("base--ss.json", "random-init--ss.json"):
        a, b = load_result(out / "results" / name), load_result(direct / "results" / name)
        assert [s["answer"] for s in a.samples] == [s["answer"] for s in b.samples] and a.summary == b.summary

    unsealed = tmp_path / "hub-base"
    shutil.copytree(tiny_ckpt, unsealed)
    (unsealed / "SHA256SUMS").unlink()
    spec = AgentSpec.model_validate({"model": {"base": str(unsealed)}})
    refs, loose = baseline_refs(spec, tmp_path)
    assert refs == [("base", str(unsealed))] and loose == {"base"}
    from venus_core.runtime.evaluate import evaluate_model
    from venus_core.runtime.evaluate import resolve_suites

    suite = resolve_suites([str(g)], [], 1)
    assert evaluate_model(spec, "base", str(unsealed), suite, tmp_path / "o1", require_manifest=False)
    with pytest.raises(Exception, match="SHA256SUMS"):
        evaluate_model(spec, "mid", str(unsealed), suite, tmp_path / "o2")
    with pytest.raises(ValueError, match="--base-url"):
        main([*common, "--baselines", "--model", "served", "--base-url", "http://127.0.0.1:9/v1", "--out",
              str(tmp_path / "o3")])


def test_eval_baselines_spec_checks() -> None:
    assert AgentSpec().eval.baselines == ["base"]
    with pytest.raises(ValueError, match="random_init is model.tiny"):
        AgentSpec.model_validate({"model": {"base": "/models/qwen3-vl-8b"}, "eval": {"baselines": ["random_init"]}})
    with pytest.raises(ValueError, match="names a model twice"):
        AgentSpec.model_validate({"eval": {"baselines": ["base", "base"]}})
    with pytest.raises(ValueError, match="already the random initialisation"):
        AgentSpec.model_validate({"model": {"base": "tiny"}, "eval": {"baselines": ["base", "random_init"]}})
    with pytest.raises(ValueError):
        AgentSpec.model_validate({"eval": {"baselines": ["bootstrap"]}})
