"""Collect MiniWoB++ oracle trajectories: the web data for offline RL (`venus data collect`).

Why: the online agent needs web trajectories with real screenshots and exact actions. Each
episode runs an oracle solver (`miniwob_oracle`) in a live `MiniWobEnv`: the screenshot before
each action is the step's image, the oracle's action / target box / texts are the step, and the
page's own reward decides success. Only successful episodes are written (the data teaches what
works); failed ones (the oracle erred, or the page gave less than full reward) are counted per
task and reported, never hidden.

Output: a Venus dataset of `Trajectory` records (platform "web", provenance source "miniwob",
generator "miniwob-oracle", the seed), written with `DatasetWriter`; or with `raw=True` the
raw trace format of the `miniwob-traces` importer (traces.jsonl + screenshots/, every episode
including failures, so that the importer decides), which `venus data import --format
miniwob-traces` turns into the same records. `n` is the number of episodes *attempted* per task,
on seeds seed, seed+1, ... (deterministic), so success rates are per attempt.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import queue
import random
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from venus_core.actions import Click, render_action
from venus_core.data.importers.miniwob_traces import to_raw
from venus_core.data.schema import HISTORY_ONLY, Provenance, Trajectory, TrajectoryStep
from venus_core.data.store import DatasetWriter
from venus_core.envs.base import DEFAULT_MAX_STEPS, EnvError, Task
from venus_core.envs.miniwob import MiniWobEnv
from venus_core.envs.miniwob_oracle import OracleError, OracleStep, Page, frame_point, solver_for

GENERATOR = "miniwob-oracle"
SOURCE = "miniwob"


@dataclass
class RecordedStep:
    screenshot: Image.Image
    step: OracleStep
    raw_action: dict[str, Any]
    history_only: bool = False  # a deliberate miss: history for the later steps, never a target


@dataclass
class OracleEpisode:
    task: Task
    seed: int
    steps: list[RecordedStep]
    reward: float | None
    success: bool
    error: str | None = None
    viewport: tuple[int, int] = (0, 0)

    misses: int = 0  # deliberate misses before the oracle's first click (a recovery episode when > 0)

    @property
    def name(self) -> str:
        return self.task.app or "miniwob"

    @property
    def episode_id(self) -> str:
        return f"{self.name}:seed={self.seed}" + miss_suffix(self.misses, ":miss")


MAX_MISSES = 4
"""The most deliberate misses a recovery episode may start with (a live episode has 5 steps: four
misses, then the click)."""


def miss_suffix(misses: int, tag: str) -> str:
    """How a recovery episode's misses show in its names: "" for none, `tag` for one (the names the
    one-miss episodes have always had), `tag` + the count for more."""
    if not 0 <= misses <= MAX_MISSES:
        raise ValueError(f"misses must be in [0, {MAX_MISSES}], got {misses!r}")
    return "" if misses == 0 else tag if misses == 1 else f"{tag}{misses}"


MISS_MARGIN_PX = 6.0
"""A deliberate miss lands at least this far (CSS pixels) from every element of the task area."""


def blank_point(page: Page, seed: int) -> tuple[float, float] | None:
    """A point of the task's part of the page (#wrap below #query) at least MISS_MARGIN_PX from every
    visible element of the task area (#area may be only a few pixels tall, its elements placed
    absolutely), drawn by `seed` from a 4-pixel grid; None when there is no such point."""
    wrap, query = page.one("#wrap"), page.one("#query")
    inside = page.elements("#area *")
    m = MISS_MARGIN_PX
    top = max(wrap.y, query.y + query.h) + m
    points = [(float(x), float(y)) for y in range(int(top), int(wrap.y + wrap.h - m), 4)
              for x in range(int(wrap.x + m), int(wrap.x + wrap.w - m), 4)]
    free = [(x, y) for x, y in points
            if not any(e.x - m <= x <= e.x + e.w + m and e.y - m <= y <= e.y + e.h + m for e in inside)]
    return random.Random(seed).choice(free) if free else None


def _miss(env: MiniWobEnv, page: Page, step: OracleStep, seed: int, k: int = 0) -> OracleStep:
    """The oracle's first step aimed at a blank point of the task area instead of its target: the
    same words, a click that changes nothing (what a model's missed first click leaves behind).
    The `k`-th miss of an episode draws its point with its own seed (the first one `seed` itself)."""
    point = blank_point(page, seed + 7919 * k)
    if point is None:
        raise OracleError("no blank point in the task area for a deliberate miss")
    w, h = env.screen
    return OracleStep(Click(box=frame_point(point[0], point[1], w, h)), step.think, step.conclusion)


def run_oracle(env: MiniWobEnv, name: str, seed: int, *, max_steps: int = DEFAULT_MAX_STEPS,
               misses: int = 0) -> OracleEpisode:
    """Run the oracle of task `name` on `seed` to its end; never raises for a failed episode.

    `misses` > 0: a recovery episode. Before the oracle's first step (a Click), the same step aimed
    at a blank point of the task area is played `misses` times (each at its own point) and recorded
    as history only: the page stays as it was, and the oracle's click follows with the misses in its
    history (a model that missed twice must still answer the third step)."""
    miss_suffix(misses, "")  # the range check
    solver = solver_for(name)
    task = env.make_task(name, seed, max_steps=max_steps)
    obs = env.reset(task)
    steps: list[RecordedStep] = []
    error: str | None = None
    done = False
    page = Page(env)
    try:
        for step in solver(page):
            if done:
                raise OracleError("the episode ended before the oracle finished")
            if misses and not steps:
                if not isinstance(step.action, Click):
                    raise OracleError(f"a deliberate miss needs a Click first, the oracle's is {step.action!r}")
                for k in range(misses):
                    miss = _miss(env, page, step, seed, k)
                    before = obs.screenshot
                    obs, done, info = env.step(miss.action)
                    steps.append(RecordedStep(before, miss, to_raw(miss.action, env.px), history_only=True))
                    if done:
                        raise OracleError("the deliberate miss ended the episode")
            raw = to_raw(step.action, env.px)
            before = obs.screenshot
            obs, done, info = env.step(step.action)
            steps.append(RecordedStep(before, step, raw))
        if not done:
            raise OracleError("the oracle finished but the page's task did not end")
    except OracleError as exc:
        error = str(exc)
    state = env.read_state()
    reward = float(state["raw_reward"]) if state["done"] else None
    success = error is None and env.is_successful()
    if error is None and not success:
        error = f"page reward {reward} (reason {state['reason']!r})"
    return OracleEpisode(task, seed, steps, reward, success, error, env.screen, misses)


def oracle_steps(env: MiniWobEnv, names: Sequence[str], max_steps: int, *, seed: int = 0) -> dict[str, int]:
    """Expected steps of each MiniWoB task: the length of its oracle's solved episode on `seed` (the
    one-screen tasks solve in the same number of steps whatever the seed; click-checkboxes does not:
    an estimate there). ValueError naming the task when its oracle does not solve it."""
    out: dict[str, int] = {}
    for name in names:
        ep = run_oracle(env, name, seed, max_steps=max_steps)
        if not ep.success:
            raise ValueError(f"the oracle of {name!r} did not solve seed {seed} ({ep.error}); expected steps come "
                             "from the oracle")
        out[name] = len(ep.steps)
    return out


def to_trajectory(ep: OracleEpisode, writer: DatasetWriter) -> Trajectory:
    """The episode as a Trajectory record (its screenshots stored in `writer`)."""
    steps = []
    for rec in ep.steps:
        ref = writer.put_image(rec.screenshot)
        steps.append(TrajectoryStep(image=ref, image_size=rec.screenshot.size, think=rec.step.think,
                                    action=render_action(rec.step.action),
                                    conclusion=rec.step.conclusion, target_box=rec.step.target_box,
                                    meta={HISTORY_ONLY: True} if rec.history_only else {}))
    eid = ep.episode_id
    return Trajectory(id=f"miniwob:{eid}", episode_id=eid, platform="web", goal=ep.task.goal,
                      steps=steps, success=ep.success,
                      provenance=Provenance(source=SOURCE, source_id=eid, generator=GENERATOR,
                                            seed=ep.seed, extra={"task": ep.name}),
                      meta={"task": ep.name, "reward": ep.reward, "simulated": False,
                            **({"recovery": "miss_first", "misses": ep.misses} if ep.misses else {})})


def raw_lines(ep: OracleEpisode, shots: Path, rel: str) -> list[dict[str, Any]]:
    """The episode in the raw trace format (screenshots saved under `shots`, named from `rel`); the
    format has no history-only steps, so a recovery episode cannot be written in it."""
    if ep.misses:
        raise ValueError("a recovery episode (misses) has history-only steps, which the raw trace format "
                         "cannot hold; collect it as a dataset")
    eid = ep.episode_id
    lines = []
    for i, rec in enumerate(ep.steps):
        name = f"{ep.name}-{ep.seed}-{i}.png"
        rec.screenshot.save(shots / name)
        last = i == len(ep.steps) - 1
        lines.append({"episode_id": eid, "task": ep.name, "seed": ep.seed, "goal": ep.task.goal,
                      "step": i, "screenshot": f"{rel}/{name}", "viewport": list(ep.viewport),
                      "action": rec.raw_action,
                      "dom_box": [round(v, 2) for v in rec.step.dom_box] if rec.step.dom_box else None,
                      "think": rec.step.think, "conclusion": rec.step.conclusion,
                      "done": last, "reward": ep.reward if last else None, "generator": GENERATOR})
    return lines


@dataclass
class CollectReport:
    output: str
    raw: bool
    attempted: dict[str, int] = field(default_factory=dict)
    succeeded: dict[str, int] = field(default_factory=dict)
    written: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def rate(self, task: str) -> float:
        return self.succeeded.get(task, 0) / max(1, self.attempted.get(task, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "raw": self.raw, "written": self.written,
                "seconds": round(self.seconds, 2),
                "tasks": {t: {"attempted": n, "succeeded": self.succeeded.get(t, 0),
                              "success_rate": round(self.rate(t), 4)}
                          for t, n in self.attempted.items()},
                "failures": self.failures}


def collect(tasks: Sequence[str], n: int, out: str | Path, *, seed: int = 0, raw: bool = False,
            overwrite: bool = False, max_steps: int = DEFAULT_MAX_STEPS, scale: float = 2.0, workers: int = 1,
            progress: Callable[[OracleEpisode], None] | None = None, misses: int = 0) -> CollectReport:
    """Attempt `n` oracle episodes of each task (seeds seed..seed+n-1); see the module docstring.

    `workers` browser contexts (one shared Chromium) play episodes side by side; the episodes are
    counted and written in (task, seed) order whatever the number of workers, so the output does
    not depend on it (a page's content depends only on its task and seed)."""
    if n < 1:
        raise ValueError(f"collect: n must be >= 1, got {n}")
    if workers < 1:
        raise ValueError(f"collect: workers must be >= 1, got {workers}")
    miss_suffix(misses, "")  # the range check, before a browser starts
    if misses and raw:
        raise ValueError("collect: recovery episodes (misses) have history-only steps that the raw trace "
                         "format cannot hold; collect them as a dataset")
    for name in tasks:
        solver_for(name)  # unknown task: fail before starting a browser
    out = Path(out)
    report = CollectReport(str(out), raw)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        envs = [stack.enter_context(MiniWobEnv(scale=scale)) for _ in range(min(workers, n * len(tasks)))]
        if raw:
            if out.exists() and any(out.iterdir()) and not overwrite:
                raise FileExistsError(f"{out} exists and is not empty; pass overwrite")
            shots = out / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            with open(out / "traces.jsonl", "w", encoding="utf-8") as f:
                for ep in _episodes(envs, tasks, n, seed, max_steps, report, progress, misses):
                    if ep.steps:
                        for line in raw_lines(ep, shots, "screenshots"):
                            f.write(json.dumps(line, ensure_ascii=False) + "\n")
                        report.written += 1
        else:
            with DatasetWriter(out, sources=[SOURCE], overwrite=overwrite,
                               created_by="venus data collect (miniwob-oracle)") as writer:
                for ep in _episodes(envs, tasks, n, seed, max_steps, report, progress, misses):
                    if ep.success:
                        writer.write(to_trajectory(ep, writer))
                        report.written += 1
    report.seconds = time.perf_counter() - t0
    return report


def _play(env: MiniWobEnv, name: str, s: int, max_steps: int, misses: int = 0) -> OracleEpisode:
    try:
        return run_oracle(env, name, s, max_steps=max_steps, misses=misses)
    except EnvError as exc:  # the page would not even start: one failed attempt
        task = Task(goal=f"MiniWoB {name}", app=name)
        return OracleEpisode(task, s, [], None, False, str(exc), env.screen, misses)


def _episodes(envs: Sequence[MiniWobEnv], tasks: Sequence[str], n: int, seed: int, max_steps: int,
              report: CollectReport, progress: Callable[[OracleEpisode], None] | None,
              misses: int = 0) -> Iterator[OracleEpisode]:
    """Every (task, seed) played once, on whichever env is free, yielded in (task, seed) order."""
    jobs = [(name, s) for name in tasks for s in range(seed, seed + n)]
    for name in tasks:
        report.attempted[name] = report.succeeded[name] = 0
    free: queue.SimpleQueue[MiniWobEnv] = queue.SimpleQueue()
    for env in envs:
        free.put(env)

    def play(job: tuple[str, int]) -> OracleEpisode:
        env = free.get()
        try:
            return _play(env, job[0], job[1], max_steps, misses)
        finally:
            free.put(env)

    with ThreadPoolExecutor(max_workers=len(envs), thread_name_prefix="miniwob-collect") as pool:
        # at most a few episodes ahead of the writer per worker: memory stays bounded for large n
        window = 4 * len(envs)
        pending: collections.deque[tuple[tuple[str, int], Future[OracleEpisode]]] = collections.deque()
        it = iter(jobs)
        for job in itertools.islice(it, window):
            pending.append((job, pool.submit(play, job)))
        while pending:
            (name, _), fut = pending.popleft()
            ep = fut.result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(play, nxt)))
            report.attempted[name] += 1
            if ep.success:
                report.succeeded[name] += 1
            else:
                report.failures.append({"task": name, "seed": ep.seed, "error": ep.error})
            if progress is not None:
                progress(ep)
            yield ep
