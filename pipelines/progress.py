"""How far a local pipeline run is: one row per stage with its state, steps, timing and headline metric.

kfp.local only says when a task starts and ends. How far a running stage is comes from the stage
itself: every runtime job appends its tracker record to `OUT/metrics.jsonl` (one JSON object per
line, `venus_core.train.tracker.JsonlTracker`: a `params` record first, then `metrics` records
with a `step`). This module reads those files as they grow and turns them into progress:

    plans = plan_stages(pipeline.pipeline_spec, spec)   # the stages, in dependency order
    progress = RunProgress(plans, out / "logs", find_run_dir)
    progress.task_event("mid-train", "start")            # fed by pipelines.local.TaskLog
    progress.refresh()                                   # read what the running stage logged since
    rows = progress.rows()                               # one StageRow per stage, for a view

What one unit of progress is, per stage, is the `METERS` table (optimizer steps for the trainers,
model x suite evaluations for evaluate; score_data and merge report only when done). The planned
total comes from the stage's own `params` record once it is written (the values the job really
runs with), before that from the agent spec. Views (`venus_core.cli.live`) render `rows()`; this
module has no terminal code.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from venus_core.config import AgentSpec
from venus_core.config.stages import metric_number


class StageState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CACHED = "cached"
    STOPPED = "stopped"  # interrupted (Ctrl-C)


FINAL_STATES = frozenset({StageState.DONE, StageState.FAILED, StageState.CACHED, StageState.STOPPED})
# task_event names -> state; "success" / "failure" are kfp.local's task statuses, lower-cased.
EVENTS = {"start": StageState.RUNNING, "success": StageState.DONE, "failure": StageState.FAILED,
          "cached": StageState.CACHED, "stopped": StageState.STOPPED}


def stage_of(task: str) -> str:
    """kfp task name -> stage: 'offline-rl-2' -> 'offline_rl'."""
    return re.sub(r"-\d+$", "", task).replace("-", "_")


# ----------------------------------------------------------------------------- what a step is


def _param_total(key: str) -> Callable[[Mapping[str, Any], str | None], int | None]:
    def total(params: Mapping[str, Any], domain: str | None) -> int | None:
        value = params.get(key.format(domain=domain))
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return total


def _evaluate_total(params: Mapping[str, Any], domain: str | None) -> int | None:
    models, suites = params.get("models"), params.get("suites")
    if isinstance(models, dict) and isinstance(suites, list):
        return len(models) * len(suites)
    return None


@dataclass(frozen=True)
class Meter:
    """How one stage's metrics.jsonl measures its progress.

    unit: what one unit of progress is (None: the stage reports only at its end);
    marker: the metric present in exactly the records that each mark one unit done (None: every
    metrics record is one unit); one_based: such a record's `step` is the number of units done
    (else the 0-based index of the unit just done); params_total / spec_total: the planned number
    of units from the stage's params record / from the agent spec; headline: (metric, label)
    pairs shown, latest value first found (none: the latest record's first metric).
    """

    unit: str | None = None
    marker: str | None = None
    one_based: bool = False
    params_total: Callable[[Mapping[str, Any], str | None], int | None] | None = None
    spec_total: Callable[[AgentSpec, str | None], int | None] | None = None
    headline: tuple[tuple[str, str], ...] = ()


METERS: dict[str, Meter] = {
    # venus_core/runtime/generate_data.py logs one record per flywheel round, `step` = its 0-based index.
    "generate_data": Meter("rounds", "success_rate", params_total=_param_total("flywheel.rounds"),
                           spec_total=lambda s, d: s.flywheel.rounds, headline=(("success_rate", "success"),)),
    "score_data": Meter(headline=(("mixture_train_records", "train records"),)),
    # venus_core/train/sft.py logs train/loss every LOG_EVERY steps, `step` = steps done.
    "mid_train": Meter("steps", "train/loss", one_based=True, params_total=_param_total("mid_train.max_steps"),
                       spec_total=lambda s, d: s.mid_train.max_steps, headline=(("train/loss", "loss"),)),
    # venus_core/rl/grpo.py logs every GRPO step with its 0-based index.
    "offline_rl": Meter("steps", "time/step_s", params_total=_param_total("offline_rl.{domain}.max_steps"),
                        spec_total=lambda s, d: getattr(s.offline_rl, d).max_steps if d else None,
                        headline=(("reward/mean", "reward"),)),
    # venus_core/rl/online/loop.py: likewise, one record per trajectory-GRPO step.
    "online_rl": Meter("steps", "time/step_s", params_total=_param_total("online_rl.steps"),
                       spec_total=lambda s, d: s.online_rl.steps,
                       headline=(("success_rate", "success"), ("reward/mean", "reward"))),
    "merge": Meter(),
    # venus_core/runtime/evaluate.py logs one record per model on each suite.
    "evaluate": Meter("evals", params_total=_evaluate_total),
}


@dataclass(frozen=True)
class Progress:
    """What a stage's records say: units done of total, and when the first and latest unit were done."""

    done: int | None = None
    total: int | None = None
    unit: str | None = None
    headline: str | None = None
    first: tuple[float, int] | None = None  # (wall time, units done) of the first unit record
    last: tuple[float, int] | None = None


def _format_value(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) >= 1 else f"{value:.4g}"


def _headline(meter: Meter, metrics: Sequence[Mapping[str, Any]]) -> str | None:
    for key, label in meter.headline:
        for rec in reversed(metrics):
            value = metric_number(rec.get(key))
            if value is not None:
                return f"{label} {_format_value(value)}"
    if meter.headline or not metrics:
        return None
    for key, value in metrics[-1].items():  # no headline named: the latest record's first number
        number = metric_number(value)
        if number is not None and not key.endswith("_n"):
            return f"{key} {_format_value(number)}"
    return None


def measure(stage: str, domain: str | None, records: Iterable[Mapping[str, Any]],
            spec_total: int | None = None) -> Progress:
    """Progress of `stage` from its metrics.jsonl records (parsed JSON objects, in file order)."""
    meter = METERS.get(stage, Meter())
    params: dict[str, Any] = {}
    metrics: list[Mapping[str, Any]] = []
    marks: list[tuple[float, int]] = []
    for rec in records:
        if rec.get("kind") == "params" and isinstance(rec.get("params"), dict):
            params.update(rec["params"])
        elif rec.get("kind") == "metrics" and isinstance(rec.get("metrics"), dict):
            m = rec["metrics"]
            metrics.append(m)
            if meter.unit is None or (meter.marker is not None and meter.marker not in m):
                continue
            t = metric_number(rec.get("t")) or 0.0
            if meter.marker is None:
                marks.append((t, len(marks) + 1))
            else:
                step = int(metric_number(rec.get("step")) or 0)
                marks.append((t, step if meter.one_based else step + 1))
    total = meter.params_total(params, domain) if meter.params_total else None
    if total is None:
        total = spec_total
    done = max((d for _, d in marks), default=0) if meter.unit else None
    return Progress(done=done, total=total, unit=meter.unit, headline=_headline(meter, metrics),
                    first=marks[0] if marks else None, last=marks[-1] if marks else None)


def eta_seconds(progress: Progress, started: float, now: float) -> float | None:
    """Seconds until the last unit is done, at the rate between the first and the latest unit
    (so a stage's set-up before its first step does not count); None until there is a rate.

    With a single unit done the rate is taken from the stage's start, which includes its set-up
    (an overestimate). Covers the units only, not what a stage does after them (a final evaluation).
    """
    p = progress
    if p.done is None or p.total is None or p.last is None or p.first is None or p.done <= 0:
        return None
    if p.done >= p.total:
        return 0.0
    (t_first, d_first), (t_last, d_last) = p.first, p.last
    if d_last > d_first and t_last > t_first:
        rate = (d_last - d_first) / (t_last - t_first)
    else:
        rate = d_last / max(t_last - started, 1e-3)
    return max(0.0, (p.total - d_last) / rate - max(0.0, now - t_last))


# ----------------------------------------------------------------------------- the stages


@dataclass(frozen=True)
class StagePlan:
    """One pipeline task as `venus run` shows it."""

    task: str  # kfp task name: "offline-rl-2"
    stage: str  # "offline_rl"
    label: str  # display name: "offline_rl: mobile"
    domain: str | None = None
    total: int | None = None  # planned units from the spec (see METERS)
    log_name: str = ""  # file name of its log under the run's log directory


def _constant(task: Any, name: str) -> str | None:
    params = task.inputs.parameters
    if name not in params:  # (indexing a protobuf map would add the key)
        return None
    param = params[name]
    if param.WhichOneof("kind") != "runtime_value":
        return None
    value = param.runtime_value.constant
    return value.string_value if value.WhichOneof("kind") == "string_value" else None


def _task_order(tasks: Any) -> list[str]:
    """Task names in dependency order: by depth (longest path from a root task), then in the order
    the pipeline defined them (kfp numbers a component's later tasks '-2', '-3', ...).

    kfp.local runs the tasks one at a time in a topological order of its own, which among siblings
    (the offline_rl tasks, say) follows protobuf map iteration and changes from run to run; the
    view keeps this stable order and marks whichever stage runs.
    """
    depth: dict[str, int] = {}

    def depth_of(name: str) -> int:
        if name not in depth:
            deps = [d for d in tasks[name].dependent_tasks if d in tasks]
            depth[name] = 1 + max((depth_of(d) for d in deps), default=-1)
        return depth[name]

    def key(name: str) -> tuple[int, str, int]:
        m = re.fullmatch(r"(.*)-(\d+)", name)
        return (depth_of(name), m.group(1), int(m.group(2))) if m else (depth_of(name), name, 1)

    return sorted(tasks, key=key)


def plan_stages(pipeline_spec: Any, spec: AgentSpec) -> list[StagePlan]:
    """The pipeline's tasks (`_task_order`) with stage, display name, domain (the task's constant
    `domain` input), planned total and log file name."""
    tasks = pipeline_spec.root.dag.tasks
    order = _task_order(tasks)
    plans: list[StagePlan] = []
    used: set[str] = set()
    for name in order:
        task = tasks[name]
        stage = stage_of(name)
        domain = _constant(task, "domain")
        meter = METERS.get(stage, Meter())
        total = meter.spec_total(spec, domain) if meter.spec_total else None
        log_name = f"{stage}-{domain}.log" if domain else f"{stage}.log"
        if log_name in used:
            log_name = f"{name}.log"
        used.add(log_name)
        plans.append(StagePlan(task=name, stage=stage, label=task.task_info.name or stage, domain=domain,
                               total=total, log_name=log_name))
    return plans


class JsonlTail:
    """Reads a JSON-lines file as it grows: each `read()` returns the objects of the complete lines
    added since the previous one (a line still being written waits; a line that is not JSON is skipped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(0, 2)
                if f.tell() < self._offset:  # rewritten from the start
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        out = []
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out


@dataclass(frozen=True)
class StageRow:
    """A stage as a view shows it, at one moment."""

    plan: StagePlan
    state: StageState
    done: int | None
    total: int | None
    unit: str | None
    elapsed: float | None
    eta: float | None
    headline: str | None
    log: Path

    @property
    def label(self) -> str:
        return self.plan.label


@dataclass
class _Stage:
    plan: StagePlan
    state: StageState = StageState.PENDING
    started: float | None = None
    ended: float | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    tail: JsonlTail | None = None


class RunProgress:
    """Stage states (from kfp.local's task events) and progress (from each stage's metrics.jsonl).

    `find_run_dir()` returns kfp.local's directory of this run once it exists (`OUT/kfp/<run>`;
    task `t` writes its outputs under `<run>/t/<output>/`). Thread-safe: task events arrive on the
    thread running the pipeline, a live view reads from its refresh thread. `subscribe(fn)` calls
    `fn(row)` on every state change, after the stage's final metrics were read.
    """

    def __init__(self, plans: Sequence[StagePlan], log_dir: Path, find_run_dir: Callable[[], Path | None], *,
                 clock: Callable[[], float] = time.time, read_every_s: float = 1.0) -> None:
        self.log_dir = Path(log_dir)
        self._find_run_dir = find_run_dir
        self._run_dir: Path | None = None
        self._clock = clock
        self._read_every_s = read_every_s
        self._last_read = float("-inf")
        self._stages: dict[str, _Stage] = {p.task: _Stage(p) for p in plans}
        self._listeners: list[Callable[[StageRow], None]] = []
        self._lock = threading.RLock()
        self.started = clock()

    @property
    def plans(self) -> list[StagePlan]:
        with self._lock:
            return [s.plan for s in self._stages.values()]

    def log_path(self, task: str) -> Path:
        with self._lock:
            stage = self._stages.get(task)
        name = stage.plan.log_name if stage is not None and stage.plan.log_name else f"{task}.log"
        return self.log_dir / name

    def subscribe(self, listener: Callable[[StageRow], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[StageRow], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def current(self) -> str | None:
        """The running task, if any."""
        with self._lock:
            return next((t for t, s in self._stages.items() if s.state is StageState.RUNNING), None)

    def task_event(self, task: str, event: str) -> None:
        """`event` is one of EVENTS: start, success, failure, cached, stopped (case-insensitive)."""
        state = EVENTS.get(event.lower())
        if state is None:
            raise ValueError(f"unknown task event {event!r} (known: {', '.join(EVENTS)})")
        with self._lock:
            stage = self._stages.get(task)
            if stage is None:  # a task the plan did not list: show it all the same
                plan = StagePlan(task=task, stage=stage_of(task), label=stage_of(task), log_name=f"{task}.log")
                stage = self._stages[task] = _Stage(plan)
            if stage.state is state:
                return
            now = self._clock()
            if state is StageState.RUNNING:
                stage.started, stage.ended = now, None
            elif state is not StageState.CACHED:
                if stage.started is None:
                    stage.started = now
                self._read(stage)  # what it logged last
                stage.ended = now
            stage.state = state
            row = self._row(stage, now)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(row)

    def refresh(self, force: bool = False) -> None:
        """Read what the running stage appended to its metrics.jsonl (at most every `read_every_s`)."""
        with self._lock:
            now = self._clock()
            if not force and now - self._last_read < self._read_every_s:
                return
            self._last_read = now
            for stage in self._stages.values():
                if stage.state is StageState.RUNNING:
                    self._read(stage)

    def rows(self) -> list[StageRow]:
        with self._lock:
            now = self._clock()
            return [self._row(s, now) for s in self._stages.values()]

    def row(self, task: str) -> StageRow:
        with self._lock:
            return self._row(self._stages[task], self._clock())

    # -------------------------------------------------------------------- internals

    def _metrics_file(self, task: str) -> Path | None:
        if self._run_dir is None:
            self._run_dir = self._find_run_dir()
        if self._run_dir is None:
            return None
        found = sorted((self._run_dir / task).glob("*/metrics.jsonl"))
        return found[0] if found else None

    def _read(self, stage: _Stage) -> None:
        if stage.tail is None:
            path = self._metrics_file(stage.plan.task)
            if path is None:
                return
            stage.tail = JsonlTail(path)
        stage.records.extend(stage.tail.read())

    def _row(self, stage: _Stage, now: float) -> StageRow:
        plan = stage.plan
        p = measure(plan.stage, plan.domain, stage.records, plan.total)
        elapsed = eta = None
        if stage.started is not None:
            elapsed = (stage.ended if stage.ended is not None else now) - stage.started
            if stage.state is StageState.RUNNING:
                eta = eta_seconds(p, stage.started, now)
        done = p.done
        if stage.state in (StageState.DONE, StageState.CACHED) and p.total is not None and not stage.records:
            done = p.total  # finished (or cached) without a record to read: it did them all
        return StageRow(plan=plan, state=stage.state, done=done, total=p.total, unit=p.unit, elapsed=elapsed,
                        eta=eta, headline=p.headline, log=self.log_path(plan.task))


def tail_lines(lines: Sequence[str], n: int) -> list[str]:
    """The last `n` lines that matter: trailing blank lines (kfp.local pads a task's output) dropped,
    and when a Python traceback starts within them, from its first line on (what is above it is
    kfp.local's executor input, already in the log file)."""
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    window = list(lines[max(0, end - n):end])
    starts = [i for i, line in enumerate(window) if line.strip() == "Traceback (most recent call last):"]
    return window[starts[-1]:] if starts else window
