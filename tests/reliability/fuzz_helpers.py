"""Machinery of the fuzz suite (issue 22 §1): budgets, the run loop, the tally and its report.

Each target is one test parametrised over two budgets: `default` runs in the ordinary suite
(`VENUS_FUZZ_EXAMPLES`, default 300 examples, derandomised so that CI sees the same inputs every
time) and `long` carries the `fuzz_long` marker, which the suite deselects unless it is asked for
(`-m fuzz_long`), with `VENUS_FUZZ_LONG_EXAMPLES` (default 10,000) examples and a seed from
`VENUS_FUZZ_SEED` (random when unset; the seed is reported).

A check returns the outcome of one input: "accepted" or the name of the documented error that
refused it (an importer check returns the outcome of every source record it generated). Any other
exception is a crash: hypothesis shrinks it and the test fails. After the run the tally must show at
least the budget's examples, so that a reduced run cannot pass as a full one.

`VENUS_FUZZ_REPORT=FILE` appends one JSON line per target run (target, budget, examples, inputs,
outcomes, seed, seconds): the figures in docs/reliability.md come from it.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

T = TypeVar("T")
Outcome = str | Counter[str]

DEFAULT_EXAMPLES = int(os.environ.get("VENUS_FUZZ_EXAMPLES", "300"))
LONG_EXAMPLES = int(os.environ.get("VENUS_FUZZ_LONG_EXAMPLES", "10000"))



@dataclass(frozen=True)
class Budget:
    """How many examples a target runs, and whether this is the long job (random seed)."""

    name: str
    examples: int

    @property
    def long(self) -> bool:
        return self.name == "long"


BUDGETS = [
    pytest.param(Budget("default", DEFAULT_EXAMPLES), id="default"),
    pytest.param(Budget("long", LONG_EXAMPLES), id="long", marks=pytest.mark.fuzz_long),
]
"""`@pytest.mark.parametrize("budget", BUDGETS)` on every fuzz target."""


@dataclass
class Tally:
    """What one target's run saw: examples, inputs (source records for importers), outcomes."""

    target: str
    budget: Budget
    examples: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def inputs(self) -> int:
        return sum(self.outcomes.values())

    def add(self, outcome: Outcome) -> None:
        self.examples += 1
        if isinstance(outcome, str):
            self.outcomes[outcome] += 1
        else:
            self.outcomes.update(outcome)


def fuzz(target: str, strategy: st.SearchStrategy[T], check: Callable[[T], Outcome], budget: Budget) -> Tally:
    """Run `check` on `budget.examples` examples of `strategy`; the tally (also appended to the report)."""
    tally = Tally(target, budget)
    long = budget.long
    run_seed = int(os.environ.get("VENUS_FUZZ_SEED") or random.SystemRandom().randrange(2**32)) if long else 0

    @settings(max_examples=budget.examples, deadline=None, database=None, derandomize=not long,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(strategy)
    def run(value: T) -> None:
        tally.add(check(value))

    started = time.perf_counter()
    (seed(run_seed)(run) if long else run)()
    seconds = time.perf_counter() - started
    report = os.environ.get("VENUS_FUZZ_REPORT")
    if report:
        line = {"target": target, "budget": budget.name, "examples": tally.examples, "inputs": tally.inputs,
                "outcomes": dict(sorted(tally.outcomes.items())), "seed": run_seed if long else "derandomized",
                "seconds": round(seconds, 1)}
        with open(report, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    assert tally.examples >= budget.examples, f"{target}: only {tally.examples} of {budget.examples} examples ran"
    return tally


def outcome_of(call: Callable[[], Any], documented: tuple[type[BaseException], ...]) -> str:
    """"accepted" when `call` returns, the error's class name when it raises a documented error;
    anything else propagates (a crash)."""
    try:
        call()
    except documented as exc:
        return type(exc).__name__
    return "accepted"


# ---- hostile values shared by the targets ------------------------------------------------------

HUGE_INT_TEXT = "9" * 5000
"""Longer than Python's int-parsing limit (4,300 digits): `json.loads` raises ValueError on it."""
DEEP_JSON = "[" * 5000
"""Deeper than the JSON decoder's recursion limit: `json.loads` raises RecursionError on it."""

def yaml_alias_bomb(levels: int, fanout: int, use: str) -> str:
    """YAML where each of `levels` anchors lists `fanout` aliases of the one before ("billion laughs":
    fanout**(levels-1) values from a few hundred bytes); `use` is the last line, with `{alias}` for
    the last anchor (e.g. "mid_train: {{max_steps: {alias}}}")."""
    lines = ["a0: &a0 [lol]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]")
    lines.append(use.format(alias=f"*a{levels - 1}"))
    return "\n".join(lines) + "\n"


HOSTILE_NUMBERS = st.sampled_from([
    float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, -0.0, 0.5, 1000.5, -1,
    2**31, 2**63, 2**64 + 1, 10**30, -(10**30), 10**400,
])
HOSTILE_STRINGS = st.sampled_from([
    "", " ", "\n", "\x00", "a\x00b", "\ud800", "\u202e", "💥" * 3, "../../outside/secret.png",
    "/etc/passwd", "C:\\Windows\\win.ini", "\\\\server\\share\\x.png", "~/x", "file:///etc/passwd",
    "s3://bucket/../x", "data:image/png;base64,AAAA", "iVBORw0KGgo=", "/9j/", "NaN", "Infinity",
    HUGE_INT_TEXT[:50], "x" * 300, "%s%n", "{}", "[]", "null",
])
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), HOSTILE_NUMBERS, HOSTILE_STRINGS,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10,
)
TEXT_TOKENS = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"', "\\", "\\u0000", "\\ud800", "\n", "\r", "\t", " ", "NaN",
    "-Infinity", "1e999", "-0", "null", "true", HUGE_INT_TEXT, DEEP_JSON, "\x00", "\ufeff", "\u2028",
])


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _set(value: Any, path: tuple[Any, ...], op: str, new: Any) -> Any:
    if not path:
        return new if op != "wrap" else [value]
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if not rest and op == "delete":
            copy.pop(head, None)
        else:
            copy[head] = _set(value[head], rest, op, new)
        return copy
    copy_list = list(value)
    if not rest and op == "delete":
        del copy_list[head]
    else:
        copy_list[head] = _set(value[head], rest, op, new)
    return copy_list


@st.composite
def mutated(draw: st.DrawFn, valid: Any, max_edits: int = 3) -> Any:
    """`valid` with 0..max_edits structural edits: a value replaced by a hostile JSON value, a key
    or item deleted, a value wrapped in a list, an unknown key added."""
    value = valid
    for _ in range(draw(st.integers(0, max_edits))):
        paths = _paths(value)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        op = draw(st.sampled_from(["replace", "replace", "delete", "wrap", "add"]))
        if op == "add":
            target = value
            for p in path:
                target = target[p]
            if isinstance(target, dict):
                extra = draw(st.text(min_size=1, max_size=8))
                value = _set(value, path, "replace", {**target, extra: draw(JSON_VALUES)})
            continue
        if op == "delete" and not path:
            continue
        value = _set(value, path, op, draw(JSON_VALUES))
    return value


@st.composite
def mutated_text(draw: st.DrawFn, text: str, max_edits: int = 4) -> str:
    """`text` with 1..max_edits textual edits (insert a hostile token, delete or duplicate a span)."""
    for _ in range(draw(st.integers(1, max_edits))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "insert", "delete", "duplicate", "truncate"]))
        if op == "insert":
            text = text[:at] + draw(st.one_of(TEXT_TOKENS, st.text(max_size=4))) + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)):]
        elif op == "duplicate":
            text = text[:at] + text[at:at + draw(st.integers(1, 40))] * 2 + text[at + 40:]
        else:
            text = text[:at]
    return text


def write_tree(root: Path, files: dict[str, bytes | Path]) -> None:
    """Files under `root`: bytes are written, a Path becomes a symlink to it."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            path.symlink_to(content)
        else:
            path.write_bytes(content)
