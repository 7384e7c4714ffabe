"""The `openai` judge against a real HTTP server on loopback: retries, timeouts, 429, parsing, cache."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from venus_core.config.spec import ScoringSpec
from venus_core.data.store import DatasetReader
from venus_core.scoring.cache import JudgementCache
from venus_core.scoring.judges import CachedJudge, JudgeFailure, JudgeStats, make_judge
from venus_core.scoring.openai_judge import OpenAIJudge, retry_after_seconds
from venus_core.scoring.policy import score_dataset
from venus_core.scoring.rules import Judgement
from venus_core.scoring.testing_server import Reply, ScriptedChatServer, completion_body, judgement_reply


def _judge(server: ScriptedChatServer, reader: DatasetReader, **kw) -> tuple[OpenAIJudge, list[float]]:
    sleeps: list[float] = []
    opts = dict(
        open_image=reader.open_image, timeout_s=2.0, max_retries=3, backoff_s=0.01, sleep=sleeps.append
    )
    opts.update(kw)
    return OpenAIJudge(server.base_url, "judge-model", **opts), sleeps


def test_good_reply_and_request_shape(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    record = next(r for r in synth_records if r.kind == "grounding")
    reply = judgement_reply(5, 8, "box a bit off", {"instruction": "Tap the red button"})
    srv_reply_words = (reply.content or "").split()
    with ScriptedChatServer([reply]) as srv:
        judge, sleeps = _judge(srv, reader)
        [v] = judge.judge_many([record])
        req = srv.requests[0]
    assert isinstance(v, Judgement) and (v.alignment, v.reachability, v.score) == (5, 8, 5)
    assert v.proposal == {"instruction": "Tap the red button"} and v.judge == "openai:judge-model"
    assert judge.calls == 1 and sleeps == []
    words = sum(len(str(part.get("text", "")).split()) for m in req["messages"]
                for part in (m["content"] if isinstance(m["content"], list) else [{"text": m["content"]}]))
    assert judge.stats() == JudgeStats(1, words, len(srv_reply_words), 0, 0)
    assert req["model"] == "judge-model" and req["temperature"] == 0.0
    content = req["messages"][1]["content"]
    url = content[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    img = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert img.size == reader.open_image(record.image).size
    assert record.instruction in content[1]["text"]
    with ScriptedChatServer([Reply(body=completion_body(reply.content or ""))]) as srv:  # no `usage`
        judge, _ = _judge(srv, reader)
        assert isinstance(judge.judge_many([record])[0], Judgement)
    assert judge.stats() == JudgeStats(calls=1, prompt_tokens=None, completion_tokens=None)


def test_retries_5xx_malformed_body_and_bad_reply(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    script = [
        Reply(status=503, body=b'{"error": "overloaded"}'),
        Reply(body=b"<html>not json"),
        Reply(content="I would give it a 7"),
        Reply(content='{"alignment": 11, "reachability": 3, "rationale": "x"}'),
        judgement_reply(9, 9),
    ]
    with ScriptedChatServer(script) as srv:
        judge, sleeps = _judge(srv, reader, max_retries=4)
        [v] = judge.judge_many(synth_records[:1])
    assert isinstance(v, Judgement) and v.score == 9
    assert judge.calls == 5 and judge.retries == 4 and len(sleeps) == 4
    assert judge.stats().prompt_tokens == srv.usage_sent["prompt_tokens"]  # the three 200s that carried usage
    for attempt, pause in enumerate(sleeps):  # exponential backoff with jitter in [0.5, 1] x base
        assert 0.005 * 2**attempt <= pause <= 0.01 * 2**attempt


def test_rate_limit_honours_retry_after(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    with ScriptedChatServer([Reply(status=429, headers={"Retry-After": "2"}), judgement_reply(7, 7)]) as srv:
        judge, sleeps = _judge(srv, reader)
        [v] = judge.judge_many(synth_records[:1])
    assert isinstance(v, Judgement) and sleeps == [2.0]
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_timeout_is_retried_then_given_up(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    # the on-time reply gets a whole second, so a loaded machine cannot make it late too
    with ScriptedChatServer([Reply(delay_s=3.0, content="late"), judgement_reply(8, 6)]) as srv:
        judge, _ = _judge(srv, reader, timeout_s=1.0)
        [v] = judge.judge_many(synth_records[:1])
    assert isinstance(v, Judgement) and v.score == 6 and judge.retries == 1
    with ScriptedChatServer([Reply(delay_s=0.6, content="late")] * 2) as srv:
        judge, _ = _judge(srv, reader, timeout_s=0.2, max_retries=1)
        [v] = judge.judge_many(synth_records[:1])
    assert isinstance(v, JudgeFailure) and "gave up after 2 attempts" in v.reason and "timeout" in v.reason


def test_client_error_is_not_retried(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    with ScriptedChatServer(
        [Reply(status=400, body=b'{"error": "unknown model"}'), judgement_reply(9, 9)]
    ) as srv:
        judge, sleeps = _judge(srv, reader)
        [v] = judge.judge_many(synth_records[:1])
    assert isinstance(v, JudgeFailure) and "HTTP 400" in v.reason and "unknown model" in v.reason
    assert judge.calls == 1 and sleeps == []


def test_bounded_concurrency(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    records = synth_records[:8]
    with ScriptedChatServer(
        default=lambda _r: Reply(content=judgement_reply(8, 8).content, delay_s=0.15)
    ) as srv:
        judge, _ = _judge(srv, reader, concurrency=3)
        verdicts = judge.judge_many(records)
        peak = srv.max_in_flight
    assert all(isinstance(v, Judgement) for v in verdicts) and len(verdicts) == 8
    assert 2 <= peak <= 3


def test_second_run_makes_no_http_calls(tmp_path: Path, synth_dir: Path) -> None:
    reader = DatasetReader(synth_dir)
    spec = ScoringSpec(judge="openai", endpoint="", judge_model="judge-model", concurrency=4)
    with ScriptedChatServer(default=lambda _r: judgement_reply(8, 9)) as srv:
        spec.endpoint = srv.base_url
        first = make_judge(spec, open_image=reader.open_image, cache_path=tmp_path / "cache.sqlite")
        assert isinstance(first, CachedJudge)
        r1 = score_dataset(synth_dir, tmp_path / "run1", spec, first)
        calls = len(srv.requests)
        second = make_judge(spec, open_image=reader.open_image, cache_path=tmp_path / "cache.sqlite")
        r2 = score_dataset(synth_dir, tmp_path / "run2", spec, second)
        assert len(srv.requests) == calls == len(reader)
    assert second.calls == 0 and second.cache.hits == len(reader)
    d1, d2 = r1.to_dict(), r2.to_dict()
    cost1, cost2 = d1.pop("judge"), d2.pop("judge")
    assert d1 == d2 and r1.decisions["kept"] == len(reader)
    n = len(reader)  # the second run is served by the cache alone: no calls, no tokens
    assert (cost1["backend_calls"], cost1["cache"]) == (n, {"hits": 0, "misses": n, "hit_rate": 0.0})
    assert cost1["prompt_tokens"] == srv.usage_sent["prompt_tokens"] > 0
    assert (cost2["backend_calls"], cost2["prompt_tokens"], cost2["completion_tokens"]) == (0, 0, 0)
    assert cost2["cache"] == {"hits": n, "misses": 0, "hit_rate": 1.0}
    assert len(JudgementCache(tmp_path / "cache.sqlite")) == len(reader)
    spec.prompt_version += "-next"  # a new prompt version is a cache miss
    with ScriptedChatServer(default=lambda _r: judgement_reply(8, 9)) as srv:
        spec.endpoint = srv.base_url
        third = make_judge(spec, open_image=reader.open_image, cache_path=tmp_path / "cache.sqlite")
        third.judge_many(list(reader)[:2])
        assert len(srv.requests) == 2


def test_spec_errors(synth_dir: Path) -> None:
    reader = DatasetReader(synth_dir)
    with pytest.raises(ValueError, match="needs scoring.endpoint"):
        make_judge(ScoringSpec(judge="openai", judge_model="m"), open_image=reader.open_image)
    with pytest.raises(ValueError, match="must be an http"):
        make_judge(
            ScoringSpec(judge="openai", endpoint="ftp://x", judge_model="m"), open_image=reader.open_image
        )


def test_server_rejects_unknown_paths() -> None:
    with ScriptedChatServer() as srv:
        req = urllib.request.Request(srv.base_url + "/models", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 404
        assert json.loads(err.value.read())["error"] == "not found"
