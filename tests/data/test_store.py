"""Dataset directory: atomic writer, overwrite rules, image dedupe and checks, streaming reader."""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from pathlib import Path

import pytest
from data_helpers import Build
from PIL import Image

from venus_core.data import DatasetReader, DatasetWriter, ImageError, load_manifest
from venus_core.data import images as images_mod


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_exception_inside_with_leaves_no_target(tmp_path: Path, build: Build) -> None:
    target = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="boom"):
        with DatasetWriter(target, shard_records=1) as w:
            ref = w.put_image(build.png())
            w.write(build.grounding(0, ref))
            w.write(build.grounding(1, ref))
            assert not target.exists()  # nothing visible before close
            raise RuntimeError("boom")
    assert _siblings(target) == []


def test_exception_keeps_the_old_dataset_when_overwriting(good_dataset: Path, build: Build) -> None:
    before = load_manifest(good_dataset)
    with pytest.raises(KeyError):
        with DatasetWriter(good_dataset, overwrite=True) as w:
            w.put_image(build.png())
            raise KeyError("stop")
    assert load_manifest(good_dataset) == before
    assert _siblings(good_dataset) == ["ds"]


def test_overwrite_rules(good_dataset: Path, tmp_path: Path, build: Build) -> None:
    with pytest.raises(FileExistsError, match="overwrite=True"):
        DatasetWriter(good_dataset)
    with DatasetWriter(good_dataset, overwrite=True) as w:
        w.write(build.grounding(9, w.put_image(build.png())))
    assert len(DatasetReader(good_dataset)) == 1
    assert _siblings(good_dataset) == ["ds"]
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("do not delete")
    with pytest.raises(FileExistsError, match="not a Venus dataset"):
        DatasetWriter(precious, overwrite=True)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        DatasetWriter(a_file, overwrite=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with DatasetWriter(empty, overwrite=True) as w:
        pass
    assert load_manifest(empty).records == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "empty", "file", "precious"]


def test_target_appearing_during_write_is_not_clobbered(tmp_path: Path, build: Build) -> None:
    target = tmp_path / "ds"
    w = DatasetWriter(target)
    w.write(build.grounding(0, w.put_image(build.png())))
    target.mkdir()
    (target / "other.txt").write_text("someone else")
    with pytest.raises(FileExistsError):
        w.close()
    assert (target / "other.txt").read_text() == "someone else"
    assert _siblings(target) == ["ds"]


def test_images_dedupe_and_are_png_named_by_sha256(tmp_path: Path, build: Build) -> None:
    target = tmp_path / "ds"
    jpeg = io.BytesIO()
    build.image(5, 7).save(jpeg, format="JPEG")
    with DatasetWriter(target) as w:
        a = w.put_image(build.png(8, 6))
        b = w.put_image(build.png(8, 6))
        c = w.put_image(build.image(8, 6))  # same pixels as a PIL image
        d = w.put_image(jpeg.getvalue())     # re-encoded to PNG
        e = w.put_image(build.png(8, 6, (0, 0, 0)))
        assert w.image_size(d) == (5, 7)
    assert a == b == c and len({a, d, e}) == 3
    manifest = load_manifest(target)
    files = sorted((target / "images").rglob("*.png"))
    assert manifest.images == len(files) == 3
    assert manifest.image_bytes == sum(f.stat().st_size for f in files)
    for f in files:
        data = f.read_bytes()
        assert f.name == hashlib.sha256(data).hexdigest() + ".png" and f.parent.name == f.name[:2]
        assert Image.open(io.BytesIO(data)).format == "PNG"
    reader = DatasetReader(target)
    assert reader.image_path(a) == target / "images" / a[7:9] / f"{a[7:]}.png"
    assert reader.open_image(d).size == (5, 7)
    with pytest.raises(FileNotFoundError, match="missing"):
        reader.open_image("sha256:" + "f" * 64)
    with pytest.raises(ValueError, match="malformed image ref"):
        reader.image_path("sha256:nothex")


def test_put_image_rejects_non_images_truncated_and_bombs(tmp_path: Path, build: Build,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with DatasetWriter(tmp_path / "ds") as w:
        with pytest.raises(ImageError, match="not a decodable image"):
            w.put_image(b"definitely not a png")
        png = build.png(40, 40)
        with pytest.raises(ImageError):
            w.put_image(png[: len(png) // 2])
        with pytest.raises(TypeError):
            w.put_image("a/path.png")  # type: ignore[arg-type]
        w.put_image(build.png(11, 10))
        monkeypatch.setattr(images_mod, "MAX_IMAGE_PIXELS", 100)
        with pytest.raises(ImageError, match="exceeds 100 pixels"):
            w.put_image(build.image(11, 10))
        with pytest.raises(ImageError, match="exceeds 100 pixels"):
            w.put_image(build.png(11, 10))
        w.put_image(build.png(10, 10))


def test_decompression_bomb_is_refused_from_the_header(build: Build) -> None:
    # a 9000 x 9000 PNG header (81 MP, under PIL's own limit) carrying 1 pixel of data
    bomb = bytearray(build.png(1, 1))
    ihdr = bomb.index(b"IHDR")
    bomb[ihdr + 4 : ihdr + 12] = (9000).to_bytes(4, "big") * 2
    bomb[ihdr + 17 : ihdr + 21] = zlib.crc32(bomb[ihdr : ihdr + 17]).to_bytes(4, "big")
    with pytest.raises(ImageError, match=f"9000x9000 PNG image exceeds {images_mod.MAX_IMAGE_PIXELS}"):
        images_mod.decode_image(bytes(bomb))


def test_encode_png_converts_modes_png_cannot_hold(tmp_path: Path) -> None:
    cmyk = Image.new("CMYK", (4, 4), (0, 50, 100, 0))
    with DatasetWriter(tmp_path / "ds") as w:
        ref = w.put_image(cmyk)
    assert DatasetReader(tmp_path / "ds").open_image(ref).mode == "RGB"


def test_write_checks_images_sizes_and_ids(tmp_path: Path, build: Build) -> None:
    with DatasetWriter(tmp_path / "ds") as w:
        ref = w.put_image(build.png(8, 6))
        with pytest.raises(ValueError, match="was not put"):
            w.write(build.grounding(0, build.ref_b))
        with pytest.raises(ValueError, match=r"image_size \(9, 6\)"):
            w.write(build.grounding(0, ref, (9, 6)))
        w.write(build.grounding(0, ref))
        with pytest.raises(ValueError, match="duplicate id"):
            w.write(build.grounding(0, ref))
        w.write(build.qa(0, ref).model_dump(mode="json"))  # dicts are validated first
        with pytest.raises(TypeError):
            w.write("record")  # type: ignore[arg-type]
    assert load_manifest(tmp_path / "ds").records == 2


def test_manifest_counts_shards_and_sha256(good_dataset: Path) -> None:
    m = load_manifest(good_dataset)
    assert m.schema_version == 1 and m.created_by and m.venus_version
    assert m.records == 9 and [s.records for s in m.shards] == [4, 4, 1]
    assert m.counts_by_kind == {"grounding": 2, "navigation_step": 4, "qa": 2, "trajectory": 1}
    assert m.counts_by_domain == {"grounding": 2, "navigation": 5, "perception": 1, "vqa": 1}
    assert m.sources == ["unit", "unit-test"] and m.images == 3
    for shard in m.shards:
        data = (good_dataset / "shards" / shard.name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard.sha256
        assert data.count(b"\n") == shard.records and len(data) == shard.bytes
    raw = json.loads((good_dataset / "manifest.json").read_text())
    raw["schema_version"] = 99
    (good_dataset / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="schema_version 99"):
        DatasetReader(good_dataset)


def test_reader_round_trips_and_streams_shard_by_shard(good_dataset: Path, build: Build) -> None:
    reader = DatasetReader(good_dataset)
    records = list(reader)
    assert len(records) == len(reader) == 9
    assert [r.id for r in records[:2]] == ["g0", "g1"]
    assert records[4] == build.trajectory(4, records[4].steps[0].image, (10, 12))
    assert [r.id for r in reader.iter_records(kind="qa")] == ["q0", "q1"]
    assert [r.id for r in reader.iter_records(domain="perception")] == ["q0"]
    # the last shard is opened only when the reader gets there
    it = iter(reader)
    first = next(it)
    assert first.id == "g0"
    (good_dataset / "shards" / "part-00002.jsonl").unlink()
    assert len([next(it) for _ in range(7)]) == 7
    with pytest.raises(FileNotFoundError):
        next(it)


def test_reader_errors_name_the_file_and_line(good_dataset: Path) -> None:
    shard = good_dataset / "shards" / "part-00001.jsonl"
    lines = shard.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"platform":"mobile"', '"platform":"watch"')
    shard.write_text("".join(lines))
    with pytest.raises(ValueError, match=r"part-00001\.jsonl:2.*platform"):
        list(DatasetReader(good_dataset))
    with pytest.raises(FileNotFoundError, match="no manifest"):
        DatasetReader(good_dataset / "shards")


def test_invalid_writer_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shard_records"):
        DatasetWriter(tmp_path / "x", shard_records=0)
    w = DatasetWriter(tmp_path / "x")
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.put_image(b"")
