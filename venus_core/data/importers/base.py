"""Building blocks shared by the importers: untrusted paths, images and values, and rejections.

Why: public datasets are large, hand-made and occasionally wrong (a NaN box, a box past the image
edge, a missing screenshot), and their annotation files name files by relative path. An importer
must never follow a path out of the source directory (`..`, absolute paths, symlinks pointing
elsewhere), never decode a decompression bomb, and never let a bad value become a training target.
Each such problem raises `Reject(field, reason, code)`; the runner turns it into one line of
`quarantine.jsonl` and keeps going, so one bad sample never aborts a multi-hour import.

Images are loaded through `ImageStage`: decoded with `venus_core.data.images.decode_image` (pixel
limit checked from the header before decoding), converted to PNG when needed, and *staged*: they
reach the dataset store only when the whole source record was accepted, so a rejected record
leaves no orphan image behind. Decoded images already stored are remembered by (real path, size,
mtime) in a bounded LRU, so the many records that share a screenshot decode it once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from venus_core.actions import box_from_pixels
from venus_core.data.images import ImageError, decode_image, encode_png
from venus_core.data.schema import image_ref
from venus_core.data.store import AnyRecord, DatasetWriter

MAX_IMAGE_FILE_BYTES = 128 * 1024 * 1024
"""Largest image file read at all (full-page web screenshots are a few MB)."""

IMAGE_CACHE_ENTRIES = 4096
_SPACE_RE = re.compile(r"\s")


class Reject(Exception):
    """A source record cannot be imported: `field` names where, `reason` says why.

    `code` groups reasons in the import report: path, missing_image, bad_image, bad_value,
    bad_box, unknown_action, bad_record, duplicate, schema.
    """

    def __init__(self, field: str, reason: str, code: str = "bad_value") -> None:
        self.field = field
        self.reason = reason
        self.code = code
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class StagedImage:
    ref: str
    width: int
    height: int

    @property
    def size(self) -> tuple[int, int]:
        return (self.width, self.height)


class SourceRoot:
    """The source directory; every relative path an annotation names is resolved through it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise NotADirectoryError(f"{self.path}: source is not a directory")
        self.real = Path(os.path.realpath(self.path))

    def resolve(self, rel: Any, field: str, *, base: str = "") -> Path:
        """Real path of the regular file `base/rel` inside the root, or Reject naming `field`."""
        if not isinstance(rel, str) or not rel.strip():
            raise Reject(field, f"expected a relative file path, got {rel!r}", "path")
        if "\x00" in rel:
            raise Reject(field, f"path {rel!r} contains a NUL byte", "path")
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:  # a file name of bytes that are not UTF-8 (or a surrogate escape)
            shown = rel.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
            raise Reject(field, f"path {shown!r} is not UTF-8 text", "path") from None
        if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or rel.startswith(
            ("\\", "/")
        ) or PureWindowsPath(rel).drive:
            raise Reject(field, f"absolute path {rel!r} is not allowed", "path")
        if ".." in rel.replace("\\", "/").split("/"):
            raise Reject(field, f"path {rel!r} leaves the source directory ('..')", "path")
        candidate = self.path / base / rel if base else self.path / rel
        try:
            real = Path(os.path.realpath(candidate))
            if not real.is_relative_to(self.real):
                raise Reject(field, f"path {rel!r} resolves outside the source directory (symlink)", "path")
            if not real.exists():
                raise Reject(field, f"file {rel!r} does not exist", "missing_image")
            if not real.is_file():
                raise Reject(field, f"{rel!r} is not a regular file", "path")
        except OSError as exc:  # a name too long for the filesystem, a symlink loop, no permission
            raise Reject(field, f"path {rel[:200]!r}: {exc.strerror or exc}", "path") from None
        return real

    def rel(self, path: Path) -> str:
        """`path` relative to the root, for messages and quarantine lines."""
        try:
            return str(Path(os.path.realpath(path)).relative_to(self.real))
        except ValueError:
            return str(path)

    def files(self, pattern: str, under: str = "") -> Iterator[Path]:
        """Sorted files matching `pattern` below `under` (recursive glob), symlinks that escape skipped.

        A file whose real path leaves the root is yielded anyway so that the caller reports it:
        `resolve` on its relative path raises the Reject.
        """
        base = self.path / under if under else self.path
        if not base.is_dir():
            return iter(())
        return iter(sorted(p for p in base.rglob(pattern) if p.is_file() or p.is_symlink()))


class ImageStage:
    """Loads, checks and stages the images of one source record at a time (see module doc)."""

    def __init__(self, root: SourceRoot, writer: DatasetWriter) -> None:
        self.root = root
        self.writer = writer
        self._pending: dict[str, bytes] = {}
        self._pending_keys: dict[tuple[str, int, int], StagedImage] = {}
        self._cache: OrderedDict[tuple[str, int, int], StagedImage] = OrderedDict()
        self._pending_named: dict[tuple[str, str], StagedImage] = {}
        self._named: OrderedDict[tuple[str, str], StagedImage] = OrderedDict()

    def _stored(self, ref: str) -> bool:
        try:
            self.writer.image_size(ref)
        except KeyError:
            return False
        return True

    def _stage_bytes(self, data: bytes, field: str, what: str = "") -> StagedImage:
        try:
            img = decode_image(data)
        except ImageError as exc:
            raise Reject(field, f"{what}: {exc}" if what else str(exc), "bad_image") from None
        png = data if img.format == "PNG" else encode_png(img)
        ref = image_ref(hashlib.sha256(png).hexdigest())
        if not self._stored(ref):
            self._pending[ref] = png
        return StagedImage(ref, int(img.width), int(img.height))

    def from_file(self, rel: Any, field: str, *, base: str = "") -> StagedImage:
        """Stage the image file `base/rel` (resolved safely inside the source root).

        A path already resolved and stored during this import is answered from the cache
        (source trees are assumed not to change while they are imported).
        """
        named = (base, rel) if isinstance(rel, str) else None
        if named is not None and named in self._named:
            self._named.move_to_end(named)
            return self._named[named]
        path = self.root.resolve(rel, field, base=base)
        try:
            st = path.stat()
        except OSError as exc:
            raise Reject(field, f"{rel!r}: {exc.strerror or exc}", "missing_image") from None
        key = (str(path), st.st_size, st.st_mtime_ns)
        hit = self._cache.get(key) or self._pending_keys.get(key)
        if hit is not None:
            if key in self._cache:
                self._cache.move_to_end(key)
            if named is not None:
                self._pending_named[named] = hit
            return hit
        if st.st_size > MAX_IMAGE_FILE_BYTES:
            raise Reject(field, f"{rel!r} is {st.st_size} bytes (limit {MAX_IMAGE_FILE_BYTES})", "bad_image")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise Reject(field, f"{rel!r}: cannot read: {exc.strerror or exc}", "missing_image") from None
        staged = self._stage_bytes(data, field, repr(rel))
        self._pending_keys[key] = staged
        if named is not None:
            self._pending_named[named] = staged
        return staged

    def from_bytes(self, data: bytes, field: str) -> StagedImage:
        """Stage image bytes embedded in the source (e.g. base64 in JSON, bytes in parquet)."""
        if len(data) > MAX_IMAGE_FILE_BYTES:
            raise Reject(field, f"embedded image is {len(data)} bytes (limit {MAX_IMAGE_FILE_BYTES})", "bad_image")
        return self._stage_bytes(data, field)

    def from_base64(self, text: str, field: str) -> StagedImage:
        """Stage a base64 image (a bare string or a `data:image/...;base64,` URI)."""
        if text.startswith("data:"):
            head, _, text = text.partition(",")
            if not head.endswith(";base64"):
                raise Reject(field, "data URI is not base64-encoded", "bad_image")
        if len(text) > MAX_IMAGE_FILE_BYTES * 4 // 3 + 4:
            raise Reject(field, "embedded base64 image exceeds the file size limit", "bad_image")
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise Reject(field, f"invalid base64: {exc}", "bad_image") from None
        return self.from_bytes(data, field)

    def commit(self) -> None:
        """Put the staged images of the accepted record into the dataset store."""
        for ref, png in self._pending.items():
            if not self._stored(ref):
                got = self.writer.put_image(png)
                if got != ref:  # cannot happen unless the store re-encodes PNG bytes
                    raise RuntimeError(f"image store returned {got} for staged {ref}")
        for cache, pending in ((self._cache, self._pending_keys), (self._named, self._pending_named)):
            for k, staged in pending.items():
                cache[k] = staged  # type: ignore[index]
                if len(cache) > IMAGE_CACHE_ENTRIES:
                    cache.popitem(last=False)
        self.rollback()

    def rollback(self) -> None:
        """Forget the staged images of a rejected record."""
        self._pending.clear()
        self._pending_keys.clear()
        self._pending_named.clear()


# ---- untrusted values ----------------------------------------------------------------------


_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89abcdefABCDEF]")


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def parse_json(text: str | bytes, field: str, what: str = "not valid JSON") -> Any:
    """json.loads or Reject (code bad_record): every way JSON text can fail, not only a syntax
    error: invalid UTF-8, an integer longer than Python parses (4,300 digits), nesting deeper
    than the decoder's recursion limit, and a `\\udXXX` escape of an unpaired UTF-16 surrogate
    (valid JSON, but not text: it could be neither stored nor written as UTF-8). NaN and
    Infinity literals parse (Python writers emit them); `number` refuses them where a number is
    needed."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise Reject(field, f"{what}: nested too deeply", "bad_record") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the int-digits limit
        raise Reject(field, f"{what}: {str(exc)[:200]}", "bad_record") from None
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if _SURROGATE_ESCAPE.search(raw) and _lone_surrogate(value):
        raise Reject(field, f"{what}: a string holds an unpaired surrogate escape (\\ud800-\\udfff)",
                     "bad_record")
    return value


def number(value: Any, field: str) -> float:
    """A finite int/float (not bool) or Reject."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Reject(field, f"expected a number, got {str(value)[:80]!r}")
    try:
        out = float(value)
    except OverflowError:  # an int past float's range (1.8e308)
        raise Reject(field, f"an integer of {value.bit_length()} bits is too large a number") from None
    if not math.isfinite(out):
        raise Reject(field, f"{value!r} is not a finite number")
    return out


def numbers(value: Any, n: int, field: str) -> list[float]:
    """A list of exactly `n` finite numbers or Reject."""
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise Reject(field, f"expected a list of {n} numbers, got {value!r}")
    return [number(v, f"{field}[{i}]") for i, v in enumerate(value)]


def text(value: Any, field: str, *, allow_empty: bool = False) -> str:
    """A string (non-blank unless allow_empty) or Reject."""
    if not isinstance(value, str):
        raise Reject(field, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise Reject(field, "must not be empty")
    return value


def get(obj: Any, key: str, field: str) -> Any:
    """obj[key] for a dict obj, or Reject naming the missing field."""
    if not isinstance(obj, dict):
        raise Reject(field.rsplit(".", 1)[0] or field, f"expected an object, got {type(obj).__name__}", "bad_record")
    if key not in obj:
        raise Reject(field, "missing", "bad_record")
    return obj[key]


def pixel_box(x1: float, y1: float, x2: float, y2: float, size: tuple[int, int], field: str) -> tuple[int, int, int, int]:
    """Pixel box edges -> 0–1000 box; Reject when negative, inverted, empty or outside the image.

    A box that is non-empty in pixels but collapses to zero width/height in the 0–1000 frame (a
    few-pixel icon on a very large screen) is widened to one unit, so that it stays a valid box.
    """
    w, h = size
    if min(x1, y1, x2, y2) < 0:
        raise Reject(field, f"box ({x1}, {y1}, {x2}, {y2}) has a negative coordinate", "bad_box")
    if x2 <= x1 or y2 <= y1:
        raise Reject(field, f"box ({x1}, {y1}, {x2}, {y2}) is empty or inverted", "bad_box")
    if x2 > w or y2 > h:
        raise Reject(field, f"box ({x1}, {y1}, {x2}, {y2}) exceeds the {w}x{h} image", "bad_box")
    bx1, by1, bx2, by2 = box_from_pixels(x1, y1, x2, y2, w, h)
    if bx2 <= bx1:
        bx1, bx2 = (bx1, bx1 + 1) if bx1 < 1000 else (bx1 - 1, bx1)
    if by2 <= by1:
        by1, by2 = (by1, by1 + 1) if by1 < 1000 else (by1 - 1, by1)
    return bx1, by1, bx2, by2


def norm_point(x: float, y: float, field: str) -> tuple[int, int]:
    """A point already in the 0–1000 frame (rounded half up), or Reject when outside it."""
    if not (0 <= x <= 1000 and 0 <= y <= 1000):
        raise Reject(field, f"point ({x}, {y}) is outside the 0..1000 frame", "bad_box")
    return int(math.floor(x + 0.5)), int(math.floor(y + 0.5))


def safe_id(*parts: Any) -> str:
    """A record id from source identifiers: whitespace replaced, at most 256 characters."""
    raw = ":".join(str(p) for p in parts)
    out = _SPACE_RE.sub("_", raw)
    if len(out) > 256:
        out = out[:191] + "~" + hashlib.sha256(raw.encode()).hexdigest()[:64]
    return out


# ---- the importer protocol -----------------------------------------------------------------


Build = Callable[[ImageStage], list[AnyRecord]]


@dataclass(frozen=True)
class Candidate:
    """One source record: where it is, its stable id, and how to build its Venus records.

    `build` raises Reject for a bad record; records it returns are written only if all are valid.
    """

    source_id: str
    file: str
    index: int | None
    build: Build


Scan = Callable[[SourceRoot, dict[str, str]], Iterator[Candidate]]


@dataclass(frozen=True)
class Importer:
    """A registered importer: `scan(root, options)` yields the candidates of a source directory."""

    name: str
    description: str
    scan: Scan
    options: dict[str, str]

    def check_options(self, options: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(f"{k} ({v})" for k, v in self.options.items()) or "none"
            raise ValueError(f"importer {self.name!r}: unknown option(s) {unknown}; known: {known}")
        return dict(options)


def failing(field: str, reason: str, code: str) -> Build:
    """A Build that rejects at once (a source file that cannot be read at all is one bad record)."""

    def build(_: ImageStage) -> list[AnyRecord]:
        raise Reject(field, reason, code)

    return build
