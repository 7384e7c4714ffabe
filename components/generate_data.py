"""Component `generate_data`: the data flywheel, trajectories generated and verified on devices."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List

from kfp.dsl import Dataset, Metrics, Output


def generate_data(agent_spec: str, overrides: List[str], data: Output[Dataset], metrics: Output[Metrics]) -> None:
    """Grow a verified trajectory dataset on devices in rounds (UI-Venus-1.5 data flywheel).

    Seed task prompts are expanded into concrete tasks (flywheel.expander), deduplicated with the task
    pool's embedder, filtered for feasibility, executed by the spec's base model on devices leased through
    the device service, verified by rules on device state (or the MLLM judge), and fed back into the next
    round's expansion; the verified trajectories become the score_data source `flywheel`.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value (flywheel.* here), applied after the spec.

    Returns:
        data: dataset/ (verified trajectories with provenance), tasks.jsonl (every proposal and its fate), report.json.
        metrics: Verified and executed tasks, success of the first and last round, device-minutes, expander and judge calls.
    """
    import json
    import os

    from venus_core.runtime.generate_data import main

    os.makedirs(data.path, exist_ok=True)
    spec_file = os.path.join(data.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", data.path]
    for item in overrides:
        argv += ["--set", item]
    rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"generate_data failed with exit status {rc}")
    with open(os.path.join(data.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    metrics.log_metric("verified", float(report["total"]["verified"]))
    metrics.log_metric("executed", float(report["total"]["executed"]))
    metrics.log_metric("success_first_round", float(report["rise"]["first"]["value"]))
    metrics.log_metric("success_last_round", float(report["rise"]["last"]["value"]))
    metrics.log_metric("device_minutes", float(report["device_minutes"]))
    metrics.log_metric("expander_calls", float(report["expander_calls"]))
    metrics.log_metric("judge_calls", float(report["judge_calls"]))
