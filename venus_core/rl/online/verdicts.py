"""Whether an episode reached its goal: the env's rule, the MLLM judge, or both compared.

UI-Venus-1.5 checks success from system state where it can and asks an MLLM judge where it cannot.
Rules read the env's state (`Env.is_successful`: the sim phone's `synth:` predicates, MiniWoB++'s
reward) when the episode ends (`rollout.collect_groups`). The judge is the data stage's backend
(`scoring.judges`: openai, local, cached) given the episode as a `Trajectory` record that claims
success — its valid steps with the screenshot before each, and the screen after the last step in
`meta.final_image` (the judge's filmstrip ends on it) — and its score (the lower of its two axes)
must reach `scoring.keep_threshold` to confirm it. A judge that fails on a record after its retries
gives no verdict (counted, never read as a pass or a fail).

Who decides (`online_rl.success`, the flywheel's `verifier`): `rules` the rule (no rule: not
verified); `auto` the rule where the env has one for the task, else the judge; `judge` the judge
(the rule is still read where there is one, and the two are compared). Where both gave a verdict,
`agreement` reports the 2 x 2 table, the agreement share and Cohen's kappa.

`EpisodeJudge` applies this to online RL's rollout groups: an episode the deciding verifier gave
no verdict on (the judge down, a reply it cannot parse) is *lost* (`where = "judge"`), dropped
from its group like an episode whose device failed; an episode with no valid step ran nothing on
the device and is a failure without a judge call.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from venus_core.data.images import decode_image, encode_png
from venus_core.data.schema import Provenance, Trajectory, TrajectoryStep, image_ref
from venus_core.rl.online.rollout import RolloutStats, answer_texts
from venus_core.rl.online.rollout import Trajectory as Rollout
from venus_core.scoring.judges import JudgeBackend, JudgeFailure

MODES = ("rules", "auto", "judge")
COUNTS = ("decided_by/rules", "decided_by/judge", "judged", "judge_failures", "no_verdict", "no_valid_step")


class ImageMemo:
    """PNG bytes of screenshots by image ref: the judge's `open_image` before (or instead of) a dataset."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}

    def put(self, image: Image.Image) -> str:
        data = encode_png(image)
        ref = image_ref(hashlib.sha256(data).hexdigest())
        self._data.setdefault(ref, data)
        return ref

    def png(self, ref: str) -> bytes:
        try:
            return self._data[ref]
        except KeyError:
            raise KeyError(f"image {ref} is not in this run's memo") from None

    def __call__(self, ref: str) -> Image.Image:
        return decode_image(self.png(ref))

    def clear(self) -> None:
        self._data.clear()


def rollout_steps(traj: Rollout, memo: ImageMemo) -> list[TrajectoryStep] | str:
    """The trajectory's valid steps as record steps (screenshots into `memo`), or why there are none.
    An invalid step ran nothing on the device and is not in the agent's history: it is left out."""
    steps = []
    for rec in traj.steps:
        if not rec.valid or rec.action is None:
            continue
        think, conclusion = answer_texts(rec.completion.text)
        steps.append(TrajectoryStep(image=memo.put(rec.image), image_size=rec.image.size, think=think,
                                    action=rec.action, conclusion=conclusion))
    return steps or f"no valid step among {len(traj.steps)} (nothing ran on the device)"


def claim_record(traj: Rollout, memo: ImageMemo, *, platform: str, source: str, record_id: str,
                 provenance: Provenance, meta: dict[str, Any] | None = None) -> Trajectory | str:
    """The rollout as a record claiming success (what a judge is asked to confirm), or why it cannot
    be one. The screen after the last step goes in `meta.final_image` when the rollout kept it."""
    steps = rollout_steps(traj, memo)
    if isinstance(steps, str):
        return steps
    extra = dict(meta or {})
    if traj.final_image is not None:
        extra["final_image"] = memo.put(traj.final_image)
    return Trajectory(id=f"{source}:{record_id}", episode_id=record_id, platform=platform,  # type: ignore[arg-type]
                      goal=traj.task.task.goal, steps=steps, success=True, provenance=provenance, meta=extra)


@dataclass(frozen=True)
class Verdict:
    rule: bool | None  # env-state rule (None: the env has none)
    judge: bool | None  # None: not judged, or the judge failed
    judge_score: int | None = None
    judge_error: str | None = None

    def decide(self, mode: str) -> tuple[bool | None, str, str]:
        """(success, verifier, reason when not a success); success None: no verdict from the verifier."""
        if mode not in MODES:
            raise ValueError(f"verifier {mode!r}: expected one of {', '.join(MODES)}")
        use_rule = mode == "rules" or (mode == "auto" and self.rule is not None)
        if use_rule:
            if self.rule is None:
                return None, "rules", "the env exposes no state to check"
            return self.rule, "rules", "" if self.rule else "the env's success check failed"
        if self.judge is None:
            return None, "judge", f"no judge verdict: {self.judge_error or 'no judge configured'}"
        return self.judge, "judge", "" if self.judge else f"judge score {self.judge_score} below the keep threshold"

    def to_dict(self) -> dict[str, Any]:
        return {"rule_success": self.rule, "judge_success": self.judge, "judge_score": self.judge_score}


def judge_records(judge: JudgeBackend, records: Sequence[Trajectory], keep_threshold: int
                  ) -> list[tuple[bool | None, int | None, str | None]]:
    """(verified?, score, error) per record from the judge; a failure gives (None, None, reason)."""
    out: list[tuple[bool | None, int | None, str | None]] = []
    for v in judge.judge_many(list(records)) if records else []:
        if isinstance(v, JudgeFailure):
            out.append((None, None, v.reason[:300]))
        else:
            out.append((v.score >= keep_threshold, v.score, None))
    return out


def agreement_of(pairs: Sequence[tuple[bool, bool]]) -> dict[str, Any] | None:
    """(rule, judge) verdict pairs as the 2 x 2 table, the agreement share and Cohen's kappa."""
    if not pairs:
        return None
    n = len(pairs)
    tt = sum(r and j for r, j in pairs)
    ff = sum(not r and not j for r, j in pairs)
    tf = sum(r and not j for r, j in pairs)  # the rule passes, the judge does not
    ft = n - tt - ff - tf
    observed = (tt + ff) / n
    p_rule, p_judge = (tt + tf) / n, (tt + ft) / n
    expected = p_rule * p_judge + (1 - p_rule) * (1 - p_judge)
    kappa = None if expected >= 1 else (observed - expected) / (1 - expected)
    return {"n": n, "both_pass": tt, "both_fail": ff, "rule_only": tf, "judge_only": ft,
            "agreement": round(observed, 4), "kappa": None if kappa is None else round(kappa, 4)}


def agreement(verdicts: Sequence[Verdict]) -> dict[str, Any] | None:
    """Rules vs judge where both gave a verdict (`agreement_of`)."""
    return agreement_of([(v.rule, v.judge) for v in verdicts if v.rule is not None and v.judge is not None])


class EpisodeJudge:
    """Decides online RL's episodes per `mode` (module docstring) with `judge` (None: rules only).

    `decide(groups, stats)` judges every ended episode of a rollout batch in one `judge_many` call
    (where the mode asks for the judge), sets each episode's `success`, `rule_success` and
    `judge_success`, and returns the groups without the episodes that got no verdict, which are
    counted in `stats` as lost where "judge". `report()` is the running account: episodes decided
    by each verifier, judge calls / failures, episodes without a valid step, and the agreement."""

    def __init__(self, mode: str, judge: JudgeBackend | None, memo: ImageMemo, *, keep_threshold: int,
                 platform: str) -> None:
        if mode not in MODES:
            raise ValueError(f"online_rl.success {mode!r}: expected one of {', '.join(MODES)}")
        if mode != "rules" and judge is None:
            raise ValueError(f"online_rl.success={mode} needs an MLLM judge (scoring.judge)")
        self.mode, self.judge, self.keep_threshold, self.platform = mode, judge, keep_threshold, platform
        self.memo = memo  # the judge backend's `open_image`
        self._lock = threading.Lock()  # decide() runs on the rollout worker's thread when decoupled
        self.counts: Counter[str] = Counter()
        self.pairs: list[tuple[bool, bool]] = []

    def decide(self, groups: list[list[Rollout]], stats: RolloutStats) -> list[list[Rollout]]:
        with self._lock:
            return self._decide(groups, stats)

    def _decide(self, groups: list[list[Rollout]], stats: RolloutStats) -> list[list[Rollout]]:
        trajs = [t for g in groups for t in g]
        for t in trajs:
            t.rule_success = t.success if t.has_rule else None
        want = [t for t in trajs if self.mode == "judge" or (self.mode == "auto" and not t.has_rule)]
        judged: dict[int, tuple[bool | None, int | None, str | None]] = {}
        if want and self.judge is not None:
            records: list[Trajectory] = []
            idx: list[int] = []
            for t in want:
                rec = self._record(t)
                if isinstance(rec, str):  # nothing ran: a failure, no judge call
                    judged[id(t)] = (False, None, None)
                    self.counts["no_valid_step"] += 1
                else:
                    records.append(rec)
                    idx.append(id(t))
            for key, got in zip(idx, judge_records(self.judge, records, self.keep_threshold), strict=True):
                judged[key] = got
                self.counts["judged"] += 1
                self.counts["judge_failures"] += got[0] is None
        kept: list[list[Rollout]] = []
        for g in groups:
            survivors = []
            for t in g:
                j = judged.get(id(t), (None, None, None if self.mode == "rules" else "not judged"))
                v = Verdict(rule=t.rule_success, judge=j[0], judge_score=j[1], judge_error=j[2])
                t.judge_success = v.judge
                if v.rule is not None and v.judge is not None:
                    self.pairs.append((v.rule, v.judge))
                ok, verifier, reason = v.decide(self.mode)
                if ok is None:
                    t.lost = f"judge: {reason}"
                    stats.losses["judge"] += 1
                    stats.lost.append((t.episode, t.lost))
                    self.counts["no_verdict"] += 1
                    continue
                t.success = ok
                self.counts[f"decided_by/{verifier}"] += 1
                survivors.append(t)
            kept.append(survivors)
        self.memo.clear()  # a batch's screenshots are not needed again (the cache keys on their hashes)
        return kept

    def _record(self, t: Rollout) -> Trajectory | str:
        key = f"{t.task.key}#{t.replica}"  # the hash of the whole record keys the cache, not the id
        prov = Provenance(source="online-rl", source_id=t.task.key, generator="venus-online-rl",
                          extra={"env": t.task.env, "success_check": t.task.task.success_check,
                                 "policy_version": t.policy_version})
        return claim_record(t, self.memo, platform=self.platform, source="online-rl", record_id=key, provenance=prov,
                            meta={"steps_taken": t.length, "invalid_steps": t.invalid, "truncated": t.truncated})

    def state_dict(self) -> dict[str, Any]:
        """The running account, for a checkpoint (the verdicts themselves are in the judge's cache)."""
        with self._lock:
            return {"mode": self.mode, "counts": dict(self.counts), "pairs": [[r, j] for r, j in self.pairs]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("mode") != self.mode:
            raise ValueError(f"checkpoint's online_rl.success is {state.get('mode')!r}, this run's is {self.mode!r}")
        with self._lock:
            self.counts = Counter({k: int(v) for k, v in state["counts"].items()})
            self.pairs = [(bool(r), bool(j)) for r, j in state["pairs"]]

    def report(self) -> dict[str, Any]:
        with self._lock:
            return self._report()

    def _report(self) -> dict[str, Any]:
        cost = None
        if self.judge is not None:
            st = self.judge.stats()
            cost = {"calls": st.calls, "prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens,
                    "cache_hits": st.cache_hits, "cache_misses": st.cache_misses}
        counts = {k: 0 for k in COUNTS} | dict(self.counts)
        return {"mode": self.mode, **dict(sorted(counts.items())), "agreement": agreement_of(self.pairs),
                "judge_cost": cost}

    def metrics(self) -> dict[str, float]:
        """The running account as MLflow metrics (`judge/...`)."""
        with self._lock:
            counts, pairs = dict(self.counts), list(self.pairs)
        m = {f"judge/{k.replace('decided_by/', 'decided_by_')}": float(v) for k, v in counts.items()}
        agree = agreement_of(pairs)
        if agree is not None:
            m["judge/agreement"] = float(agree["agreement"])
            if agree["kappa"] is not None:
                m["judge/kappa"] = float(agree["kappa"])
        return m


__all__ = ["MODES", "EpisodeJudge", "ImageMemo", "Verdict", "agreement", "agreement_of", "claim_record",
           "judge_records", "rollout_steps"]
