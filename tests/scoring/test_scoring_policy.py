"""The keep / rewrite / rebuild / discard policy over a real (synthetic) dataset with a scripted judge."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from PIL import Image

from venus_core.actions import parse_navigation
from venus_core.config.spec import ScoringSpec
from venus_core.data.schema import GroundingSample, RecordError
from venus_core.data.store import DatasetReader
from venus_core.data.validate import validate_dataset
from venus_core.scoring.judges import JudgeBackend, JudgeFailure, Verdict
from venus_core.scoring.policy import apply_proposal, score_dataset
from venus_core.scoring.rebuild import rebuild, rebuildable
from venus_core.scoring.rules import AnyRecord, Judgement


class ScriptedJudge(JudgeBackend):
    """Scores by a function of the record (and how often that id was judged before)."""

    def __init__(self, fn: Callable[[AnyRecord, int], Verdict]) -> None:
        self.fn = fn
        self.judge_id = "scripted"
        self.seen: dict[str, int] = {}
        self.calls = 0

    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        out = []
        for r in records:
            self.calls += 1
            k = self.seen.get(r.id, 0)
            self.seen[r.id] = k + 1
            out.append(self.fn(r, k))
        return out


def _plan(records: list) -> dict[str, str]:
    """Give each record a fate by position: keep, rewrite-ok, rewrite-no-proposal, low."""
    fates = ["keep", "rewrite", "rewrite_none", "low"]
    return {r.id: fates[i % 4] for i, r in enumerate(records)}


def test_policy_buckets_reconcile_and_outputs(tmp_path: Path, synth_dir: Path, synth_records: list) -> None:
    plan = _plan(synth_records)

    def fn(r: AnyRecord, k: int) -> Verdict:
        fate = plan[r.id]
        if k > 0:  # second look: rewritten and rebuilt records are good now
            return Judgement(9, 8, ("fixed",), None, "scripted")
        if fate == "keep":
            return Judgement(8, 10, (), None, "scripted")
        if fate == "rewrite":
            key = {
                "grounding": "instruction",
                "trajectory": "goal",
                "qa": "question",
                "navigation_step": "goal",
            }[r.kind]
            return Judgement(5, 9, ("vague",), {key: "a clearer wording"}, "scripted")
        if fate == "rewrite_none":
            return Judgement(6, 9, ("vague",), None, "scripted")
        return Judgement(2, 2, ("wrong target",), None, "scripted")

    spec = ScoringSpec()
    report = score_dataset(synth_dir, tmp_path / "out", spec, ScriptedJudge(fn), chunk_size=5)
    n = len(synth_records)
    counts = report.to_dict()["decisions"]
    assert sum(counts.values()) == n == report.read
    n_keep = sum(f == "keep" for f in plan.values())
    n_rw = sum(f == "rewrite" for f in plan.values())
    assert counts == {"kept": n_keep, "rewritten": n_rw, "rebuilt": n - n_keep - n_rw, "discarded": 0}
    assert report.before == pytest.approx(n_keep / n) and report.after == 1.0
    out = DatasetReader(tmp_path / "out" / "dataset")
    assert len(out) == n
    by_id = {r.id: r for r in out}
    orig = {r.id: r for r in synth_records}
    for rid, fate in plan.items():
        r = by_id[rid]
        if fate == "rewrite":
            assert r.meta["rewritten_fields"] and "a clearer wording" in r.model_dump_json()
        elif fate in ("rewrite_none", "low"):
            assert r.provenance.extra["rebuilt_from"] == rid and r != orig[rid]
        else:
            assert r == orig[rid]
    check = validate_dataset(tmp_path / "out" / "dataset")
    assert check.ok and not check.warnings, check.to_text()
    lines = [json.loads(x) for x in (tmp_path / "out" / "decisions.jsonl").read_text().splitlines()]
    assert sorted(d["id"] for d in lines) == sorted(plan)
    assert {d["low_reason"] for d in lines if d["decision"] == "rebuilt"} == {"no_proposal", "low_score"}
    assert Image.open(tmp_path / "out" / "histogram.png").size[0] > 400


def test_discard_when_configured_and_failures(tmp_path: Path, synth_dir: Path, synth_records: list) -> None:
    first = synth_records[0].id

    def fn(r: AnyRecord, k: int) -> Verdict:
        if r.id == first:
            return JudgeFailure("endpoint down", "scripted")
        return Judgement(3, 9, ("bad",), None, "scripted")

    spec = ScoringSpec(on_low_score="discard")
    report = score_dataset(synth_dir, tmp_path / "a", spec, ScriptedJudge(fn), max_failure_share=0.5)
    assert report.decisions["discarded"] == report.read and report.judge_failures == 1
    assert report.discard_reasons == {"judge_failed": 1, "low_score": report.read - 1}
    assert report.after == 0.0 and len(DatasetReader(tmp_path / "a" / "dataset")) == 0
    with pytest.raises(RuntimeError, match="judge failed on 1 of"):
        score_dataset(synth_dir, tmp_path / "b", spec, ScriptedJudge(fn), max_failure_share=0.01)


def test_rewrite_rescored_low_is_rebuilt_or_discarded(
    tmp_path: Path, synth_dir: Path, synth_records: list
) -> None:
    def fn(r: AnyRecord, k: int) -> Verdict:
        if r.kind != "grounding":
            return Judgement(10, 10, (), None, "scripted")
        if "rebuilt_from" in r.provenance.extra:
            return Judgement(1, 1, ("still bad",), None, "scripted")
        return Judgement(5, 5, ("meh",), {"instruction": "Tap it"}, "scripted")

    report = score_dataset(synth_dir, tmp_path / "o", ScoringSpec(), ScriptedJudge(fn))
    n_g = sum(r.kind == "grounding" for r in synth_records)
    assert report.decisions["discarded"] == n_g == report.discard_reasons["rebuild_scored_low"]
    lines = [json.loads(x) for x in (tmp_path / "o" / "decisions.jsonl").read_text().splitlines()]
    assert {d["low_reason"] for d in lines if d["kind"] == "grounding"} == {"rewrite_rescored_low"}
    assert validate_dataset(tmp_path / "o" / "dataset").warnings == []  # rebuilt images not leaked


def test_apply_proposal_revalidates(synth_records: list) -> None:
    g = next(r for r in synth_records if isinstance(r, GroundingSample))
    assert apply_proposal(g, {"instruction": "Tap Save"}).instruction == "Tap Save"
    with pytest.raises(RecordError, match="instruction"):
        apply_proposal(g, {"instruction": "   "})


def test_rebuild_only_synthetic(tmp_path: Path, synth_records: list) -> None:
    from venus_core.data.store import DatasetWriter

    traj = next(r for r in synth_records if r.kind == "trajectory")
    assert rebuildable(traj)
    with DatasetWriter(tmp_path / "w") as w:
        new = rebuild(traj, w)
        assert new.id == traj.id and new.episode_id == traj.episode_id and new.platform == traj.platform
        w.abort()
    foreign = traj.model_copy(
        update={"provenance": traj.provenance.model_copy(update={"generator": "import"})}
    )
    assert not rebuildable(foreign)
    assert not rebuildable(traj.to_steps()[0])  # one step of an episode cannot be regenerated alone
    with pytest.raises(ValueError, match="cannot rebuild"), DatasetWriter(tmp_path / "x") as w:
        rebuild(foreign, w)


def test_progress_reports_each_chunk_against_the_manifest(tmp_path: Path, synth_dir: Path) -> None:
    calls: list[tuple[int, int | None]] = []
    judge = ScriptedJudge(lambda r, k: Judgement(8, 10, (), None, "scripted"))
    report = score_dataset(synth_dir, tmp_path / "s", ScoringSpec(), judge, chunk_size=5,
                           progress=lambda d, t: calls.append((d, t)))
    assert report.read == 12 and calls == [(5, 12), (10, 12), (12, 12)]


def _imported_steps(tmp_path: Path, synth_dir: Path) -> Path:
    """The steps of the synthetic episodes as an imported source would carry them (no generator)."""
    from venus_core.data.store import DatasetWriter

    reader = DatasetReader(synth_dir)
    with DatasetWriter(tmp_path / "steps") as w:
        for r in reader:
            if r.kind != "trajectory":
                continue
            prov = r.provenance.model_copy(update={"generator": "venus_core.data.importers.androidcontrol"})
            for s in r.model_copy(update={"provenance": prov}).to_steps():
                w.put_image(reader.image_path(s.image).read_bytes())
                w.write(s)
    return tmp_path / "steps"


def test_a_step_is_rederived_only_by_a_judge_that_can(tmp_path: Path, synth_dir: Path) -> None:
    steps = _imported_steps(tmp_path, synth_dir)
    low = ScriptedJudge(lambda r, k: Judgement(2, 9, ("wrong element",), None, "scripted"))
    report = score_dataset(steps, tmp_path / "o", ScoringSpec(), low)
    assert report.decisions["discarded"] == report.read == report.buckets["low"] > 0
    lines = [json.loads(x) for x in (tmp_path / "o" / "decisions.jsonl").read_text().splitlines()]
    assert {d["reason"] for d in lines} == {"low_score: source cannot rebuild and judge scripted cannot re-derive steps"}
    assert report.requests == {"judge": report.read}

    class Rederiving(ScriptedJudge):
        can_rederive = True

        def rederive_many(self, items):  # type: ignore[no-untyped-def]
            return [parse_navigation(f"<think>again</think><action>{s.action}</action><conclusion>c</conclusion>",
                                     s.platform) for s in items]

    judge = Rederiving(lambda r, k: Judgement(9 if r.think == "again" else 2, 9, (), None, "scripted"))
    report = score_dataset(steps, tmp_path / "p", ScoringSpec(), judge)
    assert report.decisions["rebuilt"] == report.read == report.rebuilt_by["rederive"]
    assert report.requests == {"judge": report.read, "rederive": report.read, "rescore_rebuild": report.read}
    written = list(DatasetReader(tmp_path / "p" / "dataset"))
    assert sorted(r.id for r in written) == sorted(r.id for r in DatasetReader(steps))  # a step keeps its id
    assert all(r.think == "again" and r.meta["rebuilt"]["by"] == "scripted" for r in written)
    assert validate_dataset(tmp_path / "p" / "dataset").ok


def test_report_check_names_counts_that_do_not_reconcile() -> None:
    from venus_core.scoring.report import ScoreReport

    r = ScoreReport(read=2)
    r.buckets.update(keep=1, low=1)
    r.decisions.update(kept=1, discarded=1)
    r.by_bucket["keep"]["kept"] += 1
    r.by_bucket["low"]["discarded"] += 1
    r.check()
    r.by_bucket["keep"]["kept"] -= 1
    r.by_bucket["keep"]["discarded"] += 1  # a keep-bucket record is only ever kept
    with pytest.raises(RuntimeError, match="bucket keep"):
        r.check()
