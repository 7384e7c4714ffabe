"""The `openai` judge against `venus serve` on loopback: the judge's requests (system turn, image
data URL, response_format json_object) are accepted, concurrent judge calls are batched, and
replies that are not verdicts become counted JudgeFailures — for the untrained tiny model in
process, and for the data stage with the shipped bootstrap checkpoint served by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from refinement_helpers import android_source
from serve_cli import venus_serve

from venus_core.actions import NavStep
from venus_core.config.spec import ModelSpec, ScoringSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.models.server import BackgroundServer, create_app, transformers_runner
from venus_core.runtime.score_data import main
from venus_core.scoring.judges import JudgeFailure, make_judge
from venus_core.scoring.openai_judge import OpenAIJudge
from venus_core.scoring.policy import DatasetImages, score_dataset

AGENT = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


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


@pytest.mark.slow
def test_score_data_against_venus_serve_of_the_tiny_bootstrap(
    tmp_path: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The data stage with `venus serve --model bootstrap` (the shipped tiny checkpoint) as its
    judge, over a synthetic and an imported AndroidControl source. The model was never trained to
    judge: its replies are not verdicts (nor, asked to re-derive a step, complete navigation
    answers), so each sample must end as a counted failure with its reason — retried once, never
    scored — and the stage must stop rather than publish a corpus the judge did not read."""
    imported_dir = android_source(tmp_path / "ac-src", tmp_path / "androidcontrol")
    sources = {"synth": synth_dir, "androidcontrol": imported_dir}
    with venus_serve(["--model", "bootstrap", "--threads", "1", "--max-batch", "4"]) as url:
        judge_args = ["--set", "scoring.judge=openai", "--set", f"scoring.endpoint={url}",
                      "--set", "scoring.judge_model=bootstrap", "--set", "scoring.max_retries=1"]
        out = tmp_path / "job"
        code = main(["--spec", str(AGENT), "--data", str(synth_dir), "--data", str(imported_dir),
                     "--out", str(out), "--clean-steps", "", *judge_args])
        err = capsys.readouterr().err
        assert code == 1 and "the judge failed on" in err and "reply rejected" in err, err
        assert not (out / "scored" / "synth" / "dataset").exists()  # nothing published
        lines = [json.loads(x) for x in (out / "scored" / "synth" / "decisions.jsonl").read_text().splitlines()]
        assert sorted(d["id"] for d in lines) == sorted(r.id for r in DatasetReader(synth_dir))

        # the same judge with the failure limit lifted: every record read gets its one decision
        spec = ScoringSpec(judge="openai", endpoint=url, judge_model="bootstrap", max_retries=1, concurrency=4)
        images = DatasetImages()
        judge = make_judge(spec, open_image=images, cache_path=tmp_path / "cache.sqlite", max_tokens=64,
                           max_rederive_tokens=128, backoff_s=0.0)
        for name, path in sources.items():
            report = score_dataset(path, tmp_path / name, spec, judge, images=images, max_failure_share=1.0)
            d = report.to_dict()  # raises unless decisions and buckets reconcile
            decisions = [json.loads(x) for x in (tmp_path / name / "decisions.jsonl").read_text().splitlines()]
            assert len(decisions) == d["read"] == len(DatasetReader(path))
            failed = [x for x in decisions if x["bucket"] == "failed"]
            assert len(failed) == d["buckets"]["failed"] == d["judge_failures"] == d["by_bucket"]["failed"]["discarded"]
            assert all(x["reason"].startswith("judge_failed: gave up after 2 attempts") and "reply rejected"
                       in x["reason"] for x in failed)
            scored = [x for x in decisions if x["bucket"] != "failed"]  # a reply that happened to parse
            assert all(x["decision"] in ("kept", "rewritten", "rebuilt", "discarded") for x in scored)
            cost = d["judge"]
            assert cost["backend_calls"] >= 2 * len(failed) + len(scored) and cost["completion_tokens"] > 0
            assert cost["prompt_tokens"] > cost["completion_tokens"] and cost["cache"]["hits"] == 0
            assert len(DatasetReader(tmp_path / name / "dataset")) == d["read"] - d["decisions"]["discarded"]

        # the rebuild request on its own: the steps of the imported episodes, re-derived by the model
        images.reader = DatasetReader(imported_dir)
        steps = [s for t in images.reader for s in t.to_steps()]
        before = judge.stats()
        results = judge.rederive_many(steps)
        spent = judge.stats() - before
    assert len(results) == len(steps)
    failures = [r for r in results if isinstance(r, JudgeFailure)]
    assert all("not a navigation answer" in f.reason for f in failures)
    assert all(isinstance(r, NavStep) for r in results if not isinstance(r, JudgeFailure))
    assert spent.calls == 2 * len(failures) + (len(results) - len(failures)) and spent.cache_misses == len(steps)
