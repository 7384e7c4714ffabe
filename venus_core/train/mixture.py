"""Mixture sampler: every batch's domains are drawn by the MixtureSpec ratios from per-domain pools.

Why per batch: UI-Venus-1.5 mid-trains on a fixed domain mixture (perception / GUI-VQA / grounding /
navigation = 20.8 / 22.1 / 24.8 / 32.3 %). Shuffling one concatenated corpus honours the ratios only
on average and only if the corpus was built in those proportions; drawing each batch from
per-domain pools honours them whatever the pool sizes are (small pools are revisited, large ones
subsampled), and the counts actually drawn are reported.

How: each batch gives domain d floor(ratio_d * batch_size) samples or one more; the extra samples
go to the domains furthest behind their running target `ratio_d * batch_size * b` (b batches so
far). A batch of 16 with the paper's ratios therefore holds 3–4 perception, 3–4 VQA, 3–4 grounding
and 5–6 navigation samples, and the running totals stay within one sample of the ratios (tested
over 200 batches). Inside a pool,
samples are visited in a fresh permutation per pass (seeded by (seed, domain, pass)), so the whole
sampler state is a handful of integers: `state_dict()` / `load_state_dict()` make resume exact.

Departure: a domain whose ratio is positive but whose pool is empty is dropped and the remaining
ratios renormalised (the paper's corpus always has all four); `effective_ratios` says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from venus_core.config.spec import DATA_DOMAINS, MixtureSpec

T = TypeVar("T")


class MixtureSampler:
    """Draws batches of (domain, index-in-pool) pairs by the mixture ratios.

    `pool_sizes` maps a domain to the number of samples in its pool (indices 0..n-1).
    """

    def __init__(self, pool_sizes: Mapping[str, int], mixture: MixtureSpec, batch_size: int, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        unknown = sorted(set(pool_sizes) - set(DATA_DOMAINS))
        if unknown:
            raise ValueError(f"mixture sampler: unknown domain(s) {unknown}; known: {list(DATA_DOMAINS)}")
        ratios = {d: float(getattr(mixture, d)) for d in DATA_DOMAINS}
        self.requested_ratios = dict(ratios)
        live = {d: r for d, r in ratios.items() if r > 0 and pool_sizes.get(d, 0) > 0}
        total = sum(live.values())
        if total <= 0:
            sizes = {d: pool_sizes.get(d, 0) for d in DATA_DOMAINS}
            raise ValueError(
                f"mixture sampler: no domain has both a positive ratio and samples (ratios {ratios}, pools {sizes})"
            )
        self.domains: list[str] = [d for d in DATA_DOMAINS if d in live]
        self.effective_ratios = {d: live[d] / total for d in self.domains}
        self.dropped = [d for d in DATA_DOMAINS if ratios[d] > 0 and d not in live]
        self.pool_sizes = {d: int(pool_sizes[d]) for d in self.domains}
        self.batch_size = batch_size
        self.seed = seed
        self.batches = 0
        self.drawn = {d: 0 for d in self.domains}
        self._pos = {d: 0 for d in self.domains}
        self._pass = {d: 0 for d in self.domains}
        self._perm: dict[str, np.ndarray] = {d: self._permutation(d, 0) for d in self.domains}

    def _permutation(self, domain: str, pass_no: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, DATA_DOMAINS.index(domain), pass_no])
        return rng.permutation(self.pool_sizes[domain])

    def batch_counts(self) -> dict[str, int]:
        """How many samples of each domain the next batch takes (sums to batch_size).

        Each domain gets floor(ratio * batch) or one more; the extra samples go to the domains
        furthest behind their running target, which keeps every running total within one sample.
        """
        b = self.batches + 1
        base = {d: math.floor(self.effective_ratios[d] * self.batch_size) for d in self.domains}
        extra = self.batch_size - sum(base.values())
        deficit = {d: self.effective_ratios[d] * self.batch_size * b - self.drawn[d] - base[d] for d in self.domains}
        order = sorted(self.domains, key=lambda d: (-deficit[d], DATA_DOMAINS.index(d)))
        for d in order[:extra]:
            base[d] += 1
        return base

    def _take(self, domain: str) -> int:
        if self._pos[domain] >= self.pool_sizes[domain]:
            self._pass[domain] += 1
            self._pos[domain] = 0
            self._perm[domain] = self._permutation(domain, self._pass[domain])
        idx = int(self._perm[domain][self._pos[domain]])
        self._pos[domain] += 1
        return idx

    def next_batch(self) -> list[tuple[str, int]]:
        """The next batch: (domain, pool index) pairs, domains in the fixed order."""
        counts = self.batch_counts()
        out = [(d, self._take(d)) for d in self.domains for _ in range(counts[d])]
        for d, k in counts.items():
            self.drawn[d] += k
        self.batches += 1
        return out

    def report(self) -> dict[str, Any]:
        """The mixture actually drawn so far, next to the requested and effective ratios."""
        total = sum(self.drawn.values())
        return {
            "batches": self.batches,
            "samples": total,
            "requested_ratios": self.requested_ratios,
            "effective_ratios": self.effective_ratios,
            "dropped_empty_domains": self.dropped,
            "drawn": dict(self.drawn),
            "drawn_ratios": {d: (self.drawn[d] / total if total else 0.0) for d in self.domains},
            "pool_sizes": dict(self.pool_sizes),
            "passes": {d: self._pass[d] + self._pos[d] / self.pool_sizes[d] for d in self.domains},
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "batch_size": self.batch_size,
            "pool_sizes": dict(self.pool_sizes),
            "batches": self.batches,
            "drawn": dict(self.drawn),
            "pos": dict(self._pos),
            "pass": dict(self._pass),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("seed", "batch_size", "pool_sizes"):
            mine = self.state_dict()[key]
            if state.get(key) != mine:
                raise ValueError(
                    f"sampler state does not match this run: {key} was {state.get(key)!r}, now {mine!r}"
                    " (resume needs the same data, batch size and seed)"
                )
        self.batches = int(state["batches"])
        self.drawn = {d: int(state["drawn"][d]) for d in self.domains}
        self._pos = {d: int(state["pos"][d]) for d in self.domains}
        self._pass = {d: int(state["pass"][d]) for d in self.domains}
        self._perm = {d: self._permutation(d, self._pass[d]) for d in self.domains}


def split_for_rank(batch: Sequence[T], rank: int, world: int) -> list[T]:
    """This rank's share of a global batch (strided, so every rank sees the domain mix; offline
    GRPO splits its groups the same way)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside 0..{world - 1}")
    return list(batch[rank::world])


__all__ = ["MixtureSampler", "split_for_rank"]
