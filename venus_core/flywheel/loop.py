"""The flywheel's rounds: expand -> unique -> feasible -> execute -> verify -> feed back and write.

One round (`Flywheel.round`):
1. the expander proposes `tasks_per_round` tasks from the seeds and the feedback so far;
2. uniqueness: the task pool's `dedupe` (its embedder, `dedupe_similarity`, `dedupe_scope`)
   against every task of the earlier rounds and the pool's held-out tasks (collisions counted
   apart); a proposal without a start state is compared by its goal with every task;
3. feasibility: `space.infeasible` (a start state, a rule success check, a training seed, the
   step limit, the devices' screen size), each rejection with its reason;
4. execution: `collect_groups` (one trajectory per task) on envs from the `EnvSource` — leased
   devices, call timeouts, broken devices replaced, lost trajectories counted — by the policy;
5. verification (`rl.online.verdicts`, shared with online RL): rules on env state, the judge when there is one, agreement;
6. feedback: every executed task becomes an `Example` for the next expansion (verified or not),
   and the verified trajectories are written to the dataset with their provenance.

Every proposal ends in exactly one status — duplicate, infeasible, lost, unverified, verified —
with its reason in `tasks.jsonl`, and the round's counts must reconcile before the round is
reported (fail closed). Success rate = verified / executed (executed = not lost), with its 95 %
Wilson interval and n. Cost: expander and judge calls and tokens; device-minutes = devices held x
the execution's wall time (`min(devices, tasks)` slots are leased for the whole of it), and the
minutes spent inside env calls.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from venus_core.data.store import DatasetWriter
from venus_core.envs.base import Task
from venus_core.eval.metrics import Rate
from venus_core.flywheel.expanders import Example, Expander, Proposal
from venus_core.flywheel.records import ImageMemo, to_record, with_verdict
from venus_core.rl.online.verdicts import Verdict, agreement, judge_records
from venus_core.flywheel.seeds import Seed, normalise
from venus_core.rl.online.devices import EnvSource
from venus_core.rl.online.rollout import Policy, collect_groups
from venus_core.rl.online.similarity import Embedder, HashingEmbedder, dedupe
from venus_core.rl.online.sources import PoolTask
from venus_core.scoring.judges import JudgeBackend, JudgeStats

STATUSES = ("duplicate", "infeasible", "lost", "unverified", "verified")


@dataclass(frozen=True)
class _Keyed:
    """A proposal as `dedupe` reads it: its task's key, goal and start state ("" when the proposal has
    no start state: its goal is then compared with every task)."""

    key: str
    task: Task
    start: str
    index: int


@dataclass
class Settings:
    """What a run needs beyond its parts (the spec's values, resolved by the caller)."""

    rounds: int
    tasks_per_round: int
    devices: int
    history_len: int
    call_timeout_s: float
    dedupe_similarity: float
    dedupe_scope: str
    verifier: str = "auto"
    keep_threshold: int = 7
    policy_revision: str = "unknown"


@dataclass
class Flywheel:
    settings: Settings
    seeds: Sequence[Seed]
    space: Any  # space.SimPhoneSpace | web_space.MiniWobSpace
    expander: Expander
    source: EnvSource
    policy: Policy
    writer: DatasetWriter
    memo: ImageMemo
    judge: JudgeBackend | None = None
    held_out: Sequence[PoolTask] = ()
    embedder: Embedder = field(default_factory=HashingEmbedder)
    tasks_log: IO[str] | None = None
    log: Callable[[str], None] = print
    feedback: list[Example] = field(default_factory=list)
    history: list[PoolTask] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def run(self) -> dict[str, Any]:
        for r in range(self.settings.rounds):
            self.rounds.append(self.round(r))
        return self.summary()

    def _unique(self, proposals: Sequence[Proposal]) -> tuple[list[Proposal], dict[int, tuple[bool, str]]]:
        """The unique proposals, and (held-out collision?, reason) of each dropped one by index."""
        s = self.settings
        keyed = [_Keyed(p.candidate.key, p.candidate.task.task, p.candidate.task.start, i) if p.candidate is not None
                 else _Keyed(f"goal:{normalise(p.goal)}#{i}", Task(goal=p.goal), "", i) for i, p in enumerate(proposals)]
        against = [_Keyed(t.key, t.task, t.start, -1) for t in [*self.held_out, *self.history]]
        kept, dropped = dedupe(keyed, self.embedder, s.dedupe_similarity, against=against, scope=s.dedupe_scope)
        held = {t.key for t in self.held_out}
        out = {t.index: (dup in held, f"{'held-out task' if dup in held else 'duplicate of'} {dup} (similarity {sim:.3f})")
               for t, dup, sim in dropped}
        return [proposals[t.index] for t in kept], out

    def round(self, r: int) -> dict[str, Any]:
        s, t0 = self.settings, time.perf_counter()
        exp0 = self.expander.cost()
        exp_before = (exp0.calls, exp0.prompt_tokens, exp0.completion_tokens, exp0.failures)
        judge0 = self.judge.stats() if self.judge is not None else JudgeStats()
        proposals = self.expander.expand(self.seeds, s.tasks_per_round, r, self.feedback)
        lines: list[dict[str, Any]] = [{"round": r, "seed": p.seed, "goal": p.goal, "expander": p.expander, "how": p.how,
                                        "score": p.score, "key": p.candidate.key if p.candidate else None,
                                        "level": p.candidate.level if p.candidate else None} for p in proposals]
        unique, dup = self._unique(proposals)
        for i, (held_out, reason) in dup.items():
            lines[i].update(status="duplicate", reason=reason, held_out=held_out)
        pos = {id(p): i for i, p in enumerate(proposals)}
        run: list[Proposal] = []
        for p in unique:
            why = self.space.infeasible(p.candidate.task if p.candidate else None, p.goal, r)
            if why is None:
                run.append(p)
            else:
                lines[pos[id(p)]].update(status="infeasible", reason=why)
        self.history += [p.candidate.task for p in unique if p.candidate is not None]
        tasks = [p.candidate.task for p in run if p.candidate is not None]
        groups, stats = (collect_groups(tasks, 1, self.source, self.policy, devices=s.devices,
                                        history_len=s.history_len, call_timeout=s.call_timeout_s)
                         if tasks else ([], None))
        lost_why = dict(stats.lost) if stats is not None else {}
        executed: list[tuple[Proposal, Any]] = []
        for p, group in zip(run, groups, strict=True):
            if group:
                executed.append((p, group[0]))
            else:
                assert p.candidate is not None
                lines[pos[id(p)]].update(status="lost", reason=lost_why.get(f"{p.candidate.key}#0", "lost"))
        verdicts = self._verify(r, executed, lines, pos)
        row = self._report(r, lines, verdicts, stats, len(tasks), exp_before, judge0, time.perf_counter() - t0)
        if self.tasks_log is not None:
            for line in lines:
                self.tasks_log.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.tasks_log.flush()
        self.memo.clear()
        sr = row["success"]
        self.log(f"round {r}: proposed {row['proposed']}, unique {row['unique']}, executed {row['executed']}, "
                 f"verified {row['verified']} = {sr['value']:.1%} [{sr['ci95_low']:.1%}, {sr['ci95_high']:.1%}] "
                 f"(n={sr['n']}), {row['devices']['device_minutes']:.2f} device-min, {row['seconds']:.0f} s")
        return row

    def _verify(self, r: int, executed: list[tuple[Proposal, Any]], lines: list[dict[str, Any]],
                pos: dict[int, int]) -> list[Verdict]:
        s = self.settings
        records = [to_record(traj, self.memo, platform=self.source.platform, round_=r, seed=p.seed,
                             expander=p.expander, policy=self.policy.name, policy_revision=s.policy_revision)
                   for p, traj in executed]
        judged: dict[int, tuple[bool | None, int | None, str | None]] = {}
        if self.judge is not None:
            idx = [i for i, rec in enumerate(records) if not isinstance(rec, str)]
            got = judge_records(self.judge, [rec for rec in records if not isinstance(rec, str)], s.keep_threshold)
            judged = dict(zip(idx, got, strict=True))
        verdicts = []
        for i, ((p, traj), rec) in enumerate(zip(executed, records, strict=True)):
            if i in judged:
                j = judged[i]
            else:
                j = (None, None, "no judge configured" if self.judge is None else f"not judged: {rec}")
            verdict = Verdict(traj.success if self.space.state_checks else None, j[0], j[1], j[2])
            ok, verifier, reason = verdict.decide(s.verifier)
            verdicts.append(verdict)
            line = lines[pos[id(p)]]
            line.update(verdict.to_dict(), verifier=verifier, steps=traj.length, invalid_steps=traj.invalid)
            if ok and isinstance(rec, str):
                line.update(status="verified", written=False, reason=f"unrecordable: {rec}")
            elif ok:
                assert not isinstance(rec, str)
                record = with_verdict(rec, {**verdict.to_dict(), "verifier": verifier})
                refs = [step.image for step in record.steps] + [record.meta.get("final_image")] * ("final_image" in record.meta)
                for ref in refs:  # the memo's PNG bytes: the writer stores them unchanged
                    if self.writer.put_image(self.memo.png(ref)) != ref:
                        raise RuntimeError(f"record {record.id}: image {ref} changed on write")
                self.writer.write(record)
                line.update(status="verified", written=True, record=record.id)
            else:
                line.update(status="unverified", reason=reason)
            c = p.candidate
            self.feedback.append(Example(p.goal, p.seed, c.level if c else -1, c.point if c else None, bool(ok), r))
        return verdicts

    def _report(self, r: int, lines: list[dict[str, Any]], verdicts: list[Verdict], stats: Any, launched: int,
                exp_before: tuple[Any, ...], judge0: JudgeStats, seconds: float) -> dict[str, Any]:
        status = Counter(line.get("status") for line in lines)
        if set(status) - set(STATUSES) or sum(status.values()) != len(lines):
            raise RuntimeError(f"round {r}: proposals without a final status: {dict(status)}")
        executed = status["unverified"] + status["verified"]
        if launched != executed + status["lost"]:
            raise RuntimeError(f"round {r}: {launched} executions != {executed} finished + {status['lost']} lost")
        exp = self.expander.cost()
        jd = (self.judge.stats() - judge0) if self.judge is not None else None

        def rate(sel: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
            done = [x for x in lines if x.get("status") in ("verified", "unverified") and sel(x)]
            return Rate(sum(x["status"] == "verified" for x in done), len(done)).to_dict()

        levels = sorted({x["level"] for x in lines if x.get("level") is not None})
        slots = min(self.settings.devices, launched)
        return {
            "round": r, "proposed": len(lines), "unique": len(lines) - status["duplicate"],
            "duplicates": status["duplicate"], "held_out_collisions": sum(bool(x.get("held_out")) for x in lines),
            "feasible": launched, "infeasible": status["infeasible"],
            "infeasible_reasons": Counter(str(x["reason"])[:120] for x in lines
                                          if x.get("status") == "infeasible").most_common(5),
            "unplannable_candidates": getattr(self.space, "unplannable", {}).get(r, 0),
            "generated": getattr(self.space, "generated", {}).get(r),  # web: pages loaded, no_point, seconds
            "executed": executed, "lost": status["lost"], "verified": status["verified"],
            "written": sum(bool(x.get("written")) for x in lines),
            "success": rate(lambda x: True),
            "by_level": {str(lv): rate(lambda x, lv=lv: x.get("level") == lv) for lv in levels},
            "by_seed": {k: rate(lambda x, k=k: x.get("seed") == k) for k in sorted({x["seed"] for x in lines})},
            "by_how": {h: rate(lambda x, h=h: x.get("how") == h) for h in sorted({x.get("how") or "" for x in lines})},
            "distinct_goals": len({normalise(x["goal"]) for x in lines if x.get("status") in ("verified", "unverified")}),
            "expander": {"calls": exp.calls - exp_before[0],
                         "prompt_tokens": _minus(exp.prompt_tokens, exp_before[1]),
                         "completion_tokens": _minus(exp.completion_tokens, exp_before[2]),
                         "failures": exp.failures - exp_before[3], "failure_reasons": exp.reasons[exp_before[3]:][:3],
                         "selection": dict(getattr(self.expander, "last", {}) or {})},
            "judge": None if jd is None else {"calls": jd.calls, "prompt_tokens": jd.prompt_tokens,
                                              "completion_tokens": jd.completion_tokens,
                                              "cache_hits": jd.cache_hits,
                                              "failures": sum(v.judge is None for v in verdicts)},
            "agreement": agreement(verdicts),
            "devices": {"slots": slots, "device_minutes": round(slots * (stats.wall_s if stats else 0.0) / 60, 3),
                        "env_minutes": round((stats.env_s if stats else 0.0) / 60, 3),
                        "replaced": stats.replaced if stats else 0, "reset_retries": stats.reset_retries if stats else 0,
                        "lost_by": dict(stats.losses) if stats else {}},
            "seconds": round(seconds, 1),
        }

    def summary(self) -> dict[str, Any]:
        """Totals over the rounds and whether the last round's success rose beyond the first's interval."""
        rows = self.rounds
        keys = ("proposed", "unique", "duplicates", "feasible", "infeasible", "executed", "lost", "verified", "written")
        total = {k: sum(row[k] for row in rows) for k in keys}
        first, last = rows[0]["success"], rows[-1]["success"]
        return {"rounds": rows, "total": total,
                "success": Rate(total["verified"], total["executed"]).to_dict(),
                "device_minutes": round(sum(row["devices"]["device_minutes"] for row in rows), 3),
                "expander_calls": sum(row["expander"]["calls"] for row in rows),
                "judge_calls": sum((row["judge"] or {}).get("calls", 0) for row in rows),
                "rise": {"first": first, "last": last,
                         "beyond_intervals": bool(first["n"] and last["n"] and last["ci95_low"] > first["ci95_high"])}}


def _minus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


__all__ = ["STATUSES", "Flywheel", "Settings"]
