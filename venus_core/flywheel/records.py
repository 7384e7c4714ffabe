"""Executed trajectories as Venus dataset records, with the flywheel's provenance.

A rollout `Trajectory` (`rl.online.rollout`) keeps every step the policy answered, valid or not;
an invalid step ran nothing on the device and is not in the agent's history (online RL's rule), so
the record keeps the valid steps only, each with the screenshot seen before it, the parsed think /
conclusion and the canonical action, and counts the invalid ones in `meta.invalid_steps`. A
trajectory with no valid step cannot be a record (the schema needs one step) and is reported as
`unrecordable`.

Provenance (`Provenance.extra`): round, seed prompt key, expander, policy and its revision, the
verifier that decided, the rule and judge verdicts, the env, the success reference and level;
`seed` is the synthetic seed of the start state (the page seed on MiniWoB++). `meta.success_check`
is what the online task pool's `dynamic_tasks` reads, so a flywheel dataset can also feed online
RL's pool.

Screenshots go through an `ImageMemo` first (PNG bytes by their content ref): the judge opens them
from it before anything is written, and only the verified records' images reach the dataset — the
screen after the last step too (`meta.final_image`, the last frame the judge saw).
"""

from __future__ import annotations

import re
from typing import Any

from venus_core.data.schema import Provenance, Trajectory
from venus_core.rl.online.rollout import Trajectory as Rollout
from venus_core.rl.online.verdicts import ImageMemo, claim_record

SOURCE = "flywheel"
GENERATOR = "venus-flywheel"


def synth_seed(success_check: str) -> int | None:
    m = re.search(r"(?:^|[:,])seed=(\d+)", success_check)
    return int(m.group(1)) if m else None


def to_record(traj: Rollout, memo: ImageMemo, *, platform: str, round_: int, seed: str, expander: str,
              policy: str, policy_revision: str, extra: dict[str, Any] | None = None) -> Trajectory | str:
    """The trajectory as a record claiming success (what a verifier is asked to confirm), or why it
    cannot be one. `extra` is merged into `provenance.extra` (the verdicts, once known)."""
    task = traj.task
    ref = task.task.success_check
    eid = f"r{round_}:{task.key}"
    prov = Provenance(source=SOURCE, source_id=task.key, generator=f"{GENERATOR}/{expander}", seed=synth_seed(ref),
                      extra={"round": round_, "seed_prompt": seed, "expander": expander, "policy": policy,
                             "policy_revision": policy_revision, "env": task.env, "success_check": ref,
                             "level": int(task.task.difficulty), **(extra or {})})
    return claim_record(traj, memo, platform=platform, source=SOURCE, record_id=eid, provenance=prov,
                        meta={"success_check": ref, "invalid_steps": traj.invalid, "steps_taken": traj.length,
                              "truncated": traj.truncated, "simulated": task.env == "sim-phone"})


def with_verdict(record: Trajectory, verdict: dict[str, Any]) -> Trajectory:
    """The record with the verification's verdict in `provenance.extra`."""
    prov = record.provenance.model_copy(update={"extra": {**record.provenance.extra, **verdict}})
    return record.model_copy(update={"provenance": prov})


__all__ = ["GENERATOR", "SOURCE", "ImageMemo", "synth_seed", "to_record", "with_verdict"]
