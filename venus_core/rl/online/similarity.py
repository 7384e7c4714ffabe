"""Goal similarity for the online task pool: a small local embedder and greedy deduplication.

Why: UI-Venus-1.5 deduplicates its online task pool by the semantic similarity of task goals, and
the pool must also refuse training tasks that restate a held-out task. The pool takes any
`Embedder` (unit-norm vectors, cosine = dot product); the default, `HashingEmbedder`, needs no
model download and gives the same vectors on every machine and process (crc32, never Python's
salted `hash()`).

Departure from the paper: the paper's embeddings are semantic; hashed character 3-grams plus
word unigrams measure surface overlap, so paraphrases with different words score low and
templated goals that differ in one short word ("turn on Wi-Fi" / "turn off Wi-Fi") can score
above the threshold. `dedupe` therefore returns every drop with the key it duplicated and the
similarity, so the pool's report shows what the threshold removed.
"""

from __future__ import annotations

import unicodedata
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from venus_core.envs.base import Task


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-norm vector per text."""
        ...


class Keyed(Protocol):
    """What `dedupe` reads of a pool task: its unique key, its task's goal and its start-state
    fingerprint ("" = unknown)."""

    @property
    def key(self) -> str: ...

    @property
    def start(self) -> str: ...

    @property
    def task(self) -> Task: ...


K = TypeVar("K", bound=Keyed)


@dataclass(frozen=True)
class HashingEmbedder:
    """Hashed character `ngram`-grams of the normalised, space-padded text plus its word unigrams,
    counted into `dim` buckets by crc32, L2-normalised. Normalised: casefolded, punctuation
    (Unicode category P*) read as spaces, whitespace collapsed; CJK text is covered by the
    character n-grams (it has no spaces to split words on)."""

    dim: int = 2048
    ngram: int = 3

    def __post_init__(self) -> None:
        if self.dim < 1 or self.ngram < 1:
            raise ValueError(f"HashingEmbedder: dim and ngram must be >= 1, got {self.dim}, "
                             f"{self.ngram}")

    def features(self, text: str) -> list[str]:
        spaced = "".join(" " if unicodedata.category(c).startswith("P") else c
                         for c in text.casefold())
        norm = " ".join(spaced.split()) or text.strip()
        padded = f" {norm} "
        n = self.ngram
        grams = [f"c:{padded[i:i + n]}" for i in range(max(1, len(padded) - n + 1))]
        return grams + [f"w:{w}" for w in norm.split()]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vec = np.zeros(self.dim, dtype=np.float64)
            for f in self.features(text):
                vec[zlib.crc32(f.encode("utf-8")) % self.dim] += 1.0
            out.append((vec / np.linalg.norm(vec)).tolist())
        return out


def dedupe(tasks: Sequence[K], embedder: Embedder, threshold: float,
           against: Sequence[K] = (), *, scope: str = "start") -> tuple[list[K], list[tuple[K, str, float]]]:
    """Greedy, in input order: a task is dropped when its key was seen before (in `against` or
    among the tasks kept so far) or its goal's cosine similarity to one of those is > `threshold`
    and both start from the same state (equal `start` fingerprints, or either one unknown): the
    same goal on another start state is another task (measured: the nine goals of level-1 boards
    over different boards left no task of a 64-task pool with a level-1 held-out set when only
    goals were compared). `scope="goal"` compares every goal with every goal, whatever the start.

    Returns the kept tasks and every dropped one with the key it duplicated (the most similar
    one) and the similarity; `against` itself is never returned."""
    if scope not in ("start", "goal"):
        raise ValueError(f"dedupe: scope must be 'start' or 'goal', got {scope!r}")
    if not tasks:
        return [], []
    vecs = np.asarray(embedder.embed([t.task.goal for t in [*against, *tasks]]), dtype=np.float64)
    norms = np.linalg.norm(vecs, axis=1)
    if not np.allclose(norms, 1.0, atol=1e-6):
        raise ValueError(f"dedupe: the embedder's vectors are not unit-norm "
                         f"(norms {norms.min():.4f}..{norms.max():.4f})")
    seen = np.empty_like(vecs)
    seen_keys: list[str] = []
    seen_starts: list[str] = []
    index: dict[str, int] = {}
    for i, t in enumerate(against):
        seen[i] = vecs[i]
        seen_keys.append(t.key)
        seen_starts.append(t.start)
        index.setdefault(t.key, i)
    kept: list[K] = []
    dropped: list[tuple[K, str, float]] = []
    for j, t in enumerate(tasks):
        v = vecs[len(against) + j]
        n = len(seen_keys)
        if t.key in index:
            dropped.append((t, t.key, float(seen[index[t.key]] @ v)))
            continue
        if n:
            sims = seen[:n] @ v
            if t.start and scope == "start":  # another known start state is another task, whatever the goal
                sims = np.where([not s or s == t.start for s in seen_starts], sims, -np.inf)
            best = int(np.argmax(sims))
            if sims[best] > threshold:
                dropped.append((t, seen_keys[best], float(sims[best])))
                continue
        seen[n] = v
        seen_keys.append(t.key)
        seen_starts.append(t.start)
        index[t.key] = n
        kept.append(t)
    return kept, dropped
