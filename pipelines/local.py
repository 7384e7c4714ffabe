"""Run an agent's pipeline on this machine with `kfp.local` (`venus run`).

Why kfp.local rather than calling the jobs in a loop: the laptop then runs *the same* pipeline
definition, components and artifact passing as the cluster, so a wiring mistake shows up here
first. `SubprocessRunner(use_venv=False)` runs each lightweight component in a subprocess of this
Python environment (the project must be installed in it); kfp-kubernetes settings are ignored.

What kfp.local does not give, this module adds:
- its stream (own log records, each task's executor input and output, the job's output) split into
  `OUT/logs/<stage>.log` per stage and `OUT/logs/pipeline.log` (all of it), and, through
  `pipelines.progress.RunProgress`, live stage states and progress for a view (`venus run`);
- a per-stage summary (status, seconds, output paths, the metrics each component logged, log file)
  read from the task log and the run directory under `OUT/kfp`;
- a fail-fast error that names the failing stage and quotes the end of its log (kfp.local itself
  only says which task failed), and on Ctrl-C a clean stop: the stage's process is given a few
  seconds to exit (then SIGINT, then SIGKILL), the summary is written and `LocalRunInterrupted` raised;
- kfp.local's task cache under `OUT/kfp/.kfp_cache` (on unless `cache=False`): a second run into
  the same OUT with the same spec and overrides takes the stages that finished from the cache
  (status `cached`) and runs the rest from their start. The key is kfp's (component, command,
  arguments; the resolved spec is an argument), so any spec change re-runs everything, and a change
  to venus_core code alone does not invalidate an entry. An interrupted stage restarts from step 0:
  a local run keeps no checkpoint across runs.
With an MLflow store configured (the spec's `platform.tracking_uri` or `$MLFLOW_TRACKING_URI`) it
also opens the pipeline's parent run, which every stage nests under (tagged with the git revision
the stages report: it is exported to them as `$VENUS_GIT_REV`), and closes it with the run's status
and the stage-by-stage table (`<stage>/<metric>` metrics, `stages.json`, `stages.html`; a cached
stage is in the table, but keeps its run under the parent of the run that computed it). Caveats of
kfp.local that shape the pipeline: independent sibling tasks run one after another (the three
offline_rl tasks run sequentially here), and kfp-kubernetes settings have no effect.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ContextManager, TextIO

from pipelines.gui_agent import build_pipeline
from pipelines.progress import RunProgress, plan_stages, stage_of, tail_lines
from venus_core.config import load_spec, spec_hash, spec_to_dict
from venus_core.config.redact import redact
from venus_core.config.stages import stage_display_name

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START = re.compile(r"Executing task '([^']+)'")
_END = re.compile(r"Task '([^']+)' finished with status (\w+)")
_CACHED = re.compile(r"Task '?([\w.-]+?)'? cache hit \(key=([0-9a-f]+)\)")
TAIL_LINES = 40
CACHE_DIR = ".kfp_cache"
LOG_DIR = "logs"
PIPELINE_LOG = "pipeline.log"
SPEC_FILE = "spec.json"  # the resolved spec of the run, beside summary.json (`venus runs compare DIR_A DIR_B`)
View = Callable[[RunProgress], ContextManager[Any]]


class LocalRunError(RuntimeError):
    """A stage of a local pipeline run failed; `stage` names it, `log_tail` is the end of its log
    and `log_path` the whole of it."""

    def __init__(self, stage: str, log_tail: str, summary: dict[str, Any], log_path: Path | None = None) -> None:
        super().__init__(f"stage {stage} failed; end of its log:\n{log_tail}")
        self.stage = stage
        self.log_tail = log_tail
        self.summary = summary
        self.log_path = log_path


class LocalRunInterrupted(LocalRunError):
    """The run was stopped (Ctrl-C) during `stage` ("pipeline" between stages); the summary is written."""

    def __init__(self, stage: str, summary: dict[str, Any], log_path: Path | None = None) -> None:
        super().__init__(stage, "", summary, log_path)
        self.args = (f"interrupted during {stage}",)


class TaskLog:
    """A stdout replacement that splits kfp.local's stream into per-task logs with timings.

    kfp.local prints its own log records and each task's subprocess output to sys.stdout, one task
    at a time (use_venv=False, no ParallelFor in this pipeline), so the lines between "Executing
    task 'x'" and "Task 'x' finished with status S" belong to task x; a task taken from the cache
    has only the line "Task x cache hit (key=...)". With `log_dir`, every line (colours stripped)
    is appended to `log_dir/pipeline.log`, and a task's lines from its start to the next task's
    start (its outputs listing included) to `path_for(task)` (default `log_dir/<task>.log`).
    `on_event(task, event)` hears "start", "cached" and the final status lower-cased ("success",
    "failure"). `echo` gets the stream unchanged.
    """

    def __init__(self, echo: TextIO | None, *, log_dir: Path | None = None,
                 path_for: Callable[[str], Path] | None = None,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.echo = echo
        self.tasks: dict[str, dict[str, Any]] = {}
        self.current: str | None = None
        self._partial = ""
        self._log_dir = log_dir
        self._path_for = path_for or (lambda task: Path(log_dir or ".") / f"{task}.log")
        self._on_event = on_event
        self._files: dict[str, TextIO] = {}
        self._last: str | None = None  # the task whose lines these are between two tasks
        self._pipeline: TextIO | None = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._pipeline = (log_dir / PIPELINE_LOG).open("a", encoding="utf-8", buffering=1)

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

    def log_path(self, task: str) -> Path | None:
        return self._path_for(task) if self._log_dir is not None else None

    def close(self) -> None:
        if self._partial:
            self._line(_ANSI.sub("", self._partial))
            self._partial = ""
        for f in [*self._files.values(), *([self._pipeline] if self._pipeline else [])]:
            f.close()
        self._files.clear()
        self._pipeline = None

    def _event(self, task: str, event: str) -> None:
        if self._on_event is not None:
            self._on_event(task, event)

    def _to_file(self, task: str | None, line: str) -> None:
        if self._pipeline is not None:
            self._pipeline.write(line + "\n")
        if task is None or self._log_dir is None:
            return
        if task not in self._files:
            path = self._path_for(task)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._files[task] = path.open("a", encoding="utf-8", buffering=1)
        self._files[task].write(line + "\n")

    def _line(self, line: str) -> None:
        if m := _START.search(line):
            self.current = self._last = m.group(1)
            self.tasks[self.current] = {"status": "RUNNING", "started": time.perf_counter(), "lines": []}
            self._to_file(self.current, line)
            self._event(self.current, "start")
            return
        if (m := _CACHED.search(line)) and self.current is None:
            self.tasks[m.group(1)] = {"status": "SUCCESS", "cached": True, "cache_key": m.group(2),
                                      "seconds": 0.0, "lines": []}
            self._to_file(None, line)
            self._event(m.group(1), "cached")
            return
        if (m := _END.search(line)) and m.group(1) in self.tasks:
            task = self.tasks[m.group(1)]
            task["status"] = m.group(2)
            task["seconds"] = round(time.perf_counter() - task["started"], 2)
            self.current = None
            self._to_file(m.group(1), line)
            self._event(m.group(1), m.group(2).lower())
            return
        if self.current is not None:
            self.tasks[self.current]["lines"].append(line)
        self._to_file(self.current or self._last, line)

    def running(self) -> str | None:
        return next((name for name, t in self.tasks.items() if t["status"] in ("RUNNING", "FAILURE")), None)


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


def _cached_outputs(cache_root: Path, key_prefix: str) -> dict[str, Any]:
    """Output artifact paths and metrics of a task kfp.local took from its cache (the entry
    `cache_root/<key>.json`; kfp's log names the key's first 12 hex digits)."""
    found = sorted(cache_root.glob(f"{key_prefix}*.json")) if key_prefix else []
    if len(found) != 1:
        return {"outputs": {}, "metrics": {}}
    data = json.loads(found[0].read_text(encoding="utf-8"))
    outputs: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, dict) and value.get("__kfp_artifact__"):
            outputs[name] = value.get("uri", "")
            if name == "metrics":
                metrics.update(value.get("metadata") or {})
    return {"outputs": outputs, "metrics": metrics}


def write_metadata_outputs(task_dir: Path) -> list[Path]:
    """Give every output artifact of a finished task that has no file one: its metadata as JSON.

    A `Metrics` output is metadata only (kfp writes it into executor_output.json, never a file),
    and kfp.local's cache treats an entry whose artifact file is missing as a miss, so without this
    no stage of this pipeline (each has a metrics output) would ever come from the cache.
    Returns the files written.
    """
    path = task_dir / "executor_output.json"
    if not path.is_file():
        return []
    written = []
    for group in json.loads(path.read_text(encoding="utf-8")).get("artifacts", {}).values():
        for art in group.get("artifacts", []):
            uri = art.get("uri", "")
            if uri.startswith("/") and not os.path.exists(uri):
                Path(uri).parent.mkdir(parents=True, exist_ok=True)
                Path(uri).write_text(json.dumps(art.get("metadata") or {}, indent=2) + "\n", encoding="utf-8")
                written.append(Path(uri))
    return written


def _domain(outputs: dict[str, str]) -> str | None:
    report = Path(outputs.get("model", "")) / "report.json"
    if report.is_file():
        return json.loads(report.read_text(encoding="utf-8")).get("domain")
    return None


def summarize(log: TaskLog, run_dir: Path | None, cache_root: Path | None = None,
              domains: Mapping[str, str | None] | None = None) -> list[dict[str, Any]]:
    """One entry per task seen, in run order; `domains` (task -> domain, from the plan) names the
    domain of an RL stage whose report is missing (it failed or was interrupted)."""
    stages = []
    for task, info in log.tasks.items():
        entry: dict[str, Any] = {"task": task, "stage": stage_of(task), "status": info["status"],
                                 "seconds": info.get("seconds"), "cached": bool(info.get("cached"))}
        if info.get("cached") and cache_root is not None:
            entry.update(_cached_outputs(cache_root, info.get("cache_key", "")))
        elif run_dir is not None:
            entry.update(_outputs(run_dir / task))
        if entry["stage"] in ("offline_rl", "online_rl"):
            entry["domain"] = _domain(entry.get("outputs", {})) or (domains or {}).get(task)
        if (path := log.log_path(task)) is not None:
            entry["log"] = str(path)
        stages.append(entry)
    return stages


def format_summary(summary: dict[str, Any], max_metrics: int = 4) -> str:
    """The summary as plain-text lines: one per stage with status, seconds and its first metrics."""
    lines = [f"{summary['agent']}: {summary['status']} in {summary['seconds']}s ({summary['out']})"]
    for st in summary["stages"]:
        name = stage_display_name(st["stage"], st.get("domain"))
        shown = list(st.get("metrics", {}).items())[:max_metrics]
        metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)
        seconds = "-" if st["seconds"] is None else f"{st['seconds']:.1f}s"
        lines.append(f"  {name:<22} {st['status']:<8} {seconds:>8}  {metrics}")
    return "\n".join(lines)


def _run_dir(root: Path, before: set[Path]) -> Path | None:
    """kfp.local's directory of this run: the newest directory under `root` that was not there
    before (the cache directory excluded); None until its first task has started."""
    new = [p for p in root.iterdir() if p.is_dir() and p not in before and not p.name.startswith(".")] \
        if root.is_dir() else []
    return max(new, key=lambda p: p.stat().st_mtime) if new else None


class _ParentRun:
    """The MLflow parent run of a local pipeline run; its id and the store go to the stage
    subprocesses as `$VENUS_PARENT_RUN_ID` / `$MLFLOW_TRACKING_URI` (absolute, so every stage and
    `venus ui` from this directory open the same store), and the git revision, which the parent is
    tagged with, as `$VENUS_GIT_REV` (so parent and stages name the same commit). Inert when
    tracking is off."""

    def __init__(self, spec: Any) -> None:
        from venus_core.runtime.common import git_revision
        from venus_core.runtime.tracking import resolve_tracking_uri

        self.spec = spec
        self.uri = resolve_tracking_uri(spec)
        self.client: Any = None
        self.run_id: str | None = None
        self.git_revision = git_revision()
        if self.uri is None:
            return
        from venus_core.io.tracking import make_client, start_pipeline_run

        self.client = make_client(self.uri)
        self.run_id = start_pipeline_run(spec, client=self.client, provenance={
            "git_revision": self.git_revision, "spec_sha256": spec_hash(spec)})

    @contextlib.contextmanager
    def exported(self) -> Any:
        from venus_core.runtime.tracking import PARENT_ENV, TRACKING_ENV

        if self.run_id is None:
            yield
            return
        with _env({PARENT_ENV: self.run_id, TRACKING_ENV: str(self.uri), "VENUS_GIT_REV": self.git_revision}):
            yield

    def finish(self, summary: dict[str, Any], path: Path) -> dict[str, Any] | None:
        """Close the parent run with the pipeline's status and stage table; where it is, for the summary."""
        if self.run_id is None:
            return None
        from venus_core.io.tracking.stages import child_runs, log_stage_table, rows_from_summary, run_stage_name

        status = {"SUCCESS": "FINISHED", "INTERRUPTED": "KILLED"}.get(summary["status"], "FAILED")
        self.client.log_metric(self.run_id, "pipeline_seconds", float(summary["seconds"]))
        self.client.log_dict(self.run_id, summary, path.name)
        try:
            run_ids = {run_stage_name(r): r.info.run_id for r in child_runs(self.client, self.run_id)}
            log_stage_table(self.client, self.run_id, rows_from_summary(summary["stages"], run_ids),
                            title=f"{summary['agent']}: {summary['status']} in {summary['seconds']}s",
                            extra={"agent": summary["agent"], "status": summary["status"],
                                   "seconds": summary["seconds"], "spec_sha256": summary["spec_sha256"],
                                   "overrides": summary["overrides"]})
        except Exception as exc:  # noqa: BLE001 - the run's bookkeeping must not hide its result
            print(f"warning: MLflow stage table of run {self.run_id} not stored: {redact(str(exc))[:300]}",
                  file=sys.stderr)
        self.client.set_terminated(self.run_id, status=status)
        exp = self.client.get_run(self.run_id).info.experiment_id
        return {"tracking_uri": redact(self.uri), "experiment": self.spec.platform.experiment, "experiment_id": exp,
                "run_id": self.run_id, "ui": f"venus ui --tracking-uri {redact(self.uri)}",
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


@contextlib.contextmanager
def _root_log_to(stream: TextIO) -> Iterator[None]:
    """Root-logger INFO records to `stream` for the block, in kfp.local's format.

    kfp.local logs its task records under a handler of its own, but a few (a cache hit, a retry,
    the workspace clean-up) from outside it, where the root logger's default WARNING level drops
    them; this makes them reach the task log. Only kfp runs in this process during the block.
    """
    logger = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s", "%H:%M:%S"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process, from /proc (empty where there is none)."""
    table: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            table[int(name)] = (int(ppid), state)
        except (OSError, IndexError, ValueError):
            continue
    return table


def _descendants(*roots: int) -> list[int]:
    """Live processes below `roots` (default: this process), nearest first."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, state) in table.items():
        if state != "Z":
            children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    queue = list(roots or (os.getpid(),))
    while queue:
        for child in sorted(children.get(queue.pop(0), [])):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # a child of ours: reaped once it has exited
        return done == 0
    except ChildProcessError:  # not our child: look it up
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False


def stop_stage_processes(pids: Sequence[int] | None = None, grace_s: float = 5.0) -> list[int]:
    """Stop the running stage after Ctrl-C; return the pids that needed SIGKILL.

    The stage is kfp.local's subprocess (a shell running the component's Python) and whatever
    that started: every process below `pids` and the pids themselves, by default every process
    below this one (during a local run, that stage's only). In a terminal Ctrl-C reached them all
    already (same process group), so they are first given `grace_s` to unwind (a Python job runs
    its finally blocks and closes its environments); what is still alive then gets SIGINT, as a
    terminal would send it (a SIGINT sent to `venus run` alone reaches only it), and after
    another `grace_s` SIGKILL.
    """
    alive = list(dict.fromkeys([*(pids or []), *_descendants(*(pids or []))]))
    killed: list[int] = []
    for sig in (None, signal.SIGINT, signal.SIGKILL):
        if sig is signal.SIGKILL:
            killed = list(alive)
        for pid in alive if sig is not None else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while True:
            alive = [pid for pid in alive if _alive(pid)]
            if not alive or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not alive:
            break
    return killed


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore further Ctrl-C for the block (the clean-up after the first one), main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop_running(log: TaskLog, progress: RunProgress) -> str:
    """After Ctrl-C: stop the running stage's processes and mark it interrupted; return its task
    name ("pipeline" when none was running)."""
    task = log.current
    stop_stage_processes()
    if task is None:
        return "pipeline"
    info = log.tasks[task]
    info["status"] = "INTERRUPTED"
    info["seconds"] = round(time.perf_counter() - info["started"], 2)
    progress.task_event(task, "stopped")
    return task


def run_local(spec_path: str | Path, overrides: Sequence[str], out: str | Path, *,
              echo: TextIO | None = sys.stdout, view: View | None = None, cache: bool = True) -> dict[str, Any]:
    """Run the agent's pipeline locally into `out`; return (and write `out/summary.json`) the summary.

    `echo` gets kfp.local's raw stream (None: only the log files under `out/logs`); `view(progress)`
    is entered around the run with its `RunProgress` (a live table, plain lines). `cache` turns on
    kfp.local's task cache in `out/kfp/.kfp_cache` (see the module docstring). Raises LocalRunError
    at the first failing stage (later stages do not run), LocalRunInterrupted on Ctrl-C.
    """
    from kfp import local

    spec = load_spec(spec_path, overrides)
    pipeline = build_pipeline(spec)
    out = Path(out).resolve()
    tracking = _ParentRun(spec)
    root = out / "kfp"
    cache_root = root / CACHE_DIR
    root.mkdir(parents=True, exist_ok=True)
    before = {p for p in root.iterdir()}
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True,
               enable_caching=cache, cache_root=str(cache_root))
    threads = stage_threads()
    progress = RunProgress(plan_stages(pipeline.pipeline_spec, spec), out / LOG_DIR, lambda: _run_dir(root, before))

    def on_event(task: str, event: str) -> None:
        progress.task_event(task, event)
        if event == "success" and (run_dir := _run_dir(root, before)) is not None:
            write_metadata_outputs(run_dir / task)  # so that a later run can take it from the cache

    log = TaskLog(echo, log_dir=out / LOG_DIR, path_for=progress.log_path, on_event=on_event)
    t0 = time.perf_counter()
    error: str | None = None
    interrupted: str | None = None
    try:
        with view(progress) if view is not None else contextlib.nullcontext():
            try:
                with warnings.catch_warnings():
                    # kfp.local warns that display names and the base image have no effect in a subprocess.
                    warnings.filterwarnings("ignore", module=r"kfp\.local\..*")
                    with contextlib.redirect_stdout(log), _root_log_to(log), tracking.exported(), \
                            _env({"OMP_NUM_THREADS": str(threads)}):
                        pipeline()
            except RuntimeError as exc:
                error = _ANSI.sub("", str(exc))
            except KeyboardInterrupt:
                with _sigint_ignored():
                    interrupted = _stop_running(log, progress)
    finally:
        log.close()
    with _sigint_ignored() if interrupted else contextlib.nullcontext():
        run_dir = _run_dir(root, before)
        summary: dict[str, Any] = {
            "agent": spec.name,
            "spec_sha256": spec_hash(spec),
            "overrides": list(overrides),
            "out": str(out),
            "run_dir": str(run_dir) if run_dir else None,
            "logs": str(out / LOG_DIR),
            "cache": str(cache_root) if cache else None,
            "status": "INTERRUPTED" if interrupted else "FAILURE" if error else "SUCCESS",
            "git_revision": tracking.git_revision,
            "torch_threads": threads,
            # the malloc settings the stages ran with: what the caller's environment held (venus run leaves malloc as it is)
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "seconds": round(time.perf_counter() - t0, 2),
            "stages": summarize(log, run_dir, cache_root, {p.task: p.domain for p in progress.plans}),
        }
        summary["mlflow"] = tracking.finish(summary, out / "summary.json")
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (out / SPEC_FILE).write_text(json.dumps(spec_to_dict(spec), indent=2) + "\n", encoding="utf-8")
    if interrupted is not None:
        stage = stage_label(progress, interrupted)
        raise LocalRunInterrupted(stage, summary, log.log_path(interrupted) if interrupted != "pipeline" else None)
    if error is not None:
        failed = log.running()
        lines = log.tasks[failed]["lines"] if failed else []
        tail = "\n".join(tail_lines(lines, TAIL_LINES)) or error
        raise LocalRunError(stage_label(progress, failed) if failed else "pipeline", tail, summary,
                            log.log_path(failed) if failed else out / LOG_DIR / PIPELINE_LOG)
    return summary


def stage_label(progress: RunProgress, task: str) -> str:
    """The display name of `task` ("offline_rl: mobile"), the task name when the plan lacks it."""
    return next((p.label for p in progress.plans if p.task == task), task)
