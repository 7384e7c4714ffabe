"""Where online-RL pool tasks come from: static templated tasks and tasks inferred from records.

Why: UI-Venus-1.5's online task pool holds static tasks (templated per app / site) plus tasks
inferred from offline trajectories, each bucketed by its expected steps (easy <= 10, medium
11-20, hard > 20). Here the static tasks are the simulated phone's curriculum tasks (expected
steps = the planner's ground-truth plan length) and MiniWoB++ tasks, which a browser page must
generate: the caller passes the maker (e.g. a bound `MiniWobEnv.make_task`) and a step estimate.

Seed ranges (the held-out rule): training tasks use seeds `TRAIN_SEEDS` (0..99999, where the
offline data's small seeds live); online evaluation targets start at 100000 (`online_sim`,
`online_web`); the pool's held-out tasks are sim-phone seeds from `HELD_OUT_SEED_START` (900000).
Builders refuse training seeds outside `TRAIN_SEEDS`, so no evaluation episode enters training.

Inferred tasks (`dynamic_tasks`), and where they depart from the paper: the paper lets an MLLM
write goals for trajectories' end states; a pool task here must carry a success check an env can
judge, so a trajectory yields a task only when its record names a reference an env can rebuild,
and only if it succeeded (the goal is then shown reachable from its start): a `synth:` reference
whose rebuilt episode has the record's goal, or a MiniWoB provenance (task name + page seed). The
synthetic generator's own navigation records cannot qualify (`SYNTH_GENERATOR_GAP`), nor can
imported datasets (AndroidControl, GUIOdyssey, Mind2Web: no env holds their apps' state).
A task whose expected steps exceed its step limit could never succeed and is rejected; every
rejection is returned in `rejected` (or logged when no list is given), never dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from venus_core.config.spec import TRAINING_SEED_END
from venus_core.config.training import TaskPoolSpec
from venus_core.envs.base import DEFAULT_MAX_STEPS, EnvError, Task

log = logging.getLogger(__name__)

Bucket = Literal["easy", "medium", "hard"]
BUCKETS: tuple[Bucket, ...] = get_args(Bucket)
Source = Literal["static", "dynamic"]
TRAIN_SEEDS = range(0, TRAINING_SEED_END)
HELD_OUT_SEED_START = 900_000
Rejected = list[tuple[str, str]]  # (task key or record id, reason)

SYNTH_GENERATOR_GAP = (
    "a synthesize() trajectory was sampled from Random('<seed>:navigation:<level>:<idx>') after "
    "view-context draws; a synth: reference names only Random(<int seed>) on a mobile view, so "
    "the sim-phone env can neither rebuild its start state nor judge its success")


def bucket_of(expected_steps: int) -> Bucket:
    """easy <= 10 steps, medium 11-20, hard > 20 (UI-Venus-1.5)."""
    if isinstance(expected_steps, bool) or not isinstance(expected_steps, int) \
            or expected_steps < 1:
        raise ValueError(f"expected_steps must be an integer >= 1, got {expected_steps!r}")
    return "easy" if expected_steps <= 10 else "medium" if expected_steps <= 20 else "hard"


@dataclass(frozen=True)
class PoolTask:
    """One task of the pool; `key` is unique and stable (the env and its success reference).

    `start` fingerprints the episode's start state ("" = unknown). Goal similarity only makes two
    tasks duplicates when they start from the same state (or either start is unknown): "Click the
    red button" on two different boards are two tasks, not one (`similarity.dedupe`)."""

    key: str
    env: str
    task: Task
    expected_steps: int
    bucket: Bucket
    source: Source
    start: str = ""

    def __post_init__(self) -> None:
        if not self.key or not self.env:
            raise ValueError("PoolTask: key and env must be set")
        if not self.task.success_check:
            raise ValueError(f"PoolTask {self.key}: the task has no success check")
        if self.bucket != bucket_of(self.expected_steps):
            raise ValueError(f"PoolTask {self.key}: bucket {self.bucket!r} does not match "
                             f"{self.expected_steps} expected steps")
        if self.source not in get_args(Source):
            raise ValueError(f"PoolTask {self.key}: source {self.source!r} is not static/dynamic")


def pool_task(env: str, task: Task, expected_steps: int, source: Source, start: str = "") -> PoolTask:
    """A PoolTask keyed `<env>:<success reference without its scheme>`, e.g.
    `sim-phone:level=3,seed=17,lang=en,size=540x960` or `miniwob:click-button,seed=5`."""
    scheme, sep, rest = task.success_check.partition(":")
    return PoolTask(f"{env}:{rest if sep else scheme}", env, task, expected_steps,
                    bucket_of(expected_steps), source, start)


def synth_start(ref: str) -> str:
    """Fingerprint of a `synth:` task's start state: sha256 of its phone state's JSON (the state
    the env loads, so two seeds that build the same start state get the same fingerprint)."""
    import hashlib

    from venus_core.envs.simphone import synth_episode
    from venus_core.envs.state_codec import encode_state

    return "synth:" + hashlib.sha256(encode_state(synth_episode(ref).start).encode("utf-8")).hexdigest()[:16]


def _report(rejected: Rejected | None, bad: Rejected, label: str) -> None:
    if rejected is not None:
        rejected.extend(bad)
    elif bad:
        log.warning("%s: %d rejected, e.g. %s: %s", label, len(bad), *bad[0])


def _fits(t: PoolTask, bad: Rejected) -> bool:
    if t.expected_steps <= t.task.max_steps:
        return True
    bad.append((t.key, f"{t.expected_steps} expected steps exceed max_steps={t.task.max_steps}"))
    return False


def _training_seed(seed: int, what: str) -> None:
    if seed not in TRAIN_SEEDS:
        raise ValueError(f"{what} seed {seed} is outside the training seeds "
                         f"{TRAIN_SEEDS.start}..{TRAIN_SEEDS.stop - 1}")


def _sim_phone(items: Sequence[tuple[int, int]], lang: str, size: tuple[int, int],
               max_steps: int, bad: Rejected) -> list[PoolTask]:
    from venus_core.envs.simphone import synth_plan, synth_task

    out = []
    for level, seed in items:
        task = synth_task(level, seed, lang=lang, size=size, max_steps=max_steps)
        t = pool_task("sim-phone", task, len(synth_plan(task)), "static", synth_start(task.success_check))
        if _fits(t, bad):
            out.append(t)
    return out


def sim_phone_tasks(levels: Sequence[int], seeds: Iterable[int], *, lang: str = "en",
                    size: tuple[int, int] = (540, 960), max_steps: int = DEFAULT_MAX_STEPS,
                    rejected: Rejected | None = None) -> list[PoolTask]:
    """Static sim-phone tasks: every level with every seed (`TRAIN_SEEDS` only), in that order;
    expected steps = len(synth_plan(task)). Plans longer than `max_steps` are rejected."""
    seeds = list(seeds)
    for s in seeds:
        _training_seed(s, "sim-phone")
    bad: Rejected = []
    out = _sim_phone([(lv, s) for lv in levels for s in seeds], lang, size, max_steps, bad)
    _report(rejected, bad, "sim_phone_tasks")
    return out


def miniwob_tasks(names: Sequence[str], seeds: Iterable[int],
                  make_task: Callable[[str, int], Task], *, expected_steps: Callable[[Task], int],
                  start: Callable[[Task], str] | None = None, rejected: Rejected | None = None) -> list[PoolTask]:
    """Static MiniWoB++ tasks `make_task(name, seed)` for every name and seed (`TRAIN_SEEDS`
    only); `expected_steps(task)` is the caller's estimate (e.g. an oracle run's length);
    `start(task)` fingerprints the start state (default: the reference, which names the page)."""
    seeds = list(seeds)
    for s in seeds:
        _training_seed(s, "MiniWoB")
    out: list[PoolTask] = []
    bad: Rejected = []
    for name in names:
        for seed in seeds:
            task = make_task(name, seed)
            if not task.success_check.startswith("miniwob:"):
                raise ValueError(f"make_task({name!r}, {seed}) gave success_check "
                                 f"{task.success_check!r}, not a miniwob: reference")
            # the page is generated from (task, seed): the reference names the start state
            t = pool_task("miniwob", task, expected_steps(task), "static",
                          start(task) if start is not None else task.success_check)
            if _fits(t, bad):
                out.append(t)
    _report(rejected, bad, "miniwob_tasks")
    return out


def miniwob_held_out_tasks(names: Sequence[str], n: int, make_task: Callable[[str, int], Task],
                           steps: Mapping[str, int], *, start: Callable[[Task], str] | None = None,
                           env: str = "miniwob") -> list[PoolTask]:
    """`n` held-out MiniWoB++ pages: `names` round robin, page seed HELD_OUT_SEED_START + i for page i.
    `start(task)`, called right after `make_task`, fingerprints the page (default: its reference, which
    names the page); a held-out page needs one, or it collides with every training page of its goal."""
    out = []
    for i in range(n):
        name = names[i % len(names)]
        task = make_task(name, HELD_OUT_SEED_START + i)
        out.append(pool_task(env, task, steps[name], "static", start(task) if start is not None else task.success_check))
    return out


def held_out_tasks(spec: TaskPoolSpec, *, lang: str = "en", size: tuple[int, int] = (540, 960),
                   max_steps: int = DEFAULT_MAX_STEPS) -> list[PoolTask]:
    """`spec.held_out` sim-phone tasks: levels `spec.held_out_levels` round robin, seed
    HELD_OUT_SEED_START + i for task i. Fixed for a spec; raises if one does not fit max_steps."""
    levels = spec.held_out_levels
    items = [(levels[i % len(levels)], HELD_OUT_SEED_START + i) for i in range(spec.held_out)]
    bad: Rejected = []
    out = _sim_phone(items, lang, size, max_steps, bad)
    if bad:
        raise ValueError(f"held-out tasks must fit max_steps={max_steps}: {bad}")
    return out


def _reference(rec: Mapping[str, Any]) -> tuple[str | None, str]:
    """(success reference, why there is none) of a trajectory or online-episode record."""
    def sub(m: Any, key: str) -> Mapping[str, Any]:
        v = m.get(key)
        return v if isinstance(v, Mapping) else {}

    prov = sub(rec, "provenance")
    extra = sub(prov, "extra")
    for ref in (rec.get("success_check"), sub(rec, "meta").get("success_check"),
                extra.get("success_check")):
        if isinstance(ref, str) and ref:
            return ref, ""
    task, seed = extra.get("task"), prov.get("seed")
    if prov.get("source") == "miniwob" and isinstance(task, str) and isinstance(seed, int):
        return f"miniwob:{task},seed={seed}", ""
    if prov.get("source") == "synth":
        return None, SYNTH_GENERATOR_GAP
    return None, f"no success reference (source {prov.get('source')!r}): no env can judge it"


def _step_count(rec: Mapping[str, Any]) -> int | None:
    steps = rec.get("steps")
    if isinstance(steps, list):
        return len(steps)
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def _infer(rec: Mapping[str, Any], max_steps: int) -> PoolTask | str:
    """The task a record names, or why it names none."""
    from venus_core.envs.miniwob import parse_ref as miniwob_ref
    from venus_core.envs.simphone import SynthRef, synth_plan, synth_task

    goal = rec.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        return "no goal"
    if rec.get("success") is not True:
        return "not successful: the goal is not shown reachable from the start"
    ref, why = _reference(rec)
    if ref is None:
        return why
    try:
        if ref.startswith("synth:"):
            r = SynthRef.parse(ref)
            if r.level is None:
                return "free play: no goal predicate"
            if r.seed not in TRAIN_SEEDS:
                return f"seed {r.seed} is an evaluation / held-out seed"
            task = synth_task(r.level, r.seed, lang=r.lang, size=r.size, max_steps=max_steps)
            if task.goal != goal:
                return f"goal differs from the rebuilt episode's {task.goal!r}"
            return pool_task("sim-phone", task, len(synth_plan(task)), "dynamic", synth_start(ref))
        if ref.startswith("miniwob:"):
            name, seed = miniwob_ref(ref)
            steps = _step_count(rec)
            if seed not in TRAIN_SEEDS:
                return f"seed {seed} is an evaluation / held-out seed"
            if not steps:
                return "no step count"
            task = Task(goal=goal, app=name, success_check=ref, max_steps=max_steps)
            return pool_task("miniwob", task, steps, "dynamic", ref)
    except EnvError as exc:
        return str(exc)
    return f"unsupported success reference {ref!r}"


def dynamic_tasks(trajectories: Sequence[Mapping[str, Any]], *,
                  max_steps: int = DEFAULT_MAX_STEPS,
                  rejected: Rejected | None = None) -> list[PoolTask]:
    """Tasks inferred from successful trajectories (schema `Trajectory` dicts or online episode
    results of `venus_core.eval.online`): the record's goal, from its start state.

    The reference is the record's (or its meta's, or provenance.extra's) `success_check`, else a
    MiniWoB provenance (source "miniwob", extra.task, seed). Expected steps: the plan length for
    `synth:` tasks (whose rebuilt goal must equal the record's), the record's step count for
    MiniWoB (an upper bound: that many steps did succeed). See the module docstring for what is
    rejected and why."""
    out: list[PoolTask] = []
    bad: Rejected = []
    for i, rec in enumerate(trajectories):
        got = _infer(rec, max_steps)
        rid = str(rec.get("id") or f"#{i}")
        if isinstance(got, str):
            bad.append((rid, got))
        elif _fits(got, bad):
            out.append(got)
    _report(rejected, bad, "dynamic_tasks")
    return out
