"""Parse the text of one action, e.g. "Click(box=(500,300))", into an `Action`.

Why a real parser: model outputs are the input here (rewards, environments, evaluation), and they
vary in small ways; regexes over nested quotes and parentheses silently mis-split content such as
Type(content='a, b)'). The action text is a Python call expression, so Python's own `ast` parser
reads it (strings with any escaping, nesting, spacing); we then accept only a whitelist of literal
shapes, never evaluating anything.

Accepted beyond the canonical form (what models really emit): spaces and newlines between tokens,
double-quoted strings, positional arguments in the documented order (a positional string on Scroll
is the direction; a positional Launch string is app= on mobile, url= on web), points as lists
`[x,y]`, a box of four numbers (its centre), bare numbers for a one-point action (`Click(500,300)`),
float coordinates (rounded half up), `Hotkey(keys='ctrl+c')` and `Hotkey('ctrl','c')`.
Out-of-range coordinates (<0 or >1000) are errors. One lenient fallback: a one-string action whose
string contains unescaped quotes of its own kind (`Type(content='it's')`, invalid Python) is read
literally between the outer quotes.

Robustness: input is capped at MAX_ACTION_CHARS; every failure (syntax, nesting/recursion limits,
memory, odd literals) becomes ActionParseError, nothing else escapes.
"""

from __future__ import annotations

import ast
import math

from pydantic import ValidationError

from venus_core.actions.rules import space_for
from venus_core.actions.space import (
    ACTION_TYPES,
    COORD_MAX,
    DIRECTIONS,
    Action,
    ActionParseError,
    Hotkey,
    Launch,
    Platform,
    Point,
)

MAX_ACTION_CHARS = 32_768
"""Longest action text accepted (a rendered action with maximal content stays below it)."""


def _number(node: ast.expr, what: str) -> float:
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        node = node.operand
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        value = sign * float(node.value)
        if not math.isfinite(value):
            raise ActionParseError(f"{what}: coordinate is not finite")
        return value
    raise ActionParseError(f"{what}: expected a number, got {type(node).__name__}")


def coord(value: float, what: str) -> int:
    """A normalized coordinate: in [0, 1000], rounded half up to an integer."""
    if not 0 <= value <= COORD_MAX:
        raise ActionParseError(f"{what}: coordinate {value:g} out of range 0..{COORD_MAX}")
    return int(math.floor(value + 0.5))


def point_from_numbers(nums: list[float], what: str) -> Point:
    """(x, y) from 2 numbers, or the centre of a box from 4 numbers (x1, y1, x2, y2)."""
    if len(nums) == 2:
        return coord(nums[0], what), coord(nums[1], what)
    if len(nums) == 4:
        for v in nums:
            coord(v, what)
        return coord((nums[0] + nums[2]) / 2, what), coord((nums[1] + nums[3]) / 2, what)
    raise ActionParseError(f"{what}: a point needs 2 numbers (or 4 for a box), got {len(nums)}")


def _point(node: ast.expr, what: str) -> Point:
    if not isinstance(node, (ast.Tuple, ast.List)):
        raise ActionParseError(f"{what}: expected a point (x,y), got {type(node).__name__}")
    return point_from_numbers([_number(e, what) for e in node.elts], what)


def _string(node: ast.expr, what: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ActionParseError(f"{what}: expected a string literal")


def _keys(node: ast.expr, what: str) -> tuple[str, ...]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_string(e, what) for e in node.elts)
    text = _string(node, what)
    parts = text.split("+")
    return tuple(parts) if len(parts) > 1 and all(p.strip() for p in parts) else (text,)


def _is_pointish(node: ast.expr) -> bool:
    return isinstance(node, (ast.Tuple, ast.List))


def _is_number(node: ast.expr) -> bool:
    try:
        _number(node, "")
    except ActionParseError:
        return False
    return True


def _is_string(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _convert(kind: str, node: ast.expr, what: str) -> object:
    if kind == "point":
        return _point(node, what)
    if kind == "keys":
        return _keys(node, what)
    value = _string(node, what)
    if kind == "direction" and value not in DIRECTIONS:
        raise ActionParseError(
            f"{what}: direction must be one of {list(DIRECTIONS)}, got {value!r}"
        )
    return value


def _assign_positional(
    cls: type[Action], args: list[ast.expr], platform: Platform
) -> dict[str, ast.expr | Point]:
    """Map positional arguments to parameter names (documented order, kind-directed)."""
    params = list(cls.PARAMS)
    name = cls.NAME
    if not args:
        return {}
    point_params = [p for p, k in params if k == "point"]
    if len(point_params) == 1 and len(args) in (2, 4) and all(_is_number(a) for a in args):
        nums = [_number(a, f"{name}.{point_params[0]}") for a in args]
        return {point_params[0]: point_from_numbers(nums, f"{name}.{point_params[0]}")}
    if cls is Hotkey and len(args) > 1 and all(_is_string(a) for a in args):
        return {"keys": ast.Tuple(elts=args, ctx=ast.Load())}
    if cls is Launch:
        if len(args) != 1:
            raise ActionParseError(f"Launch takes one positional argument, got {len(args)}")
        return {"app" if platform == "mobile" else "url": args[0]}
    out: dict[str, ast.expr | Point] = {}
    free = list(params)
    for i, arg in enumerate(args):
        want = "point" if _is_pointish(arg) else None
        for j, (pname, kind) in enumerate(free):
            if want == "point" and kind not in ("point", "keys"):
                continue
            if want is None and kind == "point":
                continue
            out[pname] = arg
            del free[j]
            break
        else:
            raise ActionParseError(
                f"{name}: unexpected positional argument #{i + 1}; "
                f"parameters are ({', '.join(p for p, _ in params) or 'none'})"
            )
    return out


def _literal_fallback(text: str) -> Action | None:
    """Read `Name(key='...')` literally between the outer quotes (unescaped inner quotes)."""
    paren = text.find("(")
    if paren <= 0 or not text.endswith(")"):
        return None
    name = text[:paren].strip()
    cls = ACTION_TYPES.get(name)
    if cls is None or not cls.PARAMS or any(k != "text" for _, k in cls.PARAMS) or cls is Launch:
        return None
    inner = text[paren + 1 : -1].strip()
    key = cls.PARAMS[0][0]
    head, eq, rest = inner.partition("=")
    if eq and head.strip() == key:
        inner = rest.strip()
    if len(inner) < 2 or inner[0] not in "'\"" or inner[-1] != inner[0]:
        return None
    try:
        return cls(**{key: inner[1:-1]})
    except ValidationError:
        return None


def _validation_message(name: str, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ()))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{name}{'.' + loc if loc else ''}: {msg}"


def _parse_call(text: str, platform: Platform) -> Action:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        fallback = _literal_fallback(text)
        if fallback is not None:
            return fallback
        raise ActionParseError(f"not a call expression: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise ActionParseError(f"not a call expression: {type(exc).__name__}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ActionParseError("expected a single call such as Click(box=(500,300))")
    name = call.func.id
    cls = ACTION_TYPES.get(name)
    if cls is None:
        raise ActionParseError(f"unknown action {name!r}; known: {', '.join(ACTION_TYPES)}")
    if any(isinstance(a, ast.Starred) for a in call.args):
        raise ActionParseError(f"{name}: *args are not allowed")
    nodes: dict[str, ast.expr | Point] = _assign_positional(cls, list(call.args), platform)
    known = {p for p, _ in cls.PARAMS}
    for kw in call.keywords:
        if kw.arg is None:
            raise ActionParseError(f"{name}: **kwargs are not allowed")
        if kw.arg not in known:
            raise ActionParseError(
                f"{name}: unknown argument {kw.arg!r}; "
                f"parameters are ({', '.join(known) or 'none'})"
            )
        if kw.arg in nodes:
            raise ActionParseError(f"{name}: argument {kw.arg!r} given twice")
        nodes[kw.arg] = kw.value
    kinds = dict(cls.PARAMS)
    values: dict[str, object] = {}
    for pname, node in nodes.items():
        what = f"{name}.{pname}"
        values[pname] = node if isinstance(node, tuple) else _convert(kinds[pname], node, what)
    try:
        return cls(**values)
    except ValidationError as exc:
        raise ActionParseError(_validation_message(name, exc)) from None


def parse_action(text: str, platform: Platform = "mobile") -> Action:
    """Parse one action and check it against `platform`'s rules.

    Raises ActionParseError (ActionValidationError for a broken platform rule) and nothing else on
    any text; an unknown `platform` is a ValueError (a caller bug).
    """
    space = space_for(platform)
    if not isinstance(text, str):
        raise ActionParseError(f"expected action text (str), got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionParseError(f"action text too long: {len(text)} > {MAX_ACTION_CHARS} characters")
    stripped = text.strip()
    if not stripped:
        raise ActionParseError("empty action text")
    try:
        action = _parse_call(stripped, platform)
    except RecursionError:
        raise ActionParseError("action text nested too deeply") from None
    space.validate(action)
    return action
