"""Fail-closed input checks, output verification and the per-tensor statistics of a merge.

Why: mergekit silently truncates embedding rows, skips tensors whose shapes differ and drops
tensors its architecture definition does not list, and does not check what it wrote. Here every
input must match the base tensor for tensor (canonical names, shapes, dtypes) and use the same
tokenizer files; any difference is an error naming the tensor or file. After writing, the output
headers are compared with the base (structural diff) and every merged chunk has been scanned for
NaN/Inf. The statistics (achieved density, sign-conflict rate, merged-delta norms, cosine between
task vectors) go into a JSON report that a runtime job can log to MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from venus_core.merge.io import FLOAT_DTYPES, CheckpointReader, TensorInfo, tokenizer_digests
from venus_core.merge.keys import Part, canonical_map, part_of


class MergeInputError(ValueError):
    """The inputs of a merge do not match the base (tensor, shape, dtype or tokenizer)."""


@dataclass(frozen=True)
class TensorJob:
    canon: str
    part: Part
    info: TensorInfo  # the base's tensor (its name is the output name)
    model_keys: tuple[str, ...]  # the same tensor's name in each model

    @property
    def is_float(self) -> bool:
        return self.info.dtype in FLOAT_DTYPES


def match_inputs(base: CheckpointReader, models: list[CheckpointReader]) -> list[TensorJob]:
    """One job per base tensor, in base-name order; any mismatch is an error naming the tensor."""
    base_map = canonical_map(base.tensors, str(base.root))
    model_maps = [canonical_map(m.tensors, str(m.root)) for m in models]
    for m, mm in zip(models, model_maps):
        missing = sorted(set(base_map) - set(mm))
        extra = sorted(set(mm) - set(base_map))
        if missing:
            raise MergeInputError(f"{m.root}: tensor {base_map[missing[0]]!r} of the base is missing "
                                  f"({len(missing)} missing in all)")
        if extra:
            raise MergeInputError(f"{m.root}: tensor {mm[extra[0]]!r} is not in the base "
                                  f"({len(extra)} extra in all)")
    jobs = []
    for canon, bkey in sorted(base_map.items(), key=lambda kv: kv[1]):
        b = base.tensors[bkey]
        keys = []
        for m, mm in zip(models, model_maps):
            t = m.tensors[mm[canon]]
            if t.shape != b.shape:
                raise MergeInputError(f"{m.root}: tensor {t.key!r} has shape {list(t.shape)}, "
                                      f"the base's {bkey!r} has {list(b.shape)}")
            if t.dtype != b.dtype:
                raise MergeInputError(f"{m.root}: tensor {t.key!r} has dtype {t.dtype}, "
                                      f"the base's {bkey!r} has {b.dtype}")
            keys.append(t.key)
        jobs.append(TensorJob(canon, part_of(canon), b, tuple(keys)))
    return jobs


def check_tokenizers(base: Path, models: list[Path]) -> dict[str, str]:
    """All inputs must carry byte-identical tokenizer / chat-template files; returns the digests."""
    ref = tokenizer_digests(base)
    for m in models:
        got = tokenizer_digests(m)
        for name in sorted(set(ref) | set(got)):
            if ref.get(name) != got.get(name):
                what = "is missing" if name not in got else (
                    "is not in the base" if name not in ref else "differs from the base's")
                raise MergeInputError(f"{m}: tokenizer file {name!r} {what}")
    return ref


def structural_diff(out: CheckpointReader, base: CheckpointReader) -> list[str]:
    """Differences in names, shapes and dtypes between the written output and the base."""
    diffs = []
    for key in sorted(set(base.tensors) | set(out.tensors)):
        b, o = base.tensors.get(key), out.tensors.get(key)
        if o is None:
            diffs.append(f"missing {key}")
        elif b is None:
            diffs.append(f"extra {key}")
        elif (b.shape, b.dtype) != (o.shape, o.dtype):
            diffs.append(f"{key}: {o.dtype}{list(o.shape)} != base {b.dtype}{list(b.shape)}")
    return diffs


def non_finite_error(where: str, tensor: torch.Tensor) -> str | None:
    """An error message if the tensor holds NaN/Inf (one min/max pass; counts only on failure)."""
    if tensor.numel() == 0:
        return None
    lo, hi = torch.aminmax(tensor.reshape(-1))
    if bool(torch.isfinite(lo)) and bool(torch.isfinite(hi)):
        return None
    bad = int((~torch.isfinite(tensor)).sum())
    return f"{where}: {bad} NaN/Inf values"


@dataclass
class TensorStats:
    """Accumulates one tensor's statistics over its chunks."""

    key: str
    part: Part
    n: int
    m: int
    mode: str = "merged"  # merged | unchanged (all task vectors zero, copied bit-exact) | copied
    kept: list[int] = field(default_factory=list)
    target_k: int | None = None
    conflicts: int = 0
    touched: int = 0
    delta_sq: float = 0.0
    delta_max: float = 0.0
    gram: torch.Tensor | None = None
    identical_chunks: int = 0
    chunks: int = 0

    def __post_init__(self) -> None:
        self.kept = [0] * self.m
        self.gram = torch.zeros(self.m, self.m, dtype=torch.float64)

    def add_taus(self, taus: torch.Tensor) -> None:
        flat = taus.reshape(self.m, -1)
        self.gram += (flat @ flat.T).double()

    def add_kept(self, taus: torch.Tensor) -> None:
        counts = torch.sign(taus.reshape(self.m, -1)).abs_().sum(1, dtype=torch.float64)
        for i in range(self.m):
            self.kept[i] += int(counts[i])

    def add_delta(self, delta: torch.Tensor) -> None:
        if delta.numel():
            self.delta_sq += float(torch.dot(delta, delta))
            lo, hi = torch.aminmax(delta)
            self.delta_max = max(self.delta_max, -float(lo), float(hi))

    def to_json(self) -> dict[str, object]:
        assert self.gram is not None
        norms = [math.sqrt(max(float(self.gram[i, i]), 0.0)) for i in range(self.m)]
        cos = [[round(float(self.gram[i, j]) / (norms[i] * norms[j]), 6) if norms[i] and norms[j]
                else None for j in range(self.m)] for i in range(self.m)]
        return {
            "key": self.key, "part": self.part, "numel": self.n, "mode": self.mode,
            "target_density": None if self.target_k is None else round(self.target_k / max(self.n, 1), 8),
            "achieved_density": [round(k / max(self.n, 1), 8) for k in self.kept],
            "sign_conflict_rate": round(self.conflicts / self.touched, 8) if self.touched else 0.0,
            "task_vector_norms": [round(x, 8) for x in norms],
            "task_vector_cosine": cos,
            "merged_delta_norm": round(math.sqrt(self.delta_sq), 8),
            "merged_delta_max_abs": round(self.delta_max, 8),
        }
