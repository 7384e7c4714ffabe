"""The `local` judge: a transformers checkpoint asked the same question as the `openai` judge.

Why: a laptop or a single GPU node can judge without serving vLLM. The prompt is the protocol's
(system prompt folded into the user turn, since the project's chat template has no system slot),
the picture is the same annotated screenshot, and the reply goes through the same strict parser,
so judgements from the two backends are interchangeable (their cache ids differ). Re-derivations
(the rebuild path) send the step's plain screenshot with the re-derivation system text and the
navigation prompt (`protocol.rederive_prompt`), read by the same parser as the `openai` judge's.
Decoding is greedy. torch and transformers are imported only when the judge is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from venus_core.config.registry import JUDGES
from venus_core.config.spec import ModelSpec, ScoringSpec
from venus_core.data.schema import NavigationStep
from venus_core.scoring.judges import JudgeBackend, JudgeFailure, Rederived, Verdict
from venus_core.scoring.overlay import OpenImage, judge_image
from venus_core.scoring.protocol import (
    REBUILD_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    JudgeReplyError,
    describe,
    parse_rederived,
    parse_reply,
    rederive_prompt,
)
from venus_core.scoring.rules import AnyRecord

T = TypeVar("T")
Item = TypeVar("Item")


class LocalJudge(JudgeBackend):
    """Judge with `venus_core.models.load_model` + `generate`, `batch_size` records per call."""

    can_rederive = True

    def __init__(
        self,
        checkpoint: str,
        *,
        open_image: OpenImage,
        model_spec: ModelSpec | None = None,
        tiny_dir: str | Path | None = None,
        device: Any = "auto",
        batch_size: int = 4,
        max_new_tokens: int = 256,
        model: Any = None,
        processor: Any = None,
        generate_fn: Callable[..., list[str]] | None = None,
    ) -> None:
        """`model`/`processor` skip loading (an already loaded pair); `generate_fn` replaces
        `venus_core.models.generation.generate` (same signature). The checkpoint goes on `device`
        ("auto": this process's GPU when there is one, else the CPU; `models.placement`), in the
        spec's dtype and attention kernel; the judge's inputs follow the model (`generate`)."""
        self.checkpoint = checkpoint
        self.judge_id = f"local:{checkpoint}"
        self.open_image = open_image
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.calls = 0
        if model is None or processor is None:
            from venus_core.models import load_model

            # a judge is a checkpoint from elsewhere: verified, its SHA256SUMS checked when it has one
            model, processor = load_model(checkpoint, model_spec or ModelSpec(), device, tiny_dir=tiny_dir,
                                          require_manifest=False)
        self.model, self.processor = model, processor
        if generate_fn is None:
            from venus_core.models.generation import generate

            generate_fn = generate
        self.generate = generate_fn

    @classmethod
    def from_spec(cls, spec: ScoringSpec, *, open_image: OpenImage, **options: Any) -> LocalJudge:
        if not spec.judge_model:
            raise ValueError(
                "scoring.judge=local needs scoring.judge_model (a local HF checkpoint directory, or 'tiny')"
            )
        return cls(spec.judge_model, open_image=open_image, **options)

    def _run(
        self,
        items: Sequence[Item],
        chat: Callable[[Item], list[dict[str, Any]]],
        parse: Callable[[Item, str], T],
    ) -> list[T | JudgeFailure]:
        out: list[T | JudgeFailure] = []
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            self.calls += 1
            replies = self.generate(self.model, self.processor, [chat(x) for x in chunk], self.max_new_tokens,
                                    temperature=0.0)
            for item, text in zip(chunk, replies, strict=True):
                try:
                    out.append(parse(item, text))
                except JudgeReplyError as exc:
                    out.append(JudgeFailure(f"bad judge reply: {exc}", self.judge_id))
        return out

    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        from venus_core.models.prompts import build_messages

        return self._run(
            records,
            lambda r: build_messages(judge_image(r, self.open_image), f"{SYSTEM_PROMPT}\n\n{describe(r)}"),
            lambda r, text: parse_reply(text, r.kind, self.judge_id),
        )

    def rederive_many(self, steps: Sequence[NavigationStep]) -> list[Rederived]:
        from venus_core.models.prompts import build_messages

        return self._run(
            steps,
            lambda s: build_messages(self.open_image(s.image), f"{REBUILD_SYSTEM_PROMPT}\n\n{rederive_prompt(s)}"),
            lambda s, text: parse_rederived(text, s.platform),
        )

JUDGES.register("local", LocalJudge, description="a local transformers checkpoint through the judge prompt")
