"""Component `evaluate`: mid-trained, specialist and merged checkpoints on the evaluation suites."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from typing import List, Optional

from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output


def evaluate(
    agent_spec: str,
    overrides: List[str],
    mid: Input[Model],
    merged: Input[Model],
    use_spec_suites: bool,
    limit: int,
    results: Output[Artifact],
    report: Output[HTML],
    metrics: Output[Metrics],
    data: Optional[Input[Dataset]] = None,
    grounding: Optional[Input[Model]] = None,
    mobile: Optional[Input[Model]] = None,
    web: Optional[Input[Model]] = None,
    mobile_offline: Optional[Input[Model]] = None,
    web_offline: Optional[Input[Model]] = None,
) -> None:
    """Evaluate every checkpoint of the run stage by stage: the spec's eval.baselines (the base model,
    random init), mid-trained, each specialist, merged.

    Suites: the spec's fixed held-out suites (eval.held_out_suites: grounding by level with
    refusals and navigation steps, from seeds no stage trains on) and eval.suites; only when neither
    gives a suite (`use_spec_suites` false), the scored mixture's validation split (held out by
    episode) as two suites: grounding and goal-only offline navigation.

    Args:
        agent_spec: The resolved agent spec (one line of JSON); the job reads it with --spec.
        overrides: Spec overrides as key=value, applied after the spec.
        mid: The mid-trained checkpoint.
        merged: The merged checkpoint (the published method), with the other merge.compare methods in candidates/.
        use_spec_suites: True when the spec names suites; false evaluates on the validation split of data.
        limit: Samples or episodes per suite; 0 means every one.
        data: The scored corpus from score_data; passed only when use_spec_suites is false.
        grounding: The grounding specialist, when enabled.
        mobile: The mobile specialist (after online RL when enabled), when enabled.
        web: The web specialist (after online RL when enabled), when enabled.
        mobile_offline: The mobile specialist before online RL, when online RL runs.
        web_offline: The web specialist before online RL, when online RL runs.

    Returns:
        results: Per-sample JSONs, summary.json, comparison.json and provenance.json.
        report: The HTML report: stage-by-stage table with k/n and intervals, per-category rates, sample viewer.
        metrics: Each model's headline rate per suite, with its n and 95 % interval.
    """
    import json
    import os
    import shutil

    from venus_core.runtime.evaluate import main

    os.makedirs(results.path, exist_ok=True)
    spec_file = os.path.join(results.path, "agent_spec.yaml")  # the resolved spec, kept beside the outputs
    with open(spec_file, "w", encoding="utf-8") as f:
        f.write(agent_spec)
    argv = ["--spec", spec_file, "--out", results.path, "--baselines",  # eval.baselines first: where the run began
            "--model", f"mid={os.path.join(mid.path, 'model')}"]
    for name, specialist in (("grounding", grounding), ("mobile_offline", mobile_offline), ("mobile", mobile),
                             ("web_offline", web_offline), ("web", web)):
        if specialist is not None:
            argv += ["--model", f"{name}={os.path.join(specialist.path, 'model')}"]
    argv += ["--model", f"merged={os.path.join(merged.path, 'model')}"]
    candidates = os.path.join(merged.path, "candidates")  # the merge stage's other merge.compare methods
    if os.path.isdir(candidates):
        for method in sorted(os.listdir(candidates)):
            argv += ["--model", f"merge-{method}={os.path.join(candidates, method)}"]
    if not use_spec_suites:
        if data is None:
            raise ValueError("evaluate: the spec has no eval.suites nor eval.held_out_suites and no dataset was passed")
        validation = os.path.join(data.path, "mixture", "validation")
        suites = [{"name": "validation-grounding", "evaluator": "grounding", "data": validation},
                  {"name": "validation-navigation", "evaluator": "nav_offline", "data": validation}]
        argv += ["--set", "eval.suites=" + json.dumps(suites)]
    if limit > 0:
        argv += ["--limit", str(limit)]
    for item in overrides:
        argv += ["--set", item]
    rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"evaluate failed with exit status {rc}")
    shutil.copyfile(os.path.join(results.path, "report.html"), report.path)
    with open(os.path.join(results.path, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    for model_name, suites in summary.items():
        for suite, headline in suites.items():
            name = f"{model_name}/{suite}/{headline['metric']}"
            metrics.log_metric(name, float(headline["value"]))
            metrics.log_metric(f"{name}_n", float(headline["n"]))
            metrics.log_metric(f"{name}_ci_low", float(headline["ci95_low"]))
            metrics.log_metric(f"{name}_ci_high", float(headline["ci95_high"]))
