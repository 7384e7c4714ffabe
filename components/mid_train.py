"""Component `mid_train`: SFT of the base model on the scored domain mixture."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List

from kfp.dsl import Dataset, Input, Metrics, Model, Output


def mid_train(
    agent_spec: str,
    overrides: List[str],
    data: Input[Dataset],
    lr: float,
    max_steps: int,
    model: Output[Model],
    metrics: Output[Metrics],
) -> None:
    """Mid-train the base model: SFT on the scored mixture's train split (UI-Venus-1.5 stage 1).

    Perception, GUI-VQA, grounding and navigation in the spec's ratios.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value, applied after lr and max_steps.
        data: The scored corpus from score_data; training reads mixture/train.
        lr: Peak learning rate (mid_train.lr).
        max_steps: Optimizer steps (mid_train.max_steps).

    Returns:
        model: The HF checkpoint in model/, with report.json (held-out rates before and after, 95 % intervals);
            with mid_train.wise_ft < 1, model/ is the interpolation toward the base and trained/ the trained weights.
        metrics: Held-out rates after training, optimizer steps, wall seconds.
    """
    import json
    import os

    from venus_core.runtime.launch import main

    os.makedirs(model.path, exist_ok=True)
    spec_file = os.path.join(model.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", model.path, "--data", os.path.join(data.path, "mixture", "train"),
            "--set", f"mid_train.lr={lr!r}", "--set", f"mid_train.max_steps={max_steps}"]
    for item in overrides:
        argv += ["--set", item]
    rc = main(["mid_train", *argv])  # in this pod, or as a TrainJob, per the spec
    if rc != 0:
        raise RuntimeError(f"mid_train failed with exit status {rc}")
    with open(os.path.join(model.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    for key, rate in (report.get("held_out_after") or {}).items():
        metrics.log_metric(f"held_out_{key}", float(rate["value"]))
    for key, rate in (report.get("held_out_trained") or {}).items():  # mid_train.wise_ft < 1
        metrics.log_metric(f"held_out_trained_{key}", float(rate["value"]))
    metrics.log_metric("steps", float(report["steps"]))
    metrics.log_metric("wall_s", float(report["wall_s"]))
