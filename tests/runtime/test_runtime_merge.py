"""Runtime job `merge` end to end on small safetensors checkpoints (real merge, real files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from venus_core.config import AgentSpec
from venus_core.models.integrity import write_manifest
from venus_core.runtime.merge import main, merge_config, parse_models, weights_for

KEYS = {"model.language_model.layers.0.mlp.up_proj.weight": (8, 4), "model.visual.blocks.0.attn.qkv.weight": (6, 4)}


def _ckpt(path: Path, seed: int, base: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if base is None:
        t = {k: torch.randn(s, generator=g) for k, s in KEYS.items()}
    else:  # a fine-tune: language changed, vision frozen
        t = {k: v + (0 if "visual" in k else torch.randn(v.shape, generator=g) * 0.1) for k, v in base.items()}
    path.mkdir(parents=True)
    save_file(t, str(path / "model.safetensors"))
    (path / "config.json").write_text('{"model_type": "qwen3_vl"}')
    (path / "tokenizer.json").write_text('{"v": 1}')
    write_manifest(path)  # as every stage output carries (the merge job verifies its inputs)
    return t


def test_merge_job_writes_model_candidates_and_report(tmp_path: Path) -> None:
    base = _ckpt(tmp_path / "base", 0)
    for i, name in enumerate(("grounding", "mobile", "web")):
        _ckpt(tmp_path / name, i + 1, base)
    out = tmp_path / "out"
    spec = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
    rc = main(["--spec", str(spec), "--set", "merge.method=ties",  # venus-tiny publishes linear; this tests TIES
               # the tensor methods only: these files are not loadable models, which `distill` needs
               "--set", "merge.compare=[ties,linear,best_single]",
               "--base", str(tmp_path / "base"), "--out", str(out), "--candidates",
               "--model", f"grounding={tmp_path / 'grounding'}", "--model", f"mobile={tmp_path / 'mobile'}",
               "--model", f"web={tmp_path / 'web'}"])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["published"] == "ties" and set(report["methods"]) == {"ties", "linear"}
    assert report["provenance"]["job"] == "merge" and len(report["provenance"]["inputs"]) == 4
    merged = load_file(str(next((out / "model").glob("*.safetensors"))))
    vision = "model.visual.blocks.0.attn.qkv.weight"
    assert torch.equal(merged[vision], base[vision])  # frozen part copied bit-exact
    lang = "model.language_model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(merged[lang], base[lang])
    assert (out / "candidates" / "linear" / "config.json").exists()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("ties/language/sign_conflict_rate" in r.get("metrics", {}) for r in rows)


def test_spec_to_merge_config() -> None:
    spec = AgentSpec.model_validate({"merge": {"density": 0.5, "parts": {"vision": {"copy_base": True}}}})
    cfg = merge_config(spec)
    assert cfg.method == "ties" and cfg.density == 0.5 and cfg.parts["vision"].copy_base
    assert weights_for("linear", ["grounding", "web"], spec) == [0.5, 0.5]
    assert weights_for("ties", ["grounding", "web"], spec) == [1.0, 1.0]


@pytest.mark.parametrize(("items", "msg"), [(["x"], "NAME=DIR"), (["desktop=/a"], "no weight"),
                                            (["web=/a", "web=/b"], "given twice"), ([], "no --model")])
def test_bad_model_arguments(items: list[str], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        parse_models(items, AgentSpec())


def test_the_merge_components_metrics_artifact_holds_the_published_methods_numbers(tmp_path: Path) -> None:
    """The Kubeflow Metrics artifact of `merge` (what runs are compared by in the UI): seconds and,
    per part, the achieved density and sign-conflict rate of the published method, as report.json has them."""
    from kfp.dsl import Metrics, Model

    from components.merge import merge

    base = _ckpt(tmp_path / "base" / "model", 0)
    for i, name in enumerate(("grounding", "mobile", "web")):
        _ckpt(tmp_path / name / "model", i + 1, base)
    spec = (Path(__file__).resolve().parents[2] / "agents" / "venus-tiny" / "agent.yaml").read_text()
    model, metrics = Model(uri=str(tmp_path / "out")), Metrics(uri=str(tmp_path / "metrics"))
    # the tensor methods only (these files are not loadable models, which `distill` needs)
    merge(agent_spec=spec, overrides=["merge.compare=[ties,linear,best_single]"], base=Model(uri=str(tmp_path / "base")),
          method="ties", density=0.5,
          model=model, metrics=metrics, grounding=Model(uri=str(tmp_path / "grounding")),
          mobile=Model(uri=str(tmp_path / "mobile")), web=Model(uri=str(tmp_path / "web")))
    published = json.loads((tmp_path / "out" / "report.json").read_text())["methods"]["ties"]
    assert set(metrics.metadata) == {"seconds", "language/achieved_density", "language/sign_conflict_rate",
                                     "vision/achieved_density", "vision/sign_conflict_rate"}
    assert metrics.metadata == pytest.approx(published["metrics"])
    assert 0.0 < metrics.metadata["language/achieved_density"] <= 0.5 + 1e-6
