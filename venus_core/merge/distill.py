"""Multi-teacher on-policy distillation: the `distill` merge method (`merge.method: distill`).

UI-Venus-2 replaced checkpoint merging with distillation from the specialists; here it is one more
candidate of the merge stage, so the comparison table puts it next to TIES and linear. One
student model learns from one teacher per domain (grounding, mobile, web: the specialists):

    every step, for every domain d:
        the student samples one answer per prompt of a batch of domain-d prompts (on-policy,
        `rl.rollout.sample_groups`);
        the student (with grad) and the specialist of d (eval mode, no grad) score every
        completion position over the whole vocabulary (`rl.rollout.completion_logits`);
        loss_d = reverse KL(student || teacher) per token, averaged over the completion tokens
    one AdamW step on the mean of the domains' losses (each domain weighs the same).

Why reverse KL on the student's own samples: it is mode-seeking (the student is pulled to what the
teacher would say at the states the student actually reaches, not asked to cover everything the
teacher could say), and its gradient over the full vocabulary is exact, so no sampled estimator
or reward is needed. The sampled tokens only choose the states; the gradient does not go through
sampling.

Why the student starts from a TIES merge by default (`merge.distill.init: ties`): the TIES merge
already keeps most of each specialist's gains (agents/venus-tiny/agent.yaml's measurements), so
the student starts close to every teacher; its own samples are then the kind of answers the
teachers are good at judging, the KL is small, and a short run repairs the interference TIES left
instead of relearning three skills from the base; the comparison with the `ties` row answers
whether distillation adds anything. `init: base` starts from the base checkpoint (the plain
multi-teacher setting, which needs many more steps). The TIES start is written to `work/init-ties`,
or taken from the merge stage's own TIES candidate when it has one (`init_dir`).

Prompts (`distill_prompts`): grounding prompts from grounding records, navigation prompts from
the steps of mobile / web episodes, made by `rl.prompts.grounding_item` / `navigation_item` (the
prompts the specialists were trained and are evaluated with). By default they are synthesised
with seeds of their own (`merge.distill.prompts`, checked against the held-out suites' range when
the spec loads); `source: dataset` reads a dataset directory instead.

Placement: the student trains on the merge job's device (`models.placement.job_device`; float32
master weights, as every trainer here); the teachers go on `placement.reference_device` of it (the
same device, or the next GPU of a multi-GPU pod), in the spec's inference dtype.

Cost per step: for each domain, one sampled batch (`batch_size` answers of up to `max_new_tokens`
tokens) plus one forward of the student with backward and one forward of the teacher over the
prompts and answers, i.e. about 3 x a GRPO step with group size 1; memory: the student with AdamW
state plus the three teachers, and two [batch, tokens, vocabulary] float logits.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import torch

from venus_core.config.spec import DistillPromptsSpec, DistillSpec, ModelSpec
from venus_core.data.schema import GroundingSample, NavigationStep, Trajectory
from venus_core.data.store import DatasetReader
from venus_core.merge.api import MergeConfig, merge_checkpoints
from venus_core.models.integrity import verify_checkpoint_dir
from venus_core.models.loading import load_model, save_model
from venus_core.models.placement import describe_model, reference_device, resolve_device
from venus_core.rl.losses import masked_mean
from venus_core.rl.prompts import grounding_item, navigation_item
from venus_core.rl.rollout import RolloutBatch, completion_logits, sample_groups

Chat = list[dict[str, Any]]
REPORT_FILE = "distill_report.json"
"""Written into the student's checkpoint directory (covered by its SHA256SUMS)."""


# --------------------------------------------------------------------------- the loss


def token_reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(student || teacher) of the next-token distributions: logits [N, T, V] each -> [N, T] (nats).

    sum_v p_s(v) (log p_s(v) - log p_t(v)). Tokens masked to -inf in the student (the sampler's
    suppressed ids) have p_s = 0 and add 0; their -inf is replaced before the product so the
    backward pass stays finite."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ (same vocabulary needed)")
    logp_s = torch.log_softmax(student_logits.float(), dim=-1)
    logp_t = torch.log_softmax(teacher_logits.float().to(logp_s.device), dim=-1)
    absent = ~torch.isfinite(logp_s)
    diff = torch.where(absent, torch.zeros_like(logp_s), logp_s) - torch.where(absent, torch.zeros_like(logp_t), logp_t)
    return (logp_s.exp() * diff).sum(dim=-1)


def distill_loss(student: torch.nn.Module, teacher: torch.nn.Module, batch: RolloutBatch) -> tuple[torch.Tensor, int]:
    """(mean reverse KL over the completion tokens of `batch`, with grad into the student; token count)."""
    s_logits = completion_logits(student, batch)  # type: ignore[arg-type]
    with torch.no_grad():
        t_logits = completion_logits(teacher, batch)  # type: ignore[arg-type]
    kl = token_reverse_kl(s_logits, t_logits)
    mask = batch.completion_mask.to(kl.device, kl.dtype)
    return masked_mean(kl, mask), int(mask.sum().item())


# --------------------------------------------------------------------------- prompts


class PromptPool(Sequence[Chat]):
    """A domain's prompt chats, built from their records when asked for (the screenshots are opened
    per batch, not all held in memory)."""

    def __init__(self, records: Sequence[GroundingSample | NavigationStep], reader: DatasetReader) -> None:
        if not records:
            raise ValueError(f"no prompts in {reader.path}")
        self.records = list(records)
        self.reader = reader

    def __len__(self) -> int:
        return len(self.records)

    def chat(self, i: int) -> Chat:
        rec = self.records[i]
        item = grounding_item(rec, self.reader.open_image) if isinstance(rec, GroundingSample) \
            else navigation_item(rec, self.reader.open_image)
        return item.messages

    @overload
    def __getitem__(self, i: int) -> Chat: ...

    @overload
    def __getitem__(self, i: slice) -> list[Chat]: ...

    def __getitem__(self, i: int | slice) -> Chat | list[Chat]:
        if isinstance(i, slice):
            return [self.chat(k) for k in range(len(self))[i]]
        return self.chat(range(len(self))[i])


def domain_records(reader: DatasetReader, domain: str, history_len: int) -> list[GroundingSample | NavigationStep]:
    """Grounding records (domain grounding) or the navigation steps on platform `domain` of `reader`."""
    out: list[GroundingSample | NavigationStep] = []
    for rec in reader:
        if domain == "grounding":
            if isinstance(rec, GroundingSample):
                out.append(rec)
        elif isinstance(rec, Trajectory) and rec.platform == domain:
            out.extend(rec.to_steps(history_len))
        elif isinstance(rec, NavigationStep) and rec.platform == domain:
            out.append(rec)
    return out


def distill_prompts(cfg: DistillPromptsSpec, domains: Sequence[str], work: Path, history_len: int) -> dict[str, PromptPool]:
    """The prompt pool of every domain: synthesised into `work/prompts-<domain>` (kept and reused:
    the same settings give the same data) or read from `cfg.data`."""
    from venus_core.data.synth import synthesize

    pools: dict[str, PromptPool] = {}
    for domain in domains:
        if cfg.source == "dataset":
            path = Path(str(cfg.data))
        else:
            kind, level = ("grounding", cfg.grounding_level) if domain == "grounding" else ("navigation", cfg.navigation_level)
            seed = cfg.domain_seed(domain)
            path = work / f"prompts-{domain}-{kind}-l{level}-n{cfg.records}-seed{seed}"
            if not (path / "manifest.json").is_file():
                synthesize(kind, cfg.records, level, seed, path, overwrite=True,  # type: ignore[arg-type]
                           platform="both" if domain == "grounding" else domain)  # type: ignore[arg-type]
        reader = DatasetReader(path)
        records = domain_records(reader, domain, history_len)
        if not records:
            raise ValueError(f"merge.distill.prompts: no {domain} prompts in {path}")
        pools[domain] = PromptPool(records, reader)
    return pools


def prompt_batches(n: int, batch_size: int, rng: random.Random) -> Iterator[list[int]]:
    """Endless batches of indices into n prompts: seeded passes in a fresh order each, a batch
    running over into the next pass when n is not a multiple of batch_size."""
    order: list[int] = []
    while True:
        while len(order) < batch_size:
            nxt = list(range(n))
            rng.shuffle(nxt)
            order += nxt
        yield order[:batch_size]
        order = order[batch_size:]


# --------------------------------------------------------------------------- the run


def student_start(cfg: DistillSpec, base: Path, specialists: Mapping[str, Path], work: Path,
                  init_merge: MergeConfig | None, init_dir: Path | None = None) -> Path:
    """The checkpoint the student starts from: the base, or a TIES merge of the specialists written
    to `work/init-ties` with `init_merge` (the spec's TIES settings and weights). `init_dir`: that
    same TIES merge already written by the caller (the merge stage's `ties` candidate); it is
    verified against its SHA256SUMS and used as is instead of merging again."""
    if cfg.init == "base":
        return base
    if init_dir is not None:
        verify_checkpoint_dir(init_dir, require_manifest=True)
        return init_dir
    if init_merge is None or init_merge.method != "ties":
        raise ValueError("merge.distill.init=ties needs the TIES merge configuration (init_merge)")
    target = work / "init-ties"
    if target.exists():
        shutil.rmtree(target)  # a start from an earlier, perhaps different, merge is not reused
    merge_checkpoints(base, list(specialists.values()), target, init_merge)
    return target


def distill(base: Path, specialists: Mapping[str, Path], out: Path, cfg: DistillSpec,
            prompts: Mapping[str, Sequence[Chat]], *, model_spec: ModelSpec, work: Path,
            device: str | torch.device = "cpu", init_merge: MergeConfig | None = None,
            init_dir: Path | None = None) -> dict[str, Any]:
    """Distil the `specialists` (domain -> checkpoint) into one student written to `out`; the report.

    `prompts`: the chats of every domain (`distill_prompts`). `work`: where the TIES start goes
    (`init_dir`: an already-written TIES start, `student_start`).
    The inputs are verified (`verify_checkpoint_dir`, SHA256SUMS required) before anything is
    read; `out` must be empty or absent, and gets the student with `save_model` (safetensors,
    processor, `distill_report.json`, then SHA256SUMS)."""
    t_start = time.perf_counter()
    missing = [d for d in specialists if d not in prompts]
    if not specialists or missing:
        raise ValueError(f"distill: no prompts for {missing}" if missing else "distill: no specialists")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"distill: output {out} exists and is not empty")
    digests = {name: verify_checkpoint_dir(d, require_manifest=True) for name, d in [("base", base), *specialists.items()]}
    start = student_start(cfg, base, specialists, work, init_merge, init_dir)
    student_device = resolve_device(device)
    student, processor = load_model(start, model_spec, student_device, training=True)
    teacher_device = reference_device(student_device)
    teachers: dict[str, torch.nn.Module] = {}
    for domain, path in specialists.items():
        teacher, _ = load_model(path, model_spec, teacher_device)
        teachers[domain] = teacher.requires_grad_(False).eval()
    torch.manual_seed(cfg.seed)
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
    batches = {d: prompt_batches(len(prompts[d]), cfg.batch_size, random.Random(f"{cfg.seed}:{d}")) for d in specialists}
    steps: list[dict[str, Any]] = []
    for step in range(cfg.steps):
        t0 = time.perf_counter()
        row: dict[str, Any] = {"step": step + 1, "loss": {}, "tokens": {}, "seconds": {}}
        optimizer.zero_grad(set_to_none=True)
        for k, domain in enumerate(specialists):
            td = time.perf_counter()
            chats = [prompts[domain][i] for i in next(batches[domain])]
            batch = sample_groups(student, processor, chats, 1, cfg.max_new_tokens, temperature=cfg.temperature,
                                  seed=cfg.seed * 1_000_003 + step * len(specialists) + k)
            student.train()
            loss, tokens = distill_loss(student, teachers[domain], batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"distill: step {step + 1}, {domain}: the KL is {float(loss)}")
            (loss / len(specialists)).backward()  # each domain weighs the same in the step
            student.eval()
            row["loss"][domain] = float(loss.detach())
            row["tokens"][domain] = tokens
            row["seconds"][domain] = round(time.perf_counter() - td, 4)
        row["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        optimizer.step()
        row["step_seconds"] = round(time.perf_counter() - t0, 4)
        steps.append(row)
    report: dict[str, Any] = {
        "method": "distill", "init": cfg.init, "start": str(start), "config": cfg.model_dump(mode="json"),
        "teachers": {d: str(p) for d, p in specialists.items()}, "inputs": digests,
        "prompts": {d: len(prompts[d]) for d in specialists},
        "placement": {"student": describe_model(student), "teachers": str(teacher_device)},
        "steps": steps,
        "first_loss": steps[0]["loss"], "last_loss": steps[-1]["loss"],
        "tokens": sum(sum(r["tokens"].values()) for r in steps),
        "train_seconds": round(sum(r["step_seconds"] for r in steps), 3),
    }
    save_model(student, processor, out, **{REPORT_FILE: json.dumps(report, indent=2)})
    report["seconds"] = round(time.perf_counter() - t_start, 3)
    return report


__all__ = ["PromptPool", "REPORT_FILE", "distill", "distill_loss", "distill_prompts", "domain_records",
           "prompt_batches", "student_start", "token_reverse_kl"]
