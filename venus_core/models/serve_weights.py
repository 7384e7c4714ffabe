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
  config.json with the same model_type, safetensors weights), and no pickle file is anywhere in it
  (loading one executes code);
- when it carries a `SHA256SUMS` manifest (merges write one, last), every listed file has its
  digest and every weight file is listed, so a half-copied checkpoint is refused;
- the weights are read by transformers itself (safetensors only, no remote code) into a staging copy
  of the served class on the CPU, so the checkpoint's key layout (conversion mappings) is handled
  as at start-up; missing, unexpected or mis-shaped tensors are errors, and so is any tensor name,
  shape or dtype the served model does not have, or a non-finite value.
Then `apply` copies the staged tensors into the served model in place (`load_state_dict`), on the
generation thread between batches (`Batcher.exclusive`), so no request sees half-loaded weights.
The directory checks (`verify_checkpoint`, `verify_manifest`, `refuse_pickles`, `non_finite`) are
also those of the vLLM worker extension (`rl.online.vllm_worker`), which requires the manifest.
Only weights change: the processor, tokenizer and generation config stay those loaded at start-up.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MANIFEST = "SHA256SUMS"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


class WeightsError(ValueError):
    """A checkpoint the server refuses to load; the served weights are unchanged."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_manifest(root: Path) -> int:
    """Check `root/SHA256SUMS` (`sha256sum -c` format) when present; the number of files checked.

    Every listed file must exist with its digest, and every `*.safetensors` file must be listed."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        return 0
    listed: dict[str, str] = {}
    for n, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        name = name.removeprefix("*")
        if not sep or len(digest) != 64 or not name or name.startswith("/") or ".." in Path(name).parts:
            raise WeightsError(f"{manifest}:{n}: not a 'sha256  file' line: {line[:80]!r}")
        listed[name] = digest.lower()
    for name, digest in sorted(listed.items()):
        file = root / name
        if not file.is_file():
            raise WeightsError(f"{manifest} lists {name}, which is missing")
        if _sha256(file) != digest:
            raise WeightsError(f"{root / name}: sha256 does not match {MANIFEST} (a partial or altered copy?)")
    unlisted = sorted(p.name for p in root.glob("*.safetensors") if p.name not in listed)
    if unlisted:
        raise WeightsError(f"{manifest} does not list weight file {unlisted[0]}")
    return len(listed)


def refuse_pickles(root: Path) -> None:
    """WeightsError naming the first pickle file anywhere under `root` (loading one executes code)."""
    pickles = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if p.is_file() and p.suffix.lower() in PICKLE_SUFFIXES)
    if pickles:
        raise WeightsError(f"{root}: pickle file {pickles[0]} refused (loading it can execute code); "
                           "write the checkpoint as safetensors only")


def manifest_digest(root: Path) -> str | None:
    """`sha256:<hex>` of `root/SHA256SUMS` (it names every file's digest, so it identifies the
    checkpoint), or None without one."""
    manifest = root / MANIFEST
    return f"sha256:{_sha256(manifest)}" if manifest.is_file() else None


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
        check_checkpoint(path, architecture)
    except (OSError, ValueError) as exc:
        raise WeightsError(str(exc)) from None
    refuse_pickles(path)
    if require_manifest and not (path / MANIFEST).is_file():
        raise WeightsError(f"{path}: no {MANIFEST} manifest (the learner writes one last, after the weights); "
                           "a checkpoint without it may be incomplete")
    verify_manifest(path)
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


def manifest_lines(root: Path) -> str:
    """A `SHA256SUMS` text for every file under `root` (what `verify_manifest` checks)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(MANIFEST))
    return "".join(f"{_sha256(p)}  {p.relative_to(root).as_posix()}\n" for p in files)


def write_manifest(root: str | Path) -> Path:
    """Write `root/SHA256SUMS` last, after the checkpoint is complete (the learner's side)."""
    out = Path(root) / MANIFEST
    tmp = out.with_suffix(".tmp")
    tmp.write_text(manifest_lines(Path(root)), encoding="utf-8")
    tmp.replace(out)
    return out


__all__ = ["MANIFEST", "PICKLE_SUFFIXES", "WeightReloader", "WeightsError", "manifest_digest", "non_finite",
           "refuse_pickles", "verify_checkpoint", "verify_manifest", "write_manifest"]
