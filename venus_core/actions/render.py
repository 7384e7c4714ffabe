"""Canonical text form of an action.

Why: the rendered string is what the model is trained to emit and what history lines, datasets and
rewards compare, so there must be exactly one spelling per action:

    Click(box=(500,300))      Scroll(start=(500,700),end=(500,300),direction='up')
    Type(content='it\\'s, (ok)')   Hotkey(keys=['ctrl','c'])   Wait()   Finished(content='')

Arguments are keywords in the documented order, points are tuples without spaces, strings are
single-quoted Python literals. Quoting escapes only what must be escaped for the string to read
back (backslash, single quote, newline / CR / tab as \\n \\r \\t, other control characters and
line separators as \\x / \\u escapes); Chinese text, emoji and other printable characters stay
literal, so training targets look like what a person would type (and stay on one line). Because
strings are Python literals, `parse` reads them with Python's own tokenizer, and
parse(render(a)) == a for every action.
"""

from __future__ import annotations

import unicodedata

from venus_core.actions.space import Action, Point

_SIMPLE_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """`text` as a single-quoted Python string literal (minimal escaping, see module doc)."""
    out = ["'"]
    for ch in text:
        esc = _SIMPLE_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif unicodedata.category(ch) in ("Cc", "Cs") or ch in "\u2028\u2029\x85":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append("'")
    return "".join(out)


def render_point_arg(p: Point) -> str:
    return f"({p[0]},{p[1]})"


def render_action(action: Action) -> str:
    """The canonical text of `action`, e.g. "Click(box=(500,300))"."""
    if not isinstance(action, Action) or not type(action).NAME:
        raise TypeError(f"render_action expects an Action, got {type(action).__name__}")
    parts: list[str] = []
    for name, kind in type(action).PARAMS:
        value = getattr(action, name)
        if value is None:
            continue
        if kind == "point":
            parts.append(f"{name}={render_point_arg(value)}")
        elif kind == "keys":
            parts.append(f"{name}=[{','.join(quote(k) for k in value)}]")
        else:
            parts.append(f"{name}={quote(value)}")
    return f"{type(action).NAME}({','.join(parts)})"
