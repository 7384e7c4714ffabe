"""ScreenSpot-v2 and ScreenSpot-Pro importers (grounding; also the evaluation suite's readers).

Source formats (public releases):

- ScreenSpot-v2 (OS-Copilot/ScreenSpot-v2): per-platform JSON lists `screenspot_mobile_v2.json`,
  `screenspot_desktop_v2.json`, `screenspot_web_v2.json` at the top of the source directory, and
  the screenshots in `screenspotv2_image/`. Entry: `img_filename`, `bbox` = [x, y, w, h] in
  pixels, `instruction`, `data_type` (text | icon), `data_source` (e.g. ios, android, macos).
  The platform comes from the file name (option `platform` overrides it).
- ScreenSpot-Pro (likaixin2000/ScreenSpot-Pro-GUI-Grounding): `annotations/<app>_<os>.json`
  lists and `images/<app>_<os>/...png`. Entry: `img_filename`, `bbox` = [x1, y1, x2, y2] in pixels,
  `img_size` [w, h], `instruction` (+ `instruction_cn`), `id`, `ui_type`, `group`, `application`,
  `platform` (the OS: macos / windows / linux; all desktop).

Both become `GroundingSample`s with the box normalised to 0–1000 against the *decoded* image size;
ScreenSpot-Pro's `img_size` must match that size (a mismatch means the box frame is unknown and
the entry is quarantined). No scrolling is involved. Option `images` names the screenshot folder
(relative to the source) when it is not the default one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from venus_core.config.registry import IMPORTERS
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    get,
    numbers,
    pixel_box,
    safe_id,
    text,
)
from venus_core.data.importers.sources import file_failure, read_json, relname
from venus_core.data.schema import GroundingSample, Provenance
from venus_core.data.store import AnyRecord

_V2_PLATFORMS = (("mobile", "mobile"), ("desktop", "desktop"), ("web", "web"))
_MOBILE_OS = {"android", "ios", "ipados"}


def _image_dir(root: SourceRoot, options: dict[str, str], defaults: tuple[str, ...]) -> str:
    if "images" in options:
        return options["images"]
    for d in defaults:
        if (root.path / d).is_dir():
            return d
    return ""


def _ui_type(value: Any, field: str) -> str | None:
    if value is None:
        return None
    return text(value, field)


def _extra(entry: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: entry[k] for k in keys if isinstance(entry.get(k), (str, int, float)) and not isinstance(entry.get(k), bool)}


def _entries(root: SourceRoot, files: list[Path]) -> Iterator[tuple[Path, str, int, Any] | Candidate]:
    for path in files:
        try:
            data = read_json(root, path)
            if not isinstance(data, list):
                raise Reject("<file>", f"expected a JSON list of entries, got {type(data).__name__}", "bad_record")
        except Reject as rej:
            yield file_failure(root, path, rej)
            continue
        rel = relname(root, path)
        for i, entry in enumerate(data):
            yield path, rel, i, entry


def _scan_v2(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    images = _image_dir(root, options, ("screenspotv2_image", "images"))
    files = sorted(p for p in root.path.glob("*.json") if p.is_file() or p.is_symlink())
    for item in _entries(root, files):
        if isinstance(item, Candidate):
            yield item
            continue
        path, rel, i, entry = item
        platform = options.get("platform") or next(
            (p for key, p in _V2_PLATFORMS if key in path.stem.lower()), None
        )

        def build(stage: ImageStage, entry: Any = entry, i: int = i, rel: str = rel,
                  stem: str = path.stem, platform: str | None = platform) -> list[AnyRecord]:
            if platform not in ("mobile", "web", "desktop"):
                raise Reject("<file>", f"cannot tell the platform of {rel} from its name; pass "
                             "option platform=mobile|web|desktop", "bad_record")
            instruction = text(get(entry, "instruction", "instruction"), "instruction")
            x, y, w, h = numbers(get(entry, "bbox", "bbox"), 4, "bbox")
            img = stage.from_file(get(entry, "img_filename", "img_filename"), "img_filename", base=images)
            box = pixel_box(x, y, x + w, y + h, img.size, "bbox")
            return [GroundingSample(
                id=safe_id("screenspot-v2", stem, i), image=img.ref, image_size=img.size,
                platform=platform, instruction=instruction, box=box,
                ui_type=_ui_type(entry.get("data_type"), "data_type"),
                provenance=Provenance(source="screenspot-v2", source_id=f"{rel}#{i}",
                                      extra=_extra(entry, ("img_filename", "data_source", "data_type"))),
            )]

        yield Candidate(f"{rel}#{i}", rel, i, build)


def _scan_pro(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    images = _image_dir(root, options, ("images",))
    ann = options.get("annotations", "annotations")
    base = root.path / ann
    files = sorted(p for p in base.glob("*.json") if p.is_file() or p.is_symlink()) if base.is_dir() else []
    for item in _entries(root, files):
        if isinstance(item, Candidate):
            yield item
            continue
        path, rel, i, entry = item

        def build(stage: ImageStage, entry: Any = entry, i: int = i, rel: str = rel,
                  stem: str = path.stem) -> list[AnyRecord]:
            instruction = text(get(entry, "instruction", "instruction"), "instruction")
            x1, y1, x2, y2 = numbers(get(entry, "bbox", "bbox"), 4, "bbox")
            img = stage.from_file(get(entry, "img_filename", "img_filename"), "img_filename", base=images)
            if "img_size" in entry:
                claimed = numbers(entry["img_size"], 2, "img_size")
                if (int(claimed[0]), int(claimed[1])) != img.size or claimed[0] != int(claimed[0]):
                    raise Reject("img_size", f"img_size {entry['img_size']} does not match the "
                                 f"{img.width}x{img.height} image", "bad_image")
            box = pixel_box(x1, y1, x2, y2, img.size, "bbox")
            os_name = str(entry.get("platform", "")).lower()
            platform = "mobile" if os_name in _MOBILE_OS else "web" if os_name == "web" else "desktop"
            return [GroundingSample(
                id=safe_id("screenspot-pro", stem, i), image=img.ref, image_size=img.size,
                platform=platform, instruction=instruction, box=box,
                ui_type=_ui_type(entry.get("ui_type"), "ui_type"),
                provenance=Provenance(source="screenspot-pro", source_id=f"{rel}#{i}", extra=_extra(
                    entry, ("id", "img_filename", "application", "platform", "group", "instruction_cn"))),
            )]

        yield Candidate(f"{rel}#{i}", rel, i, build)


SCREENSPOT_V2 = IMPORTERS.register("screenspot-v2", Importer(
    name="screenspot-v2",
    description="ScreenSpot-v2 per-platform JSON (bbox [x,y,w,h] px) -> grounding",
    scan=_scan_v2,
    options={"images": "screenshot folder (default screenspotv2_image/)",
             "platform": "mobile|web|desktop for files whose name does not say"},
), description="ScreenSpot-v2 per-platform JSON (bbox [x,y,w,h] px) -> grounding")

SCREENSPOT_PRO = IMPORTERS.register("screenspot-pro", Importer(
    name="screenspot-pro",
    description="ScreenSpot-Pro annotations/*.json (bbox [x1,y1,x2,y2] px, img_size) -> grounding",
    scan=_scan_pro,
    options={"images": "screenshot folder (default images/)",
             "annotations": "annotation folder (default annotations/)"},
), description="ScreenSpot-Pro annotations/*.json (bbox [x1,y1,x2,y2] px, img_size) -> grounding")
