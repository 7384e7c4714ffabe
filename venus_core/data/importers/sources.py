"""Reading annotation files of a source directory: whole JSON files and JSON-lines files.

Why: every importer reads JSON written by someone else. A file that is unreadable, not JSON, or
reached through a symlink out of the source root must become one quarantined "record" naming the
file (so counts still reconcile), not an exception that ends the import. JSON-lines files are read
line by line; a line longer than MAX_JSON_LINE_BYTES is skipped in 1 MiB pieces without being held
and quarantined as one record, so memory stays bounded by that limit whatever the file holds. A
plain JSON file is parsed whole, so memory is bounded by the largest annotation file
(MAX_JSON_FILE_BYTES; ScreenSpot files are a few MB, GUI-Odyssey has one small file per episode).
Lines are split on "\n" only (JSON escapes it inside strings; a stray "\r" is whitespace).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from venus_core.data.importers.base import Candidate, Reject, SourceRoot, failing, parse_json

MAX_JSON_FILE_BYTES = 512 * 1024 * 1024
MAX_JSON_LINE_BYTES = 64 * 1024 * 1024
"""Longest JSON line read (an AndroidControl episode with base64 screenshots is a few MB)."""
_SKIP_CHUNK = 1 << 20


def relname(root: SourceRoot, path: Path) -> str:
    """`path` relative to the (unresolved) source root, for ids and quarantine lines."""
    try:
        return path.relative_to(root.path).as_posix()
    except ValueError:
        return str(path)


def read_json(root: SourceRoot, path: Path) -> Any:
    """Parse one JSON file inside the root; Reject (field "<file>") when unsafe or not JSON."""
    rel = relname(root, path)
    real = root.resolve(rel, "<file>")
    try:
        size = real.stat().st_size
        if size > MAX_JSON_FILE_BYTES:
            raise Reject("<file>", f"{rel} is {size} bytes (limit {MAX_JSON_FILE_BYTES})", "bad_record")
        data = real.read_bytes()
    except OSError as exc:
        raise Reject("<file>", f"{rel}: cannot read: {exc.strerror or exc}", "bad_record") from None
    return parse_json(data, "<file>", f"{rel} is not valid JSON")


def file_failure(root: SourceRoot, path: Path, rej: Reject) -> Candidate:
    """A candidate standing for a whole unreadable file (one quarantine line, counted as read)."""
    rel = relname(root, path)
    return Candidate(f"file:{rel}", rel, None, failing(rej.field, rej.reason, rej.code))


def _lines(f: BinaryIO, limit: int) -> Iterator[tuple[int, bytes | None, int]]:
    """(line number, the line or None when it is longer than `limit` bytes, its length).

    Read in pieces of at most _SKIP_CHUNK bytes: a line is held only while it is within the
    limit, and the pieces of an over-long one are dropped as soon as it passes it."""
    lineno = 0
    while piece := f.readline(_SKIP_CHUNK):
        lineno += 1
        pieces: list[bytes] | None = [piece]
        size = len(piece)
        while not piece.endswith(b"\n"):
            piece = f.readline(_SKIP_CHUNK)
            if not piece:
                break
            size += len(piece)
            if pieces is not None:
                pieces.append(piece)
                if size > limit + 1:  # longer than the limit even without its newline
                    pieces = None
        content = size - (1 if piece.endswith(b"\n") else 0)
        if pieces is None or content > limit:
            yield lineno, None, size
        else:
            yield lineno, b"".join(pieces), size


def json_lines(root: SourceRoot, path: Path, *, max_line_bytes: int = MAX_JSON_LINE_BYTES,
               ) -> Iterator[tuple[int, Any, Reject | None]]:
    """(line number, parsed object or None, Reject or None) per non-blank line of a JSONL file.

    An unsafe or unreadable file yields a single (0, None, Reject); a line that is not JSON, or
    longer than `max_line_bytes`, yields (line number, None, Reject). Invalid UTF-8 is replaced.
    """
    rel = relname(root, path)
    try:
        real = root.resolve(rel, "<file>")
        f = open(real, "rb")  # noqa: SIM115 - closed below, the generator may stop early
    except Reject as rej:
        yield 0, None, rej
        return
    except OSError as exc:
        yield 0, None, Reject("<file>", f"{rel}: cannot read: {exc.strerror or exc}", "bad_record")
        return
    with f:
        for lineno, raw, size in _lines(f, max_line_bytes):
            if raw is None:
                yield lineno, None, Reject("<line>", f"line is {size} bytes, longer than the "
                                           f"{max_line_bytes}-byte limit", "bad_record")
                continue
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                yield lineno, parse_json(line, "<line>"), None
            except Reject as rej:
                yield lineno, None, rej
