"""Offline GRPO trainer (UI-Venus-1.0 / 1.5 offline RL): sample G answers per prompt, score them with
the domain's registered reward, normalise rewards within each group, take clipped-ratio steps with
a k3 KL penalty toward a frozen reference.

Why this shape: the trainer only knows prompts (chat messages) and reward references; the
domain-specific parts (which reward, which records, history alignment for navigation) come from
the spec and from `venus_core.rl.navigation`. Metrics go through the `Tracker` passed in.

Departures from the papers, all deliberate:
- Groups whose G rewards are all equal are skipped (not forwarded, not trained on) and counted
  (`groups/zero_variance`); the papers do not say what they do with them.
- One optimizer update per rollout batch by default (`minibatches=1`, ratio = 1 on the first
  pass, as TRL's default); `minibatches > 1` splits the batch by groups into sequential updates
  so later minibatches see a moved policy and the clip is active.
- AdamW with betas (0.9, 0.98) and gradient clipping at 1.0, constant learning rate.
- LoRA: the reference is the same network with the adapters switched off (no second copy);
  the saved checkpoint has the adapters merged (a plain HF checkpoint). Under FSDP2 the sharded
  weights are not merged in place: `export` merges the whole weights gathered on rank 0.
- Each group is sampled from its own seed (`group_seed`), so its rollouts do not depend on the
  other prompts of the batch, nor on the world size of a distributed run.

Distributed (`venus_core.rl.distributed`, `offline_rl.distributed`): each rank takes its strided
share of a step's groups; the loss is divided by the global batch's token count and DDP or FSDP2
averages the gradients, so the weights are the one-process weights (tests/rl/test_rl_distributed.py).
"""

from __future__ import annotations

import contextlib
import copy
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.config.registry import REWARDS
from venus_core.config.spec import LoraSpec, OfflineRLDomainSpec
from venus_core.models.loading import vision_tower
from venus_core.models.placement import model_device, reference_device
from venus_core.rewards.base import RewardResult, score_batch
from venus_core.rl.distributed import (all_sum, fsdp2_shard, full_state_dict, full_weights, gather, local_value,
                                      single_env, wrap_policy)
from venus_core.rl.losses import grpo_loss, group_advantages
from venus_core.rl.rollout import RolloutBatch, sample_groups, sequence_logprobs
from venus_core.train.distributed import DistEnv, enable_gradient_checkpointing
from venus_core.train.mixture import split_for_rank
from venus_core.train.tracker import Tracker


@dataclass(frozen=True)
class PromptItem:
    """One RL prompt: the chat the policy answers and what its reward compares against."""

    messages: list[dict[str, Any]]
    reference: Mapping[str, Any]
    record_id: str


StepHook = Callable[[int, Sequence[PromptItem], list[str], list[RewardResult]], None]
"""hook(step, items, texts, results): every group of the step's global batch, G texts and results
per item in item order (gathered from all ranks in a distributed run)."""


def freeze_vision(model: torch.nn.Module) -> int:
    """Stop gradients into the vision tower; returns the number of frozen parameters."""
    n = 0
    for p in vision_tower(model).parameters():
        p.requires_grad_(False)
        n += p.numel()
    return n


def apply_lora(model: PreTrainedModel, spec: LoraSpec) -> torch.nn.Module:
    """Wrap `model` with peft LoRA adapters on `spec.target_modules` (only adapters train)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:  # optional dependency
        raise ImportError("offline_rl lora.enabled needs peft: pip install peft") from exc
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                     target_modules=list(spec.target_modules), bias="none")
    return get_peft_model(model, cfg)


def merge_lora_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`weights`, the whole state dict of the peft LoRA `model` (names `base_model.model.<name>`,
    `<layer>.base_layer.weight`, `<layer>.lora_A.<adapter>.weight`), with the active adapters merged
    and under the plain model's names: what `merge_and_unload().state_dict()` holds, computed as
    peft's unsafe merge computes it (W += scaling · B A, B A in float32 for low-precision adapters).
    For the whole weights gathered from FSDP2 shards, which cannot be merged in place."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora import Linear as LoraLinear

    out = dict(weights)
    for name, layer in model.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        if not isinstance(layer, LoraLinear) or layer.lora_variant or any(layer.lora_bias.values()):
            raise ValueError(f"{name}: only plain LoRA on Linear layers is merged from gathered weights")
        key = f"{name}.base_layer.weight"
        merged = out[key].clone()
        for adapter in layer.active_adapters:
            a, b = out.pop(f"{name}.lora_A.{adapter}.weight"), out.pop(f"{name}.lora_B.{adapter}.weight")
            low = b.dtype in (torch.float16, torch.bfloat16)
            delta = b.float() @ a.float() if low else b @ a
            delta = (delta.T if layer.fan_in_fan_out else delta) * layer.scaling[adapter]
            merged += delta.to(b.dtype)  # as peft: the delta in the adapters' dtype, added in place
        out[key] = merged
    left = [k for k in out if ".lora_" in k]
    if left:
        raise ValueError(f"adapter weights of inactive adapters cannot be merged: {left[:3]}")
    return {k.removeprefix("base_model.model.").replace(".base_layer.", "."): v for k, v in out.items()}


class OfflineGRPO:
    """GRPO on a fixed prompt set. `step()` is one rollout + update; `train()` loops over epochs."""

    def __init__(
        self,
        model: PreTrainedModel,
        processor: ProcessorMixin,
        spec: OfflineRLDomainSpec,
        tracker: Tracker,
        *,
        max_steps: int | None = None,
        minibatches: int = 1,
        env: DistEnv | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        if minibatches < 1:
            raise ValueError(f"minibatches must be >= 1, got {minibatches}")
        self.spec = spec
        self.processor = processor
        self.tracker = tracker
        self.max_steps = max_steps or spec.max_steps
        self.minibatches = minibatches
        self.reward_fn = REWARDS.get(spec.reward)
        self.env = env if env is not None else single_env(model_device(model))
        torch.manual_seed(spec.seed)
        self.lora = spec.lora.enabled
        self.model: torch.nn.Module = apply_lora(model, spec.lora) if self.lora else model
        # outside its update passes the policy is in eval mode (`_update` ends with eval()); peft
        # builds its wrapper and dropout modules in train mode, which made a LoRA run's first step
        # (and a resumed run's first step) sample and take old log-probs with dropout on
        self.model.eval()
        self.frozen_vision = freeze_vision(self.model) if spec.freeze_vision else 0
        self.ref: torch.nn.Module | None = None
        if spec.kl_coef > 0 and not self.lora:
            # The frozen copy goes with the policy, or on the next GPU of a multi-GPU node in one
            # process (`placement.reference_device`: an 8B policy with AdamW fills an 80 GB GPU).
            # Its log-probs are moved to the policy's device in `grpo_loss`. The optimizer state
            # is created on the policy's device (AdamW allocates it next to each parameter).
            self.ref = copy.deepcopy(model).eval()
            self.ref.to(reference_device(model_device(model)) if self.env.world == 1 else self.env.device)
            for p in self.ref.parameters():
                p.requires_grad_(False)
            if self.env.backend == "fsdp2":
                fsdp2_shard(self.ref, self.env)
        self._merged: PreTrainedModel | None = None  # trained_model() with LoRA merged
        self.gradient_checkpointing = gradient_checkpointing
        if gradient_checkpointing:
            enable_gradient_checkpointing(self.model)
        self.net = wrap_policy(self.model, self.env)  # what the training passes call (DDP / FSDP2)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("nothing to train: every parameter is frozen")
        self.trainable = sum(p.numel() for p in params)
        self.optimizer = torch.optim.AdamW(params, lr=spec.lr, betas=(0.9, 0.98), weight_decay=0.0)
        self.params = params

    def rollout_weights(self) -> contextlib.AbstractContextManager[None]:
        """Context in which the policy generates: whole weights under FSDP2 (every rank enters it)."""
        return full_weights(self.model, self.env)

    def group_seed(self, step: int, group: int) -> int:
        """Sampling seed of global group `group` at `step`: the same on whichever rank samples it."""
        return (self.spec.seed * 1_000_003 + step) * 100_003 + group

    # ------------------------------------------------------------------ one step
    def _ref_logprobs(self, batch: RolloutBatch) -> torch.Tensor | None:
        if self.spec.kl_coef <= 0:
            return None
        with torch.no_grad():
            if self.lora:
                with self.model.disable_adapter():  # type: ignore[attr-defined]
                    return sequence_logprobs(self.model, batch, temperature=self.spec.temperature)[0]
            assert self.ref is not None
            return sequence_logprobs(self.ref, batch, temperature=self.spec.temperature)[0]

    def step(self, items: Sequence[PromptItem], step: int, hook: StepHook | None = None) -> dict[str, float]:
        """Roll out, score, update once (or `minibatches` times); log and return the metrics.

        `items` is the global batch; this rank samples and trains on its strided share of the
        groups (`rl.distributed`), and the metrics (and `hook`) cover the whole batch."""
        spec, env = self.spec, self.env
        g = spec.group_size
        if len(items) < env.world:
            raise ValueError(f"{len(items)} prompts for {env.world} ranks: every rank needs a group "
                             "(prompts_per_step >= the world size)")
        progress = min(1.0, step / max(1, self.max_steps))
        t0 = time.perf_counter()
        mine = split_for_rank(list(range(len(items))), env.rank, env.world)
        local = [items[i] for i in mine]
        with self.rollout_weights():
            batch = sample_groups(self.model, self.processor, [it.messages for it in local], g, spec.max_new_tokens,
                                  temperature=spec.temperature, top_p=spec.top_p,
                                  group_seeds=[self.group_seed(step, i) for i in mine])
        t_gen = time.perf_counter() - t0
        refs = [it.reference for it in local for _ in range(g)]
        results = score_batch(self.reward_fn, batch.texts, refs, spec.rewards, progress)
        lengths = batch.completion_mask.sum(dim=1)
        ended = batch.completion_mask[:, -1] == 0
        truncated = (lengths == batch.completion_ids.shape[1]) & ~ended
        everyone = gather(env, (mine, batch.texts, results, lengths.tolist(), truncated.tolist()))
        by_group: dict[int, tuple[list[str], list[RewardResult], list[float], list[bool]]] = {}
        for groups, texts, res, lens, trunc in everyone:
            for j, gi in enumerate(groups):
                rows = slice(j * g, (j + 1) * g)
                by_group[gi] = (texts[rows], res[rows], lens[rows], trunc[rows])
        order = [by_group[i] for i in range(len(items))]
        all_texts = [t for o in order for t in o[0]]
        all_results = [r for o in order for r in o[1]]
        all_lengths = torch.tensor([x for o in order for x in o[2]], dtype=torch.float32)
        all_truncated = torch.tensor([x for o in order for x in o[3]], dtype=torch.bool)
        if hook is not None:
            hook(step, items, all_texts, all_results)
        rewards = torch.tensor([r.total for r in all_results], dtype=torch.float32).view(len(items), g)
        adv, zero = group_advantages(rewards, spec.adv_eps)
        metrics = self._rollout_metrics(all_results, rewards, adv, zero, all_lengths, all_truncated)
        keep_groups = [i for i in range(len(items)) if not bool(zero[i])]
        t1 = time.perf_counter()
        t_lp = t_bw = 0.0
        if keep_groups:
            local_adv = adv[mine].reshape(-1)
            t_lp, t_bw, update = self._update(batch, local_adv, keep_groups, mine, all_lengths.view(len(items), g))
            metrics.update(update)
        else:
            metrics.update({"loss": 0.0, "policy_loss": 0.0, "kl": float("nan"), "entropy": float("nan"),
                            "clip_fraction": 0.0, "grad_norm": 0.0, "updated": 0.0})
        metrics.update({
            "lr": self.optimizer.param_groups[0]["lr"], "progress": progress,
            "time/generate_s": t_gen, "time/logprob_s": t_lp, "time/backward_s": t_bw,
            "time/step_s": time.perf_counter() - t0, "time/update_s": time.perf_counter() - t1,
        })
        self.tracker.log_metrics(metrics, step)
        return metrics

    def _update(self, batch: RolloutBatch, adv: torch.Tensor, groups: list[int], mine: list[int],
                lengths: torch.Tensor) -> tuple[float, float, dict[str, float]]:
        """One optimizer step per minibatch of the global kept `groups`; this rank computes the
        part of each that it holds (`mine`: the global index of each local group; `lengths`:
        [groups, G] completion lengths of the whole batch, for the global token counts)."""
        spec, env = self.spec, self.env
        g = spec.group_size
        chunks = [groups[i :: self.minibatches] for i in range(self.minibatches)]
        chunks = [sorted(c) for c in chunks if c]
        where = {gi: j for j, gi in enumerate(mine)}
        parts = [[where[gi] for gi in c if gi in where] for c in chunks]
        # a rank holding none of a minibatch still runs it (on its first group, weight 0): the
        # gradient averaging is a collective every rank must join
        local = [p or [0] for p in parts]
        tokens = [float(lengths[c].sum()) for c in chunks]
        t_lp = t_bw = 0.0
        sub_batches = [batch.select([j * g + k for j in c for k in range(g)]) for c in local]
        t = time.perf_counter()
        ref_lps = [self._ref_logprobs(b) for b in sub_batches]
        old_lps: list[torch.Tensor | None] = [None] * len(sub_batches)
        if self.minibatches > 1:  # later minibatches need the pre-update policy's log-probs
            with torch.no_grad():
                old_lps = [sequence_logprobs(self.model, b, temperature=spec.temperature)[0] for b in sub_batches]
        t_lp += time.perf_counter() - t
        totals: dict[str, float] = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "entropy": 0.0,
                                    "clip_fraction": 0.0, "grad_norm": 0.0}
        self.model.train()
        for c, part, rows_of, sub, ref_lp, old_lp, n_tok in zip(chunks, parts, local, sub_batches, ref_lps, old_lps,
                                                                 tokens, strict=True):
            t = time.perf_counter()
            logp, ent = sequence_logprobs(self.model, sub, temperature=spec.temperature, with_entropy=True,
                                          shared_prefix=not self.gradient_checkpointing, forward=self.net)
            rows = torch.as_tensor([j * g + k for j in rows_of for k in range(g)])  # adv and rows stay on the CPU
            out = grpo_loss(logp, logp.detach() if old_lp is None else old_lp, ref_lp, adv[rows], sub.completion_mask,
                            clip_eps=spec.clip_eps, kl_coef=spec.kl_coef, entropy=ent, entropy_coef=spec.entropy_coef,
                            tokens=n_tok)
            weight = float(env.world) if part else 0.0  # the wrappers average over ranks: the shares add up
            self.optimizer.zero_grad(set_to_none=True)
            (out.loss * weight).backward()
            gn = local_value(torch.nn.utils.clip_grad_norm_(self.params, 1.0))
            self.optimizer.step()
            t_bw += time.perf_counter() - t
            shares = [float(out.loss.detach()), out.policy, out.kl, out.entropy, out.clip_fraction]
            shares = all_sum(env, [v if part else 0.0 for v in shares])
            w = len(c) / len(groups)
            for k, v in zip(("loss", "policy_loss", "kl", "entropy", "clip_fraction"), shares, strict=True):
                totals[k] += w * v
            totals["grad_norm"] += w * gn
        self.model.eval()
        if spec.kl_coef <= 0:
            totals["kl"] = float("nan")
        totals["updated"] = 1.0
        return t_lp, t_bw, totals

    @staticmethod
    def _rollout_metrics(results: list[RewardResult], rewards: torch.Tensor, adv: torch.Tensor, zero: torch.Tensor,
                         lengths: torch.Tensor, truncated: torch.Tensor) -> dict[str, float]:
        m: dict[str, float] = {}
        flat = rewards.view(-1)
        m["reward/mean"] = float(flat.mean())
        m["reward/std"] = float(flat.std(unbiased=False))
        for term in sorted({k for r in results for k in r.terms}):
            vals = torch.tensor([r.terms.get(term, 0.0) for r in results])
            m[f"reward/{term}/mean"] = float(vals.mean())
            m[f"reward/{term}/std"] = float(vals.std(unbiased=False))
        kept = adv[~zero]
        m["advantage/mean"] = float(kept.mean()) if kept.numel() else 0.0
        m["advantage/std"] = float(kept.std(unbiased=False)) if kept.numel() else 0.0
        m["advantage/abs_max"] = float(kept.abs().max()) if kept.numel() else 0.0
        m["completion_len/mean"] = float(lengths.mean())
        m["completion_len/max"] = float(lengths.max())
        m["completion/truncated_frac"] = float(truncated.float().mean())
        m["parse_fail_rate"] = sum(1 for r in results if not r.parsed) / len(results)
        m["groups/total"] = float(zero.numel())
        m["groups/zero_variance"] = float(zero.sum())
        m["groups/zero_variance_frac"] = float(zero.float().mean())
        m["samples"] = float(flat.numel())
        return m

    # ------------------------------------------------------------------ loop
    def train(
        self,
        items_for_epoch: Callable[[int], Sequence[PromptItem]],
        *,
        steps: int | None = None,
        hook: StepHook | None = None,
        after_epoch: Callable[[int], None] | None = None,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        resume: Mapping[str, Any] | None = None,
    ) -> list[dict[str, float]]:
        """Run `steps` (default: max_steps) GRPO steps; each epoch is a seeded shuffle of
        `items_for_epoch(epoch)` cut into `prompts_per_step` chunks (a short last chunk is dropped
        unless it is the only one). `after_epoch(epoch)` runs when an epoch's prompts are used up.

        Exact resume: `on_step(loop)` gets, after every step, the loop position (JSON-able: steps
        done, epoch, chunks done in it, the shuffle RNG as it was when the epoch started); a
        checkpoint stores it with the weights and optimizer, and `resume=loop` continues from
        there (rollout seeds are per step, so the continuation is the uninterrupted run's)."""
        total = steps if steps is not None else self.max_steps
        rng = random.Random(self.spec.seed)
        history: list[dict[str, float]] = []
        step, epoch, first_chunk = 0, 0, 0
        if resume is not None:
            step, epoch, first_chunk = int(resume["step"]), int(resume["epoch"]), int(resume["chunk"])
            version, state, gauss = resume["rng"]
            rng.setstate((version, tuple(state), gauss))
        p = self.spec.prompts_per_step
        while step < total:
            epoch_rng = rng.getstate()
            items = list(items_for_epoch(epoch))
            if not items:
                raise ValueError(f"epoch {epoch}: no prompts to train on")
            rng.shuffle(items)
            n_chunks = max(1, len(items) // p)
            for k in range(first_chunk, n_chunks):
                if step >= total:
                    break
                history.append(self.step(items[k * p : (k + 1) * p], step, hook))
                step += 1
                if on_step is not None:
                    on_step({"step": step, "epoch": epoch, "chunk": k + 1,
                             "rng": [epoch_rng[0], list(epoch_rng[1]), epoch_rng[2]]})
            first_chunk = 0
            if after_epoch is not None and step < total:
                after_epoch(epoch)
            epoch += 1
        return history

    def trained_model(self) -> PreTrainedModel:
        """The policy as a plain HF model, LoRA adapters merged in (once: later calls return the same
        model). Under FSDP2 the policy stays sharded (`rollout_weights` gathers it to decode) and
        with LoRA stays the peft model, whose outputs are the merged model's: `export` merges."""
        if self.lora and self.env.backend != "fsdp2":
            if self._merged is None:
                self._merged = self.model.merge_and_unload()  # type: ignore[attr-defined]
            return self._merged
        return self.model  # type: ignore[return-value]

    def export(self) -> tuple[PreTrainedModel, dict[str, torch.Tensor] | None]:
        """(the model whose `save_pretrained` writes the trained checkpoint, the weights to write:
        None for the model's own). Under FSDP2 every rank must call it: the whole weights are
        gathered on rank 0 (None on the others), LoRA merged into them (`merge_lora_weights`)."""
        model = self.trained_model()
        weights = full_state_dict(self.model, self.env)
        if self.lora and self.env.backend == "fsdp2":
            base = self.model.get_base_model()  # type: ignore[operator]
            return base, None if weights is None else merge_lora_weights(self.model, weights)
        return model, weights

    def summary(self) -> dict[str, Any]:
        return {"trainable_params": self.trainable, "frozen_vision_params": self.frozen_vision,
                "lora": self.lora, "minibatches": self.minibatches,
                "reference": "adapters disabled" if self.lora else ("frozen copy" if self.ref is not None else "none")}


__all__ = ["OfflineGRPO", "PromptItem", "StepHook", "apply_lora", "freeze_vision", "merge_lora_weights",
           "vision_tower"]
