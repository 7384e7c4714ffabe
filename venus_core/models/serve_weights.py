"""Weight reloading for `venus serve`: the online-RL loop points the rollout server at a new checkpoint.

Why: in online RL the learner updates π_θ and the server that samples the rollouts must then sample
from the new weights without a restart (a restart re-reads the processor, re-binds the port and
drops in-flight requests). The HTTP shape (`server.create_app`) is `POST /v1/load_weights` with
`{"path": "<HF checkpoint dir>"}`, answering `{"loaded": path, "version": n}`. Name chosen because
vLLM's OpenAI server has no from-disk reload route to copy: its RL weight sync pushes tensors over
NCCL / CUDA IPC (`/init_weight_transfer_engine` + `/update_weights`, dev mode only), which a
laptop stand-in cannot mirror; the common from-disk route is SGLang's `/update_weights_from_disk`
(`{"model_path"}` -> `{"success", "message"}`), but RL clients of it also need the server's weights
version, which it does not return. So a name of our own under /v1, with the version in the reply.

A reload fails closed, before any served weight changes (`stage`), so a bad checkpoint leaves the
old weights serving:
- the directory is a loadable checkpoint of the served architecture (`loading.check_checkpoint`:
  config.json with the same model_type, safetensors weights) that passes `integrity`: no pickle
  file anywhere in it (loading one executes code), valid safetensors headers, and when it carries
  a `SHA256SUMS` manifest (every platform checkpoint does, written last) every listed file has its
  digest and every file is listed, so a half-copied checkpoint is refused;
- the weights are read by transformers itself (safetensors only, no remote code) into a staging copy
  of the served class on the CPU, so the checkpoint's key layout (conversion mappings) is handled
  as at start-up; missing, unexpected or mis-shaped tensors are errors, and so is any tensor name,
  shape or dtype the served model does not have, or a non-finite value.
Then `apply` copies the staged tensors into the served model in place (`load_state_dict`), on the
generation thread between batches (`Batcher.exclusive`), so no request sees half-loaded weights.
The directory checks (`verify_checkpoint`, `non_finite`) are also those of the vLLM worker
extension (`rl.online.vllm_worker`), which requires the manifest.
Only weights change: the processor, tokenizer and generation config stay those loaded at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus_core.models.integrity import MANIFEST, PICKLE_SUFFIXES, manifest_digest, write_manifest

if TYPE_CHECKING:
    import torch


class WeightsError(ValueError):
    """A checkpoint the server refuses to load; the served weights are unchanged."""


def verify_checkpoint(path: Path, model_type: str | None = None, *, require_manifest: bool = False) -> str | None:
    """Fail-closed checks of a checkpoint directory before anything is read (module docstring);
    the manifest's digest (`manifest_digest`). Shared by `WeightReloader` (venus serve) and the
    vLLM worker extension (`rl.online.vllm_worker`, which requires the manifest).

    `model_type`: the served model's; None accepts any supported architecture, as config.json says."""
    from venus_core.models.loading import ARCHITECTURE_MODEL_TYPES, check_checkpoint

    path = Path(path)
    declared = _declared_model_type(path) if model_type is None else model_type
    architecture = next((a for a, types in ARCHITECTURE_MODEL_TYPES.items() if declared in types), None)
    if architecture is None and (model_type is not None or declared is not None):
        raise WeightsError(f"reloading weights is not supported for model_type {declared!r}")
    architecture = architecture or next(iter(ARCHITECTURE_MODEL_TYPES))  # no config: check_checkpoint says why
    try:
        check_checkpoint(path, architecture, require_manifest=require_manifest)
    except (OSError, ValueError) as exc:
        raise WeightsError(str(exc)) from None
    return manifest_digest(path)


def _declared_model_type(path: Path) -> str | None:
    """config.json's model_type, or None when it cannot be read (`check_checkpoint` then says why)."""
    import json

    try:
        value = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def non_finite(name: str, tensor: torch.Tensor) -> str | None:
    """Why `tensor` is refused (NaN / Inf values), or None."""
    import torch

    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        return f"tensor {name} has {bad} non-finite values (NaN/Inf)"
    return None


class WeightReloader:
    """Reloads a served model's weights from checkpoint directories; `version` counts reloads."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.model_type = str(model.config.model_type)
        self.version = 0
        self.path: str | None = None

    def stage(self, path: str | Path) -> dict[str, torch.Tensor]:
        """The checkpoint's tensors, verified against the served model (CPU); WeightsError otherwise."""
        from transformers import AutoModelForImageTextToText

        root = Path(path)
        verify_checkpoint(root, self.model_type)
        try:
            # mismatched sizes are reported (and refused below, by name) rather than raised unnamed
            staged, info = AutoModelForImageTextToText.from_pretrained(
                root, dtype=self.model.dtype, use_safetensors=True, trust_remote_code=False,
                output_loading_info=True, ignore_mismatched_sizes=True)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            raise WeightsError(f"{root}: cannot load weights: {type(exc).__name__}: {str(exc)[:500]}") from None
        problems = [f"{kind.replace('_', ' ')[:-1]} {sorted(map(str, info.get(kind) or ()))[:3]}"
                    for kind in ("missing_keys", "unexpected_keys") if info.get(kind)]
        problems += [f"tensor {key} has shape {tuple(got)} where its config says {tuple(want)}"
                     for key, got, want in sorted(info.get("mismatched_keys") or ())[:3]]
        if info.get("error_msgs"):
            problems.append(f"errors {list(info['error_msgs'])[:2]}")
        if problems:
            raise WeightsError(f"{root}: checkpoint does not match its own config: {'; '.join(problems)}")
        if type(staged) is not type(self.model):
            raise WeightsError(f"{root}: holds a {type(staged).__name__}; this server serves a "
                               f"{type(self.model).__name__}")
        new, old = staged.state_dict(), self.model.state_dict()
        missing, extra = sorted(set(old) - set(new)), sorted(set(new) - set(old))
        if missing or extra:
            raise WeightsError(f"{root}: tensors differ from the served model's: missing {missing[:3]}, "
                               f"unexpected {extra[:3]}")
        for name, tensor in new.items():
            want = old[name]
            if tuple(tensor.shape) != tuple(want.shape):
                raise WeightsError(f"{root}: tensor {name} has shape {tuple(tensor.shape)}; the served model's "
                                   f"is {tuple(want.shape)}")
            if tensor.dtype != want.dtype:
                raise WeightsError(f"{root}: tensor {name} is {tensor.dtype}; the served model's is {want.dtype}")
            why = non_finite(name, tensor)
            if why is not None:
                raise WeightsError(f"{root}: {why}")
        return {k: v.detach() for k, v in new.items()}

    def apply(self, staged: dict[str, torch.Tensor], path: str) -> int:
        """Copy staged tensors into the served model (call between batches); the new version."""
        import torch

        with torch.no_grad():
            self.model.load_state_dict(staged, strict=True)
        self.version += 1
        self.path = path
        return self.version

    def status(self) -> dict[str, Any]:
        return {"weights_version": self.version, "weights_path": self.path}


__all__ = ["MANIFEST", "PICKLE_SUFFIXES", "WeightReloader", "WeightsError", "manifest_digest", "non_finite",
           "verify_checkpoint", "write_manifest"]
