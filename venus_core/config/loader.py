"""Loading, overriding, dumping and hashing agent specs.

Why: users edit YAML by hand and override fields from the command line (`--set k=v`), so errors
must point at the file, the line and the field; the resolved spec must be printable and hashable
(the hash goes into every run's provenance).

Hostile files fail as `SpecError` too: a file over MAX_SPEC_BYTES, YAML nested past the parser's
recursion limit, and aliases that repeat a subtree until the document expands past
MAX_SPEC_VALUES values (a "billion laughs" file is a few hundred bytes) or refer to themselves
(a cyclic document). Both the value walk and the line index are bounded, so such a file costs
milliseconds, not the validator's exponential walk. YAML is read with libyaml when PyYAML has it.
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
from venus_core.config.yamlfile import LOADER as _LOADER
from venus_core.config.yamlfile import check_expansion


MAX_SPEC_BYTES = 1 << 20
"""Largest spec file read (the full template is ~40 kB)."""
MAX_SPEC_VALUES = 100_000
"""Most values (mappings, lists, scalars) a spec may expand to, aliases counted at each use."""
MAX_SPEC_DEPTH = 64
"""Deepest nesting of a spec (the real sections nest 5 deep)."""

class SpecError(ValueError):
    """An agent spec could not be loaded; the message names the file, line and field."""


def _safe_load(text: str) -> Any:
    """yaml.safe_load (libyaml when available); RecursionError for nesting past the parser's limit."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (CSafeLoader / SafeLoader)


def _line_index(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path in a YAML document to its 1-based line number (bounded, see module doc)."""
    index: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError):
        return index
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())] if root is not None else []
    seen = 0
    while stack and seen < MAX_SPEC_VALUES:
        node, path = stack.pop()
        seen += 1
        index.setdefault(path, node.start_mark.line + 1)
        if len(path) >= MAX_SPEC_DEPTH:
            continue
        if isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                sub = path + (str(key.value),)
                index[sub] = key.start_mark.line + 1
                stack.append((value, sub))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, path + (str(i),)) for i, item in reversed(list(enumerate(node.value))))
    return index


def _check_expansion(data: Any, where: str) -> None:
    """SpecError when `data` expands past MAX_SPEC_VALUES values or MAX_SPEC_DEPTH levels."""
    check_expansion(data, where, what="the spec", max_values=MAX_SPEC_VALUES, max_depth=MAX_SPEC_DEPTH,
                    error=SpecError)


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
        value = _safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer past Python's 4,300 digits
        raise SpecError(f"override {item!r}: value is not valid YAML: {str(exc)[:300]}") from None
    except RecursionError:
        raise SpecError(f"override {item!r}: value is nested too deeply") from None
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
    _check_expansion(data, where)
    try:
        return AgentSpec.model_validate(data)
    except ValidationError as exc:
        lines = _line_index(text) if text is not None else {}
        raise SpecError(_format_errors(exc, where, lines)) from None


def read_spec_dict(path: str | Path) -> tuple[dict[str, Any], str, Path]:
    """(raw mapping, text, file) of a spec file or of DIR/agent.yaml."""
    p = Path(path)
    if p.is_dir():
        p = p / "agent.yaml"
    try:
        size = p.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"{p}: {size} bytes; an agent spec is at most {MAX_SPEC_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such agent spec") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc}") from None
    try:
        data = _safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer past Python's 4,300 digits
        raise SpecError(f"{p}: not valid YAML: {str(exc)[:500]}") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid YAML: nested too deeply") from None
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
