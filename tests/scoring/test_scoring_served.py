"""The `openai` judge against `venus serve` (the untrained tiny model) on loopback: the judge's
requests (system turn, image data URL, response_format json_object) are accepted, concurrent
judge calls are batched, and replies that are not verdicts become counted JudgeFailures."""

from __future__ import annotations

from pathlib import Path

import torch

from venus_core.config.spec import ModelSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.models.server import BackgroundServer, create_app, transformers_runner
from venus_core.scoring.judges import JudgeFailure
from venus_core.scoring.openai_judge import OpenAIJudge


def test_openai_judge_against_venus_serve(tmp_path: Path, synth_dir: Path, synth_records: list) -> None:
    torch.set_num_threads(1)
    model, processor = load_model("tiny", ModelSpec(), tiny_dir=tmp_path / "tiny")
    app = create_app(transformers_runner(model, processor), "judge-tiny", max_batch=4, batch_wait_ms=100)
    reader = DatasetReader(synth_dir)
    with BackgroundServer(app) as srv:
        judge = OpenAIJudge(srv.base_url, "judge-tiny", open_image=reader.open_image, concurrency=3,
                            max_retries=1, backoff_s=0.0, max_tokens=8)
        verdicts = judge.judge_many(synth_records[:3])
    stats = app.state.batcher.stats.to_dict()
    assert len(verdicts) == 3 and all(isinstance(v, JudgeFailure) for v in verdicts)
    assert all("reply rejected" in v.reason and "HTTP" not in v.reason for v in verdicts), verdicts
    assert judge.calls == 6 and judge.retries == 3  # each record: one try and one retry, all answered (200)
    assert stats["requests"] == 6 and stats["batches"] < 6
