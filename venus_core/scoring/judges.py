"""Judge backends behind one interface, built from the spec, with the on-disk cache in front.

Why: the scoring stage should not care whether a score comes from rules, a vLLM server or a local
transformers model. A `JUDGES` entry is either a plain function record -> Judgement (the `rules`
judge) or a `JudgeBackend` subclass with `from_spec`; `make_judge` turns either into a backend
that judges a batch of records (so network backends can keep several requests in flight) and
wraps it in the (sample hash, judge id, prompt version) cache.

A backend that cannot judge a sample after its retries returns a `JudgeFailure` for it instead of
raising, so one bad sample does not sink a run; the scoring stage counts failures and discards
those samples with the failure as the reason (nothing is dropped silently).

MLLM backends (`can_rederive`) also re-derive a navigation step from its screenshot and context
(`rederive_many`, the rebuild path of imported episodes; `protocol.rederive_messages`); the `rules`
judge cannot. `stats()` is what a backend has cost so far (requests, tokens where the server
reports them, cache hits and misses); the policy reports the difference over each dataset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from venus_core.actions import NavStep, render_navigation

from venus_core.config.registry import JUDGES
from venus_core.config.spec import ScoringSpec
from venus_core.scoring.cache import JudgementCache
from venus_core.scoring.overlay import OpenImage
from venus_core.data.schema import NavigationStep
from venus_core.scoring.protocol import JudgeReplyError, parse_rederived, sample_hash
from venus_core.scoring.rules import AnyRecord, Judgement


@dataclass(frozen=True)
class JudgeFailure:
    """A sample the judge could not score (after retries), and why."""

    reason: str
    judge: str


Verdict = Judgement | JudgeFailure
Rederived = NavStep | JudgeFailure


@dataclass(frozen=True)
class JudgeStats:
    """What a backend has cost: requests made, tokens (None where the backend does not count them),
    cache hits and misses. `a - b` is the cost between two snapshots."""

    calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cache_hits: int = 0
    cache_misses: int = 0

    def __sub__(self, other: JudgeStats) -> JudgeStats:
        def minus(a: int | None, b: int | None) -> int | None:
            return None if a is None else a - (b or 0)

        return JudgeStats(**{f.name: minus(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})


class JudgeBackend(ABC):
    """Judges batches of records. `judge_id` names the backend and model (part of the cache key)."""

    judge_id: str = ""
    calls: int = 0  # backend requests made (HTTP calls, model generate calls, function calls)
    can_rederive: bool = False  # whether `rederive_many` can re-derive navigation steps

    @classmethod
    def from_spec(cls, spec: ScoringSpec, *, open_image: OpenImage, **options: Any) -> JudgeBackend:
        raise NotImplementedError(f"{cls.__name__} cannot be built from a spec")

    @abstractmethod
    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        """One verdict per record, in order."""

    def rederive_many(self, steps: Sequence[NavigationStep]) -> list[Rederived]:
        """One re-derived step (think, action, conclusion) per step, in order; backends with
        `can_rederive` override this."""
        raise NotImplementedError(f"judge {self.judge_id!r} cannot re-derive navigation steps")

    def stats(self) -> JudgeStats:
        return JudgeStats(calls=self.calls)

    def close(self) -> None:  # noqa: B027 - a hook with a no-op default, not an abstract method
        """Release resources (connections, models)."""


class FunctionJudge(JudgeBackend):
    """A registered function record -> Judgement (e.g. the `rules` judge) as a backend."""

    def __init__(self, name: str, fn: Callable[[AnyRecord], Judgement]) -> None:
        self.judge_id = name
        self.fn = fn
        self.calls = 0

    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        self.calls += len(records)
        return [self.fn(r) for r in records]


class CachedJudge(JudgeBackend):
    """Serves cached judgements and sends only the misses to the inner backend."""

    def __init__(self, inner: JudgeBackend, cache: JudgementCache, prompt_version: str) -> None:
        self.inner = inner
        self.cache = cache
        self.prompt_version = prompt_version
        self.judge_id = inner.judge_id

    @property
    def calls(self) -> int:  # type: ignore[override]
        return self.inner.calls

    @property
    def can_rederive(self) -> bool:  # type: ignore[override]
        return self.inner.can_rederive

    def stats(self) -> JudgeStats:
        inner = self.inner.stats()
        return JudgeStats(inner.calls, inner.prompt_tokens, inner.completion_tokens, self.cache.hits, self.cache.misses)

    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        hashes = [sample_hash(r) for r in records]
        cached = self.cache.get_many(hashes, self.judge_id, self.prompt_version)
        todo = [i for i, h in enumerate(hashes) if h not in cached]
        fresh = self.inner.judge_many([records[i] for i in todo]) if todo else []
        out: list[Verdict | None] = [cached.get(h) for h in hashes]
        store: list[tuple[str, Judgement]] = []
        for i, verdict in zip(todo, fresh, strict=True):
            out[i] = verdict
            if isinstance(verdict, Judgement):  # failures are retried on the next run
                store.append((hashes[i], verdict))
        if store:
            self.cache.put_many(store, self.judge_id, self.prompt_version)
        return [v for v in out if v is not None]

    def rederive_many(self, steps: Sequence[NavigationStep]) -> list[Rederived]:
        """Re-derived steps from the cache (stored as their canonical answer text), the rest from
        the inner backend."""
        key = f"{self.judge_id}#rederive"
        hashes = [sample_hash(s) for s in steps]
        cached = self.cache.get_payloads(hashes, key, self.prompt_version)
        out: list[Rederived | None] = [None] * len(steps)
        todo: list[int] = []
        for i, h in enumerate(hashes):
            try:
                out[i] = parse_rederived(cached[h]["text"], steps[i].platform) if h in cached else None
            except (JudgeReplyError, KeyError, TypeError):  # an entry the parser no longer accepts: ask again
                out[i] = None
            if out[i] is None:
                todo.append(i)
        fresh = self.inner.rederive_many([steps[i] for i in todo]) if todo else []
        store: list[tuple[str, dict[str, Any]]] = []
        for i, result in zip(todo, fresh, strict=True):
            out[i] = result
            if isinstance(result, NavStep):
                store.append((hashes[i], {"text": render_navigation(result)}))
        if store:
            self.cache.put_payloads(store, key, self.prompt_version)
        return [r for r in out if r is not None]

    def close(self) -> None:
        self.inner.close()
        self.cache.close()


def make_judge(
    spec: ScoringSpec, *, open_image: OpenImage, cache_path: str | Path | None = None, **options: Any
) -> JudgeBackend:
    """The backend named by `spec.judge`, cached at `cache_path` when `spec.cache` is on."""
    obj = JUDGES.get(spec.judge)
    backend: JudgeBackend
    if isinstance(obj, type) and issubclass(obj, JudgeBackend):
        backend = obj.from_spec(spec, open_image=open_image, **options)
    elif callable(obj):
        backend = FunctionJudge(spec.judge, obj)
    else:
        raise TypeError(f"judge {spec.judge!r} is registered as {type(obj).__name__}, not a judge")
    if spec.cache and cache_path is not None:
        return CachedJudge(backend, JudgementCache(cache_path), spec.prompt_version)
    return backend
