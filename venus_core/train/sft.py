"""Mid-training: supervised fine-tuning on the domain mixture (UI-Venus-1.5 stage 1).

What one optimizer step does: the MixtureSampler draws a global batch of
`batch_size * grad_accum * world` samples by the domain ratios; each rank takes its strided share
and runs it as `grad_accum` micro-batches (loss on the answer tokens only, `models.batches.collate`),
DDP averages gradients, the norm is clipped, AdamW (spec betas) steps and the cosine-with-floor
schedule advances. bf16 autocast on GPU, fp32 on CPU (`MidTrainSpec.precision`); with backend=deepspeed the
DeepSpeed engine (`ds_backend`) takes over accumulation, clipping, bf16 and sharded checkpoints. Every `eval_every`
steps rank 0 decodes the held-out set greedily and logs rates with intervals; every `save_every`
steps it writes an atomic, resumable checkpoint (weights, optimizer, scheduler, sampler and RNG).

Each micro-batch runs as row groups of similar length (`train.buckets`, `length_group_ratio`):
the same loss and gradient as the one padded batch, ~2x fewer CPU-s per mixture step on the tiny
default (navigation prompts are ~1,000 tokens, the other samples ~100).

Departures: the loss is the mean over the answer tokens of each micro-batch (divided by
`grad_accum`), not over the whole accumulated batch; samples longer than `max_seq_len` are skipped
and counted (cutting them would cut image tokens or the answer). The paper's optimiser settings at
8B are not published; the tiny defaults are measured (docs/learning_mid_train.md).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.nn.parallel import DistributedDataParallel
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.config.spec import MixtureSpec
from venus_core.config.training import MidTrainSpec
from venus_core.eval.metrics import Rate
from venus_core.models.batches import Example, collate, without_padding_mask
from venus_core.train.buckets import split_batch
from venus_core.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from venus_core.train.data import Corpus
from venus_core.train.distributed import DistEnv, disable_gradient_checkpointing, enable_gradient_checkpointing, precision_dtype
from venus_core.train.evaluate import evaluate_held_out, rates_to_metrics
from venus_core.train.mixture import MixtureSampler, split_for_rank
from venus_core.train.schedule import cosine_with_warmup
from venus_core.train.tracker import NullTracker, Tracker

LOG_EVERY = 10


class AuxTask(Protocol):
    """An auxiliary loss of a stage that brings its own data (e.g. `train.reading.ReadingTask`): once
    per optimizer step, `weight * loss(step)` is added to the step's gradient; `module` holds its
    own parameters (trained with the model's, saved in checkpoints as `<name>.safetensors`)."""

    name: str
    weight: float
    module: torch.nn.Module

    def loss(self, step: int) -> torch.Tensor: ...


@dataclass
class SFTResult:
    steps: int
    rates: dict[str, Rate]
    mixture: dict[str, Any]
    skipped_too_long: int
    wall_s: float
    cpu_s: float
    history: list[dict[str, Any]] = field(default_factory=list)
    deepspeed: Any = None  # the DeepSpeedRun when backend=deepspeed (for gathering ZeRO-3 weights)


def freeze_vision(model: torch.nn.Module) -> int:
    """Stop gradients to the vision tower; returns the number of frozen parameters."""
    n = 0
    for name, p in model.named_parameters():
        if ".visual." in f".{name}":
            p.requires_grad_(False)
            n += p.numel()
    if n == 0:
        raise ValueError("freeze_vision: the model has no parameters under a 'visual' module")
    return n


def _collate_skipping(examples: list[Example], processor: ProcessorMixin, max_len: int,
                      with_query: bool = False) -> tuple[dict[str, torch.Tensor] | None, int]:
    try:
        return collate(examples, processor, max_length=max_len, with_query=with_query), 0
    except ValueError as exc:
        if "max_length" not in str(exc):
            raise
    kept = []
    for ex in examples:
        try:
            collate([ex], processor, max_length=max_len)
            kept.append(ex)
        except ValueError as exc:
            if "max_length" not in str(exc):
                raise
    return (collate(kept, processor, max_length=max_len, with_query=with_query) if kept else None), len(examples) - len(kept)


def _to(batch: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device)) for k, v in batch.items()}


def train_sft(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    corpus: Corpus,
    mixture: MixtureSpec,
    cfg: MidTrainSpec,
    env: DistEnv,
    *,
    ckpt_dir: str | Path,
    tracker: Tracker | None = None,
    resume: bool = False,
    stop_at: int | None = None,
    eval_limit: int = 200,
    aux_tasks: Sequence[AuxTask] = (),
) -> SFTResult:
    """Train `model` in place for `cfg.max_steps` steps (or until `stop_at`, which simulates a kill).
    `aux_tasks`: auxiliary tasks, one loss each per optimizer step (single process only)."""
    tracker = tracker or NullTracker()
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    if aux_tasks and cfg.freeze_vision:
        raise ValueError(f"auxiliary tasks ({', '.join(a.name for a in aux_tasks)}) train the vision tower, which "
                         "mid_train.freeze_vision freezes: drop one of the two")
    torch.manual_seed(cfg.seed + env.rank)
    model.to(env.device)
    model.train()
    if cfg.freeze_vision:
        freeze_vision(model)
    if cfg.distributed.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    params = [p for p in model.parameters() if p.requires_grad]
    head = None
    if cfg.instruction_head.weight > 0:
        if env.backend == "deepspeed":
            raise ValueError("mid_train.instruction_head is not supported with distributed.backend=deepspeed "
                             "(the engine owns the forward pass); use ddp or set instruction_head.weight: 0")
        from venus_core.models.batches import query_text
        from venus_core.train.instruction_head import build_instruction_head

        head = build_instruction_head(model, processor, (query_text(it.record) for v in corpus.train.values() for it in v),
                                      cfg.instruction_head)
    if aux_tasks and (env.backend == "deepspeed" or env.world > 1):
        raise ValueError(f"auxiliary tasks ({', '.join(a.name for a in aux_tasks)}) run in a single process only: their "
                         "forward pass is outside the DDP / DeepSpeed engine, whose gradient sync they would miss")
    head_params = list(head.parameters()) if head is not None else []
    head_params += [p for a in aux_tasks for p in a.module.parameters()]
    extra_models = ({"instruction_head": head} if head is not None else {}) | {a.name: a.module for a in aux_tasks}
    sup = None
    if cfg.attention_supervision.weight > 0:
        if env.backend == "deepspeed":
            raise ValueError("mid_train.attention_supervision is not supported with distributed.backend=deepspeed "
                             "(the engine owns the forward pass); use ddp or set attention_supervision.weight: 0")
        from venus_core.train.attention_supervision import AttentionSupervision

        sup = AttentionSupervision(cfg.attention_supervision, processor.tokenizer,  # type: ignore[attr-defined]
                                   int(model.config.image_token_id), int(model.config.vision_config.spatial_merge_size))
    optimizer = torch.optim.AdamW(params + head_params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    scheduler = cosine_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)
    global_batch = cfg.batch_size * cfg.grad_accum * env.world
    sampler = MixtureSampler({d: len(v) for d, v in corpus.train.items()}, mixture, global_batch, cfg.seed)
    step, skipped = 0, 0
    ds = None
    if env.backend == "deepspeed":
        from venus_core.train.ds_backend import DeepSpeedRun

        ds = DeepSpeedRun(model, optimizer, scheduler, cfg, env)
        client = ds.load(ckpt_dir) if resume else None
        if client is not None:
            sampler.load_state_dict(client["sampler"])
            step, skipped = int(client["step"]), int(client.get("skipped_too_long", 0))
    elif resume:
        last = latest_checkpoint(ckpt_dir)
        if last is not None:
            state = load_checkpoint(last, model, optimizer, extra_models=extra_models or None)
            scheduler.load_state_dict(state["scheduler"])
            sampler.load_state_dict(state["sampler"])
            step, skipped = int(state["step"]), int(state.get("skipped_too_long", 0))
    net: torch.nn.Module = model
    if env.backend == "ddp":
        net = DistributedDataParallel(model, device_ids=[env.device.index] if env.device.type == "cuda" else None)
    dtype = precision_dtype(cfg, env.device)
    autocast = (lambda: torch.autocast(env.device.type, dtype=dtype)) if dtype != torch.float32 else contextlib.nullcontext
    if env.is_main:
        tracker.log_params({"mid_train." + k: v for k, v in cfg.model_dump(mode="json").items() if k != "distributed"}
                           | {"world_size": env.world, "backend": env.backend, "global_batch": global_batch,
                              "trainable_params": sum(p.numel() for p in params)})
    history: list[dict[str, Any]] = []
    rates: dict[str, Rate] = {}

    def run_eval(at: int) -> None:
        nonlocal rates
        everyone = ds is not None and ds.zero3  # partitioned weights: all ranks decode together
        if (env.is_main or everyone) and corpus.held_out:
            rates = evaluate_held_out(model, processor, corpus.held_out, limit=eval_limit)
        if env.is_main and corpus.held_out:
            metrics = rates_to_metrics(rates) | {"time/wall_s": time.perf_counter() - t_wall, "time/cpu_s": time.process_time() - t_cpu}
            tracker.log_metrics(metrics, at)
            history.append({"step": at, **{k: r.to_dict() for k, r in rates.items()}})
        env.barrier()

    vision_start = int(processor.tokenizer.convert_tokens_to_ids("<|vision_start|>"))  # type: ignore[attr-defined]
    window: list[float] = []
    head_window: list[float] = []
    sup_window: list[float] = []
    aux_window: dict[str, list[float]] = {a.name: [] for a in aux_tasks}
    while step < cfg.max_steps and (stop_at is None or step < stop_at):
        share = split_for_rank(sampler.next_batch(), env.rank, env.world)
        micro = [share[i : i + cfg.batch_size] for i in range(0, len(share), cfg.batch_size)]
        if ds is None:
            optimizer.zero_grad(set_to_none=True)
        losses: list[float] = []
        for j, part in enumerate(micro):
            batch, dropped = _collate_skipping([corpus.train[d][i].example() for d, i in part], processor, cfg.max_seq_len,
                                               with_query=head is not None)
            skipped += dropped
            if ds is not None:
                if batch is None:  # the engine counts micro-steps: a skipped one would shift its boundaries
                    raise ValueError(f"step {step + 1}: every sample of a micro-batch exceeds max_seq_len {cfg.max_seq_len}")
                losses.append(ds.micro_step(batch))
                continue
            if batch is None:
                continue
            pieces = split_batch(batch, vision_start, cfg.length_group_ratio) if cfg.length_group_ratio > 0 else [(batch, 1.0)]
            micro_loss = 0.0
            for k, (sub, weight) in enumerate(pieces):
                sync = (j == len(micro) - 1 and k == len(pieces) - 1) or env.backend != "ddp"
                query_ids = sub.pop("query_ids", None)
                sub = without_padding_mask(sub)  # right-padded rows: the causal kernel needs no mask (1.3x)
                with contextlib.nullcontext() if sync else net.no_sync():  # type: ignore[operator]
                    inputs = _to(sub, env.device, torch.float32)
                    targets = (sup.targets(inputs["input_ids"], inputs["labels"], inputs.get("image_grid_thw"))
                               if sup is not None else [])
                    # the backward pass stays inside the recording: under gradient checkpointing the supervised
                    # layer recomputes its forward there, and must record the same rows again
                    with sup.recording(model, targets) if sup is not None else contextlib.nullcontext() as rec:
                        with autocast():
                            out = net(**inputs, output_hidden_states=head is not None)
                            loss = out.loss
                            if head is not None:
                                aux = head.loss(out.hidden_states, inputs["labels"], query_ids)  # type: ignore[arg-type]
                                if aux is not None:
                                    head_window.append(float(aux.detach()))
                                    loss = loss + cfg.instruction_head.weight * aux
                            if sup is not None:
                                att = sup.recorded_loss(rec)  # type: ignore[arg-type]
                                if att is not None:
                                    sup_window.append(float(att.detach()))
                                    loss = loss + cfg.attention_supervision.weight * att
                            loss = loss * (weight / len(micro))
                        loss.backward()
                micro_loss += float(loss.detach()) * len(micro)
            losses.append(micro_loss)
        for a in aux_tasks:
            with autocast():
                extra = a.loss(step + 1)
            (a.weight * extra).backward()
            aux_window[a.name].append(float(extra.detach()))
        if ds is not None:  # the engine clipped, stepped the optimizer and the schedule
            grad_norm, lr = ds.grad_norm(), scheduler.get_last_lr()[0]
        else:
            if head_params and env.world > 1:  # the head is outside DDP: average its gradients by hand
                for p in head_params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= env.world
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
            if head_params:
                torch.nn.utils.clip_grad_norm_(head_params, cfg.max_grad_norm)
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
        step += 1
        loss_value = sum(losses) / max(1, len(losses))
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"mid-training step {step}: loss is {loss_value}")
        window.append(loss_value)
        if env.is_main and (step % LOG_EVERY == 0 or step == cfg.max_steps):
            tracker.log_metrics({"train/loss": sum(window) / len(window), "train/lr": lr, "train/grad_norm": grad_norm,
                                 "train/skipped_too_long": skipped, "time/wall_s": time.perf_counter() - t_wall,
                                 "time/cpu_s": time.process_time() - t_cpu}
                                | ({"train/instruction_head_loss": sum(head_window) / len(head_window)} if head_window else {})
                                | ({"train/attention_supervision_loss": sum(sup_window) / len(sup_window)} if sup_window else {})
                                | {f"train/{n}_loss": sum(w) / len(w) for n, w in aux_window.items() if w},
                                step)
            window = []
        if step % LOG_EVERY == 0 or step == cfg.max_steps:
            head_window, sup_window = [], []
            aux_window = {n: [] for n in aux_window}
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            run_eval(step)
        if (step % cfg.save_every == 0 or step == cfg.max_steps) and ds is not None:
            ds.save(ckpt_dir, step, {"sampler": sampler.state_dict(), "skipped_too_long": skipped})
        elif step % cfg.save_every == 0 or step == cfg.max_steps:
            if env.is_main:
                save_checkpoint(ckpt_dir, step, model, optimizer, {
                    "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(), "skipped_too_long": skipped,
                }, extra_models=extra_models or None)
            env.barrier()
    if step >= cfg.max_steps and not rates:  # resumed a finished run: still report its rates
        run_eval(step)
    if cfg.distributed.gradient_checkpointing:
        disable_gradient_checkpointing(model)
    return SFTResult(step, rates, sampler.report(), skipped, time.perf_counter() - t_wall, time.process_time() - t_cpu,
                     history, ds)


__all__ = ["SFTResult", "freeze_vision", "train_sft"]
