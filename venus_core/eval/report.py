"""Self-contained HTML report over one or more evaluation results.

Why one file with everything inline (CSS, SVG charts, screenshots as data URLs, no JavaScript):
reports are MLflow artifacts and e-mail attachments, opened long after the run, often offline.

Sections (element ids, checked by the tests): `overview` (one row per result, real benchmarks and
synthetic / other datasets in separate tables), `published` (UI-Venus numbers from the reports,
only for results on ScreenSpot-Pro / ScreenSpot-v2 — never beside synthetic numbers),
`comparison` (stage by stage: results of the same evaluator and dataset side by side in the order
given, e.g. mid-training → offline RL → merge, or TIES vs linear, each cell k/n with the rate, its
interval and the change from the first; grounding by level, refusal accuracy and false refusals,
navigation step success overall, per platform and per reference action type, so Click steps
show apart from Finished steps; `comparison_rows` gives the same table as data),
then one `result-<i>` section per result with its breakdown tables, bar charts and sample viewer
(online results: task success by level and app, and the first episodes' screens step by step, one
step at a time with previous / next, each episode with why it succeeded or failed).
Every rate is shown with n and its 95 % Wilson interval.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from venus_core.eval.charts import bar_chart, grouped_bar_chart
from venus_core.eval.reference import SOURCES, published_for
from venus_core.eval.results import EvalResult
from venus_core.eval.viewer import viewer_html

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#111;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0 16px}
td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}th{background:#f3f4f6}
td.num{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#15803d;font-weight:600}
.bad{color:#b91c1c;font-weight:600}.note{color:#555;font-size:13px}.tag{background:#fef3c7;padding:1px 6px;border-radius:4px;font-size:12px}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{margin:0;width:300px;border:1px solid #ddd;padding:6px;font-size:12px}
.card img{width:100%;height:auto}.noimg{background:#eee;padding:20px;text-align:center}
.episode{border-left:3px solid #93c5fd;padding-left:8px;margin-bottom:16px}code{font-size:11px;word-break:break-all}
.why{font-size:13px;margin:4px 0}.stepbar{font-size:12px;margin:4px 0 8px}
.stepper label{color:#1d4ed8;cursor:pointer;text-decoration:underline}.stepper .off{color:#9ca3af}
.steps>input{position:absolute;opacity:0;width:1px;height:1px;margin:0}
.steps>.step{display:none}.steps>input:checked+.step,.steps>input.all:checked~.step{display:block}
.stepnav{font-size:12px;margin-bottom:4px;display:flex;justify-content:space-between;width:312px}
.steps>input:focus-visible+.step .pos{outline:2px solid #93c5fd}
"""

HEADLINE = {"grounding": ("overall", "accuracy"), "nav_offline": ("step_success", "step success rate"),
            "online": ("success", "task success rate")}
GROUNDING_BREAKDOWNS = (("by_level", "level"), ("by_ui_type", "text / icon"), ("by_platform", "platform"),
                        ("by_application", "application"), ("by_group", "group"), ("by_data_source", "data source"))


def pct(r: dict[str, Any]) -> str:
    if not r["n"]:
        return "n/a (n=0)"
    return f"{r['value']:.1%} [{r['ci95_low']:.1%}, {r['ci95_high']:.1%}]"


def pct_n(r: dict[str, Any]) -> str:
    """`k/n rate [95 % CI]`: a rate as the stage-by-stage table shows it."""
    return f"{r['k']}/{r['n']} {pct(r)}"


def _headline(res: EvalResult) -> tuple[str, dict[str, Any]]:
    key, name = HEADLINE.get(res.evaluator, (None, None))
    if key is None or key not in res.summary:
        raise ValueError(f"result {res.display}/{res.suite}: evaluator {res.evaluator!r} has no headline metric")
    return name, res.summary[key]


def _rate_table(rows: Sequence[tuple[str, dict[str, Any]]], first: str = "category") -> str:
    body = "".join(f'<tr><td>{escape(name)}</td><td class="num">{r["k"]}/{r["n"]}</td>'
                   f'<td class="num">{pct(r)}</td></tr>' for name, r in rows)
    return f"<table><tr><th>{escape(first)}</th><th>k/n</th><th>rate [95% CI]</th></tr>{body}</table>"


def _overview(results: Sequence[EvalResult]) -> str:
    def table(rows: list[tuple[int, EvalResult]]) -> str:
        body = []
        for i, res in rows:
            name, r = _headline(res)
            body.append(f'<tr><td><a href="#result-{i}">{escape(res.display)}</a></td><td>{escape(res.suite)}</td>'
                        f'<td>{escape(res.evaluator)}</td><td>{escape(res.benchmark or ", ".join(res.sources))}</td>'
                        f'<td>{escape(name)}</td><td class="num">{pct(r)}</td><td class="num">{r["n"]}</td></tr>')
        return ("<table><tr><th>model</th><th>suite</th><th>evaluator</th><th>dataset</th><th>metric</th>"
                "<th>value [95% CI]</th><th>n</th></tr>" + "".join(body) + "</table>")

    real = [(i, r) for i, r in enumerate(results) if r.benchmark]
    other = [(i, r) for i, r in enumerate(results) if not r.benchmark]
    out = ['<section id="overview"><h2>Overview</h2>']
    if real:
        out.append("<h3>Public benchmarks</h3>" + table(real))
    if other:
        out.append('<h3>Synthetic and other datasets <span class="tag">not comparable to published numbers</span></h3>'
                   + table(other))
    return "\n".join(out) + "</section>"


def _published(results: Sequence[EvalResult]) -> str:
    rows = []
    for res in results:
        pub = published_for(res.benchmark)
        if not pub:
            continue
        _, r = _headline(res)
        cells = "".join(f'<tr><td>{escape(m)} (published)</td><td class="num">{v:.1f}</td></tr>' for m, v in pub.items())
        rows.append(f"<h3>{escape(res.benchmark or '')}</h3><table><tr><th>model</th><th>accuracy %</th></tr>"
                    f'<tr><td><b>{escape(res.display)} (this run)</b></td><td class="num">{100 * r["value"]:.1f} '
                    f'[{100 * r["ci95_low"]:.1f}, {100 * r["ci95_high"]:.1f}], n={r["n"]}</td></tr>{cells}</table>')
    if not rows:
        return ""
    return ('<section id="published"><h2>Published UI-Venus numbers (same benchmark)</h2>'
            f'<p class="note">Source: {escape(SOURCES)}. Shown only for results on the same public benchmark; '
            "a subset run (limit) is not the full benchmark.</p>" + "\n".join(rows) + "</section>")


def _comparable_groups(results: Sequence[EvalResult]) -> list[list[EvalResult]]:
    groups: dict[tuple[str, str], list[EvalResult]] = {}
    for res in results:
        groups.setdefault((res.evaluator, res.data), []).append(res)
    return [g for g in groups.values() if len(g) > 1]


def _metric_rows(res: EvalResult) -> dict[str, dict[str, Any]]:
    """Flat {metric label: rate dict} of a result, for the comparison table."""
    s = res.summary
    rows: dict[str, dict[str, Any]] = {}
    if res.evaluator == "grounding":
        rows["accuracy"] = s["overall"]
        rows["accuracy, answerable samples"] = s["answerable"]
        rows["refusal accuracy"] = s["refusal"]
        rows["false refusals (answerable)"] = s["false_refusal"]
        rows["wrong format"] = s["wrong_format"]
        for key, label in GROUNDING_BREAKDOWNS:
            for cat, r in s.get(key, {}).items():
                rows[f"{label}: {cat}"] = r
    elif res.evaluator == "nav_offline":
        rows["step success"] = s["step_success"]
        rows["type accuracy"] = s["type_accuracy"]
        if "episode_success" in s:
            rows["episode success"] = s["episode_success"]
        rows["wrong format"] = s["wrong_format"]
        for p, d in s.get("by_platform", {}).items():
            rows[f"step success: {p}"] = d["step_success"]
        for t, d in s.get("by_type", {}).items():
            rows[f"step success: {t} steps"] = d["step_success"]
        for t, d in s.get("by_type", {}).items():
            rows[f"type accuracy: {t} steps"] = d["type_accuracy"]
    elif res.evaluator == "online":
        rows["task success"] = s["success"]
        rows["invalid steps"] = s["invalid_steps"]
        for level, r in s.get("by_difficulty", {}).items():
            rows[f"success: level {level}"] = r
    return rows


def comparison_rows(results: Sequence[EvalResult]) -> list[dict[str, Any]]:
    """The stage-by-stage table as data: one row per (suite, metric, model) of every comparable group,
    with k, n, the rate, its 95 % interval and the change from the group's first model."""
    rows: list[dict[str, Any]] = []
    for group in _comparable_groups(results):
        metrics = [_metric_rows(r) for r in group]
        for label in dict.fromkeys(k for m in metrics for k in m):
            first = metrics[0].get(label)
            for res, m in zip(group, metrics, strict=True):
                r = m.get(label)
                if r is None:
                    continue
                rows.append({"suite": res.suite, "evaluator": res.evaluator, "data": res.data, "metric": label,
                             "model": res.display, "k": r["k"], "n": r["n"], "value": r["value"],
                             "ci95_low": r["ci95_low"], "ci95_high": r["ci95_high"],
                             "delta": None if first is None or res is group[0] else round(r["value"] - first["value"], 4)})
    return rows


def comparison_html(results: Sequence[EvalResult]) -> str:
    """Stage-by-stage section (empty string when no two results share evaluator and dataset)."""
    groups = _comparable_groups(results)
    if not groups:
        return ""
    out = ['<section id="comparison"><h2>Stage-by-stage comparison</h2>'
           '<p class="note">Results of the same evaluator on the same dataset, in the order given; '
           "each cell is k/n, the rate and its 95 % Wilson interval; "
           "Δ is the change from the first column in percentage points. Overlapping intervals mean "
           "the difference is not established at this n.</p>"]
    for group in groups:
        metrics = [_metric_rows(r) for r in group]
        labels = list(dict.fromkeys(k for m in metrics for k in m))
        head = "".join(f"<th>{escape(r.display)}</th>" for r in group)
        body = []
        for label in labels:
            first = metrics[0].get(label)
            cells = []
            for j, m in enumerate(metrics):
                r = m.get(label)
                if r is None:
                    cells.append("<td>—</td>")
                    continue
                delta = "" if j == 0 or first is None else f" (Δ {100 * (r['value'] - first['value']):+.1f})"
                cells.append(f'<td class="num">{pct_n(r)}{delta}</td>')
            body.append(f"<tr><td>{escape(label)}</td>{''.join(cells)}</tr>")
        out.append(f"<h3>{escape(group[0].suite)}: {escape(group[0].evaluator)} on {escape(group[0].data)}</h3>"
                   f"<table><tr><th>metric</th>{head}</tr>{''.join(body)}</table>")
        top = labels[: min(len(labels), 12)]
        out.append(grouped_bar_chart(f"{group[0].suite}: stage by stage", top,
                                     [(r.display, [m.get(k) for k in top]) for r, m in zip(group, metrics, strict=True)]))
    return "\n".join(out) + "</section>"


def _grounding_section(res: EvalResult) -> str:
    s = res.summary
    out = [_rate_table([("overall", s["overall"]), ("answerable samples", s["answerable"]),
                        ("refusal samples", s["refusal"]), ("false refusals (answerable)", s["false_refusal"]),
                        ("wrong format", s["wrong_format"])], "metric")]
    for key, label in GROUNDING_BREAKDOWNS:
        groups = s.get(key)
        if groups:
            out.append(f"<h3>By {escape(label)}</h3>" + _rate_table(list(groups.items()), label))
            out.append(bar_chart(f"accuracy by {label}", list(groups.items())))
    return "\n".join(out)


def _nav_section(res: EvalResult) -> str:
    s = res.summary
    rows = [("type accuracy", s["type_accuracy"]), ("step success", s["step_success"]),
            ("wrong format", s["wrong_format"])]
    if "episode_success" in s:
        rows.append(("episode success (all steps)", s["episode_success"]))
    out = [_rate_table(rows, "metric")]
    by_type = s["by_type"]
    body = "".join(f'<tr><td>{escape(t)}</td><td class="num">{pct(d["type_accuracy"])}</td>'
                   f'<td class="num">{pct(d["step_success"])}</td><td class="num">{d["step_success"]["n"]}</td></tr>'
                   for t, d in by_type.items())
    out.append("<h3>By reference action type</h3><table><tr><th>type</th><th>type accuracy</th>"
               f"<th>step success</th><th>n</th></tr>{body}</table>")
    out.append(bar_chart("step success by action type", [(t, d["step_success"]) for t, d in by_type.items()]))
    by_platform = s.get("by_platform", {})
    if by_platform:
        out.append("<h3>By platform</h3>" + _rate_table(
            [(f"{p}: {m.replace('_', ' ')}", d[m]) for p, d in by_platform.items()
             for m in ("type_accuracy", "step_success")], "platform"))
    conf = s["confusion"]
    cols = sorted({p for row in conf.values() for p in row})
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join(f"<tr><th>{escape(ref)}</th>" + "".join(
        f'<td class="num">{row.get(c, "")}</td>' for c in cols) + "</tr>" for ref, row in conf.items())
    out.append("<h3>Confusion: reference type (rows) vs predicted type (columns)</h3>"
               f"<table><tr><th></th>{head}</tr>{body}</table>")
    return "\n".join(out)


def _online_section(res: EvalResult) -> str:
    s = res.summary
    mean = s.get("mean_steps_success")
    out = [_rate_table([("task success", s["success"]), ("invalid steps (of all steps)", s["invalid_steps"]),
                        ("cut by the step limit", s["truncated"])], "metric"),
           f'<p class="note">mean steps of successful episodes: {"—" if mean is None else mean}; '
           f'simulated environment: {"yes" if res.settings.get("simulated") else "no"}</p>']
    for key, label in (("by_difficulty", "difficulty level"), ("by_app", "app")):
        groups = s.get(key)
        if groups:
            out.append(f"<h3>By {label}</h3>" + _rate_table(list(groups.items()), label))
            out.append(bar_chart(f"task success by {label}", list(groups.items())))
    return "\n".join(out)


SECTIONS = {"grounding": _grounding_section, "nav_offline": _nav_section, "online": _online_section}


def result_section(i: int, res: EvalResult, viewer_limit: int) -> str:
    kind = (f"benchmark {res.benchmark}" if res.benchmark else
            "simulated environment" if res.evaluator == "online" else "synthetic / other dataset")
    settings = ", ".join(f"{k}={v}" for k, v in res.settings.items() if k != "skipped_records")
    body = SECTIONS[res.evaluator](res)
    viewer = viewer_html(res, viewer_limit, key=f"r{i}") if viewer_limit > 0 else ""
    return (f'<section id="result-{i}"><h2>{escape(res.display)} — {escape(res.suite)} '
            f'<span class="tag">{escape(kind)}</span></h2>'
            f'<p class="note">data: {escape(res.data)}; sources: {escape(str(res.sources))}; {escape(settings)}</p>'
            f'{body}<h3>Samples</h3>{viewer}</section>')


def render_report(results: Sequence[EvalResult], *, title: str = "Venus evaluation", viewer_limit: int = 24) -> str:
    """The HTML page (a string) over `results` (see the module docstring)."""
    if not results:
        raise ValueError("render_report: no results to report")
    for res in results:
        if res.evaluator not in HEADLINE:
            raise ValueError(f"result {res.display}/{res.suite}: unknown evaluator {res.evaluator!r}")
    parts = [_overview(results), _published(results), comparison_html(results)]
    parts += [result_section(i, r, viewer_limit) for i, r in enumerate(results)]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/>'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1>" + "\n".join(p for p in parts if p) + "</body></html>")


def write_report(results: Sequence[EvalResult], path: str | Path, **kwargs: Any) -> Path:
    """Render and write the report; returns the path.

    Written to a temporary file in the same directory and renamed over `path`, so a reader (MLflow's
    artifact upload, a browser) or a kill mid-write sees the earlier report or the whole new one,
    never half a page. Inline rather than `runtime.common.write_json_atomic`: `eval` does not import
    `runtime` (docs/architecture.md, rule 1); opened with `open` so the file keeps the umask's mode.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    html = render_report(results, **kwargs)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(html)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
