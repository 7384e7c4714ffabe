"""`venus runs compare A B`: what changed between two pipeline runs.

Why not the MLflow UI's compare view: it shows every param, the equal ones included, and does not
look into the stages of a pipeline. Here each side is a `RunSide`, read from an MLflow parent run
(`side_from_run`) or from a local run's directory (`side_from_dir`: `venus run --out DIR` writes
summary.json and spec.json there), and the diff (`compare_sides`) holds:

- the spec: the resolved specs flattened to dotted keys (the parent's `spec.json` artifact, a local
  run's spec.json; a run without one: its params), keys whose values differ;
- the tags that identify code and config (git revision, spec hash, image, inputs, lineage);
- per stage (matched by display name, `offline_rl: grounding`): status when it differs, and the
  stage's metrics side by side with B - A, from the parent's stage table (`stages.json`, the
  headline metrics each stage reported) or, for a run without one, the stage runs' final metrics;
  stages present in one run only are listed as such;
- the runs' own metrics (pipeline_seconds, ...), the stage table's `<stage>/<metric>` copies left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from venus_core.io.tracking.runs import flatten
from venus_core.io.tracking.stages import StageRow, child_runs, load_stage_table, rows_from_runs, rows_from_summary

KEY_TAGS = ("venus.git_revision", "venus.spec_sha256", "venus.image", "venus.inputs", "venus.agent",
            "venus.job", "mlflow.source.git.commit")
SUMMARY = "summary.json"
SPEC = "spec.json"
Row3 = tuple[str, Any, Any]


@dataclass
class RunSide:
    """One run as the comparison sees it."""

    ref: str  # run id or directory
    kind: str  # "mlflow" | "local"
    title: str = ""  # the run's name (MLflow) / "agent: STATUS" (local)
    spec: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    stages: dict[str, StageRow] = field(default_factory=dict)


@dataclass
class RunDiff:
    run_a: str
    run_b: str
    spec: list[Row3] = field(default_factory=list)
    tags: list[Row3] = field(default_factory=list)
    metrics: list[tuple[str, float | None, float | None, float | None]] = field(default_factory=list)
    stage_metrics: list[tuple[str, str, float | None, float | None, float | None]] = field(default_factory=list)
    stage_status: list[Row3] = field(default_factory=list)
    stages_only_a: list[str] = field(default_factory=list)
    stages_only_b: list[str] = field(default_factory=list)
    stages_same: int = 0  # stages in both whose status and metrics are all equal

    @property
    def empty(self) -> bool:
        return not (self.spec or self.tags or self.metrics or self.stage_metrics or self.stage_status
                    or self.stages_only_a or self.stages_only_b)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _by_name(rows: list[StageRow]) -> dict[str, StageRow]:
    out: dict[str, StageRow] = {}
    for r in rows:
        out[r.name if r.name not in out else f"{r.name}#{(r.run_id or str(len(out)))[:8]}"] = r
    return out


def _download_json(client: MlflowClient, run_id: str, name: str) -> Any | None:
    import tempfile

    if name not in {f.path for f in client.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory(prefix="venus-compare-") as tmp:
        return json.loads(Path(client.download_artifacts(run_id, name, tmp)).read_text(encoding="utf-8"))


def side_from_run(client: MlflowClient, run_id: str) -> RunSide:
    """An MLflow run (a pipeline's parent, usually): spec.json, key tags, its stage table."""
    run = client.get_run(run_id)
    spec = _download_json(client, run_id, SPEC)
    rows = load_stage_table(client, run_id)
    if rows is None:
        rows = rows_from_runs(client, run_id, runs=child_runs(client, run_id), headline=False)
    tags = run.data.tags
    keys = [*KEY_TAGS, *sorted(k for k in tags if k.startswith("venus.lineage."))]
    prefixes = tuple(f"{r.key}/" for r in rows)
    return RunSide(ref=run_id, kind="mlflow", title=f"{run.info.run_name or ''} ({run.info.status})",
                   spec=flatten(spec) if isinstance(spec, Mapping) else dict(run.data.params),
                   tags={k: tags[k] for k in keys if k in tags},
                   metrics={k: v for k, v in run.data.metrics.items() if not k.startswith(prefixes)},
                   stages=_by_name(rows))


def is_local_run(ref: str | Path) -> bool:
    p = Path(ref)
    return (p.is_dir() and (p / SUMMARY).is_file()) or (p.is_file() and p.name == SUMMARY)


def side_from_dir(ref: str | Path) -> RunSide:
    """A local run's directory (`venus run --out DIR`): summary.json, and spec.json when written."""
    path = Path(ref)
    root = path.parent if path.is_file() else path
    summary = json.loads((root / SUMMARY).read_text(encoding="utf-8"))
    spec_file = root / SPEC
    if spec_file.is_file():
        spec = flatten(json.loads(spec_file.read_text(encoding="utf-8")))
    else:  # a run made before spec.json was written: what the summary knows
        spec = flatten({"overrides": summary.get("overrides", [])})
    tags = {"venus.agent": summary.get("agent"), "venus.spec_sha256": summary.get("spec_sha256"),
            "venus.git_revision": summary.get("git_revision")}
    return RunSide(ref=str(root), kind="local", spec=spec,
                   title=f"{summary.get('agent', '')} ({summary.get('status', '')})",
                   tags={k: str(v) for k, v in tags.items() if v},
                   metrics={"pipeline_seconds": float(summary["seconds"])} if "seconds" in summary else {},
                   stages=_by_name(rows_from_summary(summary.get("stages", []))))


def _metric_rows(a: Mapping[str, float], b: Mapping[str, float]
                 ) -> list[tuple[str, float | None, float | None, float | None]]:
    rows = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if va != vb:
            rows.append((k, va, vb, vb - va if va is not None and vb is not None else None))
    return rows


def compare_sides(a: RunSide, b: RunSide) -> RunDiff:
    diff = RunDiff(a.ref, b.ref)
    diff.spec = [(k, a.spec.get(k), b.spec.get(k)) for k in sorted(set(a.spec) | set(b.spec))
                 if a.spec.get(k) != b.spec.get(k)]
    diff.tags = [(k, a.tags.get(k), b.tags.get(k)) for k in dict.fromkeys([*a.tags, *b.tags])
                 if a.tags.get(k) != b.tags.get(k)]
    diff.metrics = _metric_rows(a.metrics, b.metrics)
    diff.stages_only_a = [s for s in a.stages if s not in b.stages]
    diff.stages_only_b = [s for s in b.stages if s not in a.stages]
    for name in [s for s in a.stages if s in b.stages]:  # A's (pipeline) order
        ra, rb = a.stages[name], b.stages[name]
        rows = _metric_rows({**ra.metrics, **_seconds(ra)}, {**rb.metrics, **_seconds(rb)})
        changed = [r for r in rows if r[0] != "seconds"]
        diff.stage_metrics += [(name, *r) for r in rows]
        status_a, status_b = _status(ra), _status(rb)
        if status_a != status_b:
            diff.stage_status.append((name, status_a, status_b))
        if not changed and status_a == status_b:
            diff.stages_same += 1
    return diff


def _seconds(row: StageRow) -> dict[str, float]:
    return {"seconds": float(row.seconds)} if row.seconds is not None and "seconds" not in row.metrics else {}


def _status(row: StageRow) -> str:
    """FINISHED (an MLflow run) and SUCCESS (kfp) are the same outcome; a cached stage says so."""
    s = {"SUCCESS": "FINISHED", "FAILURE": "FAILED"}.get(row.status, row.status)
    return f"{s} (cached)" if row.cached else s


def compare_runs(client: MlflowClient, run_a: str, run_b: str) -> RunDiff:
    """The diff of two MLflow runs (pipeline parents, usually)."""
    return compare_sides(side_from_run(client, run_a), side_from_run(client, run_b))


def short(v: object, width: int = 60) -> str:
    if v is None:
        return "—"
    text = f"{v:.6g}" if isinstance(v, float) else str(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def signed(d: float | None) -> str:
    return "—" if d is None else f"{d:+.6g}"


def format_diff(diff: RunDiff) -> str:
    """Plain-text report (`venus runs compare --plain`; the default is rich tables of the same rows)."""
    lines = [f"A = {diff.run_a}", f"B = {diff.run_b}"]
    if diff.empty:
        return "\n".join(lines + ["no differences"])
    if diff.tags:
        lines += ["", "tags that differ:"] + [f"  {k}: A={short(x)}  B={short(y)}" for k, x, y in diff.tags]
    if diff.spec:
        lines += ["", "spec values that differ:"] + [f"  {k}: A={short(x)}  B={short(y)}" for k, x, y in diff.spec]
    if diff.stage_status:
        lines += ["", "stage status:"] + [f"  {s}: A={x}  B={y}" for s, x, y in diff.stage_status]
    if diff.stage_metrics:
        lines += ["", "stage metrics (A, B, B-A):"]
        lines += [f"  {s} / {k}: {short(x)}  {short(y)}  {signed(d)}" for s, k, x, y, d in diff.stage_metrics]
    if diff.metrics:
        lines += ["", "run metrics (A, B, B-A):"]
        lines += [f"  {k}: {short(x)}  {short(y)}  {signed(d)}" for k, x, y, d in diff.metrics]
    if diff.stages_only_a or diff.stages_only_b:
        lines += ["", "stages in one run only:"]
        lines += [f"  only in A: {s}" for s in diff.stages_only_a] + [f"  only in B: {s}" for s in diff.stages_only_b]
    return "\n".join(lines)
