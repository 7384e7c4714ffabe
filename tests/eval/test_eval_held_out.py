"""The fixed held-out suites of the evaluate stage: size, determinism, reserved seeds, the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from venus_core.config import AgentSpec, load_spec
from venus_core.config.spec import HeldOutSuitesSpec
from venus_core.data.schema import GroundingSample, Trajectory
from venus_core.data.store import DatasetReader
from venus_core.eval import held_out
from venus_core.eval.held_out import build_suites, held_out_suites, suite_digest

SMALL = HeldOutSuitesSpec(grounding_levels=[0, 3], grounding_per_level=6, navigation_steps=6, refusal_share=0.5)


def _content(root: Path) -> dict[str, object]:
    """What must be identical between two generations: shard hashes, image count, suites.json."""
    out: dict[str, object] = {"suites": json.loads((root / "suites.json").read_text())}
    for name in ("grounding", "navigation"):
        manifest = DatasetReader(root / name).manifest
        out[name] = ([(s.name, s.sha256, s.records) for s in manifest.shards], manifest.images, manifest.image_bytes)
    return out


def test_the_default_suites_have_the_sizes_the_spec_asks_for(tmp_path: Path) -> None:
    section = load_spec("agents/venus-tiny").eval.held_out_suites
    assert (section.grounding_levels, section.grounding_per_level, section.navigation_steps) == ([0, 1, 2], 100, 200)
    root, info = build_suites(section, tmp_path)
    grounding = [r for r in DatasetReader(root / "grounding") if isinstance(r, GroundingSample)]
    assert len(grounding) == 300 == info["grounding"]["samples"]
    levels = {lvl: sum(1 for r in grounding if r.meta["level"] == lvl) for lvl in (0, 1, 2)}
    assert levels == {0: 100, 1: 100, 2: 100}
    refusals = sum(1 for r in grounding if r.box is None)
    assert refusals == info["grounding"]["refusals"] and 40 <= refusals <= 80  # refusal_share 0.2 of 300
    episodes = [r for r in DatasetReader(root / "navigation") if isinstance(r, Trajectory)]
    steps = {p: sum(len(e.steps) for e in episodes if e.platform == p) for p in ("mobile", "web")}
    assert all(n >= 100 for n in steps.values()) and sum(steps.values()) == info["navigation"]["total_steps"] >= 200
    assert all(e.meta["level"] == 3 for e in episodes)
    first, last = section.seed_range
    assert all(first <= r.provenance.seed <= last for r in [*grounding, *episodes])
    assert section.grounding_free_levels == [1, 2]  # levels 1-2 again, off the grid
    free = [r for r in DatasetReader(root / "grounding-free") if isinstance(r, GroundingSample)]
    assert len(free) == 200 == info["grounding_free"]["samples"] and info["grounding_free"]["by_level"] == {"1": 100, "2": 100}
    assert all(r.provenance.extra["layout"] == "free" and first <= r.provenance.seed <= last for r in free)
    assert {r.provenance.seed for r in free}.isdisjoint(r.provenance.seed for r in [*grounding, *episodes])
    suites = held_out_suites(section, tmp_path)  # cached: the same directories
    assert [(s.name, s.evaluator, s.data) for s in suites] == [
        ("held-out-grounding", "grounding", str(root / "grounding")),
        ("held-out-grounding-free", "grounding", str(root / "grounding-free")),
        ("held-out-navigation", "nav_offline", str(root / "navigation"))]
    # without boards off the grid (the section's default) there is no third suite
    plain = section.model_copy(update={"grounding_free_levels": []})
    assert [s.name for s in held_out_suites(plain, tmp_path)] == ["held-out-grounding", "held-out-navigation"]


def test_generation_is_deterministic_and_cached_by_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = build_suites(SMALL, tmp_path / "a")
    b, _ = build_suites(SMALL, tmp_path / "b")
    assert a.name == b.name == suite_digest(SMALL)
    assert _content(a) == _content(b)
    grounding = list(DatasetReader(a / "grounding"))
    assert any(r.box is None for r in grounding) and any(r.box is not None for r in grounding)  # type: ignore[union-attr]

    def no_generation(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached suite was generated again")

    monkeypatch.setattr("venus_core.data.synth.synthesize", no_generation)
    assert build_suites(SMALL, tmp_path / "a")[0] == a  # second model / second run: reused, not rebuilt
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [a.name]  # no temporary left behind


def test_the_digest_follows_the_suite_fields_and_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    base = suite_digest(SMALL)
    assert suite_digest(SMALL.model_copy(update={"cache_dir": "/elsewhere", "enabled": False})) == base
    for change in ({"grounding_per_level": 7}, {"refusal_share": 0.1}, {"navigation_steps": 8},
                   {"seed_range": (800000, 800999)}, {"grounding_levels": [0, 2]}, {"grounding_free_levels": [1]}):
        assert suite_digest(SMALL.model_copy(update=change)) != base, change
    monkeypatch.setattr(held_out, "generator_digest", lambda: "another generator")
    assert suite_digest(SMALL) != base


def test_a_cached_suite_that_disagrees_with_its_record_is_an_error(tmp_path: Path) -> None:
    root, info = build_suites(SMALL, tmp_path)
    info["grounding"]["samples"] += 1
    (root / "suites.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=f"{root}: cached held-out suite does not match"):
        build_suites(SMALL, tmp_path)


def test_training_data_may_not_use_the_reserved_seeds() -> None:
    spec = load_spec("agents/venus-tiny")
    data = spec.data.model_dump(mode="json")
    data["sources"][2]["synth"]["seed"] = 700010
    with pytest.raises(ValidationError, match=r"data\.sources\[2\]\.synth\.seed \('synth-mixture-l2'\): seed 700010 "
                                              r"lies in eval\.held_out_suites\.seed_range \[700000, 700999\]"):
        AgentSpec.model_validate({**spec.model_dump(mode="json", by_alias=True), "data": data})
    with pytest.raises(Exception, match=r"data\.sources\[0\]\.synth\.seed"):
        load_spec("agents/venus-tiny", ["eval.held_out_suites.seed_range=[0,99]"])
    # with the suites off the range reserves nothing
    load_spec("agents/venus-tiny", ["eval.held_out_suites.seed_range=[0,99]", "eval.held_out_suites.enabled=false"])
    with pytest.raises(ValidationError, match="must hold at least 12 seeds"):
        HeldOutSuitesSpec(seed_range=(5, 10))
    with pytest.raises(ValidationError, match="lists a level twice"):
        HeldOutSuitesSpec(grounding_levels=[1, 1])


def test_boards_off_the_grid_are_levels_1_2_with_their_own_seeds() -> None:
    section = HeldOutSuitesSpec(grounding_free_levels=[2, 1])
    first = section.seed_range[0]
    assert (section.grounding_free_seed(1), section.grounding_free_seed(2)) == (first + 21, first + 22)
    with pytest.raises(ValidationError, match="less than or equal to 2|greater than or equal to 1"):
        HeldOutSuitesSpec(grounding_free_levels=[0])
    with pytest.raises(ValidationError, match="lists a level twice"):
        HeldOutSuitesSpec(grounding_free_levels=[1, 1])
    with pytest.raises(ValidationError, match="at least 23 seeds"):
        HeldOutSuitesSpec(seed_range=(700000, 700015), grounding_free_levels=[2])
    HeldOutSuitesSpec(seed_range=(700000, 700015))  # 12 seeds are enough without them
