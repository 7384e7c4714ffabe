"""The Metrics artifacts the components write: the numbers a user compares across runs in the
Kubeflow UI, equal to what the job reports (`merge`'s is checked in tests/runtime/test_runtime_merge.py)."""

import json
from pathlib import Path

from kfp.dsl import Dataset, Metrics

from components.score_data import score_data

ROOT = Path(__file__).resolve().parents[2]
SOURCE = {"name": "g", "kind": "synth", "synth": {"kind": "grounding", "n": 40, "level": 0, "seed": 5}}


def test_score_data_metrics_hold_the_mixture_and_the_judge_decisions(tmp_path: Path) -> None:
    spec = (ROOT / "agents" / "venus-tiny" / "agent.yaml").read_text()
    data, metrics = Dataset(uri=str(tmp_path / "data")), Metrics(uri=str(tmp_path / "metrics"))
    score_data(agent_spec=spec, overrides=["data.sources=" + json.dumps([SOURCE]), "data.mixture.perception=0",
                                           "data.mixture.vqa=0", "data.mixture.navigation=0",
                                           "data.mixture.grounding=1", "offline_rl.grounding.sources=[]"],
               data=data, metrics=metrics)
    report = json.loads((tmp_path / "data" / "report.json").read_text())
    got = metrics.metadata
    assert got == report["metrics"]
    decisions = report["scoring"]["g"]["decisions"]
    assert {k: got[f"judge_{k}"] for k in decisions} == {k: float(v) for k, v in decisions.items()}
    assert sum(decisions.values()) == report["scoring"]["g"]["read"] == 40
    assert got["mixture_train_records"] + got["mixture_validation_records"] == got["selected_grounding"] > 0
    assert got["wall_s"] >= 0


def test_generate_data_metrics_and_score_data_reading_its_dataset(tmp_path: Path) -> None:
    """The flywheel option's two component bodies: generate_data's Metrics equal its report, and
    score_data given its output as `generated` scores the verified trajectories as source `flywheel`."""
    from components.generate_data import generate_data

    spec = (ROOT / "agents" / "venus-tiny" / "agent.yaml").read_text()
    fly = ["flywheel.policy=oracle", "flywheel.rounds=2", "flywheel.tasks_per_round=3",
           "flywheel.candidates_per_round=12", "online_rl.device_service=local"]
    gen, gen_metrics = Dataset(uri=str(tmp_path / "gen")), Metrics(uri=str(tmp_path / "gen_metrics"))
    generate_data(agent_spec=spec, overrides=fly, data=gen, metrics=gen_metrics)
    report = json.loads((tmp_path / "gen" / "report.json").read_text())
    assert gen_metrics.metadata == {
        "verified": 6.0, "executed": 6.0, "success_first_round": 1.0, "success_last_round": 1.0,
        "device_minutes": report["device_minutes"], "expander_calls": 0.0, "judge_calls": 0.0}
    data, metrics = Dataset(uri=str(tmp_path / "data")), Metrics(uri=str(tmp_path / "metrics"))
    score_data(agent_spec=spec, overrides=["data.sources=" + json.dumps([SOURCE]), "offline_rl.grounding.sources=[]"],
               data=data, metrics=metrics, generated=gen)
    scored = json.loads((tmp_path / "data" / "report.json").read_text())
    assert scored["scoring"]["flywheel"]["read"] == 6 and metrics.metadata["scoring/flywheel/read"] == 6.0
