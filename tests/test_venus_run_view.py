"""What `venus run` shows while it runs (venus_core/cli/live.py), on a fake run: no pipeline.

The progress model is fed task events and metrics.jsonl records by hand (tests/pipelines/
test_pipeline_progress.py covers it); here: the plain lines off a terminal, the live table's
content, and the run command's end output for an interrupted run.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pipelines.progress import RunProgress, StagePlan, StageState
from venus_core.cli.live import LiveView, PlainView, format_duration, plain_line, stage_table

PLANS = [StagePlan("score-data", "score_data", "score_data", log_name="score_data.log"),
         StagePlan("mid-train", "mid_train", "mid_train", total=120, log_name="mid_train.log"),
         StagePlan("offline-rl-3", "offline_rl", "offline_rl: web", domain="web", total=80,
                   log_name="offline_rl-web.log")]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def fake_run(tmp_path: Path) -> tuple[RunProgress, Clock, Path]:
    clock = Clock()
    run = tmp_path / "kfp" / "run-1"
    progress = RunProgress(PLANS, tmp_path / "logs", lambda: run, clock=clock, read_every_s=0)
    return progress, clock, run


def log_steps(run: Path, task: str, *steps: tuple[float, int, dict[str, float]]) -> None:
    path = run / task / "model" / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for t, step, m in steps:
            f.write(json.dumps({"t": t, "kind": "metrics", "step": step, "metrics": m}) + "\n")


def test_format_duration() -> None:
    assert [format_duration(s) for s in (None, 4.4, 59.6, 187, 3723)] == ["-", "4s", "1:00", "3:07", "1:02:03"]


def test_off_a_terminal_each_state_change_is_one_plain_line(tmp_path: Path) -> None:
    progress, clock, run = fake_run(tmp_path)
    out = io.StringIO()
    with PlainView(progress, out):
        progress.task_event("score-data", "cached")
        progress.task_event("mid-train", "start")
        log_steps(run, "mid-train", (clock.now + 5, 10, {"train/loss": 3.25}),
                  (clock.now + 9, 120, {"train/loss": 1.5}))
        for _ in range(3):  # a live view would refresh; a plain one prints nothing for it
            progress.refresh()
        clock.now += 12.34
        progress.task_event("mid-train", "success")
        progress.task_event("offline-rl-3", "start")
        clock.now += 2
        progress.task_event("offline-rl-3", "failure")
    progress.task_event("merge", "start")  # after the view closed: not printed
    lines = out.getvalue().splitlines()
    assert lines[0] == "stages: score_data, mid_train, offline_rl: web"
    assert len(lines) == 6 and "\x1b[" not in out.getvalue()
    fields = [line.split()[1:] for line in lines[1:]]  # without the clock time
    assert fields[0] == ["score_data", "cached"]
    assert fields[1][:2] == ["mid_train", "running"] and lines[2].endswith("mid_train.log")
    assert fields[2] == ["mid_train", "done", "12.3s", "120/120", "steps", "loss", "1.5"]
    assert fields[3][:2] == ["offline_rl:", "web"] and "running" in lines[4]
    assert "failed" in lines[5] and "2.0s" in lines[5] and lines[5].endswith("offline_rl-web.log")


def test_the_live_table_shows_steps_eta_and_the_headline(tmp_path: Path) -> None:
    progress, clock, run = fake_run(tmp_path)
    progress.task_event("score-data", "success")
    progress.task_event("mid-train", "start")
    start = clock.now
    log_steps(run, "mid-train", (start + 10, 10, {"train/loss": 3.0}), (start + 20, 20, {"train/loss": 2.75}))
    clock.now = start + 20
    progress.refresh()
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(stage_table(progress.rows(), title="venus run t"))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    found = {label: [line for line in text.splitlines() if line.strip().startswith(label + " ")]
            for label in ("score_data", "mid_train", "offline_rl: web")}
    assert all(len(lines) == 1 for lines in found.values()), text
    rows = {label: lines[0] for label, lines in found.items()}
    mid = rows["mid_train"]
    assert "running" in mid and "20/120" in mid and "loss 2.75" in mid
    assert "20s" in mid and "1:40" in mid  # elapsed 20 s; 100 steps left at 1 step/s
    assert "pending" in rows["offline_rl: web"] and "0/80" in rows["offline_rl: web"]
    assert "done" in rows["score_data"]


def test_the_live_view_starts_and_stops_on_any_stream(tmp_path: Path) -> None:
    progress, _, _ = fake_run(tmp_path)
    out = io.StringIO()
    with LiveView(progress, out, title="venus run t", refresh_per_second=20) as view:
        progress.task_event("score-data", "start")
        table = view.render()
        assert table.row_count == 3 and "venus run t" in str(table.title)


def test_plain_line_of_a_stopped_stage_names_its_log(tmp_path: Path) -> None:
    progress, clock, _ = fake_run(tmp_path)
    progress.task_event("offline-rl-3", "start")
    clock.now += 61
    progress.task_event("offline-rl-3", "stopped")
    line = plain_line(progress.row("offline-rl-3"), clock=clock.now)
    assert "stopped" in line and "61.0s" in line and "0/80 steps" in line and line.endswith("offline_rl-web.log")
    assert progress.row("offline-rl-3").state is StageState.STOPPED


def test_an_interrupted_run_prints_the_table_and_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run command's Ctrl-C path, with run_local replaced by one that is interrupted in mid_train."""
    from typer.testing import CliRunner

    import pipelines.local
    from pipelines.local import LocalRunInterrupted
    from venus_core.cli import app

    summary: dict[str, Any] = {"agent": "venus-tiny", "status": "INTERRUPTED", "seconds": 30.0, "stages": [
        {"task": "score-data", "stage": "score_data", "status": "SUCCESS", "seconds": 20.0, "metrics": {}},
        {"task": "mid-train", "stage": "mid_train", "status": "INTERRUPTED", "seconds": 10.0, "metrics": {}}]}

    def interrupted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise LocalRunInterrupted("mid_train", summary, tmp_path / "logs" / "mid_train.log")

    monkeypatch.setattr(pipelines.local, "run_local", interrupted)
    root = Path(__file__).resolve().parents[1]
    res = CliRunner().invoke(app, ["run", str(root / "agents/venus-tiny"), "--set", "mid_train.max_steps=3",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 130
    out = " ".join(res.output.split())
    assert "stopped during mid_train" in out and "Traceback" not in out
    assert f"resume: venus run {root / 'agents/venus-tiny'} --set mid_train.max_steps=3 --out {tmp_path / 'out'}" in out
    assert "(score_data) come from kfp.local's cache" in out and "mid_train and the stages after it" in out
    assert "INTERRUPTED" in out  # the stage table
