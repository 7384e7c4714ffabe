"""The judge protocol: what an MLLM judge is asked about a sample and how its reply is read.

Why one module: the `openai` and `local` backends must send the same prompt and read replies the
same way, and the cache key includes the prompt version, so a prompt change can never serve a
stale judgement. UI-Venus-1.5 scores each sample 0–10 on action–visual alignment and task
reachability; the paper does not publish its judge prompt, so the wording below is ours.

Replies are parsed strictly: the reply must contain exactly one JSON object (optionally inside a
```json fence) with integer scores in 0..10, a rationale string, an optional proposal whose keys
are the fields the policy knows how to rewrite and, for a whole episode, an optional `step` (the
0-based index of its first wrong step, which the rebuild path re-derives). Anything else is a
`JudgeReplyError`, which the backends treat as a failed attempt (retried, then counted), never as
a score.

Re-deriving a step (the rebuild path of records that no generator can remake, e.g. an imported
AndroidControl episode): the judge gets the step's plain screenshot and the UI-Venus-1.5 navigation
prompt of that step (goal, step instruction, the earlier steps; `models.prompts.navigation_prompt`)
behind a system turn saying what the answer is for, and must answer like the agent would:
`<think>…</think><action>…</action><conclusion>…</conclusion>`, read by the project's parser
(`actions.parse_navigation`, the platform's action rules included). A reply that does not parse is
a `JudgeReplyError` too.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from venus_core.actions import ActionParseError, NavStep, parse_navigation
from venus_core.data.schema import GroundingSample, NavigationStep, QASample, Trajectory
from venus_core.models.prompts import HISTORY_STEPS, navigation_prompt
from venus_core.scoring.rules import AnyRecord, Judgement

PROPOSAL_KEYS: dict[str, tuple[str, ...]] = {
    "grounding": ("instruction",),
    "navigation_step": ("goal", "instruction", "think", "action"),
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
    '"proposal": object or null, "step": int or null}. When a score is between 4 and 6, "proposal" '
    "holds a corrected version of the fields named in the description (only those keys); otherwise "
    'null. For a whole episode, "step" is the 0-based index of its first wrong step (null when no '
    "step is wrong); for other samples it is null."
)

REBUILD_SYSTEM_PROMPT = (
    "You are repairing GUI-agent training data. A judge found the recorded step of this episode "
    "wrong. The screenshot is the screen the agent saw at this step; the task and the earlier steps "
    "follow. Answer with the step a careful agent should take here, exactly in the output format "
    "the instructions ask for."
)
"""The system turn of a re-derivation request (the user turn is the UI-Venus navigation prompt)."""


class JudgeReplyError(ValueError):
    """A judge reply that is not one valid judgement object."""


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alignment: StrictInt = Field(ge=0, le=10)
    reachability: StrictInt = Field(ge=0, le=10)
    rationale: StrictStr
    proposal: dict[str, StrictStr] | None = None
    step: StrictInt | None = Field(None, ge=0)


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
            f"{record.success}); the image shows up to four of its screens left to right"
            f"{', the last one the screen after the final step' if 'final_image' in record.meta else ''}.\n"
            f"Goal: {record.goal}\nActions:\n{steps}"
        )
    elif isinstance(record, QASample):
        body = f"{record.domain} question about the screen.\nQuestion: {record.question}\nAnswer: {record.answer}"
    else:
        raise TypeError(f"not a record: {type(record).__name__}")
    return f"{body}\n\nProposal keys allowed for this sample: {keys}."


def _messages(system: str, image_url: str, text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": text}],
        },
    ]


def chat_messages(record: AnyRecord, image_url: str) -> list[dict[str, Any]]:
    """OpenAI chat messages: system prompt, then one user turn with the image and description."""
    return _messages(SYSTEM_PROMPT, image_url, describe(record))


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
    if reply.step is not None and kind != "trajectory":
        raise JudgeReplyError(f"step {reply.step} named for a {kind} sample; only whole episodes name a step")
    return Judgement(reply.alignment, reply.reachability, (reply.rationale,), proposal, judge, reply.step)


def judgement_to_dict(j: Judgement) -> dict[str, Any]:
    return {
        "alignment": j.alignment,
        "reachability": j.reachability,
        "rationale": list(j.rationale),
        "proposal": j.proposal,
        "judge": j.judge,
        "step": j.step,
    }


def judgement_from_dict(d: dict[str, Any]) -> Judgement:
    step = d.get("step")
    return Judgement(
        int(d["alignment"]), int(d["reachability"]), tuple(d["rationale"]), d.get("proposal"), str(d["judge"]),
        None if step is None else int(step),
    )


# --------------------------------------------------------------------------- re-deriving a step


def step_of(record: NavigationStep | Trajectory, index: int | None = None) -> NavigationStep:
    """The step to re-derive as a NavigationStep (its screenshot, goal and earlier steps): the
    record itself, or step `index` of a whole episode (ValueError when out of range)."""
    if isinstance(record, NavigationStep):
        return record
    if index is None or not 0 <= index < len(record.steps):
        raise ValueError(f"episode {record.id!r} has {len(record.steps)} steps; no step {index!r}")
    return record.to_steps(HISTORY_STEPS, history_only=True)[index]


def rederive_prompt(step: NavigationStep) -> str:
    """The UI-Venus-1.5 navigation prompt of `step` (goal, step instruction, earlier steps)."""
    first = step.step_index - len(step.history)
    history = [(h.think, h.action) for h in step.history]
    return navigation_prompt(step.goal, history, step.platform, step.instruction, first_step=first)


def rederive_messages(step: NavigationStep, image_url: str) -> list[dict[str, Any]]:
    """OpenAI chat messages asking the judge to re-derive `step` from its plain screenshot."""
    return _messages(REBUILD_SYSTEM_PROMPT, image_url, rederive_prompt(step))


def parse_rederived(text: str, platform: str) -> NavStep:
    """The re-derived step in a judge's reply (JudgeReplyError when it is not one valid answer).

    >>> parse_rederived("<think>open it</think><action>Click(box=(5, 9))</action><conclusion>c</conclusion>",
    ...                 "mobile").action
    Click(box=(5, 9))
    """
    if not isinstance(text, str) or not text.strip():
        raise JudgeReplyError("empty reply")
    try:
        return parse_navigation(text.strip(), platform)  # type: ignore[arg-type]
    except ActionParseError as exc:
        raise JudgeReplyError(f"not a navigation answer: {exc}: {text[:120]!r}") from None

