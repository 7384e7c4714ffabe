"""Component `online_rl`: full-trajectory GRPO of one navigation specialist on live environments."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List

from kfp.dsl import Input, Metrics, Model, Output


def online_rl(
    agent_spec: str,
    overrides: List[str],
    domain: str,
    base: Input[Model],
    model: Output[Model],
    metrics: Output[Metrics],
) -> None:
    """Online RL of the mobile or web specialist on live environments (UI-Venus-1.5 stage 3).

    G full trajectories per task on simulated phones leased through the device gateway over ADB,
    or MiniWoB++ pages in headless Chromium; trajectory-level GRPO with the adaptive KL reference
    and the annealed entropy bonus. Held-out tasks are played before and after training.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value (online_rl.* here), applied after the spec.
        domain: The navigation specialist: mobile or web.
        base: The offline RL specialist of that domain.

    Returns:
        model: The specialist after online RL (HF checkpoint in model/), which goes on to the merge.
        metrics: Held-out task success before and after, training seconds, devices that failed.
    """
    import json
    import os

    from venus_core.runtime.launch import main

    os.makedirs(model.path, exist_ok=True)
    spec_file = os.path.join(model.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", model.path, "--domain", domain, "--model", os.path.join(base.path, "model")]
    for item in overrides:
        argv += ["--set", item]
    rc = main(["online_rl", *argv])
    if rc != 0:
        raise RuntimeError(f"online_rl --domain {domain} failed with exit status {rc}")
    with open(os.path.join(model.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    held = report.get("held_out") or {}
    for when in ("before", "after"):
        if when in held:
            metrics.log_metric(f"held_out_success_{when}", float(held[when]["value"]))
    metrics.log_metric("train_s", float(report["seconds"]["train"]))
    metrics.log_metric("devices_failed", float(report["devices"].get("failed", 0)))
