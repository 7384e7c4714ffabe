"""`venus eval grounding --base-url` against `venus serve` on loopback: the served tiny model must
score exactly what the same checkpoint scores in process (greedy decoding, same prompts)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from venus_core.cli import app
from venus_core.config import AgentSpec
from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.predictors import LocalPredictor
from venus_core.models.loading import load_model
from venus_core.models.server import BackgroundServer, create_app, transformers_runner


def test_eval_grounding_against_venus_serve(tiny_ckpt: Path, grounding_data: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    model, processor = load_model(tiny_ckpt, AgentSpec().model)
    local = evaluate_grounding(grounding_data, LocalPredictor(model, processor, name="tiny"), max_new_tokens=8)
    app_ = create_app(transformers_runner(model, processor), "tiny-served", max_batch=4, batch_wait_ms=50)
    with BackgroundServer(app_) as srv:
        res = CliRunner().invoke(app, [
            "eval", "grounding", "--base-url", srv.base_url, "--model", "tiny-served", "--data", str(grounding_data),
            "--out", str(tmp_path / "out"), "--batch-size", "4", "--max-new-tokens", "8"], catch_exceptions=False)
        health = app_.state.batcher.stats.to_dict()
    assert res.exit_code == 0, res.output
    served = json.loads((tmp_path / "out" / "ss-pro.json").read_text())
    assert served["settings"]["backend"] == "OpenAIPredictor" and served["model"] == "tiny-served"
    assert [s["answer"] for s in served["samples"]] == [s["answer"] for s in local.samples]
    assert served["summary"]["overall"] == local.summary["overall"]
    assert health["requests"] == 7 and health["batches"] < 7  # the evaluator's parallel requests were batched
