"""Training data of mid-training: Venus datasets -> per-domain pools and an episode-level held-out split.

Why split by episode: the steps of one navigation episode share screens, goal and history; putting
some in training and others in validation leaks the answer, so the held-out set is chosen per
episode (every step of an episode lands on the same side). Grounding and QA records are their own
"episode". The choice is a hash of (seed, episode key), so it is stable when datasets grow or are
read in another order, and the same on every rank.

Trajectories are expanded with `Trajectory.to_steps(history_len)`; navigation steps stored as
`NavigationStep` records are used as they are. Images stay on disk and are opened per batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from venus_core.data import DatasetReader, GroundingSample, NavigationStep, QASample, Trajectory
from venus_core.actions import render_point
from venus_core.models.batches import Example, record_to_example

Sample = GroundingSample | NavigationStep | QASample


@dataclass(frozen=True)
class Item:
    """One trainable record and the dataset it reads its image from."""

    record: Sample
    reader: DatasetReader

    def example(self) -> Example:
        return record_to_example(self.record, self.reader.open_image)


@dataclass
class Corpus:
    """Per-domain pools of training items and the held-out items (never trained on)."""

    train: dict[str, list[Item]] = field(default_factory=dict)
    held_out: dict[str, list[Item]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, dict[str, int]]:
        return {
            "train": {d: len(v) for d, v in sorted(self.train.items())},
            "held_out": {d: len(v) for d, v in sorted(self.held_out.items())},
        }


def episode_key(record: Sample) -> str:
    return record.episode_id if isinstance(record, NavigationStep) else record.id


def is_held_out(key: str, fraction: float, seed: int) -> bool:
    """Deterministic episode-level split: True for about `fraction` of the keys."""
    if fraction <= 0:
        return False
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def load_corpus(dirs: Sequence[str | Path], *, validation_fraction: float, history_len: int, seed: int) -> Corpus:
    """Read every dataset in `dirs`; expand trajectories; split off the held-out episodes."""
    if not dirs:
        raise ValueError("no training data: pass at least one dataset directory")
    corpus = Corpus()
    for d in dirs:
        path = Path(d)
        if not (path / "manifest.json").is_file():
            raise FileNotFoundError(f"{path}: not a Venus dataset (no manifest.json)")
        reader = DatasetReader(path)
        corpus.sources.append(str(path))
        for record in reader:
            samples: list[Sample] = record.to_steps(history_len) if isinstance(record, Trajectory) else [record]
            for s in samples:
                side = corpus.held_out if is_held_out(episode_key(s), validation_fraction, seed) else corpus.train
                side.setdefault(s.domain, []).append(Item(s, reader))
    if not any(corpus.train.values()):
        raise ValueError(f"no training records in {', '.join(map(str, dirs))} after the held-out split")
    return corpus


@dataclass(frozen=True)
class CoarseItem(Item):
    """A grounding item whose target point is snapped to the centre of its cell in a `grid` x `grid`
    partition of the 0-1000 frame (e.g. 4 -> 125/375/625/875); refusals stay `[-1,-1]`.

    Why: a coarse-to-fine curriculum for a model trained from scratch. Measured on level-0 screens
    (docs/learning.md): with exact `[x,y]` targets the tiny model's answers stayed independent of
    the image for 1,200 steps, while a 4-class position target is learned in ~200 steps; the
    coarse stage builds the "find the target, read its place" circuit that exact targets refine.
    Same output format as the grounding task, so nothing has to be unlearned.
    """

    grid: int = 4

    def example(self) -> Example:
        ex = super().example()
        record = self.record
        if not isinstance(record, GroundingSample) or record.box is None:
            return ex
        x1, y1, x2, y2 = record.box
        cell = 1000 / self.grid

        def snap(v: int) -> int:
            return int(min(self.grid - 1, v // cell) * cell + cell / 2)

        return Example(ex.messages, render_point((snap((x1 + x2) // 2), snap((y1 + y2) // 2))), ex.record_id)


def coarse_targets(corpus: Corpus, grid: int, *, keep_refusals: bool = False) -> tuple[Corpus, int]:
    """`corpus` with its TRAINING grounding items' targets snapped to a `grid` x `grid` cell centre
    (held-out items keep their exact boxes, so held-out hit rates stay the real metric), and the
    number of refusal items held back from this stage's training (unless `keep_refusals`).

    Refusals (`[-1,-1]`: the named element is not on screen) are held back because with them in the
    coarse stage the answers stayed independent of the image for 500 steps where the same run
    without them found the targets (docs/learning.md); the exact stage that follows trains on them.
    """
    if grid < 2:
        raise ValueError(f"coarse grid must be >= 2 cells per side, got {grid}")
    train: dict[str, list[Item]] = {}
    held_back = 0
    for d, items in corpus.train.items():
        out: list[Item] = []
        for i in items:
            if isinstance(i.record, GroundingSample):
                if i.record.box is None and not keep_refusals:
                    held_back += 1
                    continue
                out.append(CoarseItem(i.record, i.reader, grid))
            else:
                out.append(i)
        if out:
            train[d] = out
    if not any(train.values()):
        raise ValueError("coarse stage: no training records left after holding back refusals")
    return Corpus(train=train, held_out=corpus.held_out, sources=list(corpus.sources)), held_back


__all__ = ["CoarseItem", "Corpus", "Item", "coarse_targets", "episode_key", "is_held_out", "load_corpus"]
