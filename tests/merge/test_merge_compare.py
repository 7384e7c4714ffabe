"""Runtime merge job with --evaluate: TIES, linear and the best single specialist compared on a quick set.

Real pieces end to end: the tiny Qwen3-VL model (built, not downloaded), three specialists made from
it (language weights perturbed, vision tower frozen), the real merge, and the evaluate job's code
on a hand-written grounding dataset.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from merge_helpers import tiny_specialist
from venus_core.config import AgentSpec
from venus_core.data import DatasetWriter, GroundingSample, Provenance

AGENT = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def _grounding(path: Path) -> Path:
    with DatasetWriter(path) as w:
        ref = w.put_image(Image.new("RGB", (200, 100), (10, 20, 30)))
        for i, box in enumerate([(100, 100, 300, 300), (500, 500, 700, 700)]):
            w.write(GroundingSample(id=f"g{i}", image=ref, image_size=(200, 100), platform="desktop",
                                    instruction=f"find item {i}", box=box, ui_type="text",
                                    provenance=Provenance(source="screenspot-pro", source_id=f"g{i}")))
    return path


@pytest.mark.slow
def test_merge_job_compares_candidates_with_best_single(tmp_path: Path) -> None:
    from venus_core.models.tiny import build_tiny
    from venus_core.runtime.merge import main

    base = build_tiny(AgentSpec().model.tiny, tmp_path / "base")
    names = ("grounding", "mobile", "web")
    dirs = [tiny_specialist(base, tmp_path / n, i + 1) for i, n in enumerate(names)]
    data = _grounding(tmp_path / "ss")
    out = tmp_path / "out"
    argv = ["--spec", str(AGENT), "--set", "eval.batch_size=2", "--set", "merge.method=ties", "--base", str(base), "--out", str(out),
            "--evaluate", "--data", str(data), "--limit", "2", "--set", "merge.distill.steps=1",
            "--set", "merge.distill.batch_size=1", "--set", "merge.distill.max_new_tokens=8",
            "--set", "merge.distill.prompts.records=4"]
    for n, d in zip(names, dirs):
        argv += ["--model", f"{n}={d}"]
    assert main(argv) == 0

    report = json.loads((out / "report.json").read_text())
    table = report["comparison"]
    assert [r["candidate"] for r in table["rows"]] == ["ties", "linear", "distill", "best_single"]  # venus-tiny's merge.compare
    assert table["suites"] == ["ss"] and table["metrics"] == {"ss": "overall"}
    assert table["best_single"] in names and table["rows"][3]["model"] == table["best_single"]
    best = max(table["specialists"].values())
    assert table["specialists"][table["best_single"]] == best  # the best specialist by mean
    for r in table["rows"]:
        assert 0.0 <= r["scores"]["ss"] <= 1.0 and r["mean"] == r["scores"]["ss"]
    assert table["published"] == "ties" and table["winner"] in ("ties", "linear", "distill", "best_single")
    summary = json.loads((out / "compare" / "summary.json").read_text())
    assert set(summary) == {"ties", "linear", "distill", *names}  # every specialist was evaluated
    assert all(summary[m]["ss"]["n"] == 2 for m in summary)
    assert summary["linear"]["ss"]["value"] == table["rows"][1]["mean"]
    md = (out / "comparison.md").read_text()
    assert "| best_single | " + table["best_single"] in md and "Published: ties" in md
    assert (out / "model" / "model.safetensors.index.json").exists()
    assert (out / "candidates" / "linear" / "model.safetensors.index.json").exists()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("compare/best_single/mean" in r.get("metrics", {}) for r in rows)
