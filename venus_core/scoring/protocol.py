"""The judge protocol: what an MLLM judge is asked about a sample and how its reply is read.

Why one module: the `openai` and `local` backends must send the same prompt and read replies the
same way, and the cache key includes the prompt version, so a prompt change can never serve a
stale judgement. UI-Venus-1.5 scores each sample 0–10 on action–visual alignment and task
reachability; the paper does not publish its judge prompt, so the wording below is ours.

Replies are parsed strictly: the reply must contain exactly one JSON object (optionally inside a
```json fence) with integer scores in 0..10, a rationale string and an optional proposal whose keys
are the fields the policy knows how to rewrite. Anything else is a `JudgeReplyError`, which the
backends treat as a failed attempt (retried, then counted), never as a score.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from venus_core.data.schema import GroundingSample, NavigationStep, QASample, Trajectory
from venus_core.scoring.rules import AnyRecord, Judgement

PROPOSAL_KEYS: dict[str, tuple[str, ...]] = {
    "grounding": ("instruction",),
    "navigation_step": ("goal", "instruction", "action"),
    "trajectory": ("goal",),
    "qa": ("question", "answer"),
}
"""Fields a judge may propose to rewrite, per record kind (the policy applies them)."""

SYSTEM_PROMPT = (
    "You are a strict data-quality judge for GUI-agent training data. You see a screenshot on "
    "which the recorded action is drawn (red: the point, swipe or box the action uses; green: the "
    "target element recorded by the dataset) and a description of the sample. Score two axes from "
    "0 to 10: 'alignment' (does the action or answer match what the screen shows?) and "
    "'reachability' (can the instruction or goal be achieved as recorded?). Reply with one JSON "
    'object and nothing else: {"alignment": int, "reachability": int, "rationale": str, '
    '"proposal": object or null}. When a score is between 4 and 6, "proposal" holds a corrected '
    "version of the fields named in the description (only those keys); otherwise null."
)


class JudgeReplyError(ValueError):
    """A judge reply that is not one valid judgement object."""


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alignment: StrictInt = Field(ge=0, le=10)
    reachability: StrictInt = Field(ge=0, le=10)
    rationale: StrictStr
    proposal: dict[str, StrictStr] | None = None


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


def sample_hash(record: AnyRecord) -> str:
    """sha256 of the record's canonical JSON; image refs are content hashes, so this covers pixels."""
    return hashlib.sha256(record.model_dump_json().encode("utf-8")).hexdigest()


def describe(record: AnyRecord) -> str:
    """The text part of the judge prompt for one record (the image carries the rest)."""
    keys = ", ".join(PROPOSAL_KEYS[record.kind])
    if isinstance(record, GroundingSample):
        target = (
            "none: the element should NOT be on screen (refusal)"
            if record.refusal
            else f"box {list(record.box or ())}"
        )
        body = f"Grounding sample ({record.platform}).\nInstruction: {record.instruction}\nRecorded target: {target}"
    elif isinstance(record, NavigationStep):
        history = "\n".join(f"  {i}. {h.action}" for i, h in enumerate(record.history)) or "  (none)"
        body = (
            f"Navigation step {record.step_index} ({record.platform}).\nGoal: {record.goal}\n"
            f"Step instruction: {record.instruction or '-'}\nEarlier actions:\n{history}\n"
            f"Thought: {record.think}\nAction: {record.action}"
        )
    elif isinstance(record, Trajectory):
        steps = "\n".join(f"  {i}. {s.action}" for i, s in enumerate(record.steps))
        body = (
            f"Whole episode ({record.platform}, {len(record.steps)} steps, recorded success="
            f"{record.success}); the image shows up to four of its screens left to right.\n"
            f"Goal: {record.goal}\nActions:\n{steps}"
        )
    elif isinstance(record, QASample):
        body = f"{record.domain} question about the screen.\nQuestion: {record.question}\nAnswer: {record.answer}"
    else:
        raise TypeError(f"not a record: {type(record).__name__}")
    return f"{body}\n\nProposal keys allowed for this sample: {keys}."


def chat_messages(record: AnyRecord, image_url: str) -> list[dict[str, Any]]:
    """OpenAI chat messages: system prompt, then one user turn with the image and description."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": describe(record)},
            ],
        },
    ]


def parse_reply(text: str, kind: str, judge: str) -> Judgement:
    """The Judgement in a judge's reply text; JudgeReplyError naming what is wrong otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise JudgeReplyError("empty reply")
    m = _FENCE.match(text)
    body = m.group(1) if m else text.strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise JudgeReplyError(
            f"reply is not one JSON object: {exc.msg} at char {exc.pos}: {text[:120]!r}"
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit integer, nesting past the limit
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:120]
        raise JudgeReplyError(f"reply is not one JSON object: {why}") from None
    if not isinstance(obj, dict):
        raise JudgeReplyError(f"reply is JSON {type(obj).__name__}, not an object")
    try:
        reply = _Reply.model_validate(obj)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<reply>'}: {e['msg']}" for e in exc.errors())
        raise JudgeReplyError(f"invalid judgement: {fields}") from None
    proposal = reply.proposal or None
    if proposal is not None:
        bad = sorted(set(proposal) - set(PROPOSAL_KEYS[kind]))
        if bad:
            raise JudgeReplyError(
                f"proposal keys {bad} not allowed for {kind}; allowed: {list(PROPOSAL_KEYS[kind])}"
            )
    return Judgement(reply.alignment, reply.reachability, (reply.rationale,), proposal, judge)


def judgement_to_dict(j: Judgement) -> dict[str, Any]:
    return {
        "alignment": j.alignment,
        "reachability": j.reachability,
        "rationale": list(j.rationale),
        "proposal": j.proposal,
        "judge": j.judge,
    }


def judgement_from_dict(d: dict[str, Any]) -> Judgement:
    return Judgement(
        int(d["alignment"]), int(d["reachability"]), tuple(d["rationale"]), d.get("proposal"), str(d["judge"])
    )
