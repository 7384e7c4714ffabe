"""Mid-training mixture: near-duplicate removal, domain ratios, episode-level split, manifest."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

from venus_core.config.spec import MixtureSpec
from venus_core.data import (
    DatasetReader,
    DatasetWriter,
    GroundingSample,
    Provenance,
    QASample,
    Trajectory,
    TrajectoryStep,
)
from venus_core.data.mix import build_mixture, dhash, domain_targets
from venus_core.data.validate import validate_dataset


def noise(seed: int, size: tuple[int, int] = (32, 24)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


def write_dataset(
    path: Path,
    n_per_domain: dict[str, int],
    seed: int,
    source: str = "src",
    steps_per_episode: int = 1,
    start: int = 0,
) -> Path:
    with DatasetWriter(path) as w:
        i = start
        for domain, n in n_per_domain.items():
            for _ in range(n):
                i += 1
                img = w.put_image(noise(seed * 100_000 + i))
                prov = Provenance(source=source, source_id=str(i))
                if domain == "grounding":
                    w.write(
                        GroundingSample(
                            id=f"{source}-g{i}",
                            image=img,
                            image_size=(32, 24),
                            platform="web",
                            instruction=f"click item {i}",
                            box=(10, 10, 50, 50),
                            provenance=prov,
                        )
                    )
                elif domain == "navigation":
                    t = Trajectory(
                        id=f"{source}-t{i}",
                        episode_id=f"ep{i}",
                        platform="mobile",
                        goal=f"goal {i}",
                        steps=[
                            TrajectoryStep(
                                image=img,
                                image_size=(32, 24),
                                think="",
                                action="Click(box=(5,5))",
                                conclusion="",
                            )
                            for _ in range(steps_per_episode)
                        ],
                        success=True,
                        provenance=prov,
                    )
                    for s in t.to_steps() if steps_per_episode > 1 else [t]:
                        w.write(s)
                else:
                    w.write(
                        QASample(
                            id=f"{source}-q{i}",
                            domain=domain,
                            image=img,
                            image_size=(32, 24),
                            platform="web",
                            question=f"what is {i}?",
                            answer="x",
                            provenance=prov,
                        )
                    )
    return path


def test_dhash_distances() -> None:
    a = noise(1, (64, 48))
    assert dhash(a) == dhash(a.copy())
    resized = a.resize((66, 50))
    assert bin(dhash(a) ^ dhash(resized)).count("1") <= 6
    assert bin(dhash(a) ^ dhash(noise(2, (64, 48)))).count("1") > 16


def test_domain_targets() -> None:
    spec = MixtureSpec()
    counts, eff = domain_targets(
        {"perception": 1000, "vqa": 1000, "grounding": 1000, "navigation": 323}, spec, None
    )
    assert (
        counts == {"perception": 208, "vqa": 221, "grounding": 248, "navigation": 323} and eff["vqa"] == 0.221
    )
    counts, _ = domain_targets(
        {"perception": 1000, "vqa": 1000, "grounding": 1000, "navigation": 1000}, spec, 100
    )
    assert sum(counts.values()) == 100 and counts["navigation"] == 32
    counts, eff = domain_targets({"grounding": 50, "navigation": 500}, spec, None)
    assert counts["perception"] == counts["vqa"] == 0 and counts["grounding"] == 50
    assert eff["grounding"] == pytest.approx(0.248 / 0.571, abs=1e-6) and counts["navigation"] == 65


def test_mix_ratios_dedup_split_and_manifest(tmp_path: Path) -> None:
    a = write_dataset(
        tmp_path / "a",
        {"perception": 30, "vqa": 30, "grounding": 30, "navigation": 40},
        seed=1,
        source="a",
        steps_per_episode=3,
    )
    b = write_dataset(tmp_path / "b", {"grounding": 10}, seed=1, source="b")  # other instructions: kept
    dup = tmp_path / "dup"
    with DatasetWriter(dup) as w:  # near-copies of a's grounding samples: resampled pixels, same instruction
        for r in list(DatasetReader(a).iter_records(kind="grounding"))[:5]:
            img = DatasetReader(a).open_image(r.image).resize((33, 25)).resize((32, 24))
            w.write(r.model_copy(update={"image": w.put_image(img)}))
    m = build_mixture([a, b, dup], tmp_path / "mix", names=["a", "b", "dup"], validation_fraction=0.3, seed=3)
    assert m["near_duplicates_removed"]["by_source"] == {"dup": 5}
    sel = m["selected_by_domain"]
    avail = m["available_by_domain"]
    assert avail == {"perception": 30, "vqa": 30, "grounding": 40, "navigation": 120}
    total = sum(sel.values())
    assert total == 135 and all(abs(sel[d] - total * r) <= 1 for d, r in m["ratios"].items())
    train, val = m["splits"]["train"], m["splits"]["validation"]
    assert train["records"] + val["records"] == total and val["records"] > 0
    assert sum(train["by_source"].values()) == train["records"]
    episodes = {}
    for split in ("train", "validation"):
        assert validate_dataset(tmp_path / "mix" / split).ok
        for r in DatasetReader(tmp_path / "mix" / split):
            if r.kind == "navigation_step":
                episodes.setdefault(r.episode_id, set()).add(split)
    assert episodes and all(len(s) == 1 for s in episodes.values())
    assert json.loads((tmp_path / "mix" / "mix_manifest.json").read_text()) == m


def test_mix_weights_and_resample_copies(tmp_path: Path) -> None:
    a = write_dataset(tmp_path / "a", {"grounding": 60}, seed=5, source="a")
    b = write_dataset(tmp_path / "b", {"grounding": 60}, seed=6, source="b")
    only_g = MixtureSpec(perception=0, vqa=0, grounding=1.0, navigation=0)
    m = build_mixture([a, b], tmp_path / "m1", only_g, weights={"b": 9.0}, total=40, validation_fraction=0.0)
    assert m["splits"]["train"]["by_source"]["b"] > 28
    with pytest.raises(ValueError, match="unknown sources"):
        build_mixture([a], tmp_path / "m2", only_g, weights={"zzz": 1.0})
    with DatasetWriter(tmp_path / "c") as w:
        r = next(iter(DatasetReader(a)))
        w.put_image(DatasetReader(a).image_path(r.image).read_bytes())
        w.write(r)
        w.write(r.model_copy(update={"id": r.id + "~r1", "meta": {"resample_of": r.id}}))
    m = build_mixture([tmp_path / "c"], tmp_path / "m3", only_g, validation_fraction=0.0)
    assert m["near_duplicates_removed"]["total"] == 0 and m["splits"]["train"]["records"] == 2
    m = build_mixture([a, tmp_path / "c"], tmp_path / "m4", only_g, names=["a", "c"], validation_fraction=0.0)
    assert m["near_duplicates_removed"]["by_source"] == {
        "c": 2
    }  # original is a duplicate of a's, so is its copy
    random.seed(0)



@settings(max_examples=200, deadline=None)
@given(avail=st.dictionaries(st.sampled_from(["perception", "vqa", "grounding", "navigation"]),
                             st.integers(0, 5000), min_size=1),
       total=st.one_of(st.none(), st.integers(1, 3000)))
@example(avail={"vqa": 3365, "grounding": 3777, "navigation": 4918}, total=None)  # failed with the rounded shares
def test_domain_targets_properties(avail: dict[str, int], total: int | None) -> None:
    spec = MixtureSpec()
    counts, eff = domain_targets(avail, spec, total)
    n = sum(counts.values())
    assert all(0 <= counts[d] <= avail.get(d, 0) for d in counts)
    if total is not None:
        assert n <= total
    live = [d for d in counts if avail.get(d, 0) > 0]
    if live and n:
        assert sum(eff.values()) == pytest.approx(1.0, abs=1e-5)
        assert all(abs(counts[d] - n * eff[d]) <= 1 for d in live)
        # largest corpus: one more record would make some domain's share exceed what it has, with the
        # exact shares (`eff` is rounded to 6 decimals: with 4,918 navigation records of n = 12,058 the
        # rounded share fits a 12,059th record by 0.002 and the exact one does not)
        exact = {d: getattr(spec, d) / sum(getattr(spec, e) for e in live) for d in live}
        assert any((n + 1) * exact[d] > avail[d] + 1e-9 for d in live) or (total is not None and n == total)
