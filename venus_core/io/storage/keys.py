"""Key validation shared by both backends.

Keys are '/'-separated relative paths. The same key must mean the same thing on a local disk and in
a bucket, and must never reach outside the store root, so everything that a filesystem or an S3
gateway could interpret differently is rejected up front (absolute keys, '.'/'..' segments, empty
segments, backslashes, NUL and other control characters) with an error naming the key. The first
segment `.venus` is reserved for the store's own temporaries and metadata.
"""

from __future__ import annotations

import unicodedata

from venus_core.io.storage.errors import InvalidKeyError

RESERVED = ".venus"
MARKER = "_SUCCESS"
MAX_KEY_BYTES = 900  # S3 allows 1024 bytes per object name; leave room for the store prefix.


def validate_key(key: str, *, what: str = "key", allow_reserved: bool = False) -> str:
    """Return `key` unchanged if it is a safe relative key, else raise InvalidKeyError naming it."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"{what} must be a string, got {type(key).__name__}: {key!r}")
    if key == "":
        raise InvalidKeyError(f"{what} is empty")
    problem = _problem(key)
    if problem is None and not allow_reserved and key.split("/")[0] == RESERVED:
        problem = f"the first segment {RESERVED!r} is reserved for the store's internals"
    if problem is not None:
        raise InvalidKeyError(f"invalid {what} {key!r}: {problem}")
    return key


def _problem(key: str) -> str | None:
    if key.startswith("/"):
        return "absolute keys are not allowed"
    if "\\" in key:
        return "backslashes are not allowed"
    for ch in key:
        if unicodedata.category(ch) == "Cc":
            return f"control character {ch!r} is not allowed"
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return f"longer than {MAX_KEY_BYTES} bytes"
    for segment in key.split("/"):
        if segment == "":
            return "empty path segments (leading, trailing or doubled '/') are not allowed"
        if segment in (".", ".."):
            return f"'{segment}' segments are not allowed"
    return None


def join(prefix: str, rel: str) -> str:
    """Join two already-valid key parts."""
    return f"{prefix}/{rel}" if prefix else rel


def under(key: str, prefix: str) -> bool:
    """True if `key` is `prefix` itself or inside it, on segment boundaries ('a' does not cover 'ab')."""
    return prefix == "" or key == prefix or key.startswith(prefix + "/")
