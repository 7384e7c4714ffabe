"""Reading annotation files of a source directory: whole JSON files and JSON-lines files.

Why: every importer reads JSON written by someone else. A file that is unreadable, not JSON, or
reached through a symlink out of the source root must become one quarantined "record" naming the
file (so counts still reconcile), not an exception that ends the import. JSON-lines files are read
line by line (constant memory); a plain JSON file is parsed whole, so memory is bounded by the
largest annotation file (ScreenSpot files are a few MB, GUI-Odyssey has one small file per episode).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from venus_core.data.importers.base import Candidate, Reject, SourceRoot, failing

MAX_JSON_FILE_BYTES = 512 * 1024 * 1024


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
    size = real.stat().st_size
    if size > MAX_JSON_FILE_BYTES:
        raise Reject("<file>", f"{rel} is {size} bytes (limit {MAX_JSON_FILE_BYTES})", "bad_record")
    try:
        with open(real, encoding="utf-8") as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Reject("<file>", f"{rel} is not valid JSON: {exc}", "bad_record") from None


def file_failure(root: SourceRoot, path: Path, rej: Reject) -> Candidate:
    """A candidate standing for a whole unreadable file (one quarantine line, counted as read)."""
    rel = relname(root, path)
    return Candidate(f"file:{rel}", rel, None, failing(rej.field, rej.reason, rej.code))


def json_lines(root: SourceRoot, path: Path) -> Iterator[tuple[int, Any, Reject | None]]:
    """(line number, parsed object or None, Reject or None) per non-blank line of a JSONL file.

    An unsafe file yields a single (0, None, Reject).
    """
    rel = relname(root, path)
    try:
        real = root.resolve(rel, "<file>")
    except Reject as rej:
        yield 0, None, rej
        return
    with open(real, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line), None
            except json.JSONDecodeError as exc:
                yield lineno, None, Reject("<line>", f"not valid JSON: {exc}", "bad_record")
