"""`venus runs compare A B`: the differences between two runs that matter.

Why not the MLflow UI's compare view: it shows every param, the equal ones included, and does not
look into the nested stage runs of a pipeline. Here: params that differ (flattened spec), final
metrics side by side with deltas, the tags that identify code and config (git revision, spec hash,
image, inputs), and the stage runs present in only one run; stages present in both have their
final metrics compared as `<stage>/<metric>`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlflow import MlflowClient
from mlflow.entities import Run

KEY_TAGS = ("venus.git_revision", "venus.spec_sha256", "venus.image", "venus.inputs", "venus.agent",
            "venus.job", "mlflow.source.git.commit")


@dataclass
class RunDiff:
    run_a: str
    run_b: str
    params: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    metrics: list[tuple[str, float | None, float | None, float | None]] = field(default_factory=list)
    tags: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    stages_only_a: list[str] = field(default_factory=list)
    stages_only_b: list[str] = field(default_factory=list)


def _stages(client: MlflowClient, run: Run) -> dict[str, Run]:
    children = client.search_runs([run.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'",
                                  max_results=1000)
    out: dict[str, Run] = {}
    for child in sorted(children, key=lambda r: r.info.start_time or 0):
        name = child.info.run_name or child.info.run_id
        out[name if name not in out else f"{name}#{child.info.run_id[:8]}"] = child
    return out


def _metric_rows(a: dict[str, float], b: dict[str, float], prefix: str = ""
                 ) -> list[tuple[str, float | None, float | None, float | None]]:
    rows = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        delta = vb - va if va is not None and vb is not None else None
        if va != vb:
            rows.append((prefix + k, va, vb, delta))
    return rows


def compare_runs(client: MlflowClient, run_a: str, run_b: str) -> RunDiff:
    a, b = client.get_run(run_a), client.get_run(run_b)
    diff = RunDiff(run_a, run_b)
    pa, pb = a.data.params, b.data.params
    diff.params = [(k, pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
    diff.metrics = _metric_rows(a.data.metrics, b.data.metrics)
    ta, tb = a.data.tags, b.data.tags
    keys = [k for k in KEY_TAGS] + sorted(k for k in set(ta) | set(tb) if k.startswith("venus.lineage."))
    diff.tags = [(k, ta.get(k), tb.get(k)) for k in keys if ta.get(k) != tb.get(k)]
    sa, sb = _stages(client, a), _stages(client, b)
    diff.stages_only_a = sorted(set(sa) - set(sb))
    diff.stages_only_b = sorted(set(sb) - set(sa))
    for name in sorted(set(sa) & set(sb)):
        diff.metrics += _metric_rows(sa[name].data.metrics, sb[name].data.metrics, f"{name}/")
        pa, pb = sa[name].data.params, sb[name].data.params
        diff.params += [(f"{name}/{k}", pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb))
                        if pa.get(k) != pb.get(k)]
    return diff


def _short(v: object, width: int = 60) -> str:
    if v is None:
        return "—"
    text = f"{v:.6g}" if isinstance(v, float) else str(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_diff(diff: RunDiff) -> str:
    """Plain-text report (what `venus runs compare` prints)."""
    lines = [f"A = {diff.run_a}", f"B = {diff.run_b}"]
    if not (diff.params or diff.metrics or diff.tags or diff.stages_only_a or diff.stages_only_b):
        return "\n".join(lines + ["no differences"])
    if diff.tags:
        lines += ["", "tags that differ:"] + [f"  {k}: A={_short(x)}  B={_short(y)}" for k, x, y in diff.tags]
    if diff.params:
        lines += ["", "params that differ:"] + [f"  {k}: A={_short(x)}  B={_short(y)}" for k, x, y in diff.params]
    if diff.metrics:
        lines += ["", "final metrics (A, B, B-A):"]
        lines += [f"  {k}: {_short(x)}  {_short(y)}  {_short(d) if d is None else f'{d:+.6g}'}"
                  for k, x, y, d in diff.metrics]
    if diff.stages_only_a or diff.stages_only_b:
        lines += ["", "stage runs in one run only:"]
        lines += [f"  only in A: {s}" for s in diff.stages_only_a] + [f"  only in B: {s}" for s in diff.stages_only_b]
    return "\n".join(lines)
