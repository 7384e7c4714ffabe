"""Component `score_data`: the agent's data sources -> validated, cleaned, scored, mixed corpus."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List

from kfp.dsl import Dataset, Metrics, Output


def score_data(agent_spec: str, overrides: List[str], data: Output[Dataset], metrics: Output[Metrics]) -> None:
    """Score the training data (UI-Venus-1.5 data stage): materialise the spec's sources, validate,
    clean, judge each record (keep / rewrite / rebuild / discard) and mix the domains in the
    spec's ratios. `data` holds cleaned/, scored/ and mixture/{train,validation}; report.json has
    the bucket table and provenance.
    """
    import json
    import os

    from venus_core.runtime.score_data import main

    os.makedirs(data.path, exist_ok=True)
    spec_file = os.path.join(data.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", data.path]
    for item in overrides:
        argv += ["--set", item]
    rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"score_data failed with exit status {rc}")
    with open(os.path.join(data.path, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    for split in ("train", "validation"):
        metrics.log_metric(f"mixture_{split}_records", float(report["mixture"][split]))
    for domain, count in report["mixture"]["selected_by_domain"].items():
        metrics.log_metric(f"selected_{domain}", float(count))
    metrics.log_metric("wall_s", float(report["wall_s"]))
