"""The online-RL task pool: buckets, goal dedupe, shares, curriculum, set-aside, resume, held out,
and the task sources (sim-phone plans, a fake MiniWoB maker, tasks inferred from trajectories)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from venus_core.config.training import TaskPoolSpec
from venus_core.envs.base import Task
from venus_core.envs.simphone import synth_plan, synth_task
from venus_core.rl.online.tasks import (
    HELD_OUT_SEED_START,
    SYNTH_GENERATOR_GAP,
    HashingEmbedder,
    PoolTask,
    TaskPool,
    bucket_of,
    dedupe,
    dynamic_tasks,
    held_out_tasks,
    miniwob_tasks,
    pool_task,
    sim_phone_tasks,
)

STEPS = {"easy": 5, "medium": 15, "hard": 25}


class OneHot:
    """Every distinct goal its own axis: no two different goals are similar."""

    def __init__(self) -> None:
        self.axes: dict[str, int] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        for t in texts:
            self.axes.setdefault(t, len(self.axes))
        return [[1.0 if self.axes[t] == i else 0.0 for i in range(len(self.axes))] for t in texts]


def fake(name: str, bucket: str = "easy", goal: str | None = None) -> PoolTask:
    task = Task(goal=goal or f"goal of {name}", success_check=f"fake:{name}", max_steps=30)
    return pool_task("fake", task, STEPS[bucket], "static")


def fakes(counts: dict[str, int]) -> list[PoolTask]:
    return [fake(f"{b}{i}", b) for b, n in counts.items() for i in range(n)]


def spec(**kw: object) -> TaskPoolSpec:
    return TaskPoolSpec(**{"size": 1000, "held_out": 0, **kw})


def test_bucket_boundaries() -> None:
    assert [bucket_of(n) for n in (1, 10, 11, 20, 21, 48)] == \
        ["easy", "easy", "medium", "medium", "hard", "hard"]
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ValueError):
            bucket_of(bad)  # type: ignore[arg-type]
    task = Task(goal="g", success_check="fake:x")
    with pytest.raises(ValueError, match="does not match"):
        PoolTask("fake:x", "fake", task, 11, "easy", "static")
    with pytest.raises(ValueError, match="no success check"):
        pool_task("fake", Task(goal="g"), 3, "static")


def test_hashing_embedder_is_unit_norm_and_deterministic_across_processes() -> None:
    texts = ["Open the Settings app", "打开设置", "!"]
    vecs = HashingEmbedder().embed(texts)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    code = ("import json; from venus_core.rl.online.similarity import HashingEmbedder; "
            f"print(json.dumps(HashingEmbedder().embed({texts!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin",
                              "OMP_NUM_THREADS": "1"},
                         cwd=Path(__file__).resolve().parents[2])
    assert json.loads(out.stdout) == vecs


def test_dedupe_drops_near_duplicates_keeps_distinct_and_names_the_duplicate() -> None:
    tasks = [fake("a", goal="Open the Settings app"), fake("b", goal="Open the Messages app"),
             fake("c", goal="open the settings app."), fake("d", goal="Turn on Battery saver"),
             fake("b", goal="Open the Messages app"), fake("d", goal="Send a message to Mia")]
    kept, dropped = dedupe(tasks, HashingEmbedder(), 0.9)
    assert [t.key for t in kept] == ["fake:a", "fake:b", "fake:d"]
    assert [(t.key, k) for t, k, _ in dropped] == \
        [("fake:c", "fake:a"), ("fake:b", "fake:b"), ("fake:d", "fake:d")]
    assert dropped[0][2] > 0.9 and dropped[1][2] > 0.9 and dropped[2][2] < 0.5  # same key
    pool = TaskPool(tasks, spec(), seed=0)
    d = pool.report()["dedupe"]
    assert d["duplicates"][0] == {"key": "fake:c", "duplicate_of": "fake:a",
                                  "similarity": round(dropped[0][2], 4)}
    assert d["input"] == d["kept"] + d["duplicates_count"] + d["held_out_collisions_count"] \
        + d["over_size_count"] == 6
    assert pool.report()["total"] == 3


def test_the_same_goal_on_another_start_state_is_another_task() -> None:
    def at(name: str, goal: str, start: str) -> PoolTask:
        task = Task(goal=goal, success_check=f"fake:{name}", max_steps=30)
        return pool_task("fake", task, 5, "static", start)

    tasks = [at("a", "Click the red button", "board-1"), at("b", "Click the red button", "board-2"),
             at("c", "Click the red button.", "board-1"), at("d", "Click the red button", "")]
    kept, dropped = dedupe(tasks, HashingEmbedder(), 0.9)
    assert [t.key for t in kept] == ["fake:a", "fake:b"]
    # same start: a duplicate; unknown start: compared with every task
    assert [(t.key, k) for t, k, _ in dropped] == [("fake:c", "fake:a"), ("fake:d", "fake:a")]
    unknown_first = [at("d", "Click the red button", ""), at("a", "Click the red button", "board-1")]
    assert [t.key for t in dedupe(unknown_first, HashingEmbedder(), 0.9)[0]] == ["fake:d"]
    # scope "goal": every goal against every goal, whatever the start
    assert [t.key for t in dedupe(tasks, HashingEmbedder(), 0.9, scope="goal")[0]] == ["fake:a"]
    with pytest.raises(ValueError, match="scope"):
        dedupe(tasks, HashingEmbedder(), 0.9, scope="board")


def test_level1_boards_repeat_goals_but_stay_distinct_tasks() -> None:
    """Measured before start fingerprints: 64 level-1 tasks (nine colour goals on different boards)
    collapsed to a handful, and with a level-1 held-out set to "no tasks left"."""
    s = spec(held_out=8, held_out_levels=[1])
    held = held_out_tasks(s)
    train = sim_phone_tasks([1], range(64))
    assert len({t.task.goal for t in train}) <= 9 < len({t.start for t in train})
    pool = TaskPool(train, s, seed=0, held_out=held)
    r = pool.report()["dedupe"]
    starts = Counter(t.start for t in train)
    assert r["kept"] == len(train) - r["duplicates_count"] - r["held_out_collisions_count"]
    assert r["kept"] >= sum(1 for c in starts.values() if c == 1) - r["held_out_collisions_count"] > 40
    with pytest.raises(ValueError, match="no tasks left"):  # what the level-1 runs hit before
        wide = spec(held_out=32, held_out_levels=[1], dedupe_scope="goal")
        TaskPool(train, wide, seed=0, held_out=held_out_tasks(wide))
    # a fingerprint is the start state's, not the seed's: equal for the same reference, stable
    assert train[0].start == sim_phone_tasks([1], [0])[0].start and train[0].start.startswith("synth:")


def test_pool_size_keeps_a_seeded_subset_by_shares() -> None:
    pool = TaskPool(fakes({"easy": 30, "medium": 30, "hard": 30}), spec(size=20), seed=3,
                    embedder=OneHot())
    r = pool.report()
    assert {b: r["buckets"][b]["total"] for b in ("easy", "medium", "hard")} == \
        {"easy": 10, "medium": 7, "hard": 3}
    assert r["dedupe"]["over_size_count"] == 70


def test_sample_follows_the_shares() -> None:
    pool = TaskPool(fakes({"easy": 30, "medium": 30, "hard": 30}), spec(), seed=1,
                    embedder=OneHot())
    got = Counter(t.bucket for _ in range(200) for t in pool.sample(20))
    assert abs(got["easy"] / 4000 - 0.5) < 0.03
    assert abs(got["medium"] / 4000 - 0.35) < 0.03
    assert abs(got["hard"] / 4000 - 0.15) < 0.03
    # renormalised over the buckets that have tasks
    pool = TaskPool(fakes({"easy": 30, "medium": 30}), spec(), seed=1, embedder=OneHot())
    got = Counter(t.bucket for _ in range(200) for t in pool.sample(20))
    assert abs(got["easy"] / 4000 - 0.5 / 0.85) < 0.03 and got["hard"] == 0
    assert pool.report()["buckets"]["easy"]["sampling_share"] == round(0.5 / 0.85, 6)


def test_sample_draws_distinct_tasks_until_a_bucket_is_exhausted() -> None:
    pool = TaskPool(fakes({"easy": 50}), spec(), seed=2, embedder=OneHot())
    keys = [t.key for t in pool.sample(50)]
    assert len(set(keys)) == 50
    assert len(pool.sample(60)) == 60


def test_curriculum_moves_share_to_the_next_harder_bucket() -> None:
    s = spec(min_groups=4, promote_at=0.7, promote_step=0.05, min_share=0.3)
    pool = TaskPool(fakes({"easy": 10, "medium": 10, "hard": 10}), s, seed=0, embedder=OneHot())
    for _ in range(3):
        pool.record("fake:easy0", [True] * 8)
    assert pool.report()["shares"] == {"easy": 0.5, "medium": 0.35, "hard": 0.15}  # < min_groups
    pool.record("fake:easy0", [True] * 8)
    assert pool.report()["shares"] == {"easy": 0.45, "medium": 0.4, "hard": 0.15}
    for _ in range(20):
        pool.record("fake:easy1", [True] * 8)
    shares = pool.report()["shares"]
    assert shares["easy"] == pytest.approx(0.3) and shares["medium"] == pytest.approx(0.55)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert pool.report()["buckets"]["easy"]["success_ema"] == pytest.approx(1.0)
    got = Counter(t.bucket for _ in range(100) for t in pool.sample(20))
    assert abs(got["medium"] / 2000 - 0.55) < 0.04
    # failures do not promote; the hardest bucket gives nothing
    for _ in range(10):
        pool.record("fake:medium0", [False] * 8)
        pool.record("fake:hard0", [True] * 8)
    assert pool.report()["shares"] == shares


def test_curriculum_skips_a_bucket_without_tasks() -> None:
    pool = TaskPool(fakes({"easy": 5, "hard": 5}), spec(min_groups=1), seed=0, embedder=OneHot())
    pool.record("fake:easy0", [True, True])
    assert pool.report()["shares"] == {"easy": 0.45, "medium": 0.35, "hard": 0.2}


def test_a_task_that_keeps_failing_is_set_aside_and_retried() -> None:
    pool = TaskPool(fakes({"easy": 4}), spec(fail_limit=2, retry_after=3), seed=0,
                    embedder=OneHot())
    pool.sample(2)
    pool.record("fake:easy0", [False] * 4)
    pool.record("fake:easy0", [True, False])  # a success clears the streak
    pool.record("fake:easy0", [False] * 4)
    assert not pool.is_aside("fake:easy0")
    pool.record("fake:easy0", [False] * 4)
    assert pool.is_aside("fake:easy0")
    r = pool.report()
    assert (r["active"], r["set_aside"], r["set_aside_keys"]) == (3, 1, ["fake:easy0"])
    assert r["buckets"]["easy"]["active"] + r["buckets"]["easy"]["set_aside"] == 4
    for _ in range(3):
        assert "fake:easy0" not in {t.key for t in pool.sample(10)}
    back = pool.sample(2)
    assert back[0].key == "fake:easy0"  # retried first
    r = pool.report()["buckets"]["easy"]
    assert (r["active"], r["set_aside"], r["retried"]) == (4, 0, 1)
    pool.record("fake:easy0", [False] * 4)  # on probation: one more all-fail group
    assert pool.is_aside("fake:easy0")
    with pytest.raises(KeyError):
        pool.record("fake:nope", [True])


def test_when_every_task_is_aside_the_longest_aside_come_back() -> None:
    pool = TaskPool(fakes({"easy": 2}), spec(fail_limit=1, retry_after=50), seed=0,
                    embedder=OneHot())
    pool.record("fake:easy0", [False])
    pool.sample(1)
    pool.record("fake:easy1", [False])
    assert [t.key for t in pool.sample(1)] == ["fake:easy0"]
    assert pool.report()["set_aside_keys"] == ["fake:easy1"]


def test_state_dict_round_trip_resumes_sampling_exactly() -> None:
    tasks = fakes({"easy": 12, "medium": 8, "hard": 5})
    s = spec(min_groups=2, fail_limit=2, retry_after=2)

    def drive(pool: TaskPool, steps: int) -> list[list[str]]:
        seen = []
        for _ in range(steps):
            batch = pool.sample(6)
            seen.append([t.key for t in batch])
            for t in batch:
                pool.record(t.key, [t.bucket == "easy" and t.key != "fake:easy3"] * 2)
        return seen

    a = TaskPool(tasks, s, seed=7, embedder=OneHot())
    drive(a, 5)
    state = json.loads(json.dumps(a.state_dict()))
    b = TaskPool(tasks, s, seed=7, embedder=OneHot())
    b.load_state_dict(state)
    assert b.report() == a.report()
    assert a.report()["shares"]["easy"] < 0.5 and a.report()["set_aside"] + \
        a.report()["buckets"]["easy"]["retried"] > 0  # the state holds a shift and a set-aside
    fresh = TaskPool(tasks, s, seed=7, embedder=OneHot())  # same seed, no state loaded
    expected = drive(a, 8)
    assert drive(b, 8) == expected
    assert drive(fresh, 8) != expected
    with pytest.raises(ValueError, match="another pool"):
        TaskPool(tasks[:-1], s, seed=7, embedder=OneHot()).load_state_dict(state)


def test_state_dict_keeps_the_retry_queue() -> None:
    tasks = fakes({"easy": 5})
    s = spec(fail_limit=1, retry_after=1)
    a = TaskPool(tasks, s, seed=0, embedder=OneHot())
    for k in ("fake:easy0", "fake:easy1", "fake:easy2"):
        a.record(k, [False])
    a.sample(1)
    assert a.sample(1)[0].key == "fake:easy0"  # three came back; two wait in the queue
    b = TaskPool(tasks, s, seed=0, embedder=OneHot())
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert [t.key for t in b.sample(2)] == [t.key for t in a.sample(2)] == \
        ["fake:easy1", "fake:easy2"]


def test_held_out_tasks_are_fixed_disjoint_and_never_sampled() -> None:
    s = spec(held_out=4, held_out_levels=[0, 3])
    held = held_out_tasks(s)
    assert [t.key for t in held] == [t.key for t in held_out_tasks(s)]
    assert [t.task.difficulty for t in held] == [0, 3, 0, 3]
    assert all(f"seed={HELD_OUT_SEED_START + i}," in t.key for i, t in enumerate(held))
    train = sim_phone_tasks([0, 3], range(12))
    same_key = PoolTask(held[1].key, "sim-phone", held[1].task, held[1].expected_steps,
                        held[1].bucket, "dynamic")
    same_goal = fake("copy", goal=held[3].task.goal + ".")
    pool = TaskPool([*train, same_key, same_goal], s, seed=0, held_out=held)
    r = pool.report()["dedupe"]
    collided = {d["key"]: d["duplicate_of"] for d in r["held_out_collisions"]}
    assert collided[held[1].key] == held[1].key and collided["fake:copy"] == held[3].key
    assert pool.held_out == held
    held_keys = {t.key for t in held}
    held_episodes = {(t.start, t.task.goal) for t in held}
    drawn = [t for _ in range(100) for t in pool.sample(8)]
    assert not any(t.key in held_keys or (t.start, t.task.goal) in held_episodes for t in drawn)
    for seed in (HELD_OUT_SEED_START, 100_000):
        with pytest.raises(ValueError, match="outside the training seeds"):
            sim_phone_tasks([0], [seed])


def test_sim_phone_tasks_expected_steps_are_plan_lengths() -> None:
    tasks = sim_phone_tasks([0, 4, 5], [0, 1, 2])
    assert [t.key for t in tasks[:2]] == ["sim-phone:level=0,seed=0,lang=en,size=540x960",
                                          "sim-phone:level=0,seed=1,lang=en,size=540x960"]
    for t in tasks:
        assert t.expected_steps == len(synth_plan(t.task))
        assert t.bucket == bucket_of(t.expected_steps)
        assert t.env == "sim-phone" and t.source == "static"
    assert {t.bucket for t in tasks} == {"easy", "medium"}
    assert {t.task.difficulty for t in tasks if t.bucket == "medium"} == {5}
    rejected: list[tuple[str, str]] = []
    assert sim_phone_tasks([6], [0], rejected=rejected) == []  # its plan is 32 steps
    assert "exceed max_steps=30" in rejected[0][1]
    [hard] = sim_phone_tasks([6], [0], max_steps=50)
    assert hard.bucket == "hard" and hard.expected_steps == len(synth_plan(hard.task)) > 30


def test_miniwob_tasks_from_a_fake_maker() -> None:
    def make(name: str, seed: int) -> Task:
        return Task(goal=f'Click on the "{name}" thing {seed}', app=name,
                    success_check=f"miniwob:{name},seed={seed}", max_steps=10)

    tasks = miniwob_tasks(["click-button", "enter-text"], [1, 2], make,
                          expected_steps=lambda t: 12 if t.app == "enter-text" else 1)
    assert [t.key for t in tasks] == ["miniwob:click-button,seed=1", "miniwob:click-button,seed=2"]
    tasks = miniwob_tasks(["click-button"], [1], make, expected_steps=lambda t: 11,
                          rejected=(rej := []))
    assert tasks == [] and rej[0][0] == "miniwob:click-button,seed=1"
    with pytest.raises(ValueError, match="not a miniwob"):
        miniwob_tasks(["x"], [1], lambda n, s: Task(goal="g", success_check="synth:x"),
                      expected_steps=lambda t: 1)


def test_dynamic_tasks_infer_only_what_a_success_check_can_judge(nav_data: Path) -> None:
    from venus_core.data.store import DatasetReader

    t = synth_task(4, 3)
    ok = {"id": "task-0", "goal": t.goal, "success_check": t.success_check, "success": True,
          "steps": 9}
    web = {"id": "miniwob:click-button:seed=5", "goal": 'Click on the "ok" button.',
           "success": True, "steps": [{}, {}],
           "provenance": {"source": "miniwob", "seed": 5, "extra": {"task": "click-button"}}}
    synth_records = [r.model_dump(mode="json") for r in DatasetReader(nav_data)]
    records = [ok, web, {**ok, "id": "failed", "success": False},
               {**ok, "id": "other-goal", "goal": "Do something else"},
               {**ok, "id": "eval-seed", "success_check": synth_task(4, 100_000).success_check},
               {**ok, "id": "free", "success_check": "synth:free,seed=1,lang=en,size=540x960"},
               {**web, "id": "imported", "provenance": {"source": "androidcontrol"}},
               *synth_records]
    rejected: list[tuple[str, str]] = []
    got = dynamic_tasks(records, rejected=rejected)
    assert [(g.key, g.env, g.source) for g in got] == [
        ("sim-phone" + t.success_check[len("synth"):], "sim-phone", "dynamic"),
        ("miniwob:click-button,seed=5", "miniwob", "dynamic")]
    assert got[0].expected_steps == len(synth_plan(t)) and got[1].expected_steps == 2
    assert got[1].task.success_check == "miniwob:click-button,seed=5"
    why = dict(rejected)
    assert len(rejected) == len(records) - 2
    assert "not successful" in why["failed"] and "differs" in why["other-goal"]
    assert "evaluation" in why["eval-seed"] and "free play" in why["free"]
    assert "no success reference" in why["imported"]
    assert synth_records and all(why[r["id"]] == SYNTH_GENERATOR_GAP for r in synth_records)
    # a dynamic task that restates a static one is a duplicate of it (same key)
    static = sim_phone_tasks([4], [3])
    pool = TaskPool([*static, *got], spec(), seed=0)
    assert pool.report()["dedupe"]["duplicates"][0]["duplicate_of"] == static[0].key
    assert pool.report()["sources"] == {"static": 1, "dynamic": 1}
