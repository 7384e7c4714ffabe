"""Seed task prompts of the flywheel: one per app / site, from a file or the task pool's templates.

A seed names where tasks live (env, app, curriculum level) and what they look like: a prompt,
optionally a template whose `<...>` parts are the parameters an expander fills in ("Click the
<colour> button"), plus example goals. The rules expander instantiates a seed by choosing start
states whose goal fits the template; the openai expander shows the prompt and the examples to a
model that writes goals.

Without a seeds file, `pool_seeds` derives one seed per (level, app) from the online task pool's
static sim-phone tasks (`rl.online.sim_phone_tasks`): the template is the goals' longest common
leading and trailing words around `<...>` ("Click the <...> button" for the board levels), so a
seed covers every static task of its app and level. On MiniWoB++ (env `miniwob`) the app is the
task and there are no levels: one seed per task, from a sample of its pages (`web_space`), e.g.
`Click on the <...> button.`; in a seeds file a MiniWoB++ entry names the task as its app and
leaves the level out (or 0).

Seed files are JSONL (one object per line) or YAML (a list); every entry is validated and an error
names the file and the entry (fail closed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

PLACEHOLDER = re.compile(r"<[^<>]*>")
MAX_EXAMPLES = 3


@dataclass(frozen=True)
class Seed:
    """A seed task prompt; `key` is unique within a run."""

    key: str
    env: str
    app: str
    level: int
    prompt: str
    examples: tuple[str, ...] = ()

    def matches(self, goal: str) -> bool:
        """Whether `goal` instantiates this seed's prompt (`<...>` = any text; case and spacing ignored)."""
        return template_regex(self.prompt).fullmatch(normalise(goal)) is not None


class _SeedEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    env: Literal["sim-phone", "miniwob"] = Field("sim-phone", description="environment")
    app: str = Field(..., min_length=1, description="app of the synthetic phone (its registry name), or the "
                     "MiniWoB++ task")
    level: int | None = Field(None, ge=0, le=6, description="curriculum level (sim-phone; none or 0 on miniwob)")
    prompt: str = Field(..., min_length=1, description="task prompt; <...> marks a parameter")
    examples: list[str] = Field(default_factory=list, description="example goals")

    @model_validator(mode="after")
    def _level(self) -> _SeedEntry:
        if self.env == "sim-phone" and self.level is None:
            raise ValueError("level: a sim-phone seed needs its curriculum level")
        if self.env == "miniwob" and self.level not in (None, 0):
            raise ValueError("level: MiniWoB++ tasks have no curriculum level (leave it out)")
        return self


def normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def template_regex(prompt: str) -> re.Pattern[str]:
    parts = PLACEHOLDER.split(normalise(prompt))
    return re.compile(".+?".join(re.escape(p) for p in parts))


def load_seeds(path: str | Path) -> list[Seed]:
    """Seeds from a JSONL or YAML file; an invalid entry is an error naming the file and the entry."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"seeds file {path}: {exc}") from None
    items: list[tuple[str, Any]]
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"seeds file {path}: not YAML: {exc}") from None
        if not isinstance(loaded, list):
            raise ValueError(f"seeds file {path}: expected a YAML list of seeds, got {type(loaded).__name__}")
        items = [(f"item {i}", x) for i, x in enumerate(loaded)]
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"seeds file {path} line {n}: not JSON: {exc}") from None
    seeds = []
    for i, (where, obj) in enumerate(items):
        try:
            e = _SeedEntry.model_validate(obj)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or '<entry>'}: {err['msg']}"
                                 for err in exc.errors(include_url=False))
            raise ValueError(f"seeds file {path} {where}: {problems}") from None
        level = e.level or 0
        seeds.append(Seed(f"{seed_key(e.env, e.app, level)}:{i}", e.env, e.app, level, e.prompt, tuple(e.examples)))
    if not seeds:
        raise ValueError(f"seeds file {path}: no seeds")
    return seeds


def common_template(goals: Sequence[str]) -> str:
    """The goals' common leading and trailing words around one `<...>` (the goal itself when all
    are equal; `<...>` alone when they share nothing)."""
    words = [g.split() for g in goals]
    if all(w == words[0] for w in words):
        return " ".join(words[0])
    shortest = min(len(w) for w in words)
    head = 0
    while head < shortest and all(w[head] == words[0][head] for w in words):
        head += 1
    tail = 0
    while tail < shortest - head and all(w[-1 - tail] == words[0][-1 - tail] for w in words):
        tail += 1
    middle = ["<...>"]
    return " ".join(words[0][:head] + middle + (words[0][len(words[0]) - tail:] if tail else []))


def seed_key(env: str, app: str, level: int) -> str:
    """`sim-phone:<app>:level=<L>`; `miniwob:<task>` (MiniWoB++ has no levels)."""
    return f"{env}:{app}" if env == "miniwob" else f"{env}:{app}:level={level}"


def pool_seeds(tasks: Sequence[Any]) -> list[Seed]:
    """One seed per (env, level, app) of the task pool's static tasks (`PoolTask`s), in order."""
    groups: dict[tuple[str, int, str], list[str]] = {}
    for t in tasks:
        groups.setdefault((t.env, int(t.task.difficulty), t.task.app or ""), []).append(t.task.goal)
    seeds = []
    for (env, level, app), goals in groups.items():
        distinct = list(dict.fromkeys(goals))
        seeds.append(Seed(seed_key(env, app, level), env, app, level, common_template(distinct),
                          tuple(distinct[:MAX_EXAMPLES])))
    return seeds


__all__ = ["Seed", "common_template", "load_seeds", "normalise", "pool_seeds", "seed_key", "template_regex"]
