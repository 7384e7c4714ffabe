"""`venus data mix`: the mid-training corpus from scored datasets, in the spec's domain ratios.

Why: UI-Venus-1.5 mid-trains on perception / GUI-VQA / grounding / navigation at 20.8 / 22.1 /
24.8 / 32.3 %. This module builds that corpus once, reproducibly, from any number of scored
datasets: near-duplicates are removed, each domain is cut to its share, the rest is split into
train / validation by episode (the steps of one episode never straddle the split) and a manifest
gives the counts per source and per domain for both splits.

Near-duplicates: two records of the same kind are duplicates when their normalized text (the
instruction, goal + action, or question) is equal and the 64-bit difference hashes (dHash,
computed with PIL: 9x8 greyscale, one bit per horizontal gradient) of their screenshots differ in
at most `max_distance` bits — a re-encoded or slightly shifted screenshot with the same
instruction teaches nothing new. Copies made on purpose by the `resample_actions` cleaning step
(`meta["resample_of"]`) are exempt, and go when their original goes.

Departures: ratios are over records, not tokens (the paper's 10B-token mixture is token-weighted;
a navigation record is one whole trajectory here); the corpus size is the largest for which every
domain can supply its share (or `total`), so over-supplied domains are subsampled (by per-source
weight) and the unused counts are reported; a domain with no records is dropped and the other
ratios renormalised, which the manifest says.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from venus_core.config.spec import DATA_DOMAINS, MixtureSpec
from venus_core.data.schema import (
    GroundingSample,
    NavigationStep,
    QASample,
    Trajectory,
    record_images,
)
from venus_core.data.store import DatasetReader, DatasetWriter

AnyRecord = GroundingSample | NavigationStep | Trajectory | QASample


def dhash(img: Image.Image, size: int = 8) -> int:
    """64-bit difference hash: 1 where a pixel is brighter than its right neighbour (9x8 greyscale)."""
    g = np.asarray(img.convert("L").resize((size + 1, size), Image.Resampling.BILINEAR), dtype=np.int16)
    bits = 0
    for bit in (g[:, :-1] > g[:, 1:]).flatten():
        bits = (bits << 1) | int(bit)
    return bits


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def dedup_text(record: AnyRecord) -> str:
    """The instruction part of the near-duplicate key."""
    if isinstance(record, GroundingSample):
        return _norm(record.instruction)
    if isinstance(record, NavigationStep):
        return _norm(f"{record.goal} | {record.step_index} | {record.action}")
    if isinstance(record, Trajectory):
        return _norm(record.goal)
    return _norm(record.question)


@dataclass
class _Item:
    source: str
    reader: DatasetReader
    record: AnyRecord

    @property
    def group(self) -> str:
        """Split unit: the episode for navigation records, the record otherwise."""
        ep = getattr(self.record, "episode_id", None)
        return f"{self.source}/episode/{ep}" if ep else f"{self.source}/{self.record.id}"


def _u(seed: int, key: str) -> float:
    """A uniform number in [0, 1) from (seed, key): stable across runs and machines."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big") / 2**64


def remove_near_duplicates(items: list[_Item], max_distance: int) -> tuple[list[_Item], Counter[str]]:
    """Drop near-duplicates (first one wins, in input order); returns (kept, removed per source)."""
    seen: dict[tuple[str, str], list[int]] = defaultdict(list)
    kept: list[_Item] = []
    removed: Counter[str] = Counter()
    dropped_ids: set[tuple[str, str]] = set()
    copies: list[_Item] = []
    for it in items:
        if it.record.meta.get("resample_of"):
            copies.append(it)
            continue
        ref = record_images(it.record)[0][0]
        h = dhash(it.reader.open_image(ref))
        bucket = seen[(it.record.kind, dedup_text(it.record))]
        if any(bin(h ^ other).count("1") <= max_distance for other in bucket):
            removed[it.source] += 1
            dropped_ids.add((it.source, it.record.id))
            continue
        bucket.append(h)
        kept.append(it)
    for it in copies:
        if (it.source, str(it.record.meta["resample_of"])) in dropped_ids:
            removed[it.source] += 1
        else:
            kept.append(it)
    return kept, removed


def domain_targets(
    available: Mapping[str, int], mixture: MixtureSpec, total: int | None
) -> tuple[dict[str, int], dict[str, float]]:
    """Records per domain: the largest corpus (<= total) in which every available domain gets its share."""
    ratios = {d: float(getattr(mixture, d)) for d in DATA_DOMAINS}
    live = {d: r for d, r in ratios.items() if r > 0 and available.get(d, 0) > 0}
    if not live:
        return {d: 0 for d in DATA_DOMAINS}, {d: 0.0 for d in DATA_DOMAINS}
    s = sum(live.values())
    eff = {d: live.get(d, 0.0) / s for d in DATA_DOMAINS}
    n = min(math.floor(available[d] / eff[d] + 1e-9) for d in live)
    if total is not None:
        n = min(n, total)
    raw = {d: n * eff[d] for d in DATA_DOMAINS}
    counts = {d: int(raw[d]) for d in DATA_DOMAINS}
    for d in sorted(live, key=lambda d: -(raw[d] - int(raw[d])))[: n - sum(counts.values())]:
        counts[d] += 1
    return {d: min(c, available.get(d, 0)) for d, c in counts.items()}, {
        d: round(v, 6) for d, v in eff.items()
    }


def _counts(items: Sequence[_Item]) -> dict[str, Any]:
    return {
        "records": len(items),
        "episodes": len({it.group for it in items}),
        "by_domain": dict(sorted(Counter(it.record.domain for it in items).items())),
        "by_source": dict(sorted(Counter(it.source for it in items).items())),
        "by_source_domain": {s: dict(sorted(c.items())) for s, c in sorted(_nested(items).items())},
    }


def _nested(items: Sequence[_Item]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for it in items:
        out[it.source][it.record.domain] += 1
    return out


def build_mixture(
    inputs: Sequence[str | Path],
    out: str | Path,
    mixture: MixtureSpec | None = None,
    *,
    names: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
    validation_fraction: float = 0.05,
    seed: int = 0,
    max_distance: int = 4,
    total: int | None = None,
    overwrite: bool = True,
) -> dict[str, Any]:
    """Write out/train, out/validation (datasets) and out/mix_manifest.json; return the manifest."""
    mixture = mixture or MixtureSpec()
    if not inputs:
        raise ValueError("mix: no input datasets")
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"mix: validation_fraction {validation_fraction} not in [0, 1)")
    names = list(names) if names is not None else [Path(p).name for p in inputs]
    if len(names) != len(inputs) or len(set(names)) != len(names):
        raise ValueError(f"mix: need one distinct name per input, got {names}")
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise ValueError(f"mix: weights for unknown sources {unknown}; sources: {names}")
    items = [
        _Item(name, reader, r)
        for name, path in zip(names, inputs, strict=True)
        for reader in [DatasetReader(path)]
        for r in reader
    ]
    read = Counter(it.source for it in items)
    items, removed = remove_near_duplicates(items, max_distance)
    by_domain: dict[str, list[_Item]] = defaultdict(list)
    for it in items:
        by_domain[it.record.domain].append(it)
    available = {d: len(v) for d, v in by_domain.items()}
    targets, effective = domain_targets(available, mixture, total)
    chosen: list[_Item] = []
    for d in DATA_DOMAINS:
        pool = by_domain.get(d, [])
        # weighted sampling without replacement (Efraimidis–Spirakis keys), deterministic in seed
        pool = sorted(
            pool,
            key=lambda it: (
                -(_u(seed, f"pick/{it.source}/{it.record.id}") ** (1 / weights.get(it.source, 1.0)))
            ),
        )
        chosen += pool[: targets[d]]
    split = {"train": [], "validation": []}  # type: dict[str, list[_Item]]
    for it in chosen:
        split["validation" if _u(seed, f"split/{it.group}") < validation_fraction else "train"].append(it)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    renamed = 0
    for name, part in split.items():
        ids: set[str] = set()
        with DatasetWriter(
            out / name, overwrite=overwrite, sources=names, created_by="venus_core.data.mix"
        ) as w:
            for it in sorted(
                part,
                key=lambda it: (
                    DATA_DOMAINS.index(it.record.domain),
                    _u(seed, f"order/{it.source}/{it.record.id}"),
                ),
            ):
                record = it.record
                if record.id in ids:
                    record = record.model_copy(update={"id": f"{it.source}:{record.id}"})
                    renamed += 1
                ids.add(record.id)
                w.copy_record(record, it.reader)
    train_groups = {it.group for it in split["train"]}
    leaked = sorted(g for g in {it.group for it in split["validation"]} if g in train_groups)
    if leaked:  # cannot happen by construction; fail closed if it ever does
        raise RuntimeError(f"mix: episodes in both splits: {leaked[:5]}")
    manifest = {
        "inputs": [
            {"name": n, "path": str(p), "records": read[n]} for n, p in zip(names, inputs, strict=True)
        ],
        "ratios": {d: getattr(mixture, d) for d in DATA_DOMAINS},
        "effective_ratios": effective,
        "dropped_domains": sorted(
            d for d in DATA_DOMAINS if getattr(mixture, d) > 0 and not available.get(d)
        ),
        "near_duplicates_removed": {
            "total": sum(removed.values()),
            "by_source": dict(sorted(removed.items())),
            "max_distance": max_distance,
        },
        "available_by_domain": {d: available.get(d, 0) for d in DATA_DOMAINS},
        "selected_by_domain": targets,
        "unused_by_domain": {d: available.get(d, 0) - targets[d] for d in DATA_DOMAINS},
        "ids_renamed": renamed,
        "validation_fraction": validation_fraction,
        "seed": seed,
        "weights": weights,
        "splits": {name: _counts(part) for name, part in split.items()},
    }
    (out / "mix_manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return manifest
