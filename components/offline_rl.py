"""Component `offline_rl`: one offline GRPO specialist (grounding, mobile or web)."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List

from kfp.dsl import Dataset, Input, Metrics, Model, Output


def offline_rl(
    agent_spec: str,
    overrides: List[str],
    domain: str,
    base: Input[Model],
    data: Input[Dataset],
    lr: float,
    max_steps: int,
    kl_coef: float,
    model: Output[Model],
    metrics: Output[Metrics],
) -> None:
    """Offline GRPO of one specialist (grounding, mobile or web) from the mid-trained checkpoint (UI-Venus-1.5 stage 2).

    Trains on the scored sources named in offline_rl.<domain>.sources (minus the mixture's
    validation split), or on the scored mixture's train split when none are named: grounding with
    the point-in-box reward, mobile / web navigation with the action reward, history alignment and
    sparse-action enhancement.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value, applied after lr, max_steps and kl_coef.
        domain: The specialist: grounding, mobile or web.
        base: The mid-trained checkpoint the specialist starts from and is held near (KL reference).
        data: The scored corpus from score_data.
        lr: Learning rate (offline_rl.<domain>.lr).
        max_steps: GRPO steps (offline_rl.<domain>.max_steps).
        kl_coef: KL penalty towards the mid-trained reference (offline_rl.<domain>.kl_coef).

    Returns:
        model: The specialist's HF checkpoint in model/, with report.json.
        metrics: Held-out rates after training, training seconds.
    """
    import json
    import os

    from venus_core.runtime.launch import main

    os.makedirs(model.path, exist_ok=True)
    spec_file = os.path.join(model.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", model.path, "--domain", domain,
            "--model", os.path.join(base.path, "model"), "--data-root", data.path,
            "--set", f"offline_rl.{domain}.lr={lr!r}", "--set", f"offline_rl.{domain}.max_steps={max_steps}",
            "--set", f"offline_rl.{domain}.kl_coef={kl_coef!r}"]
    for item in overrides:
        argv += ["--set", item]
    rc = main(["offline_rl", *argv])  # in this pod, or as a TrainJob, per the spec
    if rc != 0:
        raise RuntimeError(f"offline_rl --domain {domain} failed with exit status {rc}")
    with open(os.path.join(model.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    for key, rate in (report.get("held_out_after") or {}).items():
        metrics.log_metric(f"held_out_{key}", float(rate["value"]))
    metrics.log_metric("train_s", float(report["seconds"]["train"]))
