"""Registries for the pluggable pieces of the platform.

Why: a new behaviour (a reward, an environment, a judge backend, a merge method, an importer…)
should be one registered function plus one test, and the agent spec should be able to name it.
The spec lives at the bottom of the import graph, so it cannot import the packages that provide
the pieces; instead, providers are *plugins*: modules listed under the entry-point group
`venus_core.plugins.<kind>` of the registry they fill (pyproject.toml). The first look-up in a
registry imports that kind's plugins once (and only those: asking for an importer does not pay for
importing torch through the merge methods), and each registers its pieces at import time.
Third-party packages extend Venus the same way.

Rules: registering a name twice is an error; asking for an unknown name is an error that lists
the known ones.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")

PLUGIN_GROUP = "venus_core.plugins"
"""Entry-point groups are `venus_core.plugins.<registry kind>`."""


class RegistryError(ValueError):
    """A registry was misused: duplicate name, unknown name or unknown registry kind."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    description: str
    module: str


class Registry(Generic[T]):
    """A named collection of pluggable objects of one kind (e.g. all reward functions)."""

    def __init__(self, kind: str, description: str) -> None:
        self.kind = kind
        self.description = description
        self._entries: dict[str, Entry[T]] = {}
        self._lock = threading.Lock()

    @overload
    def register(self, name: str, obj: T, *, description: str = "") -> T: ...

    @overload
    def register(self, name: str, *, description: str = "") -> Callable[[T], T]: ...

    def register(self, name: str, obj: Any = None, *, description: str = "") -> Any:
        """Register `obj` under `name`; without `obj`, return a decorator."""
        if not name or not isinstance(name, str) or name != name.strip():
            raise RegistryError(f"{self.kind}: invalid name {name!r}")

        def add(o: T) -> T:
            doc = description or (getattr(o, "__doc__", None) or "").strip().split("\n")[0]
            with self._lock:
                if name in self._entries:
                    prev = self._entries[name]
                    raise RegistryError(
                        f"{self.kind}: {name!r} is already registered (by {prev.module})"
                    )
                self._entries[name] = Entry(name, o, doc, getattr(o, "__module__", "?"))
            return o

        if obj is None:
            return add
        return add(obj)

    def unregister(self, name: str) -> None:
        """Remove `name` (tests use this to clean up what they registered)."""
        with self._lock:
            self._entries.pop(name, None)

    def get(self, name: str) -> T:
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        load_plugins(self.kind)
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names()) or '(none)'}"
            ) from None

    def names(self) -> list[str]:
        load_plugins(self.kind)
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        load_plugins(self.kind)
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        load_plugins(self.kind)
        return iter([self._entries[n] for n in sorted(self._entries)])

    def __len__(self) -> int:
        load_plugins(self.kind)
        return len(self._entries)


_REGISTRIES: dict[str, Registry[Any]] = {}


def _declare(kind: str, description: str) -> Registry[Any]:
    reg: Registry[Any] = Registry(kind, description)
    _REGISTRIES[kind] = reg
    return reg


ACTION_SPACES = _declare("action_spaces", "platform rule sets of the unified action space")
REWARDS = _declare("rewards", "reward functions (completions, references) -> floats")
ENVS = _declare("envs", "environment backends (web, android, simulated phone, ...)")
JUDGES = _declare("judges", "data-quality judge backends (rules, openai, local)")
MERGE_METHODS = _declare("merge_methods", "checkpoint merge methods (ties, linear, ...)")
IMPORTERS = _declare("importers", "dataset importers from public formats")
SYNTH_APPS = _declare("synth_apps", "apps of the synthetic GUI world")
GENERATION_BACKENDS = _declare("generation_backends", "text generation backends")
EVAL_SUITES = _declare("eval_suites", "evaluators (grounding, nav_offline, online)")
EXPANDERS = _declare("expanders", "data-flywheel task expanders (rules, openai)")


def registry(kind: str) -> Registry[Any]:
    """The registry of one kind, e.g. `registry("rewards")`."""
    try:
        return _REGISTRIES[kind]
    except KeyError:
        raise RegistryError(
            f"unknown registry kind {kind!r}; known: {', '.join(sorted(_REGISTRIES))}"
        ) from None


def registry_kinds() -> list[str]:
    return sorted(_REGISTRIES)


_loaded_kinds: set[str] = set()
_plugins_lock = threading.RLock()


def load_plugins(kind: str | None = None) -> None:
    """Import the plugin modules of one registry kind (all kinds when None), once per kind.

    A plugin that fails to import is an error naming the plugin: a half-loaded registry would let
    a spec validate against a partial set of names.
    """
    kinds = sorted(_REGISTRIES) if kind is None else [kind]
    for k in kinds:
        if k in _loaded_kinds:
            continue
        with _plugins_lock:
            if k in _loaded_kinds:
                continue
            _loaded_kinds.add(k)  # first: plugins may use the registry while importing
            eps = importlib.metadata.entry_points(group=f"{PLUGIN_GROUP}.{k}")
            for ep in sorted(eps, key=lambda e: e.name):
                try:
                    importlib.import_module(ep.value)
                except Exception as exc:  # noqa: BLE001 - re-raised with the plugin's name
                    _loaded_kinds.discard(k)
                    raise RegistryError(
                        f"{k} plugin {ep.name!r} ({ep.value}) failed to import: {exc}"
                    ) from exc
