"""The paper's refinement loop end to end over HTTP: `score_data` (and `venus data score`) on a
synthetic source and an imported AndroidControl source, judged by a scripted OpenAI-compatible
server that answers in the formats a served judge uses (fenced and bare JSON verdicts, episode
verdicts naming their wrong step, tagged navigation answers for re-derived steps, one answer that
is not one). Every path runs: keep, rewrite (re-scored high, or low and then rebuilt), synthetic
rebuild, re-derivation of an imported episode's step (kept, scored low, unparseable), and discards
with their reasons; every count must reconcile, and a second run must be served by the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from refinement_helpers import (
    BAD_REBUILD,
    EXPECTED_IMPORTED,
    EXPECTED_REASONS,
    IMPORTED_FATES,
    ScriptedJudge,
    android_source,
    expected_counts,
    records,
)
from venus_core.cli.score_cmd import register
from venus_core.data.schema import NavigationStep
from venus_core.data.validate import validate_dataset
from venus_core.runtime.score_data import main
from venus_core.scoring.testing_server import ScriptedChatServer

AGENT = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
KEY = "venus-test-judge-key-5e1a"  # the server requires it, as vLLM with VLLM_API_KEY does


def _judge_args(url: str) -> list[str]:
    return ["--set", "scoring.judge=openai", "--set", f"scoring.endpoint={url}",
            "--set", "scoring.judge_model=qwen3-vl-judge", "--set", "scoring.max_retries=1"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_score_data_refines_a_mixed_corpus_through_a_served_judge(
    tmp_path: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VENUS_JUDGE_API_KEY", KEY)
    imported_dir = android_source(tmp_path / "ac-src", tmp_path / "androidcontrol")
    synth, imported = records(synth_dir), records(imported_dir)
    assert all(r.provenance.generator != "venus_core.data.synth" for r in imported)
    expected = expected_counts(synth, imported)
    responder = ScriptedJudge(synth_dir, imported_dir)
    out = tmp_path / "out"
    argv = ["--spec", str(AGENT), "--data", str(synth_dir), "--data", str(imported_dir), "--out", str(out),
            "--clean-steps", "", "--set", "data.validation_fraction=0.25"]
    with ScriptedChatServer(default=responder, api_key=KEY) as srv:
        assert main(argv + _judge_args(srv.base_url)) == 0
        first_requests, usage = len(srv.requests), dict(srv.usage_sent)
        printed = capsys.readouterr().out
        report = json.loads((out / "report.json").read_text())
        assert main(argv + _judge_args(srv.base_url)) == 0  # the same run again: from the cache
        second_requests = len(srv.requests) - first_requests
        again = json.loads((out / "report.json").read_text())
        assert srv.unauthorized == 0
    assert not [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]

    # counts reconcile, per source, with what the plan implies
    for name, want in expected.items():
        rep = report["scoring"][name]
        assert rep["read"] == len(synth if name == "synth" else imported)
        assert {k: rep[k] for k in want if k != "requests"} == {k: v for k, v in want.items() if k != "requests"}
        assert rep["judge"]["requests"] == want["requests"]
        assert sum(rep["decisions"].values()) == sum(rep["buckets"].values()) == rep["read"]
        for b, row in rep["by_bucket"].items():
            assert sum(row.values()) == rep["buckets"][b]
        kept_first = rep["buckets"]["keep"]
        assert rep["high_fidelity"] == {"before": kept_first, "after": rep["read"] - rep["decisions"]["discarded"]}
        assert rep["high_fidelity_share"]["before"] == round(kept_first / rep["read"], 4)
        lines = _lines(out / "scored" / name / "decisions.jsonl")
        assert sorted(d["id"] for d in lines) == sorted(r.id for r in (synth if name == "synth" else imported))
    imp = report["scoring"]["androidcontrol"]
    assert imp["high_fidelity_share"]["before"] < imp["high_fidelity_share"]["after"] < 1.0
    assert imp["by_bucket"]["low"] == {"rebuilt": 1, "discarded": 3}
    assert report["scoring"]["synth"]["high_fidelity_share"]["after"] == 1.0

    # the imported episodes: what happened to each, and why
    by_goal = {}
    for d in _lines(out / "scored" / "androidcontrol" / "decisions.jsonl"):
        goal = next(r.goal for r in imported if r.id == d["id"])
        by_goal[goal] = d
    assert {g: d["decision"] for g, d in by_goal.items()} == EXPECTED_IMPORTED
    for goal, reason in EXPECTED_REASONS.items():
        assert by_goal[goal]["reason"].split(":", 1)[0] == reason, by_goal[goal]
    assert "named no wrong step" in by_goal["goal 4"]["reason"]
    assert "not a navigation answer" in by_goal["goal 2"]["reason"]
    assert by_goal["goal 5"]["rederived"]["action"] == BAD_REBUILD and by_goal["goal 5"]["rebuild_score"] == 3
    assert responder.seen["rederive goal 2"] == 4  # two attempts in each of the two runs
    rebuilt = by_goal["goal 1"]
    assert (rebuilt["bucket"], rebuilt["step"], rebuilt["rebuild"]) == ("low", 1, "rederive")
    assert rebuilt["written_id"] == f"{rebuilt['id']}:1" and rebuilt["final_score"] == 9

    # the written datasets: valid, the re-derived step in place of its episode, nothing else leaked
    for part in ("scored/synth/dataset", "scored/androidcontrol/dataset", "mixture/train"):
        check = validate_dataset(out / part)
        assert check.ok and not check.warnings, (part, check.to_text())
    written = {r.id: r for r in records(out / "scored" / "androidcontrol" / "dataset")}
    step = written[rebuilt["written_id"]]
    original = next(r for r in imported if r.goal == "goal 1")
    assert isinstance(step, NavigationStep) and step.action == "Click(box=(500,500))" and step.target_box is None
    assert step.image == original.steps[1].image and [h.action for h in step.history] == [original.steps[0].action]
    assert step.meta["rebuilt"]["was"]["action"] == original.steps[1].action
    assert step.meta["rebuilt"]["by"] == "openai:qwen3-vl-judge"
    assert len(written) == report["scoring"]["androidcontrol"]["high_fidelity"]["after"]

    # what the judge cost: every request the server saw, every token it reported
    costs = [report["scoring"][n]["judge"] for n in expected]
    assert sum(c["backend_calls"] for c in costs) == report["judge"]["backend_calls"] == first_requests
    assert sum(c["prompt_tokens"] for c in costs) == usage["prompt_tokens"] > 0
    assert sum(c["completion_tokens"] for c in costs) == usage["completion_tokens"] > 0
    assert all(c["cache"]["hits"] == 0 and c["seconds"] > 0 for c in costs)
    retried = sum(f[0] == "low" and f[2] is not None and "<action>" not in f[2] for f in IMPORTED_FATES.values())
    assert first_requests == sum(sum(c["requests"].values()) for c in costs) + retried
    # second run: same decisions; only the failed re-derivation is asked again (failures are not cached)
    for name in expected:
        a, b = report["scoring"][name], again["scoring"][name]
        assert {k: a[k] for k in ("decisions", "buckets", "by_bucket", "high_fidelity")} == {
            k: b[k] for k in ("decisions", "buckets", "by_bucket", "high_fidelity")}
    imp2 = again["scoring"]["androidcontrol"]["judge"]
    assert second_requests == imp2["backend_calls"] == 2 and again["scoring"]["synth"]["judge"]["backend_calls"] == 0
    assert imp2["cache"]["misses"] == 1 and imp2["cache"]["hit_rate"] == round(
        imp2["cache"]["hits"] / (imp2["cache"]["hits"] + 1), 4)
    assert again["scoring"]["synth"]["judge"]["cache"]["hit_rate"] == 1.0

    # printed per source, and logged as metrics (metrics.jsonl is what the MLflow run gets too)
    assert "androidcontrol" in printed and "cache hit" in printed
    row = next(x for x in printed.splitlines() if x.startswith("androidcontrol"))
    assert f"{imp['high_fidelity_share']['before']:.1%}" in row and f"{imp['high_fidelity_share']['after']:.1%}" in row
    metrics = report["metrics"]
    assert metrics["scoring/androidcontrol/high_fidelity_after"] == imp["high_fidelity_share"]["after"]
    assert metrics["scoring/synth/judge_backend_calls"] == costs[0]["backend_calls"]
    assert metrics["judge_rebuilt"] == sum(report["scoring"][n]["decisions"]["rebuilt"] for n in expected)
    logged = [m["metrics"] for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if m["kind"] == "metrics"]
    assert logged == [report["metrics"], again["metrics"]]
    assert again["metrics"]["scoring/androidcontrol/judge_cache_hit_rate"] == imp2["cache"]["hit_rate"]

def test_venus_data_score_prints_the_refinement_report(tmp_path: Path, synth_dir: Path) -> None:
    imported_dir = android_source(tmp_path / "ac-src", tmp_path / "androidcontrol")
    app, data = typer.Typer(), typer.Typer()
    register(data)
    app.add_typer(data, name="data")
    args = ["data", "score", str(imported_dir), "-o", str(tmp_path / "s"), "--set", "scoring.max_retries=1"]
    with ScriptedChatServer(default=ScriptedJudge(None, imported_dir), api_key=KEY) as srv:
        refused = CliRunner().invoke(app, [*args, *_judge_args(srv.base_url)], env={"VENUS_JUDGE_API_KEY": ""})
        assert refused.exit_code == 1 and "HTTP 401" in refused.output, refused.output
        assert srv.unauthorized == 6 and not srv.requests  # a 4xx other than 429 is not retried
        counted = CliRunner().invoke(app, [*args, *_judge_args(srv.base_url), "--max-failure-share", "1"],
                                     env={"VENUS_JUDGE_API_KEY": ""})
        assert counted.exit_code == 0, counted.output
        assert [x.split() for x in counted.output.splitlines() if x.startswith("bucket failed")] == [
            ["bucket", "failed", "6", "->", "discarded", "6"]]
        result = CliRunner().invoke(app, [*args, *_judge_args(srv.base_url)], env={"VENUS_JUDGE_API_KEY": KEY})
        calls = len(srv.requests)
    assert result.exit_code == 0, result.output
    assert KEY not in result.output
    report = json.loads((tmp_path / "s" / "report.json").read_text())
    n, hi = report["read"], report["high_fidelity"]
    assert f"high-fidelity share: {hi['before'] / n:.1%} -> {hi['after'] / n:.1%} ({hi['before']} -> {hi['after']} of {n})" \
        in result.output
    assert "bucket low" in result.output and f"-> rebuilt {report['decisions']['rebuilt']}" in result.output
    assert f"{calls} backend calls" in result.output and "cache hit rate 0.0%" in result.output
    assert f"{report['judge']['prompt_tokens']} prompt + " in result.output
