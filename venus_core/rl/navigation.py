"""The navigation GRPO job's epoch logic: history alignment and sparse action enhancement
(`venus_core.rl.history`) wired into `OfflineGRPO.train` as its item source and hooks.

Per epoch: the prompts are the (aligned) training steps plus the sparse-action variants (with
`history_alignment.epoch_size` N > 0: the next N steps of one seeded shuffle and their variants, so
that a run shorter than a pass over its data still aligns; the R rollouts then go to those N). During
the epoch, the GRPO rollouts whose action matches the ground truth feed the thought pool (free:
they are sampled anyway). After the epoch, R more rollouts per training step are sampled
(UI-Venus-1.0's "sample R rollouts per step"), pooled, and then every step's history is aligned
and the variants are rebuilt from the pool. Departure: the paper samples only the R post-epoch
rollouts; pooling the training rollouts as well costs nothing and fills the pool sooner.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from venus_core.config.spec import OfflineRLDomainSpec
from venus_core.data.schema import NavigationStep
from venus_core.models.batches import OpenImage
from venus_core.rewards.base import RewardResult, score_batch
from venus_core.rl.distributed import gather
from venus_core.rl.grpo import OfflineGRPO, PromptItem
from venus_core.rl.history import PooledThought, ThoughtPool, action_mix, add_rollouts, align_history, sparse_variants
from venus_core.rl.prompts import navigation_item
from venus_core.rl.rollout import sample_groups
from venus_core.train.mixture import split_for_rank
from venus_core.train.tracker import Tracker


class NavigationEpochs:
    """Item source + hooks for `OfflineGRPO.train` on navigation steps."""

    def __init__(self, steps: Sequence[NavigationStep], open_image: OpenImage, spec: OfflineRLDomainSpec,
                 tracker: Tracker) -> None:
        if not steps:
            raise ValueError("navigation GRPO: no training steps")
        self.base = list(steps)
        self._epoch_order: list[str] | None = None
        self.current = list(steps)
        self.by_id: dict[str, NavigationStep] = {s.id: s for s in steps}
        self.open_image = open_image
        self.spec = spec
        self.tracker = tracker
        self.pool = ThoughtPool()
        self.rng = random.Random(spec.seed)
        self.variants: list[NavigationStep] = []
        self.mix_before = action_mix(self.base)
        self.stats: dict[str, Any] = {"epochs": []}
        self._rebuild_variants()
        self.stats["action_mix_before"] = self.mix_before
        self.stats["action_mix_after"] = action_mix(self.current + self.variants)

    def _rebuild_variants(self) -> None:
        sa = self.spec.sparse_actions
        if sa is None or not sa.enabled:
            self.variants = []
            return
        self.variants, self.distinct = sparse_variants(self.current, self.pool, sa.actions, sa.variants, self.rng)
        for v in self.variants:
            self.by_id[v.id] = v

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (aligned steps, variants, thought pool, RNG, stats) for exact resume."""
        return {
            "current": [s.model_dump(mode="json") for s in self.current],
            "variants": [s.model_dump(mode="json") for s in self.variants],
            "distinct": getattr(self, "distinct", 0),
            "pool": [[ep, idx, [[t.think, t.reward] for t in bucket]] for (ep, idx), bucket in self.pool.entries.items()],
            "rng": [self.rng.getstate()[0], list(self.rng.getstate()[1]), self.rng.getstate()[2]],
            "stats": self.stats,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current = [NavigationStep.model_validate(s) for s in state["current"]]
        self.variants = [NavigationStep.model_validate(s) for s in state["variants"]]
        self.distinct = int(state["distinct"])
        self.pool = ThoughtPool(max_per_step=self.pool.max_per_step)
        for ep, idx, bucket in state["pool"]:
            self.pool.entries[(ep, int(idx))] = [PooledThought(think, float(r)) for think, r in bucket]
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.stats = state["stats"]
        self.by_id.update({s.id: s for s in self.current + self.variants})

    def epoch_ids(self, epoch: int) -> set[str] | None:
        """The ids of the training steps of `epoch` when epochs are slices (`epoch_size`); None = all."""
        ha = self.spec.history_alignment
        n = ha.epoch_size if ha is not None else 0
        if not n or n >= len(self.base):
            return None
        if self._epoch_order is None:  # one seeded shuffle of the training steps, sliced epoch by epoch
            self._epoch_order = [s.id for s in self.base]
            random.Random(self.spec.seed * 7919 + 17).shuffle(self._epoch_order)
        order = self._epoch_order
        start = (epoch * n) % len(order)
        return set((order + order)[start : start + n])

    def items_for_epoch(self, epoch: int) -> list[PromptItem]:
        ids = self.epoch_ids(epoch)
        steps = [s for s in self.current + self.variants if ids is None or s.id.split("#v")[0] in ids]
        return [navigation_item(s, self.open_image) for s in steps]

    def hook(self, step: int, items: Sequence[PromptItem], texts: list[str], results: list[RewardResult]) -> None:
        """Pool the matching thoughts of this GRPO step's rollouts (the whole global batch: every
        rank of a distributed run pools the same thoughts and keeps the same state)."""
        if self.spec.history_alignment is None or not self.spec.history_alignment.enabled:
            return
        g = self.spec.group_size
        for i, it in enumerate(items):
            s = self.by_id[it.record_id]
            add_rollouts(self.pool, s, texts[i * g : (i + 1) * g], [r.total for r in results[i * g : (i + 1) * g]])

    def after_epoch(self, trainer: OfflineGRPO, epoch: int) -> None:
        """Sample R rollouts per step, pool the matching thoughts, align histories, rebuild variants."""
        ha = self.spec.history_alignment
        matched = 0
        replaced = 0
        ids = self.epoch_ids(epoch)
        if ha is not None and ha.enabled:
            matched = self._pool_rollouts(trainer, ha.rollouts, epoch, ids)
            aligned = []
            for s in self.base:
                new, k = align_history(s, self.pool, ha.selection, self.rng)
                aligned.append(new)
                replaced += k
            self.current = aligned
            self.by_id.update({s.id: s for s in aligned})
        self._rebuild_variants()
        mix = action_mix(self.current + self.variants)
        record = {"epoch": epoch, "epoch_steps": len(self.base) if ids is None else len(ids),
                  "pool_thoughts": len(self.pool), "rollouts_matched": matched,
                  "history_thoughts_replaced": replaced, "sparse_variants": len(self.variants),
                  "sparse_variants_distinct": getattr(self, "distinct", 0), "action_mix": mix}
        self.stats["epochs"].append(record)
        self.stats["action_mix_after"] = mix
        self.tracker.log_metrics({k: float(v) for k, v in record.items() if k != "action_mix"}, epoch)

    def _pool_rollouts(self, trainer: OfflineGRPO, r: int, epoch: int, ids: set[str] | None = None) -> int:
        """R rollouts per training step of the epoch (`ids`; None = all), pooled. Each sampling call
        holds as many sequences as a GRPO step's rollouts (prompts_per_step x G, so R x steps per call
        and the same memory bound, not one whole decode per prompts_per_step prompts). The chunks of
        steps are shared out over the ranks of a distributed run (strided) and their texts gathered,
        so every rank pools them all, in order; a step's sampling seed depends on its index, not on
        the chunking."""
        spec = self.spec
        chunk = max(1, spec.prompts_per_step * spec.group_size // max(1, r))
        base = [s for s in self.base if ids is None or s.id in ids]
        starts = list(range(0, len(base), chunk))
        env = trainer.env
        mine = split_for_rank(starts, env.rank, env.world)
        done: list[tuple[int, list[list[str]], list[list[float]]]] = []
        # every rank runs as many sampling passes (FSDP2's unsharded weights need no collectives
        # inside, but the ranks must enter and leave `rollout_weights` together)
        with trainer.rollout_weights():
            for k in mine:
                steps = base[k : k + chunk]
                prompts = [navigation_item(s, self.open_image).messages for s in steps]
                batch = sample_groups(trainer.model, trainer.processor, prompts, r, spec.max_new_tokens,  # type: ignore[arg-type]
                                      temperature=spec.temperature, top_p=spec.top_p,
                                      group_seeds=[(spec.seed * 7919 + epoch) * 1_000_003 + k + i
                                                   for i in range(len(steps))])
                refs = [{"action": s.action, "target_box": list(s.target_box) if s.target_box else None}
                        for s in steps for _ in range(r)]
                results = score_batch(trainer.reward_fn, batch.texts, refs, spec.rewards, 1.0)
                done.append((k, [batch.texts[i * r : (i + 1) * r] for i in range(len(steps))],
                             [[x.total for x in results[i * r : (i + 1) * r]] for i in range(len(steps))]))
        matched = 0
        for k, texts, totals in sorted((d for part in gather(env, done) for d in part), key=lambda d: d[0]):
            for i, s in enumerate(base[k : k + chunk]):
                matched += add_rollouts(self.pool, s, texts[i], totals[i])
        return matched


__all__ = ["NavigationEpochs"]
