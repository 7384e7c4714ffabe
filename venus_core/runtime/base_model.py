"""Bring a remote `model.base` (s3:// or file:// artifact) to local disk before a job loads it.

The production spec names its base as an object-store artifact (`s3://venus-models/Qwen/...`,
mirrored from the hub into MinIO with `open_store(...).put_dir`); training and evaluation load
local directories only (`train.base.resolve_base`). Every job that loads model.base (mid_train,
the evaluate stage's `base` row, generate_data's default policy) calls `localize_base` first: the
artifact is fetched resumably and sha256-checked against its published manifest
(`io.storage.fetch.fetch_dir`) into the model cache, and the job goes on with a spec whose
model.base is that directory. A second job on the same machine (or a restarted pod on the same
volume) finds the copy up to date and downloads nothing.

The cache is $VENUS_MODEL_CACHE (mount a volume there on a cluster: an 8B base is ~17 GB, more
than a pod's ephemeral storage may hold), else ~/.cache/venus/models; each URI gets its own
directory, named by the first 16 hex digits of its sha256 (its fetch stamp beside it, as
NAME.fetched.json: the checkpoint's SHA256SUMS lists every file inside).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

from venus_core.config import AgentSpec

REMOTE_SCHEMES = ("s3://", "file://")


def is_remote(base: str) -> bool:
    return base.startswith(REMOTE_SCHEMES)


def model_cache() -> Path:
    """$VENUS_MODEL_CACHE, else ~/.cache/venus/models."""
    raw = os.environ.get("VENUS_MODEL_CACHE")
    return Path(raw) if raw else Path.home() / ".cache" / "venus" / "models"


def cache_dir_for(uri: str) -> Path:
    return model_cache() / hashlib.sha256(uri.encode("utf-8")).hexdigest()[:16]


def localize_base(spec: AgentSpec, job: str) -> AgentSpec:
    """`spec` itself when model.base is local (tiny, bootstrap, a directory); otherwise a copy whose
    model.base is the fetched, verified local directory (see the module docstring)."""
    base = spec.model.base
    if not is_remote(base):
        return spec
    from venus_core.io.storage.fetch import fetch_dir

    dest = cache_dir_for(base)
    t0 = time.perf_counter()
    try:
        report = fetch_dir(base, dest, stamp=dest.with_name(dest.name + ".fetched.json"))
    except Exception as exc:
        raise RuntimeError(f"{job}: model.base {base}: fetching it to {dest} failed: {exc}") from exc
    state = "up to date" if report.up_to_date else \
        f"{len(report.downloaded)} file(s) downloaded ({report.bytes_downloaded / 1e9:.2f} GB), {len(report.reused)} reused"
    print(f"[{job}] model.base {base} -> {dest} ({state}, {time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return spec.model_copy(update={"model": spec.model.model_copy(update={"base": str(dest)})})


__all__ = ["cache_dir_for", "is_remote", "localize_base", "model_cache"]
