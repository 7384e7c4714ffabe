"""Component `score_data`: the agent's data sources -> validated, cleaned, scored, mixed corpus."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List, Optional

from kfp.dsl import Dataset, Input, Metrics, Output


def score_data(agent_spec: str, overrides: List[str], data: Output[Dataset], metrics: Output[Metrics],
               generated: Optional[Input[Dataset]] = None) -> None:
    """Score the training data: the spec's sources become one validated, cleaned, judged, mixed corpus.

    UI-Venus-1.5 data stage: materialise the spec's sources, validate, clean, judge each record
    (keep / rewrite / rebuild / discard) and mix the domains in the spec's ratios.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value, applied after the spec.
        generated: The generate_data output (flywheel.enabled): its dataset/ is scored as the source `flywheel`.

    Returns:
        data: The corpus: cleaned/, scored/ and mixture/{train,validation}; report.json has the bucket table and provenance.
        metrics: Mixture records per split, records selected per domain, judge decisions, wall seconds.
    """
    import json
    import os

    from venus_core.runtime.score_data import main

    os.makedirs(data.path, exist_ok=True)
    spec_file = os.path.join(data.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", data.path]
    if generated is not None:
        argv += ["--generated", os.path.join(generated.path, "dataset")]
    for item in overrides:
        argv += ["--set", item]
    rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"score_data failed with exit status {rc}")
    with open(os.path.join(data.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    for name, value in report["metrics"].items():
        metrics.log_metric(name, float(value))
