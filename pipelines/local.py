"""Run an agent's pipeline on this machine with `kfp.local` (`venus run`).

Why kfp.local rather than calling the jobs in a loop: the laptop then runs *the same* pipeline
definition, components and artifact passing as the cluster, so a wiring mistake shows up here
first. `SubprocessRunner(use_venv=False)` runs each lightweight component in a subprocess of this
Python environment (the project must be installed in it); kfp-kubernetes settings are ignored.

What kfp.local does not give, this module adds: a per-stage summary (status, seconds, output
paths, the metrics each component logged) read from the task log and the run directory under
`OUT/kfp`, and a fail-fast error that names the failing stage and quotes the end of its log
(kfp.local itself only says which task failed). With an MLflow store configured (the spec's
`platform.tracking_uri` or `$MLFLOW_TRACKING_URI`) it also opens the pipeline's parent run, which
every stage nests under, and closes it with the run's status. Caveats of kfp.local that shape the pipeline:
independent sibling tasks run one after another (the three offline_rl tasks run sequentially
here), and kfp-kubernetes settings have no effect.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pipelines.gui_agent import build_pipeline
from venus_core.config import load_spec, spec_hash

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START = re.compile(r"Executing task '([^']+)'")
_END = re.compile(r"Task '([^']+)' finished with status (\w+)")
TAIL_LINES = 40


class LocalRunError(RuntimeError):
    """A stage of a local pipeline run failed; `stage` names it and `log_tail` is the end of its log."""

    def __init__(self, stage: str, log_tail: str, summary: dict[str, Any]) -> None:
        super().__init__(f"stage {stage} failed; end of its log:\n{log_tail}")
        self.stage = stage
        self.log_tail = log_tail
        self.summary = summary


class TaskLog:
    """A stdout replacement that splits kfp.local's stream into per-task logs with timings.

    kfp.local prints its own log records and each task's subprocess output to sys.stdout, one task
    at a time (use_venv=False, no ParallelFor in this pipeline), so the lines between "Executing
    task 'x'" and "Task 'x' finished with status S" belong to task x.
    """

    def __init__(self, echo: TextIO | None) -> None:
        self.echo = echo
        self.tasks: dict[str, dict[str, Any]] = {}
        self.current: str | None = None
        self._partial = ""

    def write(self, text: str) -> int:
        if self.echo is not None:
            self.echo.write(text)
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._line(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        if self.echo is not None:
            self.echo.flush()

    def _line(self, line: str) -> None:
        if m := _START.search(line):
            self.current = m.group(1)
            self.tasks[self.current] = {"status": "RUNNING", "started": time.perf_counter(), "lines": []}
            return
        if (m := _END.search(line)) and m.group(1) in self.tasks:
            task = self.tasks[m.group(1)]
            task["status"] = m.group(2)
            task["seconds"] = round(time.perf_counter() - task["started"], 2)
            self.current = None
            return
        if self.current is not None:
            self.tasks[self.current]["lines"].append(line)

    def running(self) -> str | None:
        return next((name for name, t in self.tasks.items() if t["status"] in ("RUNNING", "FAILURE")), None)


def _stage_of(task: str) -> str:
    return re.sub(r"-\d+$", "", task).replace("-", "_")


def _outputs(task_dir: Path) -> dict[str, Any]:
    """Output artifact paths and the metrics the component logged, from executor_output.json."""
    path = task_dir / "executor_output.json"
    if not path.is_file():
        return {"outputs": {}, "metrics": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    outputs: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    for name, group in data.get("artifacts", {}).items():
        for art in group.get("artifacts", []):
            outputs[name] = art["uri"]
            if name == "metrics":
                metrics.update(art.get("metadata", {}))
    return {"outputs": outputs, "metrics": metrics}


def _domain(outputs: dict[str, str]) -> str | None:
    report = Path(outputs.get("model", "")) / "report.json"
    if report.is_file():
        return json.loads(report.read_text(encoding="utf-8")).get("domain")
    return None


def summarize(log: TaskLog, run_dir: Path | None) -> list[dict[str, Any]]:
    stages = []
    for task, info in log.tasks.items():
        entry: dict[str, Any] = {"task": task, "stage": _stage_of(task), "status": info["status"],
                                 "seconds": info.get("seconds")}
        if run_dir is not None:
            entry.update(_outputs(run_dir / task))
            if entry["stage"] in ("offline_rl", "online_rl"):
                entry["domain"] = _domain(entry["outputs"])
        stages.append(entry)
    return stages


def format_summary(summary: dict[str, Any], max_metrics: int = 4) -> str:
    """The summary as plain-text lines: one per stage with status, seconds and its first metrics."""
    lines = [f"{summary['agent']}: {summary['status']} in {summary['seconds']}s ({summary['out']})"]
    for st in summary["stages"]:
        name = st["stage"] + (f"[{st['domain']}]" if st.get("domain") else "")
        shown = list(st.get("metrics", {}).items())[:max_metrics]
        metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)
        seconds = "-" if st["seconds"] is None else f"{st['seconds']:.1f}s"
        lines.append(f"  {name:<22} {st['status']:<8} {seconds:>8}  {metrics}")
    return "\n".join(lines)


def _run_dir(root: Path, before: set[Path]) -> Path | None:
    new = [p for p in root.iterdir() if p.is_dir() and p not in before] if root.is_dir() else []
    return max(new, key=lambda p: p.stat().st_mtime) if new else None


class _ParentRun:
    """The MLflow parent run of a local pipeline run; its id and the store go to the stage
    subprocesses as `$VENUS_PARENT_RUN_ID` / `$MLFLOW_TRACKING_URI` (absolute, so every stage and
    `venus ui` from this directory open the same store). Inert when tracking is off."""

    def __init__(self, spec: Any) -> None:
        from venus_core.runtime.tracking import resolve_tracking_uri

        self.spec = spec
        self.uri = resolve_tracking_uri(spec)
        self.client: Any = None
        self.run_id: str | None = None
        if self.uri is None:
            return
        from venus_core.io.tracking import make_client, start_pipeline_run

        self.client = make_client(self.uri)
        self.run_id = start_pipeline_run(spec, client=self.client)

    @contextlib.contextmanager
    def exported(self) -> Any:
        from venus_core.runtime.tracking import PARENT_ENV, TRACKING_ENV

        if self.run_id is None:
            yield
            return
        with _env({PARENT_ENV: self.run_id, TRACKING_ENV: str(self.uri)}):
            yield

    def finish(self, summary: dict[str, Any], path: Path) -> dict[str, Any] | None:
        """Close the parent run with the pipeline's status; where it is, for the summary."""
        if self.run_id is None:
            return None
        ok = summary["status"] == "SUCCESS"
        self.client.log_metric(self.run_id, "pipeline_seconds", float(summary["seconds"]))
        self.client.log_dict(self.run_id, summary, path.name)
        self.client.set_terminated(self.run_id, status="FINISHED" if ok else "FAILED")
        exp = self.client.get_run(self.run_id).info.experiment_id
        return {"tracking_uri": self.uri, "experiment": self.spec.platform.experiment, "experiment_id": exp,
                "run_id": self.run_id, "ui": f"venus ui --tracking-uri {self.uri}",
                "run_page": f"#/experiments/{exp}/runs/{self.run_id}"}


def stage_threads() -> int:
    """CPU threads per stage: `$OMP_NUM_THREADS` when set, else every CPU this process may use.

    kfp.local runs one stage at a time, so one stage may use all cores (on 2 cores a mid-training
    step is ~1.5x faster with 2 threads than with 1).
    """
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"OMP_NUM_THREADS must be a positive integer, got {env!r}")
        return int(env)
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Any:
    """Set environment variables for the block; restore (or remove) them afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_local(spec_path: str | Path, overrides: Sequence[str], out: str | Path, *,
              echo: TextIO | None = sys.stdout) -> dict[str, Any]:
    """Run the agent's pipeline locally into `out`; return (and write `out/summary.json`) the summary.

    Raises LocalRunError at the first failing stage (later stages do not run).
    """
    from kfp import local

    spec = load_spec(spec_path, overrides)
    pipeline = build_pipeline(spec)
    out = Path(out).resolve()
    tracking = _ParentRun(spec)
    root = out / "kfp"
    root.mkdir(parents=True, exist_ok=True)
    before = {p for p in root.iterdir()}
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    threads = stage_threads()
    log = TaskLog(echo)
    t0 = time.perf_counter()
    error: str | None = None
    with warnings.catch_warnings():
        # kfp.local warns that display names and the base image have no effect in a subprocess.
        warnings.filterwarnings("ignore", module=r"kfp\.local\..*")
        try:
            with contextlib.redirect_stdout(log), tracking.exported(), _env({"OMP_NUM_THREADS": str(threads)}):
                pipeline()
        except RuntimeError as exc:
            error = _ANSI.sub("", str(exc))
    run_dir = _run_dir(root, before)
    summary: dict[str, Any] = {
        "agent": spec.name,
        "spec_sha256": spec_hash(spec),
        "overrides": list(overrides),
        "out": str(out),
        "run_dir": str(run_dir) if run_dir else None,
        "status": "FAILURE" if error else "SUCCESS",
        "torch_threads": threads,
        "seconds": round(time.perf_counter() - t0, 2),
        "stages": summarize(log, run_dir),
    }
    summary["mlflow"] = tracking.finish(summary, out / "summary.json")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if error is not None:
        failed = log.running()
        lines = log.tasks[failed]["lines"] if failed else []
        tail = "\n".join(line for line in lines[-TAIL_LINES:]) or error
        raise LocalRunError(_stage_of(failed) if failed else "pipeline", tail, summary)
    return summary
