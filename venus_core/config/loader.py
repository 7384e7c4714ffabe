"""Loading, overriding, dumping and hashing agent specs.

Why: users edit YAML by hand and override fields from the command line (`--set k=v`), so errors
must point at the file, the line and the field; the resolved spec must be printable and hashable
(the hash goes into every run's provenance).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from venus_core.config.spec import AgentSpec


class SpecError(ValueError):
    """An agent spec could not be loaded; the message names the file, line and field."""


def _line_index(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path in a YAML document to its 1-based line number."""
    index: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return index

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        index[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = path + (str(key.value),)
                index[sub] = key.start_mark.line + 1
                walk(value, sub)
                index[sub] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (str(i),))

    if root is not None:
        walk(root, ())
    return index


def _format_errors(exc: ValidationError, where: str, lines: dict[tuple[str, ...], int]) -> str:
    out = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        field = ".".join(loc) or "(top level)"
        line = None
        for cut in range(len(loc), -1, -1):  # closest enclosing key that exists in the file
            if loc[:cut] in lines:
                line = lines[loc[:cut]]
                break
        at = f"{where}:{line}" if line is not None else where
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not part of the agent spec)"
        out.append(f"{at}: {field}: {msg}")
    return "\n".join(out)


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.0.c=value` -> (['a','b','0','c'], value parsed as a YAML scalar / flow value)."""
    if "=" not in item:
        raise SpecError(f"override {item!r}: expected KEY=VALUE (e.g. offline_rl.grounding.lr=1e-6)")
    key, raw = item.split("=", 1)
    path = [p for p in key.strip().split(".")]
    if not key.strip() or any(not p for p in path):
        raise SpecError(f"override {item!r}: empty key segment")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise SpecError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    if isinstance(value, str) and _looks_like_float(value):
        value = float(value)  # YAML 1.1 reads '1e-6' as a string; users mean a number
    return path, value


def _looks_like_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return any(c.isdigit() for c in s)


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply `key=value` overrides to a raw spec dict (in place; returns it).

    Intermediate mappings that the file leaves to defaults are created; list items are addressed
    by index and must exist. Unknown keys are caught by validation afterwards.
    """
    for item in overrides:
        path, value = parse_override(item)
        node: Any = data
        for i, part in enumerate(path[:-1]):
            where = ".".join(path[: i + 1])
            if isinstance(node, list):
                node = node[_index(part, node, item)]
            elif isinstance(node, dict):
                if node.get(part) is None:
                    if path[i + 1].isdigit():
                        raise SpecError(f"override {item!r}: {where} is not in the file; "
                                        "list items can be overridden only where the file lists them")
                    node[part] = {}
                node = node[part]
            else:
                raise SpecError(f"override {item!r}: {where} is a value, not a section")
        last = path[-1]
        if isinstance(node, list):
            idx = _index(last, node, item)
            node[idx] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise SpecError(f"override {item!r}: {'.'.join(path[:-1])} is a value, not a section")
    return data


def _index(part: str, node: list[Any], item: str) -> int:
    try:
        idx = int(part)
    except ValueError:
        raise SpecError(f"override {item!r}: {part!r} must be a list index") from None
    if not 0 <= idx < len(node):
        raise SpecError(f"override {item!r}: index {idx} out of range (list has {len(node)} items)")
    return idx


def spec_from_dict(data: dict[str, Any], *, where: str = "<spec>", text: str | None = None) -> AgentSpec:
    lines = _line_index(text) if text is not None else {}
    try:
        return AgentSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, where, lines)) from None


def read_spec_dict(path: str | Path) -> tuple[dict[str, Any], str, Path]:
    """(raw mapping, text, file) of a spec file or of DIR/agent.yaml."""
    p = Path(path)
    if p.is_dir():
        p = p / "agent.yaml"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such agent spec") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{p}: not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"{p}: the agent spec must be a YAML mapping, got {type(data).__name__}")
    return data, text, p


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> AgentSpec:
    """Load `path` (a YAML file, or a directory holding agent.yaml), apply overrides, validate."""
    data, text, file = read_spec_dict(path)
    apply_overrides(data, overrides)
    return spec_from_dict(data, where=str(file), text=text)


def spec_to_dict(spec: AgentSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True)


def dump_spec(spec: AgentSpec) -> str:
    """The resolved spec as YAML (every field, defaults included)."""
    return yaml.safe_dump(spec_to_dict(spec), sort_keys=False, allow_unicode=True, width=100)


def spec_hash(spec: AgentSpec) -> str:
    """sha256 of the resolved spec's canonical JSON: equal specs hash equal, whatever the file layout."""
    canonical = json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
