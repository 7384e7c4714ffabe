"""The fixed held-out suites of the evaluate stage: grounding by level and navigation, from reserved seeds.

Why: the scored mixture's validation split (~81 records of every kind) cannot tell two stages
apart: its intervals are wider than the gains. These suites are large enough to (defaults of
`eval.held_out_suites`: 3 levels x 100 grounding samples, ~20 % of them refusals whose answer is
`[-1,-1]`; at least 200 level-3 navigation steps, half mobile and half web), come from seeds no
stage trains on (`seed_range`, checked when the spec loads), and are the same for every model of
a run and every run of a spec: the synthetic world seeds each record by (seed, kind, level,
index), so a seed gives the same records whatever else is generated. With
`grounding_free_levels`, levels 1-2 are scored again on boards off the grid (buttons of random size
and place, `synthesize(layout="free")`) as a suite of their own: the grid puts every button at one
of nine places, and a model can learn those places instead of the match (the shipped tiny
bootstrap: level 1 100 % on the grid, 24.5 % off it; docs/learning.md).

Cache: `cache_dir/<digest>/`, where the digest covers the suite section (all fields but
`enabled` and `cache_dir`), the synthetic generator's source files and `LAYOUT`; changing any of
them makes a new suite instead of reusing a stale one (system fonts are not covered). Layout:
`grounding/`, `grounding-free/` (when asked for) and `navigation/` (Venus datasets) and
`suites.json` (section, digest, counts). A suite is built in a temporary sibling and renamed into place, so concurrent evaluate jobs never
read a half-written one; the loser of a race discards its copy. A cached directory whose
`suites.json` disagrees with its datasets is an error naming it (fail closed, never regenerated
over).

Navigation suites keep whole episodes (episode success stays defined): per platform, episodes
are taken in index order until their steps reach half of `navigation_steps`, so the suite holds
that many steps or a few more.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from venus_core.config.spec import EvalSuiteSpec, HeldOutSuitesSpec
from venus_core.data.schema import Trajectory
from venus_core.data.store import DatasetReader, DatasetWriter

LAYOUT = 2
"""Version of the suite directory layout and of the selection rules below (part of the digest)."""

SUITES_JSON = "suites.json"
GROUNDING = "grounding"
GROUNDING_FREE = "grounding-free"
NAVIGATION = "navigation"
SUITE_NAMES = {GROUNDING: "held-out-grounding", GROUNDING_FREE: "held-out-grounding-free",
               NAVIGATION: "held-out-navigation"}
_EPOCH = "1970-01-01T00:00:00+00:00"  # fixed manifest time stamp: same section => same manifest


def generator_digest() -> str:
    """sha256 over the synthetic world's source files (relative path and bytes, sorted)."""
    import venus_core.data.synth as synth

    root = Path(synth.__file__).parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def suite_digest(section: HeldOutSuitesSpec) -> str:
    """The cache key of a suite section: 16 hex digits of sha256 (see the module docstring)."""
    key = {"section": section.model_dump(mode="json", exclude={"enabled", "cache_dir"}),
           "generator": generator_digest(), "layout": LAYOUT}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _grounding(section: HeldOutSuitesSpec, parts: Path, out: Path, *, free: bool = False) -> dict[str, Any]:
    """The grounding suite (`free`: its levels `grounding_free_levels` on boards off the grid)."""
    from venus_core.data.synth import synthesize

    counts: dict[str, Any] = {"by_level": {}, "refusals": 0}
    levels = section.grounding_free_levels if free else section.grounding_levels
    what = "grounding off the grid" if free else "grounding"
    with DatasetWriter(out, sources=["synth"], created_at=_EPOCH,
                       created_by=f"venus_core.eval.held_out ({what}, levels {levels})") as w:
        for level in levels:
            part = parts / (f"grounding-free-l{level}" if free else f"grounding-l{level}")
            seed = section.grounding_free_seed(level) if free else section.grounding_seed(level)
            synthesize("grounding", section.grounding_per_level, level, seed, part,
                       refusal_share=section.refusal_share, layout="free" if free else "grid")
            reader = DatasetReader(part)
            n = 0
            for record in reader:
                w.copy_record(record, reader)
                n += 1
                counts["refusals"] += int(getattr(record, "box", 0) is None)
            counts["by_level"][str(level)] = n
    counts["samples"] = sum(counts["by_level"].values())
    return counts


def _episodes(section: HeldOutSuitesSpec, platform: str, parts: Path) -> tuple[DatasetReader, list[Trajectory]]:
    """The first episodes of `platform` whose steps reach half of `navigation_steps`."""
    from venus_core.data.synth import synthesize

    want = (section.navigation_steps + 1) // 2
    n = max(1, want // 2)  # level-3 episodes have 2-3 steps; double until enough
    while True:
        part = parts / f"navigation-{platform}-{n}"
        synthesize("navigation", n, section.navigation_level, section.navigation_seed(platform), part,
                   platform=platform)  # type: ignore[arg-type]
        reader = DatasetReader(part)
        chosen: list[Trajectory] = []
        steps = 0
        for record in reader:
            if not isinstance(record, Trajectory):
                raise RuntimeError(f"{part}: navigation synthesis wrote a {record.kind} record ({record.id})")
            chosen.append(record)
            steps += len(record.steps)
            if steps >= want:
                return reader, chosen
        n *= 2


def _navigation(section: HeldOutSuitesSpec, parts: Path, out: Path) -> dict[str, Any]:
    counts: dict[str, Any] = {"episodes": {}, "steps": {}}
    with DatasetWriter(out, sources=["synth"], created_at=_EPOCH,
                       created_by=f"venus_core.eval.held_out (navigation, level {section.navigation_level})") as w:
        for platform in section.PLATFORMS:
            reader, episodes = _episodes(section, platform, parts)
            for record in episodes:
                w.copy_record(record, reader)
            counts["episodes"][platform] = len(episodes)
            counts["steps"][platform] = sum(len(e.steps) for e in episodes)
    counts["total_steps"] = sum(counts["steps"].values())
    return counts


def _check(root: Path, digest: str) -> dict[str, Any]:
    """The `suites.json` of a cached suite, after checking it against its datasets."""
    try:
        info = json.loads((root / SUITES_JSON).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{root}: cached held-out suite without a readable {SUITES_JSON} ({exc}); "
                         "delete the directory to regenerate it") from None
    expected = {GROUNDING: info.get("grounding", {}).get("samples"),
                NAVIGATION: sum(info.get("navigation", {}).get("episodes", {}).values())}
    if "grounding_free" in info:
        expected[GROUNDING_FREE] = info["grounding_free"].get("samples")
    actual = {name: DatasetReader(root / name).manifest.records for name in expected}
    if info.get("digest") != digest or actual != expected:
        raise ValueError(f"{root}: cached held-out suite does not match its {SUITES_JSON} (digest "
                         f"{info.get('digest')!r} vs {digest!r}, records {actual} vs {expected}); "
                         "delete the directory to regenerate it")
    return dict(info)


def build_suites(section: HeldOutSuitesSpec, cache_dir: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The suite directory of `section` (generated unless cached) and its `suites.json` contents."""
    digest = suite_digest(section)
    root = Path(cache_dir if cache_dir is not None else section.cache_dir).absolute() / digest
    if root.is_dir():
        return root, _check(root, digest)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f"{digest}.tmp-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        parts = tmp / "parts"
        info = {"digest": digest, "layout": LAYOUT, "section": section.model_dump(mode="json"),
                "grounding": _grounding(section, parts, tmp / GROUNDING),
                **({"grounding_free": _grounding(section, parts, tmp / GROUNDING_FREE, free=True)}
                   if section.grounding_free_levels else {}),
                "navigation": _navigation(section, parts, tmp / NAVIGATION)}
        shutil.rmtree(parts)
        (tmp / SUITES_JSON).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, root)
        except OSError:
            if not root.is_dir():  # not a lost race: a real error
                raise
            shutil.rmtree(tmp)
            return root, _check(root, digest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root, info


def held_out_suites(section: HeldOutSuitesSpec, cache_dir: str | Path | None = None) -> list[EvalSuiteSpec]:
    """The evaluate stage's suites of `section`: grounding (by level), grounding off the grid (when
    `grounding_free_levels`) and goal-only offline navigation."""
    root, info = build_suites(section, cache_dir)
    free = ([EvalSuiteSpec(name=SUITE_NAMES[GROUNDING_FREE], evaluator="grounding", data=str(root / GROUNDING_FREE))]
            if "grounding_free" in info else [])
    return [EvalSuiteSpec(name=SUITE_NAMES[GROUNDING], evaluator="grounding", data=str(root / GROUNDING)), *free,
            EvalSuiteSpec(name=SUITE_NAMES[NAVIGATION], evaluator="nav_offline", data=str(root / NAVIGATION))]


__all__ = ["LAYOUT", "SUITE_NAMES", "build_suites", "generator_digest", "held_out_suites", "suite_digest"]
