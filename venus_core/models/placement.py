"""Where a job puts its model: device, dtype and attention kernel, and the GPUs its pod asked for.

Why one helper: every stage that runs a model (mid_train, offline_rl, online_rl, evaluate, the
local judge, `venus serve`) must make the same choice, and the spec says what the pod was given
(`platform.resources.<stage>.gpu_count`, requested as `nvidia.com/gpu` by pipelines/k8s.py and the
TrainJob manifests), so a pod that asked for GPUs and sees none fails at start-up instead of
training an 8B model on one CPU core.

Device (`resolve_device("auto")`): the local rank's GPU under torchrun (`LOCAL_RANK`), else
`cuda:0` when CUDA is available, else the CPU. An explicit device (a job's `--device`, `venus serve
--device`) wins: `cpu`, `cuda` (the local rank's GPU), `cuda:N` (checked against what torch sees),
`meta` (tests). dtype (`model.dtype`): `auto` is bfloat16 on CUDA and float32 elsewhere, except
for a model being trained, whose `auto` weights are float32 on every device (the master weights:
mid-training computes in bf16 under autocast, `mid_train.precision`; an AdamW step at the RL
learning rates, ~1e-7 to 1e-6, is far below bf16's resolution of ~0.4 % and would round away,
`low_precision_note`). An explicit `bfloat16` is kept for training too, with that note. Attention
(`model.attn_implementation`): `flash_attention_2` only on CUDA, in half precision, with the
`flash_attn` package importable; otherwise `sdpa`, with a logged note saying why.

Imports one way: this module needs torch and the spec classes only; `models.loading` and
`train.distributed` import it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from venus_core.config import AgentSpec
    from venus_core.config.spec import ModelSpec

log = logging.getLogger(__name__)

AUTO = "auto"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
GPU_STAGES = ("generate_data", "score_data", "mid_train", "offline_rl", "online_rl", "merge", "evaluate")
"""Stages with a `platform.resources` entry (the pods the pipeline sizes)."""


class DeviceError(RuntimeError):
    """The device asked for (by the spec, the pod or `--device`) is not there."""


def cuda_count() -> int:
    """GPUs torch can use in this process (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def local_rank() -> int | None:
    """`LOCAL_RANK` as torchrun sets it, or None outside torchrun."""
    raw = os.environ.get("LOCAL_RANK")
    if raw is None or raw == "":
        return None
    try:
        rank = int(raw)
    except ValueError:
        raise DeviceError(f"environment variable LOCAL_RANK={raw!r} is not an integer") from None
    if rank < 0:
        raise DeviceError(f"LOCAL_RANK={rank} is negative")
    return rank


def _cuda_index(index: int | None) -> torch.device:
    n = cuda_count()
    if n == 0:
        raise DeviceError(f"CUDA device requested but none is usable: {_cuda_facts()}")
    if index is None:
        rank = local_rank()
        index = 0 if rank is None else rank
        if index >= n:
            raise DeviceError(f"LOCAL_RANK={index} but torch sees {n} GPU(s): launch at most {n} processes per "
                              f"node ({_cuda_facts()})")
    elif index >= n:
        raise DeviceError(f"cuda:{index} requested but torch sees {n} GPU(s) ({_cuda_facts()})")
    return torch.device("cuda", index)


def resolve_device(requested: str | torch.device | None = AUTO) -> torch.device:
    """The device a job should use (see the module docstring); DeviceError when it is not there."""
    if requested is None or (isinstance(requested, str) and requested.strip().lower() == AUTO):
        if cuda_count() > 0:
            return _cuda_index(None)
        return torch.device("cpu")
    try:
        dev = torch.device(requested.strip() if isinstance(requested, str) else requested)
    except (RuntimeError, TypeError) as exc:
        raise DeviceError(f"device {requested!r}: {exc}") from None
    if dev.type == "cuda":
        return _cuda_index(dev.index)
    return dev


def resolve_dtype(dtype: str, device: str | torch.device, *, training: bool = False) -> torch.dtype:
    """ModelSpec.dtype -> torch dtype: "auto" is bfloat16 on CUDA and float32 elsewhere; float32
    everywhere for a model being trained (its master weights)."""
    if dtype == AUTO:
        return torch.bfloat16 if torch.device(device).type == "cuda" and not training else torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"model.dtype must be one of auto, {', '.join(_DTYPES)}; got {dtype!r}") from None


def flash_attn_importable() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def resolve_attention(requested: str, device: str | torch.device, dtype: torch.dtype) -> str:
    """ModelSpec.attn_implementation as this device can run it: flash_attention_2 falls back to
    sdpa (noted in the log) off CUDA, in float32, or without the `flash_attn` package."""
    if requested != "flash_attention_2":
        return requested
    why = None
    if torch.device(device).type != "cuda":
        why = f"the model is on {torch.device(device)}, not a GPU"
    elif dtype not in (torch.bfloat16, torch.float16):
        why = f"flash-attention 2 needs bfloat16 / float16 weights, these are {dtype}"
    elif not flash_attn_importable():
        why = "the flash_attn package is not installed (the [gpu] extra)"
    if why is None:
        return requested
    log.warning("model.attn_implementation=flash_attention_2: using sdpa because %s", why)
    return "sdpa"


@dataclass(frozen=True)
class Placement:
    """Device, weight dtype and attention kernel of one model."""

    device: torch.device
    dtype: torch.dtype
    attn_implementation: str

    def to_dict(self) -> dict[str, str]:
        return {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                "attn_implementation": self.attn_implementation}

    def describe(self) -> str:
        d = self.to_dict()
        return f"{d['device']}, {d['dtype']}, {d['attn_implementation']}"


def placement_for(model_spec: ModelSpec, device: str | torch.device | None = AUTO, *,
                  training: bool = False) -> Placement:
    """Where and how `model_spec`'s model runs on `device` (resolved with `resolve_device`);
    `training`: the model is a trainer's (dtype auto keeps float32 master weights)."""
    dev = resolve_device(device)
    dtype = resolve_dtype(model_spec.dtype, dev, training=training)
    return Placement(dev, dtype, resolve_attention(model_spec.attn_implementation, dev, dtype))


def gpus_requested(spec: AgentSpec, stage: str) -> int:
    """GPUs per pod the spec gives `stage` (`platform.resources.<stage>.gpu_count`)."""
    if stage not in GPU_STAGES:
        raise ValueError(f"stage {stage!r} has no platform.resources entry (one of {', '.join(GPU_STAGES)})")
    return int(getattr(spec.platform.resources, stage).gpu_count)


def _cuda_facts() -> str:
    facts = [f"torch {torch.__version__}",
             "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}",
             f"torch.cuda.is_available()={torch.cuda.is_available()}"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        facts.append(f"CUDA_VISIBLE_DEVICES={visible!r}")
    return ", ".join(facts)


def check_gpus(stage: str, requested: int, visible: int | None = None) -> None:
    """Fail fast when the pod asked for `requested` GPUs and torch sees fewer (`visible`)."""
    if requested <= 0:
        return
    seen = cuda_count() if visible is None else visible
    if seen < requested:
        raise DeviceError(
            f"{stage}: the spec asks for {requested} GPU(s) per pod (platform.resources.{stage}.gpu_count) but "
            f"torch sees {seen} ({_cuda_facts()}). Run it on a node with the GPUs (the nvidia.com/gpu request "
            f"and a CUDA image), or on purpose without them: --device cpu, or "
            f"--set platform.resources.{stage}.gpu_count=0"
        )


def job_device(spec: AgentSpec, stage: str, requested: str | torch.device | None = AUTO) -> torch.device:
    """The device of `stage`'s model: `resolve_device(requested)` after the start-up check.

    With `requested` auto the GPUs the spec gives the stage must be there (`check_gpus`); an explicit
    device is the caller's decision (a CPU run of a GPU spec is noted in the log, not refused)."""
    asked = gpus_requested(spec, stage)
    if requested is None or (isinstance(requested, str) and requested.strip().lower() == AUTO):
        check_gpus(stage, asked)
        return resolve_device(AUTO)
    dev = resolve_device(requested)
    if asked and dev.type != "cuda":
        log.warning("%s: the spec gives this stage %d GPU(s) but --device %s puts the model on %s",
                    stage, asked, requested, dev)
    return dev


def model_device(model: Any) -> torch.device:
    """The device of a model's (first) parameter: where inputs built for it must go."""
    return next(model.parameters()).device


def low_precision_note(model: Any, lr: float, stage: str) -> str | None:
    """A warning (also logged) when `model` trains in bf16 / fp16 weights at a learning rate whose
    AdamW steps (about `lr` per weight) are below half the weights' spacing for a typical weight
    magnitude (0.02): those updates round away and the run does not learn. None otherwise."""
    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    half = sorted(str(d).removeprefix("torch.") for d in dtypes if d in (torch.bfloat16, torch.float16))
    if not half:
        return None
    eps = max(torch.finfo(getattr(torch, d)).eps for d in half)
    if lr >= 0.02 * eps / 2:
        return None
    note = (f"{stage}: trainable weights are {'/'.join(half)} and lr={lr:g}: an AdamW step (~lr) is below half "
            f"the spacing of a {half[0]} weight of 0.02 ({0.02 * eps:.1e}), so most updates round away; "
            "train float32 master weights (model.dtype auto or float32) or a sharded mixed-precision run")
    log.warning("%s", note)
    return note


def describe_model(model: Any) -> dict[str, Any]:
    """Where a loaded model runs (device, dtype, attention kernel, GPUs visible): for logs and reports."""
    return {"device": str(model_device(model)), "dtype": str(model.dtype).removeprefix("torch."),
            "attn_implementation": str(getattr(model.config, "_attn_implementation", None)),
            "cuda_devices": cuda_count()}


def reference_device(device: torch.device) -> torch.device:
    """Where a second full copy of the model (the GRPO reference) goes: the policy's device, except
    in a single process on a node with several GPUs, where it takes the next GPU. Why: an 8B
    policy with AdamW needs ~64 GB in bf16 (weights 16, gradients 16, two Adam moments 32) before
    activations; a 16 GB reference on top leaves an 80 GB GPU nothing for activations, while the
    pod's other GPUs idle until the RL learner is distributed (issue 20, section 2)."""
    if device.type != "cuda":
        return device
    world = os.environ.get("WORLD_SIZE")
    if world not in (None, "", "1"):
        return device  # one process per GPU: each keeps its reference with its policy
    n = cuda_count()
    if n < 2:
        return device
    return torch.device("cuda", ((device.index or 0) + 1) % n)


__all__ = [
    "AUTO", "DeviceError", "GPU_STAGES", "Placement", "check_gpus", "cuda_count", "describe_model",
    "flash_attn_importable",
    "gpus_requested", "job_device", "local_rank", "low_precision_note", "model_device", "placement_for", "reference_device",
    "resolve_attention", "resolve_device", "resolve_dtype",
]
