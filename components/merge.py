"""Component `merge`: the specialists merged into one checkpoint (TIES by default)."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List, Optional

from kfp.dsl import Input, Metrics, Model, Output


def merge(
    agent_spec: str,
    overrides: List[str],
    base: Input[Model],
    method: str,
    density: float,
    model: Output[Model],
    metrics: Output[Metrics],
    grounding: Optional[Input[Model]] = None,
    mobile: Optional[Input[Model]] = None,
    web: Optional[Input[Model]] = None,
) -> None:
    """Merge the specialists into one model: TIES merge of task vectors relative to the mid-trained base (UI-Venus-1.5 stage 4).

    Streams over safetensors shards; report.json has per-part density and sign conflicts.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value, applied after method and density.
        base: The mid-trained checkpoint the task vectors are taken against.
        method: Merge method (merge.method): ties, linear, task_arithmetic or distill.
        density: Share of each task vector kept by magnitude before merging (merge.density, TIES).
        grounding: The grounding specialist, when that domain is enabled.
        mobile: The mobile specialist (after online RL when enabled), when that domain is enabled.
        web: The web specialist (after online RL when enabled), when that domain is enabled.

    Returns:
        model: The merged HF checkpoint in model/, with report.json; the other merge.compare methods' checkpoints in candidates/<method>.
        metrics: Seconds, and per part the achieved density and sign-conflict rate of the published method.
    """
    import json
    import os

    from venus_core.runtime.merge import main

    os.makedirs(model.path, exist_ok=True)
    spec_file = os.path.join(model.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", model.path, "--base", os.path.join(base.path, "model"),
            "--set", f"merge.method={method}", "--set", f"merge.density={density!r}"]
    for name, specialist in (("grounding", grounding), ("mobile", mobile), ("web", web)):
        if specialist is not None:
            argv += ["--model", f"{name}={os.path.join(specialist.path, 'model')}"]
    for item in overrides:
        argv += ["--set", item]
    # the other merge.compare methods go to model/candidates/<method>, for the evaluate stage's table
    argv += ["--candidates"]
    rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"merge failed with exit status {rc}")
    with open(os.path.join(model.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    for name, value in report["methods"][report["published"]]["metrics"].items():
        metrics.log_metric(name, float(value))
