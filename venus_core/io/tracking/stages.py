"""The stage-by-stage table of a pipeline run, kept on its MLflow parent run.

    rows = rows_from_summary(summary["stages"])        # a local run (`venus run`): kfp's metrics
    rows = rows_from_runs(client, parent_run_id)       # a cluster run: the stage runs under the parent
    log_stage_table(client, parent_run_id, rows)

What lands on the parent: each row's headline metrics as `<stage key>/<metric>`
(`offline_rl.grounding/held_out_accuracy`, `evaluate/merged/validation-grounding/accuracy`), each
stage's seconds as `<stage key>/seconds`, and the whole table as `stages.json` and `stages.html`
(the MLflow UI renders the HTML in the artifact view). So the parent's page answers "how did each
stage do" without opening six runs, and `venus runs compare` diffs two parents stage by stage.

Which metrics are a stage's headline: in a local run, the values its component wrote to its KFP
`Metrics` output (the run's summary.json; cached stages included). On a cluster the last stage
closes the parent before its own component has written that output, so the rows come from the
stage runs' final metrics, filtered by `HEADLINE` (per stage, fnmatch patterns of the jobs' metric
names) minus `EXCLUDE` (sample counts, interval bounds, tracking bookkeeping).
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Run

from venus_core.config.stages import metric_number, parse_display_name, stage_display_name, stage_key

STAGES_JSON = "stages.json"
STAGES_HTML = "stages.html"
HEADLINE: dict[str, tuple[str, ...]] = {
    "generate_data": ("success_rate", "verified"),
    "score_data": ("mixture_*_records", "selected_*"),
    "mid_train": ("eval/*", "train/loss"),
    "offline_rl": ("eval/*", "reward/mean"),
    "online_rl": ("held_out/*", "success_rate", "reward/mean"),
    "merge": ("*/seconds",),
    "evaluate": ("*/*/*",),
}
EXCLUDE = ("*_n", "*_ci_low", "*_ci_high", "venus.tracking.*", "time/*")
MAX_METRICS_PER_BATCH = 1000


@dataclass
class StageRow:
    """One stage of a pipeline run: display name, status, seconds, headline metrics, its MLflow run."""

    name: str  # "offline_rl: grounding"
    status: str
    seconds: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    cached: bool = False
    run_id: str | None = None

    @property
    def key(self) -> str:
        return stage_key(*parse_display_name(self.name))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "key": self.key}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StageRow:
        return cls(name=str(d["name"]), status=str(d.get("status", "")), seconds=d.get("seconds"),
                   metrics={str(k): float(v) for k, v in (d.get("metrics") or {}).items()},
                   cached=bool(d.get("cached")), run_id=d.get("run_id"))


def run_stage_name(run: Run) -> str:
    """The stage display name of a stage run: its `venus.job` and `venus.domain` tags (so runs
    made before stage runs carried the display name read the same), else its run name."""
    tags = run.data.tags
    job = tags.get("venus.job")
    if job:
        return stage_display_name(job, tags.get("venus.domain"))
    return run.info.run_name or run.info.run_id


def rows_from_summary(stages: Iterable[Mapping[str, Any]], run_ids: Mapping[str, str] | None = None
                      ) -> list[StageRow]:
    """Rows of a local run's summary (`pipelines.local.summarize`); `run_ids`: name -> stage run id."""
    rows = []
    for st in stages:
        name = stage_display_name(str(st["stage"]), st.get("domain"))
        metrics = {str(k): v for k, v in (st.get("metrics") or {}).items() if metric_number(v) is not None}
        seconds = metric_number(st.get("seconds"))
        rows.append(StageRow(name=name, status=str(st.get("status", "")), cached=bool(st.get("cached")),
                             seconds=None if st.get("cached") else seconds,
                             metrics={k: float(v) for k, v in metrics.items()},
                             run_id=(run_ids or {}).get(name)))
    return rows


def headline_metrics(stage: str, metrics: Mapping[str, float]) -> dict[str, float]:
    """The final metrics of a `stage` run that make its headline (HEADLINE minus EXCLUDE), in key order."""
    patterns = HEADLINE.get(stage, ("*",))
    return {k: float(v) for k, v in sorted(metrics.items())
            if any(fnmatchcase(k, p) for p in patterns) and not any(fnmatchcase(k, p) for p in EXCLUDE)}


def child_runs(client: MlflowClient, parent_run_id: str) -> list[Run]:
    """The stage runs under `parent_run_id`, oldest first."""
    parent = client.get_run(parent_run_id)
    runs = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'", max_results=1000)
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def rows_from_runs(client: MlflowClient, parent_run_id: str, *, running_as: str | None = None,
                   runs: Sequence[Run] | None = None, headline: bool = True) -> list[StageRow]:
    """Rows of the stage runs under the parent (a cluster run). `running_as` is the status shown
    for runs still RUNNING (the stage that closes the parent is one); `headline=False` keeps every
    final metric but the EXCLUDE ones."""
    rows = []
    for run in child_runs(client, parent_run_id) if runs is None else runs:
        name = run_stage_name(run)
        stage, _ = parse_display_name(name)
        end = run.info.end_time or (int(time.time() * 1000) if run.info.status == "RUNNING" else None)
        seconds = round((end - run.info.start_time) / 1000, 1) if end and run.info.start_time else None
        status = running_as if running_as and run.info.status == "RUNNING" else run.info.status
        rows.append(StageRow(name=name, status=status, seconds=seconds, run_id=run.info.run_id,
                             metrics=headline_metrics(stage if headline else "", run.data.metrics)))
    return rows


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def stages_html(rows: Sequence[StageRow], title: str) -> str:
    """A self-contained HTML page of the table (no scripts: MLflow's artifact view sandboxes it)."""
    body = []
    for r in rows:
        metrics = "".join(f"<tr><td>{html.escape(k)}</td><td class=n>{_fmt(v)}</td></tr>" for k, v in r.metrics.items())
        seconds = "cached" if r.cached else _fmt(r.seconds)
        body.append(
            f"<tr><td><b>{html.escape(r.name)}</b></td><td class='s {html.escape(r.status.lower())}'>"
            f"{html.escape(r.status)}</td><td class=n>{seconds}</td>"
            f"<td>{'<table class=m>' + metrics + '</table>' if metrics else '-'}</td>"
            f"<td><code>{html.escape(r.run_id or '-')}</code></td></tr>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }}
table {{ border-collapse: collapse }} td, th {{ padding: .3em .7em; vertical-align: top; text-align: left }}
table.t > tbody > tr {{ border-top: 1px solid #ddd }} .n {{ text-align: right; font-variant-numeric: tabular-nums }}
table.m td {{ padding: 0 .6em 0 0 }} .success, .finished {{ color: #17803d }} .failure, .failed {{ color: #b42318 }}
.killed, .interrupted {{ color: #8a4baf }}
</style></head><body>
<h2>{html.escape(title)}</h2>
<table class=t><thead><tr><th>stage</th><th>status</th><th>seconds</th><th>headline metrics</th><th>MLflow run</th>
</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table></body></html>
"""


def table_metrics(rows: Sequence[StageRow]) -> dict[str, float]:
    """The metrics the parent run gets: `<stage key>/<metric>` and `<stage key>/seconds`."""
    out: dict[str, float] = {}
    for r in rows:
        for k, v in r.metrics.items():
            out[f"{r.key}/{k}"] = v
        if r.seconds is not None and "seconds" not in r.metrics:
            out[f"{r.key}/seconds"] = float(r.seconds)
    return out


def log_stage_table(client: MlflowClient, run_id: str, rows: Sequence[StageRow], *, title: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Log the table on run `run_id` (metrics, stages.json, stages.html); returns the metrics logged.

    `extra` is merged into stages.json at top level (the pipeline's status, seconds).
    """
    from venus_core.io.tracking.runs import _key

    now = int(time.time() * 1000)
    metrics = [Metric(_key(k), v, now, 0) for k, v in table_metrics(rows).items()]
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[i:i + MAX_METRICS_PER_BATCH])
    payload = {**(extra or {}), "stages": [r.to_dict() for r in rows]}
    client.log_dict(run_id, payload, STAGES_JSON)
    client.log_text(run_id, stages_html(rows, title or f"stages of run {run_id}"), STAGES_HTML)
    return {m.key: m.value for m in metrics}


def load_stage_table(client: MlflowClient, run_id: str) -> list[StageRow] | None:
    """The rows of `stages.json` on run `run_id`, None when the run has none (yet)."""
    import tempfile

    names = {f.path for f in client.list_artifacts(run_id)}
    if STAGES_JSON not in names:
        return None
    with tempfile.TemporaryDirectory(prefix="venus-stages-") as tmp:
        path = client.download_artifacts(run_id, STAGES_JSON, tmp)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    return [StageRow.from_dict(d) for d in data.get("stages", [])]
