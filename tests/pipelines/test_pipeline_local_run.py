"""`pipelines.local.run_local`: the real pipeline under kfp.local, end to end and failing fast.

The end-to-end run uses the embedded venus-tiny agent shrunk with `--set` (a few dozen synthetic
records, 2 SFT steps, 1 GRPO step per domain): every stage runs for real, in order, through
kfp.local's artifact passing. The task-log parser is tested on its own with kfp.local's format.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from pipelines.local import LocalRunError, TaskLog, format_summary, run_local, stage_threads

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "agents" / "venus-tiny"

SHRINK = [
    "data.sources.0.synth.n=40", "data.sources.1.synth.n=40", "data.sources.2.synth.n=80",
    "data.sources.3.synth.n=30", "data.sources.4.synth.n=30", "data.sources.5.collect.n=2",
    "data.validation_fraction=0.2",
    "mid_train.max_steps=2", "mid_train.batch_size=4", "mid_train.warmup_steps=0",
    "mid_train.save_every=2", "mid_train.eval_every=2", "eval.held_out=4", "eval.batch_size=4",
    "eval.held_out_suites.grounding_per_level=2", "eval.held_out_suites.navigation_steps=4",
    "eval.suites.0.limit=2", "eval.suites.1.limit=2",
] + [f"offline_rl.{d}.{k}" for d in ("grounding", "mobile", "web")
     for k in ("max_steps=1", "prompts_per_step=2", "group_size=2", "max_new_tokens=8")] + [
    "online_rl.steps=1", "online_rl.tasks_per_step=1", "online_rl.group_size=2", "online_rl.devices=2",
    "online_rl.max_steps_per_episode=2", "online_rl.task_pool.held_out=2", "online_rl.train_tasks=4",
    "online_rl.max_new_tokens=8", "online_rl.web_tasks=[click-button]",
    "merge.distill.steps=1", "merge.distill.batch_size=1", "merge.distill.max_new_tokens=8",
    "merge.distill.prompts.records=4", "eval.baselines=[base]"]


def test_task_log_splits_the_kfp_local_stream_per_task() -> None:
    echo = io.StringIO()
    log = TaskLog(echo)
    log.write("12:00:00.000 - INFO - Executing task \x1b[96m'score-data'\x1b[0m\n    hello\n    wor")
    log.write("ld\n12:00:01.000 - INFO - Task \x1b[96m'score-data'\x1b[0m finished with status "
              "\x1b[92mSUCCESS\x1b[0m\n")
    log.write("12:00:02.000 - INFO - Executing task 'mid-train'\n    Traceback\n    ValueError: bad\n")
    log.write("12:00:03.000 - ERROR - Task 'mid-train' finished with status FAILURE\n")
    assert log.tasks["score-data"]["lines"] == ["    hello", "    world"]
    assert log.tasks["score-data"]["status"] == "SUCCESS"
    assert log.tasks["mid-train"]["status"] == "FAILURE"
    assert log.tasks["mid-train"]["lines"][-1].strip() == "ValueError: bad"
    assert log.running() == "mid-train"
    assert "hello" in echo.getvalue()  # echoed unchanged


def test_format_summary_has_one_line_per_stage() -> None:
    summary = {"agent": "a", "status": "FAILURE", "seconds": 3.0, "out": "/o", "stages": [
        {"stage": "score_data", "status": "SUCCESS", "seconds": 1.25, "metrics": {"train": 65.0}},
        {"stage": "offline_rl", "domain": "web", "status": "FAILURE", "seconds": None, "metrics": {}}]}
    lines = format_summary(summary).splitlines()
    assert lines[0] == "a: FAILURE in 3.0s (/o)"
    assert lines[1].split() == ["score_data", "SUCCESS", "1.2s", "train=65"]
    assert lines[2].split() == ["offline_rl:", "web", "FAILURE", "-"]  # as the Kubeflow UI names it


@pytest.mark.slow
def test_a_failing_job_stops_the_run_at_its_stage_with_its_error(tmp_path: Path) -> None:
    broken = "data.sources=[{name: broken, kind: dataset, uri: " + str(tmp_path / "missing") + "}]"
    with pytest.raises(LocalRunError) as info:
        run_local(TINY, [broken, "offline_rl.grounding.sources=[]"], tmp_path / "run", echo=None)
    err = info.value
    assert err.stage == "score_data"
    assert "missing" in err.log_tail  # the job's own error, not just kfp's "task failed"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "FAILURE"
    assert [s["task"] for s in summary["stages"]] == ["score-data"]  # nothing ran after it


def test_stage_threads_follow_omp_num_threads_else_every_usable_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert stage_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert stage_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
        stage_threads()


# Put on PYTHONPATH, a fault for the stage processes kfp.local starts: the one whose component function
# is $VENUS_TEST_FAIL_FUNCTION exits (status 1) before it runs. Nothing in the pipeline's arguments changes, so
# the cache keys of the stages before it are the ones a clean run has.
_FAULT = """
import os, sys
_target = os.environ.get("VENUS_TEST_FAIL_FUNCTION")
if _target:
    _argv = open("/proc/self/cmdline", "rb").read().decode(errors="replace").split("\\0")
    if "--function_to_execute" in _argv and _argv[_argv.index("--function_to_execute") + 1:][:1] == [_target]:
        raise SystemExit(f"injected fault: {_target} fails before it starts")
"""


@pytest.mark.slow
def test_the_whole_pipeline_runs_locally_on_a_shrunk_tiny_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    shrink = [*SHRINK, f"eval.held_out_suites.cache_dir={tmp_path / 'suites'}"]
    # First the run fails at its last stage (evaluate) ...
    fault = tmp_path / "fault"
    fault.mkdir()
    (fault / "sitecustomize.py").write_text(_FAULT)
    with monkeypatch.context() as m:
        m.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(fault), os.environ.get("PYTHONPATH")])))
        m.setenv("VENUS_TEST_FAIL_FUNCTION", "evaluate")
        with pytest.raises(LocalRunError) as info:
            run_local(TINY, shrink, tmp_path, echo=None)
    assert info.value.stage == "evaluate" and "injected fault: evaluate" in info.value.log_tail
    failed = info.value.summary
    assert failed["status"] == "FAILURE" and [s["status"] for s in failed["stages"]][-1] == "FAILURE"
    stages = failed["stages"][:-1]  # every stage before it ran, none from a cache
    assert stages and all(s["status"] == "SUCCESS" and s["seconds"] > 0 and not s["cached"] for s in stages)
    # ... then the same spec into the same OUT (a re-run after the failure): the stages that finished come
    # from kfp.local's cache with their outputs and metrics, only the failed one runs again.
    summary = run_local(TINY, shrink, tmp_path, echo=None)
    assert summary["status"] == "SUCCESS"
    first = {s["task"]: (s["outputs"], s["metrics"], s.get("domain")) for s in stages}
    assert {s["task"]: (s["outputs"], s["metrics"], s.get("domain")) for s in summary["stages"][:-1]} == first
    assert all(s["cached"] for s in summary["stages"][:-1])
    stages = [*stages, summary["stages"][-1]]
    assert stages[-1]["task"] == "evaluate" and not stages[-1]["cached"]
    assert summary["torch_threads"] == stage_threads()
    assert summary["glibc_tunables"] == os.environ.get("GLIBC_TUNABLES", "")  # what the stages ran with
    names = [s["stage"] for s in stages]
    assert names[:2] == ["score_data", "mid_train"] and names[-2:] == ["merge", "evaluate"]
    assert sorted(names[2:-2]) == ["offline_rl"] * 3 + ["online_rl"] * 2
    assert all(s["status"] == "SUCCESS" and s["seconds"] > 0 for s in stages)
    assert sorted(s["domain"] for s in stages if s["stage"] == "offline_rl") == ["grounding", "mobile", "web"]
    assert sorted(s["domain"] for s in stages if s["stage"] == "online_rl") == ["mobile", "web"]
    by_stage = {s["stage"]: s for s in stages}
    assert by_stage["mid_train"]["metrics"]["steps"] == 2
    # venus-tiny publishes mid-training half-way back to its base (mid_train.wise_ft): both rates reported
    assert {"held_out_grounding/hit", "held_out_trained_grounding/hit"} <= set(by_stage["mid_train"]["metrics"])
    mid = Path(by_stage["mid_train"]["outputs"]["model"])
    assert (mid / "trained" / "SHA256SUMS").is_file() and (mid / "model" / "merge_report.json").is_file()
    assert by_stage["score_data"]["metrics"]["mixture_train_records"] > 0
    merged = Path(by_stage["merge"]["outputs"]["model"]) / "model"
    assert (merged / "config.json").is_file() and list(merged.glob("*.safetensors"))
    merge_report = json.loads((Path(by_stage["merge"]["outputs"]["model"]) / "report.json").read_text())
    assert sorted(merge_report["specialists"]) == ["grounding", "mobile", "web"]
    ev = by_stage["evaluate"]
    assert Path(ev["outputs"]["report"]).read_text().lstrip().lower().startswith("<!doctype html")
    models = {key.split("/")[0] for key in ev["metrics"]}
    assert models == {"base", "mid", "grounding", "mobile_offline", "mobile", "web_offline", "web", "merged",
                      "merge-linear", "merge-distill"}  # eval.baselines; merge.compare's other methods
    assert ev["metrics"]["base/live-phone/success_n"] == 2  # the shipped bootstrap, where the run began
    assert sorted(p.name for p in (merged.parent / "candidates").iterdir()) == ["distill", "linear"]
    assert ev["metrics"]["merged/held-out-grounding/overall_n"] == 6  # 3 levels x 2: the spec's held-out suites
    # then the spec's live suites (simulated phone, MiniWoB++ in Chromium), 2 episodes each, every model
    assert ev["metrics"]["mid/live-phone/success_n"] == ev["metrics"]["merge-distill/live-web/success_n"] == 2
    assert {"mid/held-out-navigation/step_success_ci_low", "mid/held-out-navigation/step_success_ci_high"} \
        <= set(ev["metrics"])
    assert json.loads((tmp_path / "summary.json").read_text())["stages"] == summary["stages"]
    logs = {s["task"]: Path(s["log"]) for s in stages}  # kfp.local's stream, split per stage
    assert logs["offline-rl-2"].name == "offline_rl-mobile.log"
    assert all(f"Executing task '{task}'" in path.read_text() for task, path in logs.items())
    assert "Pipeline" in (tmp_path / "logs" / "pipeline.log").read_text()

    # The same spec into the same OUT again (a resume): kfp.local's cache gives back every stage.
    again = run_local(TINY, shrink, tmp_path, echo=None)
    assert again["status"] == "SUCCESS" and again["seconds"] < summary["seconds"]
    assert all(s["cached"] and s["status"] == "SUCCESS" for s in again["stages"])
    assert sorted(s["task"] for s in again["stages"]) == sorted(s["task"] for s in stages)
    first = {s["task"]: (s["outputs"], s["metrics"], s.get("domain")) for s in stages}
    assert {s["task"]: (s["outputs"], s["metrics"], s.get("domain")) for s in again["stages"]} == first
