"""`pipelines.progress` and the task-log side of `pipelines.local`, on fake stage directories.

No pipeline runs here: metrics.jsonl files are written the way JsonlTracker writes them, kfp.local's
stream is fed to TaskLog as text, the clock is a variable. The real run is in
test_pipeline_local_run.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipelines.local import TaskLog, _cached_outputs, _descendants, stop_stage_processes, write_metadata_outputs
from pipelines.progress import (
    JsonlTail,
    Progress,
    RunProgress,
    StagePlan,
    StageRow,
    StageState,
    eta_seconds,
    measure,
    plan_stages,
    tail_lines,
)
from venus_core.config import load_spec

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "agents" / "venus-tiny"


def params(t: float, **values: Any) -> dict[str, Any]:
    return {"t": t, "kind": "params", "params": values}


def metrics(t: float, step: int, **values: float) -> dict[str, Any]:
    return {"t": t, "kind": "metrics", "step": step, "metrics": values}


def append(path: Path, *records: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")


# ----------------------------------------------------------------------------- measure / ETA


def test_mid_train_counts_its_logged_optimizer_steps_against_the_planned_total() -> None:
    records = [params(0, **{"mid_train.max_steps": 120}),
               metrics(10, 10, **{"train/loss": 3.0, "train/lr": 1e-4}),
               metrics(11, 10, **{"eval/grounding_hit": 0.1}),  # a held-out eval: no train/loss, not a step
               metrics(20, 20, **{"train/loss": 2.5})]
    p = measure("mid_train", None, records, spec_total=999)
    assert (p.done, p.total, p.unit) == (20, 120, "steps")  # the job's own params win over the spec
    assert p.headline == "loss 2.5"
    assert p.first == (10, 10) and p.last == (20, 20)


def test_offline_rl_steps_are_zero_based_and_epoch_records_do_not_count() -> None:
    records = [metrics(5, 0, **{"time/step_s": 1.0, "reward/mean": 0.25}),
               metrics(6, 0, epoch=0.0, pool_thoughts=3.0),  # navigation epoch bookkeeping
               metrics(7, 1, **{"time/step_s": 1.0, "reward/mean": 0.5})]
    before_params = measure("offline_rl", "web", records, spec_total=80)
    assert (before_params.done, before_params.total) == (2, 80)  # params not written yet: the spec's plan
    with_params = measure("offline_rl", "web", [params(0, **{"offline_rl.web.max_steps": 40}), *records], 80)
    assert with_params.total == 40 and with_params.headline == "reward 0.5"


def test_online_rl_headline_prefers_success_and_evaluate_counts_model_suite_pairs() -> None:
    online = measure("online_rl", "mobile", [params(0, **{"online_rl.steps": 4}),
                                             metrics(1, 0, **{"time/step_s": 2.0, "success_rate": 0.0,
                                                              "reward/mean": -0.1})])
    assert (online.done, online.total, online.headline) == (1, 4, "success 0")
    ev = measure("evaluate", None, [params(0, models={"mid": "a", "web": "b", "merged": "c"},
                                           suites=[{"name": "g"}, {"name": "n"}]),
                                    metrics(1, 0, **{"mid/g/hit_n": 4.0, "mid/g/hit": 0.25}),
                                    metrics(2, 0, **{"mid/n/type_match": 0.5})])
    assert (ev.done, ev.total, ev.unit) == (2, 6, "evals")
    assert ev.headline == "mid/n/type_match 0.5"


def test_stages_without_steps_show_only_their_headline() -> None:
    p = measure("score_data", None, [metrics(3, 0, mixture_train_records=65.0, wall_s=2.5)])
    assert (p.done, p.total, p.unit, p.headline) == (None, None, None, "train records 65")
    assert measure("merge", None, []) == Progress()


def test_eta_uses_the_rate_between_the_first_and_latest_step() -> None:
    p = Progress(done=11, total=20, unit="steps", first=(100.0, 1), last=(110.0, 11))  # 1 step/s
    assert eta_seconds(p, started=0.0, now=112.0) == pytest.approx(7.0)  # 9 left, 2 s since the last
    one = Progress(done=1, total=5, unit="steps", first=(100.0, 1), last=(100.0, 1))
    assert eta_seconds(one, started=90.0, now=100.0) == pytest.approx(40.0)  # from the stage's start
    assert eta_seconds(Progress(done=5, total=5, first=(1.0, 1), last=(2.0, 5)), 0.0, 3.0) == 0.0
    assert eta_seconds(Progress(done=0, total=5), 0.0, 3.0) is None
    assert eta_seconds(p, started=0.0, now=1000.0) == 0.0  # late, never negative


def test_jsonl_tail_returns_complete_lines_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == []  # not there yet
    path.write_text('{"a": 1}\nnot json\n{"b"', encoding="utf-8")
    assert tail.read() == [{"a": 1}]
    with path.open("a", encoding="utf-8") as f:
        f.write(': 2}\n')
    assert tail.read() == [{"b": 2}] and tail.read() == []
    path.write_text('{"c": 3}\n', encoding="utf-8")  # rewritten, shorter
    assert tail.read() == [{"c": 3}]


def test_tail_lines_drops_kfp_padding_and_starts_at_the_traceback() -> None:
    assert tail_lines(["a", "b", "c", "ValueError: x", "", "  "], 2) == ["c", "ValueError: x"]
    job = ['    "outputFile": "/x"', "    Traceback (most recent call last):", '      File "a.py"', "    ValueError: x"]
    assert tail_lines(["{", *job, ""], 10) == job[1:]
    assert tail_lines(job, 2) == job[2:]  # the traceback's start is beyond the window: the last lines
    assert tail_lines([], 5) == []


# ----------------------------------------------------------------------------- the plan


def test_the_plan_is_the_pipeline_in_kfp_local_order_with_the_spec_totals() -> None:
    from pipelines.gui_agent import build_pipeline

    spec = load_spec(TINY, ["mid_train.max_steps=7", "offline_rl.web.max_steps=3"])
    plans = plan_stages(build_pipeline(spec).pipeline_spec, spec)
    # dependency order, siblings as the pipeline defines them (kfp.local's own order among them varies)
    assert [p.label for p in plans] == ["score_data", "mid_train", "offline_rl: grounding", "offline_rl: mobile",
                                        "offline_rl: web", "online_rl: mobile", "online_rl: web", "merge", "evaluate"]
    by = {p.label: p for p in plans}
    assert by["mid_train"].total == 7 and by["offline_rl: web"].total == 3
    assert by["online_rl: web"].total == spec.online_rl.steps and by["merge"].total is None
    assert by["offline_rl: mobile"].task == "offline-rl-2" and by["offline_rl: mobile"].domain == "mobile"
    assert len({p.log_name for p in plans}) == len(plans) and by["online_rl: web"].log_name == "online_rl-web.log"

    off = load_spec(TINY, ["online_rl.enabled=false", "offline_rl.grounding.enabled=false"])
    labels = [p.label for p in plan_stages(build_pipeline(off).pipeline_spec, off)]
    assert labels == ["score_data", "mid_train", "offline_rl: mobile", "offline_rl: web", "merge", "evaluate"]


# ----------------------------------------------------------------------------- RunProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


PLANS = [StagePlan("score-data", "score_data", "score_data", log_name="score_data.log"),
         StagePlan("mid-train", "mid_train", "mid_train", total=100, log_name="mid_train.log"),
         StagePlan("offline-rl", "offline_rl", "offline_rl: web", domain="web", total=10,
                   log_name="offline_rl-web.log")]


def make_progress(tmp_path: Path, clock: Clock) -> tuple[RunProgress, dict[str, Path | None]]:
    where: dict[str, Path | None] = {"run": None}
    progress = RunProgress(PLANS, tmp_path / "logs", lambda: where["run"], clock=clock, read_every_s=0)
    return progress, where


def test_states_move_with_task_events_and_progress_follows_the_metrics_file(tmp_path: Path) -> None:
    clock = Clock()
    progress, where = make_progress(tmp_path, clock)
    seen: list[StageRow] = []
    progress.subscribe(seen.append)
    assert [r.state for r in progress.rows()] == [StageState.PENDING] * 3

    progress.task_event("score-data", "cached")
    progress.task_event("mid-train", "start")
    progress.refresh()  # kfp.local has not made the run directory yet: nothing to read, no error
    run = tmp_path / "kfp" / "venus-tiny-2026"
    where["run"] = run
    append(run / "mid-train" / "model" / "metrics.jsonl", params(clock.now, **{"mid_train.max_steps": 100}),
           metrics(clock.now + 10, 10, **{"train/loss": 3.0}))
    clock.now += 10
    progress.refresh()
    row = progress.row("mid-train")
    assert (row.state, row.done, row.total, row.headline) == (StageState.RUNNING, 10, 100, "loss 3")
    assert row.elapsed == pytest.approx(10.0) and row.eta is not None and row.eta > 0
    assert row.log == tmp_path / "logs" / "mid_train.log"

    append(run / "mid-train" / "model" / "metrics.jsonl", metrics(clock.now + 20, 100, **{"train/loss": 1.5}))
    clock.now += 30
    progress.task_event("mid-train", "SUCCESS")  # kfp's status word; the final records are read first
    done = progress.row("mid-train")
    assert (done.state, done.done, done.headline, done.eta) == (StageState.DONE, 100, "loss 1.5", None)
    assert done.elapsed == pytest.approx(40.0)

    progress.task_event("offline-rl", "start")
    clock.now += 5
    progress.task_event("offline-rl", "failure")
    failed = progress.row("offline-rl")
    assert failed.state is StageState.FAILED and failed.elapsed == pytest.approx(5.0) and failed.done == 0
    assert [(r.label, r.state) for r in seen] == [
        ("score_data", StageState.CACHED), ("mid_train", StageState.RUNNING), ("mid_train", StageState.DONE),
        ("offline_rl: web", StageState.RUNNING), ("offline_rl: web", StageState.FAILED)]
    assert progress.current() is None
    cached = progress.row("score-data")
    assert cached.elapsed is None


def test_a_stopped_stage_and_an_unplanned_task_are_shown(tmp_path: Path) -> None:
    clock = Clock()
    progress, _ = make_progress(tmp_path, clock)
    progress.task_event("mid-train", "start")
    assert progress.current() == "mid-train"
    clock.now += 3
    progress.task_event("mid-train", "stopped")
    assert progress.row("mid-train").state is StageState.STOPPED and progress.current() is None
    progress.task_event("extra-step-2", "start")
    assert progress.rows()[-1].label == "extra_step" and progress.log_path("extra-step-2").name == "extra-step-2.log"
    with pytest.raises(ValueError, match="unknown task event"):
        progress.task_event("mid-train", "exploded")


def test_a_finished_stage_without_records_counts_as_complete(tmp_path: Path) -> None:
    progress, _ = make_progress(tmp_path, Clock())
    progress.task_event("mid-train", "cached")
    row = progress.row("mid-train")
    assert (row.done, row.total) == (100, 100)


# ----------------------------------------------------------------------------- TaskLog -> files and events

STREAM = """\
12:00:00.000 - INFO - Running pipeline: venus-tiny
12:00:00.100 - INFO - Task score-data cache hit (key=0123456789ab); skipping execution.
12:00:01.000 - INFO - Executing task \x1b[96m'mid-train'\x1b[0m
12:00:01.001 - INFO - Streamed logs:
    {"inputs": {"parameterValues": "...resolved spec..."}}
    step 1 loss 2.0
12:00:02.000 - INFO - Task 'mid-train' finished with status \x1b[92mSUCCESS\x1b[0m
12:00:02.001 - INFO - Task 'mid-train' outputs:
    model: Model( uri='/x/mid-train/model' )
12:00:03.000 - INFO - Executing task 'offline-rl'
    Traceback (most recent call last):
    ValueError: no data

12:00:04.000 - ERROR - Task 'offline-rl' finished with status FAILURE
"""


def test_task_log_writes_one_file_per_stage_and_reports_events(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    names = {"mid-train": "mid_train.log", "offline-rl": "offline_rl-web.log"}
    log = TaskLog(None, log_dir=tmp_path, path_for=lambda t: tmp_path / names.get(t, f"{t}.log"),
                  on_event=lambda task, event: events.append((task, event)))
    for chunk in (STREAM[:100], STREAM[100:333], STREAM[333:]):  # arbitrary cuts, as a pipe delivers them
        log.write(chunk)
    log.close()
    assert events == [("score-data", "cached"), ("mid-train", "start"), ("mid-train", "success"),
                      ("offline-rl", "start"), ("offline-rl", "failure")]
    assert log.tasks["score-data"]["cached"] and log.tasks["score-data"]["cache_key"] == "0123456789ab"
    mid = (tmp_path / "mid_train.log").read_text()
    assert "Executing task 'mid-train'" in mid and "step 1 loss 2.0" in mid and "\x1b[" not in mid
    assert "outputs:" in mid and "model: Model(" in mid  # the listing after its end line
    assert "ValueError: no data" in (tmp_path / "offline_rl-web.log").read_text()
    assert "ValueError" not in mid
    whole = (tmp_path / "pipeline.log").read_text()
    assert whole.count("\n") == STREAM.count("\n") and "cache hit" in whole
    assert tail_lines(log.tasks["offline-rl"]["lines"], 5) == ["    Traceback (most recent call last):",
                                                               "    ValueError: no data"]
    assert log.log_path("offline-rl") == tmp_path / "offline_rl-web.log"


def test_cached_outputs_are_read_from_the_kfp_cache_entry(tmp_path: Path) -> None:
    entry = {"model": {"__kfp_artifact__": True, "uri": "/old/run/mid-train/model", "metadata": {}},
             "metrics": {"__kfp_artifact__": True, "uri": "/old/run/mid-train/metrics", "metadata": {"steps": 2.0}}}
    (tmp_path / "0123456789abcdef.json").write_text(json.dumps(entry))
    got = _cached_outputs(tmp_path, "0123456789ab")
    assert got == {"outputs": {"model": "/old/run/mid-train/model", "metrics": "/old/run/mid-train/metrics"},
                   "metrics": {"steps": 2.0}}
    assert _cached_outputs(tmp_path, "ffff") == {"outputs": {}, "metrics": {}}


def test_a_metadata_only_output_gets_a_file_so_the_cache_can_hit(tmp_path: Path) -> None:
    task = tmp_path / "mid-train"
    (task / "model").mkdir(parents=True)
    artifacts = {"model": {"artifacts": [{"name": "model", "uri": str(task / "model"), "metadata": {}}]},
                 "metrics": {"artifacts": [{"name": "metrics", "uri": str(task / "metrics"),
                                            "metadata": {"steps": 2.0}}]}}
    (task / "executor_output.json").write_text(json.dumps({"artifacts": artifacts}))
    assert write_metadata_outputs(task) == [task / "metrics"]
    assert json.loads((task / "metrics").read_text()) == {"steps": 2.0}
    assert write_metadata_outputs(task) == [] and write_metadata_outputs(tmp_path / "nothing") == []


# ----------------------------------------------------------------------------- Ctrl-C: stopping the stage


def _sigint_default() -> None:
    """A suite started in the background (`cmd &`) inherits SIGINT ignored, and so would every child: a
    terminal's Ctrl-C is what the tests model, so the children start with the default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _child(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_stage_that_handles_sigint_stops_without_sigkill() -> None:
    proc = _child("import time\nprint('ready', flush=True)\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
                  "    raise SystemExit(3)")
    assert proc.pid in _descendants()
    # the grace is an upper bound (it returns once the child has exited): a loaded machine needs seconds
    assert stop_stage_processes([proc.pid], grace_s=20) == []
    assert proc.pid not in _descendants()


def test_the_stage_shell_and_the_job_below_it_are_stopped_together() -> None:
    """kfp.local's stage is `sh -ec ...` running Python: a SIGINT must reach the job, not only the shell."""
    proc = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; print(\"ready\", flush=True); "
                             "time.sleep(60)'; echo after"], stdout=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    job = _descendants(proc.pid)
    assert len(job) == 1
    assert stop_stage_processes([proc.pid], grace_s=20) == []
    assert not any(pid in _descendants() for pid in (proc.pid, *job))


def test_a_stage_that_ignores_sigint_is_killed() -> None:
    proc = _child("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                  "time.sleep(60)")
    assert stop_stage_processes([proc.pid], grace_s=0.3) == [proc.pid]
    assert proc.pid not in _descendants()
