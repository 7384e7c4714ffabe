"""Rebuilding low-scoring samples whose source can make another one: the synthetic GUI world.

Why: UI-Venus-1.5 rebuilds 0–3 samples "when the source allows" instead of discarding them, which
keeps rare task families in the corpus. For imported datasets nothing can be regenerated (the
paper re-collects on devices; we cannot), so they are discarded. A synthetic record names its
generator, seed, level and index in its provenance; the replacement is drawn from the same
(seed, kind, level) family with a fresh per-attempt generator and the original's platform and
screen size, keeps the original id, and records what it replaced in `provenance.extra`.
"""

from __future__ import annotations

import random
import re

from venus_core.data.schema import NavigationStep, Provenance, QASample
from venus_core.data.store import DatasetWriter
from venus_core.data.synth import generate as synth
from venus_core.scoring.rules import AnyRecord

_SOURCE_ID = re.compile(r"^(grounding|navigation|perception|vqa)-(-?\d+)-(\d+)$")


def rebuildable(record: AnyRecord) -> bool:
    """True when the record came from the synthetic world and names its family.

    A navigation *step* is not rebuildable: its family makes whole episodes, and every step of
    one episode would be replaced by the same new episode.
    """
    if isinstance(record, NavigationStep):
        return False
    p = record.provenance
    return (
        p.generator == synth.GENERATOR
        and p.seed is not None
        and _SOURCE_ID.match(p.source_id) is not None
        and isinstance(p.extra.get("level"), int)
    )


def rebuild(record: AnyRecord, writer: DatasetWriter, attempt: int = 0) -> AnyRecord:
    """A replacement record from the same synthetic family, its images put in `writer`."""
    if not rebuildable(record):
        raise ValueError(f"record {record.id!r}: source {record.provenance.source!r} cannot rebuild samples")
    m = _SOURCE_ID.match(record.provenance.source_id)
    assert m is not None
    domain, seed, idx = m.group(1), int(m.group(2)), int(m.group(3))
    level = int(record.provenance.extra["level"])  # type: ignore[arg-type]
    rng = random.Random(f"{seed}:{domain}:{level}:{idx}:rebuild:{attempt}")
    size = tuple(record.image_size if hasattr(record, "image_size") else record.steps[0].image_size)  # type: ignore[union-attr]
    ctx = synth._Ctx(rng, level, record.platform, size)  # noqa: SLF001 - the generator's per-sample context
    new: AnyRecord
    if domain == "grounding":
        new = synth.grounding_sample(rng, level, ctx, writer, seed, idx)
    elif domain == "navigation":
        new = synth.trajectory(rng, level, ctx, writer, seed, idx)
    else:
        assert isinstance(record, QASample)
        new = synth.qa_sample(rng, level, ctx, writer, seed, idx, record.domain)
    prov = Provenance(
        **{
            **new.provenance.model_dump(),
            "extra": {**new.provenance.extra, "rebuilt_from": record.id, "rebuild_attempt": attempt},
        }
    )
    update: dict[str, object] = {"id": record.id, "provenance": prov}
    if hasattr(record, "episode_id"):
        update["episode_id"] = record.episode_id  # type: ignore[union-attr]
    return new.model_copy(update=update)
