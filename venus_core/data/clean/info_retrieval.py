"""reconstruct_info_retrieval: information-seeking episodes must end by giving the answer.

Why: UI-Venus-1.0 found trajectories for goals such as "How many unread messages do I have?"
that navigate to the answer and stop, so the model learns to find information and never report
it; they insert the answering step. Here a goal is information-seeking when it is a question
(question words in English or Chinese, or a question mark). An episode answers when some step is
Finished or CallUser with non-empty content. When the source provides the answer
(`Trajectory.meta["answer"]` or `provenance.extra["answer"]`), an empty final Finished gets the
answer as content, or a Finished(content=answer) step is appended on the last screen. Episodes
that cannot be fixed are kept, marked `meta["ir_unanswered"] = True` and counted (the scoring
stage's reachability judgement decides their fate); navigation-step records are left alone
(one step cannot gain a new step).
"""

from __future__ import annotations

import re
from typing import Any

from venus_core.actions import Finished, parse_action, render_action
from venus_core.data.clean.base import CLEAN_STEPS, AnyRecord, CleanOptions, StepOutput
from venus_core.data.schema import Trajectory, parse_record

_QUESTION_EN = re.compile(
    r"^\s*(what|which|who|whom|whose|when|where|why|how (many|much|long|old|far)|is there|are there|"
    r"do i have|does|tell me|find out|look up|check (what|whether|if|how))\b|\b(what is|what's|how many|how much)\b",
    re.IGNORECASE,
)
_QUESTION_ZH = re.compile(r"多少|几个|几条|什么|哪个|哪些|哪里|是否|吗[？?]?$|谁")


def is_info_goal(goal: str) -> bool:
    """True for goals that ask for information.

    >>> [is_info_goal(g) for g in ("How many unread messages are there", "Open settings", "Wi-Fi 是否已开启", "Turn on Wi-Fi?")]
    [True, False, True, True]
    """
    return bool(_QUESTION_EN.search(goal) or _QUESTION_ZH.search(goal) or goal.rstrip().endswith(("?", "？")))


def _answers(record: Trajectory) -> bool:
    for s in record.steps:
        if s.action.startswith(("Finished(", "CallUser(")):
            act = parse_action(s.action, record.platform)
            if str(getattr(act, "content", "") or "").strip():
                return True
    return False


def _source_answer(record: Trajectory) -> str | None:
    for value in (record.meta.get("answer"), record.provenance.extra.get("answer")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


@CLEAN_STEPS.register("reconstruct_info_retrieval")
def reconstruct_info_retrieval(records: list[AnyRecord], options: CleanOptions) -> StepOutput:
    """Insert the answering Finished step into information-seeking episodes that lack one."""
    out: list[AnyRecord] = []
    info = {"info_goals": 0, "already_answered": 0, "fixed": 0, "unfixable": 0}
    for r in records:
        if not isinstance(r, Trajectory) or not is_info_goal(r.goal):
            out.append(r)
            continue
        info["info_goals"] += 1
        if _answers(r):
            info["already_answered"] += 1
            out.append(r)
            continue
        answer = _source_answer(r)
        data: dict[str, Any] = r.model_dump(mode="json")
        if answer is None:
            info["unfixable"] += 1
            data["meta"] = {**data["meta"], "ir_unanswered": True}
            out.append(parse_record(data, where=f"reconstruct_info_retrieval of record {r.id!r}"))
            continue
        final = render_action(Finished(content=answer))
        last = data["steps"][-1]
        if last["action"].startswith("Finished("):
            last["action"] = final
        else:
            data["steps"].append(
                {
                    "image": last["image"],
                    "image_size": last["image_size"],
                    "think": "The answer to the question is now on the screen.",
                    "action": final,
                    "conclusion": f"Answered: {answer}",
                    "instruction": None,
                    "target_box": None,
                    "meta": {"inserted": "answer"},
                }
            )
        data["meta"] = {**data["meta"], "ir_answer_inserted": True}
        info["fixed"] += 1
        out.append(parse_record(data, where=f"reconstruct_info_retrieval of record {r.id!r}"))
    return StepOutput(out, changed=info["fixed"] + info["unfixable"], info=info)
