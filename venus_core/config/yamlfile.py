"""Small YAML files a person writes (agent specs, device tables, device-pool manifests), read with bounds.

Why: these files come from outside the platform (an operator's edit, a copied example), and a YAML
file can be hostile in ways a JSON file cannot: aliases that repeat or contain themselves (a few
hundred bytes that expand to billions of values, or a cycle), nesting past the parser's recursion
limit, integers past Python's digit limit, tags. `SafeLoader` already refuses tags that build
objects; this module bounds the rest and turns every failure into one error class the caller
chooses, whose message names the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (the pure-Python one otherwise)."""


def check_expansion(data: Any, where: str, *, what: str, max_values: int, max_depth: int,
                    error: type[ValueError] = ValueError) -> None:
    """`error` when `data` expands past `max_values` values or `max_depth` levels, aliases followed at
    every use (so a cyclic document is caught too). `what` names the data in the message."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > max_values:
            raise error(f"{where}: {what} expands to more than {max_values} values (YAML aliases "
                        "that repeat or contain themselves?); write the values out")
        if depth > max_depth:
            raise error(f"{where}: {what} nests deeper than {max_depth} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def read_small_text(path: Path, *, what: str, max_bytes: int = 1 << 20,
                    error: type[ValueError] = ValueError) -> str:
    """The UTF-8 text of `path`, or `error` naming the file: unreadable, larger than `max_bytes`
    (read no further), not UTF-8."""
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise error(f"{path}: {what} is larger than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None


def read_yaml_documents(path: Path, *, what: str, max_bytes: int = 1 << 20, max_values: int = 100_000,
                        max_depth: int = 64, error: type[ValueError] = ValueError) -> list[Any]:
    """The documents of the YAML file `path`, or `error` naming the file: unreadable, larger than
    `max_bytes`, not UTF-8, not YAML, or expanding past the bounds."""
    text = read_small_text(path, what=what, max_bytes=max_bytes, error=error)
    try:
        docs = list(yaml.load_all(text, Loader=LOADER))  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # ValueError: an int past 4,300 digits
        detail = "nested too deep" if isinstance(exc, RecursionError) else " ".join(str(exc).split())[:300]
        raise error(f"{path}: {what} is not valid YAML: {detail}") from None
    check_expansion(docs, str(path), what=what, max_values=max_values, max_depth=max_depth, error=error)
    return docs
