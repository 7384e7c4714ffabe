"""Import throughput: 10,000 ScreenSpot-v2 records over 20 distinct screenshots.

Why this shape: a real ScreenSpot-style source has many instructions per screenshot, so the
importer's per-record cost (JSON entry -> validated GroundingSample -> shard line) dominates, while
each distinct screenshot is decoded, checked and stored once (the image cache and the content-
addressed store). 1 % of the entries are deliberately bad (box past the image edge) so the
quarantine path is exercised too. Prints the figures and the command that made them.

    .venv/bin/python benchmarks/import_screenspot.py [--records N] [--images K]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

from venus_core.data.importers import run_import


def make_source(root: Path, records: int, images: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    img_dir = root / "screenspotv2_image"
    img_dir.mkdir(parents=True)
    sizes = []
    for k in range(images):
        w, h = rng.choice([(1170, 2532), (1920, 1080), (2560, 1440), (1080, 2400)])
        img = Image.new("RGB", (w, h), (k * 11 % 256, k * 37 % 256, k * 71 % 256))
        img.save(img_dir / f"shot_{k}.png")
        sizes.append((w, h))
    entries = []
    for i in range(records):
        k = rng.randrange(images)
        w, h = sizes[k]
        bw, bh = rng.randint(10, 200), rng.randint(10, 120)
        x, y = rng.randint(0, w - bw), rng.randint(0, h - bh)
        if i % 100 == 99:
            x = w  # past the right edge: quarantined
        entries.append({"img_filename": f"shot_{k}.png", "bbox": [x, y, bw, bh],
                        "instruction": f"tap element {i}", "data_type": rng.choice(["text", "icon"]),
                        "data_source": "bench"})
    (root / "screenspot_mobile_v2.json").write_text(json.dumps(entries), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--images", type=int, default=20)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        t0 = time.perf_counter()
        make_source(src, args.records, args.images)
        t1 = time.perf_counter()
        report = run_import("screenspot-v2", src, out)
        t2 = time.perf_counter()
    assert report.imported + report.quarantined == report.read == args.records
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"source: {args.records} records, {args.images} screenshots (generated in {t1 - t0:.2f} s)")
    print(f"import: read {report.read}, imported {report.imported}, quarantined {report.quarantined}, "
          f"images stored {report.images}")
    print(f"time: {t2 - t1:.2f} s end to end, {report.records_per_s:.0f} records/s (importer loop)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
